/*
 * soak_cmd.c - `kvsim soak [options]`: runs seeds through the soak (verify.h), prints each
 * failure and writes its scenario (checking that it replays the same way), then one summary
 * line.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvpool/base.h"
#include "runtime/verify/verify.h"

/* Whether failing scenarios could be written under dir, checked before any seed runs (and
 * without creating anything): dir is a writable directory, or the nearest part of it that
 * exists is. Returns 0 or a negative errno. */
static int check_out_dir(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return -ENAMETOOLONG;
    for (;;) {
        struct stat st;
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return -ENOTDIR;
            return access(p, W_OK | X_OK) == 0 ? 0 : -errno;
        }
        if (errno != ENOENT)
            return -errno;
        char *slash = strrchr(p, '/');
        if (!slash) /* a relative name: the current directory */
            return check_out_dir(".");
        if (slash == p) /* under the root */
            return check_out_dir("/");
        *slash = 0;
    }
}

static void soak_usage(FILE *f)
{
    fprintf(f, "usage: kvsim soak [[--first-seed S] --seeds N | --seed S] [--matrix small|full]\n"
               "                  [--out DIR]\n"
               "                  [--set NAME=VALUE]... [--checks LIST] [--legacy-partial-alloc]\n"
               "                  [--vllm-contract N] [--keep] [--quiet]\n"
               "\n"
               "Seeded randomized runs of the scheduler core (in part of the seeds with G2/G3\n"
               "offload tiers, in virtual time): each seed picks a configuration from the matrix\n"
               "and builds a scenario op by op, checking the invariants, the liveness rule and\n"
               "the #49675 progress rule after every op (docs/soak.md). A failing seed's\n"
               "scenario is written to DIR/soak-seed<S>.json; `kvsim conform` replays it and\n"
               "`kvsim minimize` shrinks it.\n"
               "\n"
               "  --seeds N          run N seeds (default 200), from 1 or --first-seed\n"
               "  --first-seed S     the first seed of --seeds: seeds S..S+N-1 (default 1), to\n"
               "                     try a fresh range\n"
               "  --seed S           run seed S only\n"
               "  --matrix M         small (CI, default) or full (nightly)\n"
               "  --out DIR          where failing scenarios go (default ./soak-failures)\n"
               "  --set NAME=VALUE   fix one matrix dimension for every seed (repeatable), e.g.\n"
               "                     --set preempted_victim_guard=false\n"
               "  --checks LIST      the rules checked: all (default), none, or a comma list of\n"
               "                     invariants, liveness, progress (e.g. --checks liveness)\n"
               "  --legacy-partial-alloc\n"
               "                     reintroduce the old partial allocation (issue 6; the same as\n"
               "                     --set legacy_partial_alloc=true)\n"
               "  --vllm-contract N  the fidelity contract with upstream vLLM the scheduler\n"
               "                     follows (docs/fidelity/vllm.md): 1 (vLLM main of\n"
               "                     2026-07-24) or 2 (of 2026-09, the default); written into\n"
               "                     each scenario's config as \"contract\"\n"
               "  --show-matrix      print the matrix dimensions and exit\n"
               "  --keep             write every seed's scenario, not only failing ones\n"
               "  --quiet            no summary line (failures are still printed)\n"
               "  -h, --help         print this help\n"
               "\n"
               "A failure that matches the signature of an expected class (a dead end vLLM\n"
               "reaches as well: docs/fidelity/findings.md) is an expected finding: counted by\n"
               "class after the summary, not printed, its scenario written only with --keep.\n"
               "\n"
               "Exit status: 0 no unexpected failure; 1 an unexpected failure, or a scenario\n"
               "that could not be written; 2 usage error or bad input (an --out that cannot be\n"
               "written, checked before any seed runs).\n");
}

/* The dead ends of one structure (kvsim_conform_result.shape) and how many seeds end in it:
 * printed after the summary, most seeds first. The first SOAK_MAX_SHAPES shapes are kept; the
 * rest count under the last one's "other shapes". */
#define SOAK_MAX_SHAPES 32
struct shape_count {
    char shape[192];
    uint64_t seeds, first_seed;
};

static void tally_shape(struct shape_count *t, size_t *n, const char *shape, uint64_t seed)
{
    size_t i = 0;
    while (i < *n && strcmp(t[i].shape, shape) != 0)
        i++;
    if (i == *n) {
        if (*n == SOAK_MAX_SHAPES) {
            i = *n - 1;
            snprintf(t[i].shape, sizeof t[i].shape, "other shapes");
        } else {
            snprintf(t[i].shape, sizeof t[i].shape, "%s", shape);
            t[i].seeds = 0;
            t[i].first_seed = seed;
            (*n)++;
        }
    }
    t[i].seeds++;
    while (i > 0 && t[i].seeds > t[i - 1].seeds) { /* most seeds first, stable among equals */
        struct shape_count x = t[i];
        t[i] = t[i - 1];
        t[i - 1] = x;
        i--;
    }
}

/* The seeds of one expected class (kvsim_soak_classes). */
#define SOAK_MAX_CLASSES 16
struct class_count {
    uint64_t seeds, first_seed;
};

/* Writes a failing (or --keep) seed's scenario and, for a failure, checks that the file replays
 * to the same verdict. Returns 0, or 1 (reported on stdout/stderr). */
static int save_seed(const char *dir, uint64_t seed, json_t *doc,
                     const struct kvsim_conform_result *res, bool failed)
{
    char path[4096];
    int rc = cli_make_dirs(dir);
    if (rc == 0 &&
        snprintf(path, sizeof path, "%s/soak-seed%" PRIu64 ".json", dir, seed) >= (int)sizeof path)
        rc = -ENAMETOOLONG;
    if (rc == 0)
        rc = kvsim_scenario_write_file(doc, path);
    if (rc) {
        fprintf(stderr, "kvsim soak: cannot write the scenario of seed %" PRIu64 " to %s: %s\n",
                seed, dir, kvsim_strerror(rc));
        return 1;
    }
    if (!failed)
        return 0;
    json_error_t jerr;
    json_t *back;
    (void)kvsim_json_load_file(path, JSON_REJECT_DUPLICATES, &back, &jerr);
    struct kvsim_conform_result again;
    int vr = back ? kvsim_conform_run_json(back, NULL, &again, NULL) : 0;
    json_decref(back);
    if (!back || vr == 0 || strcmp(again.message, res->message) != 0) {
        fprintf(stdout, "soak: seed %" PRIu64 ": %s does NOT replay the same way: %s\n", seed, path,
                back ? (vr == 0 ? "it passes" : again.message) : jerr.text);
        return 1;
    }
    printf("soak: seed %" PRIu64 ": scenario %s (kvsim conform replays it, kvsim minimize "
           "shrinks it)\n",
           seed, path);
    return 0;
}

/* The options of `kvsim soak`. */
struct soak_args {
    uint64_t nseeds, first;
    bool have_seeds, have_seed, have_first, keep, quiet;
    enum kvsim_soak_matrix matrix;
    const char *out;
    struct kvsim_soak_overrides ov;
};

enum {
    O_SEEDS = 256,
    O_SEED,
    O_FIRST,
    O_MATRIX,
    O_OUT,
    O_SET,
    O_CHECKS,
    O_LEGACY,
    O_SHOW,
    O_KEEP,
    O_QUIET,
    O_CONTRACT
};

/* Parses the options into *a. Returns 0, 1 (done: help or the matrix printed), -EINVAL. */
static int parse_soak_args(struct cli_parser *p, struct soak_args *a)
{
    static const char *const matrices[] = {"small", "full"};
    int c, choice;
    while ((c = cli_next(p)) > 0) {
        char err[256];
        int rc = 0;
        switch (c) {
        case O_SEEDS:
            rc = cli_u64(p, 1, 100000000, &a->nseeds);
            a->have_seeds = true;
            break;
        case O_SEED:
            rc = cli_u64(p, 0, UINT64_MAX, &a->first);
            a->have_seed = true;
            break;
        case O_FIRST:
            rc = cli_u64(p, 0, UINT64_MAX, &a->first);
            a->have_first = true;
            break;
        case O_MATRIX:
            rc = cli_choice(p, matrices, 2, &choice);
            a->matrix = choice == 1 ? KVSIM_SOAK_FULL : KVSIM_SOAK_SMALL;
            break;
        case O_OUT:
            if (!*p->arg)
                return cli_error(p, "option --out: empty directory name");
            a->out = p->arg;
            break;
        case O_SET:
        case O_CHECKS:
            if ((c == O_SET ? kvsim_soak_parse_set(&a->ov, p->arg, err, sizeof err)
                            : kvsim_soak_parse_checks(&a->ov, p->arg, err, sizeof err)) != 0)
                return cli_error(p, "%s", err);
            break;
        case O_LEGACY:
            a->ov.set[KVSIM_DIM_LEGACY_PARTIAL_ALLOC] = true;
            a->ov.value[KVSIM_DIM_LEGACY_PARTIAL_ALLOC] = 1;
            break;
        case O_CONTRACT:
            rc = cli_u32(p, SCHED_CONTRACT_MIN, SCHED_CONTRACT_LATEST, &a->ov.contract);
            break;
        case O_SHOW: kvsim_soak_print_matrix(stdout); return 1;
        case O_KEEP: a->keep = true; break;
        case O_QUIET: a->quiet = true; break;
        case 'h': soak_usage(stdout); return 1;
        }
        if (rc)
            return rc;
    }
    if (c < 0) {
        soak_usage(stderr);
        return c;
    }
    if (cli_optind() < p->argc)
        return cli_error(p, "unexpected argument '%s'", p->argv[cli_optind()]);
    if (a->have_seeds && a->have_seed)
        return cli_error(p, "options --seeds and --seed exclude each other");
    if (a->have_first && a->have_seed)
        return cli_error(p, "options --first-seed and --seed exclude each other");
    if (a->nseeds - 1 > UINT64_MAX - a->first)
        return cli_error(p,
                         "options --first-seed %" PRIu64 " and --seeds %" PRIu64
                         ": the last seed would pass %" PRIu64,
                         a->first, a->nseeds, UINT64_MAX);
    return 0;
}

int cli_soak_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"seeds", required_argument, NULL, O_SEEDS},
        {"seed", required_argument, NULL, O_SEED},
        {"first-seed", required_argument, NULL, O_FIRST},
        {"matrix", required_argument, NULL, O_MATRIX},
        {"out", required_argument, NULL, O_OUT},
        {"set", required_argument, NULL, O_SET},
        {"show-matrix", no_argument, NULL, O_SHOW},
        {"checks", required_argument, NULL, O_CHECKS},
        {"legacy-partial-alloc", no_argument, NULL, O_LEGACY},
        {"keep", no_argument, NULL, O_KEEP},
        {"quiet", no_argument, NULL, O_QUIET},
        {"vllm-contract", required_argument, NULL, O_CONTRACT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct soak_args a = {.nseeds = 200, .first = 1, .out = "soak-failures"};
    struct cli_parser p;
    cli_begin(&p, "kvsim soak", argc, argv, opts, "h");
    int prc = parse_soak_args(&p, &a);
    if (prc)
        return prc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    uint64_t nseeds = a.nseeds, first = a.first;
    bool keep = a.keep, quiet = a.quiet;
    enum kvsim_soak_matrix matrix = a.matrix;
    const char *out = a.out;
    struct kvsim_soak_overrides ov = a.ov;
    if (a.have_seed)
        nseeds = 1;
    int orc = check_out_dir(out);
    if (orc) {
        cli_error(&p, "option --out: %s: cannot write scenarios there: %s", out,
                  kvsim_strerror(orc));
        return CLI_EXIT_USAGE;
    }
    struct kvsim_conform_stats total = {0};
    uint64_t failed = 0, expected = 0, unwritten = 0;
    size_t nclasses;
    const struct kvsim_soak_class *classes = kvsim_soak_classes(&nclasses);
    struct class_count found[SOAK_MAX_CLASSES] = {{0}};
    if (nclasses > SOAK_MAX_CLASSES)
        return CLI_EXIT_FAILED; /* a table this file was not built for: fix SOAK_MAX_CLASSES */
    struct shape_count shapes[SOAK_MAX_SHAPES];
    size_t nshapes = 0;
    int64_t t0 = base_monotonic_ns(), last_shown = t0;
    /* Progress on a terminal: seeds done, failures, elapsed and remaining time (stderr). */
    bool progress = !quiet && isatty(STDERR_FILENO) && nseeds > 1;
    for (uint64_t k = 0; k < nseeds; k++) {
        int64_t now = base_monotonic_ns();
        if (progress && (now - last_shown >= 200000000 || k == 0)) {
            last_shown = now;
            double el = (double)(now - t0) / 1e9;
            char es[48], eta[48];
            base_format_wall(es, sizeof es, el);
            if (k)
                base_format_wall(eta, sizeof eta, el * (double)(nseeds - k) / (double)k);
            else
                snprintf(eta, sizeof eta, "?");
            fprintf(stderr,
                    "\rsoak: %" PRIu64 "/%" PRIu64 " seeds, %" PRIu64
                    " failed, elapsed %s, eta %s  ",
                    k, nseeds, failed, es, eta);
        }
        uint64_t seed = first + k;
        json_t *doc;
        struct kvsim_conform_result res;
        struct kvsim_conform_stats st;
        int rc = kvsim_soak_run_seed(seed, matrix, &ov, &doc, &res, &st);
        if (rc < 0) {
            fprintf(stderr, "kvsim soak: seed %" PRIu64 ": %s\n", seed, kvsim_strerror(rc));
            return CLI_EXIT_FAILED;
        }
        kvsim_conform_stats_add(&total, &st);
        const struct kvsim_soak_class *cls = rc == 1 ? kvsim_soak_classify(&res) : NULL;
        if (cls) { /* an expected finding: counted by class, its scenario written on --keep */
            struct class_count *cc = &found[cls - classes];
            if (cc->seeds++ == 0)
                cc->first_seed = seed;
            expected++;
        } else if (rc == 1) {
            failed++;
            if (progress) /* the FAIL line replaces the progress line */
                fprintf(stderr, "\r%60s\r", "");
            printf("FAIL seed %" PRIu64 " [%s]: %s\n", seed, res.kind, res.message);
            if (res.shape[0])
                tally_shape(shapes, &nshapes, res.shape, seed);
        }
        /* A scenario that cannot be written (or does not replay the same way) fails the run
         * too, counted apart from the seeds that failed. */
        if (((rc == 1 && !cls) || keep) && save_seed(out, seed, doc, &res, rc == 1) != 0)
            unwritten++;
        json_decref(doc);
        fflush(stdout);
    }
    if (progress)
        fprintf(stderr, "\r%60s\r", "");
    double dt = (double)(base_monotonic_ns() - t0) / 1e9;
    char off[512] = "";
    if (total.offload_runs)
        snprintf(off, sizeof off,
                 "; offload in %" PRIu64 " seeds: %" PRIu64
                 " advances over %.3f virtual s, %" PRIu64 " blocks written to G2, %" PRIu64
                 " loads (%" PRIu64 " failed), %" PRIu64 " blocked on offload, %" PRIu64
                 " retry_now, up to %" PRIu64 " held blocks",
                 total.offload_runs, total.advances, (double)total.virtual_ns * 1e-9,
                 total.written_g2, total.loads, total.failed_loads, total.blocked_on_offload,
                 total.retry_now, total.max_held_blocks);
    char dis[512] = "";
    if (total.disagg_runs)
        snprintf(dis, sizeof dis,
                 "; two engines in %" PRIu64 " seeds: %" PRIu64 " handoffs, %" PRIu64
                 " pins (%" PRIu64 " of no block), %" PRIu64 " routes (%" PRIu64 " late), %" PRIu64
                 " reservations, %" PRIu64 " completed, %" PRIu64 " aborted (%" PRIu64
                 " by timeout), %" PRIu64 " tokens transferred, up to %" PRIu64 " pinned blocks",
                 total.disagg_runs, total.handoffs, total.pins, total.unpinned_prefills,
                 total.routes, total.late_routes, total.reservations, total.completed_handoffs,
                 total.aborted_handoffs, total.expired_pins, total.transferred_tokens,
                 total.max_pinned_blocks);
    /* The expected findings, named with their counts in the summary line. */
    char exp[1024] = "";
    size_t el = 0;
    if (expected) {
        el = (size_t)snprintf(exp, sizeof exp, ", %" PRIu64 " expected finding%s (", expected,
                              expected == 1 ? "" : "s");
        const char *sep = "";
        for (size_t i = 0; i < nclasses && el < sizeof exp; i++)
            if (found[i].seeds) {
                el += (size_t)snprintf(exp + el, sizeof exp - el, "%s%s %" PRIu64, sep,
                                       classes[i].name, found[i].seeds);
                sep = ", ";
            }
        if (el < sizeof exp)
            snprintf(exp + el, sizeof exp - el, ")");
    }
    char unw[96] = "";
    if (unwritten)
        snprintf(unw, sizeof unw, "; %" PRIu64 " scenarios not written or not replayed the same",
                 unwritten);
    if (!quiet)
        printf("soak: %" PRIu64 " seeds (matrix %s), %" PRIu64 " ops, %" PRIu64
               " transitions checked in %.2f s (%.0f transitions/s); %" PRIu64
               " preemptions (%.2f per 1k scheduled tokens, %" PRIu64
               " futile, longest cascade %" PRIu64 ", %" PRIu64
               " zero-progress schedules)%s%s; %" PRIu64 " unexpected failure%s%s%s\n",
               nseeds, kvsim_soak_matrix_name(matrix), total.ops, total.transitions, dt,
               dt > 0 ? (double)total.transitions / dt : 0.0, total.preemptions,
               total.scheduled_tokens
                   ? 1000.0 * (double)total.preemptions / (double)total.scheduled_tokens
                   : 0.0,
               total.futile_preemptions, total.max_futile_in_one_schedule,
               total.zero_progress_schedules, off, dis, failed, failed == 1 ? "" : "s", exp, unw);
    for (size_t i = 0; !quiet && i < nclasses; i++)
        if (found[i].seeds)
            printf("soak: expected finding %s: %" PRIu64 " seed%s (first %" PRIu64 ")\n",
                   classes[i].name, found[i].seeds, found[i].seeds == 1 ? "" : "s",
                   found[i].first_seed);
    for (size_t i = 0; !quiet && i < nshapes; i++)
        printf("soak: unexpected dead ends of shape \"%s\": %" PRIu64 " seed%s (first %" PRIu64
               ")\n",
               shapes[i].shape, shapes[i].seeds, shapes[i].seeds == 1 ? "" : "s",
               shapes[i].first_seed);
    return failed || unwritten ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}
