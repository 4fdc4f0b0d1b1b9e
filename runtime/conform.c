/*
 * conform.c - `kvsim conform FILE...`: runs conformance scenarios (shared FORMAT.md) against the
 * scheduler core and the G1 pool, step by step.
 *
 * Each file is parsed strictly first (unknown keys, wrong types and missing fields are errors
 * naming the file, the step index and the key), then executed with the invariant checker on.
 * Per file: "PASS <name>" or "FAIL <name>: step <k> (<op>): <key> expected <x> got <y>"; the
 * last line is "<N> passed, <M> failed"; the exit status is 1 if anything failed.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "sched/sched.h"

struct creq {
    const char *name;        /* id in the file */
    struct sched_request *r; /* NULL until added */
    struct kvpool_hits hits; /* last kv_lookup */
    bool has_hits;
};

struct conform {
    const char *file;
    const char *name;
    bool trace;
    struct sched *s;
    struct creq *reqs;
    size_t nreqs, cap_reqs;
    struct sched_step *outstanding[64];
    size_t nout;
    uint64_t adds;
    /* the current op's observations */
    struct sched_step *step;  /* schedule */
    json_t *sampled_finished; /* finished ids of output/abort */
    int op_result;            /* reset_prefix_cache */
    json_t *lookup, *alloc;   /* kv_lookup / kv_allocate results */
    char err[512];
    bool running; /* past parsing: failures are about behaviour, not the file */
};

static int fail(struct conform *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct conform *c, const char *fmt, ...)
{
    if (c->err[0] == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- strict schema ------------------------------------------------------------------------- */

static bool in_list(const char *key, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (strcmp(key, *allowed) == 0)
            return true;
    return false;
}

static int check_keys(struct conform *c, json_t *obj, const char *const *allowed, const char *where)
{
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        (void)val;
        if (!in_list(key, allowed))
            return fail(c, "%s: unknown key '%s'", where, key);
    }
    return 0;
}

static bool is_uint(json_t *v) { return json_is_integer(v) && json_integer_value(v) >= 0; }

/* Expands a token list (array, repeat, range, concat) into *out. Returns the count or -1. */
static int tokens_parse(struct conform *c, json_t *v, kvpool_token **out, size_t *n, size_t *cap,
                        const char *where)
{
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e)
        {
            if (!is_uint(e) || json_integer_value(e) > UINT32_MAX)
                return fail(c, "%s: token %zu is not a token id", where, i);
            if (*n == *cap) {
                *cap = *cap ? *cap * 2 : 64;
                kvpool_token *na = realloc(*out, *cap * sizeof *na);
                if (!na)
                    return fail(c, "out of memory");
                *out = na;
            }
            (*out)[(*n)++] = (kvpool_token)json_integer_value(e);
        }
        return 0;
    }
    if (!json_is_object(v))
        return fail(c, "%s: a token list must be an array or an object", where);
    json_t *rep = json_object_get(v, "repeat"), *rng = json_object_get(v, "range"),
           *cat = json_object_get(v, "concat");
    size_t nkeys = json_object_size(v);
    if ((rep && (nkeys != 2 || !json_object_get(v, "n"))) || (!rep && nkeys != 1) ||
        (!rep && !rng && !cat))
        return fail(c, "%s: expected {\"repeat\",\"n\"}, {\"range\"} or {\"concat\"}", where);
    if (rep) {
        json_t *k = json_object_get(v, "n");
        if (!is_uint(rep) || json_integer_value(rep) > UINT32_MAX || !is_uint(k) ||
            json_integer_value(k) > 100000000)
            return fail(c, "%s: repeat needs a token id and a count n", where);
        json_t *arr = json_array();
        for (json_int_t i = 0; i < json_integer_value(k); i++)
            json_array_append_new(arr, json_integer(json_integer_value(rep)));
        int rc = tokens_parse(c, arr, out, n, cap, where);
        json_decref(arr);
        return rc;
    }
    if (rng) {
        json_t *a = json_array_get(rng, 0), *b = json_array_get(rng, 1);
        if (!json_is_array(rng) || json_array_size(rng) != 2 || !is_uint(a) || !is_uint(b) ||
            json_integer_value(b) < json_integer_value(a) ||
            json_integer_value(b) - json_integer_value(a) > 100000000)
            return fail(c, "%s: range needs [A, B] with 0 <= A <= B", where);
        json_t *arr = json_array();
        for (json_int_t i = json_integer_value(a); i < json_integer_value(b); i++)
            json_array_append_new(arr, json_integer(i));
        int rc = tokens_parse(c, arr, out, n, cap, where);
        json_decref(arr);
        return rc;
    }
    if (cat && json_is_array(cat)) {
        size_t i;
        json_t *e;
        json_array_foreach(cat, i, e)
        {
            if (tokens_parse(c, e, out, n, cap, where))
                return -1;
        }
        return 0;
    }
    return fail(c, "%s: expected {\"repeat\",\"n\"}, {\"range\"} or {\"concat\"}", where);
}

/* Token list as a JSON array (for comparisons). NULL after a parse error. */
static json_t *tokens_json(struct conform *c, json_t *v, const char *where)
{
    kvpool_token *t = NULL;
    size_t n = 0, cap = 0;
    if (tokens_parse(c, v, &t, &n, &cap, where)) {
        free(t);
        return NULL;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_integer(t[i]));
    free(t);
    return arr;
}

static const char *const config_keys[] = {"block_size",
                                          "num_blocks",
                                          "max_num_seqs",
                                          "max_num_batched_tokens",
                                          "max_model_len",
                                          "enable_chunked_prefill",
                                          "enable_prefix_caching",
                                          "policy",
                                          "long_prefill_token_threshold",
                                          "scheduler_reserve_full_isl",
                                          "watermark",
                                          "async_scheduling",
                                          "defer_block_free",
                                          "preempted_victim_guard",
                                          NULL};

static int cfg_uint(struct conform *c, json_t *cfg, const char *key, uint32_t *dst)
{
    json_t *v = json_object_get(cfg, key);
    if (!v)
        return 0;
    if (!is_uint(v) || json_integer_value(v) > UINT32_MAX)
        return fail(c, "config: key '%s' must be a non-negative integer", key);
    *dst = (uint32_t)json_integer_value(v);
    return 0;
}

static int cfg_bool(struct conform *c, json_t *cfg, const char *key, bool *dst)
{
    json_t *v = json_object_get(cfg, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return fail(c, "config: key '%s' must be a boolean", key);
    *dst = json_is_true(v);
    return 0;
}

static int parse_config(struct conform *c, json_t *cfg, struct sched_config *sc)
{
    sched_config_default(sc);
    sc->max_num_seqs = 256;
    sc->check_invariants = true;
    sc->enable_kv_events = false;
    if (!cfg)
        return 0;
    if (!json_is_object(cfg))
        return fail(c, "config: must be an object");
    if (check_keys(c, cfg, config_keys, "config"))
        return -1;
    if (cfg_uint(c, cfg, "block_size", &sc->block_size) ||
        cfg_uint(c, cfg, "num_blocks", &sc->num_blocks) ||
        cfg_uint(c, cfg, "max_num_seqs", &sc->max_num_seqs) ||
        cfg_uint(c, cfg, "max_num_batched_tokens", &sc->max_num_batched_tokens) ||
        cfg_uint(c, cfg, "max_model_len", &sc->max_model_len) ||
        cfg_uint(c, cfg, "long_prefill_token_threshold", &sc->long_prefill_token_threshold) ||
        cfg_bool(c, cfg, "enable_chunked_prefill", &sc->enable_chunked_prefill) ||
        cfg_bool(c, cfg, "enable_prefix_caching", &sc->enable_prefix_caching) ||
        cfg_bool(c, cfg, "scheduler_reserve_full_isl", &sc->scheduler_reserve_full_isl) ||
        cfg_bool(c, cfg, "async_scheduling", &sc->async_scheduling) ||
        cfg_bool(c, cfg, "defer_block_free", &sc->defer_block_free) ||
        cfg_bool(c, cfg, "preempted_victim_guard", &sc->preempted_victim_guard))
        return -1;
    json_t *p = json_object_get(cfg, "policy");
    if (p) {
        if (json_is_string(p) && strcmp(json_string_value(p), "fcfs") == 0)
            sc->policy = SCHED_POLICY_FCFS;
        else if (json_is_string(p) && strcmp(json_string_value(p), "priority") == 0)
            sc->policy = SCHED_POLICY_PRIORITY;
        else
            return fail(c, "config: key 'policy' must be \"fcfs\" or \"priority\"");
    }
    json_t *w = json_object_get(cfg, "watermark");
    if (w) {
        if (!json_is_number(w) || json_number_value(w) < 0 || json_number_value(w) >= 1)
            return fail(c, "config: key 'watermark' must be a number in [0, 1)");
        sc->watermark = json_number_value(w);
    }
    return 0;
}

static const char *const expect_keys[] = {"scheduled",
                                          "total_scheduled",
                                          "new",
                                          "resumed",
                                          "preempted",
                                          "finished",
                                          "finish_reason",
                                          "running",
                                          "waiting",
                                          "status",
                                          "num_computed_tokens",
                                          "num_cached_tokens",
                                          "output_tokens",
                                          "free_blocks",
                                          "free_queue",
                                          "free_queue_head",
                                          "ref_count",
                                          "hit_blocks",
                                          "hit_tokens",
                                          "blocks",
                                          "fail",
                                          "ok",
                                          NULL};

struct op_schema {
    const char *op;
    const char *const keys[16];
    const char *const required[4];
};

static const struct op_schema op_schemas[] = {
    {"add",
     {"op", "id", "prompt", "max_tokens", "priority", "arrival", "min_tokens", "stop_token_ids",
      "eos_token_id", "ignore_eos", "cache_salt", "prompt_logprobs", "external", NULL},
     {"id", "prompt", "max_tokens", NULL}},
    {"schedule", {"op", "expect", NULL}, {NULL}},
    {"output", {"op", "sampled", "finished_recving", "finished_sending", "expect", NULL}, {NULL}},
    {"abort", {"op", "id", "ids", "expect", NULL}, {NULL}},
    {"reset_prefix_cache", {"op", "reset_running_requests", "expect", NULL}, {NULL}},
    {"check", {"op", "expect", NULL}, {"expect", NULL}},
    {"kv_lookup", {"op", "id", "expect", NULL}, {"id", NULL}},
    {"kv_allocate",
     {"op", "id", "num_new_tokens", "use_hits", "expect", NULL},
     {"id", "num_new_tokens", NULL}},
    {"kv_free", {"op", "id", "expect", NULL}, {"id", NULL}},
};

static const struct op_schema *find_schema(const char *op)
{
    for (size_t i = 0; i < sizeof op_schemas / sizeof op_schemas[0]; i++)
        if (strcmp(op_schemas[i].op, op) == 0)
            return &op_schemas[i];
    return NULL;
}

static bool is_string_array(json_t *v)
{
    if (!json_is_array(v))
        return false;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e))
            return false;
    }
    return true;
}

static bool is_map_of(json_t *v, bool (*pred)(json_t *))
{
    if (!json_is_object(v))
        return false;
    const char *k;
    json_t *e;
    json_object_foreach(v, k, e)
    {
        (void)k;
        if (!pred(e))
            return false;
    }
    return true;
}

static bool is_string(json_t *v) { return json_is_string(v); }
static bool is_any(json_t *v) { return v != NULL; }

static bool is_uint_array(json_t *v)
{
    if (!json_is_array(v))
        return false;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!is_uint(e))
            return false;
    }
    return true;
}

/* Type rules of the expect keys. */
static int validate_expect(struct conform *c, json_t *ex, const char *where)
{
    if (!json_is_object(ex))
        return fail(c, "%s: key 'expect' must be an object", where);
    if (check_keys(c, ex, expect_keys, where))
        return -1;
    const char *k;
    json_t *v;
    json_object_foreach(ex, k, v)
    {
        bool ok;
        if (!strcmp(k, "scheduled") || !strcmp(k, "num_computed_tokens") ||
            !strcmp(k, "num_cached_tokens") || !strcmp(k, "ref_count"))
            ok = is_map_of(v, is_uint);
        else if (!strcmp(k, "finish_reason") || !strcmp(k, "status"))
            ok = is_map_of(v, is_string);
        else if (!strcmp(k, "output_tokens"))
            ok = is_map_of(v, is_any);
        else if (!strcmp(k, "total_scheduled") || !strcmp(k, "free_blocks") ||
                 !strcmp(k, "hit_tokens"))
            ok = is_uint(v);
        else if (!strcmp(k, "fail") || !strcmp(k, "ok"))
            ok = json_is_boolean(v);
        else if (!strcmp(k, "free_queue") || !strcmp(k, "free_queue_head") ||
                 !strcmp(k, "hit_blocks") || !strcmp(k, "blocks"))
            ok = is_uint_array(v);
        else
            ok = is_string_array(v);
        if (!ok)
            return fail(c, "%s: key '%s' has the wrong type", where, k);
        if (!strcmp(k, "status")) {
            const char *id;
            json_t *st;
            json_object_foreach(v, id, st)
            {
                if (sched_status_parse(json_string_value(st)) < 0)
                    return fail(c, "%s: key 'status': unknown state '%s'", where,
                                json_string_value(st));
            }
        }
    }
    return 0;
}

static int validate_step(struct conform *c, json_t *st, size_t k)
{
    char where[64];
    snprintf(where, sizeof where, "step %zu", k);
    if (!json_is_object(st))
        return fail(c, "%s: must be an object", where);
    json_t *op = json_object_get(st, "op");
    if (!json_is_string(op))
        return fail(c, "%s: missing key 'op' (a string)", where);
    const struct op_schema *sc = find_schema(json_string_value(op));
    if (!sc)
        return fail(c, "%s: key 'op': unknown operation '%s'", where, json_string_value(op));
    snprintf(where, sizeof where, "step %zu (%s)", k, sc->op);
    if (check_keys(c, st, sc->keys, where))
        return -1;
    for (size_t i = 0; sc->required[i]; i++)
        if (!json_object_get(st, sc->required[i]))
            return fail(c, "%s: missing key '%s'", where, sc->required[i]);
    const char *key;
    json_t *v;
    json_object_foreach(st, key, v)
    {
        bool ok = true;
        if (!strcmp(key, "op"))
            continue;
        if (!strcmp(key, "expect")) {
            if (validate_expect(c, v, where))
                return -1;
            continue;
        }
        if (!strcmp(key, "id") || !strcmp(key, "cache_salt"))
            ok = json_is_string(v);
        else if (!strcmp(key, "max_tokens") || !strcmp(key, "min_tokens") ||
                 !strcmp(key, "num_new_tokens"))
            ok = is_uint(v) && json_integer_value(v) <= UINT32_MAX;
        else if (!strcmp(key, "priority") || !strcmp(key, "eos_token_id"))
            ok = json_is_integer(v);
        else if (!strcmp(key, "arrival"))
            ok = json_is_number(v);
        else if (!strcmp(key, "ignore_eos") || !strcmp(key, "prompt_logprobs") ||
                 !strcmp(key, "use_hits") || !strcmp(key, "reset_running_requests"))
            ok = json_is_boolean(v);
        else if (!strcmp(key, "ids") || !strcmp(key, "finished_recving") ||
                 !strcmp(key, "finished_sending"))
            ok = is_string_array(v);
        else if (!strcmp(key, "stop_token_ids"))
            ok = is_uint_array(v);
        else if (!strcmp(key, "sampled"))
            ok = json_is_object(v);
        else if (!strcmp(key, "prompt")) {
            json_t *t = tokens_json(c, v, where);
            ok = t != NULL;
            json_decref(t);
            if (!ok)
                return -1;
        } else if (!strcmp(key, "external")) {
            static const char *const ext_keys[] = {"tokens", "async", NULL};
            ok = json_is_object(v) && check_keys(c, v, ext_keys, where) == 0 &&
                 is_uint(json_object_get(v, "tokens")) &&
                 json_integer_value(json_object_get(v, "tokens")) <= UINT32_MAX &&
                 (!json_object_get(v, "async") || json_is_boolean(json_object_get(v, "async")));
            if (!ok && c->err[0])
                return -1;
        }
        if (!ok)
            return fail(c, "%s: key '%s' has the wrong type", where, key);
    }
    if (!strcmp(sc->op, "abort") && !json_object_get(st, "id") == !json_object_get(st, "ids"))
        return fail(c, "%s: give exactly one of 'id' and 'ids'", where);
    return 0;
}

/* ---- execution ----------------------------------------------------------------------------- */

static struct creq *find_req(struct conform *c, const char *name)
{
    for (size_t i = 0; i < c->nreqs; i++)
        if (strcmp(c->reqs[i].name, name) == 0)
            return &c->reqs[i];
    return NULL;
}

static struct creq *need_req(struct conform *c, const char *name, const char *where)
{
    struct creq *q = find_req(c, name);
    if (!q || !q->r)
        fail(c, "%s: unknown request id '%s'", where, name);
    return q && q->r ? q : NULL;
}

static int op_add(struct conform *c, json_t *st, const char *where)
{
    const char *id = json_string_value(json_object_get(st, "id"));
    if (find_req(c, id))
        return fail(c, "%s: key 'id': request '%s' was already added", where, id);
    struct sched_request_params p = {0};
    kvpool_token *prompt = NULL, *stops = NULL;
    size_t n = 0, cap = 0, ns = 0, caps = 0;
    if (tokens_parse(c, json_object_get(st, "prompt"), &prompt, &n, &cap, where))
        return -1;
    json_t *v;
    if ((v = json_object_get(st, "stop_token_ids")) &&
        tokens_parse(c, v, &stops, &ns, &caps, where)) {
        free(prompt);
        return -1;
    }
    if (c->nreqs == c->cap_reqs) {
        c->cap_reqs = c->cap_reqs ? c->cap_reqs * 2 : 16;
        struct creq *na = realloc(c->reqs, c->cap_reqs * sizeof *na);
        if (!na) {
            free(prompt);
            free(stops);
            return fail(c, "out of memory");
        }
        c->reqs = na;
    }
    p.id = c->nreqs + 1;
    p.prompt = prompt;
    p.num_prompt_tokens = (uint32_t)n;
    p.max_tokens = (uint32_t)json_integer_value(json_object_get(st, "max_tokens"));
    p.min_tokens = (uint32_t)json_integer_value(json_object_get(st, "min_tokens"));
    p.priority = json_integer_value(json_object_get(st, "priority"));
    v = json_object_get(st, "arrival");
    p.arrival = v ? json_number_value(v) : (double)c->adds;
    p.stop_token_ids = stops;
    p.num_stop_token_ids = (uint32_t)ns;
    v = json_object_get(st, "eos_token_id");
    p.eos_token_id = v ? json_integer_value(v) : -1;
    p.ignore_eos = json_is_true(json_object_get(st, "ignore_eos"));
    p.cache_salt = json_string_value(json_object_get(st, "cache_salt"));
    p.prompt_logprobs = json_is_true(json_object_get(st, "prompt_logprobs"));
    if ((v = json_object_get(st, "external"))) {
        p.external_tokens = (uint32_t)json_integer_value(json_object_get(v, "tokens"));
        p.external_async = json_is_true(json_object_get(v, "async"));
    }
    struct creq *q = &c->reqs[c->nreqs];
    memset(q, 0, sizeof *q);
    q->name = id;
    int rc = sched_add(c->s, &p, &q->r);
    free(prompt);
    free(stops);
    if (rc)
        return fail(c, "%s: cannot add request '%s': %s", where, id, strerror(-rc));
    c->nreqs++;
    c->adds++;
    return 0;
}

static json_t *ids_json(struct conform *c, struct sched_request *const *reqs, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(c->reqs[reqs[i]->id - 1].name));
    return a;
}

static int sched_error(struct conform *c, const char *where, int rc)
{
    if (rc == -EUCLEAN && sched_last_violation(c->s)) {
        char line[384];
        sched_violation_format(sched_last_violation(c->s), line, sizeof line);
        return fail(c, "%s: %s", where, line);
    }
    return fail(c, "%s: scheduler error: %s", where, strerror(-rc));
}

static int op_schedule(struct conform *c, const char *where)
{
    if (c->nout == sizeof c->outstanding / sizeof c->outstanding[0])
        return fail(c, "%s: too many schedules without output", where);
    int rc;
    struct sched_step *st = sched_schedule(c->s, &rc);
    if (!st)
        return sched_error(c, where, rc);
    c->outstanding[c->nout++] = st;
    c->step = st;
    return 0;
}

static int op_output(struct conform *c, json_t *stj, const char *where)
{
    if (c->nout == 0)
        return fail(c, "%s: no schedule is waiting for its output", where);
    struct sched_step *st = c->outstanding[0];
    uint32_t n = st->num_scheduled;
    const kvpool_token **toks = calloc(n ? n : 1, sizeof *toks);
    uint32_t *counts = calloc(n ? n : 1, sizeof *counts);
    kvpool_token **owned = calloc(n ? n : 1, sizeof *owned);
    struct sched_request **recv = NULL;
    size_t nrecv = 0;
    int rc = 0;
    if (!toks || !counts || !owned)
        rc = fail(c, "out of memory");
    json_t *sampled = json_object_get(stj, "sampled");
    const char *id;
    json_t *v;
    json_object_foreach(sampled, id, v)
    {
        if (rc)
            break;
        struct creq *q = need_req(c, id, where);
        if (!q) {
            rc = -1;
            break;
        }
        uint32_t i = 0;
        while (i < n && st->scheduled[i].req != q->r)
            i++;
        if (i == n) {
            rc = fail(c, "%s: key 'sampled': request '%s' was not scheduled in that step", where,
                      id);
            break;
        }
        size_t cnt = 0, cap = 0;
        if (tokens_parse(c, v, &owned[i], &cnt, &cap, where)) {
            rc = -1;
            break;
        }
        toks[i] = owned[i];
        counts[i] = (uint32_t)cnt;
    }
    json_t *fr = json_object_get(stj, "finished_recving");
    if (rc == 0 && fr) {
        recv = calloc(json_array_size(fr) + 1, sizeof *recv);
        size_t i;
        json_array_foreach(fr, i, v)
        {
            struct creq *q = need_req(c, json_string_value(v), where);
            if (!q) {
                rc = -1;
                break;
            }
            recv[nrecv++] = q->r;
        }
    }
    json_t *fs = json_object_get(stj, "finished_sending");
    if (rc == 0 && fs) {
        size_t i;
        json_array_foreach(fs, i, v)
        {
            /* No request of this core waits for a send: the ids must exist, nothing else. */
            if (!need_req(c, json_string_value(v), where)) {
                rc = -1;
                break;
            }
        }
    }
    if (rc == 0) {
        struct sched_model_output out = {
            .tokens = toks,
            .num_tokens = counts,
            .finished_recving = recv,
            .num_finished_recving = (uint32_t)nrecv,
        };
        int src = sched_update(c->s, st, &out);
        memmove(c->outstanding, c->outstanding + 1, (c->nout - 1) * sizeof *c->outstanding);
        c->nout--;
        if (src)
            rc = sched_error(c, where, src);
        uint32_t nf;
        struct sched_request *const *f = sched_last_finished(c->s, &nf);
        c->sampled_finished = ids_json(c, f, nf);
    }
    for (uint32_t i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(toks);
    free(counts);
    free(recv);
    return rc;
}

static int op_abort(struct conform *c, json_t *st, const char *where)
{
    json_t *ids = json_object_get(st, "ids");
    json_t *one = json_object_get(st, "id");
    json_t *list = ids ? json_incref(ids) : json_pack("[O]", one);
    json_t *fin = json_array();
    size_t i;
    json_t *v;
    int rc = 0;
    json_array_foreach(list, i, v)
    {
        struct creq *q = need_req(c, json_string_value(v), where);
        if (!q) {
            rc = -1;
            break;
        }
        int a = sched_abort(c->s, q->r);
        if (a == -EALREADY)
            continue;
        if (a) {
            rc = sched_error(c, where, a);
            break;
        }
        uint32_t nf;
        struct sched_request *const *f = sched_last_finished(c->s, &nf);
        json_t *done = ids_json(c, f, nf);
        json_array_extend(fin, done);
        json_decref(done);
    }
    json_decref(list);
    c->sampled_finished = fin;
    return rc;
}

static int op_kv_lookup(struct conform *c, json_t *st, const char *where)
{
    struct creq *q = need_req(c, json_string_value(json_object_get(st, "id")), where);
    if (!q)
        return -1;
    uint32_t cap = q->r->kv.num_hashes + 1;
    kvpool_block_id *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return fail(c, "out of memory");
    kvpool_lookup(sched_pool(c->s), &q->r->kv, &q->hits, ids, cap);
    q->has_hits = true;
    json_t *blocks = json_array();
    for (uint32_t i = 0; i < q->hits.num_blocks; i++)
        json_array_append_new(blocks, json_integer(ids[i]));
    free(ids);
    c->lookup =
        json_pack("{s:o,s:I}", "hit_blocks", blocks, "hit_tokens", (json_int_t)q->hits.num_tokens);
    return 0;
}

static int op_kv_allocate(struct conform *c, json_t *st, const char *where)
{
    struct creq *q = need_req(c, json_string_value(json_object_get(st, "id")), where);
    if (!q)
        return -1;
    json_t *uh = json_object_get(st, "use_hits");
    bool use_hits = !uh || json_is_true(uh);
    struct kvpool_alloc_args args = {
        .num_computed_tokens = q->r->num_computed_tokens,
        .num_new_tokens = (uint64_t)json_integer_value(json_object_get(st, "num_new_tokens")),
        .hits = use_hits && q->has_hits ? &q->hits : NULL,
        .is_admission = true,
    };
    struct kvpool_plan plan;
    struct kvpool *pool = sched_pool(c->s);
    int rc = kvpool_prepare(pool, &q->r->kv, &args, &plan);
    if (rc < 0)
        return fail(c, "%s: kv_allocate: %s", where, strerror(-rc));
    if (rc != KVPOOL_READY) {
        c->alloc = json_pack("{s:b,s:[]}", "fail", 1, "blocks");
        return 0;
    }
    rc = kvpool_commit(pool, &q->r->kv, &plan);
    if (rc)
        return fail(c, "%s: kv_allocate commit: %s", where, strerror(-rc));
    q->has_hits = false;
    json_t *blocks = json_array();
    for (uint32_t i = plan.first_new_index + plan.num_hit_blocks; i < q->r->kv.num_blocks; i++)
        json_array_append_new(blocks, json_integer(q->r->kv.blocks[i]));
    c->alloc = json_pack("{s:b,s:o}", "fail", 0, "blocks", blocks);
    return 0;
}

/* ---- expectations -------------------------------------------------------------------------- */

static int cmp_json_str(const void *a, const void *b)
{
    return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

/* A sorted copy of a string array (set comparison). */
static json_t *sorted(json_t *arr)
{
    size_t n = json_array_size(arr);
    json_t **items = malloc((n ? n : 1) * sizeof *items);
    for (size_t i = 0; i < n; i++)
        items[i] = json_array_get(arr, i);
    qsort(items, n, sizeof *items, cmp_json_str);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(out, items[i]);
    free(items);
    return out;
}

static struct sched_request *req_of(struct conform *c, const char *name)
{
    struct creq *q = find_req(c, name);
    return q ? q->r : NULL;
}

/* Builds the observed value for an expect key, shaped like the expectation. NULL + error when
 * the key cannot be observed after this op. */
static json_t *observe(struct conform *c, const char *key, json_t *want, const char *op,
                       const char *where)
{
    struct kvpool *pool = sched_pool(c->s);
    bool is_sched = !strcmp(op, "schedule");
    if (!strcmp(key, "scheduled") || !strcmp(key, "total_scheduled") || !strcmp(key, "new") ||
        !strcmp(key, "resumed") || !strcmp(key, "preempted")) {
        if (!is_sched) {
            fail(c, "%s: key '%s' is only observable after a schedule", where, key);
            return NULL;
        }
        struct sched_step *st = c->step;
        if (!strcmp(key, "total_scheduled"))
            return json_integer((json_int_t)st->total_tokens);
        if (!strcmp(key, "scheduled")) {
            json_t *m = json_object();
            for (uint32_t i = 0; i < st->num_scheduled; i++)
                json_object_set_new(m, c->reqs[st->scheduled[i].req->id - 1].name,
                                    json_integer(st->scheduled[i].num_tokens));
            return m;
        }
        if (!strcmp(key, "new"))
            return ids_json(c, st->new_reqs, st->num_new);
        if (!strcmp(key, "resumed"))
            return ids_json(c, st->resumed, st->num_resumed);
        return ids_json(c, st->preempted, st->num_preempted);
    }
    if (!strcmp(key, "finished"))
        return c->sampled_finished ? json_incref(c->sampled_finished) : json_array();
    if (!strcmp(key, "running")) {
        struct sched_request *const *rr;
        uint32_t n = sched_running(c->s, &rr);
        return ids_json(c, rr, n);
    }
    if (!strcmp(key, "waiting")) {
        uint32_t n = sched_waiting_snapshot(c->s, NULL, 0);
        struct sched_request **w = malloc((n + 1) * sizeof *w);
        sched_waiting_snapshot(c->s, w, n);
        json_t *a = ids_json(c, w, n);
        free(w);
        return a;
    }
    if (!strcmp(key, "free_blocks"))
        return json_integer(kvpool_num_free_blocks(pool));
    if (!strcmp(key, "free_queue") || !strcmp(key, "free_queue_head")) {
        uint32_t n = kvpool_free_queue_snapshot(pool, NULL, 0);
        kvpool_block_id *ids = malloc((n + 1) * sizeof *ids);
        kvpool_free_queue_snapshot(pool, ids, n);
        if (!strcmp(key, "free_queue_head") && n > json_array_size(want))
            n = (uint32_t)json_array_size(want);
        json_t *a = json_array();
        for (uint32_t i = 0; i < n; i++)
            json_array_append_new(a, json_integer(ids[i]));
        free(ids);
        return a;
    }
    if (!strcmp(key, "hit_blocks") || !strcmp(key, "hit_tokens")) {
        if (!c->lookup) {
            fail(c, "%s: key '%s' is only observable after kv_lookup", where, key);
            return NULL;
        }
        return json_incref(json_object_get(c->lookup, key));
    }
    if (!strcmp(key, "blocks") || !strcmp(key, "fail")) {
        if (!c->alloc) {
            fail(c, "%s: key '%s' is only observable after kv_allocate", where, key);
            return NULL;
        }
        return json_incref(json_object_get(c->alloc, key));
    }
    if (!strcmp(key, "ok")) {
        if (strcmp(op, "reset_prefix_cache") != 0) {
            fail(c, "%s: key 'ok' is only observable after reset_prefix_cache", where);
            return NULL;
        }
        return json_boolean(c->op_result == 0);
    }
    /* maps keyed by request id or block id */
    json_t *m = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v)
    {
        (void)v;
        if (!strcmp(key, "ref_count")) {
            char *end;
            long b = strtol(k, &end, 10);
            if (*k == 0 || *end != 0 || b < 0 || b >= (long)sched_get_config(c->s)->num_blocks) {
                fail(c, "%s: key 'ref_count': '%s' is not a block id", where, k);
                json_decref(m);
                return NULL;
            }
            json_object_set_new(m, k, json_integer(kvpool_ref_count(pool, (kvpool_block_id)b)));
            continue;
        }
        struct sched_request *r = req_of(c, k);
        if (!r) {
            fail(c, "%s: key '%s': unknown request id '%s'", where, key, k);
            json_decref(m);
            return NULL;
        }
        json_t *o;
        if (!strcmp(key, "status"))
            o = json_string(sched_status_name(r->status));
        else if (!strcmp(key, "finish_reason"))
            o = sched_finish_reason(r->status) ? json_string(sched_finish_reason(r->status))
                                               : json_null();
        else if (!strcmp(key, "num_computed_tokens"))
            o = json_integer((json_int_t)r->num_computed_tokens);
        else if (!strcmp(key, "num_cached_tokens"))
            o = json_integer(r->num_cached_tokens < 0 ? 0 : r->num_cached_tokens);
        else { /* output_tokens */
            o = json_array();
            for (uint32_t i = 0; i < r->num_output; i++)
                json_array_append_new(o, json_integer(r->output[i]));
        }
        json_object_set_new(m, k, o);
    }
    return m;
}

static int check_expect(struct conform *c, json_t *ex, const char *op, size_t k)
{
    char where[64];
    snprintf(where, sizeof where, "step %zu (%s)", k, op);
    const char *key;
    json_t *want;
    json_object_foreach(ex, key, want)
    {
        json_t *w = json_incref(want);
        if (!strcmp(key, "output_tokens")) { /* token lists may use the compact forms */
            json_t *norm = json_object();
            const char *id;
            json_t *v;
            json_object_foreach(want, id, v)
            {
                json_t *t = tokens_json(c, v, where);
                if (!t) {
                    json_decref(norm);
                    json_decref(w);
                    return -1;
                }
                json_object_set_new(norm, id, t);
            }
            json_decref(w);
            w = norm;
        }
        json_t *got = observe(c, key, w, op, where);
        if (!got) {
            json_decref(w);
            return -1;
        }
        bool is_set = !strcmp(key, "new") || !strcmp(key, "resumed") || !strcmp(key, "preempted") ||
                      !strcmp(key, "finished");
        if (is_set) {
            json_t *a = sorted(w), *b = sorted(got);
            json_decref(w);
            json_decref(got);
            w = a;
            got = b;
        }
        if (!json_equal(w, got)) {
            char *ws = json_dumps(w, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
            char *gs = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
            fail(c, "%s: %s expected %s got %s", where, key, ws, gs);
            free(ws);
            free(gs);
            json_decref(w);
            json_decref(got);
            return -1;
        }
        json_decref(w);
        json_decref(got);
    }
    return 0;
}

static void trace_step(struct conform *c, size_t k, const char *op)
{
    json_t *t = json_pack("{s:s,s:I,s:s}", "scenario", c->name, "step", (json_int_t)k, "op", op);
    struct kvpool *pool = sched_pool(c->s);
    if (c->step && !strcmp(op, "schedule")) {
        json_t *m = json_object();
        for (uint32_t i = 0; i < c->step->num_scheduled; i++)
            json_object_set_new(m, c->reqs[c->step->scheduled[i].req->id - 1].name,
                                json_integer(c->step->scheduled[i].num_tokens));
        json_object_set_new(t, "scheduled", m);
        json_object_set_new(t, "new", ids_json(c, c->step->new_reqs, c->step->num_new));
        json_object_set_new(t, "resumed", ids_json(c, c->step->resumed, c->step->num_resumed));
        json_object_set_new(t, "preempted",
                            ids_json(c, c->step->preempted, c->step->num_preempted));
    }
    if (c->sampled_finished)
        json_object_set(t, "finished", c->sampled_finished);
    if (c->lookup)
        json_object_update(t, c->lookup);
    if (c->alloc)
        json_object_update(t, c->alloc);
    struct sched_request *const *rr;
    uint32_t n = sched_running(c->s, &rr);
    json_object_set_new(t, "running", ids_json(c, rr, n));
    n = sched_waiting_snapshot(c->s, NULL, 0);
    struct sched_request **w = malloc((n + 1) * sizeof *w);
    sched_waiting_snapshot(c->s, w, n);
    json_object_set_new(t, "waiting", ids_json(c, w, n));
    free(w);
    json_object_set_new(t, "free_blocks", json_integer(kvpool_num_free_blocks(pool)));
    char *line = json_dumps(t, JSON_COMPACT);
    printf("%s\n", line);
    free(line);
    json_decref(t);
}

static int run_step(struct conform *c, json_t *st, size_t k)
{
    const char *op = json_string_value(json_object_get(st, "op"));
    char where[64];
    snprintf(where, sizeof where, "step %zu (%s)", k, op);
    c->step = NULL;
    json_decref(c->sampled_finished);
    json_decref(c->lookup);
    json_decref(c->alloc);
    c->sampled_finished = c->lookup = c->alloc = NULL;
    int rc = 0;
    if (!strcmp(op, "add")) {
        rc = op_add(c, st, where);
    } else if (!strcmp(op, "schedule")) {
        rc = op_schedule(c, where);
    } else if (!strcmp(op, "output")) {
        rc = op_output(c, st, where);
    } else if (!strcmp(op, "abort")) {
        rc = op_abort(c, st, where);
    } else if (!strcmp(op, "reset_prefix_cache")) {
        c->op_result = sched_reset_prefix_cache(
            c->s, json_is_true(json_object_get(st, "reset_running_requests")));
        if (c->op_result && c->op_result != -EBUSY)
            rc = sched_error(c, where, c->op_result);
    } else if (!strcmp(op, "check")) {
        struct sched_violation v;
        if (sched_check(c->s, &v) != 0) {
            char line[384];
            sched_violation_format(&v, line, sizeof line);
            rc = fail(c, "%s: %s", where, line);
        }
    } else if (!strcmp(op, "kv_lookup")) {
        rc = op_kv_lookup(c, st, where);
    } else if (!strcmp(op, "kv_allocate")) {
        rc = op_kv_allocate(c, st, where);
    } else if (!strcmp(op, "kv_free")) {
        struct creq *q = need_req(c, json_string_value(json_object_get(st, "id")), where);
        if (!q)
            rc = -1;
        else
            kvpool_free(sched_pool(c->s), &q->r->kv);
    }
    if (c->trace)
        trace_step(c, k, op);
    json_t *ex = json_object_get(st, "expect");
    if (rc == 0 && ex)
        rc = check_expect(c, ex, op, k);
    return rc;
}

/* Runs one file. Returns 0 (pass) or -1 (fail), printing the PASS/FAIL line. */
static int run_file(const char *path, bool trace)
{
    struct conform c = {.file = path, .trace = trace};
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    c.name = path;
    int rc = 0;
    if (!root) {
        rc = fail(&c, "line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
        goto out;
    }
    static const char *const top_keys[] = {"name", "source", "config", "steps", NULL};
    if (!json_is_object(root)) {
        rc = fail(&c, "the document must be an object");
        goto out;
    }
    json_t *name = json_object_get(root, "name");
    if (json_is_string(name))
        c.name = json_string_value(name);
    json_t *src = json_object_get(root, "source");
    json_t *steps = json_object_get(root, "steps");
    if (check_keys(&c, root, top_keys, "top level")) {
        rc = -1;
        goto out;
    }
    if (!json_is_string(name)) {
        rc = fail(&c, "top level: key 'name' must be a string");
        goto out;
    }
    if (src && !json_is_string(src)) {
        rc = fail(&c, "top level: key 'source' must be a string");
        goto out;
    }
    if (!json_is_array(steps)) {
        rc = fail(&c, "top level: missing key 'steps' (an array)");
        goto out;
    }
    struct sched_config sc;
    if (parse_config(&c, json_object_get(root, "config"), &sc)) {
        rc = -1;
        goto out;
    }
    size_t k;
    json_t *st;
    json_array_foreach(steps, k, st)
    {
        if (validate_step(&c, st, k)) {
            rc = -1;
            goto out;
        }
    }
    int src_rc = sched_create(&sc, &c.s);
    if (src_rc) {
        rc = fail(&c, "config: impossible configuration: %s", strerror(-src_rc));
        goto out;
    }
    c.running = true;
    json_array_foreach(steps, k, st)
    {
        if (run_step(&c, st, k)) {
            rc = -1;
            break;
        }
    }
out:
    if (rc == 0)
        printf("PASS %s\n", c.name);
    else
        printf("FAIL %s: %s%s%s\n", c.name, c.running ? "" : path, c.running ? "" : ": ", c.err);
    json_decref(c.sampled_finished);
    json_decref(c.lookup);
    json_decref(c.alloc);
    sched_destroy(c.s);
    free(c.reqs);
    json_decref(root);
    return rc;
}

static void conform_usage(FILE *out)
{
    fprintf(out,
            "usage: kvsim conform [--trace] FILE...\n"
            "\n"
            "Runs conformance scenarios (JSON, see docs/conformance.md) against the scheduler\n"
            "core and the G1 pool. Prints PASS/FAIL per file and '<N> passed, <M> failed'.\n"
            "\n"
            "  -t, --trace   print each step's observed decision as a JSON line\n"
            "  -h, --help    print this help\n");
}

int kvsim_conform_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"trace", no_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool trace = false;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "th", opts, NULL)) != -1) {
        switch (ch) {
        case 't': trace = true; break;
        case 'h': conform_usage(stdout); return 0;
        default: conform_usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "kvsim conform: no scenario files given\n");
        conform_usage(stderr);
        return 2;
    }
    int passed = 0, failed = 0;
    for (int i = optind; i < argc; i++) {
        if (run_file(argv[i], trace) == 0)
            passed++;
        else
            failed++;
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
