/*
 * test_sched.c - the scheduler core beyond the conformance scenarios: configuration checks,
 * abort from every state, the PRIORITY heap order, the invariant checker's reports, and a
 * seeded randomized run of every feature with the invariants checked at each boundary.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sched/sched.h"

static struct sched *make(void (*tweak)(struct sched_config *))
{
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.check_invariants = true;
    if (tweak)
        tweak(&cfg);
    struct sched *s = NULL;
    cr_assert_eq(sched_create(&cfg, &s), 0);
    return s;
}

static struct sched_request *add(struct sched *s, uint64_t id, kvpool_token tok, uint32_t n,
                                 uint32_t max_tokens)
{
    kvpool_token prompt[4096];
    cr_assert(n <= 4096);
    for (uint32_t i = 0; i < n; i++)
        prompt[i] = tok;
    struct sched_request_params p = {
        .id = id,
        .prompt = prompt,
        .num_prompt_tokens = n,
        .max_tokens = max_tokens,
        .eos_token_id = -1,
        .arrival = (double)id,
    };
    struct sched_request *r = NULL;
    cr_assert_eq(sched_add(s, &p, &r), 0);
    return r;
}

/* Feeds one token to every request whose chunk reached the end of its tokens. */
static void output_all(struct sched *s, struct sched_step *st, kvpool_token tok)
{
    const kvpool_token *toks[512];
    uint32_t counts[512];
    static const kvpool_token one[1] = {1000};
    (void)tok;
    cr_assert(st->num_scheduled <= 512);
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        toks[i] = one;
        counts[i] = st->scheduled[i].samples ? 1 : 0;
    }
    struct sched_model_output out = {.tokens = toks, .num_tokens = counts};
    cr_assert_eq(sched_update(s, st, &out), 0);
}

static void chunked_off_small_budget(struct sched_config *c)
{
    c->enable_chunked_prefill = false;
    c->max_num_batched_tokens = 512;
    c->max_model_len = 1024;
}

Test(sched, create_rejects_impossible_configs)
{
    struct sched_config cfg;
    struct sched *s = NULL;
    sched_config_default(&cfg);
    cfg.max_num_seqs = 0;
    cr_expect_eq(sched_create(&cfg, &s), -EINVAL);
    sched_config_default(&cfg);
    chunked_off_small_budget(&cfg);
    cr_expect_eq(sched_create(&cfg, &s), -EINVAL,
                 "chunked prefill off needs max_num_batched_tokens >= max_model_len");
    sched_config_default(&cfg);
    cfg.num_blocks = 1;
    cr_expect_eq(sched_create(&cfg, &s), -EINVAL);
    sched_config_default(&cfg);
    cfg.watermark = 1.0;
    cr_expect_eq(sched_create(&cfg, &s), -EINVAL);
}

Test(sched, add_rejects_bad_requests)
{
    struct sched *s = make(NULL);
    kvpool_token t[2] = {1, 2};
    struct sched_request *r;
    struct sched_request_params p = {.id = 1, .prompt = t, .num_prompt_tokens = 0, .max_tokens = 1};
    cr_expect_eq(sched_add(s, &p, &r), -EINVAL, "empty prompt");
    p.num_prompt_tokens = 2;
    p.max_tokens = 0;
    cr_expect_eq(sched_add(s, &p, &r), -EINVAL, "max_tokens 0");
    p.max_tokens = 2;
    p.min_tokens = 3;
    cr_expect_eq(sched_add(s, &p, &r), -EINVAL, "min_tokens > max_tokens");
    cr_expect_eq(sched_num_unfinished(s), 0);
    sched_destroy(s);
}

static void small_pool(struct sched_config *c)
{
    c->num_blocks = 5; /* 4 usable */
    c->block_size = 16;
    c->max_num_batched_tokens = 256;
    c->enable_prefix_caching = false;
}

Test(sched, abort_from_every_state_frees_blocks)
{
    struct sched *s = make(small_pool);
    struct kvpool *pool = sched_pool(s);
    struct sched_request *a = add(s, 1, 1, 32, 10), *b = add(s, 2, 2, 32, 10);
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_not_null(st);
    output_all(s, st, 1000);
    cr_assert_eq(a->status, SCHED_RUNNING);
    cr_assert_eq(kvpool_num_free_blocks(pool), 0);
    /* a needs a 3rd block: b (last) is preempted */
    st = sched_schedule(s, NULL);
    cr_assert_not_null(st);
    cr_assert_eq(b->status, SCHED_PREEMPTED);
    output_all(s, st, 1000);
    struct sched_request *c = add(s, 3, 3, 8, 10);
    cr_assert_eq(c->status, SCHED_WAITING);

    cr_assert_eq(sched_abort(s, b), 0, "abort PREEMPTED");
    cr_assert_eq(b->status, SCHED_FINISHED_ABORTED);
    cr_assert_eq(sched_abort(s, c), 0, "abort WAITING");
    cr_assert_eq(sched_abort(s, a), 0, "abort RUNNING");
    cr_assert_eq(sched_abort(s, a), -EALREADY);
    cr_assert_eq(kvpool_num_free_blocks(pool), 4, "every block is free again");
    cr_assert_eq(sched_num_unfinished(s), 0);
    struct sched_request *const *rr;
    cr_assert_eq(sched_running(s, &rr), 0);
    cr_assert_eq(sched_waiting_snapshot(s, NULL, 0), 0);
    cr_assert_eq(sched_check(s, NULL), 0);
    cr_assert_eq(sched_release(s, a), 0);
    cr_assert_eq(sched_release(s, b), 0);
    cr_assert_eq(sched_release(s, c), 0);
    sched_destroy(s);
}

Test(sched, abort_parked_async_load_delays_free_until_recv)
{
    struct sched *s = make(NULL);
    kvpool_token prompt[40];
    for (int i = 0; i < 40; i++)
        prompt[i] = 7;
    struct sched_request_params p = {.id = 1,
                                     .prompt = prompt,
                                     .num_prompt_tokens = 40,
                                     .max_tokens = 4,
                                     .eos_token_id = -1,
                                     .external_tokens = 40,
                                     .external_async = true};
    struct sched_request *x;
    cr_assert_eq(sched_add(s, &p, &x), 0);
    struct kvpool *pool = sched_pool(s);
    uint32_t free0 = kvpool_num_free_blocks(pool);
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_eq(st->total_tokens, 0);
    cr_assert_eq(x->status, SCHED_WAITING_FOR_REMOTE_KVS);
    cr_assert_eq(x->kv.owner, KVPOOL_OWNER_DEST_RESERVATION);
    cr_assert_eq(kvpool_num_free_blocks(pool), free0 - 3);
    output_all(s, st, 0);
    cr_assert_eq(sched_abort(s, x), 0);
    cr_assert_eq(x->status, SCHED_FINISHED_ABORTED);
    cr_assert(x->free_delayed, "the load still writes the blocks");
    cr_assert_eq(kvpool_num_free_blocks(pool), free0 - 3);
    cr_assert_eq(sched_release(s, x), -EBUSY);
    st = sched_schedule(s, NULL);
    struct sched_request *recv[1] = {x};
    struct sched_model_output out = {.finished_recving = recv, .num_finished_recving = 1};
    cr_assert_eq(sched_update(s, st, &out), 0);
    cr_assert_eq(kvpool_num_free_blocks(pool), free0);
    cr_assert_eq(sched_release(s, x), 0);
    sched_destroy(s);
}

static void priority_policy(struct sched_config *c)
{
    c->policy = SCHED_POLICY_PRIORITY;
    c->max_num_batched_tokens = 1; /* admit nothing beyond the first token: keep them waiting */
    c->max_model_len = 64;
}

Test(sched, priority_waiting_order_is_priority_then_arrival_then_add_order)
{
    struct sched *s = make(priority_policy);
    kvpool_token t[4] = {1, 2, 3, 4};
    int64_t prios[12] = {3, 1, 2, 1, 0, 3, 2, 2, 1, 0, 0, 3};
    double arrivals[12] = {5, 4, 4, 1, 9, 1, 1, 0, 4, 9, 3, 5};
    struct sched_request *r[12];
    for (int i = 0; i < 12; i++) {
        struct sched_request_params p = {.id = (uint64_t)i + 1,
                                         .prompt = t,
                                         .num_prompt_tokens = 4,
                                         .max_tokens = 1,
                                         .priority = prios[i],
                                         .arrival = arrivals[i],
                                         .eos_token_id = -1};
        cr_assert_eq(sched_add(s, &p, &r[i]), 0);
    }
    cr_assert_eq(sched_abort(s, r[4]), 0); /* removal from the middle of the heap */
    struct sched_request *w[16];
    uint32_t n = sched_waiting_snapshot(s, w, 16);
    cr_assert_eq(n, 11);
    for (uint32_t i = 1; i < n; i++) {
        const struct sched_request *a = w[i - 1], *b = w[i];
        bool ordered =
            a->priority < b->priority ||
            (a->priority == b->priority &&
             (a->arrival < b->arrival || (a->arrival == b->arrival && a->add_seq < b->add_seq)));
        cr_assert(ordered, "waiting[%u] (id %lu) before waiting[%u] (id %lu)", i - 1,
                  (unsigned long)a->id, i, (unsigned long)b->id);
    }
    /* The first schedule admits the best request: priority 0, arrival 3 (id 11). */
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_eq(st->num_scheduled, 1);
    cr_assert_eq(st->scheduled[0].req->id, 11);
    sched_destroy(s);
}

Test(sched, checker_reports_a_request_in_the_wrong_queue)
{
    struct sched *s = make(NULL);
    struct sched_request *a = add(s, 42, 1, 20, 4);
    struct sched_step *st = sched_schedule(s, NULL);
    output_all(s, st, 0);
    cr_assert_eq(sched_check(s, NULL), 0);
    a->status = SCHED_WAITING; /* corrupt: running request claims to wait */
    struct sched_violation v;
    cr_assert_eq(sched_check(s, &v), -EUCLEAN);
    cr_expect_str_eq(v.rule, "queue_matches_status");
    cr_expect_eq(v.request_id, 42);
    cr_expect_eq(v.status, SCHED_WAITING);
    cr_expect_eq(v.last_transition, SCHED_T_ADMITTED);
    char line[256];
    sched_violation_format(&v, line, sizeof line);
    cr_expect(strstr(line, "request=42") && strstr(line, "last_transition=admitted"), "%s", line);
    a->status = SCHED_RUNNING;
    sched_destroy(s);
}

Test(sched, checker_reports_a_leaked_block_with_its_owner)
{
    struct sched *s = make(NULL);
    struct sched_request *a = add(s, 7, 1, 40, 4);
    struct sched_step *st = sched_schedule(s, NULL);
    output_all(s, st, 0);
    cr_assert_eq(a->kv.num_blocks, 3);
    a->kv.num_blocks = 2; /* corrupt: the request forgets its last block */
    struct sched_violation v;
    cr_assert_eq(sched_check(s, &v), -EUCLEAN);
    cr_expect_str_eq(v.rule, "ref_count");
    cr_expect_eq(v.block, a->kv.blocks[2], "names the leaked block");
    cr_expect_eq(v.expected, 0);
    cr_expect_eq(v.found, 1);
    a->kv.num_blocks = 3;
    cr_assert_eq(sched_check(s, &v), 0);
    sched_destroy(s);
}

Test(sched, schedule_returns_euclean_when_invariants_break)
{
    struct sched *s = make(NULL);
    struct sched_request *a = add(s, 9, 1, 40, 4);
    struct sched_step *st = sched_schedule(s, NULL);
    output_all(s, st, 0);
    a->kv.blocks[1] = a->kv.blocks[0]; /* corrupt the block table */
    int err = 0;
    cr_assert_null(sched_schedule(s, &err));
    cr_assert_eq(err, -EUCLEAN);
    cr_assert_not_null(sched_last_violation(s));
    sched_destroy(s);
}

/* ---- seeded randomized run ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

struct rnd_case {
    bool async;
    bool defer;
    bool priority;
    bool caching;
    bool chunked;
    bool full_isl;
    double watermark;
    uint64_t seed;
};

static struct rnd_case current;

static void rnd_cfg(struct sched_config *c)
{
    c->num_blocks = 40;
    c->block_size = 4;
    c->max_num_seqs = 6;
    c->max_num_batched_tokens = 64;
    c->max_model_len = current.chunked ? 200 : 64;
    c->enable_chunked_prefill = current.chunked;
    c->enable_prefix_caching = current.caching;
    c->policy = current.priority ? SCHED_POLICY_PRIORITY : SCHED_POLICY_FCFS;
    c->async_scheduling = current.async;
    c->defer_block_free = current.defer;
    c->scheduler_reserve_full_isl = current.full_isl;
    c->watermark = current.watermark;
}

/* Random arrivals, outputs, stops, aborts and async loads; every boundary is checked by the
 * scheduler itself (check_invariants), and every request must finish. */
static void run_random(void)
{
    struct sched *s = make(rnd_cfg);
    uint64_t x = current.seed * 2654435761u + 1;
    struct sched_request *reqs[64];
    int nreqs = 0;
    struct sched_step *pending[3];
    int npending = 0;
    kvpool_token prompt[64];
    for (int step = 0; step < 3000; step++) {
        if (nreqs < 64 && rng_next(&x) % 3 == 0) {
            uint32_t n = 1 + (uint32_t)(rng_next(&x) % (current.chunked ? 60 : 40));
            kvpool_token base = (kvpool_token)(rng_next(&x) % 3); /* shared prefixes */
            for (uint32_t i = 0; i < n; i++)
                prompt[i] = i < 8 ? base : (kvpool_token)(rng_next(&x) % 5);
            struct sched_request_params p = {
                .id = (uint64_t)nreqs + 1,
                .prompt = prompt,
                .num_prompt_tokens = n,
                .max_tokens = 1 + (uint32_t)(rng_next(&x) % 12),
                .priority = (int64_t)(rng_next(&x) % 3),
                .arrival = (double)step,
                .eos_token_id = 999,
                .external_tokens = rng_next(&x) % 5 == 0 ? n / 2 : 0,
                .external_async = rng_next(&x) % 2 == 0,
            };
            cr_assert_eq(sched_add(s, &p, &reqs[nreqs]), 0);
            nreqs++;
        }
        if (nreqs && rng_next(&x) % 50 == 0) {
            struct sched_request *r = reqs[rng_next(&x) % (uint64_t)nreqs];
            int rc = sched_abort(s, r);
            cr_assert(rc == 0 || rc == -EALREADY);
            cr_assert_null(sched_last_violation(s));
        }
        int max_pending = current.async ? 2 : 1;
        if (npending < max_pending) {
            int err = 0;
            pending[npending] = sched_schedule(s, &err);
            if (!pending[npending]) {
                char line[256] = "";
                if (sched_last_violation(s))
                    sched_violation_format(sched_last_violation(s), line, sizeof line);
                cr_assert_fail("seed %lu step %d: schedule failed (%d): %s",
                               (unsigned long)current.seed, step, err, line);
            }
            npending++;
        }
        if (npending == max_pending || rng_next(&x) % 2 == 0) {
            struct sched_step *st = pending[0];
            const kvpool_token *toks[128];
            uint32_t counts[128];
            kvpool_token vals[128];
            struct sched_request *recv[64];
            uint32_t nrecv = 0;
            cr_assert(st->num_scheduled <= 128);
            for (uint32_t i = 0; i < st->num_scheduled; i++) {
                vals[i] = rng_next(&x) % 40 == 0 ? 999 : 1000 + (kvpool_token)(rng_next(&x) % 4);
                toks[i] = &vals[i];
                counts[i] = st->scheduled[i].samples ? 1 : 0;
            }
            for (int i = 0; i < nreqs; i++)
                if ((reqs[i]->status == SCHED_WAITING_FOR_REMOTE_KVS || reqs[i]->free_delayed) &&
                    !reqs[i]->recv_finished && rng_next(&x) % 3 == 0)
                    recv[nrecv++] = reqs[i];
            struct sched_model_output out = {.tokens = toks,
                                             .num_tokens = counts,
                                             .finished_recving = recv,
                                             .num_finished_recving = nrecv};
            int rc = sched_update(s, st, &out);
            if (rc) {
                char line[256] = "";
                if (sched_last_violation(s))
                    sched_violation_format(sched_last_violation(s), line, sizeof line);
                cr_assert_fail("seed %lu step %d: update failed (%d): %s",
                               (unsigned long)current.seed, step, rc, line);
            }
            memmove(pending, pending + 1, (size_t)(npending - 1) * sizeof *pending);
            npending--;
        }
        if (step > 2000 && sched_num_unfinished(s) == 0 && npending == 0)
            break;
    }
    /* Drain: no more arrivals; everything must finish. */
    for (int guard = 0; guard < 5000 && (sched_num_unfinished(s) || npending); guard++) {
        if (npending == 0) {
            int err = 0;
            pending[npending++] = sched_schedule(s, &err);
            cr_assert_not_null(pending[0], "drain schedule failed: %d", err);
        }
        struct sched_step *st = pending[0];
        const kvpool_token *toks[128];
        uint32_t counts[128];
        static const kvpool_token tok = 1000;
        struct sched_request *recv[64];
        uint32_t nrecv = 0;
        for (uint32_t i = 0; i < st->num_scheduled; i++) {
            toks[i] = &tok;
            counts[i] = st->scheduled[i].samples ? 1 : 0;
        }
        for (int i = 0; i < nreqs; i++)
            if (reqs[i]->status == SCHED_WAITING_FOR_REMOTE_KVS || reqs[i]->free_delayed)
                recv[nrecv++] = reqs[i];
        struct sched_model_output out = {.tokens = toks,
                                         .num_tokens = counts,
                                         .finished_recving = recv,
                                         .num_finished_recving = nrecv};
        cr_assert_eq(sched_update(s, st, &out), 0);
        npending = 0;
    }
    for (int i = 0; i < nreqs && sched_num_unfinished(s); i++)
        if (!sched_status_is_finished(reqs[i]->status))
            fprintf(stderr, "stuck: id %lu %s nc %lu nt %lu blocks %u free %u ext %u async %d\n",
                    (unsigned long)reqs[i]->id, sched_status_name(reqs[i]->status),
                    (unsigned long)reqs[i]->num_computed_tokens,
                    (unsigned long)sched_request_num_tokens(reqs[i]), reqs[i]->kv.num_blocks,
                    kvpool_num_free_blocks(sched_pool(s)), reqs[i]->external_tokens,
                    reqs[i]->external_async);
    cr_assert_eq(sched_num_unfinished(s), 0, "seed %lu: every request finishes",
                 (unsigned long)current.seed);
    /* One more empty round drains any deferred free. */
    struct sched_step *st = sched_schedule(s, NULL);
    cr_assert_not_null(st);
    cr_assert_eq(sched_update(s, st, NULL), 0);
    for (int i = 0; i < nreqs; i++)
        cr_assert_eq(sched_release(s, reqs[i]), 0, "seed %lu: request %d releasable",
                     (unsigned long)current.seed, i + 1);
    cr_assert_eq(kvpool_num_free_blocks(sched_pool(s)), 39, "no block leaked");
    sched_destroy(s);
}

Test(sched_random, every_feature_combination_keeps_invariants, .timeout = 120)
{
    for (int mask = 0; mask < 64; mask++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            current = (struct rnd_case){
                .async = mask & 1,
                .defer = mask & 2,
                .priority = mask & 4,
                .caching = mask & 8,
                .chunked = mask & 16,
                .full_isl = mask & 32,
                .watermark = seed == 2 ? 0.1 : 0.0,
                .seed = seed + (uint64_t)mask * 7,
            };
            run_random();
        }
    }
}

static void model_len_64(struct sched_config *c) { c->max_model_len = 64; }

/* min_tokens suppresses even the length cap, so prompt + min_tokens must fit max_model_len
 * (found by the soak: such a request neither finished nor got scheduled). */
Test(sched, a_request_that_could_never_reach_min_tokens_is_refused)
{
    struct sched *s = make(model_len_64);
    kvpool_token p[60] = {0};
    struct sched_request_params rp = {.id = 1,
                                      .prompt = p,
                                      .num_prompt_tokens = 60,
                                      .max_tokens = 10,
                                      .min_tokens = 5,
                                      .eos_token_id = -1};
    struct sched_request *r = NULL;
    cr_assert_eq(sched_add(s, &rp, &r), -EINVAL, "60 + 5 > 64: it could never stop");
    rp.min_tokens = 4;
    cr_assert_eq(sched_add(s, &rp, &r), 0, "60 + 4 = 64 is fine");
    sched_destroy(s);
}

/* ---- the decode fast path: sched_decode_steps = k schedule + update pairs ---------------- */

static kvpool_token fast_token(const struct sched_request *r, uint32_t index)
{
    return (kvpool_token)(50000 + r->id * 1000 + index);
}

/* One schedule + update, every sampling request given fast_token. */
static void step_one(struct sched *s)
{
    int err;
    struct sched_step *st = sched_schedule(s, &err);
    cr_assert_not_null(st, "schedule: %d", err);
    const kvpool_token *toks[64];
    uint32_t counts[64];
    kvpool_token buf[64];
    cr_assert(st->num_scheduled <= 64);
    for (uint32_t i = 0; i < st->num_scheduled; i++) {
        buf[i] = fast_token(st->scheduled[i].req, st->scheduled[i].req->num_output);
        toks[i] = &buf[i];
        counts[i] = st->scheduled[i].samples ? 1 : 0;
    }
    struct sched_model_output out = {.tokens = toks, .num_tokens = counts};
    cr_assert_eq(sched_update(s, st, &out), 0);
}

static void assert_same_state(struct sched *a, struct sched *b)
{
    struct sched_request *const *ra, *const *rb;
    uint32_t na = sched_running(a, &ra), nb = sched_running(b, &rb);
    cr_assert_eq(na, nb);
    cr_assert_eq(sched_num_unfinished(a), sched_num_unfinished(b));
    cr_assert_eq(kvpool_generation(sched_pool(a)), kvpool_generation(sched_pool(b)));
    cr_assert_eq(kvpool_num_free_blocks(sched_pool(a)), kvpool_num_free_blocks(sched_pool(b)));
    for (uint32_t i = 0; i < na; i++) {
        const struct sched_request *x = ra[i], *y = rb[i];
        cr_assert_eq(x->id, y->id);
        cr_assert_eq(x->num_computed_tokens, y->num_computed_tokens);
        cr_assert_eq(x->num_output, y->num_output);
        if (x->num_output) /* memcmp of NULL, even for 0 bytes, is undefined */
            cr_assert_arr_eq(x->output, y->output, x->num_output * sizeof *x->output);
        cr_assert_eq(x->kv.num_tokens, y->kv.num_tokens);
        cr_assert_eq(x->kv.num_blocks, y->kv.num_blocks);
        if (x->kv.num_blocks) /* the same blocks: the free queue gave them in the same order */
            cr_assert_arr_eq(x->kv.blocks, y->kv.blocks, x->kv.num_blocks * sizeof *x->kv.blocks);
        cr_assert_eq(x->last_transition, y->last_transition);
        cr_assert_eq(x->last_transition_step, y->last_transition_step);
        cr_assert_eq(x->kv.num_cached_blocks, y->kv.num_cached_blocks);
        cr_assert_eq(x->kv.num_hashes, y->kv.num_hashes);
        if (x->kv.num_hashes)
            cr_assert_arr_eq(x->kv.hashes, y->kv.hashes, x->kv.num_hashes * sizeof *x->kv.hashes);
        cr_assert_eq(x->last_sched_seq, y->last_sched_seq);
    }
    struct sched_violation v;
    cr_assert_eq(sched_check(a, &v), 0, "%s", v.rule);
}

static void fast_cfg_default(struct sched_config *c) { (void)c; }
static void fast_cfg_deferred(struct sched_config *c) { c->defer_block_free = true; }
static void fast_cfg_small(struct sched_config *c)
{
    c->block_size = 8;
    c->num_blocks = 60;
    c->max_model_len = 96;
}
static void fast_cfg_no_cache(struct sched_config *c) { c->enable_prefix_caching = false; }
static void fast_cfg_events(struct sched_config *c)
{
    fast_cfg_small(c);
    c->enable_kv_events = true;
}

/* The KV events a pool recorded, folded into one running digest (type, parent, hashes, order). */
static void fold_event(void *ctx, const struct kvpool_event *ev)
{
    uint64_t *h = ctx;
    *h = *h * 1000003u ^ (uint64_t)ev->type;
    *h = *h * 1000003u ^ (ev->has_parent ? ev->parent_hash : 7u);
    for (uint32_t i = 0; i < ev->num_hashes; i++)
        *h = *h * 1000003u ^ ev->hashes[i];
    *h = *h * 1000003u ^ ev->num_hashes;
}

static bool fast_aligned; /* decode_steps_match's prompts all of one length */

static void decode_steps_match(void (*tweak)(struct sched_config *))
{
    struct sched *s[2];
    for (int m = 0; m < 2; m++) {
        struct sched_config cfg;
        sched_config_default(&cfg);
        tweak(&cfg);
        cr_assert_eq(sched_create(&cfg, &s[m]), 0);
        for (uint64_t id = 0; id < 6; id++) { /* shared prefixes: ids 0-2 and 3-5 */
            /* aligned: every prompt as long, so that requests fill blocks at the same step */
            uint32_t len = fast_aligned ? 13 : (uint32_t)(9 + 7 * id);
            struct sched_request *r =
                add(s[m], id, (kvpool_token)(7 + id / 3), len, (uint32_t)(25 + 19 * id));
            (void)r;
        }
    }
    uint64_t bulk = 0, events = 0, took = 0;
    for (int it = 0; sched_num_unfinished(s[0]) > 0; it++) {
        cr_assert_lt(it, 100000);
        struct sched_stable_run run[2];
        uint32_t k = sched_stable_decode_steps(s[0], 1, 40, &run[0]);
        cr_assert_eq(k, sched_stable_decode_steps(s[1], 1, 40, &run[1]), "the test reads only");
        cr_assert_eq(run[0].k, k);
        cr_assert_eq(run[0].new_blocks, run[1].new_blocks);
        if (k > 0)
            took += run[0].new_blocks;
        if (k > 0 && it % 3 != 2) {
            struct sched_request *const *rr;
            uint32_t n = sched_running(s[0], &rr);
            kvpool_token toks[64 * 40];
            for (uint32_t i = 0; i < n; i++)
                for (uint32_t j = 0; j < k; j++)
                    toks[i * k + j] = fast_token(rr[i], rr[i]->num_output + j);
            /* alternately with the test's answer and without (the test runs again) */
            cr_assert_eq(sched_decode_steps(s[0], k, toks, it % 2 ? &run[0] : NULL), 0);
            for (uint32_t j = 0; j < k; j++)
                step_one(s[1]);
            bulk += k;
        } else {
            step_one(s[0]);
            step_one(s[1]);
        }
        assert_same_state(s[0], s[1]);
        uint64_t ev[2] = {1, 1}; /* the same events in the same order, if any are recorded */
        size_t nev[2];
        for (int m = 0; m < 2; m++)
            nev[m] = kvpool_events_drain(sched_pool(s[m]), fold_event, &ev[m]);
        cr_assert_eq(nev[0], nev[1], "events after iteration %d", it);
        cr_assert_eq(ev[0], ev[1], "events after iteration %d", it);
        events += nev[0];
        for (int m = 0; m < 2; m++) { /* release what finished (same on both) */
            uint32_t nf;
            struct sched_request *const *fin = sched_last_finished(s[m], &nf);
            struct sched_request *done[8];
            cr_assert(nf <= 8);
            memcpy(done, fin, nf * sizeof *done);
            for (uint32_t i = 0; i < nf; i++)
                cr_assert_eq(sched_release(s[m], done[i]), 0);
        }
    }
    cr_assert_geq(bulk, 10, "the bulk path ran (%" PRIu64 " steps)", bulk);
    if (tweak == fast_cfg_events)
        cr_assert_gt(events, 0, "events were recorded");
    cr_assert_gt(took, 0, "some runs began by taking a block");
    sched_destroy(s[0]);
    sched_destroy(s[1]);
}

Test(sched, decode_steps_equal_one_by_one) { decode_steps_match(fast_cfg_default); }
Test(sched, decode_steps_equal_one_by_one_deferred_frees) { decode_steps_match(fast_cfg_deferred); }
Test(sched, decode_steps_equal_one_by_one_small_blocks_and_length_caps)
{
    decode_steps_match(fast_cfg_small);
}
Test(sched, decode_steps_equal_one_by_one_without_prefix_caching)
{
    decode_steps_match(fast_cfg_no_cache);
}
/* A run may end on the step that fills a block: the same blocks cached, the same KV events. */
Test(sched, decode_steps_equal_one_by_one_with_kv_events) { decode_steps_match(fast_cfg_events); }
Test(sched, decode_steps_equal_one_by_one_with_kv_events_filled_together)
{
    fast_aligned = true;
    decode_steps_match(fast_cfg_events);
}

/* A token that would stop its request is refused, and nothing changes. */
Test(sched, decode_steps_refuse_a_stopping_token)
{
    struct sched *s = NULL;
    struct sched_config cfg;
    sched_config_default(&cfg);
    cr_assert_eq(sched_create(&cfg, &s), 0);
    kvpool_token prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8}, stop = 777;
    struct sched_request_params p = {.id = 1,
                                     .prompt = prompt,
                                     .num_prompt_tokens = 8,
                                     .max_tokens = 50,
                                     .eos_token_id = -1,
                                     .stop_token_ids = &stop,
                                     .num_stop_token_ids = 1};
    struct sched_request *r;
    cr_assert_eq(sched_add(s, &p, &r), 0);
    step_one(s); /* the prefill samples the first token */
    cr_assert_geq(sched_stable_decode_steps(s, 1, 4, NULL), 3);
    kvpool_token toks[3] = {100, 777, 101};
    uint64_t gen = kvpool_generation(sched_pool(s));
    cr_assert_eq(sched_decode_steps(s, 3, toks, NULL), -EINVAL);
    cr_assert_eq(r->num_output, 1);
    cr_assert_eq(kvpool_generation(sched_pool(s)), gen);
    toks[1] = 778;
    cr_assert_eq(sched_decode_steps(s, 3, toks, NULL), 0);
    cr_assert_eq(r->num_output, 4);
    cr_assert_eq(sched_decode_steps(s, 60, NULL, NULL), -EINVAL, "beyond max_tokens");
    /* A test's answer is not taken once the scheduler changed: an arrival ends the batch. */
    struct sched_stable_run run;
    cr_assert_geq(sched_stable_decode_steps(s, 1, 4, &run), 2);
    p.id = 2;
    struct sched_request *r2;
    cr_assert_eq(sched_add(s, &p, &r2), 0);
    toks[1] = 779;
    cr_assert_eq(sched_decode_steps(s, 2, toks, &run), -EINVAL, "a request waits now");
    cr_assert_eq(r->num_output, 4);
    sched_destroy(s);

    /* An EOS alone (no stop tokens) stops a request too. */
    cr_assert_eq(sched_create(&cfg, &s), 0);
    p.id = 3;
    p.eos_token_id = 555;
    p.stop_token_ids = NULL;
    p.num_stop_token_ids = 0;
    cr_assert_eq(sched_add(s, &p, &r), 0);
    step_one(s);
    cr_assert_geq(sched_stable_decode_steps(s, 1, 4, NULL), 3);
    kvpool_token eos[3] = {100, 555, 101};
    cr_assert_eq(sched_decode_steps(s, 3, eos, NULL), -EINVAL, "the EOS stops it");
    cr_assert_eq(r->num_output, 1);
    eos[1] = 556;
    cr_assert_eq(sched_decode_steps(s, 3, eos, NULL), 0);
    sched_destroy(s);
}

/* A router's prompt hashes are taken instead of hashing again; with check_invariants on, hashes
 * that are not the prompt's are refused (they would serve another prompt's blocks as hits). */
Test(sched, add_takes_given_prompt_hashes_and_checks_them)
{
    static const struct kvpool_token_run runs[] = {{7, 50}, {8, 30}}; /* 5 full blocks */
    kvpool_hash h[5];
    cr_assert_eq(kvpool_hash_prompt(16, NULL, 0, runs, 2, h, 5), 5);
    struct sched *s = make(NULL);
    struct sched_request_params p = {
        .id = 1,
        .num_prompt_tokens = 80,
        .prompt_runs = runs,
        .num_prompt_runs = 2,
        .prompt_hashes = h,
        .num_prompt_hashes = 3,
        .max_tokens = 4,
        .eos_token_id = -1,
    };
    struct sched_request *r = NULL;
    cr_assert_eq(sched_add(s, &p, &r), 0);
    cr_assert_eq(r->kv.num_hashes, 5);
    for (uint32_t i = 0; i < 5; i++)
        cr_assert_eq(r->kv.hashes[i], h[i], "hash %u", i);
    kvpool_hash wrong[3] = {h[0], h[2], h[1]};
    p.id = 2;
    p.prompt_hashes = wrong;
    cr_assert_eq(sched_add(s, &p, &r), -EINVAL, "hashes of another prompt");
    sched_destroy(s);
}
