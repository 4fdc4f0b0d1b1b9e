/* bench_util.h - small helpers shared by the benchmark programs. */
#ifndef KVSIM_BENCH_UTIL_H
#define KVSIM_BENCH_UTIL_H

/* Creates every missing directory of path's directory part (mkdir -p of dirname).
 * Returns 0 or a negative errno. */
int bench_make_parent_dirs(const char *path);

#endif /* KVSIM_BENCH_UTIL_H */
