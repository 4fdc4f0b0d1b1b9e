/*
 * config.c - the options of a run by name (api.h). One table holds every option's name, kind,
 * range, help and member; the command line, --config files and the API (config_api.c) all set
 * options through it, --help and --config-out are generated from it, so they cannot drift apart.
 */
#include "runtime/api/api.h"
#include "runtime/input/input.h"
#include "kvpool/base.h"

#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- number readers -------------------------------------------------------------------------- */

bool kvsim_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false; /* no sign, no leading space */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool kvsim_parse_double(const char *s, double min, bool min_open, double max, double *out)
{
    if (!s || !*s || strchr(" \t\n\v\f\r", *s))
        return false;
    for (const char *c = s; *c; c++)
        if (*c == 'x' || *c == 'X') /* no hexadecimal floats */
            return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || !(min_open ? v > min : v >= min) || !(v <= max))
        return false;
    *out = v;
    return true;
}

const char *kvsim_choices_text(const char *const *names, int n, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", names[i],
                              i + 2 < n   ? ", "
                              : i + 1 < n ? " or "
                                          : "");
    return buf;
}

/* ---- the table ------------------------------------------------------------------------------- */

/* The rows the code names: those read or printed by more than a store, or left out of a run on a
 * condition (option_idle); every other row is O_GENERIC. */
enum opt_id {
    O_GENERIC = 0,
    O_FORMAT,
    O_TBS,
    O_SPEEDUP,
    O_MAXREQ,
    O_SEED,
    O_ROUTER,
    O_KVINDEX,
    O_CONFIG,
    O_EARGS,
    O_POLICY,
    O_TP,
    O_TPGBPS,
    O_TPLAT,
    O_GPUUTIL,
    O_OTHREADS,
    O_OSEED,
    O_KVBYTES,
    O_SY_SESS,
    O_TSINT,
    O_RVIEW,
    O_KVDELAY,
    O_PREDICT,
};

enum opt_kind { K_STR, K_U32, K_U64, K_DBL, K_FLAG, K_BOOL, K_CHOICE };
/* What needs a companion option: an offload option needs --g2-blocks, a disaggregation option
 * --prefill-engines; a synthetic workload option no --trace. */
enum opt_group { G_NONE, G_OFFLOAD, G_DISAGG, G_SYNTH };
/* How a row's value is stored (struct opt.field). */
enum opt_field {
    F_SPECIAL = 0, /* read and printed by apply_special / special_value */
    F_U32,
    F_U64,
    F_DBL,
    F_BOOL,        /* a flag, or true|false */
    F_STR,         /* borrowed */
    F_CHOICE_BOOL, /* a bool: the second of two choices */
    F_NOT_BOOL,    /* the negation of a flag (--no-x) */
    F_ENUM,        /* an enum: values[the choice's index] */
    F_SCALED,      /* an int64_t: round(the double x scale); a duration's nonzero value >= 1 ns */
};
/* When --config-out leaves a row out (besides an idle option, and the offload, disaggregation
 * and synthetic rows of a run without them). */
enum opt_omit {
    OMIT_NEVER = 0,
    OMIT_ZERO,    /* when 0, false or NULL: the option is off */
    OMIT_DISAGG,  /* in a disaggregated run (the pools' options say it) */
    OMIT_DERIVED, /* when derived from --gpu-memory-gib and not given (its mark is false) */
    OMIT_UNGIVEN, /* when not given (its mark is false): derived from the other options (the
                   * default capacity is tokens at the block size, or --gpu-memory-gib) */
    OMIT_ALWAYS,  /* aliases, negations, how a run shows: not part of the run's configuration */
    OMIT_OUTPUT,  /* an output file (F_STR): left out too, and checked before the run
                   * (kvsim_options_check_outputs) */
};

/* The sections of `kvsim replay --help`, in order; S_API rows are set through the C API and
 * --config files only. */
enum opt_section {
    S_INPUT,
    S_SYNTH,
    S_CLUSTER,
    S_ENGINE,
    S_VLLM,
    S_TIMING,
    S_OFFLOAD,
    S_DISAGG,
    S_SLO,
    S_OUTPUT,
    S_API
};
static const char *const section_titles[] = {
    [S_INPUT] = "input:",
    [S_SYNTH] = "the synthetic workload (without a trace): chat sessions sharing system prompts",
    [S_CLUSTER] = "cluster:",
    [S_ENGINE] = "engine:",
    [S_VLLM] = "vLLM engine arguments (vLLM's names and values; the defaults above and on):",
    [S_TIMING] = "timing and capacity from a model and a GPU (docs/fidelity/timing.md):",
    [S_OFFLOAD] = "offload tiers (off unless --g2-blocks is given):",
    [S_DISAGG] = "disaggregated serving (off unless --prefill-engines is given):",
    [S_SLO] = "service-level objectives (per request; the report adds attainment and goodput):",
    [S_OUTPUT] = "output:",
};

struct opt {
    const char *name;
    enum opt_id id;
    enum opt_kind kind;
    enum opt_group group;
    double min, max; /* K_U32/K_U64/K_DBL (integers exact up to 2^53; u64 max below) */
    bool min_open;
    const char *const *choices; /* K_CHOICE: NULL-terminated */
    enum opt_section section;   /* where --help lists it (S_API: not on the command line) */
    const char *arg;            /* its value in --help ("N", "FILE", a|b; NULL for a flag) */
    const char *help;           /* what it does and its default, for --help */
    /* Where the value lives in struct kvsim_options and how it is stored: reading it
     * (kvsim_options_set), printing it (--config-out) and leaving it out are generic for every row
     * but F_SPECIAL ones (apply_special, special_value). */
    enum opt_field field;
    size_t off;        /* offsetof(struct kvsim_options, ...) */
    size_t also;       /* 1 + the offset of a second member stored the same (0: none) */
    size_t mark;       /* 1 + the offset of a bool set when the row is set (0: none) */
    double scale;      /* F_SCALED: units of the member per unit of the option */
    const int *values; /* F_ENUM: the member's value for each choice */
    enum opt_omit omit;
    /* vLLM's long name where it differs from kvsim's: accepted on the command line, in --grid,
     * in --config and the C API, under both spellings (- or _), and shown by --help. */
    const char *vllm;
};

/* The type of the member a row stores into (_Generic on the member itself: a row cannot name a
 * member of another type). */
#define FIELD_TYPE(m)                                                                              \
    _Generic(((struct kvsim_options *)0)->m,                                                       \
        uint32_t: F_U32,                                                                           \
        uint64_t: F_U64,                                                                           \
        double: F_DBL,                                                                             \
        bool: F_BOOL,                                                                              \
        const char *: F_STR)
#define AT(m)           .field = FIELD_TYPE(m), .off = offsetof(struct kvsim_options, m)
#define AT_CHOICE(m)    .field = F_CHOICE_BOOL, .off = offsetof(struct kvsim_options, m)
#define AT_NOT(m)       .field = F_NOT_BOOL, .off = offsetof(struct kvsim_options, m), .omit = OMIT_ALWAYS
#define AT_SCALED(m, s) .field = F_SCALED, .off = offsetof(struct kvsim_options, m), .scale = (s)
/* An enum member (int-sized, checked): values maps the choices to it. */
#define AT_ENUM(m, vals)                                                                           \
    .field = F_ENUM, .values = (vals),                                                             \
    .off = offsetof(struct kvsim_options, m) +                                                     \
           0 * sizeof(char[sizeof(((struct kvsim_options *)0)->m) == sizeof(int) ? 1 : -1])
#define ALSO(m) .also = 1 + offsetof(struct kvsim_options, m)
#define MARK(m)                                                                                    \
    .mark = 1 + offsetof(struct kvsim_options, m) +                                                \
            0 * sizeof(char[_Generic(((struct kvsim_options *)0)->m, bool : 1)])

static const char *const formats[] = {"mooncake", "azure", "vllm-run", NULL};
static const char *const routers[] = {"round-robin", "least-loaded", "kv", "dp-lb", NULL};
/* Prefill and decode pools: dp-lb (ticks of the DP coordinator) is not in the disaggregated loop */
static const char *const pool_routers[] = {"round-robin", "least-loaded", "kv", NULL};
static const char *const indexes[] = {"pool", "events", NULL};
static const char *const views[] = {"exact", "delayed", NULL};
static const int view_ids[] = {KVSIM_ROUTER_VIEW_EXACT, KVSIM_ROUTER_VIEW_DELAYED};
static const char *const executors[] = {"inline", "pool", NULL};
static const char *const releases[] = {"pinned", "immediate", NULL};
static const char *const policies[] = {"fcfs", "priority", NULL};
static const char *const lengths[] = {"lognormal", "fixed", NULL};
static const char *const on_off[] = {"on", "off", NULL};
static const int format_ids[] = {KVSIM_TRACE_MOONCAKE, KVSIM_TRACE_AZURE, KVSIM_TRACE_VLLM_RUN};
static const int router_ids[] = {KVSIM_ROUTER_ROUND_ROBIN, KVSIM_ROUTER_LEAST_LOADED,
                                 KVSIM_ROUTER_KV, KVSIM_ROUTER_DP_LB};
static const int policy_ids[] = {SCHED_POLICY_FCFS, SCHED_POLICY_PRIORITY};

#define U32MAX  4294967295.0
/* Integer ranges beyond 2^53 (seeds: the whole u64) are checked as u64, not as doubles. */
#define U64_ALL -1.0

static const struct opt opts[] = {
    {"trace", O_GENERIC, K_STR, G_NONE, 0, 0, false, NULL, S_INPUT, "FILE, or TRACE",
     "Mooncake JSONL or Azure CSV, gzip-compressed or not; - reads standard input (with --format) "
     "(default: the synthetic workload)",
     AT(replay.trace_path)},
    {"format", O_FORMAT, K_CHOICE, G_NONE, 0, 0, false, formats, S_INPUT, "mooncake|azure|vllm-run",
     "trace format (default: from the file extension; vllm-run: a recorded run's requests.jsonl)",
     AT_ENUM(replay.trace_opts.format, format_ids)},
    {"trace-block-size", O_TBS, K_U32, G_NONE, 1, 1 << 20, false, NULL, S_INPUT, "N",
     "tokens per Mooncake hash id (512)", AT(replay.trace_opts.trace_block_size)},
    {"arrival-speedup", O_SPEEDUP, K_DBL, G_NONE, 0, 1e12, true, NULL, S_INPUT, "X",
     "divide inter-arrival gaps by X (1)", AT(replay.trace_opts.arrival_speedup)},
    {"max-requests", O_MAXREQ, K_U64, G_NONE, 1, U32MAX, false, NULL, S_INPUT, "N",
     "replay only the first N requests (all)", AT(replay.trace_opts.max_requests),
     .omit = OMIT_ZERO},
    {"max-sim-time-s", O_GENERIC, K_DBL, G_NONE, 0, 9e9, true, NULL, S_INPUT, "X",
     "stop X simulated seconds after the first arrival (the report says it is partial; default: "
     "none)",
     AT_SCALED(replay.max_sim_time_ns, 1e9), .omit = OMIT_ZERO},
    {"replay-concurrency", O_GENERIC, K_U32, G_NONE, 1, 1 << 24, false, NULL, S_INPUT, "N",
     "closed loop: N sessions in flight, the next one sent when one ends (first turns' timestamps "
     "unused; Dynamo's option) (off: by timestamps)",
     AT(replay.replay_concurrency), .omit = OMIT_ZERO},
    {"seed", O_SEED, K_U64, G_NONE, 0, U64_ALL, false, NULL, S_INPUT, "S",
     "seed of the synthetic workload (1)", AT(replay.seed)},
    /* the synthetic workload (no --trace) */
    {"synthetic-requests", O_GENERIC, K_U32, G_SYNTH, 1, 2147483647.0, false, NULL, S_SYNTH, "N",
     "sessions until N requests instead", AT(replay.synth.num_requests), .omit = OMIT_ZERO},
    {"synthetic-sessions", O_SY_SESS, K_U32, G_SYNTH, 1, 2147483647.0, false, NULL, S_SYNTH, "N",
     "sessions (300)", AT(replay.synth.num_sessions)},
    {"synthetic-turns", O_GENERIC, K_U32, G_SYNTH, 1, 1 << 20, false, NULL, S_SYNTH, "N",
     "turns per session, uniform in 1..N (6; 1: single requests)", AT(replay.synth.max_turns)},
    {"synthetic-rate", O_GENERIC, K_DBL, G_SYNTH, 0, 1e9, true, NULL, S_SYNTH, "X",
     "session starts per second (6)", AT(replay.synth.session_rate)},
    {"synthetic-burstiness", O_GENERIC, K_DBL, G_SYNTH, 0, 1e6, true, NULL, S_SYNTH, "B",
     "gaps gamma of shape B (1: Poisson; < 1 burstier)", AT(replay.synth.burstiness)},
    {"synthetic-input-len", O_GENERIC, K_U32, G_SYNTH, 1, 1 << 26, false, NULL, S_SYNTH, "N",
     "mean new user tokens per turn (300)", AT(replay.synth.mean_user_len)},
    {"synthetic-output-len", O_GENERIC, K_U32, G_SYNTH, 1, 1 << 26, false, NULL, S_SYNTH, "N",
     "mean output tokens (200)", AT(replay.synth.mean_output_len)},
    {"synthetic-max-output-len", O_GENERIC, K_U32, G_SYNTH, 1, 1 << 26, false, NULL, S_SYNTH, "N",
     "cap on output tokens (1000)", AT(replay.synth.max_output_len)},
    {"synthetic-lengths", O_GENERIC, K_CHOICE, G_SYNTH, 0, 0, false, lengths, S_SYNTH,
     "lognormal|fixed", "length distribution (lognormal)", AT_CHOICE(replay.synth.fixed_lengths)},
    {"synthetic-system-prompt-len", O_GENERIC, K_U32, G_SYNTH, 0, 1 << 26, false, NULL, S_SYNTH,
     "N", "tokens of a shared system prompt (1024)", AT(replay.synth.system_prompt_len)},
    {"synthetic-prefix-groups", O_GENERIC, K_U32, G_SYNTH, 1, 1 << 20, false, NULL, S_SYNTH, "N",
     "system prompts to share (8)", AT(replay.synth.num_prefix_groups)},
    {"synthetic-shared-prefix-ratio", O_GENERIC, K_DBL, G_SYNTH, 0, 1, false, NULL, S_SYNTH, "R",
     "share of sessions opening with a shared system prompt; the others have their own (1)",
     AT(replay.synth.shared_prefix_ratio)},
    {"synthetic-think-s", O_GENERIC, K_DBL, G_SYNTH, 0, 1e6, false, NULL, S_SYNTH, "X",
     "mean think time between turns (2)", AT(replay.synth.mean_think_s)},
    {"engines", O_GENERIC, K_U32, G_NONE, 1, 4096, false, NULL, S_CLUSTER, "N", "engines (4)",
     AT(replay.num_engines), MARK(engines_given), .omit = OMIT_DISAGG},
    {"data-parallel-size", O_GENERIC, K_U32, G_NONE, 1, 4096, false, NULL, S_CLUSTER, "N",
     "engines (ranks) per deployment behind vLLM's DP load balancer; --engines then counts "
     "deployments, --router picks one (1; docs/replay.md, Data parallelism)",
     AT(replay.data_parallel_size), .omit = OMIT_DISAGG},
    {"threads", O_GENERIC, K_U32, G_NONE, 1, 1024, false, NULL, S_CLUSTER, "T",
     "worker threads (number of CPUs); at most the engines and the CPUs (docs/replay.md, Threads)",
     AT(replay.num_threads)},
    {"router", O_ROUTER, K_CHOICE, G_NONE, 0, 0, false, routers, S_CLUSTER, "POLICY",
     "round-robin | least-loaded | kv | dp-lb (kv; dp-lb: vLLM's DP load balancer)",
     AT_ENUM(replay.router, router_ids)},
    {"kv-index", O_KVINDEX, K_CHOICE, G_NONE, 0, 0, false, indexes, S_CLUSTER, "pool|events",
     "kv router's overlap source: the engines' prefix-cache maps, or an indexer fed by their KV "
     "events (pool); both see the same blocks at every boundary",
     AT_CHOICE(replay.kv_index_events)},
    {"router-view", O_RVIEW, K_CHOICE, G_NONE, 0, 0, false, views, S_CLUSTER, "exact|delayed",
     "what the kv and least-loaded routers see (delayed; docs/replay.md, What the router sees): "
     "exact, every engine's cache and load at each boundary; delayed, what an engine did heard "
     "of --kv-event-delay-ms after the end of the step that did it, the router's own decisions "
     "at once",
     AT_ENUM(replay.router_view, view_ids)},
    {"kv-event-delay-ms", O_KVDELAY, K_DBL, G_NONE, 0, 1e6, false, NULL, S_CLUSTER, "X",
     "the delayed view's delay after a step's end: vLLM's KV events and loads in transit (5)",
     AT_SCALED(replay.kv_event_delay_ns, 1e6)},
    {"router-predict-ttl-s", O_PREDICT, K_DBL, G_NONE, 0, 1e6, false, NULL, S_CLUSTER, "T",
     "kv router: a routed prompt's blocks count as cached on the chosen engine for T s, as "
     "llm-d's speculative indexing and Dynamo's predict-on-route do (0: off)",
     AT_SCALED(replay.router_predict_ttl_ns, 1e9), .omit = OMIT_ZERO},
    {"block-size", O_GENERIC, K_U32, G_NONE, 1, 65536, false, NULL, S_ENGINE, "B",
     "tokens per KV block (16)", AT(replay.sched.block_size)},
    {"num-gpu-blocks", O_GENERIC, K_U32, G_NONE, 2, 2147483645.0, false, NULL, S_ENGINE, "N",
     "KV blocks per engine, null block included (16384; the default capacity is 262144 tokens "
     "at any --block-size: 8192 blocks of 32)",
     AT(replay.sched.num_blocks), MARK(timing.blocks_given), .omit = OMIT_UNGIVEN,
     .vllm = "num-gpu-blocks-override"},
    {"max-num-seqs", O_GENERIC, K_U32, G_NONE, 1, 1 << 20, false, NULL, S_ENGINE, "N",
     "running-set cap (256)", AT(replay.sched.max_num_seqs)},
    {"max-num-batched-tokens", O_GENERIC, K_U32, G_NONE, 1, U32MAX, false, NULL, S_ENGINE, "N",
     "token budget per step (8192)", AT(replay.sched.max_num_batched_tokens)},
    {"max-model-len", O_GENERIC, K_U32, G_NONE, 2, U32MAX, false, NULL, S_ENGINE, "N",
     "longest sequence (262144)", AT(replay.sched.max_model_len)},
    {"max-num-active-seqs", O_GENERIC, K_U32, G_NONE, 1, 1 << 20, false, NULL, S_ENGINE, "N",
     "admission cap below --max-num-seqs: the waiting queue stops when N run; never preempts (off; "
     "contract 2, vLLM #56758)",
     AT(replay.sched.max_num_active_seqs), .omit = OMIT_ZERO},
    {"max-num-queued-reqs", O_GENERIC, K_U32, G_NONE, 1, U32MAX, false, NULL, S_ENGINE, "N",
     "refuse an arrival (reason queue_full, vLLM's HTTP 503) while N requests are unfinished on "
     "its engine (off; contract 2, vLLM #49445)",
     AT(replay.sched.max_num_queued_reqs), .omit = OMIT_ZERO},
    {"vllm-contract", O_GENERIC, K_U32, G_NONE, SCHED_CONTRACT_MIN, SCHED_CONTRACT_LATEST, false,
     NULL, S_ENGINE, "1|2",
     "the fidelity contract with upstream vLLM the scheduler follows (docs/fidelity/vllm.md): 2 = "
     "vLLM main of 2026-09 (default), 1 = of 2026-07-24",
     AT(replay.sched.vllm_contract)},
    {"check-invariants", O_GENERIC, K_FLAG, G_NONE, 0, 0, false, NULL, S_ENGINE, NULL,
     "check the scheduler's and the pool's invariants after every schedule and update (slow; as "
     "the tests do): a violation stops the replay",
     AT(replay.sched.check_invariants)},
    {"decode-fast-path", O_GENERIC, K_CHOICE, G_NONE, 0, 0, false, on_off, S_ENGINE, "on|off",
     "advance stable decode batches in bulk (on); off schedules every step: the same report, "
     "slower",
     AT_CHOICE(replay.decode_fast_path_off), .omit = OMIT_ZERO},
    {"config", O_CONFIG, K_STR, G_NONE, 0, 0, false, NULL, S_ENGINE, "FILE.json",
     "step-time model coefficients and speedup_ratio, or a whole run configuration (--config-out)",
     .field = F_SPECIAL},
    {"long-prefill-token-threshold", O_GENERIC, K_U32, G_NONE, 0, U32MAX, false, NULL, S_VLLM, "N",
     "cap on a prefill chunk (0: off)", AT(replay.sched.long_prefill_token_threshold)},
    /* vLLM's engine flags, one to one (--x / --no-x) */
    {"enable-prefix-caching", O_GENERIC, K_FLAG, G_NONE, 0, 0, false, NULL, S_VLLM, NULL,
     "vLLM's automatic prefix caching (on)", AT(replay.sched.enable_prefix_caching)},
    {"no-enable-prefix-caching", O_GENERIC, K_FLAG, G_NONE, 0, 0, false, NULL, S_VLLM, NULL,
     "turn prefix caching off", AT_NOT(replay.sched.enable_prefix_caching)},
    {"enable-chunked-prefill", O_GENERIC, K_FLAG, G_NONE, 0, 0, false, NULL, S_VLLM, NULL,
     "split long prefills over steps (on)", AT(replay.sched.enable_chunked_prefill)},
    {"no-enable-chunked-prefill", O_GENERIC, K_FLAG, G_NONE, 0, 0, false, NULL, S_VLLM, NULL,
     "turn chunked prefill off: a prompt waits until it fits one step's budget",
     AT_NOT(replay.sched.enable_chunked_prefill)},
    {"async-scheduling", O_GENERIC, K_FLAG, G_NONE, 0, 0, false, NULL, S_VLLM, NULL,
     "vLLM's batch queue: schedule each step while the one before it runs (off; aggregated engines "
     "without offload tiers; others keep only the placeholders)",
     AT(replay.sched.async_scheduling)},
    {"watermark", O_GENERIC, K_DBL, G_NONE, 0, 0.99, false, NULL, S_VLLM, "W",
     "keep int(W x blocks) free for running requests (0)", AT(replay.sched.watermark)},
    {"engine-args", O_EARGS, K_STR, G_NONE, 0, 0, false, NULL, S_VLLM, "FILE.json",
     "vLLM's engine arguments as JSON (block_size, num_gpu_blocks_override, max_num_seqs, ...): "
     "read where it stands, options after it override it",
     .field = F_SPECIAL},
    {"scheduling-policy", O_GENERIC, K_CHOICE, G_NONE, 0, 0, false, policies, S_VLLM,
     "fcfs|priority", "the waiting queue's order (fcfs)", AT_ENUM(replay.sched.policy, policy_ids)},
    {"kv-events", O_GENERIC, K_BOOL, G_NONE, 0, 0, false, NULL, S_API, NULL, NULL, AT(kv_events)},
    {"profiles", O_GENERIC, K_STR, G_NONE, 0, 0, false, NULL, S_TIMING, "ROOT",
     "LLMServingSim-format profiles and model configs", AT(timing.profiles)},
    {"hardware", O_GENERIC, K_STR, G_NONE, 0, 0, false, NULL, S_TIMING, "HW",
     "time steps with ROOT/HW/ORG/NAME/bf16/tpN/ (the profile step model instead of the "
     "polynomial)",
     AT(timing.hardware)},
    {"model", O_GENERIC, K_STR, G_NONE, 0, 0, false, NULL, S_TIMING, "ORG/NAME",
     "the model (ROOT/configs/model/ORG/NAME.json)", AT(timing.model)},
    {"tp", O_TP, K_U32, G_NONE, 1, 64, false, NULL, S_TIMING, "N", "tensor parallel degree (1)",
     AT(timing.tp), .vllm = "tensor-parallel-size"},
    {"tp-link-gbps", O_TPGBPS, K_DBL, G_NONE, 1e-3, 1e6, false, NULL, S_TIMING, "X",
     "all-reduce link bandwidth, GiB/s, >= 0.001 (16)", AT(timing.tp_link_gbps)},
    {"tp-link-latency-us", O_TPLAT, K_DBL, G_NONE, 0, 1e9, false, NULL, S_TIMING, "X",
     "all-reduce link latency per message (20)", AT(timing.tp_link_latency_us)},
    {"enable-expert-parallel", O_GENERIC, K_FLAG, G_NONE, 0, 0, false, NULL, S_TIMING, NULL,
     "a mixture-of-experts --model: each of the tp x data-parallel ranks holds whole experts "
     "instead of a slice of every expert (off; docs/fidelity/timing.md)",
     AT(timing.enable_expert_parallel)},
    {"gpu-memory-gib", O_GENERIC, K_DBL, G_NONE, 0, 1e6, true, NULL, S_TIMING, "G",
     "one GPU's memory: derive --num-gpu-blocks and --kv-bytes-per-token the vLLM way (either "
     "option given wins, as num_gpu_blocks_override)",
     AT(timing.gpu_memory_gib), .omit = OMIT_ZERO},
    {"gpu-memory-utilization", O_GPUUTIL, K_DBL, G_NONE, 0, 1, true, NULL, S_TIMING, "U",
     "fraction of it vLLM may use (0.9)", AT(timing.gpu_memory_utilization)},
    {"g2-blocks", O_GENERIC, K_U32, G_OFFLOAD, 1, OFFLOAD_TIER_MAX_CAPACITY, false, NULL, S_OFFLOAD,
     "N", "host-memory tier per engine, in blocks", AT(replay.tiers.g2_blocks),
     MARK(replay.offload)},
    {"g3-blocks", O_GENERIC, K_U32, G_OFFLOAD, 0, OFFLOAD_TIER_MAX_CAPACITY, false, NULL, S_OFFLOAD,
     "N", "disk tier per engine, in blocks (0: none)", AT(replay.tiers.g3_blocks)},
    {"g3-shared", O_GENERIC, K_FLAG, G_OFFLOAD, 0, 0, false, NULL, S_OFFLOAD, NULL,
     "one G3 of --g3-blocks blocks shared by all engines instead (LRU at epoch boundaries; an "
     "engine sees the others' writes from the next boundary on)",
     AT(replay.g3_shared)},
    {"g3-write-through", O_GENERIC, K_FLAG, G_OFFLOAD, 0, 0, false, NULL, S_OFFLOAD, NULL,
     "copy every block G2 receives on to G3 (off: only blocks G2 evicts)",
     AT(replay.tiers.g3_write_through)},
    {"offload-executor", O_GENERIC, K_CHOICE, G_OFFLOAD, 0, 0, false, executors, S_OFFLOAD,
     "inline|pool",
     "run copies on the engine's thread or on a thread pool (woken only for copies that cost more "
     "than a wake-up); the report is the same (inline)",
     AT_CHOICE(replay.offload_pool)},
    {"offload-threads", O_OTHREADS, K_U32, G_OFFLOAD, 1, 256, false, NULL, S_OFFLOAD, "N",
     "pool workers (2)", AT(replay.offload_threads)},
    {"offload-fail-rate", O_GENERIC, K_DBL, G_OFFLOAD, 0, 1, false, NULL, S_OFFLOAD, "F",
     "probability in [0, 1] that a copy batch fails (0)", AT(replay.tiers.pipe.fail_rate)},
    {"offload-seed", O_OSEED, K_U64, G_OFFLOAD, 0, U64_ALL, false, NULL, S_OFFLOAD, "S",
     "seed of the failure injection (0)", AT(replay.tiers.pipe.seed)},
    {"kv-bytes-per-token", O_KVBYTES, K_U64, G_NONE, 1, 1099511627776.0, false, NULL, S_OFFLOAD,
     "N", "KV bytes per token, all layers (131072)", AT(replay.kv_bytes_per_token),
     MARK(timing.kv_bytes_given), .omit = OMIT_DERIVED},
    /* At least 1 MB/s: a slower link would be rounded to 0 B/s (read as infinite) below
     * 1e-9, and would stretch a replay over simulated years long before that (issue #33). */
    {"g1-g2-gbps", O_GENERIC, K_DBL, G_OFFLOAD, 1e-3, 1e9, false, NULL, S_OFFLOAD, "X",
     "GPU<->host bandwidth per direction, GB/s, >= 0.001 (14)",
     AT_SCALED(replay.tiers.pipe.lanes[OFFLOAD_LANE_G1_G2].bandwidth, 1e9),
     ALSO(replay.tiers.pipe.lanes[OFFLOAD_LANE_G2_G1].bandwidth)},
    {"g2-g3-gbps", O_GENERIC, K_DBL, G_OFFLOAD, 1e-3, 1e9, false, NULL, S_OFFLOAD, "X",
     "host<->disk bandwidth per direction, GB/s, >= 0.001 (7)",
     AT_SCALED(replay.tiers.pipe.lanes[OFFLOAD_LANE_G2_G3].bandwidth, 1e9),
     ALSO(replay.tiers.pipe.lanes[OFFLOAD_LANE_G3_G2].bandwidth)},
    {"prefill-engines", O_GENERIC, K_U32, G_NONE, 1, 4096, false, NULL, S_DISAGG, "P",
     "prefill engines (instead of --engines)", AT(replay.disagg.prefill_engines),
     .omit = OMIT_ZERO},
    {"decode-engines", O_GENERIC, K_U32, G_DISAGG, 1, 4096, false, NULL, S_DISAGG, "D",
     "decode engines", AT(replay.disagg.decode_engines)},
    {"prefill-engine-args", O_GENERIC, K_STR, G_DISAGG, 0, 0, false, NULL, S_DISAGG, "F",
     "vLLM engine arguments of the prefill pool (JSON: block_size, num_gpu_blocks_override, "
     "max_num_seqs, max_num_batched_tokens, max_model_len, ...), over the engine options above",
     AT(prefill_args)},
    {"decode-engine-args", O_GENERIC, K_STR, G_DISAGG, 0, 0, false, NULL, S_DISAGG, "F",
     "the same for the decode pool", AT(decode_args)},
    {"prefill-router", O_GENERIC, K_CHOICE, G_DISAGG, 0, 0, false, pool_routers, S_DISAGG, "POLICY",
     "round-robin | least-loaded | kv (kv)", AT_ENUM(replay.disagg.prefill_router, router_ids)},
    {"decode-router", O_GENERIC, K_CHOICE, G_DISAGG, 0, 0, false, pool_routers, S_DISAGG, "POLICY",
     "round-robin | least-loaded | kv (kv)", AT_ENUM(replay.disagg.decode_router, router_ids)},
    {"kv-transfer-gbps", O_GENERIC, K_DBL, G_DISAGG, 1e-6, 1e6, false, NULL, S_DISAGG, "X",
     "prefill->decode link bandwidth, GB/s (25)", AT(replay.disagg.transfer.gbps)},
    {"kv-transfer-latency-us", O_GENERIC, K_DBL, G_DISAGG, 0, 1e9, false, NULL, S_DISAGG, "X",
     "fixed cost of one KV transfer (1000: RDMA set-up, docs/disagg.md)",
     AT_SCALED(replay.disagg.transfer.latency_ns, 1e3)},
    {"kv-transfer-abort-timeout-ms", O_GENERIC, K_DBL, G_DISAGG, 0, 1e12, false, NULL, S_DISAGG,
     "X",
     "a pinned source is freed this long after the pin (480000, VLLM_NIXL_ABORT_REQUEST_TIMEOUT; "
     "0: never)",
     AT_SCALED(replay.disagg.abort_timeout_ns, 1e6)},
    {"handoff-release", O_GENERIC, K_CHOICE, G_DISAGG, 0, 0, false, releases, S_DISAGG,
     "pinned|immediate",
     "keep the source until the decode read it (pinned, vLLM) or free it when the prefill ends "
     "(immediate: a what-if without stranding)",
     AT_CHOICE(replay.disagg.release_immediately)},
    {"handoff-events", O_GENERIC, K_STR, G_DISAGG, 0, 0, false, NULL, S_DISAGG, "FILE",
     "one JSON line per handoff lifecycle event", AT(replay.outputs.handoff_events_path),
     .omit = OMIT_OUTPUT},
    {"slo-ttft-ms", O_GENERIC, K_DBL, G_NONE, 0, 1e9, true, NULL, S_SLO, "X",
     "time to first token within X ms", AT_SCALED(replay.slo.ttft_ns, 1e6), .omit = OMIT_ZERO},
    {"slo-itl-ms", O_GENERIC, K_DBL, G_NONE, 0, 1e9, true, NULL, S_SLO, "X",
     "inter-token latency (AIPerf's, per request: (last - first token) / (tokens - 1)) within X "
     "ms",
     AT_SCALED(replay.slo.itl_ns, 1e6), .omit = OMIT_ZERO},
    {"slo-e2e-ms", O_GENERIC, K_DBL, G_NONE, 0, 1e9, true, NULL, S_SLO, "X",
     "end-to-end latency within X ms", AT_SCALED(replay.slo.e2e_ns, 1e6), .omit = OMIT_ZERO},
    {"report", O_GENERIC, K_STR, G_NONE, 0, 0, false, NULL, S_OUTPUT, "FILE",
     "JSON report (- : standard output, the table then goes to standard error)",
     AT(replay.outputs.report_path), .omit = OMIT_OUTPUT},
    {"config-out", O_GENERIC, K_STR, G_NONE, 0, 0, false, NULL, S_OUTPUT, "FILE",
     "the run's whole configuration as JSON: --config FILE replays the same run (options after it "
     "override it); the report's run.config holds it",
     AT(config_out_path), .omit = OMIT_OUTPUT},
    {"requests-out", O_GENERIC, K_STR, G_NONE, 0, 0, false, NULL, S_OUTPUT, "FILE",
     "per-request records (JSONL)", AT(replay.outputs.requests_path), .omit = OMIT_OUTPUT},
    {"timeseries-out", O_GENERIC, K_STR, G_NONE, 0, 0, false, NULL, S_OUTPUT, "FILE",
     "per engine and in all, every interval: running, waiting, KV usage, prompt and generation "
     "tok/s, preemptions, pinned and offloaded blocks (CSV)",
     AT(replay.outputs.timeseries_path), .omit = OMIT_OUTPUT},
    {"html", O_GENERIC, K_STR, G_NONE, 0, 0, false, NULL, S_OUTPUT, "FILE",
     "the report as one self-contained HTML page: tables, latency CDFs, load over time, engines",
     AT(replay.outputs.html_path), .omit = OMIT_OUTPUT},
    {"timeseries-interval-ms", O_TSINT, K_DBL, G_NONE, 0, 1e9, true, NULL, S_OUTPUT, "X",
     "the time series' interval (1000)", AT_SCALED(replay.timeseries_interval_ns, 1e6),
     .omit = OMIT_ALWAYS},
    {"quiet", O_GENERIC, K_FLAG, G_NONE, 0, 0, false, NULL, S_OUTPUT, NULL,
     "no table, no progress bar", AT(replay.quiet), .omit = OMIT_ALWAYS},
};
#define NUM_OPTS (sizeof opts / sizeof opts[0])
_Static_assert(NUM_OPTS <= KVSIM_OPTIONS_MAX_IDS, "struct kvsim_options tracks every row");

/* The row named name, by kvsim's name or vLLM's (the spelling as the table has it: dashes). */
static const struct opt *find_opt(const char *name)
{
    for (size_t i = 0; i < NUM_OPTS; i++)
        if (!strcmp(opts[i].name, name) || (opts[i].vllm && !strcmp(opts[i].vllm, name)))
            return &opts[i];
    return NULL;
}

/* Prints "  --name ARG" in a 29-column field (or followed by two spaces when longer) and the help
 * text after it, wrapped at 84 columns with continuation lines under the text. */
static void print_option_help(FILE *out, const struct opt *d)
{
    enum { TEXT_COL = 29, WIDTH = 84 };
    int col = fprintf(out, "  --%s%s%s", d->name, d->arg ? " " : "", d->arg ? d->arg : "");
    char text[1024]; /* vLLM's name after the help: "... (vLLM: --tensor-parallel-size)" */
    const char *help = d->help;
    if (d->vllm) {
        snprintf(text, sizeof text, "%s (vLLM: --%s)", d->help, d->vllm);
        help = text;
    }
    if (col < TEXT_COL - 1)
        col += fprintf(out, "%*s", TEXT_COL - col, "");
    else
        col += fprintf(out, "  ");
    bool first = true;
    for (const char *w = help; *w; first = false) {
        size_t len = strcspn(w, " ");
        if (!first && col + 1 + (int)len > WIDTH) {
            fprintf(out, "\n%*s", TEXT_COL, "");
            col = TEXT_COL;
        } else if (!first) {
            col += fprintf(out, " ");
        }
        col += fprintf(out, "%.*s", (int)len, w);
        w += len;
        while (*w == ' ')
            w++;
    }
    fputc('\n', out);
}

void kvsim_options_print_help(FILE *out)
{
    for (int s = S_INPUT; s < S_API; s++) {
        fprintf(out, "%s\n", section_titles[s]);
        for (size_t i = 0; i < NUM_OPTS; i++)
            if (opts[i].section == (enum opt_section)s)
                print_option_help(out, &opts[i]);
    }
}

bool kvsim_options_on_command_line(size_t i) { return i < NUM_OPTS && opts[i].section != S_API; }

bool kvsim_options_known(const char *name, bool *is_flag)
{
    const struct opt *o = find_opt(name);
    if (o && is_flag)
        *is_flag = o->kind == K_FLAG;
    return o != NULL;
}

const char *kvsim_options_name(size_t i) { return i < NUM_OPTS ? opts[i].name : NULL; }

enum kvsim_option_type kvsim_options_type(const char *name)
{
    const struct opt *d = find_opt(name);
    if (!d)
        return KVSIM_OPTION_TEXT;
    switch (d->kind) {
    case K_U32:
    case K_U64: return KVSIM_OPTION_INTEGER;
    case K_DBL: return KVSIM_OPTION_REAL;
    case K_FLAG:
    case K_BOOL: return KVSIM_OPTION_BOOLEAN;
    case K_STR:
    case K_CHOICE: break;
    }
    return KVSIM_OPTION_TEXT;
}

const char *kvsim_options_vllm_name(size_t i) { return i < NUM_OPTS ? opts[i].vllm : NULL; }

const char *kvsim_options_help(size_t i) { return i < NUM_OPTS ? opts[i].help : NULL; }

const char *kvsim_options_arg(size_t i) { return i < NUM_OPTS ? opts[i].arg : NULL; }

/* field_value, defined below with the rest of --config-out. */
static bool field_value(const struct kvsim_options *o, const struct opt *d, char *buf, size_t len,
                        bool keep_zero);

bool kvsim_options_default_text(size_t i, char *buf, size_t len)
{
    if (i >= NUM_OPTS || opts[i].field == F_STR)
        return false;
    struct kvsim_options o;
    kvsim_options_default(&o);
    bool ok = field_value(&o, &opts[i], buf, len, true);
    kvsim_options_fini(&o);
    return ok;
}

const char *kvsim_options_canonical(const char *name, char *buf, size_t len)
{
    while (*name == '-')
        name++;
    size_t i = 0;
    for (; name[i] && i + 1 < len; i++)
        buf[i] = name[i] == '_' ? '-' : name[i];
    buf[i] = 0;
    const struct opt *d = find_opt(buf); /* vLLM's name: kvsim's */
    if (d && d->vllm && !strcmp(buf, d->vllm))
        snprintf(buf, len, "%s", d->name);
    return buf;
}

void kvsim_options_fini(struct kvsim_options *o)
{
    json_decref(o->config_doc);
    o->config_doc = NULL;
    free(o->read_files);
    free(o->read_options);
    o->read_files = o->read_options = NULL;
    o->num_read_files = 0;
}

/* Remembers a file an option read (kvsim_options_check_outputs). Returns 0 or -ENOMEM (err). */
static int note_read_file(struct kvsim_options *o, const char *option, const char *path, char *err,
                          size_t errlen)
{
    size_t n = o->num_read_files + 1;
    const char **files = realloc(o->read_files, n * sizeof *files);
    if (files)
        o->read_files = files;
    const char **options = files ? realloc(o->read_options, n * sizeof *options) : NULL;
    if (!options) {
        snprintf(err, errlen, "option %s: out of memory", option);
        return -ENOMEM;
    }
    o->read_options = options;
    files[n - 1] = path;
    options[n - 1] = option;
    o->num_read_files = n;
    return 0;
}

void kvsim_replay_config_default(struct kvsim_replay_config *c)
{
    memset(c, 0, sizeof *c);
    kvsim_trace_opts_default(&c->trace_opts);
    kvsim_synth_opts_default(&c->synth);
    sched_config_default(&c->sched);
    c->sched.num_blocks = kvsim_default_kv_blocks(c->sched.block_size);
    c->sched.max_num_seqs = 256;
    c->sched.max_num_batched_tokens = 8192;
    c->sched.max_model_len = 262144;
    kvsim_step_model_default(&c->model);
    c->num_engines = 4;
    c->data_parallel_size = 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->num_threads = n > 0 ? (uint32_t)n : 1;
    c->router = KVSIM_ROUTER_KV;
    c->overlap_weight = 1.0;
    /* What deployed routers see (issue 61): engines' KV events and loads a step end + 5 ms late
     * (TensorRT-LLM's and Dynamo's event batching); exact is the oracle */
    c->router_view = KVSIM_ROUTER_VIEW_DELAYED;
    c->kv_event_delay_ns = 5000000;
    c->seed = 1;
    kvsim_tiers_config_default(&c->tiers);
    c->offload_threads = 2;
    c->kv_bytes_per_token = 131072; /* Llama-3.1-8B in bf16 */
    c->disagg.prefill_sched = c->disagg.decode_sched = c->sched;
    c->disagg.prefill_router = c->disagg.decode_router = KVSIM_ROUTER_KV;
    c->disagg.transfer.gbps = 25.0;          /* a 200 Gb/s RDMA NIC */
    c->disagg.transfer.latency_ns = 1000000; /* 1 ms a transfer: RDMA set-up (docs/disagg.md) */
    c->disagg.abort_timeout_ns = INT64_C(480) * 1000000000; /* VLLM_NIXL_ABORT_REQUEST_TIMEOUT */
    c->timeseries_interval_ns = 1000000000;
}

void kvsim_options_default(struct kvsim_options *o)
{
    memset(o, 0, sizeof *o);
    kvsim_replay_config_default(&o->replay);
    kvsim_timing_opts_default(&o->timing);
}

/* ---- setting one option ---------------------------------------------------------------------- */

/* The value of option d in v (one of the kinds' members). */
struct opt_value {
    uint64_t u;
    double x;
    bool b;
    int choice;
};

static int parse_value(const struct opt *d, const char *value, struct opt_value *v, char *err,
                       size_t errlen)
{
    switch (d->kind) {
    case K_STR:
        if (value && *value)
            return 0;
        snprintf(err, errlen, "option --%s: needs a value", d->name);
        return -EINVAL;
    case K_U32:
    case K_U64: {
        uint64_t min = (uint64_t)d->min, max = d->max < 0 ? UINT64_MAX : (uint64_t)d->max;
        if (kvsim_parse_u64(value, min, max, &v->u))
            return 0;
        snprintf(err, errlen, "option --%s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]",
                 d->name, value ? value : "", min, max);
        return -EINVAL;
    }
    case K_DBL:
        if (kvsim_parse_double(value, d->min, d->min_open, d->max, &v->x))
            return 0;
        snprintf(err, errlen, "option --%s: '%s' is not a number in %c%g, %g]", d->name,
                 value ? value : "", d->min_open ? '(' : '[', d->min, d->max);
        return -EINVAL;
    case K_FLAG:
    case K_BOOL:
        if (!value || !strcmp(value, "true") || (d->kind == K_FLAG && !*value))
            v->b = true;
        else if (!strcmp(value, "false"))
            v->b = false;
        else {
            snprintf(err, errlen, "option --%s: '%s' is not true or false", d->name, value);
            return -EINVAL;
        }
        return 0;
    case K_CHOICE:
        for (int i = 0; d->choices[i]; i++)
            if (value && !strcmp(value, d->choices[i])) {
                v->choice = i;
                return 0;
            }
        {
            char list[256];
            int n = 0;
            while (d->choices[n])
                n++;
            snprintf(err, errlen, "option --%s: '%s' is not %s", d->name, value ? value : "",
                     kvsim_choices_text(d->choices, n, list, sizeof list));
        }
        return -EINVAL;
    }
    return -EINVAL;
}

/*
 * --config FILE: the step model's keys are read at resolve (kvsim_step_model_load); a run
 * configuration's "options" (kvsim replay --config-out) are set here, in the file's order, so
 * that options after --config override them. Returns 0 or -EINVAL.
 */
static int read_run_config(struct kvsim_options *o, const char *path, char *err, size_t errlen)
{
    o->config_path = path;
    json_error_t je;
    json_t *root = NULL; /* bounded (64 MiB); an error is the step model loader's to report */
    kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &root, &je);
    json_t *given = json_object_get(root, "options");
    if (!given) { /* a step model file, or an error the step model loader reports */
        json_decref(root);
        return 0;
    }
    if (!json_is_object(given)) {
        json_decref(root);
        snprintf(err, errlen, "option --config: %s: key 'options' must be an object", path);
        return -EINVAL;
    }
    /* Keep the document: the options borrow its strings. */
    if (!o->config_doc && !(o->config_doc = json_array())) {
        json_decref(root);
        return -ENOMEM;
    }
    json_array_append_new(o->config_doc, root);
    const char *key;
    json_t *v;
    const char *outer = o->setting_from;
    o->setting_from = path;
    json_object_foreach(given, key, v)
    {
        char why[512];
        const char *s = json_string_value(v);
        int rc = !s || !strcmp(key, "config") || !strcmp(key, "config-out")
                     ? -EINVAL
                     : kvsim_options_set(o, key, s, why, sizeof why);
        if (rc) {
            snprintf(err, errlen, "option --config: %s: options: key '%s': %s", path, key,
                     rc == 1 ? "not an option of a run"
                     : !s    ? "must be a string"
                     : rc == -EINVAL && (!strcmp(key, "config") || !strcmp(key, "config-out"))
                         ? "not allowed in a configuration"
                         : why);
            o->setting_from = outer;
            return -EINVAL;
        }
    }
    o->setting_from = outer;
    return 0;
}

/* The generic part of kvsim_options_set: stores v into the row's member (and its ALSO member).
 * Returns 0, -EINVAL (a nonzero duration below 1 ns), or 1 (an F_SPECIAL row). */
static int apply_field(struct kvsim_options *o, const struct opt *d, const char *value,
                       const struct opt_value *v, char *err, size_t errlen)
{
    char *at = (char *)o + d->off;
    switch (d->field) {
    case F_SPECIAL: return 1;
    case F_U32: *(uint32_t *)at = (uint32_t)v->u; return 0;
    case F_U64: *(uint64_t *)at = v->u; return 0;
    case F_DBL: *(double *)at = v->x; return 0;
    case F_BOOL: *(bool *)at = v->b; return 0;
    case F_NOT_BOOL: *(bool *)at = !v->b; return 0;
    case F_CHOICE_BOOL: *(bool *)at = v->choice == 1; return 0;
    case F_ENUM: *(int *)at = d->values[v->choice]; return 0;
    case F_STR: *(const char **)at = value; return 0;
    case F_SCALED: {
        double y = v->x * d->scale;
        if (y < 0.5 && v->x != 0) { /* only durations have a range reaching below 1 unit */
            snprintf(err, errlen, "option --%s: '%s' is below 1 ns%s", d->name, value,
                     d->min == 0 && !d->min_open ? " (0 means off)" : "");
            return -EINVAL;
        }
        *(int64_t *)at = (int64_t)(y + 0.5);
        if (d->also)
            *(int64_t *)((char *)o + d->also - 1) = *(int64_t *)at;
        return 0;
    }
    }
    return 1;
}

/* The rows whose reading is more than a store (F_SPECIAL): the files --config and --engine-args
 * read where they stand. Returns 0, -EINVAL (err says why) or -ENOMEM. */
static int apply_special(struct kvsim_options *o, const struct opt *d, const char *value, char *err,
                         size_t errlen)
{
    int rc =
        note_read_file(o, d->id == O_CONFIG ? "--config" : "--engine-args", value, err, errlen);
    if (rc)
        return rc;
    if (d->id == O_CONFIG)
        return read_run_config(o, value, err, errlen);
    /* --engine-args: applied where it stands: options after it override its keys, options before
     * it are overridden. A block count it gives wins over a derived capacity, as --num-gpu-blocks
     * does. Whether the file names the block count shows in one read (the file may be a pipe):
     * loaded over a count no file can give (at most INT32_MAX - 2). */
    struct kvsim_replay_config *cfg = &o->replay;
    char e[512];
    struct sched_config sc = cfg->sched;
    sc.num_blocks = UINT32_MAX;
    struct kvsim_parallel_args par = {cfg->data_parallel_size, o->timing.enable_expert_parallel};
    rc = kvsim_engine_args_load(value, &sc, &par, e, sizeof e);
    if (rc) {
        snprintf(err, errlen, "option --engine-args: %s", e);
        return rc == -ENOMEM ? rc : -EINVAL; /* out of memory is not bad input */
    }
    if (sc.num_blocks != UINT32_MAX)
        o->timing.blocks_given = true;
    else
        sc.num_blocks = cfg->sched.num_blocks;
    cfg->sched = sc;
    cfg->data_parallel_size = par.data_parallel_size;
    o->timing.enable_expert_parallel = par.enable_expert_parallel;
    return 0;
}

int kvsim_options_set(struct kvsim_options *o, const char *name, const char *value, char *err,
                      size_t errlen)
{
    const struct opt *d = find_opt(name);
    if (!d)
        return 1;
    struct opt_value v = {0};
    int rc = parse_value(d, value, &v, err, errlen);
    if (rc)
        return rc;
    rc = apply_field(o, d, value, &v, err, errlen);
    if (rc == 1)
        rc = apply_special(o, d, value, err, errlen);
    if (rc == 0) {
        o->given[d - opts] = d->vllm && !strcmp(name, d->vllm) ? d->vllm : d->name;
        o->given_from[d - opts] = o->setting_from;
        if (d->mark)
            *(bool *)((char *)o + d->mark - 1) = true;
    }
    if (rc == 0 && d->group == G_OFFLOAD)
        o->offload_opt = d->name;
    else if (rc == 0 && d->group == G_DISAGG)
        o->disagg_opt = d->name;
    else if (rc == 0 && d->group == G_SYNTH)
        o->synth_opt = d->name;
    return rc;
}

/* ---- timing and capacity --------------------------------------------------------------------- */

void kvsim_timing_opts_default(struct kvsim_timing_opts *t)
{
    memset(t, 0, sizeof *t);
    t->tp = 1;
    /* LLMServingSim's cluster configuration of the shared vLLM runs: 16 GiB/s, 20 us a message */
    t->tp_link_gbps = 16;
    t->tp_link_latency_us = 20;
    t->gpu_memory_utilization = 0.9;
}

int kvsim_timing_resolve(const struct kvsim_timing_opts *t, struct sched_config *sc,
                         struct kvsim_step_model *m, uint64_t *kv_bytes_per_token,
                         struct kvsim_timing *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char why[768];
    if ((t->profiles || t->hardware) && !(t->profiles && t->hardware && t->model)) {
        snprintf(err, errlen,
                 "a profile needs --profiles ROOT, --hardware HW and --model ORG/NAME");
        return -EINVAL;
    }
    if (t->gpu_memory_gib > 0 && !t->model) {
        snprintf(err, errlen, "--gpu-memory-gib needs --model ORG/NAME (its layers and KV heads)");
        return -EINVAL;
    }
    if (t->model && !t->profiles) {
        snprintf(err, errlen,
                 "--model needs --profiles ROOT (ROOT/configs/model/%s.json is its Hugging Face "
                 "config)",
                 t->model);
        return -EINVAL;
    }
    const char *ep = t->expert_parallel_from ? t->expert_parallel_from : "--enable-expert-parallel";
    if (t->enable_expert_parallel && !t->model) {
        snprintf(err, errlen, "%s needs a mixture-of-experts --model (its experts)", ep);
        return -EINVAL;
    }
    if (!t->model)
        return 0;
    struct kvsim_model_arch arch;
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/model/%s.json", t->profiles, t->model);
    int rc = kvsim_model_arch_load(path, t->model, &arch, why, sizeof why);
    if (rc) {
        if (t->model_from)
            snprintf(err, errlen, "%s: %s", t->model_from, why);
        else
            snprintf(err, errlen, "--model %s", why);
        return -EINVAL;
    }
    if (t->enable_expert_parallel && !arch.num_experts) {
        snprintf(err, errlen,
                 "%s: %s %s is dense (no experts to split); vLLM ignores the flag there, kvsim "
                 "refuses it",
                 ep, t->model_from ? "the model" : "--model", t->model);
        return -EINVAL;
    }
    /* with or without a memory size: the profile's MoE layers need whole experts per rank too */
    if (kvsim_expert_parallel_check(&arch, t->tp, t->data_parallel_size, t->enable_expert_parallel,
                                    why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", ep, why);
        return -EINVAL;
    }
    if (t->hardware) {
        struct kvsim_profile_config pc = {
            .root = t->profiles,
            .hardware = t->hardware,
            .model = t->model,
            .tp = t->tp,
            .tp_link_gbps = t->tp_link_gbps,
            .tp_link_latency_ns = (int64_t)(t->tp_link_latency_us * 1e3),
            .data_parallel_size = t->data_parallel_size,
            .enable_expert_parallel = t->enable_expert_parallel,
        };
        if ((rc = kvsim_profile_load(&pc, &out->profile, why, sizeof why))) {
            snprintf(err, errlen, "--profiles %s", why);
            return -EINVAL;
        }
    }
    if (t->gpu_memory_gib > 0) {
        const char *mem = t->gpu_memory_from ? t->gpu_memory_from : "--gpu-memory-gib";
        struct kvsim_gpu_config g = {
            .gpu_memory_gib = t->gpu_memory_gib,
            .gpu_memory_utilization = t->gpu_memory_utilization,
            .tp = t->tp,
            .data_parallel_size = t->data_parallel_size,
            .enable_expert_parallel = t->enable_expert_parallel,
            .block_size = sc->block_size,
            .max_num_batched_tokens = sc->max_num_batched_tokens,
            .max_num_seqs = sc->max_num_seqs,
        };
        if ((rc = kvsim_gpu_capacity_derive(&arch, &g, &out->capacity, why, sizeof why)))
            snprintf(err, errlen, "%s: %s", mem, why);
        else if (out->capacity.num_gpu_blocks > INT32_MAX - 2) {
            snprintf(err, errlen, "%s: %llu blocks are more than kvsim handles", mem,
                     (unsigned long long)out->capacity.num_gpu_blocks);
            rc = -EINVAL;
        } else if (out->capacity.num_gpu_blocks < 2 && !t->blocks_given) {
            /* One block is the null block alone (vLLM's BlockPool): nothing for a request, and
             * the engine refuses it. --num-gpu-blocks, which wins, starts at 2 too. */
            snprintf(err, errlen,
                     "%s: model '%s' at tp %" PRIu32 " leaves room for 1 KV block of %.2f MiB "
                     "beside its weights and activations; a run needs at least 2 (vLLM's null "
                     "block and one for the requests)",
                     mem, t->model, t->tp, (double)out->capacity.block_bytes / (1 << 20));
            rc = -EINVAL;
        }
        if (rc) {
            kvsim_timing_fini(out);
            return -EINVAL;
        }
        if (!t->blocks_given) /* --num-gpu-blocks wins, as num_gpu_blocks_override in vLLM */
            sc->num_blocks = (uint32_t)out->capacity.num_gpu_blocks;
        if (kv_bytes_per_token && !t->kv_bytes_given)
            *kv_bytes_per_token = out->capacity.kv_bytes_per_token;
    }
    m->profile = out->profile;
    return 0;
}

void kvsim_timing_fini(struct kvsim_timing *t)
{
    kvsim_profile_free(t->profile);
    t->profile = NULL;
}

/* ---- options that would do nothing ------------------------------------------------------------
 */

/*
 * Why option id does nothing in the run o describes (its mode: a trace or the built-in workload,
 * aggregated or disaggregated, with or without tiers, a profile, a capacity), or NULL when it
 * applies. Resolve refuses a given option that does nothing (issue #34: nothing is silently
 * ignored); --config-out leaves it out, so that its file reads back. The companions checked
 * elsewhere (an offload option without --g2-blocks, a disaggregation option without
 * --prefill-engines, a synthetic option with a trace) have their own messages.
 */
/* The format the run's trace is read as; KVSIM_TRACE_AUTO when its name does not tell (the
 * loader's error, not ours). */
static enum kvsim_trace_format trace_format(const struct kvsim_replay_config *cfg)
{
    return cfg->trace_opts.format != KVSIM_TRACE_AUTO
               ? cfg->trace_opts.format
               : kvsim_trace_format_from_path(cfg->trace_path);
}

static const char *option_idle(const struct kvsim_options *o, enum opt_id id)
{
    const struct kvsim_replay_config *cfg = &o->replay;
    const struct kvsim_disagg_config *dc = &cfg->disagg;
    const struct kvsim_timing_opts *t = &o->timing;
    bool disagg = dc->prefill_engines > 0;
    switch (id) {
    case O_FORMAT:
    case O_TBS:
    case O_SPEEDUP:
    case O_MAXREQ:
        if (!cfg->trace_path)
            return "it applies to a trace (--trace FILE), and this run replays the built-in "
                   "workload";
        if (id == O_TBS && trace_format(cfg) != KVSIM_TRACE_AUTO &&
            trace_format(cfg) != KVSIM_TRACE_MOONCAKE)
            return "it is the token count of a Mooncake trace's hash ids, and this trace's "
                   "format has none";
        return NULL;
    case O_SEED:
        return cfg->trace_path || cfg->requests
                   ? "it draws the built-in workload, and a trace's replay has nothing random"
                   : NULL;
    case O_ROUTER:
        return disagg ? "disaggregated serving routes with --prefill-router and --decode-router"
                      : NULL;
    case O_KVINDEX: {
        bool kv =
            disagg ? dc->prefill_router == KVSIM_ROUTER_KV || dc->decode_router == KVSIM_ROUTER_KV
                   : cfg->router == KVSIM_ROUTER_KV;
        if (kv && cfg->router_view == KVSIM_ROUTER_VIEW_DELAYED)
            return "the delayed router view always reads the engines' KV events";
        return kv ? NULL : "it is the kv router's overlap source, and no router of this run is kv";
    }
    case O_RVIEW:
    case O_PREDICT: {
        bool kv =
            disagg ? dc->prefill_router == KVSIM_ROUTER_KV || dc->decode_router == KVSIM_ROUTER_KV
                   : cfg->router == KVSIM_ROUTER_KV;
        bool ll = disagg ? dc->prefill_router == KVSIM_ROUTER_LEAST_LOADED ||
                               dc->decode_router == KVSIM_ROUTER_LEAST_LOADED
                         : cfg->router == KVSIM_ROUTER_LEAST_LOADED;
        if (id == O_PREDICT)
            return kv ? NULL : "it is the kv router's prediction, and no router of this run is kv";
        return kv || ll ? NULL
                        : "it is what the kv and least-loaded routers see, and this run has "
                          "neither";
    }
    case O_KVDELAY:
        return cfg->router_view == KVSIM_ROUTER_VIEW_DELAYED ? NULL
                                                             : "it is the delayed router view's "
                                                               "delay (--router-view delayed)";
    case O_TP:
        return t->hardware || t->gpu_memory_gib > 0
                   ? NULL
                   : "it shapes a profile's steps (--hardware) or a derived capacity "
                     "(--gpu-memory-gib)";
    case O_TPGBPS:
    case O_TPLAT:
        return t->hardware && t->tp > 1 ? NULL
                                        : "it prices a profile's tensor-parallel all-reduce "
                                          "(--hardware with --tp above 1)";
    case O_GPUUTIL:
        return t->gpu_memory_gib > 0 ? NULL : "it scales --gpu-memory-gib, which is not given";
    case O_KVBYTES:
        return cfg->offload || disagg ? NULL
                                      : "it sizes offload blocks (--g2-blocks) and KV transfers "
                                        "(--prefill-engines), and this run has neither";
    case O_TSINT:
        return kvsim_outputs_want_timeseries(&cfg->outputs)
                   ? NULL
                   : "it samples --timeseries-out and --html, and neither is given";
    case O_OTHREADS:
        return cfg->offload && !cfg->offload_pool
                   ? "it sizes --offload-executor pool, and the executor is inline"
                   : NULL;
    case O_OSEED:
        return cfg->offload && !(cfg->tiers.pipe.fail_rate > 0)
                   ? "it seeds --offload-fail-rate, which is 0"
                   : NULL;
    default: return NULL;
    }
}

/* Where option `name` was set, for a message: "option --NAME" from the command line or the API,
 * "option --config: FILE: options: key 'NAME'" from a run configuration. */
static const char *option_where(const struct kvsim_options *o, const char *name, char *buf,
                                size_t len)
{
    const struct opt *d = find_opt(name);
    const char *file = d ? o->given_from[d - opts] : NULL;
    if (file)
        snprintf(buf, len, "option --config: %s: options: key '%s'", file, name);
    else
        snprintf(buf, len, "option --%s", name);
    return buf;
}

/* A refusal of a combination of options, some of which a run configuration set, names the file
 * (or files) too: "...; options from --config FILE". */
static void name_config_files(const struct kvsim_options *o, char *err, size_t errlen)
{
    const char *named[4];
    size_t n = 0;
    for (size_t i = 0; i < NUM_OPTS && n < 4; i++) {
        const char *f = o->given[i] ? o->given_from[i] : NULL;
        bool seen = !f || strstr(err, f);
        for (size_t k = 0; k < n && !seen; k++)
            seen = named[k] == f || !strcmp(named[k], f);
        if (seen)
            continue;
        size_t at = strlen(err);
        snprintf(err + at, errlen - at, "%s --config %s", n ? "," : "; options from", f);
        named[n++] = f;
    }
}

/* The first given option that does nothing in this run: 0, or -EINVAL with the message. */
static int check_idle_options(const struct kvsim_options *o, char *err, size_t errlen)
{
    for (size_t i = 0; i < NUM_OPTS; i++) {
        const char *why = o->given[i] ? option_idle(o, opts[i].id) : NULL;
        if (!why)
            continue;
        if (o->given_from[i])
            snprintf(err, errlen, "option --config: %s: options: key '%s' does nothing here: %s",
                     o->given_from[i], o->given[i], why);
        else
            snprintf(err, errlen, "option --%s does nothing here: %s", o->given[i], why);
        return -EINVAL;
    }
    return 0;
}

/* ---- resolving a run ------------------------------------------------------------------------- */

/* The checks of disaggregated serving and the pools' settings. Returns 0, -EINVAL, or -ENOMEM
 * (reading a pool's engine arguments). */
static int resolve_disagg(const struct kvsim_options *o, struct kvsim_replay_config *cfg, char *err,
                          size_t errlen)
{
    struct kvsim_disagg_config *d = &cfg->disagg;
    if (!d->prefill_engines) {
        if (o->disagg_opt) {
            char where[512];
            snprintf(err, errlen, "%s needs --prefill-engines (disaggregated serving is off)",
                     option_where(o, o->disagg_opt, where, sizeof where));
            return -EINVAL;
        }
        return 0;
    }
    const char *why = NULL;
    if (!d->decode_engines)
        why = "option --prefill-engines needs --decode-engines";
    else if (o->engines_given)
        why = "options --engines and --prefill-engines exclude each other (the engines are the "
              "prefill and the decode ones)";
    else if (cfg->offload)
        why = "offload tiers (--g2-blocks) and disaggregated serving do not combine yet";
    else if (cfg->data_parallel_size > 1)
        why = "data parallelism (--data-parallel-size) and disaggregated serving do not combine "
              "yet";
    if (why) {
        snprintf(err, errlen, "%s", why);
        return -EINVAL;
    }
    d->prefill_sched = d->decode_sched = cfg->sched;
    char e[512];
    for (int k = 0; k < 2; k++) { /* a pool file's block count wins; else the run's capacity */
        struct sched_config *sc = k ? &d->decode_sched : &d->prefill_sched;
        const char *file = k ? o->decode_args : o->prefill_args;
        if (!file)
            continue;
        sc->num_blocks = UINT32_MAX; /* no file gives it (at most INT32_MAX - 2) */
        int rc = kvsim_engine_args_load(file, sc, NULL, e, sizeof e);
        if (rc) {
            snprintf(err, errlen, "%s %s", k ? "--decode-engine-args" : "--prefill-engine-args", e);
            return rc == -ENOMEM ? rc : -EINVAL;
        }
        if (sc->num_blocks == UINT32_MAX)
            sc->num_blocks = cfg->kv_capacity == KVSIM_KV_CAPACITY_DEFAULT_TOKENS
                                 ? kvsim_default_kv_blocks(sc->block_size)
                                 : cfg->sched.num_blocks;
    }
    for (int k = 0; k < 2; k++) {
        const struct sched_config *sc = k ? &d->decode_sched : &d->prefill_sched;
        const char *opt = k ? "--decode-engine-args" : "--prefill-engine-args";
        const char *file = k ? o->decode_args : o->prefill_args;
        if (sc->max_num_active_seqs && sc->vllm_contract < 2)
            why = "max_num_active_seqs needs --vllm-contract 2 (vLLM #56758)";
        else if (sc->max_num_queued_reqs && sc->vllm_contract < 2)
            why = "max_num_queued_reqs needs --vllm-contract 2 (vLLM #49445)";
        else if (sc->max_num_active_seqs > sc->max_num_seqs)
            why = "max_num_active_seqs is above the pool's max_num_seqs";
        else if (k && sc->max_num_queued_reqs)
            /* A decode engine's requests come from the prefill side's handoffs: refusing one
             * there would abort its handoff, which kvsim does not model. */
            why = "max_num_queued_reqs is not modeled on the decode pool (the front door of a "
                  "disaggregated request is the prefill engine)";
        if (why) {
            snprintf(err, errlen, "%s%s%s: %s", file ? opt : "the ", file ? " " : "",
                     file ? file : (k ? "decode pool" : "prefill pool"), why);
            return -EINVAL;
        }
    }
    return 0;
}

/*
 * Every step of every engine of the run within the step model's bounds (kvsim_step_model_check),
 * at the batch limits of each pool. Returns 0 or -EINVAL naming the file (--config, the profile)
 * or, for the default polynomial, the limit that stretches it.
 */
static int check_step_model(const struct kvsim_options *o, const struct kvsim_replay_config *cfg,
                            char *err, size_t errlen)
{
    const struct kvsim_disagg_config *d = &cfg->disagg;
    const struct sched_config *pools[2] = {&cfg->sched, NULL};
    if (d->prefill_engines)
        pools[0] = &d->prefill_sched, pools[1] = &d->decode_sched;
    char e[768];
    for (int k = 0; k < 2 && pools[k]; k++) {
        if (!kvsim_step_model_check(&cfg->model, pools[k]->max_num_batched_tokens,
                                    pools[k]->max_num_seqs, e, sizeof e))
            continue;
        if (cfg->model.profile)
            snprintf(err, errlen, "--profiles %s", e);
        else if (o->config_path)
            snprintf(err, errlen, "--config %s: %s", o->config_path, e);
        else
            snprintf(err, errlen,
                     "the default step model at --max-num-batched-tokens %" PRIu32 ": %s",
                     pools[k]->max_num_batched_tokens, e);
        return -EINVAL;
    }
    return 0;
}

static int resolve_run(const struct kvsim_options *o, struct kvsim_run *run, char *err,
                       size_t errlen)
{
    memset(run, 0, sizeof *run);
    struct kvsim_replay_config *cfg = &run->replay;
    *cfg = o->replay;
    struct kvsim_timing_opts topt = o->timing;
    topt.data_parallel_size = cfg->data_parallel_size;
    cfg->enable_expert_parallel = o->timing.enable_expert_parallel;
    cfg->tensor_parallel_size = o->timing.tp ? o->timing.tp : 1;
    int rc = kvsim_timing_resolve(&topt, &cfg->sched, &cfg->model, &cfg->kv_bytes_per_token,
                                  &run->timing, err, errlen);
    if (rc)
        return rc;
    /* The default capacity is tokens: --block-size 32 halves the blocks, not doubles the memory */
    if (o->timing.blocks_given)
        cfg->kv_capacity = KVSIM_KV_CAPACITY_BLOCKS;
    else if (o->timing.gpu_memory_gib > 0)
        cfg->kv_capacity = KVSIM_KV_CAPACITY_GPU_MEMORY;
    else
        cfg->sched.num_blocks = kvsim_default_kv_blocks(cfg->sched.block_size);
    const char *why = NULL;
    if (cfg->sched.max_num_active_seqs && cfg->sched.vllm_contract < 2)
        why = "option --max-num-active-seqs needs --vllm-contract 2 (vLLM #56758)";
    else if (cfg->sched.max_num_queued_reqs && cfg->sched.vllm_contract < 2)
        why = "option --max-num-queued-reqs needs --vllm-contract 2 (vLLM #49445)";
    else if (cfg->sched.max_num_active_seqs > cfg->sched.max_num_seqs)
        why = "option --max-num-active-seqs is above --max-num-seqs (vLLM refuses it too)";
    else if (cfg->g3_shared && cfg->tiers.g3_blocks == 0)
        why = "option --g3-shared needs --g3-blocks N with N > 0 (the shared G3's capacity)";
    else if (cfg->offload &&
             offload_block_bytes(cfg->kv_bytes_per_token, cfg->sched.block_size) == 0)
        why = "--kv-bytes-per-token x --block-size overflows";
    if (why)
        snprintf(err, errlen, "%s", why);
    char where[512];
    if (!why && o->offload_opt && !cfg->offload)
        snprintf(err, errlen, "%s needs --g2-blocks (offload tiers are off)",
                 option_where(o, o->offload_opt, where, sizeof where));
    bool synth_misused = o->synth_opt && (cfg->trace_path || cfg->requests);
    if (!why && !(o->offload_opt && !cfg->offload) && synth_misused)
        snprintf(err, errlen, "%s shapes the synthetic workload: it does not apply to a trace",
                 option_where(o, o->synth_opt, where, sizeof where));
    int drc = 0;
    if (why || (o->offload_opt && !cfg->offload) || synth_misused ||
        (drc = resolve_disagg(o, cfg, err, errlen)) != 0 || check_idle_options(o, err, errlen)) {
        kvsim_run_fini(run);
        return drc == -ENOMEM ? drc : -EINVAL; /* out of memory reading a pool's arguments */
    }
    char e[512];
    if (o->config_path && (rc = kvsim_step_model_load(o->config_path, &cfg->model, e, sizeof e))) {
        snprintf(err, errlen, "--config %s", e);
        kvsim_run_fini(run);
        return rc;
    }
    if ((rc = check_step_model(o, cfg, err, errlen)))
        kvsim_run_fini(run);
    return rc;
}

int kvsim_options_resolve(const struct kvsim_options *o, struct kvsim_run *run, char *err,
                          size_t errlen)
{
    int rc = resolve_run(o, run, err, errlen);
    if (rc)
        name_config_files(o, err, errlen);
    return rc;
}

void kvsim_run_fini(struct kvsim_run *run) { kvsim_timing_fini(&run->timing); }

/* ---- the effective configuration (--config-out) ---------------------------------------------- */

int kvsim_write_text_file(const char *what, const char *path, const char *text, char *err,
                          size_t errlen)
{
    char why[512];
    int rc = kvsim_write_text(path, text, why, sizeof why);
    if (rc)
        snprintf(err, errlen, "%s: %s", what, why);
    return rc;
}

/* The file path names, for comparing outputs: its directory resolved, then its base name (the
 * file itself may not exist yet). */
static void output_identity(const char *path, char *buf, size_t len)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (slash == path)
        snprintf(dir, sizeof dir, "/");
    char real[PATH_MAX];
    snprintf(buf, len, "%s/%s", realpath(dir, real) ? real : dir, slash ? slash + 1 : path);
}

int kvsim_options_check_outputs(const struct kvsim_options *o, char *err, size_t errlen)
{
    enum { MAX_OUTPUTS = 8 }; /* the table has 6 output rows */
    struct {
        const char *option, *path;
    } outs[MAX_OUTPUTS];
    size_t N = 0;
    for (size_t i = 0; i < NUM_OPTS; i++) /* the table's output rows, in its order */
        if (opts[i].omit == OMIT_OUTPUT) {
            if (N == MAX_OUTPUTS) {
                snprintf(err, errlen, "more output options than the check holds (kvsim bug)");
                return -EOVERFLOW;
            }
            outs[N].option = opts[i].name;
            outs[N++].path = *(const char *const *)((const char *)o + opts[i].off);
        }
    /* What the run reads: the trace, the profiles' root (nothing is written inside it), the
     * pools' engine arguments, every --config and --engine-args file. */
    size_t num_inputs = 0;
    struct kvsim_input_path *inputs = malloc((o->num_read_files + 4) * sizeof *inputs);
    if (!inputs) {
        snprintf(err, errlen, "out of memory checking the outputs");
        return -ENOMEM;
    }
    inputs[num_inputs++] = (struct kvsim_input_path){"the trace", o->replay.trace_path, false};
    inputs[num_inputs++] =
        (struct kvsim_input_path){"the profiles' root (--profiles)", o->timing.profiles, true};
    inputs[num_inputs++] =
        (struct kvsim_input_path){"--prefill-engine-args", o->prefill_args, false};
    inputs[num_inputs++] = (struct kvsim_input_path){"--decode-engine-args", o->decode_args, false};
    for (size_t i = 0; i < o->num_read_files; i++)
        inputs[num_inputs++] =
            (struct kvsim_input_path){o->read_options[i], o->read_files[i], false};
    char ids[MAX_OUTPUTS][4096 + 256];
    for (size_t i = 0; i < N; i++) {
        ids[i][0] = 0;
        if (!outs[i].path)
            continue;
        bool is_stdout = strcmp(outs[i].path, "-") == 0;
        if (is_stdout)
            snprintf(ids[i], sizeof ids[i], "-");
        else
            output_identity(outs[i].path, ids[i], sizeof ids[i]);
        for (size_t j = 0; j < i; j++)
            if (ids[j][0] && strcmp(ids[i], ids[j]) == 0 &&
                (is_stdout || strncmp(ids[i], "/dev/", 5) != 0)) {
                snprintf(err, errlen, "options --%s and --%s name the same %s (%s)", outs[j].option,
                         outs[i].option, is_stdout ? "output" : "file",
                         is_stdout ? "standard output" : outs[i].path);
                free(inputs);
                return -EINVAL;
            }
        char why[1024];
        int rc = kvsim_output_check_inputs(outs[i].path, inputs, num_inputs, why, sizeof why);
        if (rc == 0)
            rc = kvsim_output_check(outs[i].path, why, sizeof why);
        if (rc) {
            snprintf(err, errlen, "option --%s: %s", outs[i].option, why);
            free(inputs);
            return rc;
        }
    }
    free(inputs);
    return 0;
}

/* The generic part of effective_value: the row's member as --config reads it, false when
 * OMIT_ZERO and it is 0, false or NULL (unless keep_zero). */
static bool field_value(const struct kvsim_options *o, const struct opt *d, char *buf, size_t len,
                        bool keep_zero)
{
    const char *at = (const char *)o + d->off;
    uint64_t u = 0;
    double x = 0;
    const char *s = NULL;
    bool off; /* 0, false or NULL */
    switch (d->field) {
    case F_U32:
        u = *(const uint32_t *)at;
        off = u == 0;
        break;
    case F_U64:
        u = *(const uint64_t *)at;
        off = u == 0;
        break;
    case F_DBL:
        x = *(const double *)at;
        off = !(x > 0);
        break;
    case F_SCALED:
        x = (double)*(const int64_t *)at / d->scale;
        off = !(x > 0);
        break;
    case F_ENUM:
        for (int i = 0; !s && d->choices[i]; i++)
            s = d->values[i] == *(const int *)at ? d->choices[i] : NULL;
        if (!s)
            return false;            /* a value no choice names (a trace format by its extension) */
        off = *(const int *)at == 0; /* OMIT_ZERO: the first value is off */
        break;
    case F_BOOL:
        off = !*(const bool *)at;
        s = off ? "false" : "true";
        break;
    case F_CHOICE_BOOL:
        off = !*(const bool *)at;
        s = d->choices[!off];
        break;
    case F_STR:
        s = *(const char *const *)at;
        off = !s;
        break;
    default: return false; /* F_SPECIAL, F_NOT_BOOL */
    }
    if ((d->omit == OMIT_ZERO && off && !keep_zero) || (d->field == F_STR && !s))
        return false;
    if (s)
        snprintf(buf, len, "%s", s);
    else if (d->field == F_U32 || d->field == F_U64)
        snprintf(buf, len, "%" PRIu64, u);
    else
        base_format_double(buf, len, x); /* the shortest text that reads back */
    return true;
}

/* The effective value of option d as --config reads it into buf. Returns false when the option
 * is left out: it does nothing in this run (read back, it would be refused), an output, an alias
 * or a negation, an option of tiers, pools or a workload not in use, or what the run derives. */
static bool effective_value(const struct kvsim_options *o, const struct opt *d, char *buf,
                            size_t len)
{
    const struct kvsim_replay_config *cfg = &o->replay;
    bool disagg = cfg->disagg.prefill_engines > 0;
    if (option_idle(o, d->id) || d->omit >= OMIT_ALWAYS || (d->omit == OMIT_DISAGG && disagg) ||
        (d->group == G_OFFLOAD && !cfg->offload) || (d->group == G_DISAGG && !disagg))
        return false;
    bool given = d->mark && *(const bool *)((const char *)o + d->mark - 1);
    if ((d->omit == OMIT_DERIVED && o->timing.gpu_memory_gib > 0 && !given) ||
        (d->omit == OMIT_UNGIVEN && !given))
        return false; /* a capacity the run derives */
    if (d->group == G_SYNTH && (cfg->trace_path || (d->id == O_SY_SESS && cfg->synth.num_requests)))
        return false; /* a trace's run, or the count --synthetic-requests gives */
    return field_value(o, d, buf, len, false);
}

char *kvsim_options_config_text(const struct kvsim_options *o, const struct kvsim_run *run)
{
    const struct kvsim_step_model *m = &run->replay.model;
    json_t *root = json_object(), *values = json_object();
    bool ok = root && values;
    for (size_t i = 0; ok && i < NUM_OPTS; i++) {
        char buf[1024];
        if (effective_value(o, &opts[i], buf, sizeof buf))
            ok = json_object_set_new(values, opts[i].name, json_string(buf)) == 0;
    }
    json_t *sm = json_pack("{s:[f,f,f],s:[f,f,f],s:f}", "prefill_ms", m->prefill_ms[0],
                           m->prefill_ms[1], m->prefill_ms[2], "decode_ms", m->decode_ms[0],
                           m->decode_ms[1], m->decode_ms[2], "decode_floor_ms", m->decode_floor_ms);
    /* root owns what it is given from here on, even when a set fails */
    ok = json_object_set_new(root, "format", json_string("kvsim-config-1")) == 0 && ok;
    ok = json_object_set_new(root, "kvsim", json_string(kvsim_version())) == 0 && ok;
    ok = json_object_set_new(root, "options", values) == 0 && ok;
    ok = json_object_set_new(root, "step_model", sm) == 0 && ok;
    ok = json_object_set_new(root, "speedup_ratio", json_real(m->speedup_ratio)) == 0 && ok;
    ok = json_object_set_new(root, "step_overhead_ms", json_real(m->step_overhead_ms)) == 0 && ok;
    char *text =
        ok ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))
           : NULL;
    json_decref(root);
    return text;
}
