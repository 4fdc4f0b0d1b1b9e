/*
 * minimize.c - failure minimization (verify.h, behind `kvsim minimize`): delta debugging (ddmin) of
 * a failing scenario over its requests and its steps, keeping a candidate only while it fails with
 * the same kind (the same rule, "dead_end", "expect:<key>", ...; see runtime/verify/verify.h) and,
 * for a dead end, the same shape (kvsim_conform_result.shape): otherwise a dead end of one form
 * could shrink into another, and a classification by minimized shape would count it wrongly.
 *
 * Candidates run through the scenario runner in lenient mode: a removed `add` or `schedule`
 * would otherwise make most later ops invalid (an output for a step that is gone, sampled
 * tokens for a request that was not scheduled) and ddmin would learn nothing from them. The
 * runner reports the steps as they actually ran (references to nothing dropped, and nothing
 * after the failing step), and that strict-valid form replaces the current scenario, so every
 * intermediate and the final result replay identically under `kvsim conform`.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/verify/verify.h"

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

/* ---- the minimizer -------------------------------------------------------------------------- */

struct mini {
    json_t *doc;  /* the input (name, source, config) */
    json_t *base; /* current steps: strict-valid, failing with `kind` */
    json_t *ids;  /* request ids of base (requests pass) */
    char kind[96];
    char shape[192];
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
    bool same = rc != 0 && res.verdict == KVSIM_CONFORM_FAIL && !strcmp(res.kind, m->kind) &&
                !strcmp(res.shape, m->shape);
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

/* Sets res->message ("<name> <what>") and returns rc. */
static int minimize_fail(struct kvsim_minimize_result *res, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int minimize_fail(struct kvsim_minimize_result *res, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof res->message, fmt, ap);
    va_end(ap);
    return rc;
}

/* The input's failure, checked before anything is minimized. Returns 0 or -EINVAL. */
static int check_minimizable(json_t *doc, const char *name, struct kvsim_minimize_result *res)
{
    struct kvsim_conform_result r0;
    if (kvsim_conform_run_json(doc, NULL, &r0, NULL) == 0)
        return minimize_fail(res, -EINVAL, "%s passes: nothing to minimize", name);
    if (r0.verdict == KVSIM_CONFORM_INVALID)
        return minimize_fail(res, -EINVAL, "%s: %s", name, r0.message);
    if (!strcmp(r0.kind, "error"))
        return minimize_fail(res, -EINVAL,
                             "%s fails because the scenario itself is wrong, not the scheduler: %s",
                             name, r0.message);
    snprintf(res->kind, sizeof res->kind, "%s", r0.kind);
    snprintf(res->shape, sizeof res->shape, "%s", r0.shape);
    return 0;
}

/* ddmin rounds over requests, then steps, until a fixpoint or max_runs. Returns 0 or -ENOMEM. */
static int minimize_rounds(struct mini *m, uint64_t max_runs)
{
    for (int round = 0; round < 8 && m->runs < max_runs; round++) {
        size_t before = json_array_size(m->base);
        json_decref(m->ids);
        m->ids = request_ids(m->base);
        size_t reqs_before = json_array_size(m->ids);
        if (pass(m, json_array_size(m->ids), test_requests, max_runs) ||
            pass(m, json_array_size(m->base), test_steps, max_runs))
            return -ENOMEM;
        json_decref(m->ids);
        m->ids = request_ids(m->base);
        if (json_array_size(m->base) == before && json_array_size(m->ids) == reqs_before)
            break; /* a fixpoint: another round would try the same candidates */
    }
    return 0;
}

/* The result document: the input's keys with the minimized steps, renamed, its source noted. */
static json_t *result_doc(json_t *doc, json_t *steps, const char *name)
{
    json_t *result = with_steps(doc, steps);
    json_t *title = json_object_get(doc, "name");
    json_t *src = json_object_get(doc, "source");
    char buf[2048];
    snprintf(buf, sizeof buf, "%s (minimized)", json_string_value(title));
    json_object_set_new(result, "name", json_string(buf));
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    snprintf(buf, sizeof buf, "kvsim minimize %s%s%s", base, src ? " of: " : "",
             src ? json_string_value(src) : "");
    json_object_set_new(result, "source", json_string(buf));
    return result;
}

int kvsim_minimize_scenario(json_t *doc, const char *name, uint64_t max_runs,
                            struct kvsim_minimize_result *res)
{
    memset(res, 0, sizeof *res);
    int rc = check_minimizable(doc, name, res);
    if (rc)
        return rc;
    struct mini m = {.doc = doc};
    snprintf(m.kind, sizeof m.kind, "%s", res->kind);
    snprintf(m.shape, sizeof m.shape, "%s", res->shape);
    json_t *steps0 = json_object_get(doc, "steps");
    json_t *ids0 = request_ids(steps0);
    res->steps_in = json_array_size(steps0);
    res->requests_in = json_array_size(ids0);
    json_decref(ids0);
    /* The baseline: the input as it runs (truncated after its failing step). */
    if (!same_failure(&m, steps0)) {
        rc = minimize_fail(res, -EPROTO, "%s does not fail the same way when replayed", name);
        goto out;
    }
    m.base = m.best;
    m.best = NULL;
    if ((rc = minimize_rounds(&m, max_runs)) != 0) {
        minimize_fail(res, rc, "out of memory");
        goto out;
    }
    json_t *result = result_doc(doc, m.base, name);
    /* The result must fail strictly, the same way: what `kvsim conform` will see. */
    if (kvsim_conform_run_json(result, NULL, &res->failure, NULL) == 0 ||
        strcmp(res->failure.kind, m.kind) || strcmp(res->failure.shape, m.shape)) {
        rc = minimize_fail(res, -EPROTO, "the minimized scenario does not fail the same way (%s)",
                           res->failure.kind[0] ? res->failure.message : "it passes");
        json_decref(result);
        goto out;
    }
    res->scenario = result;
    res->steps_out = json_array_size(m.base);
    res->requests_out = json_array_size(m.ids);
out:
    res->runs = m.runs;
    json_decref(m.base);
    json_decref(m.best);
    json_decref(m.ids);
    return rc;
}
