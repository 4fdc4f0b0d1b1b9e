/*
 * test_api.c - the public C API (runtime/kvsim.h) as an embedder sees it: only kvsim.h is
 * included, so the test also checks that the header stands alone.
 */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/kvsim.h"

#include "common.h"

static kvsim_config_t *config(const char *json)
{
    kvsim_config_t *c;
    cr_assert_eq(kvsim_config_new(&c), 0);
    if (json)
        cr_assert_eq(kvsim_config_set_json(c, json), 0, "%s", kvsim_config_error(c));
    return c;
}

static kvsim_engine_t *engine(const char *json)
{
    kvsim_config_t *c = config(json);
    kvsim_engine_t *e;
    cr_assert_eq(kvsim_engine_new(c, &e), 0, "%s", kvsim_config_error(c));
    kvsim_config_free(c);
    return e;
}

/* All waiting events (at most cap). */
static size_t drain(kvsim_engine_t *e, kvsim_event_t *ev, size_t cap)
{
    size_t n = 0, k;
    while (n < cap && (k = kvsim_engine_events(e, ev + n, cap - n)) > 0)
        n += k;
    return n;
}

static void add(kvsim_engine_t *e, uint64_t id, int64_t t, uint32_t input_len, uint32_t max_tokens,
                uint32_t stop_after)
{
    kvsim_request_t r = KVSIM_REQUEST_INIT;
    r.id = id;
    r.arrival_ns = t;
    r.input_len = input_len;
    r.max_tokens = max_tokens;
    r.stop_after = stop_after;
    cr_assert_eq(kvsim_engine_add(e, &r), 0, "%s", kvsim_engine_errmsg(e));
}

Test(api, version_and_errors)
{
    cr_assert_eq(kvsim_version_hex(), (unsigned)KVSIM_VERSION_HEX);
    char want[64];
    snprintf(want, sizeof want, "kvsim %d.%d.%d", KVSIM_VERSION_MAJOR, KVSIM_VERSION_MINOR,
             KVSIM_VERSION_PATCH);
    cr_assert_str_eq(kvsim_version(), want);
    cr_assert(strstr(kvsim_strerror(KVSIM_EDEADEND), "dead end"));
}

Test(api, config_rejects_bad_values_by_name)
{
    kvsim_config_t *c = config(NULL);
    cr_assert_eq(kvsim_config_set(c, "max-num-seqs", "0"), -EINVAL);
    cr_assert_str_eq(kvsim_config_error(c),
                     "option --max-num-seqs: '0' is not an integer in [1, 1048576]");
    cr_assert_eq(kvsim_config_set(c, "no_such_option", "1"), -EINVAL);
    cr_assert(strstr(kvsim_config_error(c), "unknown option 'no_such_option'"));
    cr_assert_eq(kvsim_config_set(c, "router", "random"), -EINVAL);
    cr_assert(strstr(kvsim_config_error(c), "round-robin, least-loaded, kv or dp-lb"));
    cr_assert_eq(kvsim_config_set(c, "enable_prefix_caching", "yes"), -EINVAL);
    cr_assert_eq(kvsim_config_set_json(c, "{\"block_size\": 32, \"tp\": []}"), -EINVAL);
    cr_assert(strstr(kvsim_config_error(c), "'tp'"));
    cr_assert_eq(kvsim_config_set_json(c, "not json"), -EINVAL);
    kvsim_config_free(c);
}

Test(api, config_json_round_trips)
{
    kvsim_config_t *c = config("{\"num_gpu_blocks_override\": 500, \"--max-num-seqs\": \"8\", "
                               "\"kv-events\": true, \"quiet\": null}");
    cr_assert_eq(kvsim_config_set(c, "max-num-seqs", "9"), 0);       /* replaces the earlier one */
    cr_assert_eq(kvsim_config_set(c, "max-num-seqs", "x"), -EINVAL); /* refused: 9 stays */
    char *j = kvsim_config_json(c);
    cr_assert_str_eq(j,
                     "{\"num-gpu-blocks\":\"500\",\"max-num-seqs\":\"9\",\"kv-events\":\"true\"}");
    kvsim_config_t *d = config(j);
    char *j2 = kvsim_config_json(d);
    cr_assert_str_eq(j2, j);
    kvsim_free(j);
    kvsim_free(j2);
    kvsim_config_free(c);
    kvsim_config_free(d);
    KVSIM_TEST_LEAK_CHECK();
}

Test(api, engine_refuses_an_impossible_configuration)
{
    kvsim_config_t *c =
        config("{\"enable-chunked-prefill\": false, \"max-num-batched-tokens\": 64, "
               "\"max-model-len\": 4096}");
    kvsim_engine_t *e = (kvsim_engine_t *)1;
    cr_assert_eq(kvsim_engine_new(c, &e), -EINVAL);
    cr_assert_null(e);
    cr_assert(strstr(kvsim_config_error(c), "impossible engine configuration"));
    kvsim_config_free(c);
}

/* Three requests run to their stop or their length with the engine configured by json. */
static void run_to_stop_or_length(const char *json)
{
    kvsim_engine_t *e = engine(json);
    add(e, 7, 0, 100, 5, 0);      /* length */
    add(e, 8, 1000, 40, 20, 3);   /* stops after 3 */
    add(e, 9, 2000000, 10, 4, 9); /* stop_after beyond max_tokens: length */
    cr_assert_eq(kvsim_engine_next_time(e), 0);
    int n = kvsim_engine_run_until(e, INT64_C(1) << 40);
    cr_assert_gt(n, 0);
    kvsim_event_t ev[256];
    size_t k = drain(e, ev, 256);
    cr_assert_eq((size_t)n, k);
    uint32_t tokens[3] = {0}, reason[3] = {99, 99, 99}, finished_with[3] = {0};
    int64_t first[3] = {-1, -1, -1};
    for (size_t i = 0; i < k; i++) {
        uint32_t r = (uint32_t)(ev[i].id - 7);
        cr_assert_lt(r, 3u);
        if (i)
            cr_assert_geq(ev[i].t_ns, ev[i - 1].t_ns, "events in time order");
        if (ev[i].kind == KVSIM_EVENT_TOKEN) {
            cr_assert_eq(ev[i].a, tokens[r], "token indices count up");
            if (tokens[r]++ == 0)
                first[r] = ev[i].t_ns;
        }
        if (ev[i].kind == KVSIM_EVENT_FINISHED) {
            reason[r] = ev[i].a;
            finished_with[r] = ev[i].b;
        }
    }
    cr_assert_eq(tokens[0], 5);
    cr_assert_eq(reason[0], KVSIM_FINISH_LENGTH);
    cr_assert_eq(tokens[1], 3);
    cr_assert_eq(reason[1], KVSIM_FINISH_STOP);
    cr_assert_eq(finished_with[1], 3);
    cr_assert_eq(tokens[2], 4);
    cr_assert_eq(reason[2], KVSIM_FINISH_LENGTH);
    cr_assert_str_eq(kvsim_finish_reason_name(KVSIM_FINISH_STOP), "stop");
    kvsim_record_t rec = KVSIM_RECORD_INIT;
    cr_assert_eq(kvsim_engine_record(e, 8, &rec), 0);
    cr_assert_eq(rec.arrival_ns, 1000);
    cr_assert_eq(rec.first_token_ns, first[1]);
    cr_assert_gt(rec.first_token_ns, rec.arrival_ns, "TTFT > 0");
    cr_assert_eq(rec.output_tokens, 3);
    cr_assert_eq(rec.finish_reason, KVSIM_FINISH_STOP);
    cr_assert_eq(kvsim_engine_record(e, 99, &rec), -ENOENT);
    kvsim_load_t l = KVSIM_LOAD_INIT;
    cr_assert_eq(kvsim_engine_load(e, &l), 0);
    cr_assert_eq(l.num_unfinished + l.num_pending + l.num_running + l.num_waiting, 0);
    cr_assert_eq(l.total_blocks, 199);
    cr_assert_eq(kvsim_engine_next_time(e), INT64_MAX);
    char *j = kvsim_engine_report_json(e);
    json_t *root = json_loads(j, 0, NULL);
    cr_assert_not_null(root);
    cr_assert_eq(
        json_integer_value(json_object_get(json_object_get(root, "requests"), "completed")), 3);
    json_decref(root);
    kvsim_free(j);
    kvsim_engine_free(e);
}

Test(api, requests_run_to_their_stop_or_length)
{
    run_to_stop_or_length("{\"num-gpu-blocks\": 200}");
}

/* Under async scheduling the step after a stop is scheduled before the stop is known: it lists
 * the stopped request, whose output is dropped (3 tokens, not 4), and the request is released
 * only after that step (ASan checks that nothing reads it after). */
Test(api, async_scheduling_drops_the_output_scheduled_after_a_stop)
{
    run_to_stop_or_length("{\"num-gpu-blocks\": 200, \"async-scheduling\": true}");
}

Test(api, step_runs_one_step_and_waits_for_arrivals)
{
    kvsim_engine_t *e = engine(NULL);
    cr_assert_eq(kvsim_engine_step(e), 0, "nothing to do");
    add(e, 1, 5000000, 64, 3, 0);
    cr_assert_eq(kvsim_engine_next_time(e), 5000000);
    /* The arrival: admitted, a step starts (one event: scheduled). */
    cr_assert_eq(kvsim_engine_run_next(e), 1);
    cr_assert_eq(kvsim_engine_now(e), 5000000);
    kvsim_event_t ev[16];
    cr_assert_eq(kvsim_engine_events(e, ev, 16), 1);
    cr_assert_eq(ev[0].kind, KVSIM_EVENT_SCHEDULED);
    cr_assert_eq(ev[0].t_ns, 5000000);
    kvsim_load_t l = KVSIM_LOAD_INIT;
    kvsim_engine_load(e, &l);
    cr_assert_eq(l.num_running, 1);
    int steps = 0;
    for (;;) {
        int n = kvsim_engine_step(e);
        cr_assert_geq(n, 0);
        if (kvsim_engine_events(e, ev, 16) == 0)
            break;
        steps++;
    }
    cr_assert_eq(steps, 3, "a prefill step, then two decode steps");
    kvsim_engine_load(e, &l);
    cr_assert_eq(l.steps, 3);
    kvsim_engine_free(e);
}

Test(api, abort_finishes_a_running_request)
{
    kvsim_engine_t *e = engine(NULL);
    add(e, 1, 0, 64, 1000, 0);
    add(e, 2, 0, 64, 10, 0);
    add(e, 3, INT64_C(1) << 40, 64, 10, 0); /* aborted before it arrives */
    for (int i = 0; i < 4; i++)
        cr_assert_geq(kvsim_engine_step(e), 0);
    cr_assert_eq(kvsim_engine_abort(e, 1), 0);
    cr_assert_eq(kvsim_engine_abort(e, 3), 0);
    cr_assert_eq(kvsim_engine_abort(e, 3), KVSIM_EFINISHED);
    cr_assert_eq(kvsim_engine_abort(e, 42), -ENOENT);
    cr_assert_geq(kvsim_engine_run_until(e, INT64_C(1) << 41), 0);
    kvsim_record_t r = KVSIM_RECORD_INIT;
    kvsim_engine_record(e, 1, &r);
    cr_assert_eq(r.finish_reason, KVSIM_FINISH_ABORTED);
    cr_assert_lt(r.output_tokens, 10u);
    kvsim_engine_record(e, 2, &r);
    cr_assert_eq(r.finish_reason, KVSIM_FINISH_LENGTH);
    cr_assert_eq(r.output_tokens, 10u);
    kvsim_engine_record(e, 3, &r);
    cr_assert_eq(r.finish_reason, KVSIM_FINISH_ABORTED);
    cr_assert_eq(r.first_token_ns, -1);
    kvsim_load_t l = KVSIM_LOAD_INIT;
    kvsim_engine_load(e, &l);
    cr_assert_eq(l.active_blocks, 0, "the aborted request's KV is freed");
    kvsim_engine_free(e);
    KVSIM_TEST_LEAK_CHECK();
}

Test(api, bad_requests_are_refused_with_a_reason)
{
    kvsim_engine_t *e = engine("{\"max-model-len\": 1000}");
    kvsim_request_t r = KVSIM_REQUEST_INIT;
    r.id = 1;
    cr_assert_eq(kvsim_engine_add(e, &r), -EINVAL); /* an empty prompt */
    cr_assert(strstr(kvsim_engine_errmsg(e), "request 1: the prompt is empty"));
    r.input_len = 10;
    r.max_tokens = 0;
    cr_assert_eq(kvsim_engine_add(e, &r), -EINVAL);
    cr_assert(strstr(kvsim_engine_errmsg(e), "max_tokens"));
    r.max_tokens = 4;
    cr_assert_eq(kvsim_engine_add(e, &r), 0);
    cr_assert_eq(kvsim_engine_add(e, &r), -EINVAL);
    cr_assert(strstr(kvsim_engine_errmsg(e), "already used"));
    add(e, 2, 0, 5000, 4, 0); /* longer than max-model-len: rejected at its arrival */
    cr_assert_geq(kvsim_engine_run_until(e, 1000000000), 0);
    kvsim_record_t rec = KVSIM_RECORD_INIT;
    kvsim_engine_record(e, 2, &rec);
    cr_assert_eq(rec.finish_reason, KVSIM_FINISH_REJECTED);
    cr_assert_eq(kvsim_engine_run_until(e, 5), -EINVAL, "time never runs backwards");
    r.id = 3;
    r.arrival_ns = 0;
    cr_assert_eq(kvsim_engine_add(e, &r), -EINVAL, "an arrival before the clock");
    kvsim_engine_free(e);
}

struct kv_seen {
    uint64_t hashes[64];
    uint32_t n;
    uint32_t stored_events;
};

static void on_kv(void *ctx, const kvsim_kv_event_t *ev)
{
    struct kv_seen *s = ctx;
    if (ev->kind != KVSIM_KV_STORED)
        return;
    s->stored_events++;
    for (uint32_t i = 0; i < ev->num_hashes && s->n < 64; i++)
        s->hashes[s->n++] = ev->hashes[i];
}

Test(api, shared_prefixes_hit_the_cache_and_kv_events_name_their_blocks)
{
    kvsim_engine_t *e = engine("{\"kv-events\": true, \"block-size\": 16}");
    uint64_t ids[4] = {11, 12, 13, 14}, other[4] = {11, 12, 99, 98};
    kvsim_request_t a = KVSIM_REQUEST_INIT;
    a.id = 1;
    a.hash_ids = ids;
    a.num_hash_ids = 4;
    a.hash_block_size = 32; /* 128 tokens: 8 engine blocks */
    a.max_tokens = 2;
    cr_assert_eq(kvsim_engine_add(e, &a), 0);
    cr_assert_geq(kvsim_engine_run_until(e, 1000000000), 0);
    struct kv_seen seen = {0};
    cr_assert_gt(kvsim_engine_kv_events(e, on_kv, &seen), 0);
    uint64_t want[16];
    cr_assert_eq(kvsim_engine_prompt_hashes(e, &a, want, 16), 8);
    cr_assert_geq(seen.n, 8u);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(seen.hashes[i], want[i], "block %d", i);
    kvsim_request_t b = a;
    b.id = 2;
    b.arrival_ns = 2000000000;
    b.hash_ids = other; /* shares the first 64 tokens: 4 blocks */
    cr_assert_eq(kvsim_engine_add(e, &b), 0);
    cr_assert_geq(kvsim_engine_run_until(e, 4000000000), 0);
    kvsim_record_t r = KVSIM_RECORD_INIT;
    kvsim_engine_record(e, 2, &r);
    cr_assert_eq(r.cached_tokens, 64);
    kvsim_load_t l = KVSIM_LOAD_INIT;
    kvsim_engine_load(e, &l);
    cr_assert_eq(l.prefix_queries, 256);
    cr_assert_eq(l.prefix_hits, 64);
    kvsim_engine_free(e);
    kvsim_engine_t *quiet = engine(NULL);
    cr_assert_eq(kvsim_engine_kv_events(quiet, on_kv, &seen), -EINVAL);
    kvsim_engine_free(quiet);
    KVSIM_TEST_LEAK_CHECK();
}

static void count_event(void *ctx, const kvsim_event_t *ev)
{
    (void)ev;
    ++*(size_t *)ctx;
}

Test(api, callback_receives_events_instead_of_the_queue)
{
    kvsim_engine_t *e = engine(NULL);
    size_t seen = 0;
    kvsim_engine_set_event_callback(e, count_event, &seen);
    add(e, 1, 0, 10, 3, 0);
    cr_assert_eq(kvsim_engine_run_until(e, 1000000000), 0, "nothing queued");
    cr_assert_eq(seen, 5, "scheduled, three tokens, finished");
    kvsim_engine_free(e);
}

/* The same requests through the engine API and through the one-engine replay: one engine
 * core, so the same figures. */
Test(api, engine_matches_a_one_engine_replay)
{
    const char *cfg = "{\"engines\": 1, \"threads\": 1, \"num-gpu-blocks\": 400, "
                      "\"max-num-seqs\": 8, \"router\": \"round-robin\"}";
    enum { N = 40 };
    kvsim_request_t reqs[N];
    uint64_t hashes[N][6];
    for (int i = 0; i < N; i++) {
        kvsim_request_t r = KVSIM_REQUEST_INIT;
        r.id = (uint64_t)i;
        r.arrival_ns = (int64_t)i * 15000000;
        for (int k = 0; k < 6; k++)
            hashes[i][k] =
                k < 3 ? (uint64_t)(i % 4) * 100 + (uint64_t)k : (uint64_t)i * 1000 + (uint64_t)k;
        r.hash_ids = hashes[i];
        r.num_hash_ids = 6;
        r.hash_block_size = 64;
        r.input_len = 6 * 64 - (uint32_t)(i % 7);
        r.max_tokens = 20 + (uint32_t)(i % 13);
        reqs[i] = r;
    }
    kvsim_config_t *c = config(cfg);
    kvsim_summary_t s = KVSIM_SUMMARY_INIT;
    char *json = NULL;
    cr_assert_eq(kvsim_replay_requests(c, reqs, N, &s, &json), 0, "%s", kvsim_config_error(c));
    cr_assert_eq(s.completed, N);
    cr_assert_gt(s.cached_tokens, 0);
    kvsim_engine_t *e;
    cr_assert_eq(kvsim_engine_new(c, &e), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(kvsim_engine_add(e, &reqs[i]), 0);
    cr_assert_geq(kvsim_engine_run_until(e, INT64_C(1) << 50), 0);
    char *ej = kvsim_engine_report_json(e);
    json_t *a = json_loads(json, 0, NULL), *b = json_loads(ej, 0, NULL);
    cr_assert(a && b);
    /* Everything the two runs have in common: the requests, latencies and throughput. */
    const char *keys[] = {"requests",
                          "preemptions",
                          "tokens",
                          "prefix_cache_reuse_ratio",
                          "timing",
                          "duration_ms",
                          "throughput",
                          "ttft_ms",
                          "tpot_ms",
                          "itl_ms",
                          "token_gap_ms",
                          "e2e_ms",
                          "output_token_throughput_per_user"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        json_t *x = json_object_get(a, keys[k]), *y = json_object_get(b, keys[k]);
        cr_assert(x && y, "%s", keys[k]);
        char *xs = json_dumps(x, JSON_SORT_KEYS | JSON_ENCODE_ANY),
             *ys = json_dumps(y, JSON_SORT_KEYS | JSON_ENCODE_ANY);
        cr_assert_str_eq(xs, ys, "%s differs", keys[k]);
        free(xs);
        free(ys);
    }
    json_decref(a);
    json_decref(b);
    kvsim_free(ej);
    kvsim_free(json);
    kvsim_engine_free(e);
    kvsim_config_free(c);
    KVSIM_TEST_LEAK_CHECK();
}

Test(api, replay_reports_bad_input_by_name)
{
    kvsim_config_t *c = config("{\"trace\": \"/nonexistent/trace.jsonl\"}");
    cr_assert_eq(kvsim_replay(c, NULL, NULL), -ENOENT);
    cr_assert(strstr(kvsim_config_error(c), "/nonexistent/trace.jsonl"), "%s",
              kvsim_config_error(c));
    kvsim_config_free(c);
    c = config("{\"g3-blocks\": 10}");
    cr_assert_eq(kvsim_replay(c, NULL, NULL), -EINVAL);
    cr_assert_str_eq(kvsim_config_error(c),
                     "option --g3-blocks needs --g2-blocks (offload tiers are off)");
    kvsim_request_t r = KVSIM_REQUEST_INIT;
    r.num_tokens = 1;
    uint32_t tok = 5;
    r.tokens = &tok;
    kvsim_config_free(c);
    c = config(NULL);
    cr_assert_eq(kvsim_replay_requests(c, &r, 1, NULL, NULL), -EINVAL);
    cr_assert(strstr(kvsim_config_error(c), "token prompts"));
    kvsim_config_free(c);
}

Test(api, replay_of_the_default_workload)
{
    kvsim_config_t *c = config("{\"engines\": 2, \"threads\": 2}");
    kvsim_summary_t s = KVSIM_SUMMARY_INIT;
    char *text = NULL;
    cr_assert_eq(kvsim_replay(c, &s, &text), 0, "%s", kvsim_config_error(c));
    /* The per-engine part adds up to the whole. */
    json_t *root = json_loads(text, 0, NULL);
    json_t *engines = json_object_get(root, "engines");
    cr_assert_eq(json_array_size(engines), 2);
    json_int_t done = 0;
    double busy = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *e = json_array_get(engines, i);
        done += json_integer_value(json_object_get(e, "completed"));
        busy += json_real_value(json_object_get(e, "busy_s"));
        cr_assert_gt(json_real_value(json_object_get(e, "peak_kv_usage")), 0);
    }
    cr_assert_eq(done, 1050);
    cr_assert_float_eq(json_real_value(json_object_get(root, "busy_engine_s")), busy, 1e-9);
    json_decref(root);
    kvsim_free(text);
    cr_assert_eq(s.num_requests, 1050);
    cr_assert_eq(s.completed, 1050);
    cr_assert_gt(s.ttft_p50_ms, 0);
    cr_assert_gt(s.prefix_cache_reuse, 0);
    kvsim_config_free(c);
}

Test(api, engine_with_offload_tiers_and_a_profile)
{
    /* A small G1 behind a G2: prefixes come back from G2; the tiny profile times the steps. */
    kvsim_engine_t *e = engine("{\"num-gpu-blocks\": 64, \"g2-blocks\": 2000, "
                               "\"profiles\": \"" KVSIM_SOURCE_DIR "/tests/inputs/profiles/tiny\", "
                               "\"hardware\": \"TESTHW\", \"model\": \"test/tiny\"}");
    uint64_t h[8][4];
    for (int i = 0; i < 8; i++) {
        kvsim_request_t r = KVSIM_REQUEST_INIT;
        for (int k = 0; k < 4; k++)
            h[i][k] = (uint64_t)(i % 2) * 10 + (uint64_t)k;
        r.id = (uint64_t)i;
        r.arrival_ns = (int64_t)i * 200000000;
        r.hash_ids = h[i];
        r.num_hash_ids = 4;
        r.hash_block_size = 64;
        r.max_tokens = 4;
        cr_assert_eq(kvsim_engine_add(e, &r), 0, "%s", kvsim_engine_errmsg(e));
    }
    cr_assert_geq(kvsim_engine_run_until(e, INT64_C(1) << 40), 0, "%s", kvsim_engine_errmsg(e));
    kvsim_record_t rec = KVSIM_RECORD_INIT;
    for (uint64_t i = 0; i < 8; i++) {
        cr_assert_eq(kvsim_engine_record(e, i, &rec), 0);
        cr_assert_eq(rec.finish_reason, KVSIM_FINISH_LENGTH);
        if (i >= 2)
            cr_assert_gt(rec.cached_tokens, 0, "request %llu hits G1 or G2", (unsigned long long)i);
    }
    char *j = kvsim_engine_report_json(e);
    cr_assert(strstr(j, "\"step_model\": \"profile\""), "%s", j);
    kvsim_free(j);
    kvsim_engine_free(e);
    KVSIM_TEST_LEAK_CHECK();
}

Test(api, a_profile_that_cannot_be_read_is_an_error)
{
    kvsim_config_t *c = config("{\"profiles\": \"/nonexistent\", \"hardware\": \"X\", "
                               "\"model\": \"a/b\"}");
    kvsim_engine_t *e;
    cr_assert_eq(kvsim_engine_new(c, &e), -EINVAL);
    cr_assert(strstr(kvsim_config_error(c), "--model /nonexistent/configs/model/a/b.json"), "%s",
              kvsim_config_error(c));
    kvsim_config_free(c);
}

Test(api, contract_2_knobs_reach_the_engine_and_the_report)
{
    /* #49445: the front door refuses the third arrival while two are unfinished. */
    kvsim_engine_t *e = engine("{\"max-num-queued-reqs\": 2, \"max-num-active-seqs\": 1}");
    for (uint64_t i = 0; i < 3; i++)
        add(e, i, 0, 32, 4, 0);
    cr_assert_geq(kvsim_engine_run_until(e, 5000000), 0);
    kvsim_load_t l = KVSIM_LOAD_INIT;
    kvsim_engine_load(e, &l);
    cr_assert_eq(l.num_running, 1, "#56758: one active sequence at a time");
    cr_assert_eq(l.num_waiting, 1);
    kvsim_record_t r = KVSIM_RECORD_INIT;
    kvsim_engine_record(e, 2, &r);
    cr_assert_eq(r.finish_reason, KVSIM_FINISH_REJECTED);
    cr_assert_geq(kvsim_engine_run_until(e, INT64_C(1) << 40), 0);
    char *j = kvsim_engine_report_json(e);
    json_t *root = json_loads(j, 0, NULL);
    json_t *run = json_object_get(root, "run");
    cr_assert_eq(json_integer_value(json_object_get(run, "vllm_contract")), 2);
    json_t *args = json_object_get(run, "engine_args");
    cr_assert_eq(json_integer_value(json_object_get(args, "max_num_queued_reqs")), 2);
    cr_assert_eq(json_integer_value(json_object_get(args, "max_num_active_seqs")), 1);
    cr_assert(strstr(j, "\"queue_full\""), "%s", j);
    json_decref(root);
    kvsim_free(j);
    kvsim_engine_free(e);
    /* Contract 1 has neither knob. */
    kvsim_config_t *c = config("{\"vllm-contract\": 1, \"max-num-queued-reqs\": 2}");
    cr_assert_eq(kvsim_engine_new(c, &e), -EINVAL);
    cr_assert_str_eq(kvsim_config_error(c),
                     "option --max-num-queued-reqs needs --vllm-contract 2 (vLLM #49445)");
    kvsim_config_free(c);
}

Test(api, unbounded_cache_reuse_beside_the_achieved_one)
{
    /* r1 repeats r0's two blocks: an unbounded shared cache gives 32 of 80 prompt tokens. On
     * two round-robin engines r1 lands beside an empty cache (0 %); on one engine it hits. The
     * same with ids far apart (the replay then counts them in a hash table, not a bitmap). */
    const uint64_t ids[2][3] = {{1, 2, 3}, {1000000001, 2000000002, 7}};
    for (int sparse = 0; sparse < 2; sparse++) {
        kvsim_request_t reqs[2] = {KVSIM_REQUEST_INIT, KVSIM_REQUEST_INIT};
        for (int r = 0; r < 2; r++) {
            reqs[r].id = (uint64_t)r;
            reqs[r].hash_ids = ids[sparse];
            reqs[r].num_hash_ids = (uint32_t)(2 + r);
            reqs[r].hash_block_size = 16;
        }
        reqs[1].arrival_ns = 1000000000;
        for (int engines = 1; engines <= 2; engines++) {
            char cfg[128];
            snprintf(cfg, sizeof cfg, "{\"engines\": %d, \"router\": \"round-robin\"}", engines);
            kvsim_config_t *c = config(cfg);
            char *text = NULL;
            cr_assert_eq(kvsim_replay_requests(c, reqs, 2, NULL, &text), 0, "%s",
                         kvsim_config_error(c));
            json_t *root = json_loads(text, 0, NULL);
            double possible =
                json_real_value(json_object_get(root, "prefix_cache_reuse_unbounded_ratio"));
            double got = json_real_value(json_object_get(root, "prefix_cache_reuse_ratio"));
            cr_assert_float_eq(possible, 32.0 / 80.0, 1e-12, "sparse %d", sparse);
            cr_assert_float_eq(got, engines == 1 ? 32.0 / 80.0 : 0.0, 1e-12, "%d engines", engines);
            json_decref(root);
            kvsim_free(text);
            kvsim_config_free(c);
        }
    }
}

/* Runs a fixed mix (short and long outputs, stops before, at and after max_tokens, arrivals
 * while others decode) through an engine configured by json, advancing in slices of slice_ns
 * (0: to the end at once). Returns the events (*n of them) and the report without "wall". */
static kvsim_event_t *run_mix(const char *json, int64_t slice_ns, size_t *n, json_t **report,
                              uint64_t *fast_steps)
{
    kvsim_engine_t *e = engine(json);
    for (uint64_t i = 0; i < 64; i++)
        add(e, i, (int64_t)(i * i % 97) * 9000000, 20 + (uint32_t)(i * 53 % 400),
            30 + (uint32_t)(i * 97 % 300), i % 3 == 0 ? 0 : (uint32_t)(i * 41 % 200 + 1));
    size_t cap = 1 << 16;
    kvsim_event_t *ev = malloc(cap * sizeof *ev);
    cr_assert_not_null(ev);
    *n = 0;
    for (int64_t t = slice_ns;; t += slice_ns) {
        int rc = kvsim_engine_run_until(e, slice_ns ? t : INT64_C(1) << 50);
        cr_assert_geq(rc, 0, "%s", kvsim_engine_errmsg(e));
        *n += drain(e, ev + *n, cap - *n);
        if (kvsim_engine_next_time(e) == INT64_MAX)
            break;
    }
    char *j = kvsim_engine_report_json(e);
    *report = json_loads(j, 0, NULL);
    cr_assert_not_null(*report);
    kvsim_free(j);
    json_t *wall = json_object_get(*report, "wall");
    *fast_steps = (uint64_t)json_integer_value(json_object_get(wall, "decode_fast_path_steps"));
    json_object_del(*report, "wall");
    kvsim_engine_free(e);
    return ev;
}

/* The decode fast path (stable decode batches advanced in bulk) gives the same events, in the
 * same order, and the same report as scheduling every step, whether the engine runs to the end
 * at once or in slices that cut the bulk runs short. */
Test(api, decode_fast_path_changes_no_event)
{
    const char *cfgs[][2] = {
        {"{\"num-gpu-blocks\": 400}", "{\"num-gpu-blocks\": 400, \"decode-fast-path\": \"off\"}"},
        {"{\"num-gpu-blocks\": 90, \"block-size\": 8, \"max-model-len\": 300}",
         "{\"num-gpu-blocks\": 90, \"block-size\": 8, \"max-model-len\": 300, "
         "\"decode-fast-path\": \"off\"}"},
        {"{\"num-gpu-blocks\": 400, \"no-enable-prefix-caching\": true}",
         "{\"num-gpu-blocks\": 400, \"no-enable-prefix-caching\": true, "
         "\"decode-fast-path\": \"off\"}"},
    };
    const int64_t slices[] = {0, 20000000, 90000000}; /* a decode step takes ~6 ms */
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        uint64_t fast_any = 0;
        for (size_t s = 0; s < sizeof slices / sizeof slices[0]; s++) {
            size_t n_on, n_off;
            json_t *r_on, *r_off;
            uint64_t fast_on, fast_off;
            kvsim_event_t *on = run_mix(cfgs[c][0], slices[s], &n_on, &r_on, &fast_on);
            kvsim_event_t *off = run_mix(cfgs[c][1], slices[s], &n_off, &r_off, &fast_off);
            fast_any += fast_on;
            cr_assert_eq(fast_off, 0);
            cr_assert_eq(n_on, n_off, "config %zu slice %zu: %zu vs %zu events", c, s, n_on, n_off);
            for (size_t i = 0; i < n_on; i++)
                cr_assert(on[i].t_ns == off[i].t_ns && on[i].id == off[i].id &&
                              on[i].kind == off[i].kind && on[i].a == off[i].a &&
                              on[i].b == off[i].b,
                          "config %zu slice %zu: event %zu differs", c, s, i);
            char *a = json_dumps(r_on, JSON_SORT_KEYS), *b = json_dumps(r_off, JSON_SORT_KEYS);
            cr_assert_str_eq(a, b, "config %zu slice %zu: reports differ", c, s);
            free(a);
            free(b);
            json_decref(r_on);
            json_decref(r_off);
            free(on);
            free(off);
        }
        cr_assert_gt(fast_any, 0, "config %zu: the fast path ran", c);
    }
}

/* The clock's end (#33): a step that would end past int64 nanoseconds stops the engine with
 * -EOVERFLOW and a message naming the engine, the step and the value; the steps before it run. */
Test(api, a_step_past_the_end_of_the_clock_is_an_error)
{
    kvsim_engine_t *e = engine(NULL);
    /* the default model's prefill of 64 tokens takes ~17.5 ms: the first step fits, a decode
     * step of >= 1 ms after it does not */
    int64_t t = INT64_MAX - 1 - 18000000;
    add(e, 1, t, 64, 3, 0);
    kvsim_event_t ev[16];
    int rc = 0;
    for (int i = 0; i < 10 && rc >= 0; i++) {
        rc = kvsim_engine_step(e);
        drain(e, ev, 16);
    }
    cr_assert_eq(rc, -EOVERFLOW, "%d: %s", rc, kvsim_engine_errmsg(e));
    /* the second step (the first decode) starts where the prefill ended, after t */
    long long at = 0;
    const char *msg = kvsim_engine_errmsg(e);
    cr_assert_eq(sscanf(msg, "engine 0 at t=%lld ns, step 2: a step of", &at), 1, "%s", msg);
    cr_assert_gt(at, t, "%s", msg);
    cr_assert(strstr(msg, "would end past the clock's last instant"), "%s", msg);
    cr_assert_geq(kvsim_engine_now(e), t, "no time went backwards");
    kvsim_engine_free(e);
}
