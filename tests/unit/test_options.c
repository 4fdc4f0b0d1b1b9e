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
                          "never)");
    cr_assert_eq(kvsim_options_set(&o, "no-such", "1", err, sizeof err), 1);
    cr_assert_eq(kvsim_options_set(&o, "g1-g2-gbps", "2", err, sizeof err), 0);
    cr_assert_eq(o.replay.tiers.pipe.lanes[OFFLOAD_LANE_G2_G1].bandwidth, 2000000000);
    cr_assert_str_eq(o.offload_opt, "g1-g2-gbps");
    cr_assert_eq(kvsim_options_set(&o, "seed", "18446744073709551615", err, sizeof err), 0);
    cr_assert_eq(o.replay.seed, UINT64_MAX);
}
