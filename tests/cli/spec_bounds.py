#!/usr/bin/env python3
"""spec_bounds.py KVSIM CASE: a sweep spec's size is bounded before it is allocated, and out of
memory while reading a spec or engine arguments says so (issue #64). Run under expect.sh (in a
directory of its own): prints kvsim's output, exits with kvsim's status, or 1 saying what broke.

  values-file     a 12 MB --spec file of six million values: refused as soon as the count
                  passes the limit, in less than 128 MiB of resident memory
  values-stream   a --spec that never ends, through a pipe: refused at the count too
  oom-spec        `kvsim sweep --spec` of a list of 199,000 values under an address-space limit
  oom-engine-args COMMAND: `kvsim COMMAND --engine-args` (replay, sweep, plan) of the same

The oom cases find (by bisection, to 1/4 MiB) the smallest address-space limit under which
kvsim reads a small document and goes on to refuse an unknown option after it, then read the
large one (its tree needs about 10 MB) with 2 MiB more: jansson runs out of memory building the
tree, and says nothing; kvsim must say "out of memory" and exit 1 (not an empty message, not
exit 2). They cannot run under a sanitizer (its shadow memory needs the address space).
"""
import resource
import subprocess
import sys

RSS_LIMIT_KB = 128 * 1024
MIB = 1 << 20
VALUES = 199_000  # under the spec's limit of values (200,000)


def fail(msg):
    print(f"spec_bounds: {msg}")
    sys.exit(1)


def show(p):
    sys.stdout.write(p.stdout + p.stderr)
    sys.stdout.flush()


def values_file(kvsim):
    with open("s.json", "w") as f:
        f.write('{"grid": {"engines": [' + ",".join(["1"] * 6_000_000) + "]}}")
    p = subprocess.run([kvsim, "sweep", "--spec", "s.json", "--out", "o"], capture_output=True,
                       text=True, timeout=60)
    show(p)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if rss > RSS_LIMIT_KB:
        fail(f"kvsim reached {rss // 1024} MiB of resident memory refusing the spec "
             f"(at most {RSS_LIMIT_KB // 1024})")
    return p.returncode


def values_stream(kvsim):
    gen = subprocess.Popen(["bash", "-c", "printf '{\"grid\": {\"engines\": ['; yes 1, | tr -d '\\n'"],
                           stdout=subprocess.PIPE)
    p = subprocess.run([kvsim, "sweep", "--spec", "/dev/stdin", "--out", "o"], stdin=gen.stdout,
                       capture_output=True, text=True, timeout=60)
    gen.stdout.close()
    gen.kill()
    gen.wait()
    show(p)
    return p.returncode


def limited(cmd, limit):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, preexec_fn=set_limit)


def oom(kvsim, cmd, option):
    """cmd: kvsim's arguments before `option FILE --no-such-option`."""
    key = "max_num_seqs" if option == "--engine-args" else "grid"
    with open("small.json", "w") as f:
        f.write('{"scheduling_policy": "fcfs"}' if option == "--engine-args" else '{"options": {}}')
    with open("big.json", "w") as f: # a tree of about 10 MB: jansson fails building it
        inner = "[" + ",".join(["1"] * VALUES) + "]"
        f.write('{"' + key + '": ' + (inner if option == "--engine-args" else
                                      '{"engines": ' + inner + "}") + "}")

    def gets_past(limit):
        p = limited([kvsim, *cmd, option, "small.json", "--no-such-option"], limit)
        return "unknown option '--no-such-option'" in p.stderr

    lo, hi = 8 * MIB, 1024 * MIB # the smallest limit that reads the small document: (lo, hi]
    if not gets_past(hi):
        fail("kvsim never got past a small document under an address-space limit of 1 GiB")
    while hi - lo > MIB // 4:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if gets_past(mid) else (mid, hi)
    p = limited([kvsim, *cmd, option, "big.json", "--no-such-option"], hi + 2 * MIB)
    show(p)
    return p.returncode


def main():
    kvsim, case = sys.argv[1], sys.argv[2]
    synth = ["--synthetic-requests", "5"]
    if case == "values-file":
        rc = values_file(kvsim)
    elif case == "values-stream":
        rc = values_stream(kvsim)
    elif case == "oom-spec":
        rc = oom(kvsim, ["sweep", "--out", "o"], "--spec")
    elif case == "oom-engine-args":
        command = sys.argv[3]
        rest = {"replay": synth,
                "sweep": [*synth, "--grid", "engines=1,2", "--out", "o"],
                "plan": [*synth, "--min", "engines=1..2", "--slo-ttft-ms", "100",
                         "--attainment", "50", "--out", "o"]}[command]
        rc = oom(kvsim, [command, *rest], "--engine-args")
    else:
        fail(f"unknown case '{case}'")
    sys.exit(rc)


if __name__ == "__main__":
    main()
