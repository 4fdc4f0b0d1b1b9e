#!/usr/bin/env python3
"""stop_signals.py KVSIM [SESSIONS]: SIGTERM and SIGHUP stop `replay`, `sweep` and `plan` as SIGINT does, and
no worker outlives its sweep (issue 64).

1. replay: SIGTERM ends the run at its next epoch with a partial report marked "interrupted" and
   exit 143; SIGHUP the same with exit 129.
2. sweep -j 2: SIGTERM to the parent once a point ended: exit 143, the rows of the points that
   ended are in rows.jsonl, none of a point cut short, and no worker left running.
3. sweep: the parent killed outright (SIGKILL) once a point ended: its workers stop (their
   parent-death signal), none left running.
4. sweep: two SIGTERMs in a row: the sweep and its workers stop at once (killed by the signal).
5. plan: SIGTERM once a probe ended: exit 143, the probes so far in rows.jsonl.

Prints `stop_signals: replay 143/129, sweep 143 (N of M rows), parent killed, twice, plan 143: no
worker left` and exits 0, or says what went wrong and exits 1. Works in a temporary directory.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

# Invariant checks make each run slow enough (a second or two) to be stopped half way. A
# sanitizer build gives fewer sessions to the sweeps' points (SESSIONS): each is many times slower.
SLOW = ["--synthetic-sessions", "200", "--engines", "1", "--check-invariants", "--threads", "1"]
POINT = list(SLOW)


def fail(msg):
    print(f"stop_signals: {msg}")
    sys.exit(1)


def workers_of(tag):
    """Processes whose command line holds tag (the sweep's unique --out): a sweep's workers are
    forks of it, so they carry its command line."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if tag in cmd and state != "Z":
            found.append(int(pid))
    return found


def none_left(tag, what, within=10.0):
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not workers_of(tag):
            return
        time.sleep(0.05)
    fail(f"{what}: workers still running {within:.0f} s later: {workers_of(tag)}")


def start(kvsim, args):
    return subprocess.Popen([kvsim, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def wait_line(p, needle, what):
    while True:
        line = p.stdout.readline()
        if not line:
            p.wait()
            fail(f"{what}: ended (exit {p.returncode}) before a line with {needle!r}")
        if needle in line:
            return line


def nrows(out):
    try:
        return open(os.path.join(out, "rows.jsonl"), "rb").read().count(b"\n")
    except OSError:
        return 0


def replay(kvsim, tmp, sig, want):
    report = os.path.join(tmp, f"replay-{sig}.json")
    p = subprocess.Popen([kvsim, "replay", *SLOW, "--report", report, "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.7)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    if p.returncode != want:
        fail(f"replay, signal {int(sig)}: exit {p.returncode}, not {want}: {err}")
    r = json.load(open(report))
    if r["complete"] or r["run"]["end"]["reason"] != "interrupted":
        fail(f"replay, signal {int(sig)}: report complete {r['complete']}, end {r['run']['end']}")


def main():
    kvsim = sys.argv[1]
    if len(sys.argv) > 2:
        POINT[1] = sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="kvsim-stop-signals.") as tmp:
        replay(kvsim, tmp, signal.SIGTERM, 143)
        replay(kvsim, tmp, signal.SIGHUP, 129)

        grid = ["--grid", "max-num-seqs=8,16,32,64,128,256"]
        out = os.path.join(tmp, "term")
        p = start(kvsim, ["sweep", *POINT, *grid, "--out", out, "-j", "2"])
        wait_line(p, ": ok", "sweep, SIGTERM")
        p.send_signal(signal.SIGTERM)
        rest = p.stdout.read()
        p.wait(timeout=60)
        got = nrows(out)
        if p.returncode != 143 or not 1 <= got < 6 or "(interrupted)" not in rest:
            fail(f"sweep, SIGTERM: exit {p.returncode}, {got} of 6 rows: {rest}")
        reports = len(os.listdir(os.path.join(out, "reports")))
        if reports != got:
            fail(f"sweep, SIGTERM: {reports} reports for {got} rows (a point cut short left one)")
        none_left(out, "sweep, SIGTERM")

        out = os.path.join(tmp, "killed")
        p = start(kvsim, ["sweep", *POINT, *grid, "--out", out, "-j", "2"])
        wait_line(p, ": ok", "sweep, parent killed")
        p.kill()
        p.wait()
        none_left(out, "sweep, parent killed")

        out = os.path.join(tmp, "twice")
        p = start(kvsim, ["sweep", *POINT, *grid, "--out", out, "-j", "2"])
        wait_line(p, ": ok", "sweep, two SIGTERMs")
        p.send_signal(signal.SIGTERM)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        if p.returncode not in (143, -signal.SIGTERM):
            fail(f"sweep, two SIGTERMs: exit {p.returncode}")
        none_left(out, "sweep, two SIGTERMs", within=3.0)

        out = os.path.join(tmp, "plan")
        p = start(kvsim, ["plan", "--synthetic-sessions", "80", "--check-invariants", "--min",
                          "engines=1..2", "--attainment", "50", "--slo-ttft-ms", "1000", "--out",
                          out])
        wait_line(p, "probe 1:", "plan, SIGTERM")  # probe 2 (engines=1) runs next
        p.send_signal(signal.SIGTERM)
        rest = p.stdout.read()
        p.wait(timeout=60)
        if p.returncode != 143 or nrows(out) < 1:
            fail(f"plan, SIGTERM: exit {p.returncode}, {nrows(out)} rows: {rest}")
        none_left(out, "plan, SIGTERM")
        print(f"stop_signals: replay 143/129, sweep 143 ({got} of 6 rows), parent killed, twice, "
              "plan 143: no worker left")


if __name__ == "__main__":
    main()
