/*
 * trace.c - loading Mooncake JSONL and Azure CSV request traces (runtime/trace.h).
 *
 * One pass over the file, line by line: every row is validated strictly (no silent skips) and
 * appended in file order, with its raw source time kept aside. A second pass turns raw times
 * into normalized arrivals and session delays; a final sort orders requests by arrival.
 */
#include "runtime/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

/* Largest accepted Mooncake time value (timestamp, delay): 10^12 ms, about 31 years. */
#define MAX_MS           1000000000000LL
/* Largest distance of an Azure row's time from the first row's: 100 years of 365.25 days. */
#define MAX_AZURE_SPAN_S 3155760000LL
/* Longest excerpt of a bad value quoted in an error message. */
#define QUOTE_MAX        48

static const char AZURE_HEADER[] = "TIMESTAMP,ContextTokens,GeneratedTokens";

/* ---- growable arrays, errors ------------------------------------------------------------- */

/* Makes room for need elements of size elem in *p (capacity *cap). Returns 0 or -ENOMEM. */
static int grow(void **p, size_t *cap, size_t need, size_t elem)
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

/* Copies at most QUOTE_MAX bytes of s[0..n) into buf, printable ASCII only ('?' otherwise). */
static const char *quote(char *buf, size_t buflen, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < buflen; i++) {
        if (i == QUOTE_MAX) {
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

int kvsim__trace_sort(struct kvsim_trace *t)
{
    size_t n = t->num_reqs;
    if (n < 2)
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

/* ---- the loader -------------------------------------------------------------------------- */

/* A session id seen in the file: "s<string bytes>" or "i<decimal integer>". */
struct session_slot {
    char *key; /* NULL = empty slot */
    size_t len;
    uint64_t hash;
    int32_t session;
};

struct loader {
    const char *path;
    const struct kvsim_trace_opts *opts;
    struct kvsim_trace *t;
    size_t cap_reqs, cap_hashes;
    int64_t *raw_ts;            /* per request (file order): source time, ns */
    int64_t *raw_delay;         /* per request (file order): explicit delay in ns, or -1 */
    struct session_slot *slots; /* open addressing, power-of-two size */
    size_t num_slots;
    int32_t *last_turn; /* per session: file-order index of its latest turn */
    size_t cap_last;
    char *err;
    size_t errlen;
};

static int fail(struct loader *ld, int rc, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_field(struct loader *ld, uint32_t line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Formats "<file>: <msg>" (line 0) or "<file>:<line>: <msg>" into the error buffer; returns rc. */
static int fail(struct loader *ld, int rc, uint32_t line, const char *fmt, ...)
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
static int fail_field(struct loader *ld, uint32_t line, const char *field, const char *fmt, ...)
{
    char q[QUOTE_MAX + 8];
    if (!ld->err || ld->errlen == 0)
        return -EINVAL;
    int k = snprintf(ld->err, ld->errlen, "%s:%" PRIu32 ": field '%s': ", ld->path, line,
                     quote(q, sizeof q, field, strlen(field)));
    if (k >= 0 && (size_t)k < ld->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ld->err + k, ld->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int oom(struct loader *ld) { return fail(ld, -ENOMEM, 0, "out of memory"); }

/* Appends a zeroed request (independent, no hashes) with its raw time; NULL when out of memory. */
static struct kvsim_req_spec *add_req(struct loader *ld, uint32_t line, int64_t raw_ts)
{
    struct kvsim_trace *t = ld->t;
    if (t->num_reqs >= (size_t)INT32_MAX)
        return NULL;
    if (t->num_reqs == ld->cap_reqs) { /* the three arrays share one capacity */
        size_t c1 = ld->cap_reqs, c2 = ld->cap_reqs, c3 = ld->cap_reqs;
        if (grow((void **)&t->reqs, &c1, t->num_reqs + 1, sizeof *t->reqs) ||
            grow((void **)&ld->raw_ts, &c2, t->num_reqs + 1, sizeof *ld->raw_ts) ||
            grow((void **)&ld->raw_delay, &c3, t->num_reqs + 1, sizeof *ld->raw_delay))
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
static int session_lookup(struct loader *ld, const char *key, size_t len, int32_t *session,
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
    if (grow((void **)&ld->last_turn, &cap, ld->t->num_sessions + 1, sizeof *ld->last_turn))
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
                return fail(ld, -EINVAL, r->line, "arrival time overflows after arrival_speedup");
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
            return fail(ld, -EINVAL, r->line, "arrival time overflows after arrival_speedup");
        r->arrival_ns = p->arrival_ns + r->delay_ns;
    }
    return 0;
}

/* ---- Mooncake JSONL ---------------------------------------------------------------------- */

static const char *const MOONCAKE_KEYS[] = {"timestamp", "input_length", "output_length",
                                            "hash_ids",  "session_id",   "delay"};

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Reads a required integer field in [min, UINT32_MAX]. Returns 0 or -EINVAL. */
static int get_u32(struct loader *ld, uint32_t line, json_t *o, const char *name, uint32_t min,
                   uint32_t *out)
{
    json_t *v = json_object_get(o, name);
    if (!v)
        return fail_field(ld, line, name, "missing");
    if (!json_is_integer(v))
        return fail_field(ld, line, name, "expected an integer, got %s", json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < (json_int_t)min)
        return fail_field(ld, line, name, "must be >= %" PRIu32 ", got %" JSON_INTEGER_FORMAT, min,
                          x);
    if (x > (json_int_t)UINT32_MAX)
        return fail_field(ld, line, name, "%" JSON_INTEGER_FORMAT " is too large (max %" PRIu32 ")",
                          x, UINT32_MAX);
    *out = (uint32_t)x;
    return 0;
}

/* Reads a time in ms (a number in [0, MAX_MS]) as ns. Returns 0 or -EINVAL. */
static int get_ms(struct loader *ld, uint32_t line, json_t *v, const char *name, int64_t *ns)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < 0)
            return fail_field(ld, line, name, "must be >= 0, got %" JSON_INTEGER_FORMAT, x);
        if (x > MAX_MS)
            return fail_field(ld, line, name,
                              "%" JSON_INTEGER_FORMAT " ms is too large (max %lld ms)", x, MAX_MS);
        *ns = (int64_t)x * 1000000;
        return 0;
    }
    if (!json_is_real(v))
        return fail_field(ld, line, name, "expected a number, got %s", json_kind(v));
    double x = json_real_value(v);
    if (!isfinite(x))
        return fail_field(ld, line, name, "not a finite number");
    if (x < 0)
        return fail_field(ld, line, name, "must be >= 0, got %g", x);
    if (x > (double)MAX_MS)
        return fail_field(ld, line, name, "%g ms is too large (max %lld ms)", x, MAX_MS);
    *ns = (int64_t)llround(x * 1e6);
    return 0;
}

/* Validates one JSON object (one row) and appends it. Returns 0 or a negative errno. */
static int mooncake_row(struct loader *ld, uint32_t line, json_t *o)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof MOONCAKE_KEYS / sizeof *MOONCAKE_KEYS; i++)
            known = known || strcmp(key, MOONCAKE_KEYS[i]) == 0;
        if (!known)
            return fail_field(ld, line, key,
                              "unknown field (expected timestamp, input_length, output_length, "
                              "hash_ids, session_id, delay)");
    }

    int64_t ts_ns, delay_ns = -1;
    uint32_t input_len, output_len;
    json_t *ts = json_object_get(o, "timestamp");
    if (!ts)
        return fail_field(ld, line, "timestamp", "missing");
    int rc = get_ms(ld, line, ts, "timestamp", &ts_ns);
    if (!rc)
        rc = get_u32(ld, line, o, "input_length", 1, &input_len);
    if (!rc)
        rc = get_u32(ld, line, o, "output_length", 1, &output_len);
    if (rc)
        return rc;

    json_t *h = json_object_get(o, "hash_ids");
    if (!h)
        return fail_field(ld, line, "hash_ids", "missing");
    if (!json_is_array(h))
        return fail_field(ld, line, "hash_ids", "expected an array, got %s", json_kind(h));
    size_t nh = json_array_size(h);
    uint64_t bs = ld->opts->trace_block_size;
    uint64_t needed = (input_len + bs - 1) / bs;
    if (nh == 0)
        return fail_field(ld, line, "hash_ids", "empty (at least one hash id is needed)");
    if (nh > needed)
        return fail_field(ld, line, "hash_ids",
                          "%zu hash ids, but input_length %" PRIu32 " needs only %" PRIu64
                          " at %" PRIu64 " tokens per id",
                          nh, input_len, needed, bs);
    struct kvsim_trace *t = ld->t;
    if (t->num_hash_ids + nh > UINT32_MAX)
        return fail(ld, -EINVAL, line, "more than %" PRIu32 " hash ids in the trace", UINT32_MAX);
    if (grow((void **)&t->hash_ids, &ld->cap_hashes, t->num_hash_ids + nh, sizeof *t->hash_ids))
        return oom(ld);
    for (size_t i = 0; i < nh; i++) {
        json_t *e = json_array_get(h, i);
        if (!json_is_integer(e))
            return fail_field(ld, line, "hash_ids",
                              "element %zu is %s, expected a non-negative integer", i,
                              json_kind(e));
        if (json_integer_value(e) < 0)
            return fail_field(ld, line, "hash_ids",
                              "element %zu is negative (%" JSON_INTEGER_FORMAT ")", i,
                              json_integer_value(e));
        t->hash_ids[t->num_hash_ids + i] = (uint64_t)json_integer_value(e);
    }

    /* The session key: type-tagged, so the integer 7 and the string "7" are different ids. */
    char ibuf[32], q[QUOTE_MAX + 8];
    const char *skey = NULL, *sname = NULL;
    size_t slen = 0;
    json_t *sid = json_object_get(o, "session_id");
    if (sid && json_is_string(sid)) {
        size_t n = json_string_length(sid);
        char *k = malloc(n + 1);
        if (!k)
            return oom(ld);
        k[0] = 's';
        memcpy(k + 1, json_string_value(sid), n);
        skey = k;
        slen = n + 1;
        quote(q, sizeof q, json_string_value(sid), n);
        sname = q;
    } else if (sid && json_is_integer(sid)) {
        int n = snprintf(ibuf, sizeof ibuf, "i%" JSON_INTEGER_FORMAT, json_integer_value(sid));
        skey = ibuf;
        slen = (size_t)n;
        sname = ibuf + 1;
    } else if (sid && !json_is_null(sid)) {
        return fail_field(ld, line, "session_id", "expected a string or an integer, got %s",
                          json_kind(sid));
    }

    json_t *dl = json_object_get(o, "delay");
    if (dl && !json_is_null(dl) && (rc = get_ms(ld, line, dl, "delay", &delay_ns)))
        goto out;

    int32_t session = -1, prev = -1;
    if (skey) {
        bool is_new;
        if (session_lookup(ld, skey, slen, &session, &is_new)) {
            rc = oom(ld);
            goto out;
        }
        if (!is_new)
            prev = ld->last_turn[session];
    }
    if (prev < 0 && delay_ns > 0) {
        rc = skey
                 ? fail_field(ld, line, "delay",
                              "non-zero delay on the first turn of session %s%s%s (a delay is "
                              "only allowed on a later turn)",
                              json_is_string(sid) ? "'" : "", sname, json_is_string(sid) ? "'" : "")
                 : fail_field(ld, line, "delay",
                              "non-zero delay on a row without session_id (a delay is only "
                              "allowed on a later turn of a session)");
        goto out;
    }

    struct kvsim_req_spec *r = add_req(ld, line, ts_ns);
    if (!r) {
        rc = oom(ld);
        goto out;
    }
    r->output_len = output_len;
    r->hash_off = (uint32_t)t->num_hash_ids;
    r->num_hashes = (uint32_t)nh;
    if (input_len > nh * bs) {
        r->input_len = (uint32_t)(nh * bs);
        r->clamped = true;
        t->num_clamped++;
    } else {
        r->input_len = input_len;
    }
    t->num_hash_ids += nh;
    r->session = session;
    r->prev_turn = prev;
    if (prev >= 0)
        ld->raw_delay[t->num_reqs - 1] = delay_ns;
    if (session >= 0)
        ld->last_turn[session] = (int32_t)(t->num_reqs - 1);
out:
    if (skey && skey != ibuf)
        free((void *)skey);
    return rc;
}

/* A line holding only spaces, tabs, CR and LF. */
static bool is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

static int mooncake_line(struct loader *ld, uint32_t line, const char *s, size_t n)
{
    json_error_t je;
    json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    if (!o && je.column > 0)
        return fail(ld, -EINVAL, line, "invalid JSON at column %d: %s", je.column, je.text);
    if (!o)
        return fail(ld, -EINVAL, line, "invalid JSON: %s", je.text);
    int rc = json_is_object(o)
                 ? mooncake_row(ld, line, o)
                 : fail(ld, -EINVAL, line, "expected a JSON object, got %s", json_kind(o));
    json_decref(o);
    return rc;
}

/* ---- Azure CSV --------------------------------------------------------------------------- */

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static unsigned digits_value(const char *s, size_t n)
{
    unsigned v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned)(s[i] - '0');
    return v;
}

/*
 * Parses "YYYY-MM-DD HH:MM:SS[.f{0,9}]" (no time zone) into seconds since 1970 and ns.
 * Returns NULL, or what is wrong with it.
 */
static const char *parse_time(const char *s, size_t n, int64_t *sec, int64_t *nsec)
{
    static const unsigned mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (n < 19 || !all_digits(s, 4) || s[4] != '-' || !all_digits(s + 5, 2) || s[7] != '-' ||
        !all_digits(s + 8, 2) || s[10] != ' ' || !all_digits(s + 11, 2) || s[13] != ':' ||
        !all_digits(s + 14, 2) || s[16] != ':' || !all_digits(s + 17, 2))
        return "expected YYYY-MM-DD HH:MM:SS[.fffffffff]";
    size_t nf = 0;
    if (n > 19) {
        nf = n - 20;
        if (s[19] != '.' || nf > 9 || !all_digits(s + 20, nf))
            return "expected YYYY-MM-DD HH:MM:SS[.fffffffff] (at most 9 fraction digits)";
    }
    unsigned y = digits_value(s, 4), mo = digits_value(s + 5, 2), d = digits_value(s + 8, 2);
    unsigned h = digits_value(s + 11, 2), mi = digits_value(s + 14, 2);
    unsigned se = digits_value(s + 17, 2);
    if (mo < 1 || mo > 12)
        return "month out of range";
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d < 1 || d > mdays[mo - 1] + (mo == 2 && leap))
        return "day out of range";
    if (h > 23)
        return "hour out of range";
    if (mi > 59)
        return "minute out of range";
    if (se > 59)
        return "second out of range";
    unsigned frac = digits_value(s + 20, nf);
    for (size_t i = nf; i < 9; i++)
        frac *= 10;
    *sec = days_from_civil((int64_t)y, mo, d) * 86400 + (int64_t)(h * 3600 + mi * 60 + se);
    *nsec = (int64_t)frac;
    return NULL;
}

/* Parses a token count field (decimal digits only, 1 .. UINT32_MAX). Returns 0 or -EINVAL. */
static int parse_tokens(struct loader *ld, uint32_t line, const char *name, const char *s, size_t n,
                        uint32_t *out)
{
    char q[QUOTE_MAX + 8];
    if (n == 0 || !all_digits(s, n))
        return fail_field(ld, line, name, "'%s' is not a non-negative integer",
                          quote(q, sizeof q, s, n));
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > UINT32_MAX)
            return fail_field(ld, line, name, "%s is too large (max %" PRIu32 ")",
                              quote(q, sizeof q, s, n), UINT32_MAX);
    }
    if (v == 0)
        return fail_field(ld, line, name, "0 tokens (must be >= 1)");
    *out = (uint32_t)v;
    return 0;
}

struct azure_state {
    bool have_first;
    int64_t sec0, nsec0; /* the first row's time */
};

static int azure_line(struct loader *ld, struct azure_state *st, uint32_t line, const char *s,
                      size_t n)
{
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    const char *f[3];
    size_t fl[3], cols = 1;
    f[0] = s;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ',')
            continue;
        if (cols < 3) {
            fl[cols - 1] = (size_t)(s + i - f[cols - 1]);
            f[cols] = s + i + 1;
        }
        cols++;
    }
    if (cols != 3)
        return fail(ld, -EINVAL, line,
                    "expected 3 columns (TIMESTAMP,ContextTokens,GeneratedTokens), got %zu", cols);
    fl[2] = (size_t)(s + n - f[2]);

    char q[QUOTE_MAX + 8];
    int64_t sec, nsec;
    const char *why = parse_time(f[0], fl[0], &sec, &nsec);
    if (why)
        return fail_field(ld, line, "TIMESTAMP", "'%s': %s", quote(q, sizeof q, f[0], fl[0]), why);
    if (!st->have_first) {
        st->have_first = true;
        st->sec0 = sec;
        st->nsec0 = nsec;
    }
    if (sec - st->sec0 > MAX_AZURE_SPAN_S || st->sec0 - sec > MAX_AZURE_SPAN_S)
        return fail_field(ld, line, "TIMESTAMP", "'%s' is more than 100 years from the first row",
                          quote(q, sizeof q, f[0], fl[0]));
    uint32_t ctx, gen;
    int rc = parse_tokens(ld, line, "ContextTokens", f[1], fl[1], &ctx);
    if (!rc)
        rc = parse_tokens(ld, line, "GeneratedTokens", f[2], fl[2], &gen);
    if (rc)
        return rc;
    struct kvsim_req_spec *r =
        add_req(ld, line, (sec - st->sec0) * 1000000000 + (nsec - st->nsec0));
    if (!r)
        return oom(ld);
    r->input_len = ctx;
    r->output_len = gen;
    return 0;
}

/* ---- the file ---------------------------------------------------------------------------- */

static enum kvsim_trace_format format_from_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot)
        return KVSIM_TRACE_AUTO;
    if (strcasecmp(dot, ".jsonl") == 0 || strcasecmp(dot, ".json") == 0)
        return KVSIM_TRACE_MOONCAKE;
    if (strcasecmp(dot, ".csv") == 0)
        return KVSIM_TRACE_AZURE;
    return KVSIM_TRACE_AUTO;
}

/* Reads the file line by line into ld->t (file order, raw times). */
static int read_rows(struct loader *ld, FILE *f, enum kvsim_trace_format format)
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
        errno = 0;
        ssize_t got = getline(&buf, &cap, f);
        if (got < 0) {
            int e = errno ? errno : EIO;
            if (ferror(f))
                rc = fail(ld, -e, 0, "read error: %s", strerror(e));
            break;
        }
        if (line == UINT32_MAX) {
            rc = fail(ld, -EINVAL, 0, "more than %" PRIu32 " lines", UINT32_MAX);
            break;
        }
        line++;
        const char *s = buf;
        size_t n = (size_t)got;
        if (line == 1 && n >= 3 && memcmp(s, bom, 3) == 0) { /* a UTF-8 byte order mark */
            s += 3;
            n -= 3;
        }
        if (format == KVSIM_TRACE_AZURE && line == 1) {
            size_t m = n;
            while (m > 0 && (s[m - 1] == '\n' || s[m - 1] == '\r'))
                m--;
            if (m != sizeof AZURE_HEADER - 1 || memcmp(s, AZURE_HEADER, m) != 0) {
                char q[QUOTE_MAX + 8];
                rc = fail(ld, -EINVAL, 1, "bad header '%s' (expected '%s')",
                          quote(q, sizeof q, s, m), AZURE_HEADER);
                break;
            }
            continue;
        }
        if (is_blank(s, n))
            continue;
        rc = format == KVSIM_TRACE_AZURE ? azure_line(ld, &az, line, s, n)
                                         : mooncake_line(ld, line, s, n);
        if (rc)
            break;
    }
    free(buf);
    return rc;
}

int kvsim_trace_load(const char *path, const struct kvsim_trace_opts *opts, struct kvsim_trace *out,
                     char *err, size_t errlen)
{
    struct kvsim_trace_opts defaults;
    if (!opts) {
        kvsim_trace_opts_default(&defaults);
        opts = &defaults;
    }
    memset(out, 0, sizeof *out);
    if (err && errlen)
        err[0] = 0;
    struct loader ld = {.path = path, .opts = opts, .t = out, .err = err, .errlen = errlen};

    enum kvsim_trace_format format = opts->format;
    if (format == KVSIM_TRACE_AUTO) {
        format = format_from_name(path);
        if (format == KVSIM_TRACE_AUTO)
            return fail(&ld, -EINVAL, 0,
                        "cannot tell the trace format from the file name (expected .jsonl, "
                        ".json or .csv)");
    }
    if (format != KVSIM_TRACE_MOONCAKE && format != KVSIM_TRACE_AZURE)
        return fail(&ld, -EINVAL, 0, "trace format '%s' cannot be loaded from a file",
                    kvsim_trace_format_name(format));
    if (opts->trace_block_size == 0)
        return fail(&ld, -EINVAL, 0, "trace_block_size must be >= 1");
    if (!(opts->arrival_speedup > 0) || !isfinite(opts->arrival_speedup))
        return fail(&ld, -EINVAL, 0, "arrival_speedup must be a positive finite number, got %g",
                    opts->arrival_speedup);

    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        return fail(&ld, -e, 0, "cannot open: %s", strerror(e));
    }
    out->format = format;
    out->block_size = format == KVSIM_TRACE_MOONCAKE ? opts->trace_block_size : 0;
    int rc = read_rows(&ld, f, format);
    fclose(f);
    if (!rc && out->num_reqs == 0)
        rc = fail(&ld, -EINVAL, 0, "empty trace (no requests)");
    if (!rc)
        rc = normalize(&ld);
    if (!rc && kvsim__trace_sort(out))
        rc = oom(&ld);
    loader_fini(&ld);
    if (rc) {
        kvsim_trace_free(out);
        return rc;
    }
    if (out->num_hash_ids == 0)
        out->block_size = 0;
    return 0;
}
