/*
 * fuzz_trace.c - libFuzzer target for one trace reader (FUZZ_FORMAT: KVSIM_TRACE_MOONCAKE,
 * KVSIM_TRACE_AZURE or KVSIM_TRACE_VLLM_RUN; one executable each, tests/fuzz/CMakeLists.txt).
 *
 * The guarantees of kvsim_trace_load (runtime/input/input.h) it asserts, beyond "no crash, no
 * sanitizer report":
 *   - refused: a negative errno, a message that starts with the file's name, and the trace left
 *     empty (no partial state);
 *   - accepted: at least one request, and at most one per line of the file; every request with
 *     input and output tokens, a source line, arrivals sorted from 0, a session's previous turn
 *     before it; the hash ids add up (each request's run lies in the array, the runs cover it
 *     exactly, and a request with hashes has ceil(input / block size) of them).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "runtime/input/input.h"

#include "fuzz_util.h"

static size_t count_lines(const uint8_t *d, size_t n)
{
    size_t lines = n > 0;
    for (size_t i = 0; i + 1 < n; i++)
        lines += d[i] == '\n';
    return lines;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024];
    int fd = fuzz_input_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    struct kvsim_trace_opts opts;
    kvsim_trace_opts_default(&opts);
    opts.format = FUZZ_FORMAT;
    struct kvsim_trace t;
    memset(&t, 0x5a, sizeof t); /* whatever the caller had: the loader must empty it on error */
    int rc = kvsim_trace_load(path, &opts, &t, err, sizeof err);
    close(fd);
    if (rc) {
        FUZZ_CHECK(rc < 0, "rc %d", rc);
        FUZZ_CHECK(strncmp(err, path, strlen(path)) == 0, "the message names the file: %s", err);
        FUZZ_CHECK(t.reqs == NULL && t.num_reqs == 0 && t.hash_ids == NULL && t.num_hash_ids == 0,
                   "a refused trace is left empty (%s)", err);
        return 0;
    }
    bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    FUZZ_CHECK(t.num_reqs >= 1, "an accepted trace has requests");
    FUZZ_CHECK(gzip || t.num_reqs <= count_lines(data, size), "%zu requests from %zu lines",
               t.num_reqs, count_lines(data, size));
    size_t hashes = 0;
    for (size_t i = 0; i < t.num_reqs; i++) {
        const struct kvsim_req_spec *r = &t.reqs[i];
        FUZZ_CHECK(r->input_len >= 1 && r->output_len >= 1, "request %zu: %u in, %u out", i,
                   r->input_len, r->output_len);
        FUZZ_CHECK(r->line >= 1, "request %zu has no source line", i);
        FUZZ_CHECK(r->arrival_ns >= 0 && (i == 0 || r->arrival_ns >= t.reqs[i - 1].arrival_ns),
                   "request %zu arrives at %lld, out of order", i, (long long)r->arrival_ns);
        FUZZ_CHECK(r->prev_turn < (int32_t)i, "request %zu: previous turn %d", i, r->prev_turn);
        FUZZ_CHECK(r->session < 0 || (uint32_t)r->session < t.num_sessions, "request %zu: session",
                   i);
        FUZZ_CHECK((size_t)r->hash_off + r->num_hashes <= t.num_hash_ids, "request %zu's hashes",
                   i);
        if (r->num_hashes)
            FUZZ_CHECK(r->num_hashes == (r->input_len + t.block_size - 1) / t.block_size,
                       "request %zu: %u hashes for %u tokens of blocks of %u", i, r->num_hashes,
                       r->input_len, t.block_size);
        hashes += r->num_hashes;
    }
    FUZZ_CHECK(t.num_reqs == 0 || t.reqs[0].arrival_ns == 0 || t.reqs[0].prev_turn >= 0,
               "arrivals start at 0");
    FUZZ_CHECK(hashes == t.num_hash_ids, "%zu hashes in requests, %zu in the array", hashes,
               t.num_hash_ids);
    kvsim_trace_free(&t);
    return 0;
}
