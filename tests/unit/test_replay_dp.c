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
#include <string.h>

#include "runtime/replay/replay.h"

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
