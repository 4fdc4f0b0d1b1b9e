#!/usr/bin/env bash
# replay_and_render.sh KVSIM DIR ARGS...: `kvsim replay ARGS --html DIR/report.html`, then the
# headless Chromium render check of the page (render_check.sh; exit 77, a skip, without
# Chromium unless KVSIM_REQUIRE_CHROMIUM=1).
set -euo pipefail
kvsim=$1 dir=$2
shift 2
mkdir -p "$dir"
"$kvsim" replay --quiet "$@" --html "$dir/report.html"
exec bash "$(dirname "$0")/render_check.sh" "$dir/report.html" "$dir/report.png"
