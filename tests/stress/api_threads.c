/*
 * api_threads.c - the public API's thread contract under ThreadSanitizer (a plain executable:
 * Criterion cannot run under TSan): T threads each create their own configuration and engine
 * (one of them with the offload thread pool), drive the same requests through it and digest
 * every event. Engines on different threads must not race (TSan) and must not see each other
 * (the digests agree). Exit 0, or 1 naming what differed.
 *
 *   api_threads [THREADS]        (default 4)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/kvsim.h"

enum { REQUESTS = 300 };

struct worker {
    int index;
    uint64_t digest;
    int rc;
    char err[256];
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}

static void *run(void *arg)
{
    struct worker *w = arg;
    kvsim_config_t *c;
    kvsim_engine_t *e = NULL;
    w->rc = kvsim_config_new(&c);
    const char *opts = w->index == 0 ? "{\"num-gpu-blocks\": 300, \"g2-blocks\": 2000, "
                                       "\"offload-executor\": \"pool\", \"kv-events\": true}"
                                     : "{\"num-gpu-blocks\": 300, \"g2-blocks\": 2000, "
                                       "\"kv-events\": true}";
    if (w->rc == 0 && (w->rc = kvsim_config_set_json(c, opts)) == 0)
        w->rc = kvsim_engine_new(c, &e);
    if (w->rc) {
        snprintf(w->err, sizeof w->err, "%s", kvsim_config_error(c));
        kvsim_config_free(c);
        return NULL;
    }
    uint64_t hashes[REQUESTS][8];
    for (int i = 0; i < REQUESTS && w->rc == 0; i++) {
        kvsim_request_t r = KVSIM_REQUEST_INIT;
        for (int k = 0; k < 8; k++)
            hashes[i][k] =
                k < 4 ? (uint64_t)(i % 10) * 100 + (uint64_t)k : (uint64_t)i * 1000 + (uint64_t)k;
        r.id = (uint64_t)i;
        r.arrival_ns = (int64_t)i * 3000000;
        r.hash_ids = hashes[i];
        r.num_hash_ids = 8;
        r.hash_block_size = 16;
        r.max_tokens = 8 + (uint32_t)(i % 17);
        w->rc = kvsim_engine_add(e, &r);
    }
    uint64_t h = 0;
    kvsim_event_t ev[128];
    while (w->rc == 0 && kvsim_engine_next_time(e) != INT64_MAX) {
        int n = kvsim_engine_step(e);
        if (n < 0) {
            w->rc = n;
            break;
        }
        size_t k;
        while ((k = kvsim_engine_events(e, ev, 128)) > 0)
            for (size_t i = 0; i < k; i++)
                h = mix(mix(mix(mix(h, (uint64_t)ev[i].t_ns), ev[i].id), ev[i].kind), ev[i].a);
    }
    if (w->rc)
        snprintf(w->err, sizeof w->err, "%s", kvsim_engine_errmsg(e));
    w->digest = h;
    kvsim_engine_free(e);
    kvsim_config_free(c);
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 2 || n > 64) {
        fprintf(stderr, "usage: api_threads [THREADS in 2..64]\n");
        return 2;
    }
    struct worker *w = calloc((size_t)n, sizeof *w);
    pthread_t *t = calloc((size_t)n, sizeof *t);
    if (!w || !t)
        return 1;
    for (int i = 0; i < n; i++) {
        w[i].index = i;
        if (pthread_create(&t[i], NULL, run, &w[i]) != 0) {
            fprintf(stderr, "api_threads: cannot start thread %d\n", i);
            return 1;
        }
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        if (w[i].rc) {
            fprintf(stderr, "api_threads: thread %d: %s (%s)\n", i, kvsim_strerror(w[i].rc),
                    w[i].err);
            bad = 1;
        } else if (w[i].digest != w[0].digest) {
            fprintf(stderr, "api_threads: thread %d's events differ from thread 0's\n", i);
            bad = 1;
        }
    }
    if (!bad)
        printf("api_threads: %d engines on %d threads, identical events (digest %016" PRIx64 ")\n",
               n, n, w[0].digest);
    free(w);
    free(t);
    return bad;
}
