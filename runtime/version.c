/* version.c - build identity. */
#include "runtime/runtime.h"

const char *kvsim_version(void) { return "kvsim " KVSIM_VERSION_STRING; }

const char *kvsim_allocator(void)
{
#ifdef KVSIM_HAVE_JEMALLOC
    return "jemalloc";
#else
    return "libc";
#endif
}
