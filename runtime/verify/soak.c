/*
 * soak.c - seeded soaks (verify.h, behind `kvsim soak`): seeded randomized runs of the scheduler
 * core (and, in part of the seeds, its G2/G3 offload tiers in virtual time) with every invariant,
 * the liveness rule and the #49675 progress rule checked after every op (see docs/soak.md).
 *
 * A seed picks one value per matrix dimension (the table below), then drives the scheduler by
 * building a scenario as it goes: each op is appended to the scenario's steps and executed at
 * once by the in-process scenario runner (runtime/verify/verify.h), so the file written for a
 * failing seed is exactly what ran and `kvsim conform` replays it step for step. Adding a dimension
 * is a row in `dims` (plus, for a workload knob, its use in the generator); adding an op kind is
 * one gen_* function called from drive(). With tiers, gen_time_for_output moves virtual time before
 * each output (a step's duration, or to the next transfer end when the engine idles).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool/base.h"
#include "runtime/verify/verify.h"
#include "sched/sched.h"

/* ---- random numbers: splitmix64, one state per seed, no global state ----------------------- */

struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r) { return base_splitmix64_next(&r->s); }

/* Uniform in [0, n) (the modulo bias is irrelevant at these sizes); 0 when n is 0. */
static uint64_t rng_below(struct rng *r, uint64_t n) { return n ? rng_next(r) % n : 0; }
/* Uniform in [lo, hi]. */
static uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
    return hi > lo ? lo + rng_below(r, hi - lo + 1) : lo;
}
static bool rng_per(struct rng *r, int64_t p, uint64_t scale)
{
    return (int64_t)rng_below(r, scale) < p;
}

/* ---- the matrix ----------------------------------------------------------------------------- */

enum dim_type {
    T_UINT,     /* an integer in [min, max] */
    T_BOOL,     /* 0 / 1 */
    T_POLICY,   /* 0 fcfs, 1 priority */
    T_FRACTION, /* thousandths: written as value / 1000 (watermark) */
    T_OFF_UINT, /* an integer, or -1 = "off" (the key is left out) */
    T_ARRIVAL,  /* enum arrival */
};

enum arrival { ARRIVAL_BURST = 0, ARRIVAL_TRICKLE, ARRIVAL_WAVES };
static const char *const arrival_names[] = {"burst", "trickle", "waves"};

#define END      INT64_MIN /* ends a value list */
#define MAX_VALS 10

struct dim {
    const char *name;
    enum dim_type type;
    bool config; /* a scenario config key (same name), else a workload knob */
    int64_t min, max;
    int64_t small[MAX_VALS]; /* values a seed picks from, uniformly (repeats weigh) */
    int64_t full[MAX_VALS];
    const char *doc;
};

/* Ranges keep --set values meaningful; the lists are what seeds pick from. One row per
 * dimension reads better than what the formatter would make of it. */
/* clang-format off */
static const struct dim dims[KVSIM_NUM_DIMS] = {
    /* scheduler configuration keys */
    [KVSIM_DIM_BLOCK_SIZE] = {"block_size", T_UINT, true, 1, 64,
        {2, 4, 16, END}, {1, 2, 4, 8, 16, END}, "tokens per KV block"},
    [KVSIM_DIM_NUM_BLOCKS] = {"num_blocks", T_UINT, true, 3, 100000,
        {8, 12, 16, 24, 32, 64, END}, {6, 8, 12, 16, 24, 32, 64, 128, 256, END},
        "pool blocks including the null block"},
    [KVSIM_DIM_MAX_NUM_SEQS] = {"max_num_seqs", T_UINT, true, 1, 100000,
        {1, 2, 4, 8, 256, END}, {1, 2, 3, 4, 6, 8, 16, 256, END}, "running-set cap"},
    [KVSIM_DIM_MAX_NUM_BATCHED_TOKENS] = {"max_num_batched_tokens", T_UINT, true, 1, 1 << 20,
        {8, 16, 32, 64, 256, END}, {4, 8, 16, 32, 64, 128, 512, END},
        "per-step token budget (raised to max_model_len without chunked prefill)"},
    [KVSIM_DIM_CHUNKED_PREFILL] = {"enable_chunked_prefill", T_BOOL, true, 0, 1,
        {1, 1, 0, END}, {1, 1, 0, END}, "chunked prefill"},
    [KVSIM_DIM_PREFIX_CACHING] = {"enable_prefix_caching", T_BOOL, true, 0, 1,
        {1, 1, 1, 0, END}, {1, 1, 1, 0, END}, "prefix caching"},
    [KVSIM_DIM_POLICY] = {"policy", T_POLICY, true, 0, 1,
        {0, 1, END}, {0, 1, END}, "fcfs or priority (priorities 0..3 at random)"},
    [KVSIM_DIM_LONG_PREFILL] = {"long_prefill_token_threshold", T_UINT, true, 0, 1 << 20,
        {0, 0, 0, 8, END}, {0, 0, 4, 8, 32, END}, "prefill tokens per step (0 = no cap)"},
    [KVSIM_DIM_FULL_ISL] = {"scheduler_reserve_full_isl", T_BOOL, true, 0, 1,
        {1, 1, 0, END}, {1, 1, 0, END}, "full-sequence admission gate"},
    [KVSIM_DIM_WATERMARK] = {"watermark", T_FRACTION, true, 0, 999,
        {0, 0, 50, END}, {0, 0, 20, 100, END}, "fraction of blocks held back"},
    [KVSIM_DIM_ASYNC] = {"async_scheduling", T_BOOL, true, 0, 1,
        {0, 1, END}, {0, 1, END}, "schedule ahead of the output (placeholders)"},
    [KVSIM_DIM_DEFER_FREE] = {"defer_block_free", T_BOOL, true, 0, 1,
        {0, 1, END}, {0, 1, END}, "deferred-free fence (only with async_scheduling)"},
    [KVSIM_DIM_VICTIM_GUARD] = {"preempted_victim_guard", T_BOOL, true, 0, 1,
        {1, END}, {1, END}, "#49675 guard; false is the pre-#49675 bug"},
    [KVSIM_DIM_MAX_FUTILE] = {"max_futile_preemptions", T_OFF_UINT, true, -1, INT64_MAX,
        {0, END}, {0, END}, "progress rule: futile (deferred-free) preemptions allowed"},
    /* the workload */
    [KVSIM_DIM_REQUESTS] = {"requests", T_UINT, false, 1, 10000,
        {2, 4, 8, 16, 32, END}, {2, 4, 8, 16, 32, 64, END}, "requests per seed"},
    [KVSIM_DIM_PROMPT_PCT] = {"prompt_pct", T_UINT, false, 1, 100,
        {5, 15, 40, 90, END}, {2, 5, 15, 40, 70, 99, END}, "longest prompt, % of max_model_len"},
    [KVSIM_DIM_MAX_TOKENS] = {"max_tokens", T_UINT, false, 1, 100000,
        {1, 4, 16, 48, END}, {1, 2, 8, 32, 128, END}, "largest max_tokens of a request"},
    [KVSIM_DIM_PREFIX_OVERLAP] = {"prefix_overlap", T_UINT, false, 0, 100,
        {0, 50, 90, END}, {0, 25, 50, 90, 100, END}, "% of prompts with a shared family prefix"},
    [KVSIM_DIM_PREFIX_FAMILIES] = {"prefix_families", T_UINT, false, 1, 1000,
        {1, 2, 4, END}, {1, 2, 4, 8, END}, "distinct shared prefixes"},
    [KVSIM_DIM_ARRIVAL] = {"arrival", T_ARRIVAL, false, 0, 2,
        {0, 1, 2, END}, {0, 1, 2, END}, "burst (all adds first), trickle, waves"},
    [KVSIM_DIM_PIPELINE_DEPTH] = {"pipeline_depth", T_UINT, false, 1, 8,
        {1, 2, END}, {1, 2, 3, END}, "schedules in flight before an output"},
    [KVSIM_DIM_ABORT] = {"abort_rate", T_UINT, false, 0, 1000,
        {0, 0, 10, 30, END}, {0, 0, 10, 30, END}, "client aborts per 1000 ops"},
    [KVSIM_DIM_EXTERNAL] = {"external_pct", T_UINT, false, 0, 100,
        {0, 0, 20, 50, END}, {0, 0, 20, 50, END}, "% of requests with KV-connector tokens"},
    [KVSIM_DIM_EXTERNAL_ASYNC] = {"external_async_pct", T_UINT, false, 0, 100,
        {0, 50, 100, END}, {0, 50, 100, END},
        "% of those loaded asynchronously (small: 0 under priority, see docs/soak.md)"},
    [KVSIM_DIM_STOP] = {"stop_pct", T_UINT, false, 0, 100,
        {0, 30, END}, {0, 30, 60, END}, "% of requests with eos / stop tokens / min_tokens"},
    [KVSIM_DIM_RESET] = {"reset_rate", T_UINT, false, 0, 1000,
        {0, 0, 3, END}, {0, 0, 5, END}, "reset_prefix_cache ops per 1000 ops"},
    [KVSIM_DIM_MAX_OPS] = {"max_ops", T_UINT, false, 1, 10000000,
        {600, END}, {3000, END}, "op budget per seed; then everything left is aborted"},
    /* offload tiers (the config's `offload` object) and virtual time */
    [KVSIM_DIM_OFFLOAD] = {"offload", T_BOOL, false, 0, 1,
        {0, 1, END}, {0, 1, END}, "G2/G3 tiers behind G1 (the rows below apply when on)"},
    [KVSIM_DIM_G2_BLOCKS] = {"g2_blocks", T_UINT, false, 1, 1 << 24,
        {4, 16, 64, END}, {1, 4, 16, 64, 512, END}, "G2 capacity in blocks"},
    [KVSIM_DIM_G3_BLOCKS] = {"g3_blocks", T_UINT, false, 0, 1 << 24,
        {0, 0, 32, END}, {0, 0, 16, 128, END}, "G3 capacity in blocks (0 = no G3)"},
    [KVSIM_DIM_G3_WRITE_THROUGH] = {"g3_write_through", T_BOOL, false, 0, 1,
        {0, 1, END}, {0, 1, END}, "copy every block G2 receives on to G3"},
    [KVSIM_DIM_COPY_PCT] = {"copy_pct", T_UINT, false, 0, 100000,
        {0, 10, 50, 200, 800, END}, {0, 5, 25, 100, 300, 1000, END},
        "G1<->G2 copy time of one block, % of a step (0 = instant; G2<->G3 takes twice as long)"},
    [KVSIM_DIM_OFFLOAD_PERMITS] = {"offload_permits", T_UINT, false, 1, 256,
        {1, 2, END}, {1, 2, 4, END}, "batches in flight per lane"},
    [KVSIM_DIM_OFFLOAD_MAX_BLOCKS] = {"offload_max_blocks", T_UINT, false, 1, 64,
        {1, 4, 32, END}, {1, 2, 8, 32, END}, "blocks per batch"},
    [KVSIM_DIM_OFFLOAD_FAIL_RATE] = {"offload_fail_rate", T_FRACTION, false, 0, 999,
        {0, 0, 20, END}, {0, 0, 20, 100, END}, "probability that a transfer batch fails"},
    [KVSIM_DIM_STEP_US] = {"step_us", T_UINT, false, 1, 1000000,
        {1000, 4000, END}, {1000, 4000, END},
        "virtual duration of a step with tokens (with offload: advance per output)"},
    [KVSIM_DIM_LEGACY_PARTIAL_ALLOC] = {"legacy_partial_alloc", T_BOOL, true, 0, 1,
        {0, END}, {0, END},
        "THE OLD BUG (issue 6), never drawn: --legacy-partial-alloc or --set"},
    /* two engines: disaggregated prefill -> decode (the config's prefill/decode/handoff) */
    [KVSIM_DIM_DISAGG] = {"disagg", T_BOOL, false, 0, 1,
        {0, END}, {0, END},
        "a prefill and a decode engine with the handoff between them, never drawn: --set "
        "disagg=true (the rows below apply when on; no offload; small: FCFS)"},
    [KVSIM_DIM_PREFILL_BLOCKS] = {"prefill_blocks", T_UINT, false, 3, 100000,
        {6, 8, 12, 16, 24, END}, {4, 6, 8, 12, 16, 32, 64, END},
        "prefill pool blocks including the null block (replaces num_blocks)"},
    [KVSIM_DIM_DECODE_BLOCKS] = {"decode_blocks", T_UINT, false, 3, 100000,
        {6, 8, 12, 16, 24, END}, {4, 6, 8, 12, 16, 32, 64, END},
        "decode pool blocks including the null block (replaces num_blocks)"},
    [KVSIM_DIM_DECODE_MAX_NUM_SEQS] = {"decode_max_num_seqs", T_UINT, false, 1, 100000,
        {1, 2, 4, 256, END}, {1, 2, 3, 4, 8, 256, END}, "the decode engine's running-set cap"},
    [KVSIM_DIM_ABORT_TIMEOUT] = {"abort_timeout_steps", T_OFF_UINT, false, -1, 1000000,
        {-1, 1, 3, 10, 40, END}, {-1, 1, 2, 5, 20, 100, END},
        "a pin's abort timeout, in steps (off: never)"},
    [KVSIM_DIM_RELEASE_IMMEDIATELY] = {"release_immediately", T_BOOL, false, 0, 1,
        {0, 0, 0, 1, END}, {0, 0, 0, 1, END},
        "the what-if that frees the source at the pin (\"release\": \"immediate\")"},
    [KVSIM_DIM_TRANSFER_PCT] = {"transfer_pct", T_UINT, false, 0, 100000,
        {0, 5, 25, 100, END}, {0, 2, 10, 50, 200, END},
        "KV transfer time of one token, % of a step (0: only the latency, at least 1 ns)"},
    [KVSIM_DIM_TRANSFER_LATENCY_PCT] = {"transfer_latency_pct", T_UINT, false, 0, 100000,
        {0, 0, 50, END}, {0, 0, 20, 100, END}, "fixed cost of a transfer, % of a step"},
    [KVSIM_DIM_ROUTE_DELAY] = {"route_delay", T_UINT, false, 0, 100000,
        {0, 3, 20, END}, {0, 1, 5, 50, END}, "most ops between a pin and its route"},
    [KVSIM_DIM_UNROUTED_PCT] = {"unrouted_pct", T_UINT, false, 0, 100,
        {0, 0, 10, END}, {0, 10, 30, END},
        "% of pins whose decode never comes (only with an abort timeout)"},
    [KVSIM_DIM_ONE_TOKEN_PROMPTS] = {"one_token_prompts", T_BOOL, false, 0, 1,
        {0, 1, END}, {0, 1, END},
        "two engines: prompts may have one token (a decode that loads all of it keeps its block)"},
};
/* clang-format on */

const char *kvsim_soak_matrix_name(enum kvsim_soak_matrix m)
{
    return m == KVSIM_SOAK_FULL ? "full" : "small";
}

static void format_value(const struct dim *d, int64_t v, char *buf, size_t len)
{
    switch (d->type) {
    case T_BOOL: snprintf(buf, len, "%s", v ? "true" : "false"); break;
    case T_POLICY: snprintf(buf, len, "%s", v ? "priority" : "fcfs"); break;
    case T_FRACTION: snprintf(buf, len, "%g", (double)v / 1000.0); break;
    case T_ARRIVAL: snprintf(buf, len, "%s", arrival_names[v]); break;
    case T_OFF_UINT:
        if (v < 0) {
            snprintf(buf, len, "off");
            break;
        }
        /* fall through */
    case T_UINT: snprintf(buf, len, "%" PRId64, v); break;
    }
}

void kvsim_soak_print_matrix(FILE *f)
{
    fprintf(f, "%-30s %-28s %-28s %s\n", "dimension", "small", "full", "meaning");
    for (int i = 0; i < KVSIM_NUM_DIMS; i++) {
        const struct dim *d = &dims[i];
        char lists[2][160];
        for (int m = 0; m < 2; m++) {
            const int64_t *vals = m ? d->full : d->small;
            size_t len = 0;
            lists[m][0] = 0;
            for (int k = 0; k < MAX_VALS && vals[k] != END; k++) {
                char v[32];
                format_value(d, vals[k], v, sizeof v);
                len += (size_t)snprintf(lists[m] + len, sizeof lists[m] - len, "%s%s", k ? "," : "",
                                        v);
                if (len >= sizeof lists[m])
                    break;
            }
        }
        fprintf(f, "%-30s %-28s %-28s %s%s\n", d->name, lists[0], lists[1],
                d->config ? "[config] " : "", d->doc);
    }
}

int kvsim_soak_parse_set(struct kvsim_soak_overrides *o, const char *arg, char *err, size_t len)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        snprintf(err, len, "option --set: '%s' is not NAME=VALUE", arg);
        return -EINVAL;
    }
    size_t nlen = (size_t)(eq - arg);
    const char *val = eq + 1;
    for (int i = 0; i < KVSIM_NUM_DIMS; i++) {
        const struct dim *d = &dims[i];
        if (strlen(d->name) != nlen || strncmp(d->name, arg, nlen) != 0)
            continue;
        int64_t v = -1;
        bool ok = false;
        char *end = NULL;
        switch (d->type) {
        case T_BOOL:
            ok = !strcmp(val, "true") || !strcmp(val, "false") || !strcmp(val, "1") ||
                 !strcmp(val, "0");
            v = !strcmp(val, "true") || !strcmp(val, "1");
            break;
        case T_POLICY:
            ok = !strcmp(val, "fcfs") || !strcmp(val, "priority");
            v = !strcmp(val, "priority");
            break;
        case T_ARRIVAL:
            for (int k = 0; k < 3; k++)
                if (!strcmp(val, arrival_names[k])) {
                    ok = true;
                    v = k;
                }
            break;
        case T_FRACTION: {
            errno = 0;
            double x = *val ? strtod(val, &end) : -1;
            ok = !errno && end && !*end && x >= 0 && x < 1;
            v = (int64_t)(x * 1000.0 + 0.5);
            ok = ok && (double)v / 1000.0 == x; /* thousandths only: the file must say x */
            break;
        }
        case T_OFF_UINT:
            if (!strcmp(val, "off")) {
                ok = true;
                v = -1;
                break;
            }
            /* fall through */
        case T_UINT:
            errno = 0;
            v = *val >= '0' && *val <= '9' ? strtoll(val, &end, 10) : -1;
            ok = !errno && end && !*end && v >= d->min && v <= d->max && v >= 0;
            break;
        }
        if (!ok) {
            char lo[32], hi[32], range[96];
            format_value(d, d->min, lo, sizeof lo);
            format_value(d, d->max, hi, sizeof hi);
            snprintf(range, sizeof range, "an integer in [%s, %s]", lo, hi);
            snprintf(err, len, "option --set: '%s' is not a valid value of %s (%s)", val, d->name,
                     d->type == T_BOOL       ? "true, false, 1 or 0"
                     : d->type == T_POLICY   ? "fcfs or priority"
                     : d->type == T_ARRIVAL  ? "burst, trickle or waves"
                     : d->type == T_FRACTION ? "a number in [0, 1) in thousandths"
                     : d->type == T_OFF_UINT ? "off or a non-negative integer"
                                             : range);
            return -EINVAL;
        }
        o->set[i] = true;
        o->value[i] = v;
        return 0;
    }
    snprintf(err, len, "option --set: unknown dimension '%.*s' (see kvsim soak --show-matrix)",
             (int)nlen, arg);
    return -EINVAL;
}

int kvsim_soak_parse_checks(struct kvsim_soak_overrides *o, const char *arg, char *err, size_t len)
{
    static const char *const names[] = {"invariants", "liveness", "progress"};
    if (!strcmp(arg, "all") || !strcmp(arg, "none")) {
        o->checks_off = !strcmp(arg, "none") ? KVSIM_SOAK_CHECK_ALL : 0;
        return 0;
    }
    unsigned on = 0;
    const char *p = arg;
    for (;;) {
        size_t n = strcspn(p, ",");
        unsigned bit = 0;
        for (unsigned k = 0; k < 3; k++)
            if (strlen(names[k]) == n && !strncmp(p, names[k], n))
                bit = 1u << k;
        if (!bit) {
            snprintf(err, len,
                     "option --checks: '%.*s' is not all, none, invariants, liveness or progress",
                     (int)n, p);
            return -EINVAL;
        }
        on |= bit;
        if (!p[n])
            break;
        p += n + 1;
    }
    o->checks_off = KVSIM_SOAK_CHECK_ALL & ~on;
    return 0;
}

/* ---- one seed ------------------------------------------------------------------------------- */

#define VOCAB           32 /* sampled tokens are 0..VOCAB-1 */
/* Prompt tokens: request i's own are (i + 1) * TOKEN_SPAN + k, family f's shared prefix
 * FAMILY_BASE + f * TOKEN_SPAN + k (prompts are shorter than TOKEN_SPAN; the dimension ranges
 * keep every id below 2^32). */
#define TOKEN_SPAN      UINT64_C(100000)
#define FAMILY_BASE     UINT64_C(2000000000)
#define WIND_DOWN_LIMIT 10000 /* ops to settle after the budget (never reached) */

struct sreq {
    char id[24];
    json_t *add;             /* its add op, built up front */
    struct sched_request *r; /* once added (two engines: its prefill request) */
    bool report_queued;      /* its async load's finished_recving is pending */
    /* two engines */
    bool pin_seen;      /* its pin was noticed: its route is planned */
    bool route_planned; /* a route is due at op route_at (or never: never_route) */
    bool never_route;
    uint64_t route_at;
};

struct pending_report {
    size_t req;
    uint64_t outputs_left; /* outputs to let pass before reporting */
};

struct soak {
    struct rng rng;
    /* The offload dimensions draw from their own stream, so that a seed without offload builds
     * exactly the scenario it built before they existed; the two-engine dimensions, and every
     * decision of a two-engine seed's driver, from a third. */
    struct rng rng2, rng3;
    unsigned checks_off; /* KVSIM_SOAK_CHECK_* */
    uint32_t contract;   /* the fidelity contract (SCHED_CONTRACT_*) */
    bool offload;
    bool disagg;     /* two engines */
    int turn;        /* two engines: the engine the driver looks at first */
    int64_t step_ns; /* virtual duration of a step with tokens */
    int64_t v[KVSIM_NUM_DIMS];
    uint32_t max_model_len;
    json_t *steps;
    struct kvsim_conform_runner *run;
    struct kvsim_conform_result res;
    bool failed;
    struct sreq *reqs;
    size_t nreqs, next_add, wave_left;
    struct pending_report *pend;
    size_t npend;
};

static void pick_config(struct soak *s, enum kvsim_soak_matrix m,
                        const struct kvsim_soak_overrides *o)
{
    for (int i = 0; i < KVSIM_NUM_DIMS; i++) {
        const int64_t *vals = m == KVSIM_SOAK_FULL ? dims[i].full : dims[i].small;
        size_t n = 0;
        while (n < MAX_VALS && vals[n] != END)
            n++;
        /* Draw even when overridden: an override changes one dimension, not the others. */
        struct rng *r = i >= KVSIM_DIM_DISAGG    ? &s->rng3
                        : i >= KVSIM_DIM_OFFLOAD ? &s->rng2
                                                 : &s->rng;
        int64_t v = vals[rng_below(r, n)];
        s->v[i] = o && o->set[i] ? o->value[i] : v;
    }
    s->disagg = s->v[KVSIM_DIM_DISAGG] != 0;
    if (s->disagg) {
        s->v[KVSIM_DIM_OFFLOAD] = 0; /* the two-engine form has no tiers */
        if (m == KVSIM_SOAK_SMALL && !(o && o->set[KVSIM_DIM_POLICY]))
            s->v[KVSIM_DIM_POLICY] = 0; /* every decode is an async load: the known PRIORITY
                                         * dead end (docs/soak.md) */
    }
    if (m == KVSIM_SOAK_SMALL && s->v[KVSIM_DIM_POLICY] && !(o && o->set[KVSIM_DIM_OFFLOAD]))
        s->v[KVSIM_DIM_OFFLOAD] = 0; /* an onboarding from G2/G3 is an async load: the same known
                                      * dead end under PRIORITY (docs/soak.md) */
    s->offload = s->v[KVSIM_DIM_OFFLOAD] != 0;
    s->step_ns = s->v[KVSIM_DIM_STEP_US] * 1000;
    /* Derived rules that keep every configuration meaningful. */
    if (m == KVSIM_SOAK_SMALL && s->v[KVSIM_DIM_POLICY] && !(o && o->set[KVSIM_DIM_EXTERNAL_ASYNC]))
        s->v[KVSIM_DIM_EXTERNAL_ASYNC] = 0; /* keeps the known PRIORITY + async-load dead end
                                             * (tests/regressions/, docs/soak.md) out of CI */
    if (!s->v[KVSIM_DIM_ASYNC] && !(o && o->set[KVSIM_DIM_DEFER_FREE]))
        s->v[KVSIM_DIM_DEFER_FREE] = 0; /* the fence belongs to the async scheduler */
    uint64_t usable = (uint64_t)s->v[KVSIM_DIM_NUM_BLOCKS] - 1;
    if (s->disagg) /* both pools must hold every request alone */
        usable = (uint64_t)(s->v[KVSIM_DIM_PREFILL_BLOCKS] < s->v[KVSIM_DIM_DECODE_BLOCKS]
                                ? s->v[KVSIM_DIM_PREFILL_BLOCKS]
                                : s->v[KVSIM_DIM_DECODE_BLOCKS]) -
                 1;
    uint64_t mml = usable * (uint64_t)s->v[KVSIM_DIM_BLOCK_SIZE];
    /* vLLM refuses a max_model_len the KV cache cannot hold once: every request fits alone. */
    s->max_model_len = (uint32_t)(mml < 2048 ? mml : 2048);
    if (!s->v[KVSIM_DIM_CHUNKED_PREFILL] &&
        s->v[KVSIM_DIM_MAX_NUM_BATCHED_TOKENS] < (int64_t)s->max_model_len)
        s->v[KVSIM_DIM_MAX_NUM_BATCHED_TOKENS] = s->max_model_len; /* vLLM requires it too */
}

/* Block bytes of the generated tiers: the bandwidths follow from copy_pct and step_us. */
#define SOAK_BLOCK_BYTES 1000

/* Bytes per second that copy one block in pct % of a step (0: instant). */
static int64_t copy_bandwidth(const struct soak *s, int64_t pct)
{
    if (pct <= 0)
        return 0;
    double ns = (double)s->step_ns * (double)pct / 100.0;
    double bw = (double)SOAK_BLOCK_BYTES * 1e9 / ns;
    return bw < 1 ? 1 : (int64_t)bw;
}

static json_t *offload_json(const struct soak *s, uint64_t seed)
{
    json_t *o = json_object();
    const int64_t *v = s->v;
    json_object_set_new(o, "g2_blocks", json_integer(v[KVSIM_DIM_G2_BLOCKS]));
    json_object_set_new(o, "g3_blocks", json_integer(v[KVSIM_DIM_G3_BLOCKS]));
    json_object_set_new(o, "g3_write_through", json_boolean(v[KVSIM_DIM_G3_WRITE_THROUGH]));
    json_object_set_new(o, "block_bytes", json_integer(SOAK_BLOCK_BYTES));
    json_object_set_new(o, "g1_g2_bytes_per_s",
                        json_integer(copy_bandwidth(s, v[KVSIM_DIM_COPY_PCT])));
    json_object_set_new(o, "g2_g3_bytes_per_s",
                        json_integer(copy_bandwidth(s, 2 * v[KVSIM_DIM_COPY_PCT])));
    json_object_set_new(o, "permits", json_integer(v[KVSIM_DIM_OFFLOAD_PERMITS]));
    json_object_set_new(o, "max_blocks", json_integer(v[KVSIM_DIM_OFFLOAD_MAX_BLOCKS]));
    json_object_set_new(o, "fail_rate", json_real((double)v[KVSIM_DIM_OFFLOAD_FAIL_RATE] / 1000.0));
    json_object_set_new(o, "seed", json_integer((json_int_t)(seed & INT64_MAX)));
    return o;
}

/* The two-engine form's handoff object: the abort timeout and the transfer model in steps.
 * The bandwidth stays 1 GB/s (an integer in the file, so that the durations replay exactly) and
 * a token's bytes are its nanoseconds. */
static json_t *handoff_json(const struct soak *s)
{
    const int64_t *v = s->v;
    int64_t timeout = v[KVSIM_DIM_ABORT_TIMEOUT] < 0 ? 0 : v[KVSIM_DIM_ABORT_TIMEOUT] * s->step_ns;
    return json_pack(
        "{s:I,s:s,s:i,s:I,s:I}", "abort_timeout_ns", (json_int_t)timeout, "release",
        v[KVSIM_DIM_RELEASE_IMMEDIATELY] ? "immediate" : "pinned", "gbps", 1, "latency_ns",
        (json_int_t)(v[KVSIM_DIM_TRANSFER_LATENCY_PCT] * s->step_ns / 100), "kv_bytes_per_token",
        (json_int_t)(v[KVSIM_DIM_TRANSFER_PCT] * s->step_ns / 100));
}

static json_t *config_json(const struct soak *s, uint64_t seed)
{
    json_t *cfg = json_object();
    /* The scenario says which contract it ran under, so it replays the same way later. */
    json_object_set_new(cfg, "contract", json_integer(s->contract));
    for (int i = 0; i < KVSIM_NUM_DIMS; i++) {
        const struct dim *d = &dims[i];
        int64_t v = s->v[i];
        if (!d->config)
            continue;
        if (s->disagg && i == KVSIM_DIM_NUM_BLOCKS)
            continue; /* each engine has its own */
        if (i == KVSIM_DIM_LEGACY_PARTIAL_ALLOC && !v)
            continue; /* only a seed that asks for the old bug says so */
        if (i == KVSIM_DIM_MAX_FUTILE && (s->checks_off & KVSIM_SOAK_CHECK_PROGRESS))
            continue;
        json_t *j = NULL;
        switch (d->type) {
        case T_BOOL: j = json_boolean(v); break;
        case T_POLICY: j = json_string(v ? "priority" : "fcfs"); break;
        case T_FRACTION: j = json_real((double)v / 1000.0); break;
        case T_OFF_UINT: j = v < 0 ? NULL : json_integer(v); break;
        case T_UINT: j = json_integer(v); break;
        case T_ARRIVAL: break;
        }
        if (j)
            json_object_set_new(cfg, d->name, j);
    }
    json_object_set_new(cfg, "max_model_len", json_integer(s->max_model_len));
    if (!(s->checks_off & KVSIM_SOAK_CHECK_INVARIANTS))
        json_object_set_new(cfg, "check_invariants", json_true());
    else /* no invariant at all: not even the scheduler's own boundary checks */
        json_object_set_new(cfg, "scheduler_checks", json_false());
    if (!(s->checks_off & KVSIM_SOAK_CHECK_LIVENESS))
        json_object_set_new(cfg, "check_liveness", json_true());
    if (s->offload)
        json_object_set_new(cfg, "offload", offload_json(s, seed));
    if (s->disagg) {
        json_object_set_new(
            cfg, "prefill",
            json_pack("{s:I}", "num_blocks", (json_int_t)s->v[KVSIM_DIM_PREFILL_BLOCKS]));
        json_object_set_new(cfg, "decode",
                            json_pack("{s:I,s:I}", "num_blocks",
                                      (json_int_t)s->v[KVSIM_DIM_DECODE_BLOCKS], "max_num_seqs",
                                      (json_int_t)s->v[KVSIM_DIM_DECODE_MAX_NUM_SEQS]));
        json_object_set_new(cfg, "handoff", handoff_json(s));
    }
    return cfg;
}

static json_t *token_range(uint64_t a, uint64_t b)
{
    return json_pack("{s:[I,I]}", "range", (json_int_t)a, (json_int_t)b);
}

/* Every request's parameters are drawn up front, so arrival order does not change them. */
static int make_requests(struct soak *s)
{
    size_t n = (size_t)s->v[KVSIM_DIM_REQUESTS];
    s->reqs = calloc(n, sizeof *s->reqs);
    if (!s->reqs)
        return -ENOMEM;
    s->nreqs = n;
    uint64_t longest = (uint64_t)(s->max_model_len - 1) * (uint64_t)s->v[KVSIM_DIM_PROMPT_PCT];
    longest = longest / 100 ? longest / 100 : 1;
    for (size_t i = 0; i < n; i++) {
        struct sreq *q = &s->reqs[i];
        snprintf(q->id, sizeof q->id, "r%zu", i);
        /* A disaggregated decode loads its whole prompt: of one token, its promotion leaves it
         * no computed token, holding its block (docs/soak.md, Findings); one_token_prompts
         * decides whether seeds go there. */
        uint64_t min_plen =
            s->disagg && !s->v[KVSIM_DIM_ONE_TOKEN_PROMPTS] && s->max_model_len >= 3 ? 2 : 1;
        uint64_t plen = rng_range(&s->rng, min_plen, longest > min_plen ? longest : min_plen);
        json_t *prompt;
        uint64_t own = (i + 1) * TOKEN_SPAN;
        if (rng_per(&s->rng, s->v[KVSIM_DIM_PREFIX_OVERLAP], 100)) {
            uint64_t fam = rng_below(&s->rng, (uint64_t)s->v[KVSIM_DIM_PREFIX_FAMILIES]);
            uint64_t shared = rng_range(&s->rng, 1, plen);
            uint64_t fb = FAMILY_BASE + fam * TOKEN_SPAN;
            prompt = shared == plen ? token_range(fb, fb + plen)
                                    : json_pack("{s:[o,o]}", "concat", token_range(fb, fb + shared),
                                                token_range(own, own + plen - shared));
        } else {
            prompt = token_range(own, own + plen);
        }
        /* vLLM's frontend caps max_tokens at max_model_len - prompt (and min_tokens at
         * max_tokens): without it, a min_tokens past max_model_len never finishes. */
        uint64_t max_tokens = rng_range(&s->rng, 1, (uint64_t)s->v[KVSIM_DIM_MAX_TOKENS]);
        if (max_tokens > s->max_model_len - plen)
            max_tokens = s->max_model_len - plen;
        json_t *add = json_pack("{s:s,s:s,s:o,s:I}", "op", "add", "id", q->id, "prompt", prompt,
                                "max_tokens", (json_int_t)max_tokens);
        if (!add)
            return -ENOMEM;
        q->add = add;
        if (s->v[KVSIM_DIM_POLICY])
            json_object_set_new(add, "priority", json_integer((json_int_t)rng_below(&s->rng, 4)));
        if (rng_per(&s->rng, s->v[KVSIM_DIM_STOP], 100)) {
            switch (rng_below(&s->rng, 4)) {
            case 0:
                json_object_set_new(add, "eos_token_id",
                                    json_integer((json_int_t)rng_below(&s->rng, VOCAB)));
                break;
            case 1:
                json_object_set_new(add, "stop_token_ids",
                                    json_pack("[I,I]", (json_int_t)rng_below(&s->rng, VOCAB),
                                              (json_int_t)rng_below(&s->rng, VOCAB)));
                break;
            case 2:
                json_object_set_new(add, "eos_token_id",
                                    json_integer((json_int_t)rng_below(&s->rng, VOCAB)));
                json_object_set_new(
                    add, "min_tokens",
                    json_integer((json_int_t)rng_range(&s->rng, 0, (uint64_t)max_tokens)));
                break;
            default:
                json_object_set_new(add, "eos_token_id",
                                    json_integer((json_int_t)rng_below(&s->rng, VOCAB)));
                json_object_set_new(add, "ignore_eos", json_true());
                break;
            }
        }
        if (plen >= 2 && rng_per(&s->rng, s->v[KVSIM_DIM_EXTERNAL], 100)) {
            bool async = rng_per(&s->rng, s->v[KVSIM_DIM_EXTERNAL_ASYNC], 100);
            json_t *ext = json_pack("{s:I,s:b}", "tokens",
                                    (json_int_t)rng_range(&s->rng, 1, plen - 1), "async", async);
            if (s->disagg) /* a disaggregated decode's KV comes from its prefill */
                json_decref(ext);
            else
                json_object_set_new(add, "external", ext);
        }
    }
    return 0;
}

/* Appends op to the scenario and runs it (the recorded file is what ran). Steals op. */
static int emit(struct soak *s, json_t *op)
{
    if (!op)
        return -ENOMEM;
    json_array_append_new(s->steps, op);
    if (kvsim_conform_runner_step(s->run, op, &s->res) != 0)
        s->failed = true;
    return s->failed ? KVSIM_ESCENARIO : 0;
}

static struct sched *sch(struct soak *s) { return kvsim_conform_runner_sched(s->run); }

static bool added_unfinished(const struct sreq *q)
{
    return q->r && !sched_status_is_finished(q->r->status);
}

/* After a schedule: a request parked for an async load gets its finished_recving later. */
static void queue_load_reports(struct soak *s)
{
    for (size_t i = 0; i < s->next_add; i++) {
        struct sreq *q = &s->reqs[i];
        /* An onboarding from the tiers ends with its transfer (advance), not with a report. */
        if (q->report_queued || q->r->status != SCHED_WAITING_FOR_REMOTE_KVS ||
            q->r->recv_finished || q->r->offload_load)
            continue;
        q->report_queued = true;
        s->pend[s->npend++] = (struct pending_report){i, rng_below(&s->rng, 3)};
    }
}

/* ---- op kinds: one generator each ---- */

static int gen_add(struct soak *s)
{
    struct sreq *q = &s->reqs[s->next_add++];
    int rc = emit(s, json_incref(q->add));
    if (rc == 0)
        q->r = kvsim_conform_runner_request(s->run, q->id);
    return rc;
}

static int gen_schedule(struct soak *s)
{
    int rc = emit(s, json_pack("{s:s}", "op", "schedule"));
    if (rc == 0)
        queue_load_reports(s);
    return rc;
}

/* The model output of the oldest outstanding schedule: one token for every request whose
 * chunk samples, and the async loads whose (simulated) transfer time has come. */
static int gen_output(struct soak *s, bool report_all)
{
    struct sched_step *const *outs;
    kvsim_conform_runner_outstanding(s->run, &outs);
    const struct sched_step *st = outs[0];
    json_t *sampled = json_object();
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        const struct sched_scheduled *e = &st->scheduled[i];
        if (!e->samples || sched_status_is_finished(e->req->status))
            continue;
        json_object_set_new(sampled, kvsim_conform_runner_request_name(s->run, e->req),
                            json_pack("[I]", (json_int_t)rng_below(&s->rng, VOCAB)));
    }
    json_t *op = json_pack("{s:s,s:o}", "op", "output", "sampled", sampled);
    json_t *recv = json_array();
    size_t keep = 0;
    for (size_t i = 0; i < s->npend; i++) {
        struct pending_report *p = &s->pend[i];
        if (p->outputs_left == 0 || report_all) {
            json_array_append_new(recv, json_string(s->reqs[p->req].id));
            s->reqs[p->req].report_queued = false;
        } else {
            p->outputs_left--;
            s->pend[keep++] = *p;
        }
    }
    s->npend = keep;
    if (json_array_size(recv))
        json_object_set_new(op, "finished_recving", recv);
    else
        json_decref(recv);
    return emit(s, op);
}

static int emit_advance_to(struct soak *s, int64_t t)
{
    return emit(s, json_pack("{s:s,s:I}", "op", "advance", "to_ns", (json_int_t)t));
}

/*
 * Virtual time before the oldest outstanding schedule's output (with offload only: without
 * tiers nothing depends on time). A step with tokens runs for step_ns; transfers that end
 * meanwhile are applied first, as the engine does. An empty step takes no time, but when no
 * step has tokens in flight the engine idles until its next transfer ends: time jumps there.
 */
static int gen_time_for_output(struct soak *s)
{
    if (!s->offload)
        return 0;
    struct sched_step *const *outs;
    size_t nout = kvsim_conform_runner_outstanding(s->run, &outs);
    if (outs[0]->total_tokens > 0)
        return emit(s, json_pack("{s:s,s:I}", "op", "advance", "by_ns", (json_int_t)s->step_ns));
    for (size_t i = 1; i < nout; i++)
        if (outs[i]->total_tokens > 0)
            return 0;
    int64_t d = kvsim_conform_runner_next_deadline(s->run);
    if (d == INT64_MAX)
        return 0;
    int64_t now = kvsim_conform_runner_now(s->run);
    return emit_advance_to(s, d > now ? d : now);
}

static size_t count_unfinished(const struct soak *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->next_add; i++)
        n += added_unfinished(&s->reqs[i]);
    return n;
}

static int gen_abort(struct soak *s)
{
    uint64_t k = rng_below(&s->rng, count_unfinished(s));
    for (size_t i = 0; i < s->next_add; i++)
        if (added_unfinished(&s->reqs[i]) && k-- == 0)
            return emit(s, json_pack("{s:s,s:s}", "op", "abort", "id", s->reqs[i].id));
    return 0;
}

static int gen_reset(struct soak *s)
{
    return emit(s, json_pack("{s:s,s:b}", "op", "reset_prefix_cache", "reset_running_requests",
                             rng_below(&s->rng, 2) == 1));
}

/* The end: abort what is left, drain every output and load report, then check nothing leaked
 * (after all of that, every usable block must be free again). */
static int wind_down(struct soak *s)
{
    json_t *ids = json_array();
    for (size_t i = 0; i < s->next_add; i++)
        if (added_unfinished(&s->reqs[i]))
            json_array_append_new(ids, json_string(s->reqs[i].id));
    if (json_array_size(ids)) {
        int rc = emit(s, json_pack("{s:s,s:o}", "op", "abort", "ids", ids));
        if (rc)
            return rc;
    } else {
        json_decref(ids);
    }
    for (int k = 0; k < WIND_DOWN_LIMIT; k++) {
        struct sched_step *const *outs;
        size_t nout = kvsim_conform_runner_outstanding(s->run, &outs);
        if (nout == 0 && s->npend == 0)
            break;
        int rc = nout == 0 ? gen_schedule(s) : gen_output(s, true);
        if (rc)
            return rc;
    }
    /* Every transfer drains: holds go back, aborted onboardings free their blocks. */
    for (int k = 0; k < WIND_DOWN_LIMIT; k++) {
        int64_t d = kvsim_conform_runner_next_deadline(s->run);
        if (d == INT64_MAX)
            break;
        int64_t now = kvsim_conform_runner_now(s->run);
        int rc = emit_advance_to(s, d > now ? d : now);
        if (rc)
            return rc;
    }
    uint32_t usable = (uint32_t)s->v[KVSIM_DIM_NUM_BLOCKS] - 1;
    json_t *ex = json_pack("{s:I}", "free_blocks", (json_int_t)usable);
    if (s->offload) {
        json_object_set_new(ex, "held_blocks", json_integer(0));
        json_object_set_new(ex, "pending_transfers", json_integer(0));
    }
    return emit(s, json_pack("{s:s,s:o}", "op", "check", "expect", ex));
}

static bool want_add(struct soak *s)
{
    switch ((enum arrival)s->v[KVSIM_DIM_ARRIVAL]) {
    case ARRIVAL_BURST: return true;
    case ARRIVAL_TRICKLE: return rng_below(&s->rng, 3) == 0;
    case ARRIVAL_WAVES:
        if (s->wave_left == 0 && sched_waiting_snapshot(sch(s), NULL, 0) == 0 &&
            rng_below(&s->rng, 2) == 0)
            s->wave_left = rng_range(&s->rng, 1, 4);
        if (s->wave_left == 0)
            return false;
        s->wave_left--;
        return true;
    }
    return true;
}

static int drive(struct soak *s)
{
    uint64_t budget = (uint64_t)s->v[KVSIM_DIM_MAX_OPS];
    size_t depth = (size_t)s->v[KVSIM_DIM_PIPELINE_DEPTH];
    while (kvsim_conform_runner_stats(s->run)->ops < budget) {
        bool all_added = s->next_add == s->nreqs;
        int rc;
        struct sched_step *const *outs;
        size_t nout = kvsim_conform_runner_outstanding(s->run, &outs);
        bool work = sched_num_unfinished(sch(s)) > 0 || s->npend > 0;
        if (!all_added && want_add(s))
            rc = gen_add(s);
        else if (count_unfinished(s) > 0 && rng_per(&s->rng, s->v[KVSIM_DIM_ABORT], 1000))
            rc = gen_abort(s);
        else if (rng_per(&s->rng, s->v[KVSIM_DIM_RESET], 1000))
            rc = gen_reset(s);
        else if (work && nout < depth)
            rc = gen_schedule(s);
        else if (nout > 0)
            rc = (rc = gen_time_for_output(s)) != 0 ? rc : gen_output(s, false);
        else if (!all_added)
            rc = gen_add(s); /* an idle engine: the next arrival comes now */
        else
            break; /* everything finished */
        if (rc)
            return rc;
    }
    return wind_down(s);
}

/* ---- two engines: the disaggregated handoff ------------------------------------------------ */

/*
 * A two-engine seed (--set disagg=true) drives a prefill and a decode engine: every request is a
 * disaggregated one (added on the prefill engine; its decode request comes with its route). The
 * driver alternates between the engines (a schedule while fewer than pipeline_depth await their
 * output, else the oldest output), routes each pin route_delay ops later at most (or never, for
 * unrouted_pct of them when pins can expire), aborts user requests (abort_rate) and resets an
 * engine's prefix cache (reset_rate). Virtual time moves as with offload: a step with tokens
 * takes step_us before its output, and an idle pair of engines jumps to the next handoff event
 * (a transfer's start or end, a pin's deadline). Its decisions draw from the seed's third
 * stream.
 */

static const char *const engine_names[2] = {"prefill", "decode"};

static struct sched *sch_on(struct soak *s, int e)
{
    return kvsim_conform_runner_engine_sched(s->run, e);
}

/* A user request not over yet: its handoff is open or its decode request unfinished. */
static bool disagg_live(struct soak *s, const struct sreq *q)
{
    if (!q->r)
        return false;
    const struct kvsim_handoff *h = kvsim_conform_runner_handoff(s->run, q->id);
    const struct sched_request *dr =
        kvsim_conform_runner_request_on(s->run, KVSIM_CONFORM_DECODE, q->id);
    return (h && !kvsim_handoff_is_final(h)) || (dr && !sched_status_is_finished(dr->status));
}

/* Plans the route of every pin made since the last call. */
static void plan_routes(struct soak *s)
{
    uint64_t ops = kvsim_conform_runner_stats(s->run)->ops;
    for (size_t i = 0; i < s->next_add; i++) {
        struct sreq *q = &s->reqs[i];
        const struct kvsim_handoff *h = kvsim_conform_runner_handoff(s->run, q->id);
        if (q->pin_seen || !h || h->pin_ns == KVSIM_HANDOFF_TIME_NONE)
            continue;
        q->pin_seen = true;
        q->route_planned = true;
        q->never_route = s->v[KVSIM_DIM_ABORT_TIMEOUT] > 0 &&
                         rng_per(&s->rng3, s->v[KVSIM_DIM_UNROUTED_PCT], 100);
        q->route_at = ops + rng_range(&s->rng3, 0, (uint64_t)s->v[KVSIM_DIM_ROUTE_DELAY]);
    }
}

/* The planned route due first (due: by now; otherwise any), or NULL. */
static struct sreq *next_route(struct soak *s, bool due_only)
{
    uint64_t ops = kvsim_conform_runner_stats(s->run)->ops;
    struct sreq *best = NULL;
    for (size_t i = 0; i < s->next_add; i++) {
        struct sreq *q = &s->reqs[i];
        if (q->route_planned && !q->never_route && (!best || q->route_at < best->route_at))
            best = q;
    }
    return best && (!due_only || best->route_at <= ops) ? best : NULL;
}

static int gen_route(struct soak *s, struct sreq *q)
{
    q->route_planned = false;
    return emit(s, json_pack("{s:s,s:s}", "op", "route", "id", q->id));
}

static int gen_schedule_on(struct soak *s, int e)
{
    return emit(s, json_pack("{s:s,s:s}", "op", "schedule", "engine", engine_names[e]));
}

/* Virtual time before engine e's oldest output: a step with tokens takes step_ns; when no step
 * of either engine has tokens in flight, the engines idle until the next handoff event. */
static int gen_time_on(struct soak *s, int e)
{
    struct sched_step *const *outs;
    kvsim_conform_runner_outstanding_on(s->run, e, &outs);
    if (outs[0]->total_tokens > 0)
        return emit(s, json_pack("{s:s,s:I}", "op", "advance", "by_ns", (json_int_t)s->step_ns));
    for (int k = 0; k < 2; k++) {
        size_t n = kvsim_conform_runner_outstanding_on(s->run, k, &outs);
        for (size_t i = 0; i < n; i++)
            if (outs[i]->total_tokens > 0)
                return 0;
    }
    int64_t d = kvsim_conform_runner_next_deadline(s->run);
    if (d == INT64_MAX)
        return 0;
    int64_t now = kvsim_conform_runner_now(s->run);
    return emit_advance_to(s, d > now ? d : now);
}

/* Engine e's oldest output: one token for every request whose chunk samples (a decode's load
 * ends with its transfer: no finished_recving). */
static int gen_output_on(struct soak *s, int e)
{
    struct sched_step *const *outs;
    kvsim_conform_runner_outstanding_on(s->run, e, &outs);
    const struct sched_step *st = outs[0];
    json_t *sampled = json_object();
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        const struct sched_scheduled *x = &st->scheduled[i];
        if (!x->samples || sched_status_is_finished(x->req->status))
            continue;
        json_object_set_new(sampled, kvsim_conform_runner_request_name(s->run, x->req),
                            json_pack("[I]", (json_int_t)rng_below(&s->rng3, VOCAB)));
    }
    return emit(s, json_pack("{s:s,s:s,s:o}", "op", "output", "engine", engine_names[e], "sampled",
                             sampled));
}

static size_t count_live(struct soak *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->next_add; i++)
        n += disagg_live(s, &s->reqs[i]);
    return n;
}

static int gen_abort_disagg(struct soak *s)
{
    uint64_t k = rng_below(&s->rng3, count_live(s));
    for (size_t i = 0; i < s->next_add; i++)
        if (disagg_live(s, &s->reqs[i]) && k-- == 0)
            return emit(s, json_pack("{s:s,s:s}", "op", "abort", "id", s->reqs[i].id));
    return 0;
}

static int gen_reset_disagg(struct soak *s)
{
    int e = (int)rng_below(&s->rng3, 2);
    return emit(s, json_pack("{s:s,s:s,s:b}", "op", "reset_prefix_cache", "engine", engine_names[e],
                             "reset_running_requests", rng_below(&s->rng3, 2) == 1));
}

/* One engine's turn: a schedule while it has work and room in its pipeline, else its oldest
 * output (after the time its step takes). Returns 1 when it had nothing to do. */
static int engine_turn(struct soak *s, int e)
{
    struct sched_step *const *outs;
    size_t nout = kvsim_conform_runner_outstanding_on(s->run, e, &outs);
    bool work = sched_num_unfinished(sch_on(s, e)) > 0;
    if (work && nout < (size_t)s->v[KVSIM_DIM_PIPELINE_DEPTH])
        return gen_schedule_on(s, e);
    if (nout > 0) {
        int rc = gen_time_on(s, e);
        return rc ? rc : gen_output_on(s, e);
    }
    return 1;
}

/* The end: every user request still live is cancelled, the planned routes come (late: they
 * find no source), every output is applied and every transfer's end passes; then nothing may
 * leak: both pools have every block free, no pin, no pending transfer, every handoff final. */
static int wind_down_disagg(struct soak *s)
{
    json_t *ids = json_array();
    for (size_t i = 0; i < s->next_add; i++)
        if (disagg_live(s, &s->reqs[i]))
            json_array_append_new(ids, json_string(s->reqs[i].id));
    int rc = 0;
    if (json_array_size(ids))
        rc = emit(s, json_pack("{s:s,s:o}", "op", "abort", "ids", ids));
    else
        json_decref(ids);
    for (struct sreq *q; rc == 0 && (q = next_route(s, false)) != NULL;)
        rc = gen_route(s, q);
    for (int k = 0; rc == 0 && k < WIND_DOWN_LIMIT; k++) {
        int done = 1;
        for (int e = 0; e < 2 && done == 1 && rc == 0; e++)
            if ((done = engine_turn(s, e)) < 0)
                rc = done;
        if (done == 1)
            break;
    }
    for (int k = 0; rc == 0 && k < WIND_DOWN_LIMIT; k++) {
        int64_t d = kvsim_conform_runner_next_deadline(s->run);
        if (d == INT64_MAX)
            break;
        int64_t now = kvsim_conform_runner_now(s->run);
        rc = emit_advance_to(s, d > now ? d : now);
    }
    if (rc)
        return rc;
    json_t *ex = json_pack("{s:i,s:i,s:i,s:{s:I,s:i},s:{s:I}}", "open_handoffs", 0, "pins", 0,
                           "pending_transfers", 0, "prefill", "free_blocks",
                           (json_int_t)s->v[KVSIM_DIM_PREFILL_BLOCKS] - 1, "pinned_blocks", 0,
                           "decode", "free_blocks", (json_int_t)s->v[KVSIM_DIM_DECODE_BLOCKS] - 1);
    return emit(s, json_pack("{s:s,s:o}", "op", "check", "expect", ex));
}

static int drive_disagg(struct soak *s)
{
    uint64_t budget = (uint64_t)s->v[KVSIM_DIM_MAX_OPS];
    while (kvsim_conform_runner_stats(s->run)->ops < budget) {
        plan_routes(s);
        bool all_added = s->next_add == s->nreqs;
        struct sreq *due = next_route(s, true);
        int rc;
        if (!all_added && want_add(s)) {
            rc = gen_add(s);
        } else if (count_live(s) > 0 && rng_per(&s->rng3, s->v[KVSIM_DIM_ABORT], 1000)) {
            rc = gen_abort_disagg(s);
        } else if (rng_per(&s->rng3, s->v[KVSIM_DIM_RESET], 1000)) {
            rc = gen_reset_disagg(s);
        } else if (due) {
            rc = gen_route(s, due);
        } else {
            int e = s->turn;
            s->turn ^= 1;
            if ((rc = engine_turn(s, e)) == 1)
                rc = engine_turn(s, e ^ 1);
            if (rc == 1) { /* both idle: a route, time, or an arrival wakes them */
                struct sreq *q = next_route(s, false);
                int64_t d = kvsim_conform_runner_next_deadline(s->run);
                int64_t now = kvsim_conform_runner_now(s->run);
                if (q)
                    rc = gen_route(s, q);
                else if (d != INT64_MAX)
                    rc = emit_advance_to(s, d > now ? d : now);
                else if (!all_added)
                    rc = gen_add(s);
                else
                    break; /* everything finished */
            }
        }
        if (rc)
            return rc;
    }
    return wind_down_disagg(s);
}

int kvsim_soak_run_seed(uint64_t seed, enum kvsim_soak_matrix matrix,
                        const struct kvsim_soak_overrides *o, json_t **doc,
                        struct kvsim_conform_result *res, struct kvsim_conform_stats *stats)
{
    *doc = NULL;
    struct soak s = {
        .rng = {seed ^ UINT64_C(0x6b7673696d736f6b)},  /* "kvsimsok" */
        .rng2 = {seed ^ UINT64_C(0x6f66666c6f616473)}, /* "offloads" */
        .rng3 = {seed ^ UINT64_C(0x6469736167677265)}, /* "disaggre" */
        .checks_off = o ? o->checks_off : 0,
        .contract = o && o->contract ? o->contract : SCHED_CONTRACT_LATEST,
    };
    pick_config(&s, matrix, o);
    int rc = make_requests(&s);
    s.pend = calloc(s.nreqs + 1, sizeof *s.pend);
    s.steps = json_array();
    json_t *cfg = config_json(&s, seed);
    char name[64], source[1024];
    snprintf(name, sizeof name, "soak seed %" PRIu64, seed);
    size_t len = (size_t)snprintf(source, sizeof source, "kvsim soak --matrix %s --seed %" PRIu64,
                                  kvsim_soak_matrix_name(matrix), seed);
    for (int i = 0; o && i < KVSIM_NUM_DIMS; i++) {
        char v[32];
        if (!o->set[i] || len >= sizeof source)
            continue;
        format_value(&dims[i], o->value[i], v, sizeof v);
        len += (size_t)snprintf(source + len, sizeof source - len, " --set %s=%s", dims[i].name, v);
    }
    if (o && o->contract && len < sizeof source)
        len +=
            (size_t)snprintf(source + len, sizeof source - len, " --vllm-contract %u", o->contract);
    if (o && o->checks_off && len < sizeof source) {
        static const char *const names[] = {"invariants", "liveness", "progress"};
        len += (size_t)snprintf(source + len, sizeof source - len, " --checks ");
        bool first = true;
        for (unsigned k = 0; k < 3 && len < sizeof source; k++)
            if (!(o->checks_off & (1u << k))) {
                len += (size_t)snprintf(source + len, sizeof source - len, "%s%s", first ? "" : ",",
                                        names[k]);
                first = false;
            }
        if (first && len < sizeof source) /* every check off: nothing to list */
            len += (size_t)snprintf(source + len, sizeof source - len, "none");
    }
    *doc = json_pack("{s:s,s:s,s:O,s:O}", "name", name, "source", source, "config", cfg, "steps",
                     s.steps);
    if (rc == 0 && (!s.pend || !s.steps || !cfg || !*doc))
        rc = -ENOMEM;
    if (rc == 0) {
        rc = kvsim_conform_runner_create(cfg, name, NULL, &s.run, &s.res);
        bool invalid = rc == -EINVAL; /* an invalid configuration: reported like any failure */
        if (invalid)
            s.failed = true;
        else if (rc == 0 && (s.disagg ? drive_disagg(&s) : drive(&s)) != 0 && !s.failed)
            rc = -ENOMEM;
        if (invalid)
            rc = 0;
    }
    if (res)
        *res = s.res;
    if (stats) {
        memset(stats, 0, sizeof *stats);
        if (s.run)
            *stats = *kvsim_conform_runner_stats(s.run);
    }
    kvsim_conform_runner_destroy(s.run);
    for (size_t i = 0; i < s.nreqs; i++)
        json_decref(s.reqs[i].add);
    free(s.reqs);
    free(s.pend);
    json_decref(s.steps);
    json_decref(cfg);
    if (rc) {
        json_decref(*doc);
        *doc = NULL;
        return rc;
    }
    return s.failed ? 1 : 0;
}
