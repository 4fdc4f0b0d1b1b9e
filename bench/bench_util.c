/* bench_util.c - small helpers shared by the benchmark programs. */
#include "bench_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
