/*
 * fuzz_validate_run.c - libFuzzer target for the readers of a recorded run directory that
 * `kvsim validate` and `kvsim calibrate` share (fid_open, runtime/cli/fidelity.h): meta.json,
 * config.json and requests.jsonl. The input is the three files separated by form feeds (a byte
 * no JSON text holds): META \f CONFIG \f REQUESTS; a part left out is a valid one (those of
 * tests/inputs/vllm-run/ok, two requests), so an input without a form feed fuzzes meta.json
 * alone. Each input is read twice: timed by the default polynomial (calibrate's case: no option
 * given), and with --profiles tests/inputs/profiles/tiny (validate's: the run's model, hardware,
 * memory and parallelism load a profile and derive a capacity).
 *
 * Asserted beyond "no crash, no sanitizer report": a refused run gets a negative errno and one
 * message naming the run's file (or, with --profiles, the profile it read), never beginning with
 * an option the user did not give (--model, --enable-expert-parallel, --gpu-memory-gib, ...: the
 * run's keys set them); an accepted one gives a configuration in the documented ranges (at
 * least 2 KV blocks) and requests with finite times in order, each with an output, sorted by
 * arrival; nothing is left in the temporary directory once the run is closed.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/cli/fidelity.h"

#include "fuzz_util.h"

#ifndef KVSIM_SOURCE_DIR
#define KVSIM_SOURCE_DIR "."
#endif

static const char *const defaults[3] = {
    "{\"model\": \"test/tiny\", \"engine_kwargs\": {\"tensor_parallel_size\": 1, "
    "\"max_num_seqs\": 4, \"max_num_batched_tokens\": 64, \"max_model_len\": null, "
    "\"kv_cache_dtype\": \"auto\"}, \"kv_cache\": {\"num_gpu_blocks\": 200}}\n",
    "{\"link_bw\": 16, \"link_latency\": 20000, \"nodes\": [{\"instances\": [{\"hardware\": "
    "\"TESTHW\", \"npu_mem\": {\"mem_size\": 1, \"mem_util\": 0.9}, \"tp_size\": 1}]}]}\n",
    "{\"request_id\": \"r0\", \"input_toks\": 40, \"output_toks\": 5, \"queued_ts\": 100.0, "
    "\"first_token_ts\": 100.01, \"last_token_ts\": 100.05}\n"
    "{\"request_id\": \"r1\", \"input_toks\": 41, \"output_toks\": 6, \"queued_ts\": 100.05, "
    "\"first_token_ts\": 100.062, \"last_token_ts\": 100.11}\n",
};
static const char *const names[3] = {"meta.json", "config.json", "requests.jsonl"};

/* Options a recorded run's keys stand for: a message that begins with one blames the user for a
 * value of the run's files. */
static const char *const not_given[] = {
    "--model",
    "--enable-expert-parallel",
    "--gpu-memory-gib",
    "--gpu-memory-utilization",
    "--tp",
    "--data-parallel-size",
    "--hardware",
    "--tp-link-gbps",
    "--tp-link-latency-us",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--block-size",
    "--max-model-len",
};

static char dir[256];   /* the run directory */
static char tmp[300];   /* TMPDIR while a run is read: the replay's records file goes there */
static char root[1200]; /* the profiles */

/* Removes the run directory at exit (a crash keeps it: the input is kept anyway). */
static void remove_dir(void)
{
    char path[512];
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(tmp);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/kvsim-fuzz-run.XXXXXX", t && *t ? t : "/tmp");
    FUZZ_CHECK(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
    snprintf(tmp, sizeof tmp, "%s/tmp", dir);
    FUZZ_CHECK(mkdir(tmp, 0700) == 0, "mkdir %s", tmp);
    FUZZ_CHECK(setenv("TMPDIR", tmp, 1) == 0, "setenv");
    atexit(remove_dir);
    snprintf(root, sizeof root, "%s/tests/inputs/profiles/tiny", KVSIM_SOURCE_DIR);
    return 0;
}

static void write_file(const char *name, const uint8_t *data, size_t size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    FUZZ_CHECK(f != NULL, "fopen %s", path);
    FUZZ_CHECK(fwrite(data, 1, size, f) == size && fclose(f) == 0, "write %s", path);
}

/* How many entries the directory d holds (. and .. aside). */
static size_t entries(const char *d)
{
    DIR *h = opendir(d);
    FUZZ_CHECK(h != NULL, "opendir %s", d);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(h));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(h);
    return n;
}

static void check_refused(int rc, const char *msg, bool profiles)
{
    FUZZ_CHECK(rc < 0, "rc %d", rc);
    const char *prefix = "kvsim validate: ";
    FUZZ_CHECK(!strncmp(msg, prefix, strlen(prefix)), "one message, by the command: %s", msg);
    const char *text = msg + strlen(prefix);
    FUZZ_CHECK(strstr(text, dir) || (profiles && !strncmp(text, "--profiles ", 11)),
               "the message names the run's file: %s", msg);
    for (size_t i = 0; i < sizeof not_given / sizeof not_given[0]; i++) {
        size_t n = strlen(not_given[i]);
        /* the option itself, not a longer one it begins (--tp in --tp-link-gbps) */
        FUZZ_CHECK(strncmp(text, not_given[i], n) || text[n] == '-' ||
                       (text[n] >= 'a' && text[n] <= 'z'),
                   "the message begins with %s, an option not given: %s", not_given[i], msg);
    }
}

static void check_accepted(const struct fid_run *run)
{
    const struct kvsim_replay_config *cfg = &run->cfg;
    const struct sched_config *sc = &cfg->sched;
    FUZZ_CHECK(sc->block_size >= 1 && sc->block_size <= 65536, "block_size %u", sc->block_size);
    FUZZ_CHECK(sc->max_num_seqs >= 1 && sc->max_num_seqs <= (1u << 20), "max_num_seqs %u",
               sc->max_num_seqs);
    FUZZ_CHECK(sc->max_num_batched_tokens >= 1 && sc->max_num_batched_tokens <= INT32_MAX,
               "max_num_batched_tokens %u", sc->max_num_batched_tokens);
    FUZZ_CHECK(sc->max_model_len == 0 || sc->max_model_len >= 2, "max_model_len %u",
               sc->max_model_len);
    FUZZ_CHECK(sc->num_blocks >= 2 && sc->num_blocks <= INT32_MAX - 2, "num_blocks %u",
               sc->num_blocks);
    FUZZ_CHECK(cfg->data_parallel_size >= 1 && cfg->data_parallel_size <= 4096,
               "data_parallel_size %u", cfg->data_parallel_size);
    FUZZ_CHECK(cfg->num_engines == 1 && cfg->trace_path && cfg->outputs.requests_path,
               "one engine, the run's requests, the records' path");
    const struct fid_side *s = &run->real;
    FUZZ_CHECK(s->n >= 1, "no requests");
    for (size_t i = 0; i < s->n; i++) {
        const struct fid_req *r = &s->r[i];
        FUZZ_CHECK(isfinite(r->start) && isfinite(r->first) && isfinite(r->last) &&
                       r->start <= r->first && r->first <= r->last && r->out >= 1,
                   "request of line %zu: %g %g %g, %g tokens", r->line, r->start, r->first, r->last,
                   r->out);
        FUZZ_CHECK(i == 0 || s->r[i - 1].start < r->start ||
                       (s->r[i - 1].start == r->start && s->r[i - 1].line < r->line),
                   "requests not in arrival order at line %zu", r->line);
    }
}

/* Reads the run directory once (profiles: with --profiles ROOT, else the default polynomial). */
static void read_run(bool profiles)
{
    struct cli_parser p;
    memset(&p, 0, sizeof p);
    p.prog = "kvsim validate";
    struct fid_opts o = {.polynomial_default = !profiles};
    struct cli_timing t;
    cli_timing_default(&t);
    if (profiles)
        t.o.profiles = root;
    struct fid_run run;
    struct fuzz_capture c;
    fuzz_capture_begin(&c);
    int rc = fid_open(&p, dir, &o, &t, &run);
    char *msg = fuzz_capture_end(&c);
    if (rc)
        check_refused(rc, msg, profiles);
    else {
        FUZZ_CHECK(!*msg, "an accepted run printed: %s", msg);
        check_accepted(&run);
    }
    free(msg);
    fid_close(&run);
    cli_timing_fini(&t);
    FUZZ_CHECK(entries(tmp) == 0, "the closed run left a file in %s", tmp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *at = data, *end = data + size;
    for (int k = 0; k < 3; k++) {
        const uint8_t *ff = at ? memchr(at, '\f', (size_t)(end - at)) : NULL;
        if (at)
            write_file(names[k], at, (size_t)((ff ? ff : end) - at));
        else
            write_file(names[k], (const uint8_t *)defaults[k], strlen(defaults[k]));
        at = ff ? ff + 1 : NULL;
    }
    read_run(false);
    read_run(true);
    return 0;
}
