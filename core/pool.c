/* pool.c: starting and joining worker threads (see pool.h). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include "core/pool.h"
#include "core/alloc.h"

int pool_start(void *(*fn)(void *), void *arg, int n, pthread_t *threads, int *why_errno) {
    sigset_t hold, old;
    sigemptyset(&hold);
    sigaddset(&hold, SIGINT);
    sigaddset(&hold, SIGTERM);
    sigaddset(&hold, SIGHUP);
    int masked = pthread_sigmask(SIG_BLOCK, &hold, &old) == 0; /* new threads inherit the mask */
    pthread_attr_t attr;
    int have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr) pthread_attr_setstacksize(&attr, (size_t)32 << 20);
    int started = 0;
    for (int t = 0; t < n; t++) {
        int e = pthread_create(&threads[started], have_attr ? &attr : NULL, fn, arg);
        if (e != 0) {
            *why_errno = e;
            break;
        }
        started++;
    }
    if (have_attr) pthread_attr_destroy(&attr);
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    return started;
}

int pool_run(void *(*fn)(void *), void *arg, int n, int *why_errno) {
    pthread_t *threads = fg_calloc((size_t)(n > 0 ? n : 1), sizeof *threads);
    if (!threads) {
        *why_errno = ENOMEM;
        return 0;
    }
    int started = pool_start(fn, arg, n, threads, why_errno);
    for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);
    free(threads);
    return started;
}
