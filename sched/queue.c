/*
 * queue.c - the scheduler's request queues (sched_internal.h): an FCFS deque (a power-of-two
 * ring) or a PRIORITY binary heap (vLLM's RequestQueue, reference section 3). Same thread as the
 * scheduler.
 */
#include "sched/sched_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sched__rq_reserve(struct rq *q, size_t need)
{
    if (need <= q->cap)
        return 0;
    size_t nc = q->cap ? q->cap : 16;
    while (nc < need)
        nc *= 2;
    struct sched_request **na = malloc(nc * sizeof *na);
    if (!na)
        return -ENOMEM;
    for (size_t i = 0; i < q->len; i++)
        na[i] = q->policy == SCHED_POLICY_FCFS ? q->a[(q->head + i) & (q->cap - 1)] : q->a[i];
    free(q->a);
    q->a = na;
    q->cap = nc;
    q->head = 0;
    return 0;
}

static void heap_set(struct rq *q, size_t i, struct sched_request *r)
{
    q->a[i] = r;
    r->qpos = i;
}

static void heap_up(struct rq *q, size_t i)
{
    struct sched_request *r = q->a[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!prio_less(r, q->a[p]))
            break;
        heap_set(q, i, q->a[p]);
        i = p;
    }
    heap_set(q, i, r);
}

static void heap_down(struct rq *q, size_t i)
{
    struct sched_request *r = q->a[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->len)
            break;
        if (c + 1 < q->len && prio_less(q->a[c + 1], q->a[c]))
            c++;
        if (!prio_less(q->a[c], r))
            break;
        heap_set(q, i, q->a[c]);
        i = c;
    }
    heap_set(q, i, r);
}

/* Capacity is reserved in sched_add: pushes cannot fail. */
void sched__rq_push(struct rq *q, struct sched_request *r, bool front)
{
    r->queue = q->tag;
    if (q->policy == SCHED_POLICY_PRIORITY) { /* "prepend" is an insert for a heap */
        q->a[q->len++] = r;
        heap_up(q, q->len - 1);
        return;
    }
    if (front) {
        q->head = (q->head - 1) & (q->cap - 1);
        q->a[q->head] = r;
    } else {
        *rq_at(q, q->len) = r;
    }
    q->len++;
}

static void rq_remove_at(struct rq *q, size_t i)
{
    struct sched_request *r;
    if (q->policy == SCHED_POLICY_PRIORITY) {
        r = q->a[i];
        q->len--;
        if (i < q->len) {
            heap_set(q, i, q->a[q->len]);
            heap_down(q, i);
            heap_up(q, q->a[i]->qpos);
        }
    } else {
        r = *rq_at(q, i);
        for (size_t k = i; k + 1 < q->len; k++)
            *rq_at(q, k) = *rq_at(q, k + 1);
        q->len--;
    }
    r->queue = SCHED_Q_NONE;
}

struct sched_request *sched__rq_pop(struct rq *q)
{
    struct sched_request *r = rq_peek(q);
    if (!r)
        return NULL;
    if (q->policy == SCHED_POLICY_FCFS) {
        q->head = (q->head + 1) & (q->cap - 1);
        q->len--;
        r->queue = SCHED_Q_NONE;
    } else {
        rq_remove_at(q, 0);
    }
    return r;
}

void sched__rq_remove(struct rq *q, struct sched_request *r)
{
    if (q->policy == SCHED_POLICY_PRIORITY) {
        rq_remove_at(q, r->qpos);
        return;
    }
    for (size_t i = 0; i < q->len; i++)
        if (*rq_at(q, i) == r) {
            rq_remove_at(q, i);
            return;
        }
}

static int cmp_prio(const void *a, const void *b)
{
    const struct sched_request *x = *(const struct sched_request *const *)a;
    const struct sched_request *y = *(const struct sched_request *const *)b;
    return prio_less(x, y) ? -1 : prio_less(y, x) ? 1 : 0;
}

/* Copies the queue in consideration order into out (at most cap). Returns the length. */
size_t sched__rq_snapshot(const struct rq *q, struct sched_request **out, size_t cap)
{
    size_t n = q->len < cap ? q->len : cap;
    if (q->policy == SCHED_POLICY_FCFS) {
        for (size_t i = 0; i < n; i++)
            out[i] = *rq_at(q, i);
        return q->len;
    }
    if (n == q->len) {
        memcpy(out, q->a, n * sizeof *out);
        qsort(out, n, sizeof *out, cmp_prio);
    }
    return q->len;
}
