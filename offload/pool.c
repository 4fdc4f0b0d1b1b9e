/*
 * pool.c - the thread-pool executor (offload.h): worker threads that scan the attached
 * pipelines' submission rings, run the batches' work and answer on the completion rings.
 *
 * Workers scan the attached slots' submission rings (one ck_ring per (slot, worker), owner
 * produces, worker consumes; the owner consumes too when it takes a batch back, one consumer at
 * a time: spsc_pop_shared) and answer on the completion rings (worker produces, owner consumes).
 * Both sides spin a bounded number of times, then sleep on a futex word guarded by a "waiting"
 * flag (an eventcount): waiter sets waiting, reads the word, re-checks, sleeps on the read value;
 * the waker publishes, increments the word, and wakes if waiting is set. All these words are
 * seq_cst C11 atomics, so the Dekker pattern holds and ThreadSanitizer sees it. A worker is woken
 * for a batch only as the owner's hand-off decides (pipeline.c, dispatch).
 */
#include "offload/offload_internal.h"

#include <limits.h>
#include <pthread.h>
#include <string.h>

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
        base_futex_wake(&sl->owner_wake_seq, INT_MAX);
}

bool offload__wake_worker(struct worker *w)
{
    atomic_fetch_add(&w->wake_seq, 1);
    if (!atomic_load(&w->waiting))
        return false;
    base_futex_wake(&w->wake_seq, 1);
    return true;
}

static uint32_t elapsed_ns(int64_t t0)
{
    int64_t d = base_monotonic_ns() - t0;
    return d < 0 ? 0 : d > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

/* Context: worker w. Runs one batch: acknowledge, work, report. Never touches r after "done". */
static void run_item(struct offload_pool *pool, struct worker *w, struct slot *sl, struct rec *r)
{
    struct spsc *out = &sl->cmp[w->index];
    pool_yield(pool, OFFLOAD_YIELD_WORKER_TAKEN);
    spsc_push_wait(out, r); /* "started" */
    wake_owner(sl);
    int64_t t0 = base_monotonic_ns();
    int rc = atomic_load(&pool->shutdown) ? -ESHUTDOWN : run_work(r, w->index);
    r->work_result = rc;
    r->work_ns = elapsed_ns(t0);
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
            if (spsc_pop_shared(&sl->sub[w->index], &v)) {
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
            base_cpu_relax();
            continue;
        }
        atomic_store(&w->waiting, 1);
        uint32_t seq = atomic_load(&w->wake_seq);
        if (!worker_has_work(pool, w->index) && !atomic_load(&pool->stop))
            base_futex_wait(&w->wake_seq, seq, -1);
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
    cfg->wake_work_ns = 10000;
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
        base_futex_wake(&pool->workers[i].wake_seq, INT_MAX);
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
        base_futex_wake(&pool->slots[s].owner_wake_seq, INT_MAX);
    }
    for (uint32_t i = 0; i < pool->cfg.threads; i++)
        offload__wake_worker(&pool->workers[i]);
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
int offload__pool_attach(struct offload_pool *pool, struct offload_pipeline *p)
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

void offload__pool_detach(struct offload_pool *pool, struct offload_pipeline *p)
{
    atomic_store_explicit(&p->slot->state, SLOT_FREE, memory_order_release);
    atomic_fetch_sub(&pool->attached, 1);
    p->slot = NULL;
}
