/*
 * fuzz_engine_args.c - libFuzzer target for vLLM engine-argument files (kvsim_engine_args_load,
 * runtime/engine/engine.h). Asserted beyond "no crash, no sanitizer report": a refused file
 * gets a message that starts with its name and leaves the configuration and the parallel
 * arguments as they were (no partial state); an accepted one gives values in the ranges the
 * loader documents.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "runtime/engine/engine.h"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024];
    int fd = fuzz_input_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    struct sched_config sc, before;
    sched_config_default(&sc);
    before = sc;
    struct kvsim_parallel_args par = {1, false}, par_before = par;
    int rc = kvsim_engine_args_load(path, &sc, &par, err, sizeof err);
    close(fd);
    if (rc) {
        FUZZ_CHECK(rc < 0, "rc %d", rc);
        FUZZ_CHECK(strncmp(err, path, strlen(path)) == 0, "the message names the file: %s", err);
        FUZZ_CHECK(memcmp(&sc, &before, sizeof sc) == 0, "a refused file changed the config: %s",
                   err);
        FUZZ_CHECK(memcmp(&par, &par_before, sizeof par) == 0,
                   "a refused file changed the parallel arguments: %s", err);
        return 0;
    }
    FUZZ_CHECK(sc.block_size >= 1 && sc.block_size <= 65536, "block_size %u", sc.block_size);
    FUZZ_CHECK(sc.num_blocks >= 2, "num_gpu_blocks_override %u", sc.num_blocks);
    FUZZ_CHECK(sc.max_num_seqs >= 1 && sc.max_num_batched_tokens >= 1 &&
                   (sc.max_model_len == 0 || sc.max_model_len >= 2), /* 0: not set */
               "max_num_seqs %u, max_num_batched_tokens %u, max_model_len %u", sc.max_num_seqs,
               sc.max_num_batched_tokens, sc.max_model_len);
    FUZZ_CHECK(sc.watermark >= 0 && sc.watermark < 1, "watermark %g", sc.watermark);
    FUZZ_CHECK(par.data_parallel_size >= 1 && par.data_parallel_size <= 4096,
               "data_parallel_size %u", par.data_parallel_size);
    return 0;
}
