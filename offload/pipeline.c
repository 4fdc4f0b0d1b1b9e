/*
 * pipeline.c - lanes, permits, successor handoff, settlement, and the inline executor
 * (offload.h); the owner's side of the thread-pool executor.
 *
 * The owner does everything that changes state. A lane is a window of batch records indexed by
 * sequence number (seq & mask): [low_seq, next_seq) holds every batch not yet drained, head_seq
 * is the next candidate to start (all below it started or were cancelled). The queue is the set
 * of QUEUED records in that window, in seq order; a permit is a unit of lane->in_flight.
 *
 * A batch's life: QUEUED -> (permit) STARTING -> IN_FLIGHT -> COMPLETED | FAILED, or
 * QUEUED -> CANCELLED. On start its transfer enters the lane's link (offload_bw) at the
 * pipeline's current virtual time and its work goes to the executor: inline, the work runs
 * there and then (STARTING is skipped); pool, the record is pushed on the SPSC ring to a worker,
 * which pushes back "started" (-> IN_FLIGHT) and later "done" (work_done, with work_result).
 * When virtual time reaches the transfer's completion the batch becomes "settling": it sits in
 * the pending FIFO (completion order) until its work is done, then drains. Draining hands the
 * permit straight to the lane's next queued batch (it starts at the completion time), then
 * reports the batch to the owner's callback.
 *
 * Everything that decides an outcome (completion order and time, failure injection, successor
 * start times) is computed on the owner from virtual time, so the pool changes only how long
 * the owner waits, never the results. The thread-pool executor itself is pool.c.
 */
#include "offload/offload_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t next_pipeline_id = 1;
static uint32_t round_pow2(uint32_t x)
{
    uint32_t r = 1;
    while (r < x)
        r <<= 1;
    return r;
}

/* ---- owner side: helpers ------------------------------------------------------------------- */

static void owner_yield(struct offload_pipeline *p, enum offload_yield_point pt)
{
    if (p->cfg.debug_yield)
        p->cfg.debug_yield(p->cfg.debug_yield_arg, pt);
}

static bool is_closing(const struct offload_pipeline *p)
{
    return p->closed || atomic_load(&p->close_req) || (p->pool && atomic_load(&p->pool->shutdown));
}

/* The seeded, thread-independent failure decision for one batch. */
static bool inject_failure(const struct offload_pipeline *p, uint32_t lane, uint64_t seq)
{
    double rate = p->cfg.fail_rate;
    if (rate <= 0.0)
        return false;
    if (rate >= 1.0)
        return true;
    uint64_t h = base_splitmix64(
        base_splitmix64(base_splitmix64(p->cfg.seed ^ ((uint64_t)p->gen << 32)) ^ lane) ^ seq);
    return (double)(h >> 11) * 0x1.0p-53 < rate;
}

/* Folds one batch's work time into the pipeline's running mean (weight 1/8). */
static void note_work_ns(struct offload_pipeline *p, uint32_t ns)
{
    int64_t d = (int64_t)ns - (int64_t)p->work_ns;
    p->work_ns = (uint32_t)((int64_t)p->work_ns + d / 8);
}

/* The wall-clock deadline of a call's blocking waits. Inline never waits: no clock read (an
 * engine settles its pipeline at every advance). */
static int64_t wait_guard(const struct offload_pipeline *p)
{
    return p->pool ? base_monotonic_ns() + p->cfg.settle_timeout_ns : INT64_MAX;
}

/* Takes in every report the workers have pushed. Returns how many. */
static uint32_t ingest(struct offload_pipeline *p)
{
    if (!p->pool)
        return 0;
    uint32_t n = 0;
    for (uint32_t w = 0; w < p->pool->cfg.threads; w++) {
        void *v;
        while (spsc_pop(&p->slot->cmp[w], &v)) {
            uintptr_t u = (uintptr_t)v;
            struct rec *r = (struct rec *)(u & ~(uintptr_t)1);
            if (u & 1u) {
                r->work_done = true;
                p->outstanding--;
                note_work_ns(p, r->work_ns);
            } else if (r->state == REC_STARTING) {
                r->state = REC_IN_FLIGHT;
                p->starting--;
            }
            n++;
        }
    }
    return n;
}

/*
 * Adaptive hand-off: takes back every batch of p still in a submission ring (no worker has
 * popped it; spsc_pop_shared gives each entry to one side) and runs its work here, as the
 * inline executor would; while closing, the work is not run and the batch reports -ESHUTDOWN,
 * as a worker of a shut-down pool does. The batch is then as if a worker had acknowledged it and
 * reported "done". Context: the owner. Returns how many it took back.
 */
static uint32_t take_back(struct offload_pipeline *p)
{
    struct offload_pool *pool = p->pool;
    if (pool->cfg.wake_work_ns == 0 || p->starting == 0) /* only STARTING ones can be queued */
        return 0;
    bool closing = is_closing(p);
    int64_t t0 = 0;
    uint32_t n = 0;
    for (uint32_t w = 0; w < pool->cfg.threads; w++) {
        void *v;
        while (spsc_pop_shared(&p->slot->sub[w], &v)) {
            struct rec *r = v;
            if (n == 0)
                t0 = base_monotonic_ns();
            r->work_result = closing ? -ESHUTDOWN : run_work(r, INLINE_WORKER);
            r->work_done = true;
            r->state = REC_IN_FLIGHT; /* it was STARTING: no worker acknowledged it */
            p->starting--;
            p->outstanding--;
            atomic_fetch_sub_explicit(&pool->workers[w].load, 1, memory_order_relaxed);
            n++;
        }
    }
    if (n > 0) {
        if (!closing)
            note_work_ns(p, (uint32_t)((uint64_t)(base_monotonic_ns() - t0) / n));
        p->stats.taken_back += n;
    }
    return n;
}

/*
 * Waits for worker reports: takes back what is still queued (adaptive hand-off), else a bounded
 * spin, then an eventcount sleep. Returns 0 when something may have changed (the caller
 * re-checks its condition), -ESHUTDOWN (closing, unless ignore_close), -ETIMEDOUT (guard passed).
 */
static int owner_wait(struct offload_pipeline *p, int64_t guard, bool ignore_close)
{
    if (!p->pool)
        return -EDEADLK; /* inline: nothing to wait for (unreachable) */
    struct slot *sl = p->slot;
    p->waited = true;
    if (take_back(p) > 0)
        return 0;
    for (uint32_t i = 0; i < p->pool->owner_spin; i++) {
        base_cpu_relax();
        if (ingest(p) > 0)
            return 0;
    }
    int rc = 0;
    atomic_store(&sl->owner_waiting, 1);
    uint32_t seq = atomic_load(&sl->owner_wake_seq);
    owner_yield(p, OFFLOAD_YIELD_OWNER_SUBSCRIBED);
    if (ingest(p) > 0)
        goto out;
    if (!ignore_close && is_closing(p)) {
        rc = -ESHUTDOWN;
        goto out;
    }
    int64_t left = guard - base_monotonic_ns();
    if (left <= 0) {
        p->stats.timeouts++;
        rc = -ETIMEDOUT;
        goto out;
    }
    owner_yield(p, OFFLOAD_YIELD_OWNER_SLEEP);
    p->stats.owner_sleeps++;
    /* Sleeps until woken or the guard: every event that can change what we wait for (a worker
     * report, offload_shutdown_any, offload_pool_shutdown_any) wakes this word, so a lost
     * wake-up shows up as a guard timeout instead of being papered over by periodic polls. */
    base_futex_wait(&sl->owner_wake_seq, seq, left);
out:
    atomic_store(&sl->owner_waiting, 0);
    return rc;
}

static void dispatch(struct offload_pipeline *p, struct rec *r)
{
    struct offload_pool *pool = p->pool;
    uint32_t n = pool->cfg.threads, best = p->rr % n, best_load = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t w = (p->rr + i) % n;
        uint32_t load = atomic_load_explicit(&pool->workers[w].load, memory_order_relaxed);
        if (load < best_load) {
            best = w;
            best_load = load;
        }
    }
    p->rr = best + 1;
    atomic_fetch_add_explicit(&pool->workers[best].load, 1, memory_order_relaxed);
    r->worker = best;
    p->outstanding++;
    p->stats.dispatched++;
    spsc_push_wait(&p->slot->sub[best], r);
    /* Adaptive: a worker asleep is worth a futex wake only for work that costs more than the
     * wake-up; otherwise the batch waits in the ring for a worker that is awake anyway, or for
     * the owner to take it back when it needs it (owner_wait). */
    uint32_t wake = pool->cfg.wake_work_ns;
    if ((wake == 0 || p->work_ns >= wake) && offload__wake_worker(&pool->workers[best]))
        p->stats.worker_wakes++;
}

/* Starts r (QUEUED) on its lane at the current virtual time, with one of the lane's permits. */
static void start_batch(struct offload_pipeline *p, struct lane *ln, struct rec *r)
{
    ln->queued--;
    ln->in_flight++;
    if (ln->in_flight > ln->st.max_in_flight)
        ln->st.max_in_flight = ln->in_flight;
    ln->st.started++;
    r->start_time = p->now;
    r->inject_fail = inject_failure(p, r->lane, r->seq);
    r->work_done = false;
    r->work_result = 0;
    /* Cannot fail: the link reserved room for `permits` transfers. */
    (void)offload_bw_start(ln->bw, p->now, rec_bytes(p, r), r->seq);
    if (p->pool) {
        r->state = REC_STARTING;
        p->starting++;
        dispatch(p, r);
    } else {
        r->state = REC_IN_FLIGHT;
        r->work_result = run_work(r, INLINE_WORKER);
        r->work_done = true;
    }
}

/* Fills free permits from the queue, in FIFO order (the successor handoff). */
static void try_start(struct offload_pipeline *p, struct lane *ln)
{
    while (ln->in_flight < ln->cfg.permits && ln->queued > 0) {
        struct rec *r = rec_of(ln, ln->head_seq);
        while (r->state != REC_QUEUED)
            r = rec_of(ln, ++ln->head_seq);
        ln->head_seq++;
        start_batch(p, ln, r);
    }
}

static void advance_low(struct lane *ln)
{
    while (ln->low_seq < ln->next_seq && rec_terminal(rec_of(ln, ln->low_seq)))
        ln->low_seq++;
}

static void report(struct offload_pipeline *p, const struct rec *r)
{
    if (!p->cfg.complete)
        return;
    struct offload_completion c = {
        .token = {.pipeline = p->id, .generation = p->gen, .lane = r->lane, .seq = r->seq},
        .cookie = r->cookie,
        .num_blocks = r->nblocks,
        .bytes = rec_bytes(p, r),
        .start_time = r->start_time,
        .end_time = r->end_time,
        .result = r->result,
    };
    p->in_callback = true;
    p->cfg.complete(p->cfg.complete_arg, &c);
    p->in_callback = false;
}

/* Drains r (in flight, work done) at time t: outcome, counters, handoff, then the report. */
static void drain_batch(struct offload_pipeline *p, struct lane *ln, struct rec *r, int64_t t)
{
    int result = r->work_result ? r->work_result : (r->inject_fail ? -EIO : 0);
    ln->in_flight--;
    r->end_time = t;
    r->result = result;
    if (result == 0) {
        r->state = REC_COMPLETED;
        ln->st.completed++;
        ln->st.blocks += r->nblocks;
        ln->st.bytes += rec_bytes(p, r);
    } else {
        r->state = REC_FAILED;
        ln->st.failed++;
    }
    advance_low(ln);
    try_start(p, ln); /* the permit passes to the successor, which starts at t (== p->now) */
    report(p, r);
}

/*
 * Runs the pipeline to quiescence at virtual time T: drains, in completion order, every batch
 * whose transfer completes at or before T (waiting for its work if `blocking`), starting
 * successors as permits pass. Moves p->now to T when nothing due is left.
 * Returns: batches drained (>= 0); -ESHUTDOWN; -ETIMEDOUT. State is consistent on error.
 */
static int run_until(struct offload_pipeline *p, int64_t T, bool blocking, int64_t guard)
{
    struct offload_bw_completion buf[PULL_BATCH];
    int drained = 0;
    for (;;) {
        ingest(p);
        if (is_closing(p))
            return -ESHUTDOWN;
        if (p->pend_len > 0) {
            struct pend *pe = &p->pend[p->pend_head];
            struct lane *ln = &p->lanes[pe->lane];
            struct rec *r = rec_of(ln, pe->seq);
            if (!r->work_done) {
                /* A poll does not wait, but it does the work still queued itself (adaptive
                 * hand-off): no worker may ever be woken for it, and a caller that only polls
                 * would otherwise see the batch never drain. */
                if (!blocking) {
                    if (take_back(p) > 0)
                        continue;
                    return drained;
                }
                int rc = owner_wait(p, guard, false);
                if (rc < 0)
                    return rc;
                continue;
            }
            int64_t t = pe->time;
            p->pend_head = (p->pend_head + 1) & (p->pend_cap - 1);
            p->pend_len--;
            drain_batch(p, ln, r, t);
            drained++;
            continue;
        }
        uint32_t best = OFFLOAD_NUM_LANES;
        int64_t d = OFFLOAD_NEVER;
        for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
            if (!p->lanes[l].bw)
                continue;
            int64_t dl = offload_bw_next_deadline(p->lanes[l].bw);
            if (dl < d) {
                d = dl;
                best = l;
            }
        }
        if (best == OFFLOAD_NUM_LANES || d > T)
            break;
        if (d > p->now)
            p->now = d;
        size_t cap = p->pend_cap < PULL_BATCH ? p->pend_cap : PULL_BATCH;
        size_t n = offload_bw_advance_to(p->lanes[best].bw, d, buf, cap);
        for (size_t i = 0; i < n; i++) {
            uint32_t at = (p->pend_head + p->pend_len) & (p->pend_cap - 1);
            p->pend[at].lane = best;
            p->pend[at].seq = buf[i].id;
            p->pend[at].time = buf[i].time;
            p->pend_len++;
        }
    }
    if (T > p->now)
        p->now = T;
    return drained;
}

/* Owner-side shutdown: wait for the workers to hand back every batch, then fail the rest. */
static int do_shutdown(struct offload_pipeline *p)
{
    p->closed = true;
    if (p->pool && p->outstanding > 0) {
        int64_t guard = base_monotonic_ns() + p->cfg.settle_timeout_ns;
        while (ingest(p), p->outstanding > 0) {
            int rc = owner_wait(p, guard, true);
            if (rc == -ETIMEDOUT)
                return rc;
        }
    }
    ingest(p);
    p->pend_len = 0;
    p->pend_head = 0;
    p->starting = 0;
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        struct lane *ln = &p->lanes[l];
        if (!ln->bw)
            continue;
        for (uint64_t s = ln->low_seq; s < ln->next_seq; s++) {
            struct rec *r = rec_of(ln, s);
            if (rec_terminal(r))
                continue;
            if (r->state == REC_QUEUED)
                ln->queued--;
            else
                ln->in_flight--;
            r->state = REC_FAILED;
            r->result = -ESHUTDOWN;
            r->end_time = p->now;
            ln->st.failed++;
            report(p, r);
        }
        ln->head_seq = ln->next_seq;
        advance_low(ln);
        offload_bw_clear(ln->bw);
    }
    return 0;
}

static int check_token(const struct offload_pipeline *p, const struct offload_token *t)
{
    if (!t)
        return -EINVAL;
    if (t->pipeline != p->id)
        return -EXDEV;
    if (t->generation != p->gen)
        return -ESTALE;
    if (t->lane >= OFFLOAD_NUM_LANES)
        return -EINVAL;
    if (t->seq >= p->lanes[t->lane].next_seq)
        return -ERANGE;
    return 0;
}

static bool token_drained(const struct offload_pipeline *p, const struct offload_token *t)
{
    const struct lane *ln = &p->lanes[t->lane];
    return t->seq < ln->low_seq || rec_terminal(rec_of(ln, t->seq));
}

static uint64_t lane_drained(const struct lane *ln)
{
    return ln->st.completed + ln->st.failed + ln->st.cancelled;
}

/* Entry check of the calls that may block or drain. */
static int enter_owner(struct offload_pipeline *p)
{
    if (p->in_callback)
        return -EDEADLK;
    if (is_closing(p))
        return -ESHUTDOWN;
    return 0;
}

/*
 * The common part of settle and settle_after: quiesce at the current time, check the condition,
 * then wait for the workers to acknowledge every started batch (stability).
 */
static int settle_wait(struct offload_pipeline *p, const struct offload_token *t,
                       const uint64_t *targets)
{
    int64_t guard = wait_guard(p);
    p->stats.settles++;
    p->waited = false;
    int rc = run_until(p, p->now, true, guard);
    if (rc >= 0) {
        bool met = true;
        if (t)
            met = token_drained(p, t);
        for (uint32_t l = 0; targets && l < OFFLOAD_NUM_LANES; l++)
            if (lane_drained(&p->lanes[l]) < targets[l])
                met = false;
        rc = met ? 0 : -EAGAIN;
        while (rc == 0) {
            ingest(p);
            if (p->starting == 0)
                break;
            int w = owner_wait(p, guard, false);
            if (w < 0)
                rc = w;
        }
    }
    if (p->waited)
        p->stats.settle_waits++;
    return rc;
}

/* ---- public: configuration and lifetime ---------------------------------------------------- */

const char *offload_lane_name(enum offload_lane lane)
{
    switch (lane) {
    case OFFLOAD_LANE_G1_G2: return "G1->G2";
    case OFFLOAD_LANE_G2_G3: return "G2->G3";
    case OFFLOAD_LANE_G3_G2: return "G3->G2";
    case OFFLOAD_LANE_G2_G1: return "G2->G1";
    }
    return "?";
}

const char *offload_batch_state_name(enum offload_batch_state s)
{
    switch (s) {
    case OFFLOAD_BATCH_QUEUED: return "queued";
    case OFFLOAD_BATCH_STARTING: return "starting";
    case OFFLOAD_BATCH_IN_FLIGHT: return "in_flight";
    case OFFLOAD_BATCH_COMPLETED: return "completed";
    case OFFLOAD_BATCH_FAILED: return "failed";
    case OFFLOAD_BATCH_CANCELLED: return "cancelled";
    case OFFLOAD_BATCH_DRAINED: return "drained";
    }
    return "?";
}

void offload_config_default(struct offload_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->block_bytes = offload_block_bytes(131072, 16);
    static const struct offload_lane_config lanes[OFFLOAD_NUM_LANES] = {
        [OFFLOAD_LANE_G1_G2] = {.permits = 2,
                                .max_blocks = 32,
                                .capacity = 256,
                                .bandwidth = INT64_C(14000000000)},
        [OFFLOAD_LANE_G2_G3] = {.permits = 1,
                                .max_blocks = 32,
                                .capacity = 256,
                                .bandwidth = INT64_C(7000000000)},
        [OFFLOAD_LANE_G3_G2] = {.permits = 1,
                                .max_blocks = 32,
                                .capacity = 256,
                                .bandwidth = INT64_C(7000000000)},
        [OFFLOAD_LANE_G2_G1] = {.permits = 2,
                                .max_blocks = 32,
                                .capacity = 256,
                                .bandwidth = INT64_C(14000000000)},
    };
    memcpy(cfg->lanes, lanes, sizeof lanes);
    cfg->settle_timeout_ns = NS_PER_SEC;
}

static void pipeline_free(struct offload_pipeline *p)
{
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        free(p->lanes[l].recs);
        free(p->lanes[l].block_store);
        offload_bw_destroy(p->lanes[l].bw);
    }
    free(p->pend);
    free(p);
}

static int validate_config(const struct offload_config *cfg, uint32_t *total_permits)
{
    uint64_t total = 0;
    if (!(cfg->fail_rate >= 0.0 && cfg->fail_rate <= 1.0) || cfg->settle_timeout_ns <= 0)
        return -EINVAL;
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        const struct offload_lane_config *lc = &cfg->lanes[l];
        if (lc->permits == 0)
            continue;
        uint64_t bytes;
        if (lc->max_blocks == 0 || lc->capacity == 0 || lc->capacity > MAX_CAPACITY ||
            lc->permits > MAX_CAPACITY ||
            __builtin_mul_overflow((uint64_t)lc->max_blocks, cfg->block_bytes, &bytes))
            return -EINVAL;
        total += lc->permits;
    }
    if (total == 0 || total > MAX_CAPACITY)
        return -EINVAL;
    *total_permits = (uint32_t)total;
    return 0;
}

int offload_pipeline_create(const struct offload_config *cfg, struct offload_pool *pool,
                            struct offload_pipeline **out)
{
    uint32_t total;
    if (!cfg || !out)
        return -EINVAL;
    int rc = validate_config(cfg, &total);
    if (rc)
        return rc;
    struct offload_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->cfg = *cfg;
    p->total_permits = total;
    p->id = atomic_fetch_add(&next_pipeline_id, 1);
    atomic_init(&p->close_req, false);
    p->ctx.work = cfg->work;
    p->ctx.work_arg = cfg->work_arg;
    p->ctx.block_bytes = cfg->block_bytes;
    p->ctx.pipeline = p->id;
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        struct lane *ln = &p->lanes[l];
        ln->cfg = cfg->lanes[l];
        if (ln->cfg.permits == 0)
            continue;
        uint32_t cap = round_pow2(ln->cfg.capacity);
        ln->cfg.capacity = cap;
        ln->mask = cap - 1;
        ln->recs = calloc(cap, sizeof *ln->recs);
        ln->block_store = calloc((size_t)cap * ln->cfg.max_blocks, sizeof *ln->block_store);
        if (!ln->recs || !ln->block_store || offload_bw_create(ln->cfg.bandwidth, &ln->bw) ||
            offload_bw_reserve(ln->bw, ln->cfg.permits)) {
            pipeline_free(p);
            return -ENOMEM;
        }
        for (uint32_t i = 0; i < cap; i++) {
            ln->recs[i].ctx = &p->ctx;
            ln->recs[i].blocks = ln->block_store + (size_t)i * ln->cfg.max_blocks;
            ln->recs[i].lane = l;
        }
        ln->st.permits = ln->cfg.permits;
    }
    p->pend_cap = round_pow2(total);
    p->pend = calloc(p->pend_cap, sizeof *p->pend);
    if (!p->pend) {
        pipeline_free(p);
        return -ENOMEM;
    }
    if (pool) {
        p->pool = pool;
        rc = offload__pool_attach(pool, p);
        if (rc) {
            pipeline_free(p);
            return rc;
        }
    }
    *out = p;
    return 0;
}

int offload_pipeline_destroy(struct offload_pipeline *p)
{
    if (!p)
        return 0;
    if (p->in_callback)
        return -EDEADLK;
    int rc = do_shutdown(p);
    if (rc)
        return rc;
    if (p->pool)
        offload__pool_detach(p->pool, p);
    pipeline_free(p);
    return 0;
}

/* ---- public: batches ----------------------------------------------------------------------- */

int offload_enqueue(struct offload_pipeline *p, enum offload_lane lane,
                    const offload_block_id *blocks, uint32_t n, uint64_t cookie,
                    struct offload_token *token)
{
    if ((unsigned)lane >= OFFLOAD_NUM_LANES)
        return -EINVAL;
    if (is_closing(p))
        return -ESHUTDOWN;
    struct lane *ln = &p->lanes[lane];
    if (ln->cfg.permits == 0)
        return -ENODEV;
    if (!blocks || n == 0 || n > ln->cfg.max_blocks)
        return -EINVAL;
    if (ln->next_seq - ln->low_seq > ln->mask)
        return -EAGAIN;
    uint64_t seq = ln->next_seq++;
    struct rec *r = rec_of(ln, seq);
    r->seq = seq;
    r->cookie = cookie;
    r->nblocks = n;
    memcpy(r->blocks, blocks, n * sizeof *blocks);
    r->state = REC_QUEUED;
    r->work_done = false;
    r->inject_fail = false;
    r->work_result = 0;
    r->result = 0;
    r->start_time = -1;
    r->end_time = -1;
    ln->queued++;
    ln->st.enqueued++;
    if (token) {
        token->pipeline = p->id;
        token->generation = p->gen;
        token->lane = (uint32_t)lane;
        token->seq = seq;
    }
    try_start(p, ln);
    return 0;
}

int offload_cancel(struct offload_pipeline *p, const struct offload_token *token)
{
    int rc = check_token(p, token);
    if (rc)
        return rc;
    if (is_closing(p))
        return -ESHUTDOWN;
    struct lane *ln = &p->lanes[token->lane];
    if (token_drained(p, token))
        return -EALREADY;
    struct rec *r = rec_of(ln, token->seq);
    if (r->state != REC_QUEUED)
        return -EBUSY;
    r->state = REC_CANCELLED;
    r->result = -ECANCELED;
    r->end_time = p->now;
    ln->queued--;
    ln->st.cancelled++;
    advance_low(ln);
    return 0;
}

/* ---- public: time and settlement ----------------------------------------------------------- */

int offload_advance_to(struct offload_pipeline *p, int64_t now)
{
    int rc = enter_owner(p);
    if (rc)
        return rc;
    return run_until(p, now > p->now ? now : p->now, true, wait_guard(p));
}

int offload_poll(struct offload_pipeline *p)
{
    int rc = enter_owner(p);
    if (rc)
        return rc;
    return run_until(p, p->now, false, 0);
}

int offload_settle(struct offload_pipeline *p, const struct offload_token *token)
{
    int rc = check_token(p, token);
    if (rc)
        return rc;
    rc = enter_owner(p);
    if (rc)
        return rc;
    return settle_wait(p, token, NULL);
}

void offload_checkpoint(const struct offload_pipeline *p, struct offload_checkpoint *cp)
{
    cp->pipeline = p->id;
    cp->generation = p->gen;
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++)
        cp->drained[l] = lane_drained(&p->lanes[l]);
}

int offload_settle_after(struct offload_pipeline *p, const struct offload_checkpoint *cp,
                         const uint64_t delta[OFFLOAD_NUM_LANES])
{
    if (!cp)
        return -EINVAL;
    if (cp->pipeline != p->id)
        return -EXDEV;
    if (cp->generation != p->gen)
        return -ESTALE;
    uint64_t targets[OFFLOAD_NUM_LANES];
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        uint64_t d = delta ? delta[l] : 0;
        if (__builtin_add_overflow(cp->drained[l], d, &targets[l]) ||
            targets[l] > p->lanes[l].st.enqueued)
            return -EOVERFLOW;
    }
    int rc = enter_owner(p);
    if (rc)
        return rc;
    return settle_wait(p, NULL, targets);
}

int offload_shutdown(struct offload_pipeline *p)
{
    if (p->in_callback)
        return -EDEADLK;
    return do_shutdown(p);
}

void offload_shutdown_any(struct offload_pipeline *p)
{
    atomic_store(&p->close_req, true);
    if (p->slot) {
        atomic_fetch_add(&p->slot->owner_wake_seq, 1);
        base_futex_wake(&p->slot->owner_wake_seq, INT_MAX);
    }
}

int offload_reset(struct offload_pipeline *p)
{
    if (p->in_callback)
        return -EDEADLK;
    int rc = do_shutdown(p);
    if (rc)
        return rc;
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        struct lane *ln = &p->lanes[l];
        if (!ln->bw)
            continue;
        for (uint32_t i = 0; i <= ln->mask; i++)
            ln->recs[i].state = REC_FREE;
        ln->next_seq = ln->low_seq = ln->head_seq = 0;
        ln->queued = ln->in_flight = 0;
        memset(&ln->st, 0, sizeof ln->st);
        ln->st.permits = ln->cfg.permits;
        offload_bw_clear(ln->bw);
    }
    p->gen++;
    p->closed = false;
    atomic_store(&p->close_req, false);
    return 0;
}

/* ---- public: state ------------------------------------------------------------------------- */

int offload_token_state(const struct offload_pipeline *p, const struct offload_token *token)
{
    int rc = check_token(p, token);
    if (rc)
        return rc;
    const struct lane *ln = &p->lanes[token->lane];
    const struct rec *r = rec_of(ln, token->seq);
    if (r->seq != token->seq)
        return OFFLOAD_BATCH_DRAINED;
    switch ((enum rec_state)r->state) {
    case REC_QUEUED: return OFFLOAD_BATCH_QUEUED;
    case REC_STARTING: return OFFLOAD_BATCH_STARTING;
    case REC_IN_FLIGHT: return OFFLOAD_BATCH_IN_FLIGHT;
    case REC_COMPLETED: return OFFLOAD_BATCH_COMPLETED;
    case REC_FAILED: return OFFLOAD_BATCH_FAILED;
    case REC_CANCELLED: return OFFLOAD_BATCH_CANCELLED;
    case REC_FREE: break;
    }
    return OFFLOAD_BATCH_DRAINED;
}

int offload_lane_stats(const struct offload_pipeline *p, enum offload_lane lane,
                       struct offload_lane_stats *out)
{
    if ((unsigned)lane >= OFFLOAD_NUM_LANES || !out)
        return -EINVAL;
    const struct lane *ln = &p->lanes[lane];
    *out = ln->st;
    out->queued = ln->queued;
    out->in_flight = ln->in_flight;
    out->permits = ln->cfg.permits;
    return 0;
}

void offload_stats(const struct offload_pipeline *p, struct offload_stats *out) { *out = p->stats; }

int64_t offload_next_deadline(const struct offload_pipeline *p)
{
    if (p->pend_len > 0)
        return p->now;
    int64_t d = OFFLOAD_NEVER;
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        if (!p->lanes[l].bw)
            continue;
        int64_t dl = offload_bw_next_deadline(p->lanes[l].bw);
        if (dl < d)
            d = dl;
    }
    return d;
}

int offload_lane_past_the_clock(const struct offload_pipeline *p)
{
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++)
        if (p->lanes[l].bw && offload_bw_next_deadline(p->lanes[l].bw) == OFFLOAD_NEVER - 1)
            return (int)l;
    return -1;
}

bool offload_is_stable(const struct offload_pipeline *p)
{
    if (p->starting > 0 || p->pend_len > 0 || offload_next_deadline(p) <= p->now)
        return false;
    for (uint32_t l = 0; l < OFFLOAD_NUM_LANES; l++) {
        const struct lane *ln = &p->lanes[l];
        if (ln->queued > 0 && ln->in_flight < ln->cfg.permits)
            return false;
    }
    return true;
}

int64_t offload_now(const struct offload_pipeline *p) { return p->now; }
uint64_t offload_pipeline_id(const struct offload_pipeline *p) { return p->id; }
uint32_t offload_generation(const struct offload_pipeline *p) { return p->gen; }
bool offload_is_shut_down(const struct offload_pipeline *p) { return p->closed; }
