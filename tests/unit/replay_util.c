/*
 * replay_util.c - the helpers of replay_util.h.
 */
#include "replay_util.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

void replay_output_path(char *buf, size_t len, const char *tag, const char *ext)
{
    char name[256];
    int n = snprintf(name, sizeof name, "replay-%d-%s.%s", (int)getpid(), tag, ext);
    cr_assert(n > 0 && (size_t)n < sizeof name, "the tag %s is too long", tag);
    kvsim_test_tmp_path(buf, len, name);
}

void replay_remove_outputs(const char *tag)
{
    char path[256];
    replay_output_path(path, sizeof path, tag, "json");
    unlink(path);
    replay_output_path(path, sizeof path, tag, "jsonl");
    unlink(path);
}

struct kvsim_report replay_run(const struct kvsim_replay_config *base, uint32_t threads,
                               const char *tag)
{
    char req_path[256], rep_path[256], err[512];
    replay_output_path(req_path, sizeof req_path, tag, "jsonl");
    replay_output_path(rep_path, sizeof rep_path, tag, "json");
    struct kvsim_replay_config cfg = *base;
    cfg.num_threads = threads;
    cfg.quiet = true;
    cfg.outputs.requests_path = req_path;
    struct kvsim_report r;
    int rc = kvsim_replay_run(&cfg, &r, err, sizeof err);
    cr_assert_eq(rc, 0, "replay %s failed: %s", tag, err);
    r.wall_ns = 0;
    r.speed = 0;
    r.wall_requests_per_s = 0;
    r.num_threads = 0;
    struct kvsim_report w = r; /* a shallow copy without the accounting (CPU times) */
    w.accounting.enabled = false;
    /* how many decode steps the fast path computed in bulk: under "wall", how the run went (it
     * depends on where the epochs end), not what it found */
    w.timing.fast_path_steps = 0;
    w.epochs = w.arrivals_routed_ahead = 0; /* how the run went too (windows, phases) */
    cr_assert_eq(kvsim_report_write_json(rep_path, &w, err, sizeof err), 0, "%s", err);
    return r;
}

void replay_assert_same_files(const char *tag_a, const char *tag_b, const char *ext)
{
    char a[256], b[256];
    replay_output_path(a, sizeof a, tag_a, ext);
    replay_output_path(b, sizeof b, tag_b, ext);
    size_t na, nb;
    char *x = kvsim_test_read_file(a, &na), *y = kvsim_test_read_file(b, &nb);
    cr_assert(na == nb && memcmp(x, y, na) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
    unlink(a);
    unlink(b);
}

void replay_assert_same_as(const char *const *tags, int n, const char *ref)
{
    for (int i = 0; i < n; i++) {
        /* replay_assert_same_files deletes both: keep a copy of the reference run for the
         * next one */
        char from[256], to[256], cmd[600];
        for (int k = 0; k < 2; k++) {
            const char *ext = k ? "jsonl" : "json";
            replay_output_path(from, sizeof from, ref, ext);
            replay_output_path(to, sizeof to, "ref", ext);
            snprintf(cmd, sizeof cmd, "cp %s %s", from, to);
            cr_assert_eq(system(cmd), 0, "%s", cmd);
        }
        replay_assert_same_files("ref", tags[i], "json");
        replay_assert_same_files("ref", tags[i], "jsonl");
    }
    replay_assert_same_files(ref, ref, "json");
    replay_assert_same_files(ref, ref, "jsonl");
}

void replay_base_config(struct kvsim_replay_config *c, const char *trace)
{
    kvsim_replay_config_default(c);
    c->trace_path = trace;
    c->num_engines = 8;
#ifdef KVSIM_SANITIZED
    c->trace_opts.max_requests = 1500; /* sanitizers are 5-20x slower: a prefix of each trace */
#endif
}

void replay_offload_config(struct kvsim_replay_config *c, const char *trace)
{
    replay_base_config(c, trace);
    c->sched.num_blocks = 1200;
    c->offload = true;
    c->tiers.g2_blocks = 3000;
    c->tiers.g3_blocks = 20000;
    c->tiers.pipe.fail_rate = 0.02;
    c->tiers.pipe.lanes[OFFLOAD_LANE_G1_G2].bandwidth = 2000000000;
}

void replay_check_offload_deterministic(const char *trace)
{
    struct kvsim_replay_config c;
    replay_offload_config(&c, trace);
    struct kvsim_report r = replay_run(&c, 1, "inline1");
    replay_run(&c, 2, "inline2");
    c.offload_pool = true;
    c.offload_threads = 2;
    replay_run(&c, 1, "pool1");
    replay_run(&c, 2, "pool2");
    cr_assert_eq(r.completed + r.rejected, r.num_requests,
                 "every request completes or is rejected");
    cr_assert(r.offload.enabled, "the report has an offload section");
    cr_assert_gt(r.offload.lanes[0].blocks, 0, "G1->G2 traffic");
    cr_assert_gt(r.offload.lanes[3].blocks, 0, "G2->G1 traffic");
    cr_assert_gt(r.offload.g2_hit_blocks, 0, "G2 hits");
    cr_assert_gt(r.offload.onboarded_tokens, 0, "tokens onboarded instead of recomputed");
    cr_assert_gt(r.offload.failed_blocks, 0, "failures were injected");
    static const char *const tags[] = {"inline2", "pool1", "pool2"};
    replay_assert_same_as(tags, 3, "inline1");
}
