#!/usr/bin/env python3
"""plan_check.py KVSIM [--needs FILE] PLAN_ARGS...: `kvsim plan PLAN_ARGS`, checked against plain
replays (issue #37). With --needs FILE (a shared trace), skips (exit 77) when FILE is missing, or
fails when KVSIM_REQUIRE_TRACES=1.

Checks that:
- the plan exits 0 with an answer in plan.json (under "answer", keyed by the searched option);
- a plain `kvsim replay` (PLAN_ARGS without the plan's own options, the answer's value set) meets
  the attainment, and at the answer's harder neighbour (one engine fewer; the load x (1 + R))
  does not (--max: within the six significant digits of the candidates), unless the answer is the range's hardest end (then the plan must say so);
- plan.json's neighbour is that value, plan.svg has a circle per probe (one the answer), every probe is a row of rows.jsonl with its report, and
  the plan ran fewer probes than the candidates a full scan runs (for ranges of 8 or more);
- a rerun in the same directory gives the same plan.json answer and keeps every probe.

Prints `plan_check: OPTION=V meets (A %), W does not (B %): K probes of C candidates; the rerun
kept all K` and exits 0, or says what differs and exits 1. Works in a temporary directory.
"""
import json
import os
import subprocess
import sys
import tempfile

PLAN_ONLY = {"--min": 1, "--max": 1, "--attainment": 1, "--resolution": 1,
             "--cost-per-gpu-hour": 1, "--force": 0, "--quiet": 0}


def fail(msg):
    print(f"plan_check: {msg}")
    sys.exit(1)


def option(args, name):
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def replay_args(args):
    """PLAN_ARGS without the plan's own options."""
    out, i = [], 0
    while i < len(args):
        name = args[i].split("=", 1)[0]
        if name in PLAN_ONLY:
            i += 1 + (PLAN_ONLY[name] if "=" not in args[i] else 0)
            continue
        out.append(args[i])
        i += 1
    return out


def attainment(kvsim, args, opt, value, tmp):
    report = os.path.join(tmp, "plain.json")
    cmd = [kvsim, "replay", *replay_args(args), f"--{opt}", value, "--threads", "1",
           "--quiet", "--report", report]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"plain replay at {opt}={value} exited {p.returncode}: {p.stderr.strip()}")
    with open(report) as f:
        return json.load(f)["slo"]["attainment_pct"]["all"]


def plan(kvsim, args, out):
    p = subprocess.run([kvsim, "plan", *args, "--out", out, "--quiet"], capture_output=True,
                       text=True)
    if p.returncode != 0:
        fail(f"kvsim plan exited {p.returncode}: {p.stdout.strip()} {p.stderr.strip()}")
    if "plan: " not in p.stdout:
        fail(f"no answer line: {p.stdout.strip()}")
    with open(os.path.join(out, "plan.json")) as f:
        return json.load(f)


def text(x):
    return str(x) if isinstance(x, int) else repr(float(x))


def main():
    kvsim, args = sys.argv[1], sys.argv[2:]
    if args[:1] == ["--needs"]:
        need, args = args[1], args[2:]
        if not os.access(need, os.R_OK):
            if os.environ.get("KVSIM_REQUIRE_TRACES") == "1":
                fail(f"KVSIM_REQUIRE_TRACES=1 and {need} cannot be read")
            print(f"plan_check: skipped: {need} cannot be read (set KVSIM_TRACES_DIR)")
            sys.exit(77)
    target = float(option(args, "--attainment"))
    with tempfile.TemporaryDirectory(prefix="kvsim-plan-check.") as tmp:
        out = os.path.join(tmp, "plan")
        doc = plan(kvsim, args, out)
        opt = doc["option"]
        if not isinstance(doc.get("answer"), dict) or opt not in doc["answer"]:
            fail(f"plan.json has no answer keyed by {opt}: {doc.get('answer')}")
        value = doc["answer"][opt]
        got = attainment(kvsim, args, opt, text(value), tmp)
        if got < target:
            fail(f"a plain replay at {opt}={text(value)} attains {got} % < {target} %")
        if doc["goal"] == "min":
            harder = value - 1 if value > doc["range"][0] else None
        else:
            step, top = 1 + doc["resolution_pct"] / 100, doc["range"][1]
            # the last candidate is HI itself, closer than 1 + R
            harder = value * step if value * step <= top else top if value < top else None
        if harder is None:
            if doc["outcome"] != "range_end_meets" or doc["neighbour"] is not None:
                fail(f"the answer is the range's end but the outcome is {doc['outcome']}")
            said = f"{text(value)} is the range's end"
        else:
            nb = doc.get("neighbour")
            # --max candidates are rounded to six significant digits
            if not nb or abs(nb[opt] - harder) > 1e-5 * harder or nb["meets"]:
                fail(f"plan.json's neighbour is {nb}, expected {opt}={text(harder)} not meeting")
            harder = nb[opt]
            worse = attainment(kvsim, args, opt, text(harder), tmp)
            if worse >= target:
                fail(f"a plain replay at {opt}={text(harder)} attains {worse} % >= {target} %: "
                     f"the answer is not the boundary")
            if abs(worse - nb["slo_attainment_pct"]) > 1e-9:
                fail(f"the neighbour's attainment {nb['slo_attainment_pct']} is not the plain "
                     f"replay's {worse}")
            said = f"{text(harder)} does not ({worse} %)"
        rows = {}
        with open(os.path.join(out, "rows.jsonl")) as f:
            for line in f:
                row = json.loads(line)
                rows[row["id"]] = row
        for pr in doc["probes"]:
            if pr["id"] not in rows:
                fail(f"probe {pr} has no row")
            if not os.path.exists(os.path.join(out, "reports", pr["id"] + ".json")):
                fail(f"probe {pr} has no report")
        svg = open(os.path.join(out, "plan.svg")).read()
        ran = sum(1 for pr in doc["probes"] if pr["status"] == "ok")
        circles, answers = svg.count("<circle "), svg.count('<circle class="answer"')
        if circles != ran or answers != 1:
            fail(f"plan.svg has {circles} circles ({answers} the answer) for {ran} probes")
        n, cand = doc["probes_used"], doc["candidates"]
        if n != len(doc["probes"]) or n != len(rows):
            fail(f"probes_used {n}, {len(doc['probes'])} probes listed, {len(rows)} rows")
        if cand >= 8 and n >= cand:
            fail(f"{n} probes for {cand} candidates: no better than a full scan")
        again = plan(kvsim, args, out)
        if again["answer"] != doc["answer"] or again["probes_kept"] != n or \
                again["probes_used"] != n:
            fail(f"the rerun: answer {again['answer']}, {again['probes_kept']} kept of "
                 f"{again['probes_used']} (first run: {doc['answer']}, {n} probes)")
        print(f"plan_check: {opt}={text(value)} meets ({got} %), {said}: {n} probes of {cand} "
              f"candidates; the rerun kept all {n}")


if __name__ == "__main__":
    main()
