/*
 * epochs.c - the replay in virtual time: conservative synchronisation in epochs, the boundaries
 * and how far each epoch may go, the aggregated and disaggregated epoch loops, the early end
 * (--max-sim-time-s, a stop flag) and the progress line.
 *
 * At a boundary B the coordinator (thread 0) turns finished session turns into follow-up
 * arrivals, feeds the engines' KV events to the router in engine-id order, routes every arrival
 * due at B, and picks the next boundary B' (the next arrival, or earlier when a running session
 * turn could complete and release its follow-up before it). Then every worker admits its
 * engines' new arrivals at B and advances them to B' in parallel (threads.c). Each engine's
 * evolution depends only on what it was given, and the router only on what engines published at
 * boundaries, so results are identical for any thread count.
 *
 * A shared G3 (--g3-shared) lives in the block registry: at each boundary the coordinator merges
 * the engines' G3 logs into the shared LRU (kvsim_g3_shared_boundary) before routing.
 *
 * Threads: the coordinator; the phases it runs take the workers (replay__run_work).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "runtime/replay/replay_internal.h"

#include "kvpool/base.h"
#include "runtime/engine/engine.h"
#include "runtime/kvsim.h" /* the error codes (KVSIM_E*, kvsim_strerror) */
#include "runtime/report/report.h"

/* Boundary work at rp->ep.b_cur (coordinator, all workers parked). Returns 0, -ENOMEM, or
 * KVSIM_EINVARIANT (err says why) for a follow-up due before b_cur: the lookahead missed it. */
static int boundary(struct replay *rp, char *err, size_t errlen)
{
    /* 0. The shared G3 as of b_cur: the engines' writes and hits of the epoch, merged. */
    int rc0 = kvsim_tier_topology_boundary(rp->tiers, rp->ep.b_cur);
    if (rc0)
        return rc0;
    /* 1. Finished turns release their follow-ups, in engine order; last turns their session
     * slots (closed loop), given out in (time, request) order. */
    int rc = replay__release_finished(rp, err, errlen);
    /* 2. Route every arrival due now, in (time, request) order. */
    return rc ? rc : replay__route_due(rp);
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
    if (rp->dp <= 1 && kvsim_router_policy(rp->rt.router) != KVSIM_ROUTER_DP_LB)
        return INT64_MAX;
    bool work = rp->rt.num_arrived > 0;
    for (uint32_t e = 0; e < rp->num_engines && !work; e++)
        work = rp->pubs[e]->num_unfinished > 0;
    return work ? kvsim_router_next_tick(rp->dp > 1 ? rp->rt.lb[0] : rp->rt.router, rp->ep.b_cur)
                : INT64_MAX;
}

/*
 * The earliest instant a session's follow-up could be due, for a phase that admits the arrivals
 * routed at this boundary (each at its instant: b_cur, or later in a window) and advances the
 * engines in one go (aggregated, session turns in flight, no closed loop): next_boundary's bound
 * with what the admissions could change accounted for without running them. An engine given an
 * arrival at t may start a step at t (its first step then ends no later than t plus the shortest
 * step), an arriving turn with a follow-up is a parent with all its tokens left, and one rejected
 * at admission finishes at t (its follow-up comes at t plus that follow-up's own delay). Never
 * later than next_boundary after the admissions (a lower bound of the same finishes); it may be
 * earlier, and is b_cur or earlier when a follow-up could be due at once: the caller then admits
 * first (two phases). INT64_MAX without turns in flight. Coordinator, workers parked.
 */
static int64_t followup_bound(struct replay *rp)
{
    int64_t nb = INT64_MAX;
    if (!rp->arr.parents_in_flight)
        return nb;
    int64_t d = kvsim_step_model_min_duration_ns(&rp->cfg->model);
    uint32_t *left =
        rp->rt.arrived_left; /* [engines]: fewest tokens left of its arriving parents */
    int64_t *first = rp->rt.arrived_first; /* [engines]: its first arrival's instant */
    for (uint32_t e = 0; e < rp->num_engines; e++)
        left[e] = UINT32_MAX - 1; /* below UINT32_MAX: the engine got an arrival (set below) */
    for (uint32_t i = 0; i < rp->rt.num_arrived; i++) {
        uint32_t req = rp->rt.arrived[i].req, e = rp->rt.arrived[i].engine;
        int64_t t = rp->rt.arrived[i].t;
        if (left[e] == UINT32_MAX - 1) {
            left[e] = UINT32_MAX; /* an arrival, no parent among them yet */
            first[e] = t;         /* routed in time order */
        }
        int32_t nx = rp->arr.next_turn[req];
        if (nx < 0)
            continue;
        int64_t due; /* rejected at admission */
        if (!kvsim_clock_add(t, rp->trace.reqs[nx].delay_ns, &due))
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
        if (left[e] != UINT32_MAX - 1) { /* it got arrivals: a step may start at the first */
            int64_t fe = pub->first_step_end;
            if (first[e] <= INT64_MAX - d && first[e] + d < fe)
                fe = first[e] + d;
            uint32_t best = pub->parent_min_left < left[e] ? pub->parent_min_left : left[e];
            f = INT64_MAX;
            if (best != UINT32_MAX) {
                int64_t more = (int64_t)(best - 1);
                f = more > (INT64_MAX - fe) / d ? INT64_MAX : fe + more * d;
            }
        }
        if (f != INT64_MAX && f < nb - rp->arr.min_delay) /* nb >= 0, min_delay >= 0 */
            nb = f + rp->arr.min_delay;
    }
    return nb;
}

/* next_boundary's bound for a phase that admits this boundary's arrivals (followup_bound), the
 * next arrival and the DP coordinator's tick too. */
static int64_t next_boundary_admitting(struct replay *rp)
{
    int64_t nb = replay__next_arrival(rp), tick = dp_next_tick(rp);
    if (tick < nb)
        nb = tick;
    int64_t f = followup_bound(rp);
    return f < nb ? f : nb;
}

/*
 * Windows: with a lookahead L (rp->ep.lookahead_ns: the router hears of what engines do only
 * L after it, or reads no engine), an arrival at t in (b_cur, b_cur + L] depends on nothing the
 * engines do after b_cur, so it is routed at b_cur, exactly as at a boundary of its own at t
 * (replay__route_at: the routers see the engines as of t), and its engine admits it at t. The
 * window stops before the first instant that is past b_cur + L or the time bound, or that a
 * session's follow-up could reach (followup_bound: the window's own arrivals lower it, each
 * to past its own instant: a parent finishes at least a step after it arrives), or whose
 * arrivals include a turn whose follow-up would be due at once if rejected (delay 0: it would
 * come between two arrivals of one instant). Arrivals of one instant go together. Returns 0 or
 * a negative errno; *bound is followup_bound after the window's arrivals (its arrivals'
 * contributions taken in as they come: a lower bound, so never past what it should be).
 * Coordinator, workers parked, after the boundary's own routing.
 */
static int zero_delay_turn(struct replay *rp, void *ctx, uint32_t req)
{
    int32_t nx = rp->arr.next_turn[req];
    (void)ctx;
    return nx >= 0 && rp->trace.reqs[nx].delay_ns == 0;
}

static int route_window(struct replay *rp, int64_t *bound)
{
    int64_t limit = rp->ep.b_cur > INT64_MAX - rp->ep.lookahead_ns
                        ? INT64_MAX - 1
                        : rp->ep.b_cur + rp->ep.lookahead_ns;
    int64_t d = kvsim_step_model_min_duration_ns(&rp->cfg->model);
    for (;;) {
        int64_t t = replay__next_arrival(rp);
        if (t > limit || t >= rp->ep.stop_ns || t >= *bound)
            return 0;
        if (rp->arr.min_delay == 0 && replay__arrivals_known_by(rp, t, zero_delay_turn, NULL))
            return 0;
        for (int64_t req; (req = replay__take_arrival(rp, t)) >= 0;) {
            int64_t e = replay__route_at(rp, (uint32_t)req, t);
            if (e < 0)
                return (int)e;
            rp->ep.window_arrivals++;
            const struct kvsim_engine_pub *pub = rp->pubs[e];
            /* its engine's parents may now run from a step starting at t; req itself, when it
             * is a turn, finishes no earlier than its tokens' steps after t, or is rejected at t */
            int64_t start = t > INT64_MAX - d ? INT64_MAX : t + d, f = INT64_MAX;
            if (pub->parent_min_left != UINT32_MAX) {
                int64_t more = (int64_t)(pub->parent_min_left - 1);
                f = more > (INT64_MAX - start) / d ? INT64_MAX : start + more * d;
            }
            int32_t nx = rp->arr.next_turn[req];
            if (nx >= 0) {
                int64_t more = (int64_t)tokens_left_new(rp, (uint32_t)req) - 1, own, due;
                own = more > (INT64_MAX - start) / d ? INT64_MAX : start + more * d;
                if (own < f)
                    f = own;
                if (kvsim_clock_add(t, rp->trace.reqs[nx].delay_ns, &due) && due < *bound)
                    *bound = due;
            }
            if (f != INT64_MAX && f < *bound - rp->arr.min_delay)
                *bound = f + rp->arr.min_delay;
        }
    }
}

/*
 * The next boundary after rp->ep.b_cur: the next arrival, or, while a session turn is in flight,
 * the earliest instant its follow-up could arrive (the earliest step completion of any engine
 * plus the smallest think time). Exact only once the engines have started their steps at b_cur.
 */
static int64_t next_boundary(struct replay *rp)
{
    int64_t nb = replay__next_arrival(rp), tick = dp_next_tick(rp);
    if (tick < nb)
        nb = tick;
    if (!rp->arr.parents_in_flight)
        return nb;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        /* Turns rejected at admission finished at b_cur; their follow-ups are due soon. */
        uint32_t n;
        const struct kvsim_engine_done *d = kvsim_engine_peek_done(rp->engines[e], &n);
        for (uint32_t i = 0; i < n; i++) {
            int32_t nx = rp->arr.next_turn[d[i].req];
            int64_t due; /* one that passes the clock's end is an error when it is collected */
            if (nx >= 0 && kvsim_clock_add(d[i].finish_ns, rp->trace.reqs[nx].delay_ns, &due) &&
                due < nb)
                nb = due;
            if (nx < 0 && replay__releases_slot(rp, d[i].req) && d[i].finish_ns < nb)
                nb = d[i].finish_ns;
        }
        int64_t f = rp->pubs[e]->earliest_parent_finish;
        if (f != INT64_MAX && f < nb - rp->arr.min_delay) /* nb >= 0, min_delay >= 0: no overflow */
            nb = f + rp->arr.min_delay;
    }
    return nb;
}

/* The progress line (stderr, a terminal): requests finished (completed, rejected or aborted,
 * not just routed), simulated time, elapsed wall time and the time left at the rate so far.
 * Context: the coordinator at a boundary (the records are not being written). */
static void show_progress(struct replay *rp, bool final)
{
    if (!rp->ep.progress)
        return;
    int64_t now = base_monotonic_ns();
    if (!final && now - rp->ep.last_progress < 200000000)
        return;
    rp->ep.last_progress = now;
    size_t total = rp->trace.num_reqs;
    uint32_t done = kvsim_metrics_num_final(rp->metrics);
    double frac = total ? (double)done / (double)total : 1;
    int filled = (int)(frac * 30);
    double elapsed = (double)(now - rp->ep.wall_start) / 1e9;
    char el[48], eta[48];
    base_format_wall(el, sizeof el, elapsed);
    if (frac > 0 && !final)
        base_format_wall(eta, sizeof eta, elapsed * (1 - frac) / frac);
    else
        snprintf(eta, sizeof eta, final ? "0s" : "?");
    int64_t t = rp->ep.b_cur == INT64_MAX || rp->ep.b_cur < rp->trace.reqs[0].arrival_ns
                    ? 0
                    : rp->ep.b_cur - rp->trace.reqs[0].arrival_ns;
    bool online = kvsim_tier_topology_coordinator_offline(rp->tiers); /* I/O may block */
    fprintf(stderr,
            "\r[%.*s%.*s] %5.1f%% %" PRIu32 "/%zu finished, sim %.1f s, elapsed %s, eta %s  %s",
            filled, "##############################", 30 - filled, "                              ",
            frac * 100, done, total, (double)t / 1e9, el, eta, final ? "\n" : "");
    if (online)
        kvsim_tier_topology_coordinator_online(rp->tiers);
}

/* Whether the replay ends early before the epoch at b_cur (and why, in rp->ep.end_reason). */
static bool stop_now(struct replay *rp)
{
    if (rp->cfg->stop_flag && *rp->cfg->stop_flag)
        rp->ep.end_reason = "interrupted";
    else if (rp->ep.b_cur >= rp->ep.stop_ns)
        rp->ep.end_reason = "max-sim-time";
    else
        return false;
    return true;
}

/* An epoch never runs past the time bound. */
static void clamp_next(struct replay *rp)
{
    if (rp->ep.b_next > rp->ep.stop_ns)
        rp->ep.b_next = rp->ep.stop_ns;
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

/* One phase of a disaggregated epoch (run_work), then the engines' errors. */
static int run_phase(struct replay *rp, enum phase phase, char *err, size_t errlen)
{
    replay__run_work(rp, phase);
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
    rp->ep.epochs++;
    if (rc == 0)
        rc = run_phase(rp, PHASE_PREFILL_ADMIT, err, errlen);
    if (rc)
        return rc;
    rp->ep.b_next = next_boundary(rp);
    int64_t bound = replay__disagg_bound(rp);
    if (bound < rp->ep.b_next)
        rp->ep.b_next = bound;
    clamp_next(rp);
    if (rp->ep.b_next <=
        rp->ep.b_cur) { /* a lookahead that does not look ahead would loop forever */
        snprintf(err, errlen, "internal error: the epoch at %" PRId64 " ns cannot advance",
                 rp->ep.b_cur);
        return KVSIM_EINVARIANT;
    }
    if ((rc = run_phase(rp, PHASE_PREFILL_ADVANCE, err, errlen)) != 0 ||
        (rc = replay__disagg_after_prefill(rp)) != 0 ||
        (rc = run_phase(rp, PHASE_DECODE_ADVANCE, err, errlen)) != 0 ||
        (rc = replay__disagg_after_decode(rp, err, errlen)) != 0)
        return rc;
    if (rp->ep.b_next == INT64_MAX && replay__disagg_stuck(rp, err, errlen))
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
    rp->ep.epochs++;
    if (rc == 0)
        rc = run_phase(rp, *pending ? PHASE_PREFILL_ADMIT_DECODE_LAST : PHASE_PREFILL_ADMIT, err,
                       errlen);
    if (rc == 0 && *pending) {
        int64_t b_cur = rp->ep.b_cur; /* the last epoch's bounds, for its transfers */
        rp->ep.b_cur = rp->ep.b_prev;
        rp->ep.b_next = b_cur;
        rc = replay__disagg_after_decode(rp, err, errlen);
        rp->ep.b_cur = b_cur;
        *pending = false;
    }
    if (rc)
        return rc;
    rp->ep.b_next = next_boundary(rp);
    int64_t bound = replay__disagg_bound(rp);
    if (bound < rp->ep.b_next)
        rp->ep.b_next = bound;
    clamp_next(rp);
    if (rp->ep.b_next <= rp->ep.b_cur) {
        snprintf(err, errlen, "internal error: the epoch at %" PRId64 " ns cannot advance",
                 rp->ep.b_cur);
        return KVSIM_EINVARIANT;
    }
    if ((rc = run_phase(rp, PHASE_PREFILL_ADVANCE, err, errlen)) != 0 ||
        (rc = replay__disagg_after_prefill(rp)) != 0)
        return rc;
    *pending = true;
    rp->ep.b_prev = rp->ep.b_cur;
    return 0;
}

/* The decode part of the last pipelined epoch (b_cur to b_next), then the dead-end check when
 * nothing is left. */
static int disagg_pipeline_drain(struct replay *rp, char *err, size_t errlen)
{
    int rc = run_phase(rp, PHASE_DECODE_ADVANCE, err, errlen);
    if (rc == 0)
        rc = replay__disagg_after_decode(rp, err, errlen);
    if (rc == 0 && rp->ep.b_next == INT64_MAX && replay__disagg_stuck(rp, err, errlen))
        rc = -EDEADLK;
    return rc;
}

/* The disaggregated epochs, to the end or an early stop. Returns 0 or a negative errno. */
static int run_disagg_epochs(struct replay *rp, char *err, size_t errlen)
{
    int rc = 0;
    bool decode_pending = false; /* pipelined: the last epoch's decode part is still to come */
    while (rc == 0 && !stop_now(rp)) {
        rc = rp->ep.pipelined ? disagg_pipelined(rp, &decode_pending, err, errlen)
                              : disagg_epoch(rp, err, errlen);
        show_progress(rp, false);
        if (rc || rp->ep.b_next == INT64_MAX)
            break;
        rp->ep.b_cur = rp->ep.b_next;
    }
    if (rc == 0 && decode_pending) {     /* the last epoch (b_prev to b_next)'s decode part */
        int64_t moved_on = rp->ep.b_cur; /* stopped early: the loop moved on to b_next */
        rp->ep.b_cur = rp->ep.b_prev;
        rc = disagg_pipeline_drain(rp, err, errlen);
        rp->ep.b_cur = moved_on;
    }
    return rc;
}

/* The aggregated epochs, to the end or an early stop. Returns 0 or a negative errno. */
static int run_epochs(struct replay *rp, char *err, size_t errlen)
{
    int rc = 0;
    while (rc == 0 && !stop_now(rp)) {
        rc = boundary(rp, err, errlen);
        rp->ep.epochs++;
        if (rc)
            break;
        /* With a lookahead, the arrivals of the window too, in one phase to the next arrival
         * or the follow-up bound (route_window). */
        int64_t fb = rp->ep.lookahead_ns ? followup_bound(rp) : INT64_MIN;
        bool windowed = fb > rp->ep.b_cur;
        if (windowed && (rc = route_window(rp, &fb)) != 0)
            break;
        /* Without session turns in flight the next boundary is the next arrival: one parallel
         * phase. With them it depends on the steps the engines start now: one phase to a bound
         * that allows for any step they could start (next_boundary_admitting), or, when that
         * bound does not look ahead (a follow-up could be due at once; a closed loop, where a
         * finish releases a session at that instant), two phases: admit, then advance. */
        bool split = rp->arr.parents_in_flight > 0;
        enum phase phases[2] = {PHASE_ADMIT_AND_ADVANCE, PHASE_ADVANCE};
        if (windowed) {
            int64_t na = replay__next_arrival(rp);
            split = false;
            rp->ep.b_next = na < fb ? na : fb;
            clamp_next(rp);
        } else if (split && !rp->arr.concurrency && rp->ep.admit_merged) {
            int64_t nb = next_boundary_admitting(rp);
            if (nb > rp->ep.b_cur) {
                split = false;
                rp->ep.b_next = nb;
                clamp_next(rp);
            }
        } else if (!split) {
            rp->ep.b_next = next_boundary(rp);
            clamp_next(rp);
        }
        if (split)
            phases[0] = PHASE_ADMIT;
        for (int ph = 0; ph < (split ? 2 : 1) && rc == 0; ph++) {
            if (split && ph == 1) {
                rp->ep.b_next = next_boundary(rp);
                clamp_next(rp);
            }
            if (phases[ph] != PHASE_ADMIT && (rc = replay__route_prep_collect(rp)) != 0)
                break;
            replay__run_work(rp, phases[ph]);
            rc = check_engines(rp, err, errlen);
            if (rc == 0 && rp->rt.prep_now)
                rc = atomic_load_explicit(&rp->rt.prep_now->rc, memory_order_relaxed);
            rp->rt.prep_now = NULL;
        }
        show_progress(rp, false);
        if (rc || rp->ep.b_next == INT64_MAX)
            break;
        rp->ep.b_cur = rp->ep.b_next;
    }
    return rc;
}

/* The epochs from the first arrival on the threads, then the end's checks and the shared G3's
 * last epoch. Returns 0 or a negative errno with the message. */
int replay__epochs(struct replay *rp, char *err, size_t errlen)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    struct replay_threads th = {0};
    int rc = replay__start_threads(rp, &th);
    rp->ep.b_cur = replay__next_arrival(rp);
    rp->ep.wall_start = base_monotonic_ns();
    rp->ep.end_reason = "finished";
    rp->ep.stop_ns = cfg->max_sim_time_ns > 0 && rp->ep.b_cur <= INT64_MAX - cfg->max_sim_time_ns
                         ? rp->ep.b_cur + cfg->max_sim_time_ns
                         : INT64_MAX;
    replay__acct_start(rp);
    if (rc == 0)
        rc = rp->num_prefill ? run_disagg_epochs(rp, err, errlen) : run_epochs(rp, err, errlen);
    replay__acct_stop(rp);
    /* Every session turn routed with a next turn has released it at a boundary (unless the
     * replay ended early). */
    bool early = strcmp(rp->ep.end_reason, "finished") != 0;
    if (rc == 0 && rp->arr.parents_in_flight && !early) {
        snprintf(err, errlen,
                 "internal error: the replay ran out of events with %" PRIu64
                 " session turns whose next turn never came",
                 (uint64_t)rp->arr.parents_in_flight);
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
    replay__stop_threads(rp, &th);
    show_progress(rp, true);
    return rc;
}
