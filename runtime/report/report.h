/*
 * report.h - replay metrics: per-request records, the ITL quantile sketch, and the report.
 *
 * The replay runtime feeds events (arrival, admission, preemption, each
 * output token, finish, reject) into a collector that holds one fixed-size record per request,
 * allocated once for the R requests known up front; nothing is stored per token. Inter-token
 * latencies (ITL) also go into a deterministic, mergeable log-bucket quantile sketch
 * (DDSketch-style), one per worker thread. At the end, kvsim_metrics_summarize() derives every
 * statistic from the records (exact, sorted percentiles) and from the merged sketches (ITL), and
 * the report is printed as a table, written as JSON, and the records as JSONL.
 *
 * Threads. A request is owned by one engine at a time and an engine by one worker thread; only
 * the thread that currently owns request r may call an event function for r, so records need no
 * atomics. A request that moves to another thread (routing, a prefill -> decode handoff) must do
 * so across a happens-before edge (the epoch barrier). kvsim_metrics_on_token() also writes the
 * sketch of the index it is given, which no other thread may use meanwhile (the replay: the
 * engine's id, since its threads take engines dynamically). Everything
 * else (create, destroy, mark_incomplete, summarize, the writers) runs while no worker is
 * feeding events, typically after they have been joined.
 *
 * Determinism. Results are bit-identical for any thread count: records are keyed by request
 * index, sketches merge by adding integer bucket counts (commutative and associative), and every
 * floating-point sum is computed at the end in request-index order, never per thread.
 *
 * Errors are negative errno values.
 */
#ifndef KVSIM_REPORT_H
#define KVSIM_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvsim_export.h"

#include "sched/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An unset virtual time (an event that has not happened). */
#define KVSIM_TIME_NONE INT64_MIN

/* ---- the ITL quantile sketch --------------------------------------------------------------- */

/*
 * A DDSketch-style quantile sketch over non-negative int64 values (nanoseconds).
 *
 * A value v >= 1 goes to bucket key k = ceil(log_gamma(v)), gamma = (1 + a) / (1 - a) with
 * a = KVSIM_SKETCH_ALPHA = 0.001, so bucket k holds (gamma^(k-1), gamma^k]; v = 0 is counted
 * apart. A bucket is reported as its representative value 2 * gamma^k / (gamma + 1), whose
 * relative distance to any value of the bucket is at most (gamma - 1) / (gamma + 1) = a. So a
 * quantile is within 0.1% (relative) of the exact value of the same rank, up to rounding of a
 * few ulps at bucket boundaries; the result is also clamped to the exact [min, max], which
 * makes rank 1 and rank count exact. For values in [1, INT64_MAX] keys lie in [0, ~21,800], so
 * a sketch never holds more than that many buckets (about 175 KB).
 *
 * Keys are computed with the C library's log(): identical for a given build, whatever the
 * number or order of threads. Merging adds bucket counts, so merge order never matters.
 */
#define KVSIM_SKETCH_ALPHA 0.001

struct kvsim_sketch {
    uint64_t *bins;      /* bins[i] counts the values of key offset + i; NULL while empty */
    int32_t offset;      /* key of bins[0] */
    uint32_t num_bins;   /* entries allocated in bins[] */
    uint64_t zero_count; /* values equal to 0 */
    uint64_t count;      /* all values, including zeros */
    int64_t min;         /* exact smallest value (meaningless while count is 0) */
    int64_t max;         /* exact largest value (meaningless while count is 0) */
    int64_t last_value;  /* one-entry key cache: the last value added (-1: none) */
    int32_t last_key;    /* ... and its key */
};

/* Initializes an empty sketch. Allocates nothing; cannot fail. */
KVSIM_EXTERN void kvsim_sketch_init(struct kvsim_sketch *s);
/* Frees the buckets; the sketch is empty (re-initialized) afterwards. Accepts NULL. */
KVSIM_EXTERN void kvsim_sketch_fini(struct kvsim_sketch *s);
/*
 * kvsim_sketch_add - count one value. Amortized O(1): the bucket array grows geometrically
 * and is bounded (see above). Returns 0, -EINVAL for a negative value, or -ENOMEM (the sketch
 * is unchanged).
 */
KVSIM_EXTERN int kvsim_sketch_add(struct kvsim_sketch *s, int64_t v);
/*
 * kvsim_sketch_add_two - count na values a and nb values b (either count may be 0): what
 * na + nb kvsim_sketch_add calls do, in one. Returns 0, -EINVAL for a negative value counted,
 * or -ENOMEM (the sketch is unchanged).
 */
KVSIM_EXTERN int kvsim_sketch_add_two(struct kvsim_sketch *s, int64_t a, uint64_t na, int64_t b,
                                      uint64_t nb);
/*
 * kvsim_sketch_merge - add src's counts into dst (src is unchanged). The result is the sketch
 * that adding all of both inputs' values to one sketch would give, in any order. O(src
 * buckets). Returns 0, or -ENOMEM (dst is unchanged).
 */
KVSIM_EXTERN int kvsim_sketch_merge(struct kvsim_sketch *dst, const struct kvsim_sketch *src);
/*
 * kvsim_sketch_at_rank - the value of 1-based rank r (clamped to [1, count]) in ascending
 * order, as its bucket's representative value clamped to [min, max]. O(buckets). Returns NAN
 * when the sketch is empty.
 */
KVSIM_EXTERN double kvsim_sketch_at_rank(const struct kvsim_sketch *s, uint64_t r);
/* The nearest-rank quantile q in [0, 1]: kvsim_sketch_at_rank(s, max(1, ceil(q * count))). */
KVSIM_EXTERN double kvsim_sketch_quantile(const struct kvsim_sketch *s, double q);
/* Number of values counted in bucket key (0 outside the allocated range). */
KVSIM_EXTERN uint64_t kvsim_sketch_bin(const struct kvsim_sketch *s, int32_t key);
/* The bucket key of a value v >= 1. */
KVSIM_EXTERN int32_t kvsim_sketch_key(int64_t v);
/* The representative value of bucket key: 2 * gamma^key / (gamma + 1). */
KVSIM_EXTERN double kvsim_sketch_key_value(int32_t key);

/* ---- exact percentiles ---------------------------------------------------------------------- */

/*
 * Percentiles use the nearest-rank definition: the p-th percentile of n sorted values is the
 * value of 1-based rank ceil(p / 100 * n) (at least 1). It is always one of the values, never
 * an interpolation: p50 of {1, 2, 3, 4} is 2, p90 of ten values is the 9th, p100 the largest.
 * Percentiles are given in per-mille (p99 = 990) so that ranks are exact integer arithmetic.
 */
KVSIM_EXTERN uint64_t kvsim_nearest_rank(uint64_t n, uint32_t permille);
/* The nearest-rank percentile of sorted[0..n) (ascending). n must be at least 1. */
KVSIM_EXTERN double kvsim_percentile_sorted(const double *sorted, size_t n, uint32_t permille);

/* ---- per-request records --------------------------------------------------------------------- */

enum kvsim_req_status {
    KVSIM_REQ_PENDING = 0, /* not finished yet (or never arrived) */
    KVSIM_REQ_COMPLETED,   /* finished normally: counts in latency and throughput */
    KVSIM_REQ_REJECTED,    /* refused (e.g. prompt too long): counted by reason only */
    KVSIM_REQ_INCOMPLETE,  /* still unfinished when the replay ended */
    KVSIM_REQ_ABORTED,     /* dropped after it started (a disaggregated handoff aborted) */
};
/* "pending", "completed", "rejected" or "incomplete" ("unknown" otherwise). */
KVSIM_EXTERN const char *kvsim_req_status_name(enum kvsim_req_status status);

/* Everything kept about one request: 96 bytes, nothing per token. Times are virtual ns. */
struct kvsim_req_record {
    int64_t arrival_ns;         /* arrival at the router (KVSIM_TIME_NONE: not arrived) */
    int64_t first_sched_ns;     /* first admission by an engine */
    int64_t first_token_ns;     /* first output token */
    int64_t second_token_ns;    /* second output token */
    int64_t last_token_ns;      /* latest output token */
    int64_t finish_ns;          /* completion or rejection time */
    int64_t itl_max_ns;         /* largest inter-token gap (0 with fewer than 2 tokens) */
    int64_t itl_sum_ns;         /* sum of inter-token gaps (= last - first token time) */
    uint32_t num_output_tokens; /* output tokens so far */
    uint32_t input_len;         /* prompt tokens */
    uint32_t cached_tokens;     /* prefix-cache hit tokens at first admission (local + external) */
    uint32_t num_preemptions;   /* times preempted */
    int32_t engine;             /* engine of the latest admission (-1: never admitted) */
    uint8_t status;             /* enum kvsim_req_status */
    const char *reject_reason;  /* static string such as "prompt_too_long", or NULL */
    /* disaggregated serving (kvsim_metrics_set_handoff; handoff 0: not disaggregated) */
    uint8_t handoff;        /* enum kvsim_req_handoff */
    int32_t prefill_engine; /* -1: none */
    int32_t decode_engine;  /* the decode engine it was routed to; -1: never routed */
    int64_t pin_ns;         /* how long the source stayed pinned */
    int64_t transfer_ns;    /* how long the KV transfer took (KVSIM_TIME_NONE: none) */
};

/* How a request's disaggregated handoff ended. */
enum kvsim_req_handoff {
    KVSIM_REQ_HANDOFF_NONE = 0,
    KVSIM_REQ_HANDOFF_COMPLETED,
    KVSIM_REQ_HANDOFF_ABORTED,
    KVSIM_REQ_HANDOFF_PENDING, /* still under way when the replay ended */
};

struct kvsim_metrics;

/*
 * kvsim_metrics_create - a collector for requests 0..num_requests-1 and ITL sketches
 * 0..num_threads-1 (one per writer that may run concurrently with the others: the replay gives
 * each engine its own, since any thread may advance any engine); every record starts PENDING
 * with all times unset. Memory is one record per request plus one (initially empty) sketch per
 * writer. Returns 0 and sets *out, -EINVAL if num_threads is 0, or -ENOMEM.
 */
KVSIM_EXTERN int kvsim_metrics_create(uint32_t num_requests, uint32_t num_threads,
                                      struct kvsim_metrics **out);
/* kvsim_metrics_grow - requests up to num_requests-1 (the new records PENDING; amortized O(1)
 * per request added); never shrinks. Records may move: hold indices, not pointers. Same
 * context as create. Returns 0 or -ENOMEM (unchanged). */
KVSIM_EXTERN int kvsim_metrics_grow(struct kvsim_metrics *m, uint32_t num_requests);
/* Frees the collector. Accepts NULL. */
KVSIM_EXTERN void kvsim_metrics_destroy(struct kvsim_metrics *m);
KVSIM_EXTERN uint32_t kvsim_metrics_num_requests(const struct kvsim_metrics *m);
KVSIM_EXTERN uint32_t kvsim_metrics_num_threads(const struct kvsim_metrics *m);
/* The record of request req (read-only), or NULL if req is out of range. */
KVSIM_EXTERN const struct kvsim_req_record *kvsim_metrics_record(const struct kvsim_metrics *m,
                                                                 uint32_t req);

/*
 * Event functions. Each is O(1) (on_token amortized, see kvsim_sketch_add) and changes nothing
 * when it fails.
 * Context: the thread that owns request req at that moment (see the file comment).
 * Returns: 0; -EINVAL if req (or thread) is out of range, the request has not arrived, or time
 * runs backwards for it; -EALREADY if the request already completed or was rejected (or, for
 * on_arrival, already arrived).
 */
/* Request req (input_len prompt tokens) arrives at t. */
KVSIM_EXTERN int kvsim_metrics_on_arrival(struct kvsim_metrics *m, uint32_t req, int64_t t,
                                          uint32_t input_len);
/*
 * Engine engine admits req at t. The first admission sets first_sched_ns and cached_tokens
 * (prefix-cache hit tokens, local + external); a later one is a re-admission after a
 * preemption (counted by on_preempt) and only updates the engine.
 */
KVSIM_EXTERN int kvsim_metrics_on_schedule(struct kvsim_metrics *m, uint32_t req, int64_t t,
                                           uint32_t cached_tokens, int32_t engine);
/* req was preempted (its KV freed; it will be re-admitted). */
KVSIM_EXTERN int kvsim_metrics_on_preempt(struct kvsim_metrics *m, uint32_t req);
/*
 * One output token of req at t; called in time order for each request. From the second token
 * on, the gap to the previous token goes into the record's ITL max/sum and into the sketch of
 * `thread` (the caller's: no other thread uses it meanwhile). May also return -ENOMEM (sketch
 * growth) or -EOVERFLOW (a request at UINT32_MAX tokens).
 */
KVSIM_EXTERN int kvsim_metrics_on_token(struct kvsim_metrics *m, uint32_t thread, uint32_t req,
                                        int64_t t);
/*
 * n output tokens of req at t, t + gap, ..., t + (n - 1) gap: what n kvsim_metrics_on_token
 * calls do, in one (the engine's decode fast path). Returns the same errors; -EOVERFLOW also for
 * a last instant past INT64_MAX.
 */
KVSIM_EXTERN int kvsim_metrics_on_tokens(struct kvsim_metrics *m, uint32_t thread, uint32_t req,
                                         int64_t t, int64_t gap, uint32_t n);
/* req completed at t. */
KVSIM_EXTERN int kvsim_metrics_on_finish(struct kvsim_metrics *m, uint32_t req, int64_t t);
/* req was rejected at t for reason, a static string (e.g. "prompt_too_long"; NULL = "unknown"). */
KVSIM_EXTERN int kvsim_metrics_on_reject(struct kvsim_metrics *m, uint32_t req, int64_t t,
                                         const char *reason);
/* req was aborted at t for reason (a static string; NULL = "unknown") after it had started. */
KVSIM_EXTERN int kvsim_metrics_on_abort(struct kvsim_metrics *m, uint32_t req, int64_t t,
                                        const char *reason);
/*
 * kvsim_metrics_set_handoff - record how req's disaggregated handoff went (its prefill engine,
 * the decode engine it was routed to (-1: never routed), outcome, pin and transfer durations;
 * transfer_ns KVSIM_TIME_NONE when nothing moved). Marks
 * the collector as disaggregated: the per-request records then carry these fields. Context: no
 * worker feeding events. Returns 0 or -EINVAL (req out of range).
 */
KVSIM_EXTERN int kvsim_metrics_set_handoff(struct kvsim_metrics *m, uint32_t req,
                                           int32_t prefill_engine, int32_t decode_engine,
                                           enum kvsim_req_handoff outcome, int64_t pin_ns,
                                           int64_t transfer_ns);

/* Requests no longer PENDING (completed, rejected, aborted or incomplete). O(requests).
 * Context: no worker feeding events (a boundary). */
KVSIM_EXTERN uint32_t kvsim_metrics_num_final(const struct kvsim_metrics *m);

/*
 * kvsim_metrics_mark_incomplete - the replay ended: every PENDING record becomes INCOMPLETE.
 * Returns how many. O(requests). Context: no worker feeding events.
 */
KVSIM_EXTERN uint32_t kvsim_metrics_mark_incomplete(struct kvsim_metrics *m);

/* ---- the report ------------------------------------------------------------------------------ */

/* A latency distribution in ns. With count 0 every other field is 0 (JSON writes null). */
struct kvsim_latency {
    uint64_t count; /* samples */
    double mean;
    double min;
    double p50;
    double p90;
    double p95;
    double p99;
    double max;
    /* the rest of AIPerf's statistics: the population standard deviation (summed in sample
     * order) and the low percentiles */
    double std, p1, p5, p10, p25, p75;
};

#define KVSIM_REPORT_MAX_REASONS 8
#define KVSIM_REPORT_NAME_LEN    256

struct kvsim_reject_count {
    const char *reason; /* static string; "other" collects reasons beyond the table */
    uint64_t count;
};

/* What the runtime knows that the records do not. Any field may be left zero / NULL. */
/* Which step model timed the run, and how often the profile model left its grid. */
struct kvsim_timing_summary {
    char step_model[16];     /* "polynomial" or "profile" */
    char profile[256];       /* the profile's directory ("" for the polynomial) */
    char model[128];         /* ORG/NAME ("" for the polynomial) */
    char hardware[64];       /* the profile's hardware label */
    uint32_t tp;             /* tensor parallel degree of the profile (0 for the polynomial) */
    uint64_t num_gpu_blocks; /* one engine's KV blocks (vLLM's count, the null block included) */
    /* where they came from: "default_tokens" (the default capacity, kept in tokens at any block
     * size), "num_gpu_blocks" (given), "gpu_memory" (derived); "" unknown */
    char kv_capacity[16];
    uint64_t kv_capacity_tokens; /* num_gpu_blocks x block_size */
    uint64_t steps;              /* steps over all engines */
    uint64_t steps_outside;      /* steps the profile clamped to its grid */
    uint64_t outside_tokens, outside_sequences, outside_attention; /* per axis */
    /* of steps, those the decode fast path applied in bulk: how the run ran, not what it
     * simulated (the JSON has it under "wall") */
    uint64_t fast_path_steps;
    /* A mixture-of-experts model's data-parallel ranks in lockstep (docs/fidelity/
     * dp-lockstep.md): the deployments' lockstep steps, and of the ranks' steps in them the
     * dummy ones (a rank with nothing to run). */
    bool lockstep;
    uint64_t lockstep_steps, lockstep_dummy_rank_steps;
};

/* Service-level objectives, per request (0: not set): TTFT, AIPerf's ITL (per request: (last
 * - first token) / (tokens - 1)), E2E, all in ns. */
struct kvsim_slo {
    int64_t ttft_ns, itl_ns, e2e_ns;
};

/* How the requests met the SLOs (enabled: at least one is set). A request meets an SLO when it
 * completed within it (a request with one token meets any ITL); rejected, aborted and cut-off
 * requests (arrived, unfinished when the run ended early) meet none. Attainment is over the
 * requests that arrived: a run cut short (--max-sim-time-s) is not scored on requests it never
 * saw, and those it saw but did not finish count as misses. */
struct kvsim_slo_summary {
    bool enabled;
    struct kvsim_slo slo;
    uint64_t met_ttft, met_itl, met_e2e; /* requests within each set SLO */
    uint64_t good;                       /* within every set SLO */
    uint64_t good_output_tokens;
    double attainment_ttft, attainment_itl, attainment_e2e, attainment_all; /* % of arrived */
    double goodput_requests_per_s, goodput_output_tokens_per_s;             /* over duration */
};

struct kvsim_report_run {
    const char *trace;        /* trace name or path ("synthetic", ...) */
    const char *trace_sha256; /* the trace file's sha256 (hex), or NULL (not from a file) */
    const char *router;       /* router name ("round_robin", "kv_aware", ...) */
    /* what it saw: delayed by kv_event_delay_ns, or predicting for predict_ttl_ns (> 0) */
    bool router_view_delayed;
    int64_t kv_event_delay_ns, predict_ttl_ns;
    uint64_t seed;                 /* workload / replay seed */
    uint32_t num_engines;          /* engines in the replay */
    uint32_t data_parallel_size;   /* ranks per deployment (0 or 1: no data parallelism) */
    uint32_t tensor_parallel_size; /* GPUs per engine (0 or 1: one) */
    bool enable_expert_parallel;   /* a MoE model's experts split over the ranks */
    uint32_t num_threads;          /* worker threads; 0 = the collector's thread count */
    uint32_t vllm_contract;        /* the fidelity contract the engines followed (0: unknown) */
    /* The engines' arguments (NULL: not recorded): every engine's, or with prefill set the
     * two pools' of a disaggregated run (engine then NULL). Copied into the report. */
    const struct sched_config *engine, *prefill, *decode;
    struct kvsim_slo slo;    /* the SLOs to score (zeros: none) */
    const char *config_text; /* the run's whole configuration as JSON (--config-out), or NULL */
    int64_t wall_ns;         /* measured wall time of the replay; <= 0 = unknown */
    /* How the replay ended: "finished" (NULL too), "max-sim-time" or "interrupted", at end_ns
     * of virtual time after the first arrival. */
    const char *end_reason;
    int64_t end_ns;
};

/* The offload lanes a report counts (offload.h's lanes, in its order; engine.c checks that the
 * two agree). */
#define KVSIM_REPORT_NUM_LANES 4

/* Traffic of one offload lane over all engines. */
struct kvsim_lane_traffic {
    uint64_t batches; /* completed batches */
    uint64_t blocks;  /* blocks they moved */
    uint64_t bytes;
    uint64_t failed, cancelled; /* batches */
};

/* The offload tiers' part of a report (enabled = false: no tiers configured). */
struct kvsim_offload_summary {
    bool enabled;
    struct kvsim_lane_traffic lanes[KVSIM_REPORT_NUM_LANES]; /* G1->G2, G2->G3, G3->G2, G2->G1 */
    uint64_t g1_miss_blocks;               /* full prompt blocks missing from G1 at admission */
    uint64_t g2_hit_blocks, g3_hit_blocks; /* of which onboarded from G2 / from G3 */
    double g2_hit_rate, g3_hit_rate;       /* hits / g1_miss_blocks (0 if none) */
    uint64_t onboarded_tokens;             /* prompt tokens loaded from G2/G3 instead of computed */
    uint64_t recomputed_tokens; /* prompt tokens computed by steps (preemption recompute too) */
    uint64_t loads, failed_loads;
    uint64_t blocked, retry_now; /* BLOCKED_ON_OFFLOAD outcomes; RETRY_NOW retries */
    int64_t blocked_ns;          /* virtual time heads waited for capacity held by copies */
    int64_t onboard_wait_ns;     /* virtual time requests waited for their loads (sum) */
    uint64_t written_g2, written_g3, filtered, dropped, failed_blocks;
    uint64_t g2_resident, g3_resident; /* blocks in the tiers at the end */
    bool g3_shared;                    /* one G3 for all engines (--g3-shared) */
    uint64_t g3_evictions;             /* shared G3: blocks its LRU evicted at boundaries */
};

/* One engine over the run (the report's per-engine part). */
struct kvsim_engine_summary {
    uint8_t role; /* enum kvsim_ts_role: aggregated, prefill or decode */
    /* requests served here: completed with their last admission here (aggregated, decode), or
     * prefilled here (prefill: their records' prefill_engine) */
    uint64_t completed;
    uint64_t input_tokens, output_tokens; /* theirs (a prefill engine's outputs: 0) */
    uint64_t cached_tokens;               /* their first-admission prefix hits (the prefill's) */
    uint64_t rejected;                    /* requests this engine refused at admission */
    uint64_t preemptions, steps;
    double busy_s;        /* virtual seconds with a step running (engine-seconds) */
    double mean_kv_usage; /* KV usage at each step's start, weighted by the step's duration */
    double peak_kv_usage; /* the largest of those */
};

/* A prefill engine's pinned sources over the run. */
struct kvsim_prefill_pins {
    double pinned_block_seconds; /* pinned blocks integrated over virtual time */
    uint32_t peak_pinned_blocks;
};

/* The disaggregated part of a report (enabled = false: an aggregated replay). */
struct kvsim_disagg_summary {
    bool enabled;
    uint32_t prefill_engines, decode_engines;
    uint64_t handoffs, completed, aborted, pending; /* pending: under way at the end */
    struct kvsim_latency pin;         /* source pinned: pin to release (completed or aborted) */
    struct kvsim_latency transfer;    /* transfer start to end (completed handoffs) */
    struct kvsim_latency decode_wait; /* decode routed to destination reserved */
    uint64_t transferred_bytes, transferred_tokens;
    double pinned_block_seconds;            /* over all prefill engines */
    uint32_t peak_pinned_blocks;            /* the largest of any prefill engine */
    struct kvsim_prefill_pins *per_prefill; /* [prefill_engines], owned (kvsim_report_fini) */
    uint64_t epochs;                        /* epoch boundaries the replay went through */
};

/*
 * The replay report. Latency and throughput cover COMPLETED requests only, except ITL (see
 * kvsim_metrics_summarize). The fields under "wall" depend on the machine and the thread count;
 * everything else is bit-identical for identical inputs.
 */
/* Where a replay's threads spent their CPU (KVSIM_REPLAY_ACCOUNTING=1; docs/replay.md): in the
 * report's "wall" part. Times are CPU seconds (CLOCK_THREAD_CPUTIME_ID) unless named wall. */
#define KVSIM_ACCOUNTING_MAX_THREADS 64
#define KVSIM_ACCOUNTING_BOUNDS      5 /* T = 1, 2, 4, 8, 16 */
struct kvsim_thread_accounting {
    bool enabled;
    uint32_t threads;         /* entries below (the replay's threads, at most the maximum) */
    uint64_t phases;          /* phases (each a barrier pair, or run by the coordinator alone) */
    uint64_t parallel_phases; /* of which the workers took part in (run_work) */
    /* The coordinator's CPU over the epochs that is neither advancing engines nor waiting:
     * routing, merging events, handoffs, the boundary. */
    double serial_s;
    double advance_s[KVSIM_ACCOUNTING_MAX_THREADS]; /* per thread: advancing engines */
    double wait_s[KVSIM_ACCOUNTING_MAX_THREADS];    /* per thread: in the epoch barrier */
    double wait_wall_s[KVSIM_ACCOUNTING_MAX_THREADS];
    /* The least time of the phases on T = 1, 2, 4, 8, 16 threads (T = 2^i): per phase max(its
     * largest engine's advance, their sum / T), summed; [0] is every advance's sum. */
    double critical_s[KVSIM_ACCOUNTING_BOUNDS];
    /* The same with each engine on the thread the replay gives it on T threads (engine e on
     * thread e mod T; a disaggregated replay's pools on separate threads): per phase the most
     * any thread's engines took, summed. Beside critical_s, what that fixed assignment costs. */
    double critical_assigned_s[KVSIM_ACCOUNTING_BOUNDS];
};

/* What a kvsim_thread_accounting bounds: its advance over all threads, its serial fraction and,
 * for T = 2^i threads, the balance (the advances' sum / (T x the least time on T threads)) and
 * the speedup that serial part and that balance allow (Amdahl); [0] is one thread's (1, 1). */
struct kvsim_thread_bounds {
    double advance_s, wait_s, serial_fraction;
    double balance[KVSIM_ACCOUNTING_BOUNDS], speedup[KVSIM_ACCOUNTING_BOUNDS];
    /* the speedup bound with the replay's own engine-to-thread assignment (0: not measured) */
    double speedup_assigned[KVSIM_ACCOUNTING_BOUNDS];
};
KVSIM_EXTERN void kvsim_thread_accounting_bounds(const struct kvsim_thread_accounting *a,
                                                 struct kvsim_thread_bounds *out);

struct kvsim_report {
    /* run */
    char trace[KVSIM_REPORT_NAME_LEN];  /* copied from the run (truncated) */
    char trace_sha256[65];              /* copied from the run ("": none) */
    char router[KVSIM_REPORT_NAME_LEN]; /* copied from the run (truncated) */
    /* what the router saw (router.h): delayed (its delay) or predicting on route (its TTL);
     * false: the exact view without prediction, and the report says nothing of it */
    bool router_view_delayed;
    bool has_router_view;
    double kv_event_delay_ms, predict_ttl_s;
    uint64_t seed;                 /* from the run */
    uint32_t num_engines;          /* from the run */
    uint32_t data_parallel_size;   /* from the run (1: none) */
    uint32_t tensor_parallel_size; /* from the run (1: one GPU per engine) */
    uint64_t gpus;                 /* num_engines x tensor_parallel_size */
    bool enable_expert_parallel;   /* from the run */
    uint32_t vllm_contract;        /* from the run: the fidelity contract (vllm.md) */
    /* from the run: the engine arguments (has_*: recorded), under vLLM's names in the JSON */
    bool has_engine, has_pools;
    struct sched_config engine, prefill, decode;
    char *config_text; /* from the run: its configuration's JSON (owned), or NULL */
    /* from the run: how it ended; complete is false when it ended early (the unfinished
     * requests count as incomplete) */
    bool complete;
    char end_reason[16];
    int64_t end_ns;
    /* counts */
    uint64_t num_requests; /* R */
    uint64_t completed;
    uint64_t rejected;
    uint64_t incomplete; /* neither completed, rejected nor aborted (includes never arrived) */
    uint64_t arrived;    /* reached the router before the end (the SLOs' denominator) */
    uint64_t cut_off;    /* of the incomplete, those that arrived (unfinished at the end) */
    uint64_t aborted;    /* started, then dropped (an aborted disaggregated handoff) */
    /* the most requests in flight at once (arrived, not yet finished: what the engines and the
     * router held together) */
    uint64_t peak_in_flight;
    uint32_t num_reject_reasons; /* entries of rejects[] */
    /* rejections by reason, sorted by reason ("other", if any, last) */
    struct kvsim_reject_count rejects[KVSIM_REPORT_MAX_REASONS];
    uint64_t preemptions;      /* over all requests */
    uint64_t input_tokens;     /* completed requests' prompt tokens */
    uint64_t output_tokens;    /* completed requests' output tokens */
    uint64_t cached_tokens;    /* completed requests' first-admission prefix hits */
    double prefix_cache_reuse; /* cached_tokens / input_tokens (0 if no input) */
    /* The reuse an unbounded prefix cache shared by every engine would give on the same
     * requests (each request's leading trace blocks seen before, in arrival order; filled by
     * the replay; has_unbounded_reuse false: not computed) */
    bool has_unbounded_reuse;
    double prefix_cache_reuse_unbounded;
    /* time */
    int64_t duration_ns;          /* first arrival to last completion (0 if none completed) */
    double requests_per_s;        /* completed / duration */
    double input_tokens_per_s;    /* input_tokens / duration */
    double output_tokens_per_s;   /* output_tokens / duration */
    double total_tokens_per_s;    /* (input + output) / duration */
    struct kvsim_slo_summary slo; /* SLO attainment and goodput (enabled: SLOs were set) */
    /* latencies (ns) */
    struct kvsim_latency ttft; /* first token - arrival */
    struct kvsim_latency ttst; /* second token - first token (2+ tokens) */
    struct kvsim_latency tpot; /* (last - first token) / (tokens - 1) (2+ tokens) */
    /* AIPerf's inter-token latency: per request, (last - first token) / (tokens - 1) (2+
     * tokens): the same values as TPOT (vLLM's name), under AIPerf's name */
    struct kvsim_latency itl;
    struct kvsim_latency token_gap; /* every inter-token gap pooled, from the merged sketch */
    /* AIPerf's output token throughput per user: per request, (tokens - 1) / (last - first
     * token), tokens/s (not ns) */
    struct kvsim_latency output_tps_per_user;
    struct kvsim_latency e2e; /* finish - arrival */
    /* wall: machine- and thread-count-dependent */
    uint32_t num_threads;
    int64_t wall_ns;            /* <= 0: unknown */
    double speed;               /* simulated seconds per wall second (0: unknown) */
    double wall_requests_per_s; /* completed requests per wall second (0: unknown) */
    /* epochs of the aggregated replay, and the arrivals it routed in a window ahead of their
     * instant (docs/replay.md, Threads): how the run ran, filled by the replay */
    uint64_t epochs, arrivals_routed_ahead;
    struct kvsim_thread_accounting accounting; /* filled by the replay when asked for */
    struct kvsim_offload_summary offload;      /* filled by the replay after summarizing */
    struct kvsim_disagg_summary disagg;        /* filled by the replay after summarizing */
    struct kvsim_timing_summary timing;        /* filled by the replay after summarizing */
    /* per engine (engine order; NULL when not filled), owned (kvsim_report_fini) */
    struct kvsim_engine_summary *per_engine;
    uint32_t num_per_engine;
    double busy_engine_s; /* the engines' busy seconds summed: what a GPU-hour bill counts */
};

/*
 * kvsim_metrics_summarize - derive the report. TTFT, TTST, TPOT and E2E take exact
 * nearest-rank percentiles of the per-request values of completed requests, and means summed
 * in request-index order. ITL percentiles come from the per-thread sketches merged in thread
 * order, its min/max are exact and its mean is the records' exact ITL sum over their gap count
 * (request-index order); ITL covers every gap fed, which includes the gaps of requests left
 * incomplete (a sketch cannot retract values, and no per-token data is kept). PENDING records
 * count as incomplete. run may be NULL. Allocates O(requests) scratch memory for sorting.
 * Context: no worker feeding events. Returns 0 or -ENOMEM (out is then unspecified).
 */
KVSIM_EXTERN int kvsim_metrics_summarize(const struct kvsim_metrics *m,
                                         const struct kvsim_report_run *run,
                                         struct kvsim_report *out);

/* Prints the report as an aligned table (latencies in ms) to out. */
KVSIM_EXTERN void kvsim_report_print(FILE *out, const struct kvsim_report *r);

/* Frees what a report owns (the per-engine arrays) and zeroes those fields. Accepts a report
 * that owns nothing. */
KVSIM_EXTERN void kvsim_report_fini(struct kvsim_report *r);

/*
 * kvsim_latency_of - the distribution of vals[0..n) (ns, in a fixed order: the mean is summed in
 * that order) with nearest-rank percentiles; sorts vals in place. n 0 gives all zeros.
 */
KVSIM_EXTERN void kvsim_latency_of(double *vals, size_t n, struct kvsim_latency *l);

/*
 * kvsim_report_write_json - write the report to path as one JSON object with a fixed key
 * order; every quantity's unit is in its key ("ttft_ms", "duration_ms", "requests_per_s").
 * The machine-dependent fields sit under the last key, "wall", so that dropping it leaves
 * output that is byte-identical for identical inputs. Returns 0, -ENOMEM, or the negative
 * errno of the failed open/write/close with a message naming path in err (if err is not NULL).
 */
KVSIM_EXTERN int kvsim_report_write_json(const char *path, const struct kvsim_report *r, char *err,
                                         size_t errlen);

/* The significant digits of the reals in a JSON report (jansson's JSON_REAL_PRECISION): a
 * reader comparing a value it computed with the report's rounds it the same way. */
#define KVSIM_REPORT_REAL_DIGITS 15

/* The JSON kvsim_report_write_json writes (without its final newline), malloc'd (free()), or
 * NULL when memory runs out. */
KVSIM_EXTERN char *kvsim_report_json_text(const struct kvsim_report *r);

/*
 * kvsim_metrics_write_requests - write one JSON line per request, in index order: its status,
 * engine, token counts, preemptions, reject reason and times in ms with exactly six decimals
 * (formatted from the integer ns, so byte-stable), unset times as null. Nothing wall-clock
 * dependent. O(requests). Returns 0 or the negative errno of the failed open/write/close with
 * a message naming path in err (if err is not NULL).
 */
KVSIM_EXTERN int kvsim_metrics_write_requests(const char *path, const struct kvsim_metrics *m,
                                              char *err, size_t errlen);

/* ---- the Pareto front ------------------------------------------------------------------------ */

/*
 * kvsim_pareto_front - marks in on_front[0 .. nrows) the rows no other row dominates: row j
 * dominates row i when it is at least as good in every metric and better in one, each metric in
 * its direction (lower[m]: lower is better, else higher is). values holds nrows rows of nmetrics
 * values, row-major. A row with a NaN (a missing value) is never on the front and dominates
 * nothing. Equal rows do not dominate each other (both stay). Returns how many rows are on the
 * front. O(nrows^2 x nmetrics); any thread.
 */
KVSIM_EXTERN size_t kvsim_pareto_front(const double *values, size_t nrows, size_t nmetrics,
                                       const bool *lower, bool *on_front);

/* ---- output files ---------------------------------------------------------------------------- */

/*
 * Every file kvsim writes (output.c): to a temporary file beside the destination, renamed over
 * it by kvsim_output_commit, so that a failure or a signal never leaves a partial file; "-" is
 * standard output; an existing destination that is not a regular file (/dev/null, a FIFO, a
 * symbolic link such as /dev/stdout) is written directly (through the link). Messages are "<path>:
 * <what>: <strerror>". Any thread, one output per thread at a time.
 */
struct kvsim_output {
    FILE *f; /* write here between open and commit */
    const char *path;
    bool is_stdout;
    char tmp[4096]; /* the temporary file ("" when written directly) */
};
/* Returns 0, or a negative errno (a directory: -EISDIR) with a message in err. */
KVSIM_EXTERN int kvsim_output_open(struct kvsim_output *o, const char *path, char *err,
                                   size_t errlen);
/* Closes (flushes standard output) and renames into place; on a write error removes the
 * temporary file. Returns 0 or the negative errno with a message. */
KVSIM_EXTERN int kvsim_output_commit(struct kvsim_output *o, char *err, size_t errlen);
/* Closes and removes what was written (the destination is left as it was). */
KVSIM_EXTERN void kvsim_output_discard(struct kvsim_output *o);
/* Whether path could be written, leaving it as it is (opened, then discarded). */
KVSIM_EXTERN int kvsim_output_check(const char *path, char *err, size_t errlen);
/*
 * An input of a command, for kvsim_output_check_inputs: what it is ("the trace", "--engine-args"),
 * its path, and whether it is a directory the command reads whole (a recorded run: nothing may be
 * written inside it).
 */
struct kvsim_input_path {
    const char *what;
    const char *path;
    bool is_dir;
};
/*
 * kvsim_output_check_inputs - refuses an output that would overwrite one of the inputs: the same
 * regular file (device and inode, through links, so another spelling or a hard link is caught),
 * or a path inside an input directory (a device such as /dev/stdout is not an input's content).
 * Standard output ("-"), NULL and inputs that do not exist are skipped. Returns 0, or -EINVAL with
 * "'OUT' is the trace (IN): an output never overwrites an input" in err. Any thread.
 */
KVSIM_EXTERN int kvsim_output_check_inputs(const char *out, const struct kvsim_input_path *inputs,
                                           size_t num_inputs, char *err, size_t errlen);
/* Writes text and a newline to path as one output. Returns 0 or a negative errno. */
KVSIM_EXTERN int kvsim_write_text(const char *path, const char *text, char *err, size_t errlen);

/* ---- the time series (--timeseries-out, --html) ---------------------------------------------- */

/*
 * What one engine did over one interval [origin + k * interval, origin + (k + 1) * interval) of
 * virtual time. Gauges are the engine's state at the interval's end (after every event before
 * it, none at or after it); counts are what happened within the interval (tokens count at the
 * end of the step that computed them).
 */
struct kvsim_ts_sample {
    uint32_t running, waiting;                 /* requests, at the end */
    uint32_t kv_used_blocks, kv_total_blocks;  /* G1 blocks referenced / usable, at the end */
    uint32_t pinned_blocks;                    /* prefill engine: pinned handoff sources */
    uint64_t prompt_tokens, generation_tokens; /* computed within the interval */
    uint64_t preemptions;
    uint64_t offload_stored_blocks; /* blocks copied into G2/G3 within the interval */
    uint64_t offload_loaded_blocks; /* blocks onboarded from G2/G3 within the interval */
};

/* Engine roles in a time series (as enum kvsim_engine_role). */
enum kvsim_ts_role { KVSIM_TS_AGGREGATED = 0, KVSIM_TS_PREFILL, KVSIM_TS_DECODE };

/* A replay's time series: num_intervals x num_engines samples, interval-major. */
struct kvsim_timeseries {
    int64_t origin_ns;   /* the first interval's start (the first arrival) */
    int64_t interval_ns; /* > 0 */
    uint32_t num_engines, num_intervals;
    uint8_t *roles;                  /* [num_engines], enum kvsim_ts_role */
    struct kvsim_ts_sample *samples; /* [k * num_engines + engine] */
};

/* Sample of engine e in interval k (no bounds check). */
static inline const struct kvsim_ts_sample *kvsim_ts_at(const struct kvsim_timeseries *ts,
                                                        uint32_t k, uint32_t e)
{
    return &ts->samples[(size_t)k * ts->num_engines + e];
}
/* Frees what a time series owns and zeroes it. Accepts NULL and an empty one. */
KVSIM_EXTERN void kvsim_timeseries_fini(struct kvsim_timeseries *ts);

/*
 * kvsim_timeseries_write_csv - one row per interval and engine, then a row "all" summing the
 * engines, with a header: time_s (the interval's end, from the origin), engine, role, running,
 * waiting, kv_usage, kv_used_blocks, prompt_tokens_per_s, generation_tokens_per_s,
 * preemptions, pinned_blocks, offload_stored_blocks, offload_loaded_blocks. Returns 0 or the
 * negative errno of the failed open/write/close with a message naming path in err.
 */
KVSIM_EXTERN int kvsim_timeseries_write_csv(const char *path, const struct kvsim_timeseries *ts,
                                            char *err, size_t errlen);

/*
 * kvsim_report_write_html - one self-contained HTML file (inline SVG and CSS, no script, no
 * network): the configuration, the summary and SLO tables, TTFT / ITL / E2E CDFs from the
 * records of m, throughput, queue depth and KV usage over time from ts (NULL: those charts say
 * there is no time series), per-engine load bars, and for a disaggregated run the pin
 * durations. Returns 0, -ENOMEM, or the negative errno of the failed open/write/close with a
 * message naming path in err.
 */
KVSIM_EXTERN int kvsim_report_write_html(const char *path, const struct kvsim_report *r,
                                         const struct kvsim_metrics *m,
                                         const struct kvsim_timeseries *ts, char *err,
                                         size_t errlen);

/* ---- the run's outputs (outputs.c) ------------------------------------------------------------
 */

/* One instant of a disaggregated request's KV handoff (--handoff-events), in the order of
 * enum kvsim_handoff_event_kind at one instant. */
enum kvsim_handoff_event_kind {
    KVSIM_HANDOFF_EV_PIN_START = 0, /* the prefill engine pinned the prompt's KV */
    KVSIM_HANDOFF_EV_WAIT_START,    /* the decode engine started waiting for it */
    KVSIM_HANDOFF_EV_RESERVED,      /* the decode engine reserved its destination blocks */
    KVSIM_HANDOFF_EV_TRANSFER_START,
    KVSIM_HANDOFF_EV_TRANSFER_END,
    KVSIM_HANDOFF_EV_PIN_END, /* the source's blocks went back to the prefill pool */
};
struct kvsim_handoff_event {
    int64_t t_ns;
    enum kvsim_handoff_event_kind kind;
    uint64_t handoff; /* the handoff's id */
    uint32_t req;
    int32_t prefill_engine, decode_engine; /* decode_engine -1: not known yet */
    uint32_t pinned_blocks;                /* PIN_START */
    uint64_t pinned_tokens;                /* PIN_START */
    uint64_t missing_tokens;               /* RESERVED: what the destination lacked */
    uint64_t bytes;                        /* TRANSFER_START */
    bool completed;                        /* PIN_END: completed, else aborted */
    int64_t pinned_ns;                     /* PIN_END: how long the source was pinned */
};

/* The files a run writes, each NULL when not asked for ("-": standard output). */
struct kvsim_outputs {
    const char *report_path;         /* the JSON report (kvsim_report_write_json) */
    const char *requests_path;       /* per-request records (kvsim_metrics_write_requests) */
    const char *timeseries_path;     /* the time series (kvsim_timeseries_write_csv) */
    const char *html_path;           /* the HTML report (kvsim_report_write_html) */
    const char *handoff_events_path; /* the handoff event log (JSONL) */
};
/* Whether the outputs need the run's time series (the CSV or the HTML report). */
static inline bool kvsim_outputs_want_timeseries(const struct kvsim_outputs *o)
{
    return o->timeseries_path != NULL || o->html_path != NULL;
}

/* What a run leaves for its outputs besides the report. */
struct kvsim_output_data {
    const struct kvsim_metrics *metrics;
    const struct kvsim_timeseries *timeseries;        /* needed with timeseries_path or html_path */
    const struct kvsim_handoff_event *handoff_events; /* in time order; with handoff_events_path */
    size_t num_handoff_events;
};

/*
 * kvsim_outputs_write - every file of a run, each through kvsim_output_open/commit (atomic):
 * the handoff events, the records, the time series, the HTML report, then the JSON report. The
 * replay calls it once at its end, so the command line and the API write the same files the
 * same way. Returns 0, or the first failure's negative errno with a message naming its file
 * (-EINVAL when data lacks what a path needs). After the workers; any one thread.
 */
KVSIM_EXTERN int kvsim_outputs_write(const struct kvsim_outputs *o, const struct kvsim_report *r,
                                     const struct kvsim_output_data *d, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_REPORT_H */
