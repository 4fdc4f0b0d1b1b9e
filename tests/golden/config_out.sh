#!/usr/bin/env bash
# config_out.sh KVSIM: `--config-out` writes byte-identical files to the ones kept here, written
# before the option table generated --help and getopt (issue 42): a change to how options are read,
# printed or written shows as a diff. Regenerate only for an intended change (the commands are
# below; --threads is fixed so that the CPU count does not show). Regenerated for issue 44: the
# offload file gained "data-parallel-size" (a new option; 1 is its default); issue 45: both gained
# "enable-expert-parallel" (false, its default).
set -euo pipefail
kvsim=$1
here=$(dirname "$0")
. "$here/../cli/workdir.sh"
kvsim_test_workdir config-out-golden
"$kvsim" replay --quiet --threads 1 --synthetic-requests 40 --engines 3 --router least-loaded \
  --g2-blocks 500 --g3-blocks 1000 --offload-fail-rate 0.01 --slo-ttft-ms 500 \
  --scheduling-policy priority --watermark 0.01 --config-out "$work/offload.json"
"$kvsim" replay --quiet --threads 1 --synthetic-requests 40 --prefill-engines 2 --decode-engines 2 \
  --kv-transfer-gbps 10 --handoff-release immediate --no-enable-chunked-prefill \
  --max-num-batched-tokens 300000 --config-out "$work/disagg.json"
for f in offload disagg; do
  cmp "$here/config-out-$f.json" "$work/$f.json" ||
    { diff "$here/config-out-$f.json" "$work/$f.json" | head -20; exit 1; }
done
echo "config_out: both --config-out files are byte-identical to the kept ones"
