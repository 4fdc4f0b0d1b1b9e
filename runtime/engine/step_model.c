/*
 * step_model.c - the step-time model (engine.h): Dynamo mocker's polynomial over a step's prefill
 * tokens and KV utilisation, and its JSON configuration, or the profile model (profile.c). Pure
 * functions: any thread.
 */
#include "runtime/engine/engine_internal.h"
#include "runtime/input/input.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void kvsim_step_model_default(struct kvsim_step_model *m)
{
    m->prefill_ms[0] = 4.209989e-7;
    m->prefill_ms[1] = 1.518344e-2;
    m->prefill_ms[2] = 16.50142;
    m->decode_ms[0] = -25.74;
    m->decode_ms[1] = 54.01;
    m->decode_ms[2] = 5.74;
    m->decode_floor_ms = 1.0;
    m->speedup_ratio = 1.0;
    m->step_overhead_ms = 0.0;
    m->profile = NULL;
}

int64_t kvsim_step_model_duration_ns(const struct kvsim_step_model *m,
                                     const struct kvsim_step_batch *b)
{
    return kvsim_step_model_cost_ns(m, b, NULL);
}

/*
 * llround(x): to nearest, halves away from zero. Inline for the values steps take (|x| < 2^62),
 * where x - trunc(x) is exact; libm's call for the rest (NaN, huge), as before. Called once per
 * step.
 */
static inline int64_t round_ns(double x)
{
    if (!(x > -0x1p62 && x < 0x1p62))
        return llround(x);
    int64_t i = (int64_t)x;
    double f = x - (double)i;
    return i + (f >= 0.5) - (f <= -0.5);
}

int64_t kvsim_step_model_cost_ns(const struct kvsim_step_model *m, const struct kvsim_step_batch *b,
                                 unsigned *outside)
{
    double ms = 0.0;
    if (outside)
        *outside = 0;
    if (m->profile) {
        ms = kvsim_profile__step_us(m->profile, b, outside) / 1e3;
    } else if (b->prefill_tokens) {
        double t = (double)b->prefill_tokens;
        ms += (m->prefill_ms[0] * t + m->prefill_ms[1]) * t + m->prefill_ms[2];
    }
    if (!m->profile && b->num_decode_reqs) {
        double u = b->kv_usage;
        double d = (m->decode_ms[0] * u + m->decode_ms[1]) * u + m->decode_ms[2];
        ms += d > m->decode_floor_ms ? d : m->decode_floor_ms;
    }
    if (m->speedup_ratio > 0 && m->speedup_ratio != 1.0) /* x / 1 is x: skip the division */
        ms /= m->speedup_ratio;
    ms += m->step_overhead_ms;
    int64_t ns = round_ns(ms * 1e6);
    return ns > 0 ? ns : 1;
}

int64_t kvsim_step_model_min_duration_ns(const struct kvsim_step_model *m)
{
    /* A prefill step has T >= 1 new tokens: with non-negative coefficients it costs at least
     * p(1); a decode step at least the floor; a mixed step both. */
    double pre = 0.0;
    if (m->prefill_ms[0] >= 0 && m->prefill_ms[1] >= 0)
        pre = m->prefill_ms[0] + m->prefill_ms[1] + m->prefill_ms[2];
    double ms = pre < m->decode_floor_ms ? pre : m->decode_floor_ms;
    if (m->profile)
        ms = kvsim_profile__min_step_us(m->profile) / 1e3;
    if (m->speedup_ratio > 0)
        ms /= m->speedup_ratio;
    ms += m->step_overhead_ms;
    double ns = ms * 1e6 - 1.0; /* below any rounding of kvsim_step_model_duration_ns */
    return ns > 1.0 ? (int64_t)ns : 1;
}

/* ---- the bounds (engine.h's KVSIM_STEP_*; docs/fidelity/timing.md) --------------------------- */

/* The smallest and largest value of c2 x^2 + c1 x + c0 over [lo, hi] (x an integer if integer),
 * and where they are. Exact: the ends and the vertex (its two integer neighbours). */
static void quad_range(const double c[3], double lo, double hi, bool integer, double *min,
                       double *at_min, double *max, double *at_max)
{
    double xs[4] = {lo, hi, lo, lo};
    int n = 2;
    if (c[0] != 0) {
        double v = -c[1] / (2 * c[0]);
        if (v > lo && v < hi) {
            if (integer) {
                xs[n++] = floor(v);
                xs[n++] = ceil(v);
            } else {
                xs[n++] = v;
            }
        }
    }
    *min = INFINITY;
    *max = -INFINITY;
    for (int i = 0; i < n; i++) {
        double y = (c[0] * xs[i] + c[1]) * xs[i] + c[2];
        if (y < *min)
            *min = y, *at_min = xs[i];
        if (y > *max)
            *max = y, *at_max = xs[i];
    }
}

/* At least KVSIM_STEP_MIN_NS once rounded to the nanosecond, as a step's time is. */
static bool long_enough(double ms) { return ms * 1e6 >= KVSIM_STEP_MIN_NS - 0.5; }

int kvsim_step_model_check(const struct kvsim_step_model *m, uint32_t max_batched_tokens,
                           uint32_t max_num_seqs, char *err, size_t errlen)
{
    const double lo_ms = KVSIM_STEP_MIN_NS / 1e6, hi_ms = KVSIM_STEP_MAX_NS / 1e6;
    double s = m->speedup_ratio, o = m->step_overhead_ms;
    if (m->profile) {
        double lo = kvsim_profile__min_step_us(m->profile) / 1e3 / s + o;
        double hi = kvsim_profile__max_step_us(m->profile, max_num_seqs) / 1e3 / s + o;
        if (!long_enough(lo) || !(hi <= hi_ms)) {
            snprintf(err, errlen,
                     "%s: a step of this profile takes from %.6g ms to %.6g ms (up to %" PRIu32
                     " sequences, after speedup_ratio %g and step_overhead_ms %g); every step "
                     "must take between %g ms and %g ms",
                     kvsim_profile_dir(m->profile), lo, hi, max_num_seqs, s, o, lo_ms, hi_ms);
            return -EINVAL;
        }
        return 0;
    }
    /* A step runs T in [1, max_batched_tokens] prefill tokens, decodes at KV usage u in [0, 1],
     * or both: ms = (P(T) + max(D(u), floor)) / s + o, each part over its own range. */
    double pmin, pmin_t, pmax, pmax_t, dmin, dmin_u, dmax, dmax_u;
    double tmax = max_batched_tokens ? max_batched_tokens : 1;
    quad_range(m->prefill_ms, 1, tmax, true, &pmin, &pmin_t, &pmax, &pmax_t);
    quad_range(m->decode_ms, 0, 1, false, &dmin, &dmin_u, &dmax, &dmax_u);
    dmin = dmin > m->decode_floor_ms ? dmin : m->decode_floor_ms;
    dmax = dmax > m->decode_floor_ms ? dmax : m->decode_floor_ms;
    double prefill_lo = pmin / s + o, decode_lo = dmin / s + o, mixed_lo = (pmin + dmin) / s + o;
    double hi = (pmax > 0 ? pmax : 0) + dmax;
    hi = hi / s + o;
    if (!long_enough(prefill_lo)) {
        snprintf(err, errlen,
                 "key 'step_model.prefill_ms': a prefill step of %.0f token%s takes %.6g ms (after "
                 "speedup_ratio %g and step_overhead_ms %g); every step must take at least %g ms",
                 pmin_t, pmin_t == 1 ? "" : "s", prefill_lo, s, o, lo_ms);
    } else if (!long_enough(decode_lo)) {
        snprintf(err, errlen,
                 "keys 'step_model.decode_ms' and 'step_model.decode_floor_ms': a decode step at "
                 "KV usage %.3g takes %.6g ms (after speedup_ratio %g and step_overhead_ms %g); "
                 "every step must take at least %g ms",
                 dmin_u, decode_lo, s, o, lo_ms);
    } else if (!long_enough(mixed_lo)) {
        snprintf(err, errlen,
                 "keys 'step_model.prefill_ms' and 'step_model.decode_ms': a step of %.0f prefill "
                 "tokens and decodes takes %.6g ms; every step must take at least %g ms",
                 pmin_t, mixed_lo, lo_ms);
    } else if (!(hi <= hi_ms)) {
        snprintf(err, errlen,
                 "keys 'step_model.prefill_ms' and 'step_model.decode_ms': a step of %.0f prefill "
                 "tokens (max_num_batched_tokens %" PRIu32 ") and decodes at KV usage %.3g takes "
                 "%.6g ms (after speedup_ratio %g and step_overhead_ms %g); every step must take "
                 "at most %g ms (an hour: a million such steps still fit the clock)",
                 pmax_t, max_batched_tokens, dmax_u, hi, s, o, hi_ms);
    } else {
        return 0;
    }
    return -EINVAL;
}

/* A number in [lo, hi] at key (a finite JSON number). */
static bool number_in(json_t *v, double lo, double hi)
{
    return json_is_number(v) && json_number_value(v) >= lo && json_number_value(v) <= hi;
}

static int load_coeffs(json_t *v, double out[3], const char *path, const char *key, char *err,
                       size_t errlen)
{
    if (!json_is_array(v) || json_array_size(v) != 3) {
        snprintf(err, errlen, "%s: key '%s' must be an array of 3 numbers [c2, c1, c0]", path, key);
        return -EINVAL;
    }
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(v, i);
        if (!number_in(c, -KVSIM_STEP_COEFF_MAX_MS, KVSIM_STEP_COEFF_MAX_MS)) {
            snprintf(err, errlen, "%s: key '%s'[%zu] must be a number in [%g, %g]", path, key, i,
                     -KVSIM_STEP_COEFF_MAX_MS, KVSIM_STEP_COEFF_MAX_MS);
            return -EINVAL;
        }
        out[i] = json_number_value(c);
    }
    return 0;
}

int kvsim_step_model_load(const char *path, struct kvsim_step_model *m, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root;
    /* Every value is a real: an integer past int64 (2^64) reaches the range check, which names
     * its key, instead of failing the parse. */
    int rc =
        kvsim_json_load_file(path, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &root, &jerr);
    if (rc) {
        kvsim_json_error_message(path, &jerr, err, errlen);
        return rc;
    }
    const char *key;
    json_t *v;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: the configuration must be a JSON object", path);
        rc = -EINVAL;
    }
    json_object_foreach(root, key, v)
    {
        if (rc)
            break;
        if (!strcmp(key, "speedup_ratio")) {
            if (!number_in(v, KVSIM_STEP_SPEEDUP_MIN, KVSIM_STEP_SPEEDUP_MAX)) {
                snprintf(err, errlen, "%s: key 'speedup_ratio' must be a number in [%g, %g]", path,
                         KVSIM_STEP_SPEEDUP_MIN, KVSIM_STEP_SPEEDUP_MAX);
                rc = -EINVAL;
            } else {
                m->speedup_ratio = json_number_value(v);
            }
        } else if (!strcmp(key, "step_overhead_ms")) {
            if (!number_in(v, 0, KVSIM_STEP_COEFF_MAX_MS)) {
                snprintf(err, errlen, "%s: key 'step_overhead_ms' must be a number in [0, %g]",
                         path, KVSIM_STEP_COEFF_MAX_MS);
                rc = -EINVAL;
            } else {
                m->step_overhead_ms = json_number_value(v);
            }
        } else if (!strcmp(key, "step_model")) {
            const char *k2;
            json_t *v2;
            if (!json_is_object(v)) {
                snprintf(err, errlen, "%s: key 'step_model' must be an object", path);
                rc = -EINVAL;
                break;
            }
            json_object_foreach(v, k2, v2)
            {
                if (rc)
                    break;
                if (!strcmp(k2, "prefill_ms")) {
                    rc = load_coeffs(v2, m->prefill_ms, path, "step_model.prefill_ms", err, errlen);
                } else if (!strcmp(k2, "decode_ms")) {
                    rc = load_coeffs(v2, m->decode_ms, path, "step_model.decode_ms", err, errlen);
                } else if (!strcmp(k2, "decode_floor_ms")) {
                    if (!number_in(v2, 0, KVSIM_STEP_COEFF_MAX_MS)) {
                        snprintf(err, errlen,
                                 "%s: key 'step_model.decode_floor_ms' must be a number in [0, %g]",
                                 path, KVSIM_STEP_COEFF_MAX_MS);
                        rc = -EINVAL;
                    } else {
                        m->decode_floor_ms = json_number_value(v2);
                    }
                } else {
                    snprintf(err, errlen, "%s: unknown key 'step_model.%s'", path, k2);
                    rc = -EINVAL;
                }
            }
        } else if (!strcmp(key, "format") || !strcmp(key, "kvsim") || !strcmp(key, "options")) {
            /* a whole run configuration (kvsim replay --config-out): the option table reads
             * its options (runtime/api/config.c), the step model its own keys */
        } else {
            snprintf(err, errlen,
                     "%s: unknown key '%s' (expected step_model, speedup_ratio, step_overhead_ms, "
                     "or a run configuration's format, kvsim, options)",
                     path, key);
            rc = -EINVAL;
        }
    }
    json_decref(root);
    return rc;
}
