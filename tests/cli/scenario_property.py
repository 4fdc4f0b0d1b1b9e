#!/usr/bin/env python3
"""scenario_property.py KVSIM [CASES] [SEED]: a property test of the scenario format's limits
(issue #34, docs/conformance.md "Limits").

The property: a scenario built at random from the format's pieces (token lists made of arrays,
`repeat`, `range` and `concat` nested at random, sized from 0 to past 2^63; engine keys at
their edges; adds, schedules, outputs, checks, aborts and advances) is, under `kvsim conform`,

- refused: exit 2, `INVALID` (nothing ran), or exit 1, `FAIL` (a step refused when it ran), with
  a message naming the step and key (a token list's JSON path, e.g.
  `step 2 (add): prompt.concat[1].range`), or
- run: exit 0 (`PASS`) or 1 (`FAIL`, something did not hold)

within 5 s and 256 MiB of resident memory. Anything else (another exit code, a signal, an
"internal error", more time or memory) breaks it.

Prints one line per failure, then `scenario_property: N cases, F failures (R refused by a
limit)`; exits 1 on any failure. Works in a temporary directory under $TMPDIR, removed at exit.
"""
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

TIME_LIMIT_S = 5.0
RSS_LIMIT_KB = 256 * 1024

# Sizes of a repeat or a range: mostly small, so that most scenarios run; then the edges of the
# limits (2^20 tokens a list, 2^22 a scenario), then far past them.
EDGE_SIZES = [1 << 19, (1 << 20) - 1, 1 << 20, (1 << 20) + 1]
FAR_SIZES = [100_000_000, 1 << 32, 1 << 40, (1 << 62)]
BAD_TOKEN_IDS = [(1 << 32) - 1, 1 << 32, -1]


def size(rng):
    x = rng.random()
    if x < 0.8:
        return rng.randint(0, 64)
    return rng.choice(EDGE_SIZES) if x < 0.93 else rng.choice(FAR_SIZES)


def token_id(rng):
    return rng.choice(BAD_TOKEN_IDS) if rng.random() < 0.02 else rng.randint(0, 100)


def token_list(rng, depth=0):
    """A token list of the format: an array, a repeat, a range or a concat of lists."""
    kind = rng.choice(["array", "repeat", "range", "concat"] if depth < 40 else ["array"])
    if kind == "array":
        return [token_id(rng) for _ in range(rng.randint(0, 8))]
    if kind == "repeat":
        return {"repeat": token_id(rng), "n": size(rng)}
    if kind == "range":
        a = rng.randint(0, 1000) if rng.random() < 0.9 else rng.choice(FAR_SIZES)
        n = size(rng)
        return {"range": [a, a + n] if rng.random() < 0.97 else [a + n, a]}
    # concat: mostly a few children; sometimes a deep chain (past KVSIM_SCENARIO_MAX_LIST_DEPTH)
    if rng.random() < 0.03:
        inner = token_list(rng, 40)
        for _ in range(rng.randint(20, 45)):
            inner = {"concat": [inner]}
        return inner
    return {"concat": [token_list(rng, depth + 1) for _ in range(rng.randint(0, 4))]}


# An engine key's usual values first, then its edges; edges are drawn one time in ten.
CONFIG_VALUES = {
    "block_size": ([1, 2, 4, 16], [65536, 65537, (1 << 32) - 1, 0]),
    "num_blocks": ([8, 100, 1000, 10000], [0, 1, 2, 1 << 20, (1 << 20) + 1, (1 << 32) - 1]),
    "max_num_seqs": ([1, 2, 4, 256], [0, (1 << 32) - 1]),
    "max_num_batched_tokens": ([8, 64, 8192], [0, 1, (1 << 32) - 1]),
    "max_model_len": ([64, 2048], [1, 2, 1 << 20, (1 << 32) - 1]),
    "long_prefill_token_threshold": ([0, 32], [1, (1 << 32) - 1]),
    "enable_chunked_prefill": ([True, False], []),
    "enable_prefix_caching": ([True, False], []),
    "async_scheduling": ([True, False], []),
    "policy": (["fcfs", "priority"], []),
    "check_liveness": ([True, False], []),
}


def config(rng):
    cfg = {}
    for key, (usual, edges) in CONFIG_VALUES.items():
        if rng.random() < 0.4:
            cfg[key] = rng.choice(edges) if edges and rng.random() < 0.1 else rng.choice(usual)
    return cfg


def scenario(rng, case):
    cfg = config(rng)
    ids, steps = [], []
    for _ in range(rng.randint(1, 24)):
        op = rng.choice(["add", "add", "schedule", "schedule", "output", "output", "check",
                         "abort", "advance"])
        if op == "add" or not ids:
            rid = f"r{len(ids)}"
            ids.append(rid)
            add = {"op": "add", "id": rid, "prompt": token_list(rng),
                   "max_tokens": rng.choice([1, 2, 16, 1000, (1 << 32) - 1])}
            if cfg.get("policy") == "priority":
                add["priority"] = rng.randint(-2, 2)
            if rng.random() < 0.1:
                add["stop_token_ids"] = [rng.randint(0, 100)]
            steps.append(add)
        elif op == "schedule":
            steps.append({"op": "schedule"})
        elif op == "output":
            steps.append({"op": "output", "sampled": {
                r: token_list(rng) if rng.random() < 0.1 else [rng.randint(0, 100)]
                for r in rng.sample(ids, rng.randint(0, len(ids)))}})
        elif op == "check":
            if rng.random() < 0.3:
                steps.append({"op": "check", "expect": {"output_tokens": {
                    rng.choice(ids): token_list(rng)}}})
            else:
                steps.append({"op": "check", "expect": {}})
        elif op == "abort":
            steps.append({"op": "abort", "id": rng.choice(ids)})
        else:
            steps.append({"op": "advance", "by_ns": rng.choice([0, 1, 10**9])})
    return {"name": f"property case {case}", "config": cfg, "steps": steps}


def run(kvsim, tmp, case, doc):
    path = os.path.join(tmp, f"case{case}.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    out_path = path + ".out"
    with open(out_path, "w") as out:
        t0 = time.monotonic()
        p = subprocess.Popen([kvsim, "conform", path], stdout=out, stderr=subprocess.STDOUT)
        deadline = t0 + 4 * TIME_LIMIT_S
        while True:  # os.wait4 gives this child's own peak RSS
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                pid, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.002)
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        wall = time.monotonic() - t0
    with open(out_path) as f:
        text = f.read()
    os.unlink(path)
    os.unlink(out_path)
    return p.returncode, text, wall, usage.ru_maxrss


LIMIT_RE = re.compile(r"(at most|nest more than)")
PATH_RE = re.compile(r"(step \d+ \(\w+\): [\w.\[\]]+|config: key '\w+')")


def check(case, doc, rc, text, wall, rss_kb):
    """The failures of one run (empty: the property holds)."""
    errs = []
    if rc not in (0, 1, 2):
        errs.append(f"exit {rc}")
    elif rc == 0 and not text.startswith("PASS "):
        errs.append("exit 0 without PASS")
    elif rc == 1 and not text.startswith("FAIL "):
        errs.append("exit 1 without FAIL")
    elif rc == 2 and not text.startswith("INVALID "):
        errs.append("exit 2 without INVALID")
    if "internal error" in text:
        errs.append("internal error")
    if LIMIT_RE.search(text) and not PATH_RE.search(text):
        errs.append("a limit's refusal that names no step and key")
    if wall > TIME_LIMIT_S:
        errs.append(f"{wall:.2f} s (limit {TIME_LIMIT_S} s)")
    if rss_kb > RSS_LIMIT_KB:
        errs.append(f"{rss_kb // 1024} MiB resident (limit {RSS_LIMIT_KB // 1024} MiB)")
    return errs


def main():
    kvsim = sys.argv[1]
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 34
    rng = random.Random(seed)
    docs = [scenario(rng, i) for i in range(cases)]
    failures = refused = 0
    with tempfile.TemporaryDirectory(prefix="scenario-property-") as tmp:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futs = [pool.submit(run, kvsim, tmp, i, d) for i, d in enumerate(docs)]
            for i, fut in enumerate(futs):
                rc, text, wall, rss = fut.result()
                refused += bool(LIMIT_RE.search(text))
                errs = check(i, docs[i], rc, text, wall, rss)
                if errs:
                    failures += 1
                    first = text.splitlines()[0] if text else "(no output)"
                    print(f"case {i} (seed {seed}): {'; '.join(errs)}: {first[:300]}")
                    print(f"  scenario: {json.dumps(docs[i])[:2000]}")
    print(f"scenario_property: {cases} cases, {failures} failures ({refused} refused by a limit)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
