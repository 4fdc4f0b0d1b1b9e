/*
 * conform_expect.c - what a step observed (scheduled, preempted, finished, pool, offload and
 * handoff state) compared with its `expect` object, and the --trace lines. In the two-engine
 * form an engine's keys are observed on the op's engine, or on the engine of the `prefill` /
 * `decode` object they are under (docs/conformance.md).
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

/* " on the decode engine" (two-engine form) or "". */
static const char *on_engine(const struct kvsim_conform_runner *c, int e, char *buf, size_t len)
{
    if (!c->disagg)
        return "";
    snprintf(buf, len, " of the %s engine", conform__engine_name(e));
    return buf;
}

static json_t *instant(int64_t t)
{
    return t == KVSIM_HANDOFF_TIME_NONE || t == INT64_MAX ? json_null() : json_integer(t);
}

/* One handoff as its expectation is shaped: a state name, or the fields asked for. */
static json_t *observe_handoff(const struct creq *q, json_t *want)
{
    const struct kvsim_handoff *h = &q->h;
    const char *state = kvsim_handoff_state_name(q->disagg ? h->state : KVSIM_HANDOFF_NONE);
    if (!json_is_object(want))
        return json_string(state);
    json_t *o = json_object();
    const char *f;
    json_t *v;
    json_object_foreach(want, f, v)
    {
        (void)v;
        json_t *g;
        if (!strcmp(f, "state"))
            g = json_string(state);
        else if (!strcmp(f, "pin_ns"))
            g = instant(h->pin_ns);
        else if (!strcmp(f, "deadline_ns"))
            g = instant(h->pin_ns == KVSIM_HANDOFF_TIME_NONE ? INT64_MAX : h->deadline_ns);
        else if (!strcmp(f, "routed_ns"))
            g = instant(h->routed_ns);
        else if (!strcmp(f, "reserved_ns"))
            g = instant(h->reserved_ns);
        else if (!strcmp(f, "transfer_start_ns"))
            g = instant(h->transfer_start_ns);
        else if (!strcmp(f, "transfer_end_ns"))
            g = instant(h->transfer_end_ns);
        else if (!strcmp(f, "source_released_ns"))
            g = instant(h->source_released_ns);
        else if (!strcmp(f, "end_ns"))
            g = instant(h->end_ns);
        else if (!strcmp(f, "pinned_blocks"))
            g = json_integer(h->pinned_blocks);
        else if (!strcmp(f, "pinned_tokens"))
            g = json_integer((json_int_t)h->pinned_tokens);
        else if (!strcmp(f, "transfer_tokens"))
            g = json_integer((json_int_t)h->transfer_tokens);
        else /* transfer_bytes */
            g = json_integer((json_int_t)h->transfer_bytes);
        json_object_set_new(o, f, g);
    }
    return o;
}

/* Handoffs not final (disaggregated requests whose handoff has not completed or aborted). */
static uint32_t open_handoffs(const struct kvsim_conform_runner *c)
{
    uint32_t n = 0;
    for (size_t i = 0; i < c->nreqs; i++)
        n += c->reqs[i].disagg && !kvsim_handoff_is_final(&c->reqs[i].h);
    return n;
}

/* Transfers reserved and not ended: waiting for the link or moving (a cancelled one's end is
 * only a late fact). */
static uint32_t moving_transfers(const struct kvsim_conform_runner *c)
{
    uint32_t n = 0;
    for (size_t i = 0; i < c->nreqs; i++)
        n += c->reqs[i].disagg && (c->reqs[i].h.state == KVSIM_HANDOFF_DESTINATION_RESERVED ||
                                   c->reqs[i].h.state == KVSIM_HANDOFF_TRANSFERRING);
    return n;
}

/* The "finished" of the op: on engine v, or on every engine (v < 0). */
static json_t *observe_finished(struct kvsim_conform_runner *c, int v)
{
    json_t *a = json_array();
    for (int e = 0; e < c->neng; e++)
        if ((v < 0 || v == e) && c->eng[e].finished)
            json_array_extend(a, c->eng[e].finished);
    return a;
}

/*
 * Builds the observed value for an expect key, shaped like the expectation, on engine v (its
 * op's engine, or that of the sub-object it is under; CONFORM_NO_ENGINE for a top-level key of
 * an op without one). NULL + error when the key cannot be observed after this op.
 */
static json_t *observe(struct kvsim_conform_runner *c, const char *key, json_t *want,
                       const char *op, const char *where, int v)
{
    if (!strcmp(key, "finished"))
        return observe_finished(c, v);
    if (!strcmp(key, "now_ns"))
        return json_integer(c->now_ns);
    if (!strcmp(key, "open_handoffs"))
        return json_integer(open_handoffs(c));
    if (!strcmp(key, "ignored") || !strcmp(key, "rejected")) {
        json_t *a = !strcmp(key, "ignored") ? c->ignored : c->rejected;
        return a ? json_incref(a) : json_array();
    }
    if (!strcmp(key, "pending_transfers"))
        return json_integer(c->disagg  ? moving_transfers(c)
                            : c->tiers ? kvsim_tiers_pending(c->tiers)
                                       : 0);
    if (!strcmp(key, "handoff")) {
        json_t *m = json_object();
        const char *id;
        json_t *w;
        json_object_foreach(want, id, w)
        {
            struct creq *q = conform__find_req(c, id);
            if (!q) {
                conform__fail(c, "%s: key 'handoff': unknown request id '%s'", where, id);
                json_decref(m);
                return NULL;
            }
            json_object_set_new(m, id, observe_handoff(q, w));
        }
        return m;
    }
    if (v < 0) /* pinned_blocks, pins: the prefill engine's */
        v = CONFORM_PREFILL;
    struct sched *s = c->eng[v].s;
    struct kvpool *pool = sched_pool(s);
    bool here = !c->disagg || v == c->cur; /* observed on the op's own engine */
    char eb[48];
    if (!strcmp(key, "scheduled") || !strcmp(key, "total_scheduled") || !strcmp(key, "new") ||
        !strcmp(key, "resumed") || !strcmp(key, "preempted")) {
        if (strcmp(op, "schedule") != 0 || !here) {
            conform__fail(c, "%s: key '%s' is only observable after a schedule%s", where, key,
                          on_engine(c, v, eb, sizeof eb));
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
    if (!strcmp(key, "running")) {
        struct sched_request *const *rr;
        uint32_t n = sched_running(s, &rr);
        return conform__ids_json(c, rr, n);
    }
    if (!strcmp(key, "waiting")) {
        uint32_t n = sched_waiting_snapshot(s, NULL, 0);
        struct sched_request **w = malloc((n + 1) * sizeof *w);
        sched_waiting_snapshot(s, w, n);
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
        if (!c->lookup || !here) {
            conform__fail(c, "%s: key '%s' is only observable after kv_lookup%s", where, key,
                          on_engine(c, v, eb, sizeof eb));
            return NULL;
        }
        return json_incref(json_object_get(c->lookup, key));
    }
    if (!strcmp(key, "blocks") || !strcmp(key, "fail")) {
        if (!c->alloc || !here) {
            conform__fail(c, "%s: key '%s' is only observable after kv_allocate%s", where, key,
                          on_engine(c, v, eb, sizeof eb));
            return NULL;
        }
        return json_incref(json_object_get(c->alloc, key));
    }
    if (!strcmp(key, "ok")) {
        if (strcmp(op, "reset_prefix_cache") != 0 || !here) {
            conform__fail(c, "%s: key 'ok' is only observable after reset_prefix_cache%s", where,
                          on_engine(c, v, eb, sizeof eb));
            return NULL;
        }
        return json_boolean(c->op_result == 0);
    }
    if (!strcmp(key, "held_blocks"))
        return json_integer(kvpool_num_held_only_blocks(pool));
    if (!strcmp(key, "pinned_blocks"))
        return json_integer(kvpool_num_pinned_only_blocks(pool));
    if (!strcmp(key, "pins"))
        return json_integer(sched_num_pins(s));
    if (!strcmp(key, "active_blocks")) /* what a router sees: referenced, pinned sources excluded */
        return json_integer(kvpool_num_usable_blocks(pool) - kvpool_num_free_blocks(pool) -
                            kvpool_num_pinned_only_blocks(pool));
    if (!strcmp(key, "kv_events")) {
        json_t *m = json_object();
        const char *f;
        json_t *fv;
        json_object_foreach(want, f, fv)
        {
            (void)fv;
            uint64_t n = !strcmp(f, "stored")    ? c->eng[v].stored_blocks
                         : !strcmp(f, "removed") ? c->eng[v].removed_blocks
                                                 : c->eng[v].cleared;
            json_object_set_new(m, f, json_integer((json_int_t)n));
        }
        return m;
    }
    if (!strcmp(key, "blocked_on_offload")) {
        struct sched_offload_status os;
        sched_offload_status(s, &os);
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
        sched_offload_counters(s, &oc);
        json_t *m = json_object();
        const char *f;
        json_t *fv;
        json_object_foreach(want, f, fv)
        {
            (void)fv;
            json_object_set_new(m, f,
                                json_integer((json_int_t)conform__offload_field(&ts, &oc, f)));
        }
        return m;
    }
    /* maps keyed by request id or block id */
    json_t *m = json_object();
    const char *k;
    json_t *x;
    json_object_foreach(want, k, x)
    {
        (void)x;
        if (!strcmp(key, "ref_count")) {
            char *end;
            long b = strtol(k, &end, 10);
            if (*k == 0 || *end != 0 || b < 0 || b >= (long)sched_get_config(s)->num_blocks) {
                conform__fail(c, "%s: key 'ref_count': '%s' is not a block id", where, k);
                json_decref(m);
                return NULL;
            }
            json_object_set_new(m, k, json_integer(kvpool_ref_count(pool, (kvpool_block_id)b)));
            continue;
        }
        struct creq *q = conform__find_req(c, k);
        struct sched_request *r = q ? q->r[v] : NULL;
        if (!r) {
            if (q && c->disagg)
                conform__fail(c, "%s: key '%s': request '%s' is not on the %s engine", where, key,
                              k, conform__engine_name(v));
            else
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

/* Compares every key of ex, observed on engine v (see observe). */
static int check_keys(struct kvsim_conform_runner *c, json_t *ex, const char *op, const char *where,
                      int v, const char *prefix)
{
    const char *key;
    json_t *want;
    json_object_foreach(ex, key, want)
    {
        if (!strcmp(key, "prefill") || !strcmp(key, "decode")) {
            char pre[32];
            snprintf(pre, sizeof pre, "%s.", key);
            if (check_keys(c, want, op, where, !strcmp(key, "prefill") ? 0 : 1, pre))
                return conform__failed(c);
            continue;
        }
        json_t *w = json_incref(want);
        if (!strcmp(key, "output_tokens")) { /* token lists may use the compact forms */
            json_t *norm = json_object();
            const char *id;
            json_t *x;
            json_object_foreach(want, id, x)
            {
                json_t *t = conform__tokens_json(c, x, where);
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
        json_t *got = observe(c, key, w, op, where, v);
        if (!got) {
            json_decref(w);
            return conform__failed(c);
        }
        bool is_set = !strcmp(key, "new") || !strcmp(key, "resumed") || !strcmp(key, "preempted") ||
                      !strcmp(key, "finished") || !strcmp(key, "ignored") ||
                      !strcmp(key, "rejected");
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
            conform__fail_kind(c, kind, "%s: %s%s expected %s got %s", where, prefix, key, ws, gs);
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

int conform__check_expect(struct kvsim_conform_runner *c, json_t *ex, const char *op, size_t k)
{
    char where[64];
    snprintf(where, sizeof where, "step %zu (%s)", k, op);
    return check_keys(c, ex, op, where, c->disagg ? c->cur : 0, "");
}

/* ---- --trace ------------------------------------------------------------------------------- */

/* An engine's queues and pool (the two-engine form's per-engine part of a trace line). */
static json_t *trace_engine(struct kvsim_conform_runner *c, int e)
{
    struct sched *s = c->eng[e].s;
    struct kvpool *pool = sched_pool(s);
    json_t *t = json_object();
    struct sched_request *const *rr;
    uint32_t n = sched_running(s, &rr);
    json_object_set_new(t, "running", conform__ids_json(c, rr, n));
    n = sched_waiting_snapshot(s, NULL, 0);
    struct sched_request **w = malloc((n + 1) * sizeof *w);
    sched_waiting_snapshot(s, w, n);
    json_object_set_new(t, "waiting", conform__ids_json(c, w, n));
    free(w);
    json_object_set_new(t, "free_blocks", json_integer(kvpool_num_free_blocks(pool)));
    json_object_set_new(t, "pinned_blocks", json_integer(kvpool_num_pinned_only_blocks(pool)));
    if (c->eng[e].finished && json_array_size(c->eng[e].finished))
        json_object_set(t, "finished", c->eng[e].finished);
    return t;
}

static void trace_schedule(struct kvsim_conform_runner *c, json_t *t)
{
    json_t *m = json_object();
    for (uint32_t i = 0; i < c->step->num_scheduled; i++)
        json_object_set_new(m, c->reqs[c->step->scheduled[i].req->id - 1].name,
                            json_integer(c->step->scheduled[i].num_tokens));
    json_object_set_new(t, "scheduled", m);
    json_object_set_new(t, "new", conform__ids_json(c, c->step->new_reqs, c->step->num_new));
    json_object_set_new(t, "resumed", conform__ids_json(c, c->step->resumed, c->step->num_resumed));
    json_object_set_new(t, "preempted",
                        conform__ids_json(c, c->step->preempted, c->step->num_preempted));
}

/* The two-engine form's trace line: the op's engine, each engine's queues and pool, the
 * handoffs' states, the facts ignored or rejected. */
static void trace_two_engines(struct kvsim_conform_runner *c, json_t *t, const char *op)
{
    if (c->cur >= 0)
        json_object_set_new(t, "engine", json_string(conform__engine_name(c->cur)));
    if (c->step && !strcmp(op, "schedule"))
        trace_schedule(c, t);
    if (c->lookup)
        json_object_update(t, c->lookup);
    if (c->alloc)
        json_object_update(t, c->alloc);
    for (int e = 0; e < c->neng; e++)
        json_object_set_new(t, conform__engine_name(e), trace_engine(c, e));
    json_object_set_new(t, "now_ns", json_integer(c->now_ns));
    json_t *h = json_object();
    for (size_t i = 0; i < c->nreqs; i++)
        if (c->reqs[i].disagg)
            json_object_set_new(h, c->reqs[i].name,
                                json_string(kvsim_handoff_state_name(c->reqs[i].h.state)));
    json_object_set_new(t, "handoffs", h);
    if (c->ignored)
        json_object_set(t, "ignored", c->ignored);
    if (c->rejected)
        json_object_set(t, "rejected", c->rejected);
}

void conform__trace_step(struct kvsim_conform_runner *c, size_t k, const char *op)
{
    json_t *t = json_pack("{s:s,s:I,s:s}", "scenario", c->name, "step", (json_int_t)k, "op", op);
    if (c->disagg) {
        trace_two_engines(c, t, op);
    } else {
        struct sched *s = c->eng[0].s;
        struct kvpool *pool = sched_pool(s);
        if (c->step && !strcmp(op, "schedule"))
            trace_schedule(c, t);
        if (c->eng[0].finished)
            json_object_set(t, "finished", c->eng[0].finished);
        if (c->lookup)
            json_object_update(t, c->lookup);
        if (c->alloc)
            json_object_update(t, c->alloc);
        struct sched_request *const *rr;
        uint32_t n = sched_running(s, &rr);
        json_object_set_new(t, "running", conform__ids_json(c, rr, n));
        n = sched_waiting_snapshot(s, NULL, 0);
        struct sched_request **w = malloc((n + 1) * sizeof *w);
        sched_waiting_snapshot(s, w, n);
        json_object_set_new(t, "waiting", conform__ids_json(c, w, n));
        free(w);
        json_object_set_new(t, "free_blocks", json_integer(kvpool_num_free_blocks(pool)));
        if (c->tiers || c->now_ns) {
            json_object_set_new(t, "now_ns", json_integer(c->now_ns));
            json_object_set_new(t, "held_blocks", json_integer(kvpool_num_held_only_blocks(pool)));
        }
        if (c->tiers) {
            struct sched_offload_status os;
            sched_offload_status(s, &os);
            json_object_set_new(t, "pending_transfers",
                                json_integer(kvsim_tiers_pending(c->tiers)));
            json_object_set_new(t, "blocked_on_offload",
                                os.blocked ? json_string(c->reqs[os.blocked->id - 1].name)
                                           : json_null());
        }
    }
    char *line = json_dumps(t, JSON_COMPACT);
    printf("%s\n", line);
    free(line);
    json_decref(t);
}
