/*
 * kvpool.c - the G1 block pool (see kvpool.h for the contract).
 *
 * Layout: per-block arrays indexed by block id (ref counts, transfer holds, hashes, links of the
 * free queue and of the prefix-cache buckets). The prefix-cache map is a power-of-two array of
 * buckets whose chains are intrusive doubly linked lists over block ids; new entries go to the
 * bucket's tail, so the first match walking from the head is the earliest-inserted block with
 * that hash. Nothing here allocates per block after kvpool_create().
 */
#include "kvpool/kvpool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool/kvpool_internal.h"

enum { BLOCK_HASHED = 1u };

/*
 * What the pool keeps about a block, in one 24-byte record: allocation, caching, eviction and
 * freeing each touch one block's record and its neighbours', instead of one line per field array
 * (the working set of 8 engines of 16k blocks no longer fits in cache otherwise). The free-queue
 * links are the exception, in the queue's own array (8 bytes per block, pool->fq): popping the
 * front, unlinking a hit and appending a freed block walk and rewrite the neighbours' links, and
 * in a compact array those stay in the caches where records scattered over the pool did not
 * (every pop waited on a memory load).
 */
struct block {
    kvpool_hash hash;     /* valid when BLOCK_HASHED */
    uint32_t ref;         /* references: sequences' block tables + transfer holds */
    int32_t mprev, mnext; /* bucket chain links, -1 = none */
    uint16_t holds;       /* transfer source holds (part of ref) */
    uint8_t flags;        /* BLOCK_HASHED */
};
_Static_assert(sizeof(struct block) == 24, "a block record is 24 bytes");

struct bucket {
    int32_t head, tail; /* -1 = empty */
};

/* A block whose every reference is a transfer hold: capacity that returns when a copy ends. */
static inline bool held_only(const struct block *b) { return b->holds && b->ref == b->holds; }

struct kvpool_event_rec {
    enum kvpool_event_type type;
    bool has_parent;
    kvpool_hash parent_hash;
    uint32_t num_hashes;
    size_t hash_off; /* into event_hashes */
};

struct kvpool {
    struct kvpool_config cfg;
    uint32_t num_blocks;
    uint32_t bs;
    struct block *blk; /* num_blocks records, then the free queue's two sentinels */
    struct bucket *bk; /* prefix-cache buckets */
    uint64_t bmask;
    struct kvpool_free_queue fq;
    uint64_t generation;
    uint64_t capacity_generation;
    uint32_t num_held_only; /* blocks referenced only by transfer holds (ref == holds > 0) */
    /* Handoff source pins (disaggregated prefills): pins[b] counts the references of
     * HANDOFF_SOURCE sequences to block b (part of ref); allocated at the first pin. */
    uint32_t *pins, *scratch_pins;
    uint32_t num_pinned_only; /* blocks referenced only by pins (ref == pins > 0) */
    kvpool_store_fn store_hook;
    void *store_ctx;
    struct kvpool_seq *seqs; /* attached sequences (for kvpool_check) */
    /* events */
    struct kvpool_event_rec *events;
    size_t num_events, cap_events;
    kvpool_hash *event_hashes;
    size_t num_event_hashes, cap_event_hashes;
    struct kvpool_event *event_view; /* kvpool_events_drain_batch's array */
    size_t cap_event_view;
    /* kvpool_check scratch: expected refs and the first owner seen per block */
    uint32_t *scratch_ref;
    const struct kvpool_seq **scratch_owner;
};

/*
 * Bookkeeping walks block tables and hash lists whose records are scattered over the pool: the
 * loops below ask for the record PREFETCH_AHEAD entries ahead, so that the cache misses of
 * consecutive entries overlap instead of following one another (issue #14). No effect on
 * results.
 */
#define PREFETCH_AHEAD 8
static inline void prefetch_block(const struct kvpool *p, kvpool_block_id b)
{
    __builtin_prefetch(&p->blk[b], 1, 3);
}
static inline void prefetch_bucket(const struct kvpool *p, kvpool_hash h)
{
    __builtin_prefetch(&p->bk[h & p->bmask], 1, 3);
}
static inline void prefetch_link(const struct kvpool *p, kvpool_block_id b)
{
    __builtin_prefetch(kvpool__fq_link(&p->fq, b), 1, 3);
}

/* A block whose every reference is a handoff source pin's: stranded until the pin goes. */
static inline bool pinned_only(const struct kvpool *p, kvpool_block_id b)
{
    return p->pins && p->pins[b] && p->blk[b].ref == p->pins[b];
}

/* ---- free queue ---------------------------------------------------------------------------- */

static void fq_reset(struct kvpool_free_queue *q)
{
    for (int32_t i = 0; i < q->cap; i++)
        *kvpool__fq_link(q, i) = (struct kvpool_fq_link){-1, -1};
    *kvpool__fq_link(q, kvpool__fq_head(q)) = (struct kvpool_fq_link){-1, kvpool__fq_tail(q)};
    *kvpool__fq_link(q, kvpool__fq_tail(q)) = (struct kvpool_fq_link){kvpool__fq_head(q), -1};
    q->count = 0;
}

int kvpool__fq_init(struct kvpool_free_queue *q, int32_t cap)
{
    q->links = malloc(((size_t)cap + 2) * sizeof *q->links);
    if (!q->links)
        return -ENOMEM;
    q->cap = cap;
    fq_reset(q);
    return 0;
}

void kvpool__fq_fini(struct kvpool_free_queue *q)
{
    free(q->links);
    q->links = NULL;
    q->count = 0;
}

void kvpool__fq_insert_after(struct kvpool_free_queue *q, int32_t at, int32_t id)
{
    struct kvpool_fq_link *a = kvpool__fq_link(q, at), *l = kvpool__fq_link(q, id);
    int32_t nx = a->next;
    l->prev = at;
    l->next = nx;
    a->next = id;
    kvpool__fq_link(q, nx)->prev = id;
    q->count++;
}

void kvpool__fq_remove(struct kvpool_free_queue *q, int32_t id)
{
    struct kvpool_fq_link *l = kvpool__fq_link(q, id);
    kvpool__fq_link(q, l->prev)->next = l->next;
    kvpool__fq_link(q, l->next)->prev = l->prev;
    l->prev = l->next = -1;
    q->count--;
}

int32_t kvpool__fq_popleft(struct kvpool_free_queue *q)
{
    int32_t id = kvpool__fq_front(q);
    if (id < 0)
        return -ENOSPC;
    kvpool__fq_remove(q, id);
    return id;
}

int kvpool__fq_popleft_n(struct kvpool_free_queue *q, int32_t *out, uint32_t n)
{
    if (n > q->count)
        return -ENOSPC;
    for (uint32_t i = 0; i < n; i++)
        out[i] = kvpool__fq_popleft(q);
    return 0;
}

void kvpool__fq_append(struct kvpool_free_queue *q, int32_t id)
{
    kvpool__fq_insert_after(q, kvpool__fq_link(q, kvpool__fq_tail(q))->prev, id);
}

void kvpool__fq_append_n(struct kvpool_free_queue *q, const int32_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        kvpool__fq_append(q, ids[i]);
}

void kvpool__fq_prepend_n(struct kvpool_free_queue *q, const int32_t *ids, uint32_t n)
{
    int32_t at = kvpool__fq_head(q);
    for (uint32_t i = 0; i < n; i++) {
        kvpool__fq_insert_after(q, at, ids[i]);
        at = ids[i];
    }
}

/* ---- names --------------------------------------------------------------------------------- */

const char *kvpool_owner_class_name(enum kvpool_owner_class cls)
{
    switch (cls) {
    case KVPOOL_OWNER_NONE: return "none";
    case KVPOOL_OWNER_REQUEST: return "request";
    case KVPOOL_OWNER_CACHE_ENTRY: return "cache_entry";
    case KVPOOL_OWNER_DEST_RESERVATION: return "destination_reservation";
    case KVPOOL_OWNER_TRANSFER_HOLD: return "transfer_hold";
    case KVPOOL_OWNER_DEFERRED_FREE: return "deferred_free";
    case KVPOOL_OWNER_HANDOFF_SOURCE: return "handoff_source";
    }
    return "?";
}

const char *kvpool_outcome_name(enum kvpool_outcome outcome)
{
    switch (outcome) {
    case KVPOOL_READY: return "READY";
    case KVPOOL_CAPACITY_EXHAUSTED: return "CAPACITY_EXHAUSTED";
    case KVPOOL_BLOCKED_ON_OFFLOAD: return "BLOCKED_ON_OFFLOAD";
    case KVPOOL_RETRY_NOW: return "RETRY_NOW";
    }
    return "?";
}

const char *kvpool_limit_name(enum kvpool_limit limit)
{
    switch (limit) {
    case KVPOOL_LIMIT_NONE: return "none";
    case KVPOOL_LIMIT_FREE: return "free";
    case KVPOOL_LIMIT_WATERMARK: return "watermark";
    case KVPOOL_LIMIT_RESERVED: return "reserved";
    }
    return "?";
}

const char *kvpool_event_type_name(enum kvpool_event_type type)
{
    switch (type) {
    case KVPOOL_EVENT_STORED: return "stored";
    case KVPOOL_EVENT_REMOVED: return "removed";
    case KVPOOL_EVENT_CLEARED: return "cleared";
    }
    return "?";
}

/* ---- creation ------------------------------------------------------------------------------ */

void kvpool_config_default(struct kvpool_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->num_blocks = 10000;
    cfg->block_size = 16;
    cfg->max_model_len = 0;
    cfg->watermark = 0.0;
    cfg->enable_prefix_caching = true;
    cfg->enable_kv_events = false;
}

int kvpool_create(const struct kvpool_config *cfg, struct kvpool **out)
{
    *out = NULL;
    if (cfg->num_blocks < 2 || cfg->num_blocks > (uint32_t)INT32_MAX - 2 || cfg->block_size == 0 ||
        !(cfg->watermark >= 0.0 && cfg->watermark < 1.0))
        return -EINVAL;
    struct kvpool *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->cfg = *cfg;
    p->num_blocks = cfg->num_blocks;
    p->bs = cfg->block_size;
    size_t n = cfg->num_blocks;
    uint64_t nb = 1;
    while (nb < n)
        nb <<= 1;
    p->bmask = nb - 1;
    p->blk = malloc(n * sizeof *p->blk);
    p->bk = malloc(nb * sizeof *p->bk);
    p->scratch_ref = calloc(n, sizeof *p->scratch_ref);
    p->scratch_owner = calloc(n, sizeof *p->scratch_owner);
    if (!p->blk || !p->bk || !p->scratch_ref || !p->scratch_owner) {
        kvpool_destroy(p);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        p->blk[i] = (struct block){.mprev = -1, .mnext = -1};
    for (size_t i = 0; i < nb; i++)
        p->bk[i] = (struct bucket){-1, -1};
    if (kvpool__fq_init(&p->fq, (int32_t)n)) {
        kvpool_destroy(p);
        return -ENOMEM;
    }
    /* Block 0 is the null block: popped at construction, never queued again. */
    for (int32_t id = 1; id < (int32_t)n; id++)
        kvpool__fq_append(&p->fq, id);
    *out = p;
    return 0;
}

void kvpool_destroy(struct kvpool *pool)
{
    if (!pool)
        return;
    free(pool->blk);
    free(pool->bk);
    free(pool->scratch_ref);
    free(pool->scratch_owner);
    free(pool->pins);
    free(pool->scratch_pins);
    kvpool__fq_fini(&pool->fq);
    free(pool->events);
    free(pool->event_view);
    free(pool->event_hashes);
    free(pool);
}

const struct kvpool_config *kvpool_get_config(const struct kvpool *pool) { return &pool->cfg; }

/* ---- events -------------------------------------------------------------------------------- */

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *na = realloc(*arr, nc * elem);
    if (!na)
        return -ENOMEM;
    *arr = na;
    *cap = nc;
    return 0;
}

/* grow() for arrays whose capacity is a uint32_t. */
static int grow_u32cap(void **arr, uint32_t *cap, uint64_t need, size_t elem)
{
    if (need > UINT32_MAX)
        return -EOVERFLOW;
    size_t c = *cap;
    int rc = grow(arr, &c, (size_t)need, elem);
    if (rc == 0)
        *cap = (uint32_t)(c < UINT32_MAX ? c : UINT32_MAX);
    return rc;
}

/* Room for one more event record of n hashes, or the process is out of memory: event memory is
 * amortized over the pool's lifetime, and continuing would silently drop an event a router
 * relies on. */
static void event_room(struct kvpool *p, uint32_t n)
{
    if (grow((void **)&p->events, &p->cap_events, p->num_events + 1, sizeof *p->events) ||
        grow((void **)&p->event_hashes, &p->cap_event_hashes, p->num_event_hashes + n,
             sizeof *p->event_hashes)) {
        fprintf(stderr, "kvsim: out of memory recording KV events\n");
        abort();
    }
}

/* Records an event. */
static void emit(struct kvpool *p, enum kvpool_event_type type, bool has_parent, kvpool_hash parent,
                 const kvpool_hash *hashes, uint32_t n)
{
    if (!p->cfg.enable_kv_events)
        return;
    if (p->num_events >= p->cap_events || p->num_event_hashes + n > p->cap_event_hashes)
        event_room(p, n);
    struct kvpool_event_rec *e = &p->events[p->num_events++];
    e->type = type;
    e->has_parent = has_parent;
    e->parent_hash = parent;
    e->num_hashes = n;
    e->hash_off = p->num_event_hashes;
    if (n)
        memcpy(p->event_hashes + p->num_event_hashes, hashes, n * sizeof *hashes);
    p->num_event_hashes += n;
}

/* Records the eviction of a block cached under h: vLLM's one BlockRemoved per block, kept here as
 * runs (the last record grows while evictions follow one another; kvpool_events_drain hands them
 * out one a block). Inline: a commit evicts block after block. */
static inline void emit_removed(struct kvpool *p, kvpool_hash h)
{
    if (!p->cfg.enable_kv_events)
        return;
    if (p->num_events >= p->cap_events || p->num_event_hashes >= p->cap_event_hashes)
        event_room(p, 1);
    struct kvpool_event_rec *last = p->num_events ? &p->events[p->num_events - 1] : NULL;
    if (last && last->type == KVPOOL_EVENT_REMOVED)
        last->num_hashes++; /* its hashes end where the next one goes */
    else
        p->events[p->num_events++] =
            (struct kvpool_event_rec){KVPOOL_EVENT_REMOVED, false, 0, 1, p->num_event_hashes};
    p->event_hashes[p->num_event_hashes++] = h;
}

size_t kvpool_events_drain(struct kvpool *pool, kvpool_event_fn fn, void *ctx)
{
    size_t n = pool->num_events, calls = 0;
    for (size_t i = 0; i < n; i++) {
        const struct kvpool_event_rec *r = &pool->events[i];
        struct kvpool_event ev = {
            .type = r->type,
            .has_parent = r->has_parent,
            .parent_hash = r->parent_hash,
            .num_hashes = r->num_hashes,
            .hashes = pool->event_hashes + r->hash_off,
        };
        if (r->type == KVPOOL_EVENT_REMOVED) { /* a run of evictions: one event a block */
            ev.num_hashes = 1;
            for (uint32_t k = 0; k < r->num_hashes; k++, calls++, ev.hashes++)
                if (fn)
                    fn(ctx, &ev);
            continue;
        }
        if (fn)
            fn(ctx, &ev);
        calls++;
    }
    pool->num_events = 0;
    pool->num_event_hashes = 0;
    return calls;
}

int kvpool_events_drain_batch(struct kvpool *pool, kvpool_events_fn fn, void *ctx)
{
    size_t n = pool->num_events;
    if (n == 0)
        return 0;
    if (grow((void **)&pool->event_view, &pool->cap_event_view, n, sizeof *pool->event_view))
        return -ENOMEM; /* nothing drained */
    for (size_t i = 0; i < n; i++) {
        const struct kvpool_event_rec *r = &pool->events[i];
        pool->event_view[i] = (struct kvpool_event){
            .type = r->type,
            .has_parent = r->has_parent,
            .parent_hash = r->parent_hash,
            .num_hashes = r->num_hashes,
            .hashes = pool->event_hashes + r->hash_off,
        };
    }
    pool->num_events = 0;
    pool->num_event_hashes = 0;
    return fn ? fn(ctx, pool->event_view, n) : 0;
}

/* ---- prefix-cache map ---------------------------------------------------------------------- */

static void map_insert(struct kvpool *p, kvpool_block_id b, kvpool_hash h)
{
    uint64_t bk = h & p->bmask;
    p->blk[b].hash = h;
    p->blk[b].flags |= BLOCK_HASHED;
    p->blk[b].mnext = -1;
    p->blk[b].mprev = p->bk[bk].tail;
    if (p->bk[bk].tail >= 0)
        p->blk[p->bk[bk].tail].mnext = b;
    else
        p->bk[bk].head = b;
    p->bk[bk].tail = b;
}

static void map_remove(struct kvpool *p, kvpool_block_id b)
{
    uint64_t bk = p->blk[b].hash & p->bmask;
    int32_t pv = p->blk[b].mprev, nx = p->blk[b].mnext;
    if (pv >= 0)
        p->blk[pv].mnext = nx;
    else
        p->bk[bk].head = nx;
    if (nx >= 0)
        p->blk[nx].mprev = pv;
    else
        p->bk[bk].tail = pv;
    p->blk[b].mprev = p->blk[b].mnext = -1;
    p->blk[b].flags &= (uint8_t)~BLOCK_HASHED;
    p->blk[b].hash = 0;
}

static kvpool_block_id map_find(const struct kvpool *p, kvpool_hash h)
{
    for (int32_t b = p->bk[h & p->bmask].head; b >= 0; b = p->blk[b].mnext)
        if (p->blk[b].hash == h)
            return b;
    return -ENOENT;
}

kvpool_block_id kvpool_cache_find(const struct kvpool *pool, kvpool_hash hash)
{
    return map_find(pool, hash);
}

uint32_t kvpool_cache_count(const struct kvpool *pool, kvpool_hash hash)
{
    uint32_t n = 0;
    for (int32_t b = pool->bk[hash & pool->bmask].head; b >= 0; b = pool->blk[b].mnext)
        n += pool->blk[b].hash == hash;
    return n;
}

/* ---- sequences ----------------------------------------------------------------------------- */

int kvpool_seq_init(struct kvpool *pool, struct kvpool_seq *seq, uint64_t id, const void *salt,
                    size_t salt_len)
{
    memset(seq, 0, sizeof *seq);
    seq->id = id;
    seq->owner = KVPOOL_OWNER_REQUEST;
    seq->partial = malloc(pool->bs * sizeof *seq->partial);
    if (!seq->partial)
        return -ENOMEM;
    if (salt && salt_len)
        seq->salt_hash = kvpool__hash_bytes(salt, salt_len);
    seq->next = pool->seqs;
    if (pool->seqs)
        pool->seqs->prev = seq;
    pool->seqs = seq;
    return 0;
}

int kvpool_seq_fini(struct kvpool *pool, struct kvpool_seq *seq)
{
    if (seq->num_blocks)
        return -EBUSY;
    if (seq->prev)
        seq->prev->next = seq->next;
    else
        pool->seqs = seq->next;
    if (seq->next)
        seq->next->prev = seq->prev;
    free(seq->blocks);
    free(seq->hashes);
    free(seq->partial);
    memset(seq, 0, sizeof *seq);
    return 0;
}

/* Adds one full block's hash. Caller guarantees capacity. */
static void seq_hash_full_block(struct kvpool_seq *seq, const kvpool_token *tokens, uint32_t bs)
{
    uint32_t i = seq->num_hashes;
    kvpool_hash parent = i ? seq->hashes[i - 1] : KVPOOL_NONE_HASH;
    seq->hashes[i] = kvpool__hash_block(parent, tokens, bs, i == 0 ? seq->salt_hash : 0);
    seq->num_hashes = i + 1;
}

int kvpool_seq_append_tokens(struct kvpool *pool, struct kvpool_seq *seq,
                             const kvpool_token *tokens, size_t n)
{
    uint32_t bs = pool->bs;
    if (n == 1) { /* a decode's token: the same effect as the general path, in fewer steps */
        uint32_t fill = (uint32_t)(seq->num_tokens % bs);
        if (fill + 1 == bs) {
            if (seq->num_hashes == UINT32_MAX)
                return -EOVERFLOW;
            if (grow_u32cap((void **)&seq->hashes, &seq->cap_hashes, seq->num_hashes + 1ull,
                            sizeof *seq->hashes))
                return -ENOMEM;
        }
        seq->partial[fill] = tokens[0];
        if (fill + 1 == bs)
            seq_hash_full_block(seq, seq->partial, bs);
        seq->num_tokens++;
        return 0;
    }
    uint64_t total = seq->num_tokens + n;
    if (total / bs > UINT32_MAX)
        return -EOVERFLOW;
    if (grow_u32cap((void **)&seq->hashes, &seq->cap_hashes, total / bs, sizeof *seq->hashes))
        return -ENOMEM;
    uint32_t fill = (uint32_t)(seq->num_tokens % bs);
    size_t i = 0;
    if (fill) { /* complete the partial block first */
        size_t take = bs - fill < n ? bs - fill : n;
        memcpy(seq->partial + fill, tokens, take * sizeof *tokens);
        i = take;
        fill += (uint32_t)take;
        if (fill == bs)
            seq_hash_full_block(seq, seq->partial, bs);
    }
    if (i + bs <= n) { /* whole blocks straight from the caller's buffer, in one call */
        uint32_t k = (uint32_t)((n - i) / bs), at = seq->num_hashes;
        kvpool__hash_blocks(at ? seq->hashes[at - 1] : KVPOOL_NONE_HASH, tokens + i, bs, bs, k,
                            at == 0 ? seq->salt_hash : 0, seq->hashes + at);
        seq->num_hashes = at + k;
        i += (size_t)k * bs;
    }
    if (i < n && (seq->num_tokens + i) % bs == 0)
        memcpy(seq->partial, tokens + i, (n - i) * sizeof *tokens);
    seq->num_tokens = total;
    return 0;
}

/* n copies of t at dst: a few, then doubling copies (memcpy's wide stores; a block of 512
 * tokens is filled once per trace hash id). */
static inline void fill_tokens(kvpool_token *dst, kvpool_token t, size_t n)
{
    size_t done = n < 8 ? n : 8;
    for (size_t i = 0; i < done; i++)
        dst[i] = t;
    for (; done < n; done *= 2)
        memcpy(dst + done, dst, (n - done < done ? n - done : done) * sizeof *dst);
}

/* Appends count copies of token; the hashes' capacity covers the blocks that fill. */
static void seq_append_run(struct kvpool_seq *seq, uint32_t bs, kvpool_token token, uint64_t count)
{
    uint32_t fill = (uint32_t)(seq->num_tokens % bs);
    if (fill) { /* complete the partial block first */
        uint32_t take = bs - fill < count ? bs - fill : (uint32_t)count;
        fill_tokens(seq->partial + fill, token, take);
        seq->num_tokens += take;
        count -= take;
        if (fill + take < bs)
            return;
        seq_hash_full_block(seq, seq->partial, bs);
    }
    if (count >= bs) { /* whole blocks of the one token: the same bs tokens hashed each time */
        fill_tokens(seq->partial, token, bs);
        uint32_t k = (uint32_t)(count / bs), at = seq->num_hashes;
        kvpool__hash_blocks(at ? seq->hashes[at - 1] : KVPOOL_NONE_HASH, seq->partial, bs, 0, k,
                            at == 0 ? seq->salt_hash : 0, seq->hashes + at);
        seq->num_hashes = at + k;
        seq->num_tokens += (uint64_t)k * bs;
        count -= (uint64_t)k * bs;
    }
    fill_tokens(seq->partial, token, count); /* the start of the next partial block */
    seq->num_tokens += count;
}

/* Room for the hashes of every block full after `more` tokens. Returns 0, -EOVERFLOW, -ENOMEM. */
static int seq_reserve_hashes(const struct kvpool *pool, struct kvpool_seq *seq, uint64_t more)
{
    uint64_t total;
    if (__builtin_add_overflow(seq->num_tokens, more, &total) || total / pool->bs > UINT32_MAX)
        return -EOVERFLOW;
    return grow_u32cap((void **)&seq->hashes, &seq->cap_hashes, total / pool->bs,
                       sizeof *seq->hashes);
}

int kvpool_seq_append_repeat(struct kvpool *pool, struct kvpool_seq *seq, kvpool_token token,
                             size_t n)
{
    int rc = seq_reserve_hashes(pool, seq, n);
    if (rc == 0)
        seq_append_run(seq, pool->bs, token, n);
    return rc;
}

int kvpool_seq_append_runs(struct kvpool *pool, struct kvpool_seq *seq,
                           const struct kvpool_token_run *runs, uint32_t num_runs,
                           const kvpool_hash *known, uint32_t num_known)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < num_runs; i++)
        total += runs[i].count;
    if (num_known && (seq->num_tokens != 0 || num_known > total / pool->bs))
        return -EINVAL;
    int rc = seq_reserve_hashes(pool, seq, total);
    if (rc)
        return rc;
    uint32_t r = 0;
    uint64_t used = 0; /* tokens of runs[r] the known blocks cover */
    if (num_known) {
        memcpy(seq->hashes, known, num_known * sizeof *known);
        seq->num_hashes = num_known;
        /* Whole blocks: the partial block is empty, and nothing else keeps their tokens. */
        uint64_t skip = (uint64_t)num_known * pool->bs;
        seq->num_tokens = skip;
        for (; r < num_runs && skip >= runs[r].count; r++)
            skip -= runs[r].count;
        used = skip; /* < runs[r].count: the known blocks end inside run r */
    }
    for (; r < num_runs; r++, used = 0)
        seq_append_run(seq, pool->bs, runs[r].token, runs[r].count - used);
    return 0;
}

/* ---- lookup -------------------------------------------------------------------------------- */

void kvpool_lookup(const struct kvpool *pool, const struct kvpool_seq *seq,
                   struct kvpool_hits *hits, kvpool_block_id *ids, uint32_t ids_cap)
{
    memset(hits, 0, sizeof *hits);
    hits->generation = pool->generation;
    if (!pool->cfg.enable_prefix_caching || seq->skip_reading_prefix_cache || seq->num_tokens == 0)
        return;
    uint64_t max_blocks = (seq->num_tokens - 1) / pool->bs; /* the last token is recomputed */
    if (max_blocks > seq->num_hashes)
        max_blocks = seq->num_hashes;
    uint32_t i = 0;
    for (; i < max_blocks; i++) {
        kvpool_block_id b = map_find(pool, seq->hashes[i]);
        if (b < 0)
            break;
        if (pool->blk[b].ref == 0)
            hits->num_evictable++;
        if (ids && i < ids_cap)
            ids[i] = b;
    }
    hits->num_blocks = i;
    hits->num_tokens = (uint64_t)i * pool->bs;
}

/* ---- transactional allocation -------------------------------------------------------------- */

static uint64_t cdiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* vLLM get_num_blocks_to_allocate for one full-attention group. */
static uint64_t blocks_to_allocate(const struct kvpool *p, const struct kvpool_seq *seq,
                                   uint64_t num_tokens, const struct kvpool_hits *hits)
{
    uint64_t required = cdiv(num_tokens, p->bs);
    uint64_t have = (uint64_t)seq->num_blocks + (hits ? hits->num_blocks : 0);
    uint64_t fresh = required > have ? required - have : 0;
    return fresh + (hits ? hits->num_evictable : 0);
}

/* Not enough free blocks: exhausted, unless blocks held only by in-flight copies would cover the
 * shortfall once those copies end (then waiting is the answer, not preemption). */
static int short_outcome(const struct kvpool *pool, struct kvpool_plan *plan, uint64_t shortfall)
{
    plan->num_blocks_short = shortfall > UINT32_MAX ? UINT32_MAX : (uint32_t)shortfall;
    plan->outcome = pool->num_held_only && shortfall <= pool->num_held_only
                        ? KVPOOL_BLOCKED_ON_OFFLOAD
                        : KVPOOL_CAPACITY_EXHAUSTED;
    return (int)plan->outcome;
}

/* How many of seq's blocks are full and cacheable once `filled` of its tokens have KV, with
 * `held` blocks: full, held and hashed (kvpool_prepare's cache_upto_blocks). */
static inline uint64_t full_blocks(const struct kvpool *p, const struct kvpool_seq *seq,
                                   uint64_t filled, uint64_t held)
{
    return min_u64(min_u64(filled / p->bs, held), seq->num_hashes);
}

int kvpool_prepare(const struct kvpool *pool, const struct kvpool_seq *seq,
                   const struct kvpool_alloc_args *args, struct kvpool_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    plan->seq = seq;
    plan->generation = pool->generation;
    plan->capacity_generation = pool->capacity_generation;
    plan->first_new_index = seq->num_blocks;
    const struct kvpool_hits *hits = args->hits && args->hits->num_blocks ? args->hits : NULL;
    if (args->num_new_tokens == 0 && args->num_external_computed_tokens == 0)
        return -EINVAL;
    if (hits) {
        if (hits->generation != pool->generation)
            return -ESTALE;
        if (hits->num_blocks > seq->num_hashes || seq->num_blocks != 0)
            return -EINVAL;
    }
    uint64_t mml = pool->cfg.max_model_len ? pool->cfg.max_model_len : UINT64_MAX;
    uint64_t local, total, slots;
    if (__builtin_add_overflow(args->num_computed_tokens, hits ? hits->num_tokens : 0, &local) ||
        __builtin_add_overflow(local, args->num_external_computed_tokens, &total) ||
        __builtin_add_overflow(min_u64(total, mml), args->num_new_tokens, &slots) ||
        __builtin_add_overflow(slots, args->num_lookahead_tokens, &slots))
        return -EOVERFLOW;
    total = min_u64(total, mml);
    slots = min_u64(slots, mml);

    /* The watermark holds back blocks only from admissions while something is running. */
    uint64_t wm = 0;
    if (args->has_scheduled_reqs && args->is_admission)
        wm = (uint64_t)(pool->cfg.watermark * (double)pool->num_blocks);
    uint64_t free_blocks = pool->fq.count;

    plan->outcome = KVPOOL_CAPACITY_EXHAUSTED;
    if (args->full_sequence_must_fit) {
        uint64_t full = blocks_to_allocate(pool, seq, min_u64(seq->num_tokens, mml), hits);
        if (full + wm > free_blocks) {
            plan->limit = full > free_blocks ? KVPOOL_LIMIT_FREE : KVPOOL_LIMIT_WATERMARK;
            return short_outcome(pool, plan, full + wm - free_blocks);
        }
    }
    uint64_t need = blocks_to_allocate(pool, seq, slots, hits);
    uint64_t demand;
    plan->limit = KVPOOL_LIMIT_FREE;
    if (__builtin_add_overflow(need, wm, &demand) ||
        __builtin_add_overflow(demand, args->reserved_blocks, &demand))
        return (int)plan->outcome;
    if (demand > free_blocks) {
        if (need <= free_blocks)
            plan->limit = need + wm > free_blocks ? KVPOOL_LIMIT_WATERMARK : KVPOOL_LIMIT_RESERVED;
        return short_outcome(pool, plan, demand - free_blocks);
    }
    plan->limit = KVPOOL_LIMIT_NONE;

    uint64_t required = cdiv(slots, pool->bs);
    uint64_t have = (uint64_t)seq->num_blocks + (hits ? hits->num_blocks : 0);
    plan->outcome = KVPOOL_READY;
    plan->num_hit_blocks = hits ? hits->num_blocks : 0;
    plan->num_new_blocks = (uint32_t)(required > have ? required - have : 0);
    plan->num_blocks_needed = (uint32_t)need;
    uint32_t cached = seq->num_blocks ? seq->num_cached_blocks : plan->num_hit_blocks;
    plan->cache_upto_blocks = cached;
    if (pool->cfg.enable_prefix_caching && !args->delay_cache_blocks) {
        uint64_t upto =
            full_blocks(pool, seq, min_u64(total + args->num_new_tokens, seq->num_tokens),
                        have + plan->num_new_blocks);
        if (upto > cached)
            plan->cache_upto_blocks = (uint32_t)upto;
    }
    return (int)plan->outcome;
}

static int seq_reserve_blocks(struct kvpool_seq *seq, uint64_t need)
{
    return grow_u32cap((void **)&seq->blocks, &seq->cap_blocks, need, sizeof *seq->blocks);
}

/* Takes block b, the free queue's front, out of the queue and the prefix cache (a lazy
 * eviction: Removed event). */
static inline kvpool_block_id take_front_block(struct kvpool *p, kvpool_block_id b)
{
    kvpool__fq_remove(&p->fq, b);
    if (p->blk[b].flags & BLOCK_HASHED) {
        kvpool_hash h = p->blk[b].hash;
        map_remove(p, b);
        emit_removed(p, h);
    }
    p->blk[b].ref = 1;
    return b;
}

/* Pops a block from the free queue front, lazily evicting its cached hash. */
static kvpool_block_id take_free_block(struct kvpool *p)
{
    return take_front_block(p, kvpool__fq_front(&p->fq));
}

/* Registers seq's blocks [num_cached_blocks, upto) under their hashes; one Stored event. */
static void cache_range(struct kvpool *p, struct kvpool_seq *seq, uint32_t upto)
{
    uint32_t from = seq->num_cached_blocks;
    if (upto <= from)
        return;
    for (uint32_t i = from; i < upto; i++) {
        if (i + PREFETCH_AHEAD < upto) {
            prefetch_block(p, seq->blocks[i + PREFETCH_AHEAD]);
            prefetch_bucket(p, seq->hashes[i + PREFETCH_AHEAD]);
        }
        map_insert(p, seq->blocks[i], seq->hashes[i]);
    }
    emit(p, KVPOOL_EVENT_STORED, from > 0, from > 0 ? seq->hashes[from - 1] : 0, seq->hashes + from,
         upto - from);
    seq->num_cached_blocks = upto;
    if (p->store_hook)
        p->store_hook(p->store_ctx, seq->blocks + from, seq->hashes + from, upto - from);
}

/* Caches the blocks seq holds that are full at `filled` tokens (what a commit's step 3 or an
 * in-place extension caches). Returns true if it cached any. */
static bool cache_filled(struct kvpool *p, struct kvpool_seq *seq, uint64_t filled)
{
    uint64_t upto = full_blocks(p, seq, filled, seq->num_blocks);
    if (upto <= seq->num_cached_blocks)
        return false;
    cache_range(p, seq, (uint32_t)upto);
    return true;
}

int kvpool_commit(struct kvpool *pool, struct kvpool_seq *seq, struct kvpool_plan *plan)
{
    if (plan->outcome != KVPOOL_READY || plan->seq != seq)
        return -EINVAL;
    if (plan->generation != pool->generation || plan->first_new_index != seq->num_blocks)
        return -ESTALE;
    /* The only fallible step comes first, before any visible effect. */
    uint64_t total_blocks = (uint64_t)seq->num_blocks + plan->num_hit_blocks + plan->num_new_blocks;
    if (seq_reserve_blocks(seq, total_blocks) != 0)
        return -ENOMEM;
    /* 1. Touch the hits: they leave the free queue before anything is popped from it. */
    for (uint32_t i = 0; i < plan->num_hit_blocks; i++) {
        if (i + PREFETCH_AHEAD < plan->num_hit_blocks)
            prefetch_bucket(pool, seq->hashes[i + PREFETCH_AHEAD]);
        kvpool_block_id b = map_find(pool, seq->hashes[i]);
        pool->num_held_only -= held_only(&pool->blk[b]);
        pool->num_pinned_only -= pinned_only(pool, b);
        if (pool->blk[b].ref++ == 0)
            kvpool__fq_remove(&pool->fq, b);
        seq->blocks[seq->num_blocks++] = b;
    }
    if (plan->num_hit_blocks)
        seq->num_cached_blocks = plan->num_hit_blocks;
    /* 2. Fresh blocks from the front of the free queue. */
    int32_t tail = kvpool__fq_tail(&pool->fq);
    /* The queue is a linked list whose links sit in a compact array (cheap to walk ahead):
     * while a front is taken, the record PREFETCH_AHEAD pops ahead is fetched, and the bucket
     * of the one four pops ahead (its record came in four pops ago: its hash is at hand). */
    int32_t ahead = kvpool__fq_front(&pool->fq), near = ahead;
    for (uint32_t k = 0; k < PREFETCH_AHEAD && ahead >= 0 && ahead != tail; k++) {
        prefetch_block(pool, ahead);
        ahead = kvpool__fq_link(&pool->fq, ahead)->next;
        if (k == 3)
            near = ahead;
    }
    for (uint32_t i = 0; i < plan->num_new_blocks; i++) {
        kvpool_block_id b = kvpool__fq_front(&pool->fq);
        if (ahead >= 0 && ahead != tail) {
            prefetch_block(pool, ahead);
            ahead = kvpool__fq_link(&pool->fq, ahead)->next;
        }
        if (near >= 0 && near != tail) {
            if (pool->blk[near].flags & BLOCK_HASHED) /* it leaves its bucket */
                prefetch_bucket(pool, pool->blk[near].hash);
            near = kvpool__fq_link(&pool->fq, near)->next;
        }
        seq->blocks[seq->num_blocks++] = take_front_block(pool, b);
    }
    /* 3. Cache the blocks that are full now (visible to later requests of the same step). */
    cache_range(pool, seq, plan->cache_upto_blocks);
    pool->generation++;
    plan->outcome = KVPOOL_CAPACITY_EXHAUSTED; /* a plan commits once */
    return 0;
}

bool kvpool_extend_in_place(struct kvpool *pool, struct kvpool_seq *seq,
                            uint64_t num_computed_tokens, uint64_t num_new_tokens)
{
    /* kvpool_prepare's arithmetic for these arguments, READY with no new block */
    uint64_t mml = pool->cfg.max_model_len ? pool->cfg.max_model_len : UINT64_MAX;
    uint64_t total = min_u64(num_computed_tokens, mml), slots;
    if (num_new_tokens == 0 || __builtin_add_overflow(total, num_new_tokens, &slots))
        return false;
    slots = min_u64(slots, mml);
    if (slots > (uint64_t)seq->num_blocks * pool->bs) /* cdiv(slots, bs) > num_blocks */
        return false;
    /* kvpool_commit of that plan: nothing to touch or take, then cache_range */
    uint64_t filled = min_u64(total + num_new_tokens, seq->num_tokens);
    if (pool->cfg.enable_prefix_caching &&
        filled >= ((uint64_t)seq->num_cached_blocks + 1) * pool->bs) /* a block fills */
        cache_filled(pool, seq, filled);
    pool->generation++;
    return true;
}

/* kvpool_decode_steps_in_place's count for seq holding `extra` more blocks than it does. */
static uint64_t decode_steps(const struct kvpool *pool, const struct kvpool_seq *seq,
                             uint64_t num_computed_tokens, uint64_t max, uint32_t extra)
{
    /* kvpool_extend_in_place's conditions for step j (nc + j computed, num_tokens + j known):
     * nc + j + 1 slots fit the blocks held and max_model_len (no clamp), and the filled tokens,
     * min(nc + j + 1, num_tokens + j), stay inside the first uncached block, but on the last
     * step, which may fill it (kvpool_decode_steps_fill caches it), unless a store hook would
     * start a store there. */
    uint64_t nc = num_computed_tokens, bs = pool->bs;
    uint64_t mml = pool->cfg.max_model_len ? pool->cfg.max_model_len : UINT64_MAX;
    uint64_t room = ((uint64_t)seq->num_blocks + extra) * bs;
    if (mml < room)
        room = mml;
    if (nc >= room)
        return 0;
    uint64_t k = min_u64(max, room - nc); /* nc + j + 1 <= room for j < k */
    if (pool->cfg.enable_prefix_caching) {
        uint64_t filled = min_u64(nc + 1, seq->num_tokens);
        uint64_t edge = ((uint64_t)seq->num_cached_blocks + 1) * bs; /* filled + j < edge */
        uint64_t fill_step = filled >= edge ? 0 : edge - filled;     /* the first that fills */
        k = min_u64(k, pool->store_hook ? fill_step : fill_step + 1);
    }
    return k;
}

uint64_t kvpool_decode_steps_in_place(const struct kvpool *pool, const struct kvpool_seq *seq,
                                      uint64_t num_computed_tokens, uint64_t max)
{
    return decode_steps(pool, seq, num_computed_tokens, max, 0);
}

uint64_t kvpool_decode_steps_taking_block(const struct kvpool *pool, const struct kvpool_seq *seq,
                                          uint64_t num_computed_tokens, uint64_t max)
{
    /* kvpool_prepare's plan for one token at nc: exactly one new block when the held ones are
     * full, and a commit that caches nothing (every full block is cached already). */
    uint64_t nc = num_computed_tokens, bs = pool->bs;
    uint64_t mml = pool->cfg.max_model_len ? pool->cfg.max_model_len : UINT64_MAX;
    if (pool->store_hook || nc != (uint64_t)seq->num_blocks * bs || nc >= mml)
        return 0;
    if (pool->cfg.enable_prefix_caching) {
        if (full_blocks(pool, seq, min_u64(nc + 1, seq->num_tokens), seq->num_blocks + 1ull) >
            seq->num_cached_blocks)
            return 0;
    }
    return decode_steps(pool, seq, nc, max, 1);
}

void kvpool_decode_steps_fill(struct kvpool *pool, struct kvpool_seq *seq,
                              uint64_t num_computed_tokens, uint64_t k)
{
    if (!pool->cfg.enable_prefix_caching || k == 0)
        return;
    /* Step k - 1's kvpool_extend_in_place: nc + k - 1 computed, one more, num_tokens - 1 known
     * (its own token is appended after it ran). */
    uint64_t filled = min_u64(num_computed_tokens + k, seq->num_tokens - 1);
    if (filled >= ((uint64_t)seq->num_cached_blocks + 1) * pool->bs)
        cache_filled(pool, seq, filled);
}

void kvpool_extend_in_place_steps(struct kvpool *pool, uint64_t k) { pool->generation += k; }

void kvpool_abort(struct kvpool_plan *plan) { plan->outcome = KVPOOL_CAPACITY_EXHAUSTED; }

void kvpool_cache_blocks(struct kvpool *pool, struct kvpool_seq *seq, uint64_t num_tokens)
{
    if (!pool->cfg.enable_prefix_caching)
        return;
    if (cache_filled(pool, seq, num_tokens))
        pool->generation++;
}

/* ---- freeing ------------------------------------------------------------------------------- */

/*
 * Drops one reference from each of ids[0..n) in that order; blocks reaching 0 are queued, the
 * unhashed ones (and all of them with caching off) at the front, the hashed ones at the back,
 * each group keeping the release order (vLLM free_blocks after #51482).
 */
static void release_blocks(struct kvpool *p, const kvpool_block_id *ids, uint32_t n)
{
    bool caching = p->cfg.enable_prefix_caching;
    bool freed = false;
    /* Unhashed blocks are linked one after the other behind the queue head, which is
     * prepend_n of the whole group in release order, without a buffer. */
    int32_t front_cursor = kvpool__fq_head(&p->fq);
    for (uint32_t i = 0; i < n; i++) {
        kvpool_block_id b = ids[i];
        if (i + PREFETCH_AHEAD < n) {
            prefetch_block(p, ids[i + PREFETCH_AHEAD]);
            prefetch_link(p, ids[i + PREFETCH_AHEAD]); /* written if the block is freed */
        }
        if (--p->blk[b].ref != 0) {
            p->num_held_only += held_only(&p->blk[b]);
            p->num_pinned_only += pinned_only(p, b);
            continue;
        }
        freed = true;
        if (caching && (p->blk[b].flags & BLOCK_HASHED)) {
            kvpool__fq_append(&p->fq, b);
        } else {
            kvpool__fq_insert_after(&p->fq, front_cursor, b);
            front_cursor = b;
        }
    }
    if (freed)
        p->capacity_generation++;
}

void kvpool_free(struct kvpool *pool, struct kvpool_seq *seq)
{
    uint32_t n = seq->num_blocks;
    if (seq->owner == KVPOOL_OWNER_HANDOFF_SOURCE && pool->pins) {
        for (uint32_t i = 0; i < n; i++) { /* the pin's references stop being pins first */
            kvpool_block_id b = seq->blocks[i];
            pool->num_pinned_only -= pinned_only(pool, b);
            pool->pins[b]--;
        }
    }
    /* Tail first: reverse in place, release, then forget the table. */
    for (uint32_t i = 0; i < n / 2; i++) {
        kvpool_block_id t = seq->blocks[i];
        seq->blocks[i] = seq->blocks[n - 1 - i];
        seq->blocks[n - 1 - i] = t;
    }
    release_blocks(pool, seq->blocks, n);
    seq->num_blocks = 0;
    seq->num_cached_blocks = 0;
    pool->generation++;
}

/* The pin counters, allocated at the first pin. Returns 0 or -ENOMEM. */
static int pins_ready(struct kvpool *p)
{
    if (p->pins)
        return 0;
    p->pins = calloc(p->num_blocks, sizeof *p->pins);
    p->scratch_pins = calloc(p->num_blocks, sizeof *p->scratch_pins);
    if (p->pins && p->scratch_pins)
        return 0;
    free(p->pins);
    free(p->scratch_pins);
    p->pins = p->scratch_pins = NULL;
    return -ENOMEM;
}

int kvpool_seq_move_blocks(struct kvpool *pool, struct kvpool_seq *dst, struct kvpool_seq *src)
{
    if (src->owner == KVPOOL_OWNER_HANDOFF_SOURCE)
        return -EINVAL; /* a pin's blocks only ever go back to the pool */
    bool pin = dst->owner == KVPOOL_OWNER_HANDOFF_SOURCE;
    if ((pin && pins_ready(pool) != 0) ||
        seq_reserve_blocks(dst, (uint64_t)dst->num_blocks + src->num_blocks) != 0)
        return -ENOMEM;
    for (uint32_t i = 0; pin && i < src->num_blocks; i++) {
        kvpool_block_id b = src->blocks[i];
        pool->pins[b]++; /* the reference stays, it becomes the pin's */
        pool->num_pinned_only += pinned_only(pool, b);
    }
    memcpy(dst->blocks + dst->num_blocks, src->blocks, src->num_blocks * sizeof *src->blocks);
    dst->num_blocks += src->num_blocks;
    dst->num_cached_blocks = 0; /* dst's blocks are not a chain of its own hashes */
    src->num_blocks = 0;
    src->num_cached_blocks = 0;
    pool->generation++;
    return 0;
}

int kvpool_hold_block(struct kvpool *pool, kvpool_block_id block)
{
    if (block <= 0 || (uint32_t)block >= pool->num_blocks)
        return -EINVAL;
    if (pool->blk[block].holds == UINT16_MAX)
        return -EOVERFLOW;
    if (pool->blk[block].ref == 0) {
        if (!(pool->blk[block].flags & BLOCK_HASHED))
            return -EINVAL;
        kvpool__fq_remove(&pool->fq, block);
    }
    pool->num_held_only -= held_only(&pool->blk[block]);
    pool->num_pinned_only -= pinned_only(pool, block);
    pool->blk[block].ref++;
    pool->blk[block].holds++;
    pool->num_held_only += held_only(&pool->blk[block]);
    pool->generation++;
    return 0;
}

int kvpool_release_hold(struct kvpool *pool, kvpool_block_id block)
{
    if (block <= 0 || (uint32_t)block >= pool->num_blocks || pool->blk[block].holds == 0)
        return -EINVAL;
    pool->num_held_only -= held_only(&pool->blk[block]);
    pool->blk[block].holds--;
    release_blocks(pool, &block, 1);
    pool->generation++;
    return 0;
}

/* ---- state --------------------------------------------------------------------------------- */

uint32_t kvpool_num_free_blocks(const struct kvpool *pool) { return pool->fq.count; }
uint32_t kvpool_num_held_only_blocks(const struct kvpool *pool) { return pool->num_held_only; }
uint32_t kvpool_num_pinned_only_blocks(const struct kvpool *pool) { return pool->num_pinned_only; }

void kvpool_set_store_hook(struct kvpool *pool, kvpool_store_fn fn, void *ctx)
{
    pool->store_hook = fn;
    pool->store_ctx = ctx;
}

int kvpool_commit_partial_legacy(struct kvpool *pool, struct kvpool_seq *seq,
                                 const struct kvpool_plan *plan)
{
    if (plan->outcome != KVPOOL_BLOCKED_ON_OFFLOAD || plan->seq != seq)
        return -EINVAL;
    if (plan->generation != pool->generation || plan->first_new_index != seq->num_blocks)
        return -ESTALE;
    uint32_t n = pool->fq.count;
    if (seq_reserve_blocks(seq, (uint64_t)seq->num_blocks + n) != 0)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        seq->blocks[seq->num_blocks++] = take_free_block(pool);
    pool->generation++;
    return (int)n;
}
uint32_t kvpool_num_usable_blocks(const struct kvpool *pool) { return pool->num_blocks - 1; }

double kvpool_usage(const struct kvpool *pool)
{
    return 1.0 - (double)pool->fq.count / (double)(pool->num_blocks - 1);
}

double kvpool_usage_taking(const struct kvpool *pool, uint32_t n)
{
    uint32_t count = n < pool->fq.count ? pool->fq.count - n : 0;
    return 1.0 - (double)count / (double)(pool->num_blocks - 1);
}

uint32_t kvpool_ref_count(const struct kvpool *pool, kvpool_block_id block)
{
    if (block < 0 || (uint32_t)block >= pool->num_blocks)
        return 0;
    return pool->blk[block].ref;
}

bool kvpool_block_hash(const struct kvpool *pool, kvpool_block_id block, kvpool_hash *hash)
{
    if (block < 0 || (uint32_t)block >= pool->num_blocks ||
        !(pool->blk[block].flags & BLOCK_HASHED))
        return false;
    if (hash)
        *hash = pool->blk[block].hash;
    return true;
}

uint32_t kvpool_free_queue_snapshot(const struct kvpool *pool, kvpool_block_id *ids, uint32_t cap)
{
    uint32_t i = 0;
    for (int32_t b = kvpool__fq_front(&pool->fq); b >= 0 && b != kvpool__fq_tail(&pool->fq);
         b = kvpool__fq_link(&pool->fq, b)->next, i++)
        if (ids && i < cap)
            ids[i] = b;
    return i;
}

uint64_t kvpool_generation(const struct kvpool *pool) { return pool->generation; }
uint64_t kvpool_capacity_generation(const struct kvpool *pool) { return pool->capacity_generation; }

int kvpool_reset_prefix_cache(struct kvpool *pool)
{
    if (pool->fq.count != pool->num_blocks - 1)
        return -EBUSY;
    for (uint32_t b = 1; b < pool->num_blocks; b++)
        if (pool->blk[b].flags & BLOCK_HASHED)
            map_remove(pool, (kvpool_block_id)b);
    for (struct kvpool_seq *s = pool->seqs; s; s = s->next)
        s->num_cached_blocks = 0;
    emit(pool, KVPOOL_EVENT_CLEARED, false, 0, NULL, 0);
    pool->generation++;
    return 0;
}

/* ---- ownership checker --------------------------------------------------------------------- */

static int violation(struct kvpool_violation *v, kvpool_block_id block,
                     enum kvpool_owner_class owner, uint64_t owner_id, const char *what,
                     int64_t expected, int64_t found)
{
    if (v) {
        v->block = block;
        v->owner = owner;
        v->owner_id = owner_id;
        v->what = what;
        v->expected = expected;
        v->found = found;
    }
    return -EUCLEAN;
}

int kvpool_check(const struct kvpool *pool, struct kvpool_violation *v)
{
    const struct kvpool *p = pool;
    uint32_t n = p->num_blocks;
    memset(p->scratch_ref, 0, n * sizeof *p->scratch_ref);
    memset(p->scratch_owner, 0, n * sizeof *p->scratch_owner);
    if (p->pins)
        memset(p->scratch_pins, 0, n * sizeof *p->scratch_pins);
    for (const struct kvpool_seq *s = p->seqs; s; s = s->next) {
        if (s->owner == KVPOOL_OWNER_HANDOFF_SOURCE && !p->pins && s->num_blocks)
            return violation(v, s->blocks[0], s->owner, s->id, "pin_count", 1, 0);
        for (uint32_t i = 0; s->owner == KVPOOL_OWNER_HANDOFF_SOURCE && i < s->num_blocks; i++)
            if (s->blocks[i] > 0 && (uint32_t)s->blocks[i] < n)
                p->scratch_pins[s->blocks[i]]++;
        if (s->num_cached_blocks > s->num_blocks)
            return violation(v, -1, s->owner, s->id, "seq_cached_blocks", s->num_blocks,
                             s->num_cached_blocks);
        for (uint32_t i = 0; i < s->num_blocks; i++) {
            kvpool_block_id b = s->blocks[i];
            if (b <= 0 || (uint32_t)b >= n)
                return violation(v, b, s->owner, s->id, "seq_block_id", 1, 0);
            p->scratch_ref[b]++;
            if (!p->scratch_owner[b])
                p->scratch_owner[b] = s;
            if (i < s->num_cached_blocks &&
                (!(p->blk[b].flags & BLOCK_HASHED) || p->blk[b].hash != s->hashes[i]))
                return violation(v, b, s->owner, s->id, "seq_cached_hash", 1, 0);
        }
    }
    if (p->blk[0].ref != 0 || kvpool__fq_contains(&p->fq, 0) || (p->blk[0].flags & BLOCK_HASHED))
        return violation(v, 0, KVPOOL_OWNER_NONE, 0, "null_block", 0, 1);
    uint32_t hashed = 0, held = 0, pinned = 0;
    for (uint32_t b = 1; b < n; b++) {
        const struct kvpool_seq *o = p->scratch_owner[b];
        /* A referenced block nobody claims is a leak (NONE), hashed or not: only an
         * unreferenced hashed block is a cache entry. */
        enum kvpool_owner_class cls = KVPOOL_OWNER_NONE;
        if (o)
            cls = o->owner;
        else if (p->blk[b].holds)
            cls = KVPOOL_OWNER_TRANSFER_HOLD;
        else if (p->blk[b].ref == 0 && (p->blk[b].flags & BLOCK_HASHED))
            cls = KVPOOL_OWNER_CACHE_ENTRY;
        uint64_t oid = o ? o->id : 0;
        int64_t expected = (int64_t)p->scratch_ref[b] + p->blk[b].holds;
        if ((int64_t)p->blk[b].ref != expected)
            return violation(v, (kvpool_block_id)b, cls, oid, "ref_count", expected, p->blk[b].ref);
        bool queued = kvpool__fq_contains(&p->fq, (int32_t)b);
        if (queued != (p->blk[b].ref == 0))
            return violation(v, (kvpool_block_id)b, cls, oid, "free_queue", p->blk[b].ref == 0,
                             queued);
        if (p->blk[b].flags & BLOCK_HASHED)
            hashed++;
        held += held_only(&p->blk[b]);
        if (p->pins && p->pins[b] != p->scratch_pins[b])
            return violation(v, (kvpool_block_id)b, KVPOOL_OWNER_HANDOFF_SOURCE, oid, "pin_count",
                             p->scratch_pins[b], p->pins[b]);
        pinned += pinned_only(p, (kvpool_block_id)b);
    }
    if (pinned != p->num_pinned_only)
        return violation(v, -1, KVPOOL_OWNER_HANDOFF_SOURCE, 0, "pinned_only_count", pinned,
                         p->num_pinned_only);
    if (held != p->num_held_only)
        return violation(v, -1, KVPOOL_OWNER_TRANSFER_HOLD, 0, "held_only_count", held,
                         p->num_held_only);
    /* Walk the free queue: consistent links and a length equal to the free count. */
    uint32_t len = 0;
    int32_t prev = kvpool__fq_head(&p->fq);
    for (int32_t b = kvpool__fq_link(&p->fq, prev)->next; b != kvpool__fq_tail(&p->fq);
         b = kvpool__fq_link(&p->fq, b)->next) {
        if (b <= 0 || (uint32_t)b >= n || kvpool__fq_link(&p->fq, b)->prev != prev || ++len > n)
            return violation(v, b, KVPOOL_OWNER_NONE, 0, "free_queue_links", prev,
                             b > 0 && (uint32_t)b < n ? kvpool__fq_link(&p->fq, b)->prev : -1);
        prev = b;
    }
    if (len != p->fq.count)
        return violation(v, -1, KVPOOL_OWNER_NONE, 0, "free_count", len, p->fq.count);
    /* Walk the cache map: exactly the hashed blocks, each in its own bucket. */
    uint32_t mapped = 0;
    for (uint64_t bk = 0; bk <= p->bmask; bk++) {
        int32_t pv = -1;
        for (int32_t b = p->bk[bk].head; b >= 0; b = p->blk[b].mnext) {
            if ((uint32_t)b >= n || !(p->blk[b].flags & BLOCK_HASHED) ||
                (p->blk[b].hash & p->bmask) != bk || p->blk[b].mprev != pv || ++mapped > n)
                return violation(v, b, KVPOOL_OWNER_CACHE_ENTRY, 0, "cache_map", 1, 0);
            pv = b;
        }
        if (p->bk[bk].tail != pv)
            return violation(v, pv, KVPOOL_OWNER_CACHE_ENTRY, 0, "cache_map_tail", pv,
                             p->bk[bk].tail);
    }
    if (mapped != hashed)
        return violation(v, -1, KVPOOL_OWNER_CACHE_ENTRY, 0, "cache_map_count", hashed, mapped);
    return 0;
}

int kvpool_violation_format(const struct kvpool_violation *v, char *buf, size_t len)
{
    return snprintf(buf, len,
                    "ownership violation: rule=%s block=%" PRId32 " owner=%s owner_id=%" PRIu64
                    " expected=%" PRId64 " found=%" PRId64,
                    v->what, v->block, kvpool_owner_class_name(v->owner), v->owner_id, v->expected,
                    v->found);
}
