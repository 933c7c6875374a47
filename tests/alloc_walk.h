/* alloc_walk.h: the allocation-failure walk the alloc tests share (test_alloc_failures.c on the CPU,
 * test_gpu_alloc_failures.c on the GPU): SQLite's practice through core/alloc.h. An operation runs once for
 * each host allocation it makes, the n-th failing (n = 1, 2, ... until the operation makes fewer than n);
 * every failed run must return a status other than FG_OK with a sentence, and the same operation run again
 * right after it, without injection, on the same state, must succeed and be judged right. So a failed
 * allocation can neither crash, nor pass for success with a part missing, nor leave half-changed state
 * behind. Leaks are judged by the sanitizer build (tests/run.sh's header).
 * Header-only (static inline functions): each test program includes it once. */
#ifndef FG_TESTS_ALLOC_WALK_H
#define FG_TESTS_ALLOC_WALK_H

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include "core/alloc.h"
#include "core/error.h"

/* One operation to walk, and the hooks around it; every hook but op may be NULL. No hook runs with a
 * failure armed except op. */
typedef struct alloc_walk {
    const char *what;                           /* names the operation in messages and the log */
    void *user;                                 /* handed to every hook */
    void (*before)(void *user);                 /* before each step: the state op runs on (a fresh context) */
    fg_status (*op)(void *user, fg_error *err); /* the operation: its status, and on failure its sentence */
    void (*judge)(void *user);                  /* after each run of op that returned FG_OK: its results */
    void (*refused)(void *user);                /* after each run that failed: what it must have left alone */
    void (*after)(void *user);                  /* after each step: releases what before made */
    int no_memory;                              /* 1: every failure must be FG_ERR_NO_MEMORY (named as what it
                                                   is, not as a bad file or a missing kernel) */
} alloc_walk;

/* Runs op with the n-th allocation failing, for n = 1, 2, ... until op makes fewer than n allocations; each
 * failed run must say why, and op right after it must succeed (and pass judge). Returns the number of
 * allocations walked, and logs it. */
static inline long alloc_walk_run(const alloc_walk *w) {
    long n;
    for (n = 1;; n++) {
        if (w->before) w->before(w->user);
        fg_error err;
        fg_error_clear(&err);
        fg_alloc_fail_at(n);
        const fg_status st = w->op(w->user, &err);
        const int reached = !fg_alloc_fail_pending();
        fg_alloc_fail_at(0);
        if (!reached) {
            cr_assert_eq(st, FG_OK, "%s without a failed allocation: %s", w->what, err.msg);
            if (w->judge) w->judge(w->user);
            if (w->after) w->after(w->user);
            break;
        }
        cr_assert_neq(st, FG_OK, "%s: allocation %ld failed, yet it returned FG_OK (a part is missing, or the failure "
                      "went unnoticed)", w->what, n);
        cr_assert(err.msg[0] != '\0', "%s: allocation %ld failed with status %d and no sentence", w->what, n, (int)st);
        if (w->no_memory)
            cr_assert_eq(st, FG_ERR_NO_MEMORY, "%s: allocation %ld failed, reported as %s: %s", w->what, n,
                         fg_status_string(st), err.msg);
        if (w->refused) w->refused(w->user);
        fg_error_clear(&err);
        cr_assert_eq(w->op(w->user, &err), FG_OK, "%s after allocation %ld failed: %s", w->what, n, err.msg);
        if (w->judge) w->judge(w->user);
        if (w->after) w->after(w->user);
    }
    cr_assert_gt(n, 1, "%s made no allocation to fail", w->what);
    cr_log_info("%s: each of its %ld allocations failed in turn, each refused with a sentence", w->what, n - 1);
    return n - 1;
}

/* The walk of an operation that needs no hooks (it frees what it made itself). */
static inline long walk(const char *what, fg_status (*op)(void *user, fg_error *err), void *user) {
    const alloc_walk w = {what, user, NULL, op, NULL, NULL, NULL, 0};
    return alloc_walk_run(&w);
}

#endif
