/*
 * test_kvpool_scenarios.c - upstream vLLM prefix-caching tests ported to the G1 block pool.
 *
 * Ported from tests/v1/core/test_prefix_caching.py (see shared/conformance/vllm-scenarios.md
 * section D and shared/reference/vllm-semantics.md sections 7-9). Each test replays one upstream
 * test at the KV-manager level: get_computed_blocks is kvpool_lookup, allocate_slots is
 * kvpool_prepare + kvpool_commit, free is kvpool_free. Every scenario ends with kvpool_check.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvpool/kvpool.h"
#include "kvpool/kvpool_internal.h"

#include "common.h"

TestSuite(kvpool_scenarios);

enum { SCN_MAX_TOKENS = 256, SCN_MAX_BLOCKS = 32, SCN_MAX_EVENTS = 16 };

/* ---- token lists --------------------------------------------------------------------------- */

struct scn_tokens {
    kvpool_token ids[SCN_MAX_TOKENS];
    size_t n;
};

/* Appends count copies of value ([value]*count). */
static void scn_tokens_repeat(struct scn_tokens *t, kvpool_token value, size_t count)
{
    cr_assert_leq(t->n + count, (size_t)SCN_MAX_TOKENS, "token list overflow");
    for (size_t i = 0; i < count; i++)
        t->ids[t->n++] = value;
}

/* Appends start .. end-1 (range(start, end)). */
static void scn_tokens_range(struct scn_tokens *t, kvpool_token start, kvpool_token end)
{
    cr_assert_leq(t->n + (end - start), (size_t)SCN_MAX_TOKENS, "token list overflow");
    for (kvpool_token v = start; v < end; v++)
        t->ids[t->n++] = v;
}

/* The common prefix of test_prefill: [0]*16 + [1]*16 + [2]*16 (3 full blocks of 16). */
static void scn_tokens_common(struct scn_tokens *t)
{
    for (kvpool_token v = 0; v < 3; v++)
        scn_tokens_repeat(t, v, 16);
}

/* ---- pool, sequences, allocation ---------------------------------------------------------- */

static struct kvpool *scn_pool_create(uint32_t num_blocks, uint32_t block_size, bool caching,
                                      bool events)
{
    struct kvpool_config cfg;
    kvpool_config_default(&cfg);
    cfg.num_blocks = num_blocks;
    cfg.block_size = block_size;
    cfg.enable_prefix_caching = caching;
    cfg.enable_kv_events = events;
    struct kvpool *pool = NULL;
    int rc = kvpool_create(&cfg, &pool);
    cr_assert_eq(rc, 0, "kvpool_create(NB %u, bs %u) failed: %d", num_blocks, block_size, rc);
    cr_assert_not_null(pool, "kvpool_create returned no pool");
    return pool;
}

/* Attaches seq to the pool and appends the token list (vLLM make_request). */
static void scn_seq_from_tokens(struct kvpool *pool, struct kvpool_seq *seq, uint64_t id,
                                const char *salt, const kvpool_token *tokens, size_t n)
{
    int rc = kvpool_seq_init(pool, seq, id, salt, salt ? strlen(salt) : 0);
    cr_assert_eq(rc, 0, "kvpool_seq_init(req%llu) failed: %d", (unsigned long long)id, rc);
    rc = kvpool_seq_append_tokens(pool, seq, tokens, n);
    cr_assert_eq(rc, 0, "append of %zu tokens to req%llu failed: %d", n, (unsigned long long)id,
                 rc);
    cr_assert_eq(seq->num_tokens, (uint64_t)n, "req%llu holds %llu tokens, expected %zu",
                 (unsigned long long)id, (unsigned long long)seq->num_tokens, n);
    cr_assert_eq(seq->num_hashes, (uint32_t)(n / kvpool_get_config(pool)->block_size),
                 "req%llu has %u block hashes", (unsigned long long)id, seq->num_hashes);
}

/* Releases the sequence's blocks (if any) and detaches it. */
static void scn_seq_release(struct kvpool *pool, struct kvpool_seq *seq)
{
    if (seq->num_blocks)
        kvpool_free(pool, seq);
    int rc = kvpool_seq_fini(pool, seq);
    cr_assert_eq(rc, 0, "kvpool_seq_fini failed: %d", rc);
}

/* One allocate_slots call: the lookup it used, the plan, and the blocks it added. */
struct scn_alloc {
    struct kvpool_hits hits;
    kvpool_block_id hit_ids[SCN_MAX_BLOCKS];
    struct kvpool_plan plan;
    const kvpool_block_id *new_ids; /* into seq->blocks: the fresh blocks of this commit */
    uint32_t num_new;
};

/* get_computed_blocks: the cached prefix of seq, with the hit block ids. */
static void scn_lookup(const struct kvpool *pool, const struct kvpool_seq *seq, struct scn_alloc *a)
{
    memset(a, 0, sizeof *a);
    kvpool_lookup(pool, seq, &a->hits, a->hit_ids, SCN_MAX_BLOCKS);
    cr_assert_leq(a->hits.num_blocks, (uint32_t)SCN_MAX_BLOCKS, "more hits than the test holds");
}

/*
 * The preflight of allocate_slots for a new request (WAITING, nothing running): lookup, then
 * kvpool_prepare with those hits. Returns kvpool_prepare's result; a->plan holds the plan.
 */
static int scn_prepare_admission(const struct kvpool *pool, const struct kvpool_seq *seq,
                                 uint64_t num_new_tokens, struct scn_alloc *a)
{
    scn_lookup(pool, seq, a);
    struct kvpool_alloc_args args = {
        .num_computed_tokens = 0,
        .num_new_tokens = num_new_tokens,
        .hits = &a->hits,
        .full_sequence_must_fit = false,
        .has_scheduled_reqs = false,
        .is_admission = true,
    };
    return kvpool_prepare(pool, seq, &args, &a->plan);
}

/* Commits a READY plan and records the fresh block ids it appended. */
static void scn_commit(struct kvpool *pool, struct kvpool_seq *seq, struct scn_alloc *a)
{
    cr_assert_eq(a->plan.outcome, KVPOOL_READY, "plan for req%llu is %s, expected READY",
                 (unsigned long long)seq->id, kvpool_outcome_name(a->plan.outcome));
    int rc = kvpool_commit(pool, seq, &a->plan);
    cr_assert_eq(rc, 0, "kvpool_commit(req%llu) failed: %d", (unsigned long long)seq->id, rc);
    uint32_t first = a->plan.first_new_index + a->plan.num_hit_blocks;
    cr_assert_eq(seq->num_blocks, first + a->plan.num_new_blocks,
                 "req%llu holds %u blocks after commit, expected %u", (unsigned long long)seq->id,
                 seq->num_blocks, first + a->plan.num_new_blocks);
    a->new_ids = seq->blocks + first;
    a->num_new = a->plan.num_new_blocks;
}

/* vLLM allocate_slots for a new request: lookup, prepare (must be READY), commit. */
static void scn_allocate_new(struct kvpool *pool, struct kvpool_seq *seq, uint64_t num_new_tokens,
                             struct scn_alloc *a)
{
    int rc = scn_prepare_admission(pool, seq, num_new_tokens, a);
    cr_assert_eq(rc, KVPOOL_READY, "allocate_slots(req%llu, %llu): prepare returned %d (%s)",
                 (unsigned long long)seq->id, (unsigned long long)num_new_tokens, rc,
                 rc >= 0 ? kvpool_outcome_name((enum kvpool_outcome)rc) : "errno");
    scn_commit(pool, seq, a);
}

/* vLLM allocate_slots for a RUNNING request (no hits, no watermark). */
static void scn_allocate_running(struct kvpool *pool, struct kvpool_seq *seq,
                                 uint64_t num_computed_tokens, uint64_t num_new_tokens,
                                 struct scn_alloc *a)
{
    memset(a, 0, sizeof *a);
    struct kvpool_alloc_args args = {
        .num_computed_tokens = num_computed_tokens,
        .num_new_tokens = num_new_tokens,
        .hits = NULL,
        .has_scheduled_reqs = true,
        .is_admission = false,
    };
    int rc = kvpool_prepare(pool, seq, &args, &a->plan);
    cr_assert_eq(rc, KVPOOL_READY, "allocate_slots(running req%llu, %llu): prepare returned %d",
                 (unsigned long long)seq->id, (unsigned long long)num_new_tokens, rc);
    scn_commit(pool, seq, a);
}

/* ---- assertions ---------------------------------------------------------------------------- */

/* Fresh blocks of the last allocation. */
static void scn_assert_new_blocks(const struct scn_alloc *a, const kvpool_block_id *want,
                                  uint32_t wn, const char *what)
{
    kvsim_test_assert_ids(a->new_ids, a->num_new, want, wn, what);
}

/* Hit blocks of the last lookup and their token count. */
static void scn_assert_hits(const struct kvpool *pool, const struct scn_alloc *a,
                            const kvpool_block_id *want, uint32_t wn, const char *what)
{
    kvsim_test_assert_ids(a->hit_ids, a->hits.num_blocks, want, wn, what);
    uint64_t bs = kvpool_get_config(pool)->block_size;
    cr_assert_eq(a->hits.num_tokens, (uint64_t)wn * bs, "%s: %llu hit tokens, expected %llu", what,
                 (unsigned long long)a->hits.num_tokens, (unsigned long long)(wn * bs));
}

/* The free queue, front to back (get_all_free_blocks). Returns its length. */
static uint32_t scn_free_queue(const struct kvpool *pool, kvpool_block_id *ids, uint32_t cap)
{
    uint32_t n = kvpool_free_queue_snapshot(pool, ids, cap);
    cr_assert_leq(n, cap, "free queue has %u entries, more than %u", n, cap);
    cr_assert_eq(n, kvpool_num_free_blocks(pool), "free queue length %u != free count %u", n,
                 kvpool_num_free_blocks(pool));
    return n;
}

static void scn_assert_free_queue(const struct kvpool *pool, const kvpool_block_id *want,
                                  uint32_t wn, const char *what)
{
    kvpool_block_id got[SCN_MAX_BLOCKS];
    uint32_t n = scn_free_queue(pool, got, SCN_MAX_BLOCKS);
    kvsim_test_assert_ids(got, n, want, wn, what);
}

static void scn_assert_num_free(const struct kvpool *pool, uint32_t want, const char *what)
{
    cr_assert_eq(kvpool_num_free_blocks(pool), want, "%s: %u free blocks, expected %u", what,
                 kvpool_num_free_blocks(pool), want);
}

static void scn_assert_ref(const struct kvpool *pool, kvpool_block_id block, uint32_t want,
                           const char *what)
{
    cr_assert_eq(kvpool_ref_count(pool, block), want, "%s: ref(%d) is %u, expected %u", what, block,
                 kvpool_ref_count(pool, block), want);
}

/* The block carries exactly this hash in the prefix cache. */
static void scn_assert_block_hash(const struct kvpool *pool, kvpool_block_id block,
                                  kvpool_hash want, const char *what)
{
    kvpool_hash h = 0;
    cr_assert(kvpool_block_hash(pool, block, &h), "%s: block %d has no hash", what, block);
    cr_assert_eq(h, want, "%s: block %d hash %#llx, expected %#llx", what, block,
                 (unsigned long long)h, (unsigned long long)want);
}

static void scn_assert_unhashed(const struct kvpool *pool, kvpool_block_id block, const char *what)
{
    kvpool_hash h = 0;
    cr_assert(!kvpool_block_hash(pool, block, &h), "%s: block %d still hashed (%#llx)", what, block,
              (unsigned long long)h);
}

/* Recomputes a sequence's chain of block hashes (vLLM hash_block_tokens) and compares. */
static void scn_assert_hash_chain(const struct kvpool_seq *seq, const kvpool_token *tokens,
                                  uint32_t block_size, uint64_t block0_extra, const char *what)
{
    kvpool_hash parent = KVPOOL_NONE_HASH;
    for (uint32_t i = 0; i < seq->num_hashes; i++) {
        kvpool_hash h = kvpool__hash_block(parent, tokens + (size_t)i * block_size, block_size,
                                           i == 0 ? block0_extra : 0);
        cr_assert_eq(seq->hashes[i], h, "%s: hash of block %u is %#llx, expected %#llx", what, i,
                     (unsigned long long)seq->hashes[i], (unsigned long long)h);
        parent = h;
    }
}

/* ---- KV events ----------------------------------------------------------------------------- */

struct scn_event {
    enum kvpool_event_type type;
    bool has_parent;
    kvpool_hash parent_hash;
    uint32_t num_hashes;
    kvpool_hash hashes[SCN_MAX_BLOCKS];
};

struct scn_events {
    struct scn_event ev[SCN_MAX_EVENTS];
    size_t n;
};

static void scn_collect_event(void *ctx, const struct kvpool_event *event)
{
    struct scn_events *log = ctx;
    cr_assert_lt(log->n, (size_t)SCN_MAX_EVENTS, "too many KV events");
    cr_assert_leq(event->num_hashes, (uint32_t)SCN_MAX_BLOCKS, "KV event with too many hashes");
    struct scn_event *e = &log->ev[log->n++];
    e->type = event->type;
    e->has_parent = event->has_parent;
    e->parent_hash = event->parent_hash;
    e->num_hashes = event->num_hashes;
    if (event->num_hashes)
        memcpy(e->hashes, event->hashes, event->num_hashes * sizeof *event->hashes);
}

/* ---- SC-19/SC-20: test_prefill --------------------------------------------------------------- */

Test(kvpool_scenarios, sc19_sc20_test_prefill)
{
    struct kvpool *pool = scn_pool_create(11, 16, true, false);
    struct kvpool_seq req0, req1, req2, req3;
    struct scn_alloc a;

    /* req0 = common + [3]*7 (55 tokens): full miss, 3 full blocks + 1 partial. */
    struct scn_tokens t0 = {.n = 0};
    scn_tokens_common(&t0);
    scn_tokens_repeat(&t0, 3, 7);
    scn_seq_from_tokens(pool, &req0, 0, NULL, t0.ids, t0.n);
    cr_assert_eq(req0.num_hashes, 3, "req0 must have 3 block hashes, has %u", req0.num_hashes);
    scn_assert_hash_chain(&req0, t0.ids, 16, 0, "req0");
    scn_allocate_new(pool, &req0, 55, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req0 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){1, 2, 3, 4}, 4, "req0 allocate 55");
    /* Full block metadata: blocks 1-3 carry req0's chained hashes, ref 1. */
    for (kvpool_block_id b = 1; b <= 3; b++) {
        scn_assert_block_hash(pool, b, req0.hashes[b - 1], "req0 full block");
        scn_assert_ref(pool, b, 1, "req0 full block");
    }
    /* Partial block metadata: block 4 has no hash, ref 1. */
    scn_assert_unhashed(pool, 4, "req0 partial block");
    scn_assert_ref(pool, 4, 1, "req0 partial block");

    /* req1 = common + [3]*5 (53 tokens): hits the common prefix while req0 still holds it. */
    struct scn_tokens t1 = {.n = 0};
    scn_tokens_common(&t1);
    scn_tokens_repeat(&t1, 3, 5);
    scn_seq_from_tokens(pool, &req1, 1, NULL, t1.ids, t1.n);
    cr_assert_eq(req1.num_hashes, 3, "req1 must have 3 block hashes, has %u", req1.num_hashes);
    scn_allocate_new(pool, &req1, 53 - 3 * 16, &a);
    scn_assert_hits(pool, &a, (const kvpool_block_id[]){1, 2, 3}, 3, "req1 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){5}, 1, "req1 allocate 5");
    for (kvpool_block_id b = 1; b <= 3; b++)
        scn_assert_ref(pool, b, 2, "req1 hit block");
    scn_assert_num_free(pool, 5, "after req1");

    /* SC-20: free order, unhashed tails to the front, hashed blocks to the back. */
    kvpool_free(pool, &req0);
    kvpool_free(pool, &req1);
    scn_assert_num_free(pool, 10, "after freeing req0, req1");
    scn_assert_free_queue(pool, (const kvpool_block_id[]){5, 4, 6, 7, 8, 9, 10, 3, 2, 1}, 10,
                          "queue after freeing req0, req1");

    /* req2 = common + [3]*6 (54 tokens): hits the common prefix while it sits in the queue. */
    struct scn_tokens t2 = {.n = 0};
    scn_tokens_common(&t2);
    scn_tokens_repeat(&t2, 3, 6);
    scn_seq_from_tokens(pool, &req2, 2, NULL, t2.ids, t2.n);
    cr_assert_eq(req2.num_hashes, 3, "req2 must have 3 block hashes, has %u", req2.num_hashes);
    scn_allocate_new(pool, &req2, 54 - 3 * 16, &a);
    scn_assert_hits(pool, &a, (const kvpool_block_id[]){1, 2, 3}, 3, "req2 lookup");
    cr_assert_eq(a.hits.num_evictable, 3, "req2: all 3 hits were evictable, got %u",
                 a.hits.num_evictable);
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){5}, 1, "req2 allocate 6 (reuse 5)");
    scn_assert_num_free(pool, 6, "after req2");
    {
        kvpool_block_id q[SCN_MAX_BLOCKS];
        uint32_t n = scn_free_queue(pool, q, SCN_MAX_BLOCKS);
        cr_assert_eq(n, 6, "queue holds %u blocks after req2, expected 6", n);
        for (uint32_t i = 0; i < n; i++)
            scn_assert_ref(pool, q[i], 0, "queued block after req2");
    }
    kvpool_free(pool, &req2);
    scn_assert_free_queue(pool, (const kvpool_block_id[]){5, 4, 6, 7, 8, 9, 10, 3, 2, 1}, 10,
                          "queue after freeing req2");

    /* req3 = [99]*160: full miss, takes the whole queue in eviction order. */
    struct scn_tokens t3 = {.n = 0};
    scn_tokens_repeat(&t3, 99, 160);
    scn_seq_from_tokens(pool, &req3, 3, NULL, t3.ids, t3.n);
    scn_allocate_new(pool, &req3, 160, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req3 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){5, 4, 6, 7, 8, 9, 10, 3, 2, 1}, 10,
                          "req3 allocate 160 (eviction order)");
    scn_assert_num_free(pool, 0, "after req3");
    scn_assert_free_queue(pool, NULL, 0, "queue after req3");
    cr_assert_eq(kvpool_cache_find(pool, req0.hashes[0]), -ENOENT,
                 "req0's block 0 hash must have been evicted");

    kvsim_test_assert_pool_ok(pool, "test_prefill");
    scn_seq_release(pool, &req0);
    scn_seq_release(pool, &req1);
    scn_seq_release(pool, &req2);
    scn_seq_release(pool, &req3);
    kvsim_test_assert_pool_ok(pool, "test_prefill after teardown");
    kvpool_destroy(pool);
}

/* ---- SC-27: test_prefill_plp --------------------------------------------------------------- */

Test(kvpool_scenarios, sc27_test_prefill_plp)
{
    struct kvpool *pool = scn_pool_create(11, 16, true, false);
    cr_assert_eq(kvpool_get_config(pool)->max_model_len, 0, "default max_model_len must be 0");
    struct kvpool_seq req0, req1, req2;
    struct scn_alloc a;

    /* req0 (prompt logprobs) = common + [3]*7: never reads the cache, still writes it. */
    struct scn_tokens t0 = {.n = 0};
    scn_tokens_common(&t0);
    scn_tokens_repeat(&t0, 3, 7);
    scn_seq_from_tokens(pool, &req0, 0, NULL, t0.ids, t0.n);
    req0.skip_reading_prefix_cache = true;
    cr_assert_eq(req0.num_hashes, 3, "req0 must have 3 block hashes, has %u", req0.num_hashes);
    scn_allocate_new(pool, &req0, 55, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req0 (plp) lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){1, 2, 3, 4}, 4, "req0 allocate 55");
    kvpool_hash req0_hashes[3];
    for (kvpool_block_id b = 1; b <= 3; b++) {
        scn_assert_block_hash(pool, b, req0.hashes[b - 1], "req0 full block");
        scn_assert_ref(pool, b, 1, "req0 full block");
        req0_hashes[b - 1] = req0.hashes[b - 1];
    }
    scn_assert_unhashed(pool, 4, "req0 partial block");
    scn_assert_ref(pool, 4, 1, "req0 partial block");

    /* req1 (normal) = common + [3]*5: hits what the plp request wrote. */
    struct scn_tokens t1 = {.n = 0};
    scn_tokens_common(&t1);
    scn_tokens_repeat(&t1, 3, 5);
    scn_seq_from_tokens(pool, &req1, 1, NULL, t1.ids, t1.n);
    scn_allocate_new(pool, &req1, 53 - 3 * 16, &a);
    scn_assert_hits(pool, &a, (const kvpool_block_id[]){1, 2, 3}, 3, "req1 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){5}, 1, "req1 allocate 5");
    for (kvpool_block_id b = 1; b <= 3; b++)
        scn_assert_ref(pool, b, 2, "req1 hit block");
    scn_assert_num_free(pool, 5, "after req1");

    kvpool_free(pool, &req0);
    kvpool_free(pool, &req1);
    scn_assert_num_free(pool, 10, "after freeing req0, req1");
    scn_assert_free_queue(pool, (const kvpool_block_id[]){5, 4, 6, 7, 8, 9, 10, 3, 2, 1}, 10,
                          "queue after freeing req0, req1");

    /* req2 (plp) = common + [3]*6: no hit; duplicates req0's cached blocks under new ids. */
    struct scn_tokens t2 = {.n = 0};
    scn_tokens_common(&t2);
    scn_tokens_repeat(&t2, 3, 6);
    scn_seq_from_tokens(pool, &req2, 2, NULL, t2.ids, t2.n);
    req2.skip_reading_prefix_cache = true;
    cr_assert_eq(req2.num_hashes, 3, "req2 must have 3 block hashes, has %u", req2.num_hashes);
    scn_allocate_new(pool, &req2, 55, &a); /* upstream passes 55 for this 54-token request */
    scn_assert_hits(pool, &a, NULL, 0, "req2 (plp) lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){5, 4, 6, 7}, 4, "req2 allocate 55");
    cr_assert(!(a.new_ids[0] == 1 && a.new_ids[1] == 2 && a.new_ids[2] == 3 && a.new_ids[3] == 4),
              "req2 must not reuse req0's blocks [1,2,3,4]");
    for (uint32_t i = 0; i < 3; i++)
        scn_assert_block_hash(pool, a.new_ids[i], req0_hashes[i], "req2 duplicate block");
    scn_assert_unhashed(pool, a.new_ids[3], "req2 partial block");
    for (uint32_t i = 0; i < 4; i++)
        scn_assert_ref(pool, a.new_ids[i], 1, "req2 block");
    /* Duplicates: the earliest-inserted block stays the cache's answer for each hash. */
    for (uint32_t i = 0; i < 3; i++)
        cr_assert_eq(kvpool_cache_find(pool, req0_hashes[i]), (kvpool_block_id)(i + 1),
                     "cache_find(req0 hash %u) is %d, expected block %u", i,
                     kvpool_cache_find(pool, req0_hashes[i]), i + 1);
    scn_assert_num_free(pool, 6, "after req2");

    kvsim_test_assert_pool_ok(pool, "test_prefill_plp");
    scn_seq_release(pool, &req0);
    scn_seq_release(pool, &req1);
    scn_seq_release(pool, &req2);
    kvsim_test_assert_pool_ok(pool, "test_prefill_plp after teardown");
    kvpool_destroy(pool);
}

/* ---- test_evict ---------------------------------------------------------------------------- */

Test(kvpool_scenarios, test_evict)
{
    struct kvpool *pool = scn_pool_create(11, 16, true, false);
    struct kvpool_seq req0, req1, req2;
    struct scn_alloc a;

    /* req0 = range(0, 87): 5 full blocks + 1 partial. */
    struct scn_tokens t0 = {.n = 0};
    scn_tokens_range(&t0, 0, 5 * 16 + 7);
    scn_seq_from_tokens(pool, &req0, 0, NULL, t0.ids, t0.n);
    scn_allocate_new(pool, &req0, 5 * 16 + 7, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req0 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){1, 2, 3, 4, 5, 6}, 6, "req0 allocate 87");

    /* req1 = range(87, 135): 3 full blocks. */
    struct scn_tokens t1 = {.n = 0};
    scn_tokens_range(&t1, 5 * 16 + 7, 5 * 16 + 7 + 3 * 16);
    scn_seq_from_tokens(pool, &req1, 1, NULL, t1.ids, t1.n);
    scn_allocate_new(pool, &req1, 3 * 16, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req1 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){7, 8, 9}, 3, "req1 allocate 48");
    scn_assert_num_free(pool, 1, "10 - (6 + 3)");

    /* Partial blocks (no hash) at the head, hashed ones at the tail (LRU). */
    kvpool_free(pool, &req0);
    scn_assert_free_queue(pool, (const kvpool_block_id[]){6, 10, 5, 4, 3, 2, 1}, 7,
                          "queue after freeing req0");
    kvpool_free(pool, &req1);
    scn_assert_num_free(pool, 10, "after freeing req1");
    scn_assert_free_queue(pool, (const kvpool_block_id[]){6, 10, 5, 4, 3, 2, 1, 9, 8, 7}, 10,
                          "queue after freeing req1");

    /* req2 = range(0, 35): touches the first 2 blocks, takes the front block. */
    struct scn_tokens t2 = {.n = 0};
    scn_tokens_range(&t2, 0, 2 * 16 + 3);
    scn_seq_from_tokens(pool, &req2, 2, NULL, t2.ids, t2.n);
    scn_allocate_new(pool, &req2, 3, &a);
    scn_assert_hits(pool, &a, (const kvpool_block_id[]){1, 2}, 2, "req2 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){6}, 1, "req2 allocate 3");
    scn_assert_num_free(pool, 7, "after req2");
    scn_assert_free_queue(pool, (const kvpool_block_id[]){10, 5, 4, 3, 9, 8, 7}, 7,
                          "queue after req2");

    kvsim_test_assert_pool_ok(pool, "test_evict");
    scn_seq_release(pool, &req0);
    scn_seq_release(pool, &req1);
    scn_seq_release(pool, &req2);
    kvsim_test_assert_pool_ok(pool, "test_evict after teardown");
    kvpool_destroy(pool);
}

/* ---- SC-21: test_computed_blocks_not_evicted ------------------------------------------------ */

Test(kvpool_scenarios, sc21_test_computed_blocks_not_evicted)
{
    struct kvpool *pool = scn_pool_create(3, 16, true, true);
    struct kvpool_seq req0, req1, req2;
    struct scn_alloc a;

    struct scn_tokens t0 = {.n = 0};
    scn_tokens_range(&t0, 0, 16);
    scn_seq_from_tokens(pool, &req0, 0, NULL, t0.ids, t0.n);
    scn_allocate_new(pool, &req0, 16, &a);
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){1}, 1, "req0 allocate 16");

    struct scn_tokens t1 = {.n = 0};
    scn_tokens_range(&t1, 16, 32);
    scn_seq_from_tokens(pool, &req1, 1, NULL, t1.ids, t1.n);
    scn_allocate_new(pool, &req1, 16, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req1 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){2}, 1, "req1 allocate 16");

    kvpool_free(pool, &req0);
    kvpool_free(pool, &req1);
    scn_assert_free_queue(pool, (const kvpool_block_id[]){1, 2}, 2, "queue after freeing both");
    kvpool_events_drain(pool, NULL, NULL);

    /* req2 = range(0, 32): hit capped at 31 tokens -> block 1 only. */
    struct scn_tokens t2 = {.n = 0};
    scn_tokens_range(&t2, 0, 32);
    scn_seq_from_tokens(pool, &req2, 2, NULL, t2.ids, t2.n);
    scn_allocate_new(pool, &req2, 32 - 16, &a);
    scn_assert_hits(pool, &a, (const kvpool_block_id[]){1}, 1, "req2 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){2}, 1, "req2 allocate 16");
    /* The hit block kept its hash; block 2's old hash (req1) was evicted, req2's stored. */
    scn_assert_block_hash(pool, 1, req2.hashes[0], "req2 hit block");
    scn_assert_block_hash(pool, 2, req2.hashes[1], "req2 new block");
    cr_assert_eq(kvpool_cache_find(pool, req1.hashes[0]), -ENOENT,
                 "req1's hash must be evicted from block 2");

    struct scn_events log = {.n = 0};
    kvpool_events_drain(pool, scn_collect_event, &log);
    cr_assert_eq(log.n, 2, "req2's allocation must record 2 events (removed, stored), got %zu",
                 log.n);
    cr_assert_eq(log.ev[0].type, KVPOOL_EVENT_REMOVED, "event 0 is %s, expected removed",
                 kvpool_event_type_name(log.ev[0].type));
    cr_assert(log.ev[0].num_hashes == 1 && log.ev[0].hashes[0] == req1.hashes[0],
              "removed event must carry req1's block hash");
    cr_assert_eq(log.ev[1].type, KVPOOL_EVENT_STORED, "event 1 is %s, expected stored",
                 kvpool_event_type_name(log.ev[1].type));
    cr_assert(log.ev[1].has_parent && log.ev[1].parent_hash == req2.hashes[0],
              "stored event must name req2's block 0 as parent");
    cr_assert(log.ev[1].num_hashes == 1 && log.ev[1].hashes[0] == req2.hashes[1],
              "stored event must carry req2's block 1 hash only");
    scn_assert_num_free(pool, 0, "after req2");

    kvsim_test_assert_pool_ok(pool, "test_computed_blocks_not_evicted");
    scn_seq_release(pool, &req0);
    scn_seq_release(pool, &req1);
    scn_seq_release(pool, &req2);
    kvsim_test_assert_pool_ok(pool, "test_computed_blocks_not_evicted after teardown");
    kvpool_destroy(pool);
}

/* ---- SC-23: test_hash_block_correct_reuse --------------------------------------------------- */

Test(kvpool_scenarios, sc23_test_hash_block_correct_reuse)
{
    struct kvpool *pool = scn_pool_create(2, 16, true, false);
    struct kvpool_seq req0, req1;
    struct scn_alloc a;

    struct scn_tokens t0 = {.n = 0};
    scn_tokens_range(&t0, 0, 16);
    scn_seq_from_tokens(pool, &req0, 0, NULL, t0.ids, t0.n);
    scn_allocate_new(pool, &req0, 16, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req0 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){1}, 1, "req0 allocate 16");
    scn_assert_block_hash(pool, 1, req0.hashes[0], "req0 full block");
    kvpool_free(pool, &req0);
    scn_assert_free_queue(pool, (const kvpool_block_id[]){1}, 1, "queue after freeing req0");

    /* req1 = range(0, 15): no full block, so no hit; reusing block 1 clears its hash. */
    struct scn_tokens t1 = {.n = 0};
    scn_tokens_range(&t1, 0, 15);
    scn_seq_from_tokens(pool, &req1, 1, NULL, t1.ids, t1.n);
    scn_allocate_new(pool, &req1, 15, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req1 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){1}, 1, "req1 allocate 15");
    scn_assert_unhashed(pool, 1, "reused block");
    cr_assert_eq(kvpool_cache_find(pool, req0.hashes[0]), -ENOENT,
                 "req0's hash must be gone from the cache");

    kvsim_test_assert_pool_ok(pool, "test_hash_block_correct_reuse");
    scn_seq_release(pool, &req0);
    scn_seq_release(pool, &req1);
    kvsim_test_assert_pool_ok(pool, "test_hash_block_correct_reuse after teardown");
    kvpool_destroy(pool);
}

/* ---- SC-24: test_basic_prefix_caching_disabled ---------------------------------------------- */

Test(kvpool_scenarios, sc24_test_basic_prefix_caching_disabled)
{
    struct kvpool *pool = scn_pool_create(5, 4, false, false);
    struct kvpool_seq req1, req2, req3;
    struct scn_alloc a;

    /* req1 = range(0, 10): 2 blocks and some more. */
    struct scn_tokens t1 = {.n = 0};
    scn_tokens_range(&t1, 0, 10);
    scn_seq_from_tokens(pool, &req1, 1, NULL, t1.ids, t1.n);
    scn_allocate_new(pool, &req1, 10, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req1 lookup");
    cr_assert_eq(a.num_new, 3, "req1 must get 3 blocks, got %u", a.num_new);
    for (uint32_t i = 0; i < a.num_new; i++)
        scn_assert_unhashed(pool, a.new_ids[i], "caching off: req1 block");
    kvpool_free(pool, &req1);
    scn_assert_num_free(pool, 4, "after freeing req1");

    /* req2 = range(0, 16): shares req1's prefix, but nothing is cached. */
    struct scn_tokens t2 = {.n = 0};
    scn_tokens_range(&t2, 0, 16);
    scn_seq_from_tokens(pool, &req2, 2, NULL, t2.ids, t2.n);
    scn_allocate_new(pool, &req2, 16, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req2 lookup");
    cr_assert_eq(a.num_new, 4, "req2 must get 4 blocks, got %u", a.num_new);
    for (uint32_t i = 0; i < a.num_new; i++)
        scn_assert_unhashed(pool, a.new_ids[i], "caching off: req2 block");
    scn_assert_num_free(pool, 0, "after req2");

    /* req3 = range(0, 4): no free block left. */
    struct scn_tokens t3 = {.n = 0};
    scn_tokens_range(&t3, 0, 4);
    scn_seq_from_tokens(pool, &req3, 3, NULL, t3.ids, t3.n);
    uint64_t gen = kvpool_generation(pool);
    int rc = scn_prepare_admission(pool, &req3, 4, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req3 lookup");
    cr_assert_eq(rc, KVPOOL_CAPACITY_EXHAUSTED, "req3 allocate 4: prepare returned %d, expected %s",
                 rc, kvpool_outcome_name(KVPOOL_CAPACITY_EXHAUSTED));
    cr_assert_eq(a.plan.outcome, KVPOOL_CAPACITY_EXHAUSTED, "plan outcome must be exhausted");
    kvpool_abort(&a.plan);
    cr_assert_eq(req3.num_blocks, 0, "a failed allocation must give req3 no block");
    cr_assert_eq(kvpool_generation(pool), gen, "a failed allocation must change nothing");

    kvsim_test_assert_pool_ok(pool, "test_basic_prefix_caching_disabled");
    scn_seq_release(pool, &req1);
    scn_seq_release(pool, &req2);
    scn_seq_release(pool, &req3);
    kvsim_test_assert_pool_ok(pool, "test_basic_prefix_caching_disabled after teardown");
    kvpool_destroy(pool);
}

/* ---- SC-26: test_cache_key_salting ---------------------------------------------------------- */

Test(kvpool_scenarios, sc26_test_cache_key_salting)
{
    struct kvpool *pool = scn_pool_create(11, 16, true, false);
    struct kvpool_seq req0, unsalted, req1, req2, req3;
    struct scn_alloc a;

    /* req0 = common + [3]*11, salt "salt1": block 0 carries the salt, blocks 1, 2 do not. */
    struct scn_tokens t0 = {.n = 0};
    scn_tokens_common(&t0);
    scn_tokens_repeat(&t0, 3, 11);
    scn_seq_from_tokens(pool, &req0, 0, "salt1", t0.ids, t0.n);
    cr_assert_eq(req0.num_hashes, 3, "req0 must have 3 block hashes, has %u", req0.num_hashes);
    cr_assert_neq(req0.salt_hash, 0, "a salted request must carry a salt key");
    cr_assert_eq(req0.salt_hash, kvpool__hash_bytes("salt1", 5), "salt key of \"salt1\"");
    scn_assert_hash_chain(&req0, t0.ids, 16, req0.salt_hash, "req0 (salt1)");

    /* The same tokens without a salt: every hash of the chain differs. */
    scn_seq_from_tokens(pool, &unsalted, 9, NULL, t0.ids, t0.n);
    cr_assert_eq(unsalted.salt_hash, 0, "an unsalted request has no salt key");
    scn_assert_hash_chain(&unsalted, t0.ids, 16, 0, "unsalted");
    for (uint32_t i = 0; i < 3; i++)
        cr_assert_neq(req0.hashes[i], unsalted.hashes[i],
                      "salted and unsalted hashes of block %u must differ", i);

    scn_allocate_new(pool, &req0, t0.n, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req0 lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){1, 2, 3, 4}, 4, "req0 allocate 59");

    /* req1 = common + [4]*11, same salt: hits the 3 common blocks. */
    struct scn_tokens t1 = {.n = 0};
    scn_tokens_common(&t1);
    scn_tokens_repeat(&t1, 4, 11);
    scn_seq_from_tokens(pool, &req1, 1, "salt1", t1.ids, t1.n);
    scn_lookup(pool, &req1, &a);
    scn_assert_hits(pool, &a, (const kvpool_block_id[]){1, 2, 3}, 3, "req1 (salt1) lookup");

    /* req2 = common + [4]*11, other salt: block 0 differs, so the whole chain misses. */
    scn_seq_from_tokens(pool, &req2, 2, "salt2", t1.ids, t1.n);
    scn_lookup(pool, &req2, &a);
    scn_assert_hits(pool, &a, NULL, 0, "req2 (salt2) lookup");

    /* No salt at all misses too. */
    scn_seq_from_tokens(pool, &req3, 3, NULL, t1.ids, t1.n);
    scn_lookup(pool, &req3, &a);
    scn_assert_hits(pool, &a, NULL, 0, "unsalted lookup");

    kvsim_test_assert_pool_ok(pool, "test_cache_key_salting");
    scn_seq_release(pool, &req0);
    scn_seq_release(pool, &unsalted);
    scn_seq_release(pool, &req1);
    scn_seq_release(pool, &req2);
    scn_seq_release(pool, &req3);
    kvsim_test_assert_pool_ok(pool, "test_cache_key_salting after teardown");
    kvpool_destroy(pool);
}

/* ---- SC-29 (derived): hit cap at num_tokens - 1 and duplicate hashes ------------------------ */

Test(kvpool_scenarios, sc29_hit_cap_and_duplicate_hashes)
{
    struct kvpool *pool = scn_pool_create(10, 16, true, false);
    struct kvpool_seq seq_a, seq_b, seq_c;
    struct scn_alloc a;

    /* A = range(0, 32): both blocks full and hashed; freed tail-first to the back. */
    struct scn_tokens ta = {.n = 0};
    scn_tokens_range(&ta, 0, 32);
    scn_seq_from_tokens(pool, &seq_a, 0xA, NULL, ta.ids, ta.n);
    scn_allocate_new(pool, &seq_a, 32, &a);
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){1, 2}, 2, "A allocate 32");
    scn_assert_block_hash(pool, 1, seq_a.hashes[0], "A block 0");
    scn_assert_block_hash(pool, 2, seq_a.hashes[1], "A block 1");
    kvpool_free(pool, &seq_a);
    scn_assert_free_queue(pool, (const kvpool_block_id[]){3, 4, 5, 6, 7, 8, 9, 2, 1}, 9,
                          "queue after freeing A");

    /* B = range(0, 32): the hit is capped at 31 tokens -> block 1 only. */
    struct scn_tokens tb = {.n = 0};
    scn_tokens_range(&tb, 0, 32);
    scn_seq_from_tokens(pool, &seq_b, 0xB, NULL, tb.ids, tb.n);
    scn_allocate_new(pool, &seq_b, 16, &a);
    scn_assert_hits(pool, &a, (const kvpool_block_id[]){1}, 1, "B lookup (cap 31)");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){3}, 1, "B allocate 16");
    /* Block 3 is cached under the same hash as block 2: a duplicate entry. */
    kvpool_hash h2 = 0, h3 = 0;
    cr_assert(kvpool_block_hash(pool, 2, &h2), "block 2 must still be hashed");
    cr_assert(kvpool_block_hash(pool, 3, &h3), "block 3 must be hashed after B's allocation");
    cr_assert_eq(h3, h2, "block 3 must duplicate block 2's hash (%#llx vs %#llx)",
                 (unsigned long long)h3, (unsigned long long)h2);
    cr_assert_eq(kvpool_cache_find(pool, h2), 2, "the earliest entry for the hash is block 2");

    /* C = range(0, 32) + [99]: hits block 1 and block 2 (earliest entry), 32 tokens. */
    struct scn_tokens tc = {.n = 0};
    scn_tokens_range(&tc, 0, 32);
    scn_tokens_repeat(&tc, 99, 1);
    scn_seq_from_tokens(pool, &seq_c, 0xC, NULL, tc.ids, tc.n);
    int rc = scn_prepare_admission(pool, &seq_c, 1, &a);
    scn_assert_hits(pool, &a, (const kvpool_block_id[]){1, 2}, 2, "C lookup");
    cr_assert_eq(a.hits.num_evictable, 1, "C: block 2 (ref 0) is the only evictable hit, got %u",
                 a.hits.num_evictable);
    cr_assert_eq(rc, KVPOOL_READY, "C prepare returned %d, expected READY", rc);
    cr_assert_eq(a.plan.num_blocks_needed, 2,
                 "C needs 1 fresh + 1 evictable = 2 blocks of capacity, plan says %u",
                 a.plan.num_blocks_needed);
    cr_assert_eq(a.plan.num_new_blocks, 1, "C needs 1 fresh block, plan says %u",
                 a.plan.num_new_blocks);
    scn_commit(pool, &seq_c, &a);
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){4}, 1, "C allocate 1");
    scn_assert_ref(pool, 1, 2, "B and C share block 1");
    scn_assert_ref(pool, 2, 1, "C holds block 2");
    scn_assert_ref(pool, 3, 1, "B holds block 3");
    scn_assert_ref(pool, 4, 1, "C holds block 4");
    scn_assert_unhashed(pool, 4, "C's partial block");
    scn_assert_num_free(pool, 5, "after C");

    kvsim_test_assert_pool_ok(pool, "sc29");
    scn_seq_release(pool, &seq_a);
    scn_seq_release(pool, &seq_b);
    scn_seq_release(pool, &seq_c);
    kvsim_test_assert_pool_ok(pool, "sc29 after teardown");
    kvpool_destroy(pool);
}

/* ---- SC-30 (pool level): blocks cached at allocation are hittable in the same step ---------- */

Test(kvpool_scenarios, sc30_same_step_sharing)
{
    struct kvpool *pool = scn_pool_create(10, 16, true, false);
    struct kvpool_seq seq_a, seq_b;
    struct scn_alloc a;

    /* A = range(0, 64): a 40-token first chunk, blocks 1, 2 full and hashed, 3 partial. */
    struct scn_tokens ta = {.n = 0};
    scn_tokens_range(&ta, 0, 64);
    scn_seq_from_tokens(pool, &seq_a, 0xA, NULL, ta.ids, ta.n);
    scn_allocate_new(pool, &seq_a, 40, &a);
    scn_assert_hits(pool, &a, NULL, 0, "A lookup");
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){1, 2, 3}, 3, "A allocate 40");
    scn_assert_block_hash(pool, 1, seq_a.hashes[0], "A chunk 1, block 0");
    scn_assert_block_hash(pool, 2, seq_a.hashes[1], "A chunk 1, block 1");
    scn_assert_unhashed(pool, 3, "A chunk 1, partial block 2");

    /* Next step: A runs its remaining 24 tokens; blocks 3, 4 become full and hashed. */
    scn_allocate_running(pool, &seq_a, 40, 24, &a);
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){4}, 1, "A allocate 24 (running)");
    scn_assert_block_hash(pool, 3, seq_a.hashes[2], "A chunk 2, block 2");
    scn_assert_block_hash(pool, 4, seq_a.hashes[3], "A chunk 2, block 3");
    cr_assert_eq(seq_a.num_cached_blocks, 4, "A must have 4 cached blocks, has %u",
                 seq_a.num_cached_blocks);

    /* Same step: B = range(0, 64) + range(100, 108) hits all 4 of A's blocks. */
    struct scn_tokens tb = {.n = 0};
    scn_tokens_range(&tb, 0, 64);
    scn_tokens_range(&tb, 100, 108);
    scn_seq_from_tokens(pool, &seq_b, 0xB, NULL, tb.ids, tb.n);
    scn_allocate_new(pool, &seq_b, 72 - 64, &a);
    scn_assert_hits(pool, &a, (const kvpool_block_id[]){1, 2, 3, 4}, 4, "B lookup");
    cr_assert_eq(a.hits.num_evictable, 0, "A holds every hit, none is evictable (got %u)",
                 a.hits.num_evictable);
    scn_assert_new_blocks(&a, (const kvpool_block_id[]){5}, 1, "B allocate 8");
    for (kvpool_block_id b = 1; b <= 4; b++)
        scn_assert_ref(pool, b, 2, "A and B share");
    scn_assert_num_free(pool, 4, "after B");

    kvsim_test_assert_pool_ok(pool, "sc30");
    scn_seq_release(pool, &seq_a);
    scn_seq_release(pool, &seq_b);
    kvsim_test_assert_pool_ok(pool, "sc30 after teardown");
    kvpool_destroy(pool);
}
