/*
 * fuzz_sweep_spec.c - libFuzzer target for `kvsim sweep --spec FILE` (sweep_read_spec,
 * runtime/cli/sweep.h), then the check of the grid against the base options
 * (sweep_check_axes_vs_base). Asserted beyond "no crash, no sanitizer report": a refused spec
 * gets -EINVAL and a message naming the file; an accepted one gives at most SWEEP_MAX_AXES
 * distinct grids of options of kvsim replay, each of 1 to SWEEP_MAX_POINTS distinct non-empty
 * values the option table takes, and base options the table takes, none writing a file; and it
 * round-trips: the grids and base options written back as a spec of strings read the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/sweep.h"

#include "fuzz_util.h"

/* A spec's options may name files (--config, --engine-args): standard input must not block. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0 && fd != 0) {
        dup2(fd, 0);
        close(fd);
    }
    return 0;
}

/* Reads the spec at path into *sw (zeroed first). Returns the reader's status; *msg what it
 * printed (malloc'd). */
static int read_spec(struct sweep *sw, const char *path, char **msg)
{
    memset(sw, 0, sizeof *sw);
    sw->cmd = "kvsim sweep";
    sw->axis_what = "both in a --grid and outside it";
    struct cli_parser p;
    memset(&p, 0, sizeof p);
    p.prog = "kvsim sweep";
    struct fuzz_capture c;
    fuzz_capture_begin(&c);
    int rc = sweep_read_spec(&p, sw, path);
    if (!rc) /* the command's next check of a spec's grids: no crash, whatever it says */
        (void)sweep_check_axes_vs_base(&p, sw);
    *msg = fuzz_capture_end(&c);
    return rc;
}

static void check_accepted(const struct sweep *sw)
{
    FUZZ_CHECK(sw->naxes <= SWEEP_MAX_AXES, "%zu grids", sw->naxes);
    char err[1024];
    for (size_t a = 0; a < sw->naxes; a++) {
        const struct sweep_axis *ax = &sw->axes[a];
        FUZZ_CHECK(kvsim_options_known(ax->name, NULL) && strcmp(ax->name, "quiet") &&
                       !sweep_writes_a_file(ax->name),
                   "grid '%s' is not an option of kvsim replay the sweep takes", ax->name);
        FUZZ_CHECK(ax->n >= 1 && ax->n <= SWEEP_MAX_POINTS, "grid '%s': %zu values", ax->name,
                   ax->n);
        for (size_t b = 0; b < a; b++)
            FUZZ_CHECK(strcmp(sw->axes[b].name, ax->name), "grid '%s' twice", ax->name);
        for (size_t i = 0; i < ax->n; i++) {
            FUZZ_CHECK(ax->values[i] && ax->values[i][0], "grid '%s': an empty value", ax->name);
            struct kvsim_options o;
            kvsim_options_default(&o);
            int rc = kvsim_options_set(&o, ax->name, ax->values[i], err, sizeof err);
            kvsim_options_fini(&o);
            FUZZ_CHECK(rc == 0, "grid '%s': value '%s' refused by the table: %s", ax->name,
                       ax->values[i], err);
            for (size_t k = 0; k < i; k++)
                FUZZ_CHECK(strcmp(ax->values[k], ax->values[i]), "grid '%s': '%s' twice", ax->name,
                           ax->values[i]);
        }
    }
    for (size_t i = 0; i < sw->nbase; i++) {
        const struct sweep_setting *s = &sw->base[i];
        FUZZ_CHECK(s->name && s->value && !sweep_writes_a_file(s->name), "base option %zu", i);
        struct kvsim_options o;
        kvsim_options_default(&o);
        int rc = kvsim_options_set(&o, s->name, s->value, err, sizeof err);
        kvsim_options_fini(&o);
        FUZZ_CHECK(rc == 0, "base option '%s' '%s' refused by the table: %s", s->name, s->value,
                   err);
    }
}

/* The grids and base options of sw as a spec of strings (malloc'd text). */
static char *spec_of(const struct sweep *sw)
{
    json_t *doc = json_object(), *grid = json_object(), *opts = json_object();
    FUZZ_CHECK(doc && grid && opts, "out of memory");
    for (size_t a = 0; a < sw->naxes; a++) {
        json_t *vals = json_array();
        for (size_t i = 0; i < sw->axes[a].n; i++)
            json_array_append_new(vals, json_string(sw->axes[a].values[i]));
        json_object_set_new(grid, sw->axes[a].name, vals);
    }
    /* One key per option: a base option given twice keeps its last value (as on the command
     * line), which is the one the second read must give. */
    for (size_t i = 0; i < sw->nbase; i++) {
        json_object_del(opts, sw->base[i].name);
        json_object_set_new(opts, sw->base[i].name, json_string(sw->base[i].value));
    }
    if (sw->quiet)
        json_object_set_new(opts, "quiet", json_string("true"));
    json_object_set_new(doc, "options", opts);
    json_object_set_new(doc, "grid", grid);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    FUZZ_CHECK(text, "json_dumps");
    return text;
}

/* The value base option name ends with in sw (the last one given), or NULL. */
static const char *base_value(const struct sweep *sw, const char *name)
{
    const char *v = NULL;
    for (size_t i = 0; i < sw->nbase; i++)
        if (!strcmp(sw->base[i].name, name))
            v = sw->base[i].value;
    return v;
}

static void check_same(const struct sweep *a, const struct sweep *b)
{
    FUZZ_CHECK(a->naxes == b->naxes && a->quiet == b->quiet, "%zu grids, quiet %d: then %zu, %d",
               a->naxes, a->quiet, b->naxes, b->quiet);
    for (size_t k = 0; k < a->naxes; k++) {
        const struct sweep_axis *x = &a->axes[k], *y = &b->axes[k];
        FUZZ_CHECK(!strcmp(x->name, y->name) && x->n == y->n,
                   "grid %zu: '%s' (%zu) then '%s' (%zu)", k, x->name, x->n, y->name, y->n);
        for (size_t i = 0; i < x->n; i++)
            FUZZ_CHECK(!strcmp(x->values[i], y->values[i]), "grid '%s': '%s' then '%s'", x->name,
                       x->values[i], y->values[i]);
    }
    for (size_t i = 0; i < a->nbase; i++) {
        const char *v = base_value(b, a->base[i].name);
        FUZZ_CHECK(v && !strcmp(v, base_value(a, a->base[i].name)),
                   "base option '%s': '%s' then '%s'", a->base[i].name,
                   base_value(a, a->base[i].name), v ? v : "(none)");
    }
    for (size_t i = 0; i < b->nbase; i++)
        FUZZ_CHECK(base_value(a, b->base[i].name), "base option '%s' appeared", b->base[i].name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    struct sweep sw;
    char *msg;
    int rc = read_spec(&sw, path, &msg);
    if (rc) {
        FUZZ_CHECK(rc == -EINVAL, "rc %d", rc);
        FUZZ_CHECK(strstr(msg, path) != NULL, "the message names the file: %s", msg);
        free(msg);
        sweep_free(&sw);
        close(fd);
        return 0;
    }
    free(msg);
    check_accepted(&sw);
    /* Written back and read again (the input's file still open: a spec option naming it reads
     * the same bytes). */
    char *text = spec_of(&sw);
    char path2[64];
    int fd2 = fuzz_input_file((const uint8_t *)text, strlen(text), path2, sizeof path2);
    FUZZ_CHECK(fd2 >= 0, "memfd for the round trip");
    struct sweep again;
    rc = read_spec(&again, path2, &msg);
    FUZZ_CHECK(rc == 0, "the spec written back is refused: %s\n%s", msg, text);
    free(msg);
    check_same(&sw, &again);
    sweep_free(&again);
    sweep_free(&sw);
    free(text);
    close(fd2);
    close(fd);
    return 0;
}
