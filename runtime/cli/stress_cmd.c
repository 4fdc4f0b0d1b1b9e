/*
 * stress_cmd.c - the stress command line: `kvsim stress` runs the offload pipeline part and then
 * the registry part (verify/stress_offload.c, verify/stress_registry.c); the stress_offload and
 * stress_registry executables (tests/stress/) run one part each through the same parser.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offload/offload.h"
#include "runtime/verify/verify.h"

#define REG_DEFAULT_STEPS   20000u /* stress_registry's default --ops */
#define REG_DEFAULT_SECONDS 2.0    /* stress_registry's default --seconds */

enum {
    O_THREADS = 256,
    O_LANES,
    O_PERMITS,
    O_WORKERS,
    O_BATCHES,
    O_SECONDS,
    O_FAIL_RATE,
    O_SEED,
    O_YIELD,
    O_POOL_SHUTDOWN,
    O_EAGER,
    O_GUARD_MS,
    O_READERS,
    O_WRITERS,
    O_OPS,
    O_HELP,
};

static const struct option longopts[] = {
    {"threads", required_argument, NULL, O_THREADS},
    {"lanes", required_argument, NULL, O_LANES},
    {"permits", required_argument, NULL, O_PERMITS},
    {"workers", required_argument, NULL, O_WORKERS},
    {"batches", required_argument, NULL, O_BATCHES},
    {"seconds", required_argument, NULL, O_SECONDS},
    {"fail-rate", required_argument, NULL, O_FAIL_RATE},
    {"seed", required_argument, NULL, O_SEED},
    {"yield", no_argument, NULL, O_YIELD},
    {"pool-shutdown", no_argument, NULL, O_POOL_SHUTDOWN},
    {"eager", no_argument, NULL, O_EAGER},
    {"guard-ms", required_argument, NULL, O_GUARD_MS},
    {"readers", required_argument, NULL, O_READERS},
    {"writers", required_argument, NULL, O_WRITERS},
    {"ops", required_argument, NULL, O_OPS},
    {"help", no_argument, NULL, O_HELP},
    {NULL, 0, NULL, 0},
};

/* The parts each option applies to (indexed like longopts). */
static const int option_parts[] = {
    KVSIM_STRESS_ALL,      KVSIM_STRESS_OFFLOAD,  KVSIM_STRESS_OFFLOAD,  KVSIM_STRESS_OFFLOAD,
    KVSIM_STRESS_ALL,      KVSIM_STRESS_ALL,      KVSIM_STRESS_OFFLOAD,  KVSIM_STRESS_ALL,
    KVSIM_STRESS_OFFLOAD,  KVSIM_STRESS_OFFLOAD,  KVSIM_STRESS_OFFLOAD,  KVSIM_STRESS_OFFLOAD,
    KVSIM_STRESS_REGISTRY, KVSIM_STRESS_REGISTRY, KVSIM_STRESS_REGISTRY, KVSIM_STRESS_ALL,
};
_Static_assert(sizeof option_parts / sizeof option_parts[0] ==
                   sizeof longopts / sizeof longopts[0] - 1,
               "one entry per option");

static void usage(FILE *f, const char *prog, int parts)
{
    fprintf(f, "usage: %s [options]\n", prog);
    if (parts == KVSIM_STRESS_ALL)
        fprintf(f, "Runs the offload pipeline stress, then the registry stress, and exits 1 on "
                   "any violation.\n");
    fprintf(f, "  --threads N      %s (default %s)\n",
            parts == KVSIM_STRESS_REGISTRY ? "readers N/2 (at least 1), writers the rest"
            : parts == KVSIM_STRESS_OFFLOAD
                ? "owner threads, one pipeline each"
                : "pipeline owner threads; registry readers N/2 (at least 1),\n"
                  "                   writers the rest",
            parts == KVSIM_STRESS_REGISTRY ? "1 and 1" : "3");
    fprintf(f, "  --batches K      %s (default %s)\n",
            parts == KVSIM_STRESS_REGISTRY ? "steps per writer (as --ops)"
                                           : "batches per owner (registry: steps per writer)",
            parts == KVSIM_STRESS_REGISTRY ? "--ops" : "3000");
    fprintf(f, "  --seconds S      %s\n",
            parts == KVSIM_STRESS_ALL        ? "run for S seconds instead (half for each part)"
            : parts == KVSIM_STRESS_REGISTRY ? "writers' time limit (default 2)"
                                             : "run for S seconds instead");
    fprintf(f, "  --seed S         seed (default 1)\n");
    if (parts & KVSIM_STRESS_OFFLOAD)
        fprintf(f,
                "pipeline:\n"
                "  --lanes L        lanes used per pipeline, 1..4 (default 4)\n"
                "  --permits P      permits per lane (default 2)\n"
                "  --workers W      pool worker threads (default 2)\n"
                "  --fail-rate F    injected failure probability (default 0.1)\n"
                "  --yield          yield at the pipeline's debug_yield points\n"
                "  --pool-shutdown  end by shutting the whole pool down (default: each "
                "pipeline)\n"
                "  --eager          the pool's eager hand-off: every batch wakes its worker and\n"
                "                   owners never take a batch back (default: adaptive)\n"
                "  --guard-ms MS    wall-clock guard of every wait (default 10000)\n");
    if (parts & KVSIM_STRESS_REGISTRY)
        fprintf(f,
                "registry:\n"
                "  --readers N      reader threads (keep readers + writers <= cores)\n"
                "  --writers N      writer threads\n"
                "  --ops N          steps per writer, %d hashes each (default %s)\n",
                KVSIM_STRESS_REG_BATCH, parts == KVSIM_STRESS_REGISTRY ? "20000" : "--batches");
    fprintf(f, "Exit status: 0 no violation; 1 a violation, or a part could not run; 2 usage "
               "error.\n");
}

static void summary(FILE *out, const char *prog, const char *part, int rc,
                    const struct kvsim_stress_result *r)
{
    fprintf(out, "%s: %s: %" PRIu64 " ops in %.2f s, %.0f ops/s, ", prog, part, r->ops,
            r->elapsed_s, r->elapsed_s > 0 ? (double)r->ops / r->elapsed_s : 0.0);
    if (rc == 0)
        fprintf(out, "ok\n");
    else if (r->violations)
        fprintf(out, "FAILED (%" PRIu64 " violations)\n", r->violations);
    else
        fprintf(out, "FAILED (could not run)\n");
    fflush(out);
}

/* The options given, beyond their values. */
struct stress_given {
    bool seconds, batches, threads, readers, writers, ops;
    uint64_t ops_value;
};

/* One option's value into *o. Returns 0 or -EINVAL (reported). */
static int parse_stress_option(struct cli_parser *p, int c, struct kvsim_stress_opts *o,
                               struct stress_given *g)
{
    switch (c) {
    case O_THREADS: g->threads = true; return cli_u32(p, 1, 64, &o->threads);
    case O_LANES: return cli_u32(p, 1, OFFLOAD_NUM_LANES, &o->lanes);
    case O_PERMITS: return cli_u32(p, 1, 16, &o->permits);
    case O_WORKERS: return cli_u32(p, 1, 64, &o->workers);
    case O_BATCHES: g->batches = true; return cli_u64(p, 1, KVSIM_STRESS_MAX_BATCHES, &o->batches);
    case O_SECONDS: g->seconds = true; return cli_double(p, 0, true, 3600, &o->seconds);
    case O_FAIL_RATE: return cli_double(p, 0, false, 1, &o->fail_rate);
    case O_SEED: return cli_u64(p, 0, UINT64_MAX, &o->seed);
    case O_YIELD: o->yield = true; return 0;
    case O_POOL_SHUTDOWN: o->pool_shutdown = true; return 0;
    case O_EAGER: o->eager = true; return 0;
    case O_GUARD_MS: {
        uint64_t v = 0;
        int rc = cli_u64(p, 1, 3600000, &v);
        o->guard_ms = (int64_t)v;
        return rc;
    }
    case O_READERS: g->readers = true; return cli_u32(p, 0, 64, &o->readers);
    case O_WRITERS: g->writers = true; return cli_u32(p, 1, 64, &o->writers);
    case O_OPS: g->ops = true; return cli_u64(p, 1, KVSIM_STRESS_UNBOUNDED_STEPS, &g->ops_value);
    }
    return -EINVAL;
}

/* Parses the options. Returns 0, 1 (help printed) or -EINVAL (reported). */
static int parse_stress_args(struct cli_parser *p, int parts, struct kvsim_stress_opts *o,
                             struct stress_given *g)
{
    int c;
    while ((c = cli_next(p)) > 0) {
        if (c == 'h' || c == O_HELP) {
            usage(stdout, p->prog, parts);
            return 1;
        }
        if (!(option_parts[c - O_THREADS] & parts))
            return cli_error(p, "option %s does not apply to the %s stress", p->name,
                             parts == KVSIM_STRESS_OFFLOAD ? "pipeline" : "registry");
        if (parse_stress_option(p, c, o, g))
            return -EINVAL;
    }
    if (c < 0)
        return c;
    if (cli_optind() < p->argc)
        return cli_error(p, "unexpected argument '%s'", p->argv[cli_optind()]);
    if (g->seconds && g->batches)
        return cli_error(p, "options --batches and --seconds exclude each other");
    return 0;
}

int cli_stress(const char *prog, int parts, int argc, char **argv)
{
    struct kvsim_stress_opts o = {
        .prog = prog,
        .threads = 3,
        .lanes = 4,
        .permits = 2,
        .workers = 2,
        .batches = 3000,
        .fail_rate = 0.1,
        .guard_ms = 10000,
        .seed = 1,
    };
    struct stress_given given = {0};
    struct cli_parser p;
    cli_begin(&p, prog, argc, argv, longopts, "h");
    int prc = parse_stress_args(&p, parts, &o, &given);
    if (prc > 0)
        return CLI_EXIT_OK;
    if (prc < 0) {
        fprintf(stderr, "%s: try '%s --help'\n", prog, prog);
        return CLI_EXIT_USAGE;
    }
    bool seconds_given = given.seconds, batches_given = given.batches;
    bool threads_given = given.threads, readers_given = given.readers;
    bool writers_given = given.writers, ops_given = given.ops;
    uint64_t ops = given.ops_value;

    /* Durations: --seconds is split between the parts that run. */
    double share = seconds_given ? o.seconds / (parts == KVSIM_STRESS_ALL ? 2 : 1) : 0;
    struct kvsim_stress_opts po = o, ro = o;
    if (seconds_given) {
        po.batches = 0;
        po.seconds = share;
    }
    /* The registry: readers and writers from --threads unless given; steps from --ops, else
     * --batches, else unbounded under --seconds; stress_registry alone keeps its defaults. */
    bool reg_only = parts == KVSIM_STRESS_REGISTRY;
    uint32_t derived_readers = o.threads / 2 ? o.threads / 2 : 1;
    uint32_t derived_writers = o.threads - o.threads / 2;
    if (!readers_given)
        ro.readers = reg_only && !threads_given ? 1 : derived_readers;
    if (!writers_given)
        ro.writers = reg_only && !threads_given ? 1 : derived_writers;
    if (ops_given)
        ro.steps = ops;
    else if (batches_given)
        ro.steps = o.batches;
    else if (reg_only)
        ro.steps = REG_DEFAULT_STEPS;
    else
        ro.steps = seconds_given ? KVSIM_STRESS_UNBOUNDED_STEPS : o.batches;
    ro.seconds = seconds_given ? share : reg_only ? REG_DEFAULT_SECONDS : 0;

    int failed = 0;
    struct kvsim_stress_result res;
    if (parts & KVSIM_STRESS_OFFLOAD) {
        fflush(stdout);
        int rc = kvsim_stress_offload_run(&po, stdout, &res);
        summary(stdout, prog, "pipeline", rc, &res);
        failed |= rc != 0;
    }
    if (parts & KVSIM_STRESS_REGISTRY) {
        int rc = kvsim_stress_registry_run(&ro, stdout, &res);
        summary(stdout, prog, "registry", rc, &res);
        failed |= rc != 0;
    }
    printf("%s: %s\n", prog, failed ? "FAILED" : "ok");
    return failed ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}

int cli_stress_main(int argc, char **argv)
{
    return cli_stress("kvsim stress", KVSIM_STRESS_ALL, argc, argv);
}
