/*
 * engine.h - one simulated serving engine: a scheduler core, its G1 pool and a step-time model,
 * advanced in virtual time (private to runtime/).
 *
 * Threads: an engine is owned by one worker thread (engine i by thread i mod T); every function
 * here is called by that thread, except the published fields (struct kvsim_engine_pub), which
 * the coordinator reads at epoch boundaries while every worker waits at the barrier.
 *
 * Time model (eager pass, as Dynamo's mocker): at a step's start the scheduler decides and the
 * step's duration is computed; its output (one token per request whose chunk reached the end of
 * its tokens) is applied at the step's end, and the next step starts at that same instant.
 */
#ifndef KVSIM_ENGINE_H
#define KVSIM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/metrics.h"
#include "runtime/tiers.h"
#include "runtime/trace.h"
#include "sched/sched.h"

/* What a step model sees of a step. */
struct kvsim_step_batch {
    uint64_t prefill_tokens;   /* new prompt/recompute tokens in the step */
    uint32_t num_prefill_reqs; /* requests contributing prefill tokens */
    uint32_t num_decode_reqs;  /* requests decoding one token */
    double kv_usage;           /* KV utilisation after scheduling, in [0, 1] */
};

/*
 * The step-time model: one interface, so that profiled tables can plug in later. The default is
 * the polynomial of Dynamo's mocker: prefill_ms = p2*T^2 + p1*T + p0 over the step's new prefill
 * tokens T; decode_ms = d2*u^2 + d1*u + d0 over KV utilisation u, floored at decode_floor_ms; a
 * mixed step pays both; everything divided by speedup_ratio.
 */
struct kvsim_step_model {
    double prefill_ms[3]; /* p2, p1, p0 */
    double decode_ms[3];  /* d2, d1, d0 */
    double decode_floor_ms;
    double speedup_ratio;
};
void kvsim_step_model_default(struct kvsim_step_model *m);
/* Duration of a step in virtual nanoseconds (>= 1 for a non-empty step). */
int64_t kvsim_step_model_duration_ns(const struct kvsim_step_model *m,
                                     const struct kvsim_step_batch *b);
/* A lower bound on the duration of any non-empty step (>= 1 ns). */
int64_t kvsim_step_model_min_duration_ns(const struct kvsim_step_model *m);
/*
 * Reads {"step_model": {"prefill_ms": [p2,p1,p0], "decode_ms": [d2,d1,d0],
 * "decode_floor_ms": x}, "speedup_ratio": s} (every key optional, unknown keys rejected) from a
 * JSON file over the defaults in *m. Returns 0, or -EINVAL/-ENOENT with a message in err naming
 * the file and the key.
 */
int kvsim_step_model_load(const char *path, struct kvsim_step_model *m, char *err, size_t errlen);

/* What the router may read at a boundary (written by the owner between boundaries). */
struct kvsim_engine_pub {
    uint32_t active_blocks; /* referenced KV blocks */
    uint64_t queued_tokens; /* prompt tokens of requests routed here and not yet admitted */
    uint32_t num_running, num_waiting;
    /* Earliest instant a request with a session follow-up (cfg.next_turn) could finish here:
     * its remaining tokens need that many sampling steps, the first ending no earlier than the
     * running step. INT64_MAX when the engine holds none. */
    int64_t earliest_parent_finish;
};

/* A request the engine finished (for closed-loop session follow-ups), in completion order. */
struct kvsim_engine_done {
    uint32_t req; /* request index */
    int64_t finish_ns;
};

struct kvsim_engine;

struct kvsim_engine_config {
    uint32_t id;
    struct sched_config sched;
    struct kvsim_step_model model;
    const struct kvsim_trace *trace;        /* request specs (read-only, shared) */
    struct kvsim_metrics *metrics;          /* records (each written by the request's owner) */
    uint32_t thread;                        /* owning worker thread (metrics sketch index) */
    bool kv_events;                         /* keep Stored/Removed events for the router */
    const int32_t *next_turn;               /* per request: its session follow-up or -1 (or NULL) */
    const struct kvsim_tiers_config *tiers; /* G2/G3 offload tiers, or NULL for none */
};

/* What the offload side of an engine did (zero without tiers). */
struct kvsim_engine_offload {
    bool enabled;
    struct kvsim_tiers_stats tiers;
    struct sched_offload_counters sched;
    uint64_t prefill_tokens; /* prompt tokens computed by steps (recomputation included) */
    int64_t blocked_ns;      /* virtual time a request waited for capacity held by copies */
};
void kvsim_engine_offload_stats(const struct kvsim_engine *e, struct kvsim_engine_offload *out);

/* Returns 0 and *out, or a negative errno (-EINVAL for an impossible configuration). */
int kvsim_engine_create(const struct kvsim_engine_config *cfg, struct kvsim_engine **out);
void kvsim_engine_destroy(struct kvsim_engine *e);

/*
 * kvsim_engine_admit_owner - add request `req` arriving at `t` (the current boundary). A request
 * that can never run here (longer than max_model_len, or whose full sequence exceeds the pool)
 * is rejected with a reason instead. Context: owner thread. Returns 0 or -ENOMEM.
 */
int kvsim_engine_admit_owner(struct kvsim_engine *e, uint32_t req, int64_t t);
/*
 * kvsim_engine_advance_owner - process every step that completes at or before `until`,
 * starting each next step at the completion instant, and start a step at `until` if the engine
 * is idle with work; with a shared G3, publish `until` as the engine's registry watermark
 * (kvsim_tiers_publish). Context: owner thread (registered with the block registry and online
 * if its tiers use a shared G3). Returns 0, or a negative errno (-EUCLEAN with a
 * violation message for a broken invariant, -EDEADLK if the engine holds unfinished requests
 * it can never make progress on).
 */
int kvsim_engine_advance_owner(struct kvsim_engine *e, int64_t until);
/* Earliest time this engine has something to do (its running step's end or a transfer's end),
 * or INT64_MAX. */
int64_t kvsim_engine_next_event(const struct kvsim_engine *e);
/* Publishes load for the router (owner, before the barrier). */
const struct kvsim_engine_pub *kvsim_engine_pub(const struct kvsim_engine *e);
/* Completed requests since the last call (coordinator, at a boundary); resets the list. */
const struct kvsim_engine_done *kvsim_engine_take_done(struct kvsim_engine *e, uint32_t *n);
/* The same list without taking it (coordinator, at a boundary). */
const struct kvsim_engine_done *kvsim_engine_peek_done(const struct kvsim_engine *e, uint32_t *n);
/* The pool, for KV events and statistics (owner between boundaries; coordinator at them). */
struct kvpool *kvsim_engine_pool(struct kvsim_engine *e);
uint32_t kvsim_engine_unfinished(const struct kvsim_engine *e);
uint64_t kvsim_engine_preemptions(const struct kvsim_engine *e);
uint64_t kvsim_engine_steps(const struct kvsim_engine *e);
/* Last error message (for -EUCLEAN / -EDEADLK). */
const char *kvsim_engine_error(const struct kvsim_engine *e);

/*
 * The prompt of request `req` as token runs (shared by the engine and the router): each trace
 * hash id becomes block_size copies of one token (the last run truncated to input_len); a
 * request without hashes gets one run of a token unique to it. Writes at most cap runs and
 * returns how many the prompt has.
 */
uint32_t kvsim_prompt_runs(const struct kvsim_trace *t, uint32_t req, struct kvpool_token_run *runs,
                           uint32_t cap);

#endif /* KVSIM_ENGINE_H */
