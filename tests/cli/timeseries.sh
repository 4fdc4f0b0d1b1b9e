#!/usr/bin/env bash
# timeseries.sh KVSIM ARGS...: `kvsim replay ARGS --timeseries-out` on 1 and 2 threads must
# give the same CSV, with a row per interval and engine plus an "all" row that sums them, whose
# generation tokens add up to the output tokens the report counts (every request completes) and
# whose preemptions add up to the report's. Exit 0, or 1 saying what is wrong.
set -euo pipefail
kvsim=$1
shift
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir timeseries
dir=$work
"$kvsim" replay --quiet "$@" --threads 1 --timeseries-out "$dir/t1.csv" --report "$dir/r1.json"
"$kvsim" replay --quiet "$@" --threads 2 --timeseries-out "$dir/t2.csv" --report "$dir/r2.json"
cmp -s "$dir/t1.csv" "$dir/t2.csv" || { echo "timeseries: 1 and 2 threads differ" >&2; exit 1; }
python3 - "$dir" <<'PY'
import csv, json, sys
d = sys.argv[1]
rep = json.load(open(f"{d}/r1.json"))
rows = list(csv.DictReader(open(f"{d}/t1.csv")))
engines = sorted({r["engine"] for r in rows} - {"all"}, key=int)
times = sorted({float(r["time_s"]) for r in rows})
if len(rows) != len(times) * (len(engines) + 1):
    sys.exit(f"timeseries: {len(rows)} rows for {len(times)} intervals x {len(engines)} engines + all")
interval = times[0]
if any(abs(t - (i + 1) * interval) > 1e-6 for i, t in enumerate(times)):
    sys.exit("timeseries: the intervals are not evenly spaced")
sums = ("running", "waiting", "kv_used_blocks", "preemptions", "pinned_blocks")
by_time = {}
for r in rows:
    by_time.setdefault(r["time_s"], []).append(r)
for t, at in by_time.items():
    total = next(r for r in at if r["engine"] == "all")
    for col in sums:
        if int(total[col]) != sum(int(r[col]) for r in at if r["engine"] != "all"):
            sys.exit(f"timeseries: at {t} s the all row's {col} is not the engines' sum")
    for r in at:
        if not 0.0 <= float(r["kv_usage"]) <= 1.0:
            sys.exit(f"timeseries: kv_usage {r['kv_usage']} outside [0, 1]")
all_rows = [r for r in rows if r["engine"] == "all"]
gen = round(sum(float(r["generation_tokens_per_s"]) * interval for r in all_rows))
pre = sum(int(r["preemptions"]) for r in all_rows)
if rep["requests"]["completed"] != rep["requests"]["total"]:
    sys.exit("timeseries: the run must complete every request for the token check")
if gen != rep["tokens"]["output"] or pre != rep["preemptions"]:
    sys.exit(f"timeseries: {gen} tokens, {pre} preemptions; the report has "
             f"{rep['tokens']['output']} and {rep['preemptions']}")
if all(int(r["running"]) == 0 for r in all_rows):
    sys.exit("timeseries: nothing ever ran")
print(f"timeseries: {len(times)} intervals x {len(engines)} engines agree with the report "
      f"({gen} tokens, {pre} preemptions), identical on 2 threads")
PY
