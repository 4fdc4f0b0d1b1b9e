/*
 * replay.h - the multi-engine replay (private to runtime/; `kvsim replay` is its front end).
 */
#ifndef KVSIM_REPLAY_H
#define KVSIM_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/engine.h"
#include "runtime/metrics.h"
#include "runtime/router.h"
#include "runtime/trace.h"
#include "sched/sched.h"

struct kvsim_replay_config {
    const char *trace_path; /* NULL: the built-in synthetic workload */
    struct kvsim_trace_opts trace_opts;
    struct kvsim_synth_opts synth; /* its seed is replaced by `seed` */
    struct sched_config sched;     /* per engine */
    struct kvsim_step_model model;
    uint32_t num_engines;
    uint32_t num_threads; /* capped at num_engines */
    enum kvsim_router_policy router;
    double overlap_weight; /* kv policy */
    bool kv_index_events;  /* kv policy: event-fed indexer instead of pool queries */
    uint64_t seed;
    const char *requests_path; /* per-request JSONL, or NULL */
    bool quiet;                /* no progress bar */
    /* offload tiers (docs/offload.md) */
    bool offload;                    /* G2 (and G3) behind every engine's G1 */
    struct kvsim_tiers_config tiers; /* per engine; its pool is set by the replay */
    bool g3_shared;                  /* one G3 of tiers.g3_blocks (> 0) for all engines, in the
                                      * block registry (docs/offload.md) */
    bool offload_pool;               /* thread-pool executor instead of inline */
    uint32_t offload_threads;        /* pool workers */
    uint64_t kv_bytes_per_token;     /* sets the bytes of a block copy */
};

/* Defaults of `kvsim replay`: 4 engines, kv router, 16-token blocks, 16,384 blocks per engine,
 * max_num_seqs 256, max_num_batched_tokens 8192, prefix caching and chunked prefill on, one
 * thread per CPU. */
void kvsim_replay_config_default(struct kvsim_replay_config *c);

/*
 * kvsim_replay_run - load the trace (or generate the workload), replay it, summarize into
 * *report and write the per-request records if asked. Returns 0, or a negative errno with a
 * one-line message in err (-EINVAL/-ENOENT: bad input or configuration; -EDEADLK: an engine
 * reached a dead end; -EUCLEAN: an invariant broke).
 * With cfg->g3_shared the calling thread (and every worker) is registered with the block
 * registry for the duration of the run: the caller must not be registered already.
 */
int kvsim_replay_run(const struct kvsim_replay_config *cfg, struct kvsim_report *report, char *err,
                     size_t errlen);

#endif /* KVSIM_REPLAY_H */
