/*
 * stress.h - the stress harnesses behind `kvsim stress` and the stress_offload / stress_registry
 * executables (private to runtime/ and tests/stress/).
 *
 * Two parts, each a self-checking run that prints what it did and returns 0 (no violation) or 1:
 *  - the offload pipeline (runtime/stress_offload.c): owner threads hammering pipelines on one
 *    shared thread pool; checks permits, exactly-once completion, settlement and liveness;
 *  - the block registry (runtime/stress_registry.c): writers, readers and a reclaimer on one
 *    registry; checks the watermark contract on every read.
 * The parts use process-wide state: run one at a time.
 */
#ifndef KVSIM_STRESS_H
#define KVSIM_STRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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
 * 1 otherwise (including a setup failure, reported on stderr).
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

/*
 * kvsim_stress_cli - parse a stress command line (argv[0] is the command name, prog the message
 * prefix), run the selected parts one after the other (splitting --seconds between them), print
 * a summary line per part and the verdict "<prog>: ok" or "<prog>: FAILED". The defaults depend
 * on parts: the registry alone keeps stress_registry's (1 reader, 1 writer, 20000 steps, 2 s).
 * Returns the exit status: 0, 1 (a violation), 2 (a usage error, message on stderr).
 */
int kvsim_stress_cli(const char *prog, int parts, int argc, char **argv);

#endif /* KVSIM_STRESS_H */
