/*
 * common.c - the test executables' main and the helpers of common.h.
 */
#include "common.h"

#include <criterion/hooks.h>

#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sched/sched.h"

#ifndef KVSIM_SOURCE_DIR
#error "KVSIM_SOURCE_DIR must be defined (the source tree, for tests/inputs and ../shared/traces)"
#endif

/* ---- main: a skipped test is visible to ctest ------------------------------------------------ */

enum { MAX_SKIPS_SHOWN = 32 };

static size_t num_skipped;
static char skipped_names[MAX_SKIPS_SHOWN][256];

/* Runs in the runner process after each test that ran (filtered-out and disabled tests never
 * get here, so they do not count as skipped). */
ReportHook(POST_TEST)(struct criterion_test_stats *stats)
{
    if (stats->test_status != CR_STATUS_SKIPPED)
        return;
    if (num_skipped < MAX_SKIPS_SHOWN)
        snprintf(skipped_names[num_skipped], sizeof skipped_names[num_skipped], "%s/%s: %s",
                 stats->test->category, stats->test->name,
                 stats->message ? stats->message : "skipped");
    num_skipped++;
}

/* ---- main: the executable's temporary directory --------------------------------------------- */

/* The environment variable through which the tests' processes find the directory. */
#define TEST_DIR_ENV "KVSIM_TEST_DIR"

static char tmpdir[4096];

/* Makes tmpdir and publishes it (KVSIM_TEST_DIR, and TMPDIR for the programs the tests run);
 * exits 1 on failure. */
static void make_tmpdir(const char *argv0)
{
    char exe[4096];
    snprintf(exe, sizeof exe, "%s", argv0 && *argv0 ? argv0 : "unknown");
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    int n = snprintf(tmpdir, sizeof tmpdir, "%s/kvsim-test-%s-XXXXXX", base, basename(exe));
    if (n < 0 || (size_t)n >= sizeof tmpdir) {
        fprintf(stderr, "%s: the temporary directory's name under %s is too long\n", argv0, base);
        exit(1);
    }
    char template[sizeof tmpdir];
    memcpy(template, tmpdir, sizeof template);
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "%s: cannot create a temporary directory %s: %s\n", argv0, template,
                strerror(errno));
        exit(1);
    }
    if (setenv(TEST_DIR_ENV, tmpdir, 1) != 0 || setenv("TMPDIR", tmpdir, 1) != 0) {
        fprintf(stderr, "%s: setenv: %s\n", argv0, strerror(errno));
        rmdir(tmpdir);
        exit(1);
    }
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0)
        fprintf(stderr, "cannot remove %s: %s\n", path, strerror(errno));
    return 0; /* remove what can be removed */
}

/* Removes tmpdir and everything in it, or keeps it when KVSIM_KEEP_TEST_FILES=1. */
static void remove_tmpdir(void)
{
    const char *keep = getenv("KVSIM_KEEP_TEST_FILES");
    if (keep && strcmp(keep, "1") == 0) {
        fprintf(stderr, "kept test files in %s\n", tmpdir);
        return;
    }
    /* FTW_DEPTH: a directory after its entries (rmdir on FTW_DP); FTW_PHYS: links not followed */
    if (nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "cannot remove %s: %s\n", tmpdir, strerror(errno));
}

const char *kvsim_test_tmpdir(void)
{
    const char *dir = getenv(TEST_DIR_ENV);
    cr_assert(dir && *dir, "%s is not set: the test did not start from common.c's main",
              TEST_DIR_ENV);
    return dir;
}

void kvsim_test_tmp_path(char *buf, size_t len, const char *name)
{
    const char *dir = kvsim_test_tmpdir();
    int n = snprintf(buf, len, "%s/%s", dir, name);
    cr_assert(n > 0 && (size_t)n < len, "the path of %s in %s is too long for %zu bytes", name, dir,
              len);
}

int main(int argc, char *argv[])
{
    /* before the run, so that the tests' processes inherit it */
    make_tmpdir(argc > 0 ? argv[0] : NULL);
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true))
        result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    remove_tmpdir();
    if (result != 0 || num_skipped == 0)
        return result;
    for (size_t i = 0; i < num_skipped && i < MAX_SKIPS_SHOWN; i++)
        fprintf(stderr, "[SKIP] %s\n", skipped_names[i]);
    fprintf(stderr, "%zu test%s skipped: exit %d\n", num_skipped, num_skipped == 1 ? "" : "s",
            KVSIM_TEST_SKIPPED);
    return KVSIM_TEST_SKIPPED;
}

/* ---- the shared traces ----------------------------------------------------------------------- */

const char *kvsim_test_traces_dir(void)
{
    const char *dir = getenv("KVSIM_TRACES_DIR");
    return dir && *dir ? dir : KVSIM_SOURCE_DIR "/../shared/traces";
}

void kvsim_test_trace_path(char *path, size_t len, const char *name)
{
    const char *dir = kvsim_test_traces_dir();
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        const char *require = getenv("KVSIM_REQUIRE_TRACES");
        if (require && strcmp(require, "1") == 0)
            cr_assert_fail("KVSIM_REQUIRE_TRACES=1 and the shared traces are not at %s (set "
                           "KVSIM_TRACES_DIR)",
                           dir);
        cr_skip_test("the shared traces are not at %s (set KVSIM_TRACES_DIR)", dir);
    }
    int n = snprintf(path, len, "%s/%s", dir, name);
    cr_assert(n > 0 && (size_t)n < len, "the path of %s in %s is too long", name, dir);
    cr_assert_eq(access(path, R_OK), 0, "the shared trace %s cannot be read: %s", path,
                 strerror(errno));
}

/* ---- files ----------------------------------------------------------------------------------- */

char *kvsim_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    for (;;) {
        if (n + 1024 > cap) {
            buf = realloc(buf, cap *= 2);
            cr_assert_not_null(buf);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    cr_assert_eq(ferror(f), 0, "cannot read %s", path);
    fclose(f);
    buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}

/* ---- block id lists -------------------------------------------------------------------------- */

void kvsim_test_fmt_ids(char *buf, size_t len, const int32_t *ids, uint32_t n)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (uint32_t i = 0; i < n && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%d", i ? "," : "", ids[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
}

void kvsim_test_assert_ids(const int32_t *got, uint32_t gn, const int32_t *want, uint32_t wn,
                           const char *what)
{
    char gbuf[512], wbuf[512];
    kvsim_test_fmt_ids(gbuf, sizeof gbuf, got, gn);
    kvsim_test_fmt_ids(wbuf, sizeof wbuf, want, wn);
    cr_assert_eq(gn, wn, "%s: got %s, expected %s", what, gbuf, wbuf);
    for (uint32_t i = 0; i < gn; i++)
        cr_assert_eq(got[i], want[i], "%s: got %s, expected %s", what, gbuf, wbuf);
}

/* ---- the G1 pool ----------------------------------------------------------------------------- */

void kvsim_test_assert_pool_ok(const struct kvpool *pool, const char *what)
{
    struct kvpool_violation v;
    memset(&v, 0, sizeof v);
    int rc = kvpool_check(pool, &v);
    char buf[256] = "";
    if (rc != 0)
        kvpool_violation_format(&v, buf, sizeof buf);
    cr_assert_eq(rc, 0, "%s: kvpool_check returned %d: %s", what, rc, buf);
}

/* ---- scheduler requests ---------------------------------------------------------------------- */

struct sched_request *kvsim_test_add_request(struct sched *s, uint64_t id, uint32_t first,
                                             uint32_t n, uint32_t max_tokens)
{
    kvpool_token p[64];
    cr_assert_leq(n, 64, "kvsim_test_add_request: a prompt of %u tokens is too long", n);
    for (uint32_t i = 0; i < n; i++)
        p[i] = first + i;
    struct sched_request_params rp = {.id = id,
                                      .prompt = p,
                                      .num_prompt_tokens = n,
                                      .max_tokens = max_tokens,
                                      .eos_token_id = -1,
                                      .arrival = (double)id};
    struct sched_request *r = NULL;
    cr_assert_eq(sched_add(s, &rp, &r), 0, "sched_add %llu", (unsigned long long)id);
    return r;
}
