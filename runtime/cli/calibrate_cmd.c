/*
 * calibrate_cmd.c - `kvsim calibrate RUN_DIR -o CONFIG.json`: for a user with a recorded vLLM
 * run and no profile. Fits the polynomial step model (or, with --profiles, a correction on the
 * profile: speedup_ratio and step_overhead_ms) to the first --train-fraction of the run's
 * requests (by arrival) and prints the Diff% table on those and on the held-out rest, so the user
 * sees whether the fit generalizes.
 * Main thread only.
 *
 * The fit replays the whole run for every trial (the requests share the engine's steps) and
 * minimizes the mean squared log ratio sim/real over the training rows, with Nelder-Mead over
 * the model's parameters in log space (they are positive).
 */
#include "runtime/cli/fidelity.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static void calibrate_usage(FILE *out)
{
    fprintf(out, "usage: kvsim calibrate RUN_DIR -o CONFIG.json [options]\n"
                 "Fits the step model to the first part of a recorded vLLM run and compares\n"
                 "both parts (docs/fidelity/timing.md). RUN_DIR as for kvsim validate.\n"
                 "  -o, --output CONFIG.json   the fitted configuration (for --config)\n"
                 "  --train-fraction F         share of the requests, by arrival, fitted (0.5)\n"
                 "  --profiles ROOT            fit a correction on the profile (speedup_ratio\n"
                 "                             and step_overhead_ms) instead of the\n"
                 "                             polynomial's coefficients\n"
                 "  --hardware HW              profile hardware label (config.json's)\n"
                 "  --num-gpu-blocks N         KV blocks (meta.json's, else derived)\n"
                 "  --max-trials N             replays the fit may run (400)\n"
                 "\n" CLI_EXIT_HELP);
}

enum { K_OUTPUT = 'o', K_FRACTION = 1, K_PROFILES, K_HARDWARE, K_BLOCKS, K_TRIALS };

static const struct option calibrate_opts[] = {
    {"output", required_argument, NULL, K_OUTPUT},
    {"train-fraction", required_argument, NULL, K_FRACTION},
    {"profiles", required_argument, NULL, K_PROFILES},
    {"hardware", required_argument, NULL, K_HARDWARE},
    {"num-gpu-blocks", required_argument, NULL, K_BLOCKS},
    {"max-trials", required_argument, NULL, K_TRIALS},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

#define MAX_PARAMS 4

/* What is fitted: the polynomial's prefill slope and constant, decode constant and slope over KV
 * utilisation (prefill_ms = p1 T + p0, decode_ms = d1 u + d0; p2 = d2 = 0), or a correction on a
 * profile: a scale (speedup_ratio = 1 / scale: eager-mode kernel times against a run with CUDA
 * graphs) and a fixed cost per step (step_overhead_ms: the CPU side the profile cannot see). */
struct fit {
    struct cli_parser *p;
    struct fid_run *run;
    struct kvsim_step_model base;
    bool profile;
    uint32_t dims;
    size_t train; /* requests [0, train) are fitted */
    double real[FID_NUM_ROWS];
    uint32_t trials, max_trials;
    int error; /* a replay that failed for another reason than the trial's parameters */
};

static void model_of(const struct fit *f, const double *x, struct kvsim_step_model *m)
{
    *m = f->base;
    if (f->profile) {
        m->speedup_ratio = exp(-x[0]);
        m->step_overhead_ms = exp(x[1]);
        return;
    }
    m->prefill_ms[0] = 0;
    m->prefill_ms[1] = exp(x[0]);
    m->prefill_ms[2] = exp(x[1]);
    m->decode_ms[0] = 0;
    m->decode_ms[1] = exp(x[3]);
    m->decode_ms[2] = exp(x[2]);
    m->decode_floor_ms = 0;
    m->speedup_ratio = 1;
}

/* The loss of a trial: the mean squared log ratio sim / real over the training rows. */
static double loss(struct fit *f, const double *x)
{
    if (f->error || f->trials >= f->max_trials)
        return INFINITY;
    f->trials++;
    struct kvsim_step_model m;
    model_of(f, x, &m);
    struct fid_side sim = {0};
    double sv[FID_NUM_ROWS];
    int rc = fid_replay(f->p, f->run, &m, &sim, NULL);
    if (!rc)
        rc = fid_rows(&sim, 0, f->train, sv);
    fid_side_free(&sim);
    if (rc) {
        f->error = rc;
        return INFINITY;
    }
    double s = 0;
    for (int i = 0; i < FID_NUM_ROWS; i++) {
        double r = sv[i] > 0 && f->real[i] > 0 ? log(sv[i] / f->real[i]) : 10;
        s += r * r;
    }
    return s / FID_NUM_ROWS;
}

/* Nelder-Mead (reflection 1, expansion 2, contraction 1/2, shrink 1/2) from x with steps of
 * `step`; leaves the best point in x and returns its loss. */
static double nelder_mead(struct fit *f, double *x, double step)
{
    uint32_t n = f->dims;
    double pt[MAX_PARAMS + 1][MAX_PARAMS], val[MAX_PARAMS + 1];
    for (uint32_t i = 0; i <= n; i++) {
        memcpy(pt[i], x, n * sizeof *x);
        if (i)
            pt[i][i - 1] += step;
        val[i] = loss(f, pt[i]);
    }
    while (f->trials < f->max_trials && !f->error) {
        uint32_t best = 0, worst = 0, second = 0;
        for (uint32_t i = 1; i <= n; i++) {
            if (val[i] < val[best])
                best = i;
            if (val[i] > val[worst])
                worst = i;
        }
        second = best;
        for (uint32_t i = 0; i <= n; i++)
            if (i != worst && val[i] > val[second])
                second = i;
        if (val[worst] - val[best] < 1e-9)
            break;
        double c[MAX_PARAMS] = {0}, r[MAX_PARAMS], e[MAX_PARAMS], k[MAX_PARAMS];
        for (uint32_t i = 0; i <= n; i++)
            for (uint32_t d = 0; d < n && i != worst; d++)
                c[d] += pt[i][d] / n;
        for (uint32_t d = 0; d < n; d++)
            r[d] = c[d] + (c[d] - pt[worst][d]);
        double vr = loss(f, r);
        if (vr < val[best]) {
            for (uint32_t d = 0; d < n; d++)
                e[d] = c[d] + 2 * (c[d] - pt[worst][d]);
            double ve = loss(f, e);
            bool use_e = ve < vr;
            memcpy(pt[worst], use_e ? e : r, n * sizeof *x);
            val[worst] = use_e ? ve : vr;
        } else if (vr < val[second]) {
            memcpy(pt[worst], r, n * sizeof *x);
            val[worst] = vr;
        } else {
            for (uint32_t d = 0; d < n; d++)
                k[d] = c[d] + 0.5 * (pt[worst][d] - c[d]);
            double vk = loss(f, k);
            if (vk < val[worst]) {
                memcpy(pt[worst], k, n * sizeof *x);
                val[worst] = vk;
            } else {
                for (uint32_t i = 0; i <= n; i++) {
                    if (i == best)
                        continue;
                    for (uint32_t d = 0; d < n; d++)
                        pt[i][d] = pt[best][d] + 0.5 * (pt[i][d] - pt[best][d]);
                    val[i] = loss(f, pt[i]);
                }
            }
        }
    }
    uint32_t best = 0;
    for (uint32_t i = 1; i <= n; i++)
        if (val[i] < val[best])
            best = i;
    memcpy(x, pt[best], n * sizeof *x);
    return val[best];
}

static int write_config(const struct cli_parser *p, const char *path, const struct fit *f,
                        const struct kvsim_step_model *m)
{
    json_t *root =
        f->profile ? json_pack("{s:f}", "speedup_ratio", m->speedup_ratio)
                   : json_pack("{s:{s:[f,f,f], s:[f,f,f], s:f}, s:f}", "step_model", "prefill_ms",
                               m->prefill_ms[0], m->prefill_ms[1], m->prefill_ms[2], "decode_ms",
                               m->decode_ms[0], m->decode_ms[1], m->decode_ms[2], "decode_floor_ms",
                               m->decode_floor_ms, "speedup_ratio", m->speedup_ratio);
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(root);
    return rc ? cli_error(p, "--output %s: cannot write", path) : 0;
}

/* Prints the fitted model's tables on the training and the held-out requests. */
static int report_fit(struct fit *f, const struct kvsim_step_model *m)
{
    struct fid_side sim = {0};
    double rt[FID_NUM_ROWS], st[FID_NUM_ROWS], rh[FID_NUM_ROWS], sh[FID_NUM_ROWS];
    size_t n = f->run->real.n;
    int rc = fid_replay(f->p, f->run, m, &sim, NULL);
    if (!rc)
        rc = fid_rows(&f->run->real, 0, f->train, rt) || fid_rows(&sim, 0, f->train, st) ||
                     fid_rows(&f->run->real, f->train, n, rh) || fid_rows(&sim, f->train, n, sh)
                 ? -ENOMEM
                 : 0;
    fid_side_free(&sim);
    if (rc)
        return rc;
    printf("\ntraining requests (the first %zu by arrival)\n", f->train);
    fid_print(stdout, rt, st);
    printf("\nheld-out requests (the other %zu)\n", n - f->train);
    fid_print(stdout, rh, sh);
    return 0;
}

struct calibrate_args {
    struct fid_opts fo;
    const char *output;
    double fraction;
    uint32_t max_trials;
    struct cli_timing timing;
};

static int calibrate_run(struct cli_parser *p, const char *dir, struct calibrate_args *a)
{
    struct fid_run run;
    int orc = fid_open(p, dir, &a->fo, &a->timing, &run);
    if (!orc) /* before the fit */
        orc = fid_check_output(p, dir, &a->fo, &a->timing, "--output", a->output);
    if (orc) {
        fid_close(&run);
        return CLI_EXIT_USAGE;
    }
    struct fit f = {.p = p,
                    .run = &run,
                    .base = run.cfg.model,
                    .profile = a->timing.r.profile != NULL,
                    .max_trials = a->max_trials};
    f.dims = f.profile ? 2 : 4;
    f.train = (size_t)llround(a->fraction * (double)run.real.n);
    int status = CLI_EXIT_OK, rc;
    char train[96], held[64];
    snprintf(train, sizeof train, " over the training requests (the first %zu by arrival)",
             f.train);
    snprintf(held, sizeof held, " over the held-out requests (the other %zu)",
             run.real.n - f.train);
    if (f.train < 2 || f.train + 2 > run.real.n) {
        cli_error(p,
                  "--train-fraction %g leaves %zu training and %zu held-out requests (at "
                  "least 2 each)",
                  a->fraction, f.train, run.real.n - f.train);
        status = CLI_EXIT_USAGE;
    } else if ((rc = fid_check_real(p, &run, 0, f.train, train, true)) ||
               (rc = fid_check_real(p, &run, f.train, run.real.n, held, false))) {
        status = cli_status_of(rc); /* a zero of either side would be fitted or compared */
    } else if (fid_rows(&run.real, 0, f.train, f.real)) {
        cli_error(p, "out of memory");
        status = CLI_EXIT_FAILED;
    }
    if (status != CLI_EXIT_OK) {
        fid_close(&run);
        return status;
    }
    /* start from the default polynomial (decode slope at least 1 ms) or a scale of 1 */
    const struct kvsim_step_model *b = &f.base;
    double x[MAX_PARAMS] = {log(fmax(b->prefill_ms[1], 1e-6)), log(fmax(b->prefill_ms[2], 1e-3)),
                            log(fmax(b->decode_ms[2], 1e-3)), log(fmax(b->decode_ms[1], 1))};
    if (f.profile) { /* from a scale of 1 and 0.1 ms a step */
        x[0] = log(b->speedup_ratio > 0 ? 1 / b->speedup_ratio : 1);
        x[1] = log(fmax(b->step_overhead_ms, 0.1));
    }
    double l = nelder_mead(&f, x, 0.5);
    if (f.error) {
        fid_close(&run);
        return cli_status_of(f.error);
    }
    struct kvsim_step_model m;
    model_of(&f, x, &m);
    printf("run          %s (%zu requests)\n", dir, run.real.n);
    printf("scheduling   %s\n", run.scheduling);
    if (f.profile)
        printf("fitted       speedup_ratio %.6g, step_overhead_ms %.4g on profile %s\n",
               m.speedup_ratio, m.step_overhead_ms, kvsim_profile_dir(a->timing.r.profile));
    else
        printf("fitted       prefill_ms = %.6g T + %.6g, decode_ms = %.6g u + %.6g\n",
               m.prefill_ms[1], m.prefill_ms[2], m.decode_ms[1], m.decode_ms[2]);
    printf("fit          %u replays, training loss %.6g (mean squared log ratio)\n", f.trials, l);
    if (report_fit(&f, &m) || write_config(p, a->output, &f, &m))
        status = CLI_EXIT_FAILED;
    else
        printf("\nwritten      %s (use it with --config)\n", a->output);
    fid_close(&run);
    return status;
}

int cli_calibrate_main(int argc, char **argv)
{
    struct cli_parser p;
    struct calibrate_args a = {
        .fo = {.polynomial_default = true}, .fraction = 0.5, .max_trials = 400};
    cli_timing_default(&a.timing);
    cli_begin(&p, "kvsim calibrate", argc, argv, calibrate_opts, "ho:");
    int c;
    while ((c = cli_next(&p)) > 0) {
        int rc = 0;
        switch (c) {
        case 'h': calibrate_usage(stdout); return CLI_EXIT_OK;
        case K_OUTPUT: a.output = p.arg; break;
        case K_FRACTION: rc = cli_double(&p, 0, true, 1, &a.fraction); break;
        case K_PROFILES:
        case K_HARDWARE:
        case K_BLOCKS: rc = cli_table_set(&p, &a.timing, &a.fo.blocks); break;
        case K_TRIALS: rc = cli_u32(&p, 1, 100000, &a.max_trials); break;
        }
        if (rc)
            return CLI_EXIT_USAGE;
    }
    if (c < 0)
        return CLI_EXIT_USAGE;
    if (cli_optind() + 1 != argc || !a.output) {
        cli_error(&p, cli_optind() + 1 != argc ? "expected one RUN_DIR" : "needs -o CONFIG.json");
        calibrate_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    int status = calibrate_run(&p, argv[cli_optind()], &a);
    cli_timing_fini(&a.timing);
    return status;
}
