/*
 * engine_args.c - vLLM engine arguments from a JSON file onto a scheduler configuration
 * (engine.h, kvsim_engine_args_load). Pure function of the file: any thread.
 */
#include "runtime/engine/engine.h"
#include "runtime/input/input.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* An integer key in [lo, hi]. Returns 0 or -EINVAL with the message. */
static int get_uint(json_t *v, const char *path, const char *key, uint64_t lo, uint64_t hi,
                    uint32_t *out, char *err, size_t errlen)
{
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
    if (!json_is_integer(v) || x < 0 || (uint64_t)x < lo || (uint64_t)x > hi) {
        snprintf(err, errlen, "%s: key '%s' must be an integer in [%llu, %llu]", path, key,
                 (unsigned long long)lo, (unsigned long long)hi);
        return -EINVAL;
    }
    *out = (uint32_t)x;
    return 0;
}

static int get_bool(json_t *v, const char *path, const char *key, bool *out, char *err,
                    size_t errlen)
{
    if (!json_is_boolean(v)) {
        snprintf(err, errlen, "%s: key '%s' must be true or false", path, key);
        return -EINVAL;
    }
    *out = json_is_true(v);
    return 0;
}

/* One key. Returns 0, -EINVAL (its value), or 1 (not a key kvsim models). */
static int apply_key(const char *key, json_t *v, const char *path, struct sched_config *sc,
                     struct kvsim_parallel_args *par, char *err, size_t errlen)
{
    if (!strcmp(key, "data_parallel_size")) {
        uint32_t x;
        int rc = get_uint(v, path, key, 1, par ? 4096 : 1, &x, err, errlen);
        if (rc && !par && json_is_integer(v) && json_integer_value(v) > 1)
            snprintf(err, errlen,
                     "%s: key 'data_parallel_size' must be 1 here (data parallelism and "
                     "disaggregated serving do not combine yet)",
                     path);
        if (rc == 0 && par)
            par->data_parallel_size = x;
        return rc;
    }
    if (!strcmp(key, "enable_expert_parallel")) {
        bool b;
        int rc = get_bool(v, path, key, &b, err, errlen);
        if (rc == 0 && b && !par) {
            snprintf(err, errlen,
                     "%s: key 'enable_expert_parallel' must be false here (expert parallelism "
                     "and disaggregated serving do not combine yet)",
                     path);
            rc = -EINVAL;
        }
        if (rc == 0 && par)
            par->enable_expert_parallel = b;
        return rc;
    }
    if (!strcmp(key, "block_size"))
        return get_uint(v, path, key, 1, 65536, &sc->block_size, err, errlen);
    if (!strcmp(key, "num_gpu_blocks_override"))
        return get_uint(v, path, key, 2, (uint64_t)INT32_MAX - 2, &sc->num_blocks, err, errlen);
    if (!strcmp(key, "max_num_seqs"))
        return get_uint(v, path, key, 1, 1 << 20, &sc->max_num_seqs, err, errlen);
    if (!strcmp(key, "max_num_batched_tokens"))
        return get_uint(v, path, key, 1, UINT32_MAX, &sc->max_num_batched_tokens, err, errlen);
    if (!strcmp(key, "watermark")) {
        double w = json_number_value(v);
        if (!json_is_number(v) || !(w >= 0 && w < 1)) {
            snprintf(err, errlen, "%s: key 'watermark' must be a number in [0, 1)", path);
            return -EINVAL;
        }
        sc->watermark = w;
        return 0;
    }
    if (!strcmp(key, "max_num_queued_reqs"))
        return get_uint(v, path, key, 1, UINT32_MAX, &sc->max_num_queued_reqs, err, errlen);
    if (!strcmp(key, "max_num_active_seqs"))
        return get_uint(v, path, key, 1, 1 << 20, &sc->max_num_active_seqs, err, errlen);
    if (!strcmp(key, "max_model_len"))
        return get_uint(v, path, key, 2, UINT32_MAX, &sc->max_model_len, err, errlen);
    if (!strcmp(key, "long_prefill_token_threshold"))
        return get_uint(v, path, key, 0, UINT32_MAX, &sc->long_prefill_token_threshold, err,
                        errlen);
    if (!strcmp(key, "enable_prefix_caching"))
        return get_bool(v, path, key, &sc->enable_prefix_caching, err, errlen);
    if (!strcmp(key, "enable_chunked_prefill"))
        return get_bool(v, path, key, &sc->enable_chunked_prefill, err, errlen);
    if (!strcmp(key, "async_scheduling"))
        return get_bool(v, path, key, &sc->async_scheduling, err, errlen);
    if (!strcmp(key, "scheduling_policy")) {
        const char *p = json_string_value(v);
        if (p && !strcmp(p, "fcfs"))
            sc->policy = SCHED_POLICY_FCFS;
        else if (p && !strcmp(p, "priority"))
            sc->policy = SCHED_POLICY_PRIORITY;
        else {
            snprintf(err, errlen, "%s: key 'scheduling_policy' must be \"fcfs\" or \"priority\"",
                     path);
            return -EINVAL;
        }
        return 0;
    }
    return 1;
}

/*
 * A file jansson refuses for an integer past int64 ("too big integer"): read again with every
 * number a real, and refuse the first key holding such a value by its own rule, so that the
 * message names the key. Returns -EINVAL with the message, or 0 when no key is found.
 */
static int refuse_huge_integer(const char *path, char *err, size_t errlen)
{
    json_t *root;
    (void)kvsim_json_load_file(path, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &root, NULL);
    const char *key;
    json_t *v;
    int rc = 0;
    struct sched_config scratch;
    memset(&scratch, 0, sizeof scratch);
    if (json_is_object(root))
        json_object_foreach(root, key, v)
        {
            if (!json_is_real(v) || fabs(json_real_value(v)) < 0x1p63)
                continue;
            struct kvsim_parallel_args par;
            rc = apply_key(key, v, path, &scratch, &par, err, errlen);
            if (rc == 1)
                snprintf(err, errlen, "%s: unknown key '%s'", path, key);
            rc = -EINVAL;
            break;
        }
    json_decref(root);
    return rc;
}

int kvsim_engine_args_load(const char *path, struct sched_config *sc,
                           struct kvsim_parallel_args *par, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root;
    int lrc = kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &root, &jerr);
    if (lrc && jerr.line > 0 && strstr(jerr.text, "too big integer") &&
        refuse_huge_integer(path, err, errlen))
        return -EINVAL;
    if (lrc) {
        kvsim_json_error_message(path, &jerr, err, errlen);
        return lrc;
    }
    int rc = 0;
    /* Read into copies, kept only when every key is good: a refused file changes nothing. */
    struct sched_config tmp = *sc;
    struct kvsim_parallel_args ptmp = {1, false};
    if (par)
        ptmp = *par;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: the engine arguments must be a JSON object", path);
        rc = -EINVAL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (rc)
            break;
        rc = apply_key(key, v, path, &tmp, par ? &ptmp : NULL, err, errlen);
        if (rc == 1) {
            snprintf(err, errlen,
                     "%s: unknown key '%s' (kvsim models block_size, num_gpu_blocks_override, "
                     "max_num_seqs, max_num_active_seqs, max_num_queued_reqs, "
                     "max_num_batched_tokens, max_model_len, "
                     "long_prefill_token_threshold, watermark, enable_prefix_caching, "
                     "enable_chunked_prefill, async_scheduling, scheduling_policy, "
                     "data_parallel_size, enable_expert_parallel)",
                     path, key);
            rc = -EINVAL;
        }
    }
    json_decref(root);
    if (rc == 0) {
        *sc = tmp;
        if (par)
            *par = ptmp;
    }
    return rc;
}
