#!/usr/bin/env bash
# render_check.sh HTML_FILE OUT_PNG: does the HTML report render in a real browser?
#
# Renders HTML_FILE with headless Chromium into OUT_PNG (1280x2400) and dumps its DOM, then
# checks that every chart and table id the report must have (and every other chart-/table- id
# of the file) is in the rendered DOM, and that the screenshot is not blank
# (png_not_blank.py: at least 2 % of pixels off the background, at least 5 colours).
# Without Chromium it says so and exits 77 (a skip), or fails when KVSIM_REQUIRE_CHROMIUM=1.
# Prints "render check passed: N ids, X% non-background pixels" on success.
set -euo pipefail

die() {
  echo "render check FAILED: $*" >&2
  exit 1
}

[ $# -eq 2 ] || die "usage: $0 HTML_FILE OUT_PNG"
html=$1
png=$2
[ -r "$html" ] || die "cannot read $html"
here=$(cd "$(dirname "$0")" && pwd)

browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then
    browser=$b
    break
  fi
done
if [ -z "$browser" ]; then
  if [ "${KVSIM_REQUIRE_CHROMIUM:-0}" = 1 ]; then
    die "chromium is not installed (KVSIM_REQUIRE_CHROMIUM=1): apt-get install -y chromium"
  fi
  echo "render check SKIPPED: chromium is not installed (apt-get install -y chromium)"
  exit 77
fi
command -v python3 >/dev/null 2>&1 || die "python3 is needed to read the screenshot"

url="file://$(cd "$(dirname "$html")" && pwd)/$(basename "$html")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A profile of its own: never the user's, and nothing left behind.
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
       --user-data-dir="$work/profile" --window-size=1280,2400)

rm -f "$png"
if ! timeout 120 "$browser" "${flags[@]}" --screenshot="$png" "$url" >"$work/shot.log" 2>&1; then
  tail -5 "$work/shot.log" >&2
  die "$browser --screenshot failed on $html"
fi
[ -s "$png" ] || die "$browser wrote no screenshot to $png"
if ! timeout 120 "$browser" "${flags[@]}" --dump-dom "$url" >"$work/dom.html" 2>"$work/dom.log"; then
  tail -5 "$work/dom.log" >&2
  die "$browser --dump-dom failed on $html"
fi

required="chart-ttft-cdf chart-itl-cdf chart-e2e-cdf chart-throughput chart-queue chart-kv-usage
chart-engines table-config table-summary table-latency"
# The file's own chart-/table- ids too (table-slo, chart-pin-cdf, ... when it has them).
extra=$({ grep -o 'id="\(chart\|table\)-[a-z0-9-]*"' "$html" || true; } | sed 's/^id="//; s/"$//' | sort -u)
n=0
for id in $(printf '%s\n' $required $extra | sort -u); do
  grep -q "id=\"$id\"" "$work/dom.html" || die "id '$id' is not in the rendered DOM of $html"
  n=$((n + 1))
done

read -r pct colours _ _ < <(python3 "$here/png_not_blank.py" "$png") ||
  die "the screenshot $png looks blank"
echo "render check passed: $n ids, $pct% non-background pixels ($colours colours) in $png"
