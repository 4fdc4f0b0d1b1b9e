/*
 * trace.c - loading request traces from files (input.h): the loader shared by the formats,
 * arrival normalization, sorting, and the file loop. The formats' rows are parsed by
 * mooncake.c, azure.c and vllm_run.c.
 *
 * One pass over the file, line by line: every row is validated strictly (no silent skips) and
 * appended in file order, with its raw source time kept aside. A second pass turns raw times
 * into normalized arrivals and session delays; a final sort orders requests by arrival.
 */
#include "runtime/input/input_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

/* ---- growable arrays, errors ------------------------------------------------------------- */

/* Makes room for need elements of size elem in *p (capacity *cap). Returns 0 or -ENOMEM. */
int input__grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return -ENOMEM;
        n *= 2;
    }
    if (n > SIZE_MAX / elem)
        return -ENOMEM;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* Copies at most INPUT__QUOTE_MAX bytes of s[0..n) into buf, printable ASCII only ('?' otherwise).
 */
const char *input__quote(char *buf, size_t buflen, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < buflen; i++) {
        if (i == INPUT__QUOTE_MAX) {
            memcpy(buf + k, "...", 3);
            k += 3;
            break;
        }
        unsigned char c = (unsigned char)s[i];
        buf[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    buf[k] = 0;
    return buf;
}

const char *kvsim_trace_format_name(enum kvsim_trace_format format)
{
    switch (format) {
    case KVSIM_TRACE_AUTO: return "auto";
    case KVSIM_TRACE_MOONCAKE: return "mooncake";
    case KVSIM_TRACE_AZURE: return "azure";
    case KVSIM_TRACE_SYNTHETIC: return "synthetic";
    case KVSIM_TRACE_VLLM_RUN: return "vllm-run";
    }
    return "?";
}

void kvsim_trace_opts_default(struct kvsim_trace_opts *o)
{
    memset(o, 0, sizeof *o);
    o->format = KVSIM_TRACE_AUTO;
    o->trace_block_size = 512;
    o->arrival_speedup = 1.0;
    o->max_requests = 0;
}

void kvsim_trace_free(struct kvsim_trace *t)
{
    if (!t)
        return;
    free(t->reqs);
    free(t->hash_ids);
    memset(t, 0, sizeof *t);
}

/* ---- sorting ----------------------------------------------------------------------------- */

struct sort_key {
    int64_t arrival_ns;
    uint32_t line;
    size_t index; /* position before sorting: makes every key unique, so the order is total */
};

static int sort_key_cmp(const void *pa, const void *pb)
{
    const struct sort_key *a = pa, *b = pb;
    if (a->arrival_ns != b->arrival_ns)
        return a->arrival_ns < b->arrival_ns ? -1 : 1;
    if (a->line != b->line)
        return a->line < b->line ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

int input__trace_sort(struct kvsim_trace *t)
{
    size_t n = t->num_reqs;
    if (n < 2)
        return 0;
    /* Already in key order (the index only grows)? Most traces are, and a cold process then
     * skips the sort and three arrays' worth of fresh pages. */
    size_t k = 1;
    for (; k < n; k++) {
        const struct kvsim_req_spec *a = &t->reqs[k - 1], *b = &t->reqs[k];
        if (a->arrival_ns > b->arrival_ns || (a->arrival_ns == b->arrival_ns && a->line > b->line))
            break;
    }
    if (k == n)
        return 0;
    struct sort_key *keys = malloc(n * sizeof *keys);
    size_t *new_index = malloc(n * sizeof *new_index);
    struct kvsim_req_spec *sorted = malloc(n * sizeof *sorted);
    if (!keys || !new_index || !sorted) {
        free(keys);
        free(new_index);
        free(sorted);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (struct sort_key){t->reqs[i].arrival_ns, t->reqs[i].line, i};
    qsort(keys, n, sizeof *keys, sort_key_cmp);
    for (size_t i = 0; i < n; i++)
        new_index[keys[i].index] = i;
    for (size_t i = 0; i < n; i++) {
        sorted[i] = t->reqs[keys[i].index];
        if (sorted[i].prev_turn >= 0)
            sorted[i].prev_turn = (int32_t)new_index[sorted[i].prev_turn];
    }
    free(t->reqs);
    t->reqs = sorted;
    free(keys);
    free(new_index);
    return 0;
}

/* Formats "<file>: <msg>" (line 0) or "<file>:<line>: <msg>" into the error buffer; returns rc. */
int input__fail(struct loader *ld, int rc, uint32_t line, const char *fmt, ...)
{
    if (!ld->err || ld->errlen == 0)
        return rc;
    int k = line ? snprintf(ld->err, ld->errlen, "%s:%" PRIu32 ": ", ld->path, line)
                 : snprintf(ld->err, ld->errlen, "%s: ", ld->path);
    if (k >= 0 && (size_t)k < ld->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ld->err + k, ld->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* "<file>:<line>: field '<name>': <msg>"; returns -EINVAL. */
int input__fail_field(struct loader *ld, uint32_t line, const char *field, const char *fmt, ...)
{
    char q[INPUT__QUOTE_MAX + 8];
    if (!ld->err || ld->errlen == 0)
        return -EINVAL;
    int k = snprintf(ld->err, ld->errlen, "%s:%" PRIu32 ": field '%s': ", ld->path, line,
                     input__quote(q, sizeof q, field, strlen(field)));
    if (k >= 0 && (size_t)k < ld->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ld->err + k, ld->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

int input__oom(struct loader *ld) { return input__fail(ld, -ENOMEM, 0, "out of memory"); }

/* Appends a zeroed request (independent, no hashes) with its raw time; NULL when out of memory. */
struct kvsim_req_spec *input__add_req(struct loader *ld, uint32_t line, int64_t raw_ts)
{
    struct kvsim_trace *t = ld->t;
    if (t->num_reqs >= (size_t)INT32_MAX)
        return NULL;
    if (t->num_reqs == ld->cap_reqs) { /* the three arrays share one capacity */
        size_t c1 = ld->cap_reqs, c2 = ld->cap_reqs, c3 = ld->cap_reqs;
        if (input__grow((void **)&t->reqs, &c1, t->num_reqs + 1, sizeof *t->reqs) ||
            input__grow((void **)&ld->raw_ts, &c2, t->num_reqs + 1, sizeof *ld->raw_ts) ||
            input__grow((void **)&ld->raw_delay, &c3, t->num_reqs + 1, sizeof *ld->raw_delay))
            return NULL;
        ld->cap_reqs = c1;
    }
    struct kvsim_req_spec *r = &t->reqs[t->num_reqs];
    memset(r, 0, sizeof *r);
    r->line = line;
    r->session = -1;
    r->prev_turn = -1;
    ld->raw_ts[t->num_reqs] = raw_ts;
    ld->raw_delay[t->num_reqs] = -1;
    t->num_reqs++;
    return r;
}

/*
 * Looks key up in the session table, adding it as a new session if absent. Sets *session and
 * *is_new. Returns 0 or -ENOMEM.
 */
int input__session_lookup(struct loader *ld, const char *key, size_t len, int32_t *session,
                          bool *is_new)
{
    if ((ld->t->num_sessions + 1) * 2 > ld->num_slots) { /* keep the load factor <= 1/2 */
        size_t n = ld->num_slots ? ld->num_slots * 2 : 64;
        struct session_slot *s = calloc(n, sizeof *s);
        if (!s)
            return -ENOMEM;
        for (size_t i = 0; i < ld->num_slots; i++) {
            if (!ld->slots[i].key)
                continue;
            size_t j = ld->slots[i].hash & (n - 1);
            while (s[j].key)
                j = (j + 1) & (n - 1);
            s[j] = ld->slots[i];
        }
        free(ld->slots);
        ld->slots = s;
        ld->num_slots = n;
    }
    uint64_t h = XXH3_64bits(key, len);
    size_t j = h & (ld->num_slots - 1);
    for (; ld->slots[j].key; j = (j + 1) & (ld->num_slots - 1)) {
        struct session_slot *s = &ld->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            *session = s->session;
            *is_new = false;
            return 0;
        }
    }
    if (ld->t->num_sessions >= (uint32_t)INT32_MAX)
        return -ENOMEM;
    size_t cap = ld->cap_last;
    if (input__grow((void **)&ld->last_turn, &cap, ld->t->num_sessions + 1, sizeof *ld->last_turn))
        return -ENOMEM;
    ld->cap_last = cap;
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, key, len);
    ld->slots[j] = (struct session_slot){copy, len, h, (int32_t)ld->t->num_sessions};
    *session = (int32_t)ld->t->num_sessions++;
    *is_new = true;
    return 0;
}

static void loader_fini(struct loader *ld)
{
    for (size_t i = 0; i < ld->num_slots; i++)
        free(ld->slots[i].key);
    free(ld->slots);
    free(ld->last_turn);
    free(ld->raw_ts);
    free(ld->raw_delay);
    free(ld->scan);
}

/* Divides a non-negative duration by arrival_speedup. Returns false if it overflows int64. */
static bool scale(const struct loader *ld, int64_t ns, int64_t *out)
{
    double s = ld->opts->arrival_speedup;
    if (s == 1.0) {
        *out = ns;
        return true;
    }
    double v = (double)ns / s;
    if (!(v < 0x1p63))
        return false;
    *out = (int64_t)llround(v);
    return true;
}

/*
 * Turns raw times into arrivals and delays (file order, so a later turn's previous turn is
 * already done): arrivals relative to the earliest first-turn/independent time, gaps and delays
 * divided by the speedup; a later turn's arrival is its previous turn's plus its delay.
 */
static int normalize(struct loader *ld)
{
    struct kvsim_trace *t = ld->t;
    int64_t t0 = INT64_MAX;
    for (size_t i = 0; i < t->num_reqs; i++)
        if (t->reqs[i].prev_turn < 0 && ld->raw_ts[i] < t0)
            t0 = ld->raw_ts[i];
    for (size_t i = 0; i < t->num_reqs; i++) {
        struct kvsim_req_spec *r = &t->reqs[i];
        if (r->prev_turn < 0) {
            if (!scale(ld, ld->raw_ts[i] - t0, &r->arrival_ns))
                return input__fail(ld, -EINVAL, r->line,
                                   "arrival time overflows after arrival_speedup");
            r->delay_ns = 0;
            continue;
        }
        const struct kvsim_req_spec *p = &t->reqs[r->prev_turn];
        int64_t d = ld->raw_delay[i];
        if (d < 0) { /* no explicit delay: the gap between the two turns' timestamps, if any */
            d = ld->raw_ts[i] - ld->raw_ts[r->prev_turn];
            if (d < 0)
                d = 0;
        }
        if (!scale(ld, d, &r->delay_ns) || r->delay_ns > INT64_MAX - p->arrival_ns)
            return input__fail(ld, -EINVAL, r->line,
                               "arrival time overflows after arrival_speedup");
        r->arrival_ns = p->arrival_ns + r->delay_ns;
    }
    return 0;
}

/* A line holding only spaces, tabs, CR and LF. */
static bool is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}
/* ---- the file ---------------------------------------------------------------------------- */

/* The format a name says: .jsonl/.json Mooncake, .csv Azure, either with .gz after it. */
enum kvsim_trace_format kvsim_trace_format_from_path(const char *path)
{
    if (strcmp(path, "-") == 0)
        return KVSIM_TRACE_AUTO;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char name[256];
    size_t n = strlen(base);
    if (n >= sizeof name)
        return KVSIM_TRACE_AUTO;
    memcpy(name, base, n + 1);
    if (n > 3 && strcasecmp(name + n - 3, ".gz") == 0)
        name[n - 3] = 0;
    const char *dot = strrchr(name, '.');
    if (!dot)
        return KVSIM_TRACE_AUTO;
    if (strcasecmp(dot, ".jsonl") == 0 || strcasecmp(dot, ".json") == 0)
        return KVSIM_TRACE_MOONCAKE;
    if (strcasecmp(dot, ".csv") == 0)
        return KVSIM_TRACE_AZURE;
    return KVSIM_TRACE_AUTO;
}

/* The error of a line that could not be read (kvsim_read_line's outcome): names the file and the
 * line. */
static int read_failed(struct loader *ld, const struct input_source *src, enum kvsim_read got,
                       uint32_t line)
{
    if (got == KVSIM_READ_TOO_LONG)
        return input__fail(ld, -EINVAL, line, "line longer than %zu MiB",
                           KVSIM_INPUT_MAX_LINE_BYTES >> 20);
    if (got == KVSIM_READ_NOMEM)
        return input__fail(ld, -ENOMEM, line, "out of memory");
    int e = input__source_error(src); /* what the source saw, before any errno of stdio */
    if (!e)
        e = errno ? errno : EIO;
    return e == EILSEQ ? input__fail(ld, -EINVAL, line, "corrupt or truncated gzip stream")
                       : input__fail(ld, -e, line, "read error: %s", strerror(e));
}

/* Reads the file line by line into ld->t (file order, raw times). */
static int read_rows(struct loader *ld, FILE *f, const struct input_source *src,
                     enum kvsim_trace_format format)
{
    static const char bom[] = "\xEF\xBB\xBF";
    struct azure_state az = {0};
    uint64_t max = ld->opts->max_requests;
    char *buf = NULL;
    size_t cap = 0;
    uint32_t line = 0;
    int rc = 0;
    for (;;) {
        if (max && ld->t->num_reqs >= max)
            break;
        size_t n;
        errno = 0;
        enum kvsim_read got = kvsim_read_line(f, &buf, &cap, KVSIM_INPUT_MAX_LINE_BYTES, &n);
        if (got == KVSIM_READ_END)
            break;
        if (line == UINT32_MAX) {
            rc = input__fail(ld, -EINVAL, 0, "more than %" PRIu32 " lines", UINT32_MAX);
            break;
        }
        line++;
        if (got != KVSIM_READ_LINE) {
            rc = read_failed(ld, src, got, line);
            break;
        }
        const char *s = buf;
        if (line == 1 && n >= 3 && memcmp(s, bom, 3) == 0) { /* a UTF-8 byte order mark */
            s += 3;
            n -= 3;
        }
        if (format == KVSIM_TRACE_AZURE && line == 1) {
            if ((rc = input__azure_header(ld, s, n)) != 0)
                break;
            continue;
        }
        if (is_blank(s, n))
            continue;
        if (format == KVSIM_TRACE_AZURE)
            rc = input__azure_line(ld, &az, line, s, n);
        else if (format == KVSIM_TRACE_VLLM_RUN)
            rc = input__vllm_run_line(ld, line, s, n);
        else
            rc = input__mooncake_line(ld, line, s, n);
        if (rc)
            break;
    }
    free(buf);
    return rc;
}

/*
 * Sizes the request and hash-id arrays for a file of `size` bytes before reading it, at the
 * densest rows plausible: a Mooncake row of 64 bytes, a hash id of 8 ("12345, "), an Azure row of
 * 32 bytes. Growing them by doubling instead would write every element twice or more, into
 * fresh pages each time: on the conversation trace a cold process took 38 % fewer page faults
 * (about 1,970 -> 1,220) and about 2 ms less to load. Pages past what the rows fill are never
 * touched, so they cost address space, not memory. Best effort: if a reservation cannot be had,
 * the arrays grow as before. size < 0: unknown (stdin, gzip), nothing reserved; with
 * --max-requests the requests are capped by it and the hash ids, whose share of the file is
 * unknown then, grow as before.
 */
#define RESERVE_MAX_REQS (UINT64_C(1) << 24) /* about 1 GB of address space for the requests */
#define RESERVE_MAX_IDS  (UINT64_C(1) << 27) /* and 1 GB for the hash ids */

static void reserve_for_size(struct loader *ld, int64_t size, enum kvsim_trace_format format)
{
    if (size <= 0 || (format != KVSIM_TRACE_MOONCAKE && format != KVSIM_TRACE_AZURE))
        return;
    uint64_t reqs = (uint64_t)size / (format == KVSIM_TRACE_MOONCAKE ? 64 : 32) + 1;
    if (ld->opts->max_requests && reqs > ld->opts->max_requests)
        reqs = ld->opts->max_requests;
    if (reqs > RESERVE_MAX_REQS)
        reqs = RESERVE_MAX_REQS;
    size_t c1 = 0, c2 = 0, c3 = 0;
    if (input__grow((void **)&ld->t->reqs, &c1, reqs, sizeof *ld->t->reqs) == 0 &&
        input__grow((void **)&ld->raw_ts, &c2, reqs, sizeof *ld->raw_ts) == 0 &&
        input__grow((void **)&ld->raw_delay, &c3, reqs, sizeof *ld->raw_delay) == 0)
        ld->cap_reqs = c1; /* the three share one capacity: only when all three have it */
    if (format == KVSIM_TRACE_MOONCAKE && !ld->opts->max_requests) { /* a prefix: unknown */
        uint64_t ids = (uint64_t)size / 8 + 1;
        if (ids > RESERVE_MAX_IDS)
            ids = RESERVE_MAX_IDS;
        (void)input__grow((void **)&ld->t->hash_ids, &ld->cap_hashes, ids, sizeof *ld->t->hash_ids);
    }
}

int kvsim_trace_load(const char *path, const struct kvsim_trace_opts *opts, struct kvsim_trace *out,
                     char *err, size_t errlen)
{
    return input__trace_load(path, opts, false, out, err, errlen);
}

int input__trace_load(const char *path, const struct kvsim_trace_opts *opts, bool jansson_only,
                      struct kvsim_trace *out, char *err, size_t errlen)
{
    struct kvsim_trace_opts defaults;
    if (!opts) {
        kvsim_trace_opts_default(&defaults);
        opts = &defaults;
    }
    memset(out, 0, sizeof *out);
    if (err && errlen)
        err[0] = 0;
    bool is_stdin = strcmp(path, "-") == 0;
    struct loader ld = {.path = is_stdin ? "standard input" : path,
                        .opts = opts,
                        .t = out,
                        .err = err,
                        .errlen = errlen,
                        .jansson_only = jansson_only};

    enum kvsim_trace_format format = opts->format;
    if (format == KVSIM_TRACE_AUTO) {
        format = kvsim_trace_format_from_path(path);
        if (format == KVSIM_TRACE_AUTO)
            return input__fail(&ld, -EINVAL, 0,
                               is_stdin ? "give the trace format (--format mooncake, azure or "
                                          "vllm-run)"
                                        : "cannot tell the trace format from the file name "
                                          "(expected .jsonl, .json or .csv, optionally .gz)");
    }
    if (format != KVSIM_TRACE_MOONCAKE && format != KVSIM_TRACE_AZURE &&
        format != KVSIM_TRACE_VLLM_RUN)
        return input__fail(&ld, -EINVAL, 0, "trace format '%s' cannot be loaded from a file",
                           kvsim_trace_format_name(format));
    if (opts->trace_block_size == 0)
        return input__fail(&ld, -EINVAL, 0, "trace_block_size must be >= 1");
    if (!(opts->arrival_speedup > 0) || !isfinite(opts->arrival_speedup))
        return input__fail(&ld, -EINVAL, 0,
                           "arrival_speedup must be a positive finite number, got %g",
                           opts->arrival_speedup);

    struct input_source *src;
    FILE *f;
    int rc = input__source_open(&ld, path, &src, &f);
    if (rc)
        return rc;
    out->format = format;
    out->block_size = format == KVSIM_TRACE_MOONCAKE ? opts->trace_block_size : 0;
    reserve_for_size(&ld, input__source_plain_size(src), format);
    rc = read_rows(&ld, f, src, format);
    int src_rc = input__source_close(src, f, rc ? NULL : out->sha256);
    if (!rc && src_rc)
        rc = src_rc == -EILSEQ ? input__fail(&ld, -EINVAL, 0, "corrupt or truncated gzip stream")
                               : input__fail(&ld, src_rc, 0, "read error: %s", strerror(-src_rc));
    if (!rc && out->num_reqs == 0)
        rc = input__fail(&ld, -EINVAL, 0, "empty trace (no requests)");
    if (!rc)
        rc = normalize(&ld);
    if (!rc && input__trace_sort(out))
        rc = input__oom(&ld);
    loader_fini(&ld);
    if (rc) {
        kvsim_trace_free(out);
        return rc;
    }
    if (out->num_hash_ids == 0)
        out->block_size = 0;
    return 0;
}

/* ---- prompts ------------------------------------------------------------------------------ */

uint32_t kvsim_prompt_runs(const struct kvsim_trace *t, uint32_t req, struct kvpool_token_run *runs,
                           uint32_t cap)
{
    const struct kvsim_req_spec *r = &t->reqs[req];
    if (r->num_hashes == 0) {
        /* No prefix information: a token no other request uses (hash ids stay below 2^31). */
        if (cap)
            runs[0] = (struct kvpool_token_run){0x80000000u | req, r->input_len};
        return 1;
    }
    uint32_t left = r->input_len, n = 0;
    for (uint32_t i = 0; i < r->num_hashes && left; i++) {
        uint32_t c = left < t->block_size ? left : t->block_size;
        if (n < cap)
            runs[n] = (struct kvpool_token_run){
                (kvpool_token)(t->hash_ids[r->hash_off + i] & 0x7fffffffu), c};
        n++;
        left -= c;
    }
    return n;
}
