#!/usr/bin/env bash
# router_view.sh KVSIM [MOONCAKE_TRACE]: what the router sees (issue 61). Under each view (exact;
# delayed at 0, 5 and 50 ms; delayed with predict-on-route) and each router that has one (kv,
# least-loaded; and a disaggregated run's pools), the report (less "wall") and the per-request
# records are identical on 1, 2 and 8 threads; the delayed views change decisions (a report
# differs from the exact view's), and the report records the view. Exit 0, or 1 saying what
# is wrong.
set -euo pipefail
kvsim=$1
trace=${2:-}
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir router_view
dir=$work
src=(--synthetic-sessions 120 --synthetic-prefix-groups 3)
[ -n "$trace" ] && [ -f "$trace" ] && src=(--trace "$trace" --max-requests 400)
strip() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r.pop("wall",None); r["run"]["config"]["options"].pop("threads",None); print(json.dumps(r,sort_keys=True))' "$1"; }
n=0
for router in kv least-loaded; do
  for view in "exact" "delayed --kv-event-delay-ms 0" "delayed" "delayed --kv-event-delay-ms 50" \
    "delayed --router-predict-ttl-s 2"; do
    [ "$router" = least-loaded ] && [[ $view == *predict* ]] && continue
    tag="$router-${view// /_}"
    for t in 1 2 8; do
      # shellcheck disable=SC2086
      "$kvsim" replay --quiet --engines 4 --router "$router" --router-view $view --threads "$t" \
        "${src[@]}" --report "$dir/r$t.json" --requests-out "$dir/q$t.jsonl"
      strip "$dir/r$t.json" > "$dir/s$t.json"
    done
    for t in 2 8; do
      cmp -s "$dir/q1.jsonl" "$dir/q$t.jsonl" ||
        { echo "router_view: $tag: records differ on 1 and $t threads" >&2; exit 1; }
      cmp -s "$dir/s1.json" "$dir/s$t.json" ||
        { echo "router_view: $tag: reports differ on 1 and $t threads" >&2; exit 1; }
    done
    cp "$dir/s1.json" "$dir/$tag.json"
    n=$((n + 1))
  done
  cmp -s "$dir/$router-exact.json" "$dir/$router-delayed.json" &&
    { echo "router_view: $router: the delayed view decided nothing differently" >&2; exit 1; }
done
python3 - "$dir/kv-delayed_--router-predict-ttl-s_2.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["run"].get("router_view")
want = {"view": "delayed", "kv_event_delay_ms": 5.0, "predict_ttl_s": 2.0}
if v != want:
    sys.exit("router_view: the report records %r, not %r" % (v, want))
PY
# the delayed view reads the pools less what the router has not heard of yet; through the event
# indexer (KVSIM_REPLAY_VIEW_INDEXER=1) every decision is the same: kv with prediction, least-loaded
# with async scheduling, a disaggregated run; a 2 s delay, so that session turns arrive while
# their parents' blocks are still unheard of (at 5 ms hardly any prompt meets an unheard block)
for args in "--router kv --router-predict-ttl-s 2" "--router kv --kv-event-delay-ms 2000" \
  "--router least-loaded --async-scheduling" "--prefill-engines 2 --decode-engines 2"; do
  for env in 0 1; do
    # shellcheck disable=SC2086
    KVSIM_REPLAY_VIEW_INDEXER=$env "$kvsim" replay --quiet --router-view delayed --threads 2 $args \
      "${src[@]}" --requests-out "$dir/i$env.jsonl"
  done
  cmp -s "$dir/i0.jsonl" "$dir/i1.jsonl" ||
    { echo "router_view: $args: the pools and the indexer decide differently" >&2; exit 1; }
done
# data parallelism: the router over deployments (each its ranks' best overlap and summed loads),
# vLLM's DP load balancer among the ranks, on 1, 2 and 8 threads
for t in 1 2 8; do
  "$kvsim" replay --quiet --engines 2 --data-parallel-size 2 --router-view delayed \
    --router-predict-ttl-s 2 --threads "$t" "${src[@]}" --requests-out "$dir/p$t.jsonl" \
    --report "$dir/pr$t.json"
done
for t in 2 8; do
  cmp -s "$dir/p1.jsonl" "$dir/p$t.jsonl" ||
    { echo "router_view: data parallel: records differ on 1 and $t threads" >&2; exit 1; }
done
# a disaggregated run: each pool's router, delayed, on 1 and 2 threads
for t in 1 2; do
  "$kvsim" replay --quiet --prefill-engines 2 --decode-engines 2 --router-view delayed \
    --threads "$t" "${src[@]}" --requests-out "$dir/d$t.jsonl" --report "$dir/dr$t.json"
done
cmp -s "$dir/d1.jsonl" "$dir/d2.jsonl" ||
  { echo "router_view: disaggregated: records differ on 1 and 2 threads" >&2; exit 1; }
echo "router_view: $n view x router runs identical on 1, 2 and 8 threads; the delayed view decides differently; the report records it; the pools and the indexer agree; data-parallel and disaggregated too"
