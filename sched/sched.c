/*
 * sched.c - the vLLM v1 scheduler core (see sched.h and docs/fidelity/vllm.md).
 *
 * Section references (§n) point at shared/reference/vllm-semantics.md. Memory for queues and
 * step arrays is reserved when requests are added, so schedule() and update() never fail for
 * lack of queue space; the only allocations on those paths are the pool's amortized growth of
 * a sequence's block table and, with deferred frees, one entry per deferred free.
 */
#include "sched/sched_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the scheduler ------------------------------------------------------------------------- */

struct deferred_free {
    uint64_t fence;
    struct kvpool_seq kv;
    struct deferred_free *next;
};

struct sched {
    struct sched_config cfg;
    struct kvpool *pool;
    struct sched_request **running;
    size_t num_running, cap_running;
    struct rq waiting, skipped;
    struct sched_request **tmp_skipped; /* the waiting pass's skipped list */
    uint32_t step_threshold;            /* this schedule()'s long_prefill_token_threshold */
    struct sched_request **pending_preempted;
    size_t num_pending_preempted;
    struct sched_request **last_finished;
    uint32_t num_last_finished;
    struct sched_pin *pins; /* live source pins (kv_producer requests that finished) */
    uint32_t num_pins;
    struct sched_pin **last_pinned; /* pins made by the last update / abort */
    uint32_t num_last_pinned;
    size_t cap_reqs;            /* capacity reserved in every per-request array */
    struct sched_request *live; /* every unreleased request */
    size_t num_live;
    size_t num_unfinished;
    struct sched_request *inflight; /* in-flight prefills (#44560 reservations) */
    uint64_t add_seq;
    uint64_t step_index;
    uint64_t sched_step_seq, processed_step_seq;
    struct deferred_free *deferred_head, *deferred_tail;
    uint32_t num_deferred;
    uint64_t num_preemptions;
    uint64_t check_epoch;
    struct sched_step **outstanding; /* FIFO of scheduled steps awaiting output */
    size_t num_outstanding, cap_outstanding;
    struct sched_step *spare_steps[4];
    size_t num_spare_steps;
    struct sched_violation violation;
    bool has_violation;
    struct sched_offload_status offload_status;
    enum sched_waiting_stop waiting_stop; /* the last schedule()'s (sched_last_waiting_stop) */
    const struct sched_request *waiting_stop_head;
    struct sched_offload_counters offload_counters;
};

void sched_config_default(struct sched_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->block_size = 16;
    cfg->num_blocks = 10000;
    cfg->max_num_seqs = 256;
    cfg->max_num_batched_tokens = 8192;
    cfg->policy = SCHED_POLICY_FCFS;
    cfg->enable_chunked_prefill = true;
    cfg->enable_prefix_caching = true;
    cfg->scheduler_reserve_full_isl = true;
    cfg->preempted_victim_guard = true;
    cfg->vllm_contract = SCHED_CONTRACT_LATEST;
}

const char *sched_status_name(enum sched_status status)
{
    switch (status) {
    case SCHED_WAITING: return "WAITING";
    case SCHED_WAITING_FOR_REMOTE_KVS: return "WAITING_FOR_REMOTE_KVS";
    case SCHED_RUNNING: return "RUNNING";
    case SCHED_PREEMPTED: return "PREEMPTED";
    case SCHED_FINISHED_STOPPED: return "FINISHED_STOPPED";
    case SCHED_FINISHED_LENGTH_CAPPED: return "FINISHED_LENGTH_CAPPED";
    case SCHED_FINISHED_ABORTED: return "FINISHED_ABORTED";
    }
    return "?";
}

int sched_status_parse(const char *name)
{
    for (int st = SCHED_WAITING; st <= SCHED_FINISHED_ABORTED; st++)
        if (strcmp(name, sched_status_name((enum sched_status)st)) == 0)
            return st;
    return -EINVAL;
}

const char *sched_finish_reason(enum sched_status status)
{
    switch (status) {
    case SCHED_FINISHED_STOPPED: return "stop";
    case SCHED_FINISHED_LENGTH_CAPPED: return "length";
    case SCHED_FINISHED_ABORTED: return "abort";
    default: return NULL;
    }
}

const char *sched_transition_name(enum sched_transition t)
{
    switch (t) {
    case SCHED_T_ADDED: return "added";
    case SCHED_T_ADMITTED: return "admitted";
    case SCHED_T_PARKED: return "parked_async_load";
    case SCHED_T_PROMOTED: return "promoted";
    case SCHED_T_ALLOCATED: return "allocated";
    case SCHED_T_PREEMPTED: return "preempted";
    case SCHED_T_FINISHED: return "finished";
    case SCHED_T_FREE_DELAYED: return "free_delayed";
    }
    return "?";
}

int sched_create(const struct sched_config *cfg, struct sched **out)
{
    *out = NULL;
    struct sched_config c = *cfg;
    if (c.max_model_len == 0)
        c.max_model_len = c.max_num_batched_tokens;
    if (c.max_num_seqs == 0 || c.max_num_batched_tokens == 0 || c.block_size == 0 ||
        (!c.enable_chunked_prefill && c.max_num_batched_tokens < c.max_model_len) ||
        c.vllm_contract < SCHED_CONTRACT_MIN || c.vllm_contract > SCHED_CONTRACT_LATEST ||
        c.max_num_active_seqs > c.max_num_seqs ||
        ((c.max_num_active_seqs || c.max_num_queued_reqs) && c.vllm_contract < 2))
        return -EINVAL;
    struct kvpool_config pc;
    kvpool_config_default(&pc);
    pc.num_blocks = c.num_blocks;
    pc.block_size = c.block_size;
    pc.max_model_len = c.max_model_len;
    pc.watermark = c.watermark;
    pc.enable_prefix_caching = c.enable_prefix_caching;
    pc.enable_kv_events = c.enable_kv_events;
    struct sched *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cfg = c;
    int rc = kvpool_create(&pc, &s->pool);
    if (rc) {
        free(s);
        return rc;
    }
    s->waiting.policy = s->skipped.policy = c.policy;
    s->waiting.tag = SCHED_Q_WAITING;
    s->skipped.tag = SCHED_Q_SKIPPED;
    *out = s;
    return 0;
}

static void free_step(struct sched_step *st)
{
    if (!st)
        return;
    free(st->scheduled);
    free(st->new_reqs);
    free(st->resumed);
    free(st->preempted);
    free(st->parked);
    free(st);
}

static void request_free(struct sched *s, struct sched_request *r)
{
    if (r->kv.num_blocks)
        kvpool_free(s->pool, &r->kv);
    kvpool_seq_fini(s->pool, &r->kv);
    free(r->output);
    free(r->stop_token_ids);
    free(r);
}

void sched_destroy(struct sched *s)
{
    if (!s)
        return;
    while (s->live) {
        struct sched_request *r = s->live;
        s->live = r->next_live;
        request_free(s, r);
    }
    while (s->pins)
        sched_release_pin(s, s->pins);
    while (s->deferred_head) {
        struct deferred_free *d = s->deferred_head;
        s->deferred_head = d->next;
        kvpool_free(s->pool, &d->kv);
        kvpool_seq_fini(s->pool, &d->kv);
        free(d);
    }
    for (size_t i = 0; i < s->num_outstanding; i++)
        free_step(s->outstanding[i]);
    for (size_t i = 0; i < s->num_spare_steps; i++)
        free_step(s->spare_steps[i]);
    free(s->outstanding);
    free(s->running);
    free(s->waiting.a);
    free(s->skipped.a);
    free(s->tmp_skipped);
    free(s->pending_preempted);
    free(s->last_finished);
    free(s->last_pinned);
    kvpool_destroy(s->pool);
    free(s);
}

const struct sched_config *sched_get_config(const struct sched *s) { return &s->cfg; }
struct kvpool *sched_pool(struct sched *s) { return s->pool; }

/* Reserves room for n live requests in every per-request array. */
static int reserve_requests(struct sched *s, size_t n)
{
    if (n <= s->cap_reqs)
        return 0;
    size_t nc = s->cap_reqs ? s->cap_reqs * 2 : 64;
    while (nc < n)
        nc *= 2;
    struct sched_request ***arrays[] = {&s->running, &s->tmp_skipped, &s->pending_preempted,
                                        &s->last_finished};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        struct sched_request **na = realloc(*arrays[i], nc * sizeof *na);
        if (!na)
            return -ENOMEM;
        *arrays[i] = na;
    }
    struct sched_pin **np = realloc(s->last_pinned, nc * sizeof *np);
    if (!np)
        return -ENOMEM;
    s->last_pinned = np;
    if (sched__rq_reserve(&s->waiting, nc) || sched__rq_reserve(&s->skipped, nc))
        return -ENOMEM;
    s->cap_reqs = nc;
    s->cap_running = nc;
    return 0;
}

/* Whether p's given prompt hashes are the ones its runs have. Returns 0, -EINVAL or -ENOMEM. */
static int check_prompt_hashes(struct sched *s, const struct sched_request_params *p)
{
    kvpool_hash *own = malloc(p->num_prompt_hashes * sizeof *own);
    if (!own)
        return -ENOMEM;
    const char *salt = p->cache_salt;
    int64_t n = kvpool_hash_prompt(s->cfg.block_size, salt, salt ? strlen(salt) : 0, p->prompt_runs,
                                   p->num_prompt_runs, own, p->num_prompt_hashes);
    int rc = n < 0 ? (int)n : 0;
    if (rc == 0 && (n != p->num_prompt_hashes ||
                    memcmp(own, p->prompt_hashes, p->num_prompt_hashes * sizeof *own) != 0))
        rc = -EINVAL;
    free(own);
    return rc;
}

int sched_add(struct sched *s, const struct sched_request_params *p, struct sched_request **out)
{
    *out = NULL;
    uint64_t run_tokens = 0;
    for (uint32_t i = 0; !p->prompt && i < p->num_prompt_runs; i++)
        run_tokens += p->prompt_runs[i].count;
    if (p->num_prompt_tokens == 0 || (!p->prompt && run_tokens != p->num_prompt_tokens) ||
        p->max_tokens == 0 || p->min_tokens > p->max_tokens ||
        (p->num_stop_token_ids && !p->stop_token_ids))
        return -EINVAL;
    /* min_tokens suppresses even the length cap: a request that cannot reach min_tokens within
     * max_model_len would never stop (vLLM's frontend refuses such requests). */
    if ((uint64_t)p->num_prompt_tokens + p->min_tokens > s->cfg.max_model_len)
        return -EINVAL;
    int rc = reserve_requests(s, s->num_live + 1);
    if (rc)
        return rc;
    struct sched_request *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->id = p->id;
    r->status = SCHED_WAITING;
    r->num_prompt_tokens = p->num_prompt_tokens;
    r->max_tokens = p->max_tokens;
    r->min_tokens = p->min_tokens;
    r->priority = p->priority;
    r->arrival = p->arrival;
    r->add_seq = s->add_seq++;
    r->eos_token_id = p->eos_token_id;
    r->ignore_eos = p->ignore_eos;
    r->num_cached_tokens = -1;
    r->stop_reason = -1;
    r->external_tokens = p->external_tokens;
    r->external_async = p->external_async;
    r->kv_producer = p->kv_producer;
    r->external_once = p->external_once;
    r->last_transition = SCHED_T_ADDED;
    r->last_transition_step = s->step_index;
    if (p->num_stop_token_ids) {
        r->stop_token_ids = malloc(p->num_stop_token_ids * sizeof *r->stop_token_ids);
        if (!r->stop_token_ids) {
            free(r);
            return -ENOMEM;
        }
        memcpy(r->stop_token_ids, p->stop_token_ids,
               p->num_stop_token_ids * sizeof *r->stop_token_ids);
        r->num_stop_token_ids = p->num_stop_token_ids;
    }
    const char *salt = p->cache_salt;
    rc = kvpool_seq_init(s->pool, &r->kv, p->id, salt, salt ? strlen(salt) : 0);
    if (rc == 0) {
        r->kv.skip_reading_prefix_cache = p->prompt_logprobs;
        if (p->prompt)
            rc = kvpool_seq_append_tokens(s->pool, &r->kv, p->prompt, p->num_prompt_tokens);
        else
            rc = kvpool_seq_append_runs(s->pool, &r->kv, p->prompt_runs, p->num_prompt_runs,
                                        p->prompt_hashes, p->num_prompt_hashes);
        if (rc == 0 && !p->prompt && p->num_prompt_hashes && s->cfg.check_invariants)
            rc = check_prompt_hashes(s, p);
    }
    if (rc) {
        kvpool_seq_fini(s->pool, &r->kv);
        free(r->stop_token_ids);
        free(r);
        return rc;
    }
    r->next_live = s->live;
    if (s->live)
        s->live->prev_live = r;
    s->live = r;
    s->num_live++;
    s->num_unfinished++;
    sched__rq_push(&s->waiting, r, false);
    *out = r;
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static void transition(struct sched *s, struct sched_request *r, enum sched_transition t)
{
    r->last_transition = t;
    r->last_transition_step = s->step_index;
}

static void inflight_add(struct sched *s, struct sched_request *r)
{
    if (r->in_flight_prefill)
        return;
    r->in_flight_prefill = true;
    r->prev_inflight = NULL;
    r->next_inflight = s->inflight;
    if (s->inflight)
        s->inflight->prev_inflight = r;
    s->inflight = r;
}

static void inflight_remove(struct sched *s, struct sched_request *r)
{
    if (!r->in_flight_prefill)
        return;
    if (r->prev_inflight)
        r->prev_inflight->next_inflight = r->next_inflight;
    else
        s->inflight = r->next_inflight;
    if (r->next_inflight)
        r->next_inflight->prev_inflight = r->prev_inflight;
    r->next_inflight = r->prev_inflight = NULL;
    r->in_flight_prefill = false;
}

/* #44560: blocks the in-flight prefills still need to hold their full sequences. */
static uint64_t inflight_reserved_blocks(const struct sched *s)
{
    uint64_t sum = 0, bs = s->cfg.block_size;
    for (const struct sched_request *r = s->inflight; r; r = r->next_inflight) {
        uint64_t full = min_u64(sched_request_num_tokens(r), s->cfg.max_model_len);
        uint64_t need = (full + bs - 1) / bs;
        if (need > r->kv.num_blocks)
            sum += need - r->kv.num_blocks;
    }
    return sum;
}

static void running_remove_at(struct sched *s, size_t i)
{
    s->running[i]->queue = SCHED_Q_NONE;
    memmove(s->running + i, s->running + i + 1, (s->num_running - i - 1) * sizeof *s->running);
    s->num_running--;
}

static size_t running_index(const struct sched *s, const struct sched_request *r)
{
    for (size_t i = 0; i < s->num_running; i++)
        if (s->running[i] == r)
            return i;
    return SIZE_MAX;
}

static void running_append(struct sched *s, struct sched_request *r)
{
    r->queue = SCHED_Q_RUNNING;
    s->running[s->num_running++] = r;
}

static int deferred_push(struct sched *s, struct sched_request *r)
{
    struct deferred_free *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    int rc = kvpool_seq_init(s->pool, &d->kv, r->id, NULL, 0);
    if (rc == 0) {
        d->kv.owner = KVPOOL_OWNER_DEFERRED_FREE;
        rc = kvpool_seq_move_blocks(s->pool, &d->kv, &r->kv);
    }
    if (rc) {
        kvpool_seq_fini(s->pool, &d->kv);
        free(d);
        return rc;
    }
    d->fence = s->sched_step_seq; /* the newest scheduled step, not the request's own (§11) */
    if (s->deferred_tail)
        s->deferred_tail->next = d;
    else
        s->deferred_head = d;
    s->deferred_tail = d;
    s->num_deferred++;
    return 0;
}

/* §11 _free_request_blocks: now, or after the in-flight steps that write the request. */
static int free_request_blocks(struct sched *s, struct sched_request *r)
{
    if (r->kv.num_blocks == 0)
        return 0;
    if (s->cfg.defer_block_free && r->last_sched_seq > s->processed_step_seq)
        return deferred_push(s, r);
    kvpool_free(s->pool, &r->kv);
    return 0;
}

static void drain_deferred(struct sched *s)
{
    while (s->deferred_head && s->deferred_head->fence <= s->processed_step_seq) {
        struct deferred_free *d = s->deferred_head;
        s->deferred_head = d->next;
        if (!s->deferred_head)
            s->deferred_tail = NULL;
        kvpool_free(s->pool, &d->kv); /* tail first */
        kvpool_seq_fini(s->pool, &d->kv);
        free(d);
        s->num_deferred--;
    }
}

/* §6: free, reset, back to the head of the waiting queue. Caller removed it from running.
 * Contract 2 (#48245): the output of its steps still in flight becomes stale, dropped when
 * drop_stale (#50297: the engine must deliver KV) or when it already was and some is left. */
static int preempt(struct sched *s, struct sched_request *r, bool drop_stale)
{
    if (s->cfg.vllm_contract >= 2) {
        r->drop_stale_output =
            drop_stale || (r->drop_stale_output && r->num_stale_output_tokens > 0);
        r->num_stale_output_tokens = r->num_in_flight_tokens;
    }
    int rc = free_request_blocks(s, r);
    inflight_remove(s, r);
    r->status = SCHED_PREEMPTED;
    r->num_computed_tokens = 0;
    r->num_output_placeholders = 0;
    r->num_preemptions++;
    s->num_preemptions++;
    sched__rq_push(&s->waiting, r, true);
    s->pending_preempted[s->num_pending_preempted++] = r;
    transition(s, r, SCHED_T_PREEMPTED);
    return rc;
}

/*
 * A disaggregated prefill that finished normally keeps its blocks for the remote decode
 * (vLLM's NixlConnector request_finished: delay_free_blocks when the request holds blocks and
 * finished stopped or length capped; an abort frees at once). The pin takes them over, so the
 * request itself holds none. Returns 0 or -ENOMEM (nothing moved: the caller frees instead).
 */
static int pin_blocks(struct sched *s, struct sched_request *r)
{
    struct sched_pin *pin = calloc(1, sizeof *pin);
    if (!pin)
        return -ENOMEM;
    int rc = kvpool_seq_init(s->pool, &pin->kv, r->id, NULL, 0);
    if (rc == 0) {
        pin->kv.owner = KVPOOL_OWNER_HANDOFF_SOURCE;
        rc = kvpool_seq_move_blocks(s->pool, &pin->kv, &r->kv);
    }
    if (rc) {
        kvpool_seq_fini(s->pool, &pin->kv);
        free(pin);
        return rc;
    }
    pin->id = r->id;
    pin->num_tokens = r->num_computed_tokens;
    pin->next = s->pins;
    if (s->pins)
        s->pins->prev = pin;
    s->pins = pin;
    s->num_pins++;
    s->last_pinned[s->num_last_pinned++] = pin;
    return 0;
}

/* vLLM's request_finished delays the free only for a normal finish with at least one full
 * computed block: a prompt shorter than a block is freed at once and nothing is transferred. */
static bool pins_at_finish(const struct sched *s, const struct sched_request *r,
                           enum sched_status st)
{
    return r->kv_producer && r->num_computed_tokens >= s->cfg.block_size &&
           (st == SCHED_FINISHED_STOPPED || st == SCHED_FINISHED_LENGTH_CAPPED);
}

/* Marks a request finished and releases (or parks, or pins) its blocks. */
static int finish(struct sched *s, struct sched_request *r, enum sched_status st)
{
    int rc = 0;
    if (r->queue == SCHED_Q_RUNNING)
        running_remove_at(s, running_index(s, r));
    else if (r->queue == SCHED_Q_WAITING)
        sched__rq_remove(&s->waiting, r);
    else if (r->queue == SCHED_Q_SKIPPED)
        sched__rq_remove(&s->skipped, r);
    inflight_remove(s, r);
    if (r->status == SCHED_WAITING_FOR_REMOTE_KVS && !r->recv_finished) {
        r->free_delayed = true; /* the load still writes these blocks (§5.1) */
        transition(s, r, SCHED_T_FREE_DELAYED);
    } else {
        rc = pins_at_finish(s, r, st) ? pin_blocks(s, r) : free_request_blocks(s, r);
        transition(s, r, SCHED_T_FINISHED);
    }
    r->status = st;
    r->kv.owner = KVPOOL_OWNER_REQUEST;
    s->num_unfinished--;
    s->last_finished[s->num_last_finished++] = r;
    return rc;
}

/* ---- schedule() (§4) ----------------------------------------------------------------------- */

static int step_reserve(struct sched_step *st, size_t n)
{
    struct {
        void **arr;
        uint32_t *cap;
        size_t elem;
    } a[] = {
        {(void **)&st->scheduled, &st->cap_scheduled, sizeof *st->scheduled},
        {(void **)&st->new_reqs, &st->cap_new, sizeof *st->new_reqs},
        {(void **)&st->resumed, &st->cap_resumed, sizeof *st->resumed},
        {(void **)&st->preempted, &st->cap_preempted, sizeof *st->preempted},
        {(void **)&st->parked, &st->cap_parked, sizeof *st->parked},
    };
    if (n > UINT32_MAX)
        return -EOVERFLOW;
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        if (*a[i].cap >= n)
            continue;
        void *na = realloc(*a[i].arr, n * a[i].elem);
        if (!na)
            return -ENOMEM;
        *a[i].arr = na;
        *a[i].cap = (uint32_t)n;
    }
    return 0;
}

static struct sched_step *step_acquire(struct sched *s, int *err)
{
    if (s->num_outstanding == s->cap_outstanding) {
        size_t nc = s->cap_outstanding ? s->cap_outstanding * 2 : 4;
        struct sched_step **na = realloc(s->outstanding, nc * sizeof *na);
        if (!na) {
            *err = -ENOMEM;
            return NULL;
        }
        s->outstanding = na;
        s->cap_outstanding = nc;
    }
    struct sched_step *st =
        s->num_spare_steps ? s->spare_steps[--s->num_spare_steps] : calloc(1, sizeof *st);
    if (!st || step_reserve(st, s->num_live + 1) != 0) {
        if (st)
            s->spare_steps[s->num_spare_steps++] = st;
        *err = -ENOMEM;
        return NULL;
    }
    st->num_scheduled = st->num_new = st->num_resumed = st->num_preempted = st->num_parked = 0;
    st->total_tokens = 0;
    return st;
}

static void step_add(struct sched_step *st, struct sched_request *r, uint64_t n)
{
    st->scheduled[st->num_scheduled].req = r;
    st->scheduled[st->num_scheduled].num_tokens = (uint32_t)n;
    st->scheduled[st->num_scheduled].samples = false;
    st->num_scheduled++;
    st->total_tokens += n;
}

/* Removes r from the step if it was scheduled; returns the tokens given back. */
static uint64_t step_rollback(struct sched_step *st, const struct sched_request *r)
{
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        if (st->scheduled[i].req != r)
            continue;
        uint64_t n = st->scheduled[i].num_tokens;
        memmove(st->scheduled + i, st->scheduled + i + 1,
                (st->num_scheduled - i - 1) * sizeof *st->scheduled);
        st->num_scheduled--;
        st->total_tokens -= n;
        return n;
    }
    return 0;
}

static struct sched_request *pick_victim(const struct sched *s)
{
    if (s->cfg.policy == SCHED_POLICY_FCFS)
        return s->running[s->num_running - 1];
    struct sched_request *v = s->running[0]; /* max (priority, arrival): the first maximum */
    for (size_t i = 1; i < s->num_running; i++) {
        const struct sched_request *r = s->running[i];
        if (r->priority > v->priority || (r->priority == v->priority && r->arrival > v->arrival))
            v = s->running[i];
    }
    return v;
}

static int set_violation_rc(struct sched *s)
{
    return sched_check(s, &s->violation) == 0 ? 0 : (s->has_violation = true, -EUCLEAN);
}

static bool relieve_moved_capacity(struct sched *s, const struct kvpool_plan *plan);

/* §4.2. Returns 0 or a negative errno; *preempted_any tells whether anyone was preempted. */
/* kvpool_prepare of n more tokens for running request r at nc computed (no hits, not an
 * admission). Returns its outcome or a negative errno. */
static int prepare_running(struct sched *s, struct sched_request *r, uint64_t nc, uint64_t n,
                           struct kvpool_plan *plan)
{
    struct kvpool_alloc_args args = {
        .num_computed_tokens = nc,
        .num_new_tokens = n,
        .has_scheduled_reqs = true,
        .is_admission = false,
    };
    return kvpool_prepare(s->pool, &r->kv, &args, plan);
}

/* Commits r's READY plan; a block taken is r's ALLOCATED transition. Returns 0 or an errno. */
static int commit_running(struct sched *s, struct sched_request *r, struct kvpool_plan *plan)
{
    uint32_t before = r->kv.num_blocks;
    int rc = kvpool_commit(s->pool, &r->kv, plan);
    if (rc == 0 && r->kv.num_blocks != before)
        transition(s, r, SCHED_T_ALLOCATED);
    return rc;
}

static int schedule_running(struct sched *s, struct sched_step *st, uint64_t *budget,
                            bool *preempted_any)
{
    const struct sched_config *c = &s->cfg;
    size_t i = 0;
    while (i<s->num_running && * budget> 0) {
        struct sched_request *r = s->running[i];
        uint64_t nc = r->num_computed_tokens;
        uint64_t ph = r->num_output_placeholders;
        if (c->async_scheduling && ph > 0 &&
            nc + 2 >= ph + r->num_prompt_tokens + (uint64_t)r->max_tokens) {
            i++; /* its last token is already in flight */
            continue;
        }
        uint64_t want = sched_request_num_tokens(r) + ph;
        uint64_t n = want > nc ? want - nc : 0;
        if (s->step_threshold && n > s->step_threshold)
            n = s->step_threshold;
        n = min_u64(n, *budget);
        n = min_u64(n, c->max_model_len > nc + 1 ? c->max_model_len - nc - 1 : 0);
        if (n == 0) {
            i++; /* nothing schedulable now (e.g. its previous step is in flight) */
            continue;
        }
        bool scheduled = false, retried = false;
        for (;;) {
            /* Most steps of a running request need no block: the same outcome, no plan. */
            if (kvpool_extend_in_place(s->pool, &r->kv, nc, n)) {
                scheduled = true;
                break;
            }
            struct kvpool_plan plan;
            int rc = prepare_running(s, r, nc, n, &plan);
            if (rc < 0)
                return rc;
            if (rc == KVPOOL_BLOCKED_ON_OFFLOAD) {
                s->offload_counters.blocked++;
                if (!retried && relieve_moved_capacity(s, &plan)) {
                    retried = true; /* RETRY_NOW: once */
                    continue;
                }
                /* Capacity is coming back when a copy ends: wait for it, preempt nobody. */
                s->offload_status = (struct sched_offload_status){r, plan.num_blocks_short, true};
                break;
            }
            if (rc == KVPOOL_READY) {
                if ((rc = commit_running(s, r, &plan)) != 0)
                    return rc;
                scheduled = true;
                break;
            }
            struct sched_request *victim = pick_victim(s);
            /* #49675: preempting a victim whose free is deferred frees nothing this step. */
            if (c->defer_block_free && c->preempted_victim_guard &&
                victim->last_sched_seq > s->processed_step_seq)
                break;
            *budget += step_rollback(st, victim);
            size_t vi = running_index(s, victim);
            running_remove_at(s, vi);
            if (vi < i)
                i--; /* #49206: the cursor follows the list */
            rc = preempt(s, victim, c->requires_kv_delivery);
            *preempted_any = true;
            if (rc)
                return rc;
            if (victim == r)
                break;
        }
        if (!scheduled)
            break; /* later running requests are not scheduled this step */
        step_add(st, r, n);
        *budget -= n;
        i++;
    }
    return 0;
}

/* PRIORITY: the better head of the two queues; FCFS: skipped first. */
static const struct rq *pick_queue_const(const struct sched *s)
{
    struct sched_request *w = rq_peek(&s->waiting), *k = rq_peek(&s->skipped);
    if (!k)
        return &s->waiting;
    if (!w || s->cfg.policy == SCHED_POLICY_FCFS)
        return &s->skipped;
    return prio_less(w, k) ? &s->waiting : &s->skipped;
}

static struct rq *pick_queue(struct sched *s) { return (struct rq *)pick_queue_const(s); }

struct sched_request *sched_waiting_head(const struct sched *s)
{
    return rq_peek(pick_queue_const(s));
}

/* A finished async load becomes an ordinary waiting request with computed tokens (§10). A failed
 * onboarding gives its blocks back (they were never cached) and the request starts its admission
 * again, recomputing what it could not load. */
static void promote(struct sched *s, struct sched_request *r)
{
    if (r->load_failed) {
        kvpool_free(s->pool, &r->kv);
        inflight_remove(s, r);
        r->num_computed_tokens = 0;
        if (r->offload_load)
            r->onboard_disabled = true;
        else
            r->external_tokens = 0; /* the connector's KV is gone: compute the prompt here */
    } else {
        if (r->offload_load) {
            uint64_t t = (uint64_t)r->onboard_blocks * s->cfg.block_size;
            r->onboarded_tokens += t;
            s->offload_counters.onboarded_tokens += t;
        }
        kvpool_cache_blocks(s->pool, &r->kv, r->num_computed_tokens);
        if (r->num_computed_tokens >= sched_request_num_tokens(r))
            r->num_computed_tokens = sched_request_num_tokens(r) - 1; /* recompute the last */
    }
    r->status = r->num_preemptions ? SCHED_PREEMPTED : SCHED_WAITING;
    r->recv_finished = false;
    r->offload_load = false;
    r->load_failed = false;
    r->onboard_blocks = 0;
    r->kv.owner = KVPOOL_OWNER_REQUEST;
    transition(s, r, SCHED_T_PROMOTED);
}

int sched_load_finished(struct sched *s, struct sched_request *r, bool ok)
{
    if (!r->offload_load && !r->external_async)
        return -EINVAL;
    if (r->status == SCHED_WAITING_FOR_REMOTE_KVS && !r->recv_finished) {
        r->recv_finished = true;
        r->load_failed = !ok;
        if (r->offload_load)
            s->offload_counters.load_failures += !ok;
        return 0;
    }
    if (r->free_delayed) { /* finished while loading: the blocks were waiting for this */
        r->free_delayed = false;
        r->offload_load = false;
        kvpool_free(s->pool, &r->kv);
        transition(s, r, SCHED_T_FINISHED);
        return 0;
    }
    return -EINVAL;
}

void sched_offload_status(const struct sched *s, struct sched_offload_status *out)
{
    *out = s->offload_status;
}

void sched_offload_counters(const struct sched *s, struct sched_offload_counters *out)
{
    *out = s->offload_counters;
}

/*
 * An allocation came back BLOCKED_ON_OFFLOAD: ask the tiers to release what needs no copy any
 * more. True when that moved the pool's capacity (the RETRY_NOW evidence); the caller then
 * prepares exactly once more, never again for the same attempt.
 */
static bool relieve_moved_capacity(struct sched *s, const struct kvpool_plan *plan)
{
    if (!s->cfg.offload || !s->cfg.offload->relieve)
        return false;
    s->cfg.offload->relieve(s->cfg.offload_ctx, plan->num_blocks_short);
    if (kvpool_capacity_generation(s->pool) == plan->capacity_generation)
        return false;
    s->offload_counters.retry_now++;
    return true;
}

/*
 * THE OLD BUG (issue #6's reproduction, cfg.legacy_partial_alloc): a non-transactional
 * allocator that stopped half way. The blocked head keeps the free blocks it got, the shortfall
 * is treated as capacity exhaustion, and the last running request is preempted and put back at
 * the front of the waiting queue, ahead of the head. Returns 0 or a negative errno.
 */
static int legacy_partial_alloc(struct sched *s, struct sched_step *st, uint64_t *budget,
                                struct sched_request *r, const struct kvpool_alloc_args *args)
{
    /* The relief may have changed the pool (a hold released on a block still referenced moves
     * no capacity): prepare again so the partial commit is not refused as stale. */
    struct kvpool_alloc_args a = *args;
    struct kvpool_hits hits;
    if (a.hits && a.hits->num_blocks) { /* hits computed before the relief are stale too */
        kvpool_lookup(s->pool, &r->kv, &hits, NULL, 0);
        a.hits = &hits;
    }
    struct kvpool_plan plan;
    int rc = kvpool_prepare(s->pool, &r->kv, &a, &plan);
    if (rc != KVPOOL_BLOCKED_ON_OFFLOAD)
        return rc < 0 ? rc : 0;
    rc = kvpool_commit_partial_legacy(s->pool, &r->kv, &plan);
    if (rc < 0)
        return rc;
    if (s->num_running == 0)
        return 0;
    struct sched_request *victim = pick_victim(s);
    *budget += step_rollback(st, victim);
    running_remove_at(s, running_index(s, victim));
    return preempt(s, victim, s->cfg.requires_kv_delivery);
}

static inline void stop_at(struct sched *s, enum sched_waiting_stop stop,
                           const struct sched_request *head)
{
    s->waiting_stop = stop;
    s->waiting_stop_head = head;
}

const char *sched_waiting_stop_name(enum sched_waiting_stop stop)
{
    switch (stop) {
    case SCHED_STOP_DRAINED: return "drained";
    case SCHED_STOP_NOT_RUN: return "not_run";
    case SCHED_STOP_BUDGET: return "budget";
    case SCHED_STOP_MAX_SEQS: return "max_seqs";
    case SCHED_STOP_UNCHUNKED: return "unchunked";
    case SCHED_STOP_NO_TOKENS: return "no_tokens";
    case SCHED_STOP_ALLOC_FREE: return "alloc_free";
    case SCHED_STOP_ALLOC_WATERMARK: return "alloc_watermark";
    case SCHED_STOP_ALLOC_RESERVED: return "alloc_reserved";
    case SCHED_STOP_BLOCKED_ON_OFFLOAD: return "blocked_on_offload";
    case SCHED_STOP_ERROR: return "error";
    }
    return "?";
}

enum sched_waiting_stop sched_last_waiting_stop(const struct sched *s,
                                                const struct sched_request **head)
{
    if (head)
        *head = s->waiting_stop_head;
    return s->waiting_stop;
}

/* §4.3 */
static int schedule_waiting(struct sched *s, struct sched_step *st, uint64_t *budget)
{
    const struct sched_config *c = &s->cfg;
    size_t nskipped = 0;
    int rc = 0;
    bool retried = false;
    stop_at(s, SCHED_STOP_DRAINED, NULL);
    while ((s->waiting.len || s->skipped.len) && *budget > 0) {
        if (s->num_running >= c->max_num_seqs ||
            (c->max_num_active_seqs && s->num_running >= c->max_num_active_seqs)) {
            s->waiting_stop = SCHED_STOP_MAX_SEQS;
            break; /* #56758: the active cap stops admissions, never preempts */
        }
        struct rq *q = pick_queue(s);
        struct sched_request *r = rq_peek(q);
        if (r->status == SCHED_WAITING_FOR_REMOTE_KVS) {
            if (!r->recv_finished) {
                sched__rq_pop(q);
                s->tmp_skipped[nskipped++] = r;
                continue;
            }
            promote(s, r);
        }
        /* #48245 (contract 2): a preempted request whose stale output will still be delivered
         * waits for it (skipped, not a break: the requests behind it may go). */
        if (c->vllm_contract >= 2 && r->num_stale_output_tokens > 0 && !r->drop_stale_output) {
            sched__rq_pop(q);
            s->tmp_skipped[nskipped++] = r;
            continue;
        }
        struct kvpool_hits hits = {0};
        uint64_t external = 0;
        bool load_async = false, onboard = false;
        uint64_t nt = sched_request_num_tokens(r);
        /* A request holding blocks without computed tokens (the legacy partial allocation)
         * cannot take hits: they would have to come first in its table. */
        if (r->num_computed_tokens == 0 && r->kv.num_blocks == 0) {
            kvpool_lookup(s->pool, &r->kv, &hits, NULL, 0);
            if (r->external_tokens) {
                /* The connector model: a synchronous load leaves the last token to compute
                 * (as vLLM's connectors do); an async full-prompt load is trimmed to
                 * num_tokens - 1 at promotion instead (§10). */
                uint64_t room = nt - hits.num_tokens - (r->external_async ? 0 : 1);
                external = min_u64(r->external_tokens, room);
                load_async = r->external_async && external > 0;
            } else if (c->offload && !r->onboard_disabled) {
                /* Onboarding: blocks after the G1 hits that G2/G3 hold load asynchronously
                 * into a destination reservation instead of being recomputed. */
                /* Like the G1 lookup, never the block of the last prompt token: it is always
                 * recomputed, so a promoted load never has to give a computed token back. */
                uint64_t blocks = c->offload->lookup(c->offload_ctx, r, hits.num_blocks);
                external = min_u64(blocks * c->block_size, nt - 1 - hits.num_tokens);
                external -= external % c->block_size;
                load_async = onboard = external > 0;
            }
        }
        uint64_t computed = r->num_computed_tokens + hits.num_tokens + external;
        uint64_t n = 0;
        if (!load_async) {
            n = nt > computed ? nt - computed : 0;
            if (s->step_threshold && n > s->step_threshold)
                n = s->step_threshold;
            if (!c->enable_chunked_prefill && n > *budget) {
                stop_at(s, SCHED_STOP_UNCHUNKED, r);
                break; /* no skipping past a head that does not fit */
            }
            n = min_u64(n, *budget);
            if (n == 0) {
                stop_at(s, SCHED_STOP_NO_TOKENS, r);
                break;
            }
        }
        struct kvpool_alloc_args args = {
            .num_computed_tokens = r->num_computed_tokens,
            .num_new_tokens = n,
            .hits = &hits,
            .num_external_computed_tokens = external,
            .reserved_blocks = load_async ? inflight_reserved_blocks(s) : 0,
            .delay_cache_blocks = load_async,
            .full_sequence_must_fit = c->scheduler_reserve_full_isl,
            .has_scheduled_reqs = s->num_running > 0,
            .is_admission = true,
        };
        struct kvpool_plan plan;
        rc = kvpool_prepare(s->pool, &r->kv, &args, &plan);
        if (rc < 0) {
            stop_at(s, SCHED_STOP_ERROR, r);
            break;
        }
        if (rc == KVPOOL_BLOCKED_ON_OFFLOAD) {
            s->offload_counters.blocked++;
            if (!retried && relieve_moved_capacity(s, &plan)) {
                retried = true; /* RETRY_NOW: this head, once, from its lookup */
                continue;
            }
            s->offload_status = (struct sched_offload_status){r, plan.num_blocks_short, false};
            if (c->legacy_partial_alloc) {
                stop_at(s, SCHED_STOP_BLOCKED_ON_OFFLOAD, r);
                rc = legacy_partial_alloc(s, st, budget, r, &args);
                break;
            }
        }
        retried = false;
        if (rc != KVPOOL_READY) {
            stop_at(s,
                    rc == KVPOOL_BLOCKED_ON_OFFLOAD        ? SCHED_STOP_BLOCKED_ON_OFFLOAD
                    : plan.limit == KVPOOL_LIMIT_RESERVED  ? SCHED_STOP_ALLOC_RESERVED
                    : plan.limit == KVPOOL_LIMIT_WATERMARK ? SCHED_STOP_ALLOC_WATERMARK
                                                           : SCHED_STOP_ALLOC_FREE,
                    r);
            rc = 0;
            break; /* the waiting phase never preempts; the head keeps its place */
        }
        rc = kvpool_commit(s->pool, &r->kv, &plan);
        if (rc) {
            stop_at(s, SCHED_STOP_ERROR, r);
            break;
        }
        if (r->external_once)
            r->external_tokens = 0; /* update_state_after_alloc: one transfer per request */
        if (r->num_cached_tokens < 0)
            r->num_cached_tokens = (int64_t)(hits.num_tokens + external);
        if (c->offload && r->num_computed_tokens == 0)
            s->offload_counters.g1_miss_blocks += r->kv.num_hashes - hits.num_blocks;
        sched__rq_pop(q);
        if (load_async) {
            r->status = SCHED_WAITING_FOR_REMOTE_KVS;
            r->num_computed_tokens = computed;
            r->loading_tokens = external;
            r->kv.owner = KVPOOL_OWNER_DEST_RESERVATION;
            inflight_add(s, r);
            s->tmp_skipped[nskipped++] = r;
            st->parked[st->num_parked++] = r;
            transition(s, r, SCHED_T_PARKED);
            if (onboard) {
                r->offload_load = true;
                r->onboard_blocks = (uint32_t)(external / c->block_size);
                s->offload_counters.loads++;
                if (c->offload->start_load(c->offload_ctx, r, hits.num_blocks, r->onboard_blocks) !=
                    0)
                    sched_load_finished(s, r, false);
            }
            continue;
        }
        if (r->status == SCHED_PREEMPTED)
            st->resumed[st->num_resumed++] = r;
        else
            st->new_reqs[st->num_new++] = r;
        r->status = SCHED_RUNNING;
        r->num_computed_tokens = computed;
        running_append(s, r);
        transition(s, r, SCHED_T_ADMITTED);
        step_add(st, r, n);
        *budget -= n;
        if (computed + n < nt)
            inflight_add(s, r);
    }
    if (s->waiting_stop == SCHED_STOP_DRAINED && *budget == 0 && (s->waiting.len || s->skipped.len))
        s->waiting_stop = SCHED_STOP_BUDGET;
    /* Skipped requests go back ahead of older skipped ones, keeping their order. */
    for (size_t k = nskipped; k > 0; k--)
        sched__rq_push(&s->skipped, s->tmp_skipped[k - 1], true);
    return rc;
}

struct sched_step *sched_schedule(struct sched *s, int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    *err = 0;
    struct sched_step *st = step_acquire(s, err);
    if (!st)
        return NULL;
    st->index = ++s->step_index;
    uint64_t budget = s->cfg.max_num_batched_tokens;
    bool preempted_any = false;
    /* #57951 (contract 2): the threshold, read once per schedule(), is off while running,
     * waiting and skipped hold at most one request between them: a lone prefill has nobody to
     * share the step with. */
    s->step_threshold = s->cfg.long_prefill_token_threshold;
    if (s->cfg.vllm_contract >= 2 && s->num_running + s->waiting.len + s->skipped.len <= 1)
        s->step_threshold = 0;
    memset(&s->offload_status, 0, sizeof s->offload_status);
    stop_at(s, SCHED_STOP_NOT_RUN, NULL);
    int rc = schedule_running(s, st, &budget, &preempted_any);
    /* A running request waiting for held capacity keeps it from new admissions too. */
    if (rc == 0 && !preempted_any && !s->offload_status.blocked)
        rc = schedule_waiting(s, st, &budget);
    /* _update_after_schedule */
    if (s->cfg.defer_block_free && st->total_tokens > 0)
        s->sched_step_seq++;
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        struct sched_scheduled *e = &st->scheduled[i];
        struct sched_request *r = e->req;
        r->num_computed_tokens += e->num_tokens;
        r->num_in_flight_tokens += e->num_tokens;
        if (s->cfg.defer_block_free)
            r->last_sched_seq = s->sched_step_seq;
        e->samples =
            r->num_computed_tokens >= sched_request_num_tokens(r) + r->num_output_placeholders;
        if (e->samples && s->cfg.async_scheduling)
            r->num_output_placeholders++;
        if (r->num_computed_tokens >= sched_request_num_tokens(r))
            inflight_remove(s, r);
    }
    if (s->num_pending_preempted)
        memcpy(st->preempted, s->pending_preempted,
               s->num_pending_preempted * sizeof *st->preempted);
    st->num_preempted = (uint32_t)s->num_pending_preempted;
    s->num_pending_preempted = 0;
    st->outstanding = true;
    s->outstanding[s->num_outstanding++] = st;
    if (rc == 0 && s->cfg.check_invariants)
        rc = set_violation_rc(s);
    if (rc == 0 && st->total_tokens > s->cfg.max_num_batched_tokens) {
        memset(&s->violation, 0, sizeof s->violation);
        snprintf(s->violation.rule, sizeof s->violation.rule, "scheduled_le_budget");
        s->violation.block = -1;
        s->violation.expected = s->cfg.max_num_batched_tokens;
        s->violation.found = (int64_t)st->total_tokens;
        s->has_violation = true;
        rc = -EUCLEAN;
    }
    if (rc) {
        *err = rc;
        return NULL;
    }
    return st;
}

/* ---- update_from_output() (§5) ------------------------------------------------------------- */

static bool contains(const kvpool_token *a, uint32_t n, kvpool_token t)
{
    for (uint32_t i = 0; i < n; i++)
        if (a[i] == t)
            return true;
    return false;
}

/* §5.4 check_stop after one appended token (vLLM sched/utils.py @ 018d5dc7: nothing, not even
 * the length cap, stops a request before min_tokens). Returns the finished status or RUNNING. */
static enum sched_status check_stop(const struct sched *s, struct sched_request *r)
{
    if (r->num_output < r->min_tokens)
        return SCHED_RUNNING;
    kvpool_token last = r->output[r->num_output - 1];
    if (!r->ignore_eos && r->eos_token_id >= 0 && (int64_t)last == r->eos_token_id)
        return SCHED_FINISHED_STOPPED;
    if (contains(r->stop_token_ids, r->num_stop_token_ids, last)) {
        r->stop_reason = last;
        return SCHED_FINISHED_STOPPED;
    }
    if (sched_request_num_tokens(r) >= s->cfg.max_model_len || r->num_output >= r->max_tokens)
        return SCHED_FINISHED_LENGTH_CAPPED;
    return SCHED_RUNNING;
}

/* The output array's first capacity: max_tokens when small, else 256 tokens (1 KiB), which most
 * outputs stay within, so that they are not copied four times on the way (16 -> 256). */
static uint32_t first_output_cap(const struct sched_request *r)
{
    uint64_t c = r->max_tokens;
    return c < 16 ? 16 : c > 256 ? 256 : (uint32_t)c;
}

static int append_output(struct sched *s, struct sched_request *r, kvpool_token t)
{
    if (r->num_output == r->cap_output) {
        uint32_t nc = r->cap_output ? r->cap_output * 2 : first_output_cap(r);
        kvpool_token *na = realloc(r->output, nc * sizeof *na);
        if (!na)
            return -ENOMEM;
        r->output = na;
        r->cap_output = nc;
    }
    r->output[r->num_output++] = t;
    return kvpool_seq_append_tokens(s->pool, &r->kv, &t, 1);
}

int sched_update(struct sched *s, struct sched_step *st, const struct sched_model_output *out)
{
    if (s->num_outstanding == 0 || s->outstanding[0] != st)
        return -EINVAL;
    memmove(s->outstanding, s->outstanding + 1, (s->num_outstanding - 1) * sizeof *s->outstanding);
    s->num_outstanding--;
    st->outstanding = false;
    s->num_last_finished = 0;
    s->num_last_pinned = 0;
    int rc = 0;
    if (s->cfg.defer_block_free && st->total_tokens > 0) {
        s->processed_step_seq++;
        drain_deferred(s);
    }
    bool v2 = s->cfg.vllm_contract >= 2;
    for (uint32_t i = 0; i < st->num_scheduled && rc == 0; i++) {
        struct sched_request *r = st->scheduled[i].req;
        uint64_t sn = st->scheduled[i].num_tokens;
        r->num_in_flight_tokens -= min_u64(sn, r->num_in_flight_tokens);
        bool stale = r->num_stale_output_tokens > 0; /* scheduled before its preemption */
        r->num_stale_output_tokens -= min_u64(sn, r->num_stale_output_tokens);
        if (sched_status_is_finished(r->status))
            continue; /* aborted meanwhile */
        if (v2 && stale && r->drop_stale_output)
            continue; /* #50297: no token, no stop check, no finish: it recomputes */
        uint32_t n = out && out->num_tokens ? out->num_tokens[i] : 0;
        const kvpool_token *toks = n ? out->tokens[i] : NULL;
        /* #48245: stale output has no placeholder any more (the preemption reset them); under
         * contract 1 it took one of the placeholders scheduled since. */
        if (s->cfg.async_scheduling && !(v2 && stale))
            r->num_output_placeholders -=
                n < r->num_output_placeholders ? n : r->num_output_placeholders;
        enum sched_status done = SCHED_RUNNING;
        for (uint32_t k = 0; k < n && done == SCHED_RUNNING && rc == 0; k++) {
            rc = append_output(s, r, toks[k]);
            if (rc == 0)
                done = check_stop(s, r);
        }
        if (rc)
            break;
        if (done != SCHED_RUNNING) {
            rc = finish(s, r, done);
        } else if (s->cfg.async_scheduling && r->status == SCHED_RUNNING &&
                   r->num_computed_tokens > r->num_output_placeholders) {
            kvpool_cache_blocks(s->pool, &r->kv,
                                r->num_computed_tokens - r->num_output_placeholders);
        }
    }
    for (uint32_t i = 0; out && i < out->num_finished_recving && rc == 0; i++) {
        struct sched_request *r = out->finished_recving[i];
        if (r->status == SCHED_WAITING_FOR_REMOTE_KVS) {
            r->recv_finished = true;
        } else if (r->free_delayed) {
            r->free_delayed = false;
            kvpool_free(s->pool, &r->kv);
            transition(s, r, SCHED_T_FINISHED);
        }
    }
    if (s->num_spare_steps < sizeof s->spare_steps / sizeof s->spare_steps[0])
        s->spare_steps[s->num_spare_steps++] = st;
    else
        free_step(st);
    if (rc == 0 && s->cfg.check_invariants)
        rc = set_violation_rc(s);
    return rc;
}

/* ---- the decode fast path (see sched.h) ------------------------------------------------------ */

/* The state a sched_stable_run was found in (sched_decode_steps compares it). */
static void stable_run_stamp(const struct sched *s, struct sched_stable_run *run)
{
    run->step_index = s->step_index;
    run->pool_generation = kvpool_generation(s->pool);
    run->num_running = (uint32_t)s->num_running;
    run->num_unfinished = (uint32_t)s->num_unfinished;
    run->num_waiting = (uint32_t)(s->waiting.len + s->skipped.len);
    run->num_outstanding = (uint32_t)s->num_outstanding;
}

static bool stable_run_current(const struct sched *s, const struct sched_stable_run *run)
{
    struct sched_stable_run now;
    stable_run_stamp(s, &now);
    return now.step_index == run->step_index && now.pool_generation == run->pool_generation &&
           now.num_running == run->num_running && now.num_unfinished == run->num_unfinished &&
           now.num_waiting == run->num_waiting && now.num_outstanding == run->num_outstanding;
}

static uint32_t stable_decode_steps(const struct sched *s, uint32_t min, uint32_t max,
                                    uint32_t *new_blocks);

uint32_t sched_stable_decode_steps(const struct sched *s, uint32_t min, uint32_t max,
                                   struct sched_stable_run *run)
{
    uint32_t taking = 0;
    uint32_t k = stable_decode_steps(s, min, max, run ? &taking : NULL);
    if (run) {
        stable_run_stamp(s, run);
        run->k = k;
        run->new_blocks = taking;
    }
    return k;
}

static uint32_t stable_decode_steps(const struct sched *s, uint32_t min, uint32_t max,
                                    uint32_t *new_blocks)
{
    if (new_blocks)
        *new_blocks = 0;
    const struct sched_config *c = &s->cfg;
    if (c->async_scheduling || c->check_invariants || s->num_outstanding ||
        s->num_pending_preempted || s->waiting.len || s->skipped.len || s->num_running == 0 ||
        s->num_running != s->num_unfinished || s->num_deferred || s->inflight ||
        c->max_num_batched_tokens < s->num_running) /* every one gets its token */
        return 0;
    uint64_t k = max;
    uint32_t taking = 0; /* requests whose first step takes a block */
    /* Back to front: the newest admissions, still prefilling, end most scans at once. */
    for (size_t i = s->num_running; i-- > 0;) {
        const struct sched_request *r = s->running[i];
        uint64_t nc = r->num_computed_tokens;
        if (r->status != SCHED_RUNNING || r->num_output == 0 || r->num_output_placeholders ||
            r->num_in_flight_tokens || r->num_stale_output_tokens ||
            sched_request_num_tokens(r) != nc + 1)
            return 0; /* not a plain decode (a one-token prompt's first step is a prefill) */
        /* Step j is scheduled one token while nc + j + 1 < max_model_len, and its token stops
         * the request by length when nc + j + 2 >= max_model_len or it is output max_tokens. */
        k = c->max_model_len > nc + 2 ? min_u64(k, c->max_model_len - nc - 2) : 0;
        k = r->max_tokens > r->num_output + 1 ? min_u64(k, r->max_tokens - r->num_output - 1) : 0;
        uint64_t kr = kvpool_decode_steps_in_place(s->pool, &r->kv, nc, k);
        if (kr == 0 && new_blocks &&
            (kr = kvpool_decode_steps_taking_block(s->pool, &r->kv, nc, k)) > 0)
            taking++;
        k = kr;
        if (k < min || k == 0)
            return 0; /* the rest cannot make it longer */
    }
    /* Each of those allocations is READY, with no preemption, while a block is free for it. */
    if (taking > kvpool_num_free_blocks(s->pool))
        return 0;
    if (new_blocks)
        *new_blocks = taking;
    return (uint32_t)k;
}

/* check_stop's token tests for the one token a step appends to r with `before` outputs. */
static bool token_stops(const struct sched_request *r, uint32_t before, kvpool_token t)
{
    if (before + 1 < r->min_tokens)
        return false;
    if (!r->ignore_eos && r->eos_token_id >= 0 && (int64_t)t == r->eos_token_id)
        return true;
    return contains(r->stop_token_ids, r->num_stop_token_ids, t);
}

int sched_decode_steps(struct sched *s, uint32_t k, const kvpool_token *tokens,
                       const struct sched_stable_run *run)
{
    if (k == 0)
        return 0;
    uint32_t taking;
    if (run && run->k >= k && stable_run_current(s, run))
        taking = run->new_blocks; /* the test's answer still holds: nothing changed since */
    else if (stable_decode_steps(s, k, k, &taking) < k)
        return -EINVAL;
    for (size_t i = 0; i < s->num_running; i++) {
        struct sched_request *r = s->running[i];
        const kvpool_token *t = tokens + i * k;
        bool may_stop = (!r->ignore_eos && r->eos_token_id >= 0) || r->num_stop_token_ids;
        for (uint32_t j = 0; may_stop && j < k; j++) /* no EOS, no stop tokens: none stops */
            if (token_stops(r, r->num_output + j, t[j]))
                return -EINVAL;
        if (r->num_output + k > r->cap_output) { /* append_output's growth, at once */
            uint32_t nc = r->cap_output ? r->cap_output : first_output_cap(r);
            while (nc < r->num_output + k)
                nc *= 2;
            kvpool_token *na = realloc(r->output, nc * sizeof *na);
            if (!na)
                return -ENOMEM;
            r->output = na;
            r->cap_output = nc;
        }
    }
    /* What the k schedule() calls did: step indices, the deferred-free fences (each step had
     * tokens), the first one's allocations, then one in-place extension per request and step
     * (the last may fill a block). Then the k updates: the fences processed (nothing is
     * deferred), the tokens appended, no finish.
     * The first schedule: the blocks its requests take (schedule_running's prepare + commit,
     * in running order: READY, as sched_stable_decode_steps checked). */
    s->step_index++;
    uint32_t took = 0; /* commits: each advanced the generation as an extension would have */
    for (size_t i = 0; took < taking && i < s->num_running; i++) {
        struct sched_request *r = s->running[i];
        uint64_t nc = r->num_computed_tokens;
        if (kvpool_decode_steps_in_place(s->pool, &r->kv, nc, 1) == 1)
            continue; /* extends in place: counted with the other steps below */
        struct kvpool_plan plan;
        int rc = prepare_running(s, r, nc, 1, &plan);
        if (rc != KVPOOL_READY)
            return rc < 0 ? rc : -EUCLEAN; /* the test above said it was */
        if ((rc = commit_running(s, r, &plan)) != 0)
            return rc;
        took++;
    }
    s->step_index += k - 1;
    memset(&s->offload_status, 0, sizeof s->offload_status); /* nobody waited for capacity */
    if (s->cfg.defer_block_free) {
        s->sched_step_seq += k;
        s->processed_step_seq += k;
    }
    s->num_last_finished = 0;
    s->num_last_pinned = 0;
    for (size_t i = 0; i < s->num_running; i++) {
        struct sched_request *r = s->running[i];
        const kvpool_token *t = tokens + i * k;
        uint64_t nc = r->num_computed_tokens;
        r->num_computed_tokens += k;
        if (s->cfg.defer_block_free)
            r->last_sched_seq = s->sched_step_seq;
        memcpy(r->output + r->num_output, t, k * sizeof *t);
        r->num_output += k;
        int rc = kvpool_seq_append_tokens(s->pool, &r->kv, t, k);
        if (rc)
            return rc;
        /* The last step may fill a block (only the last: the run ends there). Requests are
         * extended in running order, so their blocks are cached in a schedule's order. */
        kvpool_decode_steps_fill(s->pool, &r->kv, nc, k);
    }
    kvpool_extend_in_place_steps(s->pool, (uint64_t)k * s->num_running - took);
    return 0;
}

struct sched_request *const *sched_last_finished(const struct sched *s, uint32_t *n)
{
    *n = s->num_last_finished;
    return s->last_finished;
}

int sched_abort(struct sched *s, struct sched_request *req)
{
    s->num_last_finished = 0;
    s->num_last_pinned = 0;
    if (sched_status_is_finished(req->status))
        return -EALREADY;
    int rc = finish(s, req, SCHED_FINISHED_ABORTED);
    if (rc == 0 && s->cfg.check_invariants)
        rc = set_violation_rc(s);
    return rc;
}

int sched_release(struct sched *s, struct sched_request *r)
{
    /* Still listed by an outstanding step (async scheduling): its update reads r. */
    if (!sched_status_is_finished(r->status) || r->free_delayed || r->kv.num_blocks ||
        r->num_in_flight_tokens)
        return -EBUSY;
    if (r->prev_live)
        r->prev_live->next_live = r->next_live;
    else
        s->live = r->next_live;
    if (r->next_live)
        r->next_live->prev_live = r->prev_live;
    s->num_live--;
    request_free(s, r);
    return 0;
}

int sched_reset_prefix_cache(struct sched *s, bool reset_running)
{
    int rc = 0;
    if (reset_running) {
        while (s->num_running && rc == 0) {
            struct sched_request *v = s->running[s->num_running - 1];
            running_remove_at(s, s->num_running - 1);
            rc = preempt(s, v, true); /* vLLM drops a reset's in-flight output always */
        }
    }
    return rc ? rc : kvpool_reset_prefix_cache(s->pool);
}

uint32_t sched_running(const struct sched *s, struct sched_request *const **reqs)
{
    *reqs = s->running;
    return (uint32_t)s->num_running;
}

uint32_t sched_waiting_snapshot(const struct sched *s, struct sched_request **out, uint32_t cap)
{
    size_t total = s->skipped.len + s->waiting.len;
    if (out && cap >= total) {
        sched__rq_snapshot(&s->skipped, out, cap);
        sched__rq_snapshot(&s->waiting, out + s->skipped.len, cap - s->skipped.len);
    }
    return (uint32_t)total;
}

struct sched_pin *const *sched_last_pinned(const struct sched *s, uint32_t *n)
{
    *n = s->num_last_pinned;
    return s->last_pinned;
}

int sched_release_pin(struct sched *s, struct sched_pin *pin)
{
    if (pin->prev)
        pin->prev->next = pin->next;
    else
        s->pins = pin->next;
    if (pin->next)
        pin->next->prev = pin->prev;
    s->num_pins--;
    kvpool_free(s->pool, &pin->kv); /* tail first, as _free_blocks after finished_sending */
    kvpool_seq_fini(s->pool, &pin->kv);
    free(pin);
    return 0;
}

uint32_t sched_num_pins(const struct sched *s) { return s->num_pins; }
uint32_t sched_num_pinned_blocks(const struct sched *s)
{
    return kvpool_num_pinned_only_blocks(s->pool);
}

uint32_t sched_num_unfinished(const struct sched *s) { return (uint32_t)s->num_unfinished; }
uint64_t sched_num_preemptions(const struct sched *s) { return s->num_preemptions; }
uint32_t sched_num_deferred_frees(const struct sched *s) { return s->num_deferred; }

/* ---- invariants ---------------------------------------------------------------------------- */

static int req_violation(struct sched_violation *v, const char *rule, const struct sched_request *r,
                         int64_t expected, int64_t found)
{
    memset(v, 0, sizeof *v);
    snprintf(v->rule, sizeof v->rule, "%s", rule);
    v->block = -1;
    if (r) {
        v->request_id = r->id;
        v->owner = r->kv.owner;
        v->status = r->status;
        v->last_transition = r->last_transition;
        if (r->kv.num_blocks)
            v->block = r->kv.blocks[0];
    }
    v->expected = expected;
    v->found = found;
    return -EUCLEAN;
}

static enum sched_queue expected_queue(const struct sched_request *r)
{
    switch (r->status) {
    case SCHED_RUNNING: return SCHED_Q_RUNNING;
    case SCHED_WAITING:
    case SCHED_PREEMPTED:
    case SCHED_WAITING_FOR_REMOTE_KVS: return SCHED_Q_WAITING; /* or SKIPPED */
    default: return SCHED_Q_NONE;
    }
}

static int mark_queue_member(struct sched *s, struct sched_request *r, enum sched_queue q,
                             struct sched_violation *v)
{
    if (r->check_mark == s->check_epoch)
        return req_violation(v, "request_in_two_queues", r, 1, 2);
    r->check_mark = s->check_epoch;
    if (r->queue != q)
        return req_violation(v, "queue_tag", r, q, r->queue);
    return 0;
}

int sched_check(struct sched *s, struct sched_violation *v)
{
    struct sched_violation scratch;
    if (!v)
        v = &scratch;
    struct kvpool_violation pv;
    if (kvpool_check(s->pool, &pv) != 0) {
        const struct sched_request *owner = NULL;
        for (const struct sched_request *r = s->live; r && pv.owner_id; r = r->next_live)
            if (r->id == pv.owner_id)
                owner = r;
        req_violation(v, pv.what, owner, pv.expected, pv.found);
        v->block = pv.block;
        v->owner = pv.owner;
        return -EUCLEAN;
    }
    s->check_epoch++;
    for (size_t i = 0; i < s->num_running; i++)
        if (mark_queue_member(s, s->running[i], SCHED_Q_RUNNING, v))
            return -EUCLEAN;
    const struct rq *qs[2] = {&s->waiting, &s->skipped};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < qs[k]->len; i++) {
            struct sched_request *r =
                qs[k]->policy == SCHED_POLICY_FCFS ? *rq_at(qs[k], i) : qs[k]->a[i];
            if (mark_queue_member(s, r, qs[k]->tag, v))
                return -EUCLEAN;
        }
    if (s->num_running > s->cfg.max_num_seqs)
        return req_violation(v, "running_le_max_num_seqs", NULL, s->cfg.max_num_seqs,
                             (int64_t)s->num_running);
    size_t unfinished = 0;
    for (const struct sched_request *r = s->live; r; r = r->next_live) {
        enum sched_queue eq = expected_queue(r);
        bool member = r->check_mark == s->check_epoch;
        if (eq == SCHED_Q_NONE) {
            if (member || r->queue != SCHED_Q_NONE)
                return req_violation(v, "finished_request_queued", r, SCHED_Q_NONE, r->queue);
            if (r->kv.num_blocks && !r->free_delayed)
                return req_violation(v, "finished_request_holds_blocks", r, 0, r->kv.num_blocks);
            continue;
        }
        unfinished++;
        if (!member)
            return req_violation(v, "unfinished_request_not_queued", r, eq, SCHED_Q_NONE);
        if (eq == SCHED_Q_WAITING && r->queue == SCHED_Q_RUNNING)
            return req_violation(v, "queue_matches_status", r, eq, r->queue);
        if (r->num_computed_tokens > sched_request_num_tokens(r) + r->num_output_placeholders)
            return req_violation(
                v, "computed_le_tokens", r,
                (int64_t)(sched_request_num_tokens(r) + r->num_output_placeholders),
                (int64_t)r->num_computed_tokens);
        /* Except a finished load not admitted since: it keeps the blocks the load filled even
         * when recomputing the last token leaves 0 computed (a one-token prompt), as vLLM's
         * request does after _update_waiting_for_remote_kv. */
        if ((r->status == SCHED_WAITING || r->status == SCHED_PREEMPTED) &&
            r->num_computed_tokens == 0 && r->kv.num_blocks != 0 &&
            r->last_transition != SCHED_T_PROMOTED)
            return req_violation(v, "waiting_holds_no_blocks", r, 0, r->kv.num_blocks);
        if (r->status == SCHED_WAITING_FOR_REMOTE_KVS &&
            r->kv.owner != KVPOOL_OWNER_DEST_RESERVATION)
            return req_violation(v, "async_load_is_destination_reservation", r,
                                 KVPOOL_OWNER_DEST_RESERVATION, r->kv.owner);
    }
    if (unfinished != s->num_unfinished)
        return req_violation(v, "unfinished_count", NULL, (int64_t)s->num_unfinished,
                             (int64_t)unfinished);
    for (const struct sched_pin *p = s->pins; p; p = p->next) {
        if (p->kv.owner != KVPOOL_OWNER_HANDOFF_SOURCE || p->kv.num_blocks == 0) {
            req_violation(v, "pin_is_handoff_source", NULL, 1, 0);
            v->request_id = p->id;
            v->owner = p->kv.owner;
            return -EUCLEAN;
        }
    }
    return 0;
}

int sched_violation_format(const struct sched_violation *v, char *buf, size_t len)
{
    return snprintf(buf, len,
                    "invariant violation: rule=%s request=%" PRIu64 " block=%" PRId32
                    " owner=%s state=%s last_transition=%s expected=%" PRId64 " found=%" PRId64,
                    v->rule, v->request_id, v->block, kvpool_owner_class_name(v->owner),
                    sched_status_name(v->status), sched_transition_name(v->last_transition),
                    v->expected, v->found);
}

const struct sched_violation *sched_last_violation(const struct sched *s)
{
    return s->has_violation ? &s->violation : NULL;
}
