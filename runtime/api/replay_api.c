/*
 * replay_api.c - the multi-engine replay from the public API (kvsim.h: kvsim_replay,
 * kvsim_replay_requests): the options resolved as `kvsim replay` resolves them, the run, the
 * report as a struct and as JSON. Called from one thread; the replay starts its own workers.
 */
#include "runtime/api/api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* config_api.c */
const struct kvsim_options *kvsim__config_options(const kvsim_config_t *c);
char *kvsim__config_errbuf(kvsim_config_t *c, size_t *len);

/* Copies n bytes of src into a struct whose caller-declared size is dst_size (the ABI rule of
 * kvsim.h: a caller built against an older header has a shorter struct). */
static int copy_sized(void *dst, size_t dst_size, const void *src, size_t n)
{
    if (dst_size < sizeof(size_t))
        return -EINVAL;
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t),
           (dst_size < n ? dst_size : n) - sizeof(size_t));
    return 0;
}

static void fill_summary(const struct kvsim_report *r, kvsim_summary_t *s)
{
    kvsim_summary_t x = {.size = sizeof x};
    x.num_requests = r->num_requests;
    x.completed = r->completed;
    x.rejected = r->rejected;
    x.incomplete = r->incomplete;
    x.aborted = r->aborted;
    x.preemptions = r->preemptions;
    x.input_tokens = r->input_tokens;
    x.output_tokens = r->output_tokens;
    x.cached_tokens = r->cached_tokens;
    x.prefix_cache_reuse = r->prefix_cache_reuse;
    x.duration_s = (double)r->duration_ns / 1e9;
    x.requests_per_s = r->requests_per_s;
    x.output_tokens_per_s = r->output_tokens_per_s;
    x.ttft_mean_ms = r->ttft.mean / 1e6;
    x.ttft_p50_ms = r->ttft.p50 / 1e6;
    x.ttft_p99_ms = r->ttft.p99 / 1e6;
    x.tpot_mean_ms = r->tpot.mean / 1e6;
    x.tpot_p50_ms = r->tpot.p50 / 1e6;
    x.tpot_p99_ms = r->tpot.p99 / 1e6;
    x.itl_p50_ms = r->itl.p50 / 1e6;
    x.itl_p99_ms = r->itl.p99 / 1e6;
    x.e2e_mean_ms = r->e2e.mean / 1e6;
    x.e2e_p50_ms = r->e2e.p50 / 1e6;
    x.e2e_p99_ms = r->e2e.p99 / 1e6;
    x.token_gap_p50_ms = r->token_gap.p50 / 1e6;
    x.token_gap_p99_ms = r->token_gap.p99 / 1e6;
    copy_sized(s, s->size, &x, sizeof x);
}

/* The run of cfg's options with requests (NULL: the trace or the synthetic workload). */
static int run_replay(kvsim_config_t *cfg, const struct kvsim_trace *requests,
                      kvsim_summary_t *summary, char **report_json)
{
    size_t errlen;
    char *err = kvsim__config_errbuf(cfg, &errlen);
    err[0] = 0;
    if (report_json)
        *report_json = NULL;
    if (summary && summary->size < sizeof(size_t)) {
        snprintf(err, errlen, "kvsim_replay: summary->size is not set (use KVSIM_SUMMARY_INIT)");
        return -EINVAL;
    }
    const struct kvsim_options *o = kvsim__config_options(cfg);
    if (requests && o->replay.trace_path) {
        snprintf(err, errlen, "kvsim_replay_requests: the configuration names a trace too");
        return -EINVAL;
    }
    struct kvsim_run run;
    int rc = kvsim_options_resolve(o, &run, err, errlen);
    if (rc)
        return rc;
    run.replay.quiet = true; /* a library prints nothing */
    run.replay.requests = requests;
    /* The whole configuration: in the report, and in "config-out" if set. */
    char *config = kvsim_options_config_text(o, &run);
    if (!config) {
        kvsim_run_fini(&run);
        snprintf(err, errlen, "out of memory writing the configuration");
        return -ENOMEM;
    }
    if (o->config_out_path &&
        (rc = kvsim_write_text_file("config-out", o->config_out_path, config, err, errlen))) {
        free(config);
        kvsim_run_fini(&run);
        return rc;
    }
    run.replay.config_text = config;
    struct kvsim_report report;
    rc = kvsim_replay_run(&run.replay, &report, err, errlen);
    free(config);
    kvsim_run_fini(&run);
    if (rc)
        return rc;
    if (report_json && !(*report_json = kvsim_report_json_text(&report))) {
        snprintf(err, errlen, "out of memory writing the report");
        rc = -ENOMEM;
    }
    if (rc == 0 && summary)
        fill_summary(&report, summary);
    kvsim_report_fini(&report);
    return rc;
}

int kvsim_replay(kvsim_config_t *cfg, kvsim_summary_t *summary, char **report_json)
{
    return run_replay(cfg, NULL, summary, report_json);
}

/* Orders requests by (arrival, position) as a loaded trace is. */
static int by_arrival(const void *a, const void *b)
{
    const struct kvsim_req_spec *x = a, *y = b;
    if (x->arrival_ns != y->arrival_ns)
        return x->arrival_ns < y->arrival_ns ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* reqs[0..n) as a trace (hash ids copied). Returns 0 or -EINVAL/-ENOMEM with the message. */
static int requests_trace(const kvsim_request_t *reqs, size_t n, struct kvsim_trace *t, char *err,
                          size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->format = KVSIM_TRACE_SYNTHETIC;
    if (!reqs || n == 0 || n > UINT32_MAX - 1) {
        snprintf(err, errlen, "kvsim_replay_requests: %s", n ? "too many requests" : "no requests");
        return -EINVAL;
    }
    size_t hashes = 0;
    for (size_t i = 0; i < n; i++) {
        const kvsim_request_t *r = &reqs[i];
        uint32_t len;
        const char *why = kvsim_request_check(r, t->block_size, &len);
        if (!why && r->tokens)
            why = "token prompts are not supported by the replay: give hash_ids or input_len";
        else if (!why && r->min_tokens)
            why = "min_tokens is not supported by the replay (the output length is stop_after or "
                  "max_tokens)";
        if (!why && r->arrival_ns < 0)
            why = "arrival_ns is negative";
        if (why) {
            snprintf(err, errlen, "kvsim_replay_requests: request %zu (id %llu): %s", i,
                     (unsigned long long)r->id, why);
            return -EINVAL;
        }
        if (r->num_hash_ids)
            t->block_size = r->hash_block_size;
        hashes += r->num_hash_ids;
    }
    t->reqs = calloc(n, sizeof *t->reqs);
    t->hash_ids = malloc((hashes ? hashes : 1) * sizeof *t->hash_ids);
    if (!t->reqs || !t->hash_ids) {
        kvsim_trace_free(t);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const kvsim_request_t *r = &reqs[i];
        struct kvsim_req_spec *s = &t->reqs[i];
        s->line = (uint32_t)i + 1;
        s->arrival_ns = r->arrival_ns;
        /* checked above: hash ids or a length, no tokens */
        s->input_len = r->input_len ? r->input_len : r->num_hash_ids * r->hash_block_size;
        s->output_len =
            r->stop_after && r->stop_after < r->max_tokens ? r->stop_after : r->max_tokens;
        s->hash_off = (uint32_t)t->num_hash_ids;
        s->num_hashes = r->num_hash_ids;
        s->session = s->prev_turn = -1;
        if (r->num_hash_ids)
            memcpy(t->hash_ids + t->num_hash_ids, r->hash_ids, r->num_hash_ids * sizeof(uint64_t));
        t->num_hash_ids += r->num_hash_ids;
    }
    t->num_reqs = n;
    qsort(t->reqs, n, sizeof *t->reqs, by_arrival);
    return 0;
}

int kvsim_replay_requests(kvsim_config_t *cfg, const kvsim_request_t *reqs, size_t n,
                          kvsim_summary_t *summary, char **report_json)
{
    size_t errlen;
    char *err = kvsim__config_errbuf(cfg, &errlen);
    struct kvsim_trace t;
    int rc = requests_trace(reqs, n, &t, err, errlen);
    if (rc)
        return rc;
    rc = run_replay(cfg, &t, summary, report_json);
    kvsim_trace_free(&t);
    return rc;
}
