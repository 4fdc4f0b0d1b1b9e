/*
 * disagg.c - an engine's disaggregated roles (engine.h, docs/disagg.md).
 *
 * The handoff's state belongs to the coordinator, which applies the facts in virtual-time order;
 * an engine reports facts through its outbox and keeps only its own part of the handoff (the
 * private fields: a prefill engine's pin, a decode engine's request).
 *
 * Prefill engine. Every request is a prefill (max_tokens 1, kv_producer): when it finishes, the
 * scheduler pins its blocks (sched_pin); the outbox says PINNED, and the pin's deadline is the
 * pin instant plus the abort timeout. A prompt shorter than a block pins nothing (vLLM frees it
 * at once and sends no block ids): the outbox says PINNED with no blocks, and the decode engine
 * computes the prompt itself. The pin ends on a RELEASE message (the transfer ended:
 * COMPLETED) or when its deadline passes (ABORTED). As vLLM checks
 * deadlines in get_finished once per engine step, a deadline is acted on at the end of the step
 * running then, or at the deadline itself when the engine is between steps (an engine holding
 * only pinned blocks neither spins nor sleeps through it). Pins are made in time order and all
 * have the same timeout, so their deadlines come in pin order: a FIFO, not a heap.
 *
 * Decode engine. ARRIVE adds the decode request with its whole prompt reported by the KV
 * connector as loadable asynchronously (vLLM's get_num_new_matched_tokens for do_remote_prefill:
 * prompt minus local hits); the scheduler parks it in WAITING_FOR_REMOTE_KVS once it passes
 * max_num_seqs and its missing blocks are allocated (DESTINATION_RESERVED; the outbox says
 * RESERVED). A request whose prompt is all local hits is admitted at once and reserves nothing:
 * vLLM still sends the empty read that lets the source go, so it is reported the same way, with
 * nothing to move. ACTIVATE finishes the load (the next schedule promotes it); CANCEL aborts the
 * request and frees a reserved destination at once (its transfer will never write it).
 *
 * Messages apply in (instant, kind, posting order): at one instant a release or an activation
 * before a cancel before an arrival.
 */
#include "runtime/engine/engine_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the inbox (min-heap) and the outbox ---------------------------------------------------- */

static bool msg_less(const struct kvsim_engine *e, uint32_t a, uint32_t b)
{
    const struct kvsim_engine_msg *x = &e->inbox[a], *y = &e->inbox[b];
    if (x->t != y->t)
        return x->t < y->t;
    if (x->kind != y->kind)
        return x->kind < y->kind;
    return e->inbox_seq[a] < e->inbox_seq[b];
}

static void msg_swap(struct kvsim_engine *e, uint32_t a, uint32_t b)
{
    struct kvsim_engine_msg m = e->inbox[a];
    e->inbox[a] = e->inbox[b];
    e->inbox[b] = m;
    uint64_t q = e->inbox_seq[a];
    e->inbox_seq[a] = e->inbox_seq[b];
    e->inbox_seq[b] = q;
}

int kvsim_engine_post(struct kvsim_engine *e, const struct kvsim_engine_msg *m)
{
    if (m->t <= e->advanced_to)
        return -EINVAL; /* the engine has processed that instant: it would apply late */
    if (e->num_inbox == e->cap_inbox) {
        uint32_t nc = e->cap_inbox ? e->cap_inbox * 2 : 64;
        struct kvsim_engine_msg *ni = realloc(e->inbox, nc * sizeof *ni);
        if (ni)
            e->inbox = ni;
        uint64_t *ns = realloc(e->inbox_seq, nc * sizeof *ns);
        if (ns)
            e->inbox_seq = ns;
        if (!ni || !ns)
            return -ENOMEM;
        e->cap_inbox = nc;
    }
    uint32_t i = e->num_inbox++;
    e->inbox[i] = *m;
    e->inbox_seq[i] = e->next_seq++;
    while (i > 0 && msg_less(e, i, (i - 1) / 2)) {
        msg_swap(e, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    /* What the coordinator reads before the engine advances again (the lookahead, a session
     * turn's earliest finish) must know of the message now. */
    engine__publish(e);
    return 0;
}

static struct kvsim_engine_msg inbox_pop(struct kvsim_engine *e)
{
    struct kvsim_engine_msg top = e->inbox[0];
    e->num_inbox--;
    if (e->num_inbox) {
        e->inbox[0] = e->inbox[e->num_inbox];
        e->inbox_seq[0] = e->inbox_seq[e->num_inbox];
        for (uint32_t i = 0;;) {
            uint32_t c = 2 * i + 1;
            if (c >= e->num_inbox)
                break;
            if (c + 1 < e->num_inbox && msg_less(e, c + 1, c))
                c++;
            if (!msg_less(e, c, i))
                break;
            msg_swap(e, i, c);
            i = c;
        }
    }
    return top;
}

int64_t engine__next_message(const struct kvsim_engine *e)
{
    return e->num_inbox ? e->inbox[0].t : INT64_MAX;
}

/* Reports a fact that happened at t (a message applied while a step runs happens at its own
 * instant, not at the engine's clock, which is the step's start). */
static int outbox_push(struct kvsim_engine *e, int64_t t, enum kvsim_engine_msg_kind kind,
                       uint32_t req, uint64_t a, uint64_t b)
{
    if (e->num_outbox == e->cap_outbox) {
        uint32_t nc = e->cap_outbox ? e->cap_outbox * 2 : 64;
        struct kvsim_engine_msg *no = realloc(e->outbox, nc * sizeof *no);
        if (!no)
            return engine__fail(e, -ENOMEM);
        e->outbox = no;
        e->cap_outbox = nc;
    }
    e->outbox[e->num_outbox++] =
        (struct kvsim_engine_msg){.t = t, .kind = (uint32_t)kind, .req = req, .a = a, .b = b};
    return 0;
}

const struct kvsim_engine_msg *kvsim_engine_take_outbox(struct kvsim_engine *e, uint32_t *n)
{
    *n = e->num_outbox;
    e->num_outbox = 0;
    return e->outbox;
}

void engine__disagg_free(struct kvsim_engine *e)
{
    for (uint32_t i = 0; i < e->num_inbox; i++) /* messages never applied or never taken */
        free(e->inbox[i].hashes);
    for (uint32_t i = 0; i < e->num_outbox; i++)
        free(e->outbox[i].hashes);
    free(e->inbox);
    free(e->inbox_seq);
    free(e->outbox);
    free(e->pin_fifo);
}

/* ---- prefill: pins ------------------------------------------------------------------------- */

static struct kvsim_handoff *handoff_of(const struct kvsim_engine *e, uint32_t req)
{
    return &e->cfg.disagg->handoffs[req];
}

/* After whatever happened at t: the blocks only pins hold were pinned_blocks since the last
 * change, and are the pool's count from now on. Exact as long as it is called after every
 * batch of changes (nothing changes between an engine's events). */
void engine__pin_account(struct kvsim_engine *e, int64_t t)
{
    if (e->cfg.role != KVSIM_ENGINE_PREFILL)
        return;
    if (e->pinned_blocks)
        e->pinned_block_ns += (double)e->pinned_blocks * (double)(t - e->pinned_since);
    e->pinned_since = t;
    e->pinned_blocks = sched_num_pinned_blocks(e->s);
    if (e->pinned_blocks > e->peak_pinned_blocks)
        e->peak_pinned_blocks = e->pinned_blocks;
}

void kvsim_engine_pin_stats(const struct kvsim_engine *e, double *block_ns, uint32_t *peak_blocks)
{
    *block_ns =
        e->pinned_block_ns + (e->pinned_blocks && e->now > e->pinned_since
                                  ? (double)e->pinned_blocks * (double)(e->now - e->pinned_since)
                                  : 0.0);
    *peak_blocks = e->peak_pinned_blocks;
}

static int fifo_push(struct kvsim_engine *e, uint32_t req, int64_t deadline)
{
    if (e->pin_tail - e->pin_head == e->pin_cap) {
        uint32_t nc = e->pin_cap ? e->pin_cap * 2 : 64;
        struct engine_pin_deadline *nf = malloc(nc * sizeof *nf);
        if (!nf)
            return engine__fail(e, -ENOMEM);
        for (uint32_t i = 0; i < e->pin_tail - e->pin_head; i++)
            nf[i] = e->pin_fifo[(e->pin_head + i) % e->pin_cap];
        free(e->pin_fifo);
        e->pin_fifo = nf;
        e->pin_tail -= e->pin_head;
        e->pin_head = 0;
        e->pin_cap = nc;
    }
    e->pin_fifo[e->pin_tail++ % e->pin_cap] = (struct engine_pin_deadline){req, deadline};
    return 0;
}

/* Frees a pin's blocks (now). */
static void release_source(struct kvsim_engine *e, struct kvsim_handoff *h)
{
    sched_release_pin(e->s, h->source);
    h->source = NULL;
}

/* A copy of the finished prefill r's prompt block hashes for the decode side, when that pool
 * hashes blocks of this size: the prompt's full blocks (r also holds the sampled token; its
 * blocks went to the pin, its hashes stay until it is released). Returns 0 or -ENOMEM. */
static int attach_prompt_hashes(struct kvsim_engine *e, struct kvsim_engine_msg *m,
                                const struct sched_request *r)
{
    uint32_t bs = sched_get_config(e->s)->block_size;
    if (e->cfg.disagg->decode_block_size != bs)
        return 0;
    uint32_t n = e->cfg.trace->reqs[r->id].input_len / bs;
    if (n > r->kv.num_hashes)
        n = r->kv.num_hashes;
    if (n == 0)
        return 0;
    m->hashes = malloc(n * sizeof *m->hashes);
    if (!m->hashes)
        return engine__fail(e, -ENOMEM);
    memcpy(m->hashes, r->kv.hashes, n * sizeof *m->hashes);
    m->num_hashes = n;
    return 0;
}

int engine__prefills_finished(struct kvsim_engine *e, struct sched_request *const *fin, uint32_t nf)
{
    const struct kvsim_engine_disagg *d = e->cfg.disagg;
    uint32_t n, j = 0;
    struct sched_pin *const *pins = sched_last_pinned(e->s, &n);
    for (uint32_t i = 0; i < nf; i++) {
        if (j == n || pins[j]->id != fin[i]->id) {
            /* Not a full block computed: freed already, nothing to hand off but the request. */
            int rc = outbox_push(e, e->now, KVSIM_MSG_PINNED, (uint32_t)fin[i]->id, 0, 0);
            if (rc)
                return rc;
            continue;
        }
        struct sched_pin *pin = pins[j++];
        struct kvsim_handoff *h = handoff_of(e, (uint32_t)pin->id);
        h->source = pin;
        int rc = outbox_push(e, e->now, KVSIM_MSG_PINNED, (uint32_t)pin->id, pin->kv.num_blocks,
                             pin->num_tokens);
        if (rc == 0)
            rc = attach_prompt_hashes(e, &e->outbox[e->num_outbox - 1], fin[i]);
        if (rc)
            return rc;
        if (d->release_immediately)
            release_source(e, h); /* the unfaithful what-if: nothing strands */
        else if (d->abort_timeout_ns > 0 && e->now <= INT64_MAX - d->abort_timeout_ns &&
                 (rc = fifo_push(e, (uint32_t)pin->id, e->now + d->abort_timeout_ns)) != 0)
            return rc;
    }
    return 0;
}

/* The oldest pin still held, dropping the released ones from the FIFO's head. */
int64_t engine__next_deadline(struct kvsim_engine *e)
{
    while (e->pin_head != e->pin_tail) {
        const struct engine_pin_deadline *p = &e->pin_fifo[e->pin_head % e->pin_cap];
        if (handoff_of(e, p->req)->source)
            return p->deadline;
        e->pin_head++;
    }
    return INT64_MAX;
}

static int expire_pins(struct kvsim_engine *e, int64_t t)
{
    while (engine__next_deadline(e) <= t) {
        uint32_t req = e->pin_fifo[e->pin_head++ % e->pin_cap].req;
        release_source(e, handoff_of(e, req));
        int rc = outbox_push(e, t, KVSIM_MSG_ABORTED, req, 0, 0);
        if (rc)
            return rc;
    }
    return 0;
}

/* RELEASE: the transfer ended. With the source still held (or released at the pin by the
 * what-if) the handoff completes; a source the abort timeout freed stays freed. */
static int apply_release(struct kvsim_engine *e, struct kvsim_handoff *h, int64_t t)
{
    if (h->source)
        release_source(e, h);
    else if (!e->cfg.disagg->release_immediately)
        return 0;
    return outbox_push(e, t, KVSIM_MSG_COMPLETED, h->req, 0, 0);
}

/* ---- decode: arrivals, reservations, activations, cancels -------------------------------- */

/* ARRIVE: the decode request, with its whole prompt offered by the connector (has_kv), or with
 * nothing to load (a prompt shorter than a block: computed here). */
static int apply_arrive(struct kvsim_engine *e, struct kvsim_handoff *h, int64_t t, bool has_kv,
                        const struct kvsim_engine_msg *m)
{
    const struct kvsim_req_spec *spec = &e->cfg.trace->reqs[h->req];
    uint32_t n = kvsim_prompt_runs(e->cfg.trace, h->req, e->runs, e->cap_runs);
    if (n > e->cap_runs) {
        struct kvpool_token_run *nr = realloc(e->runs, n * sizeof *nr);
        if (!nr)
            return engine__fail(e, -ENOMEM);
        e->runs = nr;
        e->cap_runs = n;
        kvsim_prompt_runs(e->cfg.trace, h->req, e->runs, e->cap_runs);
    }
    struct sched_request_params p = {
        .id = h->req,
        .num_prompt_tokens = spec->input_len,
        .prompt_runs = e->runs,
        .num_prompt_runs = n,
        .max_tokens = spec->output_len,
        .arrival = (double)t,
        .eos_token_id = -1,
        .external_tokens = has_kv ? spec->input_len : 0, /* the connector offers the prompt */
        .external_async = has_kv,
        .external_once = has_kv,
        .prompt_hashes = m->hashes, /* the prefill's, at this block size */
        .num_prompt_hashes = m->num_hashes,
    };
    int rc = sched_add(e->s, &p, &h->decode_req);
    if (rc)
        return engine__fail(e, rc);
    e->unfinished++;
    if (has_kv) {
        e->waiting_handoffs++;
        h->decode_waiting = true;
    } else {
        h->decode_local = true;
    }
    e->pub.queued_tokens += spec->input_len;
    return 0;
}

static int reserved(struct kvsim_engine *e, struct sched_request *r, uint64_t missing)
{
    struct kvsim_handoff *h = handoff_of(e, (uint32_t)r->id);
    if (!h->decode_waiting)
        return engine__fail(e, -EPROTO); /* a second reservation for one transfer */
    h->decode_waiting = false;
    e->waiting_handoffs--;
    e->pub.queued_tokens -= e->cfg.trace->reqs[r->id].input_len;
    return outbox_push(e, e->now, KVSIM_MSG_RESERVED, (uint32_t)r->id, missing, 0);
}

int engine__reservations_made(struct kvsim_engine *e, const struct sched_step *st)
{
    int rc = 0;
    for (uint32_t i = 0; i < st->num_parked && rc == 0; i++)
        rc = reserved(e, st->parked[i], st->parked[i]->loading_tokens);
    /* All local hits: admitted at once, with an empty read to let the source go. Nothing to
     * load: admitted like any request. */
    for (uint32_t i = 0; i < st->num_new && rc == 0; i++) {
        struct sched_request *r = st->new_reqs[i];
        struct kvsim_handoff *h = handoff_of(e, (uint32_t)r->id);
        if (h->decode_waiting) {
            rc = reserved(e, r, 0);
        } else if (h->decode_local) {
            h->decode_local = false;
            e->pub.queued_tokens -= e->cfg.trace->reqs[r->id].input_len;
        }
    }
    return rc;
}

static int apply_activate(struct kvsim_engine *e, struct kvsim_handoff *h)
{
    struct sched_request *r = h->decode_req;
    if (!r || r->status != SCHED_WAITING_FOR_REMOTE_KVS)
        return 0; /* cancelled meanwhile, or running on local hits */
    int rc = sched_load_finished(e->s, r, true);
    return rc ? engine__fail(e, rc) : 0;
}

/* CANCEL: the source is gone. A waiting or reserved decode request is aborted and its
 * destination freed; one already running on its own hits goes on. */
static int apply_cancel(struct kvsim_engine *e, struct kvsim_handoff *h, int64_t t)
{
    struct sched_request *r = h->decode_req;
    if (!r || r->status == SCHED_RUNNING || sched_status_is_finished(r->status))
        return 0;
    bool reserved_dest = r->status == SCHED_WAITING_FOR_REMOTE_KVS;
    if (h->decode_waiting) {
        h->decode_waiting = false;
        e->waiting_handoffs--;
        e->pub.queued_tokens -= e->cfg.trace->reqs[r->id].input_len;
    }
    int rc = sched_abort(e->s, r);
    if (rc == 0 && reserved_dest)
        rc = sched_load_finished(e->s, r, false); /* the transfer never writes them now */
    if (rc == 0)
        rc = kvsim_metrics_on_abort(e->cfg.metrics, h->req, t, "handoff_aborted");
    if (rc == 0)
        rc = sched_release(e->s, r);
    if (rc == 0) /* finished for its session: the next turn still comes */
        rc = engine__push_done(e, h->req, t);
    if (rc)
        return engine__fail(e, rc);
    h->decode_req = NULL;
    e->unfinished--;
    return 0;
}

/* ---- applying messages -------------------------------------------------------------------- */

int engine__apply_messages(struct kvsim_engine *e, int64_t t, bool expire)
{
    while (e->num_inbox && e->inbox[0].t <= t) {
        struct kvsim_engine_msg m = inbox_pop(e);
        struct kvsim_handoff *h = handoff_of(e, m.req);
        int rc = 0;
        switch ((enum kvsim_engine_msg_kind)m.kind) {
        case KVSIM_MSG_RELEASE: rc = apply_release(e, h, m.t); break;
        case KVSIM_MSG_ACTIVATE: rc = apply_activate(e, h); break;
        case KVSIM_MSG_CANCEL: rc = apply_cancel(e, h, m.t); break;
        case KVSIM_MSG_ARRIVE: rc = apply_arrive(e, h, m.t, m.a != 0, &m); break;
        default: rc = engine__fail(e, -EINVAL); break;
        }
        free(m.hashes);
        if (rc)
            return rc;
    }
    return expire && e->pin_head != e->pin_tail ? expire_pins(e, t) : 0;
}

/* ---- the lookahead ------------------------------------------------------------------------- */

/*
 * The earliest instant this engine could start a handoff fact the coordinator must answer
 * before it happens elsewhere: a prefill engine's next pin (a reservation can follow at once)
 * or abort (a cancel frees a destination); a decode engine's next schedule while a routed
 * request waits for its reservation. Lower bounds, never late.
 */
void engine__publish_handoff(struct kvsim_engine *e)
{
    e->pub.pinned_blocks = e->pinned_blocks;
    e->pub.earliest_handoff = INT64_MAX;
    if (e->cfg.role == KVSIM_ENGINE_AGGREGATED)
        return;
    int64_t m = kvsim_step_model_min_duration_ns(&e->cfg.model);
    int64_t next = engine__next_message(e);
    if (e->cfg.role == KVSIM_ENGINE_PREFILL) {
        int64_t pin = INT64_MAX;
        if (e->step) /* a step that samples finishes its prefills; otherwise the next one */
            pin = e->step_end;
        else if (e->unfinished && next != INT64_MAX) /* idle, blocked: a release may free it */
            pin = next > INT64_MAX - m ? INT64_MAX : next + m;
        /* A deadline passing while a step runs is acted on at the step's end. */
        int64_t abort = engine__next_deadline(e);
        if (e->step && abort < e->step_end)
            abort = e->step_end;
        e->pub.earliest_handoff = pin < abort ? pin : abort;
        return;
    }
    if (e->waiting_handoffs)
        e->pub.earliest_handoff = e->step && e->step_end < next ? e->step_end : next;
}
