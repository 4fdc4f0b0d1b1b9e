/*
 * stress_offload.c - the offload pipeline stress as a plain executable (Criterion cannot run
 * under ThreadSanitizer). The logic is runtime/verify/stress_offload.c, also run by `kvsim stress`;
 * `stress_offload --help` lists the options.
 *
 * Run (TSan build): TSAN_OPTIONS=halt_on_error=1 ./stress_offload --threads 3 --seconds 2
 */
#include "runtime/cli/cli.h"
#include "runtime/verify/verify.h"

int main(int argc, char **argv)
{
    return cli_stress("stress_offload", KVSIM_STRESS_OFFLOAD, argc, argv);
}
