/*
 * replay.c - the multi-engine replay (replay.h): N engines on T worker threads behind a router,
 * in virtual time. This file is the run's coordinator: validate the configuration, load the
 * requests, set up (routers, engines, inboxes, sessions), run the epochs (epochs.c), summarize
 * and write (summarize.c), tear down.
 *
 * The rooms: epochs.c (boundaries, the epoch loops, the early end), threads.c (the barrier, the
 * workers, the phases and whether threads pay), routing.c (the router, deployments, route
 * preparation), arrivals.c (open and closed loop, sessions), accounting.c (thread accounting),
 * summarize.c (the report and the outputs), disagg.c (the disaggregated coordinator). Calls run
 * one way: replay.c -> epochs.c -> threads.c, disagg.c -> routing.c -> arrivals.c; accounting.c
 * and summarize.c are called, never call back (docs/architecture.md, section 4).
 *
 * Threads: kvsim_replay_run on the caller's thread, which becomes the coordinator (thread 0).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <urcu/wfcqueue.h>

#include "runtime/replay/replay_internal.h"

#include "kvpool/base.h"
#include "kvpool/kvpool.h"
#include "runtime/engine/engine.h"
#include "runtime/input/input.h"
#include "runtime/kvsim.h" /* the error codes (KVSIM_E*, kvsim_strerror) */
#include "runtime/replay/replay.h"
#include "runtime/report/report.h"

static void replay_free(struct replay *rp)
{
    kvsim_tier_topology_coordinator_offline(rp->tiers); /* pipelines may wait for the pool */
    for (uint32_t e = 0; rp->engines && e < rp->num_engines; e++)
        kvsim_engine_destroy(rp->engines[e]);
    kvsim_tier_topology_destroy(rp->tiers);
    rp->tiers = NULL;
    free(rp->engines);
    free(rp->pubs);
    free(rp->pools);
    free(rp->rt.inbox_head);
    free(rp->rt.inbox_tail);
    free(rp->rt.nodes);
    free(rp->engine_rc);
    free(rp->acct.thr);
    for (uint32_t w = 0; rp->thr.workers && w < rp->num_threads; w++)
        free(rp->thr.workers[w].runs);
    free(rp->thr.claim);
    free(rp->thr.admitting);
    free(rp->thr.workers);
    for (int k = 0; k < 2; k++) {
        struct route_prep *p = &rp->rt.prep[k];
        free(p->reqs);
        free(p->num_hashes);
        free(p->off);
        free(p->hashed);
        free(p->hashes);
        free(p->ov);
    }
    free(rp->rt.prep_slot);
    free(rp->rt.arrived);
    free(rp->rt.arrived_left);
    free(rp->rt.arrive_at);
    free(rp->rt.arrived_first);
    free(rp->acct.engine_ns);
    free(rp->acct.thread_sum);
    free(rp->arr.next_turn);
    free(rp->arr.releases);
    free(rp->arr.slot_parent);
    free(rp->arr.freed);
    free(rp->arr.heap);
    free(rp->rt.runs);
    free(rp->rt.hashes);
    for (uint32_t e = 0; rp->rt.routed_hashes && e < rp->num_engines; e++) {
        free(rp->rt.routed_hashes[e].hashes);
        free(rp->rt.routed_hashes[e].ent);
    }
    free(rp->rt.routed_hashes);
    kvsim_router_destroy(rp->rt.router);
    for (uint32_t d = 0; rp->rt.lb && d < rp->num_deployments; d++)
        kvsim_router_destroy(rp->rt.lb[d]);
    free(rp->rt.lb);
    free(rp->rt.dep_pub);
    free(rp->rt.dep_pubs);
    free(rp->lockstep);
    replay__disagg_free(rp);
    kvsim_metrics_destroy(rp->metrics);
    kvsim_trace_free(&rp->trace);
}

/* The configuration of engine e: its pool's scheduler settings and role. */
static void engine_config(const struct replay *rp, uint32_t e, struct kvsim_engine_config *ec)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    ec->sched = cfg->sched;
    if (rp->num_prefill) {
        bool prefill = e < rp->num_prefill;
        ec->sched = prefill ? cfg->disagg.prefill_sched : cfg->disagg.decode_sched;
        ec->role = prefill ? KVSIM_ENGINE_PREFILL : KVSIM_ENGINE_DECODE;
        ec->disagg = &rp->dis.disagg;
    }
    if (replay__route_delayed(rp, e)) { /* its router hears of its steps' ends, delayed */
        ec->kv_events = true;
        ec->step_sink = &rp->rt.sink;
    }
}

/*
 * Creating the engines is mostly allocating and zeroing their pools (page faults: 14 ms of a
 * 0.4 s replay of the conversation trace on 8 engines). With threads to share it, and engines
 * that share nothing while they are made (no offload: its pipelines share the offload pool), the
 * replay's thread count of short-lived threads each make engines w, w + T, ... (the engine
 * threads of the replay, started later, take the same ones). Returns 0 or the first failing
 * engine's error, in engine order, whatever the thread count (coordinator).
 */
struct create_job {
    struct replay *rp;
    const struct kvsim_engine_config *base;
    int *rc;       /* [engines] */
    uint32_t w, T; /* engines w, w + T, ... */
};

static void create_engines_of(const struct create_job *j)
{
    struct replay *rp = j->rp;
    for (uint32_t e = j->w; e < rp->num_engines; e += j->T) {
        struct kvsim_engine_config ec = *j->base;
        ec.id = e;
        ec.thread = e; /* its ITL sketch */
        engine_config(rp, e, &ec);
        j->rc[e] = kvsim_engine_create(&ec, &rp->engines[e]);
    }
}

static void *create_engines_main(void *arg)
{
    create_engines_of(arg);
    return NULL;
}

static int create_engines(struct replay *rp, const struct kvsim_engine_config *base, bool shareable)
{
    uint32_t T = shareable ? rp->num_threads : 1;
    int *rc = calloc(rp->num_engines, sizeof *rc);
    pthread_t *th = calloc(T, sizeof *th);
    struct create_job *jobs = calloc(T, sizeof *jobs);
    int result = rc && th && jobs ? 0 : -ENOMEM;
    uint32_t started = 1;
    for (uint32_t w = 0; result == 0 && w < T; w++)
        jobs[w] = (struct create_job){rp, base, rc, w, T};
    if (result == 0 && T > 1) {
        for (; started < T; started++)
            if (pthread_create(&th[started], NULL, create_engines_main, &jobs[started]) != 0)
                break;
    }
    if (result == 0) {
        if (started < T) { /* fewer threads than asked: the coordinator makes the rest */
            for (uint32_t w = started; w < T; w++)
                create_engines_of(&jobs[w]);
        }
        create_engines_of(&jobs[0]);
        for (uint32_t w = 1; w < started; w++)
            pthread_join(th[w], NULL);
        for (uint32_t e = 0; e < rp->num_engines && result == 0; e++)
            result = rc[e];
    }
    free(rc);
    free(th);
    free(jobs);
    return result;
}

/* A deep copy of t (an in-memory request list). Returns 0, -EINVAL (empty) or -ENOMEM. */
static int copy_trace(const struct kvsim_trace *t, struct kvsim_trace *out, char *err,
                      size_t errlen)
{
    *out = *t;
    out->reqs = NULL;
    out->hash_ids = NULL;
    if (t->num_reqs == 0) {
        snprintf(err, errlen, "no requests to replay");
        return -EINVAL;
    }
    out->reqs = malloc(t->num_reqs * sizeof *out->reqs);
    out->hash_ids = malloc((t->num_hash_ids ? t->num_hash_ids : 1) * sizeof *out->hash_ids);
    if (!out->reqs || !out->hash_ids) {
        kvsim_trace_free(out);
        return -ENOMEM;
    }
    memcpy(out->reqs, t->reqs, t->num_reqs * sizeof *out->reqs);
    if (t->num_hash_ids)
        memcpy(out->hash_ids, t->hash_ids, t->num_hash_ids * sizeof *out->hash_ids);
    return 0;
}

/* ---- the run: validate, load, set up, run, summarize, write ---------------------------------- */

/* What cfg asks for that no replay can do (the option layer refuses most of it first; a library
 * caller may not have gone through it). Returns 0 or -EINVAL with the message. */
static int replay_validate(const struct kvsim_replay_config *cfg, char *err, size_t errlen)
{
    const char *why = NULL;
    if (cfg->num_engines == 0 || cfg->num_threads == 0)
        why = "--engines and --threads must be at least 1";
    else if (kvsim_outputs_want_timeseries(&cfg->outputs) && cfg->timeseries_interval_ns <= 0)
        why = "--timeseries-interval-ms must be at least 1 ns";
    else if (cfg->g3_shared && (!cfg->offload || cfg->tiers.g3_blocks == 0))
        why = "a shared G3 needs offload tiers and a G3 capacity > 0";
    else if (cfg->disagg.prefill_engines &&
             (!cfg->disagg.decode_engines || cfg->offload || !(cfg->disagg.transfer.gbps > 0)))
        why = "disaggregated serving needs prefill and decode engines, a link bandwidth > 0 and "
              "no offload tiers";
    if (why) {
        snprintf(err, errlen, "%s", why);
        return -EINVAL;
    }
    if (cfg->data_parallel_size <= 1)
        return 0;
    why =
        cfg->disagg.prefill_engines
            ? "data parallelism and disaggregated serving do not combine yet"
        : (uint64_t)cfg->num_engines * cfg->data_parallel_size > 4096
            ? "deployments x ranks is above 4,096 engines"
        : cfg->offload && cfg->model.profile && kvsim_profile_arch(cfg->model.profile)->num_experts
            ? "a mixture-of-experts model's ranks step in lockstep, which kvsim does not "
              "model with offload tiers yet"
        : cfg->kv_index_events && cfg->router == KVSIM_ROUTER_KV
            ? "--kv-index events indexes engines, not data-parallel deployments (use pool)"
        : cfg->router_view == KVSIM_ROUTER_VIEW_EXACT && cfg->router_predict_ttl_ns > 0
            ? "--router-predict-ttl-s over data-parallel deployments needs --router-view delayed "
              "(the exact view reads the ranks' pools)"
            : NULL;
    if (why) {
        snprintf(err, errlen, "--data-parallel-size %u: %s", cfg->data_parallel_size, why);
        return -EINVAL;
    }
    return 0;
}

/* The requests: the trace file, the caller's requests (copied) or the synthetic workload.
 * Returns 0 or a negative errno with the message. */
static int replay_load(struct replay *rp, char *err, size_t errlen)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    if (cfg->trace_path)
        return kvsim_trace_load(cfg->trace_path, &cfg->trace_opts, &rp->trace, err, errlen);
    if (cfg->requests)
        return copy_trace(cfg->requests, &rp->trace, err, errlen);
    struct kvsim_synth_opts so = cfg->synth;
    so.seed = cfg->seed;
    return kvsim_workload_synthetic(&so, &rp->trace, err, errlen);
}

/* How many engines (deployments x ranks, or prefill + decode) on how many threads. */
static void setup_counts(struct replay *rp)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    rp->num_engines = cfg->num_engines;
    rp->dp = cfg->data_parallel_size > 1 ? cfg->data_parallel_size : 1;
    if (rp->dp > 1) {
        rp->num_deployments = cfg->num_engines;
        rp->num_engines = cfg->num_engines * rp->dp;
    }
    if (cfg->disagg.prefill_engines) {
        rp->num_prefill = cfg->disagg.prefill_engines;
        rp->num_decode = cfg->disagg.decode_engines;
        rp->num_engines = rp->num_prefill + rp->num_decode;
    }
    rp->num_threads = cfg->num_threads < rp->num_engines ? cfg->num_threads : rp->num_engines;
    /* More threads than CPUs only add wake-ups: unless KVSIM_REPLAY_OVERSUBSCRIBE=1 the replay
     * runs on at most as many threads as this process may use CPUs (docs/replay.md); the
     * report's wall.threads says how many ran. Results are the same for any count. */
    const char *over = getenv("KVSIM_REPLAY_OVERSUBSCRIBE");
    uint32_t cpus = replay__cpus();
    if (cpus && rp->num_threads > cpus && !(over && *over && strcmp(over, "0") != 0))
        rp->num_threads = cpus;
}

/* Whether environment variable name is set to something other than "0". */
static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* The metrics, the routers and the replay's own arrays. Returns 0 or -ENOMEM (-EINVAL from a
 * router). */
static int setup_state(struct replay *rp)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    size_t R = rp->trace.num_reqs, R1 = R ? R : 1;
    uint32_t E = rp->num_engines;
    /* One ITL sketch per engine: any replay thread may advance any engine (work). */
    int rc = kvsim_metrics_create((uint32_t)R, E, &rp->metrics);
    if (rc == 0 && rp->num_prefill)
        rc = kvsim_router_create(cfg->disagg.prefill_router, rp->num_prefill, cfg->overlap_weight,
                                 &rp->rt.router);
    else if (rc == 0)
        rc = kvsim_router_create(cfg->router, rp->dp > 1 ? rp->num_deployments : E,
                                 cfg->overlap_weight, &rp->rt.router);
    if (rc == 0 && rp->dp > 1) {
        rp->rt.lb = calloc(rp->num_deployments, sizeof *rp->rt.lb);
        rp->rt.dep_pub = calloc(rp->num_deployments, sizeof *rp->rt.dep_pub);
        rp->rt.dep_pubs = calloc(rp->num_deployments, sizeof *rp->rt.dep_pubs);
        if (!rp->rt.lb || !rp->rt.dep_pub || !rp->rt.dep_pubs)
            rc = -ENOMEM;
        for (uint32_t d = 0; rc == 0 && d < rp->num_deployments; d++) {
            rp->rt.dep_pubs[d] = &rp->rt.dep_pub[d];
            rc = kvsim_router_create(KVSIM_ROUTER_DP_LB, rp->dp, 0, &rp->rt.lb[d]);
        }
    }
    if (rc)
        return rc;
    rp->rt.drain_events =
        cfg->kv_index_events && (rp->num_prefill ? cfg->disagg.prefill_router == KVSIM_ROUTER_KV ||
                                                       cfg->disagg.decode_router == KVSIM_ROUTER_KV
                                                 : cfg->router == KVSIM_ROUTER_KV);
    rp->rt.view_indexer = env_on("KVSIM_REPLAY_VIEW_INDEXER");
    if ((rc = replay__route_view(rp, rp->rt.router, &rp->rt.delayed[0])) != 0)
        return rc;
    /* the decode router comes after the engines (it reads their pools), its engines before */
    rp->rt.delayed[1] = rp->num_prefill && rp->num_decode > 1 &&
                        cfg->router_view == KVSIM_ROUTER_VIEW_DELAYED &&
                        (cfg->disagg.decode_router == KVSIM_ROUTER_KV ||
                         cfg->disagg.decode_router == KVSIM_ROUTER_LEAST_LOADED);
    rp->arr.concurrency = cfg->replay_concurrency;
    /* Thread accounting: off unless asked for (then two clock reads per engine advance and per
     * barrier); when off it costs one predictable branch at each. */
    rp->acct.on = env_on("KVSIM_REPLAY_ACCOUNTING");
    /* Route preparation (aggregated, kv router, engines to choose from): the same decisions,
     * computed in the phases. On with threads to share it (on 1 thread it only moves the work,
     * and measured 5-10 % slower: its lookups leave the caches later), and with the accounting,
     * whose bounds are of a run on several threads. KVSIM_REPLAY_ROUTE_PREP=0 or 1 overrides
     * (to compare; reports are identical). */
    const char *prep_env = getenv("KVSIM_REPLAY_ROUTE_PREP");
    rp->rt.prep_on =
        !rp->num_prefill && rp->dp == 1 && cfg->router == KVSIM_ROUTER_KV && E > 1 &&
        /* it looks up each engine at the boundary, once its owner released what the delayed
         * view hears of by then; predictions are made at the boundary itself */
        !rp->rt.predicts &&
        (prep_env && *prep_env ? strcmp(prep_env, "0") != 0 : rp->num_threads > 1 || rp->acct.on);
    rp->rt.prep[0].boundary = rp->rt.prep[1].boundary = INT64_MIN;
    /* Admitting and advancing in one phase with session turns in flight
     * (next_boundary_admitting); KVSIM_REPLAY_ADMIT_MERGED=0 admits first, then advances (to
     * compare: the reports are identical). */
    const char *merged_env = getenv("KVSIM_REPLAY_ADMIT_MERGED");
    rp->ep.admit_merged = !(merged_env && strcmp(merged_env, "0") == 0);
    /* Windows (epochs.c): arrivals routed ahead of their instant, as far as what the router
     * sees allows, in an aggregated replay whose boundaries carry nothing else (one engine a
     * deployment, no shared G3, no closed loop). Not for the kv router with route preparation:
     * a window's arrival is looked up on the coordinator (the phase prepared the engines as
     * of the boundary, not of its instant), which on 64 engines made half the run serial.
     * KVSIM_REPLAY_WINDOWS=0 turns them off (to compare: the reports are identical). */
    bool kv = cfg->router == KVSIM_ROUTER_KV;
    const char *win_env = getenv("KVSIM_REPLAY_WINDOWS");
    bool windows = !rp->num_prefill && rp->dp == 1 && !cfg->g3_shared && !rp->arr.concurrency &&
                   rp->ep.admit_merged && !(win_env && strcmp(win_env, "0") == 0);
    if (windows && (cfg->router == KVSIM_ROUTER_ROUND_ROBIN || E == 1))
        rp->ep.lookahead_ns = INT64_MAX; /* it reads no engine, or has one choice */
    else if (windows && rp->rt.delayed[0] && (!rp->rt.prep_on || !kv))
        rp->ep.lookahead_ns = cfg->kv_event_delay_ns;
    bool ok = (rp->engines = calloc(E, sizeof *rp->engines)) &&
              (rp->pubs = calloc(E, sizeof *rp->pubs)) &&
              (rp->pools = calloc(E, sizeof *rp->pools)) &&
              (rp->rt.routed_hashes = aligned_alloc(64, E * sizeof *rp->rt.routed_hashes)) &&
              memset(rp->rt.routed_hashes, 0, E * sizeof *rp->rt.routed_hashes) &&
              (rp->rt.inbox_head = calloc(E, sizeof *rp->rt.inbox_head)) &&
              (rp->rt.inbox_tail = calloc(E, sizeof *rp->rt.inbox_tail)) &&
              (rp->rt.nodes = calloc(R1, sizeof *rp->rt.nodes)) &&
              (rp->engine_rc = calloc(E, sizeof *rp->engine_rc)) &&
              (rp->arr.next_turn = malloc(R1 * sizeof *rp->arr.next_turn)) &&
              (rp->arr.releases = malloc(R1 * sizeof *rp->arr.releases)) &&
              (rp->arr.slot_parent = calloc(R1, 1)) &&
              (rp->rt.arrived_left = calloc(E, sizeof *rp->rt.arrived_left)) &&
              (rp->rt.arrive_at = malloc(R1 * sizeof *rp->rt.arrive_at)) &&
              (rp->rt.arrived_first = calloc(E, sizeof *rp->rt.arrived_first)) &&
              (!rp->rt.prep_on || (rp->rt.prep_slot = calloc(R1, sizeof *rp->rt.prep_slot))) &&
              (rp->thr.workers = calloc(rp->num_threads, sizeof *rp->thr.workers)) &&
              /* phase_seq starts at 0: unclaimed */
              (rp->thr.claim = calloc(E, sizeof *rp->thr.claim)) &&
              (rp->thr.admitting = calloc(E, sizeof *rp->thr.admitting));
    if (ok && rp->acct.on)
        ok = (rp->acct.thr = calloc(rp->num_threads, sizeof *rp->acct.thr)) &&
             (rp->acct.engine_ns = calloc(E, sizeof *rp->acct.engine_ns)) &&
             (rp->acct.thread_sum =
                  calloc(1u << (KVSIM_ACCOUNTING_BOUNDS - 1), sizeof *rp->acct.thread_sum));
    return ok ? 0 : -ENOMEM;
}

/* The offload tiers (kvsim_tier_topology) and the engines, then what needs the engines (their
 * published loads and pools for the routers, the disaggregated handoffs). Returns 0 or a
 * negative errno (err set when known). */
static int setup_engines(struct replay *rp, char *err, size_t errlen)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    int rc = 0;
    if (cfg->offload) {
        struct kvsim_tier_topology_config tc = {
            .tiers = cfg->tiers,
            .kv_bytes_per_token = cfg->kv_bytes_per_token,
            .block_size = cfg->sched.block_size,
            .pool = cfg->offload_pool,
            .pool_threads = cfg->offload_threads,
            .g3_shared = cfg->g3_shared,
            .num_engines = rp->num_engines,
            .vtime0 = replay__next_arrival(rp),
        };
        if ((rc = kvsim_tier_topology_create(&tc, &rp->tiers, err, errlen)))
            return rc;
    }
    bool releases = cfg->replay_concurrency > 0; /* some finish releases a turn or a session */
    for (size_t i = 0; i < rp->trace.num_reqs && !releases; i++)
        releases = rp->trace.reqs[i].prev_turn >= 0;
    struct kvsim_engine_config base_ec = {
        .model = cfg->model,
        .trace = &rp->trace,
        .metrics = rp->metrics,
        .kv_events = rp->rt.drain_events,
        .next_turn = releases ? rp->arr.releases : NULL, /* NULL: no finish releases anything */
        .tiers = rp->tiers ? kvsim_tier_topology_engine_tiers(rp->tiers) : NULL,
        .sample_interval_ns =
            kvsim_outputs_want_timeseries(&cfg->outputs) ? cfg->timeseries_interval_ns : 0,
        .sample_origin_ns = rp->trace.reqs[0].arrival_ns,
        .decode_fast_path_off = cfg->decode_fast_path_off,
    };
    rc = create_engines(rp, &base_ec, !cfg->offload && !cfg->g3_shared);
    if (rc == -EINVAL)
        snprintf(err, errlen,
                 "impossible engine configuration (block size, blocks, "
                 "max_num_batched_tokens vs max_model_len with chunked "
                 "prefill off)");
    for (uint32_t e = 0; rc == 0 && e < rp->num_engines; e++) {
        rp->pubs[e] = kvsim_engine_pub(rp->engines[e]);
        rp->pools[e] = kvsim_engine_pool(rp->engines[e]);
    }
    if (rc == 0 && !rp->rt.drain_events &&
        !(rp->rt.delayed[0] && (rp->dp > 1 || rp->rt.view_indexer)))
        kvsim_router_use_pool_groups(rp->rt.router, rp->pools, rp->dp);
    if (rc == 0 && rp->dp > 1 && cfg->model.profile &&
        kvsim_profile_arch(cfg->model.profile)->num_experts) {
        if (!(rp->lockstep = calloc(rp->num_deployments, sizeof *rp->lockstep)))
            rc = -ENOMEM;
        for (uint32_t d = 0; rc == 0 && d < rp->num_deployments; d++)
            rc = kvsim_lockstep_init(&rp->lockstep[d], rp->engines + d * rp->dp, rp->dp);
    }
    if (rc == 0 && rp->num_prefill) /* after the engines: the decode router reads their pools */
        rc = replay__disagg_setup(rp);
    return rc;
}

/* Everything the epochs need. Returns 0 or a negative errno with the message. */
static int replay_setup(struct replay *rp, char *err, size_t errlen)
{
    setup_counts(rp);
    int rc = setup_state(rp);
    if (rc == 0)
        rc = setup_engines(rp, err, errlen);
    for (uint32_t e = 0; rc == 0 && e < rp->num_engines; e++)
        __cds_wfcq_init(&rp->rt.inbox_head[e], &rp->rt.inbox_tail[e]);
    for (size_t i = 0; rc == 0 && i < rp->trace.num_reqs; i++)
        cds_wfcq_node_init(&rp->rt.nodes[i]);
    if (rc == 0)
        rc = replay__setup_sessions(rp);
    if (rc && !err[0])
        snprintf(err, errlen, "setting up the replay: %s", kvsim_strerror(rc));
    rp->ep.progress = !rp->cfg->quiet && isatty(STDERR_FILENO);
    rp->ep.last_progress = base_monotonic_ns();
    return rc;
}

int kvsim_replay_run(const struct kvsim_replay_config *cfg, struct kvsim_report *report, char *err,
                     size_t errlen)
{
    struct replay rp = {.cfg = cfg};
    err[0] = 0;
    int rc = replay_validate(cfg, err, errlen);
    if (rc)
        return rc;
    int64_t wall0 = base_monotonic_ns();
    if ((rc = replay_load(&rp, err, errlen)))
        return rc;
    rc = replay_setup(&rp, err, errlen);
    if (rc == 0)
        rc = replay__epochs(&rp, err, errlen);
    if (rc == 0)
        rc = replay__summarize(&rp, base_monotonic_ns() - wall0, report);
    if (rc == 0 && (rc = replay__write(&rp, report, err, errlen)))
        kvsim_report_fini(report);
    if (rc && !err[0])
        snprintf(err, errlen, "replay failed: %s", kvsim_strerror(rc));
    replay_free(&rp);
    return rc;
}
