/*
 * conform_internal.h - the scenario runner's state and the functions its four files share:
 * conform_schema.c (strict validation of a document before anything runs), conform_ops.c (the
 * operations, the disaggregated handoff's among them), conform_expect.c (observations and
 * expectations), conform_runner.c (the extension rules and the runner's life cycle). Private to
 * runtime/verify/; one thread per runner. Failures return KVSIM_ESCENARIO (the scenario ran and
 * something did not hold) or -EINVAL (the document is malformed), with the message in the
 * runner.
 *
 * Engines. The one-engine form has one scheduler (eng[0]). The two-engine form (config
 * `prefill` and `decode`, docs/conformance.md) has a prefill engine (eng[CONFORM_PREFILL]) and a
 * decode engine (eng[CONFORM_DECODE]); a disaggregated request has a request on each (the same
 * scheduler id on both: its index + 1) and one handoff, driven by the runner as the replay's
 * coordinator drives it (runtime/replay/disagg.c, runtime/engine/disagg.c).
 */
#ifndef KVSIM_CONFORM_INTERNAL_H
#define KVSIM_CONFORM_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/engine/tiers.h"
#include "runtime/verify/verify.h"

#include <errno.h>
#include "sched/sched.h"

#define MAX_OUTSTANDING 64
#define OP_SKIPPED      1 /* lenient mode: the op refers to nothing that exists; dropped */
/* Virtual time stays below this (so that no deadline arithmetic can overflow). */
#define MAX_NOW_NS      (INT64_C(1) << 62)

enum { CONFORM_PREFILL = 0, CONFORM_DECODE = 1, CONFORM_ENGINES = 2 };
#define CONFORM_NO_ENGINE (-1) /* an op of the two-engine form that names no engine */

struct creq {
    char *name; /* id in the file */
    /* r[e]: the request on engine e (NULL until added there). One-engine form: r[0]. Two-engine
     * form: a disaggregated request has r[PREFILL] from its add and r[DECODE] from its route; a
     * plain request (an add with "engine") only the one of its engine. */
    struct sched_request *r[CONFORM_ENGINES];
    int eng;                                  /* the engine of its add */
    struct kvpool_hits hits[CONFORM_ENGINES]; /* last kv_lookup, per engine */
    bool has_hits[CONFORM_ENGINES];
    /* what the last op left, to count transitions */
    enum sched_status seen_status[CONFORM_ENGINES];
    enum sched_transition seen_transition[CONFORM_ENGINES];
    uint64_t seen_transition_step[CONFORM_ENGINES];
    /* the disaggregated handoff (two-engine form, an add without "engine") */
    bool disagg;
    json_t *add; /* its add op: the decode request is built from it at the route */
    struct kvsim_handoff h;
    struct sched_pin *pin; /* the source pin on the prefill engine, NULL once released */
    /* its transfer on the prefill engine's link (conform_ops.c, "the link"): queued at the
     * reservation, booked only when it starts, at max(its reservation, link_before: the end of
     * the last transfer that actually ran), which is when the handoff enters TRANSFERRING.
     * xfer_start and xfer_end are KVSIM_HANDOFF_TIME_NONE until then. */
    int64_t xfer_start, xfer_end, link_before;
    bool on_link;      /* in the link's FIFO: queued, moving, or cut and still on the link */
    bool xfer_started; /* it started (it holds the link until xfer_end) */
};

/* One engine's scheduler and what an op observed of it. */
struct ceng {
    struct sched *s;
    struct sched_step *outstanding[MAX_OUTSTANDING];
    size_t nout;
    json_t *finished; /* ids the current op finished here (output, abort, route, advance) */
    /* KV events of the pool so far (two-engine form: recorded and drained after every op) */
    uint64_t stored_blocks, removed_blocks, cleared;
};

/* The handoff configuration (config `handoff`). */
struct conform_handoff_cfg {
    int64_t abort_timeout_ns; /* <= 0: a pin never expires */
    bool release_immediately; /* "release": "immediate" */
    struct kvsim_transfer_model xfer;
};

/* A queue of request indexes (FIFO). */
struct conform_fifo {
    size_t *v;
    size_t head, tail, cap;
};

struct kvsim_conform_runner {
    const char *name;
    bool trace, lenient;
    json_t *effective;
    /* extension rules */
    bool check_invariants, check_liveness, has_max_futile;
    bool scheduler_checks; /* the scheduler's own boundary checks (without check_invariants) */
    uint64_t max_futile;
    bool disagg; /* the two-engine form */
    struct ceng eng[CONFORM_ENGINES];
    int neng;                  /* 1 or 2 */
    int cur;                   /* the current op's engine (CONFORM_NO_ENGINE: none) */
    struct kvsim_tiers *tiers; /* config `offload`; NULL without tiers (one-engine form only) */
    int64_t now_ns;            /* virtual time (advance) */
    struct creq *reqs;
    size_t nreqs, cap_reqs;
    uint64_t adds;
    size_t nsteps;        /* steps run so far (the next step's index) */
    uint64_t list_tokens; /* tokens the token lists validated so far expand to (a budget) */
    struct kvsim_conform_stats stats;
    /* the two-engine form's handoffs */
    struct conform_handoff_cfg hcfg;
    struct conform_fifo deadlines; /* pins with a deadline, in pin order (= deadline order) */
    struct conform_fifo transfers; /* the prefill engine's link: the transfers reserved and not
                                    * ended, in reservation order; only the head may have
                                    * started (cut by an abort or not); an aborted transfer that
                                    * had not started is gone from it */
    int64_t link_free;             /* the end of the last transfer that actually started */
    /* the current op's observations */
    struct sched_step *step; /* schedule */
    json_t *ignored;         /* handoff facts this op ignored (ids) */
    json_t *rejected;        /* handoff facts this op refused as out of order (ids) */
    int op_result;           /* reset_prefix_cache */
    json_t *lookup, *alloc;  /* kv_lookup / kv_allocate results */
    uint64_t futile_now;     /* futile preemptions of the current schedule */
    char err[1024];
    char kind[96];
    char shape[192]; /* a dead end's structure (check_liveness), "" otherwise */
    struct kvsim_dead_end dead_end;
    long fail_step;
    char fail_op[32];
    bool running; /* past parsing: failures are about behaviour, not the file */
    bool failed;
};

/* The code of the runner's recorded failure: -EINVAL while the document is being validated
 * (it is malformed), KVSIM_ESCENARIO once it runs (something did not hold). */
static inline int conform__failed(const struct kvsim_conform_runner *c)
{
    return c->running ? KVSIM_ESCENARIO : -EINVAL;
}

/* The current op's engine (0 in the one-engine form). */
static inline int conform__cur(const struct kvsim_conform_runner *c)
{
    return c->cur < 0 ? 0 : c->cur;
}

/* "prefill" / "decode". */
const char *conform__engine_name(int e);

/* The parsed configuration. */
struct conform_config {
    struct sched_config sc[CONFORM_ENGINES]; /* sc[0] only in the one-engine form */
    struct kvsim_tiers_config tc;
    bool offload;
};

/* conform_schema.c */
int conform__check_keys(struct kvsim_conform_runner *c, json_t *obj, const char *const *allowed,
                        const char *where);
int conform__tokens_check(struct kvsim_conform_runner *c, json_t *v, const char *where,
                          const char *key);
int conform__tokens_parse(struct kvsim_conform_runner *c, json_t *v, kvpool_token **out, size_t *n,
                          size_t *cap, const char *where);
json_t *conform__tokens_json(struct kvsim_conform_runner *c, json_t *v, const char *where);
int conform__parse_config(struct kvsim_conform_runner *c, json_t *cfg, struct conform_config *cc);
int conform__engine_config_check(struct kvsim_conform_runner *c, const struct sched_config *sc,
                                 const char *where);
uint64_t conform__offload_field(const struct kvsim_tiers_stats *t,
                                const struct sched_offload_counters *k, const char *f);
int conform__validate_step(struct kvsim_conform_runner *c, json_t *st, size_t k);
/* true for an expect key observed on one engine (status, free_blocks, scheduled, ...). */
bool conform__is_engine_key(const char *key);
/* conform_ops.c */
struct creq *conform__find_req(struct kvsim_conform_runner *c, const char *name);
struct creq *conform__need_req(struct kvsim_conform_runner *c, const char *name, const char *where);
int conform__op_add(struct kvsim_conform_runner *c, json_t *st, const char *where);
json_t *conform__ids_json(struct kvsim_conform_runner *c, struct sched_request *const *reqs,
                          size_t n);
int conform__violation_fail(struct kvsim_conform_runner *c, int e, const char *where,
                            const struct sched_violation *v);
int conform__sched_error(struct kvsim_conform_runner *c, int e, const char *where, int rc);
int conform__op_schedule(struct kvsim_conform_runner *c, const char *where);
int conform__op_output(struct kvsim_conform_runner *c, json_t *stj, json_t *eff, const char *where);
int conform__op_abort(struct kvsim_conform_runner *c, json_t *st, json_t *eff, const char *where);
int conform__op_kv_lookup(struct kvsim_conform_runner *c, json_t *st, const char *where);
int conform__op_kv_allocate(struct kvsim_conform_runner *c, json_t *st, const char *where);
int conform__op_kv_free(struct kvsim_conform_runner *c, json_t *st, const char *where);
int conform__op_advance(struct kvsim_conform_runner *c, json_t *st, const char *where);
int conform__op_route(struct kvsim_conform_runner *c, json_t *st, const char *where);
/* The earliest handoff event (a transfer's start or end, a pin's deadline), or INT64_MAX. */
int64_t conform__next_handoff_event(const struct kvsim_conform_runner *c);
void conform__fifo_free(struct conform_fifo *f);
/* conform_expect.c */
int conform__check_expect(struct kvsim_conform_runner *c, json_t *ex, const char *op, size_t k);
void conform__trace_step(struct kvsim_conform_runner *c, size_t k, const char *op);
/* conform_runner.c */
int conform__fail(struct kvsim_conform_runner *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int conform__fail_kind(struct kvsim_conform_runner *c, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* KVSIM_CONFORM_INTERNAL_H */
