/*
 * tiers_internal.h - what the engine's tier policy (tiers.c) and the shared G3 (g3_shared.c)
 * share: the shared G3's layout and the hash set of an engine's own G3 writes. Private to
 * runtime/engine/; the thread rules are those of tiers.h.
 */
#ifndef KVSIM_TIERS_INTERNAL_H
#define KVSIM_TIERS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/engine/tiers.h"

/* ---- shared G3: its data (the functions are at the end of the file) ------------------------- */

/*
 * A growable set of hashes, emptied in O(1): a slot is occupied iff its stamp is the set's
 * current epoch (open addressing, linear probing, load <= 1/2; never deletes one entry).
 */
struct hset {
    kvpool_hash *key;
    uint32_t *stamp;
    uint32_t cap; /* 0 or a power of two */
    uint32_t n, epoch;
};

enum g3_rec_kind { G3_WRITE, G3_TOUCH };

/* One entry of an engine's epoch log. */
struct g3_rec {
    int64_t t;
    kvpool_hash h;
    uint32_t engine, seq; /* filled by the merge: the order of equal times */
    uint32_t kind;        /* enum g3_rec_kind */
};

/* One engine's side of the shared G3: written by its owner during an epoch, read and cleared by
 * the coordinator at the boundary (the epoch barrier orders the two). */
struct g3_slot {
    struct kvpool_registry_writer *w;
    struct g3_rec *log; /* this epoch's writes and touches, in virtual-time order */
    uint32_t nlog, caplog;
    struct hset own; /* hashes this engine wrote to G3 since the boundary */
};

struct kvsim_g3_shared {
    struct kvpool_registry *reg;
    struct kvpool_registry_writer *w; /* the coordinator's */
    struct offload_tier *lru;         /* the residency and its LRU order */
    struct g3_slot *slots;
    uint32_t num_engines;
    int64_t b; /* the last boundary merged: engines read the registry as of b */
    /* merge scratch */
    struct g3_rec *merged;
    uint32_t nmerged, capmerged;
    kvpool_hash *evicted, *admitted;
    uint32_t nev, capev, nad, capad;
    uint64_t unreclaimed; /* registry removals since the last reclaim */
    struct kvsim_g3_shared_stats st;
};

/* Makes room for need elements of size elem in *p (capacity *cap). Returns 0 or -ENOMEM. */
int engine__grow(void **p, uint32_t *cap, uint32_t need, size_t elem);

static inline uint32_t engine__hset_slot(kvpool_hash h, uint32_t cap)
{
    uint64_t x = h ^ (h >> 31);
    x *= UINT64_C(0x9e3779b97f4a7c15);
    return (uint32_t)(x >> 32) & (cap - 1);
}

static inline bool engine__hset_contains(const struct hset *s, kvpool_hash h)
{
    if (s->n == 0)
        return false;
    for (uint32_t i = engine__hset_slot(h, s->cap);; i = (i + 1) & (s->cap - 1)) {
        if (s->stamp[i] != s->epoch)
            return false;
        if (s->key[i] == h)
            return true;
    }
}
/* Adds h. Returns 1 (added), 0 (already there) or -ENOMEM. */
int engine__hset_add(struct hset *s, kvpool_hash h);
/* Empties the set in O(1) (amortized). */
void engine__hset_clear(struct hset *s);
void engine__hset_free(struct hset *s);

#endif /* KVSIM_TIERS_INTERNAL_H */
