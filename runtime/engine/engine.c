/*
 * engine.c - a simulated engine in virtual time (see engine.h).
 */
#include "runtime/engine/engine_internal.h"

#include "kvpool/base.h"

_Static_assert(KVSIM_REPORT_NUM_LANES == OFFLOAD_NUM_LANES,
               "the report counts every offload lane, in offload.h's order");

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The k-th output token of a request: deterministic, never an EOS (the engine has none), and
 * unlike any prompt token so outputs never fake prefix hits across requests. */
static kvpool_token output_token(uint32_t req, uint32_t k)
{
    uint64_t x = base_splitmix64((uint64_t)req << 32 | k);
    return (kvpool_token)(0xc0000000u | ((uint32_t)(x >> 33) & 0x3fffffffu));
}

/* The token a request with a spec stop_after emits as its last output (the engine API's stop):
 * outside both the prompt tokens kvsim makes and output_token's range. */
#define ENGINE_EOS_TOKEN 0xbfffffffu

/* Tells the observer (the engine API), if any. */
static inline void observe(const struct kvsim_engine *e, uint32_t kind, uint32_t req, int64_t t,
                           uint32_t a, uint32_t b)
{
    if (e->cfg.observe) {
        struct kvsim_engine_obs o = {.t = t, .req = req, .kind = kind, .a = a, .b = b};
        e->cfg.observe(e->cfg.observe_ctx, &o);
    }
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

int kvsim_engine_create(const struct kvsim_engine_config *cfg, struct kvsim_engine **out)
{
    *out = NULL;
    struct kvsim_engine *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->cfg = *cfg;
    e->blocked_since = -1;
    e->advanced_to = INT64_MIN;
    e->pub.earliest_parent_finish = e->pub.earliest_handoff = INT64_MAX; /* nothing yet */
    e->next_sample_ns =
        cfg->sample_interval_ns > 0 ? cfg->sample_origin_ns + cfg->sample_interval_ns : INT64_MAX;
    struct sched_config sc = cfg->sched;
    sc.enable_kv_events = cfg->kv_events;
    /* A prefill engine's connector delivers KV (vLLM's kv_producer role, #50297). */
    sc.requires_kv_delivery = sc.requires_kv_delivery || cfg->role == KVSIM_ENGINE_PREFILL;
    int rc = 0;
    if (cfg->tiers) {
        struct kvsim_tiers_config tc = *cfg->tiers;
        tc.pipe.seed ^= (uint64_t)cfg->id * BASE_GOLDEN_GAMMA; /* per-engine stream */
        tc.g3_engine = cfg->id; /* this engine's slot in a shared G3 */
        rc = kvsim_tiers_create(&tc, &e->tiers);
        sc.offload = &kvsim_tiers_sched_ops;
        sc.offload_ctx = e->tiers;
    }
    if (rc == 0)
        rc = sched_create(&sc, &e->s);
    if (rc) {
        kvsim_tiers_destroy(e->tiers);
        free(e);
        return rc;
    }
    if (e->tiers)
        kvsim_tiers_bind(e->tiers, e->s);
    e->pipelined = cfg->sched.async_scheduling && cfg->role == KVSIM_ENGINE_AGGREGATED && !e->tiers;
    /* The fast path covers what a stable decode batch touches (decode_fast_forward). */
    e->decode_fast_path = !cfg->decode_fast_path_off && !e->pipelined &&
                          !cfg->sched.check_invariants && cfg->role != KVSIM_ENGINE_PREFILL;
    *out = e;
    return 0;
}

void kvsim_engine_offload_stats(const struct kvsim_engine *e, struct kvsim_engine_offload *out)
{
    memset(out, 0, sizeof *out);
    out->prefill_tokens = e->prefill_tokens;
    if (!e->tiers)
        return;
    out->enabled = true;
    kvsim_tiers_stats(e->tiers, &out->tiers);
    sched_offload_counters(e->s, &out->sched);
    out->blocked_ns = e->blocked_ns;
}

void kvsim_engine_destroy(struct kvsim_engine *e)
{
    if (!e)
        return;
    kvsim_tiers_destroy(e->tiers); /* first: undrained copies give back holds and loads */
    sched_destroy(e->s);
    free(e->done);
    free(e->tok);
    free(e->fast_tok);
    free(e->fast_dur);
    free(e->shape_chunk);
    free(e->shape_prefix);
    free(e->shape_context);
    free(e->out_before);
    free(e->tok_ptr);
    free(e->tok_count);
    free(e->runs);
    free(e->waiting_scratch);
    free(e->aborts);
    free(e->later);
    free(e->samples);
    engine__disagg_free(e);
    free(e);
}

struct kvpool *kvsim_engine_pool(struct kvsim_engine *e) { return sched_pool(e->s); }
uint32_t kvsim_engine_unfinished(const struct kvsim_engine *e) { return e->unfinished; }
uint64_t kvsim_engine_preemptions(const struct kvsim_engine *e)
{
    return sched_num_preemptions(e->s);
}
uint64_t kvsim_engine_steps(const struct kvsim_engine *e) { return e->steps; }
uint64_t kvsim_engine_steps_outside(const struct kvsim_engine *e, uint64_t axis[3])
{
    if (axis)
        memcpy(axis, e->steps_outside_axis, sizeof e->steps_outside_axis);
    return e->steps_outside;
}
const char *kvsim_engine_error(const struct kvsim_engine *e) { return e->err; }
int64_t kvsim_engine_step_end(const struct kvsim_engine *e)
{
    return e->step ? e->step_end : INT64_MAX;
}
int64_t kvsim_engine_clock(const struct kvsim_engine *e) { return e->now; }

void kvsim_engine_usage(const struct kvsim_engine *e, struct kvsim_engine_summary *out)
{
    memset(out, 0, sizeof *out);
    out->preemptions = sched_num_preemptions(e->s);
    out->rejected = e->rejected;
    out->role = e->cfg.role == KVSIM_ENGINE_PREFILL  ? KVSIM_TS_PREFILL
                : e->cfg.role == KVSIM_ENGINE_DECODE ? KVSIM_TS_DECODE
                                                     : KVSIM_TS_AGGREGATED;
    out->steps = e->steps;
    out->busy_s = (double)e->busy_ns / 1e9;
    out->mean_kv_usage = e->busy_ns > 0 ? e->kv_usage_ns / (double)e->busy_ns : 0.0;
    out->peak_kv_usage = e->peak_kv_usage;
}

void kvsim_engines_timing(const struct kvsim_step_model *m, uint32_t num_gpu_blocks,
                          struct kvsim_engine *const *engines, uint32_t n,
                          struct kvsim_timing_summary *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->step_model, sizeof t->step_model, "%s", m->profile ? "profile" : "polynomial");
    if (m->profile) {
        snprintf(t->profile, sizeof t->profile, "%s", kvsim_profile_dir(m->profile));
        snprintf(t->model, sizeof t->model, "%s", kvsim_profile_arch(m->profile)->name);
        snprintf(t->hardware, sizeof t->hardware, "%s", kvsim_profile_hardware(m->profile));
        t->tp = kvsim_profile_tp(m->profile);
    }
    t->num_gpu_blocks = num_gpu_blocks;
    for (uint32_t e = 0; e < n; e++) {
        t->fast_path_steps += engines[e]->fast_steps;
        uint64_t axis[3];
        t->steps += kvsim_engine_steps(engines[e]);
        t->steps_outside += kvsim_engine_steps_outside(engines[e], axis);
        t->outside_tokens += axis[0];
        t->outside_sequences += axis[1];
        t->outside_attention += axis[2];
    }
}
const struct kvsim_engine_pub *kvsim_engine_pub(const struct kvsim_engine *e) { return &e->pub; }

const struct kvsim_engine_done *kvsim_engine_take_done(struct kvsim_engine *e, uint32_t *n)
{
    *n = e->num_done;
    e->num_done = 0;
    return e->done;
}

const struct kvsim_engine_done *kvsim_engine_peek_done(const struct kvsim_engine *e, uint32_t *n)
{
    *n = e->num_done;
    return e->done;
}

static int64_t tiers_deadline(const struct kvsim_engine *e)
{
    if (!e->tiers)
        return INT64_MAX;
    int64_t d = kvsim_tiers_next_deadline(e->tiers);
    return d == OFFLOAD_NEVER ? INT64_MAX : d;
}

/* The next instant something happens here besides the running step's end: a transfer ends, a
 * posted message applies, or (idle) a pin expires. */
static int64_t next_local_event(struct kvsim_engine *e)
{
    int64_t d = tiers_deadline(e), m = engine__next_message(e);
    if (m < d)
        d = m;
    if (!e->step) {
        int64_t x = engine__next_deadline(e);
        if (x < d)
            d = x;
    }
    return d;
}

int64_t kvsim_engine_next_event(const struct kvsim_engine *e)
{
    int64_t d = next_local_event((struct kvsim_engine *)e);
    return e->step && e->step_end < d ? e->step_end : d;
}

/* Fewest tokens any request with a session follow-up still has to produce here: to its
 * max_tokens, or to max_model_len if that comes first (the length cap stops it then). */
static uint32_t min_parent_remaining(struct kvsim_engine *e, struct sched_request *const *reqs,
                                     uint32_t n, uint32_t best)
{
    uint64_t mml = sched_get_config(e->s)->max_model_len;
    for (uint32_t i = 0; i < n; i++) {
        const struct sched_request *r = reqs[i];
        if (e->cfg.next_turn[r->id] < 0)
            continue;
        uint32_t left = r->max_tokens > r->num_output ? r->max_tokens - r->num_output : 1;
        uint64_t len = sched_request_num_tokens(r);
        if (mml <= len)
            left = 1;
        else if (mml - len < left)
            left = (uint32_t)(mml - len);
        if (left < best)
            best = left;
    }
    return best;
}

/* The load of e now into p: active blocks, running, waiting and unfinished requests, KV usage
 * (queued_tokens is kept current in e->pub). */
static void engine_load(struct kvsim_engine *e, struct kvsim_engine_pub *p)
{
    struct kvpool *pool = sched_pool(e->s);
    p->active_blocks = kvpool_num_usable_blocks(pool) - kvpool_num_free_blocks(pool) -
                       sched_num_pinned_blocks(e->s);
    struct sched_request *const *rr;
    p->num_running = sched_running(e->s, &rr);
    p->num_waiting = sched_waiting_snapshot(e->s, NULL, 0);
    p->num_unfinished = e->unfinished;
    uint32_t usable = kvpool_num_usable_blocks(pool);
    p->kv_usage = usable ? 1.0 - (double)kvpool_num_free_blocks(pool) / usable : 0.0;
}

void engine__publish(struct kvsim_engine *e)
{
    engine_load(e, &e->pub);
    engine__publish_handoff(e);
    struct sched_request *const *rr;
    sched_running(e->s, &rr);
    e->pub.earliest_parent_finish = INT64_MAX;
    e->pub.first_step_end = INT64_MAX;
    e->pub.parent_min_left = UINT32_MAX;
    /* The first step that can end: the running one, or (idle, waiting for a transfer or a
     * message) one that starts when the transfer ends or the message applies. */
    int64_t first_end = e->step ? e->step_end : INT64_MAX;
    int64_t wake = tiers_deadline(e), msg = engine__next_message(e);
    if (msg < wake)
        wake = msg;
    if (!e->step && e->unfinished && wake != INT64_MAX) {
        int64_t m = kvsim_step_model_min_duration_ns(&e->cfg.model);
        first_end = wake > INT64_MAX - m ? INT64_MAX : wake + m;
    }
    e->pub.first_step_end = first_end;
    /* A prefill engine's finishes release nothing: the decode engine's do. */
    if (!e->cfg.next_turn || e->cfg.role == KVSIM_ENGINE_PREFILL)
        return;
    uint32_t best = min_parent_remaining(e, rr, e->pub.num_running, UINT32_MAX);
    if (e->pub.num_waiting) {
        if (e->pub.num_waiting > e->cap_waiting_scratch) {
            struct sched_request **nw =
                realloc(e->waiting_scratch, e->pub.num_waiting * sizeof *nw);
            if (!nw) { /* no bound known: the coordinator falls back to the running step */
                e->pub.earliest_parent_finish = first_end;
                e->pub.parent_min_left = 1;
                return;
            }
            e->waiting_scratch = nw;
            e->cap_waiting_scratch = e->pub.num_waiting;
        }
        sched_waiting_snapshot(e->s, e->waiting_scratch, e->pub.num_waiting);
        best = min_parent_remaining(e, e->waiting_scratch, e->pub.num_waiting, best);
    }
    e->pub.parent_min_left = best;
    if (best == UINT32_MAX || first_end == INT64_MAX)
        return;
    int64_t d = kvsim_step_model_min_duration_ns(&e->cfg.model);
    int64_t more = (int64_t)(best - 1);
    e->pub.earliest_parent_finish =
        more > (INT64_MAX - first_end) / d ? INT64_MAX : first_end + more * d;
}

/* The step sink (a router with a delayed view; engine.h, kvsim_step_sink), on the engine's thread:
 * the KV events recorded so far, handed over at once stamped with the end of the step they belong
 * to (sink_drain), and the load at every step's end (step_ended). */
struct sink_event_ctx {
    const struct kvsim_step_sink *sink;
    uint32_t engine;
    int64_t t;
    int64_t t_stored; /* a decode fast run's: its stored blocks' stamp (sink_fast_run) */
};

static int sink_events(void *ctx, const struct kvpool_event *evs, size_t n)
{
    const struct sink_event_ctx *c = ctx;
    return c->sink->events(c->sink->ctx, c->engine, c->t, evs, n);
}

/* The events recorded so far, stamped t. Returns 0 or the sink's error (the engine failed). */
static int sink_drain(struct kvsim_engine *e, int64_t t)
{
    const struct kvsim_step_sink *sink = e->cfg.step_sink;
    if (!sink)
        return 0;
    struct sink_event_ctx c = {sink, e->cfg.id, t, t};
    int rc = kvpool_events_drain_batch(sched_pool(e->s), sink_events, &c);
    return rc ? engine__fail(e, rc) : 0;
}

int kvsim_engine_sink_flush(struct kvsim_engine *e) { return sink_drain(e, e->now); }

/* A decode fast run's events and load as its k steps one by one would have handed them over: the
 * removals of the first step's allocation stamped with that step's end t1, the blocks the last
 * step cached (after them: a run allocates in its first step only) with the run's end (the
 * caller's step_ended), and the load at t1 (every step of the run ends with the same load:
 * nothing is allocated after the first one). The engine's thread, after the run. Returns as
 * sink_drain. */
static int sink_events_run(void *ctx, const struct kvpool_event *evs, size_t n)
{
    const struct sink_event_ctx *c = ctx;
    size_t k = 0;
    while (k < n && evs[k].type != KVPOOL_EVENT_STORED)
        k++;
    int rc = k ? c->sink->events(c->sink->ctx, c->engine, c->t, evs, k) : 0;
    if (rc == 0 && k < n)
        rc = c->sink->events(c->sink->ctx, c->engine, c->t_stored, evs + k, n - k);
    return rc;
}

static int sink_fast_run(struct kvsim_engine *e, int64_t t1)
{
    const struct kvsim_step_sink *sink = e->cfg.step_sink;
    if (!sink)
        return 0;
    struct sink_event_ctx c = {sink, e->cfg.id, t1, e->now};
    int rc = kvpool_events_drain_batch(sched_pool(e->s), sink_events_run, &c);
    if (rc)
        return engine__fail(e, rc);
    struct kvsim_engine_pub load = e->pub;
    engine_load(e, &load);
    sink->load(sink->ctx, e->cfg.id, t1, &load);
    return 0;
}

/* At a step's end (e->now): what its update recorded, and the load. Returns as sink_drain. */
static int step_ended(struct kvsim_engine *e)
{
    const struct kvsim_step_sink *sink = e->cfg.step_sink;
    if (!sink)
        return 0;
    int rc = sink_drain(e, e->now);
    if (rc)
        return rc;
    struct kvsim_engine_pub load = e->pub; /* queued_tokens is kept current */
    engine_load(e, &load);
    sink->load(sink->ctx, e->cfg.id, e->now, &load);
    return 0;
}

int engine__fail(struct kvsim_engine *e, int rc)
{
    const struct sched_violation *v = sched_last_violation(e->s);
    if (rc == -EUCLEAN && v) {
        char line[320];
        sched_violation_format(v, line, sizeof line);
        snprintf(e->err, sizeof e->err, "engine %u at t=%" PRId64 " ns: %s", e->cfg.id, e->now,
                 line);
    } else {
        snprintf(e->err, sizeof e->err, "engine %u at t=%" PRId64 " ns: %s", e->cfg.id, e->now,
                 strerror(-rc));
    }
    return rc;
}

int engine__clock_overflow(struct kvsim_engine *e, const char *what, int64_t dur)
{
    snprintf(e->err, sizeof e->err,
             "engine %u at t=%" PRId64 " ns, step %" PRIu64 ": a %s of %" PRId64
             " ns would end past the clock's last instant (%" PRId64 " ns, int64)",
             e->cfg.id, e->now, e->steps, what, dur, (int64_t)KVSIM_CLOCK_END_NS);
    return -EOVERFLOW;
}

int engine__push_done(struct kvsim_engine *e, uint32_t req, int64_t t)
{
    if (e->num_done == e->cap_done) {
        uint32_t nc = e->cap_done ? e->cap_done * 2 : 64;
        struct kvsim_engine_done *nd = realloc(e->done, nc * sizeof *nd);
        if (!nd)
            return -ENOMEM;
        e->done = nd;
        e->cap_done = nc;
    }
    e->done[e->num_done++] = (struct kvsim_engine_done){req, t};
    return 0;
}

/* Whether a sequence of `tokens` (capped at max_model_len) can never fit a pool. */
static bool exceeds_capacity(uint64_t tokens, uint32_t max_model_len, uint32_t block_size,
                             uint32_t num_blocks)
{
    uint64_t full = tokens < max_model_len ? tokens : max_model_len;
    return (full + block_size - 1) / block_size > num_blocks - 1u;
}

/* Why a request can never run here (NULL: it can). A prefill engine also refuses what the
 * decode pool could never serve: it would only strand its KV. */
static const char *reject_reason(const struct kvsim_engine *e, const struct kvsim_req_spec *spec)
{
    const struct sched_config *sc = sched_get_config(e->s);
    bool prefill = e->cfg.role == KVSIM_ENGINE_PREFILL;
    uint64_t here = (uint64_t)spec->input_len + (prefill ? 1 : spec->output_len);
    /* #49445 (contract 2): the front door (vLLM's AsyncLLM.check_admission) refuses a request
     * that would take the engine's unfinished requests past max_num_queued_reqs: HTTP 503
     * (QueueOverflowError), before the scheduler sees it. */
    if (sc->max_num_queued_reqs && e->unfinished + 1u > sc->max_num_queued_reqs)
        return "queue_full";
    if (spec->input_len >= sc->max_model_len)
        return "prompt_too_long";
    if (exceeds_capacity(here, sc->max_model_len, sc->block_size, sc->num_blocks))
        return "exceeds_kv_capacity";
    if (!prefill)
        return NULL;
    const struct kvsim_engine_disagg *d = e->cfg.disagg;
    if (spec->input_len >= d->decode_max_model_len)
        return "decode_prompt_too_long";
    if (exceeds_capacity((uint64_t)spec->input_len + spec->output_len, d->decode_max_model_len,
                         d->decode_block_size, d->decode_num_blocks))
        return "decode_exceeds_kv_capacity";
    return NULL;
}

int kvsim_engine_admit(struct kvsim_engine *e, uint32_t req, int64_t t)
{
    return kvsim_engine_admit_ext(e, req, t, NULL);
}

int kvsim_engine_admit_ext(struct kvsim_engine *e, uint32_t req, int64_t t,
                           const struct kvsim_engine_admit_opts *o)
{
    const struct kvsim_req_spec *spec = &e->cfg.trace->reqs[req];
    struct kvsim_metrics *m = e->cfg.metrics;
    if (e->cfg.role == KVSIM_ENGINE_DECODE)
        return -EINVAL; /* a decode engine's requests arrive as messages */
    int src = engine__sample_to(e, t);
    if (src)
        return src;
    if (!e->step && t > e->now)
        e->now = t;
    int mrc = kvsim_metrics_on_arrival(m, req, t, spec->input_len);
    if (mrc)
        return engine__fail(e, mrc);
    const char *reject = reject_reason(e, spec);
    if (reject) {
        /* Explicitly rejected, and finished for its session: the next turn still comes. */
        mrc = kvsim_metrics_on_reject(m, req, t, reject);
        if (mrc)
            return engine__fail(e, mrc);
        e->rejected++;
        observe(e, KVSIM_OBS_FINISHED, req, t, KVSIM_OBS_REJECTED, 0);
        return engine__push_done(e, req, t);
    }
    uint32_t n = o && o->prompt ? 0 : kvsim_prompt_runs(e->cfg.trace, req, e->runs, e->cap_runs);
    if (n > e->cap_runs) {
        struct kvpool_token_run *nr = realloc(e->runs, n * sizeof *nr);
        if (!nr)
            return -ENOMEM;
        e->runs = nr;
        e->cap_runs = n;
        kvsim_prompt_runs(e->cfg.trace, req, e->runs, e->cap_runs);
    }
    bool prefill = e->cfg.role == KVSIM_ENGINE_PREFILL;
    struct sched_request_params p = {
        .id = req,
        .prompt = o ? o->prompt : NULL,
        .num_prompt_tokens = spec->input_len,
        .prompt_runs = o && o->prompt ? NULL : e->runs,
        .num_prompt_runs = n,
        .max_tokens = prefill ? 1 : spec->output_len, /* vLLM's proxy sends the prefill so */
        .min_tokens = o ? o->min_tokens : 0,
        .priority = o ? o->priority : 0,
        .arrival = (double)t,
        .eos_token_id = e->cfg.stops && spec->stop_after ? (int64_t)ENGINE_EOS_TOKEN : -1,
        .kv_producer = prefill,
    };
    if (o && !o->prompt && o->num_prompt_hashes &&
        o->hashes_block_size == sched_get_config(e->s)->block_size) {
        p.prompt_hashes = o->prompt_hashes;
        p.num_prompt_hashes = o->num_prompt_hashes;
    }
    struct sched_request *r;
    int rc = sched_add(e->s, &p, &r);
    if (rc)
        return rc;

    e->unfinished++;
    e->pub.queued_tokens += spec->input_len;
    return 0;
}

static int grow_scratch(struct kvsim_engine *e, uint32_t n)
{
    if (n <= e->cap_tok)
        return 0;
    uint32_t nc = e->cap_tok ? e->cap_tok : 64;
    while (nc < n)
        nc *= 2;
    kvpool_token *t = realloc(e->tok, nc * sizeof *t);
    if (t)
        e->tok = t;
    const kvpool_token **p = realloc(e->tok_ptr, nc * sizeof *p);
    if (p)
        e->tok_ptr = p;
    uint32_t *c = realloc(e->tok_count, nc * sizeof *c);
    if (c)
        e->tok_count = c;
    uint32_t *ch = realloc(e->shape_chunk, nc * sizeof *ch);
    if (ch)
        e->shape_chunk = ch;
    uint64_t *pre = realloc(e->shape_prefix, nc * sizeof *pre);
    if (pre)
        e->shape_prefix = pre;
    uint64_t *ctx = realloc(e->shape_context, nc * sizeof *ctx);
    if (ctx)
        e->shape_context = ctx;
    uint32_t *ob = realloc(e->out_before, nc * sizeof *ob);
    if (ob)
        e->out_before = ob;
    if (!t || !p || !c || !ch || !pre || !ctx || !ob)
        return -ENOMEM;
    e->cap_tok = nc;
    return 0;
}

/* Inlined into both callers: it runs once per step, and the call cost 1.5 % of a decode-heavy
 * replay's instructions (bench/gate). One schedule() call at e->now: preemption and admission
 * metrics, the batch's shape and its duration (*dur, *prompt_tokens). Returns the step (it may be
 * empty) or NULL with *rc set. */
static inline __attribute__((always_inline)) struct sched_step *
schedule_step(struct kvsim_engine *e, int64_t *dur, uint64_t *prompt_tokens, int *rc_out)
{
    struct kvsim_metrics *m = e->cfg.metrics;
    int rc;
    struct sched_step *st = sched_schedule(e->s, &rc);
    if (!st)
        goto fail;
    if (e->cfg.role == KVSIM_ENGINE_DECODE && (rc = engine__reservations_made(e, st)) != 0) {
        *rc_out = rc;
        return NULL;
    }
    for (uint32_t i = 0; i < st->num_preempted; i++)
        if ((rc = kvsim_metrics_on_preempt(m, (uint32_t)st->preempted[i]->id)) != 0)
            goto fail;
        else
            observe(e, KVSIM_OBS_PREEMPTED, (uint32_t)st->preempted[i]->id, e->now, 0, 0);
    e->cur.preemptions += st->num_preempted;
    if (e->tiers) {
        struct sched_offload_status os;
        sched_offload_status(e->s, &os);
        if (os.blocked && e->blocked_since < 0)
            e->blocked_since = e->now;
        else if (!os.blocked && e->blocked_since >= 0) {
            e->blocked_ns += e->now - e->blocked_since;
            e->blocked_since = -1;
        }
        if ((rc = kvsim_tiers_flush(e->tiers)) != 0)
            goto fail;
    }
    *dur = 0;
    *prompt_tokens = 0;
    if (st->total_tokens == 0)
        return st;
    for (uint32_t i = 0; i < st->num_new; i++) {
        const struct sched_request *r = st->new_reqs[i];
        uint32_t cached = r->num_cached_tokens > 0 ? (uint32_t)r->num_cached_tokens : 0;
        rc = kvsim_metrics_on_schedule(m, (uint32_t)r->id, e->now, cached, (int32_t)e->cfg.id);
        if (rc)
            goto fail;
        observe(e, KVSIM_OBS_SCHEDULED, (uint32_t)r->id, e->now, cached, 0);
        if (e->cfg.role != KVSIM_ENGINE_DECODE) /* a decode leaves the queue when reserved */
            e->pub.queued_tokens -= e->cfg.trace->reqs[r->id].input_len;
    }
    for (uint32_t i = 0; i < st->num_resumed; i++) {
        const struct sched_request *r = st->resumed[i];
        rc = kvsim_metrics_on_schedule(m, (uint32_t)r->id, e->now, 0, (int32_t)e->cfg.id);
        if (rc)
            goto fail;
        observe(e, KVSIM_OBS_SCHEDULED, (uint32_t)r->id, e->now, 0, 0);
    }
    struct kvsim_step_batch b = {0};
    bool shape = e->cfg.model.profile != NULL; /* only the profile model reads the shape */
    if (shape && (rc = grow_scratch(e, st->num_scheduled)))
        goto fail;
    bool async = e->cfg.sched.async_scheduling;
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        const struct sched_scheduled *x = &st->scheduled[i];
        const struct sched_request *r = x->req;
        uint64_t before = r->num_computed_tokens - x->num_tokens;
        /* Placeholders count the outputs still in flight (async scheduling): this step's own
         * one, if it samples, is not part of its context. */
        uint64_t pending = async ? r->num_output_placeholders - x->samples : 0;
        if (x->num_tokens == 1 && r->num_output + pending > 0 &&
            before + 1 == sched_request_num_tokens(r) + pending) {
            if (shape)
                e->shape_context[b.num_decode_reqs] = before;
            b.num_decode_reqs++;
        } else {
            if (shape) {
                e->shape_chunk[b.num_prefill_reqs] = x->num_tokens;
                e->shape_prefix[b.num_prefill_reqs] = before;
            }
            b.num_prefill_reqs++;
            b.prefill_tokens += x->num_tokens;
        }
    }
    b.kv_usage = kvpool_usage(sched_pool(e->s));
    b.prefill_chunk = e->shape_chunk;
    b.prefill_prefix = e->shape_prefix;
    b.decode_context = e->shape_context;
    e->prefill_tokens += b.prefill_tokens;
    *prompt_tokens = b.prefill_tokens;
    unsigned outside = 0;
    *dur = kvsim_step_model_cost_ns(&e->cfg.model, &b, &outside);
    e->busy_ns += *dur;
    e->kv_usage_ns += b.kv_usage * (double)*dur;
    if (b.kv_usage > e->peak_kv_usage)
        e->peak_kv_usage = b.kv_usage;
    e->steps++;
    if (outside) {
        e->steps_outside++;
        for (int k = 0; k < 3; k++)
            e->steps_outside_axis[k] += (outside >> k) & 1;
    }
    return st;
fail:
    *rc_out = engine__fail(e, rc);
    return NULL;
}

/* Schedules the step that runs after e->step (pipelined engines). */
static int schedule_ahead(struct kvsim_engine *e)
{
    int rc = 0;
    struct sched_step *st = schedule_step(e, &e->ahead_dur, &e->ahead_prompt_tokens, &rc);
    if (!st)
        return rc;
    e->ahead = st;
    int64_t end; /* it runs after the running step: its blocks are heard of at its own end */
    return sink_drain(e, kvsim_clock_add(e->step_end, e->ahead_dur, &end) ? end : INT64_MAX);
}

/* Starts a step at e->now. Leaves e->step NULL when nothing can be scheduled. */
static int start_step(struct kvsim_engine *e)
{
    /* An empty step that preempted someone changed state: schedule again at the same instant.
     * The running set shrinks each time, so this ends. */
    for (;;) {
        int rc = 0;
        int64_t dur;
        uint64_t prompt;
        struct sched_step *st = schedule_step(e, &dur, &prompt, &rc);
        if (!st)
            return rc;
        if (st->total_tokens == 0) {
            rc = sched_update(e->s, st, NULL);
            if (rc)
                return engine__fail(e, rc);
            if (st->num_preempted)
                continue;
            return 0; /* idle: the caller decides whether anything can wake it */
        }
        e->step = st;
        if (!kvsim_clock_add(e->now, dur, &e->step_end))
            return engine__clock_overflow(e, "step", dur);
        e->step_prompt_tokens = prompt;
        /* what its schedule cached and evicted, heard of at its end (vLLM: after the pass) */
        if ((rc = sink_drain(e, e->step_end)) != 0)
            return rc;
        return e->pipelined ? schedule_ahead(e) : 0;
    }
}

/* A pipelined engine at the end of its running step: the step scheduled ahead starts now, and
 * the one after it is scheduled. An empty one is consumed and the engine schedules afresh. */
static int promote_ahead(struct kvsim_engine *e)
{
    struct sched_step *a = e->ahead;
    e->ahead = NULL;
    if (a->total_tokens == 0) {
        int rc = sched_update(e->s, a, NULL);
        return rc ? engine__fail(e, rc) : 0;
    }
    e->step = a;
    if (!kvsim_clock_add(e->now, e->ahead_dur, &e->step_end))
        return engine__clock_overflow(e, "step", e->ahead_dur);
    e->step_prompt_tokens = e->ahead_prompt_tokens;
    return schedule_ahead(e);
}

/* Forgets finished request r, or (pipelined) keeps it until the step scheduled ahead of its
 * finish, which may still list it, has been applied. Returns 0 or a negative errno. */
static int release_finished(struct kvsim_engine *e, struct sched_request *r)
{
    if (r->num_in_flight_tokens > 0) {
        if (e->num_later == e->cap_later) {
            uint32_t nc = e->cap_later ? 2 * e->cap_later : 8;
            struct sched_request **nl = realloc(e->later, nc * sizeof *nl);
            if (!nl)
                return engine__fail(e, -ENOMEM);
            e->later = nl;
            e->cap_later = nc;
        }
        e->later[e->num_later++] = r;
        return 0;
    }
    return sched_release(e->s, r) != 0 ? engine__fail(e, -EBUSY) : 0;
}

/* Releases the finished requests no outstanding step lists any more. */
static int release_later(struct kvsim_engine *e)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < e->num_later; i++) {
        struct sched_request *r = e->later[i];
        if (r->num_in_flight_tokens > 0)
            e->later[kept++] = r;
        else if (sched_release(e->s, r) != 0)
            return engine__fail(e, -EBUSY);
    }
    e->num_later = kept;
    return 0;
}

/* Counts output token number index of r at e->now (metrics, time series, observer). */
static inline int count_token(struct kvsim_engine *e, const struct sched_request *r, uint32_t index)
{
    e->cur.generation_tokens++;
    int rc = kvsim_metrics_on_token(e->cfg.metrics, e->cfg.thread, (uint32_t)r->id, e->now);
    if (rc)
        return engine__fail(e, rc);
    observe(e, KVSIM_OBS_TOKEN, (uint32_t)r->id, e->now, index, 0);
    return 0;
}

/* Applies the running step's output at its end time. */
static int complete_step(struct kvsim_engine *e)
{
    struct sched_step *st = e->step;
    struct kvsim_metrics *m = e->cfg.metrics;
    /* A prefill's one token goes back to the proxy, not the client: the decode's count. */
    bool prefill = e->cfg.role == KVSIM_ENGINE_PREFILL;
    bool pipelined = e->pipelined;
    int rc = grow_scratch(e, st->num_scheduled);
    if (rc)
        return engine__fail(e, rc);
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        const struct sched_request *r = st->scheduled[i].req;
        e->tok_count[i] = st->scheduled[i].samples ? 1 : 0;
        e->tok[i] = output_token((uint32_t)r->id, r->num_output);
        if (e->cfg.stops && e->cfg.trace->reqs[r->id].stop_after == r->num_output + 1)
            e->tok[i] = ENGINE_EOS_TOKEN;
        e->tok_ptr[i] = &e->tok[i];
        if (pipelined)
            e->out_before[i] = r->num_output;
        /* One step in flight: every sampled token is kept, so it is counted here, while r is
         * in cache. */
        if (st->scheduled[i].samples && !prefill && !pipelined &&
            (rc = count_token(e, r, r->num_output)) != 0)
            return rc;
    }
    struct sched_model_output out = {.tokens = e->tok_ptr, .num_tokens = e->tok_count};
    e->cur.prompt_tokens += e->step_prompt_tokens;
    e->step = NULL;
    rc = sched_update(e->s, st, &out);
    if (rc)
        return engine__fail(e, rc);
    /* Pipelined: the tokens the update kept. A request that finished or was aborted after this
     * step was scheduled drops its output. */
    if (pipelined && !prefill)
        for (uint32_t i = 0; i < st->num_scheduled; i++) {
            const struct sched_request *r = st->scheduled[i].req;
            if (r->num_output != e->out_before[i] &&
                (rc = count_token(e, r, e->out_before[i])) != 0)
                return rc;
        }
    if (e->num_later && (rc = release_later(e)) != 0)
        return rc;
    uint32_t nf;
    struct sched_request *const *fin = sched_last_finished(e->s, &nf);
    for (uint32_t i = 0; i < nf && !prefill; i++) {
        uint32_t req = (uint32_t)fin[i]->id;
        if ((rc = kvsim_metrics_on_finish(m, req, e->now)) != 0 ||
            (rc = engine__push_done(e, req, e->now)) != 0)
            return engine__fail(e, rc);
        observe(e, KVSIM_OBS_FINISHED, req, e->now,
                fin[i]->status == SCHED_FINISHED_STOPPED ? KVSIM_OBS_STOP : KVSIM_OBS_LENGTH,
                fin[i]->num_output);
    }
    if (prefill && (rc = engine__prefills_finished(e, fin, nf)) != 0)
        return rc;
    /* Release finished requests: memory is bounded by the in-flight set. */
    for (uint32_t i = 0; i < nf; i++)
        if ((rc = release_finished(e, fin[i])) != 0)
            return rc;
    e->unfinished -= nf;
    if (e->tiers && (rc = kvsim_tiers_flush(e->tiers)) != 0) /* blocks cached by the update */
        return engine__fail(e, rc);
    return 0;
}

/* ---- the decode fast path --------------------------------------------------------------------
 *
 * A decode-heavy replay spends most of its steps on batches that do not change: every running
 * request decodes one token, no block is taken but in the first step, nobody arrives, finishes or
 * is preempted. Such a run of steps is applied in bulk: the scheduler checks how long it lasts
 * (sched_stable_decode_steps: from a first step that may take a block for some of them, up to
 * the step that fills a block, which it includes and which caches it, or the one before the next
 * block is needed, a length cap or admission), the engine cuts it at its own next event (the epoch
 * end `until`, a message or transfer, a time series boundary, a stop token) and at most
 * FAST_MAX_STEPS, then applies the steps, the token metrics and the step accounting at once. Every
 * figure it changes ends as k steps one by one would leave it (the replay's digests and
 * tests/cli/fast_path.sh compare both ways). With offload tiers nothing is stored or loaded
 * meanwhile: no block is cached (the run ends before the step that fills one), and the run ends
 * before the next copy does.
 */
#define FAST_MIN_STEPS  2u
#define FAST_MAX_STEPS  4096u
#define FAST_MAX_TOKENS 16384u /* steps x running requests per run */

/* Returns the number of steps applied from e->now (no step running then or after), or a
 * negative errno. *again says whether another run may follow at once: not when this one was cut
 * by a stop token or by time (its next step is a normal one). */
static int decode_fast_forward(struct kvsim_engine *e, int64_t until, bool *again)
{
    *again = false;
    struct sched_request *const *rr;
    uint32_t n = sched_running(e->s, &rr);
    if (n == 0 || e->num_later || e->num_aborts)
        return 0;
    struct sched_stable_run run; /* run.new_blocks: blocks the first step takes */
    uint32_t k = sched_stable_decode_steps(e->s, FAST_MIN_STEPS, FAST_MAX_STEPS, &run);
    if (k < FAST_MIN_STEPS)
        return 0;
    bool cut = false;
    if (e->cfg.stops) /* the token after stop_after - 1 outputs is the EOS */
        for (uint32_t i = 0; i < n; i++) {
            uint32_t stop = e->cfg.trace->reqs[rr[i]->id].stop_after, out = rr[i]->num_output;
            if (stop > out && stop - out - 1 < k) {
                k = stop - out - 1;
                cut = true;
            }
        }
    if (k > FAST_MAX_TOKENS / n) /* bounds the token buffer */
        k = FAST_MAX_TOKENS / n;
    /* Every step's usage is the first's, read after its allocations (schedule_step's order). */
    struct kvsim_step_batch b = {.num_decode_reqs = n,
                                 .kv_usage = kvpool_usage_taking(sched_pool(e->s), run.new_blocks)};
    /* Every step ends at or before until, and before the next local event or interval end (an
     * event at a step's end applies after that step: the normal path handles it). */
    int64_t lim = next_local_event(e);
    if (e->next_sample_ns < lim)
        lim = e->next_sample_ns;
    if (lim <= e->now || until < e->now)
        return 0;
    int64_t last = until < lim - 1 ? until : lim - 1; /* the latest end a step of the run has */
    /* The polynomial's step time depends on the batch size and KV usage only: one for the run.
     * The profile's depends on the contexts, one longer each step: step by step. */
    bool profile = e->cfg.model.profile != NULL;
    unsigned outside = 0;
    int64_t dur = 0;
    int rc;
    if (profile) {
        if ((rc = grow_scratch(e, n)) != 0)
            return engine__fail(e, rc);
        if (!e->fast_dur) {
            e->fast_dur = malloc(FAST_MAX_STEPS * sizeof *e->fast_dur);
            if (!e->fast_dur)
                return engine__fail(e, -ENOMEM);
        }
        b.decode_context = e->shape_context;
        int64_t t = e->now;
        uint32_t j = 0;
        for (; j < k; j++) {
            for (uint32_t i = 0; i < n; i++)
                e->shape_context[i] = rr[i]->num_computed_tokens + j;
            unsigned out = 0;
            int64_t d = kvsim_step_model_cost_ns(&e->cfg.model, &b, &out);
            if (d > last - t) {
                cut = true;
                break;
            }
            t += d;
            e->fast_dur[j] = (struct engine_fast_step){d, out};
        }
        k = j;
    } else {
        dur = kvsim_step_model_cost_ns(&e->cfg.model, &b, &outside);
        uint64_t fit = (uint64_t)((last - e->now) / dur);
        if (fit < k) {
            k = (uint32_t)fit;
            cut = true;
        }
    }
    if (k < FAST_MIN_STEPS || outside)
        return 0;
    if (!e->fast_tok) {
        e->fast_tok = malloc(FAST_MAX_TOKENS * sizeof *e->fast_tok);
        if (!e->fast_tok)
            return engine__fail(e, -ENOMEM);
    }
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < k; j++)
            e->fast_tok[i * k + j] = output_token((uint32_t)rr[i]->id, rr[i]->num_output + j);
    /* What the first schedule's tier flush would send (nothing, normally: the last update's
     * flush sent it all). */
    if (e->tiers && (rc = kvsim_tiers_flush(e->tiers)) != 0)
        return engine__fail(e, rc);
    /* Token metrics and the observer first: they read the outputs before the steps. */
    int64_t t1 = e->now + (profile ? e->fast_dur[0].ns : dur);
    if (!profile) {
        for (uint32_t i = 0; i < n; i++)
            if ((rc = kvsim_metrics_on_tokens(e->cfg.metrics, e->cfg.thread, (uint32_t)rr[i]->id,
                                              t1, dur, k)) != 0)
                return engine__fail(e, rc);
    }
    if (profile || e->cfg.observe) {
        int64_t tj = e->now;
        for (uint32_t j = 0; j < k; j++) {
            tj += profile ? e->fast_dur[j].ns : dur;
            for (uint32_t i = 0; i < n; i++) {
                if (profile && (rc = kvsim_metrics_on_token(e->cfg.metrics, e->cfg.thread,
                                                            (uint32_t)rr[i]->id, tj)) != 0)
                    return engine__fail(e, rc);
                observe(e, KVSIM_OBS_TOKEN, (uint32_t)rr[i]->id, tj, rr[i]->num_output + j, 0);
            }
        }
    }
    if ((rc = sched_decode_steps(e->s, k, e->fast_tok, &run)) != 0)
        return engine__fail(e, rc);
    /* The first of the k schedules ended a wait for capacity held by copies, if one ran (a
     * blocked request needs a block: it cannot be in a stable batch). */
    if (e->blocked_since >= 0) {
        e->blocked_ns += e->now - e->blocked_since;
        e->blocked_since = -1;
    }
    /* schedule_step's and complete_step's accounting, k times (the KV-time sum step by step:
     * floating-point addition is not associative). */
    int64_t span = 0;
    double kv_usage_ns = e->kv_usage_ns; /* in a register: the same additions, in order */
    if (profile) {
        for (uint32_t j = 0; j < k; j++) {
            int64_t d = e->fast_dur[j].ns;
            kv_usage_ns += b.kv_usage * (double)d;
            span += d;
            if (e->fast_dur[j].outside) {
                e->steps_outside++;
                for (int a = 0; a < 3; a++)
                    e->steps_outside_axis[a] += (e->fast_dur[j].outside >> a) & 1;
            }
        }
    } else {
        double step_kv = b.kv_usage * (double)dur;
        for (uint32_t j = 0; j < k; j++)
            kv_usage_ns += step_kv;
        span = (int64_t)k * dur;
    }
    e->kv_usage_ns = kv_usage_ns;
    if (b.kv_usage > e->peak_kv_usage)
        e->peak_kv_usage = b.kv_usage;
    e->busy_ns += span;
    e->steps += k;
    e->fast_steps += k;
    e->cur.generation_tokens += (uint64_t)n * k;
    e->now += span;
    e->step_end = e->now;
    e->step_prompt_tokens = 0;
    if ((rc = sink_fast_run(e, t1)) != 0)
        return rc;
    *again = !cut;
    return (int)k;
}

/* Finds unfinished request req among the running and waiting ones (aborts are rare: a scan). */
static struct sched_request *find_unfinished(struct kvsim_engine *e, uint32_t req)
{
    struct sched_request *const *rr;
    uint32_t n = sched_running(e->s, &rr);
    for (uint32_t i = 0; i < n; i++)
        if (rr[i]->id == req)
            return rr[i];
    uint32_t nw = sched_waiting_snapshot(e->s, NULL, 0);
    if (nw > e->cap_waiting_scratch) {
        struct sched_request **ns = realloc(e->waiting_scratch, nw * sizeof *ns);
        if (!ns)
            return NULL;
        e->waiting_scratch = ns;
        e->cap_waiting_scratch = nw;
    }
    nw = sched_waiting_snapshot(e->s, e->waiting_scratch, e->cap_waiting_scratch);
    for (uint32_t i = 0; i < nw; i++)
        if (e->waiting_scratch[i]->id == req)
            return e->waiting_scratch[i];
    return NULL;
}

/* Aborts req now (no step runs). Returns 0, -ENOENT (not unfinished here) or an error. */
static int abort_now(struct kvsim_engine *e, uint32_t req)
{
    struct sched_request *r = find_unfinished(e, req);
    if (!r)
        return -ENOENT;
    bool queued = kvsim_metrics_record(e->cfg.metrics, req)->first_sched_ns == KVSIM_TIME_NONE;
    uint32_t outputs = r->num_output;
    int rc = sched_abort(e->s, r);
    if (rc)
        return engine__fail(e, rc);
    if (queued && e->cfg.role != KVSIM_ENGINE_DECODE)
        e->pub.queued_tokens -= e->cfg.trace->reqs[req].input_len;
    if ((rc = kvsim_metrics_on_abort(e->cfg.metrics, req, e->now, "client_abort")) != 0 ||
        (rc = engine__push_done(e, req, e->now)) != 0)
        return engine__fail(e, rc);
    observe(e, KVSIM_OBS_FINISHED, req, e->now, KVSIM_OBS_ABORT, outputs);
    if ((rc = release_finished(e, r)) != 0)
        return rc;
    e->unfinished--;
    if (e->tiers && (rc = kvsim_tiers_flush(e->tiers)) != 0)
        return engine__fail(e, rc);
    return 0;
}

int kvsim_engine_abort_req(struct kvsim_engine *e, uint32_t req)
{
    if (!e->step) {
        int rc = abort_now(e, req);
        if (rc == 0)
            engine__publish(e);
        return rc;
    }
    if (!find_unfinished(e, req))
        return -ENOENT;
    if (e->num_aborts == e->cap_aborts) {
        uint32_t nc = e->cap_aborts ? 2 * e->cap_aborts : 8;
        uint32_t *na = realloc(e->aborts, nc * sizeof *na);
        if (!na)
            return -ENOMEM;
        e->aborts = na;
        e->cap_aborts = nc;
    }
    e->aborts[e->num_aborts++] = req;
    return 0;
}

/* The aborts that waited for the step that just ended (one already finished is skipped). */
static int apply_aborts(struct kvsim_engine *e)
{
    for (uint32_t i = 0; i < e->num_aborts; i++) {
        int rc = abort_now(e, e->aborts[i]);
        if (rc && rc != -ENOENT)
            return rc;
    }
    e->num_aborts = 0;
    return 0;
}

/* An idle engine with unfinished requests that no step, transfer or arrival can wake. */
static int dead_end(struct kvsim_engine *e)
{
    struct kvpool *pool = sched_pool(e->s);
    uint32_t free_blocks = kvpool_num_free_blocks(pool);
    uint32_t active = kvpool_num_usable_blocks(pool) - free_blocks;
    const struct sched_request *head = sched_waiting_head(e->s);
    if (head)
        snprintf(
            e->err, sizeof e->err,
            "engine %u at t=%" PRId64 " ns: dead end: %u unfinished requests, active=%u "
            "blocks, head request %" PRIu64 " (%s) needs %" PRIu64 " blocks, %u free; no "
            "step, transfer or arrival can wake them",
            e->cfg.id, e->now, e->unfinished, active, head->id, sched_status_name(head->status),
            sched_request_blocks_missing(head, sched_get_config(e->s)->block_size), free_blocks);
    else
        snprintf(e->err, sizeof e->err,
                 "engine %u at t=%" PRId64 " ns: dead end: %u unfinished requests, active=%u "
                 "blocks, %u free; no step, transfer or arrival can wake them",
                 e->cfg.id, e->now, e->unfinished, active, free_blocks);
    return -EDEADLK;
}

static int tiers_advance(struct kvsim_engine *e, int64_t t)
{
    if (!e->tiers)
        return 0;
    int rc = kvsim_tiers_advance_to(e->tiers, t);
    /* A transfer whose end saturated at the clock's end would complete there, silently. */
    const char *link = rc == -EOVERFLOW ? kvsim_tiers_link_past_the_clock(e->tiers) : NULL;
    if (rc < 0 && !link)
        return engine__fail(e, rc);
    if (link) {
        snprintf(e->err, sizeof e->err,
                 "engine %u at t=%" PRId64 " ns, step %" PRIu64 ": a transfer on the %s link "
                 "would end past the clock's last instant (%" PRId64
                 " ns, int64): the link is too slow for its load",
                 e->cfg.id, e->now, e->steps, link, (int64_t)KVSIM_CLOCK_END_NS);
        return -EOVERFLOW;
    }
    return 0;
}

/* What happens at t besides a step's end: transfers ending, posted messages, and (when the
 * engine is between steps) pins expiring. */
static int apply_events(struct kvsim_engine *e, int64_t t, bool between_steps)
{
    int rc = engine__sample_to(e, t);
    if (rc == 0)
        rc = tiers_advance(e, t);
    if (rc == 0)
        rc = engine__apply_messages(e, t, between_steps);
    engine__pin_account(e, t);
    return rc;
}

int kvsim_engine_advance(struct kvsim_engine *e, int64_t until)
{
    int rc;
    for (;;) {
        if (!e->step && e->unfinished) {
            /* Transfers ending now come first: they release holds and finish loads. */
            if ((rc = apply_events(e, e->now, true)) != 0)
                return rc;
            /* k steps at once, or none; then the next run or step starts where the k-th one's
             * end left it (its events at e->now apply first, as after any step). A run ends
             * where the batch changes: where a block fills or the next one is needed, and a run
             * may begin by taking that block. */
            for (bool again = e->decode_fast_path; again;) {
                rc = decode_fast_forward(e, until, &again);
                int src = rc > 0 ? step_ended(e) : 0; /* the run as one step: its last's end */
                if (src)
                    return src;
                if (rc != 0 && (rc < 0 || (rc = apply_events(e, e->now, true)) != 0))
                    return rc;
            }
            if ((rc = start_step(e)) != 0)
                return rc;
            engine__pin_account(e, e->now); /* its hits may take pinned blocks */
        }
        int64_t d = next_local_event(e);
        if (!e->step) {
            if (d == INT64_MAX) {
                /* A disaggregated engine may be waiting for a message the coordinator has not
                 * posted yet: the replay decides whether the whole run is stuck. */
                if (e->unfinished && e->cfg.role == KVSIM_ENGINE_AGGREGATED)
                    return dead_end(e);
                break;
            }
            if (d > until)
                break;
            if (d > e->now)
                e->now = d; /* idle until a transfer ends or a message applies */
            if ((rc = apply_events(e, d, true)) != 0)
                return rc;
            continue;
        }
        if (d < e->step_end) { /* a transfer ends or a message applies while the step runs */
            if (d > until)
                break;
            if ((rc = apply_events(e, d, false)) != 0)
                return rc;
            continue;
        }
        if (e->step_end > until)
            break;
        if ((rc = engine__sample_to(e, e->step_end)) != 0)
            return rc;
        e->now = e->step_end;
        /* vLLM checks pin deadlines once per step (get_finished): at its end. */
        if ((rc = tiers_advance(e, e->now)) != 0 || (rc = complete_step(e)) != 0 ||
            (rc = engine__apply_messages(e, e->now, true)) != 0 ||
            (e->num_aborts && (rc = apply_aborts(e)) != 0) ||
            (e->ahead && (rc = promote_ahead(e)) != 0))
            return rc;
        engine__pin_account(e, e->now);
        if ((rc = step_ended(e)) != 0)
            return rc;
        if (e->tiers && e->cfg.sched.check_invariants) {
            char msg[256];
            if (kvsim_tiers_check(e->tiers, msg, sizeof msg) != 0) {
                snprintf(e->err, sizeof e->err, "engine %u at t=%" PRId64 " ns: %s", e->cfg.id,
                         e->now, msg);
                return -EUCLEAN;
            }
        }
    }
    if (e->tiers && (rc = kvsim_tiers_settle(e->tiers)) != 0)
        return engine__fail(e, rc);
    /* A shared G3: this engine's registry writer publishes until (nothing more at or before). */
    if (e->tiers && (rc = kvsim_tiers_publish(e->tiers, until)) != 0)
        return engine__fail(e, rc);
    if (until > e->advanced_to)
        e->advanced_to = until;
    engine__publish(e);
    return 0;
}

/* ---- data-parallel ranks in lockstep (engine.h, "struct kvsim_lockstep") ----------------------
 */

int kvsim_lockstep_init(struct kvsim_lockstep *ls, struct kvsim_engine *const *ranks,
                        uint32_t num_ranks)
{
    memset(ls, 0, sizeof *ls);
    if (!num_ranks)
        return -EINVAL;
    for (uint32_t r = 0; r < num_ranks; r++)
        if (ranks[r]->tiers || ranks[r]->cfg.role != KVSIM_ENGINE_AGGREGATED ||
            !ranks[r]->cfg.model.profile)
            return -EINVAL;
    ls->ranks = ranks;
    ls->num_ranks = num_ranks;
    ls->now = INT64_MIN;
    ls->step_end = INT64_MAX;
    ls->tail_end = INT64_MIN;
    for (uint32_t r = 0; r < num_ranks; r++)
        ranks[r]->decode_fast_path = false; /* a rank's steps are the group's */
    /* vLLM's dummy batch: one token of a request with no context (when every rank is dummy,
     * nothing pads it). */
    uint64_t context = 0;
    struct kvsim_step_batch b = {.num_decode_reqs = 1, .decode_context = &context};
    ls->dummy_ns = kvsim_step_model_cost_ns(&ranks[0]->cfg.model, &b, NULL);
    return 0;
}

int64_t kvsim_lockstep_next_event(const struct kvsim_lockstep *ls) { return ls->step_end; }

/* The end of the lockstep step at ls->now on rank e: its step's output applied (as
 * kvsim_engine_advance at a step's end), the step scheduled ahead promoted. */
static int lockstep_complete(struct kvsim_engine *e, int64_t t)
{
    int rc = engine__sample_to(e, t);
    if (rc)
        return rc;
    e->now = t;
    if (!e->step)
        return 0;
    if ((rc = complete_step(e)) != 0 || (e->num_aborts && (rc = apply_aborts(e)) != 0) ||
        (e->ahead && (rc = promote_ahead(e)) != 0))
        return rc;
    return 0;
}

/* Starts the next lockstep step at t: each rank's own (or none: a dummy step), then one end for
 * all, the slowest rank's. Returns 0 or a negative errno. */
static int lockstep_start(struct kvsim_lockstep *ls, int64_t t)
{
    int64_t d = 0;
    uint32_t dummies = 0;
    for (uint32_t r = 0; r < ls->num_ranks; r++) {
        struct kvsim_engine *e = ls->ranks[r];
        int rc = engine__sample_to(e, t);
        if (rc)
            return rc;
        e->now = t;
        if (!e->step && e->unfinished && (rc = start_step(e)) != 0)
            return rc;
        if (!e->step && e->unfinished)
            return dead_end(e); /* nothing of another rank can change what this one holds */
        if (!e->step)
            dummies++;
        else if (e->step_end - t > d)
            d = e->step_end - t;
    }
    if (dummies == ls->num_ranks)
        d = ls->dummy_ns;
    int64_t end;
    if (!kvsim_clock_add(t, d, &end))
        return engine__clock_overflow(ls->ranks[0], "lockstep step", d);
    for (uint32_t r = 0; r < ls->num_ranks; r++) {
        struct kvsim_engine *e = ls->ranks[r];
        /* A rank waiting for the slowest one, or stepping a dummy batch, is busy too. */
        e->busy_ns += e->step ? end - e->step_end : d;
        if (e->step)
            e->step_end = end;
    }
    ls->dummy_rank_steps += dummies;
    ls->steps++;
    ls->step_end = end;
    return 0;
}

/* Whether any rank holds unfinished requests (vLLM's all-reduce at a synchronization point). */
static bool lockstep_unfinished(const struct kvsim_lockstep *ls)
{
    for (uint32_t r = 0; r < ls->num_ranks; r++)
        if (ls->ranks[r]->unfinished)
            return true;
    return false;
}

int kvsim_lockstep_advance(struct kvsim_lockstep *ls, int64_t until)
{
    int rc = 0;
    if (ls->step_end == INT64_MAX) /* an admission moves an idle rank's clock */
        for (uint32_t r = 0; r < ls->num_ranks; r++)
            if (ls->ranks[r]->now > ls->now)
                ls->now = ls->ranks[r]->now;
    for (;;) {
        if (ls->step_end != INT64_MAX) {
            if (ls->step_end > until)
                break;
            int64_t t = ls->step_end;
            for (uint32_t r = 0; r < ls->num_ranks && rc == 0; r++)
                rc = lockstep_complete(ls->ranks[r], t);
            if (rc)
                return rc;
            ls->now = t;
            ls->step_end = INT64_MAX;
            ls->since_sync++;
            if (!lockstep_unfinished(ls)) {
                /* Nothing left anywhere: the ranks step dummy batches to the wave's next
                 * synchronization point, where it ends. Those steps change nothing, so they are
                 * not run: a rank that gets work meanwhile waits for the one under way. */
                ls->tail_origin = t;
                ls->tail_since = ls->since_sync % KVSIM_LOCKSTEP_SYNC_STEPS;
                ls->tail_end =
                    ls->tail_since
                        ? t + (int64_t)(KVSIM_LOCKSTEP_SYNC_STEPS - ls->tail_since) * ls->dummy_ns
                        : INT64_MIN;
                ls->running = false;
            } else if (ls->since_sync == KVSIM_LOCKSTEP_SYNC_STEPS) {
                ls->since_sync = 0; /* the all-reduce sees work: the wave goes on */
            }
        }
        if (!ls->running) {
            if (!lockstep_unfinished(ls))
                break;
            /* A rank got work at ls->now: a new wave starts then, or, during the last wave's
             * dummy tail, the next dummy step's end. */
            int64_t start = ls->now;
            uint32_t since = 0;
            if (start < ls->tail_end) {
                int64_t k = (start - ls->tail_origin + ls->dummy_ns - 1) / ls->dummy_ns;
                start = ls->tail_origin + k * ls->dummy_ns;
                since = (uint32_t)((ls->tail_since + (uint64_t)k) % KVSIM_LOCKSTEP_SYNC_STEPS);
                ls->steps += (uint64_t)k;
                ls->dummy_rank_steps += (uint64_t)k * ls->num_ranks;
            }
            if (start > until)
                break;
            ls->tail_end = INT64_MIN;
            ls->now = start;
            ls->since_sync = since;
            ls->running = true;
        }
        if ((rc = lockstep_start(ls, ls->now)) != 0)
            return rc;
    }
    for (uint32_t r = 0; r < ls->num_ranks; r++) {
        struct kvsim_engine *e = ls->ranks[r];
        if (until > e->advanced_to)
            e->advanced_to = until;
        engine__publish(e);
    }
    return 0;
}
