/* version.c - build identity and kvsim's error messages (runtime.h). */
#include "runtime/runtime.h"

#include <string.h>

const char *kvsim_version(void) { return "kvsim " KVSIM_VERSION_STRING; }

const char *kvsim_allocator(void)
{
#ifdef KVSIM_HAVE_JEMALLOC
    return "jemalloc";
#else
    return "libc";
#endif
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
