/*
 * source.c - where a trace's bytes come from: a file, standard input ("-"), either one plain or
 * gzip-compressed (told by the gzip magic bytes, not the name), and the sha256 of the bytes as
 * stored, which the report records so that a sweep's reports name exactly what they replayed.
 *
 * Why a FILE cookie (fopencookie) and our own inflate loop rather than gzread: the parsers read
 * lines with kvsim_read_line from one FILE whatever the source, and the hash must cover the stored
 * (compressed) bytes, which only a loop that reads them itself sees. Private to runtime/input/;
 * the caller's thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <zlib.h>

#include "input_internal.h"

#define SOURCE_CHUNK 65536

struct input_source {
    FILE *raw;    /* the stored bytes (the file, or stdin) */
    bool own_raw; /* fclose it (not stdin) */
    bool gzip;    /* inflate them */
    bool gz_end;  /* the last gzip member ended and no byte followed */
    z_stream z;
    unsigned char in[SOURCE_CHUNK];
    size_t in_len; /* bytes of in[] not yet given to the inflater */
    EVP_MD_CTX *sha;
    int error; /* errno of a failed read or a corrupt stream (EILSEQ) */
};

/* Reads up to n stored bytes into buf and hashes them. Returns the count (0: end) or -1. */
static ssize_t read_stored(struct input_source *s, unsigned char *buf, size_t n)
{
    size_t got = fread(buf, 1, n, s->raw);
    if (got == 0 && ferror(s->raw)) {
        s->error = errno ? errno : EIO;
        return -1;
    }
    if (got && EVP_DigestUpdate(s->sha, buf, got) != 1) {
        s->error = ENOMEM;
        return -1;
    }
    return (ssize_t)got;
}

/* The inflated bytes of a gzip stream, members concatenated as gzip(1) does. */
static ssize_t read_gzip(struct input_source *s, char *buf, size_t size)
{
    s->z.next_out = (unsigned char *)buf;
    s->z.avail_out = (uInt)(size < UINT32_MAX ? size : UINT32_MAX);
    while (s->z.avail_out > 0) {
        if (s->z.avail_in == 0) {
            ssize_t got = read_stored(s, s->in, sizeof s->in);
            if (got < 0)
                return -1;
            if (got == 0) {
                if (!s->gz_end) { /* the stream stopped inside a member */
                    s->error = EILSEQ;
                    return -1;
                }
                break;
            }
            s->z.next_in = s->in;
            s->z.avail_in = (uInt)got;
        }
        if (s->gz_end) { /* more bytes after a member: the next member */
            if (inflateReset(&s->z) != Z_OK) {
                s->error = EILSEQ;
                return -1;
            }
            s->gz_end = false;
        }
        int rc = inflate(&s->z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END)
            s->gz_end = true;
        else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            s->error = rc == Z_MEM_ERROR ? ENOMEM : EILSEQ;
            return -1;
        }
    }
    return (ssize_t)(size - s->z.avail_out);
}

/* The stored bytes as they are, after the ones read to look for the magic. */
static ssize_t read_plain(struct input_source *s, char *buf, size_t size)
{
    if (s->in_len) { /* the bytes read to look for the magic */
        size_t n = s->in_len < size ? s->in_len : size;
        memcpy(buf, s->in, n);
        memmove(s->in, s->in + n, s->in_len - n);
        s->in_len -= n;
        return (ssize_t)n;
    }
    return read_stored(s, (unsigned char *)buf, size);
}

static ssize_t source_read(void *cookie, char *buf, size_t size)
{
    struct input_source *s = cookie;
    ssize_t got = -1;
    if (!s->error && s->gzip)
        got = read_gzip(s, buf, size);
    else if (!s->error)
        got = read_plain(s, buf, size);
    if (got < 0)
        errno = s->error; /* what kvsim_read_line's caller reads */
    return got;
}

static int source_close(void *cookie)
{
    (void)cookie; /* input__source_close frees it: it still needs the hash */
    return 0;
}

int input__source_open(struct loader *ld, const char *path, struct input_source **out, FILE **f)
{
    *out = NULL;
    *f = NULL;
    struct input_source *s = calloc(1, sizeof *s);
    if (!s)
        return input__oom(ld);
    bool is_stdin = strcmp(path, "-") == 0;
    s->raw = is_stdin ? stdin : fopen(path, "rb");
    if (!s->raw) {
        int e = errno;
        free(s);
        return input__fail(ld, -e, 0, "cannot open: %s", strerror(e));
    }
    s->own_raw = !is_stdin;
    struct stat st;
    if (fstat(fileno(s->raw), &st) == 0 && S_ISDIR(st.st_mode)) { /* fopen takes a directory */
        input__source_close(s, NULL, NULL);
        return input__fail(ld, -EISDIR, 0, "cannot open: %s", strerror(EISDIR));
    }
    s->sha = EVP_MD_CTX_new();
    if (!s->sha || EVP_DigestInit_ex(s->sha, EVP_sha256(), NULL) != 1) {
        input__source_close(s, NULL, NULL);
        return input__oom(ld);
    }
    /* The gzip magic, 1f 8b: read two bytes and give them back through in[]. */
    while (s->in_len < 2) {
        ssize_t got = read_stored(s, s->in + s->in_len, 2 - s->in_len);
        if (got <= 0)
            break;
        s->in_len += (size_t)got;
    }
    if (s->error) {
        int e = s->error;
        input__source_close(s, NULL, NULL);
        return input__fail(ld, -e, 0, "read error: %s", strerror(e));
    }
    if (s->in_len == 2 && s->in[0] == 0x1f && s->in[1] == 0x8b) {
        s->gzip = true;
        if (inflateInit2(&s->z, 15 + 16) != Z_OK) { /* 15 + 16: a gzip header */
            input__source_close(s, NULL, NULL);
            return input__oom(ld);
        }
        s->z.next_in = s->in;
        s->z.avail_in = 2;
        s->in_len = 0;
    }
    cookie_io_functions_t io = {.read = source_read, .close = source_close};
    *f = fopencookie(s, "r", io);
    if (!*f) {
        input__source_close(s, NULL, NULL);
        return input__oom(ld);
    }
    *out = s;
    return 0;
}

int input__source_error(const struct input_source *s) { return s->error; }

int input__source_close(struct input_source *s, FILE *f, char sha256_hex[65])
{
    int rc = 0;
    if (f)
        fclose(f);
    struct stat st;
    bool regular = fstat(fileno(s->raw), &st) == 0 && S_ISREG(st.st_mode);
    unsigned char buf[SOURCE_CHUNK];
    if (sha256_hex && !regular && read_stored(s, buf, sizeof buf) > 0) {
        /* A stream the parser left before its end (--max-requests): what follows may never
         * end, and a hash of a prefix names nothing that can be read again. No hash. */
        sha256_hex[0] = '\0';
        sha256_hex = NULL;
    }
    if (sha256_hex) {
        /* Bytes the parser did not read (--max-requests) still belong to the file's hash. */
        while (!s->error && read_stored(s, buf, sizeof buf) > 0)
            ;
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (s->error || EVP_DigestFinal_ex(s->sha, md, &n) != 1 || n != 32)
            rc = s->error ? -s->error : -ENOMEM;
        else
            for (unsigned int i = 0; i < n; i++)
                snprintf(sha256_hex + 2 * i, 3, "%02x", md[i]);
    }
    if (s->gzip)
        inflateEnd(&s->z);
    EVP_MD_CTX_free(s->sha);
    if (s->own_raw)
        fclose(s->raw);
    free(s);
    return rc;
}

int64_t input__source_plain_size(const struct input_source *s)
{
    struct stat st;
    if (s->gzip || fstat(fileno(s->raw), &st) != 0 || !S_ISREG(st.st_mode))
        return -1;
    return (int64_t)st.st_size;
}
