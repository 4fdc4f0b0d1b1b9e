#!/usr/bin/env python3
"""instruction_gate.py KVSIM [--baseline FILE] [--update] [--json FILE] [--tolerance PCT]

The performance regression gate of issue #14: instructions, not seconds. Each workload below
runs `kvsim replay` on one thread under `valgrind --tool=callgrind` (which counts every
instruction the process executes, the same count for the same binary, inputs and
environment whatever else the machine does) and is compared with the checked-in baseline
(bench/gate/baseline.json). The gate fails (exit 1) when any workload executes more than
--tolerance percent (5) more instructions than its baseline, and says which; it prints every
workload's ratio, and fewer instructions than the baseline by more than the tolerance are
reported as an improvement to record (--update rewrites the baseline with the counts just
measured). Exit 2: usage, a missing trace or valgrind, or a replay that failed.

One thread only: worker threads spin at the epoch barrier, so instruction counts with more
than one depend on timing. The shared traces are read from ../shared/traces beside the
checkout (KVSIM_TRACES_DIR overrides).
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
TRACES = os.environ.get("KVSIM_TRACES_DIR", os.path.join(SRC, "..", "shared", "traces"))
M1000 = os.path.join(TRACES, "mooncake_trace_1000.jsonl")
AZURE = os.path.join(TRACES, "AzureLLMInferenceTrace_conv.csv")

# name -> kvsim replay arguments (always --quiet --threads 1)
WORKLOADS = {
    "synthetic_4_engines": [],
    "mooncake1000_8_engines_kv": ["--trace", M1000, "--engines", "8"],
    # the oracle view of the reports before issue 61 (its own cost must not grow)
    "mooncake1000_8_engines_kv_exact": ["--trace", M1000, "--engines", "8", "--router-view",
                                        "exact"],
    "mooncake1000_8_engines_rr_bs512": ["--trace", M1000, "--engines", "8", "--router",
                                        "round-robin", "--block-size", "512",
                                        "--num-gpu-blocks", "512"],
    "mooncake1000_offload_g1_g2_g3": ["--trace", M1000, "--engines", "4", "--num-gpu-blocks",
                                      "1500", "--g2-blocks", "3000", "--g3-blocks", "20000"],
    "mooncake1000_disagg_2p_2d": ["--trace", M1000, "--prefill-engines", "2",
                                  "--decode-engines", "2"],
    "mooncake1000_disagg_2p_2d_exact": ["--trace", M1000, "--prefill-engines", "2",
                                        "--decode-engines", "2", "--router-view", "exact"],
    "azure_conv_4_engines_first_4000": ["--trace", AZURE, "--engines", "4", "--max-requests",
                                        "4000"],
}


def count(kvsim, args):
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", kvsim, "replay",
           "--quiet", "--threads", "1"] + args
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, LC_ALL="C"))
    m = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
    if p.returncode != 0 or not m:
        sys.stderr.write(p.stderr[-2000:])
        sys.exit(f"instruction gate: `{' '.join(cmd)}` failed (exit {p.returncode})")
    return int(m.group(1).replace(",", ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kvsim")
    ap.add_argument("--baseline", default=os.path.join(HERE, "baseline.json"))
    ap.add_argument("--update", action="store_true", help="rewrite the baseline")
    ap.add_argument("--json", default="bench/results/instruction_gate.json")
    ap.add_argument("--tolerance", type=float, default=5.0, help="percent (5)")
    ap.add_argument("--only", help="comma-separated workload names")
    a = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("instruction gate: valgrind is not installed (apt-get install -y valgrind)")
    for f in (M1000, AZURE):
        if not os.path.exists(f):
            print(f"instruction gate: {f} is missing (the shared traces)", file=sys.stderr)
            sys.exit(2)
    names = a.only.split(",") if a.only else list(WORKLOADS)
    base = {}
    if os.path.exists(a.baseline):
        base = json.load(open(a.baseline)).get("instructions", {})
    elif not a.update:
        sys.exit(f"instruction gate: no baseline at {a.baseline} (run with --update)")
    results, worse, better = {}, [], []
    print(f"{'workload':36} {'instructions':>16} {'baseline':>16} {'ratio':>8}")
    for n in names:
        got = count(a.kvsim, WORKLOADS[n])
        want = base.get(n)
        ratio = got / want if want else None
        results[n] = {"instructions": got, "baseline": want, "ratio": ratio}
        flag = ""
        if ratio is not None and ratio > 1 + a.tolerance / 100:
            worse.append(n)
            flag = "  WORSE"
        elif ratio is not None and ratio < 1 - a.tolerance / 100:
            better.append(n)
            flag = "  better: record it (--update)"
        print(f"{n:36} {got:16,} {want or 0:16,} {ratio or 0:8.3f}{flag}")
    out = {"tool": "valgrind --tool=callgrind", "tolerance_percent": a.tolerance,
           "machine": platform.machine(), "workloads": {n: WORKLOADS[n] for n in names},
           "results": results}
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    json.dump(out, open(a.json, "w"), indent=2)
    if a.update:
        merged = dict(base)
        merged.update({n: r["instructions"] for n, r in results.items()})
        json.dump({"note": "kvsim replay --quiet --threads 1 instruction counts "
                           "(bench/gate/instruction_gate.py); a Release-like build "
                           "(RelWithDebInfo, jemalloc) with Debian 12's gcc",
                   "instructions": merged}, open(a.baseline, "w"), indent=2)
        open(a.baseline, "a").write("\n")
        print(f"instruction gate: baseline {a.baseline} updated")
        return 0
    if worse:
        print(f"instruction gate: FAILED: {', '.join(worse)} execute more than "
              f"{a.tolerance:g} % more instructions than the baseline")
        return 1
    print(f"instruction gate: passed: {len(names)} workloads within {a.tolerance:g} % of the "
          f"baseline (or better)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
