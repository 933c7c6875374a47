/* threads.c: the reference's thread pool: units handed out from one atomic counter to every online core,
 * so causal rows (uneven work) balance, and a thread that cannot be created only means fewer workers.
 * Contracts in ref_internal.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include "reference/ref_internal.h"

typedef void (*ref_unit_fn)(void *job, int tid, int64_t unit);

typedef struct pool {
    void *job;             /* passed to fn */
    ref_unit_fn fn;            /* processes one unit */
    int64_t units;         /* units 0 .. units-1 */
    _Atomic int64_t next;  /* next unit to hand out: dynamic scheduling evens out causal rows */
} pool;

typedef struct worker {
    pool *pl;       /* shared queue */
    int tid;        /* index of this worker's scratch */
    pthread_t th;   /* its thread (unused for tid 0, the caller) */
    int started;    /* 1 when th was created */
} worker;

/* A thread's body: takes units from the shared counter until none is left. */
static void *worker_main(void *arg) {
    worker *w = arg;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&w->pl->next, 1, memory_order_relaxed);
        if (u >= w->pl->units)
            break;
        w->pl->fn(w->pl->job, w->tid, u);
    }
    return NULL;
}

/* How many threads to use for `units` units: every online core, at most one per unit. */
int ref_thread_count(int64_t units) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 512)
        n = 512;
    if (units < n)
        n = units < 1 ? 1 : (long)units;
    return (int)n;
}

/* Runs fn over all units on up to nthreads threads (the caller is one of them, with tid 0). A thread that
 * cannot be created is simply not used: the others drain the queue. Returns after every unit is done. */
void ref_run_parallel(void *job, ref_unit_fn fn, int64_t units, int nthreads) {
    pool pl = {job, fn, units, 0};
    worker stack_workers[64];
    worker *w = stack_workers;
    if (nthreads > 64) {
        w = calloc((size_t)nthreads, sizeof *w);
        if (!w) {
            w = stack_workers;
            nthreads = 64;
        }
    }
    for (int i = 0; i < nthreads; i++) {
        w[i].pl = &pl;
        w[i].tid = i;
        w[i].started = 0;
    }
    for (int i = 1; i < nthreads; i++)
        w[i].started = pthread_create(&w[i].th, NULL, worker_main, &w[i]) == 0;
    worker_main(&w[0]);
    for (int i = 1; i < nthreads; i++)
        if (w[i].started)
            pthread_join(w[i].th, NULL);
    if (w != stack_workers)
        free(w);
}
