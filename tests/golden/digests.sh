#!/usr/bin/env bash
# digests.sh KVSIM [SHARED_TRACES_DIR] - one sha256 line per deterministic output of kvsim:
# replay reports (JSON without the machine-dependent "wall" object) and per-request records for
# a fixed set of configurations, the conformance and regression runs step by step, and the soak
# summaries and scenarios. Run it before and after a change that must not change behaviour
# (a refactor, an optimization) and diff the two outputs: any line that differs names what
# changed. Needs python3 (to drop "wall"). Prints "digests: N outputs" last.
set -euo pipefail
kvsim=$(realpath "$1")
traces=${2:-$(dirname "$0")/../../../shared/traces}
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
emit() { printf '%s  %s\n' "$(sha256sum < "$2" | cut -c1-16)" "$1"; n=$((n + 1)); }
strip_wall() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r.pop("wall",None); print(json.dumps(r,sort_keys=True))' "$1"
}
replay() { # name, args...
  local name=$1; shift
  "$kvsim" replay --quiet --report "$work/r.json" --requests-out "$work/q.jsonl" "$@" \
    > "$work/out.txt" 2>&1 || echo "exit $?" >> "$work/out.txt"
  strip_wall "$work/r.json" > "$work/r.min.json" 2>/dev/null || cp "$work/out.txt" "$work/r.min.json"
  emit "replay $name report" "$work/r.min.json"
  emit "replay $name requests" "$work/q.jsonl"
}
replay default
replay default-t1 --threads 1
replay default-rr --router round-robin --threads 2
replay default-ll --router least-loaded
replay default-events --kv-index events
replay default-small --num-gpu-blocks 600 --max-num-seqs 32 --block-size 32
replay offload --threads 2 --g2-blocks 3000 --g3-blocks 20000 --num-gpu-blocks 1500 \
  --offload-fail-rate 0.02
replay offload-pool --threads 2 --g2-blocks 3000 --g3-blocks 20000 --num-gpu-blocks 1500 \
  --offload-executor pool --g3-write-through
replay g3-shared --threads 2 --g2-blocks 3000 --g3-blocks 20000 --g3-shared \
  --num-gpu-blocks 1500 --router round-robin
replay config --config "$src/tests/inputs/step_model.json"
replay sessions --trace "$src/tests/inputs/mooncake_sessions.jsonl"
replay reject --trace "$src/tests/inputs/replay_reject.jsonl"
replay azure-small --trace "$src/tests/inputs/azure_small.csv"
if [ -d "$traces" ]; then
  for r in kv round-robin least-loaded; do
    replay mooncake1000-$r --trace "$traces/mooncake_trace_1000.jsonl" --engines 8 --router $r
  done
  replay conversation --trace "$traces/conversation_trace.jsonl" --engines 8 --threads 2
  replay azure-code --trace "$traces/AzureLLMInferenceTrace_code.csv" --engines 4
  replay azure-conv --trace "$traces/AzureLLMInferenceTrace_conv.csv" --engines 4 \
    --max-requests 5000
  replay synthetic-trace --trace "$traces/synthetic_trace.jsonl" --engines 8 --num-gpu-blocks 4000 \
    --g2-blocks 8000 --g3-blocks 30000
else
  echo "digests: no shared traces at $traces: trace replays skipped" >&2
fi
# Conformance and regressions, step by step.
for f in "$src"/tests/conformance/*.json "$src"/tests/regressions/*.json "$src"/tests/regressions/*/*.json; do
  "$kvsim" conform --trace "$f" > "$work/c.txt" 2>&1 || true
  emit "conform $(basename "$f")" "$work/c.txt"
done
# Soaks: the summary without its timing, and every seed's scenario.
soak() { # name, args...
  local name=$1; shift
  rm -rf "$work/soak"
  "$kvsim" soak --keep --out "$work/soak" "$@" > "$work/s.txt" 2>&1 || true
  sed -E -e "s#$work#OUT#g" -e 's/ in [0-9.]+ s \([0-9]+ transitions\/s\)//' "$work/s.txt" > "$work/s.min.txt"
  emit "soak $name summary" "$work/s.min.txt"
  (cd "$work/soak" && cat $(ls | sort)) > "$work/s.all" 2>/dev/null || : > "$work/s.all"
  emit "soak $name scenarios" "$work/s.all"
}
soak small --matrix small --seeds 1000
soak full --matrix full --seeds 2000
soak legacy --seeds 300 --legacy-partial-alloc
soak offload --seeds 300 --set offload=true --set policy=fcfs --set copy_pct=800
"$kvsim" pool-demo > "$work/p.txt" 2>&1 || true
emit "pool-demo" "$work/p.txt"
echo "digests: $n outputs"
