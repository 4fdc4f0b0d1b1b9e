#!/usr/bin/env python3
"""tests/mutation/run.py - the in-tree mutation runner (tests/mutation/README.md).

Each mutant of tests/mutation/mutants.jsonl is one fragment of one source file replaced by
something that behaves differently. The runner keeps one scratch copy of the tree and one build
of it (reused between runs: only what a mutant touches is rebuilt), and for each mutant:
applies it in place, builds, runs the ctest labels of the mutated file stopping at the first
failure, and puts the file back. A mutant is killed when a test fails; it survives when every
test passes. A fragment that no longer occurs exactly once in its file stops the run (exit 2):
the mutant must be updated with the code. A mutant that does not compile is an error too.

Prints one line per mutant, the score per file and in all, the survivors with why they survive,
and the run time; writes the same as JSON (--json). Exit 0 when the score is at least
--min-score (90 by default), 1 below it, 2 on an error.
"""
import argparse
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))

# The ctest labels a mutated file's tests carry (tests/testing.cmake). The pool's contract is
# exercised by the scheduler's scenarios too, and the engine's by the replays.
LABELS = [
    ("kvpool/", "kvpool|sched"),
    ("sched/", "sched"),
    ("runtime/replay/", "replay"),
    ("runtime/engine/", "engine|replay"),
]


def labels_of(path):
    for prefix, labels in LABELS:
        if path.startswith(prefix):
            return labels
    return None


def load_mutants(path):
    mutants = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                m = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON: {e}")
            for key in ("id", "file", "find", "replace", "why"):
                if not isinstance(m.get(key), str) or (not m[key] and key != "replace"):
                    sys.exit(f"{path}:{n}: field '{key}' must be a "
                             f"{'string' if key == 'replace' else 'non-empty string'}")
            if m["find"] == m["replace"]:
                sys.exit(f"{path}:{n}: mutant {m['id']} replaces its fragment by itself")
            if labels_of(m["file"]) is None:
                sys.exit(f"{path}:{n}: mutant {m['id']}: no test labels for {m['file']} "
                         "(run.py, LABELS)")
            m["line"] = n
            mutants.append(m)
    ids = [m["id"] for m in mutants]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        sys.exit(f"{path}: duplicate mutant ids: {sorted(dup)}")
    return mutants


def run(cmd, cwd=None, log=None, timeout=None):
    """Runs cmd; returns its exit status (its output goes to log, or is discarded)."""
    with open(log, "a") if log else open(os.devnull, "w") as out:
        try:
            return subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


def label_targets(build, labels):
    """The executables the tests of labels run (their commands' files in the build): the
    targets to rebuild for a mutant of a file with these labels."""
    out = subprocess.run(["ctest", "--test-dir", build, "-L", labels, "--show-only=json-v1"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout
    targets = set()
    for t in json.loads(out)["tests"]:
        for arg in t.get("command", []):
            if arg.startswith(build + os.sep) and os.path.isfile(arg) and os.access(arg, os.X_OK):
                targets.add(os.path.basename(arg))
    return sorted(targets)


def first_failed(build):
    """The name of a test the last ctest run saw fail (ctest's LastTestsFailed.log), or None."""
    try:
        with open(os.path.join(build, "Testing", "Temporary", "LastTestsFailed.log")) as f:
            for line in f:
                if ":" in line:
                    return line.strip().split(":", 1)[1]
    except OSError:
        pass
    return None


def sync_tree(work):
    """The scratch copy of the tracked files, updated in place (unchanged files keep their
    times, so the reused build rebuilds only what changed)."""
    src_copy = os.path.join(work, "src")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=SRC, check=True,
                           stdout=subprocess.PIPE).stdout.decode().split("\0")
    for rel in filter(None, files):
        a, b = os.path.join(SRC, rel), os.path.join(src_copy, rel)
        if not os.path.isfile(a):
            continue
        try:
            with open(a, "rb") as fa, open(b, "rb") as fb:
                if fa.read() == fb.read():
                    continue
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(b), exist_ok=True)
        shutil.copy2(a, b)
    # the shared traces and profiles are found beside the checkout (../shared)
    shared = os.path.join(os.path.dirname(SRC), "shared")
    link = os.path.join(work, "shared")
    if os.path.isdir(shared) and not os.path.exists(link):
        os.symlink(shared, link)
    return src_copy


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutants", default=os.path.join(HERE, "mutants.jsonl"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "kvsim-mutation"),
                    help="the scratch tree and build, reused between runs")
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--min-score", type=float, default=90.0)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--check", action="store_true",
                    help="only check that every fragment occurs exactly once (no build)")
    a = ap.parse_args()
    mutants = load_mutants(a.mutants)
    if a.only:
        want = set(a.only.split(","))
        mutants = [m for m in mutants if m["id"] in want]
        missing = want - {m["id"] for m in mutants}
        if missing:
            sys.exit(f"run.py: no mutant {sorted(missing)}")

    # Every fragment must still be there, once: checked against the tree before any work.
    stale = []
    for m in mutants:
        with open(os.path.join(SRC, m["file"])) as f:
            n = f.read().count(m["find"])
        if n != 1:
            stale.append(f"{a.mutants}:{m['line']}: mutant {m['id']}: its fragment occurs {n} "
                         f"times in {m['file']} (must be once): update the mutant")
    if stale:
        print("\n".join(stale), file=sys.stderr)
        return 2
    if a.check:
        print(f"run.py: {len(mutants)} mutants, every fragment found once")
        return 0

    t0 = time.monotonic()
    os.makedirs(a.work, exist_ok=True)
    src = sync_tree(a.work)
    build = os.path.join(a.work, "build")
    log = os.path.join(a.work, "log.txt")
    open(log, "w").close()
    env_cfg = ["cmake", "-S", src, "-B", build, "-DKVSIM_BUILD_BENCH=OFF", "-DKVSIM_WERROR=OFF"]
    if run(env_cfg, log=log) or run(["cmake", "--build", build, f"-j{a.jobs}"], log=log):
        print(f"run.py: the unmutated tree does not build (see {log})", file=sys.stderr)
        return 2
    print(f"run.py: {len(mutants)} mutants; scratch tree and build in {a.work} "
          f"(ready after {time.monotonic() - t0:.0f} s)", flush=True)

    targets = {}
    for labels in {labels_of(m["file"]) for m in mutants}:
        targets[labels] = label_targets(build, labels)
    # Without ctest's cost data the tests run in declaration order: the unit tests (quick, and
    # the first to fail) before the command-line ones, instead of the longest first.
    cost_data = os.path.join(build, "Testing", "Temporary", "CTestCostData.txt")

    killers_path = os.path.join(a.work, "killers.json")
    try:
        with open(killers_path) as f:
            killers = json.load(f)
    except (OSError, ValueError):
        killers = {}

    results = []
    for m in mutants:
        path = os.path.join(src, m["file"])
        with open(path) as f:
            original = f.read()
        t = time.monotonic()
        with open(path, "w") as f:
            f.write(original.replace(m["find"], m["replace"], 1))
        try:
            labels = labels_of(m["file"])
            if run(["cmake", "--build", build, f"-j{a.jobs}", "--target"] + targets[labels],
                   log=log):
                print(f"run.py: mutant {m['id']} does not compile (see {log}): fix it",
                      file=sys.stderr)
                return 2
            if os.path.exists(cost_data):
                os.remove(cost_data)
            # The test that killed this mutant last time runs first, alone: a mutant still
            # killed costs its build and one test.
            rc = 0
            if killers.get(m["id"]):
                rc = run(["ctest", "--test-dir", build, "-R", f"^{re.escape(killers[m['id']])}$",
                          "--timeout", "300"], log=log, timeout=600)
            if rc == 0:
                rc = run(["ctest", "--test-dir", build, "-L", labels_of(m["file"]),
                          "--stop-on-failure", f"-j{a.jobs}", "--timeout", "300"], log=log,
                         timeout=1800)
            killer = first_failed(build) if rc else None
            if killer:
                killers[m["id"]] = killer
            elif rc == 0:
                killers.pop(m["id"], None)
        finally:
            with open(path, "w") as f:
                f.write(original)
        killed = rc != 0
        secs = time.monotonic() - t
        results.append({"id": m["id"], "file": m["file"], "killed": killed,
                        "seconds": round(secs, 1), "why": m["why"],
                        "survives": m.get("survives", "")})
        print(f"  {m['id']:<28} {m['file']:<30} {'killed' if killed else 'SURVIVED'} "
              f"({secs:.0f} s)", flush=True)
    run(["cmake", "--build", build, f"-j{a.jobs}"], log=log)  # the tree as it is, for next time
    with open(killers_path, "w") as f:
        json.dump(killers, f, indent=1, sort_keys=True)

    files = sorted({r["file"] for r in results})
    print("\nscore per file:")
    for fname in files:
        rs = [r for r in results if r["file"] == fname]
        k = sum(r["killed"] for r in rs)
        print(f"  {fname:<30} {k}/{len(rs)}")
    killed = sum(r["killed"] for r in results)
    score = 100.0 * killed / len(results) if results else 100.0
    elapsed = time.monotonic() - t0
    survivors = [r for r in results if not r["killed"]]
    if survivors:
        print("\nsurvivors:")
        for r in survivors:
            print(f"  {r['id']} ({r['file']}): {r['survives'] or 'no reason recorded'}")
    print(f"\nmutation score: {killed}/{len(results)} = {score:.1f} % in {elapsed / 60:.1f} min "
          f"({a.jobs} jobs)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"score_pct": score, "killed": killed, "mutants": len(results),
                       "minutes": round(elapsed / 60, 2), "results": results}, f, indent=1)
    return 0 if score >= a.min_score else 1


if __name__ == "__main__":
    sys.exit(main())
