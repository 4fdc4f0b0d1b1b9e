/*
 * registry.c - the shared block registry (registry.h): a liburcu lock-free hash table of
 * (hash, tier, writer, [registered_at, removed_at)) entries, read under QSBR RCU.
 *
 * Layout. One cds_lfht (QSBR flavour, auto-resize, accounting) keyed by (hash, tier); every
 * entry is its own node, added with cds_lfht_add, so the entries of one key (other writers,
 * earlier intervals) are lfht duplicates. A lookup's match callback applies the whole predicate
 * (present at vtime, or live for a writer), so one cds_lfht_lookup walks the duplicates and
 * stops at the first that qualifies: one library call per check. Entry fields are immutable
 * once published, except removed_at, an atomic stamped once by the owning writer.
 *
 * Writers. A writer's calls are serialised by its owner. Its watermark lives on a cache line of
 * its own (readers poll it); the rest of the writer (its last virtual time and the tail of its
 * removal FIFO) is owner-side. Removed entries go, in removal order (so in removed_at order), to
 * the writer's removal FIFO, a urcu wait-free queue the reclaimer drains from the head: reclaim
 * costs what it deletes, never a walk of the table.
 *
 * Reclamation. kvpool_registry_reclaim() pops, per writer, the entries removed at <= horizon,
 * cds_lfht_del()s them, chains them, and hands the chain (in a small batch record allocated
 * before the first deletion) to one call_rcu callback that frees it after a grace period. One
 * reclaimer at a time (an atomic flag; the loser returns -EBUSY).
 *
 * ThreadSanitizer. liburcu 0.13 synchronises with inline asm and uninstrumented .so code, so
 * TSan cannot see its happens-before edges. KVSIM_HB_RELEASE/ACQUIRE re-create them at the
 * publication points: a node before cds_lfht_add / in the match callback, a removed entry
 * before its FIFO enqueue / after the reclaimer finds it at the FIFO head, and a grace-period
 * token released at every quiescent state, offline and unregister and acquired first thing in
 * the call_rcu callback (coarse but sound: the callback runs after every online thread passed a
 * quiescent state). Our own flags and watermarks are C11 atomics, which TSan models directly.
 */
#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* liburcu's flavour-prefixed API (urcu_qsbr_*, cds_lfht_new_flavor): flavour header first. */
#include <urcu/urcu-qsbr.h>
#include <urcu/rculfhash.h>
#include <urcu/wfcqueue.h>

#include "kvpool/kvpool.h"
#include "kvpool/base.h"

/* ---- ThreadSanitizer happens-before annotations --------------------------------------------- */

#if defined(__SANITIZE_THREAD__)
#define KVSIM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVSIM_TSAN 1
#endif
#endif

#ifdef KVSIM_TSAN
#include <sanitizer/tsan_interface.h>
/* Everything this thread did before is visible to a thread that later KVSIM_HB_ACQUIREs addr. */
#define KVSIM_HB_RELEASE(addr) __tsan_release((void *)(addr))
#define KVSIM_HB_ACQUIRE(addr) __tsan_acquire((void *)(addr))
#else
#define KVSIM_HB_RELEASE(addr) ((void)(addr))
#define KVSIM_HB_ACQUIRE(addr) ((void)(addr))
#endif

/* Stands for "a grace period elapsed" in TSan's model (see the file comment). */
static char registry_gp_token;

/* ---- types ---------------------------------------------------------------------------------- */

#define CACHE_LINE 64

struct reg_entry {
    struct cds_lfht_node node;   /* in reg->ht; first, so container_of is an identity */
    kvpool_hash hash;            /* immutable once published */
    int64_t registered_at;       /* immutable once published */
    _Atomic int64_t removed_at;  /* KVPOOL_VTIME_NEVER until the owning writer stamps it */
    uint32_t writer;             /* index of the owning writer; immutable */
    uint8_t tier;                /* enum kvpool_tier; immutable */
    union {                      /* after removal: */
        struct cds_wfcq_node q;  /* in the writer's removal FIFO */
        struct reg_entry *chain; /* after deletion: next entry of a free batch */
    } link;
}; /* 56 bytes: one 64-byte allocation (one cache line with jemalloc's size classes) */
_Static_assert(sizeof(struct reg_entry) <= 64, "a registry entry should fit a cache line");

/* The entries one reclaim pass deleted, freed by one call_rcu callback. */
struct free_batch {
    struct rcu_head rcu;
    struct reg_entry *first; /* chained through link.chain */
};

/* A lookup: the entries of one (hash, tier) are lfht duplicates, and the match callback applies
 * the whole predicate, so cds_lfht_lookup walks them and stops at the first that qualifies. */
struct reg_query {
    kvpool_hash hash;
    uint8_t tier;
    int64_t vtime;   /* present_match: present at this virtual time */
    uint32_t writer; /* live_match: this writer's live entry */
};

struct kvpool_registry_writer {
    /* Read by every reader (acquire), written by the owner (release): its own cache line. */
    alignas(CACHE_LINE) _Atomic int64_t watermark;
    /* Owner-side. */
    alignas(CACHE_LINE) struct kvpool_registry *reg;
    int64_t last_vtime;           /* vtime of the last call (monotonic check) */
    uint32_t id;                  /* index in reg->writers */
    struct cds_wfcq_tail rq_tail; /* removal FIFO tail: the owner enqueues */
    /* Reclaimer-side. */
    alignas(CACHE_LINE) struct __cds_wfcq_head rq_head; /* removal FIFO head: reclaim dequeues */
};

struct kvpool_registry {
    struct cds_lfht *ht;                    /* the entries */
    struct kvpool_registry_writer *writers; /* max_writers slots, cache-line aligned */
    uint32_t max_writers;
    _Atomic uint32_t num_writers; /* slots [0, num_writers) are initialised (release-stored) */
    pthread_mutex_t create_lock;  /* serialises writer creation */
    atomic_flag reclaiming;       /* one reclaimer at a time */
};

/* ---- helpers -------------------------------------------------------------------------------- */

const char *kvpool_tier_name(enum kvpool_tier tier)
{
    switch (tier) {
    case KVPOOL_TIER_G1: return "G1";
    case KVPOOL_TIER_G2: return "G2";
    case KVPOOL_TIER_G3: return "G3";
    }
    return "?";
}

static bool tier_valid(enum kvpool_tier tier) { return (unsigned)tier < KVPOOL_NUM_TIERS; }

/* The lfht hash of a key: splitmix64's finaliser over hash and tier (tests use small hashes,
 * and lfht buckets by the low bits). */
static unsigned long key_hash(kvpool_hash hash, uint8_t tier)
{
    return (unsigned long)base_mix64(hash ^ ((uint64_t)tier + 1) * BASE_GOLDEN_GAMMA);
}

static struct reg_entry *node_entry(struct cds_lfht_node *node)
{
    return caa_container_of(node, struct reg_entry, node);
}

/* Match callbacks. The acquire pairs with the release before cds_lfht_add: the entry's fields
 * were written before its publication. */
static int present_match(struct cds_lfht_node *node, const void *key)
{
    KVSIM_HB_ACQUIRE(node);
    const struct reg_entry *e = node_entry(node);
    const struct reg_query *q = key;
    /* Relaxed: the caller's acquire of a watermark >= vtime orders the stamps it needs. */
    return e->hash == q->hash && e->tier == q->tier && e->registered_at <= q->vtime &&
           q->vtime < atomic_load_explicit(&e->removed_at, memory_order_relaxed);
}

static int live_match(struct cds_lfht_node *node, const void *key)
{
    KVSIM_HB_ACQUIRE(node);
    const struct reg_entry *e = node_entry(node);
    const struct reg_query *q = key;
    /* Only the owner stamps its entries' removed_at: relaxed reads its own stores. */
    return e->hash == q->hash && e->tier == q->tier && e->writer == q->writer &&
           atomic_load_explicit(&e->removed_at, memory_order_relaxed) == KVPOOL_VTIME_NEVER;
}

/* The first entry satisfying match for q, or NULL. Context: online. One library call: lookup
 * walks the duplicates itself (and no iteration macro, whose container_of(NULL) at the end
 * UBSan rejects). */
static struct reg_entry *lookup(struct cds_lfht *ht, cds_lfht_match_fct match,
                                const struct reg_query *q)
{
    struct cds_lfht_iter it;
    cds_lfht_lookup(ht, key_hash(q->hash, q->tier), match, q, &it);
    struct cds_lfht_node *node = cds_lfht_iter_get_node(&it);
    return node ? node_entry(node) : NULL;
}

/* The live entry writer id has for (hash, tier), or NULL. Context: the writer's owner, online. */
static struct reg_entry *find_live(struct cds_lfht *ht, kvpool_hash hash, uint8_t tier, uint32_t id)
{
    struct reg_query q = {.hash = hash, .tier = tier, .writer = id};
    return lookup(ht, live_match, &q);
}

static void free_chain(struct reg_entry *e)
{
    while (e) {
        struct reg_entry *next = e->link.chain;
        free(e);
        e = next;
    }
}

/* call_rcu callback: frees a batch of deleted entries. Runs on liburcu's call_rcu thread. */
static void free_batch_rcu(struct rcu_head *head)
{
    KVSIM_HB_ACQUIRE(&registry_gp_token); /* every reader's last look at these entries */
    struct free_batch *b = caa_container_of(head, struct free_batch, rcu);
    free_chain(b->first);
    free(b);
}

/* ---- threads -------------------------------------------------------------------------------- */

void kvpool_registry_thread_register(void) { urcu_qsbr_register_thread(); }

void kvpool_registry_thread_unregister(void)
{
    KVSIM_HB_RELEASE(&registry_gp_token);
    urcu_qsbr_unregister_thread();
}

void kvpool_registry_thread_quiescent(void)
{
    KVSIM_HB_RELEASE(&registry_gp_token);
    urcu_qsbr_quiescent_state();
}

void kvpool_registry_thread_offline(void)
{
    KVSIM_HB_RELEASE(&registry_gp_token);
    urcu_qsbr_thread_offline();
}

void kvpool_registry_thread_online(void) { urcu_qsbr_thread_online(); }

void kvpool_registry_barrier(void)
{
    kvpool_registry_thread_offline();
    urcu_qsbr_barrier();
    kvpool_registry_thread_online();
}

/* ---- lifetime ------------------------------------------------------------------------------- */

int kvpool_registry_create(uint32_t max_writers, size_t expected_entries,
                           struct kvpool_registry **out)
{
    if (out)
        *out = NULL;
    if (max_writers == 0 || !out)
        return -EINVAL;

    /* lfht sizes must be powers of two; start at the expected size, within [16, 2^24]. */
    unsigned long init = 16;
    while (init < expected_entries && init < (1ul << 24))
        init <<= 1;

    struct kvpool_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return -ENOMEM;
    size_t wbytes = (size_t)max_writers * sizeof(struct kvpool_registry_writer);
    reg->writers = aligned_alloc(CACHE_LINE, wbytes);
    if (!reg->writers)
        goto fail_writers;
    memset(reg->writers, 0, wbytes);
    for (uint32_t i = 0; i < max_writers; i++)
        atomic_init(&reg->writers[i].watermark, INT64_MIN);
    reg->max_writers = max_writers;
    atomic_init(&reg->num_writers, 0);
    atomic_flag_clear(&reg->reclaiming);
    if (pthread_mutex_init(&reg->create_lock, NULL) != 0)
        goto fail_lock;
    reg->ht = cds_lfht_new_flavor(init, init, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
                                  &urcu_qsbr_flavor, NULL);
    if (!reg->ht)
        goto fail_ht;
    *out = reg;
    return 0;

fail_ht:
    pthread_mutex_destroy(&reg->create_lock);
fail_lock:
    free(reg->writers);
fail_writers:
    free(reg);
    return -ENOMEM;
}

void kvpool_registry_destroy(struct kvpool_registry *reg)
{
    if (!reg)
        return;
    /* Empty the table: every entry, live or removed, leaves it and is freed after a grace
     * period. Writer FIFOs are abandoned, so link.chain may overwrite link.q. */
    struct reg_entry *dead = NULL;
    struct cds_lfht_iter it;
    struct cds_lfht_node *node;
    cds_lfht_for_each (reg->ht, &it, node) {
        KVSIM_HB_ACQUIRE(node);
        if (cds_lfht_del(reg->ht, node) == 0) {
            struct reg_entry *e = node_entry(node);
            e->link.chain = dead;
            dead = e;
        }
    }
    /* Offline from here: with AUTO_RESIZE, liburcu 0.13's cds_lfht_destroy flushes the resize
     * worker's queue, and a queued resize waits for a grace period, i.e. for this thread. The
     * table is empty, so it cannot fail (-EPERM is for a non-empty table). */
    kvpool_registry_thread_offline();
    int rc = cds_lfht_destroy(reg->ht, NULL);
    (void)rc;
    /* No reader is left, but lfht's resize worker is an RCU reader while it resizes and may
     * still hold a deleted node (newer liburcu queues the destroy behind it instead of waiting):
     * one grace period, then the entries can go. */
    urcu_qsbr_synchronize_rcu();
    KVSIM_HB_ACQUIRE(&registry_gp_token);
    free_chain(dead);
    urcu_qsbr_barrier(); /* every batch handed to call_rcu by reclaims is freed */
    kvpool_registry_thread_online();
    pthread_mutex_destroy(&reg->create_lock);
    free(reg->writers);
    free(reg);
}

/* ---- writers -------------------------------------------------------------------------------- */

int kvpool_registry_writer_create(struct kvpool_registry *reg, int64_t vtime,
                                  struct kvpool_registry_writer **out)
{
    if (!reg || !out || vtime == KVPOOL_VTIME_NEVER)
        return -EINVAL;
    pthread_mutex_lock(&reg->create_lock);
    uint32_t i = atomic_load_explicit(&reg->num_writers, memory_order_relaxed);
    if (i == reg->max_writers) {
        pthread_mutex_unlock(&reg->create_lock);
        return -ENOSPC;
    }
    struct kvpool_registry_writer *w = &reg->writers[i];
    w->reg = reg;
    w->id = i;
    w->last_vtime = vtime;
    __cds_wfcq_init(&w->rq_head, &w->rq_tail);
    atomic_store_explicit(&w->watermark, vtime, memory_order_relaxed);
    /* Publishes the slot (and its watermark) to min_watermark and reclaim. */
    atomic_store_explicit(&reg->num_writers, i + 1, memory_order_release);
    pthread_mutex_unlock(&reg->create_lock);
    *out = w;
    return 0;
}

/* The checks shared by register_batch and remove_batch. */
static int check_batch(const struct kvpool_registry_writer *w, enum kvpool_tier tier,
                       const kvpool_hash *hashes, size_t n, int64_t vtime)
{
    if (!w || !tier_valid(tier) || (!hashes && n > 0))
        return -EINVAL;
    if (vtime == KVPOOL_VTIME_NEVER || vtime < w->last_vtime ||
        vtime <= atomic_load_explicit(&w->watermark, memory_order_relaxed))
        return -EINVAL;
    return 0;
}

int64_t kvpool_registry_register_batch(struct kvpool_registry_writer *w, enum kvpool_tier tier,
                                       const kvpool_hash *hashes, size_t n, int64_t vtime)
{
    int rc = check_batch(w, tier, hashes, n, vtime);
    if (rc)
        return rc;
    /* Allocate every node first, so that -ENOMEM changes nothing. */
    struct reg_entry *fresh = NULL;
    for (size_t i = 0; i < n; i++) {
        struct reg_entry *e = malloc(sizeof *e);
        if (!e) {
            free_chain(fresh);
            return -ENOMEM;
        }
        e->link.chain = fresh;
        fresh = e;
    }
    w->last_vtime = vtime;

    struct cds_lfht *ht = w->reg->ht;
    int64_t added = 0;
    for (size_t i = 0; i < n; i++) {
        const kvpool_hash h = hashes[i];
        if (find_live(ht, h, (uint8_t)tier, w->id))
            continue; /* already live for this writer and tier (or repeated in this batch) */
        struct reg_entry *e = fresh;
        fresh = e->link.chain;
        cds_lfht_node_init(&e->node);
        e->hash = h;
        e->registered_at = vtime;
        atomic_init(&e->removed_at, KVPOOL_VTIME_NEVER);
        e->writer = w->id;
        e->tier = (uint8_t)tier;
        e->link.chain = NULL;
        KVSIM_HB_RELEASE(&e->node); /* pairs with the acquire in the match callbacks */
        /* lfht: full memory barrier before and after the atomic commit. */
        cds_lfht_add(ht, key_hash(h, e->tier), &e->node);
        added++;
    }
    free_chain(fresh); /* nodes of skipped hashes: never published */
    return added;
}

int64_t kvpool_registry_remove_batch(struct kvpool_registry_writer *w, enum kvpool_tier tier,
                                     const kvpool_hash *hashes, size_t n, int64_t vtime)
{
    int rc = check_batch(w, tier, hashes, n, vtime);
    if (rc)
        return rc;
    w->last_vtime = vtime;

    struct cds_lfht *ht = w->reg->ht;
    int64_t removed = 0;
    for (size_t i = 0; i < n; i++) {
        struct reg_entry *e = find_live(ht, hashes[i], (uint8_t)tier, w->id);
        if (!e)
            continue;
        /* Relaxed: readers that must see it get it through the watermark's release/acquire;
         * the reclaimer treats a stale NEVER as "not yet", which is safe. */
        atomic_store_explicit(&e->removed_at, vtime, memory_order_relaxed);
        cds_wfcq_node_init(&e->link.q);
        KVSIM_HB_RELEASE(&e->link.q); /* pairs with the acquire after dequeue in reclaim */
        cds_wfcq_enqueue(&w->rq_head, &w->rq_tail, &e->link.q);
        removed++;
    }
    return removed;
}

int kvpool_registry_publish(struct kvpool_registry_writer *w, int64_t vtime)
{
    if (!w || vtime < w->last_vtime)
        return -EINVAL;
    w->last_vtime = vtime;
    /* Release: every batch before this (lfht adds, removed_at stamps) happens-before any
     * acquire load that reads this value or a later one. */
    atomic_store_explicit(&w->watermark, vtime, memory_order_release);
    return 0;
}

int64_t kvpool_registry_watermark_acquire(const struct kvpool_registry_writer *w)
{
    return atomic_load_explicit(&w->watermark, memory_order_acquire);
}

int64_t kvpool_registry_min_watermark_acquire(const struct kvpool_registry *reg)
{
    uint32_t nw = atomic_load_explicit(&reg->num_writers, memory_order_acquire);
    int64_t min = KVPOOL_VTIME_NEVER;
    for (uint32_t i = 0; i < nw; i++) {
        int64_t v = atomic_load_explicit(&reg->writers[i].watermark, memory_order_acquire);
        if (v < min)
            min = v;
    }
    return min;
}

/* ---- readers -------------------------------------------------------------------------------- */

static bool contains(struct cds_lfht *ht, uint8_t tier, kvpool_hash hash, int64_t vtime)
{
    struct reg_query q = {.hash = hash, .tier = tier, .vtime = vtime};
    return lookup(ht, present_match, &q) != NULL;
}

bool kvpool_registry_contains_rcu(const struct kvpool_registry *reg, enum kvpool_tier tier,
                                  kvpool_hash hash, int64_t vtime)
{
    if (!tier_valid(tier))
        return false;
    return contains(reg->ht, (uint8_t)tier, hash, vtime);
}

int64_t kvpool_registry_presence_rcu(const struct kvpool_registry *reg, enum kvpool_tier tier,
                                     const kvpool_hash *hashes, size_t n, int64_t vtime,
                                     bool *present)
{
    if (!tier_valid(tier) || (n > 0 && (!hashes || !present)))
        return -EINVAL;
    int64_t count = 0;
    for (size_t i = 0; i < n; i++) {
        present[i] = contains(reg->ht, (uint8_t)tier, hashes[i], vtime);
        count += present[i];
    }
    return count;
}

size_t kvpool_registry_size_rcu(const struct kvpool_registry *reg)
{
    long before, after;
    unsigned long count;
    cds_lfht_count_nodes(reg->ht, &before, &count, &after);
    return count;
}

/* ---- reclamation ---------------------------------------------------------------------------- */

int64_t kvpool_registry_reclaim(struct kvpool_registry *reg, int64_t horizon)
{
    if (atomic_flag_test_and_set_explicit(&reg->reclaiming, memory_order_acquire))
        return -EBUSY;
    struct free_batch *batch = NULL;
    struct reg_entry *dead = NULL;
    int64_t count = 0;
    uint32_t nw = atomic_load_explicit(&reg->num_writers, memory_order_acquire);
    for (uint32_t i = 0; i < nw; i++) {
        struct kvpool_registry_writer *w = &reg->writers[i];
        for (;;) {
            /* We are the only dequeuer (the flag), as the __ API requires. Nonblocking: an
             * enqueue in progress ends this writer's turn instead of spinning on it. */
            struct cds_wfcq_node *q = __cds_wfcq_first_nonblocking(&w->rq_head, &w->rq_tail);
            if (!q || q == CDS_WFCQ_WOULDBLOCK)
                break;
            KVSIM_HB_ACQUIRE(q); /* the writer's enqueue: the entry and its stamp */
            struct reg_entry *e = caa_container_of(q, struct reg_entry, link.q);
            /* FIFO order is removal order, so removed_at order: stop at the first too recent. */
            if (atomic_load_explicit(&e->removed_at, memory_order_relaxed) > horizon)
                break;
            if (!batch && !(batch = malloc(sizeof *batch))) {
                atomic_flag_clear_explicit(&reg->reclaiming, memory_order_release);
                return -ENOMEM; /* before any deletion: nothing done */
            }
            if (__cds_wfcq_dequeue_nonblocking(&w->rq_head, &w->rq_tail) != q)
                break; /* CDS_WFCQ_WOULDBLOCK: its successor is being linked; next pass */
            /* Only reclaim and destroy delete, and each entry leaves its FIFO once: 0. */
            int rc = cds_lfht_del(reg->ht, &e->node);
            (void)rc;
            e->link.chain = dead;
            dead = e;
            count++;
        }
    }
    if (dead) {
        batch->first = dead;
        KVSIM_HB_RELEASE(&registry_gp_token); /* this thread's own accesses to the batch */
        urcu_qsbr_call_rcu(&batch->rcu, free_batch_rcu);
    } else {
        free(batch);
    }
    atomic_flag_clear_explicit(&reg->reclaiming, memory_order_release);
    return count;
}
