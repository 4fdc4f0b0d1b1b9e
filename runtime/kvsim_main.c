/*
 * kvsim_main.c - the `kvsim` command line.
 *
 * Subcommands: replay, conform, soak, minimize, stress, pool-demo.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: kvsim [--version] [--help] <command> [options]\n"
                 "\n"
                 "commands:\n"
                 "  replay      replay a trace (or the built-in workload) through N engines\n"
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
                 "  -h, --help      print this help, then exit\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    /* '+' stops at the first non-option: options after the command belong to the command. */
    while ((c = getopt_long(argc, argv, "+Vh", opts, NULL)) != -1) {
        switch (c) {
        case 'V': printf("%s (allocator: %s)\n", kvsim_version(), kvsim_allocator()); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "kvsim: missing command\n");
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    if (strcmp(cmd, "pool-demo") == 0) {
        if (optind + 1 < argc) {
            fprintf(stderr, "kvsim pool-demo: unexpected argument '%s'\n", argv[optind + 1]);
            return 2;
        }
        return kvsim_pool_demo(stdout) == 0 ? 0 : 1;
    }
    if (strcmp(cmd, "replay") == 0)
        return kvsim_replay_main(argc - optind, argv + optind);
    if (strcmp(cmd, "conform") == 0)
        return kvsim_conform_main(argc - optind, argv + optind);
    if (strcmp(cmd, "soak") == 0)
        return kvsim_soak_main(argc - optind, argv + optind);
    if (strcmp(cmd, "minimize") == 0)
        return kvsim_minimize_main(argc - optind, argv + optind);
    if (strcmp(cmd, "stress") == 0)
        return kvsim_stress_main(argc - optind, argv + optind);
    fprintf(stderr, "kvsim: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
