/*
 * conform_ops.c - the scenario operations (add, schedule, output, abort, kv_lookup, kv_allocate,
 * advance, ...) against the scheduler core, the G1 pool and the offload tiers.
 */
#include "runtime/verify/conform_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- execution ----------------------------------------------------------------------------- */

struct creq *conform__find_req(struct kvsim_conform_runner *c, const char *name)
{
    for (size_t i = 0; i < c->nreqs; i++)
        if (strcmp(c->reqs[i].name, name) == 0)
            return &c->reqs[i];
    return NULL;
}

/* The added request with this id; otherwise NULL, and a failure unless lenient (the caller then
 * drops the reference). */
struct creq *conform__need_req(struct kvsim_conform_runner *c, const char *name, const char *where)
{
    struct creq *q = conform__find_req(c, name);
    if ((!q || !q->r) && !c->lenient)
        conform__fail(c, "%s: unknown request id '%s'", where, name);
    return q && q->r ? q : NULL;
}

int conform__op_add(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    const char *id = json_string_value(json_object_get(st, "id"));
    if (conform__find_req(c, id))
        return conform__fail(c, "%s: key 'id': request '%s' was already added", where, id);
    struct sched_request_params p = {0};
    kvpool_token *prompt = NULL, *stops = NULL;
    size_t n = 0, cap = 0, ns = 0, caps = 0;
    if (conform__tokens_parse(c, json_object_get(st, "prompt"), &prompt, &n, &cap, where))
        return conform__failed(c);
    json_t *v;
    if ((v = json_object_get(st, "stop_token_ids")) &&
        conform__tokens_parse(c, v, &stops, &ns, &caps, where)) {
        free(prompt);
        return conform__failed(c);
    }
    char *name = strdup(id);
    struct creq *na = NULL;
    size_t ncap = c->cap_reqs ? c->cap_reqs * 2 : 16;
    if (name && c->nreqs == c->cap_reqs && (na = realloc(c->reqs, ncap * sizeof *na))) {
        c->reqs = na;
        c->cap_reqs = ncap;
    }
    if (!name || c->nreqs == c->cap_reqs) {
        free(name);
        free(prompt);
        free(stops);
        return conform__fail(c, "out of memory");
    }
    p.id = c->nreqs + 1;
    p.prompt = prompt;
    p.num_prompt_tokens = (uint32_t)n;
    p.max_tokens = (uint32_t)json_integer_value(json_object_get(st, "max_tokens"));
    p.min_tokens = (uint32_t)json_integer_value(json_object_get(st, "min_tokens"));
    p.priority = json_integer_value(json_object_get(st, "priority"));
    v = json_object_get(st, "arrival");
    p.arrival = v ? json_number_value(v) : (double)c->adds;
    p.stop_token_ids = stops;
    p.num_stop_token_ids = (uint32_t)ns;
    v = json_object_get(st, "eos_token_id");
    p.eos_token_id = v ? json_integer_value(v) : -1;
    p.ignore_eos = json_is_true(json_object_get(st, "ignore_eos"));
    p.cache_salt = json_string_value(json_object_get(st, "cache_salt"));
    p.prompt_logprobs = json_is_true(json_object_get(st, "prompt_logprobs"));
    if ((v = json_object_get(st, "external"))) {
        p.external_tokens = (uint32_t)json_integer_value(json_object_get(v, "tokens"));
        p.external_async = json_is_true(json_object_get(v, "async"));
    }
    struct creq *q = &c->reqs[c->nreqs];
    memset(q, 0, sizeof *q);
    q->name = name;
    int rc = sched_add(c->s, &p, &q->r);
    free(prompt);
    free(stops);
    if (rc) {
        free(name);
        return conform__fail(c, "%s: cannot add request '%s': %s", where, id, kvsim_strerror(rc));
    }
    /* Seen as "nothing" so that entering WAITING counts as a transition. */
    q->seen_status = SCHED_FINISHED_ABORTED;
    c->nreqs++;
    c->adds++;
    return 0;
}

json_t *conform__ids_json(struct kvsim_conform_runner *c, struct sched_request *const *reqs,
                          size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(c->reqs[reqs[i]->id - 1].name));
    return a;
}

/* Fails with an invariant violation: the scheduler's report plus the request's scenario id. */
int conform__violation_fail(struct kvsim_conform_runner *c, const char *where,
                            const struct sched_violation *v)
{
    char line[512];
    sched_violation_format(v, line, sizeof line);
    char kind[96];
    snprintf(kind, sizeof kind, "invariant:%s", v->rule);
    if (v->request_id >= 1 && v->request_id <= c->nreqs)
        return conform__fail_kind(c, kind, "%s: %s id='%s'", where, line,
                                  c->reqs[v->request_id - 1].name);
    return conform__fail_kind(c, kind, "%s: %s", where, line);
}

/* An errno from the scheduler itself (the runner only makes valid calls): kind
 * "scheduler_error", not the scenario's "error". */
int conform__sched_error(struct kvsim_conform_runner *c, const char *where, int rc)
{
    if (rc == -EUCLEAN && sched_last_violation(c->s))
        return conform__violation_fail(c, where, sched_last_violation(c->s));
    return conform__fail_kind(c, "scheduler_error", "%s: scheduler error: %s", where,
                              kvsim_strerror(rc));
}

int conform__op_schedule(struct kvsim_conform_runner *c, const char *where)
{
    if (c->nout == MAX_OUTSTANDING)
        return conform__fail(c, "%s: too many schedules without output", where);
    uint64_t preempted0 = sched_num_preemptions(c->s);
    uint32_t deferred0 = sched_num_deferred_frees(c->s);
    int rc;
    struct sched_step *st = sched_schedule(c->s, &rc);
    if (!st)
        return conform__sched_error(c, where, rc);
    c->outstanding[c->nout++] = st;
    c->step = st;
    /* Deferred frees only drain in update: new entries during a schedule are exactly the
     * preempted victims whose blocks stay held behind an in-flight step (#49675). */
    uint32_t deferred1 = sched_num_deferred_frees(c->s);
    c->futile_now = deferred1 > deferred0 ? deferred1 - deferred0 : 0;
    uint64_t preempted = sched_num_preemptions(c->s) - preempted0;
    struct kvsim_conform_stats *k = &c->stats;
    k->schedules++;
    k->scheduled_tokens += st->total_tokens;
    k->preemptions += preempted;
    k->futile_preemptions += c->futile_now;
    if (preempted && st->total_tokens == 0)
        k->zero_progress_schedules++;
    if (c->futile_now > k->max_futile_in_one_schedule)
        k->max_futile_in_one_schedule = c->futile_now;
    return 0;
}

/* Lenient mode: removes the string s from the array named key of obj (drops an emptied key). */
static void drop_from_list(json_t *obj, const char *key, const char *s)
{
    json_t *a = json_object_get(obj, key);
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!strcmp(json_string_value(json_array_get(a, i)), s)) {
            json_array_remove(a, i);
            break;
        }
    if (a && json_array_size(a) == 0)
        json_object_del(obj, key);
}

/* A token that stops nothing: not the request's eos, not one of its stop tokens. */
static kvpool_token filler_token(const struct sched_request *r)
{
    for (kvpool_token t = 0;; t++) {
        bool stops = (int64_t)t == r->eos_token_id;
        for (uint32_t k = 0; k < r->num_stop_token_ids && !stops; k++)
            stops = r->stop_token_ids[k] == t;
        if (!stops)
            return t;
    }
}

int conform__op_output(struct kvsim_conform_runner *c, json_t *stj, json_t *eff, const char *where)
{
    if (c->nout == 0) {
        if (c->lenient)
            return OP_SKIPPED;
        return conform__fail(c, "%s: no schedule is waiting for its output", where);
    }
    struct sched_step *st = c->outstanding[0];
    uint32_t n = st->num_scheduled;
    const kvpool_token **toks = calloc(n ? n : 1, sizeof *toks);
    uint32_t *counts = calloc(n ? n : 1, sizeof *counts);
    kvpool_token **owned = calloc(n ? n : 1, sizeof *owned);
    struct sched_request **recv = NULL;
    size_t nrecv = 0;
    int rc = 0;
    if (!toks || !counts || !owned)
        rc = conform__fail(c, "out of memory");
    json_t *sampled = json_object_get(stj, "sampled");
    const char *id;
    json_t *v;
    json_object_foreach(sampled, id, v)
    {
        if (rc)
            break;
        struct creq *q = conform__need_req(c, id, where);
        uint32_t i = 0;
        while (q && i < n && st->scheduled[i].req != q->r)
            i++;
        if (!q || i == n) {
            if (c->lenient) { /* its add was removed, or the candidate scheduled it elsewhere */
                json_object_del(json_object_get(eff, "sampled"), id);
                continue;
            }
            rc = q ? conform__fail(c,
                                   "%s: key 'sampled': request '%s' was not scheduled in that step",
                                   where, id)
                   : -1;
            break;
        }
        size_t cnt = 0, cap = 0;
        if (conform__tokens_parse(c, v, &owned[i], &cnt, &cap, where)) {
            rc = conform__failed(c);
            break;
        }
        toks[i] = owned[i];
        counts[i] = (uint32_t)cnt;
    }
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        const struct sched_request *r = st->scheduled[i].req;
        if (counts[i] || !st->scheduled[i].samples || sched_status_is_finished(r->status))
            continue;
        /* A model samples one token for every request whose chunk samples. The minimizer's
         * candidates shift what each step schedules, so it supplies one (recorded in the
         * effective step); with check_liveness a scenario must, or a stall it caused itself
         * would pass for a scheduler dead end. */
        if (c->lenient) {
            owned[i] = malloc(sizeof *owned[i]);
            if (!owned[i]) {
                rc = conform__fail(c, "out of memory");
                break;
            }
            owned[i][0] = filler_token(r);
            toks[i] = owned[i];
            counts[i] = 1;
            json_t *sm = json_object_get(eff, "sampled");
            if (!sm) /* `sampled` is optional */
                json_object_set_new(eff, "sampled", sm = json_object());
            json_object_set_new(sm, c->reqs[r->id - 1].name,
                                json_pack("[I]", (json_int_t)owned[i][0]));
        } else if (c->check_liveness) {
            rc = conform__fail(
                c,
                "%s: key 'sampled': request '%s' sampled in that step but gets no token "
                "(check_liveness needs one for every request whose chunk samples)",
                where, c->reqs[r->id - 1].name);
        }
    }
    json_t *fr = json_object_get(stj, "finished_recving");
    if (rc == 0 && fr) {
        recv = calloc(json_array_size(fr) + 1, sizeof *recv);
        size_t i;
        json_array_foreach(fr, i, v)
        {
            struct creq *q = conform__need_req(c, json_string_value(v), where);
            /* An onboarding from the offload tiers ends with the transfer (an advance); a
             * report of it here would promote the request under the tiers' feet. */
            bool onboarding = q && q->r->offload_load;
            if ((!q || onboarding) && c->lenient) {
                drop_from_list(eff, "finished_recving", json_string_value(v));
                continue;
            }
            if (onboarding) {
                rc = conform__fail(
                    c,
                    "%s: key 'finished_recving': request '%s' is loading from the offload "
                    "tiers: its load ends with its transfer (advance)",
                    where, json_string_value(v));
                break;
            }
            if (!q) {
                rc = conform__failed(c);
                break;
            }
            recv[nrecv++] = q->r;
        }
    }
    json_t *fs = json_object_get(stj, "finished_sending");
    if (rc == 0 && fs) {
        size_t i;
        json_array_foreach(fs, i, v)
        {
            /* No request of this core waits for a send: the ids must exist, nothing else. */
            if (conform__need_req(c, json_string_value(v), where))
                continue;
            if (!c->lenient) {
                rc = conform__failed(c);
                break;
            }
            drop_from_list(eff, "finished_sending", json_string_value(v));
        }
    }
    if (rc == 0) {
        struct sched_model_output out = {
            .tokens = toks,
            .num_tokens = counts,
            .finished_recving = recv,
            .num_finished_recving = (uint32_t)nrecv,
        };
        int src = sched_update(c->s, st, &out);
        memmove(c->outstanding, c->outstanding + 1, (c->nout - 1) * sizeof *c->outstanding);
        c->nout--;
        if (src)
            rc = conform__sched_error(c, where, src);
        uint32_t nf;
        struct sched_request *const *f = sched_last_finished(c->s, &nf);
        c->sampled_finished = conform__ids_json(c, f, nf);
    }
    for (uint32_t i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(toks);
    free(counts);
    free(recv);
    return rc;
}

int conform__op_abort(struct kvsim_conform_runner *c, json_t *st, json_t *eff, const char *where)
{
    json_t *ids = json_object_get(st, "ids");
    json_t *one = json_object_get(st, "id");
    json_t *list = ids ? json_incref(ids) : json_pack("[O]", one);
    json_t *fin = json_array();
    size_t i, nknown = 0;
    json_t *v;
    int rc = 0;
    json_array_foreach(list, i, v)
    {
        struct creq *q = conform__need_req(c, json_string_value(v), where);
        if (!q && c->lenient) {
            if (ids)
                drop_from_list(eff, "ids", json_string_value(v));
            continue;
        }
        if (!q) {
            rc = conform__failed(c);
            break;
        }
        nknown++;
        int a = sched_abort(c->s, q->r);
        if (a == -EALREADY)
            continue;
        if (a) {
            rc = conform__sched_error(c, where, a);
            break;
        }
        uint32_t nf;
        struct sched_request *const *f = sched_last_finished(c->s, &nf);
        json_t *done = conform__ids_json(c, f, nf);
        json_array_extend(fin, done);
        json_decref(done);
    }
    json_decref(list);
    c->sampled_finished = fin;
    if (rc == 0 && nknown == 0 && c->lenient)
        return OP_SKIPPED;
    return rc;
}

int conform__op_kv_lookup(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    struct creq *q = conform__need_req(c, json_string_value(json_object_get(st, "id")), where);
    if (!q)
        return c->lenient ? OP_SKIPPED : conform__failed(c);
    uint32_t cap = q->r->kv.num_hashes + 1;
    kvpool_block_id *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return conform__fail(c, "out of memory");
    kvpool_lookup(sched_pool(c->s), &q->r->kv, &q->hits, ids, cap);
    q->has_hits = true;
    json_t *blocks = json_array();
    for (uint32_t i = 0; i < q->hits.num_blocks; i++)
        json_array_append_new(blocks, json_integer(ids[i]));
    free(ids);
    c->lookup =
        json_pack("{s:o,s:I}", "hit_blocks", blocks, "hit_tokens", (json_int_t)q->hits.num_tokens);
    return 0;
}

int conform__op_kv_allocate(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    struct creq *q = conform__need_req(c, json_string_value(json_object_get(st, "id")), where);
    if (!q)
        return c->lenient ? OP_SKIPPED : conform__failed(c);
    json_t *uh = json_object_get(st, "use_hits");
    bool use_hits = !uh || json_is_true(uh);
    struct kvpool_alloc_args args = {
        .num_computed_tokens = q->r->num_computed_tokens,
        .num_new_tokens = (uint64_t)json_integer_value(json_object_get(st, "num_new_tokens")),
        .hits = use_hits && q->has_hits ? &q->hits : NULL,
        .is_admission = true,
    };
    struct kvpool_plan plan;
    struct kvpool *pool = sched_pool(c->s);
    int rc = kvpool_prepare(pool, &q->r->kv, &args, &plan);
    if (rc < 0)
        return conform__fail(c, "%s: kv_allocate: %s", where, kvsim_strerror(rc));
    if (rc != KVPOOL_READY) {
        c->alloc = json_pack("{s:b,s:[]}", "fail", 1, "blocks");
        return 0;
    }
    rc = kvpool_commit(pool, &q->r->kv, &plan);
    if (rc)
        return conform__fail(c, "%s: kv_allocate commit: %s", where, kvsim_strerror(rc));
    q->has_hits = false;
    json_t *blocks = json_array();
    for (uint32_t i = plan.first_new_index + plan.num_hit_blocks; i < q->r->kv.num_blocks; i++)
        json_array_append_new(blocks, json_integer(q->r->kv.blocks[i]));
    c->alloc = json_pack("{s:b,s:o}", "fail", 0, "blocks", blocks);
    return 0;
}

/* Moves virtual time; with tiers, applies every transfer that ends by then. */
int conform__op_advance(struct kvsim_conform_runner *c, json_t *st, const char *where)
{
    json_t *to = json_object_get(st, "to_ns"), *by = json_object_get(st, "by_ns");
    int64_t t;
    if (to) {
        t = (int64_t)json_integer_value(to);
        if (t < c->now_ns) {
            if (c->lenient) /* a removed step moved time less far: this one is moot */
                return OP_SKIPPED;
            return conform__fail(c, "%s: key 'to_ns': %" PRId64 " is before now (%" PRId64 ")",
                                 where, t, c->now_ns);
        }
    } else {
        int64_t d = (int64_t)json_integer_value(by);
        if (d >= MAX_NOW_NS - c->now_ns)
            return conform__fail(c, "%s: key 'by_ns': virtual time would pass %" PRId64, where,
                                 MAX_NOW_NS);
        t = c->now_ns + d;
    }
    c->now_ns = t;
    if (!c->tiers)
        return 0;
    int rc = kvsim_tiers_advance_to(c->tiers, t);
    if (rc < 0)
        return conform__fail_kind(c, "offload_error", "%s: offload: advance to %" PRId64 " ns: %s",
                                  where, t, kvsim_strerror(rc));
    return 0;
}
