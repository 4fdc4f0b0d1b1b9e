/*
 * bandwidth.c - deterministic processor sharing on one directional link (offload_bw_*).
 *
 * Every active transfer is served at the same rate, B/N bytes per second with N active. So one
 * number describes the progress of all of them: `served`, the bytes each active transfer has
 * received since the link was created (plus a remainder `carry` in units of 1/(N * 1e9) byte,
 * which makes the arithmetic exact: advancing by dt ns adds dt * B to the remainder and moves
 * whole bytes into `served`). A transfer started when served was S completes when served reaches
 * S + bytes (its `target`). Active transfers are kept sorted by (target, id), so the next
 * completion is always the first entry and its deadline is the time to serve the difference.
 *
 * Time moves only forward, from event to event (a start or a completion); between events N is
 * constant, and because the remainder is carried exactly, advancing in one step or in many gives
 * the same served count. When N changes the remainder is rescaled to the new unit (floor), a
 * deterministic function of the event times only.
 *
 * Completed transfers wait in a FIFO (`done`) until offload_bw_advance_to() reports them; they
 * are appended in time order and, within one nanosecond, in id order.
 */
#include "offload/offload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;

#define NS_PER_SEC 1000000000u

struct xfer {
    uint64_t target; /* value of `served` at which the transfer completes */
    uint64_t id;
};

struct offload_bw {
    int64_t bandwidth;   /* bytes per second; <= 0 = infinite */
    int64_t last;        /* virtual time of the last update */
    uint64_t served;     /* whole bytes served to every active transfer so far */
    uint64_t carry;      /* remainder, in 1/(n * 1e9) byte; < n * 1e9 (0 when n == 0) */
    struct xfer *active; /* sorted by (target, id) */
    uint32_t n, cap;
    struct offload_bw_completion *done; /* ring: completed, not yet reported */
    size_t done_head, done_len, done_cap;
};

uint64_t offload_block_bytes(uint64_t kv_bytes_per_token, uint32_t block_size)
{
    uint64_t r;
    if (__builtin_mul_overflow(kv_bytes_per_token, (uint64_t)block_size, &r))
        return 0;
    return r;
}

int offload_bw_create(int64_t bytes_per_sec, struct offload_bw **out)
{
    if (!out)
        return -EINVAL;
    struct offload_bw *bw = calloc(1, sizeof *bw);
    if (!bw)
        return -ENOMEM;
    bw->bandwidth = bytes_per_sec;
    *out = bw;
    return 0;
}

void offload_bw_destroy(struct offload_bw *bw)
{
    if (!bw)
        return;
    free(bw->active);
    free(bw->done);
    free(bw);
}

static int grow_active(struct offload_bw *bw, uint32_t want)
{
    if (want <= bw->cap)
        return 0;
    uint32_t cap = bw->cap ? bw->cap : 4;
    while (cap < want)
        cap *= 2;
    struct xfer *a = realloc(bw->active, cap * sizeof *a);
    if (!a)
        return -ENOMEM;
    bw->active = a;
    bw->cap = cap;
    return 0;
}

static int grow_done(struct offload_bw *bw, size_t want)
{
    if (want <= bw->done_cap)
        return 0;
    size_t cap = bw->done_cap ? bw->done_cap : 4;
    while (cap < want)
        cap *= 2;
    struct offload_bw_completion *d = malloc(cap * sizeof *d);
    if (!d)
        return -ENOMEM;
    for (size_t i = 0; i < bw->done_len; i++)
        d[i] = bw->done[(bw->done_head + i) % bw->done_cap];
    free(bw->done);
    bw->done = d;
    bw->done_head = 0;
    bw->done_cap = cap;
    return 0;
}

int offload_bw_reserve(struct offload_bw *bw, uint32_t n)
{
    int rc = grow_active(bw, n);
    return rc ? rc : grow_done(bw, n);
}

static struct offload_bw_completion *done_at(const struct offload_bw *bw, size_t i)
{
    return &bw->done[(bw->done_head + i) % bw->done_cap];
}

/* Appends a completion, keeping same-time completions in id order. Room must exist. */
static void done_push(struct offload_bw *bw, uint64_t id, int64_t time)
{
    size_t i = bw->done_len++;
    while (i > 0) {
        struct offload_bw_completion *prev = done_at(bw, i - 1);
        if (prev->time != time || prev->id < id)
            break;
        *done_at(bw, i) = *prev;
        i--;
    }
    done_at(bw, i)->id = id;
    done_at(bw, i)->time = time;
}

/* Nanoseconds until `served` reaches target (>= served), at the current n (> 0). */
static u128 time_to_reach(const struct offload_bw *bw, uint64_t target)
{
    uint64_t need = target - bw->served;
    if (need == 0)
        return 0;
    u128 num = (u128)need * bw->n * NS_PER_SEC - bw->carry; /* > 0: carry < n * 1e9 */
    u128 b = (u128)bw->bandwidth;
    return (num + b - 1) / b;
}

/* Serves dt ns at the current n (> 0). */
static void serve(struct offload_bw *bw, u128 dt)
{
    u128 unit = (u128)bw->n * NS_PER_SEC;
    u128 total = (u128)bw->carry + dt * (u128)bw->bandwidth;
    bw->served += (uint64_t)(total / unit);
    bw->carry = (uint64_t)(total % unit);
}

/* The number of active transfers changes from bw->n to n: rescale the remainder. */
static void set_n(struct offload_bw *bw, uint32_t n)
{
    if (n == 0 || bw->n == 0)
        bw->carry = 0;
    else
        bw->carry = (uint64_t)((u128)bw->carry * n / bw->n);
    bw->n = n;
}

/* Moves the first k active transfers (those whose target was reached) to done at time t. */
static void complete_first(struct offload_bw *bw, uint32_t k, int64_t t)
{
    for (uint32_t i = 0; i < k; i++)
        done_push(bw, bw->active[i].id, t);
    memmove(bw->active, bw->active + k, (bw->n - k) * sizeof *bw->active);
    set_n(bw, bw->n - k);
}

/* Moves the link to time t (> last), completing transfers on the way. */
static void advance_internal(struct offload_bw *bw, int64_t t)
{
    if (t <= bw->last)
        return;
    while (bw->n > 0) {
        u128 dt = time_to_reach(bw, bw->active[0].target);
        if (dt > (u128)(t - bw->last))
            break;
        serve(bw, dt);
        bw->last += (int64_t)dt;
        uint32_t k = 0;
        while (k < bw->n && bw->active[k].target <= bw->served)
            k++;
        complete_first(bw, k, bw->last);
    }
    if (bw->n > 0)
        serve(bw, (u128)(t - bw->last));
    bw->last = t;
}

int offload_bw_start(struct offload_bw *bw, int64_t now, uint64_t bytes, uint64_t id)
{
    int64_t t = now > bw->last ? now : bw->last;
    if (grow_active(bw, bw->n + 1) || grow_done(bw, bw->done_len + bw->n + 1))
        return -ENOMEM;
    advance_internal(bw, t);
    if (bw->bandwidth <= 0 || bytes == 0) {
        done_push(bw, id, t);
        return 0;
    }
    uint64_t target = bw->served + bytes;
    if (target < bw->served) /* cannot happen before 2^64 bytes have been served */
        target = UINT64_MAX;
    uint32_t i = bw->n;
    while (i > 0 && (bw->active[i - 1].target > target ||
                     (bw->active[i - 1].target == target && bw->active[i - 1].id > id))) {
        bw->active[i] = bw->active[i - 1];
        i--;
    }
    bw->active[i].target = target;
    bw->active[i].id = id;
    set_n(bw, bw->n + 1); /* rescales the remainder from the old n */
    return 0;
}

size_t offload_bw_advance_to(struct offload_bw *bw, int64_t now, struct offload_bw_completion *out,
                             size_t cap)
{
    advance_internal(bw, now);
    size_t k = 0;
    while (k < cap && bw->done_len > 0 && done_at(bw, 0)->time <= now) {
        out[k++] = *done_at(bw, 0);
        bw->done_head = (bw->done_head + 1) % bw->done_cap;
        bw->done_len--;
    }
    return k;
}

int64_t offload_bw_next_deadline(const struct offload_bw *bw)
{
    if (bw->done_len > 0)
        return done_at(bw, 0)->time;
    if (bw->n == 0)
        return OFFLOAD_NEVER;
    u128 dt = time_to_reach(bw, bw->active[0].target);
    if (dt >= (u128)(OFFLOAD_NEVER - bw->last))
        return OFFLOAD_NEVER - 1;
    return bw->last + (int64_t)dt;
}

int offload_bw_deadline_of(const struct offload_bw *bw, uint64_t id, int64_t *deadline)
{
    for (size_t i = 0; i < bw->done_len; i++) {
        if (done_at(bw, i)->id == id) {
            *deadline = done_at(bw, i)->time;
            return 0;
        }
    }
    uint32_t pos = bw->n;
    for (uint32_t i = 0; i < bw->n; i++) {
        if (bw->active[i].id == id) {
            pos = i;
            break;
        }
    }
    if (pos == bw->n)
        return -ENOENT;
    /* Replay the completions ahead of it on a copy of the sharing state. */
    struct offload_bw sim = *bw;
    uint32_t first = 0;
    u128 t = (u128)bw->last;
    for (;;) {
        u128 dt = time_to_reach(&sim, sim.active[first].target);
        serve(&sim, dt);
        t += dt;
        uint32_t k = first;
        while (k < bw->n && sim.active[k].target <= sim.served)
            k++;
        if (pos < k)
            break;
        uint32_t left = sim.n - (k - first);
        set_n(&sim, left);
        first = k;
    }
    *deadline = t >= (u128)OFFLOAD_NEVER ? OFFLOAD_NEVER - 1 : (int64_t)t;
    return 0;
}

int64_t offload_bw_now(const struct offload_bw *bw) { return bw->last; }
uint32_t offload_bw_active(const struct offload_bw *bw) { return bw->n; }
int64_t offload_bw_bandwidth(const struct offload_bw *bw) { return bw->bandwidth; }

void offload_bw_clear(struct offload_bw *bw)
{
    bw->n = 0;
    bw->carry = 0;
    bw->done_len = 0;
    bw->done_head = 0;
}
