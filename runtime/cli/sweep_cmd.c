/*
 * sweep_cmd.c - `kvsim sweep [TRACE] --grid OPTION=v1,v2,... [replay options] --out DIR [-j N]`:
 * the replay of every point of a grid of configurations, in worker processes.
 *
 * A point is the base configuration (the replay options outside the grid, in their order) with
 * one value of each --grid option applied after it. Every point is resolved in the parent before
 * anything runs (a value the option table refuses is a usage error; a combination it refuses is
 * the point's row, "invalid"); its id is the XXH3-64 of its whole configuration (the --config-out
 * text), so the same configuration has the same id in any sweep. The parent loads each distinct
 * trace once (per trace path and the options that change what is loaded) and forks one child per
 * point, at most -j at a time: the child inherits the loaded requests (copy on write), replays
 * them with --threads 1 unless given and writes DIR/reports/<id>.json, the same report a plain
 * `kvsim replay` of that configuration writes (naming the trace, its sha256 and the config). The
 * parent makes each point's row from its report as the child ends: DIR/rows.jsonl grows as points
 * finish, and is rewritten sorted by id (with DIR/rows.csv) when the sweep ends. Rows hold no
 * wall-clock figure, so they are byte-identical whatever -j.
 *
 * Threads: the parent is single-threaded (it forks); each child runs one replay.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvpool/base.h"
#include "runtime/input/input.h"
#include "runtime/report/report.h"

/* SIGINT: the parent stops handing out points and passes it on to the running ones; a child's
 * replay ends at its next epoch and the child exits CLI_EXIT_INTERRUPTED without a report (a
 * point cut short never becomes a row). */
static volatile sig_atomic_t sweep_interrupted;

static void on_sweep_sigint(int sig)
{
    (void)sig;
    sweep_interrupted = 1;
}

/* A grid of more points than this is refused (each point is a process and a report file). */
#define SWEEP_MAX_POINTS 100000u
#define SWEEP_MAX_AXES   16
#define SWEEP_MAX_PARETO 8
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
            "  -j, --jobs N     worker processes (default: the number of cores)\n"
            "  --max-points K   start at most K points, then stop (a rerun does the rest)\n"
            "  --force          rerun the points whose report is already in DIR (by default\n"
            "                   a rerun keeps them: same id, same kvsim, same trace bytes)\n"
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
            "SIGINT stops handing out points, passes it on to the running ones (cut short,\n"
            "they are no rows and run again next time), writes the rows so far and exits 130.\n"
            "\n"
            "Exit status: 0 every point ran (or --max-points stopped it); 1 a point failed or\n"
            "was an invalid combination (its row says why; the others ran); 2 usage error or\n"
            "bad input (a grid value refused by the option table, no point valid, an --out\n"
            "that cannot be written); 130 interrupted.\n");
}

/* ---- the grid ------------------------------------------------------------------------------- */

struct sweep_axis {
    char name[64]; /* canonical option name */
    char *text;    /* the values, split in place */
    const char **values;
    size_t n;
};

struct sweep_setting {
    const char *name; /* the option table's (static) name */
    const char *value;
    bool owned; /* value is malloc'd (a spec's), freed with the sweep */
};

enum point_state { POINT_PENDING, POINT_INVALID, POINT_OK, POINT_FAILED };

struct sweep_point {
    size_t index; /* in grid order: the first axis varies slowest */
    char id[17];
    size_t group; /* its trace group */
    enum point_state state;
    char *error; /* why it failed or is invalid (malloc'd) */
    json_t *row;
};

/* Points that read the same requests: the same trace file and loading options. */
struct sweep_group {
    char *key;
    char *trace_path; /* NULL: each child draws the synthetic workload itself */
    struct kvsim_trace_opts opts;
};

struct sweep {
    struct sweep_setting *base;
    size_t nbase, base_cap;
    bool threads_given;
    struct sweep_axis axes[SWEEP_MAX_AXES];
    size_t naxes;
    struct sweep_point *points;
    size_t npoints;
    struct sweep_group *groups;
    size_t ngroups;
    const char *out;
    uint32_t jobs;
    bool quiet;
    bool force;          /* rerun points whose report is already in DIR */
    uint64_t max_points; /* start at most this many points (0: no limit) */
    size_t done;         /* points ended so far */
    size_t nfailed;      /* of which failed or invalid */
    size_t trace_loads;  /* traces parsed (once per group) */
    /* The configuration reads files besides the trace (profiles, --config, engine arguments):
     * their content is in no report's digest, so no report is reused. */
    bool reads_other_files;
    bool progress;       /* a progress line on stderr (a terminal, not --quiet) */
    int64_t t0;          /* when the sweep started (base_monotonic_ns) */
    size_t started;      /* points started by this run */
    size_t reused;       /* points whose report was already in DIR */
    const char *version; /* kvsim_version(): a report of another version is not reused */
    const char *sort;    /* the table's order (a metric) */
    char *pareto_text;   /* --pareto's list, split in place */
    const char *pareto[SWEEP_MAX_PARETO];
    size_t npareto;
};

/* The value of axis a at point index i. */
static const char *axis_value(const struct sweep *sw, size_t a, size_t index)
{
    size_t stride = 1;
    for (size_t b = sw->naxes; b-- > a + 1;)
        stride *= sw->axes[b].n;
    return sw->axes[a].values[(index / stride) % sw->axes[a].n];
}

/* "engines=2 router=kv" for messages. */
static void point_label(const struct sweep *sw, size_t index, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (size_t a = 0; a < sw->naxes && at < len; a++) {
        int n = snprintf(buf + at, len - at, "%s%s=%s", a ? " " : "", sw->axes[a].name,
                         axis_value(sw, a, index));
        if (n < 0)
            break;
        at += (size_t)n;
    }
}

/* The options of point index: the base in order, --threads 1 unless given, then the grid's
 * values. Returns 0 or -EINVAL with the message in err (o is then finished). */
static int point_options(const struct sweep *sw, size_t index, struct kvsim_options *o, char *err,
                         size_t errlen)
{
    kvsim_options_default(o);
    int rc = 0;
    for (size_t i = 0; i < sw->nbase && !rc; i++)
        rc = kvsim_options_set(o, sw->base[i].name, sw->base[i].value, err, errlen);
    if (!rc && !sw->threads_given)
        rc = kvsim_options_set(o, "threads", "1", err, errlen);
    if (!rc)
        rc = kvsim_options_set(o, "quiet", "true", err, errlen);
    for (size_t a = 0; a < sw->naxes && !rc; a++)
        rc = kvsim_options_set(o, sw->axes[a].name, axis_value(sw, a, index), err, errlen);
    if (rc) {
        kvsim_options_fini(o);
        return -EINVAL;
    }
    return 0;
}

/* Options whose file the sweep writes itself. */
static bool writes_a_file(const char *name)
{
    static const char *const outputs[] = {"report",         "config-out", "requests-out",
                                          "timeseries-out", "html",       "handoff-events"};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
        if (!strcmp(name, outputs[i]))
            return true;
    return false;
}

/* The option table's own (static) spelling of the canonical name canon, or NULL. */
static const char *table_name(const char *canon)
{
    for (size_t i = 0; kvsim_options_name(i); i++)
        if (!strcmp(kvsim_options_name(i), canon))
            return kvsim_options_name(i);
    return NULL;
}

/* Appends a base option (name: canonical; value: borrowed from argv, or malloc'd and then owned
 * by the sweep when owned). Returns 0 or -ENOMEM. */
static int base_put(struct sweep *sw, const char *name, const char *value, bool owned)
{
    if (sw->nbase == sw->base_cap) {
        size_t cap = sw->base_cap ? 2 * sw->base_cap : 16;
        struct sweep_setting *grown = realloc(sw->base, cap * sizeof *grown);
        if (!grown)
            return -ENOMEM;
        sw->base = grown;
        sw->base_cap = cap;
    }
    const char *static_name = table_name(name);
    if (!static_name)
        return -EINVAL;
    sw->base[sw->nbase++] = (struct sweep_setting){static_name, value, owned};
    sw->threads_given |= !strcmp(name, "threads");
    return 0;
}

static int base_add(struct sweep *sw, const char *name, char *value)
{
    return base_put(sw, name, value, true);
}

static int cmp_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds the grid axis `given` (an option's name, any spelling) with the n values vals, checking
 * the name and every value against the option table; where begins the messages ("option --grid
 * engines=2,x", "--spec s.json: key 'grid.engines'"). Returns 0 or -EINVAL (printed). */
static int add_axis_values(struct cli_parser *p, struct sweep *sw, const char *given,
                           const char *const *vals, size_t n, const char *where)
{
    if (sw->naxes == SWEEP_MAX_AXES)
        return cli_error(p, "%s: more than %d grids", where, SWEEP_MAX_AXES);
    if (!n)
        return cli_error(p, "%s: no values", where);
    struct sweep_axis *ax = &sw->axes[sw->naxes];
    if (strlen(given) >= sizeof ax->name)
        return cli_error(p, "%s: '%s' is not an option of kvsim replay", where, given);
    kvsim_options_canonical(given, ax->name, sizeof ax->name);
    if (!kvsim_options_known(ax->name, NULL) || !strcmp(ax->name, "quiet"))
        return cli_error(p, "%s: '%s' is not an option of kvsim replay", where, given);
    if (writes_a_file(ax->name))
        return cli_error(p, "%s: --%s writes a file; the sweep writes its own", where, ax->name);
    for (size_t a = 0; a < sw->naxes; a++)
        if (!strcmp(sw->axes[a].name, ax->name))
            return cli_error(p, "%s: --%s is given twice", where, ax->name);
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(vals[i]) + 1;
    ax->text = malloc(bytes);
    ax->values = calloc(n, sizeof *ax->values);
    if (!ax->text || !ax->values) {
        free(ax->text);
        free(ax->values);
        return cli_error(p, "out of memory");
    }
    char *at = ax->text;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(vals[i]) + 1;
        memcpy(at, vals[i], len);
        ax->values[i] = at;
        at += len;
    }
    ax->n = n;
    sw->naxes++; /* owned from here (freed with the sweep) */
    if (n > SWEEP_MAX_POINTS)
        return cli_error(p, "%s: more than %u values", where, SWEEP_MAX_POINTS);
    for (size_t i = 0; i < n; i++) {
        char err[1024];
        if (!ax->values[i][0])
            return cli_error(p, "%s: an empty value", where);
        struct kvsim_options o;
        kvsim_options_default(&o);
        int rc = kvsim_options_set(&o, ax->name, ax->values[i], err, sizeof err);
        kvsim_options_fini(&o);
        if (rc)
            return cli_error(p, "%s: %s", where, err);
    }
    const char **sorted = malloc(n * sizeof *sorted); /* duplicates, in n log n */
    if (!sorted)
        return cli_error(p, "out of memory");
    memcpy(sorted, ax->values, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_strings);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(sorted[i], sorted[i - 1])) {
            int rc = cli_error(p, "%s: '%s' is given twice", where, sorted[i]);
            free(sorted);
            return rc;
        }
    free(sorted);
    return 0;
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
    int rc = add_axis_values(p, sw, text, vals, n, where);
    free(text);
    free(vals);
    return rc;
}

static void real_text(double x, char *buf, size_t len);

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
        real_text(json_real_value(v), buf, sizeof buf);
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
        rc = add_axis_values(p, sw, name, (const char *const *)vals, n, where);
    for (size_t i = 0; vals && i < n; i++)
        free(vals[i]);
    free(vals);
    return rc;
}

/* --spec FILE: {"grid": {OPTION: [values], ...}, "traces": [paths], "seeds": [integers],
 * "options": {OPTION: value, ...}}, every key optional: the grid's axes (traces and seeds are
 * the axes "trace" and "seed"), and base options applied before the command line's. Returns 0
 * or -EINVAL (printed, naming the file and the key). */
static int read_spec(struct cli_parser *p, struct sweep *sw, const char *file)
{
    json_error_t jerr;
    json_t *doc;
    if (kvsim_json_load_file(file, JSON_REJECT_DUPLICATES, &doc, &jerr)) {
        if (jerr.line > 0)
            return cli_error(p, "--spec %s:%d: %s", file, jerr.line, jerr.text);
        return cli_error(p, "--spec: %s", jerr.text); /* the text names the file */
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
                    else if (writes_a_file(canon))
                        rc = cli_error(p,
                                       "--spec %s: key 'options.%s': the sweep writes its "
                                       "own files",
                                       file, opt);
                    else if (src)
                        rc = cli_error(p, "--spec %s: key 'options.%s': %s", file, opt, err);
                    else if (!strcmp(canon, "quiet"))
                        sw->quiet = !strcmp(text, "true");
                    else if (base_add(sw, canon, text))
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

static void sweep_free(struct sweep *sw)
{
    for (size_t a = 0; a < sw->naxes; a++) {
        free(sw->axes[a].text);
        free(sw->axes[a].values);
    }
    for (size_t i = 0; i < sw->npoints; i++) {
        free(sw->points[i].error);
        json_decref(sw->points[i].row);
    }
    for (size_t g = 0; g < sw->ngroups; g++) {
        free(sw->groups[g].key);
        free(sw->groups[g].trace_path);
    }
    for (size_t i = 0; i < sw->nbase; i++)
        if (sw->base[i].owned)
            free((char *)sw->base[i].value);
    free(sw->points);
    free(sw->groups);
    free(sw->base);
    free(sw->pareto_text);
}

static int check_metric(const struct sweep *sw, const char *name, bool directed, char *err,
                        size_t errlen);
static long axis_of(const struct sweep *sw, const char *name);

/* What an option sets, whatever its spelling: its canonical name without a "no-" that negates
 * another option (no-enable-prefix-caching sets enable-prefix-caching). */
static const char *setting_key(const char *name, char *buf, size_t len)
{
    kvsim_options_canonical(name, buf, len);
    if (!strncmp(buf, "no-", 3) && kvsim_options_known(buf + 3, NULL))
        memmove(buf, buf + 3, strlen(buf + 3) + 1);
    return buf;
}

/* Parses the command line into sw. Returns 0, 1 (help printed) or -EINVAL (printed). */
static int parse_sweep_args(struct sweep *sw, int argc, char **argv)
{
    /* kvsim replay's options without the outputs' meaning, and the sweep's own. */
    static struct option opts[160];
    size_t n = 0;
    for (const struct option *x = cli_replay_options; x->name; x++) {
        if (n == sizeof opts / sizeof opts[0] - 10) {
            fprintf(stderr, "kvsim sweep: more replay options than the sweep's table holds "
                            "(kvsim bug)\n");
            return -EINVAL;
        }
        if (strcmp(x->name, "help"))
            opts[n++] = (struct option){x->name, x->has_arg, NULL, 1};
    }
    opts[n++] = (struct option){"grid", required_argument, NULL, 'g'};
    opts[n++] = (struct option){"out", required_argument, NULL, 'o'};
    opts[n++] = (struct option){"jobs", required_argument, NULL, 'j'};
    opts[n++] = (struct option){"force", no_argument, NULL, 'f'};
    opts[n++] = (struct option){"max-points", required_argument, NULL, 'm'};
    opts[n++] = (struct option){"sort", required_argument, NULL, 's'};
    opts[n++] = (struct option){"pareto", required_argument, NULL, 'p'};
    opts[n++] = (struct option){"spec", required_argument, NULL, 'S'};
    opts[n++] = (struct option){"help", no_argument, NULL, 'h'};
    opts[n] = (struct option){NULL, 0, NULL, 0};
    struct cli_parser p;
    cli_begin(&p, "kvsim sweep", argc, argv, opts, "j:h");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    sw->jobs = cores > 0 ? (uint32_t)(cores < 1024 ? cores : 1024) : 1;
    int c;
    char err[1024];
    while ((c = cli_next(&p)) > 0) {
        switch (c) {
        case 'g':
            if (add_axis(&p, sw))
                return -EINVAL;
            break;
        case 'o': sw->out = p.arg; break;
        case 'S':
            if (read_spec(&p, sw, p.arg))
                return -EINVAL;
            break;
        case 'j':
            if (cli_u32(&p, 1, 1024, &sw->jobs))
                return -EINVAL;
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
        default: {
            const char *name = p.long_name;
            if (!strcmp(name, "quiet")) {
                sw->quiet = true;
                break;
            }
            if (writes_a_file(name))
                return cli_error(&p,
                                 "option --%s: the sweep writes its own files (--out DIR: "
                                 "rows.jsonl, rows.csv, reports/<id>.json)",
                                 name);
            struct kvsim_options o; /* its value, checked now: the message names it */
            kvsim_options_default(&o);
            int rc = kvsim_options_set(&o, name, p.arg, err, sizeof err);
            kvsim_options_fini(&o);
            if (rc)
                return cli_error(&p, "%s", err);
            if (base_put(sw, name, p.arg, false))
                return cli_error(&p, "out of memory");
        }
        }
    }
    if (c < 0) {
        fprintf(stderr, "kvsim sweep --help lists the options\n");
        return -EINVAL;
    }
    if (cli_optind() < argc) { /* the trace, as kvsim replay takes it */
        if (cli_optind() + 1 < argc)
            return cli_error(&p, "unexpected argument '%s' (one trace at most)",
                             argv[cli_optind() + 1]);
        for (size_t i = 0; i < sw->nbase; i++)
            if (!strcmp(sw->base[i].name, "trace"))
                return cli_error(&p, "the trace is given twice: '%s' and --trace %s",
                                 argv[cli_optind()], sw->base[i].value);
        if (base_put(sw, "trace", argv[cli_optind()], false))
            return cli_error(&p, "out of memory");
    }
    if (!sw->naxes)
        return cli_error(&p, "nothing to sweep: give at least one --grid OPTION=V1,V2,... (or "
                             "--spec FILE)");
    if (!sw->out)
        return cli_error(&p, "needs --out DIR (where the rows and the reports go)");
    for (size_t a = 0; a < sw->naxes; a++)
        for (size_t i = 0; i < sw->nbase; i++) {
            char x[64], y[64];
            if (!strcmp(setting_key(sw->axes[a].name, x, sizeof x),
                        setting_key(sw->base[i].name, y, sizeof y)))
                return cli_error(&p, "option --%s is both in a --grid and outside it (as --%s)",
                                 sw->axes[a].name, sw->base[i].name);
        }
    if (!sw->sort)
        sw->sort = "ttft_p99_ms";
    if (check_metric(sw, sw->sort, false, err, sizeof err))
        return cli_error(&p, "option --sort: %s", err);
    if (axis_of(sw, sw->sort) >= 0) /* the grid's spelling from here on */
        sw->sort = sw->axes[axis_of(sw, sw->sort)].name;
    for (size_t m = 0; m < sw->npareto; m++) {
        if (axis_of(sw, sw->pareto[m]) >= 0)
            sw->pareto[m] = sw->axes[axis_of(sw, sw->pareto[m])].name;
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

/* ---- planning: resolve every point, its id and its trace group ------------------------------ */

static int cmp_ids(const void *a, const void *b)
{
    const struct sweep_point *const *x = a, *const *y = b;
    int c = strcmp((*x)->id, (*y)->id);
    return c ? c : ((*x)->index > (*y)->index) - ((*x)->index < (*y)->index);
}

/* The group of a resolved point (added when new). Returns its index or -ENOMEM. */
static long point_group(struct sweep *sw, const struct kvsim_replay_config *cfg)
{
    const struct kvsim_trace_opts *t = &cfg->trace_opts;
    char key[4352];
    snprintf(key, sizeof key, "%s|%d|%" PRIu32 "|%.17g|%" PRIu64,
             cfg->trace_path ? cfg->trace_path : "", (int)t->format, t->trace_block_size,
             t->arrival_speedup, (uint64_t)t->max_requests);
    for (size_t g = 0; g < sw->ngroups; g++)
        if (!strcmp(sw->groups[g].key, key))
            return (long)g;
    struct sweep_group *grown = realloc(sw->groups, (sw->ngroups + 1) * sizeof *grown);
    if (!grown)
        return -ENOMEM;
    sw->groups = grown;
    struct sweep_group *g = &sw->groups[sw->ngroups];
    g->key = strdup(key);
    g->trace_path = cfg->trace_path ? strdup(cfg->trace_path) : NULL;
    g->opts = *t;
    if (!g->key || (cfg->trace_path && !g->trace_path)) {
        free(g->key);
        free(g->trace_path);
        return -ENOMEM;
    }
    return (long)sw->ngroups++;
}

/* Resolves every point: its id, its group, or why it is invalid. Returns 0, or -EINVAL when no
 * point is valid or two points are the same configuration (printed), -ENOMEM. */
static int plan_points(struct sweep *sw)
{
    sw->points = calloc(sw->npoints, sizeof *sw->points);
    if (!sw->points)
        return -ENOMEM;
    size_t valid = 0;
    char err[1024], label[1024];
    for (size_t i = 0; i < sw->npoints; i++) {
        struct sweep_point *pt = &sw->points[i];
        pt->index = i;
        struct kvsim_options o;
        struct kvsim_run run;
        int rc = point_options(sw, i, &o, err, sizeof err);
        if (!rc && (rc = kvsim_options_resolve(&o, &run, err, sizeof err)) != 0)
            kvsim_options_fini(&o);
        if (rc) {
            pt->state = POINT_INVALID;
            if (!(pt->error = strdup(err)))
                return -ENOMEM;
            continue;
        }
        char *config = kvsim_options_config_text(&o, &run);
        long g = config ? point_group(sw, &run.replay) : -ENOMEM;
        if (config)
            snprintf(pt->id, sizeof pt->id, "%016" PRIx64,
                     (uint64_t)XXH3_64bits(config, strlen(config)));
        free(config);
        kvsim_run_fini(&run);
        kvsim_options_fini(&o);
        if (g < 0)
            return -ENOMEM;
        pt->group = (size_t)g;
        valid++;
    }
    /* Standard input can be read once; a trace that cannot be opened is bad input: both
     * refused before anything runs. */
    size_t from_stdin = 0;
    for (size_t g = 0; g < sw->ngroups; g++) {
        const char *t = sw->groups[g].trace_path;
        if (!t)
            continue;
        if (!strcmp(t, "-")) {
            if (++from_stdin > 1) {
                fprintf(stderr, "kvsim sweep: the trace on standard input can be read once: "
                                "grid no option that changes how it is loaded (format, "
                                "trace-block-size, arrival-speedup, max-requests)\n");
                return -EINVAL;
            }
            continue;
        }
        FILE *f = fopen(t, "rb");
        struct stat st;
        int e = !f ? errno : fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode) ? EISDIR : 0;
        if (f)
            fclose(f);
        if (e) {
            fprintf(stderr, "kvsim sweep: %s: cannot open: %s\n", t, strerror(e));
            return -EINVAL;
        }
    }
    if (!valid) {
        point_label(sw, 0, label, sizeof label);
        fprintf(stderr,
                "kvsim sweep: no point of the grid is a valid configuration; the first "
                "(%s): %s\n",
                label, sw->points[0].error);
        return -EINVAL;
    }
    /* Two points with one configuration would write one report. */
    struct sweep_point **by_id = malloc(sw->npoints * sizeof *by_id);
    if (!by_id)
        return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < sw->npoints; i++)
        if (sw->points[i].state != POINT_INVALID)
            by_id[n++] = &sw->points[i];
    qsort(by_id, n, sizeof *by_id, cmp_ids);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (!strcmp(by_id[i]->id, by_id[i - 1]->id)) {
            char other[1024];
            point_label(sw, by_id[i - 1]->index, other, sizeof other);
            point_label(sw, by_id[i]->index, label, sizeof label);
            fprintf(stderr, "kvsim sweep: the points (%s) and (%s) are the same configuration\n",
                    other, label);
            rc = -EINVAL;
        }
    free(by_id);
    return rc;
}

/* ---- rows ------------------------------------------------------------------------------------ */

/* json_object_get along a dotted path ("requests.completed"); NULL when absent. */
static json_t *json_at(const json_t *root, const char *path)
{
    char key[64];
    const json_t *v = root;
    while (v && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof key)
            return NULL;
        memcpy(key, path, n);
        key[n] = 0;
        v = json_object_get(v, key);
        path += n + (path[n] == '.');
    }
    return (json_t *)v;
}

/* A copy of the value at path, or null. */
static json_t *copy_at(const json_t *root, const char *path)
{
    json_t *v = json_at(root, path);
    return v ? json_deep_copy(v) : json_null();
}

/* The row's metrics, in a fixed order (rows.csv has the same columns). */
static const struct {
    const char *column; /* rows.csv */
    const char *report; /* where the report holds it */
} row_metrics[] = {
    {"completed", "requests.completed"},
    {"rejected", "requests.rejected"},
    {"incomplete", "requests.incomplete"},
    {"ttft_mean_ms", "ttft_ms.avg"},
    {"ttft_p50_ms", "ttft_ms.p50"},
    {"ttft_p90_ms", "ttft_ms.p90"},
    {"ttft_p99_ms", "ttft_ms.p99"},
    {"itl_mean_ms", "itl_ms.avg"},
    {"itl_p50_ms", "itl_ms.p50"},
    {"itl_p90_ms", "itl_ms.p90"},
    {"itl_p99_ms", "itl_ms.p99"},
    {"tpot_mean_ms", "tpot_ms.avg"},
    {"tpot_p50_ms", "tpot_ms.p50"},
    {"tpot_p90_ms", "tpot_ms.p90"},
    {"tpot_p99_ms", "tpot_ms.p99"},
    {"e2e_mean_ms", "e2e_ms.avg"},
    {"e2e_p50_ms", "e2e_ms.p50"},
    {"e2e_p90_ms", "e2e_ms.p90"},
    {"e2e_p99_ms", "e2e_ms.p99"},
    {"requests_per_s", "throughput.requests_per_s"},
    {"output_tokens_per_s", "throughput.output_tokens_per_s"},
    {"prefix_cache_reuse_ratio", "prefix_cache_reuse_ratio"},
    {"preemptions", "preemptions"},
    {"slo_attainment_pct", "slo.attainment_pct.all"},
    {"goodput_requests_per_s", "slo.goodput_requests_per_s"},
};
#define ROW_METRICS (sizeof row_metrics / sizeof row_metrics[0])

/* ---- metrics: the table's order and the Pareto front ----------------------------------------- */

/* Whether lower is better for a metric (a row column, or a grid option that is a cost); known
 * false when it has no natural direction. */
static bool metric_lower(const char *name, bool *known)
{
    static const char *const higher[] = {"completed",           "requests_per_s",
                                         "output_tokens_per_s", "prefix_cache_reuse_ratio",
                                         "slo_attainment_pct",  "goodput_requests_per_s"};
    static const char *const costs[] = {"engines",    "prefill-engines", "decode-engines",
                                        "tp",         "gpu-memory-gib",  "num-gpu-blocks",
                                        "g2-blocks",  "g3-blocks",       "rejected",
                                        "incomplete", "preemptions"};
    *known = true;
    for (size_t i = 0; i < sizeof higher / sizeof higher[0]; i++)
        if (!strcmp(name, higher[i]))
            return false;
    size_t n = strlen(name);
    if (n > 3 && !strcmp(name + n - 3, "_ms"))
        return true;
    for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++)
        if (!strcmp(name, costs[i]))
            return true;
    *known = false;
    return true;
}

/* The grid axis named name, or -1. */
static long axis_of(const struct sweep *sw, const char *name)
{
    char canon[64];
    kvsim_options_canonical(name, canon, sizeof canon);
    for (size_t a = 0; a < sw->naxes; a++)
        if (!strcmp(sw->axes[a].name, name) || !strcmp(sw->axes[a].name, canon))
            return (long)a;
    return -1;
}

/* A metric of --sort (directed false) or --pareto (directed: it must have a direction): a row
 * column or a grid option with numbers. Returns 0 or -EINVAL with the message. */
static int check_metric(const struct sweep *sw, const char *name, bool directed, char *err,
                        size_t errlen)
{
    bool column = false, known;
    for (size_t m = 0; m < ROW_METRICS && !column; m++)
        column = !strcmp(name, row_metrics[m].column);
    long a = column ? -1 : axis_of(sw, name);
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
    metric_lower(name, &known);
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

/* A metric's value at a point that ran (NaN when missing). */
static double metric_value(const struct sweep *sw, const struct sweep_point *pt, const char *name)
{
    long a = axis_of(sw, name);
    if (a >= 0)
        return strtod(axis_value(sw, (size_t)a, pt->index), NULL);
    json_t *v = json_object_get(pt->row, name);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The row of point pt (its report, when it ran: NULL otherwise). NULL: out of memory. */
static json_t *make_row(const struct sweep *sw, const struct sweep_point *pt, const json_t *report)
{
    json_t *row = json_object(), *cfg = json_object();
    if (!row || !cfg) {
        json_decref(row);
        json_decref(cfg);
        return NULL;
    }
    static const char *const states[] = {"pending", "invalid", "ok", "failed"};
    int bad = json_object_set_new(row, "id", json_string(pt->id)) |
              json_object_set_new(row, "status", json_string(states[pt->state]));
    for (size_t a = 0; a < sw->naxes; a++)
        bad |=
            json_object_set_new(cfg, sw->axes[a].name, json_string(axis_value(sw, a, pt->index)));
    bad |= json_object_set_new(row, "config", cfg);
    if (report) {
        bad |= json_object_set_new(row, "complete", copy_at(report, "complete"));
        for (size_t m = 0; m < ROW_METRICS; m++)
            bad |= json_object_set_new(row, row_metrics[m].column,
                                       copy_at(report, row_metrics[m].report));
    }
    if (pt->error)
        bad |= json_object_set_new(row, "error", json_string(pt->error));
    if (bad) {
        json_decref(row);
        return NULL;
    }
    return row;
}

/* The shortest decimal text that reads back as x (as the report writes its numbers, so that a
 * row shows the report's digits: jansson's fixed 17 digits would show 38.302862900000001). */
static void real_text(double x, char *buf, size_t len)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    char *e = strchr(buf, 'e');
    if (e) { /* jansson's exponent, as the report has it: e-7, e21 (not e-07, e+21) */
        char *digits = e + 1 + (e[1] == '-' || e[1] == '+');
        char *lead = digits;
        while (lead[0] == '0' && lead[1])
            lead++;
        if (e[1] == '+')
            memmove(e + 1, lead, strlen(lead) + 1);
        else
            memmove(digits, lead, strlen(lead) + 1);
    } else if (!strpbrk(buf, ".n") && strlen(buf) + 2 < len)
        strcat(buf, ".0"); /* still a real when read back */
}

/* A row as one compact JSON line, keys in insertion order, reals as real_text. */
static bool row_put(FILE *f, const json_t *v)
{
    char buf[64];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *x;
        bool first = true;
        fputc('{', f);
        json_object_foreach((json_t *)v, key, x)
        {
            json_t *k = json_string(key);
            char *kt = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
            json_decref(k);
            if (!kt)
                return false;
            fprintf(f, "%s%s:", first ? "" : ",", kt);
            free(kt);
            first = false;
            if (!row_put(f, x))
                return false;
        }
        fputc('}', f);
        return true;
    }
    case JSON_REAL:
        real_text(json_real_value(v), buf, sizeof buf);
        fputs(buf, f);
        return true;
    case JSON_INTEGER: fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); return true;
    default: {
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!t)
            return false;
        fputs(t, f);
        free(t);
        return true;
    }
    }
}

/* The row's text with its line end (malloc'd), or NULL: out of memory. */
static char *row_text(const json_t *row)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    bool ok = row_put(f, row);
    fputc('\n', f);
    if (fclose(f) != 0 || !ok) {
        free(text);
        return NULL;
    }
    return text;
}

/* One CSV field: as is, or quoted when it holds a comma, a quote or a line end. */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_value(FILE *f, const json_t *v)
{
    char buf[64];
    if (json_is_integer(v))
        fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v)) {
        real_text(json_real_value(v), buf, sizeof buf);
        fputs(buf, f);
    } else if (json_is_true(v) || json_is_false(v))
        fputs(json_is_true(v) ? "true" : "false", f);
    else if (json_is_string(v))
        csv_field(f, json_string_value(v));
}

/* Writes rows.jsonl and rows.csv, sorted by id (invalid points, which have no id, last in grid
 * order). Returns 0 or a negative errno (printed). */
static int write_rows(const struct sweep *sw)
{
    struct sweep_point **order = malloc(sw->npoints * sizeof *order);
    if (!order)
        return -ENOMEM;
    size_t n = 0; /* the points that ended (a row), by id, then the invalid ones */
    for (size_t i = 0; i < sw->npoints; i++)
        if (sw->points[i].row && sw->points[i].state != POINT_INVALID)
            order[n++] = &sw->points[i];
    qsort(order, n, sizeof *order, cmp_ids);
    for (size_t i = 0; i < sw->npoints; i++)
        if (sw->points[i].row && sw->points[i].state == POINT_INVALID)
            order[n++] = &sw->points[i];
    char path[4096], err[1024];
    int rc = 0;
    struct kvsim_output out;
    snprintf(path, sizeof path, "%s/rows.jsonl", sw->out);
    if (!(rc = kvsim_output_open(&out, path, err, sizeof err))) {
        for (size_t i = 0; i < n; i++) {
            char *t = row_text(order[i]->row);
            if (!t) {
                kvsim_output_discard(&out);
                free(order);
                fprintf(stderr, "kvsim sweep: out of memory\n");
                return -ENOMEM;
            }
            fputs(t, out.f);
            free(t);
        }
        rc = kvsim_output_commit(&out, err, sizeof err);
    }
    snprintf(path, sizeof path, "%s/rows.csv", sw->out);
    if (!rc && !(rc = kvsim_output_open(&out, path, err, sizeof err))) {
        fputs("id,status", out.f);
        for (size_t a = 0; a < sw->naxes; a++)
            fprintf(out.f, ",%s", sw->axes[a].name);
        fputs(",complete", out.f);
        for (size_t m = 0; m < ROW_METRICS; m++)
            fprintf(out.f, ",%s", row_metrics[m].column);
        fputs(sw->npareto ? ",pareto,error\n" : ",error\n", out.f);
        for (size_t i = 0; i < n; i++) {
            const json_t *row = order[i]->row;
            csv_value(out.f, json_object_get(row, "id"));
            fputc(',', out.f);
            csv_value(out.f, json_object_get(row, "status"));
            for (size_t a = 0; a < sw->naxes; a++) {
                fputc(',', out.f);
                csv_value(out.f, json_object_get(json_object_get(row, "config"), sw->axes[a].name));
            }
            fputc(',', out.f);
            csv_value(out.f, json_object_get(row, "complete"));
            for (size_t m = 0; m < ROW_METRICS; m++) {
                fputc(',', out.f);
                csv_value(out.f, json_object_get(row, row_metrics[m].column));
            }
            if (sw->npareto) {
                fputc(',', out.f);
                csv_value(out.f, json_object_get(row, "pareto"));
            }
            fputc(',', out.f);
            csv_value(out.f, json_object_get(row, "error"));
            fputc('\n', out.f);
        }
        rc = kvsim_output_commit(&out, err, sizeof err);
    }
    if (rc)
        fprintf(stderr, "kvsim sweep: %s\n", err);
    free(order);
    return rc;
}

/* ---- the Pareto front, the table ---------------------------------------------------------- */

/* The points that ran (state OK), in id order. *n set; NULL when out of memory. */
static struct sweep_point **points_that_ran(const struct sweep *sw, size_t *n)
{
    *n = 0;
    struct sweep_point **v = malloc((sw->npoints ? sw->npoints : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; i < sw->npoints; i++)
        if (sw->points[i].state == POINT_OK)
            v[(*n)++] = &sw->points[i];
    qsort(v, *n, sizeof *v, cmp_ids);
    return v;
}

/* Marks every row "pareto": true when it ran and no other row that ran dominates it in the
 * --pareto metrics (kvsim_pareto_front). Returns the size of the front, or -ENOMEM. */
static long mark_pareto(struct sweep *sw)
{
    size_t n, m = sw->npareto;
    struct sweep_point **ran = points_that_ran(sw, &n);
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
        lower[k] = metric_lower(sw->pareto[k], &known);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < m; k++)
            values[i * m + k] = metric_value(sw, ran[i], sw->pareto[k]);
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

/* A number for the plot's labels and the table: 4 significant digits ("-": missing). */
static void short_number(double x, char *buf, size_t len)
{
    if (isnan(x))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.4g", x);
}

/* XML text (a point's label in a <title>). */
static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

static int cmp_x(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* The plot's frame: where the data go and which values the axes span. */
struct plot {
    double lo[2], hi[2];
    double left, top, width, height;
};

static double plot_x(const struct plot *p, double v)
{
    return p->left + (v - p->lo[0]) / (p->hi[0] - p->lo[0]) * p->width;
}

static double plot_y(const struct plot *p, double v)
{
    return p->top + p->height - (v - p->lo[1]) / (p->hi[1] - p->lo[1]) * p->height;
}

/* The axes, their ticks (five values each) and their titles. */
static void svg_axes(FILE *f, const struct sweep *sw, const struct plot *p, double full_h)
{
    bool known;
    char a[32], b[32];
    fprintf(f,
            "<g id=\"axes\" stroke=\"#444444\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
            "y2=\"%.1f\"/><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/></g>\n",
            p->left, p->top + p->height, p->left + p->width, p->top + p->height, p->left, p->top,
            p->left, p->top + p->height);
    for (int t = 0; t <= 4; t++) {
        double vx = p->lo[0] + (p->hi[0] - p->lo[0]) * t / 4;
        double vy = p->lo[1] + (p->hi[1] - p->lo[1]) * t / 4;
        short_number(vx, a, sizeof a);
        short_number(vy, b, sizeof b);
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                plot_x(p, vx), p->top + p->height + 20, a, p->left - 8, plot_y(p, vy) + 4, b);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s (%s is better)</text>\n",
            p->left + p->width / 2, full_h - 20, sw->pareto[0],
            metric_lower(sw->pareto[0], &known) ? "lower" : "higher");
    fprintf(f,
            "<text transform=\"translate(22 %.1f) rotate(-90)\" text-anchor=\"middle\">%s (%s "
            "is better)</text>\n",
            p->top + p->height / 2, sw->pareto[1],
            metric_lower(sw->pareto[1], &known) ? "lower" : "higher");
}

/* DIR/pareto.svg: the rows that ran, by the first two --pareto metrics, the front drawn (its
 * points joined in the order of the first metric; with more metrics, a point of the front may
 * look dominated in these two). Returns 0 or a negative errno (printed). */
static int write_pareto_svg(const struct sweep *sw)
{
    size_t n;
    struct sweep_point **ran = points_that_ran(sw, &n);
    double(*xy)[2] = malloc((n ? n : 1) * sizeof *xy);
    double(*fr)[2] = malloc((n ? n : 1) * sizeof *fr);
    if (!ran || !xy || !fr) {
        free(ran);
        free(xy);
        free(fr);
        return -ENOMEM;
    }
    const double W = 760, H = 520;
    struct plot p = {{INFINITY, INFINITY}, {-INFINITY, -INFINITY}, 90, 50, W - 90 - 30,
                     H - 50 - 70};
    size_t shown = 0, nf = 0;
    for (size_t i = 0; i < n; i++) {
        xy[i][0] = metric_value(sw, ran[i], sw->pareto[0]);
        xy[i][1] = metric_value(sw, ran[i], sw->pareto[1]);
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
        svg_axes(f, sw, &p, H);
        fputs("<polyline id=\"pareto-front\" fill=\"none\" stroke=\"#d62728\" "
              "stroke-width=\"2\" points=\"",
              f);
        for (size_t i = 0; i < nf; i++)
            fprintf(f, "%s%.1f,%.1f", i ? " " : "", plot_x(&p, fr[i][0]), plot_y(&p, fr[i][1]));
        fputs("\"/>\n<g id=\"pareto-points\">\n", f);
        for (size_t i = 0; i < n; i++) {
            if (isnan(xy[i][0]) || isnan(xy[i][1]))
                continue;
            bool on = json_is_true(json_object_get(ran[i]->row, "pareto"));
            char label[1024];
            point_label(sw, ran[i]->index, label, sizeof label);
            fprintf(f,
                    "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>%s ",
                    on ? "front" : "dominated", plot_x(&p, xy[i][0]), plot_y(&p, xy[i][1]),
                    on ? "6" : "4", on ? "#d62728" : "#7f7f7f", ran[i]->id);
            xml_text(f, label);
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
    double u = metric_value(table_sweep, *x, table_sweep->sort);
    double v = metric_value(table_sweep, *y, table_sweep->sort);
    bool known;
    if (!metric_lower(table_sweep->sort, &known)) {
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
    struct sweep_point **ran = points_that_ran(sw, &n);
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
    bool listed = axis_of(sw, sw->sort) >= 0;
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
            table_cell(sw->axes[a].name, axis_value(sw, a, ran[i]->index));
        for (size_t c = 0; c < nc; c++) {
            char v[32];
            short_number(metric_value(sw, ran[i], cols[c]), v, sizeof v);
            table_cell(cols[c], v);
        }
        if (sw->npareto)
            printf(" %s", json_is_true(json_object_get(ran[i]->row, "pareto")) ? "*" : "");
        printf("\n");
    }
    free(ran);
}

/* ---- running --------------------------------------------------------------------------------- */

/* The child of point pt: replays it (the group's requests when loaded) into reports/<id>.json
 * and exits with replay's status; a message on errfd says why it failed. Never returns. */
static void run_point_child(const struct sweep *sw, const struct sweep_point *pt,
                            const struct kvsim_trace *trace, int errfd)
{
    char err[2048] = "", path[4096];
    struct kvsim_options o;
    struct kvsim_run run;
    int rc = point_options(sw, pt->index, &o, err, sizeof err);
    if (!rc && (rc = kvsim_options_resolve(&o, &run, err, sizeof err)) != 0)
        kvsim_options_fini(&o);
    if (!rc) {
        char *config = kvsim_options_config_text(&o, &run);
        if (!config) {
            snprintf(err, sizeof err, "out of memory");
            rc = -ENOMEM;
        } else {
            if (trace) { /* the parent's copy: the report still names the file */
                run.replay.requests = trace;
                run.replay.trace_label = run.replay.trace_path;
                run.replay.trace_path = NULL;
            }
            run.replay.config_text = config;
            run.replay.stop_flag = &sweep_interrupted;
            struct kvsim_report rep;
            rc = kvsim_replay_run(&run.replay, &rep, err, sizeof err);
            if (!rc && !rep.complete && !strcmp(rep.end_reason, "interrupted")) {
                kvsim_report_fini(&rep);
                free(config);
                _exit(CLI_EXIT_INTERRUPTED); /* no report: the point runs again next time */
            }
            if (!rc) {
                snprintf(path, sizeof path, "%s/reports/%s.json", sw->out, pt->id);
                rc = kvsim_report_write_json(path, &rep, err, sizeof err);
                kvsim_report_fini(&rep);
            }
            free(config);
        }
        kvsim_run_fini(&run);
        kvsim_options_fini(&o);
    }
    if (rc) {
        size_t n = strlen(err);
        ssize_t w = write(errfd, err, n < 4000 ? n : 4000); /* within the pipe's buffer */
        (void)w;
    }
    _exit(cli_status_of(rc));
}

/* A running child. */
struct sweep_child {
    pid_t pid;
    int errfd;
    struct sweep_point *pt;
};

/* Ends point pt: its state (POINT_OK with its report, else POINT_FAILED or POINT_INVALID with
 * why), its row, appended to rows (the file as points finish), and its line: a failure on
 * stderr, a point that ran on stdout unless quiet. Returns 0 or -ENOMEM. */
static int finish_point(struct sweep *sw, struct sweep_point *pt, FILE *rows, const json_t *report,
                        const char *why)
{
    if (!report && !(pt->error = strdup(why)))
        return -ENOMEM;
    if (report)
        pt->state = POINT_OK;
    else if (pt->state != POINT_INVALID)
        pt->state = POINT_FAILED;
    if (!(pt->row = make_row(sw, pt, report)))
        return -ENOMEM;
    char *t = row_text(pt->row);
    if (!t)
        return -ENOMEM;
    fputs(t, rows);
    fflush(rows);
    free(t);
    char label[1024];
    point_label(sw, pt->index, label, sizeof label);
    sw->done++;
    if (sw->progress && pt->state != POINT_OK)
        fprintf(stderr, "\r%70s\r", ""); /* the failure's line replaces the progress line */
    sw->nfailed += pt->state != POINT_OK;
    if (pt->state == POINT_INVALID)
        fprintf(stderr, "kvsim sweep: point (%s) is not a valid configuration: %s\n", label,
                pt->error);
    else if (pt->state == POINT_FAILED)
        fprintf(stderr, "kvsim sweep: point %s (%s) failed: %s\n", pt->id, label, pt->error);
    else if (!sw->quiet && !sw->progress)
        printf("sweep: %zu/%zu %s (%s): ok\n", sw->done, sw->npoints, pt->id, label);
    if (sw->progress) { /* one line on a terminal, rewritten as points end */
        double el = (double)(base_monotonic_ns() - sw->t0) / 1e9;
        char es[48], eta[48];
        base_format_wall(es, sizeof es, el);
        base_format_wall(eta, sizeof eta, el * (double)(sw->npoints - sw->done) / (double)sw->done);
        fprintf(stderr, "\rsweep: %zu/%zu points, %zu failed, elapsed %s, eta %s   ", sw->done,
                sw->npoints, sw->nfailed, es, eta);
    }
    return 0;
}

/* Waits for one child and ends its point. Returns 0, -ENOMEM, or -ECHILD when no child is
 * left (which the count of running children rules out). */
static int reap_one(struct sweep *sw, struct sweep_child *kids, uint32_t *nkids, FILE *rows)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, 0)) < 0 && errno == EINTR)
        if (sweep_interrupted)
            return -EINTR; /* the caller passes SIGINT on, then waits again */
    if (pid < 0)
        return -errno;
    uint32_t k = 0;
    while (k < *nkids && kids[k].pid != pid)
        k++;
    if (k == *nkids)
        return 0; /* not ours (the parent starts no other child) */
    struct sweep_point *pt = kids[k].pt;
    char msg[4096];
    size_t got = 0;
    for (ssize_t r;
         got < sizeof msg - 1 && ((r = read(kids[k].errfd, msg + got, sizeof msg - 1 - got)) > 0 ||
                                  (r < 0 && errno == EINTR));)
        got += r > 0 ? (size_t)r : 0;
    msg[got] = 0;
    close(kids[k].errfd);
    kids[k] = kids[--*nkids];
    if (WIFEXITED(status) && WEXITSTATUS(status) == CLI_EXIT_INTERRUPTED) {
        sw->started--; /* cut short: not a row, it runs again next time */
        return 0;
    }
    json_t *report = NULL;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        char path[4096];
        json_error_t jerr;
        snprintf(path, sizeof path, "%s/reports/%s.json", sw->out, pt->id);
        if (kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &report, &jerr) != 0)
            snprintf(msg, sizeof msg, "its report cannot be read back: %s", jerr.text);
    } else if (!got) {
        if (WIFSIGNALED(status))
            snprintf(msg, sizeof msg, "killed by signal %d (%s)", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        else
            snprintf(msg, sizeof msg, "exited %d", WEXITSTATUS(status));
    }
    int rc = finish_point(sw, pt, rows, report, msg);
    json_decref(report);
    return rc;
}

/* Starts the child of point pt (its group's requests, NULL: none loaded), waiting for a
 * running child first when the process or file table is full. Returns 0, or a negative errno
 * when it cannot start (the point is then still pending). */
static int start_point(struct sweep *sw, struct sweep_point *pt, const struct kvsim_trace *trace,
                       struct sweep_child *kids, uint32_t *nkids, FILE *rows)
{
    for (;;) {
        int fds[2] = {-1, -1}, e = 0;
        if (pipe(fds) != 0)
            e = errno;
        pid_t pid = -1;
        if (!e) {
            fflush(NULL); /* nothing buffered is written twice */
            pid = fork();
            if (pid == 0) {
                close(fds[0]);
                for (uint32_t k = 0; k < *nkids; k++)
                    close(kids[k].errfd);
                fclose(rows);
                run_point_child(sw, pt, trace, fds[1]);
            }
            e = pid < 0 ? errno : 0;
            close(fds[1]);
            if (pid < 0)
                close(fds[0]);
        }
        if (!e) {
            kids[(*nkids)++] = (struct sweep_child){pid, fds[0], pt};
            return 0;
        }
        if ((e != EMFILE && e != ENFILE && e != EAGAIN) || *nkids == 0)
            return -e;
        int rc = reap_one(sw, kids, nkids, rows); /* a slot frees: try again */
        if (rc)
            return rc;
    }
}

/* The report of point pt already in DIR that a rerun keeps (NULL: run it): complete or ended by
 * its own bounds (not interrupted), of this kvsim version, of the same trace bytes (sha256: the
 * id names the trace's path, not its content). */
static json_t *reusable_report(const struct sweep *sw, const struct sweep_point *pt,
                               const char *trace_sha256)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/reports/%s.json", sw->out, pt->id);
    if (sw->force || sw->reads_other_files || access(path, F_OK) != 0)
        return NULL;
    json_t *r = NULL;
    if (kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &r, NULL) != 0)
        return NULL;
    const char *version = json_string_value(json_at(r, "run.kvsim"));
    const char *reason = json_string_value(json_at(r, "run.end.reason"));
    json_t *sha = json_at(r, "run.trace_sha256");
    bool same_trace = trace_sha256 && trace_sha256[0]
                          ? json_is_string(sha) && !strcmp(json_string_value(sha), trace_sha256)
                          : json_is_null(sha);
    if (!version || strcmp(version, sw->version) || !reason || !strcmp(reason, "interrupted") ||
        !same_trace) {
        json_decref(r);
        return NULL;
    }
    return r;
}

/* Passes SIGINT on to the running children (once each: a child's handler only sets its flag,
 * so the terminal's copy and ours do not kill it). */
static void pass_on_sigint(struct sweep_child *kids, uint32_t nkids, bool *passed)
{
    if (*passed)
        return;
    for (uint32_t k = 0; k < nkids; k++)
        kill(kids[k].pid, SIGINT);
    *passed = true;
}

/* Runs every valid point, group by group, at most sw->jobs at a time, keeping the reports a
 * rerun may keep (reusable_report); stops handing out points after sw->max_points or on SIGINT.
 * A point whose trace cannot be loaded or whose process cannot start fails (a row saying why).
 * Returns 0 or -ENOMEM (printed). */
static int run_points(struct sweep *sw, FILE *rows)
{
    struct sweep_child *kids = calloc(sw->jobs, sizeof *kids);
    if (!kids)
        return -ENOMEM;
    uint32_t nkids = 0;
    int rc = 0;
    bool passed = false;
    for (size_t g = 0; g < sw->ngroups && !rc; g++) {
        struct sweep_group *grp = &sw->groups[g];
        struct kvsim_trace trace;
        char err[2048] = "";
        int lrc = grp->trace_path
                      ? kvsim_trace_load(grp->trace_path, &grp->opts, &trace, err, sizeof err)
                      : 0;
        sw->trace_loads += grp->trace_path != NULL;
        for (size_t i = 0; i < sw->npoints && !rc; i++) {
            struct sweep_point *pt = &sw->points[i];
            if (pt->state != POINT_PENDING || pt->group != g)
                continue;
            if (lrc && sweep_interrupted)
                continue; /* its read was interrupted: not run, the same command runs it */
            if (lrc) {    /* the trace refused: every point reading it fails with its message */
                rc = finish_point(sw, pt, rows, NULL, err);
                continue;
            }
            json_t *kept = reusable_report(sw, pt, grp->trace_path ? trace.sha256 : NULL);
            if (kept) {
                sw->reused++;
                rc = finish_point(sw, pt, rows, kept, NULL);
                json_decref(kept);
                continue;
            }
            if (sweep_interrupted || (sw->max_points && sw->started >= sw->max_points))
                continue; /* left for a rerun */
            while (nkids == sw->jobs && !rc && !sweep_interrupted)
                rc = reap_one(sw, kids, &nkids, rows);
            if (rc == -EINTR)
                rc = 0;
            if (rc || sweep_interrupted)
                continue;
            int src = start_point(sw, pt, grp->trace_path ? &trace : NULL, kids, &nkids, rows);
            if (src == 0)
                sw->started++;
            else if (src == -ENOMEM)
                rc = src;
            else if (src != -EINTR) {
                snprintf(err, sizeof err, "its process cannot start: %s", strerror(-src));
                rc = finish_point(sw, pt, rows, NULL, err);
            }
        }
        if (grp->trace_path && !lrc)
            kvsim_trace_free(&trace); /* the children have their copies */
    }
    while (nkids) {
        if (sweep_interrupted)
            pass_on_sigint(kids, nkids, &passed);
        int r = reap_one(sw, kids, &nkids, rows);
        if (r == -EINTR)
            continue;
        rc = rc ? rc : r;
        if (r == -ECHILD)
            break; /* cannot happen: every running child is counted */
    }
    free(kids);
    if (rc)
        fprintf(stderr, "kvsim sweep: %s\n", kvsim_strerror(rc));
    return rc;
}

/* mkdir -p dir/reports. Returns 0 or a negative errno. */
static int make_out_dirs(const char *out)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s/reports", out) >= (int)sizeof p)
        return -ENAMETOOLONG;
    return cli_make_dirs(p);
}

int cli_sweep_main(int argc, char **argv)
{
    struct sweep sw = {0};
    int prc = parse_sweep_args(&sw, argc, argv);
    if (prc) {
        sweep_free(&sw);
        return prc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    }
    int64_t t0 = base_monotonic_ns();
    int rc = plan_points(&sw);
    if (rc) {
        if (rc == -ENOMEM)
            fprintf(stderr, "kvsim sweep: out of memory\n");
        sweep_free(&sw);
        return rc == -ENOMEM ? CLI_EXIT_FAILED : CLI_EXIT_USAGE;
    }
    if ((rc = make_out_dirs(sw.out)) != 0) {
        fprintf(stderr, "kvsim sweep: option --out: %s: cannot write there: %s\n", sw.out,
                kvsim_strerror(rc));
        sweep_free(&sw);
        return CLI_EXIT_USAGE;
    }
    /* The invalid points' rows first (they never run), then the others as they finish. */
    char path[4096];
    snprintf(path, sizeof path, "%s/rows.jsonl", sw.out);
    FILE *rows = fopen(path, "w");
    if (!rows) {
        fprintf(stderr, "kvsim sweep: %s: cannot open for writing: %s\n", path, strerror(errno));
        sweep_free(&sw);
        return CLI_EXIT_USAGE;
    }
    size_t invalid = 0;
    signal(SIGCHLD, SIG_DFL); /* an ignored SIGCHLD (inherited) would leave no child to wait */
    for (size_t i = 0; i < sw.npoints && !rc; i++) {
        struct sweep_point *pt = &sw.points[i];
        if (pt->state != POINT_INVALID)
            continue;
        invalid++;
        char *why = pt->error;
        pt->error = NULL;
        rc = finish_point(&sw, pt, rows, NULL, why);
        free(why);
    }
    /* SIGINT without SA_RESTART: a wait for a child returns, and the parent passes it on. */
    struct sigaction sa = {.sa_handler = on_sweep_sigint}, old_sa;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    sw.version = kvsim_version();
    static const char *const file_options[] = {"profiles", "config", "engine-args",
                                               "prefill-engine-args", "decode-engine-args"};
    for (size_t k = 0; k < sizeof file_options / sizeof file_options[0]; k++) {
        for (size_t i = 0; i < sw.nbase; i++)
            sw.reads_other_files |= !strcmp(sw.base[i].name, file_options[k]);
        sw.reads_other_files |= axis_of(&sw, file_options[k]) >= 0;
    }
    sw.t0 = t0;
    sw.progress = !sw.quiet && isatty(STDERR_FILENO);
    if (!rc)
        rc = run_points(&sw, rows);
    sigaction(SIGINT, &old_sa, NULL); /* the rest is quick; a SIGINT now ends it */
    fclose(rows);
    long front = 0;
    if (!rc && sw.npareto && (front = mark_pareto(&sw)) < 0)
        rc = (int)front;
    if (!rc && sw.npareto)
        rc = write_pareto_svg(&sw);
    if (!rc)
        rc = write_rows(&sw);
    if (sw.progress)
        fprintf(stderr, "\r%70s\r", "");
    if (!rc && !sw.quiet)
        print_table(&sw);
    size_t failed = 0, left = 0;
    for (size_t i = 0; i < sw.npoints; i++) {
        failed += sw.points[i].state == POINT_FAILED;
        left += sw.points[i].state == POINT_PENDING;
    }
    double wall = (double)(base_monotonic_ns() - t0) / 1e9;
    char more[256] = "", svg_path[4200];
    snprintf(svg_path, sizeof svg_path, "%s/pareto.svg (%ld on the front)", sw.out, front);
    if (left)
        snprintf(more, sizeof more, "; %zu not run (%s): the same command runs them", left,
                 sweep_interrupted ? "interrupted" : "--max-points");
    if (!rc)
        printf("sweep: %zu points, %zu failed, %zu invalid, %zu kept from %s/reports, -j %" PRIu32
               ", %.2f s wall, %zu trace loads; %s/rows.jsonl, %s/rows.csv, %s/reports/%s%s%s\n",
               sw.npoints, failed, invalid, sw.reused, sw.out, sw.jobs, wall, sw.trace_loads,
               sw.out, sw.out, sw.out, sw.npareto ? ", " : "", sw.npareto ? svg_path : "", more);
    sweep_free(&sw);
    if (rc)
        return CLI_EXIT_FAILED;
    if (sweep_interrupted && left)
        return CLI_EXIT_INTERRUPTED;
    return failed || invalid ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}
