/*
 * fidelity.h - what `kvsim validate` and `kvsim calibrate` share (fidelity.c; private to cli/):
 * a recorded vLLM run (RUN_DIR/requests.jsonl, meta.json, config.json; docs/fidelity/timing.md)
 * as a one-engine replay with the run's own engine arguments, and the Diff% rows (TTFT, TPOT,
 * E2E: mean, p50, p90, p95, p99; output tokens/s; requests/s) over a range of its requests.
 * Main thread only.
 */
#ifndef KVSIM_CLI_FIDELITY_H
#define KVSIM_CLI_FIDELITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "runtime/cli/cli.h"

#define FID_NUM_ROWS 17
extern const char *const fid_row_names[FID_NUM_ROWS];

/* One request: queued (or arrival), first and last token instants (ms), output tokens. */
struct fid_req {
    double start, first, last, out;
    size_t line; /* in its file */
};
/* Requests in arrival order (ties in file order): the same order for the run and a replay. */
struct fid_side {
    struct fid_req *r;
    size_t n, cap;
};
void fid_side_free(struct fid_side *s);

struct fid_opts {
    const char *config_path;   /* a polynomial (alone) or a speedup_ratio (with --profiles) */
    uint32_t blocks;           /* --num-gpu-blocks, or 0 */
    const char *requests_path; /* where a replay writes its records (NULL: a temporary file) */
    bool polynomial_default;   /* neither --config nor --profiles: the default polynomial */
};
struct fid_run {
    char dir[1024], trace[1100], model[128];
    char scheduling[96];            /* async or sync, and why */
    struct kvsim_replay_config cfg; /* one engine, the run's arguments, cfg.model the chosen one */
    struct fid_side real;
    char records[1100];
    bool records_temporary;
};
/* Reads RUN_DIR and applies the timing options (t: its profile is loaded into run->cfg.model).
 * A value of config.json or meta.json present is used or refused, never replaced by a default;
 * the run's rows over all its requests go through fid_check_real. Returns 0 or a negative errno
 * (reported, naming the file and the field). */
int fid_open(struct cli_parser *p, const char *dir, const struct fid_opts *o, struct cli_timing *t,
             struct fid_run *run);
/* Replays the run timed by m into *sim (and the report into *rep, if not NULL: the caller
 * kvsim_report_fini()s it). Returns 0 or a negative errno (reported). */
int fid_replay(struct cli_parser *p, struct fid_run *run, const struct kvsim_step_model *m,
               struct fid_side *sim, struct kvsim_report *rep);
void fid_close(struct fid_run *run);
/* Before the work: refuses (reported, "option --NAME: ...") an output path that is one of what
 * the command reads (a file of the run directory dir or anything inside it, the --config file,
 * the profiles' root) or that cannot be written. NULL: nothing to check. Returns 0 or a negative
 * errno. */
int fid_check_output(struct cli_parser *p, const char *dir, const struct fid_opts *o,
                     const struct cli_timing *t, const char *option, const char *path);

/* The rows of requests [lo, hi) of s into out. Returns 0 or -ENOMEM. */
int fid_rows(const struct fid_side *s, size_t lo, size_t hi, double out[FID_NUM_ROWS]);
/* Refuses the run's requests [lo, hi) (over: how the message names them, or NULL for all; fitted:
 * calibrate fits them, else they are compared) when one of their rows is 0, negative or not
 * finite: a broken recording, which a Diff% against it would hide (+0.0 %) and a fit would chase.
 * Returns 0, -EINVAL (reported, naming requests.jsonl, the row, and the first line holding such a
 * zero) or -ENOMEM (reported). */
int fid_check_real(const struct cli_parser *p, const struct fid_run *run, size_t lo, size_t hi,
                   const char *over, bool fitted);
/* (sim / real - 1) in percent (0 when real is 0). */
double fid_diff_pct(double real, double sim);
/* Prints the rows side by side with their Diff% (f NULL: prints nothing); returns the worst
 * |Diff%|. */
double fid_print(FILE *f, const double *real, const double *sim);

#endif /* KVSIM_CLI_FIDELITY_H */
