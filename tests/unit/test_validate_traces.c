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

#define LLAMA    "llmservingsim-RTXPRO6000-Llama-3.1-8B"
#define QWEN     "llmservingsim-RTXPRO6000-Qwen3-32B"
#define QWEN_MOE "llmservingsim-RTXPRO6000-Qwen3-30B-A3B-Instruct-2507"

/* The directory of shared run `name` (the test skips without the shared traces). */
static void run_dir(char *dir, size_t len, const char *name)
{
    char trace[1024];
    snprintf(trace, sizeof trace, "groundtruth/%s/requests.jsonl", name);
    kvsim_test_trace_path(dir, len, trace);
    *strrchr(dir, '/') = 0;
}

/* A temporary file's path (the file exists, empty). */
static void temp_path(char *path, size_t len)
{
    kvsim_test_tmp_path(path, len, "validate-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
}

/* Runs `kvsim <command> RUN <args>` with the shared profiles; asserts exit 0. */
static void run_kvsim(const char *command, const char *name, const char *args)
{
    char dir[1024], cmd[4096];
    run_dir(dir, sizeof dir, name);
    snprintf(cmd, sizeof cmd, "%s %s %s %s > /dev/null", KVSIM_BINARY, command, dir, args);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static json_t *load(const char *path)
{
    json_error_t e;
    json_t *r = json_load_file(path, 0, &e);
    cr_assert_not_null(r, "%s: %s", path, e.text);
    return r;
}

/* Runs kvsim validate on run `name` (args after the run) and returns its JSON report. */
static json_t *validate_with(const char *name, const char *extra)
{
    char out[512], args[2048];
    temp_path(out, sizeof out);
    snprintf(args, sizeof args, "--quiet --report %s %s", out, extra);
    run_kvsim("validate", name, args);
    json_t *r = load(out);
    unlink(out);
    return r;
}

static const char *profiles_arg(void)
{
    static char arg[1200];
    snprintf(arg, sizeof arg, "--profiles %s/../profiles/llmservingsim", kvsim_test_traces_dir());
    return arg;
}

static json_t *validate(const char *name) { return validate_with(name, profiles_arg()); }

static double worst(json_t *r)
{
    return json_number_value(json_object_get(r, "worst_abs_diff_pct"));
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
        cr_expect_leq(fabs(d), b, "%s: %.2f %% (bound %.1f %%)", m, d, b);
    }
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(r, "timing"), "tp")) > 0, 1);
}

/* Both runs are vLLM 0.19 with engine_kwargs silent on async scheduling: vLLM's default, on. */
static void check_async_default(json_t *r)
{
    json_t *sch = json_object_get(r, "scheduling");
    cr_assert(json_is_true(json_object_get(sch, "async")), "the run had async scheduling");
    cr_assert_str_eq(json_string_value(json_object_get(sch, "why")),
                     "async (vLLM 0.19.0's default)");
}

/* The target is 5 % on every row; TTFT p50 is at -7.0 % (LLMServingSim: -8.6 %), so this pins
 * what the model reaches today (docs/fidelity/timing.md) and fails if it gets worse. */
Test(validate_traces, llama_3_1_8b_tp1)
{
    json_t *r = validate(LLAMA);
    check_async_default(r);
    check_rows(r, 7.5, 5);
    json_decref(r);
}

/* Issue #12's bound: 5 % on TPOT, E2E and throughput, 10 % on TTFT. */
Test(validate_traces, qwen3_32b_tp2)
{
    json_t *r = validate(QWEN);
    check_async_default(r);
    check_rows(r, 10, 5);
    json_decref(r);
}

/* The DP2 x EP2 run of Qwen3-30B-A3B (#46): two ranks in lockstep from the profile alone. The
 * target is 5 % on every row; today TPOT and E2E read 4-7 % slow and TTFT 18-33 % (queueing
 * amplifies the decode rate, and the exchange is priced as a ring at the cluster file's link:
 * docs/fidelity/timing.md), so this pins what the model reaches and fails if it gets worse. */
Test(validate_traces, qwen3_30b_a3b_dp2_ep2_in_lockstep)
{
    json_t *r = validate(QWEN_MOE);
    check_async_default(r);
    check_rows(r, 35, 7.5);
    json_decref(r);
}

/* The polynomial fitted to half of the Llama run: far closer than the default coefficients
 * (34 % off), on all of the run. */
Test(validate_traces, calibrate_fits_the_polynomial)
{
    char cfg[512], args[600];
    temp_path(cfg, sizeof cfg);
    snprintf(args, sizeof args, "-o %s --max-trials 100", cfg);
    run_kvsim("calibrate", LLAMA, args);
    json_t *c = load(cfg);
    cr_assert(json_is_array(json_object_get(json_object_get(c, "step_model"), "decode_ms")));
    json_decref(c);
    char empty[512], extra[600];
    temp_path(empty, sizeof empty);
    FILE *f = fopen(empty, "w");
    fputs("{}", f);
    fclose(f);
    snprintf(extra, sizeof extra, "--config %s", empty);
    json_t *before = validate_with(LLAMA, extra);
    snprintf(extra, sizeof extra, "--config %s", cfg);
    json_t *after = validate_with(LLAMA, extra);
    cr_expect_gt(worst(before), 25, "default polynomial: %.1f %%", worst(before));
    cr_expect_lt(worst(after), 15, "fitted polynomial: %.1f %%", worst(after));
    json_decref(before);
    json_decref(after);
    unlink(cfg);
    unlink(empty);
}

/* A correction on the profile: a scale close to 1 and a small overhead, since the profile alone
 * is within a few %. */
Test(validate_traces, calibrate_fits_a_profile_correction)
{
    char cfg[512], args[1800];
    temp_path(cfg, sizeof cfg);
    snprintf(args, sizeof args, "-o %s %s", cfg, profiles_arg());
    run_kvsim("calibrate", QWEN, args);
    json_t *c = load(cfg);
    double s = json_number_value(json_object_get(c, "speedup_ratio"));
    double o = json_number_value(json_object_get(c, "step_overhead_ms"));
    cr_expect(s > 0.9 && s < 1.1, "speedup_ratio %g", s);
    cr_expect(o >= 0 && o < 5, "step_overhead_ms %g", o);
    json_decref(c);
    unlink(cfg);
}

/* Capacity derived from the model and the GPU reaches both pools of a disaggregated replay (it
 * was derived after the pools had copied the engine settings): 20 GiB leave 763 blocks of
 * Llama-3.1-8B, too few for 181 of Mooncake's prompts. */
Test(validate_traces, derived_capacity_reaches_disaggregated_pools)
{
    char trace[1024], out[512], cmd[4096];
    kvsim_test_trace_path(trace, sizeof trace, "mooncake_trace_1000.jsonl");
    temp_path(out, sizeof out);
    snprintf(cmd, sizeof cmd,
             "%s replay --trace %s --prefill-engines 1 --decode-engines 1 %s --hardware RTXPRO6000 "
             "--model meta-llama/Llama-3.1-8B --gpu-memory-gib 20 --quiet --report %s",
             KVSIM_BINARY, trace, profiles_arg(), out);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    json_t *r = load(out);
    json_t *why = json_object_get(json_object_get(r, "requests"), "rejected_by_reason");
    cr_expect_eq(json_integer_value(json_object_get(why, "exceeds_kv_capacity")), 181);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(r, "timing"), "num_gpu_blocks")), 763);
    json_decref(r);
    unlink(out);
}

/* A row's field ("real" or "sim") by metric name. */
static double row(json_t *r, const char *metric, const char *field)
{
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(r, "rows"), i, x)
    {
        if (!strcmp(json_string_value(json_object_get(x, "metric")), metric))
            return json_number_value(json_object_get(x, field));
    }
    cr_assert_fail("no row %s", metric);
    return 0;
}

/*
 * Dense data parallelism (#44): no real dense DP run is shared, so this one is built from the
 * Llama run: the same requests, meta.json with data_parallel_size 2 and config.json with one
 * instance per rank (LLMServingSim's layout). validate accepts it and replays two ranks behind
 * the DP load balancer: the run kept one engine saturated (TTFT 7 s), two ranks take the same
 * arrivals with far less queueing, so the replay's TTFT falls by more than 10x and its TPOT
 * (smaller batches) drops, against the same vLLM column.
 */
Test(validate_traces, dense_data_parallel_run_is_accepted)
{
    char src[1024], dir[1024], cmd[8192];
    run_dir(src, sizeof src, LLAMA);
    kvsim_test_tmp_path(dir, sizeof dir, "validate-dp-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "ln -s %s/requests.jsonl %s/ && python3 -c \"import json,sys\n"
             "m=json.load(open(sys.argv[1]+'/meta.json'))\n"
             "m['engine_kwargs']['data_parallel_size']=2\n"
             "json.dump(m,open(sys.argv[2]+'/meta.json','w'))\n"
             "c=json.load(open(sys.argv[1]+'/config.json'))\n"
             "n=c['nodes'][0]; n['instances']=n['instances']*2; n['num_instances']=2\n"
             "json.dump(c,open(sys.argv[2]+'/config.json','w'))\" %s %s",
             src, dir, src, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char out[512];
    temp_path(out, sizeof out);
    snprintf(cmd, sizeof cmd, "%s validate %s --quiet --report %s %s > /dev/null", KVSIM_BINARY,
             dir, out, profiles_arg());
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    json_t *dp = load(out);
    unlink(out);
    json_t *one = validate(LLAMA);
    cr_assert_eq(json_integer_value(json_object_get(dp, "data_parallel_size")), 2);
    cr_assert_eq(json_integer_value(json_object_get(one, "data_parallel_size")), 1);
    cr_assert_eq(json_array_size(json_object_get(dp, "rows")), 17, "the Diff%% table");
    cr_assert_eq(row(dp, "TTFT mean ms", "real"), row(one, "TTFT mean ms", "real"));
    cr_assert_lt(row(dp, "TTFT mean ms", "sim") * 10, row(one, "TTFT mean ms", "sim"));
    cr_assert_lt(row(dp, "TPOT mean ms", "sim"), row(one, "TPOT mean ms", "sim"));
    json_decref(dp);
    json_decref(one);
    snprintf(cmd, sizeof cmd, "rm -r %s", dir);
    cr_assert_eq(system(cmd), 0);
}
