/*
 * jsonl.c - what the JSONL formats (mooncake.c, vllm_run.c) share: a line parsed into one JSON
 * object, the kind of a value in messages, token counts. Same thread as kvsim_trace_load.
 */
#include "runtime/input/input_internal.h"

#include <errno.h>
#include <inttypes.h>

_Static_assert(sizeof(json_int_t) == sizeof(int64_t), "input_val holds a json_int_t");

const char *input__type_kind(json_type type)
{
    switch (type) {
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

const char *input__json_kind(const json_t *v) { return input__type_kind(json_typeof(v)); }

void input__val_of(const json_t *v, struct input_val *out)
{
    *out = (struct input_val){.present = v != NULL, .type = v ? json_typeof(v) : JSON_NULL};
    if (json_is_integer(v))
        out->i = json_integer_value(v);
    else if (json_is_real(v))
        out->d = json_real_value(v);
    else if (json_is_string(v)) {
        out->s = json_string_value(v);
        out->n = json_string_length(v);
    }
}

int input__val_u32(struct loader *ld, uint32_t line, const char *name, const struct input_val *v,
                   uint32_t min, uint32_t *out)
{
    if (!v->present)
        return input__fail_field(ld, line, name, "missing");
    if (v->type != JSON_INTEGER)
        return input__fail_field(ld, line, name, "expected an integer, got %s",
                                 input__type_kind(v->type));
    int64_t x = v->i;
    if (x < (int64_t)min)
        return input__fail_field(ld, line, name, "must be >= %" PRIu32 ", got %" PRId64, min, x);
    if (x > (int64_t)UINT32_MAX)
        return input__fail_field(ld, line, name, "%" PRId64 " is too large (max %" PRIu32 ")", x,
                                 UINT32_MAX);
    *out = (uint32_t)x;
    return 0;
}

int input__get_u32(struct loader *ld, uint32_t line, json_t *o, const char *name, uint32_t min,
                   uint32_t *out)
{
    struct input_val v;
    input__val_of(json_object_get(o, name), &v);
    return input__val_u32(ld, line, name, &v, min, out);
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
