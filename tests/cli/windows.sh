#!/usr/bin/env bash
# windows.sh KVSIM ARGS...: `kvsim replay ARGS` with windows (arrivals routed ahead of their
# instant, as far as what the router sees allows: docs/replay.md, "Threads") must write the same
# report (its "wall" object aside: how the run ran) and per-request records as one arrival
# instant an epoch (KVSIM_REPLAY_WINDOWS=0), on 1, 2, 3 and 8 threads, and must have routed some
# arrivals ahead. Exit 0 printing "windows: N of M arrivals routed ahead, identical on 1, 2, 3
# and 8 threads", or 1 saying what differs.
set -euo pipefail
kvsim=$1
shift
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir windows
args=("$@")
for t in 1 2 3 8; do
  KVSIM_REPLAY_WINDOWS=1 "$kvsim" replay --quiet "${args[@]}" --threads "$t" \
    --report "$work/r-on$t.json" --requests-out "$work/q-on$t.jsonl" > /dev/null
done
KVSIM_REPLAY_WINDOWS=0 "$kvsim" replay --quiet "${args[@]}" --threads 2 \
  --report "$work/r-off.json" --requests-out "$work/q-off.jsonl" > /dev/null
for t in 1 2 3 8; do
  cmp -s "$work/q-on$t.jsonl" "$work/q-off.jsonl" ||
    { echo "windows: per-request records differ ($t threads against none)" >&2; exit 1; }
done
python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
def load(f):  # the report less "wall" and the thread count it records
    r = json.load(open(f))
    r["run"]["config"]["options"].pop("threads", None)
    return r
off = load(f"{d}/r-off.json")
w_off = off.pop("wall")
if w_off.get("arrivals_routed_ahead", 0) != 0:
    sys.exit("windows: arrivals routed ahead with KVSIM_REPLAY_WINDOWS=0")
ahead, epochs = 0, 0
for t in (1, 2, 3, 8):  # the kv router with route preparation (2+ threads) has no windows
    on = load(f"{d}/r-on{t}.json")
    w = on.pop("wall")
    if on != off:
        keys = sorted(k for k in set(on) | set(off) if on.get(k) != off.get(k))
        sys.exit(f"windows: the reports differ on {t} threads in {', '.join(keys)}")
    if w["arrivals_routed_ahead"] > ahead:
        ahead, epochs = w["arrivals_routed_ahead"], w["epochs"]
if not ahead:
    sys.exit("windows: no arrival routed ahead (the comparison shows nothing)")
print(f"windows: {ahead} of {off['requests']['total']} arrivals routed ahead "
      f"({epochs} epochs, {w_off['epochs']} without), identical on 1, 2, 3 and 8 threads")
PY
