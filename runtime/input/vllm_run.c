/*
 * vllm_run.c - one row of a recorded vLLM run's requests.jsonl (input.h): `request_id`,
 * `input_toks`, `output_toks` and `queued_ts` (s, monotonic clock), each validated strictly;
 * the other recorded times (`arrival_time`, `scheduled_ts`, `first_token_ts`, `last_token_ts`)
 * must be numbers and are ignored. A request arrives at its queued_ts: the instant vLLM's engine
 * queued it, from which the recording measures TTFT. No prefix information, no sessions.
 */
#include "runtime/input/input_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Largest accepted queued_ts: 10^9 s (about 31 years of uptime), so ns fit in an int64. */
#define MAX_S 1e9

/* ---- vLLM run JSONL ---------------------------------------------------------------------- */

static const char *const REQUIRED_KEYS[] = {"request_id", "input_toks", "output_toks", "queued_ts"};
/* Recorded, checked to be numbers, not used. */
static const char *const IGNORED_KEYS[] = {"arrival_time", "scheduled_ts", "first_token_ts",
                                           "last_token_ts"};

#define COUNT(a) (sizeof(a) / sizeof *(a))

static bool in_list(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, list[i]) == 0)
            return true;
    return false;
}

/* Reads the required queued_ts (s, a finite number in [0, MAX_S]) as ns. Returns 0 or -EINVAL. */
static int get_queued_ns(struct loader *ld, uint32_t line, json_t *o, int64_t *ns)
{
    static const char name[] = "queued_ts";
    json_t *v = json_object_get(o, name);
    if (!v)
        return input__fail_field(ld, line, name, "missing");
    if (!json_is_number(v))
        return input__fail_field(ld, line, name, "expected a number, got %s", input__json_kind(v));
    double x = json_number_value(v);
    if (!isfinite(x))
        return input__fail_field(ld, line, name, "not a finite number");
    if (x < 0)
        return input__fail_field(ld, line, name, "must be >= 0, got %g", x);
    if (x > MAX_S)
        return input__fail_field(ld, line, name, "%g s is too large (max %g s)", x, MAX_S);
    *ns = (int64_t)llround(x * 1e9);
    return 0;
}

/* Validates one JSON object (one row) and appends it. Returns 0 or a negative errno. */
static int vllm_run_row(struct loader *ld, uint32_t line, json_t *o)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (in_list(key, REQUIRED_KEYS, COUNT(REQUIRED_KEYS)))
            continue;
        if (!in_list(key, IGNORED_KEYS, COUNT(IGNORED_KEYS)))
            return input__fail_field(
                ld, line, key,
                "unknown field (expected request_id, input_toks, output_toks, queued_ts, "
                "arrival_time, scheduled_ts, first_token_ts, last_token_ts)");
        if (!json_is_number(v))
            return input__fail_field(ld, line, key, "expected a number, got %s",
                                     input__json_kind(v));
    }

    json_t *id = json_object_get(o, "request_id");
    if (!id)
        return input__fail_field(ld, line, "request_id", "missing");
    if (!json_is_string(id))
        return input__fail_field(ld, line, "request_id", "expected a string, got %s",
                                 input__json_kind(id));
    uint32_t input_len = 0, output_len = 0;
    int64_t queued_ns = 0;
    int rc = input__get_u32(ld, line, o, "input_toks", 1, &input_len);
    if (!rc)
        rc = input__get_u32(ld, line, o, "output_toks", 1, &output_len);
    if (!rc)
        rc = get_queued_ns(ld, line, o, &queued_ns);
    if (rc)
        return rc;

    struct kvsim_req_spec *r = input__add_req(ld, line, queued_ns);
    if (!r)
        return input__oom(ld);
    r->input_len = input_len;
    r->output_len = output_len;
    return 0;
}

int input__vllm_run_line(struct loader *ld, uint32_t line, const char *s, size_t n)
{
    return input__json_line(ld, line, s, n, vllm_run_row);
}
