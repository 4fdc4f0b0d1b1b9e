/*
 * samples.c - an engine's time series (--timeseries-out, --html): one struct kvsim_ts_sample
 * per interval of virtual time.
 *
 * Why it is cheap: the engine calls engine__sample_to(t) before it processes anything at t,
 * which is one compare until t passes the end of the interval being counted. Only then does
 * this file read the gauges (running, waiting, KV blocks, pinned blocks), which is exact: no
 * event happened between the engine's last one and t, so its current state is its state at
 * every interval end in between. Counts (tokens, preemptions) are added by engine.c as they
 * happen, into e->cur.
 *
 * Threads: the engine's owner, as every engine function.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "tiers.h"

/* The tiers' cumulative stored and loaded blocks (0 without tiers). */
static void offload_totals(const struct kvsim_engine *e, uint64_t *stored, uint64_t *loaded)
{
    *stored = *loaded = 0;
    if (!e->tiers)
        return;
    struct kvsim_tiers_stats st;
    kvsim_tiers_stats(e->tiers, &st);
    *stored = st.written_g2 + st.written_g3;
    *loaded = st.g2_hit_blocks + st.g3_hit_blocks;
}

/* Appends the interval being counted with the current gauges. Returns 0 or -ENOMEM. */
static int close_interval(struct kvsim_engine *e)
{
    if (e->num_samples == e->cap_samples) {
        uint32_t nc = e->cap_samples ? 2 * e->cap_samples : 64;
        struct kvsim_ts_sample *ns = realloc(e->samples, (size_t)nc * sizeof *ns);
        if (!ns)
            return -ENOMEM;
        e->samples = ns;
        e->cap_samples = nc;
    }
    struct kvsim_ts_sample *s = &e->samples[e->num_samples++];
    *s = e->cur;
    struct sched_request *const *rr;
    s->running = sched_running(e->s, &rr);
    s->waiting = sched_waiting_snapshot(e->s, NULL, 0);
    struct kvpool *pool = sched_pool(e->s);
    s->kv_total_blocks = kvpool_num_usable_blocks(pool);
    s->kv_used_blocks = s->kv_total_blocks - kvpool_num_free_blocks(pool);
    s->pinned_blocks = e->pinned_blocks;
    uint64_t stored, loaded;
    offload_totals(e, &stored, &loaded);
    s->offload_stored_blocks = stored - e->offload_stored_base;
    s->offload_loaded_blocks = loaded - e->offload_loaded_base;
    e->offload_stored_base = stored;
    e->offload_loaded_base = loaded;
    memset(&e->cur, 0, sizeof e->cur);
    return 0;
}

int engine__sample_flush(struct kvsim_engine *e, int64_t t)
{
    while (t >= e->next_sample_ns) {
        if (close_interval(e) != 0)
            return engine__fail(e, -ENOMEM);
        e->next_sample_ns = e->next_sample_ns > INT64_MAX - e->cfg.sample_interval_ns
                                ? INT64_MAX
                                : e->next_sample_ns + e->cfg.sample_interval_ns;
    }
    return 0;
}

const struct kvsim_ts_sample *kvsim_engine_samples(const struct kvsim_engine *e, uint32_t *n)
{
    *n = e->num_samples;
    return e->samples;
}

int kvsim_engine_samples_finish(struct kvsim_engine *e, uint32_t num_intervals)
{
    if (e->cfg.sample_interval_ns <= 0)
        return 0;
    while (e->num_samples < num_intervals)
        if (close_interval(e) != 0)
            return engine__fail(e, -ENOMEM);
    return 0;
}
