/*
 * test_sched_offload.c - the scheduler with capacity held by in-flight copies and with
 * onboarding from lower tiers (sched_offload_ops): BLOCKED_ON_OFFLOAD never preempts unrelated
 * running work and leaves no trace, RETRY_NOW is one bounded retry backed by evidence, loads
 * park, promote and fall back to recompute, and the legacy partial allocation (issue #6's bug)
 * behaves as the old allocator did.
 *
 * Pools here: 4-token blocks, 9 blocks (8 usable). Holds stand in for G1->G2 copies.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sched/sched.h"

#include "common.h"

TestSuite(sched_offload);

enum { BS = 4 };

struct fake_tiers {
    uint32_t lookup_blocks; /* what lookup reports */
    uint32_t lookups, loads, relieves;
    uint32_t release_per_relieve; /* holds relieve gives back per call */
    struct sched_request *loading;
    uint32_t load_first, load_n;
    int load_rc;
    struct kvpool *pool;
    kvpool_block_id held[16];
    uint32_t num_held;
};

static uint32_t ft_lookup(void *ctx, const struct sched_request *r, uint32_t first_block)
{
    (void)r;
    (void)first_block;
    struct fake_tiers *t = ctx;
    t->lookups++;
    return t->lookup_blocks;
}

static int ft_start_load(void *ctx, struct sched_request *r, uint32_t first, uint32_t n)
{
    struct fake_tiers *t = ctx;
    t->loads++;
    t->loading = r;
    t->load_first = first;
    t->load_n = n;
    return t->load_rc;
}

static uint32_t ft_relieve(void *ctx, uint32_t num_short)
{
    (void)num_short;
    struct fake_tiers *t = ctx;
    t->relieves++;
    uint32_t k = 0;
    while (k < t->release_per_relieve && t->num_held) {
        cr_assert_eq(kvpool_release_hold(t->pool, t->held[--t->num_held]), 0, "release hold");
        k++;
    }
    return k;
}

static const struct sched_offload_ops ft_ops = {ft_lookup, ft_start_load, ft_relieve};

static struct sched *make(struct fake_tiers *t, bool legacy)
{
    struct sched_config c;
    sched_config_default(&c);
    c.block_size = BS;
    c.num_blocks = 9;
    c.max_num_batched_tokens = 64;
    c.max_model_len = 64;
    c.scheduler_reserve_full_isl = false;
    c.check_invariants = !legacy; /* legacy mode breaks them on purpose */
    c.legacy_partial_alloc = legacy;
    c.offload = &ft_ops;
    c.offload_ctx = t;
    struct sched *s = NULL;
    cr_assert_eq(sched_create(&c, &s), 0, "sched_create");
    t->pool = sched_pool(s);
    return s;
}

static struct sched_step *schedule(struct sched *s)
{
    int err = 0;
    struct sched_step *st = sched_schedule(s, &err);
    char buf[256] = "";
    if (!st && sched_last_violation(s))
        sched_violation_format(sched_last_violation(s), buf, sizeof buf);
    cr_assert_not_null(st, "sched_schedule failed: %d %s", err, buf);
    return st;
}

/* Every sampling request gets token 7; finished requests are released. */
static void output(struct sched *s, struct sched_step *st)
{
    static const kvpool_token tok[1] = {7};
    const kvpool_token *toks[16];
    uint32_t counts[16];
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        toks[i] = tok;
        counts[i] = st->scheduled[i].samples ? 1 : 0;
    }
    struct sched_model_output out = {.tokens = toks, .num_tokens = counts};
    cr_assert_eq(sched_update(s, st, &out), 0, "sched_update");
    uint32_t nf;
    struct sched_request *const *fin = sched_last_finished(s, &nf);
    struct sched_request *done[16];
    memcpy(done, fin, nf * sizeof *fin);
    for (uint32_t i = 0; i < nf; i++)
        cr_assert_eq(sched_release(s, done[i]), 0, "release finished");
}

static bool scheduled(const struct sched_step *st, const struct sched_request *r)
{
    for (uint32_t i = 0; i < st->num_scheduled; i++)
        if (st->scheduled[i].req == r)
            return true;
    return false;
}

/* A 16-token request runs and finishes while copies hold its 4 cached blocks: afterwards 4 blocks
 * are free and 4 are held only by the copies. */
static void leave_held_blocks(struct sched *s, struct fake_tiers *t)
{
    struct sched_request *x = kvsim_test_add_request(s, 100, 1000, 16, 1);
    struct sched_step *st = schedule(s);
    cr_assert(scheduled(st, x), "x runs");
    for (uint32_t i = 0; i < 4; i++) {
        cr_assert_eq(kvpool_hold_block(t->pool, x->kv.blocks[i]), 0, "hold");
        t->held[t->num_held++] = x->kv.blocks[i];
    }
    output(s, st);
    cr_assert_eq(kvpool_num_free_blocks(t->pool), 4, "4 free");
    cr_assert_eq(kvpool_num_held_only_blocks(t->pool), 4, "4 held only");
}

Test(sched_offload, blocked_on_offload_never_preempts_unrelated_running_work)
{
    struct fake_tiers t = {0};
    struct sched *s = make(&t, false);
    leave_held_blocks(s, &t);
    struct sched_request *a = kvsim_test_add_request(s, 1, 2000, 7, 20),
                         *c = kvsim_test_add_request(s, 2, 3000, 7, 20);
    struct sched_step *st = schedule(s); /* 2 blocks each: nothing free */
    cr_assert(scheduled(st, a) && scheduled(st, c), "both admitted");
    output(s, st);
    bool blocked = false;
    for (int k = 0; k < 4 && !blocked; k++) {
        st = schedule(s);
        struct sched_offload_status os;
        sched_offload_status(s, &os);
        blocked = os.blocked != NULL;
        if (blocked) {
            cr_assert_eq(os.blocked, a, "a (the first to grow) is blocked");
            cr_assert(os.in_running_phase, "in the running phase");
            cr_assert_eq(os.num_short, 1, "one block short");
            cr_assert_eq(st->num_preempted, 0, "nobody preempted for it");
            cr_assert_eq(st->num_scheduled, 0, "nothing runs ahead of it");
        }
        output(s, st);
    }
    cr_assert(blocked, "a ran out of free blocks while copies held 4");
    cr_assert_eq(sched_num_preemptions(s), 0, "no preemption at all");
    cr_assert_eq(a->status, SCHED_RUNNING, "a keeps running with its blocks");
    cr_assert_eq(c->status, SCHED_RUNNING, "c keeps running with its blocks");
    /* The copies end: both continue. */
    while (t.num_held)
        kvpool_release_hold(t.pool, t.held[--t.num_held]);
    st = schedule(s);
    cr_assert(scheduled(st, a) && scheduled(st, c), "both run once the holds are released");
    output(s, st);
    struct sched_offload_counters oc;
    sched_offload_counters(s, &oc);
    cr_assert_geq(oc.blocked, 1, "counted");
    sched_destroy(s);
}

Test(sched_offload, blocked_admission_keeps_its_place_and_leaves_the_pool_untouched)
{
    struct fake_tiers t = {0};
    struct sched *s = make(&t, false);
    leave_held_blocks(s, &t);
    kvpool_block_id before[16], after[16];
    uint32_t nb = kvpool_free_queue_snapshot(t.pool, before, 16);
    uint64_t gen = kvpool_generation(t.pool);
    struct sched_request *b = kvsim_test_add_request(s, 1, 2000, 20, 1); /* 5 blocks: 1 short */
    struct sched_request *d =
        kvsim_test_add_request(s, 2, 3000, 3, 1); /* would fit, but b is ahead */
    struct sched_step *st = schedule(s);
    struct sched_offload_status os;
    sched_offload_status(s, &os);
    cr_assert_eq(os.blocked, b, "b is blocked on offload");
    cr_assert_not(os.in_running_phase, "at admission");
    cr_assert_eq(st->num_scheduled, 0, "FCFS: nobody passes the blocked head");
    cr_assert_eq(b->kv.num_blocks, 0, "b holds nothing");
    cr_assert_eq(b->status, SCHED_WAITING, "b waits");
    cr_assert_eq(d->status, SCHED_WAITING, "d waits behind it");
    uint32_t na = kvpool_free_queue_snapshot(t.pool, after, 16);
    cr_assert_eq(na, nb, "free count unchanged");
    for (uint32_t i = 0; i < na; i++)
        cr_assert_eq(after[i], before[i], "free queue unchanged at %u", i);
    cr_assert_eq(kvpool_generation(t.pool), gen, "no pool mutation");
    output(s, st);
    sched_destroy(s);
}

Test(sched_offload, retry_now_needs_evidence_and_happens_once_per_attempt)
{
    struct fake_tiers t = {0};
    struct sched *s = make(&t, false);
    leave_held_blocks(s, &t);
    struct sched_request *b = kvsim_test_add_request(s, 1, 2000, 24, 1); /* 6 blocks: 2 short */
    /* A relief that releases nothing: no retry. */
    struct sched_step *st = schedule(s);
    struct sched_offload_counters oc;
    sched_offload_counters(s, &oc);
    cr_assert_eq(t.relieves, 1, "asked once");
    cr_assert_eq(oc.retry_now, 0, "no capacity moved: no retry");
    cr_assert_eq(oc.blocked, 1, "one blocked outcome");
    output(s, st);
    /* One block per relief: retry once, still short, stop (no second relief this attempt). */
    t.release_per_relieve = 1;
    st = schedule(s);
    sched_offload_counters(s, &oc);
    cr_assert_eq(t.relieves, 2, "one relief for this attempt");
    cr_assert_eq(oc.retry_now, 1, "one RETRY_NOW");
    cr_assert_eq(oc.blocked, 3, "blocked before and after the retry");
    cr_assert_not(scheduled(st, b), "still 1 short");
    output(s, st);
    /* Next step: the relief closes the gap and the retry admits b. */
    st = schedule(s);
    sched_offload_counters(s, &oc);
    cr_assert_eq(t.relieves, 3, "one more relief");
    cr_assert_eq(oc.retry_now, 2, "one more retry");
    cr_assert(scheduled(st, b), "b admitted on its retry");
    output(s, st);
    sched_destroy(s);
}

Test(sched_offload, onboarding_parks_then_promotes_with_loaded_tokens)
{
    struct fake_tiers t = {.lookup_blocks = 3};
    struct sched *s = make(&t, false);
    struct sched_request *b =
        kvsim_test_add_request(s, 1, 2000, 14, 2); /* 3 full blocks + 2 tokens */
    struct sched_step *st = schedule(s);
    cr_assert_eq(t.loads, 1, "a load started");
    cr_assert_eq(t.loading, b, "for b");
    cr_assert_eq(t.load_first, 0, "no G1 hits: from block 0");
    cr_assert_eq(t.load_n, 3, "3 blocks");
    cr_assert_eq(b->status, SCHED_WAITING_FOR_REMOTE_KVS, "b waits for its load");
    cr_assert_eq(b->kv.owner, KVPOOL_OWNER_DEST_RESERVATION, "destination reservation");
    cr_assert_eq(b->kv.num_blocks, 3, "destination blocks reserved");
    output(s, st);
    st = schedule(s);
    cr_assert_eq(st->num_scheduled, 0, "still loading");
    output(s, st);
    cr_assert_eq(sched_load_finished(s, b, true), 0, "load done");
    cr_assert_eq(sched_load_finished(s, b, true), -EINVAL, "only once");
    st = schedule(s);
    cr_assert(scheduled(st, b), "promoted and running");
    cr_assert_eq(st->scheduled[0].num_tokens, 2, "only the 2 unloaded tokens are computed");
    cr_assert_eq(b->onboarded_tokens, 12, "12 tokens onboarded");
    output(s, st);
    sched_destroy(s);
}

Test(sched_offload, failed_onboarding_falls_back_to_recompute_once)
{
    struct fake_tiers t = {.lookup_blocks = 3};
    struct sched *s = make(&t, false);
    struct sched_request *b = kvsim_test_add_request(s, 1, 2000, 14, 2);
    struct sched_step *st = schedule(s);
    output(s, st);
    cr_assert_eq(sched_load_finished(s, b, false), 0, "load failed");
    uint32_t lookups = t.lookups;
    st = schedule(s);
    cr_assert(scheduled(st, b), "b runs");
    cr_assert_eq(st->scheduled[0].num_tokens, 14, "everything recomputed");
    cr_assert_eq(t.lookups, lookups, "no second onboarding attempt");
    cr_assert_eq(b->onboarded_tokens, 0, "nothing onboarded");
    struct sched_offload_counters oc;
    sched_offload_counters(s, &oc);
    cr_assert_eq(oc.load_failures, 1, "counted");
    output(s, st);
    /* A load that cannot even start fails at once the same way. */
    t.load_rc = -EIO;
    struct sched_request *c = kvsim_test_add_request(s, 2, 5000, 14, 1);
    st = schedule(s);
    cr_assert_eq(c->status, SCHED_WAITING_FOR_REMOTE_KVS, "parked");
    output(s, st);
    st = schedule(s);
    cr_assert(scheduled(st, c), "recomputes");
    output(s, st);
    sched_destroy(s);
}

Test(sched_offload, legacy_partial_alloc_keeps_blocks_and_preempts_for_a_blocked_head)
{
    struct fake_tiers t = {0};
    struct sched *s = make(&t, true);
    leave_held_blocks(s, &t);
    struct sched_request *a = kvsim_test_add_request(s, 1, 2000, 3, 20); /* 1 block, running */
    struct sched_step *st = schedule(s);
    output(s, st);
    struct sched_request *b =
        kvsim_test_add_request(s, 2, 3000, 20, 1); /* 5 blocks: 2 short, 4 held */
    st = schedule(s);
    cr_assert_eq(b->status, SCHED_WAITING, "b still waits");
    cr_assert_eq(b->kv.num_blocks, 3, "but keeps the 3 free blocks it got");
    cr_assert_eq(a->status, SCHED_PREEMPTED, "a was preempted for it");
    cr_assert_eq(st->num_scheduled, 0, "nothing runs");
    struct sched_violation v;
    cr_assert_eq(sched_check(s, &v), -EUCLEAN, "the checker flags it");
    cr_assert_str_eq(v.rule, "waiting_holds_no_blocks", "rule %s", v.rule);
    cr_assert_eq(v.request_id, 2, "request b");
    output(s, st);
    sched_destroy(s);
}
