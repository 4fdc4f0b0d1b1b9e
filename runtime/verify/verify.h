/*
 * verify.h - kvsim's verification tools: the conformance scenario runner, seeded soaks, failure
 * minimization, the concurrency stress harnesses and the pool demonstration.
 *
 * These are white-box tools: they drive the scheduler core, the G1 pool and an engine's offload
 * tiers directly (the only module that may include the private header runtime/engine/tiers.h),
 * and they live in the kvsim executable and the tests, never in the shipped library.
 *
 * Threads: a scenario runner, a soak seed and a minimization run on the calling thread and
 * touch nothing shared; the stress harnesses start their own threads and use process-wide
 * state (run one at a time). Errors are negative errno values (KVSIM_E* of runtime.h where
 * kvsim gives an errno its own meaning).
 */
#ifndef KVSIM_VERIFY_H
#define KVSIM_VERIFY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/engine/tiers.h"
#include "runtime/runtime.h"
#include "sched/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the scenario runner (conform_*.c) ------------------------------------------------------ */

/*
 * The scenario runner behind `kvsim conform`, callable in-process: `kvsim soak` drives it op by
 * op while it builds a scenario, and `kvsim minimize` runs candidate scenarios through it.
 *
 * A scenario is the JSON document of shared/conformance/FORMAT.md plus the extensions of
 * docs/conformance.md (check_invariants, check_liveness, max_futile_preemptions,
 * scheduler_checks, legacy_partial_alloc, offload tiers and virtual time: the `advance` op; the
 * two-engine form: a prefill and a decode engine with the disaggregated handoff between them,
 * config `prefill` / `decode` / `handoff`, ops with an `engine`, the `route` op). A
 * run ends with a structured result: pass, or the failing step, its op and a failure kind that
 * is stable across replays (the minimizer compares kinds):
 *   "invariant:<rule>"   sched_check (or a scheduler boundary) or kvsim_tiers_check found a
 *                        broken invariant
 *   "dead_end"           check_liveness: unfinished requests and nothing can make progress
 *   "futile_preemption"  max_futile_preemptions exceeded (#49675 zero-progress preemptions)
 *   "expect:<key>"       an expectation did not hold
 *   "offload_error"      the offload tiers failed (a flush or an advance returned an error)
 *   "handoff_error"      the handoff's lifecycle refused a fact the runner derived from what
 *                        the engines did (two-engine form; the handoff's ownership rules
 *                        are "invariant:handoff_<rule>")
 *   "scheduler_error"    a scheduler call the runner made returned an errno (-ENOMEM,
 *                        -ESTALE, ...; an invariant violation is "invariant:<rule>")
 *   "error"              the scenario asked for something impossible (unknown request, an
 *                        output with no outstanding schedule, a request sched_add refuses, ...)
 *   "invalid"            the document itself is malformed (strict schema)
 */

enum kvsim_conform_verdict {
    KVSIM_CONFORM_PASS = 0,
    KVSIM_CONFORM_FAIL,    /* the scenario ran and something did not hold */
    KVSIM_CONFORM_INVALID, /* the document is malformed: nothing ran */
};

/* A dead end's structure, the same for dead ends of one form whatever the seed, the sizes and the
 * names: what the expected classes (kvsim_soak_classify) match on. */
struct kvsim_dead_end {
    bool found;                   /* the failure is a dead end (else the rest is zero) */
    bool disagg;                  /* two-engine form */
    bool decode_engine;           /* ... and it is the decode engine's */
    bool priority;                /* policy PRIORITY, else FCFS */
    enum sched_waiting_stop rule; /* why the dead-end schedule's waiting phase stopped */
    int head_status;              /* enum sched_status of the head, -1 without one */
    bool head_holds;              /* the head holds blocks */
    bool head_skipped;            /* it sits in the skipped-waiting queue */
    bool head_fits;               /* its missing blocks are no more than the free blocks */
    bool running;                 /* some request runs */
    uint32_t holder_states;       /* bit (1u << status) per state of a queued request holding
                                   * blocks, the head excepted */
    uint32_t holders;             /* such requests */
    uint32_t holders_loaded;      /* ... of which hold them from an async load: parked, or
                                   * promoted when it ended and not admitted since */
    bool loads_connector;         /* some loaded holder's load was a KV-connector load */
    bool loads_onboarding;        /* ... an onboarding from G2/G3 */
};

struct kvsim_conform_result {
    enum kvsim_conform_verdict verdict;
    long step;          /* index of the failing step in `steps`, -1 for top level / config */
    char op[32];        /* its op ("" when unknown) */
    char kind[96];      /* see above; "" on pass */
    char message[1024]; /* the evidence, as `kvsim conform` prints it after "FAIL <name>: " */
    /* A dead end's structure, the same for dead ends of one form whatever the seed, sizes and
     * names: the policy, the head's state, whether it holds blocks and whether its need fits the
     * free blocks, how many requests run, and the states of the queued requests that hold
     * blocks (e.g. "policy=priority head=PREEMPTED holds=no fits=no running=0
     * holders=WAITING"); "" for other failures. */
    char shape[192];
    struct kvsim_dead_end dead_end; /* the same, as fields */
};

/* What a run did (accumulated over its ops). */
struct kvsim_conform_stats {
    uint64_t ops;                     /* steps executed */
    uint64_t transitions;             /* (request, op) pairs where the request's status or its last
                                       * ownership transition changed */
    uint64_t schedules;               /* schedule ops */
    uint64_t scheduled_tokens;        /* tokens those schedules scheduled */
    uint64_t preemptions;             /* preemptions during schedule ops */
    uint64_t futile_preemptions;      /* of which the victim's free was deferred (#49675) */
    uint64_t zero_progress_schedules; /* schedules that preempted and scheduled no token */
    uint64_t max_futile_in_one_schedule; /* the longest cascade */
    /* with offload tiers (totals at the end of the run; summed by kvsim_conform_stats_add) */
    uint64_t offload_runs;        /* 1 for a run with tiers */
    uint64_t advances;            /* advance ops */
    uint64_t virtual_ns;          /* virtual time reached */
    uint64_t blocked_on_offload;  /* BLOCKED_ON_OFFLOAD outcomes (sched_offload_counters) */
    uint64_t retry_now;           /* RETRY_NOW retries */
    uint64_t loads, failed_loads; /* onboardings started / failed (kvsim_tiers_stats) */
    uint64_t written_g2;          /* blocks written through to G2 */
    uint64_t failed_blocks;       /* blocks of failed batches */
    uint64_t max_held_blocks;     /* most G1 blocks held only by transfers after an op (max) */
    /* the two-engine form (disaggregated prefill -> decode; totals, summed by
     * kvsim_conform_stats_add; advances and virtual_ns above count there too) */
    uint64_t disagg_runs;        /* 1 for a run of the two-engine form */
    uint64_t handoffs;           /* disaggregated requests added */
    uint64_t pins;               /* sources pinned (prefills finished) */
    uint64_t routes;             /* decode requests routed */
    uint64_t late_routes;        /* routes of an aborted handoff (the decode aborted at once) */
    uint64_t reservations;       /* destinations reserved (transfers started) */
    uint64_t completed_handoffs; /* transfers ended with the source held (or routes of a pin of
                                  * no block: nothing to move) */
    uint64_t aborted_handoffs;   /* handoffs aborted (cancelled by the client or expired) */
    uint64_t expired_pins;       /* of which the abort timeout fired */
    uint64_t unpinned_prefills;  /* pins of no block: no full block computed (a prompt shorter
                                  * than a block, or a prefill finished after its preemption) */
    uint64_t transferred_tokens; /* tokens the completed transfers moved */
    uint64_t max_pinned_blocks;  /* most prefill blocks held only by pins after an op (max) */
};

/*
 * Limits of a scenario document (docs/conformance.md "Limits"), checked before anything runs: a
 * token list (`repeat`, `range`, `concat`, nested) expands to at most
 * KVSIM_SCENARIO_MAX_LIST_TOKENS tokens and nests at most KVSIM_SCENARIO_MAX_LIST_DEPTH objects
 * deep; all the token lists of one scenario together expand to at most KVSIM_SCENARIO_MAX_TOKENS;
 * an engine has at most KVSIM_SCENARIO_MAX_BLOCKS blocks of at most KVSIM_SCENARIO_MAX_BLOCK_SIZE
 * tokens.
 */
#define KVSIM_SCENARIO_MAX_LIST_TOKENS (UINT32_C(1) << 20)
#define KVSIM_SCENARIO_MAX_LIST_DEPTH  32
#define KVSIM_SCENARIO_MAX_TOKENS      (UINT32_C(1) << 24)
#define KVSIM_SCENARIO_MAX_BLOCKS      (UINT32_C(1) << 20)
#define KVSIM_SCENARIO_MAX_BLOCK_SIZE  65536u

struct kvsim_conform_options {
    bool trace;        /* print each step's observed decision as a JSON line on stdout */
    bool lenient;      /* minimizer mode: drop references to unknown or unscheduled requests and
                        * outputs with no outstanding schedule instead of failing (see effective) */
    json_t *effective; /* if not NULL (an array): every step as it actually ran is appended
                        * (with lenient, the dropped parts removed): replaying `effective`
                        * strictly runs exactly the same operations */
};

struct kvsim_conform_runner;

/*
 * kvsim_conform_run_json - validate the whole document, then run it step by step until the
 * first failure. stats (optional) receives what ran. Returns 0 (pass), KVSIM_ESCENARIO (it ran
 * and something did not hold) or -EINVAL (the document is malformed); res says why.
 */
int kvsim_conform_run_json(json_t *doc, const struct kvsim_conform_options *opt,
                           struct kvsim_conform_result *res, struct kvsim_conform_stats *stats);

/*
 * kvsim_conform_runner_create - a runner for a scenario built op by op: config is the scenario's
 * `config` object (NULL = defaults), name labels --trace lines. Returns 0, -EINVAL with res
 * filled (invalid config), or -ENOMEM.
 */
int kvsim_conform_runner_create(json_t *config, const char *name,
                                const struct kvsim_conform_options *opt,
                                struct kvsim_conform_runner **out,
                                struct kvsim_conform_result *res);
/* Validates and runs the next step (its index is the number of steps run so far). Returns 0,
 * or KVSIM_ESCENARIO / -EINVAL (a malformed step) with res filled; after a failure the runner
 * only accepts destroy. */
int kvsim_conform_runner_step(struct kvsim_conform_runner *r, json_t *step,
                              struct kvsim_conform_result *res);
void kvsim_conform_runner_destroy(struct kvsim_conform_runner *r);

/* Read-only views for a driver deciding its next op. */
/* The scheduler (the two-engine form: the prefill engine's). */
struct sched *kvsim_conform_runner_sched(struct kvsim_conform_runner *r);
/* Engines of the two-engine form (indexes below), or NULL. */
enum { KVSIM_CONFORM_PREFILL = 0, KVSIM_CONFORM_DECODE = 1 };
struct sched *kvsim_conform_runner_engine_sched(struct kvsim_conform_runner *r, int engine);
/* The request added under this id (on the engine of its add), or NULL. */
struct sched_request *kvsim_conform_runner_request(const struct kvsim_conform_runner *r,
                                                   const char *id);
/* The request with this id on that engine (a disaggregated request's decode request once it
 * was routed), or NULL. */
struct sched_request *kvsim_conform_runner_request_on(const struct kvsim_conform_runner *r,
                                                      int engine, const char *id);
/* The handoff of a disaggregated request, or NULL. */
const struct kvsim_handoff *kvsim_conform_runner_handoff(const struct kvsim_conform_runner *r,
                                                         const char *id);
/* The scenario id of a request of this runner. */
const char *kvsim_conform_runner_request_name(const struct kvsim_conform_runner *r,
                                              const struct sched_request *req);
/* Schedules whose output has not been applied yet, oldest first (the next `output` applies
 * outstanding[0]). */
size_t kvsim_conform_runner_outstanding(const struct kvsim_conform_runner *r,
                                        struct sched_step *const **steps);
/* The same for one engine of the two-engine form. */
size_t kvsim_conform_runner_outstanding_on(const struct kvsim_conform_runner *r, int engine,
                                           struct sched_step *const **steps);
const struct kvsim_conform_stats *kvsim_conform_runner_stats(const struct kvsim_conform_runner *r);
/* Virtual time (ns; moved by `advance` ops only). */
int64_t kvsim_conform_runner_now(const struct kvsim_conform_runner *r);
/* The tiers' earliest transfer end (kvsim_tiers_next_deadline; may be <= now when a transfer is
 * due but not applied yet: the next advance applies it), or OFFLOAD_NEVER (INT64_MAX) when
 * nothing is pending or there are no tiers. In the two-engine form: the earliest handoff event
 * (a transfer's end, a pin's abort deadline), or INT64_MAX. */
int64_t kvsim_conform_runner_next_deadline(const struct kvsim_conform_runner *r);

/* Adds b into a. */
void kvsim_conform_stats_add(struct kvsim_conform_stats *a, const struct kvsim_conform_stats *b);

/* ---- seeded soaks (soak.c, scenario.c) and minimization (minimize.c) ------------------------ */

/*
 * A soak seed picks a configuration from a matrix of dimensions (scheduler, workload, offload
 * tiers, two engines with the disaggregated handoff) and drives the scheduler (or the prefill
 * and decode schedulers) by building a scenario as it goes: every op it appends to the
 * scenario's steps is executed at once through the in-process scenario runner (above) with
 * check_invariants, check_liveness and max_futile_preemptions on (unless `--checks` says
 * otherwise), so a failing seed's scenario file replays exactly what ran. With offload tiers it
 * also moves virtual time (`advance` ops). The minimizer shrinks such a file with delta debugging.
 */

/* ---- the matrix ----------------------------------------------------------------------------- */

enum kvsim_soak_matrix { KVSIM_SOAK_SMALL = 0, KVSIM_SOAK_FULL };

/* Dimensions, in the order of the table in soak.c (scheduler keys first, then the workload). */
enum kvsim_soak_dim {
    KVSIM_DIM_BLOCK_SIZE = 0,
    KVSIM_DIM_NUM_BLOCKS,
    KVSIM_DIM_MAX_NUM_SEQS,
    KVSIM_DIM_MAX_NUM_BATCHED_TOKENS,
    KVSIM_DIM_CHUNKED_PREFILL,
    KVSIM_DIM_PREFIX_CACHING,
    KVSIM_DIM_POLICY,
    KVSIM_DIM_LONG_PREFILL,
    KVSIM_DIM_FULL_ISL,
    KVSIM_DIM_WATERMARK,
    KVSIM_DIM_ASYNC,
    KVSIM_DIM_DEFER_FREE,
    KVSIM_DIM_VICTIM_GUARD,
    KVSIM_DIM_MAX_FUTILE,
    KVSIM_DIM_REQUESTS,
    KVSIM_DIM_PROMPT_PCT,
    KVSIM_DIM_MAX_TOKENS,
    KVSIM_DIM_PREFIX_OVERLAP,
    KVSIM_DIM_PREFIX_FAMILIES,
    KVSIM_DIM_ARRIVAL,
    KVSIM_DIM_PIPELINE_DEPTH,
    KVSIM_DIM_ABORT,
    KVSIM_DIM_EXTERNAL,
    KVSIM_DIM_EXTERNAL_ASYNC,
    KVSIM_DIM_STOP,
    KVSIM_DIM_RESET,
    KVSIM_DIM_MAX_OPS,
    /* offload tiers and virtual time (drawn from a second stream: see soak.c) */
    KVSIM_DIM_OFFLOAD,
    KVSIM_DIM_G2_BLOCKS,
    KVSIM_DIM_G3_BLOCKS,
    KVSIM_DIM_G3_WRITE_THROUGH,
    KVSIM_DIM_COPY_PCT,
    KVSIM_DIM_OFFLOAD_PERMITS,
    KVSIM_DIM_OFFLOAD_MAX_BLOCKS,
    KVSIM_DIM_OFFLOAD_FAIL_RATE,
    KVSIM_DIM_STEP_US,
    KVSIM_DIM_LEGACY_PARTIAL_ALLOC,
    /* two engines: disaggregated prefill -> decode (drawn from a third stream: see soak.c) */
    KVSIM_DIM_DISAGG,
    KVSIM_DIM_PREFILL_BLOCKS,
    KVSIM_DIM_DECODE_BLOCKS,
    KVSIM_DIM_DECODE_MAX_NUM_SEQS,
    KVSIM_DIM_ABORT_TIMEOUT,
    KVSIM_DIM_RELEASE_IMMEDIATELY,
    KVSIM_DIM_TRANSFER_PCT,
    KVSIM_DIM_TRANSFER_LATENCY_PCT,
    KVSIM_DIM_ROUTE_DELAY,
    KVSIM_DIM_UNROUTED_PCT,
    KVSIM_DIM_ONE_TOKEN_PROMPTS,
    KVSIM_NUM_DIMS
};

/* The rules a soak seed's scenario turns on (`--checks`); all by default. */
enum {
    KVSIM_SOAK_CHECK_INVARIANTS = 1, /* check_invariants (+ the scheduler's own checks) */
    KVSIM_SOAK_CHECK_LIVENESS = 2,   /* check_liveness */
    KVSIM_SOAK_CHECK_PROGRESS = 4,   /* max_futile_preemptions (the dimension) */
    KVSIM_SOAK_CHECK_ALL = 7,
};

/* Fixed values for some dimensions (`--set NAME=VALUE`), applied after the seed's choice, and
 * the checks turned off (`--checks`; 0: every check on). */
struct kvsim_soak_overrides {
    bool set[KVSIM_NUM_DIMS];
    int64_t value[KVSIM_NUM_DIMS];
    unsigned checks_off; /* KVSIM_SOAK_CHECK_* bits */
    uint32_t contract;   /* the fidelity contract of every seed (`--vllm-contract`; 0: latest) */
};

/*
 * kvsim_soak_parse_checks - parse `--checks LIST` ("all" or a comma-separated subset of
 * invariants, liveness, progress) into o->checks_off. Returns 0, or -EINVAL with a message
 * naming the bad word in err.
 */
int kvsim_soak_parse_checks(struct kvsim_soak_overrides *o, const char *arg, char *err, size_t len);

/*
 * kvsim_soak_parse_set - parse "NAME=VALUE" into o. Returns 0, or -EINVAL with a message that
 * names the dimension or the value in err.
 */
int kvsim_soak_parse_set(struct kvsim_soak_overrides *o, const char *arg, char *err, size_t len);
/* Prints the matrix (every dimension, its values per matrix, what it means) to f. */
void kvsim_soak_print_matrix(FILE *f);
/* "small" or "full". */
const char *kvsim_soak_matrix_name(enum kvsim_soak_matrix m);

/*
 * kvsim_soak_run_seed - build and run one seed's scenario. *doc receives the scenario (name,
 * source, config with the check keys on, the steps that ran: on a failure, up to and including
 * the failing one); res the verdict; stats what ran. Returns 0 (the seed passed), 1 (it
 * failed), or a negative errno (nothing meaningful ran).
 */
int kvsim_soak_run_seed(uint64_t seed, enum kvsim_soak_matrix matrix,
                        const struct kvsim_soak_overrides *o, json_t **doc,
                        struct kvsim_conform_result *res, struct kvsim_conform_stats *stats);

/* ---- the expected findings: soak failures classified ----------------------------------------- */

/*
 * An expected class of soak failure: a dead end kvsim reaches because it follows upstream vLLM at
 * the revision docs/fidelity/vllm.md pins (written up in docs/fidelity/findings.md). Its
 * signature is a predicate on the failure's structure (struct kvsim_dead_end: the rule that
 * stopped the waiting phase, the head's state and queue and what it holds, what holds the
 * blocks), never on a seed, a size or a name.
 */
struct kvsim_soak_class {
    const char *name;      /* e.g. "priority-head-strands-loads" */
    const char *signature; /* the predicate, in words */
    const char *needs;     /* the matrix dimensions that must be on for it to occur */
    const char *upstream;  /* the upstream rule it follows, and its section in findings.md */
    bool (*match)(const struct kvsim_dead_end *d);
};

/* The expected classes, in a fixed order; *n receives their count. */
const struct kvsim_soak_class *kvsim_soak_classes(size_t *n);
/* The expected class a failure matches, or NULL: an unexpected failure (every failure that is not
 * a dead end, and every dead end no signature matches). At most one class matches any dead end
 * (the signatures are disjoint; a unit test checks it on constructed structures). */
const struct kvsim_soak_class *kvsim_soak_classify(const struct kvsim_conform_result *res);

/* ---- scenario files -------------------------------------------------------------------------- */

/* Writes a scenario with one step per line (as the checked-in scenarios are). Returns 0 or a
 * negative errno. */
int kvsim_scenario_write(const json_t *doc, FILE *f);
/* Writes it to path (atomically enough for our use: a temporary file renamed). Returns 0 or a
 * negative errno. */
int kvsim_scenario_write_file(const json_t *doc, const char *path);

/*
 * kvsim_scenario_drop_requests - a copy of steps without the requests named in drop (an object
 * used as a set of ids): their `add`s go, every op that names only them (abort, route, kv_*)
 * goes, and their ids leave every list and map of the other ops (sampled, finished_recving,
 * finished_sending, ids, expect and its prefill / decode objects, handoff, ignored, rejected; an
 * expected blocked_on_offload naming one goes). An abort left without ids goes too.
 */
json_t *kvsim_scenario_drop_requests(const json_t *steps, const json_t *drop);

/* ---- delta debugging ------------------------------------------------------------------------- */

/* true when the candidate made of units[0..n) still fails the same way. */
typedef bool (*kvsim_ddmin_test_fn)(void *ctx, const size_t *units, size_t n);

/*
 * kvsim_ddmin - Zeller's ddmin: shrinks units[0..*n) (order kept) to a 1-minimal subset for
 * which test holds (removing any single unit makes it pass), assuming test holds for the input.
 * Stops early after max_tests tests (the result still satisfies test). Returns the number of
 * tests run, or -ENOMEM.
 */
int64_t kvsim_ddmin(size_t *units, size_t *n, kvsim_ddmin_test_fn test, void *ctx,
                    uint64_t max_tests);

/* The outcome of a minimization. */
struct kvsim_minimize_result {
    json_t *scenario; /* the minimized scenario (a new reference), NULL on failure */
    char kind[96];    /* the failure kind every candidate kept */
    char shape[192];  /* and a dead end's shape (kvsim_conform_result.shape; "" otherwise) */
    size_t steps_in, steps_out, requests_in, requests_out;
    uint64_t runs;                       /* candidate runs */
    struct kvsim_conform_result failure; /* how the result fails under `kvsim conform` */
    char message[1280];                  /* why it could not be minimized (on failure) */
};

/*
 * kvsim_minimize_scenario - delta-debug the failing scenario doc (named name in messages) over
 * its requests, then its steps, in rounds until nothing more can go or max_runs candidates ran,
 * keeping only candidates that fail with the input's kind (and, for a dead end, its shape: a
 * minimized dead end is of the form the input's was). Returns 0 and res->scenario;
 * -EINVAL (res->message says why) when doc passes, is invalid, or fails because the scenario
 * itself is wrong (kind "error"); -EPROTO when the input or the result does not fail the same
 * way when replayed; -ENOMEM.
 */
int kvsim_minimize_scenario(json_t *doc, const char *name, uint64_t max_runs,
                            struct kvsim_minimize_result *res);

/* ---- stress harnesses (stress_offload.c, stress_registry.c) --------------------------------- */

/*
 * The harnesses behind `kvsim stress` and the stress_offload / stress_registry executables.
 *
 * Two parts, each a self-checking run that prints what it did and returns 0 (no violation),
 * KVSIM_EINVARIANT (a violation) or a negative errno (it could not run):
 *  - the offload pipeline (stress_offload.c): owner threads hammering pipelines on one shared
 *    thread pool; checks permits, exactly-once completion, settlement and liveness;
 *  - the block registry (stress_registry.c): writers, readers and a reclaimer on one registry;
 * checks the watermark contract on every read. The parts use process-wide state: run one at a time.
 */

struct kvsim_stress_opts {
    const char *prog; /* message prefix, e.g. "kvsim stress" */
    /* offload pipeline */
    uint32_t threads;   /* owner threads, one pipeline each */
    uint32_t lanes;     /* lanes used per pipeline, 1..OFFLOAD_NUM_LANES */
    uint32_t permits;   /* permits per lane */
    uint32_t workers;   /* pool worker threads */
    uint64_t batches;   /* batches per owner; 0: run for `seconds` */
    double fail_rate;   /* injected failure probability */
    bool yield;         /* yield at the pipeline's debug_yield points */
    bool pool_shutdown; /* end with offload_pool_shutdown_any instead of per pipeline */
    bool eager;         /* the pool's eager hand-off (wake_work_ns 0); default adaptive */
    int64_t guard_ms;   /* wall-clock guard of every settle wait */
    /* registry */
    uint32_t readers, writers;
    uint64_t steps; /* steps per writer (KVSIM_STRESS_REG_BATCH hashes each) */
    /* both */
    double seconds; /* offload: duration when batches == 0; registry: writers' time limit
                     * (0: none) */
    uint64_t seed;
};

/* What a part did, for the summary line of `kvsim stress`. */
struct kvsim_stress_result {
    uint64_t ops;
    double elapsed_s;
    uint64_t violations;
};

/* Hashes registered per registry writer step. */
#define KVSIM_STRESS_REG_BATCH       32
/* Registry steps per writer meaning "until the time limit". */
#define KVSIM_STRESS_UNBOUNDED_STEPS (UINT64_C(1) << 40)
/* Batches per owner the offload part can track (the cap in --seconds mode). */
#define KVSIM_STRESS_MAX_BATCHES     1000000u

/*
 * kvsim_stress_offload_run / kvsim_stress_registry_run - run one part with o, print its report
 * to out (violations to stderr) and fill *res if non-NULL. Returns 0 when nothing was violated,
 * KVSIM_EINVARIANT when something was, or a negative errno when it could not run (reported on
 * stderr).
 */
int kvsim_stress_offload_run(const struct kvsim_stress_opts *o, FILE *out,
                             struct kvsim_stress_result *res);
int kvsim_stress_registry_run(const struct kvsim_stress_opts *o, FILE *out,
                              struct kvsim_stress_result *res);

/* Which parts a command line runs. */
enum {
    KVSIM_STRESS_OFFLOAD = 1,
    KVSIM_STRESS_REGISTRY = 2,
    KVSIM_STRESS_ALL = 3,
};

/* ---- the pool demonstration (pool_demo.c) ------------------------------------------------- */

/*
 * kvsim_pool_demo - run a short, deterministic walk through the G1 block pool (prefix hits,
 * free order, eviction, an aborted plan, the ownership check) and print it to out.
 * Returns 0, or a negative errno if a step did not behave as vLLM's pool does.
 */
int kvsim_pool_demo(FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_VERIFY_H */
