/*
 * fidelity.c - what `kvsim validate` and `kvsim calibrate` share (fidelity.h): a recorded vLLM run
 * read into a one-engine replay configuration with the run's own engine arguments, its requests
 * and a replay's, and the Diff% rows over a range of them. Main thread only.
 */
#include "runtime/cli/fidelity.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- reading the run ------------------------------------------------------------------------ */

struct run_info {
    char model[128], hardware[64];
    uint32_t tp;
    uint32_t dp; /* data-parallel ranks (engine cores behind one API server) */
    bool ep;     /* enable_expert_parallel */
    uint32_t max_num_seqs, max_num_batched_tokens, max_model_len, block_size;
    bool seqs_given, batched_given; /* max_num_seqs, max_num_batched_tokens in meta.json */
    bool prefix_caching;
    bool async_scheduling;
    char scheduling[96];     /* where async_scheduling came from, for the table */
    uint64_t num_gpu_blocks; /* 0: derive */
    double mem_gib, mem_util, link_gbps, link_latency_ns;
};

static json_t *load_json(const struct cli_parser *p, const char *path)
{
    json_error_t e;
    json_t *j;
    if (kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &j, &e) && e.line <= 0)
        cli_error(p, "%s", e.text); /* unreadable or too large: the text names the file */
    else if (!j)
        cli_error(p, "%s:%d: %s", path, e.line, e.text);
    else if (!json_is_object(j)) {
        cli_error(p, "%s: expected a JSON object", path);
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* An integer field of o (the key `name` of o, `shown` in the message) in [lo, hi], the range of
 * its kvsim option (api/config.c). Absent or null (vLLM's "not set"): *out unchanged, the
 * default; a value present is used as it is or refused, never replaced by the default. */
static int get_uint(const struct cli_parser *p, const char *path, json_t *o, const char *name,
                    const char *shown, uint32_t lo, uint32_t hi, uint32_t *out)
{
    json_t *v = json_object_get(o, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return cli_error(p, "%s: field '%s' must be an integer in [%u, %u]", path, shown, lo, hi);
    json_int_t x = json_integer_value(v);
    if (x < (json_int_t)lo || x > (json_int_t)hi)
        return cli_error(p, "%s: field '%s' is %lld: must be an integer in [%u, %u]", path, shown,
                         (long long)x, lo, hi);
    *out = (uint32_t)x;
    return 0;
}

/* A required number field of o (the key `name` of o, `shown` in the message) in [lo, hi], or
 * (lo, hi] when lo_open (unit follows the range in the message): a value present is used as it
 * is, never replaced by a default. */
static int get_num(const struct cli_parser *p, const char *path, json_t *o, const char *name,
                   const char *shown, double lo, bool lo_open, double hi, const char *unit,
                   double *out)
{
    json_t *v = json_object_get(o, name);
    double x = json_number_value(v);
    if (!v)
        return cli_error(p, "%s: field '%s' is missing", path, shown);
    if (!json_is_number(v))
        return cli_error(p, "%s: field '%s' must be a number in %c%g, %g]%s", path, shown,
                         lo_open ? '(' : '[', lo, hi, unit);
    if (!isfinite(x) || (lo_open ? !(x > lo) : !(x >= lo)) || !(x <= hi))
        return cli_error(p, "%s: field '%s' is %g: must be in %c%g, %g]%s", path, shown, x,
                         lo_open ? '(' : '[', lo, hi, unit);
    *out = x;
    return 0;
}

/* First release whose engine turns async scheduling on when it is left unset
 * (vllm-project/vllm#27614, in 0.14). */
#define FID_ASYNC_DEFAULT_MAJOR 0
#define FID_ASYNC_DEFAULT_MINOR 14

/* engine_kwargs.async_scheduling: true or false as given; unset or null, vLLM's default for
 * the run's vllm_version (on from 0.14; off when the version is not recorded). */
static int read_async_scheduling(const struct cli_parser *p, const char *path, json_t *m,
                                 json_t *kw, struct run_info *ri)
{
    json_t *a = json_object_get(kw, "async_scheduling");
    if (a && !json_is_null(a)) {
        if (!json_is_boolean(a))
            return cli_error(p, "%s: field 'engine_kwargs.async_scheduling' must be a boolean",
                             path);
        ri->async_scheduling = json_is_true(a);
        snprintf(ri->scheduling, sizeof ri->scheduling, "%s (engine_kwargs.async_scheduling)",
                 ri->async_scheduling ? "async" : "sync");
        return 0;
    }
    json_t *v = json_object_get(m, "vllm_version");
    if (!v || json_is_null(v)) {
        snprintf(ri->scheduling, sizeof ri->scheduling,
                 "sync (no vllm_version recorded: assumed older than 0.14)");
        return 0;
    }
    unsigned major, minor;
    if (!json_is_string(v) || sscanf(json_string_value(v), "%u.%u", &major, &minor) != 2)
        return cli_error(p, "%s: field 'vllm_version' must be a string MAJOR.MINOR[.PATCH]", path);
    ri->async_scheduling = major > FID_ASYNC_DEFAULT_MAJOR ||
                           (major == FID_ASYNC_DEFAULT_MAJOR && minor >= FID_ASYNC_DEFAULT_MINOR);
    snprintf(ri->scheduling, sizeof ri->scheduling, "%s (vLLM %.32s's default)",
             ri->async_scheduling ? "async" : "sync", json_string_value(v));
    return 0;
}

static int read_meta(const struct cli_parser *p, const char *dir, struct run_info *ri)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    json_t *m = load_json(p, path);
    if (!m)
        return -EINVAL;
    int rc = 0;
    json_t *model = json_object_get(m, "model");
    json_t *kw = json_object_get(m, "engine_kwargs");
    uint32_t dp = 1;
    bool ep = json_is_true(json_object_get(kw, "enable_expert_parallel"));
    if (!json_is_string(model) || !strchr(json_string_value(model), '/'))
        rc = cli_error(p, "%s: field 'model' must be a string ORG/NAME", path);
    else if (!json_is_object(kw))
        rc = cli_error(p, "%s: field 'engine_kwargs' must be an object", path);
    if (!rc) {
        snprintf(ri->model, sizeof ri->model, "%s", json_string_value(model));
        rc = get_uint(p, path, kw, "tensor_parallel_size", "engine_kwargs.tensor_parallel_size", 1,
                      64, &ri->tp);
    }
    if (!rc)
        rc = get_uint(p, path, kw, "data_parallel_size", "engine_kwargs.data_parallel_size", 1,
                      4096, &dp);
    json_t *epv = json_object_get(kw, "enable_expert_parallel");
    if (!rc && epv && !json_is_null(epv) && !json_is_boolean(epv))
        rc = cli_error(p, "%s: field 'engine_kwargs.enable_expert_parallel' must be a boolean",
                       path);
    /* Data parallelism is kvsim's dp-lb deployment (a mixture-of-experts model's ranks in
     * lockstep); expert parallelism shards the experts over the ranks. */
    ri->ep = ep;
    ri->dp = dp;
    if (!rc) {
        json_t *kvd = json_object_get(kw, "kv_cache_dtype");
        if (kvd && !(json_is_string(kvd) && !strcmp(json_string_value(kvd), "auto")))
            rc = cli_error(p,
                           "%s: field 'engine_kwargs.kv_cache_dtype' must be \"auto\" (a "
                           "quantized KV cache is not modelled)",
                           path);
    }
    if (!rc)
        rc = get_uint(p, path, kw, "max_num_seqs", "engine_kwargs.max_num_seqs", 1, 1 << 20,
                      &ri->max_num_seqs);
    if (!rc)
        rc = get_uint(p, path, kw, "max_num_batched_tokens", "engine_kwargs.max_num_batched_tokens",
                      1, INT32_MAX, &ri->max_num_batched_tokens);
    json_t *seqs = json_object_get(kw, "max_num_seqs");
    json_t *batched = json_object_get(kw, "max_num_batched_tokens");
    ri->seqs_given = seqs && !json_is_null(seqs);
    ri->batched_given = batched && !json_is_null(batched);
    if (!rc)
        rc = get_uint(p, path, kw, "max_model_len", "engine_kwargs.max_model_len", 2, INT32_MAX,
                      &ri->max_model_len);
    if (!rc)
        rc = get_uint(p, path, kw, "block_size", "engine_kwargs.block_size", 1, 65536,
                      &ri->block_size);
    json_t *pc = json_object_get(kw, "enable_prefix_caching");
    if (!rc && pc && !json_is_null(pc)) {
        if (!json_is_boolean(pc))
            rc = cli_error(p, "%s: field 'engine_kwargs.enable_prefix_caching' must be a boolean",
                           path);
        ri->prefix_caching = json_is_true(pc);
    }
    if (!rc)
        rc = read_async_scheduling(p, path, m, kw, ri);
    json_t *kv = json_object_get(m, "kv_cache");
    if (!rc && kv && !json_is_null(kv) && !json_is_object(kv))
        rc = cli_error(p, "%s: field 'kv_cache' must be an object", path);
    if (!rc && json_is_object(kv)) {
        uint32_t b = 0;
        rc = get_uint(p, path, kv, "num_gpu_blocks", "kv_cache.num_gpu_blocks", 2, 2147483645u, &b);
        ri->num_gpu_blocks = b;
    }
    json_decref(m);
    return rc;
}

static int read_cluster(const struct cli_parser *p, const char *dir, struct run_info *ri)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *c = load_json(p, path);
    if (!c)
        return -EINVAL;
    /* the ranges of --tp-link-gbps and --tp-link-latency-us (api/config.c) */
    int rc = get_num(p, path, c, "link_bw", "link_bw", 1e-3, false, 1e6, " GiB/s", &ri->link_gbps);
    if (!rc)
        rc = get_num(p, path, c, "link_latency", "link_latency", 0, false, 1e12, " ns",
                     &ri->link_latency_ns);
    json_t *nodes = json_object_get(c, "nodes");
    json_t *inst = NULL;
    size_t count = 0, i, k;
    json_t *node, *in;
    if (!rc && !json_is_array(nodes))
        rc = cli_error(p, "%s: field 'nodes' must be an array", path);
    json_array_foreach(nodes, i, node)
    {
        json_array_foreach(json_object_get(node, "instances"), k, in)
        {
            inst = in;
            count++;
        }
    }
    /* One instance, or (LLMServingSim's data-parallel configs) one per rank, all alike. */
    if (!rc && count != 1 && count != ri->dp)
        rc = cli_error(p,
                       "%s: field 'nodes[].instances' holds %zu instances; kvsim validate "
                       "replays one engine, or one per data-parallel rank (meta.json's "
                       "data_parallel_size is %u)",
                       path, count, ri->dp);
    json_t *first = NULL;
    json_array_foreach(nodes, i, node)
    {
        json_array_foreach(json_object_get(node, "instances"), k, in)
        {
            if (!first)
                first = in;
            else if (!rc && !json_equal(in, first))
                rc = cli_error(p,
                               "%s: field 'nodes[%zu].instances[%zu]' differs from the first "
                               "instance; kvsim's data-parallel ranks are alike",
                               path, i, k);
        }
    }
    json_t *hw = json_object_get(inst, "hardware");
    json_t *mem = json_object_get(inst, "npu_mem");
    uint32_t tp = 1;
    if (!rc && (!json_is_string(hw) || !*json_string_value(hw)))
        rc = cli_error(p, "%s: field 'instances[0].hardware' must be a non-empty string", path);
    if (!rc && !json_is_object(mem))
        rc = cli_error(p, "%s: field 'instances[0].npu_mem' must be an object", path);
    /* the ranges of --gpu-memory-gib (0 there: not given) and --gpu-memory-utilization */
    if (!rc) {
        snprintf(ri->hardware, sizeof ri->hardware, "%s", json_string_value(hw));
        rc = get_num(p, path, mem, "mem_size", "instances[0].npu_mem.mem_size", 0, true, 1e6,
                     " GiB", &ri->mem_gib);
    }
    if (!rc)
        rc = get_num(p, path, mem, "mem_util", "instances[0].npu_mem.mem_util", 0, true, 1,
                     " (vLLM's gpu_memory_utilization)", &ri->mem_util);
    if (!rc)
        rc = get_uint(p, path, inst, "tp_size", "instances[0].tp_size", 1, 64, &tp);
    if (!rc && tp != ri->tp)
        rc = cli_error(p,
                       "%s: field 'instances[0].tp_size' is %u but meta.json's "
                       "tensor_parallel_size is %u",
                       path, tp, ri->tp);
    json_decref(c);
    return rc;
}

/* ---- requests ------------------------------------------------------------------------------ */

void fid_side_free(struct fid_side *s)
{
    free(s->r);
    memset(s, 0, sizeof *s);
}

static int field_num(const struct cli_parser *p, const char *path, size_t line, json_t *o,
                     const char *name, double *out)
{
    json_t *v = json_object_get(o, name);
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return cli_error(p, "%s:%zu: field '%s' must be a number", path, line, name);
    *out = json_number_value(v);
    return 0;
}

/* A request's start (queued or arrival), first and last token times (ms) and output tokens, from
 * a line of the run (real) or of the replay's records. Returns 0 or -EINVAL (reported). */
static int record_times(const struct cli_parser *p, const char *path, size_t line, json_t *o,
                        bool real, double t[4])
{
    static const char *const real_keys[4] = {"queued_ts", "first_token_ts", "last_token_ts",
                                             "output_toks"};
    static const char *const sim_keys[4] = {"arrival_ms", "first_token_ms", "last_token_ms",
                                            "output_tokens"};
    if (!real) {
        json_t *st = json_object_get(o, "status");
        if (!json_is_string(st) || strcmp(json_string_value(st), "completed"))
            return cli_error(p, "%s:%zu: the simulated request did not complete", path, line);
    }
    for (int k = 0; k < 4; k++) {
        int rc = field_num(p, path, line, o, real ? real_keys[k] : sim_keys[k], &t[k]);
        if (rc)
            return rc;
        if (real && k < 3)
            t[k] *= 1e3; /* s -> ms */
    }
    if (!(t[1] >= t[0] && t[2] >= t[1] && t[3] >= 1))
        return cli_error(p, "%s:%zu: times out of order or no output", path, line);
    return 0;
}

/* Reads the requests of a run (real) or of the replay's records into s, in file order. */
static int read_jsonl(const struct cli_parser *p, const char *path, struct fid_side *s, bool real)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_error(p, "%s: cannot read: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0, line = 0, n;
    int rc = 0;
    s->n = 0;
    for (;;) {
        errno = 0;
        enum kvsim_read got = kvsim_read_line(f, &buf, &cap, KVSIM_INPUT_MAX_LINE_BYTES, &n);
        if (got == KVSIM_READ_END)
            break;
        line++;
        if (got == KVSIM_READ_TOO_LONG)
            rc = cli_error(p, "%s:%zu: line longer than %zu MiB", path, line,
                           KVSIM_INPUT_MAX_LINE_BYTES >> 20);
        else if (got == KVSIM_READ_ERROR)
            rc = cli_error(p, "%s:%zu: read error: %s", path, line, strerror(errno ? errno : EIO));
        else if (got == KVSIM_READ_NOMEM)
            rc = cli_error(p, "%s:%zu: out of memory", path, line);
        if (rc)
            break;
        json_error_t e;
        json_t *o = json_loadb(buf, n, 0, &e);
        if (!o) {
            rc = cli_error(p, "%s:%zu: %s", path, line, e.text);
            break;
        }
        double t[4]; /* start, first, last (ms), output tokens */
        rc = record_times(p, path, line, o, real, t);
        json_decref(o);
        if (!rc && s->n == s->cap) {
            size_t c = s->cap ? s->cap * 2 : 512;
            struct fid_req *q = realloc(s->r, c * sizeof *q);
            if (!q)
                rc = cli_error(p, "%s: out of memory", path);
            else
                s->r = q, s->cap = c;
        }
        if (rc)
            break;
        s->r[s->n++] =
            (struct fid_req){.start = t[0], .first = t[1], .last = t[2], .out = t[3], .line = line};
    }
    free(buf);
    fclose(f);
    if (!rc && !s->n)
        rc = cli_error(p, "%s: no requests", path);
    return rc;
}

/* By arrival, ties in file order (a stable order, as the trace loader's). */
static int cmp_start(const void *a, const void *b)
{
    const struct fid_req *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

/* ---- the rows ------------------------------------------------------------------------------- */

const char *const fid_row_names[FID_NUM_ROWS] = {
    "TTFT mean ms", "TTFT p50 ms", "TTFT p90 ms", "TTFT p95 ms",     "TTFT p99 ms", "TPOT mean ms",
    "TPOT p50 ms",  "TPOT p90 ms", "TPOT p95 ms", "TPOT p99 ms",     "E2E mean ms", "E2E p50 ms",
    "E2E p90 ms",   "E2E p95 ms",  "E2E p99 ms",  "output tokens/s", "requests/s",
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile q of sorted v[0..n), linear between closest ranks: numpy's default, which the runs'
 * own summaries use (kvsim_latency_of's nearest rank would differ from their vLLM column). */
static double percentile(const double *v, size_t n, double q)
{
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)pos;
    if (lo + 1 >= n)
        return v[n - 1];
    return v[lo] + (pos - (double)lo) * (v[lo + 1] - v[lo]);
}

static double mean(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    return n ? s / (double)n : 0;
}

int fid_rows(const struct fid_side *s, size_t lo, size_t hi, double out[FID_NUM_ROWS])
{
    size_t n = hi - lo, ntpot = 0;
    double *v[3];
    for (int k = 0; k < 3; k++)
        v[k] = malloc((n ? n : 1) * sizeof(double));
    if (!v[0] || !v[1] || !v[2]) {
        for (int k = 0; k < 3; k++)
            free(v[k]);
        return -ENOMEM;
    }
    double t0 = INFINITY, t1 = -INFINITY, tokens = 0;
    for (size_t i = lo; i < hi; i++) {
        const struct fid_req *r = &s->r[i];
        v[0][i - lo] = r->first - r->start;
        v[2][i - lo] = r->last - r->start;
        if (r->out > 1)
            v[1][ntpot++] = (r->last - r->first) / (r->out - 1);
        tokens += r->out;
        t0 = fmin(t0, r->start);
        t1 = fmax(t1, r->last);
    }
    size_t cnt[3] = {n, ntpot, n};
    static const double q[4] = {50, 90, 95, 99};
    for (int k = 0; k < 3; k++) {
        qsort(v[k], cnt[k], sizeof(double), cmp_double);
        out[k * 5] = mean(v[k], cnt[k]);
        for (int i = 0; i < 4; i++)
            out[k * 5 + 1 + i] = cnt[k] ? percentile(v[k], cnt[k], q[i]) : 0;
        free(v[k]);
    }
    double span_s = (t1 - t0) / 1e3;
    out[15] = span_s > 0 ? tokens / span_s : 0;
    out[16] = span_s > 0 ? (double)n / span_s : 0;
    return 0;
}

/* Why row `row` of the real requests [lo, hi) is 0: how many requests hold a zero of its kind
 * and the first line of one, into why ("" when none does: a value past the doubles). */
static void zero_cause(const struct fid_side *s, size_t lo, size_t hi, int row, char *why,
                       size_t len)
{
    size_t zeros = 0, of = 0, line = 0;
    for (size_t i = lo; i < hi; i++) {
        const struct fid_req *r = &s->r[i];
        bool zero;
        if (row < 5) {
            zero = !(r->first > r->start);
        } else if (row < 10) {
            if (!(r->out > 1))
                continue;
            zero = !(r->last > r->first);
        } else {
            zero = !(r->last > r->start);
        }
        of++;
        if (zero && (!zeros++ || r->line < line))
            line = r->line;
    }
    static const char *const what[3] = {"first_token_ts equals queued_ts",
                                        "last_token_ts equals first_token_ts",
                                        "last_token_ts equals queued_ts"};
    why[0] = 0;
    if (row >= 5 && row < 10 && !of)
        snprintf(why, len, " (no request has more than one output token: no TPOT recorded)");
    else if (row < 15 && zeros)
        snprintf(why, len, " (%s on %zu of %s%zu requests%s, the first on line %zu)", what[row / 5],
                 zeros, row < 5 || row >= 10 ? "" : "the ", of,
                 row < 5 || row >= 10 ? "" : " with more than one output token", line);
}

int fid_check_real(const struct cli_parser *p, const struct fid_run *run, size_t lo, size_t hi,
                   const char *over, bool fitted)
{
    double v[FID_NUM_ROWS];
    if (fid_rows(&run->real, lo, hi, v)) {
        cli_error(p, "out of memory");
        return -ENOMEM;
    }
    for (int i = 0; i < FID_NUM_ROWS; i++) {
        if (v[i] > 0 && isfinite(v[i]))
            continue;
        char why[192];
        zero_cause(&run->real, lo, hi, i, why, sizeof why);
        return cli_error(p, "%s: metric '%s'%s is %g%s: a broken recording, not %s", run->trace,
                         fid_row_names[i], over ? over : "", v[i], why,
                         fitted ? "fitted" : "compared");
    }
    return 0;
}

double fid_diff_pct(double real, double sim) { return real != 0 ? (sim / real - 1) * 100 : 0; }

double fid_print(FILE *f, const double *real, const double *sim)
{
    double worst = 0;
    if (f)
        fprintf(f, "%-18s %12s %12s %8s\n", "metric", "vLLM", "kvsim", "diff %");
    for (int i = 0; i < FID_NUM_ROWS; i++) {
        double d = fid_diff_pct(real[i], sim[i]);
        worst = fmax(worst, fabs(d));
        if (f)
            fprintf(f, "%-18s %12.1f %12.1f %+7.1f%%\n", fid_row_names[i], real[i], sim[i], d);
    }
    if (f)
        fprintf(f, "\nworst |diff|     %.1f %%\n", worst);
    return worst;
}

/* ---- the run ---------------------------------------------------------------------------- */

int fid_open(struct cli_parser *p, const char *dir, const struct fid_opts *o, struct cli_timing *t,
             struct fid_run *run)
{
    memset(run, 0, sizeof *run);
    snprintf(run->dir, sizeof run->dir, "%s", dir);
    snprintf(run->trace, sizeof run->trace, "%s/requests.jsonl", dir);
    struct run_info ri = {.tp = 1, .block_size = 16, .prefix_caching = true};
    struct kvsim_replay_config *cfg = &run->cfg;
    kvsim_replay_config_default(cfg);
    ri.max_num_seqs = cfg->sched.max_num_seqs;
    ri.max_num_batched_tokens = cfg->sched.max_num_batched_tokens;
    if (read_meta(p, dir, &ri) || read_cluster(p, dir, &ri))
        return -EINVAL;
    t->o.model = NULL;
    t->o.tp = ri.tp;
    t->o.enable_expert_parallel = ri.ep;
    t->o.data_parallel_size = ri.dp; /* a MoE profile prices the DP ranks' exchange; capacity */
    if (!t->o.hardware)
        t->o.hardware = ri.hardware;
    t->o.tp_link_gbps = ri.link_gbps; /* each in its range (read_cluster), none defaulted */
    t->o.tp_link_latency_us = ri.link_latency_ns / 1e3;
    t->o.gpu_memory_gib = ri.mem_gib;
    t->o.gpu_memory_utilization = ri.mem_util;
    char err[768];
    /* --config alone: its polynomial; with --profiles, the profile and the config's speedup */
    if (o->config_path && kvsim_step_model_load(o->config_path, &cfg->model, err, sizeof err))
        return cli_error(p, "--config %s", err);
    if (!o->config_path && !t->o.profiles && !o->polynomial_default)
        return cli_error(p, "needs --profiles ROOT (or --config FILE.json)");
    if (t->o.profiles) {
        snprintf(run->model, sizeof run->model, "%s", ri.model);
        t->o.model = run->model;
    } else {
        t->o.hardware = NULL, t->o.gpu_memory_gib = 0;
    }
    cfg->sched.block_size = ri.block_size;
    cfg->sched.max_num_seqs = ri.max_num_seqs;
    cfg->sched.max_num_batched_tokens = ri.max_num_batched_tokens;
    cfg->sched.enable_prefix_caching = ri.prefix_caching;
    cfg->sched.async_scheduling = ri.async_scheduling;
    snprintf(run->scheduling, sizeof run->scheduling, "%s", ri.scheduling);
    if (o->blocks || ri.num_gpu_blocks) {
        cfg->sched.num_blocks = o->blocks ? o->blocks : (uint32_t)ri.num_gpu_blocks;
        t->o.blocks_given = true;
    }
    /* The run's files set the model, expert parallelism and the GPU's memory, not options: a
     * refusal names the file and the key. */
    char model_from[1200], ep_from[1200], mem_from[1200];
    snprintf(model_from, sizeof model_from, "%s/meta.json: key 'model'", dir);
    snprintf(ep_from, sizeof ep_from, "%s/meta.json: key 'engine_kwargs.enable_expert_parallel'",
             dir);
    snprintf(mem_from, sizeof mem_from, "%s/config.json: key 'instances[0].npu_mem.mem_size'", dir);
    if (ri.ep && !t->o.model)
        return cli_error(p,
                         "%s: expert parallelism needs the model's experts: give --profiles ROOT "
                         "(ROOT/configs/model/%s.json)",
                         ep_from, ri.model);
    t->o.model_from = model_from;
    t->o.expert_parallel_from = ep_from;
    t->o.gpu_memory_from = mem_from;
    int arc = cli_timing_apply(p, t, &cfg->sched, &cfg->model, &cfg->kv_bytes_per_token);
    t->o.model_from = t->o.expert_parallel_from = t->o.gpu_memory_from = NULL;
    if (arc)
        return -EINVAL;
    if (kvsim_step_model_check(&cfg->model, cfg->sched.max_num_batched_tokens,
                               cfg->sched.max_num_seqs, err, sizeof err)) {
        /* A step model that takes the smallest batch but not the run's largest: the key of
         * meta.json that sized it (a profile's steps grow with the sequences, a polynomial's
         * with the tokens). */
        char sized[1200] = "", e1[768];
        bool profile = cfg->model.profile != NULL;
        if (!kvsim_step_model_check(&cfg->model, 1, 1, e1, sizeof e1) &&
            (profile ? ri.seqs_given : ri.batched_given))
            snprintf(sized, sizeof sized, "; %s/meta.json: key 'engine_kwargs.%s' is %u", dir,
                     profile ? "max_num_seqs" : "max_num_batched_tokens",
                     profile ? ri.max_num_seqs : ri.max_num_batched_tokens);
        return profile          ? cli_error(p, "--profiles %s%s", err, sized)
               : o->config_path ? cli_error(p, "--config %s: %s%s", o->config_path, err, sized)
                                : cli_error(p, "the default step model: %s%s", err, sized);
    }
    const struct kvsim_model_arch *arch = t->r.profile ? kvsim_profile_arch(t->r.profile) : NULL;
    if (ri.max_model_len)
        cfg->sched.max_model_len = ri.max_model_len;
    else if (arch && arch->max_position_embeddings) /* vLLM's default: the model's */
        cfg->sched.max_model_len = arch->max_position_embeddings;
    cfg->trace_path = run->trace;
    cfg->trace_opts.format = KVSIM_TRACE_VLLM_RUN;
    cfg->num_engines = 1;
    cfg->data_parallel_size = ri.dp; /* one deployment: its ranks behind vLLM's balancer */
    cfg->num_threads = 1;
    cfg->router = KVSIM_ROUTER_ROUND_ROBIN;
    cfg->quiet = true;
    if (o->requests_path) {
        snprintf(run->records, sizeof run->records, "%s", o->requests_path);
    } else {
        /* removed by fid_close, which the callers call whatever fid_open returned */
        const char *tmp = getenv("TMPDIR");
        if (!tmp || !*tmp)
            tmp = "/tmp";
        int n = snprintf(run->records, sizeof run->records, "%s/kvsim-fidelity-XXXXXX", tmp);
        if (n < 0 || (size_t)n >= sizeof run->records)
            return cli_error(p, "cannot create a temporary file: TMPDIR %s is too long", tmp);
        int fd = mkstemp(run->records);
        if (fd < 0)
            return cli_error(p, "cannot create a temporary file: %s", strerror(errno));
        close(fd);
        run->records_temporary = true;
    }
    cfg->outputs.requests_path = run->records;
    if (read_jsonl(p, run->trace, &run->real, true))
        return -EINVAL;
    /* the replay's records are in arrival order (ties in file order): so are these */
    qsort(run->real.r, run->real.n, sizeof *run->real.r, cmp_start);
    return fid_check_real(p, run, 0, run->real.n, NULL, false);
}

int fid_check_output(struct cli_parser *p, const char *dir, const struct fid_opts *o,
                     const struct cli_timing *t, const char *option, const char *path)
{
    if (!path)
        return 0;
    const struct kvsim_input_path inputs[] = {
        {"the recorded run", dir, true},
        {"--config", o->config_path, false},
        {"the profiles' root (--profiles)", t->o.profiles, true},
    };
    char err[1024];
    int rc =
        kvsim_output_check_inputs(path, inputs, sizeof inputs / sizeof inputs[0], err, sizeof err);
    if (rc == 0)
        rc = kvsim_output_check(path, err, sizeof err);
    if (rc)
        cli_error(p, "option %s: %s", option, err);
    return rc;
}

int fid_replay(struct cli_parser *p, struct fid_run *run, const struct kvsim_step_model *m,
               struct fid_side *sim, struct kvsim_report *rep)
{
    struct kvsim_replay_config cfg = run->cfg;
    cfg.model = *m;
    struct kvsim_report local;
    struct kvsim_report *r = rep ? rep : &local;
    char err[768];
    int rc = kvsim_replay_run(&cfg, r, err, sizeof err);
    if (rc) {
        cli_error(p, "%s", err);
        return rc;
    }
    if (!rep)
        kvsim_report_fini(&local);
    rc = read_jsonl(p, run->records, sim, false);
    if (!rc && sim->n != run->real.n)
        rc = cli_error(p, "the run has %zu requests, the replay %zu", run->real.n, sim->n);
    if (rc && rep)
        kvsim_report_fini(rep);
    return rc;
}

void fid_close(struct fid_run *run)
{
    if (run->records_temporary)
        unlink(run->records);
    fid_side_free(&run->real);
}
