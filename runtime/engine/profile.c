/*
 * profile.c - the profile step model (engine.h): a step's time composed from vLLM layer-wise
 * latency profiles (LLMServingSim's profiler format) for the batch the scheduler formed.
 *
 *   step = prologue(T) + head(T, S) + layers x (per-layer dense operators(T) + attention(shape)
 *          + 2 all-reduces(T) at tp > 1)
 *
 * T is the step's scheduled tokens, S its scheduled sequences. The operator lists come from the
 * architecture catalog (models/<model_type>.yaml: each operator as many times as it appears);
 * dense operators are read at T, per-sequence ones at S, attention at the batch's shape (below).
 * Values between grid points are interpolated linearly on each axis: a leave-one-out test over
 * these profiles (docs/fidelity/timing.md) has linear at 2.7 % mean error on the attention
 * context axis against 8.8 % for interpolation in log x, and equal on the dense tables. A value
 * outside the grid is clamped to its edge and the step's outside mask says on which axis.
 *
 * Loading allocates; a loaded profile is immutable, so any thread may compute with it.
 */
#include "runtime/engine/engine_internal.h"
#include "runtime/input/input.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* A piecewise-linear function over sorted x. */
struct prof_curve {
    uint32_t n;
    double *x, *y;
};

/* Attention for one (prefill chunk, decode count) pair over (prefix, decode context). */
struct prof_slice {
    uint32_t nkp, nkd;
    double *kp, *kd;
    bool kp_shared, kd_shared; /* the axis belongs to an earlier slice (share_axes) */
    double *t;                 /* [nkp * nkd], holes filled at load */
};

/* The skew correction's buckets (meta.yaml skew_fit.bucket_axes): right-inclusive bins. */
struct prof_bins {
    uint32_t n; /* edges */
    double *edge;
};

struct prof_alpha {
    uint64_t key;
    double alpha;
};

struct kvsim_profile {
    struct kvsim_model_arch arch;
    char dir[1024]; /* ROOT/HW/ORG/NAME/bf16 */
    char hardware[64];
    uint32_t tp;
    double link_bytes_per_ns;
    int64_t link_latency_ns;
    /* dense operators precomputed per token count 1..max_tokens (index 0 unused) */
    uint32_t max_tokens, max_seqs;
    double *once_us;  /* prologue + head dense operators, once per step */
    double *layer_us; /* one layer's dense operators */
    double *seq_us;   /* per-sequence operators, per sequence count 1..max_seqs */
    /* attention */
    uint32_t npc, nnd;
    double *pc, *nd;
    struct prof_slice *slice; /* [npc * nnd]; nkp == 0: not profiled */
    double attn_min_us;       /* the smallest profiled attention time */
    double attn_launch_us;    /* a lone 16-token prefill: the cost an extra prefill does not add */
    /* skew correction */
    struct prof_bins n_bins, sr_bins, kvb_bins, kp_bins;
    struct prof_alpha *alpha;
    uint32_t num_alpha;
    double alpha_default;
    double min_step_us;
    /* mixture of experts (moe_nt 0: a dense model): moe.csv, one curve over activated experts
     * per profiled token count; the deployment's DP ranks and whether its experts are split over
     * the tp x dp ranks (expert parallelism) */
    uint32_t moe_nt;
    double *moe_tokens;
    struct prof_curve *moe_rows;
    uint32_t dp;
    bool ep;
    char moe_path[1100];
};

/* ---- errors and small helpers --------------------------------------------------------------- */

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

/* snprintf for paths (a path too long for the buffer is cut; the open then fails naming it). */
static void path_fmt(char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void path_fmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    uint32_t c = *cap ? *cap * 2 : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* Index of the last x[i] <= v (0 if v < x[0]), for a sorted axis of n >= 1 values. */
static uint32_t axis_floor(const double *x, uint32_t n, double v)
{
    uint32_t lo = 0, hi = n;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (x[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Brackets v on axis x: *i0, *i1 and the weight of *i1; clamped at both ends (*out set). */
static double axis_bracket(const double *x, uint32_t n, double v, uint32_t *i0, uint32_t *i1,
                           bool *out)
{
    if (n == 1 || v <= x[0]) {
        if (v < x[0] || (n == 1 && v > x[0]))
            *out = true;
        *i0 = *i1 = 0;
        return 0.0;
    }
    if (v >= x[n - 1]) {
        if (v > x[n - 1])
            *out = true;
        *i0 = *i1 = n - 1;
        return 0.0;
    }
    uint32_t i = axis_floor(x, n, v);
    *i0 = i;
    *i1 = i + 1;
    return (v - x[i]) / (x[i + 1] - x[i]);
}

static double curve_at(const struct prof_curve *c, double v)
{
    uint32_t i0, i1;
    bool out = false;
    double w = axis_bracket(c->x, c->n, v, &i0, &i1, &out);
    return c->y[i0] + w * (c->y[i1] - c->y[i0]);
}

/* ---- CSV ------------------------------------------------------------------------------------ */

/* The longest line of a profile's CSV file, its line end not counted (docs/fidelity/timing.md):
 * its rows are a few numbers, so a longer line is a damaged file, refused naming the line. */
#define PROFILE_CSV_LINE_MAX 4096

struct csv {
    FILE *f;
    const char *path;
    uint32_t line; /* the line in buf */
    char *buf;     /* the line (kvsim_read_line) */
    size_t cap;
};

/* Reads the next line into c->buf (c->line counts it). Returns 1, 0 at the end, or a negative
 * errno with a message naming the file and the line. */
static int csv_line(struct csv *c, char *err, size_t errlen)
{
    size_t len;
    errno = 0;
    enum kvsim_read got = kvsim_read_line(c->f, &c->buf, &c->cap, PROFILE_CSV_LINE_MAX, &len);
    if (got == KVSIM_READ_END)
        return 0;
    c->line++;
    switch (got) {
    case KVSIM_READ_LINE: return 1;
    case KVSIM_READ_TOO_LONG:
        return fail(err, errlen, -EINVAL, "%s:%u: line longer than %d bytes", c->path, c->line,
                    PROFILE_CSV_LINE_MAX);
    case KVSIM_READ_NOMEM:
        return fail(err, errlen, -ENOMEM, "%s:%u: out of memory", c->path, c->line);
    default: {
        int e = errno ? errno : EIO;
        return fail(err, errlen, -e, "%s:%u: read error: %s", c->path, c->line, strerror(e));
    }
    }
}

static void csv_close(struct csv *c)
{
    fclose(c->f);
    free(c->buf);
}

static int csv_open(struct csv *c, const char *path, const char *header, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->path = path;
    c->f = fopen(path, "r");
    if (!c->f)
        return fail(err, errlen, -ENOENT, "%s: cannot read: %s", path, strerror(errno));
    int rc = csv_line(c, err, errlen);
    if (rc == 1 && strncmp(c->buf, header, strlen(header)) == 0)
        return 0;
    csv_close(c);
    return rc < 0 ? rc : fail(err, errlen, -EINVAL, "%s:1: expected the header '%s'", path, header);
}

/* Next data line split into at most n comma-separated fields: 1, 0 at the end, or a negative
 * errno (-EINVAL for a bad line). */
static int csv_next(struct csv *c, char **field, uint32_t n, char *err, size_t errlen)
{
    int rc = csv_line(c, err, errlen);
    if (rc != 1)
        return rc;
    c->buf[strcspn(c->buf, "\r\n")] = 0;
    uint32_t k = 0;
    char *s = c->buf;
    while (k < n) {
        field[k++] = s;
        char *comma = strchr(s, ',');
        if (!comma)
            break;
        *comma = 0;
        s = comma + 1;
    }
    if (k != n)
        return fail(err, errlen, -EINVAL, "%s:%u: expected %u fields, found %u", c->path, c->line,
                    n, k);
    return 1;
}

/*
 * The documented ranges of a profile's numbers (docs/fidelity/timing.md): an operator's time at
 * most 10 s (a step of many of them still fits the clock; kvsim_step_model_check bounds the
 * step), an axis (tokens, sequences, context) at most 1e9, a skew fit's alpha within +-100.
 */
#define PROFILE_TIME_MAX_US 1e7
#define PROFILE_AXIS_MAX    1e9
#define PROFILE_ALPHA_MAX   100.0

/* A field in [0, max] (PROFILE_TIME_MAX_US for a time, PROFILE_AXIS_MAX for an axis). */
static int csv_number(const struct csv *c, const char *s, const char *name, double max, double *out,
                      char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < 0 || v > max)
        return fail(err, errlen, -EINVAL, "%s:%u: field '%s' must be a number in [0, %g], got '%s'",
                    c->path, c->line, name, max, s);
    *out = v;
    return 0;
}

/* ---- YAML (libyaml's document API) ---------------------------------------------------------- */

static yaml_node_t *yaml_get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, key))
            return yaml_document_get_node(d, p->value);
    }
    return NULL;
}

/* libyaml's reader, bounded: a document past KVSIM_INPUT_MAX_JSON_BYTES (an endless stream,
 * /dev/zero) stops the parser there instead of growing its buffers without end. */
struct yaml_bounded_input {
    FILE *f;
    size_t total;
    bool too_large;
    int error; /* errno of a failed read, 0 */
};

static int yaml_read_bounded(void *data, unsigned char *buf, size_t size, size_t *size_read)
{
    struct yaml_bounded_input *in = data;
    size_t room = KVSIM_INPUT_MAX_JSON_BYTES + 1 - in->total; /* one past: "larger" shows */
    size_t got = fread(buf, 1, size < room ? size : room, in->f);
    if (got == 0 && ferror(in->f)) {
        in->error = errno ? errno : EIO;
        return 0;
    }
    in->total += got;
    if (in->total > KVSIM_INPUT_MAX_JSON_BYTES) {
        in->too_large = true;
        return 0;
    }
    *size_read = got;
    return 1;
}

static int yaml_load(const char *path, yaml_document_t *d, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return fail(err, errlen, -ENOENT, "%s: cannot read: %s", path, strerror(errno));
    struct yaml_bounded_input in = {.f = f};
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input(&p, yaml_read_bounded, &in);
    int ok = yaml_parser_load(&p, d);
    int rc = 0;
    if (!ok && in.too_large)
        rc = fail(err, errlen, -EINVAL, "%s: larger than %zu MiB", path,
                  KVSIM_INPUT_MAX_JSON_BYTES >> 20);
    else if (!ok && in.error)
        rc = fail(err, errlen, -in.error, "%s: read error: %s", path, strerror(in.error));
    else if (!ok)
        rc = fail(err, errlen, -EINVAL, "%s:%zu: %s", path, p.problem_mark.line + 1,
                  p.problem ? p.problem : "malformed YAML");
    else if (!yaml_document_get_root_node(d)) {
        yaml_document_delete(d);
        rc = fail(err, errlen, -EINVAL, "%s: empty document", path);
    }
    yaml_parser_delete(&p);
    fclose(f);
    return rc;
}

/* A YAML sequence of numbers into bins. */
static int yaml_bins(yaml_document_t *d, yaml_node_t *n, struct prof_bins *b, const char *path,
                     const char *name, char *err, size_t errlen)
{
    if (!n || n->type != YAML_SEQUENCE_NODE)
        return fail(err, errlen, -EINVAL, "%s: field '%s' must be a list of numbers", path, name);
    size_t cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    b->edge = calloc(cnt ? cnt : 1, sizeof *b->edge);
    if (!b->edge)
        return -ENOMEM;
    b->n = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        yaml_node_t *v = yaml_document_get_node(d, *it);
        char *end;
        double x =
            v && v->type == YAML_SCALAR_NODE ? strtod((char *)v->data.scalar.value, &end) : NAN;
        if (!v || v->type != YAML_SCALAR_NODE || *end || !isfinite(x) ||
            (b->n && x <= b->edge[b->n - 1]))
            return fail(err, errlen, -EINVAL, "%s: field '%s' must be increasing numbers", path,
                        name);
        b->edge[b->n++] = x;
    }
    if (b->n < 2)
        return fail(err, errlen, -EINVAL, "%s: field '%s' needs at least two edges", path, name);
    return 0;
}

/* The bucket of v: the first i with v <= edge[i + 1] (right-inclusive), the last beyond. */
static uint32_t bins_label(const struct prof_bins *b, double v)
{
    for (uint32_t i = 0; i + 1 < b->n; i++)
        if (v <= b->edge[i + 1])
            return i;
    return b->n - 2;
}

/* The index of a label string among a YAML list of labels, or -1. */
static int yaml_label_index(yaml_document_t *d, yaml_node_t *labels, const char *s)
{
    if (!labels || labels->type != YAML_SEQUENCE_NODE)
        return -1;
    int i = 0;
    for (yaml_node_item_t *it = labels->data.sequence.items.start;
         it < labels->data.sequence.items.top; it++, i++) {
        yaml_node_t *v = yaml_document_get_node(d, *it);
        if (v && v->type == YAML_SCALAR_NODE && !strcmp((char *)v->data.scalar.value, s))
            return i;
    }
    return -1;
}

/* ---- loading the tables --------------------------------------------------------------------- */

struct op_rows {
    char name[48];
    struct prof_curve c;
    uint32_t cap;
};

struct op_table {
    struct op_rows *op;
    uint32_t n, cap;
};

static void op_table_free(struct op_table *t)
{
    for (uint32_t i = 0; i < t->n; i++) {
        free(t->op[i].c.x);
        free(t->op[i].c.y);
    }
    free(t->op);
}

/* Room for need points in both arrays of o's curve. Returns 0 or -ENOMEM. */
static int grow_curve(struct op_rows *o, uint32_t need)
{
    uint32_t cap = o->cap;
    int rc = grow((void **)&o->c.x, &cap, need, sizeof(double));
    if (!rc)
        rc = grow((void **)&o->c.y, &o->cap, need, sizeof(double));
    return rc;
}

static struct op_rows *op_find(struct op_table *t, const char *name)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (!strcmp(t->op[i].name, name))
            return &t->op[i];
    return NULL;
}

/* dense.csv (layer,tokens,time_us) or per_sequence.csv (layer,sequences,time_us). */
static int load_ops(const char *path, const char *header, const char *axis, struct op_table *t,
                    char *err, size_t errlen)
{
    struct csv c;
    int rc = csv_open(&c, path, header, err, errlen);
    if (rc)
        return rc;
    char *f[3] = {0};
    while ((rc = csv_next(&c, f, 3, err, errlen)) == 1) {
        double x = 0, y = 0;
        if ((rc = csv_number(&c, f[1], axis, PROFILE_AXIS_MAX, &x, err, errlen)) ||
            (rc = csv_number(&c, f[2], "time_us", PROFILE_TIME_MAX_US, &y, err, errlen)))
            break;
        if (x < 1) {
            rc = fail(err, errlen, -EINVAL, "%s:%u: field '%s' must be >= 1", path, c.line, axis);
            break;
        }
        struct op_rows *o = op_find(t, f[0]);
        if (!o) {
            if ((rc = grow((void **)&t->op, &t->cap, t->n + 1, sizeof *t->op)))
                break;
            o = &t->op[t->n++];
            memset(o, 0, sizeof *o);
            snprintf(o->name, sizeof o->name, "%.47s", f[0]);
        }
        if ((rc = grow_curve(o, o->c.n + 1)))
            break;
        if (o->c.n && x <= o->c.x[o->c.n - 1]) {
            rc = fail(err, errlen, -EINVAL, "%s:%u: field '%s' of '%s' must increase", path, c.line,
                      axis, f[0]);
            break;
        }
        o->c.x[o->c.n] = x;
        o->c.y[o->c.n++] = y;
    }
    csv_close(&c);
    return rc < 0 ? rc : 0;
}

/* Adds an operator's curve (times count) to table[1..max]. */
static int add_curve(double *table, uint32_t max, struct op_table *t, const char *name,
                     const char *path, char *err, size_t errlen)
{
    struct op_rows *o = op_find(t, name);
    if (!o)
        return fail(err, errlen, -EINVAL, "%s: no rows for operator '%s' (the catalog runs it)",
                    path, name);
    for (uint32_t v = 1; v <= max; v++)
        table[v] += curve_at(&o->c, (double)v);
    return 0;
}

static double max_x(struct op_table *t)
{
    double m = INFINITY;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->op[i].c.x[t->op[i].c.n - 1] < m)
            m = t->op[i].c.x[t->op[i].c.n - 1];
    return t->n ? m : 0;
}

struct attn_row {
    double pc, kp, nd, kd, t;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The sorted distinct values of a field of rows. */
static int distinct(const struct attn_row *r, uint32_t n, size_t off, double **out, uint32_t *cnt)
{
    double *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        v[i] = *(const double *)((const char *)&r[i] + off);
    qsort(v, n, sizeof *v, cmp_double);
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!k || v[i] != v[k - 1])
            v[k++] = v[i];
    *out = v;
    *cnt = k;
    return 0;
}

static uint32_t axis_index(const double *x, uint32_t n, double v)
{
    uint32_t i = axis_floor(x, n, v);
    return x[i] == v ? i : UINT32_MAX;
}

/* Fills a slice's holes along the context axis, then along the prefix axis (linear). */
static void fill_line(double *t, uint32_t n, size_t stride, const double *x)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!isnan(t[i * stride]))
            continue;
        int lo = -1, hi = -1;
        for (int j = (int)i - 1; j >= 0; j--)
            if (!isnan(t[(uint32_t)j * stride])) {
                lo = j;
                break;
            }
        for (uint32_t j = i + 1; j < n; j++)
            if (!isnan(t[j * stride])) {
                hi = (int)j;
                break;
            }
        if (lo >= 0 && hi >= 0) {
            double w = (x[i] - x[lo]) / (x[hi] - x[lo]);
            t[i * stride] = t[(uint32_t)lo * stride] +
                            w * (t[(uint32_t)hi * stride] - t[(uint32_t)lo * stride]);
        } else if (lo >= 0 || hi >= 0) {
            t[i * stride] = t[(uint32_t)(lo >= 0 ? lo : hi) * stride];
        }
    }
}

static int build_slice(struct prof_slice *s, const struct attn_row *r, uint32_t n)
{
    int rc = distinct(r, n, offsetof(struct attn_row, kp), &s->kp, &s->nkp);
    if (!rc)
        rc = distinct(r, n, offsetof(struct attn_row, kd), &s->kd, &s->nkd);
    if (rc)
        return rc;
    s->t = malloc((size_t)s->nkp * s->nkd * sizeof *s->t);
    if (!s->t)
        return -ENOMEM;
    for (size_t i = 0; i < (size_t)s->nkp * s->nkd; i++)
        s->t[i] = NAN;
    for (uint32_t i = 0; i < n; i++)
        s->t[(size_t)axis_index(s->kp, s->nkp, r[i].kp) * s->nkd +
             axis_index(s->kd, s->nkd, r[i].kd)] = r[i].t;
    for (uint32_t i = 0; i < s->nkp; i++)
        fill_line(&s->t[(size_t)i * s->nkd], s->nkd, 1, s->kd);
    for (uint32_t j = 0; j < s->nkd; j++)
        fill_line(&s->t[j], s->nkp, s->nkd, s->kp);
    return 0;
}

static int cmp_row(const void *a, const void *b)
{
    const struct attn_row *x = a, *y = b;
    if (x->pc != y->pc)
        return x->pc < y->pc ? -1 : 1;
    if (x->nd != y->nd)
        return x->nd < y->nd ? -1 : 1;
    return 0;
}

/* Points every slice's prefix and context axes at the first slice's equal one (freeing the
 * copy), so that a lookup brackets a value once for all its corners. */
static void share_axes(struct kvsim_profile *p)
{
    size_t n = (size_t)p->npc * p->nnd;
    for (size_t i = 0; i < n; i++) {
        struct prof_slice *s = &p->slice[i];
        for (size_t j = 0; j < i && s->nkp; j++) {
            struct prof_slice *o = &p->slice[j];
            if (!s->kp_shared && o->nkp == s->nkp &&
                !memcmp(o->kp, s->kp, s->nkp * sizeof *s->kp)) {
                free(s->kp);
                s->kp = o->kp;
                s->kp_shared = true;
            }
            if (!s->kd_shared && o->nkd == s->nkd &&
                !memcmp(o->kd, s->kd, s->nkd * sizeof *s->kd)) {
                free(s->kd);
                s->kd = o->kd;
                s->kd_shared = true;
            }
        }
    }
}

static int load_attention(struct kvsim_profile *p, const char *path, char *err, size_t errlen)
{
    struct csv c;
    int rc = csv_open(&c, path, "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us", err, errlen);
    if (rc)
        return rc;
    struct attn_row *r = NULL;
    uint32_t n = 0, cap = 0;
    char *f[5] = {0};
    static const char *names[5] = {"prefill_chunk", "kv_prefill", "n_decode", "kv_decode",
                                   "time_us"};
    while ((rc = csv_next(&c, f, 5, err, errlen)) == 1) {
        double v[5];
        rc = 0;
        for (int i = 0; i < 5 && !rc; i++)
            rc = csv_number(&c, f[i], names[i], i == 4 ? PROFILE_TIME_MAX_US : PROFILE_AXIS_MAX,
                            &v[i], err, errlen);
        if (!rc && v[0] == 0 && v[2] == 0)
            rc = fail(err, errlen, -EINVAL, "%s:%u: a row with neither a prefill nor a decode",
                      path, c.line);
        if (!rc)
            rc = grow((void **)&r, &cap, n + 1, sizeof *r);
        if (rc)
            break;
        r[n++] = (struct attn_row){.pc = v[0], .kp = v[1], .nd = v[2], .kd = v[3], .t = v[4]};
    }
    csv_close(&c);
    if (rc >= 0 && !n)
        rc = fail(err, errlen, -EINVAL, "%s: no rows", path);
    if (rc < 0) {
        free(r);
        return rc;
    }
    rc = distinct(r, n, offsetof(struct attn_row, pc), &p->pc, &p->npc);
    if (!rc)
        rc = distinct(r, n, offsetof(struct attn_row, nd), &p->nd, &p->nnd);
    if (!rc) {
        p->slice = calloc((size_t)p->npc * p->nnd, sizeof *p->slice);
        rc = p->slice ? 0 : -ENOMEM;
    }
    if (!rc && r)
        qsort(r, n, sizeof *r, cmp_row);
    p->attn_min_us = INFINITY;
    p->attn_launch_us = INFINITY;
    for (uint32_t i = 0; i < n && !rc;) {
        uint32_t j = i;
        while (j < n && r[j].pc == r[i].pc && r[j].nd == r[i].nd)
            j++;
        struct prof_slice *s = &p->slice[(size_t)axis_index(p->pc, p->npc, r[i].pc) * p->nnd +
                                         axis_index(p->nd, p->nnd, r[i].nd)];
        rc = build_slice(s, &r[i], j - i);
        for (uint32_t k = i; k < j; k++) {
            if (r[k].t < p->attn_min_us)
                p->attn_min_us = r[k].t;
            if (r[k].nd == 0 && r[k].kp == 0 && r[k].pc > 0 && r[k].pc == p->pc[1])
                p->attn_launch_us = r[k].t;
        }
        i = j;
    }
    free(r);
    if (!rc)
        share_axes(p);
    if (!rc && !isfinite(p->attn_launch_us))
        rc = fail(err, errlen, -EINVAL, "%s: no row for the smallest prefill chunk alone", path);
    return rc;
}

/* skew_fit.csv: pc,n_label,skew_rate_label,kv_big_label,kp_label,alpha,n_samples. */
static uint64_t alpha_key(double pc, uint32_t n, uint32_t sr, uint32_t kvb, uint32_t kp)
{
    return ((uint64_t)llround(pc) << 32) | (uint64_t)n << 24 | (uint64_t)sr << 16 |
           (uint64_t)kvb << 8 | kp;
}

static int cmp_alpha(const void *a, const void *b)
{
    uint64_t x = ((const struct prof_alpha *)a)->key, y = ((const struct prof_alpha *)b)->key;
    return (x > y) - (x < y);
}

static int load_skew(struct kvsim_profile *p, const char *path, yaml_document_t *d,
                     yaml_node_t *axes, const char *meta, char *err, size_t errlen)
{
    struct csv c;
    int rc =
        csv_open(&c, path, "pc,n_label,skew_rate_label,kv_big_label,kp_label,alpha", err, errlen);
    if (rc)
        return rc;
    static const char *lab[4] = {"n_labels", "skew_rate_labels", "kv_big_labels", "kp_labels"};
    static const char *col[4] = {"n_label", "skew_rate_label", "kv_big_label", "kp_label"};
    uint32_t cap = 0;
    char *f[7] = {0};
    while ((rc = csv_next(&c, f, 7, err, errlen)) == 1) {
        double pc = 0, alpha;
        char *end;
        if ((rc = csv_number(&c, f[0], "pc", PROFILE_AXIS_MAX, &pc, err, errlen)))
            break;
        alpha = strtod(f[5], &end);
        if (end == f[5] || *end || !(fabs(alpha) <= PROFILE_ALPHA_MAX)) {
            rc = fail(err, errlen, -EINVAL, "%s:%u: field 'alpha' must be a number in [-%g, %g]",
                      path, c.line, PROFILE_ALPHA_MAX, PROFILE_ALPHA_MAX);
            break;
        }
        int idx[4];
        for (int i = 0; i < 4 && !rc; i++) {
            idx[i] = yaml_label_index(d, yaml_get(d, axes, lab[i]), f[1 + i]);
            if (idx[i] < 0)
                rc = fail(err, errlen, -EINVAL, "%s:%u: field '%s' '%s' is not in %s %s", path,
                          c.line, col[i], f[1 + i], meta, lab[i]);
        }
        if (!rc)
            rc = grow((void **)&p->alpha, &cap, p->num_alpha + 1, sizeof *p->alpha);
        if (rc)
            break;
        p->alpha[p->num_alpha++] =
            (struct prof_alpha){.key = alpha_key(pc, (uint32_t)idx[0], (uint32_t)idx[1],
                                                 (uint32_t)idx[2], (uint32_t)idx[3]),
                                .alpha = alpha};
    }
    csv_close(&c);
    if (rc < 0)
        return rc;
    qsort(p->alpha, p->num_alpha, sizeof *p->alpha, cmp_alpha);
    return 0;
}

static int load_meta(struct kvsim_profile *p, const char *dir, char *err, size_t errlen)
{
    char meta[1024], path[1100];
    path_fmt(meta, sizeof meta, "%s/meta.yaml", dir);
    yaml_document_t d;
    int rc = yaml_load(meta, &d, err, errlen);
    if (rc)
        return rc;
    yaml_node_t *root = yaml_document_get_root_node(&d);
    yaml_node_t *fit = yaml_get(&d, root, "skew_fit");
    yaml_node_t *en = yaml_get(&d, fit, "enabled");
    bool enabled =
        en && en->type == YAML_SCALAR_NODE && !strcmp((char *)en->data.scalar.value, "true");
    if (enabled) {
        yaml_node_t *axes = yaml_get(&d, fit, "bucket_axes");
        char tp[16];
        snprintf(tp, sizeof tp, "%u", p->tp);
        yaml_node_t *per = yaml_get(&d, yaml_get(&d, fit, "per_tp"), tp);
        yaml_node_t *ad = yaml_get(&d, per, "alpha_default");
        char *end = NULL;
        if (ad && ad->type == YAML_SCALAR_NODE)
            p->alpha_default = strtod((char *)ad->data.scalar.value, &end);
        if (!end || *end || !(fabs(p->alpha_default) <= PROFILE_ALPHA_MAX))
            rc = fail(err, errlen, -EINVAL,
                      "%s: field 'skew_fit.per_tp.%s.alpha_default' must be a number in [-%g, %g]",
                      meta, tp, PROFILE_ALPHA_MAX, PROFILE_ALPHA_MAX);
        if (!rc)
            rc = yaml_bins(&d, yaml_get(&d, axes, "n_bins"), &p->n_bins, meta,
                           "skew_fit.bucket_axes.n_bins", err, errlen);
        if (!rc)
            rc = yaml_bins(&d, yaml_get(&d, axes, "skew_rate_bins"), &p->sr_bins, meta,
                           "skew_fit.bucket_axes.skew_rate_bins", err, errlen);
        if (!rc)
            rc = yaml_bins(&d, yaml_get(&d, axes, "kv_big_bins"), &p->kvb_bins, meta,
                           "skew_fit.bucket_axes.kv_big_bins", err, errlen);
        if (!rc)
            rc = yaml_bins(&d, yaml_get(&d, axes, "kp_bins"), &p->kp_bins, meta,
                           "skew_fit.bucket_axes.kp_bins", err, errlen);
        if (!rc) {
            path_fmt(path, sizeof path, "%s/tp%u/skew_fit.csv", dir, p->tp);
            rc = load_skew(p, path, &d, axes, meta, err, errlen);
        }
    }
    yaml_document_delete(&d);
    return rc;
}

/* The architecture catalog: the operators of each part of an iteration, by category. */
struct catalog {
    yaml_document_t d;
    yaml_node_t *seq, *dense, *per_seq, *attn, *moe;
    char path[1024];
};

static const char *scalar(yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* Adds the operators of sequence part `part` to table[1..max] (dense or per-sequence ones). */
static int add_part(struct catalog *c, const char *part, yaml_node_t *category, double *table,
                    uint32_t max, struct op_table *ops, const char *csv, uint32_t *attention,
                    bool other_ok, char *err, size_t errlen)
{
    yaml_node_t *list = yaml_get(&c->d, c->seq, part);
    if (!list || list->type != YAML_SEQUENCE_NODE)
        return fail(err, errlen, -EINVAL, "%s: field 'sequence.%s' must be a list", c->path, part);
    for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top;
         it++) {
        const char *op = scalar(yaml_document_get_node(&c->d, *it));
        if (!op)
            return fail(err, errlen, -EINVAL, "%s: 'sequence.%s' holds a non-name", c->path, part);
        if (yaml_get(&c->d, c->attn, op)) {
            if (attention)
                (*attention)++;
            continue;
        }
        if (!yaml_get(&c->d, category, op)) {
            bool other = yaml_get(&c->d, c->dense, op) || yaml_get(&c->d, c->per_seq, op);
            if (other && other_ok)
                continue; /* the other category's pass adds it */
            return fail(err, errlen, -EINVAL,
                        other ? "%s: operator '%s' of 'sequence.%s' runs per sequence inside a "
                                "layer (kvsim models per-sequence operators in the head only)"
                              : "%s: operator '%s' of 'sequence.%s' is in no catalog category",
                        c->path, op, part);
        }
        int rc = add_curve(table, max, ops, op, csv, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

static int load_catalog(struct catalog *c, const char *root, const char *model_type, char *err,
                        size_t errlen)
{
    path_fmt(c->path, sizeof c->path, "%s/models/%s.yaml", root, model_type);
    int rc = yaml_load(c->path, &c->d, err, errlen);
    if (rc)
        return rc;
    yaml_node_t *r = yaml_document_get_root_node(&c->d);
    c->seq = yaml_get(&c->d, r, "sequence");
    yaml_node_t *cat = yaml_get(&c->d, r, "catalog");
    c->dense = yaml_get(&c->d, cat, "dense");
    c->per_seq = yaml_get(&c->d, cat, "per_sequence");
    c->attn = yaml_get(&c->d, cat, "attention");
    c->moe = yaml_get(&c->d, cat, "moe");
    if (!c->seq || !c->dense || !c->per_seq || !c->attn)
        rc = fail(err, errlen, -EINVAL,
                  "%s: needs 'sequence' and 'catalog' with dense, per_sequence and attention",
                  c->path);
    if (rc)
        yaml_document_delete(&c->d);
    return rc;
}

/*
 * The catalog's mlp_moe part against the model: a MoE model's layers run one MoE block (the
 * router gate and the experts, measured as one unit in moe.csv), a dense model's none.
 */
static int check_moe_part(struct kvsim_profile *p, struct catalog *c, char *err, size_t errlen)
{
    yaml_node_t *list = yaml_get(&c->d, c->seq, "mlp_moe");
    uint32_t n = 0;
    if (list && list->type == YAML_SEQUENCE_NODE)
        for (yaml_node_item_t *it = list->data.sequence.items.start;
             it < list->data.sequence.items.top; it++) {
            const char *op = scalar(yaml_document_get_node(&c->d, *it));
            if (!op || !yaml_get(&c->d, c->moe, op))
                return fail(err, errlen, -EINVAL,
                            "%s: operator '%s' of 'sequence.mlp_moe' is not in 'catalog.moe'",
                            c->path, op ? op : "?");
            n++;
        }
    if (p->arch.num_experts && n != 1)
        return fail(err, errlen, -EINVAL,
                    "%s: 'sequence.mlp_moe' lists %u operators; the model has %u experts and kvsim "
                    "times one MoE block per layer (moe.csv)",
                    c->path, n, p->arch.num_experts);
    if (!p->arch.num_experts && n)
        return fail(err, errlen, -EINVAL,
                    "%s: 'sequence.mlp_moe' is not empty but the model config has no experts",
                    c->path);
    return 0;
}

/*
 * moe.csv (tokens,activated_experts,time_us): the MoE block of one layer for a number of tokens
 * routed to a number of distinct experts; the profiler keeps activated_experts between
 * experts_per_tok and min(experts, tokens x experts_per_tok), so each token count has its own
 * range. Rows sorted by tokens, then experts.
 */
static int load_moe(struct kvsim_profile *p, const char *path, char *err, size_t errlen)
{
    struct csv c;
    int rc = csv_open(&c, path, "tokens,activated_experts,time_us", err, errlen);
    if (rc)
        return rc;
    char *f[3] = {0};
    uint32_t cap_t = 0, cap_r = 0;
    while ((rc = csv_next(&c, f, 3, err, errlen)) == 1) {
        double t = 0, a = 0, y = 0;
        if ((rc = csv_number(&c, f[0], "tokens", PROFILE_AXIS_MAX, &t, err, errlen)) ||
            (rc = csv_number(&c, f[1], "activated_experts", PROFILE_AXIS_MAX, &a, err, errlen)) ||
            (rc = csv_number(&c, f[2], "time_us", PROFILE_TIME_MAX_US, &y, err, errlen)))
            break;
        if (t < 1 || a < 1) {
            rc = fail(err, errlen, -EINVAL, "%s:%u: field '%s' must be >= 1", path, c.line,
                      t < 1 ? "tokens" : "activated_experts");
            break;
        }
        struct prof_curve *row = p->moe_nt ? &p->moe_rows[p->moe_nt - 1] : NULL;
        if (!row || t > p->moe_tokens[p->moe_nt - 1]) {
            if ((rc = grow((void **)&p->moe_tokens, &cap_t, p->moe_nt + 1, sizeof(double))) ||
                (rc = grow((void **)&p->moe_rows, &cap_r, p->moe_nt + 1, sizeof *row)))
                break;
            row = &p->moe_rows[p->moe_nt];
            memset(row, 0, sizeof *row);
            p->moe_tokens[p->moe_nt++] = t;
        } else if (t < p->moe_tokens[p->moe_nt - 1] || a <= row->x[row->n - 1]) {
            rc = fail(err, errlen, -EINVAL,
                      "%s:%u: rows must be sorted by tokens, then by increasing activated_experts",
                      path, c.line);
            break;
        }
        double *nx = realloc(row->x, (row->n + 1) * sizeof *nx);
        if (nx)
            row->x = nx;
        double *ny = nx ? realloc(row->y, (row->n + 1) * sizeof *ny) : NULL;
        if (!nx || !ny) {
            rc = -ENOMEM;
            break;
        }
        row->y = ny;
        row->x[row->n] = a;
        row->y[row->n++] = y;
    }
    csv_close(&c);
    if (rc >= 0 && !p->moe_nt)
        rc = fail(err, errlen, -EINVAL, "%s: no rows", path);
    return rc < 0 ? rc : 0;
}

static int load_dense(struct kvsim_profile *p, const char *root, const char *dir, char *err,
                      size_t errlen)
{
    char dense[1100], perseq[1100];
    path_fmt(dense, sizeof dense, "%s/tp%u/dense.csv", dir, p->tp);
    path_fmt(perseq, sizeof perseq, "%s/tp%u/per_sequence.csv", dir, p->tp);
    struct op_table d = {0}, s = {0};
    struct catalog c;
    int rc = load_ops(dense, "layer,tokens,time_us", "tokens", &d, err, errlen);
    if (!rc)
        rc = load_ops(perseq, "layer,sequences,time_us", "sequences", &s, err, errlen);
    if (rc)
        goto out_tables;
    if ((rc = load_catalog(&c, root, p->arch.model_type, err, errlen)))
        goto out_tables;
    p->max_tokens = (uint32_t)max_x(&d);
    p->max_seqs = (uint32_t)max_x(&s);
    p->once_us = calloc((size_t)p->max_tokens + 1, sizeof(double));
    p->layer_us = calloc((size_t)p->max_tokens + 1, sizeof(double));
    p->seq_us = calloc((size_t)p->max_seqs + 1, sizeof(double));
    if (!p->once_us || !p->layer_us || !p->seq_us || !p->max_tokens || !p->max_seqs) {
        rc = p->max_tokens && p->max_seqs
                 ? -ENOMEM
                 : fail(err, errlen, -EINVAL, "%s, %s: no rows", dense, perseq);
        goto out;
    }
    uint32_t attention = 0;
    static const char *layer_parts[3] = {"pre_attn", "post_attn", "mlp_dense"};
    static const char *once_parts[2] = {"prologue", "head"};
    for (int i = 0; i < 3 && !rc; i++)
        rc = add_part(&c, layer_parts[i], c.dense, p->layer_us, p->max_tokens, &d, dense,
                      &attention, false, err, errlen);
    for (int i = 0; i < 2 && !rc; i++)
        rc = add_part(&c, once_parts[i], c.dense, p->once_us, p->max_tokens, &d, dense, NULL, true,
                      err, errlen);
    for (int i = 0; i < 2 && !rc; i++)
        rc = add_part(&c, once_parts[i], c.per_seq, p->seq_us, p->max_seqs, &s, perseq, NULL, true,
                      err, errlen);
    if (!rc && attention != 1)
        rc = fail(err, errlen, -EINVAL,
                  "%s: a layer runs the attention operator %u times (kvsim models one)", c.path,
                  attention);
    if (!rc)
        rc = check_moe_part(p, &c, err, errlen);
out:
    yaml_document_delete(&c.d);
out_tables:
    op_table_free(&d);
    op_table_free(&s);
    return rc;
}

/* ---- the model ------------------------------------------------------------------------------ */

/* One (pc, nd) slice at (kp, kd), bilinear. */
/* A value bracketed on an axis, kept while the corners of one lookup share that axis (most
 * slices have the same prefix and context axes: load_attention shares their arrays). */
struct bracket {
    const double *axis; /* NULL: nothing kept */
    uint32_t i0, i1;
    double w;
    bool out;
};

static double bracket_on(struct bracket *c, const double *x, uint32_t n, double v, uint32_t *i0,
                         uint32_t *i1, bool *out)
{
    if (c->axis != x) {
        c->axis = x;
        c->out = false;
        c->w = axis_bracket(x, n, v, &c->i0, &c->i1, &c->out);
    }
    *i0 = c->i0;
    *i1 = c->i1;
    *out = *out || c->out;
    return c->w;
}

static double slice_at(const struct prof_slice *s, double kp, double kd, struct bracket cache[2],
                       bool *out)
{
    uint32_t a0, a1, b0, b1;
    double wa = bracket_on(&cache[0], s->kp, s->nkp, kp, &a0, &a1, out);
    double wb = bracket_on(&cache[1], s->kd, s->nkd, kd, &b0, &b1, out);
    const double *t = s->t;
    double v0 = t[(size_t)a0 * s->nkd + b0] +
                wb * (t[(size_t)a0 * s->nkd + b1] - t[(size_t)a0 * s->nkd + b0]);
    double v1 = t[(size_t)a1 * s->nkd + b0] +
                wb * (t[(size_t)a1 * s->nkd + b1] - t[(size_t)a1 * s->nkd + b0]);
    return v0 + wa * (v1 - v0);
}

/* The slice at (pc index, nd index), or the nearest profiled one at the same pc (*out set). */
static const struct prof_slice *slice_get(const struct kvsim_profile *p, uint32_t i, uint32_t j,
                                          bool *out)
{
    const struct prof_slice *s = &p->slice[(size_t)i * p->nnd + j];
    if (s->nkp)
        return s;
    *out = true;
    for (uint32_t d = 1; d < p->nnd; d++) {
        if (j >= d && p->slice[(size_t)i * p->nnd + j - d].nkp)
            return &p->slice[(size_t)i * p->nnd + j - d];
        if (j + d < p->nnd && p->slice[(size_t)i * p->nnd + j + d].nkp)
            return &p->slice[(size_t)i * p->nnd + j + d];
    }
    return NULL;
}

/* One layer's attention for a prefill chunk pc (prefix kp) with nd decodes at context kd. */
static double attention_at(const struct kvsim_profile *p, double pc, double kp, double nd,
                           double kd, bool *out)
{
    /* A batch of no decodes and a chunk below the smallest profiled one costs that chunk's time:
     * the pc axis starts at 0 only for decode-only batches. */
    if (nd == 0 && pc < p->pc[1]) {
        *out = true;
        pc = p->pc[1];
    }
    uint32_t i0, i1, j0, j1;
    double wi = axis_bracket(p->pc, p->npc, pc, &i0, &i1, out);
    double wj = axis_bracket(p->nd, p->nnd, nd, &j0, &j1, out);
    double c[2][2];
    uint32_t ii[2] = {i0, i1}, jj[2] = {j0, j1};
    int na = i0 == i1 ? 1 : 2, nb = j0 == j1 ? 1 : 2; /* on a grid line, one corner serves two */
    struct bracket cache[2] = {{0}, {0}};
    for (int a = 0; a < na; a++)
        for (int b = 0; b < nb; b++) {
            /* an empty corner ((0 chunk, 0 decodes)) weighs nothing: it is the other pc's */
            if (p->pc[ii[a]] == 0 && p->nd[jj[b]] == 0) {
                c[a][b] = NAN;
                continue;
            }
            const struct prof_slice *s = slice_get(p, ii[a], jj[b], out);
            c[a][b] = s ? slice_at(s, kp, kd, cache, out) : NAN;
        }
    for (int a = 0; a < 2; a++) {
        if (nb == 1)
            c[a][1] = c[a][0];
        if (a == 1 && na == 1)
            c[1][0] = c[0][0], c[1][1] = c[0][1];
    }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            if (isnan(c[a][b]))
                c[a][b] = !isnan(c[a][1 - b]) ? c[a][1 - b] : c[1 - a][b];
    double v0 = c[0][0] + wj * (c[0][1] - c[0][0]);
    double v1 = c[1][0] + wj * (c[1][1] - c[1][0]);
    return v0 + wi * (v1 - v0);
}

static double skew_alpha(const struct kvsim_profile *p, double pc, uint32_t n, double sr,
                         double kvb, double kp)
{
    if (!p->num_alpha || pc != floor(pc)) /* the fit is keyed by profiled chunk sizes */
        return p->alpha_default;
    struct prof_alpha k = {
        .key = alpha_key(pc, bins_label(&p->n_bins, n), bins_label(&p->sr_bins, sr),
                         bins_label(&p->kvb_bins, kvb), bins_label(&p->kp_bins, kp))};
    const struct prof_alpha *a = bsearch(&k, p->alpha, p->num_alpha, sizeof k, cmp_alpha);
    return a ? a->alpha : p->alpha_default;
}

/*
 * One layer's attention for the batch. The profile measured one prefill chunk with n decodes at
 * one context; a batch is mapped onto it as: the largest prefill chunk with the decodes at their
 * mean context, corrected for the spread of the contexts (t = t(mean) + alpha (t(max) - t(mean)),
 * alpha from the skew fit's bucket, as LLMServingSim); each further prefill chunk adds its own
 * time alone less a lone smallest chunk's (the launch one kernel already paid).
 */
static double batch_attention(const struct kvsim_profile *p, const struct kvsim_step_batch *b,
                              bool *out)
{
    uint32_t big = UINT32_MAX;
    for (uint32_t i = 0; i < b->num_prefill_reqs; i++)
        if (big == UINT32_MAX || b->prefill_chunk[i] > b->prefill_chunk[big])
            big = i;
    double pc = big == UINT32_MAX ? 0 : (double)b->prefill_chunk[big];
    double kp = big == UINT32_MAX ? 0 : (double)b->prefill_prefix[big];
    uint32_t n = b->num_decode_reqs;
    double sum = 0, lo = INFINITY, hi = 0;
    for (uint32_t i = 0; i < n; i++) {
        double k = (double)b->decode_context[i];
        sum += k;
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
    }
    double mean = n ? sum / n : 0;
    double t = attention_at(p, pc, kp, n, mean, out);
    if (n > 1 && hi > mean) {
        double sr = (mean - lo) / (hi - lo);
        double alpha = skew_alpha(p, pc, n, sr, hi, kp);
        double tmax = alpha != 0 ? attention_at(p, pc, kp, n, hi, out) : t;
        if (tmax > t)
            t += alpha * (tmax - t);
    }
    for (uint32_t i = 0; i < b->num_prefill_reqs; i++) {
        if (i == big)
            continue;
        double extra =
            attention_at(p, b->prefill_chunk[i], (double)b->prefill_prefix[i], 0, 0, out) -
            p->attn_launch_us;
        t += extra > 0 ? extra : 0;
    }
    return t > p->attn_min_us ? t : p->attn_min_us;
}

/* The ring all-reduce of a layer's output over tp ranks: 2 (tp - 1) messages of a 1/tp share. */
static double allreduce_us(const struct kvsim_profile *p, uint64_t tokens)
{
    if (p->tp < 2)
        return 0;
    double bytes = (double)tokens * p->arch.hidden_size * p->arch.dtype_bytes / p->tp;
    return 2.0 * (p->tp - 1) * ((double)p->link_latency_ns + bytes / p->link_bytes_per_ns) / 1e3;
}

/*
 * One layer's MoE block on this rank for a step of `tokens` tokens, with moe.csv read at the
 * rank's share of the work (docs/fidelity/timing.md, "Mixture of experts"):
 *
 *   group tokens  G = tokens x dp     every DP rank is assumed to step as many tokens (the
 *                                     ranks' lockstep is the next issue's)
 *   MoE ranks     R = tp x dp with expert parallelism (each holds experts / R whole experts),
 *                 else 1 (every rank runs a 1 / (tp x dp) slice of every expert: that slice's
 *                 own moe.csv, tp<tp x dp>/moe.csv)
 *   activated     A = (experts / R) x (1 - (1 - k / experts)^G)   the expected distinct experts
 *                 of the rank's own, with every token's k experts drawn uniformly
 *   tokens read   G / R: the tokens whose k experts each make the rank's G x k / R assignments
 *
 * Both axes interpolated linearly and clamped at the grid's edges (each token row at its own
 * range of activated experts); *out when a value was clamped.
 */
static double moe_layer_us(const struct kvsim_profile *p, double tokens, bool *out)
{
    double e = p->arch.num_experts, k = p->arch.experts_per_tok;
    double g = tokens * p->dp, r = p->ep ? (double)p->tp * p->dp : 1.0;
    double active = e / r * (1.0 - pow(1.0 - k / e, g));
    double t = g / r;
    uint32_t i0, i1;
    double w = axis_bracket(p->moe_tokens, p->moe_nt, t, &i0, &i1, out);
    const struct prof_curve *r0 = &p->moe_rows[i0], *r1 = &p->moe_rows[i1];
    if (active > r1->x[r1->n - 1] * (1 + 1e-9) || active < r0->x[0] * (1 - 1e-9))
        *out = true; /* outside the rows' ranges (only where the token axis clamps) */
    double v0 = curve_at(r0, active), v1 = curve_at(r1, active);
    return v0 + w * (v1 - v0);
}

/*
 * The DP ranks' exchange around each MoE block (vLLM's default all2all backend,
 * allgather_reducescatter: vllm/distributed/device_communicators/all2all.py, AgRsAll2AllManager):
 * dispatch all-gathers every rank's hidden states and router logits ((hidden + experts) x dtype
 * bytes a token), combine reduce-scatters the experts' outputs (hidden x dtype a token); each a
 * ring of dp - 1 messages on the link, as the TP all-reduce. Zero at dp 1.
 */
static double moe_exchange_us(const struct kvsim_profile *p, double tokens)
{
    if (p->dp < 2 || !p->moe_nt)
        return 0;
    double lat = (double)p->link_latency_ns, bw = p->link_bytes_per_ns, d = p->arch.dtype_bytes;
    double dispatch = tokens * (p->arch.hidden_size + p->arch.num_experts) * d;
    double combine = tokens * p->arch.hidden_size * d; /* G x hidden / dp a message */
    return (p->dp - 1) * (2 * lat + dispatch / bw + combine / bw) / 1e3;
}

double kvsim_profile__step_us(const struct kvsim_profile *p, const struct kvsim_step_batch *b,
                              unsigned *outside)
{
    uint64_t tokens = b->prefill_tokens + b->num_decode_reqs;
    uint64_t seqs = (uint64_t)b->num_prefill_reqs + b->num_decode_reqs;
    unsigned mask = 0;
    if (tokens > p->max_tokens) {
        mask |= KVSIM_PROFILE_TOKENS;
        tokens = p->max_tokens;
    }
    if (seqs > p->max_seqs) {
        mask |= KVSIM_PROFILE_SEQUENCES;
        seqs = p->max_seqs;
    }
    bool out = false;
    double attn = batch_attention(p, b, &out);
    if (out)
        mask |= KVSIM_PROFILE_ATTENTION;
    double moe = 0;
    if (p->moe_nt) {
        bool mout = false;
        moe = moe_layer_us(p, (double)(b->prefill_tokens + b->num_decode_reqs), &mout) +
              moe_exchange_us(p, (double)(b->prefill_tokens + b->num_decode_reqs));
        if (mout)
            mask |= KVSIM_PROFILE_TOKENS; /* moe.csv clamped: counted on the tokens axis */
    }
    if (outside)
        *outside = mask;
    double layer = p->layer_us[tokens] + attn + moe + 2 * allreduce_us(p, tokens);
    return p->once_us[tokens] + p->seq_us[seqs] + p->arch.num_layers * layer;
}

double kvsim_profile__min_step_us(const struct kvsim_profile *p) { return p->min_step_us; }

/*
 * An upper bound on any step of at most max_seqs sequences: each term's largest value, and the
 * attention of one layer at most the largest profiled time for the biggest chunk with its skew
 * correction (alpha) plus one more for each further prefill chunk (batch_attention).
 */
double kvsim_profile__max_step_us(const struct kvsim_profile *p, uint32_t max_seqs)
{
    double once = 0, layer = 0, seq = 0, attn = 0, alpha = p->alpha_default;
    for (uint32_t t = 1; t <= p->max_tokens; t++) {
        once = p->once_us[t] > once ? p->once_us[t] : once;
        layer = p->layer_us[t] > layer ? p->layer_us[t] : layer;
    }
    for (uint32_t s = 1; s <= p->max_seqs; s++)
        seq = p->seq_us[s] > seq ? p->seq_us[s] : seq;
    for (size_t i = 0; i < (size_t)p->npc * p->nnd; i++)
        for (size_t k = 0; k < (size_t)p->slice[i].nkp * p->slice[i].nkd; k++)
            attn = p->slice[i].t[k] > attn ? p->slice[i].t[k] : attn;
    for (uint32_t i = 0; i < p->num_alpha; i++)
        alpha = p->alpha[i].alpha > alpha ? p->alpha[i].alpha : alpha;
    double chunks = max_seqs > 1 ? max_seqs - 1 : 0;
    double attn_max = attn * (1 + (alpha > 0 ? alpha : 0) + chunks);
    double moe = 0; /* interpolation stays within the table; the exchange grows with tokens */
    for (uint32_t i = 0; i < p->moe_nt; i++)
        for (uint32_t j = 0; j < p->moe_rows[i].n; j++)
            moe = p->moe_rows[i].y[j] > moe ? p->moe_rows[i].y[j] : moe;
    moe += moe_exchange_us(p, p->max_tokens);
    return once + seq +
           p->arch.num_layers * (layer + attn_max + moe + 2 * allreduce_us(p, p->max_tokens));
}

/* A lower bound on any step: each term's smallest value (interpolation stays within them). */
static void compute_min_step(struct kvsim_profile *p)
{
    double once = INFINITY, layer = INFINITY, seq = INFINITY;
    for (uint32_t t = 1; t <= p->max_tokens; t++) {
        once = p->once_us[t] < once ? p->once_us[t] : once;
        layer = p->layer_us[t] < layer ? p->layer_us[t] : layer;
    }
    for (uint32_t s = 1; s <= p->max_seqs; s++)
        seq = p->seq_us[s] < seq ? p->seq_us[s] : seq;
    double moe = p->moe_nt ? INFINITY : 0;
    for (uint32_t i = 0; i < p->moe_nt; i++)
        for (uint32_t j = 0; j < p->moe_rows[i].n; j++)
            moe = p->moe_rows[i].y[j] < moe ? p->moe_rows[i].y[j] : moe;
    moe += moe_exchange_us(p, 0);
    p->min_step_us =
        once + seq + p->arch.num_layers * (layer + p->attn_min_us + moe + 2 * allreduce_us(p, 0));
}

void kvsim_profile_free(struct kvsim_profile *p)
{
    if (!p)
        return;
    free(p->once_us);
    free(p->layer_us);
    free(p->seq_us);
    if (p->slice)
        for (size_t i = 0; i < (size_t)p->npc * p->nnd; i++) {
            if (!p->slice[i].kp_shared)
                free(p->slice[i].kp);
            if (!p->slice[i].kd_shared)
                free(p->slice[i].kd);
            free(p->slice[i].t);
        }
    free(p->slice);
    free(p->pc);
    free(p->nd);
    free(p->n_bins.edge);
    free(p->sr_bins.edge);
    free(p->kvb_bins.edge);
    free(p->kp_bins.edge);
    free(p->alpha);
    for (uint32_t i = 0; i < p->moe_nt; i++) {
        free(p->moe_rows[i].x);
        free(p->moe_rows[i].y);
    }
    free(p->moe_rows);
    free(p->moe_tokens);
    free(p);
}

const struct kvsim_model_arch *kvsim_profile_arch(const struct kvsim_profile *p)
{
    return &p->arch;
}
const char *kvsim_profile_dir(const struct kvsim_profile *p) { return p->dir; }
const char *kvsim_profile_hardware(const struct kvsim_profile *p) { return p->hardware; }
uint32_t kvsim_profile_tp(const struct kvsim_profile *p) { return p->tp; }

int kvsim_profile_load(const struct kvsim_profile_config *cfg, struct kvsim_profile **out,
                       char *err, size_t errlen)
{
    if (!cfg->root || !cfg->hardware || !cfg->model || !strchr(cfg->model, '/'))
        return fail(err, errlen, -EINVAL,
                    "a profile needs a root, a hardware and a model ORG/NAME");
    if (cfg->tp < 1)
        return fail(err, errlen, -EINVAL, "tp must be at least 1");
    if ((cfg->tp > 1 || cfg->data_parallel_size > 1) &&
        !(cfg->tp_link_gbps > 0 && cfg->tp_link_latency_ns >= 0))
        return fail(err, errlen, -EINVAL,
                    "tp %u, dp %u needs a link bandwidth > 0 and a latency >= 0 for its "
                    "collectives",
                    cfg->tp, cfg->data_parallel_size);
    struct kvsim_profile *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->tp = cfg->tp;
    p->dp = cfg->data_parallel_size > 1 ? cfg->data_parallel_size : 1;
    p->ep = cfg->enable_expert_parallel;
    p->link_bytes_per_ns = cfg->tp_link_gbps * 1073741824.0 / 1e9;
    p->link_latency_ns = cfg->tp_link_latency_ns;
    char dir[1024], path[1100];
    path_fmt(path, sizeof path, "%s/configs/model/%s.json", cfg->root, cfg->model);
    int rc = kvsim_model_arch_load(path, cfg->model, &p->arch, err, errlen);
    path_fmt(dir, sizeof dir, "%s/%s/%s/bf16", cfg->root, cfg->hardware, cfg->model);
    path_fmt(p->dir, sizeof p->dir, "%s/tp%u", dir, cfg->tp);
    snprintf(p->hardware, sizeof p->hardware, "%.63s", cfg->hardware);
    if (!rc && p->arch.dtype_bytes != 2)
        rc = fail(err, errlen, -EINVAL, "%s: kvsim reads bf16 profiles (%s/bf16/) only", path,
                  cfg->model);
    if (!rc)
        rc = load_dense(p, cfg->root, dir, err, errlen);
    if (!rc) {
        path_fmt(path, sizeof path, "%s/tp%u/attention.csv", dir, cfg->tp);
        rc = load_attention(p, path, err, errlen);
    }
    if (!rc)
        rc = load_meta(p, dir, err, errlen);
    if (!rc && p->arch.num_experts) {
        /* With expert parallelism a rank runs whole experts: the tp1 table; without it a
         * 1 / (tp x dp) slice of each: that degree's table. */
        uint32_t moe_tp = p->ep ? 1 : p->tp * p->dp;
        path_fmt(p->moe_path, sizeof p->moe_path, "%s/tp%u/moe.csv", dir, moe_tp);
        rc = load_moe(p, p->moe_path, err, errlen);
        if (rc == -ENOENT || (rc && strstr(err, "cannot open")))
            snprintf(err + strlen(err), errlen - strlen(err),
                     " (the MoE layers of %s at tp %u x dp %u %s need the experts profiled at "
                     "tp %u)",
                     cfg->model, p->tp, p->dp,
                     p->ep ? "with expert parallelism" : "without expert parallelism", moe_tp);
    }
    if (rc) {
        kvsim_profile_free(p);
        return rc;
    }
    compute_min_step(p);
    *out = p;
    return 0;
}
