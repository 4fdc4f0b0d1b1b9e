/*
 * read.c - bounded reads (input.h): the next line of a stream, at most a given length, and a
 * JSON file read whole, at most KVSIM_INPUT_MAX_JSON_BYTES. An endless line or stream
 * (/dev/zero, a pipe that never ends) is refused at its limit instead of growing memory until
 * it runs out, and a failed read or allocation is an outcome of its own, never an early end of
 * file. No state; the caller's thread.
 *
 * Why fgets into a growing buffer rather than getline: getline has no bound (getdelim neither),
 * and it ends with -1 both at the end of the file and when memory runs out. fgets does not say
 * how many bytes it stored when a line holds NUL bytes, so each chunk is first filled with a
 * non-NUL byte: the last NUL of the chunk is then the one fgets wrote after the bytes it read.
 */
#include "runtime/input/input.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

/* The first chunk of a line offered to fgets; each further chunk of the same line doubles, so
 * a line costs O(its length + READ_FIRST_CHUNK) whatever the capacity the buffer has grown to.
 * 256: the shared traces' lines average 37 (Azure) and 250 bytes (Mooncake), and read about as
 * fast as with getline (+0.4 ms on the 3 MB conversation trace; 4096 took +1.3 ms). */
#define READ_FIRST_CHUNK 256
/* A buffer grows eight-fold (up to its limit): a 64 MiB line is copied about 9 MiB's worth by
 * realloc on its way instead of 64 MiB's, and pages of the capacity not yet read into are not
 * touched, so they cost address space only. */
#define READ_GROWTH      8
/* Any byte but NUL. */
#define READ_SENTINEL    0x5a

/* Makes room for need bytes in *buf (capacity *cap), growing it grow-fold (at least to need),
 * up to limit (>= need). Returns false when memory runs out. */
static bool reserve(char **buf, size_t *cap, size_t need, size_t grow, size_t limit)
{
    if (need <= *cap)
        return true;
    size_t n = *cap <= limit / grow ? *cap * grow : limit;
    if (n < need)
        n = need;
    if (n > limit / 2) /* past half the limit, the limit itself: no last step of a few bytes */
        n = limit;
    char *p = realloc(*buf, n);
    if (!p)
        return false;
    *buf = p;
    *cap = n;
    return true;
}

enum kvsim_read kvsim_read_line(FILE *f, char **buf, size_t *cap, size_t max, size_t *len)
{
    /* Room for max bytes, the '\n' and the NUL: a longer line is known to be one when the
     * buffer is full without a '\n'. */
    size_t limit = max < SIZE_MAX - 2 ? max + 2 : SIZE_MAX;
    size_t n = 0, chunk = READ_FIRST_CHUNK;
    *len = 0;
    for (;;) {
        size_t want = chunk < limit - n ? n + chunk : limit; /* n <= max: limit - n >= 2 */
        if (!reserve(buf, cap, want, READ_GROWTH, limit))
            return KVSIM_READ_NOMEM;
        size_t room = want - n;
        if (room > INT_MAX)
            room = INT_MAX;
        char *p = *buf + n;
        memset(p, READ_SENTINEL, room);
        if (!fgets(p, (int)room, f)) { /* nothing read, or a failed read */
            if (ferror(f))
                return KVSIM_READ_ERROR;
            if (n == 0)
                return KVSIM_READ_END;
            break; /* a last line without a '\n' */
        }
        size_t got = (size_t)((char *)memrchr(p, 0, room) - p);
        n += got;
        if (got && p[got - 1] == '\n')
            break;
        if (n > max)
            return KVSIM_READ_TOO_LONG;
        if (got + 1 < room) { /* fgets stopped before the chunk's end: the end or an error */
            if (ferror(f))
                return KVSIM_READ_ERROR;
            break;
        }
        if (chunk <= SIZE_MAX / 2)
            chunk *= 2;
    }
    *len = n;
    return KVSIM_READ_LINE;
}

/* ---- JSON documents ------------------------------------------------------------------------ */

/* Copies path into dst (size n), keeping its tail behind "..." when it does not fit: the tail
 * (the file's name) is the part a reader needs, and jansson shortens a source the same way. */
static void path_fit(char *dst, size_t n, const char *path)
{
    size_t len = strlen(path);
    if (len < n)
        memcpy(dst, path, len + 1);
    else if (n > 4)
        snprintf(dst, n, "...%s", path + len - (n - 4));
    else if (n)
        dst[0] = '\0';
}

/* jansson's error fields for a refusal of ours: line -1, the message "<before><path><after>",
 * and jansson's error code (stored, as jansson stores it, in the text's last byte:
 * json_error_code reads it there). The path is shortened from the front so the reason after it
 * always shows whole. Returns rc. */
static int json_fail(json_error_t *jerr, int rc, enum json_error_code code, const char *before,
                     const char *path, const char *after, ...)
    __attribute__((format(printf, 6, 7)));
static int json_fail(json_error_t *jerr, int rc, enum json_error_code code, const char *before,
                     const char *path, const char *after, ...)
{
    jerr->line = -1;
    jerr->column = -1;
    jerr->position = 0;
    memset(jerr->text, 0, sizeof jerr->text);
    char tail[sizeof jerr->text];
    va_list ap;
    va_start(ap, after);
    vsnprintf(tail, sizeof tail, after, ap);
    va_end(ap);
    const size_t room = sizeof jerr->text - 1; /* the last byte holds the code */
    size_t used = strlen(before) + strlen(tail);
    char shown[sizeof jerr->text];
    path_fit(shown, used + 8 < room ? room - used : 8, path);
    /* Joined by hand: the three fit by construction (a cut is the reason's end, never its
     * start), which snprintf's truncation warning cannot see. */
    size_t at = 0;
    const char *parts[3] = {before, shown, tail};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(parts[i]);
        if (n > room - 1 - at)
            n = room - 1 - at;
        memcpy(jerr->text + at, parts[i], n);
        at += n;
    }
    jerr->text[at] = 0;
    jerr->text[sizeof jerr->text - 1] = (char)code;
    return rc;
}

/* "<file>: larger than 64 MiB". */
static int too_large(json_error_t *jerr, const char *path)
{
    return json_fail(jerr, -EINVAL, json_error_invalid_argument, "", path, ": larger than %zu MiB",
                     KVSIM_INPUT_MAX_JSON_BYTES >> 20);
}

/* "<file>: out of memory" (-ENOMEM). */
static int out_of_memory(json_error_t *jerr, const char *path)
{
    return json_fail(jerr, -ENOMEM, json_error_out_of_memory, "", path, ": out of memory");
}

/* The return of a parse jansson refused: -ENOMEM ("<file>: out of memory") when memory ran
 * out, which jansson says with json_error_out_of_memory or, where an allocation of its tree
 * fails, with no message at all; else -EINVAL (jerr as jansson set it). */
static int jansson_failed(json_error_t *jerr, const char *path)
{
    if (json_error_code(jerr) == json_error_out_of_memory || !jerr->text[0])
        return out_of_memory(jerr, path);
    return -EINVAL;
}

/* The 1-based line of the byte at offset n of s. */
static size_t line_at(const char *s, size_t n)
{
    size_t line = 1;
    if (!n)
        return line;
    for (const char *p = s, *end = s + n; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++)
        line++;
    return line;
}

int kvsim_json_load_file(const char *path, size_t flags, struct json_t **out,
                         struct json_error_t *jerr)
{
    json_error_t scratch;
    if (!jerr)
        jerr = &scratch;
    *out = NULL;
    memset(jerr, 0, sizeof *jerr);
    path_fit(jerr->source, sizeof jerr->source, path);
    const size_t max = KVSIM_INPUT_MAX_JSON_BYTES;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return json_fail(jerr, -e, json_error_cannot_open_file, "unable to open ", path, ": %s",
                         strerror(e));
    }
    /* A regular file: refused by its size, and read in one go (+ 1: its end shows without a
     * second allocation). */
    size_t first = 65536;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
        if ((uint64_t)st.st_size > max) {
            fclose(f);
            return too_large(jerr, path);
        }
        first = (size_t)st.st_size + 1;
        if (first < 4096)
            first = 4096;
    }
    char *buf = NULL;
    size_t cap = 0, n = 0;
    int rc = 0;
    for (;;) {
        if (n == cap) { /* full: grow by doubling, up to one byte past the limit */
            if (cap > max) {
                rc = too_large(jerr, path);
                break;
            }
            if (!reserve(&buf, &cap, cap ? cap + 1 : first, READ_GROWTH, max + 1)) {
                rc = out_of_memory(jerr, path);
                break;
            }
        }
        errno = 0;
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) { /* a short read: the end, or an error */
            if (ferror(f)) {
                int e = errno ? errno : EIO;
                rc = json_fail(jerr, -e, json_error_unknown, "", path, ":%zu: read error: %s",
                               line_at(buf, n), strerror(e));
            }
            break;
        }
    }
    fclose(f);
    if (!rc) {
        *out = json_loadb(buf, n, flags, jerr);
        rc = *out ? 0 : jansson_failed(jerr, path);
        path_fit(jerr->source, sizeof jerr->source, path);
    }
    free(buf);
    return rc;
}

/* ---- a JSON document whose values are counted as it is parsed ------------------------------- */

/* Containers deeper than this count their keys as values (jansson refuses past 2048 anyway). */
#define COUNT_DEPTH 4096

/* The values of a JSON text as it streams by, fed in pieces: every scalar, list and object (an
 * object's keys are not values). It only tells values apart; jansson checks the syntax. */
struct value_count {
    size_t values, lines;
    bool in_string, escaped, in_scalar, key_next;
    size_t depth;
    unsigned char object[COUNT_DEPTH / 8]; /* bit d: the container at depth d is an object */
};

static bool count_in_object(const struct value_count *c)
{
    return c->depth && c->depth <= COUNT_DEPTH &&
           (c->object[(c->depth - 1) / 8] >> ((c->depth - 1) % 8) & 1);
}

static void count_feed(struct value_count *c, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        c->lines += ch == '\n';
        if (c->in_string) {
            if (c->escaped)
                c->escaped = false;
            else if (ch == '\\')
                c->escaped = true;
            else if (ch == '"')
                c->in_string = false;
            continue;
        }
        switch (ch) {
        case '"':
            c->in_string = true;
            c->values += !c->key_next;
            c->key_next = c->in_scalar = false;
            break;
        case '{':
        case '[':
            c->values++;
            if (++c->depth <= COUNT_DEPTH) {
                unsigned char bit = (unsigned char)(1u << ((c->depth - 1) % 8));
                if (ch == '{')
                    c->object[(c->depth - 1) / 8] |= bit;
                else
                    c->object[(c->depth - 1) / 8] &= (unsigned char)~bit;
            }
            c->key_next = ch == '{';
            c->in_scalar = false;
            break;
        case '}':
        case ']':
            c->depth -= c->depth > 0;
            c->key_next = c->in_scalar = false;
            break;
        case ',':
            c->key_next = count_in_object(c);
            c->in_scalar = false;
            break;
        case ':':
        case ' ':
        case '\t':
        case '\r':
        case '\n':
            c->key_next = c->key_next && ch != ':';
            c->in_scalar = false;
            break;
        default: /* a number or a literal (true, false, null), or what jansson refuses */
            c->values += !c->in_scalar;
            c->in_scalar = true;
            c->key_next = false;
        }
    }
}

/* The source of kvsim_json_load_file_values: the file, counted. */
struct counted_source {
    FILE *f;
    size_t bytes, max_values;
    int error; /* why the reading stopped early: -E2BIG (values), -EFBIG (bytes), a read's */
    struct value_count count;
};

/* jansson's callback: the next piece of the file, or (size_t)-1 to stop (error says why). */
static size_t counted_read(void *buf, size_t len, void *arg)
{
    struct counted_source *s = arg;
    if (s->error)
        return (size_t)-1;
    errno = 0;
    size_t got = fread(buf, 1, len, s->f);
    if (got < len && ferror(s->f)) {
        s->error = errno ? -errno : -EIO;
        return (size_t)-1;
    }
    if ((s->bytes += got) > KVSIM_INPUT_MAX_JSON_BYTES) {
        s->error = -EFBIG;
        return (size_t)-1;
    }
    count_feed(&s->count, buf, got);
    if (s->count.values > s->max_values) {
        s->error = -E2BIG;
        return (size_t)-1;
    }
    return got;
}

int kvsim_json_load_file_values(const char *path, size_t flags, size_t max_values,
                                struct json_t **out, struct json_error_t *jerr)
{
    json_error_t scratch;
    if (!jerr)
        jerr = &scratch;
    *out = NULL;
    memset(jerr, 0, sizeof *jerr);
    path_fit(jerr->source, sizeof jerr->source, path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return json_fail(jerr, -e, json_error_cannot_open_file, "unable to open ", path, ": %s",
                         strerror(e));
    }
    struct stat st; /* a regular file: refused by its size, before reading */
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size > KVSIM_INPUT_MAX_JSON_BYTES) {
        fclose(f);
        return too_large(jerr, path);
    }
    struct counted_source *s = calloc(1, sizeof *s);
    if (!s) {
        fclose(f);
        return out_of_memory(jerr, path);
    }
    s->f = f;
    s->max_values = max_values;
    *out = json_load_callback(counted_read, s, flags, jerr);
    fclose(f);
    int rc = 0;
    if (!*out && s->error == -E2BIG)
        rc = json_fail(jerr, -EINVAL, json_error_invalid_argument, "", path,
                       ": more than %zu values", max_values);
    else if (!*out && s->error == -EFBIG)
        rc = too_large(jerr, path);
    else if (!*out && s->error)
        rc = json_fail(jerr, s->error, json_error_unknown, "", path, ":%zu: read error: %s",
                       s->count.lines + 1, strerror(-s->error));
    else if (!*out)
        rc = jansson_failed(jerr, path);
    path_fit(jerr->source, sizeof jerr->source, path);
    free(s);
    return rc;
}

void kvsim_json_error_message(const char *path, const struct json_error_t *jerr, char *err,
                              size_t errlen)
{
    if (jerr->line > 0)
        snprintf(err, errlen, "%s:%d: %s", path, jerr->line, jerr->text);
    else
        snprintf(err, errlen, "%s", jerr->text);
}
