/*
 * metrics.c - replay metrics: per-request records, the ITL quantile sketch, and the report.
 *
 * See metrics.h for the contracts. Layout: the sketch (kvsim_sketch_*), exact percentiles, the
 * collector and its event functions, kvsim_metrics_summarize(), then the three writers (table,
 * JSON report, JSONL records).
 */
#include "runtime/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ---- the sketch ------------------------------------------------------------------------------ */

/* gamma = (1 + a) / (1 - a) for a = KVSIM_SKETCH_ALPHA. */
#define SKETCH_GAMMA        ((1.0 + KVSIM_SKETCH_ALPHA) / (1.0 - KVSIM_SKETCH_ALPHA))
/* ln(gamma) = 2 atanh(a) and its inverse, to 40 digits (decimal arithmetic, see the tests). */
#define SKETCH_LN_GAMMA     0.002000000666667066666952381174603356421508
#define SKETCH_INV_LN_GAMMA 499.9998333332888888656084505114529463873
/*
 * Keys of values in [1, INT64_MAX] lie in [0, 21835]; the bucket array never extends past
 * this bound, which caps a sketch at about 175 KB.
 */
#define SKETCH_KEY_LIMIT    21900
/* First allocation and minimum growth step, in buckets. */
#define SKETCH_MIN_GROWTH   64

int32_t kvsim_sketch_key(int64_t v)
{
    if (v <= 1)
        return 0;
    return (int32_t)ceil(log((double)v) * SKETCH_INV_LN_GAMMA);
}

double kvsim_sketch_key_value(int32_t key)
{
    return 2.0 * exp((double)key * SKETCH_LN_GAMMA) / (SKETCH_GAMMA + 1.0);
}

void kvsim_sketch_init(struct kvsim_sketch *s)
{
    memset(s, 0, sizeof *s);
    s->last_value = -1;
}

void kvsim_sketch_fini(struct kvsim_sketch *s)
{
    if (s == NULL)
        return;
    free(s->bins);
    kvsim_sketch_init(s);
}

static int32_t min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static int32_t max_i32(int32_t a, int32_t b) { return a > b ? a : b; }

/*
 * Makes the bucket array cover keys [lo, hi] (0 <= lo <= hi < SKETCH_KEY_LIMIT), growing it
 * by at least half its width on the side(s) that grow, so that growth is amortized O(1).
 * Returns 0, or -ENOMEM with the sketch unchanged.
 */
static int sketch_reserve(struct kvsim_sketch *s, int32_t lo, int32_t hi)
{
    int32_t cur_lo = s->offset;
    int32_t cur_hi = s->offset + (int32_t)s->num_bins - 1;
    if (s->bins != NULL && lo >= cur_lo && hi <= cur_hi)
        return 0;

    int32_t new_lo, new_hi;
    if (s->bins == NULL) {
        int32_t width = hi - lo + 1;
        int32_t pad = max_i32(SKETCH_MIN_GROWTH, width) / 2;
        new_lo = lo - pad;
        new_hi = hi + pad;
    } else {
        int32_t width = max_i32(hi, cur_hi) - min_i32(lo, cur_lo) + 1;
        int32_t pad = max_i32(SKETCH_MIN_GROWTH, width / 2);
        new_lo = lo < cur_lo ? lo - pad : cur_lo;
        new_hi = hi > cur_hi ? hi + pad : cur_hi;
    }
    new_lo = max_i32(new_lo, 0);
    new_hi = min_i32(new_hi, SKETCH_KEY_LIMIT - 1);

    uint32_t n = (uint32_t)(new_hi - new_lo + 1);
    uint64_t *bins = calloc(n, sizeof *bins);
    if (bins == NULL)
        return -ENOMEM;
    if (s->bins != NULL)
        memcpy(bins + (cur_lo - new_lo), s->bins, s->num_bins * sizeof *bins);
    free(s->bins);
    s->bins = bins;
    s->offset = new_lo;
    s->num_bins = n;
    return 0;
}

int kvsim_sketch_add(struct kvsim_sketch *s, int64_t v)
{
    if (v < 0)
        return -EINVAL;
    if (v == 0) {
        s->zero_count++;
    } else {
        int32_t key;
        if (v == s->last_value) {
            key = s->last_key;
        } else {
            key = kvsim_sketch_key(v);
            s->last_value = v;
            s->last_key = key;
        }
        if (s->bins == NULL || key < s->offset || key >= s->offset + (int32_t)s->num_bins) {
            int err = sketch_reserve(s, key, key);
            if (err)
                return err;
        }
        s->bins[key - s->offset]++;
    }
    if (s->count == 0 || v < s->min)
        s->min = v;
    if (s->count == 0 || v > s->max)
        s->max = v;
    s->count++;
    return 0;
}

int kvsim_sketch_merge(struct kvsim_sketch *dst, const struct kvsim_sketch *src)
{
    if (src->count == 0)
        return 0;
    if (src->bins != NULL) {
        int err = sketch_reserve(dst, src->offset, src->offset + (int32_t)src->num_bins - 1);
        if (err)
            return err;
        uint64_t *d = dst->bins + (src->offset - dst->offset);
        for (uint32_t i = 0; i < src->num_bins; i++)
            d[i] += src->bins[i];
    }
    if (dst->count == 0 || src->min < dst->min)
        dst->min = src->min;
    if (dst->count == 0 || src->max > dst->max)
        dst->max = src->max;
    dst->zero_count += src->zero_count;
    dst->count += src->count;
    return 0;
}

double kvsim_sketch_at_rank(const struct kvsim_sketch *s, uint64_t r)
{
    if (s->count == 0)
        return NAN;
    if (r < 1)
        r = 1;
    if (r > s->count)
        r = s->count;
    if (r == 1)
        return (double)s->min;
    if (r == s->count)
        return (double)s->max;

    double v = (double)s->max;
    uint64_t seen = s->zero_count;
    if (r <= seen) {
        v = 0.0;
    } else {
        for (uint32_t i = 0; i < s->num_bins; i++) {
            seen += s->bins[i];
            if (seen >= r) {
                v = kvsim_sketch_key_value(s->offset + (int32_t)i);
                break;
            }
        }
    }
    if (v < (double)s->min)
        v = (double)s->min;
    if (v > (double)s->max)
        v = (double)s->max;
    return v;
}

double kvsim_sketch_quantile(const struct kvsim_sketch *s, double q)
{
    if (s->count == 0 || isnan(q))
        return NAN;
    uint64_t r;
    if (q <= 0.0)
        r = 1;
    else if (q >= 1.0)
        r = s->count;
    else
        r = (uint64_t)ceil(q * (double)s->count);
    return kvsim_sketch_at_rank(s, r);
}

uint64_t kvsim_sketch_bin(const struct kvsim_sketch *s, int32_t key)
{
    if (s->bins == NULL || key < s->offset || key >= s->offset + (int32_t)s->num_bins)
        return 0;
    return s->bins[key - s->offset];
}

/* ---- exact percentiles ----------------------------------------------------------------------- */

uint64_t kvsim_nearest_rank(uint64_t n, uint32_t permille)
{
    if (n == 0)
        return 0;
    if (permille >= 1000)
        return n;
    /* ceil(permille * n / 1000) without overflow: n = 1000 q + rem. */
    uint64_t q = n / 1000, rem = n % 1000;
    uint64_t r = q * permille + (rem * permille + 999) / 1000;
    return r < 1 ? 1 : r;
}

double kvsim_percentile_sorted(const double *sorted, size_t n, uint32_t permille)
{
    return sorted[kvsim_nearest_rank(n, permille) - 1];
}

/* ---- the collector ----------------------------------------------------------------------------
 */

/* A thread's sketch on its own cache lines, so that workers never share one. */
struct thread_sketch {
    _Alignas(64) struct kvsim_sketch s;
};

struct kvsim_metrics {
    uint32_t num_requests;          /* R */
    uint32_t num_threads;           /* T */
    struct kvsim_req_record *recs;  /* [R], indexed by request */
    struct thread_sketch *sketches; /* [T], indexed by worker thread */
};

const char *kvsim_req_status_name(enum kvsim_req_status status)
{
    switch (status) {
    case KVSIM_REQ_PENDING: return "pending";
    case KVSIM_REQ_COMPLETED: return "completed";
    case KVSIM_REQ_REJECTED: return "rejected";
    case KVSIM_REQ_INCOMPLETE: return "incomplete";
    }
    return "unknown";
}

int kvsim_metrics_create(uint32_t num_requests, uint32_t num_threads, struct kvsim_metrics **out)
{
    if (num_threads == 0)
        return -EINVAL;
    struct kvsim_metrics *m = calloc(1, sizeof *m);
    if (m == NULL)
        goto fail_metrics;
    m->num_requests = num_requests;
    m->num_threads = num_threads;
    m->recs = malloc((num_requests ? num_requests : 1) * sizeof *m->recs);
    if (m->recs == NULL)
        goto fail_recs;
    m->sketches =
        aligned_alloc(_Alignof(struct thread_sketch), num_threads * sizeof(struct thread_sketch));
    if (m->sketches == NULL)
        goto fail_sketches;

    for (uint32_t i = 0; i < num_requests; i++) {
        m->recs[i] = (struct kvsim_req_record){
            .arrival_ns = KVSIM_TIME_NONE,
            .first_sched_ns = KVSIM_TIME_NONE,
            .first_token_ns = KVSIM_TIME_NONE,
            .second_token_ns = KVSIM_TIME_NONE,
            .last_token_ns = KVSIM_TIME_NONE,
            .finish_ns = KVSIM_TIME_NONE,
            .engine = -1,
            .status = KVSIM_REQ_PENDING,
        };
    }
    for (uint32_t i = 0; i < num_threads; i++)
        kvsim_sketch_init(&m->sketches[i].s);
    *out = m;
    return 0;

fail_sketches:
    free(m->recs);
fail_recs:
    free(m);
fail_metrics:
    return -ENOMEM;
}

void kvsim_metrics_destroy(struct kvsim_metrics *m)
{
    if (m == NULL)
        return;
    for (uint32_t i = 0; i < m->num_threads; i++)
        kvsim_sketch_fini(&m->sketches[i].s);
    free(m->sketches);
    free(m->recs);
    free(m);
}

uint32_t kvsim_metrics_num_requests(const struct kvsim_metrics *m) { return m->num_requests; }
uint32_t kvsim_metrics_num_threads(const struct kvsim_metrics *m) { return m->num_threads; }

const struct kvsim_req_record *kvsim_metrics_record(const struct kvsim_metrics *m, uint32_t req)
{
    return req < m->num_requests ? &m->recs[req] : NULL;
}

/*
 * The record of a request that may take an event at t: in range, arrived, not terminal, and
 * t not before its arrival. Returns 0 and sets *out, or -EINVAL / -EALREADY.
 */
static int live_record(struct kvsim_metrics *m, uint32_t req, int64_t t,
                       struct kvsim_req_record **out)
{
    if (req >= m->num_requests)
        return -EINVAL;
    struct kvsim_req_record *rec = &m->recs[req];
    if (rec->status != KVSIM_REQ_PENDING)
        return -EALREADY;
    if (rec->arrival_ns == KVSIM_TIME_NONE || t < rec->arrival_ns)
        return -EINVAL;
    *out = rec;
    return 0;
}

int kvsim_metrics_on_arrival(struct kvsim_metrics *m, uint32_t req, int64_t t, uint32_t input_len)
{
    if (req >= m->num_requests || t == KVSIM_TIME_NONE)
        return -EINVAL;
    struct kvsim_req_record *rec = &m->recs[req];
    if (rec->status != KVSIM_REQ_PENDING || rec->arrival_ns != KVSIM_TIME_NONE)
        return -EALREADY;
    rec->arrival_ns = t;
    rec->input_len = input_len;
    return 0;
}

int kvsim_metrics_on_schedule(struct kvsim_metrics *m, uint32_t req, int64_t t,
                              uint32_t cached_tokens, int32_t engine)
{
    struct kvsim_req_record *rec;
    int err = live_record(m, req, t, &rec);
    if (err)
        return err;
    if (rec->first_sched_ns == KVSIM_TIME_NONE) {
        rec->first_sched_ns = t;
        rec->cached_tokens = cached_tokens;
    }
    rec->engine = engine;
    return 0;
}

int kvsim_metrics_on_preempt(struct kvsim_metrics *m, uint32_t req)
{
    if (req >= m->num_requests)
        return -EINVAL;
    struct kvsim_req_record *rec = &m->recs[req];
    if (rec->status != KVSIM_REQ_PENDING)
        return -EALREADY;
    if (rec->first_sched_ns == KVSIM_TIME_NONE)
        return -EINVAL;
    rec->num_preemptions++;
    return 0;
}

int kvsim_metrics_on_token(struct kvsim_metrics *m, uint32_t thread, uint32_t req, int64_t t)
{
    if (thread >= m->num_threads)
        return -EINVAL;
    struct kvsim_req_record *rec;
    int err = live_record(m, req, t, &rec);
    if (err)
        return err;
    uint32_t n = rec->num_output_tokens;
    if (n == UINT32_MAX)
        return -EOVERFLOW;
    if (n == 0) {
        rec->first_token_ns = t;
    } else {
        if (t < rec->last_token_ns)
            return -EINVAL;
        int64_t gap = t - rec->last_token_ns;
        err = kvsim_sketch_add(&m->sketches[thread].s, gap);
        if (err)
            return err;
        if (n == 1)
            rec->second_token_ns = t;
        if (gap > rec->itl_max_ns)
            rec->itl_max_ns = gap;
        rec->itl_sum_ns += gap;
    }
    rec->last_token_ns = t;
    rec->num_output_tokens = n + 1;
    return 0;
}

int kvsim_metrics_on_finish(struct kvsim_metrics *m, uint32_t req, int64_t t)
{
    struct kvsim_req_record *rec;
    int err = live_record(m, req, t, &rec);
    if (err)
        return err;
    if (rec->num_output_tokens > 0 && t < rec->last_token_ns)
        return -EINVAL;
    rec->finish_ns = t;
    rec->status = KVSIM_REQ_COMPLETED;
    return 0;
}

int kvsim_metrics_on_reject(struct kvsim_metrics *m, uint32_t req, int64_t t, const char *reason)
{
    struct kvsim_req_record *rec;
    int err = live_record(m, req, t, &rec);
    if (err)
        return err;
    rec->finish_ns = t;
    rec->status = KVSIM_REQ_REJECTED;
    rec->reject_reason = reason != NULL ? reason : "unknown";
    return 0;
}

uint32_t kvsim_metrics_mark_incomplete(struct kvsim_metrics *m)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->num_requests; i++) {
        if (m->recs[i].status == KVSIM_REQ_PENDING) {
            m->recs[i].status = KVSIM_REQ_INCOMPLETE;
            n++;
        }
    }
    return n;
}

/* ---- the summary ----------------------------------------------------------------------------- */

/* The report's percentiles, in per-mille. */
enum { P50 = 500, P90 = 900, P95 = 950, P99 = 990 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * Fills l from vals[0..n), given in request-index order: the mean is summed in that order,
 * then vals is sorted for the exact nearest-rank percentiles.
 */
static void latency_from_values(double *vals, size_t n, struct kvsim_latency *l)
{
    memset(l, 0, sizeof *l);
    if (n == 0)
        return;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += vals[i];
    qsort(vals, n, sizeof *vals, cmp_double);
    l->count = n;
    l->mean = sum / (double)n;
    l->min = vals[0];
    l->p50 = kvsim_percentile_sorted(vals, n, P50);
    l->p90 = kvsim_percentile_sorted(vals, n, P90);
    l->p95 = kvsim_percentile_sorted(vals, n, P95);
    l->p99 = kvsim_percentile_sorted(vals, n, P99);
    l->max = vals[n - 1];
}

/* Which per-request latency to collect. */
enum req_latency { LAT_TTFT, LAT_TTST, LAT_TPOT, LAT_E2E };

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
        l->p50 = kvsim_sketch_at_rank(&all, kvsim_nearest_rank(all.count, P50));
        l->p90 = kvsim_sketch_at_rank(&all, kvsim_nearest_rank(all.count, P90));
        l->p95 = kvsim_sketch_at_rank(&all, kvsim_nearest_rank(all.count, P95));
        l->p99 = kvsim_sketch_at_rank(&all, kvsim_nearest_rank(all.count, P99));
        l->max = (double)all.max;
    }
    kvsim_sketch_fini(&all);
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
    copy_name(out->router, run->router);
    out->seed = run->seed;
    out->num_engines = run->num_engines;
    out->num_threads = run->num_threads != 0 ? run->num_threads : m->num_threads;
    out->num_requests = m->num_requests;

    /* Counts, token sums and the simulated span, in request-index order. */
    int64_t first_arrival = INT64_MAX, last_finish = INT64_MIN;
    uint64_t other = 0;
    for (uint32_t i = 0; i < m->num_requests; i++) {
        const struct kvsim_req_record *r = &m->recs[i];
        out->preemptions += r->num_preemptions;
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
        case KVSIM_REQ_PENDING:
        case KVSIM_REQ_INCOMPLETE: out->incomplete++; break;
        }
    }
    qsort(out->rejects, out->num_reject_reasons, sizeof out->rejects[0], cmp_reject);
    if (other > 0)
        out->rejects[out->num_reject_reasons++] = (struct kvsim_reject_count){"other", other};

    if (out->input_tokens > 0)
        out->prefix_cache_reuse = (double)out->cached_tokens / (double)out->input_tokens;
    if (out->completed > 0)
        out->duration_ns = last_finish - first_arrival;
    if (out->duration_ns > 0) {
        double secs = (double)out->duration_ns / 1e9;
        out->requests_per_s = (double)out->completed / secs;
        out->input_tokens_per_s = (double)out->input_tokens / secs;
        out->output_tokens_per_s = (double)out->output_tokens / secs;
        out->total_tokens_per_s = (double)(out->input_tokens + out->output_tokens) / secs;
    }

    /* Latencies: exact, from the records. */
    double *vals = malloc((m->num_requests ? m->num_requests : 1) * sizeof *vals);
    if (vals == NULL)
        return -ENOMEM;
    latency_from_values(vals, collect(m, LAT_TTFT, vals), &out->ttft);
    latency_from_values(vals, collect(m, LAT_TTST, vals), &out->ttst);
    latency_from_values(vals, collect(m, LAT_TPOT, vals), &out->tpot);
    latency_from_values(vals, collect(m, LAT_E2E, vals), &out->e2e);
    free(vals);
    int err = itl_latency(m, &out->itl);
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

/* ---- the terminal table ------------------------------------------------------------------------
 */

static const char *or_dash(const char *s) { return s[0] != '\0' ? s : "-"; }

static void print_latency_row(FILE *f, const char *name, const struct kvsim_latency *l)
{
    fprintf(f, "  %-6s %10" PRIu64, name, l->count);
    if (l->count == 0) {
        fprintf(f, "%11s%11s%11s%11s%11s%11s%11s\n", "-", "-", "-", "-", "-", "-", "-");
        return;
    }
    const double v[] = {l->mean, l->min, l->p50, l->p90, l->p95, l->p99, l->max};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        fprintf(f, "%11.3f", v[i] / 1e6);
    fputc('\n', f);
}

#define ROW "  %-24s "

void kvsim_report_print(FILE *f, const struct kvsim_report *r)
{
    fprintf(f, "kvsim replay report\n");
    fprintf(f, ROW "%s\n", "trace", or_dash(r->trace));
    fprintf(f, ROW "%s\n", "router", or_dash(r->router));
    fprintf(f, ROW "%" PRIu32 " engines, %" PRIu32 " threads\n", "topology", r->num_engines,
            r->num_threads);
    fprintf(f, ROW "%" PRIu64 "\n", "seed", r->seed);

    fprintf(f, "\n" ROW "%" PRIu64 "\n", "requests", r->num_requests);
    fprintf(f, ROW "%" PRIu64 "\n", "  completed", r->completed);
    fprintf(f, ROW "%" PRIu64 "\n", "  rejected", r->rejected);
    for (uint32_t i = 0; i < r->num_reject_reasons; i++)
        fprintf(f, "      %-20s %" PRIu64 "\n", r->rejects[i].reason, r->rejects[i].count);
    fprintf(f, ROW "%" PRIu64 "\n", "  incomplete", r->incomplete);
    fprintf(f, ROW "%" PRIu64 "\n", "preemptions", r->preemptions);

    fprintf(f, "\n" ROW "%" PRIu64 "\n", "input tokens", r->input_tokens);
    fprintf(f, ROW "%" PRIu64 "\n", "output tokens", r->output_tokens);
    fprintf(f, ROW "%.2f %% (%" PRIu64 " cached tokens)\n", "prefix-cache reuse",
            r->prefix_cache_reuse * 100.0, r->cached_tokens);

    fprintf(f, "\n" ROW "%.6f s\n", "simulated duration", (double)r->duration_ns / 1e9);
    fprintf(f, ROW "%.3f\n", "requests/s", r->requests_per_s);
    fprintf(f, ROW "%.1f\n", "input tokens/s", r->input_tokens_per_s);
    fprintf(f, ROW "%.1f\n", "output tokens/s", r->output_tokens_per_s);
    fprintf(f, ROW "%.1f\n", "total tokens/s", r->total_tokens_per_s);
    if (r->wall_ns > 0) {
        fprintf(f, ROW "%.3f s\n", "wall time", (double)r->wall_ns / 1e9);
        fprintf(f, ROW "%.1fx (simulated s per wall s)\n", "speed", r->speed);
        fprintf(f, ROW "%.1f\n", "requests per wall s", r->wall_requests_per_s);
    } else {
        fprintf(f, ROW "n/a\n", "wall time");
    }

    const struct kvsim_offload_summary *o = &r->offload;
    if (o->enabled) {
        static const char *const lane[4] = {"G1->G2", "G2->G3", "G3->G2", "G2->G1"};
        fprintf(f, "\n  offload %-16s %12s %12s %14s %8s\n", "lane", "batches", "blocks", "bytes",
                "failed");
        for (int l = 0; l < 4; l++)
            fprintf(f, "          %-16s %12" PRIu64 " %12" PRIu64 " %14" PRIu64 " %8" PRIu64 "\n",
                    lane[l], o->lanes[l].batches, o->lanes[l].blocks, o->lanes[l].bytes,
                    o->lanes[l].failed);
        fprintf(f, ROW "%.2f %% (%" PRIu64 " of %" PRIu64 " G1-miss blocks)\n", "G2 hit rate",
                o->g2_hit_rate * 100.0, o->g2_hit_blocks, o->g1_miss_blocks);
        fprintf(f, ROW "%.2f %% (%" PRIu64 " blocks)%s\n", "G3 hit rate", o->g3_hit_rate * 100.0,
                o->g3_hit_blocks, o->g3_shared ? ", shared by all engines" : "");
        fprintf(f, ROW "%" PRIu64 " onboarded, %" PRIu64 " computed\n", "prompt tokens",
                o->onboarded_tokens, o->recomputed_tokens);
        fprintf(f, ROW "%" PRIu64 " (%" PRIu64 " failed), waited %.3f s\n", "loads", o->loads,
                o->failed_loads, (double)o->onboard_wait_ns / 1e9);
        fprintf(f, ROW "%" PRIu64 " times, %.3f s; %" PRIu64 " RETRY_NOW\n", "blocked on offload",
                o->blocked, (double)o->blocked_ns / 1e9, o->retry_now);
    }

    fprintf(f, "\n  %-6s %10s%11s%11s%11s%11s%11s%11s%11s\n", "(ms)", "count", "mean", "min", "p50",
            "p90", "p95", "p99", "max");
    print_latency_row(f, "TTFT", &r->ttft);
    print_latency_row(f, "TTST", &r->ttst);
    print_latency_row(f, "TPOT", &r->tpot);
    print_latency_row(f, "ITL", &r->itl);
    print_latency_row(f, "E2E", &r->e2e);
}

/* ---- files -------------------------------------------------------------------------------------
 */

static int file_error(int e, const char *path, const char *what, char *err, size_t errlen)
{
    if (e == 0)
        e = EIO;
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s: %s: %s", path, what, strerror(e));
    return -e;
}

static int open_for_write(const char *path, FILE **fp, char *err, size_t errlen)
{
    errno = 0;
    *fp = fopen(path, "w");
    if (*fp == NULL)
        return file_error(errno, path, "cannot open for writing", err, errlen);
    errno = 0;
    return 0;
}

/*
 * Closes fp, reporting an earlier write error (errno as the failed write left it: open_for_write
 * clears errno) or a failed final flush.
 */
static int close_written(FILE *fp, const char *path, char *err, size_t errlen)
{
    bool failed = ferror(fp) != 0;
    int e = failed ? errno : 0;
    errno = 0;
    if (fclose(fp) != 0 && !failed) {
        failed = true;
        e = errno;
    }
    if (failed)
        return file_error(e, path, "write failed", err, errlen);
    return 0;
}

/* ---- the JSON report ---------------------------------------------------------------------------
 */

/*
 * Adds key -> v to o. False if o or v is NULL (out of memory) or the insertion fails; v is
 * released in every failing case (json_object_set_new's contract).
 */
static bool put(json_t *o, const char *key, json_t *v)
{
    return json_object_set_new(o, key, v) == 0;
}

static json_t *json_u64(uint64_t v)
{
    return v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

static json_t *json_ns_as_ms(double ns) { return json_real(ns / 1e6); }

static json_t *latency_json(const struct kvsim_latency *l)
{
    json_t *o = json_object();
    bool ok = put(o, "count", json_u64(l->count));
    const struct {
        const char *key;
        double v;
    } q[] = {{"mean", l->mean}, {"min", l->min}, {"p50", l->p50}, {"p90", l->p90},
             {"p95", l->p95},   {"p99", l->p99}, {"max", l->max}};
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        ok = put(o, q[i].key, l->count > 0 ? json_ns_as_ms(q[i].v) : json_null()) && ok;
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Builds the report object; NULL when out of memory. */
static json_t *report_json(const struct kvsim_report *r)
{
    json_t *root = json_object();
    bool ok = put(root, "format", json_string("kvsim-report-1"));

    json_t *run = json_object();
    ok = put(run, "trace", json_string(r->trace)) && ok;
    ok = put(run, "router", json_string(r->router)) && ok;
    ok = put(run, "seed", json_u64(r->seed)) && ok;
    ok = put(run, "engines", json_integer(r->num_engines)) && ok;
    ok = put(root, "run", run) && ok;

    json_t *req = json_object();
    ok = put(req, "total", json_u64(r->num_requests)) && ok;
    ok = put(req, "completed", json_u64(r->completed)) && ok;
    ok = put(req, "rejected", json_u64(r->rejected)) && ok;
    json_t *reasons = json_object();
    for (uint32_t i = 0; i < r->num_reject_reasons; i++)
        ok = put(reasons, r->rejects[i].reason, json_u64(r->rejects[i].count)) && ok;
    ok = put(req, "rejected_by_reason", reasons) && ok;
    ok = put(req, "incomplete", json_u64(r->incomplete)) && ok;
    ok = put(root, "requests", req) && ok;
    ok = put(root, "preemptions", json_u64(r->preemptions)) && ok;

    json_t *tok = json_object();
    ok = put(tok, "input", json_u64(r->input_tokens)) && ok;
    ok = put(tok, "output", json_u64(r->output_tokens)) && ok;
    ok = put(tok, "cached", json_u64(r->cached_tokens)) && ok;
    ok = put(root, "tokens", tok) && ok;
    ok = put(root, "prefix_cache_reuse_ratio", json_real(r->prefix_cache_reuse)) && ok;

    ok = put(root, "duration_ms", json_ns_as_ms((double)r->duration_ns)) && ok;
    json_t *thr = json_object();
    ok = put(thr, "requests_per_s", json_real(r->requests_per_s)) && ok;
    ok = put(thr, "input_tokens_per_s", json_real(r->input_tokens_per_s)) && ok;
    ok = put(thr, "output_tokens_per_s", json_real(r->output_tokens_per_s)) && ok;
    ok = put(thr, "total_tokens_per_s", json_real(r->total_tokens_per_s)) && ok;
    ok = put(root, "throughput", thr) && ok;

    ok = put(root, "ttft_ms", latency_json(&r->ttft)) && ok;
    ok = put(root, "ttst_ms", latency_json(&r->ttst)) && ok;
    ok = put(root, "tpot_ms", latency_json(&r->tpot)) && ok;
    ok = put(root, "itl_ms", latency_json(&r->itl)) && ok;
    ok = put(root, "e2e_ms", latency_json(&r->e2e)) && ok;

    const struct kvsim_offload_summary *o = &r->offload;
    if (o->enabled) {
        static const char *const lane[4] = {"g1_g2", "g2_g3", "g3_g2", "g2_g1"};
        json_t *off = json_object(), *lanes = json_object();
        for (int l = 0; l < 4; l++) {
            json_t *lj = json_object();
            ok = put(lj, "batches", json_u64(o->lanes[l].batches)) && ok;
            ok = put(lj, "blocks", json_u64(o->lanes[l].blocks)) && ok;
            ok = put(lj, "bytes", json_u64(o->lanes[l].bytes)) && ok;
            ok = put(lj, "failed_batches", json_u64(o->lanes[l].failed)) && ok;
            ok = put(lj, "cancelled_batches", json_u64(o->lanes[l].cancelled)) && ok;
            ok = put(lanes, lane[l], lj) && ok;
        }
        ok = put(off, "lanes", lanes) && ok;
        ok = put(off, "g1_miss_blocks", json_u64(o->g1_miss_blocks)) && ok;
        ok = put(off, "g2_hit_blocks", json_u64(o->g2_hit_blocks)) && ok;
        ok = put(off, "g3_hit_blocks", json_u64(o->g3_hit_blocks)) && ok;
        ok = put(off, "g2_hit_rate", json_real(o->g2_hit_rate)) && ok;
        ok = put(off, "g3_hit_rate", json_real(o->g3_hit_rate)) && ok;
        ok = put(off, "onboarded_tokens", json_u64(o->onboarded_tokens)) && ok;
        ok = put(off, "recomputed_tokens", json_u64(o->recomputed_tokens)) && ok;
        ok = put(off, "loads", json_u64(o->loads)) && ok;
        ok = put(off, "failed_loads", json_u64(o->failed_loads)) && ok;
        ok = put(off, "blocked_on_offload", json_u64(o->blocked)) && ok;
        ok = put(off, "retry_now", json_u64(o->retry_now)) && ok;
        ok = put(off, "blocked_on_offload_ms", json_ns_as_ms((double)o->blocked_ns)) && ok;
        ok = put(off, "onboard_wait_ms", json_ns_as_ms((double)o->onboard_wait_ns)) && ok;
        ok = put(off, "written_g2_blocks", json_u64(o->written_g2)) && ok;
        ok = put(off, "written_g3_blocks", json_u64(o->written_g3)) && ok;
        ok = put(off, "filtered_blocks", json_u64(o->filtered)) && ok;
        ok = put(off, "dropped_blocks", json_u64(o->dropped)) && ok;
        ok = put(off, "failed_blocks", json_u64(o->failed_blocks)) && ok;
        ok = put(off, "g2_resident_blocks", json_u64(o->g2_resident)) && ok;
        ok = put(off, "g3_resident_blocks", json_u64(o->g3_resident)) && ok;
        ok = put(off, "g3_shared", json_boolean(o->g3_shared)) && ok;
        if (o->g3_shared)
            ok = put(off, "g3_shared_evictions", json_u64(o->g3_evictions)) && ok;
        ok = put(root, "offload", off) && ok;
    }

    json_t *wall = json_object();
    bool known = r->wall_ns > 0;
    ok = put(wall, "threads", json_integer(r->num_threads)) && ok;
    ok = put(wall, "wall_time_ms", known ? json_ns_as_ms((double)r->wall_ns) : json_null()) && ok;
    ok = put(wall, "speed_sim_s_per_wall_s", known ? json_real(r->speed) : json_null()) && ok;
    ok =
        put(wall, "requests_per_wall_s", known ? json_real(r->wall_requests_per_s) : json_null()) &&
        ok;
    ok = put(root, "wall", wall) && ok;

    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

int kvsim_report_write_json(const char *path, const struct kvsim_report *r, char *err,
                            size_t errlen)
{
    json_t *root = report_json(r);
    char *text =
        root != NULL
            ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15))
            : NULL;
    json_decref(root);
    if (text == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: out of memory building the report", path);
        return -ENOMEM;
    }
    FILE *fp;
    int rc = open_for_write(path, &fp, err, errlen);
    if (rc == 0) {
        fputs(text, fp);
        fputc('\n', fp);
        rc = close_written(fp, path, err, errlen);
    }
    free(text);
    return rc;
}

/* ---- the per-request JSONL
 * ----------------------------------------------------------------------- */

/* Writes ,"key":<ns as ms, six decimals> from the integer, or null. */
static void put_ms(FILE *f, const char *key, int64_t ns)
{
    if (ns == KVSIM_TIME_NONE) {
        fprintf(f, ",\"%s\":null", key);
        return;
    }
    uint64_t mag = ns < 0 ? 0 - (uint64_t)ns : (uint64_t)ns;
    fprintf(f, ",\"%s\":%s%" PRIu64 ".%06" PRIu64, key, ns < 0 ? "-" : "", mag / 1000000,
            mag % 1000000);
}

/* Writes s as a JSON string. */
static void put_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void write_record(FILE *f, uint32_t id, const struct kvsim_req_record *r)
{
    fprintf(f, "{\"id\":%" PRIu32 ",\"status\":\"%s\"", id,
            kvsim_req_status_name((enum kvsim_req_status)r->status));
    if (r->engine >= 0)
        fprintf(f, ",\"engine\":%" PRId32, r->engine);
    else
        fputs(",\"engine\":null", f);
    fprintf(f,
            ",\"input_len\":%" PRIu32 ",\"cached_tokens\":%" PRIu32 ",\"output_tokens\":%" PRIu32
            ",\"preemptions\":%" PRIu32,
            r->input_len, r->cached_tokens, r->num_output_tokens, r->num_preemptions);
    put_ms(f, "arrival_ms", r->arrival_ns);
    put_ms(f, "first_sched_ms", r->first_sched_ns);
    put_ms(f, "first_token_ms", r->first_token_ns);
    put_ms(f, "second_token_ms", r->second_token_ns);
    put_ms(f, "last_token_ms", r->last_token_ns);
    put_ms(f, "finish_ms", r->finish_ns);
    bool arrived = r->arrival_ns != KVSIM_TIME_NONE;
    put_ms(f, "ttft_ms",
           arrived && r->num_output_tokens >= 1 ? r->first_token_ns - r->arrival_ns
                                                : KVSIM_TIME_NONE);
    put_ms(f, "e2e_ms",
           r->status == KVSIM_REQ_COMPLETED ? r->finish_ns - r->arrival_ns : KVSIM_TIME_NONE);
    put_ms(f, "itl_max_ms", r->num_output_tokens >= 2 ? r->itl_max_ns : KVSIM_TIME_NONE);
    put_ms(f, "itl_sum_ms", r->num_output_tokens >= 2 ? r->itl_sum_ns : KVSIM_TIME_NONE);
    fputs(",\"reject_reason\":", f);
    if (r->reject_reason != NULL)
        put_json_string(f, r->reject_reason);
    else
        fputs("null", f);
    fputs("}\n", f);
}

int kvsim_metrics_write_requests(const char *path, const struct kvsim_metrics *m, char *err,
                                 size_t errlen)
{
    FILE *fp;
    int rc = open_for_write(path, &fp, err, errlen);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < m->num_requests && !ferror(fp); i++)
        write_record(fp, i, &m->recs[i]);
    return close_written(fp, path, err, errlen);
}
