/*
 * mooncake.c - one row of a Mooncake JSONL trace (input.h): `timestamp` (ms), `input_length`,
 * `output_length`, `hash_ids`, optional `session_id` and `delay`, each validated strictly.
 *
 * Two readers feed one set of checks (mooncake_apply): a scanner for the common well-formed
 * row (plain integers, a flat integer array, a string without escapes), about 10x faster than
 * jansson, and jansson for every line the scanner does not fully understand. The scanner never
 * reports an error itself, so messages are jansson's or the shared checks'.
 */
#include "runtime/input/input_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest accepted Mooncake time value (timestamp, delay): 10^12 ms, about 31 years. */
#define MAX_MS 1000000000000LL

/* ---- Mooncake JSONL ---------------------------------------------------------------------- */

enum { K_TS, K_INPUT, K_OUTPUT, K_HASHES, K_SESSION, K_DELAY, K_COUNT };
static const char *const MOONCAKE_KEYS[K_COUNT] = {"timestamp", "input_length", "output_length",
                                                   "hash_ids",  "session_id",   "delay"};
static const uint8_t MOONCAKE_KEY_LEN[K_COUNT] = {
    sizeof "timestamp" - 1, sizeof "input_length" - 1, sizeof "output_length" - 1,
    sizeof "hash_ids" - 1,  sizeof "session_id" - 1,   sizeof "delay" - 1}; /* their strlen */

/* One row's values, from either reader. */
struct mc_row {
    struct input_val f[K_COUNT]; /* by MOONCAKE_KEYS index */
    size_t nh;                   /* hash_ids' length, when it is an array */
    const json_t *harr;          /* jansson: the hash_ids array */
    const int64_t *hv;           /* the scanner: its nh elements, all integers */
};

/* Element i of the row's hash_ids array. */
static void hash_elem(const struct mc_row *r, size_t i, struct input_val *e)
{
    if (r->harr)
        input__val_of(json_array_get(r->harr, i), e);
    else
        *e = (struct input_val){.present = true, .type = JSON_INTEGER, .i = r->hv[i]};
}

/* Reads a time in ms (a number in [0, MAX_MS]) as ns. Returns 0 or -EINVAL. */
static int get_ms(struct loader *ld, uint32_t line, const struct input_val *v, const char *name,
                  int64_t *ns)
{
    if (v->type == JSON_INTEGER) {
        int64_t x = v->i;
        if (x < 0)
            return input__fail_field(ld, line, name, "must be >= 0, got %" PRId64, x);
        if (x > MAX_MS)
            return input__fail_field(ld, line, name, "%" PRId64 " ms is too large (max %lld ms)", x,
                                     MAX_MS);
        *ns = x * 1000000;
        return 0;
    }
    if (v->type != JSON_REAL)
        return input__fail_field(ld, line, name, "expected a number, got %s",
                                 input__type_kind(v->type));
    double x = v->d;
    if (!isfinite(x))
        return input__fail_field(ld, line, name, "not a finite number");
    if (x < 0)
        return input__fail_field(ld, line, name, "must be >= 0, got %g", x);
    if (x > (double)MAX_MS)
        return input__fail_field(ld, line, name, "%g ms is too large (max %lld ms)", x, MAX_MS);
    *ns = (int64_t)llround(x * 1e6);
    return 0;
}

/* Validates one row's values (known keys only) and appends it. Returns 0 or a negative errno. */
static int mooncake_apply(struct loader *ld, uint32_t line, const struct mc_row *row)
{
    int64_t ts_ns, delay_ns = -1;
    uint32_t input_len, output_len;
    const struct input_val *ts = &row->f[K_TS];
    if (!ts->present)
        return input__fail_field(ld, line, "timestamp", "missing");
    int rc = get_ms(ld, line, ts, "timestamp", &ts_ns);
    if (!rc)
        rc = input__val_u32(ld, line, "input_length", &row->f[K_INPUT], 1, &input_len);
    if (!rc)
        rc = input__val_u32(ld, line, "output_length", &row->f[K_OUTPUT], 1, &output_len);
    if (rc)
        return rc;

    const struct input_val *h = &row->f[K_HASHES];
    if (!h->present)
        return input__fail_field(ld, line, "hash_ids", "missing");
    if (h->type != JSON_ARRAY)
        return input__fail_field(ld, line, "hash_ids", "expected an array, got %s",
                                 input__type_kind(h->type));
    size_t nh = row->nh;
    uint64_t bs = ld->opts->trace_block_size;
    uint64_t needed = (input_len + bs - 1) / bs;
    if (nh == 0)
        return input__fail_field(ld, line, "hash_ids", "empty (at least one hash id is needed)");
    if (nh > needed)
        return input__fail_field(ld, line, "hash_ids",
                                 "%zu hash ids, but input_length %" PRIu32 " needs only %" PRIu64
                                 " at %" PRIu64 " tokens per id",
                                 nh, input_len, needed, bs);
    struct kvsim_trace *t = ld->t;
    if (t->num_hash_ids + nh > UINT32_MAX)
        return input__fail(ld, -EINVAL, line, "more than %" PRIu32 " hash ids in the trace",
                           UINT32_MAX);
    if (input__grow((void **)&t->hash_ids, &ld->cap_hashes, t->num_hash_ids + nh,
                    sizeof *t->hash_ids))
        return input__oom(ld);
    for (size_t i = 0; i < nh; i++) {
        struct input_val e;
        hash_elem(row, i, &e);
        if (e.type != JSON_INTEGER)
            return input__fail_field(ld, line, "hash_ids",
                                     "element %zu is %s, expected a non-negative integer", i,
                                     input__type_kind(e.type));
        if (e.i < 0)
            return input__fail_field(ld, line, "hash_ids", "element %zu is negative (%" PRId64 ")",
                                     i, e.i);
        if (e.i > KVSIM_MAX_HASH_ID)
            return input__fail_field(ld, line, "hash_ids",
                                     "element %zu is %" PRId64
                                     ", above the largest hash id kvsim expands (2^31 - 1)",
                                     i, e.i);
        t->hash_ids[t->num_hash_ids + i] = (uint64_t)e.i;
    }

    /* The session key: type-tagged, so the integer 7 and the string "7" are different ids. */
    char kbuf[128], q[INPUT__QUOTE_MAX + 8];
    const char *skey = NULL, *sname = NULL;
    size_t slen = 0;
    const struct input_val *sid = &row->f[K_SESSION];
    bool sid_str = sid->present && sid->type == JSON_STRING;
    if (sid_str) {
        size_t n = sid->n;
        char *k = n < sizeof kbuf ? kbuf : malloc(n + 1); /* most ids are short */
        if (!k)
            return input__oom(ld);
        k[0] = 's';
        memcpy(k + 1, sid->s, n);
        skey = k;
        slen = n + 1;
        input__quote(q, sizeof q, sid->s, n);
        sname = q;
    } else if (sid->present && sid->type == JSON_INTEGER) {
        int n = snprintf(kbuf, sizeof kbuf, "i%" PRId64, sid->i);
        skey = kbuf;
        slen = (size_t)n;
        sname = kbuf + 1;
    } else if (sid->present && sid->type != JSON_NULL) {
        return input__fail_field(ld, line, "session_id", "expected a string or an integer, got %s",
                                 input__type_kind(sid->type));
    }

    const struct input_val *dl = &row->f[K_DELAY];
    if (dl->present && dl->type != JSON_NULL && (rc = get_ms(ld, line, dl, "delay", &delay_ns)))
        goto out;

    int32_t session = -1, prev = -1;
    if (skey) {
        bool is_new;
        if (input__session_lookup(ld, skey, slen, &session, &is_new)) {
            rc = input__oom(ld);
            goto out;
        }
        if (!is_new)
            prev = ld->last_turn[session];
    }
    if (prev < 0 && delay_ns > 0) {
        rc = skey ? input__fail_field(ld, line, "delay",
                                      "non-zero delay on the first turn of session %s%s%s (a "
                                      "delay is only allowed on a later turn)",
                                      sid_str ? "'" : "", sname, sid_str ? "'" : "")
                  : input__fail_field(ld, line, "delay",
                                      "non-zero delay on a row without session_id (a delay is only "
                                      "allowed on a later turn of a session)");
        goto out;
    }

    struct kvsim_req_spec *r = input__add_req(ld, line, ts_ns);
    if (!r) {
        rc = input__oom(ld);
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
    if (skey && skey != kbuf)
        free((void *)skey);
    return rc;
}

/* The jansson path: one JSON object (one row), its keys checked, then mooncake_apply. */
static int mooncake_row(struct loader *ld, uint32_t line, json_t *o)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < K_COUNT; i++)
            known = known || strcmp(key, MOONCAKE_KEYS[i]) == 0;
        if (!known)
            return input__fail_field(
                ld, line, key,
                "unknown field (expected timestamp, input_length, output_length, "
                "hash_ids, session_id, delay)");
    }
    struct mc_row row = {0};
    for (size_t i = 0; i < K_COUNT; i++)
        input__val_of(json_object_get(o, MOONCAKE_KEYS[i]), &row.f[i]);
    json_t *h = json_object_get(o, "hash_ids");
    if (json_is_array(h)) {
        row.nh = json_array_size(h);
        row.harr = h;
    }
    return mooncake_apply(ld, line, &row);
}

/* ---- the scanner ------------------------------------------------------------------------- */

/* JSON's own whitespace (what jansson skips). */
static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

/* A plain non-negative integer: 0 or [1-9][0-9]{0,17} (always within int64; a leading zero,
 * a sign, a fraction or an exponent leaves a byte the caller does not expect). */
static const char *scan_int(const char *p, const char *end, int64_t *out)
{
    if (p == end || *p < '0' || *p > '9')
        return NULL;
    if (*p == '0') {
        *out = 0;
        return p + 1;
    }
    int64_t x = 0;
    const char *start = p;
    while (p < end && *p >= '0' && *p <= '9' && p - start < 18)
        x = x * 10 + (*p++ - '0');
    if (p < end && *p >= '0' && *p <= '9')
        return NULL; /* 19 digits or more: jansson decides (range, overflow) */
    *out = x;
    return p;
}

/* A string of printable ASCII without escapes, after its opening quote (jansson also checks
 * control bytes and UTF-8: those are left to it). Returns the byte after the closing quote. */
static const char *scan_str(const char *p, const char *end, const char **s, size_t *n)
{
    const char *start = p;
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x7f)
        p++;
    if (p == end || *p != '"')
        return NULL;
    *s = start;
    *n = (size_t)(p - start);
    return p + 1;
}

/* An integer, a plain string or null into v; NULL for anything else. */
static const char *scan_scalar(const char *p, const char *end, struct input_val *v)
{
    v->present = true;
    if (p < end && *p == '"') {
        v->type = JSON_STRING;
        return scan_str(p + 1, end, &v->s, &v->n);
    }
    if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
        v->type = JSON_NULL;
        return p + 4;
    }
    v->type = JSON_INTEGER;
    return scan_int(p, end, &v->i);
}

/* A flat array of plain integers, after its '[', into ld's scratch buffer. */
static const char *scan_hashes(struct loader *ld, const char *p, const char *end, size_t *nh)
{
    size_t n = 0;
    p = skip_ws(p, end);
    if (p < end && *p == ']') {
        *nh = 0;
        return p + 1;
    }
    for (;;) {
        if (n == ld->cap_scan &&
            input__grow((void **)&ld->scan, &ld->cap_scan, n + 1, sizeof *ld->scan))
            return NULL; /* jansson then runs out of memory too, or reports something else */
        if (!(p = scan_int(p, end, &ld->scan[n++])))
            return NULL;
        p = skip_ws(p, end);
        if (p < end && *p == ']') {
            *nh = n;
            return p + 1;
        }
        if (p == end || *p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
    }
}

static int key_index(const char *k, size_t n)
{
    for (int i = 0; i < K_COUNT; i++)
        if (MOONCAKE_KEY_LEN[i] == n && memcmp(MOONCAKE_KEYS[i], k, n) == 0)
            return i;
    return -1;
}

/*
 * Reads s[0..n) into *row if it is an object of distinct known keys whose values are plain
 * integers, plain strings or null, hash_ids a flat array of plain integers, and nothing else
 * around it but whitespace. false: anything else, for jansson to accept or report. A row that
 * is read may still fail mooncake_apply's checks, exactly as jansson's reading of it would.
 */
static bool scan_row(struct loader *ld, const char *s, size_t n, struct mc_row *row)
{
    const char *p = s, *end = s + n;
    unsigned seen = 0;
    p = skip_ws(p, end);
    if (p == end || *p != '{')
        return false;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        p++;
    else
        for (;;) {
            const char *k;
            size_t kn;
            if (p == end || *p != '"' || !(p = scan_str(p + 1, end, &k, &kn)))
                return false;
            int i = key_index(k, kn);
            if (i < 0 || (seen & (1u << i))) /* unknown or duplicate: jansson's messages */
                return false;
            seen |= 1u << i;
            p = skip_ws(p, end);
            if (p == end || *p != ':')
                return false;
            p = skip_ws(p + 1, end);
            if (i == K_HASHES && p < end && *p == '[') {
                row->f[i] = (struct input_val){.present = true, .type = JSON_ARRAY};
                p = scan_hashes(ld, p + 1, end, &row->nh);
            } else {
                p = scan_scalar(p, end, &row->f[i]);
            }
            if (!p)
                return false;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            if (p < end && *p == '}') {
                p++;
                break;
            }
            return false;
        }
    row->hv = ld->scan;
    return skip_ws(p, end) == end;
}

int input__mooncake_line(struct loader *ld, uint32_t line, const char *s, size_t n)
{
    struct mc_row row = {0};
    if (!ld->jansson_only && scan_row(ld, s, n, &row))
        return mooncake_apply(ld, line, &row);
    return input__json_line(ld, line, s, n, mooncake_row);
}
