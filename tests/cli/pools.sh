#!/usr/bin/env bash
# pools.sh KVSIM: the report's per-engine and per-pool figures add up. Aggregated, with
# rejections (--max-model-len): engines' completed and rejected sum to the report's, the one
# pool equals their sum. Disaggregated: each prefill engine counts the prefills it served (all
# of them, in the prefill pool), the decode pool the completed requests and their outputs, and
# the pools' busy seconds sum to busy_engine_s.
set -euo pipefail
kvsim=$1
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir pools
dir=$work
"$kvsim" replay --quiet --engines 3 --threads 2 --max-model-len 4000 --report "$dir/a.json"
"$kvsim" replay --quiet --prefill-engines 2 --decode-engines 3 --threads 2 --report "$dir/d.json"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
a = json.load(open(f"{d}/a.json"))
eng, pools = a["engines"], a["pools"]
if sum(e["completed"] for e in eng) != a["requests"]["completed"]:
    sys.exit("pools: the engines' completed do not sum to the report's")
if sum(e["rejected"] for e in eng) != a["requests"]["rejected"] or a["requests"]["rejected"] == 0:
    sys.exit(f"pools: the engines' rejections {[e['rejected'] for e in eng]} vs {a['requests']['rejected']}")
if list(pools) != ["aggregated"] or pools["aggregated"]["engines"] != 3:
    sys.exit(f"pools: aggregated run has pools {list(pools)}")
for k in ("completed", "input_tokens", "output_tokens", "rejected", "preemptions", "steps"):
    if pools["aggregated"][k] != sum(e[k] for e in eng):
        sys.exit(f"pools: the pool's {k} is not its engines' sum")
r = json.load(open(f"{d}/d.json"))
p, dec = r["pools"]["prefill"], r["pools"]["decode"]
if [e["role"] for e in r["engines"]] != ["prefill"] * 2 + ["decode"] * 3:
    sys.exit("pools: engine roles")
served = r["requests"]["completed"] + r["requests"].get("aborted", 0)
if p["completed"] != served or p["output_tokens"] != 0 or p["cached_tokens"] != r["tokens"]["cached"]:
    sys.exit(f"pools: prefill pool {p} vs {r['requests']}")
if dec["completed"] != r["requests"]["completed"] or dec["output_tokens"] != r["tokens"]["output"]:
    sys.exit(f"pools: decode pool {dec}")
if abs(p["busy_s"] + dec["busy_s"] - r["busy_engine_s"]) > 1e-6:
    sys.exit("pools: the pools' busy seconds do not sum to busy_engine_s")
print(f"pools: per-engine and per-pool figures add up ({a['requests']['rejected']} rejections; "
      f"{p['completed']} prefills on 2 engines, {dec['completed']} decodes on 3)")
PY
