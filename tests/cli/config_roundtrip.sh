#!/usr/bin/env bash
# config_roundtrip.sh KVSIM ARGS...: `kvsim replay ARGS --config-out` then `kvsim replay
# --config` of what it wrote must give the same report (everything but "wall"), and an option
# after --config must override the file's. Exit 0, or 1 saying what differs.
set -euo pipefail
kvsim=$1
shift
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir config-roundtrip
dir=$work
"$kvsim" replay --quiet "$@" --config-out "$dir/c.json" --report "$dir/r1.json"
"$kvsim" replay --quiet --config "$dir/c.json" --report "$dir/r2.json"
"$kvsim" replay --quiet --config "$dir/c.json" --seed 99 --report "$dir/r3.json"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
r1, r2, r3 = (json.load(open(f"{d}/r{i}.json")) for i in (1, 2, 3))
for r in (r1, r2, r3):
    r.pop("wall")
if r1 != r2:
    diff = [k for k in r1 if r1[k] != r2.get(k)]
    sys.exit(f"config_roundtrip: the replay from --config differs in {diff}")
if r3["run"]["seed"] != 99 or r3["run"]["config"]["options"]["seed"] != "99":
    sys.exit("config_roundtrip: --seed after --config did not override the file's seed")
print(f"config_roundtrip: identical reports ({r1['requests']['completed']} requests); "
      "an option after --config overrides it")
PY
