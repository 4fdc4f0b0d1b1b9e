/*
 * replay_util.h - what test_replay.c and test_replay_traces.c share: running a replay with its
 * report and per-request records in files named after a tag, comparing two runs' files, and
 * the configurations both use.
 *
 * Files, in the test executable's temporary directory (kvsim_test_tmpdir(), common.h):
 * replay-<pid>-<tag>.json (the report, wall-clock fields zeroed) and replay-<pid>-<tag>.jsonl
 * (the per-request records).
 */
#ifndef KVSIM_TESTS_REPLAY_UTIL_H
#define KVSIM_TESTS_REPLAY_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/api/api.h" /* kvsim_replay_config_default */
#include "runtime/replay/replay.h"

/* The path of run tag's file with extension ext ("json" or "jsonl"). */
void replay_output_path(char *buf, size_t len, const char *tag, const char *ext);

/* Deletes run tag's files. */
void replay_remove_outputs(const char *tag);

/* Runs a replay of base at threads threads (quiet); writes the report (wall fields zeroed) and
 * the per-request records to run tag's files; asserts success; returns the report. */
struct kvsim_report replay_run(const struct kvsim_replay_config *base, uint32_t threads,
                               const char *tag);

/* Asserts that runs tag_a and tag_b wrote identical files with extension ext; deletes both. */
void replay_assert_same_files(const char *tag_a, const char *tag_b, const char *ext);

/* The runs tagged tags[0..n) have the report and records of the run tagged ref (all deleted). */
void replay_assert_same_as(const char *const *tags, int n, const char *ref);

/* The defaults with trace (NULL: the built-in workload) on 8 engines; sanitizer builds replay a
 * prefix of each trace. */
void replay_base_config(struct kvsim_replay_config *c, const char *trace);

/* replay_base_config plus a G1 small enough that G2/G3 matter, slow enough links that copies
 * overlap steps, and failure injection. */
void replay_offload_config(struct kvsim_replay_config *c, const char *trace);

/* The offload replay of trace (a path, or NULL for the built-in workload) is identical for
 * either executor and 1 or 2 threads, and it moved blocks both ways, hit G2, onboarded tokens
 * and failed copies. */
void replay_check_offload_deterministic(const char *trace);

#endif /* KVSIM_TESTS_REPLAY_UTIL_H */
