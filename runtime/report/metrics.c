/*
 * metrics.c - the metrics collector: one fixed-size record per request and one ITL sketch per
 * worker thread, fed by the event functions (report.h: the thread rules).
 */
#include "runtime/report/report_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the collector ----------------------------------------------------------------------------
 */

const char *kvsim_req_status_name(enum kvsim_req_status status)
{
    switch (status) {
    case KVSIM_REQ_PENDING: return "pending";
    case KVSIM_REQ_COMPLETED: return "completed";
    case KVSIM_REQ_REJECTED: return "rejected";
    case KVSIM_REQ_INCOMPLETE: return "incomplete";
    case KVSIM_REQ_ABORTED: return "aborted";
    }
    return "unknown";
}

/* Every record of recs[0..n) PENDING with all times unset. */
static void record_init(struct kvsim_req_record *recs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        recs[i] = (struct kvsim_req_record){
            .arrival_ns = KVSIM_TIME_NONE,
            .first_sched_ns = KVSIM_TIME_NONE,
            .first_token_ns = KVSIM_TIME_NONE,
            .second_token_ns = KVSIM_TIME_NONE,
            .last_token_ns = KVSIM_TIME_NONE,
            .finish_ns = KVSIM_TIME_NONE,
            .engine = -1,
            .status = KVSIM_REQ_PENDING,
            .prefill_engine = -1,
            .decode_engine = -1,
            .pin_ns = KVSIM_TIME_NONE,
            .transfer_ns = KVSIM_TIME_NONE,
        };
}

int kvsim_metrics_create(uint32_t num_requests, uint32_t num_threads, struct kvsim_metrics **out)
{
    if (num_threads == 0)
        return -EINVAL;
    struct kvsim_metrics *m = calloc(1, sizeof *m);
    if (m == NULL)
        goto fail_metrics;
    m->num_requests = num_requests;
    m->cap_requests = num_requests ? num_requests : 1;
    m->num_threads = num_threads;
    m->recs = malloc((num_requests ? num_requests : 1) * sizeof *m->recs);
    if (m->recs == NULL)
        goto fail_recs;
    m->sketches =
        aligned_alloc(_Alignof(struct thread_sketch), num_threads * sizeof(struct thread_sketch));
    if (m->sketches == NULL)
        goto fail_sketches;

    record_init(m->recs, num_requests);
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

int kvsim_metrics_grow(struct kvsim_metrics *m, uint32_t num_requests)
{
    if (num_requests <= m->num_requests)
        return 0;
    if (num_requests > m->cap_requests) {
        uint32_t nc = m->cap_requests > num_requests / 2 ? 2 * m->cap_requests : num_requests;
        if (nc < num_requests) /* 2 * cap wrapped */
            nc = num_requests;
        struct kvsim_req_record *r = realloc(m->recs, (size_t)nc * sizeof *r);
        if (!r)
            return -ENOMEM;
        m->recs = r;
        m->cap_requests = nc;
    }
    record_init(m->recs + m->num_requests, num_requests - m->num_requests);
    m->num_requests = num_requests;
    return 0;
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

int kvsim_metrics_on_tokens(struct kvsim_metrics *m, uint32_t thread, uint32_t req, int64_t t,
                            int64_t gap, uint32_t n)
{
    if (n == 0)
        return 0;
    if (thread >= m->num_threads || gap < 0)
        return -EINVAL;
    struct kvsim_req_record *rec;
    int err = live_record(m, req, t, &rec);
    if (err)
        return err;
    uint32_t c = rec->num_output_tokens;
    int64_t span, last;
    if (n > UINT32_MAX - c || __builtin_mul_overflow((int64_t)(n - 1), gap, &span) ||
        __builtin_add_overflow(t, span, &last))
        return -EOVERFLOW;
    if (c > 0 && t < rec->last_token_ns)
        return -EINVAL;
    /* The gaps: t's to the token before (when there is one), then n - 1 of `gap`. */
    bool lead = c > 0;
    int64_t lead_gap = lead ? t - rec->last_token_ns : 0;
    err = kvsim_sketch_add_two(&m->sketches[thread].s, lead_gap, lead, gap, n - 1);
    if (err)
        return err;
    if (c == 0)
        rec->first_token_ns = t;
    if (c + n >= 2 && c <= 1) /* the second token: t if it is the first given, else t + gap */
        rec->second_token_ns = c == 1 ? t : t + gap;
    if (lead && lead_gap > rec->itl_max_ns)
        rec->itl_max_ns = lead_gap;
    if (n > 1 && gap > rec->itl_max_ns)
        rec->itl_max_ns = gap;
    rec->itl_sum_ns += lead_gap + (int64_t)(n - 1) * gap;
    rec->last_token_ns = last;
    rec->num_output_tokens = c + n;
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

int kvsim_metrics_on_abort(struct kvsim_metrics *m, uint32_t req, int64_t t, const char *reason)
{
    struct kvsim_req_record *rec;
    int err = live_record(m, req, t, &rec);
    if (err)
        return err;
    rec->finish_ns = t;
    rec->status = KVSIM_REQ_ABORTED;
    rec->reject_reason = reason != NULL ? reason : "unknown";
    return 0;
}

int kvsim_metrics_set_handoff(struct kvsim_metrics *m, uint32_t req, int32_t prefill_engine,
                              int32_t decode_engine, enum kvsim_req_handoff outcome, int64_t pin_ns,
                              int64_t transfer_ns)
{
    if (req >= m->num_requests)
        return -EINVAL;
    struct kvsim_req_record *rec = &m->recs[req];
    rec->handoff = (uint8_t)outcome;
    rec->prefill_engine = prefill_engine;
    rec->decode_engine = decode_engine;
    rec->pin_ns = pin_ns;
    rec->transfer_ns = transfer_ns;
    m->disagg = true;
    return 0;
}

uint32_t kvsim_metrics_num_final(const struct kvsim_metrics *m)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->num_requests; i++)
        n += m->recs[i].status != KVSIM_REQ_PENDING;
    return n;
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
