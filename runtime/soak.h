/*
 * soak.h - seeded soaks (runtime/soak.c) and failure minimization (runtime/minimize.c), private
 * to runtime/ and tests/.
 *
 * A soak seed picks a configuration from a matrix of dimensions (scheduler, workload, offload
 * tiers) and drives the scheduler by building a scenario as it goes: every op it appends to the
 * scenario's steps is executed at once through the in-process scenario runner
 * (runtime/conform.h) with check_invariants, check_liveness and max_futile_preemptions on (unless
 * `--checks` says otherwise), so a failing seed's scenario file replays exactly what ran. With
 * offload tiers it also moves virtual time (`advance` ops). The minimizer shrinks such a file
 * with delta debugging.
 */
#ifndef KVSIM_SOAK_H
#define KVSIM_SOAK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/conform.h"

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

/*
 * kvsim_soak_run_seed - build and run one seed's scenario. *doc receives the scenario (name,
 * source, config with the check keys on, the steps that ran: on a failure, up to and including
 * the failing one); res the verdict; stats what ran. Returns 0 (the seed passed), 1 (it
 * failed), or a negative errno (nothing meaningful ran).
 */
int kvsim_soak_run_seed(uint64_t seed, enum kvsim_soak_matrix matrix,
                        const struct kvsim_soak_overrides *o, json_t **doc,
                        struct kvsim_conform_result *res, struct kvsim_conform_stats *stats);

/* ---- scenario files -------------------------------------------------------------------------- */

/* Writes a scenario with one step per line (as the checked-in scenarios are). Returns 0 or a
 * negative errno. */
int kvsim_scenario_write(const json_t *doc, FILE *f);
/* Writes it to path (atomically enough for our use: a temporary file renamed). Returns 0 or a
 * negative errno. */
int kvsim_scenario_write_file(const json_t *doc, const char *path);

/*
 * kvsim_scenario_drop_requests - a copy of steps without the requests named in drop (an object
 * used as a set of ids): their `add`s go, every op that names only them (abort, kv_*) goes,
 * and their ids leave every list and map of the other ops (sampled, finished_recving,
 * finished_sending, ids, expect; an expected blocked_on_offload naming one goes). An abort left
 * without ids goes too.
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

#endif /* KVSIM_SOAK_H */
