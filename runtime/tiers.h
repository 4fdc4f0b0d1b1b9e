/*
 * tiers.h - the offload policy of one engine: G2 (host) and G3 (disk) tiers behind its G1 pool,
 * driven through the offload pipeline (private to runtime/; docs/offload.md).
 *
 * What it does (KVBM-style, reference dynamo-mocker.md §5):
 *  - write-through: every full block entering G1's prefix cache (the pool's store hook) that G2
 *    does not hold is copied G1->G2 in batches (a block on its way stays cached in G1, so it is
 *    not stored twice); each source G1 block carries a transfer hold (kvpool_hold_block) until
 *    its copy ends, so it cannot be reused before;
 *  - G2->G3 when G2 evicts a block (LRU), or for every block G2 receives (g3_write_through);
 *  - onboarding at admission (the scheduler's offload hooks): the blocks after a request's G1
 *    hits that G2 or G3 hold are loaded (G3->G2 staging, then G2->G1) into a destination
 *    reservation while the request waits in WAITING_FOR_REMOTE_KVS; a failed load makes the
 *    request recompute;
 *  - relief: when an allocation is blocked on held capacity, queued write-through batches are
 *    filtered against G2 again and the holds of blocks G2 now holds are released at once.
 * Completion times come from the pipeline's bandwidth model in virtual time, so results do not
 * depend on the executor (inline or pool) or on thread timing.
 *
 * G3 is per engine (an offload tier store of g3_blocks) or shared by all engines
 * (kvsim_tiers_config.g3_shared, below): then its content lives in the block registry and an
 * engine sees it as of the last epoch boundary, plus its own writes since (docs/offload.md).
 *
 * Threads: a tiers object belongs to its engine's owner thread; nothing here is thread-safe.
 * With a shared G3 that thread must be registered with the block registry
 * (kvpool_registry_thread_register) and online whenever it calls into its engine; the tiers go
 * offline themselves around the pool executor's blocking waits.
 * Errors are negative errno values.
 */
#ifndef KVSIM_TIERS_H
#define KVSIM_TIERS_H

#include <stdbool.h>
#include <stdint.h>

#include "offload/offload.h"
#include "sched/sched.h"

struct kvsim_g3_shared;

struct kvsim_tiers_config {
    uint32_t g2_blocks;         /* G2 capacity in blocks (>= 1) */
    uint32_t g3_blocks;         /* G3 capacity in blocks; 0 = no G3 (ignored with g3_shared) */
    bool g3_write_through;      /* copy every block G2 receives on to G3 (else only evictions) */
    struct offload_config pipe; /* lanes, bandwidths, block bytes, failure injection; the
                                 * work/complete callbacks are set by kvsim_tiers_create */
    struct offload_pool *pool;  /* executor: NULL = inline, else this thread pool */
    /* A G3 shared by all engines instead of a per-engine one (NULL: per engine), and this
     * engine's slot in it (< its num_engines; the engine sets it to its id). */
    struct kvsim_g3_shared *g3_shared;
    uint32_t g3_engine;
};

/* Fills cfg: G2 of 4096 blocks, no G3, offload_config_default() lanes, inline executor. */
void kvsim_tiers_config_default(struct kvsim_tiers_config *cfg);

/* Scheduler hooks; pass the tiers object as sched_config.offload_ctx. */
extern const struct sched_offload_ops kvsim_tiers_sched_ops;

struct kvsim_tiers;

/* Returns 0 and *out, -EINVAL (bad config), -ENOMEM, or the pipeline's errors. */
int kvsim_tiers_create(const struct kvsim_tiers_config *cfg, struct kvsim_tiers **out);
/* Binds the scheduler whose pool is G1 (installs the pool's store hook). Call once, right
 * after sched_create with cfg.offload = &kvsim_tiers_sched_ops and offload_ctx = t. */
void kvsim_tiers_bind(struct kvsim_tiers *t, struct sched *s);
/* Releases every hold and pin (shutting the pipeline down), then frees. Accepts NULL. With a
 * shared G3 and the pool executor it may block: call it offline (or unregistered). */
void kvsim_tiers_destroy(struct kvsim_tiers *t);

/*
 * kvsim_tiers_flush - enqueue the write-through of the blocks stored since the last call (after
 * each sched_schedule; the store hook only records them). Returns 0 or a negative errno.
 */
int kvsim_tiers_flush(struct kvsim_tiers *t);
/*
 * kvsim_tiers_advance_to - move virtual time to now and apply every transfer that ends at or
 * before it, in completion order: holds released, blocks entering G2/G3, finished loads handed
 * to the scheduler (sched_load_finished). Returns the number of batches drained or a negative
 * errno (the pipeline's).
 */
int kvsim_tiers_advance_to(struct kvsim_tiers *t, int64_t now);
/* Waits until the pipeline is stable at its current time (the end of an engine's advance). */
int kvsim_tiers_settle(struct kvsim_tiers *t);
/*
 * kvsim_tiers_publish - the end of an engine's advance to until (after kvsim_tiers_settle): with
 * a shared G3, closes the registry entries this engine registered during the advance at until
 * (the coordinator takes over their residency at the boundary) and publishes until as the
 * engine writer's watermark. Without a shared G3 it does nothing. Returns 0 or a negative errno.
 */
int kvsim_tiers_publish(struct kvsim_tiers *t, int64_t until);
/* Earliest virtual time a transfer ends, or OFFLOAD_NEVER. */
int64_t kvsim_tiers_next_deadline(const struct kvsim_tiers *t);
/* Transfers enqueued and not yet drained. */
uint32_t kvsim_tiers_pending(const struct kvsim_tiers *t);

struct kvsim_tiers_stats {
    struct offload_lane_stats lanes[OFFLOAD_NUM_LANES];
    uint64_t written_g2, written_g3; /* blocks that entered G2 / G3 by copies */
    uint64_t filtered;               /* write-through blocks skipped: already present/in flight */
    uint64_t released_by_relief;     /* holds released by presence filtering under pressure */
    uint64_t dropped;                /* write-through blocks dropped: lane window full */
    uint64_t failed_blocks;          /* blocks of failed batches */
    uint64_t g2_hit_blocks, g3_hit_blocks; /* blocks onboarded from G2 / staged from G3 */
    uint64_t loads, failed_loads;
    uint64_t onboard_wait_ns;  /* sum over loads of (end - start) virtual ns */
    uint32_t g2_size, g3_size; /* g3_size: 0 with a shared G3 (see kvsim_g3_shared_stats) */
};
void kvsim_tiers_stats(const struct kvsim_tiers *t, struct kvsim_tiers_stats *out);

/*
 * kvsim_tiers_check - the transfer bijection and ownership of the offload side: every G1 hold
 * belongs to exactly one block of an undrained write-through batch; every block sent was
 * received or failed exactly once (lane counters); pins match pending loads. Returns 0, or
 * -EUCLEAN with a one-line description in msg.
 */
int kvsim_tiers_check(const struct kvsim_tiers *t, char *msg, size_t len);

/* ---- a G3 shared by all engines ---------------------------------------------------------------
 *
 * Content. Which blocks the shared G3 holds lives in the block registry (tier KVPOOL_TIER_G3):
 * one registry writer per engine plus one for the coordinator. Capacity (an LRU of capacity
 * blocks) is enforced by the coordinator, at epoch boundaries only.
 *
 * Engine side (kvsim_tiers with cfg.g3_shared). During the epoch that started at boundary b, an
 * engine holds h in G3 iff the registry held it at virtual time b, or this engine wrote it since
 * b: other engines' writes of the current epoch are invisible until the next boundary (a
 * deterministic epoch lag, like the router's view). A G2->G3 copy completing at t registers h
 * through the engine's writer at vtime t and is logged (t, h, write); a load staging h from G3
 * logs (t, h, touch). kvsim_tiers_publish closes the engine's entries at the end of each advance
 * and publishes its watermark. A staging copy does not pin h in the shared G3 (the copy already
 * read the block): the coordinator may evict it meanwhile.
 *
 * Coordinator side (kvsim_g3_shared_boundary, every worker stopped). The engines' logs are merged
 * in (time, engine, sequence) order into the LRU: a write inserts (or, if resident, moves to the
 * MRU end), a touch moves to the MRU end, an insert into a full LRU evicts its LRU entry. Then
 * the coordinator's writer removes the evicted blocks and registers the admitted ones, both at
 * vtime b, and publishes b; the logs are cleared; removed entries are reclaimed now and then
 * (horizon b). Nothing here depends on thread timing: the result is the same for any thread
 * count and either executor.
 *
 * Threads: create and destroy on the coordinator; boundary on the coordinator while every engine
 * thread waits at the epoch barrier. The registry rules apply (kvpool.h).
 */

/*
 * kvsim_g3_shared_create - a shared G3 of capacity blocks for num_engines engines, whose virtual
 * time starts at vtime0 (the first boundary: nothing is written at or before it).
 * Context: a registered thread, online (the coordinator; a failure destroys what was built).
 * Returns 0 and *out, -EINVAL (capacity or num_engines 0, capacity above
 * OFFLOAD_TIER_MAX_CAPACITY), -ENOSPC or -ENOMEM (the registry's).
 */
int kvsim_g3_shared_create(uint32_t capacity, uint32_t num_engines, int64_t vtime0,
                           struct kvsim_g3_shared **out);
/* Frees it (its registry included). Accepts NULL. Context: a registered thread, online; no
 * engine uses it any more. */
void kvsim_g3_shared_destroy(struct kvsim_g3_shared *g);
/*
 * kvsim_g3_shared_boundary - the boundary at b: merge the engines' epoch logs into the LRU,
 * remove evicted and register admitted blocks at vtime b, publish b, clear the logs, reclaim now
 * and then. A b no later than the last boundary merged changes nothing (the epoch goes on). b =
 * INT64_MAX is the end of the replay: the LRU is updated (for the statistics), the registry not.
 * Context: the coordinator, registered and online, while no engine thread runs.
 * Returns 0 or a negative errno (the registry's).
 */
int kvsim_g3_shared_boundary(struct kvsim_g3_shared *g, int64_t b);

struct kvsim_g3_shared_stats {
    uint32_t capacity, resident; /* blocks */
    uint64_t inserts;            /* blocks admitted */
    uint64_t evictions;          /* blocks evicted (LRU) */
    uint64_t rewrites;           /* writes of a block already resident (moved to MRU) */
    uint64_t touches;            /* G3 hits used by loads (moved to MRU when still resident) */
};
/* Context: the coordinator at a boundary (or after the replay). */
void kvsim_g3_shared_stats(const struct kvsim_g3_shared *g, struct kvsim_g3_shared_stats *out);

#endif /* KVSIM_TIERS_H */
