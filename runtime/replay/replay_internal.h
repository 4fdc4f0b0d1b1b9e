/*
 * replay_internal.h - the replay's state and the functions its rooms share: replay.c (set up,
 * tear down, the run), epochs.c, threads.c, routing.c, arrivals.c, accounting.c, summarize.c and
 * disagg.c (the disaggregated coordinator). Private to runtime/replay/. Everything here is the
 * coordinator's, read by workers only inside a phase (the barrier orders both).
 *
 * Calls between the rooms run one way (no circle): replay.c -> epochs.c -> threads.c ->
 * routing.c -> arrivals.c, epochs.c -> disagg.c -> routing.c; accounting.c and summarize.c are
 * leaves that others call (summarize.c calls disagg.c's summaries).
 */
#ifndef KVSIM_REPLAY_INTERNAL_H
#define KVSIM_REPLAY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <urcu/wfcqueue.h>

#include "runtime/replay/replay.h"

struct barrier {
    _Atomic uint32_t arrived;
    _Atomic uint32_t generation; /* futex word */
    _Atomic uint32_t sleepers;   /* parties in (or entering) the futex wait */
    uint32_t parties;
    int64_t spin_ns; /* the longest a waiter spins before it sleeps (0: threads > CPUs) */
};

/* One party's memory of whether spinning paid (barrier_wait): owned by that thread. */
struct barrier_waiter {
    uint32_t skip;    /* waits left that sleep at once */
    uint32_t backoff; /* the skip after the next spin that does not pay (0: the last paid) */
};

/* What one replay thread keeps for itself: owned by that thread; busy_ns is read by the
 * coordinator after the phase's last barrier. */
struct replay_worker {
    struct barrier_waiter waiter;
    int64_t busy_ns;               /* wall ns taking engines (work), this phase */
    struct kvpool_token_run *runs; /* scratch: a prompt's token runs (route_prep_hash) */
    uint32_t cap_runs;
    char pad[64 - sizeof(struct barrier_waiter) - sizeof(int64_t) - sizeof(void *) -
             sizeof(uint32_t)];
};

/*
 * The kv router's work for the arrivals due at the next boundary, done in the phase that
 * advances the engines to it (replay.c, "route preparation"): each arrival's prompt hashed in
 * full, by whichever thread claims it first, and its overlap with each engine, by the thread
 * that advanced that engine, right after. The coordinator fills reqs before the phase (workers
 * parked) and routes with the overlaps at the boundary; the admissions of the phase after read
 * the hashes. Two of them: one filled for the next boundary while the other's hashes are
 * admitted.
 */
struct route_prep {
    int64_t boundary;         /* the boundary it was made for (INT64_MIN: none) */
    uint32_t num, cap;        /* arrivals */
    uint32_t *reqs;           /* [cap]: the requests, in no particular order */
    uint32_t *num_hashes;     /* [cap]: each one's full blocks, all hashed */
    size_t *off;              /* [cap]: where its hashes start in hashes[] */
    _Atomic uint32_t *hashed; /* [cap]: 1 once its hashes are written (release) */
    kvpool_hash *hashes;
    size_t cap_hashes;
    uint32_t *ov; /* engine e's overlap with arrival i: ov[e * stride + i] */
    size_t cap_ov, stride;
    _Atomic uint32_t next_hash; /* the next arrival a thread may claim to hash */
    _Atomic int rc;             /* the first error hashing (0: none) */
};

enum phase {
    PHASE_ADMIT,             /* admit at b_cur, start steps at b_cur */
    PHASE_ADVANCE,           /* advance to b_next */
    PHASE_ADMIT_AND_ADVANCE, /* both, when b_next does not depend on the steps just started */
    /* disaggregated epochs: the prefill engines first, then the decode engines */
    PHASE_PREFILL_ADMIT,   /* prefill engines: admit at b_cur, start steps at b_cur */
    PHASE_PREFILL_ADVANCE, /* prefill engines: advance to b_next */
    PHASE_DECODE_ADVANCE,  /* decode engines: advance to b_next (applying posted messages) */
    /* pipelined disaggregated epochs (replay.c, disagg_pipelined): the prefill engines admit at
     * b_cur and start their steps while the decode engines finish the epoch before, to b_cur */
    PHASE_PREFILL_ADMIT_DECODE_LAST,
    PHASE_KINDS
};

/* Whether parallel phases of one kind pay (run_work; the coordinator's). */
struct phase_policy {
    bool alone;         /* run by the coordinator alone for now */
    uint32_t small_run; /* parallel phases in a row that did not pay (phase_measured) */
    uint32_t alone_run; /* phases in a row run alone */
};

struct follow_up {
    int64_t t;
    uint32_t req;
};

/*
 * The prompt hashes the kv router computed for the arrivals it sent to one engine at a
 * boundary, in the engine's inbox order: the engine's admissions take them instead of hashing
 * those blocks again. The coordinator appends at the boundary (workers parked); the engine's
 * thread of the next phase reads them (the barrier between orders the two); the coordinator
 * empties them at the next boundary, after every inbox was drained.
 */
struct routed_hashes {                /* a cache line each: its engine's thread moves next_ent */
    _Alignas(64) kvpool_hash *hashes; /* every arrival's, one after the other */
    size_t num_hashes, cap_hashes;
    struct routed_entry {
        uint32_t req, num; /* num hashes of request req, from off */
        size_t off;
        const kvpool_hash *prepared; /* or NULL: the hashes are at prepared[0..num) */
    } * ent;
    uint32_t num_ent, cap_ent, next_ent; /* next_ent: the next admission's */
};

/* Thread accounting (KVSIM_REPLAY_ACCOUNTING=1; docs/replay.md): one per replay thread,
 * written by that thread only, read by the coordinator after the threads joined. */
struct acct_thread {
    int64_t advance_ns;   /* CPU advancing engines */
    int64_t wait_cpu_ns;  /* CPU in the epoch barrier (spinning, the futex calls) */
    int64_t wait_wall_ns; /* wall time in the epoch barrier */
    int64_t phase_ns;     /* CPU advancing engines in the current phase */
    char pad[64 - 4 * sizeof(int64_t)];
};

/* A measured interval's start (replay__acct_mark): the calling thread's CPU time and how many
 * clock reads it had made. */
struct acct_mark {
    int64_t t0;
    uint64_t reads0;
};

struct replay_acct {
    bool on;
    struct acct_thread *thr; /* [num_threads] */
    int64_t *engine_ns;      /* [engines]: the current phase's advance CPU, by engine */
    /* Per phase, the time T threads need at least: max(the largest engine, the sum / T),
     * summed over phases, for T = 1, 2, 4, 8, 16 (coordinator, after each phase). */
    int64_t critical_ns[KVSIM_ACCOUNTING_BOUNDS];
    int64_t critical_assigned_ns[KVSIM_ACCOUNTING_BOUNDS]; /* engine e on thread e mod T */
    int64_t *thread_sum;                                   /* scratch: [16] */
    uint64_t phases;
    struct acct_mark coord; /* the coordinator's, at the epochs' start */
    int64_t coord_cpu_ns;   /* the coordinator's CPU over the epoch loops */
    int64_t clock_ns;       /* what one CPU-time read costs (replay.c, acct_clock) */
    int64_t tally_ns;       /* the coordinator's CPU in acct_phase_end's bookkeeping */
};

/* The epochs' clock and how the run ends (epochs.c; the coordinator's). */
struct replay_epoch {
    int64_t b_cur, b_next;
    int64_t b_prev; /* pipelined disaggregated epochs: the last epoch's b_cur */
    uint64_t epochs;
    bool pipelined;    /* disaggregated epochs pipelined (disagg_pipelined) */
    bool admit_merged; /* next_boundary_admitting's one phase (not disaggregated) */
    /* Windows (epochs.c, route_window): how far past a boundary arrivals may be routed at it,
     * because the router sees nothing the engines do in between: the delayed view's delay, or
     * INT64_MAX for a router that reads no engine (round-robin); 0: one arrival instant an
     * epoch. Each engine admits a window's arrivals at their own instants. */
    int64_t lookahead_ns;
    uint64_t window_arrivals; /* arrivals routed ahead of their instant */
    /* an early end: --max-sim-time-s (stop_ns, INT64_MAX: none) or cfg->stop_flag */
    int64_t stop_ns;
    const char *end_reason; /* "finished", "max-sim-time" or "interrupted" */
    /* progress */
    bool progress;
    int64_t last_progress; /* wall ns */
    int64_t wall_start;    /* wall ns at the first boundary */
};

/* The threads and the phase they run (threads.c): written by the coordinator with the workers
 * parked, read by them inside the phase. */
struct replay_threads_state {
    enum phase phase;
    bool finished; /* the workers leave at their next barrier */
    struct barrier barrier;
    struct replay_worker *workers; /* [num_threads] */
    bool *admitting;               /* [engines]: admits arrivals in the current parallel phase */
    _Atomic uint64_t *claim;       /* [engines]: the phase_seq of the phase that last took it */
    uint64_t phase_seq; /* +1 per parallel phase (coordinator, before its first barrier) */
    struct phase_policy phase_policy[PHASE_KINDS]; /* by phase kind (replay__run_work) */
    uint64_t phases_parallel;                      /* phases the workers took part in */
};

/* When requests arrive (arrivals.c; the coordinator's). */
struct replay_arrivals {
    size_t open_cursor; /* next open-loop request in trace order */
    int32_t *next_turn; /* follow-up of each request, or -1 */
    /* Closed-loop concurrency (cfg->replay_concurrency, 0: off): at most that many sessions
     * (an independent request is a session of one turn) in flight; a session's last turn
     * finishing dispatches the next pending one at that instant. */
    uint32_t concurrency;
    size_t session_cursor;   /* next pending session's first turn, in trace order */
    bool sessions_exhausted; /* every session has been dispatched */
    uint8_t *slot_parent;    /* per request: its finish will release a slot */
    uint64_t slot_parents;   /* of parents_in_flight, those counted for a slot */
    int32_t *releases;       /* what engines see: >= 0 when a finish releases something */
    struct follow_up *freed; /* scratch: the slots a boundary frees, sorted */
    size_t cap_freed;
    struct follow_up *heap; /* pending follow-ups (min-heap on (t, req)) */
    size_t heap_len, heap_cap;
    uint64_t parents_in_flight; /* routed requests whose follow-up is not yet released */
    int64_t min_delay;          /* the smallest think time (0: a slot's next session at once) */
};

/* Where arrivals go (routing.c; the coordinator's at boundaries, route preparation and the
 * inboxes' consumers inside phases as routing.c says). */
struct replay_routing {
    struct kvsim_router *router;
    bool drain_events; /* kv policy fed by events */
    /* The delayed view (router.h) of the router of the aggregated or prefill engines ([0]) and
     * of the decode router ([1]): their engines stage what they did at every step's end (sink)
     * and release it at each phase's end (replay__route_release). predicts: a kv router
     * predicts on route (the whole prompt is hashed). */
    bool delayed[2];
    bool view_reported; /* a delayed view asked of a router with one choice (not run: the
                         * report still says it) */
    bool predicts;
    /* The delayed view through the event indexer even where it could read the pools less what
     * is not heard of yet (KVSIM_REPLAY_VIEW_INDEXER=1: the same decisions, slower; to compare;
     * data-parallel deployments always use the indexer). */
    bool view_indexer;
    struct kvsim_step_sink sink;
    /* Data parallelism: the router picks among the num_deployments deployments, from their
     * summed loads (dep_pubs) and their best rank's overlap, and lb[d], vLLM's DP load balancer,
     * among deployment d's ranks, engines d * dp to d * dp + dp - 1. */
    struct kvsim_router **lb;
    struct kvsim_engine_pub *dep_pub;
    const struct kvsim_engine_pub **dep_pubs;
    /*
     * Per-engine inboxes: urcu wait-free concurrent queues (any number of producers, one
     * consumer, the engine's owner). Today the coordinator enqueues routed arrivals; later,
     * other engines' threads enqueue cross-engine messages the same way. The nodes are
     * preallocated, one per request: no allocation per hand-off.
     */
    struct __cds_wfcq_head *inbox_head;
    struct cds_wfcq_tail *inbox_tail;
    struct cds_wfcq_node *nodes;
    /* the arrivals routed at the current boundary (route_one), for next_boundary_admitting,
     * each with its instant (b_cur, or later in a window) */
    struct arrived {
        uint32_t req, engine;
        int64_t t;
    } * arrived;
    int64_t *arrive_at; /* [R]: the instant request req is admitted at (its engine's thread) */
    int64_t view_at;    /* the instant the routers see the engines as of (replay__route_at) */
    uint32_t num_arrived, cap_arrived;
    uint32_t *arrived_left; /* scratch: [engines] */
    int64_t *arrived_first; /* scratch: [engines] */
    uint64_t routed;
    /* router scratch */
    struct kvpool_token_run *runs;
    uint32_t cap_runs;
    kvpool_hash *hashes;
    uint32_t cap_hashes;
    struct routed_hashes
        *routed_hashes;          /* [engines]: the kv router's hashes of this boundary's arrivals */
    bool prep_on;                /* route preparation (aggregated, kv router, 2+ engines) */
    struct route_prep prep[2];   /* the one filled in the current phase: prep[prep_fill] */
    uint32_t prep_fill;          /* 0 or 1 */
    struct route_prep *prep_now; /* the current phase's (prep[prep_fill]), or NULL */
    const struct route_prep *prep_ready; /* the one for the current boundary, or NULL */
    uint32_t *prep_slot; /* [R]: a request's index in the route_prep it was put in */
};

/* The disaggregated coordinator's state (disagg.c). */
struct replay_disagg {
    struct kvsim_router *decode_router;
    struct kvsim_handoff *handoffs;    /* [R] */
    struct kvsim_engine_disagg disagg; /* every engine's view */
    struct replay_link *links;         /* [num_prefill]: each prefill engine's link */
    struct kvsim_engine_msg *msgs;     /* scratch: the outboxes merged */
    struct kvsim_engine_msg *pfacts;   /* the prefill facts of the epoch, in order */
    size_t num_pfacts, cap_pfacts;
    uint32_t *msg_engine;
    size_t num_msgs, cap_msgs;
};

/* One replay: what every room reads (the run, its requests, its engines) and each room's own
 * state. */
struct replay {
    const struct kvsim_replay_config *cfg;
    struct kvsim_trace trace;
    struct kvsim_metrics *metrics;
    struct kvsim_tier_topology *tiers; /* the offload tiers' pool and shared G3, or NULL */
    /* the engines: [0, num_prefill) prefill, the rest decode, with disaggregated serving
     * (num_prefill 0: aggregated); with data parallelism dp ranks per deployment (1: none), and
     * a mixture-of-experts model's deployments' ranks in lockstep (engine.h; NULL: independent),
     * each group advanced as one by the thread that owns its first rank */
    struct kvsim_engine **engines;
    const struct kvsim_engine_pub **pubs;
    const struct kvpool **pools;
    int *engine_rc;
    uint32_t num_engines, num_threads;
    uint32_t num_prefill, num_decode;
    uint32_t dp, num_deployments;
    struct kvsim_lockstep *lockstep;
    struct replay_epoch ep;
    struct replay_threads_state thr;
    struct replay_arrivals arr;
    struct replay_routing rt;
    struct replay_acct acct;
    struct replay_disagg dis;
};

/* A prefill engine's link: the transfers reserved on it and not started yet, first come first
 * served, and the end of the last one that started. */
struct replay_link {
    uint32_t *queue; /* request indexes, a ring */
    uint32_t head, len, cap;
    int64_t free; /* the end of the last transfer that started */
};

/* ---- epochs.c ------------------------------------------------------------------------------ */

/* Runs the epochs from the first arrival on the threads, to the end or an early stop, then the
 * end's checks and the shared G3's last epoch. Coordinator. Returns 0 or a negative errno with
 * the message. */
int replay__epochs(struct replay *rp, char *err, size_t errlen);

/* ---- threads.c ----------------------------------------------------------------------------- */

/* The replay's worker threads (1 .. num_threads - 1; the coordinator is thread 0). */
struct worker_arg;
struct replay_threads {
    pthread_t *threads;
    struct worker_arg *args;
};
/* The CPUs this process may run on (its affinity mask), or 0 when unknown. Any thread. */
uint32_t replay__cpus(void);
/* Starts the workers, parked at the barrier. Coordinator. Returns 0 or a negative errno (the
 * workers started are stopped by replay__stop_threads). */
int replay__start_threads(struct replay *rp, struct replay_threads *th);
/* Releases the workers from their barrier and joins them. Coordinator, offline. */
void replay__stop_threads(struct replay *rp, struct replay_threads *th);
/* One phase: the workers take their engines between two barriers, or the coordinator advances
 * every engine itself when threads would not pay (threads.c, "pay policy"). Coordinator; the
 * engines' errors are left in rp->engine_rc. */
void replay__run_work(struct replay *rp, enum phase phase);

/* ---- routing.c ----------------------------------------------------------------------------- */

/* Places request req on one of the n engines behind router (pubs[0..n) their loads), hashing
 * its prompt at block_size for the kv policy (the first num_known blocks' hashes are known[],
 * when given: copied, not computed): the first *num_hashes (when not NULL) blocks' hashes are
 * in rp->hashes then. Returns the engine's index among them (>= 0) or a negative errno.
 * Coordinator. */
int64_t replay__route(struct replay *rp, struct kvsim_router *router,
                      const struct kvsim_engine_pub *const *pubs, uint32_t req, uint32_t block_size,
                      const kvpool_hash *known, uint32_t num_known, uint32_t *num_hashes);
/* The boundary's routing at rp->b_cur: the routers see the engines' loads, then every arrival
 * due by b_cur goes to an engine's inbox in (time, request) order. Coordinator, workers
 * parked. Returns 0 or a negative errno. */
int replay__route_due(struct replay *rp);
/* Routes request req, due at t > rp->b_cur, in the window of the boundary b_cur: the routers first
 * see the engines as of t (what they staged up to t less the delay released; the views at t),
 * then req goes to an engine's inbox, to be admitted at t. Coordinator, workers parked; only
 * with a lookahead (rp->ep.lookahead_ns), arrivals in (time, request) order. Returns the engine
 * or a negative errno. */
int64_t replay__route_at(struct replay *rp, uint32_t req, int64_t t);
/* Engine e's KV events so far, into its router's event indexer. The thread that owns e in the
 * phase. Returns 0 or the indexer's error. */
int replay__route_drain_events(struct replay *rp, uint32_t e);
/* Sets what router r sees from the run's options (router.h, kvsim_router_set_view) and says
 * whether its view is delayed (*delayed). Coordinator, at set-up. Returns 0 or -ENOMEM. */
int replay__route_view(struct replay *rp, struct kvsim_router *r, bool *delayed);
/* How many units router r chooses among (engines, deployments, or a pool's engines). */
uint32_t replay__route_units(const struct replay *rp, const struct kvsim_router *r);
/* Whether engine e's router has the delayed view (its engine then feeds rp->rt.sink). */
bool replay__route_delayed(const struct replay *rp, uint32_t e);
/* What engine e did that its router sees by now (kvsim_router_release_owner), with the
 * delayed view. The thread that owns e, once e is at now (or the coordinator with the workers
 * parked, for a window's instant past e's). Returns 0 or an indexer error. */
int replay__route_release(struct replay *rp, uint32_t e, int64_t now);
/* Route preparation (routing.c): the arrivals known to be due by rp->b_next listed for the
 * phase about to advance there (rp->prep_now; coordinator, workers parked; 0 or -ENOMEM); their
 * prompts hashed by the threads that claim them (every thread of the phase, before it takes
 * engines); engine e's overlaps with them once e is at the boundary (the thread that advanced
 * e). */
int replay__route_prep_collect(struct replay *rp);
void replay__route_prep_hash(struct replay *rp, uint32_t w);
void replay__route_prep_overlaps(struct replay *rp, uint32_t e);

/* ---- arrivals.c ---------------------------------------------------------------------------- */

/* The sessions' turn links, what a finish releases, the closed loop's first sessions. Before
 * the epochs. Returns 0 or -ENOMEM. */
int replay__setup_sessions(struct replay *rp);
/* The next arrival known now (an open-loop request or a pending follow-up), or INT64_MAX. */
int64_t replay__next_arrival(struct replay *rp);
/* Whether request req's finish releases a session slot (closed loop, sessions pending). */
bool replay__releases_slot(const struct replay *rp, uint32_t req);
/* The engines' finished turns release their follow-ups (in engine order), last turns their
 * session slots, given out in (time, request) order. Coordinator at rp->b_cur. Returns 0,
 * -ENOMEM, -EOVERFLOW (a follow-up past the clock) or KVSIM_EINVARIANT (one due before b_cur),
 * err saying why. */
int replay__release_finished(struct replay *rp, char *err, size_t errlen);
/* The next arrival due by until, in (time, request) order, taken (-1: none). */
int64_t replay__take_arrival(struct replay *rp, int64_t until);
/* fn(rp, ctx, req) for every arrival known now to be due by t (open-loop ones in trace order,
 * then pending follow-ups); stops at fn's first non-zero return, which it returns. */
int replay__arrivals_known_by(struct replay *rp, int64_t t,
                              int (*fn)(struct replay *, void *, uint32_t), void *ctx);

/* ---- accounting.c -------------------------------------------------------------------------- */

/* The calling thread's CPU time now, and the CPU since a mark less the clock reads' own cost
 * (never negative). Any replay thread, its own marks. */
struct acct_mark replay__acct_mark(void);
int64_t replay__acct_since(const struct replay *rp, struct acct_mark m);
/* Thread w's part of a phase (a zero mark when the accounting is off). */
struct acct_mark replay__acct_work_begin(const struct replay *rp);
void replay__acct_work_end(struct replay *rp, uint32_t w, struct acct_mark m);
/* After a phase (coordinator, workers parked): the phase's least time on 1..16 threads. */
void replay__acct_phase_end(struct replay *rp);
/* The coordinator's CPU over the epochs: measured from start to stop (the clock's cost too). */
void replay__acct_start(struct replay *rp);
void replay__acct_stop(struct replay *rp);
/* The report's accounting section. */
void replay__acct_summarize(const struct replay *rp, struct kvsim_thread_accounting *ac);

/* ---- summarize.c --------------------------------------------------------------------------- */

/* The report of the run (wall_ns: its wall time so far). Returns 0 or a negative errno. */
int replay__summarize(struct replay *rp, int64_t wall_ns, struct kvsim_report *report);
/* Every file the run writes, through the output stage. Returns 0 or a negative errno with the
 * message. */
int replay__write(struct replay *rp, const struct kvsim_report *report, char *err, size_t errlen);

/* ---- disagg.c ------------------------------------------------------------------------------ */

/* Allocates the handoff table, the links and the decode router. Returns 0 or -ENOMEM. */
int replay__disagg_setup(struct replay *rp);
/* The lookahead bound on the next boundary (INT64_MAX: none). */
int64_t replay__disagg_bound(const struct replay *rp);
/* After the prefill phase: pins routed to decode engines, aborts turned into cancels (the
 * facts kept for after_decode). */
int replay__disagg_after_prefill(struct replay *rp);
/* After the decode phase: the epoch's facts applied to the handoffs in virtual-time order,
 * reservations turned into transfers (releases and activations posted). */
int replay__disagg_after_decode(struct replay *rp, char *err, size_t errlen);
/* Whether a disaggregated replay with no event left still holds unfinished requests. */
bool replay__disagg_stuck(const struct replay *rp, char *err, size_t errlen);
/* The records' handoff fields (before the metrics are summarized), the report's disagg section
 * (after), and the handoff event log. */
int replay__disagg_records(struct replay *rp);
int replay__disagg_summarize(struct replay *rp, struct kvsim_report *report);
/* The handoff event log in time order (malloc'd, *num events). Returns 0 or -ENOMEM. */
int replay__disagg_handoff_events(const struct replay *rp, struct kvsim_handoff_event **out,
                                  size_t *num);
void replay__disagg_free(struct replay *rp);

#endif /* KVSIM_REPLAY_INTERNAL_H */
