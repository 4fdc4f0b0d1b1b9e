/*
 * sweep.h - the machinery `kvsim sweep` and `kvsim plan` share (runtime/cli/sweep.c): a set of
 * replay configurations ("points": a base of replay options and one value per axis), resolved
 * and identified up front, replayed in worker processes that each write the report a plain
 * `kvsim replay` writes, and turned into rows (DIR/rows.jsonl, DIR/rows.csv). Private to the
 * command line.
 *
 * Threads: everything here runs on the command's one thread, which forks a child per point; the
 * children share nothing with it but the loaded requests (copy on write) and their pipe.
 */
#ifndef KVSIM_CLI_SWEEP_H
#define KVSIM_CLI_SWEEP_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/cli/cli.h"
#include "runtime/input/input.h"

/* A set of more points than this is refused (each point is a process and a report file). */
#define SWEEP_MAX_POINTS      100000u
#define SWEEP_MAX_AXES        16
#define SWEEP_MAX_PARETO      8
/* The values a --spec may hold (every number, string, list and object; keys not counted),
 * counted as it is parsed: room for a grid of SWEEP_MAX_POINTS points and every option. */
#define SWEEP_SPEC_MAX_VALUES (2 * (size_t)SWEEP_MAX_POINTS)

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

/* POINT_IDLE: a valid point nobody asked for yet (plan's candidates); it has no row. */
enum point_state { POINT_PENDING, POINT_INVALID, POINT_OK, POINT_FAILED, POINT_IDLE };

/* What a point deploys: the GPUs are engines x tensor_parallel_size, the engines the ranks
 * of every deployment (num_engines x data_parallel_size) or the prefill + decode ones. */
struct sweep_topology {
    uint32_t deployments;        /* --engines (0 when disaggregated) */
    uint32_t data_parallel_size; /* ranks per deployment (1: none) */
    uint32_t prefill_engines, decode_engines;
    uint64_t engines; /* every engine (rank) */
    uint32_t tensor_parallel_size;
    uint64_t gpus; /* kvsim_replay_gpus */
};
struct sweep_point {
    size_t index; /* in grid order: the first axis varies slowest */
    char id[17];
    size_t group; /* its trace group */
    enum point_state state;
    bool reused; /* its report was already in DIR (not run again) */
    char *error; /* why it failed or is invalid (malloc'd) */
    json_t *row;
    struct sweep_topology topo; /* from its resolved configuration (not POINT_INVALID) */
};

/* Points that read the same requests: the same trace file and loading options. */
struct sweep_group {
    char *key;
    char *trace_path; /* NULL: each child draws the synthetic workload itself */
    struct kvsim_trace_opts opts;
    /* With keep_traces: the requests stay loaded between calls of sweep_run_points. */
    bool loaded;
    int load_rc;
    char *load_error;
    struct kvsim_trace trace;
};

struct sweep {
    const char *cmd;       /* "kvsim sweep", "kvsim plan": messages begin with it */
    const char *axis_what; /* "both in a --grid and outside it": an axis also given, for messages */
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
    const char *spec_path; /* --spec FILE, or NULL */
    uint32_t jobs;
    bool jobs_given; /* -j given (refused under MPI) */
    bool quiet;
    bool force;          /* rerun points whose report is already in DIR */
    bool keep_traces;    /* keep each group's requests loaded until sweep_free */
    bool own_failures;   /* the command reports failed and invalid points itself */
    uint64_t max_points; /* start at most this many points (0: no limit) */
    size_t done;         /* points ended so far */
    size_t nfailed;      /* of which failed or invalid */
    size_t trace_loads;  /* traces parsed (once per group) */
    bool trace_refused;  /* a trace its reader refused: bad input, the sweep exits 2 */
    /* The configuration reads files besides the trace (profiles, --config, engine arguments):
     * their content is in no report's digest, so no report is reused. */
    bool reads_other_files;
    bool progress;         /* a progress line on stderr (a terminal, not --quiet) */
    int64_t t0;            /* when the sweep started (base_monotonic_ns) */
    size_t started;        /* points started by this run */
    size_t reused;         /* points whose report was already in DIR */
    const char *version;   /* kvsim_version(): a report of another version is not reused */
    int mpi_ranks;         /* under mpirun: the ranks (0: not under MPI) */
    uint64_t mpi_bytes;    /* bytes rank 0 received and sent */
    int64_t mpi_serial_ns; /* rank 0's main thread making reports and rows of results */
    const char *sort;      /* the table's order (a metric) */
    char *pareto_text;     /* --pareto's list, split in place */
    const char *pareto[SWEEP_MAX_PARETO];
    size_t npareto;
};

/* 0, or the signal (SIGINT, SIGTERM, SIGHUP) that stopped the command while sweep_signals_begin's
 * handler was installed: the command exits 128 + it. */
extern volatile sig_atomic_t sweep_interrupted;
/* The handlers sweep_signals_begin replaced, for sweep_signals_end. */
struct sweep_signals {
    struct sigaction old_int, old_term, old_hup;
};
/* SIGINT, SIGTERM and SIGHUP set sweep_interrupted (no SA_RESTART: a wait for a child returns),
 * which stops handing out points and is passed on to the running children; a second one kills
 * the children's process groups and then the process at once. SIGCHLD default (an ignored one,
 * inherited, would leave no child to wait for). Main thread. */
void sweep_signals_begin(struct sweep_signals *saved);
void sweep_signals_end(const struct sweep_signals *saved);

/* ---- points ------------------------------------------------------------------------------- */

/* The value of axis a at point index i. */
const char *sweep_axis_value(const struct sweep *sw, size_t a, size_t index);
/* "engines=2 router=kv" for messages. */
void sweep_point_label(const struct sweep *sw, size_t index, char *buf, size_t len);
/* The options of point index: the base in order, --threads 1 unless given, then the axes'
 * values. Returns 0, or -EINVAL (-ENOMEM: memory ran out reading a file an option names) with
 * the message in err (o is then finished). */
int sweep_point_options(const struct sweep *sw, size_t index, struct kvsim_options *o, char *err,
                        size_t errlen);
/* Whether the replay option name writes a file (the sweep writes its own). */
bool sweep_writes_a_file(const char *name);
/* Appends a base option (name: canonical; value: borrowed, or malloc'd and owned by the sweep
 * when owned). Returns 0, -EINVAL (not an option) or -ENOMEM. */
int sweep_base_put(struct sweep *sw, const char *name, const char *value, bool owned);
/* Adds the axis `given` (an option's name, any spelling) with the n values vals, each checked
 * against the option table; where begins the messages. Returns 0 or -EINVAL (printed). */
int sweep_add_axis_values(struct cli_parser *p, struct sweep *sw, const char *given,
                          const char *const *vals, size_t n, const char *where);
/* What an option sets, whatever its spelling (no-enable-prefix-caching sets
 * enable-prefix-caching). */
const char *sweep_setting_key(const char *name, char *buf, size_t len);

/* The getopt table of kvsim replay's options (val 1, without --help) followed by extra (ended
 * by a NULL name), in opts of cap entries. Returns 0 or -EINVAL (printed: a kvsim bug). */
int sweep_getopt_table(const struct sweep *sw, struct option *opts, size_t cap,
                       const struct option *extra);
/* A replay option the parser returned (p->long_name, p->arg): --quiet, or a base option checked
 * now so that the message names it; one that writes a file is refused. Returns 0, -EINVAL, or
 * -ENOMEM: out of memory reading a file it names (--engine-args; printed, the command exits 1). */
int sweep_take_replay_option(struct cli_parser *p, struct sweep *sw);
/* After the options: the positional trace (at most one, not also --trace) and that no axis is
 * also a base option. Returns 0 or -EINVAL (printed). */
int sweep_take_trace(struct cli_parser *p, struct sweep *sw, int argc, char **argv);
int sweep_check_axes_vs_base(struct cli_parser *p, const struct sweep *sw);
/* --spec FILE: reads the grid's axes and base options of a spec into sw (sweep_cmd.c says what
 * a spec holds; tests/fuzz/fuzz_sweep_spec.c fuzzes it). Its values are counted as it is
 * parsed (at most SWEEP_SPEC_MAX_VALUES). Returns 0, -EINVAL (printed, naming the file and the
 * key) or -ENOMEM (printed: "--spec FILE: out of memory"). */
int sweep_read_spec(struct cli_parser *p, struct sweep *sw, const char *file);

/* Resolves every point (sw->npoints of them): its id, its group, or why it is invalid.
 * Returns 0, or -EINVAL when no point is valid, two points are one configuration, a trace
 * cannot be opened or standard input would be read twice (printed), -ENOMEM. */
int sweep_plan_points(struct sweep *sw);
/* Sets reads_other_files and version before running. */
void sweep_note_inputs(struct sweep *sw);
int sweep_cmp_ids(const void *a, const void *b);
void sweep_free(struct sweep *sw);

/* ---- rows and metrics --------------------------------------------------------------------- */

/* json_object_get along a dotted path ("requests.completed"); NULL when absent. */
json_t *sweep_json_at(const json_t *root, const char *path);
/* The rows' metric columns in order: the m-th, or NULL past the last. */
const char *sweep_row_column(size_t m);
/* Whether lower is better for a metric (a row column, or an option that is a cost); known
 * false when it has no natural direction. */
bool sweep_metric_lower(const char *name, bool *known);
/* The axis named name (any spelling), or -1. */
long sweep_axis_of(const struct sweep *sw, const char *name);
/* A metric's value at a point that ran (an axis's value or a row column; NaN when missing). */
double sweep_metric_value(const struct sweep *sw, const struct sweep_point *pt, const char *name);
/* The shortest decimal text that reads back as x, with jansson's exponent form. */
void sweep_real_text(double x, char *buf, size_t len);
/* A row as one JSON line with its line end (malloc'd), or NULL: out of memory. */
char *sweep_row_text(const json_t *row);
/* Writes rows.jsonl and rows.csv, sorted by id (invalid points last, in grid order). Returns 0
 * or a negative errno (printed). */
int sweep_write_rows(const struct sweep *sw);
/* The points that ran (state OK), in id order. *n set; NULL when out of memory. */
struct sweep_point **sweep_points_that_ran(const struct sweep *sw, size_t *n);

/* ---- plots -------------------------------------------------------------------------------- */

/* A number for labels and tables: 4 significant digits ("-": missing). */
void sweep_short_number(double x, char *buf, size_t len);
/* XML text (escapes <, >, &). */
void sweep_xml_text(FILE *f, const char *s);
/* A plot's frame: where the data go and which values the axes span (log_x: lo[0] and hi[0]
 * are log10 of the values, and the x ticks are labelled with the values). */
struct sweep_plot {
    double lo[2], hi[2];
    double left, top, width, height;
    bool log_x;
};
double sweep_plot_x(const struct sweep_plot *p, double v);
double sweep_plot_y(const struct sweep_plot *p, double v);
/* The axes, five ticks each, and their titles (full_h: the picture's height). */
void sweep_svg_axes(FILE *f, const struct sweep_plot *p, double full_h, const char *x_title,
                    const char *y_title);

/* ---- running ------------------------------------------------------------------------------ */

/* Ends point pt: its state (POINT_OK with its report, else POINT_FAILED or POINT_INVALID with
 * why), its row, appended to rows, and its line. Returns 0 or -ENOMEM. */
int sweep_finish_point(struct sweep *sw, struct sweep_point *pt, FILE *rows, const json_t *report,
                       const char *why);
/* Loads group g's requests unless loaded (they stay until sweep_run_points ends, or until
 * sweep_free with keep_traces). Returns 0 (also for the synthetic workload: nothing to load),
 * or the loader's negative errno with its message in the group's load_error (-ENOMEM with no
 * message: out of memory). */
int sweep_group_load(struct sweep *sw, size_t g);
/* Replays point pt in this process with the requests trace (NULL: the point loads its trace or
 * draws the synthetic workload) and returns its report as JSON text (*text, malloc'd; the text
 * kvsim_report_write_json writes). Returns 0, -EINTR when SIGINT cut it short (no report), or
 * a negative errno with the message in err. Any thread; no shared state but sweep_interrupted. */
int sweep_replay_point(const struct sweep *sw, const struct sweep_point *pt,
                       const struct kvsim_trace *trace, char **text, char *err, size_t errlen);
/* Ends point pt with the report already in DIR when a rerun keeps it: a regular file (opened
 * without blocking), of this kvsim version, recording the point's configuration (run.config),
 * of the same trace bytes (its group's, loaded), ended by its own bounds, and with sane figures
 * (counts, latencies, rates, percentages). A report there that is not kept is said on stderr
 * (the file and why); one that is not a regular file (a FIFO, a link) is removed, so that the
 * point's new report replaces it. Returns 1 (kept: the point has its row), 0 (run it) or
 * -ENOMEM. */
int sweep_keep_reusable(struct sweep *sw, struct sweep_point *pt, FILE *rows);
/* The topology of point index (resolved once, by sweep_plan_points). Returns 0, or -EINVAL when
 * it is not a valid configuration. */
int sweep_point_topology(const struct sweep *sw, size_t index, struct sweep_topology *out);
/* Ends point pt after its replay: ran (its report is in DIR/reports/<id>.json, read back for
 * the row) or failed (why). Returns 0 or -ENOMEM. */
int sweep_point_ended(struct sweep *sw, struct sweep_point *pt, FILE *rows, bool ran,
                      const char *why);
/* Runs every POINT_PENDING point, group by group, at most sw->jobs at a time, keeping the
 * reports a rerun may keep; stops handing out points after sw->max_points or on SIGINT.
 * Returns 0 or -ENOMEM (printed). */
int sweep_run_points(struct sweep *sw, FILE *rows);
/*
 * sweep_prepare_out - before any point runs: --out is non-empty and short enough for every path
 * the command forms in it (DIR/reports/<id>.json and the temporary file beside it), DIR and
 * DIR/reports are made, each of the command's own files (names relative to DIR: "rows.jsonl",
 * "rows.csv", ...) can be written and is none of the inputs (a trace, the --spec, a --config or
 * --engine-args file, given or swept), and no input lies inside DIR/reports, which the command
 * owns. Main thread. Returns 0, or a negative errno with the refusal printed ("<cmd>: option
 * --out: ...").
 */
int sweep_prepare_out(const struct sweep *sw, const char *const *files, size_t nfiles);
/* Opens DIR/rows.jsonl for writing (NULL: printed). */
FILE *sweep_open_rows(const struct sweep *sw);

/* ---- MPI (sweep_mpi.c: in the kvsim executable when built with Open MPI, KVSIM_HAVE_MPI) ---- */

/* The rank a launcher's variable in the environment names (OMPI_COMM_WORLD_RANK, PMIX_RANK,
 * PMI_RANK), or -1: none. Only a hint that mpirun or srun may have started this process (the
 * variable may be left over from something else): sweep_mpi_init's count of ranks decides. */
int sweep_mpi_env_rank(void);
/* "Open MPI v4.1.4": the MPI library kvsim was built with. */
const char *sweep_mpi_library(void);
/* MPI_Init_thread (MPI_THREAD_FUNNELED), this rank and the number of ranks. Returns 0, or
 * -ENOTSUP (printed by rank 0; MPI already finalized). */
int sweep_mpi_init(const struct sweep *sw, int *rank, int *ranks);
/* Rank 0, every other rank asking: keeps the reports a rerun may keep, hands out the other
 * pending points (the most expensive first) and replays its share on a second thread; every
 * result becomes a report and a row as it arrives. rows NULL: runs nothing and tells every rank
 * to stop (after an error on rank 0). Returns 0 or -ENOMEM (the job is then aborted). */
int sweep_mpi_coordinate(struct sweep *sw, FILE *rows, int ranks);
/* Ranks other than 0: replay the points rank 0 hands out until it says stop. */
void sweep_mpi_serve(struct sweep *sw);
void sweep_mpi_fini(void);

#endif
