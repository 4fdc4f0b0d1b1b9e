/*
 * conform_internal.h - the scenario runner's state and the functions its four files share:
 * conform_schema.c (strict validation of a document before anything runs), conform_ops.c (the
 * operations), conform_expect.c (observations and expectations), conform_runner.c (the
 * extension rules and the runner's life cycle). Private to runtime/verify/; one thread per
 * runner. Failures return KVSIM_ESCENARIO (the scenario ran and something did not hold) or
 * -EINVAL (the document is malformed), with the message in the runner.
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

struct creq {
    char *name;              /* id in the file */
    struct sched_request *r; /* NULL until added */
    struct kvpool_hits hits; /* last kv_lookup */
    bool has_hits;
    /* what the last op left, to count transitions */
    enum sched_status seen_status;
    enum sched_transition seen_transition;
    uint64_t seen_transition_step;
};

#define MAX_OUTSTANDING 64
#define OP_SKIPPED      1 /* lenient mode: the op refers to nothing that exists; dropped */
/* Virtual time stays below this (so that no deadline arithmetic can overflow). */
#define MAX_NOW_NS      (INT64_C(1) << 62)

struct kvsim_conform_runner {
    const char *name;
    bool trace, lenient;
    json_t *effective;
    /* extension rules */
    bool check_invariants, check_liveness, has_max_futile;
    bool scheduler_checks; /* the scheduler's own boundary checks (without check_invariants) */
    uint64_t max_futile;
    struct sched *s;
    struct kvsim_tiers *tiers; /* config `offload`; NULL without tiers */
    int64_t now_ns;            /* virtual time (advance) */
    struct creq *reqs;
    size_t nreqs, cap_reqs;
    struct sched_step *outstanding[MAX_OUTSTANDING];
    size_t nout;
    uint64_t adds;
    size_t nsteps; /* steps run so far (the next step's index) */
    struct kvsim_conform_stats stats;
    /* the current op's observations */
    struct sched_step *step;  /* schedule */
    json_t *sampled_finished; /* finished ids of output/abort */
    int op_result;            /* reset_prefix_cache */
    json_t *lookup, *alloc;   /* kv_lookup / kv_allocate results */
    uint64_t futile_now;      /* futile preemptions of the current schedule */
    char err[1024];
    char kind[96];
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

/* conform_schema.c */
int conform__check_keys(struct kvsim_conform_runner *c, json_t *obj, const char *const *allowed,
                        const char *where);
int conform__tokens_parse(struct kvsim_conform_runner *c, json_t *v, kvpool_token **out, size_t *n,
                          size_t *cap, const char *where);
json_t *conform__tokens_json(struct kvsim_conform_runner *c, json_t *v, const char *where);
int conform__parse_config(struct kvsim_conform_runner *c, json_t *cfg, struct sched_config *sc,
                          struct kvsim_tiers_config *tc, bool *offload);
uint64_t conform__offload_field(const struct kvsim_tiers_stats *t,
                                const struct sched_offload_counters *k, const char *f);
int conform__validate_step(struct kvsim_conform_runner *c, json_t *st, size_t k);
/* conform_ops.c */
struct creq *conform__find_req(struct kvsim_conform_runner *c, const char *name);
struct creq *conform__need_req(struct kvsim_conform_runner *c, const char *name, const char *where);
int conform__op_add(struct kvsim_conform_runner *c, json_t *st, const char *where);
json_t *conform__ids_json(struct kvsim_conform_runner *c, struct sched_request *const *reqs,
                          size_t n);
int conform__violation_fail(struct kvsim_conform_runner *c, const char *where,
                            const struct sched_violation *v);
int conform__sched_error(struct kvsim_conform_runner *c, const char *where, int rc);
int conform__op_schedule(struct kvsim_conform_runner *c, const char *where);
int conform__op_output(struct kvsim_conform_runner *c, json_t *stj, json_t *eff, const char *where);
int conform__op_abort(struct kvsim_conform_runner *c, json_t *st, json_t *eff, const char *where);
int conform__op_kv_lookup(struct kvsim_conform_runner *c, json_t *st, const char *where);
int conform__op_kv_allocate(struct kvsim_conform_runner *c, json_t *st, const char *where);
int conform__op_advance(struct kvsim_conform_runner *c, json_t *st, const char *where);
/* conform_expect.c */
int conform__check_expect(struct kvsim_conform_runner *c, json_t *ex, const char *op, size_t k);
void conform__trace_step(struct kvsim_conform_runner *c, size_t k, const char *op);
/* conform_runner.c */
int conform__fail(struct kvsim_conform_runner *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int conform__fail_kind(struct kvsim_conform_runner *c, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* KVSIM_CONFORM_INTERNAL_H */
