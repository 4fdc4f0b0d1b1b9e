/*
 * stress_offload.c - the pipeline part of `kvsim stress` (and of the stress_offload executable):
 * many owner threads hammering offload pipelines on one shared thread pool.
 *
 * Plain threads, no Criterion, so that it runs under ThreadSanitizer. Each of --threads owner
 * threads owns one pipeline (as an engine's worker thread does) with --lanes lanes of --permits
 * permits, all attached to one pool of --workers threads. Each owner runs a seeded random mix of
 * enqueue, cancel, settle, settle_after, advance_to and poll; even lanes have infinite
 * bandwidth (batches drain as soon as their work is done), odd lanes a finite one (batches stay
 * in flight until virtual time passes their completion). Work functions spin a little, and can
 * be made to yield at the pipeline's debug_yield points (--yield). The pool uses the adaptive
 * hand-off (owners take queued batches back and run them; workers are woken for costly work:
 * every 16th batch is) unless --eager. Then a shutdown phase: every owner blocks in settle behind
 * work held by a gate on a worker, and the calling thread shuts the pipelines down from outside
 * (offload_shutdown_any, or offload_pool_shutdown_any with --pool-shutdown) before opening the
 * gate. With the adaptive hand-off an owner may instead take its gated batches back, run them
 * (the gate holds workers only) and return 0.
 *
 * Checked, with a message on stderr and a result of 1 on any violation:
 *  - permits: the work functions in flight on a lane never exceed its permits (C11 atomics),
 *    and the lane's max_in_flight agrees;
 *  - exactly once: every enqueued batch ends exactly once (one completion callback, or one
 *    successful cancel), and its work ran at most once (exactly once if it completed, or
 *    failed other than by shutdown);
 *  - settlement: after settle returns 0 the batch has drained and the pipeline is stable; after
 *    -EAGAIN the batch has not drained and nothing is due at the current time; after
 *    settle_after returns 0 every lane's drained count reaches its target; at the end each
 *    lane's drained count equals its enqueued count, and the counters match the callbacks;
 *  - liveness: no wait ever reaches the wall-clock guard (timeouts are counted and reported),
 *    and the shutdown phase releases every blocked owner with -ESHUTDOWN.
 * It prints operations per second.
 *
 * Run (TSan build): TSAN_OPTIONS=halt_on_error=1 ./stress_offload --threads 3 --seconds 2
 * The pipeline's publication points (its SPSC rings and sleeps) carry their own TSan annotations
 * in offload/pipeline.c; this part needs no suppression.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvpool/base.h"
#include "offload/offload.h"
#include "runtime/verify/verify.h"

#define KEEP_TOKENS     64
#define SECONDS_CAP     KVSIM_STRESS_MAX_BATCHES /* batches per owner in --seconds mode */
#define SHUTDOWN_BATCHS 4u

/* The run's options (kvsim_stress_offload_run copies them here: one run at a time). */
static struct kvsim_stress_opts opt;
static int64_t guard_ns;
static _Atomic uint64_t violations;
static _Atomic bool gates_open;
static _Atomic uint32_t owners_done;     /* owners past their main phase */
static _Atomic uint32_t owners_blocking; /* owners about to block in the shutdown phase */

static void violation(const char *fmt, ...)
{
    va_list ap;
    char msg[256];
    if (atomic_fetch_add(&violations, 1) < 20) {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        fprintf(stderr, "%s: VIOLATION (pipeline): %s\n", opt.prog, msg);
    }
}

static uint64_t rng_next(uint64_t *s) { return base_splitmix64_next(s); }

static double now_s(void) { return (double)base_monotonic_ns() * 1e-9; }

/* debug_yield: widen race windows at the pipeline's marked points. */
static _Thread_local uint64_t yield_rng;
static void stress_yield(void *arg, enum offload_yield_point pt)
{
    (void)arg;
    (void)pt;
    if (!yield_rng)
        yield_rng = (uint64_t)(uintptr_t)&yield_rng ^ opt.seed;
    uint64_t r = rng_next(&yield_rng) % 16;
    if (r < 4)
        sched_yield();
    else if (r == 4)
        usleep(20);
}

/* ---- one owner ------------------------------------------------------------------------------- */

struct owner {
    uint32_t index;
    pthread_t thread;
    struct offload_pipeline *p;
    uint64_t cap;                                /* batches per lane the arrays can hold */
    _Atomic uint8_t *invoked[OFFLOAD_NUM_LANES]; /* work calls per batch (workers write) */
    uint8_t *ended[OFFLOAD_NUM_LANES];           /* terminal reports per batch (owner only) */
    int8_t *outcome[OFFLOAD_NUM_LANES]; /* 1 completed, 2 failed, 3 shut down, 4 cancelled */
    _Atomic int in_flight[OFFLOAD_NUM_LANES];
    _Atomic int max_seen[OFFLOAD_NUM_LANES];
    uint64_t callbacks[OFFLOAD_NUM_LANES][3]; /* completed, failed, shut down */
    uint64_t cancels[OFFLOAD_NUM_LANES];
    uint64_t ops, enqueues, settles, settle_ok, settle_again, settle_after_ok, advances;
    uint64_t shutdown_released;
    uint64_t shutdown_drained; /* adaptive: the shutdown-phase settle ran the batches itself */
    bool in_shutdown_phase;
};

static int stress_work(void *arg, const struct offload_work *w)
{
    struct owner *o = arg;
    uint32_t l = (uint32_t)w->lane;
    int v = atomic_fetch_add(&o->in_flight[l], 1) + 1;
    if (v > (int)opt.permits)
        violation("owner %u lane %u: %d batches in flight, %u permits", o->index, l, v,
                  opt.permits);
    int m = atomic_load(&o->max_seen[l]);
    while (v > m && !atomic_compare_exchange_weak(&o->max_seen[l], &m, v)) {
    }
    if (w->seq < o->cap) {
        uint8_t before = atomic_fetch_add(&o->invoked[l][w->seq], 1);
        if (before != 0)
            violation("owner %u lane %u batch %" PRIu64 ": work invoked twice", o->index, l,
                      w->seq);
    }
    /* Shutdown phase: hold the worker until the gate opens. An owner that took the batch back
     * (adaptive hand-off) runs it at once: it cannot wait for a gate opened after it returns. */
    if (w->cookie == 1 && w->worker != UINT32_MAX) {
        for (int i = 0; i < 100000 && !atomic_load(&gates_open); i++)
            usleep(100);
    } else {
        volatile uint64_t sink = 0;
        /* Mostly cheap work, and every 16th batch some 10-50 us, so the adaptive hand-off's
         * running mean crosses its wake threshold both ways during a run. */
        uint64_t spins = (w->seq * 2654435761u) % 2000;
        if (w->seq % 16 == 5 && w->cookie != 1)
            spins += 40000;
        for (uint64_t i = 0; i < spins; i++)
            sink += i;
        (void)sink; /* the volatile stores are the work; clang's -Wunused-but-set-variable */
    }
    atomic_fetch_sub(&o->in_flight[l], 1);
    return 0;
}

static void stress_complete(void *arg, const struct offload_completion *c)
{
    struct owner *o = arg;
    uint32_t l = c->token.lane;
    uint64_t s = c->token.seq;
    if (s >= o->cap)
        return;
    if (o->ended[l][s]++ != 0)
        violation("owner %u lane %u batch %" PRIu64 ": reported twice", o->index, l, s);
    int kind;
    if (c->result == 0)
        kind = 0;
    else if (c->result == -EIO)
        kind = 1;
    else if (c->result == -ESHUTDOWN)
        kind = 2;
    else {
        violation("owner %u lane %u batch %" PRIu64 ": unexpected result %d", o->index, l, s,
                  c->result);
        return;
    }
    if (kind == 2 && !o->in_shutdown_phase)
        violation("owner %u: a batch was shut down outside the shutdown phase", o->index);
    o->callbacks[l][kind]++;
    o->outcome[l][s] = (int8_t)(kind + 1);
}

static void check_settled(struct owner *o, const struct offload_token *t, int rc)
{
    if (rc == 0) {
        o->settle_ok++;
        int st = offload_token_state(o->p, t);
        if (st != OFFLOAD_BATCH_COMPLETED && st != OFFLOAD_BATCH_FAILED &&
            st != OFFLOAD_BATCH_CANCELLED && st != OFFLOAD_BATCH_DRAINED)
            violation("owner %u: settle returned 0 with the batch %s", o->index,
                      st >= 0 ? offload_batch_state_name((enum offload_batch_state)st) : "?");
        if (!offload_is_stable(o->p))
            violation("owner %u: settle returned 0 on an unstable pipeline", o->index);
    } else if (rc == -EAGAIN) {
        o->settle_again++;
        int st = offload_token_state(o->p, t);
        if (st != OFFLOAD_BATCH_QUEUED && st != OFFLOAD_BATCH_IN_FLIGHT &&
            st != OFFLOAD_BATCH_STARTING)
            violation("owner %u: settle said -EAGAIN for a batch in state %d", o->index, st);
        if (offload_next_deadline(o->p) <= offload_now(o->p))
            violation("owner %u: settle said -EAGAIN with work due now", o->index);
    } else {
        violation("owner %u: settle returned %d (%s)", o->index, rc, kvsim_strerror(rc));
    }
}

/* Drains everything: advance to each deadline until nothing is in flight. */
static void drain_all(struct owner *o)
{
    int64_t d;
    while ((d = offload_next_deadline(o->p)) != OFFLOAD_NEVER) {
        int rc = offload_advance_to(o->p, d);
        if (rc < 0) {
            violation("owner %u: advance_to(%" PRId64 ") returned %d", o->index, d, rc);
            return;
        }
        o->advances++;
    }
}

static void *owner_main(void *arg)
{
    struct owner *o = arg;
    uint64_t rng = opt.seed * 1000003u + o->index + 1;
    struct offload_token keep[KEEP_TOKENS];
    uint32_t nkeep = 0;
    struct offload_checkpoint cp;
    offload_checkpoint(o->p, &cp);
    double deadline = now_s() + opt.seconds;
    uint64_t target = opt.batches ? opt.batches : UINT64_MAX;
    offload_block_id blocks[8];
    for (int i = 0; i < 8; i++)
        blocks[i] = i;

    while (o->enqueues < target) {
        if (!opt.batches && (o->ops & 63) == 0 && now_s() >= deadline)
            break;
        o->ops++;
        uint64_t r = rng_next(&rng);
        uint32_t op = (uint32_t)(r % 100);
        if (op < 50) {
            enum offload_lane lane = (enum offload_lane)((r >> 8) % opt.lanes);
            struct offload_lane_stats ls;
            offload_lane_stats(o->p, lane, &ls);
            if (ls.enqueued >= o->cap) {
                target = o->enqueues; /* arrays full: stop (seconds mode) */
                break;
            }
            uint32_t n = 1 + (uint32_t)((r >> 16) % 8);
            struct offload_token t;
            int rc = offload_enqueue(o->p, lane, blocks, n, 0, &t);
            if (rc == -EAGAIN) { /* window full: let time pass */
                drain_all(o);
                continue;
            }
            if (rc != 0) {
                violation("owner %u: enqueue returned %d", o->index, rc);
                break;
            }
            o->enqueues++;
            if (nkeep < KEEP_TOKENS)
                keep[nkeep++] = t;
            else
                keep[(r >> 24) % KEEP_TOKENS] = t;
        } else if (op < 58 && nkeep) {
            const struct offload_token *t = &keep[(r >> 8) % nkeep];
            int rc = offload_cancel(o->p, t);
            if (rc == 0) {
                if (t->seq < o->cap && o->ended[t->lane][t->seq]++ != 0)
                    violation("owner %u: cancelled a batch that had ended", o->index);
                if (t->seq < o->cap)
                    o->outcome[t->lane][t->seq] = 4;
                o->cancels[t->lane]++;
            } else if (rc != -EBUSY && rc != -EALREADY) {
                violation("owner %u: cancel returned %d", o->index, rc);
            }
        } else if (op < 75 && nkeep) {
            const struct offload_token *t = &keep[(r >> 8) % nkeep];
            o->settles++;
            check_settled(o, t, offload_settle(o->p, t));
        } else if (op < 83) {
            uint64_t delta[OFFLOAD_NUM_LANES] = {0};
            for (uint32_t l = 0; l < opt.lanes; l++) {
                struct offload_lane_stats ls;
                offload_lane_stats(o->p, (enum offload_lane)l, &ls);
                uint64_t room = ls.enqueued - cp.drained[l];
                delta[l] = room ? rng_next(&rng) % (room + 1) : 0;
            }
            o->settles++;
            int rc = offload_settle_after(o->p, &cp, delta);
            if (rc == 0) {
                o->settle_after_ok++;
                for (uint32_t l = 0; l < opt.lanes; l++) {
                    struct offload_lane_stats ls;
                    offload_lane_stats(o->p, (enum offload_lane)l, &ls);
                    if (ls.completed + ls.failed + ls.cancelled < cp.drained[l] + delta[l])
                        violation("owner %u lane %u: settle_after returned below its target",
                                  o->index, l);
                }
                if (!offload_is_stable(o->p))
                    violation("owner %u: settle_after returned on an unstable pipeline", o->index);
                offload_checkpoint(o->p, &cp);
            } else if (rc != -EAGAIN) {
                violation("owner %u: settle_after returned %d", o->index, rc);
            }
        } else if (op < 97) {
            int64_t dt = (int64_t)((r >> 8) % 400000); /* up to 0.4 ms of virtual time */
            int rc = offload_advance_to(o->p, offload_now(o->p) + dt);
            if (rc < 0)
                violation("owner %u: advance_to returned %d", o->index, rc);
            o->advances++;
        } else {
            int rc = offload_poll(o->p);
            if (rc < 0)
                violation("owner %u: poll returned %d", o->index, rc);
        }
    }
    drain_all(o);
    offload_checkpoint(o->p, &cp);
    o->settles++;
    int rc = offload_settle_after(o->p, &cp, NULL);
    if (rc != 0)
        violation("owner %u: final settle_after returned %d", o->index, rc);

    /* Shutdown phase: block in settle behind gated work until shut down from outside. The
     * gated work holds pool workers, so no owner may start it while another one still needs
     * the workers for its main phase. */
    atomic_fetch_add(&owners_done, 1);
    while (atomic_load(&owners_done) < opt.threads)
        usleep(200);
    o->in_shutdown_phase = true;
    struct offload_token last = {0};
    uint32_t queued = 0;
    for (uint32_t i = 0; i < SHUTDOWN_BATCHS; i++) {
        rc = offload_enqueue(o->p, OFFLOAD_LANE_G1_G2, blocks, 1, 1, &last);
        if (rc == 0)
            queued++;
        else
            violation("owner %u: shutdown-phase enqueue returned %d", o->index, rc);
    }
    atomic_fetch_add(&owners_blocking, 1);
    if (queued) {
        rc = offload_settle(o->p, &last);
        if (rc == -ESHUTDOWN)
            o->shutdown_released++;
        else if (rc == 0 && !opt.eager)
            o->shutdown_drained++; /* it took every gated batch back from the rings */
        else
            violation("owner %u: blocked settle returned %d, expected -ESHUTDOWN%s", o->index, rc,
                      opt.eager ? "" : " or 0");
    }
    return NULL;
}

/* ---- checks after the run ------------------------------------------------------------------ */

static void check_owner(struct owner *o)
{
    for (uint32_t l = 0; l < opt.lanes; l++) {
        struct offload_lane_stats ls;
        offload_lane_stats(o->p, (enum offload_lane)l, &ls);
        uint64_t drained = ls.completed + ls.failed + ls.cancelled;
        if (drained != ls.enqueued)
            violation("owner %u lane %u: %" PRIu64 " enqueued, %" PRIu64 " drained", o->index, l,
                      ls.enqueued, drained);
        if (ls.completed != o->callbacks[l][0])
            violation("owner %u lane %u: %" PRIu64 " completed, %" PRIu64 " callbacks", o->index, l,
                      ls.completed, o->callbacks[l][0]);
        if (ls.failed != o->callbacks[l][1] + o->callbacks[l][2])
            violation("owner %u lane %u: failed counter %" PRIu64 " vs callbacks %" PRIu64,
                      o->index, l, ls.failed, o->callbacks[l][1] + o->callbacks[l][2]);
        if (ls.cancelled != o->cancels[l])
            violation("owner %u lane %u: cancelled counter %" PRIu64 " vs %" PRIu64, o->index, l,
                      ls.cancelled, o->cancels[l]);
        if (ls.max_in_flight > opt.permits || atomic_load(&o->max_seen[l]) > (int)opt.permits)
            violation("owner %u lane %u: max in flight %u / %d over %u permits", o->index, l,
                      ls.max_in_flight, atomic_load(&o->max_seen[l]), opt.permits);
        uint64_t n = ls.enqueued < o->cap ? ls.enqueued : o->cap;
        for (uint64_t s = 0; s < n; s++) {
            if (o->ended[l][s] != 1) {
                violation("owner %u lane %u batch %" PRIu64 ": ended %u times", o->index, l, s,
                          o->ended[l][s]);
                continue;
            }
            uint8_t inv = atomic_load(&o->invoked[l][s]);
            int8_t out = o->outcome[l][s];
            bool must_run = out == 1 || out == 2; /* completed or failed by injection */
            if ((must_run && inv != 1) || (out == 4 && inv != 0) || inv > 1)
                violation("owner %u lane %u batch %" PRIu64 ": outcome %d, work ran %u times",
                          o->index, l, s, out, inv);
        }
    }
}

/* ---- the run ------------------------------------------------------------------------------- */

static int make_owner(struct owner *o, uint32_t index, struct offload_pool *pool)
{
    memset(o, 0, sizeof *o);
    o->index = index;
    o->cap = (opt.batches ? opt.batches : SECONDS_CAP) + SHUTDOWN_BATCHS;
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        o->invoked[l] = calloc(o->cap, sizeof *o->invoked[l]);
        o->ended[l] = calloc(o->cap, 1);
        o->outcome[l] = calloc(o->cap, 1);
        if (!o->invoked[l] || !o->ended[l] || !o->outcome[l])
            return -ENOMEM;
        atomic_init(&o->in_flight[l], 0);
        atomic_init(&o->max_seen[l], 0);
    }
    struct offload_config cfg;
    offload_config_default(&cfg);
    cfg.block_bytes = 1000000;
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        cfg.lanes[l].permits = l < opt.lanes ? opt.permits : 0;
        cfg.lanes[l].max_blocks = 8;
        cfg.lanes[l].capacity = 64;
        /* even lanes: infinite bandwidth; odd lanes: 10 GB/s (0.1 ms per 1 MB block) */
        cfg.lanes[l].bandwidth = (l % 2) ? INT64_C(10000000000) : 0;
    }
    cfg.work = stress_work;
    cfg.work_arg = o;
    cfg.complete = stress_complete;
    cfg.complete_arg = o;
    cfg.fail_rate = opt.fail_rate;
    cfg.seed = opt.seed + index;
    cfg.settle_timeout_ns = guard_ns;
    if (opt.yield) {
        cfg.debug_yield = stress_yield;
        cfg.debug_yield_arg = NULL;
    }
    return offload_pipeline_create(&cfg, pool, &o->p);
}

static void free_owner(struct owner *o)
{
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        free(o->invoked[l]);
        free(o->ended[l]);
        free(o->outcome[l]);
    }
}

int kvsim_stress_offload_run(const struct kvsim_stress_opts *opts, FILE *out,
                             struct kvsim_stress_result *res)
{
    opt = *opts;
    if (!opt.prog)
        opt.prog = "stress";
    if (opt.threads == 0 || opt.lanes == 0 || opt.lanes > OFFLOAD_NUM_LANES || opt.permits == 0 ||
        opt.workers == 0 || opt.batches > SECONDS_CAP || (!opt.batches && !(opt.seconds > 0)) ||
        opt.guard_ms <= 0) {
        fprintf(stderr, "%s: pipeline: invalid options\n", opt.prog);
        return -EINVAL;
    }
    guard_ns = opt.guard_ms * 1000000;
    atomic_store(&violations, 0);
    atomic_store(&gates_open, false);
    atomic_store(&owners_done, 0);
    atomic_store(&owners_blocking, 0);
    if (res)
        *res = (struct kvsim_stress_result){0};

    struct offload_pool_config pc;
    offload_pool_config_default(&pc);
    pc.threads = opt.workers;
    pc.max_pipelines = opt.threads;
    if (opt.eager)
        pc.wake_work_ns = 0;
    if (opt.yield) {
        pc.debug_yield = stress_yield;
        pc.debug_yield_arg = NULL;
    }
    struct offload_pool *pool;
    int rc = offload_pool_create(&pc, &pool);
    if (rc) {
        fprintf(stderr, "%s: offload_pool_create: %s\n", opt.prog, kvsim_strerror(rc));
        return rc;
    }
    struct owner *owners = calloc(opt.threads, sizeof *owners);
    if (!owners) {
        fprintf(stderr, "%s: out of memory\n", opt.prog);
        offload_pool_destroy(pool);
        return -ENOMEM;
    }
    /* Pipelines are created on the calling thread and used by their owner thread only: thread
     * creation orders the handover. */
    uint32_t made = 0;
    for (; made < opt.threads; made++) {
        rc = make_owner(&owners[made], made, pool);
        if (rc) {
            fprintf(stderr, "%s: pipeline %u: %s\n", opt.prog, made, kvsim_strerror(rc));
            break;
        }
    }
    if (made < opt.threads) {
        for (uint32_t i = 0; i <= made; i++) {
            if (owners[i].p)
                offload_pipeline_destroy(owners[i].p);
            free_owner(&owners[i]);
        }
        free(owners);
        offload_pool_destroy(pool);
        return rc;
    }
    char mode[64];
    if (opt.batches)
        snprintf(mode, sizeof mode, "%" PRIu64 " batches per owner", opt.batches);
    else
        snprintf(mode, sizeof mode, "%.1f s", opt.seconds);
    fprintf(out,
            "%s: pipeline: %u owners x %u lanes x %u permits on %u workers, %s, fail rate "
            "%.2f, seed %" PRIu64 "%s%s\n",
            opt.prog, opt.threads, opt.lanes, opt.permits, opt.workers, mode, opt.fail_rate,
            opt.seed, opt.yield ? ", yielding" : "", opt.pool_shutdown ? ", pool shutdown" : "");
    fflush(out);
    double t0 = now_s();
    uint32_t started = 0;
    for (; started < opt.threads; started++) {
        rc = pthread_create(&owners[started].thread, NULL, owner_main, &owners[started]);
        if (rc) {
            /* Count the missing owners as done and blocking so the others go on; the released
             * count will not match, so this is reported as a violation. */
            violation("pthread_create: %s", strerror(rc));
            atomic_fetch_add(&owners_done, opt.threads - started);
            atomic_fetch_add(&owners_blocking, opt.threads - started);
            break;
        }
    }

    /* Shutdown phase: once every owner is blocked (or about to block) in settle behind gated
     * work, shut each pipeline down from this thread, then open the gates. */
    double phase_deadline = now_s() + 3600;
    while (atomic_load(&owners_blocking) < opt.threads && now_s() < phase_deadline)
        usleep(1000);
    double t_main = now_s() - t0;
    usleep(20000);
    if (opt.pool_shutdown)
        offload_pool_shutdown_any(pool);
    else
        for (uint32_t i = 0; i < opt.threads; i++)
            offload_shutdown_any(owners[i].p);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(owners[i].thread, NULL);
    atomic_store(&gates_open, true);

    uint64_t ops = 0, enq = 0, settles = 0, ok = 0, again = 0, after_ok = 0, adv = 0;
    uint64_t released = 0, drained = 0, failed = 0, completed = 0;
    struct offload_stats total = {0};
    for (uint32_t i = 0; i < opt.threads; i++) {
        struct owner *o = &owners[i];
        /* The owner thread has exited: this thread takes the pipeline over (join orders it). */
        rc = offload_shutdown(o->p);
        if (rc)
            violation("owner %u: offload_shutdown returned %d", i, rc);
        check_owner(o);
        struct offload_stats st;
        offload_stats(o->p, &st);
        total.settles += st.settles;
        total.settle_waits += st.settle_waits;
        total.timeouts += st.timeouts;
        total.owner_sleeps += st.owner_sleeps;
        total.dispatched += st.dispatched;
        total.taken_back += st.taken_back;
        total.worker_wakes += st.worker_wakes;
        ops += o->ops;
        enq += o->enqueues;
        settles += o->settles;
        ok += o->settle_ok;
        again += o->settle_again;
        after_ok += o->settle_after_ok;
        adv += o->advances;
        released += o->shutdown_released;
        drained += o->shutdown_drained;
        for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
            completed += o->callbacks[l][0];
            failed += o->callbacks[l][1];
        }
        rc = offload_pipeline_destroy(o->p);
        if (rc)
            violation("owner %u: destroy returned %d", i, rc);
        free_owner(o);
    }
    if (total.timeouts)
        violation("%" PRIu64 " waits hit the %" PRId64 " ms guard", total.timeouts, opt.guard_ms);
    if (released + drained != opt.threads)
        violation("%" PRIu64 " of %u blocked owners were released by shutdown (%" PRIu64
                  " drained their batches themselves)",
                  released, opt.threads, drained);
    rc = offload_pool_destroy(pool);
    if (rc)
        violation("offload_pool_destroy returned %d", rc);
    free(owners);

    fprintf(out,
            "  batches: %" PRIu64 " enqueued, %" PRIu64 " completed, %" PRIu64
            " failed (injected), the rest cancelled or shut down\n",
            enq, completed, failed);
    fprintf(out,
            "  settles: %" PRIu64 " (%" PRIu64 " drained, %" PRIu64 " not yet due, %" PRIu64
            " targets met); %" PRIu64 " blocked, %" PRIu64 " owner sleeps, %" PRIu64
            " guard timeouts\n",
            settles, ok, again, after_ok, total.settle_waits, total.owner_sleeps, total.timeouts);
    fprintf(out,
            "  %" PRIu64 " advances, %" PRIu64 " batches dispatched to workers (%" PRIu64
            " taken back by their owner, %" PRIu64 " worker wakes; %s hand-off), shutdown "
            "released %" PRIu64 "/%u blocked owners",
            adv, total.dispatched, total.taken_back, total.worker_wakes,
            opt.eager ? "eager" : "adaptive", released, opt.threads);
    if (drained)
        fprintf(out, " (%" PRIu64 " drained theirs: no worker held a gated batch)", drained);
    fprintf(out, "\n");
    fprintf(out, "  %" PRIu64 " operations in %.3f s: %.0f ops/s, %.0f batches/s\n", ops, t_main,
            t_main > 0 ? (double)ops / t_main : 0.0, t_main > 0 ? (double)enq / t_main : 0.0);
    uint64_t v = atomic_load(&violations);
    if (res)
        *res = (struct kvsim_stress_result){.ops = ops, .elapsed_s = t_main, .violations = v};
    return v ? KVSIM_EINVARIANT : 0;
}
