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
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_util.h"
#include "offload/offload.h"
#include "runtime/replay/replay.h"
#include "runtime/runtime.h"

#ifndef KVSIM_SOURCE_DIR
#error "KVSIM_SOURCE_DIR must be defined (the source tree, to find ../shared/traces)"
#endif

#define DEFAULT_TRACE      KVSIM_SOURCE_DIR "/../shared/traces/conversation_trace.jsonl"
#define PROG               "bench_offload"
#define DEFAULT_JSON       "bench/results/bench_offload.json"
#define NUM_ENGINES        8u
#define QUICK_MAX_REQUESTS 1000u
#define MAX_REPS           100u
#define BLOCK_SIZE         16u
#define G1_BLOCKS          5120u            /* per engine, null block included */
#define G2_BLOCKS          (4u * G1_BLOCKS) /* 20,480 */
#define G3_BLOCKS          (4u * G2_BLOCKS) /* 81,920 */
#define POOL_WORKERS       2u               /* offload_threads of the pool executor */
#define ROUTER             KVSIM_ROUTER_KV

/* ---- options -------------------------------------------------------------------------------- */

struct options {
    const char *trace_path;
    const char *json_path;
    unsigned reps;
    bool quick;
};

/* ---- small utilities ------------------------------------------------------------------------ */

static double ratio_of(double num, double den) { return den != 0 ? num / den : 0.0; }

/* ---- the digest of a report ----------------------------------------------------------------- */

/* Everything of struct kvsim_report except the "wall" fields (num_threads, wall_ns, speed,
 * wall_requests_per_s), field by field (no padding bytes), offload section included, hashed with
 * XXH3-64 (bench_dig_report() and the offload section below). */
static void dig_offload(struct bench_digest *d, const struct kvsim_offload_summary *o)
{
    bench_dig_u64(d, o->enabled ? 1 : 0);
    for (int l = 0; l < 4; l++) {
        bench_dig_u64(d, o->lanes[l].batches);
        bench_dig_u64(d, o->lanes[l].blocks);
        bench_dig_u64(d, o->lanes[l].bytes);
        bench_dig_u64(d, o->lanes[l].failed);
        bench_dig_u64(d, o->lanes[l].cancelled);
    }
    bench_dig_u64(d, o->g1_miss_blocks);
    bench_dig_u64(d, o->g2_hit_blocks);
    bench_dig_u64(d, o->g3_hit_blocks);
    bench_dig_f64(d, o->g2_hit_rate);
    bench_dig_f64(d, o->g3_hit_rate);
    bench_dig_u64(d, o->onboarded_tokens);
    bench_dig_u64(d, o->recomputed_tokens);
    bench_dig_u64(d, o->loads);
    bench_dig_u64(d, o->failed_loads);
    bench_dig_u64(d, o->blocked);
    bench_dig_u64(d, o->retry_now);
    bench_dig_i64(d, o->blocked_ns);
    bench_dig_i64(d, o->onboard_wait_ns);
    bench_dig_u64(d, o->written_g2);
    bench_dig_u64(d, o->written_g3);
    bench_dig_u64(d, o->filtered);
    bench_dig_u64(d, o->dropped);
    bench_dig_u64(d, o->failed_blocks);
    bench_dig_u64(d, o->g2_resident);
    bench_dig_u64(d, o->g3_resident);
}

static uint64_t report_digest(const struct kvsim_report *r)
{
    struct bench_digest d;
    bench_digest_init(&d);
    bench_dig_report(&d, r);
    dig_offload(&d, &r->offload);
    return bench_digest_value(&d);
}

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

/* What a child sends back (a plain struct through a pipe: same binary on both ends). */
struct child_msg {
    int32_t rc; /* 0, or the negative errno of the replay */
    int64_t wall_ns;
    int64_t report_wall_ns;
    int64_t duration_ns; /* simulated: first arrival to last completion */
    uint64_t num_requests, completed, rejected, incomplete, preemptions;
    uint64_t input_tokens, output_tokens, cached_tokens;
    double prefix_cache_reuse;
    struct kvsim_latency ttft; /* ns */
    struct kvsim_offload_summary offload;
    uint64_t digest;
    char err[256];
};

/* One repetition of one configuration, as the parent sees it. */
struct rep_result {
    bool ok;
    struct child_msg msg;
    int64_t utime_ns, stime_ns;
    long maxrss_kib;
    char failure[320];
};

static void child_replay(const struct options *o, const struct run_cfg *c, struct child_msg *msg)
{
    struct kvsim_replay_config cfg;
    kvsim_replay_config_default(&cfg);
    cfg.trace_path = o->trace_path;
    if (o->quick)
        cfg.trace_opts.max_requests = QUICK_MAX_REQUESTS;
    cfg.num_engines = NUM_ENGINES;
    cfg.num_threads = c->threads;
    cfg.router = ROUTER;
    cfg.sched.block_size = BLOCK_SIZE;
    cfg.sched.num_blocks = G1_BLOCKS;
    cfg.quiet = true;
    if (c->tiers != TIERS_G1) {
        cfg.offload = true;
        cfg.tiers.g2_blocks = g2_blocks_of(c);
        cfg.tiers.g3_blocks = g3_blocks_of(c);
        cfg.offload_pool = c->pool;
        cfg.offload_threads = POOL_WORKERS;
    }
    struct kvsim_report rep;
    memset(&rep, 0, sizeof rep);
    int64_t t0 = bench_now_ns();
    int rc = kvsim_replay_run(&cfg, &rep, msg->err, sizeof msg->err);
    msg->wall_ns = bench_now_ns() - t0;
    msg->rc = rc;
    if (rc)
        return;
    if (rep.offload.enabled != cfg.offload) {
        msg->rc = -EPROTO;
        snprintf(msg->err, sizeof msg->err, "the report's offload section is %s",
                 rep.offload.enabled ? "filled without tiers" : "missing");
        return;
    }
    msg->report_wall_ns = rep.wall_ns;
    msg->duration_ns = rep.duration_ns;
    msg->num_requests = rep.num_requests;
    msg->completed = rep.completed;
    msg->rejected = rep.rejected;
    msg->incomplete = rep.incomplete;
    msg->preemptions = rep.preemptions;
    msg->input_tokens = rep.input_tokens;
    msg->output_tokens = rep.output_tokens;
    msg->cached_tokens = rep.cached_tokens;
    msg->prefix_cache_reuse = rep.prefix_cache_reuse;
    msg->ttft = rep.ttft;
    msg->offload = rep.offload;
    msg->digest = report_digest(&rep);
}

struct child_job {
    const struct options *o;
    const struct run_cfg *c;
};

static void child_main(const void *arg, void *msg)
{
    const struct child_job *j = arg;
    child_replay(j->o, j->c, msg);
}

/* Runs one configuration in a child process; fills *res. Returns res->ok. */
static bool run_child(const struct options *o, const struct run_cfg *c, struct rep_result *res)
{
    memset(res, 0, sizeof *res);
    struct child_job job = {o, c};
    struct bench_child_usage ru;
    bool ran = bench_run_forked(child_main, &job, &res->msg, sizeof res->msg, &ru, res->failure,
                                sizeof res->failure);
    res->utime_ns = ru.utime_ns;
    res->stime_ns = ru.stime_ns;
    res->maxrss_kib = ru.maxrss_kib;
    if (!ran)
        return false;
    if (res->msg.rc != 0) {
        res->msg.err[sizeof res->msg.err - 1] = '\0';
        snprintf(res->failure, sizeof res->failure, "%s (%s)",
                 res->msg.err[0] ? res->msg.err : "replay failed", strerror(-res->msg.rc));
        return false;
    }
    if (res->msg.digest == 0) {
        snprintf(res->failure, sizeof res->failure, "report digest overflow");
        return false;
    }
    res->ok = true;
    return true;
}

/* ---- figures ----------------------------------------------------------------------------------
 */

struct figures {
    double wall_s;
    double cpu_s;              /* user + system, all threads of the child */
    double cpu_ns_per_out_tok; /* cpu / output tokens of completed requests */
    double peak_rss_mib;
    double speed; /* simulated s per wall s */
};

static struct figures figures_of(const struct rep_result *r)
{
    struct figures f;
    memset(&f, 0, sizeof f);
    f.wall_s = (double)r->msg.wall_ns * 1e-9;
    f.cpu_s = (double)(r->utime_ns + r->stime_ns) * 1e-9;
    f.peak_rss_mib = (double)r->maxrss_kib / 1024.0;
    if (f.wall_s > 0)
        f.speed = (double)r->msg.duration_ns * 1e-9 / f.wall_s;
    if (r->msg.output_tokens)
        f.cpu_ns_per_out_tok = (double)(r->utime_ns + r->stime_ns) / (double)r->msg.output_tokens;
    return f;
}

/* Prompt tokens of completed requests not served from a cache at first admission: the
 * computed-token measure every run has (the G1-only report has no offload section). */
static uint64_t first_admission_computed(const struct child_msg *m)
{
    return m->input_tokens >= m->cached_tokens ? m->input_tokens - m->cached_tokens : 0;
}

/* The engines' count of computed prompt tokens where there is one, else the measure above. */
static uint64_t computed_tokens(const struct child_msg *m)
{
    return m->offload.enabled ? m->offload.recomputed_tokens : first_admission_computed(m);
}

/* All repetitions of one configuration. */
struct config_result {
    struct run_cfg cfg;
    struct rep_result *reps;
    unsigned num_reps;
    int best; /* index of the fastest successful repetition, -1 if none */
    bool ok;  /* every repetition succeeded */
    bool reps_identical;
};

static void finish_config(struct config_result *cr)
{
    cr->best = -1;
    cr->ok = true;
    cr->reps_identical = true;
    for (unsigned i = 0; i < cr->num_reps; i++) {
        const struct rep_result *r = &cr->reps[i];
        if (!r->ok) {
            cr->ok = false;
            continue;
        }
        if (cr->best < 0) {
            cr->best = (int)i;
            continue;
        }
        const struct rep_result *b = &cr->reps[cr->best];
        if (r->msg.digest != b->msg.digest)
            cr->reps_identical = false;
        if (r->msg.wall_ns < b->msg.wall_ns)
            cr->best = (int)i;
    }
}

static const struct rep_result *best_of(const struct config_result *cr)
{
    return cr && cr->best >= 0 ? &cr->reps[cr->best] : NULL;
}

static const char *config_label(const struct run_cfg *c, char *buf, size_t len)
{
    if (c->tiers == TIERS_G1)
        snprintf(buf, len, "%s", tiers_label(c->tiers));
    else
        snprintf(buf, len, "%s %s", tiers_label(c->tiers), executor_label(c));
    return buf;
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

static json_t *fig_json(const struct figures *f)
{
    json_t *j = json_object();
    set_real(j, "wall_s", f->wall_s);
    set_real(j, "cpu_s", f->cpu_s);
    set_real(j, "cpu_ns_per_output_token", f->cpu_ns_per_out_tok);
    set_real(j, "peak_rss_mib", f->peak_rss_mib);
    set_real(j, "simulated_to_wall_speed", f->speed);
    return j;
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
static json_t *sim_json(const struct child_msg *m)
{
    json_t *j = json_object();
    char dig[32];
    snprintf(dig, sizeof dig, "%016" PRIx64, m->digest);
    json_object_set_new(j, "digest_xxh3", json_string(dig));
    set_int(j, "requests", m->num_requests);
    set_int(j, "completed", m->completed);
    set_int(j, "rejected", m->rejected);
    set_int(j, "incomplete", m->incomplete);
    set_int(j, "preemptions", m->preemptions);
    set_int(j, "input_tokens", m->input_tokens);
    set_int(j, "output_tokens", m->output_tokens);
    set_int(j, "cached_tokens", m->cached_tokens);
    set_real(j, "prefix_cache_reuse", m->prefix_cache_reuse);
    set_int(j, "first_admission_computed_tokens", first_admission_computed(m));
    set_real(j, "ttft_p50_ms", m->ttft.p50 * 1e-6);
    set_real(j, "ttft_p99_ms", m->ttft.p99 * 1e-6);
    set_real(j, "ttft_mean_ms", m->ttft.mean * 1e-6);
    set_real(j, "simulated_s", (double)m->duration_ns * 1e-9);
    json_object_set_new(j, "offload", offload_json(&m->offload));
    return j;
}

static json_t *rep_json(const struct rep_result *r)
{
    if (!r->ok)
        return json_pack("{s:b, s:s}", "ok", 0, "failure", r->failure);
    struct figures f = figures_of(r);
    json_t *j = json_object();
    json_object_set_new(j, "ok", json_true());
    json_object_set_new(j, "figures", fig_json(&f));
    set_real(j, "utime_s", (double)r->utime_ns * 1e-9);
    set_real(j, "stime_s", (double)r->stime_ns * 1e-9);
    set_real(j, "report_wall_s", (double)r->msg.report_wall_ns * 1e-9);
    json_object_set_new(j, "peak_rss_kib", json_integer((json_int_t)r->maxrss_kib));
    json_object_set_new(j, "simulation", sim_json(&r->msg));
    return j;
}

static json_t *config_json(const struct config_result *cr)
{
    const struct run_cfg *c = &cr->cfg;
    json_t *j = json_object();
    char label[64];
    json_object_set_new(j, "configuration", json_string(config_label(c, label, sizeof label)));
    json_object_set_new(j, "tiers", json_string(tiers_label(c->tiers)));
    json_object_set_new(j, "executor", json_string(executor_label(c)));
    set_int(j, "threads", c->threads);
    set_int(j, "g1_blocks", G1_BLOCKS);
    set_int(j, "g2_blocks", g2_blocks_of(c));
    set_int(j, "g3_blocks", g3_blocks_of(c));
    set_int(j, "pool_workers", c->tiers != TIERS_G1 && c->pool ? POOL_WORKERS : 0);
    json_object_set_new(j, "ok", json_boolean(cr->ok));
    json_object_set_new(j, "repetitions_identical", json_boolean(cr->reps_identical));
    const struct rep_result *b = best_of(cr);
    json_object_set_new(j, "best_repetition", b ? json_integer(cr->best) : json_null());
    if (b) {
        struct figures f = figures_of(b);
        json_object_set_new(j, "best", fig_json(&f));
        json_object_set_new(j, "simulation", sim_json(&b->msg));
    } else {
        json_object_set_new(j, "best", json_null());
        json_object_set_new(j, "simulation", json_null());
    }
    json_t *reps = json_array();
    for (unsigned i = 0; i < cr->num_reps; i++)
        json_array_append_new(reps, rep_json(&cr->reps[i]));
    json_object_set_new(j, "repetitions", reps);
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

static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"trace", required_argument, NULL, 't'}, {"json", required_argument, NULL, 'j'},
        {"reps", required_argument, NULL, 'r'},  {"quick", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    o->trace_path = DEFAULT_TRACE;
    o->json_path = DEFAULT_JSON;
    o->reps = 1;
    o->quick = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (bench_opt_path(PROG, "--trace", optarg, &o->trace_path))
                return 2;
            break;
        case 'j':
            if (bench_opt_path(PROG, "--json", optarg, &o->json_path))
                return 2;
            break;
        case 'r':
            if (bench_opt_reps(PROG, optarg, MAX_REPS, &o->reps))
                return 2;
            break;
        case 'q': o->quick = true; break;
        case 'h': usage(stdout); return 1;
        default: return bench_opt_bad(PROG);
        }
    }
    return bench_opt_no_operands(PROG, argc, argv);
}

/* ---- main ------------------------------------------------------------------------------------
 */

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

static const struct config_result *find_config(const struct config_result *crs,
                                               enum tiers_kind tiers, bool pool, uint32_t threads)
{
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        const struct run_cfg *c = &crs[i].cfg;
        if (c->tiers == tiers && c->pool == pool && c->threads == threads)
            return &crs[i];
    }
    return NULL;
}

static void print_rule(void)
{
    printf("%.*s\n", 118,
           "----------------------------------------------------------------------------------"
           "----------------------------------------------------------------------------------");
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

int main(int argc, char **argv)
{
    struct options opt;
    int prc = parse_options(argc, argv, &opt);
    if (prc == 1)
        return 0;
    if (prc)
        return prc;
    if (access(opt.trace_path, R_OK) != 0) {
        fprintf(stderr,
                "bench_offload: trace %s is not readable: %s\n"
                "bench_offload: point --trace at conversation_trace.jsonl (../shared/traces/)\n",
                opt.trace_path, strerror(errno));
        return 2;
    }

    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    struct kvsim_replay_config defaults;
    kvsim_replay_config_default(&defaults);
    printf("bench_offload: %s, allocator %s, %ld CPUs, %s run, best of %u repetition%s\n",
           kvsim_version(), kvsim_allocator(), nproc, opt.quick ? "quick" : "full", opt.reps,
           opt.reps == 1 ? "" : "s");
    printf("trace %s%s\n", opt.trace_path, opt.quick ? " (first 1000 requests)" : "");
    printf("%u engines, kv router, %u-token blocks; per engine G1 %u blocks (%u usable tokens), "
           "G2 %u, G3 %u blocks\n",
           NUM_ENGINES, BLOCK_SIZE, G1_BLOCKS, (G1_BLOCKS - 1) * BLOCK_SIZE, G2_BLOCKS, G3_BLOCKS);
    printf("block copy %" PRIu64 " KiB, G1<->G2 %.0f GB/s, G2<->G3 %.0f GB/s per direction; pool "
           "executor: %u workers; every run in its own process\n",
           offload_block_bytes(defaults.kv_bytes_per_token, BLOCK_SIZE) / 1024,
           (double)defaults.tiers.pipe.lanes[OFFLOAD_LANE_G1_G2].bandwidth * 1e-9,
           (double)defaults.tiers.pipe.lanes[OFFLOAD_LANE_G2_G3].bandwidth * 1e-9, POOL_WORKERS);

    struct config_result crs[NUM_CONFIGS];
    memset(crs, 0, sizeof crs);
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        crs[i].cfg = configs[i];
        crs[i].num_reps = opt.reps;
        crs[i].reps = calloc(opt.reps, sizeof *crs[i].reps);
        if (!crs[i].reps) {
            fprintf(stderr, "bench_offload: out of memory\n");
            return 1;
        }
    }
    long parent_rss_kib = bench_peak_rss_kib();

    bool all_ok = true;
    for (unsigned rep = 0; rep < opt.reps; rep++) {
        for (size_t i = 0; i < NUM_CONFIGS; i++) {
            char label[64];
            config_label(&configs[i], label, sizeof label);
            struct rep_result *r = &crs[i].reps[rep];
            if (run_child(&opt, &configs[i], r)) {
                fprintf(stderr, "  rep %u/%u  %-18s %u thread%s  %7.3f s\n", rep + 1, opt.reps,
                        label, configs[i].threads, configs[i].threads > 1 ? "s" : " ",
                        (double)r->msg.wall_ns * 1e-9);
            } else {
                fprintf(stderr, "bench_offload: %s, %u thread(s): %s\n", label, configs[i].threads,
                        r->failure);
                all_ok = false;
            }
        }
    }
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        finish_config(&crs[i]);
        all_ok = all_ok && crs[i].ok;
    }

    /* ---- speed ---- */
    printf("\nspeed (wall: kvsim_replay_run() incl. trace loading; CPU: the child, all threads)\n");
    printf("%-18s %3s %8s %12s %8s %9s %8s %10s\n", "configuration", "thr", "wall s", "CPU ns/tok",
           "CPU s", "CPU/wall", "RSS MiB", "sim/wall");
    print_rule();
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        char label[64];
        config_label(&configs[i], label, sizeof label);
        const struct rep_result *b = best_of(&crs[i]);
        if (!b) {
            printf("%-18s %3u  FAILED\n", label, configs[i].threads);
            continue;
        }
        struct figures f = figures_of(b);
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
    print_rule();
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        char label[64], b1[32], b2[32], b3[40];
        config_label(&configs[i], label, sizeof label);
        const struct rep_result *b = best_of(&crs[i]);
        if (!b) {
            printf("%-18s %3u  FAILED\n", label, configs[i].threads);
            continue;
        }
        const struct child_msg *m = &b->msg;
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
    const struct rep_result *base = best_of(find_config(crs, TIERS_G1, false, 1));
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
    print_rule();
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        char label[64], l0[32], l1[32], l2[32], l3[32], fl[32];
        config_label(&configs[i], label, sizeof label);
        const struct rep_result *b = best_of(&crs[i]);
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
    const struct rep_result *g2 = best_of(find_config(crs, TIERS_G2, false, 1));
    const struct rep_result *g3 = best_of(find_config(crs, TIERS_G2G3, false, 1));
    const struct config_result *id_cfgs[4] = {
        find_config(crs, TIERS_G2G3, false, 1),
        find_config(crs, TIERS_G2G3, false, 2),
        find_config(crs, TIERS_G2G3, true, 1),
        find_config(crs, TIERS_G2G3, true, 2),
    };
    json_t *ratios = json_object();
    printf("\nwhat G2 buys (simulated; without = G1 only, with = the tiers; 1 thread)\n");
    print_rule();
    const struct {
        const char *name, *key;
        const struct rep_result *with;
    } tiered[] = {{"G1+G2", "g2", g2}, {"G1+G2+G3", "g2_g3", g3}};
    for (size_t k = 0; k < 2; k++) {
        const struct rep_result *w = tiered[k].with;
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
    print_rule();
    json_t *cost = json_object();
    for (size_t k = 0; k < 2; k++) {
        const struct rep_result *w = tiered[k].with;
        bool have = base && w;
        char what[64];
        double a = 0, b = 0, ca = 0, cb = 0;
        if (have) {
            struct figures fa = figures_of(base), fb = figures_of(w);
            a = fa.wall_s;
            b = fb.wall_s;
            ca = fa.cpu_s;
            cb = fb.cpu_s;
        }
        snprintf(what, sizeof what, "wall s, %s vs G1 only", tiered[k].name);
        print_ratio(what, a, b, "%.3f", have);
        snprintf(what, sizeof what, "CPU s, %s vs G1 only", tiered[k].name);
        print_ratio(what, ca, cb, "%.3f", have);
        if (have)
            json_object_set_new(
                cost, tiered[k].key,
                json_pack("{s:o, s:o}", "wall_s", ratio_json(a, b), "cpu_s", ratio_json(ca, cb)));
    }
    json_object_set_new(ratios, "offload_cost", cost);

    printf("\nexecutor and threads (G1+G2+G3)\n");
    print_rule();
    json_t *exj = json_object();
    for (uint32_t t = 1; t <= 2; t++) {
        const struct rep_result *in = best_of(find_config(crs, TIERS_G2G3, false, t));
        const struct rep_result *po = best_of(find_config(crs, TIERS_G2G3, true, t));
        bool have = in && po;
        char what[64];
        double a = 0, b = 0, ca = 0, cb = 0;
        if (have) {
            struct figures fa = figures_of(in), fb = figures_of(po);
            a = fa.wall_s;
            b = fb.wall_s;
            ca = fa.cpu_s;
            cb = fb.cpu_s;
        }
        snprintf(what, sizeof what, "wall s, pool vs inline, %u thread%s", t, t > 1 ? "s" : "");
        print_ratio(what, a, b, "%.3f", have);
        snprintf(what, sizeof what, "CPU s, pool vs inline, %u thread%s", t, t > 1 ? "s" : "");
        print_ratio(what, ca, cb, "%.3f", have);
        if (have) {
            char key[32];
            snprintf(key, sizeof key, "pool_vs_inline_%u_thread%s", t, t > 1 ? "s" : "");
            json_object_set_new(
                exj, key,
                json_pack("{s:o, s:o}", "wall_s", ratio_json(a, b), "cpu_s", ratio_json(ca, cb)));
        }
    }
    for (int p = 0; p <= 1; p++) {
        const struct rep_result *t1 = best_of(find_config(crs, TIERS_G2G3, p, 1));
        const struct rep_result *t2 = best_of(find_config(crs, TIERS_G2G3, p, 2));
        bool have = t1 && t2;
        char what[64];
        double a = have ? figures_of(t1).wall_s : 0, b = have ? figures_of(t2).wall_s : 0;
        snprintf(what, sizeof what, "wall s, 2 vs 1 thread, %s", p ? "pool" : "inline");
        print_ratio(what, a, b, "%.3f", have);
        if (have)
            json_object_set_new(
                exj, p ? "threads_2_vs_1_pool" : "threads_2_vs_1_inline",
                json_pack("{s:o, s:f}", "wall_s", ratio_json(a, b), "speedup", ratio_of(a, b)));
    }
    json_object_set_new(ratios, "executor", exj);

    /* ---- identity ---- */
    bool identical = true;
    uint64_t ref = 0;
    json_t *digests = json_object();
    printf("\nidentical results (G1+G2+G3: inline/pool x 1/2 threads, every repetition): ");
    for (size_t i = 0; i < 4; i++) {
        const struct config_result *cr = id_cfgs[i];
        const struct rep_result *b = best_of(cr);
        if (!b || !cr->ok || !cr->reps_identical) {
            identical = false;
            continue;
        }
        char label[64], key[80], dig[32];
        config_label(&cr->cfg, label, sizeof label);
        snprintf(key, sizeof key, "%s, %u thread%s", label, cr->cfg.threads,
                 cr->cfg.threads > 1 ? "s" : "");
        snprintf(dig, sizeof dig, "%016" PRIx64, b->msg.digest);
        json_object_set_new(digests, key, json_string(dig));
        if (ref == 0)
            ref = b->msg.digest;
        else if (b->msg.digest != ref)
            identical = false;
    }
    bool reps_identical = true;
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        reps_identical = reps_identical && crs[i].reps_identical;
    identical = identical && reps_identical;
    printf("%s\n", identical ? "yes" : "NO");
    for (size_t i = 0; i < 4; i++) {
        const struct config_result *cr = id_cfgs[i];
        const struct rep_result *b = best_of(cr);
        char label[64];
        config_label(&cr->cfg, label, sizeof label);
        if (b)
            printf("  %-18s %u thread%s  digest %016" PRIx64 "%s\n", label, cr->cfg.threads,
                   cr->cfg.threads > 1 ? "s" : " ", b->msg.digest,
                   cr->reps_identical ? "" : "  (repetitions differ)");
        else
            printf("  %-18s %u thread%s  FAILED\n", label, cr->cfg.threads,
                   cr->cfg.threads > 1 ? "s" : " ");
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
    json_t *root = json_object();
    json_object_set_new(root, "benchmark", json_string("bench_offload"));
    json_object_set_new(root, "version", json_string(kvsim_version()));
    json_object_set_new(root, "date", json_string(date));
    json_t *machine = bench_machine_json();
    json_object_set_new(machine, "parent_peak_rss_kib_at_first_fork", json_integer(parent_rss_kib));
    json_object_set_new(root, "machine", machine);
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
    json_t *tj = json_pack("{s:s, s:I}", "path", opt.trace_path, "max_requests",
                           (json_int_t)(opt.quick ? QUICK_MAX_REQUESTS : 0));
    char *resolved = realpath(opt.trace_path, NULL);
    if (resolved) {
        json_object_set_new(tj, "resolved_path", json_string(resolved));
        free(resolved);
    }
    json_object_set_new(root, "trace", tj);
    json_t *runs = json_array();
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        json_array_append_new(runs, config_json(&crs[i]));
    json_object_set_new(root, "runs", runs);
    json_object_set_new(root, "ratios", ratios);
    json_object_set_new(root, "digests", digests);
    json_object_set_new(root, "identical", json_boolean(identical));
    bool ok = all_ok && identical;
    json_object_set_new(root, "ok", json_boolean(ok));

    if (!bench_write_results("bench_offload", root, opt.json_path, true))
        ok = false;
    json_decref(root);
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        free(crs[i].reps);
    if (!ok)
        fprintf(stderr, "bench_offload: FAILED%s\n",
                identical ? ""
                          : " (results differ between executors, thread counts or repetitions)");
    return ok ? 0 : 1;
}
