/*
 * summary.c - kvsim_metrics_summarize(): every statistic of the report from the records (exact,
 * sorted percentiles, sums in request-index order) and from the merged sketches (ITL).
 */
#include "runtime/report/report_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the summary ----------------------------------------------------------------------------- */

/* The report's percentiles, in per-mille. */
enum { P50 = 500, P90 = 900, P95 = 950, P99 = 990 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* ---- sorting the report's columns ----------------------------------------------------------
 *
 * The report sorts a few columns of one value per request. A least-significant-digit radix sort
 * of 64-bit keys does it in a fixed number of passes over the data instead of qsort's n log n
 * calls into a comparator (a few ms of a short replay's total on 20 k requests). Sorting is of
 * values only: the sorted array is the same whichever algorithm produced it.
 */
enum { RADIX_BITS = 11, RADIX_PASSES = 6, RADIX_BUCKETS = 1 << RADIX_BITS, RADIX_MIN = 256 };

/*
 * Sorts keys[0..n) ascending (unsigned), with tmp[0..n) as scratch. Digits on which every key
 * agrees (the high bits of clustered values, mostly) cost their count only.
 */
static void radix_sort_u64(uint64_t *keys, uint64_t *tmp, size_t n)
{
    static_assert(RADIX_BITS * RADIX_PASSES >= 64, "the digits cover 64 bits");
    size_t(*count)[RADIX_BUCKETS] = calloc(RADIX_PASSES, sizeof *count);
    if (!count) { /* no room for the counts */
        qsort(keys, n, sizeof *keys, cmp_u64);
        return;
    }
    for (size_t i = 0; i < n; i++)
        for (unsigned p = 0; p < RADIX_PASSES; p++)
            count[p][(keys[i] >> (p * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++;
    uint64_t *src = keys, *dst = tmp;
    for (unsigned p = 0; p < RADIX_PASSES; p++) {
        size_t *c = count[p];
        if (c[(src[0] >> (p * RADIX_BITS)) & (RADIX_BUCKETS - 1)] == n)
            continue; /* one digit: this pass moves nothing */
        size_t sum = 0;
        for (unsigned b = 0; b < RADIX_BUCKETS; b++) {
            size_t k = c[b];
            c[b] = sum;
            sum += k;
        }
        for (size_t i = 0; i < n; i++)
            dst[c[(src[i] >> (p * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != keys)
        memcpy(keys, src, n * sizeof *keys);
    free(count);
}

/*
 * Sorts vals[0..n) ascending, as qsort with cmp_double would. Non-negative doubles (NaN
 * excluded) order as their bit patterns do, so those are radix-sorted; anything else (a
 * negative value, -0.0, a NaN), a short array or no scratch goes to qsort.
 */
static void sort_doubles(double *vals, size_t n)
{
    bool plain = n >= RADIX_MIN;
    for (size_t i = 0; plain && i < n; i++)
        plain = !signbit(vals[i]) && !isnan(vals[i]);
    uint64_t *keys = plain ? malloc(2 * n * sizeof *keys) : NULL;
    if (!keys) {
        qsort(vals, n, sizeof *vals, cmp_double);
        return;
    }
    static_assert(sizeof(double) == sizeof(uint64_t), "doubles are 64-bit");
    memcpy(keys, vals, n * sizeof *keys);
    radix_sort_u64(keys, keys + n, n);
    memcpy(vals, keys, n * sizeof *keys);
    free(keys);
}

/*
 * Fills l from vals[0..n), given in request-index order: the mean is summed in that order,
 * then vals is sorted for the exact nearest-rank percentiles.
 */
void kvsim_latency_of(double *vals, size_t n, struct kvsim_latency *l)
{
    memset(l, 0, sizeof *l);
    if (n == 0)
        return;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += vals[i];
    double mean = sum / (double)n, sq = 0.0;
    for (size_t i = 0; i < n; i++)
        sq += (vals[i] - mean) * (vals[i] - mean);
    sort_doubles(vals, n);
    l->count = n;
    l->mean = mean;
    l->std = sqrt(sq / (double)n);
    l->min = vals[0];
    l->p1 = kvsim_percentile_sorted(vals, n, 10);
    l->p5 = kvsim_percentile_sorted(vals, n, 50);
    l->p10 = kvsim_percentile_sorted(vals, n, 100);
    l->p25 = kvsim_percentile_sorted(vals, n, 250);
    l->p75 = kvsim_percentile_sorted(vals, n, 750);
    l->p50 = kvsim_percentile_sorted(vals, n, P50);
    l->p90 = kvsim_percentile_sorted(vals, n, P90);
    l->p95 = kvsim_percentile_sorted(vals, n, P95);
    l->p99 = kvsim_percentile_sorted(vals, n, P99);
    l->max = vals[n - 1];
}

/* Which per-request latency to collect. */
enum req_latency { LAT_TTFT, LAT_TTST, LAT_TPOT, LAT_E2E, LAT_TPS_PER_USER };

/* Collects one latency of every completed request that has it, in index order. */
static size_t collect(const struct kvsim_metrics *m, enum req_latency which, double *vals)
{
    size_t n = 0;
    for (uint32_t i = 0; i < m->num_requests; i++) {
        const struct kvsim_req_record *r = &m->recs[i];
        if (r->status != KVSIM_REQ_COMPLETED)
            continue;
        switch (which) {
        case LAT_TTFT:
            if (r->num_output_tokens >= 1)
                vals[n++] = (double)(r->first_token_ns - r->arrival_ns);
            break;
        case LAT_TTST:
            if (r->num_output_tokens >= 2)
                vals[n++] = (double)(r->second_token_ns - r->first_token_ns);
            break;
        case LAT_TPOT:
            if (r->num_output_tokens >= 2)
                vals[n++] = (double)(r->last_token_ns - r->first_token_ns) /
                            (double)(r->num_output_tokens - 1);
            break;
        case LAT_TPS_PER_USER: /* AIPerf: 1 / ITL, tokens/s; a 0 ns span has none */
            if (r->num_output_tokens >= 2 && r->last_token_ns > r->first_token_ns)
                vals[n++] = (double)(r->num_output_tokens - 1) * 1e9 /
                            (double)(r->last_token_ns - r->first_token_ns);
            break;
        case LAT_E2E: vals[n++] = (double)(r->finish_ns - r->arrival_ns); break;
        }
    }
    return n;
}

static int cmp_reject(const void *a, const void *b)
{
    return strcmp(((const struct kvsim_reject_count *)a)->reason,
                  ((const struct kvsim_reject_count *)b)->reason);
}

/*
 * Counts one rejection by reason. The first MAX-1 distinct reasons (in request-index order)
 * get their own entry; any further reason is counted under "other" in the last entry.
 */
static void count_reject(struct kvsim_report *out, const char *reason, uint64_t *other)
{
    for (uint32_t i = 0; i < out->num_reject_reasons; i++) {
        if (strcmp(out->rejects[i].reason, reason) == 0) {
            out->rejects[i].count++;
            return;
        }
    }
    if (out->num_reject_reasons < KVSIM_REPORT_MAX_REASONS - 1) {
        out->rejects[out->num_reject_reasons++] = (struct kvsim_reject_count){reason, 1};
        return;
    }
    (*other)++;
}

static void copy_name(char *dst, const char *src)
{
    snprintf(dst, KVSIM_REPORT_NAME_LEN, "%s", src != NULL ? src : "");
}

/* Summarizes the merged ITL sketch, with the exact mean from the records. */
static int itl_latency(const struct kvsim_metrics *m, struct kvsim_latency *l)
{
    memset(l, 0, sizeof *l);
    struct kvsim_sketch all;
    kvsim_sketch_init(&all);
    for (uint32_t i = 0; i < m->num_threads; i++) {
        int err = kvsim_sketch_merge(&all, &m->sketches[i].s);
        if (err) {
            kvsim_sketch_fini(&all);
            return err;
        }
    }
    if (all.count > 0) {
        double sum = 0.0;
        uint64_t gaps = 0;
        for (uint32_t i = 0; i < m->num_requests; i++) {
            const struct kvsim_req_record *r = &m->recs[i];
            if (r->num_output_tokens >= 2) {
                sum += (double)r->itl_sum_ns;
                gaps += r->num_output_tokens - 1;
            }
        }
        l->count = all.count;
        l->mean = gaps > 0 ? sum / (double)gaps : 0.0;
        l->min = (double)all.min;
        /* The standard deviation from the buckets' representatives (each within 0.1 %) around
         * the exact mean; zeros counted apart. */
        double sq = (double)all.zero_count * l->mean * l->mean;
        for (uint32_t b = 0; b < all.num_bins; b++)
            if (all.bins[b]) {
                double v = kvsim_sketch_key_value(all.offset + (int32_t)b) - l->mean;
                sq += (double)all.bins[b] * v * v;
            }
        l->std = sqrt(sq / (double)all.count);
        static const uint32_t low[] = {10, 50, 100, 250, 750};
        double *dst[] = {&l->p1, &l->p5, &l->p10, &l->p25, &l->p75};
        for (int k = 0; k < 5; k++)
            *dst[k] = kvsim_sketch_at_rank(&all, kvsim_nearest_rank(all.count, low[k]));
        l->p50 = kvsim_sketch_at_rank(&all, kvsim_nearest_rank(all.count, P50));
        l->p90 = kvsim_sketch_at_rank(&all, kvsim_nearest_rank(all.count, P90));
        l->p95 = kvsim_sketch_at_rank(&all, kvsim_nearest_rank(all.count, P95));
        l->p99 = kvsim_sketch_at_rank(&all, kvsim_nearest_rank(all.count, P99));
        l->max = (double)all.max;
    }
    kvsim_sketch_fini(&all);
    return 0;
}

/* +1 at an arrival, -1 at a finish; at one instant finishes first (a slot freed and taken at
 * once is one request in flight, not two). */
static int cmp_event(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * The most requests in flight at once: arrived and not yet completed, rejected or aborted
 * (an incomplete one stays in flight to the end). O(R log R) over the records; events are
 * packed as 2 * t + (arrival ? 1 : 0) so that one sort orders them. Returns 0 or -ENOMEM.
 */
static int peak_in_flight(const struct kvsim_metrics *m, uint64_t *peak)
{
    *peak = 0;
    size_t cap = 2 * (size_t)(m->num_requests ? m->num_requests : 1);
    int64_t *ev = malloc(2 * cap * sizeof *ev); /* the events, then the sort's scratch */
    if (!ev)
        return -ENOMEM;
    size_t n = 0;
    for (uint32_t i = 0; i < m->num_requests; i++) {
        const struct kvsim_req_record *r = &m->recs[i];
        if (r->arrival_ns == KVSIM_TIME_NONE || r->arrival_ns > INT64_MAX / 2 ||
            r->arrival_ns < INT64_MIN / 2)
            continue;
        ev[n++] = 2 * r->arrival_ns + 1;
        bool done = r->status == KVSIM_REQ_COMPLETED || r->status == KVSIM_REQ_REJECTED ||
                    r->status == KVSIM_REQ_ABORTED;
        if (done && r->finish_ns != KVSIM_TIME_NONE && r->finish_ns <= INT64_MAX / 2)
            ev[n++] = 2 * r->finish_ns;
    }
    if (n < RADIX_MIN) {
        qsort(ev, n, sizeof *ev, cmp_event);
    } else { /* signed order is unsigned order with the sign bit flipped */
        uint64_t *keys = (uint64_t *)ev;
        for (size_t i = 0; i < n; i++)
            keys[i] ^= UINT64_C(1) << 63;
        radix_sort_u64(keys, keys + cap, n);
        for (size_t i = 0; i < n; i++)
            keys[i] ^= UINT64_C(1) << 63;
    }
    uint64_t live = 0;
    for (size_t i = 0; i < n; i++) {
        if (ev[i] & 1) {
            if (++live > *peak)
                *peak = live;
        } else if (live) {
            live--;
        }
    }
    free(ev);
    return 0;
}

int kvsim_metrics_summarize(const struct kvsim_metrics *m, const struct kvsim_report_run *run,
                            struct kvsim_report *out)
{
    static const struct kvsim_report_run no_run;
    if (run == NULL)
        run = &no_run;
    memset(out, 0, sizeof *out);
    copy_name(out->trace, run->trace);
    out->complete = !run->end_reason || strcmp(run->end_reason, "finished") == 0;
    snprintf(out->end_reason, sizeof out->end_reason, "%s",
             run->end_reason ? run->end_reason : "finished");
    out->end_ns = run->end_ns;
    if (run->trace_sha256)
        snprintf(out->trace_sha256, sizeof out->trace_sha256, "%s", run->trace_sha256);
    copy_name(out->router, run->router);
    out->router_view_delayed = run->router_view_delayed;
    out->has_router_view = run->router_view_delayed || run->predict_ttl_ns > 0;
    out->kv_event_delay_ms = (double)run->kv_event_delay_ns / 1e6;
    out->predict_ttl_s = (double)run->predict_ttl_ns / 1e9;
    out->seed = run->seed;
    out->num_engines = run->num_engines;
    out->data_parallel_size = run->data_parallel_size > 1 ? run->data_parallel_size : 1;
    out->tensor_parallel_size = run->tensor_parallel_size > 1 ? run->tensor_parallel_size : 1;
    out->gpus = (uint64_t)out->num_engines * out->tensor_parallel_size;
    out->enable_expert_parallel = run->enable_expert_parallel;
    out->vllm_contract = run->vllm_contract;
    if (run->config_text && !(out->config_text = strdup(run->config_text)))
        return -ENOMEM;
    if ((out->has_engine = run->engine != NULL))
        out->engine = *run->engine;
    if ((out->has_pools = run->prefill != NULL && run->decode != NULL)) {
        out->prefill = *run->prefill;
        out->decode = *run->decode;
    }
    out->num_threads = run->num_threads != 0 ? run->num_threads : m->num_threads;
    out->num_requests = m->num_requests;

    /* Counts, token sums and the simulated span, in request-index order. */
    int64_t first_arrival = INT64_MAX, last_finish = INT64_MIN;
    uint64_t other = 0;
    for (uint32_t i = 0; i < m->num_requests; i++) {
        const struct kvsim_req_record *r = &m->recs[i];
        out->preemptions += r->num_preemptions;
        out->arrived += r->arrival_ns != KVSIM_TIME_NONE;
        if (r->arrival_ns != KVSIM_TIME_NONE && r->arrival_ns < first_arrival)
            first_arrival = r->arrival_ns;
        switch ((enum kvsim_req_status)r->status) {
        case KVSIM_REQ_COMPLETED:
            out->completed++;
            out->input_tokens += r->input_len;
            out->output_tokens += r->num_output_tokens;
            out->cached_tokens += r->cached_tokens;
            if (r->finish_ns > last_finish)
                last_finish = r->finish_ns;
            break;
        case KVSIM_REQ_REJECTED:
            out->rejected++;
            count_reject(out, r->reject_reason, &other);
            break;
        case KVSIM_REQ_ABORTED: out->aborted++; break;
        case KVSIM_REQ_PENDING:
        case KVSIM_REQ_INCOMPLETE:
            out->incomplete++;
            out->cut_off += r->arrival_ns != KVSIM_TIME_NONE;
            break;
        }
    }
    qsort(out->rejects, out->num_reject_reasons, sizeof out->rejects[0], cmp_reject);
    if (other > 0)
        out->rejects[out->num_reject_reasons++] = (struct kvsim_reject_count){"other", other};

    if (out->input_tokens > 0)
        out->prefix_cache_reuse = (double)out->cached_tokens / (double)out->input_tokens;
    int rc = peak_in_flight(m, &out->peak_in_flight);
    if (rc)
        return rc;
    if (out->completed > 0)
        out->duration_ns = last_finish - first_arrival;
    if (out->duration_ns > 0) {
        double secs = (double)out->duration_ns / 1e9;
        out->requests_per_s = (double)out->completed / secs;
        out->input_tokens_per_s = (double)out->input_tokens / secs;
        out->output_tokens_per_s = (double)out->output_tokens / secs;
        out->total_tokens_per_s = (double)(out->input_tokens + out->output_tokens) / secs;
    }

    /* SLOs: every request that arrived, in index order (the others are not scored). */
    const struct kvsim_slo *slo = &run->slo;
    out->slo.enabled = slo->ttft_ns > 0 || slo->itl_ns > 0 || slo->e2e_ns > 0;
    if (out->slo.enabled) {
        struct kvsim_slo_summary *s = &out->slo;
        s->slo = *slo;
        for (uint32_t i = 0; i < m->num_requests; i++) {
            const struct kvsim_req_record *r = &m->recs[i];
            if (r->status != KVSIM_REQ_COMPLETED || r->num_output_tokens == 0)
                continue;
            int64_t ttft = r->first_token_ns - r->arrival_ns, e2e = r->finish_ns - r->arrival_ns;
            bool t = ttft <= slo->ttft_ns, e = e2e <= slo->e2e_ns, l = true;
            if (r->num_output_tokens >= 2) /* AIPerf's per-request ITL, as the TPOT above */
                l = (double)(r->last_token_ns - r->first_token_ns) /
                        (double)(r->num_output_tokens - 1) <=
                    (double)slo->itl_ns;
            s->met_ttft += t;
            s->met_itl += l;
            s->met_e2e += e;
            if ((t || slo->ttft_ns <= 0) && (l || slo->itl_ns <= 0) && (e || slo->e2e_ns <= 0)) {
                s->good++;
                s->good_output_tokens += r->num_output_tokens;
            }
        }
        double n = out->arrived ? (double)out->arrived : 1.0;
        s->attainment_ttft = slo->ttft_ns > 0 ? 100.0 * (double)s->met_ttft / n : 0;
        s->attainment_itl = slo->itl_ns > 0 ? 100.0 * (double)s->met_itl / n : 0;
        s->attainment_e2e = slo->e2e_ns > 0 ? 100.0 * (double)s->met_e2e / n : 0;
        s->attainment_all = 100.0 * (double)s->good / n;
        if (out->duration_ns > 0) {
            double secs = (double)out->duration_ns / 1e9;
            s->goodput_requests_per_s = (double)s->good / secs;
            s->goodput_output_tokens_per_s = (double)s->good_output_tokens / secs;
        }
    }

    /* Latencies: exact, from the records. */
    double *vals = malloc((m->num_requests ? m->num_requests : 1) * sizeof *vals);
    if (vals == NULL)
        return -ENOMEM;
    kvsim_latency_of(vals, collect(m, LAT_TTFT, vals), &out->ttft);
    kvsim_latency_of(vals, collect(m, LAT_TTST, vals), &out->ttst);
    kvsim_latency_of(vals, collect(m, LAT_TPOT, vals), &out->tpot);
    kvsim_latency_of(vals, collect(m, LAT_E2E, vals), &out->e2e);
    kvsim_latency_of(vals, collect(m, LAT_TPS_PER_USER, vals), &out->output_tps_per_user);
    free(vals);
    out->itl = out->tpot; /* AIPerf's per-request ITL is vLLM's TPOT */
    int err = itl_latency(m, &out->token_gap);
    if (err)
        return err;

    /* Wall clock. */
    if (run->wall_ns > 0) {
        double wall_s = (double)run->wall_ns / 1e9;
        out->wall_ns = run->wall_ns;
        out->speed = (double)out->duration_ns / (double)run->wall_ns;
        out->wall_requests_per_s = (double)out->completed / wall_s;
    }
    return 0;
}

void kvsim_report_fini(struct kvsim_report *r)
{
    free(r->disagg.per_prefill);
    r->disagg.per_prefill = NULL;
    free(r->config_text);
    r->config_text = NULL;
    free(r->per_engine);
    r->per_engine = NULL;
    r->num_per_engine = 0;
}
