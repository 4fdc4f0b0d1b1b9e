/* version.c - build identity and kvsim's error messages (kvsim.h). */
#include "runtime/kvsim.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

const char *kvsim_version(void) { return "kvsim " KVSIM_VERSION_STRING; }

unsigned kvsim_version_hex(void) { return KVSIM_VERSION_HEX; }

void kvsim_free(void *p) { free(p); }

const char *kvsim_allocator(void)
{
    /* Asked of the process, not of the build: libkvsim.so does not link jemalloc (the
     * executable does), and a caller may preload it. */
    return dlsym(RTLD_DEFAULT, "mallctl") ? "jemalloc" : "libc";
}

const char *kvsim_strerror(int err)
{
    switch (err) {
#define KVSIM__ERRNO_CASE(name, e, msg)                                                            \
    case KVSIM_E##name: return msg;
        KVSIM_ERRNO_MAP(KVSIM__ERRNO_CASE)
#undef KVSIM__ERRNO_CASE
    }
    return err <= 0 ? strerror(-err) : "Unknown error";
}
