/*
 * runtime.h - kvsim's public umbrella: what an embedder includes.
 *
 * It brings in the runtime's modules, each with its own header and contract:
 *   input/input.h    traces (Mooncake JSONL, Azure CSV) and the seeded synthetic workload
 *   report/report.h  the metrics collector, percentiles and the report writers
 *   engine/engine.h  an engine: scheduler core + G1 pool + step model + offload tiers
 *   replay/replay.h  the multi-engine replay: epochs, worker threads, routers
 * and, below them, the core (kvpool/kvpool.h, kvpool/registry.h, sched/sched.h,
 * offload/offload.h). Plus, here: the version and kvsim's error codes.
 *
 * Errors everywhere are negative errno values. Where kvsim gives an errno a meaning of its own,
 * the code has a KVSIM_E* name below and kvsim_strerror() says what kvsim means by it (a dead
 * end must not print "Resource deadlock avoided").
 *
 * Threads: nothing here has hidden global state; the per-module headers state which thread may
 * call what.
 */
#ifndef KVSIM_RUNTIME_H
#define KVSIM_RUNTIME_H

#include <errno.h>

#include "kvsim_export.h"

#include "runtime/engine/engine.h"
#include "runtime/input/input.h"
#include "runtime/replay/replay.h"
#include "runtime/report/report.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "kvsim X.Y.Z": the library's version string. Never NULL. Any thread. */
KVSIM_EXTERN const char *kvsim_version(void);
/* Name of the allocator linked into this build: "jemalloc" or "libc". Any thread. */
KVSIM_EXTERN const char *kvsim_allocator(void);

/*
 * The codes kvsim gives its own meaning: XX(NAME, errno, message). KVSIM_E<NAME> is -errno.
 * Every other negative errno keeps the C library's meaning.
 */
#define KVSIM_ERRNO_MAP(XX)                                                                        \
    XX(DEADEND, EDEADLK,                                                                           \
       "dead end: unfinished requests that no step, transfer or arrival can "                      \
       "wake")                                                                                     \
    XX(INVARIANT, EUCLEAN, "invariant violation (ownership, queue or capacity check failed)")      \
    XX(STALE, ESTALE, "stale allocation plan: the pool changed since it was prepared")             \
    XX(SCENARIO, EBADMSG, "scenario failed: an expectation or a checked rule did not hold")        \
    XX(NOREPRO, EPROTO, "the failure does not reproduce the same way")                             \
    XX(FINISHED, EALREADY, "the request has already finished")

enum {
#define KVSIM__ERRNO_ENUM(name, err, msg) KVSIM_E##name = -(err),
    KVSIM_ERRNO_MAP(KVSIM__ERRNO_ENUM)
#undef KVSIM__ERRNO_ENUM
};

/*
 * kvsim_strerror - what error code err (a negative errno) means: kvsim's meaning for the codes
 * of KVSIM_ERRNO_MAP, the C library's otherwise ("Unknown error" for anything else, 0 gives
 * "Success"). A static string; any thread.
 */
KVSIM_EXTERN const char *kvsim_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_RUNTIME_H */
