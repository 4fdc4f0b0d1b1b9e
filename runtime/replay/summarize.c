/*
 * summarize.c - what a replay gives back: the report (kvsim_metrics_summarize with the run's
 * description, the step model, the per-engine part, the thread accounting, the unbounded-cache
 * reuse, the offload tiers, the disaggregated handoffs), the engines' time series, and every
 * output file through the output stage.
 *
 * Threads: the coordinator, after the epochs (the workers joined).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/replay/replay_internal.h"

#include "runtime/engine/engine.h"
#include "runtime/input/input.h"
#include "runtime/report/report.h"

/* The per-engine part: each engine's own counters, and its requests from the records (the
 * engine of a request's last admission), in engine then request order. Returns 0 or -ENOMEM. */
static int summarize_engines(struct replay *rp, struct kvsim_report *r)
{
    r->per_engine = calloc(rp->num_engines, sizeof *r->per_engine);
    if (!r->per_engine)
        return -ENOMEM;
    r->num_per_engine = rp->num_engines;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        kvsim_engine_usage(rp->engines[e], &r->per_engine[e]);
        r->busy_engine_s += r->per_engine[e].busy_s;
    }
    for (uint32_t i = 0; i < (uint32_t)rp->trace.num_reqs; i++) {
        const struct kvsim_req_record *rec = kvsim_metrics_record(rp->metrics, i);
        /* A prefill engine served the prefill of every request it prefilled, whatever came
         * of the decode; its cache hits are the request's first admission's. */
        int32_t pe = rp->num_prefill ? rec->prefill_engine : -1;
        if (pe >= 0 && (uint32_t)pe < rp->num_prefill && rec->first_sched_ns != KVSIM_TIME_NONE) {
            struct kvsim_engine_summary *p = &r->per_engine[pe];
            p->completed++;
            p->input_tokens += rec->input_len;
            p->cached_tokens += rec->cached_tokens;
        }
        if (rec->status != KVSIM_REQ_COMPLETED || rec->engine < 0 ||
            (uint32_t)rec->engine >= rp->num_engines)
            continue;
        struct kvsim_engine_summary *s = &r->per_engine[rec->engine];
        s->completed++;
        s->input_tokens += rec->input_len;
        s->output_tokens += rec->num_output_tokens;
        if (!rp->num_prefill)
            s->cached_tokens += rec->cached_tokens;
    }
    return 0;
}

/* The last instant any engine processed. */
static int64_t replay_last_instant(const struct replay *rp)
{
    int64_t end = rp->trace.reqs[0].arrival_ns;
    for (uint32_t e = 0; e < rp->num_engines; e++)
        if (kvsim_engine_clock(rp->engines[e]) > end)
            end = kvsim_engine_clock(rp->engines[e]);
    return end;
}

/*
 * The engines' samples as one time series: every engine closes the intervals up to the last
 * instant any engine processed, so that all have the same count. Returns 0 or -ENOMEM.
 */
static int collect_timeseries(struct replay *rp, struct kvsim_timeseries *ts)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    memset(ts, 0, sizeof *ts);
    ts->origin_ns = rp->trace.reqs[0].arrival_ns;
    ts->interval_ns = cfg->timeseries_interval_ns;
    ts->num_engines = rp->num_engines;
    uint32_t n = 0;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        uint32_t k;
        kvsim_engine_samples(rp->engines[e], &k);
        if (k > n)
            n = k;
    }
    uint64_t span =
        (uint64_t)(replay_last_instant(rp) - ts->origin_ns) / (uint64_t)ts->interval_ns + 1;
    if (span > n)
        n = span > UINT32_MAX ? UINT32_MAX : (uint32_t)span;
    ts->num_intervals = n;
    ts->roles = malloc(rp->num_engines);
    ts->samples = malloc((size_t)n * rp->num_engines * sizeof *ts->samples);
    if (!ts->roles || !ts->samples) {
        kvsim_timeseries_fini(ts);
        return -ENOMEM;
    }
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        int rc = kvsim_engine_samples_finish(rp->engines[e], n);
        if (rc) {
            kvsim_timeseries_fini(ts);
            return rc;
        }
        uint32_t k;
        const struct kvsim_ts_sample *s = kvsim_engine_samples(rp->engines[e], &k);
        ts->roles[e] = e >= rp->num_prefill
                           ? (rp->num_prefill ? KVSIM_TS_DECODE : KVSIM_TS_AGGREGATED)
                           : KVSIM_TS_PREFILL;
        for (uint32_t i = 0; i < n; i++)
            ts->samples[(size_t)i * rp->num_engines + e] = s[i];
    }
    return 0;
}

void kvsim_replay_capacity_summary(const struct kvsim_replay_config *cfg,
                                   struct kvsim_timing_summary *t)
{
    static const char *const sources[] = {[KVSIM_KV_CAPACITY_DEFAULT_TOKENS] = "default_tokens",
                                          [KVSIM_KV_CAPACITY_BLOCKS] = "num_gpu_blocks",
                                          [KVSIM_KV_CAPACITY_GPU_MEMORY] = "gpu_memory"};
    snprintf(t->kv_capacity, sizeof t->kv_capacity, "%s", sources[cfg->kv_capacity]);
    t->kv_capacity_tokens = (uint64_t)cfg->sched.num_blocks * cfg->sched.block_size;
}

uint64_t kvsim_replay_gpus(const struct kvsim_replay_config *cfg)
{
    const struct kvsim_disagg_config *d = &cfg->disagg;
    uint64_t engines = d->prefill_engines
                           ? (uint64_t)d->prefill_engines + d->decode_engines
                           : (uint64_t)cfg->num_engines *
                                 (cfg->data_parallel_size > 1 ? cfg->data_parallel_size : 1);
    return engines * (cfg->tensor_parallel_size > 1 ? cfg->tensor_parallel_size : 1);
}

/* The report of the run (wall_ns: its wall time so far). Returns 0 or a negative errno. */
int replay__summarize(struct replay *rp, int64_t wall_ns, struct kvsim_report *report)
{
    const struct kvsim_replay_config *cfg = rp->cfg;
    bool early = strcmp(rp->ep.end_reason, "finished") != 0;
    /* A bound reached after everything finished is a complete run. */
    if (kvsim_metrics_mark_incomplete(rp->metrics) == 0 && early &&
        strcmp(rp->ep.end_reason, "max-sim-time") == 0)
        rp->ep.end_reason = "finished";
    bool disagg = rp->num_prefill > 0;
    struct kvsim_report_run run = {
        .trace = cfg->trace_path ? cfg->trace_path
                 : cfg->requests ? (cfg->trace_label ? cfg->trace_label : "requests")
                                 : "synthetic",
        .trace_sha256 = rp->trace.sha256[0] ? rp->trace.sha256 : NULL,
        .router = kvsim_router_policy_name(disagg ? cfg->disagg.prefill_router : cfg->router),
        .router_view_delayed = rp->rt.delayed[0] || rp->rt.delayed[1] || rp->rt.view_reported,
        .kv_event_delay_ns = cfg->kv_event_delay_ns,
        .predict_ttl_ns = rp->rt.predicts ? cfg->router_predict_ttl_ns : 0,
        .seed = cfg->seed,
        .num_engines = rp->num_engines,
        .data_parallel_size = rp->dp,
        .tensor_parallel_size = cfg->tensor_parallel_size,
        .enable_expert_parallel = cfg->enable_expert_parallel,
        .num_threads = rp->num_threads,
        .vllm_contract = cfg->sched.vllm_contract,
        .engine = disagg ? NULL : &cfg->sched,
        .prefill = disagg ? &cfg->disagg.prefill_sched : NULL,
        .decode = disagg ? &cfg->disagg.decode_sched : NULL,
        .slo = cfg->slo,
        .config_text = cfg->config_text,
        .wall_ns = wall_ns,
        .end_reason = rp->ep.end_reason,
        .end_ns =
            (strcmp(rp->ep.end_reason, "finished") != 0 ? rp->ep.b_cur : replay_last_instant(rp)) -
            rp->trace.reqs[0].arrival_ns,
    };
    int rc = disagg ? replay__disagg_records(rp) : 0; /* the records' handoff fields */
    if (rc == 0)
        rc = kvsim_metrics_summarize(rp->metrics, &run, report);
    if (rc)
        return rc;
    if (disagg)
        rc = replay__disagg_summarize(rp, report);
    if (rc == 0) {
        kvsim_engines_timing(&cfg->model, cfg->sched.num_blocks, rp->engines, rp->num_engines,
                             &report->timing);
        kvsim_replay_capacity_summary(cfg, &report->timing);
    }
    if (rc == 0)
        rc = summarize_engines(rp, report);
    for (uint32_t d = 0; rc == 0 && rp->lockstep && d < rp->num_deployments; d++) {
        report->timing.lockstep = true;
        report->timing.lockstep_steps += rp->lockstep[d].steps;
        report->timing.lockstep_dummy_rank_steps += rp->lockstep[d].dummy_rank_steps;
    }
    if (rc == 0 && rp->acct.on)
        replay__acct_summarize(rp, &report->accounting);
    report->epochs = rp->ep.epochs;
    report->arrivals_routed_ahead = rp->ep.window_arrivals;
    if (rc == 0 && (rc = kvsim_trace_unbounded_reuse(&rp->trace, cfg->sched.block_size,
                                                     &report->prefix_cache_reuse_unbounded)) == 0)
        report->has_unbounded_reuse = true;
    if (rc == 0 && rp->tiers)
        kvsim_tier_topology_summarize(rp->tiers, rp->engines, rp->num_engines, &report->offload);
    if (rc)
        kvsim_report_fini(report);
    return rc;
}

/* Every file the run writes, through the output stage (kvsim_outputs_write). Returns 0 or a
 * negative errno with the message. */
int replay__write(struct replay *rp, const struct kvsim_report *report, char *err, size_t errlen)
{
    const struct kvsim_outputs *o = &rp->cfg->outputs;
    struct kvsim_timeseries ts = {0};
    struct kvsim_handoff_event *events = NULL;
    size_t num_events = 0;
    int rc = 0;
    if (kvsim_outputs_want_timeseries(o))
        rc = collect_timeseries(rp, &ts);
    if (rc == 0 && o->handoff_events_path && rp->num_prefill)
        rc = replay__disagg_handoff_events(rp, &events, &num_events);
    struct kvsim_output_data data = {rp->metrics, &ts, events, num_events};
    if (rc == 0)
        rc = kvsim_outputs_write(o, report, &data, err, errlen);
    free(events);
    kvsim_timeseries_fini(&ts);
    return rc;
}
