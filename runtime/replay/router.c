/*
 * router.c - round-robin, least-loaded, KV-aware routing and vLLM's DP load balancer (router.h).
 *
 * The KV indexer maps a block hash to a per-engine count of cached blocks carrying it (an engine
 * can hold duplicates), fed by Stored/Removed events. It is an open-addressing table of entry
 * indices with backward-shift deletion; the counts live in one flat array, num_engines per
 * entry.
 *
 * What the router sees (router.h, kvsim_router_set_view): with the exact view, the engines'
 * published loads and caches at the boundary plus the decisions made at it. With the delayed
 * view, each engine's KV events and loads are staged at their step's end by the engine's owner
 * and released to it (its shard, its seen load) once the step's end plus the delay is reached;
 * the router's own decisions stay booked (struct own_route) until the load it sees was taken
 * after them. With the pools, what it sees of a cache is the pool now less the staged events'
 * net blocks (struct pend_map, rebuilt at each release); without them, the indexer's shards.
 * Predict-on-route keeps a routed prompt's hashes as cached on the chosen engine until they expire
 * (struct predict).
 */
#include "runtime/replay/router.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One engine's shard of the KV indexer: block hash -> number of cached blocks with it. */
struct kv_shard {
    kvpool_hash *keys;
    uint32_t *counts; /* 0 = empty slot */
    uint64_t mask;
    uint64_t live;
};

/* The delayed view of one engine (owner: its staging and seen load; coordinator: own routes). */
struct staged_event {
    int64_t t; /* the step's end */
    uint8_t type;
    uint32_t num;
    size_t off; /* its hashes, in hashes[] */
};
struct staged_load {
    int64_t t;
    struct kvsim_engine_pub load;
};
struct own_route {
    int64_t t;     /* when it was routed */
    uint32_t rank; /* the unit's rank that got it (kvsim_router_book_rank; 0 with one rank) */
    uint32_t blocks;
    uint64_t tokens;
};
/* The net blocks (stored minus removed) by hash of the events staged and not released yet:
 * rebuilt at every release from the staged events (few: those of the last delay and of the
 * running steps); a slot is live when its generation is the map's. */
struct pend_map {
    kvpool_hash *keys;
    int32_t *delta;
    uint32_t *gen;
    uint32_t cur;
    uint64_t mask;
};
struct view_engine {
    struct staged_event *ev; /* FIFO: [ev_head, ev_len) */
    size_t ev_head, ev_len, ev_cap;
    kvpool_hash *hashes; /* the staged events' hashes: [0, h_len) */
    size_t h_len, h_cap;
    struct staged_load *ld; /* FIFO: [ld_head, ld_len) */
    size_t ld_head, ld_len, ld_cap;
    struct kvsim_engine_pub seen; /* the load the router sees, taken at seen_at */
    int64_t seen_at;              /* INT64_MIN: none heard of yet */
    struct own_route *own;        /* FIFO: [own_head, own_len), routed at or after seen_at */
    size_t own_head, own_len, own_cap;
    uint64_t own_blocks, own_tokens;
    /* With the pools (the replay, one rank a unit): what the router sees is the engine's cache
     * now less these (it has no indexer to feed) */
    struct pend_map pend;
};

/* Predict-on-route: hashes routed to one engine and until when they count as cached there. */
struct predict {
    kvpool_hash *keys;
    int64_t *until; /* 0: an empty slot (an expiry is a route time >= 0 plus a TTL > 0) */
    uint64_t mask, used;
};

struct kvsim_router {
    enum kvsim_router_policy policy;
    uint32_t n;
    double w;
    uint32_t rr_next;
    struct kv_shard *shards;
    const struct kvpool *const *pools; /* when set: overlap from the pools' own maps */
    uint32_t group;                    /* pools per routed unit (a DP deployment's ranks) */
    /* per boundary */
    uint64_t *pending_blocks; /* blocks routed to each engine since the boundary began */
    uint64_t *pending_tokens;
    uint32_t *pending_reqs; /* requests routed to each engine since the boundary began */
    /* dp-lb: the coordinator's last snapshot, the front end's waiting increments since, the
     * scan start, and when the snapshot was taken (docs/fidelity/data-parallel.md) */
    uint32_t *snap_waiting, *snap_running, *lb_added;
    double *snap_usage;
    uint32_t lb_start;
    int64_t last_publish, last_tick; /* INT64_MIN: none yet */
    /* what it sees (kvsim_router_set_view) */
    enum kvsim_router_view view;
    int64_t delay_ns, predict_ttl_ns, now;
    struct view_engine *ve; /* [n x ranks] with the delayed view: one per engine (rank) */
    uint32_t ranks;         /* engines per unit (a data-parallel deployment's ranks), >= 1 */
    struct predict *pred;   /* [n] with predict-on-route */
    /* per request (kvsim_router_overlap_begin to kvsim_router_route) */
    bool ov_open;
    uint32_t ov_len; /* ov[e]: engine e's overlap with the first ov_len hashes */
    uint32_t *ov;
};

const char *kvsim_router_policy_name(enum kvsim_router_policy p)
{
    switch (p) {
    case KVSIM_ROUTER_ROUND_ROBIN: return "round-robin";
    case KVSIM_ROUTER_LEAST_LOADED: return "least-loaded";
    case KVSIM_ROUTER_KV: return "kv";
    case KVSIM_ROUTER_DP_LB: return "dp-lb";
    }
    return "?";
}

int kvsim_router_policy_parse(const char *name)
{
    for (int p = KVSIM_ROUTER_ROUND_ROBIN; p <= KVSIM_ROUTER_DP_LB; p++)
        if (strcmp(name, kvsim_router_policy_name((enum kvsim_router_policy)p)) == 0)
            return p;
    return -EINVAL;
}

int kvsim_router_create(enum kvsim_router_policy policy, uint32_t num_engines,
                        double overlap_weight, struct kvsim_router **out)
{
    *out = NULL;
    if (num_engines == 0)
        return -EINVAL;
    struct kvsim_router *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->policy = policy;
    r->n = num_engines;
    r->w = overlap_weight;
    r->pending_blocks = calloc(num_engines, sizeof *r->pending_blocks);
    r->pending_tokens = calloc(num_engines, sizeof *r->pending_tokens);
    r->shards = calloc(num_engines, sizeof *r->shards);
    r->ov = calloc(num_engines, sizeof *r->ov);
    r->pending_reqs = calloc(num_engines, sizeof *r->pending_reqs);
    r->snap_waiting = calloc(num_engines, sizeof *r->snap_waiting);
    r->snap_running = calloc(num_engines, sizeof *r->snap_running);
    r->lb_added = calloc(num_engines, sizeof *r->lb_added);
    r->snap_usage = calloc(num_engines, sizeof *r->snap_usage);
    r->last_publish = r->last_tick = INT64_MIN;
    r->ranks = 1;
    if (!r->pending_blocks || !r->pending_tokens || !r->shards || !r->ov || !r->pending_reqs ||
        !r->snap_waiting || !r->snap_running || !r->lb_added || !r->snap_usage) {
        kvsim_router_destroy(r);
        return -ENOMEM;
    }
    *out = r;
    return 0;
}

void kvsim_router_destroy(struct kvsim_router *r)
{
    if (!r)
        return;
    uint32_t n_all = r->n * (r->ranks ? r->ranks : 1);
    for (uint32_t e = 0; r->ve && e < n_all; e++) {
        free(r->ve[e].ev);
        free(r->ve[e].hashes);
        free(r->ve[e].ld);
        free(r->ve[e].own);
        free(r->ve[e].pend.keys);
        free(r->ve[e].pend.delta);
        free(r->ve[e].pend.gen);
    }
    free(r->ve);
    for (uint32_t e = 0; r->pred && e < r->n; e++) {
        free(r->pred[e].keys);
        free(r->pred[e].until);
    }
    free(r->pred);
    for (uint32_t e = 0; r->shards && e < n_all; e++) {
        free(r->shards[e].keys);
        free(r->shards[e].counts);
    }
    free(r->shards);
    free(r->pending_blocks);
    free(r->pending_tokens);
    free(r->ov);
    free(r->pending_reqs);
    free(r->snap_waiting);
    free(r->snap_running);
    free(r->lb_added);
    free(r->snap_usage);
    free(r);
}

enum kvsim_router_policy kvsim_router_policy(const struct kvsim_router *r) { return r->policy; }
uint64_t kvsim_router_indexed_blocks(const struct kvsim_router *r)
{
    uint64_t n = 0;
    for (uint32_t e = 0; e < r->n * r->ranks; e++)
        n += r->shards[e].live;
    return n;
}

void kvsim_router_new_boundary(struct kvsim_router *r)
{
    memset(r->pending_blocks, 0, r->n * sizeof *r->pending_blocks);
    memset(r->pending_tokens, 0, r->n * sizeof *r->pending_tokens);
    memset(r->pending_reqs, 0, r->n * sizeof *r->pending_reqs);
    r->ov_open = false; /* a request's overlaps never outlive its boundary */
}

/* ---- indexer shards (open addressing, linear probing, backward-shift deletion) --------------- */

/* Where hash h starts its probe in a table of mask + 1 slots (the shards, the unheard blocks,
 * the predictions all probe linearly from here). */
static uint64_t hash_home(kvpool_hash h, uint64_t mask) { return (h ^ (h >> 29)) & mask; }

static uint64_t home_of(const struct kv_shard *s, kvpool_hash h) { return hash_home(h, s->mask); }

/* Slot holding h, or the empty slot where it would go. */
static uint64_t shard_find(const struct kv_shard *s, kvpool_hash h)
{
    uint64_t i = home_of(s, h);
    while (s->counts[i] && s->keys[i] != h)
        i = (i + 1) & s->mask;
    return i;
}

static bool shard_contains(const struct kv_shard *s, kvpool_hash h)
{
    return s->counts && s->counts[shard_find(s, h)] != 0;
}

static int shard_grow(struct kv_shard *s)
{
    uint64_t old_n = s->counts ? s->mask + 1 : 0, n = old_n ? old_n * 2 : 4096;
    kvpool_hash *keys = malloc(n * sizeof *keys);
    uint32_t *counts = calloc(n, sizeof *counts);
    if (!keys || !counts) {
        free(keys);
        free(counts);
        return -ENOMEM;
    }
    kvpool_hash *ok = s->keys;
    uint32_t *oc = s->counts;
    s->keys = keys;
    s->counts = counts;
    s->mask = n - 1;
    for (uint64_t i = 0; i < old_n; i++)
        if (oc[i]) {
            uint64_t j = shard_find(s, ok[i]);
            s->keys[j] = ok[i];
            s->counts[j] = oc[i];
        }
    free(ok);
    free(oc);
    return 0;
}

static void shard_delete_slot(struct kv_shard *s, uint64_t i)
{
    s->counts[i] = 0;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & s->mask;
        if (!s->counts[j])
            return;
        uint64_t home = home_of(s, s->keys[j]);
        bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            s->keys[i] = s->keys[j];
            s->counts[i] = s->counts[j];
            s->counts[j] = 0;
            i = j;
        }
    }
}

int kvsim_router_apply_event_owner(struct kvsim_router *r, uint32_t engine,
                                   const struct kvpool_event *ev)
{
    struct kv_shard *s = &r->shards[engine];
    if (ev->type == KVPOOL_EVENT_CLEARED) {
        if (s->counts)
            memset(s->counts, 0, (s->mask + 1) * sizeof *s->counts);
        s->live = 0;
        return 0;
    }
    for (uint32_t k = 0; k < ev->num_hashes; k++) {
        kvpool_hash h = ev->hashes[k];
        if (ev->type == KVPOOL_EVENT_STORED) {
            if (!s->counts || (s->live + 1) * 2 > s->mask + 1) {
                int rc = shard_grow(s);
                if (rc)
                    return rc;
            }
            uint64_t i = shard_find(s, h);
            if (!s->counts[i]) {
                s->keys[i] = h;
                s->live++;
            }
            s->counts[i]++;
        } else if (s->counts) {
            uint64_t i = shard_find(s, h);
            if (!s->counts[i])
                continue; /* never indexed: nothing to forget */
            if (--s->counts[i] == 0) {
                s->counts[i] = 1; /* shard_delete_slot clears it and closes the gap */
                shard_delete_slot(s, i);
                s->live--;
            }
        }
    }
    return 0;
}

void kvsim_router_use_pools(struct kvsim_router *r, const struct kvpool *const *pools)
{
    r->pools = pools;
    r->group = 1;
}

void kvsim_router_use_pool_groups(struct kvsim_router *r, const struct kvpool *const *pools,
                                  uint32_t group)
{
    r->pools = pools;
    r->group = group;
}

/* ---- what the router sees ------------------------------------------------------------------ */

const char *kvsim_router_view_name(enum kvsim_router_view v)
{
    return v == KVSIM_ROUTER_VIEW_DELAYED ? "delayed" : "exact";
}

int kvsim_router_set_view(struct kvsim_router *r, enum kvsim_router_view view, int64_t delay_ns,
                          int64_t predict_ttl_ns, uint32_t ranks)
{
    if (delay_ns < 0 || predict_ttl_ns < 0 || ranks == 0 || r->ve)
        return -EINVAL;
    r->view = view;
    r->delay_ns = delay_ns;
    r->predict_ttl_ns = predict_ttl_ns;
    r->now = INT64_MIN;
    if (view == KVSIM_ROUTER_VIEW_DELAYED) {
        if (ranks > 1) { /* a shard per rank: a unit's overlap is its best rank's */
            struct kv_shard *s = calloc((size_t)r->n * ranks, sizeof *s);
            if (!s)
                return -ENOMEM;
            for (uint32_t e = 0; e < r->n; e++) {
                free(r->shards[e].keys);
                free(r->shards[e].counts);
            }
            free(r->shards);
            r->shards = s;
        }
        r->ranks = ranks;
        if (!(r->ve = calloc((size_t)r->n * ranks, sizeof *r->ve)))
            return -ENOMEM;
        for (uint32_t e = 0; e < r->n * ranks; e++)
            r->ve[e].seen_at = INT64_MIN;
    }
    if (predict_ttl_ns > 0 && r->policy == KVSIM_ROUTER_KV && !r->pred &&
        !(r->pred = calloc(r->n, sizeof *r->pred)))
        return -ENOMEM;
    return 0;
}

/* Grows a FIFO's array (elements of size sz, [head, len) live) so that one more fits: moves the
 * live ones to the front first when at least half of it is released (amortized O(1)). Returns 0
 * or -ENOMEM. */
static int fifo_room(void **arr, size_t sz, size_t *head, size_t *len, size_t *cap)
{
    if (*len < *cap)
        return 0;
    if (*head >= *cap / 2 && *head > 0) {
        memmove(*arr, (char *)*arr + *head * sz, (*len - *head) * sz);
        *len -= *head;
        *head = 0;
        if (*len < *cap)
            return 0;
    }
    size_t nc = *cap ? 2 * *cap : 16;
    void *na = realloc(*arr, nc * sz);
    if (!na)
        return -ENOMEM;
    *arr = na;
    *cap = nc;
    return 0;
}

int kvsim_router_stage_event_owner(struct kvsim_router *r, uint32_t engine, int64_t step_end,
                                   const struct kvpool_event *ev)
{
    struct view_engine *v = &r->ve[engine];
    if (v->ev_head == v->ev_len) /* nothing staged: the hashes start over */
        v->ev_head = v->ev_len = v->h_len = 0;
    if (v->ev_head >= v->ev_cap / 2 && v->ev_head > 0 &&
        v->ev_len == v->ev_cap) { /* fifo_room compacts: drop the released ones' hashes too */
        size_t from = v->ev[v->ev_head].off;
        memmove(v->hashes, v->hashes + from, (v->h_len - from) * sizeof *v->hashes);
        v->h_len -= from;
        for (size_t i = v->ev_head; i < v->ev_len; i++)
            v->ev[i].off -= from;
    }
    void *arr = v->ev;
    int rc = fifo_room(&arr, sizeof *v->ev, &v->ev_head, &v->ev_len, &v->ev_cap);
    v->ev = arr;
    if (rc)
        return rc;
    if (v->h_len + ev->num_hashes > v->h_cap) {
        size_t nc = v->h_cap ? 2 * v->h_cap : 256;
        while (nc < v->h_len + ev->num_hashes)
            nc *= 2;
        kvpool_hash *nh = realloc(v->hashes, nc * sizeof *nh);
        if (!nh)
            return -ENOMEM;
        v->hashes = nh;
        v->h_cap = nc;
    }
    memcpy(v->hashes + v->h_len, ev->hashes, ev->num_hashes * sizeof *ev->hashes);
    v->ev[v->ev_len++] =
        (struct staged_event){step_end, (uint8_t)ev->type, ev->num_hashes, v->h_len};
    v->h_len += ev->num_hashes;
    return 0;
}

void kvsim_router_stage_load_owner(struct kvsim_router *r, uint32_t engine, int64_t step_end,
                                   const struct kvsim_engine_pub *load)
{
    struct view_engine *v = &r->ve[engine];
    if (v->ld_len > v->ld_head && v->ld[v->ld_len - 1].t == step_end) {
        v->ld[v->ld_len - 1].load = *load; /* the step's last word */
        return;
    }
    void *arr = v->ld;
    if (fifo_room(&arr, sizeof *v->ld, &v->ld_head, &v->ld_len, &v->ld_cap) != 0) {
        /* no room: keep the newest load as the last one staged (heard of a little early) */
        if (v->ld_len > v->ld_head)
            v->ld[v->ld_len - 1] = (struct staged_load){step_end, *load};
        return;
    }
    v->ld = arr;
    v->ld[v->ld_len++] = (struct staged_load){step_end, *load};
}

static uint64_t pend_slot(const struct pend_map *m, kvpool_hash h)
{
    uint64_t i = hash_home(h, m->mask);
    while (m->gen[i] == m->cur && m->keys[i] != h)
        i = (i + 1) & m->mask;
    return i;
}

/* The net blocks of h the router has not heard of (0: none). */
static int32_t pend_get(const struct pend_map *m, kvpool_hash h)
{
    if (!m->gen)
        return 0;
    uint64_t i = pend_slot(m, h);
    return m->gen[i] == m->cur ? m->delta[i] : 0;
}

/* Rebuilds v's pend map from its staged events [ev_head, ev_len). Returns 0 or -ENOMEM. */
static int pend_rebuild(struct view_engine *v)
{
    struct pend_map *m = &v->pend;
    size_t hashes = 0;
    for (size_t i = v->ev_head; i < v->ev_len; i++)
        hashes += v->ev[i].num;
    uint64_t n = m->gen ? m->mask + 1 : 0;
    if (hashes * 2 > n) { /* at most half full */
        uint64_t nn = n ? n : 256;
        while (hashes * 2 > nn)
            nn *= 2;
        kvpool_hash *k = malloc(nn * sizeof *k);
        int32_t *d = malloc(nn * sizeof *d);
        uint32_t *g = calloc(nn, sizeof *g);
        if (!k || !d || !g) {
            free(k);
            free(d);
            free(g);
            return -ENOMEM;
        }
        free(m->keys);
        free(m->delta);
        free(m->gen);
        *m = (struct pend_map){k, d, g, 0, nn - 1};
    }
    if (++m->cur == 0) { /* the generations wrapped: start over */
        memset(m->gen, 0, (m->mask + 1) * sizeof *m->gen);
        m->cur = 1;
    }
    for (size_t i = v->ev_head; i < v->ev_len; i++) {
        const struct staged_event *s = &v->ev[i];
        int32_t d = s->type == KVPOOL_EVENT_STORED ? 1 : s->type == KVPOOL_EVENT_REMOVED ? -1 : 0;
        for (uint32_t k = 0; k < s->num && d; k++) {
            kvpool_hash h = v->hashes[s->off + k];
            uint64_t j = pend_slot(m, h);
            if (m->gen[j] != m->cur) {
                m->gen[j] = m->cur;
                m->keys[j] = h;
                m->delta[j] = 0;
            }
            m->delta[j] += d;
        }
    }
    return 0;
}

/* Whether engine e's cache holds h as the delayed router sees it: its blocks with h now, less
 * the net blocks it has not heard of. */
static bool pool_seen(const struct kvsim_router *r, uint32_t e, kvpool_hash h)
{
    int32_t unheard = pend_get(&r->ve[e].pend, h);
    if (!unheard)
        return kvpool_cache_find(r->pools[e], h) >= 0;
    return (int64_t)kvpool_cache_count(r->pools[e], h) - unheard > 0;
}

/* Whether what happened at t is seen at now (t + delay <= now, without overflow). */
static bool seen_by(const struct kvsim_router *r, int64_t t, int64_t now)
{
    return t <= now - r->delay_ns;
}

int kvsim_router_release_owner(struct kvsim_router *r, uint32_t engine, int64_t now)
{
    if (r->view != KVSIM_ROUTER_VIEW_DELAYED)
        return 0;
    struct view_engine *v = &r->ve[engine];
    for (; v->ev_head < v->ev_len && seen_by(r, v->ev[v->ev_head].t, now); v->ev_head++) {
        const struct staged_event *s = &v->ev[v->ev_head];
        struct kvpool_event ev = {.type = (enum kvpool_event_type)s->type,
                                  .num_hashes = s->num,
                                  .hashes = v->hashes + s->off};
        int rc = r->pools && r->ranks == 1 ? 0 : kvsim_router_apply_event_owner(r, engine, &ev);
        if (rc)
            return rc;
    }
    if (r->pools && r->ranks == 1) { /* no indexer: what is not heard of yet, against the pool */
        int rc = pend_rebuild(v);
        if (rc)
            return rc;
    }
    for (; v->ld_head < v->ld_len && seen_by(r, v->ld[v->ld_head].t, now); v->ld_head++) {
        v->seen = v->ld[v->ld_head].load;
        v->seen_at = v->ld[v->ld_head].t;
    }
    return 0;
}

void kvsim_router_view_at(struct kvsim_router *r, int64_t now)
{
    r->now = now;
    for (uint32_t e = 0; r->ve && e < r->n; e++) { /* the routes the seen loads took in */
        struct view_engine *v = &r->ve[e * r->ranks];
        for (; v->own_head < v->own_len &&
               v->own[v->own_head].t < r->ve[e * r->ranks + v->own[v->own_head].rank].seen_at;
             v->own_head++) {
            v->own_blocks -= v->own[v->own_head].blocks;
            v->own_tokens -= v->own[v->own_head].tokens;
        }
    }
}

/* Engine e's load for a decision: active blocks and queued tokens, with the router's own
 * decisions on top (this boundary's with the exact view; those the seen load lacks with the
 * delayed one). */
static uint64_t load_blocks(const struct kvsim_router *r,
                            const struct kvsim_engine_pub *const *pubs, uint32_t e)
{
    if (!r->ve)
        return pubs[e]->active_blocks + r->pending_blocks[e];
    uint64_t n = r->ve[e * r->ranks].own_blocks; /* a unit's: its ranks' seen loads summed */
    for (uint32_t k = 0; k < r->ranks; k++)
        n += r->ve[e * r->ranks + k].seen.active_blocks;
    return n;
}

static uint64_t load_tokens(const struct kvsim_router *r,
                            const struct kvsim_engine_pub *const *pubs, uint32_t e)
{
    if (!r->ve)
        return pubs[e]->queued_tokens + r->pending_tokens[e];
    uint64_t n = r->ve[e * r->ranks].own_tokens;
    for (uint32_t k = 0; k < r->ranks; k++)
        n += r->ve[e * r->ranks + k].seen.queued_tokens;
    return n;
}

void kvsim_router_book_rank(struct kvsim_router *r, uint32_t unit, uint32_t rank)
{
    struct view_engine *v = r->ve ? &r->ve[unit * r->ranks] : NULL;
    if (v && v->own_len > v->own_head && rank < r->ranks)
        v->own[v->own_len - 1].rank = rank;
}

/* ---- predict-on-route ----------------------------------------------------------------------- */

static uint64_t predict_slot(const struct predict *p, kvpool_hash h)
{
    uint64_t i = hash_home(h, p->mask);
    while (p->until[i] && p->keys[i] != h)
        i = (i + 1) & p->mask;
    return i;
}

/* Whether h counts as cached on the engine of p at now. */
static bool predicted(const struct predict *p, kvpool_hash h, int64_t now)
{
    return p->until && p->until[predict_slot(p, h)] > now;
}

/* Rebuilds p without the expired entries, twice as large when more than a quarter is live.
 * Returns 0 or -ENOMEM. */
static int predict_rebuild(struct predict *p, int64_t now)
{
    uint64_t live = 0, old_n = p->until ? p->mask + 1 : 0;
    for (uint64_t i = 0; i < old_n; i++)
        live += p->until[i] > now;
    uint64_t n = old_n ? old_n : 1024;
    while (live * 4 > n)
        n *= 2;
    struct predict q = {malloc(n * sizeof *q.keys), calloc(n, sizeof *q.until), n - 1, 0};
    if (!q.keys || !q.until) {
        free(q.keys);
        free(q.until);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < old_n; i++)
        if (p->until[i] > now) {
            uint64_t j = predict_slot(&q, p->keys[i]);
            q.keys[j] = p->keys[i];
            q.until[j] = p->until[i];
            q.used++;
        }
    free(p->keys);
    free(p->until);
    *p = q;
    return 0;
}

/* hashes[0..n) count as cached on engine e until now + the TTL. */
static void predict_add(struct kvsim_router *r, uint32_t e, const kvpool_hash *hashes, uint32_t n)
{
    struct predict *p = &r->pred[e];
    int64_t until = r->now > INT64_MAX - r->predict_ttl_ns ? INT64_MAX : r->now + r->predict_ttl_ns;
    for (uint32_t k = 0; k < n; k++) {
        if ((!p->until || (p->used + 1) * 2 > p->mask + 1) && predict_rebuild(p, r->now) != 0)
            return; /* out of memory: a prediction fewer, never a wrong one */
        uint64_t i = predict_slot(p, hashes[k]);
        if (!p->until[i]) {
            p->keys[i] = hashes[k];
            p->used++;
        }
        if (until > p->until[i])
            p->until[i] = until;
    }
}

bool kvsim_router_predicts(const struct kvsim_router *r) { return r->pred != NULL; }

/* Longest prefix of hashes cached on engine e. */
uint32_t kvsim_router_overlap_on(const struct kvsim_router *r, uint32_t e,
                                 const kvpool_hash *hashes, uint32_t n)
{
    uint32_t i = 0;
    if (r->ve && r->pools && r->ranks == 1) { /* the delayed view over the pools */
        const struct predict *p = r->pred ? &r->pred[e] : NULL;
        while (i < n && (pool_seen(r, e, hashes[i]) || (p && predicted(p, hashes[i], r->now))))
            i++;
        return i;
    }
    if (r->ve && r->ranks > 1) { /* a deployment's delayed view: its best rank's prefix */
        uint32_t best = 0;
        const struct predict *p = r->pred ? &r->pred[e] : NULL;
        for (uint32_t k = 0; k < r->ranks && best < n; k++) {
            const struct kv_shard *s = &r->shards[e * r->ranks + k];
            for (i = 0;
                 i < n && (shard_contains(s, hashes[i]) || (p && predicted(p, hashes[i], r->now)));)
                i++;
            best = i > best ? i : best;
        }
        return best;
    }
    if (r->pred) { /* what the engine caches, or the router predicts it caches */
        const struct predict *p = &r->pred[e];
        if (r->pools)
            while (i < n && (kvpool_cache_find(r->pools[e], hashes[i]) >= 0 ||
                             predicted(p, hashes[i], r->now)))
                i++;
        else
            while (i < n &&
                   (shard_contains(&r->shards[e], hashes[i]) || predicted(p, hashes[i], r->now)))
                i++;
        return i;
    }
    if (r->pools && r->group > 1) { /* a deployment: its rank with the longest prefix */
        uint32_t best = 0;
        for (uint32_t k = 0; k < r->group && best < n; k++) {
            const struct kvpool *p = r->pools[e * r->group + k];
            for (i = 0; i < n && kvpool_cache_find(p, hashes[i]) >= 0;)
                i++;
            if (i > best)
                best = i;
        }
        return best;
    }
    if (r->pools) {
        while (i < n && kvpool_cache_find(r->pools[e], hashes[i]) >= 0)
            i++;
        return i;
    }
    while (i < n && shard_contains(&r->shards[e], hashes[i]))
        i++;
    return i;
}

uint32_t kvsim_router_max_overlap(const struct kvsim_router *r, const kvpool_hash *hashes,
                                  uint32_t num_hashes)
{
    uint32_t best = 0;
    for (uint32_t e = 0; e < r->n && best < num_hashes; e++) {
        uint32_t ov = kvsim_router_overlap_on(r, e, hashes, num_hashes);
        if (ov > best)
            best = ov;
    }
    return best;
}

void kvsim_router_overlap_begin(struct kvsim_router *r)
{
    memset(r->ov, 0, r->n * sizeof *r->ov);
    r->ov_len = 0;
    r->ov_open = true;
}

/* Extends every engine's overlap to hashes[0..n): an engine that missed a block before stays
 * where it missed (its cached prefix ends there); the others go on from ov_len. */
static void extend_overlaps(struct kvsim_router *r, const kvpool_hash *hashes, uint32_t n)
{
    if (n <= r->ov_len)
        return;
    for (uint32_t e = 0; e < r->n; e++)
        if (r->ov[e] == r->ov_len)
            r->ov[e] += kvsim_router_overlap_on(r, e, hashes + r->ov_len, n - r->ov_len);
    r->ov_len = n;
}

uint32_t kvsim_router_extend_overlaps(struct kvsim_router *r, const kvpool_hash *hashes,
                                      uint32_t num_hashes)
{
    if (!r->ov_open)
        kvsim_router_overlap_begin(r);
    extend_overlaps(r, hashes, num_hashes);
    uint32_t best = 0;
    for (uint32_t e = 0; e < r->n; e++)
        if (r->ov[e] > best)
            best = r->ov[e];
    return best < num_hashes ? best : num_hashes;
}

/* The kv policy's choice: the lowest overlap_weight * blocks to prefill + active blocks (of the
 * engine and booked at this boundary), the lowest id among equals; engine e's overlap is
 * ov[e * stride], over the first num_hashes blocks. */
static uint32_t kv_choice(const struct kvsim_router *r, const struct kvsim_engine_pub *const *pubs,
                          const uint32_t *ov, size_t stride, uint32_t num_hashes,
                          uint32_t prompt_blocks)
{
    uint32_t best = 0;
    double bc = 0;
    for (uint32_t e = 0; e < r->n; e++) {
        /* an overlap is a prefix length: over fewer hashes it is the smaller one */
        uint32_t o = ov[e * stride] < num_hashes ? ov[e * stride] : num_hashes;
        if (o > prompt_blocks)
            o = prompt_blocks;
        double cost = r->w * (double)(prompt_blocks - o) + (double)load_blocks(r, pubs, e);
        if (e == 0 || cost < bc) {
            best = e;
            bc = cost;
        }
    }
    return best;
}

/* ---- dp-lb: vLLM's DP load balancer (docs/fidelity/data-parallel.md) ---------------------- */

/* vLLM's DPCoordinator publishes at most every min_stats_update_interval_ms (100 ms) while the
 * counts change, and otherwise every 5 s. */
#define DP_LB_TICK_NS    100000000LL
#define DP_LB_REFRESH_NS 5000000000LL

int64_t kvsim_router_next_tick(const struct kvsim_router *r, int64_t now)
{
    if (r->policy != KVSIM_ROUTER_DP_LB || now >= INT64_MAX - DP_LB_TICK_NS)
        return INT64_MAX;
    int64_t t = now >= 0 ? now / DP_LB_TICK_NS : (now - DP_LB_TICK_NS + 1) / DP_LB_TICK_NS;
    return (t + 1) * DP_LB_TICK_NS;
}

/* The coordinator's publish: every engine's counts and KV usage, as the pubs show them now; the
 * front end's optimistic waiting increments are dropped with the snapshot they amended. */
static void dp_lb_publish(struct kvsim_router *r, const struct kvsim_engine_pub *const *pubs,
                          int64_t t)
{
    for (uint32_t e = 0; e < r->n; e++) {
        r->snap_waiting[e] = pubs[e]->num_waiting;
        r->snap_running[e] = pubs[e]->num_running;
        r->snap_usage[e] = pubs[e]->kv_usage;
        r->lb_added[e] = 0;
    }
    r->last_publish = t;
}

void kvsim_router_boundary(struct kvsim_router *r, const struct kvsim_engine_pub *const *pubs,
                           int64_t now)
{
    kvsim_router_new_boundary(r);
    kvsim_router_view_at(r, now);
    if (r->policy != KVSIM_ROUTER_DP_LB)
        return;
    /* The latest tick at or before now: the replay puts a boundary on every tick while an engine
     * has work, so a tick it skipped fell in an idle spell, when the pubs did not change. */
    int64_t tick = kvsim_router_next_tick(r, now) - DP_LB_TICK_NS;
    if (now >= INT64_MAX - DP_LB_TICK_NS || tick <= r->last_tick)
        return;
    r->last_tick = tick;
    bool changed = r->last_publish == INT64_MIN || tick - r->last_publish >= DP_LB_REFRESH_NS;
    for (uint32_t e = 0; e < r->n && !changed; e++)
        changed = pubs[e]->num_waiting != r->snap_waiting[e] ||
                  pubs[e]->num_running != r->snap_running[e];
    if (changed)
        dp_lb_publish(r, pubs, tick);
}

/* DPLBAsyncMPClient.get_core_engine_for_request (one API server, so client_count C = 1):
 * score = max(C * in flight, waiting + running) + (waiting > 0 ? waiting * 6 * max(0, usage -
 * 0.5) : 0), with in flight the requests routed here and not finished (exact), waiting the
 * snapshot's plus C per pick since it; scanned cyclically from the start index, the first
 * strictly lowest wins; the start index then advances by one. */
static uint32_t dp_lb_choice(struct kvsim_router *r, const struct kvsim_engine_pub *const *pubs)
{
    uint32_t best = r->lb_start;
    double bs = 0;
    for (uint32_t k = 0; k < r->n; k++) {
        uint32_t e = (r->lb_start + k) % r->n;
        double inflight = (double)pubs[e]->num_unfinished + (double)r->pending_reqs[e];
        double waiting = (double)r->snap_waiting[e] + (double)r->lb_added[e];
        double load = waiting + (double)r->snap_running[e];
        double score = inflight > load ? inflight : load;
        if (waiting > 0 && r->snap_usage[e] > 0.5)
            score += waiting * 6.0 * (r->snap_usage[e] - 0.5);
        if (k == 0 || score < bs) {
            best = e;
            bs = score;
        }
    }
    r->lb_added[best]++;
    r->lb_start = (r->lb_start + 1) % r->n;
    return best;
}

/* Books a choice: the next decision at this boundary sees it. */
static uint32_t book(struct kvsim_router *r, uint32_t best, uint32_t prompt_blocks,
                     uint64_t prompt_tokens)
{
    r->pending_blocks[best] += prompt_blocks;
    r->pending_tokens[best] += prompt_tokens;
    r->pending_reqs[best]++;
    r->ov_open = false;
    if (r->ve) { /* booked until the load the router sees was taken after now */
        struct view_engine *v = &r->ve[best * r->ranks];
        void *arr = v->own;
        if (fifo_room(&arr, sizeof *v->own, &v->own_head, &v->own_len, &v->own_cap) == 0) {
            v->own = arr;
            v->own[v->own_len++] = (struct own_route){r->now, 0, prompt_blocks, prompt_tokens};
            v->own_blocks += prompt_blocks;
            v->own_tokens += prompt_tokens;
        }
    }
    return best;
}

uint32_t kvsim_router_route_overlaps(struct kvsim_router *r,
                                     const struct kvsim_engine_pub *const *pubs,
                                     const uint32_t *overlaps, size_t stride, uint32_t num_hashes,
                                     uint32_t prompt_blocks, uint64_t prompt_tokens)
{
    uint32_t best = kv_choice(r, pubs, overlaps, stride, num_hashes, prompt_blocks);
    return book(r, best, prompt_blocks, prompt_tokens);
}

uint32_t kvsim_router_route(struct kvsim_router *r, const struct kvsim_engine_pub *const *pubs,
                            const kvpool_hash *hashes, uint32_t num_hashes, uint32_t prompt_blocks,
                            uint64_t prompt_tokens)
{
    uint32_t best = 0;
    switch (r->policy) {
    case KVSIM_ROUTER_ROUND_ROBIN:
        best = r->rr_next;
        r->rr_next = (r->rr_next + 1) % r->n;
        break;
    case KVSIM_ROUTER_LEAST_LOADED: {
        uint64_t bb = UINT64_MAX, bt = UINT64_MAX;
        for (uint32_t e = 0; e < r->n; e++) {
            uint64_t blocks = load_blocks(r, pubs, e);
            uint64_t tokens = load_tokens(r, pubs, e);
            if (blocks < bb || (blocks == bb && tokens < bt)) {
                best = e;
                bb = blocks;
                bt = tokens;
            }
        }
        break;
    }
    case KVSIM_ROUTER_DP_LB: best = dp_lb_choice(r, pubs); break;
    case KVSIM_ROUTER_KV:
        if (!r->ov_open) /* no overlaps of this request yet: all of them, from block 0 */
            kvsim_router_overlap_begin(r);
        extend_overlaps(r, hashes, num_hashes);
        best = kv_choice(r, pubs, r->ov, 1, num_hashes, prompt_blocks);
        if (r->pred)
            predict_add(r, best, hashes, num_hashes);
        break;
    }
    return book(r, best, prompt_blocks, prompt_tokens);
}
