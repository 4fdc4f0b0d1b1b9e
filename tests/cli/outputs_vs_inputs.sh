#!/usr/bin/env bash
# outputs_vs_inputs.sh KVSIM SRC_TESTS: no command writes an output over one of its inputs, and
# sweep and plan check --out before any point runs (issue 64). Every input is a copy in a
# temporary directory; each refusal must exit 2 before any work, name both paths, and leave the
# input byte for byte as it was. Prints "outputs_vs_inputs: N refusals, every input intact".
set -u
kvsim=$(realpath "$1")
src=$(realpath "$2")
. "$src/cli/workdir.sh"
kvsim_test_workdir outputs
cd "$work"
n=0
fail() {
  echo "outputs_vs_inputs: $*"
  exit 1
}
# refuse REGEX CMD...: exit 2, the message matches, every file under in/ unchanged
refuse() {
  local re=$1
  shift
  local before after out rc
  before=$(find in -type f -exec sha256sum {} + | sort)
  out=$("$@" 2>&1)
  rc=$?
  after=$(find in -type f -exec sha256sum {} + | sort)
  [ "$rc" -eq 2 ] || fail "'$*': exit $rc, not 2: $out"
  [[ $out =~ $re ]] || fail "'$*': the message does not match '$re': $out"
  [ "$before" = "$after" ] || fail "'$*': an input changed"
  n=$((n + 1))
}
mkdir -p in
printf '{"timestamp": %d, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]}\n' \
  0 100 200 300 >in/t.jsonl
ln in/t.jsonl in/hard.jsonl
echo '{"max_num_seqs": 64}' >in/args.json
cp -r "$src/inputs/vllm-run/ok" in/run
# a polynomial step model: validate and calibrate read nothing else
echo '{"step_model": {"prefill_ms": [0, 0.001, 1], "decode_ms": [0, 0.0001, 5], "decode_floor_ms": 0}}' >in/poly.json

msg="an output never overwrites an input"
refuse "option --requests-out: 'in/t.jsonl' is the trace \\(in/t.jsonl\\): $msg" \
  "$kvsim" replay in/t.jsonl --requests-out in/t.jsonl --quiet
refuse "option --report: './in/t.jsonl' is the trace" \
  "$kvsim" replay in/t.jsonl --report ./in/t.jsonl --quiet
refuse "option --html: 'in/hard.jsonl' is the trace \\(in/t.jsonl\\)" \
  "$kvsim" replay in/t.jsonl --html in/hard.jsonl --quiet
refuse "option --config-out: 'in/args.json' is --engine-args \\(in/args.json\\)" \
  "$kvsim" replay in/t.jsonl --engine-args in/args.json --config-out in/args.json --quiet
refuse "option --timeseries-out: 'in/poly.json' is --config" \
  "$kvsim" replay in/t.jsonl --config in/poly.json --timeseries-out in/poly.json --quiet

inside="is inside the recorded run \\(in/run\\): an output is never written into an input"
refuse "option --report: 'in/run/config.json' $inside" \
  "$kvsim" validate in/run --config in/poly.json --report in/run/config.json --quiet
refuse "option --requests-out: 'in/run/requests.jsonl' $inside" \
  "$kvsim" validate in/run --config in/poly.json --requests-out in/run/requests.jsonl --quiet
refuse "option --report: 'in/run/new.json' $inside" \
  "$kvsim" validate in/run --config in/poly.json --report in/run/new.json --quiet
refuse "option --report: 'in/poly.json' is --config" \
  "$kvsim" validate in/run --config in/poly.json --report in/poly.json --quiet
refuse "option --output: 'in/run/meta.json' $inside" \
  "$kvsim" calibrate in/run -o in/run/meta.json

cp "$src/soak/invariant-waiting-holds-blocks.json" in/s.json
refuse "kvsim minimize: option --output: 'in/s.json' is the scenario \\(in/s.json\\): $msg" \
  "$kvsim" minimize in/s.json -o in/s.json

# sweep and plan: --out checked before any point runs
mkdir -p in/D
cp in/t.jsonl in/D/rows.jsonl
refuse "kvsim sweep: option --out: 'in/D/rows.jsonl' is the trace \\(in/D/rows.jsonl\\)" \
  "$kvsim" sweep in/D/rows.jsonl --grid engines=1,2 --out in/D --quiet
refuse "kvsim plan: option --out: 'in/D/rows.jsonl' is the trace" \
  "$kvsim" plan in/D/rows.jsonl --min engines=1..2 --attainment 50 --slo-ttft-ms 1000 \
  --out in/D --quiet
mkdir -p in/A
cp in/args.json in/A/rows.csv
refuse "kvsim sweep: option --out: 'in/A/rows.csv' is --engine-args \\(in/A/rows.csv\\)" \
  "$kvsim" sweep in/t.jsonl --engine-args in/A/rows.csv --grid engines=1,2 --out in/A --quiet
mkdir -p in/R/reports
cp in/t.jsonl in/R/reports/t.jsonl
refuse "the trace \\(in/R/reports/t.jsonl\\) is inside in/R/reports, where the command writes" \
  "$kvsim" sweep in/R/reports/t.jsonl --grid engines=1,2 --out in/R --quiet
refuse "kvsim sweep: option --out: an empty directory name" \
  "$kvsim" sweep in/t.jsonl --grid engines=1,2 --out "" --quiet
long=$work/$(printf 'd%.0s' $(seq 4070))
refuse "kvsim sweep: option --out: '.*' is too long: the paths formed in it would be [0-9]+ bytes" \
  "$kvsim" sweep in/t.jsonl --grid engines=1,2 --out "$long" --quiet
mkdir -p E/rows.csv
refuse "kvsim sweep: option --out: E/rows.csv: cannot open for writing: Is a directory" \
  "$kvsim" sweep in/t.jsonl --grid engines=1,2 --out E --quiet
[ -z "$(ls E/reports)" ] || fail "a point ran although E/rows.csv cannot be written"
refuse "kvsim plan: option --out: E/rows.csv: cannot open for writing" \
  "$kvsim" plan in/t.jsonl --min engines=1..2 --attainment 50 --slo-ttft-ms 1000 --out E --quiet

# what must still work: outputs beside the inputs, a report on standard output
"$kvsim" replay in/t.jsonl --report out.json --requests-out out.jsonl --quiet ||
  fail "a replay writing beside its inputs failed"
"$kvsim" validate in/run --config in/poly.json --report v.json --quiet ||
  fail "a validate writing outside the run failed"
echo "outputs_vs_inputs: $n refusals, every input intact"
