/*
 * replay_cmd.c - `kvsim replay [options]`: the options into a kvsim_replay_config, the run, the
 * table and the JSON report.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

static void replay_usage(FILE *out)
{
    fprintf(out,
            "usage: kvsim replay [options] [TRACE]\n"
            "\n"
            "Replays a request trace (or the built-in synthetic workload) through N simulated\n"
            "vLLM engines behind a router, in virtual time, and prints a report.\n"
            "\n"
            "input:\n"
            "  --trace FILE, or TRACE     Mooncake JSONL or Azure CSV, gzip-compressed or not;\n"
            "                             - reads standard input (with --format) (default:\n"
            "                             the synthetic workload)\n"
            "  --format mooncake|azure|vllm-run  trace format (default: from the file\n"
            "                             extension; vllm-run: a recorded run's requests.jsonl)\n"
            "  --trace-block-size N       tokens per Mooncake hash id (512)\n"
            "  --arrival-speedup X        divide inter-arrival gaps by X (1)\n"
            "  --max-requests N           replay only the first N requests (all)\n"
            "  --replay-concurrency N     closed loop: N sessions in flight, the next one\n"
            "                             sent when one ends (first turns' timestamps\n"
            "                             unused; Dynamo's option) (off: by timestamps)\n"
            "  --max-sim-time-s X         stop X simulated seconds after the first arrival\n"
            "                             (the report says it is partial; default: none)\n"
            "  --seed S                   seed of the synthetic workload (1)\n"
            "the synthetic workload (without a trace): chat sessions sharing system prompts\n"
            "  --synthetic-sessions N     sessions (300)\n"
            "  --synthetic-requests N     sessions until N requests instead\n"
            "  --synthetic-turns N        turns per session, uniform in 1..N (6; 1: single\n"
            "                             requests)\n"
            "  --synthetic-rate X         session starts per second (6)\n"
            "  --synthetic-burstiness B   gaps gamma of shape B (1: Poisson; < 1 burstier)\n"
            "  --synthetic-input-len N    mean new user tokens per turn (300)\n"
            "  --synthetic-output-len N   mean output tokens (200)\n"
            "  --synthetic-max-output-len N  cap on output tokens (1000)\n"
            "  --synthetic-lengths lognormal|fixed  length distribution (lognormal)\n"
            "  --synthetic-system-prompt-len N  tokens of a shared system prompt (1024)\n"
            "  --synthetic-prefix-groups N  system prompts to share (8)\n"
            "  --synthetic-shared-prefix-ratio R  share of sessions opening with a shared\n"
            "                             system prompt; the others have their own (1)\n"
            "  --synthetic-think-s X      mean think time between turns (2)\n"
            "cluster:\n"
            "  --engines N                engines (4)\n"
            "  --threads T                worker threads (number of CPUs); at most the\n"
            "                             engines and the CPUs (docs/replay.md, Threads)\n"
            "  --router POLICY            round-robin | least-loaded | kv (kv)\n"
            "  --kv-index pool|events     kv router's overlap source: the engines' prefix-cache\n"
            "                             maps, or an indexer fed by their KV events (pool);\n"
            "                             both see the same blocks at every boundary\n");
    fprintf(out,
            "engine:\n"
            "  --block-size B             tokens per KV block (16)\n"
            "  --num-gpu-blocks N         KV blocks per engine, null block included (16384);\n"
            "                             --num-gpu-blocks-override is vLLM's name for it\n"
            "  --max-num-seqs N           running-set cap (256)\n"
            "  --max-num-batched-tokens N token budget per step (8192)\n"
            "  --max-model-len N          longest sequence (262144)\n"
            "  --max-num-active-seqs N    admission cap below --max-num-seqs: the waiting\n"
            "                             queue stops when N run; never preempts (off;\n"
            "                             contract 2, vLLM #56758)\n"
            "  --max-num-queued-reqs N    refuse an arrival (reason queue_full, vLLM's HTTP\n"
            "                             503) while N requests are unfinished on its engine\n"
            "                             (off; contract 2, vLLM #49445)\n"
            "  --vllm-contract 1|2        the fidelity contract with upstream vLLM the\n"
            "                             scheduler follows (docs/fidelity/vllm.md): 2 = vLLM\n"
            "                             main of 2026-09 (default), 1 = of 2026-07-24\n"
            "vLLM engine arguments (vLLM's names and values; the defaults above and on):\n"
            "  --engine-args FILE.json    vLLM's engine arguments as JSON (block_size,\n"
            "                             num_gpu_blocks_override, max_num_seqs, ...): read\n"
            "                             where it stands, options after it override it\n"
            "  --enable-prefix-caching, --no-enable-prefix-caching      (on)\n"
            "  --enable-chunked-prefill, --no-enable-chunked-prefill    (on)\n"
            "  --scheduling-policy fcfs|priority                        (fcfs)\n"
            "  --long-prefill-token-threshold N  cap on a prefill chunk (0: off)\n"
            "  --watermark W              keep int(W x blocks) free for running requests (0)\n"
            "  --async-scheduling         vLLM's batch queue: schedule each step while the\n"
            "                             one before it runs (off; aggregated engines without\n"
            "                             offload tiers; others keep only the placeholders)\n"
            "  --check-invariants         check the scheduler's and the pool's invariants\n"
            "                             after every schedule and update (slow; as the\n"
            "                             tests do): a violation stops the replay\n"
            "  --decode-fast-path on|off  advance stable decode batches in bulk (on); off\n"
            "                             schedules every step: the same report, slower\n"
            "  --config FILE.json         step-time model coefficients and speedup_ratio,\n"
            "                             or a whole run configuration (--config-out)\n"
            "timing and capacity from a model and a GPU (docs/fidelity/timing.md):\n"
            "  --profiles ROOT            LLMServingSim-format profiles and model configs\n"
            "  --hardware HW              time steps with ROOT/HW/ORG/NAME/bf16/tpN/ (the\n"
            "                             profile step model instead of the polynomial)\n"
            "  --model ORG/NAME           the model (ROOT/configs/model/ORG/NAME.json)\n"
            "  --tp N                     tensor parallel degree (1)\n"
            "  --tp-link-gbps X           all-reduce link bandwidth, GiB/s, >= 0.001 (16)\n"
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
            "                             thread pool (woken only for copies that cost more\n"
            "                             than a wake-up); the report is the same (inline)\n"
            "  --offload-threads N        pool workers (2)\n"
            "  --offload-fail-rate F      probability in [0, 1] that a copy batch fails (0)\n"
            "  --offload-seed S           seed of the failure injection (1)\n"
            "  --kv-bytes-per-token N     KV bytes per token, all layers (131072)\n"
            "  --g1-g2-gbps X             GPU<->host bandwidth per direction, GB/s, >= 0.001 (14)\n"
            "  --g2-g3-gbps X             host<->disk bandwidth per direction, GB/s, >= 0.001 (7)\n"
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
    fprintf(out, "service-level objectives (per request; the report adds attainment and goodput):\n"
                 "  --slo-ttft-ms X            time to first token within X ms\n"
                 "  --slo-itl-ms X             inter-token latency (AIPerf's, per request:\n"
                 "                             (last - first token) / (tokens - 1)) within X ms\n"
                 "  --slo-e2e-ms X             end-to-end latency within X ms\n");
    fprintf(out, "output:\n"
                 "  --report FILE              JSON report (- : standard output, the table then\n"
                 "                             goes to standard error)\n"
                 "  --config-out FILE          the run's whole configuration as JSON: --config\n"
                 "                             FILE replays the same run (options after it\n"
                 "                             override it); the report's run.config holds it\n"
                 "  --requests-out FILE        per-request records (JSONL)\n"
                 "  --timeseries-out FILE      per engine and in all, every interval: running,\n"
                 "                             waiting, KV usage, prompt and generation tok/s,\n"
                 "                             preemptions, pinned and offloaded blocks (CSV)\n"
                 "  --timeseries-interval-ms X the time series' interval (1000)\n"
                 "  --html FILE                the report as one self-contained HTML page:\n"
                 "                             tables, latency CDFs, load over time, engines\n"
                 "  --quiet                    no table, no progress bar\n"
                 "  -h, --help                 this help\n"
                 "\n" CLI_EXIT_HELP
                 "130 interrupted (the first SIGINT ends the replay at its next epoch with a\n"
                 "partial report, marked \"interrupted\"; a second one kills it at once). A run\n"
                 "ended by --max-sim-time-s exits 0, its report marked incomplete.\n");
}

/* SIGINT: the first ends the replay at its next epoch boundary with a partial report; a second
 * one kills the process as usual (the handler gives SIGINT back its default). */
static volatile sig_atomic_t replay_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    replay_interrupted = 1;
    signal(SIGINT, SIG_DFL);
}

/* Options are told apart by their long name (the option table of api/config.c reads them), so
 * every entry returns the same value. */
#define O_RUN 1

const struct option cli_replay_options[] = {
    {"trace", required_argument, NULL, O_RUN},
    {"format", required_argument, NULL, O_RUN},
    {"trace-block-size", required_argument, NULL, O_RUN},
    {"arrival-speedup", required_argument, NULL, O_RUN},
    {"max-requests", required_argument, NULL, O_RUN},
    {"max-sim-time-s", required_argument, NULL, O_RUN},
    {"replay-concurrency", required_argument, NULL, O_RUN},
    {"seed", required_argument, NULL, O_RUN},
    {"synthetic-requests", required_argument, NULL, O_RUN},
    {"synthetic-sessions", required_argument, NULL, O_RUN},
    {"synthetic-turns", required_argument, NULL, O_RUN},
    {"synthetic-rate", required_argument, NULL, O_RUN},
    {"synthetic-burstiness", required_argument, NULL, O_RUN},
    {"synthetic-input-len", required_argument, NULL, O_RUN},
    {"synthetic-output-len", required_argument, NULL, O_RUN},
    {"synthetic-max-output-len", required_argument, NULL, O_RUN},
    {"synthetic-lengths", required_argument, NULL, O_RUN},
    {"synthetic-system-prompt-len", required_argument, NULL, O_RUN},
    {"synthetic-prefix-groups", required_argument, NULL, O_RUN},
    {"synthetic-shared-prefix-ratio", required_argument, NULL, O_RUN},
    {"synthetic-think-s", required_argument, NULL, O_RUN},
    {"engines", required_argument, NULL, O_RUN},
    {"threads", required_argument, NULL, O_RUN},
    {"router", required_argument, NULL, O_RUN},
    {"block-size", required_argument, NULL, O_RUN},
    {"num-gpu-blocks", required_argument, NULL, O_RUN},
    {"max-num-seqs", required_argument, NULL, O_RUN},
    {"max-num-batched-tokens", required_argument, NULL, O_RUN},
    {"max-model-len", required_argument, NULL, O_RUN},
    {"max-num-active-seqs", required_argument, NULL, O_RUN},
    {"num-gpu-blocks-override", required_argument, NULL, O_RUN},
    {"long-prefill-token-threshold", required_argument, NULL, O_RUN},
    {"enable-prefix-caching", no_argument, NULL, O_RUN},
    {"no-enable-prefix-caching", no_argument, NULL, O_RUN},
    {"enable-chunked-prefill", no_argument, NULL, O_RUN},
    {"no-enable-chunked-prefill", no_argument, NULL, O_RUN},
    {"async-scheduling", no_argument, NULL, O_RUN},
    {"scheduling-policy", required_argument, NULL, O_RUN},
    {"watermark", required_argument, NULL, O_RUN},
    {"engine-args", required_argument, NULL, O_RUN},
    {"max-num-queued-reqs", required_argument, NULL, O_RUN},
    {"vllm-contract", required_argument, NULL, O_RUN},
    {"config", required_argument, NULL, O_RUN},
    CLI_TIMING_OPTIONS,
    {"slo-ttft-ms", required_argument, NULL, O_RUN},
    {"slo-itl-ms", required_argument, NULL, O_RUN},
    {"slo-e2e-ms", required_argument, NULL, O_RUN},
    {"report", required_argument, NULL, O_RUN},
    {"config-out", required_argument, NULL, O_RUN},
    {"requests-out", required_argument, NULL, O_RUN},
    {"timeseries-out", required_argument, NULL, O_RUN},
    {"timeseries-interval-ms", required_argument, NULL, O_RUN},
    {"html", required_argument, NULL, O_RUN},
    {"quiet", no_argument, NULL, O_RUN},
    {"check-invariants", no_argument, NULL, O_RUN},
    {"decode-fast-path", required_argument, NULL, O_RUN},
    {"kv-index", required_argument, NULL, O_RUN},
    {"g2-blocks", required_argument, NULL, O_RUN},
    {"g3-blocks", required_argument, NULL, O_RUN},
    {"g3-write-through", no_argument, NULL, O_RUN},
    {"offload-executor", required_argument, NULL, O_RUN},
    {"offload-threads", required_argument, NULL, O_RUN},
    {"offload-fail-rate", required_argument, NULL, O_RUN},
    {"offload-seed", required_argument, NULL, O_RUN},
    {"kv-bytes-per-token", required_argument, NULL, O_RUN},
    {"g1-g2-gbps", required_argument, NULL, O_RUN},
    {"g2-g3-gbps", required_argument, NULL, O_RUN},
    {"g3-shared", no_argument, NULL, O_RUN},
    {"prefill-engines", required_argument, NULL, O_RUN},
    {"decode-engines", required_argument, NULL, O_RUN},
    {"prefill-engine-args", required_argument, NULL, O_RUN},
    {"decode-engine-args", required_argument, NULL, O_RUN},
    {"prefill-router", required_argument, NULL, O_RUN},
    {"decode-router", required_argument, NULL, O_RUN},
    {"kv-transfer-gbps", required_argument, NULL, O_RUN},
    {"kv-transfer-latency-us", required_argument, NULL, O_RUN},
    {"kv-transfer-abort-timeout-ms", required_argument, NULL, O_RUN},
    {"handoff-release", required_argument, NULL, O_RUN},
    {"handoff-events", required_argument, NULL, O_RUN},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

int cli_replay_main(int argc, char **argv)
{
    /* The getopt table above and the option table (api/config.c) must name the same options,
     * with the same kind (a flag or not): checked on every run, so any test of the command
     * line catches a mismatch. */
    for (const struct option *x = cli_replay_options; x->name; x++) {
        bool flag = false;
        if (strcmp(x->name, "help") &&
            (!kvsim_options_known(x->name, &flag) || flag != (x->has_arg == no_argument))) {
            fprintf(stderr, "kvsim replay: option --%s: the option table disagrees (kvsim bug)\n",
                    x->name);
            return CLI_EXIT_FAILED;
        }
    }
    struct cli_parser p;
    struct kvsim_options o;
    kvsim_options_default(&o);
    cli_begin(&p, "kvsim replay", argc, argv, cli_replay_options, "h");
    char err[1024];
    int c;
    while ((c = cli_next(&p)) > 0) {
        if (c == 'h') {
            replay_usage(stdout);
            kvsim_options_fini(&o);
            return CLI_EXIT_OK;
        }
        /* Every long option is one of the option table's (api/config.c): its range, its
         * message. */
        if (kvsim_options_set(&o, p.long_name, p.arg, err, sizeof err) != 0) {
            cli_error(&p, "%s", err);
            c = -EINVAL;
            break;
        }
    }
    /* The trace may be given as the one positional argument ("-": standard input). */
    if (c >= 0 && cli_optind() < p.argc) {
        const char *pos = p.argv[cli_optind()];
        if (cli_optind() + 1 < p.argc) {
            cli_error(&p, "unexpected argument '%s' (one trace at most)", p.argv[cli_optind() + 1]);
            c = -EINVAL;
        } else if (o.replay.trace_path) {
            cli_error(&p, "the trace is given twice: '%s' and --trace %s", pos,
                      o.replay.trace_path);
            c = -EINVAL;
        } else if (kvsim_options_set(&o, "trace", pos, err, sizeof err) != 0) {
            cli_error(&p, "%s", err);
            c = -EINVAL;
        }
        if (c < 0)
            fprintf(stderr, "kvsim replay --help lists the options\n");
    }
    if (c < 0) {
        kvsim_options_fini(&o);
        return CLI_EXIT_USAGE;
    }
    struct kvsim_run run;
    int rc = kvsim_options_resolve(&o, &run, err, sizeof err);
    if (rc == 0 && (rc = kvsim_options_check_outputs(&o, err, sizeof err)) != 0)
        kvsim_run_fini(&run);
    if (rc) {
        kvsim_options_fini(&o);
        cli_error(&p, "%s", err);
        return CLI_EXIT_USAGE;
    }
    /* The whole configuration: in the report, and (written before the run, so a bad path
     * fails first) in --config-out. */
    char *config = kvsim_options_config_text(&o, &run);
    int status = CLI_EXIT_OK;
    if (!config) {
        cli_error(&p, "out of memory writing the configuration");
        status = CLI_EXIT_FAILED;
    } else if (o.config_out_path &&
               kvsim_write_text_file("--config-out", o.config_out_path, config, err, sizeof err)) {
        cli_error(&p, "%s", err);
        status = CLI_EXIT_FAILED;
    }
    struct kvsim_report report;
    run.replay.config_text = config;
    run.replay.stop_flag = &replay_interrupted;
    struct sigaction sa = {.sa_handler = on_sigint}, old_sa;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_sa);
    if (status == CLI_EXIT_OK && (rc = kvsim_replay_run(&run.replay, &report, err, sizeof err))) {
        cli_error(&p, "%s", err);
        status = cli_status_of(rc);
    } else if (status == CLI_EXIT_OK) {
        /* With a JSON report on standard output, the table goes to standard error. */
        bool json_on_stdout = o.report_path && strcmp(o.report_path, "-") == 0;
        if (!run.replay.quiet)
            kvsim_report_print(json_on_stdout ? stderr : stdout, &report);
        if (o.report_path &&
            kvsim_report_write_json(o.report_path, &report, err, sizeof err) != 0) {
            cli_error(&p, "%s", err);
            status = CLI_EXIT_FAILED;
        }
        if (!report.complete && strcmp(report.end_reason, "interrupted") == 0) {
            fprintf(stderr, "kvsim replay: interrupted: the report and outputs are partial\n");
            if (status == CLI_EXIT_OK)
                status = CLI_EXIT_INTERRUPTED;
        }
        if (report.num_requests && report.rejected == report.num_requests)
            fprintf(stderr,
                    "kvsim replay: every request was rejected (%s first): nothing was served\n",
                    report.num_reject_reasons ? report.rejects[0].reason : "unknown");
        kvsim_report_fini(&report);
    }
    sigaction(SIGINT, &old_sa, NULL);
    free(config);
    kvsim_run_fini(&run);
    kvsim_options_fini(&o);
    return status;
}
