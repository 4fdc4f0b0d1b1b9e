/*
 * test_html.c - the HTML report (runtime/report/html.c): what a reader and a browser can see.
 *
 * A small hand-fed run (varied latencies, two engines, a hand-made time series, SLOs) is
 * written and read back: every chart and table id is there, nothing is fetched or run (no
 * script, no URL), report strings are escaped, the TTFT CDF rises, the file is byte-identical
 * when written twice; the edges (no time series, a disaggregated run, no completed request, one
 * request, downsampling, an unwritable path) keep a valid page. With KVSIM_HTML_SAMPLE (and
 * KVSIM_HTML_SAMPLE_DISAGG) set, copies of the sample pages are written there for
 * tests/html/render_check.sh.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/report/report.h"

#include "common.h"

TestSuite(html);

#define MS INT64_C(1000000)

#define TRACE_NAME "trace <b>&\"'x"

static const char *const chart_ids[] = {"chart-ttft-cdf",   "chart-itl-cdf", "chart-e2e-cdf",
                                        "chart-throughput", "chart-queue",   "chart-kv-usage",
                                        "chart-engines"};
static const char *const table_ids[] = {"table-config", "table-summary", "table-latency",
                                        "table-slo"};

/* ---- a run ---------------------------------------------------------------------------------- */

struct run {
    struct kvsim_metrics *m;
    struct kvsim_report r;
    struct kvsim_timeseries ts;
};

/*
 * n requests, 20 ms apart, on engines i % 2: request i gets 1 + i % 7 output tokens (so some
 * have one), a TTFT of 5 + (37 i) % 50 ms and gaps of 1 + i % 5 ms. With n >= 10, request n - 1
 * is rejected and request n - 2 left incomplete. disagg: request i went through a handoff
 * pinned 2 + i % 9 ms. completed = false: nobody finishes.
 */
static void make_run(struct run *x, uint32_t n, bool disagg, bool completed)
{
    memset(x, 0, sizeof *x);
    cr_assert_eq(kvsim_metrics_create(n, 1, &x->m), 0);
    for (uint32_t i = 0; i < n; i++) {
        int64_t t = (int64_t)i * 20 * MS;
        cr_assert_eq(kvsim_metrics_on_arrival(x->m, i, t, 100 + i), 0);
        if (n >= 10 && i == n - 1) {
            cr_assert_eq(kvsim_metrics_on_reject(x->m, i, t, "prompt_too_long"), 0);
            continue;
        }
        cr_assert_eq(kvsim_metrics_on_schedule(x->m, i, t + MS, i % 3 ? 16 : 0, (int32_t)(i % 2)),
                     0);
        int64_t tok = t + (5 + (int64_t)(37 * i) % 50) * MS;
        for (uint32_t k = 0; k < 1 + i % 7; k++, tok += (1 + i % 5) * MS)
            cr_assert_eq(kvsim_metrics_on_token(x->m, 0, i, tok), 0);
        if (disagg)
            cr_assert_eq(kvsim_metrics_set_handoff(x->m, i, 0, 1, KVSIM_REQ_HANDOFF_COMPLETED,
                                                   (2 + i % 9) * MS, MS),
                         0);
        if (completed && !(n >= 10 && i == n - 2))
            cr_assert_eq(kvsim_metrics_on_finish(x->m, i, tok), 0);
    }
    kvsim_metrics_mark_incomplete(x->m);
    const struct kvsim_report_run run = {
        .trace = TRACE_NAME,
        .router = "kv_aware",
        .seed = 42,
        .num_engines = 2,
        .slo = {.ttft_ns = 30 * MS, .itl_ns = 4 * MS, .e2e_ns = 60 * MS},
        .config_text = "{\"format\":\"kvsim-config-1\",\"options\":{\"max-num-seqs\":\"256\","
                       "\"note\":\"a<b\"},\"step_model\":{\"prefill_ms\":[1.5,0.25,0]},"
                       "\"wall\":{\"wall_time_ms\":3}}",
        .wall_ns = 123 * MS};
    cr_assert_eq(kvsim_metrics_summarize(x->m, &run, &x->r), 0);
    x->r.has_unbounded_reuse = true;
    x->r.prefix_cache_reuse_unbounded = 0.25;
    x->r.num_per_engine = 2;
    x->r.per_engine = calloc(2, sizeof *x->r.per_engine);
    cr_assert_not_null(x->r.per_engine);
    x->r.per_engine[0] = (struct kvsim_engine_summary){
        .completed = 30, .busy_s = 1.25, .mean_kv_usage = 0.4, .peak_kv_usage = 0.9};
    x->r.per_engine[1] = (struct kvsim_engine_summary){
        .completed = 18, .busy_s = 0.75, .mean_kv_usage = 0.2, .peak_kv_usage = 0.5};
    x->r.busy_engine_s = 2.0;
    if (disagg) {
        struct kvsim_disagg_summary *d = &x->r.disagg;
        d->enabled = true;
        d->prefill_engines = d->decode_engines = 1;
        x->r.per_engine[0].role = KVSIM_TS_PREFILL;
        x->r.per_engine[1].role = KVSIM_TS_DECODE;
        double *pins = malloc(n * sizeof *pins);
        cr_assert_not_null(pins);
        size_t np = 0;
        for (uint32_t i = 0; i < n; i++)
            if (kvsim_metrics_record(x->m, i)->handoff != KVSIM_REQ_HANDOFF_NONE)
                pins[np++] = (double)kvsim_metrics_record(x->m, i)->pin_ns;
        d->handoffs = d->completed = np;
        kvsim_latency_of(pins, np, &d->pin);
        free(pins);
    }

    /* Six 100 ms intervals; engine 0 fills up, engine 1 idles. */
    struct kvsim_timeseries *ts = &x->ts;
    ts->interval_ns = 100 * MS;
    ts->num_engines = 2;
    ts->num_intervals = 6;
    ts->roles = calloc(2, 1);
    ts->samples = calloc(12, sizeof *ts->samples);
    cr_assert(ts->roles && ts->samples);
    if (disagg)
        ts->roles[0] = KVSIM_TS_PREFILL, ts->roles[1] = KVSIM_TS_DECODE;
    for (uint32_t k = 0; k < 6; k++)
        for (uint32_t e = 0; e < 2; e++)
            ts->samples[k * 2 + e] = (struct kvsim_ts_sample){.running = e ? 1 : k,
                                                              .waiting = e ? 0 : k / 2,
                                                              .kv_used_blocks = e ? 10 : 100 * k,
                                                              .kv_total_blocks = 1000,
                                                              .pinned_blocks = e ? 0 : 7 * k,
                                                              .prompt_tokens = 500 * k,
                                                              .generation_tokens = 40 + 10 * e};
}

static void free_run(struct run *x)
{
    /* kvsim_timeseries_fini lives elsewhere: free the hand-made arrays here */
    free(x->ts.roles);
    free(x->ts.samples);
    kvsim_report_fini(&x->r);
    kvsim_metrics_destroy(x->m);
}

/* ---- files ---------------------------------------------------------------------------------- */

static char tmpdir[1024];

static void make_tmpdir(void)
{
    kvsim_test_tmp_path(tmpdir, sizeof tmpdir, "html-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp failed: %s", strerror(errno));
}

/* Writes the page of x (ts: the time series or NULL) to tmpdir/name and returns its text. */
static char *write_page(const struct run *x, const struct kvsim_timeseries *ts, const char *name)
{
    char path[1200], err[1400] = "";
    int n = snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    cr_assert(n > 0 && (size_t)n < sizeof path, "the path of %s in %s is too long", name, tmpdir);
    int rc = kvsim_report_write_html(path, &x->r, x->m, ts, err, sizeof err);
    cr_assert_eq(rc, 0, "write_html: %d %s", rc, err);
    char *text = kvsim_test_read_file(path, NULL);
    remove(path);
    return text;
}

static void copy_sample(const char *env, const char *text)
{
    const char *p = getenv(env);
    if (p == NULL || p[0] == '\0')
        return;
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s=%s: %s", env, p, strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* The text of element id's <svg> (up to its </svg>), malloc'd; fails if absent. */
static char *svg_of(const char *page, const char *id)
{
    char needle[64];
    snprintf(needle, sizeof needle, "<svg id=\"%s\"", id);
    const char *a = strstr(page, needle);
    cr_assert_not_null(a, "no <svg> with id %s", id);
    const char *b = strstr(a, "</svg>");
    cr_assert_not_null(b, "%s: no </svg>", id);
    return strndup(a, (size_t)(b - a));
}

/* The figure holding chart id (from the svg to the </figure>), malloc'd. */
static char *figure_of(const char *page, const char *id)
{
    char needle[64];
    snprintf(needle, sizeof needle, "id=\"%s\"", id);
    const char *a = strstr(page, needle);
    cr_assert_not_null(a, "no element with id %s", id);
    const char *b = strstr(a, "</figure>");
    cr_assert_not_null(b, "%s is in no figure", id);
    return strndup(a, (size_t)(b - a));
}

static bool has_id(const char *page, const char *id)
{
    char needle[64];
    snprintf(needle, sizeof needle, "id=\"%s\"", id);
    return strstr(page, needle) != NULL;
}

/* No script, no URL of any kind, no NaN or infinity printed as a number. */
static void assert_self_contained(const char *page)
{
    const char *bad[] = {"<script", "http://", "https://", "url(", "@import",
                         "src=",    "href=",   "onload",   "nan",  "inf"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_null(strcasestr(page, bad[i]), "the page contains '%s'", bad[i]);
    cr_assert(!strncmp(page, "<!DOCTYPE html>", 15));
    cr_assert_not_null(strstr(page, "</html>\n"));
}

/* Parses the points of the first <polyline> of svg into xs/ys; returns how many. */
static size_t polyline_points(const char *svg, double *xs, double *ys, size_t cap)
{
    const char *p = strstr(svg, "<polyline");
    cr_assert_not_null(p, "no polyline");
    p = strstr(p, "points=\"");
    cr_assert_not_null(p);
    p += 8;
    size_t n = 0;
    while (*p != '"') {
        char *end;
        double x = strtod(p, &end);
        cr_assert(end != p && *end == ',', "bad point at '%.20s'", p);
        double y = strtod(end + 1, &end);
        cr_assert(n < cap, "more than %zu points", cap);
        xs[n] = x, ys[n] = y, n++;
        p = end;
        while (*p == ' ')
            p++;
    }
    return n;
}

/* ---- tests ---------------------------------------------------------------------------------- */

Test(html, sample_run_has_every_part)
{
    struct run x;
    make_run(&x, 50, false, true);
    make_tmpdir();
    char *page = write_page(&x, &x.ts, "a.html");
    copy_sample("KVSIM_HTML_SAMPLE", page);

    for (size_t i = 0; i < sizeof chart_ids / sizeof chart_ids[0]; i++) {
        char *svg = svg_of(page, chart_ids[i]);
        free(svg);
    }
    for (size_t i = 0; i < sizeof table_ids / sizeof table_ids[0]; i++)
        cr_assert(has_id(page, table_ids[i]), "no %s", table_ids[i]);
    cr_assert(has_id(page, "table-engines"), "the numbers behind the engine bars");
    cr_assert(!has_id(page, "chart-pin-cdf"), "an aggregated run has no pin chart");
    assert_self_contained(page);

    /* Report strings are escaped, wherever they appear. */
    cr_assert_null(strstr(page, "<b>&\""), "the trace name is not escaped");
    cr_assert_not_null(strstr(page, "trace &lt;b&gt;&amp;&quot;&#39;x"));
    cr_assert_not_null(strstr(page, "a&lt;b"), "a configuration value is escaped");
    cr_assert_not_null(strstr(page, ">max-num-seqs</th><td>256<"), "the configuration table");
    cr_assert_null(strstr(page, "wall_time_ms"), "no wall-clock field in the page");
    cr_assert_not_null(strstr(page, "kvsim " KVSIM_VERSION_STRING), "the version");
    cr_assert_not_null(strstr(page, "kv_aware"), "the router");

    /* The TTFT CDF rises: x never goes back, and SVG y (downwards) never goes down the page. */
    char *svg = svg_of(page, "chart-ttft-cdf");
    double xs[600], ys[600];
    size_t n = polyline_points(svg, xs, ys, 600);
    cr_assert_geq(n, 10);
    for (size_t i = 1; i < n; i++) {
        cr_assert_geq(xs[i], xs[i - 1], "x at point %zu", i);
        cr_assert_leq(ys[i], ys[i - 1], "y at point %zu", i);
    }
    cr_assert_lt(ys[n - 1], ys[0], "the curve climbs");
    cr_assert_not_null(strstr(svg, "class=\"slo\""), "the TTFT SLO is marked");
    cr_assert_not_null(strstr(svg, "SLO 30 ms"));
    free(svg);

    /* The SLO table shows each threshold; the summary the possible reuse. */
    cr_assert_not_null(strstr(page, "&le; 30.000 ms"));
    cr_assert_not_null(strstr(page, "&le; 4.000 ms"));
    cr_assert_not_null(strstr(page, "25.00 %"));

    /* Byte-identical when written again. */
    char *again = write_page(&x, &x.ts, "b.html");
    cr_assert_str_eq(page, again, "two writes differ");
    free(again);
    free(page);
    rmdir(tmpdir);
    free_run(&x);
}

Test(html, without_time_series_the_charts_say_so)
{
    struct run x;
    make_run(&x, 50, false, true);
    make_tmpdir();
    char *page = write_page(&x, NULL, "a.html");
    const char *ts_ids[] = {"chart-throughput", "chart-queue", "chart-kv-usage"};
    for (size_t i = 0; i < 3; i++) {
        char *fig = figure_of(page, ts_ids[i]);
        cr_assert_not_null(strstr(fig, "No time series"), "%s does not say so", ts_ids[i]);
        cr_assert_null(strstr(fig, "<polyline"), "%s draws a curve", ts_ids[i]);
        free(fig);
    }
    char *fig = figure_of(page, "chart-ttft-cdf");
    cr_assert_null(strstr(fig, "No time series"), "the CDFs do not need one");
    free(fig);
    assert_self_contained(page);
    free(page);
    rmdir(tmpdir);
    free_run(&x);
}

Test(html, disaggregated_run_has_pin_charts)
{
    struct run x;
    make_run(&x, 50, true, true);
    make_tmpdir();
    char *page = write_page(&x, &x.ts, "a.html");
    copy_sample("KVSIM_HTML_SAMPLE_DISAGG", page);
    char *svg = svg_of(page, "chart-pin-cdf");
    double xs[600], ys[600];
    size_t n = polyline_points(svg, xs, ys, 600);
    cr_assert_geq(n, 10);
    free(svg);
    /* Pinned blocks over time: engine 0 (prefill) pins 7 k blocks in interval k. */
    svg = svg_of(page, "chart-pinned");
    cr_assert_not_null(strstr(svg, "<polyline"));
    free(svg);
    cr_assert(has_id(page, "table-disagg"));
    cr_assert_not_null(strstr(page, "engine 0 prefill"));
    assert_self_contained(page);
    free(page);

    page = write_page(&x, NULL, "b.html");
    char *fig = figure_of(page, "chart-pinned");
    cr_assert_not_null(strstr(fig, "No time series"));
    free(fig);
    free(page);
    rmdir(tmpdir);
    free_run(&x);
}

Test(html, edges_give_valid_pages)
{
    make_tmpdir();
    /* Nobody completed: every CDF is empty, no number is NaN. */
    struct run x;
    make_run(&x, 20, false, false);
    cr_assert_eq(x.r.completed, 0);
    char *page = write_page(&x, &x.ts, "none.html");
    assert_self_contained(page);
    for (size_t i = 0; i < 3; i++) {
        char *fig = figure_of(page, chart_ids[i]);
        cr_assert_not_null(strstr(fig, "No completed request"), "%s", chart_ids[i]);
        free(fig);
    }
    free(page);
    /* All-zero time series and no per-engine data. */
    memset(x.ts.samples, 0, 12 * sizeof *x.ts.samples);
    free(x.r.per_engine);
    x.r.per_engine = NULL;
    x.r.num_per_engine = 0;
    page = write_page(&x, &x.ts, "zero.html");
    assert_self_contained(page);
    cr_assert(has_id(page, "chart-engines"));
    free(page);
    free_run(&x);

    /* One request (one value per CDF) and no metrics at all. */
    make_run(&x, 1, true, true);
    page = write_page(&x, &x.ts, "one.html");
    assert_self_contained(page);
    char *svg = svg_of(page, "chart-e2e-cdf");
    double xs[8], ys[8];
    cr_assert_eq(polyline_points(svg, xs, ys, 8), 2, "a vertical step at the one value");
    cr_assert_eq(xs[0], xs[1]);
    free(svg);
    free(page);
    char path[1100], err[1400] = "";
    snprintf(path, sizeof path, "%s/nom.html", tmpdir);
    cr_assert_eq(kvsim_report_write_html(path, &x.r, NULL, NULL, err, sizeof err), 0, "%s", err);
    page = kvsim_test_read_file(path, NULL);
    assert_self_contained(page);
    free(page);
    remove(path);
    free_run(&x);
    rmdir(tmpdir);
}

Test(html, curves_are_downsampled)
{
    struct run x;
    make_run(&x, 3000, false, true);
    /* 2000 intervals: each point covers 4 of them */
    free(x.ts.samples);
    x.ts.num_intervals = 2000;
    x.ts.samples = calloc(4000, sizeof *x.ts.samples);
    cr_assert_not_null(x.ts.samples);
    for (uint32_t k = 0; k < 4000; k++)
        x.ts.samples[k] = (struct kvsim_ts_sample){
            .running = k % 13, .kv_used_blocks = k % 100, .kv_total_blocks = 100};
    make_tmpdir();
    char *page = write_page(&x, &x.ts, "a.html");
    static double xs[1000], ys[1000];
    const char *ids[] = {"chart-ttft-cdf", "chart-e2e-cdf", "chart-queue", "chart-kv-usage"};
    for (size_t i = 0; i < 4; i++) {
        char *svg = svg_of(page, ids[i]);
        size_t n = polyline_points(svg, xs, ys, 1000);
        cr_assert(n >= 400 && n <= 501, "%s: %zu points", ids[i], n);
        free(svg);
    }
    cr_assert_not_null(strstr(page, "each point: 4 intervals of 100 ms"));
    cr_assert_lt(strlen(page), 300000, "the page stays small: %zu bytes", strlen(page));
    free(page);
    rmdir(tmpdir);
    free_run(&x);
}

Test(html, unwritable_path_names_it)
{
    struct run x;
    make_run(&x, 10, false, true);
    char err[256] = "";
    const char *missing = "/nonexistent-dir/x.html";
    int rc = kvsim_report_write_html(missing, &x.r, x.m, &x.ts, err, sizeof err);
    cr_assert_eq(rc, -ENOENT, "got %d", rc);
    cr_assert_not_null(strstr(err, missing), "the message names the path: %s", err);
    cr_assert_eq(kvsim_report_write_html(missing, &x.r, x.m, NULL, NULL, 0), -ENOENT);
    if (access("/dev/full", W_OK) == 0) {
        rc = kvsim_report_write_html("/dev/full", &x.r, x.m, &x.ts, err, sizeof err);
        cr_assert_eq(rc, -ENOSPC, "a full device: %d %s", rc, err);
        cr_assert_not_null(strstr(err, "/dev/full"), "%s", err);
    }
    free_run(&x);
}
