/*
 * test_input_traces.c - the real traces (runtime/input/): each shared trace loads in place
 * (never copied into the repository) with its known request and hash-id counts and span, and
 * has the properties every trace has. These tests need the shared traces (common.h): without
 * them they are skipped, and ctest reports this executable as Skipped (with
 * KVSIM_REQUIRE_TRACES=1 they fail).
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdint.h>

#include "runtime/input/input.h"

#include "common.h"
#include "input_util.h"

#define MS INT64_C(1000000)

TestSuite(trace, .timeout = 60);

struct real_trace {
    const char *name;
    size_t num_reqs, num_hash_ids;
    int64_t span_ms; /* last arrival, ms (rounded down) */
};

static void load_real(const struct real_trace *w)
{
    char path[1024];
    kvsim_test_trace_path(path, sizeof path, w->name);
    struct kvsim_trace t;
    input_load_ok(path, NULL, &t);
    cr_assert_eq(t.num_reqs, w->num_reqs, "%s: %zu requests, expected %zu", w->name, t.num_reqs,
                 w->num_reqs);
    cr_assert_eq(t.num_hash_ids, w->num_hash_ids, "%s: %zu hash ids, expected %zu", w->name,
                 t.num_hash_ids, w->num_hash_ids);
    cr_assert_eq(t.num_clamped, 0);
    cr_assert_eq(t.num_sessions, 0);
    cr_assert_eq(t.reqs[t.num_reqs - 1].arrival_ns / MS, w->span_ms, "%s: span %" PRId64 " ms",
                 w->name, t.reqs[t.num_reqs - 1].arrival_ns / MS);
    input_check_invariants(&t);
    kvsim_trace_free(&t);
}

Test(trace, real_conversation_trace)
{
    load_real(&(struct real_trace){"conversation_trace.jsonl", 12031, 288500, 3536999});
}
Test(trace, real_mooncake_trace_1000)
{
    load_real(&(struct real_trace){"mooncake_trace_1000.jsonl", 1000, 19686, 177098});
}
Test(trace, real_synthetic_trace)
{
    load_real(&(struct real_trace){"synthetic_trace.jsonl", 3993, 121877, 1022025});
}
Test(trace, real_azure_code)
{
    /* 2023-11-16 18:17:03.9799600 .. 19:14:19.9280160 */
    load_real(&(struct real_trace){"AzureLLMInferenceTrace_code.csv", 8819, 0, 3435948});
}
Test(trace, real_azure_conv)
{
    /* 2023-11-16 18:15:46.6805900 .. 19:14:08.4025270 */
    load_real(&(struct real_trace){"AzureLLMInferenceTrace_conv.csv", 19366, 0, 3501721});
}

Test(trace, real_vllm_run_requests)
{
    /* A recorded vLLM run: requests arrive at their queued_ts (not a .jsonl's Mooncake AUTO). */
    char path[1024];
    kvsim_test_trace_path(path, sizeof path,
                          "groundtruth/llmservingsim-RTXPRO6000-Llama-3.1-8B/requests.jsonl");
    struct kvsim_trace_opts o;
    kvsim_trace_opts_default(&o);
    o.format = KVSIM_TRACE_VLLM_RUN;
    struct kvsim_trace t;
    input_load_ok(path, &o, &t);
    cr_assert_eq(t.format, KVSIM_TRACE_VLLM_RUN);
    cr_assert_eq(t.num_reqs, 300);
    cr_assert_eq(t.num_hash_ids, 0);
    cr_assert_eq(t.num_sessions, 0);
    cr_assert_eq(t.reqs[0].line, 1);
    cr_assert_eq(t.reqs[0].input_len, 2358);
    cr_assert_eq(t.reqs[0].output_len, 531);
    /* queued_ts 479748.340626232 .. 479777.51210695 s */
    int64_t last = t.reqs[t.num_reqs - 1].arrival_ns;
    cr_assert_eq(last / 1000, INT64_C(29171480), "last arrival %" PRId64 " ns", last);
    input_check_invariants(&t);
    kvsim_trace_free(&t);
}
