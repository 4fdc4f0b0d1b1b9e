/*
 * bench_kvpool.c - throughput of the G1 KV block pool (kvpool.h).
 *
 * For pools of 10,000 and 1,000,000 blocks (16-token blocks, prefix caching on, KV events off
 * unless --events) it measures:
 *   - admission (kvpool_lookup + kvpool_prepare + kvpool_commit) and kvpool_free, in blocks/s,
 *     over a working set that saw-tooths between 50% and 90% of the pool, freeing the oldest
 *     sequences, so that nearly every allocated block lazily evicts a cached hash;
 *   - kvpool_lookup alone, in hit blocks examined per second, over 1,000 prefix families;
 *   - kvpool_prepare + kvpool_abort, in plans/s, for a READY plan and a CAPACITY_EXHAUSTED one;
 * and, once, block hashing through kvpool_seq_append_tokens in tokens/s.
 *
 * Every token sequence is built (and hashed) before the clock starts. Each measurement does a
 * fixed amount of work per repetition, timed with CLOCK_MONOTONIC; the figure is the best of 3
 * repetitions. Results go to stdout as a table and to a JSON file. After the measurements
 * kvpool_check() reconciles each pool; the exit status is non-zero if any check fails.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#ifdef KVSIM_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#include "bench_util.h"
#include "kvpool/kvpool.h"
#include "runtime/runtime.h"

#define PROG            "bench_kvpool"
#define REPS            BENCH_REPS
#define BLOCK_SIZE      16u
#define NUM_FAMILIES    1000u
#define MAX_SEQ_BLOCKS  64u
#define DEFAULT_JSON    "bench/results/bench_kvpool.json"
#define HASH_RESET_TOKS 16384u /* the hashing sequence is restarted after this many tokens */

static const uint32_t pool_sizes[] = {10000, 1000000};
#define NUM_POOLS (sizeof pool_sizes / sizeof pool_sizes[0])

/* ---- options and work sizes ----------------------------------------------------------------- */

struct options {
    uint64_t seed;
    const char *json_path;
    bool quick;
    bool events;
    bool fresh;
};

/* Work of one repetition, per pool. */
struct work {
    uint64_t alloc_blocks;      /* blocks allocated (admitted) per repetition */
    double ring_factor;         /* prebuilt sequences, in multiples of the usable blocks */
    uint64_t lookup_hit_blocks; /* hit blocks examined per repetition (rounded up to passes) */
    uint64_t query_blocks;      /* budget of prebuilt query hashes, in blocks */
    uint32_t max_queries;
    uint64_t plans; /* prepare+abort pairs per repetition, per variant */
};

static struct work work_for(uint32_t num_blocks, bool quick)
{
    struct work w;
    w.ring_factor = 2.0;
    w.max_queries = 20000;
    if (num_blocks <= 100000) {
        w.alloc_blocks = quick ? 100000 : 8000000;
        w.lookup_hit_blocks = quick ? 500000 : 40000000;
        w.query_blocks = quick ? 50000 : 400000;
        w.plans = quick ? 200000 : 20000000;
    } else {
        w.alloc_blocks = quick ? 200000 : 6000000;
        w.lookup_hit_blocks = quick ? 500000 : 20000000;
        w.query_blocks = quick ? 200000 : 2400000;
        w.plans = quick ? 200000 : 20000000;
    }
    return w;
}

static uint64_t hash_work_tokens(bool quick) { return quick ? 2000000 : 64000000; }

/* ---- small utilities ------------------------------------------------------------------------ */

static kvpool_token rng_token(struct bench_rng *r)
{
    return (kvpool_token)(bench_rng_next(r) >> 32);
}

static void die_rc(const char *what, int rc)
{
    fprintf(stderr, "bench_kvpool: %s failed: %s (%d)\n", what, strerror(rc < 0 ? -rc : rc), rc);
    exit(1);
}

/* "12.3 M" style, for the table. */
static const char *si(double v, char *buf, size_t len)
{
    static const char *const prefix[] = {"", "k", "M", "G", "T"};
    int i = 0;
    while (v >= 1000.0 && i < 4) {
        v /= 1000.0;
        i++;
    }
    snprintf(buf, len, "%7.2f %s", v, prefix[i]);
    return buf;
}

/* ---- figures -------------------------------------------------------------------------------- */

static void fig_print(const struct bench_figure *f, const char *pool)
{
    char b1[32];
    double ns_per = f->best > 0 ? 1e9 / f->best : 0.0;
    printf("%-9s %-40s %s%-9s %9.1f ns\n", pool, f->label, si(f->best, b1, sizeof b1), f->unit,
           ns_per);
}

/* ---- KV events ------------------------------------------------------------------------------ */

struct event_counts {
    uint64_t stored_hashes;
    uint64_t removed_hashes;
    uint64_t events;
};

static void count_event(void *ctx, const struct kvpool_event *ev)
{
    struct event_counts *c = ctx;
    c->events++;
    if (ev->type == KVPOOL_EVENT_STORED)
        c->stored_hashes += ev->num_hashes;
    else if (ev->type == KVPOOL_EVENT_REMOVED)
        c->removed_hashes += ev->num_hashes;
}

/* ---- building sequences (never timed, except in the hashing measurement) -------------------- */

enum { TOKBUF = 4096 };

/* Appends n random (distinct with overwhelming probability) tokens to seq. */
static void append_random(struct kvpool *pool, struct kvpool_seq *seq, struct bench_rng *r,
                          uint64_t n)
{
    kvpool_token buf[TOKBUF];
    while (n) {
        size_t k = n < TOKBUF ? (size_t)n : TOKBUF;
        for (size_t i = 0; i < k; i++)
            buf[i] = rng_token(r);
        int rc = kvpool_seq_append_tokens(pool, seq, buf, k);
        if (rc)
            die_rc("kvpool_seq_append_tokens", rc);
        n -= k;
    }
}

/* Token i of prefix family f: a pure function, so roots and queries agree without storage. */
static kvpool_token family_token(uint64_t seed, uint32_t f, uint64_t i)
{
    uint64_t h = bench_splitmix64(seed ^ UINT64_C(0x66616d696c79) ^ ((uint64_t)f << 40) ^ i);
    return (kvpool_token)(h >> 32);
}

static void append_family(struct kvpool *pool, struct kvpool_seq *seq, uint64_t seed, uint32_t f,
                          uint64_t n)
{
    kvpool_token buf[TOKBUF];
    for (uint64_t done = 0; done < n;) {
        size_t k = n - done < TOKBUF ? (size_t)(n - done) : TOKBUF;
        for (size_t i = 0; i < k; i++)
            buf[i] = family_token(seed, f, done + i);
        int rc = kvpool_seq_append_tokens(pool, seq, buf, k);
        if (rc)
            die_rc("kvpool_seq_append_tokens", rc);
        done += k;
    }
}

static void seq_init_or_die(struct kvpool *pool, struct kvpool_seq *seq, uint64_t id)
{
    int rc = kvpool_seq_init(pool, seq, id, NULL, 0);
    if (rc)
        die_rc("kvpool_seq_init", rc);
}

static void seq_fini_or_die(struct kvpool *pool, struct kvpool_seq *seq)
{
    int rc = kvpool_seq_fini(pool, seq);
    if (rc)
        die_rc("kvpool_seq_fini", rc);
}

/* ---- admission: what a scheduler does for a waiting request ---------------------------------- */

struct admit_stats {
    uint64_t admissions;
    uint64_t hit_blocks;    /* hits taken */
    uint64_t new_blocks;    /* fresh blocks popped from the free queue */
    uint64_t cached_blocks; /* blocks newly registered in the prefix cache */
};

/* kvpool_lookup + kvpool_prepare + kvpool_commit; any failure is fatal (the bench sized it). */
static void admit(struct kvpool *pool, struct kvpool_seq *seq, struct admit_stats *st)
{
    struct kvpool_hits hits;
    kvpool_lookup(pool, seq, &hits, NULL, 0);
    struct kvpool_alloc_args args = {
        .num_new_tokens = seq->num_tokens - hits.num_tokens,
        .hits = &hits,
        .is_admission = true,
    };
    struct kvpool_plan plan;
    int rc = kvpool_prepare(pool, seq, &args, &plan);
    if (rc != KVPOOL_READY) {
        if (rc > 0)
            fprintf(stderr, "bench_kvpool: admission of sequence %" PRIu64 " got %s\n", seq->id,
                    kvpool_outcome_name((enum kvpool_outcome)rc));
        die_rc("kvpool_prepare", rc > 0 ? -ENOSPC : rc);
    }
    rc = kvpool_commit(pool, seq, &plan);
    if (rc)
        die_rc("kvpool_commit", rc);
    st->admissions++;
    st->hit_blocks += plan.num_hit_blocks;
    st->new_blocks += plan.num_new_blocks;
    st->cached_blocks += plan.cache_upto_blocks - plan.num_hit_blocks;
}

/* Blocks currently carrying a hash in the prefix cache (untimed; O(num_blocks)). */
static uint64_t count_hashed(const struct kvpool *pool)
{
    uint64_t n = 0;
    uint32_t nb = kvpool_get_config(pool)->num_blocks;
    for (uint32_t b = 1; b < nb; b++)
        n += kvpool_block_hash(pool, (kvpool_block_id)b, NULL);
    return n;
}

static bool check_pool(const struct kvpool *pool, const char *when)
{
    struct kvpool_violation v;
    int rc = kvpool_check(pool, &v);
    if (rc == 0)
        return true;
    char line[256];
    kvpool_violation_format(&v, line, sizeof line);
    fprintf(stderr, "bench_kvpool: kvpool_check failed (%u blocks, %s): %s\n",
            kvpool_get_config(pool)->num_blocks, when, line);
    return false;
}

/* ---- 1. allocate/commit/free ------------------------------------------------------------------
 */

/* Prebuilt sequences admitted in ring order; live ones are ring[head .. head+live). */
struct ring {
    struct kvpool_seq *seqs;
    uint32_t *blocks; /* blocks each sequence needs */
    size_t n;
    size_t head, next, live;
    uint64_t total_blocks;
};

static void ring_build(struct kvpool *pool, struct bench_rng *r, uint64_t min_blocks,
                       struct ring *ring)
{
    size_t cap = 1024, n = 0;
    uint32_t *blocks = bench_xcalloc(PROG, cap, sizeof *blocks);
    uint64_t total = 0;
    while (total < min_blocks) {
        if (n == cap) {
            cap *= 2;
            uint32_t *nb = realloc(blocks, cap * sizeof *blocks);
            if (!nb) {
                fprintf(stderr, "bench_kvpool: out of memory\n");
                exit(1);
            }
            blocks = nb;
        }
        blocks[n] = bench_rng_range(r, 1, MAX_SEQ_BLOCKS);
        total += blocks[n++];
    }
    memset(ring, 0, sizeof *ring);
    ring->seqs = bench_xcalloc(PROG, n, sizeof *ring->seqs);
    ring->blocks = blocks;
    ring->n = n;
    ring->total_blocks = total;
    for (size_t i = 0; i < n; i++) {
        /* Mostly a partial last block (unhashed: freed to the queue front), sometimes full. */
        uint64_t ntok = (uint64_t)blocks[i] * BLOCK_SIZE - bench_rng_range(r, 0, BLOCK_SIZE - 1);
        seq_init_or_die(pool, &ring->seqs[i], i);
        append_random(pool, &ring->seqs[i], r, ntok);
    }
}

/*
 * Ages the pool: afterwards the free queue holds the blocks in a random order, which is where a
 * long-running pool converges (every alloc/free cycle cuts runs of consecutive block ids at
 * sequence boundaries and never joins them; at 1M blocks throughput keeps falling for dozens of
 * pool turnovers otherwise). Public API only: admit ring sequences until the pool is full, hold
 * every block, free the sequences, release the holds in a random order, reset the prefix cache.
 */
static void age_pool(struct kvpool *pool, struct ring *ring, struct bench_rng *r, bool events)
{
    uint32_t usable = kvpool_num_usable_blocks(pool);
    kvpool_block_id *ids = bench_xcalloc(PROG, usable, sizeof *ids);
    uint32_t n = 0;
    struct admit_stats st = {0};
    size_t first = ring->next, count = 0;
    while (count < ring->n && kvpool_num_free_blocks(pool) >= ring->blocks[ring->next]) {
        struct kvpool_seq *s = &ring->seqs[ring->next];
        admit(pool, s, &st);
        for (uint32_t j = 0; j < s->num_blocks; j++) {
            int rc = kvpool_hold_block(pool, s->blocks[j]);
            if (rc)
                die_rc("kvpool_hold_block", rc);
            ids[n++] = s->blocks[j];
        }
        ring->next = ring->next + 1 == ring->n ? 0 : ring->next + 1;
        count++;
    }
    for (size_t k = 0, i = first; k < count; k++, i = i + 1 == ring->n ? 0 : i + 1)
        kvpool_free(pool, &ring->seqs[i]);
    for (uint32_t i = n; i > 1; i--) { /* Fisher-Yates */
        uint32_t j = bench_rng_range(r, 0, i - 1);
        kvpool_block_id t = ids[i - 1];
        ids[i - 1] = ids[j];
        ids[j] = t;
    }
    for (uint32_t i = 0; i < n; i++) {
        int rc = kvpool_release_hold(pool, ids[i]);
        if (rc)
            die_rc("kvpool_release_hold", rc);
    }
    int rc = kvpool_reset_prefix_cache(pool);
    if (rc)
        die_rc("kvpool_reset_prefix_cache", rc);
    if (events)
        kvpool_events_drain(pool, NULL, NULL);
    ring->head = ring->next;
    ring->live = 0;
    free(ids);
}

static void ring_destroy(struct kvpool *pool, struct ring *ring)
{
    for (size_t i = 0; i < ring->n; i++)
        seq_fini_or_die(pool, &ring->seqs[i]);
    free(ring->seqs);
    free(ring->blocks);
    memset(ring, 0, sizeof *ring);
}

struct churn_out {
    uint64_t allocated, freed, total_ns, free_ns;
    struct admit_stats st;
    struct event_counts ev;
};

/*
 * Admits ring sequences until `target` blocks were allocated. Before an admission that would
 * push usage above 90%, frees the oldest sequences until usage plus the newcomer is at most 50%
 * (a saw-tooth between the two). Free bursts are timed separately; admissions get the rest.
 */
static void churn(struct kvpool *pool, struct ring *ring, uint64_t target, bool events,
                  struct churn_out *o)
{
    memset(o, 0, sizeof *o);
    uint64_t usable = kvpool_num_usable_blocks(pool);
    uint64_t high = usable * 9 / 10, low = usable / 2;
    uint64_t t0 = bench_now_ns();
    while (o->allocated < target) {
        struct kvpool_seq *s = &ring->seqs[ring->next];
        uint64_t need = ring->blocks[ring->next];
        if (usable - kvpool_num_free_blocks(pool) + need > high) {
            uint64_t f0 = bench_now_ns();
            while (ring->live && usable - kvpool_num_free_blocks(pool) + need > low) {
                struct kvpool_seq *old = &ring->seqs[ring->head];
                o->freed += old->num_blocks;
                kvpool_free(pool, old);
                ring->head = ring->head + 1 == ring->n ? 0 : ring->head + 1;
                ring->live--;
            }
            o->free_ns += bench_now_ns() - f0;
        }
        admit(pool, s, &o->st);
        if (events)
            kvpool_events_drain(pool, count_event, &o->ev);
        o->allocated += s->num_blocks;
        ring->next = ring->next + 1 == ring->n ? 0 : ring->next + 1;
        ring->live++;
    }
    o->total_ns = bench_now_ns() - t0;
}

struct alloc_result {
    struct bench_figure admit_f, admits_f, free_f, combined_f;
    uint64_t evictions[REPS];
    uint64_t hits[REPS];
    uint64_t admissions[REPS];
    struct event_counts events; /* KV events of the timed repetitions (--events) */
    uint64_t ring_seqs, ring_blocks;
    bool ok;
};

static void bench_alloc(struct kvpool *pool, const struct work *w, uint64_t seed, bool events,
                        bool fresh, struct alloc_result *res)
{
    memset(res, 0, sizeof *res);
    bench_fig_init(&res->admit_f, "alloc_blocks_per_s", "alloc: lookup+prepare+commit", "blocks/s",
                   "blocks allocated per second by admissions (kvpool_lookup + kvpool_prepare + "
                   "kvpool_commit), almost every one lazily evicting a cached block");
    bench_fig_init(&res->admits_f, "admissions_per_s", "alloc: admissions", "seqs/s",
                   "sequences (1..64 blocks) admitted per second");
    bench_fig_init(&res->free_f, "free_blocks_per_s", "free: kvpool_free", "blocks/s",
                   "blocks released per second by kvpool_free of the oldest sequences");
    bench_fig_init(&res->combined_f, "combined_blocks_per_s", "alloc+free combined", "blocks/s",
                   "(blocks allocated + blocks freed) per second of the whole churn loop");
    struct bench_rng r = {bench_splitmix64(seed ^ 0xa110c)};
    struct ring ring;
    uint32_t usable = kvpool_num_usable_blocks(pool);
    ring_build(pool, &r, (uint64_t)(w->ring_factor * usable), &ring);
    res->ring_seqs = ring.n;
    res->ring_blocks = ring.total_blocks;

    if (!fresh)
        age_pool(pool, &ring, &r, events);
    /* Warm-up: one pass over the ring reaches the steady state (hashed blocks at the queue
     * front, every sequence's block table already sized). */
    struct churn_out o;
    churn(pool, &ring, ring.total_blocks, events, &o);
    for (int rep = 0; rep < REPS; rep++) {
        uint64_t hashed_before = count_hashed(pool);
        churn(pool, &ring, w->alloc_blocks, events, &o);
        uint64_t hashed_after = count_hashed(pool);
        uint64_t admit_ns = o.total_ns - o.free_ns;
        bench_fig_record(&res->admit_f, rep, o.allocated, admit_ns);
        bench_fig_record(&res->admits_f, rep, o.st.admissions, admit_ns);
        bench_fig_record(&res->free_f, rep, o.freed, o.free_ns);
        bench_fig_record(&res->combined_f, rep, o.allocated + o.freed, o.total_ns);
        /* Hashes inserted minus net growth of the cache = hashes lazily evicted. */
        res->evictions[rep] = o.st.cached_blocks + hashed_before - hashed_after;
        res->hits[rep] = o.st.hit_blocks;
        res->admissions[rep] = o.st.admissions;
        res->events.events += o.ev.events;
        res->events.stored_hashes += o.ev.stored_hashes;
        res->events.removed_hashes += o.ev.removed_hashes;
        if (events && o.ev.removed_hashes != res->evictions[rep]) {
            fprintf(stderr,
                    "bench_kvpool: %u blocks: %" PRIu64 " Removed events but %" PRIu64
                    " evictions\n",
                    usable + 1, o.ev.removed_hashes, res->evictions[rep]);
            res->ok = false;
            goto out;
        }
    }
    res->ok = check_pool(pool, "after allocate/commit/free");
out:
    while (ring.live) {
        kvpool_free(pool, &ring.seqs[ring.head]);
        ring.head = ring.head + 1 == ring.n ? 0 : ring.head + 1;
        ring.live--;
    }
    ring_destroy(pool, &ring);
    if (events)
        kvpool_events_drain(pool, NULL, NULL);
}

/* ---- 2. lookup and 3. prepare+abort ------------------------------------------------------------
 */

struct lookup_result {
    struct bench_figure lookup_f, lookups_f, ready_f, exhausted_f;
    uint32_t families, max_prefix_blocks, queries;
    uint64_t cached_blocks, hit_blocks_per_pass, evictable_per_pass;
    bool ok;
};

static void bench_lookup(struct kvpool *pool, const struct work *w, uint64_t seed, bool events,
                         struct lookup_result *res)
{
    memset(res, 0, sizeof *res);
    bench_fig_init(
        &res->lookup_f, "lookup_hit_blocks_per_s", "lookup: hit blocks examined", "blocks/s",
        "prefix-cache hit blocks found per second by kvpool_lookup (no references taken)");
    bench_fig_init(&res->lookups_f, "lookups_per_s", "lookup: calls", "lookups/s",
                   "kvpool_lookup calls per second (each walks its hit prefix plus one miss)");
    bench_fig_init(&res->ready_f, "prepare_abort_ready_per_s", "prepare+abort: READY plans",
                   "plans/s",
                   "kvpool_prepare returning READY (with hits) then kvpool_abort, per second");
    bench_fig_init(
        &res->exhausted_f, "prepare_abort_exhausted_per_s", "prepare+abort: CAPACITY_EXHAUSTED",
        "plans/s",
        "kvpool_prepare failing with CAPACITY_EXHAUSTED (reserved blocks) then kvpool_abort");
    uint32_t usable = kvpool_num_usable_blocks(pool);
    int rc = kvpool_reset_prefix_cache(pool);
    if (rc)
        die_rc("kvpool_reset_prefix_cache", rc);
    uint64_t fseed = bench_splitmix64(seed ^ 0xfa3117);
    struct bench_rng r = {bench_splitmix64(seed ^ 0x100c0b)};

    /* Families: root prefixes of 1..max blocks (about 60% of the pool in total). Odd roots stay
     * referenced; even roots are freed, so their blocks are cached but evictable. */
    uint32_t maxp = (uint32_t)(1.2 * usable / NUM_FAMILIES);
    if (maxp < 2)
        maxp = 2;
    res->families = NUM_FAMILIES;
    res->max_prefix_blocks = maxp;
    uint32_t *root_len = bench_xcalloc(PROG, NUM_FAMILIES, sizeof *root_len);
    struct kvpool_seq *roots = bench_xcalloc(PROG, NUM_FAMILIES, sizeof *roots);
    struct admit_stats st = {0};
    for (uint32_t f = 0; f < NUM_FAMILIES; f++) {
        root_len[f] = bench_rng_range(&r, 1, maxp);
        seq_init_or_die(pool, &roots[f], 1000000000u + f);
        append_family(pool, &roots[f], fseed, f, (uint64_t)root_len[f] * BLOCK_SIZE);
        admit(pool, &roots[f], &st);
        res->cached_blocks += root_len[f];
    }
    for (uint32_t f = 0; f < NUM_FAMILIES; f += 2)
        kvpool_free(pool, &roots[f]);

    /* Queries: a family's first p blocks (1 <= p <= its root length) then a private tail of
     * 1..64 tokens, so a lookup finds exactly p hits and then one miss. */
    uint32_t nq = w->max_queries;
    uint64_t per_query = (maxp + 1) / 4 + 2; /* mean prefix ~ (maxp+1)/4, plus the tail */
    if ((uint64_t)nq * per_query > w->query_blocks)
        nq = (uint32_t)(w->query_blocks / per_query);
    if (nq < 100)
        nq = 100;
    res->queries = nq;
    struct kvpool_seq *qs = bench_xcalloc(PROG, nq, sizeof *qs);
    uint32_t *want = bench_xcalloc(PROG, nq, sizeof *want);
    for (uint32_t q = 0; q < nq; q++) {
        uint32_t f = bench_rng_range(&r, 0, NUM_FAMILIES - 1);
        want[q] = bench_rng_range(&r, 1, root_len[f]);
        seq_init_or_die(pool, &qs[q], 2000000000u + q);
        append_family(pool, &qs[q], fseed, f, (uint64_t)want[q] * BLOCK_SIZE);
        append_random(pool, &qs[q], &r, bench_rng_range(&r, 1, 4 * BLOCK_SIZE));
    }
    if (events)
        kvpool_events_drain(pool, NULL, NULL);

    /* Verification pass (untimed): every query hits exactly its prefix. Keep the hits for 3. */
    struct kvpool_hits *hits = bench_xcalloc(PROG, nq, sizeof *hits);
    res->ok = true;
    for (uint32_t q = 0; q < nq; q++) {
        kvpool_lookup(pool, &qs[q], &hits[q], NULL, 0);
        res->hit_blocks_per_pass += hits[q].num_blocks;
        res->evictable_per_pass += hits[q].num_evictable;
        if (hits[q].num_blocks != want[q]) {
            fprintf(stderr,
                    "bench_kvpool: %u blocks: query %" PRIu32 " found %" PRIu32
                    " hit blocks, expected %" PRIu32 "\n",
                    usable + 1, q, hits[q].num_blocks, want[q]);
            res->ok = false;
        }
    }

    /* 2. lookup only. */
    uint64_t passes = (w->lookup_hit_blocks + res->hit_blocks_per_pass - 1) /
                      (res->hit_blocks_per_pass ? res->hit_blocks_per_pass : 1);
    if (passes == 0)
        passes = 1;
    for (int rep = 0; rep < REPS && res->ok; rep++) {
        uint64_t sum = 0;
        uint64_t t0 = bench_now_ns();
        for (uint64_t p = 0; p < passes; p++) {
            for (uint32_t q = 0; q < nq; q++) {
                struct kvpool_hits h;
                kvpool_lookup(pool, &qs[q], &h, NULL, 0);
                sum += h.num_blocks;
            }
        }
        uint64_t ns = bench_now_ns() - t0;
        if (sum != passes * res->hit_blocks_per_pass) {
            fprintf(stderr, "bench_kvpool: lookup results changed between passes\n");
            res->ok = false;
        }
        bench_fig_record(&res->lookup_f, rep, sum, ns);
        bench_fig_record(&res->lookups_f, rep, passes * nq, ns);
    }

    /* 3. prepare+abort: a READY plan (hits + tail), then a plan refused for capacity. */
    uint64_t gen = kvpool_generation(pool);
    for (int variant = 0; variant < 2 && res->ok; variant++) {
        struct bench_figure *f = variant == 0 ? &res->ready_f : &res->exhausted_f;
        enum kvpool_outcome expect = variant == 0 ? KVPOOL_READY : KVPOOL_CAPACITY_EXHAUSTED;
        for (int rep = 0; rep < REPS; rep++) {
            uint64_t matched = 0;
            uint32_t q = 0;
            uint64_t t0 = bench_now_ns();
            for (uint64_t i = 0; i < w->plans; i++) {
                struct kvpool_alloc_args args = {
                    .num_new_tokens = qs[q].num_tokens - hits[q].num_tokens,
                    .hits = &hits[q],
                    .is_admission = true,
                    .reserved_blocks = variant == 0 ? 0 : usable,
                };
                struct kvpool_plan plan;
                matched += kvpool_prepare(pool, &qs[q], &args, &plan) == (int)expect;
                kvpool_abort(&plan);
                if (++q == nq)
                    q = 0;
            }
            uint64_t ns = bench_now_ns() - t0;
            bench_fig_record(f, rep, w->plans, ns);
            if (matched != w->plans) {
                fprintf(stderr,
                        "bench_kvpool: %u blocks: %" PRIu64 " of %" PRIu64 " plans were not %s\n",
                        usable + 1, w->plans - matched, w->plans, kvpool_outcome_name(expect));
                res->ok = false;
            }
        }
    }
    if (kvpool_generation(pool) != gen) {
        fprintf(stderr, "bench_kvpool: prepare/abort changed the pool\n");
        res->ok = false;
    }
    if (!check_pool(pool, "after lookup and prepare+abort"))
        res->ok = false;

    for (uint32_t f = 1; f < NUM_FAMILIES; f += 2)
        kvpool_free(pool, &roots[f]);
    for (uint32_t q = 0; q < nq; q++)
        seq_fini_or_die(pool, &qs[q]);
    for (uint32_t f = 0; f < NUM_FAMILIES; f++)
        seq_fini_or_die(pool, &roots[f]);
    if (!check_pool(pool, "after freeing everything"))
        res->ok = false;
    if (events)
        kvpool_events_drain(pool, NULL, NULL);
    free(hits);
    free(want);
    free(qs);
    free(roots);
    free(root_len);
}

/* ---- hashing ----------------------------------------------------------------------------------
 */

struct hash_result {
    struct bench_figure tokens_f, blocks_f;
};

/* kvpool_seq_append_tokens over chunks of 1..1024 tokens; the sequence restarts every 16k
 * tokens (kvpool_seq_fini + kvpool_seq_init are part of the timed work). */
static void bench_hash(uint64_t seed, uint64_t target_tokens, struct hash_result *res)
{
    bench_fig_init(&res->tokens_f, "tokens_per_s", "hash: append_tokens", "tokens/s",
                   "tokens appended (and hashed per full block) per second by "
                   "kvpool_seq_append_tokens, chunks of 1..1024 tokens");
    bench_fig_init(&res->blocks_f, "blocks_per_s", "hash: full blocks hashed", "blocks/s",
                   "16-token blocks hashed (XXH3-64, chained) per second");
    struct kvpool_config cfg;
    kvpool_config_default(&cfg);
    cfg.num_blocks = 2;
    struct kvpool *pool;
    int rc = kvpool_create(&cfg, &pool);
    if (rc)
        die_rc("kvpool_create", rc);
    enum { NTOK = 1 << 20, NCHUNK = 4096 };
    struct bench_rng r = {bench_splitmix64(seed ^ 0x4a54)};
    kvpool_token *tokens = bench_xcalloc(PROG, NTOK, sizeof *tokens);
    uint32_t *chunks = bench_xcalloc(PROG, NCHUNK, sizeof *chunks);
    for (size_t i = 0; i < NTOK; i++)
        tokens[i] = rng_token(&r);
    for (size_t i = 0; i < NCHUNK; i++)
        chunks[i] = bench_rng_range(&r, 1, 1024);
    for (int rep = 0; rep < REPS; rep++) {
        struct kvpool_seq seq;
        uint64_t appended = 0, blocks = 0;
        size_t off = 0, c = 0;
        uint64_t t0 = bench_now_ns();
        seq_init_or_die(pool, &seq, 1);
        while (appended < target_tokens) {
            size_t n = chunks[c];
            c = c + 1 == NCHUNK ? 0 : c + 1;
            if (off + n > NTOK)
                off = 0;
            rc = kvpool_seq_append_tokens(pool, &seq, tokens + off, n);
            if (rc)
                die_rc("kvpool_seq_append_tokens", rc);
            off += n;
            appended += n;
            if (seq.num_tokens >= HASH_RESET_TOKS) {
                blocks += seq.num_hashes;
                seq_fini_or_die(pool, &seq);
                seq_init_or_die(pool, &seq, 1);
            }
        }
        blocks += seq.num_hashes;
        seq_fini_or_die(pool, &seq);
        uint64_t ns = bench_now_ns() - t0;
        bench_fig_record(&res->tokens_f, rep, appended, ns);
        bench_fig_record(&res->blocks_f, rep, blocks, ns);
    }
    free(chunks);
    free(tokens);
    kvpool_destroy(pool);
}

/* ---- memory and machine --------------------------------------------------------------------- */

/* jemalloc's stats.allocated / stats.resident in bytes; false without jemalloc. */
static bool jemalloc_stats(uint64_t *allocated, uint64_t *resident)
{
#ifdef KVSIM_HAVE_JEMALLOC
    uint64_t epoch = 1;
    size_t sz = sizeof epoch;
    if (mallctl("epoch", &epoch, &sz, &epoch, sz) != 0) /* refresh the cached statistics */
        return false;
    size_t a = 0, r = 0;
    sz = sizeof a;
    if (mallctl("stats.allocated", &a, &sz, NULL, 0) != 0)
        return false;
    sz = sizeof r;
    if (mallctl("stats.resident", &r, &sz, NULL, 0) != 0)
        return false;
    *allocated = a;
    *resident = r;
    return true;
#else
    (void)allocated;
    (void)resident;
    return false;
#endif
}

static json_t *memory_json(void)
{
    json_t *m = json_pack("{s:{s:I, s:s}}", "peak_rss", "value", (json_int_t)bench_peak_rss_kib(),
                          "unit", "KiB");
    uint64_t a, r;
    if (jemalloc_stats(&a, &r)) {
        json_object_set_new(m, "jemalloc_allocated",
                            json_pack("{s:I, s:s}", "value", (json_int_t)a, "unit", "bytes"));
        json_object_set_new(m, "jemalloc_resident",
                            json_pack("{s:I, s:s}", "value", (json_int_t)r, "unit", "bytes"));
    }
    return m;
}

static void print_memory(const char *when)
{
    uint64_t a, r;
    printf("memory %s: peak RSS %.1f MiB", when, (double)bench_peak_rss_kib() / 1024.0);
    if (jemalloc_stats(&a, &r))
        printf(", jemalloc stats.allocated %.1f MiB (resident %.1f MiB)",
               (double)a / (1024.0 * 1024.0), (double)r / (1024.0 * 1024.0));
    printf("\n");
}

/* ---- command line -----------------------------------------------------------------------------
 */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: bench_kvpool [--seed N] [--json FILE] [--quick] [--events] [--fresh] [--help]\n"
            "\n"
            "Throughput of the G1 KV block pool for pools of 10,000 and 1,000,000 blocks:\n"
            "allocate/commit/free, lookup, prepare+abort, and block hashing.\n"
            "\n"
            "options:\n"
            "  --seed N      seed of the deterministic workload (default 1)\n"
            "  --json FILE   write the results as JSON to FILE (default %s;\n"
            "                missing directories are created)\n"
            "  --quick       small op counts (a smoke test: a few seconds at most)\n"
            "  --events      enable KV events (drained after every admission)\n"
            "  --fresh       skip aging the pools: the free queue starts in block-id order,\n"
            "                which flatters large pools (figures then drift between runs)\n"
            "  -h, --help    print this help, then exit\n",
            DEFAULT_JSON);
}

static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"seed", required_argument, NULL, 's'},
        {"json", required_argument, NULL, 'j'},
        {"quick", no_argument, NULL, 'q'},
        {"events", no_argument, NULL, 'e'},
        {"fresh", no_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    o->seed = 1;
    o->json_path = DEFAULT_JSON;
    o->quick = false;
    o->events = false;
    o->fresh = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (bench_opt_u64(PROG, "--seed", optarg, &o->seed))
                return 2;
            break;
        case 'j':
            if (bench_opt_path(PROG, "--json", optarg, &o->json_path))
                return 2;
            break;
        case 'q': o->quick = true; break;
        case 'e': o->events = true; break;
        case 'f': o->fresh = true; break;
        case 'h': usage(stdout); return 1;
        default: return bench_opt_bad(PROG);
        }
    }
    return bench_opt_no_operands(PROG, argc, argv);
}

/* ---- main -------------------------------------------------------------------------------------
 */

static json_t *config_json(const struct kvpool_config *cfg, const struct work *w,
                           const struct alloc_result *a, const struct lookup_result *l)
{
    return json_pack(
        "{s:I, s:I, s:b, s:b, s:f, s:I, s:I, s:I, s:I, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I}",
        "num_blocks", (json_int_t)cfg->num_blocks, "block_size", (json_int_t)cfg->block_size,
        "prefix_caching", cfg->enable_prefix_caching, "kv_events", cfg->enable_kv_events,
        "watermark", cfg->watermark, "alloc_blocks_per_rep", (json_int_t)w->alloc_blocks,
        "ring_sequences", (json_int_t)a->ring_seqs, "ring_blocks", (json_int_t)a->ring_blocks,
        "max_seq_blocks", (json_int_t)MAX_SEQ_BLOCKS, "fill_low", 0.5, "fill_high", 0.9, "families",
        (json_int_t)l->families, "max_prefix_blocks", (json_int_t)l->max_prefix_blocks,
        "cached_prefix_blocks", (json_int_t)l->cached_blocks, "queries", (json_int_t)l->queries,
        "hit_blocks_per_pass", (json_int_t)l->hit_blocks_per_pass, "plans_per_rep",
        (json_int_t)w->plans);
}

int main(int argc, char **argv)
{
    struct options opt;
    int prc = parse_options(argc, argv, &opt);
    if (prc == 1)
        return 0;
    if (prc)
        return prc;

    char date[64];
    bench_utc_date(date, sizeof date);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    printf("bench_kvpool: %s, allocator %s, %ld CPUs, seed %" PRIu64 ", KV events %s, %s run\n",
           kvsim_version(), kvsim_allocator(), nproc, opt.seed, opt.events ? "on" : "off",
           opt.quick ? "quick" : "full");
    printf("block size %u, prefix caching on, pools %s; fixed work per repetition, best of %d\n\n",
           BLOCK_SIZE, opt.fresh ? "fresh (free queue in id order)" : "aged (free queue shuffled)",
           REPS);

    bool all_ok = true;
    json_t *root = bench_json_root(PROG, date);
    json_object_set_new(root, "options",
                        json_pack("{s:I, s:b, s:b, s:b, s:i}", "seed", (json_int_t)opt.seed,
                                  "quick", opt.quick, "events", opt.events, "aged_pools",
                                  !opt.fresh, "repetitions", REPS));

    printf("%-9s %-40s %16s %12s\n", "pool", "measurement", "throughput", "per op");
    printf("%.*s\n", 80,
           "-----------------------------------------------------------------------"
           "---------");
    struct hash_result hr;
    uint64_t htok = hash_work_tokens(opt.quick);
    bench_hash(opt.seed, htok, &hr);
    fig_print(&hr.tokens_f, "-");
    fig_print(&hr.blocks_f, "-");
    json_object_set_new(root, "hashing",
                        json_pack("{s:o, s:o, s:I, s:I}", hr.tokens_f.key,
                                  bench_fig_json(&hr.tokens_f), hr.blocks_f.key,
                                  bench_fig_json(&hr.blocks_f), "block_size",
                                  (json_int_t)BLOCK_SIZE, "tokens_per_rep", (json_int_t)htok));

    json_t *pools = json_array();
    for (size_t i = 0; i < NUM_POOLS; i++) {
        struct kvpool_config cfg;
        kvpool_config_default(&cfg);
        cfg.num_blocks = pool_sizes[i];
        cfg.block_size = BLOCK_SIZE;
        cfg.enable_prefix_caching = true;
        cfg.enable_kv_events = opt.events;
        struct kvpool *pool;
        int rc = kvpool_create(&cfg, &pool);
        if (rc)
            die_rc("kvpool_create", rc);
        struct work w = work_for(cfg.num_blocks, opt.quick);
        char name[16];
        snprintf(name, sizeof name, "%u", cfg.num_blocks);

        struct alloc_result *ar = bench_xcalloc(PROG, 1, sizeof *ar);
        struct lookup_result *lr = bench_xcalloc(PROG, 1, sizeof *lr);
        bench_alloc(pool, &w, opt.seed, opt.events, opt.fresh, ar);
        if (ar->ok)
            bench_lookup(pool, &w, opt.seed, opt.events, lr);
        bool ok = ar->ok && lr->ok;
        all_ok = all_ok && ok;

        const struct bench_figure *figs[] = {&ar->admit_f,    &ar->admits_f,   &ar->free_f,
                                             &ar->combined_f, &lr->lookup_f,   &lr->lookups_f,
                                             &lr->ready_f,    &lr->exhausted_f};
        for (size_t k = 0; k < sizeof figs / sizeof figs[0]; k++)
            fig_print(figs[k], name);
        uint64_t adm = 0, ev = 0, hits = 0;
        for (int r = 0; r < REPS; r++) {
            adm += ar->admissions[r];
            ev += ar->evictions[r];
            hits += ar->hits[r];
        }
        double alloc_total = 0;
        for (int r = 0; r < REPS; r++)
            alloc_total += (double)ar->admit_f.work[r];
        double evict_frac = alloc_total > 0 ? (double)ev / alloc_total : 0.0;
        printf("%-9s   churn: %" PRIu64 " seqs (%" PRIu64 " blocks) prebuilt, %.1f blocks/seq; "
               "%.1f%% of allocations evicted a cached block; %" PRIu64 " hit blocks\n",
               name, ar->ring_seqs, ar->ring_blocks, adm ? alloc_total / (double)adm : 0.0,
               100.0 * evict_frac, hits);
        printf("%-9s   lookup: %u families, prefixes 1..%u blocks (%" PRIu64
               " cached), %u queries, "
               "%.1f hit blocks/query (%.0f%% evictable)\n",
               name, lr->families, lr->max_prefix_blocks, lr->cached_blocks, lr->queries,
               lr->queries ? (double)lr->hit_blocks_per_pass / lr->queries : 0.0,
               lr->hit_blocks_per_pass
                   ? 100.0 * (double)lr->evictable_per_pass / (double)lr->hit_blocks_per_pass
                   : 0.0);
        printf("%-9s   kvpool_check: %s\n", name, ok ? "ok" : "FAILED");

        json_t *pj = json_object();
        json_object_set_new(pj, "config", config_json(&cfg, &w, ar, lr));
        json_t *figj = json_object();
        for (size_t k = 0; k < sizeof figs / sizeof figs[0]; k++)
            json_object_set_new(figj, figs[k]->key, bench_fig_json(figs[k]));
        json_object_set_new(pj, "figures", figj);
        json_object_set_new(
            pj, "churn",
            json_pack("{s:f, s:I, s:I, s:I, s:I, s:I}", "evicting_allocation_fraction", evict_frac,
                      "evictions_total", (json_int_t)ev, "hit_blocks_total", (json_int_t)hits,
                      "kv_events_total", (json_int_t)ar->events.events, "kv_events_stored_hashes",
                      (json_int_t)ar->events.stored_hashes, "kv_events_removed_hashes",
                      (json_int_t)ar->events.removed_hashes));
        json_object_set_new(pj, "check", json_string(ok ? "ok" : "failed"));
        json_object_set_new(pj, "memory", memory_json());
        json_array_append_new(pools, pj);
        print_memory(name);
        printf("\n");
        free(ar);
        free(lr);
        kvpool_destroy(pool);
    }
    json_object_set_new(root, "pools", pools);
    json_object_set_new(root, "memory", memory_json());
    json_object_set_new(root, "ok", json_boolean(all_ok));
    print_memory("at exit");

    if (!bench_write_results(PROG, root, opt.json_path, false))
        all_ok = false;
    json_decref(root);
    if (!all_ok)
        fprintf(stderr, "bench_kvpool: FAILED\n");
    return all_ok ? 0 : 1;
}
