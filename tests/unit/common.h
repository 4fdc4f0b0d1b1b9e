/*
 * common.h - what several Criterion test files share (common.c; compiled into every test
 * executable by tests/CMakeLists.txt).
 *
 * The test executables' main: Criterion's, except that a run in which a test was skipped and
 * none failed exits with KVSIM_TEST_SKIPPED (77), which ctest reports as "Skipped" (the tests
 * carry SKIP_RETURN_CODE 77). A skip is therefore never a silent pass.
 *
 * The shared traces: read in place (never copied into the repository) from $KVSIM_TRACES_DIR,
 * by default KVSIM_SOURCE_DIR "/../shared/traces". When that directory is absent the tests that
 * need it skip, or fail when KVSIM_REQUIRE_TRACES=1 (CI sets it).
 *
 * Temporary files: every test executable writes only under a directory of its own,
 * kvsim_test_tmpdir(), which main creates before the run and removes after it, pass or fail.
 */
#ifndef KVSIM_TESTS_COMMON_H
#define KVSIM_TESTS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <criterion/criterion.h>

/* The exit status of a test executable whose run skipped a test and failed none. */
#define KVSIM_TEST_SKIPPED 77

/* Criterion ignores LeakSanitizer's report, so tests ask for a leak check themselves. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define KVSIM_TEST_LEAK_CHECK()                                                                    \
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define KVSIM_TEST_LEAK_CHECK() ((void)0)
#endif

/* ---- the shared traces ----------------------------------------------------------------------- */

/* The directory of the shared traces: $KVSIM_TRACES_DIR if set and not empty, else
 * KVSIM_SOURCE_DIR "/../shared/traces". */
const char *kvsim_test_traces_dir(void);

/*
 * kvsim_test_trace_path - writes the path of the shared trace `name` to path[0..len). When the
 * traces directory is absent the calling test is skipped (KVSIM_REQUIRE_TRACES=1: it fails);
 * when the directory is there the trace must be readable, or the test fails.
 */
void kvsim_test_trace_path(char *path, size_t len, const char *name);

/* ---- files ----------------------------------------------------------------------------------- */

/* Reads a whole file into a NUL-terminated buffer (caller frees); *len (if not NULL) is its
 * size. Asserts that the file can be read. */
char *kvsim_test_read_file(const char *path, size_t *len);

/* The test executable's own temporary directory, kvsim-test-<executable>-XXXXXX in the system's
 * (common.c), made by main before the run and removed with everything in it after the run,
 * whatever the result; KVSIM_KEEP_TEST_FILES=1 keeps it (main names it on stderr). The tests'
 * processes find it in the environment (KVSIM_TEST_DIR), and the programs they run get it as
 * their temporary directory. */
const char *kvsim_test_tmpdir(void);

/* Writes "<kvsim_test_tmpdir()>/<name>" to buf[0..len); asserts that it fits. */
void kvsim_test_tmp_path(char *buf, size_t len, const char *name);

/* ---- block id lists (kvpool_block_id is an int32_t) ------------------------------------------ */

/* Formats ids[0..n) as "[a,b,c]" into buf (truncated to len). */
void kvsim_test_fmt_ids(char *buf, size_t len, const int32_t *ids, uint32_t n);

/* Asserts got[0..gn) == want[0..wn); the message shows both lists, prefixed by what. */
void kvsim_test_assert_ids(const int32_t *got, uint32_t gn, const int32_t *want, uint32_t wn,
                           const char *what);

/* ---- the G1 pool ----------------------------------------------------------------------------- */

struct kvpool;

/* Asserts that kvpool_check finds every block reconciled with its owners; the message (prefixed
 * by what) shows the violation. */
void kvsim_test_assert_pool_ok(const struct kvpool *pool, const char *what);

/* ---- scheduler requests ---------------------------------------------------------------------- */

struct sched;
struct sched_request;

/* Adds request id with the prompt first, first+1, ..., first+n-1 (n <= 64), max_tokens output
 * tokens, no EOS and arrival id; asserts that sched_add succeeds. */
struct sched_request *kvsim_test_add_request(struct sched *s, uint64_t id, uint32_t first,
                                             uint32_t n, uint32_t max_tokens);

#endif /* KVSIM_TESTS_COMMON_H */
