/*
 * accounting.c - the replay's thread accounting (KVSIM_REPLAY_ACCOUNTING=1; docs/replay.md,
 * "Threads"): each replay thread's CPU advancing engines and waiting at the barrier, each
 * phase's least time on 1, 2, 4, 8 and 16 threads from its engines' CPU, and the report's
 * accounting section. Off, every entry point costs one predictable branch.
 *
 * Threads: replay__acct_mark and replay__acct_since on any replay thread (the read count is the
 * calling thread's own); the rest as each function says.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/replay/replay_internal.h"

#include "runtime/report/report.h"

/* This thread's CPU time, ns (the accounting's clock). */
static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * The accounting's clock. A CPU-time read is a system call (about a microsecond on a
 * paravirtualised VM), and a 64-engine replay makes millions: uncorrected, they were most of
 * what the accounting measured. So each thread counts its reads (acct_clock), the replay
 * measures what one read costs before it starts (acct_clock_cost: the median gap between
 * back-to-back reads), and every measured interval gives back one read's cost for its own pair
 * of reads and one for each read made inside it (replay__acct_since).
 */
static _Thread_local uint64_t acct_reads; /* this thread's acct_clock calls */

static int64_t acct_clock(void)
{
    acct_reads++;
    return thread_cpu_ns();
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t acct_clock_cost(void)
{
    int64_t gap[31], prev = thread_cpu_ns();
    for (int i = 0; i < 31; i++) {
        int64_t now = thread_cpu_ns();
        gap[i] = now - prev;
        prev = now;
    }
    qsort(gap, 31, sizeof *gap, cmp_i64);
    return gap[15];
}

struct acct_mark replay__acct_mark(void)
{
    int64_t t0 = acct_clock();
    return (struct acct_mark){t0, acct_reads};
}

/* An interval from m (read when acct_reads was m.reads0, after the read) to now, less the cost
 * of its reads: its own pair and the ones made inside it. Never negative. */
int64_t replay__acct_since(const struct replay *rp, struct acct_mark m)
{
    int64_t t1 = acct_clock();
    uint64_t inside = acct_reads - m.reads0 - 1;
    int64_t d = t1 - m.t0 - rp->acct.clock_ns * (int64_t)(1 + inside);
    return d > 0 ? d : 0;
}

/* Thread w's CPU over its part of a phase (accounting on): the engines timed one by one and
 * the ones with nothing to do, which are not (replay__acct_phase_end shares those out). */
struct acct_mark replay__acct_work_begin(const struct replay *rp)
{
    return rp->acct.on ? replay__acct_mark() : (struct acct_mark){0, 0};
}

void replay__acct_work_end(struct replay *rp, uint32_t w, struct acct_mark m)
{
    if (!rp->acct.on)
        return;
    int64_t d = replay__acct_since(rp, m);
    rp->acct.thr[w].advance_ns += d;
    rp->acct.thr[w].phase_ns += d;
}

/* After a phase (coordinator, the engines' threads joined): the phase's least time on T threads
 * for T = 1, 2, 4, 8, 16, from its engines' CPU times. */
static void acct_phase_tally(struct replay *rp);

/* acct_phase_tally, its own CPU kept apart: the accounting's bookkeeping is not the replay's
 * serial work (on 64 engines it was a third of what "serial" measured). */
void replay__acct_phase_end(struct replay *rp)
{
    if (!rp->acct.on)
        return;
    struct acct_mark m = replay__acct_mark();
    acct_phase_tally(rp);
    rp->acct.tally_ns += replay__acct_since(rp, m);
}

static void acct_phase_tally(struct replay *rp)
{
    int64_t sum = 0, max = 0, all = 0;
    for (uint32_t e = 0; e < rp->num_engines; e++) {
        sum += rp->acct.engine_ns[e];
        max = rp->acct.engine_ns[e] > max ? rp->acct.engine_ns[e] : max;
    }
    for (uint32_t w = 0; w < rp->num_threads; w++) {
        all += rp->acct.thr[w].phase_ns;
        rp->acct.thr[w].phase_ns = 0;
    }
    if (all > sum) /* the engines with nothing to do, and the loop: shared out */
        sum = all;
    for (int i = 0; i < KVSIM_ACCOUNTING_BOUNDS; i++) { /* sum / 2^i rounded up: never below */
        int64_t share = (sum + (INT64_C(1) << i) - 1) >> i;
        rp->acct.critical_ns[i] += max > share ? max : share;
        /* as assigned on 2^i threads: the busiest thread's engines, the rest shared out */
        uint32_t T = 1u << i;
        int64_t *ts = rp->acct.thread_sum, timed = 0;
        memset(ts, 0, T * sizeof *ts);
        for (uint32_t e = 0; e < rp->num_engines; e++) {
            ts[e % T] += rp->acct.engine_ns[e];
            timed += rp->acct.engine_ns[e];
        }
        int64_t busiest = 0, untimed = (sum - timed + T - 1) / T;
        for (uint32_t w = 0; w < T; w++)
            busiest = ts[w] > busiest ? ts[w] : busiest;
        rp->acct.critical_assigned_ns[i] += busiest + untimed;
    }
    memset(rp->acct.engine_ns, 0, rp->num_engines * sizeof *rp->acct.engine_ns);
    rp->acct.phases++;
}

void replay__acct_start(struct replay *rp)
{
    if (!rp->acct.on)
        return;
    rp->acct.clock_ns = acct_clock_cost();
    rp->acct.coord = replay__acct_mark();
}

void replay__acct_stop(struct replay *rp)
{
    if (rp->acct.on)
        rp->acct.coord_cpu_ns = replay__acct_since(rp, rp->acct.coord);
}

/* The report's thread accounting (KVSIM_REPLAY_ACCOUNTING). */
void replay__acct_summarize(const struct replay *rp, struct kvsim_thread_accounting *ac)
{
    ac->enabled = true;
    ac->threads = rp->num_threads < KVSIM_ACCOUNTING_MAX_THREADS ? rp->num_threads
                                                                 : KVSIM_ACCOUNTING_MAX_THREADS;
    ac->phases = rp->acct.phases;
    ac->parallel_phases = rp->thr.phases_parallel;
    const struct acct_thread *c = &rp->acct.thr[0];
    ac->serial_s =
        (double)(rp->acct.coord_cpu_ns - c->advance_ns - c->wait_cpu_ns - rp->acct.tally_ns) / 1e9;
    for (uint32_t t = 0; t < ac->threads; t++) {
        ac->advance_s[t] = (double)rp->acct.thr[t].advance_ns / 1e9;
        ac->wait_s[t] = (double)rp->acct.thr[t].wait_cpu_ns / 1e9;
        ac->wait_wall_s[t] = (double)rp->acct.thr[t].wait_wall_ns / 1e9;
    }
    for (int i = 0; i < KVSIM_ACCOUNTING_BOUNDS; i++) {
        ac->critical_s[i] = (double)rp->acct.critical_ns[i] / 1e9;
        ac->critical_assigned_s[i] = (double)rp->acct.critical_assigned_ns[i] / 1e9;
    }
}
