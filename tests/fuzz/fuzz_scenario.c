/*
 * fuzz_scenario.c - libFuzzer target for the conformance scenario reader and runner
 * (kvsim_conform_run_json, runtime/verify/verify.h): any JSON document is validated whole, then
 * run. Asserted beyond "no crash, no sanitizer report, no hang" (the document limits of
 * docs/conformance.md bound the work): the verdict is pass, a failed expectation or a refusal,
 * and a refusal or a failure says why (a kind and a message).
 */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "runtime/verify/verify.h"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t e;
    json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &e);
    if (!doc)
        return 0; /* not JSON: the JSON parser's business, not kvsim's */
    struct kvsim_conform_options opt = {0};
    struct kvsim_conform_result res;
    memset(&res, 0, sizeof res);
    int rc = kvsim_conform_run_json(doc, &opt, &res, NULL);
    FUZZ_CHECK(rc == 0 || rc == KVSIM_ESCENARIO || rc == -EINVAL, "rc %d", rc);
    if (rc)
        FUZZ_CHECK(res.message[0] && res.kind[0], "rc %d says why (kind '%s', message '%s')", rc,
                   res.kind, res.message);
    json_decref(doc);
    return 0;
}
