/*
 * config_api.c - the public configuration object (kvsim.h: kvsim_config_*): options set by name
 * or as one JSON object through the option table (config.c), each value kept as given. Not
 * thread-safe: one thread uses a configuration at a time.
 */
#include "runtime/api/api.h"
#include "kvpool/base.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kvsim_config {
    struct kvsim_options o;
    json_t *given; /* name -> value as a string: owns the strings o borrows */
    char err[1024];
};

/* For replay_api.c and engine_api.c (declared there). */
const struct kvsim_options *kvsim__config_options(const kvsim_config_t *c);
char *kvsim__config_errbuf(kvsim_config_t *c, size_t *len);

const struct kvsim_options *kvsim__config_options(const kvsim_config_t *c) { return &c->o; }
char *kvsim__config_errbuf(kvsim_config_t *c, size_t *len)
{
    *len = sizeof c->err;
    return c->err;
}

int kvsim_config_new(kvsim_config_t **out)
{
    *out = NULL;
    kvsim_config_t *c = calloc(1, sizeof *c);
    if (!c || !(c->given = json_object())) {
        free(c);
        return -ENOMEM;
    }
    kvsim_options_default(&c->o);
    *out = c;
    return 0;
}

void kvsim_config_free(kvsim_config_t *c)
{
    if (!c)
        return;
    json_decref(c->given);
    kvsim_options_fini(&c->o);
    free(c);
}

const char *kvsim_config_error(const kvsim_config_t *c) { return c->err; }

int kvsim_config_set(kvsim_config_t *c, const char *name, const char *value)
{
    c->err[0] = 0;
    if (!name) {
        snprintf(c->err, sizeof c->err, "kvsim_config_set: no option name");
        return -EINVAL;
    }
    char canon[128];
    kvsim_options_canonical(name, canon, sizeof canon);
    if (!kvsim_options_known(canon, NULL)) {
        snprintf(c->err, sizeof c->err, "unknown option '%s'", name);
        return -EINVAL;
    }
    /* Keep the value first: the options borrow its string. */
    json_t *v = json_string(value ? value : "true");
    if (!v) {
        snprintf(c->err, sizeof c->err, "option --%s: the value is not UTF-8 text", canon);
        return -EINVAL;
    }
    json_t *old = json_object_get(c->given, canon);
    json_incref(old); /* the options may still point into it if this value is refused */
    if (json_object_set_new(c->given, canon, v)) {
        json_decref(old);
        return -ENOMEM;
    }
    v = json_object_get(c->given, canon);
    struct kvsim_options saved = c->o;
    int rc = kvsim_options_set(&c->o, canon, json_string_value(v), c->err, sizeof c->err);
    if (rc) {
        if (c->o.config_doc != saved.config_doc) /* a configuration read before the refusal */
            json_decref(c->o.config_doc);
        c->o = saved;
        if (old)
            json_object_set(c->given, canon, old);
        else
            json_object_del(c->given, canon);
    }
    json_decref(old);
    return rc ? -EINVAL : 0;
}

int kvsim_config_set_json(kvsim_config_t *c, const char *text)
{
    c->err[0] = 0;
    json_error_t je;
    json_t *root = text ? json_loads(text, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!root || !json_is_object(root)) {
        if (root)
            snprintf(c->err, sizeof c->err, "kvsim_config_set_json: not a JSON object");
        else
            snprintf(c->err, sizeof c->err, "kvsim_config_set_json: %s (line %d, column %d)",
                     text ? je.text : "no text", text ? je.line : 0, text ? je.column : 0);
        json_decref(root);
        return -EINVAL;
    }
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, key, v)
    {
        char buf[64];
        const char *s = buf;
        if (json_is_null(v))
            continue;
        if (json_is_string(v))
            s = json_string_value(v);
        else if (json_is_true(v) || json_is_false(v))
            s = json_is_true(v) ? "true" : "false";
        else if (json_is_integer(v))
            snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (json_is_real(v))
            base_format_double(buf, sizeof buf, json_real_value(v));
        else {
            snprintf(c->err, sizeof c->err,
                     "kvsim_config_set_json: key '%s' must be a string, a number or a boolean",
                     key);
            rc = -EINVAL;
            break;
        }
        if ((rc = kvsim_config_set(c, key, s)) != 0)
            break;
    }
    json_decref(root);
    return rc;
}

char *kvsim_config_json(const kvsim_config_t *c)
{
    return json_dumps(c->given, JSON_PRESERVE_ORDER | JSON_COMPACT);
}
