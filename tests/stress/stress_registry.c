/*
 * stress_registry.c - the block registry stress as a plain executable (Criterion cannot run
 * under ThreadSanitizer). The logic is runtime/verify/stress_registry.c, also run by `kvsim
 * stress`; `stress_registry --help` lists the options (defaults: 1 reader, 1 writer, 20000 steps, 2
 * s).
 *
 * Run (TSan build):
 *   TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/.ci/tsan.supp" ./stress_registry
 */
#include "runtime/cli/cli.h"
#include "runtime/verify/verify.h"

int main(int argc, char **argv)
{
    return cli_stress("stress_registry", KVSIM_STRESS_REGISTRY, argc, argv);
}
