/*
 * fuzz_config.c - libFuzzer target for `--config FILE` (a step model's JSON, or a whole run
 * configuration as `kvsim replay --config-out` writes it): kvsim_options_set("config") then
 * kvsim_options_resolve (runtime/api/api.h). Asserted beyond "no crash, no sanitizer report": a
 * refused file gets a message naming it; an accepted one round-trips: its effective
 * configuration (kvsim_options_config_text), read back through --config, resolves and gives the
 * same text byte for byte.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api.h"

#include "fuzz_util.h"

/* Reads the configuration at path into *o and resolves it into *run. Returns 0, or nonzero with
 * err set (then nothing in run is to be freed; o is, by the caller). */
static int read_config(struct kvsim_options *o, struct kvsim_run *run, const char *path, char *err,
                       size_t errlen)
{
    kvsim_options_default(o);
    int rc = kvsim_options_set(o, "config", path, err, errlen);
    FUZZ_CHECK(rc <= 0, "--config is an option (rc %d)", rc);
    return rc ? rc : kvsim_options_resolve(o, run, err, errlen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[2048];
    int fd = fuzz_input_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    struct kvsim_options o;
    struct kvsim_run run;
    int rc = read_config(&o, &run, path, err, sizeof err);
    close(fd);
    if (rc) {
        FUZZ_CHECK(rc < 0, "rc %d", rc);
        /* The option's name then the file, or (an option the file sets) the file's key. */
        FUZZ_CHECK(strstr(err, path) != NULL, "the message names the file: %s", err);
        kvsim_options_fini(&o);
        return 0;
    }
    char *first = kvsim_options_config_text(&o, &run);
    kvsim_run_fini(&run);
    kvsim_options_fini(&o);
    FUZZ_CHECK(first != NULL, "the effective configuration of an accepted file");
    /* Read it back: the same run, so the same effective configuration. */
    char path2[64];
    int fd2 = fuzz_input_file((const uint8_t *)first, strlen(first), path2, sizeof path2);
    FUZZ_CHECK(fd2 >= 0, "memfd for the round trip");
    rc = read_config(&o, &run, path2, err, sizeof err);
    close(fd2);
    FUZZ_CHECK(rc == 0, "--config-out's file is refused: %s\n%s", err, first);
    char *second = kvsim_options_config_text(&o, &run);
    kvsim_run_fini(&run);
    kvsim_options_fini(&o);
    FUZZ_CHECK(second && strcmp(first, second) == 0, "the round trip changed it:\n%s\n---\n%s",
               first, second ? second : "(NULL)");
    free(first);
    free(second);
    return 0;
}
