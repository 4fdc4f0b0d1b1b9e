/*
 * plan_cmd.c - `kvsim plan [TRACE] --slo-... --attainment P (--min OPTION=LO..HI | --max
 * arrival-speedup=LO..HI) [replay options] --out DIR`: the smallest cluster that meets an SLO,
 * or the most load a configuration serves at it, by replaying the trace at the candidates a
 * bisection picks (docs/plan.md).
 *
 * The candidates are the values of the searched option: every integer in LO..HI (--min), or LO,
 * LO x (1 + R), LO x (1 + R)^2, ..., each the previous times 1 + R rounded to six significant
 * digits, then HI (--max, R the resolution). They are the one axis of a sweep (sweep.h): each is
 * resolved and identified up front, and a probe is that point run as a sweep runs it, so every
 * probe is a row of DIR in the sweep's format and a rerun keeps the reports already there.
 *
 * The search works on the candidates ordered from the hardest to the easiest (fewest engines
 * first; most load first), where "meets" (SLO attainment >= P) is expected to go from false to
 * true once: it probes the easiest (nothing meets when it fails) and the hardest (the answer when
 * it meets), then bisects, so that the answer's harder neighbour (one engine fewer; the load x
 * (1 + R)) is always a probe that failed. Attainment that falls on an easier probe is not
 * monotone: the plan says so and runs every candidate between the two probes on the hard side
 * of the answer, then takes the hardest candidate that meets.
 *
 * Threads: single-threaded (it forks one replay at a time).
 */
#include "runtime/cli/sweep.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvpool/base.h"
#include "runtime/report/report.h"

static void plan_usage(FILE *out)
{
    fprintf(
        out,
        "usage: kvsim plan [TRACE] --slo-ttft-ms X [--slo-itl-ms Y] [--slo-e2e-ms Z]\n"
        "                  --attainment P (--min OPTION=LO..HI | --max arrival-speedup=LO..HI)\n"
        "                  [--resolution R] [--cost-per-gpu-hour C] [replay options]\n"
        "                  --out DIR [--force] [--quiet]\n"
        "\n"
        "Searches for the smallest cluster that meets the SLOs, or the most load a\n"
        "configuration serves at them, by replaying the trace (docs/plan.md).\n"
        "\n"
        "  --attainment P   the share of requests, in percent [1, 100], that must meet\n"
        "                   every SLO given (--slo-ttft-ms, --slo-itl-ms, --slo-e2e-ms:\n"
        "                   at least one); a request that does not finish does not meet\n"
        "  --min OPTION=LO..HI  the smallest value in LO..HI that meets: OPTION is engines,\n"
        "                   prefill-engines or decode-engines (the other one given)\n"
        "  --max arrival-speedup=LO..HI  the largest load that meets: the candidates are\n"
        "                   LO, LO x (1 + R), ... up to HI\n"
        "  --resolution R   with --max: the step between candidates, in percent, at\n"
        "                   least 0.01 (default 2: the answer L meets, L x 1.02 does\n"
        "                   not; each candidate rounded to six significant digits)\n"
        "  --cost-per-gpu-hour C  the answer's cost per hour and per million output\n"
        "                   tokens (GPUs: engines x --data-parallel-size x --tp, or\n"
        "                   prefill + decode engines x --tp)\n"
        "  --out DIR        where the plan writes: plan.json (the answer, the SLOs, every\n"
        "                   probe, the neighbour check), plan.svg, and every probe as a\n"
        "                   sweep writes its points (rows.jsonl, rows.csv, reports/<id>.json)\n"
        "  --force          rerun the probes whose report is already in DIR (by default a\n"
        "                   rerun keeps them, as a sweep does)\n"
        "  --quiet          no probe lines, no table: the answer and the summary line\n"
        "  -h, --help       print this help\n"
        "\n"
        "The search bisects, so the answer's neighbour (one engine fewer; the load x\n"
        "(1 + R)) is a probe that did not meet. Where attainment is not monotone in the\n"
        "option, the plan says so and runs every candidate between the two probes.\n"
        "\n"
        "Exit status: 0 an answer (also when LO, or HI for --max, already meets); 1 nothing\n"
        "in the range meets (the best probe is shown) or a probe failed to run (its error);\n"
        "2 usage error or bad input; 130 (SIGINT; 143 SIGTERM, 129 SIGHUP) interrupted (the\n"
        "probes so far are kept).\n");
}

/* Candidates at most (each one a point resolved up front). */
#define PLAN_MAX_CANDIDATES 10000u

enum probe_result { PROBE_MEETS, PROBE_FAILS, PROBE_ERROR, PROBE_INTERRUPTED };

enum plan_outcome {
    PLAN_FOUND,       /* bisection: the answer meets, its harder neighbour does not */
    PLAN_HARDEST,     /* the hardest candidate (LO for --min, the top for --max) meets */
    PLAN_NONE,        /* not even the easiest candidate meets */
    PLAN_PROBE_ERROR, /* a probe did not run */
    PLAN_INTERRUPTED,
};

struct plan {
    struct sweep sw; /* one axis: the candidates, in increasing value */
    bool maximize;   /* --max (else --min) */
    const char *range_text;
    double lo, hi;
    double resolution_pct; /* --max: R */
    double attainment;     /* P */
    double cost_per_gpu_hour;
    size_t ncand;
    size_t *probes; /* candidate indices (values' order), in the order probed */
    size_t nprobes;
    FILE *rows;
    bool say;           /* a line per probe and the table (not --quiet) */
    const char *slo[3]; /* --slo-ttft-ms, --slo-itl-ms, --slo-e2e-ms as given, or NULL */
    /* What the search found. */
    enum plan_outcome outcome;
    long answer;           /* candidate index, or -1 */
    long neighbour;        /* the answer's harder neighbour (a probe that did not meet), or -1 */
    long inversion[2];     /* candidates where attainment falls on the easier one, or -1 */
    size_t scanned;        /* candidates run because of it */
    bool checked;          /* plan_check_monotone ran (monotonicity is known) */
    char trace_sha256[65]; /* the first probe's trace: every probe must read the same bytes */
    char error[2048];
    int error_status; /* the exit status of PLAN_PROBE_ERROR: 2 when the trace was refused */
};

/* Candidate index (values' order) of search position j: 0 the hardest, ncand - 1 the easiest. */
static size_t plan_candidate(const struct plan *pl, size_t j)
{
    return pl->maximize ? pl->ncand - 1 - j : j;
}

static size_t plan_position(const struct plan *pl, size_t k)
{
    return pl->maximize ? pl->ncand - 1 - k : k;
}

static const char *plan_value(const struct plan *pl, size_t k)
{
    return sweep_axis_value(&pl->sw, 0, k);
}

/* The searched option as a unit after candidate k's value: "1 engine", "2 engines". */
static const char *plan_unit(const struct plan *pl, size_t k)
{
    static char unit[64];
    snprintf(unit, sizeof unit, "%s", pl->sw.axes[0].name);
    size_t n = strlen(unit);
    if (!strcmp(plan_value(pl, k), "1") && n > 1 && unit[n - 1] == 's')
        unit[n - 1] = 0;
    return unit;
}

static double plan_metric(const struct plan *pl, size_t k, const char *name)
{
    return sweep_metric_value(&pl->sw, &pl->sw.points[k], name);
}

static bool plan_meets(const struct plan *pl, size_t k)
{
    const struct sweep_point *pt = &pl->sw.points[k];
    return pt->state == POINT_OK && plan_metric(pl, k, "slo_attainment_pct") >= pl->attainment;
}

/* Candidate k's attainment for people: two decimals, more where two would show the wrong
 * side of P (94.998 is not "95.00" when P is 95). */
static void plan_pct(const struct plan *pl, size_t k, char *buf, size_t len)
{
    double x = plan_metric(pl, k, "slo_attainment_pct");
    if (isnan(x)) {
        snprintf(buf, len, "-");
        return;
    }
    for (int digits = 2; digits <= 12; digits++) {
        snprintf(buf, len, "%.*f", digits, x);
        if ((strtod(buf, NULL) >= pl->attainment) == (x >= pl->attainment))
            break;
    }
}

static bool plan_probed(const struct plan *pl, size_t k) { return pl->sw.points[k].row != NULL; }

/* Whether candidate k's replay ended early (--max-sim-time-s): its attainment is then over the
 * requests that arrived, those cut off counted as misses. */
static bool plan_cut_short(const struct plan *pl, size_t k)
{
    const struct sweep_point *pt = &pl->sw.points[k];
    return pt->state == POINT_OK && json_is_false(json_object_get(pt->row, "complete"));
}

/* Runs candidate k (or keeps its report) and says whether it meets. Returns a probe_result;
 * PROBE_ERROR with the message in pl->error. */
static enum probe_result plan_probe(struct plan *pl, size_t k)
{
    struct sweep *sw = &pl->sw;
    struct sweep_point *pt = &sw->points[k];
    if (!plan_probed(pl, k)) {
        pl->probes[pl->nprobes++] = k;
        int rc = 0;
        if (pt->state == POINT_INVALID) {
            char *why = pt->error;
            pt->error = NULL;
            rc = sweep_finish_point(sw, pt, pl->rows, NULL, why);
            free(why);
        } else {
            pt->state = POINT_PENDING;
            rc = sweep_run_points(sw, pl->rows);
        }
        if (rc) {
            snprintf(pl->error, sizeof pl->error, "%s", kvsim_strerror(rc));
            return PROBE_ERROR;
        }
        if (pt->state == POINT_PENDING) {
            pl->nprobes--;
            return PROBE_INTERRUPTED;
        }
        if (pl->say) {
            char att[32], ttft[32];
            plan_pct(pl, k, att, sizeof att);
            sweep_short_number(plan_metric(pl, k, "ttft_p99_ms"), ttft, sizeof ttft);
            char cut[160] = "";
            if (plan_cut_short(pl, k))
                snprintf(cut, sizeof cut,
                         "; ended at --max-sim-time-s: %.0f arrived, %.0f cut off (misses)",
                         plan_metric(pl, k, "arrived"), plan_metric(pl, k, "cut_off"));
            if (pt->state == POINT_OK)
                printf("plan: probe %zu: %s=%s: attainment %s %% (%s), ttft p99 %s ms%s%s\n",
                       pl->nprobes, sw->axes[0].name, plan_value(pl, k), att,
                       plan_meets(pl, k) ? "meets" : "does not meet", ttft, cut,
                       pt->reused ? " (kept)" : "");
            fflush(stdout);
        }
    }
    if (pt->state != POINT_OK) {
        const struct sweep_group *g = &sw->groups[pt->group];
        pl->error_status = pt->state == POINT_FAILED && g->trace_path && g->loaded && g->load_rc
                               ? cli_status_of(g->load_rc)
                               : CLI_EXIT_FAILED;
        snprintf(pl->error, sizeof pl->error, "the probe %s=%s %s: %s", sw->axes[0].name,
                 plan_value(pl, k),
                 pt->state == POINT_INVALID ? "is not a valid configuration" : "failed",
                 pt->error ? pt->error : "?");
        return PROBE_ERROR;
    }
    const struct sweep_group *g = &sw->groups[pt->group];
    if (g->trace_path && g->loaded && !g->load_rc) { /* --max reads the file for each load */
        if (!pl->trace_sha256[0])
            snprintf(pl->trace_sha256, sizeof pl->trace_sha256, "%s", g->trace.sha256);
        else if (strcmp(pl->trace_sha256, g->trace.sha256)) {
            pl->error_status = CLI_EXIT_FAILED;
            snprintf(pl->error, sizeof pl->error,
                     "%s changed during the plan: the probe %s=%s read other bytes (sha256 "
                     "%.12s...) than the first probe (%.12s...)",
                     g->trace_path, sw->axes[0].name, plan_value(pl, k), g->trace.sha256,
                     pl->trace_sha256);
            return PROBE_ERROR;
        }
    }
    return plan_meets(pl, k) ? PROBE_MEETS : PROBE_FAILS;
}

/* The bisection: sets pl->outcome, answer and neighbour. Returns the probe_result that ended
 * it early (PROBE_ERROR, PROBE_INTERRUPTED) or PROBE_MEETS. */
static enum probe_result plan_bisect(struct plan *pl)
{
    size_t last = pl->ncand - 1;
    enum probe_result r = plan_probe(pl, plan_candidate(pl, last));
    if (r == PROBE_ERROR || r == PROBE_INTERRUPTED)
        return r;
    if (r == PROBE_FAILS) {
        pl->outcome = PLAN_NONE;
        return PROBE_MEETS;
    }
    if (last == 0) {
        pl->outcome = PLAN_HARDEST;
        pl->answer = (long)plan_candidate(pl, 0);
        return PROBE_MEETS;
    }
    r = plan_probe(pl, plan_candidate(pl, 0));
    if (r == PROBE_ERROR || r == PROBE_INTERRUPTED)
        return r;
    if (r == PROBE_MEETS) {
        pl->outcome = PLAN_HARDEST;
        pl->answer = (long)plan_candidate(pl, 0);
        return PROBE_MEETS;
    }
    size_t lo = 0, hi = last; /* lo does not meet, hi meets */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        r = plan_probe(pl, plan_candidate(pl, mid));
        if (r == PROBE_ERROR || r == PROBE_INTERRUPTED)
            return r;
        if (r == PROBE_MEETS)
            hi = mid;
        else
            lo = mid;
    }
    pl->outcome = PLAN_FOUND;
    pl->answer = (long)plan_candidate(pl, hi);
    pl->neighbour = (long)plan_candidate(pl, lo);
    return PROBE_MEETS;
}

/* After the bisection: where attainment falls from a harder probe to the next easier one, say
 * so (pl->inversion: the first such pair) and run the candidates between them that are harder
 * than the answer; the answer is then the hardest candidate that meets, and its harder
 * neighbour is run too when it was not. Returns as plan_bisect. */
static enum probe_result plan_check_monotone(struct plan *pl)
{
    size_t n = pl->ncand;
    pl->checked = true;
    long prev = -1;
    for (size_t j = 0; j < n; j++) { /* the probes that ran, hardest first */
        size_t k = plan_candidate(pl, j);
        if (pl->sw.points[k].state != POINT_OK)
            continue;
        if (prev >= 0 && plan_metric(pl, k, "slo_attainment_pct") <
                             plan_metric(pl, (size_t)prev, "slo_attainment_pct")) {
            if (pl->inversion[0] < 0) {
                pl->inversion[0] = prev;
                pl->inversion[1] = (long)k;
            }
            size_t ja = plan_position(pl, (size_t)prev), jb = j;
            size_t stop = pl->answer >= 0 ? plan_position(pl, (size_t)pl->answer) : n;
            for (size_t s = ja + 1; s < jb && s < stop; s++) {
                size_t c = plan_candidate(pl, s);
                if (plan_probed(pl, c))
                    continue;
                enum probe_result r = plan_probe(pl, c);
                if (r == PROBE_ERROR || r == PROBE_INTERRUPTED)
                    return r;
                pl->scanned++;
            }
        }
        prev = (long)k;
    }
    if (pl->answer < 0)
        return PROBE_MEETS;
    size_t best = plan_position(pl, (size_t)pl->answer);
    for (size_t j = 0; j < best; j++)
        if (plan_meets(pl, plan_candidate(pl, j)))
            best = j;
    while (best > 0) { /* the harder neighbour must be a probe that does not meet */
        size_t c = plan_candidate(pl, best - 1);
        bool fresh = !plan_probed(pl, c);
        enum probe_result r = plan_probe(pl, c);
        if (r == PROBE_ERROR || r == PROBE_INTERRUPTED)
            return r;
        pl->scanned += fresh;
        if (r == PROBE_FAILS)
            break;
        best--;
    }
    pl->answer = (long)plan_candidate(pl, best);
    pl->neighbour = best > 0 ? (long)plan_candidate(pl, best - 1) : -1;
    if (best == 0)
        pl->outcome = PLAN_HARDEST;
    return PROBE_MEETS;
}

/* ---- the command line ----------------------------------------------------------------------- */

/* "LO..HI" into lo and hi (integers with --min). Returns 0 or -EINVAL (printed). */
static int plan_range(struct cli_parser *p, struct plan *pl, const char *opt, const char *text)
{
    const char *dots = strstr(text, "..");
    char lo_text[64];
    if (!dots || dots == text || !dots[2] || (size_t)(dots - text) >= sizeof lo_text)
        return cli_error(p, "option %s: '%s' is not OPTION=LO..HI", opt, pl->range_text);
    memcpy(lo_text, text, (size_t)(dots - text));
    lo_text[dots - text] = 0;
    if (pl->maximize) {
        if (!kvsim_parse_double(lo_text, 0, true, 1e6, &pl->lo) ||
            !kvsim_parse_double(dots + 2, 0, true, 1e6, &pl->hi))
            return cli_error(p, "option %s: '%s': LO and HI must be numbers in (0, 1e6]", opt,
                             pl->range_text);
    } else {
        uint64_t lo, hi;
        if (!kvsim_parse_u64(lo_text, 1, 4096, &lo) || !kvsim_parse_u64(dots + 2, 1, 4096, &hi))
            return cli_error(p, "option %s: '%s': LO and HI must be integers in [1, 4096]", opt,
                             pl->range_text);
        pl->lo = (double)lo;
        pl->hi = (double)hi;
    }
    if (pl->lo > pl->hi)
        return cli_error(p, "option %s: '%s': LO is above HI", opt, pl->range_text);
    return 0;
}

/* The candidates as the sweep's one axis. Returns 0 or -EINVAL (printed). */
static int plan_candidates(struct cli_parser *p, struct plan *pl, const char *name)
{
    size_t n = 0, cap = 64;
    char **vals = malloc(cap * sizeof *vals);
    int rc = vals ? 0 : cli_error(p, "out of memory");
    double x = pl->lo, step = 1.0 + pl->resolution_pct / 100.0;
    while (!rc) {
        char buf[64];
        if (pl->maximize)
            sweep_real_text(x, buf, sizeof buf);
        else
            snprintf(buf, sizeof buf, "%.0f", x);
        if (n == PLAN_MAX_CANDIDATES) {
            rc = cli_error(p,
                           "option --max %s with --resolution %g %%: more than %u candidates "
                           "(a coarser resolution or a narrower range)",
                           pl->range_text, pl->resolution_pct, PLAN_MAX_CANDIDATES);
            break;
        }
        if (n == cap) {
            char **grown = realloc(vals, 2 * cap * sizeof *vals);
            if (!grown) {
                rc = cli_error(p, "out of memory");
                break;
            }
            vals = grown;
            cap *= 2;
        }
        if (!(vals[n++] = strdup(buf))) {
            n--;
            rc = cli_error(p, "out of memory");
            break;
        }
        double next = x + 1;
        if (pl->maximize) { /* six significant digits: 0.304749, not 0.30474860499868933 */
            snprintf(buf, sizeof buf, "%.6g", x * step);
            next = strtod(buf, NULL);
        }
        if (next == x || x >= pl->hi)
            break;
        if (next > pl->hi) /* HI itself is the last candidate (closer than 1 + R) */
            next = pl->hi;
        x = next;
    }
    if (!rc) {
        char where[600];
        snprintf(where, sizeof where, "option --%s %.500s", pl->maximize ? "max" : "min",
                 pl->range_text);
        rc = sweep_add_axis_values(p, &pl->sw, name, (const char *const *)vals, n, where);
    }
    for (size_t i = 0; vals && i < n; i++)
        free(vals[i]);
    free(vals);
    pl->ncand = n;
    return rc;
}

/* Parses the command line into pl. Returns 0, 1 (help printed) or -EINVAL (printed). */
static int plan_parse_args(struct plan *pl, int argc, char **argv)
{
    enum { O_MIN = 0x2000, O_MAX, O_ATTAIN, O_RES, O_COST, O_OUT, O_FORCE };
    static const struct option own[] = {{"min", required_argument, NULL, O_MIN},
                                        {"max", required_argument, NULL, O_MAX},
                                        {"attainment", required_argument, NULL, O_ATTAIN},
                                        {"resolution", required_argument, NULL, O_RES},
                                        {"cost-per-gpu-hour", required_argument, NULL, O_COST},
                                        {"out", required_argument, NULL, O_OUT},
                                        {"force", no_argument, NULL, O_FORCE},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
    static struct option opts[200];
    struct sweep *sw = &pl->sw;
    if (sweep_getopt_table(sw, opts, sizeof opts / sizeof opts[0], own))
        return -EINVAL;
    struct cli_parser p;
    cli_begin(&p, "kvsim plan", argc, argv, opts, "h");
    const char *goal = NULL;
    bool res_given = false;
    int c;
    while ((c = cli_next(&p)) > 0) {
        switch (c) {
        case O_MIN:
        case O_MAX:
            if (goal)
                return cli_error(&p, "one goal: --%s %s, then %s %s", pl->maximize ? "max" : "min",
                                 goal, p.name, p.arg);
            goal = p.arg;
            pl->maximize = c == O_MAX;
            break;
        case O_ATTAIN:
            if (cli_double(&p, 0, true, 100, &pl->attainment))
                return -EINVAL;
            if (pl->attainment < 1) /* 0.95 is a fraction, not 0.95 % */
                return cli_error(&p,
                                 "option --attainment: '%s' is a percentage in [1, 100]: did "
                                 "you mean %g?",
                                 p.arg, pl->attainment * 100);
            break;
        case O_RES:
            if (cli_double(&p, 0.01, false, 100, &pl->resolution_pct))
                return -EINVAL;
            res_given = true;
            break;
        case O_COST:
            if (cli_double(&p, 0, true, 1e9, &pl->cost_per_gpu_hour))
                return -EINVAL;
            break;
        case O_OUT: sw->out = p.arg; break;
        case O_FORCE: sw->force = true; break;
        case 'h': plan_usage(stdout); return 1;
        default: {
            int rc = sweep_take_replay_option(&p, sw);
            if (rc)
                return rc; /* -EINVAL, or -ENOMEM reading a file it names */
        }
        }
    }
    if (c < 0) {
        fprintf(stderr, "kvsim plan --help lists the options\n");
        return -EINVAL;
    }
    if (sweep_take_trace(&p, sw, argc, argv))
        return -EINVAL;
    if (!goal)
        return cli_error(&p, "nothing to search: give --min engines=LO..HI (or prefill-engines, "
                             "decode-engines) or --max arrival-speedup=LO..HI");
    const char *opt = pl->maximize ? "--max" : "--min";
    const char *eq = strchr(goal, '=');
    char name[64] = "", canon[64];
    if (eq && (size_t)(eq - goal) < sizeof name) {
        memcpy(name, goal, (size_t)(eq - goal));
        name[eq - goal] = 0;
    }
    pl->range_text = goal;
    kvsim_options_canonical(name, canon, sizeof canon);
    static const char *const mins[] = {"engines", "prefill-engines", "decode-engines"};
    bool known = false;
    for (size_t i = 0; i < 3 && !pl->maximize; i++)
        known |= !strcmp(canon, mins[i]);
    known |= pl->maximize && !strcmp(canon, "arrival-speedup");
    if (!eq || !known)
        return cli_error(&p, "option %s: '%s': %s", opt, goal,
                         pl->maximize ? "the option searched is arrival-speedup "
                                        "(arrival-speedup=LO..HI)"
                                      : "the option searched is engines, prefill-engines or "
                                        "decode-engines (e.g. engines=1..16)");
    if (res_given && !pl->maximize)
        return cli_error(&p, "option --resolution: only with --max (--min searches integers)");
    if (plan_range(&p, pl, opt, eq + 1) || plan_candidates(&p, pl, canon))
        return -EINVAL;
    if (sweep_check_axes_vs_base(&p, sw))
        return -EINVAL;
    static const char *const slo[] = {"slo-ttft-ms", "slo-itl-ms", "slo-e2e-ms"};
    for (size_t i = 0; i < sw->nbase; i++)
        for (size_t s = 0; s < 3; s++) {
            char key[64];
            if (!strcmp(sweep_setting_key(sw->base[i].name, key, sizeof key), slo[s]))
                pl->slo[s] = sw->base[i].value;
        }
    if (!pl->slo[0] && !pl->slo[1] && !pl->slo[2])
        return cli_error(&p, "needs an SLO: --slo-ttft-ms, --slo-itl-ms or --slo-e2e-ms");
    if (pl->attainment <= 0)
        return cli_error(&p, "needs --attainment P (the percent of requests that must meet "
                             "every SLO, e.g. 95)");
    for (size_t i = 0; i < sw->nbase; i++) {
        struct stat st;
        const char *t = sw->base[i].value;
        if (!pl->maximize || strcmp(sw->base[i].name, "trace"))
            continue;
        if (!strcmp(t, "-") || (stat(t, &st) == 0 && !S_ISREG(st.st_mode)))
            return cli_error(&p,
                             "--max arrival-speedup reads the trace once for each load: give "
                             "a regular file, not %s",
                             !strcmp(t, "-") ? "standard input" : t);
    }
    if (!sw->out)
        return cli_error(&p, "needs --out DIR (where the probes and plan.json go)");
    sw->npoints = pl->ncand;
    return 0;
}

/* ---- the outputs ------------------------------------------------------------------------------
 */

/* A probe's figures for plan.json (candidate k). NULL: out of memory. */
static json_t *plan_probe_json(const struct plan *pl, size_t k)
{
    const struct sweep_point *pt = &pl->sw.points[k];
    json_t *o = json_object();
    char value[64];
    snprintf(value, sizeof value, "%s", plan_value(pl, k));
    bool ok = o != NULL;
    json_t *v =
        pl->maximize ? json_real(strtod(value, NULL)) : json_integer(strtoll(value, NULL, 10));
    ok = ok && !json_object_set_new(o, pl->sw.axes[0].name, v);
    ok = ok && !json_object_set_new(o, "id", json_string(pt->id));
    ok = ok && !json_object_set_new(o, "status",
                                    json_string(pt->state == POINT_OK        ? "ok"
                                                : pt->state == POINT_INVALID ? "invalid"
                                                                             : "failed"));
    static const char *const metrics[] = {
        "slo_attainment_pct", "ttft_p99_ms",         "itl_p99_ms", "e2e_p99_ms",
        "requests_per_s",     "output_tokens_per_s", "arrived",    "cut_off"};
    for (size_t m = 0; m < sizeof metrics / sizeof metrics[0] && ok; m++) {
        double x = pt->state == POINT_OK ? plan_metric(pl, k, metrics[m]) : NAN;
        ok = !json_object_set_new(o, metrics[m], isnan(x) ? json_null() : json_real(x));
    }
    struct sweep_topology t;
    if (ok && !sweep_point_topology(&pl->sw, k, &t)) { /* what the searched value deploys */
        ok = !json_object_set_new(o, "data_parallel_size", json_integer(t.data_parallel_size));
        ok = ok &&
             !json_object_set_new(o, "tensor_parallel_size", json_integer(t.tensor_parallel_size));
        ok = ok && !json_object_set_new(o, "gpus", json_integer((json_int_t)t.gpus));
    }
    ok = ok && !json_object_set_new(o, "complete",
                                    pt->state == POINT_OK ? json_boolean(!plan_cut_short(pl, k))
                                                          : json_null());
    ok = ok && !json_object_set_new(o, "meets", json_boolean(plan_meets(pl, k)));
    ok = ok && !json_object_set_new(o, "kept", json_boolean(pt->reused));
    if (ok && pt->error)
        ok = !json_object_set_new(o, "error", json_string(pt->error));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The offered load of the answer's trace: requests/s and output tokens/s of its arrivals (at
 * the answer's arrival-speedup). False when it has no span (one request, the synthetic
 * workload, a trace not loaded). */
static bool plan_offered(const struct plan *pl, size_t k, double *rps, double *otps)
{
    const struct sweep_group *g = &pl->sw.groups[pl->sw.points[k].group];
    if (!g->trace_path || !g->loaded || g->load_rc || g->trace.num_reqs < 2)
        return false;
    const struct kvsim_trace *t = &g->trace;
    int64_t span = t->reqs[t->num_reqs - 1].arrival_ns - t->reqs[0].arrival_ns;
    if (span <= 0)
        return false;
    double out = 0;
    for (size_t i = 0; i < t->num_reqs; i++)
        out += t->reqs[i].output_len;
    *rps = (double)(t->num_reqs - 1) / ((double)span / 1e9);
    *otps = out * ((double)(t->num_reqs - 1) / (double)t->num_reqs) / ((double)span / 1e9);
    return true;
}

/* The GPUs of candidate k: engines (every data-parallel rank; or prefill + decode engines) x
 * tensor-parallel size (0: not a valid configuration). */
static uint64_t plan_gpus(const struct plan *pl, size_t k)
{
    struct sweep_topology t;
    return sweep_point_topology(&pl->sw, k, &t) ? 0 : t.gpus;
}

/* What candidate k deploys, for people: "6 engines", "2 deployments of 2 ranks",
 * "3 prefill + 2 decode engines", each "x tensor parallel T" when T > 1; with gpus, followed
 * by " = N GPUs" where that is not the engines' count. */
static const char *plan_what(const struct plan *pl, size_t k, bool gpus, char *buf, size_t len)
{
    struct sweep_topology t;
    if (sweep_point_topology(&pl->sw, k, &t)) {
        snprintf(buf, len, "%s %s", plan_value(pl, k), plan_unit(pl, k));
        return buf;
    }
    int n;
    if (t.prefill_engines)
        n = snprintf(buf, len, "%" PRIu32 " prefill + %" PRIu32 " decode engines",
                     t.prefill_engines, t.decode_engines);
    else if (t.data_parallel_size > 1)
        n = snprintf(buf, len, "%" PRIu32 " deployment%s of %" PRIu32 " ranks", t.deployments,
                     t.deployments == 1 ? "" : "s", t.data_parallel_size);
    else
        n = snprintf(buf, len, "%" PRIu32 " engine%s", t.deployments,
                     t.deployments == 1 ? "" : "s");
    if (t.tensor_parallel_size > 1 && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " x tensor parallel %" PRIu32,
                      t.tensor_parallel_size);
    if (gpus && t.gpus != t.deployments && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " = %" PRIu64 " GPUs", t.gpus);
    return buf;
}

static const char *plan_outcome_name(enum plan_outcome o)
{
    static const char *const names[] = {"found", "range_end_meets", "none_meets", "probe_failed",
                                        "interrupted"};
    return names[o];
}

/* DIR/plan.json. Returns 0 or a negative errno (printed). */
static int plan_write_json(const struct plan *pl)
{
    const char *name = pl->sw.axes[0].name;
    json_t *root = json_object(), *probes = json_array(), *slo = json_object();
    bool ok = root && probes && slo;
    for (size_t i = 0; i < pl->nprobes && ok; i++) {
        json_t *pj = plan_probe_json(pl, pl->probes[i]);
        ok = pj && !json_array_append_new(probes, pj);
    }
    static const char *const slo_keys[] = {"ttft_ms", "itl_ms", "e2e_ms"};
    for (size_t s = 0; s < 3 && ok; s++)
        ok = !json_object_set_new(slo, slo_keys[s],
                                  pl->slo[s] ? json_real(strtod(pl->slo[s], NULL)) : json_null());
    ok = ok && !json_object_set_new(slo, "attainment_pct", json_real(pl->attainment));
    ok = ok && !json_object_set_new(root, "kvsim", json_string(kvsim_version()));
    ok = ok && !json_object_set_new(root, "goal", json_string(pl->maximize ? "max" : "min"));
    ok = ok && !json_object_set_new(root, "option", json_string(name));
    json_t *range = pl->maximize ? json_pack("[f,f]", pl->lo, pl->hi)
                                 : json_pack("[I,I]", (json_int_t)pl->lo, (json_int_t)pl->hi);
    ok = ok && range && !json_object_set_new(root, "range", range);
    ok = ok && !json_object_set_new(root, "resolution_pct",
                                    pl->maximize ? json_real(pl->resolution_pct) : json_null());
    ok = ok && !json_object_set_new(root, "slo", slo);
    slo = NULL;
    ok = ok && !json_object_set_new(root, "outcome", json_string(plan_outcome_name(pl->outcome)));
    json_t *answer = json_null();
    if (ok && pl->answer >= 0) {
        json_t *v = pl->maximize
                        ? json_real(strtod(plan_value(pl, (size_t)pl->answer), NULL))
                        : json_integer(strtoll(plan_value(pl, (size_t)pl->answer), NULL, 10));
        answer = json_object();
        ok = answer && !json_object_set_new(answer, name, v);
        char what[128];
        ok = ok && !json_object_set_new(
                       answer, "deploys",
                       json_string(plan_what(pl, (size_t)pl->answer, false, what, sizeof what)));
        ok = ok && !json_object_set_new(
                       answer, "gpus", json_integer((json_int_t)plan_gpus(pl, (size_t)pl->answer)));
    }
    ok = ok && !json_object_set_new(root, "answer", answer);
    json_t *at = pl->answer >= 0 ? plan_probe_json(pl, (size_t)pl->answer) : json_null();
    ok = ok && at && !json_object_set_new(root, "answer_probe", at);
    if (ok) { /* --max: the load found, as the trace's arrival rate */
        double rps, otps;
        json_t *offered =
            pl->maximize && pl->answer >= 0 && plan_offered(pl, (size_t)pl->answer, &rps, &otps)
                ? json_pack("{s:f,s:f}", "requests_per_s", rps, "output_tokens_per_s", otps)
                : json_null();
        ok = offered && !json_object_set_new(root, "offered_load", offered);
    }
    json_t *nb = pl->neighbour >= 0 ? plan_probe_json(pl, (size_t)pl->neighbour) : json_null();
    ok = ok && nb && !json_object_set_new(root, "neighbour", nb);
    json_t *mono = json_object();
    ok = ok && mono && !json_object_set_new(root, "monotonicity", mono);
    ok = ok && !json_object_set_new(mono, "monotone",
                                    pl->checked ? json_boolean(pl->inversion[0] < 0) : json_null());
    json_t *inv = json_null();
    if (ok && pl->inversion[0] >= 0)
        inv = json_pack("[o,o]", plan_probe_json(pl, (size_t)pl->inversion[0]),
                        plan_probe_json(pl, (size_t)pl->inversion[1]));
    ok = ok && inv && !json_object_set_new(mono, "falls_between", inv);
    ok = ok && !json_object_set_new(mono, "scanned", json_integer((json_int_t)pl->scanned));
    ok = ok && !json_object_set_new(root, "candidates", json_integer((json_int_t)pl->ncand));
    size_t kept = 0;
    for (size_t i = 0; i < pl->nprobes; i++)
        kept += pl->sw.points[pl->probes[i]].reused;
    ok = ok && !json_object_set_new(root, "probes_used", json_integer((json_int_t)pl->nprobes));
    ok = ok && !json_object_set_new(root, "probes_kept", json_integer((json_int_t)kept));
    json_t *cost = json_null();
    if (ok && pl->cost_per_gpu_hour > 0 && pl->answer >= 0) {
        uint64_t gpus = plan_gpus(pl, (size_t)pl->answer);
        double per_hour = (double)gpus * pl->cost_per_gpu_hour;
        double otps = plan_metric(pl, (size_t)pl->answer, "output_tokens_per_s");
        cost = json_pack("{s:I,s:f,s:f,s:o}", "gpus", (json_int_t)gpus, "per_gpu_hour",
                         pl->cost_per_gpu_hour, "per_hour", per_hour, "per_million_output_tokens",
                         otps > 0 ? json_real(per_hour / (otps * 3600.0) * 1e6) : json_null());
    }
    ok = ok && cost && !json_object_set_new(root, "cost", cost);
    ok = ok && !json_object_set_new(root, "probes", probes);
    probes = NULL;
    if (pl->error[0] && ok)
        ok = !json_object_set_new(root, "error", json_string(pl->error));
    json_decref(slo);
    json_decref(probes);
    if (!ok) {
        json_decref(root);
        fprintf(stderr, "kvsim plan: out of memory\n");
        return -ENOMEM;
    }
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/plan.json", pl->sw.out);
    struct kvsim_output out;
    int rc = kvsim_output_open(&out, path, err, sizeof err);
    if (!rc) {
        char *text =
            json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
        if (text) {
            fputs(text, out.f);
            fputc('\n', out.f);
            free(text);
            rc = kvsim_output_commit(&out, err, sizeof err);
        } else {
            kvsim_output_discard(&out);
            snprintf(err, sizeof err, "out of memory");
            rc = -ENOMEM;
        }
    }
    json_decref(root);
    if (rc)
        fprintf(stderr, "kvsim plan: %s\n", err);
    return rc;
}

/* Candidate k's place on plan.svg's x axis (log10 of the load with --max). */
static double plan_x(const struct plan *pl, size_t k)
{
    double x = strtod(plan_value(pl, k), NULL);
    return pl->maximize ? log10(x) : x;
}

/* DIR/plan.svg: attainment and TTFT p99 (its own scale, on the right) against the searched
 * value, the attainment line P dashed, the answer circled. Returns 0 or a negative errno. */
static int plan_write_svg(const struct plan *pl)
{
    const double W = 760, H = 520;
    struct sweep_plot p = {
        {INFINITY, 0}, {-INFINITY, 100}, 90,          50,
        W - 90 - 120,  H - 50 - 70,      pl->maximize}; /* loads on a log scale: the candidates are
                                                           too */
    double ttft_hi = 0;
    size_t n = 0;
    for (size_t k = 0; k < pl->ncand; k++) {
        if (pl->sw.points[k].state != POINT_OK)
            continue;
        double x = plan_x(pl, k), t = plan_metric(pl, k, "ttft_p99_ms");
        p.lo[0] = fmin(p.lo[0], x);
        p.hi[0] = fmax(p.hi[0], x);
        if (!isnan(t))
            ttft_hi = fmax(ttft_hi, t);
        n++;
    }
    if (!n) {
        p.lo[0] = pl->maximize ? log10(pl->lo) : pl->lo;
        p.hi[0] = pl->maximize ? log10(pl->hi) : pl->hi;
    }
    if (p.hi[0] - p.lo[0] <= 0) {
        p.lo[0] -= pl->maximize ? 0.1 : 1;
        p.hi[0] += pl->maximize ? 0.1 : 1;
    }
    if (ttft_hi <= 0)
        ttft_hi = 1;
    const char *name = pl->sw.axes[0].name;
    char path[4096], err[1024], xt[128];
    snprintf(path, sizeof path, "%s/plan.svg", pl->sw.out);
    snprintf(xt, sizeof xt, "%s%s", name, pl->maximize ? " (log scale)" : "");
    struct kvsim_output out;
    int rc = kvsim_output_open(&out, path, err, sizeof err);
    if (rc) {
        fprintf(stderr, "kvsim plan: %s\n", err);
        return rc;
    }
    FILE *f = out.f;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"13\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n"
            "<text x=\"%.0f\" y=\"28\" font-size=\"16\">kvsim plan --%s %s: %zu probes of %zu "
            "candidates</text>\n",
            W, H, W, H, p.left, pl->maximize ? "max" : "min", pl->range_text, pl->nprobes,
            pl->ncand);
    sweep_svg_axes(f, &p, H, xt, "SLO attainment (%)");
    /* TTFT p99 on the right, its own scale */
    fprintf(f,
            "<g id=\"ttft-axis\" fill=\"#1f77b4\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
            "y2=\"%.1f\" stroke=\"#1f77b4\"/>\n",
            p.left + p.width, p.top, p.left + p.width, p.top + p.height);
    for (int t = 0; t <= 4; t++) {
        char v[32];
        sweep_short_number(ttft_hi * t / 4, v, sizeof v);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", p.left + p.width + 6,
                p.top + p.height - p.height * t / 4 + 4, v);
    }
    fprintf(f,
            "<text transform=\"translate(%.1f %.1f) rotate(90)\" text-anchor=\"middle\">TTFT "
            "p99 (ms)</text></g>\n",
            W - 14, p.top + p.height / 2);
    double yp = sweep_plot_y(&p, pl->attainment);
    fprintf(f,
            "<line id=\"slo-line\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
            "stroke=\"#2ca02c\" stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%.1f\" "
            "text-anchor=\"end\" fill=\"#2ca02c\">attainment %g %%</text>\n",
            p.left, yp, p.left + p.width, yp, p.left + p.width - 6, yp + 16, pl->attainment);
    for (int series = 0; series < 2; series++) {
        fprintf(f, "<polyline id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
                series ? "ttft-p99" : "attainment", series ? "#1f77b4" : "#d62728");
        bool first = true;
        for (size_t k = 0; k < pl->ncand; k++) {
            if (pl->sw.points[k].state != POINT_OK)
                continue;
            double x = sweep_plot_x(&p, plan_x(pl, k));
            double v = plan_metric(pl, k, series ? "ttft_p99_ms" : "slo_attainment_pct");
            if (isnan(v))
                continue;
            double y = series ? p.top + p.height - v / ttft_hi * p.height : sweep_plot_y(&p, v);
            fprintf(f, "%s%.1f,%.1f", first ? "" : " ", x, y);
            first = false;
        }
        fputs("\"/>\n", f);
    }
    fputs("<g id=\"probes\">\n", f);
    for (size_t k = 0; k < pl->ncand; k++) {
        if (pl->sw.points[k].state != POINT_OK)
            continue;
        double x = sweep_plot_x(&p, plan_x(pl, k));
        double y = sweep_plot_y(&p, plan_metric(pl, k, "slo_attainment_pct"));
        bool is_answer = (long)k == pl->answer;
        char pct[32];
        plan_pct(pl, k, pct, sizeof pct);
        fprintf(f,
                "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>%s=%s: "
                "attainment %s %%</title></circle>\n",
                is_answer           ? "answer"
                : plan_meets(pl, k) ? "meets"
                                    : "misses",
                x, y, is_answer ? "8" : "4", plan_meets(pl, k) ? "#d62728" : "#7f7f7f", name,
                plan_value(pl, k), pct);
        if (is_answer && y - 14 < p.top + 6)
            y += 36; /* near the top: the label goes below the point */
        if (is_answer)
            fprintf(f,
                    "<text id=\"answer\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">answer: "
                    "%s</text>\n",
                    x, y - 14, plan_value(pl, k));
    }
    fputs("</g>\n</svg>\n", f);
    rc = kvsim_output_commit(&out, err, sizeof err);
    if (rc)
        fprintf(stderr, "kvsim plan: %s\n", err);
    return rc;
}

/* The probes in value order, on stdout. */
static void plan_print_table(const struct plan *pl)
{
    const char *name = pl->sw.axes[0].name;
    printf("\n%16s %6s %12s %12s %12s %14s  %s\n", name, "gpus", "attainment", "ttft_p99_ms",
           "itl_p99_ms", "requests_per_s", "meets");
    for (size_t k = 0; k < pl->ncand; k++) {
        const struct sweep_point *pt = &pl->sw.points[k];
        if (!pt->row)
            continue;
        char a[32], t[32], i[32], r[32];
        plan_pct(pl, k, a, sizeof a);
        sweep_short_number(plan_metric(pl, k, "ttft_p99_ms"), t, sizeof t);
        sweep_short_number(plan_metric(pl, k, "itl_p99_ms"), i, sizeof i);
        sweep_short_number(plan_metric(pl, k, "requests_per_s"), r, sizeof r);
        char g[32] = "-";
        uint64_t gpus = plan_gpus(pl, k);
        if (gpus)
            snprintf(g, sizeof g, "%" PRIu64, gpus);
        printf("%16s %6s %12s %12s %12s %14s  %s%s\n", plan_value(pl, k), g, a, t, i, r,
               pt->state != POINT_OK ? pt->state == POINT_INVALID ? "invalid" : "failed"
               : plan_meets(pl, k)   ? "yes"
                                     : "no",
               (long)k == pl->answer ? "  <- answer" : "");
    }
    printf("\n");
}

/* The answer's line: "12 engines: attainment 95.1 %; 11 engines: 94.2 %". */
static void plan_print_answer(const struct plan *pl)
{
    const char *name = pl->sw.axes[0].name;
    char a[32], b[32];
    if (pl->outcome == PLAN_NONE) { /* the only probe: the easiest candidate, the best one */
        size_t easiest = plan_candidate(pl, pl->ncand - 1);
        plan_pct(pl, easiest, a, sizeof a);
        printf("plan: the easiest candidate, %s=%s, does not meet attainment %g %% (%s %%): "
               "nothing in %s is expected to (not scanned: kvsim sweep --grid shows the whole "
               "curve)\n",
               name, plan_value(pl, easiest), pl->attainment, a, pl->range_text);
        return;
    }
    if (pl->answer < 0)
        return;
    size_t k = (size_t)pl->answer;
    plan_pct(pl, k, a, sizeof a);
    char what[128];
    double rps, otps;
    char offered[160] = "";
    if (pl->maximize && plan_offered(pl, k, &rps, &otps))
        snprintf(offered, sizeof offered, " (%.4g requests/s, %.4g output tokens/s offered)", rps,
                 otps);
    if (pl->maximize)
        printf("plan: %s %s%s: attainment %s %%", name, plan_value(pl, k), offered, a);
    else
        printf("plan: %s: attainment %s %%", plan_what(pl, k, true, what, sizeof what), a);
    if (pl->neighbour >= 0) {
        plan_pct(pl, (size_t)pl->neighbour, b, sizeof b);
        if (pl->maximize)
            printf("; %s (+%.3g %%): %s %%", plan_value(pl, (size_t)pl->neighbour),
                   (strtod(plan_value(pl, (size_t)pl->neighbour), NULL) /
                        strtod(plan_value(pl, k), NULL) -
                    1) *
                       100,
                   b);
        else
            printf("; %s: %s %%", plan_what(pl, (size_t)pl->neighbour, true, what, sizeof what), b);
    }
    if (pl->outcome == PLAN_HARDEST)
        printf(pl->maximize ? " (the top of the range already meets: raise HI to find the limit)"
                            : " (the low end of the range already meets)");
    printf("\n");
    if (pl->inversion[0] >= 0) {
        plan_pct(pl, (size_t)pl->inversion[0], a, sizeof a);
        plan_pct(pl, (size_t)pl->inversion[1], b, sizeof b);
        printf("plan: attainment is not monotone in %s: %s %% at %s, %s %% at %s; ", name, a,
               plan_value(pl, (size_t)pl->inversion[0]), b,
               plan_value(pl, (size_t)pl->inversion[1]));
        if (pl->scanned)
            printf("%zu more candidates run on the answer's harder side\n", pl->scanned);
        else
            printf("no candidate harder than the answer lies between them: the answer "
                   "stands\n");
    }
    size_t cut = 0;
    for (size_t i = 0; i < pl->nprobes; i++)
        cut += plan_cut_short(pl, pl->probes[i]);
    if (cut)
        printf("plan: --max-sim-time-s ended %zu of the %zu probes early: their attainment is "
               "over the requests that arrived before the end, those unfinished counted as "
               "misses\n",
               cut, pl->nprobes);
    if (pl->cost_per_gpu_hour > 0) {
        uint64_t gpus = plan_gpus(pl, k);
        double per_hour = (double)gpus * pl->cost_per_gpu_hour;
        double out_tps = plan_metric(pl, k, "output_tokens_per_s");
        printf("plan: %" PRIu64 " GPU%s (%s) at %g an hour: %.4g an hour", gpus,
               gpus == 1 ? "" : "s", plan_what(pl, k, false, what, sizeof what),
               pl->cost_per_gpu_hour, per_hour);
        if (out_tps > 0)
            printf(", %.4g per million output tokens", per_hour / (out_tps * 3600.0) * 1e6);
        printf("\n");
    }
}

int cli_plan_main(int argc, char **argv)
{
    struct plan pl = {
        .sw = {.cmd = "kvsim plan", .axis_what = "searched and also given", .jobs = 1},
        .resolution_pct = 2.0,
        .answer = -1,
        .neighbour = -1,
        .inversion = {-1, -1}};
    struct sweep *sw = &pl.sw;
    int prc = plan_parse_args(&pl, argc, argv);
    if (prc) {
        sweep_free(sw);
        return prc > 0 ? CLI_EXIT_OK : prc == -ENOMEM ? CLI_EXIT_FAILED : CLI_EXIT_USAGE;
    }
    int64_t t0 = base_monotonic_ns();
    int rc = sweep_plan_points(sw);
    if (!rc && !(pl.probes = calloc(pl.ncand, sizeof *pl.probes)))
        rc = -ENOMEM;
    if (rc) {
        if (rc == -ENOMEM)
            fprintf(stderr, "kvsim plan: out of memory\n");
        sweep_free(sw);
        free(pl.probes);
        return rc == -ENOMEM ? CLI_EXIT_FAILED : CLI_EXIT_USAGE;
    }
    static const char *const own_files[] = {"rows.jsonl", "rows.csv", "plan.json", "plan.svg"};
    if ((rc = sweep_prepare_out(sw, own_files, 4)) != 0 || !(pl.rows = sweep_open_rows(sw))) {
        sweep_free(sw);
        free(pl.probes);
        return CLI_EXIT_USAGE;
    }
    for (size_t k = 0; k < pl.ncand; k++)
        if (sw->points[k].state == POINT_PENDING)
            sw->points[k].state = POINT_IDLE; /* a candidate runs when the search picks it */
    sw->keep_traces = true; /* every probe of --min engines reads the same requests */
    pl.say = !sw->quiet;
    sw->own_failures = true; /* plan_probe says why a probe failed */
    sw->quiet = true;        /* the plan prints its own line per probe (plan_probe) */
    sweep_note_inputs(sw);
    struct sweep_signals saved;
    sweep_signals_begin(&saved);
    sw->t0 = t0;
    enum probe_result r = plan_bisect(&pl);
    if (r == PROBE_MEETS && pl.answer >= 0)
        r = plan_check_monotone(&pl);
    if (r == PROBE_ERROR)
        pl.outcome = PLAN_PROBE_ERROR;
    else if (r == PROBE_INTERRUPTED)
        pl.outcome = PLAN_INTERRUPTED;
    if (r == PROBE_ERROR || r == PROBE_INTERRUPTED) { /* a search cut short answers nothing */
        pl.answer = pl.neighbour = -1;
        pl.checked = false;
    }
    sweep_signals_end(&saved);
    fclose(pl.rows);
    rc = sweep_write_rows(sw);
    if (!rc)
        rc = plan_write_json(&pl);
    if (!rc)
        rc = plan_write_svg(&pl);
    if (!rc && pl.say)
        plan_print_table(&pl);
    if (pl.outcome == PLAN_PROBE_ERROR)
        fprintf(stderr, "kvsim plan: %s\n", pl.error);
    if (!rc)
        plan_print_answer(&pl);
    size_t kept = 0;
    for (size_t i = 0; i < pl.nprobes; i++)
        kept += sw->points[pl.probes[i]].reused;
    if (!rc)
        printf("plan: %zu probe%s (%zu kept from %s/reports) of %zu candidates a full scan "
               "runs, %.2f s wall; %s/plan.json, %s/plan.svg, %s/rows.jsonl%s\n",
               pl.nprobes, pl.nprobes == 1 ? "" : "s", kept, sw->out, pl.ncand,
               (double)(base_monotonic_ns() - t0) / 1e9, sw->out, sw->out, sw->out,
               pl.outcome == PLAN_INTERRUPTED ? "; interrupted: the same command goes on" : "");
    sweep_free(sw);
    free(pl.probes);
    if (rc)
        return CLI_EXIT_FAILED;
    switch (pl.outcome) {
    case PLAN_FOUND:
    case PLAN_HARDEST: return CLI_EXIT_OK;
    case PLAN_INTERRUPTED: return 128 + (sweep_interrupted ? sweep_interrupted : SIGINT);
    case PLAN_PROBE_ERROR: return pl.error_status ? pl.error_status : CLI_EXIT_FAILED;
    default: return CLI_EXIT_FAILED;
    }
}
