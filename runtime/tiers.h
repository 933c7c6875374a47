/* tiers.h: the JIT's two tiers. A variant that no cache and no bundle holds is first compiled for speed of
 * compilation (FG_COMPILE_QUICK: NVRTC's --Ofast-compile=max, a third to two thirds of the full compile's time,
 * code that may spill) and runs at once; its full compile runs on a background thread, goes to the disk cache
 * (which holds only full compiles) and, once loaded, replaces the quick kernel in the memory cache. A replaced
 * module stays loaded until the context ends: a launch may still be running it, and callers copy CUfunction
 * handles out of the lock. On with FLASHGEN_JIT_TIERS=1 or FG_OPTION_JIT_TIERS 1 (off by default: NVRTC 13.0
 * emits different code for every later compile of a process that has run a quick one; docs/caches-and-bundles.md);
 * never under FLASHGEN_EMULATE_ARCH (PTX, which the driver compiles anyway), nor for the compiles a caller asks for
 * ahead of time (fg_prepare; bundles and the CLI's compile, bundle and tune compile without it), which compile full
 * at once.
 *
 * At most TIERS_MAX_WORKERS full compiles run at once; further tier-ups wait in a queue, oldest first, for a
 * worker (each worker takes queued jobs until none is left, then ends). One job per variant: a variant is
 * compiled quick only when it is not loaded, so its job is the only one. Everything in tiers_state is guarded
 * by ctx->lock. */
#ifndef FG_TIERS_H
#define FG_TIERS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "runtime/cuda_api.h"
#include "generator/spec.h"

#define TIERS_MAX_WORKERS 4 /* full compiles in the background at once (each takes a CPU core for seconds) */

struct fg_kernel;
typedef struct tiers_job tiers_job; /* one pending tier-up (tiers.c) */

/* A slot for one background thread. */
typedef struct tiers_worker {
    fg_context *ctx;             /* the context it serves (set when started) */
    pthread_t thread;            /* the thread, while started */
    int started;                 /* a thread runs (or has ended) in this slot and is not yet joined */
    int finished;                /* it found the queue empty and returns: join it before reusing the slot */
} tiers_worker;

typedef struct tiers_state {
    int ready;                   /* tiers_init succeeded (the condition variable exists) */
    int on;                      /* JIT compiles of calls take the quick tier: FLASHGEN_JIT_TIERS and
                                    FG_OPTION_JIT_TIERS not 0 (never while emulating an arch) */
    int quick_refused;           /* this NVRTC refused --Ofast-compile=max (older than 13): compiles are full from
                                    then on */
    int stopping;                /* the context is being destroyed: no tier-up starts, none loads (atomic reads) */
    tiers_job *jobs;             /* pending tier-ups, oldest first: queued, or being compiled by a worker */
    tiers_worker worker[TIERS_MAX_WORKERS];
    pthread_cond_t changed;      /* broadcast under ctx->lock whenever a job ends */
    CUmodule *retired;           /* modules of replaced quick kernels, unloaded when the context ends */
    int nretired, capretired;    /* used / allocated */
} tiers_state;

/* Sets up ctx->tiers for a new context, once ctx->emulated is known: on with FLASHGEN_JIT_TIERS=1, unless the
 * context emulates an arch. FG_ERR_INTERNAL (a sentence in err) when the condition variable cannot be made. */
fg_status tiers_init(fg_context *ctx, fg_error *err);
/* fg_context_destroy's first step: waits for every pending tier-up's compile (NVRTC cannot be interrupted; the
 * cubins still go to the disk cache, for the next context, but are not loaded) and joins the threads.
 * Afterwards ctx->tiers.retired lists the modules left to unload. Takes ctx->lock. */
void tiers_stop(fg_context *ctx);
/* Frees what tiers_init and the tier-ups made (after tiers_stop and the modules' unload). */
void tiers_free(fg_context *ctx);

/* Whether a JIT compile for a call on ctx takes the quick tier now. Caller holds ctx->lock. */
int tiers_apply(const fg_context *ctx);
/* The quick tier of kernels_get's NVRTC step for variant s (its canonical name, emitted source src of len bytes):
 * compiles quick, loads the kernel into the memory cache (*out; marked quick) and
 * queues its full compile. Returns 1 when it settled the lookup (*st FG_OK, or a failure with its sentence in
 * err: FG_ERR_NO_MEMORY, or the load's), taking src (freed, or kept by the job); 0 when the caller must compile
 * full as without tiers, src still the caller's: this NVRTC refused the quick option (remembered, logged once),
 * or the quick compile failed otherwise (logged as a warning). Caller holds ctx->lock. */
int tiers_compile_quick(fg_context *ctx, const fg_spec *s, const char *name, char *src, size_t len,
                        struct fg_kernel **out, fg_status *st, fg_error *err);
/* Waits until no tier-up of variant `name` (NULL: of any variant) is pending on ctx: each one has replaced its
 * quick kernel, or failed (logged as a warning; the quick kernel stays). Takes ctx->lock: the caller must not
 * hold it. */
void tiers_wait(fg_context *ctx, const char *name);

#endif
