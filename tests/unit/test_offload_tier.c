/*
 * test_offload_tier.c - the G2/G3 tier store (offload/tier.c; offload.h, "G2/G3 tier store")
 * against its contract.
 *
 * Suite tier: LRU eviction order, touch, presence filtering (-EEXIST and the batch filter),
 * pins (never evicted, all pinned -> -ENOSPC, nesting, remove refused), remove and reinsert,
 * counters, and a randomized run of 100k operations per capacity against a simple array-based
 * reference model (fixed seed).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "offload/offload.h"

#include "common.h"

TestSuite(tier, .timeout = 60);

static struct offload_tier *tier_new(uint32_t cap)
{
    struct offload_tier *t = NULL;
    cr_assert_eq(offload_tier_create(cap, &t), 0);
    cr_assert_not_null(t);
    return t;
}

/* Expects the unpinned LRU order (least recent first) to be exactly want[0 .. n). */
static void expect_lru(const struct offload_tier *t, const uint64_t *want, size_t n)
{
    uint64_t got[64];
    size_t m = offload_tier_export_lru(t, got, 64);
    cr_assert_eq(m, n, "LRU length %zu, want %zu", m, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "LRU[%zu] = %llu, want %llu", i, (unsigned long long)got[i],
                     (unsigned long long)want[i]);
}

/* Inserts hash and expects rc and, when rc == 0, the eviction report (was_evicted, victim). */
static void ins(struct offload_tier *t, uint64_t hash, int rc, bool was_evicted, uint64_t victim)
{
    bool ev = !was_evicted;
    uint64_t vh = ~victim;
    cr_assert_eq(offload_tier_insert(t, hash, &ev, &vh), rc, "insert %llu",
                 (unsigned long long)hash);
    cr_assert_eq(ev, was_evicted, "insert %llu: evicted flag", (unsigned long long)hash);
    if (was_evicted)
        cr_assert_eq(vh, victim, "insert %llu evicted %llu, want %llu", (unsigned long long)hash,
                     (unsigned long long)vh, (unsigned long long)victim);
}

Test(tier, create_arguments)
{
    struct offload_tier *t = (struct offload_tier *)&t;
    cr_assert_eq(offload_tier_create(0, &t), -EINVAL);
    cr_assert_eq(offload_tier_create(OFFLOAD_TIER_MAX_CAPACITY + 1, &t), -EINVAL);
    cr_assert_eq(offload_tier_create(4, NULL), -EINVAL);
    offload_tier_destroy(NULL);
    t = tier_new(3);
    cr_assert_eq(offload_tier_capacity(t), 3);
    cr_assert_eq(offload_tier_size(t), 0);
    cr_assert_eq(offload_tier_pinned(t), 0);
    cr_assert_not(offload_tier_peek_lru(t, NULL));
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}

Test(tier, lru_eviction_order)
{
    struct offload_tier *t = tier_new(3);
    ins(t, 10, 0, false, 0);
    ins(t, 20, 0, false, 0);
    ins(t, 30, 0, false, 0);
    cr_assert_eq(offload_tier_size(t), 3);
    expect_lru(t, (uint64_t[]){10, 20, 30}, 3);
    ins(t, 40, 0, true, 10);
    ins(t, 50, 0, true, 20);
    ins(t, 60, 0, true, 30);
    ins(t, 70, 0, true, 40);
    expect_lru(t, (uint64_t[]){50, 60, 70}, 3);
    cr_assert_not(offload_tier_contains(t, 10));
    cr_assert_not(offload_tier_contains(t, 40));
    cr_assert(offload_tier_contains(t, 50));
    cr_assert_eq(offload_tier_size(t), 3);
    /* NULL out parameters are accepted. */
    cr_assert_eq(offload_tier_insert(t, 80, NULL, NULL), 0);
    cr_assert_not(offload_tier_contains(t, 50));
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}

Test(tier, touch_moves_to_mru)
{
    struct offload_tier *t = tier_new(3);
    ins(t, 1, 0, false, 0);
    ins(t, 2, 0, false, 0);
    ins(t, 3, 0, false, 0);
    cr_assert(offload_tier_touch(t, 1));
    expect_lru(t, (uint64_t[]){2, 3, 1}, 3);
    cr_assert(offload_tier_touch(t, 1)); /* already MRU */
    expect_lru(t, (uint64_t[]){2, 3, 1}, 3);
    cr_assert_not(offload_tier_touch(t, 99));
    /* contains does not touch */
    cr_assert(offload_tier_contains(t, 2));
    expect_lru(t, (uint64_t[]){2, 3, 1}, 3);
    uint64_t v = 0;
    cr_assert(offload_tier_peek_lru(t, &v));
    cr_assert_eq(v, 2);
    ins(t, 4, 0, true, 2);
    cr_assert(offload_tier_touch(t, 3));
    ins(t, 5, 0, true, 1);
    expect_lru(t, (uint64_t[]){4, 3, 5}, 3);
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}

Test(tier, duplicates_filtered)
{
    struct offload_tier *t = tier_new(3);
    ins(t, 7, 0, false, 0);
    ins(t, 8, 0, false, 0);
    ins(t, 7, -EEXIST, false, 0);
    /* a duplicate is not a use: the LRU order is unchanged */
    expect_lru(t, (uint64_t[]){7, 8}, 2);
    cr_assert_eq(offload_tier_size(t), 2);
    /* a duplicate into a full tier evicts nothing */
    ins(t, 9, 0, false, 0);
    ins(t, 8, -EEXIST, false, 0);
    cr_assert_eq(offload_tier_size(t), 3);
    expect_lru(t, (uint64_t[]){7, 8, 9}, 3);
    /* a pinned entry is still present */
    cr_assert_eq(offload_tier_pin(t, 9), 0);
    ins(t, 9, -EEXIST, false, 0);
    struct offload_tier_counters c;
    offload_tier_counters(t, &c);
    cr_assert_eq(c.filtered, 3);
    cr_assert_eq(c.inserts, 3);
    cr_assert_eq(c.evictions, 0);
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}

Test(tier, pinned_survive_eviction)
{
    struct offload_tier *t = tier_new(3);
    ins(t, 1, 0, false, 0);
    ins(t, 2, 0, false, 0);
    ins(t, 3, 0, false, 0);
    cr_assert_eq(offload_tier_pin(t, 1), 0); /* LRU, but the source of a copy */
    cr_assert_eq(offload_tier_pinned(t), 1);
    cr_assert_eq(offload_tier_pins(t, 1), 1);
    expect_lru(t, (uint64_t[]){2, 3}, 2);
    ins(t, 4, 0, true, 2);
    ins(t, 5, 0, true, 3);
    ins(t, 6, 0, true, 4);
    cr_assert(offload_tier_contains(t, 1));
    /* touch of a pinned entry is a hit and keeps it out of the LRU list */
    cr_assert(offload_tier_touch(t, 1));
    expect_lru(t, (uint64_t[]){5, 6}, 2);
    /* pins nest */
    cr_assert_eq(offload_tier_pin(t, 1), 0);
    cr_assert_eq(offload_tier_pins(t, 1), 2);
    cr_assert_eq(offload_tier_remove(t, 1), -EBUSY);
    cr_assert_eq(offload_tier_unpin(t, 1), 0);
    ins(t, 7, 0, true, 5);
    cr_assert(offload_tier_contains(t, 1));
    /* the last unpin puts it back at MRU */
    cr_assert_eq(offload_tier_unpin(t, 1), 0);
    cr_assert_eq(offload_tier_pinned(t), 0);
    cr_assert_eq(offload_tier_pins(t, 1), 0);
    expect_lru(t, (uint64_t[]){6, 7, 1}, 3);
    cr_assert_eq(offload_tier_unpin(t, 1), -EINVAL);
    cr_assert_eq(offload_tier_pin(t, 99), -ENOENT);
    cr_assert_eq(offload_tier_unpin(t, 99), -ENOENT);
    cr_assert_eq(offload_tier_pins(t, 99), 0);
    ins(t, 8, 0, true, 6);
    ins(t, 9, 0, true, 7);
    ins(t, 10, 0, true, 1);
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}

Test(tier, all_pinned_full_enospc)
{
    struct offload_tier *t = tier_new(2);
    ins(t, 1, 0, false, 0);
    ins(t, 2, 0, false, 0);
    cr_assert_eq(offload_tier_pin(t, 1), 0);
    cr_assert_eq(offload_tier_pin(t, 2), 0);
    cr_assert_not(offload_tier_peek_lru(t, NULL));
    ins(t, 3, -ENOSPC, false, 0);
    cr_assert_not(offload_tier_contains(t, 3));
    cr_assert_eq(offload_tier_size(t), 2);
    /* presence filtering wins over -ENOSPC */
    ins(t, 2, -EEXIST, false, 0);
    struct offload_tier_counters c;
    offload_tier_counters(t, &c);
    cr_assert_eq(c.full, 1);
    cr_assert_eq(c.evictions, 0);
    cr_assert_eq(offload_tier_unpin(t, 2), 0);
    ins(t, 3, 0, true, 2);
    cr_assert(offload_tier_contains(t, 1));
    /* a not-full tier accepts inserts even when every resident entry is pinned */
    struct offload_tier *u = tier_new(3);
    ins(u, 1, 0, false, 0);
    cr_assert_eq(offload_tier_pin(u, 1), 0);
    ins(u, 2, 0, false, 0);
    offload_tier_destroy(u);
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}

Test(tier, remove_then_reinsert)
{
    struct offload_tier *t = tier_new(3);
    ins(t, 1, 0, false, 0);
    ins(t, 2, 0, false, 0);
    ins(t, 3, 0, false, 0);
    cr_assert_eq(offload_tier_remove(t, 2), 0);
    cr_assert_eq(offload_tier_remove(t, 2), -ENOENT);
    cr_assert_not(offload_tier_contains(t, 2));
    cr_assert_eq(offload_tier_size(t), 2);
    expect_lru(t, (uint64_t[]){1, 3}, 2);
    ins(t, 4, 0, false, 0); /* the freed slot is reused without eviction */
    ins(t, 2, 0, true, 1);  /* reinsert: a new MRU entry */
    expect_lru(t, (uint64_t[]){3, 4, 2}, 3);
    cr_assert_eq(offload_tier_remove(t, 2), 0);
    ins(t, 2, 0, false, 0);
    expect_lru(t, (uint64_t[]){3, 4, 2}, 3);
    /* empty the tier completely, then refill */
    cr_assert_eq(offload_tier_remove(t, 3), 0);
    cr_assert_eq(offload_tier_remove(t, 4), 0);
    cr_assert_eq(offload_tier_remove(t, 2), 0);
    cr_assert_eq(offload_tier_size(t), 0);
    expect_lru(t, NULL, 0);
    ins(t, 5, 0, false, 0);
    ins(t, 6, 0, false, 0);
    ins(t, 7, 0, false, 0);
    ins(t, 8, 0, true, 5);
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}

Test(tier, batch_filter_order)
{
    struct offload_tier *t = tier_new(8);
    for (uint64_t h = 100; h < 104; h++)
        ins(t, h, 0, false, 0);
    cr_assert_eq(offload_tier_pin(t, 103), 0);
    const uint64_t in[] = {5, 100, 6, 101, 7, 7, 103, 8, 102};
    const uint64_t want[] = {5, 6, 7, 7, 8}; /* duplicates inside a batch are kept */
    uint64_t out[9];
    size_t n = offload_tier_filter_present(t, in, 9, out);
    cr_assert_eq(n, 5);
    cr_assert_arr_eq(out, want, sizeof(want));
    /* no LRU change */
    expect_lru(t, (uint64_t[]){100, 101, 102}, 3);
    /* in place */
    uint64_t buf[] = {100, 1, 101, 2, 3, 102, 103};
    n = offload_tier_filter_present(t, buf, 7, buf);
    cr_assert_eq(n, 3);
    cr_assert_eq(buf[0], 1);
    cr_assert_eq(buf[1], 2);
    cr_assert_eq(buf[2], 3);
    /* empty and all-present batches */
    cr_assert_eq(offload_tier_filter_present(t, in, 0, out), 0);
    cr_assert_eq(offload_tier_filter_present(t, (uint64_t[]){101, 100}, 2, out), 0);
    struct offload_tier_counters c;
    offload_tier_counters(t, &c);
    cr_assert_eq(c.filtered, 4 + 4 + 2);
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}

Test(tier, counters)
{
    struct offload_tier *t = tier_new(2);
    ins(t, 1, 0, false, 0);                     /* insert */
    ins(t, 2, 0, false, 0);                     /* insert */
    ins(t, 1, -EEXIST, false, 0);               /* filtered */
    cr_assert(offload_tier_touch(t, 1));        /* hit */
    cr_assert(offload_tier_touch(t, 2));        /* hit */
    cr_assert_not(offload_tier_touch(t, 3));    /* miss */
    ins(t, 3, 0, true, 1);                      /* insert + eviction */
    cr_assert_eq(offload_tier_remove(t, 3), 0); /* remove */
    cr_assert_eq(offload_tier_remove(t, 3), -ENOENT);
    cr_assert_eq(offload_tier_pin(t, 2), 0);
    ins(t, 4, 0, false, 0); /* insert */
    cr_assert_eq(offload_tier_pin(t, 4), 0);
    ins(t, 5, -ENOSPC, false, 0); /* full */
    (void)offload_tier_filter_present(t, (uint64_t[]){2, 5, 4}, 3, (uint64_t[3]){0});
    cr_assert(offload_tier_contains(t, 2)); /* not counted */
    struct offload_tier_counters c;
    offload_tier_counters(t, &c);
    cr_assert_eq(c.inserts, 4);
    cr_assert_eq(c.hits, 2);
    cr_assert_eq(c.misses, 1);
    cr_assert_eq(c.evictions, 1);
    cr_assert_eq(c.filtered, 1 + 2);
    cr_assert_eq(c.removes, 1);
    cr_assert_eq(c.full, 1);
    offload_tier_reset_counters(t);
    offload_tier_counters(t, &c);
    struct offload_tier_counters zero;
    memset(&zero, 0, sizeof(zero));
    cr_assert_arr_eq(&c, &zero, sizeof(c));
    cr_assert_eq(offload_tier_size(t), 2); /* contents unchanged */
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}

/* ---- randomized test against a reference model ---------------------------------------------- */

/* The model: lru[0 .. nlru) unpinned hashes, least recent first; pinned[0 .. npin) with counts.
 * Every operation is a linear scan: obviously correct, never fast. */
#define REF_MAX 256
struct ref {
    uint32_t cap;
    uint64_t lru[REF_MAX];
    size_t nlru;
    uint64_t pinned[REF_MAX];
    uint32_t pins[REF_MAX];
    size_t npin;
    struct offload_tier_counters c;
};

static long ref_find(const uint64_t *a, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] == h)
            return (long)i;
    return -1;
}

static void ref_del(uint64_t *a, size_t *n, size_t i)
{
    memmove(&a[i], &a[i + 1], (*n - i - 1) * sizeof(*a));
    (*n)--;
}

static bool ref_contains(const struct ref *r, uint64_t h)
{
    return ref_find(r->lru, r->nlru, h) >= 0 || ref_find(r->pinned, r->npin, h) >= 0;
}

static int ref_insert(struct ref *r, uint64_t h, bool *ev, uint64_t *vh)
{
    *ev = false;
    if (ref_contains(r, h)) {
        r->c.filtered++;
        return -EEXIST;
    }
    if (r->nlru + r->npin == r->cap) {
        if (r->nlru == 0) {
            r->c.full++;
            return -ENOSPC;
        }
        *ev = true;
        *vh = r->lru[0];
        ref_del(r->lru, &r->nlru, 0);
        r->c.evictions++;
    }
    r->lru[r->nlru++] = h;
    r->c.inserts++;
    return 0;
}

static bool ref_touch(struct ref *r, uint64_t h)
{
    long i = ref_find(r->lru, r->nlru, h);
    if (i >= 0) {
        ref_del(r->lru, &r->nlru, (size_t)i);
        r->lru[r->nlru++] = h;
        r->c.hits++;
        return true;
    }
    if (ref_find(r->pinned, r->npin, h) >= 0) {
        r->c.hits++;
        return true;
    }
    r->c.misses++;
    return false;
}

static int ref_remove(struct ref *r, uint64_t h)
{
    long i = ref_find(r->lru, r->nlru, h);
    if (i >= 0) {
        ref_del(r->lru, &r->nlru, (size_t)i);
        r->c.removes++;
        return 0;
    }
    return ref_find(r->pinned, r->npin, h) >= 0 ? -EBUSY : -ENOENT;
}

static int ref_pin(struct ref *r, uint64_t h)
{
    long i = ref_find(r->pinned, r->npin, h);
    if (i >= 0) {
        r->pins[i]++;
        return 0;
    }
    i = ref_find(r->lru, r->nlru, h);
    if (i < 0)
        return -ENOENT;
    ref_del(r->lru, &r->nlru, (size_t)i);
    r->pinned[r->npin] = h;
    r->pins[r->npin++] = 1;
    return 0;
}

static int ref_unpin(struct ref *r, uint64_t h)
{
    long i = ref_find(r->pinned, r->npin, h);
    if (i < 0)
        return ref_find(r->lru, r->nlru, h) >= 0 ? -EINVAL : -ENOENT;
    if (--r->pins[i] == 0) {
        memmove(&r->pins[i], &r->pins[i + 1], (r->npin - (size_t)i - 1) * sizeof(r->pins[0]));
        ref_del(r->pinned, &r->npin, (size_t)i);
        r->lru[r->nlru++] = h;
    }
    return 0;
}

static uint32_t ref_pins(const struct ref *r, uint64_t h)
{
    long i = ref_find(r->pinned, r->npin, h);
    return i >= 0 ? r->pins[i] : 0;
}

static uint64_t rng_next(uint64_t *s) /* xorshift64* */
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * UINT64_C(2685821657736338717);
}

static void check_same(const struct offload_tier *t, const struct ref *r, long step)
{
    cr_assert_eq(offload_tier_size(t), r->nlru + r->npin, "step %ld: size", step);
    cr_assert_eq(offload_tier_pinned(t), r->npin, "step %ld: pinned", step);
    uint64_t got[REF_MAX];
    size_t m = offload_tier_export_lru(t, got, REF_MAX);
    cr_assert_eq(m, r->nlru, "step %ld: LRU length", step);
    cr_assert_arr_eq(got, r->lru, m * sizeof(uint64_t), "step %ld: LRU order", step);
    for (size_t i = 0; i < r->npin; i++)
        cr_assert_eq(offload_tier_pins(t, r->pinned[i]), r->pins[i], "step %ld: pins", step);
    struct offload_tier_counters c;
    offload_tier_counters(t, &c);
    cr_assert_arr_eq(&c, &r->c, sizeof(c), "step %ld: counters", step);
}

/* 100k random operations on a tier of capacity cap, hashes drawn from a universe of 3 * cap
 * values (so hits, duplicates, evictions and pins are all frequent); some hashes are strided by
 * large powers of two to stress the probing and the backward-shift deletion. */
static void random_run(uint32_t cap, uint64_t seed)
{
    struct offload_tier *t = tier_new(cap);
    static struct ref r;
    memset(&r, 0, sizeof(r));
    r.cap = cap;
    uint64_t s = seed;
    const uint64_t universe = 3 * (uint64_t)cap;
    for (long step = 0; step < 100000; step++) {
        uint64_t x = rng_next(&s);
        uint64_t k = (x >> 8) % universe;
        uint64_t h = (k & 1) ? k << 32 : k * 0x10000 + 0xdead0000000000; /* structured hashes */
        unsigned op = (unsigned)(x & 0xff);
        if (op < 90) { /* insert */
            bool ev1 = false, ev2 = false;
            uint64_t v1 = 0, v2 = 0;
            int rc1 = offload_tier_insert(t, h, &ev1, &v1);
            int rc2 = ref_insert(&r, h, &ev2, &v2);
            cr_assert_eq(rc1, rc2, "step %ld: insert rc %d, model %d", step, rc1, rc2);
            cr_assert_eq(ev1, ev2, "step %ld: insert evicted", step);
            if (ev2)
                cr_assert_eq(v1, v2, "step %ld: victim", step);
        } else if (op < 140) { /* touch */
            cr_assert_eq(offload_tier_touch(t, h), ref_touch(&r, h), "step %ld: touch", step);
        } else if (op < 160) { /* contains */
            cr_assert_eq(offload_tier_contains(t, h), ref_contains(&r, h), "step %ld: contains",
                         step);
        } else if (op < 190) { /* remove */
            cr_assert_eq(offload_tier_remove(t, h), ref_remove(&r, h), "step %ld: remove", step);
        } else if (op < 215) { /* pin */
            cr_assert_eq(offload_tier_pin(t, h), ref_pin(&r, h), "step %ld: pin", step);
        } else if (op < 245) { /* unpin: mostly a pinned hash */
            if (r.npin && (x & 0x100))
                h = r.pinned[(x >> 16) % r.npin];
            cr_assert_eq(offload_tier_unpin(t, h), ref_unpin(&r, h), "step %ld: unpin", step);
        } else { /* batch filter */
            uint64_t in[8], out1[8], out2[8];
            size_t n2 = 0;
            for (size_t i = 0; i < 8; i++) {
                uint64_t kk = rng_next(&s) % universe;
                in[i] = (kk & 1) ? kk << 32 : kk * 0x10000 + 0xdead0000000000;
                if (ref_contains(&r, in[i]))
                    r.c.filtered++;
                else
                    out2[n2++] = in[i];
            }
            size_t n1 = offload_tier_filter_present(t, in, 8, out1);
            cr_assert_eq(n1, n2, "step %ld: filter count", step);
            cr_assert_arr_eq(out1, out2, n1 * sizeof(uint64_t), "step %ld: filter", step);
        }
        cr_assert_eq(offload_tier_pins(t, h), ref_pins(&r, h), "step %ld: pins", step);
        if (step % 16 == 0 || cap <= 4)
            check_same(t, &r, step);
    }
    check_same(t, &r, -1);
    /* the run exercised every outcome (cr_log so the sizes are visible with --verbose) */
    cr_log_info("cap %u: %llu inserts, %llu evictions, %llu filtered, %llu full, %llu hits", cap,
                (unsigned long long)r.c.inserts, (unsigned long long)r.c.evictions,
                (unsigned long long)r.c.filtered, (unsigned long long)r.c.full,
                (unsigned long long)r.c.hits);
    cr_assert_gt(r.c.evictions, 0);
    cr_assert_gt(r.c.filtered, 0);
    cr_assert_gt(r.c.hits, 0);
    cr_assert_gt(r.c.removes, 0);
    if (cap <= 4) /* small tiers fill up with pinned entries */
        cr_assert_gt(r.c.full, 0);
    offload_tier_destroy(t);
}

Test(tier, random_vs_reference_model)
{
    random_run(50, UINT64_C(0x5eed0001));
    random_run(1, UINT64_C(0x5eed0002));
    random_run(4, UINT64_C(0x5eed0003));
    random_run(200, UINT64_C(0x5eed0004));
    KVSIM_TEST_LEAK_CHECK();
}

/* A large tier filled, churned and emptied: the hash table stays consistent at scale. */
Test(tier, large_churn)
{
    const uint32_t cap = 100000;
    struct offload_tier *t = tier_new(cap);
    for (uint64_t h = 0; h < cap; h++)
        ins(t, h * 4096, 0, false, 0);
    for (uint64_t h = cap; h < 3 * (uint64_t)cap; h++)
        ins(t, h * 4096, 0, true, (h - cap) * 4096);
    for (uint64_t h = 2 * (uint64_t)cap; h < 3 * (uint64_t)cap; h += 2)
        cr_assert_eq(offload_tier_remove(t, h * 4096), 0);
    for (uint64_t h = 2 * (uint64_t)cap; h < 3 * (uint64_t)cap; h++)
        cr_assert_eq(offload_tier_contains(t, h * 4096), (h & 1) != 0);
    cr_assert_eq(offload_tier_size(t), cap / 2);
    offload_tier_destroy(t);
    KVSIM_TEST_LEAK_CHECK();
}
