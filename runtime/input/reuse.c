/*
 * reuse.c - a trace statistic: the prefix-cache reuse an unbounded cache shared by every engine
 * would give on the trace (the report's "possible" reuse, beside what the engines reached).
 * Pure: any thread.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/input/input_internal.h"

/*
 * The set of hash ids seen so far, for kvsim_trace_unbounded_reuse: a bitmap over [0, max id] when
 * that is no larger than a hash table would be (a trace's ids are usually dense, as Mooncake's
 * remapped ones are: about an eighth of a byte per id), else an open-addressing table.
 */
struct id_set {
    uint64_t *bits;  /* bitmap (cap 0) */
    uint64_t *table; /* id + 1; 0 = empty */
    size_t cap;
};

static int id_set_init(struct id_set *s, const struct kvsim_trace *t)
{
    memset(s, 0, sizeof *s);
    uint64_t max = 0;
    for (size_t i = 0; i < t->num_hash_ids; i++)
        if (t->hash_ids[i] > max)
            max = t->hash_ids[i];
    size_t cap = 16;
    while (cap < 2 * t->num_hash_ids)
        cap *= 2;
    if (max / 8 < cap * sizeof *s->table) {
        s->bits = calloc(max / 64 + 1, sizeof *s->bits);
        return s->bits ? 0 : -ENOMEM;
    }
    s->cap = cap;
    s->table = calloc(cap, sizeof *s->table);
    return s->table ? 0 : -ENOMEM;
}

/* Adds id; returns whether it was there already. */
static bool id_set_add(struct id_set *s, uint64_t id)
{
    if (s->bits) {
        uint64_t w = s->bits[id / 64], m = UINT64_C(1) << (id % 64);
        s->bits[id / 64] = w | m;
        return w & m;
    }
    uint64_t key = id + 1, h = key * UINT64_C(0x9e3779b97f4a7c15);
    size_t j = (size_t)(h >> 20) & (s->cap - 1);
    while (s->table[j] && s->table[j] != key)
        j = (j + 1) & (s->cap - 1);
    bool had = s->table[j] != 0;
    s->table[j] = key;
    return had;
}

int kvsim_trace_unbounded_reuse(const struct kvsim_trace *t, uint32_t block_size, double *out)
{
    struct id_set set;
    if (id_set_init(&set, t))
        return -ENOMEM;
    uint64_t input = 0, hit = 0;
    for (size_t i = 0; i < t->num_reqs; i++) {
        const struct kvsim_req_spec *s = &t->reqs[i];
        const uint64_t *ids = kvsim_trace_hashes(t, s);
        uint64_t lead = 0;
        bool leading = true;
        for (uint32_t k = 0; k < s->num_hashes; k++) {
            bool seen = id_set_add(&set, ids[k]);
            if (seen && leading)
                lead++;
            else
                leading = false;
        }
        uint64_t tokens = lead * t->block_size;
        uint64_t most = s->input_len > 0 ? s->input_len - 1 : 0;
        tokens = tokens < most ? tokens : most;
        hit += tokens - tokens % block_size;
        input += s->input_len;
    }
    free(set.bits);
    free(set.table);
    *out = input ? (double)hit / (double)input : 0.0;
    return 0;
}
