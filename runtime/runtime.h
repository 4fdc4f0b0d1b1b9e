/*
 * runtime.h - the kvsim runtime: command-line front end and process-wide facilities.
 *
 * The replay runtime (worker threads, epochs, router, traces, reports) grows here; today it
 * holds the version query and the pool demonstration that `kvsim pool-demo` runs.
 */
#ifndef KVSIM_RUNTIME_H
#define KVSIM_RUNTIME_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "kvsim X.Y.Z": the library's version string. Never NULL. */
const char *kvsim_version(void);
/* Name of the allocator linked into this build: "jemalloc" or "libc". */
const char *kvsim_allocator(void);

/*
 * kvsim_pool_demo - run a short, deterministic walk through the G1 block pool (prefix hits,
 * free order, eviction, an aborted plan, the ownership check) and print it to out.
 * Returns 0, or a negative errno if a step did not behave as vLLM's pool does.
 */
int kvsim_pool_demo(FILE *out);

/*
 * kvsim_conform_main - `kvsim conform [--trace] FILE...` (argv[0] is "conform"): run scenario
 * files, print PASS/FAIL lines and "<N> passed, <M> failed". Returns the exit status: 0 when
 * all passed, 1 when any failed or could not be read, 2 for a usage error.
 */
int kvsim_conform_main(int argc, char **argv);

/*
 * kvsim_soak_main - `kvsim soak [options]` (argv[0] is "soak"): seeded randomized scheduler runs
 * with invariants, liveness and the #49675 progress rule checked after every op; a failing
 * seed's scenario is written for `kvsim conform`. Prints one summary line. Returns the exit
 * status: 0 (every seed passed), 1 (a seed failed), 2 (bad option).
 */
int kvsim_soak_main(int argc, char **argv);

/*
 * kvsim_minimize_main - `kvsim minimize TRACE.json [-o OUT.json]` (argv[0] is "minimize"):
 * delta-debug a failing scenario down to the steps and requests it needs to fail the same way.
 * Returns the exit status: 0 (written), 1 (could not verify or write it), 2 (bad option, or an
 * input that does not fail or is not a scenario).
 */
int kvsim_minimize_main(int argc, char **argv);

/*
 * kvsim_replay_main - `kvsim replay [options]` (argv[0] is "replay"): replay a trace or the
 * built-in workload and print the report. Returns the exit status: 0, 1 (the replay failed),
 * 2 (bad option, input or configuration).
 */
int kvsim_replay_main(int argc, char **argv);

/*
 * kvsim_stress_main - `kvsim stress [options]` (argv[0] is "stress"): hammer the offload
 * pipeline, then the block registry, from many threads, checking their invariants; print a
 * summary line per part with operations per second and the verdict. Returns the exit status:
 * 0, 1 (a violation), 2 (bad option).
 */
int kvsim_stress_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_RUNTIME_H */
