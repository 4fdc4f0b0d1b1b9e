/*
 * fuzz_util.h - what the libFuzzer targets share: the input as a file the readers can open (a
 * memfd, /proc/self/fd/N: the readers take paths), the messages a command-line reader prints,
 * and a check that aborts with a message (the fuzzer then keeps the input as a crash).
 */
#ifndef KVSIM_FUZZ_UTIL_H
#define KVSIM_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* libFuzzer's entry point, defined by each target. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken guarantee: print it and abort (libFuzzer reports the input). */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz: %s:%d: %s: ", __FILE__, __LINE__, #cond);                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The input in a fresh memfd; path receives its /proc/self/fd name. Returns the fd (close it),
 * or -1 (the input is skipped). */
static inline int fuzz_input_file(const uint8_t *data, size_t size, char *path, size_t len)
{
    int fd = memfd_create("fuzz-input", 0);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

/* What the command line's readers print (cli_error writes to stderr) while one runs: stderr is
 * swapped for a memory stream, and fd 2 is left alone so that a sanitizer's or libFuzzer's
 * report still shows. fuzz_capture_end restores stderr and returns the text (malloc'd: free it;
 * "" when nothing was printed). */
struct fuzz_capture {
    FILE *saved, *stream;
    char *text;
    size_t len;
};

static inline void fuzz_capture_begin(struct fuzz_capture *c)
{
    c->text = NULL;
    c->len = 0;
    c->saved = stderr;
    c->stream = open_memstream(&c->text, &c->len);
    FUZZ_CHECK(c->stream != NULL, "open_memstream");
    stderr = c->stream;
}

static inline char *fuzz_capture_end(struct fuzz_capture *c)
{
    stderr = c->saved;
    FUZZ_CHECK(fclose(c->stream) == 0 && c->text != NULL, "the captured messages");
    return c->text;
}

#endif /* KVSIM_FUZZ_UTIL_H */
