/*
 * scenario.c - scenario documents as files: writing them (soak failures, minimized scenarios)
 * and removing requests from their steps (the minimizer's request pass).
 */
#include "runtime/verify/verify.h"
#include "runtime/report/report.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ---- scenario files ------------------------------------------------------------------------- */

/* Compact but readable (", " and ": "); reals as short as they round-trip for our values. */
#define DUMP_FLAGS (JSON_ENCODE_ANY | JSON_REAL_PRECISION(12))

int kvsim_scenario_write(const json_t *doc, FILE *f)
{
    static const char *const head[] = {"name", "source", "config"};
    fputs("{\n", f);
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) {
        json_t *v = json_object_get(doc, head[i]);
        if (!v)
            continue;
        char *t = json_dumps(v, DUMP_FLAGS);
        if (!t)
            return -ENOMEM;
        fprintf(f, "  \"%s\": %s,\n", head[i], t);
        free(t);
    }
    fputs("  \"steps\": [\n", f);
    json_t *steps = json_object_get(doc, "steps");
    for (size_t i = 0; i < json_array_size(steps); i++) {
        char *t = json_dumps(json_array_get(steps, i), DUMP_FLAGS);
        if (!t)
            return -ENOMEM;
        fprintf(f, "    %s%s\n", t, i + 1 < json_array_size(steps) ? "," : "");
        free(t);
    }
    fputs("  ]\n}\n", f);
    return ferror(f) ? -EIO : 0;
}

int kvsim_scenario_write_file(const json_t *doc, const char *path)
{
    /* kvsim_output: renamed into place when a regular file, written directly when the path is
     * a device or a FIFO (a rename over /dev/full would replace the device), and a failed
     * write (ENOSPC) is an error, not a "wrote". */
    struct kvsim_output out;
    int rc = kvsim_output_open(&out, path, NULL, 0);
    if (rc)
        return rc;
    if ((rc = kvsim_scenario_write(doc, out.f)) != 0) {
        kvsim_output_discard(&out);
        return rc;
    }
    return kvsim_output_commit(&out, NULL, 0);
}

/* mkdir -p. Returns 0 or a negative errno. */ /* ---- removing requests
                                                  ----------------------------------------------------------------------
                                                */

static bool in_set(const json_t *set, const char *id)
{
    return id && json_object_get(set, id) != NULL;
}

static void filter_list(json_t *obj, const char *key, const json_t *drop, bool del_if_empty)
{
    json_t *a = json_object_get(obj, key);
    if (!json_is_array(a))
        return;
    for (size_t i = json_array_size(a); i-- > 0;)
        if (in_set(drop, json_string_value(json_array_get(a, i))))
            json_array_remove(a, i);
    if (del_if_empty && json_array_size(a) == 0)
        json_object_del(obj, key);
}

static void filter_map(json_t *obj, const char *key, const json_t *drop)
{
    json_t *m = json_object_get(obj, key);
    if (!json_is_object(m))
        return;
    const char *id;
    json_t *v;
    json_object_foreach((json_t *)drop, id, v)
    {
        (void)v;
        json_object_del(m, id);
    }
}

/* Removes the dropped requests from an expect object's per-request maps and lists (and, in the
 * two-engine form, from its `prefill` and `decode` objects). */
static void filter_expect(json_t *ex, const json_t *drop)
{
    static const char *const expect_maps[] = {
        "scheduled",         "finish_reason", "status", "num_computed_tokens",
        "num_cached_tokens", "output_tokens", "handoff"};
    static const char *const expect_lists[] = {"new",     "resumed", "preempted", "finished",
                                               "running", "waiting", "ignored",   "rejected"};
    if (!json_is_object(ex))
        return;
    for (size_t i = 0; i < sizeof expect_maps / sizeof expect_maps[0]; i++)
        filter_map(ex, expect_maps[i], drop);
    for (size_t i = 0; i < sizeof expect_lists / sizeof expect_lists[0]; i++)
        filter_list(ex, expect_lists[i], drop, false);
    if (in_set(drop, json_string_value(json_object_get(ex, "blocked_on_offload"))))
        json_object_del(ex, "blocked_on_offload");
    filter_expect(json_object_get(ex, "prefill"), drop);
    filter_expect(json_object_get(ex, "decode"), drop);
}

json_t *kvsim_scenario_drop_requests(const json_t *steps, const json_t *drop)
{
    json_t *out = json_array();
    if (!out)
        return NULL;
    for (size_t k = 0; k < json_array_size(steps); k++) {
        json_t *st = json_deep_copy(json_array_get(steps, k));
        if (!st) {
            json_decref(out);
            return NULL;
        }
        /* add, abort {id}, route, kv_*: the op is about that request only */
        if (in_set(drop, json_string_value(json_object_get(st, "id")))) {
            json_decref(st);
            continue;
        }
        if (json_object_get(st, "ids")) {
            filter_list(st, "ids", drop, false);
            if (json_array_size(json_object_get(st, "ids")) == 0) {
                json_decref(st);
                continue;
            }
        }
        filter_map(st, "sampled", drop);
        filter_list(st, "finished_recving", drop, true);
        filter_list(st, "finished_sending", drop, true);
        filter_expect(json_object_get(st, "expect"), drop);
        json_array_append_new(out, st);
    }
    return out;
}
