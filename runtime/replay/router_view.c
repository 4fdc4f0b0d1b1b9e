/*
 * router_view.c - what a router sees (router.h, kvsim_router_set_view). With the exact view,
 * the engines' published loads and caches at the boundary plus the decisions made at it. With the
 * delayed view, each engine's KV events and loads are staged at their step's end by the engine's
 * owner and released to it (its shard, its seen load) once the step's end plus the delay is
 * reached; the router's own decisions stay booked (struct own_route) until the load it sees was
 * taken after them. With the pools, what it sees of a cache is the pool now less the staged
 * events' net blocks (struct pend_map, rebuilt at each release); without them, the indexer's
 * shards (router.c). Predict-on-route keeps a routed prompt's hashes as cached on the chosen
 * engine until they expire (struct predict).
 *
 * Threads: staging and release on each engine's owner, for its own entry; the rest on the
 * coordinator (router.h).
 */
#include "runtime/replay/router_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
            struct kv_shard *s = router__calloc_lines((size_t)r->n * ranks, sizeof *s);
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
        if (!(r->ve = router__calloc_lines((size_t)r->n * ranks, sizeof *r->ve)))
            return -ENOMEM;
        for (uint32_t e = 0; e < r->n * ranks; e++)
            r->ve[e].seen_at = INT64_MIN;
    }
    if (predict_ttl_ns > 0 && r->policy == KVSIM_ROUTER_KV && !r->pred &&
        !(r->pred = calloc(r->n, sizeof *r->pred)))
        return -ENOMEM;
    return 0;
}

/* Grows *arr (elements of size sz, *cap of them) by doubling from `first` until need fit.
 * Returns 0 or -ENOMEM (*arr unchanged). */
static int grow_to(void **arr, size_t sz, size_t *cap, size_t need, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? 2 * *cap : first;
    while (nc < need)
        nc *= 2;
    void *na = realloc(*arr, nc * sz);
    if (!na)
        return -ENOMEM;
    *arr = na;
    *cap = nc;
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
    return grow_to(arr, sz, cap, *len + 1, 16);
}

int kvsim_router_stage_events_owner(struct kvsim_router *r, uint32_t engine, int64_t step_end,
                                    const struct kvpool_event *evs, size_t n)
{
    if (n == 0)
        return 0;
    struct view_engine *v = &r->ve[engine];
    bool reset = v->ev_head == v->ev_len && v->ev_len > 0;
    bool compact =
        v->ev_head > 0 && v->ev_head >= v->ev_cap / 2 && v->ev_len + n > v->ev_cap && !reset;
    /* the released events' hashes are about to go: the unheard table takes them out first */
    if ((reset || compact) && v->pend.sync_len > v->pend.sync_head) {
        int rc = router__view_sync(r, engine);
        if (rc)
            return rc;
    }
    if (reset) { /* nothing staged: the hashes start over */
        v->ev_head = v->ev_len = v->h_len = 0;
        v->pend.sync_head = v->pend.sync_len = 0;
    }
    if (compact) { /* the staged events and their hashes move to the front */
        size_t head = v->ev_head, from = v->ev[head].off;
        memmove(v->hashes, v->hashes + from, (v->h_len - from) * sizeof *v->hashes);
        v->h_len -= from;
        memmove(v->ev, v->ev + head, (v->ev_len - head) * sizeof *v->ev);
        v->ev_len -= head;
        v->ev_head = 0;
        for (size_t k = 0; k < v->ev_len; k++)
            v->ev[k].off -= from;
        if (v->pend.sync_len > v->pend.sync_head) { /* synced above: they moved too */
            v->pend.sync_head -= head;
            v->pend.sync_len -= head;
        } else {
            v->pend.sync_head = v->pend.sync_len = 0;
        }
    }
    /* the events' hashes follow one another (kvpool_events_drain_batch): one copy for all */
    size_t hashes = n == 1 ? evs[0].num_hashes
                           : (size_t)(evs[n - 1].hashes + evs[n - 1].num_hashes - evs[0].hashes);
    void *evp = v->ev, *hs = v->hashes;
    int rc = grow_to(&evp, sizeof *v->ev, &v->ev_cap, v->ev_len + n, 16);
    v->ev = evp;
    if (rc == 0)
        rc = grow_to(&hs, sizeof *v->hashes, &v->h_cap, v->h_len + hashes, 256);
    v->hashes = hs;
    if (rc)
        return rc;
    if (hashes)
        memcpy(v->hashes + v->h_len, evs[0].hashes, hashes * sizeof *v->hashes);
    for (size_t k = 0; k < n; k++) {
        const struct kvpool_event *ev = &evs[k];
        uint32_t m = ev->num_hashes;
        /* A step's evictions come one block an event: one staged event for a run of them, unless
         * the last one is heard of or counted as unheard already. */
        struct staged_event *last = v->ev_len > v->ev_head ? &v->ev[v->ev_len - 1] : NULL;
        if (ev->type == KVPOOL_EVENT_REMOVED && last && last->type == KVPOOL_EVENT_REMOVED &&
            last->t == step_end && v->ev_len > v->pend.sync_len &&
            last->off + last->num == v->h_len)
            last->num += m;
        else
            v->ev[v->ev_len++] = (struct staged_event){step_end, (uint8_t)ev->type, m, v->h_len};
        v->h_len += m;
    }
    return 0;
}

int kvsim_router_stage_event_owner(struct kvsim_router *r, uint32_t engine, int64_t step_end,
                                   const struct kvpool_event *ev)
{
    return kvsim_router_stage_events_owner(r, engine, step_end, ev, 1);
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

/* Adds d to h's net blocks (a slot for h taken when it has none). */
static void pend_add(struct pend_map *m, kvpool_hash h, int32_t d)
{
    uint64_t j = pend_slot(m, h);
    if (m->gen[j] != m->cur) {
        m->gen[j] = m->cur;
        m->keys[j] = h;
        m->delta[j] = 0;
        m->used++;
    }
    m->delta[j] += d;
}

/* Staged event s's contribution to its hashes' net blocks: +1 a block stored, -1 removed. */
static int32_t pend_sign(const struct staged_event *s)
{
    return s->type == KVPOOL_EVENT_STORED ? 1 : s->type == KVPOOL_EVENT_REMOVED ? -1 : 0;
}

/* Adds (sign +1) or takes out (-1) staged events [from, to) of v. */
static void pend_apply(struct view_engine *v, size_t from, size_t to, int32_t sign)
{
    for (size_t i = from; i < to; i++) {
        const struct staged_event *s = &v->ev[i];
        int32_t d = pend_sign(s) * sign;
        for (uint32_t k = 0; k < s->num && d; k++)
            pend_add(&v->pend, v->hashes[s->off + k], d);
    }
}

/* Rebuilds v's pend map from its staged events [ev_head, ev_len), at least four times as large
 * as their hashes (so that as many again can come, counted or left at zero, before the next
 * rebuild: pend_update rebuilds at half full). Returns 0 or -ENOMEM. */
static int pend_rebuild(struct view_engine *v)
{
    struct pend_map *m = &v->pend;
    size_t hashes = 0;
    for (size_t i = v->ev_head; i < v->ev_len; i++)
        hashes += v->ev[i].num;
    uint64_t n = m->gen ? m->mask + 1 : 0;
    if (hashes * 4 > n || !m->gen) { /* at most a quarter full */
        uint64_t nn = n ? n : 256;
        while (hashes * 4 > nn)
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
        *m = (struct pend_map){k, d, g, 0, nn - 1, 0, 0, 0};
    }
    if (++m->cur == 0) { /* the generations wrapped: start over */
        memset(m->gen, 0, (m->mask + 1) * sizeof *m->gen);
        m->cur = 1;
    }
    m->used = 0;
    pend_apply(v, v->ev_head, v->ev_len, 1);
    m->sync_head = v->ev_head;
    m->sync_len = v->ev_len;
    return 0;
}

/* Brings v's pend map to its staged events now: the counted ones released since taken out, the
 * unreleased ones staged since added (pend_map). Returns 0 or -ENOMEM. */
static int pend_update(struct view_engine *v)
{
    struct pend_map *m = &v->pend;
    size_t a = m->sync_head, b = m->sync_len, h = v->ev_head, l = v->ev_len;
    if (m->gen && a == h && b == l)
        return 0;
    size_t add_from = b > h ? b : h, fresh = 0;
    for (size_t i = add_from; i < l; i++)
        fresh += v->ev[i].num;
    if (!m->gen || (m->used + fresh) * 2 > m->mask + 1)
        return pend_rebuild(v);
    pend_apply(v, a, b < h ? b : h, -1);
    pend_apply(v, add_from, l, 1);
    m->sync_head = h;
    m->sync_len = l;
    return 0;
}

int router__view_sync(struct kvsim_router *r, uint32_t e)
{
    return r->ve && r->pools && r->ranks == 1 ? pend_update(&r->ve[e]) : 0;
}

int kvsim_router_view_sync_owner(struct kvsim_router *r, uint32_t engine)
{
    return router__view_sync(r, engine);
}

/* Whether engine e's cache holds h as the delayed router sees it: its blocks with h now, less
 * the net blocks it has not heard of. */
bool router__pool_seen(const struct kvsim_router *r, uint32_t e, kvpool_hash h)
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
uint64_t router__load_blocks(const struct kvsim_router *r,
                             const struct kvsim_engine_pub *const *pubs, uint32_t e)
{
    if (!r->ve)
        return pubs[e]->active_blocks + r->pending_blocks[e];
    uint64_t n = r->ve[e * r->ranks].own_blocks; /* a unit's: its ranks' seen loads summed */
    for (uint32_t k = 0; k < r->ranks; k++)
        n += r->ve[e * r->ranks + k].seen.active_blocks;
    return n;
}

uint64_t router__load_tokens(const struct kvsim_router *r,
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
bool router__predicted(const struct predict *p, kvpool_hash h, int64_t now)
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
void router__predict_add(struct kvsim_router *r, uint32_t e, const kvpool_hash *hashes, uint32_t n)
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

void router__book_own(struct kvsim_router *r, uint32_t unit, uint32_t blocks, uint64_t tokens)
{
    struct view_engine *v = &r->ve[unit * r->ranks];
    void *arr = v->own;
    if (fifo_room(&arr, sizeof *v->own, &v->own_head, &v->own_len, &v->own_cap) == 0) {
        v->own = arr;
        v->own[v->own_len++] = (struct own_route){r->now, 0, blocks, tokens};
        v->own_blocks += blocks;
        v->own_tokens += tokens;
    }
}

void router__view_free(struct kvsim_router *r)
{
    for (uint32_t e = 0; r->ve && e < r->n * r->ranks; e++) {
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
}
