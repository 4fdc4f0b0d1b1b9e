/*
 * step_model.c - the step-time model (engine.h): Dynamo mocker's polynomial over a step's prefill
 * tokens and KV utilisation, and its JSON configuration, or the profile model (profile.c). Pure
 * functions: any thread.
 */
#include "runtime/engine/engine_internal.h"

#include <errno.h>
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

static int load_coeffs(json_t *v, double out[3], const char *path, const char *key, char *err,
                       size_t errlen)
{
    if (!json_is_array(v) || json_array_size(v) != 3) {
        snprintf(err, errlen, "%s: key '%s' must be an array of 3 numbers [c2, c1, c0]", path, key);
        return -EINVAL;
    }
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(v, i);
        if (!json_is_number(c) || !isfinite(json_number_value(c))) {
            snprintf(err, errlen, "%s: key '%s'[%zu] must be a finite number", path, key, i);
            return -EINVAL;
        }
        out[i] = json_number_value(c);
    }
    return 0;
}

int kvsim_step_model_load(const char *path, struct kvsim_step_model *m, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(err, errlen, "%s:%d: %s", path, jerr.line, jerr.text);
        return jerr.line <= 0 ? -ENOENT : -EINVAL;
    }
    int rc = 0;
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
            if (!json_is_number(v) || !(json_number_value(v) > 0)) {
                snprintf(err, errlen, "%s: key 'speedup_ratio' must be a number > 0", path);
                rc = -EINVAL;
            } else {
                m->speedup_ratio = json_number_value(v);
            }
        } else if (!strcmp(key, "step_overhead_ms")) {
            if (!json_is_number(v) || !(json_number_value(v) >= 0) ||
                !isfinite(json_number_value(v))) {
                snprintf(err, errlen, "%s: key 'step_overhead_ms' must be a number >= 0", path);
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
                    if (!json_is_number(v2) || json_number_value(v2) < 0) {
                        snprintf(err, errlen,
                                 "%s: key 'step_model.decode_floor_ms' must be a number >= 0",
                                 path);
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
