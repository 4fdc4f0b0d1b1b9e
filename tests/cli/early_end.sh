#!/usr/bin/env bash
# early_end.sh KVSIM: the ways a replay ends early (the synthetic workload, 4 engines).
# --max-sim-time-s: a partial report (complete false, run.end max-sim-time at the bound, the
# unfinished requests incomplete), identical on 1 and 2 threads; a bound past the end is a
# complete run equal to the unbounded one. SIGINT: exit 130, the report and the records still
# written, marked interrupted.
set -euo pipefail
kvsim=$1
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir early-end
dir=$work
args=(--quiet --engines 4)
"$kvsim" replay "${args[@]}" --threads 1 --max-sim-time-s 60 --report "$dir/b1.json"
"$kvsim" replay "${args[@]}" --threads 2 --max-sim-time-s 60 --report "$dir/b2.json"
"$kvsim" replay --quiet --prefill-engines 2 --decode-engines 2 --threads 1 --max-sim-time-s 40 \
  --report "$dir/d1.json"
"$kvsim" replay --quiet --prefill-engines 2 --decode-engines 2 --threads 2 --max-sim-time-s 40 \
  --report "$dir/d2.json"
"$kvsim" replay "${args[@]}" --threads 2 --max-sim-time-s 1e7 --report "$dir/far.json"
"$kvsim" replay "${args[@]}" --threads 2 --report "$dir/free.json"
# Invariant checks make the run slow enough to be interrupted half way on any machine.
set +e
"$kvsim" replay "${args[@]}" --threads 1 --check-invariants --report "$dir/int.json" \
  --requests-out "$dir/int.jsonl" &
pid=$!
sleep 1
kill -INT "$pid"
wait "$pid"
rc=$?
set -e
[ "$rc" -eq 130 ] || { echo "early_end: SIGINT: exit $rc, not 130" >&2; exit 1; }
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
r = {k: json.load(open(f"{d}/{k}.json")) for k in ("b1", "b2", "d1", "d2", "far", "free", "int")}
for k in r:
    r[k].pop("wall")
    r[k]["run"]["config"]["options"].pop("threads")
b = r["b1"]
if b["complete"] or b["run"]["end"] != {"reason": "max-sim-time", "sim_time_s": 60.0}:
    sys.exit(f"early_end: bounded run: complete {b['complete']}, end {b['run']['end']}")
if not 0 < b["requests"]["incomplete"] < b["requests"]["total"]:
    sys.exit(f"early_end: bounded run: {b['requests']}")
if r["b1"] != r["b2"]:
    sys.exit("early_end: the bounded run differs on 1 and 2 threads")
if r["d1"] != r["d2"] or r["d1"]["complete"] or r["d1"]["requests"]["incomplete"] == 0:
    sys.exit("early_end: the bounded disaggregated run is not partial or differs on 1 and 2 threads")
for k in ("far", "free"):
    r[k]["run"].pop("config")
if not r["far"]["complete"] or r["far"] != r["free"]:
    sys.exit("early_end: a bound past the end changed the report")
i = r["int"]
if i["complete"] or i["run"]["end"]["reason"] != "interrupted" or i["requests"]["incomplete"] == 0:
    sys.exit(f"early_end: interrupted run: complete {i['complete']}, end {i['run']['end']}")
lines = sum(1 for _ in open(f"{d}/int.jsonl"))
if lines != i["requests"]["total"]:
    sys.exit(f"early_end: interrupted run wrote {lines} records of {i['requests']['total']}")
print(f"early_end: bounded at 60 s ({b['requests']['completed']} of {b['requests']['total']} "
      f"completed, thread-independent), interrupted at {i['run']['end']['sim_time_s']:.1f} s "
      "with its report and records")
PY
