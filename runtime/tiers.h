/*
 * tiers.h - the offload policy of one engine: G2 (host) and G3 (disk) tiers behind its G1 pool,
 * driven through the offload pipeline (private to runtime/; docs/offload.md).
 *
 * What it does (KVBM-style, reference dynamo-mocker.md §5):
 *  - write-through: every full block entering G1's prefix cache (the pool's store hook) that G2
 *    does not hold and that is not already on its way is copied G1->G2 in batches; each source
 *    G1 block carries a transfer hold (kvpool_hold_block) until its copy ends, so it cannot be
 *    reused before;
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
 * Threads: a tiers object belongs to its engine's owner thread; nothing here is thread-safe.
 * Errors are negative errno values.
 */
#ifndef KVSIM_TIERS_H
#define KVSIM_TIERS_H

#include <stdbool.h>
#include <stdint.h>

#include "offload/offload.h"
#include "sched/sched.h"

struct kvsim_tiers_config {
    uint32_t g2_blocks;         /* G2 capacity in blocks (>= 1) */
    uint32_t g3_blocks;         /* G3 capacity in blocks; 0 = no G3 */
    bool g3_write_through;      /* copy every block G2 receives on to G3 (else only evictions) */
    struct offload_config pipe; /* lanes, bandwidths, block bytes, failure injection; the
                                 * work/complete callbacks are set by kvsim_tiers_create */
    struct offload_pool *pool;  /* executor: NULL = inline, else this thread pool */
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
/* Releases every hold and pin (shutting the pipeline down), then frees. Accepts NULL. */
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
    uint64_t onboard_wait_ns; /* sum over loads of (end - start) virtual ns */
    uint32_t g2_size, g3_size;
};
void kvsim_tiers_stats(const struct kvsim_tiers *t, struct kvsim_tiers_stats *out);

/*
 * kvsim_tiers_check - the transfer bijection and ownership of the offload side: every G1 hold
 * belongs to exactly one block of an undrained write-through batch; every block sent was
 * received or failed exactly once (lane counters); pins match pending loads. Returns 0, or
 * -EUCLEAN with a one-line description in msg.
 */
int kvsim_tiers_check(const struct kvsim_tiers *t, char *msg, size_t len);

#endif /* KVSIM_TIERS_H */
