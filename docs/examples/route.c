/*
 * route.c - a KV-aware router in front of kvsim engines that you step yourself.
 *
 * It creates NUM_ENGINES engines from one configuration (KV events on), makes up a small
 * deterministic workload (requests in prefix groups: the members of a group share their first
 * blocks, like the turns of one conversation or the users of one system prompt) and routes each
 * arrival to the engine whose prefix cache holds the longest part of its prompt. The router
 * knows the caches only from the engines' KV events (kvsim_engine_kv_events), as a router in
 * front of vLLM does, and matches them against the request's block hashes
 * (kvsim_engine_prompt_hashes); ties go to the least loaded engine (kvsim_engine_load). All
 * engines advance in lockstep to each arrival (kvsim_engine_run_until), then run to completion.
 * It prints one line per request (its engine, cached prompt tokens, TTFT) and a summary.
 *
 *   cc route.c $(pkg-config --cflags --libs kvsim) -o route && ./route [kv-aware|round-robin]
 *
 * or the CMake project beside it (find_package(kvsim)). route.cpp is the same in C++.
 */
#include <kvsim/kvsim.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    NUM_ENGINES = 4,
    NUM_REQUESTS = 200,
    NUM_GROUPS = 20,
    HASH_BLOCK = 16, /* tokens per hash id, and the engines' block size */
    MAX_BLOCKS = 64, /* hash ids of the longest prompt */
};

/* ---- the workload -----------------------------------------------------------------------------
 */

struct request {
    kvsim_request_t req;
    uint64_t hash_ids[MAX_BLOCKS];
    unsigned group;
};

static uint64_t rng_next(uint64_t *s) /* xorshift64* */
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}
static uint32_t rng_below(uint64_t *s, uint32_t n) { return (uint32_t)(rng_next(s) >> 33) % n; }

/* Request i: a group prefix of 8-24 blocks shared with its group, then 1-8 blocks of its own, the
 * last one partial; 16-79 output tokens, a third of them stopping earlier; arrivals 5-24 ms
 * apart. Hash ids are small numbers, as in Mooncake traces: block k of group g is
 * g * MAX_BLOCKS + k, block k of request i's own part (NUM_GROUPS + i) * MAX_BLOCKS + k. */
static void make_workload(struct request *w)
{
    uint64_t s = 0x6b7673696dULL;
    uint32_t prefix_blocks[NUM_GROUPS];
    for (unsigned g = 0; g < NUM_GROUPS; g++)
        prefix_blocks[g] = 8 + rng_below(&s, 17);
    int64_t t = 0;
    for (unsigned i = 0; i < NUM_REQUESTS; i++) {
        struct request *r = &w[i];
        unsigned g = rng_below(&s, NUM_GROUPS);
        uint32_t own = 1 + rng_below(&s, 8), n = 0;
        for (uint32_t k = 0; k < prefix_blocks[g]; k++)
            r->hash_ids[n++] = (uint64_t)g * MAX_BLOCKS + k;
        for (uint32_t k = 0; k < own; k++)
            r->hash_ids[n++] = (uint64_t)(NUM_GROUPS + i) * MAX_BLOCKS + k;
        t += (5 + rng_below(&s, 20)) * 1000000LL;
        r->group = g;
        r->req = (kvsim_request_t)KVSIM_REQUEST_INIT;
        r->req.id = i;
        r->req.arrival_ns = t;
        r->req.hash_ids = r->hash_ids;
        r->req.num_hash_ids = n;
        r->req.hash_block_size = HASH_BLOCK;
        r->req.input_len = n * HASH_BLOCK - rng_below(&s, HASH_BLOCK);
        r->req.max_tokens = 16 + rng_below(&s, 64);
        if (rng_below(&s, 3) == 0)
            r->req.stop_after = 1 + rng_below(&s, r->req.max_tokens);
    }
}

/* ---- what the router knows of an engine's prefix cache -----------------------------------------
 */

/* Block hash -> how many cached blocks carry it (a hash can be cached twice, and one copy
 * evicted). Open addressing; entries are never removed, a count of 0 means "not cached". */
struct block_set {
    uint64_t *hash;
    uint32_t *count;
    size_t cap, used;
};

static size_t slot_of(const struct block_set *set, uint64_t h)
{
    size_t i = (size_t)((h * 0x9E3779B97F4A7C15ULL) >> 20) & (set->cap - 1);
    while (set->count[i] != UINT32_MAX && set->hash[i] != h)
        i = (i + 1) & (set->cap - 1);
    return i;
}

static int set_grow(struct block_set *set)
{
    struct block_set old = *set;
    set->cap = old.cap ? old.cap * 2 : 1024;
    set->hash = malloc(set->cap * sizeof *set->hash);
    set->count = malloc(set->cap * sizeof *set->count);
    if (!set->hash || !set->count) {
        free(set->hash);
        free(set->count);
        *set = old;
        return -1;
    }
    memset(set->count, 0xff, set->cap * sizeof *set->count); /* UINT32_MAX: empty slot */
    for (size_t i = 0; i < old.cap; i++) {
        if (old.count[i] == UINT32_MAX)
            continue;
        size_t j = slot_of(set, old.hash[i]);
        set->hash[j] = old.hash[i];
        set->count[j] = old.count[i];
    }
    free(old.hash);
    free(old.count);
    return 0;
}

static uint32_t set_count(const struct block_set *set, uint64_t h)
{
    if (set->cap == 0)
        return 0;
    uint32_t c = set->count[slot_of(set, h)];
    return c == UINT32_MAX ? 0 : c;
}

/* Adds delta (+1 or -1) to h's count. Returns 0, 1 (a removal of a hash not cached) or -1. */
static int set_add(struct block_set *set, uint64_t h, int delta)
{
    if (set->cap == 0 || (set->used + 1) * 10 > set->cap * 7) {
        if (set_grow(set) != 0)
            return -1;
    }
    size_t i = slot_of(set, h);
    if (set->count[i] == UINT32_MAX) {
        set->hash[i] = h;
        set->count[i] = 0;
        set->used++;
    }
    if (delta < 0 && set->count[i] == 0)
        return 1;
    set->count[i] = (uint32_t)((int64_t)set->count[i] + delta);
    return 0;
}

static void set_clear(struct block_set *set)
{
    for (size_t i = 0; i < set->cap; i++)
        if (set->count[i] != UINT32_MAX)
            set->count[i] = 0;
}

/* ---- the engines --------------------------------------------------------------------------------
 */

struct engine {
    kvsim_engine_t *e;
    struct block_set cached;
    int failed;                                   /* the KV event callback ran out of memory */
    uint64_t stored, removed, cleared, unmatched; /* KV events seen (blocks) */
    unsigned routed;
};

struct result {
    int engine;
    uint32_t expected_cached; /* prompt tokens the router expected to find cached */
    int64_t first_token_ns;   /* -1 until the KVSIM_EVENT_TOKEN with a == 0 */
    int64_t finish_ns;
    int32_t finish_reason;
    uint32_t output_tokens, cached_tokens, preemptions;
};

static void on_kv_event(void *ctx, const kvsim_kv_event_t *ev)
{
    struct engine *en = ctx;
    switch (ev->kind) {
    case KVSIM_KV_STORED:
    case KVSIM_KV_REMOVED:
        for (uint32_t i = 0; i < ev->num_hashes; i++) {
            int rc = set_add(&en->cached, ev->hashes[i], ev->kind == KVSIM_KV_STORED ? 1 : -1);
            if (rc < 0)
                en->failed = 1;
            else if (rc > 0)
                en->unmatched++;
        }
        if (ev->kind == KVSIM_KV_STORED)
            en->stored += ev->num_hashes;
        else
            en->removed += ev->num_hashes;
        break;
    case KVSIM_KV_CLEARED:
        set_clear(&en->cached);
        en->cleared++;
        break;
    }
}

static int fail(const struct engine *en, int idx, const char *what, long rc)
{
    fprintf(stderr, "route: engine %d: %s: %s (%s)\n", idx, what, kvsim_strerror((int)rc),
            kvsim_engine_errmsg(en->e));
    return -1;
}

/* Reads every waiting event of engine idx into results. */
static int read_events(struct engine *en, int idx, struct result *results)
{
    kvsim_event_t buf[256];
    size_t n;
    while ((n = kvsim_engine_events(en->e, buf, sizeof buf / sizeof buf[0])) > 0) {
        for (size_t i = 0; i < n; i++) {
            const kvsim_event_t *ev = &buf[i];
            if (ev->id >= NUM_REQUESTS || results[ev->id].engine != idx) {
                fprintf(stderr,
                        "route: engine %d: an event of request %" PRIu64
                        ", which it was not given\n",
                        idx, ev->id);
                return -1;
            }
            struct result *r = &results[ev->id];
            switch (ev->kind) {
            case KVSIM_EVENT_TOKEN:
                if (ev->a == 0 && r->first_token_ns < 0)
                    r->first_token_ns = ev->t_ns;
                break;
            case KVSIM_EVENT_PREEMPTED: r->preemptions++; break;
            case KVSIM_EVENT_FINISHED:
                r->finish_ns = ev->t_ns;
                r->finish_reason = (int32_t)ev->a;
                r->output_tokens = ev->b;
                break;
            default: break;
            }
        }
    }
    return 0;
}

/* Runs every engine to t, then reads its events and its KV events. */
static int advance_all(struct engine *engines, int64_t t, struct result *results)
{
    for (int i = 0; i < NUM_ENGINES; i++) {
        struct engine *en = &engines[i];
        int rc = kvsim_engine_run_until(en->e, t);
        if (rc < 0)
            return fail(en, i, "kvsim_engine_run_until", rc);
        if (read_events(en, i, results) != 0)
            return -1;
        long n = kvsim_engine_kv_events(en->e, on_kv_event, en);
        if (n < 0)
            return fail(en, i, "kvsim_engine_kv_events", n);
        if (en->failed) {
            fprintf(stderr, "route: out of memory\n");
            return -1;
        }
    }
    return 0;
}

/* The engine with the longest cached prefix of req, ties to the lowest KV usage, then the fewest
 * queued prompt tokens, then the fewest requests; round-robin if kv_aware is 0. Sets
 * *cached_blocks. Returns the engine's index or -1. */
static int pick_engine(struct engine *engines, const kvsim_request_t *req, int kv_aware,
                       uint32_t *cached_blocks)
{
    static unsigned next;
    uint64_t hashes[MAX_BLOCKS];
    /* The engines share a configuration, so any of them gives the same hashes. */
    long n = kvsim_engine_prompt_hashes(engines[0].e, req, hashes, MAX_BLOCKS);
    if (n < 0 || n > MAX_BLOCKS) {
        fprintf(stderr, "route: kvsim_engine_prompt_hashes of request %" PRIu64 ": %ld (%s)\n",
                req->id, n, kvsim_engine_errmsg(engines[0].e));
        return -1;
    }
    int best = -1;
    uint32_t best_blocks = 0;
    kvsim_load_t best_load = KVSIM_LOAD_INIT;
    for (int i = 0; i < NUM_ENGINES; i++) {
        uint32_t blocks = 0;
        while (blocks < (uint32_t)n && set_count(&engines[i].cached, hashes[blocks]) > 0)
            blocks++;
        kvsim_load_t load = KVSIM_LOAD_INIT;
        int rc = kvsim_engine_load(engines[i].e, &load);
        if (rc != 0)
            return fail(&engines[i], i, "kvsim_engine_load", rc);
        if (!kv_aware) {
            if ((unsigned)i == next % NUM_ENGINES) {
                best = i;
                best_blocks = blocks;
            }
            continue;
        }
        uint32_t requests = load.num_running + load.num_waiting + load.num_pending;
        uint32_t best_requests =
            best_load.num_running + best_load.num_waiting + best_load.num_pending;
        if (best < 0 || blocks > best_blocks ||
            (blocks == best_blocks &&
             (load.kv_usage < best_load.kv_usage ||
              (load.kv_usage == best_load.kv_usage &&
               (load.queued_prompt_tokens < best_load.queued_prompt_tokens ||
                (load.queued_prompt_tokens == best_load.queued_prompt_tokens &&
                 requests < best_requests)))))) {
            best = i;
            best_blocks = blocks;
            best_load = load;
        }
    }
    next++;
    *cached_blocks = best_blocks;
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int kv_aware = 1;
    if (argc > 2 ||
        (argc == 2 && strcmp(argv[1], "kv-aware") != 0 && strcmp(argv[1], "round-robin") != 0)) {
        fprintf(stderr, "usage: %s [kv-aware|round-robin]\n", argv[0]);
        return 2;
    }
    if (argc == 2 && strcmp(argv[1], "round-robin") == 0)
        kv_aware = 0;
    if ((kvsim_version_hex() >> 16) != KVSIM_VERSION_MAJOR) {
        fprintf(stderr, "route: built with kvsim %d.%d.%d, running %s\n", KVSIM_VERSION_MAJOR,
                KVSIM_VERSION_MINOR, KVSIM_VERSION_PATCH, kvsim_version());
        return 1;
    }

    int status = 1;
    kvsim_config_t *cfg = NULL;
    struct engine engines[NUM_ENGINES];
    memset(engines, 0, sizeof engines);
    struct request *work = calloc(NUM_REQUESTS, sizeof *work);
    struct result *results = calloc(NUM_REQUESTS, sizeof *results);
    double *ttft = calloc(NUM_REQUESTS, sizeof *ttft);
    if (!work || !results || !ttft || kvsim_config_new(&cfg) != 0) {
        fprintf(stderr, "route: out of memory\n");
        goto out;
    }

    /* One configuration for all engines: `kvsim replay`'s option names. */
    static const char *const options[][2] = {
        {"block-size", "16"},
        {"num-gpu-blocks", "600"},
        {"max-num-seqs", "16"},
        {"kv-events", "true"},
    };
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        int rc = kvsim_config_set(cfg, options[i][0], options[i][1]);
        if (rc != 0) {
            fprintf(stderr, "route: kvsim_config_set %s=%s: %s (%s)\n", options[i][0],
                    options[i][1], kvsim_strerror(rc), kvsim_config_error(cfg));
            goto out;
        }
    }
    for (int i = 0; i < NUM_ENGINES; i++) {
        int rc = kvsim_engine_new(cfg, &engines[i].e);
        if (rc != 0) {
            fprintf(stderr, "route: kvsim_engine_new: %s (%s)\n", kvsim_strerror(rc),
                    kvsim_config_error(cfg));
            goto out;
        }
    }
    kvsim_config_free(cfg); /* the engines keep their own copy */
    cfg = NULL;

    make_workload(work);
    for (int i = 0; i < NUM_REQUESTS; i++)
        results[i] = (struct result){
            .engine = -1, .first_token_ns = -1, .finish_ns = -1, .finish_reason = -1};

    /* Each arrival: bring every engine to its time, route it, add it. */
    for (int i = 0; i < NUM_REQUESTS; i++) {
        const kvsim_request_t *req = &work[i].req;
        if (advance_all(engines, req->arrival_ns, results) != 0)
            goto out;
        uint32_t blocks = 0;
        int k = pick_engine(engines, req, kv_aware, &blocks);
        if (k < 0)
            goto out;
        int rc = kvsim_engine_add(engines[k].e, req);
        if (rc != 0) {
            fail(&engines[k], k, "kvsim_engine_add", rc);
            goto out;
        }
        results[i].engine = k;
        results[i].expected_cached = blocks * HASH_BLOCK;
        engines[k].routed++;
    }

    /* Then in lockstep to the end: each round runs all engines to the earliest next event. */
    int64_t last = -1;
    for (;;) {
        int64_t t = INT64_MAX;
        for (int i = 0; i < NUM_ENGINES; i++) {
            int64_t next = kvsim_engine_next_time(engines[i].e);
            if (next < t)
                t = next;
        }
        if (t == INT64_MAX)
            break;
        if (t <= last) {
            fprintf(stderr,
                    "route: the engines' next event (%" PRId64 " ns) is not after %" PRId64 " ns\n",
                    t, last);
            goto out;
        }
        if (advance_all(engines, t, results) != 0)
            goto out;
        last = t;
    }

    /* One line per request; its record must agree with its events. */
    size_t n_ttft = 0, finished = 0;
    uint64_t prompt_tokens = 0, cached_tokens = 0, preemptions = 0;
    for (int i = 0; i < NUM_REQUESTS; i++) {
        struct result *r = &results[i];
        const struct engine *en = &engines[r->engine];
        kvsim_record_t rec = KVSIM_RECORD_INIT;
        int rc = kvsim_engine_record(en->e, (uint64_t)i, &rec);
        if (rc != 0) {
            fail(en, r->engine, "kvsim_engine_record", rc);
            goto out;
        }
        if (rec.first_token_ns != r->first_token_ns || rec.finish_ns != r->finish_ns ||
            rec.finish_reason != r->finish_reason || rec.output_tokens != r->output_tokens) {
            fprintf(stderr,
                    "route: request %d: its record (first token %" PRId64 ", finish %" PRId64
                    ", reason %" PRId32 ", %" PRIu32 " outputs) disagrees with its events (%" PRId64
                    ", %" PRId64 ", %" PRId32 ", %" PRIu32 ")\n",
                    i, rec.first_token_ns, rec.finish_ns, rec.finish_reason, rec.output_tokens,
                    r->first_token_ns, r->finish_ns, r->finish_reason, r->output_tokens);
            goto out;
        }
        r->cached_tokens = rec.cached_tokens;
        prompt_tokens += rec.input_len;
        cached_tokens += rec.cached_tokens;
        preemptions += r->preemptions;
        finished += r->finish_reason >= 0;
        char ttft_text[32] = "-";
        if (r->first_token_ns >= 0) {
            ttft[n_ttft] = (double)(r->first_token_ns - work[i].req.arrival_ns) / 1e6;
            snprintf(ttft_text, sizeof ttft_text, "%.2f ms", ttft[n_ttft]);
            n_ttft++;
        }
        printf("request %3d group %2u engine %d prompt %4" PRIu32 " cached %4" PRIu32
               " (routed for %4" PRIu32 ") ttft %10s outputs %3" PRIu32 " %s\n",
               i, work[i].group, r->engine, rec.input_len, rec.cached_tokens, r->expected_cached,
               ttft_text, r->output_tokens, kvsim_finish_reason_name(r->finish_reason));
    }

    double mean = 0;
    for (size_t i = 0; i < n_ttft; i++)
        mean += ttft[i] / (double)n_ttft;
    qsort(ttft, n_ttft, sizeof *ttft, cmp_double);
    double p50 = n_ttft ? ttft[(n_ttft - 1) / 2] : 0,
           p99 = n_ttft ? ttft[(n_ttft - 1) * 99 / 100] : 0;
    uint64_t stored = 0, removed = 0, unmatched = 0;
    for (int i = 0; i < NUM_ENGINES; i++) {
        stored += engines[i].stored;
        removed += engines[i].removed;
        unmatched += engines[i].unmatched;
    }
    char routed[16 * NUM_ENGINES] = "";
    for (int i = 0, len = 0; i < NUM_ENGINES; i++)
        len += snprintf(routed + len, sizeof routed - (size_t)len, "%s%u", i ? " " : "",
                        engines[i].routed);
    printf("summary: %s, %s routing, %d requests on %d engines (%s), %zu finished, "
           "%" PRIu64 "/%" PRIu64 " prompt tokens cached (%.1f %%), TTFT mean %.2f ms p50 %.2f ms "
           "p99 %.2f ms, %" PRIu64 " preemptions, KV events: %" PRIu64 " blocks stored, %" PRIu64
           " removed (%" PRIu64 " unknown)\n",
           kvsim_version(), kv_aware ? "kv-aware" : "round-robin", NUM_REQUESTS, NUM_ENGINES,
           routed, finished, cached_tokens, prompt_tokens,
           prompt_tokens ? 100.0 * (double)cached_tokens / (double)prompt_tokens : 0.0, mean, p50,
           p99, preemptions, stored, removed, unmatched);
    if (finished != NUM_REQUESTS) {
        fprintf(stderr, "route: %zu of %d requests did not finish\n", NUM_REQUESTS - finished,
                NUM_REQUESTS);
        goto out;
    }
    status = 0;

out:
    if (cfg)
        kvsim_config_free(cfg);
    for (int i = 0; i < NUM_ENGINES; i++) {
        if (engines[i].e)
            kvsim_engine_free(engines[i].e);
        free(engines[i].cached.hash);
        free(engines[i].cached.count);
    }
    free(work);
    free(results);
    free(ttft);
    return status;
}
