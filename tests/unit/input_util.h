/*
 * input_util.h - what test_input.c and test_input_traces.c share: loading a trace that must load,
 * and the properties every loaded trace has.
 */
#ifndef KVSIM_TESTS_INPUT_UTIL_H
#define KVSIM_TESTS_INPUT_UTIL_H

#include "runtime/input/input.h"

/* Loads path with opts (NULL: the defaults) into *t; asserts success and an empty message. */
void input_load_ok(const char *path, const struct kvsim_trace_opts *opts, struct kvsim_trace *t);

/* Asserts the properties every trace must have, whatever its source: arrivals from 0 in order,
 * lengths >= 1, hash ranges, sessions and previous turns consistent, the clamped count. */
void input_check_invariants(const struct kvsim_trace *t);

#endif /* KVSIM_TESTS_INPUT_UTIL_H */
