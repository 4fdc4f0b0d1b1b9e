/*
 * validate_cmd.c - `kvsim validate RUN_DIR`: replays a recorded vLLM run (requests.jsonl,
 * meta.json, config.json; docs/fidelity/timing.md) with the run's own engine arguments on one
 * engine timed by a profile (or a --config polynomial), and prints the Diff% table of TTFT,
 * TPOT, E2E and throughput against the real run. Main thread only.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void validate_usage(FILE *out)
{
    fprintf(out, "usage: kvsim validate RUN_DIR [options]\n"
                 "Replays a recorded vLLM run with its own engine arguments and compares TTFT,\n"
                 "TPOT, E2E (mean, p50, p90, p95, p99), output tokens/s and requests/s.\n"
                 "RUN_DIR holds requests.jsonl, meta.json (engine_kwargs, optional\n"
                 "kv_cache.num_gpu_blocks) and config.json (the GPU, its memory, the TP link).\n"
                 "  --profiles ROOT            profiles (ROOT/HW/ORG/NAME/bf16/tpN/) and model\n"
                 "                             configs; required unless --config is given\n"
                 "  --hardware HW              profile hardware label (config.json's)\n"
                 "  --config FILE.json         time steps with this polynomial instead (kvsim\n"
                 "                             calibrate's output)\n"
                 "  --num-gpu-blocks N         KV blocks (meta.json's, else derived)\n"
                 "  --report OUT.json          write the rows as JSON\n"
                 "  --requests-out FILE.jsonl  the simulated per-request records\n"
                 "  --quiet                    no table\n");
}

enum { V_PROFILES = 1, V_HARDWARE, V_CONFIG, V_BLOCKS, V_REPORT, V_REQOUT, V_QUIET };

static const struct option validate_opts[] = {
    {"profiles", required_argument, NULL, V_PROFILES},
    {"hardware", required_argument, NULL, V_HARDWARE},
    {"config", required_argument, NULL, V_CONFIG},
    {"num-gpu-blocks", required_argument, NULL, V_BLOCKS},
    {"report", required_argument, NULL, V_REPORT},
    {"requests-out", required_argument, NULL, V_REQOUT},
    {"quiet", no_argument, NULL, V_QUIET},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* ---- reading the run ------------------------------------------------------------------------ */

struct run_info {
    char model[128], hardware[64];
    uint32_t tp;
    uint32_t max_num_seqs, max_num_batched_tokens, max_model_len, block_size;
    bool prefix_caching;
    uint64_t num_gpu_blocks; /* 0: derive */
    double mem_gib, mem_util, link_gbps, link_latency_ns;
};

static json_t *load_json(const struct cli_parser *p, const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    if (!j)
        cli_error(p, "%s:%d: %s", path, e.line, e.text);
    else if (!json_is_object(j)) {
        cli_error(p, "%s: expected a JSON object", path);
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* A positive integer field of o (absent: *out unchanged unless required). */
static int get_uint(const struct cli_parser *p, const char *path, json_t *o, const char *name,
                    bool required, uint32_t *out)
{
    json_t *v = json_object_get(o, name);
    if (!v || json_is_null(v))
        return required ? cli_error(p, "%s: field '%s' is missing", path, name) : 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX)
        return cli_error(p, "%s: field '%s' must be a positive integer", path, name);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static int get_num(const struct cli_parser *p, const char *path, json_t *o, const char *name,
                   double *out)
{
    json_t *v = json_object_get(o, name);
    if (!json_is_number(v) || !(json_number_value(v) >= 0) || !isfinite(json_number_value(v)))
        return cli_error(p, "%s: field '%s' must be a number >= 0", path, name);
    *out = json_number_value(v);
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
    if (!json_is_string(model) || !strchr(json_string_value(model), '/'))
        rc = cli_error(p, "%s: field 'model' must be a string ORG/NAME", path);
    else if (!json_is_object(kw))
        rc = cli_error(p, "%s: field 'engine_kwargs' must be an object", path);
    if (!rc) {
        snprintf(ri->model, sizeof ri->model, "%s", json_string_value(model));
        rc = get_uint(p, path, kw, "tensor_parallel_size", false, &ri->tp);
    }
    if (!rc)
        rc = get_uint(p, path, kw, "data_parallel_size", false, &dp);
    if (!rc && dp != 1)
        rc = cli_error(p,
                       "%s: field 'engine_kwargs.data_parallel_size' is %u: data parallelism "
                       "is not modelled (kvsim validates one engine)",
                       path, dp);
    if (!rc && json_is_true(json_object_get(kw, "enable_expert_parallel")))
        rc = cli_error(p,
                       "%s: field 'engine_kwargs.enable_expert_parallel' is true: expert "
                       "parallelism is not modelled",
                       path);
    if (!rc) {
        json_t *kvd = json_object_get(kw, "kv_cache_dtype");
        if (kvd && !(json_is_string(kvd) && !strcmp(json_string_value(kvd), "auto")))
            rc = cli_error(p,
                           "%s: field 'engine_kwargs.kv_cache_dtype' must be \"auto\" (a "
                           "quantized KV cache is not modelled)",
                           path);
    }
    if (!rc)
        rc = get_uint(p, path, kw, "max_num_seqs", false, &ri->max_num_seqs);
    if (!rc)
        rc = get_uint(p, path, kw, "max_num_batched_tokens", false, &ri->max_num_batched_tokens);
    if (!rc)
        rc = get_uint(p, path, kw, "max_model_len", false, &ri->max_model_len);
    if (!rc)
        rc = get_uint(p, path, kw, "block_size", false, &ri->block_size);
    json_t *pc = json_object_get(kw, "enable_prefix_caching");
    if (!rc && pc && !json_is_null(pc)) {
        if (!json_is_boolean(pc))
            rc = cli_error(p, "%s: field 'engine_kwargs.enable_prefix_caching' must be a boolean",
                           path);
        ri->prefix_caching = json_is_true(pc);
    }
    json_t *kv = json_object_get(m, "kv_cache");
    if (!rc && kv) {
        uint32_t b = 0;
        rc = get_uint(p, path, kv, "num_gpu_blocks", false, &b);
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
    int rc = get_num(p, path, c, "link_bw", &ri->link_gbps);
    if (!rc)
        rc = get_num(p, path, c, "link_latency", &ri->link_latency_ns);
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
    if (!rc && count != 1)
        rc = cli_error(p,
                       "%s: field 'nodes[].instances' holds %zu instances; kvsim validate "
                       "replays one",
                       path, count);
    json_t *hw = json_object_get(inst, "hardware");
    json_t *mem = json_object_get(inst, "npu_mem");
    uint32_t tp = 1;
    if (!rc && !json_is_string(hw))
        rc = cli_error(p, "%s: field 'instances[0].hardware' must be a string", path);
    if (!rc) {
        snprintf(ri->hardware, sizeof ri->hardware, "%s", json_string_value(hw));
        rc = get_num(p, path, mem, "mem_size", &ri->mem_gib);
    }
    if (!rc)
        rc = get_num(p, path, mem, "mem_util", &ri->mem_util);
    if (!rc)
        rc = get_uint(p, path, inst, "tp_size", false, &tp);
    if (!rc && tp != ri->tp)
        rc = cli_error(p,
                       "%s: field 'instances[0].tp_size' is %u but meta.json's "
                       "tensor_parallel_size is %u",
                       path, tp, ri->tp);
    json_decref(c);
    return rc;
}

/* ---- the metrics ---------------------------------------------------------------------------- */

/* Per-request latencies (ms) and the run's totals. */
struct side {
    double *ttft, *tpot, *e2e;
    size_t n, ntpot;
    double out_tokens, span_s;
};

static void side_free(struct side *s)
{
    free(s->ttft);
    free(s->tpot);
    free(s->e2e);
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

/* Room for n + 1 requests in s. Returns 0 or -ENOMEM. */
static int side_reserve(struct side *s, size_t *cap)
{
    if (s->n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 512;
    double **arr[3] = {&s->ttft, &s->tpot, &s->e2e};
    for (int k = 0; k < 3; k++) {
        double *q = realloc(*arr[k], c * sizeof(double));
        if (!q)
            return -ENOMEM;
        *arr[k] = q;
    }
    *cap = c;
    return 0;
}

/* Reads the requests of a run (real) or of the replay's records into s. */
static int read_jsonl(const struct cli_parser *p, const char *path, struct side *s, bool real)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_error(p, "%s: cannot read: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0, line = 0, room = 0;
    double t0 = INFINITY, t1 = -INFINITY;
    int rc = 0;
    while (!rc && getline(&buf, &cap, f) > 0) {
        line++;
        json_error_t e;
        json_t *o = json_loads(buf, 0, &e);
        if (!o) {
            rc = cli_error(p, "%s:%zu: %s", path, line, e.text);
            break;
        }
        double t[4]; /* start, first, last (ms), output tokens */
        rc = record_times(p, path, line, o, real, t);
        json_decref(o);
        if (!rc && side_reserve(s, &room))
            rc = cli_error(p, "%s: out of memory", path);
        if (rc)
            break;
        s->ttft[s->n] = t[1] - t[0];
        s->e2e[s->n] = t[2] - t[0];
        if (t[3] > 1)
            s->tpot[s->ntpot++] = (t[2] - t[1]) / (t[3] - 1);
        s->out_tokens += t[3];
        t0 = fmin(t0, t[0]);
        t1 = fmax(t1, t[2]);
        s->n++;
    }
    free(buf);
    fclose(f);
    s->span_s = (t1 - t0) / 1e3;
    if (!rc && (!s->n || !(s->span_s > 0)))
        rc = cli_error(p, "%s: no requests", path);
    return rc;
}

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

#define NUM_ROWS 17

struct row {
    char metric[32];
    double real, sim;
};

static void rows_of(struct side *s, double out[NUM_ROWS])
{
    double *v[3] = {s->ttft, s->tpot, s->e2e};
    size_t n[3] = {s->n, s->ntpot, s->n};
    static const double q[4] = {50, 90, 95, 99};
    for (int k = 0; k < 3; k++) {
        qsort(v[k], n[k], sizeof(double), cmp_double);
        out[k * 5] = mean(v[k], n[k]);
        for (int i = 0; i < 4; i++)
            out[k * 5 + 1 + i] = n[k] ? percentile(v[k], n[k], q[i]) : 0;
    }
    out[15] = s->out_tokens / s->span_s;
    out[16] = (double)s->n / s->span_s;
}

static const char *const ROW_NAMES[NUM_ROWS] = {
    "TTFT mean ms", "TTFT p50 ms", "TTFT p90 ms", "TTFT p95 ms",     "TTFT p99 ms", "TPOT mean ms",
    "TPOT p50 ms",  "TPOT p90 ms", "TPOT p95 ms", "TPOT p99 ms",     "E2E mean ms", "E2E p50 ms",
    "E2E p90 ms",   "E2E p95 ms",  "E2E p99 ms",  "output tokens/s", "requests/s",
};

static double diff_pct(double real, double sim) { return real != 0 ? (sim / real - 1) * 100 : 0; }

static int write_report(const struct cli_parser *p, const char *path, const char *dir,
                        const struct kvsim_report *rep, const double *real, const double *sim,
                        double worst)
{
    json_t *root = json_object(), *rows = json_array();
    json_object_set_new(root, "run", json_string(dir));
    json_t *tm = json_object();
    json_object_set_new(tm, "step_model", json_string(rep->timing.step_model));
    json_object_set_new(tm, "profile", json_string(rep->timing.profile));
    json_object_set_new(tm, "model", json_string(rep->timing.model));
    json_object_set_new(tm, "hardware", json_string(rep->timing.hardware));
    json_object_set_new(tm, "tp", json_integer(rep->timing.tp));
    json_object_set_new(tm, "num_gpu_blocks", json_integer((json_int_t)rep->timing.num_gpu_blocks));
    json_object_set_new(tm, "steps", json_integer((json_int_t)rep->timing.steps));
    json_object_set_new(tm, "steps_outside_grid",
                        json_integer((json_int_t)rep->timing.steps_outside));
    json_object_set_new(root, "timing", tm);
    for (int i = 0; i < NUM_ROWS; i++) {
        json_t *r = json_object();
        json_object_set_new(r, "metric", json_string(ROW_NAMES[i]));
        json_object_set_new(r, "real", json_real(real[i]));
        json_object_set_new(r, "sim", json_real(sim[i]));
        json_object_set_new(r, "diff_pct", json_real(diff_pct(real[i], sim[i])));
        json_array_append_new(rows, r);
    }
    json_object_set_new(root, "rows", rows);
    json_object_set_new(root, "worst_abs_diff_pct", json_real(worst));
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(root);
    return rc ? cli_error(p, "--report %s: cannot write", path) : 0;
}

/* ---- the command ---------------------------------------------------------------------------- */

struct validate_args {
    const char *config_path, *report_path, *requests_path;
    bool quiet;
    struct cli_timing timing;
    uint32_t blocks;
};

static int validate_run(struct cli_parser *p, const char *dir, struct validate_args *a)
{
    struct run_info ri = {.tp = 1, .block_size = 16, .prefix_caching = true};
    struct kvsim_replay_config cfg;
    kvsim_replay_config_default(&cfg);
    ri.max_num_seqs = cfg.sched.max_num_seqs;
    ri.max_num_batched_tokens = cfg.sched.max_num_batched_tokens;
    if (read_meta(p, dir, &ri) || read_cluster(p, dir, &ri))
        return CLI_EXIT_USAGE;
    struct cli_timing *t = &a->timing;
    t->model = ri.model;
    t->tp = ri.tp;
    if (!t->hardware)
        t->hardware = ri.hardware;
    t->tp_link_gbps = ri.link_gbps > 0 ? ri.link_gbps : t->tp_link_gbps;
    t->tp_link_latency_us = ri.link_latency_ns / 1e3;
    t->gpu_memory_gib = ri.mem_gib;
    t->gpu_memory_utilization = ri.mem_util > 0 ? ri.mem_util : 0.9;
    char err[768];
    if (a->config_path) { /* the polynomial: capacity still from the model when profiles exist */
        if (kvsim_step_model_load(a->config_path, &cfg.model, err, sizeof err)) {
            cli_error(p, "--config %s", err);
            return CLI_EXIT_USAGE;
        }
        t->hardware = NULL;
    } else if (!t->profiles) {
        cli_error(p, "needs --profiles ROOT (or --config FILE.json)");
        return CLI_EXIT_USAGE;
    }
    if (!t->profiles)
        t->model = NULL, t->gpu_memory_gib = 0;
    cfg.sched.block_size = ri.block_size;
    cfg.sched.max_num_seqs = ri.max_num_seqs;
    cfg.sched.max_num_batched_tokens = ri.max_num_batched_tokens;
    cfg.sched.enable_prefix_caching = ri.prefix_caching;
    if (a->blocks || ri.num_gpu_blocks) {
        cfg.sched.num_blocks = a->blocks ? a->blocks : (uint32_t)ri.num_gpu_blocks;
        t->blocks_given = true;
    }
    if (cli_timing_apply(p, t, &cfg.sched, &cfg.model, &cfg.kv_bytes_per_token))
        return CLI_EXIT_USAGE;
    const struct kvsim_model_arch *arch = t->profile ? kvsim_profile_arch(t->profile) : NULL;
    cfg.sched.max_model_len = ri.max_model_len ? ri.max_model_len
                              : arch && arch->max_position_embeddings
                                  ? arch->max_position_embeddings
                                  : cfg.sched.max_model_len;
    char trace[1100], reqs[64] = "/tmp/kvsim-validate-XXXXXX";
    snprintf(trace, sizeof trace, "%s/requests.jsonl", dir);
    int fd = -1;
    if (!a->requests_path && (fd = mkstemp(reqs)) < 0) {
        cli_error(p, "cannot create a temporary file: %s", strerror(errno));
        return CLI_EXIT_FAILED;
    }
    if (fd >= 0)
        close(fd);
    cfg.trace_path = trace;
    cfg.trace_opts.format = KVSIM_TRACE_VLLM_RUN;
    cfg.num_engines = 1;
    cfg.num_threads = 1;
    cfg.router = KVSIM_ROUTER_ROUND_ROBIN;
    cfg.quiet = true;
    cfg.requests_path = a->requests_path ? a->requests_path : reqs;
    struct kvsim_report rep;
    int rc = kvsim_replay_run(&cfg, &rep, err, sizeof err);
    int status = CLI_EXIT_OK;
    if (rc) {
        cli_error(p, "%s", err);
        status = rc == -EINVAL || rc == -ENOENT ? CLI_EXIT_USAGE : CLI_EXIT_FAILED;
        goto out;
    }
    struct side real = {0}, sim = {0};
    double rv[NUM_ROWS], sv[NUM_ROWS];
    if (read_jsonl(p, trace, &real, true) || read_jsonl(p, cfg.requests_path, &sim, false)) {
        status = CLI_EXIT_FAILED;
    } else if (real.n != sim.n) {
        cli_error(p, "the run has %zu requests, the replay %zu", real.n, sim.n);
        status = CLI_EXIT_FAILED;
    } else {
        rows_of(&real, rv);
        rows_of(&sim, sv);
        double worst = 0;
        for (int i = 0; i < NUM_ROWS; i++)
            worst = fmax(worst, fabs(diff_pct(rv[i], sv[i])));
        if (!a->quiet) {
            printf("run          %s (%zu requests)\n", dir, real.n);
            if (t->profile)
                printf("step model   profile %s\n", kvsim_profile_dir(t->profile));
            else
                printf("step model   polynomial (%s)\n", a->config_path);
            printf("KV blocks    %u%s\n", cfg.sched.num_blocks,
                   t->blocks_given ? "" : " (derived from the model and the GPU)");
            printf("steps        %llu, %llu off the profile's grid\n\n",
                   (unsigned long long)rep.timing.steps,
                   (unsigned long long)rep.timing.steps_outside);
            printf("%-18s %12s %12s %8s\n", "metric", "vLLM", "kvsim", "diff %");
            for (int i = 0; i < NUM_ROWS; i++)
                printf("%-18s %12.1f %12.1f %+7.1f%%\n", ROW_NAMES[i], rv[i], sv[i],
                       diff_pct(rv[i], sv[i]));
            printf("\nworst |diff|     %.1f %%\n", worst);
        }
        if (a->report_path && write_report(p, a->report_path, dir, &rep, rv, sv, worst))
            status = CLI_EXIT_FAILED;
    }
    side_free(&real);
    side_free(&sim);
    kvsim_report_fini(&rep);
out:
    if (!a->requests_path)
        unlink(reqs);
    return status;
}

int cli_validate_main(int argc, char **argv)
{
    struct cli_parser p;
    struct validate_args a = {0};
    cli_timing_default(&a.timing);
    cli_begin(&p, "kvsim validate", argc, argv, validate_opts, "h");
    int c;
    while ((c = cli_next(&p)) > 0) {
        int rc = 0;
        switch (c) {
        case 'h': validate_usage(stdout); return CLI_EXIT_OK;
        case V_PROFILES: a.timing.profiles = p.arg; break;
        case V_HARDWARE: a.timing.hardware = p.arg; break;
        case V_CONFIG: a.config_path = p.arg; break;
        case V_BLOCKS: rc = cli_u32(&p, 2, INT32_MAX - 2, &a.blocks); break;
        case V_REPORT: a.report_path = p.arg; break;
        case V_REQOUT: a.requests_path = p.arg; break;
        case V_QUIET: a.quiet = true; break;
        }
        if (rc)
            return CLI_EXIT_USAGE;
    }
    if (c < 0)
        return CLI_EXIT_USAGE;
    if (cli_optind() + 1 != argc) {
        cli_error(&p, "expected one RUN_DIR");
        validate_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    int status = validate_run(&p, argv[cli_optind()], &a);
    cli_timing_fini(&a.timing);
    return status;
}
