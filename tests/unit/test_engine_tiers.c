/*
 * test_engine_tiers.c - the engine's offload policy (runtime/engine/tiers.h) driving a real
 * scheduler, G1 pool and pipeline in virtual time: write-through with source holds (G2 only and
 * with G3), onboarding from G2 and staged from G3 into a destination reservation, failure fallback,
 * speculative-size reservations waiting on held capacity, and the transfer bijection check.
 *
 * 4-token blocks of 1000 bytes; G1<->G2 at 1 MB/s (1 ms per block alone), G2<->G3 at 0.5 MB/s.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "runtime/engine/tiers.h"

#include "common.h"

TestSuite(tiers, .timeout = 30);

enum { BS = 4, MS = 1000000 };

struct rig {
    struct kvsim_tiers *t;
    struct sched *s;
    struct kvpool *pool;
    int64_t now;
};

static void rig_init(struct rig *g, uint32_t g1_blocks, uint32_t g2, uint32_t g3, double fail_rate,
                     uint32_t permits)
{
    memset(g, 0, sizeof *g);
    struct kvsim_tiers_config tc;
    kvsim_tiers_config_default(&tc);
    tc.g2_blocks = g2;
    tc.g3_blocks = g3;
    tc.pipe.block_bytes = 1000;
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++) {
        tc.pipe.lanes[l].permits = permits;
        tc.pipe.lanes[l].max_blocks = 2;
        tc.pipe.lanes[l].bandwidth =
            l == OFFLOAD_LANE_G1_G2 || l == OFFLOAD_LANE_G2_G1 ? 1000000 : 500000;
    }
    tc.pipe.fail_rate = fail_rate;
    tc.pipe.seed = 7;
    cr_assert_eq(kvsim_tiers_create(&tc, &g->t), 0, "kvsim_tiers_create");
    struct sched_config c;
    sched_config_default(&c);
    c.block_size = BS;
    c.num_blocks = g1_blocks;
    c.max_num_batched_tokens = 64;
    c.max_model_len = 64;
    c.check_invariants = true;
    c.offload = &kvsim_tiers_sched_ops;
    c.offload_ctx = g->t;
    cr_assert_eq(sched_create(&c, &g->s), 0, "sched_create");
    kvsim_tiers_bind(g->t, g->s);
    g->pool = sched_pool(g->s);
}

static void rig_fini(struct rig *g)
{
    kvsim_tiers_destroy(g->t);
    sched_destroy(g->s);
}

static void rig_check(struct rig *g, const char *what)
{
    char msg[256] = "";
    int rc = kvsim_tiers_check(g->t, msg, sizeof msg);
    cr_assert_eq(rc, 0, "%s: %s", what, msg);
    struct sched_violation v;
    char line[256] = "";
    rc = sched_check(g->s, &v);
    if (rc)
        sched_violation_format(&v, line, sizeof line);
    cr_assert_eq(rc, 0, "%s: %s", what, line);
}

static void advance(struct rig *g, int64_t to)
{
    g->now = to;
    cr_assert_geq(kvsim_tiers_advance_to(g->t, to), 0, "advance_to");
    rig_check(g, "after advance");
}

/* One schedule + flush + output at g->now; returns the tokens scheduled for r (0 if not). */
static uint32_t step(struct rig *g, const struct sched_request *r)
{
    int err = 0;
    struct sched_step *st = sched_schedule(g->s, &err);
    cr_assert_not_null(st, "schedule: %d", err);
    cr_assert_eq(kvsim_tiers_flush(g->t), 0, "flush");
    uint32_t got = 0;
    static const kvpool_token tok[1] = {9};
    const kvpool_token *toks[16];
    uint32_t counts[16];
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        toks[i] = tok;
        counts[i] = st->scheduled[i].samples;
        if (st->scheduled[i].req == r)
            got = st->scheduled[i].num_tokens;
    }
    struct sched_model_output out = {.tokens = toks, .num_tokens = counts};
    cr_assert_eq(sched_update(g->s, st, &out), 0, "update");
    cr_assert_eq(kvsim_tiers_flush(g->t), 0, "flush after update");
    uint32_t nf;
    struct sched_request *const *fin = sched_last_finished(g->s, &nf);
    struct sched_request *done[16];
    memcpy(done, fin, nf * sizeof *fin);
    for (uint32_t i = 0; i < nf; i++)
        cr_assert_eq(sched_release(g->s, done[i]), 0, "release");
    rig_check(g, "after step");
    return got;
}

static struct kvsim_tiers_stats stats(struct rig *g)
{
    struct kvsim_tiers_stats s;
    kvsim_tiers_stats(g->t, &s);
    return s;
}

Test(tiers, g2_only_write_through_holds_sources_until_drained_and_hands_permits_on)
{
    struct rig g;
    rig_init(&g, 32, 64, 0, 0.0, 1);
    struct sched_request *a =
        kvsim_test_add_request(g.s, 1, 100, 16, 1); /* 4 full blocks: 2 batches of 2 */
    cr_assert_eq(step(&g, a), 16, "a prefills and finishes");
    cr_assert_eq(kvpool_num_held_only_blocks(g.pool), 4, "a's 4 blocks are held by the copies");
    struct kvsim_tiers_stats s = stats(&g);
    cr_assert_eq(s.lanes[OFFLOAD_LANE_G1_G2].enqueued, 2, "2 batches");
    cr_assert_eq(s.lanes[OFFLOAD_LANE_G1_G2].in_flight, 1, "1 permit");
    cr_assert_eq(kvsim_tiers_next_deadline(g.t), 2 * MS, "2 blocks at 1 MB/s");
    advance(&g, 2 * MS);
    cr_assert_eq(kvpool_num_held_only_blocks(g.pool), 2, "first batch released its sources");
    s = stats(&g);
    cr_assert_eq(s.lanes[OFFLOAD_LANE_G1_G2].started, 2, "the successor took the permit");
    cr_assert_eq(kvsim_tiers_next_deadline(g.t), 4 * MS, "and started at 2 ms");
    advance(&g, 4 * MS);
    cr_assert_eq(kvpool_num_held_only_blocks(g.pool), 0, "all sources released");
    s = stats(&g);
    cr_assert_eq(s.written_g2, 4, "4 blocks in G2");
    cr_assert_eq(s.g2_size, 4, "resident");
    cr_assert_eq(s.lanes[OFFLOAD_LANE_G2_G3].enqueued, 0, "G2 only: nothing goes further");
    cr_assert_eq(kvsim_tiers_pending(g.t), 0, "nothing pending");
    cr_assert_eq(kvsim_tiers_next_deadline(g.t), OFFLOAD_NEVER, "idle");
    /* The same prefix stored again is filtered, not copied twice. */
    struct sched_request *b = kvsim_test_add_request(g.s, 2, 100, 17, 1);
    step(&g, b);
    s = stats(&g);
    cr_assert_eq(s.lanes[OFFLOAD_LANE_G1_G2].enqueued, 2, "no new copy for blocks G2 holds");
    rig_fini(&g);
}

/* Fills G1 with other requests so a's prefix is evicted from G1 but stays in G2. */
static void evict_g1(struct rig *g, uint32_t n_reqs, kvpool_token base)
{
    for (uint32_t i = 0; i < n_reqs; i++) {
        struct sched_request *x =
            kvsim_test_add_request(g->s, 100 + base + i, 10000 + 1000 * (base + i), 16, 1);
        step(g, x);
        advance(g, g->now + 20 * MS);
    }
}

Test(tiers, onboarding_from_g2_reserves_destination_then_loads_instead_of_recomputing)
{
    struct rig g;
    rig_init(&g, 9, 64, 0, 0.0, 2); /* 8 usable G1 blocks */
    struct sched_request *a = kvsim_test_add_request(g.s, 1, 100, 16, 1);
    step(&g, a);
    advance(&g, 10 * MS);
    evict_g1(&g, 2, 0);
    uint64_t g1g2_before = stats(&g).lanes[OFFLOAD_LANE_G1_G2].enqueued;
    struct sched_request *b =
        kvsim_test_add_request(g.s, 2, 100, 18, 3); /* a's 4 blocks + 2 tokens */
    cr_assert_eq(step(&g, b), 0, "b waits for its load");
    cr_assert_eq(b->status, SCHED_WAITING_FOR_REMOTE_KVS, "parked");
    cr_assert_eq(b->kv.owner, KVPOOL_OWNER_DEST_RESERVATION, "destination reservation");
    cr_assert_eq(b->kv.num_blocks, 4, "4 destination blocks reserved before the transfer");
    struct kvsim_tiers_stats s = stats(&g);
    cr_assert_eq(s.g2_hit_blocks, 4, "4 G2 hits");
    cr_assert_eq(s.lanes[OFFLOAD_LANE_G2_G1].enqueued, 2, "2 batches G2->G1");
    int64_t d = kvsim_tiers_next_deadline(g.t);
    cr_assert_eq(d, g.now + 4 * MS, "2 permits share 1 MB/s: 4 blocks in 4 ms (got %ld, now %ld)",
                 (long)d, (long)g.now);
    advance(&g, d);
    cr_assert_eq(step(&g, b), 2, "promoted: only 2 tokens computed");
    cr_assert_eq(b->onboarded_tokens, 16, "16 tokens onboarded");
    s = stats(&g);
    cr_assert_eq(s.loads, 1, "one load");
    cr_assert_eq(s.onboard_wait_ns, 4 * MS, "waited 4 ms");
    /* The 4 blocks loaded back into G1's cache are stored there again: G2 holds them, so the
     * write-through filters them instead of copying them to G2 a second time. */
    cr_assert_eq(s.filtered, 4, "the onboarded blocks are filtered");
    cr_assert_eq(s.lanes[OFFLOAD_LANE_G1_G2].enqueued, g1g2_before, "and not copied again");
    rig_fini(&g);
}

Test(tiers, g3_blocks_are_staged_through_g2_in_two_hops)
{
    struct rig g;
    rig_init(&g, 9, 4, 64, 0.0, 2); /* G2 holds 4 blocks: older ones go on to G3 */
    struct sched_request *a = kvsim_test_add_request(g.s, 1, 100, 16, 1);
    step(&g, a);
    advance(&g, 50 * MS);
    struct kvsim_tiers_stats s = stats(&g);
    cr_assert_eq(s.written_g3, 0, "G2 has room: nothing evicted yet");
    evict_g1(&g, 2, 0);
    s = stats(&g);
    cr_assert_eq(s.written_g3, 8, "8 newer blocks pushed 8 out of G2 into G3");
    struct sched_request *b = kvsim_test_add_request(g.s, 2, 100, 18, 3);
    step(&g, b);
    cr_assert_eq(b->status, SCHED_WAITING_FOR_REMOTE_KVS, "parked");
    struct kvsim_tiers_stats s2 = stats(&g);
    cr_assert_gt(s2.g3_hit_blocks, s.g3_hit_blocks, "some blocks come from G3");
    cr_assert_gt(s2.lanes[OFFLOAD_LANE_G3_G2].enqueued, 0, "staged G3->G2 first");
    cr_assert_eq(s2.lanes[OFFLOAD_LANE_G2_G1].enqueued, s.lanes[OFFLOAD_LANE_G2_G1].enqueued,
                 "G2->G1 waits for the staging");
    int64_t d1 = kvsim_tiers_next_deadline(g.t);
    advance(&g, d1);
    cr_assert_eq(b->status, SCHED_WAITING_FOR_REMOTE_KVS, "first hop done, still loading");
    while (b->status == SCHED_WAITING_FOR_REMOTE_KVS && !b->recv_finished)
        advance(&g, kvsim_tiers_next_deadline(g.t));
    cr_assert_gt(g.now, d1, "the second hop ends later");
    cr_assert_not(b->load_failed, "the load succeeded");
    cr_assert_eq(step(&g, b), 2, "promoted with the loaded prefix");
    rig_fini(&g);
}

Test(tiers, failed_transfers_release_holds_and_requests_recompute)
{
    struct rig g;
    rig_init(&g, 9, 64, 0, 1.0, 2); /* every batch fails */
    struct sched_request *a = kvsim_test_add_request(g.s, 1, 100, 16, 1);
    step(&g, a);
    advance(&g, 10 * MS);
    cr_assert_eq(kvpool_num_held_only_blocks(g.pool), 0, "failed copies released their sources");
    struct kvsim_tiers_stats s = stats(&g);
    cr_assert_eq(s.written_g2, 0, "nothing reached G2");
    cr_assert_eq(s.failed_blocks, 4, "4 blocks failed");
    rig_fini(&g);

    /* Half the batches fail: loads fall back to recompute, every request completes, and no
     * hold or pin outlives its transfer. */
    rig_init(&g, 9, 3, 8, 0.5, 2);
    struct sched_request *r[12];
    uint32_t finished = 0;
    for (uint32_t i = 0; i < 12; i++) {
        r[i] = kvsim_test_add_request(g.s, 10 + i, 100 + 1000 * (i % 3), 16, 2);
        for (int k = 0; k < 40 && r[i]->status != SCHED_FINISHED_LENGTH_CAPPED; k++) {
            uint32_t nu = sched_num_unfinished(g.s);
            step(&g, NULL);
            finished += nu - sched_num_unfinished(g.s);
            int64_t d = kvsim_tiers_next_deadline(g.t);
            advance(&g, d == OFFLOAD_NEVER ? g.now + MS : d);
            if (sched_num_unfinished(g.s) == 0)
                break;
        }
        cr_assert_eq(sched_num_unfinished(g.s), 0, "request %u completed", i);
    }
    while (kvsim_tiers_next_deadline(g.t) != OFFLOAD_NEVER)
        advance(&g, kvsim_tiers_next_deadline(g.t));
    cr_assert_eq(kvpool_num_held_only_blocks(g.pool), 0, "no hold left");
    s = stats(&g);
    cr_assert_gt(s.failed_blocks, 0, "failures were injected");
    cr_assert_gt(s.loads, 0, "loads happened");
    rig_fini(&g);
}

Test(tiers, speculative_size_reservation_waits_on_held_capacity_without_preempting)
{
    struct rig g;
    rig_init(&g, 9, 64, 0, 0.0, 1);
    struct sched_request *a = kvsim_test_add_request(g.s, 1, 100, 16, 1);
    step(&g, a); /* 4 blocks held by copies, 4 free */
    struct kvpool_seq seq;
    cr_assert_eq(kvpool_seq_init(g.pool, &seq, 77, NULL, 0), 0, "seq");
    kvpool_seq_append_repeat(g.pool, &seq, 5, 8);
    /* 8 tokens + 12 speculative slots = 5 blocks: 1 short, covered by the held ones. */
    struct kvpool_alloc_args args = {
        .num_new_tokens = 8, .num_lookahead_tokens = 12, .is_admission = true};
    struct kvpool_plan plan;
    cr_assert_eq(kvpool_prepare(g.pool, &seq, &args, &plan), KVPOOL_BLOCKED_ON_OFFLOAD,
                 "the speculative size is what does not fit");
    args.num_lookahead_tokens = 8;
    cr_assert_eq(kvpool_prepare(g.pool, &seq, &args, &plan), KVPOOL_READY, "4 blocks fit");
    args.num_lookahead_tokens = 12;
    advance(&g, kvsim_tiers_next_deadline(g.t));
    cr_assert_eq(kvpool_prepare(g.pool, &seq, &args, &plan), KVPOOL_READY,
                 "after the first copy drains the full speculative size fits");
    cr_assert_eq(plan.num_new_blocks, 5, "5 blocks reserved");
    cr_assert_eq(kvpool_commit(g.pool, &seq, &plan), 0, "commit");
    kvpool_free(g.pool, &seq);
    kvpool_seq_fini(g.pool, &seq);
    rig_fini(&g);
}
