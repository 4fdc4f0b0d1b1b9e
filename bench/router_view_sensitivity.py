#!/usr/bin/env python3
"""The router-view sensitivity table of docs/replay.md ("What the router sees").

Usage: bench/router_view_sensitivity.py KVSIM [TRACES_DIR]

Replays the conversation trace on 8 engines and Mooncake 1000 on 4 (kv router,
--slo-ttft-ms 2000 --slo-itl-ms 50) under the exact view, the delayed view at 0, 5, 10, 50 and
100 ms, and both with predict-on-route for 2 s, and prints the Markdown table: prefix reuse,
TTFT p50/p99 and SLO attainment. Virtual time only: the figures do not depend on the machine.
TRACES_DIR defaults to ../shared/traces beside the checkout; a missing trace is skipped, said.
"""
import json
import os
import subprocess
import sys
import tempfile

VIEWS = [
    ("exact", ["--router-view", "exact"]),
    ("delayed 0 ms", ["--kv-event-delay-ms", "0"]),
    ("delayed 5 ms (default)", []),
    ("delayed 10 ms", ["--kv-event-delay-ms", "10"]),
    ("delayed 50 ms", ["--kv-event-delay-ms", "50"]),
    ("delayed 100 ms", ["--kv-event-delay-ms", "100"]),
    ("exact + predict 2 s", ["--router-view", "exact", "--router-predict-ttl-s", "2"]),
    ("delayed 5 ms + predict 2 s", ["--router-predict-ttl-s", "2"]),
]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    kvsim = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    traces = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..", "..", "shared", "traces")
    runs = [("conversation", "conversation_trace.jsonl", 8), ("mooncake 1000", "mooncake_trace_1000.jsonl", 4)]
    print("| trace | view | prefix reuse | TTFT p50 ms | TTFT p99 ms | SLO attainment |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, file, engines in runs:
            path = os.path.join(traces, file)
            if not os.path.exists(path):
                print(f"router_view_sensitivity: {path} not found: {name} skipped", file=sys.stderr)
                continue
            for label, args in VIEWS:
                report = os.path.join(tmp, "r.json")
                subprocess.run([kvsim, "replay", path, "--quiet", "--engines", str(engines), "--router", "kv",
                                "--slo-ttft-ms", "2000", "--slo-itl-ms", "50", "--report", report] + args,
                               check=True, stdout=subprocess.DEVNULL)
                r = json.load(open(report))
                print(f"| {name} | {label} | {100 * r['prefix_cache_reuse_ratio']:.2f} % | "
                      f"{r['ttft_ms']['p50']:.0f} | {r['ttft_ms']['p99']:.0f} | "
                      f"{r['slo']['attainment_pct']['all']:.2f} % |", flush=True)


if __name__ == "__main__":
    main()
