/* pool.h: the one way flashgen's programs start worker threads (bundle and tune compiles, fgbench's CPU
 * checks). A pool here is only the threads: each caller's workers take work from their own queue. */
#ifndef FG_POOL_H
#define FG_POOL_H

#include <pthread.h>

/* Starts up to n threads running fn(arg) into threads[] and returns how many started (*why_errno: why
 * the first that could not). The threads get 32 MiB stacks, because NVRTC's front end recurses deeply on
 * template-heavy source, and run with SIGINT, SIGTERM and SIGHUP blocked, so those signals reach the main
 * thread (which decides what an interrupt means) and never a worker. */
int pool_start(void *(*fn)(void *), void *arg, int n, pthread_t *threads, int *why_errno);

/* Runs fn(arg) on up to n threads (pool_start) and waits for them all. The workers must drain a shared
 * queue, so threads that could not start are made up for by those that did. Returns how many ran: 0 when
 * none could start (*why_errno says why; ENOMEM when the thread table could not be allocated). */
int pool_run(void *(*fn)(void *), void *arg, int n, int *why_errno);

#endif
