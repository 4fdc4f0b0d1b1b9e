/*
 * tier_topology.c - the offload tiers a set of engines shares (engine.h, "the tier topology"):
 * the pipelines' thread pool, the block bytes, the G3 shared by all engines and the registry
 * threads around it. The tier policy of one engine is tiers.c; this is what sits around it.
 */
#include "runtime/engine/engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool/registry.h"
#include "runtime/report/report.h"

struct kvsim_tier_topology {
    struct kvsim_tiers_config tiers; /* what every engine gets */
    struct offload_pool *pool;       /* the pipelines' executor, or NULL (inline) */
    struct kvsim_g3_shared *g3;      /* the shared G3, or NULL */
    bool registered, online;         /* the coordinator's registry state (a shared G3 only) */
};

/* The registry's time starts at the first boundary (the first arrival). */
int kvsim_tier_topology_create(const struct kvsim_tier_topology_config *c,
                               struct kvsim_tier_topology **out, char *err, size_t errlen)
{
    *out = NULL;
    if (c->g3_shared && c->tiers.g3_blocks == 0) {
        snprintf(err, errlen, "a shared G3 needs offload tiers and a G3 capacity > 0");
        return -EINVAL;
    }
    struct kvsim_tier_topology *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "setting up the offload tiers: %s", strerror(ENOMEM));
        return -ENOMEM;
    }
    t->tiers = c->tiers;
    t->tiers.pool = NULL;
    t->tiers.g3_shared = NULL;
    t->tiers.pipe.block_bytes = offload_block_bytes(c->kv_bytes_per_token, c->block_size);
    int rc = 0;
    if (c->pool) {
        struct offload_pool_config pc;
        offload_pool_config_default(&pc);
        pc.threads = c->pool_threads;
        pc.max_pipelines = c->num_engines;
        rc = offload_pool_create(&pc, &t->pool);
        t->tiers.pool = t->pool;
        if (rc)
            snprintf(err, errlen, "starting the offload thread pool: %s", strerror(-rc));
    }
    if (rc == 0 && c->g3_shared) {
        kvpool_registry_thread_register();
        t->registered = t->online = true;
        rc = kvsim_g3_shared_create(c->tiers.g3_blocks, c->num_engines, c->vtime0, &t->g3);
        t->tiers.g3_shared = t->g3;
        if (rc)
            snprintf(err, errlen, "creating the shared G3: %s", strerror(-rc));
    }
    if (rc) {
        kvsim_tier_topology_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

const struct kvsim_tiers_config *
kvsim_tier_topology_engine_tiers(const struct kvsim_tier_topology *t)
{
    return &t->tiers;
}

int kvsim_tier_topology_boundary(struct kvsim_tier_topology *t, int64_t b)
{
    return t && t->g3 ? kvsim_g3_shared_boundary(t->g3, b) : 0;
}

bool kvsim_tier_topology_coordinator_offline(struct kvsim_tier_topology *t)
{
    if (!t || !t->online)
        return false;
    kvpool_registry_thread_offline();
    t->online = false;
    return true;
}

void kvsim_tier_topology_coordinator_online(struct kvsim_tier_topology *t)
{
    if (t && t->registered && !t->online) {
        kvpool_registry_thread_online();
        t->online = true;
    }
}

void kvsim_tier_topology_thread_join(const struct kvsim_tier_topology *t)
{
    if (t && t->g3)
        kvpool_registry_thread_register();
}

void kvsim_tier_topology_thread_leave(const struct kvsim_tier_topology *t)
{
    if (t && t->g3)
        kvpool_registry_thread_unregister();
}

void kvsim_tier_topology_thread_offline(const struct kvsim_tier_topology *t)
{
    if (t && t->g3)
        kvpool_registry_thread_offline();
}

void kvsim_tier_topology_thread_online(const struct kvsim_tier_topology *t)
{
    if (t && t->g3)
        kvpool_registry_thread_online();
}

void kvsim_tier_topology_thread_quiescent(const struct kvsim_tier_topology *t)
{
    if (t && t->g3)
        kvpool_registry_thread_quiescent();
}

void kvsim_tier_topology_summarize(const struct kvsim_tier_topology *t,
                                   struct kvsim_engine *const *engines, uint32_t num_engines,
                                   struct kvsim_offload_summary *o)
{
    memset(o, 0, sizeof *o);
    o->enabled = true;
    for (uint32_t e = 0; e < num_engines; e++) {
        struct kvsim_engine_offload eo;
        kvsim_engine_offload_stats(engines[e], &eo);
        for (int l = 0; l < KVSIM_REPORT_NUM_LANES; l++) {
            o->lanes[l].batches += eo.tiers.lanes[l].completed;
            o->lanes[l].blocks += eo.tiers.lanes[l].blocks;
            o->lanes[l].bytes += eo.tiers.lanes[l].bytes;
            o->lanes[l].failed += eo.tiers.lanes[l].failed;
            o->lanes[l].cancelled += eo.tiers.lanes[l].cancelled;
        }
        o->g1_miss_blocks += eo.sched.g1_miss_blocks;
        o->g2_hit_blocks += eo.tiers.g2_hit_blocks;
        o->g3_hit_blocks += eo.tiers.g3_hit_blocks;
        o->onboarded_tokens += eo.sched.onboarded_tokens;
        o->recomputed_tokens += eo.prefill_tokens;
        o->loads += eo.tiers.loads;
        o->failed_loads += eo.tiers.failed_loads;
        o->blocked += eo.sched.blocked;
        o->retry_now += eo.sched.retry_now;
        o->blocked_ns += eo.blocked_ns;
        o->onboard_wait_ns += (int64_t)eo.tiers.onboard_wait_ns;
        o->written_g2 += eo.tiers.written_g2;
        o->written_g3 += eo.tiers.written_g3;
        o->filtered += eo.tiers.filtered;
        o->dropped += eo.tiers.dropped;
        o->failed_blocks += eo.tiers.failed_blocks;
        o->g2_resident += eo.tiers.g2_size;
        o->g3_resident += eo.tiers.g3_size;
    }
    if (t->g3) {
        struct kvsim_g3_shared_stats gs;
        kvsim_g3_shared_stats(t->g3, &gs);
        o->g3_resident = gs.resident;
        o->g3_shared = true;
        o->g3_evictions = gs.evictions;
    }
    if (o->g1_miss_blocks) {
        o->g2_hit_rate = (double)o->g2_hit_blocks / (double)o->g1_miss_blocks;
        o->g3_hit_rate = (double)o->g3_hit_blocks / (double)o->g1_miss_blocks;
    }
}

void kvsim_tier_topology_destroy(struct kvsim_tier_topology *t)
{
    if (!t)
        return;
    kvsim_tier_topology_coordinator_offline(t); /* the pool's shutdown may wait */
    offload_pool_destroy(t->pool);
    if (t->registered) {
        kvsim_tier_topology_coordinator_online(t);
        kvsim_g3_shared_destroy(t->g3);
        kvpool_registry_thread_unregister();
    }
    free(t);
}
