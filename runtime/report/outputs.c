/*
 * outputs.c - the output stage of a run (report.h, "the run's outputs"): every file a replay
 * writes, in one place and one order, each written atomically (output.c).
 */
#include "runtime/report/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

static const char *const handoff_event_names[] = {"prefill_kv_pin_start", "decode_kv_wait_start",
                                                  "destination_reserved", "transfer_start",
                                                  "transfer_end",         "prefill_kv_pin_end"};

/* One JSON line: the event, its time, its handoff, then what this kind of event carries. */
static void write_handoff_event(FILE *f, const struct kvsim_handoff_event *ev)
{
    fprintf(f,
            "{\"event\":\"%s\",\"t_ms\":%.6f,\"handoff\":%" PRIu64 ",\"request\":%" PRIu32
            ",\"prefill_engine\":%" PRId32,
            handoff_event_names[ev->kind], (double)ev->t_ns / 1e6, ev->handoff, ev->req,
            ev->prefill_engine);
    if (ev->kind != KVSIM_HANDOFF_EV_PIN_START && ev->decode_engine >= 0)
        fprintf(f, ",\"decode_engine\":%" PRId32, ev->decode_engine);
    switch (ev->kind) {
    case KVSIM_HANDOFF_EV_PIN_START:
        fprintf(f, ",\"blocks\":%" PRIu32 ",\"tokens\":%" PRIu64, ev->pinned_blocks,
                ev->pinned_tokens);
        break;
    case KVSIM_HANDOFF_EV_RESERVED:
        fprintf(f, ",\"missing_tokens\":%" PRIu64, ev->missing_tokens);
        break;
    case KVSIM_HANDOFF_EV_TRANSFER_START: fprintf(f, ",\"bytes\":%" PRIu64, ev->bytes); break;
    case KVSIM_HANDOFF_EV_PIN_END:
        fprintf(f, ",\"outcome\":\"%s\",\"duration_ms\":%.6f",
                ev->completed ? "completed" : "aborted", (double)ev->pinned_ns / 1e6);
        break;
    default: break;
    }
    fputs("}\n", f);
}

static int write_handoff_events(const char *path, const struct kvsim_output_data *d, char *err,
                                size_t errlen)
{
    struct kvsim_output o;
    int rc = kvsim_output_open(&o, path, err, errlen);
    for (size_t k = 0; rc == 0 && k < d->num_handoff_events; k++)
        write_handoff_event(o.f, &d->handoff_events[k]);
    return rc ? rc : kvsim_output_commit(&o, err, errlen);
}

int kvsim_outputs_write(const struct kvsim_outputs *o, const struct kvsim_report *r,
                        const struct kvsim_output_data *d, char *err, size_t errlen)
{
    if ((o->requests_path && !d->metrics) || (o->html_path && !d->metrics) ||
        (kvsim_outputs_want_timeseries(o) && !d->timeseries) ||
        (o->handoff_events_path && d->num_handoff_events && !d->handoff_events)) {
        snprintf(err, errlen, "the run's outputs: the data for a file asked for is missing");
        return -EINVAL;
    }
    int rc = 0;
    if (o->handoff_events_path)
        rc = write_handoff_events(o->handoff_events_path, d, err, errlen);
    if (rc == 0 && o->requests_path)
        rc = kvsim_metrics_write_requests(o->requests_path, d->metrics, err, errlen);
    if (rc == 0 && o->timeseries_path)
        rc = kvsim_timeseries_write_csv(o->timeseries_path, d->timeseries, err, errlen);
    if (rc == 0 && o->html_path)
        rc = kvsim_report_write_html(o->html_path, r, d->metrics, d->timeseries, err, errlen);
    if (rc == 0 && o->report_path)
        rc = kvsim_report_write_json(o->report_path, r, err, errlen);
    return rc;
}
