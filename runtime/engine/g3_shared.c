/*
 * g3_shared.c - a G3 shared by all engines (engine.h): the coordinator's side (the LRU merged
 * from the engines' epoch logs at boundaries, registry writes and reclamation) and the hash
 * sets the engines keep of their own writes. The engine's side is in tiers.c.
 */
#include "runtime/engine/tiers_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- hash sets (an engine's own writes of the epoch) ---------------------------------------- */

/* Places h (absent) in key/stamp of capacity cap, stamped epoch. */
static void hset_place(kvpool_hash *key, uint32_t *stamp, uint32_t cap, uint32_t epoch,
                       kvpool_hash h)
{
    uint32_t i = engine__hset_slot(h, cap);
    while (stamp[i] == epoch)
        i = (i + 1) & (cap - 1);
    key[i] = h;
    stamp[i] = epoch;
}

/* Returns 1 (added), 0 (already there) or -ENOMEM. */
int engine__hset_add(struct hset *s, kvpool_hash h)
{
    if (engine__hset_contains(s, h))
        return 0;
    if ((uint64_t)(s->n + 1) * 2 > s->cap) {
        uint32_t nc = s->cap ? s->cap * 2 : 64;
        kvpool_hash *nk = malloc(nc * sizeof *nk);
        uint32_t *ns = calloc(nc, sizeof *ns);
        if (!nk || !ns || nc < s->cap) {
            free(nk);
            free(ns);
            return -ENOMEM;
        }
        uint32_t epoch = s->epoch ? s->epoch : 1;
        for (uint32_t i = 0; i < s->cap; i++)
            if (s->stamp[i] == s->epoch)
                hset_place(nk, ns, nc, epoch, s->key[i]);
        free(s->key);
        free(s->stamp);
        s->key = nk;
        s->stamp = ns;
        s->cap = nc;
        s->epoch = epoch;
    }
    hset_place(s->key, s->stamp, s->cap, s->epoch, h);
    s->n++;
    return 1;
}

void engine__hset_clear(struct hset *s)
{
    s->n = 0;
    if (++s->epoch == 0) { /* wrapped: stale stamps could match again */
        if (s->cap)
            memset(s->stamp, 0, s->cap * sizeof *s->stamp);
        s->epoch = 1;
    }
}

void engine__hset_free(struct hset *s)
{
    free(s->key);
    free(s->stamp);
}

/* ---- shared G3: the coordinator side ------------------------------------------------------- */

/* Registry removals (evictions and the engines' closed entries) between two reclaim passes. */
#define G3_RECLAIM_EVERY 4096

int kvsim_g3_shared_create(uint32_t capacity, uint32_t num_engines, int64_t vtime0,
                           struct kvsim_g3_shared **out)
{
    *out = NULL;
    if (capacity == 0 || capacity > OFFLOAD_TIER_MAX_CAPACITY || num_engines == 0 ||
        num_engines == UINT32_MAX)
        return -EINVAL;
    if (vtime0 == KVPOOL_VTIME_NEVER)
        vtime0 = KVPOOL_VTIME_NEVER - 1; /* an empty replay: nothing is ever written */
    struct kvsim_g3_shared *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    g->num_engines = num_engines;
    g->b = vtime0;
    g->slots = calloc(num_engines, sizeof *g->slots);
    int rc = g->slots ? 0 : -ENOMEM;
    if (rc == 0)
        rc = offload_tier_create(capacity, &g->lru);
    if (rc == 0)
        rc = kvpool_registry_create(num_engines + 1, capacity, &g->reg);
    for (uint32_t e = 0; rc == 0 && e < num_engines; e++)
        rc = kvpool_registry_writer_create(g->reg, vtime0, &g->slots[e].w);
    if (rc == 0)
        rc = kvpool_registry_writer_create(g->reg, vtime0, &g->w);
    if (rc) {
        kvsim_g3_shared_destroy(g);
        return rc;
    }
    g->st.capacity = capacity;
    *out = g;
    return 0;
}

void kvsim_g3_shared_destroy(struct kvsim_g3_shared *g)
{
    if (!g)
        return;
    kvpool_registry_destroy(g->reg);
    for (uint32_t e = 0; g->slots && e < g->num_engines; e++) {
        free(g->slots[e].log);
        engine__hset_free(&g->slots[e].own);
    }
    free(g->slots);
    offload_tier_destroy(g->lru);
    free(g->merged);
    free(g->evicted);
    free(g->admitted);
    free(g);
}

/* Merge order: virtual time, then engine, then the engine's own order. */
static int g3_rec_cmp(const void *a, const void *b)
{
    const struct g3_rec *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    if (x->engine != y->engine)
        return x->engine < y->engine ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static int push_hash(kvpool_hash **a, uint32_t *n, uint32_t *cap, kvpool_hash h)
{
    if (engine__grow((void **)a, cap, *n + 1, sizeof **a))
        return -ENOMEM;
    (*a)[(*n)++] = h;
    return 0;
}

/* Keeps the entries of a[0..*n) whose residency in the LRU is `resident`. */
static void keep_resident(const struct offload_tier *lru, kvpool_hash *a, uint32_t *n,
                          bool resident)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < *n; i++)
        if (offload_tier_contains(lru, a[i]) == resident)
            a[k++] = a[i];
    *n = k;
}

int kvsim_g3_shared_boundary(struct kvsim_g3_shared *g, int64_t b)
{
    bool last = b == INT64_MAX;
    if (!last && b <= g->b)
        return 0; /* a boundary at the same instant: the epoch goes on */
    /* 1. Every engine's log, in (time, engine, sequence) order. */
    uint64_t total = 0;
    for (uint32_t e = 0; e < g->num_engines; e++)
        total += g->slots[e].nlog;
    if (total > UINT32_MAX / 2 ||
        engine__grow((void **)&g->merged, &g->capmerged, (uint32_t)total, sizeof *g->merged))
        return -ENOMEM;
    g->nmerged = 0;
    for (uint32_t e = 0; e < g->num_engines; e++) {
        struct g3_slot *sl = &g->slots[e];
        for (uint32_t i = 0; i < sl->nlog; i++) {
            struct g3_rec r = sl->log[i];
            r.engine = e;
            r.seq = i;
            g->merged[g->nmerged++] = r;
        }
        sl->nlog = 0;
        engine__hset_clear(&sl->own);
    }
    if (g->nmerged) /* qsort's base must not be NULL, even for 0 elements */
        qsort(g->merged, g->nmerged, sizeof *g->merged, g3_rec_cmp);
    /* 2. Into the LRU. */
    g->nev = g->nad = 0;
    for (uint32_t i = 0; i < g->nmerged; i++) {
        const struct g3_rec *r = &g->merged[i];
        if (r->kind == G3_TOUCH) {
            g->st.touches++;
            offload_tier_touch(g->lru, r->h);
            continue;
        }
        bool evicted = false;
        uint64_t victim = 0;
        int rc = offload_tier_insert(g->lru, r->h, &evicted, &victim);
        if (evicted) {
            g->st.evictions++;
            if (push_hash(&g->evicted, &g->nev, &g->capev, victim))
                return -ENOMEM;
        }
        if (rc == 0) {
            g->st.inserts++;
            if (push_hash(&g->admitted, &g->nad, &g->capad, r->h))
                return -ENOMEM;
        } else if (rc == -EEXIST) {
            g->st.rewrites++; /* another engine wrote it before, or in this epoch */
            offload_tier_touch(g->lru, r->h);
        } else {
            return rc; /* -ENOSPC: cannot happen, nothing is pinned */
        }
    }
    if (last)
        return 0;
    /* 3. The registry as of b holds exactly what the LRU holds now: the coordinator's entries
     * of blocks evicted (and not admitted again) end at b, blocks admitted get one from b (the
     * registry skips blocks this writer has live already, and removals of blocks it never
     * registered). The engines closed their own entries at b when they published it. */
    keep_resident(g->lru, g->evicted, &g->nev, false);
    keep_resident(g->lru, g->admitted, &g->nad, true);
    int64_t n;
    if (g->nev &&
        (n = kvpool_registry_remove_batch(g->w, KVPOOL_TIER_G3, g->evicted, g->nev, b)) < 0)
        return (int)n;
    if (g->nad &&
        (n = kvpool_registry_register_batch(g->w, KVPOOL_TIER_G3, g->admitted, g->nad, b)) < 0)
        return (int)n;
    int rc = kvpool_registry_publish(g->w, b);
    if (rc)
        return rc;
    /* Every engine published b at the end of its advance: the engines of the next epoch read
     * as of b, which no writer can change any more. */
    if (kvpool_registry_min_watermark_acquire(g->reg) < b)
        return -EUCLEAN;
    g->b = b;
    g->unreclaimed += total + g->nev;
    if (g->unreclaimed >= G3_RECLAIM_EVERY) {
        /* Nobody asks about a time before b any more. -ENOMEM: try again next time. */
        int64_t r = kvpool_registry_reclaim(g->reg, b);
        if (r >= 0)
            g->unreclaimed = 0;
    }
    return 0;
}

void kvsim_g3_shared_stats(const struct kvsim_g3_shared *g, struct kvsim_g3_shared_stats *out)
{
    *out = g->st;
    out->resident = offload_tier_size(g->lru);
}
