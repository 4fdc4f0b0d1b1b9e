/*
 * router.h - the routers: placing arrivals on engines (replay/router.c), for the replay's
 * coordinator and for tests. The policies round-robin, least-loaded, kv (KV-overlap aware) and
 * dp-lb (vLLM's data-parallel load balancer).
 *
 * Threads: see the section below; a router belongs to one replay.
 */
#ifndef KVSIM_ROUTER_H
#define KVSIM_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "kvsim_export.h"

#include "kvpool/kvpool.h"
#include "runtime/engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the router ---------------------------------------------------------------------------- */

/*
 * The router: placing arrivals on engines (replay/router.c).
 *
 * Threads: the router decides only on the coordinator, at epoch boundaries, while every worker
 * waits at the barrier; it reads the engines' published load and the indexer shards, which
 * hold exactly the KV events each engine emitted up to the boundary, so its decisions never
 * depend on thread timing.
 */

enum kvsim_router_policy {
    KVSIM_ROUTER_ROUND_ROBIN = 0,
    KVSIM_ROUTER_LEAST_LOADED, /* fewest active KV blocks, then fewest queued tokens, then id */
    KVSIM_ROUTER_KV, /* cost = overlap_weight * blocks to prefill + active blocks; lowest, id */
    /* vLLM's data-parallel load balancer (DPLBAsyncMPClient, docs/fidelity/data-parallel.md):
     * the lowest max(in flight, waiting + running) plus a KV-usage term, from counts the DP
     * coordinator publishes every 100 ms; ties rotate. Needs kvsim_router_boundary. */
    KVSIM_ROUTER_DP_LB,
};
/* "round-robin", "least-loaded", "kv", "dp-lb"; parse returns the policy or -EINVAL. */
KVSIM_EXTERN const char *kvsim_router_policy_name(enum kvsim_router_policy p);
KVSIM_EXTERN int kvsim_router_policy_parse(const char *name);

struct kvsim_router;

/* Returns 0 and *out, -EINVAL (no engines), -ENOMEM. */
KVSIM_EXTERN int kvsim_router_create(enum kvsim_router_policy policy, uint32_t num_engines,
                                     double overlap_weight, struct kvsim_router **out);
KVSIM_EXTERN void kvsim_router_destroy(struct kvsim_router *r);
KVSIM_EXTERN enum kvsim_router_policy kvsim_router_policy(const struct kvsim_router *r);

/*
 * kvsim_router_use_pools - answer kv-policy overlap queries from the engines' own prefix-cache
 * maps (pools[i] of engine i) instead of the event-fed indexer. At a boundary both hold exactly
 * the blocks the engines' Stored/Removed events describe up to that boundary, so decisions are
 * identical (a test checks it); the pools need no event traffic at all. Coordinator only.
 */
KVSIM_EXTERN void kvsim_router_use_pools(struct kvsim_router *r, const struct kvpool *const *pools);
/* The same for a router whose units are groups of `group` engines (data-parallel deployments,
 * pools[u * group + k] the k-th rank of unit u): a unit's overlap is its best rank's. */
KVSIM_EXTERN void kvsim_router_use_pool_groups(struct kvsim_router *r,
                                               const struct kvpool *const *pools, uint32_t group);

/*
 * kvsim_router_apply_event_owner - feed one KV event of engine `engine` to that engine's shard
 * of the overlap indexer (kv policy). The indexer is sharded by engine so that each engine's
 * owner thread applies its own events in the parallel phase; the router reads the shards only
 * at boundaries. Context: the engine's owner thread, between boundaries. Returns 0 or -ENOMEM.
 */
KVSIM_EXTERN int kvsim_router_apply_event_owner(struct kvsim_router *r, uint32_t engine,
                                                const struct kvpool_event *ev);

/*
 * kvsim_router_route - choose an engine for a request whose prompt has the block hashes
 * hashes[0..num_hashes) and needs prompt_blocks blocks for prompt_tokens tokens. pubs[i] is engine
 * i's published load. Also records the choice (the next decision at the same boundary sees it).
 * Returns the engine.
 */
KVSIM_EXTERN uint32_t kvsim_router_route(struct kvsim_router *r,
                                         const struct kvsim_engine_pub *const *pubs,
                                         const kvpool_hash *hashes, uint32_t num_hashes,
                                         uint32_t prompt_blocks, uint64_t prompt_tokens);
/*
 * kvsim_router_max_overlap - the longest prefix of hashes[0..num_hashes) cached on any engine
 * (kv policy). When it equals num_hashes the caller may hash further blocks and ask again.
 * Coordinator only, at a boundary.
 */
KVSIM_EXTERN uint32_t kvsim_router_max_overlap(const struct kvsim_router *r,
                                               const kvpool_hash *hashes, uint32_t num_hashes);

/*
 * kvsim_router_overlap_begin, kvsim_router_extend_overlaps - the same overlaps, per request and
 * incrementally: after begin, each extend call passes the same hashes as the last one and
 * possibly more (a longer prefix of one prompt), and only the new hashes are looked up, on the
 * engines that held all the old ones. extend returns kvsim_router_max_overlap's value for its
 * arguments (and begins if nothing is begun). The next kvsim_router_route (with those hashes,
 * possibly more) reuses them and ends the request. Coordinator only, at a boundary, with no
 * cache change between the calls. begin brings the delayed view up to date first
 * (kvsim_router_view_sync_owner for every engine): it returns 0 or -ENOMEM.
 */
KVSIM_EXTERN int kvsim_router_overlap_begin(struct kvsim_router *r);
KVSIM_EXTERN uint32_t kvsim_router_extend_overlaps(struct kvsim_router *r,
                                                   const kvpool_hash *hashes, uint32_t num_hashes);

/*
 * kvsim_router_overlap_on - engine `engine`'s overlap with a prompt: how many of
 * hashes[0..num_hashes) it caches from the first one on (kv policy). Reads that engine's shard
 * or pool only, so threads may ask about different engines, or the same one, at once.
 * Context: any thread, while nothing changes the engine's cache (the engine's own thread after
 * advancing it, or anyone between the barriers that bracket a boundary).
 */
KVSIM_EXTERN uint32_t kvsim_router_overlap_on(const struct kvsim_router *r, uint32_t engine,
                                              const kvpool_hash *hashes, uint32_t num_hashes);
/*
 * kvsim_router_route_overlaps - kvsim_router_route (kv policy) for a prompt whose overlap with
 * engine e, over its first num_hashes block hashes, is overlaps[e * stride] (computed with
 * kvsim_router_overlap_on as of this boundary). The same choice as kvsim_router_route with those
 * hashes, and recorded the same way. Coordinator only, at a boundary. Returns the engine.
 */
KVSIM_EXTERN uint32_t kvsim_router_route_overlaps(struct kvsim_router *r,
                                                  const struct kvsim_engine_pub *const *pubs,
                                                  const uint32_t *overlaps, size_t stride,
                                                  uint32_t num_hashes, uint32_t prompt_blocks,
                                                  uint64_t prompt_tokens);

/* Forgets the per-boundary bookkeeping of kvsim_router_route (call once per boundary). */
KVSIM_EXTERN void kvsim_router_new_boundary(struct kvsim_router *r);
/*
 * kvsim_router_boundary - kvsim_router_new_boundary, and for dp-lb the DP coordinator's publish
 * tick: when a tick (a multiple of 100 ms of virtual time) lies in (last tick handled, now], the
 * coordinator publishes the engines' counts and KV usage as pubs show them if the counts changed
 * since its last publish or 5 s passed (the front end then drops its own increments). The caller
 * must put a boundary on every tick while an engine has unfinished work or was just given some
 * (kvsim_router_next_tick), so that pubs show the engines at the tick. Coordinator only, before
 * routing the boundary's arrivals.
 */
KVSIM_EXTERN void kvsim_router_boundary(struct kvsim_router *r,
                                        const struct kvsim_engine_pub *const *pubs, int64_t now);
/* dp-lb: the first publish tick after now; INT64_MAX for the other policies. */
KVSIM_EXTERN int64_t kvsim_router_next_tick(const struct kvsim_router *r, int64_t now);
/* ---- what the router sees (docs/replay.md, "What the router sees") ------------------------- */

/*
 * The view: exact (every engine's cache and load at the boundary, the router's own decisions of
 * the boundary on top: kvsim's model before issue 61) or delayed: what an engine did reaches the
 * router at the end of the step that did it plus delay_ns (vLLM publishes one KV-event batch per
 * step, after the forward pass; transport adds milliseconds), while the router's own decisions
 * count at once and until the engine's load it hears of was taken after them.
 */
enum kvsim_router_view {
    KVSIM_ROUTER_VIEW_EXACT = 0,
    KVSIM_ROUTER_VIEW_DELAYED,
};
/* "exact", "delayed". */
KVSIM_EXTERN const char *kvsim_router_view_name(enum kvsim_router_view v);
/*
 * kvsim_router_set_view - the router's view (before any event or decision; exact by default)
 * and, for the kv policy, predict-on-route: a routed prompt's blocks count as cached on the
 * chosen engine for predict_ttl_ns (0: off), as llm-d's speculative indexing and Dynamo's
 * predict-on-route do; ranks: the engines of each unit it picks (1, or a data-parallel
 * deployment's ranks: kvsim_router_book_rank). The delayed view's overlaps are the pools'
 * (kvsim_router_use_pools, one rank a unit) less the net blocks of the events staged and not
 * released yet, or else the event indexer's, fed by the released events. Returns 0 or -EINVAL (a
 * delay or TTL below 0, no ranks, a view set already). Coordinator only.
 */
KVSIM_EXTERN int kvsim_router_set_view(struct kvsim_router *r, enum kvsim_router_view view,
                                       int64_t delay_ns, int64_t predict_ttl_ns, uint32_t ranks);
/* The delayed view over data-parallel deployments (set_view's ranks > 1: each unit the router
 * picks is `ranks` engines): the engine numbers of stage and release are rank-level (unit x
 * ranks + rank), a unit's overlap is its best rank's, its load the sum of its ranks' seen loads
 * plus its bookings; book_rank says which rank the last booking of unit went to (vLLM's DP load
 * balancer decides that after the router), so that the booking is dropped once that rank's load
 * seen was taken after it. Coordinator only. */
KVSIM_EXTERN void kvsim_router_book_rank(struct kvsim_router *r, uint32_t unit, uint32_t rank);
/*
 * The delayed view's inputs, from engine `engine`'s thread (the owner): a KV event of the step
 * that ended at step_end, and the engine's load then. They are staged, unseen, until
 * kvsim_router_release_owner reaches step_end + delay. Returns 0 or -ENOMEM (stage_event). In
 * the parallel phase, each engine's owner touches only its own staging and shard.
 */
KVSIM_EXTERN int kvsim_router_stage_event_owner(struct kvsim_router *r, uint32_t engine,
                                                int64_t step_end, const struct kvpool_event *ev);
/* evs[0..n), all of the step that ended at step_end, in order, each event's hashes right after
 * the previous one's (as kvpool_events_drain_batch hands them): as n stage_event calls. */
KVSIM_EXTERN int kvsim_router_stage_events_owner(struct kvsim_router *r, uint32_t engine,
                                                 int64_t step_end, const struct kvpool_event *evs,
                                                 size_t n);
KVSIM_EXTERN void kvsim_router_stage_load_owner(struct kvsim_router *r, uint32_t engine,
                                                int64_t step_end,
                                                const struct kvsim_engine_pub *load);
/* What engine `engine` did that the router sees by `now` (staged at step ends + delay <= now):
 * its events applied to its shard, its load the latest such. Owner, once the engine is at now.
 * Returns 0 or an indexer error. */
KVSIM_EXTERN int kvsim_router_release_owner(struct kvsim_router *r, uint32_t engine, int64_t now);
/* Brings what the delayed view over the pools has not heard of from engine `engine` up to date
 * (kvsim_router_overlap_begin does it for every engine): before kvsim_router_overlap_on reads
 * it. Owner, once the engine is at the instant the view is at (or the coordinator at a
 * boundary). Returns 0 or -ENOMEM. */
KVSIM_EXTERN int kvsim_router_view_sync_owner(struct kvsim_router *r, uint32_t engine);
/* The delayed view's instant for the decisions that follow (kvsim_router_boundary sets it at a
 * boundary; the disaggregated coordinator at each pin it routes). Coordinator only. */
KVSIM_EXTERN void kvsim_router_view_at(struct kvsim_router *r, int64_t now);
/* Whether the kv policy predicts on route (then the whole prompt should be hashed). */
KVSIM_EXTERN bool kvsim_router_predicts(const struct kvsim_router *r);

/* Block hashes the indexer tracks, summed over the engines' shards (a hash cached on two engines
 * counts twice). */
KVSIM_EXTERN uint64_t kvsim_router_indexed_blocks(const struct kvsim_router *r);

#ifdef __cplusplus
}
#endif

#endif /* KVSIM_ROUTER_H */
