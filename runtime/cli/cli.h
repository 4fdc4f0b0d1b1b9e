/*
 * cli.h - the kvsim command line: the subcommands' entry points and the one option parser they
 * all use (cli/options.c).
 *
 * Every subcommand parses its options with cli_next() over a getopt_long table and reads each
 * value with one of the strict readers below, so that every option of every subcommand accepts
 * the same spellings and rejects bad ones with the same message shape:
 *     <prog>: option --<name>: '<value>' is not an integer in [<min>, <max>]
 *     <prog>: option --<name> needs a value
 *     <prog>: unknown option '--<name>'
 * and exit status 2. Exit codes are decided here only (cli/), never below: 0 success, 1 the run
 * failed (a violation, a failing scenario, a runtime error), 2 a usage error or bad input.
 *
 * Threads: the command line runs on the main thread; the parser is not reentrant (getopt_long
 * keeps global state).
 */
#ifndef KVSIM_CLI_H
#define KVSIM_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/api/api.h"
#include "runtime/runtime.h"

/* Exit statuses of every subcommand (docs/robustness.md, "Exit statuses"). */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILED = 1, CLI_EXIT_USAGE = 2, CLI_EXIT_INTERRUPTED = 130 };

/*
 * cli_status_of - the exit status of a run that returned rc (a negative errno), the one rule of
 * replay, validate and calibrate: CLI_EXIT_USAGE when the input was refused (-EINVAL: a file or
 * value refused, naming it; -EOVERFLOW: a value past the clock) or a path given cannot be used
 * (-ENOENT, -EISDIR, -ENOTDIR, -EACCES, -EPERM, -ENAMETOOLONG, -ELOOP); CLI_EXIT_FAILED for the
 * rest (a scheduler dead end, a broken invariant, out of memory, an I/O error, a full disk);
 * CLI_EXIT_OK for 0.
 */
int cli_status_of(int rc);

/* mkdir -p dir: 0 when dir is (now) a directory this process may write into, or a negative
 * errno (-ENOTDIR: a part of it is a file). */
int cli_make_dirs(const char *dir);

/* The exit-status paragraph every subcommand's help ends with. */
#define CLI_EXIT_HELP                                                                              \
    "Exit status: 0 success; 1 the run failed (a scheduler dead end or a broken\n"                 \
    "invariant, out of memory, an output that could not be written after the work);\n"             \
    "2 usage error or bad input (an option; a file refused, naming its line and\n"                 \
    "field; a path that cannot be read; an output that cannot be written, checked\n"               \
    "before the work). docs/robustness.md has the table of every command.\n"

/* ---- the option parser ---------------------------------------------------------------------- */

struct cli_parser {
    const char *prog; /* message prefix, e.g. "kvsim replay" */
    int argc;
    char **argv;
    const struct option *opts;
    const char *shortopts;
    /* the option cli_next returned last */
    char name[64];         /* "--name" (or "-x"), for messages */
    const char *long_name; /* "name" from opts (static storage), or NULL for a short option */
    const char *arg;       /* its value (NULL for a flag) */
};

/*
 * cli_begin - start parsing argv[1..argc) (argv[0] is the subcommand's name) with the long
 * options opts (terminated by a zero entry) and the short options shortopts (getopt syntax,
 * without the leading ':' or '+', which cli_begin adds: a missing value is reported by name and
 * the parse stops at the first positional argument only if shortopts starts with '+').
 */
void cli_begin(struct cli_parser *p, const char *prog, int argc, char **argv,
               const struct option *opts, const char *shortopts);
/*
 * cli_next - the next option: returns its `val` (> 0), 0 when the options are over (the
 * positional arguments are then argv[cli_optind() ..)), or -EINVAL after printing the message
 * for an unknown option or a missing value.
 */
int cli_next(struct cli_parser *p);
/* Index of the first positional argument once cli_next returned 0. */
int cli_optind(void);

/*
 * Strict readers of the current option's value. Each returns 0 and stores the value, or prints
 * "<prog>: option <name>: '<value>' is not ..." (stating the accepted range) and returns -EINVAL
 * with *out unchanged. Integers are decimal digits only (no sign, no spaces, no hex); numbers
 * are finite decimal numbers (no spaces, no hex, no inf or nan).
 */
int cli_u64(struct cli_parser *p, uint64_t min, uint64_t max, uint64_t *out);
int cli_u32(struct cli_parser *p, uint32_t min, uint32_t max, uint32_t *out);
/* A number in [min, max], or (min, max] when min_open. */
int cli_double(struct cli_parser *p, double min, bool min_open, double max, double *out);
/* One of names[0..n) (the message lists them): stores its index. */
int cli_choice(struct cli_parser *p, const char *const *names, int n, int *out);

/* Prints "<prog>: <message>\n" on stderr and returns -EINVAL. */
int cli_error(const struct cli_parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- subcommands (argv[0] is the subcommand's name; each returns its exit status) ------------ */

/* The step model and KV capacity options (timing.c): a profile (--profiles --hardware --model
 * --tp, the all-reduce link), and capacity from the model and the GPU (--gpu-memory-gib,
 * --gpu-memory-utilization) unless --num-gpu-blocks was given. */
struct cli_timing {
    struct kvsim_timing_opts o; /* what the options say */
    struct kvsim_timing r;      /* the profile (owned) and capacity cli_timing_apply found */
};
void cli_timing_default(struct cli_timing *t);
/* Sets the option p names (p->long_name: --profiles, --hardware, --num-gpu-blocks, ...: those
 * `kvsim validate` and `kvsim calibrate` share with `kvsim replay`) through the option table of
 * api/config.c, with its range and message: a timing option into t, a block count into *blocks.
 * Returns 0 or -EINVAL (reported). */
int cli_table_set(struct cli_parser *p, struct cli_timing *t, uint32_t *blocks);
/* Loads the profile into m and derives the capacity into sc and *kv_bytes_per_token (NULL: not
 * set), as kvsim_timing_resolve. Returns 0 or -EINVAL (reported, naming the option and the
 * file). */
int cli_timing_apply(const struct cli_parser *p, struct cli_timing *t, struct sched_config *sc,
                     struct kvsim_step_model *m, uint64_t *kv_bytes_per_token);
void cli_timing_fini(struct cli_timing *t);

int cli_replay_main(int argc, char **argv);
/* `kvsim replay`'s getopt table (every option of the option table, api/config.c, by its long
 * name, and "help"); `kvsim sweep` takes the same options. */
const struct option *cli_replay_options(void);
int cli_sweep_main(int argc, char **argv);
int cli_plan_main(int argc, char **argv);
int cli_validate_main(int argc, char **argv);
int cli_calibrate_main(int argc, char **argv);
int cli_conform_main(int argc, char **argv);
int cli_soak_main(int argc, char **argv);
int cli_minimize_main(int argc, char **argv);
int cli_stress_main(int argc, char **argv);
int cli_pool_demo_main(int argc, char **argv);

/*
 * cli_stress - the stress command line shared by `kvsim stress` (parts: both) and the
 * stress_offload / stress_registry executables (one part each). parts is a KVSIM_STRESS_* mask
 * (verify.h). Returns the exit status.
 */
int cli_stress(const char *prog, int parts, int argc, char **argv);

#endif /* KVSIM_CLI_H */
