/*
 * report_internal.h - the collector's layout, shared by metrics.c (the event functions),
 * summary.c and writers.c. Private to runtime/report/.
 */
#ifndef KVSIM_REPORT_INTERNAL_H
#define KVSIM_REPORT_INTERNAL_H

#include <stdint.h>

#include "runtime/report/report.h"

/* A thread's sketch on its own cache lines, so that workers never share one. */
struct thread_sketch {
    _Alignas(64) struct kvsim_sketch s;
};

struct kvsim_metrics {
    uint32_t num_requests;          /* R */
    uint32_t cap_requests;          /* records allocated (>= R; kvsim_metrics_grow) */
    uint32_t num_threads;           /* T */
    struct kvsim_req_record *recs;  /* [R], indexed by request */
    struct thread_sketch *sketches; /* [T], indexed by worker thread */
    bool disagg;                    /* records carry handoff fields */
};

#endif /* KVSIM_REPORT_INTERNAL_H */
