/* test_tiers.c: the JIT's two tiers (runtime/tiers.c) without a GPU. A context is faked (as
 * test_backward_varlen_args.c does) with a driver table whose module loads keep a copy of the code they are
 * given, so a test can tell which build an entry of the memory cache runs; NVRTC and the disk cache are real.
 * The cases: a call's first compile is the quick build, and fg_wait_compiles leaves the full one in its place
 * (the disk cache holding it, and only it) with the quick module kept until the context ends; fg_prepare's, an
 * emulating context's and a context's with tiers turned off (knob or option) compiles are full at once; more
 * variants than workers all tier up; a full build that does not load leaves the quick one running; a context
 * destroyed mid-compile finishes its compiles into the disk cache; fg_wait_compiles with nothing pending; each host allocation of a tier-up
 * failing in turn. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/knobs.h"
#include "generator/emit.h"
#include "runtime/compile.h"
#include "runtime/dispatch.h"
#include "tests/test_util.h"

/* ---------------------------------------------------------------- a driver that keeps what it loads */

#define FAKE_MODULES 256

static struct {
    pthread_mutex_t lock;
    struct {
        uint8_t *code;           /* a copy of the image loaded */
        size_t size;             /* its bytes */
        int loaded;              /* not yet unloaded */
    } m[FAKE_MODULES];
    int n;                       /* modules loaded so far */
    int fail_load;               /* > 0: the fail_load-th load from now fails (1: the next) */
} fake = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The bytes of a cubin (an ELF64 image: up to the end of its section or program headers, whichever is last)
 * or of PTX text (its terminating NUL included). */
static size_t image_size(const uint8_t *p) {
    if (memcmp(p, "\177ELF", 4) != 0) return strlen((const char *)p) + 1;
    uint64_t phoff, shoff;
    uint16_t phentsize, phnum, shentsize, shnum;
    memcpy(&phoff, p + 0x20, 8), memcpy(&shoff, p + 0x28, 8);
    memcpy(&phentsize, p + 0x36, 2), memcpy(&phnum, p + 0x38, 2);
    memcpy(&shentsize, p + 0x3a, 2), memcpy(&shnum, p + 0x3c, 2);
    const uint64_t a = shoff + (uint64_t)shentsize * shnum, b = phoff + (uint64_t)phentsize * phnum;
    return (size_t)(a > b ? a : b);
}

static CUresult fake_ok_ctx(CUcontext c) { (void)c; return CUDA_SUCCESS; }
static CUresult fake_pop(CUcontext *c) { *c = NULL; return CUDA_SUCCESS; }

static CUresult fake_load(CUmodule *out, const void *image) {
    pthread_mutex_lock(&fake.lock);
    CUresult rc = CUDA_SUCCESS;
    if (fake.fail_load > 0 && --fake.fail_load == 0) rc = CUDA_ERROR_INVALID_IMAGE;
    else if (fake.n == FAKE_MODULES) rc = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        const size_t size = image_size(image);
        fake.m[fake.n].code = malloc(size);
        memcpy(fake.m[fake.n].code, image, size);
        fake.m[fake.n].size = size;
        fake.m[fake.n].loaded = 1;
        *out = (CUmodule)(uintptr_t)++fake.n;
    }
    pthread_mutex_unlock(&fake.lock);
    return rc;
}

static CUresult fake_unload(CUmodule m) {
    pthread_mutex_lock(&fake.lock);
    const int i = (int)(uintptr_t)m - 1;
    CUresult rc = i >= 0 && i < fake.n && fake.m[i].loaded ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) fake.m[i].loaded = 0;
    pthread_mutex_unlock(&fake.lock);
    return rc;
}

static CUresult fake_function(CUfunction *f, CUmodule m, const char *name) {
    *f = (CUfunction)((uintptr_t)m * 16 + strlen(name) % 16);
    return CUDA_SUCCESS;
}

static CUresult fake_attribute(CUfunction f, CUfunction_attribute a, int v) {
    (void)f, (void)a, (void)v;
    return CUDA_SUCCESS;
}

static CUresult fake_occupancy(int *n, CUfunction f, int threads, size_t smem) {
    (void)f, (void)threads, (void)smem;
    *n = 1;
    return CUDA_SUCCESS;
}

static CUresult fake_error_text(CUresult rc, const char **s) {
    (void)rc;
    *s = "fake driver error";
    return CUDA_SUCCESS;
}

static const fg_cuda_api fake_api = {
    .cuCtxPushCurrent = fake_ok_ctx,
    .cuCtxPopCurrent = fake_pop,
    .cuModuleLoadData = fake_load,
    .cuModuleUnload = fake_unload,
    .cuModuleGetFunction = fake_function,
    .cuFuncSetAttribute = fake_attribute,
    .cuOccupancyMaxActiveBlocksPerMultiprocessor = fake_occupancy,
    .cuGetErrorName = fake_error_text,
    .cuGetErrorString = fake_error_text,
};

/* Modules loaded and not unloaded. */
static int fake_live(void) {
    pthread_mutex_lock(&fake.lock);
    int live = 0;
    for (int i = 0; i < fake.n; i++) live += fake.m[i].loaded;
    pthread_mutex_unlock(&fake.lock);
    return live;
}

/* Whether module m's code is exactly size bytes at code. */
static int fake_holds(CUmodule m, const uint8_t *code, size_t size) {
    pthread_mutex_lock(&fake.lock);
    const int i = (int)(uintptr_t)m - 1;
    const int same = i >= 0 && i < fake.n && fake.m[i].size == size && memcmp(fake.m[i].code, code, size) == 0;
    pthread_mutex_unlock(&fake.lock);
    return same;
}

static void fake_reset(void) {
    pthread_mutex_lock(&fake.lock);
    for (int i = 0; i < fake.n; i++) free(fake.m[i].code);
    memset(fake.m, 0, sizeof fake.m);
    fake.n = 0;
    fake.fail_load = 0;
    pthread_mutex_unlock(&fake.lock);
}

/* ---------------------------------------------------------------- a fake context over a scratch disk cache */

static char g_dir[64];
static fg_context g_ctx;
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_log[32768]; /* every message, one a line (the background threads log too) */

static void capture(void *user, fg_log_level level, const char *msg) {
    (void)user;
    pthread_mutex_lock(&g_log_lock);
    const size_t used = strlen(g_log);
    snprintf(g_log + used, sizeof g_log - used, "%s: %s\n", level == FG_LOG_WARN ? "warning" : "info", msg);
    pthread_mutex_unlock(&g_log_lock);
}

/* Whether the log holds text (copied out under the lock). */
static int logged(const char *text) {
    pthread_mutex_lock(&g_log_lock);
    const int hit = strstr(g_log, text) != NULL;
    pthread_mutex_unlock(&g_log_lock);
    return hit;
}

/* A context as fg_context_create makes one for an H100, on the fake driver, with the scratch disk cache. */
static fg_context *open_fake(void) {
    fg_context *ctx = &g_ctx;
    memset(ctx, 0, sizeof *ctx);
    ctx->cu = &fake_api;
    ctx->cuctx = (CUcontext)(uintptr_t)1;
    ctx->arch = ctx->device_arch = 90;
    ctx->sm_count = 132;
    ctx->smem_optin = 232448;
    ctx->last_kernel = -1;
    fg_context_options_init(&ctx->opt);
    ctx->opt.log_level = FG_LOG_INFO;
    ctx->opt.log_fn = capture;
    pthread_mutex_lock(&g_log_lock);
    g_log[0] = '\0';
    pthread_mutex_unlock(&g_log_lock);
    fg_error err;
    cr_assert_eq(pthread_mutex_init(&ctx->lock, NULL), 0);
    cr_assert_eq(cache_open(&ctx->disk, g_dir, &err), FG_OK, "%s", err.msg);
    ctx->disk_ok = 1;
    cr_assert_eq(tiers_init(ctx, &err), FG_OK, "%s", err.msg);
    return ctx;
}

/* fg_context_destroy's steps on the fake context; every module loaded must then be unloaded. */
static void close_fake(fg_context *ctx) {
    tiers_stop(ctx);
    for (int i = 0; i < ctx->nkernels; i++) cr_assert_eq(fake_unload(ctx->kernels[i].module), CUDA_SUCCESS);
    for (int i = 0; i < ctx->tiers.nretired; i++) cr_assert_eq(fake_unload(ctx->tiers.retired[i]), CUDA_SUCCESS);
    free(ctx->kernels);
    tiers_free(ctx);
    pthread_mutex_destroy(&ctx->lock);
    cr_assert_eq(fake_live(), 0, "a module was leaked (or unloaded twice)");
}

static void suite_init(void) {
    test_scratch_make(g_dir, sizeof g_dir, "fg-test-tiers");
    setenv("FLASHGEN_JIT_TIERS", "1", 1); /* (tiers are off by default; these tests are about them on) */
    unsetenv("FLASHGEN_DUMP");
    fake_reset();
}

static void suite_fini(void) {
    fake_reset();
    test_scratch_remove(g_dir, "fg-test-tiers");
}

TestSuite(tiers, .init = suite_init, .fini = suite_fini, .timeout = 240);

static fg_spec spec_of(const char *text) {
    fg_spec s;
    fg_error err;
    cr_assert_eq(spec_parse(text, &s, &err), FG_OK, "%s: %s", text, err.msg);
    return s;
}

/* kernels_get under the lock, as the call paths take it; the entry's copy in *copy. */
static fg_status lookup(fg_context *ctx, const fg_spec *s, kernels_mode mode, kernels_origin *from, fg_kernel *copy,
                        fg_error *err) {
    pthread_mutex_lock(&ctx->lock);
    fg_kernel *k = NULL;
    const fg_status st = kernels_get(ctx, s, mode, from, &k, err);
    if (st == FG_OK && copy) *copy = *k;
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

/* The variant's entry now (a copy, taken under the lock); 0 when it is not loaded. */
static int entry_of(fg_context *ctx, const fg_spec *s, fg_kernel *copy) {
    char name[FG_SPEC_NAME_MAX];
    spec_format(s, name, sizeof name);
    pthread_mutex_lock(&ctx->lock);
    const fg_kernel *k = kernels_find(ctx, name);
    if (k) *copy = *k;
    pthread_mutex_unlock(&ctx->lock);
    return k != NULL;
}

/* The disk cache's entry for variant s compiled with flags (FG_COMPILE_QUICK: the key a quick build would
 * have), into *code (malloc'd) and *size; the status of cache_get. */
static fg_status cached(fg_context *ctx, const fg_spec *s, int flags, uint8_t **code, size_t *size) {
    char *src = NULL;
    size_t len = 0;
    fg_error err;
    cr_assert_eq(emit_source(s, &src, &len, &err), FG_OK, "%s", err.msg);
    uint8_t key[32];
    compile_cache_key(s, flags | (ctx->emulated ? FG_COMPILE_AS_PTX : 0), src, len, key);
    free(src);
    *code = NULL;
    return cache_get(&ctx->disk, key, code, size, &err);
}

/* Asserts that variant s's entry runs its full build, the one the disk cache holds under the key of a compile in a
 * fresh process or, once a quick compile has run in this one, under the key of a compile after it (NVRTC's state
 * then changes the code: compile.h); and that no other key holds it: neither a fresh compile's key for code that
 * was not one, nor the quick build's key. */
static void expect_full(fg_context *ctx, const fg_spec *s) {
    fg_kernel k;
    cr_assert(entry_of(ctx, s, &k), "the variant is loaded");
    cr_assert_eq(k.quick, 0, "the entry is no longer the quick build");
    cr_assert_str_eq(k.source, "JIT");
    const int after = compile_after_quick() ? FG_COMPILE_AFTER_QUICK : 0;
    uint8_t *code;
    size_t size;
    cr_assert_eq(cached(ctx, s, after, &code, &size), FG_OK, "the full build is in the disk cache");
    cr_assert(fake_holds(k.module, code, size), "the entry's module is the full build the disk cache holds");
    free(code);
    if (after)
        cr_assert_eq(cached(ctx, s, 0, &code, &size), FG_ERR_NOT_FOUND, "code compiled after a quick compile took "
                     "the key of a fresh process's compile");
    cr_assert_eq(cached(ctx, s, FG_COMPILE_QUICK, &code, &size), FG_ERR_NOT_FOUND, "a quick build was stored");
    cr_assert_eq(cached(ctx, s, FG_COMPILE_QUICK | FG_COMPILE_AFTER_QUICK, &code, &size), FG_ERR_NOT_FOUND,
                 "a quick build was stored");
}

Test(tiers, a_first_call_runs_the_quick_build_until_the_full_one_replaces_it) {
    fg_context *ctx = open_fake();
    const fg_spec s = spec_of("arch=sm_90,kind=merge");
    kernels_origin from;
    fg_kernel first;
    fg_error err;
    cr_assert_eq(lookup(ctx, &s, KERNELS_CALL, &from, &first, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(from, KERNELS_FROM_JIT);
    cr_assert_eq(first.quick, 1, "the first call's kernel is the quick build");
    cr_assert(logged("loaded arch=sm_90,kind=merge (JIT, quick; the optimized build follows in the background)"),
              "%s", g_log);
    cr_assert_eq(fg_wait_compiles(ctx), FG_OK);
    expect_full(ctx, &s);
    fg_kernel now;
    entry_of(ctx, &s, &now);
    cr_assert_neq(now.module, first.module, "the module was replaced");
    cr_assert_neq(now.fn, first.fn, "so was the function");
    cr_assert_eq(ctx->tiers.nretired, 1, "the quick module is kept, not unloaded");
    cr_assert_eq(ctx->tiers.retired[0], first.module);
    cr_assert_eq(fake_live(), 2, "both builds stay loaded while the context lives");
    cr_assert(logged("in place of its quick build"), "%s", g_log);
    /* the next call finds the full build in memory */
    fg_kernel again;
    cr_assert_eq(lookup(ctx, &s, KERNELS_CALL, &from, &again, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(from, KERNELS_FROM_MEMORY);
    cr_assert_eq(again.module, now.module);
    close_fake(ctx);
    /* a new context finds the full build in the disk cache */
    ctx = open_fake();
    cr_assert_eq(lookup(ctx, &s, KERNELS_CALL, &from, &again, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(from, KERNELS_FROM_DISK);
    cr_assert_eq(again.quick, 0);
    close_fake(ctx);
}

/* fg_prepare's lookup compiles the full build at once, and waits for a quick one's tier-up. */
Test(tiers, ahead_of_time_compiles_are_full_at_once) {
    fg_context *ctx = open_fake();
    const fg_spec s = spec_of("arch=sm_89,kind=merge");
    kernels_origin from;
    fg_kernel k;
    fg_error err;
    cr_assert_eq(lookup(ctx, &s, KERNELS_AHEAD, &from, &k, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(from, KERNELS_FROM_JIT);
    cr_assert_eq(k.quick, 0);
    cr_assert_null(ctx->tiers.jobs, "no tier-up was queued");
    expect_full(ctx, &s);
    cr_assert_eq(ctx->tiers.nretired, 0);
    close_fake(ctx);
}

/* The disk cache's entry of a compile made after a quick one serves calls, but not fg_prepare while this process
 * has run no quick compile (it compiles fresh, the better code); once it has, fg_prepare takes that entry too. */
Test(tiers, ahead_of_time_prefers_a_fresh_compile_while_the_process_can_make_one) {
    cr_assert_eq(compile_after_quick(), 0, "each test runs in a process of its own");
    fg_context *ctx = open_fake();
    const fg_spec s = spec_of("arch=sm_90,kind=merge");
    char name[FG_SPEC_NAME_MAX];
    spec_format(&s, name, sizeof name);
    fg_error err;
    char *src = NULL;
    size_t len = 0;
    cr_assert_eq(emit_source(&s, &src, &len, &err), FG_OK, "%s", err.msg);
    uint8_t key[32];
    compile_cache_key(&s, FG_COMPILE_AFTER_QUICK, src, len, key);
    free(src);
    fg_compile_result r;
    cr_assert_eq(compile_spec(&s, 0, &r, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(r.after_quick, 0);
    cr_assert_eq(cache_put(&ctx->disk, key, name, r.cubin, r.cubin_size, &err), FG_OK, "%s", err.msg);
    compile_result_free(&r);
    kernels_origin from;
    fg_kernel k;
    cr_assert_eq(lookup(ctx, &s, KERNELS_DRY, &from, NULL, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(from, KERNELS_FROM_DISK, "a call would load the entry");
    cr_assert_eq(lookup(ctx, &s, KERNELS_AHEAD, &from, &k, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(from, KERNELS_FROM_JIT, "fg_prepare compiles fresh");
    expect_full(ctx, &s);
    close_fake(ctx);
    /* once a quick compile has run here, no fresh compile can be had: the entry serves fg_prepare */
    const fg_spec other = spec_of("arch=sm_86,kind=merge");
    cr_assert_eq(compile_spec(&other, FG_COMPILE_QUICK, &r, &err), FG_OK, "%s", err.msg);
    compile_result_free(&r);
    cr_assert_eq(compile_after_quick(), 1);
    ctx = open_fake();
    cr_assert_geq(cache_clear(&ctx->disk, &err), 0, "%s", err.msg);
    cr_assert_eq(cache_put(&ctx->disk, key, name, (const uint8_t *)"not a cubin", 12, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(lookup(ctx, &s, KERNELS_AHEAD, &from, &k, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(from, KERNELS_FROM_DISK);
    cr_assert(fake_holds(k.module, (const uint8_t *)"not a cubin", 12));
    close_fake(ctx);
}

/* FG_OPTION_JIT_TIERS 0, FLASHGEN_JIT_TIERS=0 and an emulating context compile full at once; the option refuses
 * anything but 0 and 1 with a sentence, and the knob's other values are named in one; unset, tiers are off. */
Test(tiers, tiers_off_compile_full_at_once) {
    fg_error err;
    kernels_origin from;
    fg_kernel k;
    for (int how = 0; how < 3; how++) {
        if (how == 1) setenv("FLASHGEN_JIT_TIERS", "0", 1);
        fg_context *ctx = open_fake();
        setenv("FLASHGEN_JIT_TIERS", "1", 1);
        if (how == 0) {
            cr_assert_eq(fg_context_set_option(ctx, FG_OPTION_JIT_TIERS, 2), FG_ERR_INVALID_ARGUMENT);
            cr_assert(strstr(fg_last_error(ctx), "FG_OPTION_JIT_TIERS takes 0 or 1, not 2"), "%s", fg_last_error(ctx));
            cr_assert_eq(fg_context_set_option(ctx, FG_OPTION_JIT_TIERS, 0), FG_OK);
        }
        if (how == 2) ctx->arch = 80, ctx->emulated = 1; /* FLASHGEN_EMULATE_ARCH=80: PTX, full */
        static const char *const specs[3] = {"arch=sm_86,kind=merge", "arch=sm_89,kind=merge", "arch=sm_80,kind=merge"};
        const fg_spec s = spec_of(specs[how]);
        cr_assert_eq(tiers_apply(ctx), 0, "case %d", how);
        cr_assert_eq(lookup(ctx, &s, KERNELS_CALL, &from, &k, &err), FG_OK, "%s", err.msg);
        cr_assert_eq(k.quick, 0, "case %d", how);
        cr_assert_null(ctx->tiers.jobs, "case %d: no tier-up was queued", how);
        expect_full(ctx, &s);
        close_fake(ctx);
    }
    /* a value other than 0 or 1 is named in a sentence (a context logs it as a warning), and the default holds:
     * off, as with the variable unset */
    setenv("FLASHGEN_JIT_TIERS", "off", 1);
    char msg[256];
    cr_assert_eq(knob_bad_switch(msg, sizeof msg), 1);
    cr_assert(strstr(msg, "FLASHGEN_JIT_TIERS=off is not 0 or 1: it is ignored, and its default (0) holds"), "%s", msg);
    fg_context *bad = open_fake();
    cr_assert_eq(tiers_apply(bad), 0);
    close_fake(bad);
    unsetenv("FLASHGEN_JIT_TIERS");
    fg_context *ctx = open_fake();
    cr_assert_eq(tiers_apply(ctx), 0);
    /* the option turns them on */
    cr_assert_eq(fg_context_set_option(ctx, FG_OPTION_JIT_TIERS, 1), FG_OK);
    cr_assert_eq(tiers_apply(ctx), 1);
    close_fake(ctx);
    setenv("FLASHGEN_JIT_TIERS", "1", 1);
}

/* More variants than workers: the queue waits for a free one, and every variant ends on its full build. */
Test(tiers, more_variants_than_workers_all_tier_up) {
    static const char *const archs[] = {"sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100"};
    enum { N = sizeof archs / sizeof archs[0] };
    cr_assert_gt(N, TIERS_MAX_WORKERS);
    fg_context *ctx = open_fake();
    fg_spec s[N];
    fg_error err;
    for (int i = 0; i < N; i++) {
        char text[64];
        snprintf(text, sizeof text, "arch=%s,kind=merge", archs[i]);
        s[i] = spec_of(text);
        kernels_origin from;
        fg_kernel k;
        cr_assert_eq(lookup(ctx, &s[i], KERNELS_CALL, &from, &k, &err), FG_OK, "%s: %s", text, err.msg);
        cr_assert_eq(k.quick, 1, "%s", text);
    }
    cr_assert_eq(fg_wait_compiles(ctx), FG_OK);
    cr_assert_null(ctx->tiers.jobs);
    for (int i = 0; i < N; i++) expect_full(ctx, &s[i]);
    cr_assert_eq(ctx->tiers.nretired, N);
    close_fake(ctx);
}

/* A full build that does not load: the warning says so, and the quick build keeps running. */
Test(tiers, a_full_build_that_does_not_load_leaves_the_quick_one) {
    fg_context *ctx = open_fake();
    const fg_spec s = spec_of("arch=sm_90,kind=merge");
    kernels_origin from;
    fg_kernel k;
    fg_error err;
    pthread_mutex_lock(&ctx->lock); /* the worker waits for the lock before it loads anything */
    fg_kernel *e = NULL;
    cr_assert_eq(kernels_get(ctx, &s, KERNELS_CALL, &from, &e, &err), FG_OK, "%s", err.msg);
    k = *e;
    fake.fail_load = 1; /* the next load (the full build's) fails */
    pthread_mutex_unlock(&ctx->lock);
    cr_assert_eq(fg_wait_compiles(ctx), FG_OK, "a failed tier-up is no failure of the wait");
    cr_assert(logged("did not load, so its quick build stays"), "%s", g_log);
    fg_kernel now;
    cr_assert(entry_of(ctx, &s, &now));
    cr_assert_eq(now.quick, 1);
    cr_assert_eq(now.module, k.module);
    cr_assert_eq(ctx->tiers.nretired, 0);
    close_fake(ctx);
}

/* Destroying a context while tier-ups compile and wait in the queue: the destroy waits for them all, loads none
 * of them and leaks nothing, and the next context finds every full build in the disk cache. */
Test(tiers, a_context_destroyed_mid_compile_leaves_the_full_builds_in_the_disk_cache) {
    static const char *const archs[] = {"sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100"};
    enum { N = sizeof archs / sizeof archs[0] };
    fg_spec s[N];
    fg_error err;
    kernels_origin from;
    fg_kernel k;
    fg_context *ctx = open_fake();
    for (int i = 0; i < N; i++) {
        char text[64];
        snprintf(text, sizeof text, "arch=%s,kind=merge", archs[i]);
        s[i] = spec_of(text);
        cr_assert_eq(lookup(ctx, &s[i], KERNELS_CALL, &from, NULL, &err), FG_OK, "%s: %s", text, err.msg);
    }
    close_fake(ctx); /* asserts every module was unloaded */
    cr_assert_null(g_ctx.tiers.jobs);
    ctx = open_fake();
    for (int i = 0; i < N; i++) {
        cr_assert_eq(lookup(ctx, &s[i], KERNELS_CALL, &from, &k, &err), FG_OK, "%s", err.msg);
        cr_assert_eq(from, KERNELS_FROM_DISK, "%s", archs[i]);
        cr_assert_eq(k.quick, 0);
    }
    close_fake(ctx);
}

Test(tiers, waiting_with_nothing_pending_returns_at_once) {
    fg_context *ctx = open_fake();
    cr_assert_eq(fg_wait_compiles(ctx), FG_OK);
    close_fake(ctx);
    cr_assert_eq(fg_wait_compiles(NULL), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(NULL), "fg_wait_compiles: ctx is NULL"), "%s", fg_last_error(NULL));
}

/* Each host allocation of a first call's lookup and of its tier-up fails in turn (core/alloc.h). One in the call's
 * part fails the call with a sentence, leaving nothing loaded or queued, and the call then succeeds; one in the
 * background's part leaves a warning and the quick build running (or the full build, when only the disk cache's
 * write failed; a failure the disk cache's pruning does without changes nothing). Leaks are judged by the sanitizer build and by the fake driver's count of modules. */
Test(tiers, each_allocation_failing_in_turn) {
    const fg_spec s = spec_of("arch=sm_90,kind=merge");
    fg_error err;
    long n;
    int foreground = 0, background = 0;
    for (n = 1;; n++) {
        fg_context *ctx = open_fake();
        cr_assert_geq(cache_clear(&ctx->disk, &err), 0, "%s", err.msg);
        kernels_origin from;
        fg_error_clear(&err);
        fg_alloc_fail_at(n);
        const fg_status st = lookup(ctx, &s, KERNELS_CALL, &from, NULL, &err);
        fg_wait_compiles(ctx);
        const int reached = !fg_alloc_fail_pending();
        fg_alloc_fail_at(0);
        fg_kernel k;
        if (!reached) {
            cr_assert_eq(st, FG_OK, "%s", err.msg);
            expect_full(ctx, &s);
            close_fake(ctx);
            break;
        }
        if (st != FG_OK) {
            foreground++;
            cr_assert(err.msg[0], "allocation %ld failed with status %d and no sentence", n, (int)st);
            cr_assert_eq(ctx->nkernels, 0, "allocation %ld: a failed call left a kernel loaded", n);
            cr_assert_null(ctx->tiers.jobs, "allocation %ld: a failed call left a tier-up queued", n);
            cr_assert_eq(fake_live(), 0, "allocation %ld: a failed call left a module loaded", n);
            fg_error_clear(&err);
            cr_assert_eq(lookup(ctx, &s, KERNELS_CALL, &from, NULL, &err), FG_OK, "after allocation %ld: %s", n, err.msg);
            cr_assert_eq(fg_wait_compiles(ctx), FG_OK);
            expect_full(ctx, &s);
        } else {
            /* A warning, unless the step that failed does without what it could not allocate (the disk cache's
             * pruning after a write): then the outcome is the full one. */
            background++;
            cr_assert(entry_of(ctx, &s, &k));
            cr_assert_eq(k.quick ? 0 : 1, ctx->tiers.nretired, "allocation %ld: the entry and the retired list agree", n);
            if (!logged("warning: ")) expect_full(ctx, &s);
        }
        close_fake(ctx);
    }
    cr_assert_gt(foreground, 0);
    cr_assert_gt(background, 0);
    cr_log_info("a first call with its tier-up: %ld allocations failed in turn (%d in the call, %d in the background)",
                n - 1, foreground, background);
}
