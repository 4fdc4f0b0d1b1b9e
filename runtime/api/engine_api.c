/*
 * engine_api.c - the engine you step (kvsim.h: kvsim_engine_*): one simulated engine
 * (engine/engine.c) with a request list that grows as the caller adds requests, arrivals held
 * until the clock reaches them, and what the engine tells its observer turned into the public
 * events. An engine belongs to one thread at a time (kvsim.h).
 */
#include "runtime/api/api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* config_api.c */
const struct kvsim_options *kvsim__config_options(const kvsim_config_t *c);
char *kvsim__config_errbuf(kvsim_config_t *c, size_t *len);

/* A request added with an arrival the clock has not reached yet. */
struct pending {
    int64_t t;
    uint32_t req;
};

struct kvsim_api_engine {
    struct kvsim_engine *core;
    struct kvsim_run run;              /* the resolved options (owns the profile) */
    struct kvsim_tiers_config tiers;   /* with offload */
    struct offload_pool *offload_pool; /* "offload-executor" pool */
    struct kvsim_trace trace;          /* every request added, by index (grows) */
    size_t cap_reqs, cap_hashes;
    struct kvsim_metrics *metrics; /* one record per request added */
    uint64_t *ids;                 /* [req] the caller's id */
    int8_t *reason;                /* [req] kvsim_finish_reason_t, -1 while unfinished */
    kvpool_token **prompts;        /* [req] a token prompt until its admission (else NULL) */
    uint32_t *min_tokens;          /* [req] */
    int64_t *priority;             /* [req] */
    uint32_t *slots;               /* id map: open addressing, req + 1 (0: empty) */
    uint32_t slot_mask;            /* slots has slot_mask + 1 entries (a power of two) */
    struct pending *heap;          /* min-heap on (t, req) */
    uint32_t num_pending, cap_pending;
    kvsim_event_t *events; /* waiting events: [head, tail) */
    size_t ev_head, ev_tail, ev_cap;
    kvsim_event_fn callback;
    void *callback_ctx;
    int64_t clock;
    bool advanced; /* the core ran at the clock since the last admission or abort */
    bool kv_events;
    int failed; /* the error that made the engine unusable (0: none) */
    uint64_t prefix_queries, prefix_hits;
    char err[512];
};

/* Formats the message of e and returns rc. */
static int fail(kvsim_engine_t *e, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(kvsim_engine_t *e, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- the id map ------------------------------------------------------------------------------ */

static uint32_t slot_of(uint64_t id, uint32_t mask)
{
    id ^= id >> 33; /* splitmix64's finalizer: ids are often dense counters */
    id *= UINT64_C(0xff51afd7ed558ccd);
    id ^= id >> 33;
    return (uint32_t)id & mask;
}

/* The index of id, or UINT32_MAX. */
static uint32_t find_req(const kvsim_engine_t *e, uint64_t id)
{
    if (!e->slots)
        return UINT32_MAX;
    for (uint32_t s = slot_of(id, e->slot_mask);; s = (s + 1) & e->slot_mask) {
        uint32_t v = e->slots[s];
        if (!v)
            return UINT32_MAX;
        if (e->ids[v - 1] == id)
            return v - 1;
    }
}

/* Inserts req (its id is e->ids[req], not in the map). Returns 0 or -ENOMEM. */
static int map_insert(kvsim_engine_t *e, uint32_t req)
{
    if (!e->slots || (uint64_t)(req + 1) * 2 > (uint64_t)e->slot_mask + 1) {
        uint32_t n = e->slots ? 2 * (e->slot_mask + 1) : 64;
        uint32_t *ns = calloc(n, sizeof *ns);
        if (!ns)
            return -ENOMEM;
        for (uint32_t r = 0; r < req; r++) {
            uint32_t s = slot_of(e->ids[r], n - 1);
            while (ns[s])
                s = (s + 1) & (n - 1);
            ns[s] = r + 1;
        }
        free(e->slots);
        e->slots = ns;
        e->slot_mask = n - 1;
    }
    uint32_t s = slot_of(e->ids[req], e->slot_mask);
    while (e->slots[s])
        s = (s + 1) & e->slot_mask;
    e->slots[s] = req + 1;
    return 0;
}

/* ---- pending arrivals ------------------------------------------------------------------------ */

static bool before(const struct pending *a, const struct pending *b)
{
    return a->t != b->t ? a->t < b->t : a->req < b->req;
}

static int heap_push(kvsim_engine_t *e, struct pending p)
{
    if (e->num_pending == e->cap_pending) {
        uint32_t nc = e->cap_pending ? 2 * e->cap_pending : 64;
        struct pending *nh = realloc(e->heap, nc * sizeof *nh);
        if (!nh)
            return -ENOMEM;
        e->heap = nh;
        e->cap_pending = nc;
    }
    uint32_t i = e->num_pending++;
    while (i && before(&p, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = p;
    return 0;
}

static struct pending heap_pop(kvsim_engine_t *e)
{
    struct pending top = e->heap[0], last = e->heap[--e->num_pending];
    uint32_t i = 0, n = e->num_pending;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(&e->heap[c + 1], &e->heap[c]))
            c++;
        if (!before(&e->heap[c], &last))
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n)
        e->heap[i] = last;
    return top;
}

static int64_t next_arrival(const kvsim_engine_t *e)
{
    return e->num_pending ? e->heap[0].t : INT64_MAX;
}

/* ---- events ---------------------------------------------------------------------------------- */

static int push_event(kvsim_engine_t *e, const kvsim_event_t *ev)
{
    if (e->callback) {
        e->callback(e->callback_ctx, ev);
        return 0;
    }
    if (e->ev_tail == e->ev_cap) {
        if (e->ev_head) { /* slide the unread ones to the front first */
            memmove(e->events, e->events + e->ev_head,
                    (e->ev_tail - e->ev_head) * sizeof *e->events);
            e->ev_tail -= e->ev_head;
            e->ev_head = 0;
        }
        if (e->ev_tail == e->ev_cap) {
            size_t nc = e->ev_cap ? 2 * e->ev_cap : 256;
            kvsim_event_t *ne = realloc(e->events, nc * sizeof *ne);
            if (!ne)
                return -ENOMEM;
            e->events = ne;
            e->ev_cap = nc;
        }
    }
    e->events[e->ev_tail++] = *ev;
    return 0;
}

/* The core engine's observer: its request indices become the caller's ids. */
static void on_observe(void *ctx, const struct kvsim_engine_obs *o)
{
    kvsim_engine_t *e = ctx;
    kvsim_event_t ev = {.t_ns = o->t, .id = e->ids[o->req], .a = o->a, .b = o->b};
    switch (o->kind) {
    case KVSIM_OBS_SCHEDULED: ev.kind = KVSIM_EVENT_SCHEDULED; break;
    case KVSIM_OBS_TOKEN: ev.kind = KVSIM_EVENT_TOKEN; break;
    case KVSIM_OBS_PREEMPTED: ev.kind = KVSIM_EVENT_PREEMPTED; break;
    default:
        ev.kind = KVSIM_EVENT_FINISHED;
        e->reason[o->req] = (int8_t)o->a; /* the same numbering as kvsim_finish_reason_t */
        break;
    }
    if (o->kind == KVSIM_OBS_SCHEDULED) {
        const struct kvsim_req_record *r = kvsim_metrics_record(e->metrics, o->req);
        if (r->num_preemptions == 0) { /* the first admission */
            e->prefix_queries += e->trace.reqs[o->req].input_len;
            e->prefix_hits += o->a;
        }
    }
    if (push_event(e, &ev) && !e->failed)
        e->failed = fail(e, -ENOMEM, "out of memory queueing events");
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

int kvsim_engine_new(kvsim_config_t *cfg, kvsim_engine_t **out)
{
    *out = NULL;
    size_t errlen;
    char *err = kvsim__config_errbuf(cfg, &errlen);
    err[0] = 0;
    const struct kvsim_options *o = kvsim__config_options(cfg);
    kvsim_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    int rc = kvsim_options_resolve(o, &e->run, err, errlen);
    if (rc) {
        free(e);
        return rc;
    }
    const struct kvsim_replay_config *rc_cfg = &e->run.replay;
    if (rc_cfg->g3_shared) {
        snprintf(err, errlen, "option --g3-shared needs a replay (a G3 shared by its engines)");
        kvsim_engine_free(e);
        return -EINVAL;
    }
    e->kv_events = o->kv_events;
    e->clock = 0;
    rc = kvsim_metrics_create(0, 1, &e->metrics);
    if (rc == 0 && rc_cfg->offload) {
        e->tiers = rc_cfg->tiers;
        e->tiers.pool = NULL;
        e->tiers.pipe.block_bytes =
            offload_block_bytes(rc_cfg->kv_bytes_per_token, rc_cfg->sched.block_size);
        if (rc_cfg->offload_pool) {
            struct offload_pool_config pc;
            offload_pool_config_default(&pc);
            pc.threads = rc_cfg->offload_threads;
            pc.max_pipelines = 1;
            rc = offload_pool_create(&pc, &e->offload_pool);
            e->tiers.pool = e->offload_pool;
            if (rc)
                snprintf(err, errlen, "starting the offload thread pool: %s", kvsim_strerror(rc));
        }
    }
    if (rc == 0) {
        struct kvsim_engine_config ec = {
            .id = 0,
            .sched = rc_cfg->sched,
            .model = rc_cfg->model,
            .trace = &e->trace,
            .metrics = e->metrics,
            .kv_events = e->kv_events,
            .tiers = rc_cfg->offload ? &e->tiers : NULL,
            .observe = on_observe,
            .observe_ctx = e,
            .stops = true,
            .decode_fast_path_off = rc_cfg->decode_fast_path_off,
        };
        rc = kvsim_engine_create(&ec, &e->core);
        if (rc == -EINVAL)
            snprintf(err, errlen,
                     "impossible engine configuration (block size, blocks, max_num_batched_tokens "
                     "vs max_model_len with chunked prefill off)");
    }
    if (rc) {
        if (!err[0])
            snprintf(err, errlen, "creating the engine: %s", kvsim_strerror(rc));
        kvsim_engine_free(e);
        return rc;
    }
    e->trace.format = KVSIM_TRACE_SYNTHETIC;
    *out = e;
    return 0;
}

void kvsim_engine_free(kvsim_engine_t *e)
{
    if (!e)
        return;
    kvsim_engine_destroy(e->core);
    offload_pool_destroy(e->offload_pool);
    kvsim_metrics_destroy(e->metrics);
    kvsim_run_fini(&e->run);
    for (size_t i = 0; i < e->trace.num_reqs; i++)
        free(e->prompts[i]);
    kvsim_trace_free(&e->trace);
    free(e->ids);
    free(e->reason);
    free(e->prompts);
    free(e->min_tokens);
    free(e->priority);
    free(e->slots);
    free(e->heap);
    free(e->events);
    free(e);
}

const char *kvsim_engine_errmsg(const kvsim_engine_t *e) { return e->err; }

const char *kvsim_finish_reason_name(int reason)
{
    switch (reason) {
    case KVSIM_FINISH_STOP: return "stop";
    case KVSIM_FINISH_LENGTH: return "length";
    case KVSIM_FINISH_ABORTED: return "abort";
    case KVSIM_FINISH_REJECTED: return "rejected";
    }
    return "?";
}

/* ---- adding and aborting requests ------------------------------------------------------------ */

/* Room for one more request in every per-request array. Returns 0 or -ENOMEM. */
static int grow_reqs(kvsim_engine_t *e, uint32_t hashes)
{
    size_t n = e->trace.num_reqs + 1;
    if (n > e->cap_reqs) {
        size_t nc = e->cap_reqs ? 2 * e->cap_reqs : 64;
#define GROW(field)                                                                                \
    do {                                                                                           \
        void *p = realloc(field, nc * sizeof *(field));                                            \
        if (!p)                                                                                    \
            return -ENOMEM;                                                                        \
        field = p;                                                                                 \
    } while (0)
        GROW(e->trace.reqs);
        GROW(e->ids);
        GROW(e->reason);
        GROW(e->prompts);
        GROW(e->min_tokens);
        GROW(e->priority);
#undef GROW
        e->cap_reqs = nc;
    }
    if (e->trace.num_hash_ids + hashes > e->cap_hashes) {
        size_t nc = e->cap_hashes ? 2 * e->cap_hashes : 256;
        while (nc < e->trace.num_hash_ids + hashes)
            nc *= 2;
        uint64_t *h = realloc(e->trace.hash_ids, nc * sizeof *h);
        if (!h)
            return -ENOMEM;
        e->trace.hash_ids = h;
        e->cap_hashes = nc;
    }
    return kvsim_metrics_grow(e->metrics, (uint32_t)n);
}

const char *kvsim_request_check(const kvsim_request_t *r, uint32_t block_size, uint32_t *input_len)
{
    if (r->size < offsetof(kvsim_request_t, priority) + sizeof r->priority)
        return "size is not set (use KVSIM_REQUEST_INIT)";
    if (r->max_tokens == 0)
        return "max_tokens must be at least 1";
    if (r->min_tokens > r->max_tokens)
        return "min_tokens is above max_tokens";
    if ((r->tokens != NULL) != (r->num_tokens != 0))
        return "tokens and num_tokens must be given together";
    if ((r->hash_ids != NULL) != (r->num_hash_ids != 0))
        return "hash_ids and num_hash_ids must be given together";
    if (r->tokens && r->hash_ids)
        return "give the prompt as tokens or as hash_ids, not both";
    for (uint32_t i = 0; r->tokens && i < r->num_tokens; i++)
        if (r->tokens[i] > KVSIM_MAX_HASH_ID)
            return "a token id is 2^31 or above";
    for (uint32_t i = 0; r->hash_ids && i < r->num_hash_ids; i++)
        if (r->hash_ids[i] > KVSIM_MAX_HASH_ID)
            return "a hash id is 2^31 or above";
    if (r->tokens) {
        if (r->input_len && r->input_len != r->num_tokens)
            return "input_len differs from num_tokens";
        *input_len = r->num_tokens;
        return NULL;
    }
    if (r->hash_ids) {
        if (!r->hash_block_size)
            return "hash_block_size must be at least 1 with hash_ids";
        if (block_size && r->hash_block_size != block_size)
            return "hash_block_size differs from the earlier requests'";
        uint64_t full = (uint64_t)r->num_hash_ids * r->hash_block_size;
        if (full > UINT32_MAX)
            return "the prompt is longer than 2^32 tokens";
        if (r->input_len && (r->input_len > full || r->input_len <= full - r->hash_block_size))
            return "input_len does not match num_hash_ids x hash_block_size";
        *input_len = r->input_len ? r->input_len : (uint32_t)full;
        return NULL;
    }
    if (!r->input_len)
        return "the prompt is empty (no tokens, no hash_ids, input_len 0)";
    *input_len = r->input_len;
    return NULL;
}

/* kvsim_request_check, and an arrival no earlier than the engine's clock. */
static const char *check_request(const kvsim_engine_t *e, const kvsim_request_t *r,
                                 uint32_t *input_len)
{
    const char *why = kvsim_request_check(r, e->trace.block_size, input_len);
    if (!why && r->arrival_ns < e->clock)
        why = "arrival_ns is before the engine's clock";
    return why;
}

int kvsim_engine_add(kvsim_engine_t *e, const kvsim_request_t *r)
{
    if (e->failed)
        return e->failed;
    uint32_t input_len = 0;
    const char *why = r ? check_request(e, r, &input_len) : "no request";
    if (!why && find_req(e, r->id) != UINT32_MAX)
        why = "the id is already used";
    if (!why && e->trace.num_reqs >= UINT32_MAX - 1)
        why = "too many requests";
    if (why)
        return fail(e, -EINVAL, "kvsim_engine_add: request %llu: %s",
                    r ? (unsigned long long)r->id : 0ULL, why);
    int rc = grow_reqs(e, r->num_hash_ids);
    if (rc)
        return fail(e, rc, "out of memory adding a request");
    uint32_t req = (uint32_t)e->trace.num_reqs;
    kvpool_token *prompt = NULL;
    if (r->tokens) {
        prompt = malloc(r->num_tokens * sizeof *prompt);
        if (!prompt)
            return fail(e, -ENOMEM, "out of memory adding a request");
        memcpy(prompt, r->tokens, r->num_tokens * sizeof *prompt);
    }
    e->ids[req] = r->id;
    if ((rc = map_insert(e, req)) != 0 ||
        (rc = heap_push(e, (struct pending){r->arrival_ns, req})) != 0) {
        free(prompt); /* the map may hold req already: the engine is unusable */
        return e->failed = fail(e, rc, "out of memory adding a request");
    }
    e->trace.reqs[req] = (struct kvsim_req_spec){
        .line = req + 1,
        .arrival_ns = r->arrival_ns,
        .input_len = input_len,
        .output_len = r->max_tokens,
        .hash_off = (uint32_t)e->trace.num_hash_ids,
        .num_hashes = r->num_hash_ids,
        .session = -1,
        .prev_turn = -1,
        .stop_after = r->stop_after,
    };
    if (r->hash_ids) {
        memcpy(e->trace.hash_ids + e->trace.num_hash_ids, r->hash_ids,
               r->num_hash_ids * sizeof(uint64_t));
        e->trace.num_hash_ids += r->num_hash_ids;
        e->trace.block_size = r->hash_block_size;
    }
    e->reason[req] = -1;
    e->prompts[req] = prompt;
    e->min_tokens[req] = r->min_tokens;
    e->priority[req] = r->priority;
    e->trace.num_reqs++;
    return 0;
}

int kvsim_engine_abort(kvsim_engine_t *e, uint64_t id)
{
    if (e->failed)
        return e->failed;
    uint32_t req = find_req(e, id);
    if (req == UINT32_MAX)
        return fail(e, -ENOENT, "kvsim_engine_abort: no request %llu", (unsigned long long)id);
    if (e->reason[req] >= 0)
        return KVSIM_EFINISHED;
    const struct kvsim_req_record *rec = kvsim_metrics_record(e->metrics, req);
    if (rec->arrival_ns == KVSIM_TIME_NONE) {
        /* Not arrived yet: it never reaches the engine (its heap entry is skipped). */
        int rc = kvsim_metrics_on_arrival(e->metrics, req, e->clock, e->trace.reqs[req].input_len);
        if (rc == 0)
            rc = kvsim_metrics_on_abort(e->metrics, req, e->clock, "client_abort");
        if (rc)
            return fail(e, rc, "kvsim_engine_abort: %s", kvsim_strerror(rc));
        on_observe(
            e, &(struct kvsim_engine_obs){
                   .t = e->clock, .req = req, .kind = KVSIM_OBS_FINISHED, .a = KVSIM_OBS_ABORT});
        free(e->prompts[req]);
        e->prompts[req] = NULL;
        return 0;
    }
    int rc = kvsim_engine_abort_req(e->core, req);
    if (rc == -ENOENT) /* finished in the step that runs now: its finish comes at its end */
        return KVSIM_EFINISHED;
    if (rc)
        return e->failed = fail(e, rc, "%s", kvsim_engine_error(e->core));
    e->advanced = false;
    return 0;
}

/* ---- advancing ------------------------------------------------------------------------------- */

static int events_waiting(const kvsim_engine_t *e)
{
    size_t n = e->ev_tail - e->ev_head;
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

/* Runs the core to t. Returns 0 or the (sticky) error. */
static int core_advance(kvsim_engine_t *e, int64_t t)
{
    int rc = kvsim_engine_advance(e->core, t);
    uint32_t n;
    kvsim_engine_take_done(e->core, &n); /* session follow-ups are the caller's business */
    if (rc)
        return e->failed = fail(e, rc, "%s", kvsim_engine_error(e->core));
    if (e->failed)
        return e->failed;
    e->clock = t;
    e->advanced = true;
    return 0;
}

/* Everything at or before t: each arrival at its instant, then the core to t. */
static int advance_to(kvsim_engine_t *e, int64_t t)
{
    if (e->failed)
        return e->failed;
    int rc;
    while (next_arrival(e) <= t) {
        int64_t a = next_arrival(e);
        if ((rc = core_advance(e, a)) != 0)
            return rc;
        while (next_arrival(e) == a) {
            struct pending p = heap_pop(e);
            if (e->reason[p.req] >= 0)
                continue; /* aborted before it arrived */
            struct kvsim_engine_admit_opts ao = {
                .prompt = e->prompts[p.req],
                .min_tokens = e->min_tokens[p.req],
                .priority = e->priority[p.req],
            };
            rc = kvsim_engine_admit_ext(e->core, p.req, a, &ao);
            free(e->prompts[p.req]); /* the scheduler copied it */
            e->prompts[p.req] = NULL;
            if (rc)
                return e->failed = fail(e, rc, "admitting request %llu: %s",
                                        (unsigned long long)e->ids[p.req],
                                        kvsim_engine_error(e->core)[0] ? kvsim_engine_error(e->core)
                                                                       : kvsim_strerror(rc));
            e->advanced = false;
        }
    }
    if (t < e->clock)
        t = e->clock;
    if ((rc = core_advance(e, t)) != 0)
        return rc;
    return events_waiting(e);
}

int64_t kvsim_engine_now(const kvsim_engine_t *e) { return e->clock; }

int64_t kvsim_engine_next_time(const kvsim_engine_t *e)
{
    int64_t t = next_arrival(e), c = kvsim_engine_next_event(e->core);
    if (c < t)
        t = c;
    /* An admission or abort since the last advance: a step may start at the clock. */
    if (!e->advanced && kvsim_engine_unfinished(e->core) && e->clock < t)
        t = e->clock;
    return t;
}

int kvsim_engine_run_until(kvsim_engine_t *e, int64_t t_ns)
{
    if (e->failed)
        return e->failed;
    if (t_ns < e->clock)
        return fail(e, -EINVAL,
                    "kvsim_engine_run_until: %" PRId64 " ns is before the clock (%" PRId64 " ns)",
                    t_ns, e->clock);
    return advance_to(e, t_ns);
}

int kvsim_engine_run_next(kvsim_engine_t *e)
{
    if (e->failed)
        return e->failed;
    int64_t t = kvsim_engine_next_time(e);
    return t == INT64_MAX ? events_waiting(e) : advance_to(e, t);
}

int kvsim_engine_step(kvsim_engine_t *e)
{
    if (e->failed)
        return e->failed;
    /* Until a step runs (arrivals and transfers may come first), then to its end. */
    for (;;) {
        int64_t end = kvsim_engine_step_end(e->core);
        if (end != INT64_MAX)
            return advance_to(e, end);
        int64_t t = kvsim_engine_next_time(e);
        if (t == INT64_MAX)
            return events_waiting(e);
        int rc = advance_to(e, t);
        if (rc < 0)
            return rc;
    }
}

size_t kvsim_engine_events(kvsim_engine_t *e, kvsim_event_t *buf, size_t cap)
{
    size_t n = e->ev_tail - e->ev_head;
    if (n > cap)
        n = cap;
    if (n)
        memcpy(buf, e->events + e->ev_head, n * sizeof *buf);
    e->ev_head += n;
    if (e->ev_head == e->ev_tail)
        e->ev_head = e->ev_tail = 0;
    return n;
}

void kvsim_engine_set_event_callback(kvsim_engine_t *e, kvsim_event_fn fn, void *ctx)
{
    e->callback = fn;
    e->callback_ctx = ctx;
}

/* ---- observing ------------------------------------------------------------------------------- */

int kvsim_engine_load(const kvsim_engine_t *e, kvsim_load_t *out)
{
    if (!out || out->size < sizeof(size_t))
        return -EINVAL;
    struct kvpool *pool = kvsim_engine_pool(e->core);
    const struct kvsim_engine_pub *pub = kvsim_engine_pub(e->core);
    kvsim_load_t l = {.size = sizeof l};
    l.now_ns = e->clock;
    l.num_running = pub->num_running;
    l.num_waiting = pub->num_waiting;
    l.num_pending = e->num_pending;
    l.num_unfinished = kvsim_engine_unfinished(e->core);
    l.total_blocks = kvpool_num_usable_blocks(pool);
    l.free_blocks = kvpool_num_free_blocks(pool);
    l.active_blocks = l.total_blocks - l.free_blocks;
    l.kv_usage = kvpool_usage(pool);
    l.queued_prompt_tokens = pub->queued_tokens;
    l.steps = kvsim_engine_steps(e->core);
    l.preemptions = kvsim_engine_preemptions(e->core);
    l.prefix_queries = e->prefix_queries;
    l.prefix_hits = e->prefix_hits;
    memcpy((char *)out + sizeof(size_t), (char *)&l + sizeof(size_t),
           (out->size < sizeof l ? out->size : sizeof l) - sizeof(size_t));
    return 0;
}

struct kv_drain {
    kvsim_kv_event_fn fn;
    void *ctx;
};

static void kv_drain_one(void *ctx, const struct kvpool_event *ev)
{
    const struct kv_drain *d = ctx;
    _Static_assert(sizeof(kvpool_hash) == sizeof(uint64_t), "block hashes are 64-bit");
    kvsim_kv_event_t out = {
        .kind = ev->type == KVPOOL_EVENT_STORED    ? KVSIM_KV_STORED
                : ev->type == KVPOOL_EVENT_REMOVED ? KVSIM_KV_REMOVED
                                                   : KVSIM_KV_CLEARED,
        .has_parent = ev->has_parent,
        .parent_hash = ev->parent_hash,
        .num_hashes = ev->num_hashes,
        .hashes = ev->hashes,
    };
    if (d->fn)
        d->fn(d->ctx, &out);
}

long kvsim_engine_kv_events(kvsim_engine_t *e, kvsim_kv_event_fn fn, void *ctx)
{
    if (!e->kv_events)
        return fail(e, -EINVAL, "kvsim_engine_kv_events: the configuration did not set kv-events");
    struct kv_drain d = {fn, ctx};
    size_t n = kvpool_events_drain(kvsim_engine_pool(e->core), kv_drain_one, &d);
    return n > (size_t)INT32_MAX ? INT32_MAX : (long)n;
}

long kvsim_engine_prompt_hashes(const kvsim_engine_t *e, const kvsim_request_t *r, uint64_t *hashes,
                                size_t cap)
{
    uint32_t input_len = 0;
    kvsim_engine_t *me = (kvsim_engine_t *)e; /* only the message buffer changes */
    kvsim_request_t probe = *r;
    probe.arrival_ns = e->clock; /* the arrival does not matter here */
    const char *why = check_request(e, &probe, &input_len);
    if (why)
        return fail(me, -EINVAL, "kvsim_engine_prompt_hashes: %s", why);
    uint32_t block = e->run.replay.sched.block_size;
    uint32_t n = 0;
    struct kvpool_token_run *runs = NULL;
    if (r->tokens) {
        runs = malloc(r->num_tokens * sizeof *runs);
        for (uint32_t i = 0; runs && i < r->num_tokens; i++) {
            if (n && runs[n - 1].token == r->tokens[i])
                runs[n - 1].count++;
            else
                runs[n++] = (struct kvpool_token_run){r->tokens[i], 1};
        }
    } else {
        /* As the engine expands them (kvsim_prompt_runs): a one-request trace. */
        struct kvsim_req_spec spec = {.input_len = input_len, .num_hashes = r->num_hash_ids};
        struct kvsim_trace t = {.reqs = &spec,
                                .num_reqs = 1,
                                .hash_ids = (uint64_t *)r->hash_ids,
                                .num_hash_ids = r->num_hash_ids,
                                .block_size = r->hash_block_size};
        if (!r->hash_ids) /* a unique prompt: its token depends on its index in the engine */
            return 0;
        n = kvsim_prompt_runs(&t, 0, NULL, 0);
        runs = malloc(n * sizeof *runs);
        if (runs)
            kvsim_prompt_runs(&t, 0, runs, n);
    }
    if (!runs)
        return fail(me, -ENOMEM, "out of memory hashing a prompt");
    uint32_t c = cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
    int64_t got = kvpool_hash_prompt(block, NULL, 0, runs, n, hashes, c);
    free(runs);
    if (got < 0)
        return fail(me, (int)got, "out of memory hashing a prompt");
    return (long)(input_len / block);
}

int kvsim_engine_record(const kvsim_engine_t *e, uint64_t id, kvsim_record_t *out)
{
    if (!out || out->size < sizeof(size_t))
        return -EINVAL;
    uint32_t req = find_req(e, id);
    if (req == UINT32_MAX)
        return -ENOENT;
    const struct kvsim_req_record *r = kvsim_metrics_record(e->metrics, req);
#define T(x) ((x) == KVSIM_TIME_NONE ? -1 : (x))
    kvsim_record_t x = {
        .size = sizeof x,
        .id = id,
        .arrival_ns = T(r->arrival_ns),
        .first_scheduled_ns = T(r->first_sched_ns),
        .first_token_ns = T(r->first_token_ns),
        .last_token_ns = T(r->last_token_ns),
        .finish_ns = T(r->finish_ns),
        .input_len = e->trace.reqs[req].input_len,
        .output_tokens = r->num_output_tokens,
        .cached_tokens = r->cached_tokens,
        .preemptions = r->num_preemptions,
        .finish_reason = e->reason[req],
    };
#undef T
    memcpy((char *)out + sizeof(size_t), (char *)&x + sizeof(size_t),
           (out->size < sizeof x ? out->size : sizeof x) - sizeof(size_t));
    return 0;
}

char *kvsim_engine_report_json(const kvsim_engine_t *e)
{
    struct kvsim_report_run run = {
        .trace = "engine",
        .router = "-",
        .num_engines = 1,
        .num_threads = 1,
        .vllm_contract = e->run.replay.sched.vllm_contract,
        .engine = &e->run.replay.sched,
        .slo = e->run.replay.slo,
    };
    struct kvsim_report rep;
    if (kvsim_metrics_summarize(e->metrics, &run, &rep) != 0)
        return NULL;
    kvsim_engines_timing(&e->run.replay.model, e->run.replay.sched.num_blocks, &e->core, 1,
                         &rep.timing);
    kvsim_replay_capacity_summary(&e->run.replay, &rep.timing);
    char *text = kvsim_report_json_text(&rep);
    kvsim_report_fini(&rep);
    return text;
}
