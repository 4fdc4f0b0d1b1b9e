/*
 * timing.c - the options that choose a step model and size the KV cache from a model and a GPU
 * (cli.h), shared by `kvsim validate` and `kvsim calibrate` (`kvsim replay` reads them through
 * the option table of api/config.c). Main thread only.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void cli_timing_default(struct cli_timing *t)
{
    memset(t, 0, sizeof *t);
    kvsim_timing_opts_default(&t->o);
}

int cli_table_set(struct cli_parser *p, struct cli_timing *t, uint32_t *blocks)
{
    struct kvsim_options o = {.timing = t->o};
    char err[512];
    if (kvsim_options_set(&o, p->long_name, p->arg, err, sizeof err) != 0)
        return cli_error(p, "%s", err);
    bool blocks_given = t->o.blocks_given;
    t->o = o.timing;
    t->o.blocks_given = blocks_given; /* the caller passes the count on itself */
    if (o.timing.blocks_given && blocks)
        *blocks = o.replay.sched.num_blocks;
    return 0;
}

int cli_timing_apply(const struct cli_parser *p, struct cli_timing *t, struct sched_config *sc,
                     struct kvsim_step_model *m, uint64_t *kv_bytes_per_token)
{
    char err[1024];
    kvsim_timing_fini(&t->r);
    if (kvsim_timing_resolve(&t->o, sc, m, kv_bytes_per_token, &t->r, err, sizeof err))
        return cli_error(p, "%s", err);
    return 0;
}

void cli_timing_fini(struct cli_timing *t) { kvsim_timing_fini(&t->r); }
