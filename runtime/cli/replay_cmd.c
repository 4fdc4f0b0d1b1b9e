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
            "\n");
    kvsim_options_print_help(out); /* the option table's sections (api/config.c) */
    fprintf(out, "  -h, --help                 this help\n"
                 "\n" CLI_EXIT_HELP
                 "130 interrupted (the first SIGINT ends the replay at its next epoch with a\n"
                 "partial report, marked \"interrupted\"; a second one kills it at once); SIGTERM\n"
                 "and SIGHUP alike, exiting 143 and 129. A run ended by --max-sim-time-s exits\n"
                 "0, its report marked incomplete.\n");
}

/* SIGINT, SIGTERM or SIGHUP: the first ends the replay at its next epoch boundary with a partial
 * report (exit 128 + the signal); a second one of any kills the process as usual (the handler
 * gives the three back their defaults). 0 or the first signal. */
static volatile sig_atomic_t replay_interrupted;

static void on_stop_signal(int sig)
{
    replay_interrupted = sig;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
}

/* The getopt table, generated from the option table (api/config.c) on first use: every
 * command-line row (a flag takes no value), then --help. Options are told apart by their long
 * name (the option table reads them), so every entry returns the same value. Main thread. */
#define O_RUN 1

const struct option *cli_replay_options(void)
{
    static struct option table[KVSIM_OPTIONS_MAX_IDS * 3 + 2];
    if (table[0].name)
        return table;
    size_t n = 0;
    const char *name;
    for (size_t i = 0; (name = kvsim_options_name(i)) != NULL; i++) {
        bool flag = false;
        if (!kvsim_options_on_command_line(i) || !kvsim_options_known(name, &flag))
            continue;
        if (n + 3 >= sizeof table / sizeof table[0])
            abort(); /* the table outgrew this array: a kvsim bug, caught by any test */
        int has_arg = flag ? no_argument : required_argument;
        table[n++] = (struct option){name, has_arg, NULL, O_RUN};
        if (kvsim_options_vllm_name(i)) /* vLLM's name: the same row */
            table[n++] = (struct option){kvsim_options_vllm_name(i), has_arg, NULL, O_RUN};
    }
    table[n++] = (struct option){"help", no_argument, NULL, 'h'};
    table[n] = (struct option){NULL, 0, NULL, 0};
    return table;
}

int cli_replay_main(int argc, char **argv)
{
    struct cli_parser p;
    struct kvsim_options o;
    kvsim_options_default(&o);
    cli_begin(&p, "kvsim replay", argc, argv, cli_replay_options(), "h");
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
        int src = kvsim_options_set(&o, p.long_name, p.arg, err, sizeof err);
        if (src != 0) {
            cli_error(&p, "%s", err);
            c = src == -ENOMEM ? src : -EINVAL; /* out of memory reading a file it names */
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
        return c == -ENOMEM ? CLI_EXIT_FAILED : CLI_EXIT_USAGE;
    }
    struct kvsim_run run;
    int rc = kvsim_options_resolve(&o, &run, err, sizeof err);
    if (rc == 0 && (rc = kvsim_options_check_outputs(&o, err, sizeof err)) != 0)
        kvsim_run_fini(&run);
    if (rc) {
        kvsim_options_fini(&o);
        cli_error(&p, "%s", err);
        return rc == -ENOMEM ? CLI_EXIT_FAILED : CLI_EXIT_USAGE;
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
    struct sigaction sa = {.sa_handler = on_stop_signal}, old_int, old_term, old_hup;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    if (status == CLI_EXIT_OK && (rc = kvsim_replay_run(&run.replay, &report, err, sizeof err))) {
        cli_error(&p, "%s", err);
        status = cli_status_of(rc);
    } else if (status == CLI_EXIT_OK) {
        /* With a JSON report on standard output (written by the run), the table goes to
         * standard error. */
        const char *json = run.replay.outputs.report_path;
        if (!run.replay.quiet)
            kvsim_report_print(json && strcmp(json, "-") == 0 ? stderr : stdout, &report);
        if (!report.complete && strcmp(report.end_reason, "interrupted") == 0) {
            fprintf(stderr, "kvsim replay: interrupted: the report and outputs are partial\n");
            if (status == CLI_EXIT_OK) /* 130 for SIGINT, 143 SIGTERM, 129 SIGHUP */
                status = 128 + (replay_interrupted ? replay_interrupted : SIGINT);
        }
        if (report.num_requests && report.rejected == report.num_requests)
            fprintf(stderr,
                    "kvsim replay: every request was rejected (%s first): nothing was served\n",
                    report.num_reject_reasons ? report.rejects[0].reason : "unknown");
        kvsim_report_fini(&report);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    free(config);
    kvsim_run_fini(&run);
    kvsim_options_fini(&o);
    return status;
}
