/*
 * soak_classes.c - the expected findings of the soak: the dead ends kvsim reaches because
 * upstream vLLM reaches them too (docs/fidelity/findings.md), each recognised by a signature on
 * the dead end's structure (struct kvsim_dead_end), never by seed. Everything else a soak finds
 * is an unexpected failure.
 *
 * Every class shares one core: nothing runs, the head of the waiting loop is refused by
 * allocate_slots, the loop breaks (the waiting phase never skips past a refused head, §4.3), and
 * the blocks that would let the head through are held by requests queued behind it that got
 * them from an asynchronous load (a KV-connector load, an onboarding from G2/G3, a
 * disaggregated decode's transfer): parked, or promoted when their load ended and not admitted
 * since. Nothing the engine waits for can change that. The classes differ in how the head got
 * ahead of the loads (PRIORITY's heap order; FCFS's skipped-waiting queue, served first) and
 * in which check refused it (the free blocks, or #44560's reservation for in-flight prefills).
 */
#include "runtime/verify/verify.h"

#include <stddef.h>

#define BIT(st) (1u << (st))

/* The core every class shares (see the file comment). */
static bool stranded_loads(const struct kvsim_dead_end *d)
{
    return d->found && !d->running && d->holders > 0 && d->holders_loaded == d->holders &&
           (d->head_status == SCHED_WAITING || d->head_status == SCHED_PREEMPTED) &&
           (d->holder_states &
            ~(BIT(SCHED_WAITING) | BIT(SCHED_PREEMPTED) | BIT(SCHED_WAITING_FOR_REMOTE_KVS))) == 0;
}

static bool priority_free(const struct kvsim_dead_end *d)
{
    return stranded_loads(d) && d->priority && d->rule == SCHED_STOP_ALLOC_FREE && !d->head_holds;
}

static bool priority_reserved(const struct kvsim_dead_end *d)
{
    return stranded_loads(d) && d->priority && d->rule == SCHED_STOP_ALLOC_RESERVED &&
           !d->head_holds;
}

static bool fcfs_free(const struct kvsim_dead_end *d)
{
    return stranded_loads(d) && !d->priority && d->head_skipped &&
           d->rule == SCHED_STOP_ALLOC_FREE && !d->head_holds;
}

static bool fcfs_reserved(const struct kvsim_dead_end *d)
{
    return stranded_loads(d) && !d->priority && d->head_skipped &&
           d->rule == SCHED_STOP_ALLOC_RESERVED && !d->head_holds;
}

static bool fcfs_overcommit(const struct kvsim_dead_end *d)
{
    return stranded_loads(d) && !d->priority && d->head_skipped &&
           d->rule == SCHED_STOP_ALLOC_FREE && d->head_holds;
}

static const struct kvsim_soak_class classes[] = {
    {"priority-head-strands-loads",
     "PRIORITY; nothing runs; the head (WAITING or PREEMPTED, holding nothing) is refused "
     "because its blocks exceed the free blocks; every queued request holding blocks holds them "
     "from an async load (WAITING_FOR_REMOTE_KVS, or promoted and not admitted since)",
     "policy=priority and async loads: external_async_pct > 0, offload, or two engines",
     "the waiting loop breaks on the better heap head; loads behind it are never promoted "
     "(findings.md, \"A PRIORITY head strands finished loads\")",
     priority_free},
    {"priority-reservation-strands-loads",
     "PRIORITY; nothing runs; the head, an async-load admission holding nothing, is refused by "
     "the #44560 reservation for in-flight prefills; the holders are loads as above",
     "policy=priority and async loads (external_async_pct > 0 or offload)",
     "reserved_blocks counts parked loads the loop can no longer reach "
     "(findings.md, \"A reservation for loads the loop cannot reach\")",
     priority_reserved},
    {"fcfs-skipped-head-strands-loads",
     "FCFS; nothing runs; the head sits in the skipped-waiting queue ahead of the loads, holds "
     "nothing and is refused because its blocks exceed the free blocks; the holders are loads",
     "policy=fcfs, async loads, and a way into the skipped queue ahead of them: "
     "async_scheduling (a preempted request skipped for its stale output, #48245) or a failed "
     "onboarding (offload_fail_rate)",
     "FCFS serves skipped-waiting first; a request skipped in the same pass as a load is put "
     "back ahead of it (findings.md, \"An FCFS head in the skipped queue\")",
     fcfs_free},
    {"fcfs-skipped-head-reservation",
     "FCFS; nothing runs; the head sits in the skipped-waiting queue, holds nothing and, an "
     "async-load admission, is refused by the #44560 reservation; the holders are loads",
     "policy=fcfs, async loads, and a way into the skipped queue as above",
     "as above, refused by reserved_blocks (findings.md, \"An FCFS head in the skipped queue\")",
     fcfs_reserved},
    {"fcfs-onboarding-overcommit",
     "FCFS; nothing runs; the head sits in the skipped-waiting queue holding the blocks of its "
     "own finished load and is refused because what it still needs exceeds the free blocks; the "
     "holders behind it are loads",
     "policy=fcfs and offload (onboardings admitted in one pass) or connector loads",
     "two loads admitted in one schedule whose sequences do not fit together "
     "(findings.md, \"Two loads that do not fit together\"; "
     "tests/regressions/known-dead-end-fcfs-onboarding-overcommit.json)",
     fcfs_overcommit},
};

const struct kvsim_soak_class *kvsim_soak_classes(size_t *n)
{
    *n = sizeof classes / sizeof classes[0];
    return classes;
}

const struct kvsim_soak_class *kvsim_soak_classify(const struct kvsim_conform_result *res)
{
    if (res->verdict != KVSIM_CONFORM_FAIL || !res->dead_end.found)
        return NULL;
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        if (classes[i].match(&res->dead_end))
            return &classes[i];
    return NULL;
}
