/*
 * kvsim_main.c - the `kvsim` command: global options, then one subcommand (cli.h).
 */
#include <stdio.h>
#include <string.h>

#include "runtime/cli/cli.h"
#ifdef KVSIM_HAVE_MPI
#include "runtime/cli/sweep.h"
#endif
#include "runtime/runtime.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvsim [--version] [--help] <command> [options]\n"
            "\n"
            "commands:\n"
            "  replay      replay a trace (or the built-in workload) through N engines\n"
            "  validate    replay a recorded vLLM run and compare its latencies and\n"
            "              throughput with the real ones (the Diff%% table)\n"
            "  calibrate   fit the step model to part of a recorded vLLM run and\n"
            "              compare the fitted and the held-out requests\n"
            "  sweep       replay a grid of configurations (--grid OPTION=v1,v2,...) in\n"
            "              worker processes: one row and one report per point\n"
            "  plan        the fewest engines that meet an SLO (--min engines=LO..HI), or\n"
            "              the most load a configuration serves at it (--max\n"
            "              arrival-speedup=LO..HI), by replays the search picks\n"
            "  conform     run conformance scenarios against the scheduler core\n"
            "  soak        seeded randomized scheduler runs checking invariants and\n"
            "              liveness; failing seeds are written as scenarios\n"
            "  minimize    shrink a failing scenario while it fails the same way\n"
            "  stress      hammer the offload pipeline and the block registry from many\n"
            "              threads and check their invariants\n"
            "  pool-demo   walk through the G1 block pool (prefix hits, free order,\n"
            "              eviction, an aborted plan, the ownership check)\n"
            "\n"
            "options:\n"
            "  -V, --version   print the version and the allocator, then exit\n"
            "  -h, --help      print this help, then exit\n"
            "\n"
            "`kvsim <command> --help` describes a command.\n"
            "\n"
            "Exit status (every command; docs/robustness.md):\n"
            "  0    success\n"
            "  1    the run failed: a scenario or seed failed, a violation, a scheduler dead\n"
            "       end, out of memory, an output that could not be written after the work\n"
            "  2    usage error or bad input: an option, a file refused (naming its line and\n"
            "       field; conform: an INVALID scenario), a path that cannot be read, an\n"
            "       output that cannot be written (checked before the work); wins over 1\n"
            "  130  replay interrupted by SIGINT (a partial report is written; sweep and plan:\n"
            "       the rows so far); SIGTERM 143, SIGHUP 129 alike\n");
}

static const struct {
    const char *name;
    int (*main)(int argc, char **argv);
} commands[] = {
    {"replay", cli_replay_main},       {"validate", cli_validate_main},
    {"calibrate", cli_calibrate_main}, {"conform", cli_conform_main},
    {"soak", cli_soak_main},           {"minimize", cli_minimize_main},
    {"stress", cli_stress_main},       {"pool-demo", cli_pool_demo_main},
    {"sweep", cli_sweep_main},         {"plan", cli_plan_main},
};

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct cli_parser p;
    int c;
    /* '+' stops at the first non-option: options after the command belong to the command. */
    cli_begin(&p, "kvsim", argc, argv, opts, "+Vh");
    while ((c = cli_next(&p)) > 0) {
        if (c == 'V') {
#ifdef KVSIM_HAVE_MPI
            printf("%s (allocator: %s, mpi: %s)\n", kvsim_version(), kvsim_allocator(),
                   sweep_mpi_library());
#else
            printf("%s (allocator: %s, mpi: none)\n", kvsim_version(), kvsim_allocator());
#endif
            return CLI_EXIT_OK;
        }
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (c < 0) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    int first = cli_optind();
    if (first >= argc) {
        cli_error(&p, "missing command");
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[first], commands[i].name) == 0)
            return commands[i].main(argc - first, argv + first);
    cli_error(&p, "unknown command '%s'", argv[first]);
    usage(stderr);
    return CLI_EXIT_USAGE;
}
