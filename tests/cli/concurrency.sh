#!/usr/bin/env bash
# concurrency.sh KVSIM: --replay-concurrency N, the closed loop (Dynamo's semantics). On a
# trace of independent requests: N requests in flight from the first arrival on and never more,
# each later one sent at the instant another finishes, in trace order, whatever the timestamps;
# identical on 1 and 2 threads. On the synthetic sessions with N = 1: one session at a time, so
# no two requests ever overlap. Exit 0, or 1 saying what is wrong.
set -euo pipefail
kvsim=$1
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir concurrency
dir=$work
python3 - "$dir/t.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as f:
    for i in range(300):  # timestamps far apart: an open loop would never overlap them
        n = rng.randint(50, 3000)
        f.write(json.dumps({"timestamp": i * 60000, "input_length": n,
                            "output_length": rng.randint(1, 300),
                            "hash_ids": [rng.randint(1, 40) for _ in range((n + 511) // 512)]})
                + "\n")
PY
args=(--quiet --engines 3 --trace-block-size 512 --replay-concurrency 8)
"$kvsim" replay "${args[@]}" --threads 1 "$dir/t.jsonl" --requests-out "$dir/q1.jsonl" --report "$dir/r1.json"
"$kvsim" replay "${args[@]}" --threads 2 "$dir/t.jsonl" --requests-out "$dir/q2.jsonl" --report "$dir/r2.json"
cmp -s "$dir/q1.jsonl" "$dir/q2.jsonl" || { echo "concurrency: 1 and 2 threads differ" >&2; exit 1; }
"$kvsim" replay --quiet --engines 2 --replay-concurrency 1 --requests-out "$dir/s.jsonl" --report "$dir/s.json"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(f"{d}/q1.jsonl")]
if any(r["status"] != "completed" for r in recs):
    sys.exit("concurrency: a request did not complete")
arr = [r["arrival_ms"] for r in recs]
fin = sorted(r["finish_ms"] for r in recs)
if arr[:8] != [0.0] * 8:
    sys.exit(f"concurrency: the first 8 do not start together at 0: {arr[:8]}")
if any(b < a for a, b in zip(arr, arr[1:])):
    sys.exit("concurrency: requests were not sent in trace order")
finishes = set(fin)
late = [a for a in arr[8:] if a not in finishes]
if late:
    sys.exit(f"concurrency: {len(late)} requests were not sent at another's finish, e.g. {late[0]}")
events = sorted([(r["arrival_ms"], 1) for r in recs] + [(r["finish_ms"], -1) for r in recs],
                key=lambda e: (e[0], e[1]))
live = peak = 0
for _, k in events:
    live += k
    peak = max(peak, live)
if peak != 8:
    sys.exit(f"concurrency: up to {peak} requests in flight, not 8")
rep = json.load(open(f"{d}/r1.json"))
if rep["requests"]["peak_in_flight"] != 8:
    sys.exit(f"concurrency: the report's peak_in_flight is {rep['requests']['peak_in_flight']}, not 8")
s = [json.loads(l) for l in open(f"{d}/s.jsonl")]
spans = sorted((r["arrival_ms"], r["finish_ms"]) for r in s if r["status"] == "completed")
overlap = sum(1 for (a0, f0), (a1, f1) in zip(spans, spans[1:]) if a1 < f0)
if overlap or len(spans) != len(s):
    sys.exit(f"concurrency 1: {overlap} overlapping requests of {len(spans)}")
print(f"concurrency: 8 in flight from t=0, {len(arr) - 8} sent at finishes in trace order, "
      f"thread-independent; one session at a time with 1 ({len(spans)} requests)")
PY
