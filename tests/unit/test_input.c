/*
 * test_input.c - request input (runtime/input/): Mooncake JSONL and Azure CSV loading, and the
 * synthetic workload.
 *
 * Small fixtures live in tests/inputs/ (good files) and tests/inputs/bad/ (one malformed-input
 * class per file); every field of the good ones is checked, and every bad one must give its
 * exact one-line message naming the file, the line and the field. The real traces are loaded by
 * test_input_traces.c.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "runtime/input/input.h"

#include "common.h"
#include "input_util.h"

#ifndef KVSIM_SOURCE_DIR
#error "KVSIM_SOURCE_DIR must be defined (the source tree, for tests/inputs)"
#endif

#define INPUTS KVSIM_SOURCE_DIR "/tests/inputs/"
#define BAD    INPUTS "bad/"
#define MS     INT64_C(1000000)

TestSuite(trace, .timeout = 60);

/* ---- helpers ----------------------------------------------------------------------------- */

/* Loading path must fail with rc and exactly the message "<path><suffix>". */
static void expect_error(const char *path, const struct kvsim_trace_opts *opts, int want_rc,
                         const char *suffix)
{
    struct kvsim_trace t;
    char err[512], want[1024];
    memset(&t, 0xab, sizeof t);
    int rc = kvsim_trace_load(path, opts, &t, err, sizeof err);
    snprintf(want, sizeof want, "%s%s", path, suffix);
    cr_assert_eq(rc, want_rc, "%s: rc %d, expected %d (message: %s)", path, rc, want_rc, err);
    cr_assert_str_eq(err, want, "message\n  got:      %s\n  expected: %s", err, want);
    cr_assert_null(strchr(err, '\n'), "the message must be one line: %s", err);
    cr_assert(t.reqs == NULL && t.num_reqs == 0 && t.hash_ids == NULL && t.num_hash_ids == 0,
              "a failed load must leave the trace empty");
    kvsim_trace_free(&t);
}

static void expect_hashes(const struct kvsim_trace *t, size_t i, const uint64_t *want, uint32_t n)
{
    const struct kvsim_req_spec *r = &t->reqs[i];
    cr_assert_eq(r->num_hashes, n, "reqs[%zu]: %u hashes, expected %u", i, r->num_hashes, n);
    cr_assert_leq((size_t)r->hash_off + r->num_hashes, t->num_hash_ids, "reqs[%zu]: hash range", i);
    const uint64_t *h = kvsim_trace_hashes(t, r);
    for (uint32_t k = 0; k < n; k++)
        cr_assert_eq(h[k], want[k], "reqs[%zu]: hash %u is %" PRIu64 ", expected %" PRIu64, i, k,
                     h[k], want[k]);
}

/* Expected values of one request (hashes checked separately). */
struct want_req {
    uint32_t line;
    int64_t arrival_ns;
    uint32_t input_len, output_len, num_hashes;
    int32_t session, prev_turn;
    int64_t delay_ns;
    bool clamped;
};

static void expect_req(const struct kvsim_trace *t, size_t i, struct want_req w)
{
    cr_assert_lt(i, t->num_reqs);
    const struct kvsim_req_spec *r = &t->reqs[i];
    cr_assert_eq(r->line, w.line, "reqs[%zu].line = %u, expected %u", i, r->line, w.line);
    cr_assert_eq(r->arrival_ns, w.arrival_ns,
                 "reqs[%zu] (line %u).arrival_ns = %" PRId64 ", expected %" PRId64, i, r->line,
                 r->arrival_ns, w.arrival_ns);
    cr_assert_eq(r->input_len, w.input_len, "reqs[%zu] (line %u).input_len = %u, expected %u", i,
                 r->line, r->input_len, w.input_len);
    cr_assert_eq(r->output_len, w.output_len, "reqs[%zu] (line %u).output_len", i, r->line);
    cr_assert_eq(r->num_hashes, w.num_hashes, "reqs[%zu] (line %u).num_hashes = %u, expected %u", i,
                 r->line, r->num_hashes, w.num_hashes);
    cr_assert_eq(r->session, w.session, "reqs[%zu] (line %u).session = %d, expected %d", i, r->line,
                 r->session, w.session);
    cr_assert_eq(r->prev_turn, w.prev_turn, "reqs[%zu] (line %u).prev_turn = %d, expected %d", i,
                 r->line, r->prev_turn, w.prev_turn);
    cr_assert_eq(r->delay_ns, w.delay_ns,
                 "reqs[%zu] (line %u).delay_ns = %" PRId64 ", expected %" PRId64, i, r->line,
                 r->delay_ns, w.delay_ns);
    cr_assert_eq(r->clamped, w.clamped, "reqs[%zu] (line %u).clamped", i, r->line);
}

/* ---- Mooncake: good files ---------------------------------------------------------------- */

Test(trace, mooncake_small_every_field)
{
    struct kvsim_trace t;
    input_load_ok(INPUTS "mooncake_small.jsonl", NULL, &t);
    cr_assert_eq(t.format, KVSIM_TRACE_MOONCAKE);
    cr_assert_eq(t.block_size, 512);
    cr_assert_eq(t.num_reqs, 4);
    cr_assert_eq(t.num_hash_ids, 7);
    cr_assert_eq(t.num_sessions, 0);
    cr_assert_eq(t.num_clamped, 1);
    /* Line 3 is blank; times are relative to line 1's 1000 ms; ties (lines 4, 5) by line. */
    expect_req(&t, 0, (struct want_req){1, 0, 1000, 10, 2, -1, -1, 0, false});
    expect_req(&t, 1, (struct want_req){4, 200 * MS, 1536, 7, 3, -1, -1, 0, true});
    expect_req(&t, 2, (struct want_req){5, 200 * MS, 1, 3, 1, -1, -1, 0, false});
    expect_req(&t, 3, (struct want_req){2, 500500000, 512, 1, 1, -1, -1, 0, false});
    expect_hashes(&t, 0, (uint64_t[]){1, 2}, 2);
    expect_hashes(&t, 1, (uint64_t[]){1, 2, 3}, 3);
    expect_hashes(&t, 2, (uint64_t[]){9}, 1);
    expect_hashes(&t, 3, (uint64_t[]){1}, 1);
    /* hash_ids stay in file order; hash_off points into them. */
    cr_assert_eq(t.reqs[0].hash_off, 0);
    cr_assert_eq(t.reqs[3].hash_off, 2);
    cr_assert_eq(t.reqs[1].hash_off, 3);
    cr_assert_eq(t.reqs[2].hash_off, 6);
    input_check_invariants(&t);
    kvsim_trace_free(&t);
    kvsim_trace_free(&t); /* freeing twice is harmless */
    cr_assert_null(t.reqs);
}

Test(trace, mooncake_clamping_follows_trace_block_size)
{
    struct kvsim_trace_opts o;
    kvsim_trace_opts_default(&o);
    o.trace_block_size = 256;
    struct kvsim_trace t;
    input_load_ok(INPUTS "mooncake_small.jsonl", &o, &t);
    cr_assert_eq(t.block_size, 256);
    cr_assert_eq(t.num_clamped, 3);
    expect_req(&t, 0, (struct want_req){1, 0, 512, 10, 2, -1, -1, 0, true});
    expect_req(&t, 1, (struct want_req){4, 200 * MS, 768, 7, 3, -1, -1, 0, true});
    expect_req(&t, 2, (struct want_req){5, 200 * MS, 1, 3, 1, -1, -1, 0, false});
    expect_req(&t, 3, (struct want_req){2, 500500000, 256, 1, 1, -1, -1, 0, true});
    input_check_invariants(&t);
    kvsim_trace_free(&t);

    /* With 1024-token blocks, line 1's two ids are more than 1000 tokens need. */
    o.trace_block_size = 1024;
    expect_error(INPUTS "mooncake_small.jsonl", &o, -EINVAL,
                 ":1: field 'hash_ids': 2 hash ids, but input_length 1000 needs only 1 at 1024 "
                 "tokens per id");
}

Test(trace, mooncake_sessions_sorted_with_prev_turn_fixed_up)
{
    struct kvsim_trace t;
    input_load_ok(INPUTS "mooncake_sessions.jsonl", NULL, &t);
    cr_assert_eq(t.num_reqs, 7);
    cr_assert_eq(t.num_sessions, 3, "\"a\", 7 and \"7\" are three sessions");
    cr_assert_eq(t.num_clamped, 0);
    /*
     * File order: 1 a#0 @5000, 2 independent @3000, 3 7#0 @4000, 4 a#1 delay 250,
     * 5 7#1 (inferred 500), 6 a#2 (timestamp earlier than turn 1: delay 0), 7 "7"#0 @9000 with
     * delay 0 (allowed). t0 = 3000 ms. Sorted: 2, 3, 5, 1, 4, 6, 7.
     */
    expect_req(&t, 0, (struct want_req){2, 0, 100, 5, 1, -1, -1, 0, false});
    expect_req(&t, 1, (struct want_req){3, 1000 * MS, 100, 5, 1, 1, -1, 0, false});
    expect_req(&t, 2, (struct want_req){5, 1500 * MS, 700, 5, 2, 1, 1, 500 * MS, false});
    expect_req(&t, 3, (struct want_req){1, 2000 * MS, 600, 5, 2, 0, -1, 0, false});
    expect_req(&t, 4, (struct want_req){4, 2250 * MS, 1200, 5, 3, 0, 3, 250 * MS, false});
    expect_req(&t, 5, (struct want_req){6, 2250 * MS, 1300, 5, 3, 0, 4, 0, false});
    expect_req(&t, 6, (struct want_req){7, 6000 * MS, 50, 2, 1, 2, -1, 0, false});
    expect_hashes(&t, 2, (uint64_t[]){8, 9}, 2);
    expect_hashes(&t, 5, (uint64_t[]){1, 2, 3}, 3);
    input_check_invariants(&t);
    kvsim_trace_free(&t);
}

Test(trace, arrival_speedup_divides_gaps_and_delays)
{
    struct kvsim_trace_opts o;
    kvsim_trace_opts_default(&o);
    o.arrival_speedup = 2.0;
    struct kvsim_trace t;
    input_load_ok(INPUTS "mooncake_sessions.jsonl", &o, &t);
    expect_req(&t, 0, (struct want_req){2, 0, 100, 5, 1, -1, -1, 0, false});
    expect_req(&t, 1, (struct want_req){3, 500 * MS, 100, 5, 1, 1, -1, 0, false});
    expect_req(&t, 2, (struct want_req){5, 750 * MS, 700, 5, 2, 1, 1, 250 * MS, false});
    expect_req(&t, 3, (struct want_req){1, 1000 * MS, 600, 5, 2, 0, -1, 0, false});
    expect_req(&t, 4, (struct want_req){4, 1125 * MS, 1200, 5, 3, 0, 3, 125 * MS, false});
    expect_req(&t, 5, (struct want_req){6, 1125 * MS, 1300, 5, 3, 0, 4, 0, false});
    expect_req(&t, 6, (struct want_req){7, 3000 * MS, 50, 2, 1, 2, -1, 0, false});
    input_check_invariants(&t);
    kvsim_trace_free(&t);

    o.arrival_speedup = 4.0;
    input_load_ok(INPUTS "mooncake_small.jsonl", &o, &t);
    cr_assert_eq(t.reqs[1].arrival_ns, 50 * MS);
    cr_assert_eq(t.reqs[3].arrival_ns, 125125000, "500.5 ms / 4 = 125.125 ms");
    kvsim_trace_free(&t);

    o.arrival_speedup = 0.5; /* a slowdown works too */
    input_load_ok(INPUTS "azure_small.csv", &o, &t);
    cr_assert_eq(t.reqs[1].arrival_ns, 2 * 479960000);
    kvsim_trace_free(&t);
}

Test(trace, max_requests_keeps_the_first_rows_of_the_file)
{
    struct kvsim_trace_opts o;
    kvsim_trace_opts_default(&o);
    o.max_requests = 3;
    struct kvsim_trace t;
    input_load_ok(INPUTS "mooncake_sessions.jsonl", &o, &t);
    cr_assert_eq(t.num_reqs, 3);
    cr_assert_eq(t.num_sessions, 2);
    expect_req(&t, 0, (struct want_req){2, 0, 100, 5, 1, -1, -1, 0, false});
    expect_req(&t, 1, (struct want_req){3, 1000 * MS, 100, 5, 1, 1, -1, 0, false});
    expect_req(&t, 2, (struct want_req){1, 2000 * MS, 600, 5, 2, 0, -1, 0, false});
    cr_assert_eq(t.num_hash_ids, 4);
    kvsim_trace_free(&t);

    /* Blank lines do not count as rows; rows after the N-th are not even read. */
    o.max_requests = 2;
    input_load_ok(INPUTS "mooncake_small.jsonl", &o, &t);
    cr_assert_eq(t.num_reqs, 2);
    cr_assert_eq(t.reqs[0].line, 1);
    cr_assert_eq(t.reqs[1].line, 2);
    kvsim_trace_free(&t);
    input_load_ok(BAD "wrong_type.jsonl", &o, &t); /* its bad row is the third */
    cr_assert_eq(t.num_reqs, 2);
    kvsim_trace_free(&t);

    o.max_requests = 1000;
    input_load_ok(INPUTS "azure_small.csv", &o, &t);
    cr_assert_eq(t.num_reqs, 5);
    kvsim_trace_free(&t);
    o.max_requests = 2;
    input_load_ok(INPUTS "azure_small.csv", &o, &t);
    cr_assert_eq(t.num_reqs, 2);
    cr_assert_eq(t.reqs[1].arrival_ns, 420040000, "18:17:04.4 - 18:17:03.97996");
    kvsim_trace_free(&t);
}

/* ---- Azure: good file -------------------------------------------------------------------- */

Test(trace, azure_small_every_field)
{
    struct kvsim_trace t;
    input_load_ok(INPUTS "azure_small.csv", NULL, &t);
    cr_assert_eq(t.format, KVSIM_TRACE_AZURE);
    cr_assert_eq(t.num_reqs, 5);
    cr_assert_eq(t.num_hash_ids, 0);
    cr_assert_null(t.hash_ids);
    cr_assert_eq(t.block_size, 0);
    cr_assert_eq(t.num_sessions, 0);
    cr_assert_eq(t.num_clamped, 0);
    /*
     * CRLF, a blank line 4, 1/7/9/0 fraction digits, no final newline; line 5 is earlier than
     * the first row and becomes time 0; the last rows cross a year end and 2024-02-29.
     */
    expect_req(&t, 0, (struct want_req){5, 0, 5, 5, 0, -1, -1, 0, false});
    expect_req(&t, 1, (struct want_req){2, 479960000, 4808, 10, 0, -1, -1, 0, false});
    expect_req(&t, 2, (struct want_req){3, 900000000, 100, 1, 0, -1, -1, 0, false});
    expect_req(&t, 3, (struct want_req){6, INT64_C(3908575623456789), 1, 1, 0, -1, -1, 0, false});
    expect_req(&t, 4, (struct want_req){7, INT64_C(9092576500000000), 2, 3, 0, -1, -1, 0, false});
    cr_assert_null(kvsim_trace_hashes(&t, &t.reqs[0]));
    input_check_invariants(&t);
    kvsim_trace_free(&t);
}

Test(trace, explicit_format_overrides_the_extension)
{
    struct kvsim_trace_opts o;
    kvsim_trace_opts_default(&o);
    o.format = KVSIM_TRACE_AZURE;
    struct kvsim_trace t;
    input_load_ok(INPUTS "azure_small.csv", &o, &t);
    cr_assert_eq(t.num_reqs, 5);
    kvsim_trace_free(&t);
    o.format = KVSIM_TRACE_MOONCAKE;
    expect_error(INPUTS "azure_small.csv", &o, -EINVAL,
                 ":1: invalid JSON at column 9: '[' or '{' expected near 'TIMESTAMP'");
    o.format = KVSIM_TRACE_AZURE;
    expect_error(INPUTS "mooncake_small.jsonl", &o, -EINVAL,
                 ":1: bad header '{\"timestamp\": 1000, \"input_length\": 1000, \"outpu...' "
                 "(expected 'TIMESTAMP,ContextTokens,GeneratedTokens')");
    o.format = KVSIM_TRACE_SYNTHETIC;
    expect_error(INPUTS "azure_small.csv", &o, -EINVAL,
                 ": trace format 'synthetic' cannot be loaded from a file");
}

/* ---- malformed input: one class per fixture ---------------------------------------------- */

Test(trace, bad_json)
{
    expect_error(BAD "bad_json.jsonl", NULL, -EINVAL,
                 ":2: invalid JSON: ']' expected near end of file");
}
Test(trace, not_an_object)
{
    expect_error(BAD "not_object.jsonl", NULL, -EINVAL, ":2: expected a JSON object, got an array");
}
Test(trace, missing_field)
{
    expect_error(BAD "missing_field.jsonl", NULL, -EINVAL, ":2: field 'output_length': missing");
}
Test(trace, wrong_type)
{
    expect_error(BAD "wrong_type.jsonl", NULL, -EINVAL,
                 ":3: field 'input_length': expected an integer, got a string");
}
Test(trace, negative_length)
{
    expect_error(BAD "negative_length.jsonl", NULL, -EINVAL,
                 ":2: field 'output_length': must be >= 1, got -3");
}
Test(trace, negative_timestamp)
{
    expect_error(BAD "negative_timestamp.jsonl", NULL, -EINVAL,
                 ":2: field 'timestamp': must be >= 0, got -5");
}
Test(trace, value_too_large_for_uint32)
{
    expect_error(BAD "too_large.jsonl", NULL, -EINVAL,
                 ":2: field 'input_length': 5000000000 is too large (max 4294967295)");
}
Test(trace, unknown_key)
{
    expect_error(BAD "unknown_key.jsonl", NULL, -EINVAL,
                 ":2: field 'input_lenght': unknown field (expected timestamp, input_length, "
                 "output_length, hash_ids, session_id, delay)");
}
Test(trace, hash_ids_too_long)
{
    expect_error(BAD "hash_ids_too_long.jsonl", NULL, -EINVAL,
                 ":2: field 'hash_ids': 3 hash ids, but input_length 600 needs only 2 at 512 "
                 "tokens per id");
}
Test(trace, hash_ids_empty)
{
    expect_error(BAD "empty_hash_ids.jsonl", NULL, -EINVAL,
                 ":2: field 'hash_ids': empty (at least one hash id is needed)");
}
Test(trace, hash_id_not_an_integer)
{
    expect_error(BAD "bad_hash_element.jsonl", NULL, -EINVAL,
                 ":2: field 'hash_ids': element 1 is a string, expected a non-negative integer");
}
Test(trace, hash_id_above_what_kvsim_expands)
{
    expect_error(BAD "hash_id_too_large.jsonl", NULL, -EINVAL,
                 ":2: field 'hash_ids': element 1 is 2147483648, above the largest hash id kvsim "
                 "expands (2^31 - 1)");
}
Test(trace, delay_on_a_first_turn)
{
    expect_error(BAD "delay_first_turn.jsonl", NULL, -EINVAL,
                 ":2: field 'delay': non-zero delay on the first turn of session 's1' (a delay is "
                 "only allowed on a later turn)");
}
Test(trace, empty_file)
{
    expect_error(BAD "empty.jsonl", NULL, -EINVAL, ": empty trace (no requests)");
    expect_error(BAD "blank_only.jsonl", NULL, -EINVAL, ": empty trace (no requests)");
    expect_error(BAD "empty.csv", NULL, -EINVAL, ": empty trace (no requests)");
    expect_error(BAD "header_only.csv", NULL, -EINVAL, ": empty trace (no requests)");
}
Test(trace, bad_csv_header)
{
    expect_error(BAD "bad_header.csv", NULL, -EINVAL,
                 ":1: bad header 'TIMESTAMP,ContextTokens,GenTokens' (expected "
                 "'TIMESTAMP,ContextTokens,GeneratedTokens')");
}
Test(trace, bad_csv_timestamp)
{
    expect_error(BAD "bad_timestamp.csv", NULL, -EINVAL,
                 ":3: field 'TIMESTAMP': '2023-11-16T18:17:04.1': expected YYYY-MM-DD "
                 "HH:MM:SS[.fffffffff]");
    expect_error(BAD "bad_date.csv", NULL, -EINVAL,
                 ":3: field 'TIMESTAMP': '2023-02-29 18:17:04.1': day out of range");
}
Test(trace, zero_tokens)
{
    expect_error(BAD "zero_tokens.csv", NULL, -EINVAL,
                 ":3: field 'GeneratedTokens': 0 tokens (must be >= 1)");
}
Test(trace, non_numeric_csv_field)
{
    expect_error(BAD "non_numeric.csv", NULL, -EINVAL,
                 ":3: field 'ContextTokens': '12x' is not a non-negative integer");
}
Test(trace, wrong_column_count)
{
    expect_error(BAD "wrong_columns.csv", NULL, -EINVAL,
                 ":3: expected 3 columns (TIMESTAMP,ContextTokens,GeneratedTokens), got 2");
}
Test(trace, file_level_problems)
{
    expect_error(BAD "no_such_file.jsonl", NULL, -ENOENT,
                 ": cannot open: No such file or directory");
    expect_error(BAD "unknown_extension.txt", NULL, -EINVAL,
                 ": cannot tell the trace format from the file name (expected .jsonl, .json or "
                 ".csv, optionally .gz)");
    struct kvsim_trace_opts o;
    kvsim_trace_opts_default(&o);
    o.trace_block_size = 0;
    expect_error(INPUTS "mooncake_small.jsonl", &o, -EINVAL, ": trace_block_size must be >= 1");
    kvsim_trace_opts_default(&o);
    o.arrival_speedup = 0;
    expect_error(INPUTS "mooncake_small.jsonl", &o, -EINVAL,
                 ": arrival_speedup must be a positive finite number, got 0");
    o.arrival_speedup = NAN;
    expect_error(INPUTS "mooncake_small.jsonl", &o, -EINVAL,
                 ": arrival_speedup must be a positive finite number, got nan");
    /* A NULL error buffer is allowed. */
    struct kvsim_trace t;
    cr_assert_eq(kvsim_trace_load(BAD "missing_field.jsonl", NULL, &t, NULL, 0), -EINVAL);
}

/* ---- the synthetic workload -------------------------------------------------------------- */

static void synth_ok(const struct kvsim_synth_opts *o, struct kvsim_trace *t)
{
    char err[256] = "unset";
    int rc = kvsim_workload_synthetic(o, t, err, sizeof err);
    cr_assert_eq(rc, 0, "synthetic workload failed (%d): %s", rc, err);
    cr_assert_str_empty(err);
}

Test(trace, synthetic_is_deterministic)
{
    struct kvsim_synth_opts o;
    kvsim_synth_opts_default(&o);
    struct kvsim_trace a, b;
    synth_ok(&o, &a);
    synth_ok(&o, &b);
    cr_assert_eq(a.num_reqs, b.num_reqs);
    cr_assert_eq(a.num_hash_ids, b.num_hash_ids);
    cr_assert_eq(a.num_sessions, b.num_sessions);
    cr_assert_eq(memcmp(a.hash_ids, b.hash_ids, a.num_hash_ids * sizeof *a.hash_ids), 0);
    for (size_t i = 0; i < a.num_reqs; i++) {
        const struct kvsim_req_spec *x = &a.reqs[i], *y = &b.reqs[i];
        cr_assert(x->line == y->line && x->arrival_ns == y->arrival_ns &&
                      x->input_len == y->input_len && x->output_len == y->output_len &&
                      x->hash_off == y->hash_off && x->num_hashes == y->num_hashes &&
                      x->session == y->session && x->prev_turn == y->prev_turn &&
                      x->delay_ns == y->delay_ns && x->clamped == y->clamped,
                  "request %zu differs between two generations", i);
    }
    kvsim_trace_free(&b);

    o.seed = 2; /* another seed, another workload */
    synth_ok(&o, &b);
    bool differs = a.num_reqs != b.num_reqs;
    for (size_t i = 0; !differs && i < a.num_reqs; i++)
        differs = a.reqs[i].arrival_ns != b.reqs[i].arrival_ns ||
                  a.reqs[i].input_len != b.reqs[i].input_len;
    cr_assert(differs, "seeds 1 and 2 gave the same workload");
    kvsim_trace_free(&a);
    kvsim_trace_free(&b);
}

Test(trace, synthetic_defaults_counts_and_shape)
{
    struct kvsim_synth_opts o;
    kvsim_synth_opts_default(&o);
    struct kvsim_trace t;
    synth_ok(&o, &t);
    cr_assert_eq(t.format, KVSIM_TRACE_SYNTHETIC);
    cr_assert_eq(t.block_size, 16);
    cr_assert_eq(t.num_sessions, 300);
    cr_assert_eq(t.num_clamped, 0);
    cr_assert_eq(t.num_reqs, 1050, "documented: 1,050 requests with seed 1, got %zu", t.num_reqs);
    input_check_invariants(&t);

    uint32_t turns[300] = {0};
    double sum_in = 0;
    for (size_t i = 0; i < t.num_reqs; i++) {
        const struct kvsim_req_spec *r = &t.reqs[i];
        cr_assert_eq(r->line, 0);
        cr_assert_geq(r->session, 0);
        cr_assert_leq(r->output_len, o.max_output_len);
        cr_assert_eq(r->prev_turn < 0, turns[r->session] == 0, "first turn iff prev_turn is -1");
        turns[r->session]++;
        sum_in += r->input_len;
    }
    for (int s = 0; s < 300; s++)
        cr_assert(turns[s] >= 1 && turns[s] <= o.max_turns, "session %d has %u turns", s, turns[s]);
    double mean_in = sum_in / (double)t.num_reqs;
    cr_assert(mean_in > 1500 && mean_in < 4000, "mean prompt %.0f tokens", mean_in);
    /* Poisson first turns at 6/s: 300 sessions start within about 50 s. */
    int64_t last_first = 0;
    for (size_t i = 0; i < t.num_reqs; i++)
        if (t.reqs[i].prev_turn < 0)
            last_first = t.reqs[i].arrival_ns;
    cr_assert(last_first > 30 * INT64_C(1000000000) && last_first < 80 * INT64_C(1000000000),
              "last session starts at %" PRId64 " ns", last_first);
    kvsim_trace_free(&t);
}

/* Checks the prefix structure of a synthetic trace generated with o. */
static void check_synthetic_prefixes(const struct kvsim_synth_opts *o, const struct kvsim_trace *t)
{
    const uint32_t bs = o->block_size;
    const uint64_t sys_blocks = o->system_prompt_len / bs;
    const uint64_t first_fresh = o->num_prefix_groups * sys_blocks;
    uint64_t max_id = 0;
    for (size_t i = 0; i < t->num_hash_ids; i++)
        max_id = t->hash_ids[i] > max_id ? t->hash_ids[i] : max_id;
    /* Where each id was seen: session + 1 (0 = never) and block position. */
    int32_t *owner = calloc(max_id + 1, sizeof *owner);
    uint32_t *pos = calloc(max_id + 1, sizeof *pos);
    uint32_t *uses = calloc(max_id + 1, sizeof *uses);
    cr_assert(owner && pos && uses);
    bool group_seen[64] = {false};
    for (size_t i = 0; i < t->num_reqs; i++) {
        const struct kvsim_req_spec *r = &t->reqs[i];
        const uint64_t *h = kvsim_trace_hashes(t, r);
        cr_assert_eq(r->num_hashes, (r->input_len + bs - 1) / bs);
        /* The system prompt's full blocks are one group's ids 0..sys_blocks-1, in order. */
        if (sys_blocks) {
            uint64_t g = h[0] / sys_blocks;
            cr_assert_lt(g, o->num_prefix_groups);
            group_seen[g] = true;
            for (uint64_t j = 0; j < sys_blocks; j++)
                cr_assert_eq(h[j], g * sys_blocks + j, "reqs[%zu] block %" PRIu64, i, j);
        }
        for (uint32_t k = (uint32_t)sys_blocks; k < r->num_hashes; k++) {
            uint64_t id = h[k];
            cr_assert_geq(id, first_fresh, "reqs[%zu] block %u reuses a system-prompt id", i, k);
            /* Distinct content, distinct id: an id belongs to one session and one position. */
            if (owner[id] == 0) {
                owner[id] = r->session + 1;
                pos[id] = k;
            }
            cr_assert_eq(owner[id], r->session + 1, "id %" PRIu64 " shared across sessions", id);
            cr_assert_eq(pos[id], k, "id %" PRIu64 " at two positions", id);
            uses[id]++;
        }
        /* A partial trailing block is fresh: used by this request only. */
        if (r->input_len % bs && r->num_hashes > sys_blocks)
            cr_assert_eq(uses[h[r->num_hashes - 1]], 1, "reqs[%zu]: partial block id reused", i);
        if (r->prev_turn >= 0) {
            const struct kvsim_req_spec *p = &t->reqs[r->prev_turn];
            const uint64_t *ph = kvsim_trace_hashes(t, p);
            uint32_t shared = p->input_len / bs; /* every full block of the previous prompt */
            cr_assert_gt(r->input_len, p->input_len + p->output_len - 1,
                         "a later turn contains the previous prompt and answer");
            for (uint32_t k = 0; k < shared; k++)
                cr_assert_eq(h[k], ph[k], "reqs[%zu] block %u differs from its previous turn", i,
                             k);
            if (p->input_len % bs)
                cr_assert_neq(h[shared], ph[shared], "reqs[%zu]: previous partial block reused", i);
        }
    }
    for (uint32_t g = 0; sys_blocks && g < o->num_prefix_groups && g < 64; g++)
        cr_assert(group_seen[g], "prefix group %u never used", g);
    free(owner);
    free(pos);
    free(uses);
}

Test(trace, synthetic_sessions_and_groups_share_prefixes)
{
    struct kvsim_synth_opts o;
    kvsim_synth_opts_default(&o);
    struct kvsim_trace t;
    synth_ok(&o, &t);
    check_synthetic_prefixes(&o, &t);
    kvsim_trace_free(&t);

    /* A system prompt that is not a whole number of blocks, other sizes. */
    kvsim_synth_opts_default(&o);
    o.seed = 7;
    o.num_sessions = 40;
    o.max_turns = 4;
    o.num_prefix_groups = 3;
    o.system_prompt_len = 1000;
    o.block_size = 64;
    o.mean_think_s = 0;
    synth_ok(&o, &t);
    cr_assert_eq(t.block_size, 64);
    input_check_invariants(&t);
    check_synthetic_prefixes(&o, &t);
    for (size_t i = 0; i < t.num_reqs; i++)
        cr_assert_eq(t.reqs[i].delay_ns, 0, "no think time");
    kvsim_trace_free(&t);

    /* No system prompt at all: nothing is shared between sessions. */
    o.system_prompt_len = 0;
    synth_ok(&o, &t);
    input_check_invariants(&t);
    check_synthetic_prefixes(&o, &t);
    kvsim_trace_free(&t);
}

Test(trace, synthetic_rejects_impossible_options)
{
    struct kvsim_synth_opts o;
    struct kvsim_trace t;
    char err[256];
#define REJECT(field, value, text)                                                                 \
    do {                                                                                           \
        kvsim_synth_opts_default(&o);                                                              \
        o.field = value;                                                                           \
        cr_assert_eq(kvsim_workload_synthetic(&o, &t, err, sizeof err), -EINVAL, #field);          \
        cr_assert_str_eq(err, "synthetic workload: " text);                                        \
        cr_assert_null(t.reqs);                                                                    \
    } while (0)
    REJECT(num_sessions, 0, "num_sessions must be >= 1");
    REJECT(max_turns, 0, "max_turns must be >= 1");
    REJECT(session_rate, 0, "session_rate must be a positive finite number, got 0");
    REJECT(session_rate, INFINITY, "session_rate must be a positive finite number, got inf");
    REJECT(num_prefix_groups, 0, "num_prefix_groups must be >= 1");
    REJECT(mean_user_len, 0, "mean_user_len must be >= 1");
    REJECT(mean_output_len, 0, "mean_output_len must be >= 1");
    REJECT(max_output_len, 0, "max_output_len must be >= 1");
    REJECT(mean_think_s, -1, "mean_think_s must be a finite number >= 0, got -1");
    REJECT(block_size, 0, "block_size must be >= 1");
    REJECT(burstiness, 0, "burstiness must be a positive finite number, got 0");
    REJECT(shared_prefix_ratio, 1.5, "shared_prefix_ratio must be in [0, 1], got 1.5");
#undef REJECT
    /* Prompts must fit in uint32 tokens (big blocks keep the system prompt's id list small). */
    kvsim_synth_opts_default(&o);
    o.system_prompt_len = UINT32_MAX;
    o.block_size = 1u << 20;
    cr_assert_eq(kvsim_workload_synthetic(&o, &t, err, sizeof err), -EINVAL);
    cr_assert_str_eq(err, "synthetic workload: a prompt of session 0 exceeds 4294967295 tokens");
    cr_assert_null(t.reqs);
}

/* The mean and coefficient of variation of the gaps between session starts. */
static void session_gaps(const struct kvsim_trace *t, double *mean, double *cv)
{
    double sum = 0, sq = 0, prev = 0;
    size_t n = 0;
    for (size_t i = 0; i < t->num_reqs; i++) {
        if (t->reqs[i].prev_turn >= 0)
            continue;
        double a = (double)t->reqs[i].arrival_ns / 1e9;
        if (n++ > 0) {
            sum += a - prev;
            sq += (a - prev) * (a - prev);
        }
        prev = a;
    }
    *mean = sum / (double)(n - 1);
    *cv = sqrt(sq / (double)(n - 1) - *mean * *mean) / *mean;
}

Test(trace, synthetic_knobs_shape_the_workload)
{
    struct kvsim_synth_opts o;
    struct kvsim_trace t;
    /* A request count: sessions until exactly that many requests. */
    kvsim_synth_opts_default(&o);
    o.num_requests = 777;
    synth_ok(&o, &t);
    cr_assert_eq(t.num_reqs, 777);
    kvsim_trace_free(&t);
    /* Fixed lengths, one turn each: every prompt is the system prompt and the user turn. */
    kvsim_synth_opts_default(&o);
    o.max_turns = 1;
    o.fixed_lengths = true;
    o.mean_user_len = 5000;
    o.mean_output_len = 500;
    synth_ok(&o, &t);
    cr_assert_eq(t.num_reqs, o.num_sessions);
    for (size_t i = 0; i < t.num_reqs; i++) {
        cr_assert_eq(t.reqs[i].input_len, 1024 + 5000);
        cr_assert_eq(t.reqs[i].output_len, 500);
        cr_assert_eq(t.reqs[i].prev_turn, -1);
    }
    kvsim_trace_free(&t);
    /* Shared prefixes: with ratio 1 the 8 groups' first blocks are all there is; with 0 every
     * session opens with blocks of its own. */
    for (int k = 0; k < 2; k++) {
        kvsim_synth_opts_default(&o);
        o.max_turns = 1;
        o.shared_prefix_ratio = k ? 0.0 : 1.0;
        synth_ok(&o, &t);
        uint64_t firsts[512];
        size_t nf = 0;
        for (size_t i = 0; i < t.num_reqs; i++) {
            uint64_t h = t.hash_ids[t.reqs[i].hash_off];
            bool seen = false;
            for (size_t j = 0; j < nf && !seen; j++)
                seen = firsts[j] == h;
            if (!seen && nf < 512)
                firsts[nf++] = h;
        }
        if (k == 0)
            cr_assert_leq(nf, 8, "shared: %zu distinct first blocks", nf);
        else
            cr_assert_eq(nf, t.num_reqs, "unshared: %zu distinct first blocks", nf);
        kvsim_trace_free(&t);
    }
    /* Burstiness: gamma gaps of the same mean, a CV of 1/sqrt(B) (1 for Poisson). */
    const double shapes[] = {0.25, 1.0, 4.0};
    for (int k = 0; k < 3; k++) {
        kvsim_synth_opts_default(&o);
        o.num_sessions = 20000;
        o.max_turns = 1;
        o.session_rate = 10;
        o.burstiness = shapes[k];
        synth_ok(&o, &t);
        double mean, cv;
        session_gaps(&t, &mean, &cv);
        cr_assert(fabs(mean - 0.1) < 0.1 * 0.05, "burstiness %g: mean gap %g s, not 0.1 s",
                  shapes[k], mean);
        double want = 1 / sqrt(shapes[k]);
        cr_assert(fabs(cv - want) < 0.1 * want, "burstiness %g: CV %g, not %g", shapes[k], cv,
                  want);
        kvsim_trace_free(&t);
    }
}

/* ---- vLLM run records (requests.jsonl) --------------------------------------------------- */

/* Writes text to a fresh temporary file whose name goes to path (the caller unlinks it). */
static void write_temp(char *path, size_t len, const char *text)
{
    kvsim_test_tmp_path(path, len, "kvsim_vllm_run_XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0, "mkstemp(%s) failed: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    cr_assert_not_null(f, "fdopen failed: %s", strerror(errno));
    int put = fputs(text, f);
    cr_assert(fclose(f) == 0 && put >= 0, "cannot write %s", path);
}

static void vllm_run_opts(struct kvsim_trace_opts *o)
{
    kvsim_trace_opts_default(o);
    o->format = KVSIM_TRACE_VLLM_RUN;
}

/* A vLLM run file whose line 2 is `row` (lines 1 and 3 are good) must fail with "<path>" want. */
static void expect_vllm_run_error(const char *row, const char *want)
{
    char path[4096], text[2048];
    snprintf(
        text, sizeof text,
        "{\"request_id\": \"r0\", \"input_toks\": 10, \"output_toks\": 2, \"queued_ts\": 1.5}\n"
        "%s\n"
        "{\"request_id\": \"r2\", \"input_toks\": 30, \"output_toks\": 4, \"queued_ts\": 2.5}\n",
        row);
    write_temp(path, sizeof path, text);
    struct kvsim_trace_opts o;
    vllm_run_opts(&o);
    expect_error(path, &o, -EINVAL, want);
    unlink(path);
}

Test(trace, vllm_run_small_every_field)
{
    char path[4096];
    /* Out of order on purpose; every recorded key, integer and real times. */
    write_temp(path, sizeof path,
               "{\"request_id\": \"bench-0\", \"input_toks\": 2358, \"output_toks\": 531, "
               "\"arrival_time\": 1777142838.338653, \"queued_ts\": 479748.340626232, "
               "\"scheduled_ts\": 479748.34067238, \"first_token_ts\": 479748.510151426, "
               "\"last_token_ts\": 479764.054028055}\n"
               "\n"
               "{\"request_id\": \"bench-1\", \"input_toks\": 1, \"output_toks\": 1, "
               "\"queued_ts\": 479748, \"arrival_time\": 1777142838}\n"
               "{\"request_id\": \"\", \"queued_ts\": 479749.25, \"input_toks\": 4294967295, "
               "\"output_toks\": 7}\n");
    struct kvsim_trace_opts o;
    vllm_run_opts(&o);
    struct kvsim_trace t;
    input_load_ok(path, &o, &t);
    cr_assert_eq(t.format, KVSIM_TRACE_VLLM_RUN);
    cr_assert_str_eq(kvsim_trace_format_name(t.format), "vllm-run");
    cr_assert_eq(t.num_reqs, 3);
    cr_assert_eq(t.num_hash_ids, 0);
    cr_assert_null(t.hash_ids);
    cr_assert_eq(t.block_size, 0);
    cr_assert_eq(t.num_sessions, 0);
    cr_assert_eq(t.num_clamped, 0);
    /* Line 2 is blank; line 3's queued_ts (479748 s) is the earliest and becomes 0. */
    expect_req(&t, 0, (struct want_req){3, 0, 1, 1, 0, -1, -1, 0, false});
    expect_req(&t, 1, (struct want_req){1, 340626232, 2358, 531, 0, -1, -1, 0, false});
    expect_req(&t, 2, (struct want_req){4, 1250000000, UINT32_MAX, 7, 0, -1, -1, 0, false});
    cr_assert_null(kvsim_trace_hashes(&t, &t.reqs[0]));
    input_check_invariants(&t);
    kvsim_trace_free(&t);

    /* Speedup and max_requests as for the other formats; the earliest kept row is 0. */
    o.arrival_speedup = 2.0;
    o.max_requests = 1;
    input_load_ok(path, &o, &t);
    cr_assert_eq(t.num_reqs, 1);
    expect_req(&t, 0, (struct want_req){1, 0, 2358, 531, 0, -1, -1, 0, false});
    kvsim_trace_free(&t);
    o.max_requests = 0;
    input_load_ok(path, &o, &t);
    expect_req(&t, 1, (struct want_req){1, 170313116, 2358, 531, 0, -1, -1, 0, false});
    expect_req(&t, 2, (struct want_req){4, 625000000, UINT32_MAX, 7, 0, -1, -1, 0, false});
    kvsim_trace_free(&t);
    unlink(path);
}

Test(trace, vllm_run_ties_keep_file_order)
{
    char path[4096];
    write_temp(
        path, sizeof path,
        "{\"request_id\": \"a\", \"input_toks\": 5, \"output_toks\": 1, \"queued_ts\": 3}\n"
        "{\"request_id\": \"b\", \"input_toks\": 6, \"output_toks\": 1, \"queued_ts\": 2.0}\n"
        "{\"request_id\": \"c\", \"input_toks\": 7, \"output_toks\": 1, \"queued_ts\": 2}\n");
    struct kvsim_trace_opts o;
    vllm_run_opts(&o);
    struct kvsim_trace t;
    input_load_ok(path, &o, &t);
    expect_req(&t, 0, (struct want_req){2, 0, 6, 1, 0, -1, -1, 0, false});
    expect_req(&t, 1, (struct want_req){3, 0, 7, 1, 0, -1, -1, 0, false});
    expect_req(&t, 2, (struct want_req){1, 1000000000, 5, 1, 0, -1, -1, 0, false});
    kvsim_trace_free(&t);
    unlink(path);
}

Test(trace, vllm_run_is_never_chosen_by_extension)
{
    /* A .jsonl is Mooncake under AUTO: a vLLM run row is then an unknown Mooncake field. */
    char dir[4096], path[4200];
    kvsim_test_tmp_path(dir, sizeof dir, "kvsim_vllm_run_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/requests.jsonl", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"request_id\": \"r\", \"input_toks\": 5, \"output_toks\": 1, \"queued_ts\": 3}\n", f);
    cr_assert_eq(fclose(f), 0);
    expect_error(path, NULL, -EINVAL,
                 ":1: field 'request_id': unknown field (expected timestamp, input_length, "
                 "output_length, hash_ids, session_id, delay)");
    struct kvsim_trace_opts o;
    vllm_run_opts(&o);
    struct kvsim_trace t;
    input_load_ok(path, &o, &t);
    cr_assert_eq(t.num_reqs, 1);
    kvsim_trace_free(&t);
    unlink(path);
    rmdir(dir);
}

Test(trace, vllm_run_missing_field)
{
    expect_vllm_run_error("{\"request_id\": \"r1\", \"input_toks\": 20, \"queued_ts\": 2}",
                          ":2: field 'output_toks': missing");
    expect_vllm_run_error("{\"input_toks\": 20, \"output_toks\": 3, \"queued_ts\": 2}",
                          ":2: field 'request_id': missing");
    expect_vllm_run_error("{\"request_id\": \"r1\", \"input_toks\": 20, \"output_toks\": 3, "
                          "\"arrival_time\": 1777142838.6}",
                          ":2: field 'queued_ts': missing");
}

Test(trace, vllm_run_wrong_type)
{
    expect_vllm_run_error(
        "{\"request_id\": \"r1\", \"input_toks\": \"20\", \"output_toks\": 3, \"queued_ts\": 2}",
        ":2: field 'input_toks': expected an integer, got a string");
    expect_vllm_run_error(
        "{\"request_id\": \"r1\", \"input_toks\": 20.0, \"output_toks\": 3, \"queued_ts\": 2}",
        ":2: field 'input_toks': expected an integer, got a real number");
    expect_vllm_run_error(
        "{\"request_id\": 1, \"input_toks\": 20, \"output_toks\": 3, \"queued_ts\": 2}",
        ":2: field 'request_id': expected a string, got an integer");
    expect_vllm_run_error(
        "{\"request_id\": \"r1\", \"input_toks\": 20, \"output_toks\": 3, \"queued_ts\": null}",
        ":2: field 'queued_ts': expected a number, got null");
    expect_vllm_run_error("{\"request_id\": \"r1\", \"input_toks\": 20, \"output_toks\": 3, "
                          "\"queued_ts\": 2, \"first_token_ts\": \"soon\"}",
                          ":2: field 'first_token_ts': expected a number, got a string");
    expect_vllm_run_error("[1, 2]", ":2: expected a JSON object, got an array");
}

Test(trace, vllm_run_unknown_key)
{
    expect_vllm_run_error("{\"request_id\": \"r1\", \"input_toks\": 20, \"output_toks\": 3, "
                          "\"queued_ts\": 2, \"prompt\": \"hi\"}",
                          ":2: field 'prompt': unknown field (expected request_id, input_toks, "
                          "output_toks, queued_ts, arrival_time, scheduled_ts, first_token_ts, "
                          "last_token_ts)");
}

Test(trace, vllm_run_bad_values)
{
    expect_vllm_run_error(
        "{\"request_id\": \"r1\", \"input_toks\": 0, \"output_toks\": 3, \"queued_ts\": 2}",
        ":2: field 'input_toks': must be >= 1, got 0");
    expect_vllm_run_error(
        "{\"request_id\": \"r1\", \"input_toks\": 20, \"output_toks\": -1, \"queued_ts\": 2}",
        ":2: field 'output_toks': must be >= 1, got -1");
    expect_vllm_run_error("{\"request_id\": \"r1\", \"input_toks\": 5000000000, \"output_toks\": "
                          "3, \"queued_ts\": 2}",
                          ":2: field 'input_toks': 5000000000 is too large (max 4294967295)");
    expect_vllm_run_error(
        "{\"request_id\": \"r1\", \"input_toks\": 20, \"output_toks\": 3, \"queued_ts\": -0.5}",
        ":2: field 'queued_ts': must be >= 0, got -0.5");
    expect_vllm_run_error(
        "{\"request_id\": \"r1\", \"input_toks\": 20, \"output_toks\": 3, \"queued_ts\": 2e9}",
        ":2: field 'queued_ts': 2e+09 s is too large (max 1e+09 s)");
}

/* ---- where the bytes come from: gzip, the file's sha256 ---------------------------------- */

/* Reads path into a malloc'd buffer; *n its size. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    unsigned char *buf = malloc(1 << 20);
    *n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

/* Writes the bytes to a fresh file in the test directory and returns its path (static buffer
 * per slot). */
static const char *write_tmp(int slot, const char *suffix, const void *bytes, size_t n)
{
    static char paths[4][4096];
    char name[128];
    snprintf(name, sizeof name, "input-%d-%d%s", (int)getpid(), slot, suffix);
    kvsim_test_tmp_path(paths[slot], sizeof paths[slot], name);
    FILE *f = fopen(paths[slot], "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
    return paths[slot];
}

/* gzip -c of path (through gzip(1), which is in every Debian base system) into out. */
static void gzip_file(const char *path, const char *out)
{
    char cmd[8400];
    int n = snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s'", path, out);
    cr_assert(n > 0 && (size_t)n < sizeof cmd, "the paths %s and %s are too long", path, out);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void expect_same_trace(const struct kvsim_trace *a, const struct kvsim_trace *b)
{
    cr_assert_eq(a->num_reqs, b->num_reqs);
    cr_assert_eq(a->num_hash_ids, b->num_hash_ids);
    cr_assert_eq(memcmp(a->reqs, b->reqs, a->num_reqs * sizeof *a->reqs), 0);
    cr_assert_eq(memcmp(a->hash_ids, b->hash_ids, a->num_hash_ids * sizeof *a->hash_ids), 0);
}

Test(trace, gzip_is_read_by_its_bytes_and_the_hash_is_of_the_stored_file)
{
    struct kvsim_trace plain, gz, two;
    input_load_ok(INPUTS "mooncake_small.jsonl", NULL, &plain);
    /* sha256sum tests/inputs/mooncake_small.jsonl */
    cr_assert_str_eq(plain.sha256,
                     "05c02fc0262c41a2f52dadee1d89d5856f40a2700ea9aa4c5725b1b229b85086");
    char gz_path[4096], gz_noext[4096], two_path[4096], name[128];
    snprintf(name, sizeof name, "gz-%d.jsonl.gz", (int)getpid());
    kvsim_test_tmp_path(gz_path, sizeof gz_path, name);
    snprintf(name, sizeof name, "gz-%d.jsonl", (int)getpid());
    kvsim_test_tmp_path(gz_noext, sizeof gz_noext, name);
    gzip_file(INPUTS "mooncake_small.jsonl", gz_path);
    gzip_file(INPUTS "mooncake_small.jsonl", gz_noext); /* the magic decides, not the name */
    input_load_ok(gz_path, NULL, &gz);
    expect_same_trace(&plain, &gz);
    cr_assert_str_neq(gz.sha256, plain.sha256, "the hash is of the compressed bytes");
    kvsim_trace_free(&gz);
    input_load_ok(gz_noext, NULL, &gz);
    expect_same_trace(&plain, &gz);
    /* Two members concatenated (cat a.gz b.gz) read as the two files one after the other. */
    size_t n;
    unsigned char *bytes = slurp(gz_path, &n);
    unsigned char *twice = malloc(2 * n);
    memcpy(twice, bytes, n);
    memcpy(twice + n, bytes, n);
    snprintf(two_path, sizeof two_path, "%s", write_tmp(0, ".jsonl", twice, 2 * n));
    input_load_ok(two_path, NULL, &two);
    cr_assert_eq(two.num_reqs, 2 * plain.num_reqs);
    /* A stream cut short, and one that is not deflate after the magic. */
    const char *cut = write_tmp(1, ".jsonl", bytes, n - 9);
    struct kvsim_trace t;
    char err[512];
    cr_assert_eq(kvsim_trace_load(cut, NULL, &t, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "corrupt or truncated gzip stream") && strstr(err, cut), "%s", err);
    const char *junk = write_tmp(2, ".jsonl", "\x1f\x8bnot deflate\n", 14);
    cr_assert_eq(kvsim_trace_load(junk, NULL, &t, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "corrupt or truncated gzip stream"), "%s", err);
    /* --max-requests: the hash still covers the whole file. */
    struct kvsim_trace_opts o;
    kvsim_trace_opts_default(&o);
    o.max_requests = 1;
    struct kvsim_trace one;
    input_load_ok(INPUTS "mooncake_small.jsonl", &o, &one);
    cr_assert_eq(one.num_reqs, 1);
    cr_assert_str_eq(one.sha256, plain.sha256);
    kvsim_trace_free(&one);
    unlink(gz_path);
    unlink(gz_noext);
    unlink(two_path);
    unlink(cut);
    unlink(junk);
    free(bytes);
    free(twice);
    kvsim_trace_free(&plain);
    kvsim_trace_free(&gz);
    kvsim_trace_free(&two);
}

Test(trace, standard_input_needs_a_format)
{
    struct kvsim_trace t;
    char err[512];
    cr_assert_eq(kvsim_trace_load("-", NULL, &t, err, sizeof err), -EINVAL);
    cr_assert_str_eq(err, "standard input: give the trace format (--format mooncake, azure or "
                          "vllm-run)");
}

/* ---- bounded reads (read.c) ---------------------------------------------------------------- */

/* The next line of f must be `want` (n bytes, NULs included). */
static void expect_line(FILE *f, char **buf, size_t *cap, size_t max, const char *want, size_t n)
{
    size_t len = 99;
    cr_assert_eq(kvsim_read_line(f, buf, cap, max, &len), KVSIM_READ_LINE);
    cr_assert_eq(len, n);
    cr_assert_eq(memcmp(*buf, want, n), 0);
    cr_assert_eq((*buf)[n], 0, "the line is followed by a NUL");
}

Test(trace, read_line_keeps_every_byte_up_to_the_limit_and_refuses_past_it)
{
    static const char text[] = "ab\n\ncd\0e\nxyz"; /* a NUL inside, no line end at the end */
    FILE *f = fmemopen((void *)text, sizeof text - 1, "r");
    char *buf = NULL;
    size_t cap = 0, len = 99;
    expect_line(f, &buf, &cap, 4, "ab\n", 3);
    expect_line(f, &buf, &cap, 4, "\n", 1);
    expect_line(f, &buf, &cap, 4, "cd\0e\n", 5); /* 4 bytes and its '\n': at the limit */
    expect_line(f, &buf, &cap, 4, "xyz", 3);
    cr_assert_eq(kvsim_read_line(f, &buf, &cap, 4, &len), KVSIM_READ_END);
    cr_assert_eq(len, 0);
    fclose(f);
    /* One byte past the limit, with or without the line end. */
    static const char past[] = "abcd\nabc\nabcd";
    f = fmemopen((void *)past, sizeof past - 1, "r");
    cr_assert_eq(kvsim_read_line(f, &buf, &cap, 3, &len), KVSIM_READ_TOO_LONG);
    cr_assert_eq(len, 0);
    expect_line(f, &buf, &cap, 3, "\n", 1); /* the rest of the refused line is left unread */
    expect_line(f, &buf, &cap, 3, "abc\n", 4);
    cr_assert_eq(kvsim_read_line(f, &buf, &cap, 3, &len), KVSIM_READ_TOO_LONG);
    fclose(f);
    /* A line of many chunks, at its limit and one byte past it. */
    size_t n = 300000;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\n';
    f = fmemopen(big, n + 1, "r");
    expect_line(f, &buf, &cap, n, big, n + 1);
    cr_assert_leq(cap, n + 2, "never more than the limit, its line end and a NUL");
    fclose(f);
    f = fmemopen(big, n + 1, "r");
    cr_assert_eq(kvsim_read_line(f, &buf, &cap, n - 1, &len), KVSIM_READ_TOO_LONG);
    fclose(f);
    free(big);
    /* A read error is one, not an end: a directory reads as EISDIR. */
    f = fopen(kvsim_test_tmpdir(), "r");
    cr_assert_not_null(f);
    errno = 0;
    cr_assert_eq(kvsim_read_line(f, &buf, &cap, 4, &len), KVSIM_READ_ERROR);
    cr_assert_eq(errno, EISDIR);
    fclose(f);
    free(buf);
}

/* kvsim_json_load_file(path) must fail with rc, jerr.line -1 and exactly the text want. */
static void expect_json_refused(const char *path, int rc, const char *want)
{
    json_t *doc = (json_t *)1;
    json_error_t jerr;
    cr_assert_eq(kvsim_json_load_file(path, 0, &doc, &jerr), rc, "%s", jerr.text);
    cr_assert_null(doc);
    cr_assert_eq(jerr.line, -1);
    cr_assert_str_eq(jerr.text, want);
}

Test(trace, json_load_file_is_bounded_and_names_the_file)
{
    json_t *doc;
    json_error_t jerr;
    const char *good = write_tmp(0, ".json", "{\"a\": [1, 2]}\n", 14);
    cr_assert_eq(kvsim_json_load_file(good, JSON_REJECT_DUPLICATES, &doc, &jerr), 0);
    cr_assert_eq(json_integer_value(json_array_get(json_object_get(doc, "a"), 1)), 2);
    json_decref(doc);
    /* jansson's own error, as json_load_file gives it: the caller adds the file. */
    const char *bad = write_tmp(1, ".json", "{\n\"a\": 1,\n\"a\": 2}", 17);
    cr_assert_eq(kvsim_json_load_file(bad, JSON_REJECT_DUPLICATES, &doc, &jerr), -EINVAL);
    cr_assert_eq(jerr.line, 3);
    cr_assert_str_eq(jerr.text, "duplicate object key near '\"a\"'");
    /* The source is the path, or "..." and its tail when longer than jansson keeps (79). */
    size_t blen = strlen(bad), keep = sizeof jerr.source - 1;
    if (blen <= keep)
        cr_assert_str_eq(jerr.source, bad);
    else
        cr_assert(strncmp(jerr.source, "...", 3) == 0 &&
                      strcmp(jerr.source + 3, bad + blen - (keep - 3)) == 0,
                  "%s", jerr.source);
    cr_assert_eq(json_error_code(&jerr), json_error_duplicate_key);
    /* Ours: the whole message. */
    char want[4200], path[4096];
    snprintf(path, sizeof path, "%s/no-such.json", kvsim_test_tmpdir());
    snprintf(want, sizeof want, "unable to open %s: No such file or directory", path);
    expect_json_refused(path, -ENOENT, want);
    snprintf(want, sizeof want, "%s:1: read error: Is a directory", kvsim_test_tmpdir());
    expect_json_refused(kvsim_test_tmpdir(), -EISDIR, want);
    expect_json_refused("/dev/zero", -EINVAL, "/dev/zero: larger than 64 MiB"); /* read so far */
    /* A path too long for jansson's 160-byte text loses its front, never the reason. */
    char deep[600];
    snprintf(deep, sizeof deep, "/no-such-%0100d/%0100d/%0100d.json", 0, 0, 1);
    cr_assert_eq(kvsim_json_load_file(deep, 0, &doc, &jerr), -ENOENT);
    cr_assert(strncmp(jerr.text, "unable to open ...", 18) == 0, "%s", jerr.text);
    const char *reason = "00001.json: No such file or directory";
    size_t tlen = strlen(jerr.text);
    cr_assert(tlen > strlen(reason) && strcmp(jerr.text + tlen - strlen(reason), reason) == 0, "%s",
              jerr.text);
    cr_assert_eq(json_error_code(&jerr), json_error_cannot_open_file);
    /* A regular file is judged by its size: exactly the limit is read (and parsed: NULs are
     * not JSON), one byte more is refused unread. */
    snprintf(path, sizeof path, "%s/sparse.json", kvsim_test_tmpdir());
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_geq(fputs("{}", f), 0);
    fclose(f);
    cr_assert_eq(truncate(path, (off_t)KVSIM_INPUT_MAX_JSON_BYTES), 0);
    cr_assert_eq(kvsim_json_load_file(path, 0, &doc, &jerr), -EINVAL);
    cr_assert_eq(jerr.line, 1, "%s", jerr.text);
    cr_assert_eq(truncate(path, (off_t)KVSIM_INPUT_MAX_JSON_BYTES + 1), 0);
    snprintf(want, sizeof want, "%s: larger than 64 MiB", path);
    expect_json_refused(path, -EINVAL, want);
    unlink(path);
    unlink(good);
    unlink(bad);
}

/* kvsim_json_load_file_values counts every scalar, list and object (not an object's keys, nor
 * what a string holds) as it reads, and refuses the document past max_values (#64). */
Test(trace, json_load_file_values_counts_values_not_keys)
{
    /* 8 values: the root, the list, 1, the string, the inner object, null, -2.5e3, true. */
    static const char text[] = "{\"a[{\": [1, \"x,]\\\"{\", {\"k,\": null}, -2.5e3],\n\"b\": true}";
    const char *path = write_tmp(0, ".json", text, sizeof text - 1);
    json_t *doc;
    json_error_t jerr;
    cr_assert_eq(kvsim_json_load_file_values(path, JSON_REJECT_DUPLICATES, 8, &doc, &jerr), 0, "%s",
                 jerr.text);
    cr_assert_str_eq(json_string_value(json_array_get(json_object_get(doc, "a[{"), 1)), "x,]\"{");
    json_decref(doc);
    doc = (json_t *)1;
    cr_assert_eq(kvsim_json_load_file_values(path, JSON_REJECT_DUPLICATES, 7, &doc, &jerr),
                 -EINVAL);
    cr_assert_null(doc);
    cr_assert_eq(jerr.line, -1);
    char want[4200];
    snprintf(want, sizeof want, "%s: more than 7 values", path);
    cr_assert_str_eq(jerr.text, want);
    /* jansson's own refusals and ours are kvsim_json_load_file's. */
    const char *dup = write_tmp(1, ".json", "{\n\"a\": 1,\n\"a\": 2}", 17);
    cr_assert_eq(kvsim_json_load_file_values(dup, JSON_REJECT_DUPLICATES, 100, &doc, &jerr),
                 -EINVAL);
    cr_assert_eq(jerr.line, 3);
    cr_assert_eq(json_error_code(&jerr), json_error_duplicate_key);
    cr_assert_eq(kvsim_json_load_file_values("/dev/zero", 0, 100, &doc, &jerr), -EINVAL);
    cr_assert_null(doc);
    unlink(path);
    unlink(dup);
}
