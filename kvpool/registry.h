/*
 * registry.h - the shared block registry (registry.c): which block hashes are present in which
 * tier, as of which virtual time.
 *
 * What it is. A set of entries (hash, tier, writer, [registered_at, removed_at)) in one liburcu
 * lock-free hash table (cds_lfht), read without locks under RCU (QSBR flavour). An entry is
 * present at virtual time t iff registered_at <= t < removed_at. Each writer (typically one per
 * engine) registers and removes entries in batches stamped with its virtual time, then
 * publishes a watermark: a promise that everything it did at virtual times <= the watermark is
 * visible. A reader that asks about a time t <= the watermarks it acquire-loaded therefore gets
 * an answer that depends only on what the writers did, never on thread timing: removal is
 * logical (removed_at is stamped, the entry stays), and an entry is physically deleted only once
 * every reader has promised never to ask about a time before its removal (the reclaim horizon).
 *
 * Threads. Every thread that reads the registry or writes through a writer must be registered
 * with kvpool_registry_thread_register() and be online when it calls a function marked
 * "Context: ... online". QSBR rules: an online thread must call kvpool_registry_thread_quiescent()
 * regularly (once per scheduler step, once per batch of reads) and must go offline
 * (kvpool_registry_thread_offline) before anything that blocks (join, condition wait, sleep,
 * I/O) and come back online afterwards; otherwise reclamation stalls. Callers never call liburcu
 * directly: the wrappers also carry ThreadSanitizer's view of the grace periods.
 *
 * Reclamation. Physically deleted entries are freed by call_rcu after a grace period, in one
 * callback per kvpool_registry_reclaim() pass. kvpool_registry_barrier() waits for those frees.
 *
 * Errors are negative errno values.
 */
#ifndef KVSIM_REGISTRY_H
#define KVSIM_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvsim_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A chained block hash (as kvpool.h's). */
typedef uint64_t kvpool_hash;

/* Storage tiers of the offload hierarchy. */
enum kvpool_tier {
    KVPOOL_TIER_G1 = 0, /* GPU (the engine's block pool) */
    KVPOOL_TIER_G2,     /* host memory */
    KVPOOL_TIER_G3,     /* disk */
};
#define KVPOOL_NUM_TIERS 3
/* "G1", "G2", "G3", or "?" for anything else. */
KVSIM_EXTERN const char *kvpool_tier_name(enum kvpool_tier tier);

/* Removal time of an entry that is still registered ("never removed"), and the watermark of a
 * writer that has closed (published everything it will ever do). */
#define KVPOOL_VTIME_NEVER INT64_MAX

struct kvpool_registry;
struct kvpool_registry_writer;

/* ---- lifetime ------------------------------------------------------------------------------ */

/*
 * kvpool_registry_create - an empty registry for at most max_writers writers, with its hash
 * table sized for about expected_entries entries (it grows and shrinks automatically).
 * Context: any thread; registration not needed.
 * Returns: 0 and sets *out; -EINVAL if max_writers is 0 or out is NULL; -ENOMEM.
 */
KVSIM_EXTERN int kvpool_registry_create(uint32_t max_writers, size_t expected_entries,
                                        struct kvpool_registry **out);

/*
 * kvpool_registry_destroy - free the registry, its writers and every entry, live or removed.
 * Accepts NULL.
 * Context: a registered thread, online; no other thread may use the registry or its writers
 * any more (join readers and writers first). It goes offline inside while it waits (for lfht's
 * resize worker, which itself waits for a grace period, and for pending frees) and is online
 * again on return. Cost: O(entries) plus two grace periods.
 */
KVSIM_EXTERN void kvpool_registry_destroy(struct kvpool_registry *reg);

/* ---- threads (QSBR) ------------------------------------------------------------------------ */

/*
 * Thread registration and quiescent states. Context: the calling thread itself.
 *  - register: before the thread's first registry call; the thread is then online.
 *  - unregister: before the thread exits (online or offline).
 *  - quiescent: the thread holds no pointer into the registry; call it regularly while online.
 *  - offline: before blocking; registry calls are not allowed until online.
 *  - online: after blocking.
 * Ordering: quiescent, offline and unregister announce that every registry read this thread
 * made before them is finished (a grace period waits for that announcement before any entry
 * those reads may have seen is freed).
 */
KVSIM_EXTERN void kvpool_registry_thread_register(void);
KVSIM_EXTERN void kvpool_registry_thread_unregister(void);
KVSIM_EXTERN void kvpool_registry_thread_quiescent(void);
KVSIM_EXTERN void kvpool_registry_thread_offline(void);
KVSIM_EXTERN void kvpool_registry_thread_online(void);

/*
 * kvpool_registry_barrier - wait until every entry handed to reclamation so far (by any
 * thread) has been freed.
 * Context: a registered thread, online (it goes offline inside and comes back online).
 */
KVSIM_EXTERN void kvpool_registry_barrier(void);

/* ---- writers ------------------------------------------------------------------------------- */

/*
 * kvpool_registry_writer_create - add a writer whose watermark starts at vtime: it promises that
 * it did nothing at or before vtime, so its first batch must be later than vtime. The writer
 * lives until the registry is destroyed. A writer that is done publishes KVPOOL_VTIME_NEVER:
 * it then no longer holds kvpool_registry_min_watermark_acquire() back (its live entries stay
 * live; remove them first if they should go).
 * Context: any thread; registration not needed. Create writers before readers start relying on
 * kvpool_registry_min_watermark_acquire(): a new writer lowers the minimum to its vtime.
 * Returns: 0 and sets *out; -EINVAL (NULL argument, vtime KVPOOL_VTIME_NEVER); -ENOSPC when
 * max_writers writers exist already.
 * Ordering: the writer's initial watermark is visible (release) to
 * kvpool_registry_min_watermark_acquire() before this returns.
 */
KVSIM_EXTERN int kvpool_registry_writer_create(struct kvpool_registry *reg, int64_t vtime,
                                               struct kvpool_registry_writer **out);

/*
 * Every call through a writer passes a virtual time, and those times never decrease (each call's
 * vtime >= the previous call's). Batches must also be later than the writer's last published
 * watermark, and earlier than KVPOOL_VTIME_NEVER. Any violation returns -EINVAL and changes
 * nothing.
 */

/*
 * kvpool_registry_register_batch - register hashes[0..n) in tier at vtime: one entry (this
 * writer, tier, registered_at = vtime, removed_at = never) per hash that this writer does not
 * already have live in this tier (such hashes, and repeats inside the batch, are skipped).
 * The same hash may be live at once for other writers and other tiers: those are separate
 * entries.
 * Context: the writer's owning thread (one thread at a time per writer), registered, online.
 * Returns: the number of entries added (>= 0); -EINVAL (bad tier, vtime, or NULL hashes with
 * n > 0); -ENOMEM (nothing added).
 * Ordering: the entries are visible to readers that acquire-load a watermark >= vtime of this
 * writer, i.e. after kvpool_registry_publish(writer, >= vtime). Readers asking about earlier
 * virtual times never see them; later times before publication may or may not see them yet.
 */
KVSIM_EXTERN int64_t kvpool_registry_register_batch(struct kvpool_registry_writer *w,
                                                    enum kvpool_tier tier,
                                                    const kvpool_hash *hashes, size_t n,
                                                    int64_t vtime);

/*
 * kvpool_registry_remove_batch - stamp removed_at = vtime on this writer's live entry for each
 * of hashes[0..n) in tier (logical deletion: one atomic store; the entry still answers queries
 * about earlier times until it is reclaimed). Hashes without such an entry are skipped.
 * Context: the writer's owning thread, registered, online.
 * Returns: the number of entries stamped (>= 0); -EINVAL as for register_batch.
 * Ordering: the stamps are visible to readers that acquire-load a watermark >= vtime of this
 * writer. An entry registered and removed at the same vtime is never present.
 */
KVSIM_EXTERN int64_t kvpool_registry_remove_batch(struct kvpool_registry_writer *w,
                                                  enum kvpool_tier tier, const kvpool_hash *hashes,
                                                  size_t n, int64_t vtime);

/*
 * kvpool_registry_publish - publish the watermark vtime: this writer did everything it will
 * ever do at virtual times <= vtime.
 * Context: the writer's owning thread (registration not needed: it touches no RCU data).
 * Returns: 0; -EINVAL if vtime is below the previous call's vtime (the watermark is monotonic).
 * Ordering: a release store, after every batch. Every store of every batch this writer
 * registered or removed at <= vtime is visible to any thread that acquire-loads a watermark
 * >= vtime (kvpool_registry_watermark_acquire or kvpool_registry_min_watermark_acquire).
 */
KVSIM_EXTERN int kvpool_registry_publish(struct kvpool_registry_writer *w, int64_t vtime);

/*
 * kvpool_registry_watermark_acquire - the last watermark w published (its creation vtime if
 * none).
 * Context: any thread.
 * Ordering: an acquire load, pairing with kvpool_registry_publish: afterwards, queries about
 * any time t <= the returned value see exactly what w did at times <= t.
 */
KVSIM_EXTERN int64_t kvpool_registry_watermark_acquire(const struct kvpool_registry_writer *w);

/*
 * kvpool_registry_min_watermark_acquire - the minimum of every writer's watermark
 * (KVPOOL_VTIME_NEVER with no writers): a reader may ask about any time <= it and the answer
 * depends on no thread's timing. Monotonic once every writer has been created.
 * Context: any thread. O(writers).
 * Ordering: acquire loads of each watermark (as kvpool_registry_watermark_acquire).
 */
KVSIM_EXTERN int64_t kvpool_registry_min_watermark_acquire(const struct kvpool_registry *reg);

/* ---- readers ------------------------------------------------------------------------------- */

/*
 * kvpool_registry_contains_rcu - true iff some entry for (hash, tier), of any writer, was
 * present at virtual time vtime (registered_at <= vtime < removed_at). False for a bad tier.
 * Deterministic when vtime <= the watermark this thread acquire-loaded of every writer that may
 * register hash in tier (e.g. vtime <= kvpool_registry_min_watermark_acquire()), and vtime >=
 * the horizon of every reclaim so far.
 * Context: a registered thread, online. Lock-free; allocates nothing; no stores to shared
 * memory. Cost: one hash-table lookup plus the entries for the same (hash, tier).
 * Ordering: reads entries published by lfht's insertion barrier; see publish for what is
 * guaranteed visible.
 */
KVSIM_EXTERN bool kvpool_registry_contains_rcu(const struct kvpool_registry *reg,
                                               enum kvpool_tier tier, kvpool_hash hash,
                                               int64_t vtime);

/*
 * kvpool_registry_presence_rcu - present[i] = kvpool_registry_contains_rcu(reg, tier,
 * hashes[i], vtime) for i in [0, n).
 * Context: as contains_rcu.
 * Returns: the number of hashes present; -EINVAL (bad tier, NULL arrays with n > 0; present
 * untouched).
 */
KVSIM_EXTERN int64_t kvpool_registry_presence_rcu(const struct kvpool_registry *reg,
                                                  enum kvpool_tier tier, const kvpool_hash *hashes,
                                                  size_t n, int64_t vtime, bool *present);

/*
 * kvpool_registry_size_rcu - entries physically in the table: live ones plus removed ones not
 * reclaimed yet. A snapshot under concurrent updates. O(entries): for tests and statistics.
 * Context: a registered thread, online.
 */
KVSIM_EXTERN size_t kvpool_registry_size_rcu(const struct kvpool_registry *reg);

/* ---- reclamation --------------------------------------------------------------------------- */

/*
 * kvpool_registry_reclaim - physically delete every entry removed at a virtual time <= horizon
 * and free it after a grace period. The caller passes the minimum virtual time any reader can
 * still ask about: afterwards, queries about times < horizon may miss entries that were present
 * then (queries about times >= horizon are unaffected, since those entries are absent there).
 * Cost O(entries reclaimed + writers): each writer keeps its removals in removal order.
 * Context: a registered thread, online. Any thread, concurrently with readers and writers.
 * Returns: the number of entries deleted (>= 0); -EBUSY (nothing done) if another thread is
 * reclaiming right now; -ENOMEM (nothing done) if the pass's free-batch record (one small
 * allocation per pass that deletes anything) cannot be allocated.
 * Ordering: an entry is freed only after every registered thread passed a quiescent state (or
 * went offline) after its deletion.
 */
KVSIM_EXTERN int64_t kvpool_registry_reclaim(struct kvpool_registry *reg, int64_t horizon);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_REGISTRY_H */
