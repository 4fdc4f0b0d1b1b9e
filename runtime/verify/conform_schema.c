/*
 * conform_schema.c - strict validation of a scenario document (docs/conformance.md): unknown
 * keys, wrong types and missing fields are errors naming the step and the key; nothing runs
 * before the whole document passed.
 */
#include "runtime/verify/conform_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- strict schema ------------------------------------------------------------------------- */

static bool in_list(const char *key, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (strcmp(key, *allowed) == 0)
            return true;
    return false;
}

int conform__check_keys(struct kvsim_conform_runner *c, json_t *obj, const char *const *allowed,
                        const char *where)
{
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        (void)val;
        if (!in_list(key, allowed))
            return conform__fail(c, "%s: unknown key '%s'", where, key);
    }
    return 0;
}

static bool is_uint(json_t *v) { return json_is_integer(v) && json_integer_value(v) >= 0; }

/* ---- token lists (FORMAT.md: an array, {"repeat", "n"}, {"range"}, {"concat"}) ------------- */

/* A JSON path inside a token list, for messages ("prompt.concat[1].range"). */
struct tokens_path {
    char s[256];
    size_t len;
    size_t key_len; /* the key the list is under ("prompt") */
};

static size_t path_push(struct tokens_path *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends to the path; returns the length to restore with path_pop. */
static size_t path_push(struct tokens_path *p, const char *fmt, ...)
{
    size_t saved = p->len;
    if (p->len < sizeof p->s - 1) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(p->s + p->len, sizeof p->s - p->len, fmt, ap);
        va_end(ap);
        if (w > 0)
            p->len += (size_t)w < sizeof p->s - p->len ? (size_t)w : sizeof p->s - 1 - p->len;
    }
    return saved;
}

static void path_pop(struct tokens_path *p, size_t saved)
{
    p->len = saved;
    p->s[saved] = '\0';
}

static bool is_token_id(json_t *v) { return is_uint(v) && json_integer_value(v) <= UINT32_MAX; }

#define LIMITS_DOC "(docs/conformance.md, Limits)"

/*
 * Checks the shape of a token list and counts the tokens it expands to, without expanding it:
 * the count is exact, each piece is checked against KVSIM_SCENARIO_MAX_LIST_TOKENS before it is
 * added, so nothing here grows with the count. Returns 0 with *count, or the failure naming the
 * piece's path.
 */
static int tokens_measure(struct kvsim_conform_runner *c, json_t *v, unsigned depth,
                          const char *where, struct tokens_path *p, uint64_t *count)
{
    const uint64_t max = KVSIM_SCENARIO_MAX_LIST_TOKENS;
    if (depth > KVSIM_SCENARIO_MAX_LIST_DEPTH)
        return conform__fail(c, "%s: %.*s: token lists nest more than %d deep " LIMITS_DOC, where,
                             (int)p->key_len, p->s, KVSIM_SCENARIO_MAX_LIST_DEPTH);
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e)
        {
            if (!is_token_id(e))
                return conform__fail(c, "%s: %s[%zu] is not a token id (an integer in [0, 2^32))",
                                     where, p->s, i);
        }
        if (json_array_size(v) > max)
            return conform__fail(
                c, "%s: %s has %zu tokens; a token list expands to at most %" PRIu64 " " LIMITS_DOC,
                where, p->s, json_array_size(v), max);
        *count = json_array_size(v);
        return 0;
    }
    if (!json_is_object(v))
        return conform__fail(c, "%s: %s must be an array or an object", where, p->s);
    json_t *rep = json_object_get(v, "repeat"), *rng = json_object_get(v, "range"),
           *cat = json_object_get(v, "concat");
    size_t nkeys = json_object_size(v);
    if ((rep && (nkeys != 2 || !json_object_get(v, "n"))) || (!rep && nkeys != 1) ||
        (!rep && !rng && !cat))
        return conform__fail(c,
                             "%s: %s: expected {\"repeat\": V, \"n\": K}, {\"range\": [A, B]} or "
                             "{\"concat\": [LIST, ...]}",
                             where, p->s);
    if (rep) {
        json_t *k = json_object_get(v, "n");
        if (!is_token_id(rep) || !is_uint(k))
            return conform__fail(c, "%s: %s.repeat needs a token id and a count n >= 0", where,
                                 p->s);
        if ((uint64_t)json_integer_value(k) > max)
            return conform__fail(c,
                                 "%s: %s.repeat: n = %" JSON_INTEGER_FORMAT
                                 " tokens; a token list expands to at most %" PRIu64 " " LIMITS_DOC,
                                 where, p->s, json_integer_value(k), max);
        *count = (uint64_t)json_integer_value(k);
        return 0;
    }
    if (rng) {
        json_t *a = json_array_get(rng, 0), *b = json_array_get(rng, 1);
        if (!json_is_array(rng) || json_array_size(rng) != 2 || !is_uint(a) || !is_uint(b) ||
            json_integer_value(b) < json_integer_value(a) ||
            json_integer_value(b) > (json_int_t)UINT32_MAX + 1)
            return conform__fail(c, "%s: %s.range needs [A, B] with 0 <= A <= B <= 2^32", where,
                                 p->s);
        uint64_t n = (uint64_t)(json_integer_value(b) - json_integer_value(a));
        if (n > max)
            return conform__fail(c,
                                 "%s: %s.range [%" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT
                                 "] is %" PRIu64 " tokens; a token list expands to at most %" PRIu64
                                 " " LIMITS_DOC,
                                 where, p->s, json_integer_value(a), json_integer_value(b), n, max);
        *count = n;
        return 0;
    }
    if (!json_is_array(cat))
        return conform__fail(c, "%s: %s.concat must be an array of token lists", where, p->s);
    uint64_t total = 0;
    size_t i;
    json_t *e;
    json_array_foreach(cat, i, e)
    {
        uint64_t part = 0;
        size_t saved = path_push(p, ".concat[%zu]", i);
        if (tokens_measure(c, e, depth + 1, where, p, &part))
            return conform__failed(c);
        total += part; /* both at most max: no overflow */
        if (total > max)
            return conform__fail(c,
                                 "%s: %s takes the list to %" PRIu64
                                 " tokens; a token list expands to at most %" PRIu64 " " LIMITS_DOC,
                                 where, p->s, total, max);
        path_pop(p, saved);
    }
    *count = total;
    return 0;
}

/* Writes the tokens of a list that tokens_measure accepted at out (exactly its count). */
static kvpool_token *tokens_expand(json_t *v, kvpool_token *out)
{
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) *out++ = (kvpool_token)json_integer_value(e);
        return out;
    }
    json_t *rep = json_object_get(v, "repeat"), *rng = json_object_get(v, "range");
    if (rep) {
        json_int_t n = json_integer_value(json_object_get(v, "n"));
        for (json_int_t i = 0; i < n; i++)
            *out++ = (kvpool_token)json_integer_value(rep);
        return out;
    }
    if (rng) {
        for (json_int_t t = json_integer_value(json_array_get(rng, 0));
             t < json_integer_value(json_array_get(rng, 1)); t++)
            *out++ = (kvpool_token)t;
        return out;
    }
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(v, "concat"), i, e) out = tokens_expand(e, out);
    return out;
}

/*
 * Validates the token list v found under key (a path: "prompt", "sampled.r1") and charges its
 * count to the scenario's budget (KVSIM_SCENARIO_MAX_TOKENS). Called once per list when a step
 * is validated, before anything runs. Returns 0 or the failure naming the path.
 */
int conform__tokens_check(struct kvsim_conform_runner *c, json_t *v, const char *where,
                          const char *key)
{
    struct tokens_path p = {.len = 0};
    path_push(&p, "%s", key);
    p.key_len = p.len;
    uint64_t n = 0;
    if (tokens_measure(c, v, 0, where, &p, &n))
        return conform__failed(c);
    c->list_tokens += n;
    if (c->list_tokens > KVSIM_SCENARIO_MAX_TOKENS)
        return conform__fail(c,
                             "%s: %s takes the scenario's token lists to %" PRIu64
                             " tokens; a scenario's token lists expand to at most %u "
                             "together " LIMITS_DOC,
                             where, key, c->list_tokens, (unsigned)KVSIM_SCENARIO_MAX_TOKENS);
    return 0;
}

/* conform__tokens_check of every list of the object v (request id -> tokens), each under the
 * path "<prefix>.<id>". Returns 0 or the first failure. */
static int tokens_check_map(struct kvsim_conform_runner *c, json_t *v, const char *where,
                            const char *prefix)
{
    const char *id;
    json_t *x;
    json_object_foreach(v, id, x)
    {
        char path[128];
        snprintf(path, sizeof path, "%s.%s", prefix, id);
        int rc = conform__tokens_check(c, x, where, path);
        if (rc)
            return rc;
    }
    return 0;
}

/* Expands a token list (checked or not) and appends it to *out (grown as needed). Returns 0 or
 * the failure. */
int conform__tokens_parse(struct kvsim_conform_runner *c, json_t *v, kvpool_token **out, size_t *n,
                          size_t *cap, const char *where)
{
    struct tokens_path p = {.len = 0};
    path_push(&p, "token list");
    p.key_len = p.len;
    uint64_t count = 0;
    if (tokens_measure(c, v, 0, where, &p, &count))
        return conform__failed(c);
    if (count == 0) /* nothing to append (*out may still be NULL: no pointer arithmetic on it) */
        return 0;
    if (*n + count > *cap) {
        size_t want = *n + (size_t)count;
        kvpool_token *na = realloc(*out, (want ? want : 1) * sizeof *na);
        if (!na)
            return conform__fail(c, "%s: out of memory for %zu tokens", where, want);
        *out = na;
        *cap = want;
    }
    *n = (size_t)(tokens_expand(v, *out + *n) - *out);
    return 0;
}

/* Token list as a JSON array (for comparisons). NULL after a parse error. */
json_t *conform__tokens_json(struct kvsim_conform_runner *c, json_t *v, const char *where)
{
    kvpool_token *t = NULL;
    size_t n = 0, cap = 0;
    if (conform__tokens_parse(c, v, &t, &n, &cap, where)) {
        free(t);
        return NULL;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_integer(t[i]));
    free(t);
    return arr;
}

/* The keys of an engine's configuration (FORMAT.md's `config`): at the top of `config`, and in
 * the two-engine form in its `prefill` and `decode` objects too. */
static const char *const engine_keys[] = {"block_size",
                                          "num_blocks",
                                          "max_num_seqs",
                                          "max_num_batched_tokens",
                                          "max_model_len",
                                          "enable_chunked_prefill",
                                          "enable_prefix_caching",
                                          "policy",
                                          "long_prefill_token_threshold",
                                          "max_num_active_seqs",
                                          "scheduler_reserve_full_isl",
                                          "watermark",
                                          "async_scheduling",
                                          "defer_block_free",
                                          "preempted_victim_guard",
                                          "requires_kv_delivery",
                                          NULL};

static const char *const config_keys[] = {
    "block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
    "enable_chunked_prefill", "enable_prefix_caching", "policy", "long_prefill_token_threshold",
    "max_num_active_seqs", "scheduler_reserve_full_isl", "watermark", "async_scheduling",
    "defer_block_free", "preempted_victim_guard", "requires_kv_delivery",
    /* the fidelity contract the scenario was written for (docs/fidelity/vllm.md) */
    "contract",
    /* extensions (docs/conformance.md) */
    "check_invariants", "check_liveness", "max_futile_preemptions", "scheduler_checks",
    "legacy_partial_alloc", "offload",
    /* the two-engine form: disaggregated prefill -> decode */
    "prefill", "decode", "handoff", NULL};

static int cfg_uint(struct kvsim_conform_runner *c, json_t *cfg, const char *key, uint32_t *dst,
                    const char *where)
{
    json_t *v = json_object_get(cfg, key);
    if (!v)
        return 0;
    if (!is_uint(v) || json_integer_value(v) > UINT32_MAX)
        return conform__fail(c, "%s: key '%s' must be a non-negative integer", where, key);
    *dst = (uint32_t)json_integer_value(v);
    return 0;
}

static int cfg_bool(struct kvsim_conform_runner *c, json_t *cfg, const char *key, bool *dst,
                    const char *where)
{
    json_t *v = json_object_get(cfg, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return conform__fail(c, "%s: key '%s' must be a boolean", where, key);
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
        return conform__fail(
            c, "config: offload: key '%s' must be an integer in [%" PRIu64 ", %" PRIu64 "]", key,
            lo, hi);
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
        return conform__fail(c, "config: key 'offload' must be an object");
    if (conform__check_keys(c, o, offload_keys, "config: offload"))
        return conform__failed(c);
    if (!json_object_get(o, "g2_blocks"))
        return conform__fail(c, "config: offload: missing key 'g2_blocks'");
    uint64_t g2 = 0, g3 = 0, bytes = tc->pipe.block_bytes, seed = tc->pipe.seed;
    uint64_t permits = 0, max_blocks = 0;
    if (offload_uint(c, o, "g2_blocks", 1, MAX_TIER_BLOCKS, &g2) ||
        offload_uint(c, o, "g3_blocks", 0, MAX_TIER_BLOCKS, &g3) ||
        offload_uint(c, o, "block_bytes", 0, UINT64_C(1) << 40, &bytes) ||
        offload_uint(c, o, "permits", 1, MAX_LANE_PERMITS, &permits) ||
        offload_uint(c, o, "max_blocks", 1, 64, &max_blocks) ||
        offload_uint(c, o, "seed", 0, INT64_MAX, &seed))
        return conform__failed(c);
    json_t *v = json_object_get(o, "g3_write_through");
    if (v && !json_is_boolean(v))
        return conform__fail(c, "config: offload: key 'g3_write_through' must be a boolean");
    tc->g3_write_through = json_is_true(v);
    v = json_object_get(o, "fail_rate");
    if (v && (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1))
        return conform__fail(c, "config: offload: key 'fail_rate' must be a number in [0, 1]");
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
            return conform__fail(c, "config: offload: key '%s' must be an integer (<= 0: instant)",
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

/* The engine keys of obj onto sc (where: "config" or "config: prefill" ...). */
static int parse_engine(struct kvsim_conform_runner *c, json_t *obj, struct sched_config *sc,
                        const char *where)
{
    if (cfg_uint(c, obj, "block_size", &sc->block_size, where) ||
        cfg_uint(c, obj, "num_blocks", &sc->num_blocks, where) ||
        cfg_uint(c, obj, "max_num_seqs", &sc->max_num_seqs, where) ||
        cfg_uint(c, obj, "max_num_batched_tokens", &sc->max_num_batched_tokens, where) ||
        cfg_uint(c, obj, "max_model_len", &sc->max_model_len, where) ||
        cfg_uint(c, obj, "long_prefill_token_threshold", &sc->long_prefill_token_threshold,
                 where) ||
        cfg_uint(c, obj, "max_num_active_seqs", &sc->max_num_active_seqs, where) ||
        cfg_bool(c, obj, "enable_chunked_prefill", &sc->enable_chunked_prefill, where) ||
        cfg_bool(c, obj, "enable_prefix_caching", &sc->enable_prefix_caching, where) ||
        cfg_bool(c, obj, "scheduler_reserve_full_isl", &sc->scheduler_reserve_full_isl, where) ||
        cfg_bool(c, obj, "async_scheduling", &sc->async_scheduling, where) ||
        cfg_bool(c, obj, "defer_block_free", &sc->defer_block_free, where) ||
        cfg_bool(c, obj, "preempted_victim_guard", &sc->preempted_victim_guard, where) ||
        cfg_bool(c, obj, "requires_kv_delivery", &sc->requires_kv_delivery, where))
        return conform__failed(c);
    /* The pool's arrays grow with num_blocks and each sequence's partial block with block_size:
     * bounded so that any accepted scenario runs in bounded memory. */
    if (sc->num_blocks > KVSIM_SCENARIO_MAX_BLOCKS)
        return conform__fail(c, "%s: key 'num_blocks' must be at most %u " LIMITS_DOC, where,
                             (unsigned)KVSIM_SCENARIO_MAX_BLOCKS);
    if (sc->block_size > KVSIM_SCENARIO_MAX_BLOCK_SIZE)
        return conform__fail(c, "%s: key 'block_size' must be at most %u " LIMITS_DOC, where,
                             KVSIM_SCENARIO_MAX_BLOCK_SIZE);
    json_t *p = json_object_get(obj, "policy");
    if (p) {
        if (json_is_string(p) && strcmp(json_string_value(p), "fcfs") == 0)
            sc->policy = SCHED_POLICY_FCFS;
        else if (json_is_string(p) && strcmp(json_string_value(p), "priority") == 0)
            sc->policy = SCHED_POLICY_PRIORITY;
        else
            return conform__fail(c, "%s: key 'policy' must be \"fcfs\" or \"priority\"", where);
    }
    if (sc->max_num_active_seqs && sc->vllm_contract < 2)
        return conform__fail(c, "%s: key 'max_num_active_seqs' needs contract 2 (#56758)", where);
    if (sc->max_num_active_seqs > sc->max_num_seqs)
        return conform__fail(c, "%s: key 'max_num_active_seqs' must be at most max_num_seqs (%u)",
                             where, sc->max_num_seqs);
    json_t *w = json_object_get(obj, "watermark");
    if (w) {
        if (!json_is_number(w) || json_number_value(w) < 0 || json_number_value(w) >= 1)
            return conform__fail(c, "%s: key 'watermark' must be a number in [0, 1)", where);
        sc->watermark = json_number_value(w);
    }
    return 0;
}

/*
 * The rules sched_create applies to an engine's configuration, named by key (sched_create only
 * says -EINVAL). where: "config" or "config: prefill" ... Returns 0 or the failure.
 */
int conform__engine_config_check(struct kvsim_conform_runner *c, const struct sched_config *sc,
                                 const char *where)
{
    if (sc->num_blocks < 2)
        return conform__fail(c, "%s: key 'num_blocks' must be at least 2 (got %u)", where,
                             sc->num_blocks);
    static const struct {
        const char *key;
        size_t off;
    } ones[] = {{"block_size", offsetof(struct sched_config, block_size)},
                {"max_num_seqs", offsetof(struct sched_config, max_num_seqs)},
                {"max_num_batched_tokens", offsetof(struct sched_config, max_num_batched_tokens)}};
    for (size_t i = 0; i < sizeof ones / sizeof ones[0]; i++)
        if (*(const uint32_t *)((const char *)sc + ones[i].off) == 0)
            return conform__fail(c, "%s: key '%s' must be at least 1", where, ones[i].key);
    uint32_t mml = sc->max_model_len ? sc->max_model_len : sc->max_num_batched_tokens;
    if (!sc->enable_chunked_prefill && sc->max_num_batched_tokens < mml)
        return conform__fail(c,
                             "%s: key 'max_num_batched_tokens' (%u) must be at least "
                             "max_model_len (%u) without chunked prefill (vLLM refuses it too)",
                             where, sc->max_num_batched_tokens, mml);
    return 0;
}

static const char *const handoff_keys[] = {"abort_timeout_ns",   "release", "gbps", "latency_ns",
                                           "kv_bytes_per_token", NULL};

/*
 * The `handoff` object of the two-engine form: the abort timeout (0 or absent: a pin never
 * expires), when the source is released ("pinned": when its transfer ends, or at the abort;
 * "immediate": at the pin, the what-if without stranding) and the transfer model (defaults:
 * 1 GB/s, no latency, 1000 bytes a token: a token takes 1 us).
 */
static int parse_handoff(struct kvsim_conform_runner *c, json_t *h)
{
    struct conform_handoff_cfg *hc = &c->hcfg;
    *hc = (struct conform_handoff_cfg){
        .xfer = {.gbps = 1.0, .latency_ns = 0, .kv_bytes_per_token = 1000}};
    if (!h)
        return 0;
    if (!json_is_object(h))
        return conform__fail(c, "config: key 'handoff' must be an object");
    if (conform__check_keys(c, h, handoff_keys, "config: handoff"))
        return conform__failed(c);
    json_t *v = json_object_get(h, "abort_timeout_ns");
    if (v && (!is_uint(v) || json_integer_value(v) >= MAX_NOW_NS))
        return conform__fail(c, "config: handoff: key 'abort_timeout_ns' must be an integer in "
                                "[0, 2^62) (0: a pin never expires)");
    hc->abort_timeout_ns = v ? (int64_t)json_integer_value(v) : 0;
    v = json_object_get(h, "release");
    if (v && (!json_is_string(v) || (strcmp(json_string_value(v), "pinned") != 0 &&
                                     strcmp(json_string_value(v), "immediate") != 0)))
        return conform__fail(c,
                             "config: handoff: key 'release' must be \"pinned\" or \"immediate\"");
    hc->release_immediately = v && !strcmp(json_string_value(v), "immediate");
    v = json_object_get(h, "gbps");
    if (v && (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1e9))
        return conform__fail(c, "config: handoff: key 'gbps' must be a number in (0, 1e9]");
    if (v)
        hc->xfer.gbps = json_number_value(v);
    v = json_object_get(h, "latency_ns");
    if (v && (!is_uint(v) || json_integer_value(v) > (json_int_t)(INT64_C(1) << 50)))
        return conform__fail(c,
                             "config: handoff: key 'latency_ns' must be an integer in [0, 2^50]");
    if (v)
        hc->xfer.latency_ns = (int64_t)json_integer_value(v);
    v = json_object_get(h, "kv_bytes_per_token");
    if (v && (!is_uint(v) || json_integer_value(v) > (json_int_t)(INT64_C(1) << 32)))
        return conform__fail(c, "config: handoff: key 'kv_bytes_per_token' must be an integer in "
                                "[0, 2^32]");
    if (v)
        hc->xfer.kv_bytes_per_token = (uint64_t)json_integer_value(v);
    return 0;
}

/* An engine object of the two-engine form onto sc (which holds the top-level keys). */
static int parse_engine_object(struct kvsim_conform_runner *c, json_t *o, const char *name,
                               struct sched_config *sc)
{
    char where[32];
    snprintf(where, sizeof where, "config: %s", name);
    if (!json_is_object(o))
        return conform__fail(c, "config: key '%s' must be an object (an engine's keys)", name);
    if (conform__check_keys(c, o, engine_keys, where) || parse_engine(c, o, sc, where))
        return conform__failed(c);
    return 0;
}

/* Reads config into cc: the engine keys (both engines' in the two-engine form, the top-level
 * ones shared and each engine object's over them), the runner's rules, the tiers, the handoff. */
int conform__parse_config(struct kvsim_conform_runner *c, json_t *cfg, struct conform_config *cc)
{
    struct sched_config *sc = &cc->sc[0];
    sched_config_default(sc);
    sc->max_num_seqs = 256;
    sc->check_invariants = true;
    sc->enable_kv_events = false;
    cc->offload = false;
    c->scheduler_checks = true;
    c->disagg = false;
    c->neng = 1;
    parse_handoff(c, NULL);
    if (!cfg) {
        cc->sc[1] = cc->sc[0];
        return 0;
    }
    if (!json_is_object(cfg))
        return conform__fail(c, "config: must be an object");
    if (conform__check_keys(c, cfg, config_keys, "config"))
        return conform__failed(c);
    json_t *ct = json_object_get(cfg, "contract"); /* first: the engine keys depend on it */
    if (ct) {
        if (!json_is_integer(ct) || json_integer_value(ct) < SCHED_CONTRACT_MIN ||
            json_integer_value(ct) > SCHED_CONTRACT_LATEST)
            return conform__fail(c, "config: key 'contract' must be an integer in [%d, %d]",
                                 SCHED_CONTRACT_MIN, SCHED_CONTRACT_LATEST);
        sc->vllm_contract = (uint32_t)json_integer_value(ct);
    }
    if (parse_engine(c, cfg, sc, "config") ||
        cfg_bool(c, cfg, "legacy_partial_alloc", &sc->legacy_partial_alloc, "config"))
        return conform__failed(c);
    if (cfg_bool(c, cfg, "check_invariants", &c->check_invariants, "config") ||
        cfg_bool(c, cfg, "check_liveness", &c->check_liveness, "config") ||
        cfg_bool(c, cfg, "scheduler_checks", &c->scheduler_checks, "config"))
        return conform__failed(c);
    json_t *off = json_object_get(cfg, "offload");
    if (off) {
        if (parse_offload(c, off, &cc->tc))
            return conform__failed(c);
        cc->offload = true;
    }
    json_t *mf = json_object_get(cfg, "max_futile_preemptions");
    if (mf) {
        if (!is_uint(mf))
            return conform__fail(
                c, "config: key 'max_futile_preemptions' must be a non-negative integer");
        c->has_max_futile = true;
        c->max_futile = (uint64_t)json_integer_value(mf);
    }
    json_t *pe = json_object_get(cfg, "prefill"), *de = json_object_get(cfg, "decode");
    json_t *ho = json_object_get(cfg, "handoff");
    cc->sc[1] = cc->sc[0];
    if (!pe && !de && !ho)
        return 0;
    if (!pe || !de)
        return conform__fail(c, "config: the two-engine form needs both 'prefill' and 'decode'%s",
                             pe || de ? "" : " (key 'handoff' is part of it)");
    if (off)
        return conform__fail(c, "config: key 'offload' is not supported in the two-engine form");
    c->disagg = true;
    c->neng = 2;
    sc->enable_kv_events = true; /* kv_events: what a pool publishes */
    cc->sc[1] = *sc;
    /* The prefill engine's connector is a KV producer (vLLM's NixlConnector, kv_producer). */
    cc->sc[CONFORM_PREFILL].requires_kv_delivery = true;
    if (parse_engine_object(c, pe, "prefill", &cc->sc[CONFORM_PREFILL]) ||
        parse_engine_object(c, de, "decode", &cc->sc[CONFORM_DECODE]) || parse_handoff(c, ho))
        return conform__failed(c);
    return 0;
}

static const char *const expect_keys[] = {
    "scheduled", "total_scheduled", "new", "resumed", "preempted", "finished", "finish_reason",
    "running", "waiting", "status", "num_computed_tokens", "num_cached_tokens", "output_tokens",
    "free_blocks", "free_queue", "free_queue_head", "ref_count", "hit_blocks", "hit_tokens",
    "blocks", "fail", "ok",
    /* extensions: virtual time and offload */
    "now_ns", "held_blocks", "blocked_on_offload", "pending_transfers", "offload",
    /* extensions: the disaggregated handoff (pinned_blocks, pins, active_blocks: any form) */
    "pinned_blocks", "pins", "active_blocks", "handoff", "ignored", "rejected", "open_handoffs",
    "kv_events", "prefill", "decode", NULL};

/* Keys observed on one engine: in the two-engine form they need the op's engine, or go under
 * `prefill` / `decode`. */
static const char *const engine_expect_keys[] = {"scheduled",
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
                                                 "held_blocks",
                                                 "blocked_on_offload",
                                                 "pinned_blocks",
                                                 "pins",
                                                 "active_blocks",
                                                 "kv_events",
                                                 NULL};

/* Keys that exist only in the two-engine form. */
static const char *const two_engine_keys[] = {"handoff",   "ignored", "rejected", "open_handoffs",
                                              "kv_events", "prefill", "decode",   NULL};

bool conform__is_engine_key(const char *key) { return in_list(key, engine_expect_keys); }

struct op_schema {
    const char *op;
    const char *const keys[16];
    const char *const required[4];
    bool needs_engine; /* two-engine form: the op acts on one engine, named by "engine" */
};

static const struct op_schema op_schemas[] = {
    {"add",
     {"op", "id", "prompt", "max_tokens", "priority", "arrival", "min_tokens", "stop_token_ids",
      "eos_token_id", "ignore_eos", "cache_salt", "prompt_logprobs", "external", "engine", NULL},
     {"id", "prompt", "max_tokens", NULL},
     false},
    {"schedule", {"op", "expect", "engine", NULL}, {NULL}, true},
    {"output",
     {"op", "sampled", "finished_recving", "finished_sending", "expect", "engine", NULL},
     {NULL},
     true},
    {"abort", {"op", "id", "ids", "expect", NULL}, {NULL}, false},
    {"reset_prefix_cache",
     {"op", "reset_running_requests", "expect", "engine", NULL},
     {NULL},
     true},
    {"check", {"op", "expect", "engine", NULL}, {"expect", NULL}, false},
    {"kv_lookup", {"op", "id", "expect", "engine", NULL}, {"id", NULL}, true},
    {"kv_allocate",
     {"op", "id", "num_new_tokens", "use_hits", "expect", "engine", NULL},
     {"id", "num_new_tokens", NULL},
     true},
    {"kv_free", {"op", "id", "expect", "engine", NULL}, {"id", NULL}, true},
    /* extension: virtual time */
    {"advance", {"op", "to_ns", "by_ns", "expect", NULL}, {NULL}, false},
    /* extension: the disaggregated handoff (two-engine form) */
    {"route", {"op", "id", "expect", NULL}, {"id", NULL}, false},
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

uint64_t conform__offload_field(const struct kvsim_tiers_stats *t,
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

/* Fields of a `handoff` expectation's object form (struct kvsim_handoff). */
static const char *const handoff_fields[] = {"state",           "pin_ns",
                                             "deadline_ns",     "routed_ns",
                                             "reserved_ns",     "transfer_start_ns",
                                             "transfer_end_ns", "source_released_ns",
                                             "end_ns",          "pinned_blocks",
                                             "pinned_tokens",   "transfer_tokens",
                                             "transfer_bytes",  NULL};

static const char *const kv_event_fields[] = {"stored", "removed", "cleared", NULL};

/* A handoff state name (kvsim_handoff_state_name). */
static bool is_handoff_state(const char *name)
{
    for (int s = KVSIM_HANDOFF_NONE; s <= KVSIM_HANDOFF_ABORTED; s++)
        if (!strcmp(name, kvsim_handoff_state_name((enum kvsim_handoff_state)s)))
            return true;
    return false;
}

/* One entry of `handoff`: a state name, or an object of handoff fields (instants: an integer
 * or null for "not happened"; deadline_ns null: never). */
static int validate_handoff_entry(struct kvsim_conform_runner *c, const char *id, json_t *v,
                                  const char *where)
{
    json_t *st = json_is_object(v) ? json_object_get(v, "state") : v;
    if (!json_is_object(v) && !json_is_string(v))
        return conform__fail(c, "%s: key 'handoff': '%s' must be a state name or an object", where,
                             id);
    if (st && (!json_is_string(st) || !is_handoff_state(json_string_value(st))))
        return conform__fail(c, "%s: key 'handoff': '%s': unknown state %s", where, id,
                             json_is_string(st) ? json_string_value(st) : "(not a string)");
    if (!json_is_object(v))
        return 0;
    const char *f;
    json_t *fv;
    json_object_foreach(v, f, fv)
    {
        if (!in_list(f, handoff_fields))
            return conform__fail(c, "%s: key 'handoff': '%s': unknown field '%s'", where, id, f);
        bool instant = strlen(f) > 3 && !strcmp(f + strlen(f) - 3, "_ns");
        if (strcmp(f, "state") != 0 &&
            !(instant ? json_is_integer(fv) || json_is_null(fv) : is_uint(fv)))
            return conform__fail(c, "%s: key 'handoff': '%s': field '%s' has the wrong type", where,
                                 id, f);
    }
    return 0;
}

/*
 * Type rules of the expect keys. op_engine: the op's engine (CONFORM_NO_ENGINE: none); in the
 * two-engine form, a key observed on one engine needs one (or goes under `prefill` / `decode`,
 * validated with sub set: engine keys only).
 */
static int validate_expect(struct kvsim_conform_runner *c, json_t *ex, const char *where,
                           int op_engine, bool sub)
{
    if (!json_is_object(ex))
        return conform__fail(c, "%s: key '%s' must be an object", where,
                             sub ? conform__engine_name(op_engine) : "expect");
    if (conform__check_keys(c, ex, expect_keys, where))
        return conform__failed(c);
    const char *k;
    json_t *v;
    json_object_foreach(ex, k, v)
    {
        bool ok;
        if (!c->disagg && in_list(k, two_engine_keys))
            return conform__fail(c,
                                 "%s: key '%s' needs the two-engine form (config 'prefill' and "
                                 "'decode')",
                                 where, k);
        if (sub && !conform__is_engine_key(k))
            return conform__fail(
                c, "%s: key '%s' is not an engine's: it goes at the top of 'expect'", where, k);
        if (c->disagg && !sub && op_engine == CONFORM_NO_ENGINE && conform__is_engine_key(k) &&
            strcmp(k, "finished") != 0 && strcmp(k, "pinned_blocks") != 0 && strcmp(k, "pins") != 0)
            return conform__fail(c,
                                 "%s: key '%s' is observed on one engine: give the op an "
                                 "'engine' or put the key under 'prefill' or 'decode'",
                                 where, k);
        if (!strcmp(k, "prefill") || !strcmp(k, "decode")) {
            char sw[96];
            snprintf(sw, sizeof sw, "%s: %s", where, k);
            if (validate_expect(c, v, sw, !strcmp(k, "prefill") ? CONFORM_PREFILL : CONFORM_DECODE,
                                true))
                return conform__failed(c);
            continue;
        }
        if (!strcmp(k, "handoff")) {
            if (!json_is_object(v))
                return conform__fail(c, "%s: key 'handoff' has the wrong type", where);
            const char *id;
            json_t *hv;
            json_object_foreach(v, id, hv)
            {
                if (validate_handoff_entry(c, id, hv, where))
                    return conform__failed(c);
            }
            continue;
        }
        if (!strcmp(k, "scheduled") || !strcmp(k, "num_computed_tokens") ||
            !strcmp(k, "num_cached_tokens") || !strcmp(k, "ref_count"))
            ok = is_map_of(v, is_uint);
        else if (!strcmp(k, "finish_reason") || !strcmp(k, "status"))
            ok = is_map_of(v, is_string);
        else if (!strcmp(k, "output_tokens")) {
            ok = json_is_object(v);
            if (ok && tokens_check_map(c, v, where, "expect.output_tokens"))
                return conform__failed(c);
        } else if (!strcmp(k, "total_scheduled") || !strcmp(k, "free_blocks") ||
                   !strcmp(k, "hit_tokens") || !strcmp(k, "now_ns") || !strcmp(k, "held_blocks") ||
                   !strcmp(k, "pending_transfers") || !strcmp(k, "pinned_blocks") ||
                   !strcmp(k, "pins") || !strcmp(k, "active_blocks") || !strcmp(k, "open_handoffs"))
            ok = is_uint(v);
        else if (!strcmp(k, "blocked_on_offload"))
            ok = is_string_or_null(v);
        else if (!strcmp(k, "offload") || !strcmp(k, "kv_events"))
            ok = is_map_of(v, is_uint);
        else if (!strcmp(k, "fail") || !strcmp(k, "ok"))
            ok = json_is_boolean(v);
        else if (!strcmp(k, "free_queue") || !strcmp(k, "free_queue_head") ||
                 !strcmp(k, "hit_blocks") || !strcmp(k, "blocks"))
            ok = is_uint_array(v);
        else
            ok = is_string_array(v);
        if (!ok)
            return conform__fail(c, "%s: key '%s' has the wrong type", where, k);
        if (!strcmp(k, "offload") || !strcmp(k, "kv_events")) {
            const char *f;
            json_t *fv;
            json_object_foreach(v, f, fv)
            {
                (void)fv;
                if (!in_list(f, !strcmp(k, "offload") ? offload_fields : kv_event_fields))
                    return conform__fail(c, "%s: key '%s': unknown field '%s'", where, k, f);
            }
        }
        if (!strcmp(k, "status")) {
            const char *id;
            json_t *st;
            json_object_foreach(v, id, st)
            {
                if (sched_status_parse(json_string_value(st)) < 0)
                    return conform__fail(c, "%s: key 'status': unknown state '%s'", where,
                                         json_string_value(st));
            }
        }
    }
    return 0;
}

/* The op's engine (two-engine form): CONFORM_NO_ENGINE when it names none, -2 (with the failure
 * recorded) when the key is misused. */
static int step_engine(struct kvsim_conform_runner *c, json_t *st, const struct op_schema *sc,
                       const char *where)
{
    json_t *e = json_object_get(st, "engine");
    if (!c->disagg) {
        if (e) {
            conform__fail(c,
                          "%s: key 'engine' needs the two-engine form (config 'prefill' and "
                          "'decode')",
                          where);
            return -2;
        }
        return CONFORM_NO_ENGINE;
    }
    if (!e) {
        if (sc->needs_engine) {
            conform__fail(c, "%s: missing key 'engine' (\"prefill\" or \"decode\")", where);
            return -2;
        }
        return CONFORM_NO_ENGINE;
    }
    if (json_is_string(e) && !strcmp(json_string_value(e), "prefill"))
        return CONFORM_PREFILL;
    if (json_is_string(e) && !strcmp(json_string_value(e), "decode"))
        return CONFORM_DECODE;
    conform__fail(c, "%s: key 'engine' must be \"prefill\" or \"decode\"", where);
    return -2;
}

int conform__validate_step(struct kvsim_conform_runner *c, json_t *st, size_t k)
{
    char where[64];
    snprintf(where, sizeof where, "step %zu", k);
    if (!json_is_object(st))
        return conform__fail(c, "%s: must be an object", where);
    json_t *op = json_object_get(st, "op");
    if (!json_is_string(op))
        return conform__fail(c, "%s: missing key 'op' (a string)", where);
    const struct op_schema *sc = find_schema(json_string_value(op));
    if (!sc)
        return conform__fail(c, "%s: key 'op': unknown operation '%s'", where,
                             json_string_value(op));
    snprintf(where, sizeof where, "step %zu (%s)", k, sc->op);
    if (!strcmp(sc->op, "route") && !c->disagg)
        return conform__fail(c,
                             "%s: the route op needs the two-engine form (config 'prefill' and "
                             "'decode')",
                             where);
    if (!strcmp(sc->op, "abort") && c->disagg && json_object_get(st, "engine"))
        return conform__fail(c,
                             "%s: key 'engine': an abort cancels the request on both engines "
                             "(and its handoff)",
                             where);
    if (conform__check_keys(c, st, sc->keys, where))
        return conform__failed(c);
    for (size_t i = 0; sc->required[i]; i++)
        if (!json_object_get(st, sc->required[i]))
            return conform__fail(c, "%s: missing key '%s'", where, sc->required[i]);
    int eng = step_engine(c, st, sc, where);
    if (eng == -2)
        return conform__failed(c);
    if (!strcmp(sc->op, "add") && c->disagg && eng == CONFORM_NO_ENGINE &&
        json_object_get(st, "external"))
        return conform__fail(c,
                             "%s: key 'external': a disaggregated add takes none (its decode "
                             "loads the prompt from the prefill engine; give 'engine' for a "
                             "plain request)",
                             where);
    const char *key;
    json_t *v;
    json_object_foreach(st, key, v)
    {
        bool ok = true;
        if (!strcmp(key, "op") || !strcmp(key, "engine"))
            continue;
        if (!strcmp(key, "expect")) {
            if (validate_expect(c, v, where, eng, false))
                return conform__failed(c);
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
        else if (!strcmp(key, "stop_token_ids")) {
            if (!is_uint_array(v))
                ok = false;
            else if (conform__tokens_check(c, v, where, key))
                return conform__failed(c);
        } else if (!strcmp(key, "sampled")) {
            ok = json_is_object(v);
            if (ok && tokens_check_map(c, v, where, "sampled"))
                return conform__failed(c);
        } else if (!strcmp(key, "prompt")) {
            if (conform__tokens_check(c, v, where, key))
                return conform__failed(c);
        } else if (!strcmp(key, "external")) {
            static const char *const ext_keys[] = {"tokens", "async", NULL};
            ok = json_is_object(v) && conform__check_keys(c, v, ext_keys, where) == 0 &&
                 is_uint(json_object_get(v, "tokens")) &&
                 json_integer_value(json_object_get(v, "tokens")) <= UINT32_MAX &&
                 (!json_object_get(v, "async") || json_is_boolean(json_object_get(v, "async")));
            if (!ok && c->err[0])
                return conform__failed(c);
        }
        if (!ok)
            return conform__fail(c, "%s: key '%s' has the wrong type", where, key);
    }
    if (!strcmp(sc->op, "abort") && !json_object_get(st, "id") == !json_object_get(st, "ids"))
        return conform__fail(c, "%s: give exactly one of 'id' and 'ids'", where);
    if (!strcmp(sc->op, "advance") &&
        !json_object_get(st, "to_ns") == !json_object_get(st, "by_ns"))
        return conform__fail(c, "%s: give exactly one of 'to_ns' and 'by_ns'", where);
    return 0;
}
