/*
 * conform_ops.c - the scenario operations (add, schedule, output, abort, kv_lookup, kv_allocate,
 * advance, ...) against the scheduler core, the G1 pool and the offload tiers; and, in the
 * two-engine form, the disaggregated handoff's (route, pins at a prefill output, reservations at
 * a decode schedule, transfers and abort deadlines in advance), applied as the replay's
 * coordinator and engines apply them (runtime/replay/disagg.c, runtime/engine/disagg.c).
 */
#include "runtime/verify/conform_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *conform__engine_name(int e) { return e == CONFORM_DECODE ? "decode" : "prefill"; }

/* ---- execution ----------------------------------------------------------------------------- */

struct creq *conform__find_req(struct kvsim_conform_runner *c, const char *name)
{
    for (size_t i = 0; i < c->nreqs; i++)
        if (strcmp(c->reqs[i].name, name) == 0)
            return &c->reqs[i];
    return NULL;
}

/* The added request with this id; otherwise NULL, and a failure unless lenient (the caller then
 * drops the reference). */
struct creq *conform__need_req(struct kvsim_conform_runner *c, const char *name, const char *where)
{
    struct creq *q = conform__find_req(c, name);
    if (!q && !c->lenient)
        conform__fail(c, "%s: unknown request id '%s'", where, name);
    return q;
}

/* The request with this id on engine e (the current op's); NULL (and a failure unless lenient)
 * when there is none there. */
static struct sched_request *need_on(struct kvsim_conform_runner *c, const char *name, int e,
                                     const char *where, struct creq **qout)
{
    struct creq *q = conform__find_req(c, name);
    if (qout)
        *qout = q;
    if (q && q->r[e])
        return q->r[e];
    if (!c->lenient) {
        if (q && c->disagg)
            conform__fail(c, "%s: request '%s' is not on the %s engine", where, name,
                          conform__engine_name(e));
        else
            conform__fail(c, "%s: unknown request id '%s'", where, name);
    }
    return NULL;
}

/* The request's index (its scheduler id is index + 1 on every engine). */
static size_t req_index(const struct kvsim_conform_runner *c, const struct creq *q)
{
    return (size_t)(q - c->reqs);
}

/* A handoff transition refused (-EINVAL) where the runner derived it from what the engines did:
 * the runner's or the lifecycle's fault, not the scenario's. */
static int handoff_error(struct kvsim_conform_runner *c, const struct creq *q, const char *where,
                         const char *what, int rc)
{
    return conform__fail_kind(c, "handoff_error", "%s: handoff of '%s' (%s): %s: %s", where,
                              q->name, kvsim_handoff_state_name(q->h.state), what,
                              kvsim_strerror(rc < 0 ? rc : -EPROTO));
}

static void note(json_t **list, const char *id)
{
    if (!*list)
        *list = json_array();
    json_array_append_new(*list, json_string(id));
}

static void note_finished(struct kvsim_conform_runner *c, int e)
{
    uint32_t nf;
    struct sched_request *const *f = sched_last_finished(c->eng[e].s, &nf);
    if (!c->eng[e].finished)
        c->eng[e].finished = json_array();
    json_t *done = conform__ids_json(c, f, nf);
    json_array_extend(c->eng[e].finished, done);
    json_decref(done);
}

/* ---- FIFOs of request indexes ---- */

static int fifo_push(struct conform_fifo *f, size_t v)
{
    if (f->tail - f->head == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        size_t *nv = malloc(nc * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        for (size_t i = 0; i < f->tail - f->head; i++)
            nv[i] = f->v[(f->head + i) % f->cap];
        free(f->v);
        f->v = nv;
        f->tail -= f->head;
        f->head = 0;
        f->cap = nc;
    }
    f->v[f->tail++ % f->cap] = v;
    return 0;
}

static bool fifo_empty(const struct conform_fifo *f) { return f->head == f->tail; }
static size_t fifo_peek(const struct conform_fifo *f, size_t i)
{
    return f->v[(f->head + i) % f->cap];
}
static size_t fifo_len(const struct conform_fifo *f) { return f->tail - f->head; }

/* Removes the entry v (its first occurrence), keeping the others in order. */
static void fifo_remove(struct conform_fifo *f, size_t v)
{
    size_t n = fifo_len(f), i = 0;
    while (i < n && fifo_peek(f, i) != v)
        i++;
    if (i == n)
        return;
    for (; i + 1 < n; i++)
        f->v[(f->head + i) % f->cap] = fifo_peek(f, i + 1);
    f->tail--;
}

void conform__fifo_free(struct conform_fifo *f)
{
    free(f->v);
    memset(f, 0, sizeof *f);
}

/* ---- add ---- */

/* Why sched_add would refuse p (it only says -EINVAL), or NULL. The text is static. */
static const char *add_refusal(const struct sched_request_params *p, const struct sched_config *sc)
{
    uint32_t mml = sc->max_model_len ? sc->max_model_len : sc->max_num_batched_tokens;
    if (p->num_prompt_tokens == 0)
        return "key 'prompt' is empty (a request needs at least one prompt token)";
    if (p->max_tokens == 0)
        return "key 'max_tokens' must be at least 1";
    if (p->min_tokens > p->max_tokens)
        return "key 'min_tokens' must be at most max_tokens";
    /* vLLM's InputProcessor._validate_prompt_len: the prompt plus the requested output tokens,
     * at least one, must fit (a prompt of exactly max_model_len is refused). Without a
     * max_model_len in the scenario the token budget stands in, and a prompt may fill it. */
    uint32_t outputs = p->min_tokens ? p->min_tokens : sc->max_model_len ? 1 : 0;
    if ((uint64_t)p->num_prompt_tokens + outputs > mml)
        return "its prompt and min_tokens (at least 1 output token) exceed max_model_len "
               "(vLLM's frontend refuses it)";
    return NULL;
}

/* The request parameters of an add op (prompt and stop tokens into *prompt / *stops, owned by
 * the caller). Returns 0 or the failure. */
static int add_params(struct kvsim_conform_runner *c, json_t *st, const char *where,
                      struct sched_request_params *p, kvpool_token **prompt, kvpool_token **stops)
{
    size_t n = 0, cap = 0, ns = 0, caps = 0;
    memset(p, 0, sizeof *p);
    *prompt = *stops = NULL;
    if (conform__tokens_parse(c, json_object_get(st, "prompt"), prompt, &n, &cap, where))
        return conform__failed(c);
    json_t *v;
    if ((v = json_object_get(st, "stop_token_ids")) &&
        conform__tokens_parse(c, v, stops, &ns, &caps, where))
        return conform__failed(c);
    p->prompt = *prompt;
    p->num_prompt_tokens = (uint32_t)n;
    p->max_tokens = (uint32_t)json_integer_value(json_object_get(st, "max_tokens"));
    p->min_tokens = (uint32_t)json_integer_value(json_object_get(st, "min_tokens"));
    p->priority = json_integer_value(json_object_get(st, "priority"));
    v = json_object_get(st, "arrival");
    p->arrival = v ? json_number_value(v) : (double)c->adds;
    p->stop_token_ids = *stops;
    p->num_stop_token_ids = (uint32_t)ns;
    v = json_object_get(st, "eos_token_id");
    p->eos_token_id = v ? json_integer_value(v) : -1;
    p->ignore_eos = json_is_true(json_object_get(st, "ignore_eos"));
    p->cache_salt = json_string_value(json_object_get(st, "cache_salt"));
    p->prompt_logprobs = json_is_true(json_object_get(st, "prompt_logprobs"));
    if ((v = json_object_get(st, "external"))) {
        p->external_tokens = (uint32_t)json_integer_value(json_object_get(v, "tokens"));
        p->external_async = json_is_true(json_object_get(v, "async"));
    }
    return 0;
}

/* The engine an op names (two-engine form), or CONFORM_NO_ENGINE. */
static int op_engine(const struct kvsim_conform_runner *c, json_t *st)
{
    const char *e = json_string_value(json_object_get(st, "engine"));
    if (!c->disagg || !e)
        return CONFORM_NO_ENGINE;
    return !strcmp(e, "decode") ? CONFORM_DECODE : CONFORM_PREFILL;
}

/*
 * add. One-engine form: the request. Two-engine form with "engine": a plain (aggregated)
 * request on that engine. Without it: a disaggregated request, added on the prefill engine as a
 * producer with max_tokens 1 (vLLM's proxy sends the prefill so; its sampling limits belong to
 * the decode), with a handoff in PREFILLING; the decode request comes with its route.
 */
int conform__op_add(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    const char *id = json_string_value(json_object_get(st, "id"));
    if (conform__find_req(c, id))
        return conform__fail(c, "%s: key 'id': request '%s' was already added", where, id);
    struct sched_request_params p;
    kvpool_token *prompt, *stops;
    if (add_params(c, st, where, &p, &prompt, &stops)) {
        free(prompt);
        free(stops);
        return conform__failed(c);
    }
    int eng = op_engine(c, st);
    bool disagg = c->disagg && eng == CONFORM_NO_ENGINE;
    if (eng == CONFORM_NO_ENGINE)
        eng = 0;
    if (disagg) {
        struct sched_request_params pp = {
            .prompt = p.prompt,
            .num_prompt_tokens = p.num_prompt_tokens,
            .max_tokens = 1,
            .priority = p.priority,
            .arrival = p.arrival,
            .eos_token_id = -1,
            .cache_salt = p.cache_salt,
            .prompt_logprobs = p.prompt_logprobs,
            .kv_producer = true,
        };
        p = pp;
    }
    char *name = strdup(id);
    struct creq *na = NULL;
    size_t ncap = c->cap_reqs ? c->cap_reqs * 2 : 16;
    if (name && c->nreqs == c->cap_reqs && (na = realloc(c->reqs, ncap * sizeof *na))) {
        c->reqs = na;
        c->cap_reqs = ncap;
    }
    if (!name || c->nreqs == c->cap_reqs) {
        free(name);
        free(prompt);
        free(stops);
        return conform__fail(c, "out of memory");
    }
    p.id = c->nreqs + 1;
    struct creq *q = &c->reqs[c->nreqs];
    memset(q, 0, sizeof *q);
    q->name = name;
    q->eng = eng;
    const char *why = add_refusal(&p, sched_get_config(c->eng[eng].s));
    int rc = why ? -EINVAL : sched_add(c->eng[eng].s, &p, &q->r[eng]);
    free(prompt);
    free(stops);
    if (why) {
        free(name);
        return conform__fail(c, "%s: request '%s': %s", where, id, why);
    }
    if (rc) {
        free(name);
        return conform__fail(
            c, "%s: cannot add request '%s'%s%s: %s", where, id, c->disagg ? " on the " : "",
            c->disagg ? (eng == CONFORM_DECODE ? "decode engine" : "prefill engine") : "",
            kvsim_strerror(rc));
    }
    /* Seen as "nothing" so that entering WAITING counts as a transition. */
    for (int e = 0; e < CONFORM_ENGINES; e++)
        q->seen_status[e] = SCHED_FINISHED_ABORTED;
    if (disagg) {
        q->disagg = true;
        q->add = json_incref(st);
        kvsim_handoff_init(&q->h, (uint64_t)c->nreqs + 1, (uint32_t)c->nreqs, CONFORM_PREFILL);
        c->stats.handoffs++;
    }
    c->nreqs++;
    c->adds++;
    return 0;
}

json_t *conform__ids_json(struct kvsim_conform_runner *c, struct sched_request *const *reqs,
                          size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(c->reqs[reqs[i]->id - 1].name));
    return a;
}

/* Fails with an invariant violation: the scheduler's report plus the request's scenario id. */
int conform__violation_fail(struct kvsim_conform_runner *c, int e, const char *where,
                            const struct sched_violation *v)
{
    char line[512];
    sched_violation_format(v, line, sizeof line);
    char kind[96];
    snprintf(kind, sizeof kind, "invariant:%s", v->rule);
    char eng[32] = "";
    if (c->disagg)
        snprintf(eng, sizeof eng, "%s engine: ", conform__engine_name(e));
    if (v->request_id >= 1 && v->request_id <= c->nreqs)
        return conform__fail_kind(c, kind, "%s: %s%s id='%s'", where, eng, line,
                                  c->reqs[v->request_id - 1].name);
    return conform__fail_kind(c, kind, "%s: %s%s", where, eng, line);
}

/* An errno from the scheduler itself (the runner only makes valid calls): kind
 * "scheduler_error", not the scenario's "error". */
int conform__sched_error(struct kvsim_conform_runner *c, int e, const char *where, int rc)
{
    if (rc == -EUCLEAN && sched_last_violation(c->eng[e].s))
        return conform__violation_fail(c, e, where, sched_last_violation(c->eng[e].s));
    return conform__fail_kind(c, "scheduler_error", "%s: %sscheduler error: %s", where,
                              c->disagg ? (e == CONFORM_DECODE ? "decode " : "prefill ") : "",
                              kvsim_strerror(rc));
}

/* ---- the handoff's facts ---- */

/* A transfer planned beyond any reachable instant ends here. */
#define XFER_NEVER (INT64_MAX - 1)

/*
 * The link. Each reserved transfer joins the prefill engine's link, a FIFO in reservation
 * order, and is booked on it only when it starts: at max(its reservation, the end of the last
 * transfer that actually ran, link_free), which is when its handoff enters TRANSFERRING (with
 * end = start + kvsim_transfer_duration_ns). A transfer whose handoff is aborted at an instant
 * no later than its start never starts and takes no link time: it leaves the FIFO, and the next
 * one may start at once. One that started keeps the link until its computed end even if its
 * handoff is aborted meanwhile (cut: the end is then a late fact). So the head of the FIFO is
 * the only transfer that may have started, and after every op it has (or the FIFO is empty).
 */

/* The instant the link's head would start (it has not started): max(reservation, link_free). */
static int64_t head_start(const struct kvsim_conform_runner *c, const struct creq *q)
{
    return q->h.reserved_ns > c->link_free ? q->h.reserved_ns : c->link_free;
}

/* q, the link's head, starts at t: TRANSFERRING from t to t + its duration; the link is busy
 * until then. */
static int start_transfer(struct kvsim_conform_runner *c, struct creq *q, int64_t t,
                          const char *where)
{
    int64_t d = kvsim_transfer_duration_ns(&c->hcfg.xfer, q->h.transfer_tokens); /* <= 2^61 */
    q->link_before = c->link_free;
    q->xfer_start = t;
    /* Saturated at XFER_NEVER: beyond any advance (virtual time stays below 2^62). */
    q->xfer_end = t > XFER_NEVER - d ? XFER_NEVER : t + d;
    q->xfer_started = true;
    c->link_free = q->xfer_end;
    int rc = kvsim_handoff_transfer(&q->h, q->xfer_start, q->xfer_end,
                                    kvsim_transfer_bytes(&c->hcfg.xfer, q->h.transfer_tokens));
    if (rc)
        return handoff_error(c, q, where, "the transfer's start", rc);
    return 0;
}

/* Starts the link's head if it has not started and its start has come (by now): after a
 * reservation on an idle link, or after a cancel took the link's head off it. */
static int link_kick(struct kvsim_conform_runner *c, const char *where)
{
    if (fifo_empty(&c->transfers))
        return 0;
    struct creq *q = &c->reqs[fifo_peek(&c->transfers, 0)];
    if (q->xfer_started || head_start(c, q) > c->now_ns)
        return 0;
    return start_transfer(c, q, head_start(c, q), where);
}

/* q's handoff was aborted at t: a transfer that had not started leaves the link without taking
 * any of its time; one that started at t too never started (at one instant an abort wins over
 * a start: the source is gone, nothing is read), its booking is withdrawn and the link is free
 * again from the end of the transfer before it; one that started earlier is cut and keeps the
 * link until its end. The caller starts the next transfer (link_kick, or the advance's loop). */
static void link_abort(struct kvsim_conform_runner *c, struct creq *q, int64_t t)
{
    if (!q->on_link || (q->xfer_started && q->xfer_start < t))
        return;
    if (q->xfer_started) {
        c->link_free = q->link_before;
        q->h.transfer_start_ns = q->h.transfer_end_ns = KVSIM_HANDOFF_TIME_NONE;
        q->h.transfer_bytes = 0;
        q->xfer_started = false;
        q->xfer_start = q->xfer_end = KVSIM_HANDOFF_TIME_NONE;
    }
    fifo_remove(&c->transfers, req_index(c, q));
    q->on_link = false;
}

/*
 * A decode schedule reserved q's destination (it parked the request, or admitted it at once on
 * local hits: nothing to move): DESTINATION_RESERVED, and its transfer joins the prefill
 * engine's link. On an idle link it starts at once (TRANSFERRING); behind another it waits.
 */
static int reserve(struct kvsim_conform_runner *c, struct creq *q, uint64_t missing,
                   const char *where)
{
    int rc = kvsim_handoff_reserve(&q->h, c->now_ns, missing);
    if (rc)
        return handoff_error(c, q, where, "the reservation", rc);
    q->xfer_start = q->xfer_end = q->link_before = KVSIM_HANDOFF_TIME_NONE;
    q->xfer_started = false;
    if (fifo_push(&c->transfers, req_index(c, q)))
        return conform__fail(c, "out of memory");
    q->on_link = true;
    c->stats.reservations++;
    return link_kick(c, where);
}

static int reservations_made(struct kvsim_conform_runner *c, const struct sched_step *st,
                             const char *where)
{
    for (uint32_t i = 0; i < st->num_parked; i++) {
        struct creq *q = &c->reqs[st->parked[i]->id - 1];
        if (q->disagg && q->r[CONFORM_DECODE] == st->parked[i] &&
            q->h.state == KVSIM_HANDOFF_DECODE_ROUTED &&
            reserve(c, q, st->parked[i]->loading_tokens, where))
            return conform__failed(c);
    }
    /* All local hits: admitted at once; vLLM still sends the empty read that lets the source
     * go (runtime/engine/disagg.c). */
    for (uint32_t i = 0; i < st->num_new; i++) {
        struct creq *q = &c->reqs[st->new_reqs[i]->id - 1];
        if (q->disagg && q->r[CONFORM_DECODE] == st->new_reqs[i] &&
            q->h.state == KVSIM_HANDOFF_DECODE_ROUTED && reserve(c, q, 0, where))
            return conform__failed(c);
    }
    return 0;
}

/* A prefill output finished producers: each pin enters SOURCE_PINNED now, with its deadline
 * (now + abort timeout); with "release": "immediate" the source goes back at once. */
static int pins_made(struct kvsim_conform_runner *c, const char *where)
{
    struct sched *ps = c->eng[CONFORM_PREFILL].s;
    uint32_t n;
    struct sched_pin *const *pins = sched_last_pinned(ps, &n);
    for (uint32_t i = 0; i < n; i++) {
        struct creq *q = &c->reqs[pins[i]->id - 1];
        if (!q->disagg)
            return conform__fail_kind(c, "handoff_error",
                                      "%s: the plain request '%s' was pinned at its finish", where,
                                      q->name);
        int64_t timeout = c->hcfg.release_immediately ? 0 : c->hcfg.abort_timeout_ns;
        int rc = kvsim_handoff_pin(&q->h, c->now_ns, pins[i]->kv.num_blocks, pins[i]->num_tokens,
                                   timeout);
        if (rc)
            return handoff_error(c, q, where, "the pin", rc);
        q->pin = pins[i];
        c->stats.pins++;
        if (c->hcfg.release_immediately) { /* the unfaithful what-if: nothing strands */
            sched_release_pin(ps, q->pin);
            q->pin = NULL;
            if ((rc = kvsim_handoff_release_source(&q->h, c->now_ns)) != 0)
                return handoff_error(c, q, where, "the immediate release", rc);
        } else if (q->h.deadline_ns != INT64_MAX && fifo_push(&c->deadlines, req_index(c, q))) {
            return conform__fail(c, "out of memory");
        }
    }
    /* A producer that finished normally without a full block computed (a prompt shorter than a
     * block; or one whose in-flight output came after its preemption freed its blocks, which
     * vLLM allows too) pins nothing: vLLM's request_finished frees it at once and sends no block
     * ids. Its handoff is pinned with no block and released at once, without a deadline; its
     * route completes it with nothing to move, and the decode engine computes the prompt
     * (runtime/engine/disagg.c, runtime/replay/disagg.c). */
    struct sched_request *const *f = sched_last_finished(ps, &n);
    for (uint32_t i = 0; i < n; i++) {
        struct creq *q = &c->reqs[f[i]->id - 1];
        if (!q->disagg || q->h.state != KVSIM_HANDOFF_PREFILLING ||
            f[i]->status == SCHED_FINISHED_ABORTED)
            continue;
        int rc = kvsim_handoff_pin(&q->h, c->now_ns, 0, 0, 0);
        if (rc == 0)
            rc = kvsim_handoff_release_source(&q->h, c->now_ns);
        if (rc)
            return handoff_error(c, q, where, "the end of a prefill with nothing to hand off", rc);
        c->stats.pins++;
        c->stats.unpinned_prefills++;
    }
    return 0;
}

/*
 * The handoff ends early at t: the client cancelled the request (client) or its pin's abort
 * deadline passed. ABORTED (a handoff already final ignores it), its transfer off the link if it
 * had not started (link_abort), the source freed, the decode side cancelled: a routed request
 * aborted, a reserved destination freed at once (the transfer never writes it now). A client cancel
 * also aborts a prefill still running (vLLM frees it at once: no pin) and a decode already running;
 * the abort timeout leaves a decode that runs on its own hits alone (runtime/engine/disagg.c
 * apply_cancel).
 */
static int cancel_handoff(struct kvsim_conform_runner *c, struct creq *q, int64_t t, bool client,
                          const char *where)
{
    int rc = kvsim_handoff_abort(&q->h, t);
    if (rc < 0)
        return handoff_error(c, q, where, client ? "the cancel" : "the abort timeout", rc);
    if (rc == KVSIM_HANDOFF_IGNORED) {
        note(&c->ignored, q->name);
    } else {
        c->stats.aborted_handoffs++;
        link_abort(c, q, t);
    }
    struct sched_request *pr = q->r[CONFORM_PREFILL], *dr = q->r[CONFORM_DECODE];
    if (client && pr && !sched_status_is_finished(pr->status)) {
        if ((rc = sched_abort(c->eng[CONFORM_PREFILL].s, pr)) != 0)
            return conform__sched_error(c, CONFORM_PREFILL, where, rc);
        note_finished(c, CONFORM_PREFILL);
    }
    if (q->pin) {
        sched_release_pin(c->eng[CONFORM_PREFILL].s, q->pin);
        q->pin = NULL;
        if ((rc = kvsim_handoff_release_source(&q->h, t)) < 0)
            return handoff_error(c, q, where, "the source's release", rc);
    }
    if (dr && !sched_status_is_finished(dr->status) && (client || dr->status != SCHED_RUNNING)) {
        bool loading = dr->status == SCHED_WAITING_FOR_REMOTE_KVS && !dr->recv_finished;
        struct sched *ds = c->eng[CONFORM_DECODE].s;
        if ((rc = sched_abort(ds, dr)) != 0)
            return conform__sched_error(c, CONFORM_DECODE, where, rc);
        note_finished(c, CONFORM_DECODE);
        if (loading && (rc = sched_load_finished(ds, dr, false)) != 0)
            return conform__sched_error(c, CONFORM_DECODE, where, rc);
    }
    return 0;
}

/* q's transfer ended at t: COMPLETED (the destination activated: its load finished, the next
 * decode schedule promotes it; the source released). After an abort it is a late fact. */
static int transfer_ended(struct kvsim_conform_runner *c, struct creq *q, int64_t t,
                          const char *where)
{
    int rc = kvsim_handoff_complete(&q->h, t);
    if (rc == KVSIM_HANDOFF_IGNORED) {
        note(&c->ignored, q->name);
        return 0;
    }
    if (rc)
        return handoff_error(c, q, where, "the transfer's end", rc);
    c->stats.completed_handoffs++;
    c->stats.transferred_tokens += q->h.transfer_tokens;
    if (q->pin) {
        sched_release_pin(c->eng[CONFORM_PREFILL].s, q->pin);
        q->pin = NULL;
    }
    struct sched_request *dr = q->r[CONFORM_DECODE];
    if (dr && dr->status == SCHED_WAITING_FOR_REMOTE_KVS && !dr->recv_finished &&
        (rc = sched_load_finished(c->eng[CONFORM_DECODE].s, dr, true)) != 0)
        return conform__sched_error(c, CONFORM_DECODE, where, rc);
    return 0;
}

/* The first pin of the deadline FIFO still held (released ones are skipped), or NULL. */
static struct creq *next_deadline_req(const struct kvsim_conform_runner *c, size_t *skip)
{
    for (size_t i = 0; i < fifo_len(&c->deadlines); i++) {
        struct creq *q = &c->reqs[fifo_peek(&c->deadlines, i)];
        if (q->pin) {
            if (skip)
                *skip = i;
            return q;
        }
    }
    return NULL;
}

/* The link's next event: its head's end if it started, else its start (only between the
 * events of one instant: after every op the head has started). INT64_MAX when the link is
 * idle. */
static int64_t link_event(const struct kvsim_conform_runner *c, bool *is_start)
{
    *is_start = false;
    if (fifo_empty(&c->transfers))
        return INT64_MAX;
    const struct creq *q = &c->reqs[fifo_peek(&c->transfers, 0)];
    if (q->xfer_started)
        return q->xfer_end;
    *is_start = true;
    return head_start(c, q);
}

int64_t conform__next_handoff_event(const struct kvsim_conform_runner *c)
{
    bool is_start;
    int64_t t = link_event(c, &is_start);
    const struct creq *d = next_deadline_req(c, NULL);
    if (d && d->h.deadline_ns < t)
        t = d->h.deadline_ns;
    return t;
}

/* Every handoff event at or before t, in time order; at one instant a transfer's end, then the
 * deadlines (an engine applies its messages before it expires pins: a transfer ending at its
 * deadline completes), then the next transfer's start (an abort wins over a start: a transfer
 * whose pin expires at its start never starts). */
static int handoff_events_until(struct kvsim_conform_runner *c, int64_t t, const char *where)
{
    for (;;) {
        bool is_start;
        int64_t te = link_event(c, &is_start), td = INT64_MAX;
        size_t skip = 0;
        struct creq *d = next_deadline_req(c, &skip);
        if (d)
            td = d->h.deadline_ns;
        if ((te < td ? te : td) > t)
            return 0;
        if (is_start ? te < td : te <= td) {
            struct creq *q = &c->reqs[fifo_peek(&c->transfers, 0)];
            if (is_start) {
                if (start_transfer(c, q, te, where))
                    return conform__failed(c);
                continue;
            }
            c->transfers.head++;
            q->on_link = false;
            if (transfer_ended(c, q, te, where))
                return conform__failed(c);
        } else {
            c->deadlines.head += skip + 1;
            c->stats.expired_pins++;
            if (cancel_handoff(c, d, td, false, where))
                return conform__failed(c);
        }
    }
}

/* A fact the lifecycle refuses (out of order, or about a request that has no handoff): the step
 * fails unless its expect lists the id under "rejected" (then nothing happened). */
static int reject(struct kvsim_conform_runner *c, json_t *st, const struct creq *q,
                  const char *where, const char *why)
{
    if (c->lenient)
        return OP_SKIPPED;
    json_t *want = json_object_get(json_object_get(st, "expect"), "rejected");
    for (size_t i = 0; i < json_array_size(want); i++)
        if (!strcmp(json_string_value(json_array_get(want, i)), q->name)) {
            note(&c->rejected, q->name);
            return 0;
        }
    return conform__fail(c,
                         "%s: rejected: %s (a step that expects it lists the id under "
                         "'rejected')",
                         where, why);
}

/* The decode request of q, from its add: the whole prompt reported by the connector as loadable
 * asynchronously, once (vLLM's get_num_new_matched_tokens for do_remote_prefill); with nothing
 * pinned, a plain request that computes its prompt. */
static int add_decode(struct kvsim_conform_runner *c, struct creq *q, const char *where)
{
    bool has_kv = q->h.pinned_blocks > 0;
    struct sched_request_params p;
    kvpool_token *prompt, *stops;
    int rc = add_params(c, q->add, where, &p, &prompt, &stops);
    if (rc == 0) {
        p.id = req_index(c, q) + 1;
        if (!json_object_get(q->add, "arrival"))
            p.arrival = (double)c->adds;
        p.external_tokens = has_kv ? p.num_prompt_tokens : 0;
        p.external_async = has_kv;
        p.external_once = has_kv;
        rc = sched_add(c->eng[CONFORM_DECODE].s, &p, &q->r[CONFORM_DECODE]);
        if (rc)
            rc = conform__fail(c, "%s: the decode engine cannot add request '%s': %s", where,
                               q->name, kvsim_strerror(rc));
    }
    free(prompt);
    free(stops);
    if (rc)
        return conform__failed(c);
    c->adds++;
    return 0;
}

/*
 * route: a decode engine was chosen (DECODE_ROUTED, a booking): the decode request joins its
 * waiting queue; with nothing pinned the handoff completes at once (the decode computes the
 * prompt). A route of a handoff already aborted finds no source: the decode request is
 * added and aborted at once (a clean abort: it holds nothing); a second route is ignored.
 */
int conform__op_route(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    const char *id = json_string_value(json_object_get(st, "id"));
    struct creq *q = conform__need_req(c, id, where);
    if (!q)
        return c->lenient ? OP_SKIPPED : conform__failed(c);
    char why[256];
    if (!q->disagg) {
        snprintf(why, sizeof why,
                 "request '%s' was added on the %s engine: a plain request has no handoff to "
                 "route",
                 id, conform__engine_name(q->eng));
        return reject(c, st, q, where, why);
    }
    int rc = kvsim_handoff_route(&q->h, c->now_ns, CONFORM_DECODE);
    if (rc < 0) {
        snprintf(why, sizeof why,
                 "the handoff of '%s' is %s: a route before its pin is out of order", id,
                 kvsim_handoff_state_name(q->h.state));
        return reject(c, st, q, where, why);
    }
    if (rc == KVSIM_HANDOFF_IGNORED) {
        note(&c->ignored, id);
        if (!kvsim_handoff_is_final(&q->h) || q->r[CONFORM_DECODE])
            return 0; /* routed already */
        c->stats.late_routes++;
        if (add_decode(c, q, where))
            return conform__failed(c);
        if ((rc = sched_abort(c->eng[CONFORM_DECODE].s, q->r[CONFORM_DECODE])) != 0)
            return conform__sched_error(c, CONFORM_DECODE, where, rc);
        note_finished(c, CONFORM_DECODE);
        return 0;
    }
    c->stats.routes++;
    if (add_decode(c, q, where))
        return conform__failed(c);
    /* Nothing pinned (a prompt shorter than a block): nothing to move, the handoff is over. */
    if (q->h.pinned_blocks == 0 && (rc = kvsim_handoff_complete_without_kv(&q->h, c->now_ns)) != 0)
        return handoff_error(c, q, where, "the completion without KV", rc);
    if (q->h.pinned_blocks == 0)
        c->stats.completed_handoffs++;
    return 0;
}

/* ---- schedule, output, abort --------------------------------------------------------------- */

int conform__op_schedule(struct kvsim_conform_runner *c, const char *where)
{
    int e = conform__cur(c);
    struct ceng *g = &c->eng[e];
    if (g->nout == MAX_OUTSTANDING)
        return conform__fail(c, "%s: too many schedules without output", where);
    uint64_t preempted0 = sched_num_preemptions(g->s);
    uint32_t deferred0 = sched_num_deferred_frees(g->s);
    int rc;
    struct sched_step *st = sched_schedule(g->s, &rc);
    if (!st)
        return conform__sched_error(c, e, where, rc);
    g->outstanding[g->nout++] = st;
    c->step = st;
    /* Deferred frees only drain in update: new entries during a schedule are exactly the
     * preempted victims whose blocks stay held behind an in-flight step (#49675). */
    uint32_t deferred1 = sched_num_deferred_frees(g->s);
    c->futile_now = deferred1 > deferred0 ? deferred1 - deferred0 : 0;
    uint64_t preempted = sched_num_preemptions(g->s) - preempted0;
    struct kvsim_conform_stats *k = &c->stats;
    k->schedules++;
    k->scheduled_tokens += st->total_tokens;
    k->preemptions += preempted;
    k->futile_preemptions += c->futile_now;
    if (preempted && st->total_tokens == 0)
        k->zero_progress_schedules++;
    if (c->futile_now > k->max_futile_in_one_schedule)
        k->max_futile_in_one_schedule = c->futile_now;
    if (c->disagg && e == CONFORM_DECODE)
        return reservations_made(c, st, where);
    return 0;
}

/* Lenient mode: removes the string s from the array named key of obj (drops an emptied key). */
static void drop_from_list(json_t *obj, const char *key, const char *s)
{
    json_t *a = json_object_get(obj, key);
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!strcmp(json_string_value(json_array_get(a, i)), s)) {
            json_array_remove(a, i);
            break;
        }
    if (a && json_array_size(a) == 0)
        json_object_del(obj, key);
}

/* A token that stops nothing: not the request's eos, not one of its stop tokens. */
static kvpool_token filler_token(const struct sched_request *r)
{
    for (kvpool_token t = 0;; t++) {
        bool stops = (int64_t)t == r->eos_token_id;
        for (uint32_t k = 0; k < r->num_stop_token_ids && !stops; k++)
            stops = r->stop_token_ids[k] == t;
        if (!stops)
            return t;
    }
}

int conform__op_output(struct kvsim_conform_runner *c, json_t *stj, json_t *eff, const char *where)
{
    int e = conform__cur(c);
    struct ceng *g = &c->eng[e];
    if (g->nout == 0) {
        if (c->lenient)
            return OP_SKIPPED;
        return conform__fail(c, "%s: no schedule%s%s%s is waiting for its output", where,
                             c->disagg ? " of the " : "", c->disagg ? conform__engine_name(e) : "",
                             c->disagg ? " engine" : "");
    }
    struct sched_step *st = g->outstanding[0];
    uint32_t n = st->num_scheduled;
    const kvpool_token **toks = calloc(n ? n : 1, sizeof *toks);
    uint32_t *counts = calloc(n ? n : 1, sizeof *counts);
    kvpool_token **owned = calloc(n ? n : 1, sizeof *owned);
    struct sched_request **recv = NULL;
    size_t nrecv = 0;
    int rc = 0;
    if (!toks || !counts || !owned)
        rc = conform__fail(c, "out of memory");
    json_t *sampled = json_object_get(stj, "sampled");
    const char *id;
    json_t *v;
    json_object_foreach(sampled, id, v)
    {
        if (rc)
            break;
        struct sched_request *r = need_on(c, id, e, where, NULL);
        uint32_t i = 0;
        while (r && i < n && st->scheduled[i].req != r)
            i++;
        if (!r || i == n) {
            if (c->lenient) { /* its add was removed, or the candidate scheduled it elsewhere */
                json_object_del(json_object_get(eff, "sampled"), id);
                continue;
            }
            rc = r ? conform__fail(c,
                                   "%s: key 'sampled': request '%s' was not scheduled in that step",
                                   where, id)
                   : conform__failed(c); /* need_on said why */
            break;
        }
        size_t cnt = 0, cap = 0;
        if (conform__tokens_parse(c, v, &owned[i], &cnt, &cap, where)) {
            rc = conform__failed(c);
            break;
        }
        toks[i] = owned[i];
        counts[i] = (uint32_t)cnt;
    }
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        const struct sched_request *r = st->scheduled[i].req;
        if (counts[i] || !st->scheduled[i].samples || sched_status_is_finished(r->status))
            continue;
        /* A model samples one token for every request whose chunk samples. The minimizer's
         * candidates shift what each step schedules, so it supplies one (recorded in the
         * effective step); with check_liveness a scenario must, or a stall it caused itself
         * would pass for a scheduler dead end. */
        if (c->lenient) {
            owned[i] = malloc(sizeof *owned[i]);
            if (!owned[i]) {
                rc = conform__fail(c, "out of memory");
                break;
            }
            owned[i][0] = filler_token(r);
            toks[i] = owned[i];
            counts[i] = 1;
            json_t *sm = json_object_get(eff, "sampled");
            if (!sm) /* `sampled` is optional */
                json_object_set_new(eff, "sampled", sm = json_object());
            json_object_set_new(sm, c->reqs[r->id - 1].name,
                                json_pack("[I]", (json_int_t)owned[i][0]));
        } else if (c->check_liveness) {
            rc = conform__fail(
                c,
                "%s: key 'sampled': request '%s' sampled in that step but gets no token "
                "(check_liveness needs one for every request whose chunk samples)",
                where, c->reqs[r->id - 1].name);
        }
    }
    json_t *fr = json_object_get(stj, "finished_recving");
    if (rc == 0 && fr) {
        recv = calloc(json_array_size(fr) + 1, sizeof *recv);
        size_t i;
        json_array_foreach(fr, i, v)
        {
            struct creq *q;
            struct sched_request *r = need_on(c, json_string_value(v), e, where, &q);
            /* An onboarding from the offload tiers ends with the transfer (an advance), and so
             * does a disaggregated decode's load: a report of it here would promote the
             * request under the transfer's feet. */
            bool onboarding = r && r->offload_load;
            bool handoff = r && q->disagg && e == CONFORM_DECODE;
            if ((!r || onboarding || handoff) && c->lenient) {
                drop_from_list(eff, "finished_recving", json_string_value(v));
                continue;
            }
            if (onboarding || handoff) {
                rc = conform__fail(c,
                                   "%s: key 'finished_recving': request '%s' is loading %s: its "
                                   "load ends with its transfer (advance)",
                                   where, json_string_value(v),
                                   onboarding ? "from the offload tiers"
                                              : "from the prefill engine");
                break;
            }
            if (!r) {
                rc = conform__failed(c);
                break;
            }
            recv[nrecv++] = r;
        }
    }
    json_t *fs = json_object_get(stj, "finished_sending");
    if (rc == 0 && fs) {
        size_t i;
        json_array_foreach(fs, i, v)
        {
            /* No request of this core waits for a send: the ids must exist, nothing else. */
            if (need_on(c, json_string_value(v), e, where, NULL))
                continue;
            if (!c->lenient) {
                rc = conform__failed(c);
                break;
            }
            drop_from_list(eff, "finished_sending", json_string_value(v));
        }
    }
    if (rc == 0) {
        struct sched_model_output out = {
            .tokens = toks,
            .num_tokens = counts,
            .finished_recving = recv,
            .num_finished_recving = (uint32_t)nrecv,
        };
        int src = sched_update(g->s, st, &out);
        memmove(g->outstanding, g->outstanding + 1, (g->nout - 1) * sizeof *g->outstanding);
        g->nout--;
        if (src)
            rc = conform__sched_error(c, e, where, src);
        note_finished(c, e);
        if (rc == 0 && c->disagg && e == CONFORM_PREFILL)
            rc = pins_made(c, where);
    }
    for (uint32_t i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(toks);
    free(counts);
    free(recv);
    return rc;
}

/*
 * abort. One-engine form: the request. Two-engine form: the client cancels the request on every
 * engine it is on; a disaggregated one through its handoff (cancel_handoff: the source freed,
 * the decode side cancelled, a prefill still running aborted).
 */
int conform__op_abort(struct kvsim_conform_runner *c, json_t *st, json_t *eff, const char *where)
{
    json_t *ids = json_object_get(st, "ids");
    json_t *one = json_object_get(st, "id");
    json_t *list = ids ? json_incref(ids) : json_pack("[O]", one);
    size_t i, nknown = 0;
    json_t *v;
    int rc = 0;
    for (int e = 0; e < c->neng; e++)
        if (!c->eng[e].finished)
            c->eng[e].finished = json_array();
    json_array_foreach(list, i, v)
    {
        struct creq *q = conform__need_req(c, json_string_value(v), where);
        if (!q && c->lenient) {
            if (ids)
                drop_from_list(eff, "ids", json_string_value(v));
            continue;
        }
        if (!q) {
            rc = conform__failed(c);
            break;
        }
        nknown++;
        if (q->disagg) {
            if ((rc = cancel_handoff(c, q, c->now_ns, true, where)) != 0)
                break;
            continue;
        }
        int a = sched_abort(c->eng[q->eng].s, q->r[q->eng]);
        if (a == -EALREADY)
            continue;
        if (a) {
            rc = conform__sched_error(c, q->eng, where, a);
            break;
        }
        note_finished(c, q->eng);
    }
    json_decref(list);
    /* A cancel that took the link's head off it lets the next transfer start now. */
    if (rc == 0 && c->disagg)
        rc = link_kick(c, where);
    if (rc == 0 && nknown == 0 && c->lenient)
        return OP_SKIPPED;
    return rc;
}

/* ---- KV-manager level ---------------------------------------------------------------------- */

int conform__op_kv_lookup(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    int e = conform__cur(c);
    struct creq *q;
    struct sched_request *r =
        need_on(c, json_string_value(json_object_get(st, "id")), e, where, &q);
    if (!r)
        return c->lenient ? OP_SKIPPED : conform__failed(c);
    uint32_t cap = r->kv.num_hashes + 1;
    kvpool_block_id *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return conform__fail(c, "out of memory");
    kvpool_lookup(sched_pool(c->eng[e].s), &r->kv, &q->hits[e], ids, cap);
    q->has_hits[e] = true;
    json_t *blocks = json_array();
    for (uint32_t i = 0; i < q->hits[e].num_blocks; i++)
        json_array_append_new(blocks, json_integer(ids[i]));
    free(ids);
    c->lookup = json_pack("{s:o,s:I}", "hit_blocks", blocks, "hit_tokens",
                          (json_int_t)q->hits[e].num_tokens);
    return 0;
}

int conform__op_kv_allocate(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    int e = conform__cur(c);
    struct creq *q;
    struct sched_request *r =
        need_on(c, json_string_value(json_object_get(st, "id")), e, where, &q);
    if (!r)
        return c->lenient ? OP_SKIPPED : conform__failed(c);
    json_t *uh = json_object_get(st, "use_hits");
    bool use_hits = !uh || json_is_true(uh);
    struct kvpool_alloc_args args = {
        .num_computed_tokens = r->num_computed_tokens,
        .num_new_tokens = (uint64_t)json_integer_value(json_object_get(st, "num_new_tokens")),
        .hits = use_hits && q->has_hits[e] ? &q->hits[e] : NULL,
        .is_admission = true,
    };
    struct kvpool_plan plan;
    struct kvpool *pool = sched_pool(c->eng[e].s);
    int rc = kvpool_prepare(pool, &r->kv, &args, &plan);
    if (rc < 0)
        return conform__fail(c, "%s: kv_allocate: %s", where, kvsim_strerror(rc));
    if (rc != KVPOOL_READY) {
        c->alloc = json_pack("{s:b,s:[]}", "fail", 1, "blocks");
        return 0;
    }
    rc = kvpool_commit(pool, &r->kv, &plan);
    if (rc)
        return conform__fail(c, "%s: kv_allocate commit: %s", where, kvsim_strerror(rc));
    q->has_hits[e] = false;
    json_t *blocks = json_array();
    for (uint32_t i = plan.first_new_index + plan.num_hit_blocks; i < r->kv.num_blocks; i++)
        json_array_append_new(blocks, json_integer(r->kv.blocks[i]));
    c->alloc = json_pack("{s:b,s:o}", "fail", 0, "blocks", blocks);
    return 0;
}

int conform__op_kv_free(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    int e = conform__cur(c);
    struct sched_request *r =
        need_on(c, json_string_value(json_object_get(st, "id")), e, where, NULL);
    if (!r)
        return c->lenient ? OP_SKIPPED : conform__failed(c);
    kvpool_free(sched_pool(c->eng[e].s), &r->kv);
    return 0;
}

/* ---- virtual time -------------------------------------------------------------------------- */

/* Moves virtual time; with tiers, applies every transfer that ends by then; in the two-engine
 * form, every handoff transfer that ends and every pin deadline that passes by then. */
int conform__op_advance(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    json_t *to = json_object_get(st, "to_ns"), *by = json_object_get(st, "by_ns");
    int64_t t;
    if (to) {
        t = (int64_t)json_integer_value(to);
        if (t < c->now_ns) {
            if (c->lenient) /* a removed step moved time less far: this one is moot */
                return OP_SKIPPED;
            return conform__fail(c, "%s: key 'to_ns': %" PRId64 " is before now (%" PRId64 ")",
                                 where, t, c->now_ns);
        }
    } else {
        int64_t d = (int64_t)json_integer_value(by);
        if (d >= MAX_NOW_NS - c->now_ns)
            return conform__fail(c, "%s: key 'by_ns': virtual time would pass %" PRId64, where,
                                 MAX_NOW_NS);
        t = c->now_ns + d;
    }
    if (c->disagg) {
        for (int e = 0; e < c->neng; e++)
            if (!c->eng[e].finished)
                c->eng[e].finished = json_array();
        int rc = handoff_events_until(c, t, where);
        c->now_ns = t;
        return rc;
    }
    c->now_ns = t;
    if (!c->tiers)
        return 0;
    int rc = kvsim_tiers_advance_to(c->tiers, t);
    if (rc < 0)
        return conform__fail_kind(c, "offload_error", "%s: offload: advance to %" PRId64 " ns: %s",
                                  where, t, kvsim_strerror(rc));
    return 0;
}
