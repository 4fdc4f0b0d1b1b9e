/* bench_util.h - small helpers shared by the benchmark programs. */
#ifndef KVSIM_BENCH_UTIL_H
#define KVSIM_BENCH_UTIL_H

/* Creates every missing directory of path's directory part (mkdir -p of dirname).
 * Returns 0 or a negative errno. */
int bench_make_parent_dirs(const char *path);

/* {"nproc", "allocator", "cpu_model", "os", "os_release", "arch"} for a benchmark's JSON.
 * Returns a new reference (NULL only if memory runs out). */
struct json_t;
struct json_t *bench_machine_json(void);

#endif /* KVSIM_BENCH_UTIL_H */
