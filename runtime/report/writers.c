/*
 * writers.c - the report's forms: the terminal table, the JSON report, the per-request JSONL
 * records and the time series CSV.
 */
#include "runtime/report/report_internal.h"
#include "kvpool/base.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ---- the terminal table ------------------------------------------------------------------------
 */

static const char *or_dash(const char *s) { return s[0] != '\0' ? s : "-"; }

static void print_latency_row(FILE *f, const char *name, const struct kvsim_latency *l)
{
    fprintf(f, "  %-6s %10" PRIu64, name, l->count);
    if (l->count == 0) {
        fprintf(f, "%11s%11s%11s%11s%11s%11s%11s\n", "-", "-", "-", "-", "-", "-", "-");
        return;
    }
    const double v[] = {l->mean, l->min, l->p50, l->p90, l->p95, l->p99, l->max};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        fprintf(f, "%11.3f", v[i] / 1e6);
    fputc('\n', f);
}

#define ROW "  %-24s "

static const char *ts_role_name(uint8_t role)
{
    return role == KVSIM_TS_PREFILL ? "prefill" : role == KVSIM_TS_DECODE ? "decode" : "aggregated";
}

/* The engines of one role summed into *sum (mean KV usage weighted by busy time, the peak the
 * largest). Returns how many there are. */
static uint32_t pool_sum(const struct kvsim_report *r, uint8_t role,
                         struct kvsim_engine_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    sum->role = role;
    uint32_t n = 0;
    double kv_busy = 0;
    for (uint32_t e = 0; e < r->num_per_engine; e++) {
        const struct kvsim_engine_summary *s = &r->per_engine[e];
        if (s->role != role)
            continue;
        n++;
        sum->completed += s->completed;
        sum->input_tokens += s->input_tokens;
        sum->output_tokens += s->output_tokens;
        sum->cached_tokens += s->cached_tokens;
        sum->rejected += s->rejected;
        sum->preemptions += s->preemptions;
        sum->steps += s->steps;
        sum->busy_s += s->busy_s;
        kv_busy += s->mean_kv_usage * s->busy_s;
        if (s->peak_kv_usage > sum->peak_kv_usage)
            sum->peak_kv_usage = s->peak_kv_usage;
    }
    sum->mean_kv_usage = sum->busy_s > 0 ? kv_busy / sum->busy_s : 0.0;
    return n;
}

void kvsim_report_print(FILE *f, const struct kvsim_report *r)
{
    fprintf(f, "kvsim replay report\n");
    fprintf(f, ROW "%s\n", "version", "kvsim " KVSIM_VERSION_STRING);
    fprintf(f, ROW "%s\n", "trace", or_dash(r->trace));
    if (r->trace_sha256[0])
        fprintf(f, ROW "%s\n", "  sha256", r->trace_sha256);
    fprintf(f, ROW "%s", "router", or_dash(r->router));
    if (r->router_view_delayed)
        fprintf(f, " (delayed view: %g ms after a step's end", r->kv_event_delay_ms);
    if (r->predict_ttl_s > 0)
        fprintf(f, "%spredict-on-route %g s", r->router_view_delayed ? "; " : " (",
                r->predict_ttl_s);
    fprintf(f, "%s\n", r->has_router_view ? ")" : "");
    if (r->data_parallel_size > 1)
        fprintf(f,
                ROW "%" PRIu32 " engines (%" PRIu32 " x data parallel %" PRIu32
                    ", vLLM's DP load balancer%s), %" PRIu32 " threads\n",
                "topology", r->num_engines, r->num_engines / r->data_parallel_size,
                r->data_parallel_size, r->timing.lockstep ? ", ranks in lockstep" : "",
                r->num_threads);
    else
        fprintf(f, ROW "%" PRIu32 " engines, %" PRIu32 " threads\n", "topology", r->num_engines,
                r->num_threads);
    fprintf(f, ROW "%" PRIu64 " (%" PRIu32 " engines x tensor parallel %" PRIu32 ")\n", "GPUs",
            r->gpus, r->num_engines, r->tensor_parallel_size);
    fprintf(f, ROW "%" PRIu64 "\n", "seed", r->seed);
    if (r->vllm_contract)
        fprintf(f, ROW "%" PRIu32 " (docs/fidelity/vllm.md)\n", "vllm contract", r->vllm_contract);
    if (!r->complete)
        fprintf(f, ROW "%s at %.3f s of simulated time: this report is partial\n", "ended early",
                strcmp(r->end_reason, "interrupted") == 0 ? "interrupted" : "--max-sim-time-s",
                (double)r->end_ns / 1e9);

    fprintf(f, "\n" ROW "%" PRIu64 "\n", "requests", r->num_requests);
    fprintf(f, ROW "%" PRIu64 "\n", "  arrived", r->arrived);
    fprintf(f, ROW "%" PRIu64 "\n", "  completed", r->completed);
    fprintf(f, ROW "%" PRIu64 "\n", "  rejected", r->rejected);
    for (uint32_t i = 0; i < r->num_reject_reasons; i++)
        fprintf(f, "      %-20s %" PRIu64 "\n", r->rejects[i].reason, r->rejects[i].count);
    if (r->disagg.enabled)
        fprintf(f, ROW "%" PRIu64 "\n", "  aborted", r->aborted);
    fprintf(f, ROW "%" PRIu64 "\n", "  incomplete", r->incomplete);
    if (r->incomplete > 0) {
        fprintf(f, ROW "%" PRIu64 " (arrived, unfinished at the end)\n", "    cut off", r->cut_off);
        fprintf(f, ROW "%" PRIu64 " (after the end)\n", "    not arrived",
                r->incomplete - r->cut_off);
    }
    fprintf(f, ROW "%" PRIu64 "\n", "  peak in flight", r->peak_in_flight);
    fprintf(f, ROW "%" PRIu64 "\n", "preemptions", r->preemptions);

    fprintf(f, "\n" ROW "%" PRIu64 "\n", "input tokens", r->input_tokens);
    fprintf(f, ROW "%" PRIu64 "\n", "output tokens", r->output_tokens);
    fprintf(f, ROW "%.2f %% (%" PRIu64 " cached tokens)\n", "prefix-cache reuse",
            r->prefix_cache_reuse * 100.0, r->cached_tokens);
    if (r->has_unbounded_reuse)
        fprintf(f, ROW "%.2f %% (an unbounded cache shared by every engine)\n", "  possible",
                r->prefix_cache_reuse_unbounded * 100.0);

    const struct kvsim_timing_summary *tm = &r->timing;
    if (!strcmp(tm->step_model, "profile")) {
        fprintf(f, "\n" ROW "profile %s on %s, tp %" PRIu32 " (%s)\n", "step model", tm->model,
                tm->hardware, tm->tp, tm->profile);
        fprintf(f,
                ROW "%" PRIu64 " of %" PRIu64 " (%.2f %%; tokens %" PRIu64 ", sequences %" PRIu64
                    ", attention %" PRIu64 ")\n",
                "steps off the grid", tm->steps_outside, tm->steps,
                tm->steps ? 100.0 * (double)tm->steps_outside / (double)tm->steps : 0.0,
                tm->outside_tokens, tm->outside_sequences, tm->outside_attention);
    } else {
        fprintf(f, "\n" ROW "%s, %" PRIu64 " steps\n", "step model",
                tm->step_model[0] ? tm->step_model : "polynomial", tm->steps);
    }
    if (!strcmp(tm->kv_capacity, "default_tokens"))
        fprintf(f,
                ROW "%" PRIu64 " per engine (%" PRIu64
                    " tokens: the default capacity, the same tokens at any --block-size)\n",
                "KV blocks", tm->num_gpu_blocks, tm->kv_capacity_tokens);
    else if (tm->kv_capacity[0])
        fprintf(f, ROW "%" PRIu64 " per engine (%" PRIu64 " tokens, %s)\n", "KV blocks",
                tm->num_gpu_blocks, tm->kv_capacity_tokens,
                strcmp(tm->kv_capacity, "gpu_memory") ? "as given" : "from --gpu-memory-gib");
    else
        fprintf(f, ROW "%" PRIu64 " per engine\n", "KV blocks", tm->num_gpu_blocks);

    fprintf(f, "\n" ROW "%.6f s\n", "simulated duration", (double)r->duration_ns / 1e9);
    fprintf(f, ROW "%.3f\n", "requests/s", r->requests_per_s);
    fprintf(f, ROW "%.1f\n", "input tokens/s", r->input_tokens_per_s);
    fprintf(f, ROW "%.1f\n", "output tokens/s", r->output_tokens_per_s);
    fprintf(f, ROW "%.1f\n", "total tokens/s", r->total_tokens_per_s);
    if (r->slo.enabled) {
        const struct kvsim_slo_summary *s = &r->slo;
        if (r->arrived == r->num_requests)
            fprintf(f, "\n" ROW "%.2f %% of %" PRIu64 " requests within every SLO\n",
                    "SLO attainment", s->attainment_all, r->arrived);
        else /* ended early: the requests it never saw are not scored */
            fprintf(f,
                    "\n" ROW "%.2f %% of the %" PRIu64 " requests that arrived within every SLO "
                    "(%" PRIu64 " cut off at the end count as misses)\n",
                    "SLO attainment", s->attainment_all, r->arrived, r->cut_off);
        const struct {
            const char *name;
            int64_t ns;
            double pct;
        } k[] = {{"  TTFT <= %.3f ms", s->slo.ttft_ns, s->attainment_ttft},
                 {"  ITL <= %.3f ms", s->slo.itl_ns, s->attainment_itl},
                 {"  E2E <= %.3f ms", s->slo.e2e_ns, s->attainment_e2e}};
        for (size_t i = 0; i < 3; i++)
            if (k[i].ns > 0) {
                char label[64];
                snprintf(label, sizeof label, k[i].name, (double)k[i].ns / 1e6);
                fprintf(f, ROW "%.2f %%\n", label, k[i].pct);
            }
        fprintf(f, ROW "%.2f req/s, %.1f output tokens/s (%" PRIu64 " good requests)\n", "goodput",
                s->goodput_requests_per_s, s->goodput_output_tokens_per_s, s->good);
    }
    if (r->wall_ns > 0) {
        fprintf(f, ROW "%.3f s\n", "wall time", (double)r->wall_ns / 1e9);
        fprintf(f, ROW "%.1fx (simulated s per wall s)\n", "speed", r->speed);
        fprintf(f, ROW "%.1f\n", "requests per wall s", r->wall_requests_per_s);
        if (r->timing.steps)
            fprintf(f, ROW "%.1f %% of the steps (decode batches advanced in bulk)\n",
                    "decode fast path",
                    100.0 * (double)r->timing.fast_path_steps / (double)r->timing.steps);
    } else {
        fprintf(f, ROW "n/a\n", "wall time");
    }

    const struct kvsim_offload_summary *o = &r->offload;
    if (o->enabled) {
        static const char *const lane[4] = {"G1->G2", "G2->G3", "G3->G2", "G2->G1"};
        fprintf(f, "\n  offload %-16s %12s %12s %14s %8s\n", "lane", "batches", "blocks", "bytes",
                "failed");
        for (int l = 0; l < KVSIM_REPORT_NUM_LANES; l++) {
            char bytes[32]; /* in human units here; exact in the JSON report */
            base_format_bytes(bytes, sizeof bytes, o->lanes[l].bytes);
            fprintf(f, "          %-16s %12" PRIu64 " %12" PRIu64 " %14s %8" PRIu64 "\n", lane[l],
                    o->lanes[l].batches, o->lanes[l].blocks, bytes, o->lanes[l].failed);
        }
        fprintf(f, ROW "%.2f %% (%" PRIu64 " of %" PRIu64 " G1-miss blocks)\n", "G2 hit rate",
                o->g2_hit_rate * 100.0, o->g2_hit_blocks, o->g1_miss_blocks);
        fprintf(f, ROW "%.2f %% (%" PRIu64 " blocks)%s\n", "G3 hit rate", o->g3_hit_rate * 100.0,
                o->g3_hit_blocks, o->g3_shared ? ", shared by all engines" : "");
        fprintf(f, ROW "%" PRIu64 " onboarded, %" PRIu64 " computed\n", "prompt tokens",
                o->onboarded_tokens, o->recomputed_tokens);
        fprintf(f, ROW "%" PRIu64 " (%" PRIu64 " failed), waited %.3f s\n", "loads", o->loads,
                o->failed_loads, (double)o->onboard_wait_ns / 1e9);
        fprintf(f, ROW "%" PRIu64 " times, %.3f s; %" PRIu64 " RETRY_NOW\n", "blocked on offload",
                o->blocked, (double)o->blocked_ns / 1e9, o->retry_now);
    }

    const struct kvsim_disagg_summary *d = &r->disagg;
    if (d->enabled) {
        fprintf(f,
                "\n" ROW "%" PRIu32 " prefill + %" PRIu32 " decode engines, %" PRIu64 " epochs\n",
                "disaggregated", d->prefill_engines, d->decode_engines, d->epochs);
        fprintf(f,
                ROW "%" PRIu64 " (%" PRIu64 " completed, %" PRIu64 " aborted, %" PRIu64
                    " under way)\n",
                "handoffs", d->handoffs, d->completed, d->aborted, d->pending);
        fprintf(f, ROW "%.3f GB (%" PRIu64 " tokens)\n", "KV transferred",
                (double)d->transferred_bytes / 1e9, d->transferred_tokens);
        fprintf(f, ROW "%.1f (peak %" PRIu32 " blocks on one prefill engine)\n",
                "pinned block-seconds", d->pinned_block_seconds, d->peak_pinned_blocks);
    }

    if (r->per_engine && r->num_per_engine <= 16) { /* beyond, the JSON has them */
        fprintf(f, "\n  %-8s %10s %12s %12s %7s %9s %8s %8s %8s %8s\n", "engine", "completed",
                "input tok", "output tok", "reuse", "busy s", "kv mean", "kv peak", "preempt",
                "rejected");
        for (uint32_t e = 0; e < r->num_per_engine; e++) {
            const struct kvsim_engine_summary *s = &r->per_engine[e];
            char name[16];
            snprintf(name, sizeof name, "%s%" PRIu32,
                     s->role == KVSIM_TS_PREFILL  ? "P"
                     : s->role == KVSIM_TS_DECODE ? "D"
                                                  : "",
                     e);
            fprintf(f,
                    "  %-8s %10" PRIu64 " %12" PRIu64 " %12" PRIu64
                    " %6.1f%% %9.1f %7.1f%% %7.1f%% %8" PRIu64 " %8" PRIu64 "\n",
                    name, s->completed, s->input_tokens, s->output_tokens,
                    s->input_tokens ? 100.0 * (double)s->cached_tokens / (double)s->input_tokens
                                    : 0.0,
                    s->busy_s, 100.0 * s->mean_kv_usage, 100.0 * s->peak_kv_usage, s->preemptions,
                    s->rejected);
        }
    }
    for (uint8_t role = KVSIM_TS_PREFILL; r->per_engine && role <= KVSIM_TS_DECODE; role++) {
        struct kvsim_engine_summary p;
        uint32_t n = pool_sum(r, role, &p);
        if (n)
            fprintf(f,
                    ROW "%" PRIu32 " engines, %" PRIu64 " served, %.1f busy s, KV %.1f %% mean "
                        "%.1f %% peak, %" PRIu64 " preemptions, %" PRIu64 " rejected\n",
                    role == KVSIM_TS_PREFILL ? "prefill pool" : "decode pool", n, p.completed,
                    p.busy_s, 100.0 * p.mean_kv_usage, 100.0 * p.peak_kv_usage, p.preemptions,
                    p.rejected);
    }
    if (r->per_engine)
        fprintf(f, ROW "%.1f engine-seconds busy\n", "engines, summed", r->busy_engine_s);

    fprintf(f, "\n  %-6s %10s%11s%11s%11s%11s%11s%11s%11s\n", "(ms)", "count", "mean", "min", "p50",
            "p90", "p95", "p99", "max");
    print_latency_row(f, "TTFT", &r->ttft);
    print_latency_row(f, "TTST", &r->ttst);
    print_latency_row(f, "TPOT", &r->tpot);
    print_latency_row(f, "ITL", &r->itl);
    print_latency_row(f, "gap", &r->token_gap);
    print_latency_row(f, "E2E", &r->e2e);
    if (d->enabled) {
        print_latency_row(f, "pin", &d->pin);
        print_latency_row(f, "xfer", &d->transfer);
        print_latency_row(f, "dwait", &d->decode_wait);
    }
}

/* ---- files -------------------------------------------------------------------------------------
 */

/* The writers write through kvsim_output (output.c): atomically, "-" for standard output. */

/* ---- the JSON report ---------------------------------------------------------------------------
 */

/*
 * Adds key -> v to o. False if o or v is NULL (out of memory) or the insertion fails; v is
 * released in every failing case (json_object_set_new's contract).
 */
static bool put(json_t *o, const char *key, json_t *v)
{
    return json_object_set_new(o, key, v) == 0;
}

static json_t *json_u64(uint64_t v)
{
    return v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

static json_t *json_ns_as_ms(double ns) { return json_real(ns / 1e6); }

/* A distribution with AIPerf's statistics (avg, min, max, std, p1 ... p99, count, unit): ns
 * values in ms (unit "ms"), or as they are with another unit. */
static json_t *stats_json(const struct kvsim_latency *l, const char *unit)
{
    json_t *o = json_object();
    bool ms = !strcmp(unit, "ms");
    const struct {
        const char *key;
        double v;
    } q[] = {{"avg", l->mean}, {"min", l->min}, {"max", l->max}, {"std", l->std}, {"p1", l->p1},
             {"p5", l->p5},    {"p10", l->p10}, {"p25", l->p25}, {"p50", l->p50}, {"p75", l->p75},
             {"p90", l->p90},  {"p95", l->p95}, {"p99", l->p99}};
    bool ok = o != NULL;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        ok = put(o, q[i].key,
                 l->count == 0 ? json_null()
                 : ms          ? json_ns_as_ms(q[i].v)
                               : json_real(q[i].v)) &&
             ok;
    ok = put(o, "count", json_u64(l->count)) && ok;
    ok = put(o, "unit", json_string(unit)) && ok;
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *latency_json(const struct kvsim_latency *l) { return stats_json(l, "ms"); }

/* An engine's arguments under vLLM's names (num_gpu_blocks_override counts the null block, as
 * vLLM does; an unset optional knob is null). */
static json_t *engine_args_json(const struct sched_config *c, uint32_t data_parallel_size,
                                bool enable_expert_parallel)
{
    json_t *o = json_object();
    bool ok = o != NULL;
    ok = put(o, "block_size", json_integer(c->block_size)) && ok;
    ok = put(o, "num_gpu_blocks_override", json_integer(c->num_blocks)) && ok;
    ok = put(o, "max_num_seqs", json_integer(c->max_num_seqs)) && ok;
    ok = put(o, "max_num_active_seqs",
             c->max_num_active_seqs ? json_integer(c->max_num_active_seqs) : json_null()) &&
         ok;
    ok = put(o, "max_num_batched_tokens", json_integer(c->max_num_batched_tokens)) && ok;
    ok = put(o, "max_model_len", json_integer(c->max_model_len)) && ok;
    ok =
        put(o, "long_prefill_token_threshold", json_integer(c->long_prefill_token_threshold)) && ok;
    ok = put(o, "max_num_queued_reqs",
             c->max_num_queued_reqs ? json_integer(c->max_num_queued_reqs) : json_null()) &&
         ok;
    ok = put(o, "enable_prefix_caching", json_boolean(c->enable_prefix_caching)) && ok;
    ok = put(o, "enable_chunked_prefill", json_boolean(c->enable_chunked_prefill)) && ok;
    ok = put(o, "async_scheduling", json_boolean(c->async_scheduling)) && ok;
    ok = put(o, "scheduling_policy",
             json_string(c->policy == SCHED_POLICY_PRIORITY ? "priority" : "fcfs")) &&
         ok;
    ok = put(o, "data_parallel_size", json_integer(data_parallel_size)) && ok;
    ok = put(o, "enable_expert_parallel", json_boolean(enable_expert_parallel)) && ok;
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The SLO part: the objectives (null: not set), attainment per SLO and jointly, goodput. */
static json_t *slo_json(const struct kvsim_slo_summary *s)
{
    const struct {
        const char *name;
        int64_t ns;
        uint64_t met;
        double pct;
    } k[] = {{"ttft", s->slo.ttft_ns, s->met_ttft, s->attainment_ttft},
             {"itl", s->slo.itl_ns, s->met_itl, s->attainment_itl},
             {"e2e", s->slo.e2e_ns, s->met_e2e, s->attainment_e2e}};
    json_t *o = json_object(), *obj = json_object(), *att = json_object();
    bool ok = o && obj && att;
    for (size_t i = 0; i < 3; i++) {
        ok = put(obj, k[i].name, k[i].ns > 0 ? json_ns_as_ms((double)k[i].ns) : json_null()) && ok;
        ok = put(att, k[i].name, k[i].ns > 0 ? json_real(k[i].pct) : json_null()) && ok;
    }
    ok = put(att, "all", json_real(s->attainment_all)) && ok;
    ok = put(o, "objectives_ms", obj) && ok;
    ok = put(o, "attainment_pct", att) && ok;
    ok = put(o, "good_requests", json_u64(s->good)) && ok;
    ok = put(o, "goodput_requests_per_s", json_real(s->goodput_requests_per_s)) && ok;
    ok = put(o, "goodput_output_tokens_per_s", json_real(s->goodput_output_tokens_per_s)) && ok;
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Builds the report object; NULL when out of memory. */
/* One engine's figures (id >= 0), or a pool's (id = -engines). */
static json_t *engine_json(const struct kvsim_engine_summary *s, int id)
{
    return json_pack("{s:i,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:f}",
                     id >= 0 ? "engine" : "engines", id >= 0 ? id : -id, "role",
                     ts_role_name(s->role), "completed", (json_int_t)s->completed, "input_tokens",
                     (json_int_t)s->input_tokens, "output_tokens", (json_int_t)s->output_tokens,
                     "cached_tokens", (json_int_t)s->cached_tokens, "rejected",
                     (json_int_t)s->rejected, "preemptions", (json_int_t)s->preemptions, "steps",
                     (json_int_t)s->steps, "busy_s", s->busy_s, "prefix_cache_reuse_ratio",
                     s->input_tokens ? (double)s->cached_tokens / (double)s->input_tokens : 0.0,
                     "mean_kv_usage", s->mean_kv_usage, "peak_kv_usage", s->peak_kv_usage);
}

void kvsim_thread_accounting_bounds(const struct kvsim_thread_accounting *a,
                                    struct kvsim_thread_bounds *out)
{
    *out = (struct kvsim_thread_bounds){0};
    for (uint32_t t = 0; t < a->threads; t++) {
        out->advance_s += a->advance_s[t];
        out->wait_s += a->wait_s[t];
    }
    double total = a->serial_s + out->advance_s;
    out->serial_fraction = total > 0 ? a->serial_s / total : 0.0;
    for (int i = 0; i < KVSIM_ACCOUNTING_BOUNDS; i++) {
        double least = a->serial_s + a->critical_s[i];
        out->speedup[i] = least > 0 ? total / least : 0.0;
        out->balance[i] =
            a->critical_s[i] > 0 ? a->critical_s[0] / ((double)(1 << i) * a->critical_s[i]) : 1.0;
        double assigned = a->serial_s + a->critical_assigned_s[i];
        out->speedup_assigned[i] = a->critical_assigned_s[i] > 0 ? total / assigned : 0.0;
    }
}

/* wall.accounting: the threads' CPU (kvsim_thread_accounting) and what it bounds. */
static json_t *accounting_json(const struct kvsim_thread_accounting *a)
{
    struct kvsim_thread_bounds b;
    kvsim_thread_accounting_bounds(a, &b);
    json_t *o = json_object(), *threads = json_array(), *bound = json_object();
    bool ok = o && threads && bound;
    for (uint32_t t = 0; t < a->threads && threads; t++)
        ok = json_array_append_new(threads, json_pack("{s:f,s:f,s:f}", "advance_cpu_s",
                                                      a->advance_s[t], "wait_cpu_s", a->wait_s[t],
                                                      "wait_wall_s", a->wait_wall_s[t])) == 0 &&
             ok;
    static const char *const ts[KVSIM_ACCOUNTING_BOUNDS] = {"1", "2", "4", "8", "16"};
    for (int i = 1; i < KVSIM_ACCOUNTING_BOUNDS && bound; i++)
        ok = put(bound, ts[i],
                 json_pack("{s:f,s:f,s:f}", "speedup", b.speedup[i], "balance", b.balance[i],
                           "speedup_assigned", b.speedup_assigned[i])) &&
             ok;
    ok = put(o, "serial_cpu_s", json_real(a->serial_s)) && ok;
    ok = put(o, "advance_cpu_s", json_real(b.advance_s)) && ok;
    ok = put(o, "serial_fraction", json_real(b.serial_fraction)) && ok;
    ok = put(o, "phases", json_integer((json_int_t)a->phases)) && ok;
    ok = put(o, "parallel_phases", json_integer((json_int_t)a->parallel_phases)) && ok;
    ok = put(o, "bound", bound) && ok; /* put releases what it cannot insert */
    ok = put(o, "threads", threads) && ok;
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *report_json(const struct kvsim_report *r)
{
    json_t *root = json_object();
    bool ok = put(root, "format", json_string("kvsim-report-2"));
    ok = put(root, "complete", json_boolean(r->complete)) && ok;

    json_t *run = json_object();
    ok = put(run, "kvsim", json_string("kvsim " KVSIM_VERSION_STRING)) && ok;
    ok = put(run, "trace", json_string(r->trace)) && ok;
    ok =
        put(run, "trace_sha256", r->trace_sha256[0] ? json_string(r->trace_sha256) : json_null()) &&
        ok;
    ok = put(run, "router", json_string(r->router)) && ok;
    if (r->has_router_view) /* absent: the exact view (the reports before issue 61) */
        ok = put(run, "router_view",
                 json_pack("{s:s,s:f,s:f}", "view", r->router_view_delayed ? "delayed" : "exact",
                           "kv_event_delay_ms", r->kv_event_delay_ms, "predict_ttl_s",
                           r->predict_ttl_s)) &&
             ok;
    ok = put(run, "seed", json_u64(r->seed)) && ok;
    ok = put(run, "engines", json_integer(r->num_engines)) && ok;
    ok = put(run, "tensor_parallel_size", json_integer(r->tensor_parallel_size)) && ok;
    ok = put(run, "gpus", json_u64(r->gpus)) && ok;
    ok = put(run, "vllm_contract", json_integer(r->vllm_contract)) && ok;
    if (r->has_engine)
        ok = put(run, "engine_args",
                 engine_args_json(&r->engine, r->data_parallel_size ? r->data_parallel_size : 1,
                                  r->enable_expert_parallel)) &&
             ok;
    if (r->has_pools) {
        ok = put(run, "prefill_engine_args", engine_args_json(&r->prefill, 1, false)) && ok;
        ok = put(run, "decode_engine_args", engine_args_json(&r->decode, 1, false)) && ok;
    }
    json_t *end = json_object();
    ok = put(end, "reason", json_string(r->end_reason)) && ok;
    ok = put(end, "sim_time_s", json_real((double)r->end_ns / 1e9)) && ok;
    ok = put(run, "end", end) && ok;
    if (r->config_text) /* the whole configuration, as --config-out writes it */
        ok = put(run, "config", json_loads(r->config_text, 0, NULL)) && ok;
    ok = put(root, "run", run) && ok;

    json_t *req = json_object();
    ok = put(req, "total", json_u64(r->num_requests)) && ok;
    ok = put(req, "completed", json_u64(r->completed)) && ok;
    ok = put(req, "rejected", json_u64(r->rejected)) && ok;
    ok = put(req, "arrived", json_u64(r->arrived)) && ok;
    ok = put(req, "cut_off", json_u64(r->cut_off)) && ok;
    json_t *reasons = json_object();
    for (uint32_t i = 0; i < r->num_reject_reasons; i++)
        ok = put(reasons, r->rejects[i].reason, json_u64(r->rejects[i].count)) && ok;
    ok = put(req, "rejected_by_reason", reasons) && ok;
    if (r->disagg.enabled)
        ok = put(req, "aborted", json_u64(r->aborted)) && ok;
    ok = put(req, "incomplete", json_u64(r->incomplete)) && ok;
    ok = put(req, "peak_in_flight", json_u64(r->peak_in_flight)) && ok;
    ok = put(root, "requests", req) && ok;
    ok = put(root, "preemptions", json_u64(r->preemptions)) && ok;

    json_t *tok = json_object();
    ok = put(tok, "input", json_u64(r->input_tokens)) && ok;
    ok = put(tok, "output", json_u64(r->output_tokens)) && ok;
    ok = put(tok, "cached", json_u64(r->cached_tokens)) && ok;
    ok = put(root, "tokens", tok) && ok;
    ok = put(root, "prefix_cache_reuse_ratio", json_real(r->prefix_cache_reuse)) && ok;
    if (r->has_unbounded_reuse)
        ok = put(root, "prefix_cache_reuse_unbounded_ratio",
                 json_real(r->prefix_cache_reuse_unbounded)) &&
             ok;

    const struct kvsim_timing_summary *tm = &r->timing;
    json_t *tj = json_object();
    ok =
        put(tj, "step_model", json_string(tm->step_model[0] ? tm->step_model : "polynomial")) && ok;
    if (!strcmp(tm->step_model, "profile")) {
        ok = put(tj, "profile", json_string(tm->profile)) && ok;
        ok = put(tj, "model", json_string(tm->model)) && ok;
        ok = put(tj, "hardware", json_string(tm->hardware)) && ok;
        ok = put(tj, "tp", json_u64(tm->tp)) && ok;
        json_t *ax = json_object();
        ok = put(ax, "tokens", json_u64(tm->outside_tokens)) && ok;
        ok = put(ax, "sequences", json_u64(tm->outside_sequences)) && ok;
        ok = put(ax, "attention", json_u64(tm->outside_attention)) && ok;
        ok = put(tj, "steps_outside_grid", json_u64(tm->steps_outside)) && ok;
        ok = put(tj, "outside_by_axis", ax) && ok;
    }
    ok = put(tj, "steps", json_u64(tm->steps)) && ok;
    if (tm->lockstep) {
        json_t *ls = json_object();
        ok = put(ls, "steps", json_u64(tm->lockstep_steps)) && ok;
        ok = put(ls, "dummy_rank_steps", json_u64(tm->lockstep_dummy_rank_steps)) && ok;
        ok = put(tj, "lockstep", ls) && ok;
    }
    ok = put(tj, "num_gpu_blocks", json_u64(tm->num_gpu_blocks)) && ok;
    if (tm->kv_capacity[0]) {
        ok = put(tj, "kv_capacity", json_string(tm->kv_capacity)) && ok;
        ok = put(tj, "kv_capacity_tokens", json_u64(tm->kv_capacity_tokens)) && ok;
    }
    ok = put(root, "timing", tj) && ok;

    ok = put(root, "duration_ms", json_ns_as_ms((double)r->duration_ns)) && ok;
    json_t *thr = json_object();
    ok = put(thr, "requests_per_s", json_real(r->requests_per_s)) && ok;
    ok = put(thr, "input_tokens_per_s", json_real(r->input_tokens_per_s)) && ok;
    ok = put(thr, "output_tokens_per_s", json_real(r->output_tokens_per_s)) && ok;
    ok = put(thr, "total_tokens_per_s", json_real(r->total_tokens_per_s)) && ok;
    ok = put(root, "throughput", thr) && ok;
    if (r->slo.enabled)
        ok = put(root, "slo", slo_json(&r->slo)) && ok;
    if (r->per_engine) {
        json_t *arr = json_array();
        ok = arr != NULL && ok;
        for (uint32_t e = 0; arr && e < r->num_per_engine; e++)
            ok = json_array_append_new(arr, engine_json(&r->per_engine[e], (int)e)) == 0 && ok;
        ok = put(root, "engines", arr) && ok;
        /* Per pool: the engines of each role summed (means weighted by busy time). */
        json_t *pools = json_object();
        ok = pools != NULL && ok;
        for (uint8_t role = KVSIM_TS_AGGREGATED; pools && role <= KVSIM_TS_DECODE; role++) {
            struct kvsim_engine_summary sum;
            uint32_t n = pool_sum(r, role, &sum);
            if (n)
                ok = put(pools, ts_role_name(role), engine_json(&sum, -(int)n)) && ok;
        }
        ok = put(root, "pools", pools) && ok;
        ok = put(root, "busy_engine_s", json_real(r->busy_engine_s)) && ok;
    }

    ok = put(root, "ttft_ms", latency_json(&r->ttft)) && ok;
    ok = put(root, "ttst_ms", latency_json(&r->ttst)) && ok;
    ok = put(root, "tpot_ms", latency_json(&r->tpot)) && ok;
    ok = put(root, "itl_ms", latency_json(&r->itl)) && ok;
    ok = put(root, "token_gap_ms", latency_json(&r->token_gap)) && ok;
    ok = put(root, "output_token_throughput_per_user",
             stats_json(&r->output_tps_per_user, "tokens/s")) &&
         ok;
    ok = put(root, "e2e_ms", latency_json(&r->e2e)) && ok;

    const struct kvsim_offload_summary *o = &r->offload;
    if (o->enabled) {
        static const char *const lane[4] = {"g1_g2", "g2_g3", "g3_g2", "g2_g1"};
        json_t *off = json_object(), *lanes = json_object();
        for (int l = 0; l < KVSIM_REPORT_NUM_LANES; l++) {
            json_t *lj = json_object();
            ok = put(lj, "batches", json_u64(o->lanes[l].batches)) && ok;
            ok = put(lj, "blocks", json_u64(o->lanes[l].blocks)) && ok;
            ok = put(lj, "bytes", json_u64(o->lanes[l].bytes)) && ok;
            ok = put(lj, "failed_batches", json_u64(o->lanes[l].failed)) && ok;
            ok = put(lj, "cancelled_batches", json_u64(o->lanes[l].cancelled)) && ok;
            ok = put(lanes, lane[l], lj) && ok;
        }
        ok = put(off, "lanes", lanes) && ok;
        ok = put(off, "g1_miss_blocks", json_u64(o->g1_miss_blocks)) && ok;
        ok = put(off, "g2_hit_blocks", json_u64(o->g2_hit_blocks)) && ok;
        ok = put(off, "g3_hit_blocks", json_u64(o->g3_hit_blocks)) && ok;
        ok = put(off, "g2_hit_rate", json_real(o->g2_hit_rate)) && ok;
        ok = put(off, "g3_hit_rate", json_real(o->g3_hit_rate)) && ok;
        ok = put(off, "onboarded_tokens", json_u64(o->onboarded_tokens)) && ok;
        ok = put(off, "recomputed_tokens", json_u64(o->recomputed_tokens)) && ok;
        ok = put(off, "loads", json_u64(o->loads)) && ok;
        ok = put(off, "failed_loads", json_u64(o->failed_loads)) && ok;
        ok = put(off, "blocked_on_offload", json_u64(o->blocked)) && ok;
        ok = put(off, "retry_now", json_u64(o->retry_now)) && ok;
        ok = put(off, "blocked_on_offload_ms", json_ns_as_ms((double)o->blocked_ns)) && ok;
        ok = put(off, "onboard_wait_ms", json_ns_as_ms((double)o->onboard_wait_ns)) && ok;
        ok = put(off, "written_g2_blocks", json_u64(o->written_g2)) && ok;
        ok = put(off, "written_g3_blocks", json_u64(o->written_g3)) && ok;
        ok = put(off, "filtered_blocks", json_u64(o->filtered)) && ok;
        ok = put(off, "dropped_blocks", json_u64(o->dropped)) && ok;
        ok = put(off, "failed_blocks", json_u64(o->failed_blocks)) && ok;
        ok = put(off, "g2_resident_blocks", json_u64(o->g2_resident)) && ok;
        ok = put(off, "g3_resident_blocks", json_u64(o->g3_resident)) && ok;
        ok = put(off, "g3_shared", json_boolean(o->g3_shared)) && ok;
        if (o->g3_shared)
            ok = put(off, "g3_shared_evictions", json_u64(o->g3_evictions)) && ok;
        ok = put(root, "offload", off) && ok;
    }
    const struct kvsim_disagg_summary *d = &r->disagg;
    if (d->enabled) {
        json_t *dj = json_object(), *pre = json_array();
        ok = put(dj, "prefill_engines", json_integer(d->prefill_engines)) && ok;
        ok = put(dj, "decode_engines", json_integer(d->decode_engines)) && ok;
        ok = put(dj, "epochs", json_u64(d->epochs)) && ok;
        ok = put(dj, "handoffs", json_u64(d->handoffs)) && ok;
        ok = put(dj, "completed", json_u64(d->completed)) && ok;
        ok = put(dj, "aborted", json_u64(d->aborted)) && ok;
        ok = put(dj, "pending", json_u64(d->pending)) && ok;
        ok = put(dj, "transferred_bytes", json_u64(d->transferred_bytes)) && ok;
        ok = put(dj, "transferred_tokens", json_u64(d->transferred_tokens)) && ok;
        ok = put(dj, "pinned_block_seconds", json_real(d->pinned_block_seconds)) && ok;
        ok = put(dj, "peak_pinned_blocks", json_integer(d->peak_pinned_blocks)) && ok;
        ok = put(dj, "pin_ms", latency_json(&d->pin)) && ok;
        ok = put(dj, "transfer_ms", latency_json(&d->transfer)) && ok;
        ok = put(dj, "decode_wait_ms", latency_json(&d->decode_wait)) && ok;
        for (uint32_t p = 0; d->per_prefill && p < d->prefill_engines; p++) {
            json_t *pj = json_object();
            ok = put(pj, "engine", json_integer(p)) && ok;
            ok = put(pj, "pinned_block_seconds",
                     json_real(d->per_prefill[p].pinned_block_seconds)) &&
                 ok;
            ok =
                put(pj, "peak_pinned_blocks", json_integer(d->per_prefill[p].peak_pinned_blocks)) &&
                ok;
            ok = json_array_append_new(pre, pj) == 0 && ok;
        }
        ok = put(dj, "prefill", pre) && ok;
        ok = put(root, "disagg", dj) && ok;
    }

    json_t *wall = json_object();
    bool known = r->wall_ns > 0;
    ok = put(wall, "threads", json_integer(r->num_threads)) && ok;
    ok = put(wall, "wall_time_ms", known ? json_ns_as_ms((double)r->wall_ns) : json_null()) && ok;
    ok = put(wall, "speed_sim_s_per_wall_s", known ? json_real(r->speed) : json_null()) && ok;
    ok =
        put(wall, "requests_per_wall_s", known ? json_real(r->wall_requests_per_s) : json_null()) &&
        ok;
    ok = put(wall, "decode_fast_path_steps", json_integer((json_int_t)r->timing.fast_path_steps)) &&
         ok;
    if (!r->disagg.enabled) { /* a disaggregated run's are in its own section */
        ok = put(wall, "epochs", json_u64(r->epochs)) && ok;
        ok = put(wall, "arrivals_routed_ahead", json_u64(r->arrivals_routed_ahead)) && ok;
    }
    if (r->accounting.enabled) {
        json_t *acct = accounting_json(&r->accounting);
        ok = acct && put(wall, "accounting", acct) && ok;
    }
    ok = put(root, "wall", wall) && ok;

    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

char *kvsim_report_json_text(const struct kvsim_report *r)
{
    json_t *root = report_json(r);
    char *text = root != NULL ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                                                     JSON_REAL_PRECISION(KVSIM_REPORT_REAL_DIGITS))
                              : NULL;
    json_decref(root);
    return text;
}

int kvsim_report_write_json(const char *path, const struct kvsim_report *r, char *err,
                            size_t errlen)
{
    char *text = kvsim_report_json_text(r);
    if (text == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: out of memory building the report", path);
        return -ENOMEM;
    }
    int rc = kvsim_write_text(path, text, err, errlen);
    free(text);
    return rc;
}

/* ---- the per-request JSONL
 * ----------------------------------------------------------------------- */

/* Writes ,"key":<ns as ms, six decimals> from the integer, or null. */
static void put_ms(FILE *f, const char *key, int64_t ns)
{
    if (ns == KVSIM_TIME_NONE) {
        fprintf(f, ",\"%s\":null", key);
        return;
    }
    uint64_t mag = ns < 0 ? 0 - (uint64_t)ns : (uint64_t)ns;
    fprintf(f, ",\"%s\":%s%" PRIu64 ".%06" PRIu64, key, ns < 0 ? "-" : "", mag / 1000000,
            mag % 1000000);
}

/* Writes s as a JSON string. */
static void put_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static const char *handoff_name(uint8_t h)
{
    switch ((enum kvsim_req_handoff)h) {
    case KVSIM_REQ_HANDOFF_NONE: return "none";
    case KVSIM_REQ_HANDOFF_COMPLETED: return "completed";
    case KVSIM_REQ_HANDOFF_ABORTED: return "aborted";
    case KVSIM_REQ_HANDOFF_PENDING: return "pending";
    }
    return "?";
}

/* The disaggregated fields of a record (only in a disaggregated replay's records). */
static void write_handoff(FILE *f, const struct kvsim_req_record *r)
{
    if (r->prefill_engine >= 0)
        fprintf(f, ",\"prefill_engine\":%" PRId32, r->prefill_engine);
    else
        fputs(",\"prefill_engine\":null", f);
    if (r->decode_engine >= 0)
        fprintf(f, ",\"decode_engine\":%" PRId32, r->decode_engine);
    else
        fputs(",\"decode_engine\":null", f);
    fprintf(f, ",\"handoff\":\"%s\"", handoff_name(r->handoff));
    put_ms(f, "pin_ms", r->pin_ns);
    put_ms(f, "transfer_ms", r->transfer_ns);
}

static void write_record(FILE *f, uint32_t id, const struct kvsim_req_record *r, bool disagg)
{
    fprintf(f, "{\"id\":%" PRIu32 ",\"status\":\"%s\"", id,
            kvsim_req_status_name((enum kvsim_req_status)r->status));
    if (r->engine >= 0)
        fprintf(f, ",\"engine\":%" PRId32, r->engine);
    else
        fputs(",\"engine\":null", f);
    fprintf(f,
            ",\"input_len\":%" PRIu32 ",\"cached_tokens\":%" PRIu32 ",\"output_tokens\":%" PRIu32
            ",\"preemptions\":%" PRIu32,
            r->input_len, r->cached_tokens, r->num_output_tokens, r->num_preemptions);
    put_ms(f, "arrival_ms", r->arrival_ns);
    put_ms(f, "first_sched_ms", r->first_sched_ns);
    put_ms(f, "first_token_ms", r->first_token_ns);
    put_ms(f, "second_token_ms", r->second_token_ns);
    put_ms(f, "last_token_ms", r->last_token_ns);
    put_ms(f, "finish_ms", r->finish_ns);
    bool arrived = r->arrival_ns != KVSIM_TIME_NONE;
    put_ms(f, "ttft_ms",
           arrived && r->num_output_tokens >= 1 ? r->first_token_ns - r->arrival_ns
                                                : KVSIM_TIME_NONE);
    put_ms(f, "e2e_ms",
           r->status == KVSIM_REQ_COMPLETED ? r->finish_ns - r->arrival_ns : KVSIM_TIME_NONE);
    put_ms(f, "itl_max_ms", r->num_output_tokens >= 2 ? r->itl_max_ns : KVSIM_TIME_NONE);
    put_ms(f, "itl_sum_ms", r->num_output_tokens >= 2 ? r->itl_sum_ns : KVSIM_TIME_NONE);
    fputs(",\"reject_reason\":", f);
    if (r->reject_reason != NULL)
        put_json_string(f, r->reject_reason);
    else
        fputs("null", f);
    if (disagg)
        write_handoff(f, r);
    fputs("}\n", f);
}

int kvsim_metrics_write_requests(const char *path, const struct kvsim_metrics *m, char *err,
                                 size_t errlen)
{
    struct kvsim_output o;
    int rc = kvsim_output_open(&o, path, err, errlen);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < m->num_requests && !ferror(o.f); i++)
        write_record(o.f, i, &m->recs[i], m->disagg);
    return kvsim_output_commit(&o, err, errlen);
}
/* ---- the time series ------------------------------------------------------------------------ */

void kvsim_timeseries_fini(struct kvsim_timeseries *ts)
{
    if (!ts)
        return;
    free(ts->roles);
    free(ts->samples);
    memset(ts, 0, sizeof *ts);
}

static void write_ts_row(FILE *f, double t_s, double interval_s, const char *engine,
                         const char *role, const struct kvsim_ts_sample *s)
{
    double usage = s->kv_total_blocks ? (double)s->kv_used_blocks / s->kv_total_blocks : 0.0;
    fprintf(f,
            "%.6f,%s,%s,%" PRIu32 ",%" PRIu32 ",%.6f,%" PRIu32 ",%.6f,%.6f,%" PRIu64 ",%" PRIu32
            ",%" PRIu64 ",%" PRIu64 "\n",
            t_s, engine, role, s->running, s->waiting, usage, s->kv_used_blocks,
            (double)s->prompt_tokens / interval_s, (double)s->generation_tokens / interval_s,
            s->preemptions, s->pinned_blocks, s->offload_stored_blocks, s->offload_loaded_blocks);
}

int kvsim_timeseries_write_csv(const char *path, const struct kvsim_timeseries *ts, char *err,
                               size_t errlen)
{
    struct kvsim_output o;
    int rc = kvsim_output_open(&o, path, err, errlen);
    if (rc)
        return rc;
    FILE *f = o.f;
    fputs("time_s,engine,role,running,waiting,kv_usage,kv_used_blocks,prompt_tokens_per_s,"
          "generation_tokens_per_s,preemptions,pinned_blocks,offload_stored_blocks,"
          "offload_loaded_blocks\n",
          f);
    double interval_s = (double)ts->interval_ns / 1e9;
    for (uint32_t k = 0; k < ts->num_intervals; k++) {
        double t_s = (double)(k + 1) * interval_s;
        struct kvsim_ts_sample all = {0};
        for (uint32_t e = 0; e < ts->num_engines; e++) {
            const struct kvsim_ts_sample *s = kvsim_ts_at(ts, k, e);
            char name[16];
            snprintf(name, sizeof name, "%" PRIu32, e);
            write_ts_row(f, t_s, interval_s, name, ts_role_name(ts->roles[e]), s);
            all.running += s->running;
            all.waiting += s->waiting;
            all.kv_used_blocks += s->kv_used_blocks;
            all.kv_total_blocks += s->kv_total_blocks;
            all.pinned_blocks += s->pinned_blocks;
            all.prompt_tokens += s->prompt_tokens;
            all.generation_tokens += s->generation_tokens;
            all.preemptions += s->preemptions;
            all.offload_stored_blocks += s->offload_stored_blocks;
            all.offload_loaded_blocks += s->offload_loaded_blocks;
        }
        write_ts_row(f, t_s, interval_s, "all", "all", &all);
    }
    return kvsim_output_commit(&o, err, errlen);
}
