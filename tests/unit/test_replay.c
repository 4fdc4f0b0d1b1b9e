/*
 * test_replay.c - the multi-engine replay: the default workload, every shared trace with every
 * router, bit-identical results for 1 and 2 threads, sessions, rejections and bad input.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/replay/replay.h"

#define TRACES KVSIM_SOURCE_DIR "/../shared/traces/"
#define INPUTS KVSIM_SOURCE_DIR "/tests/inputs/"

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static bool trace_available(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, TRACES "%s", name);
    return access(path, R_OK) == 0;
}

/* Runs a replay; writes the report (wall fields zeroed) and the per-request records to
 * files named after tag; returns the report. */
static struct kvsim_report run(const struct kvsim_replay_config *base, uint32_t threads,
                               const char *tag)
{
    char req_path[256], rep_path[256], err[512];
    snprintf(req_path, sizeof req_path, "/tmp/kvsim-test-%d-%s.jsonl", (int)getpid(), tag);
    snprintf(rep_path, sizeof rep_path, "/tmp/kvsim-test-%d-%s.json", (int)getpid(), tag);
    struct kvsim_replay_config cfg = *base;
    cfg.num_threads = threads;
    cfg.quiet = true;
    cfg.requests_path = req_path;
    struct kvsim_report r;
    int rc = kvsim_replay_run(&cfg, &r, err, sizeof err);
    cr_assert_eq(rc, 0, "replay %s failed: %s", tag, err);
    r.wall_ns = 0;
    r.speed = 0;
    r.wall_requests_per_s = 0;
    r.num_threads = 0;
    cr_assert_eq(kvsim_report_write_json(rep_path, &r, err, sizeof err), 0, "%s", err);
    return r;
}

static void assert_same_files(const char *tag_a, const char *tag_b, const char *ext)
{
    char a[256], b[256];
    snprintf(a, sizeof a, "/tmp/kvsim-test-%d-%s.%s", (int)getpid(), tag_a, ext);
    snprintf(b, sizeof b, "/tmp/kvsim-test-%d-%s.%s", (int)getpid(), tag_b, ext);
    size_t na, nb;
    char *x = read_all(a, &na), *y = read_all(b, &nb);
    cr_assert(na == nb && memcmp(x, y, na) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
    unlink(a);
    unlink(b);
}

static void base_config(struct kvsim_replay_config *c, const char *trace)
{
    kvsim_replay_config_default(c);
    c->trace_path = trace;
    c->num_engines = 8;
#ifdef KVSIM_SANITIZED
    c->trace_opts.max_requests = 1500; /* sanitizers are 5-20x slower: a prefix of each trace */
#endif
}

Test(replay, default_workload_completes_with_prefix_reuse, .timeout = 120)
{
    struct kvsim_replay_config c;
    kvsim_replay_config_default(&c);
    struct kvsim_report r = run(&c, 2, "default");
    cr_assert_gt(r.num_requests, 500, "the built-in workload is meaningful");
    cr_assert_eq(r.completed, r.num_requests);
    cr_assert_eq(r.rejected + r.incomplete, 0);
    cr_assert_gt(r.prefix_cache_reuse, 0.2, "sessions share prefixes");
    cr_assert_gt(r.ttft.p50, 0);
    cr_assert_leq(r.ttft.p50, r.ttft.p99);
    cr_assert_leq(r.ttft.p99, r.ttft.max);
    cr_assert_gt(r.itl.count, 0);
    cr_assert_gt(r.output_tokens_per_s, 0);
    char a[256];
    snprintf(a, sizeof a, "/tmp/kvsim-test-%d-default.json", (int)getpid());
    unlink(a);
    snprintf(a, sizeof a, "/tmp/kvsim-test-%d-default.jsonl", (int)getpid());
    unlink(a);
}

/* The same replay at 1 and 2 threads: identical report and per-request records. */
static void check_deterministic(const char *trace, enum kvsim_router_policy router, bool events)
{
    if (!trace_available(trace))
        cr_skip_test("../shared/traces/%s is not available", trace);
    char path[512];
    snprintf(path, sizeof path, TRACES "%s", trace);
    struct kvsim_replay_config c;
    base_config(&c, path);
    c.router = router;
    c.kv_index_events = events;
    struct kvsim_report r1 = run(&c, 1, "t1");
    struct kvsim_report r2 = run(&c, 2, "t2");
    cr_assert_eq(r1.completed + r1.rejected, r1.num_requests,
                 "%s/%s: every request completes or is rejected", trace,
                 kvsim_router_policy_name(router));
    cr_assert_eq(r1.completed, r2.completed);
    assert_same_files("t1", "t2", "json");
    assert_same_files("t1", "t2", "jsonl");
}

Test(replay_determinism, conversation_kv_1_vs_2_threads, .timeout = 300)
{
    check_deterministic("conversation_trace.jsonl", KVSIM_ROUTER_KV, false);
}
Test(replay_determinism, conversation_least_loaded_1_vs_2_threads, .timeout = 300)
{
    check_deterministic("conversation_trace.jsonl", KVSIM_ROUTER_LEAST_LOADED, false);
}
Test(replay_determinism, conversation_round_robin_1_vs_2_threads, .timeout = 300)
{
    check_deterministic("conversation_trace.jsonl", KVSIM_ROUTER_ROUND_ROBIN, false);
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

/* The event-fed indexer and the pool queries see the same blocks at every boundary. */
Test(replay_determinism, kv_index_events_equals_pool_queries, .timeout = 300)
{
    const char *trace = "mooncake_trace_1000.jsonl";
    if (!trace_available(trace))
        cr_skip_test("../shared/traces/%s is not available", trace);
    char path[512];
    snprintf(path, sizeof path, TRACES "%s", trace);
    struct kvsim_replay_config c;
    base_config(&c, path);
    run(&c, 2, "pool");
    c.kv_index_events = true;
    run(&c, 2, "events");
    assert_same_files("pool", "events", "json");
    assert_same_files("pool", "events", "jsonl");
}

/* Every shared trace replays with every router: all requests complete or are rejected. */
Test(replay, every_trace_with_every_router, .timeout = 600)
{
    static const char *traces[] = {"conversation_trace.jsonl", "synthetic_trace.jsonl",
                                   "mooncake_trace_1000.jsonl", "AzureLLMInferenceTrace_code.csv",
                                   "AzureLLMInferenceTrace_conv.csv"};
    static const size_t sizes[] = {12031, 3993, 1000, 8819, 19366};
    for (size_t t = 0; t < 5; t++) {
        if (!trace_available(traces[t]))
            cr_skip_test("../shared/traces/%s is not available", traces[t]);
        char path[512];
        snprintf(path, sizeof path, TRACES "%s", traces[t]);
        for (int p = KVSIM_ROUTER_ROUND_ROBIN; p <= KVSIM_ROUTER_KV; p++) {
            struct kvsim_replay_config c;
            base_config(&c, path);
            c.router = (enum kvsim_router_policy)p;
            struct kvsim_report r = run(&c, 2, "all");
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
    char a[256];
    snprintf(a, sizeof a, "/tmp/kvsim-test-%d-all.json", (int)getpid());
    unlink(a);
    snprintf(a, sizeof a, "/tmp/kvsim-test-%d-all.jsonl", (int)getpid());
    unlink(a);
}

/* Closed-loop sessions: a follow-up turn arrives after the previous turn finished plus its
 * delay, whatever engine served the previous turn. */
Test(replay, session_turns_wait_for_the_previous_turn)
{
    struct kvsim_replay_config c;
    base_config(&c, INPUTS "mooncake_sessions.jsonl");
    c.num_engines = 3;
    c.trace_opts.trace_block_size = 512;
    run(&c, 2, "sessions");
    char path[256];
    snprintf(path, sizeof path, "/tmp/kvsim-test-%d-sessions.jsonl", (int)getpid());
    struct kvsim_trace t;
    struct kvsim_trace_opts o;
    kvsim_trace_opts_default(&o);
    char err[256];
    cr_assert_eq(kvsim_trace_load(INPUTS "mooncake_sessions.jsonl", &o, &t, err, sizeof err), 0,
                 "%s", err);
    size_t len;
    char *text = read_all(path, &len);
    json_t *recs[64];
    size_t n = 0;
    for (char *line = strtok(text, "\n"); line && n < 64; line = strtok(NULL, "\n")) {
        json_error_t je;
        recs[n] = json_loads(line, 0, &je);
        cr_assert_not_null(recs[n], "bad JSONL line: %s", je.text);
        n++;
    }
    cr_assert_eq(n, t.num_reqs);
    size_t follow_ups = 0;
    for (size_t i = 0; i < t.num_reqs; i++) {
        int32_t p = t.reqs[i].prev_turn;
        cr_assert_str_eq(json_string_value(json_object_get(recs[i], "status")), "completed");
        if (p < 0)
            continue;
        follow_ups++;
        double prev_finish = json_number_value(json_object_get(recs[p], "finish_ms"));
        double arrival = json_number_value(json_object_get(recs[i], "arrival_ms"));
        double delay = (double)t.reqs[i].delay_ns / 1e6;
        cr_assert_float_eq(arrival, prev_finish + delay, 1e-6,
                           "turn %zu arrives %f ms, previous finished %f + delay %f", i, arrival,
                           prev_finish, delay);
    }
    cr_assert_gt(follow_ups, 0);
    for (size_t i = 0; i < n; i++)
        json_decref(recs[i]);
    free(text);
    kvsim_trace_free(&t);
    unlink(path);
    snprintf(path, sizeof path, "/tmp/kvsim-test-%d-sessions.json", (int)getpid());
    unlink(path);
}

Test(replay, requests_that_can_never_run_are_rejected_with_a_reason)
{
    struct kvsim_replay_config c;
    base_config(&c, INPUTS "replay_reject.jsonl");
    c.sched.max_model_len = 600; /* the second request's 900-token prompt never fits */
    c.sched.max_num_batched_tokens = 600;
    struct kvsim_report r = run(&c, 1, "reject");
    cr_assert_eq(r.rejected, 1);
    cr_assert_eq(r.completed, 2);
    cr_assert_eq(r.num_reject_reasons, 1);
    cr_assert_str_eq(r.rejects[0].reason, "prompt_too_long");
    cr_assert_eq(r.rejects[0].count, 1);
}

/* A session turn rejected at admission still releases its follow-up on time (arrival + delay),
 * even when no engine has anything else to do (no step would otherwise end an epoch). */
Test(replay, rejected_turn_releases_its_follow_up_on_time)
{
    struct kvsim_replay_config c;
    base_config(&c, INPUTS "replay_session_reject.jsonl");
    c.num_engines = 2;
    c.sched.max_model_len = 600;
    c.sched.max_num_batched_tokens = 600;
    struct kvsim_report r = run(&c, 2, "sreject");
    cr_assert_eq(r.rejected, 1);
    cr_assert_eq(r.completed, 1);
    char path[256];
    snprintf(path, sizeof path, "/tmp/kvsim-test-%d-sreject.jsonl", (int)getpid());
    size_t len;
    char *text = read_all(path, &len);
    /* trace order: the rejected first turn (t=0), then its follow-up */
    char *line = strtok(text, "\n");
    json_error_t je;
    json_t *first = json_loads(line, 0, &je);
    json_t *follow = NULL;
    for (line = strtok(NULL, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, &je);
        if (json_integer_value(json_object_get(j, "input_len")) == 100)
            follow = j;
        else
            json_decref(j);
    }
    cr_assert_not_null(follow);
    cr_assert_str_eq(json_string_value(json_object_get(first, "status")), "rejected");
    cr_assert_float_eq(json_number_value(json_object_get(follow, "arrival_ms")),
                       json_number_value(json_object_get(first, "finish_ms")) + 250.0, 1e-6);
    json_decref(first);
    json_decref(follow);
    free(text);
    unlink(path);
    snprintf(path, sizeof path, "/tmp/kvsim-test-%d-sreject.json", (int)getpid());
    unlink(path);
}

/* The step-time model from --config: prefill 0.01 ms/token + 5 ms, decode 2 ms, all halved by
 * speedup_ratio 2. One 100-token request with 3 outputs on an idle engine: the first token at
 * (1 + 5) / 2 = 3 ms, then one decode step (1 ms) per token. */
Test(replay, step_model_from_a_config_file)
{
    struct kvsim_replay_config c;
    base_config(&c, INPUTS "one_request.jsonl");
    c.num_engines = 1;
    char err[256];
    cr_assert_eq(kvsim_step_model_load(INPUTS "step_model.json", &c.model, err, sizeof err), 0,
                 "%s", err);
    struct kvsim_report r = run(&c, 1, "model");
    cr_assert_eq(r.completed, 1);
    cr_assert_float_eq(r.ttft.max, 3e6, 1e-3, "TTFT %f ns", r.ttft.max);
    cr_assert_float_eq(r.e2e.max, 5e6, 1e-3, "E2E %f ns", r.e2e.max);
    cr_assert_float_eq(r.tpot.max, 1e6, 1e-3, "TPOT %f ns", r.tpot.max);
    char path[256];
    snprintf(path, sizeof path, "/tmp/kvsim-test-%d-model.json", (int)getpid());
    unlink(path);
    snprintf(path, sizeof path, "/tmp/kvsim-test-%d-model.jsonl", (int)getpid());
    unlink(path);
}

Test(replay, bad_trace_names_file_line_and_field)
{
    struct kvsim_replay_config c;
    base_config(&c, INPUTS "bad/missing_field.jsonl");
    struct kvsim_report r;
    char err[512];
    int rc = kvsim_replay_run(&c, &r, err, sizeof err);
    cr_assert_lt(rc, 0);
    cr_assert(strstr(err, "missing_field.jsonl:") != NULL, "%s", err);
    cr_assert(strstr(err, "field '") != NULL, "%s", err);
}

Test(replay, impossible_engine_configuration_is_an_error)
{
    struct kvsim_replay_config c;
    kvsim_replay_config_default(&c);
    c.sched.enable_chunked_prefill = false; /* budget 8192 < max_model_len 262144 */
    struct kvsim_report r;
    char err[512];
    cr_assert_eq(kvsim_replay_run(&c, &r, err, sizeof err), -EINVAL);
    cr_assert(strlen(err) > 0);
}

/* ---- offload tiers ------------------------------------------------------------------------ */

/* A G1 small enough that G2/G3 matter, slow enough links that copies overlap steps, and
 * failure injection: the report must be identical for either executor and 1 or 2 threads. */
static void offload_config(struct kvsim_replay_config *c, const char *trace)
{
    base_config(c, trace);
    c->sched.num_blocks = 1200;
    c->offload = true;
    c->tiers.g2_blocks = 3000;
    c->tiers.g3_blocks = 20000;
    c->tiers.pipe.fail_rate = 0.02;
    c->tiers.pipe.lanes[OFFLOAD_LANE_G1_G2].bandwidth = 2000000000;
}

/* The runs tagged tags[0..n) have the report and records of the run tagged ref (all deleted). */
static void assert_same_as(const char *const *tags, int n, const char *ref)
{
    for (int i = 0; i < n; i++) {
        /* assert_same_files deletes both: keep a copy of the reference run for the next one */
        char from[256], to[256], cmd[600];
        for (int k = 0; k < 2; k++) {
            const char *ext = k ? "jsonl" : "json";
            snprintf(from, sizeof from, "/tmp/kvsim-test-%d-%s.%s", (int)getpid(), ref, ext);
            snprintf(to, sizeof to, "/tmp/kvsim-test-%d-ref.%s", (int)getpid(), ext);
            snprintf(cmd, sizeof cmd, "cp %s %s", from, to);
            cr_assert_eq(system(cmd), 0, "%s", cmd);
        }
        assert_same_files("ref", tags[i], "json");
        assert_same_files("ref", tags[i], "jsonl");
    }
    assert_same_files(ref, ref, "json");
    assert_same_files(ref, ref, "jsonl");
}

static void check_offload_deterministic(const char *trace)
{
    char path[512];
    if (trace) {
        if (!trace_available(trace))
            cr_skip_test("../shared/traces/%s is not available", trace);
        snprintf(path, sizeof path, TRACES "%s", trace);
    }
    struct kvsim_replay_config c;
    offload_config(&c, trace ? path : NULL);
    struct kvsim_report r = run(&c, 1, "inline1");
    run(&c, 2, "inline2");
    c.offload_pool = true;
    c.offload_threads = 2;
    run(&c, 1, "pool1");
    run(&c, 2, "pool2");
    cr_assert_eq(r.completed + r.rejected, r.num_requests,
                 "every request completes or is rejected");
    cr_assert(r.offload.enabled, "the report has an offload section");
    cr_assert_gt(r.offload.lanes[0].blocks, 0, "G1->G2 traffic");
    cr_assert_gt(r.offload.lanes[3].blocks, 0, "G2->G1 traffic");
    cr_assert_gt(r.offload.g2_hit_blocks, 0, "G2 hits");
    cr_assert_gt(r.offload.onboarded_tokens, 0, "tokens onboarded instead of recomputed");
    cr_assert_gt(r.offload.failed_blocks, 0, "failures were injected");
    static const char *const tags[] = {"inline2", "pool1", "pool2"};
    assert_same_as(tags, 3, "inline1");
}

Test(replay_offload, default_workload_identical_for_both_executors_and_threads, .timeout = 300)
{
    check_offload_deterministic(NULL);
}

Test(replay_offload, conversation_identical_for_both_executors_and_threads, .timeout = 600)
{
    check_offload_deterministic("conversation_trace.jsonl");
}

/* ---- a G3 shared by all engines ------------------------------------------------------------ */

/*
 * Round-robin routing sends the turns of one session to different engines: a prefix block that
 * one engine wrote to G3 is a G3 hit for another only if G3 is shared. The shared G3 must keep
 * the replay's property (identical for either executor at 1 and 2 threads) and must matter.
 */
Test(replay_offload, shared_g3_identical_for_both_executors_and_threads, .timeout = 300)
{
    struct kvsim_replay_config c;
    offload_config(&c, NULL);
    c.router = KVSIM_ROUTER_ROUND_ROBIN;
    c.g3_shared = true;
    struct kvsim_report r = run(&c, 1, "g3s-inline1");
    run(&c, 2, "g3s-inline2");
    c.offload_pool = true;
    c.offload_threads = 2;
    run(&c, 1, "g3s-pool1");
    run(&c, 2, "g3s-pool2");
    cr_assert_eq(r.completed + r.rejected, r.num_requests,
                 "every request completes or is rejected");
    cr_assert_gt(r.offload.lanes[OFFLOAD_LANE_G2_G3].blocks, 0, "G2->G3 traffic");
    cr_assert_gt(r.offload.g3_hit_blocks, 0, "G3 hits");
    cr_assert_gt(r.offload.g3_resident, 0, "the shared G3 holds blocks at the end");
    cr_assert_leq(r.offload.g3_resident, c.tiers.g3_blocks, "one capacity for all engines");
    static const char *const tags[] = {"g3s-inline2", "g3s-pool1", "g3s-pool2"};
    assert_same_as(tags, 3, "g3s-inline1");

    /* The same replay with a G3 per engine: sharing finds blocks other engines wrote. */
    c.g3_shared = false;
    c.offload_pool = false;
    struct kvsim_report p = run(&c, 2, "g3p");
    cr_assert_gt(r.offload.g3_hit_blocks, p.offload.g3_hit_blocks,
                 "a shared G3 gives more G3 hits (%" PRIu64 ") than one per engine (%" PRIu64 ")",
                 r.offload.g3_hit_blocks, p.offload.g3_hit_blocks);
    assert_same_files("g3p", "g3p", "json");
    assert_same_files("g3p", "g3p", "jsonl");
}

Test(replay_offload, shared_g3_needs_a_capacity)
{
    struct kvsim_replay_config c;
    offload_config(&c, NULL);
    c.g3_shared = true;
    c.tiers.g3_blocks = 0;
    struct kvsim_report r;
    char err[512];
    cr_assert_eq(kvsim_replay_run(&c, &r, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "shared G3") != NULL, "%s", err);
}
