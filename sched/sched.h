/*
 * sched.h - the vLLM v1 scheduler core: requests, schedule(), update(), preemption, connector.
 *
 * This models vllm/v1/core/sched/scheduler.py (+ async_scheduler.py) for one engine, following
 * the versioned contract in docs/fidelity/vllm.md. All KV allocation goes through the G1 pool's
 * transaction API (kvpool/kvpool.h) and its typed outcomes.
 *
 * Ownership and threads. A scheduler, its pool and its requests belong to one thread (the
 * engine's owning worker); nothing here is thread-safe and nothing blocks. Per-step work is
 * proportional to the running batch and the requests examined, never to context length.
 *
 * Lifecycle of a request: sched_add() -> WAITING -> (RUNNING <-> PREEMPTED)* -> FINISHED_*.
 * The scheduler never frees request memory on its own: a finished request stays readable until
 * sched_release() (or sched_destroy()).
 *
 * Errors are negative errno values.
 */
#ifndef KVSIM_SCHED_H
#define KVSIM_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvsim_export.h"

#include "kvpool/kvpool.h"

#ifdef __cplusplus
extern "C" {
#endif

enum sched_policy { SCHED_POLICY_FCFS = 0, SCHED_POLICY_PRIORITY };

/*
 * The fidelity contract with upstream vLLM (docs/fidelity/vllm.md): which upstream revision's
 * rules the scheduler follows where they changed. Version 1 is vLLM main of 2026-07-24,
 * version 2 of 2026-09: #57951's lone-request threshold, #56758's max_num_active_seqs,
 * #48245's stale output after a preemption, #50297's drop of it on an engine that must deliver
 * KV, and #49445's max_num_queued_reqs at the engine's front door.
 */
#define SCHED_CONTRACT_MIN    1
#define SCHED_CONTRACT_LATEST 2

struct sched_request;

/*
 * Offload hooks: the G2/G3 tiers behind G1 (runtime/engine/tiers.h implements them). Every hook is
 * called on the owner thread from inside sched_schedule(); none may call back into the scheduler.
 */
struct sched_offload_ops {
    /* Blocks after the request's first `first_block` blocks (its local prefix hits) that a lower
     * tier holds and can load into G1 instead of recomputing them (0 = none). */
    uint32_t (*lookup)(void *ctx, const struct sched_request *r, uint32_t first_block);
    /* The request was admitted as a load: r->kv.blocks[first_block .. first_block + n) are its
     * destination reservation. Start the transfer; report its end with sched_load_finished().
     * Returns 0, or a negative errno (the scheduler then treats the load as failed at once). */
    int (*start_load)(void *ctx, struct sched_request *r, uint32_t first_block, uint32_t n);
    /* An allocation is short of num_short blocks that only in-flight copies hold: release now
     * whatever needs no copy any more (presence filtering). Returns the blocks released. */
    uint32_t (*relieve)(void *ctx, uint32_t num_short);
};

struct sched_config {
    uint32_t block_size;                   /* tokens per KV block (16) */
    uint32_t num_blocks;                   /* including the null block 0 (10000) */
    uint32_t max_num_seqs;                 /* running-set cap (256) */
    uint32_t max_num_batched_tokens;       /* per-step token budget (8192) */
    uint32_t max_model_len;                /* 0 = max_num_batched_tokens, as vLLM's tests do */
    uint32_t long_prefill_token_threshold; /* 0 = off; contract 2: off for a lone request */
    uint32_t max_num_active_seqs;          /* admission cap <= max_num_seqs, contract 2 (#56758);
                                            * 0 = max_num_seqs */
    uint32_t vllm_contract;                /* SCHED_CONTRACT_MIN .. _LATEST (latest) */
    /* The engine's front door, not the scheduler (which ignores it): contract 2's
     * max_num_queued_reqs (#49445), refusing an arrival while that many requests are
     * unfinished (0 = off; runtime/engine/engine.c) */
    uint32_t max_num_queued_reqs;
    enum sched_policy policy;        /* FCFS */
    double watermark;                /* [0, 1): int(watermark * num_blocks) blocks (0) */
    bool enable_chunked_prefill;     /* (true) */
    bool enable_prefix_caching;      /* (true) */
    bool scheduler_reserve_full_isl; /* full-sequence admission gate, #37307 (true) */
    bool async_scheduling;           /* output placeholders (false) */
    bool defer_block_free;           /* deferred-free fence, #45357 (false) */
    bool preempted_victim_guard;     /* #49675: a fenced victim stops the retry (true) */
    bool check_invariants;           /* run sched_check at every boundary (false) */
    bool enable_kv_events;           /* record the pool's KV events (false) */
    /* vLLM's requires_kv_delivery: the engine's KV connector must deliver KV (a kv_producer or
     * kv_both role, a disaggregated prefill engine). Contract 2 (#50297): a request preempted
     * with output in flight drops that output and recomputes, instead of finishing from it with
     * KV it no longer holds (false) */
    bool requires_kv_delivery;
    /* THE OLD BUG, for issue #6's proof only: a waiting request whose allocation is blocked on
     * offload keeps the blocks it could get and running requests are preempted for it (false) */
    bool legacy_partial_alloc;
    const struct sched_offload_ops *offload; /* G2/G3 tiers (NULL: none) */
    void *offload_ctx;                       /* first argument of every offload hook */
};

/* Fills cfg with the defaults shown above. */
KVSIM_EXTERN void sched_config_default(struct sched_config *cfg);

enum sched_status {
    SCHED_WAITING = 0,
    SCHED_WAITING_FOR_REMOTE_KVS,
    SCHED_RUNNING,
    SCHED_PREEMPTED,
    /* finished states: everything after PREEMPTED */
    SCHED_FINISHED_STOPPED,
    SCHED_FINISHED_LENGTH_CAPPED,
    SCHED_FINISHED_ABORTED,
};
KVSIM_EXTERN const char *sched_status_name(enum sched_status status);
/* Returns the status for a name such as "RUNNING", or -EINVAL. */
KVSIM_EXTERN int sched_status_parse(const char *name);
static inline bool sched_status_is_finished(enum sched_status s) { return s > SCHED_PREEMPTED; }
/* "stop", "length" or "abort" for a finished status, NULL otherwise. */
KVSIM_EXTERN const char *sched_finish_reason(enum sched_status status);

/* Where a request sits. */
enum sched_queue { SCHED_Q_NONE = 0, SCHED_Q_RUNNING, SCHED_Q_WAITING, SCHED_Q_SKIPPED };

/* The last ownership transition of a request (for violation reports). */
enum sched_transition {
    SCHED_T_ADDED = 0,
    SCHED_T_ADMITTED,
    SCHED_T_PARKED,       /* admitted as an async load: destination reservation */
    SCHED_T_PROMOTED,     /* async load finished */
    SCHED_T_ALLOCATED,    /* a running request grew */
    SCHED_T_PREEMPTED,    /* blocks freed or deferred */
    SCHED_T_FINISHED,     /* blocks freed or deferred */
    SCHED_T_FREE_DELAYED, /* finished while its async load is still in flight */
};
KVSIM_EXTERN const char *sched_transition_name(enum sched_transition t);

struct sched_request_params {
    uint64_t id;                                /* caller's id (unique among live requests) */
    const kvpool_token *prompt;                 /* prompt token ids, or NULL when given as runs */
    uint32_t num_prompt_tokens;                 /* >= 1; with runs, the sum of their counts */
    const struct kvpool_token_run *prompt_runs; /* the prompt as runs (when prompt is NULL) */
    uint32_t num_prompt_runs;
    /* With runs: the hashes of the prompt's first num_prompt_hashes full blocks, when the caller
     * has them already (a kv router's kvpool_hash_prompt with this block size and the salt);
     * see kvpool_seq_append_runs. check_invariants compares them with the prompt's own. */
    const kvpool_hash *prompt_hashes;
    uint32_t num_prompt_hashes;
    uint32_t max_tokens; /* output cap (>= 1) */
    uint32_t min_tokens; /* no stop before this many outputs */
    int64_t priority;    /* PRIORITY policy: lower is served first */
    double arrival;      /* arrival time (ties in PRIORITY order) */
    const kvpool_token *stop_token_ids;
    uint32_t num_stop_token_ids;
    int64_t eos_token_id; /* -1 = none */
    bool ignore_eos;
    const char *cache_salt;   /* NULL = none */
    bool prompt_logprobs;     /* never reads the prefix cache (still writes it) */
    uint32_t external_tokens; /* tokens a KV connector reports on lookup (0 = none) */
    bool external_async;      /* ... loaded asynchronously (WAITING_FOR_REMOTE_KVS) */
    bool external_once;       /* ... for the first admission only (vLLM's NixlConnector clears
                               * do_remote_prefill after it: one transfer per request, so a
                               * preempted decode recomputes) */
    /* A disaggregated prefill (vLLM's do_remote_decode): when it finishes normally (stopped or
     * length capped) its blocks are not freed but pinned for the remote decode that will read
     * them (sched_last_pinned), until sched_release_pin. */
    bool kv_producer;
};

/*
 * A request. Only the scheduler writes its fields (callers create requests with sched_add and
 * change them through the functions below). The read-only part is what callers may read; the
 * private part is the scheduler's bookkeeping, which callers must not rely on.
 */
struct sched_request {
    /* read-only */
    uint64_t id;
    enum sched_status status;
    enum sched_queue queue;
    uint32_t num_prompt_tokens;
    uint32_t max_tokens, min_tokens;
    int64_t priority;
    double arrival;
    int64_t eos_token_id;
    bool ignore_eos;
    kvpool_token *stop_token_ids;
    uint32_t num_stop_token_ids;
    kvpool_token *output; /* output tokens so far */
    uint32_t num_output;
    uint64_t num_computed_tokens;     /* optimistic: advanced at schedule time */
    uint32_t num_output_placeholders; /* async scheduling: sampled but not yet delivered */
    int64_t num_cached_tokens;        /* local+external hits at first admission; -1 before */
    uint32_t num_preemptions;
    uint32_t external_tokens;
    bool external_async;
    bool external_once; /* external_tokens are dropped after the first admission */
    bool kv_producer;   /* a disaggregated prefill: its blocks are pinned at a normal finish when
                         * it computed a full block at least */
    uint64_t loading_tokens;   /* tokens the pending (or last) async load brings in */
    bool offload_load;         /* the pending async load is an onboarding from G2/G3 */
    uint32_t onboard_blocks;   /* blocks of the pending onboarding */
    uint64_t onboarded_tokens; /* tokens loaded from G2/G3 instead of recomputed (total) */
    int64_t stop_reason;       /* stop token that finished it, -1 otherwise */
    enum sched_transition last_transition;
    uint64_t last_transition_step;
    struct kvpool_seq kv; /* tokens' hashes and block table */

    /* private */
    uint64_t add_seq; /* order of sched_add calls (final tie-break) */
    uint32_t cap_output;
    uint64_t last_sched_seq; /* deferred-free fence bookkeeping */
    /* #48245 (contract 2): tokens scheduled in steps not yet updated, and of them those of
     * steps scheduled before its last preemption (their output is stale); whether that stale
     * output is dropped (#50297) rather than delivered */
    uint64_t num_in_flight_tokens, num_stale_output_tokens;
    bool drop_stale_output;
    bool recv_finished;     /* async load in finished_recving */
    bool free_delayed;      /* finished while parked: blocks wait for finished_recving */
    bool in_flight_prefill; /* in the #44560 reservation set */
    bool load_failed;       /* the onboarding failed: the request recomputes instead */
    bool onboard_disabled;  /* a load of it failed once: never onboard it again */
    size_t qpos;            /* position in a PRIORITY heap */
    struct sched_request *next_inflight, *prev_inflight; /* the #44560 reservation set */
    struct sched_request *next_live, *prev_live;         /* every unreleased request */
    uint64_t check_mark;                                 /* sched_check bookkeeping */
};

static inline uint64_t sched_request_num_tokens(const struct sched_request *r)
{
    return r->kv.num_tokens;
}

/* Blocks the request still lacks for every token it has so far (dead-end reports). */
static inline uint64_t sched_request_blocks_missing(const struct sched_request *r,
                                                    uint32_t block_size)
{
    uint64_t want = (r->kv.num_tokens + block_size - 1) / block_size;
    return want > r->kv.num_blocks ? want - r->kv.num_blocks : 0;
}

/* One request's share of a step. */
struct sched_scheduled {
    struct sched_request *req;
    uint32_t num_tokens;
    bool samples; /* the chunk reaches the end of the known tokens: the model samples a token */
};

/* The result of one sched_schedule() call. Owned by the scheduler; valid until the sched_update
 * that consumes it returns (or sched_destroy). */
struct sched_step {
    uint64_t index;                    /* 1, 2, ... in schedule order */
    struct sched_scheduled *scheduled; /* in scheduling order */
    uint32_t num_scheduled;
    uint64_t total_tokens;
    struct sched_request **new_reqs; /* first admissions */
    uint32_t num_new;
    struct sched_request **resumed; /* re-admissions after preemption */
    uint32_t num_resumed;
    struct sched_request **preempted; /* preempted since the previous schedule */
    uint32_t num_preempted;
    struct sched_request **parked; /* admitted as async loads (WAITING_FOR_REMOTE_KVS): their
                                    * destination reservations were made by this schedule */
    uint32_t num_parked;
    uint32_t cap_scheduled, cap_new, cap_resumed, cap_preempted, cap_parked;
    bool outstanding; /* scheduled, output not applied yet */
};

/* Model output for one step: tokens[i] (num_tokens[i] of them) for step->scheduled[i]. */
struct sched_model_output {
    const kvpool_token *const *tokens; /* NULL, or one entry per scheduled request */
    const uint32_t *num_tokens;
    struct sched_request *const *finished_recving; /* async loads that completed */
    uint32_t num_finished_recving;
};

struct sched;

/* Returns 0 and *out, -EINVAL for an impossible configuration, -ENOMEM. */
KVSIM_EXTERN int sched_create(const struct sched_config *cfg, struct sched **out);
/* Frees the scheduler, its pool and every request. Accepts NULL. */
KVSIM_EXTERN void sched_destroy(struct sched *s);
KVSIM_EXTERN const struct sched_config *sched_get_config(const struct sched *s);
/* The scheduler's G1 pool (read-only use: state queries, events, checks). */
KVSIM_EXTERN struct kvpool *sched_pool(struct sched *s);

/*
 * sched_add - add a request in WAITING at the tail of the waiting queue (PRIORITY: heap).
 * Returns 0 and *out, -EINVAL (no prompt, max_tokens 0, min_tokens > max_tokens, prompt +
 * min_tokens > max_model_len: it could never stop, or prompt hashes that are not the prompt's
 * under check_invariants), -ENOMEM.
 */
KVSIM_EXTERN int sched_add(struct sched *s, const struct sched_request_params *p,
                           struct sched_request **out);

/*
 * sched_schedule - one vLLM schedule() call: the running phase, then (if nothing was preempted)
 * the waiting phase. Returns the step, or NULL with *err = -ENOMEM, or -EUCLEAN when
 * check_invariants is on and an invariant broke (sched_last_violation() says which). The step
 * stays outstanding until sched_update() consumes it.
 */
KVSIM_EXTERN struct sched_step *sched_schedule(struct sched *s, int *err);

/*
 * sched_update - apply a step's model output (vLLM update_from_output): deferred-free drain,
 * token appends with stop checks, frees, connector notifications. Steps must be updated in the
 * order they were scheduled. Returns 0, -EINVAL (not the oldest outstanding step), -ENOMEM,
 * or -EUCLEAN (check_invariants on and an invariant broke).
 * Requests that finished during the call are listed by sched_last_finished().
 */
KVSIM_EXTERN int sched_update(struct sched *s, struct sched_step *step,
                              const struct sched_model_output *out);

/* What sched_stable_decode_steps found, and the state it found it in (for sched_decode_steps). */
struct sched_stable_run {
    uint32_t k;          /* the steps it returned */
    uint32_t new_blocks; /* blocks the first step takes */
    uint64_t step_index, pool_generation;
    uint32_t num_running, num_unfinished, num_waiting, num_outstanding;
};

/*
 * sched_stable_decode_steps - the decode fast path's test. How many schedule() + update() pairs
 * from now (no arrival, abort or release between them) would each schedule every running
 * request for one token, which it samples, take no block but in the first step (only with
 * run: a request whose blocks are full takes one, READY, caching nothing; run->new_blocks says
 * how many are taken), cache none but in the last step (none with offload tiers: a store would
 * start), and preempt, admit and finish nobody by a length cap: at most max, and 0 if fewer
 * than min (the scan stops there). Token stops (EOS, stop tokens) are the caller's: see
 * sched_decode_steps. 0 when the state is not such a batch: steps outstanding, requests waiting
 * or loading, deferred frees, async scheduling, check_invariants on. Owner thread; reads only
 * (run is the caller's).
 */
KVSIM_EXTERN uint32_t sched_stable_decode_steps(const struct sched *s, uint32_t min, uint32_t max,
                                                struct sched_stable_run *run);
/*
 * sched_decode_steps - k such pairs at once, for k <= sched_stable_decode_steps(s, k, k, &r)
 * (the first step may take blocks): the state afterwards is the one k sched_schedule +
 * sched_update calls leave when step j samples tokens[i * k + j] for running request i
 * (sched_running order). run, if not NULL, is what a sched_stable_decode_steps call said: when
 * the scheduler and its pool have not changed since (no schedule, update, admission, abort or
 * block operation: its step index, pool generation and queue sizes are the same) and k <=
 * run->k, its answer stands and the test is not run again. Nothing is listed by
 * sched_last_finished or sched_last_pinned afterwards. Returns 0; -EINVAL with nothing changed
 * if a token would stop its request or the state is not stable for k steps; -ENOMEM or -EUCLEAN
 * (an allocation the test allowed failed: the scheduler is then as unusable as after a failed
 * sched_update). Owner thread.
 */
KVSIM_EXTERN int sched_decode_steps(struct sched *s, uint32_t k, const kvpool_token *tokens,
                                    const struct sched_stable_run *run);

/* Requests finished by the last sched_update / sched_abort call. */
KVSIM_EXTERN struct sched_request *const *sched_last_finished(const struct sched *s, uint32_t *n);

/*
 * A source pin: the blocks of a finished disaggregated prefill (kv_producer), kept for the
 * remote decode that reads them (vLLM's delay_free_blocks: the connector's request_finished
 * asked for a delayed free). The blocks belong to the pin, not the request (owner class
 * HANDOFF_SOURCE): they stay cached and count against the pool's capacity until the pin is
 * released. Read-only for callers; owned by the scheduler until sched_release_pin.
 */
struct sched_pin {
    uint64_t id;                   /* the finished request's id */
    uint64_t num_tokens;           /* tokens whose KV the blocks hold (vLLM's remote_num_tokens) */
    struct kvpool_seq kv;          /* the pinned blocks */
    struct sched_pin *next, *prev; /* private: the scheduler's list of live pins */
};
/* Pins made by the last sched_update / sched_abort call (a producer that finished normally
 * with a full block computed at least), in finishing order. */
KVSIM_EXTERN struct sched_pin *const *sched_last_pinned(const struct sched *s, uint32_t *n);
/*
 * sched_release_pin - the remote decode is done with the pin's blocks (it read them, or the
 * handoff was aborted): free them, tail first (they stay in the prefix cache as evictable
 * blocks), and forget the pin. Returns 0.
 */
KVSIM_EXTERN int sched_release_pin(struct sched *s, struct sched_pin *pin);
/* Live pins, and the blocks only pins hold (a block shared with a running request, or with
 * two pins, counts once: kvpool_num_pinned_only_blocks). O(1). */
KVSIM_EXTERN uint32_t sched_num_pins(const struct sched *s);
KVSIM_EXTERN uint32_t sched_num_pinned_blocks(const struct sched *s);

/*
 * sched_load_finished - an async load has ended: an onboarding started by the start_load hook,
 * or a KV-connector load (external_async; e.g. a disaggregated decode's transfer). ok: its
 * blocks hold the data, the request is promoted by the next schedule (vLLM delivers this as
 * finished_recving with the next model output; the engine here may also be idle); otherwise the
 * request gives the blocks back and recomputes (vLLM's default kv_load_failure_policy). For a
 * request that finished (was aborted) while loading, the blocks it kept for the load are freed
 * now. Owner thread. Returns 0, -EINVAL (no load in flight for r).
 */
KVSIM_EXTERN int sched_load_finished(struct sched *s, struct sched_request *r, bool ok);

/* Offload pressure seen by the last sched_schedule() call. */
struct sched_offload_status {
    struct sched_request *blocked; /* request whose allocation was BLOCKED_ON_OFFLOAD, or NULL */
    uint32_t num_short;            /* blocks it lacked (all held by in-flight copies) */
    bool in_running_phase;         /* it was running (waiting admissions were skipped) */
};
KVSIM_EXTERN void sched_offload_status(const struct sched *s, struct sched_offload_status *out);
/* Totals: BLOCKED_ON_OFFLOAD outcomes, RETRY_NOW retries, loads started / failed, tokens
 * onboarded, and (with offload hooks) full prompt blocks that missed G1 at admission. */
struct sched_offload_counters {
    uint64_t blocked, retry_now, loads, load_failures, onboarded_tokens, g1_miss_blocks;
};
KVSIM_EXTERN void sched_offload_counters(const struct sched *s, struct sched_offload_counters *out);

/* Client abort from any state (FINISHED_ABORTED). Returns 0, or -EALREADY if finished. */
KVSIM_EXTERN int sched_abort(struct sched *s, struct sched_request *req);
/* Forgets a finished request whose blocks are released and that no outstanding step lists.
 * Returns 0, -EBUSY otherwise. */
KVSIM_EXTERN int sched_release(struct sched *s, struct sched_request *req);

/*
 * sched_reset_prefix_cache - vLLM reset_prefix_cache(reset_running_requests). With reset_running,
 * every running request is preempted first (from the back). Returns 0, or -EBUSY (nothing
 * changed in the cache) while blocks are still referenced.
 */
KVSIM_EXTERN int sched_reset_prefix_cache(struct sched *s, bool reset_running);

/* Queues, in order. The waiting view lists the skipped-waiting queue first, then the waiting
 * queue, each in the order the scheduler would consider them. Return the counts; the waiting
 * snapshot writes `out` only when cap covers the whole count (pass NULL/0 to size it first).
 * sched_running's array is valid until the next call that adds or schedules. Owner thread. */
KVSIM_EXTERN uint32_t sched_running(const struct sched *s, struct sched_request *const **reqs);
KVSIM_EXTERN uint32_t sched_waiting_snapshot(const struct sched *s, struct sched_request **out,
                                             uint32_t cap);
/* The waiting request the next schedule() considers first (the skipped queue's head for FCFS,
 * the better of the two queue heads for PRIORITY), or NULL. O(1). Owner thread. */
KVSIM_EXTERN struct sched_request *sched_waiting_head(const struct sched *s);
KVSIM_EXTERN uint32_t sched_num_unfinished(const struct sched *s);
KVSIM_EXTERN uint64_t sched_num_preemptions(const struct sched *s);
/* Deferred-free entries not yet drained. */
KVSIM_EXTERN uint32_t sched_num_deferred_frees(const struct sched *s);

/* Why the last schedule()'s waiting phase stopped admitting (§4.3): a dead end's diagnosis names
 * the rule. The ALLOC_* values are allocate_slots refusing the head (kvpool_plan.limit). */
enum sched_waiting_stop {
    SCHED_STOP_DRAINED = 0, /* nothing (left) waiting, or only requests it had to skip */
    SCHED_STOP_NOT_RUN,     /* the phase did not run: a preemption or a running request
                             * blocked on offload in this step */
    SCHED_STOP_BUDGET,      /* the token budget ran out */
    SCHED_STOP_MAX_SEQS,    /* max_num_seqs, or #56758's max_num_active_seqs */
    SCHED_STOP_UNCHUNKED,   /* chunked prefill off and the head needs more than the budget */
    SCHED_STOP_NO_TOKENS,   /* the head has no token to schedule */
    SCHED_STOP_ALLOC_FREE,  /* the head's blocks exceed the free blocks */
    SCHED_STOP_ALLOC_WATERMARK,
    SCHED_STOP_ALLOC_RESERVED, /* the head, an async load, is refused by the blocks promised to
                                * in-flight prefills (#44560) */
    SCHED_STOP_BLOCKED_ON_OFFLOAD,
    SCHED_STOP_ERROR,
};
KVSIM_EXTERN const char *sched_waiting_stop_name(enum sched_waiting_stop stop);
/* The last schedule()'s stop and the request it stopped at (NULL unless a head was refused).
 * Owner thread. */
KVSIM_EXTERN enum sched_waiting_stop sched_last_waiting_stop(const struct sched *s,
                                                             const struct sched_request **head);

/* An invariant violation at a scheduler boundary. */
struct sched_violation {
    char rule[48];         /* which invariant */
    uint64_t request_id;   /* 0 when no request is involved */
    kvpool_block_id block; /* -1 when no block is involved */
    enum kvpool_owner_class owner;
    enum sched_status status;
    enum sched_transition last_transition;
    int64_t expected, found;
};

/*
 * sched_check - the scheduler-boundary invariants: the pool's ownership reconciliation; every
 * request in exactly the queue its status implies; computed <= tokens (+ placeholders);
 * waiting/preempted requests hold no blocks unless an async load left them computed tokens;
 * running <= max_num_seqs. Returns 0 or -EUCLEAN with *v filled. O(requests + blocks).
 */
KVSIM_EXTERN int sched_check(struct sched *s, struct sched_violation *v);
KVSIM_EXTERN int sched_violation_format(const struct sched_violation *v, char *buf, size_t len);
/* The violation behind the last -EUCLEAN from sched_schedule/sched_update, or NULL. */
KVSIM_EXTERN const struct sched_violation *sched_last_violation(const struct sched *s);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_SCHED_H */
