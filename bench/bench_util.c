/* bench_util.c - small helpers shared by the benchmark programs. */
#include "bench_util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

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
