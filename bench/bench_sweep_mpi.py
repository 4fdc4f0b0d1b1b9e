#!/usr/bin/env python3
"""bench_sweep_mpi.py KVSIM [--quick] [--json OUT] [--trace FILE] [--ranks 1,2,4]: `kvsim sweep`
on MPI ranks (issue #38), against the same sweep on one machine with -j 2.

The grid is bench_sweep.py's (64 points on the conversation trace: 4 x 4 x 4 values of engines,
max-num-seqs and num-gpu-blocks; --quick: 8 points on the first 2,000 requests). It runs once
with `kvsim sweep -j 2` and once under `mpirun --oversubscribe -np R` for each R; ranks beyond
the machine's cores share them (the table says how many cores there are). For each run: the
wall time, the CPU time of the children (user + system), and, from the sweep's summary line,
the bytes rank 0 received and sent per point and rank 0's serial time per point (writing a
report, making its row). Every run's rows.jsonl must be byte-identical to -j 2's, or the program
fails.

Then a projection to 100 ranks of a 2,000-point grid of this trace, from those figures:
wall ~ max(points x mean point time / ranks, points x rank 0's serial time per point) + the
start-up of the R = 1 run, the mean point time being the R = 1 run's wall over its points (one
rank is no MPI sweep since issue 64: it runs with -j 1, one point at a time, in worker
processes). It assumes one core per rank and points of the mean cost.

Prints a table and writes JSON (default bench/results/bench_sweep_mpi.json).
"""
import argparse
import itertools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_sweep import bench_grid  # noqa: E402  (the same grid)
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, out):
    cpu0, t0 = children_cpu(), time.monotonic()
    p = subprocess.run([*cmd, "--out", out, "--quiet"], capture_output=True, text=True)
    wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
    if p.returncode != 0:
        sys.exit(f"bench_sweep_mpi: {' '.join(cmd[:5])}... exited {p.returncode}: "
                 f"{p.stdout} {p.stderr}")
    m = re.search(r"(\d+) MPI ranks \((\d+) bytes and ([0-9.]+) ms of rank 0 a point\)", p.stdout)
    with open(os.path.join(out, "rows.jsonl"), "rb") as f:
        rows = f.read()
    return {"wall_s": wall, "cpu_s": cpu,
            "bytes_per_point": int(m.group(2)) if m else None,
            "rank0_ms_per_point": float(m.group(3)) if m else None}, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvsim")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "bench_sweep_mpi.json"))
    ap.add_argument("--trace", default=os.path.join(HERE, "..", "..", "shared", "traces",
                                                     "conversation_trace.jsonl"))
    ap.add_argument("--ranks", default="1,2,4")
    a = ap.parse_args()
    if not os.access(a.trace, os.R_OK):
        print(f"bench_sweep_mpi: {a.trace} cannot be read (the shared traces)")
        return 77
    version = subprocess.run([a.kvsim, "-V"], capture_output=True, text=True).stdout
    if "mpi: none" in version or not shutil.which("mpirun"):
        print("bench_sweep_mpi: kvsim was built without MPI or mpirun is missing")
        return 77
    grid, base = bench_grid(a.trace, a.quick)
    npoints = len(list(itertools.product(*grid.values())))
    gargs = [x for k, v in grid.items() for x in ("--grid", f"{k}={','.join(v)}")]
    sweep = [a.kvsim, "sweep", *base, *gargs]
    load0 = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory(prefix="kvsim-bench-mpi.") as tmp:
        results["-j 2"], ref = run([*sweep, "-j", "2"], os.path.join(tmp, "local"))
        for r in [int(x) for x in a.ranks.split(",")]:
            name = f"mpirun -np {r}"
            # One rank is no MPI sweep (issue 64): it forks workers, -j 1 keeps it serial.
            one = ["-j", "1"] if r == 1 else []
            results[name], rows = run([*MPIRUN, "-np", str(r), *sweep, *one],
                                      os.path.join(tmp, f"np{r}"))
            if rows != ref:
                sys.exit(f"bench_sweep_mpi: rows.jsonl of {name} differs from -j 2's")
    load1 = os.getloadavg()[0]
    cores = os.cpu_count()
    one = results.get("mpirun -np 1")
    projection = None
    if one:
        per_point = one["wall_s"] / npoints
        serial = max(r["rank0_ms_per_point"] or 0 for r in results.values()) / 1e3
        big, ranks = 2000, 100
        projection = {"points": big, "ranks": ranks, "mean_point_s": per_point,
                      "rank0_serial_s_per_point": serial,
                      "wall_s": max(big * per_point / ranks, big * serial) + per_point,
                      "one_rank_wall_s": big * per_point,
                      "rank0_saturates_at_ranks": per_point / serial if serial else None}
    print(f"bench_sweep_mpi: {npoints} points on {os.path.basename(a.trace)}"
          f"{' (first 2,000 requests)' if a.quick else ''}; {cores} cores (ranks beyond share "
          f"them); load average {load0:.2f} at the start, {load1:.2f} at the end")
    print(f"{'run':<16} {'wall s':>8} {'cpu s':>8} {'bytes/point':>12} {'rank 0 ms/point':>16}")
    for name, r in results.items():
        b = "-" if r["bytes_per_point"] is None else str(r["bytes_per_point"])
        s = "-" if r["rank0_ms_per_point"] is None else f"{r['rank0_ms_per_point']:.2f}"
        print(f"{name:<16} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} {b:>12} {s:>16}")
    print("rows.jsonl identical in every run")
    if projection:
        p = projection
        print(f"projection: {p['points']} points on {p['ranks']} ranks ~ {p['wall_s']:.1f} s wall "
              f"(one rank: {p['one_rank_wall_s']:.0f} s; mean point {p['mean_point_s']:.3f} s, "
              f"rank 0 {p['rank0_serial_s_per_point'] * 1e3:.2f} ms a point: it saturates "
              f"near {p['rank0_saturates_at_ranks']:.0f} ranks)")
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"points": npoints, "trace": os.path.basename(a.trace), "quick": a.quick,
                   "cores": cores, "load_start": load0, "load_end": load1, "runs": results,
                   "projection": projection}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
