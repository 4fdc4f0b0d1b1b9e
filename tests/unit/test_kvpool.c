/*
 * test_kvpool.c - the G1 block pool (kvpool.h) against its contract and vLLM v1's BlockPool /
 * KVCacheManager semantics (shared/reference/vllm-semantics.md sections 7-9).
 *
 * Suite kvpool: one test per rule - null block, free-queue order, lazy eviction, hashing,
 * duplicate hashes, lookup, prepare/commit and its capacity gates, usage, reset, transfer holds,
 * the ownership checker, deferred-free moves, caching off, late caching.
 * Suite kvpool_abort: a READY plan that is aborted or simply dropped leaves no trace (each
 * aspect in its own test, against control tests that commit the same plans), and stale or
 * misused plans are refused without effect.
 *
 * Every pool uses 16-token blocks. Token ids are small ranges (first, first+1, ...), so two
 * sequences share a block hash exactly when they share the same range for that block.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kvpool/kvpool.h"
#include "kvpool/kvpool_internal.h"

#include "common.h"

TestSuite(kvpool);
TestSuite(kvpool_abort);

enum { KP_BS = 16, KP_MAXB = 64, KP_MAXTOK = 1024, KP_EV_MAX = 32, KP_EV_HASHES = 8 };

/* ---- helpers --------------------------------------------------------------------------------- */

static struct kvpool *kp_pool(uint32_t num_blocks, bool caching, bool events, double watermark)
{
    struct kvpool_config cfg;
    kvpool_config_default(&cfg);
    cfg.num_blocks = num_blocks;
    cfg.block_size = KP_BS;
    cfg.enable_prefix_caching = caching;
    cfg.enable_kv_events = events;
    cfg.watermark = watermark;
    struct kvpool *pool = NULL;
    int rc = kvpool_create(&cfg, &pool);
    cr_assert_eq(rc, 0, "kvpool_create(num_blocks=%u) returned %d", num_blocks, rc);
    cr_assert_not_null(pool, "kvpool_create succeeded without a pool");
    return pool;
}

/* Appends the tokens first, first+1, ..., first+n-1. */
static void kp_append(struct kvpool *pool, struct kvpool_seq *seq, kvpool_token first, size_t n)
{
    kvpool_token buf[KP_MAXTOK];
    cr_assert(n <= KP_MAXTOK, "kp_append: %zu tokens is too many", n);
    for (size_t i = 0; i < n; i++)
        buf[i] = first + (kvpool_token)i;
    int rc = kvpool_seq_append_tokens(pool, seq, buf, n);
    cr_assert_eq(rc, 0, "kvpool_seq_append_tokens(%zu) returned %d", n, rc);
}

/* Attaches an unsalted sequence holding the tokens first .. first+n-1. */
static void kp_seq(struct kvpool *pool, struct kvpool_seq *seq, uint64_t id, kvpool_token first,
                   size_t n)
{
    int rc = kvpool_seq_init(pool, seq, id, NULL, 0);
    cr_assert_eq(rc, 0, "kvpool_seq_init(%" PRIu64 ") returned %d", id, rc);
    if (n)
        kp_append(pool, seq, first, n);
}

/* Frees the sequence's blocks (if any) and detaches it. */
static void kp_done(struct kvpool *pool, struct kvpool_seq *seq)
{
    uint64_t id = seq->id;
    kvpool_free(pool, seq);
    int rc = kvpool_seq_fini(pool, seq);
    cr_assert_eq(rc, 0, "kvpool_seq_fini(%" PRIu64 ") after kvpool_free returned %d", id, rc);
}

static void kp_assert_blocks(const struct kvpool_seq *seq, const kvpool_block_id *want, uint32_t n,
                             const char *what)
{
    kvsim_test_assert_ids(seq->blocks, seq->num_blocks, want, n, what);
}

/* Asserts the free queue reads want[0..n) front to back and the free count agrees. */
static void kp_assert_fq(const struct kvpool *pool, const kvpool_block_id *want, uint32_t n,
                         const char *what)
{
    kvpool_block_id got[KP_MAXB];
    uint32_t len = kvpool_free_queue_snapshot(pool, got, KP_MAXB);
    cr_assert(len <= KP_MAXB, "%s: free queue longer than %d", what, KP_MAXB);
    char qwhat[256];
    snprintf(qwhat, sizeof qwhat, "%s: free queue", what);
    kvsim_test_assert_ids(got, len, want, n, qwhat);
    cr_assert_eq(kvpool_num_free_blocks(pool), n, "%s: %u free blocks, expected %u", what,
                 kvpool_num_free_blocks(pool), n);
}

/* The block's hash; asserts it has one. */
static kvpool_hash kp_hash_of(const struct kvpool *pool, kvpool_block_id b)
{
    kvpool_hash h = 0;
    cr_assert(kvpool_block_hash(pool, b, &h), "block %d should carry a hash", b);
    return h;
}

static void kp_assert_unhashed(const struct kvpool *pool, kvpool_block_id b, const char *what)
{
    kvpool_hash h = 0;
    cr_assert(!kvpool_block_hash(pool, b, &h), "%s: block %d still carries hash %#" PRIx64, what, b,
              h);
}

static void kp_assert_ref(const struct kvpool *pool, kvpool_block_id b, uint32_t want,
                          const char *what)
{
    uint32_t got = kvpool_ref_count(pool, b);
    cr_assert_eq(got, want, "%s: block %d has ref %u, expected %u", what, b, got, want);
}

/*
 * Admits a new sequence the way the scheduler does: look up its cached prefix, prepare every
 * remaining token on top of the hits, commit. Returns the number of hit blocks taken.
 */
static uint32_t kp_admit(struct kvpool *pool, struct kvpool_seq *seq)
{
    struct kvpool_hits hits;
    kvpool_lookup(pool, seq, &hits, NULL, 0);
    struct kvpool_alloc_args args = {
        .num_new_tokens = seq->num_tokens - hits.num_tokens,
        .hits = &hits,
    };
    struct kvpool_plan plan;
    int rc = kvpool_prepare(pool, seq, &args, &plan);
    cr_assert_eq(rc, KVPOOL_READY, "admitting seq %" PRIu64 " (%" PRIu64 " tokens): prepare -> %d",
                 seq->id, seq->num_tokens, rc);
    rc = kvpool_commit(pool, seq, &plan);
    cr_assert_eq(rc, 0, "admitting seq %" PRIu64 ": commit -> %d", seq->id, rc);
    return hits.num_blocks;
}

/* Allocates num_new more tokens for a running sequence that has num_computed computed. */
static void kp_extend(struct kvpool *pool, struct kvpool_seq *seq, uint64_t num_computed,
                      uint64_t num_new)
{
    struct kvpool_alloc_args args = {.num_computed_tokens = num_computed,
                                     .num_new_tokens = num_new};
    struct kvpool_plan plan;
    int rc = kvpool_prepare(pool, seq, &args, &plan);
    cr_assert_eq(rc, KVPOOL_READY, "extending seq %" PRIu64 ": prepare -> %d", seq->id, rc);
    rc = kvpool_commit(pool, seq, &plan);
    cr_assert_eq(rc, 0, "extending seq %" PRIu64 ": commit -> %d", seq->id, rc);
}

/* kvpool_prepare, also asserting that the returned outcome is the one written to the plan. */
static int kp_try(const struct kvpool *pool, const struct kvpool_seq *seq,
                  const struct kvpool_alloc_args *args, struct kvpool_plan *plan)
{
    int rc = kvpool_prepare(pool, seq, args, plan);
    if (rc >= 0)
        cr_assert_eq(plan->outcome, (enum kvpool_outcome)rc,
                     "prepare returned %d but plan->outcome is %d", rc, plan->outcome);
    return rc;
}

/* ---- events ---------------------------------------------------------------------------------- */

struct kp_ev {
    enum kvpool_event_type type;
    bool has_parent;
    kvpool_hash parent;
    uint32_t num_hashes;
    kvpool_hash hashes[KP_EV_HASHES];
};

struct kp_evlog {
    size_t n;
    struct kp_ev ev[KP_EV_MAX];
};

static void kp_ev_record(void *ctx, const struct kvpool_event *e)
{
    struct kp_evlog *log = ctx;
    cr_assert(log->n < KP_EV_MAX, "more than %d events", KP_EV_MAX);
    cr_assert(e->num_hashes <= KP_EV_HASHES, "event with %u hashes", e->num_hashes);
    struct kp_ev *r = &log->ev[log->n++];
    r->type = e->type;
    r->has_parent = e->has_parent;
    r->parent = e->parent_hash;
    r->num_hashes = e->num_hashes;
    for (uint32_t i = 0; i < e->num_hashes; i++)
        r->hashes[i] = e->hashes[i];
}

/* Drains the pool's events into log; asserts the returned count matches the callbacks. */
static size_t kp_drain(struct kvpool *pool, struct kp_evlog *log)
{
    memset(log, 0, sizeof *log);
    size_t n = kvpool_events_drain(pool, kp_ev_record, log);
    cr_assert_eq(n, log->n, "kvpool_events_drain returned %zu but called back %zu times", n,
                 log->n);
    return n;
}

static void kp_assert_removed(const struct kp_ev *e, kvpool_hash h, const char *what)
{
    cr_assert_eq(e->type, KVPOOL_EVENT_REMOVED, "%s: event type %s, expected removed", what,
                 kvpool_event_type_name(e->type));
    cr_assert_eq(e->num_hashes, 1, "%s: removed event with %u hashes", what, e->num_hashes);
    cr_assert_eq(e->hashes[0], h, "%s: removed %#" PRIx64 ", expected %#" PRIx64, what,
                 e->hashes[0], h);
}

static void kp_assert_stored(const struct kp_ev *e, bool has_parent, kvpool_hash parent,
                             const kvpool_hash *hashes, uint32_t n, const char *what)
{
    cr_assert_eq(e->type, KVPOOL_EVENT_STORED, "%s: event type %s, expected stored", what,
                 kvpool_event_type_name(e->type));
    cr_assert_eq(e->has_parent, has_parent, "%s: has_parent is %d, expected %d", what,
                 e->has_parent, has_parent);
    if (has_parent)
        cr_assert_eq(e->parent, parent, "%s: parent %#" PRIx64 ", expected %#" PRIx64, what,
                     e->parent, parent);
    cr_assert_eq(e->num_hashes, n, "%s: stored %u hashes, expected %u", what, e->num_hashes, n);
    for (uint32_t i = 0; i < n; i++)
        cr_assert_eq(e->hashes[i], hashes[i],
                     "%s: stored hash %u is %#" PRIx64 ", expected %#" PRIx64, what, i,
                     e->hashes[i], hashes[i]);
}

/* ---- whole-pool snapshots -------------------------------------------------------------------- */

struct kp_state {
    uint32_t num_blocks;
    uint32_t ref[KP_MAXB];
    bool hashed[KP_MAXB];
    kvpool_hash hash[KP_MAXB];
    kvpool_block_id fq[KP_MAXB];
    uint32_t fq_len;
    uint32_t num_free;
    uint64_t generation;
    uint64_t capacity_generation;
};

static void kp_capture(const struct kvpool *pool, struct kp_state *st)
{
    memset(st, 0, sizeof *st);
    st->num_blocks = kvpool_get_config(pool)->num_blocks;
    cr_assert(st->num_blocks <= KP_MAXB, "pool too large for a snapshot");
    for (uint32_t b = 0; b < st->num_blocks; b++) {
        st->ref[b] = kvpool_ref_count(pool, (kvpool_block_id)b);
        st->hashed[b] = kvpool_block_hash(pool, (kvpool_block_id)b, &st->hash[b]);
    }
    st->fq_len = kvpool_free_queue_snapshot(pool, st->fq, KP_MAXB);
    st->num_free = kvpool_num_free_blocks(pool);
    st->generation = kvpool_generation(pool);
    st->capacity_generation = kvpool_capacity_generation(pool);
}

static void kp_assert_same_refs(const struct kp_state *a, const struct kp_state *b,
                                const char *what)
{
    for (uint32_t i = 0; i < a->num_blocks; i++)
        cr_assert_eq(b->ref[i], a->ref[i], "%s: block %u ref changed from %u to %u", what, i,
                     a->ref[i], b->ref[i]);
    cr_assert_eq(b->num_free, a->num_free, "%s: free count changed from %u to %u", what,
                 a->num_free, b->num_free);
}

static void kp_assert_same_hashes(const struct kp_state *a, const struct kp_state *b,
                                  const char *what)
{
    for (uint32_t i = 0; i < a->num_blocks; i++) {
        cr_assert_eq(b->hashed[i], a->hashed[i], "%s: block %u hashed changed from %d to %d", what,
                     i, a->hashed[i], b->hashed[i]);
        if (a->hashed[i])
            cr_assert_eq(b->hash[i], a->hash[i],
                         "%s: block %u hash changed from %#" PRIx64 " to %#" PRIx64, what, i,
                         a->hash[i], b->hash[i]);
    }
}

static void kp_assert_same_fq(const struct kp_state *a, const struct kp_state *b, const char *what)
{
    char qwhat[256];
    snprintf(qwhat, sizeof qwhat, "%s: free queue", what);
    kvsim_test_assert_ids(b->fq, b->fq_len, a->fq, a->fq_len, qwhat);
}

static void kp_assert_same_state(const struct kp_state *a, const struct kp_state *b,
                                 const char *what)
{
    kp_assert_same_refs(a, b, what);
    kp_assert_same_hashes(a, b, what);
    kp_assert_same_fq(a, b, what);
    cr_assert_eq(b->generation, a->generation,
                 "%s: generation changed from %" PRIu64 " to %" PRIu64, what, a->generation,
                 b->generation);
    cr_assert_eq(b->capacity_generation, a->capacity_generation,
                 "%s: capacity generation changed from %" PRIu64 " to %" PRIu64, what,
                 a->capacity_generation, b->capacity_generation);
}

/* The caller-visible fields of a sequence. */
struct kp_seq_state {
    const kvpool_block_id *blocks_ptr;
    uint32_t num_blocks, cap_blocks, num_cached_blocks, num_hashes;
    uint64_t num_tokens;
    kvpool_block_id blocks[KP_MAXB];
    kvpool_hash hashes[KP_MAXB];
};

static void kp_seq_capture(const struct kvpool_seq *seq, struct kp_seq_state *st)
{
    memset(st, 0, sizeof *st);
    cr_assert(seq->num_blocks <= KP_MAXB && seq->num_hashes <= KP_MAXB, "sequence too long");
    st->blocks_ptr = seq->blocks;
    st->num_blocks = seq->num_blocks;
    st->cap_blocks = seq->cap_blocks;
    st->num_cached_blocks = seq->num_cached_blocks;
    st->num_hashes = seq->num_hashes;
    st->num_tokens = seq->num_tokens;
    for (uint32_t i = 0; i < seq->num_blocks; i++)
        st->blocks[i] = seq->blocks[i];
    for (uint32_t i = 0; i < seq->num_hashes; i++)
        st->hashes[i] = seq->hashes[i];
}

static void kp_assert_seq_unchanged(const struct kp_seq_state *a, const struct kvpool_seq *seq,
                                    const char *what)
{
    cr_assert_eq(seq->num_blocks, a->num_blocks, "%s: seq %" PRIu64 " num_blocks %u -> %u", what,
                 seq->id, a->num_blocks, seq->num_blocks);
    cr_assert_eq(seq->num_cached_blocks, a->num_cached_blocks,
                 "%s: seq %" PRIu64 " num_cached_blocks %u -> %u", what, seq->id,
                 a->num_cached_blocks, seq->num_cached_blocks);
    cr_assert_eq(seq->num_tokens, a->num_tokens,
                 "%s: seq %" PRIu64 " num_tokens %" PRIu64 " -> %" PRIu64, what, seq->id,
                 a->num_tokens, seq->num_tokens);
    cr_assert_eq(seq->num_hashes, a->num_hashes, "%s: seq %" PRIu64 " num_hashes %u -> %u", what,
                 seq->id, a->num_hashes, seq->num_hashes);
    cr_assert_eq(seq->cap_blocks, a->cap_blocks, "%s: seq %" PRIu64 " cap_blocks %u -> %u", what,
                 seq->id, a->cap_blocks, seq->cap_blocks);
    cr_assert(seq->blocks == a->blocks_ptr, "%s: seq %" PRIu64 " block table was reallocated", what,
              seq->id);
    char bwhat[256];
    snprintf(bwhat, sizeof bwhat, "%s: seq %" PRIu64 " blocks", what, seq->id);
    kvsim_test_assert_ids(seq->blocks, seq->num_blocks, a->blocks, a->num_blocks, bwhat);
    for (uint32_t i = 0; i < a->num_hashes; i++)
        cr_assert_eq(seq->hashes[i], a->hashes[i], "%s: seq %" PRIu64 " hash %u changed", what,
                     seq->id, i);
}

/* ---- null block and creation ----------------------------------------------------------------- */

Test(kvpool, null_block_counts_in_num_blocks_but_is_never_usable)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    cr_assert_eq(kvpool_get_config(pool)->num_blocks, 8, "config must keep num_blocks");
    cr_assert_eq(kvpool_num_usable_blocks(pool), 7, "usable = num_blocks - 1, got %u",
                 kvpool_num_usable_blocks(pool));
    kp_assert_fq(pool, (const kvpool_block_id[]){1, 2, 3, 4, 5, 6, 7}, 7, "fresh pool");
    kp_assert_ref(pool, KVPOOL_NULL_BLOCK, 0, "fresh pool");
    kp_assert_unhashed(pool, KVPOOL_NULL_BLOCK, "fresh pool");
    cr_assert_float_eq(kvpool_usage(pool), 0.0, 1e-12, "fresh pool usage must be 0");
    kvsim_test_assert_pool_ok(pool, "fresh pool");
    kvpool_destroy(pool);
}

Test(kvpool, allocating_the_whole_pool_never_hands_out_the_null_block)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq seqs[8];
    for (uint32_t i = 0; i < 7; i++) {
        kp_seq(pool, &seqs[i], i + 1, 100 * (i + 1), 1);
        kp_admit(pool, &seqs[i]);
        cr_assert_eq(seqs[i].num_blocks, 1, "a 1-token seq takes one block");
        cr_assert_neq(seqs[i].blocks[0], KVPOOL_NULL_BLOCK, "allocation %u handed out block 0", i);
        cr_assert_eq(seqs[i].blocks[0], (kvpool_block_id)(i + 1),
                     "allocation %u took block %d, expected %u (front of [1..7])", i,
                     seqs[i].blocks[0], i + 1);
    }
    kp_assert_fq(pool, NULL, 0, "whole pool allocated");
    cr_assert_float_eq(kvpool_usage(pool), 1.0, 1e-12, "a full pool has usage 1");
    kp_assert_ref(pool, KVPOOL_NULL_BLOCK, 0, "whole pool allocated");

    kp_seq(pool, &seqs[7], 8, 900, 1);
    struct kvpool_alloc_args args = {.num_new_tokens = 1};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(pool, &seqs[7], &args, &plan), KVPOOL_CAPACITY_EXHAUSTED,
                 "an 8th block must not exist: block 0 is not usable");
    kvsim_test_assert_pool_ok(pool, "whole pool allocated");
    for (uint32_t i = 0; i < 8; i++)
        kp_done(pool, &seqs[i]);
    kvsim_test_assert_pool_ok(pool, "after freeing everything");
    kvpool_destroy(pool);
}

Test(kvpool, create_rejects_impossible_configurations)
{
    static const struct {
        uint32_t num_blocks, block_size;
        double watermark;
        const char *why;
    } bad[] = {
        {0, 16, 0.0, "num_blocks 0"},    {1, 16, 0.0, "num_blocks 1 (only the null block)"},
        {8, 0, 0.0, "block_size 0"},     {8, 16, 1.0, "watermark 1.0"},
        {8, 16, -0.1, "watermark -0.1"}, {8, 16, 1.5, "watermark 1.5"},
        {8, 16, NAN, "watermark NaN"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kvpool_config cfg;
        kvpool_config_default(&cfg);
        cfg.num_blocks = bad[i].num_blocks;
        cfg.block_size = bad[i].block_size;
        cfg.watermark = bad[i].watermark;
        struct kvpool *pool = NULL;
        int rc = kvpool_create(&cfg, &pool);
        cr_assert_eq(rc, -EINVAL, "%s: kvpool_create returned %d, expected -EINVAL", bad[i].why,
                     rc);
        kvpool_destroy(pool); /* NULL on failure; accepted */
    }
    /* The smallest legal pool: one usable block. */
    struct kvpool_config cfg;
    kvpool_config_default(&cfg);
    cfg.num_blocks = 2;
    cfg.block_size = 1;
    cfg.watermark = 0.99;
    struct kvpool *pool = NULL;
    cr_assert_eq(kvpool_create(&cfg, &pool), 0, "num_blocks 2, block_size 1, watermark 0.99");
    cr_assert_eq(kvpool_num_usable_blocks(pool), 1, "two blocks leave one usable");
    kp_assert_fq(pool, (const kvpool_block_id[]){1}, 1, "smallest pool");
    kvpool_destroy(pool);
}

/* ---- free-queue order ------------------------------------------------------------------------ */

Test(kvpool, allocation_pops_blocks_from_the_front_of_the_free_queue)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq a, b, c;
    kp_seq(pool, &a, 1, 1000, 40);
    kp_admit(pool, &a);
    kp_assert_blocks(&a, (const kvpool_block_id[]){1, 2, 3}, 3, "first allocation");
    kp_assert_fq(pool, (const kvpool_block_id[]){4, 5, 6, 7}, 4, "after a");
    kvpool_free(pool, &a);
    kp_assert_fq(pool, (const kvpool_block_id[]){3, 4, 5, 6, 7, 2, 1}, 7, "after freeing a");

    kp_seq(pool, &b, 2, 2000, 20);
    kp_admit(pool, &b);
    kp_assert_blocks(&b, (const kvpool_block_id[]){3, 4}, 2, "b takes the two front blocks");
    kp_seq(pool, &c, 3, 3000, 50);
    kp_admit(pool, &c);
    kp_assert_blocks(&c, (const kvpool_block_id[]){5, 6, 7, 2}, 4, "c takes the next four");
    kp_assert_fq(pool, (const kvpool_block_id[]){1}, 1, "after c");
    kvsim_test_assert_pool_ok(pool, "after c");
    kp_done(pool, &a);
    kp_done(pool, &b);
    kp_done(pool, &c);
    kvpool_destroy(pool);
}

Test(kvpool, free_with_caching_sends_unhashed_blocks_to_the_front_and_hashed_to_the_back)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq x, a;
    kp_seq(pool, &x, 1, 9000, 5);
    kp_admit(pool, &x);
    kp_seq(pool, &a, 2, 1000, 40); /* two full blocks + 8 tokens */
    kp_admit(pool, &a);
    kp_assert_blocks(&a, (const kvpool_block_id[]){2, 3, 4}, 3, "a");
    cr_assert_eq(a.num_cached_blocks, 2, "a's two full blocks are cached");
    kp_assert_fq(pool, (const kvpool_block_id[]){5, 6, 7}, 3, "before free");

    kvpool_free(pool, &a);
    /* Released 4, 3, 2: the partial block 4 goes to the front, hashed 3 then 2 to the back. */
    kp_assert_fq(pool, (const kvpool_block_id[]){4, 5, 6, 7, 3, 2}, 6, "after freeing a");
    cr_assert_eq(a.num_blocks, 0, "a holds no blocks after kvpool_free");
    cr_assert_eq(a.num_tokens, 40, "kvpool_free keeps the tokens");
    cr_assert_eq(a.num_hashes, 2, "kvpool_free keeps the hashes");
    cr_assert_eq(kp_hash_of(pool, 2), a.hashes[0], "freed block 2 keeps its hash");
    cr_assert_eq(kp_hash_of(pool, 3), a.hashes[1], "freed block 3 keeps its hash");
    kp_assert_unhashed(pool, 4, "partial block");

    kvpool_free(pool, &x);
    kp_assert_fq(pool, (const kvpool_block_id[]){1, 4, 5, 6, 7, 3, 2}, 7, "after freeing x");
    kvsim_test_assert_pool_ok(pool, "after frees");
    kp_done(pool, &a);
    kp_done(pool, &x);
    kvpool_destroy(pool);
}

Test(kvpool, free_without_caching_sends_every_block_to_the_front_in_release_order)
{
    struct kvpool *pool = kp_pool(8, false, false, 0.0);
    struct kvpool_seq x, a;
    kp_seq(pool, &x, 1, 9000, 5);
    kp_admit(pool, &x);
    kp_seq(pool, &a, 2, 1000, 40);
    kp_admit(pool, &a);
    kp_assert_blocks(&a, (const kvpool_block_id[]){2, 3, 4}, 3, "a");

    kvpool_free(pool, &a);
    kp_assert_fq(pool, (const kvpool_block_id[]){4, 3, 2, 5, 6, 7}, 6, "after freeing a");
    kvpool_free(pool, &x);
    kp_assert_fq(pool, (const kvpool_block_id[]){1, 4, 3, 2, 5, 6, 7}, 7, "after freeing x");
    for (kvpool_block_id b = 1; b < 8; b++)
        kp_assert_unhashed(pool, b, "caching off");
    kvsim_test_assert_pool_ok(pool, "after frees");
    kp_done(pool, &a);
    kp_done(pool, &x);
    kvpool_destroy(pool);
}

/* ---- lazy eviction --------------------------------------------------------------------------- */

Test(kvpool, cached_free_block_keeps_its_hash_until_an_allocation_pops_it)
{
    struct kvpool *pool = kp_pool(5, true, true, 0.0);
    struct kp_evlog log;
    struct kvpool_seq a, x, y;
    kp_seq(pool, &a, 1, 1000, 33);
    kp_admit(pool, &a);
    kp_assert_blocks(&a, (const kvpool_block_id[]){1, 2, 3}, 3, "a");
    kvpool_hash h0 = a.hashes[0], h1 = a.hashes[1];
    cr_assert_eq(kp_drain(pool, &log), 1, "admitting a stores once");
    kp_assert_stored(&log.ev[0], false, 0, (const kvpool_hash[]){h0, h1}, 2, "a stored");

    kvpool_free(pool, &a);
    kp_assert_fq(pool, (const kvpool_block_id[]){3, 4, 2, 1}, 4, "after freeing a");
    cr_assert_eq(kp_drain(pool, &log), 0, "freeing evicts nothing");
    cr_assert_eq(kp_hash_of(pool, 1), h0, "free block 1 keeps hash 0");
    cr_assert_eq(kp_hash_of(pool, 2), h1, "free block 2 keeps hash 1");
    cr_assert_eq(kvpool_cache_find(pool, h1), 2, "free block 2 is still findable");

    /* An allocation that stops before block 2 leaves it cached. */
    kp_seq(pool, &x, 2, 2000, 17);
    kp_admit(pool, &x);
    kp_assert_blocks(&x, (const kvpool_block_id[]){3, 4}, 2, "x");
    cr_assert_eq(kp_drain(pool, &log), 1, "x: one stored event and no removal");
    cr_assert_eq(log.ev[0].type, KVPOOL_EVENT_STORED, "x's event must be a store");
    cr_assert_eq(kp_hash_of(pool, 2), h1, "block 2 not popped yet: hash kept");

    /* The next allocation pops block 2: its hash is evicted now, with a Removed event. */
    kp_seq(pool, &y, 3, 3000, 1);
    kp_admit(pool, &y);
    kp_assert_blocks(&y, (const kvpool_block_id[]){2}, 1, "y");
    cr_assert_eq(kp_drain(pool, &log), 1, "popping block 2 emits exactly one event");
    kp_assert_removed(&log.ev[0], h1, "popping block 2");
    kp_assert_unhashed(pool, 2, "after being popped");
    cr_assert_eq(kvpool_cache_find(pool, h1), -ENOENT, "evicted hash must be gone");
    cr_assert_eq(kp_hash_of(pool, 1), h0, "block 1 (not popped) keeps its hash");
    cr_assert_eq(kvpool_cache_find(pool, h0), 1, "block 1 still findable");
    kvsim_test_assert_pool_ok(pool, "after eviction");
    kp_done(pool, &a);
    kp_done(pool, &x);
    kp_done(pool, &y);
    kvpool_destroy(pool);
}

/* ---- hashing --------------------------------------------------------------------------------- */

static void kp_assert_same_hashes_seq(const struct kvpool_seq *a, const struct kvpool_seq *b,
                                      const char *what)
{
    cr_assert_eq(b->num_tokens, a->num_tokens, "%s: num_tokens %" PRIu64 " vs %" PRIu64, what,
                 b->num_tokens, a->num_tokens);
    cr_assert_eq(b->num_hashes, a->num_hashes, "%s: num_hashes %u vs %u", what, b->num_hashes,
                 a->num_hashes);
    for (uint32_t i = 0; i < a->num_hashes; i++)
        cr_assert_eq(b->hashes[i], a->hashes[i], "%s: hash %u differs", what, i);
    uint32_t part = (uint32_t)(a->num_tokens % KP_BS);
    for (uint32_t i = 0; i < part; i++)
        cr_assert_eq(b->partial[i], a->partial[i], "%s: partial token %u differs", what, i);
}

Test(kvpool, identical_tokens_give_identical_hashes_across_sequences)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq a, b;
    kp_seq(pool, &a, 1, 1000, 100);
    kp_seq(pool, &b, 2, 1000, 100);
    cr_assert_eq(a.num_hashes, 6, "100 tokens make 6 full blocks, got %u hashes", a.num_hashes);
    kp_assert_same_hashes_seq(&a, &b, "same tokens");
    for (uint32_t i = 0; i < a.num_hashes; i++)
        for (uint32_t j = i + 1; j < a.num_hashes; j++)
            cr_assert_neq(a.hashes[i], a.hashes[j], "blocks %u and %u collide", i, j);
    kp_done(pool, &a);
    kp_done(pool, &b);
    kvpool_destroy(pool);
}

Test(kvpool, block_hashes_chain_from_the_none_hash)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    kvpool_token toks[48];
    for (uint32_t i = 0; i < 48; i++)
        toks[i] = 1000 + i;
    struct kvpool_seq a;
    kp_seq(pool, &a, 1, 1000, 48);
    cr_assert_eq(a.num_hashes, 3, "48 tokens, 3 full blocks");
    cr_assert_eq(a.hashes[0], kvpool__hash_block(KVPOOL_NONE_HASH, toks, KP_BS, 0),
                 "block 0's parent must be KVPOOL_NONE_HASH");
    for (uint32_t i = 1; i < 3; i++)
        cr_assert_eq(a.hashes[i], kvpool__hash_block(a.hashes[i - 1], toks + i * KP_BS, KP_BS, 0),
                     "block %u must hash (parent = block %u's hash, its tokens)", i, i - 1);
    kp_done(pool, &a);
    kvpool_destroy(pool);
}

Test(kvpool, a_different_token_in_block_0_changes_every_later_hash)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    kvpool_token toks[64];
    for (uint32_t i = 0; i < 64; i++)
        toks[i] = 1000 + i;
    struct kvpool_seq a, b, c;
    kp_seq(pool, &a, 1, 0, 0);
    cr_assert_eq(kvpool_seq_append_tokens(pool, &a, toks, 64), 0, "append a");
    toks[5] = 7; /* block 0 differs, blocks 1..3 have identical tokens */
    kp_seq(pool, &b, 2, 0, 0);
    cr_assert_eq(kvpool_seq_append_tokens(pool, &b, toks, 64), 0, "append b");
    toks[5] = 1005;
    toks[20] = 7; /* only block 1 differs */
    kp_seq(pool, &c, 3, 0, 0);
    cr_assert_eq(kvpool_seq_append_tokens(pool, &c, toks, 64), 0, "append c");
    for (uint32_t i = 0; i < 4; i++)
        cr_assert_neq(b.hashes[i], a.hashes[i], "block 0 changed: hash %u must differ", i);
    cr_assert_eq(c.hashes[0], a.hashes[0], "block 1 changed: block 0's hash is unaffected");
    for (uint32_t i = 1; i < 4; i++)
        cr_assert_neq(c.hashes[i], a.hashes[i], "block 1 changed: hash %u must differ", i);
    kp_done(pool, &a);
    kp_done(pool, &b);
    kp_done(pool, &c);
    kvpool_destroy(pool);
}

Test(kvpool, cache_salt_changes_block_0_hash_and_every_later_one)
{
    struct kvpool *pool = kp_pool(16, true, false, 0.0);
    struct kvpool_seq plain, s1, s1b, s2, plain2;
    kp_seq(pool, &plain, 1, 1000, 49);
    cr_assert_eq(kvpool_seq_init(pool, &s1, 2, "tenant-a", 8), 0, "init salted seq");
    kp_append(pool, &s1, 1000, 49);
    cr_assert_eq(kvpool_seq_init(pool, &s1b, 3, "tenant-a", 8), 0, "init salted seq");
    kp_append(pool, &s1b, 1000, 49);
    cr_assert_eq(kvpool_seq_init(pool, &s2, 4, "tenant-b", 8), 0, "init salted seq");
    kp_append(pool, &s2, 1000, 49);
    for (uint32_t i = 0; i < 3; i++) {
        cr_assert_neq(s1.hashes[i], plain.hashes[i], "salt must change hash %u", i);
        cr_assert_neq(s2.hashes[i], s1.hashes[i], "a different salt must change hash %u", i);
        cr_assert_eq(s1b.hashes[i], s1.hashes[i], "the same salt must give the same hash %u", i);
    }
    /* The salt is an extra key of block 0 only: later blocks chain on the parent alone. */
    kvpool_token toks[16];
    for (uint32_t i = 0; i < 16; i++)
        toks[i] = 1016 + i;
    cr_assert_eq(s1.hashes[1], kvpool__hash_block(s1.hashes[0], toks, KP_BS, 0),
                 "block 1 must not carry the salt as an extra key");

    /* Cached unsalted blocks are no hits for a salted sequence. */
    kp_admit(pool, &plain);
    struct kvpool_hits hits;
    kvpool_lookup(pool, &s1, &hits, NULL, 0);
    cr_assert_eq(hits.num_blocks, 0, "a salted seq must not hit unsalted blocks, got %u",
                 hits.num_blocks);
    kp_seq(pool, &plain2, 5, 1000, 49);
    kvpool_lookup(pool, &plain2, &hits, NULL, 0);
    cr_assert_eq(hits.num_blocks, 3, "an unsalted seq hits all 3 blocks, got %u", hits.num_blocks);
    kp_done(pool, &plain);
    kp_done(pool, &plain2);
    kp_done(pool, &s1);
    kp_done(pool, &s1b);
    kp_done(pool, &s2);
    kvpool_destroy(pool);
}

Test(kvpool, appending_tokens_in_pieces_gives_the_same_hashes_as_one_call)
{
    enum { N = 203 };
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    kvpool_token toks[N];
    for (uint32_t i = 0; i < N; i++)
        toks[i] = (kvpool_token)(i * 2654435761u);
    struct kvpool_seq whole;
    kp_seq(pool, &whole, 1, 0, 0);
    cr_assert_eq(kvpool_seq_append_tokens(pool, &whole, toks, N), 0, "append in one call");
    cr_assert_eq(whole.num_hashes, N / KP_BS, "one hash per full block");

    static const size_t patterns[][4] = {
        {1, 1, 1, 1}, {3, 7, 5, 3}, {16, 1, 31, 17}, {0, 9, 0, 40}};
    for (size_t p = 0; p < sizeof patterns / sizeof patterns[0]; p++) {
        struct kvpool_seq s;
        kp_seq(pool, &s, 10 + p, 0, 0);
        size_t off = 0;
        for (size_t k = 0; off < N; k++) {
            size_t chunk = patterns[p][k % 4];
            if (chunk > N - off)
                chunk = N - off;
            cr_assert_eq(kvpool_seq_append_tokens(pool, &s, toks + off, chunk), 0, "append");
            off += chunk;
            cr_assert_eq(s.num_tokens, off, "pattern %zu: num_tokens", p);
            cr_assert_eq(s.num_hashes, off / KP_BS, "pattern %zu: %u hashes after %zu tokens", p,
                         s.num_hashes, off);
            for (uint32_t i = 0; i < s.num_hashes; i++)
                cr_assert_eq(s.hashes[i], whole.hashes[i],
                             "pattern %zu: hash %u differs after %zu tokens", p, i, off);
        }
        char what[64];
        snprintf(what, sizeof what, "pattern %zu", p);
        kp_assert_same_hashes_seq(&whole, &s, what);
        kp_done(pool, &s);
    }
    kp_done(pool, &whole);
    kvpool_destroy(pool);
}

Test(kvpool, append_repeat_equals_append_tokens_of_copies)
{
    enum { N = 600 };
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    static kvpool_token copies[N];
    for (uint32_t i = 0; i < N; i++)
        copies[i] = 77;
    struct kvpool_seq r, t, r2, t2;
    kp_seq(pool, &r, 1, 0, 0);
    cr_assert_eq(kvpool_seq_append_repeat(pool, &r, 77, N), 0, "append_repeat");
    kp_seq(pool, &t, 2, 0, 0);
    cr_assert_eq(kvpool_seq_append_tokens(pool, &t, copies, N), 0, "append_tokens");
    cr_assert_eq(r.num_hashes, N / KP_BS, "600 tokens, 37 full blocks");
    kp_assert_same_hashes_seq(&t, &r, "repeat from empty");

    /* Starting mid-block, and n = 0 appends nothing. */
    kp_seq(pool, &r2, 3, 500, 5);
    cr_assert_eq(kvpool_seq_append_repeat(pool, &r2, 77, 0), 0, "append_repeat of 0");
    cr_assert_eq(r2.num_tokens, 5, "append_repeat of 0 must not add tokens");
    cr_assert_eq(kvpool_seq_append_repeat(pool, &r2, 77, 300), 0, "append_repeat");
    kp_seq(pool, &t2, 4, 500, 5);
    cr_assert_eq(kvpool_seq_append_tokens(pool, &t2, copies, 300), 0, "append_tokens");
    kp_assert_same_hashes_seq(&t2, &r2, "repeat after 5 tokens");
    kp_done(pool, &r);
    kp_done(pool, &t);
    kp_done(pool, &r2);
    kp_done(pool, &t2);
    kvpool_destroy(pool);
}

/* A prompt of three runs, 147 tokens: 9 full blocks, the last ending inside the third run, and a
 * partial block of 3 tokens. */
static const struct kvpool_token_run kp_runs[] = {{5, 40}, {9, 7}, {11, 100}};
enum { KP_RUNS = 3, KP_RUNS_TOKENS = 147, KP_RUNS_FULL = 9 };

Test(kvpool, append_runs_with_known_hashes_equals_hashing_every_block)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    kvpool_hash all[KP_RUNS_FULL];
    cr_assert_eq(kvpool_hash_prompt(KP_BS, NULL, 0, kp_runs, KP_RUNS, all, KP_RUNS_FULL),
                 KP_RUNS_FULL);
    static const kvpool_token more[20] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                          11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    for (uint32_t k = 0; k <= KP_RUNS_FULL; k++) {
        struct kvpool_seq ref, got;
        kp_seq(pool, &ref, 1, 0, 0);
        for (uint32_t i = 0; i < KP_RUNS; i++)
            cr_assert_eq(kvpool_seq_append_repeat(pool, &ref, kp_runs[i].token, kp_runs[i].count),
                         0);
        kp_seq(pool, &got, 2, 0, 0);
        cr_assert_eq(kvpool_seq_append_runs(pool, &got, kp_runs, KP_RUNS, all, k), 0,
                     "append_runs with %u known", k);
        cr_assert_eq(got.num_tokens, KP_RUNS_TOKENS);
        kp_assert_same_hashes_seq(&ref, &got, "the prompt");
        /* The partial block the known blocks left behind hashes the same when it fills. */
        cr_assert_eq(kvpool_seq_append_tokens(pool, &ref, more, 20), 0);
        cr_assert_eq(kvpool_seq_append_tokens(pool, &got, more, 20), 0);
        kp_assert_same_hashes_seq(&ref, &got, "after 20 more tokens");
        kp_done(pool, &ref);
        kp_done(pool, &got);
    }
    kvpool_destroy(pool);
}

Test(kvpool, append_runs_refuses_known_hashes_it_cannot_place)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    kvpool_hash all[KP_RUNS_FULL + 1] = {0};
    struct kvpool_seq seq;
    kp_seq(pool, &seq, 1, 0, 0);
    cr_assert_eq(kvpool_seq_append_runs(pool, &seq, kp_runs, KP_RUNS, all, KP_RUNS_FULL + 1),
                 -EINVAL, "more known hashes than full blocks");
    cr_assert_eq(seq.num_tokens, 0, "a refused append adds nothing");
    kp_append(pool, &seq, 500, 3);
    cr_assert_eq(kvpool_seq_append_runs(pool, &seq, kp_runs, KP_RUNS, all, 1), -EINVAL,
                 "known hashes on a sequence with tokens");
    cr_assert_eq(seq.num_tokens, 3);
    kp_done(pool, &seq);
    kvpool_destroy(pool);
}

Test(kvpool, hash_prompt_more_continues_where_it_stopped)
{
    kvpool_hash all[KP_RUNS_FULL], part[KP_RUNS_FULL];
    cr_assert_eq(kvpool_hash_prompt(KP_BS, "salt", 4, kp_runs, KP_RUNS, all, KP_RUNS_FULL),
                 KP_RUNS_FULL);
    for (uint32_t have = 0; have <= KP_RUNS_FULL; have++) {
        memset(part, 0, sizeof part);
        cr_assert_eq(kvpool_hash_prompt(KP_BS, "salt", 4, kp_runs, KP_RUNS, part, have), have);
        cr_assert_eq(
            kvpool_hash_prompt_more(KP_BS, "salt", 4, kp_runs, KP_RUNS, part, have, KP_RUNS_FULL),
            KP_RUNS_FULL);
        for (uint32_t i = 0; i < KP_RUNS_FULL; i++)
            cr_assert_eq(part[i], all[i], "from %u: hash %u differs", have, i);
    }
}

/* ---- duplicate hashes ------------------------------------------------------------------------ */

Test(kvpool, duplicate_hashes_find_the_earliest_block_then_the_survivor)
{
    struct kvpool *pool = kp_pool(10, true, false, 0.0);
    struct kvpool_seq a, b, d, c1, c2, c3;
    kp_seq(pool, &a, 1, 1000, 33);
    kp_admit(pool, &a);
    kp_assert_blocks(&a, (const kvpool_block_id[]){1, 2, 3}, 3, "a");
    kvpool_hash h0 = a.hashes[0], h1 = a.hashes[1];

    /* A prompt-logprobs-like request never reads the cache: it caches duplicates. */
    kp_seq(pool, &b, 2, 1000, 33);
    b.skip_reading_prefix_cache = true;
    cr_assert_eq(kp_admit(pool, &b), 0, "b skips reading the cache: no hits");
    kp_assert_blocks(&b, (const kvpool_block_id[]){4, 5, 6}, 3, "b");
    cr_assert_eq(kp_hash_of(pool, 4), h0, "block 4 cached under the same hash as block 1");
    cr_assert_eq(kp_hash_of(pool, 5), h1, "block 5 cached under the same hash as block 2");
    cr_assert_eq(kvpool_cache_find(pool, h0), 1, "earliest-inserted block for hash 0");
    cr_assert_eq(kvpool_cache_find(pool, h1), 2, "earliest-inserted block for hash 1");
    kvsim_test_assert_pool_ok(pool, "duplicates cached");

    kp_seq(pool, &d, 3, 1000, 33);
    kvpool_block_id ids[4];
    struct kvpool_hits hits;
    kvpool_lookup(pool, &d, &hits, ids, 4);
    kvsim_test_assert_ids(ids, hits.num_blocks, (const kvpool_block_id[]){1, 2}, 2,
                          "lookup with dups");

    kvpool_free(pool, &a);
    kvpool_free(pool, &b);
    kp_assert_fq(pool, (const kvpool_block_id[]){6, 3, 7, 8, 9, 2, 1, 5, 4}, 9, "both freed");
    cr_assert_eq(kvpool_cache_find(pool, h0), 1, "freeing does not evict");

    kp_seq(pool, &c1, 4, 4000, 65); /* pops 6, 3, 7, 8, 9 */
    kp_admit(pool, &c1);
    cr_assert_eq(kvpool_cache_find(pool, h0), 1, "block 1 not popped yet");
    cr_assert_eq(kvpool_cache_find(pool, h1), 2, "block 2 not popped yet");
    kp_seq(pool, &c2, 5, 5000, 1); /* pops 2 */
    kp_admit(pool, &c2);
    kp_assert_blocks(&c2, (const kvpool_block_id[]){2}, 1, "c2");
    cr_assert_eq(kvpool_cache_find(pool, h1), 5, "block 2 evicted: hash 1 now finds block 5");
    cr_assert_eq(kvpool_cache_find(pool, h0), 1, "hash 0 still finds block 1");
    kvpool_lookup(pool, &d, &hits, ids, 4);
    kvsim_test_assert_ids(ids, hits.num_blocks, (const kvpool_block_id[]){1, 5}, 2,
                          "lookup after 2");
    kp_seq(pool, &c3, 6, 6000, 1); /* pops 1 */
    kp_admit(pool, &c3);
    kp_assert_blocks(&c3, (const kvpool_block_id[]){1}, 1, "c3");
    cr_assert_eq(kvpool_cache_find(pool, h0), 4, "block 1 evicted: hash 0 now finds block 4");
    kvpool_lookup(pool, &d, &hits, ids, 4);
    kvsim_test_assert_ids(ids, hits.num_blocks, (const kvpool_block_id[]){4, 5}, 2,
                          "lookup after 1");
    cr_assert_eq(hits.num_evictable, 2, "both surviving duplicates are free");
    kvsim_test_assert_pool_ok(pool, "after evictions");
    kp_done(pool, &a);
    kp_done(pool, &b);
    kp_done(pool, &c1);
    kp_done(pool, &c2);
    kp_done(pool, &c3);
    kp_done(pool, &d);
    kvpool_destroy(pool);
}

/* What a test remembers of each block entering the cache, in the order the store hook saw. */
struct kp_cache_model {
    uint32_t n;
    kvpool_block_id blocks[4096];
    kvpool_hash hashes[4096];
};

static void kp_model_on_stored(void *ctx, const kvpool_block_id *blocks, const kvpool_hash *hashes,
                               uint32_t n)
{
    struct kp_cache_model *m = ctx;
    for (uint32_t i = 0; i < n; i++, m->n++) {
        cr_assert(m->n < 4096, "cache model full");
        m->blocks[m->n] = blocks[i];
        m->hashes[m->n] = hashes[i];
    }
}

/* The earliest-cached block still cached under h (its latest insertion, and still hashed h),
 * and how many such blocks there are. */
static kvpool_block_id kp_model_find(const struct kvpool *pool, const struct kp_cache_model *m,
                                     kvpool_hash h, uint32_t *count)
{
    kvpool_block_id first = -ENOENT;
    *count = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        kvpool_hash now;
        if (m->hashes[i] != h || !kvpool_block_hash(pool, m->blocks[i], &now) || now != h)
            continue;
        bool latest = true; /* not cached again since */
        for (uint32_t j = i + 1; j < m->n && latest; j++)
            latest = m->blocks[j] != m->blocks[i];
        if (!latest)
            continue;
        if (first < 0)
            first = m->blocks[i];
        ++*count;
    }
    return first;
}

/* Many evictions and re-cachings on a small pool, with duplicates (requests that do not read the
 * cache): after each admission every hash ever cached must still find its earliest-cached block and
 * count its duplicates. */
Test(kvpool, cache_find_stays_the_earliest_cached_block_through_evictions)
{
    struct kvpool *pool = kp_pool(9, true, false, 0.0);
    static struct kp_cache_model model;
    memset(&model, 0, sizeof model);
    kvpool_set_store_hook(pool, kp_model_on_stored, &model);
    struct kvpool_seq live[2];
    bool used[2] = {false, false};
    uint64_t rng = 12345;
    for (uint32_t step = 0; step < 600; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t slot = (uint32_t)(rng >> 33) % 2, prompt = (uint32_t)(rng >> 40) % 5;
        if (used[slot])
            kp_done(pool, &live[slot]);
        kp_seq(pool, &live[slot], step, 1000 * (prompt + 1), 33 + 16 * (prompt % 2));
        live[slot].skip_reading_prefix_cache = (rng >> 50) % 3 == 0; /* caches duplicates */
        kp_admit(pool, &live[slot]);
        used[slot] = true;
        for (uint32_t i = 0; i < model.n; i++) {
            uint32_t want_count, got_count = kvpool_cache_count(pool, model.hashes[i]);
            kvpool_block_id want = kp_model_find(pool, &model, model.hashes[i], &want_count);
            cr_assert_eq(kvpool_cache_find(pool, model.hashes[i]), want,
                         "step %u: hash of insertion %u finds block %d, expected %d", step, i,
                         kvpool_cache_find(pool, model.hashes[i]), want);
            cr_assert_eq(got_count, want_count, "step %u: insertion %u's hash counted %u, not %u",
                         step, i, got_count, want_count);
        }
        kvsim_test_assert_pool_ok(pool, "after a step");
    }
    cr_assert_gt(model.n, 200, "the pool cached only %u blocks", model.n);
    for (uint32_t s = 0; s < 2; s++)
        if (used[s])
            kp_done(pool, &live[s]);
    kvpool_destroy(pool);
}

/* ---- lookup ---------------------------------------------------------------------------------- */

Test(kvpool, lookup_returns_the_longest_cached_prefix)
{
    struct kvpool *pool = kp_pool(16, true, false, 0.0);
    struct kvpool_seq a, d, e;
    kp_seq(pool, &a, 1, 1000, 70);
    kp_admit(pool, &a);
    kp_assert_blocks(&a, (const kvpool_block_id[]){1, 2, 3, 4, 5}, 5, "a");
    cr_assert_eq(a.num_cached_blocks, 4, "70 tokens: 4 full blocks cached");

    kp_seq(pool, &d, 2, 1000, 70);
    struct kvpool_hits hits;
    kvpool_block_id ids[8];
    kvpool_lookup(pool, &d, &hits, ids, 8);
    kvsim_test_assert_ids(ids, hits.num_blocks, (const kvpool_block_id[]){1, 2, 3, 4}, 4,
                          "same tokens");
    cr_assert_eq(hits.num_tokens, 64, "4 hit blocks are 64 tokens, got %" PRIu64, hits.num_tokens);
    cr_assert_eq(hits.num_evictable, 0, "a still references every hit");

    kp_seq(pool, &e, 3, 1000, 48);
    kp_append(pool, &e, 7000, 22);
    kvpool_lookup(pool, &e, &hits, ids, 8);
    kvsim_test_assert_ids(ids, hits.num_blocks, (const kvpool_block_id[]){1, 2, 3}, 3,
                          "shares 3 blocks");
    cr_assert_eq(hits.num_tokens, 48, "3 hit blocks are 48 tokens");

    /* ids_cap bounds what is written, not the hit count. */
    kvpool_block_id few[3] = {-7, -7, -7};
    kvpool_lookup(pool, &d, &hits, few, 2);
    cr_assert_eq(hits.num_blocks, 4, "ids_cap must not cap the hit count");
    cr_assert(few[0] == 1 && few[1] == 2, "first two hit ids, got [%d,%d]", few[0], few[1]);
    cr_assert_eq(few[2], -7, "lookup wrote past ids_cap");
    kp_done(pool, &a);
    kp_done(pool, &d);
    kp_done(pool, &e);
    kvpool_destroy(pool);
}

Test(kvpool, lookup_is_capped_at_all_tokens_but_the_last)
{
    struct kvpool *pool = kp_pool(16, true, false, 0.0);
    struct kvpool_seq a, d32, d33, d17, d16;
    kp_seq(pool, &a, 1, 1000, 32);
    kp_admit(pool, &a);
    cr_assert_eq(a.num_cached_blocks, 2, "a's two blocks are cached");
    kp_hash_of(pool, a.blocks[1]);

    struct {
        struct kvpool_seq *seq;
        size_t n;
        uint32_t want;
    } cases[] = {{&d32, 32, 1}, {&d33, 33, 2}, {&d17, 17, 1}, {&d16, 16, 0}};
    for (size_t i = 0; i < 4; i++) {
        kp_seq(pool, cases[i].seq, 10 + i, 1000, cases[i].n);
        struct kvpool_hits hits;
        kvpool_lookup(pool, cases[i].seq, &hits, NULL, 0);
        cr_assert_eq(hits.num_blocks, cases[i].want,
                     "%zu-token prompt: %u hit blocks, expected %u (capped at num_tokens-1)",
                     cases[i].n, hits.num_blocks, cases[i].want);
        cr_assert_eq(hits.num_tokens, (uint64_t)cases[i].want * KP_BS, "hit tokens");
    }
    for (size_t i = 0; i < 4; i++)
        kp_done(pool, cases[i].seq);
    kp_done(pool, &a);
    kvpool_destroy(pool);
}

Test(kvpool, lookup_stops_at_the_first_miss)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq a, x, d;
    kp_seq(pool, &a, 1, 1000, 49);
    kp_admit(pool, &a);
    kp_assert_blocks(&a, (const kvpool_block_id[]){1, 2, 3, 4}, 4, "a");
    kvpool_hash h1 = a.hashes[1], h2 = a.hashes[2];
    kvpool_free(pool, &a);
    kp_assert_fq(pool, (const kvpool_block_id[]){4, 5, 6, 7, 3, 2, 1}, 7, "a freed");
    /* Evict only the middle block: hold blocks 1 and 3 while x takes everything else. */
    cr_assert_eq(kvpool_hold_block(pool, 1), 0, "hold block 1");
    cr_assert_eq(kvpool_hold_block(pool, 3), 0, "hold block 3");
    kp_seq(pool, &x, 2, 5000, 65);
    kp_admit(pool, &x);
    kp_assert_blocks(&x, (const kvpool_block_id[]){4, 5, 6, 7, 2}, 5, "x");
    cr_assert_eq(kvpool_release_hold(pool, 1), 0, "release block 1");
    cr_assert_eq(kvpool_release_hold(pool, 3), 0, "release block 3");
    cr_assert_eq(kvpool_cache_find(pool, h1), -ENOENT, "block 1 of the chain is evicted");
    cr_assert_eq(kvpool_cache_find(pool, h2), 3, "block 2 of the chain is still cached");

    kp_seq(pool, &d, 3, 1000, 49);
    struct kvpool_hits hits;
    kvpool_block_id ids[4];
    kvpool_lookup(pool, &d, &hits, ids, 4);
    kvsim_test_assert_ids(ids, hits.num_blocks, (const kvpool_block_id[]){1}, 1,
                          "lookup must stop at the first miss");
    cr_assert_eq(hits.num_evictable, 1, "block 1 is free");
    kvsim_test_assert_pool_ok(pool, "after holds");
    kp_done(pool, &a);
    kp_done(pool, &x);
    kp_done(pool, &d);
    kvpool_destroy(pool);
}

Test(kvpool, lookup_takes_no_references_and_changes_nothing)
{
    struct kvpool *pool = kp_pool(12, true, true, 0.0);
    struct kvpool_seq a, b, d;
    kp_seq(pool, &a, 1, 1000, 49);
    kp_admit(pool, &a);
    kp_seq(pool, &b, 2, 1000, 32);
    kp_append(pool, &b, 6000, 8);
    cr_assert_eq(kp_admit(pool, &b), 2, "b shares a's first two blocks");
    kvpool_free(pool, &a); /* blocks 1, 2 stay referenced by b; 3 (hashed) and 4 are free */
    struct kp_evlog log;
    kp_drain(pool, &log);

    kp_seq(pool, &d, 3, 1000, 49);
    struct kp_state before, after;
    struct kp_seq_state d_before;
    kp_capture(pool, &before);
    kp_seq_capture(&d, &d_before);
    struct kvpool_hits hits;
    kvpool_block_id ids[4];
    for (int rep = 0; rep < 3; rep++) {
        kvpool_lookup(pool, &d, &hits, ids, 4);
        kvsim_test_assert_ids(ids, hits.num_blocks, (const kvpool_block_id[]){1, 2, 3}, 3,
                              "lookup d");
    }
    kp_capture(pool, &after);
    kp_assert_same_state(&before, &after, "after lookups");
    kp_assert_seq_unchanged(&d_before, &d, "after lookups");
    cr_assert_eq(kp_drain(pool, &log), 0, "lookup emits no events");
    kvsim_test_assert_pool_ok(pool, "after lookups");
    kp_done(pool, &a);
    kp_done(pool, &b);
    kp_done(pool, &d);
    kvpool_destroy(pool);
}

Test(kvpool, lookup_gives_no_hits_with_caching_off_or_skip_reading_prefix_cache)
{
    struct kvpool *off = kp_pool(8, false, false, 0.0);
    struct kvpool_seq a, d;
    kp_seq(off, &a, 1, 1000, 49);
    kp_admit(off, &a);
    kp_seq(off, &d, 2, 1000, 49);
    struct kvpool_hits hits;
    kvpool_block_id ids[4] = {-7, -7, -7, -7};
    kvpool_lookup(off, &d, &hits, ids, 4);
    cr_assert_eq(hits.num_blocks, 0, "caching off: no hits, got %u", hits.num_blocks);
    cr_assert_eq(hits.num_tokens, 0, "caching off: no hit tokens");
    cr_assert_eq(hits.num_evictable, 0, "caching off: nothing evictable");
    cr_assert_eq(ids[0], -7, "caching off: no ids written");
    kp_done(off, &a);
    kp_done(off, &d);
    kvpool_destroy(off);

    struct kvpool *on = kp_pool(8, true, false, 0.0);
    struct kvpool_seq a2, skip, normal;
    kp_seq(on, &a2, 1, 1000, 49);
    kp_admit(on, &a2);
    kp_seq(on, &skip, 2, 1000, 49);
    skip.skip_reading_prefix_cache = true;
    kvpool_lookup(on, &skip, &hits, ids, 4);
    cr_assert_eq(hits.num_blocks, 0, "skip_reading_prefix_cache: no hits, got %u", hits.num_blocks);
    cr_assert_eq(hits.num_tokens, 0, "skip_reading_prefix_cache: no hit tokens");
    kp_seq(on, &normal, 3, 1000, 49);
    kvpool_lookup(on, &normal, &hits, NULL, 0);
    cr_assert_eq(hits.num_blocks, 3, "control: the same tokens hit 3 blocks, got %u",
                 hits.num_blocks);
    kp_done(on, &a2);
    kp_done(on, &skip);
    kp_done(on, &normal);
    kvpool_destroy(on);
}

Test(kvpool, lookup_counts_unreferenced_hits_as_evictable)
{
    struct kvpool *pool = kp_pool(16, true, false, 0.0);
    struct kvpool_seq a, b, d;
    kp_seq(pool, &a, 1, 1000, 49);
    kp_admit(pool, &a);
    kvpool_free(pool, &a);
    kp_seq(pool, &d, 2, 1000, 49);
    struct kvpool_hits hits;
    kvpool_lookup(pool, &d, &hits, NULL, 0);
    cr_assert(hits.num_blocks == 3 && hits.num_evictable == 3,
              "all hits free: 3 hits / 3 evictable, got %u / %u", hits.num_blocks,
              hits.num_evictable);

    kp_seq(pool, &b, 3, 1000, 33);
    cr_assert_eq(kp_admit(pool, &b), 2, "b takes a's first two blocks");
    kvpool_lookup(pool, &d, &hits, NULL, 0);
    cr_assert(hits.num_blocks == 3 && hits.num_evictable == 1,
              "two hits referenced by b: 3 hits / 1 evictable, got %u / %u", hits.num_blocks,
              hits.num_evictable);

    cr_assert_eq(kvpool_hold_block(pool, 3), 0, "hold block 3");
    kvpool_lookup(pool, &d, &hits, NULL, 0);
    cr_assert(hits.num_blocks == 3 && hits.num_evictable == 0,
              "held hit is not evictable: 3 hits / 0 evictable, got %u / %u", hits.num_blocks,
              hits.num_evictable);
    cr_assert_eq(kvpool_release_hold(pool, 3), 0, "release block 3");
    kvpool_free(pool, &b);
    kvpool_lookup(pool, &d, &hits, NULL, 0);
    cr_assert(hits.num_blocks == 3 && hits.num_evictable == 3,
              "all free again: 3 hits / 3 evictable, got %u / %u", hits.num_blocks,
              hits.num_evictable);
    kp_done(pool, &a);
    kp_done(pool, &b);
    kp_done(pool, &d);
    kvpool_destroy(pool);
}

/* ---- prepare / commit ------------------------------------------------------------------------ */

Test(kvpool, commit_touches_hits_then_allocates_fresh_blocks_then_caches)
{
    struct kvpool *pool = kp_pool(7, true, true, 0.0);
    struct kvpool_seq a, f, g, b;
    struct kp_evlog log;
    kp_seq(pool, &a, 1, 1000, 33);
    kp_admit(pool, &a); /* [1,2,3] */
    kp_seq(pool, &f, 2, 2000, 48);
    kp_admit(pool, &f); /* [4,5,6], all three cached */
    kvpool_hash hf0 = f.hashes[0], hf1 = f.hashes[1], hf2 = f.hashes[2];
    kvpool_free(pool, &a);
    kvpool_free(pool, &f);
    kp_seq(pool, &g, 3, 3000, 1);
    kp_admit(pool, &g);
    kp_assert_blocks(&g, (const kvpool_block_id[]){3}, 1, "g");
    /* The hits (1, 2) sit at the front: allocating before touching would pop them. */
    kp_assert_fq(pool, (const kvpool_block_id[]){2, 1, 6, 5, 4}, 5, "setup");
    kp_drain(pool, &log);

    kp_seq(pool, &b, 4, 1000, 32);
    kp_append(pool, &b, 5000, 17);
    struct kvpool_hits hits;
    kvpool_block_id ids[4];
    kvpool_lookup(pool, &b, &hits, ids, 4);
    kvsim_test_assert_ids(ids, hits.num_blocks, (const kvpool_block_id[]){1, 2}, 2, "b's hits");
    cr_assert_eq(hits.num_evictable, 2, "both hits are free");
    struct kvpool_alloc_args args = {.num_new_tokens = 17, .hits = &hits};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(pool, &b, &args, &plan), KVPOOL_READY, "b fits");
    cr_assert_eq(plan.num_hit_blocks, 2, "plan: 2 hits, got %u", plan.num_hit_blocks);
    cr_assert_eq(plan.num_new_blocks, 2, "plan: 2 fresh blocks, got %u", plan.num_new_blocks);
    cr_assert_eq(plan.num_blocks_needed, 4, "plan: 2 fresh + 2 evictable hits, got %u",
                 plan.num_blocks_needed);
    cr_assert_eq(plan.cache_upto_blocks, 3, "plan: cache blocks [0,3), got %u",
                 plan.cache_upto_blocks);
    cr_assert_eq(plan.first_new_index, 0, "plan: b holds nothing yet");
    cr_assert_eq(kvpool_commit(pool, &b, &plan), 0, "commit");

    kp_assert_blocks(&b, (const kvpool_block_id[]){1, 2, 6, 5}, 4,
                     "hits touched first, then fresh blocks from the front");
    for (uint32_t i = 0; i < 4; i++)
        kp_assert_ref(pool, b.blocks[i], 1, "after commit");
    cr_assert_eq(b.num_cached_blocks, 3, "b caches its 3 full blocks, got %u", b.num_cached_blocks);
    cr_assert_eq(kp_hash_of(pool, 6), b.hashes[2], "block 6 registered under b's hash 2");
    kp_assert_unhashed(pool, 5, "b's partial block (lazily evicted)");
    cr_assert_eq(kvpool_cache_find(pool, hf2), -ENOENT, "f's hash 2 evicted with block 6");
    cr_assert_eq(kvpool_cache_find(pool, hf1), -ENOENT, "f's hash 1 evicted with block 5");
    cr_assert_eq(kvpool_cache_find(pool, hf0), 4, "f's hash 0 untouched");
    kp_assert_fq(pool, (const kvpool_block_id[]){4}, 1, "after commit");

    cr_assert_eq(kp_drain(pool, &log), 3, "two removals and one store");
    kp_assert_removed(&log.ev[0], hf2, "first pop");
    kp_assert_removed(&log.ev[1], hf1, "second pop");
    kp_assert_stored(&log.ev[2], true, b.hashes[1], (const kvpool_hash[]){b.hashes[2]}, 1,
                     "b's new block");
    cr_assert_eq(b.hashes[1], a.hashes[1], "the parent is the hit chain's last hash");
    kvsim_test_assert_pool_ok(pool, "after commit");
    kp_done(pool, &a);
    kp_done(pool, &f);
    kp_done(pool, &g);
    kp_done(pool, &b);
    kvpool_destroy(pool);
}

Test(kvpool, running_allocation_caches_with_the_previous_block_as_parent)
{
    struct kvpool *pool = kp_pool(16, true, true, 0.0);
    struct kp_evlog log;
    struct kvpool_seq a;
    kp_seq(pool, &a, 1, 1000, 20);
    kp_admit(pool, &a);
    kp_assert_blocks(&a, (const kvpool_block_id[]){1, 2}, 2, "prefill");
    cr_assert_eq(kp_drain(pool, &log), 1, "prefill stores once");
    kp_assert_stored(&log.ev[0], false, 0, (const kvpool_hash[]){a.hashes[0]}, 1,
                     "first store has no parent");

    kp_append(pool, &a, 1020, 30); /* 50 tokens, 3 full blocks */
    struct kvpool_alloc_args args = {.num_computed_tokens = 20, .num_new_tokens = 30};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(pool, &a, &args, &plan), KVPOOL_READY, "running allocation");
    cr_assert_eq(plan.first_new_index, 2, "new blocks go after the 2 held");
    cr_assert_eq(plan.num_new_blocks, 2, "50 tokens need 4 blocks, 2 held");
    cr_assert_eq(kvpool_commit(pool, &a, &plan), 0, "commit");
    kp_assert_blocks(&a, (const kvpool_block_id[]){1, 2, 3, 4}, 4, "after growth");
    cr_assert_eq(a.num_cached_blocks, 3, "3 full blocks cached");
    cr_assert_eq(kp_drain(pool, &log), 1, "growth stores once");
    kp_assert_stored(&log.ev[0], true, a.hashes[0], (const kvpool_hash[]){a.hashes[1], a.hashes[2]},
                     2, "running store");
    kvsim_test_assert_pool_ok(pool, "after growth");
    kp_done(pool, &a);
    kvpool_destroy(pool);
}

/*
 * kvpool_extend_in_place against prepare + commit, on two pools given the same history: a
 * decode appends one token per step (20 -> 60 tokens, with a max_model_len cap on one pass).
 * It applies exactly when the plan would take no block, and then leaves both pools identical
 * (references, hashes, free queue, generations, the sequence's cached blocks, the events);
 * when it declines, nothing changed.
 */
Test(kvpool, extend_in_place_equals_prepare_and_commit_when_no_block_is_needed)
{
    for (int caching = 0; caching < 2; caching++) {
        struct kvpool *pa = kp_pool(16, caching, true, 0.0), *pb = kp_pool(16, caching, true, 0.0);
        struct kvpool_seq a, b;
        kp_seq(pa, &a, 1, 1000, 20);
        kp_seq(pb, &b, 1, 1000, 20);
        kp_admit(pa, &a);
        kp_admit(pb, &b);
        struct kp_evlog la, lb;
        kp_drain(pa, &la);
        kp_drain(pb, &lb);
        uint32_t applied = 0;
        for (uint64_t nc = 20; nc < 60; nc++) {
            kp_append(pa, &a, (kvpool_token)(2000 + nc), 1);
            kp_append(pb, &b, (kvpool_token)(2000 + nc), 1);
            struct kvpool_alloc_args args = {.num_computed_tokens = nc, .num_new_tokens = 1};
            struct kvpool_plan plan;
            cr_assert_eq(kp_try(pb, &b, &args, &plan), KVPOOL_READY);
            struct kp_state before, sa, sb;
            kp_capture(pa, &before);
            bool done = kvpool_extend_in_place(pa, &a, nc, 1);
            cr_assert_eq(done, plan.num_new_blocks == 0,
                         "caching %d, %" PRIu64 " computed: in place %d, plan takes %u blocks",
                         caching, nc, done, plan.num_new_blocks);
            if (!done) {
                kp_capture(pa, &sa);
                kp_assert_same_state(&before, &sa, "declined");
                kp_extend(pa, &a, nc, 1);
            }
            applied += done;
            cr_assert_eq(kvpool_commit(pb, &b, &plan), 0);
            kp_capture(pa, &sa);
            kp_capture(pb, &sb);
            kp_assert_same_state(&sb, &sa, "after the step");
            cr_assert_eq(a.num_cached_blocks, b.num_cached_blocks, "cached blocks at %" PRIu64, nc);
            cr_assert_eq(a.num_blocks, b.num_blocks);
            cr_assert_eq(kp_drain(pa, &la), kp_drain(pb, &lb), "events at %" PRIu64, nc);
            for (size_t k = 0; k < la.n; k++) {
                cr_assert_eq(la.ev[k].type, lb.ev[k].type);
                cr_assert_eq(la.ev[k].num_hashes, lb.ev[k].num_hashes);
                cr_assert_eq(la.ev[k].hashes[0], lb.ev[k].hashes[0]);
            }
        }
        cr_assert_eq(applied, 40 - 2, "all but the two block boundaries (32, 48) apply in place");
        kvsim_test_assert_pool_ok(pa, "in place");
        kp_done(pa, &a);
        kp_done(pb, &b);
        kvpool_destroy(pa);
        kvpool_destroy(pb);
    }
}

/* The max_model_len cap and arguments prepare refuses: in place declines them unchanged. */
Test(kvpool, extend_in_place_follows_the_max_model_len_cap_and_declines_zero_tokens)
{
    struct kvpool_config cfg;
    kvpool_config_default(&cfg);
    cfg.num_blocks = 16;
    cfg.block_size = KP_BS;
    cfg.max_model_len = 40;
    struct kvpool *pool = NULL;
    cr_assert_eq(kvpool_create(&cfg, &pool), 0);
    struct kvpool_seq a;
    kp_seq(pool, &a, 1, 1000, 40);
    kp_admit(pool, &a); /* 40 tokens: 3 blocks */
    uint64_t g = kvpool_generation(pool);
    cr_assert(!kvpool_extend_in_place(pool, &a, 40, 0), "0 new tokens: prepare says -EINVAL");
    cr_assert_eq(kvpool_generation(pool), g);
    /* 60 slots capped at 40 fit in the 3 blocks held, as prepare computes it */
    struct kvpool_alloc_args args = {.num_computed_tokens = 40, .num_new_tokens = 20};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(pool, &a, &args, &plan), KVPOOL_READY);
    cr_assert_eq(plan.num_new_blocks, 0);
    cr_assert(kvpool_extend_in_place(pool, &a, 40, 20));
    cr_assert_eq(kvpool_generation(pool), g + 1);
    kp_done(pool, &a);
    kvpool_destroy(pool);
}

Test(kvpool, prepare_reports_capacity_exhausted_when_more_blocks_are_needed_than_free)
{
    struct kvpool *pool = kp_pool(5, true, false, 0.0);
    struct kvpool_seq big, fit;
    kp_seq(pool, &big, 1, 1000, 65);
    struct kp_state before, after;
    kp_capture(pool, &before);
    struct kvpool_alloc_args args = {.num_new_tokens = 65};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(pool, &big, &args, &plan), KVPOOL_CAPACITY_EXHAUSTED,
                 "65 tokens need 5 blocks, 4 free");
    cr_assert_eq(kvpool_commit(pool, &big, &plan), -EINVAL, "an exhausted plan cannot commit");
    kp_capture(pool, &after);
    kp_assert_same_state(&before, &after, "after exhausted prepare");
    cr_assert_eq(big.num_blocks, 0, "big got nothing");

    kp_seq(pool, &fit, 2, 1000, 64);
    kp_admit(pool, &fit);
    cr_assert_eq(fit.num_blocks, 4, "64 tokens take exactly the 4 free blocks");
    kp_assert_fq(pool, NULL, 0, "after fit");
    kp_done(pool, &big);
    kp_done(pool, &fit);
    kvpool_destroy(pool);
}

Test(kvpool, full_sequence_gate_counts_every_token_of_the_sequence)
{
    /* 100 tokens need 7 blocks; only 20 are scheduled now (2 blocks). */
    struct kvpool *six = kp_pool(7, true, false, 0.0);
    struct kvpool_seq s;
    kp_seq(six, &s, 1, 1000, 100);
    struct kvpool_alloc_args args = {.num_new_tokens = 20};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(six, &s, &args, &plan), KVPOOL_READY, "without the gate 2 blocks fit");
    cr_assert_eq(plan.num_new_blocks, 2, "20 tokens take 2 blocks");
    args.full_sequence_must_fit = true;
    cr_assert_eq(kp_try(six, &s, &args, &plan), KVPOOL_CAPACITY_EXHAUSTED,
                 "gate: 7 blocks for 100 tokens > 6 free");
    kp_done(six, &s);
    kvpool_destroy(six);

    struct kvpool *seven = kp_pool(8, true, false, 0.0);
    kp_seq(seven, &s, 1, 1000, 100);
    cr_assert_eq(kp_try(seven, &s, &args, &plan), KVPOOL_READY, "gate: 7 blocks fit in 7 free");
    cr_assert_eq(plan.num_new_blocks, 2, "the gate does not change what is allocated now");
    cr_assert_eq(kvpool_commit(seven, &s, &plan), 0, "commit");
    cr_assert_eq(s.num_blocks, 2, "only the scheduled tokens get blocks");
    kp_done(seven, &s);
    kvpool_destroy(seven);
}

Test(kvpool, watermark_applies_only_to_admissions_while_requests_are_scheduled)
{
    /* W = (uint64)(0.25 * 12) = 3 (of num_blocks, null block included); 11 free. */
    struct kvpool *pool = kp_pool(12, true, false, 0.25);
    struct kvpool_seq nine, eight;
    kp_seq(pool, &nine, 1, 1000, 144);  /* 9 blocks: 9 + 3 > 11 */
    kp_seq(pool, &eight, 2, 1000, 128); /* 8 blocks: 8 + 3 = 11 */
    static const struct {
        bool has_scheduled, admission;
        int want;
    } cases[] = {{true, true, KVPOOL_CAPACITY_EXHAUSTED},
                 {true, false, KVPOOL_READY},
                 {false, true, KVPOOL_READY},
                 {false, false, KVPOOL_READY}};
    for (size_t i = 0; i < 4; i++) {
        struct kvpool_alloc_args args = {.num_new_tokens = 144,
                                         .has_scheduled_reqs = cases[i].has_scheduled,
                                         .is_admission = cases[i].admission};
        struct kvpool_plan plan;
        int rc = kp_try(pool, &nine, &args, &plan);
        cr_assert_eq(rc, cases[i].want,
                     "9 of 11 blocks, has_scheduled_reqs=%d is_admission=%d: got %s, expected %s",
                     cases[i].has_scheduled, cases[i].admission,
                     kvpool_outcome_name((enum kvpool_outcome)rc),
                     kvpool_outcome_name((enum kvpool_outcome)cases[i].want));
    }
    struct kvpool_alloc_args args = {
        .num_new_tokens = 128, .has_scheduled_reqs = true, .is_admission = true};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(pool, &eight, &args, &plan), KVPOOL_READY,
                 "8 blocks + W 3 = 11 free: fits exactly (W must be 3, not 4)");
    kp_done(pool, &nine);
    kp_done(pool, &eight);
    kvpool_destroy(pool);
}

Test(kvpool, watermark_is_the_truncated_fraction_of_all_blocks)
{
    /* 0.25 * 10 = 2.5 -> W = 2 (truncated, not rounded); 9 free. */
    struct kvpool *pool = kp_pool(10, true, false, 0.25);
    struct kvpool_seq seven, eight;
    kp_seq(pool, &seven, 1, 1000, 112);
    kp_seq(pool, &eight, 2, 1000, 128);
    struct kvpool_alloc_args args = {.has_scheduled_reqs = true, .is_admission = true};
    struct kvpool_plan plan;
    args.num_new_tokens = 112;
    cr_assert_eq(kp_try(pool, &seven, &args, &plan), KVPOOL_READY, "7 + W 2 = 9 free: fits");
    args.num_new_tokens = 128;
    cr_assert_eq(kp_try(pool, &eight, &args, &plan), KVPOOL_CAPACITY_EXHAUSTED, "8 + W 2 > 9 free");
    kp_done(pool, &seven);
    kp_done(pool, &eight);
    kvpool_destroy(pool);
}

Test(kvpool, reserved_blocks_are_subtracted_from_free_capacity)
{
    struct kvpool *pool = kp_pool(10, true, false, 0.0);
    struct kvpool_seq s;
    kp_seq(pool, &s, 1, 1000, 112); /* 7 blocks of 9 free */
    static const struct {
        uint64_t reserved;
        int want;
    } cases[] = {{0, KVPOOL_READY},
                 {2, KVPOOL_READY},
                 {3, KVPOOL_CAPACITY_EXHAUSTED},
                 {UINT64_MAX, KVPOOL_CAPACITY_EXHAUSTED}};
    for (size_t i = 0; i < 4; i++) {
        struct kvpool_alloc_args args = {.num_new_tokens = 112,
                                         .reserved_blocks = cases[i].reserved};
        struct kvpool_plan plan;
        int rc = kp_try(pool, &s, &args, &plan);
        cr_assert_eq(rc, cases[i].want, "7 blocks, 9 free, %" PRIu64 " reserved: got %d",
                     cases[i].reserved, rc);
    }
    kp_done(pool, &s);
    kvpool_destroy(pool);
}

Test(kvpool, evictable_hits_consume_free_capacity)
{
    struct kvpool *pool = kp_pool(6, true, false, 0.0);
    struct kvpool_seq a, b, b_small, c, b2;
    kp_seq(pool, &a, 1, 1000, 17);
    kp_admit(pool, &a); /* [1,2], block 1 cached */
    kvpool_free(pool, &a);
    kp_assert_fq(pool, (const kvpool_block_id[]){2, 3, 4, 5, 1}, 5, "a freed");

    /* Hit block 1 is evictable: 5 fresh blocks = 5 free, but the hit also takes one. */
    kp_seq(pool, &b, 2, 1000, 16);
    kp_append(pool, &b, 5000, 80);
    struct kvpool_hits hits;
    kvpool_lookup(pool, &b, &hits, NULL, 0);
    cr_assert(hits.num_blocks == 1 && hits.num_evictable == 1, "b: 1 evictable hit");
    struct kvpool_alloc_args args = {.num_new_tokens = 80, .hits = &hits};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(pool, &b, &args, &plan), KVPOOL_CAPACITY_EXHAUSTED,
                 "5 fresh + 1 evictable hit > 5 free");
    kp_seq(pool, &b_small, 3, 1000, 16);
    kp_append(pool, &b_small, 5000, 64);
    kvpool_lookup(pool, &b_small, &hits, NULL, 0);
    args.num_new_tokens = 64;
    cr_assert_eq(kp_try(pool, &b_small, &args, &plan), KVPOOL_READY,
                 "4 fresh + 1 evictable hit = 5 free");
    cr_assert_eq(plan.num_blocks_needed, 5, "needed counts the evictable hit, got %u",
                 plan.num_blocks_needed);

    /* The same hit referenced by c: it costs nothing, and fresh = free fits. */
    kp_seq(pool, &c, 4, 1000, 16);
    kp_append(pool, &c, 6000, 1);
    cr_assert_eq(kp_admit(pool, &c), 1, "c takes block 1 as a hit");
    kp_assert_blocks(&c, (const kvpool_block_id[]){1, 2}, 2, "c");
    cr_assert_eq(kvpool_num_free_blocks(pool), 3, "3 free after c");
    kp_seq(pool, &b2, 5, 1000, 16);
    kp_append(pool, &b2, 5000, 48);
    kvpool_lookup(pool, &b2, &hits, NULL, 0);
    cr_assert(hits.num_blocks == 1 && hits.num_evictable == 0, "b2: 1 referenced hit");
    args.num_new_tokens = 48;
    cr_assert_eq(kp_try(pool, &b2, &args, &plan), KVPOOL_READY,
                 "3 fresh + referenced hit, 3 free: fits");
    cr_assert_eq(plan.num_new_blocks, 3, "3 fresh blocks");
    cr_assert_eq(plan.num_blocks_needed, 3, "a referenced hit consumes no capacity");
    cr_assert_eq(kvpool_commit(pool, &b2, &plan), 0, "commit");
    kp_assert_ref(pool, 1, 2, "shared hit");
    kp_assert_fq(pool, NULL, 0, "pool full");
    kvsim_test_assert_pool_ok(pool, "after b2");
    kp_done(pool, &a);
    kp_done(pool, &b);
    kp_done(pool, &b_small);
    kp_done(pool, &c);
    kp_done(pool, &b2);
    kvpool_destroy(pool);
}

/* ---- usage and sharing ----------------------------------------------------------------------- */

Test(kvpool, usage_is_one_minus_free_over_usable)
{
    struct kvpool *pool = kp_pool(11, true, false, 0.0);
    struct kvpool_seq a, b;
    cr_assert_float_eq(kvpool_usage(pool), 0.0, 1e-12, "empty pool");
    kp_seq(pool, &a, 1, 1000, 40);
    kp_admit(pool, &a);
    cr_assert_float_eq(kvpool_usage(pool), 0.3, 1e-12, "3 of 10 used: got %f", kvpool_usage(pool));
    kp_seq(pool, &b, 2, 1000, 32);
    kp_append(pool, &b, 6000, 8);
    kp_admit(pool, &b); /* shares 2 blocks, takes 1 */
    cr_assert_float_eq(kvpool_usage(pool), 0.4, 1e-12, "4 of 10 used: got %f", kvpool_usage(pool));
    kvpool_free(pool, &a);
    kvpool_free(pool, &b);
    cr_assert_float_eq(kvpool_usage(pool), 0.0, 1e-12, "all freed: got %f", kvpool_usage(pool));
    kp_done(pool, &a);
    kp_done(pool, &b);
    kvpool_destroy(pool);
}

Test(kvpool, shared_prefix_blocks_count_one_reference_per_sequence)
{
    struct kvpool *pool = kp_pool(11, true, false, 0.0);
    struct kvpool_seq a, b;
    kp_seq(pool, &a, 1, 1000, 40);
    kp_admit(pool, &a);
    kp_seq(pool, &b, 2, 1000, 32);
    kp_append(pool, &b, 6000, 8);
    cr_assert_eq(kp_admit(pool, &b), 2, "b hits a's two full blocks");
    kp_assert_blocks(&b, (const kvpool_block_id[]){1, 2, 4}, 3, "b");
    static const uint32_t refs[] = {0, 2, 2, 1, 1, 0};
    for (kvpool_block_id i = 0; i < 6; i++)
        kp_assert_ref(pool, i, refs[i], "both running");
    kvsim_test_assert_pool_ok(pool, "both running");
    kvpool_free(pool, &a);
    static const uint32_t refs_a[] = {0, 1, 1, 0, 1, 0};
    for (kvpool_block_id i = 0; i < 6; i++)
        kp_assert_ref(pool, i, refs_a[i], "a freed");
    kp_assert_fq(pool, (const kvpool_block_id[]){3, 5, 6, 7, 8, 9, 10}, 7, "a freed");
    kvpool_free(pool, &b);
    kp_assert_fq(pool, (const kvpool_block_id[]){4, 3, 5, 6, 7, 8, 9, 10, 2, 1}, 10, "b freed");
    kvsim_test_assert_pool_ok(pool, "both freed");
    kp_done(pool, &a);
    kp_done(pool, &b);
    kvpool_destroy(pool);
}

/* ---- reset ----------------------------------------------------------------------------------- */

Test(kvpool, reset_prefix_cache_is_busy_while_any_block_is_referenced)
{
    struct kvpool *pool = kp_pool(8, true, true, 0.0);
    struct kp_evlog log;
    struct kvpool_seq a;
    kp_seq(pool, &a, 1, 1000, 33);
    kp_admit(pool, &a);
    kp_drain(pool, &log);
    struct kp_state before, after;
    kp_capture(pool, &before);
    cr_assert_eq(kvpool_reset_prefix_cache(pool), -EBUSY, "a references blocks");
    kp_capture(pool, &after);
    kp_assert_same_state(&before, &after, "after refused reset");
    cr_assert_eq(a.num_cached_blocks, 2, "a's cached count unchanged");
    cr_assert_eq(kvpool_cache_find(pool, a.hashes[0]), 1, "hash 0 still cached");
    cr_assert_eq(kp_drain(pool, &log), 0, "a refused reset emits nothing");

    /* A transfer hold alone also keeps the cache busy. */
    kvpool_free(pool, &a);
    cr_assert_eq(kvpool_hold_block(pool, 1), 0, "hold block 1");
    kp_capture(pool, &before);
    cr_assert_eq(kvpool_reset_prefix_cache(pool), -EBUSY, "a hold references block 1");
    kp_capture(pool, &after);
    kp_assert_same_state(&before, &after, "after refused reset with a hold");
    cr_assert_eq(kvpool_release_hold(pool, 1), 0, "release");
    kp_done(pool, &a);
    kvpool_destroy(pool);
}

Test(kvpool, reset_prefix_cache_drops_every_hash_once_everything_is_free)
{
    struct kvpool *pool = kp_pool(12, true, true, 0.0);
    struct kp_evlog log;
    struct kvpool_seq a, b, d;
    kp_seq(pool, &a, 1, 1000, 49);
    kp_admit(pool, &a);
    kp_seq(pool, &b, 2, 2000, 40);
    kp_admit(pool, &b);
    kvpool_hash hashes[5] = {a.hashes[0], a.hashes[1], a.hashes[2], b.hashes[0], b.hashes[1]};
    kvpool_free(pool, &a);
    kvpool_free(pool, &b);
    kp_drain(pool, &log);
    struct kp_state before, after;
    kp_capture(pool, &before);

    cr_assert_eq(kvpool_reset_prefix_cache(pool), 0, "everything is free");
    for (kvpool_block_id blk = 0; blk < 12; blk++)
        kp_assert_unhashed(pool, blk, "after reset");
    for (int i = 0; i < 5; i++)
        cr_assert_eq(kvpool_cache_find(pool, hashes[i]), -ENOENT, "hash %d still findable", i);
    cr_assert_eq(kp_drain(pool, &log), 1, "reset emits exactly one event");
    cr_assert_eq(log.ev[0].type, KVPOOL_EVENT_CLEARED, "the event is a clear, got %s",
                 kvpool_event_type_name(log.ev[0].type));
    kp_capture(pool, &after);
    kp_assert_same_fq(&before, &after, "reset keeps the free-queue order");
    cr_assert_eq(after.num_free, 11, "everything still free");

    kp_seq(pool, &d, 3, 1000, 49);
    struct kvpool_hits hits;
    kvpool_lookup(pool, &d, &hits, NULL, 0);
    cr_assert_eq(hits.num_blocks, 0, "lookups miss after reset, got %u hits", hits.num_blocks);
    kvsim_test_assert_pool_ok(pool, "after reset");
    kp_done(pool, &a);
    kp_done(pool, &b);
    kp_done(pool, &d);
    kvpool_destroy(pool);
}

/* ---- transfer holds -------------------------------------------------------------------------- */

Test(kvpool, hold_takes_a_cached_free_block_out_of_the_queue_and_release_appends_it)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq a, r;
    kp_seq(pool, &a, 1, 1000, 40);
    kp_admit(pool, &a); /* [1,2,3] */
    kvpool_free(pool, &a);
    kp_assert_fq(pool, (const kvpool_block_id[]){3, 4, 5, 6, 7, 2, 1}, 7, "a freed");
    kvpool_hash h1 = kp_hash_of(pool, 2);

    cr_assert_eq(kvpool_hold_block(pool, 2), 0, "hold cached free block 2");
    kp_assert_ref(pool, 2, 1, "held");
    kp_assert_fq(pool, (const kvpool_block_id[]){3, 4, 5, 6, 7, 1}, 6, "held block leaves queue");
    cr_assert_eq(kp_hash_of(pool, 2), h1, "a held block keeps its hash");
    kvsim_test_assert_pool_ok(pool, "transfer hold");

    cr_assert_eq(kvpool_release_hold(pool, 2), 0, "release");
    kp_assert_ref(pool, 2, 0, "released");
    kp_assert_fq(pool, (const kvpool_block_id[]){3, 4, 5, 6, 7, 1, 2}, 7,
                 "released block goes to the back");
    kvsim_test_assert_pool_ok(pool, "after release");

    /* A hold on a referenced block adds a reference; releasing it leaves the owner's. */
    kp_seq(pool, &r, 2, 3000, 5);
    kp_admit(pool, &r);
    kp_assert_blocks(&r, (const kvpool_block_id[]){3}, 1, "r");
    cr_assert_eq(kvpool_hold_block(pool, 3), 0, "hold a referenced block");
    kp_assert_ref(pool, 3, 2, "referenced + held");
    kvsim_test_assert_pool_ok(pool, "referenced + held");
    kvpool_free(pool, &r);
    kp_assert_ref(pool, 3, 1, "hold outlives the request");
    kvsim_test_assert_pool_ok(pool, "held only");
    cr_assert_eq(kvpool_release_hold(pool, 3), 0, "release");
    kp_assert_ref(pool, 3, 0, "released");
    kp_assert_fq(pool, (const kvpool_block_id[]){3, 4, 5, 6, 7, 1, 2}, 7,
                 "an unhashed block returns to the front");
    kvsim_test_assert_pool_ok(pool, "end");
    kp_done(pool, &a);
    kp_done(pool, &r);
    kvpool_destroy(pool);
}

Test(kvpool, hold_and_release_reject_invalid_blocks)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq a;
    kp_seq(pool, &a, 1, 1000, 40);
    kp_admit(pool, &a); /* [1,2,3]; 3 is the partial block */
    kvpool_free(pool, &a);
    struct kp_state before, after;
    kp_capture(pool, &before);
    cr_assert_eq(kvpool_hold_block(pool, 3), -EINVAL, "unhashed free block");
    cr_assert_eq(kvpool_hold_block(pool, 4), -EINVAL, "never-used free block");
    cr_assert_eq(kvpool_hold_block(pool, KVPOOL_NULL_BLOCK), -EINVAL, "null block");
    cr_assert_eq(kvpool_hold_block(pool, 8), -EINVAL, "out of range");
    cr_assert_eq(kvpool_hold_block(pool, -1), -EINVAL, "negative");
    cr_assert_eq(kvpool_release_hold(pool, 2), -EINVAL, "release without a hold");
    cr_assert_eq(kvpool_release_hold(pool, KVPOOL_NULL_BLOCK), -EINVAL, "release block 0");
    kp_capture(pool, &after);
    kp_assert_same_state(&before, &after, "after rejected holds");

    struct kvpool_seq r;
    kp_seq(pool, &r, 2, 3000, 5);
    kp_admit(pool, &r);
    cr_assert_eq(kvpool_release_hold(pool, r.blocks[0]), -EINVAL,
                 "a request's reference is not a hold");
    kp_assert_ref(pool, r.blocks[0], 1, "request reference untouched");
    kvsim_test_assert_pool_ok(pool, "end");
    kp_done(pool, &a);
    kp_done(pool, &r);
    kvpool_destroy(pool);
}

/* ---- ownership checker ----------------------------------------------------------------------- */

Test(kvpool, check_passes_after_a_mix_of_operations)
{
    struct kvpool *pool = kp_pool(16, true, true, 0.0);
    struct kvpool_seq a, b, d;
    struct kp_evlog log;
    kvsim_test_assert_pool_ok(pool, "fresh");
    kp_seq(pool, &a, 1, 1000, 49);
    kp_admit(pool, &a);
    kvsim_test_assert_pool_ok(pool, "a admitted");
    kp_seq(pool, &b, 2, 1000, 32);
    kp_append(pool, &b, 6000, 10);
    kp_admit(pool, &b);
    kvsim_test_assert_pool_ok(pool, "b admitted with hits");
    kp_append(pool, &a, 1049, 20);
    kp_extend(pool, &a, 49, 20);
    kvsim_test_assert_pool_ok(pool, "a grown");
    cr_assert_eq(kvpool_hold_block(pool, a.blocks[0]), 0, "hold");
    kvsim_test_assert_pool_ok(pool, "hold");
    kp_seq(pool, &d, 99, 0, 0);
    d.owner = KVPOOL_OWNER_DEFERRED_FREE;
    cr_assert_eq(kvpool_seq_move_blocks(pool, &d, &b), 0, "move");
    kvsim_test_assert_pool_ok(pool, "b moved to deferred free");
    kvpool_free(pool, &a);
    kvsim_test_assert_pool_ok(pool, "a freed");
    kp_append(pool, &b, 7000, 3);
    kp_admit(pool, &b);
    kvsim_test_assert_pool_ok(pool, "b readmitted");
    cr_assert_eq(kvpool_release_hold(pool, 1), 0, "release hold");
    kvsim_test_assert_pool_ok(pool, "hold released");
    kvpool_free(pool, &d);
    kvpool_free(pool, &b);
    kvsim_test_assert_pool_ok(pool, "everything freed");
    kp_drain(pool, &log);
    cr_assert_eq(kvpool_reset_prefix_cache(pool), 0, "reset");
    kvsim_test_assert_pool_ok(pool, "reset");
    kp_done(pool, &a);
    kp_done(pool, &b);
    kp_done(pool, &d);
    kvsim_test_assert_pool_ok(pool, "all detached");
    kvpool_destroy(pool);
}

Test(kvpool, check_reports_an_edited_block_table_entry_as_a_ref_count_violation)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq x, a;
    kp_seq(pool, &x, 7, 9000, 5);
    kp_admit(pool, &x); /* [1] */
    kp_seq(pool, &a, 42, 1000, 40);
    kp_admit(pool, &a); /* [2,3,4], 2 and 3 cached */
    kvpool_free(pool, &x);
    kvsim_test_assert_pool_ok(pool, "before corruption");

    kvpool_block_id saved = a.blocks[2];
    a.blocks[2] = 1; /* claims free block 1 instead of its partial block 4 */
    struct kvpool_violation v;
    memset(&v, 0, sizeof v);
    cr_assert_eq(kvpool_check(pool, &v), -EUCLEAN, "corruption must be detected");
    cr_assert_str_eq(v.what, "ref_count", "rule");
    cr_assert_eq(v.block, 1, "violation names block %d, expected 1", v.block);
    cr_assert_eq(v.owner, KVPOOL_OWNER_REQUEST, "owner class %s, expected request",
                 kvpool_owner_class_name(v.owner));
    cr_assert_eq(v.owner_id, 42, "owner id %" PRIu64 ", expected 42", v.owner_id);
    cr_assert_eq(v.expected, 1, "a's table references block 1 once: expected %" PRId64, v.expected);
    cr_assert_eq(v.found, 0, "block 1's ref count is 0: found %" PRId64, v.found);

    a.blocks[2] = saved;
    kvsim_test_assert_pool_ok(pool, "restored");
    kp_done(pool, &x);
    kp_done(pool, &a);
    kvpool_destroy(pool);
}

Test(kvpool, check_reports_a_forgotten_block_table_as_a_leak_with_owner_none)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq l;
    kp_seq(pool, &l, 5, 1000, 10);
    kp_admit(pool, &l); /* one partial, unhashed block */
    kvpool_block_id blk = l.blocks[0];
    l.num_blocks = 0;
    struct kvpool_violation v;
    memset(&v, 0, sizeof v);
    cr_assert_eq(kvpool_check(pool, &v), -EUCLEAN, "the leak must be detected");
    cr_assert_str_eq(v.what, "ref_count", "rule");
    cr_assert_eq(v.block, blk, "violation names block %d, expected %d", v.block, blk);
    cr_assert_eq(v.owner, KVPOOL_OWNER_NONE, "owner class %s, expected none",
                 kvpool_owner_class_name(v.owner));
    cr_assert_eq(v.expected, 0, "nobody references it: expected %" PRId64, v.expected);
    cr_assert_eq(v.found, 1, "its ref count is 1: found %" PRId64, v.found);
    l.num_blocks = 1;
    kvsim_test_assert_pool_ok(pool, "restored");
    kp_done(pool, &l);
    kvpool_destroy(pool);
}

Test(kvpool, check_reports_a_leaked_cached_block_with_owner_none)
{
    /* A referenced block that no sequence or hold owns is a leak even if it carries a hash:
     * CACHE_ENTRY is documented as "an unreferenced block kept for its hash". */
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq l;
    kp_seq(pool, &l, 5, 1000, 40);
    kp_admit(pool, &l); /* [1,2,3], 1 and 2 cached */
    l.num_blocks = 0;
    l.num_cached_blocks = 0;
    struct kvpool_violation v;
    memset(&v, 0, sizeof v);
    cr_assert_eq(kvpool_check(pool, &v), -EUCLEAN, "the leak must be detected");
    cr_assert_str_eq(v.what, "ref_count", "rule");
    cr_assert_eq(v.block, 1, "violation names block %d, expected 1", v.block);
    cr_assert_eq(v.expected, 0, "expected %" PRId64, v.expected);
    cr_assert_eq(v.found, 1, "found %" PRId64, v.found);
    l.num_blocks = 3;
    l.num_cached_blocks = 2;
    kvsim_test_assert_pool_ok(pool, "restored");
    kp_done(pool, &l);
    kvpool_destroy(pool);
    cr_assert_eq(v.owner, KVPOOL_OWNER_NONE,
                 "leaked referenced block 1 (hashed) reported with owner class %s, expected none",
                 kvpool_owner_class_name(v.owner));
}

Test(kvpool, violation_format_names_the_block_and_the_owner_class)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq x, a, l;
    kp_seq(pool, &x, 7, 9000, 5);
    kp_admit(pool, &x);
    kp_seq(pool, &a, 42, 1000, 40);
    kp_admit(pool, &a);
    kvpool_free(pool, &x);
    kvpool_block_id saved = a.blocks[2];
    a.blocks[2] = 1;
    struct kvpool_violation v;
    char buf[256];
    cr_assert_eq(kvpool_check(pool, &v), -EUCLEAN, "corrupted");
    int n = kvpool_violation_format(&v, buf, sizeof buf);
    cr_assert_eq(n, (int)strlen(buf), "format returns the length written: %d vs %zu", n,
                 strlen(buf));
    cr_assert_not_null(strstr(buf, "block=1"), "'%s' must name block=1", buf);
    cr_assert_not_null(strstr(buf, kvpool_owner_class_name(KVPOOL_OWNER_REQUEST)),
                       "'%s' must name the owner class", buf);
    cr_assert_not_null(strstr(buf, "ref_count"), "'%s' must name the rule", buf);
    a.blocks[2] = saved;

    kp_seq(pool, &l, 5, 4000, 10);
    kp_admit(pool, &l);
    kvpool_block_id blk = l.blocks[0];
    l.num_blocks = 0;
    cr_assert_eq(kvpool_check(pool, &v), -EUCLEAN, "leak");
    kvpool_violation_format(&v, buf, sizeof buf);
    char want[32];
    snprintf(want, sizeof want, "block=%d", blk);
    cr_assert_not_null(strstr(buf, want), "'%s' must contain '%s'", buf, want);
    cr_assert_not_null(strstr(buf, kvpool_owner_class_name(KVPOOL_OWNER_NONE)),
                       "'%s' must name the owner class none", buf);
    l.num_blocks = 1;
    kvsim_test_assert_pool_ok(pool, "restored");
    kp_done(pool, &x);
    kp_done(pool, &a);
    kp_done(pool, &l);
    kvpool_destroy(pool);
}

/* ---- sequences ------------------------------------------------------------------------------- */

Test(kvpool, seq_fini_is_busy_while_the_sequence_holds_blocks)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq a;
    kp_seq(pool, &a, 1, 1000, 40);
    kp_admit(pool, &a);
    struct kp_seq_state before;
    kp_seq_capture(&a, &before);
    cr_assert_eq(kvpool_seq_fini(pool, &a), -EBUSY, "a holds 3 blocks");
    kp_assert_seq_unchanged(&before, &a, "after refused fini");
    cr_assert_eq(a.id, 1, "id kept");
    /* its references are still accounted for */
    kvsim_test_assert_pool_ok(pool, "a still attached");
    kvpool_free(pool, &a);
    cr_assert_eq(kvpool_seq_fini(pool, &a), 0, "fini after free");
    kvsim_test_assert_pool_ok(pool, "a detached");
    kvpool_destroy(pool);
}

Test(kvpool, move_blocks_transfers_references_to_a_deferred_free_sequence)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kvpool_seq a, b, d;
    kp_seq(pool, &a, 1, 1000, 40);
    kp_admit(pool, &a); /* [1,2,3], 1 and 2 cached */
    kp_seq(pool, &b, 2, 2000, 5);
    kp_admit(pool, &b); /* [4] */
    kp_seq(pool, &d, 99, 0, 0);
    d.owner = KVPOOL_OWNER_DEFERRED_FREE;
    struct kp_state before, after;
    kp_capture(pool, &before);

    cr_assert_eq(kvpool_seq_move_blocks(pool, &d, &b), 0, "move b");
    cr_assert_eq(kvpool_seq_move_blocks(pool, &d, &a), 0, "move a");
    kp_assert_blocks(&d, (const kvpool_block_id[]){4, 1, 2, 3}, 4, "d appends in order");
    cr_assert_eq(a.num_blocks, 0, "a holds nothing");
    cr_assert_eq(a.num_cached_blocks, 0, "a caches nothing");
    cr_assert_eq(b.num_blocks, 0, "b holds nothing");
    cr_assert_eq(a.num_tokens, 40, "a keeps its tokens");
    kp_capture(pool, &after);
    kp_assert_same_refs(&before, &after, "references moved, not copied or dropped");
    kp_assert_same_hashes(&before, &after, "move");
    kp_assert_same_fq(&before, &after, "move");
    kvsim_test_assert_pool_ok(pool, "after move");
    /* The checker attributes d's references to d's owner class. */
    d.blocks[0] = 1; /* block 1 now counted twice, its ref count is 1 */
    struct kvpool_violation v;
    memset(&v, 0, sizeof v);
    cr_assert_eq(kvpool_check(pool, &v), -EUCLEAN, "double reference must be detected");
    cr_assert_eq(v.block, 1, "violation names block %d, expected 1", v.block);
    cr_assert_eq(v.owner, KVPOOL_OWNER_DEFERRED_FREE, "owner class %s, expected deferred_free",
                 kvpool_owner_class_name(v.owner));
    cr_assert_eq(v.owner_id, 99, "owner id %" PRIu64 ", expected 99", v.owner_id);
    cr_assert(v.expected == 2 && v.found == 1, "expected/found %" PRId64 "/%" PRId64, v.expected,
              v.found);
    d.blocks[0] = 4;
    kvsim_test_assert_pool_ok(pool, "restored");
    cr_assert_eq(kvpool_seq_fini(pool, &a), 0, "a can detach");
    cr_assert_eq(kvpool_seq_fini(pool, &b), 0, "b can detach");
    kvsim_test_assert_pool_ok(pool, "sources detached");

    kvpool_free(pool, &d); /* released 3, 2, 1, 4 */
    kp_assert_fq(pool, (const kvpool_block_id[]){3, 4, 5, 6, 7, 2, 1}, 7, "d freed tail first");
    kvsim_test_assert_pool_ok(pool, "d freed");
    kp_done(pool, &d);
    kvpool_destroy(pool);
}

/* ---- caching off, late caching --------------------------------------------------------------- */

Test(kvpool, commit_with_caching_off_registers_no_hashes_and_records_no_events)
{
    struct kvpool *pool = kp_pool(8, false, true, 0.0);
    struct kp_evlog log;
    struct kvpool_seq a;
    kp_seq(pool, &a, 1, 1000, 49);
    struct kvpool_alloc_args args = {.num_new_tokens = 49};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(pool, &a, &args, &plan), KVPOOL_READY, "fits");
    cr_assert_eq(plan.cache_upto_blocks, 0, "nothing to cache, got %u", plan.cache_upto_blocks);
    cr_assert_eq(kvpool_commit(pool, &a, &plan), 0, "commit");
    cr_assert_eq(a.num_blocks, 4, "4 blocks");
    cr_assert_eq(a.num_cached_blocks, 0, "no cached blocks");
    for (kvpool_block_id b = 0; b < 8; b++)
        kp_assert_unhashed(pool, b, "caching off");
    for (uint32_t i = 0; i < a.num_hashes; i++)
        cr_assert_eq(kvpool_cache_find(pool, a.hashes[i]), -ENOENT, "hash %u registered", i);
    kvpool_cache_blocks(pool, &a, 49);
    for (kvpool_block_id b = 0; b < 8; b++)
        kp_assert_unhashed(pool, b, "cache_blocks with caching off");
    cr_assert_eq(kp_drain(pool, &log), 0, "caching off records no events");
    kvpool_free(pool, &a);
    cr_assert_eq(kp_drain(pool, &log), 0, "caching off records no events on free");
    kvsim_test_assert_pool_ok(pool, "end");
    kp_done(pool, &a);
    kvpool_destroy(pool);
}

Test(kvpool, cache_blocks_registers_later_blocks_with_the_right_parent)
{
    struct kvpool *pool = kp_pool(16, true, true, 0.0);
    struct kp_evlog log;
    struct kvpool_seq a, d;
    kp_seq(pool, &a, 1, 1000, 20);
    kp_admit(pool, &a); /* [1,2], block 1 cached */
    kp_drain(pool, &log);
    kp_append(pool, &a, 8000, 12); /* outputs complete block 2 */
    cr_assert_eq(a.num_hashes, 2, "32 tokens, 2 hashes");
    kp_assert_unhashed(pool, 2, "not cached before cache_blocks");
    uint64_t gen = kvpool_generation(pool);

    kvpool_cache_blocks(pool, &a, 32);
    cr_assert_eq(kp_hash_of(pool, 2), a.hashes[1], "block 2 registered");
    cr_assert_eq(a.num_cached_blocks, 2, "2 cached");
    cr_assert_gt(kvpool_generation(pool), gen, "cache_blocks is a mutation");
    cr_assert_eq(kp_drain(pool, &log), 1, "one store");
    kp_assert_stored(&log.ev[0], true, a.hashes[0], (const kvpool_hash[]){a.hashes[1]}, 1,
                     "late store");

    kvpool_cache_blocks(pool, &a, 32);
    cr_assert_eq(kp_drain(pool, &log), 0, "registering again stores nothing");
    kp_append(pool, &a, 8100, 40); /* 72 tokens, but still only 2 blocks */
    kvpool_cache_blocks(pool, &a, 72);
    cr_assert_eq(a.num_cached_blocks, 2, "cannot cache blocks the seq does not hold");
    cr_assert_eq(kp_drain(pool, &log), 0, "nothing stored");

    kp_seq(pool, &d, 2, 1000, 20);
    kp_append(pool, &d, 8000, 13);
    struct kvpool_hits hits;
    kvpool_lookup(pool, &d, &hits, NULL, 0);
    cr_assert_eq(hits.num_blocks, 2, "the late block is hittable, got %u", hits.num_blocks);
    kvsim_test_assert_pool_ok(pool, "end");
    kp_done(pool, &a);
    kp_done(pool, &d);
    kvpool_destroy(pool);
}

Test(kvpool, delayed_caching_registers_nothing_until_cache_blocks)
{
    struct kvpool *pool = kp_pool(8, true, true, 0.0);
    struct kp_evlog log;
    struct kvpool_seq a, d;
    kp_seq(pool, &a, 1, 1000, 40);
    struct kvpool_alloc_args args = {.num_new_tokens = 40, .delay_cache_blocks = true};
    struct kvpool_plan plan;
    cr_assert_eq(kp_try(pool, &a, &args, &plan), KVPOOL_READY, "fits");
    cr_assert_eq(plan.cache_upto_blocks, 0, "delayed: nothing cached at commit");
    cr_assert_eq(kvpool_commit(pool, &a, &plan), 0, "commit");
    cr_assert_eq(a.num_cached_blocks, 0, "nothing cached");
    cr_assert_eq(kp_drain(pool, &log), 0, "no store yet");
    kp_seq(pool, &d, 2, 1000, 40);
    struct kvpool_hits hits;
    kvpool_lookup(pool, &d, &hits, NULL, 0);
    cr_assert_eq(hits.num_blocks, 0, "not hittable yet");

    kvpool_cache_blocks(pool, &a, 40);
    cr_assert_eq(a.num_cached_blocks, 2, "2 full blocks cached");
    cr_assert_eq(kp_drain(pool, &log), 1, "one store");
    kp_assert_stored(&log.ev[0], false, 0, (const kvpool_hash[]){a.hashes[0], a.hashes[1]}, 2,
                     "store from block 0");
    kvpool_lookup(pool, &d, &hits, NULL, 0);
    cr_assert_eq(hits.num_blocks, 2, "hittable now");
    kvsim_test_assert_pool_ok(pool, "end");
    kp_done(pool, &a);
    kp_done(pool, &d);
    kvpool_destroy(pool);
}

/* ---- kvpool_abort: aborted and dropped plans are invisible ----------------------------------- */

/*
 * The fixture: 8 blocks (7 usable), events on.
 *   a (tokens 1000..) took [1,2,3] and cached 1, 2; f (2000..) took [3,4,5] and cached all;
 *   both freed; g (3000.., running) took [6,7] and cached 6. Free queue [2,1,5,4,3], all hashed.
 *   s = a's 32 tokens + 17 more: 2 evictable hits (1, 2); committing would touch them, pop 5
 *   and 4 (evicting f's hashes 2 and 1) and cache block 5 under s's hash 2.
 *   g grows to 48 tokens: committing would pop 2 (evicting a's hash 1) and cache 7 and 2.
 *   o has s's tokens and only observes (lookup).
 */
enum { AFX_PROBES = 9 };

struct afx {
    struct kvpool *pool;
    struct kvpool_seq g, s, o;
    kvpool_hash ha0, ha1, hf0, hf1, hf2, hg0;
    kvpool_hash probe[AFX_PROBES];
    kvpool_block_id probe_found[AFX_PROBES];
    struct kp_state before;
    struct kp_seq_state s_before, g_before;
    struct kvpool_hits s_hits, o_hits;
    kvpool_block_id s_ids[4], o_ids[4];
};

static void afx_setup(struct afx *fx)
{
    memset(fx, 0, sizeof *fx);
    fx->pool = kp_pool(8, true, true, 0.0);
    struct kvpool *pool = fx->pool;
    struct kvpool_seq a, f;
    kp_seq(pool, &a, 1, 1000, 33);
    kp_admit(pool, &a);
    kvpool_free(pool, &a);
    kp_seq(pool, &f, 2, 2000, 48);
    kp_admit(pool, &f);
    kp_assert_blocks(&f, (const kvpool_block_id[]){3, 4, 5}, 3, "fixture f");
    kvpool_free(pool, &f);
    kp_seq(pool, &fx->g, 3, 3000, 17);
    kp_admit(pool, &fx->g);
    kp_assert_blocks(&fx->g, (const kvpool_block_id[]){6, 7}, 2, "fixture g");
    kp_assert_fq(pool, (const kvpool_block_id[]){2, 1, 5, 4, 3}, 5, "fixture");
    fx->ha0 = a.hashes[0];
    fx->ha1 = a.hashes[1];
    fx->hf0 = f.hashes[0];
    fx->hf1 = f.hashes[1];
    fx->hf2 = f.hashes[2];
    fx->hg0 = fx->g.hashes[0];
    kp_done(pool, &a);
    kp_done(pool, &f);

    kp_seq(pool, &fx->s, 4, 1000, 32);
    kp_append(pool, &fx->s, 5000, 17);
    kp_seq(pool, &fx->o, 5, 1000, 32);
    kp_append(pool, &fx->o, 5000, 17);
    kp_append(pool, &fx->g, 3017, 31);

    const kvpool_hash probes[AFX_PROBES] = {fx->ha0,         fx->ha1,         fx->hf0,
                                            fx->hf1,         fx->hf2,         fx->hg0,
                                            fx->s.hashes[2], fx->g.hashes[1], fx->g.hashes[2]};
    for (int i = 0; i < AFX_PROBES; i++) {
        fx->probe[i] = probes[i];
        fx->probe_found[i] = kvpool_cache_find(pool, probes[i]);
    }
    struct kp_evlog log;
    kp_drain(pool, &log);
    kp_capture(pool, &fx->before);
    kp_seq_capture(&fx->s, &fx->s_before);
    kp_seq_capture(&fx->g, &fx->g_before);
    kvpool_lookup(pool, &fx->s, &fx->s_hits, fx->s_ids, 4);
    kvpool_lookup(pool, &fx->o, &fx->o_hits, fx->o_ids, 4);
    kvsim_test_assert_ids(fx->o_ids, fx->o_hits.num_blocks, (const kvpool_block_id[]){1, 2}, 2,
                          "fixture: o's hits");
    cr_assert_eq(fx->o_hits.num_evictable, 2, "fixture: both hits evictable");
    kvsim_test_assert_pool_ok(pool, "fixture");
}

/* Prepares s's admission and g's growth against the fixture state; both READY. */
static void afx_prepare(struct afx *fx, struct kvpool_plan *sp, struct kvpool_plan *gp)
{
    struct kvpool_hits hits;
    kvpool_lookup(fx->pool, &fx->s, &hits, NULL, 0);
    struct kvpool_alloc_args sa = {.num_new_tokens = 17, .hits = &hits};
    cr_assert_eq(kp_try(fx->pool, &fx->s, &sa, sp), KVPOOL_READY, "s's admission fits");
    cr_assert(sp->num_hit_blocks == 2 && sp->num_new_blocks == 2 && sp->num_blocks_needed == 4 &&
                  sp->cache_upto_blocks == 3,
              "s's plan: hits %u new %u needed %u cache_upto %u", sp->num_hit_blocks,
              sp->num_new_blocks, sp->num_blocks_needed, sp->cache_upto_blocks);
    struct kvpool_alloc_args ga = {.num_computed_tokens = 17, .num_new_tokens = 31};
    cr_assert_eq(kp_try(fx->pool, &fx->g, &ga, gp), KVPOOL_READY, "g's growth fits");
    cr_assert(gp->num_new_blocks == 1 && gp->cache_upto_blocks == 3 && gp->first_new_index == 2,
              "g's plan: new %u cache_upto %u first_new_index %u", gp->num_new_blocks,
              gp->cache_upto_blocks, gp->first_new_index);
}

enum afx_end { AFX_ABORT, AFX_DROP };

/* Prepares both plans into locals, then aborts them or lets them go out of scope. */
static void afx_prepare_and_end(struct afx *fx, enum afx_end end)
{
    struct kvpool_plan sp, gp;
    afx_prepare(fx, &sp, &gp);
    if (end == AFX_ABORT) {
        kvpool_abort(&sp);
        kvpool_abort(&gp);
    }
}

static const char *afx_name(enum afx_end end) { return end == AFX_ABORT ? "abort" : "drop"; }

static void afx_teardown(struct afx *fx)
{
    kvsim_test_assert_pool_ok(fx->pool, "teardown");
    kp_done(fx->pool, &fx->g);
    kp_done(fx->pool, &fx->s);
    kp_done(fx->pool, &fx->o);
    kvpool_destroy(fx->pool);
}

/* (a) no ref-count delta on any block. */
static void afx_assert_refs(struct afx *fx, enum afx_end end)
{
    struct kp_state now;
    kp_capture(fx->pool, &now);
    kp_assert_same_refs(&fx->before, &now, afx_name(end));
}

/* (b) no cache visibility or prefix credit. */
static void afx_assert_cache_view(struct afx *fx, enum afx_end end)
{
    const char *what = afx_name(end);
    struct kvpool_hits hits;
    kvpool_block_id ids[4];
    kvpool_lookup(fx->pool, &fx->o, &hits, ids, 4);
    kvsim_test_assert_ids(ids, hits.num_blocks, fx->o_ids, fx->o_hits.num_blocks, "o's hits");
    cr_assert_eq(hits.num_evictable, fx->o_hits.num_evictable, "%s: o's evictable hits %u -> %u",
                 what, fx->o_hits.num_evictable, hits.num_evictable);
    kvpool_lookup(fx->pool, &fx->s, &hits, ids, 4);
    kvsim_test_assert_ids(ids, hits.num_blocks, fx->s_ids, fx->s_hits.num_blocks, "s's hits");
    cr_assert_eq(hits.num_evictable, fx->s_hits.num_evictable, "%s: s's evictable hits", what);
    for (int i = 0; i < AFX_PROBES; i++)
        cr_assert_eq(kvpool_cache_find(fx->pool, fx->probe[i]), fx->probe_found[i],
                     "%s: cache_find(probe %d) %d -> %d", what, i, fx->probe_found[i],
                     kvpool_cache_find(fx->pool, fx->probe[i]));
    struct kp_state now;
    kp_capture(fx->pool, &now);
    kp_assert_same_fq(&fx->before, &now, what);
    /* No credit: preparing again yields the same plan. */
    struct kvpool_plan sp, gp;
    afx_prepare(fx, &sp, &gp);
}

/* (c) no registration. */
static void afx_assert_registration(struct afx *fx, enum afx_end end)
{
    struct kp_state now;
    kp_capture(fx->pool, &now);
    kp_assert_same_hashes(&fx->before, &now, afx_name(end));
}

/* (d) no Stored/Removed event. */
static void afx_assert_no_events(struct afx *fx, enum afx_end end)
{
    struct kp_evlog log;
    size_t n = kp_drain(fx->pool, &log);
    cr_assert_eq(n, 0, "%s: %zu events recorded (first: %s)", afx_name(end), n,
                 n ? kvpool_event_type_name(log.ev[0].type) : "-");
}

/* (e) the sequences are unchanged. */
static void afx_assert_seqs(struct afx *fx, enum afx_end end)
{
    kp_assert_seq_unchanged(&fx->s_before, &fx->s, afx_name(end));
    kp_assert_seq_unchanged(&fx->g_before, &fx->g, afx_name(end));
}

/* (f) the generation is unchanged. */
static void afx_assert_generation(struct afx *fx, enum afx_end end)
{
    cr_assert_eq(kvpool_generation(fx->pool), fx->before.generation,
                 "%s: generation %" PRIu64 " -> %" PRIu64, afx_name(end), fx->before.generation,
                 kvpool_generation(fx->pool));
    cr_assert_eq(kvpool_capacity_generation(fx->pool), fx->before.capacity_generation,
                 "%s: capacity generation changed", afx_name(end));
}

#define AFX_TEST(name, end, check)                                                                 \
    Test(kvpool_abort, name)                                                                       \
    {                                                                                              \
        struct afx fx;                                                                             \
        afx_setup(&fx);                                                                            \
        afx_prepare_and_end(&fx, end);                                                             \
        check(&fx, end);                                                                           \
        afx_teardown(&fx);                                                                         \
    }

AFX_TEST(aborted_plan_changes_no_ref_count, AFX_ABORT, afx_assert_refs)
AFX_TEST(dropped_plan_changes_no_ref_count, AFX_DROP, afx_assert_refs)
AFX_TEST(aborted_plan_gives_no_cache_visibility_or_prefix_credit, AFX_ABORT, afx_assert_cache_view)
AFX_TEST(dropped_plan_gives_no_cache_visibility_or_prefix_credit, AFX_DROP, afx_assert_cache_view)
AFX_TEST(aborted_plan_registers_no_hash, AFX_ABORT, afx_assert_registration)
AFX_TEST(dropped_plan_registers_no_hash, AFX_DROP, afx_assert_registration)
AFX_TEST(aborted_plan_emits_no_event, AFX_ABORT, afx_assert_no_events)
AFX_TEST(dropped_plan_emits_no_event, AFX_DROP, afx_assert_no_events)
AFX_TEST(aborted_plan_leaves_the_sequences_unchanged, AFX_ABORT, afx_assert_seqs)
AFX_TEST(dropped_plan_leaves_the_sequences_unchanged, AFX_DROP, afx_assert_seqs)
AFX_TEST(aborted_plan_leaves_the_generation_unchanged, AFX_ABORT, afx_assert_generation)
AFX_TEST(dropped_plan_leaves_the_generation_unchanged, AFX_DROP, afx_assert_generation)

Test(kvpool_abort, control_committing_the_admission_plan_changes_every_observed_aspect)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool *pool = fx.pool;
    struct kvpool_plan sp, gp;
    afx_prepare(&fx, &sp, &gp);
    cr_assert_eq(kvpool_commit(pool, &fx.s, &sp), 0, "commit s");

    /* (a) refs: hits 1, 2 touched, fresh 5, 4 taken. */
    static const kvpool_block_id took[] = {1, 2, 5, 4};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(fx.before.ref[took[i]], 0, "block %d was free", took[i]);
        kp_assert_ref(pool, took[i], 1, "after commit");
    }
    /* (b) visibility: o now hits 3 referenced blocks; f's hashes gone; the queue shrank. */
    struct kvpool_hits hits;
    kvpool_block_id ids[4];
    kvpool_lookup(pool, &fx.o, &hits, ids, 4);
    kvsim_test_assert_ids(ids, hits.num_blocks, (const kvpool_block_id[]){1, 2, 5}, 3,
                          "o after commit");
    cr_assert_eq(hits.num_evictable, 0, "o's hits are all referenced now");
    cr_assert_eq(kvpool_cache_find(pool, fx.hf2), -ENOENT, "f's hash 2 evicted");
    cr_assert_eq(kvpool_cache_find(pool, fx.hf1), -ENOENT, "f's hash 1 evicted");
    cr_assert_eq(kvpool_cache_find(pool, fx.s.hashes[2]), 5, "s's hash 2 visible");
    kp_assert_fq(pool, (const kvpool_block_id[]){3}, 1, "after commit");
    /* (c) registration. */
    cr_assert_eq(kp_hash_of(pool, 5), fx.s.hashes[2], "block 5 re-registered");
    kp_assert_unhashed(pool, 4, "block 4 evicted");
    /* (d) events. */
    struct kp_evlog log;
    cr_assert_eq(kp_drain(pool, &log), 3, "two removals and a store");
    kp_assert_removed(&log.ev[0], fx.hf2, "pop 5");
    kp_assert_removed(&log.ev[1], fx.hf1, "pop 4");
    kp_assert_stored(&log.ev[2], true, fx.ha1, (const kvpool_hash[]){fx.s.hashes[2]}, 1, "s");
    /* (e) the sequence. */
    kp_assert_blocks(&fx.s, took, 4, "s after commit");
    cr_assert_eq(fx.s.num_cached_blocks, 3, "s cached 3");
    /* (f) generation. */
    cr_assert_gt(kvpool_generation(pool), fx.before.generation, "commit bumps the generation");

    cr_assert_eq(kvpool_commit(pool, &fx.g, &gp), -ESTALE, "g's plan is stale now");
    afx_teardown(&fx);
}

Test(kvpool_abort, control_committing_the_running_plan_changes_its_block_table)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool *pool = fx.pool;
    struct kvpool_plan sp, gp;
    afx_prepare(&fx, &sp, &gp);
    cr_assert_eq(kvpool_commit(pool, &fx.g, &gp), 0, "commit g");
    kp_assert_blocks(&fx.g, (const kvpool_block_id[]){6, 7, 2}, 3, "g after commit");
    cr_assert_eq(fx.g.num_cached_blocks, 3, "g cached 3");
    kp_assert_ref(pool, 2, 1, "g took block 2");
    cr_assert_eq(kp_hash_of(pool, 2), fx.g.hashes[2], "block 2 re-registered for g");
    cr_assert_eq(kp_hash_of(pool, 7), fx.g.hashes[1], "block 7 registered for g");
    struct kp_evlog log;
    cr_assert_eq(kp_drain(pool, &log), 2, "one removal and a store");
    kp_assert_removed(&log.ev[0], fx.ha1, "pop 2");
    kp_assert_stored(&log.ev[1], true, fx.hg0,
                     (const kvpool_hash[]){fx.g.hashes[1], fx.g.hashes[2]}, 2, "g");
    struct kvpool_hits hits;
    kvpool_lookup(pool, &fx.o, &hits, NULL, 0);
    cr_assert_eq(hits.num_blocks, 1, "a's hash 1 evicted: o hits only block 1");
    cr_assert_gt(kvpool_generation(pool), fx.before.generation, "commit bumps the generation");
    cr_assert_eq(kvpool_commit(pool, &fx.s, &sp), -ESTALE, "s's plan is stale now");
    afx_teardown(&fx);
}

Test(kvpool_abort, commit_after_an_intervening_commit_is_stale_and_changes_nothing)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool_plan sp, gp;
    afx_prepare(&fx, &sp, &gp);
    cr_assert_eq(kvpool_commit(fx.pool, &fx.g, &gp), 0, "commit g");
    struct kp_evlog log;
    kp_drain(fx.pool, &log);
    struct kp_state mid, after;
    struct kp_seq_state s_mid;
    kp_capture(fx.pool, &mid);
    kp_seq_capture(&fx.s, &s_mid);
    cr_assert_eq(kvpool_commit(fx.pool, &fx.s, &sp), -ESTALE, "s's plan predates g's commit");
    kp_capture(fx.pool, &after);
    kp_assert_same_state(&mid, &after, "after stale commit");
    kp_assert_seq_unchanged(&s_mid, &fx.s, "after stale commit");
    cr_assert_eq(kp_drain(fx.pool, &log), 0, "a stale commit emits nothing");
    /* Re-planning against the new state works. */
    cr_assert_eq(kp_admit(fx.pool, &fx.s), 1, "s re-planned: only block 1 is still a hit");
    afx_teardown(&fx);
}

Test(kvpool_abort, commit_after_an_intervening_free_is_stale_and_changes_nothing)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool_plan sp, gp;
    afx_prepare(&fx, &sp, &gp);
    kvpool_free(fx.pool, &fx.g);
    struct kp_state mid, after;
    struct kp_seq_state s_mid;
    kp_capture(fx.pool, &mid);
    kp_seq_capture(&fx.s, &s_mid);
    cr_assert_eq(kvpool_commit(fx.pool, &fx.s, &sp), -ESTALE, "s's plan predates g's free");
    kp_capture(fx.pool, &after);
    kp_assert_same_state(&mid, &after, "after stale commit");
    kp_assert_seq_unchanged(&s_mid, &fx.s, "after stale commit");
    struct kp_evlog log;
    cr_assert_eq(kp_drain(fx.pool, &log), 0, "nothing emitted");
    afx_teardown(&fx);
}

Test(kvpool_abort, prepare_with_hits_from_an_older_pool_state_is_stale)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool_hits old;
    kvpool_lookup(fx.pool, &fx.s, &old, NULL, 0);
    cr_assert_eq(old.num_blocks, 2, "s has 2 hits");
    kvpool_free(fx.pool, &fx.g);
    struct kp_state mid, after;
    kp_capture(fx.pool, &mid);
    struct kvpool_alloc_args args = {.num_new_tokens = 17, .hits = &old};
    struct kvpool_plan plan;
    cr_assert_eq(kvpool_prepare(fx.pool, &fx.s, &args, &plan), -ESTALE, "stale hits");
    kp_capture(fx.pool, &after);
    kp_assert_same_state(&mid, &after, "after stale prepare");
    struct kvpool_hits fresh;
    kvpool_lookup(fx.pool, &fx.s, &fresh, NULL, 0);
    args.hits = &fresh;
    cr_assert_eq(kp_try(fx.pool, &fx.s, &args, &plan), KVPOOL_READY, "fresh hits are accepted");
    afx_teardown(&fx);
}

Test(kvpool_abort, committing_the_same_plan_twice_is_einval)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool_plan sp, gp;
    afx_prepare(&fx, &sp, &gp);
    cr_assert_eq(kvpool_commit(fx.pool, &fx.s, &sp), 0, "first commit");
    struct kp_evlog log;
    kp_drain(fx.pool, &log);
    struct kp_state mid, after;
    struct kp_seq_state s_mid;
    kp_capture(fx.pool, &mid);
    kp_seq_capture(&fx.s, &s_mid);
    cr_assert_eq(kvpool_commit(fx.pool, &fx.s, &sp), -EINVAL, "a plan commits once");
    kp_capture(fx.pool, &after);
    kp_assert_same_state(&mid, &after, "after second commit");
    kp_assert_seq_unchanged(&s_mid, &fx.s, "after second commit");
    cr_assert_eq(kp_drain(fx.pool, &log), 0, "nothing emitted");
    afx_teardown(&fx);
}

Test(kvpool_abort, commit_after_abort_is_refused)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool_plan sp, gp;
    afx_prepare(&fx, &sp, &gp);
    kvpool_abort(&sp);
    cr_assert_eq(kvpool_commit(fx.pool, &fx.s, &sp), -EINVAL, "an aborted plan cannot commit");
    struct kp_state now;
    kp_capture(fx.pool, &now);
    kp_assert_same_state(&fx.before, &now, "after refused commit");
    kp_assert_seq_unchanged(&fx.s_before, &fx.s, "after refused commit");
    afx_teardown(&fx);
}

Test(kvpool_abort, prepare_with_zero_new_tokens_and_no_external_tokens_is_einval)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool_hits hits;
    kvpool_lookup(fx.pool, &fx.s, &hits, NULL, 0);
    struct kvpool_alloc_args args = {.num_new_tokens = 0, .hits = &hits};
    struct kvpool_plan plan;
    cr_assert_eq(kvpool_prepare(fx.pool, &fx.s, &args, &plan), -EINVAL, "s: 0 new tokens");
    struct kvpool_alloc_args gargs = {.num_computed_tokens = 17, .num_new_tokens = 0};
    cr_assert_eq(kvpool_prepare(fx.pool, &fx.g, &gargs, &plan), -EINVAL, "g: 0 new tokens");
    struct kp_state now;
    kp_capture(fx.pool, &now);
    kp_assert_same_state(&fx.before, &now, "after invalid prepares");
    /* Control: 0 new tokens is legal with external tokens. */
    args.num_external_computed_tokens = 16;
    cr_assert_eq(kp_try(fx.pool, &fx.s, &args, &plan), KVPOOL_READY, "external tokens only");
    afx_teardown(&fx);
}

Test(kvpool_abort, prepare_with_hits_longer_than_the_sequence_is_einval)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool_seq shortseq;
    kp_seq(fx.pool, &shortseq, 6, 1000, 20); /* one full block */
    struct kvpool_hits hits;
    kvpool_lookup(fx.pool, &fx.o, &hits, NULL, 0); /* 2 hits */
    struct kvpool_alloc_args args = {.num_new_tokens = 4, .hits = &hits};
    struct kvpool_plan plan;
    cr_assert_eq(kvpool_prepare(fx.pool, &shortseq, &args, &plan), -EINVAL,
                 "2 hit blocks for a 1-hash sequence");
    kp_done(fx.pool, &shortseq);
    afx_teardown(&fx);
}

Test(kvpool_abort, commit_with_a_plan_prepared_for_another_sequence_is_einval)
{
    struct afx fx;
    afx_setup(&fx);
    struct kvpool_plan sp, gp;
    afx_prepare(&fx, &sp, &gp);
    struct kp_seq_state o_before;
    kp_seq_capture(&fx.o, &o_before);
    cr_assert_eq(kvpool_commit(fx.pool, &fx.o, &sp), -EINVAL, "s's plan committed onto o");
    struct kp_state now;
    kp_capture(fx.pool, &now);
    kp_assert_same_state(&fx.before, &now, "after misdirected commit");
    kp_assert_seq_unchanged(&o_before, &fx.o, "o after misdirected commit");
    kp_assert_seq_unchanged(&fx.s_before, &fx.s, "s after misdirected commit");
    struct kp_evlog log;
    cr_assert_eq(kp_drain(fx.pool, &log), 0, "nothing emitted");
    cr_assert_eq(kvpool_commit(fx.pool, &fx.s, &sp), 0, "the plan still commits to its own seq");
    afx_teardown(&fx);
}

/* ---- capacity held by in-flight copies: BLOCKED_ON_OFFLOAD ------------------------------------
 */

struct kp_stored {
    uint32_t calls, n;
    kvpool_block_id blocks[KP_MAXB];
    kvpool_hash hashes[KP_MAXB];
};

static void kp_on_stored(void *ctx, const kvpool_block_id *blocks, const kvpool_hash *hashes,
                         uint32_t n)
{
    struct kp_stored *s = ctx;
    s->calls++;
    for (uint32_t i = 0; i < n && s->n < KP_MAXB; i++, s->n++) {
        s->blocks[s->n] = blocks[i];
        s->hashes[s->n] = hashes[i];
    }
}

Test(kvpool, store_hook_sees_every_block_entering_the_cache_with_its_hash)
{
    struct kvpool *pool = kp_pool(8, true, false, 0.0);
    struct kp_stored st = {0};
    kvpool_set_store_hook(pool, kp_on_stored, &st);
    struct kvpool_seq a, b;
    kp_seq(pool, &a, 1, 1000, 40); /* 2 full blocks + a partial one */
    kp_admit(pool, &a);
    cr_assert_eq(st.calls, 1, "one Stored run for a's admission, got %u", st.calls);
    kvsim_test_assert_ids(st.blocks, st.n, (const kvpool_block_id[]){1, 2}, 2, "stored blocks");
    cr_assert_eq(st.hashes[0], a.hashes[0], "hash of block 0");
    cr_assert_eq(st.hashes[1], a.hashes[1], "hash of block 1");
    /* A full hit stores nothing new. */
    kp_seq(pool, &b, 2, 1000, 33);
    kp_admit(pool, &b);
    cr_assert_eq(st.n, 2, "hits are not stored again (got %u blocks)", st.n);
    kvpool_set_store_hook(pool, NULL, NULL);
    kp_done(pool, &a);
    kp_done(pool, &b);
    kvpool_destroy(pool);
}

/* 8 usable blocks; a holds [1..4] (4 full blocks) then frees them while copies hold 1..3. */
static struct kvpool *kp_pool_with_held(struct kvpool_seq *a)
{
    struct kvpool *pool = kp_pool(9, true, false, 0.0);
    kp_seq(pool, a, 1, 1000, 64);
    kp_admit(pool, a);
    for (kvpool_block_id blk = 1; blk <= 3; blk++)
        cr_assert_eq(kvpool_hold_block(pool, blk), 0, "hold %d", blk);
    kvpool_free(pool, a);
    cr_assert_eq(kvpool_num_free_blocks(pool), 5, "4 free + a's unheld block");
    cr_assert_eq(kvpool_num_held_only_blocks(pool), 3, "blocks 1..3 are held only");
    kvsim_test_assert_pool_ok(pool, "held only");
    return pool;
}

Test(kvpool, shortfall_covered_by_held_blocks_is_blocked_on_offload_and_changes_nothing)
{
    struct kvpool_seq a, r;
    struct kvpool *pool = kp_pool_with_held(&a);
    kp_seq(pool, &r, 2, 5000, 7 * KP_BS); /* needs 7 blocks: 5 free, 2 short, 3 held */
    struct kp_state before, after;
    kp_capture(pool, &before);
    uint64_t gen = kvpool_generation(pool);
    struct kvpool_alloc_args args = {.num_new_tokens = 7 * KP_BS, .is_admission = true};
    struct kvpool_plan plan;
    int rc = kvpool_prepare(pool, &r, &args, &plan);
    cr_assert_eq(rc, KVPOOL_BLOCKED_ON_OFFLOAD, "got %s",
                 kvpool_outcome_name((enum kvpool_outcome)rc));
    cr_assert_eq(plan.num_blocks_short, 2, "2 blocks short, got %u", plan.num_blocks_short);
    kp_capture(pool, &after);
    kp_assert_same_state(&before, &after, "a blocked prepare is invisible");
    cr_assert_eq(kvpool_generation(pool), gen, "generation unchanged");
    cr_assert_eq(kvpool_commit(pool, &r, &plan), -EINVAL, "a blocked plan cannot commit");
    cr_assert_eq(r.num_blocks, 0, "r holds nothing");

    /* Beyond what the holds would return it is plain exhaustion. */
    args.num_new_tokens = 9 * KP_BS;
    kvpool_seq_append_repeat(pool, &r, 7, 2 * KP_BS);
    rc = kvpool_prepare(pool, &r, &args, &plan);
    cr_assert_eq(rc, KVPOOL_CAPACITY_EXHAUSTED, "got %s",
                 kvpool_outcome_name((enum kvpool_outcome)rc));
    cr_assert_eq(plan.num_blocks_short, 4, "4 short, got %u", plan.num_blocks_short);

    /* When the copies end, the same request fits. */
    args.num_new_tokens = 7 * KP_BS;
    for (kvpool_block_id blk = 1; blk <= 3; blk++)
        cr_assert_eq(kvpool_release_hold(pool, blk), 0, "release %d", blk);
    cr_assert_eq(kvpool_num_held_only_blocks(pool), 0, "nothing held");
    cr_assert_gt(kvpool_capacity_generation(pool), plan.capacity_generation,
                 "releases move the capacity generation");
    rc = kvpool_prepare(pool, &r, &args, &plan);
    cr_assert_eq(rc, KVPOOL_READY, "got %s", kvpool_outcome_name((enum kvpool_outcome)rc));
    cr_assert_eq(kvpool_commit(pool, &r, &plan), 0, "commit");
    kvsim_test_assert_pool_ok(pool, "end");
    kp_done(pool, &a);
    kp_done(pool, &r);
    kvpool_destroy(pool);
}

Test(kvpool, held_only_count_tracks_holds_refs_and_hits)
{
    struct kvpool_seq a, b;
    struct kvpool *pool = kp_pool_with_held(&a);
    /* b hits the held blocks: they are referenced by a request again, no longer held only. */
    kp_seq(pool, &b, 2, 1000, 40);
    kp_admit(pool, &b);
    cr_assert_eq(kvpool_num_held_only_blocks(pool), 1, "block 3 is still held only");
    kvsim_test_assert_pool_ok(pool, "hit on held blocks");
    kvpool_free(pool, &b);
    cr_assert_eq(kvpool_num_held_only_blocks(pool), 3, "held only again after b frees");
    cr_assert_eq(kvpool_hold_block(pool, 1), 0, "a second hold");
    cr_assert_eq(kvpool_num_held_only_blocks(pool), 3, "two holds, still held only");
    for (kvpool_block_id blk = 1; blk <= 3; blk++)
        cr_assert_eq(kvpool_release_hold(pool, blk), 0, "release %d", blk);
    cr_assert_eq(kvpool_num_held_only_blocks(pool), 1, "block 1 keeps one hold");
    cr_assert_eq(kvpool_release_hold(pool, 1), 0, "release the second hold");
    cr_assert_eq(kvpool_num_held_only_blocks(pool), 0, "none");
    kvsim_test_assert_pool_ok(pool, "end");
    kp_done(pool, &a);
    kp_done(pool, &b);
    kvpool_destroy(pool);
}

Test(kvpool, legacy_partial_commit_keeps_blocks_from_a_blocked_attempt)
{
    struct kvpool_seq a, r;
    struct kvpool *pool = kp_pool_with_held(&a);
    kp_seq(pool, &r, 2, 5000, 7 * KP_BS);
    struct kvpool_alloc_args args = {.num_new_tokens = 7 * KP_BS, .is_admission = true};
    struct kvpool_plan plan;
    cr_assert_eq(kvpool_prepare(pool, &r, &args, &plan), KVPOOL_BLOCKED_ON_OFFLOAD, "blocked");
    cr_assert_eq(kvpool_commit_partial_legacy(pool, &r, &plan), 5, "takes the 5 free blocks");
    cr_assert_eq(r.num_blocks, 5, "r keeps a partial allocation");
    cr_assert_eq(kvpool_num_free_blocks(pool), 0, "nothing free");
    kvsim_test_assert_pool_ok(pool, "partial allocation is still owned");
    struct kvpool_plan ready = {.outcome = KVPOOL_READY, .seq = &r};
    cr_assert_eq(kvpool_commit_partial_legacy(pool, &r, &ready), -EINVAL, "only blocked plans");
    kp_done(pool, &a);
    for (kvpool_block_id blk = 1; blk <= 3; blk++)
        kvpool_release_hold(pool, blk);
    kp_done(pool, &r);
    kvpool_destroy(pool);
}
