#!/usr/bin/env python3
"""sweep_resume.py KVSIM SWEEP_ARGS...: a sweep stopped and rerun ends with the rows of one that
was not (issue #36).

1. `kvsim sweep SWEEP_ARGS` uninterrupted: the reference rows.jsonl and rows.csv.
2. With `--max-points 3`: exit 0, 3 rows, the summary says how many are left; the same command
   again (without it): "3 kept", the reference rows byte for byte.
3. SIGINT to the sweep once its first point ended (-j 1): exit 130, fewer rows than points, no
   report of a point cut short; the same command again: the reference rows.
4. `--force`: every point runs again ("0 kept"), the reference rows.

Prints `sweep_resume: N points; --max-points 3 and a rerun, SIGINT and a rerun, --force: the
same rows` and exits 0, or says what differs and exits 1. Works in a temporary directory.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"sweep_resume: {msg}")
    sys.exit(1)


def run(kvsim, args, out, *extra):
    p = subprocess.run([kvsim, "sweep", *args, "--out", out, "--quiet", *extra],
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def rows(out):
    return tuple(open(os.path.join(out, n), "rb").read() for n in ("rows.jsonl", "rows.csv"))


def kept(text):
    m = re.search(r"(\d+) kept from", text)
    return int(m.group(1)) if m else None


def main():
    kvsim, args = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory(prefix="kvsim-sweep-resume.") as tmp:
        ref = os.path.join(tmp, "ref")
        rc, text = run(kvsim, args, ref, "-j", "2")
        if rc != 0:
            fail(f"the uninterrupted sweep exited {rc}: {text}")
        want = rows(ref)
        npoints = want[0].count(b"\n")

        part = os.path.join(tmp, "part")
        rc, text = run(kvsim, args, part, "-j", "2", "--max-points", "3")
        got = rows(part)[0].count(b"\n")
        if rc != 0 or got != 3 or f"{npoints - 3} not run" not in text:
            fail(f"--max-points 3: exit {rc}, {got} rows: {text}")
        rc, text = run(kvsim, args, part, "-j", "2")
        if rc != 0 or kept(text) != 3 or rows(part) != want:
            fail(f"the rerun after --max-points 3: exit {rc}, kept {kept(text)}, "
                 f"same rows {rows(part) == want}: {text}")

        intr = os.path.join(tmp, "intr")
        p = subprocess.Popen([kvsim, "sweep", *args, "--out", intr, "-j", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = p.stdout.readline()
        if ": ok" not in first:
            fail(f"no first point line: {first!r}")
        p.send_signal(signal.SIGINT)
        rest = p.stdout.read()
        p.wait()
        got = rows(intr)[0].count(b"\n")
        if p.returncode != 130 or not 1 <= got < npoints or "(interrupted)" not in rest:
            fail(f"SIGINT: exit {p.returncode}, {got} of {npoints} rows: {first}{rest}")
        reports = len(os.listdir(os.path.join(intr, "reports")))
        if reports != got:
            fail(f"SIGINT: {reports} reports for {got} rows (a point cut short left one)")
        rc, text = run(kvsim, args, intr, "-j", "2")
        if rc != 0 or kept(text) != got or rows(intr) != want:
            fail(f"the rerun after SIGINT: exit {rc}, kept {kept(text)} of {got}, "
                 f"same rows {rows(intr) == want}: {text}")

        rc, text = run(kvsim, args, intr, "-j", "2", "--force")
        if rc != 0 or kept(text) != 0 or rows(intr) != want:
            fail(f"--force: exit {rc}, kept {kept(text)}: {text}")
        print(f"sweep_resume: {npoints} points; --max-points 3 and a rerun, SIGINT and a rerun, "
              "--force: the same rows")


if __name__ == "__main__":
    main()
