/*
 * sweep_cmd.c - `kvsim sweep [TRACE] --grid OPTION=v1,v2,... [replay options] --out DIR [-j N]`:
 * the replay of every point of a grid of configurations, in worker processes. sweep.c resolves
 * the points, runs them and writes the rows; this file reads the grid (--grid, --spec), marks
 * the Pareto front, draws it and prints the table.
 *
 * Threads: the parent is single-threaded (it forks); each child runs one replay.
 */
#include "runtime/cli/sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvpool/base.h"
#include "runtime/report/report.h"

/* The rows the table at the end shows (the best by --sort). */
#define SWEEP_TABLE_ROWS 20

static void sweep_usage(FILE *out)
{
    fprintf(out,
            "usage: kvsim sweep [TRACE] --grid OPTION=V1,V2,... [--grid ...] [replay options]\n"
            "                   --out DIR [-j N] [--quiet]\n"
            "\n"
            "Replays every point of a grid of configurations, each in its own worker process,\n"
            "and writes one row and one report per point (docs/sweep.md).\n"
            "\n"
            "  --grid OPTION=V1,V2,...  an option of `kvsim replay` (its long name without\n"
            "                   the dashes) and its values; the points are every combination\n"
            "                   of the grids' values. The other replay options are the base\n"
            "                   of every point (each point runs with --threads 1 unless given).\n"
            "                   A flag takes true or false.\n"
            "  --spec FILE      the grid as JSON: {\"grid\": {OPTION: [V1, V2, ...]},\n"
            "                   \"traces\": [FILE, ...], \"seeds\": [N, ...], \"options\":\n"
            "                   {OPTION: V}}, every key optional (traces and seeds are the grids\n"
            "                   of --trace and --seed; options are base options, applied where\n"
            "                   --spec stands); --grid adds to it\n"
            "  --out DIR        where the sweep writes: rows.jsonl and rows.csv (one row per\n"
            "                   point, sorted by id: the configuration and the key metrics,\n"
            "                   no wall-clock figure), reports/<id>.json (each point's report,\n"
            "                   as `kvsim replay --report` writes it)\n"
            "  -j, --jobs N     worker processes (default: the number of cores); under\n"
            "                   mpirun with R > 1 ranks (mpirun -np R kvsim sweep ...:\n"
            "                   docs/scale.md) every rank replays one point at a time and\n"
            "                   -j is refused\n"
            "  --max-points K   start at most K points, then stop (a rerun does the rest)\n"
            "  --force          rerun the points whose report is already in DIR (by default\n"
            "                   a rerun keeps them: a regular file, same kvsim, same recorded\n"
            "                   configuration, same trace bytes, sane figures; any other is\n"
            "                   said and run again)\n"
            "  --sort METRIC    the order of the table printed at the end (the best 20 rows):\n"
            "                   a column of the rows or a --grid option with numbers (default\n"
            "                   ttft_p99_ms; latencies and costs lower first, throughputs,\n"
            "                   attainment and reuse higher first)\n"
            "  --pareto M1,M2[,...]  mark the rows no other row beats in every metric (\"pareto\"\n"
            "                   in the rows, * in the table) and draw DIR/pareto.svg, the\n"
            "                   first two metrics with the front; each metric in its natural\n"
            "                   direction (e.g. ttft_p99_ms,engines or\n"
            "                   goodput_requests_per_s,engines)\n"
            "  --quiet          no progress, no table: the failures and the summary line\n"
            "  -h, --help       print this help\n"
            "\n"
            "The replay options that write files (--report, --config-out, --requests-out,\n"
            "--timeseries-out, --html, --handoff-events) are refused: the sweep writes its own.\n"
            "A point's id is a hash of its whole configuration (the --config-out text).\n"
            "\n"
            "SIGINT (or SIGTERM, SIGHUP) stops handing out points, passes it on to the running\n"
            "ones (cut short, they are no rows and run again next time), writes the rows so far\n"
            "and exits 128 + the signal (130, 143, 129); a second one stops everything at once.\n"
            "\n"
            "Exit status: 0 every point ran (or --max-points stopped it); 1 a point failed or\n"
            "was an invalid combination (its row says why; the others ran); 2 usage error or\n"
            "bad input (a grid value refused by the option table, no point valid, a trace\n"
            "refused by its reader, an --out that cannot be written or is an input); 130\n"
            "(143, 129) interrupted.\n");
}

/* --grid NAME=V1,V2,...: the axis of the option NAME. Returns 0 or -EINVAL (printed). */
static int add_axis(struct cli_parser *p, struct sweep *sw)
{
    const char *arg = p->arg, *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return cli_error(p, "option --grid: '%s' is not OPTION=V1,V2,...", arg);
    char where[600], *text = strdup(arg);
    size_t cap = 1;
    for (const char *c = eq + 1; *c; c++)
        cap += *c == ',';
    const char **vals = calloc(cap, sizeof *vals);
    if (!text || !vals) {
        free(text);
        free(vals);
        return cli_error(p, "out of memory");
    }
    text[eq - arg] = 0;
    size_t n = 0;
    for (char *v = text + (eq - arg) + 1, *next; v; v = next) {
        next = strchr(v, ',');
        if (next)
            *next++ = 0;
        vals[n++] = v;
    }
    snprintf(where, sizeof where, "option --grid %.500s", arg);
    if (!kvsim_options_known(text, NULL)) /* the message names the option, not the list */
        snprintf(where, sizeof where, "option --grid");
    int rc = sweep_add_axis_values(p, sw, text, vals, n, where);
    free(text);
    free(vals);
    return rc;
}

/* A JSON scalar of a spec as an option's text: a string as is, an integer in decimal, a real
 * as the shortest text that reads back, true/false. NULL: not a scalar, or out of memory. */
static char *spec_scalar(const json_t *v)
{
    char buf[64];
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_integer(v))
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        sweep_real_text(json_real_value(v), buf, sizeof buf);
    else if (json_is_boolean(v))
        snprintf(buf, sizeof buf, "%s", json_is_true(v) ? "true" : "false");
    else
        return NULL;
    return strdup(buf);
}

/* The axis `name` from the JSON list `list` of the spec (key: its place, for messages). */
static int spec_axis(struct cli_parser *p, struct sweep *sw, const char *file, const char *key,
                     const char *name, const json_t *list)
{
    char where[4400];
    snprintf(where, sizeof where, "--spec %s: key '%s'", file, key);
    if (!json_is_array(list) || !json_array_size(list))
        return cli_error(p, "%s: must be a non-empty list of values", where);
    size_t n = json_array_size(list);
    char **vals = calloc(n, sizeof *vals);
    int rc = vals ? 0 : cli_error(p, "out of memory");
    for (size_t i = 0; i < n && !rc; i++)
        if (!(vals[i] = spec_scalar(json_array_get(list, i))))
            rc = cli_error(p, "%s: element %zu must be a string, a number or a boolean", where, i);
    if (!rc)
        rc = sweep_add_axis_values(p, sw, name, (const char *const *)vals, n, where);
    for (size_t i = 0; vals && i < n; i++)
        free(vals[i]);
    free(vals);
    return rc;
}

/* --spec FILE: {"grid": {OPTION: [values], ...}, "traces": [paths], "seeds": [integers],
 * "options": {OPTION: value, ...}}, every key optional: the grid's axes (traces and seeds are
 * the axes "trace" and "seed"), and base options applied before the command line's. Returns 0
 * or -EINVAL (printed, naming the file and the key). */
int sweep_read_spec(struct cli_parser *p, struct sweep *sw, const char *file)
{
    json_error_t jerr;
    json_t *doc;
    /* Its values counted as it is parsed: a document past the limit is refused there, before
     * a tree of all of it is built (a grid has at most SWEEP_MAX_POINTS points). */
    int lrc = kvsim_json_load_file_values(file, JSON_REJECT_DUPLICATES, SWEEP_SPEC_MAX_VALUES, &doc,
                                          &jerr);
    if (lrc) {
        char count[64];
        snprintf(count, sizeof count, ": more than %zu values", (size_t)SWEEP_SPEC_MAX_VALUES);
        if (jerr.line > 0)
            cli_error(p, "--spec %s:%d: %s", file, jerr.line, jerr.text);
        else if (json_error_code(&jerr) == json_error_cannot_open_file)
            cli_error(p, "--spec: %s", jerr.text); /* jansson's words: "unable to open FILE" */
        else if (strstr(jerr.text, count))         /* the text begins with the file */
            cli_error(p, "--spec %s (a sweep has at most %u points)", jerr.text, SWEEP_MAX_POINTS);
        else
            cli_error(p, "--spec %s", jerr.text);
        return lrc == -ENOMEM ? -ENOMEM : -EINVAL;
    }
    int rc = json_is_object(doc) ? 0 : cli_error(p, "--spec %s: must be a JSON object", file);
    const char *key;
    json_t *v;
    char path[600];
    if (!rc)
        json_object_foreach(doc, key, v)
        {
            if (rc)
                break;
            if (!strcmp(key, "grid")) {
                if (!json_is_object(v)) {
                    rc = cli_error(p, "--spec %s: key 'grid' must be an object", file);
                    break;
                }
                const char *opt;
                json_t *list;
                json_object_foreach(v, opt, list)
                {
                    snprintf(path, sizeof path, "grid.%.500s", opt);
                    if ((rc = spec_axis(p, sw, file, path, opt, list)))
                        break;
                }
            } else if (!strcmp(key, "traces"))
                rc = spec_axis(p, sw, file, "traces", "trace", v);
            else if (!strcmp(key, "seeds"))
                rc = spec_axis(p, sw, file, "seeds", "seed", v);
            else if (!strcmp(key, "options")) {
                if (!json_is_object(v)) {
                    rc = cli_error(p, "--spec %s: key 'options' must be an object", file);
                    break;
                }
                const char *opt;
                json_t *x;
                json_object_foreach(v, opt, x)
                {
                    char canon[64], err[1024], *text = spec_scalar(x);
                    kvsim_options_canonical(opt, canon, sizeof canon);
                    struct kvsim_options o;
                    kvsim_options_default(&o);
                    int src = !text ? -EINVAL
                              : !kvsim_options_known(canon, NULL)
                                  ? 1
                                  : kvsim_options_set(&o, canon, text, err, sizeof err);
                    kvsim_options_fini(&o);
                    if (!text)
                        rc = cli_error(p,
                                       "--spec %s: key 'options.%s' must be a string, a "
                                       "number or a boolean",
                                       file, opt);
                    else if (src == 1)
                        rc = cli_error(p,
                                       "--spec %s: key 'options.%s': not an option of "
                                       "kvsim replay",
                                       file, opt);
                    else if (sweep_writes_a_file(canon))
                        rc = cli_error(p,
                                       "--spec %s: key 'options.%s': the sweep writes its "
                                       "own files",
                                       file, opt);
                    else if (src)
                        rc = cli_error(p, "--spec %s: key 'options.%s': %s", file, opt, err);
                    else if (!strcmp(canon, "quiet"))
                        sw->quiet = !strcmp(text, "true");
                    else if (sweep_base_put(sw, canon, text, true))
                        rc = cli_error(p, "out of memory");
                    else
                        text = NULL; /* the sweep's now */
                    free(text);
                    if (rc)
                        break;
                }
            } else
                rc = cli_error(p,
                               "--spec %s: unknown key '%s' (a spec has grid, traces, seeds, "
                               "options)",
                               file, key);
        }
    json_decref(doc);
    return rc;
}

static int check_metric(const struct sweep *sw, const char *name, bool directed, char *err,
                        size_t errlen);
/* Parses the command line into sw. Returns 0, 1 (help printed) or -EINVAL (printed). */
static int parse_sweep_args(struct sweep *sw, int argc, char **argv)
{
    /* kvsim replay's options without the outputs' meaning, and the sweep's own. */
    static const struct option own[] = {{"grid", required_argument, NULL, 'g'},
                                        {"out", required_argument, NULL, 'o'},
                                        {"jobs", required_argument, NULL, 'j'},
                                        {"force", no_argument, NULL, 'f'},
                                        {"max-points", required_argument, NULL, 'm'},
                                        {"sort", required_argument, NULL, 's'},
                                        {"pareto", required_argument, NULL, 'p'},
                                        {"spec", required_argument, NULL, 'S'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
    static struct option opts[200];
    if (sweep_getopt_table(sw, opts, sizeof opts / sizeof opts[0], own))
        return -EINVAL;
    struct cli_parser p;
    cli_begin(&p, "kvsim sweep", argc, argv, opts, "j:h");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    sw->jobs = cores > 0 ? (uint32_t)(cores < 1024 ? cores : 1024) : 1;
    int c, rc;
    char err[1024];
    while ((c = cli_next(&p)) > 0) {
        switch (c) {
        case 'g':
            if (add_axis(&p, sw))
                return -EINVAL;
            break;
        case 'o': sw->out = p.arg; break;
        case 'S':
            sw->spec_path = p.arg;
            if ((rc = sweep_read_spec(&p, sw, p.arg)) != 0)
                return rc; /* -EINVAL, or -ENOMEM */
            break;
        case 'j':
            if (cli_u32(&p, 1, 1024, &sw->jobs))
                return -EINVAL;
            sw->jobs_given = true;
            break;
        case 'f': sw->force = true; break;
        case 'm':
            if (cli_u64(&p, 1, UINT64_MAX, &sw->max_points))
                return -EINVAL;
            break;
        case 's': sw->sort = p.arg; break;
        case 'p':
            free(sw->pareto_text);
            if (!(sw->pareto_text = strdup(p.arg)))
                return cli_error(&p, "out of memory");
            sw->npareto = 0;
            for (char *m = sw->pareto_text, *next; m; m = next) {
                next = strchr(m, ',');
                if (next)
                    *next++ = 0;
                if (sw->npareto == SWEEP_MAX_PARETO)
                    return cli_error(&p, "option --pareto: more than %d metrics", SWEEP_MAX_PARETO);
                sw->pareto[sw->npareto++] = m;
            }
            if (sw->npareto < 2)
                return cli_error(&p,
                                 "option --pareto: '%s': give two metrics or more, e.g. "
                                 "ttft_p99_ms,engines",
                                 p.arg);
            break;
        case 'h': sweep_usage(stdout); return 1;
        default:
            if ((rc = sweep_take_replay_option(&p, sw)) != 0)
                return rc; /* -EINVAL, or -ENOMEM reading a file it names */
        }
    }
    if (c < 0) {
        fprintf(stderr, "kvsim sweep --help lists the options\n");
        return -EINVAL;
    }
    if (sweep_take_trace(&p, sw, argc, argv)) /* the trace, as kvsim replay takes it */
        return -EINVAL;
    if (!sw->naxes)
        return cli_error(&p, "nothing to sweep: give at least one --grid OPTION=V1,V2,... (or "
                             "--spec FILE)");
    if (!sw->out)
        return cli_error(&p, "needs --out DIR (where the rows and the reports go)");
    if (sweep_check_axes_vs_base(&p, sw))
        return -EINVAL;
    if (!sw->sort)
        sw->sort = "ttft_p99_ms";
    if (check_metric(sw, sw->sort, false, err, sizeof err))
        return cli_error(&p, "option --sort: %s", err);
    if (sweep_axis_of(sw, sw->sort) >= 0) /* the grid's spelling from here on */
        sw->sort = sw->axes[sweep_axis_of(sw, sw->sort)].name;
    for (size_t m = 0; m < sw->npareto; m++) {
        if (sweep_axis_of(sw, sw->pareto[m]) >= 0)
            sw->pareto[m] = sw->axes[sweep_axis_of(sw, sw->pareto[m])].name;
        if (check_metric(sw, sw->pareto[m], true, err, sizeof err))
            return cli_error(&p, "option --pareto: %s", err);
        bool slo_given = false;
        for (size_t i = 0; i < sw->nbase; i++)
            slo_given |= !strncmp(sw->base[i].name, "slo-", 4);
        for (size_t a = 0; a < sw->naxes; a++)
            slo_given |= !strncmp(sw->axes[a].name, "slo-", 4);
        if (!slo_given &&
            (!strncmp(sw->pareto[m], "slo_", 4) || !strncmp(sw->pareto[m], "goodput", 7)))
            return cli_error(&p,
                             "option --pareto: '%s' needs an objective (--slo-ttft-ms, "
                             "--slo-itl-ms or --slo-e2e-ms)",
                             sw->pareto[m]);
        for (size_t k = 0; k < m; k++)
            if (!strcmp(sw->pareto[k], sw->pareto[m]))
                return cli_error(&p, "option --pareto: '%s' is given twice", sw->pareto[m]);
    }
    size_t total = 1;
    for (size_t a = 0; a < sw->naxes; a++) {
        if (total > SWEEP_MAX_POINTS / sw->axes[a].n)
            return cli_error(&p, "the grid has more than %u points", SWEEP_MAX_POINTS);
        total *= sw->axes[a].n;
    }
    sw->npoints = total;
    return 0;
}

/* A metric of --sort (directed false) or --pareto (directed: it must have a direction): a row
 * column or a grid option with numbers. Returns 0 or -EINVAL with the message. */
static int check_metric(const struct sweep *sw, const char *name, bool directed, char *err,
                        size_t errlen)
{
    bool column = false, known;
    for (size_t m = 0; sweep_row_column(m) && !column; m++)
        column = !strcmp(name, sweep_row_column(m));
    long a = column ? -1 : sweep_axis_of(sw, name);
    if (!column && a < 0) {
        snprintf(err, errlen,
                 "'%s' is neither a column of the rows (ttft_p99_ms, itl_p50_ms, "
                 "requests_per_s, slo_attainment_pct, ...: docs/sweep.md) nor a --grid option",
                 name);
        return -EINVAL;
    }
    for (size_t i = 0; a >= 0 && i < sw->axes[a].n; i++) {
        char *end;
        strtod(sw->axes[a].values[i], &end);
        if (*end) {
            snprintf(err, errlen, "--grid %s has a value that is not a number ('%s')", name,
                     sw->axes[a].values[i]);
            return -EINVAL;
        }
    }
    sweep_metric_lower(name, &known);
    if (directed && !known) {
        snprintf(err, errlen,
                 "'%s' has no natural direction (latencies, costs such as engines and blocks, "
                 "rejections and preemptions are lower-better; throughputs, attainment and "
                 "reuse higher-better)",
                 name);
        return -EINVAL;
    }
    return 0;
}

/* ---- the Pareto front, the table ---------------------------------------------------------- */

/* Marks every row "pareto": true when it ran and no other row that ran dominates it in the
 * --pareto metrics (kvsim_pareto_front). Returns the size of the front, or -ENOMEM. */
static long mark_pareto(struct sweep *sw)
{
    size_t n, m = sw->npareto;
    struct sweep_point **ran = sweep_points_that_ran(sw, &n);
    double *values = malloc((n ? n : 1) * m * sizeof *values);
    bool *front = malloc((n ? n : 1) * sizeof *front), lower[SWEEP_MAX_PARETO];
    if (!ran || !values || !front) {
        free(ran);
        free(values);
        free(front);
        return -ENOMEM;
    }
    for (size_t k = 0; k < m; k++) {
        bool known;
        lower[k] = sweep_metric_lower(sw->pareto[k], &known);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < m; k++)
            values[i * m + k] = sweep_metric_value(sw, ran[i], sw->pareto[k]);
    long size = (long)kvsim_pareto_front(values, n, m, lower, front);
    int bad = 0;
    for (size_t i = 0; i < sw->npoints; i++)
        if (sw->points[i].row)
            bad |= json_object_set_new(sw->points[i].row, "pareto", json_false());
    for (size_t i = 0; i < n; i++)
        bad |= json_object_set_new(ran[i]->row, "pareto", json_boolean(front[i]));
    free(ran);
    free(values);
    free(front);
    return bad ? -ENOMEM : size;
}

static int cmp_x(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* DIR/pareto.svg: the rows that ran, by the first two --pareto metrics, the front drawn (its
 * points joined in the order of the first metric; with more metrics, a point of the front may
 * look dominated in these two). Returns 0 or a negative errno (printed). */
static int write_pareto_svg(const struct sweep *sw)
{
    size_t n;
    struct sweep_point **ran = sweep_points_that_ran(sw, &n);
    double(*xy)[2] = malloc((n ? n : 1) * sizeof *xy);
    double(*fr)[2] = malloc((n ? n : 1) * sizeof *fr);
    if (!ran || !xy || !fr) {
        free(ran);
        free(xy);
        free(fr);
        return -ENOMEM;
    }
    const double W = 760, H = 520;
    struct sweep_plot p = {
        {INFINITY, INFINITY}, {-INFINITY, -INFINITY}, 90, 50, W - 90 - 30, H - 50 - 70, false};
    size_t shown = 0, nf = 0;
    for (size_t i = 0; i < n; i++) {
        xy[i][0] = sweep_metric_value(sw, ran[i], sw->pareto[0]);
        xy[i][1] = sweep_metric_value(sw, ran[i], sw->pareto[1]);
        if (isnan(xy[i][0]) || isnan(xy[i][1]))
            continue;
        shown++;
        for (int d = 0; d < 2; d++) {
            p.lo[d] = fmin(p.lo[d], xy[i][d]);
            p.hi[d] = fmax(p.hi[d], xy[i][d]);
        }
        if (json_is_true(json_object_get(ran[i]->row, "pareto"))) {
            fr[nf][0] = xy[i][0];
            fr[nf++][1] = xy[i][1];
        }
    }
    for (int d = 0; d < 2; d++) {
        if (!shown) {
            p.lo[d] = 0;
            p.hi[d] = 1;
        } else if (p.hi[d] - p.lo[d] <= 0) { /* one value: a band around it */
            double pad = p.lo[d] != 0 ? fabs(p.lo[d]) * 0.1 : 1;
            p.lo[d] -= pad;
            p.hi[d] += pad;
        }
    }
    qsort(fr, nf, sizeof *fr, cmp_x);
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/pareto.svg", sw->out);
    struct kvsim_output out;
    int rc = kvsim_output_open(&out, path, err, sizeof err);
    if (!rc) {
        FILE *f = out.f;
        fprintf(f,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"13\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n"
                "<text x=\"%.0f\" y=\"28\" font-size=\"16\">kvsim sweep: %zu points, %zu on the "
                "Pareto front of %s",
                W, H, W, H, p.left, shown, nf, sw->pareto[0]);
        for (size_t k = 1; k < sw->npareto; k++)
            fprintf(f, "%s%s", k + 1 == sw->npareto ? " and " : ", ", sw->pareto[k]);
        fputs("</text>\n", f);
        char xt[128], yt[128];
        bool known;
        snprintf(xt, sizeof xt, "%s (%s is better)", sw->pareto[0],
                 sweep_metric_lower(sw->pareto[0], &known) ? "lower" : "higher");
        snprintf(yt, sizeof yt, "%s (%s is better)", sw->pareto[1],
                 sweep_metric_lower(sw->pareto[1], &known) ? "lower" : "higher");
        sweep_svg_axes(f, &p, H, xt, yt);
        fputs("<polyline id=\"pareto-front\" fill=\"none\" stroke=\"#d62728\" "
              "stroke-width=\"2\" points=\"",
              f);
        for (size_t i = 0; i < nf; i++)
            fprintf(f, "%s%.1f,%.1f", i ? " " : "", sweep_plot_x(&p, fr[i][0]),
                    sweep_plot_y(&p, fr[i][1]));
        fputs("\"/>\n<g id=\"pareto-points\">\n", f);
        for (size_t i = 0; i < n; i++) {
            if (isnan(xy[i][0]) || isnan(xy[i][1]))
                continue;
            bool on = json_is_true(json_object_get(ran[i]->row, "pareto"));
            char label[1024];
            sweep_point_label(sw, ran[i]->index, label, sizeof label);
            fprintf(
                f, "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>%s ",
                on ? "front" : "dominated", sweep_plot_x(&p, xy[i][0]), sweep_plot_y(&p, xy[i][1]),
                on ? "6" : "4", on ? "#d62728" : "#7f7f7f", ran[i]->id);
            sweep_xml_text(f, label);
            fputs("</title></circle>\n", f);
        }
        fputs("</g>\n</svg>\n", f);
        rc = kvsim_output_commit(&out, err, sizeof err);
    }
    if (rc)
        fprintf(stderr, "kvsim sweep: %s\n", err);
    free(ran);
    free(xy);
    free(fr);
    return rc;
}

/* By the sort metric, the best first (its natural direction; lower first when it has none),
 * missing values last; then by id. */
static const struct sweep *table_sweep;
static int cmp_table(const void *a, const void *b)
{
    const struct sweep_point *const *x = a, *const *y = b;
    double u = sweep_metric_value(table_sweep, *x, table_sweep->sort);
    double v = sweep_metric_value(table_sweep, *y, table_sweep->sort);
    bool known;
    if (!sweep_metric_lower(table_sweep->sort, &known)) {
        u = -u;
        v = -v;
    }
    if (isnan(u) != isnan(v))
        return isnan(u) ? 1 : -1;
    if (u != v && !isnan(u))
        return u < v ? -1 : 1;
    return strcmp((*x)->id, (*y)->id);
}

/* One cell of the table, right-aligned to its column's title. */
static void table_cell(const char *title, const char *text)
{
    int w = (int)strlen(title);
    printf(" %*s", w > 10 ? w : 10, text);
}

/* The best SWEEP_TABLE_ROWS rows by --sort, on stdout. */
static void print_table(const struct sweep *sw)
{
    size_t n;
    struct sweep_point **ran = sweep_points_that_ran(sw, &n);
    if (!ran || !n) {
        free(ran);
        return;
    }
    table_sweep = sw;
    qsort(ran, n, sizeof *ran, cmp_table);
    bool slo = false;
    for (size_t i = 0; i < n && !slo; i++)
        slo = json_is_number(json_object_get(ran[i]->row, "slo_attainment_pct"));
    const char *cols[8];
    size_t nc = 0;
    cols[nc++] = "ttft_p99_ms";
    cols[nc++] = "itl_p99_ms";
    cols[nc++] = "e2e_p99_ms";
    cols[nc++] = "requests_per_s";
    if (slo) {
        cols[nc++] = "slo_attainment_pct";
        cols[nc++] = "goodput_requests_per_s";
    }
    bool listed = sweep_axis_of(sw, sw->sort) >= 0;
    for (size_t c = 0; c < nc; c++)
        listed |= !strcmp(cols[c], sw->sort);
    if (!listed)
        cols[nc++] = sw->sort;
    printf("\nthe best %zu of %zu rows by %s:\n%-16s", n < SWEEP_TABLE_ROWS ? n : SWEEP_TABLE_ROWS,
           n, sw->sort, "id");
    for (size_t a = 0; a < sw->naxes; a++)
        table_cell(sw->axes[a].name, sw->axes[a].name);
    for (size_t c = 0; c < nc; c++)
        table_cell(cols[c], cols[c]);
    printf(sw->npareto ? " pareto\n" : "\n");
    for (size_t i = 0; i < n && i < SWEEP_TABLE_ROWS; i++) {
        printf("%-16s", ran[i]->id);
        for (size_t a = 0; a < sw->naxes; a++)
            table_cell(sw->axes[a].name, sweep_axis_value(sw, a, ran[i]->index));
        for (size_t c = 0; c < nc; c++) {
            char v[32];
            sweep_short_number(sweep_metric_value(sw, ran[i], cols[c]), v, sizeof v);
            table_cell(cols[c], v);
        }
        if (sw->npareto)
            printf(" %s", json_is_true(json_object_get(ran[i]->row, "pareto")) ? "*" : "");
        printf("\n");
    }
    free(ran);
}

/* Everything after the points are resolved, on the process that owns DIR (rank 0 under MPI,
 * ranks > 0: the other ranks are waiting for points). Returns the exit status. */
static int sweep_owner(struct sweep *sw, int64_t t0, int ranks)
{
    static const char *const own_files[] = {"rows.jsonl", "rows.csv", "pareto.svg"};
    int rc = sweep_prepare_out(sw, own_files, sw->npareto ? 3 : 2);
    FILE *rows = NULL;
    if (!rc && !(rows = sweep_open_rows(sw)))
        rc = -EINVAL;
    if (rc) {
#ifdef KVSIM_HAVE_MPI
        if (ranks)
            sweep_mpi_coordinate(sw, NULL, ranks); /* tells the others to stop */
#endif
        return CLI_EXIT_USAGE;
    }
    /* The invalid points' rows first (they never run), then the others as they finish. */
    size_t invalid = 0;
    for (size_t i = 0; i < sw->npoints && !rc; i++) {
        struct sweep_point *pt = &sw->points[i];
        if (pt->state != POINT_INVALID)
            continue;
        invalid++;
        char *why = pt->error;
        pt->error = NULL;
        rc = sweep_finish_point(sw, pt, rows, NULL, why);
        free(why);
    }
    sweep_note_inputs(sw);
    sw->t0 = t0;
    sw->progress = !sw->quiet && isatty(STDERR_FILENO);
    if (ranks) {
#ifdef KVSIM_HAVE_MPI
        /* SIGINT: mpirun ends the job; the rows so far are on disk, a rerun keeps them. */
        rc = sweep_mpi_coordinate(sw, rc ? NULL : rows, ranks);
#endif
    } else {
        struct sweep_signals saved; /* the parent passes SIGINT on to the running points */
        sweep_signals_begin(&saved);
        if (!rc)
            rc = sweep_run_points(sw, rows);
        sweep_signals_end(&saved); /* the rest is quick; a signal now ends it */
    }
    fclose(rows);
    long front = 0;
    if (!rc && sw->npareto && (front = mark_pareto(sw)) < 0)
        rc = (int)front;
    if (!rc && sw->npareto)
        rc = write_pareto_svg(sw);
    if (!rc)
        rc = sweep_write_rows(sw);
    if (sw->progress)
        fprintf(stderr, "\r%70s\r", "");
    if (!rc && !sw->quiet)
        print_table(sw);
    size_t failed = 0, left = 0;
    for (size_t i = 0; i < sw->npoints; i++) {
        failed += sw->points[i].state == POINT_FAILED;
        left += sw->points[i].state == POINT_PENDING;
    }
    double wall = (double)(base_monotonic_ns() - t0) / 1e9;
    char more[256] = "", svg_path[4200], workers[160];
    snprintf(svg_path, sizeof svg_path, "%s/pareto.svg (%ld on the front)", sw->out, front);
    if (left)
        snprintf(more, sizeof more, "; %zu not run (%s): the same command runs them", left,
                 sweep_interrupted ? "interrupted" : "--max-points");
    if (ranks)
        snprintf(workers, sizeof workers, "%d MPI ranks (%.0f bytes and %.2f ms of rank 0 a point)",
                 ranks, sw->started ? (double)sw->mpi_bytes / (double)sw->started : 0.0,
                 sw->started ? (double)sw->mpi_serial_ns / 1e6 / (double)sw->started : 0.0);
    else
        snprintf(workers, sizeof workers, "-j %" PRIu32, sw->jobs);
    if (!rc)
        printf("sweep: %zu points, %zu failed, %zu invalid, %zu kept from %s/reports, %s, %.2f s "
               "wall, %zu trace loads; %s/rows.jsonl, %s/rows.csv, %s/reports/%s%s%s\n",
               sw->npoints, failed, invalid, sw->reused, sw->out, workers, wall, sw->trace_loads,
               sw->out, sw->out, sw->out, sw->npareto ? ", " : "", sw->npareto ? svg_path : "",
               more);
    if (rc)
        return CLI_EXIT_FAILED;
    if (sweep_interrupted && left)
        return 128 + sweep_interrupted; /* 130 for SIGINT, 143 SIGTERM, 129 SIGHUP */
    if (sw->trace_refused) /* bad input, as in every command (its points failed, saying why) */
        return CLI_EXIT_USAGE;
    return failed || invalid ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}

int cli_sweep_main(int argc, char **argv)
{
    struct sweep sw = {.cmd = "kvsim sweep", .axis_what = "both in a --grid and outside it"};
    int rank = 0, ranks = 0, saved_out = -1, saved_err = -1; /* ranks 0: no MPI job */
#ifdef KVSIM_HAVE_MPI
    /* A launcher's variable (mpirun, srun) says MPI may have started this process; only
     * MPI_Init can say whether it did. Several ranks: an MPI sweep. One (the variable left in
     * the environment by something else, or mpirun -np 1): a process alone, which sweeps as
     * without MPI (MPI finalized first: its worker processes are forked after that). */
    if (sweep_mpi_env_rank() >= 0) {
        if (sweep_mpi_init(&sw, &rank, &ranks) != 0)
            return CLI_EXIT_FAILED;
        if (ranks < 2) {
            sweep_mpi_fini();
            rank = ranks = 0;
        }
    }
#endif
    if (rank > 0) { /* every rank parses the same line: rank 0 says what is wrong */
        int null_fd = open("/dev/null", O_WRONLY);
        fflush(NULL);
        saved_out = dup(STDOUT_FILENO);
        saved_err = dup(STDERR_FILENO);
        if (null_fd >= 0) {
            dup2(null_fd, STDOUT_FILENO);
            dup2(null_fd, STDERR_FILENO);
            close(null_fd);
        }
    }
    int prc = parse_sweep_args(&sw, argc, argv);
    if (!prc && ranks && sw.jobs_given) {
        fprintf(stderr, "kvsim sweep: option -j: under mpirun every rank replays one point at a "
                        "time (Open MPI does not support fork() after MPI_Init): give more "
                        "ranks instead\n");
        prc = -EINVAL;
    }
    int64_t t0 = base_monotonic_ns();
    int rc = prc ? 0 : sweep_plan_points(&sw);
    if (saved_err >= 0) { /* a rank's own trouble from here on is its own to say */
        fflush(NULL);
        dup2(saved_out, STDOUT_FILENO);
        dup2(saved_err, STDERR_FILENO);
        close(saved_out);
        close(saved_err);
    }
    int status;
    if (prc)
        status = prc > 0 ? CLI_EXIT_OK : prc == -ENOMEM ? CLI_EXIT_FAILED : CLI_EXIT_USAGE;
    else if (rc) {
        if (rc == -ENOMEM)
            fprintf(stderr, "kvsim sweep: out of memory\n");
        status = rc == -ENOMEM ? CLI_EXIT_FAILED : CLI_EXIT_USAGE;
    } else if (!ranks)
        status = sweep_owner(&sw, t0, 0);
    else if (rank == 0)
        status = sweep_owner(&sw, t0, ranks);
    else {
        status = CLI_EXIT_OK;
#ifdef KVSIM_HAVE_MPI
        sweep_mpi_serve(&sw);
#endif
    }
#ifdef KVSIM_HAVE_MPI
    if (ranks)
        sweep_mpi_fini();
#endif
    sweep_free(&sw);
    return status;
}
