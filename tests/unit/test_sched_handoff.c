/*
 * test_sched_handoff.c - the scheduler's disaggregated-serving primitives: a producer's blocks
 * pinned at finish (vLLM's delay_free_blocks) and released on request, a decode's connector
 * load parked as a destination reservation (listed in the step's parked list), finished or
 * failed through sched_load_finished, and cancelled cleanly.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "sched/sched.h"

static struct sched *make(uint32_t num_blocks)
{
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.check_invariants = true;
    cfg.num_blocks = num_blocks;
    cfg.block_size = 16;
    cfg.max_num_batched_tokens = 512;
    cfg.max_model_len = 1024;
    struct sched *s = NULL;
    cr_assert_eq(sched_create(&cfg, &s), 0);
    return s;
}

static struct sched_request *add(struct sched *s, uint64_t id, kvpool_token tok, uint32_t n,
                                 uint32_t max_tokens, bool producer, uint32_t external)
{
    kvpool_token prompt[1024];
    cr_assert(n <= 1024);
    for (uint32_t i = 0; i < n; i++)
        prompt[i] = tok;
    struct sched_request_params p = {
        .id = id,
        .prompt = prompt,
        .num_prompt_tokens = n,
        .max_tokens = max_tokens,
        .eos_token_id = -1,
        .arrival = (double)id,
        .kv_producer = producer,
        .external_tokens = external,
        .external_async = external > 0,
    };
    struct sched_request *r = NULL;
    cr_assert_eq(sched_add(s, &p, &r), 0);
    return r;
}

/* The model's output for st: one token for every request whose chunk samples. */
static void output(struct sched *s, struct sched_step *st)
{
    static const kvpool_token one[1] = {1000};
    const kvpool_token *toks[64];
    uint32_t counts[64];
    cr_assert(st->num_scheduled <= 64);
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        toks[i] = one;
        counts[i] = st->scheduled[i].samples ? 1 : 0;
    }
    struct sched_model_output out = {.tokens = toks, .num_tokens = counts};
    cr_assert_eq(sched_update(s, st, &out), 0);
}

/* One schedule and its output. */
static void step(struct sched *s)
{
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_not_null(st);
    output(s, st);
}

Test(pin, a_finished_producer_keeps_its_blocks_in_a_pin)
{
    struct sched *s = make(20);
    struct kvpool *pool = sched_pool(s);
    uint32_t free0 = kvpool_num_free_blocks(pool);
    struct sched_request *r = add(s, 7, 3, 40, 1, true, 0);
    step(s);
    cr_assert_eq(r->status, SCHED_FINISHED_LENGTH_CAPPED);
    uint32_t n;
    struct sched_pin *const *pins = sched_last_pinned(s, &n);
    cr_assert_eq(n, 1);
    struct sched_pin *pin = pins[0];
    cr_assert_eq(pin->id, 7);
    cr_assert_eq(pin->num_tokens, 40, "the KV of the prompt (remote_num_tokens)");
    cr_assert_eq(pin->kv.num_blocks, 3, "all of the request's blocks, the partial one too");
    cr_assert_eq(pin->kv.owner, KVPOOL_OWNER_HANDOFF_SOURCE);
    cr_assert_eq(r->kv.num_blocks, 0, "the request holds none: it can be released");
    cr_assert_eq(kvpool_num_free_blocks(pool), free0 - 3, "pinned blocks still count");
    cr_assert_eq(sched_num_pins(s), 1);
    cr_assert_eq(sched_num_pinned_blocks(s), 3);
    cr_assert_eq(sched_check(s, NULL), 0);
    cr_assert_eq(sched_release(s, r), 0);
    cr_assert_eq(sched_check(s, NULL), 0, "the pin outlives its request");
    /* The pinned full blocks are still prefix-cache hits for a later request. */
    struct sched_request *q = add(s, 8, 3, 40, 2, false, 0);
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_eq(q->num_cached_tokens, 32);
    output(s, st);
    cr_assert_eq(sched_release_pin(s, pin), 0);
    cr_assert_eq(sched_num_pins(s), 0);
    cr_assert_eq(sched_num_pinned_blocks(s), 0);
    cr_assert_eq(sched_check(s, NULL), 0);
    sched_destroy(s);
}

/* vLLM's request_finished delays the free only with a full block computed: a shorter prompt is
 * freed at once and nothing is handed off. */
Test(pin, a_producer_shorter_than_a_block_pins_nothing)
{
    struct sched *s = make(20);
    struct kvpool *pool = sched_pool(s);
    uint32_t free0 = kvpool_num_free_blocks(pool);
    struct sched_request *r = add(s, 7, 3, 15, 1, true, 0);
    step(s);
    cr_assert_eq(r->status, SCHED_FINISHED_LENGTH_CAPPED);
    uint32_t n;
    sched_last_pinned(s, &n);
    cr_assert_eq(n, 0);
    cr_assert_eq(sched_num_pins(s), 0);
    cr_assert_eq(kvpool_num_free_blocks(pool), free0, "freed at the finish");
    cr_assert_eq(sched_release(s, r), 0);
    /* One block's worth is enough to pin. */
    r = add(s, 8, 4, 16, 1, true, 0);
    step(s);
    sched_last_pinned(s, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(sched_num_pinned_blocks(s), 1);
    cr_assert_eq(sched_check(s, NULL), 0);
    sched_destroy(s);
}

Test(pin, release_returns_the_blocks_as_cached_evictable_blocks)
{
    struct sched *s = make(20);
    struct kvpool *pool = sched_pool(s);
    uint32_t free0 = kvpool_num_free_blocks(pool);
    struct sched_request *r = add(s, 1, 5, 48, 1, true, 0);
    step(s);
    uint32_t n;
    struct sched_pin *pin = sched_last_pinned(s, &n)[0];
    cr_assert_eq(sched_release(s, r), 0);
    cr_assert_eq(sched_release_pin(s, pin), 0);
    cr_assert_eq(kvpool_num_free_blocks(pool), free0);
    /* Released, not forgotten: the full blocks are still cached. */
    struct sched_request *q = add(s, 2, 5, 48, 2, false, 0);
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_eq(q->num_cached_tokens, 32, "hits capped at num_tokens - 1: 2 of 3 blocks");
    output(s, st);
    sched_destroy(s);
}

Test(pin, an_aborted_or_plain_request_is_never_pinned)
{
    struct sched *s = make(20);
    struct kvpool *pool = sched_pool(s);
    uint32_t free0 = kvpool_num_free_blocks(pool);
    struct sched_request *a = add(s, 1, 1, 40, 4, true, 0);
    struct sched_request *b = add(s, 2, 2, 40, 1, false, 0);
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_eq(sched_abort(s, a), 0);
    uint32_t n;
    sched_last_pinned(s, &n);
    cr_assert_eq(n, 0, "an abort frees at once (vLLM: not processed)");
    output(s, st);
    cr_assert(sched_status_is_finished(b->status));
    sched_last_pinned(s, &n);
    cr_assert_eq(n, 0, "not a producer");
    cr_assert_eq(sched_num_pins(s), 0);
    cr_assert_eq(kvpool_num_free_blocks(pool), free0);
    sched_destroy(s);
}

Test(pin, a_pinned_pool_refuses_admissions_it_cannot_fit)
{
    /* 8 usable blocks: a pinned 5-block prefill leaves 3, too few for a 4-block prompt. */
    struct sched *s = make(9);
    add(s, 1, 1, 80, 1, true, 0);
    step(s);
    uint32_t n;
    struct sched_pin *pin = sched_last_pinned(s, &n)[0];
    struct sched_request *q = add(s, 2, 2, 64, 1, false, 0);
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_eq(st->num_scheduled, 0, "the pin's blocks are not free");
    cr_assert_eq(q->status, SCHED_WAITING);
    output(s, st);
    cr_assert_eq(sched_release_pin(s, pin), 0);
    st = sched_schedule(s, NULL);
    cr_assert_eq(st->num_scheduled, 1, "admitted once the pin is released");
    output(s, st);
    sched_destroy(s);
}

Test(destination, a_connector_load_parks_lists_and_finishes_through_load_finished)
{
    struct sched *s = make(20);
    struct kvpool *pool = sched_pool(s);
    uint32_t free0 = kvpool_num_free_blocks(pool);
    struct sched_request *d = add(s, 1, 9, 40, 3, false, 40);
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_eq(st->num_parked, 1);
    cr_assert_eq(st->parked[0], d);
    cr_assert_eq(d->status, SCHED_WAITING_FOR_REMOTE_KVS);
    cr_assert_eq(d->loading_tokens, 40, "nothing cached here: the whole prompt comes remotely");
    cr_assert_eq(kvpool_num_free_blocks(pool), free0 - 3, "the destination is reserved");
    output(s, st);
    cr_assert_eq(sched_load_finished(s, d, true), 0);
    cr_assert_eq(sched_load_finished(s, d, true), -EINVAL, "one load, one finish");
    st = sched_schedule(s, NULL);
    cr_assert_eq(d->status, SCHED_RUNNING);
    cr_assert_eq(st->num_scheduled, 1);
    cr_assert_eq(st->scheduled[0].num_tokens, 1, "the last prompt token is recomputed");
    cr_assert_eq(st->num_parked, 0);
    output(s, st);
    sched_destroy(s);
}

Test(destination, local_hits_shrink_what_the_load_brings)
{
    struct sched *s = make(20);
    add(s, 1, 9, 40, 1, false, 0);
    step(s); /* caches two full blocks of token 9 */
    struct sched_request *d = add(s, 2, 9, 40, 3, false, 40);
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_eq(d->status, SCHED_WAITING_FOR_REMOTE_KVS);
    cr_assert_eq(d->num_cached_tokens, 40);
    cr_assert_eq(d->loading_tokens, 8, "32 local hits, 8 tokens loaded");
    output(s, st);
    sched_destroy(s);
}

Test(destination, a_failed_load_recomputes_the_prompt)
{
    struct sched *s = make(20);
    struct kvpool *pool = sched_pool(s);
    uint32_t free0 = kvpool_num_free_blocks(pool);
    struct sched_request *d = add(s, 1, 9, 40, 3, false, 40);
    struct sched_step *st = sched_schedule(s, NULL);
    output(s, st);
    cr_assert_eq(sched_load_finished(s, d, false), 0);
    st = sched_schedule(s, NULL);
    cr_assert_eq(d->status, SCHED_RUNNING);
    cr_assert_eq(st->scheduled[0].num_tokens, 40, "the whole prompt, computed here");
    cr_assert_eq(st->num_parked, 0, "never loaded again");
    output(s, st);
    cr_assert_eq(kvpool_num_free_blocks(pool), free0 - 3);
    sched_destroy(s);
}

Test(destination, a_cancelled_reservation_is_freed_once_the_transfer_is_over)
{
    struct sched *s = make(20);
    struct kvpool *pool = sched_pool(s);
    uint32_t free0 = kvpool_num_free_blocks(pool);
    struct sched_request *d = add(s, 1, 9, 40, 3, false, 40);
    struct sched_step *st = sched_schedule(s, NULL);
    output(s, st);
    cr_assert_eq(sched_abort(s, d), 0);
    cr_assert(d->free_delayed);
    cr_assert_eq(kvpool_num_free_blocks(pool), free0 - 3, "the transfer may still write them");
    cr_assert_eq(sched_load_finished(s, d, false), 0, "the transfer is cancelled");
    cr_assert_eq(kvpool_num_free_blocks(pool), free0);
    cr_assert_eq(sched_release(s, d), 0);
    cr_assert_eq(sched_check(s, NULL), 0);
    sched_destroy(s);
}

Test(destination, the_seq_slot_gate_applies_to_reservations)
{
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.check_invariants = true;
    cfg.max_num_seqs = 1;
    struct sched *s = NULL;
    cr_assert_eq(sched_create(&cfg, &s), 0);
    struct sched_request *a = add(s, 1, 1, 16, 10, false, 0);
    struct sched_request *d = add(s, 2, 2, 40, 3, false, 40);
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_eq(a->status, SCHED_RUNNING);
    cr_assert_eq(d->status, SCHED_WAITING, "running == max_num_seqs stops the waiting loop");
    cr_assert_eq(st->num_parked, 0);
    output(s, st);
    sched_destroy(s);
}
