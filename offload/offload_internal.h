/*
 * offload_internal.h - the pipeline's layout, shared by its owner side (pipeline.c: lanes,
 * permits, successor handoff, settlement, the inline executor) and the thread-pool executor
 * (pool.c). Private to offload/; the thread rules are those of offload.h and pipeline.c's
 * header comment.
 */
#ifndef KVSIM_OFFLOAD_INTERNAL_H
#define KVSIM_OFFLOAD_INTERNAL_H

#include <ck_ring.h>
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "kvpool/base.h"
#include "offload/offload.h"

/*
 * ThreadSanitizer cannot see ck_ring's synchronisation (inline-asm loads, stores and fences), so
 * the ring wrapper below states the happens-before edges it provides, at the points where they
 * hold (see spsc_push / spsc_pop). Elsewhere the pipeline uses C11 atomics only. GCC says
 * __SANITIZE_THREAD__, clang __has_feature(thread_sanitizer).
 */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OFFLOAD__TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define OFFLOAD__TSAN 1
#endif
#if defined(OFFLOAD__TSAN)
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

static inline bool is_pow2(uint32_t x) { return x != 0 && (x & (x - 1)) == 0; }

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
    _Atomic bool popping; /* a consumer is in spsc_pop_shared */
};

static inline int spsc_init(struct spsc *q, uint32_t size)
{
    q->buf = calloc(size, sizeof *q->buf);
    if (!q->buf)
        return -ENOMEM;
    ck_ring_init(&q->ring, size);
    atomic_init(&q->popping, false);
    return 0;
}

/* Context: the ring's single producer. Returns false if full. */
static inline bool spsc_push(struct spsc *q, void *v)
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
static inline bool spsc_pop(struct spsc *q, void **v)
{
    if (ck_ring_size(&q->ring) == 0)
        return false;
    HB_ACQUIRE(&q->hb_prod);
    bool ok = ck_ring_dequeue_spsc(&q->ring, q->buf, v);
    HB_RELEASE(&q->hb_cons);
    return ok;
}

/*
 * Context: one of the consumers of a ring that has two (a submission ring: its worker, and its
 * owner taking a batch back). A C11 exchange on q->popping admits one consumer at a time, so
 * ck's single-consumer dequeue stays correct and ThreadSanitizer sees each hand-over from one
 * consumer to the next. A consumer that finds the other one popping does not wait (that one may
 * be preempted): it returns false, and the entries go to the other. Returns true with *v set,
 * or false (empty, or busy). Never mix with spsc_pop on the same ring.
 */
static inline bool spsc_pop_shared(struct spsc *q, void **v)
{
    if (ck_ring_size(&q->ring) == 0 ||
        atomic_exchange_explicit(&q->popping, true, memory_order_acquire))
        return false;
    bool ok = spsc_pop(q, v);
    atomic_store_explicit(&q->popping, false, memory_order_release);
    return ok;
}

/* Pushes, yielding while the ring is full (cannot happen when capacities were checked). */
static inline void spsc_push_wait(struct spsc *q, void *v)
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
    uint32_t work_ns; /* how long the work took on the worker (saturated) */
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
    struct spsc *sub; /* [threads]: owner -> worker (set once, before the first ACTIVE); the
                       * owner may pop from it too (spsc_pop_shared), taking a batch back */
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
    uint32_t work_ns;     /* running mean of the work's wall time per batch (adaptive hand-off) */
    bool closed;          /* offload_shutdown ran (until reset) */
    bool in_callback;
    bool waited; /* the current settle blocked */
    _Atomic bool close_req;
    struct offload_pool *pool;
    struct slot *slot;
    struct offload_stats stats;
};

static inline struct rec *rec_of(const struct lane *ln, uint64_t seq)
{
    return &ln->recs[seq & ln->mask];
}

static inline bool rec_terminal(const struct rec *r)
{
    return r->state == REC_COMPLETED || r->state == REC_FAILED || r->state == REC_CANCELLED;
}

static inline uint64_t rec_bytes(const struct offload_pipeline *p, const struct rec *r)
{
    return (uint64_t)r->nblocks * p->cfg.block_bytes;
}

static inline int normalize_result(int rc) { return rc > 0 ? -EIO : rc; }

static inline int run_work(const struct rec *r, uint32_t worker)
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

/* ---- pool.c, for the owner side ------------------------------------------------------------- */

/* Wakes worker w if it sleeps (after the owner pushed it work). Context: the owner. Returns
 * true if it issued a futex wake. */
bool offload__wake_worker(struct worker *w);
/* Attaches pipeline p to the pool: its slot and rings. Context: p's creator. Returns 0,
 * -ENOSPC (max_pipelines attached) or -ENOMEM. */
int offload__pool_attach(struct offload_pool *pool, struct offload_pipeline *p);
/* Detaches p (every batch of it drained). Context: p's owner. */
void offload__pool_detach(struct offload_pool *pool, struct offload_pipeline *p);

#endif /* KVSIM_OFFLOAD_INTERNAL_H */
