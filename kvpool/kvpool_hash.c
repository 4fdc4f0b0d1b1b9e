/*
 * kvpool_hash.c - block hashing with XXH3-64 (libxxhash).
 *
 * vLLM hashes (parent hash, token ids, extra keys) with SHA-256 over a serialized tuple; the
 * simulator only needs the same equality structure (equal chains <=> equal hashes, with
 * overwhelming probability), so it seeds XXH3 with the parent hash and folds the extra key in.
 */
#include "kvpool/kvpool_internal.h"

#include <xxhash.h>

kvpool_hash kvpool__hash_block(kvpool_hash parent, const kvpool_token *tokens, size_t n,
                               uint64_t extra)
{
    kvpool_hash h = XXH3_64bits_withSeed(tokens, n * sizeof *tokens, parent);
    if (extra != 0)
        h = XXH3_64bits_withSeed(&extra, sizeof extra, h);
    return h;
}

uint64_t kvpool__hash_bytes(const void *data, size_t len)
{
    uint64_t h = XXH3_64bits(data, len);
    return h != 0 ? h : 1;
}
