#!/usr/bin/env python3
"""resume_trust.py KVSIM sweep|plan: a rerun keeps only the reports it can trust (issue #64).

sweep: `kvsim sweep --synthetic-requests 30 --grid engines=1..8 --slo-ttft-ms 2000`, then the
reports of six points are spoiled and the same command runs again:
  engines=1  ttft_ms.p99 set to -5                  (a latency below 0)
  engines=2  slo.attainment_pct.all set to 150      (not a percentage)
  engines=3  engines=4's report copied over it      (another configuration)
  engines=5  a FIFO in its place                    (not a regular file: the rerun must not hang)
  engines=6  requests.completed set to 2.5          (a count that is not an integer)
  engines=7  its run.config.options.seed changed    (another configuration, figures untouched)
engines=4 and 8 are kept. The rerun must say, one line each on stderr, which file it does not
keep and why; keep 2; end with the rows of the first run, byte for byte; and leave a regular
report in each spoiled place. A third run keeps all 8.

plan: `kvsim plan --min engines=1..8 --attainment 99` (answer: 5 engines, 4 does not meet); then
engines=4's report shows attainment 150, and the rerun must not take it (same answer, said);
then engines=8's report copied over engines=4's, and the rerun must not take it either.

Prints one line saying what held and exits 0, or says what did not and exits 1. Works in a
temporary directory; every run has a timeout (a rerun that hangs on the FIFO fails).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

TIMEOUT = 20


def fail(msg):
    print(f"resume_trust: {msg}")
    sys.exit(1)


def run(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        fail(f"'{' '.join(cmd)}' did not end within {TIMEOUT} s (a FIFO read blocking?)")
    return p.returncode, p.stdout, p.stderr


def kept(text):
    m = re.search(r"(\d+) kept from", text)
    return int(m.group(1)) if m else None


def ids_by_engines(out):
    ids = {}
    for line in open(os.path.join(out, "rows.jsonl")):
        row = json.loads(line)
        ids[int(row["config"]["engines"])] = row["id"]
    return ids


def edit(path, change):
    with open(path) as f:
        doc = json.load(f)
    change(doc)
    with open(path, "w") as f:
        json.dump(doc, f)


def set_at(doc, dotted, value):
    *head, last = dotted.split(".")
    for k in head:
        doc = doc[k]
    doc[last] = value


def expect_said(err, path, reason_re):
    want = rf"(^|\n)kvsim (sweep|plan): {re.escape(path)}: not kept \({reason_re}\): the point runs again\n"
    if not re.search(want, err):
        fail(f"the rerun did not say that {path} is not kept ({reason_re}):\n{err}")


def sweep(kvsim, tmp):
    out = os.path.join(tmp, "s")
    cmd = [kvsim, "sweep", "--synthetic-requests", "30", "--grid", "engines=1,2,3,4,5,6,7,8",
           "--slo-ttft-ms", "2000", "--out", out, "-j", "2", "--quiet"]
    rc, so, se = run(cmd)
    if rc != 0:
        fail(f"the first sweep exited {rc}: {so}{se}")
    rows = [open(os.path.join(out, n), "rb").read() for n in ("rows.jsonl", "rows.csv")]
    ids = ids_by_engines(out)
    rep = {e: os.path.join(out, "reports", f"{i}.json") for e, i in ids.items()}
    edit(rep[1], lambda d: set_at(d, "ttft_ms.p99", -5))
    edit(rep[2], lambda d: set_at(d, "slo.attainment_pct.all", 150))
    shutil.copyfile(rep[4], rep[3])
    os.unlink(rep[5])
    os.mkfifo(rep[5])
    edit(rep[6], lambda d: set_at(d, "requests.completed", 2.5))
    edit(rep[7], lambda d: set_at(d, "run.config.options.seed", "2"))
    rc, so, se = run(cmd)
    if rc != 0:
        fail(f"the rerun exited {rc}: {so}{se}")
    expect_said(se, rep[1], r"its ttft_ms\.p99 -5 is not a latency[^\n]*")
    expect_said(se, rep[2], r"its slo\.attainment_pct\.all 150 is not a percentage[^\n]*")
    expect_said(se, rep[3], r"its configuration is not this point's: [^\n]*engines[^\n]*")
    expect_said(se, rep[5], r"[^\n]*FIFO[^\n]*not a regular file[^\n]*")
    expect_said(se, rep[6], r"its requests\.completed 2\.5 is not a count[^\n]*")
    expect_said(se, rep[7], r"its configuration is not this point's: [^\n]*seed[^\n]*")
    if se.count("not kept") != 6:
        fail(f"the rerun said 'not kept' {se.count('not kept')} times, not 6:\n{se}")
    if kept(so) != 2:
        fail(f"the rerun kept {kept(so)} reports, not 2 (engines=4 and 8): {so}")
    got = [open(os.path.join(out, n), "rb").read() for n in ("rows.jsonl", "rows.csv")]
    if got != rows:
        fail("the rerun's rows differ from the first run's")
    for e in (1, 2, 3, 5, 6, 7):
        if not os.path.isfile(rep[e]) or os.path.islink(rep[e]):
            fail(f"engines={e}: {rep[e]} is not a regular file after the rerun")
    rc, so, se = run(cmd)
    if rc != 0 or kept(so) != 8 or "not kept" in se:
        fail(f"the third run exited {rc} and kept {kept(so)} of 8: {so}{se}")
    print("resume_trust: sweep of 8 points, 6 reports spoiled (a latency of -5, attainment 150, "
          "another point's report, a FIFO, a count of 2.5, another seed): each said and run "
          "again, the same rows")


def plan(kvsim, tmp):
    out = os.path.join(tmp, "p")
    cmd = [kvsim, "plan", "--synthetic-requests", "300", "--synthetic-rate", "60",
           "--synthetic-input-len", "2000", "--slo-ttft-ms", "500", "--min", "engines=1..8",
           "--attainment", "99", "--out", out, "--quiet"]

    def answer():
        rc, so, se = run(cmd)
        if rc != 0:
            fail(f"the plan exited {rc}: {so}{se}")
        with open(os.path.join(out, "plan.json")) as f:
            return json.load(f)["answer"]["engines"], so, se

    first, so, _ = answer()
    if first != 5:
        fail(f"the plan's answer is {first} engines, not 5: {so}")
    ids = ids_by_engines(out)
    four = os.path.join(out, "reports", f"{ids[4]}.json")
    eight = os.path.join(out, "reports", f"{ids[8]}.json")
    edit(four, lambda d: set_at(d, "slo.attainment_pct.all", 150.0))
    got, so, se = answer()
    expect_said(se, four, r"its slo\.attainment_pct\.all 150 is not a percentage[^\n]*")
    if got != 5:
        fail(f"with engines=4's report spoiled the answer is {got} engines, not 5: {so}{se}")
    shutil.copyfile(eight, four)
    got, so, se = answer()
    expect_said(se, four, r"its configuration is not this point's: [^\n]*engines[^\n]*")
    if got != 5:
        fail(f"with engines=8's report as engines=4's the answer is {got} engines, not 5: "
             f"{so}{se}")
    print("resume_trust: plan answer 5 engines; a spoiled and a copied report of 4 engines "
          "are said and run again, the answer stands")


def main():
    kvsim, what = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="kvsim-resume-trust.") as tmp:
        {"sweep": sweep, "plan": plan}[what](kvsim, tmp)


if __name__ == "__main__":
    main()
