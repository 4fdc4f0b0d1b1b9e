#!/usr/bin/env bash
# run.sh BUILD TARGET SECONDS [JOBS]: run fuzz target TARGET (built in BUILD with -DKVSIM_FUZZ=ON)
# for SECONDS on its seed corpus: the files kept in tests/fuzz/corpus/TARGET (hand-made seeds and
# every input that once broke a guarantee), the test fixtures and bad inputs of its format, and
# the first lines of the shared traces beside the checkout when they are there (never copied into
# the repository: assembled here, in a scratch directory under $TMPDIR). Exits with the fuzzer's
# status: 0 when nothing was found; a finding is written to $TMPDIR/kvsim-fuzz-TARGET-findings/.
set -euo pipefail
build=${1:?build dir}; target=${2:?target}; seconds=${3:?seconds}; jobs=${4:-1}
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/../.." && pwd)
shared=$src/../shared/traces
inputs=$src/tests/inputs
exe=$build/tests/fuzz/$target
[ -x "$exe" ] || { echo "run.sh: $exe is not built (cmake --build $build --target fuzz_targets)" >&2; exit 2; }
exe=$(cd "$(dirname "$exe")" && pwd)/$target # the fuzzer runs in the scratch directory
work=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-fuzz-$target.XXXXXX")
trap 'rm -rf "$work"' EXIT
corpus=$work/corpus
mkdir -p "$corpus"
[ -d "$here/corpus/$target" ] && cp "$here/corpus/$target"/* "$corpus"/ 2>/dev/null || true
seed() { # seed FILE...: copy the existing ones
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$corpus/$(echo "$f" | tr / _)"; done; return 0; }
head_seed() { # head_seed N FILE: its first N lines
  [ -f "$2" ] && head -n "$1" "$2" > "$corpus/head$1_$(basename "$2")"; return 0; }
case $target in
fuzz_trace_mooncake)
  seed "$inputs"/*.jsonl "$inputs"/bad/*.jsonl
  for n in 1 5; do head_seed $n "$shared/mooncake_trace_1000.jsonl"; head_seed $n "$shared/conversation_trace.jsonl"
    head_seed $n "$shared/synthetic_trace.jsonl"; done ;;
fuzz_trace_azure)
  seed "$inputs"/*.csv "$inputs"/bad/*.csv
  for n in 2 6; do head_seed $n "$shared/AzureLLMInferenceTrace_conv.csv"
    head_seed $n "$shared/AzureLLMInferenceTrace_code.csv"; done ;;
fuzz_trace_vllm_run)
  seed "$inputs"/vllm-run/*/requests.jsonl
  for d in "$shared"/groundtruth/*/; do head_seed 4 "$d/requests.jsonl"; done ;;
fuzz_scenario)
  seed "$src"/tests/conformance/*.json "$src"/tests/conformance-invalid/*.json
  seed "$src"/tests/regressions/*.json ;;
fuzz_engine_args)
  seed "$inputs"/*engine_args*.json "$inputs"/decode_queue_limit.json "$inputs"/bad/engine_args_*.json ;;
fuzz_config)
  seed "$src"/tests/golden/config-out-*.json "$inputs"/step_model.json "$inputs"/bad/config_*.json
  seed "$inputs"/bad/step_model_*.json "$inputs"/bad/speedup_ratio_*.json ;;
fuzz_sweep_spec) ;; # its hand-made seeds only (the tests write their specs at configure time)
fuzz_validate_run) # a recorded run: META \f CONFIG \f REQUESTS (fuzz_validate_run.c)
  run_seed() { # run_seed DIR NAME LINES: DIR's meta.json, config.json and first LINES requests
    [ -f "$1/meta.json" ] && [ -f "$1/config.json" ] || return 0
    { cat "$1/meta.json"; printf '\f'; cat "$1/config.json"; printf '\f'
      head -n "$3" "$1/requests.jsonl" 2>/dev/null; } > "$corpus/run_$2"; }
  for d in "$inputs"/vllm-run/*/; do run_seed "$d" "$(basename "$d")" 100; done
  for d in "$shared"/groundtruth/*/; do run_seed "$d" "groundtruth_$(basename "$d")" 4; done ;;
*) echo "run.sh: unknown target $target" >&2; exit 2 ;;
esac
findings=${TMPDIR:-/tmp}/kvsim-fuzz-$target-findings
mkdir -p "$findings"
echo "run.sh: $target for ${seconds}s on $(ls "$corpus" | wc -l) seeds"
# -timeout: one input over 10 s is a hang; -rss_limit_mb: a reader must stay bounded. Several
# jobs write their logs (fuzz-N.log) in the scratch directory, printed at the end.
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
status=0
(cd "$work" && "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -max_len=65536 \
  -artifact_prefix="$findings/" -print_final_stats=1 "${parallel[@]}" "$corpus") > "$work/out.log" 2>&1 ||
  status=$?
tail -n 25 "$work/out.log"
for f in "$work"/fuzz-*.log; do [ -f "$f" ] && tail -n 5 "$f"; done
rmdir "$findings" 2>/dev/null || echo "run.sh: findings kept in $findings"
exit "$status"
