/* test_gpu_runtime.c: where kernels come from, on a GPU (suite `runtime`): strict mode refusing a
 * variant no cache or bundle holds and a bundle providing it, the disk cache serving another context and
 * a corrupt entry being recompiled, the compile log, the JIT's quick first build replaced by the optimized
 * one, and FLASHGEN_EMULATE_ARCH running an older target's code. Also the driver loader itself (suite `driver`), which runs with or without a GPU; the others skip
 * with the reason without one. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashgen.h"
#include "reference/reference.h"
#include "runtime/cuda_api.h"
#include "runtime/runtime.h"
#include "tests/gpu_harness.h"

/* ------------------------------------------------------------------------------------------------ */
/* The driver loader itself (runs everywhere, GPU or not)                                            */
/* ------------------------------------------------------------------------------------------------ */

Test(driver, loader_answers_consistently_and_formats_failures) {
    fg_error a, b;
    fg_error_clear(&a);
    fg_error_clear(&b);
    const fg_cuda_api *p1 = cuda_api_get(&a), *p2 = cuda_api_get(&b);
    cr_assert_eq(p1, p2, "the driver is loaded once per process");
    if (!p1) {
        cr_assert_eq(a.status, FG_ERR_NO_DEVICE, "a missing driver or device is FG_ERR_NO_DEVICE");
        cr_assert_str_eq(a.msg, b.msg);
        cr_assert_neq(a.msg[0], '\0', "the failure needs a sentence");
        cr_log_info("driver not available: %s", a.msg);
    } else {
        /* Every entry point was resolved. */
        cr_assert_eq(sizeof *p1 % sizeof(void (*)(void)), 0);
        for (size_t off = 0; off < sizeof *p1; off += sizeof(void (*)(void))) {
            void (*fn)(void);
            memcpy(&fn, (const char *)p1 + off, sizeof fn);
            cr_assert_not_null((void *)(uintptr_t)fn, "entry %zu of fg_cuda_api is NULL", off / sizeof fn);
        }
    }
    fg_error e;
    fg_error_clear(&e);
    fg_status s = cuda_api_fail(&e, CUDA_ERROR_INVALID_VALUE, "cuFake(42)", "somewhere.c", 7);
    cr_assert_eq(s, FG_ERR_CUDA);
    cr_assert_eq(e.status, FG_ERR_CUDA);
    cr_assert_not_null(strstr(e.msg, "cuFake(42) failed: "), "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, " at somewhere.c:7"), "%s", e.msg);
    if (p1)
        cr_assert_not_null(strstr(e.msg, "CUDA_ERROR_INVALID_VALUE"), "%s", e.msg);
    else
        cr_assert_not_null(strstr(e.msg, "CUresult 1 "), "without a driver the code is printed: %s", e.msg);
    cr_assert_eq(cuda_api_fail(NULL, CUDA_ERROR_OUT_OF_MEMORY, "x", "y", 1), FG_ERR_CUDA, "a NULL error is allowed");
}

Test(runtime, strict_mode_refuses_a_missing_variant_and_a_bundle_provides_it, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    if (emulated_arch()) {
        gpu_close(&env);
        cr_skip_test("FLASHGEN_EMULATE_ARCH: a bundle holds the emulated arch's machine code, which this GPU cannot "
                     "load, so an emulating context reads no bundles");
    }
    fwd_run r;
    fwd_case c = mk(FG_DTYPE_BF16, 1, 300, 257, 4, 2, 72, 1);
    run_setup(&env, &r, &c);
    fg_context *strict = extra_context(NULL, 1, NULL, NULL);
    char name[FG_SPEC_NAME_MAX], text[2048];
    explained_variant(strict, &r.args, name, sizeof name, text, sizeof text);
    cr_assert(strstr(text, "code: in no cache or bundle: strict mode"), "fg_explain should say strict mode will refuse: %s", text);

    dbuf_poison(&env, &r.o);
    dbuf_poison(&env, &r.lse);
    CK(env.cu->cuCtxSynchronize());
    fg_status st = fg_attention_fwd(strict, &r.args, (void *)env.stream);
    cr_assert_eq(st, FG_ERR_NOT_FOUND, "strict miss gave %s", fg_status_string(st));
    cr_assert(strstr(fg_last_error(strict), name), "the error must name the variant: %s", fg_last_error(strict));
    CK(env.cu->cuCtxSynchronize());
    dbuf_download(&env, &r.o);
    check_untouched(&r.o, "O");

    /* Compile exactly that variant ahead of time into an in-memory bundle. */
    fg_spec s;
    fg_error e;
    cr_assert_eq(spec_parse(name, &s, &e), FG_OK, "%s", e.msg);
    bundle_one_into(strict, &s);
    explained_variant(strict, &r.args, name, sizeof name, text, sizeof text);
    cr_assert(strstr(text, "code: a loaded bundle"), "fg_explain should name the bundle: %s", text);
    launch_and_verify_with(&env, strict, &r);
    fprintf(stderr, "gpu_fwd: strict mode: refused before the bundle, served from it after\n");

    fg_context_destroy(strict);
    run_free(&env, &r);
    gpu_close(&env);
}

/* The single cache entry file in dir (there must be exactly one). */
static void only_entry(const char *dir, char *path, size_t n) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s", dir);
    int count = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len > 6 && strcmp(de->d_name + len - 6, ".cubin") == 0) {
            snprintf(path, n, "%s/%s", dir, de->d_name);
            count++;
        }
    }
    closedir(d);
    cr_assert_eq(count, 1, "%s holds %d cache entries, expected 1", dir, count);
}

Test(runtime, disk_cache_serves_another_context_and_a_corrupt_entry_is_recompiled, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    char dir[64];
    cr_assert_eq(make_temp_dir(dir, sizeof dir), 0);
    fwd_run r;
    fwd_case c = mk(FG_DTYPE_F16, 2, 129, 77, 2, 1, 48, 0);
    run_setup(&env, &r, &c);
    char name[FG_SPEC_NAME_MAX], text[2048];

    fg_context *a = extra_context(dir, 0, NULL, NULL);
    explained_variant(a, &r.args, name, sizeof name, text, sizeof text);
    cr_assert(strstr(text, "code: not compiled yet"), "an empty cache should mean a JIT compile: %s", text);
    cr_assert_eq(fg_prepare(a, &r.args), FG_OK, "%s", fg_last_error(a));
    fg_context_destroy(a);
    char entry[512];
    only_entry(dir, entry, sizeof entry);

    fg_context *b = extra_context(dir, 1, NULL, NULL); /* strict: the disk cache must serve it */
    explained_variant(b, &r.args, name, sizeof name, text, sizeof text);
    cr_assert(strstr(text, "code: disk cache"), "fg_explain should name the disk cache: %s", text);
    launch_and_verify_with(&env, b, &r);
    fg_context_destroy(b);

    /* Flip one byte in the middle of the entry: it must be a miss, never loaded. */
    FILE *f = fopen(entry, "r+b");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size / 2, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, size / 2, SEEK_SET);
    fputc(ch ^ 0x40, f);
    fclose(f);
    fg_context *strict = extra_context(dir, 1, NULL, NULL);
    cr_assert_eq(fg_prepare(strict, &r.args), FG_ERR_NOT_FOUND, "a corrupt entry must not be used");
    fg_context_destroy(strict);
    fg_context *again = extra_context(dir, 0, NULL, NULL); /* recompiles and replaces the entry */
    cr_assert_eq(fg_prepare(again, &r.args), FG_OK, "%s", fg_last_error(again));
    fg_context_destroy(again);
    fg_context *strict2 = extra_context(dir, 1, NULL, NULL);
    launch_and_verify_with(&env, strict2, &r);
    fg_context_destroy(strict2);
    fprintf(stderr, "gpu_fwd: disk cache: hit from a second context; corrupt entry missed, recompiled, replaced\n");

    run_free(&env, &r);
    remove_tree(dir);
    gpu_close(&env);
}

Test(runtime, a_jit_compile_is_logged_with_its_variant_and_time, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    fwd_run r;
    fwd_case c = mk(FG_DTYPE_BF16, 1, 64, 64, 2, 2, 56, 1);
    run_setup(&env, &r, &c);
    log_sink sink;
    memset(&sink, 0, sizeof sink);
    fg_context *ctx = extra_context(NULL, 0, collect, &sink);
    char name[FG_SPEC_NAME_MAX], text[2048];
    explained_variant(ctx, &r.args, name, sizeof name, text, sizeof text);
    cr_assert_eq(fg_prepare(ctx, &r.args), FG_OK, "%s", fg_last_error(ctx));
    char want[FG_SPEC_NAME_MAX + 16];
    snprintf(want, sizeof want, "compiled %s in ", name);
    cr_assert(strstr(sink.text, want), "the log must say '%s...': %s", want, sink.text);
    cr_assert(strstr(sink.text, " s ("), "the log must give the compile time: %s", sink.text);
    fg_context_destroy(ctx);
    run_free(&env, &r);
    gpu_close(&env);
}

/* A log sink the context's background compile threads may write to while the test's thread does. */
typedef struct locked_sink {
    pthread_mutex_t lock;
    log_sink sink;
} locked_sink;

static void collect_locked(void *user, fg_log_level level, const char *msg) {
    locked_sink *s = user;
    pthread_mutex_lock(&s->lock);
    collect(&s->sink, level, msg);
    pthread_mutex_unlock(&s->lock);
}

/* The JIT's tiers (runtime/tiers.h), turned on by FG_OPTION_JIT_TIERS, with a fresh cache directory: fg_explain says the first call compiles quick;
 * the first call runs the quick build, whose output is checked; fg_wait_compiles returns once the optimized
 * build has replaced it (the log says both); the second call's output is checked too and compared with the
 * first's; the disk cache then holds the optimized build (never the quick one), which a strict context loads and
 * which computes the second call's output bit for bit. */
Test(runtime, a_first_call_runs_the_quick_build_until_the_optimized_one_replaces_it, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    if (emulated_arch()) {
        gpu_close(&env);
        cr_skip_test("FLASHGEN_EMULATE_ARCH: an emulating context compiles PTX, full, with no quick build");
    }
    char dir[64];
    cr_assert_eq(make_temp_dir(dir, sizeof dir), 0, "mkdtemp failed");
    fwd_run r;
    fwd_case c = mk(FG_DTYPE_BF16, 2, 200, 333, 4, 2, 64, 1);
    run_setup(&env, &r, &c);
    locked_sink log;
    memset(&log, 0, sizeof log);
    pthread_mutex_init(&log.lock, NULL);
    fg_context *ctx = extra_context(dir, 0, collect_locked, &log);
    cr_assert_eq(fg_context_set_option(ctx, FG_OPTION_JIT_TIERS, 1), FG_OK, "%s", fg_last_error(ctx));
    char name[FG_SPEC_NAME_MAX], text[2048];
    explained_variant(ctx, &r.args, name, sizeof name, text, sizeof text);
    cr_assert(strstr(text, "code: not compiled yet: the first call compiles it quick"), "%s", text);

    launch_and_verify_with(&env, ctx, &r); /* the quick build */
    const size_t obytes = (size_t)r.o.span * r.o.esize, lbytes = (size_t)r.lse.span * r.lse.esize;
    unsigned char *o_quick = malloc(obytes), *lse_quick = malloc(lbytes);
    cr_assert(o_quick && lse_quick);
    memcpy(o_quick, r.o.img, obytes);
    memcpy(lse_quick, r.lse.img, lbytes);
    char want[FG_SPEC_NAME_MAX + 80];
    snprintf(want, sizeof want, "loaded %s (JIT, quick; the optimized build follows in the background)", name);
    pthread_mutex_lock(&log.lock);
    cr_assert(strstr(log.sink.text, want), "the log must say '%s': %s", want, log.sink.text);
    pthread_mutex_unlock(&log.lock);

    cr_assert_eq(fg_wait_compiles(ctx), FG_OK, "%s", fg_last_error(ctx));
    pthread_mutex_lock(&log.lock);
    cr_assert(strstr(log.sink.text, "in place of its quick build"), "the optimized build replaced the quick one: %s",
              log.sink.text);
    pthread_mutex_unlock(&log.lock);
    explained_variant(ctx, &r.args, name, sizeof name, text, sizeof text);
    cr_assert(strstr(text, "code: already loaded (memory cache)") && !strstr(text, "quick build"), "%s", text);

    launch_and_verify_with(&env, ctx, &r); /* the optimized build */
    unsigned char *o_full = malloc(obytes), *lse_full = malloc(lbytes);
    cr_assert(o_full && lse_full);
    memcpy(o_full, r.o.img, obytes);
    memcpy(lse_full, r.lse.img, lbytes);
    fprintf(stderr, "gpu_fwd: tiers: %s: the quick and the optimized build's outputs are %s (each checked against "
            "the reference)\n", name,
            memcmp(o_quick, o_full, obytes) == 0 && memcmp(lse_quick, lse_full, lbytes) == 0 ? "bitwise equal"
                                                                                          : "within the tolerance");
    fg_context_destroy(ctx);

    fg_context *strict = extra_context(dir, 1, NULL, NULL); /* strict: only the disk cache can serve it */
    explained_variant(strict, &r.args, name, sizeof name, text, sizeof text);
    cr_assert(strstr(text, "code: disk cache"), "the disk cache holds the optimized build: %s", text);
    launch_and_verify_with(&env, strict, &r);
    cr_assert(memcmp(r.o.img, o_full, obytes) == 0 && memcmp(r.lse.img, lse_full, lbytes) == 0,
              "the disk cache's build computes what the build that replaced the quick one computed");
    fg_context_destroy(strict);

    free(o_quick), free(lse_quick), free(o_full), free(lse_full);
    pthread_mutex_destroy(&log.lock);
    run_free(&env, &r);
    remove_tree(dir);
    gpu_close(&env);
}

/* FLASHGEN_EMULATE_ARCH (read at context creation): a value flashgen cannot emulate fails the context with a
 * sentence naming the variable; 80 on a newer GPU gives sm_80 variants, compiled to PTX, said by fg_explain
 * (forward and backward) and the log, whose results are checked like any other; the PTX goes through the disk
 * cache (a second emulating context loads it from there and checks again; test_compile checks that its key
 * differs from the cubin's); the context the test opened is unaffected. */
Test(runtime, emulate_arch_runs_an_older_targets_code, .timeout = 300) {
    const char *was = getenv("FLASHGEN_EMULATE_ARCH");
    char saved[32] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    unsetenv("FLASHGEN_EMULATE_ARCH");
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    fg_context_options opt;
    fg_context_options_init(&opt);
    opt.disable_disk_cache = 1;
    static const char *bad[] = {"79", "70", "abc", "80x", "999", "84"};
    for (size_t i = 0; i < NELEM(bad); i++) {
        setenv("FLASHGEN_EMULATE_ARCH", bad[i], 1);
        fg_context *ctx = NULL;
        cr_assert_eq(fg_context_create(&ctx, &opt), FG_ERR_INVALID_ARGUMENT, "FLASHGEN_EMULATE_ARCH=%s", bad[i]);
        cr_assert_null(ctx);
        cr_assert(strstr(fg_last_error(NULL), "FLASHGEN_EMULATE_ARCH") && strstr(fg_last_error(NULL), bad[i]),
                  "the error names the variable and its value: %s", fg_last_error(NULL));
    }
    char dir[64];
    cr_assert_eq(make_temp_dir(dir, sizeof dir), 0, "mkdtemp failed");
    setenv("FLASHGEN_EMULATE_ARCH", "80", 1);
    fwd_run r;
    fwd_case c = mk(FG_DTYPE_F16, 1, 150, 333, 2, 1, 128, 1);
    run_setup(&env, &r, &c);
    char name[FG_SPEC_NAME_MAX], text[2048];
    for (int pass = 0; pass < 2; pass++) { /* JIT to PTX, then the disk cache */
        log_sink sink;
        memset(&sink, 0, sizeof sink);
        fg_context *ctx = extra_context(dir, 0, collect, &sink);
        explained_variant(ctx, &r.args, name, sizeof name, text, sizeof text);
        cr_assert(strncmp(name, "arch=sm_80,", 11) == 0, "an sm_80 variant: %s", text);
        cr_assert((cc > 80) == (strstr(text, "emulated on sm_") != NULL), "fg_explain says whether it emulates: %s", text);
        cr_assert(strstr(text, pass ? "code: disk cache" : "code: not compiled yet") != NULL, "pass %d: %s", pass, text);
        launch_and_verify_with(&env, ctx, &r);
        if (cc > 80 && pass == 0)
            cr_assert(strstr(sink.text, "(to PTX: the driver compiles it for sm_") != NULL, "the log says PTX: %s", sink.text);
        if (pass == 1) { /* the backward is said the same way */
            bwd_run b;
            fwd_case bc = mk(FG_DTYPE_BF16, 1, 100, 130, 2, 2, 64, 0);
            bwd_setup(&env, &b, &bc, 0);
            char bt[2048];
            cr_assert_eq(fg_explain_bwd(ctx, &b.args, bt, sizeof bt), FG_OK, "%s", fg_last_error(ctx));
            cr_assert(strncmp(bt, "variant arch=sm_80,", 19) == 0 && strstr(bt, ",tma=1,") == NULL, "%s", bt);
            cr_assert((cc > 80) == (strstr(bt, "emulated on sm_") != NULL), "%s", bt);
            bwd_free(&env, &b);
        }
        fg_context_destroy(ctx);
    }
    unsetenv("FLASHGEN_EMULATE_ARCH");
    run_free(&env, &r);
    remove_tree(dir);
    if (was) setenv("FLASHGEN_EMULATE_ARCH", saved, 1);
    gpu_close(&env);
}
