/*
 * offload.h - the KV offload pipeline: lanes G1->G2->G3 and back, permits, settlement tokens,
 * successor handoff, the bandwidth model, and two executors (inline and a thread pool).
 *
 * What it owns. A pipeline has four lanes (G1->G2, G2->G3, G3->G2, G2->G1). A lane is a FIFO
 * queue of batches (up to max_blocks block ids and an owner cookie each) with N permits: at most
 * N batches of the lane are in flight. When a batch drains (completes or fails) its permit passes
 * directly to the next queued batch, which starts at that same virtual instant; a permit is never
 * released and re-raced. Each lane is one directional link whose transfers share its bandwidth
 * by processor sharing (offload_bw_*), so a batch's completion time is a function of virtual time
 * only. Every enqueue returns a settlement token; offload_settle() returns once that batch has
 * drained and the pipeline is stable (nothing starting or settling; every lane's queue is empty
 * or all its permits are in flight), so the owner never runs ahead of effects not yet published.
 *
 * Threads. A pipeline belongs to one thread, its owner (an engine's worker thread; ownership
 * may pass to another thread across a happens-before edge, as the replay's epoch barrier
 * provides when its threads take engines dynamically). Every
 * function taking a pipeline is owner-only unless its name ends in _any; none of them is
 * reentrant except as stated for the completion callback. Executors decide only where a batch's
 * work runs, never what happens:
 *  - inline (pool == NULL): the work runs on the owner, when the batch starts;
 *  - pool: the owner hands the batch to a pool worker through a ring (one ck_ring per
 *    (pipeline, worker) pair each way); the worker acknowledges it ("started"), runs the work
 *    and reports the result back through the other ring. With the adaptive hand-off (the
 *    default, offload_pool_config.wake_work_ns) a sleeping worker is woken for a batch only
 *    while the pipeline's work costs more than a wake-up, and an owner that needs a batch still
 *    in a ring takes it back and runs it itself instead of waiting for a worker.
 * In both cases completions are ordered by the bandwidth model (virtual time, then lane, then
 * batch sequence number), failures are decided by a seeded hash of (seed, generation, lane,
 * sequence), and every state change, handoff and callback happens on the owner. A pool executor
 * therefore produces exactly the completions, times and failures of the inline executor; it only
 * adds waiting: when virtual time reaches a batch's completion before its work has finished, the
 * owner takes back what is still queued (adaptive hand-off), then blocks (bounded spin, then a
 * futex sleep, with a wall-clock guard) until the workers have finished the rest.
 *
 * Time. Virtual time is an int64_t count of nanoseconds that never runs backwards: the owner
 * moves it with offload_advance_to(); batches start at the pipeline's current time.
 *
 * Errors are negative errno values. The specific ones: -EXDEV (a token of another pipeline),
 * -ESTALE (a token of an earlier generation, i.e. before offload_reset), -ESHUTDOWN (the
 * pipeline or its pool is shut down: such a batch can never drain), -EAGAIN (from settle: the
 * batch cannot drain until virtual time advances; from enqueue: the lane's window is full),
 * -ETIMEDOUT (the wall-clock guard of a blocking wait expired: a pipeline or work bug),
 * -EDEADLK (a call that may block or drain, made from inside a completion callback).
 */
#ifndef KVSIM_OFFLOAD_H
#define KVSIM_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvsim_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "No deadline": the value of offload_next_deadline() and offload_bw_next_deadline() when idle. */
#define OFFLOAD_NEVER INT64_MAX

/* A block id in the source or destination tier (opaque to this module). */
typedef int32_t offload_block_id;

/* ---- bandwidth model ----------------------------------------------------------------------- */

/*
 * One directional link shared by processor sharing: N active transfers each progress at B/N
 * bytes per second; when one finishes the others speed up. Integer arithmetic throughout (served
 * bytes plus an exact remainder), so a transfer's completion time depends only on the start
 * times and sizes of the transfers, never on how often offload_bw_advance_to() is called. A
 * transfer completes at the first nanosecond at which it has been served all its bytes;
 * completions at the same nanosecond are ordered by transfer id. A bandwidth <= 0 is infinite:
 * every transfer completes at its start time, as does a 0-byte transfer.
 *
 * Context: a link belongs to one thread (no function here is thread-safe).
 */
struct offload_bw;

struct offload_bw_completion {
    uint64_t id;  /* the id given to offload_bw_start */
    int64_t time; /* virtual ns at which the transfer completed */
};

/* Bytes of one KV block: kv_bytes_per_token * block_size, or 0 if that overflows uint64_t. */
KVSIM_EXTERN uint64_t offload_block_bytes(uint64_t kv_bytes_per_token, uint32_t block_size);

/*
 * offload_bw_create - an idle link of bytes_per_sec bytes per second (<= 0: infinite) at time 0.
 * Returns: 0 and sets *out; -EINVAL (out NULL); -ENOMEM.
 */
KVSIM_EXTERN int offload_bw_create(int64_t bytes_per_sec, struct offload_bw **out);
/* Frees the link. Accepts NULL. */
KVSIM_EXTERN void offload_bw_destroy(struct offload_bw *bw);
/* Preallocates room for n concurrent transfers, so that offload_bw_start() cannot fail with
 * -ENOMEM while at most n transfers are active or unreported. Returns 0 or -ENOMEM. */
KVSIM_EXTERN int offload_bw_reserve(struct offload_bw *bw, uint32_t n);

/*
 * offload_bw_start - start a transfer of bytes bytes at virtual time now; a now earlier than the
 * link's time is clamped to it (time never runs backwards). id must be unique among the
 * link's active and unreported transfers (it breaks ties between same-time completions).
 * Returns: 0; -ENOMEM (nothing started).
 */
KVSIM_EXTERN int offload_bw_start(struct offload_bw *bw, int64_t now, uint64_t bytes, uint64_t id);

/*
 * offload_bw_advance_to - move the link to virtual time now and write the transfers completed at
 * or before now, in completion order (ties by id), to out[0 .. cap). A now earlier than the
 * link's time moves nothing. If more than cap completions are due, the rest are kept for the
 * next call (their times do not change).
 * Returns: the number of completions written.
 */
KVSIM_EXTERN size_t offload_bw_advance_to(struct offload_bw *bw, int64_t now,
                                          struct offload_bw_completion *out, size_t cap);

/* The time of the next completion if no transfer starts meanwhile (the earliest unreported one
 * if some are due already), or OFFLOAD_NEVER if the link is idle. O(1). */
KVSIM_EXTERN int64_t offload_bw_next_deadline(const struct offload_bw *bw);
/* The completion time of transfer id if no transfer starts meanwhile: 0 and *deadline, or
 * -ENOENT (unknown or already reported id). O(active transfers). */
KVSIM_EXTERN int offload_bw_deadline_of(const struct offload_bw *bw, uint64_t id,
                                        int64_t *deadline);
KVSIM_EXTERN int64_t offload_bw_now(const struct offload_bw *bw); /* the link's virtual time */
KVSIM_EXTERN uint32_t
offload_bw_active(const struct offload_bw *bw); /* transfers not yet complete */
KVSIM_EXTERN int64_t offload_bw_bandwidth(const struct offload_bw *bw); /* bytes per second */
/* Drops every transfer, active or unreported; the link keeps its time. */
KVSIM_EXTERN void offload_bw_clear(struct offload_bw *bw);

/* ---- lanes, batches, tokens ---------------------------------------------------------------- */

enum offload_lane {
    OFFLOAD_LANE_G1_G2 = 0, /* offload: GPU -> host */
    OFFLOAD_LANE_G2_G3,     /* write-through: host -> disk */
    OFFLOAD_LANE_G3_G2,     /* onboarding, staging: disk -> host */
    OFFLOAD_LANE_G2_G1,     /* onboarding: host -> GPU */
};
#define OFFLOAD_NUM_LANES 4
/* "G1->G2", "G2->G3", "G3->G2", "G2->G1", or "?". */
KVSIM_EXTERN const char *offload_lane_name(enum offload_lane lane);

struct offload_lane_config {
    uint32_t permits;    /* batches in flight at once; 0 = lane unavailable (-ENODEV) */
    uint32_t max_blocks; /* blocks per batch, >= 1 */
    uint32_t capacity;   /* window of batches enqueued but not yet drained (rounded up to a
                          * power of two); enqueue beyond it returns -EAGAIN */
    int64_t bandwidth;   /* bytes per second of this directional link; <= 0 = instant */
};

/*
 * A settlement token: names one batch of one pipeline generation. Plain data, copied freely.
 */
struct offload_token {
    uint64_t pipeline;   /* offload_pipeline_id() of the issuing pipeline (never 0) */
    uint32_t generation; /* offload_generation() when the batch was enqueued */
    uint32_t lane;       /* enum offload_lane */
    uint64_t seq;        /* the batch's sequence number in its lane and generation, from 0 */
};

/* What a batch's work function is given (pointers valid for the duration of the call). */
struct offload_work {
    uint64_t pipeline;              /* issuing pipeline id */
    enum offload_lane lane;         /* the lane */
    uint32_t num_blocks;            /* entries in blocks[] */
    uint64_t seq;                   /* the batch's sequence number */
    uint64_t cookie;                /* the owner's cookie */
    uint64_t bytes;                 /* num_blocks * block_bytes */
    const offload_block_id *blocks; /* the batch's block ids */
    uint32_t worker;                /* pool worker index, or UINT32_MAX for the inline executor */
};
/*
 * The work of one batch (e.g. a simulated copy). Called once per started batch, on the owner
 * (inline, when the batch starts) or on a pool worker (not at all if the pool was shut down
 * before a worker took the batch); it must not call any offload_* function on the pipeline.
 * Returns 0 (success) or a negative errno (the batch fails with that result; a positive value
 * counts as -EIO).
 */
typedef int (*offload_work_fn)(void *arg, const struct offload_work *work);

/* A drained batch, as reported to the owner. */
struct offload_completion {
    struct offload_token token; /* the batch */
    uint64_t cookie;            /* the owner's cookie */
    uint32_t num_blocks;        /* blocks in the batch */
    uint64_t bytes;             /* num_blocks * block_bytes */
    int64_t start_time;         /* virtual ns at which it took its permit (-1: never started) */
    int64_t end_time;           /* virtual ns at which it drained */
    int result;                 /* 0; the work's error; -EIO (injected failure); -ESHUTDOWN */
};
/*
 * Reports a drained batch to the owner: called on the owner thread exactly once per batch that
 * completed or failed (not for cancelled ones), in drain order, after the batch's permit has
 * passed to its successor. It may call offload_enqueue() and offload_cancel() (and read-only
 * functions); anything that may block or drain returns -EDEADLK.
 */
typedef void (*offload_complete_fn)(void *arg, const struct offload_completion *c);

/* Points at which debug_yield hooks run (stress tests widen race windows there). */
enum offload_yield_point {
    OFFLOAD_YIELD_OWNER_SUBSCRIBED, /* owner: wake-up subscription taken, before the re-check */
    OFFLOAD_YIELD_OWNER_SLEEP,      /* owner: nothing new, about to sleep on the futex */
    OFFLOAD_YIELD_WORKER_TAKEN,     /* worker: batch dequeued, before acknowledging it */
    OFFLOAD_YIELD_WORKER_DONE,      /* worker: work returned, before reporting it */
};
typedef void (*offload_yield_fn)(void *arg, enum offload_yield_point point);

struct offload_config {
    uint64_t block_bytes; /* bytes per block (offload_block_bytes()); 0 allowed (instant) */
    struct offload_lane_config lanes[OFFLOAD_NUM_LANES];
    offload_work_fn work;         /* may be NULL: no work, the batch succeeds */
    void *work_arg;               /* first argument of work */
    offload_complete_fn complete; /* may be NULL */
    void *complete_arg;           /* first argument of complete */
    double fail_rate;             /* probability in [0, 1] that a batch fails (-EIO) */
    uint64_t seed;                /* of the failure injection */
    int64_t settle_timeout_ns;    /* wall-clock guard of every blocking wait (> 0) */
    offload_yield_fn debug_yield; /* owner-side hook (NULL in production) */
    void *debug_yield_arg;
};

/*
 * Fills cfg with the defaults: 2 MiB blocks (16 tokens x 128 KiB, Llama-3.1-8B in bf16),
 * G1<->G2 at 14 GB/s per direction with 2 permits, G2<->G3 at 7 GB/s with 1 permit (one shared
 * background link), 32 blocks per batch, a window of 256 batches per lane, no work, no
 * callback, no failures, a 1 s guard.
 */
KVSIM_EXTERN void offload_config_default(struct offload_config *cfg);

/* ---- the thread-pool executor -------------------------------------------------------------- */

struct offload_pool;

struct offload_pool_config {
    uint32_t threads;             /* worker threads, 1 .. 256 */
    uint32_t max_pipelines;       /* pipelines attached at once, 1 .. 4096 */
    uint32_t ring_size;           /* slots of each ring, a power of two; a pipeline needs
                                   * 2 * (sum of its permits) < ring_size */
    uint32_t spin;                /* pause iterations before sleeping; forced to 0 for workers when
                                   * threads >= online CPUs (never more spinners than cores) */
    uint32_t wake_work_ns;        /* adaptive hand-off: a batch wakes a sleeping worker only while
                                   * its pipeline's mean work time (a running mean over recent
                                   * batches) is at least this many ns, and an owner about to wait
                                   * takes back the batches still queued and runs them itself.
                                   * 0: the eager hand-off, every batch wakes its worker and the
                                   * owner only waits. Outcomes never depend on it. */
    offload_yield_fn debug_yield; /* worker-side hook (NULL in production) */
    void *debug_yield_arg;
};

/* Fills cfg: 2 threads, 32 pipelines, 256-slot rings, 200 spins, the adaptive hand-off with
 * wake_work_ns 10,000 (a futex wake and the worker's wake-up cost a few microseconds), no hook. */
KVSIM_EXTERN void offload_pool_config_default(struct offload_pool_config *cfg);

/*
 * offload_pool_create - start the worker threads.
 * Context: any thread.
 * Returns: 0 and sets *out; -EINVAL (bad config); -ENOMEM; -EAGAIN (thread creation failed).
 */
KVSIM_EXTERN int offload_pool_create(const struct offload_pool_config *cfg,
                                     struct offload_pool **out);

/*
 * offload_pool_shutdown_any - refuse all further work: workers report every batch they take as
 * failed with -ESHUTDOWN without running its work, and every owner blocked in a wait on this
 * pool returns -ESHUTDOWN promptly. The owners still destroy their pipelines, then the pool.
 * Context: any thread; idempotent.
 * Ordering: a seq_cst store of the flag, then a futex wake of every owner and worker.
 */
KVSIM_EXTERN void offload_pool_shutdown_any(struct offload_pool *pool);

/*
 * offload_pool_destroy - stop and join the workers and free the pool. Accepts NULL.
 * Context: any thread other than a worker; no pipeline may be attached.
 * Returns: 0; -EBUSY (nothing done) while a pipeline is attached.
 */
KVSIM_EXTERN int offload_pool_destroy(struct offload_pool *pool);

/* Number of worker threads. */
KVSIM_EXTERN uint32_t offload_pool_threads(const struct offload_pool *pool);

/* ---- pipelines ----------------------------------------------------------------------------- */

struct offload_pipeline;

/*
 * offload_pipeline_create - a pipeline at virtual time 0, generation 0, executing its batches
 * inline (pool NULL) or on pool. The calling thread becomes the owner.
 * Returns: 0 and sets *out; -EINVAL (bad config: no lane with permits, max_blocks 0, fail_rate
 * outside [0, 1], guard <= 0, rings too small for the permits); -ENOSPC (the pool has
 * max_pipelines attached); -ESHUTDOWN (the pool is shut down); -ENOMEM.
 */
KVSIM_EXTERN int offload_pipeline_create(const struct offload_config *cfg,
                                         struct offload_pool *pool, struct offload_pipeline **out);

/*
 * offload_pipeline_destroy - shut the pipeline down (as offload_shutdown: undrained batches are
 * reported failed with -ESHUTDOWN), wait for the pool workers to hand back every batch they
 * hold, detach from the pool and free. Accepts NULL.
 * Context: owner. Returns: 0; -ETIMEDOUT (a worker kept a batch past the guard: nothing freed,
 * call again); -EDEADLK (from a callback).
 */
KVSIM_EXTERN int offload_pipeline_destroy(struct offload_pipeline *p);

/*
 * offload_enqueue - append a batch of n blocks (copied) to lane's queue. If a permit is free the
 * batch starts at once, at the current virtual time (inline: its work runs before this returns;
 * pool: it is handed to a worker). Sets *token (may be NULL).
 * Context: owner; allowed from a completion callback.
 * Returns: 0; -EINVAL (bad lane, n == 0 or > max_blocks, blocks NULL); -ENODEV (lane has no
 * permits); -EAGAIN (the lane's window is full: drain first); -ESHUTDOWN.
 * Ordering: everything the owner wrote before this call is visible to the batch's work function
 * (release through the submission ring; inline, program order).
 */
KVSIM_EXTERN int offload_enqueue(struct offload_pipeline *p, enum offload_lane lane,
                                 const offload_block_id *blocks, uint32_t n, uint64_t cookie,
                                 struct offload_token *token);

/*
 * offload_cancel - drop a queued batch that has not started (the commitment boundary is the
 * start). It drains as cancelled: no work, no callback, no permit taken.
 * Context: owner; allowed from a completion callback.
 * Returns: 0; -EBUSY (already started); -EALREADY (already drained); -EXDEV, -ESTALE, -ERANGE
 * (never issued), -EINVAL (bad lane); -ESHUTDOWN.
 */
KVSIM_EXTERN int offload_cancel(struct offload_pipeline *p, const struct offload_token *token);

/*
 * offload_advance_to - move virtual time to now (an earlier now changes nothing) and drain every
 * batch whose transfer completes at or before it, in completion order; each drained batch's
 * permit passes to its lane's next queued batch, which starts at that completion's time. Pool:
 * blocks until the work of each drained batch has finished (bounded by the guard).
 * Context: owner.
 * Returns: the number of batches drained (>= 0); -ETIMEDOUT (the state is consistent: call
 * again); -ESHUTDOWN; -EDEADLK.
 */
KVSIM_EXTERN int offload_advance_to(struct offload_pipeline *p, int64_t now);

/*
 * offload_settle - wait until token's batch has drained and the pipeline is stable. Drains
 * everything due at the current virtual time first (as offload_advance_to(offload_now(p))).
 * Pool: blocks (bounded spin, then futex, wall-clock guard) for work still running and for
 * workers to acknowledge every started successor.
 * Context: owner.
 * Returns: 0 (drained: completed, failed or cancelled; the outcome went to the callback);
 * -EAGAIN (the batch cannot drain before virtual time advances: see offload_next_deadline);
 * -EXDEV, -ESTALE, -ERANGE, -EINVAL (bad token); -ESHUTDOWN; -ETIMEDOUT; -EDEADLK.
 * Ordering: on return every worker-side effect of each drained batch (what its work function
 * wrote) is visible to the owner (acquire through the completion ring).
 */
KVSIM_EXTERN int offload_settle(struct offload_pipeline *p, const struct offload_token *token);

/* A snapshot of per-lane drained counts (completed + failed + cancelled), for targets. */
struct offload_checkpoint {
    uint64_t pipeline;
    uint32_t generation;
    uint64_t drained[OFFLOAD_NUM_LANES];
};
/* Context: owner. Takes a checkpoint of p now. */
KVSIM_EXTERN void offload_checkpoint(const struct offload_pipeline *p,
                                     struct offload_checkpoint *cp);

/*
 * offload_settle_after - as offload_settle, for a target: every lane l must have drained at least
 * cp->drained[l] + delta[l] batches (delta NULL = all zero: only stability).
 * Context: owner.
 * Returns: 0; -EOVERFLOW (a target above the batches ever enqueued on that lane: it can never
 * be met); -EAGAIN; -EXDEV, -ESTALE; -ESHUTDOWN; -ETIMEDOUT; -EDEADLK.
 */
KVSIM_EXTERN int offload_settle_after(struct offload_pipeline *p,
                                      const struct offload_checkpoint *cp,
                                      const uint64_t delta[OFFLOAD_NUM_LANES]);

/*
 * offload_poll - without blocking: take in the workers' reports and drain what is due at the
 * current virtual time whose work has finished; with the adaptive hand-off, the work of a due
 * batch still queued for a worker is taken back and run here first. For wall-clock users only:
 * with a pool, what one poll drains depends on thread timing (advance_to and settle do not).
 * Context: owner. Returns: batches drained (>= 0); -ESHUTDOWN; -EDEADLK.
 */
KVSIM_EXTERN int offload_poll(struct offload_pipeline *p);

/*
 * offload_shutdown - close the pipeline: wait (guard) for the workers to hand back the batches
 * they hold, then report every undrained batch (queued, in flight or settling) as failed with
 * -ESHUTDOWN, lane by lane in sequence order. Afterwards enqueue, settle, advance_to and poll
 * return -ESHUTDOWN until offload_reset(). Idempotent.
 * Context: owner. Returns: 0; -ETIMEDOUT (closed, but some batches are still at a worker: call
 * again); -EDEADLK.
 */
KVSIM_EXTERN int offload_shutdown(struct offload_pipeline *p);

/*
 * offload_shutdown_any - ask for shutdown from any thread: an owner blocked in settle or
 * advance_to returns -ESHUTDOWN promptly, and every later enqueue, cancel, settle, advance_to or
 * poll returns -ESHUTDOWN. The undrained batches are reported (failed, -ESHUTDOWN) when the
 * owner calls offload_shutdown, offload_reset or offload_pipeline_destroy.
 * Context: any thread, while p exists.
 * Ordering: a seq_cst store of the request, then a futex wake of the owner.
 */
KVSIM_EXTERN void offload_shutdown_any(struct offload_pipeline *p);

/*
 * offload_reset - shut down (if not yet), then reopen as a new generation: empty lanes, sequence
 * numbers and counters from 0, virtual time kept. Tokens of earlier generations become stale.
 * Context: owner. Returns: 0; -ETIMEDOUT (as offload_shutdown); -EDEADLK.
 */
KVSIM_EXTERN int offload_reset(struct offload_pipeline *p);

/* ---- state (owner; O(1) unless stated) ----------------------------------------------------- */

enum offload_batch_state {
    OFFLOAD_BATCH_QUEUED = 0, /* waiting for a permit */
    OFFLOAD_BATCH_STARTING,   /* holds a permit; handed to a worker, not yet acknowledged */
    OFFLOAD_BATCH_IN_FLIGHT,  /* holds a permit; acknowledged (pool) or running (inline) */
    OFFLOAD_BATCH_COMPLETED,
    OFFLOAD_BATCH_FAILED,
    OFFLOAD_BATCH_CANCELLED,
    OFFLOAD_BATCH_DRAINED, /* drained long ago: its record was reused, the outcome is gone */
};
KVSIM_EXTERN const char *offload_batch_state_name(enum offload_batch_state s);
/* The state of token's batch (>= 0), or -EXDEV, -ESTALE, -ERANGE, -EINVAL. */
KVSIM_EXTERN int offload_token_state(const struct offload_pipeline *p,
                                     const struct offload_token *token);

struct offload_lane_stats {
    uint64_t enqueued;      /* batches enqueued */
    uint64_t started;       /* batches that took a permit */
    uint64_t completed;     /* drained successfully */
    uint64_t failed;        /* drained with an error (work, injected, shutdown) */
    uint64_t cancelled;     /* drained by offload_cancel */
    uint64_t blocks;        /* blocks moved by completed batches */
    uint64_t bytes;         /* bytes moved by completed batches */
    uint32_t queued;        /* batches waiting now */
    uint32_t in_flight;     /* permits held now */
    uint32_t max_in_flight; /* most permits ever held at once (<= permits) */
    uint32_t permits;       /* the lane's permits */
};
/* Returns 0, or -EINVAL (bad lane). */
KVSIM_EXTERN int offload_lane_stats(const struct offload_pipeline *p, enum offload_lane lane,
                                    struct offload_lane_stats *out);

struct offload_stats {
    uint64_t settles;      /* offload_settle + offload_settle_after calls */
    uint64_t settle_waits; /* of which blocked at least once (pool) */
    uint64_t timeouts;     /* blocking waits that hit the guard */
    uint64_t owner_sleeps; /* futex sleeps of the owner */
    uint64_t dispatched;   /* batches handed to pool workers */
    uint64_t taken_back;   /* of which the owner took back from the ring and ran itself */
    uint64_t worker_wakes; /* futex wakes the owner issued to sleeping workers */
};
KVSIM_EXTERN void offload_stats(const struct offload_pipeline *p, struct offload_stats *out);

/* True when nothing is starting or settling, nothing is due at the current time, and every
 * lane's queue is empty or all its permits are in flight. O(lanes). */
KVSIM_EXTERN bool offload_is_stable(const struct offload_pipeline *p);
/* Current virtual time. */
KVSIM_EXTERN int64_t offload_now(const struct offload_pipeline *p);
/* Earliest virtual time at which a batch will drain (the current time if one is due already),
 * or OFFLOAD_NEVER. O(lanes). */
KVSIM_EXTERN int64_t offload_next_deadline(const struct offload_pipeline *p);
/* The lane whose next transfer cannot end before OFFLOAD_NEVER - 1 (its deadline saturated:
 * the link is too slow for the int64 clock), or -1 when every deadline is exact. O(lanes). */
KVSIM_EXTERN int offload_lane_past_the_clock(const struct offload_pipeline *p);
/* Unique id of the pipeline in this process (never 0). */
KVSIM_EXTERN uint64_t offload_pipeline_id(const struct offload_pipeline *p);
/* Current generation (0, then +1 per offload_reset). */
KVSIM_EXTERN uint32_t offload_generation(const struct offload_pipeline *p);
/* True after offload_shutdown until offload_reset. */
KVSIM_EXTERN bool offload_is_shut_down(const struct offload_pipeline *p);

/* ==== G2/G3 tier store (offload/tier.c) ===================================================== */

/*
 * A tier of the offload hierarchy (KVBM, reference §5.1): G2 (host memory, one per engine) or G3
 * (disk; one per engine or one shared by all engines, a configuration choice). A tier is a set of
 * block hashes (uint64_t, any value) with a capacity in blocks, kept in LRU order. It models
 * residency only: no bytes move here; the copies are the pipeline's lanes above.
 *
 * How the hierarchy uses it. Newly stored full G1 blocks are offloaded G1->G2 (write-through, in
 * batches); G2->G3 happens on G2 eviction (the hash reported by offload_tier_insert) or by
 * write-through (a configuration choice). A block already present in the destination is
 * filtered out, not copied again (presence filtering): offload_tier_filter_present() for a
 * batch, or the -EEXIST of offload_tier_insert() for one block. The caller inserts a block when
 * it reserves the destination (the entry is the reservation), so a copy in flight already counts
 * against capacity and already filters duplicates.
 *
 * LRU and pins. Unpinned entries form one LRU list; when the tier is full, insert evicts the
 * least recently used unpinned entry. A pinned entry (the source of an in-flight copy, e.g.
 * G2->G1 onboarding or G2->G3 write-through) is never evicted and cannot be removed; pins nest
 * (a count per entry). A pinned entry leaves the LRU order; when its last pin is dropped it
 * re-enters at the MRU end (like a block returning to an inactive pool). When the tier is full
 * and every entry is pinned, insert fails with -ENOSPC.
 *
 * Cost. Every operation except create, destroy, filter_present (O(n)) and export (O(size)) is
 * O(1) expected: an open-addressing hash table (linear probing, backward-shift deletion, load
 * <= 1/2) maps a hash to a slot, and a doubly linked list over slot indices keeps the LRU order.
 * All memory is allocated by create; no operation allocates.
 *
 * Threads. A tier has no internal locking and no function here is thread-safe. A per-engine
 * tier (G2, or a per-engine G3) is owned by its engine's worker thread: only that thread calls
 * these functions on it. A shared G3 is touched only by the coordinator at boundaries (between
 * prepare and acknowledge of a tick, while the engines are stopped), never by engine threads
 * concurrently. Read-only functions (const tier) may run concurrently with each other only.
 *
 * Errors are negative errno values: -EINVAL (bad argument), -ENOMEM, -EEXIST (already present:
 * skip the copy), -ENOSPC (full and every entry pinned), -ENOENT (absent), -EBUSY (pinned),
 * -EOVERFLOW (pin count overflow).
 */
struct offload_tier;

/* Largest capacity accepted by offload_tier_create (blocks). */
#define OFFLOAD_TIER_MAX_CAPACITY (UINT32_C(1) << 30)

struct offload_tier_counters {
    uint64_t inserts;   /* successful inserts */
    uint64_t hits;      /* offload_tier_touch on a present hash */
    uint64_t misses;    /* offload_tier_touch on an absent hash */
    uint64_t evictions; /* entries evicted by insert (LRU) */
    uint64_t filtered;  /* duplicates filtered: insert -EEXIST + hashes dropped by filter_present */
    uint64_t removes;   /* successful offload_tier_remove */
    uint64_t full;      /* inserts refused with -ENOSPC */
};

/*
 * offload_tier_create - an empty tier of capacity blocks, 1 <= capacity <=
 * OFFLOAD_TIER_MAX_CAPACITY. Allocates everything the tier will ever use.
 * Returns: 0 and sets *out; -EINVAL (out NULL or capacity out of range); -ENOMEM.
 */
KVSIM_EXTERN int offload_tier_create(uint32_t capacity, struct offload_tier **out);
/* Frees the tier. Accepts NULL. */
KVSIM_EXTERN void offload_tier_destroy(struct offload_tier *t);

/* Starts loading the table line hash's lookup will read (a batch of lookups issues these
 * first, so their cache misses overlap). No effect on the contents. */
KVSIM_EXTERN void offload_tier_prefetch(const struct offload_tier *t, uint64_t hash);
/* True if hash is resident (pinned or not). No LRU change, no counter. */
KVSIM_EXTERN bool offload_tier_contains(const struct offload_tier *t, uint64_t hash);
/* A lookup hit: if hash is resident, moves it to the MRU end (a pinned entry keeps its place
 * outside the LRU order) and counts a hit; else counts a miss. Returns whether it is resident. */
KVSIM_EXTERN bool offload_tier_touch(struct offload_tier *t, uint64_t hash);

/*
 * offload_tier_insert - store (reserve) hash at the MRU end. If the tier is full, first evicts
 * the LRU unpinned entry and reports it: *evicted = true and *evicted_hash = its hash (so the
 * caller can write it through to G3); otherwise *evicted = false. Both out parameters may be
 * NULL. A hash already resident is not touched (presence filtering; call touch for a hit).
 * Returns: 0 (inserted); -EEXIST (already resident: skip the copy; counted in filtered);
 * -ENOSPC (full and every entry pinned: nothing changed).
 */
KVSIM_EXTERN int offload_tier_insert(struct offload_tier *t, uint64_t hash, bool *evicted,
                                     uint64_t *evicted_hash);
/* Removes hash. Returns 0; -ENOENT (absent); -EBUSY (pinned: nothing changed). */
KVSIM_EXTERN int offload_tier_remove(struct offload_tier *t, uint64_t hash);

/* Pins hash (one more in-flight copy reads it): it cannot be evicted or removed until the last
 * unpin. Returns 0; -ENOENT (absent); -EOVERFLOW (UINT32_MAX pins already). */
KVSIM_EXTERN int offload_tier_pin(struct offload_tier *t, uint64_t hash);
/* Drops one pin; the last one puts the entry back at the MRU end.
 * Returns 0; -ENOENT (absent); -EINVAL (not pinned). */
KVSIM_EXTERN int offload_tier_unpin(struct offload_tier *t, uint64_t hash);
/* Pin count of hash (0 if absent or unpinned). */
KVSIM_EXTERN uint32_t offload_tier_pins(const struct offload_tier *t, uint64_t hash);

/*
 * offload_tier_filter_present - presence filtering of a batch: writes to out the hashes of
 * in[0 .. n) that are not resident, in their input order, and returns how many. out has room for
 * n; out == in is allowed (filter in place). Duplicates inside the batch are not merged. No LRU
 * change; the hashes dropped are counted in filtered.
 */
KVSIM_EXTERN size_t offload_tier_filter_present(struct offload_tier *t, const uint64_t *in,
                                                size_t n, uint64_t *out);

/* The LRU unpinned entry (the next victim): true and *hash, or false if there is none. */
KVSIM_EXTERN bool offload_tier_peek_lru(const struct offload_tier *t, uint64_t *hash);
/* Writes up to max unpinned hashes in LRU order (least recent first) and returns how many were
 * written. O(size); for tests and diagnostics. */
KVSIM_EXTERN size_t offload_tier_export_lru(const struct offload_tier *t, uint64_t *out,
                                            size_t max);

KVSIM_EXTERN uint32_t offload_tier_size(const struct offload_tier *t);     /* resident entries */
KVSIM_EXTERN uint32_t offload_tier_capacity(const struct offload_tier *t); /* blocks */
KVSIM_EXTERN uint32_t offload_tier_pinned(const struct offload_tier *t);   /* entries with a pin */
KVSIM_EXTERN void offload_tier_counters(const struct offload_tier *t,
                                        struct offload_tier_counters *out);
/* Zeroes the counters (contents unchanged). */
KVSIM_EXTERN void offload_tier_reset_counters(struct offload_tier *t);

/* ==== end of G2/G3 tier store ================================================================ */

#ifdef __cplusplus
}
#endif

#endif /* KVSIM_OFFLOAD_H */
