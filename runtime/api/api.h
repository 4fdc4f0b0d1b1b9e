/*
 * api.h - the options of a run, by name (runtime/api/config.c): the one reader of `kvsim
 * replay`'s options, used by the command line (cli/replay_cmd.c, cli/timing.c) and by the
 * public API's kvsim_config_t (kvsim.h). Not installed: internal to kvsim.
 *
 * An option set is plain data owned by one thread at a time; nothing here has global state.
 * Errors are negative errno values with a one-line message in the caller's buffer, worded as
 * the command line prints them after "kvsim replay: ".
 */
#ifndef KVSIM_API_H
#define KVSIM_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/kvsim.h"
#include "runtime/replay/replay.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * kvsim_replay_config_default - the defaults of every option of a run (`kvsim replay`, the C API,
 * sweep and plan): the option layer's one place for them; each option's help ends with its
 * default in parentheses, which a test checks against this (options/every_help_default_is_the_
 * default). 4 engines, kv router, 16-token blocks, a KV capacity of 262,144 tokens per engine
 * (kvsim_default_kv_blocks), max_num_seqs 256, max_num_batched_tokens 8192, prefix caching and
 * chunked prefill on, one thread per CPU; a 1 s time series interval; disaggregated serving off
 * (when turned on: kv routers, 25 GB/s links with 1 ms a transfer, a 480 s abort timeout as
 * VLLM_NIXL_ABORT_REQUEST_TIMEOUT).
 */
void kvsim_replay_config_default(struct kvsim_replay_config *c);

/* Where the step model's timing and the KV capacity come from (--profiles ... --gpu-memory-*). */
struct kvsim_timing_opts {
    const char *profiles, *hardware, *model; /* ROOT, HW, ORG/NAME */
    uint32_t tp;
    double tp_link_gbps, tp_link_latency_us;
    double gpu_memory_gib; /* 0: capacity from num_gpu_blocks */
    double gpu_memory_utilization;
    bool blocks_given, kv_bytes_given; /* --num-gpu-blocks / --kv-bytes-per-token win */
    bool enable_expert_parallel;       /* a MoE model's experts split over tp x dp ranks */
    uint32_t data_parallel_size;       /* the replay's (set by kvsim_options_resolve) */
    /* How a refusal names where the model, expert parallelism and the GPU's memory came from
     * when not from their options (NULL: --model, --enable-expert-parallel, --gpu-memory-gib):
     * a recorded run's file and key ("RUN/meta.json: key 'model'"). */
    const char *model_from, *expert_parallel_from, *gpu_memory_from;
};
/* Fills t with the defaults (tp 1, a 16 GiB/s 20 us link, utilization 0.9, no profile). */
void kvsim_timing_opts_default(struct kvsim_timing_opts *t);

/* What kvsim_timing_resolve found: the profile (owned: kvsim_timing_fini) and the capacity. */
struct kvsim_timing {
    struct kvsim_profile *profile;      /* NULL: no --hardware */
    struct kvsim_gpu_capacity capacity; /* num_gpu_blocks 0: not derived */
};
/*
 * kvsim_timing_resolve - load the model and its profile and derive the capacity: sets
 * m->profile, sc->num_blocks (unless blocks_given) and *kv_bytes_per_token (if not NULL and
 * unless kv_bytes_given). Returns 0, or -EINVAL with the message (an option missing its
 * companions, a file that cannot be read, a capacity that does not fit). On error *out holds
 * nothing to free.
 */
int kvsim_timing_resolve(const struct kvsim_timing_opts *t, struct sched_config *sc,
                         struct kvsim_step_model *m, uint64_t *kv_bytes_per_token,
                         struct kvsim_timing *out, char *err, size_t errlen);
void kvsim_timing_fini(struct kvsim_timing *t);

struct kvsim_run;

/* Every option of a run, as set. Strings are borrowed (kvsim_config_t keeps copies). */
/* More than the option table has ids (a static assertion in config.c keeps it so). */
#define KVSIM_OPTIONS_MAX_IDS 128

struct kvsim_options {
    struct kvsim_replay_config replay;
    struct kvsim_timing_opts timing;
    const char *config_path;     /* --config: the step model's JSON, or a whole run configuration */
    struct json_t *config_doc;   /* the run configurations read (their options' strings), or NULL */
    const char *config_out_path; /* --config-out */
    const char *prefill_args, *decode_args; /* --*-engine-args files */
    const char *offload_opt;                /* an offload option that needs --g2-blocks, or NULL */
    const char *disagg_opt; /* a disaggregation option that needs --prefill-engines, or NULL */
    const char *synth_opt;  /* a synthetic workload option (refused with a trace), or NULL */
    bool engines_given;
    bool kv_events; /* an API engine keeps its KV events */
    /* Which options were set, by table row: the name as given (an alias stays an alias) and the
     * --config file that set it (NULL: the command line or the API). Resolve refuses an option
     * that would do nothing in the run's mode (kvsim_options_resolve). */
    const char *given[KVSIM_OPTIONS_MAX_IDS];
    const char *given_from[KVSIM_OPTIONS_MAX_IDS];
    const char *setting_from; /* the --config file being read, while it is */
    /* The --config and --engine-args files read, in order (their option in read_options): no
     * output may overwrite one (kvsim_options_check_outputs). Owned; kvsim_options_fini frees. */
    const char **read_files, **read_options;
    size_t num_read_files;
};
/* `kvsim replay`'s defaults. */
void kvsim_options_default(struct kvsim_options *o);
/* Frees what o owns (the run configurations --config read). */
void kvsim_options_fini(struct kvsim_options *o);
/*
 * kvsim_options_config_text - the effective configuration of a run as the JSON that --config
 * reads back into the same run: {"format": "kvsim-config-1", "kvsim": version, "options":
 * {every option of the table with its effective value, in the table's order, but the outputs,
 * the aliases and what is derived (a capacity from --gpu-memory-gib)}, and the step model's
 * coefficients from run->replay.model}. malloc'd text (free()), or NULL when out of memory.
 */
char *kvsim_options_config_text(const struct kvsim_options *o, const struct kvsim_run *run);
/*
 * kvsim_options_check_outputs - before a run: every output path given (--report, --config-out,
 * --requests-out, --timeseries-out, --html, --handoff-events) can be written (kvsim_output_check,
 * which leaves existing files as they are), no two name the same file, and at most one is "-"
 * (standard output). Returns 0, or -EINVAL (the same file twice) or the negative errno of the
 * path that cannot be written, with "option --NAME: ..." in err.
 */
int kvsim_options_check_outputs(const struct kvsim_options *o, char *err, size_t errlen);
/* Writes text and a newline to path (what = the option, for the message), atomically
 * (kvsim_output). Returns 0, or the negative errno with "<what>: <path>: ..." in err. */
int kvsim_write_text_file(const char *what, const char *path, const char *text, char *err,
                          size_t errlen);

/*
 * kvsim_options_set - one option: name is its long name without dashes, as `kvsim replay`
 * spells it (kvsim_options_canonical maps the API's spellings); value its text (NULL for a
 * flag: true). Returns 0, 1 (not an option of a run: the caller decides), or -EINVAL with
 * "option --NAME: ..." in err; -ENOMEM (the same message) when memory ran out reading a file
 * the option names (--engine-args). String values are stored as given (borrowed).
 */
int kvsim_options_set(struct kvsim_options *o, const char *name, const char *value, char *err,
                      size_t errlen);
/* Whether name (long name, no dashes) is an option of a run; and whether it takes no value on
 * the command line (a flag). */
bool kvsim_options_known(const char *name, bool *is_flag);
/* The i-th option's long name (table order), NULL past the last: for the documentation test. */
const char *kvsim_options_name(size_t i);
/* What an option's value is, for outputs that type it (a sweep row's config): a whole number, a
 * real, true/false (a flag, or a boolean), or text (paths, choices). name: kvsim's or vLLM's. */
enum kvsim_option_type {
    KVSIM_OPTION_TEXT,
    KVSIM_OPTION_INTEGER,
    KVSIM_OPTION_REAL,
    KVSIM_OPTION_BOOLEAN
};
enum kvsim_option_type kvsim_options_type(const char *name);
/* Row i's vLLM long name where it differs from kvsim's ("tensor-parallel-size" for "tp"), or
 * NULL: accepted wherever kvsim's name is. */
const char *kvsim_options_vllm_name(size_t i);
/* The i-th option's help text (its default last in parentheses, where it has one), NULL past the
 * last. */
const char *kvsim_options_help(size_t i);
/* The i-th option's value as --help shows it ("N", "FILE", "a|b|c"), NULL for a flag. */
const char *kvsim_options_arg(size_t i);
/* The default value of option i (kvsim_options_default) as --config-out writes a value: a
 * number in the option's unit, true/false, a choice's name. False when it has none to show (a
 * string, a file, an alias read specially). */
bool kvsim_options_default_text(size_t i, char *buf, size_t len);
/* Whether row i is a command-line option of `kvsim replay` (some rows are set through the C API
 * and --config files only). */
bool kvsim_options_on_command_line(size_t i);
/* The option sections of `kvsim replay --help`, generated from the table: every command-line row,
 * its value and its help text. */
void kvsim_options_print_help(FILE *out);
/* The canonical long name of an API spelling (leading dashes dropped, '_' as '-', aliases)
 * into buf; returns buf. */
const char *kvsim_options_canonical(const char *name, char *buf, size_t len);

/* A run ready to go: the options resolved (profile, capacity, pools, step model file). */
struct kvsim_run {
    struct kvsim_replay_config replay;
    struct kvsim_timing timing;
};
/*
 * kvsim_options_resolve - check the options that need each other and build the run: the timing
 * and capacity first (the pools' settings and the offload checks read what it derives), then
 * the offload and disaggregation checks and the pools' engine-args files, then the --config
 * step model. Returns 0, or -EINVAL/-ENOENT with the message (-ENOMEM: memory ran out reading
 * a file); on error *run holds nothing.
 */
int kvsim_options_resolve(const struct kvsim_options *o, struct kvsim_run *run, char *err,
                          size_t errlen);
void kvsim_run_fini(struct kvsim_run *run);

/* Strict number readers shared with the command line: no sign or space before the digits, no
 * trailing text, no hexadecimal floats, finite. */
bool kvsim_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
bool kvsim_parse_double(const char *s, double min, bool min_open, double max, double *out);

/*
 * kvsim_request_check - what is wrong with the prompt and limits of r (NULL: nothing), and in
 * *input_len its prompt length: the size field, max_tokens >= 1 >= min_tokens - max_tokens,
 * the prompt as tokens, hash ids or a length (one of them, ids below 2^31, hash ids matching
 * input_len), and hash_block_size equal to block_size unless that is 0 (nothing seen yet).
 * Arrivals are the caller's. Used by the engine and by the replay of a request list.
 */
const char *kvsim_request_check(const kvsim_request_t *r, uint32_t block_size, uint32_t *input_len);

/* "a, b or c" of names[0..n) into buf (truncated to len); returns buf. */
const char *kvsim_choices_text(const char *const *names, int n, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_API_H */
