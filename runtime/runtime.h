/*
 * runtime.h - kvsim's internal umbrella: every runtime module at once (the tools, the tests
 * and the benchmarks include it; an embedder includes the installed <kvsim/kvsim.h>).
 *
 * It brings in the runtime's modules, each with its own header and contract:
 *   input/input.h    traces (Mooncake JSONL, Azure CSV) and the seeded synthetic workload
 *   report/report.h  the metrics collector, percentiles and the report writers
 *   engine/engine.h  an engine: scheduler core + G1 pool + step model + offload tiers
 *   replay/replay.h  the multi-engine replay: epochs, worker threads, routers
 * and, below them, the core (kvpool/kvpool.h, kvpool/registry.h, sched/sched.h,
 * offload/offload.h); and the installed public API (runtime/kvsim.h: the version, kvsim's error
 * codes, the configuration, the engine you step, the replay). The module headers are kvsim's
 * internal API: the static library and the tools use them, libkvsim.so exports only kvsim.h.
 *
 * Errors everywhere are negative errno values. Where kvsim gives an errno a meaning of its own,
 * the code has a KVSIM_E* name (kvsim.h) and kvsim_strerror() says what kvsim means by it (a
 * dead end must not print "Resource deadlock avoided").
 *
 * Threads: nothing here has hidden global state; the per-module headers state which thread may
 * call what.
 */
#ifndef KVSIM_RUNTIME_H
#define KVSIM_RUNTIME_H

#include "runtime/kvsim.h"

#include "runtime/engine/engine.h"
#include "runtime/input/input.h"
#include "runtime/replay/replay.h"
#include "runtime/report/report.h"

#endif /* KVSIM_RUNTIME_H */
