/* plan.c: the sweep's plan and its compile queue: which candidates to skip, refuse or time, one compile
 * per distinct spec, and the worker threads that compile them with NVRTC ahead of the GPU, storing each
 * cubin in the disk cache where the timing loads it (see plan.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "autotune/plan.h"
#include "generator/emit.h"
#include "generator/spec.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "core/alloc.h"

/* Compiles spec with NVRTC and reads its ptxas report. A cubin that does not spill (or any, with
 * allow_spills) is stored in `disk` (when not NULL) under the key the runtime computes for the same spec, so
 * rt_fwd_with_spec loads it instead of compiling again; a failed store costs only that second compile. Sets
 * *status (ok, failed, spilled) and note (the failure sentence, the spill figures or the register count). */
static void plan_compile(const fg_spec *spec, const fg_disk_cache *disk, int allow_spills, fg_tune_status *status,
                         char *note, size_t n) {
    fg_error err;
    fg_error_clear(&err);
    char *src = NULL;
    size_t len = 0;
    fg_compile_result r;
    memset(&r, 0, sizeof r);
    if (emit_source(spec, &src, &len, &err) != FG_OK || compile_source(spec, src, len, 0, &r, &err) != FG_OK) {
        *status = FG_TUNE_FAILED;
        sweep_note(note, n, "%s", err.msg);
    } else if (r.spill_stores > 0 && !allow_spills) {
        *status = FG_TUNE_SPILLED;
        sweep_note(note, n, "spills %d bytes of stores and %d of loads to local memory (%d registers)", r.spill_stores,
                 r.spill_loads, r.registers);
    } else {
        *status = FG_TUNE_OK;
        if (r.registers < 0) sweep_note(note, n, "no ptxas report: spills unknown");
        else if (r.spill_stores > 0)
            sweep_note(note, n, "%d registers, spills %d+%d bytes (--allow-spills)", r.registers, r.spill_stores,
                     r.spill_loads);
        else sweep_note(note, n, "%d registers", r.registers);
        if (disk) {
            uint8_t key[32];
            char name[FG_SPEC_NAME_MAX];
            fg_error werr;
            compile_result_key(spec, 0, src, len, &r, key);
            if (spec_format(spec, name, sizeof name) > 0) (void)cache_put(disk, key, name, r.cubin, r.cubin_size, &werr);
        }
    }
    compile_result_free(&r);
    free(src);
}

/* plan_worker: see plan.h. */
void *plan_worker(void *arg) {
    sweep_pool *pool = arg;
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        int i = !pool->stop && pool->next < pool->nqueue ? pool->queue[pool->next++] : -1;
        if (i >= 0) pool->items[i].state = PLAN_COMPILING;
        pthread_mutex_unlock(&pool->lock);
        if (i < 0) return NULL;
        sweep_item *it = &pool->items[i]; /* problem and cand never change while workers run */
        fg_tune_status status;
        char note[FG_TUNE_NOTE_MAX];
        plan_compile(&pool->space->problems[it->problem].cands[it->cand].spec, pool->disk, pool->allow_spills, &status,
                     note, sizeof note);
        pthread_mutex_lock(&pool->lock);
        it->compiled = status;
        memcpy(it->note, note, sizeof note);
        it->state = PLAN_COMPILED;
        pthread_cond_broadcast(&pool->compiled);
        pthread_mutex_unlock(&pool->lock);
    }
}

/* plan_wait_compiled: see plan.h. */
const sweep_item *plan_wait_compiled(sweep_pool *pool, const sweep_item *item) {
    const sweep_item *it = &pool->items[item->compile_of];
    pthread_mutex_lock(&pool->lock);
    while (it->state != PLAN_COMPILED && !*pool->stop_signal) {
        /* A signal does not end a condition wait: look at the flag every 100 ms. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100L * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&pool->compiled, &pool->lock, &until);
    }
    int done = it->state == PLAN_COMPILED;
    pthread_mutex_unlock(&pool->lock);
    return done ? it : NULL;
}

/* Orders item indexes by spec name, then index (qsort context through a file-scope pointer: the sweep
 * plans once, on one thread). */
static const char *plan_sort_names;
static int plan_cmp_name(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(plan_sort_names + (size_t)x * FG_SPEC_NAME_MAX, plan_sort_names + (size_t)y * FG_SPEC_NAME_MAX);
    return c ? c : (x > y) - (x < y);
}

/* Points every PLAN_TIME item at the first PLAN_TIME item with the same spec (compile_of), so each
 * variant is compiled once however many problems try it. Returns 0, or -1 when memory runs out (the
 * items are then unchanged). */
static int plan_share_compiles(const fg_tune_space *sp, sweep_item *items, int n) {
    char *names = fg_malloc((size_t)(n > 0 ? n : 1) * FG_SPEC_NAME_MAX);
    int *order = fg_malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!names || !order) {
        free(names);
        free(order);
        return -1;
    }
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (items[k].action != PLAN_TIME) continue;
        char *name = names + (size_t)k * FG_SPEC_NAME_MAX;
        if (spec_format(&sp->problems[items[k].problem].cands[items[k].cand].spec, name, FG_SPEC_NAME_MAX) < 0)
            continue; /* unformattable: it keeps its own compile, which then fails with the reason */
        order[m++] = k;
    }
    plan_sort_names = names;
    if (m > 1) qsort(order, (size_t)m, sizeof *order, plan_cmp_name);
    for (int i = 1; i < m; i++)
        if (strcmp(names + (size_t)order[i] * FG_SPEC_NAME_MAX, names + (size_t)order[i - 1] * FG_SPEC_NAME_MAX) == 0)
            items[order[i]].compile_of = items[order[i - 1]].compile_of;
    plan_sort_names = NULL;
    free(names);
    free(order);
    return 0;
}

/* plan_items: see plan.h. */
int plan_items(const fg_tune_space *sp, const fg_tunedb *db, const fg_context *ctx, const sweep_opts *o,
                     sweep_item *items, int n, int *skipped, int *others, int *refused) {
    *skipped = *others = *refused = 0;
    for (int i = 0, k = 0; i < sp->count && k < n; i++) {
        const fg_tune_problem *pb = &sp->problems[i];
        for (int j = 0; j < pb->ncands && k < n; j++, k++) {
            const fg_tune_candidate *c = &pb->cands[j];
            sweep_item *it = &items[k];
            it->problem = i;
            it->cand = j;
            if (o->nshards > 1 && i % o->nshards != o->shard) {
                it->action = PLAN_SKIP; /* another worker's problem */
                ++*others;
            } else if (tunedb_has(db, &pb->cls, &c->spec)) {
                it->action = PLAN_SKIP;
                ++*skipped;
            } else if (c->status != FG_OK) {
                it->action = PLAN_REFUSE;
                sweep_note(it->note, sizeof it->note, "%s", c->why);
            } else if (spec_smem_bytes(&c->spec) > ctx->smem_optin) {
                it->action = PLAN_REFUSE;
                sweep_note(it->note, sizeof it->note, "needs %zu bytes of shared memory per block; %s allows %zu",
                          spec_smem_bytes(&c->spec), ctx->device_name, ctx->smem_optin);
            } else {
                it->action = PLAN_TIME;
                it->compile_of = k;
            }
            *refused += it->action == PLAN_REFUSE;
        }
    }
    return plan_share_compiles(sp, items, n);
}

