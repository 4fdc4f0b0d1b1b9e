/*
 * routing.c - where each arrival goes: the kv router's prompt hashing and the router's choice
 * (replay__route), data-parallel deployments (the router picks the deployment, vLLM's DP load
 * balancer the rank), the routers' boundary, the engines' inboxes and the hashes they are handed,
 * the KV events fed to an event indexer, and route preparation (the kv router's hashing and
 * overlap lookups done in the phase before the boundary, on every thread).
 *
 * Threads: the coordinator at a boundary (the workers parked), except route preparation's
 * hashing and lookups and the event drain, which run inside a phase as each says.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/wfcqueue.h>

#include "runtime/replay/replay_internal.h"

#include "kvpool/base.h"
#include "kvpool/kvpool.h"
#include "runtime/engine/engine.h"
#include "runtime/input/input.h"

/*
 * inbox_push - hand request `req` to engine e's owner.
 * Context: the coordinator at a boundary (any thread may produce: the queue is multi-producer).
 * Wait-free; the node is the request's own, so nothing is allocated. Ordering: the consumer
 * dequeues after the next barrier, which orders the enqueue before it.
 */
static void inbox_push(struct replay *rp, uint32_t e, uint32_t req)
{
    cds_wfcq_enqueue(&rp->rt.inbox_head[e], &rp->rt.inbox_tail[e], &rp->rt.nodes[req]);
}

struct event_ctx {
    struct kvsim_router *router;
    uint32_t engine;
    int rc;
};

static void apply_event(void *ctx, const struct kvpool_event *ev)
{
    struct event_ctx *ec = ctx;
    int rc = kvsim_router_apply_event_owner(ec->router, ec->engine, ev);
    if (rc && !ec->rc)
        ec->rc = rc;
}

/* The router engine e is routed by, and e's index among its engines. */
static struct kvsim_router *router_of(const struct replay *rp, uint32_t e, uint32_t *index)
{
    bool decode = rp->num_prefill && e >= rp->num_prefill;
    *index = decode ? e - rp->num_prefill : e;
    return decode ? rp->dis.decode_router : rp->rt.router;
}

int replay__route_drain_events(struct replay *rp, uint32_t e)
{
    struct event_ctx ec = {NULL, 0, 0};
    ec.router = router_of(rp, e, &ec.engine);
    kvpool_events_drain(kvsim_engine_pool(rp->engines[e]), apply_event, &ec);
    return ec.rc;
}

/* ---- what the router sees (router.h, kvsim_router_set_view) ----------------------------------
 *
 * With the delayed view each engine hands its KV events and its load to rp->rt.sink at every
 * step's end, on its own thread (engine.h, kvsim_step_sink); they are staged in its router and
 * released, at the end of each phase, up to the instant the phase advanced the engine to: the
 * next boundary's routing sees exactly what happened by then minus the delay, whatever thread
 * advanced which engine.
 */

static int sink_events(void *ctx, uint32_t e, int64_t step_end, const struct kvpool_event *evs,
                       size_t n)
{
    uint32_t i;
    struct kvsim_router *r = router_of(ctx, e, &i);
    return kvsim_router_stage_events_owner(r, i, step_end, evs, n);
}

static void sink_load(void *ctx, uint32_t e, int64_t step_end, const struct kvsim_engine_pub *load)
{
    uint32_t i;
    struct kvsim_router *r = router_of(ctx, e, &i);
    kvsim_router_stage_load_owner(r, i, step_end, load);
}

int replay__route_view(struct replay *rp, struct kvsim_router *r, bool *delayed)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    enum kvsim_router_policy p = kvsim_router_policy(r);
    *delayed = cfg->router_view == KVSIM_ROUTER_VIEW_DELAYED &&
               (p == KVSIM_ROUTER_KV || p == KVSIM_ROUTER_LEAST_LOADED);
    int64_t ttl = p == KVSIM_ROUTER_KV ? cfg->router_predict_ttl_ns : 0;
    rp->rt.predicts |= ttl > 0;
    rp->rt.sink = (struct kvsim_step_sink){sink_events, sink_load, rp};
    if (!*delayed && ttl == 0)
        return 0;
    if (replay__route_units(rp, r) == 1) { /* one choice: what it sees decides nothing */
        rp->rt.view_reported |= *delayed;
        *delayed = false;
        return 0;
    }
    uint32_t ranks = r == rp->rt.router && rp->dp > 1 ? rp->dp : 1; /* a deployment's */
    return kvsim_router_set_view(r, *delayed ? KVSIM_ROUTER_VIEW_DELAYED : KVSIM_ROUTER_VIEW_EXACT,
                                 cfg->kv_event_delay_ns, ttl, ranks);
}

uint32_t replay__route_units(const struct replay *rp, const struct kvsim_router *r)
{
    if (r != rp->rt.router)
        return rp->num_decode; /* the decode router */
    return rp->num_prefill ? rp->num_prefill : rp->dp > 1 ? rp->num_deployments : rp->num_engines;
}

bool replay__route_delayed(const struct replay *rp, uint32_t e)
{
    return rp->rt.delayed[rp->num_prefill && e >= rp->num_prefill];
}

int replay__route_release(struct replay *rp, uint32_t e, int64_t now)
{
    if (!replay__route_delayed(rp, e))
        return 0;
    uint32_t i;
    struct kvsim_router *r = router_of(rp, e, &i);
    int rc = kvsim_engine_sink_flush(rp->engines[e]); /* nothing in its pool left unstaged */
    return rc ? rc : kvsim_router_release_owner(r, i, now);
}

/* Request req's prompt as token runs in *runs (grown to fit; *cap its capacity). Returns how many
 * or -ENOMEM. Context: the caller owns the buffer (the coordinator's, or a worker's own). */
static int64_t prompt_runs(const struct kvsim_trace *t, uint32_t req,
                           struct kvpool_token_run **runs, uint32_t *cap)
{
    uint32_t n = kvsim_prompt_runs(t, req, *runs, *cap);
    if (n > *cap) {
        struct kvpool_token_run *nr = realloc(*runs, n * sizeof *nr);
        if (!nr)
            return -ENOMEM;
        *runs = nr;
        *cap = n;
        kvsim_prompt_runs(t, req, *runs, n);
    }
    return n;
}

int64_t replay__route(struct replay *rp, struct kvsim_router *router,
                      const struct kvsim_engine_pub *const *pubs, uint32_t req, uint32_t bs,
                      const kvpool_hash *known, uint32_t num_known, uint32_t *num_hashes)
{
    const struct kvsim_req_spec *s = &rp->trace.reqs[req];
    uint32_t nh = 0;
    if (kvsim_router_policy(router) == KVSIM_ROUTER_KV) {
        int64_t nr = prompt_runs(&rp->trace, req, &rp->rt.runs, &rp->rt.cap_runs);
        if (nr < 0)
            return nr;
        uint32_t n = (uint32_t)nr;
        /* Hash only as far as some engine could match: start with a few blocks and double
         * while an engine still holds every hash so far (most prompts miss early). */
        uint32_t full = s->input_len / bs, want = full < 16 ? full : 16;
        if (kvsim_router_predicts(router)) /* what it routes counts as cached: all of it */
            want = full;
        int rc = kvsim_router_overlap_begin(router); /* each round looks up its new hashes */
        if (rc)
            return rc;
        for (;;) {
            if (want > rp->rt.cap_hashes) {
                kvpool_hash *nh2 = realloc(rp->rt.hashes, want * sizeof *nh2);
                if (!nh2)
                    return -ENOMEM;
                rp->rt.hashes = nh2;
                rp->rt.cap_hashes = want;
            }
            int64_t got;
            if (known && num_known >= want) { /* hashed before, at this block size */
                if (want > nh)
                    memcpy(rp->rt.hashes + nh, known + nh, (want - nh) * sizeof *known);
                got = want;
            } else {
                got = kvpool_hash_prompt_more(bs, NULL, 0, rp->rt.runs, n, rp->rt.hashes, nh, want);
            }
            if (got < 0)
                return (int)got;
            nh = (uint32_t)got;
            if (nh == full || kvsim_router_extend_overlaps(router, rp->rt.hashes, nh) < nh)
                break;
            want = want * 2 < full ? want * 2 : full;
        }
    }
    uint32_t blocks = (s->input_len + bs - 1) / bs;
    if (num_hashes)
        *num_hashes = nh;
    return kvsim_router_route(router, pubs, rp->rt.hashes, nh, blocks, s->input_len);
}

/* Keeps the nh hashes the router computed for req (sent to engine e) for e's admission: a
 * pointer to them when they were prepared (route_prep: they stay put until the admission),
 * otherwise a copy of rp->rt.hashes. Coordinator, at a boundary. Returns 0 or -ENOMEM. */
static int routed_push(struct replay *rp, uint32_t e, uint32_t req, uint32_t nh,
                       const kvpool_hash *prepared)
{
    struct routed_hashes *q = &rp->rt.routed_hashes[e];
    if (q->num_ent == q->cap_ent) {
        uint32_t nc = q->cap_ent ? 2 * q->cap_ent : 8;
        struct routed_entry *ne = realloc(q->ent, nc * sizeof *ne);
        if (!ne)
            return -ENOMEM;
        q->ent = ne;
        q->cap_ent = nc;
    }
    if (prepared) {
        q->ent[q->num_ent++] = (struct routed_entry){req, nh, 0, prepared};
        return 0;
    }
    if (q->num_hashes + nh > q->cap_hashes) {
        size_t nc = q->cap_hashes ? q->cap_hashes : 1024;
        while (nc < q->num_hashes + nh)
            nc *= 2;
        kvpool_hash *nhs = realloc(q->hashes, nc * sizeof *nhs);
        if (!nhs)
            return -ENOMEM;
        q->hashes = nhs;
        q->cap_hashes = nc;
    }
    memcpy(q->hashes + q->num_hashes, rp->rt.hashes, nh * sizeof *rp->rt.hashes);
    q->ent[q->num_ent++] = (struct routed_entry){req, nh, q->num_hashes, NULL};
    q->num_hashes += nh;
    return 0;
}

/* ---- route preparation ----------------------------------------------------------------------
 *
 * With the kv router, routing an arrival means hashing its prompt and asking every engine how
 * much of it it caches: on the coordinator, with the workers parked, that was most of the
 * serial time of a replay with many engines. Both are done in the phase that advances the
 * engines to the boundary where the arrivals are due, in parallel (struct route_prep): the
 * coordinator lists the arrivals it already knows are due there (open-loop arrivals, and session
 * turns already pending), each thread hashes the prompts it claims, then each engine's thread,
 * right after advancing it to the boundary, looks up every listed prompt in that engine's cache.
 * The engines' caches at the boundary are exactly what the boundary would have looked up, and
 * an overlap over a full prompt caps to what the router's incremental lookups gave, so every
 * decision is the same (kvsim_router_route_overlaps); arrivals found only at the boundary (a
 * turn released by a finish in the phase, a slot's next session) are routed as before.
 */

/* Whether request req was prepared for the current boundary: its index there, or -1. */
static int64_t prepared_slot(const struct replay *rp, uint32_t req)
{
    const struct route_prep *p = rp->rt.prep_ready;
    if (!p)
        return -1;
    uint32_t i = rp->rt.prep_slot[req];
    return i < p->num && p->reqs[i] == req ? (int64_t)i : -1;
}

static int prep_add(struct replay *rp, void *ctx, uint32_t req)
{
    struct route_prep *p = ctx;
    if (p->num == p->cap) {
        uint32_t nc = p->cap ? 2 * p->cap : 64;
        uint32_t *reqs = realloc(p->reqs, nc * sizeof *reqs);
        if (reqs)
            p->reqs = reqs;
        uint32_t *nhs = realloc(p->num_hashes, nc * sizeof *nhs);
        if (nhs)
            p->num_hashes = nhs;
        size_t *off = realloc(p->off, nc * sizeof *off);
        if (off)
            p->off = off;
        _Atomic uint32_t *hashed = malloc(nc * sizeof *hashed);
        if (!reqs || !nhs || !off || !hashed) {
            free(hashed);
            return -ENOMEM;
        }
        free(p->hashed);
        p->hashed = hashed;
        p->cap = nc;
    }
    rp->rt.prep_slot[req] = p->num;
    p->reqs[p->num++] = req;
    return 0;
}

/*
 * Lists the arrivals known to be due by rp->ep.b_next and sizes their hashes and overlaps, for the
 * phase about to advance the engines there (rp->rt.prep_now; NULL when there is nothing to
 * prepare). Coordinator, workers parked. Returns 0 or -ENOMEM.
 */
int replay__route_prep_collect(struct replay *rp)
{
    rp->rt.prep_now = NULL;
    if (!rp->rt.prep_on || rp->ep.b_next == INT64_MAX)
        return 0;
    struct route_prep *p = &rp->rt.prep[rp->rt.prep_fill];
    p->num = 0;
    p->boundary = INT64_MIN;
    int rc = replay__arrivals_known_by(rp, rp->ep.b_next, prep_add, p);
    if (rc || p->num == 0)
        return rc;
    uint32_t bs = rp->cfg->sched.block_size;
    size_t total = 0;
    for (uint32_t i = 0; i < p->num; i++) {
        p->num_hashes[i] = rp->trace.reqs[p->reqs[i]].input_len / bs;
        p->off[i] = total;
        total += p->num_hashes[i];
        atomic_init(&p->hashed[i], 0);
    }
    if (total > p->cap_hashes) {
        kvpool_hash *h = realloc(p->hashes, total * sizeof *h);
        if (!h)
            return -ENOMEM;
        p->hashes = h;
        p->cap_hashes = total;
    }
    p->stride = (p->num + 15) / 16 * 16; /* a cache line per engine's overlaps */
    if (rp->num_engines * p->stride > p->cap_ov) {
        uint32_t *ov = realloc(p->ov, rp->num_engines * p->stride * sizeof *ov);
        if (!ov)
            return -ENOMEM;
        p->ov = ov;
        p->cap_ov = rp->num_engines * p->stride;
    }
    atomic_init(&p->next_hash, 0);
    atomic_init(&p->rc, 0);
    p->boundary = rp->ep.b_next;
    rp->rt.prep_now = p;
    return 0;
}

/* Hashes the prompts of the phase's route preparation that thread w claims first. Context: every
 * replay thread taking part in the phase, before it takes engines. */
void replay__route_prep_hash(struct replay *rp, uint32_t w)
{
    struct route_prep *p = rp->rt.prep_now;
    if (!p)
        return;
    struct replay_worker *wk = &rp->thr.workers[w];
    uint32_t bs = rp->cfg->sched.block_size;
    for (;;) {
        uint32_t i = atomic_fetch_add_explicit(&p->next_hash, 1, memory_order_relaxed);
        if (i >= p->num)
            break;
        uint32_t req = p->reqs[i];
        int64_t rc = prompt_runs(&rp->trace, req, &wk->runs, &wk->cap_runs);
        if (rc >= 0)
            rc = kvpool_hash_prompt_more(bs, NULL, 0, wk->runs, (uint32_t)rc, p->hashes + p->off[i],
                                         0, p->num_hashes[i]);
        if (rc >= 0 && rc != p->num_hashes[i])
            rc = -EINVAL; /* a prompt shorter than its own length: the trace reader's bug */
        if (rc < 0) {
            int none = 0;
            atomic_compare_exchange_strong(&p->rc, &none, (int)rc);
        }
        atomic_store_explicit(&p->hashed[i], 1, memory_order_release);
    }
}

/* Engine e's overlap with every prompt of the phase's route preparation, once it is at the
 * boundary. Context: the thread that advanced e in the phase, after route_prep_hash. A prompt
 * another thread is still hashing is waited for (every prompt was claimed before any thread
 * got here). */
void replay__route_prep_overlaps(struct replay *rp, uint32_t e)
{
    struct route_prep *p = rp->rt.prep_now;
    int rc = kvsim_router_view_sync_owner(rp->rt.router, e); /* what it has not heard of */
    if (rc) {
        int none = 0;
        atomic_compare_exchange_strong(&p->rc, &none, rc);
        return;
    }
    for (uint32_t i = 0; i < p->num; i++) {
        while (!atomic_load_explicit(&p->hashed[i], memory_order_acquire))
            base_cpu_relax();
        p->ov[e * p->stride + i] =
            kvsim_router_overlap_on(rp->rt.router, e, p->hashes + p->off[i], p->num_hashes[i]);
    }
}

/* Data parallelism: the router picks the deployment (unless there is one), its balancer the
 * rank. Returns the engine or a negative errno; *nh as replay__route. */
static int64_t route_data_parallel(struct replay *rp, uint32_t req, uint32_t *nh)
{
    const struct kvsim_req_spec *s = &rp->trace.reqs[req];
    uint32_t bs = rp->cfg->sched.block_size;
    int64_t d = 0;
    *nh = 0;
    if (rp->num_deployments > 1 &&
        (d = replay__route(rp, rp->rt.router, rp->rt.dep_pubs, req, bs, NULL, 0, nh)) < 0)
        return d;
    uint32_t rank = kvsim_router_route(rp->rt.lb[d], rp->pubs + d * rp->dp, NULL, 0,
                                       (s->input_len + bs - 1) / bs, s->input_len);
    kvsim_router_book_rank(rp->rt.router, (uint32_t)d, rank); /* its booking: that rank's */
    return d * rp->dp + rank;
}

/* The routers' boundary (kvsim_router_boundary): with data parallelism each deployment's
 * balancer over its ranks, and the router over the deployments' summed loads. Coordinator. */
static void routers_boundary(struct replay *rp, int64_t now)
{
    rp->rt.view_at = now;
    if (rp->dp <= 1) {
        kvsim_router_boundary(rp->rt.router, rp->pubs, now);
        return;
    }
    for (uint32_t d = 0; d < rp->num_deployments; d++) {
        const struct kvsim_engine_pub *const *ranks = rp->pubs + d * rp->dp;
        kvsim_router_boundary(rp->rt.lb[d], ranks, now);
        struct kvsim_engine_pub *sum = &rp->rt.dep_pub[d];
        *sum = (struct kvsim_engine_pub){0};
        for (uint32_t k = 0; k < rp->dp; k++) {
            sum->active_blocks += ranks[k]->active_blocks;
            sum->queued_tokens += ranks[k]->queued_tokens;
            sum->num_running += ranks[k]->num_running;
            sum->num_waiting += ranks[k]->num_waiting;
            sum->num_unfinished += ranks[k]->num_unfinished;
            sum->kv_usage += ranks[k]->kv_usage / rp->dp;
        }
    }
    kvsim_router_boundary(rp->rt.router, rp->rt.dep_pubs, now);
}

/* Places one arrival due at t: hashes for the kv policy, the router's choice, the engine's
 * inbox. With disaggregated serving the arrival is the prefill: on a prefill engine (the first
 * ones). Returns the engine or a negative errno. */
static int64_t route_one(struct replay *rp, uint32_t req, int64_t t)
{
    uint32_t bs =
        rp->num_prefill ? rp->cfg->disagg.prefill_sched.block_size : rp->cfg->sched.block_size;
    uint32_t nh;
    const kvpool_hash *prepared = NULL;
    int64_t e, slot = prepared_slot(rp, req);
    if (slot >= 0) {
        const struct route_prep *p = rp->rt.prep_ready;
        const struct kvsim_req_spec *s = &rp->trace.reqs[req];
        nh = p->num_hashes[slot];
        prepared = p->hashes + p->off[slot];
        e = kvsim_router_route_overlaps(rp->rt.router, rp->pubs, p->ov + slot, p->stride, nh,
                                        (s->input_len + bs - 1) / bs, s->input_len);
    } else if (rp->dp > 1) {
        e = route_data_parallel(rp, req, &nh);
    } else {
        e = replay__route(rp, rp->rt.router, rp->pubs, req, bs, NULL, 0, &nh);
    }
    if (e < 0)
        return (int)e;
    if (nh) {
        int rc = routed_push(rp, (uint32_t)e, req, nh, prepared);
        if (rc)
            return rc;
    }
    rp->rt.routed++;
    if (rp->rt.num_arrived == rp->rt.cap_arrived) {
        uint32_t nc = rp->rt.cap_arrived ? 2 * rp->rt.cap_arrived : 64;
        struct arrived *na = realloc(rp->rt.arrived, nc * sizeof *na);
        if (!na)
            return -ENOMEM;
        rp->rt.arrived = na;
        rp->rt.cap_arrived = nc;
    }
    rp->rt.arrived[rp->rt.num_arrived++] = (struct arrived){req, (uint32_t)e, t};
    rp->rt.arrive_at[req] = t;
    if (rp->num_prefill) /* ids never reused: one handoff per request */
        kvsim_handoff_init(&rp->dis.handoffs[req], (uint64_t)req + 1, req, (int32_t)e);
    if (rp->arr.next_turn[req] >= 0)
        rp->arr.parents_in_flight++;
    else if (rp->arr.concurrency && !rp->arr.sessions_exhausted) {
        rp->arr.slot_parent[req] = 1; /* its session's last turn: its finish frees the slot */
        rp->arr.parents_in_flight++;
        rp->arr.slot_parents++;
    }
    inbox_push(rp, (uint32_t)e, req);
    return e;
}

int replay__route_due(struct replay *rp)
{
    /* The overlaps prepared in the phase that ended here, where there are some. The last
     * boundary's routed hashes were all taken: every inbox was drained since. */
    struct route_prep *made = &rp->rt.prep[rp->rt.prep_fill];
    rp->rt.prep_ready = NULL;
    if (made->num && made->boundary == rp->ep.b_cur) {
        rp->rt.prep_ready = made; /* admitted in the next phase, which fills the other one */
        rp->rt.prep_fill ^= 1;
    }
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        struct routed_hashes *q = &rp->rt.routed_hashes[e];
        q->num_hashes = 0;
        q->num_ent = q->next_ent = 0;
    }
    routers_boundary(rp, rp->ep.b_cur);
    rp->rt.num_arrived = 0;
    for (int64_t req; (req = replay__take_arrival(rp, rp->ep.b_cur)) >= 0;) {
        int64_t e = route_one(rp, (uint32_t)req, rp->ep.b_cur);
        if (e < 0)
            return (int)e;
    }
    return 0;
}

int64_t replay__route_at(struct replay *rp, uint32_t req, int64_t t)
{
    if (t != rp->rt.view_at) { /* the engines as the routers see them at t */
        for (uint32_t e = 0; e < rp->num_engines; e++) {
            int rc = replay__route_release(rp, e, t);
            if (rc)
                return rc;
        }
        routers_boundary(rp, t);
    }
    return route_one(rp, req, t);
}
