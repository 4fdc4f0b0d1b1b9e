/* bench_util.h - small helpers shared by the benchmark programs. */
#ifndef KVSIM_BENCH_UTIL_H
#define KVSIM_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>
#include <sys/types.h>

struct kvsim_latency;
struct kvsim_report;

/* Creates every missing directory of path's directory part (mkdir -p of dirname).
 * Returns 0 or a negative errno. */
int bench_make_parent_dirs(const char *path);

/* {"nproc", "allocator", "cpu_model", "os", "os_release", "arch"} for a benchmark's JSON.
 * Returns a new reference (NULL only if memory runs out). */
struct json_t;
struct json_t *bench_machine_json(void);

/* Writes root to path as JSON (2-space indent, sorted keys), creating missing directories.
 * Returns 0 or a negative errno. */
int bench_dump_json(struct json_t *root, const char *path);

/* bench_dump_json(), then "[\n]results written to PATH" on stdout (blank_line: the leading
 * newline), or "prog: cannot write PATH: ERROR" on stderr. Returns whether it was written. */
bool bench_write_results(const char *prog, struct json_t *root, const char *path, bool blank_line);

/* ---- time, memory, formatting ---------------------------------------------------------------- */

/* CLOCK_MONOTONIC in ns. */
int64_t bench_now_ns(void);

/* A struct timeval (e.g. rusage's ru_utime) in ns. */
int64_t bench_timeval_ns(struct timeval tv);

/* Peak RSS of this process (getrusage(RUSAGE_SELF) ru_maxrss: KiB on Linux), -1 on error. */
long bench_peak_rss_kib(void);

/* v rounded to a whole number (negative as 0) with thousands separators, "12,345,678", in buf;
 * returns buf. */
const char *bench_grouped(double v, char *buf, size_t len);

/* ---- a run in a child process ---------------------------------------------------------------- */

/* What the kernel measured of a child (wait4). */
struct bench_child_usage {
    int64_t utime_ns, stime_ns;
    long maxrss_kib;
};

/*
 * bench_run_forked - runs fn(arg, msg) in a forked child (its own peak RSS and CPU time), which
 * sends msg (msg_size bytes) back through a pipe; on return *msg holds it and *usage the child's
 * rusage. Returns true, or false with the reason in failure (pipe, fork or wait4 errors, a
 * signal, a non-zero exit, a short message).
 */
typedef void (*bench_child_fn)(const void *arg, void *msg);
bool bench_run_forked(bench_child_fn fn, const void *arg, void *msg, size_t msg_size,
                      struct bench_child_usage *usage, char *failure, size_t failure_len);

/* ---- the digest of a report ------------------------------------------------------------------ */

/* Fields appended one by one (no padding bytes) to a buffer, then hashed with XXH3-64. */
struct bench_digest {
    unsigned char b[8192];
    size_t n;
    bool overflow; /* a field did not fit: bench_digest_value() gives 0 */
};

void bench_digest_init(struct bench_digest *d);
void bench_dig_bytes(struct bench_digest *d, const void *p, size_t len);
void bench_dig_u64(struct bench_digest *d, uint64_t v);
void bench_dig_i64(struct bench_digest *d, int64_t v);
void bench_dig_f64(struct bench_digest *d, double v);
/* The length, then the bytes (NULL as the empty string). */
void bench_dig_str(struct bench_digest *d, const char *s);
void bench_dig_latency(struct bench_digest *d, const struct kvsim_latency *l);

/* Appends everything of struct kvsim_report except the "wall" fields (num_threads, wall_ns,
 * speed, wall_requests_per_s) and the offload section. */
void bench_dig_report(struct bench_digest *d, const struct kvsim_report *r);

/* XXH3-64 of the bytes appended so far; 0 after an overflow (never a truncated digest). */
uint64_t bench_digest_value(const struct bench_digest *d);

/* bench_digest_value() of a digest of bench_dig_report(r) alone. */
uint64_t bench_digest_report(const struct kvsim_report *r);

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

#endif /* KVSIM_BENCH_UTIL_H */
