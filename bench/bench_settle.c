/*
 * bench_settle.c - settlement round trips of the offload pipeline (offload.h).
 *
 * A round trip is what a scheduler does to push one batch through a lane and know it is done:
 * offload_enqueue of a 1-block batch, then offload_settle on its token (plus, on a lane with a
 * finite bandwidth, offload_advance_to its deadline in between). Measured for:
 *   - inline executor, instant lane:     enqueue + settle (the bookkeeping floor);
 *   - inline executor, 14 GB/s lane:     enqueue + advance_to + settle (adds the bandwidth model);
 *   - pool executor (1 worker), eager hand-off, instant: enqueue + settle, i.e. owner -> worker
 *     -> owner through the rings, with the owner's bounded spin and futex sleep;
 *   - pool executor (1 worker), eager hand-off, 14 GB/s: enqueue + advance_to + settle;
 *   - pool executor (2 workers), eager hand-off, 4 permits, instant: 4 enqueues, then settle on
 *     the last (batches per second with 4 batches in flight);
 *   - the adaptive hand-off (the default), instant and 4 in flight: work this cheap never wakes a
 *     worker, the owner takes each batch back and runs it (the pool's floor).
 * Work functions do nothing: this measures the pipeline, not copies. Each figure does a fixed
 * number of round trips per repetition, timed with CLOCK_MONOTONIC; the figure is the best of 3
 * repetitions (after one untimed warm-up). Every settle must return 0 and every batch must
 * complete; otherwise the exit status is 1. Results go to stdout and to a JSON file.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "bench_util.h"
#include "offload/offload.h"
#include "runtime/runtime.h"

#define PROG         "bench_settle"
#define REPS         BENCH_REPS
#define DEFAULT_JSON "bench/results/bench_settle.json"

struct options {
    const char *json_path;
    bool quick;
};

/* A round-trip figure and the pipeline's counters of its last repetition. */
struct figure {
    struct bench_figure f;
    struct offload_stats stats;
};

static bool all_ok = true;

static void fail(const char *what, int rc)
{
    fprintf(stderr, "bench_settle: %s: %s\n", what, strerror(rc < 0 ? -rc : rc));
    all_ok = false;
}

/* ---- one measurement --------------------------------------------------------------------- */

enum shape {
    INLINE_INSTANT,
    INLINE_BANDWIDTH,
    POOL_INSTANT,
    POOL_BANDWIDTH,
    POOL_PIPELINED,
    POOL_ADAPTIVE_INSTANT,
    POOL_ADAPTIVE_PIPELINED,
};

struct shape_desc {
    enum shape shape;
    const char *key, *label, *unit;
    bool pool;
    uint32_t threads;
    uint32_t permits;
    int64_t bandwidth;
    uint32_t per_settle; /* batches enqueued per settle */
    bool adaptive;       /* the pool's default hand-off (else eager: wake_work_ns 0) */
};

static const struct shape_desc shapes[] = {
    {INLINE_INSTANT, "inline_instant", "inline, instant lane", "round trips/s", false, 0, 1, 0, 1,
     false},
    {INLINE_BANDWIDTH, "inline_bandwidth", "inline, 14 GB/s lane (+advance_to)", "round trips/s",
     false, 0, 1, INT64_C(14000000000), 1, false},
    {POOL_INSTANT, "pool_instant", "pool eager (1 worker), instant lane", "round trips/s", true, 1,
     1, 0, 1, false},
    {POOL_BANDWIDTH, "pool_bandwidth", "pool eager (1 worker), 14 GB/s (+advance_to)",
     "round trips/s", true, 1, 1, INT64_C(14000000000), 1, false},
    {POOL_PIPELINED, "pool_pipelined", "pool eager (2 workers), 4 in flight", "batches/s", true, 2,
     4, 0, 4, false},
    {POOL_ADAPTIVE_INSTANT, "pool_adaptive_instant", "pool adaptive (1 worker), instant lane",
     "round trips/s", true, 1, 1, 0, 1, true},
    {POOL_ADAPTIVE_PIPELINED, "pool_adaptive_pipelined", "pool adaptive (2 workers), 4 in flight",
     "batches/s", true, 2, 4, 0, 4, true},
};
#define NUM_SHAPES (sizeof shapes / sizeof shapes[0])

/* Runs `rounds` rounds on p; returns batches completed, or 0 after reporting an error. */
static uint64_t run_rounds(struct offload_pipeline *p, const struct shape_desc *d, uint64_t rounds)
{
    offload_block_id block = 1;
    for (uint64_t i = 0; i < rounds; i++) {
        struct offload_token t;
        for (uint32_t k = 0; k < d->per_settle; k++) {
            int rc = offload_enqueue(p, OFFLOAD_LANE_G1_G2, &block, 1, i, &t);
            if (rc) {
                fail("offload_enqueue", rc);
                return 0;
            }
        }
        if (d->bandwidth > 0) {
            int rc = offload_advance_to(p, offload_next_deadline(p));
            if (rc < 0) {
                fail("offload_advance_to", rc);
                return 0;
            }
        }
        int rc = offload_settle(p, &t);
        if (rc) {
            fail("offload_settle", rc);
            return 0;
        }
    }
    struct offload_lane_stats s;
    offload_lane_stats(p, OFFLOAD_LANE_G1_G2, &s);
    return s.completed;
}

static void measure(const struct shape_desc *d, uint64_t rounds, struct figure *f)
{
    bench_fig_init(&f->f, d->key, d->label, d->unit, d->label);
    struct offload_pool *pool = NULL;
    if (d->pool) {
        struct offload_pool_config pc;
        offload_pool_config_default(&pc);
        pc.threads = d->threads;
        if (!d->adaptive)
            pc.wake_work_ns = 0;
        int rc = offload_pool_create(&pc, &pool);
        if (rc) {
            fail("offload_pool_create", rc);
            return;
        }
    }
    struct offload_config cfg;
    offload_config_default(&cfg);
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++)
        cfg.lanes[l].permits = 0;
    cfg.lanes[OFFLOAD_LANE_G1_G2].permits = d->permits;
    cfg.lanes[OFFLOAD_LANE_G1_G2].bandwidth = d->bandwidth;
    cfg.lanes[OFFLOAD_LANE_G1_G2].max_blocks = 1;
    cfg.lanes[OFFLOAD_LANE_G1_G2].capacity = 64;
    for (int r = -1; r < REPS; r++) { /* r == -1: warm-up */
        struct offload_pipeline *p;
        int rc = offload_pipeline_create(&cfg, pool, &p);
        if (rc) {
            fail("offload_pipeline_create", rc);
            break;
        }
        uint64_t n = r < 0 ? rounds / 10 + 1 : rounds;
        int64_t t0 = bench_now_ns();
        uint64_t done = run_rounds(p, d, n);
        int64_t ns = bench_now_ns() - t0;
        if (done != n * d->per_settle) {
            fprintf(stderr, "bench_settle: %s: %" PRIu64 " of %" PRIu64 " batches completed\n",
                    d->key, done, n * d->per_settle);
            all_ok = false;
        }
        if (r >= 0) {
            bench_fig_record(&f->f, r, done, (uint64_t)ns);
            offload_stats(p, &f->stats);
        }
        rc = offload_pipeline_destroy(p);
        if (rc)
            fail("offload_pipeline_destroy", rc);
    }
    int rc = offload_pool_destroy(pool);
    if (rc)
        fail("offload_pool_destroy", rc);
}

/* ---- output ------------------------------------------------------------------------------- */

static json_t *fig_json(const struct figure *f)
{
    json_t *j = bench_fig_json(&f->f);
    json_object_set_new(
        j, "last_repetition",
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "settles", (json_int_t)f->stats.settles,
                  "settle_waits", (json_int_t)f->stats.settle_waits, "owner_sleeps",
                  (json_int_t)f->stats.owner_sleeps, "timeouts", (json_int_t)f->stats.timeouts,
                  "dispatched", (json_int_t)f->stats.dispatched, "taken_back",
                  (json_int_t)f->stats.taken_back, "worker_wakes",
                  (json_int_t)f->stats.worker_wakes));
    return j;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: bench_settle [--json FILE] [--quick] [--help]\n"
            "\n"
            "Settlement round trips (enqueue + settle) of the offload pipeline, for the inline\n"
            "and the thread-pool executor.\n"
            "\n"
            "options:\n"
            "  --json FILE   write the results as JSON to FILE (default %s;\n"
            "                missing directories are created)\n"
            "  --quick       small round counts (a smoke test: well under a second)\n"
            "  -h, --help    print this help, then exit\n",
            DEFAULT_JSON);
}

static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"json", required_argument, NULL, 'j'},
        {"quick", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    o->json_path = DEFAULT_JSON;
    o->quick = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            if (bench_opt_path(PROG, "--json", optarg, &o->json_path))
                return 2;
            break;
        case 'q': o->quick = true; break;
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
    char date[32];
    bench_utc_date(date, sizeof date);
    json_t *root = bench_json_root(PROG, date);
    json_object_set_new(root, "options",
                        json_pack("{s:b, s:i}", "quick", opt.quick, "repetitions", REPS));

    printf("%-46s %16s %12s %14s\n", "measurement", "throughput", "per op", "sleeps/settle");
    json_t *figs = json_object();
    for (size_t i = 0; i < NUM_SHAPES; i++) {
        const struct shape_desc *d = &shapes[i];
        uint64_t rounds = d->pool ? (opt.quick ? 2000 : 100000) : (opt.quick ? 20000 : 2000000);
        struct figure f;
        memset(&f, 0, sizeof f);
        measure(d, rounds, &f);
        double per = f.f.best > 0 ? 1e9 / f.f.best : 0.0;
        double sleeps =
            f.stats.settles ? (double)f.stats.owner_sleeps / (double)f.stats.settles : 0.0;
        printf("%-46s %10.0f %-5s %9.1f ns %14.3f\n", d->label, f.f.best,
               d->per_settle == 1 ? "rt/s" : "b/s", per, sleeps);
        if (f.stats.timeouts) {
            fprintf(stderr, "bench_settle: %s: %" PRIu64 " guard timeouts\n", d->key,
                    (uint64_t)f.stats.timeouts);
            all_ok = false;
        }
        json_object_set_new(figs, d->key, fig_json(&f));
    }
    json_object_set_new(root, "figures", figs);
    json_object_set_new(root, "ok", json_boolean(all_ok));

    if (!bench_write_results(PROG, root, opt.json_path, false))
        all_ok = false;
    json_decref(root);
    if (!all_ok)
        fprintf(stderr, "bench_settle: FAILED\n");
    return all_ok ? 0 : 1;
}
