/* test_gpu_alloc_failures.c: allocation-failure injection on the GPU side (core/alloc.h, SQLite's practice;
 * the walk is tests/alloc_walk.h's, the CPU side's test_alloc_failures.c). n walks over every host allocation of:
 *   - fg_context_create on the program's cache directory, which holds a tuning database for this GPU (so its
 *     load is walked too): each failure returns FG_ERR_NO_MEMORY, no context and fg_last_error(NULL)'s
 *     sentence; the next create makes a whole context (its disk cache usable, its database loaded);
 *   - a forward call (fg_attention_fwd), a backward (fg_attention_bwd), a serving call
 *     (fg_attention_fwd_varlen: a decode over a paged cache in 3 key splits, with FG_OPTION_CHECK_INPUTS so
 *     that the read-back of the lengths is walked too) and a merge (fg_merge_states), each on a fresh context
 *     whose kernels the disk cache holds (warmed first; a step that compiles fails the test): variant choice
 *     and tuning lookup, the emitted source that keys the cache, the cache's read, the module load. Each
 *     failure returns FG_ERR_NO_MEMORY with fg_last_error(ctx)'s sentence and leaves the outputs untouched;
 *     then the same call on the same context succeeds and its outputs pass the CPU reference.
 * Shapes are small: the walks take seconds once the kernels are compiled. GPU tests skip with the reason
 * where there is no device.
 * Leaks: run the sanitizer build of this program (`sh configure --asan && ninja
 * build/tests/test_gpu_alloc_failures`; for a GPU host without libasan, add -static-libasan -static-libubsan
 * to config.ninja's ldflags_extra) from the repository root, one test at a time, and fail on any
 * "ERROR: LeakSanitizer" or "runtime error" in the log (Criterion's workers print their leaks, but pass):
 *   ASAN_OPTIONS=protect_shadow_gap=0 LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp \
 *   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 build/tests/test_gpu_alloc_failures --jobs 1 2>&1 | \
 *   tee asan.log; ! grep -E 'ERROR: (Leak|Address)Sanitizer|runtime error' asan.log
 * protect_shadow_gap=0: the driver maps memory where ASan's shadow gap would be; lsan.supp also lists the
 * CUDA libraries, whose own allocations are not flashgen's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/runtime.h"
#include "tests/alloc_walk.h"
#include "tests/gpu_harness.h"
#include "tests/merge_run.h"
#include "tests/serving_run.h"

TestSuite(gpu_alloc, .timeout = 300);

/* ------------------------------------------------------------------------------------------------ */
/* The program's cache directory, its tuning database, and the walk's contexts                      */
/* ------------------------------------------------------------------------------------------------ */

/* What a walk's contexts logged. */
typedef struct walk_log {
    int compiles;      /* "compiling ... with NVRTC" lines: a step must find its kernels in the disk cache */
    char last[512];    /* the last warning or error, for messages */
} walk_log;

/* The contexts' log sink: counts compiles, keeps the last warning. */
static void walk_log_line(void *user, fg_log_level level, const char *msg) {
    walk_log *log = user;
    if (strstr(msg, " with NVRTC")) log->compiles++;
    if (level <= FG_LOG_WARN) snprintf(log->last, sizeof log->last, "%s", msg);
}

/* The directory gpu_open gave env's context: the program's (gpu_harness.h), or its own. */
static const char *program_cache_dir(const gpu_env *env) {
    return env->own_dir[0] ? env->own_dir : getenv(CACHE_ENV);
}

/* Gives the program's cache directory a tuning database for this GPU unless it has one, so that every context
 * made on it loads one (and the create walk walks that load): one record no call here matches (fp16,
 * head_dim 256, a candidate whose output was wrong: never a winner), so the calls look the database up but
 * run the tile policy's variants. Written atomically (tunedb_save): the program's tests run at once. */
static void seed_tuning_db(const gpu_env *env) {
    const fg_tune_identity *id = &env->ctx->tunedb.id; /* this GPU's, as gpu_open's context made it */
    char path[1024], text[FG_SPEC_NAME_MAX];
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(tunedb_path(program_cache_dir(env), id, path, sizeof path, &e), FG_OK, "%s", e.msg);
    if (access(path, F_OK) == 0) return;
    fg_tunedb db;
    tunedb_init(&db, id);
    fg_tune_record r;
    memset(&r, 0, sizeof r);
    r.cls = (fg_tune_class){FG_KIND_FWD, FG_DTYPE_F16, 256, 0, 1, 1024, 1024, 64};
    snprintf(text, sizeof text, "kind=fwd arch=sm_%d dtype=fp16 head_dim=256 block_m=64 block_n=32 warps=4 stages=1",
             id->arch);
    cr_assert_eq(spec_parse(text, &r.spec, &e), FG_OK, "%s: %s", text, e.msg);
    r.status = FG_TUNE_WRONG;
    snprintf(r.note, sizeof r.note, "seeded by test_gpu_alloc_failures");
    cr_assert_eq(tunedb_add(&db, &r, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(tunedb_save(path, &db, &e), FG_OK, "%s", e.msg);
    tunedb_free(&db);
}

/* Options for a walk's context: the program's cache directory, everything down to INFO into log. */
static fg_context_options walk_options(const char *dir, walk_log *log) {
    fg_context_options opt;
    fg_context_options_init(&opt);
    opt.cache_dir = dir;
    opt.log_level = FG_LOG_INFO; /* compiles are logged at INFO */
    opt.log_fn = walk_log_line;
    opt.log_user = log;
    return opt;
}

/* Copies a failed call's status and sentence into err; the sentence must be one, not "no error". */
static fg_status call_status(fg_status st, const char *sentence, fg_error *err) {
    if (st == FG_OK) return st;
    cr_assert(strcmp(sentence, "no error") != 0, "a call failed with %s but left no sentence", fg_status_string(st));
    return fg_fail(err, st, "%s", sentence);
}

/* ------------------------------------------------------------------------------------------------ */
/* fg_context_create                                                                                 */
/* ------------------------------------------------------------------------------------------------ */

typedef struct create_walk {
    const char *dir;  /* the program's cache directory */
    fg_context *ctx;  /* the context the last create made, or NULL */
    walk_log log;     /* what it logged */
} create_walk;

static fg_status create_op(void *user, fg_error *err) {
    create_walk *c = user;
    memset(&c->log, 0, sizeof c->log);
    const fg_context_options opt = walk_options(c->dir, &c->log);
    fg_context *made = (fg_context *)&c->log; /* not NULL: a failed create must set it so */
    const fg_status st = fg_context_create(&made, &opt);
    c->ctx = st == FG_OK ? made : NULL;
    if (st != FG_OK) cr_assert_null(made, "a failed fg_context_create (%s) handed out a context", fg_status_string(st));
    return call_status(st, fg_last_error(NULL), err);
}

/* A created context is whole: what a create may do without (the disk cache, the tuning database) is there. */
static void create_judge(void *user) {
    create_walk *c = user;
    cr_assert(c->ctx->disk_ok, "the context has no disk cache: %s", c->ctx->disk_problem);
    cr_assert(c->ctx->tuned, "the context did not load the tuning database: %s (last warning: %s)",
              c->ctx->tunedb_note, c->log.last);
}

static void create_after(void *user) {
    create_walk *c = user;
    fg_context_destroy(c->ctx);
    c->ctx = NULL;
}

Test(gpu_alloc, context_create) {
    gpu_env env;
    gpu_open(&env);
    seed_tuning_db(&env);
    create_walk c = {program_cache_dir(&env), NULL, {0, ""}};
    const alloc_walk w = {"fg_context_create on the program's cache directory, with a tuning database", &c, NULL,
                          create_op, create_judge, NULL, create_after, 1};
    alloc_walk_run(&w);
    gpu_close(&env);
}

/* ------------------------------------------------------------------------------------------------ */
/* One call on a fresh context                                                                       */
/* ------------------------------------------------------------------------------------------------ */

enum { CALL_FWD, CALL_BWD, CALL_SERVE, CALL_MERGE };

/* One call walked: its case (set up on env's context, whose buffers it keeps) and each step's fresh context. */
typedef struct call_walk {
    int kind;              /* CALL_* */
    gpu_env *env;          /* the device, the stream and the buffers' context */
    fg_context *ctx;       /* this step's fresh context */
    walk_log log;          /* what it logged */
    int warming;           /* 1 on the run that fills the disk cache: the only one that may compile */
    fwd_run *fwd;          /* CALL_FWD */
    bwd_run *bwd;          /* CALL_BWD */
    serve_run *serve;      /* CALL_SERVE */
    merge_bufs *merge;     /* CALL_MERGE */
} call_walk;

/* The call's outputs into out (up to 3); returns how many. */
static int call_outputs(const call_walk *w, dbuf **out) {
    switch (w->kind) {
    case CALL_FWD: out[0] = &w->fwd->o, out[1] = &w->fwd->lse; return 2;
    case CALL_BWD: out[0] = &w->bwd->dq, out[1] = &w->bwd->dk, out[2] = &w->bwd->dv; return 3;
    case CALL_SERVE: out[0] = &w->serve->o, out[1] = &w->serve->lse; return 2;
    default: out[0] = &w->merge->o, out[1] = &w->merge->l; return 2;
    }
}

/* A fresh context (FG_OPTION_CHECK_INPUTS on for the serving call), and the outputs poisoned. */
static void call_before(void *user) {
    call_walk *w = user;
    memset(&w->log, 0, sizeof w->log);
    const fg_context_options opt = walk_options(program_cache_dir(w->env), &w->log);
    const fg_status st = fg_context_create(&w->ctx, &opt);
    cr_assert_eq(st, FG_OK, "fg_context_create: %s", fg_last_error(NULL));
    if (w->kind == CALL_SERVE)
        cr_assert_eq(fg_context_set_option(w->ctx, FG_OPTION_CHECK_INPUTS, 1), FG_OK, "%s", fg_last_error(w->ctx));
    dbuf *outs[3];
    const int n = call_outputs(w, outs);
    for (int i = 0; i < n; i++) dbuf_poison(w->env, outs[i]);
    CK(w->env->cu->cuCtxSynchronize()); /* the poison went through the legacy stream; the call runs on another */
}

static fg_status call_op(void *user, fg_error *err) {
    call_walk *w = user;
    void *stream = w->env->stream;
    fg_status st;
    switch (w->kind) {
    case CALL_FWD: st = fg_attention_fwd(w->ctx, &w->fwd->args, stream); break;
    case CALL_BWD: st = fg_attention_bwd(w->ctx, &w->bwd->args, stream); break;
    case CALL_SERVE: st = fg_attention_fwd_varlen(w->ctx, &w->serve->args, stream); break;
    default: st = fg_merge_states(w->ctx, &w->merge->a, stream); break;
    }
    return call_status(st, fg_last_error(w->ctx), err);
}

/* Waits for the call's work and downloads its outputs; no step but the warming one compiled. */
static void call_finish(call_walk *w, dbuf **outs, int n) {
    CK(w->env->cu->cuStreamSynchronize(w->env->stream));
    for (int i = 0; i < n; i++) dbuf_download(w->env, outs[i]);
    if (!w->warming)
        cr_assert_eq(w->log.compiles, 0, "a step compiled a kernel the disk cache should have held (last warning: %s)",
                     w->log.last);
}

/* A call that succeeded: every output element against the reference. */
static void call_judge(void *user) {
    call_walk *w = user;
    dbuf *outs[3];
    const int n = call_outputs(w, outs);
    call_finish(w, outs, n);
    switch (w->kind) {
    case CALL_FWD: run_verify(w->fwd); break;
    case CALL_BWD: bwd_verify(w->bwd); break;
    case CALL_SERVE: serve_verify(w->serve); break;
    default: merge_verify(w->merge); break;
    }
}

/* A call that failed wrote nothing: every output still poisoned, its guard band intact. */
static void call_refused(void *user) {
    call_walk *w = user;
    dbuf *outs[3];
    const int n = call_outputs(w, outs);
    call_finish(w, outs, n);
    for (int i = 0; i < n; i++) check_untouched(outs[i], "an output of a call that failed");
    for (int i = 0; i < n; i++) dbuf_poison(w->env, outs[i]); /* as before the call, for the run that follows */
    CK(w->env->cu->cuCtxSynchronize());
}

static void call_after(void *user) {
    call_walk *w = user;
    fg_context_destroy(w->ctx);
    w->ctx = NULL;
}

/* Warms the disk cache with one judged call, then walks the call's allocations. */
static void walk_call(call_walk *w, const char *what) {
    const alloc_walk walk_of = {what, w, call_before, call_op, call_judge, call_refused, call_after, 1};
    fg_error err;
    fg_error_clear(&err);
    w->warming = 1;
    call_before(w);
    cr_assert_eq(call_op(w, &err), FG_OK, "%s, warming the disk cache: %s", what, err.msg);
    call_judge(w);
    call_after(w);
    w->warming = 0;
    alloc_walk_run(&walk_of);
}

/* ------------------------------------------------------------------------------------------------ */
/* The calls                                                                                         */
/* ------------------------------------------------------------------------------------------------ */

Test(gpu_alloc, forward) {
    gpu_env env;
    gpu_open(&env);
    seed_tuning_db(&env);
    const fwd_case c = mk(FG_DTYPE_BF16, 1, 77, 130, 4, 2, 64, 1);
    fwd_run r;
    run_setup(&env, &r, &c);
    call_walk w = {.kind = CALL_FWD, .env = &env, .fwd = &r};
    walk_call(&w, "fg_attention_fwd (bf16, 77 queries, 130 keys, 4/2 heads, head_dim 64, causal) on a fresh context");
    run_free(&env, &r);
    gpu_close(&env);
}

Test(gpu_alloc, backward) {
    gpu_env env;
    gpu_open(&env);
    seed_tuning_db(&env);
    const fwd_case c = mk(FG_DTYPE_BF16, 1, 70, 90, 4, 2, 64, 1);
    bwd_run r;
    bwd_setup(&env, &r, &c, 0); /* its forward runs on env's context */
    call_walk w = {.kind = CALL_BWD, .env = &env, .bwd = &r};
    walk_call(&w, "fg_attention_bwd (bf16, 70 queries, 90 keys, 4/2 heads, head_dim 64, causal) on a fresh context");
    bwd_free(&env, &r);
    gpu_close(&env);
}

Test(gpu_alloc, serving_decode) {
    gpu_env env;
    gpu_open(&env);
    seed_tuning_db(&env);
    static const int lq[3] = {1, 1, 1}, lk[3] = {300, 1, 77};
    serve_case c;
    memset(&c, 0, sizeof c);
    c.dt = FG_DTYPE_BF16, c.batch = 3, c.lq = lq, c.lk = lk, c.hq = 8, c.hkv = 2, c.d = 64;
    c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 16, c.num_splits = 3, c.seed = 0xa11c;
    serve_run *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    serve_setup(&env, r, &c);
    call_walk w = {.kind = CALL_SERVE, .env = &env, .serve = r};
    walk_call(&w, "fg_attention_fwd_varlen (a bf16 decode of 3 sequences over a paged cache, 3 key splits, "
                  "FG_OPTION_CHECK_INPUTS) on a fresh context");
    serve_free(&env, r);
    free(r);
    gpu_close(&env);
}

Test(gpu_alloc, merge_states) {
    gpu_env env;
    gpu_open(&env);
    seed_tuning_db(&env);
    merge_bufs m;
    merge_setup(&env, &m, 3, 11, 3, 64, FG_DTYPE_F32, FG_DTYPE_BF16, 0);
    call_walk w = {.kind = CALL_MERGE, .env = &env, .merge = &m};
    walk_call(&w, "fg_merge_states (3 fp32 states of 11 tokens, 3 heads, head_dim 64, into bf16) on a fresh context");
    merge_free(&env, &m);
    gpu_close(&env);
}
