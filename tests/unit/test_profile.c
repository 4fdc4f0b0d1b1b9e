/*
 * test_profile.c - the profile step model: loading, interpolation and the composition of one
 * iteration against hand-computed cases (tests/inputs/profiles/tiny: a two-layer model whose
 * dense operators are straight lines and whose attention is a plane, so every value below is
 * exact), clamping, and its errors.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "runtime/api/api.h"
#include "runtime/runtime.h"

#define TINY KVSIM_SOURCE_DIR "/tests/inputs/profiles/tiny"

static struct kvsim_profile *load_tiny(void)
{
    struct kvsim_profile_config c = {
        .root = TINY, .hardware = "TESTHW", .model = "test/tiny", .tp = 1};
    struct kvsim_profile *p = NULL;
    char err[512];
    int rc = kvsim_profile_load(&c, &p, err, sizeof err);
    cr_assert_eq(rc, 0, "load: %s", err);
    return p;
}

static int64_t cost(const struct kvsim_profile *p, const struct kvsim_step_batch *b,
                    unsigned *outside)
{
    struct kvsim_step_model m;
    kvsim_step_model_default(&m);
    m.profile = p;
    return kvsim_step_model_cost_ns(&m, b, outside);
}

Test(profile, loads_the_architecture)
{
    struct kvsim_profile *p = load_tiny();
    const struct kvsim_model_arch *a = kvsim_profile_arch(p);
    cr_assert_eq(a->num_layers, 2);
    cr_assert_eq(a->hidden_size, 64);
    cr_assert_str_eq(kvsim_profile_hardware(p), "TESTHW");
    cr_assert_eq(kvsim_profile_tp(p), 1);
    kvsim_profile_free(p);
}

/* One 16-token prefill (no prefix) and one decode at context 24: T = 17 tokens, S = 2.
 * Dense at 17 (weight 0.16 between 1 and 101): embedding 1.16, layernorm 2.32 (twice a layer),
 * qkv 13.2, o_proj 6.6, down 26.4, final 1.32; lm_head at 2 sequences 110; attention
 * 10 + 16/4 + 0/8 + 1 * 24/4 = 20. Step = 1.16 + 1.32 + 110 + 2 (2 * 2.32 + 13.2 + 6.6 + 26.4
 * + 20) = 254.16 us. */
Test(profile, composes_a_mixed_step)
{
    struct kvsim_profile *p = load_tiny();
    uint32_t chunk[] = {16};
    uint64_t prefix[] = {0}, ctx[] = {24};
    struct kvsim_step_batch b = {.prefill_tokens = 16,
                                 .num_prefill_reqs = 1,
                                 .num_decode_reqs = 1,
                                 .prefill_chunk = chunk,
                                 .prefill_prefix = prefix,
                                 .decode_context = ctx};
    unsigned out = 99;
    cr_assert_eq(cost(p, &b, &out), 254160);
    cr_assert_eq(out, 0);
    kvsim_profile_free(p);
}

/* Two prefills, 32 tokens after a 16-token prefix and 16 after 16: T = 48 (weight 0.47), S = 2.
 * The larger is looked up: 10 + 8 + 2 = 20; the other adds its own time less a lone 16-token
 * chunk's: (10 + 4 + 2) - 14 = 2. Step = 1.47 + 1.94 + 110 + 2 (2 * 2.94 + 19.4 + 9.7 + 38.8 +
 * 22) = 304.97 us. */
Test(profile, composes_two_prefills)
{
    struct kvsim_profile *p = load_tiny();
    uint32_t chunk[] = {16, 32};
    uint64_t prefix[] = {16, 16};
    struct kvsim_step_batch b = {.prefill_tokens = 48,
                                 .num_prefill_reqs = 2,
                                 .prefill_chunk = chunk,
                                 .prefill_prefix = prefix};
    cr_assert_eq(cost(p, &b, NULL), 304970);
    kvsim_profile_free(p);
}

/* Decodes only at contexts 16 and 32 (mean 24; no skew fit: alpha 0): attention
 * 10 + 2 * 24 / 4 = 22; T = S = 2 (weight 0.01). */
Test(profile, interpolates_decode_context_at_the_mean)
{
    struct kvsim_profile *p = load_tiny();
    uint64_t ctx[] = {16, 32};
    struct kvsim_step_batch b = {.num_decode_reqs = 2, .decode_context = ctx};
    double dense = 2 * 2.02 + 10.2 + 5.1 + 20.4, once = 1.01 + 1.02, seq = 110;
    int64_t want = llround((once + seq + 2 * (dense + 22)) * 1e3);
    cr_assert_eq(cost(p, &b, NULL), want);
    kvsim_profile_free(p);
}

Test(profile, clamps_outside_the_grid_and_says_where)
{
    struct kvsim_profile *p = load_tiny();
    uint64_t ctx[12];
    for (int i = 0; i < 12; i++)
        ctx[i] = 64; /* above the profiled 32 */
    uint32_t chunk[] = {188};
    uint64_t prefix[] = {0};
    struct kvsim_step_batch b = {.prefill_tokens = 188,
                                 .num_prefill_reqs = 1,
                                 .num_decode_reqs = 12,
                                 .prefill_chunk = chunk,
                                 .prefill_prefix = prefix,
                                 .decode_context = ctx};
    unsigned out = 0;
    int64_t t = cost(p, &b, &out);
    cr_assert_eq(out, KVSIM_PROFILE_TOKENS | KVSIM_PROFILE_SEQUENCES | KVSIM_PROFILE_ATTENTION);
    /* clamped: dense at 101 tokens, lm_head at 11 sequences, attention at (32, 0, 2, 32) */
    double dense = 2 * 4 + 30 + 15 + 60, once = 2 + 3, seq = 200, attn = 10 + 8 + 2 * 32 / 4.0;
    cr_assert_eq(t, llround((once + seq + 2 * (dense + attn)) * 1e3));
    kvsim_profile_free(p);
}

Test(profile, min_duration_bounds_every_step)
{
    struct kvsim_profile *p = load_tiny();
    struct kvsim_step_model m;
    kvsim_step_model_default(&m);
    m.profile = p;
    int64_t lo = kvsim_step_model_min_duration_ns(&m);
    uint64_t ctx[] = {16};
    struct kvsim_step_batch b = {.num_decode_reqs = 1, .decode_context = ctx};
    cr_assert_gt(lo, 0);
    cr_assert_lt(lo, kvsim_step_model_duration_ns(&m, &b));
    kvsim_profile_free(p);
}

Test(profile, refuses_what_it_cannot_read)
{
    struct kvsim_profile *p = NULL;
    char err[512];
    struct kvsim_profile_config c = {
        .root = TINY, .hardware = "NOPE", .model = "test/tiny", .tp = 1};
    cr_assert_eq(kvsim_profile_load(&c, &p, err, sizeof err), -ENOENT);
    cr_assert(strstr(err, "NOPE/test/tiny/bf16/tp1/dense.csv: cannot read"), "%s", err);
    c.hardware = "TESTHW";
    c.tp = 2;
    cr_assert_eq(kvsim_profile_load(&c, &p, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "needs a link bandwidth"), "%s", err);
    c.tp_link_gbps = 16;
    cr_assert_eq(kvsim_profile_load(&c, &p, err, sizeof err), -ENOENT);
    cr_assert(strstr(err, "tp2/dense.csv"), "%s", err);
    cr_assert_null(p);
}

/* step_overhead_ms (kvsim calibrate's correction) adds to every step after speedup_ratio, for
 * the profile as for the polynomial, and a bad value names the key. */
Test(profile, step_overhead_adds_to_every_step)
{
    struct kvsim_profile *p = load_tiny();
    char path[4096], err[512];
    kvsim_test_tmp_path(path, sizeof path, "overhead-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *json = "{\"speedup_ratio\": 2, \"step_overhead_ms\": 0.5}";
    cr_assert_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    struct kvsim_step_model m;
    kvsim_step_model_default(&m);
    cr_assert_eq(kvsim_step_model_load(path, &m, err, sizeof err), 0, "%s", err);
    m.profile = p;
    uint32_t chunk[] = {16};
    uint64_t prefix[] = {0}, ctx[] = {24};
    struct kvsim_step_batch b = {.prefill_tokens = 16,
                                 .num_prefill_reqs = 1,
                                 .num_decode_reqs = 1,
                                 .prefill_chunk = chunk,
                                 .prefill_prefix = prefix,
                                 .decode_context = ctx};
    cr_assert_eq(kvsim_step_model_duration_ns(&m, &b), 254160 / 2 + 500000);
    fd = open(path, O_WRONLY | O_TRUNC);
    json = "{\"step_overhead_ms\": -1}";
    cr_assert_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    cr_assert_eq(kvsim_step_model_load(path, &m, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "key 'step_overhead_ms' must be a number in [0, 1e+06]"), "%s", err);
    unlink(path);
    kvsim_profile_free(p);
}

/* The polynomial's step time rounds like llround (halves away from zero), for whole, half and
 * near-half nanoseconds, tiny and huge steps. */
Test(step_model, rounds_to_the_nearest_nanosecond_like_llround)
{
    static const double floors_ms[] = {1.0,       2.5e-6,   3.5e-6,  1.4999999e-6, 1.5000001e-6,
                                       0.1234567, 1e-7,     4.5e-7,  1234.0000005, 9.2e9,
                                       1e13,      123.4567, 0.00001, 7.0000005};
    for (size_t i = 0; i < sizeof floors_ms / sizeof floors_ms[0]; i++) {
        struct kvsim_step_model m;
        kvsim_step_model_default(&m);
        m.decode_ms[0] = m.decode_ms[1] = m.decode_ms[2] = 0.0;
        m.decode_floor_ms = floors_ms[i]; /* a decode step costs the floor */
        struct kvsim_step_batch b = {.num_decode_reqs = 1, .kv_usage = 0.5};
        int64_t want = llround(floors_ms[i] * 1e6);
        if (want < 1)
            want = 1;
        cr_assert_eq(kvsim_step_model_duration_ns(&m, &b), want, "floor %.10g ms", floors_ms[i]);
        m.speedup_ratio = 2.0; /* and with a division */
        want = llround(floors_ms[i] / 2.0 * 1e6);
        cr_assert_eq(kvsim_step_model_duration_ns(&m, &b), want < 1 ? 1 : want, "floor %.10g / 2",
                     floors_ms[i]);
    }
}

/* ---- the bounds of a step model (#33; docs/fidelity/timing.md) ------------------------------ */

/* Every step of the polynomial between 1 us and an hour, at the engine's limits: the shortest
 * step is found at the vertex or the ends, and the message names the key, the step, the range. */
Test(step_model, check_bounds_every_step_of_the_polynomial)
{
    char err[768];
    struct kvsim_step_model m;
    kvsim_step_model_default(&m);
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), 0, "%s", err);
    /* the default's quadratic prefill term makes 1e7-token steps last 12 hours */
    cr_assert_eq(kvsim_step_model_check(&m, 10000000, 256, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "a step of 10000000 prefill tokens") && strstr(err, "at most 3.6e+06 ms"),
              "%s", err);
    /* a negative slope: the longest prefill is negative */
    m.prefill_ms[0] = 0, m.prefill_ms[1] = -1, m.prefill_ms[2] = 0;
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "key 'step_model.prefill_ms': a prefill step of 8192 tokens takes -8192 "
                          "ms") &&
                  strstr(err, "at least 0.001 ms"),
              "%s", err);
    /* a dip between the ends: p(T) = (T - 100)^2 / 1000 + 1e-4 is 1e-4 ms at T = 100 only */
    m.prefill_ms[0] = 1e-3, m.prefill_ms[1] = -0.2, m.prefill_ms[2] = 10 + 1e-4;
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "a prefill step of 100 tokens takes 0.0001 ms"), "%s", err);
    m.prefill_ms[2] = 10 + 1e-3; /* 1 us exactly at the vertex: allowed */
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), 0, "%s", err);
    /* decodes below the floor are floored; a zero floor lets a negative decode through */
    kvsim_step_model_default(&m);
    m.decode_ms[0] = 0, m.decode_ms[1] = 0, m.decode_ms[2] = -5;
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), 0, "%s", err);
    m.decode_floor_ms = 0;
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "keys 'step_model.decode_ms' and 'step_model.decode_floor_ms'"), "%s",
              err);
    /* a speedup that makes the shortest step a few ns, or the longest a month */
    kvsim_step_model_default(&m);
    m.speedup_ratio = 1e4;
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "a decode step") || strstr(err, "a prefill step"), "%s", err);
    m.speedup_ratio = 1e-6;
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "after speedup_ratio 1e-06"), "%s", err);
    /* step_overhead_ms lifts every step */
    m.speedup_ratio = 1e4;
    m.step_overhead_ms = 0.01;
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), 0, "%s", err);
}

/* The profile's shortest step (its smallest operators) and a bound on its longest (its largest
 * operators, every further prefill chunk's attention) within the same range. */
Test(step_model, check_bounds_every_step_of_a_profile)
{
    struct kvsim_profile *p = load_tiny();
    struct kvsim_step_model m;
    kvsim_step_model_default(&m);
    m.profile = p;
    char err[768];
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), 0, "%s", err);
    m.speedup_ratio = 1e6; /* a 254 us step in 0.25 ns */
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "tiny/bf16/tp1: a step of this profile takes from") &&
                  strstr(err, "between 0.001 ms and 3.6e+06 ms"),
              "%s", err);
    m.speedup_ratio = 1e-6; /* the longest step grows past an hour */
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), -EINVAL);
    /* the bound covers a real step of the largest batch */
    m.speedup_ratio = 1;
    uint32_t chunk[256];
    uint64_t prefix[256];
    for (int i = 0; i < 256; i++)
        chunk[i] = 32, prefix[i] = 1000;
    struct kvsim_step_batch b = {.prefill_tokens = 32 * 256,
                                 .num_prefill_reqs = 256,
                                 .prefill_chunk = chunk,
                                 .prefill_prefix = prefix};
    double us = kvsim_step_model_duration_ns(&m, &b) / 1e3;
    cr_assert_gt(us, 0);
    m.speedup_ratio = us / 1e3 / 3.6e6 * 1.01; /* that step alone just past an hour */
    cr_assert_eq(kvsim_step_model_check(&m, 8192, 256, err, sizeof err), -EINVAL, "a %.0f us step",
                 us);
    kvsim_profile_free(p);
}

/* A profile's time past 10 s, an axis past 1e9 or a skew alpha past 100 is refused at load,
 * naming the file, the line and the field. */
Test(profile, refuses_values_out_of_range)
{
    char root[1024], cmd[4096], err[768];
    kvsim_test_tmp_path(root, sizeof root, "tiny-copy");
    static const struct {
        const char *file, *sed, *want;
    } cases[] = {
        {"dense.csv", "s/^embedding,1,1$/embedding,1,1e300/",
         "dense.csv:2: field 'time_us' must be a number in [0, 1e+07], got '1e300'"},
        {"dense.csv", "s/^embedding,101,2$/embedding,1e12,2/",
         "dense.csv:3: field 'tokens' must be a number in [0, 1e+09], got '1e12'"},
        {"attention.csv", "2s/,[^,]*$/,2e7/",
         "attention.csv:2: field 'time_us' must be a number "
         "in [0, 1e+07], got '2e7'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd,
                 "rm -rf '%s' && cp -r '%s' '%s' && sed -i '%s' '%s/TESTHW/test/tiny/bf16/tp1/%s'",
                 root, TINY, root, cases[i].sed, root, cases[i].file);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
        struct kvsim_profile_config c = {
            .root = root, .hardware = "TESTHW", .model = "test/tiny", .tp = 1};
        struct kvsim_profile *p = NULL;
        cr_assert_eq(kvsim_profile_load(&c, &p, err, sizeof err), -EINVAL, "%s", cases[i].sed);
        cr_assert(strstr(err, cases[i].want), "%s", err);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}

/* --tp-link-gbps (#33): from its minimum to its maximum by decades, the all-reduce of a TP 2
 * step (the tiny profile, its tp1 tables copied as tp2) gives a finite step time that falls as
 * the bandwidth grows, and the value below the minimum is refused. */
Test(profile, every_tp_link_bandwidth_gives_a_finite_monotone_step)
{
    char root[1024], cmd[8192], err[768];
    kvsim_test_tmp_path(root, sizeof root, "tiny-tp2");
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && cp -r '%s' '%s' && cp -r '%s/TESTHW/test/tiny/bf16/tp1' "
             "'%s/TESTHW/test/tiny/bf16/tp2'",
             root, TINY, root, root, root);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    struct kvsim_options o;
    kvsim_options_default(&o);
    cr_assert_eq(kvsim_options_set(&o, "tp-link-gbps", "0.0001", err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "--tp-link-gbps"), "%s", err);
    cr_assert_eq(kvsim_options_set(&o, "tp-link-gbps", "1e7", err, sizeof err), -EINVAL);
    kvsim_options_fini(&o);
    uint32_t chunk[] = {512};
    uint64_t prefix[] = {0};
    struct kvsim_step_batch b = {.prefill_tokens = 512,
                                 .num_prefill_reqs = 1,
                                 .prefill_chunk = chunk,
                                 .prefill_prefix = prefix};
    int64_t prev = INT64_MAX;
    for (double v = 1e-3; v <= 1e6 * 1.0000001; v *= 10) {
        char val[64];
        snprintf(val, sizeof val, "%.17g", v);
        kvsim_options_default(&o);
        cr_assert_eq(kvsim_options_set(&o, "tp-link-gbps", val, err, sizeof err), 0, "%s", err);
        struct kvsim_profile_config c = {.root = root,
                                         .hardware = "TESTHW",
                                         .model = "test/tiny",
                                         .tp = 2,
                                         .tp_link_gbps = o.timing.tp_link_gbps,
                                         .tp_link_latency_ns = 20000};
        kvsim_options_fini(&o);
        struct kvsim_profile *p = NULL;
        cr_assert_eq(kvsim_profile_load(&c, &p, err, sizeof err), 0, "%s", err);
        struct kvsim_step_model m;
        kvsim_step_model_default(&m);
        m.profile = p;
        int64_t ns = kvsim_step_model_duration_ns(&m, &b);
        /* the slowest links make steps past an hour: refused at resolve, never run */
        bool runs = kvsim_step_model_check(&m, 8192, 256, err, sizeof err) == 0;
        kvsim_profile_free(p);
        cr_assert(ns >= 1000 && ns < KVSIM_CLOCK_END_NS, "%s GiB/s: a %lld ns step", val,
                  (long long)ns);
        cr_assert_leq(ns, prev, "%s GiB/s: slower than a slower link", val);
        cr_assert(runs || v < 1, "%s GiB/s refused: %s", val, err);
        prev = ns;
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}

/* ---- mixture of experts (tests/inputs/profiles/tiny, model test/tiny-moe) ---------------------
 *
 * tiny with its dense MLP replaced by one MoE block: 8 experts, 2 per token; moe.csv is the plane
 * 10 + tokens + 5 x activated over token rows 1, 4, 16, 64 (each with activated experts 2 to
 * min(8, 2 x tokens)), so every value below is exact. */

/* composes_a_mixed_step's batch: a 16-token prefill (no prefix) and one decode at context 24. */
static struct kvsim_step_batch mixed_step(void)
{
    static uint32_t chunk[] = {16};
    static uint64_t prefix[] = {0}, ctx[] = {24};
    return (struct kvsim_step_batch){.prefill_tokens = 16,
                                     .num_prefill_reqs = 1,
                                     .num_decode_reqs = 1,
                                     .prefill_chunk = chunk,
                                     .prefill_prefix = prefix,
                                     .decode_context = ctx};
}

static struct kvsim_profile *load_moe(uint32_t tp, uint32_t dp, bool ep, char *err, size_t len,
                                      int *rc)
{
    struct kvsim_profile_config c = {.root = TINY,
                                     .hardware = "TESTHW",
                                     .model = "test/tiny-moe",
                                     .tp = tp,
                                     .tp_link_gbps = 1,
                                     .tp_link_latency_ns = 1000,
                                     .data_parallel_size = dp,
                                     .enable_expert_parallel = ep};
    struct kvsim_profile *p = NULL;
    *rc = kvsim_profile_load(&c, &p, err, len);
    return p;
}

/* The mixed step of composes_a_mixed_step (16-token prefill and one decode: T = 17) on the MoE
 * model: the same dense operators but down_proj (44.44 us a layer with attention, 112.48 once),
 * and one MoE block a layer: activated experts A = 8 (1 - (1 - 2/8)^17) = 7.9398..., read at 17
 * tokens between the rows of 16 (26 + 5 A) and 64 (74 + 5 A) with weight 1/48: 27 + 5 A. Step =
 * 112.48 + 2 (44.44 + 27 + 5 A) = 255.36 + 10 A us. Expert parallelism on one GPU (tp 1, dp 1)
 * changes nothing. */
Test(profile_moe, composes_a_moe_step_by_hand)
{
    struct kvsim_step_batch b = mixed_step();
    double a = 8 * (1 - pow(0.75, 17));
    int64_t want = llround((255.36 + 10 * a) * 1e3);
    for (int ep = 0; ep < 2; ep++) {
        char err[512];
        int rc;
        struct kvsim_profile *p = load_moe(1, 1, ep, err, sizeof err, &rc);
        cr_assert_eq(rc, 0, "%s", err);
        cr_assert_eq(kvsim_profile_arch(p)->num_experts, 8);
        unsigned out = 99;
        int64_t got = cost(p, &b, &out);
        cr_assert(llabs(got - want) <= 1, "ep %d: %lld ns, want %lld", ep, (long long)got,
                  (long long)want);
        cr_assert_eq(out, 0);
        kvsim_profile_free(p);
    }
}

/*
 * Two data-parallel ranks with expert parallelism (tp 1): each holds 4 of the 8 experts and the
 * ranks are taken to step as many tokens (G = 2 x 17 = 34 in the group). A rank's MoE block reads
 * G / 2 = 17 tokens and A = 4 (1 - 0.75^34) = 3.9998... activated experts: 27 + 5 A as above.
 * Around it the exchange on a 1 GiB/s (1.073741824 bytes/ns), 1 us link: dispatch all-gathers
 * 17 tokens x (64 hidden + 8 logits) x 2 bytes = 2,448 bytes, combine reduce-scatters 17 x 64 x 2
 * = 2,176: one message each (dp - 1), 2 x 1000 + 4,624 / 1.073741824 ns = 6.30645 us a layer.
 */
Test(profile_moe, expert_parallel_ranks_and_their_exchange_by_hand)
{
    struct kvsim_step_batch b = mixed_step();
    char err[512];
    int rc;
    struct kvsim_profile *p = load_moe(1, 2, true, err, sizeof err, &rc);
    cr_assert_eq(rc, 0, "%s", err);
    double a = 4 * (1 - pow(0.75, 34));
    double exchange = (2 * 1000 + 4624 / 1.073741824) / 1e3;
    int64_t want = llround((112.48 + 2 * (44.44 + 27 + 5 * a + exchange)) * 1e3);
    int64_t got = cost(p, &b, NULL);
    cr_assert(llabs(got - want) <= 1, "%lld ns, want %lld", (long long)got, (long long)want);
    kvsim_profile_free(p);
}

/* At tp 2 without expert parallelism every GPU runs half of each expert: that needs the experts
 * profiled at tp 2, which this profile lacks: refused naming the file. With expert parallelism a
 * GPU runs 4 whole experts from the tp 1 table; a 1-token step reads half a token there, below
 * the grid, and says so. */
Test(profile_moe, needs_the_experts_profiled_at_its_degree)
{
    char err[512];
    int rc;
    struct kvsim_profile *p = load_moe(2, 1, false, err, sizeof err, &rc);
    cr_assert_eq(rc, -ENOENT, "%d: %s", rc, err);
    cr_assert_null(p);
    cr_assert(strstr(err, "test/tiny-moe/bf16/tp2/moe.csv"), "%s", err);
    cr_assert(strstr(err, "need the experts profiled at tp 2"), "%s", err);
    p = load_moe(2, 1, true, err, sizeof err, &rc);
    cr_assert_eq(rc, 0, "%s", err);
    uint64_t ctx[] = {16};
    struct kvsim_step_batch one = {.num_decode_reqs = 1, .decode_context = ctx};
    unsigned out = 0;
    cr_assert_gt(cost(p, &one, &out), 0);
    cr_assert(out & KVSIM_PROFILE_TOKENS, "half a token is below moe.csv's grid");
    kvsim_profile_free(p);
}

/* A refused engine-argument file changes nothing (tests/fuzz's fuzz_engine_args asserts it for
 * any input): before, the keys ahead of the bad one were applied. */
Test(engine_args, a_refused_file_leaves_no_partial_state)
{
    char path[512];
    kvsim_test_tmp_path(path, sizeof path, "engine-args-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char text[] = "{\"max_num_seqs\": 7, \"data_parallel_size\": 3, \"block_size\": 0}";
    cr_assert_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    struct sched_config sc;
    sched_config_default(&sc);
    uint32_t seqs = sc.max_num_seqs;
    struct kvsim_parallel_args par = {1, false};
    char err[512];
    cr_assert_eq(kvsim_engine_args_load(path, &sc, &par, err, sizeof err), -EINVAL);
    cr_assert(strstr(err, "key 'block_size'"), "%s", err);
    cr_assert_eq(sc.max_num_seqs, seqs, "max_num_seqs was applied before the bad key");
    cr_assert_eq(par.data_parallel_size, 1, "data_parallel_size was applied before the bad key");
    unlink(path);
}
