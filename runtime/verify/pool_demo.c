/*
 * pool_demo.c - the pool demonstration behind `kvsim pool-demo` (verify.h): a guided, self-checking
 * walk through the G1 block pool.
 *
 * It replays vLLM's test_prefill shape (11 blocks of 16 tokens): two requests sharing a 48-token
 * prefix, an aborted plan, the free order, and an eviction sweep, printing each observable and
 * failing loudly if the pool disagrees with vLLM.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvpool/kvpool.h"
#include "runtime/verify/verify.h"

struct demo {
    FILE *out;
    struct kvpool *pool;
    int failures;
    size_t stored, removed;
};

static void print_ids(FILE *out, const char *label, const kvpool_block_id *ids, uint32_t n)
{
    fprintf(out, "%s[", label);
    for (uint32_t i = 0; i < n; i++)
        fprintf(out, "%s%" PRId32, i ? "," : "", ids[i]);
    fprintf(out, "]\n");
}

static void expect_ids(struct demo *d, const char *what, const kvpool_block_id *got, uint32_t n,
                       const kvpool_block_id *want, uint32_t wn)
{
    if (n == wn && memcmp(got, want, n * sizeof *got) == 0)
        return;
    fprintf(d->out, "  MISMATCH in %s: ", what);
    print_ids(d->out, "expected ", want, wn);
    d->failures++;
}

static void count_event(void *ctx, const struct kvpool_event *ev)
{
    struct demo *d = ctx;
    if (ev->type == KVPOOL_EVENT_STORED)
        d->stored += ev->num_hashes;
    else if (ev->type == KVPOOL_EVENT_REMOVED)
        d->removed += ev->num_hashes;
}

/* Builds a request with `common` tokens of prefix then n copies of tail, and admits it. */
static int admit(struct demo *d, struct kvpool_seq *seq, uint64_t id, uint32_t tail, size_t n,
                 bool commit)
{
    static const kvpool_token prefix_values[3] = {0, 1, 2};
    int rc = kvpool_seq_init(d->pool, seq, id, NULL, 0);
    for (int i = 0; rc == 0 && i < 3; i++)
        rc = kvpool_seq_append_repeat(d->pool, seq, prefix_values[i], 16);
    if (rc == 0)
        rc = kvpool_seq_append_repeat(d->pool, seq, tail, n);
    if (rc)
        return rc;
    struct kvpool_hits hits;
    kvpool_block_id hit_ids[8];
    kvpool_lookup(d->pool, seq, &hits, hit_ids, 8);
    struct kvpool_alloc_args args = {
        .num_new_tokens = seq->num_tokens - hits.num_tokens,
        .hits = &hits,
        .is_admission = true,
    };
    struct kvpool_plan plan;
    rc = kvpool_prepare(d->pool, seq, &args, &plan);
    if (rc != KVPOOL_READY)
        return rc < 0 ? rc : -ENOSPC;
    fprintf(d->out,
            "request %" PRIu64 ": %" PRIu64 " tokens, %" PRIu32 " hit blocks, plan %s"
            " (%" PRIu32 " new blocks)\n",
            id, seq->num_tokens, hits.num_blocks, kvpool_outcome_name(plan.outcome),
            plan.num_new_blocks);
    if (!commit) {
        uint32_t free_before = kvpool_num_free_blocks(d->pool);
        kvpool_abort(&plan);
        fprintf(d->out, "  aborted: free blocks %" PRIu32 " -> %" PRIu32 "\n", free_before,
                kvpool_num_free_blocks(d->pool));
        if (free_before != kvpool_num_free_blocks(d->pool))
            d->failures++;
        return 0;
    }
    rc = kvpool_commit(d->pool, seq, &plan);
    if (rc)
        return rc;
    print_ids(d->out, "  blocks ", seq->blocks, seq->num_blocks);
    return 0;
}

int kvsim_pool_demo(FILE *out)
{
    struct kvpool_config cfg;
    kvpool_config_default(&cfg);
    cfg.num_blocks = 11;
    cfg.enable_kv_events = true;
    struct demo d = {.out = out};
    int rc = kvpool_create(&cfg, &d.pool);
    if (rc)
        return rc;
    fprintf(out, "%s: G1 pool demo, %u blocks of %u tokens (block 0 is the null block)\n",
            kvsim_version(), cfg.num_blocks, cfg.block_size);

    struct kvpool_seq r0, r1, r2, r3;
    rc = admit(&d, &r0, 0, 3, 7, true);
    if (!rc)
        expect_ids(&d, "request 0 blocks", r0.blocks, r0.num_blocks,
                   (const kvpool_block_id[]){1, 2, 3, 4}, 4);
    if (!rc)
        rc = admit(&d, &r1, 1, 3, 5, true);
    if (!rc)
        expect_ids(&d, "request 1 blocks", r1.blocks, r1.num_blocks,
                   (const kvpool_block_id[]){1, 2, 3, 5}, 4);
    if (!rc)
        rc = admit(&d, &r2, 2, 4, 9, false); /* prepared, then aborted: nothing changes */
    if (rc) {
        kvpool_destroy(d.pool);
        return rc;
    }
    fprintf(out, "shared prefix blocks 1..3 have ref count %" PRIu32 "\n",
            kvpool_ref_count(d.pool, 1));

    kvpool_free(d.pool, &r0);
    kvpool_free(d.pool, &r1);
    kvpool_block_id q[16];
    uint32_t qn = kvpool_free_queue_snapshot(d.pool, q, 16);
    print_ids(out, "free queue after freeing both (evict-first order): ", q, qn);
    expect_ids(&d, "free queue", q, qn, (const kvpool_block_id[]){5, 4, 6, 7, 8, 9, 10, 3, 2, 1},
               10);

    kvpool_events_drain(d.pool, count_event, &d);
    rc = kvpool_seq_init(d.pool, &r3, 3, NULL, 0);
    if (!rc)
        rc = kvpool_seq_append_repeat(d.pool, &r3, 99, 160);
    struct kvpool_alloc_args args = {.num_new_tokens = 160, .is_admission = true};
    struct kvpool_plan plan;
    if (!rc && kvpool_prepare(d.pool, &r3, &args, &plan) == KVPOOL_READY)
        rc = kvpool_commit(d.pool, &r3, &plan);
    else if (!rc)
        rc = -ENOSPC;
    if (!rc) {
        print_ids(out, "a 160-token request takes the whole pool in that order: ", r3.blocks,
                  r3.num_blocks);
        expect_ids(&d, "eviction order", r3.blocks, r3.num_blocks, q, qn);
    }
    kvpool_events_drain(d.pool, count_event, &d);
    fprintf(out, "KV events: %zu block hashes stored, %zu removed\n", d.stored, d.removed);

    struct kvpool_violation v;
    char line[256];
    if (kvpool_check(d.pool, &v) == 0) {
        fprintf(out, "ownership check: every block reconciles to its owner\n");
    } else {
        kvpool_violation_format(&v, line, sizeof line);
        fprintf(out, "%s\n", line);
        d.failures++;
    }
    kvpool_free(d.pool, &r3);
    kvpool_seq_fini(d.pool, &r0);
    kvpool_seq_fini(d.pool, &r1);
    kvpool_seq_fini(d.pool, &r2);
    kvpool_seq_fini(d.pool, &r3);
    kvpool_destroy(d.pool);
    if (rc)
        return rc;
    fprintf(out, "pool demo: %s\n", d.failures ? "FAILED" : "ok");
    return d.failures ? -EPROTO : 0;
}
