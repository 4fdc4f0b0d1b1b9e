/*
 * minimize.c - `kvsim minimize TRACE.json [-o OUT.json]`: delta debugging (ddmin) of a failing
 * scenario over its requests and its steps, keeping a candidate only while it fails with the
 * same kind (the same rule, "dead_end", "expect:<key>", ...; see runtime/conform.h).
 *
 * Candidates run through the scenario runner in lenient mode: a removed `add` or `schedule`
 * would otherwise make most later ops invalid (an output for a step that is gone, sampled
 * tokens for a request that was not scheduled) and ddmin would learn nothing from them. The
 * runner reports the steps as they actually ran (references to nothing dropped, and nothing
 * after the failing step), and that strict-valid form replaces the current scenario, so every
 * intermediate and the final result replay identically under `kvsim conform`.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/conform.h"
#include "runtime/runtime.h"
#include "runtime/soak.h"

/* ---- ddmin ---------------------------------------------------------------------------------- */

int64_t kvsim_ddmin(size_t *units, size_t *n, kvsim_ddmin_test_fn test, void *ctx,
                    uint64_t max_tests)
{
    size_t len = *n;
    size_t *cand = malloc((len ? len : 1) * sizeof *cand);
    if (!cand)
        return -ENOMEM;
    uint64_t tests = 0;
    size_t gran = 2;
    while (len >= 2 && tests < max_tests) {
        if (gran > len)
            gran = len;
        bool reduced = false;
        /* Each chunk alone (with two chunks these are the complements, tried below). */
        for (size_t i = 0; gran > 2 && i < gran && !reduced && tests < max_tests; i++) {
            size_t lo = i * len / gran, hi = (i + 1) * len / gran;
            tests++;
            if (test(ctx, units + lo, hi - lo)) {
                memmove(units, units + lo, (hi - lo) * sizeof *units);
                len = hi - lo;
                gran = 2;
                reduced = true;
            }
        }
        /* Everything but one chunk. */
        for (size_t i = 0; i < gran && !reduced && tests < max_tests; i++) {
            size_t lo = i * len / gran, hi = (i + 1) * len / gran, m = 0;
            for (size_t k = 0; k < len; k++)
                if (k < lo || k >= hi)
                    cand[m++] = units[k];
            tests++;
            if (test(ctx, cand, m)) {
                memcpy(units, cand, m * sizeof *units);
                len = m;
                gran = gran > 2 ? gran - 1 : 2;
                reduced = true;
            }
        }
        if (!reduced) {
            if (gran >= len)
                break; /* every single unit was necessary: 1-minimal */
            gran = gran * 2 < len ? gran * 2 : len;
        }
    }
    if (len == 1 && tests < max_tests) {
        tests++;
        if (test(ctx, units, 0))
            len = 0;
    }
    free(cand);
    *n = len;
    return (int64_t)tests;
}

/* ---- removing requests ---------------------------------------------------------------------- */

static bool in_set(const json_t *set, const char *id)
{
    return id && json_object_get(set, id) != NULL;
}

static void filter_list(json_t *obj, const char *key, const json_t *drop, bool del_if_empty)
{
    json_t *a = json_object_get(obj, key);
    if (!json_is_array(a))
        return;
    for (size_t i = json_array_size(a); i-- > 0;)
        if (in_set(drop, json_string_value(json_array_get(a, i))))
            json_array_remove(a, i);
    if (del_if_empty && json_array_size(a) == 0)
        json_object_del(obj, key);
}

static void filter_map(json_t *obj, const char *key, const json_t *drop)
{
    json_t *m = json_object_get(obj, key);
    if (!json_is_object(m))
        return;
    const char *id;
    json_t *v;
    json_object_foreach((json_t *)drop, id, v)
    {
        (void)v;
        json_object_del(m, id);
    }
}

json_t *kvsim_scenario_drop_requests(const json_t *steps, const json_t *drop)
{
    static const char *const expect_maps[] = {
        "scheduled",           "finish_reason",     "status",
        "num_computed_tokens", "num_cached_tokens", "output_tokens"};
    static const char *const expect_lists[] = {"new",      "resumed", "preempted",
                                               "finished", "running", "waiting"};
    json_t *out = json_array();
    if (!out)
        return NULL;
    for (size_t k = 0; k < json_array_size(steps); k++) {
        json_t *st = json_deep_copy(json_array_get(steps, k));
        if (!st) {
            json_decref(out);
            return NULL;
        }
        /* add, abort {id}, kv_*: the op is about that request only */
        if (in_set(drop, json_string_value(json_object_get(st, "id")))) {
            json_decref(st);
            continue;
        }
        if (json_object_get(st, "ids")) {
            filter_list(st, "ids", drop, false);
            if (json_array_size(json_object_get(st, "ids")) == 0) {
                json_decref(st);
                continue;
            }
        }
        filter_map(st, "sampled", drop);
        filter_list(st, "finished_recving", drop, true);
        filter_list(st, "finished_sending", drop, true);
        json_t *ex = json_object_get(st, "expect");
        for (size_t i = 0; ex && i < sizeof expect_maps / sizeof expect_maps[0]; i++)
            filter_map(ex, expect_maps[i], drop);
        for (size_t i = 0; ex && i < sizeof expect_lists / sizeof expect_lists[0]; i++)
            filter_list(ex, expect_lists[i], drop, false);
        if (in_set(drop, json_string_value(json_object_get(ex, "blocked_on_offload"))))
            json_object_del(ex, "blocked_on_offload");
        json_array_append_new(out, st);
    }
    return out;
}

/* ---- the minimizer -------------------------------------------------------------------------- */

struct mini {
    json_t *doc;  /* the input (name, source, config) */
    json_t *base; /* current steps: strict-valid, failing with `kind` */
    json_t *ids;  /* request ids of base (requests pass) */
    char kind[96];
    json_t *best; /* effective steps of the last accepted candidate */
    uint64_t runs;
};

static json_t *with_steps(const json_t *doc, json_t *steps)
{
    json_t *d = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)doc, k, v)
    {
        json_object_set(d, k, strcmp(k, "steps") ? v : steps);
    }
    return d;
}

/* Runs candidate steps leniently; keeps their effective form when they fail the same way. */
static bool same_failure(struct mini *m, json_t *steps)
{
    json_t *doc = with_steps(m->doc, steps);
    json_t *eff = json_array();
    struct kvsim_conform_options opt = {.lenient = true, .effective = eff};
    struct kvsim_conform_result res;
    m->runs++;
    int rc = doc && eff ? kvsim_conform_run_json(doc, &opt, &res, NULL) : 0;
    bool same = rc != 0 && res.verdict == KVSIM_CONFORM_FAIL && !strcmp(res.kind, m->kind);
    if (same) {
        json_decref(m->best);
        m->best = eff;
    } else {
        json_decref(eff);
    }
    json_decref(doc);
    return same;
}

static bool test_steps(void *ctx, const size_t *units, size_t n)
{
    struct mini *m = ctx;
    json_t *steps = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(steps, json_array_get(m->base, units[i]));
    bool same = same_failure(m, steps);
    json_decref(steps);
    return same;
}

static bool test_requests(void *ctx, const size_t *units, size_t n)
{
    struct mini *m = ctx;
    json_t *drop = json_object();
    for (size_t i = 0, u = 0; i < json_array_size(m->ids); i++) {
        if (u < n && units[u] == i)
            u++;
        else
            json_object_set_new(drop, json_string_value(json_array_get(m->ids, i)), json_true());
    }
    json_t *steps = kvsim_scenario_drop_requests(m->base, drop);
    bool same = steps && same_failure(m, steps);
    json_decref(steps);
    json_decref(drop);
    return same;
}

static json_t *request_ids(const json_t *steps)
{
    json_t *ids = json_array();
    for (size_t k = 0; k < json_array_size(steps); k++) {
        json_t *st = json_array_get(steps, k);
        if (!strcmp(json_string_value(json_object_get(st, "op")), "add"))
            json_array_append(ids, json_object_get(st, "id"));
    }
    return ids;
}

/* One ddmin pass over n units; adopts the result. Returns 0 or -ENOMEM. */
static int pass(struct mini *m, size_t n, kvsim_ddmin_test_fn test, uint64_t max_runs)
{
    if (n == 0 || m->runs >= max_runs)
        return 0;
    size_t *units = malloc(n * sizeof *units);
    if (!units)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        units[i] = i;
    json_decref(m->best);
    m->best = NULL;
    int64_t t = kvsim_ddmin(units, &n, test, m, max_runs - m->runs);
    free(units);
    if (t < 0)
        return (int)t;
    if (m->best) { /* the last accepted candidate is ddmin's result */
        json_decref(m->base);
        m->base = m->best;
        m->best = NULL;
    }
    return 0;
}

static void minimize_usage(FILE *f)
{
    fprintf(f, "usage: kvsim minimize TRACE.json [-o OUT.json] [--max-runs N]\n"
               "\n"
               "Shrinks a failing scenario (a soak failure trace, or any scenario that fails)\n"
               "by delta debugging over its requests and its steps, keeping only candidates that\n"
               "fail with the same kind (same invariant rule, dead_end, futile_preemption,\n"
               "expect:<key>, scheduler_error, offload_error). Writes a scenario that\n"
               "`kvsim conform` fails the same way.\n"
               "\n"
               "  -o, --output FILE  where to write it (default: TRACE.min.json beside the\n"
               "                     input; '-' = standard output)\n"
               "  --max-runs N       stop after N candidate runs (default 50000)\n"
               "  -h, --help         print this help\n"
               "\n"
               "Exit status: 0 written, 1 the result could not be verified or written,\n"
               "2 usage error or an input that does not fail (or is not a valid scenario).\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kvsim_minimize_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"max-runs", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *out = NULL;
    uint64_t max_runs = 50000;
    int ch;
    optind = 0; /* 0, not 1: glibc re-reads the ordering mode (main parsed with "+") */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'm': {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (*optarg < '0' || *optarg > '9' || errno || *end || v == 0) {
                fprintf(stderr,
                        "kvsim minimize: option --max-runs: '%s' is not a positive integer\n",
                        optarg);
                return 2;
            }
            max_runs = v;
            break;
        }
        case 'h': minimize_usage(stdout); return 0;
        case ':':
            fprintf(stderr, "kvsim minimize: option %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            if (optopt) /* a short option, maybe inside a cluster */
                fprintf(stderr, "kvsim minimize: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "kvsim minimize: unknown option '%s'\n", argv[optind - 1]);
            minimize_usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "kvsim minimize: no scenario file given\n");
        minimize_usage(stderr);
        return 2;
    }
    if (optind + 1 < argc) {
        fprintf(stderr, "kvsim minimize: unexpected argument '%s' (one file at a time)\n",
                argv[optind + 1]);
        return 2;
    }
    const char *path = argv[optind];
    char outbuf[4096];
    if (!out) {
        size_t n = strlen(path);
        size_t stem = n >= 5 && !strcmp(path + n - 5, ".json") ? n - 5 : n;
        if (snprintf(outbuf, sizeof outbuf, "%.*s.min.json", (int)stem, path) >=
            (int)sizeof outbuf) {
            fprintf(stderr, "kvsim minimize: %s: file name too long\n", path);
            return 2;
        }
        out = outbuf;
    }
    FILE *msg = strcmp(out, "-") ? stdout : stderr; /* keep stdout for the scenario */

    json_error_t jerr;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc) {
        if (jerr.line > 0)
            fprintf(stderr, "kvsim minimize: %s: line %d, column %d: %s\n", path, jerr.line,
                    jerr.column, jerr.text);
        else /* jansson's text names the file and the system error */
            fprintf(stderr, "kvsim minimize: %s\n", jerr.text);
        return 2;
    }
    struct kvsim_conform_result res0;
    int status = 2;
    struct mini m = {.doc = doc};
    if (kvsim_conform_run_json(doc, NULL, &res0, NULL) == 0) {
        fprintf(stderr, "kvsim minimize: %s passes: nothing to minimize\n", path);
        goto out;
    }
    if (res0.verdict == KVSIM_CONFORM_INVALID) {
        fprintf(stderr, "kvsim minimize: %s: %s\n", path, res0.message);
        goto out;
    }
    if (!strcmp(res0.kind, "error")) {
        fprintf(stderr,
                "kvsim minimize: %s fails because the scenario itself is wrong, not the "
                "scheduler: %s\n",
                path, res0.message);
        goto out;
    }
    snprintf(m.kind, sizeof m.kind, "%s", res0.kind);
    json_t *steps0 = json_object_get(doc, "steps");
    size_t steps_in = json_array_size(steps0);
    json_t *ids0 = request_ids(steps0);
    size_t reqs_in = json_array_size(ids0);
    json_decref(ids0);
    double t0 = now_s();
    status = 1;
    /* The baseline: the input as it runs (truncated after its failing step). */
    if (!same_failure(&m, steps0)) {
        fprintf(stderr, "kvsim minimize: %s does not fail the same way when replayed\n", path);
        goto out;
    }
    m.base = m.best;
    m.best = NULL;
    for (int round = 0; round < 8 && m.runs < max_runs; round++) {
        size_t before = json_array_size(m.base);
        json_decref(m.ids);
        m.ids = request_ids(m.base);
        size_t reqs_before = json_array_size(m.ids);
        if (pass(&m, json_array_size(m.ids), test_requests, max_runs) ||
            pass(&m, json_array_size(m.base), test_steps, max_runs)) {
            fprintf(stderr, "kvsim minimize: out of memory\n");
            goto out;
        }
        json_decref(m.ids);
        m.ids = request_ids(m.base);
        if (json_array_size(m.base) == before && json_array_size(m.ids) == reqs_before)
            break; /* a fixpoint: another round would try the same candidates */
    }
    json_t *result = with_steps(doc, m.base);
    json_t *name = json_object_get(doc, "name");
    json_t *src = json_object_get(doc, "source");
    char buf[2048];
    snprintf(buf, sizeof buf, "%s (minimized)", json_string_value(name));
    json_object_set_new(result, "name", json_string(buf));
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(buf, sizeof buf, "kvsim minimize %s%s%s", base, src ? " of: " : "",
             src ? json_string_value(src) : "");
    json_object_set_new(result, "source", json_string(buf));
    /* The result must fail strictly, the same way: what `kvsim conform` will see. */
    struct kvsim_conform_result res1;
    if (kvsim_conform_run_json(result, NULL, &res1, NULL) == 0 || strcmp(res1.kind, m.kind)) {
        fprintf(stderr, "kvsim minimize: the minimized scenario does not fail the same way (%s)\n",
                res1.kind[0] ? res1.message : "it passes");
        json_decref(result);
        goto out;
    }
    int wrc = strcmp(out, "-") ? kvsim_scenario_write_file(result, out)
                               : kvsim_scenario_write(result, stdout);
    json_decref(result);
    if (wrc) {
        fprintf(stderr, "kvsim minimize: cannot write %s: %s\n", out, strerror(-wrc));
        goto out;
    }
    size_t steps_out = json_array_size(m.base), reqs_out = json_array_size(m.ids);
    fprintf(msg,
            "minimize: %s: kind %s: steps %zu -> %zu (%zu removed), requests %zu -> %zu (%zu "
            "removed), %" PRIu64 " runs in %.2f s\n",
            path, m.kind, steps_in, steps_out, steps_in - steps_out, reqs_in, reqs_out,
            reqs_in - reqs_out, m.runs, now_s() - t0);
    fprintf(msg, "minimize: wrote %s; it fails with: %s\n", strcmp(out, "-") ? out : "stdout",
            res1.message);
    status = 0;
out:
    json_decref(m.base);
    json_decref(m.best);
    json_decref(m.ids);
    json_decref(doc);
    return status;
}
