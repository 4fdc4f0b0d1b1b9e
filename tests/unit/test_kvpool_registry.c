/*
 * test_kvpool_registry.c - the shared block registry (kvpool/registry.h) against its contract.
 *
 * Suite registry: presence intervals at virtual times, duplicates (writers, tiers, intervals),
 * skipped re-registrations and removals, watermark monotonicity and the -EINVAL rules, the
 * minimum watermark, the batch presence check, reclaim horizons, destroy with live entries,
 * and one test with joined threads (a writer publishing while a reader checks at the
 * watermark). The test thread registers with RCU in the fixture; threads go offline around
 * joins. Multi-threaded stress under TSan lives in tests/stress/stress_registry.c (Criterion
 * cannot run under TSan).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvpool/kvpool.h"

#include "common.h"

static void rt_init(void) { kvpool_registry_thread_register(); }
static void rt_fini(void) { kvpool_registry_thread_unregister(); }

TestSuite(registry, .init = rt_init, .fini = rt_fini, .timeout = 60);

/* ---- helpers --------------------------------------------------------------------------------- */

static struct kvpool_registry *rt_create(uint32_t max_writers)
{
    struct kvpool_registry *reg = NULL;
    int rc = kvpool_registry_create(max_writers, 0, &reg);
    cr_assert_eq(rc, 0, "kvpool_registry_create(%u) returned %d", max_writers, rc);
    cr_assert_not_null(reg);
    return reg;
}

static struct kvpool_registry_writer *rt_writer(struct kvpool_registry *reg, int64_t vtime)
{
    struct kvpool_registry_writer *w = NULL;
    int rc = kvpool_registry_writer_create(reg, vtime, &w);
    cr_assert_eq(rc, 0, "kvpool_registry_writer_create returned %d", rc);
    cr_assert_not_null(w);
    return w;
}

static void rt_reg(struct kvpool_registry_writer *w, enum kvpool_tier tier, kvpool_hash h,
                   int64_t vtime, int64_t expect)
{
    int64_t rc = kvpool_registry_register_batch(w, tier, &h, 1, vtime);
    cr_assert_eq(rc, expect,
                 "register %" PRIu64 " in %s at %" PRId64 ": got %" PRId64 ", expected %" PRId64, h,
                 kvpool_tier_name(tier), vtime, rc, expect);
}

static void rt_rm(struct kvpool_registry_writer *w, enum kvpool_tier tier, kvpool_hash h,
                  int64_t vtime, int64_t expect)
{
    int64_t rc = kvpool_registry_remove_batch(w, tier, &h, 1, vtime);
    cr_assert_eq(rc, expect,
                 "remove %" PRIu64 " in %s at %" PRId64 ": got %" PRId64 ", expected %" PRId64, h,
                 kvpool_tier_name(tier), vtime, rc, expect);
}

static void rt_pub(struct kvpool_registry_writer *w, int64_t vtime)
{
    int rc = kvpool_registry_publish(w, vtime);
    cr_assert_eq(rc, 0, "publish(%" PRId64 ") returned %d", vtime, rc);
}

/* Asserts presence of h in tier at each time of [from, to]. */
static void rt_expect(const struct kvpool_registry *reg, enum kvpool_tier tier, kvpool_hash h,
                      int64_t from, int64_t to, bool want)
{
    for (int64_t t = from; t <= to; t++) {
        bool got = kvpool_registry_contains_rcu(reg, tier, h, t);
        cr_assert_eq(got, want, "hash %" PRIu64 " in %s at vtime %" PRId64 ": %s, expected %s", h,
                     kvpool_tier_name(tier), t, got ? "present" : "absent",
                     want ? "present" : "absent");
    }
}

/* ---- presence intervals ---------------------------------------------------------------------- */

Test(registry, empty_registry_contains_nothing)
{
    struct kvpool_registry *reg = rt_create(1);
    rt_expect(reg, KVPOOL_TIER_G1, 42, -3, 3, false);
    cr_assert_eq(kvpool_registry_size_rcu(reg), 0);
    cr_assert_eq(kvpool_registry_min_watermark_acquire(reg), KVPOOL_VTIME_NEVER,
                 "no writers: the minimum over an empty set is 'never'");
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

Test(registry, create_rejects_bad_arguments)
{
    struct kvpool_registry *reg = (void *)1;
    cr_assert_eq(kvpool_registry_create(0, 0, &reg), -EINVAL);
    cr_assert_null(reg, "a failed create clears *out");
    cr_assert_eq(kvpool_registry_create(1, 0, NULL), -EINVAL);
    kvpool_registry_destroy(NULL); /* accepted */
    cr_assert_str_eq(kvpool_tier_name(KVPOOL_TIER_G2), "G2");
    cr_assert_str_eq(kvpool_tier_name((enum kvpool_tier)7), "?");
}

Test(registry, registered_entry_is_present_from_its_time_until_removal)
{
    struct kvpool_registry *reg = rt_create(1);
    struct kvpool_registry_writer *w = rt_writer(reg, 0);
    rt_reg(w, KVPOOL_TIER_G2, 7, 10, 1);
    rt_pub(w, 15);
    rt_expect(reg, KVPOOL_TIER_G2, 7, 0, 9, false);
    rt_expect(reg, KVPOOL_TIER_G2, 7, 10, 15, true);
    rt_rm(w, KVPOOL_TIER_G2, 7, 20, 1);
    rt_pub(w, 25);
    rt_expect(reg, KVPOOL_TIER_G2, 7, 0, 9, false);
    rt_expect(reg, KVPOOL_TIER_G2, 7, 10, 19, true); /* history: still answered */
    rt_expect(reg, KVPOOL_TIER_G2, 7, 20, 25, false);
    cr_assert_eq(kvpool_registry_size_rcu(reg), 1, "removal is logical: the entry stays");
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

Test(registry, tiers_are_independent)
{
    struct kvpool_registry *reg = rt_create(1);
    struct kvpool_registry_writer *w = rt_writer(reg, 0);
    rt_reg(w, KVPOOL_TIER_G1, 5, 1, 1);
    rt_reg(w, KVPOOL_TIER_G3, 5, 2, 1);
    rt_pub(w, 2);
    rt_expect(reg, KVPOOL_TIER_G1, 5, 1, 2, true);
    rt_expect(reg, KVPOOL_TIER_G2, 5, 0, 2, false);
    rt_expect(reg, KVPOOL_TIER_G3, 5, 1, 1, false);
    rt_expect(reg, KVPOOL_TIER_G3, 5, 2, 2, true);
    rt_rm(w, KVPOOL_TIER_G1, 5, 3, 1);
    rt_rm(w, KVPOOL_TIER_G2, 5, 3, 0); /* nothing live in G2 */
    rt_pub(w, 3);
    rt_expect(reg, KVPOOL_TIER_G1, 5, 3, 3, false);
    rt_expect(reg, KVPOOL_TIER_G3, 5, 3, 3, true);
    cr_assert_eq(kvpool_registry_contains_rcu(reg, (enum kvpool_tier)3, 5, 3), false,
                 "a bad tier contains nothing");
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

Test(registry, same_hash_from_two_writers_is_two_entries)
{
    struct kvpool_registry *reg = rt_create(2);
    struct kvpool_registry_writer *a = rt_writer(reg, 0), *b = rt_writer(reg, 0);
    rt_reg(a, KVPOOL_TIER_G2, 99, 10, 1);
    rt_reg(b, KVPOOL_TIER_G2, 99, 20, 1);
    rt_rm(a, KVPOOL_TIER_G2, 99, 30, 1);
    rt_pub(a, 100);
    rt_pub(b, 100);
    cr_assert_eq(kvpool_registry_size_rcu(reg), 2);
    rt_expect(reg, KVPOOL_TIER_G2, 99, 9, 9, false);
    rt_expect(reg, KVPOOL_TIER_G2, 99, 10, 100, true); /* a's interval, then b's */
    rt_rm(b, KVPOOL_TIER_G2, 99, 101, 1);
    rt_rm(b, KVPOOL_TIER_G2, 99, 101, 0); /* b's entry is already removed */
    rt_pub(b, 101);
    rt_expect(reg, KVPOOL_TIER_G2, 99, 101, 101, false);
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

Test(registry, a_writer_reregistering_after_removal_gets_a_second_interval)
{
    struct kvpool_registry *reg = rt_create(1);
    struct kvpool_registry_writer *w = rt_writer(reg, 0);
    rt_reg(w, KVPOOL_TIER_G1, 3, 10, 1);
    rt_rm(w, KVPOOL_TIER_G1, 3, 20, 1);
    rt_reg(w, KVPOOL_TIER_G1, 3, 30, 1);
    rt_rm(w, KVPOOL_TIER_G1, 3, 40, 1);
    rt_reg(w, KVPOOL_TIER_G1, 3, 40, 1); /* removed and registered again at the same time */
    rt_pub(w, 50);
    cr_assert_eq(kvpool_registry_size_rcu(reg), 3);
    rt_expect(reg, KVPOOL_TIER_G1, 3, 0, 9, false);
    rt_expect(reg, KVPOOL_TIER_G1, 3, 10, 19, true);
    rt_expect(reg, KVPOOL_TIER_G1, 3, 20, 29, false);
    rt_expect(reg, KVPOOL_TIER_G1, 3, 30, 50, true);
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

Test(registry, live_duplicates_of_one_writer_are_skipped)
{
    struct kvpool_registry *reg = rt_create(1);
    struct kvpool_registry_writer *w = rt_writer(reg, 0);
    const kvpool_hash batch[] = {1, 2, 1, 3, 2};
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G2, batch, 5, 1), 3,
                 "repeats inside a batch are skipped");
    const kvpool_hash again[] = {3, 4};
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G2, again, 2, 2), 1,
                 "a hash already live for this writer and tier is skipped");
    cr_assert_eq(kvpool_registry_size_rcu(reg), 4);
    /* One removal ends the single interval of 3, which started at 1 (not 2). */
    rt_rm(w, KVPOOL_TIER_G2, 3, 5, 1);
    rt_pub(w, 6);
    rt_expect(reg, KVPOOL_TIER_G2, 3, 1, 4, true);
    rt_expect(reg, KVPOOL_TIER_G2, 3, 5, 6, false);
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G2, NULL, 0, 7), 0);
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

Test(registry, same_time_register_and_remove_is_never_present)
{
    struct kvpool_registry *reg = rt_create(1);
    struct kvpool_registry_writer *w = rt_writer(reg, 0);
    rt_reg(w, KVPOOL_TIER_G3, 11, 5, 1);
    rt_rm(w, KVPOOL_TIER_G3, 11, 5, 1);
    rt_pub(w, 5);
    rt_expect(reg, KVPOOL_TIER_G3, 11, 0, 5, false);
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

/* ---- watermarks ------------------------------------------------------------------------------ */

Test(registry, virtual_time_never_decreases)
{
    struct kvpool_registry *reg = rt_create(1);
    struct kvpool_registry_writer *w = rt_writer(reg, 100);
    kvpool_hash h = 1;
    cr_assert_eq(kvpool_registry_watermark_acquire(w), 100, "starts at its creation time");
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G1, &h, 1, 100), -EINVAL,
                 "a batch at the creation time (already 'published')");
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G1, &h, 1, 110), 1);
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G1, &h, 1, 105), -EINVAL,
                 "a batch earlier than the previous call");
    cr_assert_eq(kvpool_registry_remove_batch(w, KVPOOL_TIER_G1, &h, 1, 109), -EINVAL);
    cr_assert_eq(kvpool_registry_publish(w, 109), -EINVAL, "publish below the last batch");
    cr_assert_eq(kvpool_registry_publish(w, 120), 0);
    cr_assert_eq(kvpool_registry_publish(w, 120), 0, "publishing the same value again is fine");
    cr_assert_eq(kvpool_registry_publish(w, 119), -EINVAL, "the watermark never goes back");
    cr_assert_eq(kvpool_registry_watermark_acquire(w), 120);
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G1, &h, 1, 120), -EINVAL,
                 "a batch at a published time would break the watermark's promise");
    cr_assert_eq(kvpool_registry_remove_batch(w, KVPOOL_TIER_G1, &h, 1, 120), -EINVAL);
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G1, &h, 1, KVPOOL_VTIME_NEVER),
                 -EINVAL, "KVPOOL_VTIME_NEVER is reserved");
    cr_assert_eq(kvpool_registry_register_batch(w, (enum kvpool_tier)3, &h, 1, 130), -EINVAL);
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G1, NULL, 1, 130), -EINVAL);
    /* Nothing of the refused calls happened. */
    rt_expect(reg, KVPOOL_TIER_G1, 1, 110, 120, true);
    cr_assert_eq(kvpool_registry_size_rcu(reg), 1);
    rt_rm(w, KVPOOL_TIER_G1, 1, 121, 1);
    rt_pub(w, 121);
    rt_expect(reg, KVPOOL_TIER_G1, 1, 121, 121, false);
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

Test(registry, min_watermark_is_the_slowest_open_writer)
{
    struct kvpool_registry *reg = rt_create(3);
    struct kvpool_registry_writer *a = rt_writer(reg, 0), *b = rt_writer(reg, 5);
    cr_assert_eq(kvpool_registry_min_watermark_acquire(reg), 0);
    rt_pub(a, 50);
    cr_assert_eq(kvpool_registry_min_watermark_acquire(reg), 5);
    rt_pub(b, 40);
    cr_assert_eq(kvpool_registry_min_watermark_acquire(reg), 40);
    rt_pub(b, KVPOOL_VTIME_NEVER); /* b is done */
    cr_assert_eq(kvpool_registry_min_watermark_acquire(reg), 50);
    kvpool_hash h = 1;
    cr_assert_eq(kvpool_registry_register_batch(b, KVPOOL_TIER_G1, &h, 1, 1000), -EINVAL,
                 "a closed writer cannot write");
    struct kvpool_registry_writer *c = rt_writer(reg, 45);
    cr_assert_eq(kvpool_registry_min_watermark_acquire(reg), 45, "a new writer counts at once");
    struct kvpool_registry_writer *d = NULL;
    cr_assert_eq(kvpool_registry_writer_create(reg, 0, &d), -ENOSPC);
    cr_assert_eq(kvpool_registry_writer_create(reg, KVPOOL_VTIME_NEVER, &d), -EINVAL);
    (void)c;
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

/* ---- batch presence -------------------------------------------------------------------------- */

Test(registry, presence_batch_matches_contains)
{
    struct kvpool_registry *reg = rt_create(2);
    struct kvpool_registry_writer *a = rt_writer(reg, 0), *b = rt_writer(reg, 0);
    kvpool_hash hs[64];
    for (int i = 0; i < 64; i++)
        hs[i] = UINT64_C(0x1000) + (kvpool_hash)i * 17;
    /* a: even indices in G2 at 10; b: multiples of 3 in G2 at 20; a removes multiples of 4 at
     * 30. */
    for (int i = 0; i < 64; i += 2)
        rt_reg(a, KVPOOL_TIER_G2, hs[i], 10, 1);
    for (int i = 0; i < 64; i += 3)
        rt_reg(b, KVPOOL_TIER_G2, hs[i], 20, 1);
    for (int i = 0; i < 64; i += 4)
        rt_rm(a, KVPOOL_TIER_G2, hs[i], 30, 1);
    rt_pub(a, 40);
    rt_pub(b, 40);
    const int64_t times[] = {9, 10, 20, 29, 30, 40};
    for (size_t t = 0; t < sizeof times / sizeof times[0]; t++) {
        bool present[64];
        int64_t n = kvpool_registry_presence_rcu(reg, KVPOOL_TIER_G2, hs, 64, times[t], present);
        int64_t want_n = 0;
        for (int i = 0; i < 64; i++) {
            int64_t v = times[t];
            bool want =
                (i % 2 == 0 && v >= 10 && !(i % 4 == 0 && v >= 30)) || (i % 3 == 0 && v >= 20);
            cr_assert_eq(present[i], want, "hash #%d at %" PRId64 ": %d, expected %d", i, v,
                         present[i], want);
            cr_assert_eq(present[i], kvpool_registry_contains_rcu(reg, KVPOOL_TIER_G2, hs[i], v));
            want_n += want;
        }
        cr_assert_eq(n, want_n, "presence count at %" PRId64, times[t]);
    }
    bool p[1];
    cr_assert_eq(kvpool_registry_presence_rcu(reg, KVPOOL_TIER_G1, hs, 1, 40, p), 0);
    cr_assert_eq(kvpool_registry_presence_rcu(reg, (enum kvpool_tier)9, hs, 1, 40, p), -EINVAL);
    cr_assert_eq(kvpool_registry_presence_rcu(reg, KVPOOL_TIER_G1, NULL, 1, 40, p), -EINVAL);
    cr_assert_eq(kvpool_registry_presence_rcu(reg, KVPOOL_TIER_G1, NULL, 0, 40, NULL), 0);
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

/* ---- reclamation ----------------------------------------------------------------------------- */

Test(registry, reclaim_deletes_only_entries_removed_at_or_before_the_horizon)
{
    struct kvpool_registry *reg = rt_create(2);
    struct kvpool_registry_writer *a = rt_writer(reg, 0), *b = rt_writer(reg, 0);
    /* a: 1..10 registered at 1, hash i removed at 10 + i. b: 100..104 at 1, never removed. */
    for (kvpool_hash h = 1; h <= 10; h++)
        rt_reg(a, KVPOOL_TIER_G2, h, 1, 1);
    for (kvpool_hash h = 100; h <= 104; h++)
        rt_reg(b, KVPOOL_TIER_G2, h, 1, 1);
    for (kvpool_hash h = 1; h <= 10; h++)
        rt_rm(a, KVPOOL_TIER_G2, h, 10 + (int64_t)h, 1);
    rt_pub(a, 30);
    rt_pub(b, 30);
    cr_assert_eq(kvpool_registry_size_rcu(reg), 15);

    cr_assert_eq(kvpool_registry_reclaim(reg, 10), 0, "nothing removed at <= 10");
    cr_assert_eq(kvpool_registry_reclaim(reg, 14), 4, "hashes 1..4 (removed at 11..14)");
    cr_assert_eq(kvpool_registry_size_rcu(reg), 11);
    cr_assert_eq(kvpool_registry_reclaim(reg, 14), 0, "idempotent");
    /* Queries at times >= the horizon are unaffected. */
    for (kvpool_hash h = 1; h <= 10; h++) {
        int64_t removed_at = 10 + (int64_t)h;
        if (removed_at > 14)
            rt_expect(reg, KVPOOL_TIER_G2, h, 14, removed_at - 1, true);
        rt_expect(reg, KVPOOL_TIER_G2, h, removed_at > 14 ? removed_at : 14, 30, false);
    }
    for (kvpool_hash h = 100; h <= 104; h++)
        rt_expect(reg, KVPOOL_TIER_G2, h, 14, 30, true);
    kvpool_registry_thread_quiescent();
    cr_assert_eq(kvpool_registry_reclaim(reg, INT64_MAX - 1), 6);
    cr_assert_eq(kvpool_registry_size_rcu(reg), 5, "live entries are never reclaimed");
    for (kvpool_hash h = 100; h <= 104; h++)
        rt_expect(reg, KVPOOL_TIER_G2, h, 1, 30, true);
    kvpool_registry_barrier(); /* every reclaimed entry freed */
    /* A reclaimed hash can be registered again. */
    rt_reg(a, KVPOOL_TIER_G2, 1, 31, 1);
    rt_pub(a, 31);
    rt_expect(reg, KVPOOL_TIER_G2, 1, 31, 31, true);
    kvpool_registry_destroy(reg);
    KVSIM_TEST_LEAK_CHECK();
}

Test(registry, destroy_frees_live_removed_and_reclaimed_entries)
{
    struct kvpool_registry *reg = NULL;
    cr_assert_eq(kvpool_registry_create(2, 4096, &reg), 0);
    struct kvpool_registry_writer *w = rt_writer(reg, 0);
    enum { N = 5000 };
    static kvpool_hash hs[N];
    for (int i = 0; i < N; i++)
        hs[i] = (kvpool_hash)i * UINT64_C(0x9e3779b97f4a7c15);
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G1, hs, N, 1), N);
    cr_assert_eq(kvpool_registry_register_batch(w, KVPOOL_TIER_G2, hs, N / 2, 2), N / 2);
    cr_assert_eq(kvpool_registry_remove_batch(w, KVPOOL_TIER_G1, hs, N / 2, 3), N / 2);
    cr_assert_eq(kvpool_registry_reclaim(reg, 3), N / 2);
    cr_assert_eq(kvpool_registry_remove_batch(w, KVPOOL_TIER_G2, hs, 10, 4), 10);
    rt_pub(w, 4);
    cr_assert_eq(kvpool_registry_size_rcu(reg), (size_t)(N - N / 2 + N / 2));
    kvpool_registry_destroy(reg); /* live, removed-unreclaimed and pending-free entries */
    KVSIM_TEST_LEAK_CHECK();
}

/* ---- threads --------------------------------------------------------------------------------- */

struct rt_shared {
    struct kvpool_registry *reg;
    struct kvpool_registry_writer *w;
    atomic_bool done;
    atomic_int failures;
    _Atomic int64_t floor; /* the reader never asks about earlier times: the reclaim horizon */
    int64_t steps;
};

/* Step s (vtime s + 1) registers hash s and removes hash s - 8 in G2, then publishes. */
static void *rt_writer_main(void *arg)
{
    struct rt_shared *sh = arg;
    kvpool_registry_thread_register();
    for (int64_t s = 0; s < sh->steps; s++) {
        kvpool_hash h = (kvpool_hash)s;
        if (kvpool_registry_register_batch(sh->w, KVPOOL_TIER_G2, &h, 1, s + 1) != 1)
            atomic_fetch_add(&sh->failures, 1);
        if (s >= 8) {
            h = (kvpool_hash)(s - 8);
            if (kvpool_registry_remove_batch(sh->w, KVPOOL_TIER_G2, &h, 1, s + 1) != 1)
                atomic_fetch_add(&sh->failures, 1);
        }
        if (kvpool_registry_publish(sh->w, s + 1) != 0)
            atomic_fetch_add(&sh->failures, 1);
        if (s % 64 == 0 && kvpool_registry_reclaim(sh->reg, atomic_load(&sh->floor)) < 0)
            atomic_fetch_add(&sh->failures, 1);
        kvpool_registry_thread_quiescent();
    }
    atomic_store(&sh->done, true);
    kvpool_registry_thread_unregister();
    return NULL;
}

/* At watermark W (step W - 1 done): hashes W-8 .. W-1 present, W-9 absent. */
static void *rt_reader_main(void *arg)
{
    struct rt_shared *sh = arg;
    kvpool_registry_thread_register();
    int64_t last = 0;
    while (!atomic_load(&sh->done)) {
        int64_t wm = kvpool_registry_watermark_acquire(sh->w);
        if (wm < last)
            atomic_fetch_add(&sh->failures, 1);
        last = wm;
        atomic_store(&sh->floor, wm);
        for (int64_t s = wm - 8; s < wm; s++)
            if (s >= 0 &&
                !kvpool_registry_contains_rcu(sh->reg, KVPOOL_TIER_G2, (kvpool_hash)s, wm))
                atomic_fetch_add(&sh->failures, 1);
        if (wm - 9 >= 0 &&
            kvpool_registry_contains_rcu(sh->reg, KVPOOL_TIER_G2, (kvpool_hash)(wm - 9), wm))
            atomic_fetch_add(&sh->failures, 1);
        kvpool_registry_thread_quiescent();
    }
    kvpool_registry_thread_unregister();
    return NULL;
}

Test(registry, reader_at_the_watermark_sees_every_published_batch)
{
    struct rt_shared sh = {.reg = rt_create(1), .steps = 20000};
    sh.w = rt_writer(sh.reg, 0);
    atomic_init(&sh.done, false);
    atomic_init(&sh.failures, 0);
    atomic_init(&sh.floor, 0);
    pthread_t wt, rt;
    cr_assert_eq(pthread_create(&rt, NULL, rt_reader_main, &sh), 0);
    cr_assert_eq(pthread_create(&wt, NULL, rt_writer_main, &sh), 0);
    kvpool_registry_thread_offline(); /* joining blocks */
    pthread_join(wt, NULL);
    pthread_join(rt, NULL);
    kvpool_registry_thread_online();
    cr_assert_eq(atomic_load(&sh.failures), 0, "%d violations", atomic_load(&sh.failures));
    cr_assert_eq(kvpool_registry_watermark_acquire(sh.w), sh.steps);
    rt_expect(sh.reg, KVPOOL_TIER_G2, (kvpool_hash)(sh.steps - 1), sh.steps, sh.steps, true);
    kvpool_registry_destroy(sh.reg);
    KVSIM_TEST_LEAK_CHECK();
}
