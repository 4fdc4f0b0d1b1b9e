/*
 * test_replay_dp.c - data parallelism: vLLM's DP load balancer as the dp-lb router, its choices
 * on constructed rank states against the rule docs/fidelity/data-parallel.md gives (score
 * max(in flight, waiting + running) plus the KV term, the rotating tie-break, the optimistic
 * waiting increments and the coordinator's 100 ms / 5 s publishes); replays of data-parallel
 * deployments: identical for any thread count, and one deployment of N ranks is N engines behind
 * the dp-lb router.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/replay/replay.h"

#include "common.h"
#include "replay_util.h"

#define MS 1000000LL

enum { MAX_E = 4 };

struct ranks {
    struct kvsim_engine_pub pub[MAX_E];
    const struct kvsim_engine_pub *pubs[MAX_E];
};

static void ranks_init(struct ranks *k)
{
    for (int e = 0; e < MAX_E; e++) {
        k->pub[e] = (struct kvsim_engine_pub){0};
        k->pubs[e] = &k->pub[e];
    }
}

/* Rank e holds `waiting` waiting and `running` running requests (all it has unfinished). */
static void rank_set(struct ranks *k, uint32_t e, uint32_t waiting, uint32_t running, double usage)
{
    k->pub[e].num_waiting = waiting;
    k->pub[e].num_running = running;
    k->pub[e].num_unfinished = waiting + running;
    k->pub[e].kv_usage = usage;
}

static uint32_t pick(struct kvsim_router *r, const struct ranks *k)
{
    return kvsim_router_route(r, k->pubs, NULL, 0, 1, 16);
}

Test(replay_dp_lb, parses_and_names_itself)
{
    cr_assert_eq(kvsim_router_policy_parse("dp-lb"), KVSIM_ROUTER_DP_LB);
    cr_assert_str_eq(kvsim_router_policy_name(KVSIM_ROUTER_DP_LB), "dp-lb");
}

/* Equal scores: the scan starts one rank further after every pick, so ties go round-robin, and
 * the picks of one boundary count as in flight (and as waiting) at once. */
Test(replay_dp_lb, ties_rotate_and_picks_count_at_once)
{
    struct kvsim_router *r;
    cr_assert_eq(kvsim_router_create(KVSIM_ROUTER_DP_LB, 3, 1.0, &r), 0);
    struct ranks k;
    ranks_init(&k);
    kvsim_router_boundary(r, k.pubs, 0);
    static const uint32_t expect[] = {0, 1, 2, 0, 1, 2};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(pick(r, &k), expect[i], "pick %d", i);
    /* The next boundary, 10 ms later, no tick: the picks are now in the pubs (unfinished) and
     * still in the front end's waiting increments; rank 1 has one more. */
    for (uint32_t e = 0; e < 3; e++)
        rank_set(&k, e, 2, 0, 0.0);
    k.pub[1].num_unfinished = k.pub[1].num_waiting = 3;
    kvsim_router_boundary(r, k.pubs, 10 * MS);
    cr_assert_eq(pick(r, &k), 0, "scan from 0: ranks 0 and 2 tie at 2, the first wins");
    cr_assert_eq(pick(r, &k), 2, "scan from 1: rank 1 has 3, rank 2 has 2, rank 0 now 3");
    kvsim_router_destroy(r);
}

/* The scan's start advances after every pick, whatever was picked: after one pick (rank 0) the
 * scan starts at rank 1, so a tie between ranks 0 and 1 goes to rank 1 (from rank 0 it would go
 * to rank 0). Rank 0 has its pick in flight and in the waiting increment, rank 1 one request
 * in flight, rank 2 five: scores 1, 1, 5. */
Test(replay_dp_lb, the_scan_start_advances_after_each_pick)
{
    struct kvsim_router *r;
    cr_assert_eq(kvsim_router_create(KVSIM_ROUTER_DP_LB, 3, 1.0, &r), 0);
    struct ranks k;
    ranks_init(&k);
    kvsim_router_boundary(r, k.pubs, 0);
    cr_assert_eq(pick(r, &k), 0);
    k.pub[0].num_unfinished = 1;
    k.pub[1].num_unfinished = 1;
    k.pub[2].num_unfinished = 5;
    kvsim_router_boundary(r, k.pubs, 10 * MS); /* no tick: the snapshot of t=0 stays */
    cr_assert_eq(pick(r, &k), 1, "ranks 0 and 1 tie at 1; the scan starts at rank 1");
    kvsim_router_destroy(r);
}

/* The in-flight floor is exact while the snapshot is stale: a rank the snapshot shows empty but
 * that holds requests routed since is not chosen. */
Test(replay_dp_lb, in_flight_floor_beats_a_stale_snapshot)
{
    struct kvsim_router *r;
    cr_assert_eq(kvsim_router_create(KVSIM_ROUTER_DP_LB, 2, 1.0, &r), 0);
    struct ranks k;
    ranks_init(&k);
    rank_set(&k, 1, 0, 1, 0.0);
    kvsim_router_boundary(r, k.pubs, 0); /* publishes: rank 0 empty, rank 1 one running */
    k.pub[0].num_unfinished = 5;         /* routed there since; no publish yet */
    kvsim_router_boundary(r, k.pubs, 50 * MS);
    cr_assert_eq(pick(r, &k), 1, "rank 0 has 5 in flight, rank 1 one");
    kvsim_router_destroy(r);
}

/* Counts published at a tick stay until the next tick that sees a change: a rank that emptied
 * after the publish is still avoided until the 100 ms tick. */
Test(replay_dp_lb, stale_counts_until_the_next_tick)
{
    struct kvsim_router *r;
    cr_assert_eq(kvsim_router_create(KVSIM_ROUTER_DP_LB, 2, 1.0, &r), 0);
    cr_assert_eq(kvsim_router_next_tick(r, 0), 100 * MS);
    cr_assert_eq(kvsim_router_next_tick(r, 99 * MS), 100 * MS);
    cr_assert_eq(kvsim_router_next_tick(r, 100 * MS), 200 * MS);
    struct ranks k;
    ranks_init(&k);
    rank_set(&k, 0, 0, 3, 0.0);
    rank_set(&k, 1, 6, 4, 0.0);
    kvsim_router_boundary(r, k.pubs, 0);
    rank_set(&k, 1, 0, 0, 0.0); /* rank 1 finished everything at 20 ms */
    kvsim_router_boundary(r, k.pubs, 40 * MS);
    cr_assert_eq(pick(r, &k), 0, "the snapshot of t=0 still shows rank 1 with 10");
    k.pub[0].num_unfinished = 4;
    kvsim_router_boundary(r, k.pubs, 100 * MS); /* the tick publishes the change */
    cr_assert_eq(pick(r, &k), 1, "published at 100 ms: rank 1 is empty");
    kvsim_router_destroy(r);
}

/* Above 50 % KV usage a rank's waiting requests weigh 6 x (usage - 0.5) more each. */
Test(replay_dp_lb, kv_usage_term_weighs_waiting_requests)
{
    struct kvsim_router *r;
    cr_assert_eq(kvsim_router_create(KVSIM_ROUTER_DP_LB, 2, 1.0, &r), 0);
    struct ranks k;
    ranks_init(&k);
    rank_set(&k, 0, 2, 2, 0.40); /* 4 */
    rank_set(&k, 1, 1, 2, 0.90); /* 3 + 1 x 6 x 0.4 = 5.4 */
    kvsim_router_boundary(r, k.pubs, 0);
    cr_assert_eq(pick(r, &k), 0, "rank 1's KV term outweighs its one fewer request");
    kvsim_router_destroy(r);
    cr_assert_eq(kvsim_router_create(KVSIM_ROUTER_DP_LB, 2, 1.0, &r), 0);
    rank_set(&k, 1, 0, 3, 0.99); /* nothing waiting: no KV term, 3 < 4 */
    kvsim_router_boundary(r, k.pubs, 0);
    cr_assert_eq(pick(r, &k), 1, "no waiting requests, no KV term");
    kvsim_router_destroy(r);
}

/* The front end's waiting increments last until the next publish; with no change the
 * coordinator republishes only after 5 s, which drops them. */
Test(replay_dp_lb, increments_last_until_the_5_s_refresh)
{
    struct kvsim_router *r;
    cr_assert_eq(kvsim_router_create(KVSIM_ROUTER_DP_LB, 2, 1.0, &r), 0);
    struct ranks k;
    ranks_init(&k);
    rank_set(&k, 1, 0, 2, 0.0);
    kvsim_router_boundary(r, k.pubs, 0);
    cr_assert_eq(pick(r, &k), 0, "0 against 2");
    cr_assert_eq(pick(r, &k), 0, "1 against 2");
    cr_assert_eq(pick(r, &k), 0, "2 against 2: a tie, rank 0 is scanned first");
    /* All three were rejected at once (nothing unfinished, no count changed): only the front
     * end's three waiting increments make rank 0 look busy, at every tick up to 5 s. */
    for (int64_t t = 100; t < 5000; t += 100)
        kvsim_router_boundary(r, k.pubs, t * MS);
    kvsim_router_boundary(r, k.pubs, 4990 * MS);
    cr_assert_eq(pick(r, &k), 1, "4.99 s: rank 0 scores 3 (waiting added), rank 1 scores 2");
    kvsim_router_boundary(r, k.pubs, 5000 * MS); /* rejected too; the 5 s refresh */
    cr_assert_eq(pick(r, &k), 0, "5 s: the refresh dropped the increments: 0 against 2");
    kvsim_router_destroy(r);
}

/* The refresh comes at exactly 5 s after the last publish, not a tick later: three picks to
 * rank 0 (rank 1 runs 3) leave it 3 waiting increments and the scan start at rank 1; at 5 s the
 * refresh drops them (0 against 3: rank 0); without it the two would tie at 3 and the scan from
 * rank 1 would pick rank 1. */
Test(replay_dp_lb, the_refresh_comes_at_exactly_5_s)
{
    struct kvsim_router *r;
    cr_assert_eq(kvsim_router_create(KVSIM_ROUTER_DP_LB, 2, 1.0, &r), 0);
    struct ranks k;
    ranks_init(&k);
    rank_set(&k, 1, 0, 3, 0.0);
    kvsim_router_boundary(r, k.pubs, 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(pick(r, &k), 0, "pick %d: %d against 3", i, i);
    kvsim_router_boundary(r, k.pubs, 5000 * MS); /* nothing changed: only the refresh */
    cr_assert_eq(pick(r, &k), 0, "refreshed at 5 s: 0 against 3");
    kvsim_router_destroy(r);
}

/* ---- replays ---------------------------------------------------------------------------- */

/* Four deployments of two ranks (8 engines), the kv router picking the deployment: the same
 * report and records on 1, 2 and 8 threads. */
Test(replay_dp, deployments_identical_for_1_2_8_threads, .timeout = 300)
{
    struct kvsim_replay_config c;
    replay_base_config(&c, NULL);
    c.num_engines = 4;
    c.data_parallel_size = 2;
    struct kvsim_report r = replay_run(&c, 1, "dp-t1");
    cr_assert_eq(r.num_engines, 8);
    cr_assert_eq(r.data_parallel_size, 2);
    cr_assert_eq(r.completed, r.num_requests);
    cr_assert_gt(r.prefix_cache_reuse, 0.2, "the kv router still finds prefixes");
    kvsim_report_fini(&r);
    r = replay_run(&c, 2, "dp-t2");
    kvsim_report_fini(&r);
    r = replay_run(&c, 8, "dp-t8");
    kvsim_report_fini(&r);
    static const char *const tags[] = {"dp-t2", "dp-t8"};
    replay_assert_same_as(tags, 2, "dp-t1");
}

/* One deployment of N ranks is N engines behind the dp-lb router: the same request records
 * and figures (the reports differ only where they name the router and the parallelism); and
 * the balancer is not round-robin on this workload. */
Test(replay_dp, one_deployment_is_the_dp_lb_router, .timeout = 300)
{
    struct kvsim_replay_config c;
    replay_base_config(&c, NULL);
    c.num_engines = 1;
    c.data_parallel_size = 4;
    struct kvsim_report dp = replay_run(&c, 2, "dp-one");
    c.num_engines = 4;
    c.data_parallel_size = 1;
    c.router = KVSIM_ROUTER_DP_LB;
    struct kvsim_report lb = replay_run(&c, 2, "dp-lb");
    c.router = KVSIM_ROUTER_ROUND_ROBIN;
    struct kvsim_report rr = replay_run(&c, 2, "dp-rr");
    cr_assert_eq(dp.num_engines, 4);
    cr_assert_eq(dp.data_parallel_size, 4);
    cr_assert_eq(lb.data_parallel_size, 1);
    cr_assert_eq(dp.completed, lb.completed);
    cr_assert_eq(dp.ttft.mean, lb.ttft.mean);
    cr_assert_eq(dp.token_gap.mean, lb.token_gap.mean);
    cr_assert_eq(dp.prefix_cache_reuse, lb.prefix_cache_reuse);
    cr_assert_neq(lb.ttft.mean, rr.ttft.mean, "dp-lb is not round-robin here");
    replay_assert_same_files("dp-one", "dp-lb", "jsonl");
    replay_remove_outputs("dp-one");
    replay_remove_outputs("dp-lb");
    replay_remove_outputs("dp-rr");
    kvsim_report_fini(&dp);
    kvsim_report_fini(&lb);
    kvsim_report_fini(&rr);
}

/* What cannot be combined yet is refused, saying why. */
Test(replay_dp, refused_with_disaggregation)
{
    struct kvsim_replay_config c;
    kvsim_replay_config_default(&c);
    c.data_parallel_size = 2;
    c.disagg.prefill_engines = c.disagg.decode_engines = 1;
    c.disagg.transfer.gbps = 25;
    struct kvsim_report r;
    char err[256];
    cr_assert_eq(kvsim_replay_run(&c, &r, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "--data-parallel-size 2: data parallelism and disaggregated serving"),
              "%s", err);
}

/* ---- a mixture-of-experts deployment's ranks in lockstep (engine.h, struct kvsim_lockstep) ----
 *
 * Two ranks of the tiny MoE profile (tests/inputs/profiles/tiny, test/tiny-moe) with expert
 * parallelism, driven directly: each rank's step durations come from the step model (its
 * composition is checked by hand in test_profile.c, profile_moe); what is checked here is how the
 * ranks' steps combine: together, as long as the slowest, dummy steps for an idle rank, and the
 * dummy tail to the wave's synchronization point. */

#define TINY KVSIM_SOURCE_DIR "/tests/inputs/profiles/tiny"

struct lockstep_rig {
    struct kvsim_profile *profile;
    struct kvsim_step_model model;
    struct kvsim_trace trace;
    struct kvsim_metrics *metrics;
    struct kvsim_engine *ranks[2];
    struct kvsim_lockstep ls;
};

/* Requests 0 and 1: 16-token prompts (one 16-token block each, distinct), 3 and 2 outputs. */
static void lockstep_rig_init(struct lockstep_rig *g)
{
    memset(g, 0, sizeof *g);
    char err[512], path[4096];
    struct kvsim_profile_config pc = {.root = TINY,
                                      .hardware = "TESTHW",
                                      .model = "test/tiny-moe",
                                      .tp = 1,
                                      .tp_link_gbps = 1,
                                      .tp_link_latency_ns = 1000,
                                      .data_parallel_size = 2,
                                      .enable_expert_parallel = true};
    cr_assert_eq(kvsim_profile_load(&pc, &g->profile, err, sizeof err), 0, "%s", err);
    kvsim_step_model_default(&g->model);
    g->model.profile = g->profile;
    kvsim_test_tmp_path(path, sizeof path, "lockstep.jsonl");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"timestamp\": 0, \"input_length\": 16, \"output_length\": 3, \"hash_ids\": [1]}\n"
          "{\"timestamp\": 0, \"input_length\": 16, \"output_length\": 2, \"hash_ids\": [2]}\n",
          f);
    fclose(f);
    struct kvsim_trace_opts to = {.trace_block_size = 16, .arrival_speedup = 1};
    cr_assert_eq(kvsim_trace_load(path, &to, &g->trace, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvsim_metrics_create(2, 2, &g->metrics), 0);
    for (uint32_t r = 0; r < 2; r++) {
        struct kvsim_engine_config c = {
            .id = r, .thread = r, .trace = &g->trace, .metrics = g->metrics, .model = g->model};
        sched_config_default(&c.sched);
        c.sched.num_blocks = 64;
        c.sched.check_invariants = true;
        cr_assert_eq(kvsim_engine_create(&c, &g->ranks[r]), 0);
    }
    cr_assert_eq(kvsim_lockstep_init(&g->ls, g->ranks, 2), 0);
}

static void lockstep_rig_fini(struct lockstep_rig *g)
{
    for (uint32_t r = 0; r < 2; r++)
        kvsim_engine_destroy(g->ranks[r]);
    kvsim_metrics_destroy(g->metrics);
    kvsim_trace_free(&g->trace);
    kvsim_profile_free(g->profile);
}

/* One rank's step: a 16-token prefill of a new prompt, or a decode at context ctx. */
static int64_t prefill16_ns(const struct lockstep_rig *g)
{
    uint32_t chunk[] = {16};
    uint64_t prefix[] = {0};
    struct kvsim_step_batch b = {.prefill_tokens = 16,
                                 .num_prefill_reqs = 1,
                                 .prefill_chunk = chunk,
                                 .prefill_prefix = prefix};
    return kvsim_step_model_cost_ns(&g->model, &b, NULL);
}

static int64_t decode_ns(const struct lockstep_rig *g, uint64_t ctx)
{
    struct kvsim_step_batch b = {.num_decode_reqs = 1, .decode_context = &ctx};
    return kvsim_step_model_cost_ns(&g->model, &b, NULL);
}

static const struct kvsim_req_record *rec(const struct lockstep_rig *g, uint32_t req)
{
    return kvsim_metrics_record(g->metrics, req);
}

/* A rank with nothing to run takes a dummy step beside the busy one and does not slow it:
 * request 0 alone on rank 0 takes its prefill P then decodes at contexts 16 and 17, three
 * lockstep steps with rank 1 dummy in each; the dummy step alone is a 1-token decode with no
 * context. */
Test(replay_lockstep, an_idle_rank_steps_dummy_batches_beside_the_busy_one)
{
    struct lockstep_rig g;
    lockstep_rig_init(&g);
    int64_t p = prefill16_ns(&g), d16 = decode_ns(&g, 16), d17 = decode_ns(&g, 17);
    cr_assert_eq(g.ls.dummy_ns, decode_ns(&g, 0));
    cr_assert_eq(kvsim_engine_admit(g.ranks[0], 0, 0), 0);
    cr_assert_eq(kvsim_lockstep_advance(&g.ls, INT64_MAX), 0);
    cr_assert_eq(rec(&g, 0)->first_token_ns, p);
    cr_assert_eq(rec(&g, 0)->finish_ns, p + d16 + d17);
    cr_assert_eq(g.ls.steps, 3);
    cr_assert_eq(g.ls.dummy_rank_steps, 3);
    lockstep_rig_fini(&g);
}

/* A rank that gets work during a lockstep step waits for its end, and a slower rank sets the
 * pace of the others: request 1 arrives on rank 1 halfway through request 0's prefill P; it is
 * scheduled at P, and its own prefill makes rank 0's first decode step last P too. Then both
 * decode (contexts 17 and 16) in one step as long as the slower: both end there (request 0's
 * third output, request 1's second). */
Test(replay_lockstep, a_rank_waits_for_the_step_under_way_and_the_slowest_sets_the_pace)
{
    struct lockstep_rig g;
    lockstep_rig_init(&g);
    int64_t p = prefill16_ns(&g), d16 = decode_ns(&g, 16), d17 = decode_ns(&g, 17);
    cr_assert_gt(p, d16, "the prefill is the slower step");
    int64_t both = d17 > d16 ? d17 : d16;
    cr_assert_eq(kvsim_engine_admit(g.ranks[0], 0, 0), 0);
    cr_assert_eq(kvsim_lockstep_advance(&g.ls, p / 2), 0);
    cr_assert_eq(kvsim_engine_admit(g.ranks[1], 1, p / 2), 0);
    cr_assert_eq(kvsim_lockstep_advance(&g.ls, INT64_MAX), 0);
    cr_assert_eq(rec(&g, 1)->first_sched_ns, p, "scheduled at the step's end, not on arrival");
    cr_assert_eq(rec(&g, 1)->first_token_ns, 2 * p);
    cr_assert_eq(rec(&g, 0)->second_token_ns, 2 * p, "rank 0's decode waited for rank 1's prefill");
    cr_assert_eq(rec(&g, 1)->finish_ns, 2 * p + both);
    cr_assert_eq(rec(&g, 0)->finish_ns, 2 * p + both);
    cr_assert_eq(g.ls.dummy_rank_steps, 1, "rank 1 was dummy in the first step only");
    lockstep_rig_fini(&g);
}

/* After the last request the ranks step dummy batches to the wave's synchronization point
 * (every 32 steps): request 0 took 3 steps, so 29 dummy steps of D follow its finish F. Request
 * 1 arriving at F + 2.5 D waits for the third of them (F + 3 D); one arriving after the tail
 * (F + 40 D) starts at once. */
Test(replay_lockstep, the_wave_ends_at_a_synchronization_point)
{
    for (int late = 0; late < 2; late++) {
        struct lockstep_rig g;
        lockstep_rig_init(&g);
        int64_t p = prefill16_ns(&g), d = g.ls.dummy_ns;
        cr_assert_eq(kvsim_engine_admit(g.ranks[0], 0, 0), 0);
        cr_assert_eq(kvsim_lockstep_advance(&g.ls, INT64_MAX), 0);
        int64_t f = rec(&g, 0)->finish_ns;
        int64_t at = late ? f + 40 * d : f + 5 * d / 2;
        cr_assert_eq(kvsim_engine_admit(g.ranks[1], 1, at), 0);
        cr_assert_eq(kvsim_lockstep_advance(&g.ls, INT64_MAX), 0);
        int64_t start = late ? at : f + 3 * d;
        cr_assert_eq(rec(&g, 1)->first_sched_ns, start, "late %d", late);
        cr_assert_eq(rec(&g, 1)->first_token_ns, start + p, "late %d", late);
        lockstep_rig_fini(&g);
    }
}

/* A MoE model's deployments replay identically on 1, 2 and 8 threads (4 deployments of 2
 * ranks in lockstep), and the report says the ranks were in lockstep. */
Test(replay_lockstep, deployments_identical_for_1_2_8_threads, .timeout = 300)
{
    struct lockstep_rig g;
    lockstep_rig_init(&g);
    struct kvsim_replay_config c;
    replay_base_config(&c, NULL);
    c.model = g.model;
    c.sched.max_num_batched_tokens = 64; /* the tiny profile's grid */
    c.sched.max_num_seqs = 16;
    c.num_engines = 4;
    c.data_parallel_size = 2;
    c.enable_expert_parallel = true;
    struct kvsim_report r = replay_run(&c, 1, "ls-t1");
    cr_assert_eq(r.num_engines, 8);
    cr_assert(r.timing.lockstep);
    cr_assert_gt(r.timing.lockstep_dummy_rank_steps, 0);
    cr_assert_eq(r.completed, r.num_requests);
    kvsim_report_fini(&r);
    r = replay_run(&c, 2, "ls-t2");
    kvsim_report_fini(&r);
    r = replay_run(&c, 8, "ls-t8");
    kvsim_report_fini(&r);
    static const char *const tags[] = {"ls-t2", "ls-t8"};
    replay_assert_same_as(tags, 2, "ls-t1");
    lockstep_rig_fini(&g);
}

/* The shared DP2 x EP2 configuration (Qwen3-30B-A3B on RTX PRO 6000, the profile alone) replays
 * the Mooncake 1000 trace identically on 1, 2 and 8 threads. */
Test(replay_lockstep, mooncake_1000_dp2_ep2_identical_for_1_2_8_threads, .timeout = 300)
{
    char trace[4096], err[512];
    kvsim_test_trace_path(trace, sizeof trace, "mooncake_trace_1000.jsonl");
    struct kvsim_profile_config pc = {.root = KVSIM_SOURCE_DIR "/../shared/profiles/llmservingsim",
                                      .hardware = "RTXPRO6000",
                                      .model = "Qwen/Qwen3-30B-A3B-Instruct-2507",
                                      .tp = 1,
                                      .tp_link_gbps = 16,
                                      .tp_link_latency_ns = 20000,
                                      .data_parallel_size = 2,
                                      .enable_expert_parallel = true};
    struct kvsim_profile *p = NULL;
    int rc = kvsim_profile_load(&pc, &p, err, sizeof err);
    if (rc == -ENOENT && !getenv("KVSIM_REQUIRE_TRACES"))
        cr_skip_test("the shared profiles are not there: %s", err);
    cr_assert_eq(rc, 0, "%s", err);
    struct kvsim_replay_config c;
    replay_base_config(&c, trace);
    c.model.profile = p;
    c.sched.num_blocks = 37904;
    c.num_engines = 1;
    c.data_parallel_size = 2;
    c.enable_expert_parallel = true;
    struct kvsim_report r = replay_run(&c, 1, "moon-t1");
    cr_assert(r.timing.lockstep);
    kvsim_report_fini(&r);
    r = replay_run(&c, 2, "moon-t2");
    kvsim_report_fini(&r);
    r = replay_run(&c, 8, "moon-t8");
    kvsim_report_fini(&r);
    static const char *const tags[] = {"moon-t2", "moon-t8"};
    replay_assert_same_as(tags, 2, "moon-t1");
    kvsim_profile_free(p);
}
