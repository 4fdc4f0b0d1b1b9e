/*
 * test_offload.c - the offload pipeline (offload.h) against its contract.
 *
 * Suite offload_bw: the processor-sharing link (the reference model's tests: single transfer,
 * two concurrent at 2x, staggered arrivals, late arrival, infinite bandwidth, ten at 10x) plus
 * exactness (stepping never changes results), clamping, deadlines and partial reports.
 * Suite offload_lane: lanes, permits, successor handoff, settlement, cancellation, shutdown,
 * tokens and failure injection. Most tests run once per executor (parameter 0 = inline,
 * 1 = pool); pool tests use threads but check only deterministic facts: states the contract
 * guarantees at the moment a call returns, counts, and the completion log.
 * Suite offload_exec: the inline and pool executors produce the same completion log.
 *
 * Unless stated, a block is 1,000,000 bytes and a link moves 1e9 bytes/s: 1 block = 1 ms.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "offload/offload.h"

#include "common.h"

TestSuite(offload_bw, .timeout = 30);
TestSuite(offload_lane, .timeout = 60);
TestSuite(offload_exec, .timeout = 60);

#define MS         INT64_C(1000000)
#define GBPS       INT64_C(1000000000)
#define MB         UINT64_C(1000000)
#define GATED      (UINT64_C(1) << 32) /* cookie flag: the work waits for the gate */
#define SLOW       (UINT64_C(1) << 33) /* cookie flag: the work takes 2 ms */
#define MAX_LOG    8192
#define MAX_COOKIE 256

/* EXEC_POOL is the eager hand-off (every batch wakes its worker, the owner only waits): the
 * tests that hold work on a worker with a gate need a worker to take it. EXEC_POOL_ADAPTIVE is
 * the default hand-off, where the owner may take a queued batch back and run it itself. */
enum exec_kind { EXEC_INLINE = 0, EXEC_POOL = 1, EXEC_POOL_ADAPTIVE = 2 };
static const char *kind_name(int k)
{
    return k == EXEC_POOL ? "pool" : k == EXEC_POOL_ADAPTIVE ? "pool (adaptive)" : "inline";
}

/* ---- bandwidth model ------------------------------------------------------------------------ */

static struct offload_bw *bw_new(int64_t bw)
{
    struct offload_bw *l = NULL;
    cr_assert_eq(offload_bw_create(bw, &l), 0);
    return l;
}

/* Advances to now and expects exactly the given (id, time) completions. */
static void bw_expect(struct offload_bw *l, int64_t now, size_t n, const uint64_t *ids,
                      const int64_t *times)
{
    struct offload_bw_completion out[64];
    size_t got = offload_bw_advance_to(l, now, out, 64);
    cr_assert_eq(got, n, "advance_to(%lld): %zu completions, expected %zu", (long long)now, got, n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(out[i].id, ids[i], "completion %zu: id %llu, expected %llu", i,
                     (unsigned long long)out[i].id, (unsigned long long)ids[i]);
        cr_assert_eq(out[i].time, times[i], "completion %zu (id %llu): at %lld, expected %lld", i,
                     (unsigned long long)ids[i], (long long)out[i].time, (long long)times[i]);
    }
}

Test(offload_bw, single_transfer)
{
    struct offload_bw *l = bw_new(GBPS);
    cr_assert_eq(offload_bw_next_deadline(l), OFFLOAD_NEVER);
    cr_assert_eq(offload_bw_start(l, 0, MB, 1), 0);
    cr_assert_eq(offload_bw_next_deadline(l), 1 * MS);
    bw_expect(l, 1 * MS - 1, 0, NULL, NULL);
    bw_expect(l, 1 * MS, 1, (uint64_t[]){1}, (int64_t[]){1 * MS});
    cr_assert_eq(offload_bw_active(l), 0);
    offload_bw_destroy(l);
    KVSIM_TEST_LEAK_CHECK();
}

Test(offload_bw, two_concurrent_take_twice_as_long)
{
    struct offload_bw *l = bw_new(GBPS);
    cr_assert_eq(offload_bw_start(l, 0, MB, 7), 0);
    cr_assert_eq(offload_bw_start(l, 0, MB, 3), 0);
    cr_assert_eq(offload_bw_next_deadline(l), 2 * MS);
    /* same instant: ordered by id */
    bw_expect(l, 5 * MS, 2, (uint64_t[]){3, 7}, (int64_t[]){2 * MS, 2 * MS});
    offload_bw_destroy(l);
    KVSIM_TEST_LEAK_CHECK();
}

Test(offload_bw, staggered_arrivals)
{
    struct offload_bw *l = bw_new(GBPS);
    cr_assert_eq(offload_bw_start(l, 0, MB, 1), 0);
    cr_assert_eq(offload_bw_start(l, MS / 2, MB, 2), 0);
    int64_t d;
    cr_assert_eq(offload_bw_deadline_of(l, 1, &d), 0);
    cr_assert_eq(d, 3 * MS / 2);
    cr_assert_eq(offload_bw_deadline_of(l, 2, &d), 0);
    cr_assert_eq(d, 2 * MS);
    bw_expect(l, 3 * MS / 2, 1, (uint64_t[]){1}, (int64_t[]){3 * MS / 2});
    bw_expect(l, 2 * MS, 1, (uint64_t[]){2}, (int64_t[]){2 * MS});
    offload_bw_destroy(l);
    KVSIM_TEST_LEAK_CHECK();
}

Test(offload_bw, late_arrival_inherits_full_bandwidth)
{
    struct offload_bw *l = bw_new(GBPS);
    cr_assert_eq(offload_bw_start(l, 0, MB, 1), 0);
    bw_expect(l, 1 * MS, 1, (uint64_t[]){1}, (int64_t[]){1 * MS});
    cr_assert_eq(offload_bw_start(l, 5 * MS, MB, 2), 0);
    bw_expect(l, 10 * MS, 1, (uint64_t[]){2}, (int64_t[]){6 * MS});
    offload_bw_destroy(l);
    KVSIM_TEST_LEAK_CHECK();
}

Test(offload_bw, zero_and_negative_bandwidth_are_instant)
{
    for (int64_t b = -1; b <= 0; b++) {
        struct offload_bw *l = bw_new(b);
        cr_assert_eq(offload_bw_start(l, 3 * MS, 1000 * MB, 9), 0);
        cr_assert_eq(offload_bw_start(l, 3 * MS, 1, 4), 0);
        cr_assert_eq(offload_bw_next_deadline(l), 3 * MS);
        bw_expect(l, 3 * MS, 2, (uint64_t[]){4, 9}, (int64_t[]){3 * MS, 3 * MS});
        offload_bw_destroy(l);
    }
    /* and a 0-byte transfer on a finite link */
    struct offload_bw *l = bw_new(GBPS);
    cr_assert_eq(offload_bw_start(l, 0, MB, 1), 0);
    cr_assert_eq(offload_bw_start(l, 0, 0, 2), 0);
    bw_expect(l, 0, 1, (uint64_t[]){2}, (int64_t[]){0});
    bw_expect(l, 1 * MS, 1, (uint64_t[]){1}, (int64_t[]){1 * MS});
    offload_bw_destroy(l);
    KVSIM_TEST_LEAK_CHECK();
}

/* The link keeps the rate it was created with, and that rate sets a lone transfer's time:
 * bytes * 1e9 / rate ns (instant at a rate <= 0), whatever it has carried or dropped. */
Test(offload_bw, bandwidth_is_the_rate_a_lone_transfer_moves_at)
{
    static const int64_t rates[] = {GBPS, 2 * GBPS, 4000, 0, -5};
    static const int64_t times[] = {1 * MS, MS / 2, 250 * INT64_C(1000000000), 0, 0};
    for (int i = 0; i < 5; i++) {
        struct offload_bw *l = bw_new(rates[i]);
        cr_assert_eq(offload_bw_bandwidth(l), rates[i], "created at %lld B/s, reports %lld",
                     (long long)rates[i], (long long)offload_bw_bandwidth(l));
        cr_assert_eq(offload_bw_start(l, 2 * MS, MB, 1), 0);
        int64_t d;
        cr_assert_eq(offload_bw_deadline_of(l, 1, &d), 0);
        cr_assert_eq(d, 2 * MS + times[i], "1 MB at %lld B/s ends at %lld", (long long)rates[i],
                     (long long)d);
        bw_expect(l, 2 * MS + times[i], 1, (uint64_t[]){1}, (int64_t[]){2 * MS + times[i]});
        cr_assert_eq(offload_bw_start(l, 3 * MS + times[i], MB, 2), 0);
        offload_bw_clear(l);
        cr_assert_eq(offload_bw_bandwidth(l), rates[i], "the rate survives transfers and clear");
        offload_bw_destroy(l);
    }
    KVSIM_TEST_LEAK_CHECK();
}

Test(offload_bw, ten_simultaneous_finish_at_ten_times)
{
    struct offload_bw *l = bw_new(GBPS);
    uint64_t ids[10];
    int64_t times[10];
    for (uint64_t i = 0; i < 10; i++) {
        cr_assert_eq(offload_bw_start(l, 0, MB, 100 - i), 0);
        ids[9 - i] = 100 - i;
        times[i] = 10 * MS;
    }
    bw_expect(l, 10 * MS - 1, 0, NULL, NULL);
    bw_expect(l, 10 * MS, 10, ids, times);
    offload_bw_destroy(l);
    KVSIM_TEST_LEAK_CHECK();
}

Test(offload_bw, time_never_runs_backwards)
{
    struct offload_bw *l = bw_new(GBPS);
    bw_expect(l, 5 * MS, 0, NULL, NULL);
    cr_assert_eq(offload_bw_now(l), 5 * MS);
    cr_assert_eq(offload_bw_start(l, 1 * MS, MB, 1), 0); /* clamped to 5 ms */
    bw_expect(l, 2 * MS, 0, NULL, NULL);                 /* earlier: a no-op */
    cr_assert_eq(offload_bw_now(l), 5 * MS);
    bw_expect(l, 6 * MS, 1, (uint64_t[]){1}, (int64_t[]){6 * MS});
    offload_bw_destroy(l);
    KVSIM_TEST_LEAK_CHECK();
}

/*
 * Odd sizes, starts and bandwidth, so that remainders matter, driven by advance_to calls every
 * `step` ns (each start is issued at the first step at or after its time, before the link has
 * moved past it, so it is never clamped). The completions must not depend on the step.
 */
static size_t odd_workload(int64_t step, struct offload_bw_completion *out)
{
    static const uint64_t sizes[] = {999983, 1, 524287, 3000017, 65537, 7, 1299709, 2147483};
    static const int64_t starts[] = {0, 13, 13, 777777, 777778, 1000003, 2500000, 2500001};
    struct offload_bw *l = bw_new(INT64_C(3000000007));
    size_t next = 0, n = 0;
    for (int64_t t = 0; t <= 5 * MS; t += step) {
        while (next < 8 && starts[next] <= t) {
            cr_assert_eq(offload_bw_start(l, starts[next], sizes[next], next), 0);
            next++;
        }
        n += offload_bw_advance_to(l, t, out + n, 16 - n);
    }
    n += offload_bw_advance_to(l, 5 * MS, out + n, 16 - n);
    offload_bw_destroy(l);
    return n;
}

Test(offload_bw, stepping_never_changes_results)
{
    static const int64_t steps[] = {997, 65536, 1000000, 5 * MS};
    struct offload_bw_completion ref[16], got[16];
    size_t nref = odd_workload(1, ref);
    cr_assert_eq(nref, 8);
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        size_t n = odd_workload(steps[s], got);
        cr_assert_eq(n, 8);
        for (size_t i = 0; i < 8; i++)
            cr_assert(got[i].id == ref[i].id && got[i].time == ref[i].time,
                      "step %lld, completion %zu: id %llu at %lld; 1-ns steps: id %llu at %lld",
                      (long long)steps[s], i, (unsigned long long)got[i].id, (long long)got[i].time,
                      (unsigned long long)ref[i].id, (long long)ref[i].time);
    }
    cr_assert_eq(ref[0].id, 1, "the 1-byte transfer finishes first");
    KVSIM_TEST_LEAK_CHECK();
}

Test(offload_bw, deadlines_predict_completions)
{
    struct offload_bw *l = bw_new(INT64_C(2000000000));
    static const uint64_t sizes[] = {3 * MB, 1 * MB, 2 * MB, 1 * MB};
    int64_t predicted[4];
    for (uint64_t i = 0; i < 4; i++)
        cr_assert_eq(offload_bw_start(l, 0, sizes[i], i), 0);
    for (uint64_t i = 0; i < 4; i++)
        cr_assert_eq(offload_bw_deadline_of(l, i, &predicted[i]), 0);
    int64_t dl;
    cr_assert_eq(offload_bw_deadline_of(l, 99, &dl), -ENOENT);
    struct offload_bw_completion out[4];
    size_t got = 0;
    while (got < 4) {
        int64_t next = offload_bw_next_deadline(l);
        cr_assert_neq(next, OFFLOAD_NEVER);
        /* cap 1: one report per call, the rest kept with unchanged times */
        size_t k = offload_bw_advance_to(l, next, out + got, 1);
        cr_assert_eq(k, 1);
        got++;
    }
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(out[i].time, predicted[out[i].id], "id %llu: %lld vs predicted %lld",
                     (unsigned long long)out[i].id, (long long)out[i].time,
                     (long long)predicted[out[i].id]);
    /* 4 at 0.5 GB/s: both 1 MB done at 2 ms; 2 at 1 GB/s: the 2 MB (1 MB left) at 3 ms; the
     * 3 MB alone (1 MB left) at 2 GB/s: 3.5 ms = 7 MB / 2 GB/s */
    cr_assert_eq(predicted[1], 2 * MS);
    cr_assert_eq(predicted[3], 2 * MS);
    cr_assert_eq(predicted[2], 3 * MS);
    cr_assert_eq(predicted[0], 7 * MS / 2);
    offload_bw_destroy(l);
    KVSIM_TEST_LEAK_CHECK();
}

Test(offload_bw, block_bytes)
{
    cr_assert_eq(offload_block_bytes(131072, 16), UINT64_C(2097152));
    cr_assert_eq(offload_block_bytes(UINT64_MAX / 2, 3), 0);
    KVSIM_TEST_LEAK_CHECK();
}

/* ---- lanes: fixtures ------------------------------------------------------------------------ */

struct log_entry {
    uint32_t lane;
    uint64_t seq;
    uint64_t cookie;
    int64_t start, end;
    int result;
};

struct harness {
    struct offload_pool *pool;
    struct offload_pipeline *p;
    struct log_entry log[MAX_LOG];
    size_t nlog;
    _Atomic int gate_open;
    _Atomic int invoked[MAX_COOKIE];
    _Atomic int on_worker[MAX_COOKIE]; /* invocations on a pool worker (not the owner) */
    _Atomic int work_fail[MAX_COOKIE]; /* the work returns this (negative) if set */
    int callback_rc;                   /* what a callback-side settle returned */
    bool callback_chain;               /* completed G1->G2 batches enqueue a G2->G3 batch */
    _Atomic int pool_delay_ms;         /* worker hook: sleep before acknowledging */
    void (*on_subscribed)(struct harness *h);
    bool subscribed_once;
};

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int harness_work(void *arg, const struct offload_work *w)
{
    struct harness *h = arg;
    uint64_t c = w->cookie & (MAX_COOKIE - 1);
    atomic_fetch_add(&h->invoked[c], 1);
    if (w->worker != UINT32_MAX)
        atomic_fetch_add(&h->on_worker[c], 1);
    if (w->cookie & SLOW)
        sleep_ms(2);
    /* Gates hold pool workers only: inline, the work runs on the owner, which opens them. */
    if ((w->cookie & GATED) && w->worker != UINT32_MAX) {
        for (int i = 0; i < 20000 && !atomic_load(&h->gate_open); i++)
            usleep(500);
    }
    return atomic_load(&h->work_fail[c]);
}

static void harness_complete(void *arg, const struct offload_completion *c)
{
    struct harness *h = arg;
    cr_assert(h->nlog < MAX_LOG);
    h->log[h->nlog++] = (struct log_entry){
        .lane = c->token.lane,
        .seq = c->token.seq,
        .cookie = c->cookie,
        .start = c->start_time,
        .end = c->end_time,
        .result = c->result,
    };
    if (h->callback_chain && c->token.lane == OFFLOAD_LANE_G1_G2 && c->result == 0) {
        offload_block_id b = (offload_block_id)c->token.seq;
        struct offload_token t;
        int rc = offload_enqueue(h->p, OFFLOAD_LANE_G2_G3, &b, 1, c->cookie, &t);
        cr_assert_eq(rc, 0, "enqueue from a callback: %d", rc);
        h->callback_rc = offload_settle(h->p, &t);
    }
}

static void harness_pool_hook(void *arg, enum offload_yield_point pt)
{
    struct harness *h = arg;
    int d = atomic_load(&h->pool_delay_ms);
    if (pt == OFFLOAD_YIELD_WORKER_TAKEN && d > 0)
        sleep_ms(d);
}

static void harness_owner_hook(void *arg, enum offload_yield_point pt)
{
    struct harness *h = arg;
    if (pt == OFFLOAD_YIELD_OWNER_SUBSCRIBED && h->on_subscribed && !h->subscribed_once) {
        h->subscribed_once = true;
        h->on_subscribed(h);
    }
}

/* Test configuration: 1 MB blocks, every lane 1 GB/s, the given permits on G1->G2. */
static void test_config(struct offload_config *cfg, struct harness *h, uint32_t permits)
{
    offload_config_default(cfg);
    cfg->block_bytes = MB;
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++) {
        cfg->lanes[l].bandwidth = GBPS;
        cfg->lanes[l].max_blocks = 8;
        cfg->lanes[l].capacity = 64;
        cfg->lanes[l].permits = 1;
    }
    cfg->lanes[OFFLOAD_LANE_G1_G2].permits = permits;
    cfg->work = harness_work;
    cfg->work_arg = h;
    cfg->complete = harness_complete;
    cfg->complete_arg = h;
    cfg->debug_yield = harness_owner_hook;
    cfg->debug_yield_arg = h;
    cfg->settle_timeout_ns = 10 * INT64_C(1000000000);
}

static struct harness *harness_new(int kind, struct offload_config *cfg, uint32_t threads)
{
    struct harness *h = calloc(1, sizeof *h);
    cr_assert_not_null(h);
    if (kind != EXEC_INLINE) {
        struct offload_pool_config pc;
        offload_pool_config_default(&pc);
        pc.threads = threads;
        if (kind == EXEC_POOL)
            pc.wake_work_ns = 0;
        pc.debug_yield = harness_pool_hook;
        pc.debug_yield_arg = h;
        cr_assert_eq(offload_pool_create(&pc, &h->pool), 0);
    }
    cfg->work_arg = cfg->complete_arg = cfg->debug_yield_arg = h;
    int rc = offload_pipeline_create(cfg, h->pool, &h->p);
    cr_assert_eq(rc, 0, "offload_pipeline_create (%s): %d", kind_name(kind), rc);
    return h;
}

static void harness_free(struct harness *h)
{
    atomic_store(&h->gate_open, 1);
    cr_assert_eq(offload_pipeline_destroy(h->p), 0);
    cr_assert_eq(offload_pool_destroy(h->pool), 0);
    free(h);
    KVSIM_TEST_LEAK_CHECK();
}

static struct offload_token enq(struct harness *h, enum offload_lane lane, uint32_t nblocks,
                                uint64_t cookie)
{
    offload_block_id blocks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct offload_token t;
    int rc = offload_enqueue(h->p, lane, blocks, nblocks, cookie, &t);
    cr_assert_eq(rc, 0, "offload_enqueue: %d", rc);
    return t;
}

static int state_of(struct harness *h, const struct offload_token *t)
{
    return offload_token_state(h->p, t);
}

static struct offload_lane_stats lane_stats(struct harness *h, enum offload_lane lane)
{
    struct offload_lane_stats s;
    cr_assert_eq(offload_lane_stats(h->p, lane, &s), 0);
    return s;
}

/* Waits (bounded) until the work of cookie has been invoked. */
static void wait_invoked(struct harness *h, uint64_t cookie)
{
    for (int i = 0; i < 10000 && !atomic_load(&h->invoked[cookie & (MAX_COOKIE - 1)]); i++)
        usleep(500);
    cr_assert(atomic_load(&h->invoked[cookie & (MAX_COOKIE - 1)]) > 0, "work %llu never invoked",
              (unsigned long long)cookie);
}

/* ---- lanes --------------------------------------------------------------------------------- */

/* Permits limit the batches in flight; the rest wait in FIFO order. */
ParameterizedTestParameters(offload_lane, permits_limit_in_flight_fifo)
{
    static int kinds[] = {EXEC_INLINE, EXEC_POOL, EXEC_POOL_ADAPTIVE};
    return cr_make_param_array(int, kinds, 3);
}
ParameterizedTest(int *kind, offload_lane, permits_limit_in_flight_fifo)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 2);
    struct harness *h = harness_new(*kind, &cfg, 2);
    struct offload_token t[5];
    for (int i = 0; i < 5; i++)
        t[i] = enq(h, OFFLOAD_LANE_G1_G2, 1, (uint64_t)i);
    struct offload_lane_stats s = lane_stats(h, OFFLOAD_LANE_G1_G2);
    cr_assert_eq(s.enqueued, 5);
    cr_assert_eq(s.started, 2);
    cr_assert_eq(s.in_flight, 2);
    cr_assert_eq(s.queued, 3);
    cr_assert_eq(state_of(h, &t[2]), OFFLOAD_BATCH_QUEUED);
    /* two at 0.5 GB/s: both at 2 ms; then two more at 4 ms; the last at 5 ms */
    cr_assert_eq(offload_next_deadline(h->p), 2 * MS);
    cr_assert_eq(offload_advance_to(h->p, 100 * MS), 5);
    cr_assert_eq(h->nlog, 5);
    static const int64_t ends[] = {2 * MS, 2 * MS, 4 * MS, 4 * MS, 5 * MS};
    static const int64_t starts[] = {0, 0, 2 * MS, 2 * MS, 4 * MS};
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(h->log[i].seq, i, "%s: drain %zu is seq %llu", kind_name(*kind), i,
                     (unsigned long long)h->log[i].seq);
        cr_assert_eq(h->log[i].end, ends[i]);
        cr_assert_eq(h->log[i].start, starts[i]);
        cr_assert_eq(h->log[i].result, 0);
    }
    s = lane_stats(h, OFFLOAD_LANE_G1_G2);
    cr_assert_eq(s.completed, 5);
    cr_assert_eq(s.blocks, 5);
    cr_assert_eq(s.bytes, 5 * MB);
    cr_assert_eq(s.max_in_flight, 2);
    cr_assert_eq(offload_now(h->p), 100 * MS);
    cr_assert_eq(offload_settle(h->p, &t[4]), 0);
    harness_free(h);
}

/* Concurrency one: settle on a finished batch waits until its queued successor has started
 * (pool: been acknowledged by a worker, which then invokes its work). */
ParameterizedTestParameters(offload_lane, concurrency_one_waits_for_queued_successor)
{
    static int kinds[] = {EXEC_INLINE, EXEC_POOL};
    return cr_make_param_array(int, kinds, 2);
}
ParameterizedTest(int *kind, offload_lane, concurrency_one_waits_for_queued_successor)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    struct harness *h = harness_new(*kind, &cfg, 2);
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 1, 1);
    struct offload_token b = enq(h, OFFLOAD_LANE_G1_G2, 1, 2 | GATED);
    cr_assert_eq(state_of(h, &b), OFFLOAD_BATCH_QUEUED);
    cr_assert_eq(offload_settle(h->p, &a), -EAGAIN, "A is not due before 1 ms");
    /* widen the window between hand-off and acknowledgement */
    atomic_store(&h->pool_delay_ms, 30);
    cr_assert_eq(offload_advance_to(h->p, 1 * MS), 1);
    cr_assert_eq(offload_settle(h->p, &a), 0);
    cr_assert_eq(state_of(h, &a), OFFLOAD_BATCH_COMPLETED);
    cr_assert_eq(state_of(h, &b), OFFLOAD_BATCH_IN_FLIGHT,
                 "%s: settle returned with the successor %s", kind_name(*kind),
                 offload_batch_state_name((enum offload_batch_state)state_of(h, &b)));
    cr_assert(offload_is_stable(h->p));
    struct offload_lane_stats s = lane_stats(h, OFFLOAD_LANE_G1_G2);
    cr_assert_eq(s.started, 2);
    cr_assert_eq(s.in_flight, 1);
    wait_invoked(h, 2); /* acknowledged means the worker goes on to invoke the work */
    atomic_store(&h->pool_delay_ms, 0);
    atomic_store(&h->gate_open, 1);
    cr_assert_eq(offload_advance_to(h->p, 2 * MS), 1);
    cr_assert_eq(offload_settle(h->p, &b), 0);
    cr_assert_eq(h->log[1].start, 1 * MS, "the successor starts at the completion instant");
    cr_assert_eq(h->log[1].end, 2 * MS);
    harness_free(h);
}

/* Two batches completing at the same instant hand their permits to two queued successors. */
ParameterizedTestParameters(offload_lane, simultaneous_completions_fill_every_slot)
{
    static int kinds[] = {EXEC_INLINE, EXEC_POOL};
    return cr_make_param_array(int, kinds, 2);
}
ParameterizedTest(int *kind, offload_lane, simultaneous_completions_fill_every_slot)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 2);
    struct harness *h = harness_new(*kind, &cfg, 2);
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 1, 1);
    struct offload_token b = enq(h, OFFLOAD_LANE_G1_G2, 1, 2);
    struct offload_token c = enq(h, OFFLOAD_LANE_G1_G2, 2, 3 | GATED);
    struct offload_token d = enq(h, OFFLOAD_LANE_G1_G2, 2, 4 | GATED);
    struct offload_token e = enq(h, OFFLOAD_LANE_G1_G2, 1, 5);
    atomic_store(&h->pool_delay_ms, 20);
    cr_assert_eq(offload_advance_to(h->p, 2 * MS), 2);
    cr_assert_eq(offload_settle(h->p, &a), 0);
    cr_assert_eq(state_of(h, &b), OFFLOAD_BATCH_COMPLETED);
    cr_assert_eq(state_of(h, &c), OFFLOAD_BATCH_IN_FLIGHT);
    cr_assert_eq(state_of(h, &d), OFFLOAD_BATCH_IN_FLIGHT);
    cr_assert_eq(state_of(h, &e), OFFLOAD_BATCH_QUEUED);
    struct offload_lane_stats s = lane_stats(h, OFFLOAD_LANE_G1_G2);
    cr_assert_eq(s.in_flight, 2);
    cr_assert_eq(s.started, 4);
    cr_assert(offload_is_stable(h->p), "queue non-empty and all permits in flight is stable");
    atomic_store(&h->pool_delay_ms, 0);
    atomic_store(&h->gate_open, 1);
    cr_assert_eq(offload_advance_to(h->p, 100 * MS), 3);
    cr_assert_eq(offload_settle(h->p, &e), 0);
    /* C and D (2 MB each, sharing) start at 2 ms, end at 6 ms; E starts at 6 ms, ends at 7 ms */
    cr_assert_eq(h->log[2].start, 2 * MS);
    cr_assert_eq(h->log[3].start, 2 * MS);
    cr_assert_eq(h->log[2].end, 6 * MS);
    cr_assert_eq(h->log[4].start, 6 * MS);
    cr_assert_eq(h->log[4].end, 7 * MS);
    harness_free(h);
}

ParameterizedTestParameters(offload_lane, completion_without_successor_settles)
{
    static int kinds[] = {EXEC_INLINE, EXEC_POOL, EXEC_POOL_ADAPTIVE};
    return cr_make_param_array(int, kinds, 3);
}
ParameterizedTest(int *kind, offload_lane, completion_without_successor_settles)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    struct harness *h = harness_new(*kind, &cfg, 1);
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 3, 1);
    cr_assert_eq(offload_next_deadline(h->p), 3 * MS);
    cr_assert_eq(offload_advance_to(h->p, 3 * MS), 1);
    cr_assert_eq(offload_settle(h->p, &a), 0);
    struct offload_lane_stats s = lane_stats(h, OFFLOAD_LANE_G1_G2);
    cr_assert_eq(s.in_flight, 0);
    cr_assert_eq(s.queued, 0);
    cr_assert(offload_is_stable(h->p));
    cr_assert_eq(offload_next_deadline(h->p), OFFLOAD_NEVER);
    struct offload_checkpoint cp;
    offload_checkpoint(h->p, &cp);
    cr_assert_eq(offload_settle_after(h->p, &cp, NULL), 0);
    harness_free(h);
}

/* Pool: the work finishes (and is reported) after the owner subscribed to wake-ups but before
 * its first check. Settle must see it at that check, not sleep until the guard. */
static void progress_now(struct harness *h)
{
    atomic_store(&h->gate_open, 1);
    /* wait until the pipeline would see the report: poll via the public state of the work */
    wait_invoked(h, 1);
    sleep_ms(50); /* the worker pushes "done" right after the work returns */
}

Test(offload_lane, progress_between_subscription_and_first_check_is_observed)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    cfg.lanes[OFFLOAD_LANE_G1_G2].bandwidth = 0; /* instant: due at once, waits for the work */
    cfg.settle_timeout_ns = 3 * INT64_C(1000000000);
    struct harness *h = harness_new(EXEC_POOL, &cfg, 1);
    h->on_subscribed = progress_now;
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 1, 1 | GATED);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(offload_settle(h->p, &a), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cr_assert(h->subscribed_once, "the owner never subscribed");
    cr_assert(secs < 2.0, "settle took %.3f s: the progress was lost", secs);
    cr_assert_eq(state_of(h, &a), OFFLOAD_BATCH_COMPLETED);
    struct offload_stats st;
    offload_stats(h->p, &st);
    cr_assert_eq(st.timeouts, 0);
    harness_free(h);
}

ParameterizedTestParameters(offload_lane, cancellation)
{
    static int kinds[] = {EXEC_INLINE, EXEC_POOL, EXEC_POOL_ADAPTIVE};
    return cr_make_param_array(int, kinds, 3);
}
ParameterizedTest(int *kind, offload_lane, cancellation)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    struct harness *h = harness_new(*kind, &cfg, 2);
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 1, 1);
    struct offload_token b = enq(h, OFFLOAD_LANE_G1_G2, 1, 2);
    struct offload_token c = enq(h, OFFLOAD_LANE_G1_G2, 1, 3);
    cr_assert_eq(offload_cancel(h->p, &a), -EBUSY, "started: past the commitment boundary");
    cr_assert_eq(offload_cancel(h->p, &b), 0);
    cr_assert_eq(offload_cancel(h->p, &b), -EALREADY);
    cr_assert_eq(state_of(h, &b), OFFLOAD_BATCH_CANCELLED);
    cr_assert_eq(offload_settle(h->p, &b), 0, "a cancelled batch has drained");
    cr_assert_eq(offload_advance_to(h->p, 1 * MS), 1);
    cr_assert_eq(offload_settle(h->p, &a), 0);
    cr_assert_eq(state_of(h, &c), OFFLOAD_BATCH_IN_FLIGHT, "C skips the cancelled B");
    cr_assert_eq(offload_advance_to(h->p, 2 * MS), 1);
    cr_assert_eq(offload_settle(h->p, &c), 0);
    cr_assert_eq(h->nlog, 2, "no callback for the cancelled batch");
    cr_assert_eq(h->log[1].cookie, 3);
    cr_assert_eq(h->log[1].start, 1 * MS);
    cr_assert_eq(atomic_load(&h->invoked[2]), 0, "cancelled work never runs");
    struct offload_lane_stats s = lane_stats(h, OFFLOAD_LANE_G1_G2);
    cr_assert_eq(s.cancelled, 1);
    cr_assert_eq(s.completed, 2);
    cr_assert_eq(s.started, 2);
    harness_free(h);
}

/* Shutdown of an inline pipeline: every undrained batch fails once with -ESHUTDOWN. */
ParameterizedTestParameters(offload_lane, shutdown_reports_undrained_once)
{
    static int kinds[] = {EXEC_INLINE, EXEC_POOL, EXEC_POOL_ADAPTIVE};
    return cr_make_param_array(int, kinds, 3);
}
ParameterizedTest(int *kind, offload_lane, shutdown_reports_undrained_once)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    struct harness *h = harness_new(*kind, &cfg, 2);
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 1, 1);
    struct offload_token b = enq(h, OFFLOAD_LANE_G1_G2, 1, 2);
    struct offload_token c = enq(h, OFFLOAD_LANE_G1_G2, 1, 3);
    cr_assert_eq(offload_advance_to(h->p, 1 * MS), 1);
    cr_assert_eq(offload_settle(h->p, &a), 0);
    cr_assert_eq(offload_shutdown(h->p), 0);
    cr_assert(offload_is_shut_down(h->p));
    cr_assert_eq(h->nlog, 3);
    cr_assert_eq(h->log[0].result, 0);
    cr_assert_eq(h->log[1].result, -ESHUTDOWN);
    cr_assert_eq(h->log[1].cookie, 2);
    cr_assert_eq(h->log[2].result, -ESHUTDOWN);
    cr_assert_eq(h->log[2].start, -1, "C never started");
    cr_assert_eq(offload_settle(h->p, &b), -ESHUTDOWN);
    cr_assert_eq(offload_settle(h->p, &c), -ESHUTDOWN);
    cr_assert_eq(offload_advance_to(h->p, 5 * MS), -ESHUTDOWN);
    offload_block_id blk = 1;
    cr_assert_eq(offload_enqueue(h->p, OFFLOAD_LANE_G1_G2, &blk, 1, 9, NULL), -ESHUTDOWN);
    cr_assert_eq(offload_shutdown(h->p), 0, "idempotent");
    cr_assert_eq(h->nlog, 3);
    struct offload_lane_stats s = lane_stats(h, OFFLOAD_LANE_G1_G2);
    cr_assert_eq(s.completed, 1);
    cr_assert_eq(s.failed, 2);
    cr_assert_eq(s.in_flight, 0);
    cr_assert_eq(s.queued, 0);
    harness_free(h);
}

/* Pool: an owner blocked in settle is released with -ESHUTDOWN by another thread. */
struct closer {
    struct harness *h;
    bool whole_pool;
};

static void *closer_main(void *arg)
{
    struct closer *c = arg;
    sleep_ms(100); /* the owner is asleep in settle by now (it has nothing else to do) */
    if (c->whole_pool)
        offload_pool_shutdown_any(c->h->pool);
    else
        offload_shutdown_any(c->h->p);
    return NULL;
}

ParameterizedTestParameters(offload_lane, shutdown_releases_waiters)
{
    static int which[] = {0, 1};
    return cr_make_param_array(int, which, 2);
}
ParameterizedTest(int *which, offload_lane, shutdown_releases_waiters)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    cfg.lanes[OFFLOAD_LANE_G1_G2].bandwidth = 0;
    cfg.settle_timeout_ns = 20 * INT64_C(1000000000);
    struct harness *h = harness_new(EXEC_POOL, &cfg, 1);
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 1, 1 | GATED);
    struct offload_token b = enq(h, OFFLOAD_LANE_G1_G2, 1, 2);
    struct closer c = {.h = h, .whole_pool = *which == 1};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, closer_main, &c), 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = offload_settle(h->p, &b);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(th, NULL);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cr_assert_eq(rc, -ESHUTDOWN, "settle returned %d", rc);
    cr_assert(secs < 5.0, "the waiter was released after %.3f s", secs);
    cr_assert_eq(offload_settle(h->p, &a), -ESHUTDOWN);
    atomic_store(&h->gate_open, 1); /* let the worker hand A back */
    cr_assert_eq(offload_shutdown(h->p), 0);
    cr_assert_eq(h->nlog, 2);
    cr_assert_eq(h->log[0].result, -ESHUTDOWN);
    cr_assert_eq(h->log[1].result, -ESHUTDOWN);
    cr_assert_eq(lane_stats(h, OFFLOAD_LANE_G1_G2).failed, 2);
    harness_free(h);
}

Test(offload_lane, stale_and_foreign_tokens)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    struct harness *h1 = harness_new(EXEC_INLINE, &cfg, 1);
    struct offload_config cfg2;
    test_config(&cfg2, NULL, 1);
    struct harness *h2 = harness_new(EXEC_INLINE, &cfg2, 1);
    cr_assert_neq(offload_pipeline_id(h1->p), offload_pipeline_id(h2->p));
    struct offload_token a = enq(h1, OFFLOAD_LANE_G1_G2, 1, 1);
    struct offload_token f = enq(h2, OFFLOAD_LANE_G1_G2, 1, 1);
    cr_assert_eq(offload_settle(h1->p, &f), -EXDEV);
    cr_assert_eq(offload_cancel(h1->p, &f), -EXDEV);
    cr_assert_eq(offload_token_state(h1->p, &f), -EXDEV);
    struct offload_token forged = a;
    forged.seq = 5;
    cr_assert_eq(offload_settle(h1->p, &forged), -ERANGE);
    forged = a;
    forged.lane = 9;
    cr_assert_eq(offload_settle(h1->p, &forged), -EINVAL);
    cr_assert_eq(offload_settle(h1->p, NULL), -EINVAL);
    struct offload_checkpoint cp, cp2;
    offload_checkpoint(h1->p, &cp);
    offload_checkpoint(h2->p, &cp2);
    cr_assert_eq(offload_settle_after(h1->p, &cp2, NULL), -EXDEV);
    uint64_t too_many[OFFLOAD_NUM_LANES] = {2, 0, 0, 0};
    cr_assert_eq(offload_settle_after(h1->p, &cp, too_many), -EOVERFLOW);
    cr_assert_eq(offload_reset(h1->p), 0);
    cr_assert_eq(offload_generation(h1->p), 1);
    cr_assert_eq(h1->log[0].result, -ESHUTDOWN, "reset shuts down first");
    cr_assert_eq(offload_settle(h1->p, &a), -ESTALE);
    cr_assert_eq(offload_cancel(h1->p, &a), -ESTALE);
    cr_assert_eq(offload_settle_after(h1->p, &cp, NULL), -ESTALE);
    /* the new generation works, from sequence 0 */
    struct offload_token n = enq(h1, OFFLOAD_LANE_G1_G2, 1, 2);
    cr_assert_eq(n.seq, 0);
    cr_assert_eq(n.generation, 1);
    cr_assert_eq(offload_advance_to(h1->p, offload_next_deadline(h1->p)), 1);
    cr_assert_eq(offload_settle(h1->p, &n), 0);
    harness_free(h1);
    harness_free(h2);
}

Test(offload_lane, settle_after_targets)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 2);
    struct harness *h = harness_new(EXEC_INLINE, &cfg, 1);
    struct offload_checkpoint cp;
    offload_checkpoint(h->p, &cp);
    for (int i = 0; i < 3; i++)
        enq(h, OFFLOAD_LANE_G1_G2, 1, (uint64_t)i);
    enq(h, OFFLOAD_LANE_G2_G3, 1, 7);
    uint64_t two[OFFLOAD_NUM_LANES] = {2, 0, 0, 0};
    uint64_t all[OFFLOAD_NUM_LANES] = {3, 1, 0, 0};
    cr_assert_eq(offload_settle_after(h->p, &cp, two), -EAGAIN);
    cr_assert_eq(offload_advance_to(h->p, 2 * MS), 3); /* two G1->G2 at 2 ms, G2->G3 at 1 ms */
    cr_assert_eq(offload_settle_after(h->p, &cp, two), 0);
    cr_assert_eq(offload_settle_after(h->p, &cp, all), -EAGAIN);
    cr_assert_eq(offload_advance_to(h->p, 3 * MS), 1);
    cr_assert_eq(offload_settle_after(h->p, &cp, all), 0);
    harness_free(h);
}

Test(offload_lane, argument_errors)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    cfg.lanes[OFFLOAD_LANE_G3_G2].permits = 0;
    cfg.lanes[OFFLOAD_LANE_G1_G2].capacity = 3; /* rounded up to 4 */
    struct harness *h = harness_new(EXEC_INLINE, &cfg, 1);
    offload_block_id blocks[9] = {0};
    cr_assert_eq(offload_enqueue(h->p, OFFLOAD_LANE_G3_G2, blocks, 1, 0, NULL), -ENODEV);
    cr_assert_eq(offload_enqueue(h->p, OFFLOAD_LANE_G1_G2, blocks, 0, 0, NULL), -EINVAL);
    cr_assert_eq(offload_enqueue(h->p, OFFLOAD_LANE_G1_G2, blocks, 9, 0, NULL), -EINVAL);
    cr_assert_eq(offload_enqueue(h->p, OFFLOAD_LANE_G1_G2, NULL, 1, 0, NULL), -EINVAL);
    cr_assert_eq(offload_enqueue(h->p, (enum offload_lane)7, blocks, 1, 0, NULL), -EINVAL);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(offload_enqueue(h->p, OFFLOAD_LANE_G1_G2, blocks, 1, 0, NULL), 0);
    cr_assert_eq(offload_enqueue(h->p, OFFLOAD_LANE_G1_G2, blocks, 1, 0, NULL), -EAGAIN,
                 "window of 4 full");
    cr_assert_eq(offload_advance_to(h->p, 1 * MS), 1);
    cr_assert_eq(offload_enqueue(h->p, OFFLOAD_LANE_G1_G2, blocks, 1, 0, NULL), 0);
    struct offload_pipeline *bad = NULL;
    struct offload_config c2 = cfg;
    c2.fail_rate = 1.5;
    cr_assert_eq(offload_pipeline_create(&c2, NULL, &bad), -EINVAL);
    c2 = cfg;
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++)
        c2.lanes[l].permits = 0;
    cr_assert_eq(offload_pipeline_create(&c2, NULL, &bad), -EINVAL);
    harness_free(h);
}

/* A callback may enqueue (a G1->G2 completion chains a G2->G3 write-through) but not settle. */
ParameterizedTestParameters(offload_lane, callbacks_chain_but_never_block)
{
    static int kinds[] = {EXEC_INLINE, EXEC_POOL, EXEC_POOL_ADAPTIVE};
    return cr_make_param_array(int, kinds, 3);
}
ParameterizedTest(int *kind, offload_lane, callbacks_chain_but_never_block)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    struct harness *h = harness_new(*kind, &cfg, 2);
    h->callback_chain = true;
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 2, 1);
    cr_assert_eq(offload_advance_to(h->p, 2 * MS), 1);
    cr_assert_eq(h->callback_rc, -EDEADLK);
    cr_assert_eq(offload_settle(h->p, &a), 0);
    struct offload_lane_stats s = lane_stats(h, OFFLOAD_LANE_G2_G3);
    cr_assert_eq(s.started, 1);
    cr_assert_eq(offload_advance_to(h->p, 10 * MS), 1);
    cr_assert_eq(h->log[1].lane, OFFLOAD_LANE_G2_G3);
    cr_assert_eq(h->log[1].start, 2 * MS);
    cr_assert_eq(h->log[1].end, 3 * MS);
    harness_free(h);
}

/* Failure injection: each batch drains exactly once; the failures are the seeded ones; a work
 * error fails its batch with the work's result. */
ParameterizedTestParameters(offload_lane, failure_injection_exactly_once)
{
    static int kinds[] = {EXEC_INLINE, EXEC_POOL, EXEC_POOL_ADAPTIVE};
    return cr_make_param_array(int, kinds, 3);
}
ParameterizedTest(int *kind, offload_lane, failure_injection_exactly_once)
{
    enum { N = 200 };
    struct offload_config cfg;
    test_config(&cfg, NULL, 3);
    cfg.fail_rate = 0.25;
    cfg.seed = 42;
    cfg.lanes[OFFLOAD_LANE_G1_G2].capacity = 256;
    struct harness *h = harness_new(*kind, &cfg, 2);
    atomic_store(&h->work_fail[7], -ENOSPC);
    struct offload_token last = {0};
    for (uint64_t i = 0; i < N; i++)
        last = enq(h, OFFLOAD_LANE_G1_G2, 1, i);
    while (offload_next_deadline(h->p) != OFFLOAD_NEVER)
        cr_assert_geq(offload_advance_to(h->p, offload_next_deadline(h->p)), 0);
    cr_assert_eq(offload_settle(h->p, &last), 0);
    int seen[N] = {0};
    uint64_t failed = 0;
    for (size_t i = 0; i < h->nlog; i++) {
        cr_assert_lt(h->log[i].seq, N);
        seen[h->log[i].seq]++;
        if (h->log[i].result != 0) {
            failed++;
            cr_assert(h->log[i].result == -EIO || h->log[i].seq == 7, "seq %llu: result %d",
                      (unsigned long long)h->log[i].seq, h->log[i].result);
        }
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(seen[i], 1, "batch %d reported %d times", i, seen[i]);
    for (size_t i = 0; i < h->nlog; i++)
        if (h->log[i].seq == 7)
            cr_assert_eq(h->log[i].result, -ENOSPC, "the work's own error wins");
    struct offload_lane_stats s = lane_stats(h, OFFLOAD_LANE_G1_G2);
    cr_assert_eq(s.completed + s.failed, N);
    cr_assert_eq(s.failed, failed);
    cr_assert(failed > N / 8 && failed < N / 2, "%llu failures at rate 0.25",
              (unsigned long long)failed);
    for (int i = 0; i < N; i++)
        cr_assert_eq(atomic_load(&h->invoked[i]), 1, "work %d invoked %d times", i,
                     atomic_load(&h->invoked[i]));
    harness_free(h);
}

/* ---- executors ----------------------------------------------------------------------------- */

/*
 * A scripted run: four lanes with different bandwidths and permits, batches of varied sizes
 * enqueued at varied times (some from callbacks), one cancellation, failures injected, time
 * advanced in uneven steps with settles in between. Returns the completion log.
 */
static struct harness *scripted_run(int kind, uint32_t threads)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 3);
    cfg.lanes[OFFLOAD_LANE_G1_G2].bandwidth = INT64_C(14000000000);
    cfg.lanes[OFFLOAD_LANE_G2_G3].bandwidth = INT64_C(7000000000);
    cfg.lanes[OFFLOAD_LANE_G3_G2].bandwidth = INT64_C(7000000007);
    cfg.lanes[OFFLOAD_LANE_G2_G1].bandwidth = 0;
    cfg.lanes[OFFLOAD_LANE_G2_G1].permits = 2;
    cfg.lanes[OFFLOAD_LANE_G3_G2].permits = 2;
    cfg.block_bytes = UINT64_C(2097152);
    cfg.fail_rate = 0.15;
    cfg.seed = 7;
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++)
        cfg.lanes[l].capacity = 512;
    struct harness *h = harness_new(kind, &cfg, threads);
    h->callback_chain = true;
    uint64_t x = 12345;
    int64_t now = 0;
    struct offload_token keep[64];
    size_t nkeep = 0;
    for (int step = 0; step < 300; step++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int n = (int)((x >> 33) % 4);
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            enum offload_lane lane = (enum offload_lane)((x >> 40) % 4);
            if (lane == OFFLOAD_LANE_G2_G3)
                lane = OFFLOAD_LANE_G1_G2;
            uint32_t nb = 1 + (uint32_t)((x >> 20) % 8);
            struct offload_token t = enq(h, lane, nb, (uint64_t)step * 16 + (uint64_t)i);
            if (nkeep < 64)
                keep[nkeep++] = t;
            else
                keep[(x >> 8) % 64] = t;
        }
        if (step % 17 == 5 && nkeep > 0) {
            int rc = offload_cancel(h->p, &keep[(x >> 12) % nkeep]);
            cr_assert(rc == 0 || rc == -EBUSY || rc == -EALREADY, "cancel: %d", rc);
        }
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        now += (int64_t)((x >> 33) % 3000000);
        int rc = offload_advance_to(h->p, now);
        cr_assert_geq(rc, 0, "advance_to: %d", rc);
        if (step % 5 == 0 && nkeep > 0) {
            rc = offload_settle(h->p, &keep[(x >> 16) % nkeep]);
            cr_assert(rc == 0 || rc == -EAGAIN, "settle: %d", rc);
        }
    }
    while (offload_next_deadline(h->p) != OFFLOAD_NEVER)
        cr_assert_geq(offload_advance_to(h->p, offload_next_deadline(h->p)), 0);
    return h;
}

ParameterizedTestParameters(offload_exec, inline_and_pool_produce_the_same_completions)
{
    static int kinds[] = {EXEC_POOL, EXEC_POOL_ADAPTIVE};
    return cr_make_param_array(int, kinds, 2);
}
ParameterizedTest(int *kind, offload_exec, inline_and_pool_produce_the_same_completions)
{
    struct harness *a = scripted_run(EXEC_INLINE, 1);
    struct harness *b = scripted_run(*kind, 2);
    cr_assert_gt(a->nlog, 300);
    cr_assert_eq(a->nlog, b->nlog, "inline drained %zu, pool %zu", a->nlog, b->nlog);
    size_t failures = 0;
    for (size_t i = 0; i < a->nlog; i++) {
        const struct log_entry *x = &a->log[i], *y = &b->log[i];
        cr_assert(
            x->lane == y->lane && x->seq == y->seq && x->cookie == y->cookie &&
                x->start == y->start && x->end == y->end && x->result == y->result,
            "completion %zu differs: inline (%u,%llu,%lld-%lld,%d) pool (%u,%llu,%lld-%lld,%d)", i,
            x->lane, (unsigned long long)x->seq, (long long)x->start, (long long)x->end, x->result,
            y->lane, (unsigned long long)y->seq, (long long)y->start, (long long)y->end, y->result);
        failures += x->result != 0;
    }
    cr_assert_gt(failures, 0);
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++) {
        struct offload_lane_stats sa = lane_stats(a, (enum offload_lane)l);
        struct offload_lane_stats sb = lane_stats(b, (enum offload_lane)l);
        cr_assert(memcmp(&sa, &sb, sizeof sa) == 0, "lane %d counters differ", l);
        cr_assert_eq(sa.enqueued, sa.completed + sa.failed + sa.cancelled);
        cr_assert_leq(sa.max_in_flight, sa.permits);
    }
    harness_free(a);
    harness_free(b);
}

/* The adaptive hand-off with work far cheaper than a wake-up: no batch wakes a worker, the owner
 * takes the queued batches back and runs them itself, and every batch still runs exactly once
 * with the inline executor's outcome. */
Test(offload_exec, adaptive_handoff_runs_cheap_work_on_the_owner)
{
    enum { N = 200 };
    struct offload_config cfg;
    test_config(&cfg, NULL, 2);
    cfg.lanes[OFFLOAD_LANE_G1_G2].bandwidth = 0; /* due at once: every settle needs the work */
    cfg.lanes[OFFLOAD_LANE_G1_G2].capacity = 256;
    struct harness *h = harness_new(EXEC_POOL_ADAPTIVE, &cfg, 2);
    for (uint64_t i = 0; i < N; i++) {
        struct offload_token t = enq(h, OFFLOAD_LANE_G1_G2, 1, i);
        cr_assert_eq(offload_settle(h->p, &t), 0);
        cr_assert_eq(state_of(h, &t), OFFLOAD_BATCH_COMPLETED);
    }
    struct offload_stats st;
    offload_stats(h->p, &st);
    cr_assert_eq(st.dispatched, N);
    /* A worker may take a batch while it is awake (it starts awake); the owner never wakes one
     * for work this cheap (a preempted measurement could, rarely, lift the mean past 10 us). */
    cr_assert_leq(st.worker_wakes, N / 10, "%llu wakes for %d cheap batches",
                  (unsigned long long)st.worker_wakes, N);
    cr_assert_geq(st.taken_back, N / 2, "the owner took back %llu of %d batches",
                  (unsigned long long)st.taken_back, N);
    cr_assert_eq(st.timeouts, 0);
    cr_assert_eq(h->nlog, N);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(atomic_load(&h->invoked[i]), 1, "work %d invoked %d times", i,
                     atomic_load(&h->invoked[i]));
        cr_assert_eq(h->log[i].result, 0);
    }
    harness_free(h);
}

/* The adaptive hand-off with work costlier than a wake-up: once the pipeline has seen such a
 * batch, a new batch wakes the sleeping worker, which runs it while the owner does nothing. A
 * loaded machine may keep the worker awake past the pause (then it takes the batch unwoken):
 * the test tries again, a few times, until a batch finds it asleep. */
Test(offload_exec, adaptive_handoff_wakes_a_worker_for_costly_work)
{
    enum { TRIES = 8 };
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    cfg.lanes[OFFLOAD_LANE_G1_G2].bandwidth = 0;
    struct harness *h = harness_new(EXEC_POOL_ADAPTIVE, &cfg, 1);
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 1, 1 | SLOW);
    cr_assert_eq(offload_settle(h->p, &a), 0, "A ran (2 ms), on the owner or the worker");
    bool woke = false;
    for (uint64_t id = 2; id < 2 + TRIES && !woke; id++) {
        sleep_ms(50); /* the worker is asleep by now, on an idle machine */
        struct offload_stats before;
        offload_stats(h->p, &before);
        struct offload_token b = enq(h, OFFLOAD_LANE_G1_G2, 1, id | SLOW);
        wait_invoked(h, id); /* the owner makes no call: only the worker can run it */
        cr_assert_eq(atomic_load(&h->on_worker[id]), 1);
        struct offload_stats st;
        offload_stats(h->p, &st);
        cr_assert_leq(st.worker_wakes, before.worker_wakes + 1, "one batch, one wake at most");
        woke = st.worker_wakes == before.worker_wakes + 1;
        cr_assert_eq(offload_settle(h->p, &b), 0);
        cr_assert_eq(atomic_load(&h->invoked[id]), 1);
        cr_assert_eq(h->log[id - 1].result, 0);
    }
    cr_assert(woke, "no costly batch of %d woke the sleeping worker", TRIES);
    harness_free(h);
}

/* Shutdown of an adaptive pipeline whose batches still sit in the rings: the owner takes them
 * back without running their work, and each reports -ESHUTDOWN exactly once. */
Test(offload_exec, adaptive_handoff_shutdown_takes_back_without_running)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 4);
    struct harness *h = harness_new(EXEC_POOL_ADAPTIVE, &cfg, 2);
    sleep_ms(50); /* the workers are asleep: no cheap batch wakes them */
    for (uint64_t i = 0; i < 4; i++)
        enq(h, OFFLOAD_LANE_G1_G2, 1, i);
    cr_assert_eq(offload_shutdown(h->p), 0);
    cr_assert_eq(h->nlog, 4);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(h->log[i].result, -ESHUTDOWN);
        cr_assert_eq(atomic_load(&h->invoked[i]), 0, "work %d ran at shutdown", i);
    }
    struct offload_stats st;
    offload_stats(h->p, &st);
    cr_assert_eq(st.taken_back, 4);
    cr_assert_eq(st.worker_wakes, 0);
    harness_free(h);
}

/* The adaptive hand-off with a caller that only polls: no worker is woken for cheap work, so the
 * poll itself runs a due batch's queued work; the batch drains without any blocking call. */
Test(offload_exec, adaptive_handoff_poll_alone_drains_cheap_work)
{
    struct offload_config cfg;
    test_config(&cfg, NULL, 2);
    cfg.lanes[OFFLOAD_LANE_G1_G2].bandwidth = 0; /* due at once */
    struct harness *h = harness_new(EXEC_POOL_ADAPTIVE, &cfg, 1);
    sleep_ms(50); /* the worker is asleep: nothing wakes it for this work */
    struct offload_token a = enq(h, OFFLOAD_LANE_G1_G2, 1, 1);
    int drained = 0;
    for (int i = 0; i < 1000 && drained == 0; i++) {
        int rc = offload_poll(h->p);
        cr_assert_geq(rc, 0, "poll: %d", rc);
        drained += rc;
    }
    cr_assert_eq(drained, 1, "the polls drained %d batches", drained);
    cr_assert_eq(state_of(h, &a), OFFLOAD_BATCH_COMPLETED);
    cr_assert_eq(atomic_load(&h->invoked[1]), 1);
    harness_free(h);
}

Test(offload_exec, pool_attach_limits)
{
    struct offload_pool_config pc;
    offload_pool_config_default(&pc);
    pc.max_pipelines = 1;
    pc.ring_size = 16;
    struct offload_pool *pool;
    cr_assert_eq(offload_pool_create(&pc, &pool), 0);
    struct offload_config cfg;
    test_config(&cfg, NULL, 1);
    cfg.work = NULL;
    cfg.complete = NULL;
    cfg.debug_yield = NULL;
    struct offload_pipeline *p1, *p2;
    cr_assert_eq(offload_pipeline_create(&cfg, pool, &p1), 0);
    cr_assert_eq(offload_pipeline_create(&cfg, pool, &p2), -ENOSPC);
    cr_assert_eq(offload_pool_destroy(pool), -EBUSY);
    cr_assert_eq(offload_pipeline_destroy(p1), 0);
    cfg.lanes[OFFLOAD_LANE_G1_G2].permits = 8; /* 2 * 11 permits >= 16 ring slots */
    cr_assert_eq(offload_pipeline_create(&cfg, pool, &p2), -EINVAL);
    cr_assert_eq(offload_pool_destroy(pool), 0);
    KVSIM_TEST_LEAK_CHECK();
}

/* Threads of this process (the entries of /proc/self/task). */
static long num_tasks(void)
{
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d, "cannot list /proc/self/task");
    long n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

struct worker_seen {
    _Atomic uint32_t runs;
    _Atomic uint32_t max_worker; /* the largest worker index seen */
};

static int record_worker(void *arg, const struct offload_work *w)
{
    struct worker_seen *s = arg;
    atomic_fetch_add(&s->runs, 1);
    uint32_t m = atomic_load(&s->max_worker);
    while ((m == UINT32_MAX || w->worker > m) &&
           !atomic_compare_exchange_weak(&s->max_worker, &m, w->worker))
        ;
    return 0;
}

/* offload_pool_threads is the number of worker threads the pool runs: the configured count (2
 * by default), threads the process gained, and every batch runs on a worker below it. */
Test(offload_exec, pool_threads_is_the_number_of_workers)
{
    struct offload_pool_config pc;
    offload_pool_config_default(&pc);
    struct offload_pool *pool;
    cr_assert_eq(offload_pool_create(&pc, &pool), 0);
    cr_assert_eq(offload_pool_threads(pool), 2, "the default pool has 2 workers");
    cr_assert_eq(offload_pool_destroy(pool), 0);
    for (uint32_t threads = 1; threads <= 3; threads++) {
        long before = num_tasks();
        offload_pool_config_default(&pc);
        pc.threads = threads;
        pc.wake_work_ns = 0; /* eager: every batch runs on a worker (adaptive, the owner may) */
        cr_assert_eq(offload_pool_create(&pc, &pool), 0);
        cr_assert_eq(offload_pool_threads(pool), threads);
        cr_assert_eq(num_tasks() - before, (long)threads, "%u workers started %ld threads", threads,
                     num_tasks() - before);
        struct worker_seen seen = {0, UINT32_MAX};
        struct offload_config cfg;
        test_config(&cfg, NULL, 2);
        cfg.work = record_worker;
        cfg.work_arg = &seen;
        cfg.complete = NULL;
        cfg.debug_yield = NULL;
        struct offload_pipeline *p;
        cr_assert_eq(offload_pipeline_create(&cfg, pool, &p), 0);
        offload_block_id b = 1;
        for (uint64_t k = 0; k < 16; k++)
            cr_assert_eq(offload_enqueue(p, OFFLOAD_LANE_G1_G2, &b, 1, k, NULL), 0);
        while (offload_next_deadline(p) != OFFLOAD_NEVER)
            cr_assert_geq(offload_advance_to(p, offload_next_deadline(p)), 0);
        cr_assert_eq(atomic_load(&seen.runs), 16, "every batch ran once");
        cr_assert_lt(atomic_load(&seen.max_worker), offload_pool_threads(pool),
                     "worker %u of a pool of %u", atomic_load(&seen.max_worker),
                     offload_pool_threads(pool));
        cr_assert_eq(offload_pipeline_destroy(p), 0);
        cr_assert_eq(offload_pool_destroy(pool), 0);
    }
    KVSIM_TEST_LEAK_CHECK();
}
