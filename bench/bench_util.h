/* bench_util.h - small helpers shared by the benchmark programs. */
#ifndef KVSIM_BENCH_UTIL_H
#define KVSIM_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/api/api.h" /* kvsim_replay_config_default */
#include "runtime/runtime.h"

/* Creates every missing directory of path's directory part (mkdir -p of dirname).
 * Returns 0 or a negative errno. */
int bench_make_parent_dirs(const char *path);

/* {"nproc", "allocator", "cpu_model", "os", "os_release", "arch"} for a benchmark's JSON.
 * Returns a new reference (NULL only if memory runs out). */
struct json_t;
struct json_t *bench_machine_json(void);

/* {"benchmark": name, "version", "date", "machine": bench_machine_json()}: the head of every
 * benchmark's JSON. Returns a new reference. */
struct json_t *bench_json_root(const char *name, const char *date);

/* Writes root to path as JSON (2-space indent, sorted keys), creating missing directories.
 * Returns 0 or a negative errno. */
int bench_dump_json(struct json_t *root, const char *path);

/* bench_dump_json(), then "[\n]results written to PATH" on stdout (blank_line: the leading
 * newline), or "prog: cannot write PATH: ERROR" on stderr. Returns whether it was written. */
bool bench_write_results(const char *prog, struct json_t *root, const char *path, bool blank_line);

/* ---- time, memory, formatting ---------------------------------------------------------------- */

/* CLOCK_MONOTONIC in ns. */
int64_t bench_now_ns(void);

/* The current UTC time as "2025-01-31T12:00:00Z" in buf ("" if it cannot be converted). */
void bench_utc_date(char *buf, size_t len);

/* Peak RSS of this process (getrusage(RUSAGE_SELF) ru_maxrss: KiB on Linux), -1 on error. */
long bench_peak_rss_kib(void);

/* calloc(n, size) (n == 0 as 1) that does not return NULL: "prog: out of memory", exit(1). */
void *bench_xcalloc(const char *prog, size_t n, size_t size);

/* v rounded to a whole number (negative as 0) with thousands separators, "12,345,678", in buf;
 * returns buf. */
const char *bench_grouped(double v, char *buf, size_t len);

/* A line of width dashes (at most 160) on stdout: the rule under a table's header. */
void bench_print_rule(int width);

/*
 * bench_target - one row of a targets table: what, the measured figure (have false: not
 * measured), the goal as "<= g" or ">= g" (at_most) in unit, and whether it is met; recorded
 * in targets (a JSON object) under key as {measured, goal, comparison, unit, met}. Returns
 * whether it is met (false when not measured).
 */
bool bench_target(struct json_t *targets, const char *key, const char *what, bool have,
                  double measured, bool at_most, double goal, const char *unit);

/* ---- deterministic workloads ----------------------------------------------------------------- */

/* The splitmix64 finaliser of x + 0x9e3779b97f4a7c15. Seeds and pinned figures depend on it. */
uint64_t bench_splitmix64(uint64_t x);

/* The benchmarks' PRNG stream: each draw adds 0x9e3779b97f4a7c15 to s, then returns
 * bench_splitmix64(s) (which adds it once more: the generated workloads are pinned). */
struct bench_rng {
    uint64_t s;
};

uint64_t bench_rng_next(struct bench_rng *r);

/* Uniform in [lo, hi] (the modulo bias is irrelevant here). */
uint32_t bench_rng_range(struct bench_rng *r, uint32_t lo, uint32_t hi);

/* ---- best-of-3 figures (bench_kvpool, bench_settle) ------------------------------------------ */

#define BENCH_REPS 3

/* One measured throughput: work units per second, best of BENCH_REPS repetitions. */
struct bench_figure {
    const char *key;   /* JSON key */
    const char *label; /* table label */
    const char *unit;  /* of the value, e.g. "blocks/s" */
    const char *what;  /* one-line description (JSON) */
    double value[BENCH_REPS];
    double seconds[BENCH_REPS];
    uint64_t work[BENCH_REPS];
    double best;
};

void bench_fig_init(struct bench_figure *f, const char *key, const char *label, const char *unit,
                    const char *what);

/* Repetition rep did work units in ns nanoseconds. */
void bench_fig_record(struct bench_figure *f, int rep, uint64_t work, uint64_t ns);

/* {"value" (the best), "unit", "statistic", "description", "repetitions", "seconds", "work"} */
struct json_t *bench_fig_json(const struct bench_figure *f);

/* ---- command-line pieces ---------------------------------------------------------------------
 * Each prints "prog: ..." to stderr and returns 2 (the usage-error exit status) on an error,
 * else returns 0. */

/* A path option (opt e.g. "--json"): arg must not be empty; stores it in *out. */
int bench_opt_path(const char *prog, const char *opt, const char *arg, const char **out);

/* --reps: a whole number from 1 to max. */
int bench_opt_reps(const char *prog, const char *arg, unsigned max, unsigned *out);

/* A 64-bit unsigned option (opt e.g. "--seed"; strtoull base 0: decimal, 0x..., 0...). */
int bench_opt_u64(const char *prog, const char *opt, const char *arg, uint64_t *out);

/* getopt_long() returned an unknown option or a missing argument: "prog: try --help". */
int bench_opt_bad(const char *prog);

/* After the getopt_long() loop: 0 if no operand is left, else "unexpected argument". */
int bench_opt_no_operands(const char *prog, int argc, char **argv);

/* ---- trace replays in child processes (bench_replay, bench_offload) ---------------------------
 * Every configuration is replayed --reps times, each time in a forked child that sends back a
 * struct bench_msg; a configuration's figures are those of its fastest repetition. */

#define BENCH_QUICK_MAX_REQUESTS 1000u /* --quick: the first requests of the trace */

struct bench_trace_opts {
    const char *trace_path;
    const char *json_path;
    unsigned reps;
    bool quick;
};

/* Parses --trace FILE, --json FILE, --reps N (1..max_reps), --quick and -h/--help, checks that
 * the trace is readable and prints the first lines ("prog: VERSION, allocator, CPUs, run,
 * repetitions", "trace PATH"). Returns -1 to go on, else the exit status: 0 after usage(stdout)
 * for --help, 2 after reporting a usage error or an unreadable trace. */
int bench_trace_start(int argc, char **argv, const char *prog, const char *default_trace,
                      const char *default_json, unsigned max_reps, void (*usage)(FILE *),
                      struct bench_trace_opts *o);

/* kvsim_replay_config_default() with o's trace (and --quick's request limit), quiet. */
void bench_trace_replay_config(const struct bench_trace_opts *o, struct kvsim_replay_config *cfg);

/* {"path", "max_requests" (0: all), "resolved_path" (if realpath() resolves it)} */
struct json_t *bench_trace_json(const struct bench_trace_opts *o);

/* What a child sends back (a plain struct through a pipe: same binary on both ends). */
struct bench_msg {
    int32_t rc; /* 0, or the negative errno of the replay */
    int64_t wall_ns;
    int64_t report_wall_ns;
    int64_t duration_ns; /* simulated: first arrival to last completion */
    uint64_t num_requests, completed, rejected, incomplete, preemptions;
    uint64_t input_tokens, output_tokens, cached_tokens;
    double prefix_cache_reuse;
    struct kvsim_latency ttft; /* ns */
    struct kvsim_offload_summary offload;
    uint64_t epochs, handoffs; /* a disaggregated replay's (0 otherwise) */
    uint64_t steps;            /* engine steps over all engines */
    uint64_t peak_in_flight;   /* the report's: the most requests in flight at once */
    uint64_t trace_bytes;      /* a copies run's: the caller's copy of the trace, in bytes */
    uint64_t digest;
    struct kvsim_thread_accounting acct; /* the report's (KVSIM_REPLAY_ACCOUNTING=1), or off */
    char err[256];
};

/* In the child: times kvsim_replay_run(cfg) (trace loading included) and copies the report's
 * figures into msg, with an XXH3 digest of every field that depends neither on the wall clock
 * nor on the thread count (the offload section too if with_offload; the disaggregated section
 * of a disaggregated replay). */
void bench_replay_child(const struct kvsim_replay_config *cfg, bool with_offload,
                        struct bench_msg *msg);

/* One repetition of one configuration, as the parent sees it. */
struct bench_rep {
    bool ok;
    struct bench_msg msg;
    int64_t utime_ns, stime_ns;
    long maxrss_kib;
    char failure[320];
};

/* All repetitions of one configuration. */
struct bench_config {
    char label[64];
    uint32_t threads; /* of the replay; 0 for a run that is not one (printed as 1 thread) */
    struct bench_rep *reps;
    unsigned num_reps;
    int best; /* index of the fastest successful repetition, -1 if none */
    bool ok;  /* every repetition succeeded */
    bool reps_identical;
};

/* A benchmark's configurations and how to run them. */
struct bench_suite {
    const char *prog; /* also the JSON's "benchmark" */
    const struct bench_trace_opts *opts;
    int label_width;  /* of the label in the progress lines */
    bool need_digest; /* a zero digest (overflow) fails the repetition */
    bool json_rate;   /* the figures' JSON has requests_per_wall_s */
    const void *ctx;  /* for describe() and child() */
    /* Sets configs[i].label and .threads. */
    void (*describe)(const void *ctx, size_t i, struct bench_config *c);
    /* Runs configuration i in the child. */
    void (*child)(const void *ctx, size_t i, struct bench_msg *msg);
    /* Adds the simulated results of a successful repetition to its JSON object. */
    void (*msg_json)(struct json_t *rep, const struct bench_msg *m);
    size_t num_configs;
    struct bench_config *configs; /* num_configs of them, filled by bench_suite_run() */
    long parent_rss_kib;          /* the parent's peak RSS before the first fork */
    char date[32];                /* UTC, when bench_suite_run() started */
};

/* Runs every configuration opts->reps times, configurations interleaved within a repetition, a
 * progress line per run on stderr. Exits(1) if memory runs out. Returns whether every run
 * succeeded. */
bool bench_suite_run(struct bench_suite *s);

/* Ends the suite: root's "identical" and "ok" (all_ok && identical), root written to
 * opts->json_path, then freed with the repetitions; "prog: FAILED (results differ between
 * DIFFER)" on stderr unless ok. Returns the exit status, 0 or 1. */
int bench_suite_finish(struct bench_suite *s, struct json_t *root, bool all_ok, bool identical,
                       const char *differ);

/* The fastest successful repetition of c, or NULL (also for c == NULL). */
const struct bench_rep *bench_best(const struct bench_config *c);

/* The figures of one repetition. */
struct bench_figures {
    double wall_s;
    double cpu_s;              /* user + system, all threads of the child */
    double cpu_ns_per_out_tok; /* cpu / output tokens of completed requests */
    double peak_rss_mib;
    double speed;          /* simulated s per wall s */
    double req_per_wall_s; /* completed (none: loaded) requests per wall s */
};

struct bench_figures bench_figures_of(const struct bench_rep *r);

/* Adds "digest_xxh3", the request and token counts and "simulated_s" of m to j. */
void bench_msg_json_add(struct json_t *j, const struct bench_msg *m);

/* The JSON of configuration i without its settings: "ok", "repetitions_identical",
 * "best_repetition", "best" (figures) and "repetitions". Returns a new reference. */
struct json_t *bench_config_json(const struct bench_suite *s, size_t i);

/* The JSON head (bench_json_root() of s->date) with machine.parent_peak_rss_kib_at_first_fork. */
struct json_t *bench_suite_json_root(const struct bench_suite *s);

#endif /* KVSIM_BENCH_UTIL_H */
