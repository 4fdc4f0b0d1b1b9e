/*
 * minimize_cmd.c - `kvsim minimize TRACE.json [-o OUT.json] [--max-runs N]`: shrinks a failing
 * scenario (verify.h, kvsim_minimize_scenario) and writes the result.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "kvpool/base.h"
#include "runtime/verify/verify.h"

static void minimize_usage(FILE *f)
{
    fprintf(f, "usage: kvsim minimize TRACE.json [-o OUT.json] [--max-runs N]\n"
               "\n"
               "Shrinks a failing scenario (a soak failure trace, or any scenario that fails)\n"
               "by delta debugging over its requests and its steps, keeping only candidates that\n"
               "fail with the same kind (same invariant rule, dead_end, futile_preemption,\n"
               "expect:<key>, scheduler_error, offload_error). Writes a scenario that\n"
               "`kvsim conform` fails the same way.\n"
               "\n"
               "  -o, --output FILE  where to write it (default: TRACE.min.json beside the\n"
               "                     input; '-' = standard output)\n"
               "  --max-runs N       stop after N candidate runs (default 50000)\n"
               "  -h, --help         print this help\n"
               "\n"
               "Exit status: 0 written; 1 the result could not be verified or written;\n"
               "2 usage error or bad input: a scenario that is not valid or does not fail, an\n"
               "output that cannot be written (checked before the work).\n");
}

/* The output path: -o's, or TRACE.min.json beside the input. Returns 0 or -ENAMETOOLONG. */
static int output_path(const char *path, const char *out, char *buf, size_t len)
{
    if (out)
        return snprintf(buf, len, "%s", out) < (int)len ? 0 : -ENAMETOOLONG;
    size_t n = strlen(path);
    size_t stem = n >= 5 && !strcmp(path + n - 5, ".json") ? n - 5 : n;
    return snprintf(buf, len, "%.*s.min.json", (int)stem, path) < (int)len ? 0 : -ENAMETOOLONG;
}

/* Parses the options. Returns 0 (path set), 1 (help printed) or -EINVAL. */
static int parse_minimize_args(struct cli_parser *p, const char **path, const char **out,
                               uint64_t *max_runs)
{
    int c;
    while ((c = cli_next(p)) > 0) {
        switch (c) {
        case 'o': *out = p->arg; break;
        case 'm':
            if (cli_u64(p, 1, UINT64_MAX, max_runs))
                return -EINVAL;
            break;
        case 'h': minimize_usage(stdout); return 1;
        }
    }
    if (c < 0) {
        minimize_usage(stderr);
        return c;
    }
    if (cli_optind() >= p->argc) {
        cli_error(p, "no scenario file given");
        minimize_usage(stderr);
        return -EINVAL;
    }
    if (cli_optind() + 1 < p->argc)
        return cli_error(p, "unexpected argument '%s' (one file at a time)",
                         p->argv[cli_optind() + 1]);
    *path = p->argv[cli_optind()];
    return 0;
}

int cli_minimize_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"max-runs", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct cli_parser p;
    const char *path = NULL, *out = NULL;
    uint64_t max_runs = 50000;
    cli_begin(&p, "kvsim minimize", argc, argv, opts, "o:h");
    int prc = parse_minimize_args(&p, &path, &out, &max_runs);
    if (prc)
        return prc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    char outbuf[4096];
    if (output_path(path, out, outbuf, sizeof outbuf)) {
        cli_error(&p, "%s: file name too long", path);
        return CLI_EXIT_USAGE;
    }
    out = outbuf;
    FILE *msg = strcmp(out, "-") ? stdout : stderr; /* keep stdout for the scenario */
    json_error_t jerr;
    json_t *doc;
    if (kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &doc, &jerr)) {
        if (jerr.line > 0)
            cli_error(&p, "%s: line %d, column %d: %s", path, jerr.line, jerr.column, jerr.text);
        else /* the text names the file and what went wrong (cannot open, too large, ...) */
            cli_error(&p, "%s", jerr.text);
        return CLI_EXIT_USAGE;
    }
    char err[1024];
    const struct kvsim_input_path scenario = {"the scenario", path, false};
    if (strcmp(out, "-") && /* before the work */
        (kvsim_output_check_inputs(out, &scenario, 1, err, sizeof err) ||
         kvsim_output_check(out, err, sizeof err))) {
        cli_error(&p, "option --output: %s", err);
        json_decref(doc);
        return CLI_EXIT_USAGE;
    }
    int64_t t0 = base_monotonic_ns();
    struct kvsim_minimize_result res;
    int rc = kvsim_minimize_scenario(doc, path, max_runs, &res);
    json_decref(doc);
    if (rc) {
        cli_error(&p, "%s", res.message);
        return rc == -EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAILED;
    }
    int wrc = strcmp(out, "-") ? kvsim_scenario_write_file(res.scenario, out)
                               : kvsim_scenario_write(res.scenario, stdout);
    json_decref(res.scenario);
    if (wrc) {
        cli_error(&p, "cannot write %s: %s", out, kvsim_strerror(wrc));
        return CLI_EXIT_FAILED;
    }
    fprintf(msg,
            "minimize: %s: kind %s: steps %zu -> %zu (%zu removed), requests %zu -> %zu (%zu "
            "removed), %" PRIu64 " runs in %.2f s\n",
            path, res.kind, res.steps_in, res.steps_out, res.steps_in - res.steps_out,
            res.requests_in, res.requests_out, res.requests_in - res.requests_out, res.runs,
            (double)(base_monotonic_ns() - t0) / 1e9);
    fprintf(msg, "minimize: wrote %s; it fails with: %s\n", strcmp(out, "-") ? out : "stdout",
            res.failure.message);
    if (res.shape[0]) /* kept by every candidate (verify.h) */
        fprintf(msg, "minimize: dead end of shape \"%s\", as the input's\n", res.shape);
    return CLI_EXIT_OK;
}
