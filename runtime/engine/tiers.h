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

#include "runtime/engine/engine.h"

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
 * to the scheduler (sched_load_finished). Returns the number of batches drained, -EOVERFLOW (a
 * transfer would end past the int64 clock: kvsim_tiers_link_past_the_clock names its link) or
 * another negative errno (the pipeline's).
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
/* The name of the link ("G1->G2", ...) whose next transfer would end past the int64 clock, or
 * NULL. The engine's thread. */
const char *kvsim_tiers_link_past_the_clock(const struct kvsim_tiers *t);
/* Transfers enqueued and not yet drained. */
uint32_t kvsim_tiers_pending(const struct kvsim_tiers *t);

/* The tiers' statistics (struct kvsim_tiers_stats: engine.h). */
void kvsim_tiers_stats(const struct kvsim_tiers *t, struct kvsim_tiers_stats *out);

/*
 * kvsim_tiers_check - the transfer bijection and ownership of the offload side: every G1 hold
 * belongs to exactly one block of an undrained write-through batch; every block sent was
 * received or failed exactly once (lane counters); pins match pending loads. Returns 0, or
 * -EUCLEAN with a one-line description in msg.
 */
int kvsim_tiers_check(const struct kvsim_tiers *t, char *msg, size_t len);

#endif /* KVSIM_TIERS_H */
