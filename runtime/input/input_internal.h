/*
 * input_internal.h - the trace loader shared by trace.c (the file loop) and the format parsers
 * (mooncake.c, azure.c, vllm_run.c). Private to runtime/input/. Same thread as the caller of
 * kvsim_trace_load; errors are negative errno values with a message in the loader's buffer.
 */
#ifndef KVSIM_INPUT_INTERNAL_H
#define KVSIM_INPUT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "runtime/input/input.h"

/* Longest excerpt of a bad value quoted in an error message. */
#define INPUT__QUOTE_MAX 48

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
    bool jansson_only; /* tests: every Mooncake line through jansson, none through the scanner */
    int64_t *scan;     /* the Mooncake scanner's hash ids of the current line */
    size_t cap_scan;
};

struct azure_state {
    bool have_first;
    int64_t sec0, nsec0; /* the first row's time */
};

/* Makes room for need elements of size elem in *p (capacity *cap). Returns 0 or -ENOMEM. */
int input__grow(void **p, size_t *cap, size_t need, size_t elem);
/* Copies at most INPUT__QUOTE_MAX bytes of s[0..n) into buf, printable ASCII only ('?' otherwise).
 */
const char *input__quote(char *buf, size_t buflen, const char *s, size_t n);
/* Formats "<file>: <msg>" (line 0) or "<file>:<line>: <msg>" into the error buffer; returns rc. */
int input__fail(struct loader *ld, int rc, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "<file>:<line>: field '<name>': <msg>"; returns -EINVAL. */
int input__fail_field(struct loader *ld, uint32_t line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "<file>: out of memory"; returns -ENOMEM. */
int input__oom(struct loader *ld);

/* ---- source.c: the trace's bytes --------------------------------------------------------- */

struct input_source;
/* Opens path ("-": standard input) as *f, inflated when it is gzip, hashing the stored
 * bytes. Returns 0, or a negative errno with ld's message set. */
int input__source_open(struct loader *ld, const char *path, struct input_source **out, FILE **f);
/* The errno of a failed read or a corrupt gzip stream (EILSEQ), or 0. */
int input__source_error(const struct input_source *s);
/* The stored size in bytes of a plain (not gzip) regular file, or -1 (stdin, a pipe, gzip). */
int64_t input__source_plain_size(const struct input_source *s);
/* Closes f (if not NULL) and the source; with sha256_hex, first hashes the bytes left unread and
 * writes the stored bytes' sha256 as 64 hex digits. Returns 0 or a negative errno (a read error:
 * the hash is then not written). */
int input__source_close(struct input_source *s, FILE *f, char sha256_hex[65]);
/* Appends a zeroed request (independent, no hashes) with its raw time; NULL when out of memory. */
struct kvsim_req_spec *input__add_req(struct loader *ld, uint32_t line, int64_t raw_ts);
/* Looks key up in the session table, adding it as a new session if absent. Sets *session and
 * *is_new. Returns 0 or -ENOMEM. */
int input__session_lookup(struct loader *ld, const char *key, size_t len, int32_t *session,
                          bool *is_new);

/* The JSONL formats' shared pieces (jsonl.c): a value's kind for messages ("an integer", ...);
 * a required integer field in [min, UINT32_MAX] (0 or -EINVAL); one line parsed as a JSON object
 * and handed to row (an error names the line and the column). */
const char *input__json_kind(const json_t *v);
const char *input__type_kind(json_type type);
int input__get_u32(struct loader *ld, uint32_t line, json_t *o, const char *name, uint32_t min,
                   uint32_t *out);
int input__json_line(struct loader *ld, uint32_t line, const char *s, size_t n,
                     int (*row)(struct loader *ld, uint32_t line, json_t *o));

/* A field's value as the checks see it, whether jansson or a scanner read it (json_int_t is
 * 64 bits): the checks and their messages are then the same for both. */
struct input_val {
    bool present; /* false: the key is absent */
    json_type type;
    int64_t i;     /* JSON_INTEGER */
    double d;      /* JSON_REAL */
    const char *s; /* JSON_STRING: n bytes, not NUL-terminated for a scanner's */
    size_t n;
};
/* v (NULL: absent) as an input_val; strings stay owned by v. */
void input__val_of(const json_t *v, struct input_val *out);
/* input__get_u32 on a value already read. */
int input__val_u32(struct loader *ld, uint32_t line, const char *name, const struct input_val *v,
                   uint32_t min, uint32_t *out);

/* One Mooncake JSONL line (not blank). Returns 0 or a negative errno. */
int input__mooncake_line(struct loader *ld, uint32_t line, const char *s, size_t n);
/* One Azure CSV data line (not blank, not the header). Returns 0 or a negative errno. */
int input__azure_line(struct loader *ld, struct azure_state *st, uint32_t line, const char *s,
                      size_t n);
/* Checks the Azure header line (line 1). Returns 0 or -EINVAL. */
int input__azure_header(struct loader *ld, const char *s, size_t n);
/* One line of a recorded vLLM run's requests.jsonl (not blank). Returns 0 or a negative errno. */
int input__vllm_run_line(struct loader *ld, uint32_t line, const char *s, size_t n);

/* kvsim_trace_load, with jansson_only for the tests: they compare it with the scanner. */
int input__trace_load(const char *path, const struct kvsim_trace_opts *opts, bool jansson_only,
                      struct kvsim_trace *out, char *err, size_t errlen);

/* Shared with workload.c. */

/*
 * input__trace_sort - sort t->reqs by (arrival_ns, line, current index) and rewrite every
 * prev_turn to the new index of the request it named. Returns 0 or -ENOMEM (t unchanged).
 */
int input__trace_sort(struct kvsim_trace *t);

#endif /* KVSIM_INPUT_INTERNAL_H */
