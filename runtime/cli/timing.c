/*
 * timing.c - the options that choose a step model and size the KV cache from a model and a GPU
 * (cli.h), shared by `kvsim replay` and `kvsim validate`. Main thread only.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void cli_timing_default(struct cli_timing *t)
{
    memset(t, 0, sizeof *t);
    t->tp = 1;
    /* LLMServingSim's cluster configuration of the shared vLLM runs: 16 GiB/s, 20 us a message */
    t->tp_link_gbps = 16;
    t->tp_link_latency_us = 20;
    t->gpu_memory_utilization = 0.9;
}

int cli_parse_timing_option(struct cli_parser *p, int c, struct cli_timing *t)
{
    switch (c) {
    case CLI_O_PROFILES: t->profiles = p->arg; return 0;
    case CLI_O_HARDWARE: t->hardware = p->arg; return 0;
    case CLI_O_MODEL: t->model = p->arg; return 0;
    case CLI_O_TP: return cli_u32(p, 1, 64, &t->tp);
    case CLI_O_TPGBPS: return cli_double(p, 0, true, 1e6, &t->tp_link_gbps);
    case CLI_O_TPLAT: return cli_double(p, 0, false, 1e9, &t->tp_link_latency_us);
    case CLI_O_GPUMEM: return cli_double(p, 0, true, 1e6, &t->gpu_memory_gib);
    case CLI_O_GPUUTIL: return cli_double(p, 0, true, 1, &t->gpu_memory_utilization);
    }
    return 1;
}

int cli_timing_apply(const struct cli_parser *p, struct cli_timing *t, struct sched_config *sc,
                     struct kvsim_step_model *m, uint64_t *kv_bytes_per_token)
{
    char err[768];
    if ((t->profiles || t->hardware) && !(t->profiles && t->hardware && t->model))
        return cli_error(p, "a profile needs --profiles ROOT, --hardware HW and --model ORG/NAME");
    if (t->gpu_memory_gib > 0 && !t->model)
        return cli_error(p, "--gpu-memory-gib needs --model ORG/NAME (its layers and KV heads)");
    if (t->model && !t->profiles)
        return cli_error(p,
                         "--model needs --profiles ROOT (ROOT/configs/model/%s.json is its "
                         "Hugging Face config)",
                         t->model);
    if (!t->model)
        return 0;
    struct kvsim_model_arch arch;
    const struct kvsim_model_arch *a = &arch;
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/model/%s.json", t->profiles, t->model);
    int rc = kvsim_model_arch_load(path, t->model, &arch, err, sizeof err);
    if (rc)
        return cli_error(p, "--model %s", err);
    if (t->hardware) {
        struct kvsim_profile_config pc = {
            .root = t->profiles,
            .hardware = t->hardware,
            .model = t->model,
            .tp = t->tp,
            .tp_link_gbps = t->tp_link_gbps,
            .tp_link_latency_ns = (int64_t)(t->tp_link_latency_us * 1e3),
        };
        if ((rc = kvsim_profile_load(&pc, &t->profile, err, sizeof err)))
            return cli_error(p, "--profiles %s", err);
        m->profile = t->profile;
    }
    if (!(t->gpu_memory_gib > 0))
        return 0;
    struct kvsim_gpu_config g = {
        .gpu_memory_gib = t->gpu_memory_gib,
        .gpu_memory_utilization = t->gpu_memory_utilization,
        .tp = t->tp,
        .block_size = sc->block_size,
        .max_num_batched_tokens = sc->max_num_batched_tokens,
        .max_num_seqs = sc->max_num_seqs,
    };
    if ((rc = kvsim_gpu_capacity_derive(a, &g, &t->capacity, err, sizeof err)))
        return cli_error(p, "--gpu-memory-gib: %s", err);
    if (t->capacity.num_gpu_blocks > INT32_MAX - 2)
        return cli_error(p, "--gpu-memory-gib: %llu blocks are more than kvsim handles",
                         (unsigned long long)t->capacity.num_gpu_blocks);
    if (!t->blocks_given) /* --num-gpu-blocks wins, as num_gpu_blocks_override in vLLM */
        sc->num_blocks = (uint32_t)t->capacity.num_gpu_blocks;
    if (kv_bytes_per_token && !t->kv_bytes_given)
        *kv_bytes_per_token = t->capacity.kv_bytes_per_token;
    return 0;
}

void cli_timing_fini(struct cli_timing *t)
{
    kvsim_profile_free(t->profile);
    t->profile = NULL;
}
