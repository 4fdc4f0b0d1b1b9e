/*
 * replay_cmd.c - `kvsim replay [options]`: the options into a kvsim_replay_config, the run, the
 * table and the JSON report.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

static void replay_usage(FILE *out)
{
    fprintf(out,
            "usage: kvsim replay [options]\n"
            "\n"
            "Replays a request trace (or the built-in synthetic workload) through N simulated\n"
            "vLLM engines behind a router, in virtual time, and prints a report.\n"
            "\n"
            "input:\n"
            "  --trace FILE               Mooncake JSONL or Azure CSV (default: synthetic)\n"
            "  --format mooncake|azure|vllm-run  trace format (default: from the file\n"
            "                             extension; vllm-run: a recorded run's requests.jsonl)\n"
            "  --trace-block-size N       tokens per Mooncake hash id (512)\n"
            "  --arrival-speedup X        divide inter-arrival gaps by X (1)\n"
            "  --max-requests N           replay only the first N requests (all)\n"
            "  --seed S                   seed of the synthetic workload (1)\n"
            "cluster:\n"
            "  --engines N                engines (4)\n"
            "  --threads T                worker threads (number of CPUs)\n"
            "  --router POLICY            round-robin | least-loaded | kv (kv)\n"
            "  --kv-index pool|events     kv router's overlap source: the engines' prefix-cache\n"
            "                             maps, or an indexer fed by their KV events (pool);\n"
            "                             both see the same blocks at every boundary\n"
            "engine:\n"
            "  --block-size B             tokens per KV block (16)\n"
            "  --num-gpu-blocks N         KV blocks per engine, null block included (16384)\n"
            "  --max-num-seqs N           running-set cap (256)\n"
            "  --max-num-batched-tokens N token budget per step (8192)\n"
            "  --max-model-len N          longest sequence (262144)\n"
            "  --check-invariants         check the scheduler's and the pool's invariants\n"
            "                             after every schedule and update (slow; as the\n"
            "                             tests do): a violation stops the replay\n"
            "  --config FILE.json         step-time model coefficients and speedup_ratio\n"
            "timing and capacity from a model and a GPU (docs/fidelity/timing.md):\n"
            "  --profiles ROOT            LLMServingSim-format profiles and model configs\n"
            "  --hardware HW              time steps with ROOT/HW/ORG/NAME/bf16/tpN/ (the\n"
            "                             profile step model instead of the polynomial)\n"
            "  --model ORG/NAME           the model (ROOT/configs/model/ORG/NAME.json)\n"
            "  --tp N                     tensor parallel degree (1)\n"
            "  --tp-link-gbps X           all-reduce link bandwidth, GiB/s (16)\n"
            "  --tp-link-latency-us X     all-reduce link latency per message (20)\n"
            "  --gpu-memory-gib G         one GPU's memory: derive --num-gpu-blocks and\n"
            "                             --kv-bytes-per-token the vLLM way (either option\n"
            "                             given wins, as num_gpu_blocks_override)\n"
            "  --gpu-memory-utilization U fraction of it vLLM may use (0.9)\n");
    fprintf(out,
            "offload tiers (off unless --g2-blocks is given):\n"
            "  --g2-blocks N              host-memory tier per engine, in blocks\n"
            "  --g3-blocks N              disk tier per engine, in blocks (0: none)\n"
            "  --g3-shared                one G3 of --g3-blocks blocks shared by all engines\n"
            "                             instead (LRU at epoch boundaries; an engine sees the\n"
            "                             others' writes from the next boundary on)\n"
            "  --g3-write-through         copy every block G2 receives on to G3 (default: only\n"
            "                             blocks G2 evicts)\n"
            "  --offload-executor inline|pool  run copies on the engine's thread or on a\n"
            "                             thread pool; the report is the same (inline)\n"
            "  --offload-threads N        pool workers (2)\n"
            "  --offload-fail-rate F      probability in [0, 1] that a copy batch fails (0)\n"
            "  --offload-seed S           seed of the failure injection (1)\n"
            "  --kv-bytes-per-token N     KV bytes per token, all layers (131072)\n"
            "  --g1-g2-gbps X             GPU<->host bandwidth per direction, GB/s (14)\n"
            "  --g2-g3-gbps X             host<->disk bandwidth per direction, GB/s (7)\n"
            "disaggregated serving (off unless --prefill-engines is given):\n"
            "  --prefill-engines P        prefill engines (instead of --engines)\n"
            "  --decode-engines D         decode engines\n"
            "  --prefill-engine-args F    vLLM engine arguments of the prefill pool (JSON:\n"
            "                             block_size, num_gpu_blocks_override, max_num_seqs,\n"
            "                             max_num_batched_tokens, max_model_len, ...), over\n"
            "                             the engine options above\n"
            "  --decode-engine-args F     the same for the decode pool\n"
            "  --prefill-router POLICY    round-robin | least-loaded | kv (kv)\n"
            "  --decode-router POLICY     round-robin | least-loaded | kv (kv)\n"
            "  --kv-transfer-gbps X       prefill->decode link bandwidth, GB/s (25)\n"
            "  --kv-transfer-latency-us X fixed cost of one KV transfer (0)\n"
            "  --kv-transfer-abort-timeout-ms X  a pinned source is freed this long after\n"
            "                             the pin (480000, VLLM_NIXL_ABORT_REQUEST_TIMEOUT;\n"
            "                             0: never)\n"
            "  --handoff-release pinned|immediate  keep the source until the decode read it\n"
            "                             (pinned, vLLM) or free it when the prefill ends\n"
            "                             (immediate: a what-if without stranding)\n"
            "  --handoff-events FILE      one JSON line per handoff lifecycle event\n");
    fprintf(out, "output:\n"
                 "  --report FILE              JSON report\n"
                 "  --requests-out FILE        per-request records (JSONL)\n"
                 "  --quiet                    no table, no progress bar\n"
                 "  -h, --help                 this help\n");
}

enum {
    O_TRACE = 256,
    O_FORMAT,
    O_TBS,
    O_SPEEDUP,
    O_MAXREQ,
    O_SEED,
    O_ENGINES,
    O_THREADS,
    O_ROUTER,
    O_BS,
    O_BLOCKS,
    O_SEQS,
    O_TOKENS,
    O_MML,
    O_CONFIG,
    O_REPORT,
    O_REQOUT,
    O_QUIET,
    O_CHECK,
    O_KVINDEX,
    O_G2,
    O_G3,
    O_G3WT,
    O_OEXEC,
    O_OTHREADS,
    O_OFAIL,
    O_OSEED,
    O_KVBYTES,
    O_G12BW,
    O_G23BW,
    O_G3SHARED,
    O_PENGINES,
    O_DENGINES,
    O_PARGS,
    O_DARGS,
    O_PROUTER,
    O_DROUTER,
    O_XGBPS,
    O_XLAT,
    O_XABORT,
    O_HRELEASE,
    O_HEVENTS,
};

static const struct option replay_opts[] = {
    {"trace", required_argument, NULL, O_TRACE},
    {"format", required_argument, NULL, O_FORMAT},
    {"trace-block-size", required_argument, NULL, O_TBS},
    {"arrival-speedup", required_argument, NULL, O_SPEEDUP},
    {"max-requests", required_argument, NULL, O_MAXREQ},
    {"seed", required_argument, NULL, O_SEED},
    {"engines", required_argument, NULL, O_ENGINES},
    {"threads", required_argument, NULL, O_THREADS},
    {"router", required_argument, NULL, O_ROUTER},
    {"block-size", required_argument, NULL, O_BS},
    {"num-gpu-blocks", required_argument, NULL, O_BLOCKS},
    {"max-num-seqs", required_argument, NULL, O_SEQS},
    {"max-num-batched-tokens", required_argument, NULL, O_TOKENS},
    {"max-model-len", required_argument, NULL, O_MML},
    {"config", required_argument, NULL, O_CONFIG},
    CLI_TIMING_OPTIONS,
    {"report", required_argument, NULL, O_REPORT},
    {"requests-out", required_argument, NULL, O_REQOUT},
    {"quiet", no_argument, NULL, O_QUIET},
    {"check-invariants", no_argument, NULL, O_CHECK},
    {"kv-index", required_argument, NULL, O_KVINDEX},
    {"g2-blocks", required_argument, NULL, O_G2},
    {"g3-blocks", required_argument, NULL, O_G3},
    {"g3-write-through", no_argument, NULL, O_G3WT},
    {"offload-executor", required_argument, NULL, O_OEXEC},
    {"offload-threads", required_argument, NULL, O_OTHREADS},
    {"offload-fail-rate", required_argument, NULL, O_OFAIL},
    {"offload-seed", required_argument, NULL, O_OSEED},
    {"kv-bytes-per-token", required_argument, NULL, O_KVBYTES},
    {"g1-g2-gbps", required_argument, NULL, O_G12BW},
    {"g2-g3-gbps", required_argument, NULL, O_G23BW},
    {"g3-shared", no_argument, NULL, O_G3SHARED},
    {"prefill-engines", required_argument, NULL, O_PENGINES},
    {"decode-engines", required_argument, NULL, O_DENGINES},
    {"prefill-engine-args", required_argument, NULL, O_PARGS},
    {"decode-engine-args", required_argument, NULL, O_DARGS},
    {"prefill-router", required_argument, NULL, O_PROUTER},
    {"decode-router", required_argument, NULL, O_DROUTER},
    {"kv-transfer-gbps", required_argument, NULL, O_XGBPS},
    {"kv-transfer-latency-us", required_argument, NULL, O_XLAT},
    {"kv-transfer-abort-timeout-ms", required_argument, NULL, O_XABORT},
    {"handoff-release", required_argument, NULL, O_HRELEASE},
    {"handoff-events", required_argument, NULL, O_HEVENTS},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* What the options say beyond the replay configuration. */
struct replay_args {
    struct kvsim_replay_config cfg;
    const char *report_path, *config_path;
    const char *offload_opt; /* an offload option that needs --g2-blocks, or NULL */
    const char *disagg_opt;  /* a disaggregation option that needs --prefill-engines, or NULL */
    bool engines_given;
    const char *prefill_args, *decode_args; /* engine-args files */
    struct cli_timing timing;
};

/* Input, cluster and engine options. Returns 0, -EINVAL (reported), or 1 (not one of them). */
static int parse_run_option(struct cli_parser *p, int c, struct replay_args *a)
{
    static const char *const formats[] = {"mooncake", "azure", "vllm-run"};
    static const enum kvsim_trace_format format_ids[] = {KVSIM_TRACE_MOONCAKE, KVSIM_TRACE_AZURE,
                                                         KVSIM_TRACE_VLLM_RUN};
    static const char *const routers[] = {"round-robin", "least-loaded", "kv"};
    static const char *const indexes[] = {"pool", "events"};
    struct kvsim_replay_config *cfg = &a->cfg;
    int choice = 0, rc;
    switch (c) {
    case O_TRACE: cfg->trace_path = p->arg; return 0;
    case O_FORMAT:
        rc = cli_choice(p, formats, 3, &choice);
        cfg->trace_opts.format = format_ids[choice];
        return rc;
    case O_TBS: return cli_u32(p, 1, 1 << 20, &cfg->trace_opts.trace_block_size);
    case O_SPEEDUP: return cli_double(p, 0, true, 1e12, &cfg->trace_opts.arrival_speedup);
    case O_MAXREQ: return cli_u64(p, 1, UINT32_MAX, &cfg->trace_opts.max_requests);
    case O_SEED: return cli_u64(p, 0, UINT64_MAX, &cfg->seed);
    case O_ENGINES: a->engines_given = true; return cli_u32(p, 1, 4096, &cfg->num_engines);
    case O_THREADS: return cli_u32(p, 1, 1024, &cfg->num_threads);
    case O_ROUTER:
        rc = cli_choice(p, routers, 3, &choice);
        cfg->router = (enum kvsim_router_policy)kvsim_router_policy_parse(routers[choice]);
        return rc;
    case O_KVINDEX:
        rc = cli_choice(p, indexes, 2, &choice);
        cfg->kv_index_events = choice == 1;
        return rc;
    case O_BS: return cli_u32(p, 1, 65536, &cfg->sched.block_size);
    case O_BLOCKS:
        a->timing.blocks_given = true;
        return cli_u32(p, 2, INT32_MAX - 2, &cfg->sched.num_blocks);
    case O_SEQS: return cli_u32(p, 1, 1 << 20, &cfg->sched.max_num_seqs);
    case O_TOKENS: return cli_u32(p, 1, UINT32_MAX, &cfg->sched.max_num_batched_tokens);
    case O_MML: return cli_u32(p, 2, UINT32_MAX, &cfg->sched.max_model_len);
    case O_CONFIG: a->config_path = p->arg; return 0;
    case O_REPORT: a->report_path = p->arg; return 0;
    case O_REQOUT: cfg->requests_path = p->arg; return 0;
    case O_QUIET: cfg->quiet = true; return 0;
    case O_CHECK: cfg->sched.check_invariants = true; return 0;
    }
    return cli_parse_timing_option(p, c, &a->timing);
}

/* Offload options (docs/offload.md). Returns 0, -EINVAL (reported), or 1 (not one of them). */
static int parse_offload_option(struct cli_parser *p, int c, struct replay_args *a)
{
    static const char *const executors[] = {"inline", "pool"};
    struct kvsim_replay_config *cfg = &a->cfg;
    struct offload_config *pipe = &cfg->tiers.pipe;
    int choice = 0, rc = 0;
    double gbps = 0;
    switch (c) {
    case O_G2:
        cfg->offload = true;
        return cli_u32(p, 1, OFFLOAD_TIER_MAX_CAPACITY, &cfg->tiers.g2_blocks);
    case O_KVBYTES:
        a->timing.kv_bytes_given = true;
        return cli_u64(p, 1, UINT64_C(1) << 40, &cfg->kv_bytes_per_token);
    case O_G3: rc = cli_u32(p, 0, OFFLOAD_TIER_MAX_CAPACITY, &cfg->tiers.g3_blocks); break;
    case O_G3WT: cfg->tiers.g3_write_through = true; break;
    case O_G3SHARED: cfg->g3_shared = true; break;
    case O_OEXEC:
        rc = cli_choice(p, executors, 2, &choice);
        cfg->offload_pool = choice == 1;
        break;
    case O_OTHREADS: rc = cli_u32(p, 1, 256, &cfg->offload_threads); break;
    case O_OFAIL: rc = cli_double(p, 0, false, 1, &pipe->fail_rate); break;
    case O_OSEED: rc = cli_u64(p, 0, UINT64_MAX, &pipe->seed); break;
    case O_G12BW:
    case O_G23BW: {
        rc = cli_double(p, 0, true, 1e12, &gbps);
        int64_t bw = (int64_t)(gbps * 1e9);
        enum offload_lane up = c == O_G12BW ? OFFLOAD_LANE_G1_G2 : OFFLOAD_LANE_G2_G3;
        enum offload_lane down = c == O_G12BW ? OFFLOAD_LANE_G2_G1 : OFFLOAD_LANE_G3_G2;
        if (rc == 0)
            pipe->lanes[up].bandwidth = pipe->lanes[down].bandwidth = bw;
        break;
    }
    default: return 1;
    }
    a->offload_opt = p->long_name;
    return rc;
}

/* Disaggregated serving options (docs/disagg.md). Returns 0, -EINVAL (reported), or 1. */
static int parse_disagg_option(struct cli_parser *p, int c, struct replay_args *a)
{
    static const char *const routers[] = {"round-robin", "least-loaded", "kv"};
    static const char *const releases[] = {"pinned", "immediate"};
    struct kvsim_disagg_config *d = &a->cfg.disagg;
    int choice = 0, rc = 0;
    double x = 0;
    switch (c) {
    case O_PENGINES: return cli_u32(p, 1, 4096, &d->prefill_engines);
    case O_DENGINES: rc = cli_u32(p, 1, 4096, &d->decode_engines); break;
    case O_PARGS: a->prefill_args = p->arg; break;
    case O_DARGS: a->decode_args = p->arg; break;
    case O_PROUTER:
    case O_DROUTER:
        rc = cli_choice(p, routers, 3, &choice);
        *(c == O_PROUTER ? &d->prefill_router : &d->decode_router) =
            (enum kvsim_router_policy)kvsim_router_policy_parse(routers[choice]);
        break;
    case O_XGBPS: rc = cli_double(p, 1e-6, false, 1e6, &d->transfer.gbps); break;
    case O_XLAT:
        rc = cli_double(p, 0, false, 1e9, &x);
        d->transfer.latency_ns = (int64_t)(x * 1e3 + 0.5);
        break;
    case O_XABORT:
        rc = cli_double(p, 0, false, 1e12, &x);
        if (rc == 0 && x > 0 && x < 1e-6)
            return cli_error(p, "option %s: '%s' is below 1 ns (0 means never)", p->name, p->arg);
        d->abort_timeout_ns = (int64_t)(x * 1e6 + 0.5);
        break;
    case O_HRELEASE:
        rc = cli_choice(p, releases, 2, &choice);
        d->release_immediately = choice == 1;
        break;
    case O_HEVENTS: d->events_path = p->arg; break;
    default: return 1;
    }
    a->disagg_opt = p->long_name;
    return rc;
}

/* The pools' engine settings: the engine options, then each pool's engine-args file. Returns 0
 * or -EINVAL (reported). */
static int pool_settings(struct cli_parser *p, struct replay_args *a)
{
    struct kvsim_disagg_config *d = &a->cfg.disagg;
    d->prefill_sched = d->decode_sched = a->cfg.sched;
    char err[512];
    if (a->prefill_args &&
        kvsim_engine_args_load(a->prefill_args, &d->prefill_sched, err, sizeof err) != 0)
        return cli_error(p, "--prefill-engine-args %s", err);
    if (a->decode_args &&
        kvsim_engine_args_load(a->decode_args, &d->decode_sched, err, sizeof err) != 0)
        return cli_error(p, "--decode-engine-args %s", err);
    return 0;
}

/* The checks of disaggregated serving. Returns 0 or -EINVAL (reported). */
static int check_disagg_args(struct cli_parser *p, struct replay_args *a)
{
    const struct kvsim_disagg_config *d = &a->cfg.disagg;
    if (!d->prefill_engines) {
        if (a->disagg_opt)
            return cli_error(p,
                             "option --%s needs --prefill-engines (disaggregated serving is "
                             "off)",
                             a->disagg_opt);
        return 0;
    }
    if (!d->decode_engines)
        return cli_error(p, "option --prefill-engines needs --decode-engines");
    if (a->engines_given)
        return cli_error(p, "options --engines and --prefill-engines exclude each other (the "
                            "engines are the prefill and the decode ones)");
    if (a->cfg.offload)
        return cli_error(p, "offload tiers (--g2-blocks) and disaggregated serving do not "
                            "combine yet");
    return pool_settings(p, a);
}

/* The checks that need every option. Returns 0 or -EINVAL (reported). */
static int check_replay_args(struct cli_parser *p, struct replay_args *a)
{
    const struct kvsim_replay_config *cfg = &a->cfg;
    if (cfg->g3_shared && cfg->tiers.g3_blocks == 0)
        return cli_error(p, "option --g3-shared needs --g3-blocks N with N > 0 (the shared G3's "
                            "capacity)");
    if (a->offload_opt && !cfg->offload)
        return cli_error(p, "option --%s needs --g2-blocks (offload tiers are off)",
                         a->offload_opt);
    if (cfg->offload && offload_block_bytes(cfg->kv_bytes_per_token, cfg->sched.block_size) == 0)
        return cli_error(p, "--kv-bytes-per-token x --block-size overflows");
    if (cli_optind() < p->argc) {
        cli_error(p, "unexpected argument '%s'", p->argv[cli_optind()]);
        replay_usage(stderr);
        return -EINVAL;
    }
    return check_disagg_args(p, a);
}

int cli_replay_main(int argc, char **argv)
{
    struct cli_parser p;
    struct replay_args a = {0};
    kvsim_replay_config_default(&a.cfg);
    cli_timing_default(&a.timing);
    cli_begin(&p, "kvsim replay", argc, argv, replay_opts, "h");
    int c;
    while ((c = cli_next(&p)) > 0) {
        if (c == 'h') {
            replay_usage(stdout);
            return CLI_EXIT_OK;
        }
        int rc = parse_run_option(&p, c, &a);
        if (rc == 1)
            rc = parse_offload_option(&p, c, &a);
        if (rc == 1)
            rc = parse_disagg_option(&p, c, &a);
        if (rc)
            return CLI_EXIT_USAGE;
    }
    if (c < 0)
        return CLI_EXIT_USAGE;
    /* capacity first: the pools' settings and the offload checks read what it derives */
    if (cli_timing_apply(&p, &a.timing, &a.cfg.sched, &a.cfg.model, &a.cfg.kv_bytes_per_token) ||
        check_replay_args(&p, &a) != 0) {
        cli_timing_fini(&a.timing);
        return CLI_EXIT_USAGE;
    }
    char err[512];
    if (a.config_path && kvsim_step_model_load(a.config_path, &a.cfg.model, err, sizeof err)) {
        cli_timing_fini(&a.timing);
        cli_error(&p, "--config %s", err);
        return CLI_EXIT_USAGE;
    }
    struct kvsim_report report;
    int rc = kvsim_replay_run(&a.cfg, &report, err, sizeof err);
    if (rc) {
        cli_timing_fini(&a.timing);
        cli_error(&p, "%s", err);
        return rc == -EINVAL || rc == -ENOENT ? CLI_EXIT_USAGE : CLI_EXIT_FAILED;
    }
    if (!a.cfg.quiet)
        kvsim_report_print(stdout, &report);
    int status = CLI_EXIT_OK;
    if (a.report_path && kvsim_report_write_json(a.report_path, &report, err, sizeof err) != 0) {
        cli_error(&p, "%s", err);
        status = CLI_EXIT_FAILED;
    }
    kvsim_report_fini(&report);
    cli_timing_fini(&a.timing);
    return status;
}
