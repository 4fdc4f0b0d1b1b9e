/*
 * test_free_queue.c - SC-28: the free-queue primitives (vLLM FreeKVCacheBlockQueue).
 *
 * Ported from tests/v1/core/test_kv_cache_utils.py::test_free_kv_cache_block_queue_* (see
 * shared/conformance/vllm-scenarios.md SC-28). The queue is read front to back by walking
 * the links from the head sentinel until the tail sentinel, independently of the primitives.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvpool/kvpool_internal.h"

#include "common.h"

TestSuite(free_queue);

enum { MAX_IDS = 16 };

/* Reads the queue front to back through the links; returns the number of ids written. */
static uint32_t fq_read(const struct kvpool_free_queue *q, int32_t *out, uint32_t cap)
{
    uint32_t n = 0;
    int32_t tail = kvpool__fq_tail(q);
    for (int32_t id = kvpool__fq_link(q, kvpool__fq_head(q))->next; id != tail;
         id = kvpool__fq_link(q, id)->next) {
        cr_assert(id >= 0 && id < q->cap, "free queue link out of range: %d", id);
        cr_assert(n < cap, "free queue longer than %u (cycle?)", cap);
        /* The backward link must agree with the forward walk. */
        int32_t expected_prev = n == 0 ? kvpool__fq_head(q) : out[n - 1];
        cr_assert_eq(kvpool__fq_link(q, id)->prev, expected_prev, "prev[%d] is %d, expected %d", id,
                     kvpool__fq_link(q, id)->prev, expected_prev);
        out[n++] = id;
    }
    cr_assert_eq(kvpool__fq_link(q, tail)->prev, n == 0 ? kvpool__fq_head(q) : out[n - 1],
                 "tail sentinel's prev link is wrong");
    return n;
}

/* Asserts that the queue reads exactly want[0..wn) front to back and that count agrees. */
static void assert_queue(const struct kvpool_free_queue *q, const int32_t *want, uint32_t wn,
                         const char *what)
{
    int32_t got[MAX_IDS];
    uint32_t n = fq_read(q, got, MAX_IDS);
    char gbuf[256], wbuf[256];
    kvsim_test_fmt_ids(gbuf, sizeof gbuf, got, n);
    kvsim_test_fmt_ids(wbuf, sizeof wbuf, want, wn);
    cr_assert_eq(n, wn, "%s: queue is %s, expected %s", what, gbuf, wbuf);
    cr_assert_eq(q->count, wn, "%s: count is %u, expected %u", what, q->count, wn);
    for (uint32_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s: queue is %s, expected %s", what, gbuf, wbuf);
}

/* A queue over ids 0..cap-1 holding ids[0..n) in that order. */
static void fq_build(struct kvpool_free_queue *q, int32_t cap, const int32_t *ids, uint32_t n)
{
    cr_assert_eq(kvpool__fq_init(q, cap), 0, "kvpool__fq_init(%d) failed", cap);
    for (uint32_t i = 0; i < n; i++)
        kvpool__fq_append(q, ids[i]);
}

Test(free_queue, init_is_empty)
{
    struct kvpool_free_queue q;
    cr_assert_eq(kvpool__fq_init(&q, 8), 0, "init failed");
    assert_queue(&q, NULL, 0, "fresh queue");
    cr_assert_eq(kvpool__fq_front(&q), -1, "front of an empty queue must be -1");
    for (int32_t id = 0; id < 8; id++)
        cr_assert(!kvpool__fq_contains(&q, id), "fresh queue contains %d", id);
    kvpool__fq_fini(&q);
}

Test(free_queue, popleft_remove_append_then_empty)
{
    static const int32_t init[] = {0, 1, 2, 3, 4};
    struct kvpool_free_queue q;
    fq_build(&q, 5, init, 5);
    assert_queue(&q, init, 5, "built [0..4]");

    cr_assert_eq(kvpool__fq_popleft(&q), 0, "popleft must return the front (0)");
    cr_assert(!kvpool__fq_contains(&q, 0), "0 still queued after popleft");
    assert_queue(&q, (const int32_t[]){1, 2, 3, 4}, 4, "after popleft");

    kvpool__fq_remove(&q, 2);
    cr_assert(!kvpool__fq_contains(&q, 2), "2 still queued after remove");
    assert_queue(&q, (const int32_t[]){1, 3, 4}, 3, "after remove(2)");

    kvpool__fq_append(&q, 2);
    assert_queue(&q, (const int32_t[]){1, 3, 4, 2}, 4, "after append(2)");
    cr_assert_eq(kvpool__fq_front(&q), 1, "front must be 1");

    static const int32_t order[] = {1, 3, 4, 2};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(kvpool__fq_popleft(&q), order[i], "popleft #%d must return %d", i, order[i]);
    assert_queue(&q, NULL, 0, "after 4x popleft");

    cr_assert_eq(kvpool__fq_popleft(&q), -ENOSPC, "popleft on an empty queue must be -ENOSPC");
    assert_queue(&q, NULL, 0, "after failed popleft");
    kvpool__fq_fini(&q);
}

Test(free_queue, remove_front_and_back)
{
    static const int32_t init[] = {0, 1, 2, 3, 4};
    struct kvpool_free_queue q;
    fq_build(&q, 5, init, 5);
    kvpool__fq_remove(&q, 0);
    kvpool__fq_remove(&q, 4);
    assert_queue(&q, (const int32_t[]){1, 2, 3}, 3, "after removing both ends");
    kvpool__fq_remove(&q, 2);
    kvpool__fq_remove(&q, 1);
    kvpool__fq_remove(&q, 3);
    assert_queue(&q, NULL, 0, "after removing everything");
    kvpool__fq_fini(&q);
}

Test(free_queue, append_n_preserves_order)
{
    struct kvpool_free_queue q;
    cr_assert_eq(kvpool__fq_init(&q, 6), 0, "init failed");
    kvpool__fq_append_n(&q, (const int32_t[]){0}, 1);
    assert_queue(&q, (const int32_t[]){0}, 1, "append_n [b0]");
    kvpool__fq_append_n(&q, (const int32_t[]){4, 5}, 2);
    assert_queue(&q, (const int32_t[]){0, 4, 5}, 3, "append_n [b4,b5]");
    kvpool__fq_append_n(&q, (const int32_t[]){1, 2, 3}, 3);
    assert_queue(&q, (const int32_t[]){0, 4, 5, 1, 2, 3}, 6, "append_n [b1,b2,b3]");
    kvpool__fq_append_n(&q, NULL, 0);
    assert_queue(&q, (const int32_t[]){0, 4, 5, 1, 2, 3}, 6, "append_n of nothing");
    kvpool__fq_fini(&q);
}

Test(free_queue, prepend_n_preserves_order)
{
    struct kvpool_free_queue q;
    fq_build(&q, 6, (const int32_t[]){0}, 1);
    kvpool__fq_prepend_n(&q, (const int32_t[]){4, 5}, 2);
    assert_queue(&q, (const int32_t[]){4, 5, 0}, 3, "prepend_n [b4,b5] on [b0]");
    kvpool__fq_prepend_n(&q, (const int32_t[]){1, 2}, 2);
    assert_queue(&q, (const int32_t[]){1, 2, 4, 5, 0}, 5, "prepend_n [b1,b2]");
    static const int32_t order[] = {1, 2, 4, 5, 0};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(kvpool__fq_popleft(&q), order[i], "popleft #%d must return %d", i, order[i]);
    assert_queue(&q, NULL, 0, "drained");
    kvpool__fq_fini(&q);
}

Test(free_queue, prepend_n_on_empty_queue)
{
    struct kvpool_free_queue q;
    cr_assert_eq(kvpool__fq_init(&q, 4), 0, "init failed");
    kvpool__fq_prepend_n(&q, (const int32_t[]){3, 1, 2}, 3);
    assert_queue(&q, (const int32_t[]){3, 1, 2}, 3, "prepend_n on empty");
    kvpool__fq_append(&q, 0);
    assert_queue(&q, (const int32_t[]){3, 1, 2, 0}, 4, "append after prepend_n");
    kvpool__fq_fini(&q);
}

Test(free_queue, popleft_n_in_chunks)
{
    static const int32_t init[] = {1, 3, 5, 4, 0, 2};
    struct kvpool_free_queue q;
    fq_build(&q, 6, init, 6);
    int32_t out[6] = {-7, -7, -7, -7, -7, -7};

    cr_assert_eq(kvpool__fq_popleft_n(&q, out, 1), 0, "popleft_n(1) failed");
    cr_assert_eq(out[0], 1, "popleft_n(1) -> [1], got [%d]", out[0]);
    cr_assert_eq(out[1], -7, "popleft_n(1) wrote past its count");

    cr_assert_eq(kvpool__fq_popleft_n(&q, out, 2), 0, "popleft_n(2) failed");
    cr_assert(out[0] == 3 && out[1] == 5, "popleft_n(2) -> [3,5], got [%d,%d]", out[0], out[1]);

    cr_assert_eq(kvpool__fq_popleft_n(&q, out, 3), 0, "popleft_n(3) failed");
    cr_assert(out[0] == 4 && out[1] == 0 && out[2] == 2, "popleft_n(3) -> [4,0,2], got [%d,%d,%d]",
              out[0], out[1], out[2]);
    assert_queue(&q, NULL, 0, "after popping everything");

    cr_assert_eq(kvpool__fq_popleft_n(&q, out, 0), 0, "popleft_n(0) on empty must succeed");
    kvpool__fq_fini(&q);
}

Test(free_queue, popleft_n_more_than_queued_pops_nothing)
{
    static const int32_t init[] = {1, 3, 5, 4, 0, 2};
    struct kvpool_free_queue q;
    fq_build(&q, 6, init, 6);
    int32_t out[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
    cr_assert_eq(kvpool__fq_popleft_n(&q, out, 7), -ENOSPC, "popleft_n(7) of 6 must be -ENOSPC");
    for (int i = 0; i < 8; i++)
        cr_assert_eq(out[i], -7, "failed popleft_n wrote out[%d] = %d", i, out[i]);
    assert_queue(&q, init, 6, "after failed popleft_n");
    for (int i = 0; i < 6; i++)
        cr_assert(kvpool__fq_contains(&q, init[i]), "%d no longer queued", init[i]);
    kvpool__fq_fini(&q);
}

Test(free_queue, insert_after_links_in_place)
{
    struct kvpool_free_queue q;
    fq_build(&q, 6, (const int32_t[]){0, 2, 4}, 3);
    kvpool__fq_insert_after(&q, 0, 1);
    kvpool__fq_insert_after(&q, 4, 5);
    kvpool__fq_insert_after(&q, kvpool__fq_head(&q), 3);
    assert_queue(&q, (const int32_t[]){3, 0, 1, 2, 4, 5}, 6, "after insert_after");
    kvpool__fq_fini(&q);
}
