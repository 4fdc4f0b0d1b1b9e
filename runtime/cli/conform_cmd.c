/*
 * conform_cmd.c - `kvsim conform [--trace] [--lenient] [--vllm-contract N] FILE...`: runs
 * scenario files through the scenario runner (verify.h), prints PASS, FAIL or INVALID per file
 * and "<N> passed, <M> failed" (", <K> invalid" when some are).
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "runtime/input/input.h"
#include "runtime/verify/verify.h"

/* Runs one file, printing its PASS/FAIL/INVALID line; contract > 0 replaces the file's config
 * key "contract". Returns its verdict. */
static enum kvsim_conform_verdict run_file(const char *path, bool trace, bool lenient,
                                           uint32_t contract)
{
    json_error_t jerr;
    json_t *root = NULL; /* bounded: a scenario file of at most KVSIM_INPUT_MAX_JSON_BYTES */
    kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &root, &jerr);
    struct kvsim_conform_result res;
    int rc;
    const char *name = path;
    if (!root) {
        rc = -EINVAL;
        memset(&res, 0, sizeof res);
        res.verdict = KVSIM_CONFORM_INVALID;
        if (jerr.line > 0)
            snprintf(res.message, sizeof res.message, "line %d, column %d: %s", jerr.line,
                     jerr.column, jerr.text);
        else { /* the text names the file (and the system error, or the size limit); the
                * FAIL line names it already */
            size_t n = strlen(path);
            const char *t = jerr.text;
            if (!strncmp(t, path, n) && t[n] == ':' && t[n + 1] == ' ')
                t += n + 2;
            snprintf(res.message, sizeof res.message, "%s", t);
        }
    } else {
        json_t *n = json_object_get(root, "name");
        if (json_is_string(n))
            name = json_string_value(n);
        json_t *cfg = json_object_get(root, "config");
        if (contract && !cfg)
            json_object_set_new(root, "config", cfg = json_object());
        if (contract && json_is_object(cfg))
            json_object_set_new(cfg, "contract", json_integer(contract));
        struct kvsim_conform_options opt = {.trace = trace, .lenient = lenient};
        rc = kvsim_conform_run_json(root, &opt, &res, NULL);
    }
    enum kvsim_conform_verdict verdict = rc == 0 ? KVSIM_CONFORM_PASS : res.verdict;
    if (verdict == KVSIM_CONFORM_PASS)
        printf("PASS %s\n", name);
    else if (verdict == KVSIM_CONFORM_INVALID)
        printf("INVALID %s: %s: %s\n", name, path, res.message);
    else
        printf("FAIL %s: %s\n", name, res.message);
    json_decref(root);
    return verdict;
}

static void conform_usage(FILE *out)
{
    fprintf(out,
            "usage: kvsim conform [--trace] [--lenient] [--vllm-contract N] FILE...\n"
            "\n"
            "Runs conformance scenarios (JSON, see docs/conformance.md) against the scheduler\n"
            "core and the G1 pool. Prints PASS/FAIL per file and '<N> passed, <M> failed'.\n"
            "\n"
            "  -t, --trace    print each step's observed decision as a JSON line\n"
            "  -l, --lenient  replay the workload, not the exact decisions: model outputs adapt\n"
            "                 to what each schedule scheduled (the minimizer's mode: sampled\n"
            "                 tokens for unscheduled requests are dropped, a request whose\n"
            "                 chunk sampled gets a token that stops nothing, references to\n"
            "                 unknown requests and outputs with no schedule are dropped)\n"
            "  --vllm-contract N  run every file under fidelity contract N instead of the\n"
            "                 one its config names (docs/fidelity/vllm.md; %d..%d, default %d)\n"
            "  -h, --help     print this help\n"
            "\n"
            "Exit status: 0 all passed; 1 a scenario failed (FAIL); 2 usage error or bad\n"
            "input: a file that cannot be read or is not a valid scenario (INVALID: nothing\n"
            "of it ran), which wins over 1.\n",
            SCHED_CONTRACT_MIN, SCHED_CONTRACT_LATEST, SCHED_CONTRACT_LATEST);
}

int cli_conform_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"trace", no_argument, NULL, 't'},
        {"lenient", no_argument, NULL, 'l'},
        {"vllm-contract", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct cli_parser p;
    bool trace = false, lenient = false;
    uint32_t contract = 0;
    int c;
    cli_begin(&p, "kvsim conform", argc, argv, opts, "tlh");
    while ((c = cli_next(&p)) > 0) {
        switch (c) {
        case 't': trace = true; break;
        case 'l': lenient = true; break;
        case 'c':
            if (cli_u32(&p, SCHED_CONTRACT_MIN, SCHED_CONTRACT_LATEST, &contract))
                return CLI_EXIT_USAGE;
            break;
        case 'h': conform_usage(stdout); return CLI_EXIT_OK;
        }
    }
    if (c < 0) {
        conform_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (cli_optind() >= argc) {
        cli_error(&p, "no scenario files given");
        conform_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    int counts[3] = {0}; /* by verdict */
    for (int i = cli_optind(); i < argc; i++) {
        counts[run_file(argv[i], trace, lenient, contract)]++;
        fflush(stdout);
    }
    int invalid = counts[KVSIM_CONFORM_INVALID];
    printf("%d passed, %d failed", counts[KVSIM_CONFORM_PASS], counts[KVSIM_CONFORM_FAIL]);
    if (invalid)
        printf(", %d invalid", invalid);
    printf("\n");
    return invalid ? CLI_EXIT_USAGE : counts[KVSIM_CONFORM_FAIL] ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}
