/* bench_util.c - small helpers shared by the benchmark programs. */
#include "bench_util.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/report/report.h"
#include "runtime/runtime.h"

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

/* ---- time, memory, formatting ---------------------------------------------------------------- */

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

int64_t bench_timeval_ns(struct timeval tv)
{
    return (int64_t)tv.tv_sec * 1000000000 + (int64_t)tv.tv_usec * 1000;
}

long bench_peak_rss_kib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return ru.ru_maxrss; /* KiB on Linux */
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

bool bench_run_forked(bench_child_fn fn, const void *arg, void *msg, size_t msg_size,
                      struct bench_child_usage *usage, char *failure, size_t failure_len)
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
    usage->utime_ns = bench_timeval_ns(ru.ru_utime);
    usage->stime_ns = bench_timeval_ns(ru.ru_stime);
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

void bench_digest_init(struct bench_digest *d)
{
    d->n = 0;
    d->overflow = false;
}

void bench_dig_bytes(struct bench_digest *d, const void *p, size_t len)
{
    if (d->n + len > sizeof d->b) {
        d->overflow = true;
        return;
    }
    memcpy(d->b + d->n, p, len);
    d->n += len;
}

void bench_dig_u64(struct bench_digest *d, uint64_t v) { bench_dig_bytes(d, &v, sizeof v); }
void bench_dig_i64(struct bench_digest *d, int64_t v) { bench_dig_bytes(d, &v, sizeof v); }
void bench_dig_f64(struct bench_digest *d, double v) { bench_dig_bytes(d, &v, sizeof v); }

void bench_dig_str(struct bench_digest *d, const char *s)
{
    size_t len = s ? strlen(s) : 0;
    bench_dig_u64(d, len);
    if (len)
        bench_dig_bytes(d, s, len);
}

void bench_dig_latency(struct bench_digest *d, const struct kvsim_latency *l)
{
    bench_dig_u64(d, l->count);
    bench_dig_f64(d, l->mean);
    bench_dig_f64(d, l->min);
    bench_dig_f64(d, l->p50);
    bench_dig_f64(d, l->p90);
    bench_dig_f64(d, l->p95);
    bench_dig_f64(d, l->p99);
    bench_dig_f64(d, l->max);
}

void bench_dig_report(struct bench_digest *d, const struct kvsim_report *r)
{
    bench_dig_str(d, r->trace);
    bench_dig_str(d, r->router);
    bench_dig_u64(d, r->seed);
    bench_dig_u64(d, r->num_engines);
    bench_dig_u64(d, r->num_requests);
    bench_dig_u64(d, r->completed);
    bench_dig_u64(d, r->rejected);
    bench_dig_u64(d, r->incomplete);
    bench_dig_u64(d, r->num_reject_reasons);
    for (uint32_t i = 0; i < r->num_reject_reasons && i < KVSIM_REPORT_MAX_REASONS; i++) {
        bench_dig_str(d, r->rejects[i].reason);
        bench_dig_u64(d, r->rejects[i].count);
    }
    bench_dig_u64(d, r->preemptions);
    bench_dig_u64(d, r->input_tokens);
    bench_dig_u64(d, r->output_tokens);
    bench_dig_u64(d, r->cached_tokens);
    bench_dig_f64(d, r->prefix_cache_reuse);
    bench_dig_i64(d, r->duration_ns);
    bench_dig_f64(d, r->requests_per_s);
    bench_dig_f64(d, r->input_tokens_per_s);
    bench_dig_f64(d, r->output_tokens_per_s);
    bench_dig_f64(d, r->total_tokens_per_s);
    bench_dig_latency(d, &r->ttft);
    bench_dig_latency(d, &r->ttst);
    bench_dig_latency(d, &r->tpot);
    bench_dig_latency(d, &r->itl);
    bench_dig_latency(d, &r->e2e);
}

uint64_t bench_digest_value(const struct bench_digest *d)
{
    if (d->overflow) /* cannot happen with the sizes above; never report a truncated digest */
        return 0;
    return XXH3_64bits(d->b, d->n);
}

uint64_t bench_digest_report(const struct kvsim_report *r)
{
    struct bench_digest d;
    bench_digest_init(&d);
    bench_dig_report(&d, r);
    return bench_digest_value(&d);
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
