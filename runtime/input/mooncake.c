/*
 * mooncake.c - one row of a Mooncake JSONL trace (input.h): `timestamp` (ms), `input_length`,
 * `output_length`, `hash_ids`, optional `session_id` and `delay`, each validated strictly.
 */
#include "runtime/input/input_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest accepted Mooncake time value (timestamp, delay): 10^12 ms, about 31 years. */
#define MAX_MS 1000000000000LL

/* ---- Mooncake JSONL ---------------------------------------------------------------------- */

static const char *const MOONCAKE_KEYS[] = {"timestamp", "input_length", "output_length",
                                            "hash_ids",  "session_id",   "delay"};

/* Reads a time in ms (a number in [0, MAX_MS]) as ns. Returns 0 or -EINVAL. */
static int get_ms(struct loader *ld, uint32_t line, json_t *v, const char *name, int64_t *ns)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < 0)
            return input__fail_field(ld, line, name, "must be >= 0, got %" JSON_INTEGER_FORMAT, x);
        if (x > MAX_MS)
            return input__fail_field(ld, line, name,
                                     "%" JSON_INTEGER_FORMAT " ms is too large (max %lld ms)", x,
                                     MAX_MS);
        *ns = (int64_t)x * 1000000;
        return 0;
    }
    if (!json_is_real(v))
        return input__fail_field(ld, line, name, "expected a number, got %s", input__json_kind(v));
    double x = json_real_value(v);
    if (!isfinite(x))
        return input__fail_field(ld, line, name, "not a finite number");
    if (x < 0)
        return input__fail_field(ld, line, name, "must be >= 0, got %g", x);
    if (x > (double)MAX_MS)
        return input__fail_field(ld, line, name, "%g ms is too large (max %lld ms)", x, MAX_MS);
    *ns = (int64_t)llround(x * 1e6);
    return 0;
}

/* Validates one JSON object (one row) and appends it. Returns 0 or a negative errno. */
static int mooncake_row(struct loader *ld, uint32_t line, json_t *o)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof MOONCAKE_KEYS / sizeof *MOONCAKE_KEYS; i++)
            known = known || strcmp(key, MOONCAKE_KEYS[i]) == 0;
        if (!known)
            return input__fail_field(
                ld, line, key,
                "unknown field (expected timestamp, input_length, output_length, "
                "hash_ids, session_id, delay)");
    }

    int64_t ts_ns, delay_ns = -1;
    uint32_t input_len, output_len;
    json_t *ts = json_object_get(o, "timestamp");
    if (!ts)
        return input__fail_field(ld, line, "timestamp", "missing");
    int rc = get_ms(ld, line, ts, "timestamp", &ts_ns);
    if (!rc)
        rc = input__get_u32(ld, line, o, "input_length", 1, &input_len);
    if (!rc)
        rc = input__get_u32(ld, line, o, "output_length", 1, &output_len);
    if (rc)
        return rc;

    json_t *h = json_object_get(o, "hash_ids");
    if (!h)
        return input__fail_field(ld, line, "hash_ids", "missing");
    if (!json_is_array(h))
        return input__fail_field(ld, line, "hash_ids", "expected an array, got %s",
                                 input__json_kind(h));
    size_t nh = json_array_size(h);
    uint64_t bs = ld->opts->trace_block_size;
    uint64_t needed = (input_len + bs - 1) / bs;
    if (nh == 0)
        return input__fail_field(ld, line, "hash_ids", "empty (at least one hash id is needed)");
    if (nh > needed)
        return input__fail_field(ld, line, "hash_ids",
                                 "%zu hash ids, but input_length %" PRIu32 " needs only %" PRIu64
                                 " at %" PRIu64 " tokens per id",
                                 nh, input_len, needed, bs);
    struct kvsim_trace *t = ld->t;
    if (t->num_hash_ids + nh > UINT32_MAX)
        return input__fail(ld, -EINVAL, line, "more than %" PRIu32 " hash ids in the trace",
                           UINT32_MAX);
    if (input__grow((void **)&t->hash_ids, &ld->cap_hashes, t->num_hash_ids + nh,
                    sizeof *t->hash_ids))
        return input__oom(ld);
    for (size_t i = 0; i < nh; i++) {
        json_t *e = json_array_get(h, i);
        if (!json_is_integer(e))
            return input__fail_field(ld, line, "hash_ids",
                                     "element %zu is %s, expected a non-negative integer", i,
                                     input__json_kind(e));
        if (json_integer_value(e) < 0)
            return input__fail_field(ld, line, "hash_ids",
                                     "element %zu is negative (%" JSON_INTEGER_FORMAT ")", i,
                                     json_integer_value(e));
        if (json_integer_value(e) > KVSIM_MAX_HASH_ID)
            return input__fail_field(ld, line, "hash_ids",
                                     "element %zu is %" JSON_INTEGER_FORMAT
                                     ", above the largest hash id kvsim expands (2^31 - 1)",
                                     i, json_integer_value(e));
        t->hash_ids[t->num_hash_ids + i] = (uint64_t)json_integer_value(e);
    }

    /* The session key: type-tagged, so the integer 7 and the string "7" are different ids. */
    char ibuf[32], q[INPUT__QUOTE_MAX + 8];
    const char *skey = NULL, *sname = NULL;
    size_t slen = 0;
    json_t *sid = json_object_get(o, "session_id");
    if (sid && json_is_string(sid)) {
        size_t n = json_string_length(sid);
        char *k = malloc(n + 1);
        if (!k)
            return input__oom(ld);
        k[0] = 's';
        memcpy(k + 1, json_string_value(sid), n);
        skey = k;
        slen = n + 1;
        input__quote(q, sizeof q, json_string_value(sid), n);
        sname = q;
    } else if (sid && json_is_integer(sid)) {
        int n = snprintf(ibuf, sizeof ibuf, "i%" JSON_INTEGER_FORMAT, json_integer_value(sid));
        skey = ibuf;
        slen = (size_t)n;
        sname = ibuf + 1;
    } else if (sid && !json_is_null(sid)) {
        return input__fail_field(ld, line, "session_id", "expected a string or an integer, got %s",
                                 input__json_kind(sid));
    }

    json_t *dl = json_object_get(o, "delay");
    if (dl && !json_is_null(dl) && (rc = get_ms(ld, line, dl, "delay", &delay_ns)))
        goto out;

    int32_t session = -1, prev = -1;
    if (skey) {
        bool is_new;
        if (input__session_lookup(ld, skey, slen, &session, &is_new)) {
            rc = input__oom(ld);
            goto out;
        }
        if (!is_new)
            prev = ld->last_turn[session];
    }
    if (prev < 0 && delay_ns > 0) {
        rc = skey ? input__fail_field(
                        ld, line, "delay",
                        "non-zero delay on the first turn of session %s%s%s (a delay is "
                        "only allowed on a later turn)",
                        json_is_string(sid) ? "'" : "", sname, json_is_string(sid) ? "'" : "")
                  : input__fail_field(ld, line, "delay",
                                      "non-zero delay on a row without session_id (a delay is only "
                                      "allowed on a later turn of a session)");
        goto out;
    }

    struct kvsim_req_spec *r = input__add_req(ld, line, ts_ns);
    if (!r) {
        rc = input__oom(ld);
        goto out;
    }
    r->output_len = output_len;
    r->hash_off = (uint32_t)t->num_hash_ids;
    r->num_hashes = (uint32_t)nh;
    if (input_len > nh * bs) {
        r->input_len = (uint32_t)(nh * bs);
        r->clamped = true;
        t->num_clamped++;
    } else {
        r->input_len = input_len;
    }
    t->num_hash_ids += nh;
    r->session = session;
    r->prev_turn = prev;
    if (prev >= 0)
        ld->raw_delay[t->num_reqs - 1] = delay_ns;
    if (session >= 0)
        ld->last_turn[session] = (int32_t)(t->num_reqs - 1);
out:
    if (skey && skey != ibuf)
        free((void *)skey);
    return rc;
}

int input__mooncake_line(struct loader *ld, uint32_t line, const char *s, size_t n)
{
    return input__json_line(ld, line, s, n, mooncake_row);
}
