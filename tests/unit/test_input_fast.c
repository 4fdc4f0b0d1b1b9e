/*
 * test_input_fast.c - the Mooncake scanner (runtime/input/mooncake.c) against jansson: every
 * trace, every bad fixture and a set of tricky lines load to the same result (the same trace,
 * field by field, or the same rc and message) with the scanner on and with every line through
 * jansson (input__trace_load's jansson_only). The shared traces are needed by the real_* tests
 * only (common.h: they skip visibly without them).
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/input/input_internal.h"

#include "common.h"

#ifndef KVSIM_SOURCE_DIR
#error "KVSIM_SOURCE_DIR must be defined (the source tree, for tests/inputs)"
#endif

#define INPUTS KVSIM_SOURCE_DIR "/tests/inputs/"

TestSuite(fast, .timeout = 120);

static void expect_same_trace(const char *what, const struct kvsim_trace *a,
                              const struct kvsim_trace *b)
{
    cr_assert_eq(a->num_reqs, b->num_reqs, "%s: %zu requests vs %zu", what, a->num_reqs,
                 b->num_reqs);
    cr_assert_eq(a->num_hash_ids, b->num_hash_ids, "%s: hash ids", what);
    cr_assert_eq(a->block_size, b->block_size, "%s: block_size", what);
    cr_assert_eq(a->num_clamped, b->num_clamped, "%s: num_clamped", what);
    cr_assert_eq(a->num_sessions, b->num_sessions, "%s: num_sessions", what);
    cr_assert_eq(a->format, b->format, "%s: format", what);
    cr_assert_str_eq(a->sha256, b->sha256, "%s: sha256", what);
    for (size_t i = 0; i < a->num_hash_ids; i++)
        cr_assert_eq(a->hash_ids[i], b->hash_ids[i], "%s: hash_ids[%zu]", what, i);
    for (size_t i = 0; i < a->num_reqs; i++) {
        const struct kvsim_req_spec *x = &a->reqs[i], *y = &b->reqs[i];
        cr_assert(x->line == y->line && x->arrival_ns == y->arrival_ns &&
                      x->input_len == y->input_len && x->output_len == y->output_len &&
                      x->hash_off == y->hash_off && x->num_hashes == y->num_hashes &&
                      x->session == y->session && x->prev_turn == y->prev_turn &&
                      x->delay_ns == y->delay_ns && x->clamped == y->clamped &&
                      x->stop_after == y->stop_after,
                  "%s: reqs[%zu] (lines %u, %u) differ", what, i, x->line, y->line);
    }
}

/* Loads path both ways; asserts the same rc, message and trace. Returns the rc. */
static int expect_same(const char *what, const char *path, const struct kvsim_trace_opts *opts,
                       char *err_out, size_t errlen)
{
    struct kvsim_trace a, b;
    char ea[512], eb[512];
    int ra = input__trace_load(path, opts, false, &a, ea, sizeof ea);
    int rb = input__trace_load(path, opts, true, &b, eb, sizeof eb);
    cr_assert_eq(ra, rb, "%s: rc %d (scanner: %s) vs %d (jansson: %s)", what, ra, ea, rb, eb);
    cr_assert_str_eq(ea, eb, "%s: message\n  scanner: %s\n  jansson: %s", what, ea, eb);
    if (ra == 0)
        expect_same_trace(what, &a, &b);
    if (err_out)
        snprintf(err_out, errlen, "%s", ea);
    kvsim_trace_free(&a);
    kvsim_trace_free(&b);
    return ra;
}

/* ---- files ----------------------------------------------------------------------------------- */

static void real(const char *name, uint32_t block_size)
{
    char path[1024], what[256];
    kvsim_test_trace_path(path, sizeof path, name);
    struct kvsim_trace_opts o;
    kvsim_trace_opts_default(&o);
    if (block_size)
        o.trace_block_size = block_size;
    snprintf(what, sizeof what, "%s (block size %u)", name, o.trace_block_size);
    expect_same(what, path, &o, NULL, 0);
}

Test(fast, real_conversation_trace)
{
    real("conversation_trace.jsonl", 0);
    real("conversation_trace.jsonl", 16);
    real("conversation_trace.jsonl", 600);  /* some rows clamped */
    real("conversation_trace.jsonl", 4096); /* an error: too many hash ids */
}
Test(fast, real_mooncake_trace_1000) { real("mooncake_trace_1000.jsonl", 0); }
Test(fast, real_synthetic_trace)
{
    real("synthetic_trace.jsonl", 0);
    real("synthetic_trace.jsonl", 1000);
}
Test(fast, real_gzip_trace) { real("pi_request_trace.jsonl.gz", 0); }

Test(fast, every_fixture)
{
    static const char *const dirs[] = {INPUTS, INPUTS "bad/"};
    size_t n = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
        DIR *dir = opendir(dirs[d]);
        cr_assert_not_null(dir, "%s: %s", dirs[d], strerror(errno));
        struct dirent *e;
        while ((e = readdir(dir))) {
            size_t len = strlen(e->d_name);
            if (len < 6 || strcmp(e->d_name + len - 6, ".jsonl") != 0)
                continue;
            char path[1024];
            snprintf(path, sizeof path, "%s%s", dirs[d], e->d_name);
            expect_same(path, path, NULL, NULL, 0);
            n++;
        }
        closedir(dir);
    }
    cr_assert_geq(n, 15, "only %zu .jsonl fixtures found", n);
}

/* ---- tricky lines ---------------------------------------------------------------------------- */

#define ROW  "\"timestamp\": 5, \"input_length\": 1000, \"output_length\": 10"
#define GOOD "{" ROW ", \"hash_ids\": [1, 2]}\n"

/* Lines (a whole file each, several lines allowed) and whether the loader accepts them. */
static const struct tricky {
    const char *text;
    bool ok;
} TRICKY[] = {
    {GOOD, true},
    {"{\"timestamp\":5,\"input_length\":1000,\"output_length\":10,\"hash_ids\":[1,2]}", true},
    {"\t{ \"timestamp\" : 5 ,\t\"input_length\":1000,\"output_length\":10,\"hash_ids\":[ 1 ,2 ] }"
     " \r\n",
     true},
    {"{\"hash_ids\": [1, 2], \"output_length\": 10, \"input_length\": 1000, \"timestamp\": 5}\n",
     true},
    {"{\"session_id\": \"s\", \"delay\": 0, " ROW ", \"hash_ids\": [1, 2]}\n", true},
    {"{" ROW ", \"hash_ids\": [0, 2147483647]}\n", true},
    {"{\"timestamp\": 1000000000000, \"input_length\": 4294967295, \"output_length\": 4294967295,"
     " \"hash_ids\": [1]}\n",
     true}, /* clamped */
    {"{\"timestamp\": 123456789012345678, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": "
     "[1]}\n",
     false},
    {"{\"timestamp\": 1000000000001, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": "
     "[1]}\n",
     false},
    {"{" ROW ", \"hash_ids\": []}\n", false},
    {"{" ROW ", \"hash_ids\": [ ]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, 2, 3]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, 2147483648]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, 123456789012345678]}\n", false},
    {"{}\n", false},
    {"{ }\n", false},
    /* duplicate keys */
    {"{\"timestamp\": 1, " ROW ", \"hash_ids\": [1, 2]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, 2], \"hash_ids\": [1]}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": null, \"session_id\": \"a\"}\n", false},
    /* escapes and other strings */
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"a\\\"b\"}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"\\u0041\"}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"a\\u0000b\"}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"s\\u00e9\"}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"s\xc3\xa9\"}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"s\xff\"}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"a\tb\"}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"a\x7f\"}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"\"}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"unterminated}\n", false},
    {"{" ROW ", \"hash_\\u0069ds\": [1]}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"x\\\"\": 1}\n", false},
    /* numbers */
    {"{\"timestamp\": 1e3, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", true},
    {"{\"timestamp\": 1E3, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", true},
    {"{\"timestamp\": 1.5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", true},
    {"{\"timestamp\": 0.0000001, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n",
     true},
    {"{\"timestamp\": 5, \"input_length\": 1e3, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": 5, \"input_length\": 1.0, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": 01, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": 5, \"input_length\": 00, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, 02]}\n", false},
    {"{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": -0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", true},
    {"{\"timestamp\": +1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, -2]}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": -7}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": 7}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": 1234567890123456789}\n", true},
    {"{\"timestamp\": 1234567890123456789, \"input_length\": 1, \"output_length\": 1, "
     "\"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp\": 99999999999999999999, \"input_length\": 1, \"output_length\": 1, "
     "\"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp\": 5, \"input_length\": 9223372036854775807, \"output_length\": 1, "
     "\"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp\": 5, \"input_length\": 9223372036854775808, \"output_length\": 1, "
     "\"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp\": 5, \"input_length\": 4294967296, \"output_length\": 1, \"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp\": 5, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [1]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, 99999999999999999999]}\n", false},
    {"{\"timestamp\": 5., \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": 5x, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    /* nesting and wrong types */
    {"{" ROW ", \"hash_ids\": [[1]]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, [2]]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, \"2\"]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, null]}\n", false},
    {"{" ROW ", \"hash_ids\": [1, 2.0]}\n", false},
    {"{" ROW ", \"hash_ids\": {\"a\": 1}}\n", false},
    {"{" ROW ", \"hash_ids\": \"1\"}\n", false},
    {"{" ROW ", \"hash_ids\": null}\n", false},
    {"{" ROW ", \"hash_ids\": 1}\n", false},
    {"{\"timestamp\": [5], \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": \"5\", \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp\": null, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp\": true, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp\": 5, \"input_length\": \"1\", \"output_length\": 1, \"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp\": 5, \"input_length\": null, \"output_length\": 1, \"hash_ids\": [1]}\n",
     false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": {}}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": [1]}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": false}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": 1.5}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": null, \"delay\": null}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"delay\": 0}\n", true},
    {"{" ROW ", \"hash_ids\": [1], \"delay\": 3}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"delay\": \"3\"}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"delay\": -3}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"delay\": nul}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"delay\": nullx}\n", false},
    /* whitespace and framing */
    {"{" ROW ",\f\"hash_ids\": [1]}\n", false},
    {"{" ROW ",\v\"hash_ids\": [1]}\n", false},
    {"{" ROW ", \"hash_ids\": [1]}\xc2\xa0\n", false},
    {"{" ROW ", \"hash_ids\": [1]}\r\r\n", true},
    {"\r{" ROW ", \"hash_ids\": [1]}\n", true},
    {"{" ROW ", \"hash_ids\": [1]} x\n", false},
    {"{" ROW ", \"hash_ids\": [1]}}\n", false},
    {"{" ROW ", \"hash_ids\": [1]}{}\n", false},
    {"{" ROW ", \"hash_ids\": [1],}\n", false},
    {"{" ROW ", \"hash_ids\": [1,]}\n", false},
    {"{" ROW ", \"hash_ids\": [1 2]}\n", false},
    {"{" ROW ", \"hash_ids\" [1]}\n", false},
    {"{" ROW " \"hash_ids\": [1]}\n", false},
    {"{" ROW ", \"hash_ids\": [1]\n", false},
    {"{" ROW ", \"hash_ids\": [1\n", false},
    {"[" ROW "]\n", false},
    {"5\n", false},
    {"\"x\"\n", false},
    {"{\"timestamp\": 5}\n", false},
    /* missing and extra fields */
    {"{\"input_length\": 1000, \"output_length\": 10, \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": 5, \"output_length\": 10, \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": 5, \"input_length\": 1000, \"hash_ids\": [1]}\n", false},
    {"{" ROW "}\n", false},
    {"{" ROW ", \"hash_ids\": [1], \"foo\": 1}\n", false},
    {"{\"foo\": 1, " ROW ", \"hash_ids\": [1]}\n", false},
    {"{\"Timestamp\": 5, \"input_length\": 1000, \"output_length\": 10, \"hash_ids\": [1]}\n",
     false},
    {"{\"timestamp \": 5, \"input_length\": 1000, \"output_length\": 10, \"hash_ids\": [1]}\n",
     false},
    {"{\"\": 5, " ROW ", \"hash_ids\": [1]}\n", false},
    {"{\"foo\": [1, {\"a\": 2}], " ROW ", \"hash_ids\": [1]}\n", false},
    {"{\"timestamp\": -1, \"foo\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": "
     "[1]}\n",
     false},
    /* several lines: sessions, their delays and the session ids' kinds */
    {GOOD GOOD "\n   \n" GOOD, true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"s\"}\n"
     "{\"timestamp\": 9, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1], "
     "\"session_id\": \"s\", \"delay\": 30}\n"
     "{\"timestamp\": 2, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1], "
     "\"session_id\": \"s\"}\n"
     "{\"timestamp\": 2, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1], "
     "\"session_id\": 7}\n"
     "{\"timestamp\": 20, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1], "
     "\"session_id\": \"7\"}\n"
     "{\"timestamp\": 30, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1], "
     "\"session_id\": 7, \"delay\": 1.25}\n"
     "{\"timestamp\": 30, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1], "
     "\"session_id\": \"\\u0073\"}\n",
     true},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": 7}\n"
     "{" ROW ", \"hash_ids\": [1], \"session_id\": \"7\", \"delay\": 4}\n",
     false},
    {"{" ROW ", \"hash_ids\": [1], \"session_id\": \"7\"}\n"
     "{" ROW ", \"hash_ids\": [1], \"session_id\": 8, \"delay\": 4}\n",
     false},
    {GOOD "{" ROW ", \"hash_ids\": [1], \"session_id\": \"a\\\"b\", \"delay\": 4}\n", false},
    {GOOD "{" ROW ", \"hash_ids\": [1], \"session_id\": \"a\\u0000b\", \"delay\": 4}\n", false},
};

/* Writes bytes[0..n) to path, loads it both ways: the same result, a success iff ok. */
static void check_bytes(const char *what, const char *path, const char *bytes, size_t n, bool ok)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
    char err[512];
    int rc = expect_same(what, path, NULL, err, sizeof err);
    cr_assert_eq(rc == 0, ok, "%s: rc %d (%s), expected %s", what, rc, err,
                 ok ? "success" : "an error");
}

Test(fast, tricky_lines)
{
    char dir[4096], path[4200];
    kvsim_test_tmp_path(dir, sizeof dir, "kvsim_fast_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/t.jsonl", dir);
    for (size_t i = 0; i < sizeof TRICKY / sizeof *TRICKY; i++) {
        const char *text = TRICKY[i].text;
        size_t n = strlen(text);
        char what[64];
        snprintf(what, sizeof what, "tricky line %zu", i);
        check_bytes(what, path, text, n, TRICKY[i].ok);
    }
    static const char nul[] = "{" ROW ", \"hash_ids\": [1]}\0\n"; /* a NUL byte after the row */
    check_bytes("a NUL byte", path, nul, sizeof nul - 1, false);
    unlink(path);
    rmdir(dir);
}
