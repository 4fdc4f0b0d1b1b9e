/*
 * pipeline.c - lanes, permits, successor handoff, settlement, and the two executors.
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
 * the owner waits, never the results.
 *
 * The pool. Workers scan the attached slots' submission rings (one ck_ring per (slot, worker),
 * owner produces, worker consumes) and answer on the completion rings (worker produces, owner
 * consumes). Both sides spin a bounded number of times, then sleep on a futex word guarded by a
 * "waiting" flag (an eventcount): waiter sets waiting, reads the word, re-checks, sleeps on the
 * read value; the waker publishes, increments the word, and wakes if waiting is set. All these
 * words are seq_cst C11 atomics, so the Dekker pattern holds and ThreadSanitizer sees it.
 */
#include "offload/offload.h"

#include <ck_ring.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * ThreadSanitizer cannot see ck_ring's synchronisation (inline-asm loads, stores and fences), so
 * the ring wrapper below states the happens-before edges it provides, at the points where they
 * hold (see spsc_push / spsc_pop). Elsewhere this file uses C11 atomics only.
 */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define HB_RELEASE(addr) __tsan_release((void *)(addr))
#define HB_ACQUIRE(addr) __tsan_acquire((void *)(addr))
#else
#define HB_RELEASE(addr) ((void)(addr))
#define HB_ACQUIRE(addr) ((void)(addr))
#endif

#define NS_PER_SEC    INT64_C(1000000000)
#define PULL_BATCH    32u
#define MAX_CAPACITY  (1u << 24)
#define MAX_THREADS   256u
#define MAX_PIPELINES 4096u
#define MAX_RING_SIZE (1u << 20)
#define INLINE_WORKER UINT32_MAX
#define CACHE_LINE    64

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec;
}

/* Sleeps while *word == val, at most timeout_ns (< 0: no limit). Spurious returns are fine. */
static void futex_wait_u32(_Atomic uint32_t *word, uint32_t val, int64_t timeout_ns)
{
    struct timespec ts, *tsp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = (time_t)(timeout_ns / NS_PER_SEC);
        ts.tv_nsec = (long)(timeout_ns % NS_PER_SEC);
        tsp = &ts;
    }
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, tsp, NULL, 0);
}

static void futex_wake_u32(_Atomic uint32_t *word, int n)
{
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static bool is_pow2(uint32_t x) { return x != 0 && (x & (x - 1)) == 0; }

static uint32_t round_pow2(uint32_t x)
{
    uint32_t r = 1;
    while (r < x)
        r <<= 1;
    return r;
}

/* ---- single-producer single-consumer ring (ck_ring) ---------------------------------------- */

/*
 * One ck_ring of pointers plus two dummy addresses for ThreadSanitizer. The producer's writes
 * before a push happen-before the consumer's reads after the matching pop (hb_prod); the
 * consumer's read of a slot happens-before the producer's reuse of that slot (hb_cons).
 *
 * Why the annotations are placed as they are: a push writes the slot, releases hb_prod, then
 * commits (publishes p_tail). A pop first sees p_tail advanced (ck_ring_size), which happened
 * after that release in real time, so acquiring hb_prod before reading the slot captures it.
 * For reuse: a pop releases hb_cons after its c_head store; the producer acquires hb_cons after
 * observing space. The slot it reuses was read `size` pushes earlier; since our rings are never
 * full (each holds at most 2 x permits < size - 1 entries, checked at attach), that read was
 * followed by at least one later complete pop whose release precedes the c_head value the
 * producer observed, so the edge is captured.
 */
struct spsc {
    ck_ring_t ring;
    ck_ring_buffer_t *buf;
    char hb_prod;
    char hb_cons;
};

static int spsc_init(struct spsc *q, uint32_t size)
{
    q->buf = calloc(size, sizeof *q->buf);
    if (!q->buf)
        return -ENOMEM;
    ck_ring_init(&q->ring, size);
    return 0;
}

/* Context: the ring's single producer. Returns false if full. */
static bool spsc_push(struct spsc *q, void *v)
{
    ck_ring_buffer_t *slot = ck_ring_enqueue_reserve_spsc(&q->ring, q->buf);
    if (!slot)
        return false;
    HB_ACQUIRE(&q->hb_cons);
    slot->value = v;
    HB_RELEASE(&q->hb_prod);
    ck_ring_enqueue_commit_spsc(&q->ring);
    return true;
}

/* Context: the ring's single consumer. Returns false if empty. */
static bool spsc_pop(struct spsc *q, void **v)
{
    if (ck_ring_size(&q->ring) == 0)
        return false;
    HB_ACQUIRE(&q->hb_prod);
    bool ok = ck_ring_dequeue_spsc(&q->ring, q->buf, v);
    HB_RELEASE(&q->hb_cons);
    return ok;
}

/* Pushes, yielding while the ring is full (cannot happen when capacities were checked). */
static void spsc_push_wait(struct spsc *q, void *v)
{
    while (!spsc_push(q, v))
        sched_yield();
}

/* ---- records, lanes, pipelines ------------------------------------------------------------- */

enum rec_state {
    REC_FREE = 0,
    REC_QUEUED,
    REC_STARTING,
    REC_IN_FLIGHT,
    REC_COMPLETED,
    REC_FAILED,
    REC_CANCELLED,
};

/* What an executor needs besides the record; immutable for the pipeline's life. */
struct exec_ctx {
    offload_work_fn work;
    void *work_arg;
    uint64_t block_bytes;
    uint64_t pipeline;
};

/*
 * A batch. While it is at a pool worker (pushed, "done" not yet taken in) the owner does not
 * write the first group of fields; the worker writes only work_result, before it reports
 * "done". Records are 8-byte aligned: the completion rings tag "done" in bit 0 of the pointer.
 */
struct rec {
    /* read by the executor */
    const struct exec_ctx *ctx;
    offload_block_id *blocks; /* lane storage: max_blocks entries */
    uint64_t seq;
    uint64_t cookie;
    uint32_t nblocks;
    uint32_t lane;
    /* written by the executor before "done" */
    int work_result;
    /* owner only */
    uint8_t state;    /* enum rec_state */
    bool work_done;   /* the executor has finished the work */
    bool inject_fail; /* the seeded decision, taken at start */
    uint32_t worker;  /* pool worker it went to */
    int result;
    int64_t start_time;
    int64_t end_time;
};

struct lane {
    struct offload_lane_config cfg;
    uint32_t mask; /* window size - 1 */
    struct rec *recs;
    offload_block_id *block_store;
    struct offload_bw *bw;
    uint64_t next_seq; /* next sequence number to issue */
    uint64_t low_seq;  /* lowest undrained (== next_seq when all drained) */
    uint64_t head_seq; /* every batch below it has started or was cancelled */
    uint32_t queued;
    uint32_t in_flight;
    struct offload_lane_stats st; /* counters; queued/in_flight/permits filled on read */
};

/* A batch whose transfer completed in virtual time, waiting for its work (completion order). */
struct pend {
    uint32_t lane;
    uint64_t seq;
    int64_t time;
};

enum { SLOT_FREE = 0, SLOT_CLAIMED, SLOT_ACTIVE };

/* A pool's attachment point for one pipeline; pool-owned, so wake-ups never touch freed memory. */
struct slot {
    _Alignas(CACHE_LINE) _Atomic int state;
    _Atomic uint32_t owner_wake_seq; /* futex word of the attached owner */
    _Atomic uint32_t owner_waiting;  /* the owner is (about to be) asleep on it */
    struct spsc *sub; /* [threads]: owner -> worker (set once, before the first ACTIVE) */
    struct spsc *cmp; /* [threads]: worker -> owner */
};

struct worker {
    _Alignas(CACHE_LINE) _Atomic uint32_t wake_seq; /* futex word */
    _Atomic uint32_t waiting;
    _Atomic uint32_t load; /* batches handed to it and not finished (a balancing hint) */
    uint32_t index;
    struct offload_pool *pool;
    pthread_t thread;
};

struct offload_pool {
    struct offload_pool_config cfg;
    uint32_t worker_spin;
    uint32_t owner_spin;
    struct worker *workers;
    struct slot *slots;
    _Atomic uint32_t slot_hi; /* slots [0, slot_hi) have ever been claimed */
    _Atomic uint32_t attached;
    _Atomic bool shutdown;
    _Atomic bool stop;
};

struct offload_pipeline {
    struct offload_config cfg;
    struct exec_ctx ctx;
    uint64_t id;
    uint32_t gen;
    int64_t now;
    struct lane lanes[OFFLOAD_NUM_LANES];
    struct pend *pend; /* ring of pend_cap (power of two >= total permits) */
    uint32_t pend_cap, pend_head, pend_len;
    uint32_t total_permits;
    uint32_t starting;    /* records in STARTING */
    uint32_t outstanding; /* records at workers ("done" not yet taken in) */
    uint32_t rr;          /* worker choice rotation */
    bool closed;          /* offload_shutdown ran (until reset) */
    bool in_callback;
    bool waited; /* the current settle blocked */
    _Atomic bool close_req;
    struct offload_pool *pool;
    struct slot *slot;
    struct offload_stats stats;
};

static _Atomic uint64_t next_pipeline_id = 1;

static struct rec *rec_of(const struct lane *ln, uint64_t seq) { return &ln->recs[seq & ln->mask]; }

static bool rec_terminal(const struct rec *r)
{
    return r->state == REC_COMPLETED || r->state == REC_FAILED || r->state == REC_CANCELLED;
}

static uint64_t rec_bytes(const struct offload_pipeline *p, const struct rec *r)
{
    return (uint64_t)r->nblocks * p->cfg.block_bytes;
}

static int normalize_result(int rc) { return rc > 0 ? -EIO : rc; }

static int run_work(const struct rec *r, uint32_t worker)
{
    const struct exec_ctx *c = r->ctx;
    if (!c->work)
        return 0;
    struct offload_work w = {
        .pipeline = c->pipeline,
        .lane = (enum offload_lane)r->lane,
        .num_blocks = r->nblocks,
        .seq = r->seq,
        .cookie = r->cookie,
        .bytes = (uint64_t)r->nblocks * c->block_bytes,
        .blocks = r->blocks,
        .worker = worker,
    };
    return normalize_result(c->work(c->work_arg, &w));
}

/* ---- the pool ------------------------------------------------------------------------------ */

static void pool_yield(struct offload_pool *pool, enum offload_yield_point pt)
{
    if (pool->cfg.debug_yield)
        pool->cfg.debug_yield(pool->cfg.debug_yield_arg, pt);
}

/* Context: a worker. Ordering: seq_cst increment after the ring push, then the waiting flag. */
static void wake_owner(struct slot *sl)
{
    atomic_fetch_add(&sl->owner_wake_seq, 1);
    if (atomic_load(&sl->owner_waiting))
        futex_wake_u32(&sl->owner_wake_seq, INT_MAX);
}

static void wake_worker(struct worker *w)
{
    atomic_fetch_add(&w->wake_seq, 1);
    if (atomic_load(&w->waiting))
        futex_wake_u32(&w->wake_seq, 1);
}

/* Context: worker w. Runs one batch: acknowledge, work, report. Never touches r after "done". */
static void run_item(struct offload_pool *pool, struct worker *w, struct slot *sl, struct rec *r)
{
    struct spsc *out = &sl->cmp[w->index];
    pool_yield(pool, OFFLOAD_YIELD_WORKER_TAKEN);
    spsc_push_wait(out, r); /* "started" */
    wake_owner(sl);
    int rc = atomic_load(&pool->shutdown) ? -ESHUTDOWN : run_work(r, w->index);
    r->work_result = rc;
    atomic_fetch_sub_explicit(&w->load, 1, memory_order_relaxed);
    pool_yield(pool, OFFLOAD_YIELD_WORKER_DONE);
    spsc_push_wait(out, (void *)((uintptr_t)r | 1u)); /* "done" */
    wake_owner(sl);
}

static bool worker_has_work(struct offload_pool *pool, uint32_t wi)
{
    uint32_t hi = atomic_load_explicit(&pool->slot_hi, memory_order_acquire);
    for (uint32_t s = 0; s < hi; s++) {
        struct slot *sl = &pool->slots[s];
        if (atomic_load_explicit(&sl->state, memory_order_acquire) == SLOT_ACTIVE &&
            ck_ring_size(&sl->sub[wi].ring) > 0)
            return true;
    }
    return false;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct offload_pool *pool = w->pool;
    uint32_t idle = 0;
    for (;;) {
        bool found = false;
        uint32_t hi = atomic_load_explicit(&pool->slot_hi, memory_order_acquire);
        for (uint32_t s = 0; s < hi; s++) {
            struct slot *sl = &pool->slots[s];
            if (atomic_load_explicit(&sl->state, memory_order_acquire) != SLOT_ACTIVE)
                continue;
            void *v;
            if (spsc_pop(&sl->sub[w->index], &v)) {
                run_item(pool, w, sl, v);
                found = true;
            }
        }
        if (found) {
            idle = 0;
            continue;
        }
        if (atomic_load(&pool->stop))
            break;
        if (idle < pool->worker_spin) {
            idle++;
            cpu_relax();
            continue;
        }
        atomic_store(&w->waiting, 1);
        uint32_t seq = atomic_load(&w->wake_seq);
        if (!worker_has_work(pool, w->index) && !atomic_load(&pool->stop))
            futex_wait_u32(&w->wake_seq, seq, -1);
        atomic_store(&w->waiting, 0);
        idle = 0;
    }
    return NULL;
}

void offload_pool_config_default(struct offload_pool_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->threads = 2;
    cfg->max_pipelines = 32;
    cfg->ring_size = 256;
    cfg->spin = 200;
}

static void pool_free(struct offload_pool *pool)
{
    if (pool->slots) {
        for (uint32_t s = 0; s < pool->cfg.max_pipelines; s++) {
            struct slot *sl = &pool->slots[s];
            for (uint32_t w = 0; w < pool->cfg.threads; w++) {
                if (sl->sub)
                    free(sl->sub[w].buf);
                if (sl->cmp)
                    free(sl->cmp[w].buf);
            }
            free(sl->sub);
            free(sl->cmp);
        }
    }
    free(pool->slots);
    free(pool->workers);
    free(pool);
}

static void stop_workers(struct offload_pool *pool, uint32_t started)
{
    atomic_store(&pool->stop, true);
    for (uint32_t i = 0; i < started; i++) {
        atomic_fetch_add(&pool->workers[i].wake_seq, 1);
        futex_wake_u32(&pool->workers[i].wake_seq, INT_MAX);
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(pool->workers[i].thread, NULL);
}

int offload_pool_create(const struct offload_pool_config *cfg, struct offload_pool **out)
{
    if (!cfg || !out || cfg->threads == 0 || cfg->threads > MAX_THREADS ||
        cfg->max_pipelines == 0 || cfg->max_pipelines > MAX_PIPELINES || !is_pow2(cfg->ring_size) ||
        cfg->ring_size < 4 || cfg->ring_size > MAX_RING_SIZE)
        return -EINVAL;
    struct offload_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return -ENOMEM;
    pool->cfg = *cfg;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1)
        ncpu = 1;
    /* Never more spinning threads than cores: workers spin only if they leave a core free. */
    pool->worker_spin = (long)cfg->threads < ncpu ? cfg->spin : 0;
    pool->owner_spin = ncpu > 1 ? cfg->spin : 0;
    pool->workers = aligned_alloc(CACHE_LINE, cfg->threads * sizeof *pool->workers);
    pool->slots = aligned_alloc(CACHE_LINE, cfg->max_pipelines * sizeof *pool->slots);
    if (!pool->workers || !pool->slots) {
        pool_free(pool);
        return -ENOMEM;
    }
    memset(pool->slots, 0, cfg->max_pipelines * sizeof *pool->slots);
    for (uint32_t s = 0; s < cfg->max_pipelines; s++) {
        atomic_init(&pool->slots[s].state, SLOT_FREE);
        atomic_init(&pool->slots[s].owner_wake_seq, 0);
        atomic_init(&pool->slots[s].owner_waiting, 0);
    }
    atomic_init(&pool->slot_hi, 0);
    atomic_init(&pool->attached, 0);
    atomic_init(&pool->shutdown, false);
    atomic_init(&pool->stop, false);
    for (uint32_t i = 0; i < cfg->threads; i++) {
        struct worker *w = &pool->workers[i];
        memset(w, 0, sizeof *w);
        atomic_init(&w->wake_seq, 0);
        atomic_init(&w->waiting, 0);
        atomic_init(&w->load, 0);
        w->index = i;
        w->pool = pool;
    }
    for (uint32_t i = 0; i < cfg->threads; i++) {
        if (pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i])) {
            stop_workers(pool, i);
            pool_free(pool);
            return -EAGAIN;
        }
    }
    *out = pool;
    return 0;
}

void offload_pool_shutdown_any(struct offload_pool *pool)
{
    atomic_store(&pool->shutdown, true);
    uint32_t hi = atomic_load(&pool->slot_hi);
    for (uint32_t s = 0; s < hi; s++) {
        atomic_fetch_add(&pool->slots[s].owner_wake_seq, 1);
        futex_wake_u32(&pool->slots[s].owner_wake_seq, INT_MAX);
    }
    for (uint32_t i = 0; i < pool->cfg.threads; i++)
        wake_worker(&pool->workers[i]);
}

int offload_pool_destroy(struct offload_pool *pool)
{
    if (!pool)
        return 0;
    if (atomic_load(&pool->attached) > 0)
        return -EBUSY;
    stop_workers(pool, pool->cfg.threads);
    pool_free(pool);
    return 0;
}

uint32_t offload_pool_threads(const struct offload_pool *pool) { return pool->cfg.threads; }

/* Claims a slot for p and makes it visible to the workers. */
static int pool_attach(struct offload_pool *pool, struct offload_pipeline *p)
{
    if (2 * p->total_permits >= pool->cfg.ring_size)
        return -EINVAL;
    if (atomic_load(&pool->shutdown))
        return -ESHUTDOWN;
    for (uint32_t s = 0; s < pool->cfg.max_pipelines; s++) {
        struct slot *sl = &pool->slots[s];
        int expect = SLOT_FREE;
        if (!atomic_compare_exchange_strong(&sl->state, &expect, SLOT_CLAIMED))
            continue;
        if (!sl->sub) { /* first use of this slot: its rings live until the pool dies */
            struct spsc *sub = calloc(pool->cfg.threads, sizeof *sub);
            struct spsc *cmp = calloc(pool->cfg.threads, sizeof *cmp);
            int rc = (sub && cmp) ? 0 : -ENOMEM;
            for (uint32_t w = 0; rc == 0 && w < pool->cfg.threads; w++) {
                rc = spsc_init(&sub[w], pool->cfg.ring_size);
                if (rc == 0)
                    rc = spsc_init(&cmp[w], pool->cfg.ring_size);
            }
            if (rc) {
                for (uint32_t w = 0; w < pool->cfg.threads; w++) {
                    if (sub)
                        free(sub[w].buf);
                    if (cmp)
                        free(cmp[w].buf);
                }
                free(sub);
                free(cmp);
                atomic_store(&sl->state, SLOT_FREE);
                return rc;
            }
            sl->sub = sub;
            sl->cmp = cmp;
        }
        p->slot = sl;
        atomic_fetch_add(&pool->attached, 1);
        uint32_t hi = atomic_load(&pool->slot_hi);
        while (hi < s + 1 && !atomic_compare_exchange_weak(&pool->slot_hi, &hi, s + 1)) {
        }
        atomic_store_explicit(&sl->state, SLOT_ACTIVE, memory_order_release);
        return 0;
    }
    return -ENOSPC;
}

static void pool_detach(struct offload_pool *pool, struct offload_pipeline *p)
{
    atomic_store_explicit(&p->slot->state, SLOT_FREE, memory_order_release);
    atomic_fetch_sub(&pool->attached, 1);
    p->slot = NULL;
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

static uint64_t mix64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* The seeded, thread-independent failure decision for one batch. */
static bool inject_failure(const struct offload_pipeline *p, uint32_t lane, uint64_t seq)
{
    double rate = p->cfg.fail_rate;
    if (rate <= 0.0)
        return false;
    if (rate >= 1.0)
        return true;
    uint64_t h = mix64(mix64(mix64(p->cfg.seed ^ ((uint64_t)p->gen << 32)) ^ lane) ^ seq);
    return (double)(h >> 11) * 0x1.0p-53 < rate;
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
 * Waits for worker reports: bounded spin, then an eventcount sleep. Returns 0 when something
 * may have changed (the caller re-checks its condition), -ESHUTDOWN (closing, unless
 * ignore_close), -ETIMEDOUT (guard passed).
 */
static int owner_wait(struct offload_pipeline *p, int64_t guard, bool ignore_close)
{
    if (!p->pool)
        return -EDEADLK; /* inline: nothing to wait for (unreachable) */
    struct slot *sl = p->slot;
    p->waited = true;
    for (uint32_t i = 0; i < p->pool->owner_spin; i++) {
        cpu_relax();
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
    int64_t left = guard - wall_ns();
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
    futex_wait_u32(&sl->owner_wake_seq, seq, left);
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
    wake_worker(&pool->workers[best]);
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
                if (!blocking)
                    return drained;
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
        int64_t guard = wall_ns() + p->cfg.settle_timeout_ns;
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
    int64_t guard = wall_ns() + p->cfg.settle_timeout_ns;
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
        rc = pool_attach(pool, p);
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
        pool_detach(p->pool, p);
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
    return run_until(p, now > p->now ? now : p->now, true, wall_ns() + p->cfg.settle_timeout_ns);
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
        futex_wake_u32(&p->slot->owner_wake_seq, INT_MAX);
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
