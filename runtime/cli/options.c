/*
 * options.c - the one option parser of the command line (cli.h): getopt_long with our own
 * messages, and strict readers for integers, numbers and choices.
 */
#include "runtime/cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cli_begin(struct cli_parser *p, const char *prog, int argc, char **argv,
               const struct option *opts, const char *shortopts)
{
    memset(p, 0, sizeof *p);
    p->prog = prog;
    p->argc = argc;
    p->argv = argv;
    p->opts = opts;
    p->shortopts = shortopts;
    optind = 0; /* 0, not 1: glibc re-reads the ordering mode (kvsim's main parsed with "+") */
    opterr = 0; /* our own messages, naming the option */
    /* vLLM's parser (FlexibleArgumentParser) takes --max_num_seqs for --max-num-seqs: so does
     * every kvsim command, the name's underscores read as dashes (not the value's). */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (!strncmp(argv[i], "--", 2))
            for (char *c = argv[i] + 2; *c && *c != '='; c++)
                if (*c == '_')
                    *c = '-';
}

/* The long options that begin with name[0..len) as "--a, --b" in list (truncated to size).
 * Returns how many there are. */
static int cli_prefix_matches(const struct cli_parser *p, const char *name, size_t len, char *list,
                              size_t size)
{
    size_t used = 0;
    int n = 0;
    list[0] = 0;
    for (const struct option *c = p->opts; c->name; c++) {
        if (strncmp(c->name, name, len) != 0)
            continue;
        if (used < size)
            used += (size_t)snprintf(list + used, size - used, "%s--%s", n ? ", " : "", c->name);
        n++;
    }
    return n;
}

/* Prints that --name[0..len) begins n options (list) and returns -EINVAL. */
static int cli_ambiguous(const struct cli_parser *p, const char *name, size_t len, int n,
                         const char *list)
{
    fprintf(stderr,
            "%s: option '--%.*s' is ambiguous: it begins %d options (%s); give one in full\n",
            p->prog, (int)len, name, n, list);
    return -EINVAL;
}

/*
 * glibc's getopt_long takes an abbreviation that several long options share as the first of
 * them when they have the same flag and value (most of kvsim's options go through one value),
 * so "--max-num 8" would set max-num-batched-tokens or max-num-seqs by table order. After
 * getopt_long returned long option idx, this looks at the word it came from: an exact name
 * passes, and so does a prefix of that one option; a prefix of more than one is refused,
 * naming them. Returns 0 or -EINVAL (printed).
 */
static int cli_refuse_ambiguous(const struct cli_parser *p, int idx)
{
    const struct option *o = &p->opts[idx];
    /* the option's word: argv[optind - 1], or the one before when its value was the next word */
    int at = optind - 1;
    if (o->has_arg != no_argument && optarg && at >= 1 && optarg == p->argv[at])
        at--;
    const char *word = at >= 1 && at < p->argc ? p->argv[at] : NULL;
    if (!word || strncmp(word, "--", 2) != 0)
        return 0; /* a short option */
    const char *name = word + 2;
    size_t len = strcspn(name, "=");
    if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
        return 0; /* the exact name */
    char list[512];
    int n = cli_prefix_matches(p, name, len, list, sizeof list);
    return n > 1 ? cli_ambiguous(p, name, len, n, list) : 0;
}

int cli_next(struct cli_parser *p)
{
    char spec[64]; /* ':' first for our messages ("+:" when the parse stops at a positional) */
    bool stop = p->shortopts[0] == '+';
    snprintf(spec, sizeof spec, "%s:%s", stop ? "+" : "", p->shortopts + stop);
    int idx = -1;
    int c = getopt_long(p->argc, p->argv, spec, p->opts, &idx);
    p->arg = optarg;
    if (c == -1)
        return 0;
    if (c == ':') {
        fprintf(stderr, "%s: option %s needs a value\n", p->prog, p->argv[optind - 1]);
        return -EINVAL;
    }
    if (c == '?') {
        if (optopt) /* a short option, maybe inside a cluster */
            fprintf(stderr, "%s: unknown option '-%c'\n", p->prog, optopt);
        else {
            /* glibc refuses an abbreviation of options with different values itself */
            const char *word = p->argv[optind - 1], *name = word + 2;
            size_t len = strcspn(name, "=");
            char list[512];
            int n = strncmp(word, "--", 2) == 0
                        ? cli_prefix_matches(p, name, len, list, sizeof list)
                        : 0;
            if (n > 1)
                return cli_ambiguous(p, name, len, n, list);
            fprintf(stderr, "%s: unknown option '%s'\n", p->prog, word);
        }
        return -EINVAL;
    }
    if (idx >= 0 && cli_refuse_ambiguous(p, idx))
        return -EINVAL;
    p->long_name = idx >= 0 ? p->opts[idx].name : NULL;
    if (idx >= 0)
        snprintf(p->name, sizeof p->name, "--%s", p->opts[idx].name);
    else
        snprintf(p->name, sizeof p->name, "-%c", c);
    return c;
}

int cli_optind(void) { return optind; }

int cli_make_dirs(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return -ENAMETOOLONG;
    for (char *c = p + 1;; c++) {
        bool last = *c == 0;
        if (*c != '/' && !last)
            continue;
        *c = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return -errno;
        if (last)
            break;
        *c = '/';
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    return access(dir, W_OK | X_OK) == 0 ? 0 : -errno;
}

int cli_status_of(int rc)
{
    switch (rc) {
    case 0: return CLI_EXIT_OK;
    case -EINVAL:
    case -EOVERFLOW:
    case -ENOENT:
    case -EISDIR:
    case -ENOTDIR:
    case -EACCES:
    case -EPERM:
    case -ENAMETOOLONG:
    case -ELOOP: return CLI_EXIT_USAGE;
    default: return CLI_EXIT_FAILED;
    }
}

int cli_error(const struct cli_parser *p, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", p->prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return -EINVAL;
}

int cli_u64(struct cli_parser *p, uint64_t min, uint64_t max, uint64_t *out)
{
    if (kvsim_parse_u64(p->arg, min, max, out))
        return 0;
    return cli_error(p, "option %s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]", p->name,
                     p->arg, min, max);
}

int cli_u32(struct cli_parser *p, uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t v = 0;
    int rc = cli_u64(p, min, max, &v);
    if (rc == 0)
        *out = (uint32_t)v;
    return rc;
}

int cli_double(struct cli_parser *p, double min, bool min_open, double max, double *out)
{
    if (kvsim_parse_double(p->arg, min, min_open, max, out))
        return 0;
    return cli_error(p, "option %s: '%s' is not a number in %c%g, %g]", p->name, p->arg,
                     min_open ? '(' : '[', min, max);
}

int cli_choice(struct cli_parser *p, const char *const *names, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (strcmp(p->arg, names[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[256];
    return cli_error(p, "option %s: '%s' is not %s", p->name, p->arg,
                     kvsim_choices_text(names, n, list, sizeof list));
}
