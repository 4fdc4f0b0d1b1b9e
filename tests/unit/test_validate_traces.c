/*
 * test_validate_traces.c - `kvsim validate` against the real vLLM runs in
 * ../shared/traces/groundtruth with the shared profiles, without any fitting: every Diff% row
 * within the bound docs/fidelity/timing.md states. Skips visibly without the shared data.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* Runs kvsim validate on run `name` and returns its JSON report (the caller decrefs). */
static json_t *validate(const char *name)
{
    char trace[1024], dir[1024], cmd[4096], out[] = "/tmp/kvsim-validate-test-XXXXXX";
    snprintf(trace, sizeof trace, "groundtruth/%s/requests.jsonl", name);
    kvsim_test_trace_path(dir, sizeof dir, trace);
    *strrchr(dir, '/') = 0;
    int fd = mkstemp(out);
    cr_assert_geq(fd, 0);
    close(fd);
    snprintf(cmd, sizeof cmd,
             "%s validate %s --profiles %s/../profiles/llmservingsim --quiet "
             "--report %s",
             KVSIM_BINARY, dir, kvsim_test_traces_dir(), out);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    json_error_t e;
    json_t *r = json_load_file(out, 0, &e);
    unlink(out);
    cr_assert_not_null(r, "%s", e.text);
    return r;
}

/* Asserts each row's |diff| within bound_ttft (TTFT rows) or bound (the others). */
static void check_rows(json_t *r, double bound_ttft, double bound)
{
    size_t i;
    json_t *row;
    json_t *rows = json_object_get(r, "rows");
    cr_assert_eq(json_array_size(rows), 17);
    json_array_foreach(rows, i, row)
    {
        const char *m = json_string_value(json_object_get(row, "metric"));
        double d = json_number_value(json_object_get(row, "diff_pct"));
        double b = !strncmp(m, "TTFT", 4) ? bound_ttft : bound;
        cr_expect_leq(fabs(d), b, "%s: %.2f %% (bound %.0f %%)", m, d, b);
    }
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(r, "timing"), "tp")) > 0, 1);
}

/* The target is 5 % on every row; TTFT p50 is at -7.4 % (LLMServingSim: -8.6 %), so this pins
 * what the model reaches today (docs/fidelity/timing.md) and fails if it gets worse. */
Test(validate_traces, llama_3_1_8b_tp1)
{
    json_t *r = validate("llmservingsim-RTXPRO6000-Llama-3.1-8B");
    check_rows(r, 8, 5);
    json_decref(r);
}

/* Issue #12's bound: 5 % on TPOT, E2E and throughput, 10 % on TTFT. */
Test(validate_traces, qwen3_32b_tp2)
{
    json_t *r = validate("llmservingsim-RTXPRO6000-Qwen3-32B");
    check_rows(r, 10, 5);
    json_decref(r);
}
