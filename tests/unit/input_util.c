/*
 * input_util.c - the helpers of input_util.h.
 */
#include "input_util.h"

#include <criterion/criterion.h>

#include <stddef.h>

void input_load_ok(const char *path, const struct kvsim_trace_opts *opts, struct kvsim_trace *t)
{
    char err[512] = "unset";
    int rc = kvsim_trace_load(path, opts, t, err, sizeof err);
    cr_assert_eq(rc, 0, "loading %s failed (%d): %s", path, rc, err);
    cr_assert_str_empty(err, "err must be empty on success, is '%s'", err);
}

void input_check_invariants(const struct kvsim_trace *t)
{
    cr_assert_gt(t->num_reqs, 0);
    cr_assert_eq(t->reqs[0].arrival_ns, 0, "the first arrival must be 0");
    size_t clamped = 0;
    for (size_t i = 0; i < t->num_reqs; i++) {
        const struct kvsim_req_spec *r = &t->reqs[i];
        if (i > 0) {
            const struct kvsim_req_spec *p = &t->reqs[i - 1];
            cr_assert(p->arrival_ns < r->arrival_ns ||
                          (p->arrival_ns == r->arrival_ns && p->line <= r->line),
                      "reqs[%zu] out of order", i);
        }
        cr_assert_geq(r->input_len, 1);
        cr_assert_geq(r->output_len, 1);
        clamped += r->clamped;
        if (r->num_hashes) {
            cr_assert_gt(t->block_size, 0);
            cr_assert_eq(r->num_hashes, (r->input_len + t->block_size - 1) / t->block_size,
                         "reqs[%zu]: %u hashes for %u tokens", i, r->num_hashes, r->input_len);
            cr_assert_leq((size_t)r->hash_off + r->num_hashes, t->num_hash_ids);
        }
        if (r->session < 0) {
            cr_assert_eq(r->prev_turn, -1);
            cr_assert_eq(r->delay_ns, 0);
        } else {
            cr_assert_lt((uint32_t)r->session, t->num_sessions);
        }
        if (r->prev_turn >= 0) {
            cr_assert_lt((size_t)r->prev_turn, i, "reqs[%zu]: previous turn sorts later", i);
            const struct kvsim_req_spec *p = &t->reqs[r->prev_turn];
            cr_assert_eq(p->session, r->session);
            cr_assert_geq(r->delay_ns, 0);
            cr_assert_eq(r->arrival_ns, p->arrival_ns + r->delay_ns);
        } else {
            cr_assert_eq(r->delay_ns, 0, "reqs[%zu]: a first turn has no delay", i);
        }
    }
    cr_assert_eq(clamped, t->num_clamped);
}
