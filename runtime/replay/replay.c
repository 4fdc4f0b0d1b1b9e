/*
 * replay.c - the multi-engine replay (replay.h): N engines on T worker threads behind a router,
 * in virtual time.
 *
 * Conservative synchronisation in epochs. At a boundary B the coordinator (thread 0) turns
 * finished session turns into follow-up arrivals, feeds the engines' KV events to the router in
 * engine-id order, routes every arrival due at B, and picks the next boundary B' (the next
 * arrival, or earlier when a running session turn could complete and release its follow-up
 * before it). Then every worker admits its engines' new arrivals at B and advances them to B'
 * in parallel; each engine is taken by one thread per phase (work: its own engines i mod T
 * first, then any left) and nothing else touches it in between. Each
 * engine's evolution depends only on what it was given, and the router only on what engines
 * published at boundaries, so results are identical for any thread count.
 *
 * The barrier spins (up to 200 us) only while spinning has recently paid, and never with more
 * threads than CPUs; otherwise it sleeps on a futex (barrier_wait).
 *
 * A shared G3 (--g3-shared) lives in the block registry: every replay thread is then registered
 * with it (QSBR), reports a quiescent state after each engine advance and is offline while it
 * waits at the barrier, joins or prints. At each boundary the coordinator merges the engines'
 * G3 logs into the shared LRU (kvsim_g3_shared_boundary) before routing.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <urcu/wfcqueue.h>

#include "runtime/replay/replay_internal.h"

#include "kvpool/base.h"
#include "kvpool/kvpool.h"
#include "runtime/engine/engine.h"
#include "runtime/input/input.h"
#include "runtime/kvsim.h" /* the error codes (KVSIM_E*, kvsim_strerror) */
#include "runtime/replay/replay.h"
#include "runtime/report/report.h"

/* ---- barrier ------------------------------------------------------------------------------ */

#define BARRIER_SPIN_NS     INT64_C(200000) /* the longest spin: 200 us */
#define BARRIER_MAX_BACKOFF 256u            /* waits that sleep at once after spins that failed */

/*
 * barrier_wait - wait until all `parties` threads have arrived.
 * Context: every replay thread, once per phase boundary; never while holding anything another
 * party needs. w is the caller's own waiter state (NULL: never spin). Returns when the last
 * party arrives.
 * Ordering: the last arrival's release increment of `generation` pairs with every waiter's
 * acquire load, so everything any party wrote before arriving is visible to all after. The last
 * arrival wakes only when somebody sleeps: `sleepers` and `generation` are both sequentially
 * consistent, so either the waker sees the sleeper or the sleeper's futex wait sees the new
 * generation.
 * Waiting adapts (docs/replay.md, "Threads"): a waiter spins (up to b->spin_ns, and never when
 * threads > CPUs: spin_ns 0) only while spinning has recently paid. A spin that ends with the
 * barrier open resets the backoff; one that runs out and sleeps makes the next 1, 2, 4, ... 256
 * waits sleep at once, and the wait after them spins again to see whether it pays now. So phases
 * tens of microseconds apart (a disaggregated replay's) keep their cheap spins, and waits that
 * spinning never shortens (the other party preempted on a busy machine, a long serial boundary)
 * cost one futex sleep instead of 200 us of CPU.
 */
static void barrier_wait(struct barrier *b, struct barrier_waiter *w)
{
    uint32_t gen = atomic_load_explicit(&b->generation, memory_order_acquire);
    if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) + 1 == b->parties) {
        atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
        /* Release: everything written before the barrier is visible after it. */
        atomic_fetch_add_explicit(&b->generation, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst))
            base_futex_wake(&b->generation, INT_MAX);
        return;
    }
    bool spin = b->spin_ns > 0 && w && w->skip == 0;
    if (w && w->skip)
        w->skip--;
    if (spin) {
        int64_t spin_until = base_monotonic_ns() + b->spin_ns;
        for (uint32_t n = 1;; n++) {
            if (atomic_load_explicit(&b->generation, memory_order_acquire) != gen) {
                w->backoff = 0; /* it paid */
                return;
            }
            if (n % 64 == 0 && base_monotonic_ns() >= spin_until)
                break;
            base_cpu_relax();
        }
        w->backoff = w->backoff
                         ? (w->backoff < BARRIER_MAX_BACKOFF ? 2 * w->backoff : BARRIER_MAX_BACKOFF)
                         : 1;
        w->skip = w->backoff;
    }
    atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
    while (atomic_load_explicit(&b->generation, memory_order_seq_cst) == gen)
        base_futex_wait(&b->generation, gen, -1);
    atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
}

/* ---- the replay ----------------------------------------------------------------------------- */

static bool fu_less(const struct follow_up *a, const struct follow_up *b)
{
    return a->t < b->t || (a->t == b->t && a->req < b->req);
}

static int follow_up_cmp(const void *a, const void *b)
{
    return fu_less(a, b) ? -1 : fu_less(b, a) ? 1 : 0;
}

static int heap_push(struct replay *rp, struct follow_up f)
{
    if (rp->heap_len == rp->heap_cap) {
        size_t nc = rp->heap_cap ? rp->heap_cap * 2 : 64;
        struct follow_up *nh = realloc(rp->heap, nc * sizeof *nh);
        if (!nh)
            return -ENOMEM;
        rp->heap = nh;
        rp->heap_cap = nc;
    }
    size_t i = rp->heap_len++;
    while (i > 0 && fu_less(&f, &rp->heap[(i - 1) / 2])) {
        rp->heap[i] = rp->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    rp->heap[i] = f;
    return 0;
}

static struct follow_up heap_pop(struct replay *rp)
{
    struct follow_up top = rp->heap[0], last = rp->heap[--rp->heap_len];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= rp->heap_len)
            break;
        if (c + 1 < rp->heap_len && fu_less(&rp->heap[c + 1], &rp->heap[c]))
            c++;
        if (!fu_less(&rp->heap[c], &last))
            break;
        rp->heap[i] = rp->heap[c];
        i = c;
    }
    if (rp->heap_len)
        rp->heap[i] = last;
    return top;
}

/* Next open-loop request (first turns and independent requests), in trace order; none in a
 * closed loop (they arrive when a slot frees). */
static int64_t next_open_arrival(struct replay *rp)
{
    if (rp->concurrency)
        return INT64_MAX;
    while (rp->open_cursor < rp->trace.num_reqs && rp->trace.reqs[rp->open_cursor].prev_turn >= 0)
        rp->open_cursor++;
    return rp->open_cursor < rp->trace.num_reqs ? rp->trace.reqs[rp->open_cursor].arrival_ns
                                                : INT64_MAX;
}

/* Closed loop: the next pending session's first turn, or -1 when every session is out (then
 * no finish releases anything: the slot parents still in flight stop counting). */
static int32_t take_session(struct replay *rp)
{
    while (rp->session_cursor < rp->trace.num_reqs &&
           rp->trace.reqs[rp->session_cursor].prev_turn >= 0)
        rp->session_cursor++;
    if (rp->session_cursor < rp->trace.num_reqs)
        return (int32_t)rp->session_cursor++;
    if (!rp->sessions_exhausted) {
        rp->sessions_exhausted = true;
        rp->parents_in_flight -= rp->slot_parents;
        rp->slot_parents = 0;
        for (size_t i = 0; i < rp->trace.num_reqs; i++)
            rp->releases[i] = rp->next_turn[i];
    }
    return -1;
}

/* Whether request req's finish releases a session slot (closed loop, sessions pending). */
static bool releases_slot(const struct replay *rp, uint32_t req)
{
    return rp->concurrency && !rp->sessions_exhausted && rp->slot_parent[req];
}

static int64_t next_arrival(struct replay *rp)
{
    int64_t a = next_open_arrival(rp);
    if (rp->heap_len && rp->heap[0].t < a)
        a = rp->heap[0].t;
    return a;
}

/*
 * inbox_push - hand request `req` to engine e's owner.
 * Context: the coordinator at a boundary (any thread may produce: the queue is multi-producer).
 * Wait-free; the node is the request's own, so nothing is allocated. Ordering: the consumer
 * dequeues after the next barrier, which orders the enqueue before it.
 */
static void inbox_push(struct replay *rp, uint32_t e, uint32_t req)
{
    cds_wfcq_enqueue(&rp->inbox_head[e], &rp->inbox_tail[e], &rp->nodes[req]);
}

static void apply_event(void *ctx, const struct kvpool_event *ev)
{
    struct event_ctx *ec = ctx;
    int rc = kvsim_router_apply_event_owner(ec->router, ec->engine, ev);
    if (rc && !ec->rc)
        ec->rc = rc;
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
        int64_t nr = prompt_runs(&rp->trace, req, &rp->runs, &rp->cap_runs);
        if (nr < 0)
            return nr;
        uint32_t n = (uint32_t)nr;
        /* Hash only as far as some engine could match: start with a few blocks and double
         * while an engine still holds every hash so far (most prompts miss early). */
        uint32_t full = s->input_len / bs, want = full < 16 ? full : 16;
        kvsim_router_overlap_begin(router); /* each round looks up only its new hashes */
        for (;;) {
            if (want > rp->cap_hashes) {
                kvpool_hash *nh2 = realloc(rp->hashes, want * sizeof *nh2);
                if (!nh2)
                    return -ENOMEM;
                rp->hashes = nh2;
                rp->cap_hashes = want;
            }
            int64_t got;
            if (known && num_known >= want) { /* hashed before, at this block size */
                if (want > nh)
                    memcpy(rp->hashes + nh, known + nh, (want - nh) * sizeof *known);
                got = want;
            } else {
                got = kvpool_hash_prompt_more(bs, NULL, 0, rp->runs, n, rp->hashes, nh, want);
            }
            if (got < 0)
                return (int)got;
            nh = (uint32_t)got;
            if (nh == full || kvsim_router_extend_overlaps(router, rp->hashes, nh) < nh)
                break;
            want = want * 2 < full ? want * 2 : full;
        }
    }
    uint32_t blocks = (s->input_len + bs - 1) / bs;
    if (num_hashes)
        *num_hashes = nh;
    return kvsim_router_route(router, pubs, rp->hashes, nh, blocks, s->input_len);
}

/* Keeps the nh hashes the router computed for req (sent to engine e) for e's admission: a
 * pointer to them when they were prepared (route_prep: they stay put until the admission),
 * otherwise a copy of rp->hashes. Coordinator, at a boundary. Returns 0 or -ENOMEM. */
static int routed_push(struct replay *rp, uint32_t e, uint32_t req, uint32_t nh,
                       const kvpool_hash *prepared)
{
    struct routed_hashes *q = &rp->routed_hashes[e];
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
    memcpy(q->hashes + q->num_hashes, rp->hashes, nh * sizeof *rp->hashes);
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
    const struct route_prep *p = rp->prep_ready;
    if (!p)
        return -1;
    uint32_t i = rp->prep_slot[req];
    return i < p->num && p->reqs[i] == req ? (int64_t)i : -1;
}

static int prep_add(struct replay *rp, struct route_prep *p, uint32_t req)
{
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
    rp->prep_slot[req] = p->num;
    p->reqs[p->num++] = req;
    return 0;
}

/* The pending follow-ups due by t, from heap slot i down (the heap's order prunes the rest). */
static int prep_add_heap(struct replay *rp, struct route_prep *p, size_t i, int64_t t)
{
    if (i >= rp->heap_len || rp->heap[i].t > t)
        return 0;
    int rc = prep_add(rp, p, rp->heap[i].req);
    if (rc == 0)
        rc = prep_add_heap(rp, p, 2 * i + 1, t);
    if (rc == 0)
        rc = prep_add_heap(rp, p, 2 * i + 2, t);
    return rc;
}

/*
 * Lists the arrivals known to be due by rp->b_next and sizes their hashes and overlaps, for the
 * phase about to advance the engines there (rp->prep_now; NULL when there is nothing to
 * prepare). Coordinator, workers parked. Returns 0 or -ENOMEM.
 */
static int route_prep_collect(struct replay *rp)
{
    rp->prep_now = NULL;
    if (!rp->prep_on || rp->b_next == INT64_MAX)
        return 0;
    struct route_prep *p = &rp->prep[rp->prep_fill];
    p->num = 0;
    p->boundary = INT64_MIN;
    int rc = 0;
    if (!rp->concurrency) /* open loop: first turns and independent requests, in trace order */
        for (size_t c = rp->open_cursor; c < rp->trace.num_reqs && rc == 0; c++) {
            if (rp->trace.reqs[c].prev_turn >= 0)
                continue;
            if (rp->trace.reqs[c].arrival_ns > rp->b_next)
                break;
            rc = prep_add(rp, p, (uint32_t)c);
        }
    if (rc == 0)
        rc = prep_add_heap(rp, p, 0, rp->b_next);
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
    p->boundary = rp->b_next;
    rp->prep_now = p;
    return 0;
}

/* Hashes the prompts of the phase's route preparation that thread w claims first. Context: every
 * replay thread taking part in the phase, before it takes engines. */
static void route_prep_hash(struct replay *rp, uint32_t w)
{
    struct route_prep *p = rp->prep_now;
    if (!p)
        return;
    struct replay_worker *wk = &rp->workers[w];
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
static void route_prep_overlaps(struct replay *rp, uint32_t e)
{
    struct route_prep *p = rp->prep_now;
    for (uint32_t i = 0; i < p->num; i++) {
        while (!atomic_load_explicit(&p->hashed[i], memory_order_acquire))
            base_cpu_relax();
        p->ov[e * p->stride + i] =
            kvsim_router_overlap_on(rp->router, e, p->hashes + p->off[i], p->num_hashes[i]);
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
        (d = replay__route(rp, rp->router, rp->dep_pubs, req, bs, NULL, 0, nh)) < 0)
        return d;
    uint32_t rank = kvsim_router_route(rp->lb[d], rp->pubs + d * rp->dp, NULL, 0,
                                       (s->input_len + bs - 1) / bs, s->input_len);
    return d * rp->dp + rank;
}

/* The routers' boundary (kvsim_router_boundary): with data parallelism each deployment's
 * balancer over its ranks, and the router over the deployments' summed loads. Coordinator. */
static void routers_boundary(struct replay *rp)
{
    if (rp->dp <= 1) {
        kvsim_router_boundary(rp->router, rp->pubs, rp->b_cur);
        return;
    }
    for (uint32_t d = 0; d < rp->num_deployments; d++) {
        const struct kvsim_engine_pub *const *ranks = rp->pubs + d * rp->dp;
        kvsim_router_boundary(rp->lb[d], ranks, rp->b_cur);
        struct kvsim_engine_pub *sum = &rp->dep_pub[d];
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
    kvsim_router_boundary(rp->router, rp->dep_pubs, rp->b_cur);
}

/* Places one arrival: hashes for the kv policy, the router's choice, the engine's inbox. With
 * disaggregated serving the arrival is the prefill: on a prefill engine (the first ones). */
static int route_one(struct replay *rp, uint32_t req)
{
    uint32_t bs =
        rp->num_prefill ? rp->cfg->disagg.prefill_sched.block_size : rp->cfg->sched.block_size;
    uint32_t nh;
    const kvpool_hash *prepared = NULL;
    int64_t e, slot = prepared_slot(rp, req);
    if (slot >= 0) {
        const struct route_prep *p = rp->prep_ready;
        const struct kvsim_req_spec *s = &rp->trace.reqs[req];
        nh = p->num_hashes[slot];
        prepared = p->hashes + p->off[slot];
        e = kvsim_router_route_overlaps(rp->router, rp->pubs, p->ov + slot, p->stride, nh,
                                        (s->input_len + bs - 1) / bs, s->input_len);
    } else if (rp->dp > 1) {
        e = route_data_parallel(rp, req, &nh);
    } else {
        e = replay__route(rp, rp->router, rp->pubs, req, bs, NULL, 0, &nh);
    }
    if (e < 0)
        return (int)e;
    if (nh) {
        int rc = routed_push(rp, (uint32_t)e, req, nh, prepared);
        if (rc)
            return rc;
    }
    rp->routed++;
    if (rp->num_arrived == rp->cap_arrived) {
        uint32_t nc = rp->cap_arrived ? 2 * rp->cap_arrived : 64;
        struct arrived *na = realloc(rp->arrived, nc * sizeof *na);
        if (!na)
            return -ENOMEM;
        rp->arrived = na;
        rp->cap_arrived = nc;
    }
    rp->arrived[rp->num_arrived++] = (struct arrived){req, (uint32_t)e};
    if (rp->num_prefill) /* ids never reused: one handoff per request */
        kvsim_handoff_init(&rp->handoffs[req], (uint64_t)req + 1, req, (int32_t)e);
    if (rp->next_turn[req] >= 0)
        rp->parents_in_flight++;
    else if (rp->concurrency && !rp->sessions_exhausted) {
        rp->slot_parent[req] = 1; /* its session's last turn: its finish frees the slot */
        rp->parents_in_flight++;
        rp->slot_parents++;
    }
    inbox_push(rp, (uint32_t)e, req);
    return 0;
}

/* The CPUs this process may run on (its affinity mask, e.g. under taskset or a container's
 * cpuset), or 0 when unknown. */
static uint32_t replay_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (uint32_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 0;
}

/* This thread's CPU time, ns (the accounting's clock). */
static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * The accounting's clock. A CPU-time read is a system call (about a microsecond on a
 * paravirtualised VM), and a 64-engine replay makes millions: uncorrected, they were most of
 * what the accounting measured. So each thread counts its reads (acct_clock), the replay
 * measures what one read costs before it starts (acct_clock_cost: the median gap between
 * back-to-back reads), and every measured interval gives back one read's cost for its own pair
 * of reads and one for each read made inside it (acct_net).
 */
static _Thread_local uint64_t acct_reads; /* this thread's acct_clock calls */

static int64_t acct_clock(void)
{
    acct_reads++;
    return thread_cpu_ns();
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t acct_clock_cost(void)
{
    int64_t gap[31], prev = thread_cpu_ns();
    for (int i = 0; i < 31; i++) {
        int64_t now = thread_cpu_ns();
        gap[i] = now - prev;
        prev = now;
    }
    qsort(gap, 31, sizeof *gap, cmp_i64);
    return gap[15];
}

/* An interval from t0 (read when acct_reads was reads0, after the read) to now, less the cost
 * of its reads: its own pair and the ones made inside it. Never negative. */
static int64_t acct_net(const struct replay *rp, int64_t t0, uint64_t reads0)
{
    int64_t t1 = acct_clock();
    uint64_t inside = acct_reads - reads0 - 1;
    int64_t d = t1 - t0 - rp->acct.clock_ns * (int64_t)(1 + inside);
    return d > 0 ? d : 0;
}

/* The epoch barrier for replay thread w: offline while it waits (a shared G3's grace periods
 * must not wait for a parked thread); with the accounting on, its CPU and wall time go to w's
 * wait. */
static void epoch_barrier(struct replay *rp, uint32_t w)
{
    int64_t cpu0 = 0, wall0 = 0;
    uint64_t reads0 = 0;
    if (rp->acct.on) {
        cpu0 = acct_clock();
        reads0 = acct_reads;
        wall0 = base_monotonic_ns();
    }
    kvsim_tier_topology_thread_offline(rp->tiers);
    barrier_wait(&rp->barrier, &rp->workers[w].waiter);
    kvsim_tier_topology_thread_online(rp->tiers);
    if (rp->acct.on) {
        rp->acct.thr[w].wait_cpu_ns += acct_net(rp, cpu0, reads0);
        rp->acct.thr[w].wait_wall_ns += base_monotonic_ns() - wall0;
    }
}

/* Boundary work at rp->b_cur (coordinator, all workers parked). Returns 0, -ENOMEM, or
 * KVSIM_EINVARIANT (err says why) for a follow-up due before b_cur: the lookahead missed it. */
static int boundary(struct replay *rp, char *err, size_t errlen)
{
    /* 0. The shared G3 as of b_cur: the engines' writes and hits of the epoch, merged. */
    int rc0 = kvsim_tier_topology_boundary(rp->tiers, rp->b_cur);
    if (rc0)
        return rc0;
    /* 1. Finished turns release their follow-ups, in engine order; last turns their session
     * slots (closed loop), gathered and given out in (time, request) order below. */
    size_t nfreed = 0;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        uint32_t n;
        const struct kvsim_engine_done *d = kvsim_engine_take_done(rp->engines[e], &n);
        for (uint32_t i = 0; i < n; i++) {
            int32_t nx = rp->next_turn[d[i].req];
            if (nx < 0 && releases_slot(rp, d[i].req)) {
                rp->slot_parent[d[i].req] = 0;
                rp->parents_in_flight--;
                rp->slot_parents--;
                if (nfreed == rp->cap_freed) {
                    size_t nc = rp->cap_freed ? 2 * rp->cap_freed : 64;
                    struct follow_up *nf = realloc(rp->freed, nc * sizeof *nf);
                    if (!nf)
                        return -ENOMEM;
                    rp->freed = nf;
                    rp->cap_freed = nc;
                }
                rp->freed[nfreed++] = (struct follow_up){d[i].finish_ns, d[i].req};
            }
            if (nx < 0)
                continue;
            rp->parents_in_flight--;
            int64_t t;
            if (!kvsim_clock_add(d[i].finish_ns, rp->trace.reqs[nx].delay_ns, &t)) {
                snprintf(err, errlen,
                         "request %" PRId32 " (a session's next turn, trace line %" PRIu32
                         "): its parent's finish at %" PRId64 " ns plus its delay of %" PRId64
                         " ns passes the clock's last instant (%" PRId64 " ns, int64)",
                         nx, rp->trace.reqs[nx].line, d[i].finish_ns, rp->trace.reqs[nx].delay_ns,
                         (int64_t)KVSIM_CLOCK_END_NS);
                return -EOVERFLOW;
            }
            if (t < rp->b_cur) {
                snprintf(err, errlen,
                         "internal error: request %" PRId32
                         " (a session's next turn) was due at %" PRId64
                         " ns, found at the boundary %" PRId64 " ns",
                         nx, t, rp->b_cur);
                return KVSIM_EINVARIANT;
            }
            int rc = heap_push(rp, (struct follow_up){t, (uint32_t)nx});
            if (rc)
                return rc;
        }
    }
    if (nfreed) {
        qsort(rp->freed, nfreed, sizeof *rp->freed, follow_up_cmp);
        for (size_t i = 0; i < nfreed; i++) {
            if (rp->freed[i].t < rp->b_cur) {
                snprintf(err, errlen,
                         "internal error: request %" PRIu32 " freed a session slot at %" PRId64
                         " ns, found at the boundary %" PRId64 " ns",
                         rp->freed[i].req, rp->freed[i].t, rp->b_cur);
                return KVSIM_EINVARIANT;
            }
            int32_t next = take_session(rp);
            if (next < 0)
                break;
            int rc = heap_push(rp, (struct follow_up){rp->freed[i].t, (uint32_t)next});
            if (rc)
                return rc;
        }
    }
    /* 2. Route every arrival due now, in (time, request) order, with the overlaps prepared in
     * the phase that ended here where there are some. The last boundary's routed hashes were
     * all taken: every inbox was drained since. */
    struct route_prep *made = &rp->prep[rp->prep_fill];
    rp->prep_ready = NULL;
    if (made->num && made->boundary == rp->b_cur) {
        rp->prep_ready = made; /* admitted in the next phase, which fills the other one */
        rp->prep_fill ^= 1;
    }
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        struct routed_hashes *q = &rp->routed_hashes[e];
        q->num_hashes = 0;
        q->num_ent = q->next_ent = 0;
    }
    routers_boundary(rp);
    rp->num_arrived = 0;
    for (;;) {
        int64_t a = next_open_arrival(rp);
        bool from_heap =
            rp->heap_len &&
            (rp->heap[0].t < a || (rp->heap[0].t == a && rp->heap[0].req < rp->open_cursor));
        int64_t t = from_heap ? rp->heap[0].t : a;
        if (t > rp->b_cur || t == INT64_MAX)
            break;
        uint32_t req;
        if (from_heap) {
            req = heap_pop(rp).req;
        } else {
            req = (uint32_t)rp->open_cursor++;
        }
        int rc = route_one(rp, req);
        if (rc)
            return rc;
    }
    return 0;
}

/* Fewest tokens request req could produce before it finishes, admitted now (engine.c's
 * min_parent_remaining for a request with none yet): its output length, the stop the engine
 * API may set, the length cap; at least one. */
static uint32_t tokens_left_new(const struct replay *rp, uint32_t req)
{
    const struct kvsim_req_spec *s = &rp->trace.reqs[req];
    uint64_t mml = rp->cfg->sched.max_model_len;
    uint32_t left = s->output_len ? s->output_len : 1;
    if (s->stop_after && s->stop_after < left)
        left = s->stop_after;
    if (mml <= s->input_len)
        left = 1;
    else if (mml - s->input_len < left)
        left = (uint32_t)(mml - s->input_len);
    return left;
}

/* dp-lb: the DP coordinator's next publish tick while an engine has work or was just given some
 * (the router must see the engines at every tick that could change its snapshot), else
 * INT64_MAX. Coordinator, workers parked. */
static int64_t dp_next_tick(const struct replay *rp)
{
    if (rp->dp <= 1 && kvsim_router_policy(rp->router) != KVSIM_ROUTER_DP_LB)
        return INT64_MAX;
    bool work = rp->num_arrived > 0;
    for (uint32_t e = 0; e < rp->num_engines && !work; e++)
        work = rp->pubs[e]->num_unfinished > 0;
    return work ? kvsim_router_next_tick(rp->dp > 1 ? rp->lb[0] : rp->router, rp->b_cur)
                : INT64_MAX;
}

/*
 * The next boundary after rp->b_cur for a phase that admits the arrivals routed at b_cur and
 * advances to it in one go (aggregated, session turns in flight, no closed loop): next_boundary's
 * bound with what the admissions could change accounted for without running them. An engine
 * given an arrival may start a step at b_cur (its first step then ends no later than b_cur plus
 * the shortest step), an arriving turn with a follow-up is a parent with all its tokens left,
 * and one rejected at admission finishes at b_cur (its follow-up comes at b_cur plus that
 * follow-up's own delay). Never later than next_boundary after the admissions (a lower bound of
 * the same finishes); it may be earlier, and is b_cur or earlier when a follow-up could be due at
 * once: the caller then admits first (two phases). Coordinator, workers parked.
 */
static int64_t next_boundary_admitting(struct replay *rp)
{
    int64_t nb = next_arrival(rp), tick = dp_next_tick(rp);
    if (tick < nb)
        nb = tick;
    if (!rp->parents_in_flight)
        return nb;
    int64_t d = kvsim_step_model_min_duration_ns(&rp->cfg->model);
    uint32_t *left = rp->arrived_left; /* [engines]: fewest tokens left of its arriving parents */
    for (uint32_t e = 0; e < rp->num_engines; e++)
        left[e] = UINT32_MAX - 1; /* below UINT32_MAX: the engine got an arrival (set below) */
    for (uint32_t i = 0; i < rp->num_arrived; i++) {
        uint32_t req = rp->arrived[i].req, e = rp->arrived[i].engine;
        if (left[e] == UINT32_MAX - 1)
            left[e] = UINT32_MAX; /* an arrival, no parent among them yet */
        int32_t nx = rp->next_turn[req];
        if (nx < 0)
            continue;
        int64_t due; /* rejected at admission */
        if (!kvsim_clock_add(rp->b_cur, rp->trace.reqs[nx].delay_ns, &due))
            due = INT64_MAX;
        if (due < nb)
            nb = due;
        uint32_t l = tokens_left_new(rp, req);
        if (l < left[e])
            left[e] = l;
    }
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        const struct kvsim_engine_pub *pub = rp->pubs[e];
        int64_t f = pub->earliest_parent_finish;
        if (left[e] != UINT32_MAX - 1) { /* it got arrivals: a step may start at b_cur */
            int64_t fe = pub->first_step_end;
            if (rp->b_cur <= INT64_MAX - d && rp->b_cur + d < fe)
                fe = rp->b_cur + d;
            uint32_t best = pub->parent_min_left < left[e] ? pub->parent_min_left : left[e];
            f = INT64_MAX;
            if (best != UINT32_MAX) {
                int64_t more = (int64_t)(best - 1);
                f = more > (INT64_MAX - fe) / d ? INT64_MAX : fe + more * d;
            }
        }
        if (f != INT64_MAX && f < nb - rp->min_delay) /* nb >= 0, min_delay >= 0 */
            nb = f + rp->min_delay;
    }
    return nb;
}

/*
 * The next boundary after rp->b_cur: the next arrival, or, while a session turn is in flight,
 * the earliest instant its follow-up could arrive (the earliest step completion of any engine
 * plus the smallest think time). Exact only once the engines have started their steps at b_cur.
 */
static int64_t next_boundary(struct replay *rp)
{
    int64_t nb = next_arrival(rp), tick = dp_next_tick(rp);
    if (tick < nb)
        nb = tick;
    if (!rp->parents_in_flight)
        return nb;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        /* Turns rejected at admission finished at b_cur; their follow-ups are due soon. */
        uint32_t n;
        const struct kvsim_engine_done *d = kvsim_engine_peek_done(rp->engines[e], &n);
        for (uint32_t i = 0; i < n; i++) {
            int32_t nx = rp->next_turn[d[i].req];
            int64_t due; /* one that passes the clock's end is an error when it is collected */
            if (nx >= 0 && kvsim_clock_add(d[i].finish_ns, rp->trace.reqs[nx].delay_ns, &due) &&
                due < nb)
                nb = due;
            if (nx < 0 && releases_slot(rp, d[i].req) && d[i].finish_ns < nb)
                nb = d[i].finish_ns;
        }
        int64_t f = rp->pubs[e]->earliest_parent_finish;
        if (f != INT64_MAX && f < nb - rp->min_delay) /* nb >= 0, min_delay >= 0: no overflow */
            nb = f + rp->min_delay;
    }
    return nb;
}

/* Whether engine e works in phase (a disaggregated phase runs one pool). */
static bool works_in(const struct replay *rp, uint32_t e, enum phase phase)
{
    switch (phase) {
    case PHASE_PREFILL_ADMIT:
    case PHASE_PREFILL_ADVANCE: return e < rp->num_prefill;
    case PHASE_PREFILL_ADMIT_DECODE_LAST: return true;
    case PHASE_DECODE_ADVANCE: return e >= rp->num_prefill;
    default: return true;
    }
}

/* Admits the arrivals routed to engine e (its inbox, in routing order). Context: the thread that
 * owns e in the phase. Returns 0 or a negative errno. */
static int admit_inbox(struct replay *rp, uint32_t e)
{
    int rc = 0;
    /* Single consumer: the unlocked dequeue is safe; FIFO keeps the routing order. */
    struct cds_wfcq_node *n;
    while ((n = __cds_wfcq_dequeue_blocking(&rp->inbox_head[e], &rp->inbox_tail[e]))) {
        uint32_t req = (uint32_t)(n - rp->nodes);
        cds_wfcq_node_init(n);
        struct routed_hashes *q = &rp->routed_hashes[e];
        struct kvsim_engine_admit_opts o = {0};
        if (q->next_ent < q->num_ent && q->ent[q->next_ent].req == req) {
            const struct routed_entry *en = &q->ent[q->next_ent++];
            o.prompt_hashes = en->prepared ? en->prepared : q->hashes + en->off;
            o.num_prompt_hashes = en->num;
            o.hashes_block_size = rp->num_prefill ? rp->cfg->disagg.prefill_sched.block_size
                                                  : rp->cfg->sched.block_size;
        }
        if (rc == 0)
            rc = kvsim_engine_admit_ext(rp->engines[e], req, rp->b_cur, &o);
    }
    return rc;
}

/* A lockstep deployment's part of a phase: the thread that owns its first rank, engine e, admits
 * every rank's arrivals and advances the group (the other ranks' turns do nothing). */
static void work_lockstep(struct replay *rp, uint32_t e, bool admit, int64_t until)
{
    if (e % rp->dp)
        return;
    int rc = 0;
    for (uint32_t r = e; admit && r < e + rp->dp; r++)
        if ((rc = admit_inbox(rp, r)) != 0)
            break;
    if (rc == 0)
        rc = kvsim_lockstep_advance(&rp->lockstep[e / rp->dp], until);
    if (rc) { /* the rank that failed says why */
        uint32_t bad = e;
        for (uint32_t r = e; r < e + rp->dp; r++)
            if (kvsim_engine_error(rp->engines[r])[0]) {
                bad = r;
                break;
            }
        if (!rp->engine_rc[bad])
            rp->engine_rc[bad] = rc;
    }
}

/* Engine e's part of a phase (the thread that owns e in this phase). */
static void work_engine(struct replay *rp, uint32_t e, enum phase phase)
{
    struct kvsim_engine *eng = rp->engines[e];
    bool admit = phase == PHASE_ADMIT || phase == PHASE_ADMIT_AND_ADVANCE ||
                 phase == PHASE_PREFILL_ADMIT || phase == PHASE_PREFILL_ADMIT_DECODE_LAST;
    bool to_cur = phase == PHASE_ADMIT || phase == PHASE_PREFILL_ADMIT ||
                  phase == PHASE_PREFILL_ADMIT_DECODE_LAST;
    if (rp->lockstep) {
        work_lockstep(rp, e, admit, to_cur ? rp->b_cur : rp->b_next);
        return;
    }
    int rc = admit ? admit_inbox(rp, e) : 0;
    if (rc == 0)
        rc = kvsim_engine_advance(eng, to_cur ? rp->b_cur : rp->b_next);
    if (rc == 0 && rp->drain_events) {
        /* This engine's KV events up to the boundary, into its indexer shard. */
        bool decode = rp->num_prefill && e >= rp->num_prefill;
        struct event_ctx ec = {decode ? rp->decode_router : rp->router,
                               decode ? e - rp->num_prefill : e, 0};
        kvpool_events_drain(kvsim_engine_pool(eng), apply_event, &ec);
        rc = ec.rc;
    }
    if (rc == 0 && rp->prep_now && !to_cur)
        route_prep_overlaps(rp, e); /* e is at the next boundary: what it caches there */
    kvsim_tier_topology_thread_quiescent(rp->tiers); /* no registry read of e outlives it */
    if (rc && !rp->engine_rc[e])
        rp->engine_rc[e] = rc;
}

/* Whether engine e has something to do in the phase: an arrival to admit, or an event (a step
 * end, a message, a deadline) at or before the instant the phase advances it to. The thread that
 * owns e in the phase, or the coordinator with the workers parked. */
static bool engine_has_work(const struct replay *rp, uint32_t e, enum phase phase)
{
    bool admit = phase == PHASE_ADMIT || phase == PHASE_ADMIT_AND_ADVANCE ||
                 phase == PHASE_PREFILL_ADMIT || phase == PHASE_PREFILL_ADMIT_DECODE_LAST;
    bool to_cur = phase == PHASE_ADMIT || phase == PHASE_PREFILL_ADMIT ||
                  phase == PHASE_PREFILL_ADMIT_DECODE_LAST;
    int64_t until = to_cur ? rp->b_cur : rp->b_next;
    if (rp->lockstep) { /* the group's turn is its first rank's */
        if (e % rp->dp)
            return false;
        for (uint32_t r = e; admit && r < e + rp->dp; r++)
            if (!cds_wfcq_empty(&rp->inbox_head[r], &rp->inbox_tail[r]))
                return true;
        return kvsim_lockstep_next_event(&rp->lockstep[e / rp->dp]) <= until;
    }
    return works_in(rp, e, phase) &&
           ((admit && !cds_wfcq_empty(&rp->inbox_head[e], &rp->inbox_tail[e])) ||
            kvsim_engine_next_event(rp->engines[e]) <= until);
}

/* work_engine, its CPU time accounted to e when the accounting is on and e has work (e is the
 * calling thread's alone within the phase; the thread's own total is work()'s). */
static void advance_engine(struct replay *rp, uint32_t e, enum phase phase)
{
    if (!rp->acct.on) {
        work_engine(rp, e, phase);
        return;
    }
    if (!engine_has_work(rp, e, phase)) { /* not worth two clock reads (system calls) */
        work_engine(rp, e, phase);
        return;
    }
    int64_t t0 = acct_clock();
    uint64_t reads0 = acct_reads;
    work_engine(rp, e, phase);
    rp->acct.engine_ns[e] += acct_net(rp, t0, reads0);
}

/* Thread w's CPU over its part of a phase (accounting on): the engines timed one by one and
 * the ones with nothing to do, which are not (acct_phase_end shares those out). */
static _Thread_local uint64_t acct_work_reads0; /* acct_reads at acct_work_begin */

static int64_t acct_work_begin(const struct replay *rp)
{
    if (!rp->acct.on)
        return 0;
    int64_t t0 = acct_clock();
    acct_work_reads0 = acct_reads;
    return t0;
}

static void acct_work_end(struct replay *rp, uint32_t w, int64_t t0)
{
    if (!rp->acct.on)
        return;
    int64_t d = acct_net(rp, t0, acct_work_reads0);
    rp->acct.thr[w].advance_ns += d;
    rp->acct.thr[w].phase_ns += d;
}

/* After a phase (coordinator, the engines' threads joined): the phase's least time on T threads
 * for T = 1, 2, 4, 8, 16, from its engines' CPU times. */
static void acct_phase_tally(struct replay *rp);

/* acct_phase_tally, its own CPU kept apart: the accounting's bookkeeping is not the replay's
 * serial work (on 64 engines it was a third of what "serial" measured). */
static void acct_phase_end(struct replay *rp)
{
    if (!rp->acct.on)
        return;
    int64_t t0 = acct_clock();
    uint64_t reads0 = acct_reads;
    acct_phase_tally(rp);
    rp->acct.tally_ns += acct_net(rp, t0, reads0);
}

static void acct_phase_tally(struct replay *rp)
{
    int64_t sum = 0, max = 0, all = 0;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        sum += rp->acct.engine_ns[e];
        max = rp->acct.engine_ns[e] > max ? rp->acct.engine_ns[e] : max;
    }
    for (uint32_t w = 0; w < rp->num_threads; w++) {
        all += rp->acct.thr[w].phase_ns;
        rp->acct.thr[w].phase_ns = 0;
    }
    if (all > sum) /* the engines with nothing to do, and the loop: shared out */
        sum = all;
    for (int i = 0; i < KVSIM_ACCOUNTING_BOUNDS; i++) { /* sum / 2^i rounded up: never below */
        int64_t share = (sum + (INT64_C(1) << i) - 1) >> i;
        rp->acct.critical_ns[i] += max > share ? max : share;
        /* as assigned on 2^i threads: the busiest thread's engines, the rest shared out */
        uint32_t T = 1u << i;
        int64_t *ts = rp->acct.thread_sum, timed = 0;
        memset(ts, 0, T * sizeof *ts);
        for (uint32_t e = 0; e < rp->num_engines; e++) {
            ts[e % T] += rp->acct.engine_ns[e];
            timed += rp->acct.engine_ns[e];
        }
        int64_t busiest = 0, untimed = (sum - timed + T - 1) / T;
        for (uint32_t w = 0; w < T; w++)
            busiest = ts[w] > busiest ? ts[w] : busiest;
        rp->acct.critical_assigned_ns[i] += busiest + untimed;
    }
    memset(rp->acct.engine_ns, 0, rp->num_engines * sizeof *rp->acct.engine_ns);
    rp->acct.phases++;
}

/*
 * The parallel part of a phase for replay thread w. Each thread advances its own engines (engine
 * e is thread e mod T's; a disaggregated replay's pools on separate threads measured no better,
 * and bound less: 1.13x on 2 threads against 1.34x), so each engine's state stays in one core's
 * caches: an engine advanced by another thread pays for its state moving to that core and back,
 * which measured more than its own work in a phase (dynamic claiming of any engine, as issue #39
 * had, and handing engines over by expected cost every few phases were both slower than this). The
 * exception is an engine admitting arrivals in the phase: its admissions hash, allocate and cache
 * whole prompts, memory it has not touched before anyway, and they are most of an epoch's work and
 * of its imbalance. So a thread first takes its own admitting engines, then advances its other
 * engines, then takes the other threads' admitting engines that nobody has started yet, back to
 * front (their owners start at the front); an admitting engine goes to whoever exchanges the
 * phase's number into its claim word first. Which thread advances an engine never changes what it
 * does (engines are independent within a phase, and the barriers order each engine's state from one
 * phase's thread to the next), so results are the same for any --threads. Context: every replay
 * thread inside a parallel phase; the coordinator set rp->admitting and bumped rp->phase_seq
 * before the phase's first barrier.
 */
/* Whether this thread takes engine e in the current phase: the first to exchange the phase's
 * number into e's claim word does. Relaxed: the barriers order the engines' state. */
static bool claim_engine(struct replay *rp, uint32_t e)
{
    return atomic_exchange_explicit(&rp->claim[e], rp->phase_seq, memory_order_relaxed) !=
           rp->phase_seq;
}

static void work_engines(struct replay *rp, uint32_t w, enum phase phase)
{
    uint32_t T = rp->num_threads, N = rp->num_engines;
    for (uint32_t e = w; e < N; e += T) /* own, admitting */
        if (rp->admitting[e] && works_in(rp, e, phase) && claim_engine(rp, e))
            advance_engine(rp, e, phase);
    for (uint32_t e = w; e < N; e += T) /* own, the rest */
        if (!rp->admitting[e] && works_in(rp, e, phase))
            advance_engine(rp, e, phase);
    for (uint32_t k = 1; k < T;
         k++) { /* the others' admitting ones nobody started, from the back */
        uint32_t v = (w + k) % T;
        if (v >= N)
            continue;
        for (uint32_t e = v + (N - 1 - v) / T * T;; e -= T) {
            if (rp->admitting[e] && works_in(rp, e, phase) && claim_engine(rp, e))
                advance_engine(rp, e, phase);
            if (e < T)
                break;
        }
    }
}

/* work_engines, its wall time kept for phase_measured and its CPU accounted to thread w when
 * the accounting is on. */
static void work(struct replay *rp, uint32_t w, enum phase phase)
{
    int64_t t0 = acct_work_begin(rp), wall0 = base_monotonic_ns();
    route_prep_hash(rp, w);
    work_engines(rp, w, phase);
    rp->workers[w].busy_ns = base_monotonic_ns() - wall0;
    acct_work_end(rp, w, t0);
}

struct worker_arg {
    struct replay *rp;
    uint32_t w;
};

static void *worker_main(void *arg)
{
    struct worker_arg *wa = arg;
    struct replay *rp = wa->rp;
    kvsim_tier_topology_thread_join(rp->tiers);
    for (;;) {
        epoch_barrier(rp, wa->w);
        if (rp->finished)
            break;
        work(rp, wa->w, rp->phase);
        epoch_barrier(rp, wa->w);
    }
    kvsim_tier_topology_thread_leave(rp->tiers);
    return NULL;
}

/* The progress line (stderr, a terminal): requests finished (completed, rejected or aborted,
 * not just routed), simulated time, elapsed wall time and the time left at the rate so far.
 * Context: the coordinator at a boundary (the records are not being written). */
static void show_progress(struct replay *rp, bool final)
{
    if (!rp->progress)
        return;
    int64_t now = base_monotonic_ns();
    if (!final && now - rp->last_progress < 200000000)
        return;
    rp->last_progress = now;
    size_t total = rp->trace.num_reqs;
    uint32_t done = kvsim_metrics_num_final(rp->metrics);
    double frac = total ? (double)done / (double)total : 1;
    int filled = (int)(frac * 30);
    double elapsed = (double)(now - rp->wall_start) / 1e9;
    char el[48], eta[48];
    base_format_wall(el, sizeof el, elapsed);
    if (frac > 0 && !final)
        base_format_wall(eta, sizeof eta, elapsed * (1 - frac) / frac);
    else
        snprintf(eta, sizeof eta, final ? "0s" : "?");
    int64_t t = rp->b_cur == INT64_MAX || rp->b_cur < rp->trace.reqs[0].arrival_ns
                    ? 0
                    : rp->b_cur - rp->trace.reqs[0].arrival_ns;
    bool online = kvsim_tier_topology_coordinator_offline(rp->tiers); /* I/O may block */
    fprintf(stderr,
            "\r[%.*s%.*s] %5.1f%% %" PRIu32 "/%zu finished, sim %.1f s, elapsed %s, eta %s  %s",
            filled, "##############################", 30 - filled, "                              ",
            frac * 100, done, total, (double)t / 1e9, el, eta, final ? "\n" : "");
    if (online)
        kvsim_tier_topology_coordinator_online(rp->tiers);
}

/* Whether the replay ends early before the epoch at b_cur (and why, in rp->end_reason). */
static bool stop_now(struct replay *rp)
{
    if (rp->cfg->stop_flag && *rp->cfg->stop_flag)
        rp->end_reason = "interrupted";
    else if (rp->b_cur >= rp->stop_ns)
        rp->end_reason = "max-sim-time";
    else
        return false;
    return true;
}

/* An epoch never runs past the time bound. */
static void clamp_next(struct replay *rp)
{
    if (rp->b_next > rp->stop_ns)
        rp->b_next = rp->stop_ns;
}

static int check_engines(struct replay *rp, char *err, size_t errlen)
{
    for (uint32_t e = 0; e < rp->num_engines; e++)
        if (rp->engine_rc[e]) {
            snprintf(err, errlen, "%s", kvsim_engine_error(rp->engines[e]));
            if (!err[0])
                snprintf(err, errlen, "engine %u: %s", e, kvsim_strerror(rp->engine_rc[e]));
            return rp->engine_rc[e];
        }
    return 0;
}

/*
 * The set of hash ids seen so far, for unbounded_reuse: a bitmap over [0, max id] when that
 * is no larger than a hash table would be (a trace's ids are usually dense, as Mooncake's
 * remapped ones are: about an eighth of a byte per id), else an open-addressing table.
 */
struct id_set {
    uint64_t *bits;  /* bitmap (cap 0) */
    uint64_t *table; /* id + 1; 0 = empty */
    size_t cap;
};

static int id_set_init(struct id_set *s, const struct kvsim_trace *t)
{
    memset(s, 0, sizeof *s);
    uint64_t max = 0;
    for (size_t i = 0; i < t->num_hash_ids; i++)
        if (t->hash_ids[i] > max)
            max = t->hash_ids[i];
    size_t cap = 16;
    while (cap < 2 * t->num_hash_ids)
        cap *= 2;
    if (max / 8 < cap * sizeof *s->table) {
        s->bits = calloc(max / 64 + 1, sizeof *s->bits);
        return s->bits ? 0 : -ENOMEM;
    }
    s->cap = cap;
    s->table = calloc(cap, sizeof *s->table);
    return s->table ? 0 : -ENOMEM;
}

/* Adds id; returns whether it was there already. */
static bool id_set_add(struct id_set *s, uint64_t id)
{
    if (s->bits) {
        uint64_t w = s->bits[id / 64], m = UINT64_C(1) << (id % 64);
        s->bits[id / 64] = w | m;
        return w & m;
    }
    uint64_t key = id + 1, h = key * UINT64_C(0x9e3779b97f4a7c15);
    size_t j = (size_t)(h >> 20) & (s->cap - 1);
    while (s->table[j] && s->table[j] != key)
        j = (j + 1) & (s->cap - 1);
    bool had = s->table[j] != 0;
    s->table[j] = key;
    return had;
}

/*
 * The reuse an unbounded prefix cache shared by every engine would give: requests in arrival
 * order, each hitting its leading hash ids seen before (a trace's ids name their whole prefix,
 * as Mooncake's do), as whole engine blocks and never the last prompt token (vLLM's lookup).
 * A request without hash ids is unique. O(hash ids) time; memory: struct id_set. Returns 0 or
 * -ENOMEM.
 */
static int unbounded_reuse(const struct kvsim_trace *t, uint32_t block_size, struct kvsim_report *r)
{
    struct id_set set;
    if (id_set_init(&set, t))
        return -ENOMEM;
    uint64_t input = 0, hit = 0;
    for (size_t i = 0; i < t->num_reqs; i++) {
        const struct kvsim_req_spec *s = &t->reqs[i];
        const uint64_t *ids = kvsim_trace_hashes(t, s);
        uint64_t lead = 0;
        bool leading = true;
        for (uint32_t k = 0; k < s->num_hashes; k++) {
            bool seen = id_set_add(&set, ids[k]);
            if (seen && leading)
                lead++;
            else
                leading = false;
        }
        uint64_t tokens = lead * t->block_size;
        uint64_t most = s->input_len > 0 ? s->input_len - 1 : 0;
        tokens = tokens < most ? tokens : most;
        hit += tokens - tokens % block_size;
        input += s->input_len;
    }
    free(set.bits);
    free(set.table);
    r->has_unbounded_reuse = true;
    r->prefix_cache_reuse_unbounded = input ? (double)hit / (double)input : 0.0;
    return 0;
}

/* The per-engine part: each engine's own counters, and its requests from the records (the
 * engine of a request's last admission), in engine then request order. Returns 0 or -ENOMEM. */
static int summarize_engines(struct replay *rp, struct kvsim_report *r)
{
    r->per_engine = calloc(rp->num_engines, sizeof *r->per_engine);
    if (!r->per_engine)
        return -ENOMEM;
    r->num_per_engine = rp->num_engines;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        kvsim_engine_usage(rp->engines[e], &r->per_engine[e]);
        r->busy_engine_s += r->per_engine[e].busy_s;
    }
    for (uint32_t i = 0; i < (uint32_t)rp->trace.num_reqs; i++) {
        const struct kvsim_req_record *rec = kvsim_metrics_record(rp->metrics, i);
        /* A prefill engine served the prefill of every request it prefilled, whatever came
         * of the decode; its cache hits are the request's first admission's. */
        int32_t pe = rp->num_prefill ? rec->prefill_engine : -1;
        if (pe >= 0 && (uint32_t)pe < rp->num_prefill && rec->first_sched_ns != KVSIM_TIME_NONE) {
            struct kvsim_engine_summary *p = &r->per_engine[pe];
            p->completed++;
            p->input_tokens += rec->input_len;
            p->cached_tokens += rec->cached_tokens;
        }
        if (rec->status != KVSIM_REQ_COMPLETED || rec->engine < 0 ||
            (uint32_t)rec->engine >= rp->num_engines)
            continue;
        struct kvsim_engine_summary *s = &r->per_engine[rec->engine];
        s->completed++;
        s->input_tokens += rec->input_len;
        s->output_tokens += rec->num_output_tokens;
        if (!rp->num_prefill)
            s->cached_tokens += rec->cached_tokens;
    }
    return 0;
}

static void replay_free(struct replay *rp)
{
    kvsim_tier_topology_coordinator_offline(rp->tiers); /* pipelines may wait for the pool */
    for (uint32_t e = 0; rp->engines && e < rp->num_engines; e++)
        kvsim_engine_destroy(rp->engines[e]);
    kvsim_tier_topology_destroy(rp->tiers);
    rp->tiers = NULL;
    free(rp->engines);
    free(rp->pubs);
    free(rp->pools);
    free(rp->inbox_head);
    free(rp->inbox_tail);
    free(rp->nodes);
    free(rp->engine_rc);
    free(rp->acct.thr);
    for (uint32_t w = 0; rp->workers && w < rp->num_threads; w++)
        free(rp->workers[w].runs);
    free(rp->claim);
    free(rp->admitting);
    free(rp->workers);
    for (int k = 0; k < 2; k++) {
        struct route_prep *p = &rp->prep[k];
        free(p->reqs);
        free(p->num_hashes);
        free(p->off);
        free(p->hashed);
        free(p->hashes);
        free(p->ov);
    }
    free(rp->prep_slot);
    free(rp->arrived);
    free(rp->arrived_left);
    free(rp->acct.engine_ns);
    free(rp->acct.thread_sum);
    free(rp->next_turn);
    free(rp->releases);
    free(rp->slot_parent);
    free(rp->freed);
    free(rp->heap);
    free(rp->runs);
    free(rp->hashes);
    for (uint32_t e = 0; rp->routed_hashes && e < rp->num_engines; e++) {
        free(rp->routed_hashes[e].hashes);
        free(rp->routed_hashes[e].ent);
    }
    free(rp->routed_hashes);
    kvsim_router_destroy(rp->router);
    for (uint32_t d = 0; rp->lb && d < rp->num_deployments; d++)
        kvsim_router_destroy(rp->lb[d]);
    free(rp->lb);
    free(rp->dep_pub);
    free(rp->dep_pubs);
    free(rp->lockstep);
    replay__disagg_free(rp);
    kvsim_metrics_destroy(rp->metrics);
    kvsim_trace_free(&rp->trace);
}

/* How many engines have something to do in the phase: an arrival to admit, or an event (a step
 * end, a message, a deadline) at or before the instant the phase advances them to. Stops
 * counting at 2. Coordinator, workers parked. */
static uint32_t engines_with_work(const struct replay *rp, enum phase phase)
{
    uint32_t n = 0;
    for (uint32_t e = 0; e < rp->num_engines && n < 2; e++)
        n += engine_has_work(rp, e, phase) ||
             (rp->prep_now && phase != PHASE_ADMIT && works_in(rp, e, phase));
    return n;
}

/*
 * Whether the next phase with work on two engines or more wakes the workers (coordinator).
 * Threads must pay for themselves: a parallel phase costs two barriers (a spin of a few
 * microseconds with a CPU per thread; a futex wake-up each when a party is asleep or was
 * preempted), which a phase of a few microseconds of work, or one whose work sits on one
 * engine, does not repay. So each thread times its part of a parallel phase (work, the
 * monotonic clock: a vDSO read), and the coordinator sets the sum of those against the phase's
 * wall time: the phase paid when the sum is PHASE_PAID_PERCENT % of the wall or more (what the
 * threads did together, over what the phase cost; one thread alone would have needed about the
 * sum), and the phase took PHASE_MIN_NS or more: a shorter one cannot repay what it costs
 * outside its own wall time (its engines' state, messages and records moving between cores make
 * the coordinator's work and the next phases slower; on a disaggregated replay of the
 * conversation trace, phases that paid by their own measure made the whole replay slower than
 * one thread). For each kind of phase (the prefill engines' admission is not the decode engines'
 * advance): after PHASE_SMALL_RUN parallel phases in a row that did not pay, the coordinator runs
 * the following ones alone (the workers sleep at the barrier), until a phase it ran alone takes
 * PHASE_BIG_NS or more, and every PHASE_PROBE-th phase in a row alone goes parallel again to
 * measure. A busy machine that preempts a worker makes its phases not pay (the coordinator
 * waits for it at the end), so they run alone. Which
 * thread advances an engine never changes what it does: results are the same whatever this
 * decides.
 */
#define PHASE_PAID_PERCENT 110
#define PHASE_MIN_NS       INT64_C(50000)
#define PHASE_BIG_NS       INT64_C(400000)
#define PHASE_SMALL_RUN    8u
#define PHASE_PROBE        64u

static bool phase_parallel(struct replay *rp, enum phase phase)
{
    if (rp->num_threads < 2 || engines_with_work(rp, phase) < 2)
        return false;
    struct phase_policy *p = &rp->phase_policy[phase];
    if (!p->alone)
        return true;
    return ++p->alone_run % PHASE_PROBE == 0;
}

/* After a phase of the given kind (coordinator, the workers parked): whether it paid, when it
 * ran in parallel, and what that says about the next ones (phase_parallel). */
static void phase_measured(struct replay *rp, enum phase phase, bool parallel, int64_t wall_ns)
{
    struct phase_policy *p = &rp->phase_policy[phase];
    if (parallel) {
        int64_t busy = 0;
        for (uint32_t w = 0; w < rp->num_threads; w++)
            busy += rp->workers[w].busy_ns;
        bool paid = busy * 100 >= wall_ns * PHASE_PAID_PERCENT && wall_ns >= PHASE_MIN_NS;
        p->small_run = paid ? 0 : p->small_run + 1;
        p->alone = p->small_run >= PHASE_SMALL_RUN;
        if (!p->alone)
            p->alone_run = 0;
        rp->phases_parallel++;
    } else if (p->alone && wall_ns >= PHASE_BIG_NS) {
        p->alone = false; /* worth the workers again */
        p->small_run = p->alone_run = 0;
    }
}

/* One phase (coordinator): the workers take their engines, the barriers ordering the phase, or
 * the coordinator advances every engine itself (phase_parallel). */
static void run_work(struct replay *rp, enum phase phase)
{
    rp->phase = phase;
    bool parallel = phase_parallel(rp, phase);
    int64_t t0 = base_monotonic_ns();
    if (parallel) {
        rp->phase_seq++;
        bool admit = phase == PHASE_ADMIT || phase == PHASE_ADMIT_AND_ADVANCE ||
                     phase == PHASE_PREFILL_ADMIT || phase == PHASE_PREFILL_ADMIT_DECODE_LAST;
        for (uint32_t e = 0; e < rp->num_engines; e++) /* work_engines' movable engines */
            rp->admitting[e] = admit && !cds_wfcq_empty(&rp->inbox_head[e], &rp->inbox_tail[e]);
        epoch_barrier(rp, 0);
        work(rp, 0, phase);
        epoch_barrier(rp, 0);
    } else {
        int64_t a0 = acct_work_begin(rp);
        route_prep_hash(rp, 0);
        for (uint32_t e = 0; e < rp->num_engines; e++)
            if (works_in(rp, e, phase))
                advance_engine(rp, e, phase);
        acct_work_end(rp, 0, a0);
    }
    if (rp->num_threads > 1)
        phase_measured(rp, phase, parallel, base_monotonic_ns() - t0);
    acct_phase_end(rp);
}

/* One phase of a disaggregated epoch (run_work), then the engines' errors. */
static int run_phase(struct replay *rp, enum phase phase, char *err, size_t errlen)
{
    run_work(rp, phase);
    return check_engines(rp, err, errlen);
}

/*
 * One disaggregated epoch from b_cur (docs/disagg.md): route the arrivals to prefill engines,
 * which start their steps; pick b_next (the next arrival, a session follow-up, or the handoff
 * lookahead: no transfer reserved in the epoch may end inside it); advance the prefill engines
 * to b_next; route their pins to decode engines and turn their aborts into cancels; advance the
 * decode engines to b_next, each applying those messages at their instants; turn the
 * reservations they made into transfers, whose releases and activations come after b_next.
 */
static int disagg_epoch(struct replay *rp, char *err, size_t errlen)
{
    int rc = boundary(rp, err, errlen);
    rp->epochs++;
    if (rc == 0)
        rc = run_phase(rp, PHASE_PREFILL_ADMIT, err, errlen);
    if (rc)
        return rc;
    rp->b_next = next_boundary(rp);
    int64_t bound = replay__disagg_bound(rp);
    if (bound < rp->b_next)
        rp->b_next = bound;
    clamp_next(rp);
    if (rp->b_next <= rp->b_cur) { /* a lookahead that does not look ahead would loop forever */
        snprintf(err, errlen, "internal error: the epoch at %" PRId64 " ns cannot advance",
                 rp->b_cur);
        return KVSIM_EINVARIANT;
    }
    if ((rc = run_phase(rp, PHASE_PREFILL_ADVANCE, err, errlen)) != 0 ||
        (rc = replay__disagg_after_prefill(rp)) != 0 ||
        (rc = run_phase(rp, PHASE_DECODE_ADVANCE, err, errlen)) != 0 ||
        (rc = replay__disagg_after_decode(rp, err, errlen)) != 0)
        return rc;
    if (rp->b_next == INT64_MAX && replay__disagg_stuck(rp, err, errlen))
        return -EDEADLK;
    return 0;
}

/*
 * Disaggregated epochs, pipelined (a replay without session turns or a closed loop): the decode
 * engines' part of an epoch runs in the same phase as the prefill engines' admission at the next
 * boundary, which they do not depend on. Per epoch k: route the arrivals at b_cur(k) to prefill
 * engines; one phase in which the prefill engines admit them and start their steps at b_cur(k)
 * while the decode engines advance to b_cur(k) = b_next(k - 1), applying the pins routed to them
 * after epoch k - 1's prefill phase; epoch k - 1's reservations become transfers (their releases
 * reach the prefill engines after b_cur(k), so nothing the prefill engines did at b_cur(k)
 * needed them); then b_next(k), the prefill engines' advance to it and their pins routed, as in
 * disagg_epoch. Each engine sees the same messages at the same instants in the same order as in
 * disagg_epoch, and the routers the same loads (posting a message changes no load), so the
 * results are identical (a test compares both); the epoch costs two phases instead of three, and
 * the decode engines' work is shared with the prefill engines'. Finished requests release
 * nothing without sessions, so the boundary that collects them one epoch later changes nothing.
 * *pending says whether epoch k - 1's decode part is still to come (disagg_pipeline_drain runs
 * it after the last epoch).
 */
static int disagg_pipelined(struct replay *rp, bool *pending, char *err, size_t errlen)
{
    int rc = boundary(rp, err, errlen);
    rp->epochs++;
    if (rc == 0)
        rc = run_phase(rp, *pending ? PHASE_PREFILL_ADMIT_DECODE_LAST : PHASE_PREFILL_ADMIT, err,
                       errlen);
    if (rc == 0 && *pending) {
        int64_t b_cur = rp->b_cur; /* the last epoch's bounds, for its transfers */
        rp->b_cur = rp->b_prev;
        rp->b_next = b_cur;
        rc = replay__disagg_after_decode(rp, err, errlen);
        rp->b_cur = b_cur;
        *pending = false;
    }
    if (rc)
        return rc;
    rp->b_next = next_boundary(rp);
    int64_t bound = replay__disagg_bound(rp);
    if (bound < rp->b_next)
        rp->b_next = bound;
    clamp_next(rp);
    if (rp->b_next <= rp->b_cur) {
        snprintf(err, errlen, "internal error: the epoch at %" PRId64 " ns cannot advance",
                 rp->b_cur);
        return KVSIM_EINVARIANT;
    }
    if ((rc = run_phase(rp, PHASE_PREFILL_ADVANCE, err, errlen)) != 0 ||
        (rc = replay__disagg_after_prefill(rp)) != 0)
        return rc;
    *pending = true;
    rp->b_prev = rp->b_cur;
    return 0;
}

/* The decode part of the last pipelined epoch (b_cur to b_next), then the dead-end check when
 * nothing is left. */
static int disagg_pipeline_drain(struct replay *rp, char *err, size_t errlen)
{
    int rc = run_phase(rp, PHASE_DECODE_ADVANCE, err, errlen);
    if (rc == 0)
        rc = replay__disagg_after_decode(rp, err, errlen);
    if (rc == 0 && rp->b_next == INT64_MAX && replay__disagg_stuck(rp, err, errlen))
        rc = -EDEADLK;
    return rc;
}

void kvsim_replay_config_default(struct kvsim_replay_config *c)
{
    memset(c, 0, sizeof *c);
    kvsim_trace_opts_default(&c->trace_opts);
    kvsim_synth_opts_default(&c->synth);
    sched_config_default(&c->sched);
    c->sched.num_blocks = kvsim_default_kv_blocks(c->sched.block_size);
    c->sched.max_num_seqs = 256;
    c->sched.max_num_batched_tokens = 8192;
    c->sched.max_model_len = 262144;
    kvsim_step_model_default(&c->model);
    c->num_engines = 4;
    c->data_parallel_size = 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->num_threads = n > 0 ? (uint32_t)n : 1;
    c->router = KVSIM_ROUTER_KV;
    c->overlap_weight = 1.0;
    c->seed = 1;
    kvsim_tiers_config_default(&c->tiers);
    c->offload_threads = 2;
    c->kv_bytes_per_token = 131072; /* Llama-3.1-8B in bf16 */
    c->disagg.prefill_sched = c->disagg.decode_sched = c->sched;
    c->disagg.prefill_router = c->disagg.decode_router = KVSIM_ROUTER_KV;
    c->disagg.transfer.gbps = 25.0;                         /* a 200 Gb/s RDMA NIC */
    c->disagg.abort_timeout_ns = INT64_C(480) * 1000000000; /* VLLM_NIXL_ABORT_REQUEST_TIMEOUT */
    c->timeseries_interval_ns = 1000000000;
}

/* The last instant any engine processed. */
static int64_t replay_last_instant(const struct replay *rp)
{
    int64_t end = rp->trace.reqs[0].arrival_ns;
    for (uint32_t e = 0; e < rp->num_engines; e++)
        if (kvsim_engine_clock(rp->engines[e]) > end)
            end = kvsim_engine_clock(rp->engines[e]);
    return end;
}

/* Whether an output reads the engines' time series. */
/*
 * The engines' samples as one time series: every engine closes the intervals up to the last
 * instant any engine processed, so that all have the same count. Returns 0 or -ENOMEM.
 */
static int collect_timeseries(struct replay *rp, struct kvsim_timeseries *ts)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    memset(ts, 0, sizeof *ts);
    ts->origin_ns = rp->trace.reqs[0].arrival_ns;
    ts->interval_ns = cfg->timeseries_interval_ns;
    ts->num_engines = rp->num_engines;
    uint32_t n = 0;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        uint32_t k;
        kvsim_engine_samples(rp->engines[e], &k);
        if (k > n)
            n = k;
    }
    uint64_t span =
        (uint64_t)(replay_last_instant(rp) - ts->origin_ns) / (uint64_t)ts->interval_ns + 1;
    if (span > n)
        n = span > UINT32_MAX ? UINT32_MAX : (uint32_t)span;
    ts->num_intervals = n;
    ts->roles = malloc(rp->num_engines);
    ts->samples = malloc((size_t)n * rp->num_engines * sizeof *ts->samples);
    if (!ts->roles || !ts->samples) {
        kvsim_timeseries_fini(ts);
        return -ENOMEM;
    }
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        int rc = kvsim_engine_samples_finish(rp->engines[e], n);
        if (rc) {
            kvsim_timeseries_fini(ts);
            return rc;
        }
        uint32_t k;
        const struct kvsim_ts_sample *s = kvsim_engine_samples(rp->engines[e], &k);
        ts->roles[e] = e >= rp->num_prefill
                           ? (rp->num_prefill ? KVSIM_TS_DECODE : KVSIM_TS_AGGREGATED)
                           : KVSIM_TS_PREFILL;
        for (uint32_t i = 0; i < n; i++)
            ts->samples[(size_t)i * rp->num_engines + e] = s[i];
    }
    return 0;
}

/* The configuration of engine e: its pool's scheduler settings and role. */
static void engine_config(const struct replay *rp, uint32_t e, struct kvsim_engine_config *ec)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    ec->sched = cfg->sched;
    if (rp->num_prefill) {
        bool prefill = e < rp->num_prefill;
        ec->sched = prefill ? cfg->disagg.prefill_sched : cfg->disagg.decode_sched;
        ec->role = prefill ? KVSIM_ENGINE_PREFILL : KVSIM_ENGINE_DECODE;
        ec->disagg = &rp->disagg;
    }
}

/*
 * Creating the engines is mostly allocating and zeroing their pools (page faults: 14 ms of a
 * 0.4 s replay of the conversation trace on 8 engines). With threads to share it, and engines
 * that share nothing while they are made (no offload: its pipelines share the offload pool), the
 * replay's thread count of short-lived threads each make engines w, w + T, ... (the engine
 * threads of the replay, started later, take the same ones). Returns 0 or the first failing
 * engine's error, in engine order, whatever the thread count (coordinator).
 */
struct create_job {
    struct replay *rp;
    const struct kvsim_engine_config *base;
    int *rc;       /* [engines] */
    uint32_t w, T; /* engines w, w + T, ... */
};

static void create_engines_of(const struct create_job *j)
{
    struct replay *rp = j->rp;
    for (uint32_t e = j->w; e < rp->num_engines; e += j->T) {
        struct kvsim_engine_config ec = *j->base;
        ec.id = e;
        ec.thread = e; /* its ITL sketch */
        engine_config(rp, e, &ec);
        j->rc[e] = kvsim_engine_create(&ec, &rp->engines[e]);
    }
}

static void *create_engines_main(void *arg)
{
    create_engines_of(arg);
    return NULL;
}

static int create_engines(struct replay *rp, const struct kvsim_engine_config *base, bool shareable)
{
    uint32_t T = shareable ? rp->num_threads : 1;
    int *rc = calloc(rp->num_engines, sizeof *rc);
    pthread_t *th = calloc(T, sizeof *th);
    struct create_job *jobs = calloc(T, sizeof *jobs);
    int result = rc && th && jobs ? 0 : -ENOMEM;
    uint32_t started = 1;
    for (uint32_t w = 0; result == 0 && w < T; w++)
        jobs[w] = (struct create_job){rp, base, rc, w, T};
    if (result == 0 && T > 1) {
        for (; started < T; started++)
            if (pthread_create(&th[started], NULL, create_engines_main, &jobs[started]) != 0)
                break;
    }
    if (result == 0) {
        if (started < T) { /* fewer threads than asked: the coordinator makes the rest */
            for (uint32_t w = started; w < T; w++)
                create_engines_of(&jobs[w]);
        }
        create_engines_of(&jobs[0]);
        for (uint32_t w = 1; w < started; w++)
            pthread_join(th[w], NULL);
        for (uint32_t e = 0; e < rp->num_engines && result == 0; e++)
            result = rc[e];
    }
    free(rc);
    free(th);
    free(jobs);
    return result;
}

/* A deep copy of t (an in-memory request list). Returns 0, -EINVAL (empty) or -ENOMEM. */
static int copy_trace(const struct kvsim_trace *t, struct kvsim_trace *out, char *err,
                      size_t errlen)
{
    *out = *t;
    out->reqs = NULL;
    out->hash_ids = NULL;
    if (t->num_reqs == 0) {
        snprintf(err, errlen, "no requests to replay");
        return -EINVAL;
    }
    out->reqs = malloc(t->num_reqs * sizeof *out->reqs);
    out->hash_ids = malloc((t->num_hash_ids ? t->num_hash_ids : 1) * sizeof *out->hash_ids);
    if (!out->reqs || !out->hash_ids) {
        kvsim_trace_free(out);
        return -ENOMEM;
    }
    memcpy(out->reqs, t->reqs, t->num_reqs * sizeof *out->reqs);
    if (t->num_hash_ids)
        memcpy(out->hash_ids, t->hash_ids, t->num_hash_ids * sizeof *out->hash_ids);
    return 0;
}

/* ---- the run: validate, load, set up, run, summarize, write ---------------------------------- */

/* What cfg asks for that no replay can do (the option layer refuses most of it first; a library
 * caller may not have gone through it). Returns 0 or -EINVAL with the message. */
static int replay_validate(const struct kvsim_replay_config *cfg, char *err, size_t errlen)
{
    const char *why = NULL;
    if (cfg->num_engines == 0 || cfg->num_threads == 0)
        why = "--engines and --threads must be at least 1";
    else if (kvsim_outputs_want_timeseries(&cfg->outputs) && cfg->timeseries_interval_ns <= 0)
        why = "--timeseries-interval-ms must be at least 1 ns";
    else if (cfg->g3_shared && (!cfg->offload || cfg->tiers.g3_blocks == 0))
        why = "a shared G3 needs offload tiers and a G3 capacity > 0";
    else if (cfg->disagg.prefill_engines &&
             (!cfg->disagg.decode_engines || cfg->offload || !(cfg->disagg.transfer.gbps > 0)))
        why = "disaggregated serving needs prefill and decode engines, a link bandwidth > 0 and "
              "no offload tiers";
    if (why) {
        snprintf(err, errlen, "%s", why);
        return -EINVAL;
    }
    if (cfg->data_parallel_size <= 1)
        return 0;
    why =
        cfg->disagg.prefill_engines
            ? "data parallelism and disaggregated serving do not combine yet"
        : (uint64_t)cfg->num_engines * cfg->data_parallel_size > 4096
            ? "deployments x ranks is above 4,096 engines"
        : cfg->offload && cfg->model.profile && kvsim_profile_arch(cfg->model.profile)->num_experts
            ? "a mixture-of-experts model's ranks step in lockstep, which kvsim does not "
              "model with offload tiers yet"
        : cfg->kv_index_events && cfg->router == KVSIM_ROUTER_KV
            ? "--kv-index events indexes engines, not data-parallel deployments (use pool)"
            : NULL;
    if (why) {
        snprintf(err, errlen, "--data-parallel-size %u: %s", cfg->data_parallel_size, why);
        return -EINVAL;
    }
    return 0;
}

/* The requests: the trace file, the caller's requests (copied) or the synthetic workload.
 * Returns 0 or a negative errno with the message. */
static int replay_load(struct replay *rp, char *err, size_t errlen)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    if (cfg->trace_path)
        return kvsim_trace_load(cfg->trace_path, &cfg->trace_opts, &rp->trace, err, errlen);
    if (cfg->requests)
        return copy_trace(cfg->requests, &rp->trace, err, errlen);
    struct kvsim_synth_opts so = cfg->synth;
    so.seed = cfg->seed;
    return kvsim_workload_synthetic(&so, &rp->trace, err, errlen);
}

/* How many engines (deployments x ranks, or prefill + decode) on how many threads. */
static void setup_counts(struct replay *rp)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    rp->num_engines = cfg->num_engines;
    rp->dp = cfg->data_parallel_size > 1 ? cfg->data_parallel_size : 1;
    if (rp->dp > 1) {
        rp->num_deployments = cfg->num_engines;
        rp->num_engines = cfg->num_engines * rp->dp;
    }
    if (cfg->disagg.prefill_engines) {
        rp->num_prefill = cfg->disagg.prefill_engines;
        rp->num_decode = cfg->disagg.decode_engines;
        rp->num_engines = rp->num_prefill + rp->num_decode;
    }
    rp->num_threads = cfg->num_threads < rp->num_engines ? cfg->num_threads : rp->num_engines;
    /* More threads than CPUs only add wake-ups: unless KVSIM_REPLAY_OVERSUBSCRIBE=1 the replay
     * runs on at most as many threads as this process may use CPUs (docs/replay.md); the
     * report's wall.threads says how many ran. Results are the same for any count. */
    const char *over = getenv("KVSIM_REPLAY_OVERSUBSCRIBE");
    uint32_t cpus = replay_cpus();
    if (cpus && rp->num_threads > cpus && !(over && *over && strcmp(over, "0") != 0))
        rp->num_threads = cpus;
}

/* Whether environment variable name is set to something other than "0". */
static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* The metrics, the routers and the replay's own arrays. Returns 0 or -ENOMEM (-EINVAL from a
 * router). */
static int setup_state(struct replay *rp)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    size_t R = rp->trace.num_reqs, R1 = R ? R : 1;
    uint32_t E = rp->num_engines;
    /* One ITL sketch per engine: any replay thread may advance any engine (work). */
    int rc = kvsim_metrics_create((uint32_t)R, E, &rp->metrics);
    if (rc == 0 && rp->num_prefill)
        rc = kvsim_router_create(cfg->disagg.prefill_router, rp->num_prefill, cfg->overlap_weight,
                                 &rp->router);
    else if (rc == 0)
        rc = kvsim_router_create(cfg->router, rp->dp > 1 ? rp->num_deployments : E,
                                 cfg->overlap_weight, &rp->router);
    if (rc == 0 && rp->dp > 1) {
        rp->lb = calloc(rp->num_deployments, sizeof *rp->lb);
        rp->dep_pub = calloc(rp->num_deployments, sizeof *rp->dep_pub);
        rp->dep_pubs = calloc(rp->num_deployments, sizeof *rp->dep_pubs);
        if (!rp->lb || !rp->dep_pub || !rp->dep_pubs)
            rc = -ENOMEM;
        for (uint32_t d = 0; rc == 0 && d < rp->num_deployments; d++) {
            rp->dep_pubs[d] = &rp->dep_pub[d];
            rc = kvsim_router_create(KVSIM_ROUTER_DP_LB, rp->dp, 0, &rp->lb[d]);
        }
    }
    if (rc)
        return rc;
    rp->drain_events =
        cfg->kv_index_events && (rp->num_prefill ? cfg->disagg.prefill_router == KVSIM_ROUTER_KV ||
                                                       cfg->disagg.decode_router == KVSIM_ROUTER_KV
                                                 : cfg->router == KVSIM_ROUTER_KV);
    rp->concurrency = cfg->replay_concurrency;
    /* Thread accounting: off unless asked for (then two clock reads per engine advance and per
     * barrier); when off it costs one predictable branch at each. */
    rp->acct.on = env_on("KVSIM_REPLAY_ACCOUNTING");
    /* Route preparation (aggregated, kv router, engines to choose from): the same decisions,
     * computed in the phases. On with threads to share it (on 1 thread it only moves the work,
     * and measured 5-10 % slower: its lookups leave the caches later), and with the accounting,
     * whose bounds are of a run on several threads. KVSIM_REPLAY_ROUTE_PREP=0 or 1 overrides
     * (to compare; reports are identical). */
    const char *prep_env = getenv("KVSIM_REPLAY_ROUTE_PREP");
    rp->prep_on =
        !rp->num_prefill && rp->dp == 1 && cfg->router == KVSIM_ROUTER_KV && E > 1 &&
        (prep_env && *prep_env ? strcmp(prep_env, "0") != 0 : rp->num_threads > 1 || rp->acct.on);
    rp->prep[0].boundary = rp->prep[1].boundary = INT64_MIN;
    /* Admitting and advancing in one phase with session turns in flight
     * (next_boundary_admitting); KVSIM_REPLAY_ADMIT_MERGED=0 admits first, then advances (to
     * compare: the reports are identical). */
    const char *merged_env = getenv("KVSIM_REPLAY_ADMIT_MERGED");
    rp->admit_merged = !(merged_env && strcmp(merged_env, "0") == 0);
    bool ok =
        (rp->engines = calloc(E, sizeof *rp->engines)) &&
        (rp->pubs = calloc(E, sizeof *rp->pubs)) && (rp->pools = calloc(E, sizeof *rp->pools)) &&
        (rp->routed_hashes = calloc(E, sizeof *rp->routed_hashes)) &&
        (rp->inbox_head = calloc(E, sizeof *rp->inbox_head)) &&
        (rp->inbox_tail = calloc(E, sizeof *rp->inbox_tail)) &&
        (rp->nodes = calloc(R1, sizeof *rp->nodes)) &&
        (rp->engine_rc = calloc(E, sizeof *rp->engine_rc)) &&
        (rp->next_turn = malloc(R1 * sizeof *rp->next_turn)) &&
        (rp->releases = malloc(R1 * sizeof *rp->releases)) && (rp->slot_parent = calloc(R1, 1)) &&
        (rp->arrived_left = calloc(E, sizeof *rp->arrived_left)) &&
        (!rp->prep_on || (rp->prep_slot = calloc(R1, sizeof *rp->prep_slot))) &&
        (rp->workers = calloc(rp->num_threads, sizeof *rp->workers)) &&
        /* phase_seq starts at 0: unclaimed */
        (rp->claim = calloc(E, sizeof *rp->claim)) &&
        (rp->admitting = calloc(E, sizeof *rp->admitting));
    if (ok && rp->acct.on)
        ok = (rp->acct.thr = calloc(rp->num_threads, sizeof *rp->acct.thr)) &&
             (rp->acct.engine_ns = calloc(E, sizeof *rp->acct.engine_ns)) &&
             (rp->acct.thread_sum =
                  calloc(1u << (KVSIM_ACCOUNTING_BOUNDS - 1), sizeof *rp->acct.thread_sum));
    return ok ? 0 : -ENOMEM;
}

/* The offload tiers (kvsim_tier_topology) and the engines, then what needs the engines (their
 * published loads and pools for the routers, the disaggregated handoffs). Returns 0 or a
 * negative errno (err set when known). */
static int setup_engines(struct replay *rp, char *err, size_t errlen)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    int rc = 0;
    if (cfg->offload) {
        struct kvsim_tier_topology_config tc = {
            .tiers = cfg->tiers,
            .kv_bytes_per_token = cfg->kv_bytes_per_token,
            .block_size = cfg->sched.block_size,
            .pool = cfg->offload_pool,
            .pool_threads = cfg->offload_threads,
            .g3_shared = cfg->g3_shared,
            .num_engines = rp->num_engines,
            .vtime0 = next_arrival(rp),
        };
        if ((rc = kvsim_tier_topology_create(&tc, &rp->tiers, err, errlen)))
            return rc;
    }
    bool releases = cfg->replay_concurrency > 0; /* some finish releases a turn or a session */
    for (size_t i = 0; i < rp->trace.num_reqs && !releases; i++)
        releases = rp->trace.reqs[i].prev_turn >= 0;
    struct kvsim_engine_config base_ec = {
        .model = cfg->model,
        .trace = &rp->trace,
        .metrics = rp->metrics,
        .kv_events = rp->drain_events,
        .next_turn = releases ? rp->releases : NULL, /* NULL: no finish releases anything */
        .tiers = rp->tiers ? kvsim_tier_topology_engine_tiers(rp->tiers) : NULL,
        .sample_interval_ns =
            kvsim_outputs_want_timeseries(&cfg->outputs) ? cfg->timeseries_interval_ns : 0,
        .sample_origin_ns = rp->trace.reqs[0].arrival_ns,
        .decode_fast_path_off = cfg->decode_fast_path_off,
    };
    rc = create_engines(rp, &base_ec, !cfg->offload && !cfg->g3_shared);
    if (rc == -EINVAL)
        snprintf(err, errlen,
                 "impossible engine configuration (block size, blocks, "
                 "max_num_batched_tokens vs max_model_len with chunked "
                 "prefill off)");
    for (uint32_t e = 0; rc == 0 && e < rp->num_engines; e++) {
        rp->pubs[e] = kvsim_engine_pub(rp->engines[e]);
        rp->pools[e] = kvsim_engine_pool(rp->engines[e]);
    }
    if (rc == 0 && !rp->drain_events)
        kvsim_router_use_pool_groups(rp->router, rp->pools, rp->dp);
    if (rc == 0 && rp->dp > 1 && cfg->model.profile &&
        kvsim_profile_arch(cfg->model.profile)->num_experts) {
        if (!(rp->lockstep = calloc(rp->num_deployments, sizeof *rp->lockstep)))
            rc = -ENOMEM;
        for (uint32_t d = 0; rc == 0 && d < rp->num_deployments; d++)
            rc = kvsim_lockstep_init(&rp->lockstep[d], rp->engines + d * rp->dp, rp->dp);
    }
    if (rc == 0 && rp->num_prefill) /* after the engines: the decode router reads their pools */
        rc = replay__disagg_setup(rp);
    return rc;
}

/* The inboxes, the sessions' turn links and what a finish releases, the closed loop's first
 * sessions. Returns 0 or -ENOMEM. */
static int setup_sessions(struct replay *rp)
{
    size_t R = rp->trace.num_reqs;
    for (uint32_t e = 0; e < rp->num_engines; e++)
        __cds_wfcq_init(&rp->inbox_head[e], &rp->inbox_tail[e]);
    for (size_t i = 0; i < R; i++)
        cds_wfcq_node_init(&rp->nodes[i]);
    rp->min_delay = INT64_MAX;
    for (size_t i = 0; i < R; i++)
        rp->next_turn[i] = -1;
    for (size_t i = 0; i < R; i++) {
        int32_t p = rp->trace.reqs[i].prev_turn;
        if (p >= 0) {
            rp->next_turn[p] = (int32_t)i;
            if (rp->trace.reqs[i].delay_ns < rp->min_delay)
                rp->min_delay = rp->trace.reqs[i].delay_ns;
        }
    }
    /* Disaggregated epochs pipelined (disagg_pipelined) when no finish releases anything:
     * KVSIM_REPLAY_DISAGG_PIPELINE=0 runs them one after the other (to compare). */
    const char *pipe_env = getenv("KVSIM_REPLAY_DISAGG_PIPELINE");
    rp->pipelined = rp->num_prefill && rp->min_delay == INT64_MAX && !rp->concurrency &&
                    !(pipe_env && strcmp(pipe_env, "0") == 0);
    if (rp->min_delay == INT64_MAX || rp->concurrency)
        rp->min_delay = 0;         /* a freed slot's next session arrives at the finish itself */
    for (size_t i = 0; i < R; i++) /* what a finish releases, as the engines see it */
        rp->releases[i] = rp->concurrency && rp->next_turn[i] < 0 ? INT32_MAX : rp->next_turn[i];
    /* Closed loop: the first sessions start together at the first arrival. */
    for (uint32_t k = 0; k < rp->concurrency; k++) {
        int32_t first = take_session(rp);
        if (first < 0)
            break;
        int rc = heap_push(rp, (struct follow_up){rp->trace.reqs[0].arrival_ns, (uint32_t)first});
        if (rc)
            return rc;
    }
    return 0;
}

/* Everything the epochs need. Returns 0 or a negative errno with the message. */
static int replay_setup(struct replay *rp, char *err, size_t errlen)
{
    setup_counts(rp);
    int rc = setup_state(rp);
    if (rc == 0)
        rc = setup_engines(rp, err, errlen);
    if (rc == 0)
        rc = setup_sessions(rp);
    if (rc && !err[0])
        snprintf(err, errlen, "setting up the replay: %s", kvsim_strerror(rc));
    rp->progress = !rp->cfg->quiet && isatty(STDERR_FILENO);
    rp->last_progress = base_monotonic_ns();
    return rc;
}

/* The replay's worker threads (1 .. num_threads - 1; the coordinator is thread 0). */
struct replay_threads {
    pthread_t *threads;
    struct worker_arg *args;
};

/* Starts the workers. Returns 0 or a negative errno (the workers started are stopped by
 * stop_threads). */
static int start_threads(struct replay *rp, struct replay_threads *th)
{
    rp->barrier.parties = rp->num_threads;
    /* Threads > CPUs (KVSIM_REPLAY_OVERSUBSCRIBE): a spinning waiter would hold the CPU the
     * party it waits for needs. Up to one thread per CPU it spins while that pays (a busy
     * machine that preempts a party makes it sleep at once: barrier_wait's backoff). */
    uint32_t cpus = replay_cpus();
    rp->barrier.spin_ns = cpus && rp->num_threads <= cpus ? BARRIER_SPIN_NS : 0;
    if (rp->num_threads <= 1)
        return 0;
    th->threads = calloc(rp->num_threads, sizeof *th->threads);
    th->args = calloc(rp->num_threads, sizeof *th->args);
    if (!th->threads || !th->args) {
        rp->barrier.parties = 1;
        return -ENOMEM;
    }
    for (uint32_t w = 1; w < rp->num_threads; w++) {
        th->args[w] = (struct worker_arg){rp, w};
        if (pthread_create(&th->threads[w], NULL, worker_main, &th->args[w]) != 0) {
            rp->barrier.parties = w; /* the threads started so far */
            return -EAGAIN;
        }
    }
    return 0;
}

/* Releases the workers from their barrier and joins them (the coordinator, offline). */
static void stop_threads(struct replay *rp, struct replay_threads *th)
{
    if (rp->num_threads > 1 && th->threads) {
        rp->finished = true;
        barrier_wait(&rp->barrier, NULL);
        for (uint32_t w = 1; w < rp->barrier.parties; w++)
            pthread_join(th->threads[w], NULL);
    }
    free(th->threads);
    free(th->args);
}

/* The disaggregated epochs, to the end or an early stop. Returns 0 or a negative errno. */
static int run_disagg_epochs(struct replay *rp, char *err, size_t errlen)
{
    int rc = 0;
    bool decode_pending = false; /* pipelined: the last epoch's decode part is still to come */
    while (rc == 0 && !stop_now(rp)) {
        rc = rp->pipelined ? disagg_pipelined(rp, &decode_pending, err, errlen)
                           : disagg_epoch(rp, err, errlen);
        show_progress(rp, false);
        if (rc || rp->b_next == INT64_MAX)
            break;
        rp->b_cur = rp->b_next;
    }
    if (rc == 0 && decode_pending) {  /* the last epoch (b_prev to b_next)'s decode part */
        int64_t moved_on = rp->b_cur; /* stopped early: the loop moved on to b_next */
        rp->b_cur = rp->b_prev;
        rc = disagg_pipeline_drain(rp, err, errlen);
        rp->b_cur = moved_on;
    }
    return rc;
}

/* The aggregated epochs, to the end or an early stop. Returns 0 or a negative errno. */
static int run_epochs(struct replay *rp, char *err, size_t errlen)
{
    int rc = 0;
    while (rc == 0 && !stop_now(rp)) {
        rc = boundary(rp, err, errlen);
        if (rc)
            break;
        /* Without session turns in flight the next boundary is the next arrival: one parallel
         * phase. With them it depends on the steps the engines start now: one phase to a bound
         * that allows for any step they could start (next_boundary_admitting), or, when that
         * bound does not look ahead (a follow-up could be due at once; a closed loop, where a
         * finish releases a session at that instant), two phases: admit, then advance. */
        bool split = rp->parents_in_flight > 0;
        enum phase phases[2] = {PHASE_ADMIT_AND_ADVANCE, PHASE_ADVANCE};
        if (split && !rp->concurrency && rp->admit_merged) {
            int64_t nb = next_boundary_admitting(rp);
            if (nb > rp->b_cur) {
                split = false;
                rp->b_next = nb;
                clamp_next(rp);
            }
        } else if (!split) {
            rp->b_next = next_boundary(rp);
            clamp_next(rp);
        }
        if (split)
            phases[0] = PHASE_ADMIT;
        for (int ph = 0; ph < (split ? 2 : 1) && rc == 0; ph++) {
            if (split && ph == 1) {
                rp->b_next = next_boundary(rp);
                clamp_next(rp);
            }
            if (phases[ph] != PHASE_ADMIT && (rc = route_prep_collect(rp)) != 0)
                break;
            run_work(rp, phases[ph]);
            rc = check_engines(rp, err, errlen);
            if (rc == 0 && rp->prep_now)
                rc = atomic_load_explicit(&rp->prep_now->rc, memory_order_relaxed);
            rp->prep_now = NULL;
        }
        show_progress(rp, false);
        if (rc || rp->b_next == INT64_MAX)
            break;
        rp->b_cur = rp->b_next;
    }
    return rc;
}

/* The epochs from the first arrival on the threads, then the end's checks and the shared G3's
 * last epoch. Returns 0 or a negative errno with the message. */
static int replay_epochs(struct replay *rp, char *err, size_t errlen)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    struct replay_threads th = {0};
    int rc = start_threads(rp, &th);
    rp->b_cur = next_arrival(rp);
    rp->wall_start = base_monotonic_ns();
    rp->end_reason = "finished";
    rp->stop_ns = cfg->max_sim_time_ns > 0 && rp->b_cur <= INT64_MAX - cfg->max_sim_time_ns
                      ? rp->b_cur + cfg->max_sim_time_ns
                      : INT64_MAX;
    uint64_t coord_reads0 = 0;
    if (rp->acct.on) {
        rp->acct.clock_ns = acct_clock_cost();
        rp->acct.coord_cpu0 = acct_clock();
        coord_reads0 = acct_reads;
    }
    if (rc == 0)
        rc = rp->num_prefill ? run_disagg_epochs(rp, err, errlen) : run_epochs(rp, err, errlen);
    if (rp->acct.on)
        rp->acct.coord_cpu_ns = acct_net(rp, rp->acct.coord_cpu0, coord_reads0);
    /* Every session turn routed with a next turn has released it at a boundary (unless the
     * replay ended early). */
    bool early = strcmp(rp->end_reason, "finished") != 0;
    if (rc == 0 && rp->parents_in_flight && !early) {
        snprintf(err, errlen,
                 "internal error: the replay ran out of events with %" PRIu64
                 " session turns whose next turn never came",
                 (uint64_t)rp->parents_in_flight);
        rc = KVSIM_EINVARIANT;
    }
    /* The last epoch's G3 writes and hits, for the end residency (the registry is done). */
    int g3rc = rc == 0 ? kvsim_tier_topology_boundary(rp->tiers, INT64_MAX) : 0;
    if (g3rc) {
        snprintf(err, errlen, "shared G3 at the end of the replay: %s", kvsim_strerror(g3rc));
        rc = g3rc;
    }
    /* joins, output files and the table: no registry access until free */
    kvsim_tier_topology_coordinator_offline(rp->tiers);
    stop_threads(rp, &th);
    show_progress(rp, true);
    return rc;
}

/* The report's thread accounting (KVSIM_REPLAY_ACCOUNTING). */
static void summarize_accounting(const struct replay *rp, struct kvsim_thread_accounting *ac)
{
    ac->enabled = true;
    ac->threads = rp->num_threads < KVSIM_ACCOUNTING_MAX_THREADS ? rp->num_threads
                                                                 : KVSIM_ACCOUNTING_MAX_THREADS;
    ac->phases = rp->acct.phases;
    ac->parallel_phases = rp->phases_parallel;
    const struct acct_thread *c = &rp->acct.thr[0];
    ac->serial_s =
        (double)(rp->acct.coord_cpu_ns - c->advance_ns - c->wait_cpu_ns - rp->acct.tally_ns) / 1e9;
    for (uint32_t t = 0; t < ac->threads; t++) {
        ac->advance_s[t] = (double)rp->acct.thr[t].advance_ns / 1e9;
        ac->wait_s[t] = (double)rp->acct.thr[t].wait_cpu_ns / 1e9;
        ac->wait_wall_s[t] = (double)rp->acct.thr[t].wait_wall_ns / 1e9;
    }
    for (int i = 0; i < KVSIM_ACCOUNTING_BOUNDS; i++) {
        ac->critical_s[i] = (double)rp->acct.critical_ns[i] / 1e9;
        ac->critical_assigned_s[i] = (double)rp->acct.critical_assigned_ns[i] / 1e9;
    }
}

void kvsim_replay_capacity_summary(const struct kvsim_replay_config *cfg,
                                   struct kvsim_timing_summary *t)
{
    static const char *const sources[] = {[KVSIM_KV_CAPACITY_DEFAULT_TOKENS] = "default_tokens",
                                          [KVSIM_KV_CAPACITY_BLOCKS] = "num_gpu_blocks",
                                          [KVSIM_KV_CAPACITY_GPU_MEMORY] = "gpu_memory"};
    snprintf(t->kv_capacity, sizeof t->kv_capacity, "%s", sources[cfg->kv_capacity]);
    t->kv_capacity_tokens = (uint64_t)cfg->sched.num_blocks * cfg->sched.block_size;
}

uint64_t kvsim_replay_gpus(const struct kvsim_replay_config *cfg)
{
    const struct kvsim_disagg_config *d = &cfg->disagg;
    uint64_t engines = d->prefill_engines
                           ? (uint64_t)d->prefill_engines + d->decode_engines
                           : (uint64_t)cfg->num_engines *
                                 (cfg->data_parallel_size > 1 ? cfg->data_parallel_size : 1);
    return engines * (cfg->tensor_parallel_size > 1 ? cfg->tensor_parallel_size : 1);
}

/* The report of the run (wall_ns: its wall time so far). Returns 0 or a negative errno. */
static int replay_summarize(struct replay *rp, int64_t wall_ns, struct kvsim_report *report)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    bool early = strcmp(rp->end_reason, "finished") != 0;
    /* A bound reached after everything finished is a complete run. */
    if (kvsim_metrics_mark_incomplete(rp->metrics) == 0 && early &&
        strcmp(rp->end_reason, "max-sim-time") == 0)
        rp->end_reason = "finished";
    bool disagg = rp->num_prefill > 0;
    struct kvsim_report_run run = {
        .trace = cfg->trace_path ? cfg->trace_path
                 : cfg->requests ? (cfg->trace_label ? cfg->trace_label : "requests")
                                 : "synthetic",
        .trace_sha256 = rp->trace.sha256[0] ? rp->trace.sha256 : NULL,
        .router = kvsim_router_policy_name(disagg ? cfg->disagg.prefill_router : cfg->router),
        .seed = cfg->seed,
        .num_engines = rp->num_engines,
        .data_parallel_size = rp->dp,
        .tensor_parallel_size = cfg->tensor_parallel_size,
        .enable_expert_parallel = cfg->enable_expert_parallel,
        .num_threads = rp->num_threads,
        .vllm_contract = cfg->sched.vllm_contract,
        .engine = disagg ? NULL : &cfg->sched,
        .prefill = disagg ? &cfg->disagg.prefill_sched : NULL,
        .decode = disagg ? &cfg->disagg.decode_sched : NULL,
        .slo = cfg->slo,
        .config_text = cfg->config_text,
        .wall_ns = wall_ns,
        .end_reason = rp->end_reason,
        .end_ns = (strcmp(rp->end_reason, "finished") != 0 ? rp->b_cur : replay_last_instant(rp)) -
                  rp->trace.reqs[0].arrival_ns,
    };
    int rc = disagg ? replay__disagg_records(rp) : 0; /* the records' handoff fields */
    if (rc == 0)
        rc = kvsim_metrics_summarize(rp->metrics, &run, report);
    if (rc)
        return rc;
    if (disagg)
        rc = replay__disagg_summarize(rp, report);
    if (rc == 0) {
        kvsim_engines_timing(&cfg->model, cfg->sched.num_blocks, rp->engines, rp->num_engines,
                             &report->timing);
        kvsim_replay_capacity_summary(cfg, &report->timing);
    }
    if (rc == 0)
        rc = summarize_engines(rp, report);
    for (uint32_t d = 0; rc == 0 && rp->lockstep && d < rp->num_deployments; d++) {
        report->timing.lockstep = true;
        report->timing.lockstep_steps += rp->lockstep[d].steps;
        report->timing.lockstep_dummy_rank_steps += rp->lockstep[d].dummy_rank_steps;
    }
    if (rc == 0 && rp->acct.on)
        summarize_accounting(rp, &report->accounting);
    if (rc == 0)
        rc = unbounded_reuse(&rp->trace, cfg->sched.block_size, report);
    if (rc == 0 && rp->tiers)
        kvsim_tier_topology_summarize(rp->tiers, rp->engines, rp->num_engines, &report->offload);
    if (rc)
        kvsim_report_fini(report);
    return rc;
}

/* Every file the run writes, through the output stage (kvsim_outputs_write). Returns 0 or a
 * negative errno with the message. */
static int replay_write(struct replay *rp, const struct kvsim_report *report, char *err,
                        size_t errlen)
{
    const struct kvsim_outputs *o = &rp->cfg->outputs;
    struct kvsim_timeseries ts = {0};
    struct kvsim_handoff_event *events = NULL;
    size_t num_events = 0;
    int rc = 0;
    if (kvsim_outputs_want_timeseries(o))
        rc = collect_timeseries(rp, &ts);
    if (rc == 0 && o->handoff_events_path && rp->num_prefill)
        rc = replay__disagg_handoff_events(rp, &events, &num_events);
    struct kvsim_output_data data = {rp->metrics, &ts, events, num_events};
    if (rc == 0)
        rc = kvsim_outputs_write(o, report, &data, err, errlen);
    free(events);
    kvsim_timeseries_fini(&ts);
    return rc;
}

int kvsim_replay_run(const struct kvsim_replay_config *cfg, struct kvsim_report *report, char *err,
                     size_t errlen)
{
    struct replay rp = {.cfg = cfg};
    err[0] = 0;
    int rc = replay_validate(cfg, err, errlen);
    if (rc)
        return rc;
    int64_t wall0 = base_monotonic_ns();
    if ((rc = replay_load(&rp, err, errlen)))
        return rc;
    rc = replay_setup(&rp, err, errlen);
    if (rc == 0)
        rc = replay_epochs(&rp, err, errlen);
    if (rc == 0)
        rc = replay_summarize(&rp, base_monotonic_ns() - wall0, report);
    if (rc == 0 && (rc = replay_write(&rp, report, err, errlen)))
        kvsim_report_fini(report);
    if (rc && !err[0])
        snprintf(err, errlen, "replay failed: %s", kvsim_strerror(rc));
    replay_free(&rp);
    return rc;
}
