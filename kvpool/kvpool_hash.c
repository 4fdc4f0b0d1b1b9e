/*
 * kvpool_hash.c - block hashing with XXH3-64 (libxxhash).
 *
 * vLLM hashes (parent hash, token ids, extra keys) with SHA-256 over a serialized tuple; the
 * simulator only needs the same equality structure (equal chains <=> equal hashes, with
 * overwhelming probability), so it seeds XXH3 with the parent hash and folds the extra key in.
 */
#include "kvpool/kvpool_internal.h"

#include <errno.h>
#include <stdlib.h>
/* The header's own inline build of the same XXH3 (libxxhash's results, bit for bit): a block
 * hash is ~60 bytes of input, where the call into the shared library and its length dispatch
 * cost as much as the mixing (issue #14). */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* One block: XXH3-64 of its tokens seeded with the parent, then the extra key folded in. */
static inline kvpool_hash hash_block(kvpool_hash parent, const kvpool_token *tokens, size_t n,
                                     uint64_t extra)
{
    kvpool_hash h;
    if (n == 16) /* the default block size: a constant length picks XXH3's path at compile time */
        h = XXH3_64bits_withSeed(tokens, 16 * sizeof *tokens, parent);
    else
        h = XXH3_64bits_withSeed(tokens, n * sizeof *tokens, parent);
    if (extra != 0)
        h = XXH3_64bits_withSeed(&extra, sizeof extra, h);
    return h;
}

kvpool_hash kvpool__hash_block(kvpool_hash parent, const kvpool_token *tokens, size_t n,
                               uint64_t extra)
{
    return hash_block(parent, tokens, n, extra);
}

kvpool_hash kvpool__hash_blocks(kvpool_hash parent, const kvpool_token *tokens, uint32_t bs,
                                size_t stride, uint32_t num_blocks, uint64_t extra,
                                kvpool_hash *out)
{
    for (uint32_t i = 0; i < num_blocks; i++, tokens += stride, extra = 0)
        out[i] = parent = hash_block(parent, tokens, bs, extra);
    return parent;
}

uint64_t kvpool__hash_bytes(const void *data, size_t len)
{
    uint64_t h = XXH3_64bits(data, len);
    return h != 0 ? h : 1;
}

int64_t kvpool_hash_prompt(uint32_t block_size, const void *salt, size_t salt_len,
                           const struct kvpool_token_run *runs, uint32_t num_runs,
                           kvpool_hash *hashes, uint32_t cap)
{
    return kvpool_hash_prompt_more(block_size, salt, salt_len, runs, num_runs, hashes, 0, cap);
}

int64_t kvpool_hash_prompt_more(uint32_t block_size, const void *salt, size_t salt_len,
                                const struct kvpool_token_run *runs, uint32_t num_runs,
                                kvpool_hash *hashes, uint32_t have, uint32_t cap)
{
    kvpool_token stack_buf[512];
    kvpool_token *buf = block_size <= 512 ? stack_buf : malloc(block_size * sizeof *buf);
    if (!buf)
        return -ENOMEM;
    uint64_t extra = salt && salt_len ? kvpool__hash_bytes(salt, salt_len) : 0;
    kvpool_hash parent = have ? hashes[have - 1] : KVPOOL_NONE_HASH;
    int64_t nblocks = have;
    uint64_t skip = (uint64_t)have * block_size; /* tokens of the blocks hashed already */
    uint32_t fill = 0;
    for (uint32_t r = 0; r < num_runs && nblocks < cap; r++) {
        uint32_t left = runs[r].count;
        if (skip) {
            uint32_t k = skip < left ? (uint32_t)skip : left;
            skip -= k;
            left -= k;
        }
        if (fill && left) { /* complete the partial block */
            uint32_t k = block_size - fill < left ? block_size - fill : left;
            for (uint32_t i = 0; i < k; i++)
                buf[fill + i] = runs[r].token;
            fill += k;
            left -= k;
            if (fill < block_size)
                continue;
            parent = hash_block(parent, buf, block_size, nblocks == 0 ? extra : 0);
            hashes[nblocks++] = parent;
            fill = 0;
        }
        uint64_t whole = left / block_size;
        if (whole > (uint64_t)(cap - nblocks))
            whole = (uint64_t)(cap - nblocks);
        if (whole) { /* blocks of the one token: the same tokens hashed each time */
            for (uint32_t i = 0; i < block_size; i++)
                buf[i] = runs[r].token;
            parent = kvpool__hash_blocks(parent, buf, block_size, 0, (uint32_t)whole,
                                         nblocks == 0 ? extra : 0, hashes + nblocks);
            nblocks += (int64_t)whole;
            left -= (uint32_t)(whole * block_size);
        }
        if (nblocks < cap && left) { /* the next partial block (left < block_size here) */
            for (uint32_t i = 0; i < left; i++)
                buf[i] = runs[r].token;
            fill = left;
        }
    }
    if (buf != stack_buf)
        free(buf);
    return nblocks;
}
