/*
 * conform_expect.c - what a step observed (scheduled, preempted, finished, pool and offload
 * state) compared with its `expect` object, and the --trace lines.
 */
#include "runtime/verify/conform_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- expectations -------------------------------------------------------------------------- */

static int cmp_json_str(const void *a, const void *b)
{
    return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

/* A sorted copy of a string array (set comparison). */
static json_t *sorted(json_t *arr)
{
    size_t n = json_array_size(arr);
    json_t **items = malloc((n ? n : 1) * sizeof *items);
    for (size_t i = 0; i < n; i++)
        items[i] = json_array_get(arr, i);
    qsort(items, n, sizeof *items, cmp_json_str);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(out, items[i]);
    free(items);
    return out;
}

static struct sched_request *req_of(struct kvsim_conform_runner *c, const char *name)
{
    struct creq *q = conform__find_req(c, name);
    return q ? q->r : NULL;
}

/* Builds the observed value for an expect key, shaped like the expectation. NULL + error when
 * the key cannot be observed after this op. */
static json_t *observe(struct kvsim_conform_runner *c, const char *key, json_t *want,
                       const char *op, const char *where)
{
    struct kvpool *pool = sched_pool(c->s);
    bool is_sched = !strcmp(op, "schedule");
    if (!strcmp(key, "scheduled") || !strcmp(key, "total_scheduled") || !strcmp(key, "new") ||
        !strcmp(key, "resumed") || !strcmp(key, "preempted")) {
        if (!is_sched) {
            conform__fail(c, "%s: key '%s' is only observable after a schedule", where, key);
            return NULL;
        }
        struct sched_step *st = c->step;
        if (!strcmp(key, "total_scheduled"))
            return json_integer((json_int_t)st->total_tokens);
        if (!strcmp(key, "scheduled")) {
            json_t *m = json_object();
            for (uint32_t i = 0; i < st->num_scheduled; i++)
                json_object_set_new(m, c->reqs[st->scheduled[i].req->id - 1].name,
                                    json_integer(st->scheduled[i].num_tokens));
            return m;
        }
        if (!strcmp(key, "new"))
            return conform__ids_json(c, st->new_reqs, st->num_new);
        if (!strcmp(key, "resumed"))
            return conform__ids_json(c, st->resumed, st->num_resumed);
        return conform__ids_json(c, st->preempted, st->num_preempted);
    }
    if (!strcmp(key, "finished"))
        return c->sampled_finished ? json_incref(c->sampled_finished) : json_array();
    if (!strcmp(key, "running")) {
        struct sched_request *const *rr;
        uint32_t n = sched_running(c->s, &rr);
        return conform__ids_json(c, rr, n);
    }
    if (!strcmp(key, "waiting")) {
        uint32_t n = sched_waiting_snapshot(c->s, NULL, 0);
        struct sched_request **w = malloc((n + 1) * sizeof *w);
        sched_waiting_snapshot(c->s, w, n);
        json_t *a = conform__ids_json(c, w, n);
        free(w);
        return a;
    }
    if (!strcmp(key, "free_blocks"))
        return json_integer(kvpool_num_free_blocks(pool));
    if (!strcmp(key, "free_queue") || !strcmp(key, "free_queue_head")) {
        uint32_t n = kvpool_free_queue_snapshot(pool, NULL, 0);
        kvpool_block_id *ids = malloc((n + 1) * sizeof *ids);
        kvpool_free_queue_snapshot(pool, ids, n);
        if (!strcmp(key, "free_queue_head") && n > json_array_size(want))
            n = (uint32_t)json_array_size(want);
        json_t *a = json_array();
        for (uint32_t i = 0; i < n; i++)
            json_array_append_new(a, json_integer(ids[i]));
        free(ids);
        return a;
    }
    if (!strcmp(key, "hit_blocks") || !strcmp(key, "hit_tokens")) {
        if (!c->lookup) {
            conform__fail(c, "%s: key '%s' is only observable after kv_lookup", where, key);
            return NULL;
        }
        return json_incref(json_object_get(c->lookup, key));
    }
    if (!strcmp(key, "blocks") || !strcmp(key, "fail")) {
        if (!c->alloc) {
            conform__fail(c, "%s: key '%s' is only observable after kv_allocate", where, key);
            return NULL;
        }
        return json_incref(json_object_get(c->alloc, key));
    }
    if (!strcmp(key, "ok")) {
        if (strcmp(op, "reset_prefix_cache") != 0) {
            conform__fail(c, "%s: key 'ok' is only observable after reset_prefix_cache", where);
            return NULL;
        }
        return json_boolean(c->op_result == 0);
    }
    if (!strcmp(key, "now_ns"))
        return json_integer(c->now_ns);
    if (!strcmp(key, "held_blocks"))
        return json_integer(kvpool_num_held_only_blocks(pool));
    if (!strcmp(key, "pending_transfers"))
        return json_integer(c->tiers ? kvsim_tiers_pending(c->tiers) : 0);
    if (!strcmp(key, "blocked_on_offload")) {
        struct sched_offload_status os;
        sched_offload_status(c->s, &os);
        return os.blocked ? json_string(c->reqs[os.blocked->id - 1].name) : json_null();
    }
    if (!strcmp(key, "offload")) {
        if (!c->tiers) {
            conform__fail(
                c, "%s: key 'offload' is only observable with offload tiers (config 'offload')",
                where);
            return NULL;
        }
        struct kvsim_tiers_stats ts;
        struct sched_offload_counters oc;
        kvsim_tiers_stats(c->tiers, &ts);
        sched_offload_counters(c->s, &oc);
        json_t *m = json_object();
        const char *f;
        json_t *v;
        json_object_foreach(want, f, v)
        {
            (void)v;
            json_object_set_new(m, f,
                                json_integer((json_int_t)conform__offload_field(&ts, &oc, f)));
        }
        return m;
    }
    /* maps keyed by request id or block id */
    json_t *m = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v)
    {
        (void)v;
        if (!strcmp(key, "ref_count")) {
            char *end;
            long b = strtol(k, &end, 10);
            if (*k == 0 || *end != 0 || b < 0 || b >= (long)sched_get_config(c->s)->num_blocks) {
                conform__fail(c, "%s: key 'ref_count': '%s' is not a block id", where, k);
                json_decref(m);
                return NULL;
            }
            json_object_set_new(m, k, json_integer(kvpool_ref_count(pool, (kvpool_block_id)b)));
            continue;
        }
        struct sched_request *r = req_of(c, k);
        if (!r) {
            conform__fail(c, "%s: key '%s': unknown request id '%s'", where, key, k);
            json_decref(m);
            return NULL;
        }
        json_t *o;
        if (!strcmp(key, "status"))
            o = json_string(sched_status_name(r->status));
        else if (!strcmp(key, "finish_reason"))
            o = sched_finish_reason(r->status) ? json_string(sched_finish_reason(r->status))
                                               : json_null();
        else if (!strcmp(key, "num_computed_tokens"))
            o = json_integer((json_int_t)r->num_computed_tokens);
        else if (!strcmp(key, "num_cached_tokens"))
            o = json_integer(r->num_cached_tokens < 0 ? 0 : r->num_cached_tokens);
        else { /* output_tokens */
            o = json_array();
            for (uint32_t i = 0; i < r->num_output; i++)
                json_array_append_new(o, json_integer(r->output[i]));
        }
        json_object_set_new(m, k, o);
    }
    return m;
}

int conform__check_expect(struct kvsim_conform_runner *c, json_t *ex, const char *op, size_t k)
{
    char where[64];
    snprintf(where, sizeof where, "step %zu (%s)", k, op);
    const char *key;
    json_t *want;
    json_object_foreach(ex, key, want)
    {
        json_t *w = json_incref(want);
        if (!strcmp(key, "output_tokens")) { /* token lists may use the compact forms */
            json_t *norm = json_object();
            const char *id;
            json_t *v;
            json_object_foreach(want, id, v)
            {
                json_t *t = conform__tokens_json(c, v, where);
                if (!t) {
                    json_decref(norm);
                    json_decref(w);
                    return conform__failed(c);
                }
                json_object_set_new(norm, id, t);
            }
            json_decref(w);
            w = norm;
        }
        json_t *got = observe(c, key, w, op, where);
        if (!got) {
            json_decref(w);
            return conform__failed(c);
        }
        bool is_set = !strcmp(key, "new") || !strcmp(key, "resumed") || !strcmp(key, "preempted") ||
                      !strcmp(key, "finished");
        if (is_set) {
            json_t *a = sorted(w), *b = sorted(got);
            json_decref(w);
            json_decref(got);
            w = a;
            got = b;
        }
        if (!json_equal(w, got)) {
            char *ws = json_dumps(w, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
            char *gs = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
            char kind[96];
            snprintf(kind, sizeof kind, "expect:%s", key);
            conform__fail_kind(c, kind, "%s: %s expected %s got %s", where, key, ws, gs);
            free(ws);
            free(gs);
            json_decref(w);
            json_decref(got);
            return conform__failed(c);
        }
        json_decref(w);
        json_decref(got);
    }
    return 0;
}

void conform__trace_step(struct kvsim_conform_runner *c, size_t k, const char *op)
{
    json_t *t = json_pack("{s:s,s:I,s:s}", "scenario", c->name, "step", (json_int_t)k, "op", op);
    struct kvpool *pool = sched_pool(c->s);
    if (c->step && !strcmp(op, "schedule")) {
        json_t *m = json_object();
        for (uint32_t i = 0; i < c->step->num_scheduled; i++)
            json_object_set_new(m, c->reqs[c->step->scheduled[i].req->id - 1].name,
                                json_integer(c->step->scheduled[i].num_tokens));
        json_object_set_new(t, "scheduled", m);
        json_object_set_new(t, "new", conform__ids_json(c, c->step->new_reqs, c->step->num_new));
        json_object_set_new(t, "resumed",
                            conform__ids_json(c, c->step->resumed, c->step->num_resumed));
        json_object_set_new(t, "preempted",
                            conform__ids_json(c, c->step->preempted, c->step->num_preempted));
    }
    if (c->sampled_finished)
        json_object_set(t, "finished", c->sampled_finished);
    if (c->lookup)
        json_object_update(t, c->lookup);
    if (c->alloc)
        json_object_update(t, c->alloc);
    struct sched_request *const *rr;
    uint32_t n = sched_running(c->s, &rr);
    json_object_set_new(t, "running", conform__ids_json(c, rr, n));
    n = sched_waiting_snapshot(c->s, NULL, 0);
    struct sched_request **w = malloc((n + 1) * sizeof *w);
    sched_waiting_snapshot(c->s, w, n);
    json_object_set_new(t, "waiting", conform__ids_json(c, w, n));
    free(w);
    json_object_set_new(t, "free_blocks", json_integer(kvpool_num_free_blocks(pool)));
    if (c->tiers || c->now_ns) {
        json_object_set_new(t, "now_ns", json_integer(c->now_ns));
        json_object_set_new(t, "held_blocks", json_integer(kvpool_num_held_only_blocks(pool)));
    }
    if (c->tiers) {
        struct sched_offload_status os;
        sched_offload_status(c->s, &os);
        json_object_set_new(t, "pending_transfers", json_integer(kvsim_tiers_pending(c->tiers)));
        json_object_set_new(t, "blocked_on_offload",
                            os.blocked ? json_string(c->reqs[os.blocked->id - 1].name)
                                       : json_null());
    }
    char *line = json_dumps(t, JSON_COMPACT);
    printf("%s\n", line);
    free(line);
    json_decref(t);
}
