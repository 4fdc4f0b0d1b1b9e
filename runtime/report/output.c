/*
 * output.c - every file kvsim writes goes through here (report.h, "output files"): written to a
 * temporary file beside its destination and renamed over it once complete, so a full disk, an
 * error or a signal never leaves a truncated report behind and a reader never sees half of one;
 * "-" is standard output, and a destination that exists and is not a regular file (/dev/null,
 * a FIFO, a symbolic link such as /dev/stdout) is written directly: renaming over it would
 * replace the device or the link itself.
 */
#include "runtime/report/report.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static mode_t process_umask;
static pthread_once_t umask_once = PTHREAD_ONCE_INIT;

/* umask can only be read by setting it: once, before any output is opened from threads. */
static void read_umask(void)
{
    process_umask = umask(022);
    umask(process_umask);
}

static int fail(int e, const char *path, const char *what, char *err, size_t errlen)
{
    if (e == 0)
        e = EIO;
    if (err && errlen)
        snprintf(err, errlen, "%s: %s: %s", path, what, strerror(e));
    return -e;
}

/* The temporary name beside path: DIR/.BASE.XXXXXX (hidden, same file system). */
static int temp_name(const char *path, char *buf, size_t len)
{
    const char *slash = strrchr(path, '/');
    int n = slash ? snprintf(buf, len, "%.*s/.%s.XXXXXX", (int)(slash - path), path, slash + 1)
                  : snprintf(buf, len, ".%s.XXXXXX", path);
    return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* A directory is refused (-EISDIR); *direct: path exists and is not a regular file (a device,
 * a FIFO, or a symbolic link such as /dev/stdout -> /proc/self/fd/1, found by lstat), so it is
 * written through, never renamed over. */
static int classify(const char *path, bool *direct, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return fail(EISDIR, path, "cannot open for writing", err, errlen);
    *direct = lstat(path, &st) == 0 && !S_ISREG(st.st_mode);
    return 0;
}

int kvsim_output_open(struct kvsim_output *o, const char *path, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    if (!path || !*path)
        return fail(EINVAL, path ? path : "(null)", "no file name", err, errlen);
    if (strcmp(path, "-") == 0) {
        o->f = stdout;
        o->is_stdout = true;
        return 0;
    }
    bool direct;
    int rc = classify(path, &direct, err, errlen);
    if (rc)
        return rc;
    if (direct) {
        errno = 0;
        o->f = fopen(path, "w");
        return o->f ? 0 : fail(errno, path, "cannot open for writing", err, errlen);
    }
    pthread_once(&umask_once, read_umask);
    rc = temp_name(path, o->tmp, sizeof o->tmp);
    if (rc)
        return fail(-rc, path, "cannot open for writing", err, errlen);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        o->tmp[0] = 0;
        return fail(errno, path, "cannot open for writing", err, errlen);
    }
    /* mkstemp makes 0600: give the file the mode a plain creation would. */
    if (fchmod(fd, 0666 & ~process_umask) != 0 || !(o->f = fdopen(fd, "w"))) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        o->tmp[0] = 0;
        return fail(e, path, "cannot open for writing", err, errlen);
    }
    errno = 0;
    return 0;
}

int kvsim_output_commit(struct kvsim_output *o, char *err, size_t errlen)
{
    if (!o->f)
        return fail(EBADF, o->path ? o->path : "(null)", "not open", err, errlen);
    bool failed = ferror(o->f) != 0;
    int e = 0;
    if (failed) {
        /* The failed write's errno is long gone: flushing what is left again says why (ENOSPC
         * for a full disk); a flush that now succeeds still lost data earlier. */
        clearerr(o->f);
        errno = 0;
        e = fflush(o->f) != 0 && errno ? errno : EIO;
    }
    errno = 0;
    int closed = o->is_stdout ? fflush(o->f) : fclose(o->f);
    o->f = NULL;
    if (closed != 0 && !failed) {
        failed = true;
        e = errno;
    }
    if (!failed && o->tmp[0] && rename(o->tmp, o->path) != 0) {
        failed = true;
        e = errno;
    }
    if (failed) {
        if (o->tmp[0])
            unlink(o->tmp);
        o->tmp[0] = 0;
        return fail(e, o->path, "write failed", err, errlen);
    }
    o->tmp[0] = 0;
    return 0;
}

void kvsim_output_discard(struct kvsim_output *o)
{
    if (o->f && !o->is_stdout)
        fclose(o->f);
    o->f = NULL;
    if (o->tmp[0])
        unlink(o->tmp);
    o->tmp[0] = 0;
}

int kvsim_output_check(const char *path, char *err, size_t errlen)
{
    bool direct = false;
    if (path && *path && strcmp(path, "-") != 0) {
        int rc = classify(path, &direct, err, errlen);
        if (rc)
            return rc;
    }
    if (direct) /* written directly later: opening it now would truncate what a link names */
        return access(path, W_OK) == 0 ? 0
                                       : fail(errno, path, "cannot open for writing", err, errlen);
    struct kvsim_output o;
    int rc = kvsim_output_open(&o, path, err, errlen);
    if (rc == 0)
        kvsim_output_discard(&o); /* nothing renamed: an existing file is left as it was */
    return rc;
}

/* The real path of the directory path would be created in (its parent), in buf. Returns false
 * when that directory cannot be resolved (the output check says why later). */
static bool parent_realpath(const char *path, char *buf)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) >= sizeof dir)
        return false;
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    return realpath(dir, buf) != NULL;
}

/* Whether the directory real path dir holds (at any depth) the directory real path at. */
static bool path_within(const char *at, const char *dir)
{
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/')
        return true;
    return strncmp(at, dir, n) == 0 && (at[n] == '/' || at[n] == 0);
}

int kvsim_output_check_inputs(const char *out, const struct kvsim_input_path *inputs,
                              size_t num_inputs, char *err, size_t errlen)
{
    if (!out || !*out || strcmp(out, "-") == 0)
        return 0;
    struct stat so;
    bool out_exists = stat(out, &so) == 0;
    char out_dir[PATH_MAX];
    bool have_dir = parent_realpath(out, out_dir);
    for (size_t i = 0; i < num_inputs; i++) {
        const char *in = inputs[i].path;
        struct stat si;
        if (!in || !*in || strcmp(in, "-") == 0 || stat(in, &si) != 0)
            continue;
        /* a regular file: a terminal or a pipe both read and written is not overwritten */
        bool same =
            out_exists && S_ISREG(si.st_mode) && so.st_dev == si.st_dev && so.st_ino == si.st_ino;
        char in_real[PATH_MAX];
        bool inside = !same && inputs[i].is_dir && S_ISDIR(si.st_mode) && have_dir &&
                      realpath(in, in_real) && path_within(out_dir, in_real);
        if (same || inside) {
            if (err && errlen)
                snprintf(err, errlen,
                         same ? "'%s' is %s (%s): an output never overwrites an input"
                              : "'%s' is inside %s (%s): an output is never written into an "
                                "input",
                         out, inputs[i].what, in);
            return -EINVAL;
        }
    }
    return 0;
}

int kvsim_write_text(const char *path, const char *text, char *err, size_t errlen)
{
    struct kvsim_output o;
    int rc = kvsim_output_open(&o, path, err, errlen);
    if (rc)
        return rc;
    fputs(text, o.f);
    fputc('\n', o.f);
    return kvsim_output_commit(&o, err, errlen);
}
