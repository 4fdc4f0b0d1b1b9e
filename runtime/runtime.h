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

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_RUNTIME_H */
