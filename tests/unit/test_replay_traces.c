/*
 * test_replay_traces.c - the multi-engine replay (runtime/replay/) on every shared trace: every
 * router completes or rejects every request, results are bit-identical for 1 and 2 threads,
 * the event-fed KV indexer decides as the pools do, and the offload replay of the Mooncake
 * 1000 trace is identical for either executor (the conversation trace is bench/'s). These tests
 * need the shared traces (common.h): without them they are skipped, and ctest reports this
 * executable as Skipped (with KVSIM_REQUIRE_TRACES=1 they fail).
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>

#include "runtime/replay/replay.h"

#include "common.h"
#include "replay_util.h"

/* The same replay at 1 and 2 threads: identical report and per-request records. */
static void check_deterministic(const char *trace, enum kvsim_router_policy router, bool events)
{
    char path[512];
    kvsim_test_trace_path(path, sizeof path, trace);
    struct kvsim_replay_config c;
    replay_base_config(&c, path);
    c.router = router;
    c.kv_index_events = events;
    struct kvsim_report r1 = replay_run(&c, 1, "t1");
    struct kvsim_report r2 = replay_run(&c, 2, "t2");
    cr_assert_eq(r1.completed + r1.rejected, r1.num_requests,
                 "%s/%s: every request completes or is rejected", trace,
                 kvsim_router_policy_name(router));
    cr_assert_eq(r1.completed, r2.completed);
    replay_assert_same_files("t1", "t2", "json");
    replay_assert_same_files("t1", "t2", "jsonl");
}

/* The conversation trace at 1 and 2 threads is bench/bench_replay's (every router, identical
 * digests): tests use the Mooncake 1000 trace for every router (docs/testing.md). */
Test(replay_determinism, mooncake_1000_least_loaded_1_vs_2_threads, .timeout = 300)
{
    check_deterministic("mooncake_trace_1000.jsonl", KVSIM_ROUTER_LEAST_LOADED, false);
}
Test(replay_determinism, mooncake_1000_round_robin_1_vs_2_threads, .timeout = 300)
{
    check_deterministic("mooncake_trace_1000.jsonl", KVSIM_ROUTER_ROUND_ROBIN, false);
}
Test(replay_determinism, synthetic_trace_kv_1_vs_2_threads, .timeout = 300)
{
    check_deterministic("synthetic_trace.jsonl", KVSIM_ROUTER_KV, false);
}
Test(replay_determinism, mooncake_1000_kv_1_vs_2_threads, .timeout = 300)
{
    check_deterministic("mooncake_trace_1000.jsonl", KVSIM_ROUTER_KV, false);
}
Test(replay_determinism, azure_code_least_loaded_1_vs_2_threads, .timeout = 300)
{
    check_deterministic("AzureLLMInferenceTrace_code.csv", KVSIM_ROUTER_LEAST_LOADED, false);
}
Test(replay_determinism, azure_conv_kv_1_vs_2_threads, .timeout = 300)
{
    check_deterministic("AzureLLMInferenceTrace_conv.csv", KVSIM_ROUTER_KV, false);
}

/* 1, 2, 3 and 8 threads (issue #39): the same report and records, aggregated (8 engines, kv)
 * and disaggregated (4 prefill + 4 decode, kv routers), whatever the barrier's waiting does. */
static void check_thread_counts(bool disagg)
{
    char path[512];
    kvsim_test_trace_path(path, sizeof path, "mooncake_trace_1000.jsonl");
    struct kvsim_replay_config c;
    replay_base_config(&c, path);
    c.router = KVSIM_ROUTER_KV;
    if (disagg) {
        c.disagg.prefill_engines = c.disagg.decode_engines = 4;
        c.disagg.prefill_sched = c.disagg.decode_sched = c.sched;
        c.disagg.prefill_router = c.disagg.decode_router = KVSIM_ROUTER_KV;
    }
    struct kvsim_report r1 = replay_run(&c, 1, "n1");
    cr_assert_eq(r1.completed + r1.rejected, r1.num_requests);
    replay_run(&c, 2, "n2");
    replay_run(&c, 3, "n3");
    replay_run(&c, 8, "n8");
    const char *tags[] = {"n2", "n3", "n8"};
    replay_assert_same_as(tags, 3, "n1");
}
Test(replay_determinism, mooncake_1000_kv_1_2_3_8_threads, .timeout = 300)
{
    check_thread_counts(false);
}
Test(replay_determinism, mooncake_1000_disagg_1_2_3_8_threads, .timeout = 300)
{
    check_thread_counts(true);
}

/*
 * Pipelined disaggregated epochs (the decode engines' part of an epoch beside the prefill
 * engines' admission at the next boundary; docs/disagg.md) give what epochs run one after the
 * other give: 4 prefill + 4 decode engines with kv routers on the Mooncake 1000 trace, to the
 * end and stopped early (--max-sim-time-s: the last epoch's decode part still runs), at 1 and 2
 * threads.
 */
static void check_pipeline(int64_t max_sim_time_ns, const char *tag)
{
    char path[512];
    kvsim_test_trace_path(path, sizeof path, "mooncake_trace_1000.jsonl");
    struct kvsim_replay_config c;
    replay_base_config(&c, path);
    c.disagg.prefill_engines = c.disagg.decode_engines = 4;
    c.disagg.prefill_sched = c.disagg.decode_sched = c.sched;
    c.disagg.prefill_router = c.disagg.decode_router = KVSIM_ROUTER_KV;
    c.max_sim_time_ns = max_sim_time_ns;
    char off[32], on1[32], on2[32];
    snprintf(off, sizeof off, "%s-off", tag);
    snprintf(on1, sizeof on1, "%s-on1", tag);
    snprintf(on2, sizeof on2, "%s-on2", tag);
    setenv("KVSIM_REPLAY_DISAGG_PIPELINE", "0", 1);
    struct kvsim_report r = replay_run(&c, 1, off);
    cr_assert_gt(r.disagg.handoffs, 100, "handoffs happened");
    if (max_sim_time_ns)
        cr_assert_gt(r.incomplete, 0, "stopped early with requests in flight");
    unsetenv("KVSIM_REPLAY_DISAGG_PIPELINE"); /* the default: pipelined */
    replay_run(&c, 1, on1);
    replay_run(&c, 2, on2);
    const char *tags[] = {on1, on2};
    replay_assert_same_as(tags, 2, off);
}
Test(replay_determinism, mooncake_1000_disagg_pipelined_as_sequential, .timeout = 300)
{
    check_pipeline(0, "pipe");
}
Test(replay_determinism, mooncake_1000_disagg_pipelined_stopped_early, .timeout = 300)
{
    check_pipeline(INT64_C(20000000000), "pipe-stop");
}

/* The thread accounting (KVSIM_REPLAY_ACCOUNTING=1) changes no result, and its figures add up:
 * the critical path on one thread is every advance, on T threads at least 1/T of it and no
 * more than on fewer threads, and with the replay's own engine-to-thread assignment no less
 * than at best; the serial part is not negative. */
Test(replay_determinism, thread_accounting_adds_up_and_changes_nothing, .timeout = 300)
{
    char path[512];
    kvsim_test_trace_path(path, sizeof path, "mooncake_trace_1000.jsonl");
    struct kvsim_replay_config c;
    replay_base_config(&c, path);
    struct kvsim_report off = replay_run(&c, 2, "acct_off");
    cr_assert_not(off.accounting.enabled);
    cr_assert_eq(setenv("KVSIM_REPLAY_ACCOUNTING", "1", 1), 0);
    struct kvsim_report on = replay_run(&c, 2, "acct_on");
    unsetenv("KVSIM_REPLAY_ACCOUNTING");
    replay_assert_same_files("acct_off", "acct_on", "json");
    replay_assert_same_files("acct_off", "acct_on", "jsonl");
    const struct kvsim_thread_accounting *a = &on.accounting;
    cr_assert(a->enabled);
    cr_assert_eq(a->threads, 2);
    cr_assert_gt(a->phases, 0);
    double advance = a->advance_s[0] + a->advance_s[1];
    cr_assert_gt(advance, 0);
    cr_assert_lt(fabs(a->critical_s[0] - advance), 1e-6,
                 "critical path on 1 thread %g, advances %g", a->critical_s[0], advance);
    for (int i = 1; i < KVSIM_ACCOUNTING_BOUNDS; i++) {
        cr_assert_geq(a->critical_s[i], a->critical_s[0] / (double)(1 << i) - 1e-9);
        cr_assert_leq(a->critical_s[i], a->critical_s[i - 1] + 1e-9);
        /* a fixed assignment never beats the best one, phase by phase */
        cr_assert_geq(a->critical_assigned_s[i], a->critical_s[i] - 1e-6,
                      "on %d threads: as assigned %g s, at best %g s", 1 << i,
                      a->critical_assigned_s[i], a->critical_s[i]);
    }
    cr_assert_lt(fabs(a->critical_assigned_s[0] - advance), 1e-6);
    cr_assert_geq(a->serial_s, 0);
    cr_assert_geq(a->wait_s[0], 0);
    cr_assert_geq(a->wait_wall_s[1], a->wait_s[1] * 0.5, "waiting: wall %g s, CPU %g s",
                  a->wait_wall_s[1], a->wait_s[1]);
}

/* The engines take the kv router's prompt hashes instead of hashing again; with the invariants
 * checked, every admission compares them with its prompt's own (sched_add fails otherwise).
 * Mooncake arrivals often share a boundary and an engine: several requests' hashes in one
 * engine's queue. Both pools of a disaggregated replay too. */
Test(replay, kv_routed_prompt_hashes_are_the_prompts_own, .timeout = 300)
{
    char path[512];
    kvsim_test_trace_path(path, sizeof path, "mooncake_trace_1000.jsonl");
    struct kvsim_replay_config c;
    replay_base_config(&c, path);
    c.router = KVSIM_ROUTER_KV;
    c.num_engines = 2;
    c.trace_opts.max_requests = 300; /* the checks cost a pool walk per step */
    c.sched.check_invariants = true;
    struct kvsim_report r = replay_run(&c, 2, "routed");
    cr_assert_eq(r.completed + r.rejected, r.num_requests);
    c.disagg.prefill_engines = c.disagg.decode_engines = 2;
    c.disagg.prefill_sched = c.disagg.decode_sched = c.sched;
    c.disagg.prefill_router = c.disagg.decode_router = KVSIM_ROUTER_KV;
    r = replay_run(&c, 2, "routed_disagg");
    cr_assert_eq(r.completed + r.rejected, r.num_requests);
}

/* The event-fed indexer and the pool queries see the same blocks at every boundary. */
Test(replay_determinism, kv_index_events_equals_pool_queries, .timeout = 300)
{
    const char *trace = "mooncake_trace_1000.jsonl";
    char path[512];
    kvsim_test_trace_path(path, sizeof path, trace);
    struct kvsim_replay_config c;
    replay_base_config(&c, path);
    replay_run(&c, 2, "pool");
    c.kv_index_events = true;
    replay_run(&c, 2, "events");
    replay_assert_same_files("pool", "events", "json");
    replay_assert_same_files("pool", "events", "jsonl");
}

/* Every shared trace replays with every router: all requests complete or are rejected. */
Test(replay, every_trace_with_every_router, .timeout = 600)
{
    static const char *traces[] = {"conversation_trace.jsonl", "synthetic_trace.jsonl",
                                   "mooncake_trace_1000.jsonl", "AzureLLMInferenceTrace_code.csv",
                                   "AzureLLMInferenceTrace_conv.csv"};
    static const size_t sizes[] = {12031, 3993, 1000, 8819, 19366};
    for (size_t t = 0; t < 5; t++) {
        char path[512];
        kvsim_test_trace_path(path, sizeof path, traces[t]);
        for (int p = KVSIM_ROUTER_ROUND_ROBIN; p <= KVSIM_ROUTER_KV; p++) {
            struct kvsim_replay_config c;
            replay_base_config(&c, path);
            c.router = (enum kvsim_router_policy)p;
            struct kvsim_report r = replay_run(&c, 2, "all");
#ifndef KVSIM_SANITIZED
            cr_assert_eq(r.num_requests, sizes[t], "%s", traces[t]);
#else
            cr_assert_eq(r.num_requests, sizes[t] < 1500 ? sizes[t] : 1500, "%s", traces[t]);
#endif
            cr_assert_eq(r.completed + r.rejected, r.num_requests, "%s with %s: %lu incomplete",
                         traces[t], kvsim_router_policy_name(c.router),
                         (unsigned long)r.incomplete);
            cr_assert_gt(r.completed, 0);
        }
    }
    replay_remove_outputs("all");
}

Test(replay_offload, mooncake_1000_identical_for_both_executors_and_threads, .timeout = 600)
{
    char path[512];
    kvsim_test_trace_path(path, sizeof path, "mooncake_trace_1000.jsonl");
    replay_check_offload_deterministic(path);
}

/* Disaggregated serving on the Mooncake trace, 2 prefill + 2 decode engines, with each of the
 * three routers for each pool: every request completes, and 1 and 2 threads give the same
 * report and records (issue 11's first "done when"). */
Test(replay_disagg, mooncake_1000_every_router_pair_1_vs_2_threads, .timeout = 900)
{
    static const enum kvsim_router_policy routers[] = {KVSIM_ROUTER_KV, KVSIM_ROUTER_ROUND_ROBIN,
                                                       KVSIM_ROUTER_LEAST_LOADED};
    char path[512];
    kvsim_test_trace_path(path, sizeof path, "mooncake_trace_1000.jsonl");
    for (int p = 0; p < 3; p++)
        for (int d = 0; d < 3; d++) {
            struct kvsim_replay_config c;
            replay_base_config(&c, path);
            c.disagg.prefill_engines = c.disagg.decode_engines = 2;
            c.disagg.prefill_sched = c.disagg.decode_sched = c.sched;
            c.disagg.prefill_router = routers[p];
            c.disagg.decode_router = routers[d];
            struct kvsim_report r1 = replay_run(&c, 1, "d1"), r2 = replay_run(&c, 2, "d2");
            cr_assert_eq(r1.completed, r1.num_requests, "%s/%s: every request completes",
                         kvsim_router_policy_name(routers[p]),
                         kvsim_router_policy_name(routers[d]));
            cr_assert_eq(r1.disagg.completed, r1.num_requests);
            kvsim_report_fini(&r1);
            kvsim_report_fini(&r2);
            replay_assert_same_files("d1", "d2", "json");
            replay_assert_same_files("d1", "d2", "jsonl");
        }
}
