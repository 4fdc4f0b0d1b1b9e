/*
 * jsonl.c - what the JSONL formats (mooncake.c, vllm_run.c) share: a line parsed into one JSON
 * object, the kind of a value in messages, token counts. Same thread as kvsim_trace_load.
 */
#include "runtime/input/input_internal.h"

#include <errno.h>
#include <inttypes.h>

const char *input__json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

int input__get_u32(struct loader *ld, uint32_t line, json_t *o, const char *name, uint32_t min,
                   uint32_t *out)
{
    json_t *v = json_object_get(o, name);
    if (!v)
        return input__fail_field(ld, line, name, "missing");
    if (!json_is_integer(v))
        return input__fail_field(ld, line, name, "expected an integer, got %s",
                                 input__json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < (json_int_t)min)
        return input__fail_field(ld, line, name,
                                 "must be >= %" PRIu32 ", got %" JSON_INTEGER_FORMAT, min, x);
    if (x > (json_int_t)UINT32_MAX)
        return input__fail_field(ld, line, name,
                                 "%" JSON_INTEGER_FORMAT " is too large (max %" PRIu32 ")", x,
                                 UINT32_MAX);
    *out = (uint32_t)x;
    return 0;
}

int input__json_line(struct loader *ld, uint32_t line, const char *s, size_t n,
                     int (*row)(struct loader *ld, uint32_t line, json_t *o))
{
    json_error_t je;
    json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    if (!o && je.column > 0)
        return input__fail(ld, -EINVAL, line, "invalid JSON at column %d: %s", je.column, je.text);
    if (!o)
        return input__fail(ld, -EINVAL, line, "invalid JSON: %s", je.text);
    int rc = json_is_object(o) ? row(ld, line, o)
                               : input__fail(ld, -EINVAL, line, "expected a JSON object, got %s",
                                             input__json_kind(o));
    json_decref(o);
    return rc;
}
