/*
 * conform.c - `kvsim conform FILE...`: runs conformance scenarios (shared FORMAT.md) against the
 * scheduler core and the G1 pool, step by step; the same runner serves `kvsim soak` and
 * `kvsim minimize` in-process (runtime/conform.h).
 *
 * Each file is parsed strictly first (unknown keys, wrong types and missing fields are errors
 * naming the file, the step index and the key), then executed with the invariant checker on.
 * Per file: "PASS <name>" or "FAIL <name>: step <k> (<op>): <key> expected <x> got <y>"; the
 * last line is "<N> passed, <M> failed"; the exit status is 1 if anything failed.
 *
 * Extensions (docs/conformance.md): check_invariants runs sched_check (and, with tiers,
 * kvsim_tiers_check) after every op, check_liveness fails a schedule that leaves the engine at a
 * dead end, max_futile_preemptions bounds the #49675 zero-progress preemptions, scheduler_checks
 * turns the scheduler's own boundary checks off; `offload` puts G2/G3 tiers behind G1 and the
 * `advance` op moves virtual time (transfers end in it); legacy_partial_alloc is issue 6's old
 * bug, on purpose.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/conform.h"
#include "runtime/runtime.h"
#include "runtime/tiers.h"
#include "sched/sched.h"

struct creq {
    char *name;              /* id in the file */
    struct sched_request *r; /* NULL until added */
    struct kvpool_hits hits; /* last kv_lookup */
    bool has_hits;
    /* what the last op left, to count transitions */
    enum sched_status seen_status;
    enum sched_transition seen_transition;
    uint64_t seen_transition_step;
};

#define MAX_OUTSTANDING 64
#define OP_SKIPPED      1 /* lenient mode: the op refers to nothing that exists; dropped */
/* Virtual time stays below this (so that no deadline arithmetic can overflow). */
#define MAX_NOW_NS      (INT64_C(1) << 62)

struct kvsim_conform_runner {
    const char *name;
    bool trace, lenient;
    json_t *effective;
    /* extension rules */
    bool check_invariants, check_liveness, has_max_futile;
    bool scheduler_checks; /* the scheduler's own boundary checks (without check_invariants) */
    uint64_t max_futile;
    struct sched *s;
    struct kvsim_tiers *tiers; /* config `offload`; NULL without tiers */
    int64_t now_ns;            /* virtual time (advance) */
    struct creq *reqs;
    size_t nreqs, cap_reqs;
    struct sched_step *outstanding[MAX_OUTSTANDING];
    size_t nout;
    uint64_t adds;
    size_t nsteps; /* steps run so far (the next step's index) */
    struct kvsim_conform_stats stats;
    /* the current op's observations */
    struct sched_step *step;  /* schedule */
    json_t *sampled_finished; /* finished ids of output/abort */
    int op_result;            /* reset_prefix_cache */
    json_t *lookup, *alloc;   /* kv_lookup / kv_allocate results */
    uint64_t futile_now;      /* futile preemptions of the current schedule */
    char err[1024];
    char kind[96];
    long fail_step;
    char fail_op[32];
    bool running; /* past parsing: failures are about behaviour, not the file */
    bool failed;
};

static int vfail(struct kvsim_conform_runner *c, const char *kind, const char *fmt, va_list ap)
{
    if (c->err[0] == 0) {
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        snprintf(c->kind, sizeof c->kind, "%s", kind ? kind : c->running ? "error" : "invalid");
    }
    return -1;
}

/* A failure whose kind is "error" while running, "invalid" while parsing. */
static int fail(struct kvsim_conform_runner *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(struct kvsim_conform_runner *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

static int fail_kind(struct kvsim_conform_runner *c, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_kind(struct kvsim_conform_runner *c, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, kind, fmt, ap);
    va_end(ap);
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

static int check_keys(struct kvsim_conform_runner *c, json_t *obj, const char *const *allowed,
                      const char *where)
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
static int tokens_parse(struct kvsim_conform_runner *c, json_t *v, kvpool_token **out, size_t *n,
                        size_t *cap, const char *where)
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
static json_t *tokens_json(struct kvsim_conform_runner *c, json_t *v, const char *where)
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

static const char *const config_keys[] = {
    "block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
    "enable_chunked_prefill", "enable_prefix_caching", "policy", "long_prefill_token_threshold",
    "scheduler_reserve_full_isl", "watermark", "async_scheduling", "defer_block_free",
    "preempted_victim_guard",
    /* extensions (docs/conformance.md) */
    "check_invariants", "check_liveness", "max_futile_preemptions", "scheduler_checks",
    "legacy_partial_alloc", "offload", NULL};

static int cfg_uint(struct kvsim_conform_runner *c, json_t *cfg, const char *key, uint32_t *dst)
{
    json_t *v = json_object_get(cfg, key);
    if (!v)
        return 0;
    if (!is_uint(v) || json_integer_value(v) > UINT32_MAX)
        return fail(c, "config: key '%s' must be a non-negative integer", key);
    *dst = (uint32_t)json_integer_value(v);
    return 0;
}

static int cfg_bool(struct kvsim_conform_runner *c, json_t *cfg, const char *key, bool *dst)
{
    json_t *v = json_object_get(cfg, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return fail(c, "config: key '%s' must be a boolean", key);
    *dst = json_is_true(v);
    return 0;
}

static const char *const offload_keys[] = {"g2_blocks",
                                           "g3_blocks",
                                           "g3_write_through",
                                           "block_bytes",
                                           "g1_g2_bytes_per_s",
                                           "g2_g3_bytes_per_s",
                                           "permits",
                                           "max_blocks",
                                           "fail_rate",
                                           "seed",
                                           NULL};

/* The largest tier and the most permits a scenario may ask for. */
#define MAX_TIER_BLOCKS  (UINT32_C(1) << 24)
#define MAX_LANE_PERMITS 256

/* A non-negative integer of the offload object in [lo, hi] (absent: *dst unchanged). */
static int offload_uint(struct kvsim_conform_runner *c, json_t *o, const char *key, uint64_t lo,
                        uint64_t hi, uint64_t *dst)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!is_uint(v) || (uint64_t)json_integer_value(v) < lo || (uint64_t)json_integer_value(v) > hi)
        return fail(c, "config: offload: key '%s' must be an integer in [%" PRIu64 ", %" PRIu64 "]",
                    key, lo, hi);
    *dst = (uint64_t)json_integer_value(v);
    return 0;
}

/*
 * The `offload` object: G2/G3 tiers behind G1 (docs/conformance.md). Starts from
 * kvsim_tiers_config_default (the pipeline's lanes, bandwidths and block size) and sets what the
 * object gives; bandwidths and lane shapes apply to both directions of a tier pair.
 */
static int parse_offload(struct kvsim_conform_runner *c, json_t *o, struct kvsim_tiers_config *tc)
{
    kvsim_tiers_config_default(tc);
    if (!json_is_object(o))
        return fail(c, "config: key 'offload' must be an object");
    if (check_keys(c, o, offload_keys, "config: offload"))
        return -1;
    if (!json_object_get(o, "g2_blocks"))
        return fail(c, "config: offload: missing key 'g2_blocks'");
    uint64_t g2 = 0, g3 = 0, bytes = tc->pipe.block_bytes, seed = tc->pipe.seed;
    uint64_t permits = 0, max_blocks = 0;
    if (offload_uint(c, o, "g2_blocks", 1, MAX_TIER_BLOCKS, &g2) ||
        offload_uint(c, o, "g3_blocks", 0, MAX_TIER_BLOCKS, &g3) ||
        offload_uint(c, o, "block_bytes", 0, UINT64_C(1) << 40, &bytes) ||
        offload_uint(c, o, "permits", 1, MAX_LANE_PERMITS, &permits) ||
        offload_uint(c, o, "max_blocks", 1, 64, &max_blocks) ||
        offload_uint(c, o, "seed", 0, INT64_MAX, &seed))
        return -1;
    json_t *v = json_object_get(o, "g3_write_through");
    if (v && !json_is_boolean(v))
        return fail(c, "config: offload: key 'g3_write_through' must be a boolean");
    tc->g3_write_through = json_is_true(v);
    v = json_object_get(o, "fail_rate");
    if (v && (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1))
        return fail(c, "config: offload: key 'fail_rate' must be a number in [0, 1]");
    if (v)
        tc->pipe.fail_rate = json_number_value(v);
    static const char *const bw_keys[2] = {"g1_g2_bytes_per_s", "g2_g3_bytes_per_s"};
    static const enum offload_lane bw_lanes[2][2] = {{OFFLOAD_LANE_G1_G2, OFFLOAD_LANE_G2_G1},
                                                     {OFFLOAD_LANE_G2_G3, OFFLOAD_LANE_G3_G2}};
    for (int k = 0; k < 2; k++) {
        v = json_object_get(o, bw_keys[k]);
        if (!v)
            continue;
        if (!json_is_integer(v))
            return fail(c, "config: offload: key '%s' must be an integer (<= 0: instant)",
                        bw_keys[k]);
        for (int d = 0; d < 2; d++)
            tc->pipe.lanes[bw_lanes[k][d]].bandwidth = json_integer_value(v);
    }
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++) {
        if (permits)
            tc->pipe.lanes[l].permits = (uint32_t)permits;
        if (max_blocks)
            tc->pipe.lanes[l].max_blocks = (uint32_t)max_blocks;
    }
    tc->g2_blocks = (uint32_t)g2;
    tc->g3_blocks = (uint32_t)g3;
    tc->pipe.block_bytes = bytes;
    tc->pipe.seed = seed;
    return 0;
}

/* Reads config into sc (and, when it has `offload`, into tc with *offload set). */
static int parse_config(struct kvsim_conform_runner *c, json_t *cfg, struct sched_config *sc,
                        struct kvsim_tiers_config *tc, bool *offload)
{
    sched_config_default(sc);
    sc->max_num_seqs = 256;
    sc->check_invariants = true;
    sc->enable_kv_events = false;
    *offload = false;
    c->scheduler_checks = true;
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
        cfg_bool(c, cfg, "preempted_victim_guard", &sc->preempted_victim_guard) ||
        cfg_bool(c, cfg, "legacy_partial_alloc", &sc->legacy_partial_alloc))
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
    if (cfg_bool(c, cfg, "check_invariants", &c->check_invariants) ||
        cfg_bool(c, cfg, "check_liveness", &c->check_liveness) ||
        cfg_bool(c, cfg, "scheduler_checks", &c->scheduler_checks))
        return -1;
    json_t *off = json_object_get(cfg, "offload");
    if (off) {
        if (parse_offload(c, off, tc))
            return -1;
        *offload = true;
    }
    json_t *mf = json_object_get(cfg, "max_futile_preemptions");
    if (mf) {
        if (!is_uint(mf))
            return fail(c, "config: key 'max_futile_preemptions' must be a non-negative integer");
        c->has_max_futile = true;
        c->max_futile = (uint64_t)json_integer_value(mf);
    }
    return 0;
}

static const char *const expect_keys[] = {
    "scheduled", "total_scheduled", "new", "resumed", "preempted", "finished", "finish_reason",
    "running", "waiting", "status", "num_computed_tokens", "num_cached_tokens", "output_tokens",
    "free_blocks", "free_queue", "free_queue_head", "ref_count", "hit_blocks", "hit_tokens",
    "blocks", "fail", "ok",
    /* extensions: virtual time and offload */
    "now_ns", "held_blocks", "blocked_on_offload", "pending_transfers", "offload", NULL};

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
    /* extension: virtual time */
    {"advance", {"op", "to_ns", "by_ns", "expect", NULL}, {NULL}},
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

/* Fields of the `offload` expectation (kvsim_tiers_stats, then sched_offload_counters). */
static const char *const offload_fields[] = {"g2_resident",     "g3_resident",
                                             "written_g2",      "written_g3",
                                             "filtered",        "released_by_relief",
                                             "dropped",         "failed_blocks",
                                             "g2_hit_blocks",   "g3_hit_blocks",
                                             "loads",           "failed_loads",
                                             "onboard_wait_ns", "g1_g2_batches",
                                             "g2_g3_batches",   "g3_g2_batches",
                                             "g2_g1_batches",   "blocked",
                                             "retry_now",       "onboarded_tokens",
                                             "g1_miss_blocks",  NULL};

static uint64_t offload_field(const struct kvsim_tiers_stats *t,
                              const struct sched_offload_counters *k, const char *f)
{
    const uint64_t vals[] = {
        t->g2_size,
        t->g3_size,
        t->written_g2,
        t->written_g3,
        t->filtered,
        t->released_by_relief,
        t->dropped,
        t->failed_blocks,
        t->g2_hit_blocks,
        t->g3_hit_blocks,
        t->loads,
        t->failed_loads,
        t->onboard_wait_ns,
        t->lanes[OFFLOAD_LANE_G1_G2].enqueued,
        t->lanes[OFFLOAD_LANE_G2_G3].enqueued,
        t->lanes[OFFLOAD_LANE_G3_G2].enqueued,
        t->lanes[OFFLOAD_LANE_G2_G1].enqueued,
        k->blocked,
        k->retry_now,
        k->onboarded_tokens,
        k->g1_miss_blocks,
    };
    _Static_assert(sizeof vals / sizeof vals[0] + 1 ==
                       sizeof offload_fields / sizeof offload_fields[0],
                   "one value per offload field");
    for (size_t i = 0; offload_fields[i]; i++)
        if (!strcmp(offload_fields[i], f))
            return vals[i];
    return 0;
}

static bool is_string_or_null(json_t *v) { return json_is_string(v) || json_is_null(v); }

/* Type rules of the expect keys. */
static int validate_expect(struct kvsim_conform_runner *c, json_t *ex, const char *where)
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
                 !strcmp(k, "hit_tokens") || !strcmp(k, "now_ns") || !strcmp(k, "held_blocks") ||
                 !strcmp(k, "pending_transfers"))
            ok = is_uint(v);
        else if (!strcmp(k, "blocked_on_offload"))
            ok = is_string_or_null(v);
        else if (!strcmp(k, "offload"))
            ok = is_map_of(v, is_uint);
        else if (!strcmp(k, "fail") || !strcmp(k, "ok"))
            ok = json_is_boolean(v);
        else if (!strcmp(k, "free_queue") || !strcmp(k, "free_queue_head") ||
                 !strcmp(k, "hit_blocks") || !strcmp(k, "blocks"))
            ok = is_uint_array(v);
        else
            ok = is_string_array(v);
        if (!ok)
            return fail(c, "%s: key '%s' has the wrong type", where, k);
        if (!strcmp(k, "offload")) {
            const char *f;
            json_t *fv;
            json_object_foreach(v, f, fv)
            {
                (void)fv;
                if (!in_list(f, offload_fields))
                    return fail(c, "%s: key 'offload': unknown field '%s'", where, f);
            }
        }
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

static int validate_step(struct kvsim_conform_runner *c, json_t *st, size_t k)
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
        else if (!strcmp(key, "to_ns") || !strcmp(key, "by_ns"))
            ok = is_uint(v) && json_integer_value(v) < MAX_NOW_NS;
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
    if (!strcmp(sc->op, "advance") &&
        !json_object_get(st, "to_ns") == !json_object_get(st, "by_ns"))
        return fail(c, "%s: give exactly one of 'to_ns' and 'by_ns'", where);
    return 0;
}

/* ---- execution ----------------------------------------------------------------------------- */

static struct creq *find_req(struct kvsim_conform_runner *c, const char *name)
{
    for (size_t i = 0; i < c->nreqs; i++)
        if (strcmp(c->reqs[i].name, name) == 0)
            return &c->reqs[i];
    return NULL;
}

/* The added request with this id; otherwise NULL, and a failure unless lenient (the caller then
 * drops the reference). */
static struct creq *need_req(struct kvsim_conform_runner *c, const char *name, const char *where)
{
    struct creq *q = find_req(c, name);
    if ((!q || !q->r) && !c->lenient)
        fail(c, "%s: unknown request id '%s'", where, name);
    return q && q->r ? q : NULL;
}

static int op_add(struct kvsim_conform_runner *c, json_t *st, const char *where)
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
    char *name = strdup(id);
    struct creq *na = NULL;
    size_t ncap = c->cap_reqs ? c->cap_reqs * 2 : 16;
    if (name && c->nreqs == c->cap_reqs && (na = realloc(c->reqs, ncap * sizeof *na))) {
        c->reqs = na;
        c->cap_reqs = ncap;
    }
    if (!name || c->nreqs == c->cap_reqs) {
        free(name);
        free(prompt);
        free(stops);
        return fail(c, "out of memory");
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
    q->name = name;
    int rc = sched_add(c->s, &p, &q->r);
    free(prompt);
    free(stops);
    if (rc) {
        free(name);
        return fail(c, "%s: cannot add request '%s': %s", where, id, strerror(-rc));
    }
    /* Seen as "nothing" so that entering WAITING counts as a transition. */
    q->seen_status = SCHED_FINISHED_ABORTED;
    c->nreqs++;
    c->adds++;
    return 0;
}

static json_t *ids_json(struct kvsim_conform_runner *c, struct sched_request *const *reqs, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(c->reqs[reqs[i]->id - 1].name));
    return a;
}

/* Fails with an invariant violation: the scheduler's report plus the request's scenario id. */
static int violation_fail(struct kvsim_conform_runner *c, const char *where,
                          const struct sched_violation *v)
{
    char line[512];
    sched_violation_format(v, line, sizeof line);
    char kind[96];
    snprintf(kind, sizeof kind, "invariant:%s", v->rule);
    if (v->request_id >= 1 && v->request_id <= c->nreqs)
        return fail_kind(c, kind, "%s: %s id='%s'", where, line, c->reqs[v->request_id - 1].name);
    return fail_kind(c, kind, "%s: %s", where, line);
}

/* An errno from the scheduler itself (the runner only makes valid calls): kind
 * "scheduler_error", not the scenario's "error". */
static int sched_error(struct kvsim_conform_runner *c, const char *where, int rc)
{
    if (rc == -EUCLEAN && sched_last_violation(c->s))
        return violation_fail(c, where, sched_last_violation(c->s));
    return fail_kind(c, "scheduler_error", "%s: scheduler error: %s", where, strerror(-rc));
}

static int op_schedule(struct kvsim_conform_runner *c, const char *where)
{
    if (c->nout == MAX_OUTSTANDING)
        return fail(c, "%s: too many schedules without output", where);
    uint64_t preempted0 = sched_num_preemptions(c->s);
    uint32_t deferred0 = sched_num_deferred_frees(c->s);
    int rc;
    struct sched_step *st = sched_schedule(c->s, &rc);
    if (!st)
        return sched_error(c, where, rc);
    c->outstanding[c->nout++] = st;
    c->step = st;
    /* Deferred frees only drain in update: new entries during a schedule are exactly the
     * preempted victims whose blocks stay held behind an in-flight step (#49675). */
    uint32_t deferred1 = sched_num_deferred_frees(c->s);
    c->futile_now = deferred1 > deferred0 ? deferred1 - deferred0 : 0;
    uint64_t preempted = sched_num_preemptions(c->s) - preempted0;
    struct kvsim_conform_stats *k = &c->stats;
    k->schedules++;
    k->scheduled_tokens += st->total_tokens;
    k->preemptions += preempted;
    k->futile_preemptions += c->futile_now;
    if (preempted && st->total_tokens == 0)
        k->zero_progress_schedules++;
    if (c->futile_now > k->max_futile_in_one_schedule)
        k->max_futile_in_one_schedule = c->futile_now;
    return 0;
}

/* Lenient mode: removes the string s from the array named key of obj (drops an emptied key). */
static void drop_from_list(json_t *obj, const char *key, const char *s)
{
    json_t *a = json_object_get(obj, key);
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!strcmp(json_string_value(json_array_get(a, i)), s)) {
            json_array_remove(a, i);
            break;
        }
    if (a && json_array_size(a) == 0)
        json_object_del(obj, key);
}

/* A token that stops nothing: not the request's eos, not one of its stop tokens. */
static kvpool_token filler_token(const struct sched_request *r)
{
    for (kvpool_token t = 0;; t++) {
        bool stops = (int64_t)t == r->eos_token_id;
        for (uint32_t k = 0; k < r->num_stop_token_ids && !stops; k++)
            stops = r->stop_token_ids[k] == t;
        if (!stops)
            return t;
    }
}

static int op_output(struct kvsim_conform_runner *c, json_t *stj, json_t *eff, const char *where)
{
    if (c->nout == 0) {
        if (c->lenient)
            return OP_SKIPPED;
        return fail(c, "%s: no schedule is waiting for its output", where);
    }
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
        uint32_t i = 0;
        while (q && i < n && st->scheduled[i].req != q->r)
            i++;
        if (!q || i == n) {
            if (c->lenient) { /* its add was removed, or the candidate scheduled it elsewhere */
                json_object_del(json_object_get(eff, "sampled"), id);
                continue;
            }
            rc = q ? fail(c, "%s: key 'sampled': request '%s' was not scheduled in that step",
                          where, id)
                   : -1;
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
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        const struct sched_request *r = st->scheduled[i].req;
        if (counts[i] || !st->scheduled[i].samples || sched_status_is_finished(r->status))
            continue;
        /* A model samples one token for every request whose chunk samples. The minimizer's
         * candidates shift what each step schedules, so it supplies one (recorded in the
         * effective step); with check_liveness a scenario must, or a stall it caused itself
         * would pass for a scheduler dead end. */
        if (c->lenient) {
            owned[i] = malloc(sizeof *owned[i]);
            if (!owned[i]) {
                rc = fail(c, "out of memory");
                break;
            }
            owned[i][0] = filler_token(r);
            toks[i] = owned[i];
            counts[i] = 1;
            json_t *sm = json_object_get(eff, "sampled");
            if (!sm) /* `sampled` is optional */
                json_object_set_new(eff, "sampled", sm = json_object());
            json_object_set_new(sm, c->reqs[r->id - 1].name,
                                json_pack("[I]", (json_int_t)owned[i][0]));
        } else if (c->check_liveness) {
            rc = fail(c,
                      "%s: key 'sampled': request '%s' sampled in that step but gets no token "
                      "(check_liveness needs one for every request whose chunk samples)",
                      where, c->reqs[r->id - 1].name);
        }
    }
    json_t *fr = json_object_get(stj, "finished_recving");
    if (rc == 0 && fr) {
        recv = calloc(json_array_size(fr) + 1, sizeof *recv);
        size_t i;
        json_array_foreach(fr, i, v)
        {
            struct creq *q = need_req(c, json_string_value(v), where);
            /* An onboarding from the offload tiers ends with the transfer (an advance); a
             * report of it here would promote the request under the tiers' feet. */
            bool onboarding = q && q->r->offload_load;
            if ((!q || onboarding) && c->lenient) {
                drop_from_list(eff, "finished_recving", json_string_value(v));
                continue;
            }
            if (onboarding) {
                rc = fail(c,
                          "%s: key 'finished_recving': request '%s' is loading from the offload "
                          "tiers: its load ends with its transfer (advance)",
                          where, json_string_value(v));
                break;
            }
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
            if (need_req(c, json_string_value(v), where))
                continue;
            if (!c->lenient) {
                rc = -1;
                break;
            }
            drop_from_list(eff, "finished_sending", json_string_value(v));
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

static int op_abort(struct kvsim_conform_runner *c, json_t *st, json_t *eff, const char *where)
{
    json_t *ids = json_object_get(st, "ids");
    json_t *one = json_object_get(st, "id");
    json_t *list = ids ? json_incref(ids) : json_pack("[O]", one);
    json_t *fin = json_array();
    size_t i, nknown = 0;
    json_t *v;
    int rc = 0;
    json_array_foreach(list, i, v)
    {
        struct creq *q = need_req(c, json_string_value(v), where);
        if (!q && c->lenient) {
            if (ids)
                drop_from_list(eff, "ids", json_string_value(v));
            continue;
        }
        if (!q) {
            rc = -1;
            break;
        }
        nknown++;
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
    if (rc == 0 && nknown == 0 && c->lenient)
        return OP_SKIPPED;
    return rc;
}

static int op_kv_lookup(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    struct creq *q = need_req(c, json_string_value(json_object_get(st, "id")), where);
    if (!q)
        return c->lenient ? OP_SKIPPED : -1;
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

static int op_kv_allocate(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    struct creq *q = need_req(c, json_string_value(json_object_get(st, "id")), where);
    if (!q)
        return c->lenient ? OP_SKIPPED : -1;
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

/* Moves virtual time; with tiers, applies every transfer that ends by then. */
static int op_advance(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    json_t *to = json_object_get(st, "to_ns"), *by = json_object_get(st, "by_ns");
    int64_t t;
    if (to) {
        t = (int64_t)json_integer_value(to);
        if (t < c->now_ns) {
            if (c->lenient) /* a removed step moved time less far: this one is moot */
                return OP_SKIPPED;
            return fail(c, "%s: key 'to_ns': %" PRId64 " is before now (%" PRId64 ")", where, t,
                        c->now_ns);
        }
    } else {
        int64_t d = (int64_t)json_integer_value(by);
        if (d >= MAX_NOW_NS - c->now_ns)
            return fail(c, "%s: key 'by_ns': virtual time would pass %" PRId64, where, MAX_NOW_NS);
        t = c->now_ns + d;
    }
    c->now_ns = t;
    if (!c->tiers)
        return 0;
    int rc = kvsim_tiers_advance_to(c->tiers, t);
    if (rc < 0)
        return fail_kind(c, "offload_error", "%s: offload: advance to %" PRId64 " ns: %s", where, t,
                         strerror(-rc));
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

static struct sched_request *req_of(struct kvsim_conform_runner *c, const char *name)
{
    struct creq *q = find_req(c, name);
    return q ? q->r : NULL;
}

/* Builds the observed value for an expect key, shaped like the expectation. NULL + error when
 * the key cannot be observed after this op. */
static json_t *observe(struct kvsim_conform_runner *c, const char *key, json_t *want,
                       const char *op, const char *where)
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
    if (!strcmp(key, "now_ns"))
        return json_integer(c->now_ns);
    if (!strcmp(key, "held_blocks"))
        return json_integer(kvpool_num_held_only_blocks(pool));
    if (!strcmp(key, "pending_transfers"))
        return json_integer(c->tiers ? kvsim_tiers_pending(c->tiers) : 0);
    if (!strcmp(key, "blocked_on_offload")) {
        struct sched_offload_status os;
        sched_offload_status(c->s, &os);
        return os.blocked ? json_string(c->reqs[os.blocked->id - 1].name) : json_null();
    }
    if (!strcmp(key, "offload")) {
        if (!c->tiers) {
            fail(c, "%s: key 'offload' is only observable with offload tiers (config 'offload')",
                 where);
            return NULL;
        }
        struct kvsim_tiers_stats ts;
        struct sched_offload_counters oc;
        kvsim_tiers_stats(c->tiers, &ts);
        sched_offload_counters(c->s, &oc);
        json_t *m = json_object();
        const char *f;
        json_t *v;
        json_object_foreach(want, f, v)
        {
            (void)v;
            json_object_set_new(m, f, json_integer((json_int_t)offload_field(&ts, &oc, f)));
        }
        return m;
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

static int check_expect(struct kvsim_conform_runner *c, json_t *ex, const char *op, size_t k)
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
            char kind[96];
            snprintf(kind, sizeof kind, "expect:%s", key);
            fail_kind(c, kind, "%s: %s expected %s got %s", where, key, ws, gs);
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

static void trace_step(struct kvsim_conform_runner *c, size_t k, const char *op)
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
    if (c->tiers || c->now_ns) {
        json_object_set_new(t, "now_ns", json_integer(c->now_ns));
        json_object_set_new(t, "held_blocks", json_integer(kvpool_num_held_only_blocks(pool)));
    }
    if (c->tiers) {
        struct sched_offload_status os;
        sched_offload_status(c->s, &os);
        json_object_set_new(t, "pending_transfers", json_integer(kvsim_tiers_pending(c->tiers)));
        json_object_set_new(t, "blocked_on_offload",
                            os.blocked ? json_string(c->reqs[os.blocked->id - 1].name)
                                       : json_null());
    }
    char *line = json_dumps(t, JSON_COMPACT);
    printf("%s\n", line);
    free(line);
    json_decref(t);
}

/* ---- extension rules ------------------------------------------------------------------------ */

/* Counts requests whose status or last ownership transition changed during the op. */
static void count_transitions(struct kvsim_conform_runner *c)
{
    for (size_t i = 0; i < c->nreqs; i++) {
        struct creq *q = &c->reqs[i];
        const struct sched_request *r = q->r;
        if (!r || (r->status == q->seen_status && r->last_transition == q->seen_transition &&
                   r->last_transition_step == q->seen_transition_step))
            continue;
        c->stats.transitions++;
        q->seen_status = r->status;
        q->seen_transition = r->last_transition;
        q->seen_transition_step = r->last_transition_step;
    }
}

static int check_futile(struct kvsim_conform_runner *c, const char *where)
{
    if (!c->has_max_futile || c->stats.futile_preemptions <= c->max_futile)
        return 0;
    const struct sched_step *st = c->step;
    char victims[256] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < st->num_preempted && len < sizeof victims - 1; i++)
        len += (size_t)snprintf(victims + len, sizeof victims - len, "%s%s", i ? "," : "",
                                c->reqs[st->preempted[i]->id - 1].name);
    return fail_kind(c, "futile_preemption",
                     "%s: futile preemption: preempted [%s], %" PRIu64
                     " of them with their free deferred behind an in-flight step, and scheduled "
                     "%" PRIu64 " tokens; %" PRIu64 " futile preemptions so far, "
                     "max_futile_preemptions %" PRIu64,
                     where, victims, c->futile_now, st->total_tokens, c->stats.futile_preemptions,
                     c->max_futile);
}

/*
 * check_liveness - after a schedule: a dead end is a schedule that scheduled no token and
 * preempted nobody while nothing else is in flight (every other outstanding schedule is empty,
 * no deferred free is pending, no async load is unreported, no finished request waits for its
 * load) and requests are unfinished. Then schedule() is at a fixpoint: without an external
 * event (which nothing is waiting for) every later call returns the same empty step.
 */
static int check_liveness(struct kvsim_conform_runner *c, const char *where)
{
    const struct sched_step *st = c->step;
    if (st->total_tokens > 0 || st->num_preempted > 0 || sched_num_unfinished(c->s) == 0 ||
        sched_num_deferred_frees(c->s) > 0)
        return 0;
    for (size_t i = 0; i + 1 < c->nout; i++)
        if (c->outstanding[i]->total_tokens > 0)
            return 0;
    /* A pending transfer is a wake-up: it releases holds or ends a load when time reaches it. */
    if (c->tiers && kvsim_tiers_next_deadline(c->tiers) != OFFLOAD_NEVER)
        return 0;
    for (size_t i = 0; i < c->nreqs; i++) {
        const struct sched_request *r = c->reqs[i].r;
        /* A connector load the scenario has not reported yet (an onboarding from the tiers
         * waits for a transfer, checked above: without one it is stuck). */
        if (r && !r->offload_load &&
            ((r->status == SCHED_WAITING_FOR_REMOTE_KVS && !r->recv_finished) || r->free_delayed))
            return 0;
    }
    struct kvpool *pool = sched_pool(c->s);
    uint32_t free_blocks = kvpool_num_free_blocks(pool);
    uint32_t active = kvpool_num_usable_blocks(pool) - free_blocks;
    struct sched_request *const *rr;
    uint32_t nr = sched_running(c->s, &rr);
    for (uint32_t i = 0; i < nr; i++) {
        const struct sched_request *r = rr[i];
        /* Nothing in flight, yet computed up to its last token: an output withheld the token
         * that its step sampled. A model cannot do that; the scenario is wrong, not the
         * scheduler (and the minimizer must not drift to this). */
        if (r->num_computed_tokens >= sched_request_num_tokens(r) + r->num_output_placeholders)
            return fail(c,
                        "%s: stalled by the scenario: request '%s' never received the token its "
                        "last step sampled (an output must give one to every request whose chunk "
                        "samples)",
                        where, c->reqs[r->id - 1].name);
    }
    struct sched_request *head = sched_waiting_head(c->s);
    if (!head && nr)
        head = rr[0];
    char hs[256] = "no request is queued";
    if (head) {
        uint64_t needs = sched_request_blocks_missing(head, sched_get_config(c->s)->block_size);
        snprintf(hs, sizeof hs, "head %s (%s) needs %" PRIu64 " blocks (holds %" PRIu32 ")",
                 c->reqs[head->id - 1].name, sched_status_name(head->status), needs,
                 head->kv.num_blocks);
    }
    /* Blocks a queued request holds without a computed token: an allocation that stayed
     * committed although the request was not admitted (the legacy partial allocation). */
    char partial[256] = "";
    size_t plen = 0, nparts = 0;
    for (size_t i = 0; i < c->nreqs && plen < sizeof partial; i++) {
        const struct sched_request *r = c->reqs[i].r;
        if (!r || r == head || r->kv.num_blocks == 0 || r->num_computed_tokens > 0 ||
            (r->status != SCHED_WAITING && r->status != SCHED_PREEMPTED))
            continue;
        if (nparts++ == 3) {
            plen += (size_t)snprintf(partial + plen, sizeof partial - plen, ", ...");
            break;
        }
        plen += (size_t)snprintf(partial + plen, sizeof partial - plen,
                                 "%s%s (%s) holds %" PRIu32 " blocks", nparts > 1 ? ", " : "; ",
                                 c->reqs[i].name, sched_status_name(r->status), r->kv.num_blocks);
    }
    if (nparts && plen < sizeof partial)
        snprintf(partial + plen, sizeof partial - plen, " without a computed token");
    return fail_kind(c, "dead_end",
                     "%s: dead end: unfinished=%" PRIu32 " active=%" PRIu32 " free=%" PRIu32
                     ", %s; nothing is in flight%s%s",
                     where, sched_num_unfinished(c->s), active, free_blocks, hs,
                     c->tiers ? " and no transfer is pending" : "", partial);
}

/* The offload side's ownership and transfer bijection (kvsim_tiers_check): kind
 * "invariant:<rule>", the rule being what the check's message starts with. */
static int check_tiers(struct kvsim_conform_runner *c, const char *where)
{
    char msg[512] = "";
    if (!c->tiers || kvsim_tiers_check(c->tiers, msg, sizeof msg) == 0)
        return 0;
    char kind[96];
    size_t n = strcspn(msg, ":");
    snprintf(kind, sizeof kind, "invariant:%.*s", (int)(n < 64 ? n : 64), msg);
    return fail_kind(c, kind, "%s: invariant violation: rule=%s", where, msg);
}

/* The rules that apply after an op that ran (invariants, then progress, then liveness). */
static int check_rules(struct kvsim_conform_runner *c, const char *op, const char *where)
{
    if (c->check_invariants) {
        struct sched_violation v;
        if (sched_check(c->s, &v) != 0)
            return violation_fail(c, where, &v);
        if (check_tiers(c, where))
            return -1;
    }
    bool is_sched = !strcmp(op, "schedule");
    if (is_sched && check_futile(c, where))
        return -1;
    if (is_sched && c->check_liveness && check_liveness(c, where))
        return -1;
    return 0;
}

/* The offload part of the run's statistics (totals so far, and the peak of held blocks). */
static void offload_stats_refresh(struct kvsim_conform_runner *c, bool advanced)
{
    struct kvsim_conform_stats *k = &c->stats;
    struct sched_offload_counters oc;
    struct kvsim_tiers_stats ts;
    sched_offload_counters(c->s, &oc);
    kvsim_tiers_stats(c->tiers, &ts);
    k->offload_runs = 1;
    k->advances += advanced;
    k->virtual_ns = (uint64_t)c->now_ns;
    k->blocked_on_offload = oc.blocked;
    k->retry_now = oc.retry_now;
    k->loads = ts.loads;
    k->failed_loads = ts.failed_loads;
    k->written_g2 = ts.written_g2;
    k->failed_blocks = ts.failed_blocks;
    uint32_t held = kvpool_num_held_only_blocks(sched_pool(c->s));
    if (held > k->max_held_blocks)
        k->max_held_blocks = held;
}

/* Runs one validated step. Returns 0, OP_SKIPPED (lenient: nothing ran) or -1. */
static int run_step(struct kvsim_conform_runner *c, json_t *st, size_t k)
{
    const char *op = json_string_value(json_object_get(st, "op"));
    char where[64];
    snprintf(where, sizeof where, "step %zu (%s)", k, op);
    c->step = NULL;
    json_decref(c->sampled_finished);
    json_decref(c->lookup);
    json_decref(c->alloc);
    c->sampled_finished = c->lookup = c->alloc = NULL;
    c->futile_now = 0;
    json_t *eff = c->lenient ? json_deep_copy(st) : NULL;
    int rc = 0;
    if (!strcmp(op, "add")) {
        rc = op_add(c, st, where);
    } else if (!strcmp(op, "schedule")) {
        rc = op_schedule(c, where);
    } else if (!strcmp(op, "output")) {
        rc = op_output(c, st, eff, where);
    } else if (!strcmp(op, "abort")) {
        rc = op_abort(c, st, eff, where);
    } else if (!strcmp(op, "reset_prefix_cache")) {
        c->op_result = sched_reset_prefix_cache(
            c->s, json_is_true(json_object_get(st, "reset_running_requests")));
        if (c->op_result && c->op_result != -EBUSY)
            rc = sched_error(c, where, c->op_result);
    } else if (!strcmp(op, "check")) {
        struct sched_violation v;
        if (sched_check(c->s, &v) != 0)
            rc = violation_fail(c, where, &v);
        else
            rc = check_tiers(c, where);
    } else if (!strcmp(op, "advance")) {
        rc = op_advance(c, st, where);
    } else if (!strcmp(op, "kv_lookup")) {
        rc = op_kv_lookup(c, st, where);
    } else if (!strcmp(op, "kv_allocate")) {
        rc = op_kv_allocate(c, st, where);
    } else if (!strcmp(op, "kv_free")) {
        struct creq *q = need_req(c, json_string_value(json_object_get(st, "id")), where);
        if (q)
            kvpool_free(sched_pool(c->s), &q->r->kv);
        else
            rc = c->lenient ? OP_SKIPPED : -1;
    }
    if (rc == OP_SKIPPED) {
        json_decref(eff);
        return rc;
    }
    /* The write-through of what the op cached (schedule and output cache blocks; after the
     * others there is nothing to write and this enqueues nothing). */
    if (rc == 0 && c->tiers) {
        int frc = kvsim_tiers_flush(c->tiers);
        if (frc)
            rc = fail_kind(c, "offload_error", "%s: offload: flush: %s", where, strerror(-frc));
    }
    if (c->effective)
        json_array_append_new(c->effective, eff ? eff : json_incref(st));
    else
        json_decref(eff);
    c->stats.ops++;
    count_transitions(c);
    if (c->tiers)
        offload_stats_refresh(c, !strcmp(op, "advance"));
    if (c->trace)
        trace_step(c, k, op);
    if (rc == 0)
        rc = check_rules(c, op, where);
    json_t *ex = json_object_get(st, "expect");
    if (rc == 0 && ex)
        rc = check_expect(c, ex, op, k);
    return rc;
}

/* ---- the runner ---------------------------------------------------------------------------- */

static void fill_result(struct kvsim_conform_runner *c, struct kvsim_conform_result *res)
{
    if (!res)
        return;
    if (!c->failed) { /* the soak asks after every op: keep a pass cheap */
        res->verdict = KVSIM_CONFORM_PASS;
        res->step = -1;
        res->op[0] = res->kind[0] = res->message[0] = 0;
        return;
    }
    res->verdict = c->running ? KVSIM_CONFORM_FAIL : KVSIM_CONFORM_INVALID;
    res->step = c->fail_step;
    snprintf(res->op, sizeof res->op, "%s", c->fail_op);
    snprintf(res->kind, sizeof res->kind, "%s", c->kind);
    snprintf(res->message, sizeof res->message, "%s", c->err);
}

static void mark_failed(struct kvsim_conform_runner *c, long k, json_t *st)
{
    c->failed = true;
    c->fail_step = k;
    const char *op = json_string_value(json_object_get(st, "op"));
    snprintf(c->fail_op, sizeof c->fail_op, "%s", op ? op : "");
}

static void runner_fini(struct kvsim_conform_runner *c)
{
    json_decref(c->sampled_finished);
    json_decref(c->lookup);
    json_decref(c->alloc);
    kvsim_tiers_destroy(c->tiers); /* first: undrained transfers give back holds and loads */
    sched_destroy(c->s);
    for (size_t i = 0; i < c->nreqs; i++)
        free(c->reqs[i].name);
    free(c->reqs);
}

static void runner_init(struct kvsim_conform_runner *c, const char *name,
                        const struct kvsim_conform_options *opt)
{
    memset(c, 0, sizeof *c);
    c->name = name;
    c->fail_step = -1;
    if (opt) {
        c->trace = opt->trace;
        c->lenient = opt->lenient;
        c->effective = opt->effective;
    }
}

static int runner_start(struct kvsim_conform_runner *c, json_t *config)
{
    struct sched_config sc;
    struct kvsim_tiers_config tc;
    bool offload;
    if (parse_config(c, config, &sc, &tc, &offload))
        return -1;
    /* With the check after every op, the scheduler's own boundary checks would only repeat it
     * on the same state (and report the same violation at the same step). */
    sc.check_invariants = !c->check_invariants && c->scheduler_checks;
    int rc;
    if (offload) { /* the tiers first: the scheduler calls into them from its first schedule */
        if ((rc = kvsim_tiers_create(&tc, &c->tiers)) != 0)
            return fail(c, "config: offload: impossible configuration: %s", strerror(-rc));
        sc.offload = &kvsim_tiers_sched_ops;
        sc.offload_ctx = c->tiers;
    }
    rc = sched_create(&sc, &c->s);
    if (rc)
        return fail(c, "config: impossible configuration: %s", strerror(-rc));
    if (c->tiers)
        kvsim_tiers_bind(c->tiers, c->s);
    c->running = true;
    return 0;
}

int kvsim_conform_runner_create(json_t *config, const char *name,
                                const struct kvsim_conform_options *opt,
                                struct kvsim_conform_runner **out, struct kvsim_conform_result *res)
{
    *out = NULL;
    struct kvsim_conform_runner *c = malloc(sizeof *c);
    if (!c)
        return -ENOMEM;
    runner_init(c, name, opt);
    if (runner_start(c, config)) {
        c->failed = true;
        fill_result(c, res);
        runner_fini(c);
        free(c);
        return -1;
    }
    fill_result(c, res);
    *out = c;
    return 0;
}

int kvsim_conform_runner_step(struct kvsim_conform_runner *c, json_t *step,
                              struct kvsim_conform_result *res)
{
    size_t k = c->nsteps;
    int rc = -1;
    if (!c->failed) {
        /* Validation failures count as "invalid" even mid-run: the op itself is malformed. */
        c->running = false;
        rc = validate_step(c, step, k);
        c->running = true;
        if (rc == 0) {
            rc = run_step(c, step, k);
            if (rc == OP_SKIPPED)
                rc = 0;
        } else {
            c->running = false;
        }
        if (rc)
            mark_failed(c, (long)k, step);
        c->nsteps++;
    }
    fill_result(c, res);
    return rc ? -1 : 0;
}

void kvsim_conform_runner_destroy(struct kvsim_conform_runner *c)
{
    if (!c)
        return;
    runner_fini(c);
    free(c);
}

struct sched *kvsim_conform_runner_sched(struct kvsim_conform_runner *c) { return c->s; }

struct sched_request *kvsim_conform_runner_request(const struct kvsim_conform_runner *c,
                                                   const char *id)
{
    for (size_t i = 0; i < c->nreqs; i++)
        if (strcmp(c->reqs[i].name, id) == 0)
            return c->reqs[i].r;
    return NULL;
}

const char *kvsim_conform_runner_request_name(const struct kvsim_conform_runner *c,
                                              const struct sched_request *req)
{
    return req->id >= 1 && req->id <= c->nreqs ? c->reqs[req->id - 1].name : NULL;
}

size_t kvsim_conform_runner_outstanding(const struct kvsim_conform_runner *c,
                                        struct sched_step *const **steps)
{
    *steps = c->outstanding;
    return c->nout;
}

const struct kvsim_conform_stats *kvsim_conform_runner_stats(const struct kvsim_conform_runner *c)
{
    return &c->stats;
}

int64_t kvsim_conform_runner_now(const struct kvsim_conform_runner *c) { return c->now_ns; }

bool kvsim_conform_runner_has_offload(const struct kvsim_conform_runner *c)
{
    return c->tiers != NULL;
}

int64_t kvsim_conform_runner_next_deadline(const struct kvsim_conform_runner *c)
{
    return c->tiers ? kvsim_tiers_next_deadline(c->tiers) : OFFLOAD_NEVER;
}

uint32_t kvsim_conform_runner_pending_transfers(const struct kvsim_conform_runner *c)
{
    return c->tiers ? kvsim_tiers_pending(c->tiers) : 0;
}

void kvsim_conform_stats_add(struct kvsim_conform_stats *a, const struct kvsim_conform_stats *b)
{
    a->ops += b->ops;
    a->transitions += b->transitions;
    a->schedules += b->schedules;
    a->scheduled_tokens += b->scheduled_tokens;
    a->preemptions += b->preemptions;
    a->futile_preemptions += b->futile_preemptions;
    a->zero_progress_schedules += b->zero_progress_schedules;
    if (b->max_futile_in_one_schedule > a->max_futile_in_one_schedule)
        a->max_futile_in_one_schedule = b->max_futile_in_one_schedule;
    a->offload_runs += b->offload_runs;
    a->advances += b->advances;
    a->virtual_ns += b->virtual_ns;
    a->blocked_on_offload += b->blocked_on_offload;
    a->retry_now += b->retry_now;
    a->loads += b->loads;
    a->failed_loads += b->failed_loads;
    a->written_g2 += b->written_g2;
    a->failed_blocks += b->failed_blocks;
    if (b->max_held_blocks > a->max_held_blocks)
        a->max_held_blocks = b->max_held_blocks;
}

/* Top level and config of a whole document, then every step, before anything runs. */
static int validate_doc(struct kvsim_conform_runner *c, json_t *root, json_t **steps)
{
    static const char *const top_keys[] = {"name", "source", "config", "steps", NULL};
    if (!json_is_object(root))
        return fail(c, "the document must be an object");
    json_t *name = json_object_get(root, "name");
    json_t *src = json_object_get(root, "source");
    *steps = json_object_get(root, "steps");
    if (check_keys(c, root, top_keys, "top level"))
        return -1;
    if (!json_is_string(name))
        return fail(c, "top level: key 'name' must be a string");
    if (src && !json_is_string(src))
        return fail(c, "top level: key 'source' must be a string");
    if (!json_is_array(*steps))
        return fail(c, "top level: missing key 'steps' (an array)");
    struct sched_config sc; /* the config's errors come before the steps' */
    struct kvsim_tiers_config tc;
    bool offload;
    if (parse_config(c, json_object_get(root, "config"), &sc, &tc, &offload))
        return -1;
    size_t k;
    json_t *st;
    json_array_foreach(*steps, k, st)
    {
        if (validate_step(c, st, k)) {
            mark_failed(c, (long)k, st);
            return -1;
        }
    }
    return 0;
}

int kvsim_conform_run_json(json_t *doc, const struct kvsim_conform_options *opt,
                           struct kvsim_conform_result *res, struct kvsim_conform_stats *stats)
{
    struct kvsim_conform_runner c;
    json_t *name = json_object_get(doc, "name");
    runner_init(&c, json_is_string(name) ? json_string_value(name) : "", opt);
    json_t *steps = NULL;
    int rc = validate_doc(&c, doc, &steps);
    if (rc == 0)
        rc = runner_start(&c, json_object_get(doc, "config"));
    if (rc == 0) {
        size_t k;
        json_t *st;
        json_array_foreach(steps, k, st)
        {
            int r = run_step(&c, st, k);
            if (r != 0 && r != OP_SKIPPED) {
                mark_failed(&c, (long)k, st);
                rc = -1;
                break;
            }
        }
    }
    c.failed = rc != 0;
    fill_result(&c, res);
    if (stats)
        *stats = c.stats;
    runner_fini(&c);
    return rc ? -1 : 0;
}

/* ---- the command line ---------------------------------------------------------------------- */

/* Runs one file. Returns 0 (pass) or -1 (fail), printing the PASS/FAIL line. */
static int run_file(const char *path, bool trace, bool lenient)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    struct kvsim_conform_result res;
    int rc;
    const char *name = path;
    if (!root) {
        rc = -1;
        memset(&res, 0, sizeof res);
        res.verdict = KVSIM_CONFORM_INVALID;
        snprintf(res.message, sizeof res.message, "line %d, column %d: %s", jerr.line, jerr.column,
                 jerr.text);
    } else {
        json_t *n = json_object_get(root, "name");
        if (json_is_string(n))
            name = json_string_value(n);
        struct kvsim_conform_options opt = {.trace = trace, .lenient = lenient};
        rc = kvsim_conform_run_json(root, &opt, &res, NULL);
    }
    if (rc == 0)
        printf("PASS %s\n", name);
    else if (res.verdict == KVSIM_CONFORM_INVALID)
        printf("FAIL %s: %s: %s\n", name, path, res.message);
    else
        printf("FAIL %s: %s\n", name, res.message);
    json_decref(root);
    return rc;
}

static void conform_usage(FILE *out)
{
    fprintf(out,
            "usage: kvsim conform [--trace] [--lenient] FILE...\n"
            "\n"
            "Runs conformance scenarios (JSON, see docs/conformance.md) against the scheduler\n"
            "core and the G1 pool. Prints PASS/FAIL per file and '<N> passed, <M> failed'.\n"
            "\n"
            "  -t, --trace    print each step's observed decision as a JSON line\n"
            "  -l, --lenient  replay the workload, not the exact decisions: model outputs adapt\n"
            "                 to what each schedule scheduled (the minimizer's mode: sampled\n"
            "                 tokens for unscheduled requests are dropped, a request whose\n"
            "                 chunk sampled gets a token that stops nothing, references to\n"
            "                 unknown requests and outputs with no schedule are dropped)\n"
            "  -h, --help     print this help\n");
}

int kvsim_conform_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"trace", no_argument, NULL, 't'},
        {"lenient", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool trace = false, lenient = false;
    int ch;
    optind = 0; /* 0, not 1: glibc re-reads the ordering mode (main parsed with "+") */
    while ((ch = getopt_long(argc, argv, "tlh", opts, NULL)) != -1) {
        switch (ch) {
        case 't': trace = true; break;
        case 'l': lenient = true; break;
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
        if (run_file(argv[i], trace, lenient) == 0)
            passed++;
        else
            failed++;
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
