/*
 * sched_internal.h - the scheduler's request queues, shared by sched.c and queue.c. Private to
 * sched/; same thread as the scheduler. Capacity is reserved when a request is added
 * (sched__rq_reserve), so pushes never fail.
 */
#ifndef KVSIM_SCHED_INTERNAL_H
#define KVSIM_SCHED_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "sched/sched.h"

struct rq {
    enum sched_policy policy;
    enum sched_queue tag;
    struct sched_request **a;
    size_t head, len, cap; /* deque: ring of cap (a power of two); heap: a[0..len) */
};

static inline bool prio_less(const struct sched_request *x, const struct sched_request *y)
{
    if (x->priority != y->priority)
        return x->priority < y->priority;
    if (x->arrival != y->arrival)
        return x->arrival < y->arrival;
    return x->add_seq < y->add_seq;
}

static inline struct sched_request **rq_at(const struct rq *q, size_t i)
{
    return &q->a[(q->head + i) & (q->cap - 1)];
}

static inline struct sched_request *rq_peek(const struct rq *q)
{
    if (!q->len)
        return NULL;
    return q->policy == SCHED_POLICY_PRIORITY ? q->a[0] : *rq_at(q, 0);
}
/* Makes room for need requests. Returns 0 or -ENOMEM. */
int sched__rq_reserve(struct rq *q, size_t need);
/* Adds r at the back (front: at the front; a heap ignores it). Capacity must be reserved. */
void sched__rq_push(struct rq *q, struct sched_request *r, bool front);
/* Removes and returns the first request in consideration order, or NULL. */
struct sched_request *sched__rq_pop(struct rq *q);
/* Removes r (which is in q). */
void sched__rq_remove(struct rq *q, struct sched_request *r);
/* Copies the queue in consideration order into out (only when cap covers it). Returns the
 * length. */
size_t sched__rq_snapshot(const struct rq *q, struct sched_request **out, size_t cap);

#endif /* KVSIM_SCHED_INTERNAL_H */
