/*
 * test_options.c - the option table of a run (runtime/api/config.c): every option is
 * documented in docs/api.md, every documented name is an option, and spellings map as the
 * API promises.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api.h"

#include "common.h"

static char *read_doc(void)
{
    FILE *f = fopen(KVSIM_SOURCE_DIR "/docs/api.md", "rb");
    cr_assert_not_null(f, "docs/api.md");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

Test(options, every_option_is_documented_and_every_documented_one_exists)
{
    const char *doc = read_doc();
    const char *table = strstr(doc, "## Options");
    cr_assert_not_null(table);
    for (size_t i = 0; kvsim_options_name(i); i++) {
        char quoted[80];
        snprintf(quoted, sizeof quoted, "`%s`", kvsim_options_name(i));
        cr_expect(strstr(table, quoted), "docs/api.md does not list %s", quoted);
    }
    /* Backquoted names in the table rows that look like options must be options. */
    const char *end = strstr(table + 1, "\n## ");
    for (const char *p = strstr(table, "\n| "); p && (!end || p < end); p = strstr(p + 1, "\n| ")) {
        const char *eol = strchr(p + 1, '\n');
        const char *cell = strstr(p + 3, " | "); /* the second column */
        for (const char *q = cell ? strchr(cell, '`') : NULL; q && q < eol;
             q = strchr(strchr(q + 1, '`') + 1, '`')) {
            char name[80];
            const char *close = strchr(q + 1, '`');
            size_t len = (size_t)(close - q - 1);
            if (len >= sizeof name)
                break;
            memcpy(name, q + 1, len);
            name[len] = 0;
            if (strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != len ||
                !strcmp(name, "fcfs") || !strcmp(name, "priority") || !strcmp(name, "pool"))
                continue;
            char canon[80];
            kvsim_options_canonical(name, canon, sizeof canon);
            cr_expect(kvsim_options_known(canon, NULL), "docs/api.md lists `%s`, not an option",
                      name);
        }
    }
}

Test(options, spellings)
{
    char buf[64];
    cr_assert_str_eq(kvsim_options_canonical("--max_num_seqs", buf, sizeof buf), "max-num-seqs");
    cr_assert_str_eq(kvsim_options_canonical("num_gpu_blocks_override", buf, sizeof buf),
                     "num-gpu-blocks");
    bool flag = false;
    cr_assert(kvsim_options_known("quiet", &flag) && flag);
    cr_assert(kvsim_options_known("trace", &flag) && !flag);
    cr_assert(!kvsim_options_known("max_num_seqs", NULL), "the table holds canonical names");
}

Test(options, a_refused_value_changes_nothing_and_names_the_option)
{
    struct kvsim_options o;
    kvsim_options_default(&o);
    char err[256];
    cr_assert_eq(kvsim_options_set(&o, "kv-transfer-abort-timeout-ms", "1e-9", err, sizeof err),
                 -EINVAL);
    cr_assert_str_eq(err, "option --kv-transfer-abort-timeout-ms: '1e-9' is below 1 ns (0 means "
                          "off)");
    cr_assert_eq(kvsim_options_set(&o, "no-such", "1", err, sizeof err), 1);
    cr_assert_eq(kvsim_options_set(&o, "g1-g2-gbps", "2", err, sizeof err), 0);
    cr_assert_eq(o.replay.tiers.pipe.lanes[OFFLOAD_LANE_G2_G1].bandwidth, 2000000000);
    cr_assert_str_eq(o.offload_opt, "g1-g2-gbps");
    cr_assert_eq(kvsim_options_set(&o, "seed", "18446744073709551615", err, sizeof err), 0);
    cr_assert_eq(o.replay.seed, UINT64_MAX);
}

/* ---- link options (#33): every value the table accepts gives a finite, monotone time ------ */

/* The decades from lo to hi (both accepted), the value below lo and above hi refused. */
static int decades(double lo, double hi, double *out, int cap)
{
    int n = 0;
    for (double v = lo; v <= hi * 1.0000001 && n < cap; v *= 10)
        out[n++] = v;
    return n;
}

static void set_ok(struct kvsim_options *o, const char *name, double v)
{
    char val[64], err[256];
    snprintf(val, sizeof val, "%.17g", v);
    cr_assert_eq(kvsim_options_set(o, name, val, err, sizeof err), 0, "--%s %s: %s", name, val,
                 err);
}

static void set_refused(const char *name, double v)
{
    struct kvsim_options o;
    kvsim_options_default(&o);
    char val[64], err[256];
    snprintf(val, sizeof val, "%.17g", v);
    cr_assert_eq(kvsim_options_set(&o, name, val, err, sizeof err), -EINVAL, "--%s %s", name, val);
    cr_assert(strstr(err, name), "%s", err);
    kvsim_options_fini(&o);
}

/* One copy of `bytes` alone on a G1<->G2 or G2<->G3 lane of the options' pipeline: its end. */
static int64_t lane_copy_ns(const struct kvsim_options *o, enum offload_lane lane, uint64_t bytes)
{
    int64_t bw = o->replay.tiers.pipe.lanes[lane].bandwidth;
    cr_assert_gt(bw, 0, "lane %s: %lld B/s (0 or less is an infinite link)",
                 offload_lane_name(lane), (long long)bw);
    struct offload_bw *link;
    cr_assert_eq(offload_bw_create(bw, &link), 0);
    cr_assert_eq(offload_bw_start(link, 0, bytes, 1), 0);
    int64_t t = offload_bw_next_deadline(link);
    offload_bw_destroy(link);
    return t;
}

Test(options, every_link_option_gives_a_finite_monotone_transfer_time)
{
    static const struct {
        const char *name;
        enum offload_lane up, down;
        double lo, hi;
    } lanes[] = {
        {"g1-g2-gbps", OFFLOAD_LANE_G1_G2, OFFLOAD_LANE_G2_G1, 1e-3, 1e9},
        {"g2-g3-gbps", OFFLOAD_LANE_G2_G3, OFFLOAD_LANE_G3_G2, 1e-3, 1e9},
    };
    /* a 16-token block of a 70B-class model (320 KiB a token) and a 1-byte copy */
    const uint64_t sizes[] = {16 * 327680, 1};
    for (size_t k = 0; k < sizeof lanes / sizeof lanes[0]; k++) {
        double v[32];
        int n = decades(lanes[k].lo, lanes[k].hi, v, 32);
        cr_assert_geq(n, 10, "%s: %d decades", lanes[k].name, n);
        set_refused(lanes[k].name, lanes[k].lo / 10);
        set_refused(lanes[k].name, lanes[k].hi * 10);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t prev = INT64_MAX;
            for (int i = 0; i < n; i++) {
                struct kvsim_options o;
                kvsim_options_default(&o);
                set_ok(&o, lanes[k].name, v[i]);
                int64_t up = lane_copy_ns(&o, lanes[k].up, sizes[s]);
                int64_t down = lane_copy_ns(&o, lanes[k].down, sizes[s]);
                kvsim_options_fini(&o);
                cr_assert_eq(up, down, "--%s %g: both directions", lanes[k].name, v[i]);
                cr_assert(up >= 1 && up < OFFLOAD_NEVER - 1, "--%s %g: %llu bytes in %lld ns",
                          lanes[k].name, v[i], (unsigned long long)sizes[s], (long long)up);
                cr_assert_leq(up, prev, "--%s %g: slower than a slower link", lanes[k].name, v[i]);
                if (prev != INT64_MAX && prev > 1)
                    cr_assert_lt(up, prev, "--%s %g: ten times the bandwidth gains nothing",
                                 lanes[k].name, v[i]);
                prev = up;
            }
        }
    }
    /* The prefill->decode link: 1 to 131072 tokens of 320 KiB, latency 0 and 1 ms. */
    double v[32];
    int n = decades(1e-6, 1e6, v, 32);
    set_refused("kv-transfer-gbps", 1e-7);
    set_refused("kv-transfer-gbps", 1e7);
    const uint64_t tokens[] = {1, 1000, 131072};
    const char *lat[] = {"0", "1000"};
    for (size_t t = 0; t < 3; t++)
        for (size_t l = 0; l < 2; l++) {
            int64_t prev = INT64_MAX;
            for (int i = 0; i < n; i++) {
                struct kvsim_options o;
                kvsim_options_default(&o);
                char err[256];
                set_ok(&o, "kv-transfer-gbps", v[i]);
                cr_assert_eq(
                    kvsim_options_set(&o, "kv-transfer-latency-us", lat[l], err, sizeof err), 0,
                    "%s", err);
                struct kvsim_transfer_model m = o.replay.disagg.transfer;
                m.kv_bytes_per_token = 327680;
                kvsim_options_fini(&o);
                int64_t d = kvsim_transfer_duration_ns(&m, tokens[t]);
                cr_assert(d >= 1 && d < KVSIM_CLOCK_END_NS, "%g GB/s, %llu tokens: %lld ns", v[i],
                          (unsigned long long)tokens[t], (long long)d);
                cr_assert_leq(d, prev, "%g GB/s, %llu tokens", v[i], (unsigned long long)tokens[t]);
                prev = d;
            }
        }
}

/* ---- options that would do nothing (#34): refused, naming the option and why --------------- */

/* Sets the "--name value" pairs of argv (a flag: value "") and resolves them: the resolve
 * outcome, its message in err. */
static int resolve_args(const char *const *argv, char *err, size_t errlen)
{
    struct kvsim_options o;
    kvsim_options_default(&o);
    int rc = 0;
    for (int i = 0; argv[i] && !rc; i += 2) {
        rc = kvsim_options_set(&o, argv[i], argv[i + 1], err, errlen);
        cr_assert_eq(rc, 0, "--%s %s: %s", argv[i], argv[i + 1], err);
    }
    struct kvsim_run run;
    rc = kvsim_options_resolve(&o, &run, err, errlen);
    if (!rc)
        kvsim_run_fini(&run);
    kvsim_options_fini(&o);
    return rc;
}

Test(options, an_option_that_would_do_nothing_is_refused_naming_it)
{
    static const struct {
        const char *argv[12];
        const char *refused; /* the option named, or NULL: accepted */
    } cases[] = {
        /* trace options without a trace: the built-in workload */
        {{"max-requests", "5"}, "--max-requests does nothing here: it applies to a trace"},
        {{"arrival-speedup", "2"}, "--arrival-speedup does nothing here"},
        {{"format", "azure"}, "--format does nothing here"},
        {{"trace-block-size", "32"}, "--trace-block-size does nothing here"},
        {{"trace", "t.jsonl", "max-requests", "5"}, NULL},
        {{"trace", "t.jsonl", "trace-block-size", "32"}, NULL},
        /* the block size of hash ids, and the trace has none */
        {{"trace", "t.csv", "trace-block-size", "32"}, "--trace-block-size does nothing here"},
        {{"trace", "t.jsonl", "format", "vllm-run", "trace-block-size", "32"},
         "--trace-block-size does nothing here"},
        /* the seed draws the built-in workload */
        {{"trace", "t.jsonl", "seed", "7"}, "--seed does nothing here"},
        {{"seed", "7"}, NULL},
        /* disaggregation routes with its own routers */
        {{"prefill-engines", "1", "decode-engines", "1", "router", "kv"},
         "--router does nothing here"},
        {{"router", "kv", "kv-index", "events"}, "--kv-index does nothing here"}, /* delayed */
        {{"router", "kv", "router-view", "exact", "kv-index", "events"}, NULL},
        {{"router", "round-robin", "kv-index", "events"}, "--kv-index does nothing here"},
        {{"prefill-engines", "1", "decode-engines", "1", "decode-router", "kv", "router-view",
          "exact", "kv-index", "events"},
         NULL},
        /* the delay is the delayed view's (the default one) */
        {{"kv-event-delay-ms", "10"}, NULL},
        {{"router-view", "exact", "kv-event-delay-ms", "10"}, "--kv-event-delay-ms does nothing"},
        /* hardware options without a profile or a capacity */
        {{"tp", "2"}, "--tp does nothing here"},
        {{"tp-link-gbps", "100"}, "--tp-link-gbps does nothing here"},
        {{"tp-link-latency-us", "5"}, "--tp-link-latency-us does nothing here"},
        {{"gpu-memory-utilization", "0.8"}, "--gpu-memory-utilization does nothing here"},
        /* sizes of what the run does not move */
        {{"kv-bytes-per-token", "1000"}, "--kv-bytes-per-token does nothing here"},
        {{"g2-blocks", "100", "kv-bytes-per-token", "1000"}, NULL},
        {{"timeseries-interval-ms", "10"}, "--timeseries-interval-ms does nothing here"},
        {{"timeseries-out", "ts.csv", "timeseries-interval-ms", "10"}, NULL},
        /* offload settings of a mode not chosen */
        {{"g2-blocks", "100", "offload-threads", "2"}, "--offload-threads does nothing here"},
        {{"g2-blocks", "100", "offload-executor", "pool", "offload-threads", "2"}, NULL},
        {{"g2-blocks", "100", "offload-seed", "3"}, "--offload-seed does nothing here"},
        {{"g2-blocks", "100", "offload-fail-rate", "0.1", "offload-seed", "3"}, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        int rc = resolve_args(cases[i].argv, err, sizeof err);
        if (!cases[i].refused) {
            cr_expect_eq(rc, 0, "case %zu (--%s): %s", i, cases[i].argv[0], err);
            continue;
        }
        cr_expect_eq(rc, -EINVAL, "case %zu: %s accepted", i, cases[i].refused);
        cr_expect(strstr(err, cases[i].refused), "case %zu: '%s', not '%s'", i, err,
                  cases[i].refused);
    }
}

/* Issue 42: `kvsim replay --help` is generated from the table: every command-line row appears,
 * once, at the start of a line; nothing else does; rows set only through the API (kv-events) do
 * not. (tests/cli/replay_help_table.sh checks that the parser takes each.) */
Test(options, replay_help_lists_exactly_the_command_line_rows)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    kvsim_options_print_help(f);
    fclose(f);
    size_t listed = 0, rows = 0;
    for (const char *p = text; (p = strstr(p, "\n  --")) != NULL; p++) {
        char name[80];
        size_t n = strspn(p + 5, "abcdefghijklmnopqrstuvwxyz0123456789-");
        cr_assert_lt(n, sizeof name);
        memcpy(name, p + 5, n);
        name[n] = 0;
        size_t i = 0;
        while (kvsim_options_name(i) && strcmp(kvsim_options_name(i), name))
            i++;
        cr_expect(kvsim_options_name(i) && kvsim_options_on_command_line(i),
                  "--help lists --%s, which is no command-line row of the table", name);
        listed++;
    }
    for (size_t i = 0; kvsim_options_name(i); i++) {
        char line[96];
        snprintf(line, sizeof line, "\n  --%s", kvsim_options_name(i));
        const char *at = strstr(text, line);
        while (at && strchr(" \n", at[strlen(line)]) == NULL) /* a longer name */
            at = strstr(at + 1, line);
        if (!kvsim_options_on_command_line(i)) {
            cr_expect_null(at, "--help lists the API-only row %s", kvsim_options_name(i));
            continue;
        }
        rows++;
        cr_expect_not_null(at, "--help does not list --%s", kvsim_options_name(i));
    }
    cr_expect_eq(listed, rows, "--help lists %zu options for %zu command-line rows", listed, rows);
    cr_expect_gt(rows, 80, "the table's command-line rows");
    free(text);
}

/* Whether word is one of the choices in an option's value ("a|b|c"). */
static bool a_choice(const char *arg, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = arg; p && *p; p += strcspn(p, "|"), p += *p == '|')
        if (strncmp(p, word, n) == 0 && strchr("| ", p[n]))
            return true;
    return false;
}

/* Whether option name takes word as its value (a choice of a policy, say). */
static bool takes(const char *name, const char *word)
{
    struct kvsim_options o;
    kvsim_options_default(&o);
    char err[512];
    bool ok = kvsim_options_set(&o, name, word, err, sizeof err) == 0;
    kvsim_options_fini(&o);
    return ok;
}

/*
 * The default an option's help states, from its text: "(default: X...)" anywhere, else the first
 * parenthesized group whose text up to ';', ',' or ':' is a number, on, off or a value the option
 * takes (one of its choices). Empty when the help states none it can read ("(number of CPUs)",
 * "(all)").
 */
static void stated_default(const char *name, const char *help, const char *arg, char *out,
                           size_t len)
{
    out[0] = 0;
    if (!help)
        return;
    const char *p = strstr(help, "(default: ");
    if (p) {
        p += strlen("(default: ");
        size_t n = strcspn(p, ";,)");
        snprintf(out, len, "%.*s", (int)n, p);
        return;
    }
    for (p = strchr(help, '('); p; p = strchr(p + 1, '(')) {
        size_t n = strcspn(p + 1, ";,:)");
        char word[64];
        if (n == 0 || n >= sizeof word)
            continue;
        snprintf(word, sizeof word, "%.*s", (int)n, p + 1);
        char *end;
        strtod(word, &end);
        bool number = end != word && *end == 0;
        if (number || !strcmp(word, "on") || !strcmp(word, "off") || a_choice(arg, word) ||
            (arg && takes(name, word))) {
            snprintf(out, len, "%s", word);
            return;
        }
    }
}

/* Issue 60: the defaults live in one place (kvsim_replay_config_default, the option layer) and
 * every help text that states one states it: a number equal to the code's, on/off as the flag
 * or the count 0 is, a choice's name. */
Test(options, every_help_default_is_the_default)
{
    size_t checked = 0;
    char unread[2048] = "";
    for (size_t i = 0; kvsim_options_name(i); i++) {
        const char *name = kvsim_options_name(i), *help = kvsim_options_help(i);
        char stated[128], actual[128];
        stated_default(name, help, kvsim_options_arg(i), stated, sizeof stated);
        if (!kvsim_options_default_text(i, actual, sizeof actual) || !stated[0]) {
            if (kvsim_options_on_command_line(i) &&
                strlen(unread) + strlen(name) + 3 < sizeof unread)
                strcat(strcat(unread, " --"), name);
            continue;
        }
        char *end;
        double want = strtod(stated, &end);
        if (end != stated && *end == 0) {
            double got = strtod(actual, NULL);
            cr_expect(got == want ||
                          (want != 0 && got / want > 1 - 1e-12 && got / want < 1 + 1e-12),
                      "--%s: the help says (%s), the code's default is %s", name, stated, actual);
        } else if (!strcmp(stated, "on") || !strcmp(stated, "off")) {
            bool on = !strcmp(stated, "on");
            bool got_on = !strcmp(actual, "true") || !strcmp(actual, "on") ||
                          (strtod(actual, &end) != 0 && *end == 0);
            cr_expect_eq(got_on, on, "--%s: the help says (%s), the code's default is %s", name,
                         stated, actual);
        } else {
            cr_expect_str_eq(actual, stated, "--%s: the help says (%s), the code's default is %s",
                             name, stated, actual);
        }
        checked++;
    }
    cr_log_info("defaults not stated in a form read here:%s", unread);
    cr_expect_geq(checked, 50, "help defaults checked: %zu (not read:%s)", checked, unread);
}

/* Issue 65: every vLLM name in the table is accepted wherever kvsim's is, under both spellings,
 * and sets exactly what kvsim's name sets (the same configuration); the option given keeps the
 * spelling it was given under (messages name it). The table has at least tp's and
 * num-gpu-blocks' (vLLM: --tensor-parallel-size, --num-gpu-blocks-override). */
Test(options, every_vllm_name_sets_what_kvsims_name_sets)
{
    size_t aliases = 0;
    for (size_t i = 0; kvsim_options_name(i); i++) {
        const char *name = kvsim_options_name(i), *vllm = kvsim_options_vllm_name(i);
        if (!vllm)
            continue;
        aliases++;
        cr_assert_str_neq(vllm, name, "row %s: a vLLM name equal to kvsim's", name);
        cr_assert(kvsim_options_known(vllm, NULL), "--%s (vLLM's --%s) is not known", name, vllm);
        char under[80], canon[80];
        snprintf(under, sizeof under, "--%s", vllm);
        for (char *c = under + 2; *c; c++)
            *c = *c == '-' ? '_' : *c;
        cr_assert_str_eq(kvsim_options_canonical(under, canon, sizeof canon), name,
                         "%s is not --%s", under, name);
        /* the row's value: the default's text, or 2 for a number without one */
        char value[64] = "2";
        if (!kvsim_options_default_text(i, value, sizeof value) || !strcmp(value, "0"))
            snprintf(value, sizeof value, "2");
        struct kvsim_options a, b;
        kvsim_options_default(&a);
        kvsim_options_default(&b);
        char err[256];
        cr_assert_eq(kvsim_options_set(&a, name, value, err, sizeof err), 0, "--%s %s: %s", name,
                     value, err);
        cr_assert_eq(kvsim_options_set(&b, vllm, value, err, sizeof err), 0, "--%s %s: %s", vllm,
                     value, err);
        cr_assert_str_eq(b.given[i], vllm, "--%s given: recorded as '%s'", vllm, b.given[i]);
        b.given[i] = a.given[i];
        cr_assert(memcmp(&a.replay, &b.replay, sizeof a.replay) == 0 &&
                      memcmp(&a.timing, &b.timing, sizeof a.timing) == 0,
                  "--%s %s and --%s %s set different values", name, value, vllm, value);
        kvsim_options_fini(&a);
        kvsim_options_fini(&b);
    }
    cr_assert_geq(aliases, 2, "only %zu vLLM names in the table", aliases);
}
