#!/usr/bin/env bash
# fast_path.sh KVSIM ARGS...: `kvsim replay ARGS` with the decode fast path on (the default)
# and off must write the same report (its "wall" object aside: how the run ran; and the recorded
# configuration, which names the option when off), the same
# per-request records and the same time series, and the fast path must have applied some steps.
# Exit 0 printing "fast path: N of M steps in bulk, identical", or 1 saying what differs.
set -euo pipefail
kvsim=$1
shift
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir fast-path
dir=$work
for mode in on off; do
  "$kvsim" replay --quiet "$@" --decode-fast-path $mode --report "$dir/r-$mode.json" \
    --requests-out "$dir/q-$mode.jsonl" --timeseries-out "$dir/t-$mode.csv" \
    --timeseries-interval-ms 500
done
cmp -s "$dir/q-on.jsonl" "$dir/q-off.jsonl" || { echo "fast path: per-request records differ" >&2; exit 1; }
cmp -s "$dir/t-on.csv" "$dir/t-off.csv" || { echo "fast path: time series differ" >&2; exit 1; }
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
on, off = (json.load(open(f"{d}/r-{m}.json")) for m in ("on", "off"))
fast_on, fast_off = (r.pop("wall")["decode_fast_path_steps"] for r in (on, off))
# The configuration the report records names the option when it is off.
if off["run"]["config"]["options"].pop("decode-fast-path", None) != "off":
    sys.exit("fast path: the report's configuration does not say the fast path was off")
if on != off:
    keys = sorted(k for k in set(on) | set(off) if on.get(k) != off.get(k))
    sys.exit(f"fast path: the reports differ in {', '.join(keys)}")
if fast_off != 0:
    sys.exit(f"fast path: {fast_off} steps in bulk with --decode-fast-path off")
if fast_on == 0:
    sys.exit("fast path: no step in bulk (the comparison shows nothing)")
print(f"fast path: {fast_on} of {on['timing']['steps']} steps in bulk, identical")
PY
