#!/usr/bin/env bash
# one_choice.sh KVSIM ARGS...: a router with one engine (or one pool engine) to choose decides
# nothing from what it sees: under the delayed view (run without its machinery) the per-request
# records are those of the exact view, and the report still records the delayed view. Exit 0
# printing "one_choice: the delayed view's records are the exact view's; the report says delayed".
set -euo pipefail
kvsim=$1
shift
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir one_choice
for view in exact delayed; do
  "$kvsim" replay --quiet "$@" --router-view "$view" --report "$work/r-$view.json" \
    --requests-out "$work/q-$view.jsonl" > /dev/null
done
cmp -s "$work/q-exact.jsonl" "$work/q-delayed.jsonl" ||
  { echo "one_choice: the records differ between the views" >&2; exit 1; }
python3 - "$work/r-delayed.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["run"].get("router_view") or {}
if v.get("view") != "delayed":
    sys.exit(f"one_choice: the report records {v!r}, not the delayed view")
PY
echo "one_choice: the delayed view's records are the exact view's; the report says delayed"
