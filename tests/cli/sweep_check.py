#!/usr/bin/env python3
"""sweep_check.py KVSIM [--needs FILE] [--stdin FILE] SWEEP_ARGS...: `kvsim sweep SWEEP_ARGS` at
-j 1 and at -j 2 (issue #35). With --needs FILE (a shared trace), skips (exit 77) when FILE is
missing, or fails when KVSIM_REQUIRE_TRACES=1. With --stdin FILE, each sweep reads FILE on its
standard input (the trace "-": it can be read once only, so every point must share one load), and
each report must name the trace "-" with FILE's sha256 (the plain replays are not run: standard
input is gone).

Checks that:
- both exit alike and write byte-identical rows.jsonl and rows.csv, one row per point of the
  grid, sorted by id (invalid points last), rows.csv with the same rows;
- every row of a point that ran ("ok") matches its report (reports/<id>.json): its grid values
  are in the report's configuration and its metrics are the report's;
- every report equals a plain `kvsim replay --config C --report R` of the configuration the report
  records (C = the report's run.config), everything but "wall";
- every failed or invalid row says why, and has no report.

Prints `sweep_check: N points (K ok, F failed, I invalid), rows identical at -j 1 and -j 2,
every report equals its plain replay` and exits 0, or says what differs and exits 1. Works in a
temporary directory, removed at exit.
"""
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

METRICS = {  # row column -> the report's path
    "completed": "requests.completed",
    "rejected": "requests.rejected",
    "ttft_p99_ms": "ttft_ms.p99",
    "ttft_p95_ms": "ttft_ms.p95",
    "itl_p50_ms": "itl_ms.p50",
    "tpot_p95_ms": "tpot_ms.p95",
    "token_gap_mean_ms": "token_gap_ms.avg",
    "token_gap_p99_ms": "token_gap_ms.p99",
    "e2e_mean_ms": "e2e_ms.avg",
    "requests_per_s": "throughput.requests_per_s",
    "prefix_cache_reuse_ratio": "prefix_cache_reuse_ratio",
    "preemptions": "preemptions",
}


def at(doc, path):
    for k in path.split("."):
        doc = doc.get(k) if isinstance(doc, dict) else None
    return doc


def fail(msg):
    print(f"sweep_check: {msg}")
    sys.exit(1)


def sweep(kvsim, args, out, jobs, stdin):
    p = subprocess.run([kvsim, "sweep", *args, "--out", out, "-j", str(jobs), "--quiet"],
                       capture_output=True, text=True,
                       stdin=open(stdin, "rb") if stdin else subprocess.DEVNULL)
    if "sweep: " not in p.stdout:
        fail(f"-j {jobs}: no summary line (exit {p.returncode}): {p.stderr.strip()}")
    return p.returncode


def main():
    kvsim, args = sys.argv[1], sys.argv[2:]
    if args[:1] == ["--needs"]:
        need, args = args[1], args[2:]
        if not os.access(need, os.R_OK):
            if os.environ.get("KVSIM_REQUIRE_TRACES") == "1":
                fail(f"KVSIM_REQUIRE_TRACES=1 and {need} cannot be read")
            print(f"sweep_check: skipped: {need} cannot be read (set KVSIM_TRACES_DIR)")
            sys.exit(77)
    stdin = None
    if args[:1] == ["--stdin"]:
        stdin, args = args[1], args[2:]
        digest = hashlib.sha256(open(stdin, "rb").read()).hexdigest()
    with tempfile.TemporaryDirectory(prefix="kvsim-sweep-check.") as tmp:
        d1, d2 = os.path.join(tmp, "j1"), os.path.join(tmp, "j2")
        rc1, rc2 = sweep(kvsim, args, d1, 1, stdin), sweep(kvsim, args, d2, 2, stdin)
        if rc1 != rc2:
            fail(f"-j 1 exited {rc1}, -j 2 exited {rc2}")
        for name in ("rows.jsonl", "rows.csv"):
            a, b = (open(os.path.join(d, name), "rb").read() for d in (d1, d2))
            if a != b:
                fail(f"{name} differs between -j 1 and -j 2")
        rows = [json.loads(line) for line in open(os.path.join(d1, "rows.jsonl"))]
        table = list(csv.DictReader(open(os.path.join(d1, "rows.csv"))))
        if len(table) != len(rows) or [r["id"] for r in table] != [r["id"] for r in rows]:
            fail("rows.csv and rows.jsonl do not hold the same rows")
        ran = [r for r in rows if r["status"] != "invalid"]
        if [r["id"] for r in ran] != sorted(r["id"] for r in ran):
            fail("the rows are not sorted by id")
        if any(r["status"] != "invalid" for r in rows[len(ran):]):
            fail("an invalid row before a row that ran")
        counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "failed", "invalid")}
        if (rc1 == 0) != (counts["ok"] == len(rows)):
            fail(f"exit {rc1} with {counts}")
        reports = os.path.join(d1, "reports")
        for r in rows:
            path = os.path.join(reports, f"{r['id']}.json")
            if r["status"] != "ok":
                if not r.get("error"):
                    fail(f"row {r['id']} is {r['status']} without an error")
                if os.path.exists(path):
                    fail(f"row {r['id']} is {r['status']} but has a report")
                continue
            rep = json.load(open(path))
            options = rep["run"]["config"]["options"]
            for k, v in r["config"].items():
                # a row types its values (8, 0.5, true); the configuration text has strings
                if k in ("engines", "max-num-seqs", "arrival-speedup") and not isinstance(v, int):
                    fail(f"row {r['id']}: {k}={v!r} is not a number")
                if options.get(k) != (v if isinstance(v, str) else json.dumps(v)):
                    fail(f"row {r['id']}: {k}={v}, its report's configuration has {options.get(k)}")
            raw_row = next(line for line in open(os.path.join(d1, "rows.jsonl"))
                           if f'"id":"{r["id"]}"' in line)
            raw_rep = open(path).read()
            for col, rpath in METRICS.items():
                if r[col] != at(rep, rpath):
                    fail(f"row {r['id']}: {col} {r[col]} but the report has {at(rep, rpath)}")
                # digit for digit: the row's text of the number is the report's
                text = re.search(f'"{col}":([^,}}]+)', raw_row).group(1)
                leaf = rpath.split(".")[-1]
                if f'"{leaf}": {text}' not in raw_rep:
                    fail(f"row {r['id']}: {col} is written {text}, not as its report writes it")
            if stdin:
                if (rep["run"]["trace"], rep["run"]["trace_sha256"]) != ("-", digest):
                    fail(f"row {r['id']}: its report names the trace {rep['run']['trace']} "
                         f"{rep['run']['trace_sha256']}, not - {digest}")
                continue
            cfg = os.path.join(tmp, "config.json")
            json.dump(rep["run"]["config"], open(cfg, "w"))
            plain = os.path.join(tmp, "plain.json")
            p = subprocess.run([kvsim, "replay", "--quiet", "--config", cfg, "--report", plain],
                               capture_output=True, text=True)
            if p.returncode != 0:
                fail(f"row {r['id']}: the plain replay of its configuration exited "
                     f"{p.returncode}: {p.stderr.strip()}")
            again = json.load(open(plain))
            rep.pop("wall", None)
            again.pop("wall", None)
            if rep != again:
                diff = sorted(k for k in set(rep) | set(again) if rep.get(k) != again.get(k))
                fail(f"row {r['id']}: its report differs from the plain replay in {diff}")
        reports_are = ("every report names the trace - and its sha256" if stdin else
                       "every report equals its plain replay")
        print(f"sweep_check: {len(rows)} points ({counts['ok']} ok, {counts['failed']} failed, "
              f"{counts['invalid']} invalid), rows identical at -j 1 and -j 2, {reports_are}")


if __name__ == "__main__":
    main()
