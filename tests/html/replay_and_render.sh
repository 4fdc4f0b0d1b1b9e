#!/usr/bin/env bash
# replay_and_render.sh KVSIM ARGS...: `kvsim replay ARGS --html report.html` (in a temporary directory), then the
# headless Chromium render check of the page (render_check.sh; exit 77, a skip, without
# Chromium unless KVSIM_REQUIRE_CHROMIUM=1).
set -euo pipefail
kvsim=$1
shift
. "$(dirname "$0")/../cli/workdir.sh"
kvsim_test_workdir html
dir=$work
"$kvsim" replay --quiet "$@" --html "$dir/report.html"
rc=0
bash "$(dirname "$0")/render_check.sh" "$dir/report.html" "$dir/report.png" || rc=$?
exit $rc
