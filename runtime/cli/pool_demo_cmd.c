/*
 * pool_demo_cmd.c - `kvsim pool-demo`: the self-checking walk through the G1 pool (verify.h).
 */
#include "runtime/cli/cli.h"

#include <stdio.h>

#include "runtime/verify/verify.h"

int cli_pool_demo_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct cli_parser p;
    int c;
    cli_begin(&p, "kvsim pool-demo", argc, argv, opts, "h");
    while ((c = cli_next(&p)) > 0) {
        printf("usage: kvsim pool-demo\n\nWalks through the G1 block pool (prefix hits, free "
               "order, eviction, an aborted\nplan, the ownership check) and checks each step "
               "against vLLM's behaviour.\nExit status: 0 ok; 1 a step misbehaved; 2 usage "
               "error.\n");
        return CLI_EXIT_OK;
    }
    if (c < 0)
        return CLI_EXIT_USAGE;
    if (cli_optind() < argc) {
        cli_error(&p, "unexpected argument '%s'", argv[cli_optind()]);
        return CLI_EXIT_USAGE;
    }
    return kvsim_pool_demo(stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILED;
}
