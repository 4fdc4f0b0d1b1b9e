/*
 * workload.c - the built-in seeded synthetic workload (input.h): multi-turn chat
 * sessions whose prompts share system prompts and conversation history, as hash ids.
 *
 * Randomness comes from one xoshiro256** stream seeded through splitmix64 and drawn in a fixed
 * order (per session: arrival gap, group, turns; per turn: user length, output length, think
 * time), so the same options give the same workload bit for bit. Lengths are rounded to
 * integers and times to integer ns right after sampling.
 */
#include "runtime/input/input_internal.h"

#include "kvpool/base.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Spread of the log-normal length distributions (sigma of the underlying normal). */
#define USER_SIGMA      0.7
#define OUTPUT_SIGMA    0.8
/* User turns are capped at this multiple of their mean. */
#define USER_CAP_FACTOR 16

void kvsim_synth_opts_default(struct kvsim_synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->num_sessions = 300;
    o->max_turns = 6;
    o->session_rate = 6.0;
    o->num_prefix_groups = 8;
    o->system_prompt_len = 1024;
    o->mean_user_len = 300;
    o->mean_output_len = 200;
    o->max_output_len = 1000;
    o->mean_think_s = 2.0;
    o->block_size = 16;
    o->burstiness = 1.0;
    o->shared_prefix_ratio = 1.0;
}

/* ---- random numbers ---------------------------------------------------------------------- */

struct rng {
    uint64_t s[4];
};

static void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = base_splitmix64_next(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman and Vigna). */
static uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1), 53 bits. */
static double rng_unit(struct rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Uniform in [0, n), n >= 1, without modulo bias (Lemire's multiply-and-reject). */
static uint32_t rng_below(struct rng *r, uint32_t n)
{
    uint64_t m = (rng_next(r) >> 32) * n;
    if ((uint32_t)m < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while ((uint32_t)m < threshold)
            m = (rng_next(r) >> 32) * n;
    }
    return (uint32_t)(m >> 32);
}

/* Exponential with the given mean. */
static double rng_exp(struct rng *r, double mean) { return -mean * log1p(-rng_unit(r)); }

/* Standard normal (Box-Muller, one value per call). */
static double rng_normal(struct rng *r)
{
    double u1 = 1.0 - rng_unit(r); /* (0, 1] */
    double u2 = rng_unit(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Gamma with shape k > 0 and scale 1 (Marsaglia and Tsang; k < 1 by the boost k+1 and
 * U^(1/k)). */
static double rng_gamma(struct rng *r, double k)
{
    if (k < 1) {
        double u = rng_unit(r);
        return rng_gamma(r, k + 1) * pow(1.0 - u, 1.0 / k);
    }
    double d = k - 1.0 / 3, c = 1.0 / sqrt(9 * d);
    for (;;) {
        double x, v;
        do {
            x = rng_normal(r);
            v = 1 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = 1.0 - rng_unit(r); /* (0, 1] */
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

/* A gap between session starts: exponential (Poisson arrivals) at burstiness 1, else gamma
 * with that shape and the same mean, as vLLM's benchmark draws request gaps. */
static double rng_gap(struct rng *r, double rate, double burstiness)
{
    if (burstiness == 1.0)
        return rng_exp(r, 1.0 / rate);
    return rng_gamma(r, burstiness) / (rate * burstiness);
}

/* A log-normal length with the given mean, rounded and clamped to [1, cap]. */
static uint32_t rng_length(struct rng *r, uint32_t mean, double sigma, uint32_t cap)
{
    double mu = log((double)mean) - sigma * sigma / 2;
    double v = round(exp(mu + sigma * rng_normal(r)));
    if (!(v >= 1))
        return 1;
    return v >= (double)cap ? cap : (uint32_t)v;
}

/* ---- generation -------------------------------------------------------------------------- */

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen) {
        int k = snprintf(err, errlen, "synthetic workload: ");
        if (k >= 0 && (size_t)k < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return rc;
}

/* Appends n ids to t->hash_ids (capacity *cap). Returns 0 or -ENOMEM. */
static int push_ids(struct kvsim_trace *t, size_t *cap, const uint64_t *ids, size_t n)
{
    if (t->num_hash_ids + n > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < t->num_hash_ids + n)
            c *= 2;
        uint64_t *p = realloc(t->hash_ids, c * sizeof *p);
        if (!p)
            return -ENOMEM;
        t->hash_ids = p;
        *cap = c;
    }
    memcpy(t->hash_ids + t->num_hash_ids, ids, n * sizeof *ids);
    t->num_hash_ids += n;
    return 0;
}

/* Converts a duration in seconds to ns. Returns false if it would not fit comfortably. */
static bool seconds_to_ns(double s, int64_t *ns)
{
    double v = s * 1e9;
    if (!(v >= 0 && v < 0x1p61))
        return false;
    *ns = (int64_t)llround(v);
    return true;
}

/* Makes room for need ids in *blocks (capacity *cap). Returns 0 or -ENOMEM. */
static int reserve_ids(uint64_t **blocks, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    uint64_t *p = realloc(*blocks, c * sizeof *p);
    if (!p)
        return -ENOMEM;
    *blocks = p;
    *cap = c;
    return 0;
}

static int generate(const struct kvsim_synth_opts *o, struct kvsim_trace *t, char *err,
                    size_t errlen)
{
    struct rng rng;
    rng_seed(&rng, o->seed);
    const uint32_t bs = o->block_size;
    const uint64_t sys_blocks = o->system_prompt_len / bs; /* full blocks shared by a group */
    uint64_t next_id = (uint64_t)o->num_prefix_groups * sys_blocks; /* first fresh id */
    uint64_t user_cap64 = (uint64_t)o->mean_user_len * USER_CAP_FACTOR;
    uint32_t user_cap = user_cap64 > UINT32_MAX ? UINT32_MAX : (uint32_t)user_cap64;
    uint64_t *blocks = NULL; /* the current session's full-block ids, in stream order */
    size_t cap_blocks = 0, cap_hashes = 0;
    int64_t session_start = 0;
    int rc = 0;

    /* With a request count, sessions go on until it is reached (each has at least one turn). */
    uint64_t max_reqs =
        o->num_requests ? o->num_requests : (uint64_t)o->num_sessions * o->max_turns;
    uint32_t num_sessions = o->num_requests ? o->num_requests : o->num_sessions;
    t->reqs = calloc((size_t)max_reqs, sizeof *t->reqs);
    if (!t->reqs)
        goto nomem;
    uint32_t s = 0;
    for (; s < num_sessions && t->num_reqs < max_reqs; s++) {
        int64_t gap = 0;
        if (s > 0 && (!seconds_to_ns(rng_gap(&rng, o->session_rate, o->burstiness), &gap) ||
                      gap > INT64_MAX / 2 - session_start)) {
            rc = fail(err, errlen, -EINVAL, "session arrivals overflow (session_rate %g)",
                      o->session_rate);
            goto out;
        }
        session_start += gap;
        uint32_t group = rng_below(&rng, o->num_prefix_groups);
        uint32_t turns = 1 + rng_below(&rng, o->max_turns);
        if (turns > max_reqs - t->num_reqs)
            turns = (uint32_t)(max_reqs - t->num_reqs);
        /* Drawn only when some sessions do not share: the default stream stays as it was. */
        bool shared = o->shared_prefix_ratio >= 1.0 || rng_unit(&rng) < o->shared_prefix_ratio;

        /* The session's token stream starts with its group's system prompt (or its own). */
        size_t nblocks = (size_t)sys_blocks;
        if (reserve_ids(&blocks, &cap_blocks, nblocks))
            goto nomem;
        for (uint64_t j = 0; j < sys_blocks; j++)
            blocks[j] = shared ? group * sys_blocks + j : next_id++;
        uint64_t stream_len = o->system_prompt_len;

        int32_t prev = -1;
        for (uint32_t k = 0; k < turns; k++) {
            uint32_t user = o->fixed_lengths
                                ? o->mean_user_len
                                : rng_length(&rng, o->mean_user_len, USER_SIGMA, user_cap);
            uint32_t output =
                o->fixed_lengths
                    ? (o->mean_output_len < o->max_output_len ? o->mean_output_len
                                                              : o->max_output_len)
                    : rng_length(&rng, o->mean_output_len, OUTPUT_SIGMA, o->max_output_len);
            int64_t think = 0;
            if (k > 0 && !seconds_to_ns(rng_exp(&rng, o->mean_think_s), &think)) {
                rc = fail(err, errlen, -EINVAL, "think times overflow (mean_think_s %g)",
                          o->mean_think_s);
                goto out;
            }
            uint64_t len = stream_len + user;
            if (len > UINT32_MAX) {
                rc = fail(err, errlen, -EINVAL,
                          "a prompt of session %" PRIu32 " exceeds %" PRIu32 " tokens", s,
                          UINT32_MAX);
                goto out;
            }
            /* Blocks that became full since the last turn hold new content: fresh ids. */
            size_t full = (size_t)(len / bs);
            if (reserve_ids(&blocks, &cap_blocks, full))
                goto nomem;
            while (nblocks < full)
                blocks[nblocks++] = next_id++;
            if (t->num_hash_ids + full + 1 > UINT32_MAX) {
                rc = fail(err, errlen, -EINVAL, "more than %" PRIu32 " hash ids", UINT32_MAX);
                goto out;
            }

            struct kvsim_req_spec *r = &t->reqs[t->num_reqs];
            r->line = 0;
            r->input_len = (uint32_t)len;
            r->output_len = output;
            r->hash_off = (uint32_t)t->num_hash_ids;
            r->session = (int32_t)s;
            r->prev_turn = prev;
            r->delay_ns = think;
            r->arrival_ns = prev < 0 ? session_start : t->reqs[prev].arrival_ns + think;
            if (push_ids(t, &cap_hashes, blocks, full))
                goto nomem;
            if (len % bs) { /* the partial trailing block differs every turn */
                uint64_t id = next_id++;
                if (push_ids(t, &cap_hashes, &id, 1))
                    goto nomem;
            }
            r->num_hashes = (uint32_t)(t->num_hash_ids - r->hash_off);
            prev = (int32_t)t->num_reqs++;
            stream_len = len + output; /* the answer joins the conversation */
        }
    }
    t->num_sessions = s;
    t->block_size = bs;
    t->format = KVSIM_TRACE_SYNTHETIC;
    if (input__trace_sort(t))
        goto nomem;
    goto out;
nomem:
    rc = fail(err, errlen, -ENOMEM, "out of memory");
out:
    free(blocks);
    return rc;
}

int kvsim_workload_synthetic(const struct kvsim_synth_opts *o, struct kvsim_trace *out, char *err,
                             size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (err && errlen)
        err[0] = 0;
    if (o->num_sessions == 0)
        return fail(err, errlen, -EINVAL, "num_sessions must be >= 1");
    if (o->max_turns == 0)
        return fail(err, errlen, -EINVAL, "max_turns must be >= 1");
    if ((uint64_t)o->num_sessions * o->max_turns > (uint64_t)INT32_MAX)
        return fail(err, errlen, -EINVAL, "num_sessions * max_turns must be <= %" PRId32,
                    INT32_MAX);
    if (!(o->session_rate > 0) || !isfinite(o->session_rate))
        return fail(err, errlen, -EINVAL, "session_rate must be a positive finite number, got %g",
                    o->session_rate);
    if (o->num_prefix_groups == 0)
        return fail(err, errlen, -EINVAL, "num_prefix_groups must be >= 1");
    if (o->mean_user_len == 0)
        return fail(err, errlen, -EINVAL, "mean_user_len must be >= 1");
    if (o->mean_output_len == 0)
        return fail(err, errlen, -EINVAL, "mean_output_len must be >= 1");
    if (o->max_output_len == 0)
        return fail(err, errlen, -EINVAL, "max_output_len must be >= 1");
    if (!(o->mean_think_s >= 0) || !isfinite(o->mean_think_s))
        return fail(err, errlen, -EINVAL, "mean_think_s must be a finite number >= 0, got %g",
                    o->mean_think_s);
    if (o->block_size == 0)
        return fail(err, errlen, -EINVAL, "block_size must be >= 1");
    if (o->num_requests > (uint32_t)INT32_MAX)
        return fail(err, errlen, -EINVAL, "num_requests must be <= %" PRId32, INT32_MAX);
    if (!(o->burstiness > 0) || !isfinite(o->burstiness))
        return fail(err, errlen, -EINVAL, "burstiness must be a positive finite number, got %g",
                    o->burstiness);
    if (!(o->shared_prefix_ratio >= 0 && o->shared_prefix_ratio <= 1))
        return fail(err, errlen, -EINVAL, "shared_prefix_ratio must be in [0, 1], got %g",
                    o->shared_prefix_ratio);
    int rc = generate(o, out, err, errlen);
    if (rc)
        kvsim_trace_free(out);
    return rc;
}
