/*
 * disagg.c - the coordinator of a disaggregated replay (replay.h, docs/disagg.md).
 *
 * Engines [0, P) serve prefills, [P, P + D) decodes; each pool has its router. An epoch runs the
 * prefill engines, then the decode engines (replay.c, disagg_epoch). Between the two phases the
 * coordinator reads the prefill engines' outboxes in (instant, engine, order): each pin is
 * routed to a decode engine at its instant (the decode router sees the decode engines' loads as
 * of the epoch's start plus its own bookings of the epoch) and posted there as an arrival; each
 * abort of a routed handoff is posted as a cancel. After the decode phase it reads the decode
 * engines' reservations the same way and queues their transfers on the prefill engines' links,
 * first come first served: a transfer starts when it is reserved or when the last transfer that
 * started on the link ends, whichever is later, and one whose handoff was aborted before that
 * never starts and takes no link time. A transfer's end is posted to both engines as a release
 * and an activation when it starts.
 *
 * Why this is exact: a prefill engine's messages reach the decode engines within the epoch at
 * their instants, because the decode phase runs after the prefill phase. The other direction,
 * a release caused by a reservation, would come too late if it fell inside the epoch, so the
 * epoch never extends past the earliest instant a reservation could happen plus the shortest
 * transfer, nor past a busy link's end plus the shortest transfer queued behind it
 * (replay__disagg_bound): every transfer started in it ends after it, and its release and
 * activation are posted before either engine gets there. Starts are taken in time order with
 * the facts (an abort at a transfer's start instant wins: nothing is read). A pin's abort deadline
 * is the prefill engine's own event; the cancel it sends travels forward like a pin. Nothing
 * depends on thread timing: the phases and the merge orders fix everything.
 */
#include "runtime/replay/replay_internal.h"

#include "runtime/engine/engine.h"
#include "runtime/kvsim.h" /* the error codes (KVSIM_E*, kvsim_strerror) */
#include "runtime/replay/replay.h"
#include "runtime/report/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int replay__disagg_setup(struct replay *rp)
{
    const struct kvsim_disagg_config *dc = &rp->cfg->disagg;
    size_t R = rp->trace.num_reqs;
    rp->dis.handoffs = calloc(R ? R : 1, sizeof *rp->dis.handoffs); /* all KVSIM_HANDOFF_NONE */
    rp->dis.links = calloc(rp->num_prefill, sizeof *rp->dis.links);
    if (!rp->dis.handoffs || !rp->dis.links)
        return -ENOMEM;
    rp->dis.disagg = (struct kvsim_engine_disagg){
        .handoffs = rp->dis.handoffs,
        .abort_timeout_ns = dc->abort_timeout_ns,
        .release_immediately = dc->release_immediately,
        .decode_max_model_len = dc->decode_sched.max_model_len,
        .decode_block_size = dc->decode_sched.block_size,
        .decode_num_blocks = dc->decode_sched.num_blocks,
    };
    int rc = kvsim_router_create(dc->decode_router, rp->num_decode, rp->cfg->overlap_weight,
                                 &rp->dis.decode_router);
    if (rc == 0)
        rc = replay__route_view(rp, rp->dis.decode_router, &rp->rt.delayed[1]);
    if (rc == 0 && !rp->rt.drain_events && !(rp->rt.delayed[1] && rp->rt.view_indexer))
        kvsim_router_use_pools(rp->dis.decode_router, rp->pools + rp->num_prefill);
    return rc;
}

void replay__disagg_free(struct replay *rp)
{
    kvsim_router_destroy(rp->dis.decode_router);
    free(rp->dis.handoffs);
    for (uint32_t p = 0; rp->dis.links && p < rp->num_prefill; p++)
        free(rp->dis.links[p].queue);
    free(rp->dis.links);
    free(rp->dis.msgs);
    free(rp->dis.msg_engine);
    free(rp->dis.pfacts);
}

static struct kvsim_transfer_model transfer_model(const struct replay *rp)
{
    struct kvsim_transfer_model m = rp->cfg->disagg.transfer;
    m.kv_bytes_per_token = rp->cfg->kv_bytes_per_token;
    return m;
}

static int64_t add_sat(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

int64_t replay__disagg_bound(const struct replay *rp)
{
    int64_t first = INT64_MAX, first_pin = INT64_MAX;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        int64_t h = rp->pubs[e]->earliest_handoff;
        if (h < first)
            first = h;
        if (e < rp->num_prefill && h < first_pin)
            first_pin = h;
    }
    struct kvsim_transfer_model m = transfer_model(rp);
    int64_t bound = first == INT64_MAX ? INT64_MAX : add_sat(first, kvsim_transfer_min_ns(&m) - 1);
    /* A transfer queued on a busy link starts no earlier than the link's last end. */
    for (uint32_t p = 0; p < rp->num_prefill; p++) {
        const struct replay_link *l = &rp->dis.links[p];
        int64_t shortest = INT64_MAX;
        for (uint32_t i = 0; i < l->len; i++) {
            const struct kvsim_handoff *h = &rp->dis.handoffs[l->queue[(l->head + i) % l->cap]];
            int64_t d = kvsim_transfer_duration_ns(&m, h->transfer_tokens);
            if (!kvsim_handoff_is_final(h) && d < shortest)
                shortest = d;
        }
        if (shortest != INT64_MAX && add_sat(l->free, shortest - 1) < bound)
            bound = add_sat(l->free, shortest - 1);
    }
    /* A session turn that arrives on a decode engine in this epoch finishes no earlier than its
     * pin (one decode step later, or at once when an abort cancels it), and its follow-up comes
     * min_delay after that. */
    if (rp->arr.parents_in_flight && first_pin != INT64_MAX) {
        int64_t follow = add_sat(first_pin, rp->arr.min_delay);
        if (follow < bound)
            bound = follow;
    }
    return bound;
}

/* ---- merging the outboxes ------------------------------------------------------------------ */

static int msg_cmp(const void *a, const void *b, void *ctx)
{
    const struct replay *sort_rp = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const struct kvsim_engine_msg *x = &sort_rp->dis.msgs[i], *y = &sort_rp->dis.msgs[j];
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    if (sort_rp->dis.msg_engine[i] != sort_rp->dis.msg_engine[j])
        return sort_rp->dis.msg_engine[i] < sort_rp->dis.msg_engine[j] ? -1 : 1;
    return (i > j) - (i < j); /* an engine's own order */
}

/* Collects the outboxes of engines [lo, hi) and returns their messages' order in *order
 * (indexes into rp->dis.msgs), by (instant, engine, the engine's order). Returns the count or a
 * negative errno. */
static int64_t merge_outboxes(struct replay *rp, uint32_t lo, uint32_t hi, size_t **order)
{
    rp->dis.num_msgs = 0;
    for (uint32_t e = lo; e < hi; e++) {
        uint32_t n;
        const struct kvsim_engine_msg *m = kvsim_engine_take_outbox(rp->engines[e], &n);
        if (rp->dis.num_msgs + n > rp->dis.cap_msgs) {
            size_t nc = rp->dis.cap_msgs ? rp->dis.cap_msgs : 64;
            while (nc < rp->dis.num_msgs + n)
                nc *= 2;
            struct kvsim_engine_msg *nm = realloc(rp->dis.msgs, nc * sizeof *nm);
            if (nm)
                rp->dis.msgs = nm;
            uint32_t *ne = realloc(rp->dis.msg_engine, nc * sizeof *ne);
            if (ne)
                rp->dis.msg_engine = ne;
            if (!nm || !ne)
                return -ENOMEM;
            rp->dis.cap_msgs = nc;
        }
        for (uint32_t i = 0; i < n; i++) {
            rp->dis.msgs[rp->dis.num_msgs] = m[i];
            rp->dis.msg_engine[rp->dis.num_msgs++] = e;
        }
    }
    *order = malloc((rp->dis.num_msgs ? rp->dis.num_msgs : 1) * sizeof **order);
    if (!*order)
        return -ENOMEM;
    for (size_t i = 0; i < rp->dis.num_msgs; i++)
        (*order)[i] = i;
    qsort_r(*order, rp->dis.num_msgs, sizeof **order, msg_cmp, rp);
    return (int64_t)rp->dis.num_msgs;
}

static int post(struct replay *rp, uint32_t engine, int64_t t, enum kvsim_engine_msg_kind kind,
                uint32_t req, uint64_t a)
{
    struct kvsim_engine_msg m = {.t = t, .kind = (uint32_t)kind, .req = req, .a = a};
    return kvsim_engine_post(rp->engines[engine], &m);
}

/* Keeps a prefill fact for after_decode. Returns 0 or -ENOMEM. */
static int keep_fact(struct replay *rp, const struct kvsim_engine_msg *m)
{
    if (rp->dis.num_pfacts == rp->dis.cap_pfacts) {
        size_t nc = rp->dis.cap_pfacts ? rp->dis.cap_pfacts * 2 : 64;
        struct kvsim_engine_msg *np = realloc(rp->dis.pfacts, nc * sizeof *np);
        if (!np)
            return -ENOMEM;
        rp->dis.pfacts = np;
        rp->dis.cap_pfacts = nc;
    }
    rp->dis.pfacts[rp->dis.num_pfacts++] = *m;
    return 0;
}

/* ---- after the prefill phase: routing pins, cancelling aborts ------------------------------ */

/*
 * The prefill engines' facts of the epoch, in (instant, engine, order): each pin is routed to a
 * decode engine at its instant and posted there as an arrival; each abort of a routed handoff
 * is posted as a cancel. The facts themselves are applied to the handoffs after the decode
 * phase, merged with the decode engines' facts in virtual-time order (after_decode).
 */
int replay__disagg_after_prefill(struct replay *rp)
{
    size_t *order;
    int64_t n = merge_outboxes(rp, 0, rp->num_prefill, &order);
    if (n < 0)
        return (int)n;
    kvsim_router_new_boundary(rp->dis.decode_router);
    rp->dis.num_pfacts = 0;
    int rc = 0;
    for (int64_t k = 0; k < n && rc == 0; k++) {
        struct kvsim_engine_msg *m = &rp->dis.msgs[order[k]];
        struct kvsim_handoff *h = &rp->dis.handoffs[m->req];
        if (m->kind == KVSIM_MSG_PINNED) {
            kvsim_router_view_at(rp->dis.decode_router, m->t); /* a pin is routed at its instant */
            int64_t d = replay__route(rp, rp->dis.decode_router, rp->pubs + rp->num_prefill, m->req,
                                      rp->cfg->disagg.decode_sched.block_size, m->hashes,
                                      m->num_hashes, NULL);
            if (d < 0) {
                rc = (int)d;
                break;
            }
            h->decode_engine = (int32_t)(rp->num_prefill + (uint32_t)d); /* the booking */
            /* The prefill's prompt hashes go on with the arrival (the decode engine frees them). */
            struct kvsim_engine_msg a = {.t = m->t,
                                         .kind = KVSIM_MSG_ARRIVE,
                                         .req = m->req,
                                         .a = m->a != 0,
                                         .hashes = m->hashes,
                                         .num_hashes = m->num_hashes};
            rc = kvsim_engine_post(rp->engines[h->decode_engine], &a);
            if (rc == 0) {
                m->hashes = NULL;
                m->num_hashes = 0;
            }
        } else if (m->kind == KVSIM_MSG_ABORTED && h->decode_engine >= 0) {
            rc = post(rp, (uint32_t)h->decode_engine, m->t, KVSIM_MSG_CANCEL, m->req, 0);
        }
        if (rc == 0)
            rc = keep_fact(rp, m);
    }
    for (int64_t k = 0; k < n; k++) { /* the hashes of pins not passed on (after an error) */
        free(rp->dis.msgs[k].hashes);
        rp->dis.msgs[k].hashes = NULL;
    }
    free(order);
    return rc;
}

/* ---- after the decode phase: the epoch's facts in order, transfers ------------------------- */

/* Queues a reserved handoff's transfer on its prefill engine's link. Returns 0 or -ENOMEM. */
static int link_push(struct replay *rp, const struct kvsim_handoff *h)
{
    struct replay_link *l = &rp->dis.links[h->prefill_engine];
    if (l->len == l->cap) {
        uint32_t nc = l->cap ? l->cap * 2 : 16;
        uint32_t *nq = malloc(nc * sizeof *nq);
        if (!nq)
            return -ENOMEM;
        for (uint32_t i = 0; i < l->len; i++)
            nq[i] = l->queue[(l->head + i) % l->cap];
        free(l->queue);
        l->queue = nq;
        l->head = 0;
        l->cap = nc;
    }
    l->queue[(l->head + l->len++) % l->cap] = h->req;
    return 0;
}

/*
 * Starts, in time order, every queued transfer whose start comes before t (at or before t when
 * inclusive): a transfer starts at max(its reservation, its link's last end); one whose handoff
 * was aborted meanwhile leaves the queue without taking link time. Its end is posted to both
 * engines. Returns 0, KVSIM_EINVARIANT (the lookahead was wrong: err says why), -EOVERFLOW (the
 * transfer would end beyond any representable instant) or -ENOMEM.
 */
static int links_start(struct replay *rp, int64_t t, bool inclusive, char *err, size_t errlen)
{
    struct kvsim_transfer_model tm = transfer_model(rp);
    for (;;) {
        /* the earliest start over the links (lowest link first at one instant) */
        uint32_t best = UINT32_MAX;
        int64_t best_start = INT64_MAX;
        for (uint32_t p = 0; p < rp->num_prefill; p++) {
            struct replay_link *l = &rp->dis.links[p];
            while (l->len && kvsim_handoff_is_final(&rp->dis.handoffs[l->queue[l->head]]))
                l->head = (l->head + 1) % l->cap, l->len--; /* aborted before it started */
            if (!l->len)
                continue;
            const struct kvsim_handoff *h = &rp->dis.handoffs[l->queue[l->head]];
            int64_t s = h->reserved_ns > l->free ? h->reserved_ns : l->free;
            if (s < best_start)
                best = p, best_start = s;
        }
        if (best == UINT32_MAX || best_start > t || (!inclusive && best_start == t))
            return 0;
        struct replay_link *l = &rp->dis.links[best];
        struct kvsim_handoff *h = &rp->dis.handoffs[l->queue[l->head]];
        int64_t d = kvsim_transfer_duration_ns(&tm, h->transfer_tokens);
        int64_t end;
        if (!kvsim_clock_add(best_start, d, &end)) {
            snprintf(err, errlen,
                     "the KV transfer link of prefill engine %" PRIu32 ", handoff %" PRIu64
                     " (%" PRIu64 " tokens): a transfer of %" PRId64 " ns starting at %" PRId64
                     " ns would end past the clock's last instant (%" PRId64
                     " ns, int64): the link is too slow (--kv-transfer-gbps)",
                     best, h->id, h->transfer_tokens, d, best_start, (int64_t)KVSIM_CLOCK_END_NS);
            return -EOVERFLOW;
        }
        if (end <= rp->ep.b_next) { /* the lookahead was wrong: the release would come too late */
            snprintf(err, errlen,
                     "internal error: handoff %" PRIu64 " starts its transfer at %" PRId64
                     " ns and ends at %" PRId64 " ns, inside the epoch (%" PRId64 ", %" PRId64 "]",
                     h->id, best_start, end, rp->ep.b_cur, rp->ep.b_next);
            return KVSIM_EINVARIANT;
        }
        l->head = (l->head + 1) % l->cap;
        l->len--;
        l->free = end;
        int rc = kvsim_handoff_transfer(h, best_start, end,
                                        kvsim_transfer_bytes(&tm, h->transfer_tokens));
        if (rc == 0)
            rc = post(rp, best, end, KVSIM_MSG_RELEASE, h->req, 0);
        if (rc == 0)
            rc = post(rp, (uint32_t)h->decode_engine, end, KVSIM_MSG_ACTIVATE, h->req, 0);
        if (rc) {
            snprintf(err, errlen, "internal error: handoff %" PRIu64 " could not start: %s", h->id,
                     kvsim_strerror(rc));
            return rc < 0 ? rc : KVSIM_EINVARIANT;
        }
    }
}

/* Applies one fact to its handoff. A fact the state machine ignores (a reservation after the
 * abort that cancels it, at the same instant) starts nothing. */
static int apply_fact(struct replay *rp, const struct kvsim_engine_msg *m, char *err, size_t errlen)
{
    const struct kvsim_disagg_config *dc = &rp->cfg->disagg;
    struct kvsim_handoff *h = &rp->dis.handoffs[m->req];
    int rc = 0;
    switch ((enum kvsim_engine_msg_kind)m->kind) {
    case KVSIM_MSG_PINNED:
        rc = kvsim_handoff_pin(h, m->t, (uint32_t)m->a, m->b,
                               dc->release_immediately || m->a == 0 ? 0 : dc->abort_timeout_ns);
        if (rc == 0 && (dc->release_immediately || m->a == 0))
            rc = kvsim_handoff_release_source(h, m->t);
        if (rc == 0)
            rc = kvsim_handoff_route(h, m->t, h->decode_engine);
        if (rc == 0 && m->a == 0) /* nothing pinned: the decode computes the prompt */
            rc = kvsim_handoff_complete_without_kv(h, m->t);
        break;
    case KVSIM_MSG_ABORTED: rc = kvsim_handoff_abort(h, m->t); break;
    case KVSIM_MSG_COMPLETED: rc = kvsim_handoff_complete(h, m->t); break;
    case KVSIM_MSG_RESERVED:
        rc = kvsim_handoff_reserve(h, m->t, m->a);
        if (rc == 0)
            rc = link_push(rp, h);
        break;
    default: rc = -EINVAL; break;
    }
    if (rc < 0 && !err[0])
        snprintf(err, errlen,
                 "internal error: handoff %" PRIu64 " (%s) refused a fact of kind %" PRIu32
                 " at %" PRId64 " ns",
                 h->id, kvsim_handoff_state_name(h->state), m->kind, m->t);
    return rc < 0 ? rc : 0;
}

int replay__disagg_after_decode(struct replay *rp, char *err, size_t errlen)
{
    size_t *order;
    int64_t n = merge_outboxes(rp, rp->num_prefill, rp->num_engines, &order);
    if (n < 0)
        return (int)n;
    /* Merge with the prefill facts kept: by instant, the prefill engines' first (their phase
     * ran first: a decode engine saw their messages at an instant before acting at it). */
    int rc = 0;
    size_t i = 0;
    int64_t k = 0;
    while (rc == 0 && (i < rp->dis.num_pfacts || k < n)) {
        bool take_p =
            k == n || (i < rp->dis.num_pfacts && rp->dis.pfacts[i].t <= rp->dis.msgs[order[k]].t);
        const struct kvsim_engine_msg *m =
            take_p ? &rp->dis.pfacts[i++] : &rp->dis.msgs[order[k++]];
        rc = links_start(rp, m->t, false, err, errlen); /* the starts before it */
        if (rc == 0)
            rc = apply_fact(rp, m, err, errlen);
    }
    if (rc == 0)
        rc = links_start(rp, rp->ep.b_next, true, err, errlen);
    free(order);
    return rc;
}

bool replay__disagg_stuck(const struct replay *rp, char *err, size_t errlen)
{
    uint32_t unfinished = 0, pinned = 0;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        unfinished += kvsim_engine_unfinished(rp->engines[e]);
        pinned += rp->pubs[e]->pinned_blocks;
    }
    if (!unfinished)
        return false;
    snprintf(err, errlen,
             "dead end: the disaggregated replay can make no more progress with %u unfinished "
             "requests (%u blocks pinned on prefill engines): no step, transfer, arrival or "
             "abort deadline is left (is the decode pool too small for a request and the abort "
             "timeout off?)",
             unfinished, pinned);
    return true;
}

/* ---- the report ---------------------------------------------------------------------------- */

static enum kvsim_req_handoff outcome_of(const struct kvsim_handoff *h)
{
    if (h->state == KVSIM_HANDOFF_COMPLETED)
        return KVSIM_REQ_HANDOFF_COMPLETED;
    if (h->state == KVSIM_HANDOFF_ABORTED)
        return KVSIM_REQ_HANDOFF_ABORTED;
    return KVSIM_REQ_HANDOFF_PENDING;
}

static bool timed(int64_t t) { return t != KVSIM_HANDOFF_TIME_NONE; }

int replay__disagg_records(struct replay *rp)
{
    for (size_t i = 0; i < rp->trace.num_reqs; i++) {
        const struct kvsim_handoff *h = &rp->dis.handoffs[i];
        const struct kvsim_req_record *rec = kvsim_metrics_record(rp->metrics, (uint32_t)i);
        if (h->state == KVSIM_HANDOFF_NONE ||
            (h->state == KVSIM_HANDOFF_PREFILLING && rec->status == KVSIM_REQ_REJECTED))
            continue; /* refused by the prefill engine: no handoff */
        int64_t pin = timed(h->pin_ns) && timed(h->source_released_ns)
                          ? h->source_released_ns - h->pin_ns
                          : KVSIM_TIME_NONE;
        int64_t xfer = h->state == KVSIM_HANDOFF_COMPLETED && timed(h->transfer_start_ns)
                           ? h->transfer_end_ns - h->transfer_start_ns
                           : KVSIM_TIME_NONE;
        int rc = kvsim_metrics_set_handoff(rp->metrics, (uint32_t)i, h->prefill_engine,
                                           h->decode_engine, outcome_of(h), pin, xfer);
        if (rc)
            return rc;
    }
    return 0;
}

int replay__disagg_summarize(struct replay *rp, struct kvsim_report *report)
{
    struct kvsim_disagg_summary *d = &report->disagg;
    memset(d, 0, sizeof *d);
    d->enabled = true;
    d->prefill_engines = rp->num_prefill;
    d->decode_engines = rp->num_decode;
    d->epochs = rp->ep.epochs;
    size_t R = rp->trace.num_reqs;
    double *pin = malloc((R ? R : 1) * sizeof *pin), *xfer = malloc((R ? R : 1) * sizeof *xfer);
    double *wait = malloc((R ? R : 1) * sizeof *wait);
    d->per_prefill = calloc(rp->num_prefill, sizeof *d->per_prefill);
    if (!pin || !xfer || !wait || !d->per_prefill) {
        free(pin), free(xfer), free(wait);
        return -ENOMEM;
    }
    size_t np = 0, nx = 0, nw = 0;
    for (size_t i = 0; i < R; i++) { /* request order: the sums do not depend on threads */
        const struct kvsim_handoff *h = &rp->dis.handoffs[i];
        if (h->state == KVSIM_HANDOFF_NONE || h->state == KVSIM_HANDOFF_PREFILLING)
            continue;
        d->handoffs++;
        d->completed += h->state == KVSIM_HANDOFF_COMPLETED;
        d->aborted += h->state == KVSIM_HANDOFF_ABORTED;
        if (timed(h->source_released_ns))
            pin[np++] = (double)(h->source_released_ns - h->pin_ns);
        if (timed(h->reserved_ns))
            wait[nw++] = (double)(h->reserved_ns - h->routed_ns);
        if (h->state == KVSIM_HANDOFF_COMPLETED && timed(h->transfer_start_ns)) {
            xfer[nx++] = (double)(h->transfer_end_ns - h->transfer_start_ns);
            d->transferred_bytes += h->transfer_bytes;
            d->transferred_tokens += h->transfer_tokens;
        }
    }
    d->pending = d->handoffs - d->completed - d->aborted;
    kvsim_latency_of(pin, np, &d->pin);
    kvsim_latency_of(xfer, nx, &d->transfer);
    kvsim_latency_of(wait, nw, &d->decode_wait);
    free(pin), free(xfer), free(wait);
    for (uint32_t p = 0; p < rp->num_prefill; p++) {
        double block_ns;
        uint32_t peak;
        kvsim_engine_pin_stats(rp->engines[p], &block_ns, &peak);
        d->per_prefill[p] = (struct kvsim_prefill_pins){block_ns / 1e9, peak};
        d->pinned_block_seconds += block_ns / 1e9;
        if (peak > d->peak_pinned_blocks)
            d->peak_pinned_blocks = peak;
    }
    return 0;
}

/* ---- the handoff event log ------------------------------------------------------------------ */

static int event_cmp(const void *a, const void *b)
{
    const struct kvsim_handoff_event *x = a, *y = b;
    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    if (x->req != y->req)
        return x->req < y->req ? -1 : 1;
    return (x->kind > y->kind) - (x->kind < y->kind);
}

int replay__disagg_handoff_events(const struct replay *rp, struct kvsim_handoff_event **out,
                                  size_t *num)
{
    size_t R = rp->trace.num_reqs, n = 0;
    struct kvsim_handoff_event *evs = malloc((R ? R : 1) * 6 * sizeof *evs);
    if (!evs)
        return -ENOMEM;
    for (size_t i = 0; i < R; i++) {
        const struct kvsim_handoff *h = &rp->dis.handoffs[i];
        int64_t t[6] = {h->pin_ns,          h->routed_ns,
                        h->reserved_ns,     h->transfer_start_ns,
                        h->transfer_end_ns, h->source_released_ns};
        if (h->state == KVSIM_HANDOFF_NONE)
            continue;
        for (uint32_t k = 0; k < 6; k++) {
            /* a transfer cut short by an abort did not end */
            bool cut = k == KVSIM_HANDOFF_EV_TRANSFER_END && h->state != KVSIM_HANDOFF_COMPLETED;
            /* a transfer still waiting for the link when the abort came never started */
            cut = cut || (k == KVSIM_HANDOFF_EV_TRANSFER_START &&
                          h->state == KVSIM_HANDOFF_ABORTED && t[k] > h->end_ns);
            /* nothing pinned (a prompt shorter than a block): the decode waits for no KV */
            cut = cut || (k == KVSIM_HANDOFF_EV_WAIT_START && h->pinned_blocks == 0);
            if (!timed(t[k]) || cut)
                continue;
            evs[n++] = (struct kvsim_handoff_event){
                .t_ns = t[k],
                .kind = (enum kvsim_handoff_event_kind)k,
                .handoff = h->id,
                .req = (uint32_t)i,
                .prefill_engine = h->prefill_engine,
                .decode_engine = h->decode_engine,
                .pinned_blocks = h->pinned_blocks,
                .pinned_tokens = h->pinned_tokens,
                .missing_tokens = h->transfer_tokens,
                .bytes = h->transfer_bytes,
                .completed = h->state == KVSIM_HANDOFF_COMPLETED,
                .pinned_ns = k == KVSIM_HANDOFF_EV_PIN_END ? h->source_released_ns - h->pin_ns : 0,
            };
        }
    }
    qsort(evs, n, sizeof *evs, event_cmp);
    *out = evs;
    *num = n;
    return 0;
}
