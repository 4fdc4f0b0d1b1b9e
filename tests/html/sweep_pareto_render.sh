#!/usr/bin/env bash
# sweep_pareto_render.sh KVSIM METRICS SWEEP_ARGS...: `kvsim sweep SWEEP_ARGS --pareto METRICS`
# (in a temporary directory), then:
# - the rows' "pareto" marks are exactly the rows that ran and that no other such row dominates
#   (recomputed here by brute force, each metric in its direction), and rows.csv agrees;
# - pareto.svg has one circle per row that ran, class "front" exactly for the marked rows, and
#   the front's polyline through them;
# - headless Chromium renders the SVG (a screenshot that is not blank, png_not_blank.py) with the
#   front and the points in its DOM. Without Chromium it says so and exits 77 (a skip), or fails
#   when KVSIM_REQUIRE_CHROMIUM=1.
# Prints "pareto check passed: N rows, F on the front; render check passed: ..." on success.
set -euo pipefail
die() {
  echo "pareto check FAILED: $*" >&2
  exit 1
}
kvsim=$1 metrics=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../cli/workdir.sh"
kvsim_test_workdir pareto
dir=$work
"$kvsim" sweep "$@" --pareto "$metrics" --out "$dir/s" --quiet >"$dir/out.txt" 2>&1 ||
  die "kvsim sweep exited $?: $(cat "$dir/out.txt")"
summary=$(python3 - "$dir/s" "$metrics" <<'PY'
import csv, json, re, sys
out, metrics = sys.argv[1], sys.argv[2].split(",")
HIGHER = {"completed", "requests_per_s", "output_tokens_per_s", "prefix_cache_reuse_ratio",
          "slo_attainment_pct", "goodput_requests_per_s"}
rows = [json.loads(l) for l in open(f"{out}/rows.jsonl")]
ran = [r for r in rows if r["status"] == "ok"]
def value(r, m):
    v = r["config"][m] if m in r["config"] else r[m]
    v = float(v) if v is not None else None
    return -v if v is not None and m in HIGHER else v
vals = {r["id"]: [value(r, m) for m in metrics] for r in ran}
def dominates(a, b):
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))
want = {i for i, v in vals.items() if None not in v and
        not any(j != i and None not in w and dominates(w, v) for j, w in vals.items())}
got = {r["id"] for r in rows if r.get("pareto") is True}
if got != want:
    sys.exit(f"rows marked {sorted(got)}, the non-dominated rows are {sorted(want)}")
table = {r["id"]: r["pareto"] for r in csv.DictReader(open(f"{out}/rows.csv"))}
if {i for i, p in table.items() if p == "true"} != want:
    sys.exit("rows.csv's pareto column disagrees with rows.jsonl")
svg = open(f"{out}/pareto.svg").read()
circles = re.findall(r'<circle class="(\w+)"[^>]*><title>([0-9a-f]{16}) ', svg)
if len(circles) != len(ran) or {i for c, i in circles if c == "front"} != want:
    sys.exit(f"pareto.svg: {len(circles)} circles for {len(ran)} rows, front "
             f"{sorted(i for c, i in circles if c == 'front')}")
pts = re.search(r'id="pareto-front"[^>]*points="([^"]*)"', svg).group(1).split()
if len(pts) != len(want):
    sys.exit(f"the front's line has {len(pts)} points for {len(want)} rows")
print(f"{len(rows)} rows, {len(want)} on the front")
PY
) || die "$summary"
browser=""
for b in chromium chromium-browser google-chrome; do
  command -v "$b" >/dev/null 2>&1 && { browser=$b; break; }
done
if [ -z "$browser" ]; then
  [ "${KVSIM_REQUIRE_CHROMIUM:-0}" = 1 ] && die "chromium is not installed (KVSIM_REQUIRE_CHROMIUM=1)"
  echo "pareto check passed: $summary; render check SKIPPED: chromium is not installed"
  exit 77
fi
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
       --user-data-dir="$dir/profile" --window-size=800,560)
url="file://$dir/s/pareto.svg"
timeout 120 "$browser" "${flags[@]}" --screenshot="$dir/p.png" "$url" >"$dir/shot.log" 2>&1 ||
  die "$browser --screenshot failed: $(tail -3 "$dir/shot.log")"
timeout 120 "$browser" "${flags[@]}" --dump-dom "$url" >"$dir/dom.html" 2>"$dir/dom.log" ||
  die "$browser --dump-dom failed: $(tail -3 "$dir/dom.log")"
for id in pareto-front pareto-points axes; do
  grep -q "id=\"$id\"" "$dir/dom.html" || die "id '$id' is not in the rendered DOM of pareto.svg"
done
read -r pct colours _ _ < <(python3 "$here/png_not_blank.py" "$dir/p.png" 1 3) ||
  die "the screenshot of pareto.svg looks blank"
echo "pareto check passed: $summary; render check passed: $pct% non-background pixels ($colours colours)"
