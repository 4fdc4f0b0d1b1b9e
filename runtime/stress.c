/*
 * stress.c - the stress command line: `kvsim stress` runs the offload pipeline part and then the
 * registry part (runtime/stress_offload.c, runtime/stress_registry.c); the stress_offload and
 * stress_registry executables (tests/stress/) run one part each through the same parser.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offload/offload.h"
#include "runtime/runtime.h"
#include "runtime/stress.h"

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
    {"guard-ms", required_argument, NULL, O_GUARD_MS},
    {"readers", required_argument, NULL, O_READERS},
    {"writers", required_argument, NULL, O_WRITERS},
    {"ops", required_argument, NULL, O_OPS},
    {"help", no_argument, NULL, O_HELP},
    {NULL, 0, NULL, 0},
};

/* The parts each option applies to (indexed like longopts). */
static const int option_parts[] = {
    KVSIM_STRESS_ALL,      KVSIM_STRESS_OFFLOAD,  KVSIM_STRESS_OFFLOAD, KVSIM_STRESS_OFFLOAD,
    KVSIM_STRESS_ALL,      KVSIM_STRESS_ALL,      KVSIM_STRESS_OFFLOAD, KVSIM_STRESS_ALL,
    KVSIM_STRESS_OFFLOAD,  KVSIM_STRESS_OFFLOAD,  KVSIM_STRESS_OFFLOAD, KVSIM_STRESS_REGISTRY,
    KVSIM_STRESS_REGISTRY, KVSIM_STRESS_REGISTRY, KVSIM_STRESS_ALL,
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
        fprintf(f, "pipeline:\n"
                   "  --lanes L        lanes used per pipeline, 1..4 (default 4)\n"
                   "  --permits P      permits per lane (default 2)\n"
                   "  --workers W      pool worker threads (default 2)\n"
                   "  --fail-rate F    injected failure probability (default 0.1)\n"
                   "  --yield          yield at the pipeline's debug_yield points\n"
                   "  --pool-shutdown  end by shutting the whole pool down (default: each "
                   "pipeline)\n"
                   "  --guard-ms MS    wall-clock guard of every wait (default 10000)\n");
    if (parts & KVSIM_STRESS_REGISTRY)
        fprintf(f,
                "registry:\n"
                "  --readers N      reader threads (keep readers + writers <= cores)\n"
                "  --writers N      writer threads\n"
                "  --ops N          steps per writer, %d hashes each (default %s)\n",
                KVSIM_STRESS_REG_BATCH, parts == KVSIM_STRESS_REGISTRY ? "20000" : "--batches");
}

/* Strict unsigned parse: the whole string, in [min, max]; a message naming the option if not. */
static bool parse_u64(const char *prog, const char *opt, const char *s, uint64_t min, uint64_t max,
                      uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = *s && *s != '-' ? strtoull(s, &end, 10) : 0;
    if (!*s || *s == '-' || errno || *end || v < min || v > max) {
        fprintf(stderr, "%s: option --%s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]\n",
                prog, opt, s, min, max);
        return false;
    }
    *out = v;
    return true;
}

/* Strict number in (min, max], or [min, max] when min_inclusive. */
static bool parse_double(const char *prog, const char *opt, const char *s, double min,
                         bool min_inclusive, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || errno || *end || !(min_inclusive ? v >= min : v > min) || !(v <= max)) {
        fprintf(stderr, "%s: option --%s: '%s' is not a number in %c%g, %g]\n", prog, opt, s,
                min_inclusive ? '[' : '(', min, max);
        return false;
    }
    *out = v;
    return true;
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

int kvsim_stress_cli(const char *prog, int parts, int argc, char **argv)
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
    bool seconds_given = false, batches_given = false, threads_given = false;
    bool readers_given = false, writers_given = false, ops_given = false;
    uint64_t ops = 0, v = 0;
    double d = 0;
    int c, idx, status = 0;
    int saved_opterr = opterr;
    opterr = 0; /* our own messages, naming the option */
    optind = 0; /* a full rescan: kvsim's own getopt_long ran before */
    while (status == 0 && (c = getopt_long(argc, argv, ":h", longopts, &idx)) != -1) {
        const char *name = c >= O_THREADS && c <= O_HELP ? longopts[c - O_THREADS].name : "";
        if (c >= O_THREADS && c <= O_HELP && !(option_parts[c - O_THREADS] & parts)) {
            fprintf(stderr, "%s: option --%s does not apply to the %s stress\n", prog, name,
                    parts == KVSIM_STRESS_OFFLOAD ? "pipeline" : "registry");
            status = 2;
            break;
        }
        switch (c) {
        case O_THREADS:
            if (!parse_u64(prog, name, optarg, 1, 64, &v))
                status = 2;
            o.threads = (uint32_t)v;
            threads_given = true;
            break;
        case O_LANES:
            if (!parse_u64(prog, name, optarg, 1, OFFLOAD_NUM_LANES, &v))
                status = 2;
            o.lanes = (uint32_t)v;
            break;
        case O_PERMITS:
            if (!parse_u64(prog, name, optarg, 1, 16, &v))
                status = 2;
            o.permits = (uint32_t)v;
            break;
        case O_WORKERS:
            if (!parse_u64(prog, name, optarg, 1, 64, &v))
                status = 2;
            o.workers = (uint32_t)v;
            break;
        case O_BATCHES:
            if (!parse_u64(prog, name, optarg, 1, KVSIM_STRESS_MAX_BATCHES, &v))
                status = 2;
            o.batches = v;
            batches_given = true;
            break;
        case O_SECONDS:
            if (!parse_double(prog, name, optarg, 0, false, 3600, &d))
                status = 2;
            o.seconds = d;
            seconds_given = true;
            break;
        case O_FAIL_RATE:
            if (!parse_double(prog, name, optarg, 0, true, 1, &d))
                status = 2;
            o.fail_rate = d;
            break;
        case O_SEED:
            if (!parse_u64(prog, name, optarg, 0, UINT64_MAX, &v))
                status = 2;
            o.seed = v;
            break;
        case O_YIELD: o.yield = true; break;
        case O_POOL_SHUTDOWN: o.pool_shutdown = true; break;
        case O_GUARD_MS:
            if (!parse_u64(prog, name, optarg, 1, 3600000, &v))
                status = 2;
            o.guard_ms = (int64_t)v;
            break;
        case O_READERS:
            if (!parse_u64(prog, name, optarg, 0, 64, &v))
                status = 2;
            o.readers = (uint32_t)v;
            readers_given = true;
            break;
        case O_WRITERS:
            if (!parse_u64(prog, name, optarg, 1, 64, &v))
                status = 2;
            o.writers = (uint32_t)v;
            writers_given = true;
            break;
        case O_OPS:
            if (!parse_u64(prog, name, optarg, 1, KVSIM_STRESS_UNBOUNDED_STEPS, &ops))
                status = 2;
            ops_given = true;
            break;
        case 'h':
        case O_HELP:
            usage(stdout, prog, parts);
            opterr = saved_opterr;
            return 0;
        case ':':
            fprintf(stderr, "%s: option %s needs a value\n", prog, argv[optind - 1]);
            status = 2;
            break;
        default:
            if (optopt)
                fprintf(stderr, "%s: unknown option '-%c'\n", prog, optopt);
            else
                fprintf(stderr, "%s: unknown option '%s'\n", prog, argv[optind - 1]);
            status = 2;
            break;
        }
    }
    opterr = saved_opterr;
    if (status == 0 && optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        status = 2;
    }
    if (status == 0 && seconds_given && batches_given) {
        fprintf(stderr, "%s: options --batches and --seconds exclude each other\n", prog);
        status = 2;
    }
    if (status) {
        fprintf(stderr, "%s: try '%s --help'\n", prog, prog);
        return status;
    }

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
        failed |= rc;
    }
    if (parts & KVSIM_STRESS_REGISTRY) {
        int rc = kvsim_stress_registry_run(&ro, stdout, &res);
        summary(stdout, prog, "registry", rc, &res);
        failed |= rc;
    }
    printf("%s: %s\n", prog, failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}

int kvsim_stress_main(int argc, char **argv)
{
    return kvsim_stress_cli("kvsim stress", KVSIM_STRESS_ALL, argc, argv);
}
