/*
 * sweep.c - the machinery of `kvsim sweep` and `kvsim plan` (sweep.h): points resolved and
 * identified up front, replayed in worker processes, turned into rows.
 *
 * A point is the base configuration (the replay options outside the axes, in their order) with
 * one value of each axis applied after it. Every point is resolved in the parent before anything
 * runs (a combination the option table refuses is the point's row, "invalid"); its id is the
 * XXH3-64 of its whole configuration (the --config-out text), so the same configuration has the
 * same id in any sweep or plan. The parent loads each distinct trace once (per trace path and the
 * options that change what is loaded) and forks one child per point, at most -j at a time: the
 * child inherits the loaded requests (copy on write), replays them with --threads 1 unless given
 * and writes DIR/reports/<id>.json, the same report a plain `kvsim replay` of that configuration
 * writes (naming the trace, its sha256 and the config). The parent makes each point's row from its
 * report as the child ends: DIR/rows.jsonl grows as points finish, and is rewritten sorted by id
 * (with DIR/rows.csv) at the end. Rows hold no wall-clock figure, so they are byte-identical
 * whatever -j.
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
#include <sys/stat.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvpool/base.h"
#include "runtime/report/report.h"

/* SIGINT, SIGTERM or SIGHUP: the parent stops handing out points and passes SIGINT on to the
 * running ones; a child's replay ends at its next epoch and the child exits CLI_EXIT_INTERRUPTED
 * without a report (a point cut short never becomes a row). Each child runs in its own process
 * group (a terminal's ^C reaches the parent only, which passes it on once) with a parent-death
 * signal (a parent killed outright leaves no worker running). */
volatile sig_atomic_t sweep_interrupted;

/* The running children, for the handler's second signal (async-signal-safe reads only). */
enum { SWEEP_MAX_LIVE = 1024 };
static pid_t sweep_live[SWEEP_MAX_LIVE];
static volatile sig_atomic_t sweep_num_live;

static void sweep_live_add(pid_t pid)
{
    if (sweep_num_live < SWEEP_MAX_LIVE) {
        sweep_live[sweep_num_live] = pid;
        sweep_num_live = sweep_num_live + 1;
    }
}

static void sweep_live_remove(pid_t pid)
{
    for (int i = 0; i < sweep_num_live; i++)
        if (sweep_live[i] == pid) {
            sweep_live[i] = sweep_live[sweep_num_live - 1];
            sweep_num_live = sweep_num_live - 1;
            return;
        }
}

/* The first signal is passed on from here, so that a parent waiting for a child (whatever
 * instant the signal came) sees that child end soon; a child's handler only sets its flag, so
 * the one SIGINT it gets stops its replay at the next epoch. */
static void on_sweep_signal(int sig)
{
    if (sweep_interrupted) { /* the second: everything stops now */
        for (int i = 0; i < sweep_num_live; i++)
            kill(-sweep_live[i], SIGKILL);
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    sweep_interrupted = sig;
    for (int i = 0; i < sweep_num_live; i++)
        kill(sweep_live[i], SIGINT);
}

void sweep_signals_begin(struct sweep_signals *saved)
{
    signal(SIGCHLD, SIG_DFL);
    struct sigaction sa = {.sa_handler = on_sweep_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &saved->old_int);
    sigaction(SIGTERM, &sa, &saved->old_term);
    sigaction(SIGHUP, &sa, &saved->old_hup);
}

void sweep_signals_end(const struct sweep_signals *saved)
{
    sigaction(SIGINT, &saved->old_int, NULL);
    sigaction(SIGTERM, &saved->old_term, NULL);
    sigaction(SIGHUP, &saved->old_hup, NULL);
}

/* The value of axis a at point index i. */
const char *sweep_axis_value(const struct sweep *sw, size_t a, size_t index)
{
    size_t stride = 1;
    for (size_t b = sw->naxes; b-- > a + 1;)
        stride *= sw->axes[b].n;
    return sw->axes[a].values[(index / stride) % sw->axes[a].n];
}

/* "engines=2 router=kv" for messages. */
void sweep_point_label(const struct sweep *sw, size_t index, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (size_t a = 0; a < sw->naxes && at < len; a++) {
        int n = snprintf(buf + at, len - at, "%s%s=%s", a ? " " : "", sw->axes[a].name,
                         sweep_axis_value(sw, a, index));
        if (n < 0)
            break;
        at += (size_t)n;
    }
}

/* The options of point index: the base in order, --threads 1 unless given, then the grid's
 * values. Returns 0 or -EINVAL with the message in err (o is then finished). */
int sweep_point_options(const struct sweep *sw, size_t index, struct kvsim_options *o, char *err,
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
        rc = kvsim_options_set(o, sw->axes[a].name, sweep_axis_value(sw, a, index), err, errlen);
    if (rc) {
        kvsim_options_fini(o);
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    return 0;
}

/* Options whose file the sweep writes itself. */
bool sweep_writes_a_file(const char *name)
{
    static const char *const outputs[] = {"report",         "config-out", "requests-out",
                                          "timeseries-out", "html",       "handoff-events"};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
        if (!strcmp(name, outputs[i]))
            return true;
    return false;
}

/* The option table's own (static) spelling of name, kvsim's or vLLM's (dashes), or NULL. */
static const char *table_name(const char *name)
{
    for (size_t i = 0; kvsim_options_name(i); i++) {
        if (!strcmp(kvsim_options_name(i), name))
            return kvsim_options_name(i);
        if (kvsim_options_vllm_name(i) && !strcmp(kvsim_options_vllm_name(i), name))
            return kvsim_options_vllm_name(i);
    }
    return NULL;
}

/* Appends a base option (name: canonical; value: borrowed from argv, or malloc'd and then owned
 * by the sweep when owned). Returns 0 or -ENOMEM. */
int sweep_base_put(struct sweep *sw, const char *name, const char *value, bool owned)
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

static int cmp_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds the grid axis `given` (an option's name, any spelling) with the n values vals, checking
 * the name and every value against the option table; where begins the messages ("option --grid
 * engines=2,x", "--spec s.json: key 'grid.engines'"). Returns 0 or -EINVAL (printed). */
int sweep_add_axis_values(struct cli_parser *p, struct sweep *sw, const char *given,
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
    if (sweep_writes_a_file(ax->name))
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

void sweep_free(struct sweep *sw)
{
    for (size_t a = 0; a < sw->naxes; a++) {
        free(sw->axes[a].text);
        free(sw->axes[a].values);
    }
    for (size_t i = 0; sw->points && i < sw->npoints; i++) {
        free(sw->points[i].error);
        json_decref(sw->points[i].row);
    }
    for (size_t g = 0; g < sw->ngroups; g++) {
        struct sweep_group *grp = &sw->groups[g];
        if (grp->loaded && grp->trace_path && !grp->load_rc)
            kvsim_trace_free(&grp->trace);
        free(grp->load_error);
        free(grp->key);
        free(grp->trace_path);
    }
    for (size_t i = 0; i < sw->nbase; i++)
        if (sw->base[i].owned)
            free((char *)sw->base[i].value);
    free(sw->points);
    free(sw->groups);
    free(sw->base);
    free(sw->pareto_text);
}

/* What an option sets, whatever its spelling: its canonical name without a "no-" that negates
 * another option (no-enable-prefix-caching sets enable-prefix-caching). */
const char *sweep_setting_key(const char *name, char *buf, size_t len)
{
    kvsim_options_canonical(name, buf, len);
    if (!strncmp(buf, "no-", 3) && kvsim_options_known(buf + 3, NULL))
        memmove(buf, buf + 3, strlen(buf + 3) + 1);
    return buf;
}

/* ---- planning: resolve every point, its id and its trace group ------------------------------ */

int sweep_cmp_ids(const void *a, const void *b)
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
    *g = (struct sweep_group){0};
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

/* What the resolved run r deploys. */
static struct sweep_topology topology_of(const struct kvsim_replay_config *r)
{
    bool disagg = r->disagg.prefill_engines > 0;
    struct sweep_topology t = {
        .deployments = disagg ? 0 : r->num_engines,
        .data_parallel_size = r->data_parallel_size > 1 ? r->data_parallel_size : 1,
        .prefill_engines = r->disagg.prefill_engines,
        .decode_engines = disagg ? r->disagg.decode_engines : 0,
        .tensor_parallel_size = r->tensor_parallel_size > 1 ? r->tensor_parallel_size : 1,
        .gpus = kvsim_replay_gpus(r),
    };
    t.engines = t.gpus / t.tensor_parallel_size;
    return t;
}

/* Resolves every point: its id, its group, its topology, or why it is invalid. Returns 0, or
 * -EINVAL when no point is valid or two points are the same configuration (printed), -ENOMEM. */
int sweep_plan_points(struct sweep *sw)
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
        int rc = sweep_point_options(sw, i, &o, err, sizeof err);
        if (!rc && (rc = kvsim_options_resolve(&o, &run, err, sizeof err)) != 0)
            kvsim_options_fini(&o);
        if (rc == -ENOMEM)
            return rc; /* reading a file an option names: not the point's fault */
        if (rc) {
            pt->state = POINT_INVALID;
            if (!(pt->error = strdup(err)))
                return -ENOMEM;
            continue;
        }
        char *config = kvsim_options_config_text(&o, &run);
        long g = config ? point_group(sw, &run.replay) : -ENOMEM;
        pt->topo = topology_of(&run.replay);
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
                fprintf(stderr,
                        "%s: the trace on standard input can be read once: "
                        "grid no option that changes how it is loaded (format, "
                        "trace-block-size, arrival-speedup, max-requests)\n",
                        sw->cmd);
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
            fprintf(stderr, "%s: %s: cannot open: %s\n", sw->cmd, t, strerror(e));
            return -EINVAL;
        }
    }
    if (!valid) {
        sweep_point_label(sw, 0, label, sizeof label);
        fprintf(stderr, "%s: no point of the %s is a valid configuration; the first (%s): %s\n",
                sw->cmd, sw->cmd + strlen("kvsim "), label, sw->points[0].error);
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
    qsort(by_id, n, sizeof *by_id, sweep_cmp_ids);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (!strcmp(by_id[i]->id, by_id[i - 1]->id)) {
            char other[1024];
            sweep_point_label(sw, by_id[i - 1]->index, other, sizeof other);
            sweep_point_label(sw, by_id[i]->index, label, sizeof label);
            fprintf(stderr, "%s: the points (%s) and (%s) are the same configuration\n", sw->cmd,
                    other, label);
            rc = -EINVAL;
        }
    free(by_id);
    return rc;
}

/* ---- rows ------------------------------------------------------------------------------------ */

/* json_object_get along a dotted path ("requests.completed"); NULL when absent. */
json_t *sweep_json_at(const json_t *root, const char *path)
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
    json_t *v = sweep_json_at(root, path);
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
    {"arrived", "requests.arrived"},
    {"cut_off", "requests.cut_off"},
    {"gpus", "run.gpus"},
    {"ttft_mean_ms", "ttft_ms.avg"},
    {"ttft_p50_ms", "ttft_ms.p50"},
    {"ttft_p90_ms", "ttft_ms.p90"},
    {"ttft_p95_ms", "ttft_ms.p95"},
    {"ttft_p99_ms", "ttft_ms.p99"},
    /* itl: AIPerf's, one value per request ((last - first token) / (tokens - 1)), as tpot */
    {"itl_mean_ms", "itl_ms.avg"},
    {"itl_p50_ms", "itl_ms.p50"},
    {"itl_p90_ms", "itl_ms.p90"},
    {"itl_p95_ms", "itl_ms.p95"},
    {"itl_p99_ms", "itl_ms.p99"},
    {"tpot_mean_ms", "tpot_ms.avg"},
    {"tpot_p50_ms", "tpot_ms.p50"},
    {"tpot_p90_ms", "tpot_ms.p90"},
    {"tpot_p95_ms", "tpot_ms.p95"},
    {"tpot_p99_ms", "tpot_ms.p99"},
    /* token_gap: vLLM's benchmark ITL, every gap between two tokens of a request, pooled */
    {"token_gap_mean_ms", "token_gap_ms.avg"},
    {"token_gap_p50_ms", "token_gap_ms.p50"},
    {"token_gap_p90_ms", "token_gap_ms.p90"},
    {"token_gap_p95_ms", "token_gap_ms.p95"},
    {"token_gap_p99_ms", "token_gap_ms.p99"},
    {"e2e_mean_ms", "e2e_ms.avg"},
    {"e2e_p50_ms", "e2e_ms.p50"},
    {"e2e_p90_ms", "e2e_ms.p90"},
    {"e2e_p95_ms", "e2e_ms.p95"},
    {"e2e_p99_ms", "e2e_ms.p99"},
    {"requests_per_s", "throughput.requests_per_s"},
    {"output_tokens_per_s", "throughput.output_tokens_per_s"},
    {"prefix_cache_reuse_ratio", "prefix_cache_reuse_ratio"},
    {"preemptions", "preemptions"},
    {"slo_attainment_pct", "slo.attainment_pct.all"},
    {"goodput_requests_per_s", "slo.goodput_requests_per_s"},
};
#define ROW_METRICS (sizeof row_metrics / sizeof row_metrics[0])

const char *sweep_row_column(size_t m) { return m < ROW_METRICS ? row_metrics[m].column : NULL; }

/* ---- metrics: the table's order and the Pareto front ----------------------------------------- */

/* Whether lower is better for a metric (a row column, or a grid option that is a cost); known
 * false when it has no natural direction. */
bool sweep_metric_lower(const char *name, bool *known)
{
    static const char *const higher[] = {"completed",           "requests_per_s",
                                         "output_tokens_per_s", "prefix_cache_reuse_ratio",
                                         "slo_attainment_pct",  "goodput_requests_per_s"};
    static const char *const costs[] = {"engines",    "prefill-engines", "decode-engines",
                                        "tp",         "gpu-memory-gib",  "num-gpu-blocks",
                                        "g2-blocks",  "g3-blocks",       "rejected",
                                        "incomplete", "preemptions",     "cut_off",
                                        "gpus"};
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
long sweep_axis_of(const struct sweep *sw, const char *name)
{
    char canon[64];
    kvsim_options_canonical(name, canon, sizeof canon);
    for (size_t a = 0; a < sw->naxes; a++)
        if (!strcmp(sw->axes[a].name, name) || !strcmp(sw->axes[a].name, canon))
            return (long)a;
    return -1;
}

/* A metric's value at a point that ran (NaN when missing). */
double sweep_metric_value(const struct sweep *sw, const struct sweep_point *pt, const char *name)
{
    long a = sweep_axis_of(sw, name);
    if (a >= 0)
        return strtod(sweep_axis_value(sw, (size_t)a, pt->index), NULL);
    json_t *v = json_object_get(pt->row, name);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* A grid value as the row gives it: a number for a numeric option, true/false for a flag, else
 * the text (a value the option table accepted, so it parses; a text that does not stays text). */
static json_t *axis_value_json(const char *option, const char *text)
{
    char *end = NULL;
    switch (kvsim_options_type(option)) {
    case KVSIM_OPTION_INTEGER: {
        errno = 0;
        unsigned long long u = strtoull(text, &end, 10);
        if (*text && !*end && !errno && u <= (unsigned long long)INT64_MAX)
            return json_integer((json_int_t)u);
        break;
    }
    case KVSIM_OPTION_REAL: {
        double x = strtod(text, &end);
        if (*text && !*end && isfinite(x) && fabs(x) < 9007199254740992.0 && x == floor(x))
            return json_integer((json_int_t)x); /* 4, not 4.0: the number as given */
        if (*text && !*end && isfinite(x))
            return json_real(x);
        break;
    }
    case KVSIM_OPTION_BOOLEAN:
        if (!strcmp(text, "true") || !strcmp(text, "false"))
            return json_boolean(!strcmp(text, "true"));
        break;
    case KVSIM_OPTION_TEXT: break;
    }
    return json_string(text);
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
    static const char *const states[] = {"pending", "invalid", "ok", "failed", "idle"};
    int bad = json_object_set_new(row, "id", json_string(pt->id)) |
              json_object_set_new(row, "status", json_string(states[pt->state]));
    for (size_t a = 0; a < sw->naxes; a++)
        bad |= json_object_set_new(
            cfg, sw->axes[a].name,
            axis_value_json(sw->axes[a].name, sweep_axis_value(sw, a, pt->index)));
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
void sweep_real_text(double x, char *buf, size_t len)
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

/* A row as one compact JSON line, keys in insertion order, reals as sweep_real_text. */
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
        sweep_real_text(json_real_value(v), buf, sizeof buf);
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
char *sweep_row_text(const json_t *row)
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
        sweep_real_text(json_real_value(v), buf, sizeof buf);
        fputs(buf, f);
    } else if (json_is_true(v) || json_is_false(v))
        fputs(json_is_true(v) ? "true" : "false", f);
    else if (json_is_string(v))
        csv_field(f, json_string_value(v));
}

/* Writes rows.jsonl and rows.csv, sorted by id (invalid points, which have no id, last in grid
 * order). Returns 0 or a negative errno (printed). */
int sweep_write_rows(const struct sweep *sw)
{
    struct sweep_point **order = malloc(sw->npoints * sizeof *order);
    if (!order)
        return -ENOMEM;
    size_t n = 0; /* the points that ended (a row), by id, then the invalid ones */
    for (size_t i = 0; i < sw->npoints; i++)
        if (sw->points[i].row && sw->points[i].state != POINT_INVALID)
            order[n++] = &sw->points[i];
    qsort(order, n, sizeof *order, sweep_cmp_ids);
    for (size_t i = 0; i < sw->npoints; i++)
        if (sw->points[i].row && sw->points[i].state == POINT_INVALID)
            order[n++] = &sw->points[i];
    char path[4096], err[1024];
    int rc = 0;
    struct kvsim_output out;
    snprintf(path, sizeof path, "%s/rows.jsonl", sw->out);
    if (!(rc = kvsim_output_open(&out, path, err, sizeof err))) {
        for (size_t i = 0; i < n; i++) {
            char *t = sweep_row_text(order[i]->row);
            if (!t) {
                kvsim_output_discard(&out);
                free(order);
                fprintf(stderr, "%s: out of memory\n", sw->cmd);
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
        fprintf(stderr, "%s: %s\n", sw->cmd, err);
    free(order);
    return rc;
}

/* The points that ran (state OK), in id order. *n set; NULL when out of memory. */
struct sweep_point **sweep_points_that_ran(const struct sweep *sw, size_t *n)
{
    *n = 0;
    struct sweep_point **v = malloc((sw->npoints ? sw->npoints : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; i < sw->npoints; i++)
        if (sw->points[i].state == POINT_OK)
            v[(*n)++] = &sw->points[i];
    qsort(v, *n, sizeof *v, sweep_cmp_ids);
    return v;
}

/* ---- plots -------------------------------------------------------------------------------- */

void sweep_short_number(double x, char *buf, size_t len)
{
    if (isnan(x))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.4g", x);
}

void sweep_xml_text(FILE *f, const char *s)
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

double sweep_plot_x(const struct sweep_plot *p, double v)
{
    return p->left + (v - p->lo[0]) / (p->hi[0] - p->lo[0]) * p->width;
}

double sweep_plot_y(const struct sweep_plot *p, double v)
{
    return p->top + p->height - (v - p->lo[1]) / (p->hi[1] - p->lo[1]) * p->height;
}

void sweep_svg_axes(FILE *f, const struct sweep_plot *p, double full_h, const char *x_title,
                    const char *y_title)
{
    char a[32], b[32];
    fprintf(f,
            "<g id=\"axes\" stroke=\"#444444\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
            "y2=\"%.1f\"/><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/></g>\n",
            p->left, p->top + p->height, p->left + p->width, p->top + p->height, p->left, p->top,
            p->left, p->top + p->height);
    for (int t = 0; t <= 4; t++) {
        double vx = p->lo[0] + (p->hi[0] - p->lo[0]) * t / 4;
        double vy = p->lo[1] + (p->hi[1] - p->lo[1]) * t / 4;
        sweep_short_number(p->log_x ? pow(10, vx) : vx, a, sizeof a);
        sweep_short_number(vy, b, sizeof b);
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                sweep_plot_x(p, vx), p->top + p->height + 20, a, p->left - 8,
                sweep_plot_y(p, vy) + 4, b);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", p->left + p->width / 2,
            full_h - 20);
    sweep_xml_text(f, x_title);
    fprintf(f,
            "</text>\n<text transform=\"translate(22 %.1f) rotate(-90)\" "
            "text-anchor=\"middle\">",
            p->top + p->height / 2);
    sweep_xml_text(f, y_title);
    fputs("</text>\n", f);
}

/* ---- running --------------------------------------------------------------------------------- */

int sweep_replay_point(const struct sweep *sw, const struct sweep_point *pt,
                       const struct kvsim_trace *trace, char **text, char *err, size_t errlen)
{
    struct kvsim_options o;
    struct kvsim_run run;
    *text = NULL;
    int rc = sweep_point_options(sw, pt->index, &o, err, errlen);
    if (!rc && (rc = kvsim_options_resolve(&o, &run, err, errlen)) != 0)
        kvsim_options_fini(&o);
    if (rc)
        return rc;
    char *config = kvsim_options_config_text(&o, &run);
    if (!config) {
        snprintf(err, errlen, "out of memory");
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
        rc = kvsim_replay_run(&run.replay, &rep, err, errlen);
        if (!rc) { /* rep is set */
            if (!rep.complete && !strcmp(rep.end_reason, "interrupted"))
                rc = -EINTR; /* no report: the point runs again next time */
            else if (!(*text = kvsim_report_json_text(&rep))) {
                snprintf(err, errlen, "out of memory building the report");
                rc = -ENOMEM;
            }
            kvsim_report_fini(&rep);
        }
        free(config);
    }
    kvsim_run_fini(&run);
    kvsim_options_fini(&o);
    return rc;
}

/* The child of point pt: replays it (the group's requests when loaded) into reports/<id>.json
 * and exits with replay's status; a message on errfd says why it failed. Never returns. */
static void run_point_child(const struct sweep *sw, const struct sweep_point *pt,
                            const struct kvsim_trace *trace, int errfd)
{
    char err[2048] = "", path[4096], *text;
    int rc = sweep_replay_point(sw, pt, trace, &text, err, sizeof err);
    if (rc == -EINTR)
        _exit(CLI_EXIT_INTERRUPTED); /* no report: the point runs again next time */
    if (!rc) {
        snprintf(path, sizeof path, "%s/reports/%s.json", sw->out, pt->id);
        rc = kvsim_write_text(path, text, err, sizeof err);
        free(text);
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
int sweep_finish_point(struct sweep *sw, struct sweep_point *pt, FILE *rows, const json_t *report,
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
    char *t = sweep_row_text(pt->row);
    if (!t)
        return -ENOMEM;
    fputs(t, rows);
    fflush(rows);
    free(t);
    char label[1024];
    sweep_point_label(sw, pt->index, label, sizeof label);
    sw->done++;
    if (sw->progress && pt->state != POINT_OK)
        fprintf(stderr, "\r%70s\r", ""); /* the failure's line replaces the progress line */
    sw->nfailed += pt->state != POINT_OK;
    if (sw->own_failures && pt->state != POINT_OK)
        ; /* the command says it (kvsim plan: "the probe ... failed") */
    else if (pt->state == POINT_INVALID)
        fprintf(stderr, "%s: point (%s) is not a valid configuration: %s\n", sw->cmd, label,
                pt->error);
    else if (pt->state == POINT_FAILED)
        fprintf(stderr, "%s: point %s (%s) failed: %s\n", sw->cmd, pt->id, label, pt->error);
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
    sweep_live_remove(pid);
    kids[k] = kids[--*nkids];
    if (WIFEXITED(status) && WEXITSTATUS(status) == CLI_EXIT_INTERRUPTED) {
        sw->started--; /* cut short: not a row, it runs again next time */
        return 0;
    }
    bool ran = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ran && !got) {
        if (WIFSIGNALED(status))
            snprintf(msg, sizeof msg, "killed by signal %d (%s)", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        else
            snprintf(msg, sizeof msg, "exited %d", WEXITSTATUS(status));
    }
    return sweep_point_ended(sw, pt, rows, ran, msg);
}

int sweep_point_ended(struct sweep *sw, struct sweep_point *pt, FILE *rows, bool ran,
                      const char *why)
{
    json_t *report = NULL;
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", why ? why : "");
    if (ran) {
        char path[4096];
        json_error_t jerr;
        snprintf(path, sizeof path, "%s/reports/%s.json", sw->out, pt->id);
        if (kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &report, &jerr) != 0)
            snprintf(msg, sizeof msg, "its report cannot be read back: %s", jerr.text);
    }
    int rc = sweep_finish_point(sw, pt, rows, report, msg);
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
            pid_t parent = getpid();
            /* The stop signals wait until each side has its state: the child must not act on
             * the parent's list of workers, nor the parent miss the new one. */
            sigset_t stops, old_mask;
            sigemptyset(&stops);
            sigaddset(&stops, SIGINT);
            sigaddset(&stops, SIGTERM);
            sigaddset(&stops, SIGHUP);
            sigprocmask(SIG_BLOCK, &stops, &old_mask);
            pid = fork();
            if (pid == 0) {
                sweep_num_live = 0;    /* its siblings are not its to kill */
                if (sweep_interrupted) /* stopped between the check and the fork */
                    _exit(CLI_EXIT_INTERRUPTED);
                sigprocmask(SIG_SETMASK, &old_mask, NULL);
                setpgid(0, 0);
                /* the parent killed outright: this worker stops too (SIGTERM: at its next
                 * epoch, without a report); the parent may have died before this line */
#ifdef __linux__
                if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0)
                    _exit(CLI_EXIT_INTERRUPTED);
#endif
                if (getppid() != parent)
                    _exit(CLI_EXIT_INTERRUPTED);
                close(fds[0]);
                for (uint32_t k = 0; k < *nkids; k++)
                    close(kids[k].errfd);
                fclose(rows);
                run_point_child(sw, pt, trace, fds[1]);
            }
            e = pid < 0 ? errno : 0;
            if (pid > 0) {
                setpgid(pid, pid); /* as the child does: whichever runs first */
                sweep_live_add(pid);
            }
            sigprocmask(SIG_SETMASK, &old_mask, NULL);
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

/* ---- what a rerun keeps ---------------------------------------------------------------------- */

/* A JSON value for a message: an integer or real as its shortest text, a string quoted, else
 * its type; at most len bytes. */
static void value_text(const json_t *v, char *buf, size_t len)
{
    if (!v)
        snprintf(buf, len, "absent");
    else if (json_is_integer(v))
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v)) {
        double x = json_real_value(v);
        for (int prec = fabs(x) >= 1 && fabs(x) < 1e15 ? 1 + (int)log10(fabs(x)) : 1; prec <= 17;
             prec++) { /* 150, not 1.5e+02 */
            snprintf(buf, len, "%.*g", prec, x);
            if (strtod(buf, NULL) == x)
                break;
        }
    } else if (json_is_string(v))
        snprintf(buf, len, "\"%.60s%s\"", json_string_value(v),
                 strlen(json_string_value(v)) > 60 ? "..." : "");
    else {
        static const char *const types[] = {"an object", "a list", "a string", "an integer",
                                            "a real",    "true",   "false",    "null"};
        snprintf(buf, len, "%s", types[json_typeof(v)]);
    }
}

/* Whether got differs from want; where first, appended to path (size len: "options.seed",
 * "step_model.prefill_ms[1]"), left as it was when they are equal. Objects are compared key by
 * key (want's keys first, in order), lists element by element. */
static bool first_difference(const json_t *got, const json_t *want, char *path, size_t len)
{
    size_t at = strlen(path);
    if (json_is_object(got) && json_is_object(want)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)want, key, v)
        {
            snprintf(path + at, len - at, "%s%s", at ? "." : "", key);
            if (first_difference(json_object_get(got, key), v, path, len))
                return true;
        }
        json_object_foreach((json_t *)got, key, v)
        {
            snprintf(path + at, len - at, "%s%s", at ? "." : "", key);
            if (!json_object_get(want, key))
                return true;
        }
        path[at] = 0;
        return false;
    }
    if (json_is_array(got) && json_is_array(want) &&
        json_array_size(got) == json_array_size(want)) {
        for (size_t i = 0; i < json_array_size(want); i++) {
            snprintf(path + at, len - at, "[%zu]", i);
            if (first_difference(json_array_get(got, i), json_array_get(want, i), path, len))
                return true;
        }
        path[at] = 0;
        return false;
    }
    return !got || !json_equal(got, want);
}

/* The configuration of point index as its report records it (run.config: the --config-out text,
 * its reals rounded as a report writes them), and whether it scores SLOs. Returns 0, -ENOMEM,
 * or -EINVAL with the message in err (the point no longer resolves). */
static int point_recorded_config(const struct sweep *sw, size_t index, json_t **out, bool *has_slo,
                                 char *err, size_t errlen)
{
    struct kvsim_options o;
    struct kvsim_run run;
    *out = NULL;
    int rc = sweep_point_options(sw, index, &o, err, errlen);
    if (!rc && (rc = kvsim_options_resolve(&o, &run, err, errlen)) != 0)
        kvsim_options_fini(&o);
    if (rc)
        return rc == -ENOMEM ? rc : -EINVAL;
    const struct kvsim_slo *slo = &run.replay.slo;
    *has_slo = slo->ttft_ns > 0 || slo->itl_ns > 0 || slo->e2e_ns > 0;
    char *config = kvsim_options_config_text(&o, &run);
    kvsim_run_fini(&run);
    kvsim_options_fini(&o);
    json_t *doc = config ? json_loads(config, 0, NULL) : NULL;
    free(config);
    char *rounded = doc ? json_dumps(doc, JSON_ENCODE_ANY | JSON_COMPACT |
                                              JSON_REAL_PRECISION(KVSIM_REPORT_REAL_DIGITS))
                        : NULL;
    json_decref(doc);
    *out = rounded ? json_loads(rounded, 0, NULL) : NULL;
    free(rounded);
    return *out ? 0 : -ENOMEM;
}

/* Whether the configuration a report records (rec: its run.config) is the point's (want, from
 * point_recorded_config); why not, naming the first key that differs, in why. */
static bool config_matches(const json_t *rec, const json_t *want, char *why, size_t len)
{
    char key[256] = "", a[96], b[96];
    if (!first_difference(rec, want, key, sizeof key))
        return true;
    const char *lead = "its configuration is not this point's";
    if (!key[0]) {
        value_text(rec, a, sizeof a);
        snprintf(why, len, "%s: run.config is %s", lead, a);
    } else if (strchr(key, '[')) /* in a list: sweep_json_at does not index lists */
        snprintf(why, len, "%s: run.config.%s differs", lead, key);
    else {
        value_text(sweep_json_at(rec, key), a, sizeof a);
        value_text(sweep_json_at(want, key), b, sizeof b);
        snprintf(why, len, "%s: run.config.%s is %s, the point's %s", lead, key, a, b);
    }
    return false;
}

/* Whether a report's run.trace_sha256 (sha) is of the trace's bytes (trace_sha256; NULL or
 * "": the synthetic workload, whose sha256 is null); why not, in why. */
static bool trace_matches(const json_t *sha, const char *trace_sha256, char *why, size_t len)
{
    bool file = trace_sha256 && trace_sha256[0];
    if (file ? json_is_string(sha) && !strcmp(json_string_value(sha), trace_sha256)
             : json_is_null(sha))
        return true;
    char v[96];
    value_text(sha, v, sizeof v);
    snprintf(why, len,
             "its trace bytes are not the trace's: run.trace_sha256 is %s, the trace's %s", v,
             file ? trace_sha256 : "null");
    return false;
}

/* Whether a report's run.end.reason says its replay ended by its own bounds (finished, or
 * --max-sim-time-s), not interrupted; why not, in why. */
static bool ended_by_itself(const char *reason, char *why, size_t len)
{
    if (reason && strcmp(reason, "interrupted"))
        return true;
    snprintf(why, len, "its replay %s", reason ? "was interrupted" : "records no end reason");
    return false;
}

/* The figures a row is made of, and what each must be. */
enum figure_kind { FIG_COUNT, FIG_RATE, FIG_RATIO, FIG_PERCENT };
static const struct {
    const char *path;
    enum figure_kind kind;
    bool slo; /* present exactly when the point scores SLOs */
} row_figures[] = {
    {"requests.completed", FIG_COUNT, false},
    {"requests.rejected", FIG_COUNT, false},
    {"requests.incomplete", FIG_COUNT, false},
    {"requests.arrived", FIG_COUNT, false},
    {"requests.cut_off", FIG_COUNT, false},
    {"run.gpus", FIG_COUNT, false},
    {"preemptions", FIG_COUNT, false},
    {"throughput.requests_per_s", FIG_RATE, false},
    {"throughput.output_tokens_per_s", FIG_RATE, false},
    {"prefix_cache_reuse_ratio", FIG_RATIO, false},
    {"slo.attainment_pct.all", FIG_PERCENT, true},
    {"slo.goodput_requests_per_s", FIG_RATE, true},
};
/* The latency distributions of a row: each statistic null when its count is 0, else a finite
 * number >= 0 (ms). */
static const char *const row_latencies[] = {"ttft_ms", "itl_ms", "tpot_ms", "token_gap_ms",
                                            "e2e_ms"};
static const char *const row_statistics[] = {"avg", "p50", "p90", "p95", "p99"};

/* Whether the figures rows are made of are sane (counts integers >= 0, latencies and rates
 * finite and >= 0, a ratio in [0, 1], percentages in [0, 100], the SLO figures present exactly
 * when the point scores SLOs); why not, in why. */
static bool figures_sane(const json_t *r, bool has_slo, char *why, size_t len)
{
    char v[96];
    if (!json_is_boolean(json_object_get(r, "complete"))) {
        value_text(json_object_get(r, "complete"), v, sizeof v);
        snprintf(why, len, "its complete %s is not true or false", v);
        return false;
    }
    for (size_t i = 0; i < sizeof row_figures / sizeof row_figures[0]; i++) {
        const json_t *x = sweep_json_at(r, row_figures[i].path);
        if (row_figures[i].slo && !has_slo) {
            if (x) {
                snprintf(why, len, "it has %s, and the point sets no SLO", row_figures[i].path);
                return false;
            }
            continue;
        }
        value_text(x, v, sizeof v);
        double d = json_number_value(x);
        bool ok = false;
        const char *what = "";
        switch (row_figures[i].kind) {
        case FIG_COUNT:
            ok = json_is_integer(x) && json_integer_value(x) >= 0;
            what = "a count, an integer >= 0";
            break;
        case FIG_RATE:
            ok = json_is_number(x) && isfinite(d) && d >= 0;
            what = "a rate, finite and >= 0";
            break;
        case FIG_RATIO:
            ok = json_is_number(x) && d >= 0 && d <= 1;
            what = "a ratio in [0, 1]";
            break;
        case FIG_PERCENT:
            ok = json_is_number(x) && d >= 0 && d <= 100;
            what = "a percentage in [0, 100]";
            break;
        }
        if (!ok) {
            snprintf(why, len, "its %s %s is not %s", row_figures[i].path, v, what);
            return false;
        }
    }
    for (size_t l = 0; l < sizeof row_latencies / sizeof row_latencies[0]; l++) {
        char path[64];
        snprintf(path, sizeof path, "%s.count", row_latencies[l]);
        const json_t *count = sweep_json_at(r, path);
        if (!json_is_integer(count) || json_integer_value(count) < 0) {
            value_text(count, v, sizeof v);
            snprintf(why, len, "its %s %s is not a count, an integer >= 0", path, v);
            return false;
        }
        for (size_t s = 0; s < sizeof row_statistics / sizeof row_statistics[0]; s++) {
            snprintf(path, sizeof path, "%s.%s", row_latencies[l], row_statistics[s]);
            const json_t *x = sweep_json_at(r, path);
            double d = json_number_value(x);
            value_text(x, v, sizeof v);
            if (json_integer_value(count) == 0 ? !json_is_null(x)
                                               : !json_is_number(x) || !isfinite(d) || d < 0) {
                if (json_integer_value(count) == 0)
                    snprintf(why, len, "its %s is %s, and %s.count is 0", path, v,
                             row_latencies[l]);
                else
                    snprintf(why, len, "its %s %s is not a latency in ms, finite and >= 0", path,
                             v);
                return false;
            }
        }
    }
    return true;
}

/* "a FIFO" ... for a file that is not a regular one. */
static const char *file_type(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
           : S_ISLNK(m)  ? "a symbolic link"
                         : "not a file";
}

/* Reads the report at path: a regular file (opened without blocking, so a FIFO or a device
 * there is refused, never waited on), at most KVSIM_INPUT_MAX_JSON_BYTES, parsed. Returns 0
 * with *out, -ENOENT (no file: nothing to say), -ENOMEM, or -EINVAL with why. */
static int read_report(const char *path, json_t **out, char *why, size_t len)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        struct stat ls;
        if (e == ENOENT && lstat(path, &ls) != 0)
            return -ENOENT;
        snprintf(why, len, "it cannot be opened: %s", strerror(e));
        return -EINVAL;
    }
    struct stat st;
    char *buf = NULL;
    size_t n = 0;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        snprintf(why, len, "it cannot be examined: %s", strerror(errno));
        rc = -EINVAL;
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(why, len, "it is %s, not a regular file", file_type(st.st_mode));
        rc = -EINVAL;
    } else if ((uint64_t)st.st_size > KVSIM_INPUT_MAX_JSON_BYTES) {
        snprintf(why, len, "it is larger than %zu MiB", KVSIM_INPUT_MAX_JSON_BYTES >> 20);
        rc = -EINVAL;
    } else if (!(buf = malloc((size_t)st.st_size + 1)))
        rc = -ENOMEM;
    for (ssize_t r = 1; !rc && r != 0;) { /* to its end (a file that grew stops at the limit) */
        r = read(fd, buf + n, (size_t)st.st_size + 1 - n);
        if (r < 0 && errno != EINTR) {
            snprintf(why, len, "it cannot be read: %s", strerror(errno));
            rc = -EINVAL;
        } else if (r > 0 && (n += (size_t)r) > (size_t)st.st_size) {
            snprintf(why, len, "it grew while being read");
            rc = -EINVAL;
        }
    }
    close(fd);
    if (!rc) {
        json_error_t jerr;
        if (!(*out = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &jerr))) {
            rc = json_error_code(&jerr) == json_error_out_of_memory || !jerr.text[0] ? -ENOMEM
                                                                                     : -EINVAL;
            snprintf(why, len, "it is not a JSON report: line %d: %s", jerr.line, jerr.text);
        }
    }
    free(buf);
    return rc;
}

/*
 * Whether the report of point pt already in DIR may stand for a run of it (*out: the report,
 * or NULL: run it, saying why in why unless why[0] is 0: no report there). Kept only when it is
 * a regular file; of this kvsim version; recording the point's very configuration (run.config,
 * the text its id hashes); of the same trace bytes (sha256: the id names the trace's path, not
 * its content); not interrupted; and with figures that pass figures_sane. Returns 0 or -ENOMEM.
 */
static int reusable_report(const struct sweep *sw, const struct sweep_point *pt,
                           const char *trace_sha256, json_t **out, char *why, size_t len)
{
    char path[4096], err[1024];
    *out = NULL;
    why[0] = 0;
    snprintf(path, sizeof path, "%s/reports/%s.json", sw->out, pt->id);
    if (sw->force || sw->reads_other_files)
        return 0;
    json_t *r = NULL, *cfg = NULL;
    int rc = read_report(path, &r, why, len);
    if (rc == -ENOENT || rc == -EINVAL)
        return 0;
    if (rc)
        return rc;
    const char *version = json_string_value(sweep_json_at(r, "run.kvsim"));
    bool has_slo = false;
    if (!version || strcmp(version, sw->version))
        snprintf(why, len, "it was written by %s, not %s", version ? version : "no kvsim version",
                 sw->version);
    else if ((rc = point_recorded_config(sw, pt->index, &cfg, &has_slo, err, sizeof err)) != 0) {
        if (rc == -EINVAL) /* cannot happen: the point resolved when the sweep began */
            snprintf(why, len, "the point's configuration: %.900s", err);
    } else if (config_matches(sweep_json_at(r, "run.config"), cfg, why, len) &&
               trace_matches(sweep_json_at(r, "run.trace_sha256"), trace_sha256, why, len) &&
               ended_by_itself(json_string_value(sweep_json_at(r, "run.end.reason")), why, len))
        figures_sane(r, has_slo, why, len);
    json_decref(cfg);
    if (rc == -ENOMEM || why[0]) {
        json_decref(r);
        return rc == -ENOMEM ? rc : 0;
    }
    *out = r;
    return 0;
}

int sweep_keep_reusable(struct sweep *sw, struct sweep_point *pt, FILE *rows)
{
    const struct sweep_group *g = &sw->groups[pt->group];
    json_t *kept = NULL;
    char why[1024];
    int rc =
        reusable_report(sw, pt, g->trace_path && g->loaded && !g->load_rc ? g->trace.sha256 : NULL,
                        &kept, why, sizeof why);
    if (rc)
        return rc;
    if (!kept) {
        if (why[0]) { /* said: a report there that cannot stand for the point */
            char path[4096];
            struct stat ls;
            snprintf(path, sizeof path, "%s/reports/%s.json", sw->out, pt->id);
            /* The point's report replaces it: a FIFO, a device or a link would be written
             * through (report.h, kvsim_output_open), so it goes first. */
            bool removed = lstat(path, &ls) == 0 && !S_ISREG(ls.st_mode) && !S_ISDIR(ls.st_mode) &&
                           unlink(path) == 0;
            if (sw->progress)
                fprintf(stderr, "\r%70s\r", "");
            fprintf(stderr, "%s: %s: not kept (%s%s): the point runs again\n", sw->cmd, path, why,
                    removed ? "; removed" : "");
        }
        return 0;
    }
    sw->reused++;
    pt->reused = true;
    rc = sweep_finish_point(sw, pt, rows, kept, NULL);
    json_decref(kept);
    return rc ? rc : 1;
}

int sweep_point_topology(const struct sweep *sw, size_t index, struct sweep_topology *out)
{
    const struct sweep_point *pt = &sw->points[index];
    if (pt->state == POINT_INVALID)
        return -EINVAL;
    *out = pt->topo;
    return 0;
}

int sweep_group_load(struct sweep *sw, size_t g)
{
    struct sweep_group *grp = &sw->groups[g];
    if (!grp->trace_path)
        return 0;
    if (!grp->loaded) {
        char err[2048] = "";
        grp->load_rc = kvsim_trace_load(grp->trace_path, &grp->opts, &grp->trace, err, sizeof err);
        free(grp->load_error);
        grp->load_error = NULL;
        if (grp->load_rc && !(grp->load_error = strdup(err)))
            return -ENOMEM;
        grp->loaded = !sweep_interrupted || !grp->load_rc; /* an interrupted read: again */
        sw->trace_refused |= grp->loaded && cli_status_of(grp->load_rc) == CLI_EXIT_USAGE;
        sw->trace_loads++;
    }
    return grp->load_rc;
}

/* Runs every valid point, group by group, at most sw->jobs at a time, keeping the reports a
 * rerun may keep (reusable_report); stops handing out points after sw->max_points or on SIGINT.
 * A point whose trace cannot be loaded or whose process cannot start fails (a row saying why).
 * Returns 0 or -ENOMEM (printed). */
int sweep_run_points(struct sweep *sw, FILE *rows)
{
    struct sweep_child *kids = calloc(sw->jobs, sizeof *kids);
    if (!kids)
        return -ENOMEM;
    uint32_t nkids = 0;
    int rc = 0;
    for (size_t g = 0; g < sw->ngroups && !rc; g++) {
        struct sweep_group *grp = &sw->groups[g];
        bool wanted = false;
        for (size_t i = 0; i < sw->npoints && !wanted; i++)
            wanted = sw->points[i].state == POINT_PENDING && sw->points[i].group == g;
        if (!wanted)
            continue;
        char err[2048] = "";
        int lrc = sweep_group_load(sw, g);
        if (lrc == -ENOMEM && !grp->load_error)
            rc = -ENOMEM;
        const struct kvsim_trace *trace = grp->trace_path && !lrc ? &grp->trace : NULL;
        for (size_t i = 0; i < sw->npoints && !rc; i++) {
            struct sweep_point *pt = &sw->points[i];
            if (pt->state != POINT_PENDING || pt->group != g)
                continue;
            if (lrc && sweep_interrupted)
                continue; /* its read was interrupted: not run, the same command runs it */
            if (lrc) {    /* the trace refused: every point reading it fails with its message */
                rc = sweep_finish_point(sw, pt, rows, NULL, grp->load_error);
                continue;
            }
            int kept = sweep_keep_reusable(sw, pt, rows);
            if (kept) {
                rc = kept < 0 ? kept : 0;
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
            int src = start_point(sw, pt, trace, kids, &nkids, rows);
            if (src == 0)
                sw->started++;
            else if (src == -ENOMEM)
                rc = src;
            else if (src != -EINTR) {
                snprintf(err, sizeof err, "its process cannot start: %s", strerror(-src));
                rc = sweep_finish_point(sw, pt, rows, NULL, err);
            }
        }
        if (!sw->keep_traces && grp->loaded) { /* the children have their copies */
            if (grp->trace_path && !grp->load_rc)
                kvsim_trace_free(&grp->trace);
            free(grp->load_error);
            grp->load_error = NULL;
            grp->loaded = false;
        }
    }
    while (nkids) {
        int r = reap_one(sw, kids, &nkids, rows);
        if (r == -EINTR)
            continue;
        rc = rc ? rc : r;
        if (r == -ECHILD)
            break; /* cannot happen: every running child is counted */
    }
    free(kids);
    if (rc)
        fprintf(stderr, "%s: %s\n", sw->cmd, kvsim_strerror(rc));
    return rc;
}

/* mkdir -p dir/reports. Returns 0 or a negative errno. */
static int sweep_make_out_dirs(const char *out)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s/reports", out) >= (int)sizeof p)
        return -ENAMETOOLONG;
    return cli_make_dirs(p);
}

/* The option as messages spell it ("--config") if option name reads a file of its own (the
 * inputs an output must not overwrite), else NULL. */
static const char *sweep_option_reads_file(const char *name)
{
    static const char *const readers[] = {"--trace", "--config", "--engine-args",
                                          "--prefill-engine-args", "--decode-engine-args"};
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if (!strcmp(name, readers[i] + 2))
            return readers[i];
    return NULL;
}

/* Every file the sweep reads: the groups' traces, the spec, and each value of an option that
 * reads a file, given or swept, into in (room for 1 + groups + base options + grid values).
 * Returns how many. */
static size_t sweep_inputs(const struct sweep *sw, struct kvsim_input_path *in)
{
    size_t n = 0;
    if (sw->spec_path)
        in[n++] = (struct kvsim_input_path){"--spec", sw->spec_path, false};
    for (size_t g = 0; g < sw->ngroups; g++)
        if (sw->groups[g].trace_path)
            in[n++] = (struct kvsim_input_path){"the trace", sw->groups[g].trace_path, false};
    for (size_t i = 0; i < sw->nbase; i++) {
        const char *opt = sweep_option_reads_file(sw->base[i].name);
        if (opt)
            in[n++] = (struct kvsim_input_path){opt, sw->base[i].value, false};
    }
    for (size_t a = 0; a < sw->naxes; a++) {
        const char *opt = sweep_option_reads_file(sw->axes[a].name);
        for (size_t v = 0; opt && v < sw->axes[a].n; v++)
            in[n++] = (struct kvsim_input_path){opt, sw->axes[a].values[v], false};
    }
    return n;
}

int sweep_prepare_out(const struct sweep *sw, const char *const *files, size_t nfiles)
{
    const char *out = sw->out;
    if (!out || !*out) {
        fprintf(stderr, "%s: option --out: an empty directory name\n", sw->cmd);
        return -EINVAL;
    }
    /* The longest path formed in DIR: a report's temporary file, DIR/reports/.<id>.json.XXXXXX,
     * in buffers of 4096 bytes (and PATH_MAX). */
    size_t longest = strlen(out) + strlen("/reports/.") + 16 + strlen(".json.XXXXXX");
    for (size_t f = 0; f < nfiles; f++) {
        size_t len = strlen(out) + 2 + strlen(files[f]) + strlen(".XXXXXX");
        longest = len > longest ? len : longest;
    }
    if (longest >= 4096) {
        fprintf(stderr,
                "%s: option --out: '%.60s...' is too long: the paths formed in it would be %zu "
                "bytes (at most 4095)\n",
                sw->cmd, out, longest);
        return -ENAMETOOLONG;
    }
    int rc = sweep_make_out_dirs(out);
    if (rc) {
        fprintf(stderr, "%s: option --out: %s: cannot write there: %s\n", sw->cmd, out,
                kvsim_strerror(rc));
        return rc;
    }
    size_t cap = 1 + sw->ngroups + sw->nbase;
    for (size_t a = 0; a < sw->naxes; a++)
        cap += sw->axes[a].n;
    struct kvsim_input_path *in = malloc(cap * sizeof *in);
    if (!in) {
        fprintf(stderr, "%s: out of memory\n", sw->cmd);
        return -ENOMEM;
    }
    size_t nin = sweep_inputs(sw, in);
    char path[4096], err[2048];
    snprintf(path, sizeof path, "%s/reports", out);
    /* DIR/reports is the command's: an input inside it may be replaced by a point's report */
    struct kvsim_input_path reports = {"the reports' directory", path, true};
    for (size_t i = 0; i < nin && !rc; i++)
        if (in[i].path && strcmp(in[i].path, "-") &&
            kvsim_output_check_inputs(in[i].path, &reports, 1, err, sizeof err)) {
            fprintf(stderr,
                    "%s: option --out: %s (%s) is inside %s, where the command writes its "
                    "reports: move it, or give another --out\n",
                    sw->cmd, in[i].what, in[i].path, path);
            rc = -EINVAL;
        }
    for (size_t f = 0; f < nfiles && !rc; f++) {
        snprintf(path, sizeof path, "%s/%s", out, files[f]);
        rc = kvsim_output_check_inputs(path, in, nin, err, sizeof err);
        if (rc == 0)
            rc = kvsim_output_check(path, err, sizeof err);
        if (rc)
            fprintf(stderr, "%s: option --out: %s\n", sw->cmd, err);
    }
    free(in);
    return rc;
}

FILE *sweep_open_rows(const struct sweep *sw)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/rows.jsonl", sw->out);
    FILE *rows = fopen(path, "w");
    if (!rows)
        fprintf(stderr, "%s: %s: cannot open for writing: %s\n", sw->cmd, path, strerror(errno));
    return rows;
}

void sweep_note_inputs(struct sweep *sw)
{
    sw->version = kvsim_version();
    static const char *const file_options[] = {"profiles", "config", "engine-args",
                                               "prefill-engine-args", "decode-engine-args"};
    for (size_t k = 0; k < sizeof file_options / sizeof file_options[0]; k++) {
        for (size_t i = 0; i < sw->nbase; i++)
            sw->reads_other_files |= !strcmp(sw->base[i].name, file_options[k]);
        sw->reads_other_files |= sweep_axis_of(sw, file_options[k]) >= 0;
    }
}

/* ---- the command line's shared part ------------------------------------------------------- */

int sweep_getopt_table(const struct sweep *sw, struct option *opts, size_t cap,
                       const struct option *extra)
{
    size_t n = 0, nextra = 0;
    while (extra[nextra].name)
        nextra++;
    for (const struct option *x = cli_replay_options(); x->name; x++) {
        if (n + nextra + 1 >= cap) {
            fprintf(stderr, "%s: more replay options than its table holds (kvsim bug)\n", sw->cmd);
            return -EINVAL;
        }
        if (strcmp(x->name, "help"))
            opts[n++] = (struct option){x->name, x->has_arg, NULL, 1};
    }
    for (size_t i = 0; i <= nextra; i++)
        opts[n++] = extra[i];
    return 0;
}

int sweep_take_replay_option(struct cli_parser *p, struct sweep *sw)
{
    const char *name = p->long_name;
    if (!strcmp(name, "quiet")) {
        sw->quiet = true;
        return 0;
    }
    if (sweep_writes_a_file(name))
        return cli_error(p,
                         "option --%s: the %s writes its own files (--out DIR: rows.jsonl, "
                         "rows.csv, reports/<id>.json)",
                         name, sw->cmd + strlen("kvsim "));
    char err[1024];
    struct kvsim_options o; /* its value, checked now: the message names it */
    kvsim_options_default(&o);
    int rc = kvsim_options_set(&o, name, p->arg, err, sizeof err);
    kvsim_options_fini(&o);
    if (rc) {
        cli_error(p, "%s", err);
        return rc == -ENOMEM ? rc : -EINVAL; /* out of memory reading a file it names */
    }
    if (sweep_base_put(sw, name, p->arg, false))
        return cli_error(p, "out of memory");
    return 0;
}

int sweep_take_trace(struct cli_parser *p, struct sweep *sw, int argc, char **argv)
{
    if (cli_optind() >= argc)
        return 0;
    if (cli_optind() + 1 < argc)
        return cli_error(p, "unexpected argument '%s' (one trace at most)", argv[cli_optind() + 1]);
    for (size_t i = 0; i < sw->nbase; i++)
        if (!strcmp(sw->base[i].name, "trace"))
            return cli_error(p, "the trace is given twice: '%s' and --trace %s", argv[cli_optind()],
                             sw->base[i].value);
    if (sweep_base_put(sw, "trace", argv[cli_optind()], false))
        return cli_error(p, "out of memory");
    return 0;
}

int sweep_check_axes_vs_base(struct cli_parser *p, const struct sweep *sw)
{
    for (size_t a = 0; a < sw->naxes; a++)
        for (size_t i = 0; i < sw->nbase; i++) {
            char x[64], y[64];
            if (!strcmp(sweep_setting_key(sw->axes[a].name, x, sizeof x),
                        sweep_setting_key(sw->base[i].name, y, sizeof y)))
                return cli_error(p, "option --%s is %s (as --%s)", sw->axes[a].name, sw->axis_what,
                                 sw->base[i].name);
        }
    return 0;
}
