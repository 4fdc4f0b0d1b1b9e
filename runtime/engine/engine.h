/*
 * engine.h - one simulated serving engine: a scheduler core, its G1 pool, a step-time model and
 * its offload tier policy (G2/G3), advanced in virtual time; and the G3 shared by all engines.
 *
 * Threads. An engine belongs to one thread at a time, and every engine function is called by
 * the thread that owns it then: in a replay, its worker between epoch boundaries (engine i on
 * thread i mod T) and the coordinator at a boundary, while every worker waits at the barrier
 * (the barrier orders the two). Different engines on different threads are independent. The
 * shared G3's functions say their own context. Errors are negative errno values.
 *
 * Time model (eager pass, as Dynamo's mocker): at a step's start the scheduler decides and the
 * step's duration is computed; its output (one token per request whose chunk reached the end of
 * its tokens) is applied at the step's end, and the next step starts at that same instant.
 */
#ifndef KVSIM_ENGINE_H
#define KVSIM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "kvsim_export.h"

#include "runtime/report/report.h"
#include "offload/offload.h"
#include "runtime/input/input.h"
#include "sched/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- offload tiers (G2/G3 behind an engine's G1; docs/offload.md) ---------------------- */

struct kvsim_g3_shared;

struct kvsim_tiers_config {
    uint32_t g2_blocks;         /* G2 capacity in blocks (>= 1) */
    uint32_t g3_blocks;         /* G3 capacity in blocks; 0 = no G3 (ignored with g3_shared) */
    bool g3_write_through;      /* copy every block G2 receives on to G3 (else only evictions) */
    struct offload_config pipe; /* lanes, bandwidths, block bytes, failure injection; the
                                 * work/complete callbacks are set by kvsim_tiers_create */
    struct offload_pool *pool;  /* executor: NULL = inline, else this thread pool */
    /* A G3 shared by all engines instead of a per-engine one (NULL: per engine), and this
     * engine's slot in it (< its num_engines; the engine sets it to its id). */
    struct kvsim_g3_shared *g3_shared;
    uint32_t g3_engine;
};

/* Fills cfg: G2 of 4096 blocks, no G3, offload_config_default() lanes, inline executor. */
KVSIM_EXTERN void kvsim_tiers_config_default(struct kvsim_tiers_config *cfg);

/* What an engine's tiers did. */
struct kvsim_tiers_stats {
    struct offload_lane_stats lanes[OFFLOAD_NUM_LANES];
    uint64_t written_g2, written_g3; /* blocks that entered G2 / G3 by copies */
    uint64_t filtered;               /* write-through blocks skipped: already present/in flight */
    uint64_t released_by_relief;     /* holds released by presence filtering under pressure */
    uint64_t dropped;                /* write-through blocks dropped: lane window full */
    uint64_t failed_blocks;          /* blocks of failed batches */
    uint64_t g2_hit_blocks, g3_hit_blocks; /* blocks onboarded from G2 / staged from G3 */
    uint64_t loads, failed_loads;
    uint64_t onboard_wait_ns;  /* sum over loads of (end - start) virtual ns */
    uint32_t g2_size, g3_size; /* g3_size: 0 with a shared G3 (see kvsim_g3_shared_stats) */
};

/* ---- a G3 shared by all engines ---------------------------------------------------------------
 *
 * Content. Which blocks the shared G3 holds lives in the block registry (tier KVPOOL_TIER_G3):
 * one registry writer per engine plus one for the coordinator. Capacity (an LRU of capacity
 * blocks) is enforced by the coordinator, at epoch boundaries only.
 *
 * Engine side (kvsim_tiers with cfg.g3_shared). During the epoch that started at boundary b, an
 * engine holds h in G3 iff the registry held it at virtual time b, or this engine wrote it since
 * b: other engines' writes of the current epoch are invisible until the next boundary (a
 * deterministic epoch lag, like the router's view). A G2->G3 copy completing at t registers h
 * through the engine's writer at vtime t and is logged (t, h, write); a load staging h from G3
 * logs (t, h, touch). kvsim_tiers_publish closes the engine's entries at the end of each advance
 * and publishes its watermark. A staging copy does not pin h in the shared G3 (the copy already
 * read the block): the coordinator may evict it meanwhile.
 *
 * Coordinator side (kvsim_g3_shared_boundary, every worker stopped). The engines' logs are merged
 * in (time, engine, sequence) order into the LRU: a write inserts (or, if resident, moves to the
 * MRU end), a touch moves to the MRU end, an insert into a full LRU evicts its LRU entry. Then
 * the coordinator's writer removes the evicted blocks and registers the admitted ones, both at
 * vtime b, and publishes b; the logs are cleared; removed entries are reclaimed now and then
 * (horizon b). Nothing here depends on thread timing: the result is the same for any thread
 * count and either executor.
 *
 * Threads: create and destroy on the coordinator; boundary on the coordinator while every engine
 * thread waits at the epoch barrier. The registry rules apply (kvpool.h).
 */

/*
 * kvsim_g3_shared_create - a shared G3 of capacity blocks for num_engines engines, whose virtual
 * time starts at vtime0 (the first boundary: nothing is written at or before it).
 * Context: a registered thread, online (the coordinator; a failure destroys what was built).
 * Returns 0 and *out, -EINVAL (capacity or num_engines 0, capacity above
 * OFFLOAD_TIER_MAX_CAPACITY), -ENOSPC or -ENOMEM (the registry's).
 */
KVSIM_EXTERN int kvsim_g3_shared_create(uint32_t capacity, uint32_t num_engines, int64_t vtime0,
                                        struct kvsim_g3_shared **out);
/* Frees it (its registry included). Accepts NULL. Context: a registered thread, online; no
 * engine uses it any more. */
KVSIM_EXTERN void kvsim_g3_shared_destroy(struct kvsim_g3_shared *g);
/*
 * kvsim_g3_shared_boundary - the boundary at b: merge the engines' epoch logs into the LRU,
 * remove evicted and register admitted blocks at vtime b, publish b, clear the logs, reclaim now
 * and then. A b no later than the last boundary merged changes nothing (the epoch goes on). b =
 * INT64_MAX is the end of the replay: the LRU is updated (for the statistics), the registry not.
 * Context: the coordinator, registered and online, while no engine thread runs.
 * Returns 0 or a negative errno (the registry's).
 */
KVSIM_EXTERN int kvsim_g3_shared_boundary(struct kvsim_g3_shared *g, int64_t b);

struct kvsim_g3_shared_stats {
    uint32_t capacity, resident; /* blocks */
    uint64_t inserts;            /* blocks admitted */
    uint64_t evictions;          /* blocks evicted (LRU) */
    uint64_t rewrites;           /* writes of a block already resident (moved to MRU) */
    uint64_t touches;            /* G3 hits used by loads (moved to MRU when still resident) */
};
/* Context: the coordinator at a boundary (or after the replay). */
KVSIM_EXTERN void kvsim_g3_shared_stats(const struct kvsim_g3_shared *g,
                                        struct kvsim_g3_shared_stats *out);

/* ---- the tier topology of a set of engines (tier_topology.c) ------------------------------- */

/*
 * What a replay's engines share of their offload tiers, built in one place: the configuration
 * each engine's tiers get (block bytes from KV bytes per token x block size), the offload thread
 * pool of their pipelines (or the inline executor), and a G3 shared by all of them in the block
 * registry (or a G3 per engine). With a shared G3 every thread that runs engines is a registry
 * thread (QSBR): the creating thread (the coordinator) from create to destroy, each worker from
 * kvsim_tier_topology_thread_join to _leave; without one those calls do nothing.
 */
struct kvsim_tier_topology_config {
    struct kvsim_tiers_config tiers; /* per engine; its pool and shared G3 are set here */
    uint64_t kv_bytes_per_token;     /* with block_size: the bytes of a block copy */
    uint32_t block_size;
    bool pool;             /* the thread-pool executor (else inline) ... */
    uint32_t pool_threads; /* ... with this many workers */
    bool g3_shared;        /* one G3 of tiers.g3_blocks (> 0) for all engines */
    uint32_t num_engines;
    int64_t vtime0; /* the shared G3's first boundary (the first arrival) */
};
struct kvsim_tier_topology;
struct kvsim_engine;
/*
 * kvsim_tier_topology_create - the pool and the shared G3 of c (the calling thread becomes the
 * coordinator: registered and online with a shared G3). Returns 0 and *out, or a negative errno
 * with err set (nothing is left behind).
 */
KVSIM_EXTERN int kvsim_tier_topology_create(const struct kvsim_tier_topology_config *c,
                                            struct kvsim_tier_topology **out, char *err,
                                            size_t errlen);
/* The tiers configuration every engine is created with (kvsim_engine_config.tiers). Any thread. */
KVSIM_EXTERN const struct kvsim_tiers_config *
kvsim_tier_topology_engine_tiers(const struct kvsim_tier_topology *t);
/*
 * kvsim_tier_topology_boundary - the shared G3 as of boundary b (kvsim_g3_shared_boundary: the
 * engines' epoch logs merged); b = INT64_MAX at the end of the run. Nothing without a shared G3.
 * Context: the coordinator, online, while no engine runs. Returns 0 or a negative errno.
 */
KVSIM_EXTERN int kvsim_tier_topology_boundary(struct kvsim_tier_topology *t, int64_t b);
/* The coordinator's registry state: offline before it blocks (joins, I/O, waits), online before
 * it touches engines or the registry again. _offline returns whether it was online. */
KVSIM_EXTERN bool kvsim_tier_topology_coordinator_offline(struct kvsim_tier_topology *t);
KVSIM_EXTERN void kvsim_tier_topology_coordinator_online(struct kvsim_tier_topology *t);
/* A worker thread's registry state: join when it starts and leave when it ends; offline while it
 * waits at a barrier, online after; quiescent after each engine it advanced (no read of that
 * engine's registry entries outlives it). Nothing without a shared G3. */
KVSIM_EXTERN void kvsim_tier_topology_thread_join(const struct kvsim_tier_topology *t);
KVSIM_EXTERN void kvsim_tier_topology_thread_leave(const struct kvsim_tier_topology *t);
KVSIM_EXTERN void kvsim_tier_topology_thread_offline(const struct kvsim_tier_topology *t);
KVSIM_EXTERN void kvsim_tier_topology_thread_online(const struct kvsim_tier_topology *t);
KVSIM_EXTERN void kvsim_tier_topology_thread_quiescent(const struct kvsim_tier_topology *t);
/*
 * kvsim_tier_topology_summarize - the report's offload section: the engines' statistics summed
 * in engine order (the result does not depend on threads), the shared G3's residency and
 * evictions. The coordinator, after the run.
 */
KVSIM_EXTERN void kvsim_tier_topology_summarize(const struct kvsim_tier_topology *t,
                                                struct kvsim_engine *const *engines,
                                                uint32_t num_engines,
                                                struct kvsim_offload_summary *out);
/* Frees it: the pool, then the shared G3 (the coordinator leaves the registry). Call after every
 * engine using it is destroyed. Accepts NULL. The coordinator. */
KVSIM_EXTERN void kvsim_tier_topology_destroy(struct kvsim_tier_topology *t);

/* ---- the disaggregated handoff (handoff.c; docs/disagg.md) --------------------------------- */

/*
 * One request served by two engines: its prefill on a prefill engine, its decode on a decode
 * engine, with the KV moving between them (vLLM's NixlConnector, source-first). One handoff per
 * request, identified by a number never reused within a run. Its states, in order:
 *
 *   PREFILLING            the prefill runs on the prefill engine
 *   SOURCE_PINNED         the prefill finished: its blocks belong to the handoff (a sched_pin),
 *                         still counted in the prefill engine's pool and admission; the abort
 *                         clock starts here (deadline = pin + abort timeout)
 *   DECODE_ROUTED         a decode engine was chosen (a booking, not a reservation): the decode
 *                         request waits in its queue
 *   DESTINATION_RESERVED  the decode scheduler admitted it as WAITING_FOR_REMOTE_KVS: it passed
 *                         max_num_seqs and allocated the blocks it lacks
 *   TRANSFERRING          the KV the destination lacks moves over the prefill engine's link
 *   COMPLETED             the transfer ended: the destination is activated (its blocks cached,
 *                         the request runnable) and then the source released
 *   ABORTED               the abort timeout fired first: the source was freed and the decode
 *                         side cancelled
 *
 * That is the source-first order (vLLM, TRT-LLM). A handoff can instead follow the
 * destination-first order (SGLang: the decode reserves before the prefill is dispatched):
 * PREFILLING, DECODE_ROUTED, DESTINATION_RESERVED, SOURCE_PINNED, TRANSFERRING, then COMPLETED
 * or ABORTED. The transitions are the same functions; the order decides which state each one
 * leaves (kvsim_handoff_set_order). The replay drives the source-first order only.
 *
 * The transition functions record the instant and check the order. Facts are idempotent and a
 * late fact about a finished handoff changes nothing (KVSIM_HANDOFF_IGNORED); a fact out of
 * order (one that skips a state, or is dated before an instant already recorded; COMPLETED
 * before the transfer's end) is an error (-EINVAL). Threads: a handoff is plain data. In a replay
 * the coordinator alone applies the transitions, in virtual-time order, from the facts the engines
 * report; the engines keep their own parts of it in the private fields.
 */
enum kvsim_handoff_state {
    KVSIM_HANDOFF_NONE = 0, /* not a disaggregated request */
    KVSIM_HANDOFF_PREFILLING,
    KVSIM_HANDOFF_SOURCE_PINNED,
    KVSIM_HANDOFF_DECODE_ROUTED,
    KVSIM_HANDOFF_DESTINATION_RESERVED,
    KVSIM_HANDOFF_TRANSFERRING,
    KVSIM_HANDOFF_COMPLETED,
    KVSIM_HANDOFF_ABORTED,
};
/* "prefilling", "source_pinned", ..., "none" or "?". */
KVSIM_EXTERN const char *kvsim_handoff_state_name(enum kvsim_handoff_state s);

/* A transition that changed nothing: a repeated fact, or a late one about a finished handoff. */
#define KVSIM_HANDOFF_IGNORED   1
/* An instant that has not happened. */
#define KVSIM_HANDOFF_TIME_NONE INT64_MIN

/* The order of a handoff's commitments: which side is committed first. */
enum kvsim_handoff_order {
    KVSIM_HANDOFF_SOURCE_FIRST = 0,  /* vLLM's NixlConnector: pin, route, reserve, transfer */
    KVSIM_HANDOFF_DESTINATION_FIRST, /* SGLang: route, reserve, pin, transfer */
};

struct kvsim_handoff {
    uint64_t id; /* never reused within a run */
    enum kvsim_handoff_order order;
    uint32_t req;
    int32_t prefill_engine, decode_engine; /* -1 until known */
    enum kvsim_handoff_state state;
    int64_t pin_ns, deadline_ns; /* deadline INT64_MAX: no abort timeout */
    int64_t routed_ns, reserved_ns, transfer_start_ns, transfer_end_ns;
    int64_t source_released_ns; /* the source's blocks went back to the prefill pool */
    int64_t end_ns;             /* COMPLETED or ABORTED */
    uint32_t pinned_blocks;
    uint64_t pinned_tokens;   /* tokens whose KV the source holds */
    uint64_t transfer_tokens; /* tokens the destination lacked (what moves) */
    uint64_t transfer_bytes;
    /* private: what the two engines keep of the handoff, each touching its own only (the
     * fields above are the coordinator's, written in virtual-time order: an engine reports
     * facts through its outbox, never by writing here) */
    struct sched_pin *source;         /* prefill engine: the pin, NULL once freed */
    struct sched_request *decode_req; /* decode engine: its request, NULL once gone */
    bool decode_waiting;              /* decode engine: routed, not reserved yet */
    bool decode_local;                /* decode engine: nothing to load, not admitted yet */
};

/* A source-first handoff in PREFILLING with every instant unset. */
KVSIM_EXTERN void kvsim_handoff_init(struct kvsim_handoff *h, uint64_t id, uint32_t req,
                                     int32_t prefill_engine);
/* Chooses the order of a handoff that has not moved yet (PREFILLING). Returns 0, or -EINVAL
 * once it has (or for an unknown order). */
KVSIM_EXTERN int kvsim_handoff_set_order(struct kvsim_handoff *h, enum kvsim_handoff_order order);
/* SOURCE_PINNED at t with the pin's blocks and tokens (from PREFILLING, or from
 * DESTINATION_RESERVED destination-first); the deadline is t + timeout_ns (<= 0: never). */
KVSIM_EXTERN int kvsim_handoff_pin(struct kvsim_handoff *h, int64_t t, uint32_t blocks,
                                   uint64_t tokens, int64_t timeout_ns);
/* The source's blocks were freed at t (at completion, at an abort, or at the pin itself with
 * --handoff-release immediate); no state change. */
KVSIM_EXTERN int kvsim_handoff_release_source(struct kvsim_handoff *h, int64_t t);
/* DECODE_ROUTED at t to decode_engine (from SOURCE_PINNED, or PREFILLING destination-first). */
KVSIM_EXTERN int kvsim_handoff_route(struct kvsim_handoff *h, int64_t t, int32_t decode_engine);
/* DESTINATION_RESERVED at t: the destination lacks missing_tokens. */
KVSIM_EXTERN int kvsim_handoff_reserve(struct kvsim_handoff *h, int64_t t, uint64_t missing_tokens);
/* TRANSFERRING from start to end (bytes move): from DESTINATION_RESERVED, or SOURCE_PINNED
 * destination-first. */
KVSIM_EXTERN int kvsim_handoff_transfer(struct kvsim_handoff *h, int64_t start, int64_t end,
                                        uint64_t bytes);
/* COMPLETED at t (the transfer's end: destination activated, source released). */
KVSIM_EXTERN int kvsim_handoff_complete(struct kvsim_handoff *h, int64_t t);
/* COMPLETED at t with nothing handed off: no blocks pinned (a prompt shorter than a block,
 * which the decode engine computes itself), from DECODE_ROUTED (SOURCE_PINNED
 * destination-first); -EINVAL when blocks were pinned. */
KVSIM_EXTERN int kvsim_handoff_complete_without_kv(struct kvsim_handoff *h, int64_t t);
/* ABORTED at t (from any state but a final one). */
KVSIM_EXTERN int kvsim_handoff_abort(struct kvsim_handoff *h, int64_t t);
static inline bool kvsim_handoff_is_final(const struct kvsim_handoff *h)
{
    return h->state == KVSIM_HANDOFF_COMPLETED || h->state == KVSIM_HANDOFF_ABORTED;
}

/*
 * The KV transfer between a prefill and a decode engine: duration = latency + bytes of the
 * tokens the destination lacks / bandwidth, never less than 1 ns (even an empty read notifies
 * the source). Transfers from one prefill engine share its link first come, first served: a
 * transfer starts when it is reserved or when the link's previous transfer ends, whichever is
 * later (a per-source FIFO, dynamo #12107), so its end is known when it starts.
 */
struct kvsim_transfer_model {
    double gbps;                 /* link bandwidth, GB/s (> 0) */
    int64_t latency_ns;          /* fixed cost per transfer (>= 0) */
    uint64_t kv_bytes_per_token; /* KV bytes of one token, all layers */
};
/* Bytes and duration of moving tokens (the duration is at least 1 ns). */
KVSIM_EXTERN uint64_t kvsim_transfer_bytes(const struct kvsim_transfer_model *m, uint64_t tokens);
KVSIM_EXTERN int64_t kvsim_transfer_duration_ns(const struct kvsim_transfer_model *m,
                                                uint64_t tokens);
/* The shortest possible transfer: max(latency, 1 ns) (the replay's lookahead). */
KVSIM_EXTERN int64_t kvsim_transfer_min_ns(const struct kvsim_transfer_model *m);

/* ---- the step-time model ------------------------------------------------------------------ */

/*
 * What a step model sees of a step: the polynomial reads the counts and kv_usage; the profile
 * model reads the shape (each prefill chunk with the tokens computed before it, each decode's
 * context). The arrays belong to the caller and are read during the call only.
 */
struct kvsim_step_batch {
    uint64_t prefill_tokens;        /* new prompt/recompute tokens in the step */
    uint32_t num_prefill_reqs;      /* requests contributing prefill tokens */
    uint32_t num_decode_reqs;       /* requests decoding one token */
    double kv_usage;                /* KV utilisation after scheduling, in [0, 1] */
    const uint32_t *prefill_chunk;  /* [num_prefill_reqs] new tokens of each prefill (or NULL) */
    const uint64_t *prefill_prefix; /* [num_prefill_reqs] tokens computed before its chunk */
    const uint64_t *decode_context; /* [num_decode_reqs] tokens computed before the new one */
};

/*
 * The step-time model: one interface, so that profiled tables can plug in later. The default is
 * the polynomial of Dynamo's mocker: prefill_ms = p2*T^2 + p1*T + p0 over the step's new prefill
 * tokens T; decode_ms = d2*u^2 + d1*u + d0 over KV utilisation u, floored at decode_floor_ms; a
 * mixed step pays both; everything divided by speedup_ratio.
 */
struct kvsim_profile;
struct kvsim_step_model {
    double prefill_ms[3]; /* p2, p1, p0 */
    double decode_ms[3];  /* d2, d1, d0 */
    double decode_floor_ms;
    double speedup_ratio;
    double step_overhead_ms; /* added to every step after speedup_ratio (0): CPU-side work a
                              * GPU kernel profile does not see (kvsim calibrate fits it) */
    /* NULL: the polynomial above. Otherwise the profile model (kvsim_profile_load), which the
     * step model reads and never owns: it must outlive every engine using it. */
    const struct kvsim_profile *profile;
};
KVSIM_EXTERN void kvsim_step_model_default(struct kvsim_step_model *m);
/* Duration of a step in virtual nanoseconds (>= 1 for a non-empty step). */
KVSIM_EXTERN int64_t kvsim_step_model_duration_ns(const struct kvsim_step_model *m,
                                                  const struct kvsim_step_batch *b);
/* A lower bound on the duration of any non-empty step (>= 1 ns). */
KVSIM_EXTERN int64_t kvsim_step_model_min_duration_ns(const struct kvsim_step_model *m);
/*
 * Reads {"step_model": {"prefill_ms": [p2,p1,p0], "decode_ms": [d2,d1,d0],
 * "decode_floor_ms": x}, "speedup_ratio": s, "step_overhead_ms": o} (every key optional, unknown
 * keys rejected, except a run configuration's "format", "kvsim" and "options", which the
 * option table reads) from a JSON file over the defaults in *m. Returns 0, or -EINVAL/-ENOENT with
 * a message in err naming the file and the key.
 */
KVSIM_EXTERN int kvsim_step_model_load(const char *path, struct kvsim_step_model *m, char *err,
                                       size_t errlen);

/*
 * The clock: int64 nanoseconds of virtual time, INT64_MAX meaning "never" throughout, so the last
 * instant a run may reach is KVSIM_CLOCK_END_NS. kvsim_clock_add is the checked addition of every
 * step, transfer and epoch: *out = t + d and true when d >= 0 and the sum is on the clock; false
 * (and *out untouched) otherwise, and the caller stops with -EOVERFLOW naming what overflowed.
 */
#define KVSIM_CLOCK_END_NS (INT64_MAX - 1)
static inline bool kvsim_clock_add(int64_t t, int64_t d, int64_t *out)
{
    if (d < 0 || t > KVSIM_CLOCK_END_NS - d)
        return false;
    *out = t + d;
    return true;
}

/*
 * The bounds of a step model (docs/fidelity/timing.md). At load: every coefficient, the floor and
 * the overhead within +-KVSIM_STEP_COEFF_MAX_MS, speedup_ratio within [KVSIM_STEP_SPEEDUP_MIN,
 * KVSIM_STEP_SPEEDUP_MAX]. At resolve, where the batch limits are known: every step at least
 * KVSIM_STEP_MIN_NS (a clock that stands still answers TTFT 0) and at most KVSIM_STEP_MAX_NS (an
 * hour: a million of the longest steps still fit int64 nanoseconds).
 */
#define KVSIM_STEP_COEFF_MAX_MS 1e6
#define KVSIM_STEP_SPEEDUP_MIN  1e-6
#define KVSIM_STEP_SPEEDUP_MAX  1e6
#define KVSIM_STEP_MIN_NS       1000
#define KVSIM_STEP_MAX_NS       3600000000000LL
/*
 * kvsim_step_model_check - every step an engine of these limits can take (1 to
 * max_batched_tokens prefill tokens, decodes at any KV usage, up to max_num_seqs sequences) lasts
 * between KVSIM_STEP_MIN_NS and KVSIM_STEP_MAX_NS. Returns 0, or -EINVAL with a message in err
 * naming the key (or the profile), the step and the allowed range. Any thread.
 */
KVSIM_EXTERN int kvsim_step_model_check(const struct kvsim_step_model *m,
                                        uint32_t max_batched_tokens, uint32_t max_num_seqs,
                                        char *err, size_t errlen);

/* ---- the model and the GPU: capacity the vLLM way (model.c) ------------------------------- */

/* What kvsim reads of a Hugging Face config.json. */
struct kvsim_model_arch {
    char name[128];      /* ORG/NAME */
    char model_type[32]; /* HF model_type: llama, qwen3, ... */
    uint32_t num_layers; /* num_hidden_layers */
    uint32_t hidden_size;
    uint32_t num_heads;    /* num_attention_heads */
    uint32_t num_kv_heads; /* num_key_value_heads (num_heads when absent) */
    uint32_t head_dim;     /* head_dim, else hidden_size / num_heads */
    uint32_t intermediate_size;
    uint32_t vocab_size;
    uint32_t dtype_bytes; /* torch_dtype: 2 for bfloat16/float16, 4 for float32 */
    bool tie_word_embeddings;
    uint32_t max_position_embeddings; /* sizes vLLM's rotary cos/sin cache; 0 when absent */
    /* Mixture of experts (0 experts: dense): every layer's MLP is num_experts routed experts of
     * moe_intermediate_size (intermediate_size when the config has none), each token going to
     * experts_per_tok of them through a router gate of hidden_size x num_experts. */
    uint32_t num_experts, experts_per_tok, moe_intermediate_size;
};
/*
 * kvsim_model_arch_load - reads the Hugging Face config.json at path into *out; name (ORG/NAME,
 * may be NULL: then the file's last two path components without ".json") becomes out->name.
 * Required: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size
 * (positive integers) and torch_dtype (bfloat16, float16 or float32). Optional: model_type,
 * num_key_value_heads (dividing num_attention_heads), head_dim, tie_word_embeddings,
 * max_position_embeddings. A mixture-of-experts config (num_experts, num_local_experts or
 * n_routed_experts > 0) also needs num_experts_per_tok, and may give moe_intermediate_size; one
 * with shared experts or dense layers among its MoE ones (n_shared_experts,
 * shared_expert_intermediate_size, first_k_dense_replace, decoder_sparse_step > 1,
 * mlp_only_layers) is refused: kvsim sizes and times MoE decoders whose every MLP is routed.
 * Returns 0, -ENOENT (unreadable) or -EINVAL (not JSON, a missing or bad field, MoE), with a
 * message in err naming the file and the field; *out is written only on success. Any thread.
 */
KVSIM_EXTERN int kvsim_model_arch_load(const char *path, const char *name,
                                       struct kvsim_model_arch *out, char *err, size_t errlen);

/* The GPU side of capacity, under vLLM's names. */
struct kvsim_gpu_config {
    double gpu_memory_gib;         /* one GPU's memory, GiB (2^30 bytes) */
    double gpu_memory_utilization; /* (0, 1] */
    uint32_t tp;                   /* tensor_parallel_size (>= 1) */
    /* MoE models: the deployment's data-parallel ranks (0 or 1: none) and whether the experts
     * are split over the tp x dp ranks (expert parallelism) rather than tensor-sharded over them
     * (vLLM's FusedMoEParallelConfig.make). */
    uint32_t data_parallel_size;
    bool enable_expert_parallel;
    uint32_t block_size;
    uint32_t max_num_batched_tokens; /* the profile run's activation peak depends on them */
    uint32_t max_num_seqs;
};
/* What kvsim_gpu_capacity_derive found, per GPU (one tensor-parallel rank). */
struct kvsim_gpu_capacity {
    uint64_t requested_bytes;    /* ceil(memory * utilization) */
    uint64_t weight_bytes;       /* this rank's weights */
    uint64_t activation_bytes;   /* the rest of vLLM's non-KV memory (estimated, model.c) */
    uint64_t kv_bytes;           /* what is left for the KV cache */
    uint64_t block_bytes;        /* one block, all layers, this rank */
    uint64_t num_gpu_blocks;     /* kv_bytes / block_bytes, as vLLM's get_num_blocks */
    uint64_t kv_bytes_per_token; /* one token's KV, all layers, all ranks (transfers, offload) */
};
/*
 * kvsim_gpu_capacity_derive - num_gpu_blocks of one tensor-parallel rank the way vLLM v1
 * (0.19) sizes it: requested = ceil(memory * utilization); KV gets what is left after this
 * rank's weights and activation_bytes, an estimate (model.c documents its formula and
 * constants) of vLLM's other non-KV memory: the rotary cache, the profile run's activation
 * peak and its non-torch memory; blocks are kv_bytes /
 * block_bytes, floored, with KV heads split over the ranks (replicated when fewer than tp).
 * Returns 0 and *out, or -EINVAL with a message in err (utilization outside (0, 1], memory
 * <= 0, tp, block_size, max_num_batched_tokens or max_num_seqs 0, tp not dividing
 * num_attention_heads or intermediate_size, KV heads and tp not dividing one another, or not
 * one block left for KV: the message says how many GiB are missing); *out is written only on
 * success. Pure: any thread.
 */
/*
 * kvsim_expert_parallel_check - whether expert parallelism can split a's experts over its
 * tp x data_parallel_size ranks (each rank holds whole experts: the ranks must divide the
 * experts). Returns 0 (a dense model, no expert parallelism, or they divide) or -EINVAL with a
 * message naming the model, the ranks and the experts. Pure: any thread.
 */
KVSIM_EXTERN int kvsim_expert_parallel_check(const struct kvsim_model_arch *a, uint32_t tp,
                                             uint32_t data_parallel_size,
                                             bool enable_expert_parallel, char *err, size_t errlen);
KVSIM_EXTERN int kvsim_gpu_capacity_derive(const struct kvsim_model_arch *a,
                                           const struct kvsim_gpu_config *g,
                                           struct kvsim_gpu_capacity *out, char *err,
                                           size_t errlen);

/* ---- the profile step model (profile.c) ---------------------------------------------------- */

/*
 * kvsim_profile_load - the layer-wise latency profile of a model on a GPU at a TP degree, in
 * LLMServingSim's profiler format: ROOT/HW/ORG/NAME/bf16/tpN/{dense,per_sequence,attention,
 * skew_fit}.csv and ../meta.yaml, the architecture catalog ROOT/models/<model_type>.yaml, the
 * HF config ROOT/configs/model/ORG/NAME.json. tp_link_gbps (GiB/s) and tp_link_latency_ns model
 * the ring all-reduce between ranks (unused at tp 1). Returns 0 and *out (immutable: any
 * thread may read it; kvsim_profile_free it after the engines), or -ENOENT/-EINVAL with a
 * message naming the file, line and field.
 */
struct kvsim_profile_config {
    const char *root;     /* ROOT */
    const char *hardware; /* HW */
    const char *model;    /* ORG/NAME */
    uint32_t tp;
    double tp_link_gbps; /* the link of the TP all-reduce and of the DP ranks' MoE exchange */
    int64_t tp_link_latency_ns;
    /* MoE models: the deployment's DP ranks (0 or 1: none) and expert parallelism over the
     * tp x dp ranks (profile.c, moe_layer_us) */
    uint32_t data_parallel_size;
    bool enable_expert_parallel;
};
KVSIM_EXTERN int kvsim_profile_load(const struct kvsim_profile_config *cfg,
                                    struct kvsim_profile **out, char *err, size_t errlen);
KVSIM_EXTERN void kvsim_profile_free(struct kvsim_profile *p);
/* The model's architecture as the profile read it. */
KVSIM_EXTERN const struct kvsim_model_arch *kvsim_profile_arch(const struct kvsim_profile *p);
/* Where it was read from (ROOT/HW/ORG/NAME/bf16/tpN), its hardware label and TP degree. */
KVSIM_EXTERN const char *kvsim_profile_dir(const struct kvsim_profile *p);
KVSIM_EXTERN const char *kvsim_profile_hardware(const struct kvsim_profile *p);
KVSIM_EXTERN uint32_t kvsim_profile_tp(const struct kvsim_profile *p);
/* Where a step fell outside the profiled grid (bits of a step's outside mask). */
enum kvsim_profile_axis {
    KVSIM_PROFILE_TOKENS = 1,    /* batch tokens above the dense grid */
    KVSIM_PROFILE_SEQUENCES = 2, /* batch sequences above the per-sequence grid */
    KVSIM_PROFILE_ATTENTION = 4, /* a prefill chunk, prefix, decode count or context outside */
};
/*
 * kvsim_step_model_cost_ns - the duration of a step as kvsim_step_model_duration_ns, and in
 * *outside (if not NULL) the axes on which it was clamped to the profiled grid (0 for the
 * polynomial). Pure: any thread.
 */
KVSIM_EXTERN int64_t kvsim_step_model_cost_ns(const struct kvsim_step_model *m,
                                              const struct kvsim_step_batch *b, unsigned *outside);

/*
 * kvsim_engine_args_load - vLLM engine arguments from a JSON object onto *sc, under vLLM's names:
 * block_size, num_gpu_blocks_override (blocks including the null block, as vLLM counts them),
 * max_num_seqs, max_num_active_seqs, max_num_queued_reqs, max_num_batched_tokens, max_model_len,
 * long_prefill_token_threshold,
 * enable_prefix_caching, enable_chunked_prefill, async_scheduling, scheduling_policy ("fcfs" or
 * "priority"), and data_parallel_size and enable_expert_parallel into *par (NULL: only 1 and
 * false are accepted, for engines that cannot be data or expert parallel). Keys absent keep the
 * values; an unknown key or a bad value is an error naming the file and the key. Returns 0,
 * -EINVAL or -ENOENT (the file cannot be read) with err set.
 */
struct kvsim_parallel_args {
    uint32_t data_parallel_size;
    bool enable_expert_parallel;
};
KVSIM_EXTERN int kvsim_engine_args_load(const char *path, struct sched_config *sc,
                                        struct kvsim_parallel_args *par, char *err, size_t errlen);

/* What the router may read at a boundary (written by kvsim_engine_advance). */
struct kvsim_engine_pub {
    uint32_t active_blocks; /* referenced KV blocks, pinned handoff sources excluded */
    uint64_t queued_tokens; /* prompt tokens of requests routed here and not yet admitted */
    uint32_t num_running, num_waiting; /* waiting: skipped ones included, as vLLM counts them */
    uint32_t num_unfinished;           /* admitted here and not finished */
    double kv_usage; /* vLLM's KV cache usage: 1 - free blocks / usable blocks (cached free too) */
    /* Earliest instant a request with a session follow-up (cfg.next_turn) could finish here:
     * its remaining tokens need that many sampling steps, the first ending no earlier than the
     * running step. INT64_MAX when the engine holds none. */
    int64_t earliest_parent_finish;
    /* Disaggregated engines (INT64_MAX otherwise): a prefill engine's earliest possible next
     * pin or abort; a decode engine's earliest possible next reservation (its next schedule
     * while a routed request waits for one). The replay's lookahead. */
    int64_t earliest_handoff;
    uint32_t pinned_blocks; /* prefill engine: blocks held by its pinned sources */
    /* What earliest_parent_finish is made of, for a coordinator that admits arrivals and
     * advances in one go (replay.c): the first step that can end (the running one, or one a
     * wake-up would start; INT64_MAX: none) and the fewest tokens a request with a follow-up
     * here has left (UINT32_MAX: none). */
    int64_t first_step_end;
    uint32_t parent_min_left;
};

/* A request the engine finished (for closed-loop session follow-ups), in completion order. */
struct kvsim_engine_done {
    uint32_t req; /* request index */
    int64_t finish_ns;
};

struct kvsim_engine;

/* What an engine tells its observer (kvsim_engine_config.observe) as it happens, on the
 * engine's thread, during kvsim_engine_admit* / kvsim_engine_advance / kvsim_engine_abort_req. */
enum kvsim_engine_obs_kind {
    KVSIM_OBS_SCHEDULED = 0, /* admitted; a: cached prompt tokens (first admission only) */
    KVSIM_OBS_TOKEN,         /* an output token; a: its index (0 = the first) */
    KVSIM_OBS_PREEMPTED,     /* its KV freed; it will be admitted again */
    KVSIM_OBS_FINISHED,      /* a: enum kvsim_obs_finish; b: output tokens */
};
enum kvsim_obs_finish {
    KVSIM_OBS_STOP = 0, /* stopped (spec stop_after, as at an EOS) */
    KVSIM_OBS_LENGTH,   /* max_tokens reached */
    KVSIM_OBS_ABORT,    /* kvsim_engine_abort_req */
    KVSIM_OBS_REJECTED, /* could never run here */
};
struct kvsim_engine_obs {
    int64_t t;
    uint32_t req;
    uint32_t kind; /* enum kvsim_engine_obs_kind */
    uint32_t a, b;
};
typedef void (*kvsim_engine_observe_fn)(void *ctx, const struct kvsim_engine_obs *o);

/* What an engine serves: whole requests, or one side of disaggregated ones. */
enum kvsim_engine_role {
    KVSIM_ENGINE_AGGREGATED = 0,
    KVSIM_ENGINE_PREFILL, /* prefills only (max_tokens 1, their KV pinned for the decode) */
    KVSIM_ENGINE_DECODE,  /* decodes whose prompt KV comes from a prefill engine */
};

/* The disaggregated side of an engine's configuration (shared by every engine of a replay). */
struct kvsim_engine_disagg {
    struct kvsim_handoff *handoffs; /* per request (written by whichever engine the fact is on) */
    int64_t abort_timeout_ns;       /* <= 0: a pin never expires */
    bool release_immediately;       /* --handoff-release immediate: free the source at the pin */
    /* The decode pool's limits: a prefill engine refuses what the decode pool could never serve
     * (with reasons prefixed "decode_"). */
    uint32_t decode_max_model_len, decode_block_size, decode_num_blocks;
};

struct kvsim_engine_config {
    uint32_t id;
    struct sched_config sched;
    struct kvsim_step_model model;
    const struct kvsim_trace *trace; /* request specs (read-only, shared) */
    struct kvsim_metrics *metrics;   /* records (each written by the request's owner) */
    uint32_t thread; /* metrics sketch index: no other engine advanced concurrently uses it */
    bool kv_events;  /* keep Stored/Removed events for the router */
    const int32_t *next_turn;               /* per request: its session follow-up or -1 (or NULL) */
    const struct kvsim_tiers_config *tiers; /* G2/G3 offload tiers, or NULL for none */
    enum kvsim_engine_role role;
    const struct kvsim_engine_disagg *disagg; /* prefill and decode roles (NULL otherwise) */
    /* The engine API (runtime/kvsim.h): told every admission, token, preemption and finish
     * (NULL: nobody); requests stop after their spec's stop_after outputs (stops). */
    kvsim_engine_observe_fn observe;
    void *observe_ctx;
    bool stops;
    /* The time series (kvsim_engine_samples): one sample per interval of sample_interval_ns
     * (0: none) from sample_origin_ns on. */
    int64_t sample_interval_ns, sample_origin_ns;
    /* Schedule every step one by one: no decode fast path (it gives the same results; this
     * checks that it does). */
    bool decode_fast_path_off;
    /* What a router with a delayed view hears (docs/replay.md, "What the router sees"): at the
     * end of every step, the KV events of the step (kv_events must be on) and the engine's load
     * then, stamped with the step's end, as vLLM publishes one event batch per step after the
     * forward pass. A decode fast run is one step here: its events and load at its last step's
     * end (a block it evicted is then heard of that late). NULL: nobody. Called on the engine's
     * thread. */
    const struct kvsim_step_sink *step_sink;
};

/* Where an engine's step ends go (kvsim_engine_config.step_sink). events and load run on the
 * engine's thread; evs[0..n) (the events recorded since the last call, in order, all of one
 * step) are valid during the call only. A step's events are handed over when it is
 * scheduled (what the schedule cached and evicted), stamped with the step's end, which is known
 * then (a step scheduled ahead: its own end); what a step's end or a transfer records, at the
 * next step's schedule or end, or at kvsim_engine_sink_flush. Loads come at every step's end. */
struct kvsim_step_sink {
    /* returns 0 or a negative errno, which fails the engine's advance */
    int (*events)(void *ctx, uint32_t engine, int64_t step_end, const struct kvpool_event *evs,
                  size_t n);
    void (*load)(void *ctx, uint32_t engine, int64_t step_end, const struct kvsim_engine_pub *load);
    void *ctx;
};

/* What the offload side of an engine did (zero without tiers). */
struct kvsim_engine_offload {
    bool enabled;
    struct kvsim_tiers_stats tiers;
    struct sched_offload_counters sched;
    uint64_t prefill_tokens; /* prompt tokens computed by steps (recomputation included) */
    int64_t blocked_ns;      /* virtual time a request waited for capacity held by copies */
};
KVSIM_EXTERN void kvsim_engine_offload_stats(const struct kvsim_engine *e,
                                             struct kvsim_engine_offload *out);

/* Returns 0 and *out, or a negative errno (-EINVAL for an impossible configuration). */
KVSIM_EXTERN int kvsim_engine_create(const struct kvsim_engine_config *cfg,
                                     struct kvsim_engine **out);
KVSIM_EXTERN void kvsim_engine_destroy(struct kvsim_engine *e);
/* Hands the step sink the KV events recorded and not handed over yet, stamped with the engine's
 * clock (a transfer's, between steps), so that its pool holds nothing the sink has not been
 * given. The engine's thread. Returns 0 or the sink's error. */
KVSIM_EXTERN int kvsim_engine_sink_flush(struct kvsim_engine *e);

/*
 * kvsim_engine_admit - add request `req` arriving at `t` (the current boundary). A request
 * that can never run here (longer than max_model_len, or whose full sequence exceeds the pool)
 * is rejected with a reason instead. Returns 0 or -ENOMEM.
 */
KVSIM_EXTERN int kvsim_engine_admit(struct kvsim_engine *e, uint32_t req, int64_t t);
/* What kvsim_engine_admit_ext adds to the trace's description of a request. */
struct kvsim_engine_admit_opts {
    const kvpool_token *prompt; /* the prompt's spec->input_len token ids, or NULL: the
                                 * trace's hash ids (kvsim_prompt_runs) */
    uint32_t min_tokens;        /* no stop before this many outputs */
    int64_t priority;           /* the priority policy's: lower first */
    /* With the trace's hash ids: the hashes of the prompt's first num_prompt_hashes full blocks
     * that a kv router computed already (kvpool_hash_prompt, no salt) at hashes_block_size.
     * The engine takes them instead of hashing those blocks again when that is its block
     * size (sched_request_params.prompt_hashes). */
    const kvpool_hash *prompt_hashes;
    uint32_t num_prompt_hashes;
    uint32_t hashes_block_size;
};
/* kvsim_engine_admit with those (o NULL: as kvsim_engine_admit). Returns 0 or -ENOMEM. */
KVSIM_EXTERN int kvsim_engine_admit_ext(struct kvsim_engine *e, uint32_t req, int64_t t,
                                        const struct kvsim_engine_admit_opts *o);
/*
 * kvsim_engine_abort_req - abort request req (a client abort, vLLM's abort_requests): at once
 * when no step runs, else right after the running step ends (vLLM handles aborts between
 * steps); it finishes ABORTED then (metrics status aborted, reason "client_abort"). Returns 0,
 * -ENOENT (req is not unfinished here) or -ENOMEM.
 */
KVSIM_EXTERN int kvsim_engine_abort_req(struct kvsim_engine *e, uint32_t req);

/*
 * kvsim_engine_advance - process every step that completes at or before `until`,
 * starting each next step at the completion instant, and start a step at `until` if the engine
 * is idle with work; with a shared G3, publish `until` as the engine's registry watermark
 * (the calling thread must then be registered with the block registry and online). Returns 0,
 * or a negative errno (KVSIM_EINVARIANT, -EUCLEAN, with a violation message for a broken
 * invariant; KVSIM_EDEADEND, -EDEADLK, if the engine holds unfinished requests it can never
 * make progress on: kvsim_engine_error says which).
 */
KVSIM_EXTERN int kvsim_engine_advance(struct kvsim_engine *e, int64_t until);
/*
 * The data-parallel ranks of a mixture-of-experts deployment step in lockstep, as vLLM's
 * (docs/fidelity/dp-lockstep.md): the experts' collectives need every rank, so each step starts
 * on all ranks at once and lasts as long as the slowest rank's; a rank with nothing to run takes
 * a dummy step meanwhile. A wave starts when a rank gets work while all are idle; it ends at a
 * synchronization point (every KVSIM_LOCKSTEP_SYNC_STEPS steps, vLLM's all-reduce of "anything
 * unfinished") when no rank has anything unfinished, so up to that many - 1 dummy steps follow
 * the last request. Each rank keeps its own scheduler, pool and step model; a rank's step is
 * priced at its own batch, the lockstep step at the largest of them (kvsim does not pad the
 * smaller batches as vLLM's DP padding does), a dummy step alone at one token.
 * The ranks belong to the group: advance them only through kvsim_lockstep_advance, on one
 * thread at a time (the thread that owns the deployment in the phase). No offload tiers, no
 * disaggregated roles.
 */
#define KVSIM_LOCKSTEP_SYNC_STEPS 32u
struct kvsim_lockstep {
    struct kvsim_engine *const *ranks;
    uint32_t num_ranks;
    int64_t dummy_ns;    /* a step of dummy ranks only */
    int64_t now;         /* the group's clock: the last step's end, or an admission instant */
    int64_t step_end;    /* the running lockstep step's end, or INT64_MAX */
    bool running;        /* a wave is under way: the ranks step */
    uint32_t since_sync; /* steps since the wave's last synchronization point */
    /* The last wave's dummy tail (not run: it changes nothing): dummy steps from tail_origin,
     * tail_since steps after a synchronization point, to tail_end (INT64_MIN: none). */
    int64_t tail_origin, tail_end;
    uint32_t tail_since;
    uint64_t steps, dummy_rank_steps; /* lockstep steps; ranks' dummy steps among them */
};
/* Binds the ranks (their clocks start together; the decode fast path is off for them). Returns
 * 0, or -EINVAL (no ranks, a rank with tiers, a disaggregated role, or no profile model). */
KVSIM_EXTERN int kvsim_lockstep_init(struct kvsim_lockstep *ls, struct kvsim_engine *const *ranks,
                                     uint32_t num_ranks);
/*
 * kvsim_lockstep_advance - as kvsim_engine_advance for every rank at once: every lockstep step
 * that ends at or before until is applied on each rank, and the next one started at its end
 * (or at until when a rank got work while the group was idle). Returns 0 or a negative errno
 * (a rank's, kvsim_engine_error of that rank says why; KVSIM_EDEADEND when unfinished requests
 * can never run: every rank dummy with nothing else to wait for).
 */
KVSIM_EXTERN int kvsim_lockstep_advance(struct kvsim_lockstep *ls, int64_t until);
/* The running lockstep step's end, or INT64_MAX (idle). */
KVSIM_EXTERN int64_t kvsim_lockstep_next_event(const struct kvsim_lockstep *ls);

/* What engine e did over the run: preemptions, steps, busy time, KV usage (the request counts
 * of out stay 0: the records have them). */
KVSIM_EXTERN void kvsim_engine_usage(const struct kvsim_engine *e,
                                     struct kvsim_engine_summary *out);
/* The running step's end, or INT64_MAX when no step runs. */
KVSIM_EXTERN int64_t kvsim_engine_step_end(const struct kvsim_engine *e);
/* The engine's clock: the last step end, arrival or event it processed. */
KVSIM_EXTERN int64_t kvsim_engine_clock(const struct kvsim_engine *e);
/* Earliest time this engine has something to do (its running step's end or a transfer's end),
 * or INT64_MAX. */
KVSIM_EXTERN int64_t kvsim_engine_next_event(const struct kvsim_engine *e);
/* The load published for the router by the last kvsim_engine_advance. */
KVSIM_EXTERN const struct kvsim_engine_pub *kvsim_engine_pub(const struct kvsim_engine *e);
/* Completed requests since the last call; resets the list. */
KVSIM_EXTERN const struct kvsim_engine_done *kvsim_engine_take_done(struct kvsim_engine *e,
                                                                    uint32_t *n);
/* The same list without taking it. */
KVSIM_EXTERN const struct kvsim_engine_done *kvsim_engine_peek_done(const struct kvsim_engine *e,
                                                                    uint32_t *n);
/* The engine's G1 pool, for KV events and statistics. */
KVSIM_EXTERN struct kvpool *kvsim_engine_pool(struct kvsim_engine *e);
KVSIM_EXTERN uint32_t kvsim_engine_unfinished(const struct kvsim_engine *e);
KVSIM_EXTERN uint64_t kvsim_engine_preemptions(const struct kvsim_engine *e);
KVSIM_EXTERN uint64_t kvsim_engine_steps(const struct kvsim_engine *e);
/* Steps the profile model clamped to its grid, and in axis[] (if not NULL) per axis: tokens,
 * sequences, attention (a step may count on several). 0 with the polynomial. */
KVSIM_EXTERN uint64_t kvsim_engine_steps_outside(const struct kvsim_engine *e, uint64_t axis[3]);
/*
 * Messages between disaggregated engines, through the replay's coordinator. An engine is posted
 * messages for future instants (kvsim_engine_post) and applies each at its instant during its
 * advance: a prefill engine's RELEASE, a decode engine's ACTIVATE, CANCEL and ARRIVE (at one
 * instant in that order, after a step ending then). It reports what happened on it through its
 * outbox, read at boundaries: PINNED and ABORTED (prefill), RESERVED (decode).
 */
enum kvsim_engine_msg_kind {
    KVSIM_MSG_RELEASE = 0, /* to a prefill engine: the transfer ended, release the source */
    KVSIM_MSG_ACTIVATE,    /* to a decode engine: the transfer ended, activate the destination */
    KVSIM_MSG_CANCEL,      /* to a decode engine: the handoff was aborted, cancel its request */
    KVSIM_MSG_ARRIVE,      /* to a decode engine: the decode request arrives (a: 1 when its KV
                            * is handed off, 0 when the decode computes the prompt) */
    KVSIM_MSG_PINNED,      /* from a prefill engine: the prefill finished, its source pinned
                            * (a: the pin's blocks, b: its tokens; a = 0: a prompt shorter
                            * than a block, freed at once, nothing to hand off) */
    KVSIM_MSG_ABORTED,     /* from a prefill engine: the abort timeout freed the source */
    KVSIM_MSG_COMPLETED,   /* from a prefill engine: the transfer ended with the source held:
                            * the destination is activated, the source released */
    KVSIM_MSG_RESERVED,    /* from a decode engine: its destination is reserved (a: the tokens
                            * it lacks) */
};
struct kvsim_engine_msg {
    int64_t t;
    uint32_t kind; /* enum kvsim_engine_msg_kind */
    uint32_t req;  /* the request (its handoff is handoffs[req]) */
    uint64_t a, b; /* what the kind says */
    /* PINNED, then ARRIVE: the hashes of the prompt's first num_hashes full blocks, copied from
     * the prefill (when both pools have one block size), so that neither the decode router nor
     * the decode engine hashes the prompt again; NULL when not given. malloc'd; the message
     * owns it: whoever takes a message from an outbox or an inbox frees it or passes it on. */
    kvpool_hash *hashes;
    uint32_t num_hashes;
};
/* Posts m, to be applied at m->t, which must come after the instant the engine last advanced
 * to (it has processed everything up to there). The engine's published view (its pub) accounts
 * for the message at once (an idle engine wakes at m->t). Returns 0, -EINVAL (m->t too early)
 * or -ENOMEM. */
KVSIM_EXTERN int kvsim_engine_post(struct kvsim_engine *e, const struct kvsim_engine_msg *m);
/* What happened since the last call, in time order; resets the outbox. */
KVSIM_EXTERN const struct kvsim_engine_msg *kvsim_engine_take_outbox(struct kvsim_engine *e,
                                                                     uint32_t *n);
/* A prefill engine's pinned blocks integrated over virtual time (block-ns) and their peak. */
KVSIM_EXTERN void kvsim_engine_pin_stats(const struct kvsim_engine *e, double *block_ns,
                                         uint32_t *peak_blocks);

/*
 * kvsim_engine_samples - the engine's time series so far: one sample per interval that ended at
 * or before the last instant the engine processed (struct kvsim_ts_sample, report.h), *n of
 * them. kvsim_engine_samples_finish closes intervals up to num_intervals with the engine's
 * final state (the replay's end). Context: the engine's owner. finish returns 0 or -ENOMEM.
 */
KVSIM_EXTERN const struct kvsim_ts_sample *kvsim_engine_samples(const struct kvsim_engine *e,
                                                                uint32_t *n);
KVSIM_EXTERN int kvsim_engine_samples_finish(struct kvsim_engine *e, uint32_t num_intervals);

/* The report's timing part: which step model m is (num_gpu_blocks: one engine's), steps over
 * engines[0..n) and those off the profile's grid, summed in engine order. */
KVSIM_EXTERN void kvsim_engines_timing(const struct kvsim_step_model *m, uint32_t num_gpu_blocks,
                                       struct kvsim_engine *const *engines, uint32_t n,
                                       struct kvsim_timing_summary *t);

/* Last error message (for -EUCLEAN / -EDEADLK). */
KVSIM_EXTERN const char *kvsim_engine_error(const struct kvsim_engine *e);

#ifdef __cplusplus
}
#endif
#endif /* KVSIM_ENGINE_H */
