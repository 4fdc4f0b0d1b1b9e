/*
 * conform_runner.c - the scenario runner (verify.h): failure reporting, the extension rules
 * checked after every op (invariants, liveness, the #49675 progress rule, the tiers' transfer
 * bijection), and the runner's life cycle, used by `kvsim conform`, `kvsim soak` and
 * `kvsim minimize` in-process.
 *
 * Extensions (docs/conformance.md): check_invariants runs sched_check (and, with tiers,
 * kvsim_tiers_check) after every op, check_liveness fails a schedule that leaves the engine at a
 * dead end, max_futile_preemptions bounds the #49675 zero-progress preemptions, scheduler_checks
 * turns the scheduler's own boundary checks off; `offload` puts G2/G3 tiers behind G1 and the
 * `advance` op moves virtual time (transfers end in it); legacy_partial_alloc is issue 6's old
 * bug, on purpose. The two-engine form (config `prefill` and `decode`) runs a prefill and a
 * decode scheduler with the disaggregated handoff between them: its ownership invariants are
 * checked with the schedulers', and its transfers, deadlines and pending routes and
 * reservations are wake-ups for the liveness rule.
 */
#include "runtime/verify/conform_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int vfail(struct kvsim_conform_runner *c, const char *kind, const char *fmt, va_list ap)
{
    if (c->err[0] == 0) {
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        snprintf(c->kind, sizeof c->kind, "%s", kind ? kind : c->running ? "error" : "invalid");
    }
    return conform__failed(c);
}

/* A failure whose kind is "error" while running, "invalid" while parsing. */
int conform__fail(struct kvsim_conform_runner *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, NULL, fmt, ap);
    va_end(ap);
    return conform__failed(c);
}

int conform__fail_kind(struct kvsim_conform_runner *c, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, kind, fmt, ap);
    va_end(ap);
    return conform__failed(c);
}

/* ---- extension rules ------------------------------------------------------------------------ */

/* Counts requests whose status or last ownership transition changed during the op (on any
 * engine: a disaggregated request counts on each). */
static void count_transitions(struct kvsim_conform_runner *c)
{
    for (size_t i = 0; i < c->nreqs; i++) {
        struct creq *q = &c->reqs[i];
        for (int e = 0; e < c->neng; e++) {
            const struct sched_request *r = q->r[e];
            if (!r ||
                (r->status == q->seen_status[e] && r->last_transition == q->seen_transition[e] &&
                 r->last_transition_step == q->seen_transition_step[e]))
                continue;
            c->stats.transitions++;
            q->seen_status[e] = r->status;
            q->seen_transition[e] = r->last_transition;
            q->seen_transition_step[e] = r->last_transition_step;
        }
    }
}

static int check_futile(struct kvsim_conform_runner *c, const char *where)
{
    if (!c->has_max_futile || c->stats.futile_preemptions <= c->max_futile)
        return 0;
    const struct sched_step *st = c->step;
    char victims[256] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < st->num_preempted && len < sizeof victims - 1; i++)
        len += (size_t)snprintf(victims + len, sizeof victims - len, "%s%s", i ? "," : "",
                                c->reqs[st->preempted[i]->id - 1].name);
    return conform__fail_kind(
        c, "futile_preemption",
        "%s: futile preemption: preempted [%s], %" PRIu64
        " of them with their free deferred behind an in-flight step, and scheduled "
        "%" PRIu64 " tokens; %" PRIu64 " futile preemptions so far, "
        "max_futile_preemptions %" PRIu64,
        where, victims, c->futile_now, st->total_tokens, c->stats.futile_preemptions,
        c->max_futile);
}

/*
 * Two-engine form: something the handoffs will do that can wake engine e. A transfer in flight
 * (its end releases a source on the prefill engine and activates a destination on the decode
 * engine), a pin that can expire (its source freed, its decode cancelled), and for the prefill
 * engine a pin waiting for its route or its decode admission (that leads to its transfer). A
 * pin with no deadline whose decode the scenario never routes strands its blocks for good, as
 * on a real engine: it is waiting for the route, like a load for its report.
 */
static bool handoff_wakeup(const struct kvsim_conform_runner *c, int e)
{
    for (size_t i = 0; i < c->nreqs; i++) {
        const struct creq *q = &c->reqs[i];
        if (!q->disagg)
            continue;
        if (q->h.state == KVSIM_HANDOFF_DESTINATION_RESERVED ||
            q->h.state == KVSIM_HANDOFF_TRANSFERRING)
            return true;
        if (q->pin && q->h.deadline_ns != INT64_MAX)
            return true;
        if (e == CONFORM_PREFILL && q->pin &&
            (q->h.state == KVSIM_HANDOFF_SOURCE_PINNED ||
             q->h.state == KVSIM_HANDOFF_DECODE_ROUTED))
            return true;
    }
    return false;
}

/* The dead end's structure (kvsim_conform_result.shape and .dead_end): the rule that stopped the
 * waiting phase, the head, and the queued requests holding blocks behind it, without sizes or
 * names, so that dead ends of one form give one shape. */
static void dead_end_shape(struct kvsim_conform_runner *c, int e, const struct sched_request *head,
                           uint32_t free_blocks, uint32_t running)
{
    struct sched *s = c->eng[e].s;
    struct kvsim_dead_end *d = &c->dead_end;
    *d = (struct kvsim_dead_end){.found = true,
                                 .disagg = c->disagg,
                                 .decode_engine = c->disagg && e == CONFORM_DECODE,
                                 .priority = sched_get_config(s)->policy == SCHED_POLICY_PRIORITY,
                                 .rule = sched_last_waiting_stop(s, NULL),
                                 .head_status = head ? (int)head->status : -1,
                                 .head_holds = head && head->kv.num_blocks,
                                 .head_skipped = head && head->queue == SCHED_Q_SKIPPED,
                                 .running = running > 0};
    for (size_t i = 0; i < c->nreqs; i++) {
        const struct sched_request *r = c->reqs[i].r[e];
        if (!r || r == head || r->kv.num_blocks == 0 || r->status == SCHED_RUNNING ||
            sched_status_is_finished(r->status) || (unsigned)r->status >= 32)
            continue;
        d->holders++;
        d->holder_states |= 1u << r->status;
        bool parked = r->status == SCHED_WAITING_FOR_REMOTE_KVS;
        if (parked || r->last_transition == SCHED_T_PROMOTED) {
            d->holders_loaded++;
            if (parked ? r->offload_load : r->onboarded_tokens > 0)
                d->loads_onboarding = true;
            else
                d->loads_connector = true;
        }
    }
    char holders[96] = "";
    size_t hl = 0;
    for (unsigned st = 0; st < 32 && hl < sizeof holders; st++)
        if (d->holder_states & (1u << st))
            hl += (size_t)snprintf(holders + hl, sizeof holders - hl, "%s%s", hl ? "," : "",
                                   sched_status_name((enum sched_status)st));
    if (head)
        d->head_fits =
            sched_request_blocks_missing(head, sched_get_config(s)->block_size) <= free_blocks;
    snprintf(c->shape, sizeof c->shape,
             "%spolicy=%s rule=%s head=%s%s holds=%s fits=%s running=%s holders=%s%s",
             c->disagg ? "disagg " : "", d->priority ? "priority" : "fcfs",
             sched_waiting_stop_name(d->rule), head ? sched_status_name(head->status) : "none",
             d->head_skipped ? "(skipped)" : "", d->head_holds ? "yes" : "no",
             d->head_fits ? "yes" : "no", d->running ? "yes" : "no", hl ? holders : "none",
             !d->holders                       ? ""
             : d->holders_loaded == d->holders ? " (loaded)"
             : d->holders_loaded               ? " (some loaded)"
                                               : " (none loaded)");
}

/*
 * check_liveness - after a schedule: a dead end is a schedule that scheduled no token and
 * preempted nobody while nothing else is in flight (every other outstanding schedule is empty,
 * no deferred free is pending, no async load is unreported, no finished request waits for its
 * load) and requests are unfinished. Then schedule() is at a fixpoint: without an external
 * event (which nothing is waiting for) every later call returns the same empty step. In the
 * two-engine form this is about the engine scheduled, and the handoffs' wake-ups count too.
 */
static int check_liveness(struct kvsim_conform_runner *c, const char *where)
{
    const struct sched_step *st = c->step;
    int e = conform__cur(c);
    struct ceng *g = &c->eng[e];
    struct sched *s = g->s;
    if (st->total_tokens > 0 || st->num_preempted > 0 || sched_num_unfinished(s) == 0 ||
        sched_num_deferred_frees(s) > 0)
        return 0;
    for (size_t i = 0; i + 1 < g->nout; i++)
        if (g->outstanding[i]->total_tokens > 0)
            return 0;
    /* A pending transfer is a wake-up: it releases holds or ends a load when time reaches it. */
    if (c->tiers && kvsim_tiers_next_deadline(c->tiers) != OFFLOAD_NEVER)
        return 0;
    if (c->disagg && handoff_wakeup(c, e))
        return 0;
    for (size_t i = 0; i < c->nreqs; i++) {
        const struct sched_request *r = c->reqs[i].r[e];
        /* A connector load the scenario has not reported yet (an onboarding from the tiers
         * waits for a transfer, checked above: without one it is stuck; so does a
         * disaggregated decode's load). */
        if (r && !r->offload_load && !(c->reqs[i].disagg && e == CONFORM_DECODE) &&
            ((r->status == SCHED_WAITING_FOR_REMOTE_KVS && !r->recv_finished) || r->free_delayed))
            return 0;
    }
    struct kvpool *pool = sched_pool(s);
    uint32_t free_blocks = kvpool_num_free_blocks(pool);
    uint32_t active = kvpool_num_usable_blocks(pool) - free_blocks;
    struct sched_request *const *rr;
    uint32_t nr = sched_running(s, &rr);
    for (uint32_t i = 0; i < nr; i++) {
        const struct sched_request *r = rr[i];
        /* Nothing in flight, yet computed up to its last token: an output withheld the token
         * that its step sampled. A model cannot do that; the scenario is wrong, not the
         * scheduler (and the minimizer must not drift to this). */
        if (r->num_computed_tokens >= sched_request_num_tokens(r) + r->num_output_placeholders)
            return conform__fail(
                c,
                "%s: stalled by the scenario: request '%s' never received the token its "
                "last step sampled (an output must give one to every request whose chunk "
                "samples)",
                where, c->reqs[r->id - 1].name);
    }
    struct sched_request *head = sched_waiting_head(s);
    if (!head && nr)
        head = rr[0];
    char hs[256] = "no request is queued";
    if (head) {
        uint64_t needs = sched_request_blocks_missing(head, sched_get_config(s)->block_size);
        snprintf(hs, sizeof hs, "head %s (%s) needs %" PRIu64 " blocks (holds %" PRIu32 ")",
                 c->reqs[head->id - 1].name, sched_status_name(head->status), needs,
                 head->kv.num_blocks);
    }
    /* Blocks a queued request holds without a computed token: an allocation that stayed
     * committed although the request was not admitted (the legacy partial allocation). */
    char partial[256] = "";
    size_t plen = 0, nparts = 0;
    for (size_t i = 0; i < c->nreqs && plen < sizeof partial; i++) {
        const struct sched_request *r = c->reqs[i].r[e];
        if (!r || r == head || r->kv.num_blocks == 0 || r->num_computed_tokens > 0 ||
            (r->status != SCHED_WAITING && r->status != SCHED_PREEMPTED))
            continue;
        if (nparts++ == 3) {
            plen += (size_t)snprintf(partial + plen, sizeof partial - plen, ", ...");
            break;
        }
        plen += (size_t)snprintf(partial + plen, sizeof partial - plen,
                                 "%s%s (%s) holds %" PRIu32 " blocks", nparts > 1 ? ", " : "; ",
                                 c->reqs[i].name, sched_status_name(r->status), r->kv.num_blocks);
    }
    if (nparts && plen < sizeof partial)
        snprintf(partial + plen, sizeof partial - plen, " without a computed token");
    dead_end_shape(c, e, head, free_blocks, nr);
    if (c->disagg)
        return conform__fail_kind(c, "dead_end",
                                  "%s: dead end: %s engine: unfinished=%" PRIu32 " active=%" PRIu32
                                  " free=%" PRIu32 " pinned=%" PRIu32
                                  ", %s; nothing is in flight, no transfer is pending and no pin "
                                  "can expire or be released%s",
                                  where, conform__engine_name(e), sched_num_unfinished(s), active,
                                  free_blocks, kvpool_num_pinned_only_blocks(pool), hs, partial);
    return conform__fail_kind(c, "dead_end",
                              "%s: dead end: unfinished=%" PRIu32 " active=%" PRIu32
                              " free=%" PRIu32 ", %s; nothing is in flight%s%s",
                              where, sched_num_unfinished(s), active, free_blocks, hs,
                              c->tiers ? " and no transfer is pending" : "", partial);
}

/* The offload side's ownership and transfer bijection (kvsim_tiers_check): kind
 * "invariant:<rule>", the rule being what the check's message starts with. */
static int check_tiers(struct kvsim_conform_runner *c, const char *where)
{
    char msg[512] = "";
    if (!c->tiers || kvsim_tiers_check(c->tiers, msg, sizeof msg) == 0)
        return 0;
    char kind[96];
    size_t n = strcspn(msg, ":");
    snprintf(kind, sizeof kind, "invariant:%.*s", (int)(n < 64 ? n : 64), msg);
    return conform__fail_kind(c, kind, "%s: invariant violation: rule=%s", where, msg);
}

/* ---- the handoff's ownership invariants (two-engine form) ---------------------------------- */

static int handoff_violation(struct kvsim_conform_runner *c, const char *where,
                             const struct creq *q, const char *rule, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int handoff_violation(struct kvsim_conform_runner *c, const char *where,
                             const struct creq *q, const char *rule, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    char kind[96];
    snprintf(kind, sizeof kind, "invariant:handoff_%s", rule);
    if (!q)
        return conform__fail_kind(c, kind, "%s: invariant violation: rule=handoff_%s %s", where,
                                  rule, detail);
    return conform__fail_kind(
        c, kind,
        "%s: invariant violation: rule=handoff_%s handoff=%" PRIu64 " id='%s' state=%s: %s", where,
        rule, q->h.id, q->name, kvsim_handoff_state_name(q->h.state), detail);
}

static bool finished_normally(const struct sched_request *r)
{
    return r->status == SCHED_FINISHED_STOPPED || r->status == SCHED_FINISHED_LENGTH_CAPPED;
}

/* One handoff's owners: its source pin, its prefill and decode requests, its destination. */
static int check_handoff(struct kvsim_conform_runner *c, const struct creq *q, const char *where)
{
    const struct kvsim_handoff *h = &q->h;
    enum kvsim_handoff_state st = h->state;
    const struct sched_request *pr = q->r[CONFORM_PREFILL], *dr = q->r[CONFORM_DECODE];
    bool final = kvsim_handoff_is_final(h);
    bool pinned = h->pin_ns != KVSIM_HANDOFF_TIME_NONE;
    bool want_pin = !final && st >= KVSIM_HANDOFF_SOURCE_PINNED && h->pinned_blocks > 0 &&
                    !c->hcfg.release_immediately;
    if ((q->pin != NULL) != want_pin)
        return handoff_violation(c, where, q, "source", "its source pin is %s (expected %s)",
                                 q->pin ? "held" : "released", want_pin ? "held" : "released");
    if (q->pin && q->h.deadline_ns <= c->now_ns)
        return handoff_violation(c, where, q, "deadline",
                                 "its pin outlived its deadline %" PRId64 " ns (now %" PRId64 ")",
                                 h->deadline_ns, c->now_ns);
    if (st == KVSIM_HANDOFF_PREFILLING && sched_status_is_finished(pr->status))
        return handoff_violation(c, where, q, "prefill", "its prefill request is %s",
                                 sched_status_name(pr->status));
    if (pinned && (!finished_normally(pr) || pr->kv.num_blocks))
        return handoff_violation(c, where, q, "prefill",
                                 "its prefill request is %s and holds %" PRIu32
                                 " blocks after the pin (the pin owns them)",
                                 sched_status_name(pr->status), pr->kv.num_blocks);
    if (st <= KVSIM_HANDOFF_SOURCE_PINNED && dr)
        return handoff_violation(c, where, q, "decode", "a decode request exists before the route");
    if (st > KVSIM_HANDOFF_SOURCE_PINNED && st < KVSIM_HANDOFF_ABORTED && !dr)
        return handoff_violation(c, where, q, "decode", "routed, yet it has no decode request");
    if (st == KVSIM_HANDOFF_DECODE_ROUTED && (dr->status != SCHED_WAITING || dr->kv.num_blocks))
        return handoff_violation(c, where, q, "booking",
                                 "a routed decode is a booking, not a reservation: it is %s "
                                 "and holds %" PRIu32 " blocks",
                                 sched_status_name(dr->status), dr->kv.num_blocks);
    if (st == KVSIM_HANDOFF_DESTINATION_RESERVED || st == KVSIM_HANDOFF_TRANSFERRING) {
        /* (a reserved transfer's start is the link's: check_link) */
        if (!q->on_link)
            return handoff_violation(c, where, q, "link",
                                     "its transfer is not on the prefill engine's link");
        if (st == KVSIM_HANDOFF_TRANSFERRING && q->xfer_end <= c->now_ns)
            return handoff_violation(c, where, q, "overdue",
                                     "its transfer ended at %" PRId64 " ns (now %" PRId64 ")",
                                     q->xfer_end, c->now_ns);
        bool parked = dr->status == SCHED_WAITING_FOR_REMOTE_KVS;
        if (parked ? dr->recv_finished || dr->loading_tokens != h->transfer_tokens
                   : h->transfer_tokens != 0)
            return handoff_violation(c, where, q, "destination",
                                     "transferring %" PRIu64 " tokens into a decode request that "
                                     "is %s%s loading %" PRIu64,
                                     h->transfer_tokens, sched_status_name(dr->status),
                                     dr->recv_finished ? " (load finished)" : "",
                                     dr->loading_tokens);
    }
    if (dr && dr->status == SCHED_WAITING_FOR_REMOTE_KVS && !dr->recv_finished) {
        /* No false overlap: a reserved destination is not in the decode pool's prefix cache
         * before its activation (vLLM's delay_cache_blocks). */
        struct kvpool *dp = sched_pool(c->eng[CONFORM_DECODE].s);
        uint32_t bs = sched_get_config(c->eng[CONFORM_DECODE].s)->block_size;
        uint64_t hit_blocks = (dr->num_computed_tokens - dr->loading_tokens) / bs;
        for (uint32_t b = (uint32_t)hit_blocks; b < dr->kv.num_blocks; b++) {
            kvpool_hash hash;
            if (kvpool_block_hash(dp, dr->kv.blocks[b], &hash))
                return handoff_violation(c, where, q, "visible",
                                         "destination block %" PRId32
                                         " is in the decode pool's prefix cache before its "
                                         "activation",
                                         (int32_t)dr->kv.blocks[b]);
        }
    }
    if (final && dr && !sched_status_is_finished(dr->status) && st == KVSIM_HANDOFF_ABORTED &&
        dr->status != SCHED_RUNNING)
        return handoff_violation(c, where, q, "cancel", "its decode request is still %s",
                                 sched_status_name(dr->status));
    if (final && dr && sched_status_is_finished(dr->status) &&
        (dr->kv.num_blocks || dr->free_delayed))
        return handoff_violation(c, where, q, "leak",
                                 "its finished decode request still holds %" PRIu32 " blocks%s",
                                 dr->kv.num_blocks, dr->free_delayed ? " (free delayed)" : "");
    if (st == KVSIM_HANDOFF_COMPLETED && dr->status == SCHED_WAITING_FOR_REMOTE_KVS &&
        !dr->recv_finished)
        return handoff_violation(c, where, q, "activation",
                                 "completed, yet its destination was not activated");
    return 0;
}

/*
 * The prefill engine's link (conform_ops.c): one FIFO of the transfers reserved and not ended,
 * in reservation order. Only its head may have started, and after every op it has: a transfer
 * waits only behind one that runs. The head started exactly at max(its reservation, the end of
 * the transfer that ran before it) and holds the link until its end, later than now (cut by an
 * abort or not); the others wait in DESTINATION_RESERVED with no start recorded. An aborted
 * transfer that had not started left the FIFO (it took no link time).
 */
static int check_link(struct kvsim_conform_runner *c, const char *where)
{
    size_t n = c->transfers.tail - c->transfers.head;
    int64_t prev_reserved = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        const struct creq *q = &c->reqs[c->transfers.v[(c->transfers.head + i) % c->transfers.cap]];
        const struct kvsim_handoff *h = &q->h;
        if (!q->on_link || h->reserved_ns == KVSIM_HANDOFF_TIME_NONE ||
            h->reserved_ns < prev_reserved || h->reserved_ns > c->now_ns)
            return handoff_violation(c, where, q, "link",
                                     "reserved at %" PRId64 " ns, at place %zu of the link after "
                                     "a reservation at %" PRId64
                                     " ns (the link is one FIFO in reservation order)",
                                     h->reserved_ns, i, prev_reserved);
        prev_reserved = h->reserved_ns;
        if (i > 0 && (q->xfer_started || h->state != KVSIM_HANDOFF_DESTINATION_RESERVED ||
                      h->transfer_start_ns != KVSIM_HANDOFF_TIME_NONE))
            return handoff_violation(c, where, q, "link",
                                     "%s at place %zu of the link, behind a transfer that holds "
                                     "it (only the head may have started)",
                                     q->xfer_started ? "started" : "recorded a start", i);
        if (i > 0)
            continue;
        int64_t due = h->reserved_ns > q->link_before ? h->reserved_ns : q->link_before;
        if (!q->xfer_started)
            return handoff_violation(c, where, q, "overdue",
                                     "its transfer waits at the head of an idle link (free since "
                                     "%" PRId64 " ns, reserved at %" PRId64 " ns, now %" PRId64 ")",
                                     c->link_free, h->reserved_ns, c->now_ns);
        bool cut = h->state == KVSIM_HANDOFF_ABORTED;
        if ((!cut && h->state != KVSIM_HANDOFF_TRANSFERRING) || q->xfer_start != due ||
            q->xfer_end <= q->xfer_start || q->xfer_end <= c->now_ns ||
            c->link_free != q->xfer_end || q->link_before > q->xfer_start ||
            h->transfer_start_ns != q->xfer_start || h->transfer_end_ns != q->xfer_end)
            return handoff_violation(c, where, q, "link",
                                     "transfer [%" PRId64 ", %" PRId64 ")%s reserved at %" PRId64
                                     " ns after a transfer ending at %" PRId64
                                     " ns (a transfer starts at max(its reservation, the end of "
                                     "the last one that ran) and holds the link until its end, "
                                     "here until %" PRId64 " ns; now %" PRId64 ")",
                                     q->xfer_start, q->xfer_end, cut ? " (cut)" : "",
                                     h->reserved_ns, q->link_before, c->link_free, c->now_ns);
    }
    if (n == 0 && c->link_free > c->now_ns)
        return handoff_violation(c, where, NULL, "link",
                                 "the idle link is booked until %" PRId64 " ns (now %" PRId64 ")",
                                 c->link_free, c->now_ns);
    /* On the link: exactly the transfers reserved and not ended, and the cut ones until their
     * end. An aborted handoff whose transfer never started records no start. */
    for (size_t i = 0; i < c->nreqs; i++) {
        const struct creq *q = &c->reqs[i];
        if (!q->disagg)
            continue;
        bool aborted = q->h.state == KVSIM_HANDOFF_ABORTED;
        bool pending = q->h.state == KVSIM_HANDOFF_DESTINATION_RESERVED ||
                       q->h.state == KVSIM_HANDOFF_TRANSFERRING;
        bool cut = aborted && q->xfer_started && q->xfer_end > c->now_ns;
        if (q->on_link != (pending || cut))
            return handoff_violation(c, where, q, "link", "%s the link (its transfer %s)",
                                     q->on_link ? "on" : "not on",
                                     q->xfer_started ? "started" : "has not started");
        if (aborted && !q->xfer_started && q->h.transfer_start_ns != KVSIM_HANDOFF_TIME_NONE)
            return handoff_violation(c, where, q, "link",
                                     "its transfer never started, yet it records a start at "
                                     "%" PRId64 " ns",
                                     q->h.transfer_start_ns);
    }
    return 0;
}

/* Every handoff, the pins' count on both engines and the prefill engine's link (FIFO). */
static int check_handoffs(struct kvsim_conform_runner *c, const char *where)
{
    uint32_t held = 0;
    for (size_t i = 0; i < c->nreqs; i++) {
        const struct creq *q = &c->reqs[i];
        if (!q->disagg) {
            if (q->pin)
                return handoff_violation(c, where, q, "source", "a plain request holds a pin");
            continue;
        }
        held += q->pin != NULL;
        if (check_handoff(c, q, where))
            return conform__failed(c);
    }
    struct sched *ps = c->eng[CONFORM_PREFILL].s, *ds = c->eng[CONFORM_DECODE].s;
    if (sched_num_pins(ps) != held)
        return handoff_violation(c, where, NULL, "pins",
                                 "the prefill engine holds %" PRIu32 " pins for %" PRIu32
                                 " handoffs holding a source",
                                 sched_num_pins(ps), held);
    if (sched_num_pins(ds) || kvpool_num_pinned_only_blocks(sched_pool(ds)))
        return handoff_violation(c, where, NULL, "pins", "the decode engine holds %" PRIu32 " pins",
                                 sched_num_pins(ds));
    return check_link(c, where);
}

/* Every scheduler's invariants, then the tiers', then the handoffs'. */
static int check_all(struct kvsim_conform_runner *c, const char *where, int only)
{
    for (int e = 0; e < c->neng; e++) {
        struct sched_violation v;
        if ((only < 0 || only == e) && sched_check(c->eng[e].s, &v) != 0)
            return conform__violation_fail(c, e, where, &v);
    }
    if (check_tiers(c, where))
        return conform__failed(c);
    return c->disagg ? check_handoffs(c, where) : 0;
}

/* The rules that apply after an op that ran (invariants, then progress, then liveness). */
static int check_rules(struct kvsim_conform_runner *c, const char *op, const char *where)
{
    if (c->check_invariants && check_all(c, where, -1))
        return conform__failed(c);
    bool is_sched = !strcmp(op, "schedule");
    if (is_sched && check_futile(c, where))
        return conform__failed(c);
    if (is_sched && c->check_liveness && check_liveness(c, where))
        return conform__failed(c);
    return 0;
}

/* The offload part of the run's statistics (totals so far, and the peak of held blocks). */
static void offload_stats_refresh(struct kvsim_conform_runner *c, bool advanced)
{
    struct kvsim_conform_stats *k = &c->stats;
    struct sched_offload_counters oc;
    struct kvsim_tiers_stats ts;
    struct sched *s = c->eng[0].s;
    sched_offload_counters(s, &oc);
    kvsim_tiers_stats(c->tiers, &ts);
    k->offload_runs = 1;
    k->advances += advanced;
    k->virtual_ns = (uint64_t)c->now_ns;
    k->blocked_on_offload = oc.blocked;
    k->retry_now = oc.retry_now;
    k->loads = ts.loads;
    k->failed_loads = ts.failed_loads;
    k->written_g2 = ts.written_g2;
    k->failed_blocks = ts.failed_blocks;
    uint32_t held = kvpool_num_held_only_blocks(sched_pool(s));
    if (held > k->max_held_blocks)
        k->max_held_blocks = held;
}

/* The two-engine form's: advances, virtual time, the most blocks pinned after an op. */
static void disagg_stats_refresh(struct kvsim_conform_runner *c, bool advanced)
{
    struct kvsim_conform_stats *k = &c->stats;
    k->disagg_runs = 1;
    k->advances += advanced;
    k->virtual_ns = (uint64_t)c->now_ns;
    uint32_t pinned = sched_num_pinned_blocks(c->eng[CONFORM_PREFILL].s);
    if (pinned > k->max_pinned_blocks)
        k->max_pinned_blocks = pinned;
}

/* KV events (two-engine form): counted per pool as they happen. */
static void count_event(void *ctx, const struct kvpool_event *ev)
{
    struct ceng *g = ctx;
    if (ev->type == KVPOOL_EVENT_STORED)
        g->stored_blocks += ev->num_hashes;
    else if (ev->type == KVPOOL_EVENT_REMOVED)
        g->removed_blocks += ev->num_hashes;
    else
        g->cleared++;
}

/* Resets the previous op's observations. */
static void reset_observations(struct kvsim_conform_runner *c)
{
    c->step = NULL;
    for (int e = 0; e < CONFORM_ENGINES; e++) {
        json_decref(c->eng[e].finished);
        c->eng[e].finished = NULL;
    }
    json_decref(c->lookup);
    json_decref(c->alloc);
    json_decref(c->ignored);
    json_decref(c->rejected);
    c->lookup = c->alloc = c->ignored = c->rejected = NULL;
    c->futile_now = 0;
}

/* Runs one validated step. Returns 0, OP_SKIPPED (lenient: nothing ran) or -1. */
static int run_step(struct kvsim_conform_runner *c, json_t *st, size_t k)
{
    const char *op = json_string_value(json_object_get(st, "op"));
    char where[64];
    snprintf(where, sizeof where, "step %zu (%s)", k, op);
    reset_observations(c);
    c->cur = 0;
    if (c->disagg) {
        const char *e = json_string_value(json_object_get(st, "engine"));
        c->cur = !e ? CONFORM_NO_ENGINE : !strcmp(e, "decode") ? CONFORM_DECODE : CONFORM_PREFILL;
    }
    struct sched *s = c->eng[conform__cur(c)].s;
    json_t *eff = c->lenient ? json_deep_copy(st) : NULL;
    int rc = 0;
    if (!strcmp(op, "add")) {
        rc = conform__op_add(c, st, where);
    } else if (!strcmp(op, "schedule")) {
        rc = conform__op_schedule(c, where);
    } else if (!strcmp(op, "output")) {
        rc = conform__op_output(c, st, eff, where);
    } else if (!strcmp(op, "abort")) {
        rc = conform__op_abort(c, st, eff, where);
    } else if (!strcmp(op, "reset_prefix_cache")) {
        c->op_result = sched_reset_prefix_cache(
            s, json_is_true(json_object_get(st, "reset_running_requests")));
        if (c->op_result && c->op_result != -EBUSY)
            rc = conform__sched_error(c, conform__cur(c), where, c->op_result);
    } else if (!strcmp(op, "check")) {
        rc = check_all(c, where, c->cur);
    } else if (!strcmp(op, "advance")) {
        rc = conform__op_advance(c, st, where);
    } else if (!strcmp(op, "route")) {
        rc = conform__op_route(c, st, where);
    } else if (!strcmp(op, "kv_lookup")) {
        rc = conform__op_kv_lookup(c, st, where);
    } else if (!strcmp(op, "kv_allocate")) {
        rc = conform__op_kv_allocate(c, st, where);
    } else if (!strcmp(op, "kv_free")) {
        rc = conform__op_kv_free(c, st, where);
    }
    if (rc == OP_SKIPPED) {
        json_decref(eff);
        return rc;
    }
    /* The write-through of what the op cached (schedule and output cache blocks; after the
     * others there is nothing to write and this enqueues nothing). */
    if (rc == 0 && c->tiers) {
        int frc = kvsim_tiers_flush(c->tiers);
        if (frc)
            rc = conform__fail_kind(c, "offload_error", "%s: offload: flush: %s", where,
                                    kvsim_strerror(frc));
    }
    if (c->disagg)
        for (int e = 0; e < c->neng; e++)
            kvpool_events_drain(sched_pool(c->eng[e].s), count_event, &c->eng[e]);
    if (c->effective)
        json_array_append_new(c->effective, eff ? eff : json_incref(st));
    else
        json_decref(eff);
    c->stats.ops++;
    count_transitions(c);
    if (c->tiers)
        offload_stats_refresh(c, !strcmp(op, "advance"));
    if (c->disagg)
        disagg_stats_refresh(c, !strcmp(op, "advance"));
    if (c->trace)
        conform__trace_step(c, k, op);
    if (rc == 0)
        rc = check_rules(c, op, where);
    json_t *ex = json_object_get(st, "expect");
    if (rc == 0 && ex)
        rc = conform__check_expect(c, ex, op, k);
    return rc;
}

/* ---- the runner ---------------------------------------------------------------------------- */

static void fill_result(struct kvsim_conform_runner *c, struct kvsim_conform_result *res)
{
    if (!res)
        return;
    if (!c->failed) { /* the soak asks after every op: keep a pass cheap */
        res->verdict = KVSIM_CONFORM_PASS;
        res->step = -1;
        res->op[0] = res->kind[0] = res->message[0] = res->shape[0] = 0;
        res->dead_end.found = false;
        return;
    }
    res->verdict = c->running ? KVSIM_CONFORM_FAIL : KVSIM_CONFORM_INVALID;
    res->step = c->fail_step;
    snprintf(res->op, sizeof res->op, "%s", c->fail_op);
    snprintf(res->kind, sizeof res->kind, "%s", c->kind);
    snprintf(res->message, sizeof res->message, "%s", c->err);
    snprintf(res->shape, sizeof res->shape, "%s", c->shape);
    res->dead_end = c->dead_end;
}

static void mark_failed(struct kvsim_conform_runner *c, long k, json_t *st)
{
    c->failed = true;
    c->fail_step = k;
    const char *op = json_string_value(json_object_get(st, "op"));
    snprintf(c->fail_op, sizeof c->fail_op, "%s", op ? op : "");
}

static void runner_fini(struct kvsim_conform_runner *c)
{
    reset_observations(c);
    kvsim_tiers_destroy(c->tiers); /* first: undrained transfers give back holds and loads */
    for (int e = 0; e < CONFORM_ENGINES; e++)
        sched_destroy(c->eng[e].s); /* frees every pin and request */
    for (size_t i = 0; i < c->nreqs; i++) {
        free(c->reqs[i].name);
        json_decref(c->reqs[i].add);
    }
    free(c->reqs);
    conform__fifo_free(&c->deadlines);
    conform__fifo_free(&c->transfers);
}

static void runner_init(struct kvsim_conform_runner *c, const char *name,
                        const struct kvsim_conform_options *opt)
{
    memset(c, 0, sizeof *c);
    c->name = name;
    c->fail_step = -1;
    c->neng = 1;
    if (opt) {
        c->trace = opt->trace;
        c->lenient = opt->lenient;
        c->effective = opt->effective;
    }
}

static int runner_start(struct kvsim_conform_runner *c, json_t *config)
{
    struct conform_config cc;
    if (conform__parse_config(c, config, &cc))
        return conform__failed(c);
    int rc;
    for (int e = 0; e < c->neng; e++) {
        struct sched_config *sc = &cc.sc[e];
        /* With the check after every op, the scheduler's own boundary checks would only repeat
         * it on the same state (and report the same violation at the same step). */
        sc->check_invariants = !c->check_invariants && c->scheduler_checks;
        char where[32];
        snprintf(where, sizeof where, "config%s%s", c->disagg ? ": " : "",
                 c->disagg ? conform__engine_name(e) : "");
        if (conform__engine_config_check(c, sc, where))
            return conform__failed(c);
        if (cc.offload) { /* the tiers first: the scheduler calls into them from its first
                           * schedule */
            if ((rc = kvsim_tiers_create(&cc.tc, &c->tiers)) != 0)
                return conform__fail(c, "config: offload: impossible configuration: %s",
                                     kvsim_strerror(rc));
            sc->offload = &kvsim_tiers_sched_ops;
            sc->offload_ctx = c->tiers;
        }
        rc = sched_create(sc, &c->eng[e].s);
        if (rc) {
            if (c->disagg)
                return conform__fail(c, "config: %s: impossible configuration: %s",
                                     conform__engine_name(e), kvsim_strerror(rc));
            return conform__fail(c, "config: impossible configuration: %s", kvsim_strerror(rc));
        }
        if (c->tiers)
            kvsim_tiers_bind(c->tiers, c->eng[e].s);
    }
    c->running = true;
    return 0;
}

int kvsim_conform_runner_create(json_t *config, const char *name,
                                const struct kvsim_conform_options *opt,
                                struct kvsim_conform_runner **out, struct kvsim_conform_result *res)
{
    *out = NULL;
    struct kvsim_conform_runner *c = malloc(sizeof *c);
    if (!c)
        return -ENOMEM;
    runner_init(c, name, opt);
    if (runner_start(c, config)) {
        int rc = conform__failed(c);
        c->failed = true;
        fill_result(c, res);
        runner_fini(c);
        free(c);
        return rc;
    }
    fill_result(c, res);
    *out = c;
    return 0;
}

int kvsim_conform_runner_step(struct kvsim_conform_runner *c, json_t *step,
                              struct kvsim_conform_result *res)
{
    size_t k = c->nsteps;
    int rc = KVSIM_ESCENARIO; /* a failed runner runs nothing more */
    if (!c->failed) {
        /* Validation failures count as "invalid" even mid-run: the op itself is malformed. */
        c->running = false;
        rc = conform__validate_step(c, step, k);
        c->running = true;
        if (rc == 0) {
            rc = run_step(c, step, k);
            if (rc == OP_SKIPPED)
                rc = 0;
        } else {
            c->running = false;
        }
        if (rc)
            mark_failed(c, (long)k, step);
        c->nsteps++;
    }
    fill_result(c, res);
    return rc;
}

void kvsim_conform_runner_destroy(struct kvsim_conform_runner *c)
{
    if (!c)
        return;
    runner_fini(c);
    free(c);
}

struct sched *kvsim_conform_runner_sched(struct kvsim_conform_runner *c) { return c->eng[0].s; }

struct sched *kvsim_conform_runner_engine_sched(struct kvsim_conform_runner *c, int engine)
{
    return engine >= 0 && engine < c->neng ? c->eng[engine].s : NULL;
}

struct sched_request *kvsim_conform_runner_request(const struct kvsim_conform_runner *c,
                                                   const char *id)
{
    for (size_t i = 0; i < c->nreqs; i++)
        if (strcmp(c->reqs[i].name, id) == 0)
            return c->reqs[i].r[c->reqs[i].eng];
    return NULL;
}

struct sched_request *kvsim_conform_runner_request_on(const struct kvsim_conform_runner *c,
                                                      int engine, const char *id)
{
    if (engine < 0 || engine >= CONFORM_ENGINES)
        return NULL;
    for (size_t i = 0; i < c->nreqs; i++)
        if (strcmp(c->reqs[i].name, id) == 0)
            return c->reqs[i].r[engine];
    return NULL;
}

const struct kvsim_handoff *kvsim_conform_runner_handoff(const struct kvsim_conform_runner *c,
                                                         const char *id)
{
    for (size_t i = 0; i < c->nreqs; i++)
        if (strcmp(c->reqs[i].name, id) == 0)
            return c->reqs[i].disagg ? &c->reqs[i].h : NULL;
    return NULL;
}

const char *kvsim_conform_runner_request_name(const struct kvsim_conform_runner *c,
                                              const struct sched_request *req)
{
    return req->id >= 1 && req->id <= c->nreqs ? c->reqs[req->id - 1].name : NULL;
}

size_t kvsim_conform_runner_outstanding(const struct kvsim_conform_runner *c,
                                        struct sched_step *const **steps)
{
    *steps = c->eng[0].outstanding;
    return c->eng[0].nout;
}

size_t kvsim_conform_runner_outstanding_on(const struct kvsim_conform_runner *c, int engine,
                                           struct sched_step *const **steps)
{
    if (engine < 0 || engine >= c->neng) {
        *steps = NULL;
        return 0;
    }
    *steps = c->eng[engine].outstanding;
    return c->eng[engine].nout;
}

const struct kvsim_conform_stats *kvsim_conform_runner_stats(const struct kvsim_conform_runner *c)
{
    return &c->stats;
}

int64_t kvsim_conform_runner_now(const struct kvsim_conform_runner *c) { return c->now_ns; }

int64_t kvsim_conform_runner_next_deadline(const struct kvsim_conform_runner *c)
{
    if (c->disagg)
        return conform__next_handoff_event(c);
    return c->tiers ? kvsim_tiers_next_deadline(c->tiers) : OFFLOAD_NEVER;
}

void kvsim_conform_stats_add(struct kvsim_conform_stats *a, const struct kvsim_conform_stats *b)
{
    a->ops += b->ops;
    a->transitions += b->transitions;
    a->schedules += b->schedules;
    a->scheduled_tokens += b->scheduled_tokens;
    a->preemptions += b->preemptions;
    a->futile_preemptions += b->futile_preemptions;
    a->zero_progress_schedules += b->zero_progress_schedules;
    if (b->max_futile_in_one_schedule > a->max_futile_in_one_schedule)
        a->max_futile_in_one_schedule = b->max_futile_in_one_schedule;
    a->offload_runs += b->offload_runs;
    a->advances += b->advances;
    a->virtual_ns += b->virtual_ns;
    a->blocked_on_offload += b->blocked_on_offload;
    a->retry_now += b->retry_now;
    a->loads += b->loads;
    a->failed_loads += b->failed_loads;
    a->written_g2 += b->written_g2;
    a->failed_blocks += b->failed_blocks;
    if (b->max_held_blocks > a->max_held_blocks)
        a->max_held_blocks = b->max_held_blocks;
    a->disagg_runs += b->disagg_runs;
    a->handoffs += b->handoffs;
    a->pins += b->pins;
    a->routes += b->routes;
    a->late_routes += b->late_routes;
    a->reservations += b->reservations;
    a->completed_handoffs += b->completed_handoffs;
    a->aborted_handoffs += b->aborted_handoffs;
    a->expired_pins += b->expired_pins;
    a->unpinned_prefills += b->unpinned_prefills;
    a->transferred_tokens += b->transferred_tokens;
    if (b->max_pinned_blocks > a->max_pinned_blocks)
        a->max_pinned_blocks = b->max_pinned_blocks;
}

/* Top level and config of a whole document, then every step, before anything runs. */
static int validate_doc(struct kvsim_conform_runner *c, json_t *root, json_t **steps)
{
    static const char *const top_keys[] = {"name", "source", "config", "steps", NULL};
    if (!json_is_object(root))
        return conform__fail(c, "the document must be an object");
    json_t *name = json_object_get(root, "name");
    json_t *src = json_object_get(root, "source");
    *steps = json_object_get(root, "steps");
    if (conform__check_keys(c, root, top_keys, "top level"))
        return conform__failed(c);
    if (!json_is_string(name))
        return conform__fail(c, "top level: key 'name' must be a string");
    if (src && !json_is_string(src))
        return conform__fail(c, "top level: key 'source' must be a string");
    if (!json_is_array(*steps))
        return conform__fail(c, "top level: missing key 'steps' (an array)");
    struct conform_config cc; /* the config's errors come before the steps' */
    if (conform__parse_config(c, json_object_get(root, "config"), &cc))
        return conform__failed(c);
    size_t k;
    json_t *st;
    json_array_foreach(*steps, k, st)
    {
        if (conform__validate_step(c, st, k)) {
            mark_failed(c, (long)k, st);
            return conform__failed(c);
        }
    }
    return 0;
}

int kvsim_conform_run_json(json_t *doc, const struct kvsim_conform_options *opt,
                           struct kvsim_conform_result *res, struct kvsim_conform_stats *stats)
{
    struct kvsim_conform_runner c;
    json_t *name = json_object_get(doc, "name");
    runner_init(&c, json_is_string(name) ? json_string_value(name) : "", opt);
    json_t *steps = NULL;
    int rc = validate_doc(&c, doc, &steps);
    if (rc == 0)
        rc = runner_start(&c, json_object_get(doc, "config"));
    if (rc == 0) {
        size_t k;
        json_t *st;
        json_array_foreach(steps, k, st)
        {
            int r = run_step(&c, st, k);
            if (r != 0 && r != OP_SKIPPED) {
                mark_failed(&c, (long)k, st);
                rc = r;
                break;
            }
        }
    }
    c.failed = rc != 0;
    fill_result(&c, res);
    if (stats)
        *stats = c.stats;
    runner_fini(&c);
    return rc;
}
