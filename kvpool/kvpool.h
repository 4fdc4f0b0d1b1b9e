/*
 * kvpool.h - the G1 KV block pool: blocks, free queue, prefix cache, transactional allocation.
 *
 * This is kvsim's model of vLLM v1's BlockPool + KVCacheManager for one full-attention group
 * (docs/fidelity/vllm.md; reference: shared/reference/vllm-semantics.md sections 7-9).
 *
 * Ownership and threads. A pool and every sequence attached to it belong to exactly one thread
 * (the engine's owning worker). No function of the pool is thread-safe; none blocks; none allocates
 * per block: blocks live in arrays indexed by block id, and the free queue and the prefix-cache
 * map are intrusive lists over those arrays. Every operation costs O(blocks it touches), except
 * kvpool_reset_prefix_cache() and kvpool_check(), which walk the pool.
 *
 * Allocation is a transaction. kvpool_prepare() runs the whole preflight of vLLM's
 * allocate_slots() without changing anything and returns a typed outcome; on READY the plan can
 * be committed (infallible: touch hits, allocate fresh blocks, cache full blocks, in that order)
 * or aborted/dropped (nothing to undo, because prepare changed nothing). A plan is bound to the
 * pool state it was prepared against: any mutating call in between makes it stale, and
 * committing a stale plan is refused with -ESTALE and no effect.
 *
 * Errors are negative errno values.
 */
#ifndef KVSIM_KVPOOL_H
#define KVSIM_KVPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvsim_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A block id. Block 0 is the null block: never allocated, freed, cached or referenced. */
typedef int32_t kvpool_block_id;
/* A chained block hash (XXH3-64 over the parent hash, the block's tokens and extra keys). */
typedef uint64_t kvpool_hash;
/* A token id. */
typedef uint32_t kvpool_token;

/* The parent hash of block 0 of every sequence (vLLM's NONE_HASH, fixed for determinism). */
#define KVPOOL_NONE_HASH  UINT64_C(0x6b7673696d4e4f4e)
#define KVPOOL_NULL_BLOCK 0

struct kvpool_config {
    uint32_t num_blocks;        /* blocks including the null block 0; usable = num_blocks - 1 */
    uint32_t block_size;        /* tokens per block */
    uint32_t max_model_len;     /* cap on tokens per sequence for slot math; 0 = no cap */
    double watermark;           /* fraction of num_blocks held back from admissions, [0, 1) */
    bool enable_prefix_caching; /* hash and cache full blocks, serve hits */
    bool enable_kv_events;      /* record Stored/Removed/Cleared events for kvpool_events_drain */
};

/* Fills cfg with vLLM's defaults: 16-token blocks, caching on, watermark 0, events off. */
KVSIM_EXTERN void kvpool_config_default(struct kvpool_config *cfg);

struct kvpool;

/*
 * kvpool_create - validate cfg and build a pool whose free queue is [1 .. num_blocks-1].
 * Returns 0 and sets *out, -EINVAL for an impossible configuration (num_blocks < 2,
 * block_size 0, watermark outside [0, 1)), -ENOMEM when memory runs out.
 */
KVSIM_EXTERN int kvpool_create(const struct kvpool_config *cfg, struct kvpool **out);
/* Frees the pool. Sequences still attached must not be used afterwards. Accepts NULL. */
KVSIM_EXTERN void kvpool_destroy(struct kvpool *pool);
KVSIM_EXTERN const struct kvpool_config *kvpool_get_config(const struct kvpool *pool);

/* ---- sequences: the per-request KV state --------------------------------------------------- */

/* Which kind of holder a sequence's block references belong to (ownership reconciliation). */
enum kvpool_owner_class {
    KVPOOL_OWNER_NONE = 0,         /* nobody: an active block in this class is a leak */
    KVPOOL_OWNER_REQUEST,          /* a request's block table */
    KVPOOL_OWNER_CACHE_ENTRY,      /* an unreferenced block kept for its hash (evictable) */
    KVPOOL_OWNER_DEST_RESERVATION, /* destination of an async load or a disaggregated handoff */
    KVPOOL_OWNER_TRANSFER_HOLD,    /* source of an in-flight copy (kvpool_hold_block) */
    KVPOOL_OWNER_DEFERRED_FREE,    /* detached blocks waiting for a deferred-free fence */
    KVPOOL_OWNER_HANDOFF_SOURCE,   /* a finished prefill's blocks pinned for a remote decode */
};
KVSIM_EXTERN const char *kvpool_owner_class_name(enum kvpool_owner_class cls);

/*
 * The KV state of one request: its token hashes and its block table. The caller owns the
 * memory (typically embedded in its request) and must treat every field as read-only; only
 * this module writes them.
 */
struct kvpool_seq {
    uint64_t id;                    /* caller's request id, used in ownership reports */
    enum kvpool_owner_class owner;  /* class of this sequence's block references */
    kvpool_block_id *blocks;        /* block table, in allocation order */
    uint32_t num_blocks;            /* entries in blocks[] */
    uint32_t cap_blocks;            /* capacity of blocks[] */
    uint32_t num_cached_blocks;     /* leading blocks already registered in the prefix cache */
    kvpool_hash *hashes;            /* hash of every full block of the tokens so far */
    uint32_t num_hashes;            /* entries in hashes[] (= num_tokens / block_size) */
    uint32_t cap_hashes;            /* capacity of hashes[] */
    uint64_t num_tokens;            /* tokens appended so far (prompt + outputs) */
    kvpool_token *partial;          /* tokens of the trailing, not yet full block */
    uint64_t salt_hash;             /* extra key of block 0 (cache salt); 0 = none */
    bool skip_reading_prefix_cache; /* e.g. prompt-logprob requests: never served hits */
    struct kvpool_seq *prev, *next; /* the pool's list of attached sequences */
};

/*
 * kvpool_seq_init - attach an empty sequence to the pool (owner class REQUEST).
 * salt/salt_len: the cache salt (extra key of block 0), or NULL/0 for none.
 * Returns 0, or -ENOMEM.
 */
KVSIM_EXTERN int kvpool_seq_init(struct kvpool *pool, struct kvpool_seq *seq, uint64_t id,
                                 const void *salt, size_t salt_len);
/*
 * kvpool_seq_fini - detach a sequence and free its arrays. The sequence must hold no blocks
 * (free them first): returns -EBUSY and changes nothing otherwise, 0 on success.
 */
KVSIM_EXTERN int kvpool_seq_fini(struct kvpool *pool, struct kvpool_seq *seq);
/* Appends tokens, hashing each block that becomes full. Returns 0 or -ENOMEM. */
KVSIM_EXTERN int kvpool_seq_append_tokens(struct kvpool *pool, struct kvpool_seq *seq,
                                          const kvpool_token *tokens, size_t n);
/* A run of identical tokens (a compact prompt: trace hash ids expand to runs). */
struct kvpool_token_run {
    kvpool_token token;
    uint32_t count;
};

/* Appends n copies of one token (trace hash ids expand this way). Returns 0 or -ENOMEM. */
KVSIM_EXTERN int kvpool_seq_append_repeat(struct kvpool *pool, struct kvpool_seq *seq,
                                          kvpool_token token, size_t n);
/*
 * kvpool_seq_append_runs - appends the runs' tokens in order, hashing each block that becomes
 * full, except the first num_known full blocks, which take known[0..num_known) as their hashes:
 * work a caller did already (a router's kvpool_hash_prompt of the same prompt, with this pool's
 * block size and the sequence's salt; other values would corrupt the prefix cache, so callers
 * that check invariants compare them). num_known > 0 needs an empty sequence. Returns 0,
 * -EINVAL (num_known on a non-empty sequence, or more than the runs' full blocks), -ENOMEM.
 */
KVSIM_EXTERN int kvpool_seq_append_runs(struct kvpool *pool, struct kvpool_seq *seq,
                                        const struct kvpool_token_run *runs, uint32_t num_runs,
                                        const kvpool_hash *known, uint32_t num_known);

/*
 * kvpool_hash_prompt - the block hashes a sequence with this prompt would have, without a pool
 * (routers use it to compare a request against engines' cached blocks). salt as for
 * kvpool_seq_init. Hashes only the first min(full blocks, cap) blocks (callers that stop at the
 * first miss ask for a few and come back for more) and returns that count, or -ENOMEM.
 */
KVSIM_EXTERN int64_t kvpool_hash_prompt(uint32_t block_size, const void *salt, size_t salt_len,
                                        const struct kvpool_token_run *runs, uint32_t num_runs,
                                        kvpool_hash *hashes, uint32_t cap);
/* kvpool_hash_prompt given hashes[0..have) already (its own earlier answer, with fewer asked):
 * hashes blocks [have, min(full blocks, cap)) only and returns the count, or -ENOMEM. */
KVSIM_EXTERN int64_t kvpool_hash_prompt_more(uint32_t block_size, const void *salt, size_t salt_len,
                                             const struct kvpool_token_run *runs, uint32_t num_runs,
                                             kvpool_hash *hashes, uint32_t have, uint32_t cap);

/* ---- lookup -------------------------------------------------------------------------------- */

/* The result of a lookup: the longest cached prefix of a sequence. Takes no references. */
struct kvpool_hits {
    uint32_t num_blocks;    /* hit blocks (a prefix of the sequence's block hashes) */
    uint32_t num_evictable; /* of which unreferenced, sitting in the free queue */
    uint64_t num_tokens;    /* num_blocks * block_size */
    uint64_t generation;    /* pool state the hits were computed against */
};

/*
 * kvpool_lookup - longest prefix of seq's block hashes present in the cache, capped at
 * num_tokens - 1 tokens (the last token is always recomputed). For duplicate hashes the
 * earliest-inserted block is the hit. No hits when caching is off or the sequence skips reading
 * the cache. If ids is not NULL, the first min(hits, ids_cap) hit block ids are written there.
 * Changes nothing.
 */
KVSIM_EXTERN void kvpool_lookup(const struct kvpool *pool, const struct kvpool_seq *seq,
                                struct kvpool_hits *hits, kvpool_block_id *ids, uint32_t ids_cap);

/* ---- transactional allocation (vLLM allocate_slots) --------------------------------------- */

enum kvpool_outcome {
    KVPOOL_READY = 0,          /* the plan fits: commit or abort it */
    KVPOOL_CAPACITY_EXHAUSTED, /* not enough free blocks: preempt (running phase) and retry */
    KVPOOL_BLOCKED_ON_OFFLOAD, /* capacity exists but is held by an in-flight G1->G2 copy */
    KVPOOL_RETRY_NOW,          /* a synchronous release made capacity: retry once */
};
KVSIM_EXTERN const char *kvpool_outcome_name(enum kvpool_outcome outcome);

/* Which of allocate_slots' checks refused a plan (kvpool_plan.limit): the diagnosis of a dead
 * end names it. Checked in this order, the first that alone refuses wins. */
enum kvpool_limit {
    KVPOOL_LIMIT_NONE = 0,  /* READY, or not refused by capacity */
    KVPOOL_LIMIT_FREE,      /* the blocks needed exceed the free blocks themselves */
    KVPOOL_LIMIT_WATERMARK, /* they fit the free blocks, not with the watermark (#44594) */
    KVPOOL_LIMIT_RESERVED,  /* they fit with the watermark, not with the blocks promised to
                             * in-flight prefills (#44560) */
};
KVSIM_EXTERN const char *kvpool_limit_name(enum kvpool_limit limit);

/* The arguments of vLLM's allocate_slots, for one full-attention group. */
struct kvpool_alloc_args {
    uint64_t num_computed_tokens;   /* the request's num_computed_tokens before this step */
    uint64_t num_new_tokens;        /* tokens to schedule now (0 only with external tokens) */
    const struct kvpool_hits *hits; /* local prefix hits to take (NULL = none) */
    uint64_t num_lookahead_tokens;  /* speculative slots */
    uint64_t num_external_computed_tokens; /* tokens a KV connector provides */
    uint64_t reserved_blocks;              /* blocks promised to in-flight prefills (#44560) */
    bool delay_cache_blocks;               /* do not cache yet (async load destinations) */
    bool full_sequence_must_fit;           /* full-ISL gate (#37307) */
    bool has_scheduled_reqs;               /* something is running: the watermark may apply */
    bool is_admission; /* request is WAITING or PREEMPTED: the watermark may apply */
};

/* A prepared allocation. Plain data: dropping it is the same as aborting it. */
struct kvpool_plan {
    enum kvpool_outcome outcome;
    uint32_t num_hit_blocks;      /* hits to touch and append */
    uint32_t num_new_blocks;      /* fresh blocks to take from the free queue front */
    uint32_t num_blocks_needed;   /* new blocks + evictable hits: free capacity consumed */
    uint32_t cache_upto_blocks;   /* after commit, blocks [0, this) are cached (if caching) */
    uint32_t first_new_index;     /* index in seq->blocks of the first block commit adds */
    uint64_t generation;          /* pool state the plan was prepared against */
    uint64_t capacity_generation; /* capacity state seen (evidence for RETRY_NOW) */
    uint32_t num_blocks_short;    /* not READY: free blocks missing (BLOCKED: all of them are
                                   * held only by in-flight copies, kvpool_num_held_only_blocks) */
    enum kvpool_limit limit;      /* not READY: the check that refused it */
    const struct kvpool_seq *seq;
};

/*
 * kvpool_prepare - the whole allocate_slots preflight: watermark, full-sequence gate, main check
 * against free - reserved, with evictable hits consuming free capacity; checked arithmetic.
 * When free capacity falls short, the outcome is BLOCKED_ON_OFFLOAD if the blocks held only by
 * transfer sources (kvpool_hold_block) would cover the shortfall once released, else
 * CAPACITY_EXHAUSTED; plan->num_blocks_short says by how much. (RETRY_NOW is never produced
 * here: it is the caller's verdict when a synchronous release moved capacity_generation past
 * the plan's.)
 * Writes the outcome into plan->outcome and returns it (>= 0), or a negative errno: -EINVAL
 * for impossible arguments (num_new_tokens 0 without external tokens, hits larger than the
 * sequence), -ESTALE when args->hits were computed against an older pool state.
 * Changes nothing in the pool or the sequence.
 */
KVSIM_EXTERN int kvpool_prepare(const struct kvpool *pool, const struct kvpool_seq *seq,
                                const struct kvpool_alloc_args *args, struct kvpool_plan *plan);
/*
 * kvpool_commit - apply a READY plan: touch the hit blocks (ref+1, out of the free queue) and
 * append them, pop fresh blocks from the free queue front (lazily evicting their hashes:
 * Removed events), then cache newly full blocks (one Stored event). Returns 0; -EINVAL if the
 * plan is not READY or is for another sequence; -ESTALE (no effect) if the pool changed since
 * prepare.
 */
KVSIM_EXTERN int kvpool_commit(struct kvpool *pool, struct kvpool_seq *seq,
                               struct kvpool_plan *plan);
/*
 * kvpool_extend_in_place - the common case of a running sequence's allocation, without a plan:
 * when num_new_tokens more slots after num_computed_tokens fit in the blocks seq already holds,
 * do exactly what kvpool_prepare + kvpool_commit would do for it (no hits, no external or
 * lookahead tokens, no reservation, not an admission): cache the blocks it fills and advance the
 * generation. Returns true if it applied; false (nothing changed) if blocks are needed or the
 * arguments are ones prepare refuses: then prepare and commit.
 */
KVSIM_EXTERN bool kvpool_extend_in_place(struct kvpool *pool, struct kvpool_seq *seq,
                                         uint64_t num_computed_tokens, uint64_t num_new_tokens);
/*
 * kvpool_decode_steps_in_place - how many consecutive decode steps of seq, from
 * num_computed_tokens on, kvpool_extend_in_place would apply without taking a block: step j
 * extends by one token at num_computed_tokens + j, after the j tokens of the steps before were
 * appended. None of them fills a block for the prefix cache but, without a store hook, the last
 * one may (kvpool_decode_steps_fill then does its caching). At most max. Reads only.
 */
KVSIM_EXTERN uint64_t kvpool_decode_steps_in_place(const struct kvpool *pool,
                                                   const struct kvpool_seq *seq,
                                                   uint64_t num_computed_tokens, uint64_t max);
/*
 * kvpool_decode_steps_taking_block - the same count when step 0 is the one that needs a block:
 * when the blocks seq holds are full at num_computed_tokens and kvpool_prepare + kvpool_commit of
 * one token would take exactly one block and cache nothing (no store hook), how many steps from
 * num_computed_tokens on need no further block, step 0 included; else 0. Reads only.
 */
KVSIM_EXTERN uint64_t kvpool_decode_steps_taking_block(const struct kvpool *pool,
                                                       const struct kvpool_seq *seq,
                                                       uint64_t num_computed_tokens, uint64_t max);
/*
 * kvpool_decode_steps_fill - the prefix caching of the last of k steps that
 * kvpool_decode_steps_in_place allowed from num_computed_tokens, once their k tokens were
 * appended to seq: what that step's kvpool_extend_in_place cached, if anything (the blocks it
 * filled, with their KV event). Owner thread; call it for each sequence in the order the steps
 * extend them.
 */
KVSIM_EXTERN void kvpool_decode_steps_fill(struct kvpool *pool, struct kvpool_seq *seq,
                                           uint64_t num_computed_tokens, uint64_t k);
/* kvpool_extend_in_place_steps - what k such kvpool_extend_in_place calls do (the decode fast
 * path's bulk form): the generation advances by k. Owner thread. */
KVSIM_EXTERN void kvpool_extend_in_place_steps(struct kvpool *pool, uint64_t k);
/* kvpool_abort - drop a plan. Never changes the pool: prepare reserved nothing to give back. */
KVSIM_EXTERN void kvpool_abort(struct kvpool_plan *plan);

/*
 * kvpool_commit_partial_legacy - THE OLD BUG, kept to prove the soak finds it (issue #6,
 * `--legacy-partial-alloc`): for a BLOCKED_ON_OFFLOAD plan, take every free block now and keep
 * them, as a non-transactional allocator that blocks half way would. Hits are not taken. Never
 * use it outside that reproduction. Returns the number of blocks taken (>= 0), -EINVAL (plan not
 * BLOCKED_ON_OFFLOAD or for another sequence), -ESTALE, -ENOMEM.
 */
KVSIM_EXTERN int kvpool_commit_partial_legacy(struct kvpool *pool, struct kvpool_seq *seq,
                                              const struct kvpool_plan *plan);

/* Registers seq's full blocks up to num_tokens in the prefix cache (vLLM cache_blocks). */
KVSIM_EXTERN void kvpool_cache_blocks(struct kvpool *pool, struct kvpool_seq *seq,
                                      uint64_t num_tokens);

/* ---- freeing ------------------------------------------------------------------------------- */

/*
 * kvpool_free - release every block of seq, tail first. Blocks reaching ref 0 go to the front
 * of the free queue when unhashed (or caching is off) and to the back when hashed, each group
 * in release order. The sequence keeps its tokens and hashes and holds no blocks afterwards.
 */
KVSIM_EXTERN void kvpool_free(struct kvpool *pool, struct kvpool_seq *seq);
/*
 * kvpool_seq_move_blocks - move every block reference of src to the end of dst (vLLM's
 * pop_blocks_for_free, for deferred frees: dst is typically a DEFERRED_FREE sequence).
 * Returns 0 or -ENOMEM (nothing moved).
 */
KVSIM_EXTERN int kvpool_seq_move_blocks(struct kvpool *pool, struct kvpool_seq *dst,
                                        struct kvpool_seq *src);

/*
 * A store hook sees every run of blocks entering the prefix cache (the Stored event, with block
 * ids): the offload policy writes them through to G2. Called inside commit / cache_blocks on the
 * owner thread; it must not call any mutating kvpool function (record, act after).
 */
typedef void (*kvpool_store_fn)(void *ctx, const kvpool_block_id *blocks, const kvpool_hash *hashes,
                                uint32_t n);
/* Installs (or with fn NULL removes) the store hook. */
KVSIM_EXTERN void kvpool_set_store_hook(struct kvpool *pool, kvpool_store_fn fn, void *ctx);

/* Transfer source holds: an extra reference owned by an in-flight copy. A ref-0 cached block
 * leaves the free queue while held. Returns 0, or -EINVAL (null or out-of-range block, or an
 * unreferenced block without a hash, which holds no data worth copying). */
KVSIM_EXTERN int kvpool_hold_block(struct kvpool *pool, kvpool_block_id block);
/* Releases one hold (the block returns to the free queue back if nothing else holds it).
 * Returns 0, or -EINVAL if the block has no hold. */
KVSIM_EXTERN int kvpool_release_hold(struct kvpool *pool, kvpool_block_id block);

/* ---- state --------------------------------------------------------------------------------- */

KVSIM_EXTERN uint32_t kvpool_num_free_blocks(const struct kvpool *pool); /* null block excluded */
/* Blocks referenced only by transfer source holds: free once their copies end. */
KVSIM_EXTERN uint32_t kvpool_num_held_only_blocks(const struct kvpool *pool);
/* Blocks every reference of which belongs to handoff source pins (sequences of owner class
 * HANDOFF_SOURCE): the capacity a disaggregated prefill engine strands for remote decodes. O(1). */
KVSIM_EXTERN uint32_t kvpool_num_pinned_only_blocks(const struct kvpool *pool);
KVSIM_EXTERN uint32_t kvpool_num_usable_blocks(const struct kvpool *pool); /* num_blocks - 1 */
KVSIM_EXTERN double kvpool_usage(const struct kvpool *pool);               /* 1 - free / usable */
/* kvpool_usage once n more blocks are taken from the free queue (the same double). */
KVSIM_EXTERN double kvpool_usage_taking(const struct kvpool *pool, uint32_t n);
KVSIM_EXTERN uint32_t kvpool_ref_count(const struct kvpool *pool, kvpool_block_id block);
/* Sets *hash and returns true if the block carries a hash in the prefix cache. */
KVSIM_EXTERN bool kvpool_block_hash(const struct kvpool *pool, kvpool_block_id block,
                                    kvpool_hash *hash);
/* Earliest-inserted cached block with this hash, or -ENOENT. */
KVSIM_EXTERN kvpool_block_id kvpool_cache_find(const struct kvpool *pool, kvpool_hash hash);
/* How many cached blocks carry this hash (duplicates are possible, as in vLLM). */
KVSIM_EXTERN uint32_t kvpool_cache_count(const struct kvpool *pool, kvpool_hash hash);
/* Writes the free queue front to back into ids (at most cap); returns its full length. */
KVSIM_EXTERN uint32_t kvpool_free_queue_snapshot(const struct kvpool *pool, kvpool_block_id *ids,
                                                 uint32_t cap);
/* Bumped by every mutation. */
KVSIM_EXTERN uint64_t kvpool_generation(const struct kvpool *pool);
/* Bumped whenever blocks return to the free queue (capacity grew). */
KVSIM_EXTERN uint64_t kvpool_capacity_generation(const struct kvpool *pool);

/*
 * kvpool_reset_prefix_cache - drop every hash (one Cleared event). Fails with -EBUSY and
 * changes nothing while any block is referenced. O(num_blocks).
 */
KVSIM_EXTERN int kvpool_reset_prefix_cache(struct kvpool *pool);

/* ---- KV events ----------------------------------------------------------------------------- */

enum kvpool_event_type {
    KVPOOL_EVENT_STORED,  /* blocks entered the prefix cache: parent_hash + hashes */
    KVPOOL_EVENT_REMOVED, /* a cached block was evicted: hashes (one) */
    KVPOOL_EVENT_CLEARED, /* the whole prefix cache was reset */
};

struct kvpool_event {
    enum kvpool_event_type type;
    bool has_parent;         /* STORED: false when the first stored block is block 0 */
    kvpool_hash parent_hash; /* STORED: hash of the block before the first stored one */
    uint32_t num_hashes;
    const kvpool_hash *hashes; /* valid only during the callback */
};

typedef void (*kvpool_event_fn)(void *ctx, const struct kvpool_event *event);
/* Hands every recorded event, in order, to fn, then forgets them. Returns the count. */
KVSIM_EXTERN size_t kvpool_events_drain(struct kvpool *pool, kvpool_event_fn fn, void *ctx);
/* The same events at once: fn gets them as an array (their hashes valid during the call, and
 * one event's right after the previous one's), then they are forgotten; fn is not called when
 * there are none. Evictions that follow one another come as one removed event with all their
 * hashes (kvpool_events_drain hands out one a block, as vLLM publishes them). Returns fn's
 * return value, 0, or -ENOMEM (nothing drained). */
typedef int (*kvpool_events_fn)(void *ctx, const struct kvpool_event *events, size_t n);
KVSIM_EXTERN int kvpool_events_drain_batch(struct kvpool *pool, kvpool_events_fn fn, void *ctx);
KVSIM_EXTERN const char *kvpool_event_type_name(enum kvpool_event_type type);

/* ---- ownership checker ---------------------------------------------------------------------- */

struct kvpool_violation {
    kvpool_block_id block;         /* offending block, or -1 for pool-wide counters */
    enum kvpool_owner_class owner; /* owner class involved */
    uint64_t owner_id;             /* sequence id when a sequence is involved */
    const char *what;              /* which rule: "ref_count", "free_queue", "cache_map", ... */
    int64_t expected;
    int64_t found;
};

/*
 * kvpool_check - reconcile every block to its owners: ref counts equal the references of the
 * attached sequences plus transfer holds; the free queue holds exactly the unreferenced blocks
 * and its length is the free count; the cache map holds exactly the hashed blocks; cached
 * blocks of a sequence carry that sequence's hashes; the null block is never used.
 * Returns 0, or -EUCLEAN with the first violation in *v (if v is not NULL). O(num_blocks).
 */
KVSIM_EXTERN int kvpool_check(const struct kvpool *pool, struct kvpool_violation *v);
/* Formats a violation as one line. Returns what snprintf returns. */
KVSIM_EXTERN int kvpool_violation_format(const struct kvpool_violation *v, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

/* The shared block registry (multi-threaded, lock-free) has its own contract. */
#include "kvpool/registry.h"

#endif /* KVSIM_KVPOOL_H */
