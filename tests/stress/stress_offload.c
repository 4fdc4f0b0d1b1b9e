/*
 * stress_offload.c - the offload pipeline stress as a plain executable (Criterion cannot run
 * under ThreadSanitizer). The logic is runtime/stress_offload.c, also run by `kvsim stress`;
 * `stress_offload --help` lists the options.
 *
 * Run (TSan build): TSAN_OPTIONS=halt_on_error=1 ./stress_offload --threads 3 --seconds 2
 */
#include "runtime/stress.h"

int main(int argc, char **argv)
{
    return kvsim_stress_cli("stress_offload", KVSIM_STRESS_OFFLOAD, argc, argv);
}
