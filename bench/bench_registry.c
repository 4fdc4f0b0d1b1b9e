/*
 * bench_registry.c - presence checks per second of the shared block registry
 * (kvpool/registry.h) against a mutex-protected open-addressing hash table doing the same
 * checks, at 1 and 2 reader threads, with a concurrent writer.
 *
 * Both implementations hold the same workload: K = 2 x LIVE hash ids in tier G2, of which a
 * window of LIVE ids is live; the writer thread slides the window cyclically, one step at a
 * time (remove the oldest WB ids, register WB new ones at the step's virtual time, publish the
 * step as its watermark, reclaim every 16 steps below the readers' floor), then sleeps
 * WRITER_SLEEP_US (offline). So about half of the queried ids are present, the table churns
 * during the measurement, and removed entries pile up until reclaimed, as in a replay.
 *
 * Readers loop over a prebuilt array of query hashes (uniform over the K ids). Each round
 * acquire-loads the writer's watermark W and checks QB hashes at virtual time W:
 *   - presence: registry: one kvpool_registry_presence_rcu() call; baseline: one lock, QB
 *     lookups, one unlock;
 *   - contains: registry: QB kvpool_registry_contains_rcu() calls; baseline: QB lock/lookup/
 *     unlock;
 * then (registry) announces a quiescent state and publishes W as its floor. A figure is the
 * checks of all readers divided by the run's duration; each configuration runs once for a fixed
 * wall time (--quick: shorter), in a fresh table.
 *
 * Output: a table, the registry/baseline ratios, and JSON (--json FILE, default
 * bench/results/bench_registry.json; missing directories are created). Exit status 1 if a run
 * looks wrong (hit fraction far from one half, a failed call), 2 for usage errors.
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "bench_util.h"
#include "kvpool/kvpool.h"
#include "runtime/runtime.h"

#define PROG            "bench_registry"
#define DEFAULT_JSON    "bench/results/bench_registry.json"
#define QB              32    /* hashes per reader round */
#define WB              64    /* ids the writer removes and registers per step */
#define WRITER_SLEEP_US 200   /* writer pause between steps (offline) */
#define NQ              65536 /* prebuilt query hashes */
#define RECLAIM_EVERY   16    /* writer steps between reclaims */
#define MAX_READERS     2

struct options {
    uint64_t seed;
    const char *json_path;
    bool quick;
};

enum impl { IMPL_RCU, IMPL_MUTEX };
enum mode { MODE_PRESENCE, MODE_CONTAINS };
static const char *const impl_names[] = {"rcu_lfht", "mutex_open_addressing"};
static const char *const mode_names[] = {"presence", "contains"};

/* ---- utilities --------------------------------------------------------------------------------
 */

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ---- the baseline: one pthread mutex around an open-addressing table --------------------------
 */

enum { SLOT_EMPTY = 0, SLOT_FULL, SLOT_TOMB };

struct oa_slot {
    uint64_t hash;
    int64_t registered_at, removed_at;
    uint8_t tier, state;
};

struct oa_removal {
    uint64_t hash;
    int64_t removed_at;
    uint8_t tier;
};

/* Same semantics as the registry for one writer: entries (hash, tier, [registered_at,
 * removed_at)), duplicates as separate slots (linear probing), logical removal, a removal FIFO
 * reclaimed below a horizon (tombstones), rehash at half load. */
struct oa_table {
    pthread_mutex_t lock;
    struct oa_slot *slots;
    size_t mask, used /* full + tombstones */, live;
    struct oa_removal *fifo; /* ring */
    size_t fifo_cap, fifo_head, fifo_len;
};

static size_t oa_index(uint64_t hash, uint8_t tier)
{
    return (size_t)bench_splitmix64(hash ^ ((uint64_t)tier + 1) * UINT64_C(0x9e3779b97f4a7c15));
}

static void oa_init(struct oa_table *t, size_t expected)
{
    size_t cap = 16;
    while (cap < 4 * expected)
        cap <<= 1;
    pthread_mutex_init(&t->lock, NULL);
    t->slots = bench_xcalloc(PROG, cap, sizeof *t->slots);
    t->mask = cap - 1;
    t->used = t->live = 0;
    t->fifo_cap = 1024;
    t->fifo = bench_xcalloc(PROG, t->fifo_cap, sizeof *t->fifo);
    t->fifo_head = t->fifo_len = 0;
}

static void oa_fini(struct oa_table *t)
{
    pthread_mutex_destroy(&t->lock);
    free(t->slots);
    free(t->fifo);
}

static void oa_put(struct oa_slot *slots, size_t mask, const struct oa_slot *e)
{
    size_t i = oa_index(e->hash, e->tier) & mask;
    while (slots[i].state == SLOT_FULL)
        i = (i + 1) & mask;
    slots[i] = *e;
    slots[i].state = SLOT_FULL;
}

/* Rehash (dropping tombstones) into a table sized for the live entries. Lock held. */
static void oa_rehash(struct oa_table *t)
{
    size_t cap = 16;
    while (cap < 4 * t->live)
        cap <<= 1;
    struct oa_slot *slots = bench_xcalloc(PROG, cap, sizeof *slots);
    for (size_t i = 0; i <= t->mask; i++)
        if (t->slots[i].state == SLOT_FULL)
            oa_put(slots, cap - 1, &t->slots[i]);
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    t->used = t->live;
}

/* The slot of a live entry (hash, tier), or NULL. Lock held. */
static struct oa_slot *oa_find_live(struct oa_table *t, uint64_t hash, uint8_t tier)
{
    for (size_t i = oa_index(hash, tier) & t->mask; t->slots[i].state != SLOT_EMPTY;
         i = (i + 1) & t->mask) {
        struct oa_slot *s = &t->slots[i];
        if (s->state == SLOT_FULL && s->hash == hash && s->tier == tier &&
            s->removed_at == INT64_MAX)
            return s;
    }
    return NULL;
}

static bool oa_contains_locked(const struct oa_table *t, uint64_t hash, uint8_t tier, int64_t v)
{
    for (size_t i = oa_index(hash, tier) & t->mask; t->slots[i].state != SLOT_EMPTY;
         i = (i + 1) & t->mask) {
        const struct oa_slot *s = &t->slots[i];
        if (s->state == SLOT_FULL && s->hash == hash && s->tier == tier && s->registered_at <= v &&
            v < s->removed_at)
            return true;
    }
    return false;
}

static void oa_register_locked(struct oa_table *t, uint64_t hash, uint8_t tier, int64_t v)
{
    if (oa_find_live(t, hash, tier))
        return;
    if (2 * (t->used + 1) > t->mask + 1)
        oa_rehash(t);
    size_t i = oa_index(hash, tier) & t->mask;
    while (t->slots[i].state == SLOT_FULL)
        i = (i + 1) & t->mask;
    if (t->slots[i].state == SLOT_EMPTY)
        t->used++;
    t->slots[i] = (struct oa_slot){hash, v, INT64_MAX, tier, SLOT_FULL};
    t->live++;
}

static void oa_remove_locked(struct oa_table *t, uint64_t hash, uint8_t tier, int64_t v)
{
    struct oa_slot *s = oa_find_live(t, hash, tier);
    if (!s)
        return;
    s->removed_at = v;
    if (t->fifo_len == t->fifo_cap) {
        struct oa_removal *f = bench_xcalloc(PROG, 2 * t->fifo_cap, sizeof *f);
        for (size_t k = 0; k < t->fifo_len; k++)
            f[k] = t->fifo[(t->fifo_head + k) % t->fifo_cap];
        free(t->fifo);
        t->fifo = f;
        t->fifo_cap *= 2;
        t->fifo_head = 0;
    }
    t->fifo[(t->fifo_head + t->fifo_len++) % t->fifo_cap] = (struct oa_removal){hash, v, tier};
}

static void oa_reclaim_locked(struct oa_table *t, int64_t horizon)
{
    while (t->fifo_len > 0 && t->fifo[t->fifo_head].removed_at <= horizon) {
        struct oa_removal r = t->fifo[t->fifo_head];
        t->fifo_head = (t->fifo_head + 1) % t->fifo_cap;
        t->fifo_len--;
        for (size_t i = oa_index(r.hash, r.tier) & t->mask; t->slots[i].state != SLOT_EMPTY;
             i = (i + 1) & t->mask) {
            struct oa_slot *s = &t->slots[i];
            if (s->state == SLOT_FULL && s->hash == r.hash && s->tier == r.tier &&
                s->removed_at == r.removed_at) {
                s->state = SLOT_TOMB;
                t->live--;
                break;
            }
        }
    }
}

/* ---- one run ----------------------------------------------------------------------------------
 */

struct run {
    enum impl impl;
    enum mode mode;
    int readers;
    size_t live, ids; /* live window and id space (ids = 2 x live) */
    uint64_t seed;
    uint64_t duration_ns;
    /* the two implementations */
    struct kvpool_registry *reg;
    struct kvpool_registry_writer *w;
    struct oa_table oa;
    _Atomic int64_t oa_watermark;
    /* shared */
    const uint64_t *queries; /* NQ query hashes */
    pthread_barrier_t start;
    atomic_bool stop;
    struct {
        alignas(64) _Atomic int64_t v; /* a line per reader: written every round */
    } floors[MAX_READERS];
    atomic_int errors;
    /* results */
    uint64_t checks[MAX_READERS], hits[MAX_READERS], ns[MAX_READERS], cpu_ns[MAX_READERS];
    int64_t writer_steps;
};

static uint64_t id_hash(size_t id) { return bench_splitmix64(UINT64_C(0xb10c) ^ (uint64_t)id); }

static int64_t run_watermark(struct run *r)
{
    return r->impl == IMPL_RCU ? kvpool_registry_watermark_acquire(r->w)
                               : atomic_load_explicit(&r->oa_watermark, memory_order_acquire);
}

/* Step s (virtual time s + 1): remove the WB oldest live ids, register the WB next ones. */
static void writer_step(struct run *r, int64_t s)
{
    uint64_t rm[WB], add[WB];
    for (size_t k = 0; k < WB; k++) {
        size_t first = (size_t)s * WB + k;
        rm[k] = id_hash(first % r->ids);
        add[k] = id_hash((first + r->live) % r->ids);
    }
    int64_t v = s + 1;
    if (r->impl == IMPL_RCU) {
        if (kvpool_registry_remove_batch(r->w, KVPOOL_TIER_G2, rm, WB, v) != WB ||
            kvpool_registry_register_batch(r->w, KVPOOL_TIER_G2, add, WB, v) != WB ||
            kvpool_registry_publish(r->w, v) != 0)
            atomic_fetch_add(&r->errors, 1);
    } else {
        pthread_mutex_lock(&r->oa.lock);
        for (size_t k = 0; k < WB; k++)
            oa_remove_locked(&r->oa, rm[k], KVPOOL_TIER_G2, v);
        for (size_t k = 0; k < WB; k++)
            oa_register_locked(&r->oa, add[k], KVPOOL_TIER_G2, v);
        pthread_mutex_unlock(&r->oa.lock);
        atomic_store_explicit(&r->oa_watermark, v, memory_order_release);
    }
}

static int64_t min_floor(struct run *r)
{
    int64_t h = INT64_MAX;
    for (int i = 0; i < r->readers; i++) {
        int64_t f = atomic_load_explicit(&r->floors[i].v, memory_order_acquire);
        if (f < h)
            h = f;
    }
    return h;
}

static void *writer_main(void *arg)
{
    struct run *r = arg;
    if (r->impl == IMPL_RCU)
        kvpool_registry_thread_register();
    int64_t s = 0;
    while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        writer_step(r, s);
        if (++s % RECLAIM_EVERY == 0) {
            int64_t h = min_floor(r);
            if (r->impl == IMPL_RCU) {
                if (kvpool_registry_reclaim(r->reg, h) < 0)
                    atomic_fetch_add(&r->errors, 1);
            } else {
                pthread_mutex_lock(&r->oa.lock);
                oa_reclaim_locked(&r->oa, h);
                pthread_mutex_unlock(&r->oa.lock);
            }
        }
        if (r->impl == IMPL_RCU) {
            kvpool_registry_thread_offline();
            sleep_us(WRITER_SLEEP_US);
            kvpool_registry_thread_online();
        } else {
            sleep_us(WRITER_SLEEP_US);
        }
    }
    r->writer_steps = s;
    if (r->impl == IMPL_RCU)
        kvpool_registry_thread_unregister();
    return NULL;
}

struct reader_arg {
    struct run *r;
    int id;
};

static void *reader_main(void *arg)
{
    struct reader_arg *ra = arg;
    struct run *r = ra->r;
    const bool rcu = r->impl == IMPL_RCU;
    size_t pos = (size_t)(bench_splitmix64(r->seed + (uint64_t)ra->id) % NQ) & ~(size_t)(QB - 1);
    uint64_t checks = 0, hits = 0;
    bool present[QB];
    if (rcu) {
        kvpool_registry_thread_register();
        kvpool_registry_thread_offline(); /* the barrier blocks */
    }
    pthread_barrier_wait(&r->start);
    if (rcu)
        kvpool_registry_thread_online();
    uint64_t t0 = bench_now_ns(), c0 = thread_cpu_ns();
    while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        const uint64_t *q = r->queries + pos;
        pos = (pos + QB) % NQ;
        int64_t v = run_watermark(r);
        if (rcu) {
            if (r->mode == MODE_PRESENCE) {
                int64_t n = kvpool_registry_presence_rcu(r->reg, KVPOOL_TIER_G2, q, QB, v, present);
                if (n < 0)
                    atomic_fetch_add(&r->errors, 1);
                else
                    hits += (uint64_t)n;
            } else {
                for (size_t k = 0; k < QB; k++)
                    hits += kvpool_registry_contains_rcu(r->reg, KVPOOL_TIER_G2, q[k], v);
            }
            kvpool_registry_thread_quiescent();
        } else if (r->mode == MODE_PRESENCE) {
            pthread_mutex_lock(&r->oa.lock);
            for (size_t k = 0; k < QB; k++) {
                present[k] = oa_contains_locked(&r->oa, q[k], KVPOOL_TIER_G2, v);
                hits += present[k];
            }
            pthread_mutex_unlock(&r->oa.lock);
        } else {
            for (size_t k = 0; k < QB; k++) {
                pthread_mutex_lock(&r->oa.lock);
                hits += oa_contains_locked(&r->oa, q[k], KVPOOL_TIER_G2, v);
                pthread_mutex_unlock(&r->oa.lock);
            }
        }
        checks += QB;
        atomic_store_explicit(&r->floors[ra->id].v, v, memory_order_release);
    }
    r->ns[ra->id] = bench_now_ns() - t0;
    r->cpu_ns[ra->id] = thread_cpu_ns() - c0;
    r->checks[ra->id] = checks;
    r->hits[ra->id] = hits;
    if (rcu)
        kvpool_registry_thread_unregister();
    return NULL;
}

/* Fills the table with the initial live window (ids [0, live), all at virtual time 0... i.e.
 * step -1: registered at vtime 0, before the writer's first step at vtime 1). */
static void prefill(struct run *r)
{
    enum { CHUNK = 4096 };
    if (r->impl == IMPL_RCU) {
        kvpool_registry_thread_register();
        for (size_t i = 0; i < r->live; i += CHUNK) {
            uint64_t hs[CHUNK];
            size_t n = CHUNK;
            if (r->live - i < n)
                n = r->live - i;
            for (size_t k = 0; k < n; k++)
                hs[k] = id_hash(i + k);
            if (kvpool_registry_register_batch(r->w, KVPOOL_TIER_G2, hs, n, 0) != (int64_t)n)
                atomic_fetch_add(&r->errors, 1);
            kvpool_registry_thread_quiescent();
        }
        kvpool_registry_publish(r->w, 0);
        kvpool_registry_thread_offline(); /* the main thread now only waits */
    } else {
        pthread_mutex_lock(&r->oa.lock);
        for (size_t i = 0; i < r->live; i++)
            oa_register_locked(&r->oa, id_hash(i), KVPOOL_TIER_G2, 0);
        pthread_mutex_unlock(&r->oa.lock);
        atomic_store(&r->oa_watermark, 0);
    }
}

static void run_one(struct run *r)
{
    atomic_init(&r->stop, false);
    atomic_init(&r->errors, 0);
    for (int i = 0; i < MAX_READERS; i++)
        atomic_init(&r->floors[i].v, 0);
    if (r->impl == IMPL_RCU) {
        int rc = kvpool_registry_create(1, r->live * 2, &r->reg);
        if (rc == 0)
            rc = kvpool_registry_writer_create(r->reg, -1, &r->w);
        if (rc != 0) {
            fprintf(stderr, "bench_registry: creating the registry: %s\n", strerror(-rc));
            exit(1);
        }
    } else {
        oa_init(&r->oa, r->live * 2);
        atomic_init(&r->oa_watermark, -1);
    }
    prefill(r);

    pthread_barrier_init(&r->start, NULL, (unsigned)r->readers + 1);
    pthread_t rt[MAX_READERS], wt;
    struct reader_arg ra[MAX_READERS];
    for (int i = 0; i < r->readers; i++) {
        ra[i] = (struct reader_arg){r, i};
        pthread_create(&rt[i], NULL, reader_main, &ra[i]);
    }
    pthread_create(&wt, NULL, writer_main, r);
    pthread_barrier_wait(&r->start);
    sleep_us((long)(r->duration_ns / 1000));
    atomic_store(&r->stop, true);
    for (int i = 0; i < r->readers; i++)
        pthread_join(rt[i], NULL);
    pthread_join(wt, NULL);
    pthread_barrier_destroy(&r->start);

    if (r->impl == IMPL_RCU) {
        kvpool_registry_thread_online();
        kvpool_registry_destroy(r->reg);
        kvpool_registry_thread_unregister();
    } else {
        oa_fini(&r->oa);
    }
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: bench_registry [--quick] [--json FILE] [--seed N] [--help]\n"
            "\n"
            "Presence checks per second of the RCU block registry (liburcu lfht, QSBR) against\n"
            "a pthread-mutex open-addressing table, at 1 and 2 readers, with a concurrent writer.\n"
            "\n"
            "  --quick       shorter runs on a smaller table (a smoke test, about 1 s)\n"
            "  --json FILE   JSON output (default %s; missing directories are created)\n"
            "  --seed N      seed of the query order (default 1)\n"
            "  -h, --help    print this help, then exit\n",
            DEFAULT_JSON);
}

static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {{"quick", no_argument, NULL, 'q'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"seed", required_argument, NULL, 's'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    *o = (struct options){.seed = 1, .json_path = DEFAULT_JSON, .quick = false};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'q': o->quick = true; break;
        case 'j':
            if (bench_opt_path(PROG, "--json", optarg, &o->json_path))
                return 2;
            break;
        case 's':
            if (bench_opt_u64(PROG, "--seed", optarg, &o->seed))
                return 2;
            break;
        case 'h': usage(stdout); return 1;
        default: return bench_opt_bad(PROG);
        }
    }
    return bench_opt_no_operands(PROG, argc, argv);
}

int main(int argc, char **argv)
{
    struct options opt;
    int prc = parse_options(argc, argv, &opt);
    if (prc == 1)
        return 0;
    if (prc)
        return prc;

    const size_t live = opt.quick ? 20000 : 100000, ids = 2 * live;
    const uint64_t duration_ns = opt.quick ? 100000000u : 300000000u;
    const int reps = opt.quick ? 1 : 2;
    uint64_t *queries = bench_xcalloc(PROG, NQ, sizeof *queries);
    for (size_t i = 0; i < NQ; i++)
        queries[i] = id_hash((size_t)(bench_splitmix64(opt.seed * 7919u + i) % ids));

    printf("bench_registry: %zu live of %zu ids in G2, writer: %d removes + %d registers every "
           "~%d us; readers check %d hashes per round; %d x %.1f s per configuration (best "
           "kept)\n\n",
           live, ids, WB, WB, WRITER_SLEEP_US, QB, reps, (double)duration_ns * 1e-9);
    printf("%-22s %-9s %7s %14s %14s %8s %7s %10s\n", "implementation", "mode", "readers",
           "checks/s", "per CPU-s", "CPU/wall", "hits", "writer st/s");

    /* Configurations: mode x readers x implementation; repetitions interleave them. */
    enum { NCONF = 2 * MAX_READERS * 2 };
    static struct run runs[NCONF];
    struct best {
        double per_s, per_cpu_s, cpu_util, hit_frac, wsteps;
        json_t *reps;
    } best[NCONF];
    memset(best, 0, sizeof best);
    bool ok = true;
    for (int c = 0; c < NCONF; c++)
        best[c].reps = json_array();
    for (int rep = 0; rep < reps; rep++) {
        for (int c = 0; c < NCONF; c++) {
            int m = c / (2 * MAX_READERS), nr = 1 + (c / 2) % MAX_READERS, im = c % 2;
            struct run *r = &runs[c];
            memset(r, 0, sizeof *r);
            r->impl = (enum impl)im;
            r->mode = (enum mode)m;
            r->readers = nr;
            r->live = live;
            r->ids = ids;
            r->seed = opt.seed + (uint64_t)rep;
            r->duration_ns = duration_ns;
            r->queries = queries;
            run_one(r);
            uint64_t checks = 0, hits = 0, cpu = 0, wall = 0;
            double per_s = 0;
            for (int i = 0; i < nr; i++) {
                checks += r->checks[i];
                hits += r->hits[i];
                cpu += r->cpu_ns[i];
                wall += r->ns[i];
                per_s += r->ns[i] ? (double)r->checks[i] / ((double)r->ns[i] * 1e-9) : 0;
            }
            double per_cpu_s = cpu ? (double)checks / ((double)cpu * 1e-9) : 0;
            double cpu_util = wall ? (double)cpu / (double)wall : 0;
            double hit_frac = checks ? (double)hits / (double)checks : 0;
            double wsteps = (double)r->writer_steps / ((double)duration_ns * 1e-9);
            int errors = atomic_load(&r->errors);
            bool run_ok = errors == 0 && checks > 0 && hit_frac > 0.35 && hit_frac < 0.65;
            ok = ok && run_ok;
            if (!run_ok)
                fprintf(stderr,
                        "bench_registry: %s %s %d readers: %d errors, %" PRIu64
                        " checks, hit fraction %.3f\n",
                        impl_names[im], mode_names[m], nr, errors, checks, hit_frac);
            json_array_append_new(
                best[c].reps,
                json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:f, s:i, s:b}", "checks",
                          (json_int_t)checks, "seconds", (double)wall * 1e-9 / nr, "checks_per_s",
                          per_s, "checks_per_cpu_s", per_cpu_s, "reader_cpu_per_wall", cpu_util,
                          "hit_fraction", hit_frac, "writer_steps", (json_int_t)r->writer_steps,
                          "writer_steps_per_s", wsteps, "errors", errors, "ok", run_ok));
            if (per_s > best[c].per_s) {
                best[c].per_s = per_s;
                best[c].per_cpu_s = per_cpu_s;
                best[c].cpu_util = cpu_util;
                best[c].hit_frac = hit_frac;
                best[c].wsteps = wsteps;
            }
        }
    }
    json_t *jruns = json_array();
    for (int c = 0; c < NCONF; c++) {
        int m = c / (2 * MAX_READERS), nr = 1 + (c / 2) % MAX_READERS, im = c % 2;
        printf("%-22s %-9s %7d %14.0f %14.0f %8.2f %6.1f%% %10.0f\n", impl_names[im], mode_names[m],
               nr, best[c].per_s, best[c].per_cpu_s, best[c].cpu_util, 100.0 * best[c].hit_frac,
               best[c].wsteps);
        json_array_append_new(
            jruns, json_pack("{s:s, s:s, s:i, s:f, s:f, s:f, s:o}", "implementation",
                             impl_names[im], "mode", mode_names[m], "readers", nr, "checks_per_s",
                             best[c].per_s, "checks_per_cpu_s", best[c].per_cpu_s,
                             "reader_cpu_per_wall", best[c].cpu_util, "repetitions", best[c].reps));
    }

    /* Index of a configuration: (mode, readers, implementation). */
#define CONF(m, nr, im) ((m)*2 * MAX_READERS + ((nr)-1) * 2 + (im))
    printf("\nregistry / mutex baseline, checks per second (per reader CPU-second):\n");
    json_t *jratios = json_array();
    for (int m = 0; m < 2; m++)
        for (int nr = 1; nr <= MAX_READERS; nr++) {
            const struct best *a = &best[CONF(m, nr, IMPL_RCU)],
                              *b = &best[CONF(m, nr, IMPL_MUTEX)];
            double ratio = b->per_s > 0 ? a->per_s / b->per_s : 0;
            double ratio_cpu = b->per_cpu_s > 0 ? a->per_cpu_s / b->per_cpu_s : 0;
            printf("  %-9s %d reader%s: %.2fx (%.2fx)\n", mode_names[m], nr, nr > 1 ? "s" : " ",
                   ratio, ratio_cpu);
            json_array_append_new(jratios, json_pack("{s:s, s:i, s:f, s:f}", "mode", mode_names[m],
                                                     "readers", nr, "rcu_over_mutex", ratio,
                                                     "rcu_over_mutex_per_cpu_s", ratio_cpu));
        }
    double scale_rcu = best[CONF(MODE_PRESENCE, 1, IMPL_RCU)].per_s > 0
                           ? best[CONF(MODE_PRESENCE, 2, IMPL_RCU)].per_s /
                                 best[CONF(MODE_PRESENCE, 1, IMPL_RCU)].per_s
                           : 0;
    double scale_mutex = best[CONF(MODE_PRESENCE, 1, IMPL_MUTEX)].per_s > 0
                             ? best[CONF(MODE_PRESENCE, 2, IMPL_MUTEX)].per_s /
                                   best[CONF(MODE_PRESENCE, 1, IMPL_MUTEX)].per_s
                             : 0;
    printf("scaling 1 -> 2 readers (presence): registry %.2fx, mutex baseline %.2fx\n", scale_rcu,
           scale_mutex);
#undef CONF

    char date[32];
    bench_utc_date(date, sizeof date);
    json_t *root = bench_json_root(PROG, date);
    json_object_set_new(root, "options",
                        json_pack("{s:b, s:I, s:I, s:I, s:i, s:i, s:i, s:i, s:f}", "quick",
                                  opt.quick, "seed", (json_int_t)opt.seed, "live_entries",
                                  (json_int_t)live, "ids", (json_int_t)ids, "hashes_per_round", QB,
                                  "writer_batch", WB, "writer_sleep_us", WRITER_SLEEP_US,
                                  "reclaim_every_steps", RECLAIM_EVERY, "seconds_per_run",
                                  (double)duration_ns * 1e-9));
    json_object_set_new(root, "runs", jruns);
    json_object_set_new(root, "ratios", jratios);
    json_object_set_new(
        root, "scaling_1_to_2_readers",
        json_pack("{s:f, s:f}", "rcu_lfht", scale_rcu, "mutex_open_addressing", scale_mutex));
    json_object_set_new(root, "ok", json_boolean(ok));
    if (bench_dump_json(root, opt.json_path) != 0) {
        fprintf(stderr, "bench_registry: cannot write %s\n", opt.json_path);
        ok = false;
    } else {
        printf("JSON: %s\n", opt.json_path);
    }
    json_decref(root);
    free(queries);
    if (!ok)
        fprintf(stderr, "bench_registry: FAILED (see the table)\n");
    return ok ? 0 : 1;
}
