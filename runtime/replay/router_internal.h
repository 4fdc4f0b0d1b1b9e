/*
 * router_internal.h - the router's state, shared by router.c (the policies, the indexer) and
 * router_view.c (what it sees). Private to runtime/replay/.
 */
#ifndef KVSIM_ROUTER_INTERNAL_H
#define KVSIM_ROUTER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/replay/router.h"

/* One engine's shard of the KV indexer: block hash -> number of cached blocks with it. */
/* Cache-line sized and aligned (router__calloc_lines): each engine's shard and view are written
 * by its own thread in the phases, and neighbours on two cores must not share a line. */
#define ROUTER_LINE 64
struct kv_shard {
    _Alignas(ROUTER_LINE) kvpool_hash *keys;
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
/* The net blocks (stored minus removed) by hash of the events staged and not released yet, as
 * of the last sync (router__view_sync: before the router looks the engine up, and before staging
 * drops released events): it counts the staged events [sync_head, sync_len) of then; a sync
 * takes out those released since and adds those staged since and still unreleased, so an event
 * staged and released between two looks is never counted. Slots taken out stay, at 0, until
 * `used` reaches half the table and it is rebuilt; a slot is live when its generation is the
 * map's. */
struct pend_map {
    kvpool_hash *keys;
    int32_t *delta;
    uint32_t *gen;
    uint32_t cur;
    uint64_t mask;
    uint64_t used;              /* live slots */
    size_t sync_head, sync_len; /* the staged events counted: [sync_head, sync_len) */
};
struct view_engine {
    _Alignas(ROUTER_LINE) struct staged_event *ev; /* FIFO: [ev_head, ev_len) */
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

/* Where hash h starts its probe in a table of mask + 1 slots (the shards, the unheard blocks,
 * the predictions all probe linearly from here). */
static inline uint64_t hash_home(kvpool_hash h, uint64_t mask) { return (h ^ (h >> 29)) & mask; }

/* router.c: n zeroed elements of size sz (a multiple of ROUTER_LINE), line-aligned; free()
 * releases them. NULL when out of memory. */
void *router__calloc_lines(size_t n, size_t sz);

/* router.c: whether engine e's indexer shard holds h. */
bool router__shard_contains(const struct kv_shard *s, kvpool_hash h);

/* router_view.c (coordinator, at decisions): whether the delayed view over the pools sees h
 * cached on engine e; whether p predicts h cached at now; unit e's load for a decision (its
 * ranks' seen loads plus its bookings with the delayed view; the pubs plus this boundary's
 * bookings with the exact one); h predicted on engine e from now on; a delayed booking of unit;
 * the view's and the predictions' memory. */
bool router__pool_seen(const struct kvsim_router *r, uint32_t e, kvpool_hash h);
/* router_view.c: brings engine e's table of unheard blocks to its staged events (the delayed view
 * over the pools; nothing otherwise). Whoever may read e's view (its owner in a phase, the
 * coordinator at a boundary). Returns 0 or -ENOMEM. */
int router__view_sync(struct kvsim_router *r, uint32_t e);
bool router__predicted(const struct predict *p, kvpool_hash h, int64_t now);
uint64_t router__load_blocks(const struct kvsim_router *r,
                             const struct kvsim_engine_pub *const *pubs, uint32_t e);
uint64_t router__load_tokens(const struct kvsim_router *r,
                             const struct kvsim_engine_pub *const *pubs, uint32_t e);
void router__predict_add(struct kvsim_router *r, uint32_t e, const kvpool_hash *hashes, uint32_t n);
void router__book_own(struct kvsim_router *r, uint32_t unit, uint32_t blocks, uint64_t tokens);
void router__view_free(struct kvsim_router *r);

#endif /* KVSIM_ROUTER_INTERNAL_H */
