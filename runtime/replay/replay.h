/*
 * replay.h - the multi-engine replay: N engines on T worker threads behind a router
 * (router.h), advanced in epochs of virtual time (replay.c and its rooms). `kvsim replay` is its
 * front end (cli/replay_cmd.c).
 *
 * Threads: kvsim_replay_run starts and joins its own worker threads; call it from one thread.
 * Results are bit-identical for any thread count. Errors are negative errno values with a
 * one-line message.
 */
#ifndef KVSIM_REPLAY_H
#define KVSIM_REPLAY_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvsim_export.h"

#include "runtime/engine/engine.h"
#include "runtime/report/report.h"
#include "runtime/input/input.h"
#include "runtime/replay/router.h"
#include "sched/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the replay ------------------------------------------------------------------------------ */

/*
 * Disaggregated serving (docs/disagg.md): prefill engines and decode engines, each pool with its
 * own engine settings and router, every request's KV handed from its prefill engine to its
 * decode engine. Off while prefill_engines is 0 (an aggregated replay of num_engines engines).
 */
struct kvsim_disagg_config {
    uint32_t prefill_engines, decode_engines; /* both >= 1 when on */
    struct sched_config prefill_sched, decode_sched;
    enum kvsim_router_policy prefill_router, decode_router;
    struct kvsim_transfer_model transfer; /* its kv_bytes_per_token: the replay's */
    int64_t abort_timeout_ns;             /* from the pin; <= 0: never (default 480 s) */
    bool release_immediately;             /* --handoff-release immediate (a what-if) */
};

/* A replay's KV capacity per engine: the default, a token count (KVSIM_DEFAULT_KV_TOKENS at any
 * block size, so that a larger block is not more memory); a block count given
 * (--num-gpu-blocks, num_gpu_blocks_override); or derived from a model and a GPU's memory. */
enum kvsim_kv_capacity {
    KVSIM_KV_CAPACITY_DEFAULT_TOKENS = 0,
    KVSIM_KV_CAPACITY_BLOCKS,
    KVSIM_KV_CAPACITY_GPU_MEMORY,
};
#define KVSIM_DEFAULT_KV_TOKENS 262144u /* 16,384 blocks of 16 tokens, the null block included */
/* The default capacity's blocks at block_size: KVSIM_DEFAULT_KV_TOKENS / block_size, at least
 * 2 (the null block and one). */
static inline uint32_t kvsim_default_kv_blocks(uint32_t block_size)
{
    uint32_t n = block_size ? KVSIM_DEFAULT_KV_TOKENS / block_size : 2;
    return n > 2 ? n : 2;
}

struct kvsim_replay_config {
    const char *trace_path; /* NULL: the built-in synthetic workload (or `requests`) */
    /* Requests given in memory instead of a file (kvsim_replay_requests): copied at the start;
     * trace_path must be NULL. The report names them trace_label (NULL: "requests"). */
    const struct kvsim_trace *requests;
    const char *trace_label;
    struct kvsim_trace_opts trace_opts;
    struct kvsim_synth_opts synth; /* its seed is replaced by `seed` */
    struct sched_config sched;     /* per engine */
    struct kvsim_step_model model;
    uint32_t num_engines; /* with data_parallel_size > 1: deployments */
    /* Data parallelism (docs/replay.md): each of the num_engines deployments is this many
     * engines (ranks) behind vLLM's DP load balancer (the dp-lb router); the router picks the
     * deployment. 0 or 1: none. Not with disaggregated serving. */
    uint32_t data_parallel_size;
    /* A mixture-of-experts model's experts split over the ranks (the step model and capacity
     * have it: kvsim_profile_config, kvsim_gpu_config); here for the report. */
    bool enable_expert_parallel;
    /* GPUs per engine (rank): the tensor-parallel degree (0 or 1: one); the report's run.gpus */
    uint32_t tensor_parallel_size;
    /* Where sched.num_blocks came from, for the report (kvsim_options_resolve sets it). */
    enum kvsim_kv_capacity kv_capacity;
    uint32_t num_threads; /* capped at the engines */
    enum kvsim_router_policy router;
    double overlap_weight; /* kv policy */
    bool kv_index_events;  /* kv policy: event-fed indexer instead of pool queries */
    /* What the kv and least-loaded routers see (router.h, docs/replay.md "What the router
     * sees"): exact, or what engines did kv_event_delay_ns after the end of the step that did
     * it; router_predict_ttl_ns > 0: the kv router's predict-on-route. */
    enum kvsim_router_view router_view;
    int64_t kv_event_delay_ns;
    int64_t router_predict_ttl_ns;
    uint64_t seed;
    bool quiet; /* no progress bar */
    /* offload tiers (docs/offload.md) */
    bool offload;                    /* G2 (and G3) behind every engine's G1 */
    struct kvsim_tiers_config tiers; /* per engine; its pool is set by the replay */
    bool g3_shared;                  /* one G3 of tiers.g3_blocks (> 0) for all engines, in the
                                      * block registry (docs/offload.md) */
    bool offload_pool;               /* thread-pool executor instead of inline */
    uint32_t offload_threads;        /* pool workers */
    uint64_t kv_bytes_per_token;     /* sets the bytes of a block copy and of a KV transfer */
    struct kvsim_disagg_config disagg;
    struct kvsim_slo slo; /* SLOs the report scores (zeros: none) */
    /* Closed loop (Dynamo's --replay-concurrency): at most this many sessions in flight (0:
     * open loop by the trace's timestamps); the first ones start at the first arrival, each
     * next one when a session's last turn finishes, in trace order; first turns' timestamps
     * are not used, later turns keep their think times (docs/replay.md). */
    uint32_t replay_concurrency;
    /* The files the run writes at its end (kvsim_outputs_write): the report, the records, the
     * time series (engines sampled every timeseries_interval_ns from the first arrival, kept
     * only when an output needs it), the HTML report, the handoff event log. */
    struct kvsim_outputs outputs;
    int64_t timeseries_interval_ns; /* > 0 (default 1 s) */
    /* An early end (the report then says so: complete false, run.end): virtual time past the
     * first arrival after which nothing is processed (0: none), and a flag another context (a
     * signal handler) may set to end the replay at the next epoch boundary (NULL: none). */
    int64_t max_sim_time_ns;
    const volatile sig_atomic_t *stop_flag;
    const char *config_text; /* the run's configuration for the report (--config-out), or NULL */
    /* Every step scheduled one by one, no decode fast path (--decode-fast-path off): the same
     * results, slower; it is there to check that they are the same. */
    bool decode_fast_path_off;
};

/*
 * kvsim_replay_run - load the trace (or generate the workload), replay it, summarize into
 * *report and write the per-request records, the time series, the HTML report and the handoff
 * event log if asked. The report
 * may own memory: kvsim_report_fini() it. Returns 0, or a negative errno with a one-line
 * message in err (-EINVAL/-ENOENT: bad input or configuration; -EDEADLK: an engine, or the
 * disaggregated replay as a whole, reached a dead end; -EUCLEAN: an invariant broke).
 * With cfg->g3_shared the calling thread (and every worker) is registered with the block
 * registry for the duration of the run: the caller must not be registered already.
 */
KVSIM_EXTERN int kvsim_replay_run(const struct kvsim_replay_config *cfg,
                                  struct kvsim_report *report, char *err, size_t errlen);

/*
 * kvsim_replay_gpus - the GPUs the run cfg describes: its engines (the prefill and decode ones
 * of a disaggregated run; num_engines deployments x data_parallel_size ranks with data
 * parallelism) x tensor_parallel_size. What plan prices and the report's run.gpus. Pure.
 */
KVSIM_EXTERN uint64_t kvsim_replay_gpus(const struct kvsim_replay_config *cfg);
/* The report's kv_capacity and kv_capacity_tokens of t from cfg (sched.num_blocks, block_size
 * and kv_capacity). Pure. */
KVSIM_EXTERN void kvsim_replay_capacity_summary(const struct kvsim_replay_config *cfg,
                                                struct kvsim_timing_summary *t);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_REPLAY_H */
