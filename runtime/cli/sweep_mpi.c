/*
 * sweep_mpi.c - `mpirun -np R kvsim sweep ...`: the points of a sweep on R MPI ranks
 * (docs/scale.md). Built into the kvsim executable only, when Open MPI is found (-DKVSIM_MPI);
 * libkvsim never links MPI.
 *
 * Every rank parses the same command line and resolves the same points (same ids). Rank 0 owns
 * DIR: it keeps the reports a rerun may keep, writes every row and report, and prints the
 * table. It hands out the other points one at a time, the most expensive first (requests x
 * engines), to whichever rank asks, and replays points itself on a second thread while its main
 * thread serves the others. Every rank replays in its own process, one point at a time: Open MPI
 * does not support fork() after MPI_Init, so there are no worker processes (-j is refused).
 *
 * The requests: every rank loads the trace itself from the same path (a shared filesystem, or
 * the same file copied to each host), once per distinct loading options, rather than receiving
 * it from rank 0: a load is a fraction of one replay, it needs no serialisation of the loaded
 * requests, and it keeps rank 0's link free for results. Rank 0 sends each assignment with its
 * trace's sha256; a rank whose copy differs fails that point, saying so, instead of replaying
 * other requests.
 *
 * Messages (MPI_BYTE): a rank asks with TAG_RESULT, carrying the result of its previous point
 * (struct mpi_result, then the report's JSON text or the error message; index -1 the first
 * time); rank 0 answers TAG_ASSIGN (struct mpi_assign; index -1: no more points). A rank that
 * dies aborts the job (MPI_ERRORS_ARE_FATAL; Open MPI 4.1 has no fault tolerance); the rows
 * received so far are on disk and a rerun keeps their reports.
 *
 * Threads: MPI_THREAD_FUNNELED: only the main thread of a rank calls MPI. Rank 0's replay
 * thread touches nothing of the sweep but the point it replays (read-only) and its own result
 * slot, published with a release store on `done` and read after an acquire load.
 */
#include "runtime/cli/sweep.h"

#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvpool/base.h"
#include "runtime/report/report.h"

enum { TAG_RESULT = 1, TAG_ASSIGN = 2 };

struct mpi_result {
    int64_t index;  /* the point, or -1: nothing yet */
    int32_t status; /* 0: the report's text follows; else a negative errno and the message */
    int32_t pad;
};

struct mpi_assign {
    int64_t index;   /* the point, or -1: stop */
    char sha256[65]; /* its trace's, as rank 0 loaded it ("": the synthetic workload) */
    char pad[7];
};

static long env_long(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return -1;
    char *end;
    long x = strtol(v, &end, 10);
    return *end ? -1 : x;
}

int sweep_mpi_env_rank(void)
{
    static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
        long r = env_long(ranks[i]);
        if (r >= 0)
            return (int)r;
    }
    return -1;
}

const char *sweep_mpi_library(void)
{
    static char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (!version[0] && MPI_Get_library_version(version, &len) == MPI_SUCCESS) {
        char *comma = strchr(version, ','); /* "Open MPI v4.1.4, package: ..." */
        if (comma)
            *comma = 0;
    }
    return version;
}

/* ---- rank 0 -----------------------------------------------------------------------------------
 */

/* Rank 0's own replay, on its second thread. */
struct own_replay {
    const struct sweep *sw;
    const struct sweep_point *pt;
    const struct kvsim_trace *trace;
    pthread_t thread;
    bool running;
    atomic_bool done; /* release: rc, text and err are set */
    int rc;
    char *text;
    char err[2048];
};

static void *own_replay_main(void *arg)
{
    struct own_replay *own = arg;
    own->rc =
        sweep_replay_point(own->sw, own->pt, own->trace, &own->text, own->err, sizeof own->err);
    atomic_store_explicit(&own->done, true, memory_order_release);
    return NULL;
}

/* Ends point pt with a replay's result: writes its report (status 0) and its row. Returns 0
 * or -ENOMEM. */
static int take_result(struct sweep *sw, struct sweep_point *pt, FILE *rows, int status,
                       const char *text)
{
    char path[4096], err[2048];
    int64_t t0 = base_monotonic_ns();
    int rc;
    if (status == 0) {
        snprintf(path, sizeof path, "%s/reports/%s.json", sw->out, pt->id);
        int wrc = kvsim_write_text(path, text, err, sizeof err);
        rc = sweep_point_ended(sw, pt, rows, wrc == 0, err);
    } else
        rc = sweep_point_ended(sw, pt, rows, false, text);
    sw->mpi_serial_ns += base_monotonic_ns() - t0;
    return rc;
}

/* The order of the points to run: the most expensive first (requests x engines), then by
 * index. */
static const double *cost_of;
static int cmp_cost(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    if (cost_of[x] != cost_of[y])
        return cost_of[x] > cost_of[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* The expected cost of point pt: the requests of its trace (1 for the synthetic workload) x
 * its engines. */
static double point_cost(const struct sweep *sw, const struct sweep_point *pt)
{
    const struct sweep_group *g = &sw->groups[pt->group];
    double requests = g->trace_path && g->loaded && !g->load_rc ? (double)g->trace.num_reqs : 1;
    struct sweep_topology topo = {.engines = 1};
    sweep_point_topology(sw, pt->index, &topo); /* pending points are valid */
    return requests * (double)topo.engines;
}

static void sleep_briefly(void)
{
    struct timespec ts = {0, 500 * 1000}; /* 0.5 ms: a result waits at most this long */
    nanosleep(&ts, NULL);
}

int sweep_mpi_coordinate(struct sweep *sw, FILE *rows, int ranks)
{
    sw->keep_traces = true; /* rank 0 replays points of any group, in cost order */
    sw->mpi_ranks = ranks;
    size_t *queue = malloc((sw->npoints ? sw->npoints : 1) * sizeof *queue);
    double *cost = calloc(sw->npoints ? sw->npoints : 1, sizeof *cost);
    int rc = queue && cost ? 0 : -ENOMEM;
    size_t nqueue = 0;
    for (size_t i = 0; i < sw->npoints && rows && !rc; i++) {
        struct sweep_point *pt = &sw->points[i];
        if (pt->state != POINT_PENDING)
            continue;
        struct sweep_group *g = &sw->groups[pt->group];
        int lrc = sweep_group_load(sw, pt->group);
        if (lrc == -ENOMEM && !g->load_error) {
            rc = lrc;
            break;
        }
        if (lrc) {
            rc = sweep_finish_point(sw, pt, rows, NULL, g->load_error);
            continue;
        }
        int kept = sweep_keep_reusable(sw, pt, rows);
        if (kept) {
            rc = kept < 0 ? kept : 0;
            continue;
        }
        if (sw->max_points && nqueue >= sw->max_points)
            continue; /* left for a rerun */
        cost[i] = point_cost(sw, pt);
        queue[nqueue++] = i;
    }
    cost_of = cost;
    if (!rc)
        qsort(queue, nqueue, sizeof *queue, cmp_cost);
    size_t next = 0;
    int active = ranks - 1; /* ranks not yet told to stop */
    struct own_replay own = {.sw = sw};
    char *buf = NULL;
    while (!rc && (active > 0 || own.running || next < nqueue)) {
        bool busy = false;
        if (own.running && atomic_load_explicit(&own.done, memory_order_acquire)) {
            pthread_join(own.thread, NULL);
            own.running = false;
            struct sweep_point *pt = (struct sweep_point *)own.pt;
            rc = take_result(sw, pt, rows, own.rc, own.rc ? own.err : own.text);
            free(own.text);
            own.text = NULL;
            busy = true;
        }
        if (!rc && !own.running && next < nqueue) {
            struct sweep_point *pt = &sw->points[queue[next++]];
            const struct sweep_group *g = &sw->groups[pt->group];
            own.pt = pt;
            own.trace = g->trace_path ? &g->trace : NULL;
            atomic_store_explicit(&own.done, false, memory_order_relaxed);
            if (pthread_create(&own.thread, NULL, own_replay_main, &own) != 0) {
                rc = sweep_point_ended(sw, pt, rows, false, "its thread cannot start");
            } else {
                own.running = true;
                sw->started++;
            }
            busy = true;
        }
        int flag = 0;
        MPI_Status st;
        if (!rc && active > 0)
            MPI_Iprobe(MPI_ANY_SOURCE, TAG_RESULT, MPI_COMM_WORLD, &flag, &st);
        if (flag) {
            int count = 0;
            MPI_Get_count(&st, MPI_BYTE, &count);
            free(buf);
            buf = malloc((size_t)count + 1);
            if (!buf || count < (int)sizeof(struct mpi_result)) {
                rc = -ENOMEM;
                break;
            }
            MPI_Recv(buf, count, MPI_BYTE, st.MPI_SOURCE, TAG_RESULT, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            sw->mpi_bytes += (uint64_t)count;
            buf[count] = 0;
            struct mpi_result res;
            memcpy(&res, buf, sizeof res);
            if (res.index >= 0 && (size_t)res.index < sw->npoints)
                rc = take_result(sw, &sw->points[res.index], rows, res.status, buf + sizeof res);
            struct mpi_assign as = {.index = -1};
            if (!rc && next < nqueue) {
                struct sweep_point *pt = &sw->points[queue[next++]];
                const struct sweep_group *g = &sw->groups[pt->group];
                as.index = (int64_t)pt->index;
                if (g->trace_path)
                    snprintf(as.sha256, sizeof as.sha256, "%s", g->trace.sha256);
                sw->started++;
            } else
                active--;
            MPI_Send(&as, (int)sizeof as, MPI_BYTE, st.MPI_SOURCE, TAG_ASSIGN, MPI_COMM_WORLD);
            sw->mpi_bytes += sizeof as;
            busy = true;
        }
        if (!busy)
            sleep_briefly();
    }
    if (own.running) { /* only after an error: let it end */
        pthread_join(own.thread, NULL);
        free(own.text);
    }
    free(buf);
    free(queue);
    free(cost);
    if (rc) {
        fprintf(stderr, "%s: %s\n", sw->cmd, kvsim_strerror(rc));
        MPI_Abort(MPI_COMM_WORLD, CLI_EXIT_FAILED); /* the others wait for points: end them */
    }
    return rc;
}

/* ---- the other ranks --------------------------------------------------------------------------
 */

static char hostname_text[256];

void sweep_mpi_serve(struct sweep *sw)
{
    struct mpi_result res = {.index = -1};
    char *text = NULL, err[4096] = "";
    sw->keep_traces = true; /* a rank may get points of any group, in any order */
    for (;;) {
        const char *payload = res.status == 0 ? (text ? text : "") : err;
        size_t len = strlen(payload);
        char *msg = malloc(sizeof res + len);
        if (!msg) {
            fprintf(stderr, "%s: rank out of memory\n", sw->cmd);
            MPI_Abort(MPI_COMM_WORLD, CLI_EXIT_FAILED);
        }
        memcpy(msg, &res, sizeof res);
        memcpy(msg + sizeof res, payload, len);
        MPI_Send(msg, (int)(sizeof res + len), MPI_BYTE, 0, TAG_RESULT, MPI_COMM_WORLD);
        free(msg);
        free(text);
        text = NULL;
        struct mpi_assign as;
        MPI_Recv(&as, (int)sizeof as, MPI_BYTE, 0, TAG_ASSIGN, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (as.index < 0 || (size_t)as.index >= sw->npoints)
            break;
        struct sweep_point *pt = &sw->points[as.index];
        struct sweep_group *g = &sw->groups[pt->group];
        res = (struct mpi_result){.index = as.index};
        as.sha256[sizeof as.sha256 - 1] = 0;
        int lrc = sweep_group_load(sw, pt->group);
        if (lrc) {
            res.status = lrc;
            snprintf(err, sizeof err, "%s (on %s)", g->load_error ? g->load_error : "out of memory",
                     hostname_text);
        } else if (g->trace_path && strcmp(g->trace.sha256, as.sha256)) {
            res.status = -EINVAL;
            snprintf(err, sizeof err,
                     "%s on %s is not rank 0's copy (sha256 %.12s..., rank 0's %.12s...): every "
                     "rank must read the same trace",
                     g->trace_path, hostname_text, g->trace.sha256, as.sha256);
        } else {
            res.status = sweep_replay_point(sw, pt, g->trace_path ? &g->trace : NULL, &text, err,
                                            sizeof err);
            if (res.status == -EINTR) /* no SIGINT handler under MPI: cannot happen */
                snprintf(err, sizeof err, "interrupted");
        }
    }
    free(text);
}

int sweep_mpi_init(const struct sweep *sw, int *rank, int *ranks)
{
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, ranks);
    if (gethostname(hostname_text, sizeof hostname_text - 1) != 0)
        snprintf(hostname_text, sizeof hostname_text, "rank %d", *rank);
    if (provided < MPI_THREAD_FUNNELED) {
        if (*rank == 0)
            fprintf(stderr, "%s: the MPI library does not provide MPI_THREAD_FUNNELED\n", sw->cmd);
        MPI_Finalize();
        return -ENOTSUP;
    }
    return 0;
}

void sweep_mpi_fini(void) { MPI_Finalize(); }
