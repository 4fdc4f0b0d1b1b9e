/*
 * test_report.c - the replay metrics (runtime/report/): ITL sketch, percentiles, records, report
 * and writers.
 *
 * The sketch is checked against exact quantiles of seeded log-normal samples and against
 * itself (merge = one sketch fed everything). A hand-built 3-request replay pins every report
 * number. Seeded random replays fed in different thread assignments and interleavings (and
 * from real threads) must give byte-identical JSON (minus "wall") and JSONL.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvpool/base.h"
#include "runtime/report/report.h"

#include "common.h"

TestSuite(metrics);

#define MS INT64_C(1000000)

/* ---- helpers ------------------------------------------------------------------------------ */

/* Uniform in (0, 1), from the splitmix64 stream of *s (kvpool/base.h). */
static double rng_unit(uint64_t *s)
{
    return ((double)(base_splitmix64_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static uint64_t rng_below(uint64_t *s, uint64_t n) { return base_splitmix64_next(s) % n; }

/* Log-normal: exp(mu + sigma * N(0, 1)), Box-Muller. */
static double rng_lognormal(uint64_t *s, double mu, double sigma)
{
    double u1 = rng_unit(s), u2 = rng_unit(s);
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    return exp(mu + sigma * z);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void assert_rel(double got, double want, double tol, const char *what)
{
    double rel = want == 0.0 ? fabs(got) : fabs(got - want) / fabs(want);
    cr_assert(rel <= tol, "%s: got %.9g, want %.9g (relative error %.3g > %.3g)", what, got, want,
              rel, tol);
}

/* The sketch's documented bound: a, plus a few ulps of rounding at bucket boundaries. */
#define SKETCH_TOL (KVSIM_SKETCH_ALPHA * (1.0 + 1e-9))

static char tmpdir[1024];

static void make_tmpdir(void)
{
    kvsim_test_tmp_path(tmpdir, sizeof tmpdir, "metrics-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp failed: %s", strerror(errno));
}

static void tmp_path(char *buf, size_t len, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", tmpdir, name);
    cr_assert(n > 0 && (size_t)n < len, "the path of %s in %s is too long", name, tmpdir);
}

static void remove_tmpdir(const char *const *names, size_t n)
{
    char p[256];
    for (size_t i = 0; i < n; i++) {
        tmp_path(p, sizeof p, names[i]);
        remove(p);
    }
    rmdir(tmpdir);
}

/* ---- the sketch ----------------------------------------------------------------------------- */

Test(metrics, sketch_key_math)
{
    /* ln(gamma) in the source must be the real thing. */
    double gamma = (1.0 + KVSIM_SKETCH_ALPHA) / (1.0 - KVSIM_SKETCH_ALPHA);
    assert_rel(kvsim_sketch_key_value(1000) / kvsim_sketch_key_value(999), gamma, 1e-12,
               "bucket ratio");
    assert_rel(kvsim_sketch_key_value(0), 2.0 / (gamma + 1.0), 1e-15, "bucket 0 value");
    cr_assert_eq(kvsim_sketch_key(1), 0);
    cr_assert_eq(kvsim_sketch_key(INT64_MAX), 21835, "key(INT64_MAX) = %d",
                 kvsim_sketch_key(INT64_MAX));

    /* Bucket k holds (gamma^(k-1), gamma^k]: every value is within a of its bucket's value. */
    uint64_t seed = 1;
    for (int i = 0; i < 100000; i++) {
        int64_t v = (int64_t)(base_splitmix64_next(&seed) >> (base_splitmix64_next(&seed) % 63));
        if (v < 1)
            v = 1;
        int32_t k = kvsim_sketch_key(v);
        assert_rel(kvsim_sketch_key_value(k), (double)v, SKETCH_TOL, "bucket value");
        cr_assert(k >= 0 && k <= 21835);
    }
}

/* Exact nearest-rank quantiles of a sample vs the sketch, at every per-mille. */
static void check_sketch_accuracy(int64_t *vals, size_t n)
{
    struct kvsim_sketch s;
    kvsim_sketch_init(&s);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(kvsim_sketch_add(&s, vals[i]), 0);
    qsort(vals, n, sizeof *vals, cmp_i64);
    cr_assert_eq(s.count, n);
    cr_assert_eq(s.min, vals[0]);
    cr_assert_eq(s.max, vals[n - 1]);
    for (uint32_t pm = 0; pm <= 1000; pm++) {
        uint64_t r = kvsim_nearest_rank(n, pm);
        double exact = (double)vals[r - 1];
        char what[64];
        snprintf(what, sizeof what, "p%u.%u (rank %lu of %zu)", pm / 10, pm % 10, (unsigned long)r,
                 n);
        assert_rel(kvsim_sketch_at_rank(&s, r), exact, SKETCH_TOL, what);
    }
    /* The q interface agrees with ranks where q * n is exact. */
    cr_assert_eq(kvsim_sketch_quantile(&s, 0.0), (double)vals[0]);
    cr_assert_eq(kvsim_sketch_quantile(&s, 1.0), (double)vals[n - 1]);
    cr_assert_eq(kvsim_sketch_quantile(&s, 0.5), kvsim_sketch_at_rank(&s, (n + 1) / 2));
    kvsim_sketch_fini(&s);
}

Test(metrics, sketch_accuracy_lognormal)
{
    enum { N = 200000 };
    int64_t *vals = malloc(N * sizeof *vals);
    uint64_t seed = 42;
    /* ITL-like: median 20 ms, heavy tail; clamp to at least 1 ns. */
    for (size_t i = 0; i < N; i++) {
        double v = rng_lognormal(&seed, log(20e6), 1.5);
        vals[i] = v < 1.0 ? 1 : (int64_t)llround(v);
    }
    check_sketch_accuracy(vals, N);

    /* Small values (down to a few ns) and zeros, where rounding to integers matters. */
    for (size_t i = 0; i < N; i++) {
        double v = rng_lognormal(&seed, log(50.0), 2.0);
        vals[i] = i % 17 == 0 ? 0 : (int64_t)llround(v);
    }
    check_sketch_accuracy(vals, N);
    free(vals);
}

Test(metrics, sketch_merge_equals_single_sketch)
{
    enum { N = 50000, PARTS = 4 };
    struct kvsim_sketch single, parts[PARTS], merged_fwd, merged_rev;
    kvsim_sketch_init(&single);
    kvsim_sketch_init(&merged_fwd);
    kvsim_sketch_init(&merged_rev);
    for (int p = 0; p < PARTS; p++)
        kvsim_sketch_init(&parts[p]);

    uint64_t seed = 7;
    for (int i = 0; i < N; i++) {
        /* Parts get disjoint-ish ranges so that merging must grow in both directions. */
        int p = (int)rng_below(&seed, PARTS);
        double v = rng_lognormal(&seed, log(1e3) + 3.0 * p, 1.0);
        int64_t x = i % 101 == 0 ? 0 : (int64_t)llround(v);
        cr_assert_eq(kvsim_sketch_add(&single, x), 0);
        cr_assert_eq(kvsim_sketch_add(&parts[p], x), 0);
    }
    for (int p = 0; p < PARTS; p++)
        cr_assert_eq(kvsim_sketch_merge(&merged_fwd, &parts[p]), 0);
    for (int p = PARTS - 1; p >= 0; p--)
        cr_assert_eq(kvsim_sketch_merge(&merged_rev, &parts[p]), 0);

    const struct kvsim_sketch *m[2] = {&merged_fwd, &merged_rev};
    for (int j = 0; j < 2; j++) {
        cr_assert_eq(m[j]->count, single.count);
        cr_assert_eq(m[j]->zero_count, single.zero_count);
        cr_assert_eq(m[j]->min, single.min);
        cr_assert_eq(m[j]->max, single.max);
        for (int32_t k = 0; k <= 21835; k++)
            cr_assert_eq(kvsim_sketch_bin(m[j], k), kvsim_sketch_bin(&single, k),
                         "merge %d: bucket %d differs", j, k);
        for (uint64_t r = 1; r <= single.count; r += 97)
            cr_assert_eq(kvsim_sketch_at_rank(m[j], r), kvsim_sketch_at_rank(&single, r));
    }
    /* Merging an empty sketch changes nothing; merging into an empty one copies. */
    struct kvsim_sketch empty;
    kvsim_sketch_init(&empty);
    cr_assert_eq(kvsim_sketch_merge(&merged_fwd, &empty), 0);
    cr_assert_eq(merged_fwd.count, single.count);

    kvsim_sketch_fini(&single);
    kvsim_sketch_fini(&merged_fwd);
    kvsim_sketch_fini(&merged_rev);
    for (int p = 0; p < PARTS; p++)
        kvsim_sketch_fini(&parts[p]);
}

Test(metrics, sketch_edges)
{
    struct kvsim_sketch s;
    kvsim_sketch_init(&s);
    cr_assert(isnan(kvsim_sketch_at_rank(&s, 1)));
    cr_assert(isnan(kvsim_sketch_quantile(&s, 0.5)));
    cr_assert_eq(kvsim_sketch_add(&s, -1), -EINVAL);
    cr_assert_eq(s.count, 0);

    /* One value: every rank is that value, exactly. */
    cr_assert_eq(kvsim_sketch_add(&s, 12345), 0);
    cr_assert_eq(kvsim_sketch_at_rank(&s, 1), 12345.0);
    cr_assert_eq(kvsim_sketch_quantile(&s, 0.99), 12345.0);

    /* Growth downwards and upwards keeps earlier counts. */
    cr_assert_eq(kvsim_sketch_add(&s, 1), 0);
    cr_assert_eq(kvsim_sketch_add(&s, INT64_MAX), 0);
    cr_assert_eq(kvsim_sketch_add(&s, 0), 0);
    cr_assert_eq(s.count, 4);
    cr_assert_eq(kvsim_sketch_bin(&s, kvsim_sketch_key(12345)), 1);
    cr_assert_eq(kvsim_sketch_bin(&s, 0), 1);
    cr_assert_eq(kvsim_sketch_bin(&s, kvsim_sketch_key(INT64_MAX)), 1);
    cr_assert_eq(kvsim_sketch_at_rank(&s, 1), 0.0);
    cr_assert_eq(kvsim_sketch_at_rank(&s, 0), 0.0, "rank 0 clamps to 1");
    assert_rel(kvsim_sketch_at_rank(&s, 2), 1.0, SKETCH_TOL, "rank 2");
    assert_rel(kvsim_sketch_at_rank(&s, 3), 12345.0, SKETCH_TOL, "rank 3");
    cr_assert_eq(kvsim_sketch_at_rank(&s, 4), (double)INT64_MAX);
    cr_assert_eq(kvsim_sketch_at_rank(&s, 99), (double)INT64_MAX, "rank past count clamps");
    cr_assert(s.num_bins <= 21900, "bucket array bounded: %u", s.num_bins);
    kvsim_sketch_fini(&s);
    cr_assert_eq(s.count, 0);
    cr_assert_null(s.bins);
    kvsim_sketch_fini(NULL);
}

/* ---- exact percentiles --------------------------------------------------------------------- */

Test(metrics, nearest_rank_percentiles)
{
    /* The textbook example: {15, 20, 35, 40, 50}. */
    const double a[] = {15, 20, 35, 40, 50};
    cr_assert_eq(kvsim_percentile_sorted(a, 5, 50), 15);  /* p5: rank ceil(0.25) = 1 */
    cr_assert_eq(kvsim_percentile_sorted(a, 5, 300), 20); /* p30: rank ceil(1.5) = 2 */
    cr_assert_eq(kvsim_percentile_sorted(a, 5, 400), 20); /* p40: rank 2 exactly */
    cr_assert_eq(kvsim_percentile_sorted(a, 5, 500), 35); /* p50: rank ceil(2.5) = 3 */
    cr_assert_eq(kvsim_percentile_sorted(a, 5, 900), 50); /* p90: rank ceil(4.5) = 5 */
    cr_assert_eq(kvsim_percentile_sorted(a, 5, 1000), 50);
    cr_assert_eq(kvsim_percentile_sorted(a, 5, 0), 15, "p0 is the minimum");

    /* Even count: p50 of {1, 2, 3, 4} is 2 (no interpolation). */
    const double b[] = {1, 2, 3, 4};
    cr_assert_eq(kvsim_percentile_sorted(b, 4, 500), 2);
    cr_assert_eq(kvsim_percentile_sorted(b, 4, 501), 3);
    cr_assert_eq(kvsim_percentile_sorted(b, 4, 750), 3);

    /* 1..10: p90 is the 9th value, p95 and p99 the 10th. */
    double c[10];
    for (int i = 0; i < 10; i++)
        c[i] = i + 1;
    cr_assert_eq(kvsim_percentile_sorted(c, 10, 900), 9);
    cr_assert_eq(kvsim_percentile_sorted(c, 10, 950), 10);
    cr_assert_eq(kvsim_percentile_sorted(c, 10, 990), 10);
    cr_assert_eq(kvsim_percentile_sorted(c, 1, 990), 1, "one value");

    /* Ranks are integer arithmetic: no 0.9 * 10 = 9.000000000000002 surprises. */
    cr_assert_eq(kvsim_nearest_rank(10, 900), 9);
    cr_assert_eq(kvsim_nearest_rank(100, 990), 99);
    cr_assert_eq(kvsim_nearest_rank(1000, 999), 999);
    cr_assert_eq(kvsim_nearest_rank(1001, 999), 1000);
    cr_assert_eq(kvsim_nearest_rank(3, 500), 2);
    cr_assert_eq(kvsim_nearest_rank(0, 500), 0);
    cr_assert_eq(kvsim_nearest_rank(UINT64_MAX, 1000), UINT64_MAX);
    cr_assert_eq(kvsim_nearest_rank(UINT64_MAX, 500), UINT64_MAX / 2 + 1);
}

/* ---- records and the report ----------------------------------------------------------------- */

/*
 * The hand-built replay (times in ms, 2 threads):
 *   req 0: input 100, arrives 0, admitted 1 on engine 0 with 16 cached tokens, tokens at 11,
 *          12, 14, 17 (gaps 1, 2, 3; thread 0), finishes 17.
 *   req 1: input 50, arrives 2, admitted 3 on engine 1, token at 20, preempted, re-admitted 25
 *          on engine 1, tokens at 30, 31 (gaps 10, 1; thread 1), finishes 31.
 *   req 2: input 5000, arrives 5, rejected at 5 as "prompt_too_long".
 */
static struct kvsim_metrics *hand_replay(void)
{
    struct kvsim_metrics *m;
    cr_assert_eq(kvsim_metrics_create(3, 2, &m), 0);
    cr_assert_eq(kvsim_metrics_on_arrival(m, 0, 0, 100), 0);
    cr_assert_eq(kvsim_metrics_on_schedule(m, 0, 1 * MS, 16, 0), 0);
    cr_assert_eq(kvsim_metrics_on_arrival(m, 1, 2 * MS, 50), 0);
    cr_assert_eq(kvsim_metrics_on_schedule(m, 1, 3 * MS, 0, 1), 0);
    cr_assert_eq(kvsim_metrics_on_arrival(m, 2, 5 * MS, 5000), 0);
    cr_assert_eq(kvsim_metrics_on_reject(m, 2, 5 * MS, "prompt_too_long"), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 11 * MS), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 12 * MS), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 14 * MS), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 17 * MS), 0);
    cr_assert_eq(kvsim_metrics_on_finish(m, 0, 17 * MS), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 1, 1, 20 * MS), 0);
    cr_assert_eq(kvsim_metrics_on_preempt(m, 1), 0);
    cr_assert_eq(kvsim_metrics_on_schedule(m, 1, 25 * MS, 999, 1), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 1, 1, 30 * MS), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 1, 1, 31 * MS), 0);
    cr_assert_eq(kvsim_metrics_on_finish(m, 1, 31 * MS), 0);
    return m;
}

static void assert_latency(const struct kvsim_latency *l, uint64_t count, double mean_ms,
                           double min_ms, double p50_ms, double p90_ms, double p95_ms,
                           double p99_ms, double max_ms, double tol, const char *what)
{
    cr_assert_eq(l->count, count, "%s: count %lu", what, (unsigned long)l->count);
    const double got[] = {l->mean, l->min, l->p50, l->p90, l->p95, l->p99, l->max};
    const double want[] = {mean_ms, min_ms, p50_ms, p90_ms, p95_ms, p99_ms, max_ms};
    const char *names[] = {"mean", "min", "p50", "p90", "p95", "p99", "max"};
    for (int i = 0; i < 7; i++) {
        char w[64];
        snprintf(w, sizeof w, "%s %s", what, names[i]);
        assert_rel(got[i], want[i] * 1e6, tol, w);
    }
}

Test(metrics, records_of_hand_replay)
{
    struct kvsim_metrics *m = hand_replay();
    const struct kvsim_req_record *r0 = kvsim_metrics_record(m, 0);
    cr_assert_eq(r0->status, KVSIM_REQ_COMPLETED);
    cr_assert_eq(r0->first_sched_ns, 1 * MS);
    cr_assert_eq(r0->first_token_ns, 11 * MS);
    cr_assert_eq(r0->second_token_ns, 12 * MS);
    cr_assert_eq(r0->last_token_ns, 17 * MS);
    cr_assert_eq(r0->finish_ns, 17 * MS);
    cr_assert_eq(r0->num_output_tokens, 4);
    cr_assert_eq(r0->cached_tokens, 16);
    cr_assert_eq(r0->itl_max_ns, 3 * MS);
    cr_assert_eq(r0->itl_sum_ns, 6 * MS);
    cr_assert_eq(r0->engine, 0);
    const struct kvsim_req_record *r1 = kvsim_metrics_record(m, 1);
    cr_assert_eq(r1->num_preemptions, 1);
    cr_assert_eq(r1->first_sched_ns, 3 * MS, "re-admission keeps the first admission time");
    cr_assert_eq(r1->cached_tokens, 0, "re-admission keeps the first admission's hits");
    cr_assert_eq(r1->itl_max_ns, 10 * MS);
    const struct kvsim_req_record *r2 = kvsim_metrics_record(m, 2);
    cr_assert_eq(r2->status, KVSIM_REQ_REJECTED);
    cr_assert_str_eq(r2->reject_reason, "prompt_too_long");
    cr_assert_eq(r2->engine, -1);
    cr_assert_null(kvsim_metrics_record(m, 3));
    cr_assert_eq(kvsim_metrics_mark_incomplete(m), 0);
    kvsim_metrics_destroy(m);
}

Test(metrics, report_of_hand_replay)
{
    struct kvsim_metrics *m = hand_replay();
    struct kvsim_report r;
    const struct kvsim_report_run run = {
        .trace = "hand", .router = "round_robin", .seed = 7, .num_engines = 2, .wall_ns = 2 * MS};
    cr_assert_eq(kvsim_metrics_summarize(m, &run, &r), 0);

    cr_assert_str_eq(r.trace, "hand");
    cr_assert_str_eq(r.router, "round_robin");
    cr_assert_eq(r.seed, 7);
    cr_assert_eq(r.num_engines, 2);
    cr_assert_eq(r.num_threads, 2, "threads default to the collector's");
    cr_assert_eq(r.num_requests, 3);
    cr_assert_eq(r.completed, 2);
    cr_assert_eq(r.rejected, 1);
    cr_assert_eq(r.incomplete, 0);
    cr_assert_eq(r.num_reject_reasons, 1);
    cr_assert_str_eq(r.rejects[0].reason, "prompt_too_long");
    cr_assert_eq(r.rejects[0].count, 1);
    cr_assert_eq(r.preemptions, 1);
    cr_assert_eq(r.input_tokens, 150, "rejected requests' prompts excluded");
    cr_assert_eq(r.output_tokens, 7);
    cr_assert_eq(r.cached_tokens, 16);
    assert_rel(r.prefix_cache_reuse, 16.0 / 150.0, 1e-15, "reuse");

    cr_assert_eq(r.duration_ns, 31 * MS, "first arrival (0) to last completion (31 ms)");
    assert_rel(r.requests_per_s, 2 / 0.031, 1e-14, "requests/s");
    assert_rel(r.input_tokens_per_s, 150 / 0.031, 1e-14, "input tok/s");
    assert_rel(r.output_tokens_per_s, 7 / 0.031, 1e-14, "output tok/s");
    assert_rel(r.total_tokens_per_s, 157 / 0.031, 1e-14, "total tok/s");

    /* Exact: TTFT {11, 18}, TTST {1, 10}, TPOT {2, 5.5}, E2E {17, 29} ms. */
    assert_latency(&r.ttft, 2, 14.5, 11, 11, 18, 18, 18, 18, 1e-15, "ttft");
    assert_latency(&r.ttst, 2, 5.5, 1, 1, 10, 10, 10, 10, 1e-15, "ttst");
    assert_latency(&r.tpot, 2, 3.75, 2, 2, 5.5, 5.5, 5.5, 5.5, 1e-15, "tpot");
    assert_latency(&r.e2e, 2, 23, 17, 17, 29, 29, 29, 29, 1e-15, "e2e");
    /* ITL gaps {1, 1, 2, 3, 10} ms: mean 3.4 exact, p50 (rank 3) within the sketch's 0.1%. */
    assert_latency(&r.token_gap, 5, 3.4, 1, 2, 10, 10, 10, 10, SKETCH_TOL, "token gap");
    cr_assert_eq(r.token_gap.mean, 3.4e6);
    cr_assert_eq(r.token_gap.min, 1e6);
    cr_assert_eq(r.token_gap.max, 1e7);

    cr_assert_eq(r.wall_ns, 2 * MS);
    assert_rel(r.speed, 15.5, 1e-15, "speed");
    assert_rel(r.wall_requests_per_s, 1000.0, 1e-15, "requests per wall s");

    /* The table names every section. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kvsim_report_print(f, &r);
    fclose(f);
    const char *expect[] = {"prompt_too_long", "TTFT",  "TTST",   "TPOT", "ITL", "E2E",
                            "10.67 %",         "15.5x", "14.500", "3.400"};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        cr_assert_not_null(strstr(text, expect[i]), "table lacks '%s':\n%s", expect[i], text);
    free(text);
    kvsim_metrics_destroy(m);
}

Test(metrics, pending_and_incomplete)
{
    struct kvsim_metrics *m;
    cr_assert_eq(kvsim_metrics_create(4, 1, &m), 0);
    cr_assert_eq(kvsim_metrics_on_arrival(m, 0, 0, 10), 0);
    cr_assert_eq(kvsim_metrics_on_schedule(m, 0, 0, 0, 3), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 5), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 9), 0);
    cr_assert_eq(kvsim_metrics_on_arrival(m, 1, 1, 10), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 1, 2), 0);
    cr_assert_eq(kvsim_metrics_on_finish(m, 1, 3), 0);

    struct kvsim_report r;
    cr_assert_eq(kvsim_metrics_summarize(m, NULL, &r), 0);
    cr_assert_eq(r.completed, 1);
    cr_assert_eq(r.incomplete, 3, "pending and never-arrived requests are incomplete");
    cr_assert_eq(r.ttst.count, 0);
    cr_assert_eq(r.token_gap.count, 1, "the unfinished request's gap is in token_gap (documented)");
    cr_assert_eq(r.token_gap.mean, 4.0);
    cr_assert_eq(r.duration_ns, 3, "first arrival 0 to last completion 3");
    cr_assert_eq(r.wall_ns, 0);
    cr_assert_eq(r.speed, 0.0);

    cr_assert_eq(kvsim_metrics_mark_incomplete(m), 3);
    cr_assert_eq(kvsim_metrics_record(m, 0)->status, KVSIM_REQ_INCOMPLETE);
    cr_assert_eq(kvsim_metrics_record(m, 1)->status, KVSIM_REQ_COMPLETED);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 20), -EALREADY, "no events after the end");
    cr_assert_eq(kvsim_metrics_summarize(m, NULL, &r), 0);
    cr_assert_eq(r.incomplete, 3);

    /* Nothing completed: no duration, no throughput, empty latencies. */
    struct kvsim_metrics *e;
    cr_assert_eq(kvsim_metrics_create(0, 3, &e), 0);
    cr_assert_eq(kvsim_metrics_summarize(e, NULL, &r), 0);
    cr_assert_eq(r.num_requests, 0);
    cr_assert_eq(r.duration_ns, 0);
    cr_assert_eq(r.requests_per_s, 0.0);
    cr_assert_eq(r.ttft.count, 0);
    cr_assert_eq(r.token_gap.count, 0);
    kvsim_metrics_destroy(e);
    kvsim_metrics_destroy(m);
}

Test(metrics, event_errors)
{
    struct kvsim_metrics *m;
    cr_assert_eq(kvsim_metrics_create(2, 0, &m), -EINVAL);
    cr_assert_eq(kvsim_metrics_create(2, 1, &m), 0);
    cr_assert_eq(kvsim_metrics_num_requests(m), 2);
    cr_assert_eq(kvsim_metrics_num_threads(m), 1);

    cr_assert_eq(kvsim_metrics_on_arrival(m, 2, 0, 1), -EINVAL, "request out of range");
    cr_assert_eq(kvsim_metrics_on_schedule(m, 0, 0, 0, 0), -EINVAL, "not arrived");
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 0), -EINVAL, "not arrived");
    cr_assert_eq(kvsim_metrics_on_arrival(m, 0, 100, 1), 0);
    cr_assert_eq(kvsim_metrics_on_arrival(m, 0, 100, 1), -EALREADY);
    cr_assert_eq(kvsim_metrics_on_preempt(m, 0), -EINVAL, "never admitted");
    cr_assert_eq(kvsim_metrics_on_schedule(m, 0, 99, 0, 0), -EINVAL, "before arrival");
    cr_assert_eq(kvsim_metrics_on_token(m, 1, 0, 150), -EINVAL, "thread out of range");
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 150), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 149), -EINVAL, "time runs backwards");
    cr_assert_eq(kvsim_metrics_on_finish(m, 0, 140), -EINVAL, "finish before last token");
    const struct kvsim_req_record *r = kvsim_metrics_record(m, 0);
    cr_assert_eq(r->num_output_tokens, 1, "failed events change nothing");
    cr_assert_eq(r->status, KVSIM_REQ_PENDING);
    cr_assert_eq(kvsim_metrics_on_finish(m, 0, 150), 0);
    cr_assert_eq(kvsim_metrics_on_finish(m, 0, 160), -EALREADY);
    cr_assert_eq(kvsim_metrics_on_reject(m, 0, 160, "x"), -EALREADY);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, 160), -EALREADY);
    cr_assert_eq(kvsim_metrics_on_preempt(m, 0), -EALREADY);
    cr_assert_eq(kvsim_metrics_on_arrival(m, 1, 5, 1), 0);
    cr_assert_eq(kvsim_metrics_on_reject(m, 1, 5, NULL), 0);
    cr_assert_str_eq(kvsim_metrics_record(m, 1)->reject_reason, "unknown");
    cr_assert_str_eq(kvsim_req_status_name(KVSIM_REQ_REJECTED), "rejected");
    kvsim_metrics_destroy(m);
    kvsim_metrics_destroy(NULL);
}

Test(metrics, reject_reasons_sorted_and_folded)
{
    static const char *const reasons[] = {"zeta", "alpha", "r3", "r4", "r5",
                                          "r6",   "r7",    "r8", "r9", "alpha"};
    enum { N = sizeof reasons / sizeof reasons[0] };
    struct kvsim_metrics *m;
    cr_assert_eq(kvsim_metrics_create(N, 1, &m), 0);
    for (uint32_t i = 0; i < N; i++) {
        cr_assert_eq(kvsim_metrics_on_arrival(m, i, i, 1), 0);
        cr_assert_eq(kvsim_metrics_on_reject(m, i, i, reasons[i]), 0);
    }
    struct kvsim_report r;
    cr_assert_eq(kvsim_metrics_summarize(m, NULL, &r), 0);
    cr_assert_eq(r.rejected, N);
    cr_assert_eq(r.num_reject_reasons, KVSIM_REPORT_MAX_REASONS);
    /* The first 7 distinct reasons, sorted, then "other" (r8, r9). */
    const char *want[] = {"alpha", "r3", "r4", "r5", "r6", "r7", "zeta", "other"};
    const uint64_t count[] = {2, 1, 1, 1, 1, 1, 1, 2};
    for (int i = 0; i < KVSIM_REPORT_MAX_REASONS; i++) {
        cr_assert_str_eq(r.rejects[i].reason, want[i]);
        cr_assert_eq(r.rejects[i].count, count[i], "%s", want[i]);
    }
    kvsim_metrics_destroy(m);
}

/* ---- the writers ------------------------------------------------------------------------------
 */

static double jnum(json_t *o, const char *path)
{
    /* path: "a.b.c" */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = o;
    for (char *save, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save)) {
        v = json_object_get(v, k);
        cr_assert_not_null(v, "JSON lacks %s", path);
    }
    cr_assert(json_is_number(v), "%s is not a number", path);
    return json_number_value(v);
}

Test(metrics, json_report_and_jsonl_reread)
{
    make_tmpdir();
    struct kvsim_metrics *m = hand_replay();
    struct kvsim_report r;
    const struct kvsim_report_run run = {
        .trace = "hand", .router = "rr", .seed = 7, .num_engines = 2, .wall_ns = 2 * MS};
    cr_assert_eq(kvsim_metrics_summarize(m, &run, &r), 0);

    char jpath[256], lpath[256], err[512];
    tmp_path(jpath, sizeof jpath, "report.json");
    tmp_path(lpath, sizeof lpath, "requests.jsonl");
    cr_assert_eq(kvsim_report_write_json(jpath, &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvsim_metrics_write_requests(lpath, m, err, sizeof err), 0, "%s", err);

    json_error_t jerr;
    json_t *root = json_load_file(jpath, 0, &jerr);
    cr_assert_not_null(root, "%s: %s", jpath, jerr.text);
    /* Key order is fixed, "wall" last. */
    const char *keys[] = {"format",
                          "complete",
                          "run",
                          "requests",
                          "preemptions",
                          "tokens",
                          "prefix_cache_reuse_ratio",
                          "timing",
                          "duration_ms",
                          "throughput",
                          "ttft_ms",
                          "ttst_ms",
                          "tpot_ms",
                          "itl_ms",
                          "token_gap_ms",
                          "output_token_throughput_per_user",
                          "e2e_ms",
                          "wall"};
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        cr_assert(i < sizeof keys / sizeof keys[0], "unexpected key %s", key);
        cr_assert_str_eq(key, keys[i], "key %zu", i);
        i++;
    }
    cr_assert_eq(i, sizeof keys / sizeof keys[0]);
    cr_assert_str_eq(json_string_value(json_object_get(root, "format")), "kvsim-report-2");
    cr_assert(json_is_true(json_object_get(root, "complete")), "a run that finished is complete");
    cr_assert_str_eq(
        json_string_value(json_object_get(json_object_get(root, "timing"), "step_model")),
        "polynomial");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(root, "run"), "trace")),
                     "hand");
    cr_assert_eq(jnum(root, "run.seed"), 7);
    cr_assert_eq(jnum(root, "run.engines"), 2);
    cr_assert_eq(jnum(root, "requests.total"), 3);
    cr_assert_eq(jnum(root, "requests.completed"), 2);
    cr_assert_eq(jnum(root, "requests.rejected"), 1);
    cr_assert_eq(jnum(root, "requests.rejected_by_reason.prompt_too_long"), 1);
    cr_assert_eq(jnum(root, "requests.incomplete"), 0);
    cr_assert_eq(jnum(root, "preemptions"), 1);
    cr_assert_eq(jnum(root, "tokens.input"), 150);
    cr_assert_eq(jnum(root, "tokens.output"), 7);
    cr_assert_eq(jnum(root, "tokens.cached"), 16);
    assert_rel(jnum(root, "prefix_cache_reuse_ratio"), 16.0 / 150, 1e-14, "reuse");
    cr_assert_eq(jnum(root, "duration_ms"), 31.0);
    assert_rel(jnum(root, "throughput.requests_per_s"), 2 / 0.031, 1e-14, "rps");
    assert_rel(jnum(root, "throughput.output_tokens_per_s"), 7 / 0.031, 1e-14, "out tok/s");
    cr_assert_eq(jnum(root, "ttft_ms.count"), 2);
    cr_assert_eq(jnum(root, "ttft_ms.avg"), 14.5);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(root, "ttft_ms"), "unit")),
                     "ms");
    cr_assert_eq(jnum(root, "ttft_ms.p50"), 11);
    cr_assert_eq(jnum(root, "ttft_ms.p99"), 18);
    cr_assert_eq(jnum(root, "tpot_ms.p90"), 5.5);
    cr_assert_eq(jnum(root, "e2e_ms.max"), 29);
    cr_assert_eq(jnum(root, "token_gap_ms.avg"), 3.4);
    assert_rel(jnum(root, "token_gap_ms.p50"), 2.0, SKETCH_TOL, "token gap p50");
    cr_assert_eq(jnum(root, "token_gap_ms.max"), 10);
    /* AIPerf's ITL is per request: TPOT's values. */
    cr_assert_eq(jnum(root, "itl_ms.p90"), jnum(root, "tpot_ms.p90"));
    cr_assert_eq(jnum(root, "itl_ms.count"), jnum(root, "tpot_ms.count"));
    cr_assert_eq(jnum(root, "wall.threads"), 2);
    cr_assert_eq(jnum(root, "wall.wall_time_ms"), 2);
    cr_assert_eq(jnum(root, "wall.speed_sim_s_per_wall_s"), 15.5);
    json_decref(root);

    /* JSONL: three lines in index order, each a JSON object; pin one byte for byte. */
    size_t len;
    char *text = kvsim_test_read_file(lpath, &len);
    char *lines[4] = {0};
    int n = 0;
    for (char *save, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        cr_assert(n < 3, "more than 3 lines");
        lines[n++] = l;
    }
    cr_assert_eq(n, 3);
    for (int j = 0; j < 3; j++) {
        json_t *o = json_loads(lines[j], 0, &jerr);
        cr_assert_not_null(o, "line %d: %s", j, jerr.text);
        cr_assert_eq(jnum(o, "id"), j);
        if (j == 1) {
            cr_assert_str_eq(json_string_value(json_object_get(o, "status")), "completed");
            cr_assert_eq(jnum(o, "preemptions"), 1);
            cr_assert_eq(jnum(o, "ttft_ms"), 18);
            cr_assert_eq(jnum(o, "e2e_ms"), 29);
            cr_assert_eq(jnum(o, "itl_max_ms"), 10);
            cr_assert_eq(jnum(o, "second_token_ms"), 30);
            cr_assert_eq(jnum(o, "engine"), 1);
        }
        json_decref(o);
    }
    cr_assert_str_eq(lines[0],
                     "{\"id\":0,\"status\":\"completed\",\"engine\":0,\"input_len\":100,"
                     "\"cached_tokens\":16,\"output_tokens\":4,\"preemptions\":0,"
                     "\"arrival_ms\":0.000000,\"first_sched_ms\":1.000000,"
                     "\"first_token_ms\":11.000000,\"second_token_ms\":12.000000,"
                     "\"last_token_ms\":17.000000,\"finish_ms\":17.000000,\"ttft_ms\":11.000000,"
                     "\"e2e_ms\":17.000000,\"itl_max_ms\":3.000000,\"itl_sum_ms\":6.000000,"
                     "\"reject_reason\":null}");
    cr_assert_str_eq(lines[2],
                     "{\"id\":2,\"status\":\"rejected\",\"engine\":null,\"input_len\":5000,"
                     "\"cached_tokens\":0,\"output_tokens\":0,\"preemptions\":0,"
                     "\"arrival_ms\":5.000000,\"first_sched_ms\":null,\"first_token_ms\":null,"
                     "\"second_token_ms\":null,\"last_token_ms\":null,\"finish_ms\":5.000000,"
                     "\"ttft_ms\":null,\"e2e_ms\":null,\"itl_max_ms\":null,\"itl_sum_ms\":null,"
                     "\"reject_reason\":\"prompt_too_long\"}");
    free(text);

    /* Empty distributions are null, not 0. */
    struct kvsim_metrics *e;
    cr_assert_eq(kvsim_metrics_create(1, 1, &e), 0);
    cr_assert_eq(kvsim_metrics_summarize(e, NULL, &r), 0);
    cr_assert_eq(kvsim_report_write_json(jpath, &r, err, sizeof err), 0, "%s", err);
    root = json_load_file(jpath, 0, &jerr);
    cr_assert_not_null(root);
    cr_assert(json_is_null(json_object_get(json_object_get(root, "ttft_ms"), "p50")));
    cr_assert(json_is_null(json_object_get(json_object_get(root, "wall"), "wall_time_ms")));
    json_decref(root);
    kvsim_metrics_destroy(e);

    kvsim_metrics_destroy(m);
    const char *names[] = {"report.json", "requests.jsonl"};
    remove_tmpdir(names, 2);
}

Test(metrics, jsonl_sub_ms_and_negative_times)
{
    make_tmpdir();
    struct kvsim_metrics *m;
    cr_assert_eq(kvsim_metrics_create(1, 1, &m), 0);
    cr_assert_eq(kvsim_metrics_on_arrival(m, 0, -1500001, 3), 0);
    cr_assert_eq(kvsim_metrics_on_schedule(m, 0, 7, 0, 0), 0);
    cr_assert_eq(kvsim_metrics_on_token(m, 0, 0, INT64_C(123456789012)), 0);
    char path[256], err[512];
    tmp_path(path, sizeof path, "r.jsonl");
    cr_assert_eq(kvsim_metrics_write_requests(path, m, err, sizeof err), 0, "%s", err);
    char *text = kvsim_test_read_file(path, NULL);
    cr_assert_not_null(strstr(text, "\"status\":\"pending\""), "%s", text);
    cr_assert_not_null(strstr(text, "\"arrival_ms\":-1.500001,"), "%s", text);
    cr_assert_not_null(strstr(text, "\"first_sched_ms\":0.000007,"), "%s", text);
    cr_assert_not_null(strstr(text, "\"first_token_ms\":123456.789012,"), "%s", text);
    cr_assert_not_null(strstr(text, "\"ttft_ms\":123458.289013,"), "%s", text);
    free(text);
    kvsim_metrics_destroy(m);
    const char *names[] = {"r.jsonl"};
    remove_tmpdir(names, 1);
}

Test(metrics, unwritable_paths)
{
    struct kvsim_metrics *m = hand_replay();
    struct kvsim_report r;
    cr_assert_eq(kvsim_metrics_summarize(m, NULL, &r), 0);
    char err[512] = "";

    const char *missing = "/nonexistent-kvsim-dir/report.json";
    cr_assert_eq(kvsim_report_write_json(missing, &r, err, sizeof err), -ENOENT);
    cr_assert_not_null(strstr(err, missing), "message names the file: %s", err);
    err[0] = '\0';
    cr_assert_eq(kvsim_metrics_write_requests(missing, m, err, sizeof err), -ENOENT);
    cr_assert_not_null(strstr(err, missing), "message names the file: %s", err);

    make_tmpdir();
    cr_assert_eq(kvsim_report_write_json(tmpdir, &r, err, sizeof err), -EISDIR, "%s", err);
    cr_assert_not_null(strstr(err, tmpdir), "%s", err);
    remove_tmpdir(NULL, 0);

    /* err may be NULL. */
    cr_assert_eq(kvsim_metrics_write_requests(missing, m, NULL, 0), -ENOENT);
    kvsim_metrics_destroy(m);
}

/* A full device fails on flush: the error is still reported. */
Test(metrics, full_device)
{
    if (access("/dev/full", W_OK) != 0)
        cr_skip_test("/dev/full is not writable here");
    struct kvsim_metrics *m = hand_replay();
    struct kvsim_report r;
    cr_assert_eq(kvsim_metrics_summarize(m, NULL, &r), 0);
    char err[512] = "";
    cr_assert_eq(kvsim_report_write_json("/dev/full", &r, err, sizeof err), -ENOSPC, "%s", err);
    cr_assert_not_null(strstr(err, "/dev/full"), "%s", err);
    cr_assert_eq(kvsim_metrics_write_requests("/dev/full", m, err, sizeof err), -ENOSPC, "%s", err);
    kvsim_metrics_destroy(m);
}

/* ---- determinism --------------------------------------------------------------------------- */

enum ev_type { EV_ARRIVAL, EV_SCHEDULE, EV_PREEMPT, EV_TOKEN, EV_FINISH, EV_REJECT };

struct ev {
    enum ev_type type;
    int64_t t;
    uint32_t arg;   /* input_len (arrival), cached tokens (schedule) */
    int32_t engine; /* schedule */
};

/* A seeded random replay: per request, its events in time order. */
struct replay {
    uint32_t num_requests;
    struct ev **evs; /* [request][k] */
    uint32_t *num_evs;
    int32_t *engine; /* owning engine of each request */
};

static void replay_gen(struct replay *rp, uint32_t n, uint64_t seed)
{
    rp->num_requests = n;
    rp->evs = calloc(n, sizeof *rp->evs);
    rp->num_evs = calloc(n, sizeof *rp->num_evs);
    rp->engine = calloc(n, sizeof *rp->engine);
    int64_t t = 0;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t out = (uint32_t)(rng_below(&seed, 300));
        struct ev *e = calloc(out + 8, sizeof *e);
        uint32_t k = 0;
        t += (int64_t)rng_below(&seed, 50 * MS);
        int64_t u = t;
        int32_t engine = (int32_t)rng_below(&seed, 8);
        rp->engine[r] = engine;
        e[k++] = (struct ev){EV_ARRIVAL, u, (uint32_t)(1 + rng_below(&seed, 8000)), 0};
        if (rng_below(&seed, 20) == 0) {
            e[k++] = (struct ev){EV_REJECT, u + (int64_t)rng_below(&seed, 100), 0, 0};
        } else {
            u += (int64_t)rng_below(&seed, 500 * MS);
            e[k++] = (struct ev){EV_SCHEDULE, u, (uint32_t)rng_below(&seed, 4000), engine};
            uint32_t preempt_at =
                rng_below(&seed, 4) == 0 ? (uint32_t)rng_below(&seed, out + 1) : UINT32_MAX;
            for (uint32_t i = 0; i < out; i++) {
                if (i == preempt_at) {
                    e[k++] = (struct ev){EV_PREEMPT, u, 0, 0};
                    u += (int64_t)rng_below(&seed, 200 * MS);
                    e[k++] = (struct ev){EV_SCHEDULE, u, 0, engine};
                }
                /* Gaps repeat often (same step time) and are sometimes 0. */
                u += rng_below(&seed, 3) == 0 ? 0 : 20 * MS + (int64_t)rng_below(&seed, 4) * 7;
                e[k++] = (struct ev){EV_TOKEN, u, 0, 0};
            }
            if (rng_below(&seed, 10) != 0) /* else left unfinished */
                e[k++] = (struct ev){EV_FINISH, u + (int64_t)rng_below(&seed, MS), 0, 0};
        }
        rp->evs[r] = e;
        rp->num_evs[r] = k;
    }
}

static void replay_free(struct replay *rp)
{
    for (uint32_t r = 0; r < rp->num_requests; r++)
        free(rp->evs[r]);
    free(rp->evs);
    free(rp->num_evs);
    free(rp->engine);
}

static void feed(struct kvsim_metrics *m, uint32_t thread, uint32_t r, const struct ev *e)
{
    int rc = 0;
    switch (e->type) {
    case EV_ARRIVAL: rc = kvsim_metrics_on_arrival(m, r, e->t, e->arg); break;
    case EV_SCHEDULE: rc = kvsim_metrics_on_schedule(m, r, e->t, e->arg, e->engine); break;
    case EV_PREEMPT: rc = kvsim_metrics_on_preempt(m, r); break;
    case EV_TOKEN: rc = kvsim_metrics_on_token(m, thread, r, e->t); break;
    case EV_FINISH: rc = kvsim_metrics_on_finish(m, r, e->t); break;
    case EV_REJECT: rc = kvsim_metrics_on_reject(m, r, e->t, "prompt_too_long"); break;
    }
    cr_assert_eq(rc, 0, "request %u event %d failed: %d", r, e->type, rc);
}

/* Feeds every request's events; thread of request r = engine mod T. */
enum order { ORDER_BY_THREAD, ORDER_ROUND_ROBIN, ORDER_REVERSE };

static struct kvsim_metrics *run_replay(const struct replay *rp, uint32_t threads, enum order o)
{
    struct kvsim_metrics *m;
    cr_assert_eq(kvsim_metrics_create(rp->num_requests, threads, &m), 0);
    uint32_t n = rp->num_requests;
    switch (o) {
    case ORDER_BY_THREAD: /* all of thread 0's work, then thread 1's, ... */
        for (uint32_t th = 0; th < threads; th++)
            for (uint32_t r = 0; r < n; r++)
                if ((uint32_t)rp->engine[r] % threads == th)
                    for (uint32_t k = 0; k < rp->num_evs[r]; k++)
                        feed(m, th, r, &rp->evs[r][k]);
        break;
    case ORDER_ROUND_ROBIN: /* one event of each request in turn */
        for (uint32_t k = 0, more = 1; more; k++) {
            more = 0;
            for (uint32_t r = 0; r < n; r++) {
                if (k < rp->num_evs[r]) {
                    feed(m, (uint32_t)rp->engine[r] % threads, r, &rp->evs[r][k]);
                    more = 1;
                }
            }
        }
        break;
    case ORDER_REVERSE: /* requests from last to first, threads from last to first */
        for (uint32_t th = threads; th-- > 0;)
            for (uint32_t r = n; r-- > 0;)
                if ((uint32_t)rp->engine[r] % threads == th)
                    for (uint32_t k = 0; k < rp->num_evs[r]; k++)
                        feed(m, th, r, &rp->evs[r][k]);
        break;
    }
    cr_assert_eq(kvsim_metrics_num_threads(m), threads);
    kvsim_metrics_mark_incomplete(m);
    return m;
}

/* Writes both outputs of m under tag; returns the JSON text without "wall" and the JSONL. */
static void outputs(struct kvsim_metrics *m, const char *tag, uint32_t run_threads,
                    char **json_full, char **json_nowall, char **jsonl)
{
    struct kvsim_report r;
    const struct kvsim_report_run run = {.trace = "random",
                                         .router = "kv_aware",
                                         .seed = 99,
                                         .num_engines = 8,
                                         .num_threads = run_threads,
                                         .wall_ns = 123456789};
    cr_assert_eq(kvsim_metrics_summarize(m, &run, &r), 0);
    char jpath[256], lpath[256], name[64], err[512];
    snprintf(name, sizeof name, "%s.json", tag);
    tmp_path(jpath, sizeof jpath, name);
    snprintf(name, sizeof name, "%s.jsonl", tag);
    tmp_path(lpath, sizeof lpath, name);
    cr_assert_eq(kvsim_report_write_json(jpath, &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvsim_metrics_write_requests(lpath, m, err, sizeof err), 0, "%s", err);
    *json_full = kvsim_test_read_file(jpath, NULL);
    *jsonl = kvsim_test_read_file(lpath, NULL);
    json_error_t jerr;
    json_t *root = json_loads(*json_full, 0, &jerr);
    cr_assert_not_null(root, "%s", jerr.text);
    cr_assert_eq(json_object_del(root, "wall"), 0);
    *json_nowall = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    remove(jpath);
    remove(lpath);
}

Test(metrics, byte_identical_across_threads_and_interleavings)
{
    make_tmpdir();
    struct replay rp;
    replay_gen(&rp, 400, 2024);

    struct {
        uint32_t threads;
        enum order order;
        const char *tag;
    } runs[] = {{2, ORDER_BY_THREAD, "t2-by-thread"},
                {2, ORDER_ROUND_ROBIN, "t2-round-robin"},
                {2, ORDER_REVERSE, "t2-reverse"},
                {1, ORDER_ROUND_ROBIN, "t1"},
                {3, ORDER_BY_THREAD, "t3"}};
    enum { RUNS = sizeof runs / sizeof runs[0] };
    char *full[RUNS], *nowall[RUNS], *lines[RUNS];
    for (int i = 0; i < RUNS; i++) {
        struct kvsim_metrics *m = run_replay(&rp, runs[i].threads, runs[i].order);
        outputs(m, runs[i].tag, runs[i].threads, &full[i], &nowall[i], &lines[i]);
        kvsim_metrics_destroy(m);
    }
    /* Sanity: the replay exercises rejects, preemptions, incompletes and ITL. */
    cr_assert_not_null(strstr(full[0], "\"prompt_too_long\""));
    cr_assert_null(strstr(full[0], "\"preemptions\": 0,"));
    cr_assert_null(strstr(full[0], "\"incomplete\": 0"));
    for (int i = 1; i < RUNS; i++) {
        cr_assert_str_eq(lines[i], lines[0], "JSONL of %s differs", runs[i].tag);
        cr_assert_str_eq(nowall[i], nowall[0], "JSON report of %s differs", runs[i].tag);
        if (runs[i].threads == runs[0].threads)
            cr_assert_str_eq(full[i], full[0], "full JSON of %s differs", runs[i].tag);
        else
            cr_assert_str_neq(full[i], full[0], "the thread count lives under \"wall\"");
    }
    for (int i = 0; i < RUNS; i++) {
        free(full[i]);
        free(nowall[i]);
        free(lines[i]);
    }
    replay_free(&rp);
    remove_tmpdir(NULL, 0);
}

/* Real worker threads: each feeds the requests of its engines, concurrently. */
struct worker {
    const struct replay *rp;
    struct kvsim_metrics *m;
    uint32_t id, threads;
};

static void *worker_main(void *arg)
{
    const struct worker *w = arg;
    for (uint32_t r = 0; r < w->rp->num_requests; r++) {
        if ((uint32_t)w->rp->engine[r] % w->threads != w->id)
            continue;
        for (uint32_t k = 0; k < w->rp->num_evs[r]; k++) {
            const struct ev *e = &w->rp->evs[r][k];
            int rc = 0;
            switch (e->type) {
            case EV_ARRIVAL: rc = kvsim_metrics_on_arrival(w->m, r, e->t, e->arg); break;
            case EV_SCHEDULE:
                rc = kvsim_metrics_on_schedule(w->m, r, e->t, e->arg, e->engine);
                break;
            case EV_PREEMPT: rc = kvsim_metrics_on_preempt(w->m, r); break;
            case EV_TOKEN: rc = kvsim_metrics_on_token(w->m, w->id, r, e->t); break;
            case EV_FINISH: rc = kvsim_metrics_on_finish(w->m, r, e->t); break;
            case EV_REJECT: rc = kvsim_metrics_on_reject(w->m, r, e->t, "prompt_too_long"); break;
            }
            if (rc != 0)
                return (void *)1;
        }
    }
    return NULL;
}

Test(metrics, real_threads_match_one_thread)
{
    make_tmpdir();
    struct replay rp;
    replay_gen(&rp, 1000, 77);
    enum { T = 4 };
    struct kvsim_metrics *mt;
    cr_assert_eq(kvsim_metrics_create(rp.num_requests, T, &mt), 0);
    pthread_t tid[T];
    struct worker w[T];
    for (uint32_t i = 0; i < T; i++) {
        w[i] = (struct worker){&rp, mt, i, T};
        cr_assert_eq(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
    }
    for (uint32_t i = 0; i < T; i++) {
        void *ret;
        cr_assert_eq(pthread_join(tid[i], &ret), 0);
        cr_assert_null(ret, "worker %u saw an event fail", i);
    }
    kvsim_metrics_mark_incomplete(mt);
    struct kvsim_metrics *m1 = run_replay(&rp, 1, ORDER_BY_THREAD);

    char *full[2], *nowall[2], *lines[2];
    outputs(mt, "threads", T, &full[0], &nowall[0], &lines[0]);
    outputs(m1, "one", 1, &full[1], &nowall[1], &lines[1]);
    cr_assert_str_eq(lines[0], lines[1], "JSONL differs");
    cr_assert_str_eq(nowall[0], nowall[1], "JSON report differs");
    for (int i = 0; i < 2; i++) {
        free(full[i]);
        free(nowall[i]);
        free(lines[i]);
    }
    kvsim_metrics_destroy(mt);
    kvsim_metrics_destroy(m1);
    replay_free(&rp);
    remove_tmpdir(NULL, 0);
}

Test(latency, aiperf_statistics_of_one_to_a_hundred)
{
    double v[100];
    for (int i = 0; i < 100; i++)
        v[99 - i] = (double)(i + 1); /* any order: the mean and std are order-free here */
    struct kvsim_latency l;
    kvsim_latency_of(v, 100, &l);
    cr_assert_eq(l.count, 100);
    cr_assert_eq(l.mean, 50.5);
    cr_assert_float_eq(l.std, sqrt((100.0 * 100.0 - 1.0) / 12.0), 1e-12, "population std");
    /* nearest rank: the p-th percentile of 1..100 is p itself */
    cr_assert_eq(l.p1, 1);
    cr_assert_eq(l.p5, 5);
    cr_assert_eq(l.p10, 10);
    cr_assert_eq(l.p25, 25);
    cr_assert_eq(l.p50, 50);
    cr_assert_eq(l.p75, 75);
    cr_assert_eq(l.p99, 99);
    cr_assert_eq(l.min, 1);
    cr_assert_eq(l.max, 100);
}

Test(metrics, slo_attainment_and_goodput_of_hand_replay)
{
    /* r0: TTFT 11 ms, ITL (17 - 11) / 3 = 2 ms, E2E 17 ms; r1: 18, (31 - 20) / 2 = 5.5, 29; r2
     * rejected. Duration 31 ms. */
    struct kvsim_metrics *m = hand_replay();
    struct kvsim_report_run run = {
        .slo = {.ttft_ns = 15 * MS, .itl_ns = 5 * MS, .e2e_ns = 20 * MS}};
    struct kvsim_report r;
    cr_assert_eq(kvsim_metrics_summarize(m, &run, &r), 0);
    cr_assert(r.slo.enabled);
    cr_assert_eq(r.slo.met_ttft, 1);
    cr_assert_eq(r.slo.met_itl, 1);
    cr_assert_eq(r.slo.met_e2e, 1);
    cr_assert_eq(r.slo.good, 1, "r0 only; the rejected request meets nothing");
    assert_rel(r.slo.attainment_all, 100.0 / 3, 1e-12, "joint attainment over all requests");
    assert_rel(r.slo.goodput_requests_per_s, 1 / 0.031, 1e-12, "good req/s");
    assert_rel(r.slo.goodput_output_tokens_per_s, 4 / 0.031, 1e-12, "good output tok/s");
    /* One SLO only: the others do not count. */
    run.slo = (struct kvsim_slo){.itl_ns = 6 * MS};
    cr_assert_eq(kvsim_metrics_summarize(m, &run, &r), 0);
    cr_assert_eq(r.slo.good, 2);
    assert_rel(r.slo.attainment_itl, 200.0 / 3, 1e-12, "ITL attainment");
    cr_assert_eq(r.slo.attainment_ttft, 0, "an SLO not set has no attainment");
    /* None set: no SLO part. */
    run.slo = (struct kvsim_slo){0};
    cr_assert_eq(kvsim_metrics_summarize(m, &run, &r), 0);
    cr_assert(!r.slo.enabled);
    kvsim_metrics_destroy(m);
}

/* Issue 59: a run cut short scores the requests that arrived (those cut off are misses), not
 * the ones it never saw: 13.96 % on the conversation trace at 600 s was 95.94 %. */
Test(metrics, slo_attainment_over_the_requests_that_arrived)
{
    struct kvsim_metrics *m;
    cr_assert_eq(kvsim_metrics_create(5, 1, &m), 0);
    /* r0 and r1 finish within 10 ms; r2 arrives and is cut off; r3 and r4 never arrive */
    for (uint32_t i = 0; i < 3; i++)
        cr_assert_eq(kvsim_metrics_on_arrival(m, i, (int64_t)i * MS, 10), 0);
    for (uint32_t i = 0; i < 2; i++) {
        cr_assert_eq(kvsim_metrics_on_schedule(m, i, (int64_t)i * MS, 0, 0), 0);
        cr_assert_eq(kvsim_metrics_on_token(m, 0, i, (int64_t)(i + 2) * MS), 0);
        cr_assert_eq(kvsim_metrics_on_finish(m, i, (int64_t)(i + 2) * MS), 0);
    }
    cr_assert_eq(kvsim_metrics_mark_incomplete(m), 3);
    struct kvsim_report_run run = {
        .slo = {.ttft_ns = 10 * MS}, .end_reason = "max-sim-time", .end_ns = 3 * MS};
    struct kvsim_report r;
    cr_assert_eq(kvsim_metrics_summarize(m, &run, &r), 0);
    cr_assert_eq(r.num_requests, 5);
    cr_assert_eq(r.arrived, 3);
    cr_assert_eq(r.incomplete, 3);
    cr_assert_eq(r.cut_off, 1, "r2 arrived and did not finish");
    cr_assert_eq(r.slo.good, 2);
    assert_rel(r.slo.attainment_all, 200.0 / 3, 1e-12, "2 good of 3 arrived, not of 5");
    assert_rel(r.slo.attainment_ttft, 200.0 / 3, 1e-12, "per SLO too");
    char *json = kvsim_report_json_text(&r);
    cr_assert_not_null(json);
    cr_assert_not_null(strstr(json, "\"arrived\": 3,"), "%s", json);
    cr_assert_not_null(strstr(json, "\"cut_off\": 1,"), "%s", json);
    free(json);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kvsim_report_print(f, &r);
    fclose(f);
    cr_assert_not_null(strstr(text,
                              "66.67 % of the 3 requests that arrived within every SLO (1 cut "
                              "off at the end count as misses)"),
                       "%s", text);
    cr_assert_not_null(strstr(text, "not arrived          2 (after the end)"), "%s", text);
    free(text);
    kvsim_report_fini(&r);
    kvsim_metrics_destroy(m);
}

static int cmp_double_test(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* kvsim_latency_of sorts vals in place: the same array as qsort's, whatever the values (large,
 * tiny, repeated, infinite; and with a negative one, which takes the other path). */
Test(latency, sorts_like_qsort_on_every_kind_of_value)
{
    enum { N = 5000 };
    static double v[N], want[N];
    uint64_t x = 7;
    for (int variant = 0; variant < 4; variant++) {
        for (int i = 0; i < N; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            switch ((x >> 60) & 3) {
            case 0: v[i] = (double)(x >> 20); break;                  /* ~1e13, like ns */
            case 1: v[i] = (double)(x >> 40) / 3.0; break;            /* fractions */
            case 2: v[i] = (double)((x >> 33) & 7); break;            /* repeats and zeros */
            default: v[i] = (x >> 59) & 1 ? INFINITY : 1e-300; break; /* extremes */
            }
        }
        if (variant == 1)
            v[N / 2] = -2.5; /* a negative value: not radix-ordered */
        if (variant == 2)
            for (int i = 0; i < N; i++)
                v[i] = 123456789.0; /* one value: every digit agrees */
        if (variant == 3)
            for (int i = 0; i < N; i++)
                v[i] = (double)(i * 7919 % 100000); /* small integers: low digits all zero */
        memcpy(want, v, sizeof v);
        qsort(want, N, sizeof *want, cmp_double_test);
        struct kvsim_latency l;
        kvsim_latency_of(v, N, &l);
        cr_assert_eq(memcmp(v, want, sizeof v), 0, "variant %d sorted differently", variant);
        cr_assert_eq(l.min, want[0]);
        cr_assert_eq(l.max, want[N - 1]);
        cr_assert_eq(l.p50, want[kvsim_nearest_rank(N, 500) - 1]);
    }
}

/* ---- the Pareto front (kvsim sweep --pareto) ------------------------------------------------ */

Test(pareto, marks_exactly_the_non_dominated_rows)
{
    /* TTFT p99 (lower is better), goodput (higher is better) */
    const double rows[][2] = {
        {100, 5},   /* 0: front (the fastest) */
        {200, 9},   /* 1: front (the most goodput) */
        {150, 7},   /* 2: front (between) */
        {150, 6},   /* 3: dominated by 2 (same TTFT, less goodput) */
        {300, 9},   /* 4: dominated by 1 (slower, same goodput) */
        {100, 5},   /* 5: equal to 0: both stay */
        {NAN, 100}, /* 6: a missing value: never on the front, dominates nothing */
        {120, 4},   /* 7: dominated by 0 */
    };
    const bool lower[2] = {true, false};
    bool front[8];
    cr_assert_eq(kvsim_pareto_front(&rows[0][0], 8, 2, lower, front), 4);
    const bool want[8] = {true, true, true, false, false, true, false, false};
    for (int i = 0; i < 8; i++)
        cr_expect_eq(front[i], want[i], "row %d", i);
    /* One metric: the best value only (ties all stay); no rows: none. */
    const double one[] = {3, 1, 2, 1};
    bool f1[4];
    cr_assert_eq(kvsim_pareto_front(one, 4, 1, lower, f1), 2);
    cr_expect(!f1[0] && f1[1] && !f1[2] && f1[3]);
    cr_assert_eq(kvsim_pareto_front(NULL, 0, 2, lower, NULL), 0);
}

/* Issue 65: text output gives bytes in human units and --config-out reals as the shortest text
 * that reads back (kvpool/base.h). */
Test(metrics, bytes_and_reals_for_people)
{
    static const struct {
        uint64_t bytes;
        const char *text;
    } b[] = {{0, "0 B"},
             {1023, "1023 B"},
             {1024, "1.00 KiB"},
             {1536, "1.50 KiB"},
             {10 * 1024, "10.0 KiB"},
             {1048575, "1024 KiB"},
             {12943819571ull, "12.1 GiB"},
             {UINT64_MAX, "16.0 EiB"}};
    char buf[64];
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        base_format_bytes(buf, sizeof buf, b[i].bytes);
        cr_expect_str_eq(buf, b[i].text, "%" PRIu64 " bytes: '%s', not '%s'", b[i].bytes, buf,
                         b[i].text);
    }
    static const struct {
        double x;
        const char *text;
    } d[] = {{2.12204, "2.12204"},
             {0.1, "0.1"},
             {1000, "1000"},
             {-3, "-3"},
             {1e300, "1e+300"},
             {1.0 / 3, "0.3333333333333333"},
             {0.015183439999999999, "0.01518344"}};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        base_format_double(buf, sizeof buf, d[i].x);
        cr_expect_str_eq(buf, d[i].text, "%.17g: '%s', not '%s'", d[i].x, buf, d[i].text);
        cr_expect_eq(strtod(buf, NULL), d[i].x, "'%s' does not read back", buf);
    }
}
