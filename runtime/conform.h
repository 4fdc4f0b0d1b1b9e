/*
 * conform.h - the scenario runner behind `kvsim conform`, callable in-process (private to
 * runtime/ and tests/): `kvsim soak` drives it op by op while it builds a scenario, and
 * `kvsim minimize` runs candidate scenarios through it.
 *
 * A scenario is the JSON document of shared/conformance/FORMAT.md plus the extensions of
 * docs/conformance.md (check_invariants, check_liveness, max_futile_preemptions,
 * scheduler_checks, legacy_partial_alloc, offload tiers and virtual time: the `advance` op). A
 * run ends with a structured result: pass, or the failing step, its op and a failure kind that
 * is stable across replays (the minimizer compares kinds):
 *   "invariant:<rule>"   sched_check (or a scheduler boundary) or kvsim_tiers_check found a
 *                        broken invariant
 *   "dead_end"           check_liveness: unfinished requests and nothing can make progress
 *   "futile_preemption"  max_futile_preemptions exceeded (#49675 zero-progress preemptions)
 *   "expect:<key>"       an expectation did not hold
 *   "offload_error"      the offload tiers failed (a flush or an advance returned an error)
 *   "scheduler_error"    a scheduler call the runner made returned an errno (-ENOMEM,
 *                        -ESTALE, ...; an invariant violation is "invariant:<rule>")
 *   "error"              the scenario asked for something impossible (unknown request, an
 *                        output with no outstanding schedule, a request sched_add refuses, ...)
 *   "invalid"            the document itself is malformed (strict schema)
 */
#ifndef KVSIM_CONFORM_H
#define KVSIM_CONFORM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/sched.h"

enum kvsim_conform_verdict {
    KVSIM_CONFORM_PASS = 0,
    KVSIM_CONFORM_FAIL,    /* the scenario ran and something did not hold */
    KVSIM_CONFORM_INVALID, /* the document is malformed: nothing ran */
};

struct kvsim_conform_result {
    enum kvsim_conform_verdict verdict;
    long step;          /* index of the failing step in `steps`, -1 for top level / config */
    char op[32];        /* its op ("" when unknown) */
    char kind[96];      /* see above; "" on pass */
    char message[1024]; /* the evidence, as `kvsim conform` prints it after "FAIL <name>: " */
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
};

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
 * first failure. stats (optional) receives what ran. Returns 0 (pass) or -1 (res says why).
 */
int kvsim_conform_run_json(json_t *doc, const struct kvsim_conform_options *opt,
                           struct kvsim_conform_result *res, struct kvsim_conform_stats *stats);

/*
 * kvsim_conform_runner_create - a runner for a scenario built op by op: config is the scenario's
 * `config` object (NULL = defaults), name labels --trace lines. Returns 0, or -1 with res
 * filled (invalid config), or -ENOMEM.
 */
int kvsim_conform_runner_create(json_t *config, const char *name,
                                const struct kvsim_conform_options *opt,
                                struct kvsim_conform_runner **out,
                                struct kvsim_conform_result *res);
/* Validates and runs the next step (its index is the number of steps run so far). Returns 0,
 * or -1 with res filled; after a failure the runner only accepts destroy. */
int kvsim_conform_runner_step(struct kvsim_conform_runner *r, json_t *step,
                              struct kvsim_conform_result *res);
void kvsim_conform_runner_destroy(struct kvsim_conform_runner *r);

/* Read-only views for a driver deciding its next op. */
struct sched *kvsim_conform_runner_sched(struct kvsim_conform_runner *r);
/* The request added under this id, or NULL. */
struct sched_request *kvsim_conform_runner_request(const struct kvsim_conform_runner *r,
                                                   const char *id);
/* The scenario id of a request of this runner. */
const char *kvsim_conform_runner_request_name(const struct kvsim_conform_runner *r,
                                              const struct sched_request *req);
/* Schedules whose output has not been applied yet, oldest first (the next `output` applies
 * outstanding[0]). */
size_t kvsim_conform_runner_outstanding(const struct kvsim_conform_runner *r,
                                        struct sched_step *const **steps);
const struct kvsim_conform_stats *kvsim_conform_runner_stats(const struct kvsim_conform_runner *r);
/* Virtual time (ns; moved by `advance` ops only). */
int64_t kvsim_conform_runner_now(const struct kvsim_conform_runner *r);
/* Whether the scenario has offload tiers (config `offload`). */
bool kvsim_conform_runner_has_offload(const struct kvsim_conform_runner *r);
/* The tiers' earliest transfer end (kvsim_tiers_next_deadline; may be <= now when a transfer is
 * due but not applied yet: the next advance applies it), or OFFLOAD_NEVER (INT64_MAX) when
 * nothing is pending or there are no tiers. */
int64_t kvsim_conform_runner_next_deadline(const struct kvsim_conform_runner *r);
/* Transfers enqueued and not yet drained (kvsim_tiers_pending; 0 without tiers). */
uint32_t kvsim_conform_runner_pending_transfers(const struct kvsim_conform_runner *r);

/* Adds b into a. */
void kvsim_conform_stats_add(struct kvsim_conform_stats *a, const struct kvsim_conform_stats *b);

#endif /* KVSIM_CONFORM_H */
