/*
 * base.h - the few portable primitives every kvsim module uses: splitmix64 mixing, the
 * monotonic clock, and the pieces of a spin-then-sleep wait (a CPU pause and a futex).
 *
 * This is the base layer below every module, not part of the pool: it sits in kvpool/ because
 * kvpool is the lowest module, and it is the one kvpool header that offload/ (which includes
 * nothing else of kvpool) may include. Header-only, private (never installed), no state:
 * every function may be called from any thread.
 */
#ifndef KVSIM_BASE_H
#define KVSIM_BASE_H

#include <limits.h>
#include <linux/futex.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* splitmix64's increment (2^64 / golden ratio). */
#define BASE_GOLDEN_GAMMA UINT64_C(0x9e3779b97f4a7c15)

/* splitmix64's finaliser: a bijective mix of x (structured inputs become uniform bits). */
static inline uint64_t base_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* splitmix64 of one value: the finaliser of x + gamma (a stateless hash of x). */
static inline uint64_t base_splitmix64(uint64_t x) { return base_mix64(x + BASE_GOLDEN_GAMMA); }

/* The splitmix64 generator: advances *state by gamma and returns the finaliser of it. */
static inline uint64_t base_splitmix64_next(uint64_t *state)
{
    *state += BASE_GOLDEN_GAMMA;
    return base_mix64(*state);
}

/* CLOCK_MONOTONIC in nanoseconds (wall time for measurements and guards, never virtual time). */
static inline int64_t base_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Wall seconds for people, as "1h02m", "3m05s" or "42s" (progress lines). */
static inline void base_format_wall(char *buf, size_t len, double s)
{
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, len, "%lds", t);
}

/* x as the shortest decimal that reads back as the same double ("2.12204", not
 * "2.1220400000000001"): an integer below 2^53 in full ("1000", not "1e+03"), else %.{1..17}g,
 * the first that round-trips (17 always does). */
static inline void base_format_double(char *buf, size_t len, double x)
{
    if (x > -9007199254740992.0 && x < 9007199254740992.0 && x == (double)(long long)x) {
        snprintf(buf, len, "%lld", (long long)x);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, len, "%.*g", p, x);
        if (p == 17 || strtod(buf, NULL) == x)
            return;
    }
}

/* A byte count for people: "512 B", "1.50 KiB", "12.3 MiB", "4.00 GiB" (three digits). */
static inline void base_format_bytes(char *buf, size_t len, uint64_t bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", bytes);
    else
        snprintf(buf, len, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

/* One iteration of a spin loop: a pause hint where the CPU has one, nothing elsewhere. */
static inline void base_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/*
 * base_futex_wait - sleep while *word == val, at most timeout_ns (< 0: no limit). Returns on a
 * wake, a timeout, a signal or at once if *word != val: callers re-check their condition.
 * Ordering: none by itself; the caller's acquire load of *word after it orders what follows.
 */
static inline void base_futex_wait(_Atomic uint32_t *word, uint32_t val, int64_t timeout_ns)
{
    struct timespec ts, *tsp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = (time_t)(timeout_ns / 1000000000);
        ts.tv_nsec = (long)(timeout_ns % 1000000000);
        tsp = &ts;
    }
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, tsp, NULL, 0);
}

/* base_futex_wake - wake at most n threads sleeping on word (INT_MAX: all). */
static inline void base_futex_wake(_Atomic uint32_t *word, int n)
{
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

#endif /* KVSIM_BASE_H */
