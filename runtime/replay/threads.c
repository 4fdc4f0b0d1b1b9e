/*
 * threads.c - the replay's threads and its phases: the epoch barrier, the worker threads, which
 * thread takes which engine in a phase (each its own, the admitting ones claimed), one engine's
 * part of a phase (admit its inbox, advance it), and the policy that runs a phase on the
 * coordinator alone when threads do not pay for themselves.
 *
 * The barrier spins (up to 200 us) only while spinning has recently paid, and never with more
 * threads than CPUs; otherwise it sleeps on a futex (barrier_wait).
 *
 * Threads: replay__run_work and the threads' start and stop on the coordinator (thread 0) with
 * the workers parked; work and what it calls on every replay thread inside a phase, each engine
 * on one thread at a time. Which thread advances an engine never changes what it does.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include <urcu/wfcqueue.h>

#include "runtime/replay/replay_internal.h"

#include "kvpool/base.h"
#include "kvpool/kvpool.h"
#include "runtime/engine/engine.h"

/* ---- barrier ------------------------------------------------------------------------------ */

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

/* The CPUs this process may run on (its affinity mask, e.g. under taskset or a container's
 * cpuset), or 0 when unknown. */
uint32_t replay__cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (uint32_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 0;
}

/* The epoch barrier for replay thread w: offline while it waits (a shared G3's grace periods
 * must not wait for a parked thread); with the accounting on, its CPU and wall time go to w's
 * wait. */
static void epoch_barrier(struct replay *rp, uint32_t w)
{
    struct acct_mark m = {0, 0};
    int64_t wall0 = 0;
    if (rp->acct.on) {
        m = replay__acct_mark();
        wall0 = base_monotonic_ns();
    }
    kvsim_tier_topology_thread_offline(rp->tiers);
    barrier_wait(&rp->thr.barrier, &rp->thr.workers[w].waiter);
    kvsim_tier_topology_thread_online(rp->tiers);
    if (rp->acct.on) {
        rp->acct.thr[w].wait_cpu_ns += replay__acct_since(rp, m);
        rp->acct.thr[w].wait_wall_ns += base_monotonic_ns() - wall0;
    }
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
    int64_t at = rp->ep.b_cur; /* where the engine is */
    /* Single consumer: the unlocked dequeue is safe; FIFO keeps the routing order. */
    struct cds_wfcq_node *n;
    while ((n = __cds_wfcq_dequeue_blocking(&rp->rt.inbox_head[e], &rp->rt.inbox_tail[e]))) {
        uint32_t req = (uint32_t)(n - rp->rt.nodes);
        cds_wfcq_node_init(n);
        struct routed_hashes *q = &rp->rt.routed_hashes[e];
        struct kvsim_engine_admit_opts o = {0};
        if (q->next_ent < q->num_ent && q->ent[q->next_ent].req == req) {
            const struct routed_entry *en = &q->ent[q->next_ent++];
            o.prompt_hashes = en->prepared ? en->prepared : q->hashes + en->off;
            o.num_prompt_hashes = en->num;
            o.hashes_block_size = rp->num_prefill ? rp->cfg->disagg.prefill_sched.block_size
                                                  : rp->cfg->sched.block_size;
        }
        /* a window's arrival (rp->ep.lookahead_ns) comes at its own instant: the engine gets
         * there first, as it would have at that instant's boundary, once for all of the
         * instant's arrivals (advancing between two would start a step without the second) */
        int64_t t = rp->rt.arrive_at[req];
        if (rc == 0 && t > at) {
            rc = kvsim_engine_advance(rp->engines[e], t);
            at = t;
        }
        if (rc == 0)
            rc = kvsim_engine_admit_ext(rp->engines[e], req, t, &o);
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
    for (uint32_t r = e; rc == 0 && r < e + rp->dp; r++) /* the delayed router view's */
        rc = replay__route_release(rp, r, until);
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
        work_lockstep(rp, e, admit, to_cur ? rp->ep.b_cur : rp->ep.b_next);
        return;
    }
    int rc = admit ? admit_inbox(rp, e) : 0;
    if (rc == 0)
        rc = kvsim_engine_advance(eng, to_cur ? rp->ep.b_cur : rp->ep.b_next);
    if (rc == 0 && rp->rt.drain_events)
        rc = replay__route_drain_events(rp, e);
    if (rc == 0)
        rc = replay__route_release(rp, e, to_cur ? rp->ep.b_cur : rp->ep.b_next);
    if (rc == 0 && rp->rt.prep_now && !to_cur)
        replay__route_prep_overlaps(rp, e); /* e at the next boundary: what it caches there */
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
    int64_t until = to_cur ? rp->ep.b_cur : rp->ep.b_next;
    if (rp->lockstep) { /* the group's turn is its first rank's */
        if (e % rp->dp)
            return false;
        for (uint32_t r = e; admit && r < e + rp->dp; r++)
            if (!cds_wfcq_empty(&rp->rt.inbox_head[r], &rp->rt.inbox_tail[r]))
                return true;
        return kvsim_lockstep_next_event(&rp->lockstep[e / rp->dp]) <= until;
    }
    return works_in(rp, e, phase) &&
           ((admit && !cds_wfcq_empty(&rp->rt.inbox_head[e], &rp->rt.inbox_tail[e])) ||
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
    struct acct_mark m = replay__acct_mark();
    work_engine(rp, e, phase);
    rp->acct.engine_ns[e] += replay__acct_since(rp, m);
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
 * thread inside a parallel phase; the coordinator set rp->thr.admitting and bumped
 * rp->thr.phase_seq before the phase's first barrier.
 */
/* Whether this thread takes engine e in the current phase: the first to exchange the phase's
 * number into e's claim word does. Relaxed: the barriers order the engines' state. */
static bool claim_engine(struct replay *rp, uint32_t e)
{
    return atomic_exchange_explicit(&rp->thr.claim[e], rp->thr.phase_seq, memory_order_relaxed) !=
           rp->thr.phase_seq;
}

static void work_engines(struct replay *rp, uint32_t w, enum phase phase)
{
    uint32_t T = rp->num_threads, N = rp->num_engines;
    for (uint32_t e = w; e < N; e += T) /* own, admitting */
        if (rp->thr.admitting[e] && works_in(rp, e, phase) && claim_engine(rp, e))
            advance_engine(rp, e, phase);
    for (uint32_t e = w; e < N; e += T) /* own, the rest */
        if (!rp->thr.admitting[e] && works_in(rp, e, phase))
            advance_engine(rp, e, phase);
    for (uint32_t k = 1; k < T;
         k++) { /* the others' admitting ones nobody started, from the back */
        uint32_t v = (w + k) % T;
        if (v >= N)
            continue;
        for (uint32_t e = v + (N - 1 - v) / T * T;; e -= T) {
            if (rp->thr.admitting[e] && works_in(rp, e, phase) && claim_engine(rp, e))
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
    struct acct_mark m = replay__acct_work_begin(rp);
    int64_t wall0 = base_monotonic_ns();
    replay__route_prep_hash(rp, w);
    work_engines(rp, w, phase);
    rp->thr.workers[w].busy_ns = base_monotonic_ns() - wall0;
    replay__acct_work_end(rp, w, m);
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
        if (rp->thr.finished)
            break;
        work(rp, wa->w, rp->thr.phase);
        epoch_barrier(rp, wa->w);
    }
    kvsim_tier_topology_thread_leave(rp->tiers);
    return NULL;
}

/* How many engines have something to do in the phase: an arrival to admit, or an event (a step
 * end, a message, a deadline) at or before the instant the phase advances them to. Stops
 * counting at 2. Coordinator, workers parked. */
static uint32_t engines_with_work(const struct replay *rp, enum phase phase)
{
    uint32_t n = 0;
    for (uint32_t e = 0; e < rp->num_engines && n < 2; e++)
        n += engine_has_work(rp, e, phase) ||
             (rp->rt.prep_now && phase != PHASE_ADMIT && works_in(rp, e, phase));
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
    struct phase_policy *p = &rp->thr.phase_policy[phase];
    if (!p->alone)
        return true;
    return ++p->alone_run % PHASE_PROBE == 0;
}

/* After a phase of the given kind (coordinator, the workers parked): whether it paid, when it
 * ran in parallel, and what that says about the next ones (phase_parallel). */
static void phase_measured(struct replay *rp, enum phase phase, bool parallel, int64_t wall_ns)
{
    struct phase_policy *p = &rp->thr.phase_policy[phase];
    if (parallel) {
        int64_t busy = 0;
        for (uint32_t w = 0; w < rp->num_threads; w++)
            busy += rp->thr.workers[w].busy_ns;
        bool paid = busy * 100 >= wall_ns * PHASE_PAID_PERCENT && wall_ns >= PHASE_MIN_NS;
        p->small_run = paid ? 0 : p->small_run + 1;
        p->alone = p->small_run >= PHASE_SMALL_RUN;
        if (!p->alone)
            p->alone_run = 0;
        rp->thr.phases_parallel++;
    } else if (p->alone && wall_ns >= PHASE_BIG_NS) {
        p->alone = false; /* worth the workers again */
        p->small_run = p->alone_run = 0;
    }
}

/* One phase (coordinator): the workers take their engines, the barriers ordering the phase, or
 * the coordinator advances every engine itself (phase_parallel). */
void replay__run_work(struct replay *rp, enum phase phase)
{
    rp->thr.phase = phase;
    bool parallel = phase_parallel(rp, phase);
    int64_t t0 = base_monotonic_ns();
    if (parallel) {
        rp->thr.phase_seq++;
        bool admit = phase == PHASE_ADMIT || phase == PHASE_ADMIT_AND_ADVANCE ||
                     phase == PHASE_PREFILL_ADMIT || phase == PHASE_PREFILL_ADMIT_DECODE_LAST;
        for (uint32_t e = 0; e < rp->num_engines; e++) /* work_engines' movable engines */
            rp->thr.admitting[e] =
                admit && !cds_wfcq_empty(&rp->rt.inbox_head[e], &rp->rt.inbox_tail[e]);
        epoch_barrier(rp, 0);
        work(rp, 0, phase);
        epoch_barrier(rp, 0);
    } else {
        struct acct_mark m = replay__acct_work_begin(rp);
        replay__route_prep_hash(rp, 0);
        for (uint32_t e = 0; e < rp->num_engines; e++)
            if (works_in(rp, e, phase))
                advance_engine(rp, e, phase);
        replay__acct_work_end(rp, 0, m);
    }
    if (rp->num_threads > 1)
        phase_measured(rp, phase, parallel, base_monotonic_ns() - t0);
    replay__acct_phase_end(rp);
}

/* Starts the workers. Returns 0 or a negative errno (the workers started are stopped by
 * stop_threads). */
int replay__start_threads(struct replay *rp, struct replay_threads *th)
{
    rp->thr.barrier.parties = rp->num_threads;
    /* Threads > CPUs (KVSIM_REPLAY_OVERSUBSCRIBE): a spinning waiter would hold the CPU the
     * party it waits for needs. Up to one thread per CPU it spins while that pays (a busy
     * machine that preempts a party makes it sleep at once: barrier_wait's backoff). */
    uint32_t cpus = replay__cpus();
    rp->thr.barrier.spin_ns = cpus && rp->num_threads <= cpus ? BARRIER_SPIN_NS : 0;
    if (rp->num_threads <= 1)
        return 0;
    th->threads = calloc(rp->num_threads, sizeof *th->threads);
    th->args = calloc(rp->num_threads, sizeof *th->args);
    if (!th->threads || !th->args) {
        rp->thr.barrier.parties = 1;
        return -ENOMEM;
    }
    for (uint32_t w = 1; w < rp->num_threads; w++) {
        th->args[w] = (struct worker_arg){rp, w};
        if (pthread_create(&th->threads[w], NULL, worker_main, &th->args[w]) != 0) {
            rp->thr.barrier.parties = w; /* the threads started so far */
            return -EAGAIN;
        }
    }
    return 0;
}

/* Releases the workers from their barrier and joins them (the coordinator, offline). */
void replay__stop_threads(struct replay *rp, struct replay_threads *th)
{
    if (rp->num_threads > 1 && th->threads) {
        rp->thr.finished = true;
        barrier_wait(&rp->thr.barrier, NULL);
        for (uint32_t w = 1; w < rp->thr.barrier.parties; w++)
            pthread_join(th->threads[w], NULL);
    }
    free(th->threads);
    free(th->args);
}
