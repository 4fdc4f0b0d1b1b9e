/*
 * stress_registry.c - the registry part of `kvsim stress` (and of the stress_registry
 * executable): the shared block registry (kvpool/kvpool.h) under concurrent writers, readers and
 * a reclaimer, checking the watermark contract on every read.
 *
 * Plain threads, no Criterion, so that it runs under ThreadSanitizer. Bounded: every writer does
 * --batches (--ops) steps or stops at --seconds, whichever comes first.
 *
 * The workload is a pure function of (seed, writer, step), so any thread can compute what a
 * writer's registry state must be at any virtual time:
 *   - writer w's step s happens at vtime off(w) + s * stride(w) (offsets and strides differ per
 *     writer); it first removes the entries whose lifetime ends at s, then registers the hash
 *     ids j in [s*B, (s+1)*B), each in tier T(j), as the hash H(w, j mod M): an id's hash comes
 *     back every M/B = P steps, after its previous occupant (lifetime L(j) in [1, P] steps) has
 *     been removed, so the table holds several intervals of the same hash (lfht duplicates);
 *   - then it publishes its vtime as its watermark, on about half of the steps (so readers also
 *     meet batches newer than the watermark, which they must filter out) and always on the last.
 * Hashes of different writers never collide (H is a bijection of (w, id)).
 *
 * Readers acquire-load a writer's watermark W and the minimum watermark, check that neither
 * goes backwards, pick a time t in [their floor, W] (t = W half of the time), and check sampled
 * ids in every tier with contains_rcu and presence_rcu against the expected state: every hash
 * the writer registered at <= t and did not remove at <= t is present in its tier, nothing else
 * is. A reader's floor (the earliest time it will ever ask about again) trails the minimum
 * watermark; a reclaim thread reclaims below the minimum floor.
 *
 * At the end the calling thread checks every id of every writer at its final watermark,
 * reclaims everything removed and checks the table holds exactly the live entries, then
 * destroys the registry with live entries. It prints ops/s and returns 1 on any violation,
 * saying what was violated.
 *
 * QSBR: every thread that reads the registry registers, announces a quiescent state after each
 * step or round, goes offline before sleeping (the reclaimer) and unregisters before it exits;
 * the calling thread is unregistered while it waits for the writers.
 * TSan: the registry's publication points through liburcu (lfht insertion and the release
 * watermark) are annotated in kvpool/registry.c; .ci/tsan.supp only silences liburcu's own
 * uninstrumented internals.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpool/base.h"
#include "kvpool/kvpool.h"
#include "runtime/verify/verify.h"

#define B        KVSIM_STRESS_REG_BATCH /* hash ids registered per step */
#define P        64                     /* steps before an id's hash comes back; max lifetime */
#define M        (B * P)                /* distinct hashes per writer */
#define HIST     300                    /* readers look this far (vtime) below the min watermark */
#define SAMPLES  12                     /* ids checked per read round, in every tier */
#define MAX_MSGS 8                      /* violation messages kept */

struct options {
    const char *prog;
    int readers, writers;
    double seconds;
    int64_t ops;
    uint64_t seed;
};

struct writer_ctx {
    int id;
    struct kvpool_registry_writer *w;
    int64_t steps_done; /* read by main after join */
    int64_t registered; /* entries added */
    int64_t removed;    /* entries stamped */
};

struct reader_ctx {
    int id;
    uint64_t rng;
    int64_t checks; /* single-hash answers verified */
    int64_t rounds;
};

static struct {
    struct options opt;
    struct kvpool_registry *reg;
    struct writer_ctx *writers;
    struct reader_ctx *readers;
    _Atomic int64_t *floors; /* per reader: never asks about an earlier time again */
    atomic_bool stop;        /* writers: stop early (time limit or violation) */
    atomic_int writers_left;
    atomic_bool readers_stop;
    atomic_int violations;
    _Atomic int64_t reclaimed;
    _Atomic int64_t reclaim_passes;
    _Atomic int64_t last_horizon;
    pthread_mutex_t msg_lock;
    char msgs[MAX_MSGS][320];
    int nmsgs;
} g;

/* ---- deterministic schedule -------------------------------------------------------------------
 */

static uint64_t splitmix64(uint64_t x) { return base_splitmix64(x); }

static uint64_t rng_next(uint64_t *s)
{
    *s += BASE_GOLDEN_GAMMA; /* then splitmix64 of it: this stream's own (pinned) recipe */
    return splitmix64(*s);
}

static uint64_t mix3(int w, int64_t j, uint64_t salt)
{
    return splitmix64(g.opt.seed ^ splitmix64(((uint64_t)w << 48) ^ (uint64_t)j ^ (salt << 56)));
}

static int64_t off_of(int w) { return 1 + w; }
static int64_t stride_of(int w) { return 2 + w % 3; }
static int64_t vtime_of(int w, int64_t s) { return off_of(w) + s * stride_of(w); }
/* The last step done at or before vtime t, or -1. */
static int64_t step_at(int w, int64_t t)
{
    return t < off_of(w) ? -1 : (t - off_of(w)) / stride_of(w);
}
static int64_t lifetime(int w, int64_t j) { return 1 + (int64_t)(mix3(w, j, 1) % P); }
static enum kvpool_tier tier_of(int w, int64_t j) { return (enum kvpool_tier)(mix3(w, j, 2) % 3); }
static bool publishes(int w, int64_t s) { return mix3(w, s, 3) & 1; }
static kvpool_hash hash_of(int w, int64_t x)
{
    return splitmix64(((uint64_t)(w + 1) << 32) | (uint64_t)x);
}

/* Tier in which writer w's hash id x is present after step s (-1: absent). */
static int expected_tier(int w, int64_t s, int64_t x)
{
    if (s < 0)
        return -1;
    int64_t top = (s + 1) * B - 1; /* last id registered by step s */
    if (top < x)
        return -1;
    int64_t j = x + ((top - x) / M) * M; /* latest occupant of x's hash */
    if (s >= j / B + lifetime(w, j))
        return -1; /* removed at step j/B + L <= s */
    return (int)tier_of(w, j);
}

/* ---- reporting --------------------------------------------------------------------------------
 */

static void violation(const char *fmt, ...)
{
    atomic_fetch_add(&g.violations, 1);
    atomic_store(&g.stop, true);
    pthread_mutex_lock(&g.msg_lock);
    if (g.nmsgs < MAX_MSGS) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g.msgs[g.nmsgs++], sizeof g.msgs[0], fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&g.msg_lock);
}

static double now_s(void) { return (double)base_monotonic_ns() * 1e-9; }

/* ---- writers ----------------------------------------------------------------------------------
 */

static void writer_step(struct writer_ctx *wc, int64_t s)
{
    int w = wc->id;
    int64_t v = vtime_of(w, s);
    kvpool_hash batch[KVPOOL_NUM_TIERS][B * P];
    size_t n[KVPOOL_NUM_TIERS] = {0};

    /* Removals first: ids registered at step s - d whose lifetime is d. */
    for (int64_t d = 1; d <= P && s - d >= 0; d++)
        for (int64_t j = (s - d) * B; j < (s - d + 1) * B; j++)
            if (lifetime(w, j) == d) {
                enum kvpool_tier t = tier_of(w, j);
                batch[t][n[t]++] = hash_of(w, j % M);
            }
    for (int t = 0; t < KVPOOL_NUM_TIERS; t++) {
        int64_t rc = kvpool_registry_remove_batch(wc->w, (enum kvpool_tier)t, batch[t], n[t], v);
        if (rc != (int64_t)n[t])
            violation("writer %d step %" PRId64 " (vtime %" PRId64 "): remove_batch(%s, %zu) "
                      "returned %" PRId64 ": a live entry was missing",
                      w, s, v, kvpool_tier_name((enum kvpool_tier)t), n[t], rc);
        else
            wc->removed += rc;
        n[t] = 0;
    }
    /* Registrations: ids [s*B, (s+1)*B). */
    for (int64_t j = s * B; j < (s + 1) * B; j++) {
        enum kvpool_tier t = tier_of(w, j);
        batch[t][n[t]++] = hash_of(w, j % M);
    }
    for (int t = 0; t < KVPOOL_NUM_TIERS; t++) {
        int64_t rc = kvpool_registry_register_batch(wc->w, (enum kvpool_tier)t, batch[t], n[t], v);
        if (rc != (int64_t)n[t])
            violation("writer %d step %" PRId64 " (vtime %" PRId64 "): register_batch(%s, %zu) "
                      "returned %" PRId64 ": the previous interval was still live",
                      w, s, v, kvpool_tier_name((enum kvpool_tier)t), n[t], rc);
        else
            wc->registered += rc;
    }
}

static void *writer_main(void *arg)
{
    struct writer_ctx *wc = arg;
    kvpool_registry_thread_register();
    int64_t s = 0, published = -1;
    for (; s < g.opt.ops && !atomic_load_explicit(&g.stop, memory_order_relaxed); s++) {
        writer_step(wc, s);
        if (publishes(wc->id, s)) {
            int rc = kvpool_registry_publish(wc->w, vtime_of(wc->id, s));
            if (rc != 0)
                violation("writer %d: publish(%" PRId64 ") returned %d", wc->id,
                          vtime_of(wc->id, s), rc);
            published = s;
        }
        kvpool_registry_thread_quiescent();
    }
    wc->steps_done = s;
    if (s > 0 && published != s - 1) {
        int rc = kvpool_registry_publish(wc->w, vtime_of(wc->id, s - 1));
        if (rc != 0)
            violation("writer %d: final publish returned %d", wc->id, rc);
    }
    kvpool_registry_thread_unregister();
    atomic_fetch_sub(&g.writers_left, 1);
    return NULL;
}

/* ---- readers ----------------------------------------------------------------------------------
 */

static void check_hash(struct reader_ctx *rc, int w, int64_t x, int64_t t, int64_t wm,
                       enum kvpool_tier tier, bool got)
{
    int want_tier = expected_tier(w, step_at(w, t), x);
    bool want = want_tier == (int)tier;
    rc->checks++;
    if (got != want) {
        char who[32];
        if (rc->id < 0)
            snprintf(who, sizeof who, "final check");
        else
            snprintf(who, sizeof who, "reader %d", rc->id);
        violation("%s: writer %d hash id %" PRId64 " (0x%016" PRIx64 ") in %s at vtime %" PRId64
                  " (watermark %" PRId64 ", step %" PRId64 "): %s, expected %s (expected tier %s)",
                  who, w, x, hash_of(w, x), kvpool_tier_name(tier), t, wm, step_at(w, t),
                  got ? "present" : "absent", want ? "present" : "absent",
                  want_tier < 0 ? "none" : kvpool_tier_name((enum kvpool_tier)want_tier));
    }
}

static void *reader_main(void *arg)
{
    struct reader_ctx *rc = arg;
    int nw = g.opt.writers;
    int64_t *last_wm = calloc((size_t)nw, sizeof *last_wm);
    if (!last_wm) {
        violation("reader %d: out of memory", rc->id);
        return NULL;
    }
    int64_t last_min = INT64_MIN, lowest = 0;
    kvpool_registry_thread_register();
    while (!atomic_load_explicit(&g.readers_stop, memory_order_relaxed)) {
        int64_t mn = kvpool_registry_min_watermark_acquire(g.reg);
        if (mn < last_min)
            violation("reader %d: the minimum watermark went back from %" PRId64 " to %" PRId64,
                      rc->id, last_min, mn);
        last_min = mn;
        int w = (int)(rng_next(&rc->rng) % (uint64_t)nw);
        int64_t wm = kvpool_registry_watermark_acquire(g.writers[w].w);
        if (wm < last_wm[w])
            violation("reader %d: writer %d's watermark went back from %" PRId64 " to %" PRId64,
                      rc->id, w, last_wm[w], wm);
        if (wm < mn)
            violation("reader %d: writer %d's watermark %" PRId64 " is below the minimum %" PRId64
                      " loaded before it",
                      rc->id, w, wm, mn);
        last_wm[w] = wm;
        if (wm >= lowest) {
            int64_t t = wm;
            if (rng_next(&rc->rng) & 1)
                t = lowest + (int64_t)(rng_next(&rc->rng) % (uint64_t)(wm - lowest + 1));
            for (int i = 0; i < SAMPLES; i++) {
                int64_t x = (int64_t)(rng_next(&rc->rng) % M);
                for (int tier = 0; tier < KVPOOL_NUM_TIERS; tier++)
                    check_hash(rc, w, x, t, wm, (enum kvpool_tier)tier,
                               kvpool_registry_contains_rcu(g.reg, (enum kvpool_tier)tier,
                                                            hash_of(w, x), t));
            }
            /* The batch form: SAMPLES consecutive ids in one tier. */
            kvpool_hash hs[SAMPLES];
            bool present[SAMPLES];
            int64_t x0 = (int64_t)(rng_next(&rc->rng) % (M - SAMPLES));
            enum kvpool_tier tier = (enum kvpool_tier)(rng_next(&rc->rng) % KVPOOL_NUM_TIERS);
            for (int i = 0; i < SAMPLES; i++)
                hs[i] = hash_of(w, x0 + i);
            int64_t cnt = kvpool_registry_presence_rcu(g.reg, tier, hs, SAMPLES, t, present);
            int64_t want_cnt = 0;
            for (int i = 0; i < SAMPLES; i++) {
                check_hash(rc, w, x0 + i, t, wm, tier, present[i]);
                want_cnt += present[i];
            }
            if (cnt != want_cnt)
                violation("reader %d: presence_rcu returned %" PRId64 " but flagged %" PRId64,
                          rc->id, cnt, want_cnt);
        }
        rc->rounds++;
        kvpool_registry_thread_quiescent();
        /* Never ask about times before mn - HIST again: the reclaimer may go that far. */
        if (mn != KVPOOL_VTIME_NEVER && mn - HIST > lowest) {
            lowest = mn - HIST;
            atomic_store_explicit(&g.floors[rc->id], lowest, memory_order_release);
        }
    }
    kvpool_registry_thread_unregister();
    free(last_wm);
    return NULL;
}

/* ---- reclaimer --------------------------------------------------------------------------------
 */

static void *reclaim_main(void *arg)
{
    (void)arg;
    kvpool_registry_thread_register();
    while (!atomic_load_explicit(&g.readers_stop, memory_order_relaxed)) {
        int64_t horizon = INT64_MAX;
        for (int r = 0; r < g.opt.readers; r++) {
            int64_t f = atomic_load_explicit(&g.floors[r], memory_order_acquire);
            if (f < horizon)
                horizon = f;
        }
        if (g.opt.readers == 0)
            horizon = 0;
        int64_t n = kvpool_registry_reclaim(g.reg, horizon);
        if (n < 0)
            violation("reclaim(%" PRId64 ") returned %" PRId64 " with a single reclaimer", horizon,
                      n);
        else
            atomic_fetch_add(&g.reclaimed, n);
        atomic_fetch_add(&g.reclaim_passes, 1);
        atomic_store(&g.last_horizon, horizon);
        kvpool_registry_thread_offline(); /* sleeping blocks */
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
        kvpool_registry_thread_online();
    }
    kvpool_registry_thread_unregister();
    return NULL;
}

/* ---- final check ------------------------------------------------------------------------------
 */

/* Every id of every writer at its final watermark (and a few earlier times >= the last reclaim
 * horizon); then a full reclaim and the table must hold exactly the live entries. */
static void final_check(void)
{
    int64_t live = 0, registered = 0, removed = 0;
    int64_t horizon = atomic_load(&g.last_horizon);
    for (int w = 0; w < g.opt.writers; w++) {
        struct writer_ctx *wc = &g.writers[w];
        registered += wc->registered;
        removed += wc->removed;
        int64_t wm = kvpool_registry_watermark_acquire(wc->w);
        int64_t want_wm = wc->steps_done > 0 ? vtime_of(w, wc->steps_done - 1) : 0;
        if (wm != want_wm)
            violation("final: writer %d's watermark is %" PRId64 ", expected %" PRId64, w, wm,
                      want_wm);
        struct reader_ctx fake = {.id = -1}; /* -1: messages say "final check" */
        const int64_t times[4] = {wm, wm - 1, wm - HIST / 2, horizon};
        for (int k = 0; k < 4; k++) {
            int64_t t = times[k];
            if (t < horizon || t > wm || t < 0)
                continue;
            for (int64_t x = 0; x < M; x++) {
                for (int tier = 0; tier < KVPOOL_NUM_TIERS; tier++)
                    check_hash(&fake, w, x, t, wm, (enum kvpool_tier)tier,
                               kvpool_registry_contains_rcu(g.reg, (enum kvpool_tier)tier,
                                                            hash_of(w, x), t));
                if (k == 0 && expected_tier(w, step_at(w, t), x) >= 0)
                    live++;
            }
            kvpool_registry_thread_quiescent();
        }
    }
    int64_t n = kvpool_registry_reclaim(g.reg, KVPOOL_VTIME_NEVER - 1);
    if (n < 0)
        violation("final reclaim returned %" PRId64, n);
    else
        atomic_fetch_add(&g.reclaimed, n);
    int64_t reclaimed = atomic_load(&g.reclaimed);
    if (reclaimed != removed)
        violation("final: %" PRId64 " entries reclaimed in all, but %" PRId64 " were removed",
                  reclaimed, removed);
    size_t size = kvpool_registry_size_rcu(g.reg);
    if ((int64_t)size != live || registered - removed != live)
        violation("final: the table holds %zu entries; expected %" PRId64 " live (%" PRId64
                  " registered - %" PRId64 " removed)",
                  size, live, registered, removed);
}

/* ---- the run ----------------------------------------------------------------------------------
 */

static void free_run(void)
{
    free(g.floors);
    free(g.readers);
    free(g.writers);
    pthread_mutex_destroy(&g.msg_lock);
}

int kvsim_stress_registry_run(const struct kvsim_stress_opts *o, FILE *out,
                              struct kvsim_stress_result *res)
{
    memset(&g, 0, sizeof g);
    g.opt = (struct options){
        .prog = o->prog ? o->prog : "stress",
        .readers = (int)o->readers,
        .writers = (int)o->writers,
        .seconds = o->seconds > 0 ? o->seconds : 1e9,
        .ops = (int64_t)o->steps,
        .seed = o->seed,
    };
    const char *prog = g.opt.prog;
    if (res)
        *res = (struct kvsim_stress_result){0};
    if (o->writers == 0 || o->writers > 64 || o->readers > 64 || o->steps == 0 ||
        o->steps > KVSIM_STRESS_UNBOUNDED_STEPS) {
        fprintf(stderr, "%s: registry: invalid options\n", prog);
        return -EINVAL;
    }
    pthread_mutex_init(&g.msg_lock, NULL);
    int nw = g.opt.writers, nr = g.opt.readers;
    int rc = kvpool_registry_create((uint32_t)nw, 1024, &g.reg);
    if (rc != 0) {
        fprintf(stderr, "%s: kvpool_registry_create: %s\n", prog, kvsim_strerror(rc));
        pthread_mutex_destroy(&g.msg_lock);
        return rc;
    }
    g.writers = calloc((size_t)nw, sizeof *g.writers);
    g.readers = calloc((size_t)nr + 1, sizeof *g.readers);
    g.floors = calloc((size_t)nr + 1, sizeof *g.floors);
    pthread_t *th = calloc((size_t)(nw + nr + 1), sizeof *th);
    if (!g.writers || !g.readers || !g.floors || !th) {
        fprintf(stderr, "%s: out of memory\n", prog);
        kvpool_registry_destroy(g.reg);
        free(th);
        free_run();
        return -ENOMEM;
    }
    for (int w = 0; w < nw; w++) {
        g.writers[w].id = w;
        rc = kvpool_registry_writer_create(g.reg, 0, &g.writers[w].w);
        if (rc != 0) {
            fprintf(stderr, "%s: writer_create: %s\n", prog, kvsim_strerror(rc));
            kvpool_registry_destroy(g.reg);
            free(th);
            free_run();
            return rc;
        }
    }
    for (int r = 0; r < nr; r++) {
        g.readers[r] =
            (struct reader_ctx){.id = r, .rng = splitmix64(g.opt.seed + 1000u + (uint64_t)r)};
        atomic_init(&g.floors[r], 0);
    }
    atomic_init(&g.writers_left, nw);

    fprintf(out, "%s: registry: %d writer(s), %d reader(s), ", prog, nw, nr);
    if (o->steps < KVSIM_STRESS_UNBOUNDED_STEPS)
        fprintf(out, "%" PRId64 " steps of %d hashes per writer%s", g.opt.ops, B,
                o->seconds > 0 ? " or " : "");
    if (o->seconds > 0)
        fprintf(out, "%.1f s", o->seconds);
    fprintf(out, ", seed %" PRIu64 "\n", g.opt.seed);
    fflush(out);

    double t0 = now_s();
    int nt = 0;
    /* A thread that cannot start is a violation: it stops the writers early. */
    for (int r = 0; r < nr; r++)
        if ((rc = pthread_create(&th[nt], NULL, reader_main, &g.readers[r])) == 0)
            nt++;
        else
            violation("pthread_create (reader %d): %s", r, strerror(rc));
    if ((rc = pthread_create(&th[nt], NULL, reclaim_main, NULL)) == 0)
        nt++;
    else
        violation("pthread_create (reclaimer): %s", strerror(rc));
    for (int w = 0; w < nw; w++)
        if ((rc = pthread_create(&th[nt], NULL, writer_main, &g.writers[w])) == 0)
            nt++;
        else {
            violation("pthread_create (writer %d): %s", w, strerror(rc));
            atomic_fetch_sub(&g.writers_left, 1);
        }

    /* The calling thread is not registered while it waits. */
    while (atomic_load(&g.writers_left) > 0) {
        if (now_s() - t0 > g.opt.seconds)
            atomic_store(&g.stop, true);
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    double elapsed = now_s() - t0;
    atomic_store(&g.readers_stop, true);
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    free(th);

    kvpool_registry_thread_register();
    if (atomic_load(&g.violations) == 0)
        final_check();

    int64_t steps = 0, entry_ops = 0, checks = 0, rounds = 0;
    for (int w = 0; w < nw; w++) {
        steps += g.writers[w].steps_done;
        entry_ops += g.writers[w].registered + g.writers[w].removed;
    }
    for (int r = 0; r < nr; r++) {
        checks += g.readers[r].checks;
        rounds += g.readers[r].rounds;
    }
    size_t final_size = kvpool_registry_size_rcu(g.reg);
    kvpool_registry_destroy(g.reg); /* with the live entries */
    kvpool_registry_thread_unregister();

    if (nr > 0 && checks == 0)
        violation("the readers checked nothing");
    int nv = atomic_load(&g.violations);
    fprintf(out, "  %" PRId64 " steps in %.2f s%s\n", steps, elapsed,
            steps < g.opt.ops * nw && nv == 0 ? " (time limit)" : "");
    fprintf(out, "  writers: %.0f entry ops/s (register + remove)\n", (double)entry_ops / elapsed);
    fprintf(out, "  readers: %.0f checks/s (%" PRId64 " checks in %" PRId64 " rounds)\n",
            (double)checks / elapsed, checks, rounds);
    fprintf(out,
            "  reclaim: %" PRId64 " entries in %" PRId64 " passes; %zu live entries at the end\n",
            atomic_load(&g.reclaimed), atomic_load(&g.reclaim_passes), final_size);
    for (int i = 0; i < g.nmsgs; i++)
        fprintf(stderr, "%s: VIOLATION (registry): %s\n", prog, g.msgs[i]);
    if (res)
        *res = (struct kvsim_stress_result){.ops = (uint64_t)(entry_ops + checks),
                                            .elapsed_s = elapsed,
                                            .violations = (uint64_t)nv};
    free_run();
    return nv ? KVSIM_EINVARIANT : 0;
}
