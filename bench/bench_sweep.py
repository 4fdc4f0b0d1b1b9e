#!/usr/bin/env python3
"""bench_sweep.py KVSIM [--quick] [--json OUT] [--trace FILE] [--jobs N]: `kvsim sweep` against
the shell loop it replaces (issue #36).

The same grid (default: 64 points on the conversation trace, 4 x 4 x 4 values of engines,
max-num-seqs and num-gpu-blocks, each point --threads 1) runs twice, alone on the machine as far
as this program is concerned:

- **sweep**: `kvsim sweep TRACE --grid ... -j N` (one process tree);
- **loop**: one `kvsim replay TRACE <the point's options> --threads 1 --report R` per point,
  N at a time (what a planner's shell loop does).

For each: the wall time, the CPU time of the children (user + system, from
getrusage(RUSAGE_CHILDREN)), and the traces parsed (the sweep's summary line counts its loads;
the loop parses once per point). Then every point's report is compared between the two
(everything but "wall"): they must be identical, or the program fails.

Prints a table and writes JSON (default bench/results/bench_sweep.json). Wall-clock figures move
with the machine's load: the table states the load average at the start and the end. --quick
runs 8 points on the first 2,000 requests.
"""
import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def bench_grid(trace, quick):
    """The benchmark's grid ({option: values}) and its base arguments (the trace, and with
    quick the first 2,000 requests); bench_sweep_mpi.py runs the same."""
    if quick:
        return ({"engines": ["2", "4"], "max-num-seqs": ["64", "256"],
                 "num-gpu-blocks": ["8192", "16384"]}, [trace, "--max-requests", "2000"])
    return ({"engines": ["2", "4", "6", "8"], "max-num-seqs": ["32", "64", "128", "256"],
             "num-gpu-blocks": ["4096", "8192", "16384", "32768"]}, [trace])


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvsim")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "bench_sweep.json"))
    ap.add_argument("--trace", default=os.path.join(HERE, "..", "..", "shared", "traces",
                                                     "conversation_trace.jsonl"))
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    if not os.access(a.trace, os.R_OK):
        print(f"bench_sweep: {a.trace} cannot be read (the shared traces)")
        return 77
    grid, base = bench_grid(a.trace, a.quick)
    names = list(grid)
    points = list(itertools.product(*grid.values()))
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="kvsim-bench-sweep.") as tmp:
        # the sweep
        out = os.path.join(tmp, "sweep")
        args = [a.kvsim, "sweep", *base, "--out", out, "-j", str(a.jobs), "--quiet"]
        for n in names:
            args += ["--grid", f"{n}={','.join(grid[n])}"]
        c0, t0 = children_cpu(), time.monotonic()
        p = subprocess.run(args, capture_output=True, text=True)
        sweep_wall, sweep_cpu = time.monotonic() - t0, children_cpu() - c0
        if p.returncode != 0:
            print(f"bench_sweep: the sweep exited {p.returncode}: {p.stderr}")
            return 1
        loads = int(p.stdout.split(" trace loads")[0].rsplit(" ", 1)[1])
        rows = [json.loads(line) for line in open(os.path.join(out, "rows.jsonl"))]
        # a row types its values (8, 0.5, true): as the grid's text
        by_config = {tuple(v if isinstance(v, str) else json.dumps(v)
                           for v in (r["config"][n] for n in names)): r["id"] for r in rows}

        # the loop: one replay per point, a.jobs at a time
        loop = os.path.join(tmp, "loop")
        os.mkdir(loop)
        c0, t0 = children_cpu(), time.monotonic()
        running, todo = [], list(enumerate(points))
        while todo or running:
            while todo and len(running) < a.jobs:
                i, pt = todo.pop(0)
                cmd = [a.kvsim, "replay", *base, "--threads", "1", "--quiet",
                       "--report", os.path.join(loop, f"{i}.json")]
                for n, v in zip(names, pt):
                    cmd += [f"--{n}", v]
                running.append(subprocess.Popen(cmd))
            pid, status = os.wait()
            done = next(q for q in running if q.pid == pid)
            running.remove(done)
            if os.waitstatus_to_exitcode(status) != 0:
                print(f"bench_sweep: {' '.join(done.args)} failed")
                return 1
        loop_wall, loop_cpu = time.monotonic() - t0, children_cpu() - c0

        # the same reports
        for i, pt in enumerate(points):
            x = json.load(open(os.path.join(out, "reports", f"{by_config[pt]}.json")))
            y = json.load(open(os.path.join(loop, f"{i}.json")))
            x.pop("wall", None)
            y.pop("wall", None)
            if x != y:
                diff = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                print(f"bench_sweep: point {dict(zip(names, pt))}: the reports differ in {diff}")
                return 1
    load1 = os.getloadavg()[0]
    result = {
        "trace": os.path.basename(a.trace), "points": len(points), "jobs": a.jobs,
        "quick": a.quick, "load_average": [load0, load1],
        "sweep": {"wall_s": sweep_wall, "children_cpu_s": sweep_cpu, "trace_parses": loads},
        "loop": {"wall_s": loop_wall, "children_cpu_s": loop_cpu, "trace_parses": len(points)},
        "reports_identical": True,
    }
    print(f"bench_sweep: {len(points)} points of {result['trace']}"
          f"{' (first 2,000 requests)' if a.quick else ''}, -j {a.jobs}; load average "
          f"{load0:.2f} at the start, {load1:.2f} at the end")
    print(f"{'':24}{'wall s':>10}{'children CPU s':>16}{'trace parses':>14}")
    for k, label in (("sweep", "kvsim sweep"), ("loop", "kvsim replay x points")):
        r = result[k]
        print(f"{label:24}{r['wall_s']:>10.2f}{r['children_cpu_s']:>16.2f}"
              f"{r['trace_parses']:>14}")
    print(f"{'loop / sweep':24}{loop_wall / sweep_wall:>9.2f}x{loop_cpu / sweep_cpu:>15.2f}x"
          f"{len(points) / max(loads, 1):>13.0f}x")
    print("every point's report identical in both (everything but \"wall\")")
    os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
    json.dump(result, open(a.json, "w"), indent=2)
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
