/*
 * router.c - round-robin, least-loaded, KV-aware routing and vLLM's DP load balancer (router.h).
 *
 * The KV indexer maps a block hash to a per-engine count of cached blocks carrying it (an engine
 * can hold duplicates), fed by Stored/Removed events. It is an open-addressing table of entry
 * indices with backward-shift deletion; the counts live in one flat array, num_engines per
 * entry.
 *
 * What the router sees, with the delayed view, and predict-on-route: router_view.c.
 */
#include "runtime/replay/router_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    r->shards = router__calloc_lines(num_engines, sizeof *r->shards);
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
    router__view_free(r);
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

void *router__calloc_lines(size_t n, size_t sz)
{
    if (n == 0 || sz > SIZE_MAX / n)
        return NULL;
    void *p = aligned_alloc(ROUTER_LINE, n * sz);
    if (p)
        memset(p, 0, n * sz);
    return p;
}

void kvsim_router_new_boundary(struct kvsim_router *r)
{
    memset(r->pending_blocks, 0, r->n * sizeof *r->pending_blocks);
    memset(r->pending_tokens, 0, r->n * sizeof *r->pending_tokens);
    memset(r->pending_reqs, 0, r->n * sizeof *r->pending_reqs);
    r->ov_open = false; /* a request's overlaps never outlive its boundary */
}

/* ---- indexer shards (open addressing, linear probing, backward-shift deletion) --------------- */

static uint64_t home_of(const struct kv_shard *s, kvpool_hash h) { return hash_home(h, s->mask); }

/* Slot holding h, or the empty slot where it would go. */
static uint64_t shard_find(const struct kv_shard *s, kvpool_hash h)
{
    uint64_t i = home_of(s, h);
    while (s->counts[i] && s->keys[i] != h)
        i = (i + 1) & s->mask;
    return i;
}

bool router__shard_contains(const struct kv_shard *s, kvpool_hash h)
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

/* Longest prefix of hashes cached on engine e. */
uint32_t kvsim_router_overlap_on(const struct kvsim_router *r, uint32_t e,
                                 const kvpool_hash *hashes, uint32_t n)
{
    uint32_t i = 0;
    if (r->ve && r->pools && r->ranks == 1) { /* the delayed view over the pools */
        const struct predict *p = r->pred ? &r->pred[e] : NULL;
        while (i < n && (router__pool_seen(r, e, hashes[i]) ||
                         (p && router__predicted(p, hashes[i], r->now))))
            i++;
        return i;
    }
    if (r->ve && r->ranks > 1) { /* a deployment's delayed view: its best rank's prefix */
        uint32_t best = 0;
        const struct predict *p = r->pred ? &r->pred[e] : NULL;
        for (uint32_t k = 0; k < r->ranks && best < n; k++) {
            const struct kv_shard *s = &r->shards[e * r->ranks + k];
            for (i = 0; i < n && (router__shard_contains(s, hashes[i]) ||
                                  (p && router__predicted(p, hashes[i], r->now)));)
                i++;
            best = i > best ? i : best;
        }
        return best;
    }
    if (r->pred) { /* what the engine caches, or the router predicts it caches */
        const struct predict *p = &r->pred[e];
        if (r->pools)
            while (i < n && (kvpool_cache_find(r->pools[e], hashes[i]) >= 0 ||
                             router__predicted(p, hashes[i], r->now)))
                i++;
        else
            while (i < n && (router__shard_contains(&r->shards[e], hashes[i]) ||
                             router__predicted(p, hashes[i], r->now)))
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
    while (i < n && router__shard_contains(&r->shards[e], hashes[i]))
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

int kvsim_router_overlap_begin(struct kvsim_router *r)
{
    memset(r->ov, 0, r->n * sizeof *r->ov);
    r->ov_len = 0;
    r->ov_open = true;
    for (uint32_t e = 0; r->ve && e < r->n; e++) {
        int rc = router__view_sync(r, e);
        if (rc)
            return rc;
    }
    return 0;
}

/* kvsim_router_overlap_begin where the API has no way to fail: out of memory for the delayed
 * view's table, continuing would route with a view that is silently wrong. */
static void overlap_begin_or_die(struct kvsim_router *r)
{
    if (kvsim_router_overlap_begin(r) != 0) {
        fprintf(stderr, "kvsim: out of memory for what the router has not heard of yet\n");
        abort();
    }
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
        overlap_begin_or_die(r);
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
        double cost = r->w * (double)(prompt_blocks - o) + (double)router__load_blocks(r, pubs, e);
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
    if (r->ve) /* booked until the load the router sees was taken after now */
        router__book_own(r, best, prompt_blocks, prompt_tokens);
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
            uint64_t blocks = router__load_blocks(r, pubs, e);
            uint64_t tokens = router__load_tokens(r, pubs, e);
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
            overlap_begin_or_die(r);
        extend_overlaps(r, hashes, num_hashes);
        best = kv_choice(r, pubs, r->ov, 1, num_hashes, prompt_blocks);
        if (r->pred)
            router__predict_add(r, best, hashes, num_hashes);
        break;
    }
    return book(r, best, prompt_blocks, prompt_tokens);
}
