/* gpu_harness.c: the GPU test programs' shared ground: the program's disk cache directory (made before
 * the first test, removed after the last, by Criterion report hooks), the device and a flashgen context
 * per test (skipping with the reason when there is no GPU), device buffers with a host image, and the
 * checks of poisoned outputs and their guard bands. Contracts in gpu_harness.h. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "reference/reference.h"
#include "tests/gpu_harness.h"

/* ------------------------------------------------------------------------------------------------ */
/* The suite's cache directory                                                                       */
/* ------------------------------------------------------------------------------------------------ */

static char suite_dir[64]; /* the directory PRE_ALL made, "" when the user supplied one */

/* nftw callback: removes one entry. A failure is ignored on purpose (the walk goes on): the worst case
 * is a leftover temporary directory, which must not fail a test suite that otherwise passed. */
static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0)
        fprintf(stderr, "gpu tests: could not remove %s from the test cache directory\n", path);
    return 0;
}

/* Removes dir and everything below it (a directory this suite created). */
void remove_tree(const char *dir) {
    if (dir[0])
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Makes a fresh 0700 directory under $TMPDIR (or /tmp) into buf; returns 0 or -1. */
int make_temp_dir(char *buf, size_t n) {
    const char *base = getenv("TMPDIR");
    if (!base || !base[0])
        base = "/tmp";
    if ((size_t)snprintf(buf, n, "%s/flashgen-test-XXXXXX", base) >= n)
        return -1;
    return mkdtemp(buf) ? 0 : -1;
}

ReportHook(PRE_ALL)(struct criterion_test_set *set) {
    (void)set;
    if (getenv(CACHE_ENV))
        return;
    if (make_temp_dir(suite_dir, sizeof suite_dir) == 0)
        setenv(CACHE_ENV, suite_dir, 1); /* the test processes inherit it */
    else
        suite_dir[0] = '\0';
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
    (void)stats;
    remove_tree(suite_dir);
}

/* ------------------------------------------------------------------------------------------------ */
/* The device                                                                                        */
/* ------------------------------------------------------------------------------------------------ */

/* Loads the driver, or skips the test with the reason; then makes device 0's primary context current,
 * creates the flashgen context and a stream. */
void gpu_open(gpu_env *env) {
    memset(env, 0, sizeof *env);
    fg_error e;
    fg_error_clear(&e);
    env->cu = cuda_api_get(&e);
    if (!env->cu)
        cr_skip_test("no CUDA device: %s", e.msg);
    int count = 0;
    CUresult rc = env->cu->cuDeviceGetCount(&count);
    if (rc != CUDA_SUCCESS || count < 1)
        cr_skip_test("no CUDA device: the driver reports %d devices", rc == CUDA_SUCCESS ? count : 0);
    CK(env->cu->cuDeviceGet(&env->dev, 0));
    CK(env->cu->cuDevicePrimaryCtxRetain(&env->pctx, env->dev));
    CK(env->cu->cuCtxPushCurrent(env->pctx));

    const char *dir = getenv(CACHE_ENV);
    if (!dir) {
        cr_assert_eq(make_temp_dir(env->own_dir, sizeof env->own_dir), 0, "mkdtemp failed for the cache directory");
        dir = env->own_dir;
    }
    fg_context_options opt;
    fg_context_options_init(&opt);
    opt.device = 0;
    opt.cache_dir = dir;
    opt.log_level = FG_LOG_INFO; /* compile times belong in the suite's log */
    fg_status st = fg_context_create(&env->ctx, &opt);
    cr_assert_eq(st, FG_OK, "fg_context_create: %s: %s", fg_status_string(st), fg_last_error(NULL));
    CK(env->cu->cuStreamCreate(&env->stream, CU_STREAM_NON_BLOCKING));
}

/* Undoes gpu_open: stream, flashgen context, primary context, and a cache directory it made. Driver
 * failures are ignored here: the test has already passed or failed on its own checks. */
void gpu_close(gpu_env *env) {
    if (env->poison_mod)
        env->cu->cuModuleUnload(env->poison_mod);
    if (env->stream)
        env->cu->cuStreamDestroy(env->stream);
    fg_context_destroy(env->ctx);
    CUcontext popped;
    env->cu->cuCtxPopCurrent(&popped);
    env->cu->cuDevicePrimaryCtxRelease(env->dev);
    remove_tree(env->own_dir);
}

/* The shared-memory poisoner, in PTX (the driver compiles it; no NVRTC): 256 threads store 16 bytes of
 * all-ones each, 4 KiB apart, over the dynamic shared memory's first `bytes` bytes. */
static const char poison_ptx[] =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".extern .shared .align 16 .b8 fg_poison_smem[];\n"
    ".visible .entry fg_test_poison_shared(.param .u32 fg_bytes)\n{\n"
    "  .reg .pred %p<2>;\n  .reg .b32 %r<8>;\n"
    "  ld.param.u32 %r1, [fg_bytes];\n  mov.u32 %r2, %tid.x;\n  shl.b32 %r2, %r2, 4;\n"
    "  mov.u32 %r3, fg_poison_smem;\n  mov.b32 %r4, -1;\n"
    "$L_loop:\n  setp.ge.u32 %p1, %r2, %r1;\n  @%p1 bra $L_done;\n  add.u32 %r5, %r3, %r2;\n"
    "  st.shared.v4.b32 [%r5], {%r4, %r4, %r4, %r4};\n  add.u32 %r2, %r2, 4096;\n  bra.uni $L_loop;\n"
    "$L_done:\n  ret;\n}\n";

void gpu_poison_shared(gpu_env *env) {
    const fg_cuda_api *cu = env->cu;
    if (!env->poison_fn) {
        /* the device's own limits: a context under FLASHGEN_EMULATE_ARCH reports the emulated arch's */
        int optin = 0, sms = 0;
        CK(cu->cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, env->dev));
        CK(cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, env->dev));
        env->poison_bytes = (unsigned)optin / 16 * 16;
        env->poison_ctas = 4u * (unsigned)sms; /* one CTA fills an SM's shared memory; four waves reach every SM */
        CK(cu->cuModuleLoadData(&env->poison_mod, poison_ptx));
        CK(cu->cuModuleGetFunction(&env->poison_fn, env->poison_mod, "fg_test_poison_shared"));
        CK(cu->cuFuncSetAttribute(env->poison_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)env->poison_bytes));
    }
    unsigned bytes = env->poison_bytes;
    void *params[] = {&bytes};
    CK(cu->cuLaunchKernel(env->poison_fn, env->poison_ctas, 1, 1, 256, 1, 1, bytes, NULL, params, NULL));
    CK(cu->cuCtxSynchronize());
}

/* 1 when the environment sets `name` to 0 (the runtime's switches for turning a family off). */
int env_is_zero(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}

/* FLASHGEN_EMULATE_ARCH's value when the run emulates an older arch, else NULL. */
const char *emulated_arch(void) {
    const char *em = getenv("FLASHGEN_EMULATE_ARCH");
    return em && *em ? em : NULL;
}

/* The device's compute capability, times ten (90 on an H100/H200). */
int gpu_cc(const gpu_env *env) {
    /* Under FLASHGEN_EMULATE_ARCH the runtime targets that arch (its kernels compiled from PTX by the driver),
     * so the tests expect that arch's families and tiles; the runtime refuses a value it cannot emulate. */
    if (emulated_arch()) return atoi(emulated_arch());
    int major = 0, minor = 0;
    CK(env->cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, env->dev));
    CK(env->cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, env->dev));
    return major * 10 + minor;
}

/* ------------------------------------------------------------------------------------------------ */
/* Device buffers with a host image                                                                  */
/* ------------------------------------------------------------------------------------------------ */


/* Contiguous strides for shape, or padded ones (padded = 1 for 16-bit elements, 2 for 1-byte ones):
 * every stride of a 4-d view grows by a multiple of 16 bytes (rows stay 16-byte aligned), as when
 * Q/K/V are slices of a larger buffer. */
void make_strides(int ndim, const int64_t *shape, int padded, int64_t *stride) {
    stride[ndim - 1] = 1;
    static const int64_t pad4[4] = {40, 24, 16, 0}, pad3[3] = {8, 8, 0};
    for (int i = ndim - 2; i >= 0; i--)
        stride[i] = stride[i + 1] * shape[i + 1] + (padded ? padded * (ndim == 4 ? pad4[i] : pad3[i]) : 0);
}

/* Allocates b for a view of `ndim` dims (strides given, or contiguous when stride is NULL) followed by
 * `guard` guard elements, on the device and as a host image. `room` elements are added to the span for
 * tests that later widen the view. */
void dbuf_init(gpu_env *env, dbuf *b, fg_dtype dt, int ndim, const int64_t *shape, const int64_t *stride,
                      int64_t guard, int64_t room) {
    memset(b, 0, sizeof *b);
    b->view.dtype = dt;
    b->view.ndim = ndim;
    b->esize = dt == FG_DTYPE_F32 ? 4 : (dt == FG_DTYPE_E4M3 || dt == FG_DTYPE_E5M2 ? 1 : 2);
    b->count = 1;
    int64_t last = 0;
    for (int i = 0; i < ndim; i++) {
        b->view.shape[i] = shape[i];
        b->count *= shape[i];
    }
    if (stride)
        memcpy(b->view.stride, stride, (size_t)ndim * sizeof *stride);
    else
        make_strides(ndim, shape, 0, b->view.stride);
    for (int i = 0; i < ndim; i++)
        last += (shape[i] - 1) * b->view.stride[i];
    b->span = b->count > 0 ? last + 1 + room : room;
    b->guard = guard;
    size_t bytes = (size_t)(b->span + guard) * b->esize;
    b->img = malloc(bytes > 0 ? bytes : 1);
    cr_assert_not_null(b->img, "out of host memory for %zu bytes", bytes);
    CK(env->cu->cuMemAlloc(&b->dptr, bytes > 256 ? bytes : 256));
    b->view.data = (void *)(uintptr_t)b->dptr;
    b->host = b->view;
    b->host.data = b->img;
}

/* Releases b's device allocation and host image; b is zeroed and may be freed again. */
void dbuf_free(gpu_env *env, dbuf *b) {
    if (b->dptr)
        env->cu->cuMemFree(b->dptr);
    free(b->img);
    memset(b, 0, sizeof *b);
}

/* Fills the view with N(0,1) values from `seed` (padding NaN) and uploads it. */
void dbuf_upload_random(gpu_env *env, dbuf *b, uint64_t seed) {
    if (b->count != b->span)
        memset(b->img, 0xFF, (size_t)b->span * b->esize); /* all-ones is NaN in fp16, bf16, e4m3 and e5m2 */
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_fill_normal(&b->host, seed, &e), FG_OK, "%s", e.msg);
    if (b->span > 0)
        CK(env->cu->cuMemcpyHtoD(b->dptr, b->img, (size_t)b->span * b->esize));
}

/* Byte i of every guard band: varied, so a shifted or partial write cannot match by chance. */
static unsigned char guard_byte(int64_t i) {
    return (unsigned char)(0xA5u ^ (uint64_t)(i * 7));
}

/* Poisons the whole span with NaN (all-ones bytes: NaN in fp16, bf16 and fp32) and writes the guard. */
void dbuf_poison(gpu_env *env, dbuf *b) {
    if (b->span > 0)
        CK(env->cu->cuMemsetD8(b->dptr, 0xFF, (size_t)b->span * b->esize));
    size_t gbytes = (size_t)b->guard * b->esize;
    unsigned char *g = b->img + (size_t)b->span * b->esize;
    for (size_t i = 0; i < gbytes; i++)
        g[i] = guard_byte((int64_t)i);
    if (gbytes)
        CK(env->cu->cuMemcpyHtoD(b->dptr + (size_t)b->span * b->esize, g, gbytes));
}

/* Copies the span and guard band back into b's host image. */
void dbuf_download(gpu_env *env, dbuf *b) {
    size_t bytes = (size_t)(b->span + b->guard) * b->esize;
    if (bytes)
        CK(env->cu->cuMemcpyDtoH(b->img, b->dptr, bytes));
}

/* Fails unless the guard band holds its pattern. */
void check_guard(const dbuf *b, const char *name) {
    size_t gbytes = (size_t)b->guard * b->esize;
    const unsigned char *g = b->img + (size_t)b->span * b->esize;
    for (size_t i = 0; i < gbytes; i++)
        cr_assert_eq(g[i], guard_byte((int64_t)i), "%s: guard element %zu after the last element was overwritten",
                     name, i / b->esize);
}

/* Fails if any element of the span outside the view (padding of a strided output) lost its poison. */
void check_outside_view(const dbuf *b, const char *name) {
    if (b->count == b->span)
        return;
    unsigned char *in = calloc((size_t)b->span, 1);
    cr_assert_not_null(in);
    const fg_tensor *t = &b->view;
    int64_t s4[4] = {1, 1, 1, 1}, st4[4] = {0, 0, 0, 0};
    for (int i = 0; i < t->ndim; i++) {
        s4[4 - t->ndim + i] = t->shape[i];
        st4[4 - t->ndim + i] = t->stride[i];
    }
    for (int64_t a = 0; a < s4[0]; a++)
        for (int64_t c = 0; c < s4[1]; c++)
            for (int64_t h = 0; h < s4[2]; h++)
                for (int64_t x = 0; x < s4[3]; x++)
                    in[a * st4[0] + c * st4[1] + h * st4[2] + x * st4[3]] = 1;
    for (int64_t i = 0; i < b->span; i++) {
        if (in[i])
            continue;
        for (size_t k = 0; k < b->esize; k++)
            cr_assert_eq(b->img[(size_t)i * b->esize + k], 0xFF,
                         "%s: element %lld lies between the view's elements but was written", name, (long long)i);
    }
    free(in);
}

/* Fails unless the whole span is still poisoned and the guard intact: nothing was written. */
void check_untouched(const dbuf *b, const char *name) {
    for (size_t i = 0; i < (size_t)b->span * b->esize; i++)
        cr_assert_eq(b->img[i], 0xFF, "%s: element %zu was written by a call that failed", name, i / b->esize);
    check_guard(b, name);
}
