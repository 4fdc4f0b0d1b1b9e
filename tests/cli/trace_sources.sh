#!/usr/bin/env bash
# trace_sources.sh KVSIM TRACE: the same trace given by --trace, as the positional argument,
# gzip-compressed, and on standard input (--trace - --format mooncake) gives the same report
# but for the trace's name and hash; run.trace_sha256 is sha256sum's of the file as stored;
# --report - writes the JSON to standard output (the table to standard error).
set -euo pipefail
kvsim=$1 trace=$2
. "$(dirname "$0")/workdir.sh"
kvsim_test_workdir trace-sources
dir=$work
gzip -c "$trace" > "$dir/t.jsonl.gz"
args=(--quiet --engines 2 --threads 2)
"$kvsim" replay "${args[@]}" --trace "$trace" --report "$dir/a.json"
"$kvsim" replay "${args[@]}" "$trace" --report "$dir/b.json"
"$kvsim" replay "${args[@]}" "$dir/t.jsonl.gz" --report "$dir/c.json"
"$kvsim" replay "${args[@]}" --trace - --format mooncake --report "$dir/d.json" < "$trace"
"$kvsim" replay --engines 2 --threads 2 "$trace" --report - > "$dir/e.json" 2> "$dir/e.table"
python3 - "$dir" "$(sha256sum < "$trace" | cut -d' ' -f1)" \
  "$(sha256sum < "$dir/t.jsonl.gz" | cut -d' ' -f1)" <<'PY'
import json, sys
d, sha_plain, sha_gz = sys.argv[1:4]
reports = {k: json.load(open(f"{d}/{k}.json")) for k in "abcde"}
want = {"a": sha_plain, "b": sha_plain, "c": sha_gz, "d": sha_plain, "e": sha_plain}
for k, r in reports.items():
    if r["run"]["trace_sha256"] != want[k]:
        sys.exit(f"trace_sources: {k}: trace_sha256 {r['run']['trace_sha256']}, sha256sum says {want[k]}")
    r.pop("wall")
    for key in ("trace", "trace_sha256", "config"):
        r["run"].pop(key)
base = reports["a"]
for k in "bcde":
    if reports[k] != base:
        sys.exit(f"trace_sources: report {k} differs from --trace's in "
                 f"{[x for x in base if base[x] != reports[k].get(x)]}")
if "kvsim replay report" not in open(f"{d}/e.table").read():
    sys.exit("trace_sources: with --report - the table is not on standard error")
print(f"trace_sources: --trace, positional, .gz, stdin and --report - agree "
      f"({base['requests']['completed']} requests)")
PY
