#!/usr/bin/env python3
"""mpi_sweep_check.py KVSIM [--needs FILE] SWEEP_ARGS...: `kvsim sweep SWEEP_ARGS` locally with
-j 2 and under `mpirun -np 2` and `-np 3` (issue #38). Skips (exit 77) when kvsim was built
without MPI (`kvsim -V` says "mpi: none") or mpirun is missing, or fails when
KVSIM_REQUIRE_MPI=1; with --needs FILE, skips likewise when FILE (a shared trace) is missing,
or fails when KVSIM_REQUIRE_TRACES=1.

Checks that:
- every run exits alike, and rows.jsonl and rows.csv are byte-identical in all three;
- every report is the local run's, everything but "wall";
- a rerun under mpirun -np 2 in the same directory keeps every report (runs nothing);
- -j under mpirun is refused (exit 2, saying why).

Prints `mpi_sweep_check: N points, rows identical for -j 2, mpirun -np 2 and -np 3, every
report equal; the rerun kept N` and exits 0, or says what differs and exits 1. Works in a
temporary directory.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def fail(msg):
    print(f"mpi_sweep_check: {msg}")
    sys.exit(1)


def skip(msg, require):
    if os.environ.get(require) == "1":
        fail(f"{require}=1 and {msg}")
    print(f"mpi_sweep_check: skipped: {msg}")
    sys.exit(77)


def sweep(cmd, out):
    p = subprocess.run([*cmd, "--out", out, "--quiet"], capture_output=True, text=True,
                       timeout=600)
    m = re.search(r"^sweep: (\d+) points, .* (\d+) kept from", p.stdout, re.M)
    if not m:
        fail(f"{' '.join(cmd[:6])}...: no summary line (exit {p.returncode}): "
             f"{p.stdout.strip()} {p.stderr.strip()}")
    return p.returncode, int(m.group(1)), int(m.group(2))


def reports(out):
    got = {}
    for name in sorted(os.listdir(os.path.join(out, "reports"))):
        with open(os.path.join(out, "reports", name)) as f:
            doc = json.load(f)
        doc.pop("wall", None)
        got[name] = doc
    return got


def main():
    kvsim, args = sys.argv[1], sys.argv[2:]
    if args[:1] == ["--needs"]:
        need, args = args[1], args[2:]
        if not os.access(need, os.R_OK):
            skip(f"{need} cannot be read (set KVSIM_TRACES_DIR)", "KVSIM_REQUIRE_TRACES")
    version = subprocess.run([kvsim, "-V"], capture_output=True, text=True).stdout
    if "mpi: none" in version:
        skip("kvsim was built without MPI (install libopenmpi-dev and openmpi-bin, "
             "reconfigure)", "KVSIM_REQUIRE_MPI")
    if not shutil.which("mpirun"):
        skip("mpirun is not installed (openmpi-bin)", "KVSIM_REQUIRE_MPI")
    with tempfile.TemporaryDirectory(prefix="kvsim-mpi-sweep.") as tmp:
        runs = {"-j 2": [kvsim, "sweep", *args, "-j", "2"]}
        for r in (2, 3):
            runs[f"mpirun -np {r}"] = [*MPIRUN, "-np", str(r), kvsim, "sweep", *args]
        results, outs = {}, {}
        for name, cmd in runs.items():
            outs[name] = os.path.join(tmp, name.replace(" ", "_"))
            results[name] = sweep(cmd, outs[name])
        codes = {name: r[0] for name, r in results.items()}
        if len(set(codes.values())) != 1:
            fail(f"exit statuses differ: {codes}")
        first = outs["-j 2"]
        for name, out in outs.items():
            for f in ("rows.jsonl", "rows.csv"):
                with open(os.path.join(first, f), "rb") as a, open(os.path.join(out, f), "rb") as b:
                    if a.read() != b.read():
                        fail(f"{f} of {name} differs from -j 2's")
        local = reports(first)
        for name, out in outs.items():
            if reports(out) != local:
                fail(f"the reports of {name} differ from -j 2's (wall aside)")
        code, n, kept = sweep(runs["mpirun -np 2"], outs["mpirun -np 2"])
        if code != codes["-j 2"] or kept != len(local):
            fail(f"the rerun under mpirun -np 2 exited {code} and kept {kept} of {len(local)}")
        p = subprocess.run([*runs["mpirun -np 2"], "-j", "2", "--out", os.path.join(tmp, "j")],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 2 or "option -j: under mpirun every rank replays one point" not in \
                p.stdout + p.stderr:
            fail(f"-j under mpirun exited {p.returncode}: {p.stdout.strip()} {p.stderr.strip()}")
        print(f"mpi_sweep_check: {n} points, rows identical for -j 2, mpirun -np 2 and -np 3, "
              f"every report equal; the rerun kept {kept}")


if __name__ == "__main__":
    main()
