/*
 * test_verify.c - the soak and minimization machinery (runtime/verify/): ddmin's core, removing
 * requests from a scenario, the in-process scenario runner's verdicts (kinds, steps, lenient
 * replays), the liveness and progress rules on the conformance scenarios (no false alarms), and
 * that a soak seed is deterministic and its recorded scenario replays exactly what ran.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/verify/verify.h"

/* ---- ddmin ---------------------------------------------------------------------------------- */

struct need {
    const size_t *must; /* the candidate fails iff it holds all of these */
    size_t nmust;
    size_t min_count; /* ... and at least this many units */
    uint64_t calls;
};

static bool needs_all(void *ctx, const size_t *units, size_t n)
{
    struct need *nd = ctx;
    nd->calls++;
    for (size_t i = 1; i < n; i++)
        cr_assert_lt(units[i - 1], units[i], "ddmin must keep the units' order");
    if (n < nd->min_count)
        return false;
    for (size_t k = 0; k < nd->nmust; k++) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = units[i] == nd->must[k];
        if (!found)
            return false;
    }
    return true;
}

static size_t iota(size_t *u, size_t n)
{
    for (size_t i = 0; i < n; i++)
        u[i] = i;
    return n;
}

Test(ddmin, finds_exactly_the_two_needed_units)
{
    size_t u[40], must[] = {3, 31};
    size_t n = iota(u, 40);
    struct need nd = {must, 2, 0, 0};
    int64_t tests = kvsim_ddmin(u, &n, needs_all, &nd, 100000);
    cr_assert_eq(n, 2);
    cr_assert_eq(u[0], 3);
    cr_assert_eq(u[1], 31);
    cr_assert_eq((uint64_t)tests, nd.calls);
    cr_assert_lt(tests, 200, "ddmin took %lld tests for 2 of 40", (long long)tests);
}

Test(ddmin, random_sets_are_recovered_exactly)
{
    uint64_t x = 12345;
    for (int round = 0; round < 50; round++) {
        size_t u[64], must[8], nmust = 0;
        size_t n = iota(u, 64);
        for (size_t i = 0; i < 64; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            if ((x >> 59) == 0 && nmust < 8) /* about 1 in 32 */
                must[nmust++] = i;
        }
        struct need nd = {must, nmust, 0, 0};
        cr_assert_geq(kvsim_ddmin(u, &n, needs_all, &nd, 1000000), 0);
        cr_assert_eq(n, nmust, "round %d: kept %zu, needed %zu", round, n, nmust);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(u[i], must[i]);
    }
}

Test(ddmin, a_count_threshold_keeps_that_many)
{
    size_t u[30];
    size_t n = iota(u, 30);
    struct need nd = {NULL, 0, 5, 0};
    kvsim_ddmin(u, &n, needs_all, &nd, 100000);
    cr_assert_eq(n, 5); /* 1-minimal: any 4 of them pass */
}

Test(ddmin, a_failure_needing_nothing_shrinks_to_nothing)
{
    size_t u[7];
    size_t n = iota(u, 7);
    struct need nd = {NULL, 0, 0, 0};
    kvsim_ddmin(u, &n, needs_all, &nd, 100000);
    cr_assert_eq(n, 0);
}

Test(ddmin, the_test_budget_stops_it_with_a_failing_result)
{
    size_t u[100], must[] = {42};
    size_t n = iota(u, 100);
    struct need nd = {must, 1, 0, 0};
    int64_t tests = kvsim_ddmin(u, &n, needs_all, &nd, 3);
    cr_assert_eq(tests, 3);
    cr_assert_lt(n, 100, "three tests halve twice");
    struct need check = {must, 1, 0, 0};
    cr_assert(needs_all(&check, u, n), "whatever it kept still fails");
}

/* ---- scenarios ------------------------------------------------------------------------------ */

static json_t *load(const char *rel)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", KVSIM_SOURCE_DIR, rel);
    json_error_t err;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    cr_assert_not_null(doc, "%s: %s", path, err.text);
    return doc;
}

Test(scenario, dropping_a_request_removes_it_everywhere)
{
    json_t *steps = json_loads(
        "[{\"op\":\"add\",\"id\":\"a\",\"prompt\":[1],\"max_tokens\":1},"
        " {\"op\":\"add\",\"id\":\"b\",\"prompt\":[2],\"max_tokens\":1},"
        " {\"op\":\"schedule\",\"expect\":{\"scheduled\":{\"a\":1,\"b\":1},\"new\":[\"a\",\"b\"],"
        "   \"total_scheduled\":2,\"blocked_on_offload\":\"b\"}},"
        " {\"op\":\"advance\",\"by_ns\":5},"
        " {\"op\":\"output\",\"sampled\":{\"a\":[5],\"b\":[6]},\"finished_recving\":[\"b\"]},"
        " {\"op\":\"abort\",\"id\":\"b\"},"
        " {\"op\":\"abort\",\"ids\":[\"b\"]},"
        " {\"op\":\"abort\",\"ids\":[\"a\",\"b\"]},"
        " {\"op\":\"kv_free\",\"id\":\"b\"}]",
        0, NULL);
    json_t *drop = json_pack("{s:b}", "b", 1);
    json_t *got = kvsim_scenario_drop_requests(steps, drop);
    json_t *want =
        json_loads("[{\"op\":\"add\",\"id\":\"a\",\"prompt\":[1],\"max_tokens\":1},"
                   " {\"op\":\"schedule\",\"expect\":{\"scheduled\":{\"a\":1},\"new\":[\"a\"],"
                   "   \"total_scheduled\":2}},"
                   " {\"op\":\"advance\",\"by_ns\":5},"
                   " {\"op\":\"output\",\"sampled\":{\"a\":[5]}},"
                   " {\"op\":\"abort\",\"ids\":[\"a\"]}]",
                   0, NULL);
    char *g = json_dumps(got, JSON_COMPACT);
    cr_assert(json_equal(got, want), "got %s", g);
    free(g);
    cr_assert_eq(json_array_size(steps), 9, "the input is not modified");
    json_decref(steps);
    json_decref(drop);
    json_decref(got);
    json_decref(want);
}

Test(runner, the_pinned_dead_end_fails_with_its_kind_and_shape)
{
    json_t *doc = load("tests/regressions/known-dead-end-priority-async-load.json");
    struct kvsim_conform_result res;
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), KVSIM_ESCENARIO);
    cr_assert_eq(res.verdict, KVSIM_CONFORM_FAIL);
    cr_assert_str_eq(res.kind, "dead_end");
    cr_assert_eq(res.step, 4);
    cr_assert_str_eq(res.op, "schedule");
    cr_assert(strstr(res.message, "active=3 free=4, head r2 (WAITING) needs 5 blocks"), "%s",
              res.message);
    /* Its structure, without sizes or names: r0 holds its finished load behind the head (still
     * WAITING_FOR_REMOTE_KVS: it is promoted when the loop reaches it, which it never does). */
    cr_assert_str_eq(res.shape, "policy=priority rule=alloc_free head=WAITING holds=no fits=no "
                                "running=no holders=WAITING_FOR_REMOTE_KVS (loaded)");
    /* ... which is the expected class of PRIORITY heads stranding finished loads. */
    const struct kvsim_soak_class *cls = kvsim_soak_classify(&res);
    cr_assert(cls && !strcmp(cls->name, "priority-head-strands-loads"), "%s",
              cls ? cls->name : "unexpected");
    /* Without the liveness rule the same steps pass: the rule is what sees it. */
    json_object_set_new(json_object_get(doc, "config"), "check_liveness", json_false());
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), 0, "%s", res.message);
    json_decref(doc);
}

Test(runner, check_invariants_fails_the_op_that_broke_one)
{
    json_t *doc = load("tests/soak/invariant-waiting-holds-blocks.json");
    struct kvsim_conform_result res;
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), KVSIM_ESCENARIO);
    cr_assert_str_eq(res.kind, "invariant:waiting_holds_no_blocks");
    cr_assert_eq(res.step, 10);
    cr_assert_str_eq(res.op, "kv_allocate");
    cr_assert(strstr(res.message, "state=WAITING") && strstr(res.message, "id='c'"), "%s",
              res.message);
    /* Off, nothing notices: the next schedule admits c over its stray blocks, and the
     * scheduler's own boundary checks see a consistent state. */
    json_object_set_new(json_object_get(doc, "config"), "check_invariants", json_false());
    json_object_set_new(json_object_get(doc, "config"), "check_liveness", json_false());
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), 0, "%s", res.message);
    json_decref(doc);
}

Test(runner, futile_preemptions_are_counted_and_bounded)
{
    json_t *off = load("tests/conformance/SC-39b-fenced-victim-no-guard.json");
    json_t *on = load("tests/conformance/SC-39a-fenced-victim-guard.json");
    struct kvsim_conform_result res;
    struct kvsim_conform_stats st;
    cr_assert_eq(kvsim_conform_run_json(off, NULL, &res, &st), 0);
    cr_assert_eq(st.futile_preemptions, 2, "R0 and R1 with deferred frees");
    cr_assert_eq(st.max_futile_in_one_schedule, 2);
    cr_assert_eq(st.zero_progress_schedules, 1);
    json_object_set_new(json_object_get(off, "config"), "max_futile_preemptions", json_integer(0));
    cr_assert_eq(kvsim_conform_run_json(off, NULL, &res, NULL), KVSIM_ESCENARIO);
    cr_assert_str_eq(res.kind, "futile_preemption");
    cr_assert_eq(res.step, 3);
    cr_assert(strstr(res.message, "preempted [R1,R0], 2 of them"), "%s", res.message);
    json_object_set_new(json_object_get(on, "config"), "max_futile_preemptions", json_integer(0));
    cr_assert_eq(kvsim_conform_run_json(on, NULL, &res, &st), 0, "%s", res.message);
    cr_assert_eq(st.futile_preemptions, 0);
    cr_assert_eq(st.preemptions, 1, "the guard preempts R1 once its free is immediate");
    json_decref(off);
    json_decref(on);
}

/* Every conformance scenario with the liveness and progress rules on (and the invariants after
 * every op where no KV-level op plays with a request's blocks): no false alarm. */
Test(runner, no_false_alarms_on_the_conformance_scenarios)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/conformance", KVSIM_SOURCE_DIR);
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        char rel[512];
        snprintf(rel, sizeof rel, "tests/conformance/%s", e->d_name);
        json_t *doc = load(rel);
        char *text = json_dumps(doc, 0);
        bool kv_level = strstr(text, "\"kv_allocate\"") != NULL;
        free(text);
        json_t *cfg = json_object_get(doc, "config");
        json_object_set_new(cfg, "check_liveness", json_true());
        json_object_set_new(cfg, "check_invariants", json_boolean(!kv_level));
        json_object_set_new(cfg, "max_futile_preemptions",
                            json_integer(strstr(rel, "SC-39b") ? 2 : 0));
        struct kvsim_conform_result res;
        int rc = kvsim_conform_run_json(doc, NULL, &res, NULL);
        /* SC-10b withholds a sampled token on purpose: the liveness rule refuses that. */
        if (strstr(rel, "SC-10b"))
            cr_assert(rc == KVSIM_ESCENARIO && !strcmp(res.kind, "error"), "%s: %s", rel,
                      res.message);
        /* OFF-03 runs the legacy partial allocation: the invariant check catches it at once. */
        else if (strstr(rel, "OFF-03"))
            cr_assert(rc == KVSIM_ESCENARIO &&
                          !strcmp(res.kind, "invariant:waiting_holds_no_blocks") && res.step == 7,
                      "%s: [%s] step %ld %s", rel, res.kind, res.step, res.message);
        else
            cr_assert_eq(rc, 0, "%s: [%s] %s", rel, res.kind, res.message);
        json_decref(doc);
        n++;
    }
    closedir(d);
    cr_assert_geq(n, 56);
}

Test(runner, a_lenient_run_records_a_strictly_identical_scenario)
{
    json_t *doc = load("tests/soak/soak-seed4770-dead-end.json");
    json_t *steps = json_object_get(doc, "steps");
    /* Drop every schedule's first output: strict runs would break on the shifted outputs. */
    json_t *cut = json_array();
    for (size_t i = 0; i < json_array_size(steps); i++)
        if (i % 7 != 5)
            json_array_append(cut, json_array_get(steps, i));
    json_object_set(doc, "steps", cut);
    struct kvsim_conform_result strict, lenient, replay;
    kvsim_conform_run_json(doc, NULL, &strict, NULL);
    cr_assert_str_eq(strict.kind, "error", "the cut scenario is not valid strictly");
    json_t *eff = json_array();
    struct kvsim_conform_options opt = {.lenient = true, .effective = eff};
    struct kvsim_conform_stats s1, s2;
    kvsim_conform_run_json(doc, &opt, &lenient, &s1);
    json_object_set(doc, "steps", eff);
    kvsim_conform_run_json(doc, NULL, &replay, &s2);
    cr_assert_eq(lenient.verdict, replay.verdict);
    cr_assert_str_eq(lenient.kind, replay.kind);
    if (replay.verdict) /* it fails at its last recorded step */
        cr_assert_eq(replay.step, (long)json_array_size(eff) - 1);
    cr_assert(!json_equal(eff, cut), "the recorded steps are the repaired ones");
    cr_assert_eq(s1.ops, s2.ops);
    cr_assert_eq(s1.transitions, s2.transitions);
    cr_assert_eq(s1.scheduled_tokens, s2.scheduled_tokens);
    json_decref(cut);
    json_decref(eff);
    json_decref(doc);
}

/* ---- the soak ------------------------------------------------------------------------------- */

Test(soak, a_seed_is_deterministic_and_its_scenario_replays_what_ran)
{
    for (uint64_t seed = 1; seed <= 40; seed++) {
        json_t *a, *b;
        struct kvsim_conform_result ra, rb, rr;
        struct kvsim_conform_stats sa, sb, sr;
        int ca = kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, NULL, &a, &ra, &sa);
        int cb = kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, NULL, &b, &rb, &sb);
        cr_assert_eq(ca, 0, "seed %llu: %s", (unsigned long long)seed, ra.message);
        cr_assert_eq(cb, ca);
        cr_assert(json_equal(a, b), "seed %llu builds the same scenario twice",
                  (unsigned long long)seed);
        cr_assert_eq(sa.transitions, sb.transitions);
        /* Through a file and back, as `kvsim conform` would read it. */
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        cr_assert_eq(kvsim_scenario_write(a, f), 0);
        fclose(f);
        json_error_t err;
        json_t *back = json_loads(text, JSON_REJECT_DUPLICATES, &err);
        cr_assert_not_null(back, "%s", err.text);
        cr_assert(json_equal(a, back), "the written file holds the same scenario");
        cr_assert_eq(kvsim_conform_run_json(back, NULL, &rr, &sr), 0, "%s", rr.message);
        cr_assert_eq(sr.ops, sa.ops);
        cr_assert_eq(sr.transitions, sa.transitions);
        cr_assert_eq(sr.scheduled_tokens, sa.scheduled_tokens);
        cr_assert_eq(sr.preemptions, sa.preemptions);
        free(text);
        json_decref(a);
        json_decref(b);
        json_decref(back);
    }
}

Test(soak, overrides_fix_a_dimension_and_leave_the_rest)
{
    struct kvsim_soak_overrides o = {0};
    char err[256];
    cr_assert_eq(kvsim_soak_parse_set(&o, "block_size=8", err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvsim_soak_parse_set(&o, "policy=priority", err, sizeof err), 0, "%s", err);
    cr_assert_neq(kvsim_soak_parse_set(&o, "blocksize=8", err, sizeof err), 0);
    cr_assert(strstr(err, "unknown dimension 'blocksize'"), "%s", err);
    cr_assert_neq(kvsim_soak_parse_set(&o, "block_size=0", err, sizeof err), 0);
    cr_assert(strstr(err, "'0' is not a valid value of block_size"), "%s", err);
    cr_assert_neq(kvsim_soak_parse_set(&o, "watermark=0.0005", err, sizeof err), 0);
    cr_assert_neq(kvsim_soak_parse_set(&o, "async_scheduling=yes", err, sizeof err), 0);
    for (uint64_t seed = 1; seed <= 10; seed++) {
        json_t *doc, *plain;
        struct kvsim_conform_result res;
        kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, &o, &doc, &res, NULL);
        kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, NULL, &plain, &res, NULL);
        json_t *cfg = json_object_get(doc, "config"), *pcfg = json_object_get(plain, "config");
        cr_assert_eq(json_integer_value(json_object_get(cfg, "block_size")), 8);
        cr_assert_str_eq(json_string_value(json_object_get(cfg, "policy")), "priority");
        cr_assert(json_equal(json_object_get(cfg, "async_scheduling"),
                             json_object_get(pcfg, "async_scheduling")),
                  "other dimensions draw as without the override");
        cr_assert(strstr(json_string_value(json_object_get(doc, "source")),
                         "--set block_size=8 --set policy=priority"));
        json_decref(doc);
        json_decref(plain);
    }
}

/* ---- offload tiers and virtual time (stage 2) ------------------------------------------------ */

/* Runs a scenario given as JSON text; returns kvsim_conform_run_json's verdict. */
static int run_text(const char *text, const struct kvsim_conform_options *opt,
                    struct kvsim_conform_result *res, struct kvsim_conform_stats *st)
{
    json_error_t err;
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    cr_assert_not_null(doc, "%s", err.text);
    int rc = kvsim_conform_run_json(doc, opt, res, st);
    json_decref(doc);
    return rc;
}

#define TIERS_CFG                                                                                  \
    "\"config\":{\"block_size\":4,\"num_blocks\":9,\"max_num_batched_tokens\":64,"                 \
    "\"max_model_len\":64,\"check_invariants\":true,\"check_liveness\":true,"                      \
    "\"offload\":{\"g2_blocks\":64,\"block_bytes\":1000,\"g1_g2_bytes_per_s\":1000000,"            \
    "\"permits\":1,\"max_blocks\":2}}"

Test(offload, advance_moves_virtual_time_and_applies_transfers_that_end_by_then)
{
    struct kvsim_conform_result res;
    struct kvsim_conform_stats st;
    int rc = run_text(
        "{\"name\":\"t\"," TIERS_CFG ",\"steps\":["
        "{\"op\":\"add\",\"id\":\"a\",\"prompt\":{\"range\":[100,116]},\"max_tokens\":1},"
        "{\"op\":\"schedule\",\"expect\":{\"pending_transfers\":2,\"now_ns\":0}},"
        "{\"op\":\"output\",\"sampled\":{\"a\":[9]},\"expect\":{\"held_blocks\":4}},"
        "{\"op\":\"advance\",\"by_ns\":1999999,\"expect\":{\"held_blocks\":4,\"now_ns\":1999999}},"
        "{\"op\":\"advance\",\"by_ns\":1,\"expect\":{\"held_blocks\":2,\"pending_transfers\":1}},"
        "{\"op\":\"advance\",\"to_ns\":4000000,\"expect\":{\"held_blocks\":0,\"free_blocks\":8,"
        "  \"offload\":{\"written_g2\":4,\"g2_resident\":4,\"g1_g2_batches\":2}}},"
        "{\"op\":\"advance\",\"to_ns\":4000000,\"expect\":{\"now_ns\":4000000}}]}",
        NULL, &res, &st);
    cr_assert_eq(rc, 0, "[%s] %s", res.kind, res.message);
    cr_assert_eq(st.offload_runs, 1);
    cr_assert_eq(st.advances, 4);
    cr_assert_eq(st.virtual_ns, 4000000);
    cr_assert_eq(st.written_g2, 4);
    cr_assert_eq(st.max_held_blocks, 4);
    /* Time never runs backwards: strictly an error, leniently the step is dropped. */
    const char *back = "{\"name\":\"t\",\"steps\":[{\"op\":\"advance\",\"to_ns\":50},"
                       "{\"op\":\"advance\",\"to_ns\":49},"
                       "{\"op\":\"check\",\"expect\":{\"now_ns\":50}}]}";
    cr_assert_eq(run_text(back, NULL, &res, NULL), KVSIM_ESCENARIO);
    cr_assert_str_eq(res.kind, "error");
    cr_assert_eq(res.step, 1);
    cr_assert(strstr(res.message, "key 'to_ns': 49 is before now (50)"), "%s", res.message);
    json_t *eff = json_array();
    struct kvsim_conform_options opt = {.lenient = true, .effective = eff};
    cr_assert_eq(run_text(back, &opt, &res, NULL), 0, "%s", res.message);
    cr_assert_eq(json_array_size(eff), 2, "the moot advance is not recorded");
    json_decref(eff);
    /* Without tiers, advance only moves the clock; the offload map needs tiers. */
    cr_assert_eq(run_text("{\"name\":\"t\",\"steps\":[{\"op\":\"advance\",\"by_ns\":7},"
                          "{\"op\":\"check\",\"expect\":{\"now_ns\":7,\"held_blocks\":0,"
                          "\"pending_transfers\":0,\"blocked_on_offload\":null}}]}",
                          NULL, &res, NULL),
                 0, "%s", res.message);
    cr_assert_eq(run_text("{\"name\":\"t\",\"steps\":[{\"op\":\"check\",\"expect\":{\"offload\":"
                          "{\"loads\":0}}}]}",
                          NULL, &res, NULL),
                 KVSIM_ESCENARIO);
    cr_assert(strstr(res.message, "only observable with offload tiers"), "%s", res.message);
}

Test(offload, the_format_is_strict_about_the_offload_object_and_advance)
{
    static const struct {
        const char *cfg_or_step, *message;
    } bad[] = {
        {"\"config\":{\"offload\":{}},\"steps\":[]", "offload: missing key 'g2_blocks'"},
        {"\"config\":{\"offload\":{\"g2_blocks\":0}},\"steps\":[]",
         "offload: key 'g2_blocks' must be an integer in [1, "},
        {"\"config\":{\"offload\":{\"g2_blocks\":4,\"max_blocks\":65}},\"steps\":[]",
         "key 'max_blocks' must be an integer in [1, 64]"},
        {"\"config\":{\"offload\":{\"g2_blocks\":4,\"fail_rate\":1.5}},\"steps\":[]",
         "key 'fail_rate' must be a number in [0, 1]"},
        {"\"config\":{\"offload\":{\"g2_blocks\":4,\"g1_g2_bytes_per_s\":1.5}},\"steps\":[]",
         "key 'g1_g2_bytes_per_s' must be an integer"},
        {"\"config\":{\"offload\":{\"g2_blocks\":4,\"g2\":1}},\"steps\":[]",
         "config: offload: unknown key 'g2'"},
        {"\"config\":{\"offload\":4},\"steps\":[]", "key 'offload' must be an object"},
        {"\"config\":{\"legacy_partial_alloc\":1},\"steps\":[]",
         "key 'legacy_partial_alloc' must be a boolean"},
        {"\"steps\":[{\"op\":\"advance\"}]", "give exactly one of 'to_ns' and 'by_ns'"},
        {"\"steps\":[{\"op\":\"advance\",\"to_ns\":1,\"by_ns\":1}]",
         "give exactly one of 'to_ns' and 'by_ns'"},
        {"\"steps\":[{\"op\":\"advance\",\"by_ns\":-1}]", "key 'by_ns' has the wrong type"},
        {"\"steps\":[{\"op\":\"check\",\"expect\":{\"offload\":{\"nope\":1}}}]",
         "key 'offload': unknown field 'nope'"},
        {"\"steps\":[{\"op\":\"check\",\"expect\":{\"blocked_on_offload\":3}}]",
         "key 'blocked_on_offload' has the wrong type"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "{\"name\":\"bad\",%s}", bad[i].cfg_or_step);
        struct kvsim_conform_result res;
        cr_assert_eq(run_text(text, NULL, &res, NULL), -EINVAL, "%s", text);
        cr_assert_eq(res.verdict, KVSIM_CONFORM_INVALID, "%s: %s", text, res.message);
        cr_assert(strstr(res.message, bad[i].message), "%s: got '%s'", text, res.message);
    }
}

/* OFF-01 without the advance that ends b's onboarding: the schedules after it park nothing new
 * and schedule nothing, but a transfer is pending: not a dead end. Once the transfer is gone (the
 * tiers destroyed) the same state would be one; a report of the onboarding through
 * finished_recving is refused: it ends with its transfer. */
Test(offload, a_parked_onboarding_with_a_pending_transfer_is_not_a_dead_end)
{
    json_t *doc = load("tests/conformance/OFF-01-write-through-and-onboarding.json");
    json_t *steps = json_object_get(doc, "steps");
    json_t *cut = json_array();
    for (size_t i = 0; i < 19; i++) /* up to the second schedule after b parked */
        json_array_append(cut, json_array_get(steps, i));
    json_array_append_new(cut, json_pack("{s:s}", "op", "output"));
    json_array_append_new(cut, json_pack("{s:s}", "op", "schedule"));
    json_object_set_new(doc, "steps", cut);
    struct kvsim_conform_result res;
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), 0, "[%s] %s", res.kind,
                 res.message);
    json_array_append_new(cut, json_pack("{s:s,s:[s]}", "op", "output", "finished_recving", "b"));
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), KVSIM_ESCENARIO);
    cr_assert_str_eq(res.kind, "error");
    cr_assert(strstr(res.message, "'b' is loading from the offload tiers"), "%s", res.message);
    json_decref(doc);
}

/* Nothing runs and the head is BLOCKED_ON_OFFLOAD: the schedule does nothing, yet the copy that
 * holds the capacity will end. Not a dead end; after the advance the head is admitted. */
Test(offload, a_head_blocked_on_a_copy_is_not_a_dead_end)
{
    struct kvsim_conform_result res;
    int rc = run_text(
        "{\"name\":\"t\"," TIERS_CFG ",\"steps\":["
        "{\"op\":\"add\",\"id\":\"a\",\"prompt\":{\"range\":[100,116]},\"max_tokens\":1},"
        "{\"op\":\"schedule\"},{\"op\":\"output\",\"sampled\":{\"a\":[9]}},"
        "{\"op\":\"add\",\"id\":\"b\",\"prompt\":{\"range\":[500,520]},\"max_tokens\":1},"
        "{\"op\":\"schedule\",\"expect\":{\"scheduled\":{},\"preempted\":[],"
        "  \"blocked_on_offload\":\"b\",\"held_blocks\":4,\"free_blocks\":4}},"
        "{\"op\":\"output\"},"
        "{\"op\":\"advance\",\"to_ns\":2000000},"
        "{\"op\":\"schedule\",\"expect\":{\"scheduled\":{\"b\":20},\"blocked_on_offload\":null}}]}",
        NULL, &res, NULL);
    cr_assert_eq(rc, 0, "[%s] %s", res.kind, res.message);
}

Test(offload, the_legacy_regression_fails_with_its_shape_and_passes_transactionally)
{
    json_t *doc = load("tests/regressions/legacy/legacy-partial-alloc-dead-end.json");
    struct kvsim_conform_result res;
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), KVSIM_ESCENARIO);
    cr_assert_str_eq(res.kind, "dead_end");
    cr_assert_eq(res.step, 9);
    cr_assert(
        strstr(res.message, "active=27 free=4, head r4 (PREEMPTED) needs 7 blocks (holds 0)") &&
            strstr(res.message, "r5 (WAITING) holds 27 blocks without a computed token"),
        "%s", res.message);
    cr_assert_str_eq(res.shape,
                     "policy=fcfs rule=alloc_free head=PREEMPTED holds=no fits=no running=no "
                     "holders=WAITING (none loaded)",
                     "%s", res.shape);
    /* The blocks behind the head are not a load's: no expected class matches (issue 41). */
    cr_assert_null(kvsim_soak_classify(&res));
    /* With every invariant check on, the partial allocation itself is what fails. */
    json_t *cfg = json_object_get(doc, "config");
    json_object_set_new(cfg, "check_invariants", json_true());
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), KVSIM_ESCENARIO);
    cr_assert_str_eq(res.kind, "invariant:waiting_holds_no_blocks", "%s", res.message);
    cr_assert_eq(res.step, 7, "the schedule that committed the partial allocation");
    cr_assert(strstr(res.message, "id='r5'"), "%s", res.message);
    /* The transactional allocation: the workload completes (the outputs replayed leniently). */
    json_object_set_new(cfg, "legacy_partial_alloc", json_false());
    struct kvsim_conform_options opt = {.lenient = true};
    cr_assert_eq(kvsim_conform_run_json(doc, &opt, &res, NULL), 0, "[%s] %s", res.kind,
                 res.message);
    json_decref(doc);
}

Test(offload, soak_seeds_with_offload_are_deterministic_and_replay_what_ran)
{
    struct kvsim_soak_overrides o = {0};
    char err[256];
    cr_assert_eq(kvsim_soak_parse_set(&o, "offload=true", err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvsim_soak_parse_set(&o, "policy=fcfs", err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvsim_soak_parse_set(&o, "copy_pct=800", err, sizeof err), 0, "%s", err);
    uint64_t advances = 0, blocked = 0;
    for (uint64_t seed = 1; seed <= 30; seed++) {
        json_t *a, *b;
        struct kvsim_conform_result ra, rb, rr;
        struct kvsim_conform_stats sa, sb, sr;
        cr_assert_eq(kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, &o, &a, &ra, &sa), 0,
                     "seed %llu: [%s] %s", (unsigned long long)seed, ra.kind, ra.message);
        cr_assert_eq(kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, &o, &b, &rb, &sb), 0);
        cr_assert(json_equal(a, b), "seed %llu builds the same scenario twice",
                  (unsigned long long)seed);
        cr_assert_not_null(json_object_get(json_object_get(a, "config"), "offload"));
        cr_assert_eq(kvsim_conform_run_json(a, NULL, &rr, &sr), 0, "%s", rr.message);
        cr_assert_eq(sr.transitions, sa.transitions);
        cr_assert_eq(sr.advances, sa.advances);
        cr_assert_eq(sr.virtual_ns, sa.virtual_ns);
        cr_assert_eq(sr.blocked_on_offload, sa.blocked_on_offload);
        advances += sa.advances;
        blocked += sa.blocked_on_offload;
        json_decref(a);
        json_decref(b);
    }
    cr_assert_gt(advances, 0, "virtual time moves");
    cr_assert_gt(blocked, 0, "copies slower than steps leave allocations BLOCKED_ON_OFFLOAD");
}

/* A seed without offload builds the scenario it built before the offload dimensions existed:
 * no advance op, no offload key, no legacy key. */
Test(offload, a_seed_without_offload_moves_no_time)
{
    struct kvsim_soak_overrides o = {0};
    char err[256];
    cr_assert_eq(kvsim_soak_parse_set(&o, "offload=false", err, sizeof err), 0, "%s", err);
    for (uint64_t seed = 1; seed <= 20; seed++) {
        json_t *doc;
        struct kvsim_conform_result res;
        cr_assert_eq(kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, &o, &doc, &res, NULL), 0);
        json_t *cfg = json_object_get(doc, "config");
        cr_assert_null(json_object_get(cfg, "offload"));
        cr_assert_null(json_object_get(cfg, "legacy_partial_alloc"));
        char *text = json_dumps(json_object_get(doc, "steps"), 0);
        cr_assert_null(strstr(text, "\"advance\""), "seed %llu", (unsigned long long)seed);
        free(text);
        json_decref(doc);
    }
}

Test(offload, the_legacy_seed_fails_as_the_checks_say_and_passes_without_legacy)
{
    struct kvsim_soak_overrides o = {0};
    char err[256];
    cr_assert_eq(kvsim_soak_parse_set(&o, "legacy_partial_alloc=1", err, sizeof err), 0, "%s", err);
    json_t *doc;
    struct kvsim_conform_result res;
    cr_assert_eq(kvsim_soak_run_seed(37, KVSIM_SOAK_SMALL, &o, &doc, &res, NULL), 1);
    cr_assert_str_eq(res.kind, "invariant:waiting_holds_no_blocks", "%s", res.message);
    cr_assert(
        json_is_true(json_object_get(json_object_get(doc, "config"), "legacy_partial_alloc")));
    json_decref(doc);
    cr_assert_eq(kvsim_soak_parse_checks(&o, "liveness", err, sizeof err), 0, "%s", err);
    cr_assert_eq(o.checks_off, KVSIM_SOAK_CHECK_INVARIANTS | KVSIM_SOAK_CHECK_PROGRESS);
    cr_assert_eq(kvsim_soak_run_seed(37, KVSIM_SOAK_SMALL, &o, &doc, &res, NULL), 1);
    cr_assert_str_eq(res.kind, "dead_end", "%s", res.message);
    cr_assert(strstr(res.message, "without a computed token"), "%s", res.message);
    json_t *cfg = json_object_get(doc, "config");
    cr_assert_null(json_object_get(cfg, "check_invariants"));
    cr_assert(json_is_false(json_object_get(cfg, "scheduler_checks")));
    cr_assert_null(json_object_get(cfg, "max_futile_preemptions"));
    cr_assert(strstr(json_string_value(json_object_get(doc, "source")),
                     "--set legacy_partial_alloc=true --checks liveness"));
    json_decref(doc);
    o.set[KVSIM_DIM_LEGACY_PARTIAL_ALLOC] = false;
    cr_assert_eq(kvsim_soak_run_seed(37, KVSIM_SOAK_SMALL, &o, &doc, &res, NULL), 0, "%s",
                 res.message);
    json_decref(doc);
    o.checks_off = 0;
    cr_assert_eq(kvsim_soak_run_seed(37, KVSIM_SOAK_SMALL, &o, &doc, &res, NULL), 0, "%s",
                 res.message);
    json_decref(doc);
}

Test(offload, checks_lists_parse_strictly)
{
    struct kvsim_soak_overrides o = {0};
    char err[256];
    cr_assert_eq(kvsim_soak_parse_checks(&o, "invariants,progress", err, sizeof err), 0);
    cr_assert_eq(o.checks_off, KVSIM_SOAK_CHECK_LIVENESS);
    cr_assert_eq(kvsim_soak_parse_checks(&o, "none", err, sizeof err), 0);
    cr_assert_eq(o.checks_off, KVSIM_SOAK_CHECK_ALL);
    cr_assert_eq(kvsim_soak_parse_checks(&o, "all", err, sizeof err), 0);
    cr_assert_eq(o.checks_off, 0);
    cr_assert_neq(kvsim_soak_parse_checks(&o, "liveness,", err, sizeof err), 0);
    cr_assert(strstr(err, "'' is not all"), "%s", err);
    cr_assert_neq(kvsim_soak_parse_checks(&o, "invariant", err, sizeof err), 0);
    cr_assert(strstr(err, "'invariant' is not all, none, invariants, liveness or progress"), "%s",
              err);
}

/* ---- two engines: the disaggregated handoff (issue 11) -----------------------------------------
 */

#define DIS_CFG(handoff)                                                                           \
    "\"config\":{\"block_size\":4,\"max_num_batched_tokens\":64,\"max_model_len\":32,"             \
    "\"check_invariants\":true,\"check_liveness\":true,\"prefill\":{\"num_blocks\":20},"           \
    "\"decode\":{\"num_blocks\":3},\"handoff\":" handoff "}"

/* A decode that can never be admitted (12 tokens, 2 decode blocks): with no abort timeout its
 * pin strands for good and the decode engine is at a dead end; with one, the expiry is a
 * wake-up, and it frees the source and cancels the decode. */
Test(disagg, a_decode_that_never_fits_is_a_dead_end_unless_its_pin_can_expire)
{
    static const char *const steps =
        "\"steps\":[{\"op\":\"add\",\"id\":\"a\",\"prompt\":{\"range\":[0,12]},\"max_tokens\":2},"
        "{\"op\":\"schedule\",\"engine\":\"prefill\"},"
        "{\"op\":\"output\",\"engine\":\"prefill\",\"sampled\":{\"a\":[7]}},"
        "{\"op\":\"schedule\",\"engine\":\"prefill\"},"
        "{\"op\":\"route\",\"id\":\"a\"},"
        "{\"op\":\"schedule\",\"engine\":\"decode\"},"
        "{\"op\":\"advance\",\"to_ns\":5000,\"expect\":{\"finished\":[\"a\"],\"pins\":0,"
        "\"handoff\":{\"a\":{\"state\":\"aborted\",\"end_ns\":5000}}}}]}";
    char text[2048];
    struct kvsim_conform_result res;
    struct kvsim_conform_stats st;
    snprintf(text, sizeof text, "{\"name\":\"t\"," DIS_CFG("{\"abort_timeout_ns\":0}") ",%s",
             steps);
    cr_assert_eq(run_text(text, NULL, &res, NULL), KVSIM_ESCENARIO);
    cr_assert_str_eq(res.kind, "dead_end", "%s", res.message);
    cr_assert(strncmp(res.shape, "disagg policy=", 14) == 0, "%s", res.shape);
    cr_assert(res.dead_end.found && res.dead_end.disagg && res.dead_end.decode_engine);
    /* Nothing holds blocks behind the head: a decode that can never fit is no expected class. */
    cr_assert_eq(res.dead_end.holders, 0);
    cr_assert_null(kvsim_soak_classify(&res));
    cr_assert_eq(res.step, 5, "the decode schedule, not the prefill's (its pin awaits a route)");
    cr_assert(strstr(res.message,
                     "dead end: decode engine: unfinished=1 active=0 free=2 pinned=0, head a "
                     "(WAITING) needs 3 blocks (holds 0); nothing is in flight, no transfer is "
                     "pending and no pin can expire or be released"),
              "%s", res.message);
    snprintf(text, sizeof text, "{\"name\":\"t\"," DIS_CFG("{\"abort_timeout_ns\":5000}") ",%s",
             steps);
    cr_assert_eq(run_text(text, NULL, &res, &st), 0, "[%s] %s", res.kind, res.message);
    cr_assert_eq(st.disagg_runs, 1);
    cr_assert_eq(st.pins, 1);
    cr_assert_eq(st.routes, 1);
    cr_assert_eq(st.expired_pins, 1);
    cr_assert_eq(st.aborted_handoffs, 1);
    cr_assert_eq(st.reservations, 0);
    cr_assert_eq(st.max_pinned_blocks, 3);
}

/* The two-engine form's strictness: each misuse names its step and key. */
Test(disagg, the_two_engine_form_is_strict)
{
    static const struct {
        const char *cfg, *steps, *msg;
    } cases[] = {
        {"{\"prefill\":{}}", "[]", "config: the two-engine form needs both 'prefill' and 'decode'"},
        {"{\"prefill\":{},\"decode\":{\"offload\":1}}", "[]",
         "config: decode: unknown key 'offload'"},
        {"{\"prefill\":{},\"decode\":{},\"handoff\":{\"latency_ns\":-1}}", "[]",
         "config: handoff: key 'latency_ns' must be an integer in [0, 2^50]"},
        {"{\"prefill\":{},\"decode\":{}}", "[{\"op\":\"output\"}]",
         "step 0 (output): missing key 'engine'"},
        {"{\"prefill\":{},\"decode\":{}}", "[{\"op\":\"check\",\"expect\":{\"free_blocks\":1}}]",
         "step 0 (check): key 'free_blocks' is observed on one engine"},
        {"{\"prefill\":{},\"decode\":{}}",
         "[{\"op\":\"check\",\"expect\":{\"decode\":{\"handoff\":{}}}}]",
         "step 0 (check): decode: key 'handoff' is not an engine's"},
        {"{\"prefill\":{},\"decode\":{}}",
         "[{\"op\":\"check\",\"expect\":{\"handoff\":{\"a\":{\"state\":\"aborted\",\"when\":1}}}}]",
         "key 'handoff': 'a': unknown field 'when'"},
        {"{\"prefill\":{},\"decode\":{}}",
         "[{\"op\":\"check\",\"expect\":{\"prefill\":{\"kv_events\":{\"stores\":1}}}}]",
         "key 'kv_events': unknown field 'stores'"},
        {"{}", "[{\"op\":\"check\",\"expect\":{\"open_handoffs\":0}}]",
         "step 0 (check): key 'open_handoffs' needs the two-engine form"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "{\"name\":\"t\",\"config\":%s,\"steps\":%s}", cases[i].cfg,
                 cases[i].steps);
        struct kvsim_conform_result res;
        cr_assert_eq(run_text(text, NULL, &res, NULL), -EINVAL, "%s", text);
        cr_assert_eq(res.verdict, KVSIM_CONFORM_INVALID);
        cr_assert(strstr(res.message, cases[i].msg), "%s: %s", text, res.message);
    }
}

/* What the DIS scenarios did: a reading of the runner's statistics. */
Test(disagg, the_failure_matrix_scenarios_count_their_facts)
{
    json_t *doc = load("tests/conformance/DIS-07b-expiry-at-every-stage.json");
    struct kvsim_conform_result res;
    struct kvsim_conform_stats st;
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, &st), 0, "%s", res.message);
    cr_assert_eq(st.handoffs, 4);
    cr_assert_eq(st.pins, 4);
    cr_assert_eq(st.routes, 3);
    cr_assert_eq(st.late_routes, 1);
    cr_assert_eq(st.reservations, 2);
    cr_assert_eq(st.expired_pins, 4);
    cr_assert_eq(st.aborted_handoffs, 4);
    cr_assert_eq(st.completed_handoffs, 0);
    json_decref(doc);
    doc = load("tests/conformance/DIS-02b-pin-duration-grows-with-decode-admission-delay.json");
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, &st), 0, "%s", res.message);
    cr_assert_eq(st.completed_handoffs, 3);
    cr_assert_eq(st.transferred_tokens, 24);
    cr_assert_eq(st.max_pinned_blocks, 6);
    cr_assert_eq(st.virtual_ns, 27000);
    json_decref(doc);
}

/* A lenient run of a two-engine scenario with outputs removed records what ran, which replays
 * strictly the same way (the minimizer's contract). */
Test(disagg, a_lenient_two_engine_run_records_a_strictly_identical_scenario)
{
    json_t *doc = load("tests/conformance/DIS-11-drain-both-pools-every-handoff-final.json");
    json_t *steps = json_object_get(doc, "steps"), *cut = json_array();
    for (size_t i = 0; i < json_array_size(steps); i++) {
        json_t *st = json_deep_copy(json_array_get(steps, i));
        json_object_del(st, "expect");
        if (!strcmp(json_string_value(json_object_get(st, "op")), "check"))
            json_object_set_new(st, "expect", json_object());
        if (i != 5 && i != 12) /* the prefill's output (no pin: the routes go) and an advance */
            json_array_append_new(cut, st);
        else
            json_decref(st);
    }
    size_t ncut = json_array_size(cut);
    json_object_set_new(doc, "steps", cut);
    json_t *eff = json_array();
    struct kvsim_conform_options opt = {.lenient = true, .effective = eff};
    struct kvsim_conform_result lenient, replay;
    struct kvsim_conform_stats s1, s2;
    kvsim_conform_run_json(doc, &opt, &lenient, &s1);
    json_object_set(doc, "steps", eff);
    kvsim_conform_run_json(doc, NULL, &replay, &s2);
    cr_assert_eq(lenient.verdict, replay.verdict, "%s / %s", lenient.message, replay.message);
    cr_assert_str_eq(lenient.kind, replay.kind);
    cr_assert_eq(json_array_size(eff), ncut - 2, "the two refused routes were dropped");
    cr_assert_eq(replay.verdict, KVSIM_CONFORM_PASS, "%s", replay.message);
    cr_assert_eq(s1.ops, s2.ops);
    cr_assert_eq(s1.transitions, s2.transitions);
    cr_assert_eq(s1.pins, s2.pins);
    json_decref(eff);
    json_decref(doc);
}

/* Removing a request from a two-engine scenario removes its route and its ids in the engines'
 * expectations, the handoff map and the ignored / rejected lists. */
Test(disagg, dropping_a_request_removes_it_from_both_engines_and_its_handoff)
{
    json_error_t err;
    json_t *steps =
        json_loads("[{\"op\":\"add\",\"id\":\"a\",\"prompt\":[1],\"max_tokens\":1},"
                   "{\"op\":\"route\",\"id\":\"a\"},"
                   "{\"op\":\"advance\",\"to_ns\":1,\"expect\":{\"ignored\":[\"a\",\"b\"],"
                   "\"rejected\":[\"a\"],"
                   "\"handoff\":{\"a\":\"aborted\",\"b\":\"completed\"},\"finished\":[\"a\"],"
                   "\"decode\":{\"status\":{\"a\":\"WAITING\"},\"waiting\":[\"a\",\"b\"]},"
                   "\"prefill\":{\"running\":[\"a\"]}}}]",
                   0, &err);
    cr_assert_not_null(steps, "%s", err.text);
    json_t *drop = json_pack("{s:b}", "a", 1);
    json_t *got = kvsim_scenario_drop_requests(steps, drop);
    json_t *want = json_loads("[{\"op\":\"advance\",\"to_ns\":1,\"expect\":{\"ignored\":[\"b\"],"
                              "\"rejected\":[],\"handoff\":{\"b\":\"completed\"},\"finished\":[],"
                              "\"decode\":{\"status\":{},\"waiting\":[\"b\"]},"
                              "\"prefill\":{\"running\":[]}}}]",
                              0, &err);
    cr_assert(json_equal(got, want), "%s", json_dumps(got, 0));
    json_decref(steps);
    json_decref(drop);
    json_decref(got);
    json_decref(want);
}

static struct kvsim_soak_overrides disagg_overrides(void)
{
    struct kvsim_soak_overrides o = {0};
    char err[256];
    cr_assert_eq(kvsim_soak_parse_set(&o, "disagg=true", err, sizeof err), 0, "%s", err);
    return o;
}

/* A two-engine seed is deterministic, its file replays exactly what ran, and over the seeds
 * every part of the handoff happens: pins, routes, reservations, completions, expiries, client
 * cancels, late routes, the immediate-release what-if. */
Test(disagg, two_engine_seeds_are_deterministic_replay_what_ran_and_reach_every_state)
{
    struct kvsim_soak_overrides o = disagg_overrides();
    struct kvsim_conform_stats total = {0};
    uint64_t immediate = 0, never = 0;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        json_t *a, *b;
        struct kvsim_conform_result ra, rb, rr;
        struct kvsim_conform_stats sa, sb, sr;
        cr_assert_eq(kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, &o, &a, &ra, &sa), 0,
                     "seed %llu: [%s] %s", (unsigned long long)seed, ra.kind, ra.message);
        json_t *cfg = json_object_get(a, "config");
        json_t *h = json_object_get(cfg, "handoff");
        cr_assert_not_null(json_object_get(cfg, "prefill"));
        cr_assert_not_null(json_object_get(cfg, "decode"));
        cr_assert_null(json_object_get(cfg, "offload"));
        cr_assert_null(json_object_get(cfg, "num_blocks"), "each engine has its own");
        immediate += !strcmp(json_string_value(json_object_get(h, "release")), "immediate");
        never += json_integer_value(json_object_get(h, "abort_timeout_ns")) == 0;
        if (seed <= 40) {
            cr_assert_eq(kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, &o, &b, &rb, &sb), 0);
            cr_assert(json_equal(a, b), "seed %llu builds the same scenario twice",
                      (unsigned long long)seed);
            json_decref(b);
            char *text = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&text, &len);
            cr_assert_eq(kvsim_scenario_write(a, f), 0);
            fclose(f);
            json_error_t err;
            json_t *back = json_loads(text, JSON_REJECT_DUPLICATES, &err);
            cr_assert_not_null(back, "%s", err.text);
            cr_assert_eq(kvsim_conform_run_json(back, NULL, &rr, &sr), 0, "%s", rr.message);
            cr_assert_eq(sr.transitions, sa.transitions);
            cr_assert_eq(sr.virtual_ns, sa.virtual_ns);
            cr_assert_eq(sr.completed_handoffs, sa.completed_handoffs);
            cr_assert_eq(sr.expired_pins, sa.expired_pins);
            free(text);
            json_decref(back);
        }
        kvsim_conform_stats_add(&total, &sa);
        json_decref(a);
    }
    cr_assert_eq(total.disagg_runs, 200);
    cr_assert_gt(immediate, 0);
    cr_assert_gt(never, 0);
    cr_assert_gt(total.pins, 0);
    cr_assert_gt(total.routes, 0);
    cr_assert_gt(total.reservations, 0);
    cr_assert_gt(total.completed_handoffs, 0);
    cr_assert_gt(total.expired_pins, 0);
    cr_assert_gt(total.aborted_handoffs, total.expired_pins, "client cancels too");
    cr_assert_gt(total.late_routes, 0);
    cr_assert_gt(total.unpinned_prefills, 0, "prompts shorter than a block pin nothing");
    cr_assert_lt(total.unpinned_prefills, total.pins);
    cr_assert_gt(total.max_pinned_blocks, 0);
    cr_assert_gt(total.advances, 0);
}

/* The two-engine dimensions draw from their own stream: with --set disagg=true a seed's other
 * dimensions come out as without it (the engine keys of its config are the same, but for the
 * pools it replaces), and a seed without it builds exactly what it built before. */
Test(disagg, the_dimension_leaves_every_other_dimension_alone)
{
    struct kvsim_soak_overrides o = disagg_overrides();
    for (uint64_t seed = 1; seed <= 30; seed++) {
        json_t *d, *plain;
        struct kvsim_conform_result res;
        kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, &o, &d, &res, NULL);
        kvsim_soak_run_seed(seed, KVSIM_SOAK_SMALL, NULL, &plain, &res, NULL);
        json_t *cfg = json_object_get(d, "config"), *pcfg = json_object_get(plain, "config");
        static const char *const same[] = {"block_size",
                                           "max_num_seqs",
                                           "enable_chunked_prefill",
                                           "enable_prefix_caching",
                                           "long_prefill_token_threshold",
                                           "scheduler_reserve_full_isl",
                                           "watermark",
                                           "async_scheduling",
                                           "defer_block_free",
                                           "preempted_victim_guard"};
        for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
            cr_assert(json_equal(json_object_get(cfg, same[k]), json_object_get(pcfg, same[k])),
                      "seed %llu: %s", (unsigned long long)seed, same[k]);
        cr_assert_null(json_object_get(pcfg, "prefill"));
        cr_assert_null(json_object_get(pcfg, "handoff"));
        char *text = json_dumps(json_object_get(plain, "steps"), 0);
        cr_assert_null(strstr(text, "\"engine\""), "seed %llu", (unsigned long long)seed);
        cr_assert_null(strstr(text, "\"route\""), "seed %llu", (unsigned long long)seed);
        free(text);
        json_decref(d);
        json_decref(plain);
    }
}

/* The two-engine soak's finding (docs/soak.md): a decode of a one-token prompt loads the whole
 * prompt, its promotion leaves it no computed token, and when its admission then fails it waits
 * holding the loaded block, as vLLM's request does: the checker accepts it. */
Test(disagg, a_one_token_decode_keeps_its_loaded_block)
{
    json_t *doc = load("tests/regressions/dis-one-token-decode-keeps-its-loaded-block.json");
    struct kvsim_conform_result res;
    cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), 0, "%s", res.message);
    json_decref(doc);
    /* Both matrices may draw one-token prompts; an override fixes it. */
    struct kvsim_soak_overrides o = disagg_overrides();
    char err[256];
    cr_assert_eq(kvsim_soak_parse_set(&o, "one_token_prompts=true", err, sizeof err), 0, "%s", err);
    cr_assert_neq(kvsim_soak_parse_set(&o, "abort_timeout_steps=never", err, sizeof err), 0);
    cr_assert(strstr(err, "off or a non-negative integer"), "%s", err);
}

/* ---- issue 41: the expected classes of soak dead ends -----------------------------------------
 */

static const char *class_of(const struct kvsim_dead_end *d)
{
    struct kvsim_conform_result res = {.verdict = KVSIM_CONFORM_FAIL, .dead_end = *d};
    const struct kvsim_soak_class *c = kvsim_soak_classify(&res);
    return c ? c->name : NULL;
}

/* The PRIORITY form of the minimized seed 25: a PREEMPTED head refused for free blocks, one
 * parked load holding blocks behind it. */
static struct kvsim_dead_end priority_stranded(void)
{
    return (struct kvsim_dead_end){.found = true,
                                   .priority = true,
                                   .rule = SCHED_STOP_ALLOC_FREE,
                                   .head_status = SCHED_PREEMPTED,
                                   .holder_states = 1u << SCHED_WAITING_FOR_REMOTE_KVS,
                                   .holders = 1,
                                   .holders_loaded = 1,
                                   .loads_onboarding = true};
}

Test(soak_classes, each_signature_matches_its_structure)
{
    struct kvsim_dead_end d = priority_stranded();
    cr_assert_str_eq(class_of(&d), "priority-head-strands-loads");
    d.rule = SCHED_STOP_ALLOC_RESERVED;
    cr_assert_str_eq(class_of(&d), "priority-reservation-strands-loads");
    d = priority_stranded();
    d.priority = false;
    cr_assert_null(class_of(&d), "FCFS needs the head in the skipped queue ahead of the loads");
    d.head_skipped = true;
    cr_assert_str_eq(class_of(&d), "fcfs-skipped-head-strands-loads");
    d.rule = SCHED_STOP_ALLOC_RESERVED;
    cr_assert_str_eq(class_of(&d), "fcfs-skipped-head-reservation");
    d.rule = SCHED_STOP_ALLOC_FREE;
    d.head_holds = true;
    cr_assert_str_eq(class_of(&d), "fcfs-onboarding-overcommit");
}

Test(soak_classes, what_breaks_the_structure_is_unexpected)
{
    struct kvsim_dead_end d = priority_stranded();
    d.running = true; /* something runs: its finish frees blocks, not the class */
    cr_assert_null(class_of(&d));
    d = priority_stranded();
    d.holders = 2; /* one holder holds blocks that are not a load's */
    cr_assert_null(class_of(&d));
    d = priority_stranded();
    d.holders = d.holders_loaded = 0;
    d.holder_states = 0; /* the head cannot fit even in an empty pool */
    cr_assert_null(class_of(&d));
    d = priority_stranded();
    d.rule = SCHED_STOP_ALLOC_WATERMARK;
    cr_assert_null(class_of(&d));
    d.rule = SCHED_STOP_UNCHUNKED;
    cr_assert_null(class_of(&d));
    d = priority_stranded();
    d.head_status = -1;
    cr_assert_null(class_of(&d));
    d = priority_stranded();
    d.head_holds = true; /* a PRIORITY head holding its load: no class yet */
    cr_assert_null(class_of(&d));
    d = priority_stranded();
    d.holder_states |= 1u << SCHED_RUNNING;
    cr_assert_null(class_of(&d));
    struct kvsim_conform_result res = {.verdict = KVSIM_CONFORM_FAIL};
    snprintf(res.kind, sizeof res.kind, "invariant:waiting_holds_no_blocks");
    cr_assert_null(kvsim_soak_classify(&res), "only dead ends can be expected");
}

/* At most one class matches any structure: every combination of the fields the signatures read. */
Test(soak_classes, signatures_are_disjoint)
{
    size_t n;
    const struct kvsim_soak_class *cl = kvsim_soak_classes(&n);
    const enum sched_waiting_stop rules[] = {SCHED_STOP_ALLOC_FREE, SCHED_STOP_ALLOC_WATERMARK,
                                             SCHED_STOP_ALLOC_RESERVED, SCHED_STOP_DRAINED};
    const int heads[] = {-1, SCHED_WAITING, SCHED_PREEMPTED, SCHED_WAITING_FOR_REMOTE_KVS};
    const uint32_t masks[] = {0, 1u << SCHED_WAITING, 1u << SCHED_PREEMPTED,
                              1u << SCHED_WAITING_FOR_REMOTE_KVS,
                              (1u << SCHED_WAITING) | (1u << SCHED_WAITING_FOR_REMOTE_KVS)};
    unsigned matched_any = 0;
    for (unsigned bits = 0; bits < 64; bits++)
        for (size_t r = 0; r < 4; r++)
            for (size_t h = 0; h < 4; h++)
                for (size_t m = 0; m < 5; m++)
                    for (uint32_t loaded = 0; loaded <= 1; loaded++) {
                        struct kvsim_dead_end d = {.found = true,
                                                   .priority = bits & 1,
                                                   .head_holds = bits & 2,
                                                   .head_skipped = bits & 4,
                                                   .running = bits & 8,
                                                   .disagg = bits & 16,
                                                   .head_fits = bits & 32,
                                                   .rule = rules[r],
                                                   .head_status = heads[h],
                                                   .holder_states = masks[m],
                                                   .holders = masks[m] ? 1 : 0,
                                                   .holders_loaded = masks[m] ? loaded : 0};
                        unsigned k = 0;
                        for (size_t i = 0; i < n; i++)
                            k += cl[i].match(&d);
                        cr_assert_leq(k, 1, "two classes match one structure");
                        matched_any += k;
                    }
    cr_assert_gt(matched_any, 0);
}

/* Every pinned known dead end (tests/regressions/known-dead-end-*.json) is its expected class. */
Test(soak_classes, each_pinned_known_dead_end_is_its_class)
{
    static const char *const pins[][2] = {
        {"known-dead-end-priority-async-load", "priority-head-strands-loads"},
        {"known-dead-end-priority-reservation", "priority-reservation-strands-loads"},
        {"known-dead-end-fcfs-skipped-head", "fcfs-skipped-head-strands-loads"},
        {"known-dead-end-fcfs-skipped-head-reservation", "fcfs-skipped-head-reservation"},
        {"known-dead-end-fcfs-onboarding-overcommit", "fcfs-onboarding-overcommit"},
    };
    size_t n;
    kvsim_soak_classes(&n);
    cr_assert_eq(n, sizeof pins / sizeof pins[0], "one pinned scenario per class");
    for (size_t i = 0; i < n; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/regressions/%s.json", pins[i][0]);
        json_t *doc = load(path);
        struct kvsim_conform_result res;
        cr_assert_eq(kvsim_conform_run_json(doc, NULL, &res, NULL), KVSIM_ESCENARIO, "%s", path);
        json_decref(doc);
        cr_assert_str_eq(res.kind, "dead_end", "%s", path);
        const struct kvsim_soak_class *cls = kvsim_soak_classify(&res);
        cr_assert(cls && !strcmp(cls->name, pins[i][1]), "%s: %s (%s)", path,
                  cls ? cls->name : "unexpected", res.shape);
    }
}

/* Found by fuzzing (tests/fuzz/corpus/fuzz_scenario/output-of-unknown-request.json): an output
 * step whose 'sampled' names a request that was never added returned -1 (not one of the
 * documented codes) after saying why; it is a failed scenario. */
Test(runner, sampled_unknown_request_fails_as_a_scenario)
{
    struct kvsim_conform_result res;
    int rc = run_text("{\"name\": \"x\", \"steps\": ["
                      "{\"op\": \"add\", \"id\": \"R0\", \"prompt\": {\"repeat\": 0, \"n\": 20}, "
                      "\"max_tokens\": 4},"
                      "{\"op\": \"schedule\"},"
                      "{\"op\": \"output\", \"sampled\": {\"R5\": [1000]}}]}",
                      NULL, &res, NULL);
    cr_assert_eq(rc, KVSIM_ESCENARIO, "rc %d: %s", rc, res.message);
    cr_assert(strstr(res.message, "unknown request id 'R5'"), "%s", res.message);
}
