#!/usr/bin/env python3
"""config_property.py KVSIM TRACE: a property test of `--config` and `--engine-args` (issue #33).

The property: whatever value a numeric field of a step-model file (`--config`) or of a vLLM
engine-argument file (`--engine-args`) holds, `kvsim replay` either

- refuses the file: exit 2, with a message that names the field (and no "internal error"), or
- runs: exit 0, every request of the trace has a record (`--requests-out`), completed or
  rejected with a reason, and every latency of a completed request is finite, non-negative, at
  least the step floor (1 us: KVSIM_STEP_MIN_NS) where it spans a step, and not absurd.

Anything else (exit 1, a crash, a signal, a timeout) breaks it. The values are the edges a
loader gets wrong: zero, negatives, denormal-small and overflowing-large reals, integers past
int32, int64 and uint64, and non-numbers. Step-model cases start from the defaults of
docs/replay.md and change one field (each array element on its own), then a seeded random sample
changes 2 or 3 at once; engine-argument cases hold one key each.

Prints one line per failure, then `config_property: N cases, F failures`; exits 1 on any
failure. Works in a temporary directory under $TMPDIR (ctest's test-tmp/), removed at exit.
"""
import concurrent.futures
import json
import math
import os
import random
import subprocess
import sys
import tempfile

# Values as JSON text, written verbatim: `1e6` stays a JSON real and `1000000` an integer (an
# integer key refuses the first and may accept the second), and 18446744073709551616 reaches
# the JSON parser as written (it is past what jansson's integers hold).
VALUES = ["0", "-1", "-1e-300", "1e-300", "1e300", "-1e300", "1e-3", "1", "1e6", "1e7",
          "9223372036854775807", "18446744073709551616", "4294967296", '"abc"', "true", "null",
          "1.5"]
# Integer spellings of 1e6 and 1e7, for the integer keys of the engine arguments.
INT_VALUES = ["1000000", "10000000"]

# The step model's fields and their defaults as JSON text (docs/replay.md,
# kvsim_step_model_default). An array element is one field of its own.
STEP_DEFAULTS = {
    "step_model.prefill_ms[0]": "4.209989e-7",
    "step_model.prefill_ms[1]": "1.518344e-2",
    "step_model.prefill_ms[2]": "16.50142",
    "step_model.decode_ms[0]": "-25.74",
    "step_model.decode_ms[1]": "54.01",
    "step_model.decode_ms[2]": "5.74",
    "step_model.decode_floor_ms": "1.0",
    "speedup_ratio": "1.0",
    "step_overhead_ms": "0.0",
}

# The numeric keys of runtime/engine/engine_args.c (apply_key); the booleans and
# scheduling_policy are not numbers.
ENGINE_KEYS = ["block_size", "num_gpu_blocks_override", "max_num_seqs", "max_num_batched_tokens",
               "watermark", "max_num_queued_reqs", "max_num_active_seqs", "max_model_len",
               "long_prefill_token_threshold", "data_parallel_size"]
ENGINE_INT_KEYS = [k for k in ENGINE_KEYS if k != "watermark"]

# Every step takes at least KVSIM_STEP_MIN_NS = 1000 ns; the records give milliseconds with six
# decimals (whole nanoseconds), so 0.1 ns of slack only absorbs the decimal printing.
STEP_FLOOR_MS = 1e-3
SLACK_MS = 1e-7
# A step takes at most an hour (KVSIM_STEP_MAX_NS, 3.6e6 ms). The small trace (4 requests,
# 3513 prompt and 21 output tokens, arrivals within 0.5 s) is done in at most a few thousand
# steps, each advancing some token, even one token per step; 1e5 steps leave 25x room for
# preemption recomputes. A latency above 1e5 hours means a clock that wrapped or ran away.
LATENCY_MAX_MS = 1e5 * 3.6e6
# A hang detector, not a speed test: a pool of 10,000,000 blocks per engine takes about 10 s to
# set up under ASan alone, and CI runs two tests at a time (20 s timed out there once).
RUN_TIMEOUT_S = 60


def leaf_key(field):
    """The key a message names for a field: 'step_model.prefill_ms[1]' -> 'prefill_ms'."""
    return field.split("[")[0].split(".")[-1]


def names_field(out, field):
    """Whether a message names the field: its key, or the command-line option of the same name
    (max_num_active_seqs as --max-num-active-seqs, where a check across options refuses it)."""
    key = leaf_key(field)
    return key in out or "--" + key.replace("_", "-") in out


def step_model_json(changes):
    """The default step-model file with the fields of `changes` (field -> JSON text) replaced."""
    v = dict(STEP_DEFAULTS, **changes)
    return ('{"step_model": {"prefill_ms": [%s, %s, %s], "decode_ms": [%s, %s, %s], '
            '"decode_floor_ms": %s}, "speedup_ratio": %s, "step_overhead_ms": %s}\n'
            % tuple(v[f] for f in STEP_DEFAULTS))


def engine_args_json(changes):
    return "{%s}\n" % ", ".join('"%s": %s' % (k, v) for k, v in changes.items())


def cases():
    """(option, changes): the baseline, one field at a time, then the random combinations."""
    out = [("--config", {}), ("--engine-args", {})]
    for field in STEP_DEFAULTS:
        out += [("--config", {field: v}) for v in VALUES]
    rng = random.Random(33)  # fixed: a failure reproduces run after run
    for _ in range(24):
        fields = rng.sample(sorted(STEP_DEFAULTS), rng.choice([2, 3]))
        out.append(("--config", {f: rng.choice(VALUES) for f in fields}))
    for key in ENGINE_KEYS:
        extra = INT_VALUES if key in ENGINE_INT_KEYS else []
        out += [("--engine-args", {key: v}) for v in VALUES + extra]
    return out


def check_records(path, n_requests, all_complete):
    """What is wrong with the records of a run that exited 0, or None. all_complete: the
    baseline, where no request may be rejected (else the property could hold vacuously)."""
    try:
        with open(path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        return "unreadable --requests-out: %s" % e
    if len(recs) != n_requests or len({r.get("id") for r in recs}) != n_requests:
        return "%d records for the trace's %d requests" % (len(recs), n_requests)
    for r in recs:
        rid, status = r.get("id"), r.get("status")
        if status == "rejected" and not all_complete:
            if not r.get("reject_reason"):
                return "request %s rejected without a reason" % rid
            continue
        if status != "completed":  # the run is not bounded: every request must end
            return "request %s ends %r" % (rid, status)
        # The latencies; ITL figures are null for a single output token.
        lat = {k: r.get(k) for k in ("ttft_ms", "e2e_ms", "itl_max_ms", "itl_sum_ms")}
        for k in ("ttft_ms", "e2e_ms"):
            if lat[k] is None:
                return "completed request %s has %s null" % (rid, k)
        for k, x in lat.items():
            if x is None:
                continue
            if not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                return "request %s: %s = %r" % (rid, k, x)
            if x > LATENCY_MAX_MS:
                return "request %s: %s = %r ms, above %g ms" % (rid, k, x, LATENCY_MAX_MS)
        # The first token comes at a step's end, and so does the last; each ITL gap is a step.
        for k in ("ttft_ms", "e2e_ms", "itl_max_ms"):
            if lat[k] is not None and lat[k] < STEP_FLOOR_MS - SLACK_MS:
                return "request %s: %s = %r ms, below the step floor" % (rid, k, lat[k])
        if lat["e2e_ms"] < lat["ttft_ms"] - SLACK_MS:
            return "request %s: e2e_ms %r below ttft_ms %r" % (rid, lat["e2e_ms"], lat["ttft_ms"])
    return None


def run_case(kvsim, trace, n_requests, work, i, option, changes):
    """One replay: (its exit code or None, None if the property holds or else a line describing
    the failure)."""
    cfg = os.path.join(work, "c%d.json" % i)
    recs = os.path.join(work, "r%d.jsonl" % i)
    with open(cfg, "w") as f:
        f.write(step_model_json(changes) if option == "--config" else engine_args_json(changes))
    label = "%s %s" % (option, " ".join("%s=%s" % kv for kv in changes.items()) or "(defaults)")
    cmd = [kvsim, "replay", "--quiet", "--trace", trace, option, cfg, "--requests-out", recs]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "%s: timed out after %d s" % (label, RUN_TIMEOUT_S)
    # The file's path is no evidence of a field named: only the message counts.
    out = p.stdout.decode(errors="replace").replace(work, "$WORK")

    def fail(why):
        return p.returncode, "%s: exit %d: %s: %r" % (label, p.returncode, why, out[:200])

    if "internal error" in out:
        return fail("internal error")
    if p.returncode == 2:
        # A refusal must say which field is wrong: at least one of those changed. The step
        # bound names the keys of the polynomial it evaluated and speedup_ratio and
        # step_overhead_ms, the engine's max_num_batched_tokens where that sets the step.
        if not changes:
            return fail("the defaults refused")
        if not any(names_field(out, f) for f in changes):
            return fail("refused without naming %s"
                        % " or ".join(sorted({leaf_key(f) for f in changes})))
        return 2, None
    if p.returncode != 0:
        return fail("neither a run (0) nor a refusal (2)")
    why = check_records(recs, n_requests, all_complete=not changes)
    return fail(why) if why else (0, None)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: config_property.py KVSIM TRACE")
    kvsim, trace = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with open(trace) as f:
        n_requests = sum(1 for line in f if line.strip())  # blank lines are no requests
    todo = cases()
    with tempfile.TemporaryDirectory(prefix="kvsim-config-property.") as work:
        # The replays are short and mostly process start-up: a few at a time.
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(
                lambda ic: run_case(kvsim, trace, n_requests, work, ic[0], *ic[1]),
                enumerate(todo)))
    failures = [why for _, why in results if why]
    for line in failures:
        print("config_property: FAIL " + line)
    # How the cases split: both outcomes must be exercised for the property to say anything.
    print("config_property: %d ran and were checked, %d were refused"
          % (sum(1 for c, why in results if c == 0 and not why),
             sum(1 for c, why in results if c == 2 and not why)))
    print("config_property: %d cases, %d failures" % (len(todo), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
