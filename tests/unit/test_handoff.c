/*
 * test_handoff.c - the handoff's typed lifecycle (engine.h): the happy path records every
 * instant, repeated and late facts are ignored, a fact that skips a state or goes back in time
 * is refused, the source is released no earlier than the transfer ends; the transfer model.
 */
#include <criterion/criterion.h>
#include <errno.h>

#include "runtime/runtime.h"

static struct kvsim_handoff pinned_at(int64_t t, int64_t timeout)
{
    struct kvsim_handoff h;
    kvsim_handoff_init(&h, 7, 6, 1);
    cr_assert_eq(h.state, KVSIM_HANDOFF_PREFILLING);
    cr_assert_eq(kvsim_handoff_pin(&h, t, 10, 160, timeout), 0);
    return h;
}

Test(handoff, the_happy_path_records_every_instant)
{
    struct kvsim_handoff h = pinned_at(100, 50);
    cr_assert_eq(h.deadline_ns, 150, "the abort clock starts at the pin");
    cr_assert_eq(kvsim_handoff_route(&h, 100, 3), 0);
    cr_assert_eq(kvsim_handoff_reserve(&h, 120, 64), 0);
    cr_assert_eq(kvsim_handoff_transfer(&h, 130, 140, 64 * 2), 0);
    cr_assert_eq(kvsim_handoff_complete(&h, 140), 0);
    cr_assert_eq(h.state, KVSIM_HANDOFF_COMPLETED);
    cr_assert_eq(h.decode_engine, 3);
    cr_assert_eq(h.routed_ns, 100);
    cr_assert_eq(h.reserved_ns, 120);
    cr_assert_eq(h.transfer_tokens, 64);
    cr_assert_eq(h.transfer_start_ns, 130);
    cr_assert_eq(h.source_released_ns, 140, "released once the destination has the KV");
    cr_assert_eq(h.end_ns, 140);
    cr_assert_str_eq(kvsim_handoff_state_name(h.state), "completed");
}

Test(handoff, repeated_and_late_facts_are_ignored)
{
    struct kvsim_handoff h = pinned_at(100, 0);
    cr_assert_eq(h.deadline_ns, INT64_MAX, "no timeout: no deadline");
    cr_assert_eq(kvsim_handoff_pin(&h, 100, 10, 160, 0), KVSIM_HANDOFF_IGNORED);
    cr_assert_eq(kvsim_handoff_route(&h, 110, 2), 0);
    cr_assert_eq(kvsim_handoff_route(&h, 110, 3), KVSIM_HANDOFF_IGNORED);
    cr_assert_eq(h.decode_engine, 2, "a repeated route changes nothing");
    cr_assert_eq(kvsim_handoff_abort(&h, 200), 0);
    cr_assert_eq(h.source_released_ns, 200, "an abort frees the source");
    cr_assert_eq(kvsim_handoff_abort(&h, 300), KVSIM_HANDOFF_IGNORED);
    cr_assert_eq(kvsim_handoff_reserve(&h, 300, 1), KVSIM_HANDOFF_IGNORED,
                 "a reservation after the abort starts nothing");
    cr_assert_eq(kvsim_handoff_complete(&h, 300), KVSIM_HANDOFF_IGNORED);
    cr_assert_eq(h.state, KVSIM_HANDOFF_ABORTED);
    cr_assert_eq(h.end_ns, 200);
}

Test(handoff, facts_out_of_order_are_refused)
{
    struct kvsim_handoff h;
    kvsim_handoff_init(&h, 1, 0, 0);
    cr_assert_eq(kvsim_handoff_route(&h, 10, 1), -EINVAL, "routed before pinned");
    cr_assert_eq(kvsim_handoff_release_source(&h, 10), -EINVAL, "released before pinned");
    h = pinned_at(100, 0);
    cr_assert_eq(kvsim_handoff_reserve(&h, 100, 1), -EINVAL, "reserved before routed");
    cr_assert_eq(kvsim_handoff_route(&h, 99, 1), -EINVAL, "routed before the pin");
    cr_assert_eq(kvsim_handoff_route(&h, 100, 1), 0);
    cr_assert_eq(kvsim_handoff_reserve(&h, 90, 1), -EINVAL, "reserved before routed (time)");
    cr_assert_eq(kvsim_handoff_reserve(&h, 110, 1), 0);
    cr_assert_eq(kvsim_handoff_transfer(&h, 105, 120, 1), -EINVAL, "starts before reserved");
    cr_assert_eq(kvsim_handoff_transfer(&h, 115, 115, 1), -EINVAL, "an empty transfer");
    cr_assert_eq(kvsim_handoff_transfer(&h, 115, 130, 1), 0);
    cr_assert_eq(kvsim_handoff_complete(&h, 115), -EINVAL, "completed at the transfer's start");
    cr_assert_eq(kvsim_handoff_complete(&h, 129), -EINVAL, "completed before the transfer ends");
    cr_assert_eq(kvsim_handoff_abort(&h, 105), -EINVAL, "aborted before the reservation");
    cr_assert_eq(h.state, KVSIM_HANDOFF_TRANSFERRING, "refusals change nothing");
    cr_assert_eq(kvsim_handoff_abort(&h, 125), 0, "the timeout may fire mid-transfer");
    cr_assert_eq(h.source_released_ns, 125);
    /* A transfer's start is recorded when it happens: an abort cannot come before it. */
    h = pinned_at(100, 0);
    cr_assert_eq(kvsim_handoff_route(&h, 100, 1), 0);
    cr_assert_eq(kvsim_handoff_reserve(&h, 110, 1), 0);
    cr_assert_eq(kvsim_handoff_transfer(&h, 200, 300, 1), 0);
    cr_assert_eq(kvsim_handoff_abort(&h, 150), -EINVAL, "aborted before the recorded start");
    cr_assert_eq(kvsim_handoff_abort(&h, 250), 0, "cut while it moves");
}

Test(handoff, immediate_release_is_recorded_at_the_pin)
{
    struct kvsim_handoff h = pinned_at(100, 0);
    cr_assert_eq(kvsim_handoff_release_source(&h, 100), 0);
    cr_assert_eq(kvsim_handoff_release_source(&h, 120), KVSIM_HANDOFF_IGNORED);
    cr_assert_eq(kvsim_handoff_route(&h, 100, 0), 0);
    cr_assert_eq(kvsim_handoff_reserve(&h, 110, 0), 0);
    cr_assert_eq(kvsim_handoff_transfer(&h, 110, 111, 0), 0);
    cr_assert_eq(kvsim_handoff_complete(&h, 111), 0);
    cr_assert_eq(h.source_released_ns, 100, "the what-if freed it at the pin");
}

Test(handoff, the_transfer_model)
{
    struct kvsim_transfer_model m = {.gbps = 25, .latency_ns = 0, .kv_bytes_per_token = 1000};
    cr_assert_eq(kvsim_transfer_bytes(&m, 50), 50000);
    cr_assert_eq(kvsim_transfer_duration_ns(&m, 50), 2000, "50 kB at 25 GB/s: 2 us");
    cr_assert_eq(kvsim_transfer_duration_ns(&m, 0), 1, "an empty read still takes 1 ns");
    cr_assert_eq(kvsim_transfer_min_ns(&m), 1);
    m.latency_ns = 5000;
    cr_assert_eq(kvsim_transfer_duration_ns(&m, 50), 7000);
    cr_assert_eq(kvsim_transfer_min_ns(&m), 5000);
    cr_assert_eq(kvsim_transfer_bytes(&m, UINT64_MAX), UINT64_MAX, "saturates");
    cr_assert_gt(kvsim_transfer_duration_ns(&m, UINT64_MAX), 0);
}

/* SGLang's order: the decode reserves before the source exists; the same transitions, checked
 * against that order. */
Test(handoff, the_destination_first_order)
{
    struct kvsim_handoff h;
    kvsim_handoff_init(&h, 9, 8, 0);
    cr_assert_eq(kvsim_handoff_set_order(&h, KVSIM_HANDOFF_DESTINATION_FIRST), 0);
    cr_assert_eq(kvsim_handoff_pin(&h, 10, 4, 64, 100), -EINVAL, "pinned before reserved");
    cr_assert_eq(kvsim_handoff_route(&h, 10, 2), 0);
    cr_assert_eq(kvsim_handoff_reserve(&h, 20, 64), 0);
    cr_assert_eq(kvsim_handoff_transfer(&h, 30, 40, 64), -EINVAL, "moved before the source");
    cr_assert_eq(kvsim_handoff_route(&h, 25, 3), KVSIM_HANDOFF_IGNORED, "a repeated route");
    cr_assert_eq(kvsim_handoff_pin(&h, 15, 4, 64, 100), -EINVAL, "pinned before the reservation");
    cr_assert_eq(kvsim_handoff_pin(&h, 50, 4, 64, 100), 0);
    cr_assert_eq(h.deadline_ns, 150, "the abort clock still starts at the pin");
    cr_assert_eq(kvsim_handoff_reserve(&h, 60, 1), KVSIM_HANDOFF_IGNORED, "already reserved");
    cr_assert_eq(kvsim_handoff_transfer(&h, 50, 70, 64), 0);
    cr_assert_eq(kvsim_handoff_complete(&h, 70), 0);
    cr_assert_eq(h.source_released_ns, 70);
    cr_assert_eq(kvsim_handoff_set_order(&h, KVSIM_HANDOFF_SOURCE_FIRST), -EINVAL,
                 "the order is chosen before the handoff moves");
}

Test(handoff, a_handoff_without_kv_completes_at_once)
{
    struct kvsim_handoff h = pinned_at(100, 0);
    h.pinned_blocks = 0; /* what a prompt shorter than a block pins */
    cr_assert_eq(kvsim_handoff_complete_without_kv(&h, 100), -EINVAL, "not routed yet");
    cr_assert_eq(kvsim_handoff_route(&h, 100, 1), 0);
    cr_assert_eq(kvsim_handoff_complete_without_kv(&h, 100), 0);
    cr_assert_eq(h.state, KVSIM_HANDOFF_COMPLETED);
    cr_assert_eq(h.transfer_start_ns, KVSIM_HANDOFF_TIME_NONE, "nothing moved");
    struct kvsim_handoff k = pinned_at(100, 0);
    cr_assert_eq(kvsim_handoff_route(&k, 100, 1), 0);
    cr_assert_eq(kvsim_handoff_complete_without_kv(&k, 100), -EINVAL, "pinned KV must move");
}
