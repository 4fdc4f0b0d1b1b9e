/*
 * validate_cmd.c - `kvsim validate RUN_DIR`: replays a recorded vLLM run (requests.jsonl,
 * meta.json, config.json; docs/fidelity/timing.md) with the run's own engine arguments on one
 * engine timed by a profile (or a --config polynomial), and prints the Diff% table of TTFT,
 * TPOT, E2E and throughput against the real run. Main thread only.
 */
#include "runtime/cli/fidelity.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void validate_usage(FILE *out)
{
    fprintf(out, "usage: kvsim validate RUN_DIR [options]\n"
                 "Replays a recorded vLLM run with its own engine arguments and compares TTFT,\n"
                 "TPOT, E2E (mean, p50, p90, p95, p99), output tokens/s and requests/s.\n"
                 "RUN_DIR holds requests.jsonl, meta.json (engine_kwargs, optional\n"
                 "kv_cache.num_gpu_blocks) and config.json (the GPU, its memory, the TP link).\n"
                 "  --profiles ROOT            profiles (ROOT/HW/ORG/NAME/bf16/tpN/) and model\n"
                 "                             configs; required unless --config is given\n"
                 "  --hardware HW              profile hardware label (config.json's)\n"
                 "  --config FILE.json         kvsim calibrate's output: alone, time steps with\n"
                 "                             its polynomial; with --profiles, apply its\n"
                 "                             speedup_ratio to the profile\n"
                 "  --num-gpu-blocks N         KV blocks (meta.json's, else derived)\n"
                 "  --report OUT.json          write the rows as JSON\n"
                 "  --requests-out FILE.jsonl  the simulated per-request records\n"
                 "  --quiet                    no table\n"
                 "\n" CLI_EXIT_HELP);
}

enum { V_PROFILES = 1, V_HARDWARE, V_CONFIG, V_BLOCKS, V_REPORT, V_REQOUT, V_QUIET };

static const struct option validate_opts[] = {
    {"profiles", required_argument, NULL, V_PROFILES},
    {"hardware", required_argument, NULL, V_HARDWARE},
    {"config", required_argument, NULL, V_CONFIG},
    {"num-gpu-blocks", required_argument, NULL, V_BLOCKS},
    {"report", required_argument, NULL, V_REPORT},
    {"requests-out", required_argument, NULL, V_REQOUT},
    {"quiet", no_argument, NULL, V_QUIET},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int write_report(const struct cli_parser *p, const char *path, const struct fid_run *run,
                        const struct kvsim_report *rep, const double *real, const double *sim,
                        double worst)
{
    const struct kvsim_timing_summary *t = &rep->timing;
    json_t *root = json_object(), *rows = json_array();
    json_object_set_new(root, "run", json_string(run->dir));
    json_object_set_new(
        root, "data_parallel_size",
        json_integer(run->cfg.data_parallel_size > 1 ? run->cfg.data_parallel_size : 1));
    json_object_set_new(
        root, "scheduling",
        json_pack("{s:b, s:s}", "async", run->cfg.sched.async_scheduling, "why", run->scheduling));
    json_object_set_new(
        root, "timing",
        json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "step_model", t->step_model,
                  "profile", t->profile, "model", t->model, "hardware", t->hardware, "tp",
                  (json_int_t)t->tp, "num_gpu_blocks", (json_int_t)t->num_gpu_blocks, "steps",
                  (json_int_t)t->steps, "steps_outside_grid", (json_int_t)t->steps_outside));
    for (int i = 0; i < FID_NUM_ROWS; i++)
        json_array_append_new(rows, json_pack("{s:s, s:f, s:f, s:f}", "metric", fid_row_names[i],
                                              "real", real[i], "sim", sim[i], "diff_pct",
                                              fid_diff_pct(real[i], sim[i])));
    json_object_set_new(root, "rows", rows);
    json_object_set_new(root, "worst_abs_diff_pct", json_real(worst));
    /* through kvsim_output: written beside, renamed into place, never half a file */
    struct kvsim_output out;
    char err[1024];
    int rc = kvsim_output_open(&out, path, err, sizeof err);
    if (rc == 0 && json_dumpf(root, out.f, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) != 0) {
        kvsim_output_discard(&out);
        snprintf(err, sizeof err, "%s: write failed", path);
        rc = -EIO;
    }
    if (rc == 0) {
        fputc('\n', out.f);
        rc = kvsim_output_commit(&out, err, sizeof err);
    }
    json_decref(root);
    return rc ? cli_error(p, "--report: %s", err) : 0;
}

/* ---- the command ---------------------------------------------------------------------------- */

struct validate_args {
    struct fid_opts fo;
    const char *report_path;
    bool quiet;
    struct cli_timing timing;
};

static int validate_run(struct cli_parser *p, const char *dir, struct validate_args *a)
{
    struct fid_run run;
    struct cli_timing *t = &a->timing;
    int rc = fid_open(p, dir, &a->fo, t, &run);
    if (!rc) /* before the work */
        rc = fid_check_output(p, dir, &a->fo, t, "--report", a->report_path);
    if (!rc)
        rc = fid_check_output(p, dir, &a->fo, t, "--requests-out", a->fo.requests_path);
    if (rc) {
        fid_close(&run);
        return CLI_EXIT_USAGE;
    }
    struct kvsim_report rep;
    struct fid_side sim = {0};
    rc = fid_replay(p, &run, &run.cfg.model, &sim, &rep);
    int status = cli_status_of(rc);
    double rv[FID_NUM_ROWS], sv[FID_NUM_ROWS];
    if (!rc && (fid_rows(&run.real, 0, run.real.n, rv) || fid_rows(&sim, 0, sim.n, sv))) {
        cli_error(p, "out of memory");
        status = CLI_EXIT_FAILED;
    }
    if (status == CLI_EXIT_OK) {
        FILE *out = a->quiet ? NULL : stdout;
        if (out) {
            printf("run          %s (%zu requests)\n", dir, run.real.n);
            if (t->r.profile)
                printf("step model   profile %s%s\n", kvsim_profile_dir(t->r.profile),
                       a->fo.config_path ? " (speedup_ratio from --config)" : "");
            else
                printf("step model   polynomial (%s)\n", a->fo.config_path);
            printf("scheduling   %s\n", run.scheduling);
            if (run.cfg.data_parallel_size > 1)
                printf("data parallel %u ranks behind vLLM's DP load balancer "
                       "(docs/fidelity/data-parallel.md)%s\n",
                       run.cfg.data_parallel_size,
                       t->r.profile && kvsim_profile_arch(t->r.profile)->num_experts
                           ? ", in lockstep (docs/fidelity/dp-lockstep.md)"
                           : "");
            printf("KV blocks    %u%s\n", run.cfg.sched.num_blocks,
                   t->o.blocks_given              ? " (the run's or --num-gpu-blocks)"
                   : t->r.capacity.num_gpu_blocks ? " (derived from the model and the GPU)"
                                                  : " (kvsim's default: no model to derive it)");
            printf("steps        %llu, %llu off the profile's grid\n\n",
                   (unsigned long long)rep.timing.steps,
                   (unsigned long long)rep.timing.steps_outside);
        }
        double worst = fid_print(out, rv, sv);
        if (a->report_path && write_report(p, a->report_path, &run, &rep, rv, sv, worst))
            status = CLI_EXIT_FAILED;
    }
    if (!rc)
        kvsim_report_fini(&rep);
    fid_side_free(&sim);
    fid_close(&run);
    return status;
}

int cli_validate_main(int argc, char **argv)
{
    struct cli_parser p;
    struct validate_args a = {0};
    cli_timing_default(&a.timing);
    cli_begin(&p, "kvsim validate", argc, argv, validate_opts, "h");
    int c;
    while ((c = cli_next(&p)) > 0) {
        int rc = 0;
        switch (c) {
        case 'h': validate_usage(stdout); return CLI_EXIT_OK;
        case V_PROFILES:
        case V_HARDWARE:
        case V_BLOCKS: rc = cli_table_set(&p, &a.timing, &a.fo.blocks); break;
        case V_CONFIG: a.fo.config_path = p.arg; break;
        case V_REPORT: a.report_path = p.arg; break;
        case V_REQOUT: a.fo.requests_path = p.arg; break;
        case V_QUIET: a.quiet = true; break;
        }
        if (rc)
            return CLI_EXIT_USAGE;
    }
    if (c < 0)
        return CLI_EXIT_USAGE;
    if (cli_optind() + 1 != argc) {
        cli_error(&p, "expected one RUN_DIR");
        validate_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    int status = validate_run(&p, argv[cli_optind()], &a);
    cli_timing_fini(&a.timing);
    return status;
}
