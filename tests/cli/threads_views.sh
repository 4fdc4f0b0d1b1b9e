#!/usr/bin/env bash
# threads_views.sh KVSIM ARGS...: `kvsim replay ARGS` under the exact and the delayed router view
# writes the same report (less "wall" and the thread count it records) and per-request records on
# 1, 2, 3 and 8 threads (issue 62: disaggregated, data-parallel and lockstep replays too). Exit 0
# printing "threads_views: exact and delayed each identical on 1, 2, 3 and 8 threads", or 1 saying
# what differs.
set -euo pipefail
kvsim=$1
shift
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir threads_views
strip() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r.pop("wall",None); r["run"]["config"]["options"].pop("threads",None); print(json.dumps(r,sort_keys=True))' "$1"; }
for view in exact delayed; do
  for t in 1 2 3 8; do
    KVSIM_REPLAY_OVERSUBSCRIBE=1 "$kvsim" replay --quiet "$@" --router-view "$view" --threads "$t" \
      --report "$work/r$t.json" --requests-out "$work/q$t.jsonl" > /dev/null
    strip "$work/r$t.json" > "$work/s$t.json"
  done
  for t in 2 3 8; do
    cmp -s "$work/q1.jsonl" "$work/q$t.jsonl" ||
      { echo "threads_views: $view: records differ on 1 and $t threads" >&2; exit 1; }
    cmp -s "$work/s1.json" "$work/s$t.json" ||
      { echo "threads_views: $view: reports differ on 1 and $t threads" >&2; exit 1; }
  done
done
echo "threads_views: exact and delayed each identical on 1, 2, 3 and 8 threads"
