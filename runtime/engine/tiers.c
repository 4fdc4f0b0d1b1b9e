/*
 * tiers.c - the offload policy of one engine (tiers.h); the shared G3's coordinator side is
 * g3_shared.c.
 *
 * Bookkeeping. Every enqueued batch has a record (its cookie is the record index) with the kind
 * of copy, the block hashes and, for G1 copies, the G1 block ids; records are recycled through a
 * free list. A load (one request's onboarding) has its own record: the G2 pins it took, how many
 * of its batches are outstanding, whether one failed.
 *
 * No "in flight" sets: a G1 block whose copy is in flight is held, so it stays in G1's prefix
 * cache and later requests hit it there instead of storing the hash again; only a duplicate-hash
 * block (a request that did not read the cache) can store a hash that is already on its way,
 * and that rare second copy lands as a presence-filtered insert. Likewise, with
 * g3_write_through a G2 eviction sends nothing (the block went to G3 when G2 received it).
 * Each tier lookup is a likely cache miss on a large table, so one fewer per copied block
 * matters: this halves the tier operations per written-through block.
 *
 * Copies into G3 triggered inside a completion callback are collected and enqueued after the
 * pipeline call returns, at the pipeline's current time: still a function of virtual time only.
 *
 * Shared G3 (the end of this file, and tiers.h). Completion callbacks run inside pipeline calls,
 * during which the owner may be offline (the pool executor's blocking waits), so they touch only
 * engine-local state: the engine's own-writes set, its epoch log and the registrations still to
 * make. The registry (reads as of the boundary, registrations at their completion times) is used
 * once the pipeline call has returned and the thread is online again.
 */
#include "runtime/engine/tiers_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Loops over many hashes ask for the tier-table home of the hash this many entries ahead, so
 * consecutive cache misses overlap; asking for all of a long list up front (a long prefill stores
 * hundreds of blocks in one step) overflows the core's outstanding misses, and the first lines
 * are gone again before the loop reaches them. */
#define TIER_PREFETCH_AHEAD 8u

enum tb_kind { TB_G1_G2, TB_G2_G3, TB_G3_G2, TB_G2_G1 };
static const enum offload_lane tb_lane[] = {OFFLOAD_LANE_G1_G2, OFFLOAD_LANE_G2_G3,
                                            OFFLOAD_LANE_G3_G2, OFFLOAD_LANE_G2_G1};

struct tbatch {
    enum tb_kind kind;
    bool live;
    uint32_t n;
    uint32_t load;      /* TB_G3_G2 / TB_G2_G1: the load record */
    uint32_t next_free; /* free list */
    struct offload_token tok;
    /* hashes / G1 blocks live in the shared arrays at index * max_blocks */
};

struct tload {
    struct sched_request *r;
    uint32_t first, n;
    uint32_t outstanding; /* batches not yet drained */
    uint32_t num_pinned;  /* G2 pins held (pinned[]) */
    kvpool_hash *pinned;  /* n entries */
    int64_t start;
    bool failed, staging, live;
    uint32_t next_free;
};

struct pending_g3 {
    kvpool_hash hash;
    bool pinned; /* a G2 pin taken for the copy (write-through of a resident block) */
};

struct kvsim_tiers {
    struct kvsim_tiers_config cfg;
    struct offload_pipeline *pipe;
    struct offload_tier *g2, *g3;
    struct sched *s;
    struct kvpool *pool;
    uint32_t max_blocks; /* the largest lane batch */
    /* batch records */
    struct tbatch *b;
    kvpool_hash *bh;
    kvpool_block_id *bg1;
    bool *bpin; /* TB_G2_G3: per block, a G2 pin to drop */
    uint32_t nb, capb, freeb;
    /* loads */
    struct tload *ld;
    uint32_t nl, capl, freel;
    /* stored since the last flush */
    kvpool_block_id *st_b;
    kvpool_hash *st_h;
    uint32_t nst, capst;
    bool st_oom;
    /* G3 copies waiting to be enqueued */
    struct pending_g3 *pg3;
    uint32_t npg3, cappg3;
    int err; /* first error inside a callback */
    /* shared G3 (NULL without): this engine's slot, registrations not yet made (the copies'
     * completion times and hashes), entries registered during this advance, the watermark */
    struct kvsim_g3_shared *sh;
    struct g3_slot *slot;
    int64_t *preg_t;
    kvpool_hash *preg_h;
    uint32_t npreg, cappreg_t, cappreg_h;
    kvpool_hash *open;
    uint32_t nopen, capopen;
    int64_t published;
    bool offline_waits; /* pool executor: go offline around the pipeline's blocking calls */
    struct kvsim_tiers_stats st;
    uint64_t sent[OFFLOAD_NUM_LANES], recv[OFFLOAD_NUM_LANES], lost[OFFLOAD_NUM_LANES];
    uint32_t live_batches;
};

void kvsim_tiers_config_default(struct kvsim_tiers_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->g2_blocks = 4096;
    offload_config_default(&cfg->pipe);
}

/* ---- records ------------------------------------------------------------------------------- */

int engine__grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint32_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *np = realloc(*p, (size_t)nc * elem);
    if (!np)
        return -ENOMEM;
    *p = np;
    *cap = nc;
    return 0;
}

static int batch_alloc(struct kvsim_tiers *t, uint32_t *out)
{
    if (t->freeb != UINT32_MAX) {
        *out = t->freeb;
        t->freeb = t->b[*out].next_free;
        return 0;
    }
    if (t->nb == t->capb) {
        uint32_t nc = t->capb ? t->capb * 2 : 64;
        size_t mb = t->max_blocks;
        struct tbatch *nb = realloc(t->b, nc * sizeof *nb);
        if (nb)
            t->b = nb;
        kvpool_hash *nh = realloc(t->bh, nc * mb * sizeof *nh);
        if (nh)
            t->bh = nh;
        kvpool_block_id *ng = realloc(t->bg1, nc * mb * sizeof *ng);
        if (ng)
            t->bg1 = ng;
        bool *np = realloc(t->bpin, nc * mb * sizeof *np);
        if (np)
            t->bpin = np;
        if (!nb || !nh || !ng || !np)
            return -ENOMEM;
        t->capb = nc;
    }
    *out = t->nb++;
    return 0;
}

static void batch_free(struct kvsim_tiers *t, uint32_t i)
{
    t->b[i].live = false;
    t->b[i].next_free = t->freeb;
    t->freeb = i;
    t->live_batches--;
}

static kvpool_hash *bh(struct kvsim_tiers *t, uint32_t i)
{
    return t->bh + (size_t)i * t->max_blocks;
}
static kvpool_block_id *bg1(struct kvsim_tiers *t, uint32_t i)
{
    return t->bg1 + (size_t)i * t->max_blocks;
}
static bool *bpin(struct kvsim_tiers *t, uint32_t i) { return t->bpin + (size_t)i * t->max_blocks; }

/* ---- shared G3: the engine side ------------------------------------------------------------ */
/* Appends (t, h, kind) to this engine's epoch log. Context: the owner (online or not). */
static int g3_log(struct kvsim_tiers *t, int64_t at, kvpool_hash h, enum g3_rec_kind kind)
{
    struct g3_slot *sl = t->slot;
    if (engine__grow((void **)&sl->log, &sl->caplog, sl->nlog + 1, sizeof *sl->log))
        return -ENOMEM;
    sl->log[sl->nlog++] = (struct g3_rec){.t = at, .h = h, .kind = kind};
    return 0;
}

/* A G2->G3 copy of h completed at `at`: h is this engine's own write (visible to it at once), is
 * logged for the coordinator and waits to be registered. Returns 1 (a new write), 0 (this
 * engine wrote h already this epoch) or -ENOMEM. Context: the owner, maybe offline. */
static int g3_shared_write(struct kvsim_tiers *t, kvpool_hash h, int64_t at)
{
    if (engine__grow((void **)&t->preg_t, &t->cappreg_t, t->npreg + 1, sizeof *t->preg_t) ||
        engine__grow((void **)&t->preg_h, &t->cappreg_h, t->npreg + 1, sizeof *t->preg_h))
        return -ENOMEM;
    int rc = engine__hset_add(&t->slot->own, h);
    if (rc <= 0)
        return rc;
    if (g3_log(t, at, h, G3_WRITE) != 0)
        return -ENOMEM;
    t->preg_t[t->npreg] = at;
    t->preg_h[t->npreg++] = h;
    return 1;
}

/* Whether this engine holds h in the shared G3: in the registry as of the boundary, or its own
 * write since. Context: the owner, online. */
static bool g3_shared_holds(const struct kvsim_tiers *t, kvpool_hash h)
{
    return engine__hset_contains(&t->slot->own, h) ||
           kvpool_registry_contains_rcu(t->sh->reg, KVPOOL_TIER_G3, h, t->sh->b);
}

/* Whether G3 (per engine or shared) holds h. Context: the owner, online. */
static bool g3_holds(const struct kvsim_tiers *t, kvpool_hash h)
{
    if (t->g3)
        return offload_tier_contains(t->g3, h);
    return t->sh && g3_shared_holds(t, h);
}

/* Registers the pending writes through the engine's writer, one batch per completion time.
 * A write at or before the last published watermark (an instant copy at the boundary itself)
 * is not registered: the registry cannot take it, and the coordinator registers it at the next
 * boundary anyway. Context: the owner, online. */
static int g3_register_pending(struct kvsim_tiers *t)
{
    int rc = 0;
    uint32_t i = 0;
    while (i < t->npreg && rc == 0) {
        int64_t at = t->preg_t[i];
        uint32_t j = i + 1;
        while (j < t->npreg && t->preg_t[j] == at)
            j++;
        if (at > t->published) {
            if (engine__grow((void **)&t->open, &t->capopen, t->nopen + (j - i), sizeof *t->open))
                return -ENOMEM;
            int64_t n = kvpool_registry_register_batch(t->slot->w, KVPOOL_TIER_G3, t->preg_h + i,
                                                       j - i, at);
            if (n < 0)
                rc = (int)n;
            memcpy(t->open + t->nopen, t->preg_h + i, (j - i) * sizeof *t->open);
            t->nopen += j - i;
        }
        i = j;
    }
    t->npreg = 0;
    return rc;
}

int kvsim_tiers_publish(struct kvsim_tiers *t, int64_t until)
{
    if (!t->sh)
        return 0;
    int rc = g3_register_pending(t);
    if (rc)
        return rc;
    /* Closed at until: the coordinator registers what its LRU admits at the boundary until,
     * so presence is continuous. The last advance (until = never) leaves them live. */
    if (t->nopen && until != KVPOOL_VTIME_NEVER) {
        int64_t n =
            kvpool_registry_remove_batch(t->slot->w, KVPOOL_TIER_G3, t->open, t->nopen, until);
        if (n < 0)
            return (int)n;
    }
    t->nopen = 0;
    if ((rc = kvpool_registry_publish(t->slot->w, until)) != 0)
        return rc;
    t->published = until;
    return 0;
}

/* Enqueues record i (filled) on its lane. On failure the record is freed and the error
 * returned (the caller undoes its holds and pins). */
static int batch_submit(struct kvsim_tiers *t, uint32_t i)
{
    struct tbatch *b = &t->b[i];
    enum offload_lane lane = tb_lane[b->kind];
    b->live = true;
    t->live_batches++;
    int rc = offload_enqueue(t->pipe, lane, bg1(t, i), b->n, i, &b->tok);
    if (rc) {
        batch_free(t, i);
        return rc;
    }
    t->sent[lane] += b->n;
    return 0;
}

/* ---- write-through ------------------------------------------------------------------------- */

static void on_stored(void *ctx, const kvpool_block_id *blocks, const kvpool_hash *hashes,
                      uint32_t n)
{
    struct kvsim_tiers *t = ctx;
    if (t->nst + n > t->capst) {
        uint32_t nc = t->capst ? t->capst : 64;
        while (nc < t->nst + n)
            nc *= 2;
        kvpool_block_id *nb = realloc(t->st_b, nc * sizeof *nb);
        if (nb)
            t->st_b = nb;
        kvpool_hash *nh = realloc(t->st_h, nc * sizeof *nh);
        if (nh)
            t->st_h = nh;
        if (!nb || !nh) {
            t->st_oom = true; /* reported by the next flush */
            return;
        }
        t->capst = nc;
    }
    memcpy(t->st_b + t->nst, blocks, n * sizeof *blocks);
    memcpy(t->st_h + t->nst, hashes, n * sizeof *hashes);
    t->nst += n;
}

/* Returns a record that never went live to the free list. */
static void batch_unused(struct kvsim_tiers *t, uint32_t i)
{
    t->b[i].next_free = t->freeb;
    t->freeb = i;
}

/* Undoes the holds of a G1->G2 record that never reached the pipeline. */
static void write_g2_undo(struct kvsim_tiers *t, const kvpool_block_id *g1, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++)
        kvpool_release_hold(t->pool, g1[k]);
}

static int submit_write_g2(struct kvsim_tiers *t, uint32_t i)
{
    uint32_t n = t->b[i].n;
    kvpool_block_id g1[64]; /* a refused record goes back to the free list: keep its blocks */
    memcpy(g1, bg1(t, i), n * sizeof *g1);
    int rc = batch_submit(t, i);
    if (rc == -EAGAIN) { /* the lane's window is full: this write-through is dropped */
        write_g2_undo(t, g1, n);
        t->st.dropped += n;
        return 0;
    }
    if (rc)
        write_g2_undo(t, g1, n);
    return rc;
}

int kvsim_tiers_flush(struct kvsim_tiers *t)
{
    if (t->st_oom)
        return -ENOMEM;
    uint32_t mb = t->cfg.pipe.lanes[OFFLOAD_LANE_G1_G2].max_blocks;
    uint32_t cur = UINT32_MAX;
    int rc = 0;
    for (uint32_t k = 0; k < t->nst && k < TIER_PREFETCH_AHEAD; k++)
        offload_tier_prefetch(t->g2, t->st_h[k]);
    for (uint32_t k = 0; k < t->nst && rc == 0; k++) {
        if (k + TIER_PREFETCH_AHEAD < t->nst)
            offload_tier_prefetch(t->g2, t->st_h[k + TIER_PREFETCH_AHEAD]);
        kvpool_hash h;
        kvpool_block_id blk = t->st_b[k];
        /* The block may have been evicted and reused since it was stored (same step). */
        if (!kvpool_block_hash(t->pool, blk, &h) || h != t->st_h[k])
            continue;
        if (offload_tier_contains(t->g2, h)) {
            t->st.filtered++;
            continue;
        }
        if (cur == UINT32_MAX) {
            if ((rc = batch_alloc(t, &cur)) != 0)
                break;
            t->b[cur] = (struct tbatch){.kind = TB_G1_G2};
        }
        if ((rc = kvpool_hold_block(t->pool, blk)) != 0)
            break;
        bg1(t, cur)[t->b[cur].n] = blk;
        bh(t, cur)[t->b[cur].n] = h;
        if (++t->b[cur].n == mb) {
            rc = submit_write_g2(t, cur);
            cur = UINT32_MAX;
        }
    }
    if (rc == 0 && cur != UINT32_MAX) {
        rc = submit_write_g2(t, cur);
    } else if (cur != UINT32_MAX) {
        write_g2_undo(t, bg1(t, cur), t->b[cur].n);
        batch_unused(t, cur);
    }
    t->nst = 0;
    return rc;
}

/* ---- G3 ------------------------------------------------------------------------------------ */

/* Context: maybe inside a completion callback: with a shared G3 only its engine-local part
 * (this engine's writes) is checked here; flush_g3 checks the registry. */
static void queue_g3(struct kvsim_tiers *t, kvpool_hash h, bool pin_g2)
{
    /* A per-engine G3 is checked in flush_g3, a batch at a time (prefetched). */
    if (!t->g3 && (!t->sh || engine__hset_contains(&t->slot->own, h)))
        return;
    if (engine__grow((void **)&t->pg3, &t->cappg3, t->npg3 + 1, sizeof *t->pg3)) {
        t->err = t->err ? t->err : -ENOMEM;
        return;
    }
    if (pin_g2 && offload_tier_pin(t->g2, h) != 0)
        pin_g2 = false;
    t->pg3[t->npg3++] = (struct pending_g3){h, pin_g2};
}

/* Inserts h into G2; a block G2 evicts for it goes on to G3. Returns the insert's result. */
static int g2_insert(struct kvsim_tiers *t, kvpool_hash h)
{
    bool evicted = false;
    uint64_t victim = 0;
    int rc = offload_tier_insert(t->g2, h, &evicted, &victim);
    if (evicted && !t->cfg.g3_write_through)
        queue_g3(t, victim, false);
    if (rc == 0) {
        t->st.written_g2++;
        if (t->cfg.g3_write_through)
            queue_g3(t, h, true);
    }
    return rc;
}

/* Drops the queued G3 copies of blocks another engine had put in the shared G3 by the boundary
 * (or this engine meanwhile). Context: the owner, online. */
static void filter_g3_shared(struct kvsim_tiers *t)
{
    uint32_t keep = 0;
    for (uint32_t k = 0; k < t->npg3; k++) {
        struct pending_g3 p = t->pg3[k];
        if (g3_shared_holds(t, p.hash)) {
            if (p.pinned)
                offload_tier_unpin(t->g2, p.hash);
            continue;
        }
        t->pg3[keep++] = p;
    }
    t->npg3 = keep;
}

static int flush_g3(struct kvsim_tiers *t)
{
    uint32_t mb = t->cfg.pipe.lanes[OFFLOAD_LANE_G2_G3].max_blocks;
    int rc = 0;
    uint32_t k = 0;
    if (t->sh)
        filter_g3_shared(t);
    if (t->g3) { /* presence filtering against the per-engine G3 */
        uint32_t keep = 0;
        for (uint32_t j = 0; j < t->npg3 && j < TIER_PREFETCH_AHEAD; j++)
            offload_tier_prefetch(t->g3, t->pg3[j].hash);
        for (uint32_t j = 0; j < t->npg3; j++) {
            if (j + TIER_PREFETCH_AHEAD < t->npg3)
                offload_tier_prefetch(t->g3, t->pg3[j + TIER_PREFETCH_AHEAD].hash);
            struct pending_g3 p = t->pg3[j];
            if (offload_tier_contains(t->g3, p.hash)) {
                if (p.pinned)
                    offload_tier_unpin(t->g2, p.hash);
                continue;
            }
            t->pg3[keep++] = p;
        }
        t->npg3 = keep;
    }
    while (k < t->npg3 && rc == 0) {
        uint32_t i;
        if ((rc = batch_alloc(t, &i)) != 0)
            break;
        t->b[i] = (struct tbatch){.kind = TB_G2_G3};
        uint32_t n = t->npg3 - k < mb ? t->npg3 - k : mb;
        for (uint32_t j = 0; j < n; j++) {
            bh(t, i)[j] = t->pg3[k + j].hash;
            bg1(t, i)[j] = 0;
            bpin(t, i)[j] = t->pg3[k + j].pinned;
        }
        t->b[i].n = n;
        rc = batch_submit(t, i);
        if (rc == -EAGAIN) { /* window full: these G3 copies are dropped */
            rc = 0;
            t->st.dropped += n;
            for (uint32_t j = 0; j < n; j++)
                if (t->pg3[k + j].pinned)
                    offload_tier_unpin(t->g2, t->pg3[k + j].hash);
        }
        k += n;
    }
    t->npg3 = 0;
    return rc;
}

/* ---- loads --------------------------------------------------------------------------------- */

static void load_finish(struct kvsim_tiers *t, uint32_t li, int64_t now)
{
    struct tload *l = &t->ld[li];
    for (uint32_t k = 0; k < l->num_pinned; k++)
        offload_tier_unpin(t->g2, l->pinned[k]);
    t->st.onboard_wait_ns += (uint64_t)(now > l->start ? now - l->start : 0);
    t->st.failed_loads += l->failed;
    int rc = sched_load_finished(t->s, l->r, !l->failed);
    if (rc && !t->err)
        t->err = rc;
    l->live = false;
    l->next_free = t->freel;
    t->freel = li;
}

/* Enqueues batches of kind for n blocks of load li (hashes hs, G1 blocks g1 or NULL). *sent says
 * how many blocks went out, also on error. Returns 0 or the first enqueue error. */
static int load_submit(struct kvsim_tiers *t, uint32_t li, enum tb_kind kind, const kvpool_hash *hs,
                       const kvpool_block_id *g1, uint32_t n, uint32_t *sent)
{
    uint32_t mb = t->cfg.pipe.lanes[tb_lane[kind]].max_blocks;
    *sent = 0;
    for (uint32_t k = 0; k < n;) {
        uint32_t i;
        int rc = batch_alloc(t, &i);
        if (rc)
            return rc;
        uint32_t c = n - k < mb ? n - k : mb;
        t->b[i] = (struct tbatch){.kind = kind, .n = c, .load = li};
        memcpy(bh(t, i), hs + k, c * sizeof *hs);
        for (uint32_t j = 0; j < c; j++)
            bg1(t, i)[j] = g1 ? g1[k + j] : 0;
        if ((rc = batch_submit(t, i)) != 0)
            return rc;
        t->ld[li].outstanding++;
        k += c;
        *sent = k;
    }
    return 0;
}

/* Every staged block is in G2 now (or the load failed): copy the whole run into G1. */
static void load_stage_done(struct kvsim_tiers *t, uint32_t li, int64_t now)
{
    struct tload *l = &t->ld[li];
    uint32_t sent;
    l->staging = false;
    if (!l->failed && load_submit(t, li, TB_G2_G1, l->r->kv.hashes + l->first,
                                  l->r->kv.blocks + l->first, l->n, &sent) != 0)
        l->failed = true;
    if (l->outstanding == 0)
        load_finish(t, li, now);
}

static uint32_t hook_lookup(void *ctx, const struct sched_request *r, uint32_t first_block)
{
    struct kvsim_tiers *t = ctx;
    uint32_t n = 0;
    for (uint32_t i = first_block; i < r->kv.num_hashes; i++) {
        kvpool_hash h = r->kv.hashes[i];
        if (!offload_tier_contains(t->g2, h) && !g3_holds(t, h))
            break;
        n++;
    }
    return n;
}

/* Gives back a load record whose load never started (its pins dropped by the caller). */
static void load_unused(struct kvsim_tiers *t, uint32_t li)
{
    t->ld[li].live = false;
    t->ld[li].next_free = t->freel;
    t->freel = li;
}

static int hook_start_load(void *ctx, struct sched_request *r, uint32_t first, uint32_t n)
{
    struct kvsim_tiers *t = ctx;
    uint32_t li;
    if (t->freel != UINT32_MAX) {
        li = t->freel;
        t->freel = t->ld[li].next_free;
    } else {
        if (engine__grow((void **)&t->ld, &t->capl, t->nl + 1, sizeof *t->ld))
            return -ENOMEM;
        li = t->nl++;
        t->ld[li].pinned = NULL;
    }
    struct tload *l = &t->ld[li];
    kvpool_hash *pinned = realloc(l->pinned, (n ? n : 1) * sizeof *pinned);
    kvpool_hash *stage = malloc((n ? n : 1) * sizeof *stage);
    if (!pinned || !stage) {
        if (pinned)
            l->pinned = pinned;
        free(stage);
        load_unused(t, li);
        return -ENOMEM;
    }
    *l = (struct tload){
        .r = r, .first = first, .n = n, .pinned = pinned, .start = offload_now(t->pipe)};
    /* Pin the run where it is: G2 blocks stay for the G2->G1 copy, G3 blocks for staging. */
    uint32_t ns = 0, g2 = 0;
    bool missing = false;
    for (uint32_t i = 0; i < n && !missing; i++) {
        kvpool_hash h = r->kv.hashes[first + i];
        if (offload_tier_contains(t->g2, h) && offload_tier_pin(t->g2, h) == 0) {
            l->pinned[l->num_pinned++] = h;
            g2++;
        } else if (t->g3 ? offload_tier_contains(t->g3, h) && offload_tier_pin(t->g3, h) == 0
                         : t->sh && g3_shared_holds(t, h)) {
            stage[ns++] = h; /* a shared G3 is not pinned: the coordinator may evict meanwhile */
        } else {
            missing = true; /* lookup promised it: cannot happen within one schedule */
        }
    }
    uint32_t sent = 0;
    int rc = missing ? -ESTALE : 0;
    if (rc == 0) {
        l->live = true;
        l->staging = ns > 0;
        if (ns)
            rc = load_submit(t, li, TB_G3_G2, stage, NULL, ns, &sent);
        else
            rc = load_submit(t, li, TB_G2_G1, r->kv.hashes + first, r->kv.blocks + first, n, &sent);
    }
    for (uint32_t i = ns ? sent : ns; i < ns && t->g3; i++)
        offload_tier_unpin(t->g3, stage[i]); /* staged blocks that never went out */
    /* A shared G3 hit moves the block to the MRU end at the next boundary. */
    for (uint32_t i = 0; t->sh && i < (ns ? sent : 0); i++)
        if (g3_log(t, l->start, stage[i], G3_TOUCH) != 0 && !t->err)
            t->err = -ENOMEM;
    free(stage);
    if (rc && sent == 0) { /* nothing in flight: fail synchronously, the scheduler recomputes */
        for (uint32_t k = 0; k < l->num_pinned; k++)
            offload_tier_unpin(t->g2, l->pinned[k]);
        load_unused(t, li);
        return rc;
    }
    /* Hits are counted once the load is under way. */
    t->st.loads++;
    t->st.g2_hit_blocks += g2;
    t->st.g3_hit_blocks += ns;
    for (uint32_t k = 0; k < l->num_pinned; k++)
        offload_tier_touch(t->g2, l->pinned[k]);
    if (rc)
        l->failed = true; /* part of it is in flight: it fails when that part drains */
    return 0;
}

/* ---- relief -------------------------------------------------------------------------------- */

static uint32_t hook_relieve(void *ctx, uint32_t num_short)
{
    (void)num_short;
    struct kvsim_tiers *t = ctx;
    uint32_t released = 0;
    for (uint32_t i = 0; i < t->nb; i++) {
        struct tbatch *b = &t->b[i];
        if (!b->live || b->kind != TB_G1_G2 ||
            offload_token_state(t->pipe, &b->tok) != OFFLOAD_BATCH_QUEUED)
            continue;
        uint32_t present = 0;
        for (uint32_t k = 0; k < b->n; k++)
            present += offload_tier_contains(t->g2, bh(t, i)[k]);
        if (!present || offload_cancel(t->pipe, &b->tok) != 0)
            continue;
        /* Cancelled before it started: keep the holds of what still needs the copy. */
        t->lost[OFFLOAD_LANE_G1_G2] += b->n;
        uint32_t keep = 0;
        for (uint32_t k = 0; k < b->n; k++) {
            kvpool_hash h = bh(t, i)[k];
            if (offload_tier_contains(t->g2, h)) {
                kvpool_release_hold(t->pool, bg1(t, i)[k]);
                released++;
                t->st.filtered++;
            } else {
                bh(t, i)[keep] = h;
                bg1(t, i)[keep++] = bg1(t, i)[k];
            }
        }
        b->n = keep;
        batch_free(t, i);
        if (keep) {
            uint32_t j;
            if (batch_alloc(t, &j) == 0) {
                t->b[j] = (struct tbatch){.kind = TB_G1_G2, .n = keep};
                memmove(bh(t, j), bh(t, i), keep * sizeof(kvpool_hash));
                memmove(bg1(t, j), bg1(t, i), keep * sizeof(kvpool_block_id));
                if (submit_write_g2(t, j) != 0 && !t->err)
                    t->err = -EIO;
            }
        }
    }
    t->st.released_by_relief += released;
    return released;
}

const struct sched_offload_ops kvsim_tiers_sched_ops = {hook_lookup, hook_start_load, hook_relieve};

/* ---- completions --------------------------------------------------------------------------- */

static void on_complete(void *arg, const struct offload_completion *c)
{
    struct kvsim_tiers *t = arg;
    uint32_t i = (uint32_t)c->cookie;
    struct tbatch *b = &t->b[i];
    enum offload_lane lane = tb_lane[b->kind];
    bool ok = c->result == 0;
    if (ok)
        t->recv[lane] += b->n;
    else {
        t->lost[lane] += b->n;
        t->st.failed_blocks += b->n;
    }
    const kvpool_hash *h = bh(t, i);
    switch (b->kind) {
    case TB_G1_G2:
        for (uint32_t k = 0; k < b->n; k++)
            offload_tier_prefetch(t->g2, h[k]);
        for (uint32_t k = 0; k < b->n; k++) {
            kvpool_release_hold(t->pool, bg1(t, i)[k]);
            if (ok)
                g2_insert(t, h[k]);
        }
        break;
    case TB_G2_G3:
        for (uint32_t k = 0; t->g3 && k < b->n; k++)
            offload_tier_prefetch(t->g3, h[k]);
        for (uint32_t k = 0; k < b->n; k++) {
            if (bpin(t, i)[k])
                offload_tier_unpin(t->g2, h[k]);
            if (!ok)
                continue;
            if (t->g3) {
                t->st.written_g3 += offload_tier_insert(t->g3, h[k], NULL, NULL) == 0;
            } else {
                int rc = g3_shared_write(t, h[k], c->end_time);
                if (rc > 0)
                    t->st.written_g3++;
                else if (rc < 0 && !t->err)
                    t->err = rc;
            }
        }
        break;
    case TB_G3_G2: {
        struct tload *l = &t->ld[b->load];
        for (uint32_t k = 0; k < b->n; k++) {
            if (t->g3)
                offload_tier_unpin(t->g3, h[k]);
            if (!ok || l->failed)
                continue;
            int rc = g2_insert(t, h[k]);
            if ((rc == 0 || rc == -EEXIST) && offload_tier_pin(t->g2, h[k]) == 0)
                l->pinned[l->num_pinned++] = h[k];
            else
                l->failed = true;
        }
        l->failed |= !ok;
        uint32_t li = b->load;
        batch_free(t, i);
        if (--t->ld[li].outstanding == 0)
            load_stage_done(t, li, c->end_time);
        return;
    }
    case TB_G2_G1: {
        uint32_t li = b->load;
        t->ld[li].failed |= !ok;
        batch_free(t, i);
        if (--t->ld[li].outstanding == 0)
            load_finish(t, li, c->end_time);
        return;
    }
    }
    batch_free(t, i);
}

/* A copy's work: the pool worker (or the owner, inline) touches the batch's block list, which
 * is what a real copy engine would read; its result never depends on timing. */
static int copy_work(void *arg, const struct offload_work *w)
{
    (void)arg;
    uint64_t x = 0;
    for (uint32_t k = 0; k < w->num_blocks; k++)
        x = x * 31 + (uint64_t)w->blocks[k];
    return x == UINT64_MAX ? -EIO : 0; /* never: keeps the loop from being optimized out */
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

int kvsim_tiers_create(const struct kvsim_tiers_config *cfg, struct kvsim_tiers **out)
{
    *out = NULL;
    if (cfg->g2_blocks == 0)
        return -EINVAL;
    uint32_t mb = 0;
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++) {
        if (cfg->pipe.lanes[l].max_blocks > mb)
            mb = cfg->pipe.lanes[l].max_blocks;
        if (cfg->pipe.lanes[l].permits == 0 || cfg->pipe.lanes[l].max_blocks > 64)
            return -EINVAL; /* every lane is used; batches are copied through 64-entry buffers */
    }
    struct kvsim_tiers *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->cfg = *cfg;
    t->max_blocks = mb;
    t->freeb = t->freel = UINT32_MAX;
    t->cfg.pipe.work = copy_work;
    t->cfg.pipe.work_arg = t;
    t->cfg.pipe.complete = on_complete;
    t->cfg.pipe.complete_arg = t;
    if (cfg->g3_shared) {
        if (cfg->g3_engine >= cfg->g3_shared->num_engines) {
            free(t);
            return -EINVAL;
        }
        t->sh = cfg->g3_shared;
        t->slot = &t->sh->slots[cfg->g3_engine];
        t->published = kvpool_registry_watermark_acquire(t->slot->w);
        t->offline_waits = cfg->pool != NULL;
    }
    int rc = offload_tier_create(cfg->g2_blocks, &t->g2);
    if (!rc && cfg->g3_blocks && !cfg->g3_shared)
        rc = offload_tier_create(cfg->g3_blocks, &t->g3);
    if (!rc)
        rc = offload_pipeline_create(&t->cfg.pipe, cfg->pool, &t->pipe);
    if (rc) {
        kvsim_tiers_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

void kvsim_tiers_bind(struct kvsim_tiers *t, struct sched *s)
{
    t->s = s;
    t->pool = sched_pool(s);
    kvpool_set_store_hook(t->pool, on_stored, t);
}

void kvsim_tiers_destroy(struct kvsim_tiers *t)
{
    if (!t)
        return;
    if (t->pipe) {
        /* Undrained batches are reported failed: their holds and pins go back. */
        offload_pipeline_destroy(t->pipe);
    }
    if (t->pool)
        kvpool_set_store_hook(t->pool, NULL, NULL);
    for (uint32_t i = 0; i < t->nl; i++)
        free(t->ld[i].pinned);
    offload_tier_destroy(t->g2);
    offload_tier_destroy(t->g3);
    free(t->b);
    free(t->bh);
    free(t->bg1);
    free(t->bpin);
    free(t->ld);
    free(t->st_b);
    free(t->st_h);
    free(t->pg3);
    free(t->preg_t);
    free(t->preg_h);
    free(t->open);
    free(t);
}

/* ---- time ---------------------------------------------------------------------------------- */

int kvsim_tiers_advance_to(struct kvsim_tiers *t, int64_t now)
{
    /* Completion instant by completion instant, so that the G3 copies a completion triggers
     * start at that instant (completion callbacks only collect them). */
    int drained = 0;
    for (;;) {
        int64_t d = offload_next_deadline(t->pipe);
        int64_t to = d < now ? d : now;
        /* The pool executor may block here: offline meanwhile (completion callbacks then touch
         * no registry data). */
        if (t->offline_waits)
            kvpool_registry_thread_offline();
        int rc = offload_advance_to(t->pipe, to);
        if (t->offline_waits)
            kvpool_registry_thread_online();
        if (rc < 0)
            return rc;
        drained += rc;
        if (t->err)
            return t->err;
        if (t->npreg && (rc = g3_register_pending(t)) != 0)
            return rc;
        if (t->npg3 && (rc = flush_g3(t)) != 0)
            return rc;
        if (to < now)
            continue;
        int64_t next = offload_next_deadline(t->pipe);
        if (next == OFFLOAD_NEVER - 1) /* saturated: the transfer would end past the clock */
            return -EOVERFLOW;
        if (next > now)
            return drained;
    }
}

int kvsim_tiers_settle(struct kvsim_tiers *t)
{
    struct offload_checkpoint cp;
    offload_checkpoint(t->pipe, &cp);
    if (t->offline_waits)
        kvpool_registry_thread_offline();
    int rc = offload_settle_after(t->pipe, &cp, NULL);
    if (t->offline_waits)
        kvpool_registry_thread_online();
    return rc == -EAGAIN ? 0 : rc;
}

const char *kvsim_tiers_link_past_the_clock(const struct kvsim_tiers *t)
{
    int l = offload_lane_past_the_clock(t->pipe);
    return l < 0 ? NULL : offload_lane_name((enum offload_lane)l);
}

int64_t kvsim_tiers_next_deadline(const struct kvsim_tiers *t)
{
    return offload_next_deadline(t->pipe);
}

uint32_t kvsim_tiers_pending(const struct kvsim_tiers *t) { return t->live_batches; }

void kvsim_tiers_stats(const struct kvsim_tiers *t, struct kvsim_tiers_stats *out)
{
    *out = t->st;
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++)
        offload_lane_stats(t->pipe, (enum offload_lane)l, &out->lanes[l]);
    out->g2_size = offload_tier_size(t->g2);
    out->g3_size = t->g3 ? offload_tier_size(t->g3) : 0;
}

int kvsim_tiers_check(const struct kvsim_tiers *t, char *msg, size_t len)
{
    uint64_t live[OFFLOAD_NUM_LANES] = {0};
    uint32_t nlive = 0;
    for (uint32_t i = 0; i < t->nb; i++) {
        const struct tbatch *b = &t->b[i];
        if (!b->live)
            continue;
        nlive++;
        live[tb_lane[b->kind]] += b->n;
        if (b->kind != TB_G1_G2)
            continue;
        for (uint32_t k = 0; k < b->n; k++) {
            kvpool_block_id blk = t->bg1[(size_t)i * t->max_blocks + k];
            kvpool_hash h;
            if (kvpool_ref_count(t->pool, blk) == 0 || !kvpool_block_hash(t->pool, blk, &h) ||
                h != t->bh[(size_t)i * t->max_blocks + k]) {
                snprintf(msg, len,
                         "transfer_hold: G1 block %" PRId32 " of a G1->G2 copy is not held with "
                         "its hash",
                         blk);
                return -EUCLEAN;
            }
        }
    }
    if (nlive != t->live_batches) {
        snprintf(msg, len, "transfer_records: %u live batch records, %u counted", nlive,
                 t->live_batches);
        return -EUCLEAN;
    }
    for (int l = 0; l < OFFLOAD_NUM_LANES; l++) {
        if (t->sent[l] != t->recv[l] + t->lost[l] + live[l]) {
            snprintf(msg, len,
                     "transfer_bijection: lane %s sent %" PRIu64 " blocks, received %" PRIu64
                     " + failed/cancelled %" PRIu64 " + in flight %" PRIu64,
                     offload_lane_name((enum offload_lane)l), t->sent[l], t->recv[l], t->lost[l],
                     live[l]);
            return -EUCLEAN;
        }
    }
    return 0;
}
