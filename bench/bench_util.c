/* bench_util.c - small helpers shared by the benchmark programs. */
#include "bench_util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/runtime.h"

/* What the kernel measured of a child (wait4). */
struct child_usage {
    int64_t utime_ns, stime_ns;
    long maxrss_kib;
};

typedef void (*child_fn)(const void *arg, void *msg);

/* Report fields appended one by one (no padding bytes) to a buffer, then hashed with XXH3-64. */
struct digest {
    unsigned char b[8192];
    size_t n;
    bool overflow; /* a field did not fit: digest_value() gives 0 */
};

int bench_make_parent_dirs(const char *path)
{
    char *buf = strdup(path);
    if (!buf)
        return -ENOMEM;
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf) {
        free(buf);
        return 0;
    }
    *slash = '\0';
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                int err = errno;
                free(buf);
                return -err;
            }
            *p = saved;
            if (saved == '\0')
                break;
        }
    }
    free(buf);
    return 0;
}

int bench_dump_json(json_t *root, const char *path)
{
    int rc = bench_make_parent_dirs(path);
    if (rc == 0 && json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
        rc = -EIO;
    return rc;
}

bool bench_write_results(const char *prog, json_t *root, const char *path, bool blank_line)
{
    int rc = bench_dump_json(root, path);
    if (rc) {
        fprintf(stderr, "%s: cannot write %s: %s\n", prog, path, strerror(-rc));
        return false;
    }
    printf("%sresults written to %s\n", blank_line ? "\n" : "", path);
    return true;
}

/* First "model name" of /proc/cpuinfo, or "unknown". */
static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *colon = strchr(line, ':');
        if (!colon)
            break;
        colon++;
        while (*colon == ' ' || *colon == '\t')
            colon++;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, len, "%s", colon);
        break;
    }
    fclose(f);
}

json_t *bench_machine_json(void)
{
    struct utsname u;
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    json_t *m = json_pack("{s:I, s:s, s:s}", "nproc", (json_int_t)sysconf(_SC_NPROCESSORS_ONLN),
                          "allocator", kvsim_allocator(), "cpu_model", cpu);
    if (m && uname(&u) == 0) {
        json_object_set_new(m, "os", json_string(u.sysname));
        json_object_set_new(m, "os_release", json_string(u.release));
        json_object_set_new(m, "arch", json_string(u.machine));
    }
    return m;
}

json_t *bench_json_root(const char *name, const char *date)
{
    json_t *root = json_object();
    json_object_set_new(root, "benchmark", json_string(name));
    json_object_set_new(root, "version", json_string(kvsim_version()));
    json_object_set_new(root, "date", json_string(date));
    json_object_set_new(root, "machine", bench_machine_json());
    return root;
}

/* ---- time, memory, formatting ---------------------------------------------------------------- */

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

static int64_t timeval_ns(struct timeval tv)
{
    return (int64_t)tv.tv_sec * 1000000000 + (int64_t)tv.tv_usec * 1000;
}

void bench_utc_date(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    if (len)
        buf[0] = '\0';
    if (gmtime_r(&now, &tm))
        strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

long bench_peak_rss_kib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return ru.ru_maxrss; /* KiB on Linux */
}

void *bench_xcalloc(const char *prog, size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "%s: out of memory\n", prog);
        exit(1);
    }
    return p;
}

const char *bench_grouped(double v, char *buf, size_t len)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%.0f", v < 0 ? 0.0 : v);
    size_t n = strlen(digits), o = 0;
    for (size_t i = 0; i < n && o + 2 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

void bench_print_rule(int width)
{
    static const char dashes[] = "----------------------------------------------------------------"
                                 "----------------------------------------------------------------"
                                 "--------------------------------";
    printf("%.*s\n", width, dashes);
}

/* ---- deterministic workloads ----------------------------------------------------------------- */

uint64_t bench_splitmix64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

uint64_t bench_rng_next(struct bench_rng *r)
{
    r->s += UINT64_C(0x9e3779b97f4a7c15);
    return bench_splitmix64(r->s);
}

uint32_t bench_rng_range(struct bench_rng *r, uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t)(bench_rng_next(r) % ((uint64_t)hi - lo + 1));
}

/* ---- best-of-3 throughput figures ------------------------------------------------------------ */

void bench_fig_init(struct bench_figure *f, const char *key, const char *label, const char *unit,
                    const char *what)
{
    memset(f, 0, sizeof *f);
    f->key = key;
    f->label = label;
    f->unit = unit;
    f->what = what;
}

void bench_fig_record(struct bench_figure *f, int rep, uint64_t work, uint64_t ns)
{
    double s = (double)ns * 1e-9;
    f->work[rep] = work;
    f->seconds[rep] = s;
    f->value[rep] = s > 0 ? (double)work / s : 0.0;
    if (f->value[rep] > f->best)
        f->best = f->value[rep];
}

json_t *bench_fig_json(const struct bench_figure *f)
{
    json_t *vals = json_array(), *secs = json_array(), *work = json_array();
    for (int r = 0; r < BENCH_REPS; r++) {
        json_array_append_new(vals, json_real(f->value[r]));
        json_array_append_new(secs, json_real(f->seconds[r]));
        json_array_append_new(work, json_integer((json_int_t)f->work[r]));
    }
    char statistic[32];
    snprintf(statistic, sizeof statistic, "best of %d", BENCH_REPS);
    return json_pack("{s:f, s:s, s:s, s:s, s:o, s:o, s:o}", "value", f->best, "unit", f->unit,
                     "statistic", statistic, "description", f->what, "repetitions", vals, "seconds",
                     secs, "work", work);
}

/* ---- pipes ----------------------------------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static ssize_t read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, p + got, len - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Runs fn(arg, msg) in a forked child (its own peak RSS and CPU time), which sends msg back
 * through a pipe; on return *msg holds it and *usage the child's rusage. Returns true, or false
 * with the reason in failure (pipe, fork or wait4 errors, a signal, a non-zero exit, a short
 * message). */
static bool run_forked(child_fn fn, const void *arg, void *msg, size_t msg_size,
                       struct child_usage *usage, char *failure, size_t failure_len)
{
    memset(usage, 0, sizeof *usage);
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(failure, failure_len, "pipe: %s", strerror(errno));
        return false;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(failure, failure_len, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        close(fds[0]);
        memset(msg, 0, msg_size);
        fn(arg, msg);
        _exit(write_all(fds[1], msg, msg_size) == 0 ? 0 : 3);
    }
    close(fds[1]);
    ssize_t got = read_all(fds[0], msg, msg_size);
    close(fds[0]);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR) {
            snprintf(failure, failure_len, "wait4: %s", strerror(errno));
            return false;
        }
    }
    usage->utime_ns = timeval_ns(ru.ru_utime);
    usage->stime_ns = timeval_ns(ru.ru_stime);
    usage->maxrss_kib = ru.ru_maxrss;
    if (WIFSIGNALED(status)) {
        snprintf(failure, failure_len, "child killed by signal %d", WTERMSIG(status));
        return false;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != (ssize_t)msg_size) {
        snprintf(failure, failure_len, "child exited with status %d (%zd bytes)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1, got);
        return false;
    }
    return true;
}

/* ---- the digest of a report ------------------------------------------------------------------ */

static void digest_init(struct digest *d)
{
    d->n = 0;
    d->overflow = false;
}

static void dig_bytes(struct digest *d, const void *p, size_t len)
{
    if (d->n + len > sizeof d->b) {
        d->overflow = true;
        return;
    }
    memcpy(d->b + d->n, p, len);
    d->n += len;
}

static void dig_u64(struct digest *d, uint64_t v) { dig_bytes(d, &v, sizeof v); }
static void dig_i64(struct digest *d, int64_t v) { dig_bytes(d, &v, sizeof v); }
static void dig_f64(struct digest *d, double v) { dig_bytes(d, &v, sizeof v); }

/* The length, then the bytes (NULL as the empty string). */
static void dig_str(struct digest *d, const char *s)
{
    size_t len = s ? strlen(s) : 0;
    dig_u64(d, len);
    if (len)
        dig_bytes(d, s, len);
}

static void dig_latency(struct digest *d, const struct kvsim_latency *l)
{
    dig_u64(d, l->count);
    dig_f64(d, l->mean);
    dig_f64(d, l->min);
    dig_f64(d, l->p50);
    dig_f64(d, l->p90);
    dig_f64(d, l->p95);
    dig_f64(d, l->p99);
    dig_f64(d, l->max);
}

/* Everything of struct kvsim_report except the "wall" fields (num_threads, wall_ns, speed,
 * wall_requests_per_s) and the offload section. */
static void dig_report(struct digest *d, const struct kvsim_report *r)
{
    dig_str(d, r->trace);
    dig_str(d, r->router);
    dig_u64(d, r->seed);
    dig_u64(d, r->num_engines);
    dig_u64(d, r->num_requests);
    dig_u64(d, r->completed);
    dig_u64(d, r->rejected);
    dig_u64(d, r->incomplete);
    dig_u64(d, r->num_reject_reasons);
    for (uint32_t i = 0; i < r->num_reject_reasons && i < KVSIM_REPORT_MAX_REASONS; i++) {
        dig_str(d, r->rejects[i].reason);
        dig_u64(d, r->rejects[i].count);
    }
    dig_u64(d, r->preemptions);
    dig_u64(d, r->input_tokens);
    dig_u64(d, r->output_tokens);
    dig_u64(d, r->cached_tokens);
    dig_f64(d, r->prefix_cache_reuse);
    dig_i64(d, r->duration_ns);
    dig_f64(d, r->requests_per_s);
    dig_f64(d, r->input_tokens_per_s);
    dig_f64(d, r->output_tokens_per_s);
    dig_f64(d, r->total_tokens_per_s);
    dig_latency(d, &r->ttft);
    dig_latency(d, &r->ttst);
    dig_latency(d, &r->tpot);
    dig_latency(d, &r->itl);
    dig_latency(d, &r->token_gap);
    dig_latency(d, &r->output_tps_per_user);
    dig_latency(d, &r->e2e);
}

/* A disaggregated replay's section and its aborted requests. */
static void dig_disagg(struct digest *d, const struct kvsim_report *r)
{
    const struct kvsim_disagg_summary *g = &r->disagg;
    dig_u64(d, r->aborted);
    dig_u64(d, g->prefill_engines);
    dig_u64(d, g->decode_engines);
    dig_u64(d, g->epochs);
    dig_u64(d, g->handoffs);
    dig_u64(d, g->completed);
    dig_u64(d, g->aborted);
    dig_u64(d, g->pending);
    dig_latency(d, &g->pin);
    dig_latency(d, &g->transfer);
    dig_latency(d, &g->decode_wait);
    dig_u64(d, g->transferred_bytes);
    dig_u64(d, g->transferred_tokens);
    dig_f64(d, g->pinned_block_seconds);
    dig_u64(d, g->peak_pinned_blocks);
    for (uint32_t p = 0; p < g->prefill_engines && g->per_prefill; p++) {
        dig_f64(d, g->per_prefill[p].pinned_block_seconds);
        dig_u64(d, g->per_prefill[p].peak_pinned_blocks);
    }
}

/* The offload section as bench_offload's digests always had it: g3_shared and g3_evictions are
 * left out, so that the digests stay comparable with earlier results. */
static void dig_offload(struct digest *d, const struct kvsim_offload_summary *o)
{
    dig_u64(d, o->enabled ? 1 : 0);
    for (int l = 0; l < 4; l++) {
        dig_u64(d, o->lanes[l].batches);
        dig_u64(d, o->lanes[l].blocks);
        dig_u64(d, o->lanes[l].bytes);
        dig_u64(d, o->lanes[l].failed);
        dig_u64(d, o->lanes[l].cancelled);
    }
    dig_u64(d, o->g1_miss_blocks);
    dig_u64(d, o->g2_hit_blocks);
    dig_u64(d, o->g3_hit_blocks);
    dig_f64(d, o->g2_hit_rate);
    dig_f64(d, o->g3_hit_rate);
    dig_u64(d, o->onboarded_tokens);
    dig_u64(d, o->recomputed_tokens);
    dig_u64(d, o->loads);
    dig_u64(d, o->failed_loads);
    dig_u64(d, o->blocked);
    dig_u64(d, o->retry_now);
    dig_i64(d, o->blocked_ns);
    dig_i64(d, o->onboard_wait_ns);
    dig_u64(d, o->written_g2);
    dig_u64(d, o->written_g3);
    dig_u64(d, o->filtered);
    dig_u64(d, o->dropped);
    dig_u64(d, o->failed_blocks);
    dig_u64(d, o->g2_resident);
    dig_u64(d, o->g3_resident);
}

/* XXH3-64 of the bytes appended so far; 0 after an overflow. */
static uint64_t digest_value(const struct digest *d)
{
    if (d->overflow) /* cannot happen with the sizes above; never report a truncated digest */
        return 0;
    return XXH3_64bits(d->b, d->n);
}

/* ---- command-line pieces --------------------------------------------------------------------- */

int bench_opt_path(const char *prog, const char *opt, const char *arg, const char **out)
{
    if (arg[0] == '\0') {
        fprintf(stderr, "%s: empty %s path\n", prog, opt);
        return 2;
    }
    *out = arg;
    return 0;
}

int bench_opt_reps(const char *prog, const char *arg, unsigned max, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(arg, &end, 10);
    if (errno || end == arg || *end != '\0' || arg[0] == '-' || v < 1 || v > max) {
        fprintf(stderr, "%s: invalid --reps '%s' (1..%u)\n", prog, arg, max);
        return 2;
    }
    *out = (unsigned)v;
    return 0;
}

int bench_opt_u64(const char *prog, const char *opt, const char *arg, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 0);
    if (errno || end == arg || *end != '\0' || arg[0] == '-') {
        fprintf(stderr, "%s: invalid %s '%s'\n", prog, opt, arg);
        return 2;
    }
    *out = (uint64_t)v;
    return 0;
}

int bench_opt_bad(const char *prog)
{
    fprintf(stderr, "%s: try --help\n", prog);
    return 2;
}

int bench_opt_no_operands(const char *prog, int argc, char **argv)
{
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s' (try --help)\n", prog, argv[optind]);
        return 2;
    }
    return 0;
}

/* ---- trace replays in child processes -------------------------------------------------------- */

/* 0, 1 after usage (--help) or 2 for a usage error. */
static int parse_trace_options(int argc, char **argv, const char *prog, const char *default_trace,
                               const char *default_json, unsigned max_reps, void (*usage)(FILE *),
                               struct bench_trace_opts *o)
{
    static const struct option longopts[] = {
        {"trace", required_argument, NULL, 't'}, {"json", required_argument, NULL, 'j'},
        {"reps", required_argument, NULL, 'r'},  {"quick", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    o->trace_path = default_trace;
    o->json_path = default_json;
    o->reps = 1;
    o->quick = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (bench_opt_path(prog, "--trace", optarg, &o->trace_path))
                return 2;
            break;
        case 'j':
            if (bench_opt_path(prog, "--json", optarg, &o->json_path))
                return 2;
            break;
        case 'r':
            if (bench_opt_reps(prog, optarg, max_reps, &o->reps))
                return 2;
            break;
        case 'q': o->quick = true; break;
        case 'h': usage(stdout); return 1;
        default: return bench_opt_bad(prog);
        }
    }
    return bench_opt_no_operands(prog, argc, argv);
}

int bench_trace_start(int argc, char **argv, const char *prog, const char *default_trace,
                      const char *default_json, unsigned max_reps, void (*usage)(FILE *),
                      struct bench_trace_opts *o)
{
    int rc = parse_trace_options(argc, argv, prog, default_trace, default_json, max_reps, usage, o);
    if (rc)
        return rc == 1 ? 0 : rc;
    if (access(o->trace_path, R_OK) != 0) {
        fprintf(stderr,
                "%s: trace %s is not readable: %s\n"
                "%s: point --trace at conversation_trace.jsonl (../shared/traces/)\n",
                prog, o->trace_path, strerror(errno), prog);
        return 2;
    }
    printf("%s: %s, allocator %s, %ld CPUs, %s run, best of %u repetition%s\n", prog,
           kvsim_version(), kvsim_allocator(), sysconf(_SC_NPROCESSORS_ONLN),
           o->quick ? "quick" : "full", o->reps, o->reps == 1 ? "" : "s");
    printf("trace %s%s\n", o->trace_path, o->quick ? " (first 1000 requests)" : "");
    return -1;
}

void bench_trace_replay_config(const struct bench_trace_opts *o, struct kvsim_replay_config *cfg)
{
    kvsim_replay_config_default(cfg);
    cfg->trace_path = o->trace_path;
    if (o->quick)
        cfg->trace_opts.max_requests = BENCH_QUICK_MAX_REQUESTS;
    cfg->quiet = true;
}

json_t *bench_trace_json(const struct bench_trace_opts *o)
{
    json_t *tj = json_pack("{s:s, s:I}", "path", o->trace_path, "max_requests",
                           (json_int_t)(o->quick ? BENCH_QUICK_MAX_REQUESTS : 0));
    char *resolved = realpath(o->trace_path, NULL);
    if (resolved) {
        json_object_set_new(tj, "resolved_path", json_string(resolved));
        free(resolved);
    }
    return tj;
}

void bench_replay_child(const struct kvsim_replay_config *cfg, bool with_offload,
                        struct bench_msg *msg)
{
    struct kvsim_report rep;
    memset(&rep, 0, sizeof rep);
    int64_t t0 = bench_now_ns();
    int rc = kvsim_replay_run(cfg, &rep, msg->err, sizeof msg->err);
    msg->wall_ns = bench_now_ns() - t0;
    msg->rc = rc;
    if (rc)
        return;
    msg->report_wall_ns = rep.wall_ns;
    msg->duration_ns = rep.duration_ns;
    msg->num_requests = rep.num_requests;
    msg->completed = rep.completed;
    msg->rejected = rep.rejected;
    msg->incomplete = rep.incomplete;
    msg->preemptions = rep.preemptions;
    msg->input_tokens = rep.input_tokens;
    msg->output_tokens = rep.output_tokens;
    msg->cached_tokens = rep.cached_tokens;
    msg->prefix_cache_reuse = rep.prefix_cache_reuse;
    msg->ttft = rep.ttft;
    msg->offload = rep.offload;
    msg->epochs = rep.disagg.epochs;
    msg->handoffs = rep.disagg.handoffs;
    msg->steps = rep.timing.steps;
    msg->peak_in_flight = rep.peak_in_flight;
    msg->acct = rep.accounting;
    struct digest d;
    digest_init(&d);
    dig_report(&d, &rep);
    if (with_offload)
        dig_offload(&d, &rep.offload);
    if (rep.disagg.enabled)
        dig_disagg(&d, &rep);
    msg->digest = digest_value(&d);
    kvsim_report_fini(&rep);
}

struct suite_job {
    const struct bench_suite *s;
    size_t i;
};

static void suite_child(const void *arg, void *msg)
{
    const struct suite_job *j = arg;
    j->s->child(j->s->ctx, j->i, msg);
}

/* Runs configuration i once in a child process; fills *res. Returns res->ok. */
static bool run_rep(const struct bench_suite *s, size_t i, struct bench_rep *res)
{
    memset(res, 0, sizeof *res);
    struct suite_job job = {s, i};
    struct child_usage ru;
    bool ran = run_forked(suite_child, &job, &res->msg, sizeof res->msg, &ru, res->failure,
                          sizeof res->failure);
    res->utime_ns = ru.utime_ns;
    res->stime_ns = ru.stime_ns;
    res->maxrss_kib = ru.maxrss_kib;
    if (!ran)
        return false;
    if (res->msg.rc != 0) {
        res->msg.err[sizeof res->msg.err - 1] = '\0';
        snprintf(res->failure, sizeof res->failure, "%s (%s)",
                 res->msg.err[0] ? res->msg.err : "replay failed", strerror(-res->msg.rc));
        return false;
    }
    if (s->need_digest && res->msg.digest == 0) {
        snprintf(res->failure, sizeof res->failure, "report digest overflow");
        return false;
    }
    res->ok = true;
    return true;
}

/* The fastest successful repetition, and whether all succeeded and agree. */
static void finish_config(struct bench_config *c)
{
    c->best = -1;
    c->ok = true;
    c->reps_identical = true;
    for (unsigned i = 0; i < c->num_reps; i++) {
        const struct bench_rep *r = &c->reps[i];
        if (!r->ok) {
            c->ok = false;
            continue;
        }
        if (c->best < 0) {
            c->best = (int)i;
            continue;
        }
        const struct bench_rep *b = &c->reps[c->best];
        if (r->msg.digest != b->msg.digest)
            c->reps_identical = false;
        if (r->msg.wall_ns < b->msg.wall_ns)
            c->best = (int)i;
    }
}

bool bench_suite_run(struct bench_suite *s)
{
    unsigned reps = s->opts->reps;
    bench_utc_date(s->date, sizeof s->date);
    memset(s->configs, 0, s->num_configs * sizeof *s->configs);
    for (size_t i = 0; i < s->num_configs; i++) {
        struct bench_config *c = &s->configs[i];
        s->describe(s->ctx, i, c);
        c->num_reps = reps;
        c->reps = bench_xcalloc(s->prog, reps, sizeof *c->reps);
    }
    s->parent_rss_kib = bench_peak_rss_kib();

    bool all_ok = true;
    for (unsigned rep = 0; rep < reps; rep++) {
        for (size_t i = 0; i < s->num_configs; i++) {
            const struct bench_config *c = &s->configs[i];
            struct bench_rep *r = &c->reps[rep];
            if (run_rep(s, i, r)) {
                fprintf(stderr, "  rep %u/%u  %-*s %u thread%s  %7.3f s\n", rep + 1, reps,
                        s->label_width, c->label, c->threads ? c->threads : 1,
                        c->threads > 1 ? "s" : " ", (double)r->msg.wall_ns * 1e-9);
            } else {
                fprintf(stderr, "%s: %s, %u thread(s): %s\n", s->prog, c->label, c->threads,
                        r->failure);
                all_ok = false;
            }
        }
    }
    for (size_t i = 0; i < s->num_configs; i++) {
        finish_config(&s->configs[i]);
        all_ok = all_ok && s->configs[i].ok;
    }
    return all_ok;
}

const struct bench_rep *bench_best(const struct bench_config *c)
{
    return c && c->best >= 0 ? &c->reps[c->best] : NULL;
}

struct bench_figures bench_figures_of(const struct bench_rep *r)
{
    struct bench_figures f;
    memset(&f, 0, sizeof f);
    f.wall_s = (double)r->msg.wall_ns * 1e-9;
    f.cpu_s = (double)(r->utime_ns + r->stime_ns) * 1e-9;
    f.peak_rss_mib = (double)r->maxrss_kib / 1024.0;
    uint64_t done = r->msg.completed ? r->msg.completed : r->msg.num_requests;
    if (f.wall_s > 0) {
        f.req_per_wall_s = (double)done / f.wall_s;
        f.speed = (double)r->msg.duration_ns * 1e-9 / f.wall_s;
    }
    if (r->msg.output_tokens)
        f.cpu_ns_per_out_tok = (double)(r->utime_ns + r->stime_ns) / (double)r->msg.output_tokens;
    return f;
}

static json_t *figures_json(const struct bench_suite *s, const struct bench_figures *f)
{
    json_t *j = json_pack("{s:f, s:f, s:f, s:f, s:f}", "wall_s", f->wall_s, "cpu_s", f->cpu_s,
                          "cpu_ns_per_output_token", f->cpu_ns_per_out_tok, "peak_rss_mib",
                          f->peak_rss_mib, "simulated_to_wall_speed", f->speed);
    if (s->json_rate)
        json_object_set_new(j, "requests_per_wall_s", json_real(f->req_per_wall_s));
    return j;
}

void bench_msg_json_add(json_t *j, const struct bench_msg *m)
{
    char dig[32];
    snprintf(dig, sizeof dig, "%016" PRIx64, m->digest);
    json_object_set_new(j, "digest_xxh3", json_string(dig));
    const struct {
        const char *key;
        uint64_t v;
    } counts[] = {
        {"requests", m->num_requests},       {"completed", m->completed},
        {"rejected", m->rejected},           {"incomplete", m->incomplete},
        {"preemptions", m->preemptions},     {"input_tokens", m->input_tokens},
        {"output_tokens", m->output_tokens}, {"cached_tokens", m->cached_tokens},
    };
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        json_object_set_new(j, counts[k].key, json_integer((json_int_t)counts[k].v));
    json_object_set_new(j, "simulated_s", json_real((double)m->duration_ns * 1e-9));
}

static json_t *rep_json(const struct bench_suite *s, const struct bench_rep *r)
{
    if (!r->ok)
        return json_pack("{s:b, s:s}", "ok", 0, "failure", r->failure);
    struct bench_figures f = bench_figures_of(r);
    json_t *j = json_pack(
        "{s:b, s:o, s:f, s:f, s:f, s:I}", "ok", 1, "figures", figures_json(s, &f), "utime_s",
        (double)r->utime_ns * 1e-9, "stime_s", (double)r->stime_ns * 1e-9, "report_wall_s",
        (double)r->msg.report_wall_ns * 1e-9, "peak_rss_kib", (json_int_t)r->maxrss_kib);
    s->msg_json(j, &r->msg);
    return j;
}

json_t *bench_config_json(const struct bench_suite *s, size_t i)
{
    const struct bench_config *c = &s->configs[i];
    json_t *j = json_object();
    json_object_set_new(j, "ok", json_boolean(c->ok));
    json_object_set_new(j, "repetitions_identical", json_boolean(c->reps_identical));
    const struct bench_rep *b = bench_best(c);
    json_object_set_new(j, "best_repetition", b ? json_integer(c->best) : json_null());
    if (b) {
        struct bench_figures f = bench_figures_of(b);
        json_object_set_new(j, "best", figures_json(s, &f));
    } else {
        json_object_set_new(j, "best", json_null());
    }
    json_t *reps = json_array();
    for (unsigned k = 0; k < c->num_reps; k++)
        json_array_append_new(reps, rep_json(s, &c->reps[k]));
    json_object_set_new(j, "repetitions", reps);
    return j;
}

json_t *bench_suite_json_root(const struct bench_suite *s)
{
    json_t *root = bench_json_root(s->prog, s->date);
    json_object_set_new(json_object_get(root, "machine"), "parent_peak_rss_kib_at_first_fork",
                        json_integer(s->parent_rss_kib));
    return root;
}

int bench_suite_finish(struct bench_suite *s, json_t *root, bool all_ok, bool identical,
                       const char *differ)
{
    json_object_set_new(root, "identical", json_boolean(identical));
    bool ok = all_ok && identical;
    json_object_set_new(root, "ok", json_boolean(ok));
    if (!bench_write_results(s->prog, root, s->opts->json_path, true))
        ok = false;
    json_decref(root);
    for (size_t i = 0; i < s->num_configs; i++) {
        free(s->configs[i].reps);
        s->configs[i].reps = NULL;
    }
    if (!ok)
        fprintf(stderr, "%s: FAILED%s%s%s\n", s->prog, identical ? "" : " (results differ between ",
                identical ? "" : differ, identical ? "" : ")");
    return ok ? 0 : 1;
}

bool bench_target(json_t *targets, const char *key, const char *what, bool have, double measured,
                  bool at_most, double goal, const char *unit)
{
    bool met = have && (at_most ? measured <= goal : measured >= goal);
    char m[32] = "not measured", g[32];
    if (have)
        snprintf(m, sizeof m, "%.6g %s", measured, unit);
    snprintf(g, sizeof g, "%s %.6g %s", at_most ? "<=" : ">=", goal, unit);
    printf("  %-52s %18s %18s  %s\n", what, m, g, !have ? "-" : met ? "met" : "NOT MET");
    json_t *o = json_pack("{s:f, s:s, s:s, s:b}", "goal", goal, "comparison",
                          at_most ? "<=" : ">=", "unit", unit, "met", met);
    json_object_set_new(o, "measured", have ? json_real(measured) : json_null());
    json_object_set_new(targets, key, o);
    return met;
}
