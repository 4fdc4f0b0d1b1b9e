/*
 * test_replay_disagg.c - disaggregated replays on the built-in workload (docs/disagg.md): every
 * request accounted for and the same at 1 and 2 threads; a starved decode pool strands KV on
 * the prefill engines (pinned block-seconds and TTFT rise) unlike the immediate-release what-if;
 * a short abort timeout aborts handoffs with nothing leaked; the handoff event log rebuilds the
 * pins. The Mooncake router matrix is in test_replay_traces.c.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/api/api.h" /* kvsim_replay_config_default */
#include "runtime/runtime.h"

#include "common.h"

/* 2 prefill + 2 decode engines on the built-in workload, invariants checked at every boundary. */
static void disagg_config(struct kvsim_replay_config *c)
{
    kvsim_replay_config_default(c);
    c->quiet = true;
    c->sched.check_invariants = true;
    c->disagg.prefill_engines = 2;
    c->disagg.decode_engines = 2;
    c->disagg.prefill_sched = c->disagg.decode_sched = c->sched;
}

static void path_of(char *buf, size_t len, const char *tag, const char *ext)
{
    char name[256];
    int n = snprintf(name, sizeof name, "disagg-%d-%s.%s", (int)getpid(), tag, ext);
    cr_assert(n > 0 && (size_t)n < sizeof name, "the tag %s is too long", tag);
    kvsim_test_tmp_path(buf, len, name);
}

/* Runs c at threads; writes the report (wall fields dropped), records and events under tag. */
static struct kvsim_report run(const struct kvsim_replay_config *base, uint32_t threads,
                               const char *tag)
{
    char rec[256], rep[256], ev[256], err[512];
    path_of(rec, sizeof rec, tag, "jsonl");
    path_of(rep, sizeof rep, tag, "json");
    path_of(ev, sizeof ev, tag, "events");
    struct kvsim_replay_config c = *base;
    c.num_threads = threads;
    c.outputs.requests_path = rec;
    c.outputs.handoff_events_path = ev;
    struct kvsim_report r;
    int rc = kvsim_replay_run(&c, &r, err, sizeof err);
    cr_assert_eq(rc, 0, "%s: %s", tag, err);
    r.wall_ns = 0;
    r.speed = r.wall_requests_per_s = 0;
    r.num_threads = 0;
    cr_assert_eq(kvsim_report_write_json(rep, &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(r.completed + r.rejected + r.aborted + r.incomplete, r.num_requests,
                 "%s: every request accounted for", tag);
    cr_assert(r.disagg.enabled);
    cr_assert_eq(r.disagg.completed + r.disagg.aborted + r.disagg.pending, r.disagg.handoffs);
    return r;
}

static void assert_same(const char *a, const char *b, const char *ext)
{
    char pa[256], pb[256];
    path_of(pa, sizeof pa, a, ext);
    path_of(pb, sizeof pb, b, ext);
    size_t na, nb;
    char *x = kvsim_test_read_file(pa, &na), *y = kvsim_test_read_file(pb, &nb);
    cr_assert(na == nb && memcmp(x, y, na) == 0, "%s and %s differ", pa, pb);
    free(x);
    free(y);
}

static void remove_outputs(const char *tag)
{
    static const char *const exts[] = {"json", "jsonl", "events"};
    for (int i = 0; i < 3; i++) {
        char p[256];
        path_of(p, sizeof p, tag, exts[i]);
        unlink(p);
    }
}

Test(disagg, every_request_completes_and_threads_change_nothing, .timeout = 300)
{
    struct kvsim_replay_config c;
    disagg_config(&c);
    /* Pools of 6000 blocks: ample for the workload, and the invariant check at every boundary
     * walks fewer blocks. */
    c.disagg.prefill_sched.num_blocks = c.disagg.decode_sched.num_blocks = 6000;
    struct kvsim_report a = run(&c, 1, "t1"), b = run(&c, 2, "t2");
    cr_assert_eq(a.completed, a.num_requests, "an ample decode pool serves everything");
    cr_assert_eq(a.disagg.handoffs, a.num_requests);
    cr_assert_eq(a.disagg.completed, a.num_requests);
    cr_assert_eq(a.disagg.prefill_engines, 2);
    cr_assert_gt(a.disagg.transferred_bytes, 0);
    cr_assert_gt(a.disagg.pin.count, 0);
    cr_assert_gt(a.disagg.epochs, 0);
    static const char *const exts[] = {"json", "jsonl", "events"};
    for (int i = 0; i < 3; i++)
        assert_same("t1", "t2", exts[i]);
    (void)b;
    kvsim_report_fini(&a);
    kvsim_report_fini(&b);
    remove_outputs("t1");
    remove_outputs("t2");
}

/* A decode pool short of blocks and sequence slots keeps completed prefills pinned: the
 * prefill pools fill with stranded KV (up to their whole capacity) and TTFT rises. Freeing the
 * source at the prefill's end (the unfaithful what-if) strands nothing, and the runs differ:
 * with pins the prefill engines also wait for capacity. */
Test(disagg, a_starved_decode_pool_strands_kv_unlike_immediate_release, .timeout = 300)
{
    struct kvsim_replay_config ample, starved, immediate;
    disagg_config(&ample);
    ample.sched.check_invariants = false; /* speed: the other tests check */
    ample.disagg.prefill_sched.check_invariants = ample.disagg.decode_sched.check_invariants = 0;
    ample.disagg.prefill_sched.num_blocks = 4000; /* small enough for pins to fill it */
    starved = ample;
    starved.disagg.decode_sched.num_blocks = 2500;
    starved.disagg.decode_sched.max_num_seqs = 8;
    immediate = starved;
    immediate.disagg.release_immediately = true;
    struct kvsim_report ra = run(&ample, 2, "ample"), rs = run(&starved, 2, "starved"),
                        ri = run(&immediate, 2, "immediate");
    cr_assert_gt(rs.disagg.pinned_block_seconds, 2 * ra.disagg.pinned_block_seconds,
                 "starved %.1f vs ample %.1f block-s", rs.disagg.pinned_block_seconds,
                 ra.disagg.pinned_block_seconds);
    cr_assert_gt(rs.disagg.peak_pinned_blocks, ra.disagg.peak_pinned_blocks);
    cr_assert_gt(rs.ttft.p50, ra.ttft.p50, "TTFT rises: %.0f vs %.0f ns", rs.ttft.p50, ra.ttft.p50);
    cr_assert_gt(rs.disagg.decode_wait.p50, ra.disagg.decode_wait.p50,
                 "the pin tracks the decode admission");
    cr_assert_eq(ri.disagg.pinned_block_seconds, 0.0, "immediate release strands nothing");
    cr_assert_eq(ri.disagg.peak_pinned_blocks, 0);
    cr_assert(ri.ttft.p50 != rs.ttft.p50 || ri.ttft.p99 != rs.ttft.p99,
              "stranding must change the run");
    kvsim_report_fini(&ra);
    kvsim_report_fini(&rs);
    kvsim_report_fini(&ri);
    remove_outputs("ample");
    remove_outputs("starved");
    remove_outputs("immediate");
}

/* A short abort timeout on a starved decode pool: handoffs abort (their requests are reported
 * aborted), every request is accounted for, and the invariant checks at every boundary (pins,
 * reservations, the ownership of every block) find nothing left behind. */
Test(disagg, a_short_abort_timeout_aborts_handoffs_cleanly, .timeout = 300)
{
    struct kvsim_replay_config c;
    disagg_config(&c);
    c.disagg.decode_sched.num_blocks = 2500;
    c.disagg.decode_sched.max_num_seqs = 8;
    c.disagg.decode_sched.check_invariants = c.disagg.prefill_sched.check_invariants = true;
    c.disagg.abort_timeout_ns = 300 * 1000000LL;
    struct kvsim_report r = run(&c, 2, "abort");
    cr_assert_gt(r.disagg.aborted, 0, "pins expired");
    cr_assert_eq(r.aborted, r.disagg.aborted, "each aborted handoff is an aborted request");
    cr_assert_eq(r.disagg.pending, 0, "nothing under way at the end");
    cr_assert_eq(r.completed + r.aborted, r.num_requests);
    cr_assert_geq(r.disagg.pin.max, 300e6, "a pin lasts until its deadline");
    cr_assert_lt(r.disagg.pin.max, 300e6 + 1e9, "and ends at the step after it");
    /* The records say the same. */
    char rec[256];
    path_of(rec, sizeof rec, "abort", "jsonl");
    char *text = kvsim_test_read_file(rec, NULL);
    uint64_t aborted = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        cr_assert_not_null(o, "%s", je.text);
        const char *h = json_string_value(json_object_get(o, "handoff"));
        const char *st = json_string_value(json_object_get(o, "status"));
        cr_assert_not_null(h);
        if (!strcmp(h, "aborted")) {
            aborted++;
            cr_assert_str_eq(st, "aborted");
            cr_assert(json_is_null(json_object_get(o, "transfer_ms")));
        }
        json_decref(o);
    }
    free(text);
    cr_assert_eq(aborted, r.aborted);
    kvsim_report_fini(&r);
    remove_outputs("abort");
}

/* The event log alone rebuilds the stranding: every pin has a start and one end whose duration
 * is end - start, and the pins' total equals the report's. */
/* Each handoff's events in lifecycle order; a completed source is released exactly when its
 * transfer ends (never at its start), so a pin lasts at least its transfer. */
enum { EV_PIN, EV_WAIT, EV_RESERVED, EV_XSTART, EV_XEND, EV_PIN_END, EV_KINDS };

static int event_kind(const char *name)
{
    static const char *const names[EV_KINDS] = {"prefill_kv_pin_start", "decode_kv_wait_start",
                                                "destination_reserved", "transfer_start",
                                                "transfer_end",         "prefill_kv_pin_end"};
    for (int k = 0; k < EV_KINDS; k++)
        if (!strcmp(name, names[k]))
            return k;
    cr_assert_fail("unknown event '%s'", name);
    return -1;
}

Test(disagg, the_event_log_rebuilds_every_pin, .timeout = 300)
{
    struct kvsim_replay_config c;
    disagg_config(&c);
    c.disagg.prefill_sched.num_blocks = c.disagg.decode_sched.num_blocks = 6000; /* see above */
    c.disagg.decode_sched.max_num_seqs = 16;
    struct kvsim_report r = run(&c, 2, "events");
    char ev[256];
    path_of(ev, sizeof ev, "events", "events");
    char *text = kvsim_test_read_file(ev, NULL);
    size_t R = r.num_requests;
    double(*at)[EV_KINDS] = calloc(R + 1, sizeof *at);
    double *blocks = calloc(R + 1, sizeof *blocks);
    double total = 0, block_ms = 0, last_t = -1, pin_minus_xfer_min = INFINITY;
    uint64_t starts = 0, ends = 0, completed = 0;
    for (size_t h = 0; h <= R; h++)
        for (int k = 0; k < EV_KINDS; k++)
            at[h][k] = -1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        cr_assert_not_null(o, "%s", je.text);
        int k = event_kind(json_string_value(json_object_get(o, "event")));
        double t = json_real_value(json_object_get(o, "t_ms"));
        json_int_t h = json_integer_value(json_object_get(o, "handoff"));
        cr_assert_geq(t, last_t, "the log is in time order");
        last_t = t;
        cr_assert(h >= 1 && (size_t)h <= R);
        cr_assert_lt(at[h][k], 0, "handoff %lld: one %s event", (long long)h, line);
        for (int j = k + 1; j < EV_KINDS; j++)
            cr_assert_lt(at[h][j], 0, "handoff %lld: %s after a later lifecycle event",
                         (long long)h, line);
        at[h][k] = t;
        if (k == EV_PIN) {
            blocks[h] = (double)json_integer_value(json_object_get(o, "blocks"));
            starts++;
        } else if (k == EV_PIN_END) {
            double d = json_real_value(json_object_get(o, "duration_ms"));
            cr_assert(fabs(d - (t - at[h][EV_PIN])) < 1e-6, "duration = end - start");
            total += d;
            block_ms += d * blocks[h];
            ends++;
            const char *outcome = json_string_value(json_object_get(o, "outcome"));
            if (!strcmp(outcome, "completed") && blocks[h] == 0) {
                completed++; /* nothing pinned: nothing to transfer */
                cr_assert_lt(at[h][EV_XSTART], 0, "handoff %lld moved nothing", (long long)h);
            } else if (!strcmp(outcome, "completed")) {
                completed++;
                cr_assert_geq(at[h][EV_XEND], 0, "handoff %lld completed without a transfer",
                              (long long)h);
                cr_assert_eq(t, at[h][EV_XEND],
                             "handoff %lld: source released at %f, its "
                             "transfer ended at %f",
                             (long long)h, t, at[h][EV_XEND]);
                double margin = d - (at[h][EV_XEND] - at[h][EV_XSTART]);
                if (margin < pin_minus_xfer_min)
                    pin_minus_xfer_min = margin;
            }
        }
        json_decref(o);
    }
    free(text);
    free(at);
    free(blocks);
    cr_assert_eq(starts, r.disagg.handoffs);
    cr_assert_eq(ends, r.disagg.completed + r.disagg.aborted);
    cr_assert_eq(completed, r.disagg.completed);
    cr_assert_geq(pin_minus_xfer_min, -1e-6, "a pin lasts at least its transfer");
    cr_assert(fabs(total * 1e6 - r.disagg.pin.mean * (double)r.disagg.pin.count) <
                  1e-3 * total * 1e6 + 1.0,
              "the log's pins add up to the report's");
    /* The engines count a block once even when two pins share it (a prefix hit), so the log's
     * per-pin block-seconds bound the report's from above, and stranding makes it positive. */
    cr_assert_gt(r.disagg.pinned_block_seconds, 0);
    cr_assert_leq(r.disagg.pinned_block_seconds, block_ms / 1e3 * (1 + 1e-9) + 1e-6,
                  "pinned block-seconds %f above the log's %f", r.disagg.pinned_block_seconds,
                  block_ms / 1e3);
    kvsim_report_fini(&r);
    remove_outputs("events");
}

/* Requests the decode pool could never serve are refused up front (their KV would only be
 * stranded), with reasons naming the decode side. */
Test(disagg, what_the_decode_pool_cannot_serve_is_refused_at_the_prefill)
{
    struct kvsim_replay_config c;
    disagg_config(&c);
    c.disagg.decode_sched.max_model_len = 1500;
    struct kvsim_report r = run(&c, 2, "refuse");
    cr_assert_gt(r.rejected, 0);
    bool named = false;
    for (uint32_t i = 0; i < r.num_reject_reasons; i++)
        named |= !strncmp(r.rejects[i].reason, "decode_", 7);
    cr_assert(named, "a reject reason names the decode pool");
    cr_assert_eq(r.disagg.handoffs + r.rejected, r.num_requests);
    kvsim_report_fini(&r);
    remove_outputs("refuse");
}

/* A prompt shorter than a block pins nothing (vLLM frees it at once and sends no block ids):
 * its handoff completes at the prefill's end with nothing moved and the decode engine computes
 * the prompt; a longer one next to it pins and transfers as usual. */
Test(disagg, a_prompt_shorter_than_a_block_pins_and_moves_nothing)
{
    char trace[256], rec[256], ev[256];
    path_of(trace, sizeof trace, "short", "trace.jsonl");
    FILE *f = fopen(trace, "w");
    cr_assert_not_null(f);
    fputs("{\"timestamp\":0,\"input_length\":8,\"output_length\":4,\"hash_ids\":[1]}\n"
          "{\"timestamp\":0,\"input_length\":600,\"output_length\":4,\"hash_ids\":[2,3]}\n",
          f);
    cr_assert_eq(fclose(f), 0);
    struct kvsim_replay_config c;
    disagg_config(&c);
    c.trace_path = trace;
    struct kvsim_report r = run(&c, 1, "short");
    cr_assert_eq(r.completed, 2);
    cr_assert_eq(r.disagg.completed, 2);
    cr_assert_eq(r.disagg.transfer.count, 1, "only the long prompt moves");
    cr_assert_eq(r.disagg.transferred_tokens, 600);
    path_of(rec, sizeof rec, "short", "jsonl");
    char *text = kvsim_test_read_file(rec, NULL);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        cr_assert_not_null(o, "%s", je.text);
        json_int_t id = json_integer_value(json_object_get(o, "id"));
        cr_assert_str_eq(json_string_value(json_object_get(o, "handoff")), "completed");
        double pin = json_real_value(json_object_get(o, "pin_ms"));
        json_t *xfer = json_object_get(o, "transfer_ms");
        if (id == 0) {
            cr_assert_eq(pin, 0.0, "nothing pinned");
            cr_assert(json_is_null(xfer), "nothing transferred");
        } else {
            cr_assert_gt(json_real_value(xfer), 0.0);
            cr_assert_geq(pin, json_real_value(xfer));
        }
        json_decref(o);
    }
    free(text);
    path_of(ev, sizeof ev, "short", "events");
    text = kvsim_test_read_file(ev, NULL);
    uint32_t short_events = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o);
        if (json_integer_value(json_object_get(o, "request")) == 0) {
            const char *name = json_string_value(json_object_get(o, "event"));
            cr_assert(!strcmp(name, "prefill_kv_pin_start") || !strcmp(name, "prefill_kv_pin_end"),
                      "request 0 logged %s", name);
            if (!strcmp(name, "prefill_kv_pin_start"))
                cr_assert_eq(json_integer_value(json_object_get(o, "blocks")), 0);
            short_events++;
        }
        json_decref(o);
    }
    free(text);
    cr_assert_eq(short_events, 2);
    kvsim_report_fini(&r);
    remove_outputs("short");
    unlink(trace);
}

/* A slow link queues transfers behind each other, and a 1 ms abort timeout fires while some are
 * still waiting for it: the handoff is aborted before its transfer starts (the event log has no
 * transfer_start for it), and every request is still accounted for. */
Test(disagg, an_abort_while_a_transfer_waits_for_the_link, .timeout = 300)
{
    struct kvsim_replay_config c;
    disagg_config(&c);
    c.disagg.prefill_engines = c.disagg.decode_engines = 1;
    c.disagg.transfer.gbps = 0.05;
    c.disagg.abort_timeout_ns = 1000000;
    c.trace_opts.max_requests = 200;
    struct kvsim_report r = run(&c, 1, "queued");
    cr_assert_gt(r.aborted, 0);
    cr_assert_eq(r.disagg.aborted, r.aborted);
    char ev[256];
    path_of(ev, sizeof ev, "queued", "events");
    char *text = kvsim_test_read_file(ev, NULL);
    size_t R = r.num_requests;
    double *started = calloc(R + 1, sizeof *started), *reserved = calloc(R + 1, sizeof *reserved);
    bool queued_abort = false;
    for (size_t i = 0; i <= R; i++)
        started[i] = reserved[i] = -1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o);
        const char *name = json_string_value(json_object_get(o, "event"));
        json_int_t h = json_integer_value(json_object_get(o, "handoff"));
        double t = json_real_value(json_object_get(o, "t_ms"));
        if (!strcmp(name, "transfer_start"))
            started[h] = t;
        if (!strcmp(name, "destination_reserved"))
            reserved[h] = t;
        if (!strcmp(name, "prefill_kv_pin_end")) {
            cr_assert(started[h] < 0 || started[h] <= t, "handoff %lld: started after its end",
                      (long long)h);
            const char *outcome = json_string_value(json_object_get(o, "outcome"));
            queued_abort |= !strcmp(outcome, "aborted") && reserved[h] >= 0 && started[h] < 0;
        }
        json_decref(o);
    }
    free(text);
    free(started);
    free(reserved);
    cr_assert(queued_abort, "some handoff was aborted after its reservation, before its transfer "
                            "started");
    kvsim_report_fini(&r);
    remove_outputs("queued");
}

/* Every session turn arrives exactly its think time after the previous turn finished (or was
 * aborted), and nothing is left incomplete: the lookahead must see what the coordinator posts
 * after the decode phase (an idle decode engine woken by an activation) and a turn that an abort
 * ends without a step. Checked over the built-in workload's sessions in configurations that
 * broke it: a decode pool so small that activations gate its reservations, slow transfers with
 * no timeout, and short timeouts behind a long latency. */
static void assert_turns_on_time(const struct kvsim_replay_config *c, const char *tag)
{
    struct kvsim_report r = run(c, 2, tag);
    cr_assert_eq(r.incomplete, 0, "%s: no turn left behind", tag);
    struct kvsim_synth_opts so = c->synth;
    so.seed = c->seed;
    struct kvsim_trace t;
    char err[256];
    cr_assert_eq(kvsim_workload_synthetic(&so, &t, err, sizeof err), 0, "%s", err);
    char rec[256];
    path_of(rec, sizeof rec, tag, "jsonl");
    char *text = kvsim_test_read_file(rec, NULL);
    double *arrival = calloc(t.num_reqs, sizeof *arrival),
           *finish = calloc(t.num_reqs, sizeof *finish);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o);
        json_int_t id = json_integer_value(json_object_get(o, "id"));
        cr_assert(id >= 0 && (size_t)id < t.num_reqs);
        arrival[id] = json_real_value(json_object_get(o, "arrival_ms"));
        finish[id] = json_real_value(json_object_get(o, "finish_ms"));
        json_decref(o);
    }
    size_t turns = 0;
    for (size_t i = 0; i < t.num_reqs; i++) {
        int32_t p = t.reqs[i].prev_turn;
        if (p < 0)
            continue;
        double due = finish[p] + (double)t.reqs[i].delay_ns / 1e6;
        cr_assert(fabs(arrival[i] - due) < 1e-5, "%s: request %zu arrived at %.6f ms, due at %.6f",
                  tag, i, arrival[i], due);
        turns++;
    }
    cr_assert_gt(turns, 0);
    free(text);
    free(arrival);
    free(finish);
    kvsim_trace_free(&t);
    kvsim_report_fini(&r);
    remove_outputs(tag);
}

/* 100 of the workload's sessions, invariants checked. */
static void turns_config(struct kvsim_replay_config *c)
{
    disagg_config(c);
    c->synth.num_sessions = 100;
    c->disagg.prefill_engines = c->disagg.decode_engines = 1;
}

Test(disagg, session_turns_arrive_exactly_when_due_small_decode_pool, .timeout = 300)
{
    struct kvsim_replay_config c;
    turns_config(&c);
    c.disagg.decode_sched.num_blocks = 200;
    assert_turns_on_time(&c, "turns-small-decode");
}

Test(disagg, session_turns_arrive_exactly_when_due_slow_link, .timeout = 300)
{
    struct kvsim_replay_config c;
    turns_config(&c);
    /* 2 s transfers stretch the run over many more boundaries, each with an invariant check
     * that walks the pools: pools of 3000 blocks keep the check and the test short. */
    c.disagg.prefill_sched.num_blocks = c.disagg.decode_sched.num_blocks = 3000;
    c.disagg.transfer.latency_ns = INT64_C(2000000000);
    c.disagg.abort_timeout_ns = 0;
    assert_turns_on_time(&c, "turns-slow-link");
}

Test(disagg, session_turns_arrive_exactly_when_due_with_aborts, .timeout = 300)
{
    struct kvsim_replay_config c;
    turns_config(&c);
    c.disagg.decode_sched.num_blocks = 200;
    c.disagg.abort_timeout_ns = INT64_C(100000000);
    c.disagg.transfer.latency_ns = INT64_C(50000000);
    assert_turns_on_time(&c, "turns-aborts");
}
