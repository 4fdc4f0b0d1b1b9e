/*
 * arrivals.c - when requests arrive: open-loop arrivals in trace order, session turns released
 * by their parent's finish plus their think time, and the closed loop's sessions started as
 * slots free (cfg->replay_concurrency). Pending follow-ups wait in a min-heap on (time, request).
 *
 * Threads: the coordinator only, at a boundary or before the epochs (the workers parked).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/replay/replay_internal.h"

#include "runtime/engine/engine.h"
#include "runtime/kvsim.h" /* KVSIM_EINVARIANT */

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
    if (rp->arr.heap_len == rp->arr.heap_cap) {
        size_t nc = rp->arr.heap_cap ? rp->arr.heap_cap * 2 : 64;
        struct follow_up *nh = realloc(rp->arr.heap, nc * sizeof *nh);
        if (!nh)
            return -ENOMEM;
        rp->arr.heap = nh;
        rp->arr.heap_cap = nc;
    }
    size_t i = rp->arr.heap_len++;
    while (i > 0 && fu_less(&f, &rp->arr.heap[(i - 1) / 2])) {
        rp->arr.heap[i] = rp->arr.heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    rp->arr.heap[i] = f;
    return 0;
}

static struct follow_up heap_pop(struct replay *rp)
{
    struct follow_up top = rp->arr.heap[0], last = rp->arr.heap[--rp->arr.heap_len];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= rp->arr.heap_len)
            break;
        if (c + 1 < rp->arr.heap_len && fu_less(&rp->arr.heap[c + 1], &rp->arr.heap[c]))
            c++;
        if (!fu_less(&rp->arr.heap[c], &last))
            break;
        rp->arr.heap[i] = rp->arr.heap[c];
        i = c;
    }
    if (rp->arr.heap_len)
        rp->arr.heap[i] = last;
    return top;
}

/* Next open-loop request (first turns and independent requests), in trace order; none in a
 * closed loop (they arrive when a slot frees). */
static int64_t next_open_arrival(struct replay *rp)
{
    if (rp->arr.concurrency)
        return INT64_MAX;
    while (rp->arr.open_cursor < rp->trace.num_reqs &&
           rp->trace.reqs[rp->arr.open_cursor].prev_turn >= 0)
        rp->arr.open_cursor++;
    return rp->arr.open_cursor < rp->trace.num_reqs ? rp->trace.reqs[rp->arr.open_cursor].arrival_ns
                                                    : INT64_MAX;
}

/* Closed loop: the next pending session's first turn, or -1 when every session is out (then
 * no finish releases anything: the slot parents still in flight stop counting). */
static int32_t take_session(struct replay *rp)
{
    while (rp->arr.session_cursor < rp->trace.num_reqs &&
           rp->trace.reqs[rp->arr.session_cursor].prev_turn >= 0)
        rp->arr.session_cursor++;
    if (rp->arr.session_cursor < rp->trace.num_reqs)
        return (int32_t)rp->arr.session_cursor++;
    if (!rp->arr.sessions_exhausted) {
        rp->arr.sessions_exhausted = true;
        rp->arr.parents_in_flight -= rp->arr.slot_parents;
        rp->arr.slot_parents = 0;
        for (size_t i = 0; i < rp->trace.num_reqs; i++)
            rp->arr.releases[i] = rp->arr.next_turn[i];
    }
    return -1;
}

/* Whether request req's finish releases a session slot (closed loop, sessions pending). */
bool replay__releases_slot(const struct replay *rp, uint32_t req)
{
    return rp->arr.concurrency && !rp->arr.sessions_exhausted && rp->arr.slot_parent[req];
}

int64_t replay__next_arrival(struct replay *rp)
{
    int64_t a = next_open_arrival(rp);
    if (rp->arr.heap_len && rp->arr.heap[0].t < a)
        a = rp->arr.heap[0].t;
    return a;
}

/* The sessions' turn links and what a finish releases, the closed loop's first
 * sessions. Returns 0 or -ENOMEM. */
int replay__setup_sessions(struct replay *rp)
{
    size_t R = rp->trace.num_reqs;
    rp->arr.min_delay = INT64_MAX;
    for (size_t i = 0; i < R; i++)
        rp->arr.next_turn[i] = -1;
    for (size_t i = 0; i < R; i++) {
        int32_t p = rp->trace.reqs[i].prev_turn;
        if (p >= 0) {
            rp->arr.next_turn[p] = (int32_t)i;
            if (rp->trace.reqs[i].delay_ns < rp->arr.min_delay)
                rp->arr.min_delay = rp->trace.reqs[i].delay_ns;
        }
    }
    /* Disaggregated epochs pipelined (disagg_pipelined) when no finish releases anything:
     * KVSIM_REPLAY_DISAGG_PIPELINE=0 runs them one after the other (to compare). */
    const char *pipe_env = getenv("KVSIM_REPLAY_DISAGG_PIPELINE");
    rp->ep.pipelined = rp->num_prefill && rp->arr.min_delay == INT64_MAX && !rp->arr.concurrency &&
                       !(pipe_env && strcmp(pipe_env, "0") == 0);
    if (rp->arr.min_delay == INT64_MAX || rp->arr.concurrency)
        rp->arr.min_delay = 0;     /* a freed slot's next session arrives at the finish itself */
    for (size_t i = 0; i < R; i++) /* what a finish releases, as the engines see it */
        rp->arr.releases[i] =
            rp->arr.concurrency && rp->arr.next_turn[i] < 0 ? INT32_MAX : rp->arr.next_turn[i];
    /* Closed loop: the first sessions start together at the first arrival. */
    for (uint32_t k = 0; k < rp->arr.concurrency; k++) {
        int32_t first = take_session(rp);
        if (first < 0)
            break;
        int rc = heap_push(rp, (struct follow_up){rp->trace.reqs[0].arrival_ns, (uint32_t)first});
        if (rc)
            return rc;
    }
    return 0;
}

int replay__release_finished(struct replay *rp, char *err, size_t errlen)
{
    size_t nfreed = 0;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        uint32_t n;
        const struct kvsim_engine_done *d = kvsim_engine_take_done(rp->engines[e], &n);
        for (uint32_t i = 0; i < n; i++) {
            int32_t nx = rp->arr.next_turn[d[i].req];
            if (nx < 0 && replay__releases_slot(rp, d[i].req)) {
                rp->arr.slot_parent[d[i].req] = 0;
                rp->arr.parents_in_flight--;
                rp->arr.slot_parents--;
                if (nfreed == rp->arr.cap_freed) {
                    size_t nc = rp->arr.cap_freed ? 2 * rp->arr.cap_freed : 64;
                    struct follow_up *nf = realloc(rp->arr.freed, nc * sizeof *nf);
                    if (!nf)
                        return -ENOMEM;
                    rp->arr.freed = nf;
                    rp->arr.cap_freed = nc;
                }
                rp->arr.freed[nfreed++] = (struct follow_up){d[i].finish_ns, d[i].req};
            }
            if (nx < 0)
                continue;
            rp->arr.parents_in_flight--;
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
            if (t < rp->ep.b_cur) {
                snprintf(err, errlen,
                         "internal error: request %" PRId32
                         " (a session's next turn) was due at %" PRId64
                         " ns, found at the boundary %" PRId64 " ns",
                         nx, t, rp->ep.b_cur);
                return KVSIM_EINVARIANT;
            }
            int rc = heap_push(rp, (struct follow_up){t, (uint32_t)nx});
            if (rc)
                return rc;
        }
    }
    if (nfreed) {
        qsort(rp->arr.freed, nfreed, sizeof *rp->arr.freed, follow_up_cmp);
        for (size_t i = 0; i < nfreed; i++) {
            if (rp->arr.freed[i].t < rp->ep.b_cur) {
                snprintf(err, errlen,
                         "internal error: request %" PRIu32 " freed a session slot at %" PRId64
                         " ns, found at the boundary %" PRId64 " ns",
                         rp->arr.freed[i].req, rp->arr.freed[i].t, rp->ep.b_cur);
                return KVSIM_EINVARIANT;
            }
            int32_t next = take_session(rp);
            if (next < 0)
                break;
            int rc = heap_push(rp, (struct follow_up){rp->arr.freed[i].t, (uint32_t)next});
            if (rc)
                return rc;
        }
    }
    return 0;
}

int64_t replay__take_arrival(struct replay *rp, int64_t until)
{
    int64_t a = next_open_arrival(rp);
    bool from_heap =
        rp->arr.heap_len && (rp->arr.heap[0].t < a ||
                             (rp->arr.heap[0].t == a && rp->arr.heap[0].req < rp->arr.open_cursor));
    int64_t t = from_heap ? rp->arr.heap[0].t : a;
    if (t > until || t == INT64_MAX)
        return -1;
    return from_heap ? heap_pop(rp).req : (int64_t)rp->arr.open_cursor++;
}

/* The pending follow-ups due by t, from heap slot i down (the heap's order prunes the rest). */
static int known_in_heap(struct replay *rp, size_t i, int64_t t,
                         int (*fn)(struct replay *, void *, uint32_t), void *ctx)
{
    if (i >= rp->arr.heap_len || rp->arr.heap[i].t > t)
        return 0;
    int rc = fn(rp, ctx, rp->arr.heap[i].req);
    if (rc == 0)
        rc = known_in_heap(rp, 2 * i + 1, t, fn, ctx);
    if (rc == 0)
        rc = known_in_heap(rp, 2 * i + 2, t, fn, ctx);
    return rc;
}

int replay__arrivals_known_by(struct replay *rp, int64_t t,
                              int (*fn)(struct replay *, void *, uint32_t), void *ctx)
{
    int rc = 0;
    if (!rp->arr.concurrency) /* open loop: first turns and independent requests, in trace order */
        for (size_t c = rp->arr.open_cursor; c < rp->trace.num_reqs && rc == 0; c++) {
            if (rp->trace.reqs[c].prev_turn >= 0)
                continue;
            if (rp->trace.reqs[c].arrival_ns > t)
                break;
            rc = fn(rp, ctx, (uint32_t)c);
        }
    return rc ? rc : known_in_heap(rp, 0, t, fn, ctx);
}
