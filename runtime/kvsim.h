/*
 * kvsim.h - kvsim's public C API, installed as <kvsim/kvsim.h>: the one header an embedder
 * includes (docs/api.md is the walkthrough and the guarantees).
 *
 * What it offers:
 *   - a configuration object, set by name with the options of `kvsim replay` (the same names
 *     and ranges: "max-num-seqs", "block-size", "profiles", "g2-blocks", ...);
 *   - an engine you drive yourself: add requests at virtual times, step it, run it to a time or
 *     to its next event, read what happened (tokens, finishes, preemptions), its load and KV
 *     state, its KV events (the stream a KV-aware router consumes), per-request records and its
 *     report;
 *   - the multi-engine replay of `kvsim replay`, from a configuration, over a trace file or a
 *     list of requests, returning the report as a struct and as JSON.
 *
 * Threads. Nothing here has global state. An engine (and a configuration) belongs to one thread
 * at a time: call its functions from one thread, or hand it to another across a synchronisation
 * of your own. Different engines on different threads are independent. kvsim_replay starts and
 * joins its own worker threads; an engine starts none (unless its configuration asks for the
 * offload thread pool, "offload-executor" = "pool").
 *
 * Time. Virtual time is int64 nanoseconds from 0; an engine's clock only moves forward.
 *
 * Errors are negative errno values (kvsim's own meanings below, kvsim_strerror); functions that
 * can fail for a reason worth reading leave a one-line message (kvsim_config_error,
 * kvsim_engine_errmsg). Nothing aborts the process on bad input.
 *
 * ABI. The structs are opaque, except the small ones below whose first field is their size
 * (fill it with sizeof, or start from the *_INIT macros or the kvsim_*_init() functions, which
 * work in C and C++ alike): a later version may append fields and still read yours.
 * KVSIM_API_VERSION changes when something incompatible does.
 */
#ifndef KVSIM_KVSIM_H
#define KVSIM_KVSIM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define KVSIM_API __attribute__((visibility("default")))
#else
#define KVSIM_API
#endif

/* ---- version and errors ---------------------------------------------------------------------- */

#define KVSIM_VERSION_MAJOR 0
#define KVSIM_VERSION_MINOR 2
#define KVSIM_VERSION_PATCH 0
/* The version as one comparable number: 0xMMmmpp. */
#define KVSIM_VERSION_HEX                                                                          \
    ((KVSIM_VERSION_MAJOR << 16) | (KVSIM_VERSION_MINOR << 8) | KVSIM_VERSION_PATCH)
/* Incremented on any incompatible change of this header. */
#define KVSIM_API_VERSION 1

/* "kvsim X.Y.Z": the library's version string. Never NULL. Any thread. */
KVSIM_API const char *kvsim_version(void);
/* KVSIM_VERSION_HEX of the library actually loaded (compare with the header's). Any thread. */
KVSIM_API unsigned kvsim_version_hex(void);
/* The allocator this process uses: "jemalloc" when its mallctl is visible, else "libc". Any
 * thread. */
KVSIM_API const char *kvsim_allocator(void);

/*
 * The codes kvsim gives its own meaning: XX(NAME, errno, message). KVSIM_E<NAME> is -errno.
 * Every other negative errno keeps the C library's meaning.
 */
#define KVSIM_ERRNO_MAP(XX)                                                                        \
    XX(DEADEND, EDEADLK,                                                                           \
       "dead end: unfinished requests that no step, transfer or arrival can "                      \
       "wake")                                                                                     \
    XX(INVARIANT, EUCLEAN, "invariant violation (ownership, queue or capacity check failed)")      \
    XX(STALE, ESTALE, "stale allocation plan: the pool changed since it was prepared")             \
    XX(SCENARIO, EBADMSG, "scenario failed: an expectation or a checked rule did not hold")        \
    XX(NOREPRO, EPROTO, "the failure does not reproduce the same way")                             \
    XX(FINISHED, EALREADY, "the request has already finished")

enum {
#define KVSIM__ERRNO_ENUM(name, err, msg) KVSIM_E##name = -(err),
    KVSIM_ERRNO_MAP(KVSIM__ERRNO_ENUM)
#undef KVSIM__ERRNO_ENUM
};

/*
 * kvsim_strerror - what error code err (a negative errno) means: kvsim's meaning for the codes
 * of KVSIM_ERRNO_MAP, the C library's otherwise ("Unknown error" for anything else, 0 gives
 * "Success"). A static string; any thread.
 */
KVSIM_API const char *kvsim_strerror(int err);

/* Frees a string this API returned (kvsim_config_json, kvsim_engine_report_json, ...). Any
 * thread. */
KVSIM_API void kvsim_free(void *p);

/* ---- configuration ------------------------------------------------------------------------- */

/* Threads: a configuration belongs to one thread at a time (its functions write its error
 * message); kvsim_engine_new and kvsim_replay read it on the calling thread and keep nothing. */
typedef struct kvsim_config kvsim_config_t;

/* A configuration with `kvsim replay`'s defaults. Returns 0 and *out, or -ENOMEM. */
KVSIM_API int kvsim_config_new(kvsim_config_t **out);
KVSIM_API void kvsim_config_free(kvsim_config_t *cfg);

/*
 * kvsim_config_set - set one option by its `kvsim replay` long name, with or without the
 * leading dashes, '_' and '-' alike ("max-num-seqs", "max_num_seqs"), and its value as the
 * command line would spell it; a flag takes "true" or "false" (NULL means "true"). The names,
 * ranges and defaults are those of `kvsim replay --help` (docs/api.md lists them), plus a few
 * vLLM engine arguments the command line reads from --*-engine-args files:
 * long-prefill-token-threshold, enable-prefix-caching, enable-chunked-prefill,
 * async-scheduling, scheduling-policy (fcfs|priority); "num-gpu-blocks-override" is an alias
 * of "num-gpu-blocks", and "kv-events" (an engine keeps its KV events for
 * kvsim_engine_kv_events; default false).
 * Returns 0, or -EINVAL (an unknown name or a bad value: kvsim_config_error says which, as
 * "option --NAME: ..."). Later settings override earlier ones. Strings are copied.
 */
KVSIM_API int kvsim_config_set(kvsim_config_t *cfg, const char *name, const char *value);
/*
 * kvsim_config_set_json - set every key of a JSON object as kvsim_config_set would (numbers,
 * strings and booleans; a key's value may also be null to leave it unchanged), in the object's
 * order. Returns 0, or -EINVAL at the first bad key (the keys before it stay set).
 */
KVSIM_API int kvsim_config_set_json(kvsim_config_t *cfg, const char *json_object);
/* The last error message of cfg ("" if none). Valid until the next call on cfg. */
KVSIM_API const char *kvsim_config_error(const kvsim_config_t *cfg);
/*
 * kvsim_config_json - every option that was set, as a JSON object of canonical name -> value
 * (strings as given, a flag's NULL as "true"; in the order first set, a later setting of a
 * name replacing the earlier value), which
 * kvsim_config_set_json reads back into an equal configuration. Free with kvsim_free. NULL
 * when memory runs out.
 */
KVSIM_API char *kvsim_config_json(const kvsim_config_t *cfg);

/* ---- requests ------------------------------------------------------------------------------ */

/*
 * A request to add to an engine. The prompt is either token ids (tokens[0..num_tokens)) or, as
 * in Mooncake traces, hash ids: hash_ids[0..num_hash_ids), one per hash_block_size tokens
 * (equal ids at equal positions mean equal content), with input_len tokens in all (the last
 * block may be partial; 0 = num_hash_ids * hash_block_size); or neither: input_len tokens
 * unique to this request. Token ids and hash ids are below 2^31 (kvsim keeps the ids above for
 * unique prompts and outputs; a larger one is refused, never folded).
 */
typedef struct kvsim_request {
    size_t size;        /* sizeof(kvsim_request_t) */
    uint64_t id;        /* the caller's id: unique among the engine's requests */
    int64_t arrival_ns; /* virtual arrival time, >= the engine's clock */
    const uint32_t *tokens;
    uint32_t num_tokens;
    const uint64_t *hash_ids;
    uint32_t num_hash_ids;
    uint32_t hash_block_size;
    uint32_t input_len;
    uint32_t max_tokens; /* output cap (>= 1): finish reason "length" */
    uint32_t min_tokens; /* no stop before this many outputs (<= max_tokens) */
    /* The model's own answer length: the output ends ("stop", as at an EOS) after this many
     * tokens, unless min_tokens forbids it then; 0 = no stop, run to max_tokens. */
    uint32_t stop_after;
    int64_t priority; /* scheduling-policy priority: lower is served first (vLLM) */
} kvsim_request_t;
/* A kvsim_request_t with its size set and max_tokens 16. C++ before C++20 has no designated
 * initializers: there the macro is this function. */
static inline kvsim_request_t kvsim_request_init(void)
{
    kvsim_request_t x;
    memset(&x, 0, sizeof x);
    x.size = sizeof x;
    x.max_tokens = 16;
    return x;
}
#ifdef __cplusplus
#define KVSIM_REQUEST_INIT kvsim_request_init()
#else
#define KVSIM_REQUEST_INIT                                                                         \
    {                                                                                              \
        .size = sizeof(kvsim_request_t), .max_tokens = 16                                          \
    }
#endif

/* ---- an engine you step ---------------------------------------------------------------------- */

/* Threads: every kvsim_engine_* function is called by the engine's owner (one thread at a
 * time); an event or KV-event callback runs on that thread, inside the call that produced it. */
typedef struct kvsim_api_engine kvsim_engine_t;

/*
 * kvsim_engine_new - one engine of cfg's engine settings (block size, blocks, vLLM limits, the
 * step model or profile, offload tiers). The replay-level options (trace, engines, router,
 * threads, disaggregation, outputs) do not apply and are ignored. Returns 0 and *out, or
 * -EINVAL (kvsim_config_error(cfg) says why: a profile that cannot be read, an impossible
 * capacity, ...), -ENOENT, -ENOMEM. cfg is read (and its error message written), never kept:
 * it may be changed or freed afterwards.
 */
KVSIM_API int kvsim_engine_new(kvsim_config_t *cfg, kvsim_engine_t **out);
KVSIM_API void kvsim_engine_free(kvsim_engine_t *e);

/*
 * kvsim_engine_add - add a request (see kvsim_request_t); it enters the engine's queue at its
 * arrival_ns, which may lie in the future (the engine holds it until then). A request that can
 * never run (longer than max-model-len, or bigger than the whole KV cache) is accepted and
 * finishes at its arrival as KVSIM_FINISH_REJECTED. Returns 0, -EINVAL (a bad field, an
 * arrival before the engine's clock, an id already used: kvsim_engine_errmsg says which),
 * -ENOMEM.
 */
KVSIM_API int kvsim_engine_add(kvsim_engine_t *e, const kvsim_request_t *req);
/*
 * kvsim_engine_abort - abort request id, as vLLM does between steps: its KV is freed and it
 * finishes ABORTED at the clock when no step runs (or it has not arrived yet), else at the end
 * of the running step (whose token, if any, comes first; a request that step finishes ends
 * normally). Returns 0, -ENOENT (unknown id) or KVSIM_EFINISHED (already finished).
 */
KVSIM_API int kvsim_engine_abort(kvsim_engine_t *e, uint64_t id);

/* What happened, in time order. */
typedef enum kvsim_event_kind {
    KVSIM_EVENT_SCHEDULED = 0, /* admitted (again, after a preemption): a = cached prompt tokens
                                * on the first admission */
    KVSIM_EVENT_TOKEN,         /* an output token: a = its index (0 = the first) */
    KVSIM_EVENT_PREEMPTED,     /* its KV was freed; it will be scheduled again */
    KVSIM_EVENT_FINISHED,      /* done: a = enum kvsim_finish_reason, b = output tokens */
} kvsim_event_kind_t;
typedef enum kvsim_finish_reason {
    KVSIM_FINISH_STOP = 0, /* stop_after reached */
    KVSIM_FINISH_LENGTH,   /* max_tokens reached */
    KVSIM_FINISH_ABORTED,  /* kvsim_engine_abort */
    KVSIM_FINISH_REJECTED, /* could never run here */
} kvsim_finish_reason_t;
/* "stop", "length", "abort", "rejected"; "?" otherwise. */
KVSIM_API const char *kvsim_finish_reason_name(int reason);
typedef struct kvsim_event {
    int64_t t_ns;  /* virtual time */
    uint64_t id;   /* the request */
    uint32_t kind; /* kvsim_event_kind_t */
    uint32_t a, b; /* what the kind says */
} kvsim_event_t;

/*
 * Advancing. Each returns the number of events now waiting to be read (>= 0), or a negative
 * errno: KVSIM_EDEADEND (unfinished requests that nothing can ever wake: a request whose KV
 * never fits; kvsim_engine_errmsg says which), KVSIM_EINVARIANT (with "check-invariants"),
 * -EOVERFLOW (a step or transfer would end past the int64 nanosecond clock: kvsim_engine_errmsg
 * names it, the step and the value), -ENOMEM. After an error the engine is unusable except for
 * observing and freeing.
 *
 * kvsim_engine_run_until - process everything that happens at or before t (arrivals, steps,
 *   offload transfers); the clock becomes t.
 * kvsim_engine_step - run to the end of the next engine step (starting one if the engine is
 *   idle with work, after waiting for the next arrival if it holds nothing else); the clock
 *   becomes that step's end. Nothing to do at all: returns the waiting count, clock unchanged.
 * kvsim_engine_run_next - run to the next instant anything happens (a step's end, an arrival,
 *   a transfer's end); nothing pending: unchanged.
 */
KVSIM_API int kvsim_engine_run_until(kvsim_engine_t *e, int64_t t_ns);
KVSIM_API int kvsim_engine_step(kvsim_engine_t *e);
KVSIM_API int kvsim_engine_run_next(kvsim_engine_t *e);
/* The engine's clock, and the next instant anything happens (INT64_MAX: nothing pending). */
KVSIM_API int64_t kvsim_engine_now(const kvsim_engine_t *e);
KVSIM_API int64_t kvsim_engine_next_time(const kvsim_engine_t *e);

/*
 * kvsim_engine_events - move up to cap waiting events into buf, oldest first. Returns how many
 * it moved; the rest keep waiting. Events accumulate until read (memory grows with them).
 */
KVSIM_API size_t kvsim_engine_events(kvsim_engine_t *e, kvsim_event_t *buf, size_t cap);
/* Instead of queueing: fn receives each event as it happens (NULL: queue again). Events
 * already waiting stay queued. fn must not call back into e. */
typedef void (*kvsim_event_fn)(void *ctx, const kvsim_event_t *ev);
KVSIM_API void kvsim_engine_set_event_callback(kvsim_engine_t *e, kvsim_event_fn fn, void *ctx);

/* The figures routers read (vLLM's scheduler stats), as of the clock. */
typedef struct kvsim_load {
    size_t size; /* sizeof(kvsim_load_t) */
    int64_t now_ns;
    uint32_t num_running;    /* requests in the running set */
    uint32_t num_waiting;    /* admitted to the queue, not running (preempted ones included) */
    uint32_t num_pending;    /* added, arrival still in the future */
    uint32_t num_unfinished; /* arrived and not finished */
    uint32_t total_blocks;   /* usable KV blocks (the null block excluded) */
    uint32_t free_blocks;    /* free or evictable (cached, unreferenced) */
    uint32_t active_blocks;  /* referenced by requests */
    double kv_usage;         /* active / total, as vLLM's kv_cache_usage */
    uint64_t queued_prompt_tokens; /* prompt tokens waiting for their first admission */
    uint64_t steps, preemptions;
    /* Prompt tokens at first admissions, and those of them the prefix cache held (vLLM's
     * prefix cache queries and hits, counted once per request). */
    uint64_t prefix_queries, prefix_hits;
} kvsim_load_t;
/* A kvsim_load_t with its size set. C++ before C++20 has no designated initializers:
 * there the macro is this function. */
static inline kvsim_load_t kvsim_load_init(void)
{
    kvsim_load_t x;
    memset(&x, 0, sizeof x);
    x.size = sizeof x;
    return x;
}
#ifdef __cplusplus
#define KVSIM_LOAD_INIT kvsim_load_init()
#else
#define KVSIM_LOAD_INIT                                                                            \
    {                                                                                              \
        .size = sizeof(kvsim_load_t)                                                               \
    }
#endif
/* Fills *out (up to out->size bytes). Returns 0 or -EINVAL (size too small). */
KVSIM_API int kvsim_engine_load(const kvsim_engine_t *e, kvsim_load_t *out);

/* One KV event (config "kv-events" = true): blocks entering or leaving the prefix cache. */
typedef enum kvsim_kv_event_kind {
    KVSIM_KV_STORED = 0, /* hashes[0..n) entered, in order, after parent_hash (if has_parent) */
    KVSIM_KV_REMOVED,    /* hashes[0..n) were evicted */
    KVSIM_KV_CLEARED,    /* the whole prefix cache was reset */
} kvsim_kv_event_kind_t;
typedef struct kvsim_kv_event {
    uint32_t kind; /* kvsim_kv_event_kind_t */
    uint32_t has_parent;
    uint64_t parent_hash;
    uint32_t num_hashes;
    const uint64_t *hashes; /* valid during the callback only */
} kvsim_kv_event_t;
typedef void (*kvsim_kv_event_fn)(void *ctx, const kvsim_kv_event_t *ev);
/*
 * kvsim_engine_kv_events - hand every KV event recorded since the last call to fn, in order,
 * and forget them. Returns the count, or -EINVAL when the configuration did not enable
 * "kv-events". Block hashes chain over the prompt (vLLM's): equal hashes on two engines mean
 * equal token prefixes.
 */
KVSIM_API long kvsim_engine_kv_events(kvsim_engine_t *e, kvsim_kv_event_fn fn, void *ctx);
/*
 * kvsim_engine_prompt_hashes - the block hashes this engine would give the full blocks of
 * req's prompt (at most cap written; returns how many full blocks there are, or -EINVAL):
 * what a KV-aware router matches against the KV events. A prompt given by input_len alone is
 * unique and matches nothing: 0. Needs no state of the engine's cache.
 */
KVSIM_API long kvsim_engine_prompt_hashes(const kvsim_engine_t *e, const kvsim_request_t *req,
                                          uint64_t *hashes, size_t cap);

/* One request's record (times in virtual ns; -1 = has not happened). */
typedef struct kvsim_record {
    size_t size; /* sizeof(kvsim_record_t) */
    uint64_t id;
    int64_t arrival_ns, first_scheduled_ns, first_token_ns, last_token_ns, finish_ns;
    uint32_t input_len, output_tokens, cached_tokens, preemptions;
    int32_t finish_reason; /* kvsim_finish_reason_t, or -1 while unfinished */
} kvsim_record_t;
/* A kvsim_record_t with its size set. C++ before C++20 has no designated initializers:
 * there the macro is this function. */
static inline kvsim_record_t kvsim_record_init(void)
{
    kvsim_record_t x;
    memset(&x, 0, sizeof x);
    x.size = sizeof x;
    return x;
}
#ifdef __cplusplus
#define KVSIM_RECORD_INIT kvsim_record_init()
#else
#define KVSIM_RECORD_INIT                                                                          \
    {                                                                                              \
        .size = sizeof(kvsim_record_t)                                                             \
    }
#endif
/* Fills *out for request id. Returns 0, -ENOENT (unknown id) or -EINVAL (size). Records stay
 * for the engine's lifetime (about 100 bytes a request). */
KVSIM_API int kvsim_engine_record(const kvsim_engine_t *e, uint64_t id, kvsim_record_t *out);

/*
 * kvsim_engine_report_json - the report of every request added so far, as `kvsim replay
 * --report` writes it (latencies of finished requests; unfinished ones count as incomplete).
 * Free with kvsim_free. NULL when memory runs out.
 */
KVSIM_API char *kvsim_engine_report_json(const kvsim_engine_t *e);
/* The last error message of e ("" if none). */
KVSIM_API const char *kvsim_engine_errmsg(const kvsim_engine_t *e);

/* ---- the multi-engine replay ------------------------------------------------------------------
 */

/* Threads: kvsim_replay and kvsim_replay_requests are called from one thread (the owner of
 * cfg); they start and join the replay's workers ("threads") before returning. */

/* The headline figures of a replay's report (the JSON has everything). Latencies in ms. */
typedef struct kvsim_summary {
    size_t size; /* sizeof(kvsim_summary_t) */
    uint64_t num_requests, completed, rejected, incomplete, aborted, preemptions;
    uint64_t input_tokens, output_tokens, cached_tokens;
    double prefix_cache_reuse; /* cached / input tokens of completed requests */
    double duration_s, requests_per_s, output_tokens_per_s;
    double ttft_mean_ms, ttft_p50_ms, ttft_p99_ms;
    double tpot_mean_ms, tpot_p50_ms, tpot_p99_ms;
    double itl_p50_ms, itl_p99_ms; /* AIPerf's, per request (= TPOT) */
    double e2e_mean_ms, e2e_p50_ms, e2e_p99_ms;
    double token_gap_p50_ms, token_gap_p99_ms; /* every inter-token gap pooled */
} kvsim_summary_t;
/* A kvsim_summary_t with its size set. C++ before C++20 has no designated initializers:
 * there the macro is this function. */
static inline kvsim_summary_t kvsim_summary_init(void)
{
    kvsim_summary_t x;
    memset(&x, 0, sizeof x);
    x.size = sizeof x;
    return x;
}
#ifdef __cplusplus
#define KVSIM_SUMMARY_INIT kvsim_summary_init()
#else
#define KVSIM_SUMMARY_INIT                                                                         \
    {                                                                                              \
        .size = sizeof(kvsim_summary_t)                                                            \
    }
#endif

/*
 * kvsim_replay - `kvsim replay` with cfg's options: its trace ("trace", "format", ...; none:
 * the built-in synthetic workload), engines, router, threads, offload, disaggregation, and its
 * outputs ("requests-out", "handoff-events"; "report" writes the JSON file too). Fills *summary
 * (if not NULL) and *report_json (if not NULL; free with kvsim_free). Returns 0, or -EINVAL /
 * -ENOENT (bad input or configuration), -EOVERFLOW (a step, transfer or session turn would end
 * past the int64 nanosecond clock), KVSIM_EDEADEND, KVSIM_EINVARIANT, -ENOMEM, with the
 * message in kvsim_config_error(cfg) (cfg is not otherwise changed).
 */
KVSIM_API int kvsim_replay(kvsim_config_t *cfg, kvsim_summary_t *summary, char **report_json);
/*
 * kvsim_replay_requests - the same over reqs[0..n) instead of a trace: prompts as hash ids
 * (one hash_block_size for all of them) or as input_len alone (unique prompts); token prompts
 * are refused (-EINVAL). Arrivals need not be sorted. Output length: stop_after if set, else
 * max_tokens.
 */
KVSIM_API int kvsim_replay_requests(kvsim_config_t *cfg, const kvsim_request_t *reqs, size_t n,
                                    kvsim_summary_t *summary, char **report_json);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_KVSIM_H */
