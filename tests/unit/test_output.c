/*
 * test_output.c - output files (runtime/report/output.c): written whole or not at all, "-" for
 * standard output, links and devices written through, checks that leave files alone.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/report/report.h"

#include "common.h"

TestSuite(output, .timeout = 30);

static char dir[1024];

static void make_dir(void)
{
    kvsim_test_tmp_path(dir, sizeof dir, "output-XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp(%s) failed: %s", dir, strerror(errno));
}

static void remove_dir(void)
{
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static const char *in_dir(const char *name)
{
    static char buf[4][1200];
    static int k;
    k = (k + 1) % 4;
    int n = snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    cr_assert(n > 0 && (size_t)n < sizeof buf[k], "the path of %s in %s is too long", name, dir);
    return buf[k];
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = calloc(1, 4096);
    size_t n = fread(buf, 1, 4095, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Entries of dir (., .. excluded). */
static int count_entries(void)
{
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    cr_assert_eq(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

Test(output, a_file_appears_whole_only_at_commit, .init = make_dir, .fini = remove_dir)
{
    const char *path = in_dir("r.json");
    FILE *f = fopen(path, "w");
    fputs("old\n", f);
    fclose(f);
    struct kvsim_output o;
    char err[256];
    cr_assert_eq(kvsim_output_open(&o, path, err, sizeof err), 0, "%s", err);
    fputs("new\n", o.f);
    fflush(o.f);
    char *before = read_all(path);
    cr_assert_str_eq(before, "old\n", "the destination changes only at commit");
    cr_assert_eq(count_entries(), 2, "the temporary file sits beside it");
    cr_assert_eq(kvsim_output_commit(&o, err, sizeof err), 0, "%s", err);
    char *after = read_all(path);
    cr_assert_str_eq(after, "new\n");
    cr_assert_eq(count_entries(), 1, "no temporary file is left");
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    mode_t mask = umask(022);
    umask(mask);
    cr_assert_eq(st.st_mode & 0777, 0666 & ~mask, "the mode a plain creation gives");
    free(before);
    free(after);
}

Test(output, a_discarded_output_leaves_the_old_file, .init = make_dir, .fini = remove_dir)
{
    const char *path = in_dir("r.json");
    cr_assert_eq(kvsim_write_text(path, "first", NULL, 0), 0);
    struct kvsim_output o;
    cr_assert_eq(kvsim_output_open(&o, path, NULL, 0), 0);
    fputs("half of a report", o.f);
    kvsim_output_discard(&o);
    char *s = read_all(path);
    cr_assert_str_eq(s, "first\n");
    cr_assert_eq(count_entries(), 1);
    free(s);
}

Test(output, checks_name_the_path_and_change_nothing, .init = make_dir, .fini = remove_dir)
{
    char err[2048];
    cr_assert_eq(kvsim_output_check(in_dir("missing/r.json"), err, sizeof err), -ENOENT);
    cr_assert(strstr(err, "missing/r.json: cannot open for writing: No such file or directory"),
              "%s", err);
    cr_assert_eq(kvsim_output_check(dir, err, sizeof err), -EISDIR);
    const char *path = in_dir("keep.txt");
    cr_assert_eq(kvsim_write_text(path, "keep", NULL, 0), 0);
    cr_assert_eq(kvsim_output_check(path, err, sizeof err), 0, "%s", err);
    char *s = read_all(path);
    cr_assert_str_eq(s, "keep\n", "a check leaves an existing file as it is");
    free(s);
    /* Through a link: the check does not truncate the target either. */
    const char *link = in_dir("link.txt");
    cr_assert_eq(symlink(path, link), 0);
    cr_assert_eq(kvsim_output_check(link, err, sizeof err), 0, "%s", err);
    s = read_all(path);
    cr_assert_str_eq(s, "keep\n");
    free(s);
    cr_assert_eq(kvsim_output_check("-", err, sizeof err), 0);
    cr_assert_eq(count_entries(), 2);
}

Test(output, links_and_devices_are_written_through, .init = make_dir, .fini = remove_dir)
{
    const char *target = in_dir("target.txt"), *link = in_dir("link.txt");
    cr_assert_eq(kvsim_write_text(target, "x", NULL, 0), 0);
    cr_assert_eq(symlink(target, link), 0);
    cr_assert_eq(kvsim_write_text(link, "through", NULL, 0), 0);
    struct stat st;
    cr_assert_eq(lstat(link, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the link stays a link");
    char *s = read_all(target);
    cr_assert_str_eq(s, "through\n");
    free(s);
    cr_assert_eq(kvsim_write_text("/dev/null", "gone", NULL, 0), 0);
    cr_assert_eq(lstat("/dev/null", &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "/dev/null stays a device");
}
