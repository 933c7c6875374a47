/* threads.c: the reference's parallel loop: units handed out from one atomic counter to workers started
 * by core/pool.c, so causal rows (uneven work) balance; threads that cannot start only mean fewer workers,
 * and with none the caller does every unit itself. Contracts in ref_internal.h. */
#include <stdatomic.h>
#include <unistd.h>
#include "core/pool.h"
#include "reference/ref_internal.h"

typedef struct ref_queue {
    void *job;             /* passed to fn */
    ref_unit_fn fn;        /* processes one unit */
    int64_t units;         /* units 0 .. units-1 */
    _Atomic int64_t next;  /* next unit to hand out: dynamic scheduling evens out causal rows */
    _Atomic int tids;      /* next worker index (each worker's scratch) */
} ref_queue;

/* A worker's body: takes a scratch index, then units from the shared counter until none is left. */
static void *ref_worker(void *arg) {
    ref_queue *q = arg;
    const int tid = atomic_fetch_add(&q->tids, 1);
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&q->next, 1, memory_order_relaxed);
        if (u >= q->units) break;
        q->fn(q->job, tid, u);
    }
    return NULL;
}

/* How many threads to use for `units` units: every online core, at most one per unit. */
int ref_thread_count(int64_t units) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 512) n = 512;
    if (units < n) n = units < 1 ? 1 : (long)units;
    return (int)n;
}

/* Runs fn over all units on up to nthreads workers (tids 0 .. nthreads-1). Returns after every unit is done. */
void ref_run_parallel(void *job, ref_unit_fn fn, int64_t units, int nthreads) {
    ref_queue q = {job, fn, units, 0, 0};
    int why = 0;
    if (nthreads > 1 && pool_run(ref_worker, &q, nthreads, &why) > 0) return;
    atomic_store(&q.tids, 0);
    ref_worker(&q);
}
