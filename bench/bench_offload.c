/*
 * bench_offload.c - what the KV offload tiers (docs/offload.md) buy in the simulation, and what
 * they cost the simulator.
 *
 * What it runs. ../shared/traces/conversation_trace.jsonl on 8 engines behind the kv router,
 * 16-token blocks, with a G1 (GPU pool) of only 5,120 blocks per engine (81,904 usable tokens,
 * against the replay default of 16,384 blocks) so that G1 runs full: requests are preempted,
 * prefix-cache blocks are evicted, and a G2 gets hits. The prompts longer than G1 can ever hold
 * are rejected (exceeds_kv_capacity) in every configuration alike, so every configuration
 * completes the same requests. The configurations:
 *   1. G1 only: no offload tiers (the baseline), 1 thread;
 *   2. G1 + G2 (4 x G1 = 20,480 blocks), inline executor, 1 thread;
 *   3. G1 + G2 + G3 (G3 = 4 x G2 = 81,920 blocks), inline executor, 1 and 2 threads;
 *   4. configuration 3 with the thread-pool executor (2 pool workers), 1 and 2 threads.
 * "threads" are the replay's worker threads (engines per thread); the pool workers come on top.
 * Other settings are the `kvsim replay` defaults: 2 MiB blocks (131,072 KV bytes per token),
 * G1<->G2 at 14 GB/s and G2<->G3 at 7 GB/s per direction, write-through G1->G2, G2 evictions
 * go to G3. The same runs from the CLI, e.g. configuration 4 on 2 threads:
 *   kvsim replay --trace FILE --engines 8 --router kv --threads 2 --num-gpu-blocks 5120
 *                --g2-blocks 20480 --g3-blocks 81920 --offload-executor pool --offload-threads 2
 *
 * How to read it. Three tables, one row per run:
 *  - speed: wall seconds of kvsim_replay_run() (trace loading included), CPU ns per simulated
 *    output token (user + system CPU of the whole child, pool workers included), peak RSS, and
 *    simulated seconds per wall second. Machine-dependent.
 *  - simulation: preemptions, prefix-cache reuse (report.prefix_cache_reuse: first-admission
 *    hits, G1 and onboarded G2/G3 blocks alike, over the prompt tokens of completed requests),
 *    G2 and G3 hit rates (blocks onboarded from that tier / full prompt blocks missing from G1 at
 *    admission), prompt tokens onboarded from G2/G3 and prompt tokens computed by engine steps
 *    (preemption recompute included), TTFT p50/p99 in simulated ms and the simulated duration.
 *    A G1-only run has no offload section in its report: its "computed" cell is input - cached
 *    tokens of the completed requests (marked *), which leaves out preemption recompute.
 *    These figures depend only on the configuration, never on the executor or thread count.
 *  - lanes: blocks moved per offload lane (G1->G2 write-through, G2->G3, G3->G2 staging,
 *    G2->G1 onboarding), loads, and write-through blocks filtered (already present) / dropped.
 * Then the ratios: simulated TTFT p50/p99 and computed prompt tokens with G2 (and G2+G3) over
 * G1 only - what the tier buys; the computed-token ratio uses input - cached on both sides, so
 * that it compares like with like -, wall (and CPU) time with offload over without - its cost
 * to the simulator -, and pool over inline wall time at 1 and 2 threads.
 *
 * Why 5,120 G1 blocks. The replay default (16,384) never preempts on this trace. At 5,120 the
 * G1-only run preempts about a hundred times, rejects the ~1% of prompts longer than 81,904
 * tokens, and keeps up with the arrivals (simulated duration within 2% of the default's, TTFT
 * p50 ~0.56 s against ~0.31 s); TTFT p99 is dominated by queueing behind long prompts, which
 * is where the tiers help. Smaller G1s (2,048: 7% of requests rejected, TTFT p50 ~15 min, the
 * queue growing all along) measure queueing, not the tiers.
 *
 * Method (as bench/bench_replay.c). Every run is a forked child (fork + wait4) with its own
 * peak RSS (ru_maxrss) and CPU time; the child times kvsim_replay_run() with CLOCK_MONOTONIC
 * and sends back through a pipe its figures and an XXH3 digest of every report field that does
 * not depend on the wall clock or the thread count, the offload section included. Each figure
 * is that of the fastest of --reps repetitions (configurations interleaved within a
 * repetition). Configurations 3 and 4 at 1 and 2 threads must give one and the same digest (the
 * replay is executor- and thread-independent), and the repetitions of a configuration must
 * agree. Exit status: 0; 1 if a run fails or digests differ where they must be identical;
 * 2 for a usage error or a missing trace. A full run takes about 70 s on a 2-core machine, most
 * of it in the two pool runs; --quick (the first 1,000 requests) a few seconds.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "bench_util.h"
#include "offload/offload.h"
#include "runtime/runtime.h"

#ifndef KVSIM_SOURCE_DIR
#error "KVSIM_SOURCE_DIR must be defined (the source tree, to find ../shared/traces)"
#endif

#define DEFAULT_TRACE      KVSIM_SOURCE_DIR "/../shared/traces/conversation_trace.jsonl"
#define PROG               "bench_offload"
#define DEFAULT_JSON       "bench/results/bench_offload.json"
#define NUM_ENGINES        8u
#define QUICK_MAX_REQUESTS BENCH_QUICK_MAX_REQUESTS
#define MAX_REPS           100u
#define BLOCK_SIZE         16u
#define G1_BLOCKS          5120u            /* per engine, null block included */
#define G2_BLOCKS          (4u * G1_BLOCKS) /* 20,480 */
#define G3_BLOCKS          (4u * G2_BLOCKS) /* 81,920 */
#define POOL_WORKERS       2u               /* offload_threads of the pool executor */
#define ROUTER             KVSIM_ROUTER_KV

/* ---- small utilities ------------------------------------------------------------------------ */

static double ratio_of(double num, double den) { return den != 0 ? num / den : 0.0; }

/* ---- configurations and the child process --------------------------------------------------- */

enum tiers_kind {
    TIERS_G1,   /* no offload */
    TIERS_G2,   /* G1 + G2 */
    TIERS_G2G3, /* G1 + G2 + G3 */
};

struct run_cfg {
    enum tiers_kind tiers;
    bool pool; /* thread-pool executor (else inline) */
    uint32_t threads;
};

static const char *tiers_label(enum tiers_kind t)
{
    switch (t) {
    case TIERS_G1: return "G1 only";
    case TIERS_G2: return "G1+G2";
    case TIERS_G2G3: return "G1+G2+G3";
    }
    return "?";
}

static const char *executor_label(const struct run_cfg *c)
{
    return c->tiers == TIERS_G1 ? "-" : c->pool ? "pool" : "inline";
}

static uint32_t g2_blocks_of(const struct run_cfg *c)
{
    return c->tiers == TIERS_G1 ? 0 : G2_BLOCKS;
}
static uint32_t g3_blocks_of(const struct run_cfg *c)
{
    return c->tiers == TIERS_G2G3 ? G3_BLOCKS : 0;
}

/* The configurations, in run order within a repetition. */
static const struct run_cfg configs[] = {
    {.tiers = TIERS_G1, .pool = false, .threads = 1},
    {.tiers = TIERS_G2, .pool = false, .threads = 1},
    {.tiers = TIERS_G2G3, .pool = false, .threads = 1},
    {.tiers = TIERS_G2G3, .pool = true, .threads = 1},
    {.tiers = TIERS_G2G3, .pool = false, .threads = 2},
    {.tiers = TIERS_G2G3, .pool = true, .threads = 2},
};
#define NUM_CONFIGS (sizeof configs / sizeof configs[0])

static const char *config_label(const struct run_cfg *c, char *buf, size_t len)
{
    if (c->tiers == TIERS_G1)
        snprintf(buf, len, "%s", tiers_label(c->tiers));
    else
        snprintf(buf, len, "%s %s", tiers_label(c->tiers), executor_label(c));
    return buf;
}

static void describe(const void *ctx, size_t i, struct bench_config *c)
{
    (void)ctx;
    config_label(&configs[i], c->label, sizeof c->label);
    c->threads = configs[i].threads;
}

/* The digest covers the offload section too, which must be there exactly with tiers. */
static void child_main(const void *ctx, size_t i, struct bench_msg *msg)
{
    const struct run_cfg *c = &configs[i];
    struct kvsim_replay_config cfg;
    bench_trace_replay_config(ctx, &cfg);
    cfg.num_engines = NUM_ENGINES;
    cfg.num_threads = c->threads;
    cfg.router = ROUTER;
    cfg.sched.block_size = BLOCK_SIZE;
    cfg.sched.num_blocks = G1_BLOCKS;
    if (c->tiers != TIERS_G1) {
        cfg.offload = true;
        cfg.tiers.g2_blocks = g2_blocks_of(c);
        cfg.tiers.g3_blocks = g3_blocks_of(c);
        cfg.offload_pool = c->pool;
        cfg.offload_threads = POOL_WORKERS;
    }
    bench_replay_child(&cfg, true, msg);
    if (msg->rc == 0 && msg->offload.enabled != cfg.offload) {
        msg->rc = -EPROTO;
        snprintf(msg->err, sizeof msg->err, "the report's offload section is %s",
                 msg->offload.enabled ? "filled without tiers" : "missing");
    }
}

/* Prompt tokens of completed requests not served from a cache at first admission: the
 * computed-token measure every run has (the G1-only report has no offload section). */
static uint64_t first_admission_computed(const struct bench_msg *m)
{
    return m->input_tokens >= m->cached_tokens ? m->input_tokens - m->cached_tokens : 0;
}

/* The engines' count of computed prompt tokens where there is one, else the measure above. */
static uint64_t computed_tokens(const struct bench_msg *m)
{
    return m->offload.enabled ? m->offload.recomputed_tokens : first_admission_computed(m);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static void set_int(json_t *o, const char *key, uint64_t v)
{
    json_object_set_new(o, key, json_integer((json_int_t)v));
}

static void set_real(json_t *o, const char *key, double v)
{
    json_object_set_new(o, key, json_real(v));
}

static json_t *offload_json(const struct kvsim_offload_summary *o)
{
    if (!o->enabled)
        return json_null();
    static const char *const lane_keys[4] = {"g1_g2", "g2_g3", "g3_g2", "g2_g1"};
    json_t *j = json_object();
    json_t *lanes = json_object();
    for (int l = 0; l < 4; l++) {
        json_t *lj = json_object();
        set_int(lj, "batches", o->lanes[l].batches);
        set_int(lj, "blocks", o->lanes[l].blocks);
        set_int(lj, "bytes", o->lanes[l].bytes);
        set_int(lj, "failed_batches", o->lanes[l].failed);
        set_int(lj, "cancelled_batches", o->lanes[l].cancelled);
        json_object_set_new(lanes, lane_keys[l], lj);
    }
    json_object_set_new(j, "lanes", lanes);
    set_int(j, "g1_miss_blocks", o->g1_miss_blocks);
    set_int(j, "g2_hit_blocks", o->g2_hit_blocks);
    set_int(j, "g3_hit_blocks", o->g3_hit_blocks);
    set_real(j, "g2_hit_rate", o->g2_hit_rate);
    set_real(j, "g3_hit_rate", o->g3_hit_rate);
    set_int(j, "onboarded_tokens", o->onboarded_tokens);
    set_int(j, "recomputed_tokens", o->recomputed_tokens);
    set_int(j, "loads", o->loads);
    set_int(j, "failed_loads", o->failed_loads);
    set_int(j, "blocked_on_offload", o->blocked);
    set_int(j, "retry_now", o->retry_now);
    set_real(j, "blocked_on_offload_ms", (double)o->blocked_ns * 1e-6);
    set_real(j, "onboard_wait_ms", (double)o->onboard_wait_ns * 1e-6);
    set_int(j, "written_g2_blocks", o->written_g2);
    set_int(j, "written_g3_blocks", o->written_g3);
    set_int(j, "filtered_blocks", o->filtered);
    set_int(j, "dropped_blocks", o->dropped);
    set_int(j, "failed_blocks", o->failed_blocks);
    set_int(j, "g2_resident_blocks", o->g2_resident);
    set_int(j, "g3_resident_blocks", o->g3_resident);
    return j;
}

/* The simulated results of one run (executor- and thread-independent). */
static json_t *sim_json(const struct bench_msg *m)
{
    json_t *j = json_object();
    bench_msg_json_add(j, m);
    set_real(j, "prefix_cache_reuse", m->prefix_cache_reuse);
    set_int(j, "first_admission_computed_tokens", first_admission_computed(m));
    set_real(j, "ttft_p50_ms", m->ttft.p50 * 1e-6);
    set_real(j, "ttft_p99_ms", m->ttft.p99 * 1e-6);
    set_real(j, "ttft_mean_ms", m->ttft.mean * 1e-6);
    json_object_set_new(j, "offload", offload_json(&m->offload));
    return j;
}

static void rep_sim_json(json_t *rep, const struct bench_msg *m)
{
    json_object_set_new(rep, "simulation", sim_json(m));
}

static json_t *config_json(const struct bench_suite *s, size_t i)
{
    const struct run_cfg *c = &configs[i];
    json_t *j = bench_config_json(s, i);
    json_object_set_new(j, "configuration", json_string(s->configs[i].label));
    json_object_set_new(j, "tiers", json_string(tiers_label(c->tiers)));
    json_object_set_new(j, "executor", json_string(executor_label(c)));
    set_int(j, "threads", c->threads);
    set_int(j, "g1_blocks", G1_BLOCKS);
    set_int(j, "g2_blocks", g2_blocks_of(c));
    set_int(j, "g3_blocks", g3_blocks_of(c));
    set_int(j, "pool_workers", c->tiers != TIERS_G1 && c->pool ? POOL_WORKERS : 0);
    const struct bench_rep *b = bench_best(&s->configs[i]);
    json_object_set_new(j, "simulation", b ? sim_json(&b->msg) : json_null());
    return j;
}

/* ---- command line ----------------------------------------------------------------------------
 */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: bench_offload [--trace FILE] [--json FILE] [--reps N] [--quick] [--help]\n"
            "\n"
            "Replays a trace on %u engines (kv router, %u-token blocks, G1 of %u blocks per\n"
            "engine) without offload, with a G2 of %u blocks (inline executor), and with G2 +\n"
            "a G3 of %u blocks (inline and pool executors, %u pool workers) at 1 and 2 threads,\n"
            "each run in its own child process. Prints wall time, CPU ns per output token,\n"
            "peak RSS, prefix reuse, G2/G3 hit rates, onboarded vs computed prompt tokens,\n"
            "simulated TTFT, lane traffic, and the ratios with/without G2 and pool/inline.\n"
            "\n"
            "options:\n"
            "  --trace FILE  Mooncake JSONL trace (default %s)\n"
            "  --json FILE   write the results as JSON to FILE (default %s;\n"
            "                missing directories are created)\n"
            "  --reps N      repetitions per configuration, best (fastest) kept (default 1)\n"
            "  --quick       first %u requests (a smoke test: a few seconds)\n"
            "  -h, --help    print this help, then exit\n"
            "\n"
            "exit status: 0, 1 (a run failed, or the G1+G2+G3 runs - inline/pool, 1/2 threads -\n"
            "or the repetitions of a configuration gave different results), 2 (usage error or\n"
            "missing trace)\n",
            NUM_ENGINES, BLOCK_SIZE, G1_BLOCKS, G2_BLOCKS, G3_BLOCKS, POOL_WORKERS, DEFAULT_TRACE,
            DEFAULT_JSON, QUICK_MAX_REQUESTS);
}

/* ---- main ------------------------------------------------------------------------------------
 */

static const struct bench_config *find_config(const struct bench_config *runs,
                                              enum tiers_kind tiers, bool pool, uint32_t threads)
{
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        const struct run_cfg *c = &configs[i];
        if (c->tiers == tiers && c->pool == pool && c->threads == threads)
            return &runs[i];
    }
    return NULL;
}

/* "what  a -> b  b/a" (fmt NULL: a and b with thousands separators); "-" if !have. */
static void print_ratio(const char *what, double a, double b, const char *fmt_ab, bool have)
{
    if (!have) {
        printf("  %-44s -\n", what);
        return;
    }
    char sa[48], sb[48];
    if (fmt_ab) {
        snprintf(sa, sizeof sa, fmt_ab, a);
        snprintf(sb, sizeof sb, fmt_ab, b);
    } else {
        bench_grouped(a, sa, sizeof sa);
        bench_grouped(b, sb, sizeof sb);
    }
    printf("  %-44s %14s -> %14s   %.3fx\n", what, sa, sb, ratio_of(b, a));
}

static json_t *ratio_json(double a, double b)
{
    return json_pack("{s:f, s:f, s:f}", "without", a, "with", b, "ratio", ratio_of(b, a));
}

/* The "wall s, WHAT" and "CPU s, WHAT" ratios of run b over run a; with both runs, also
 * j[key] = {"wall_s", "cpu_s"}. */
static void print_cost(const char *what, const struct bench_rep *ra, const struct bench_rep *rb,
                       json_t *j, const char *key)
{
    bool have = ra && rb;
    struct bench_figures fa = {0}, fb = {0};
    if (have) {
        fa = bench_figures_of(ra);
        fb = bench_figures_of(rb);
    }
    char line[64];
    snprintf(line, sizeof line, "wall s, %s", what);
    print_ratio(line, fa.wall_s, fb.wall_s, "%.3f", have);
    snprintf(line, sizeof line, "CPU s, %s", what);
    print_ratio(line, fa.cpu_s, fb.cpu_s, "%.3f", have);
    if (have)
        json_object_set_new(j, key,
                            json_pack("{s:o, s:o}", "wall_s", ratio_json(fa.wall_s, fb.wall_s),
                                      "cpu_s", ratio_json(fa.cpu_s, fb.cpu_s)));
}

int main(int argc, char **argv)
{
    struct bench_trace_opts opt;
    int rc =
        bench_trace_start(argc, argv, PROG, DEFAULT_TRACE, DEFAULT_JSON, MAX_REPS, usage, &opt);
    if (rc >= 0)
        return rc;
    struct kvsim_replay_config defaults;
    kvsim_replay_config_default(&defaults);
    printf("%u engines, kv router, %u-token blocks; per engine G1 %u blocks (%u usable tokens), "
           "G2 %u, G3 %u blocks\n",
           NUM_ENGINES, BLOCK_SIZE, G1_BLOCKS, (G1_BLOCKS - 1) * BLOCK_SIZE, G2_BLOCKS, G3_BLOCKS);
    printf("block copy %" PRIu64 " KiB, G1<->G2 %.0f GB/s, G2<->G3 %.0f GB/s per direction; pool "
           "executor: %u workers; every run in its own process\n",
           offload_block_bytes(defaults.kv_bytes_per_token, BLOCK_SIZE) / 1024,
           (double)defaults.tiers.pipe.lanes[OFFLOAD_LANE_G1_G2].bandwidth * 1e-9,
           (double)defaults.tiers.pipe.lanes[OFFLOAD_LANE_G2_G3].bandwidth * 1e-9, POOL_WORKERS);

    struct bench_config runs[NUM_CONFIGS];
    struct bench_suite suite = {
        .prog = PROG,
        .opts = &opt,
        .label_width = 18,
        .need_digest = true,
        .ctx = &opt,
        .describe = describe,
        .child = child_main,
        .msg_json = rep_sim_json,
        .num_configs = NUM_CONFIGS,
        .configs = runs,
    };
    bool all_ok = bench_suite_run(&suite);

    /* ---- speed ---- */
    printf("\nspeed (wall: kvsim_replay_run() incl. trace loading; CPU: the child, all threads)\n");
    printf("%-18s %3s %8s %12s %8s %9s %8s %10s\n", "configuration", "thr", "wall s", "CPU ns/tok",
           "CPU s", "CPU/wall", "RSS MiB", "sim/wall");
    bench_print_rule(118);
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        const char *label = runs[i].label;
        const struct bench_rep *b = bench_best(&runs[i]);
        if (!b) {
            printf("%-18s %3u  FAILED\n", label, configs[i].threads);
            continue;
        }
        struct bench_figures f = bench_figures_of(b);
        char spd[32];
        snprintf(spd, sizeof spd, "%.0fx", f.speed);
        printf("%-18s %3u %8.3f %12.1f %8.3f %9.2f %8.1f %10s\n", label, configs[i].threads,
               f.wall_s, f.cpu_ns_per_out_tok, f.cpu_s, ratio_of(f.cpu_s, f.wall_s), f.peak_rss_mib,
               spd);
    }

    /* ---- simulation ---- */
    printf("\nsimulation (virtual time; independent of executor and threads)\n");
    printf("%-18s %3s %7s %7s %7s %7s %12s %13s %11s %11s %9s\n", "configuration", "thr", "preempt",
           "reuse%", "G2 hit%", "G3 hit%", "onboarded", "computed", "TTFT p50ms", "TTFT p99ms",
           "sim s");
    bench_print_rule(118);
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        const char *label = runs[i].label;
        char b1[32], b2[32], b3[40];
        const struct bench_rep *b = bench_best(&runs[i]);
        if (!b) {
            printf("%-18s %3u  FAILED\n", label, configs[i].threads);
            continue;
        }
        const struct bench_msg *m = &b->msg;
        const struct kvsim_offload_summary *o = &m->offload;
        snprintf(b3, sizeof b3, "%s%s", bench_grouped((double)computed_tokens(m), b2, sizeof b2),
                 o->enabled ? " " : "*");
        if (o->enabled)
            printf("%-18s %3u %7" PRIu64 " %7.2f %7.2f %7.2f %12s %13s %11.1f %11.1f %9.1f\n",
                   label, configs[i].threads, m->preemptions, 100.0 * m->prefix_cache_reuse,
                   100.0 * o->g2_hit_rate, 100.0 * o->g3_hit_rate,
                   bench_grouped((double)o->onboarded_tokens, b1, sizeof b1), b3,
                   m->ttft.p50 * 1e-6, m->ttft.p99 * 1e-6, (double)m->duration_ns * 1e-9);
        else
            printf("%-18s %3u %7" PRIu64 " %7.2f %7s %7s %12s %13s %11.1f %11.1f %9.1f\n", label,
                   configs[i].threads, m->preemptions, 100.0 * m->prefix_cache_reuse, "-", "-", "-",
                   b3, m->ttft.p50 * 1e-6, m->ttft.p99 * 1e-6, (double)m->duration_ns * 1e-9);
    }
    const struct bench_rep *base = bench_best(find_config(runs, TIERS_G1, false, 1));
    if (base) {
        char b1[32], b2[32], b3[32];
        printf("every run: %" PRIu64 " requests, %" PRIu64 " completed, %" PRIu64
               " rejected (prompt longer than G1), %s prompt tokens completed, %s output tokens\n",
               base->msg.num_requests, base->msg.completed, base->msg.rejected,
               bench_grouped((double)base->msg.input_tokens, b1, sizeof b1),
               bench_grouped((double)base->msg.output_tokens, b2, sizeof b2));
        printf("reuse: first-admission cached / prompt tokens; hit%%: blocks onboarded from the "
               "tier / G1-miss blocks; computed: prompt tokens computed by steps\n"
               "(* G1 only: no offload section, so input - cached = %s, preemption recompute "
               "left out)\n",
               bench_grouped((double)first_admission_computed(&base->msg), b3, sizeof b3));
    }

    /* ---- lanes ---- */
    printf("\nlane traffic (blocks moved) and onboarding\n");
    printf("%-18s %3s %11s %11s %11s %11s %8s %10s %9s\n", "configuration", "thr",
           offload_lane_name(OFFLOAD_LANE_G1_G2), offload_lane_name(OFFLOAD_LANE_G2_G3),
           offload_lane_name(OFFLOAD_LANE_G3_G2), offload_lane_name(OFFLOAD_LANE_G2_G1), "loads",
           "filtered", "dropped");
    bench_print_rule(118);
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        const char *label = runs[i].label;
        char l0[32], l1[32], l2[32], l3[32], fl[32];
        const struct bench_rep *b = bench_best(&runs[i]);
        if (!b) {
            printf("%-18s %3u  FAILED\n", label, configs[i].threads);
            continue;
        }
        const struct kvsim_offload_summary *o = &b->msg.offload;
        if (!o->enabled) {
            printf("%-18s %3u %11s %11s %11s %11s %8s %10s %9s\n", label, configs[i].threads, "-",
                   "-", "-", "-", "-", "-", "-");
            continue;
        }
        printf("%-18s %3u %11s %11s %11s %11s %8" PRIu64 " %10s %9" PRIu64 "\n", label,
               configs[i].threads, bench_grouped((double)o->lanes[0].blocks, l0, sizeof l0),
               bench_grouped((double)o->lanes[1].blocks, l1, sizeof l1),
               bench_grouped((double)o->lanes[2].blocks, l2, sizeof l2),
               bench_grouped((double)o->lanes[3].blocks, l3, sizeof l3), o->loads,
               bench_grouped((double)o->filtered, fl, sizeof fl), o->dropped);
    }

    /* ---- ratios ---- */
    const struct bench_rep *g2 = bench_best(find_config(runs, TIERS_G2, false, 1));
    const struct bench_rep *g3 = bench_best(find_config(runs, TIERS_G2G3, false, 1));
    const struct bench_config *id_cfgs[4] = {
        find_config(runs, TIERS_G2G3, false, 1),
        find_config(runs, TIERS_G2G3, false, 2),
        find_config(runs, TIERS_G2G3, true, 1),
        find_config(runs, TIERS_G2G3, true, 2),
    };
    json_t *ratios = json_object();
    printf("\nwhat G2 buys (simulated; without = G1 only, with = the tiers; 1 thread)\n");
    bench_print_rule(118);
    const struct {
        const char *name, *key;
        const struct bench_rep *with;
    } tiered[] = {{"G1+G2", "g2", g2}, {"G1+G2+G3", "g2_g3", g3}};
    for (size_t k = 0; k < 2; k++) {
        const struct bench_rep *w = tiered[k].with;
        bool have = base && w;
        char what[64];
        json_t *rj = json_object();
        snprintf(what, sizeof what, "TTFT p50 ms, %s vs G1 only", tiered[k].name);
        double a = have ? base->msg.ttft.p50 * 1e-6 : 0, b = have ? w->msg.ttft.p50 * 1e-6 : 0;
        print_ratio(what, a, b, "%.1f", have);
        if (have)
            json_object_set_new(rj, "ttft_p50_ms", ratio_json(a, b));
        snprintf(what, sizeof what, "TTFT p99 ms, %s vs G1 only", tiered[k].name);
        a = have ? base->msg.ttft.p99 * 1e-6 : 0;
        b = have ? w->msg.ttft.p99 * 1e-6 : 0;
        print_ratio(what, a, b, "%.1f", have);
        if (have)
            json_object_set_new(rj, "ttft_p99_ms", ratio_json(a, b));
        snprintf(what, sizeof what, "computed prompt tokens (input-cached), %s",
                 k == 0 ? "G2" : "G2+G3");
        a = have ? (double)first_admission_computed(&base->msg) : 0;
        b = have ? (double)first_admission_computed(&w->msg) : 0;
        print_ratio(what, a, b, NULL, have);
        if (have) {
            json_object_set_new(rj, "computed_prompt_tokens_input_minus_cached", ratio_json(a, b));
            json_t *cj = ratio_json(a, (double)w->msg.offload.recomputed_tokens);
            json_object_set_new(cj, "note",
                                json_string("with = the engines' recomputed_tokens (preemption "
                                            "recompute included); without = input - cached"));
            json_object_set_new(rj, "recomputed_tokens_vs_baseline_input_minus_cached", cj);
        }
        snprintf(what, sizeof what, "simulated duration s, %s vs G1 only", tiered[k].name);
        a = have ? (double)base->msg.duration_ns * 1e-9 : 0;
        b = have ? (double)w->msg.duration_ns * 1e-9 : 0;
        print_ratio(what, a, b, "%.1f", have);
        if (have)
            json_object_set_new(rj, "simulated_s", ratio_json(a, b));
        json_object_set_new(ratios, tiered[k].key, rj);
    }

    printf("\nwhat the tiers cost the simulator (wall and CPU, 1 thread, inline executor)\n");
    bench_print_rule(118);
    json_t *cost = json_object();
    for (size_t k = 0; k < 2; k++) {
        char what[64];
        snprintf(what, sizeof what, "%s vs G1 only", tiered[k].name);
        print_cost(what, base, tiered[k].with, cost, tiered[k].key);
    }
    json_object_set_new(ratios, "offload_cost", cost);

    printf("\nexecutor and threads (G1+G2+G3)\n");
    bench_print_rule(118);
    json_t *exj = json_object();
    for (uint32_t t = 1; t <= 2; t++) {
        char what[64], key[32];
        snprintf(what, sizeof what, "pool vs inline, %u thread%s", t, t > 1 ? "s" : "");
        snprintf(key, sizeof key, "pool_vs_inline_%u_thread%s", t, t > 1 ? "s" : "");
        print_cost(what, bench_best(find_config(runs, TIERS_G2G3, false, t)),
                   bench_best(find_config(runs, TIERS_G2G3, true, t)), exj, key);
    }
    for (int p = 0; p <= 1; p++) {
        const struct bench_rep *t1 = bench_best(find_config(runs, TIERS_G2G3, p, 1));
        const struct bench_rep *t2 = bench_best(find_config(runs, TIERS_G2G3, p, 2));
        bool have = t1 && t2;
        char what[64];
        double a = have ? bench_figures_of(t1).wall_s : 0,
               b = have ? bench_figures_of(t2).wall_s : 0;
        snprintf(what, sizeof what, "wall s, 2 vs 1 thread, %s", p ? "pool" : "inline");
        print_ratio(what, a, b, "%.3f", have);
        if (have)
            json_object_set_new(
                exj, p ? "threads_2_vs_1_pool" : "threads_2_vs_1_inline",
                json_pack("{s:o, s:f}", "wall_s", ratio_json(a, b), "speedup", ratio_of(a, b)));
    }
    json_object_set_new(ratios, "executor", exj);

    /* ---- issue #14's targets ---- */
    printf("\ntargets (issue #14), measured on this run\n");
    bench_print_rule(100);
    json_t *t14 = json_object();
    const struct bench_rep *g1 = bench_best(find_config(runs, TIERS_G1, false, 1));
    const struct bench_rep *inl = bench_best(find_config(runs, TIERS_G2G3, false, 1));
    const struct bench_rep *pool = bench_best(find_config(runs, TIERS_G2G3, true, 1));
    bool have_i = g1 && inl && g1->msg.wall_ns > 0, have_p = inl && pool && inl->msg.wall_ns > 0;
    bench_target(t14, "g1_g2_g3_inline_vs_g1_only", "G1+G2+G3 inline vs G1 only (wall), 1 thread",
                 have_i, have_i ? (double)inl->msg.wall_ns / (double)g1->msg.wall_ns : 0, true, 2.0,
                 "x");
    bench_target(t14, "pool_vs_inline", "pool executor vs inline (wall), G1+G2+G3, 1 thread",
                 have_p, have_p ? (double)pool->msg.wall_ns / (double)inl->msg.wall_ns : 0, true,
                 1.3, "x");
    json_object_set_new(ratios, "targets_issue_14", t14);

    /* ---- identity ---- */
    bool identical = true;
    uint64_t ref = 0;
    json_t *digests = json_object();
    printf("\nidentical results (G1+G2+G3: inline/pool x 1/2 threads, every repetition): ");
    for (size_t i = 0; i < 4; i++) {
        const struct bench_config *cr = id_cfgs[i];
        const struct bench_rep *b = bench_best(cr);
        if (!b || !cr->ok || !cr->reps_identical) {
            identical = false;
            continue;
        }
        char key[80], dig[32];
        snprintf(key, sizeof key, "%s, %u thread%s", cr->label, cr->threads,
                 cr->threads > 1 ? "s" : "");
        snprintf(dig, sizeof dig, "%016" PRIx64, b->msg.digest);
        json_object_set_new(digests, key, json_string(dig));
        if (ref == 0)
            ref = b->msg.digest;
        else if (b->msg.digest != ref)
            identical = false;
    }
    bool reps_identical = true;
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        reps_identical = reps_identical && runs[i].reps_identical;
    identical = identical && reps_identical;
    printf("%s\n", identical ? "yes" : "NO");
    for (size_t i = 0; i < 4; i++) {
        const struct bench_config *cr = id_cfgs[i];
        const struct bench_rep *b = bench_best(cr);
        if (b)
            printf("  %-18s %u thread%s  digest %016" PRIx64 "%s\n", cr->label, cr->threads,
                   cr->threads > 1 ? "s" : " ", b->msg.digest,
                   cr->reps_identical ? "" : "  (repetitions differ)");
        else
            printf("  %-18s %u thread%s  FAILED\n", cr->label, cr->threads,
                   cr->threads > 1 ? "s" : " ");
    }
    if (!reps_identical)
        printf("  repetitions of some configuration gave different results\n");
    if (base && g2 && (base->msg.preemptions == 0 || g2->msg.offload.g2_hit_blocks == 0))
        printf("note: %s%s: this operating point does not exercise the tiers\n",
               base->msg.preemptions == 0 ? "no preemptions in the G1-only run" : "",
               g2->msg.offload.g2_hit_blocks == 0 ? " no G2 hits" : "");
    if (opt.quick)
        printf("(quick run: %u requests only)\n", QUICK_MAX_REQUESTS);

    /* ---- JSON ---- */
    json_t *root = bench_suite_json_root(&suite);
    json_t *oj = json_object();
    json_object_set_new(oj, "quick", json_boolean(opt.quick));
    set_int(oj, "repetitions", opt.reps);
    json_object_set_new(oj, "statistic", json_string("fastest repetition"));
    set_int(oj, "engines", NUM_ENGINES);
    json_object_set_new(oj, "router", json_string(kvsim_router_policy_name(ROUTER)));
    set_int(oj, "block_size", BLOCK_SIZE);
    set_int(oj, "g1_blocks", G1_BLOCKS);
    set_int(oj, "g2_blocks", G2_BLOCKS);
    set_int(oj, "g3_blocks", G3_BLOCKS);
    set_int(oj, "pool_workers", POOL_WORKERS);
    set_int(oj, "kv_bytes_per_token", defaults.kv_bytes_per_token);
    set_int(oj, "block_bytes", offload_block_bytes(defaults.kv_bytes_per_token, BLOCK_SIZE));
    json_object_set_new(oj, "g1_g2_bytes_per_s",
                        json_integer(defaults.tiers.pipe.lanes[OFFLOAD_LANE_G1_G2].bandwidth));
    json_object_set_new(oj, "g2_g3_bytes_per_s",
                        json_integer(defaults.tiers.pipe.lanes[OFFLOAD_LANE_G2_G3].bandwidth));
    json_object_set_new(root, "options", oj);
    json_object_set_new(root, "trace", bench_trace_json(&opt));
    json_t *jruns = json_array();
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        json_array_append_new(jruns, config_json(&suite, i));
    json_object_set_new(root, "runs", jruns);
    json_object_set_new(root, "ratios", ratios);
    json_object_set_new(root, "digests", digests);
    return bench_suite_finish(&suite, root, all_ok, identical,
                              "executors, thread counts or repetitions");
}
