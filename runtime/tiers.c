/* tiers.c: the JIT's two tiers (tiers.h): the quick compile a call runs at once, the queue of full compiles,
 * the workers that build them and swap them into the memory cache, fg_wait_compiles, and their end when the
 * context is destroyed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/knobs.h"
#include "core/pool.h"
#include "runtime/compile.h"
#include "runtime/dispatch.h"

/* One pending tier-up: a variant's full compile and the swap of its memory-cache entry. */
struct tiers_job {
    tiers_job *next;             /* the next (younger) job in ctx->tiers.jobs */
    char name[FG_SPEC_NAME_MAX]; /* the variant's canonical name: its memory-cache entry */
    fg_spec spec;                /* the variant */
    char *src;                   /* its emitted source (owned) */
    size_t len;                  /* bytes of src */
    int taken;                   /* a worker is compiling it (else it waits in the queue) */
};

fg_status tiers_init(fg_context *ctx, fg_error *err) {
    tiers_state *t = &ctx->tiers;
    memset(t, 0, sizeof *t);
    if (pthread_cond_init(&t->changed, NULL) != 0)
        return fg_fail(err, FG_ERR_INTERNAL, "pthread_cond_init failed for a new context's background compiles");
    t->ready = 1;
    t->on = !ctx->emulated && knob_is_one(FG_KNOB_JIT_TIERS);
    return FG_OK;
}

int tiers_apply(const fg_context *ctx) {
    const tiers_state *t = &ctx->tiers;
    return t->ready && t->on && !t->quick_refused && !ctx->emulated && !t->stopping;
}

/* Unlinks job j from the list and frees it. Caller holds ctx->lock. */
static void job_remove(tiers_state *t, tiers_job *j) {
    for (tiers_job **p = &t->jobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            break;
        }
    free(j->src);
    free(j);
}

/* Unloads a module that no entry holds (a tier-up that cannot be installed). */
static void unload_module(fg_context *ctx, CUmodule m) {
    CUcontext popped;
    if (ctx->cu->cuCtxPushCurrent(ctx->cuctx) != CUDA_SUCCESS) return;
    ctx->cu->cuModuleUnload(m);
    ctx->cu->cuCtxPopCurrent(&popped);
}

/* The full compile of job j: compiles it, stores the cubin in the disk cache and loads it as a module into
 * *fresh (module and functions; *ctas_per_sm as kernels_load_module says). Returns 1 when *fresh holds a loaded
 * module; 0 after a failure, logged as a warning (the quick kernel stays), or when the context is ending (the
 * cubin still goes to the disk cache, for the next context). Needs no lock: it reads only what the context
 * never changes, and stopping atomically. */
static int job_build(fg_context *ctx, const tiers_job *j, fg_kernel *fresh, int *ctas_per_sm) {
    fg_compile_result r;
    fg_error err;
    fg_error_clear(&err);
    /* cubins: tiers never run under FLASHGEN_EMULATE_ARCH (tiers_apply) */
    fg_status st = compile_source(&j->spec, j->src, j->len, ctx->dump ? FG_COMPILE_KEEP_PTX : 0, &r, &err);
    if (ctx->dump) kernels_dump_compile(ctx, &j->spec, 0, j->src, j->len, &r);
    if (st != FG_OK) {
        rt_log(ctx, FG_LOG_WARN, "the optimized build of %s failed, so its quick build stays: %s", j->name, err.msg);
        compile_result_free(&r);
        return 0;
    }
    rt_log(ctx, FG_LOG_INFO, "compiled %s in %.2f s in the background (%d registers, %d bytes spilled)", j->name,
           r.seconds, r.registers, r.spill_stores);
    kernels_store(ctx, &j->spec, 0, j->src, j->len, j->name, &r);
    int built = 0;
    if (!__atomic_load_n(&ctx->tiers.stopping, __ATOMIC_ACQUIRE)) {
        memset(fresh, 0, sizeof *fresh);
        if (kernels_load_module(ctx, &j->spec, r.cubin, fresh, ctas_per_sm, &err) == FG_OK) built = 1;
        else rt_log(ctx, FG_LOG_WARN, "the optimized build of %s did not load, so its quick build stays: %s", j->name,
                    err.msg);
    }
    compile_result_free(&r);
    return built;
}

/* Puts job j's loaded full build (*fresh) in place of its quick kernel; the quick module is kept in the retired
 * list (a launch may still be running it). When that cannot be done (out of memory for the list, or the context
 * ending) the full build is unloaded and the quick kernel stays. Caller holds ctx->lock. */
static void job_install(fg_context *ctx, const tiers_job *j, const fg_kernel *fresh, int ctas_per_sm) {
    tiers_state *t = &ctx->tiers;
    fg_kernel *k = kernels_find(ctx, j->name);
    if (t->stopping || !k) {
        unload_module(ctx, fresh->module);
        return;
    }
    if (t->nretired == t->capretired) {
        const int cap = t->capretired ? t->capretired * 2 : 8;
        CUmodule *n = fg_realloc(t->retired, (size_t)cap * sizeof *n);
        if (!n) {
            unload_module(ctx, fresh->module);
            rt_log(ctx, FG_LOG_WARN, "out of memory keeping the quick build of %s while its optimized build replaces "
                   "it, so the quick build stays", j->name);
            return;
        }
        t->retired = n;
        t->capretired = cap;
    }
    t->retired[t->nretired++] = k->module;
    k->module = fresh->module;
    k->fn = fresh->fn;
    k->fn_pre = fresh->fn_pre;
    k->fn_post = fresh->fn_post;
    k->fn_map = fresh->fn_map;
    k->source = "JIT";
    k->quick = 0;
    rt_log(ctx, FG_LOG_INFO, "loaded %s (JIT, optimized, in place of its quick build): %d threads, %zu bytes of shared "
           "memory, %d CTA%s an SM%s", j->name, spec_threads(&j->spec), spec_smem_bytes(&j->spec), ctas_per_sm,
           ctas_per_sm == 1 ? "" : "s", ctas_per_sm ? "" : " (unknown)");
}

/* Job j from build to end: its full compile (without the lock when unlock is set: a worker's; else under it),
 * its install, and its removal, which wakes the waiters. Caller holds ctx->lock. */
static void job_run(fg_context *ctx, tiers_job *j, int unlock) {
    j->taken = 1;
    fg_kernel fresh;
    int ctas_per_sm = 0;
    if (unlock) pthread_mutex_unlock(&ctx->lock);
    const int built = job_build(ctx, j, &fresh, &ctas_per_sm);
    if (unlock) pthread_mutex_lock(&ctx->lock);
    if (built) job_install(ctx, j, &fresh, ctas_per_sm);
    job_remove(&ctx->tiers, j);
    pthread_cond_broadcast(&ctx->tiers.changed);
}

/* The oldest job no worker has taken, or NULL. Caller holds ctx->lock. */
static tiers_job *next_queued(tiers_state *t) {
    for (tiers_job *j = t->jobs; j; j = j->next)
        if (!j->taken) return j;
    return NULL;
}

/* A background thread: takes queued jobs, oldest first, until none is left. It marks itself finished in the
 * same hold of the lock in which it finds the queue empty, so a job queued later starts a new worker. */
static void *worker_main(void *arg) {
    tiers_worker *w = arg;
    fg_context *ctx = w->ctx;
    pthread_mutex_lock(&ctx->lock);
    for (tiers_job *j; (j = next_queued(&ctx->tiers)) != NULL;) job_run(ctx, j, 1);
    w->finished = 1;
    pthread_mutex_unlock(&ctx->lock);
    return NULL;
}

/* Sees that a worker will take the queue: starts one unless TIERS_MAX_WORKERS run (one of those takes it when
 * free). Returns 0 when none runs and none could start (*why: pthread_create's error). Caller holds ctx->lock. */
static int start_worker(fg_context *ctx, int *why) {
    tiers_state *t = &ctx->tiers;
    tiers_worker *slot = NULL;
    int live = 0;
    for (int i = 0; i < TIERS_MAX_WORKERS; i++) {
        tiers_worker *w = &t->worker[i];
        if (w->started && w->finished) { /* it is returning and needs the lock no more */
            pthread_join(w->thread, NULL);
            w->started = w->finished = 0;
        }
        if (w->started) live++;
        else if (!slot) slot = w;
    }
    if (!slot) return 1;
    slot->ctx = ctx;
    if (pool_start(worker_main, slot, 1, &slot->thread, why) == 1) {
        slot->started = 1;
        return 1;
    }
    return live > 0;
}

int tiers_compile_quick(fg_context *ctx, const fg_spec *s, const char *name, char *src, size_t len, fg_kernel **out,
                        fg_status *st, fg_error *err) {
    tiers_state *t = &ctx->tiers;
    tiers_job *j = fg_calloc(1, sizeof *j);
    if (!j) {
        free(src);
        *st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory queueing the optimized build of %s", name);
        return 1;
    }
    fg_compile_result r;
    fg_error qerr;
    fg_error_clear(&qerr);
    const fg_status q = compile_source(s, src, len, FG_COMPILE_QUICK, &r, &qerr);
    if (q != FG_OK) {
        const int refused = r.option_refused;
        compile_result_free(&r);
        free(j);
        if (q == FG_ERR_NO_MEMORY) {
            free(src);
            *st = fg_fail(err, q, "%s", qerr.msg);
            return 1;
        }
        if (refused) {
            t->quick_refused = 1;
            rt_log(ctx, FG_LOG_INFO, "NVRTC %s refuses --Ofast-compile=max (NVRTC 13 takes it): this context's JIT "
                   "compiles are full ones, each call waiting for its own", compile_nvrtc_version());
        } else {
            rt_log(ctx, FG_LOG_WARN, "the quick compile of %s failed, so the call waits for its full compile: %s", name,
                   qerr.msg);
        }
        return 0;
    }
    rt_log(ctx, FG_LOG_INFO, "compiled %s quick in %.2f s (%d registers, %d bytes spilled)", name, r.seconds,
           r.registers, r.spill_stores);
    *st = kernels_load(ctx, s, name, r.cubin, "JIT, quick; the optimized build follows in the background", out, err);
    compile_result_free(&r);
    if (*st != FG_OK) {
        free(j);
        free(src);
        return 1;
    }
    (*out)->quick = 1;
    snprintf(j->name, sizeof j->name, "%s", name);
    j->spec = *s;
    j->src = src;
    j->len = len;
    tiers_job **tail = &t->jobs;
    while (*tail) tail = &(*tail)->next;
    *tail = j;
    int why = 0;
    if (!start_worker(ctx, &why)) {
        /* No worker runs, so the queue holds only j: it is built here, and the call runs the full build. */
        rt_log(ctx, FG_LOG_WARN, "no thread could start for the optimized build of %s (%s): compiling it now", name,
               strerror(why));
        job_run(ctx, j, 0);
    }
    return 1;
}

/* Whether a tier-up of variant `name` (NULL: of any) is queued or being compiled. Caller holds ctx->lock. */
static int pending(const tiers_state *t, const char *name) {
    for (const tiers_job *j = t->jobs; j; j = j->next)
        if (!name || strcmp(j->name, name) == 0) return 1;
    return 0;
}

void tiers_wait(fg_context *ctx, const char *name) {
    pthread_mutex_lock(&ctx->lock);
    while (ctx->tiers.ready && pending(&ctx->tiers, name)) pthread_cond_wait(&ctx->tiers.changed, &ctx->lock);
    pthread_mutex_unlock(&ctx->lock);
}

fg_status fg_wait_compiles(fg_context *ctx) {
    if (!ctx) return rt_no_context("fg_wait_compiles");
    tiers_wait(ctx, NULL);
    return FG_OK;
}

void tiers_stop(fg_context *ctx) {
    tiers_state *t = &ctx->tiers;
    if (!t->ready) return;
    pthread_mutex_lock(&ctx->lock);
    __atomic_store_n(&t->stopping, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ctx->lock);
    /* Unlocked: the workers take the lock between jobs. They drain the queue and end; none starts any more
     * (tiers_apply), and the queue only ever waits behind live workers. */
    for (int i = 0; i < TIERS_MAX_WORKERS; i++)
        if (t->worker[i].started) {
            pthread_join(t->worker[i].thread, NULL);
            t->worker[i].started = t->worker[i].finished = 0;
        }
}

void tiers_free(fg_context *ctx) {
    tiers_state *t = &ctx->tiers;
    free(t->retired);
    t->retired = NULL;
    t->nretired = t->capretired = 0;
    if (t->ready) pthread_cond_destroy(&t->changed);
    t->ready = 0;
}
