/*
 * tier.c - the G2/G3 tier store (offload.h, "G2/G3 tier store"): a fixed-capacity set of block
 * hashes in LRU order, with pins.
 *
 * Layout. slots[capacity] holds the entries; a free slot is on a singly linked free list (through
 * next). table[2^k] (2^k >= 2 * capacity, so the load stays <= 1/2) maps a hash to its slot by
 * open addressing with linear probing; deletion shifts the following run back (no tombstones), so
 * probes stay short however long the tier lives. Unpinned resident slots form a doubly linked
 * list from lru_head (least recent) to lru_tail (most recent); a pinned slot is on no list.
 *
 * Context: see the contract in offload.h (no locking: one owner thread, or the coordinator for a
 * shared G3).
 */
#include "offload/offload.h"

#include "kvpool/base.h"

#include <errno.h>
#include <stdlib.h>

#define NIL UINT32_MAX

struct tier_slot {
    uint64_t hash;
    uint32_t prev; /* LRU neighbours (unpinned resident slots only) */
    uint32_t next; /* LRU neighbour, or free-list link for a free slot */
    uint32_t pins;
};

/* A table entry carries the low 32 bits of the hash's mix next to its slot: probing compares
 * them before touching the slot (one cache miss per lookup instead of two), and deletion finds
 * each entry's home without reading its slot. */
struct tier_ref {
    uint32_t slot;
    uint32_t mix;
};

struct offload_tier {
    uint32_t capacity;
    uint32_t size;
    uint32_t npinned;
    uint32_t mask; /* table size - 1 */
    uint32_t free_head;
    uint32_t lru_head;      /* least recently used unpinned slot, or NIL */
    uint32_t lru_tail;      /* most recently used unpinned slot, or NIL */
    struct tier_ref *table; /* slot index (or NIL) and the hash's mixed bits */
    struct tier_slot *slots;
    struct offload_tier_counters c;
};

/* splitmix64's finalizer: block hashes may be structured (small integers, strided values). */
static inline uint32_t mix_of(uint64_t h) { return (uint32_t)base_mix64(h); }

/* Table position holding hash, or NIL. */
static uint32_t find_pos(const struct offload_tier *t, uint64_t hash)
{
    uint32_t mix = mix_of(hash), i = mix & t->mask;
    for (;;) {
        struct tier_ref r = t->table[i];
        if (r.slot == NIL)
            return NIL;
        if (r.mix == mix && t->slots[r.slot].hash == hash)
            return i;
        i = (i + 1) & t->mask;
    }
}

static uint32_t find_slot(const struct offload_tier *t, uint64_t hash)
{
    uint32_t pos = find_pos(t, hash);
    return pos == NIL ? NIL : t->table[pos].slot;
}

/* Empties table position i, shifting back the entries of the run after it. */
static void table_delete(struct offload_tier *t, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & t->mask;
        struct tier_ref r = t->table[j];
        if (r.slot == NIL)
            break;
        uint32_t k = r.mix & t->mask;
        /* The entry at j may move to i only if its home k is not cyclically in (i, j]. */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        t->table[i] = r;
        i = j;
    }
    t->table[i].slot = NIL;
}

static void table_insert(struct offload_tier *t, uint64_t hash, uint32_t slot)
{
    uint32_t mix = mix_of(hash), i = mix & t->mask;
    while (t->table[i].slot != NIL)
        i = (i + 1) & t->mask;
    t->table[i] = (struct tier_ref){slot, mix};
}

static void lru_unlink(struct offload_tier *t, uint32_t s)
{
    struct tier_slot *e = &t->slots[s];
    if (e->prev != NIL)
        t->slots[e->prev].next = e->next;
    else
        t->lru_head = e->next;
    if (e->next != NIL)
        t->slots[e->next].prev = e->prev;
    else
        t->lru_tail = e->prev;
    e->prev = e->next = NIL;
}

static void lru_push_mru(struct offload_tier *t, uint32_t s)
{
    struct tier_slot *e = &t->slots[s];
    e->next = NIL;
    e->prev = t->lru_tail;
    if (t->lru_tail != NIL)
        t->slots[t->lru_tail].next = s;
    else
        t->lru_head = s;
    t->lru_tail = s;
}

int offload_tier_create(uint32_t capacity, struct offload_tier **out)
{
    if (!out || capacity == 0 || capacity > OFFLOAD_TIER_MAX_CAPACITY)
        return -EINVAL;
    *out = NULL;
    uint64_t tsize = 8;
    while (tsize < 2 * (uint64_t)capacity)
        tsize <<= 1;
    struct offload_tier *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->table = malloc((size_t)tsize * sizeof(*t->table));
    t->slots = malloc((size_t)capacity * sizeof(*t->slots));
    if (!t->table || !t->slots) {
        offload_tier_destroy(t);
        return -ENOMEM;
    }
    t->capacity = capacity;
    t->mask = (uint32_t)(tsize - 1);
    for (uint64_t i = 0; i < tsize; i++)
        t->table[i] = (struct tier_ref){NIL, 0};
    for (uint32_t i = 0; i < capacity; i++) {
        t->slots[i].hash = 0;
        t->slots[i].prev = NIL;
        t->slots[i].next = i + 1 < capacity ? i + 1 : NIL;
        t->slots[i].pins = 0;
    }
    t->free_head = 0;
    t->lru_head = t->lru_tail = NIL;
    *out = t;
    return 0;
}

void offload_tier_destroy(struct offload_tier *t)
{
    if (!t)
        return;
    free(t->table);
    free(t->slots);
    free(t);
}

bool offload_tier_contains(const struct offload_tier *t, uint64_t hash)
{
    return find_pos(t, hash) != NIL;
}

void offload_tier_prefetch(const struct offload_tier *t, uint64_t hash)
{
    __builtin_prefetch(&t->table[mix_of(hash) & t->mask]);
}

bool offload_tier_touch(struct offload_tier *t, uint64_t hash)
{
    uint32_t s = find_slot(t, hash);
    if (s == NIL) {
        t->c.misses++;
        return false;
    }
    t->c.hits++;
    if (t->slots[s].pins == 0 && t->lru_tail != s) {
        lru_unlink(t, s);
        lru_push_mru(t, s);
    }
    return true;
}

/* Frees slot s (unpinned, resident, at table position pos). */
static void drop_slot(struct offload_tier *t, uint32_t s, uint32_t pos)
{
    lru_unlink(t, s);
    table_delete(t, pos);
    t->slots[s].next = t->free_head;
    t->free_head = s;
    t->size--;
}

/*
 * A full tier's inserts come in runs (a copy batch's blocks), each evicting the LRU head: a slot
 * and a table position nobody has touched for a long time, two cache misses the table-home
 * prefetch of the callers does not cover. So every insert into a full tier prefetches along the
 * LRU list for the inserts after it: the table home of the third victim from now (its slot came
 * in with the previous insert's prefetch, so its hash is at hand) and the slot after it; the
 * two victims before it had theirs asked for by the two previous inserts (3 ahead measured
 * faster than 1 or 2: consecutive inserts are only some tens of ns apart). A hint only: if the
 * LRU order changes meanwhile, an insert just misses as it would have. Always inlined: GCC's IPA
 * takes a function that only prefetches for pure and drops the call.
 */
static inline __attribute__((always_inline)) void
prefetch_next_victims(const struct offload_tier *t)
{
    uint32_t v = t->lru_head;
    if (v == NIL)
        return;
    const struct tier_slot *e = &t->slots[v];
    for (int d = 0; d < 2; d++) { /* two steps past the next victim */
        if (e->next == NIL)
            return;
        e = &t->slots[e->next];
    }
    __builtin_prefetch(&t->table[mix_of(e->hash) & t->mask]);
    if (e->next != NIL)
        __builtin_prefetch(&t->slots[e->next]);
}

int offload_tier_insert(struct offload_tier *t, uint64_t hash, bool *evicted,
                        uint64_t *evicted_hash)
{
    if (evicted)
        *evicted = false;
    if (find_pos(t, hash) != NIL) {
        t->c.filtered++;
        return -EEXIST;
    }
    if (t->size == t->capacity) {
        uint32_t v = t->lru_head;
        if (v == NIL) {
            t->c.full++;
            return -ENOSPC;
        }
        uint64_t vh = t->slots[v].hash;
        drop_slot(t, v, find_pos(t, vh));
        t->c.evictions++;
        if (evicted)
            *evicted = true;
        if (evicted_hash)
            *evicted_hash = vh;
    }
    uint32_t s = t->free_head;
    t->free_head = t->slots[s].next;
    t->slots[s].hash = hash;
    t->slots[s].pins = 0;
    table_insert(t, hash, s);
    lru_push_mru(t, s);
    t->size++;
    t->c.inserts++;
    if (t->size == t->capacity)
        prefetch_next_victims(t);
    return 0;
}

int offload_tier_remove(struct offload_tier *t, uint64_t hash)
{
    uint32_t pos = find_pos(t, hash);
    if (pos == NIL)
        return -ENOENT;
    uint32_t s = t->table[pos].slot;
    if (t->slots[s].pins)
        return -EBUSY;
    drop_slot(t, s, pos);
    t->c.removes++;
    return 0;
}

int offload_tier_pin(struct offload_tier *t, uint64_t hash)
{
    uint32_t s = find_slot(t, hash);
    if (s == NIL)
        return -ENOENT;
    struct tier_slot *e = &t->slots[s];
    if (e->pins == UINT32_MAX)
        return -EOVERFLOW;
    if (e->pins++ == 0) {
        lru_unlink(t, s);
        t->npinned++;
    }
    return 0;
}

int offload_tier_unpin(struct offload_tier *t, uint64_t hash)
{
    uint32_t s = find_slot(t, hash);
    if (s == NIL)
        return -ENOENT;
    struct tier_slot *e = &t->slots[s];
    if (e->pins == 0)
        return -EINVAL;
    if (--e->pins == 0) {
        lru_push_mru(t, s);
        t->npinned--;
    }
    return 0;
}

uint32_t offload_tier_pins(const struct offload_tier *t, uint64_t hash)
{
    uint32_t s = find_slot(t, hash);
    return s == NIL ? 0 : t->slots[s].pins;
}

size_t offload_tier_filter_present(struct offload_tier *t, const uint64_t *in, size_t n,
                                   uint64_t *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = in[i]; /* read before writing: out may alias in (m <= i) */
        if (find_pos(t, h) != NIL)
            t->c.filtered++;
        else
            out[m++] = h;
    }
    return m;
}

bool offload_tier_peek_lru(const struct offload_tier *t, uint64_t *hash)
{
    if (t->lru_head == NIL)
        return false;
    if (hash)
        *hash = t->slots[t->lru_head].hash;
    return true;
}

size_t offload_tier_export_lru(const struct offload_tier *t, uint64_t *out, size_t max)
{
    size_t m = 0;
    for (uint32_t s = t->lru_head; s != NIL && m < max; s = t->slots[s].next)
        out[m++] = t->slots[s].hash;
    return m;
}

uint32_t offload_tier_size(const struct offload_tier *t) { return t->size; }
uint32_t offload_tier_capacity(const struct offload_tier *t) { return t->capacity; }
uint32_t offload_tier_pinned(const struct offload_tier *t) { return t->npinned; }

void offload_tier_counters(const struct offload_tier *t, struct offload_tier_counters *out)
{
    *out = t->c;
}

void offload_tier_reset_counters(struct offload_tier *t)
{
    t->c = (struct offload_tier_counters){0};
}
