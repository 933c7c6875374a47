/* plan.h: the sweep's plan (what to do with each (problem, candidate) pair) and the compile queue its
 * worker threads drain ahead of the GPU. Shared by autotune/sweep.c and autotune/plan.c only. */
#ifndef FG_PLAN_H
#define FG_PLAN_H

#include <pthread.h>
#include <signal.h>
#include "autotune/sweep.h"

/* What the sweep does with one (problem, candidate) pair. */
typedef enum plan_action {
    PLAN_SKIP = 0,   /* the database already records it: a resumed sweep does not repeat it */
    PLAN_REFUSE = 1, /* validation or the device's shared memory refuses it: recorded as refused */
    PLAN_TIME = 2    /* compiled, checked and timed */
} plan_action;

/* Compile states of a PLAN_TIME item (changed under the pool's lock). */
enum { PLAN_QUEUED = 0, PLAN_COMPILING = 1, PLAN_COMPILED = 2 };

/* One (problem, candidate) pair of the sweep. */
typedef struct sweep_item {
    int problem;                 /* index in the space */
    int cand;                    /* index in the problem's candidates */
    plan_action action;          /* what the sweep does with it */
    int compile_of;              /* PLAN_TIME: the item whose compile serves it (itself, or the first item
                                    of the same spec: spaces repeat specs across problem sizes) */
    int state;                   /* PLAN_QUEUED, PLAN_COMPILING or PLAN_COMPILED (pool lock) */
    fg_tune_status compiled;     /* once compiled: FG_TUNE_OK, FG_TUNE_FAILED or FG_TUNE_SPILLED */
    char note[FG_TUNE_NOTE_MAX]; /* the refusal, the compile failure, the spill figures or the registers */
} sweep_item;

/* The compile workers' queue: the PLAN_TIME items that compile a spec first, in sweep order, so the
 * candidate the GPU needs next is always compiled (or being compiled) before any later one. */
typedef struct sweep_pool {
    const fg_tune_space *space;  /* the specs (read only while the workers run) */
    sweep_item *items;            /* every item of the sweep */
    int *queue;                  /* indexes of the items to compile, in sweep order */
    int nqueue;                  /* their number */
    int next;                    /* the next queue entry to take (lock) */
    int stop;                    /* 1: take no more (lock) */
    const fg_disk_cache *disk;   /* where compiled cubins go for the runtime to load, or NULL */
    int allow_spills;            /* --allow-spills: time candidates that spill too */
    pthread_mutex_t lock;        /* guards next, stop and the items' state, compiled and note */
    pthread_cond_t compiled;     /* broadcast whenever an item is compiled */
    volatile sig_atomic_t *stop_signal; /* nonzero once a signal asked the sweep to stop */
} sweep_pool;

/* Decides what the sweep does with each of the n (problem, candidate) pairs of sp, in order, into items:
 * skip what db records already, refuse what validation or the device's shared memory refuses (the note
 * says why), time the rest, each compiled once per spec; in a worker (o->nshards > 1), skip the other
 * workers' problems. Counts into *skipped, *others and *refused. Returns 0, or -1 when memory runs out. */
int plan_items(const fg_tune_space *sp, const fg_tunedb *db, const fg_context *ctx, const sweep_opts *o,
               sweep_item *items, int n, int *skipped, int *others, int *refused);

/* Compile worker (pool_start): takes queued items in order until the queue is empty or the sweep stops. */
void *plan_worker(void *arg);

/* Waits until the compile that serves `item` is done and returns that item (its compiled and note are then
 * final), or NULL when a signal asked the sweep to stop first. */
const sweep_item *plan_wait_compiled(sweep_pool *pool, const sweep_item *item);

#endif
