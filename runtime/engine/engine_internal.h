/*
 * engine_internal.h - an engine's state, shared by engine.c (admission, steps, the advance loop)
 * and disagg.c (the prefill and decode roles: pins, messages, reservations). Private to
 * runtime/engine/; the thread rules are engine.h's.
 */
#ifndef KVSIM_ENGINE_INTERNAL_H
#define KVSIM_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/engine/engine.h"
#include "runtime/engine/tiers.h"

/* The profile step model (profile.c), for step_model.c: a step's time in microseconds before
 * speedup_ratio, with the axes clamped in *outside; and a lower bound on any step's. */
double kvsim_profile__step_us(const struct kvsim_profile *p, const struct kvsim_step_batch *b,
                              unsigned *outside);
double kvsim_profile__min_step_us(const struct kvsim_profile *p);
/* An upper bound on the time of any step of at most max_seqs sequences, in microseconds. */
double kvsim_profile__max_step_us(const struct kvsim_profile *p, uint32_t max_seqs);

/* A prefill engine's pin and the instant its abort timeout expires. */
struct engine_pin_deadline {
    uint32_t req;
    int64_t deadline;
};

/* One step of a decode fast-path run under the profile model: its time and clamped axes. */
struct engine_fast_step {
    int64_t ns;
    unsigned outside;
};

struct kvsim_engine {
    struct kvsim_engine_config cfg;
    struct sched *s;
    struct sched_step *step; /* in flight, or NULL when idle */
    int64_t step_end;
    /* vLLM's batch queue (async scheduling, aggregated, no tiers): the next step is scheduled
     * as soon as the running one is launched, against output placeholders, and runs when it
     * ends. Prefill, decode and tiered engines keep the placeholders but run steps serially. */
    bool pipelined;
    bool decode_fast_path;             /* stable decode batches advance in bulk (engine.c) */
    uint64_t fast_steps;               /* steps the fast path applied (of steps) */
    kvpool_token *fast_tok;            /* its tokens, FAST_MAX_TOKENS (allocated on first use) */
    struct engine_fast_step *fast_dur; /* the profile model's step times, FAST_MAX_STEPS */
    struct sched_step *ahead;          /* pipelined: scheduled to run after step, or NULL */
    int64_t ahead_dur;
    uint64_t ahead_prompt_tokens;
    struct sched_request **later; /* finished, released once no outstanding step lists them */
    uint32_t num_later, cap_later;
    int64_t now;         /* the engine's clock: last completion or arrival instant */
    int64_t advanced_to; /* the last kvsim_engine_advance's until (INT64_MIN before any) */
    struct kvsim_engine_pub pub;
    struct kvsim_engine_done *done;
    uint32_t num_done, cap_done;
    /* output scratch, sized to the running set */
    kvpool_token *tok;
    const kvpool_token **tok_ptr;
    uint32_t *tok_count;
    uint32_t *shape_chunk; /* the step's shape for the profile model, sized as tok */
    uint64_t *shape_prefix, *shape_context;
    uint32_t *out_before; /* complete_step: each scheduled request's outputs before the update */
    uint32_t cap_tok;
    struct kvpool_token_run *runs;
    uint32_t cap_runs;
    struct sched_request **waiting_scratch; /* publish(): the waiting queue */
    uint32_t cap_waiting_scratch;
    uint64_t steps;
    uint64_t rejected;              /* requests refused at admission */
    uint64_t steps_outside;         /* steps the profile model clamped to its grid */
    uint64_t steps_outside_axis[3]; /* per axis: tokens, sequences, attention */
    uint32_t unfinished;
    struct kvsim_tiers *tiers; /* NULL without offload tiers */
    uint64_t prefill_tokens;
    int64_t blocked_since; /* -1: no request blocked on held capacity */
    int64_t blocked_ns;
    char err[384];
    /* disaggregated roles (disagg.c) */
    struct kvsim_engine_msg *inbox; /* min-heap on (t, kind, seq) */
    uint64_t *inbox_seq;
    uint32_t num_inbox, cap_inbox;
    uint64_t next_seq;
    struct kvsim_engine_msg *outbox;
    uint32_t num_outbox, cap_outbox;
    struct engine_pin_deadline *pin_fifo; /* prefill: pins in pin (= deadline) order */
    uint32_t pin_head, pin_tail, pin_cap;
    uint32_t pinned_blocks, peak_pinned_blocks;
    int64_t pinned_since; /* the instant pinned_blocks last changed */
    double pinned_block_ns;
    uint32_t waiting_handoffs; /* decode: routed requests not yet reserved */
    int64_t busy_ns;           /* virtual time with a step running */
    double kv_usage_ns;        /* KV usage at each step's start times its duration, summed */
    double peak_kv_usage;
    uint32_t *aborts; /* kvsim_engine_abort_req while a step runs: applied at its end */
    uint32_t num_aborts, cap_aborts;
    /* the time series (samples.c): INT64_MAX while off, so the hot path pays one compare */
    int64_t next_sample_ns;     /* end of the interval being counted */
    struct kvsim_ts_sample cur; /* its counts so far */
    struct kvsim_ts_sample *samples;
    uint32_t num_samples, cap_samples;
    uint64_t step_prompt_tokens; /* the running step's prefill tokens (counted at its end) */
    uint64_t offload_stored_base, offload_loaded_base; /* tier totals at the last interval end */
};

/* Refreshes e->pub (the engine's published view). */
void engine__publish(struct kvsim_engine *e);
/* Formats an error of engine e at its clock into e->err and returns rc. */
int engine__fail(struct kvsim_engine *e, int rc);
/* Records that a `what` ("step", "transfer") of dur ns starting at e->now would pass
 * KVSIM_CLOCK_END_NS, naming the engine, its step count and the value. Returns -EOVERFLOW. */
int engine__clock_overflow(struct kvsim_engine *e, const char *what, int64_t dur);
/* Lists req as finished at t for session follow-ups. Returns 0 or -ENOMEM. */
int engine__push_done(struct kvsim_engine *e, uint32_t req, int64_t t);

/* ---- samples.c ----------------------------------------------------------------------------- */

/* Closes every interval ending at or before t with the engine's current state (what held since
 * its last event). Returns 0 or -ENOMEM (e->err says so). */
int engine__sample_flush(struct kvsim_engine *e, int64_t t);
/* Called before the engine processes anything at t: one compare unless an interval ends. */
static inline int engine__sample_to(struct kvsim_engine *e, int64_t t)
{
    return t >= e->next_sample_ns ? engine__sample_flush(e, t) : 0;
}

/* ---- disagg.c ------------------------------------------------------------------------------ */

/* Earliest instant of a posted message, or INT64_MAX. */
int64_t engine__next_message(const struct kvsim_engine *e);
/* A prefill engine's earliest pin deadline, or INT64_MAX. */
int64_t engine__next_deadline(struct kvsim_engine *e);
/* Applies every posted message at or before t in order, then (expire) every pin deadline at or
 * before t. Returns 0 or a negative errno (e->err says why). */
int engine__apply_messages(struct kvsim_engine *e, int64_t t, bool expire);
/* A prefill engine: the prefills its last update finished (fin[0..nf), in finishing order),
 * pinned or not, reported at e->now. Returns 0 or a negative errno. */
int engine__prefills_finished(struct kvsim_engine *e, struct sched_request *const *fin,
                              uint32_t nf);
/* A decode engine: the reservations its last schedule made, at e->now. */
int engine__reservations_made(struct kvsim_engine *e, const struct sched_step *st);
/* A prefill engine's pinned-block accounting after the events at t. */
void engine__pin_account(struct kvsim_engine *e, int64_t t);
/* The disaggregated fields of e->pub. */
void engine__publish_handoff(struct kvsim_engine *e);
void engine__disagg_free(struct kvsim_engine *e);

#endif /* KVSIM_ENGINE_INTERNAL_H */
