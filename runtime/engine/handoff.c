/*
 * handoff.c - the disaggregated handoff's typed lifecycle and the KV transfer model (engine.h).
 *
 * Each transition checks the state it leaves, which the handoff's order (source-first or
 * destination-first) decides: a repeated fact (the state it would enter is the current one, or
 * a later one in that order) and any fact about a finished handoff change nothing and answer
 * KVSIM_HANDOFF_IGNORED; a fact that skips a state, or comes before an instant already
 * recorded, is out of order (-EINVAL). Pure functions of the handoff: any thread that owns it.
 */
#include "runtime/engine/engine.h"

#include <errno.h>
#include <math.h>
#include <string.h>

const char *kvsim_handoff_state_name(enum kvsim_handoff_state s)
{
    switch (s) {
    case KVSIM_HANDOFF_NONE: return "none";
    case KVSIM_HANDOFF_PREFILLING: return "prefilling";
    case KVSIM_HANDOFF_SOURCE_PINNED: return "source_pinned";
    case KVSIM_HANDOFF_DECODE_ROUTED: return "decode_routed";
    case KVSIM_HANDOFF_DESTINATION_RESERVED: return "destination_reserved";
    case KVSIM_HANDOFF_TRANSFERRING: return "transferring";
    case KVSIM_HANDOFF_COMPLETED: return "completed";
    case KVSIM_HANDOFF_ABORTED: return "aborted";
    }
    return "?";
}

void kvsim_handoff_init(struct kvsim_handoff *h, uint64_t id, uint32_t req, int32_t prefill_engine)
{
    memset(h, 0, sizeof *h);
    h->id = id;
    h->req = req;
    h->prefill_engine = prefill_engine;
    h->decode_engine = -1;
    h->state = KVSIM_HANDOFF_PREFILLING;
    h->pin_ns = h->routed_ns = h->reserved_ns = KVSIM_HANDOFF_TIME_NONE;
    h->transfer_start_ns = h->transfer_end_ns = KVSIM_HANDOFF_TIME_NONE;
    h->source_released_ns = h->end_ns = KVSIM_HANDOFF_TIME_NONE;
    h->deadline_ns = INT64_MAX;
}

/* The latest instant a fact was recorded at (a transfer's end is scheduled when it starts, not
 * recorded: an abort may cut the transfer). */
static int64_t last_fact_ns(const struct kvsim_handoff *h)
{
    int64_t last = KVSIM_HANDOFF_TIME_NONE;
    const int64_t at[] = {h->pin_ns, h->routed_ns, h->reserved_ns, h->transfer_start_ns,
                          h->source_released_ns};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        if (at[i] != KVSIM_HANDOFF_TIME_NONE && (last == KVSIM_HANDOFF_TIME_NONE || at[i] > last))
            last = at[i];
    return last;
}

/* A state's place in h's order (final states last). */
static int rank_of(const struct kvsim_handoff *h, enum kvsim_handoff_state st)
{
    static const int source_first[] = {
        [KVSIM_HANDOFF_NONE] = 0,
        [KVSIM_HANDOFF_PREFILLING] = 1,
        [KVSIM_HANDOFF_SOURCE_PINNED] = 2,
        [KVSIM_HANDOFF_DECODE_ROUTED] = 3,
        [KVSIM_HANDOFF_DESTINATION_RESERVED] = 4,
        [KVSIM_HANDOFF_TRANSFERRING] = 5,
        [KVSIM_HANDOFF_COMPLETED] = 6,
        [KVSIM_HANDOFF_ABORTED] = 6,
    };
    static const int destination_first[] = {
        [KVSIM_HANDOFF_NONE] = 0,          [KVSIM_HANDOFF_PREFILLING] = 1,
        [KVSIM_HANDOFF_DECODE_ROUTED] = 2, [KVSIM_HANDOFF_DESTINATION_RESERVED] = 3,
        [KVSIM_HANDOFF_SOURCE_PINNED] = 4, [KVSIM_HANDOFF_TRANSFERRING] = 5,
        [KVSIM_HANDOFF_COMPLETED] = 6,     [KVSIM_HANDOFF_ABORTED] = 6,
    };
    return h->order == KVSIM_HANDOFF_DESTINATION_FIRST ? destination_first[st] : source_first[st];
}

/* The state a transition leaves in h's order. */
static enum kvsim_handoff_state before(const struct kvsim_handoff *h, enum kvsim_handoff_state to)
{
    bool df = h->order == KVSIM_HANDOFF_DESTINATION_FIRST;
    switch (to) {
    case KVSIM_HANDOFF_SOURCE_PINNED:
        return df ? KVSIM_HANDOFF_DESTINATION_RESERVED : KVSIM_HANDOFF_PREFILLING;
    case KVSIM_HANDOFF_DECODE_ROUTED:
        return df ? KVSIM_HANDOFF_PREFILLING : KVSIM_HANDOFF_SOURCE_PINNED;
    case KVSIM_HANDOFF_DESTINATION_RESERVED: return KVSIM_HANDOFF_DECODE_ROUTED;
    case KVSIM_HANDOFF_TRANSFERRING:
        return df ? KVSIM_HANDOFF_SOURCE_PINNED : KVSIM_HANDOFF_DESTINATION_RESERVED;
    case KVSIM_HANDOFF_COMPLETED: return KVSIM_HANDOFF_TRANSFERRING;
    default: return KVSIM_HANDOFF_NONE;
    }
}

/* The common check for entering `to`: 0 when h is in the state before it (apply), IGNORED when
 * it is past that state or final, -EINVAL when it has not reached it or t is before a fact
 * already recorded. */
static int step_to(const struct kvsim_handoff *h, enum kvsim_handoff_state to, int64_t t)
{
    enum kvsim_handoff_state from = before(h, to);
    if (kvsim_handoff_is_final(h) || rank_of(h, h->state) > rank_of(h, from))
        return KVSIM_HANDOFF_IGNORED;
    if (h->state != from)
        return -EINVAL;
    int64_t last = last_fact_ns(h);
    return last != KVSIM_HANDOFF_TIME_NONE && t < last ? -EINVAL : 0;
}

int kvsim_handoff_set_order(struct kvsim_handoff *h, enum kvsim_handoff_order order)
{
    if (h->state != KVSIM_HANDOFF_PREFILLING || last_fact_ns(h) != KVSIM_HANDOFF_TIME_NONE ||
        (order != KVSIM_HANDOFF_SOURCE_FIRST && order != KVSIM_HANDOFF_DESTINATION_FIRST))
        return -EINVAL;
    h->order = order;
    return 0;
}

int kvsim_handoff_pin(struct kvsim_handoff *h, int64_t t, uint32_t blocks, uint64_t tokens,
                      int64_t timeout_ns)
{
    int rc = step_to(h, KVSIM_HANDOFF_SOURCE_PINNED, t);
    if (rc)
        return rc;
    h->state = KVSIM_HANDOFF_SOURCE_PINNED;
    h->pin_ns = t;
    h->pinned_blocks = blocks;
    h->pinned_tokens = tokens;
    h->deadline_ns = timeout_ns > 0 && t <= INT64_MAX - timeout_ns ? t + timeout_ns : INT64_MAX;
    return 0;
}

int kvsim_handoff_release_source(struct kvsim_handoff *h, int64_t t)
{
    if (h->pin_ns == KVSIM_HANDOFF_TIME_NONE)
        return -EINVAL; /* nothing pinned yet */
    if (h->source_released_ns != KVSIM_HANDOFF_TIME_NONE)
        return KVSIM_HANDOFF_IGNORED;
    if (t < h->pin_ns)
        return -EINVAL;
    h->source_released_ns = t;
    return 0;
}

int kvsim_handoff_route(struct kvsim_handoff *h, int64_t t, int32_t decode_engine)
{
    int rc = step_to(h, KVSIM_HANDOFF_DECODE_ROUTED, t);
    if (rc)
        return rc;
    h->state = KVSIM_HANDOFF_DECODE_ROUTED;
    h->routed_ns = t;
    h->decode_engine = decode_engine;
    return 0;
}

int kvsim_handoff_reserve(struct kvsim_handoff *h, int64_t t, uint64_t missing_tokens)
{
    int rc = step_to(h, KVSIM_HANDOFF_DESTINATION_RESERVED, t);
    if (rc)
        return rc;
    h->state = KVSIM_HANDOFF_DESTINATION_RESERVED;
    h->reserved_ns = t;
    h->transfer_tokens = missing_tokens;
    return 0;
}

int kvsim_handoff_transfer(struct kvsim_handoff *h, int64_t start, int64_t end, uint64_t bytes)
{
    int rc = step_to(h, KVSIM_HANDOFF_TRANSFERRING, start);
    if (rc)
        return rc;
    if (start < h->reserved_ns || end <= start)
        return -EINVAL;
    h->state = KVSIM_HANDOFF_TRANSFERRING;
    h->transfer_start_ns = start;
    h->transfer_end_ns = end;
    h->transfer_bytes = bytes;
    return 0;
}

int kvsim_handoff_complete(struct kvsim_handoff *h, int64_t t)
{
    int rc = step_to(h, KVSIM_HANDOFF_COMPLETED, t);
    if (rc)
        return rc;
    if (t < h->transfer_end_ns)
        return -EINVAL; /* the source is released once the destination has the KV */
    h->state = KVSIM_HANDOFF_COMPLETED;
    h->end_ns = t;
    if (h->source_released_ns == KVSIM_HANDOFF_TIME_NONE)
        h->source_released_ns = t; /* released after the destination is activated */
    return 0;
}

int kvsim_handoff_complete_without_kv(struct kvsim_handoff *h, int64_t t)
{
    /* the state a transfer would leave: routed (source-first) or pinned (destination-first) */
    enum kvsim_handoff_state from = h->order == KVSIM_HANDOFF_DESTINATION_FIRST
                                        ? KVSIM_HANDOFF_SOURCE_PINNED
                                        : KVSIM_HANDOFF_DECODE_ROUTED;
    if (kvsim_handoff_is_final(h))
        return KVSIM_HANDOFF_IGNORED;
    int64_t last = last_fact_ns(h);
    if (h->state != from || h->pin_ns == KVSIM_HANDOFF_TIME_NONE ||
        (last != KVSIM_HANDOFF_TIME_NONE && t < last))
        return -EINVAL;
    if (h->pinned_blocks != 0)
        return -EINVAL; /* pinned KV must be transferred or aborted */
    h->state = KVSIM_HANDOFF_COMPLETED;
    h->end_ns = t;
    if (h->source_released_ns == KVSIM_HANDOFF_TIME_NONE)
        h->source_released_ns = t;
    return 0;
}

int kvsim_handoff_abort(struct kvsim_handoff *h, int64_t t)
{
    if (kvsim_handoff_is_final(h))
        return KVSIM_HANDOFF_IGNORED;
    int64_t last = last_fact_ns(h);
    if (h->state == KVSIM_HANDOFF_NONE || (last != KVSIM_HANDOFF_TIME_NONE && t < last))
        return -EINVAL;
    h->state = KVSIM_HANDOFF_ABORTED;
    h->end_ns = t;
    if (h->pin_ns != KVSIM_HANDOFF_TIME_NONE && h->source_released_ns == KVSIM_HANDOFF_TIME_NONE)
        h->source_released_ns = t;
    return 0;
}

/* ---- the transfer model ------------------------------------------------------------------- */

uint64_t kvsim_transfer_bytes(const struct kvsim_transfer_model *m, uint64_t tokens)
{
    return tokens > UINT64_MAX / (m->kv_bytes_per_token ? m->kv_bytes_per_token : 1)
               ? UINT64_MAX
               : tokens * m->kv_bytes_per_token;
}

int64_t kvsim_transfer_duration_ns(const struct kvsim_transfer_model *m, uint64_t tokens)
{
    double ns = (double)kvsim_transfer_bytes(m, tokens) / m->gbps; /* bytes / (GB/s) = ns */
    double total = ns + (double)m->latency_ns;
    if (!(total < 9.0e18))
        return INT64_MAX; /* past the clock's end: the caller's kvsim_clock_add refuses it */
    int64_t d = (int64_t)llround(total);
    return d >= 1 ? d : 1;
}

int64_t kvsim_transfer_min_ns(const struct kvsim_transfer_model *m)
{
    return m->latency_ns >= 1 ? m->latency_ns : 1;
}
