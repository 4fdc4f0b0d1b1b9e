/*
 * kvpool_internal.h - private pieces of the block pool, shared with its unit tests.
 *
 * The free queue is vLLM's FreeKVCacheBlockQueue as an index-linked list over arrays: O(1)
 * popleft, remove, append; order-preserving append_n and prepend_n. Same thread as the pool.
 */
#ifndef KVSIM_KVPOOL_INTERNAL_H
#define KVSIM_KVPOOL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool/kvpool.h"

struct kvpool_fq_link {
    int32_t prev, next; /* -1 when not queued */
};

/* The links of id 0..cap-1 and of the two sentinels (cap, cap+1), in an array of their own. */
struct kvpool_free_queue {
    struct kvpool_fq_link *links; /* [cap + 2] */
    int32_t cap;                  /* ids are 0 .. cap-1 */
    uint32_t count;               /* queued ids */
};

/* Allocates an empty queue for ids 0..cap-1. Returns 0 or -ENOMEM. */
int kvpool__fq_init(struct kvpool_free_queue *q, int32_t cap);
void kvpool__fq_fini(struct kvpool_free_queue *q);
static inline struct kvpool_fq_link *kvpool__fq_link(const struct kvpool_free_queue *q, int32_t id)
{
    return &q->links[id];
}
static inline int32_t kvpool__fq_head(const struct kvpool_free_queue *q) { return q->cap; }
static inline int32_t kvpool__fq_tail(const struct kvpool_free_queue *q) { return q->cap + 1; }
static inline int kvpool__fq_contains(const struct kvpool_free_queue *q, int32_t id)
{
    return kvpool__fq_link(q, id)->prev >= 0;
}
/* First queued id, or -1 when empty. */
static inline int32_t kvpool__fq_front(const struct kvpool_free_queue *q)
{
    int32_t f = kvpool__fq_link(q, kvpool__fq_head(q))->next;
    return f == kvpool__fq_tail(q) ? -1 : f;
}
/* Removes and returns the first id, or -ENOSPC ("no free blocks available") when empty. */
int32_t kvpool__fq_popleft(struct kvpool_free_queue *q);
/* Pops n ids from the front into out. Returns 0, or -ENOSPC (nothing popped) if fewer queued. */
int kvpool__fq_popleft_n(struct kvpool_free_queue *q, int32_t *out, uint32_t n);
/* Links id (not queued) right after at (an id or the head sentinel). */
void kvpool__fq_insert_after(struct kvpool_free_queue *q, int32_t at, int32_t id);
/* Unlinks a queued id. */
void kvpool__fq_remove(struct kvpool_free_queue *q, int32_t id);
void kvpool__fq_append(struct kvpool_free_queue *q, int32_t id);
/* Appends ids in order at the back. */
void kvpool__fq_append_n(struct kvpool_free_queue *q, const int32_t *ids, uint32_t n);
/* Puts ids at the front keeping their order: prepend_n([a,b]) on [c] gives [a,b,c]. */
void kvpool__fq_prepend_n(struct kvpool_free_queue *q, const int32_t *ids, uint32_t n);

/* Chained block hash: H(parent, tokens[0..n), extra). extra 0 means no extra key. */
kvpool_hash kvpool__hash_block(kvpool_hash parent, const kvpool_token *tokens, size_t n,
                               uint64_t extra);
/* Chains num_blocks block hashes into out[0..num_blocks), each the parent of the next, extra in
 * the first one only: block i's bs tokens start at tokens + i * stride (stride bs: consecutive
 * blocks; 0: the same tokens every time, a run of one token). Returns the last hash, or parent
 * for 0 blocks. One call per run of blocks: the hashing loop stays inside the hash module. */
kvpool_hash kvpool__hash_blocks(kvpool_hash parent, const kvpool_token *tokens, uint32_t bs,
                                size_t stride, uint32_t num_blocks, uint64_t extra,
                                kvpool_hash *out);
/* Hash of a byte string used as an extra key (cache salt). Never 0. */
uint64_t kvpool__hash_bytes(const void *data, size_t len);

#endif /* KVSIM_KVPOOL_INTERNAL_H */
