/*
 * html.c - the report as one self-contained HTML page: tables, and charts drawn as inline SVG.
 *
 * No script and no external resource (fonts, images, stylesheets), so the file opens anywhere,
 * offline, and can be attached or archived as it is. Everything is formatted from the report,
 * the records and the time series with fixed formats, never from the clock, so identical inputs
 * give a byte-identical file. Curves are downsampled to at most MAX_POINTS points, which keeps
 * the file small whatever the number of requests or intervals.
 *
 * The page is written through kvsim_output (output.c): a failure, out of memory included, leaves
 * no half-written file, and a failed open, write or close is reported with the path.
 */
#include "runtime/report/report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define MAX_POINTS 500 /* per curve */

/* The chart geometry (SVG user units; the page scales the SVG to its cell). */
#define CHART_W 600
#define CHART_H 260
#define PAD_L   62
#define PAD_R   20
#define PAD_T   30
#define PAD_B   44

#define COLOR_A   "#2563eb"
#define COLOR_B   "#ea580c"
#define COLOR_C   "#059669"
#define COLOR_SLO "#dc2626"

/* ---- text ----------------------------------------------------------------------------------- */

/* Writes s with the five HTML-special characters escaped (safe in text and attributes). */
static void esc(FILE *f, const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* NaN or infinity would print as "nan" / "inf" (invalid SVG); no report value should be one. */
static double fin(double v) { return isfinite(v) ? v : 0.0; }

static double ratio(double num, double den) { return den != 0.0 ? fin(num / den) : 0.0; }

/* ---- tables --------------------------------------------------------------------------------- */

static void row_begin(FILE *f, const char *label)
{
    fputs("<tr><th scope=\"row\">", f);
    esc(f, label);
    fputs("</th><td>", f);
}

static void row_end(FILE *f) { fputs("</td></tr>\n", f); }

static void row_u64(FILE *f, const char *label, uint64_t v)
{
    row_begin(f, label);
    fprintf(f, "%" PRIu64, v);
    row_end(f);
}

/* A row whose value is printf-formatted from one double (with its unit in fmt). */
static void row_num(FILE *f, const char *label, const char *fmt, double v)
{
    row_begin(f, label);
    fprintf(f, fmt, fin(v));
    row_end(f);
}

static void summary_table(FILE *f, const struct kvsim_report *r)
{
    fputs("<table id=\"table-summary\" class=\"kv\">\n<tbody>\n", f);
    row_u64(f, "Requests", r->num_requests);
    row_u64(f, "Arrived", r->arrived);
    row_u64(f, "Completed", r->completed);
    row_u64(f, "Rejected", r->rejected);
    for (uint32_t i = 0; i < r->num_reject_reasons; i++) {
        fputs("<tr class=\"sub\"><th scope=\"row\">", f);
        esc(f, r->rejects[i].reason ? r->rejects[i].reason : "unknown");
        fprintf(f, "</th><td>%" PRIu64 "</td></tr>\n", r->rejects[i].count);
    }
    row_u64(f, "Incomplete", r->incomplete);
    if (r->incomplete > 0) {
        fprintf(f,
                "<tr class=\"sub\"><th scope=\"row\">cut off (arrived, unfinished at the end)"
                "</th><td>%" PRIu64 "</td></tr>\n",
                r->cut_off);
        fprintf(f,
                "<tr class=\"sub\"><th scope=\"row\">not arrived (after the end)"
                "</th><td>%" PRIu64 "</td></tr>\n",
                r->incomplete - r->cut_off);
    }
    row_u64(f, "Aborted", r->aborted);
    row_num(f, "Duration", "%.3f s", (double)r->duration_ns / 1e9);
    row_num(f, "Throughput", "%.3f req/s", r->requests_per_s);
    row_num(f, "Input tokens/s", "%.1f", r->input_tokens_per_s);
    row_num(f, "Output tokens/s", "%.1f", r->output_tokens_per_s);
    row_begin(f, "Tokens");
    fprintf(f, "%" PRIu64 " input, %" PRIu64 " output, %" PRIu64 " cached", r->input_tokens,
            r->output_tokens, r->cached_tokens);
    row_end(f);
    row_num(f, "Prefix-cache reuse", "%.2f %%", 100.0 * r->prefix_cache_reuse);
    if (r->has_unbounded_reuse)
        row_num(f, "Possible reuse (unbounded shared cache)", "%.2f %%",
                100.0 * r->prefix_cache_reuse_unbounded);
    row_u64(f, "Preemptions", r->preemptions);
    if (r->per_engine)
        row_num(f, "Busy engine-seconds", "%.3f", r->busy_engine_s);
    row_begin(f, "Step model");
    esc(f, r->timing.step_model[0] ? r->timing.step_model : "polynomial");
    if (!strcmp(r->timing.step_model, "profile")) {
        fputs(" (", f);
        esc(f, r->timing.model);
        fputs(" on ", f);
        esc(f, r->timing.hardware);
        fprintf(f, ", tp %" PRIu32 ")", r->timing.tp);
    }
    fprintf(f, ", %" PRIu64 " steps", r->timing.steps);
    row_end(f);
    fputs("</tbody>\n</table>\n", f);
}

/* One row of AIPerf's statistics; ns values are shown in ms. */
static void stats_row(FILE *f, const char *name, const char *unit, const struct kvsim_latency *l)
{
    fputs("<tr><th scope=\"row\">", f);
    esc(f, name);
    fputs("</th><td class=\"unit\">", f);
    esc(f, unit);
    fputs("</td>", f);
    bool ms = !strcmp(unit, "ms");
    const double v[] = {l->mean, l->min, l->max, l->std, l->p1,  l->p5, l->p10,
                        l->p25,  l->p50, l->p75, l->p90, l->p95, l->p99};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        if (l->count == 0)
            fputs("<td>&ndash;</td>", f);
        else
            fprintf(f, ms ? "<td>%.3f</td>" : "<td>%.2f</td>", fin(ms ? v[i] / 1e6 : v[i]));
    }
    fprintf(f, "<td>%" PRIu64 "</td></tr>\n", l->count);
}

static void stats_head(FILE *f, const char *id)
{
    fprintf(f, "<div class=\"scroll\"><table id=\"%s\" class=\"stats\">\n<thead><tr>", id);
    static const char *const cols[] = {"metric", "unit", "avg", "min",  "max", "std",
                                       "p1",     "p5",   "p10", "p25",  "p50", "p75",
                                       "p90",    "p95",  "p99", "count"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        fprintf(f, "<th scope=\"col\">%s</th>", cols[i]);
    fputs("</tr></thead>\n<tbody>\n", f);
}

static void stats_foot(FILE *f) { fputs("</tbody>\n</table></div>\n", f); }

static void latency_table(FILE *f, const struct kvsim_report *r)
{
    stats_head(f, "table-latency");
    stats_row(f, "TTFT", "ms", &r->ttft);
    stats_row(f, "ITL", "ms", &r->itl);
    stats_row(f, "TPOT", "ms", &r->tpot);
    stats_row(f, "E2E", "ms", &r->e2e);
    stats_row(f, "Token gap", "ms", &r->token_gap);
    stats_row(f, "Output tokens/s per user", "tokens/s", &r->output_tps_per_user);
    stats_foot(f);
}

static void slo_table(FILE *f, const struct kvsim_report *r)
{
    const struct kvsim_slo_summary *s = &r->slo;
    fputs("<table id=\"table-slo\" class=\"stats\">\n<thead><tr><th scope=\"col\">SLO</th>"
          "<th scope=\"col\">threshold</th><th scope=\"col\">requests within</th>"
          "<th scope=\"col\">attainment</th></tr></thead>\n<tbody>\n",
          f);
    const struct {
        const char *name;
        int64_t ns;
        uint64_t met;
        double pct;
    } k[] = {{"TTFT", s->slo.ttft_ns, s->met_ttft, s->attainment_ttft},
             {"ITL", s->slo.itl_ns, s->met_itl, s->attainment_itl},
             {"E2E", s->slo.e2e_ns, s->met_e2e, s->attainment_e2e}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].ns > 0)
            fprintf(f,
                    "<tr><th scope=\"row\">%s</th><td>&le; %.3f ms</td><td>%" PRIu64
                    "</td><td>%.2f %%</td></tr>\n",
                    k[i].name, (double)k[i].ns / 1e6, k[i].met, fin(k[i].pct));
    fprintf(f,
            "<tr class=\"total\"><th scope=\"row\">All set SLOs</th><td></td><td>%" PRIu64
            " good</td><td>%.2f %%</td></tr>\n",
            s->good, fin(s->attainment_all));
    fprintf(f,
            "<tr><th scope=\"row\">Scored</th><td colspan=\"3\">the %" PRIu64
            " requests that arrived%s</td></tr>\n",
            r->arrived, r->cut_off ? " (those cut off at the end count as misses)" : "");
    fprintf(f,
            "<tr><th scope=\"row\">Goodput</th><td colspan=\"3\">%.3f req/s, %.1f output "
            "tokens/s (%" PRIu64 " good output tokens)</td></tr>\n",
            fin(s->goodput_requests_per_s), fin(s->goodput_output_tokens_per_s),
            s->good_output_tokens);
    fputs("</tbody>\n</table>\n", f);
}

/* ---- the configuration table (generic: the report JSON's "run", flattened) ------------------ */

/* Writes the leaves of o, one row each, under a group row per object that has leaves. */
static void config_rows(FILE *f, json_t *o, const char *path)
{
    bool group_written = false;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (!strcmp(key, "wall") || json_is_object(v))
            continue;
        if (!group_written) {
            fputs("<tr class=\"group\"><th colspan=\"2\">", f);
            esc(f, path);
            fputs("</th></tr>\n", f);
            group_written = true;
        }
        fputs("<tr><th scope=\"row\">", f);
        esc(f, key);
        fputs("</th><td>", f);
        if (json_is_string(v)) {
            esc(f, json_string_value(v));
        } else if (json_is_integer(v)) {
            fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        } else if (json_is_real(v)) {
            fprintf(f, "%.6g", fin(json_real_value(v)));
        } else {
            /* arrays, booleans, null: their compact JSON */
            char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));
            esc(f, t ? t : "?");
            free(t);
        }
        fputs("</td></tr>\n", f);
    }
    json_object_foreach(o, key, v)
    {
        if (strcmp(key, "wall") != 0 && json_is_object(v)) {
            char sub[512]; /* configuration keys are short; a deeper path is only truncated */
            snprintf(sub, sizeof sub, "%s.%s", path, key);
            config_rows(f, v, sub);
        }
    }
}

static int config_table(FILE *f, const struct kvsim_report *r)
{
    char *text = kvsim_report_json_text(r);
    if (text == NULL)
        return -ENOMEM;
    json_t *root = json_loads(text, 0, NULL);
    free(text);
    json_t *run = json_object_get(root, "run");
    if (!json_is_object(run)) {
        json_decref(root);
        return -ENOMEM; /* our own JSON always has "run": only memory can be missing */
    }
    fputs("<table id=\"table-config\" class=\"kv config\">\n<tbody>\n", f);
    config_rows(f, run, "run");
    fputs("</tbody>\n</table>\n", f);
    json_decref(root);
    return 0;
}

/* ---- charts --------------------------------------------------------------------------------- */

struct series {
    const char *label, *color;
    const double *x, *y;
    size_t n;
};

struct chart {
    const char *id, *xlabel, *ylabel;
    double y_max;       /* > 0: a fixed y range [0, y_max] (percentages) */
    bool area;          /* fill under each curve */
    bool cdf_start;     /* start each curve at (x[0], 0): a CDF of one value is still a line */
    double vline;       /* > 0: a dashed vertical marker at this x (an SLO threshold) */
    const char *vlabel; /* its label */
    const char *empty;  /* the message when no series has a point */
};

/* A step of 1, 2 or 5 times a power of ten, giving about target intervals over [0, range]. */
static double nice_step(double range, int target)
{
    double raw = range / target;
    double mag = pow(10.0, floor(log10(raw)));
    double fr = raw / mag;
    return (fr <= 1.0 ? 1.0 : fr <= 2.0 ? 2.0 : fr <= 5.0 ? 5.0 : 10.0) * mag;
}

/* Tick labels: short, and never an exponent for the ranges charts show. */
static void tick_label(char *buf, size_t len, double v)
{
    double a = fabs(v);
    if (a >= 1e9)
        snprintf(buf, len, "%.4gG", v / 1e9);
    else if (a >= 1e6)
        snprintf(buf, len, "%.4gM", v / 1e6);
    else if (a >= 1e4)
        snprintf(buf, len, "%.4gk", v / 1e3);
    else
        snprintf(buf, len, "%.4g", v);
}

/* An axis [0, *max] rounded up to a whole number of nice steps; a zero range becomes [0, 1]. */
static double axis(double *max, int target)
{
    if (!(*max > 0.0) || !isfinite(*max))
        *max = 1.0;
    double step = nice_step(*max, target);
    *max = ceil(*max / step - 1e-9) * step;
    return step;
}

static void svg_open(FILE *f, const char *id, int w, int h)
{
    fprintf(f,
            "<svg id=\"%s\" class=\"chart\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
            "role=\"img\" preserveAspectRatio=\"xMidYMid meet\">\n",
            id, w, h, w, h);
}

static void chart_message(FILE *f, const char *msg)
{
    fprintf(f,
            "<rect class=\"plot\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n"
            "<text class=\"msg\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">",
            PAD_L, PAD_T, CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B,
            PAD_L + (CHART_W - PAD_L - PAD_R) / 2, PAD_T + (CHART_H - PAD_T - PAD_B) / 2);
    esc(f, msg);
    fputs("</text>\n", f);
}

/* A line chart with both axes from 0, ticks, grid lines, labels and a legend. */
static void line_chart(FILE *f, const struct chart *c, const struct series *s, size_t ns)
{
    svg_open(f, c->id, CHART_W, CHART_H);
    double xmax = c->vline > 0 ? c->vline : 0.0, ymax = 0.0;
    size_t points = 0;
    for (size_t i = 0; i < ns; i++)
        for (size_t j = 0; j < s[i].n; j++) {
            xmax = fmax(xmax, fin(s[i].x[j]));
            ymax = fmax(ymax, fin(s[i].y[j]));
            points++;
        }
    if (points == 0) {
        chart_message(f, c->empty);
        fputs("</svg>\n", f);
        return;
    }
    if (c->y_max > 0)
        ymax = c->y_max;
    double xstep = axis(&xmax, 6), ystep = c->y_max > 0 ? c->y_max / 4 : axis(&ymax, 4);
    const double pw = CHART_W - PAD_L - PAD_R, ph = CHART_H - PAD_T - PAD_B;
    const double bottom = PAD_T + ph;
#define SX(v) (PAD_L + fin(v) / xmax * pw)
#define SY(v) (bottom - fin(v) / ymax * ph)

    fprintf(f, "<rect class=\"plot\" x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\"/>\n", PAD_L,
            PAD_T, pw, ph);
    char lab[32];
    for (int k = 0; k * ystep <= ymax * (1 + 1e-9); k++) {
        double v = (double)k * ystep, y = SY(v);
        tick_label(lab, sizeof lab, v);
        fprintf(f,
                "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                PAD_L, y, PAD_L + pw, y, PAD_L - 6, y + 4, lab);
    }
    for (int k = 0; k * xstep <= xmax * (1 + 1e-9); k++) {
        double v = (double)k * xstep, x = SX(v);
        tick_label(lab, sizeof lab, v);
        fprintf(f,
                "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                x, bottom, x, bottom + 5, x, bottom + 18, lab);
    }
    fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\"/>\n", PAD_L,
            bottom, PAD_L + pw, bottom);
    fprintf(f, "<text class=\"label\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", PAD_L + pw / 2,
            CHART_H - 6);
    esc(f, c->xlabel);
    fprintf(f,
            "</text>\n<text class=\"label\" transform=\"translate(14 %.1f) rotate(-90)\" "
            "text-anchor=\"middle\">",
            PAD_T + ph / 2);
    esc(f, c->ylabel);
    fputs("</text>\n", f);

    for (size_t i = 0; i < ns; i++) {
        if (s[i].n == 0)
            continue;
        if (c->area) {
            fprintf(f, "<polygon class=\"area\" fill=\"%s\" points=\"%.1f,%.1f", s[i].color,
                    SX(s[i].x[0]), bottom);
            for (size_t j = 0; j < s[i].n; j++)
                fprintf(f, " %.1f,%.1f", SX(s[i].x[j]), SY(s[i].y[j]));
            fprintf(f, " %.1f,%.1f\"/>\n", SX(s[i].x[s[i].n - 1]), bottom);
        }
        fprintf(f, "<polyline class=\"line\" stroke=\"%s\" points=\"", s[i].color);
        if (c->cdf_start)
            fprintf(f, "%.1f,%.1f ", SX(s[i].x[0]), bottom);
        for (size_t j = 0; j < s[i].n; j++)
            fprintf(f, "%s%.1f,%.1f", j ? " " : "", SX(s[i].x[j]), SY(s[i].y[j]));
        fputs("\"/>\n", f);
    }
    if (c->vline > 0) {
        double x = SX(c->vline);
        fprintf(f,
                "<line class=\"slo\" stroke=\"%s\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/>"
                "<text class=\"slo\" fill=\"%s\" x=\"%.1f\" y=\"%d\" text-anchor=\"%s\">",
                COLOR_SLO, x, PAD_T, x, bottom, COLOR_SLO, x > PAD_L + pw * 0.75 ? x - 4 : x + 4,
                PAD_T + 12, x > PAD_L + pw * 0.75 ? "end" : "start");
        esc(f, c->vlabel);
        fputs("</text>\n", f);
    }
    /* the legend, above the plot, right-aligned */
    double lx = PAD_L + pw;
    for (size_t i = ns; i-- > 0;) {
        if (s[i].label[0] == '\0')
            continue;
        lx -= 7.0 * (double)strlen(s[i].label) + 4;
        fprintf(f, "<text x=\"%.1f\" y=\"%d\">", lx, PAD_T - 9);
        esc(f, s[i].label);
        lx -= 16;
        fprintf(f,
                "</text><rect x=\"%.1f\" y=\"%d\" width=\"12\" height=\"4\" rx=\"1\" "
                "fill=\"%s\"/>\n",
                lx, PAD_T - 15, s[i].color);
        lx -= 14;
    }
#undef SX
#undef SY
    fputs("</svg>\n", f);
}

static void figure_open(FILE *f, const char *title, const char *note)
{
    fputs("<figure>\n<figcaption>", f);
    esc(f, title);
    if (note && note[0]) {
        fputs(" <span class=\"note\">", f);
        esc(f, note);
        fputs("</span>", f);
    }
    fputs("</figcaption>\n", f);
}

static void figure_close(FILE *f) { fputs("</figure>\n", f); }

/* ---- CDFs ----------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * Sorts vals[0..n) and draws their CDF (x in ms, y in %) from at most MAX_POINTS evenly spaced
 * ranks, the first and the last included. Returns 0 or -ENOMEM.
 */
static int cdf_chart(FILE *f, const char *id, const char *title, const char *xlabel, double *vals,
                     size_t n, int64_t slo_ns, const char *empty)
{
    size_t k = n < MAX_POINTS ? n : MAX_POINTS;
    double *xy = k ? malloc(2 * k * sizeof *xy) : NULL;
    if (k && xy == NULL)
        return -ENOMEM;
    qsort(vals, n, sizeof *vals, cmp_double);
    for (size_t j = 0; j < k; j++) {
        size_t rank = k > 1 ? (size_t)((double)j * (double)(n - 1) / (double)(k - 1) + 0.5) : 0;
        xy[j] = vals[rank] / 1e6;
        xy[k + j] = 100.0 * (double)(rank + 1) / (double)n;
    }
    char note[64] = "", vlabel[64] = "";
    if (n)
        snprintf(note, sizeof note, "%zu requests", n);
    if (slo_ns > 0)
        snprintf(vlabel, sizeof vlabel, "SLO %.6g ms", (double)slo_ns / 1e6);
    const struct series s = {"", COLOR_A, xy, xy + k, k};
    const struct chart c = {.id = id,
                            .xlabel = xlabel,
                            .ylabel = "requests (%)",
                            .y_max = 100,
                            .cdf_start = true,
                            .vline = (double)slo_ns / 1e6,
                            .vlabel = vlabel,
                            .empty = empty};
    figure_open(f, title, note);
    line_chart(f, &c, &s, 1);
    figure_close(f);
    free(xy);
    return 0;
}

enum latency_kind { LAT_TTFT, LAT_ITL, LAT_E2E, LAT_PIN };

/* The per-request values of one kind (ns) into vals; returns how many. */
static size_t collect(const struct kvsim_metrics *m, enum latency_kind kind, double *vals)
{
    size_t n = 0;
    uint32_t num = kvsim_metrics_num_requests(m);
    for (uint32_t i = 0; i < num; i++) {
        const struct kvsim_req_record *q = kvsim_metrics_record(m, i);
        if (kind == LAT_PIN) {
            if (q->handoff != KVSIM_REQ_HANDOFF_NONE && q->pin_ns >= 0)
                vals[n++] = (double)q->pin_ns;
            continue;
        }
        if (q->status != KVSIM_REQ_COMPLETED)
            continue;
        if (kind == LAT_TTFT && q->num_output_tokens >= 1)
            vals[n++] = (double)(q->first_token_ns - q->arrival_ns);
        else if (kind == LAT_ITL && q->num_output_tokens >= 2)
            vals[n++] =
                (double)(q->last_token_ns - q->first_token_ns) / (double)(q->num_output_tokens - 1);
        else if (kind == LAT_E2E)
            vals[n++] = (double)(q->finish_ns - q->arrival_ns);
    }
    return n;
}

static int cdf_charts(FILE *f, const struct kvsim_report *r, const struct kvsim_metrics *m)
{
    uint32_t num = m ? kvsim_metrics_num_requests(m) : 0;
    double *vals = malloc((num ? num : 1) * sizeof *vals);
    if (vals == NULL)
        return -ENOMEM;
    bool slo = r->slo.enabled;
    const char *none = "No completed requests";
    int rc = cdf_chart(f, "chart-ttft-cdf", "TTFT", "time to first token (ms)", vals,
                       m ? collect(m, LAT_TTFT, vals) : 0, slo ? r->slo.slo.ttft_ns : 0, none);
    if (rc == 0)
        rc = cdf_chart(f, "chart-itl-cdf", "ITL per request", "inter-token latency (ms)", vals,
                       m ? collect(m, LAT_ITL, vals) : 0, slo ? r->slo.slo.itl_ns : 0,
                       "No completed request with 2 or more output tokens");
    if (rc == 0)
        rc = cdf_chart(f, "chart-e2e-cdf", "E2E latency", "end-to-end latency (ms)", vals,
                       m ? collect(m, LAT_E2E, vals) : 0, slo ? r->slo.slo.e2e_ns : 0, none);
    free(vals);
    return rc;
}

/* ---- over time ------------------------------------------------------------------------------ */

/* What a time chart plots of one interval, summed over the engines it covers. */
enum ts_metric { TS_PROMPT, TS_GEN, TS_RUNNING, TS_WAITING, TS_KV, TS_PINNED };

/* The metric summed over the engines (prefill engines only for TS_PINNED); TS_KV as %. */
static double ts_value(const struct kvsim_timeseries *ts, uint32_t k, enum ts_metric what)
{
    double sum = 0.0, total = 0.0;
    for (uint32_t e = 0; e < ts->num_engines; e++) {
        const struct kvsim_ts_sample *s = kvsim_ts_at(ts, k, e);
        switch (what) {
        case TS_PROMPT: sum += (double)s->prompt_tokens; break;
        case TS_GEN: sum += (double)s->generation_tokens; break;
        case TS_RUNNING: sum += s->running; break;
        case TS_WAITING: sum += s->waiting; break;
        case TS_KV:
            sum += s->kv_used_blocks;
            total += s->kv_total_blocks;
            break;
        case TS_PINNED:
            if (ts->roles && ts->roles[e] == KVSIM_TS_PREFILL)
                sum += s->pinned_blocks;
            break;
        }
    }
    return what == TS_KV ? 100.0 * ratio(sum, total) : sum;
}

/*
 * The time series downsampled to at most MAX_POINTS points: each point covers `group`
 * consecutive intervals and sits at the end of the last; token counts become rates over the
 * covered time, gauges are averaged. x is in s from the origin.
 */
struct ts_points {
    size_t n, group;
    double *x, *y[2];
};

static int ts_points(const struct kvsim_timeseries *ts, const enum ts_metric *what, size_t nw,
                     struct ts_points *p)
{
    uint32_t ni = ts->num_intervals;
    p->group = (ni + MAX_POINTS - 1) / MAX_POINTS;
    p->n = (ni + p->group - 1) / p->group;
    p->x = malloc((1 + nw) * p->n * sizeof *p->x);
    if (p->x == NULL)
        return -ENOMEM;
    double interval_s = (double)ts->interval_ns / 1e9;
    for (size_t w = 0; w < nw; w++)
        p->y[w] = p->x + (w + 1) * p->n;
    for (size_t j = 0; j < p->n; j++) {
        uint32_t k0 = (uint32_t)(j * p->group), k1 = k0 + (uint32_t)p->group;
        if (k1 > ni)
            k1 = ni;
        p->x[j] = (double)k1 * interval_s;
        for (size_t w = 0; w < nw; w++) {
            double sum = 0.0;
            for (uint32_t k = k0; k < k1; k++)
                sum += ts_value(ts, k, what[w]);
            bool rate = what[w] == TS_PROMPT || what[w] == TS_GEN;
            p->y[w][j] = ratio(sum, rate ? (double)(k1 - k0) * interval_s : (double)(k1 - k0));
        }
    }
    return 0;
}

#define NO_TS "No time series was recorded for this run"

/* One time chart of up to two metrics (a figure with its id whether or not ts is there). */
static int time_chart(FILE *f, const struct kvsim_timeseries *ts, const char *id, const char *title,
                      const char *ylabel, const enum ts_metric *what, const char *const *labels,
                      size_t nw, double y_max)
{
    static const char *const colors[2] = {COLOR_A, COLOR_B};
    struct chart c = {.id = id,
                      .xlabel = "time (s)",
                      .ylabel = ylabel,
                      .y_max = y_max,
                      .area = nw == 1,
                      .empty = NO_TS};
    struct ts_points p = {0};
    struct series s[2] = {{0}};
    char note[96] = "";
    bool have = ts != NULL && ts->num_intervals > 0 && ts->num_engines > 0 && ts->interval_ns > 0;
    if (have) {
        int rc = ts_points(ts, what, nw, &p);
        if (rc)
            return rc;
        for (size_t w = 0; w < nw; w++)
            s[w] = (struct series){labels[w], colors[w], p.x, p.y[w], p.n};
        if (p.group > 1)
            snprintf(note, sizeof note, "each point: %zu intervals of %.6g ms", p.group,
                     (double)ts->interval_ns / 1e6);
        else
            snprintf(note, sizeof note, "intervals of %.6g ms", (double)ts->interval_ns / 1e6);
    }
    figure_open(f, title, note);
    line_chart(f, &c, s, have ? nw : 0); /* without ts: the chart's frame says so */
    figure_close(f);
    free(p.x);
    return 0;
}

static int time_charts(FILE *f, const struct kvsim_timeseries *ts)
{
    static const enum ts_metric thr[2] = {TS_PROMPT, TS_GEN}, queue[2] = {TS_RUNNING, TS_WAITING},
                                kv[1] = {TS_KV};
    static const char *const thr_l[2] = {"prompt", "generation"},
                             *const queue_l[2] = {"running", "waiting"},
                             *const kv_l[1] = {"KV used"};
    int rc =
        time_chart(f, ts, "chart-throughput", "Token throughput", "tokens/s", thr, thr_l, 2, 0);
    if (rc == 0)
        rc = time_chart(f, ts, "chart-queue", "Queue depth", "requests", queue, queue_l, 2, 0);
    if (rc == 0)
        rc = time_chart(f, ts, "chart-kv-usage", "KV cache usage", "blocks used (%)", kv, kv_l, 1,
                        100);
    return rc;
}

/* ---- per-engine load ------------------------------------------------------------------------ */

/* The numbers behind the bars, beside them. */
static void engine_table(FILE *f, const struct kvsim_report *r)
{
    if (r->per_engine == NULL || r->num_per_engine == 0)
        return;
    fputs("<div class=\"scroll\"><table id=\"table-engines\" class=\"stats\">\n<thead><tr>", f);
    static const char *const cols[] = {"engine",     "role",    "completed", "input tok",
                                       "output tok", "reuse",   "busy s",    "KV mean",
                                       "KV peak",    "preempt", "rejected"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        fprintf(f, "<th scope=\"col\">%s</th>", cols[i]);
    fputs("</tr></thead>\n<tbody>\n", f);
    for (uint32_t e = 0; e < r->num_per_engine; e++) {
        const struct kvsim_engine_summary *s = &r->per_engine[e];
        fprintf(f,
                "<tr><th scope=\"row\">%" PRIu32 "</th><td>%s</td><td>%" PRIu64 "</td><td>%" PRIu64
                "</td><td>%" PRIu64 "</td><td>%.1f %%</td><td>%.2f</td><td>%.1f %%</td>"
                "<td>%.1f %%</td><td>%" PRIu64 "</td><td>%" PRIu64 "</td></tr>\n",
                e,
                s->role == KVSIM_TS_PREFILL  ? "prefill"
                : s->role == KVSIM_TS_DECODE ? "decode"
                                             : "aggregated",
                s->completed, s->input_tokens, s->output_tokens,
                100.0 * ratio((double)s->cached_tokens, (double)s->input_tokens), fin(s->busy_s),
                100.0 * fin(s->mean_kv_usage), 100.0 * fin(s->peak_kv_usage), s->preemptions,
                s->rejected);
    }
    fputs("</tbody>\n</table></div>\n", f);
}

static void engine_bars(FILE *f, const struct kvsim_report *r)
{
    uint32_t n = r->per_engine ? r->num_per_engine : 0;
    const int row = 40, top = 30, x0 = 110, bar_w = 330;
    int h = n ? top + (int)n * row + 8 : CHART_H;
    figure_open(f, "Engines", "completed requests and busy seconds, relative to the busiest");
    svg_open(f, "chart-engines", CHART_W, h);
    if (n == 0) {
        chart_message(f, "No per-engine data in this report");
        fputs("</svg>\n", f);
        figure_close(f);
        return;
    }
    double max_done = 0, max_busy = 0;
    for (uint32_t e = 0; e < n; e++) {
        max_done = fmax(max_done, (double)r->per_engine[e].completed);
        max_busy = fmax(max_busy, fin(r->per_engine[e].busy_s));
    }
    fprintf(f,
            "<rect x=\"%d\" y=\"8\" width=\"12\" height=\"8\" rx=\"1\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"16\">completed requests</text>"
            "<rect x=\"%d\" y=\"8\" width=\"12\" height=\"8\" rx=\"1\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"16\">busy seconds</text>"
            "<text x=\"%d\" y=\"16\" text-anchor=\"end\">KV mean / peak</text>\n",
            x0, COLOR_A, x0 + 16, x0 + 150, COLOR_B, x0 + 166, CHART_W - 8);
    for (uint32_t e = 0; e < n; e++) {
        const struct kvsim_engine_summary *s = &r->per_engine[e];
        int y = top + (int)e * row;
        const char *role = s->role == KVSIM_TS_PREFILL  ? " prefill"
                           : s->role == KVSIM_TS_DECODE ? " decode"
                                                        : "";
        double wd = bar_w * ratio((double)s->completed, max_done);
        double wb = bar_w * ratio(fin(s->busy_s), max_busy);
        fprintf(f, "<text x=\"8\" y=\"%d\">engine %" PRIu32 "%s</text>\n", y + 17, e, role);
        fprintf(f,
                "<rect class=\"track\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"12\"/>"
                "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"12\" rx=\"1\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\">%" PRIu64 "</text>\n",
                x0, y, bar_w, x0, y, wd, COLOR_A, x0 + bar_w + 6, y + 10, s->completed);
        fprintf(f,
                "<rect class=\"track\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"12\"/>"
                "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"12\" rx=\"1\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\">%.2f s</text>\n",
                x0, y + 15, bar_w, x0, y + 15, wb, COLOR_B, x0 + bar_w + 6, y + 25, fin(s->busy_s));
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.1f %% / %.1f %%</text>\n",
                CHART_W - 8, y + 17, 100.0 * fin(s->mean_kv_usage), 100.0 * fin(s->peak_kv_usage));
    }
    fputs("</svg>\n", f);
    figure_close(f);
}

/* ---- disaggregated serving ------------------------------------------------------------------ */

static int disagg_section(FILE *f, const struct kvsim_report *r, const struct kvsim_metrics *m,
                          const struct kvsim_timeseries *ts)
{
    const struct kvsim_disagg_summary *d = &r->disagg;
    fputs("<section>\n<h2>Disaggregated serving</h2>\n<p class=\"lead\">", f);
    fprintf(f,
            "%" PRIu32 " prefill + %" PRIu32 " decode engines; %" PRIu64 " handoffs (%" PRIu64
            " completed, %" PRIu64 " aborted, %" PRIu64 " under way); %.3f GB of KV (%" PRIu64
            " tokens) transferred; %.1f pinned block-seconds, peak %" PRIu32
            " blocks on one prefill engine; %" PRIu64 " epochs.</p>\n",
            d->prefill_engines, d->decode_engines, d->handoffs, d->completed, d->aborted,
            d->pending, (double)d->transferred_bytes / 1e9, d->transferred_tokens,
            fin(d->pinned_block_seconds), d->peak_pinned_blocks, d->epochs);
    stats_head(f, "table-disagg");
    stats_row(f, "Pin", "ms", &d->pin);
    stats_row(f, "Transfer", "ms", &d->transfer);
    stats_row(f, "Decode wait", "ms", &d->decode_wait);
    stats_foot(f);
    fputs("<div class=\"charts\">\n", f);
    uint32_t num = m ? kvsim_metrics_num_requests(m) : 0;
    double *vals = malloc((num ? num : 1) * sizeof *vals);
    if (vals == NULL)
        return -ENOMEM;
    int rc = cdf_chart(f, "chart-pin-cdf", "Pin duration", "source pinned (ms)", vals,
                       m ? collect(m, LAT_PIN, vals) : 0, 0, "No handoffs");
    free(vals);
    static const enum ts_metric pin[1] = {TS_PINNED};
    static const char *const pin_l[1] = {"pinned blocks"};
    if (rc == 0)
        rc = time_chart(f, ts, "chart-pinned", "Pinned blocks on prefill engines", "blocks", pin,
                        pin_l, 1, 0);
    fputs("</div>\n</section>\n", f);
    return rc;
}

/* ---- the page ------------------------------------------------------------------------------- */

static const char css[] =
    ":root{--fg:#1f2937;--muted:#6b7280;--line:#e5e7eb;--bg:#ffffff;--panel:#f9fafb}\n"
    "*{box-sizing:border-box}\n"
    "body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.5 system-ui,-apple-system,"
    "'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif}\n"
    "main{max-width:1240px;margin:0 auto;padding:28px 24px 48px}\n"
    "header{border-bottom:1px solid var(--line);padding-bottom:14px;margin-bottom:8px}\n"
    "h1{font-size:24px;margin:0 0 4px;font-weight:650;word-break:break-all}\n"
    "h1 small{font-weight:400;color:var(--muted);font-size:15px}\n"
    ".meta{color:var(--muted);margin:0}.meta b{color:var(--fg);font-weight:600}\n"
    "h2{font-size:17px;font-weight:650;margin:28px 0 10px}\n"
    "section{margin:0}\n"
    ".lead{margin:0 0 10px;color:#374151}\n"
    "table{border-collapse:collapse;font-variant-numeric:tabular-nums}\n"
    "th,td{padding:5px 10px;border-bottom:1px solid var(--line);text-align:left;"
    "vertical-align:top}\n"
    "table.kv{width:100%}table.kv th{font-weight:500;color:#374151;width:50%}\n"
    "table.kv tr.sub th{padding-left:26px;color:var(--muted);font-weight:400}\n"
    "table.stats{width:100%;font-size:13px}table.stats th,table.stats td{padding:5px 7px}\n"
    "table.stats th[scope=col]{background:var(--panel);font-weight:600;font-size:12px;"
    "color:#374151;text-align:right;white-space:nowrap}\n"
    "table.stats th[scope=col]:first-child,table.stats th[scope=col]:nth-child(2)"
    "{text-align:left}\n"
    "table.stats td{text-align:right}table.stats td.unit{text-align:left;color:var(--muted)}\n"
    "table.stats th[scope=row]{font-weight:600}\n"
    "table.stats tr.total th,table.stats tr.total td{font-weight:600}\n"
    "#table-slo{width:auto}#table-slo td,#table-slo th[scope=col]{text-align:left}\n"
    ".cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:0 40px;"
    "align-items:start}\n"
    ".scroll{overflow-x:auto}\n"
    "table.config td{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;"
    "font-size:12.5px;word-break:break-all}\n"
    "table.config th{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;"
    "font-size:12.5px;font-weight:400;width:36%}\n"
    "table.config tr.group th{background:var(--panel);font-family:inherit;font-weight:600;"
    "color:var(--fg)}\n"
    "details summary{cursor:pointer;font-weight:600;margin:8px 0}\n"
    ".charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:18px}\n"
    "figure{margin:0;padding:12px 14px 8px;border:1px solid var(--line);border-radius:8px;"
    "background:var(--bg)}\n"
    "figcaption{font-weight:600;margin-bottom:4px}\n"
    "figcaption .note{font-weight:400;color:var(--muted);font-size:12px;margin-left:6px}\n"
    "svg.chart{display:block;width:100%;height:auto;max-width:720px}\n"
    "svg text{font-size:11px;fill:#4b5563}\n"
    "svg text.label{font-size:12px;fill:#374151}\n"
    "svg text.msg{font-size:13px;fill:var(--muted)}\n"
    "svg text.slo{font-size:11px;font-weight:600;paint-order:stroke;stroke:#fff;"
    "stroke-width:3px}\n"
    "svg .plot{fill:#fcfcfd;stroke:var(--line)}\n"
    "svg .grid{stroke:#eef0f3}svg .tick,svg .axis{stroke:#9ca3af}\n"
    "svg .line{fill:none;stroke-width:2;stroke-linejoin:round;stroke-linecap:round}\n"
    "svg .area{fill-opacity:.12;stroke:none}\n"
    "svg line.slo{stroke-width:1.5;stroke-dasharray:5 4}\n"
    "svg .track{fill:#f3f4f6}\n"
    "footer{margin-top:36px;color:var(--muted);font-size:12px}\n";

static int render(FILE *f, const struct kvsim_report *r, const struct kvsim_metrics *m,
                  const struct kvsim_timeseries *ts)
{
    const char *trace = r->trace[0] ? r->trace : "(unnamed trace)";
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
          f);
    esc(f, trace);
    fprintf(f, " - kvsim report</title>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n", css);

    /* The version string of kvsim_version(), which this layer may not include (kvsim.h). */
    fputs("<header>\n<h1>", f);
    esc(f, trace);
    fputs(" <small>kvsim report</small></h1>\n<p class=\"meta\"><b>kvsim " KVSIM_VERSION_STRING
          "</b> &middot; ",
          f);
    if (r->disagg.enabled)
        fprintf(f, "<b>%" PRIu32 "</b> engines (%" PRIu32 " prefill + %" PRIu32 " decode)",
                r->num_engines, r->disagg.prefill_engines, r->disagg.decode_engines);
    else if (r->data_parallel_size > 1)
        fprintf(f,
                "<b>%" PRIu32 "</b> engines (%" PRIu32 " &times; data parallel %" PRIu32
                ", vLLM's DP load balancer%s)",
                r->num_engines, r->num_engines / r->data_parallel_size, r->data_parallel_size,
                r->timing.lockstep ? ", ranks in lockstep" : "");
    else
        fprintf(f, "<b>%" PRIu32 "</b> engines", r->num_engines);
    fprintf(f, " &middot; <b>%" PRIu64 "</b> GPU%s", r->gpus, r->gpus == 1 ? "" : "s");
    if (r->tensor_parallel_size > 1)
        fprintf(f, " (tensor parallel %" PRIu32 ")", r->tensor_parallel_size);
    fputs(" &middot; router <b>", f);
    esc(f, r->router[0] ? r->router : "-");
    fprintf(f, "</b> &middot; seed %" PRIu64, r->seed);
    if (r->vllm_contract)
        fprintf(f, " &middot; vLLM contract %" PRIu32, r->vllm_contract);
    fprintf(f, " &middot; %" PRIu64 " requests</p>\n</header>\n", r->num_requests);

    /* the SLOs beside the summary: both are short two-column tables */
    fputs("<div class=\"cols\">\n<section>\n<h2>Summary</h2>\n", f);
    summary_table(f, r);
    fputs("</section>\n", f);
    if (r->slo.enabled) {
        fputs("<section>\n<h2>Service-level objectives</h2>\n", f);
        slo_table(f, r);
        fputs("</section>\n", f);
    }
    fputs("</div>\n<section>\n<h2>Latency</h2>\n", f);
    latency_table(f, r);
    fputs("</section>\n", f);

    fputs("<section>\n<h2>Latency distributions</h2>\n<p class=\"lead\">Cumulative share of "
          "completed requests at or below each latency.</p>\n<div class=\"charts\">\n",
          f);
    int rc = cdf_charts(f, r, m);
    fputs("</div>\n</section>\n", f);
    if (rc)
        return rc;

    fputs("<section>\n<h2>Over time</h2>\n<div class=\"charts\">\n", f);
    rc = time_charts(f, ts);
    fputs("</div>\n</section>\n", f);
    if (rc)
        return rc;

    fputs("<section>\n<h2>Engine load</h2>\n<div class=\"charts\">\n", f);
    engine_bars(f, r);
    engine_table(f, r);
    fputs("</div>\n</section>\n", f);

    if (r->disagg.enabled && (rc = disagg_section(f, r, m, ts)) != 0)
        return rc;

    fputs("<section>\n<h2>Configuration</h2>\n<details open>\n<summary>The run's settings, "
          "as in the JSON report</summary>\n",
          f);
    rc = config_table(f, r);
    fputs("</details>\n</section>\n<footer>Written by kvsim " KVSIM_VERSION_STRING
          ". Times are virtual (simulated).</footer>\n</main>\n</body>\n</html>\n",
          f);
    return rc;
}

/* ---- the file ------------------------------------------------------------------------------- */

int kvsim_report_write_html(const char *path, const struct kvsim_report *r,
                            const struct kvsim_metrics *m, const struct kvsim_timeseries *ts,
                            char *err, size_t errlen)
{
    struct kvsim_output o;
    int rc = kvsim_output_open(&o, path, err, errlen);
    if (rc)
        return rc;
    if (render(o.f, r, m, ts) != 0) {
        kvsim_output_discard(&o);
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory building the report", path);
        return -ENOMEM;
    }
    return kvsim_output_commit(&o, err, errlen);
}
