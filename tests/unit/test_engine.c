/*
 * test_engine.c - one simulated engine (runtime/engine/engine.c) in virtual time, driven through
 * kvsim_engine_admit and kvsim_engine_advance: its clock (kvsim_engine_next_event: the running
 * step's end) and its counters of steps, unfinished requests and preemptions.
 *
 * Step model of tests/inputs/step_model.json: a 100-token prefill takes (1 + 5) / 2 = 3 ms, a
 * decode step 2 / 2 = 1 ms.
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "runtime/engine/engine.h"

#include "common.h"

#define INPUTS KVSIM_SOURCE_DIR "/tests/inputs/"
#define MS     INT64_C(1000000)

TestSuite(engine, .timeout = 30);

struct rig {
    struct kvsim_trace trace;
    struct kvsim_metrics *metrics;
    struct kvsim_engine *e;
};

/* An engine with 16-token blocks, num_blocks blocks and max_model_len tokens over the trace
 * file, with the step model of model_path (NULL: the default), async scheduling on or off. */
static void rig_init_async(struct rig *g, const char *trace_path, uint32_t num_blocks,
                           uint32_t max_model_len, const char *model_path, bool async_scheduling)
{
    memset(g, 0, sizeof *g);
    char err[512];
    cr_assert_eq(kvsim_trace_load(trace_path, NULL, &g->trace, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvsim_metrics_create((uint32_t)g->trace.num_reqs, 1, &g->metrics), 0);
    struct kvsim_engine_config c = {.id = 0, .trace = &g->trace, .metrics = g->metrics};
    sched_config_default(&c.sched);
    c.sched.num_blocks = num_blocks;
    c.sched.max_model_len = max_model_len;
    c.sched.check_invariants = true;
    c.sched.async_scheduling = async_scheduling;
    kvsim_step_model_default(&c.model);
    if (model_path)
        cr_assert_eq(kvsim_step_model_load(model_path, &c.model, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvsim_engine_create(&c, &g->e), 0, "kvsim_engine_create");
}

static void rig_init(struct rig *g, const char *trace_path, uint32_t num_blocks,
                     uint32_t max_model_len, const char *model_path)
{
    rig_init_async(g, trace_path, num_blocks, max_model_len, model_path, false);
}

static void rig_fini(struct rig *g)
{
    kvsim_engine_destroy(g->e);
    kvsim_metrics_destroy(g->metrics);
    kvsim_trace_free(&g->trace);
}

static void advance(struct rig *g, int64_t until)
{
    int rc = kvsim_engine_advance(g->e, until);
    cr_assert_eq(rc, 0, "advance to %" PRId64 ": %d %s", until, rc, kvsim_engine_error(g->e));
}

/* The engine's clock and counters after each step of one request (100 prompt tokens, 3 output
 * tokens): a step starts when the engine is advanced with work and ends when its duration
 * says; next_event is that end until the last step is done, then INT64_MAX. */
Test(engine, next_event_is_the_running_steps_end_and_steps_count_them)
{
    struct rig g;
    rig_init(&g, INPUTS "one_request.jsonl", 64, 4096, INPUTS "step_model.json");
    cr_assert_eq(kvsim_engine_next_event(g.e), INT64_MAX, "an idle engine has nothing to do");
    cr_assert_eq(kvsim_engine_steps(g.e), 0);
    cr_assert_eq(kvsim_engine_unfinished(g.e), 0);

    cr_assert_eq(kvsim_engine_admit(g.e, 0, 0), 0);
    cr_assert_eq(kvsim_engine_unfinished(g.e), 1, "an admitted request is unfinished");
    cr_assert_eq(kvsim_engine_steps(g.e), 0, "admission alone starts no step");
    cr_assert_eq(kvsim_engine_next_event(g.e), INT64_MAX, "no step runs before an advance");

    advance(&g, 0); /* the prefill step starts at 0 */
    cr_assert_eq(kvsim_engine_steps(g.e), 1);
    cr_assert_eq(kvsim_engine_next_event(g.e), 3 * MS, "the prefill ends at 3 ms, not %" PRId64,
                 kvsim_engine_next_event(g.e));
    advance(&g, 3 * MS - 1); /* nothing ends before 3 ms */
    cr_assert_eq(kvsim_engine_steps(g.e), 1);
    cr_assert_eq(kvsim_engine_next_event(g.e), 3 * MS);

    /* Each decode step starts when the previous one ends and lasts 1 ms. */
    static const int64_t ends[] = {4 * MS, 5 * MS};
    for (int k = 0; k < 2; k++) {
        advance(&g, kvsim_engine_next_event(g.e));
        cr_assert_eq(kvsim_engine_steps(g.e), (uint64_t)k + 2);
        cr_assert_eq(kvsim_engine_next_event(g.e), ends[k], "decode step %d ends at %" PRId64, k,
                     kvsim_engine_next_event(g.e));
        cr_assert_eq(kvsim_engine_unfinished(g.e), 1);
    }
    advance(&g, 5 * MS); /* the third token: the request finishes */
    cr_assert_eq(kvsim_engine_unfinished(g.e), 0, "the finished request is not unfinished");
    cr_assert_eq(kvsim_engine_steps(g.e), 3, "one prefill and two decode steps");
    cr_assert_eq(kvsim_engine_next_event(g.e), INT64_MAX, "nothing left to do");
    uint32_t n;
    const struct kvsim_engine_done *done = kvsim_engine_take_done(g.e, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(done[0].req, 0);
    cr_assert_eq(done[0].finish_ns, 5 * MS);
    advance(&g, 100 * MS); /* an idle engine stays idle */
    cr_assert_eq(kvsim_engine_steps(g.e), 3);
    cr_assert_eq(kvsim_engine_preemptions(g.e), 0, "one request never preempts");
    rig_fini(&g);
}

/* A request that can never run is rejected at admission: done at once, never unfinished, no
 * step. */
Test(engine, a_rejected_request_is_never_unfinished)
{
    struct rig g;
    rig_init(&g, INPUTS "one_request.jsonl", 64, 50, NULL); /* 100 prompt tokens > 50 */
    cr_assert_eq(kvsim_engine_admit(g.e, 0, 2 * MS), 0);
    cr_assert_eq(kvsim_engine_unfinished(g.e), 0);
    uint32_t n;
    const struct kvsim_engine_done *done = kvsim_engine_peek_done(g.e, &n);
    cr_assert_eq(n, 1, "a rejection finishes the request for its session");
    cr_assert_eq(done[0].finish_ns, 2 * MS);
    advance(&g, 2 * MS);
    cr_assert_eq(kvsim_engine_steps(g.e), 0);
    cr_assert_eq(kvsim_engine_next_event(g.e), INT64_MAX);
    cr_assert_str_eq(kvsim_metrics_record(g.metrics, 0)->reject_reason, "prompt_too_long");
    rig_fini(&g);
}

/*
 * Two requests of 31 prompt and 40 output tokens (5 blocks each at the end) in 5 usable blocks:
 * both are admitted (2 blocks each), and when they grow one of them must be preempted, again and
 * again until one finishes. kvsim_engine_preemptions counts the preemptions the metrics saw
 * request by request; each advance to next_event ends one step; both requests finish.
 */
Test(engine, preemptions_count_every_preempted_request)
{
    struct rig g;
    rig_init(&g, INPUTS "engine_preempt.jsonl", 6, 4096, NULL);
    cr_assert_eq(kvsim_engine_admit(g.e, 0, 0), 0);
    cr_assert_eq(kvsim_engine_admit(g.e, 1, 0), 0);
    cr_assert_eq(kvsim_engine_unfinished(g.e), 2);
    advance(&g, 0);
    cr_assert_eq(kvsim_engine_preemptions(g.e), 0, "both prompts fit");
    uint64_t advances = 1, last = 0;
    int64_t t;
    while ((t = kvsim_engine_next_event(g.e)) != INT64_MAX) {
        cr_assert_lt(advances, 1000, "the two requests never finish");
        advance(&g, t);
        advances++;
        uint64_t p = kvsim_engine_preemptions(g.e);
        cr_assert_geq(p, last, "the preemption count went back from %" PRIu64 " to %" PRIu64, last,
                      p);
        last = p;
    }
    cr_assert_eq(kvsim_engine_unfinished(g.e), 0);
    cr_assert_eq(kvsim_metrics_record(g.metrics, 0)->num_output_tokens, 40);
    cr_assert_eq(kvsim_metrics_record(g.metrics, 1)->num_output_tokens, 40);
    uint64_t seen = (uint64_t)kvsim_metrics_record(g.metrics, 0)->num_preemptions +
                    kvsim_metrics_record(g.metrics, 1)->num_preemptions;
    cr_assert_gt(kvsim_engine_preemptions(g.e), 0, "5 blocks cannot hold both requests");
    cr_assert_eq(kvsim_engine_preemptions(g.e), seen,
                 "the engine counts %" PRIu64 " preemptions, the requests saw %" PRIu64,
                 kvsim_engine_preemptions(g.e), seen);
    /* The first advance started the first step; every later one ended a step and started the
     * next, except the last. */
    cr_assert_eq(kvsim_engine_steps(g.e), advances - 1, "%" PRIu64 " steps in %" PRIu64 " advances",
                 kvsim_engine_steps(g.e), advances);
    rig_fini(&g);
}

/* Runs the rig's engine to its end, one event at a time. */
static void run_to_end(struct rig *g)
{
    int64_t t;
    for (int k = 0; (t = kvsim_engine_next_event(g->e)) != INT64_MAX; k++) {
        cr_assert_lt(k, 1000, "the engine never finishes");
        advance(g, t);
    }
}

/*
 * vLLM's batch queue under async scheduling: a step is scheduled when the one before it is
 * launched, so a request arriving while a step runs waits for the step already scheduled behind
 * it. Request A (100 prompt, 3 output tokens) arrives at 0, B (the same) at 1 ms; a prefill
 * step takes 3 ms, a decode 1 ms, both together 4 ms.
 *   sync:  [0,3] A prefill | [3,7] A decode + B prefill | [7,8] A, B | [8,9] B
 *   async: [0,3] A prefill | [3,4] A decode (scheduled at 0, before B) | [4,8] A decode +
 *          B prefill (scheduled at 3) | [8,9] B | [9,10] B
 * B's first token comes one step later (8 ms instead of 7), and so does its finish.
 */
Test(engine, async_scheduling_runs_the_step_scheduled_ahead_first)
{
    static const struct {
        bool async_scheduling;
        int64_t a_first, a_finish, b_first, b_finish;
        uint64_t steps;
    } cases[] = {
        {false, 3 * MS, 8 * MS, 7 * MS, 9 * MS, 4},
        {true, 3 * MS, 8 * MS, 8 * MS, 10 * MS, 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rig g;
        rig_init_async(&g, INPUTS "engine_two_requests.jsonl", 64, 4096, INPUTS "step_model.json",
                       cases[i].async_scheduling);
        cr_assert_eq(kvsim_engine_admit(g.e, 0, 0), 0);
        advance(&g, 0);
        advance(&g, 1 * MS);
        cr_assert_eq(kvsim_engine_admit(g.e, 1, 1 * MS), 0);
        run_to_end(&g);
        const struct kvsim_req_record *a = kvsim_metrics_record(g.metrics, 0);
        const struct kvsim_req_record *b = kvsim_metrics_record(g.metrics, 1);
        const char *mode = cases[i].async_scheduling ? "async" : "sync";
        cr_assert_eq(a->first_token_ns, cases[i].a_first, "%s: A's first token at %" PRId64, mode,
                     a->first_token_ns);
        cr_assert_eq(a->finish_ns, cases[i].a_finish, "%s: A finishes at %" PRId64, mode,
                     a->finish_ns);
        cr_assert_eq(b->first_token_ns, cases[i].b_first, "%s: B's first token at %" PRId64, mode,
                     b->first_token_ns);
        cr_assert_eq(b->finish_ns, cases[i].b_finish, "%s: B finishes at %" PRId64, mode,
                     b->finish_ns);
        cr_assert_eq(a->num_output_tokens, 3);
        cr_assert_eq(b->num_output_tokens, 3);
        cr_assert_eq(kvsim_engine_steps(g.e), cases[i].steps, "%s: %" PRIu64 " steps", mode,
                     kvsim_engine_steps(g.e));
        cr_assert_eq(kvsim_engine_unfinished(g.e), 0);
        rig_fini(&g);
    }
}

/* An abort under async scheduling while the step scheduled ahead still lists the request: B is
 * aborted at 5 ms (during [4,8]); it leaves at that step's end, and the step behind it, which
 * scheduled B's decode, runs without it. Nothing reads the released request (ASan checks). */
Test(engine, async_scheduling_abort_while_a_step_ahead_lists_the_request)
{
    struct rig g;
    rig_init_async(&g, INPUTS "engine_two_requests.jsonl", 64, 4096, INPUTS "step_model.json",
                   true);
    cr_assert_eq(kvsim_engine_admit(g.e, 0, 0), 0);
    advance(&g, 0);
    advance(&g, 1 * MS);
    cr_assert_eq(kvsim_engine_admit(g.e, 1, 1 * MS), 0);
    advance(&g, 5 * MS);
    cr_assert_eq(kvsim_engine_abort_req(g.e, 1), 0);
    run_to_end(&g);
    const struct kvsim_req_record *a = kvsim_metrics_record(g.metrics, 0);
    const struct kvsim_req_record *b = kvsim_metrics_record(g.metrics, 1);
    cr_assert_eq(b->finish_ns, 8 * MS, "B leaves at the running step's end, not %" PRId64,
                 b->finish_ns);
    cr_assert_eq(b->num_output_tokens, 1, "the step that ended gave B its first token");
    cr_assert_eq(a->finish_ns, 8 * MS);
    cr_assert_eq(a->num_output_tokens, 3);
    cr_assert_eq(kvsim_engine_unfinished(g.e), 0);
    rig_fini(&g);
}

/* Writes a Mooncake trace of rows "input output" (one hash id each, 512 tokens a hash) to the
 * test's directory; path receives its name. */
static void write_trace(char *path, size_t len, const char *name, const uint32_t (*rows)[2], int n)
{
    kvsim_test_tmp_path(path, len, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"timestamp\": 0, \"input_length\": %u, \"output_length\": %u, "
                "\"hash_ids\": [%d]}\n",
                rows[i][0], rows[i][1], i + 1);
    fclose(f);
}

/* vLLM's front door refuses a prompt that leaves no room for one output token: at max_model_len
 * 64 a 64-token prompt is rejected as prompt_too_long when it arrives, a 63-token one is served
 * (and ends by length after one token). */
Test(engine, a_prompt_of_exactly_max_model_len_is_rejected)
{
    static const uint32_t rows[][2] = {{64, 8}, {63, 8}};
    char path[4096];
    write_trace(path, sizeof path, "mml.jsonl", rows, 2);
    struct rig g;
    rig_init(&g, path, 100, 64, NULL);
    cr_assert_eq(kvsim_engine_admit(g.e, 0, 0), 0);
    cr_assert_eq(kvsim_engine_admit(g.e, 1, 0), 0);
    cr_assert_eq(kvsim_engine_advance(g.e, INT64_MAX), 0);
    const struct kvsim_req_record *r0 = kvsim_metrics_record(g.metrics, 0);
    const struct kvsim_req_record *r1 = kvsim_metrics_record(g.metrics, 1);
    cr_assert_eq(r0->status, KVSIM_REQ_REJECTED);
    cr_assert_str_eq(r0->reject_reason, "prompt_too_long");
    cr_assert_eq(r1->status, KVSIM_REQ_COMPLETED);
    cr_assert_eq(r1->num_output_tokens, 1);
    rig_fini(&g);
}

/* An empty step that preempted someone changes the state, so the engine schedules again at once
 * (conformance SC-13a inside an engine): PRIORITY, 4 usable blocks of 16; Y (priority 5, 31
 * tokens) runs, W (priority 0, 32 tokens) joins its second step and fills the pool; in the third
 * Y needs a block, is the largest (priority, arrival) and preempts itself: an empty step, after
 * which W runs at the same instant. The run ends with both served. */
Test(engine, an_empty_step_that_preempted_schedules_again_at_once)
{
    static const uint32_t rows[][2] = {{31, 4}, {32, 4}};
    char path[4096], err[512];
    write_trace(path, sizeof path, "own-victim.jsonl", rows, 2);
    struct rig g;
    memset(&g, 0, sizeof g);
    cr_assert_eq(kvsim_trace_load(path, NULL, &g.trace, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvsim_metrics_create(2, 1, &g.metrics), 0);
    struct kvsim_engine_config c = {.id = 0, .trace = &g.trace, .metrics = g.metrics};
    sched_config_default(&c.sched);
    c.sched.policy = SCHED_POLICY_PRIORITY;
    c.sched.block_size = 16;
    c.sched.num_blocks = 5;
    c.sched.max_num_batched_tokens = 256;
    c.sched.max_model_len = 256;
    c.sched.enable_prefix_caching = false;
    c.sched.check_invariants = true;
    kvsim_step_model_default(&c.model);
    cr_assert_eq(kvsim_engine_create(&c, &g.e), 0);
    struct kvsim_engine_admit_opts y = {.priority = 5}, w = {.priority = 0};
    cr_assert_eq(kvsim_engine_admit_ext(g.e, 0, 0, &y), 0);
    cr_assert_eq(kvsim_engine_advance(g.e, 0), 0);
    int64_t t1 = kvsim_engine_step_end(g.e);
    cr_assert_eq(kvsim_engine_admit_ext(g.e, 1, t1, &w), 0);
    int rc = kvsim_engine_advance(g.e, INT64_MAX);
    cr_assert_eq(rc, 0, "%s", kvsim_engine_error(g.e));
    cr_assert_geq(kvsim_engine_preemptions(g.e), 1, "Y preempted itself");
    cr_assert_eq(kvsim_metrics_record(g.metrics, 0)->status, KVSIM_REQ_COMPLETED);
    cr_assert_eq(kvsim_metrics_record(g.metrics, 1)->status, KVSIM_REQ_COMPLETED);
    rig_fini(&g);
}

/* What a delayed router hears (issue 61, kvsim_step_sink): the engine's KV events and its load,
 * stamped with the end of the step that made them (vLLM publishes after the forward pass). */
struct heard {
    int64_t event_t[16];
    uint32_t event_n[16];
    int num_events;
    int64_t load_t[16];
    struct kvsim_engine_pub load[16];
    int num_loads;
};

static int heard_events(void *ctx, uint32_t engine, int64_t t, const struct kvpool_event *evs,
                        size_t n)
{
    struct heard *h = ctx;
    cr_assert_eq(engine, 0);
    cr_assert_gt(n, 0, "a sink call without events");
    for (size_t k = 0; k < n; k++)
        if (h->num_events < 16 && evs[k].type == KVPOOL_EVENT_STORED) {
            h->event_t[h->num_events] = t;
            h->event_n[h->num_events++] = evs[k].num_hashes;
        }
    return 0;
}

static void heard_load(void *ctx, uint32_t engine, int64_t t, const struct kvsim_engine_pub *l)
{
    struct heard *h = ctx;
    cr_assert_eq(engine, 0);
    if (h->num_loads < 16) {
        h->load_t[h->num_loads] = t;
        h->load[h->num_loads++] = *l;
    }
}

/* An engine over one request (prompt tokens, 3 outputs) with a step sink, async scheduling on
 * or off; the step model of tests/inputs/step_model.json. */
static void sink_rig(struct rig *g, struct heard *h, struct kvsim_step_sink *sink, uint32_t prompt,
                     bool async)
{
    memset(g, 0, sizeof *g);
    char path[512], err[512];
    const uint32_t rows[1][2] = {{prompt, 3}};
    write_trace(path, sizeof path, async ? "sink-async.jsonl" : "sink.jsonl", rows, 1);
    cr_assert_eq(kvsim_trace_load(path, NULL, &g->trace, err, sizeof err), 0, "%s", err);
    remove(path);
    cr_assert_eq(kvsim_metrics_create((uint32_t)g->trace.num_reqs, 1, &g->metrics), 0);
    *h = (struct heard){0};
    *sink = (struct kvsim_step_sink){heard_events, heard_load, h};
    struct kvsim_engine_config c = {
        .id = 0, .trace = &g->trace, .metrics = g->metrics, .kv_events = true, .step_sink = sink};
    sched_config_default(&c.sched);
    c.sched.num_blocks = 64;
    c.sched.max_model_len = 4096;
    c.sched.async_scheduling = async;
    cr_assert_eq(kvsim_step_model_load(INPUTS "step_model.json", &c.model, err, sizeof err), 0);
    cr_assert_eq(kvsim_engine_create(&c, &g->e), 0);
    cr_assert_eq(kvsim_engine_admit(g->e, 0, 0), 0);
}

/* One request of 100 prompt tokens: its 6 full blocks are cached when its prefill is scheduled
 * at 0 and handed over then, stamped with the prefill's end, 3 ms (vLLM publishes them after the
 * pass); the loads come at 3 ms (it runs, 7 blocks) and at its last step's end, 5 ms (it is done:
 * nothing unfinished, nothing active). */
Test(engine, a_step_sink_hears_each_step_at_its_end)
{
    struct rig g;
    struct heard h;
    struct kvsim_step_sink sink;
    sink_rig(&g, &h, &sink, 100, false);
    advance(&g, 1 * MS);
    cr_assert_eq(h.num_events, 1, "scheduled: handed over already");
    cr_assert_eq(h.event_t[0], 3 * MS, "stored at the schedule, stamped with the step's end");
    cr_assert_eq(h.event_n[0], 6, "100 tokens: 6 full blocks");
    cr_assert_eq(h.num_loads, 0, "no step has ended");
    advance(&g, 100 * MS);
    cr_assert_eq(h.num_events, 1);
    cr_assert_geq(h.num_loads, 2);
    cr_assert_eq(h.load_t[0], 3 * MS);
    cr_assert_eq(h.load[0].num_running, 1);
    cr_assert_eq(h.load[0].active_blocks, 7, "6 full blocks and the one being filled");
    cr_assert_eq(h.load_t[h.num_loads - 1], 5 * MS, "the last step's end");
    cr_assert_eq(h.load[h.num_loads - 1].num_unfinished, 0);
    cr_assert_eq(h.load[h.num_loads - 1].active_blocks, 0);
    rig_fini(&g);
}

/* Async scheduling: each step is scheduled while the one before it runs, so what a schedule
 * caches belongs to the step scheduled ahead and is heard of at that step's end, not at the end
 * of the step running then. 111 prompt tokens: the prefill caches 6 blocks (heard at its end);
 * the 7th block fills with the first output and is cached by the schedule of the third step, made
 * while the second runs: heard at the third step's end. */
Test(engine, a_step_scheduled_ahead_is_heard_at_its_own_end)
{
    struct rig g;
    struct heard h;
    struct kvsim_step_sink sink;
    sink_rig(&g, &h, &sink, 111, true);
    advance(&g, 100 * MS);
    cr_assert_eq(h.num_loads, 3, "three steps");
    cr_assert_eq(h.num_events, 2);
    cr_assert_eq(h.event_t[0], h.load_t[0], "the prefill's 6 blocks at the prefill's end");
    cr_assert_eq(h.event_n[0], 6);
    cr_assert_eq(h.event_n[1], 1);
    cr_assert_eq(h.event_t[1], h.load_t[2],
                 "the 7th block at the end of the step it was scheduled for (%" PRId64
                 "), not of the step running then (%" PRId64 ")",
                 h.load_t[2], h.load_t[1]);
    rig_fini(&g);
}
