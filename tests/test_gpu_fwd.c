/* test_gpu_fwd.c: the GPU suite of the forward kernel, driven through the public API (include/flashgen.h)
 * and judged by the CPU reference (reference/reference.h) with TESTING.md's rule.
 *
 * Every GPU test starts with gpu_open(), which skips the test with "no CUDA device: <reason>" when the
 * driver or a device is missing, so CI without a GPU passes and says what it did not run. Outputs are
 * poisoned (NaN) before each launch and followed by a guard band of GUARD elements with a known byte
 * pattern; a test fails on any NaN left in the view, any changed guard byte, and any write between the
 * elements of a strided output. Inputs that are strided views carry NaN in their padding, so a kernel
 * that reads outside its view produces NaN.
 *
 * Each test runs in its own process (Criterion). The suite shares one disk cache directory so a variant
 * is compiled once per run: $FG_TEST_CACHE_DIR if set (kept), else a mkdtemp directory made before the
 * first test and removed after the last. One line per case goes to stderr: shape, errors, bound. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/logging.h>
#include <criterion/parameterized.h>
#include <ctype.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "flashgen.h"
#include "runtime/cuda_api.h"
#include "reference/reference.h"
#include "runtime/bundle.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"
#include <dirent.h>

#define GUARD 1024 /* elements of known pattern after each output */
#define CACHE_ENV "FG_TEST_CACHE_DIR"

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
        fprintf(stderr, "gpu_fwd: could not remove %s from the test cache directory\n", path);
    return 0;
}

/* Removes dir and everything below it (a directory this suite created). */
static void remove_tree(const char *dir) {
    if (dir[0])
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Makes a fresh 0700 directory under $TMPDIR (or /tmp) into buf; returns 0 or -1. */
static int make_temp_dir(char *buf, size_t n) {
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

typedef struct gpu_env {
    const fg_cuda_api *cu; /* the driver table */
    CUdevice dev;          /* device 0 */
    CUcontext pctx;        /* its primary context, retained and current while the test runs */
    fg_context *ctx;       /* the flashgen context under test */
    CUstream stream;       /* a non-blocking stream for the launches */
    char own_dir[64];      /* a cache directory this process made (no suite directory), or "" */
} gpu_env;

/* Checks a driver call made by the test itself; a failure fails the test with the call's text. */
#define CK(call)                                                                            \
    do {                                                                                    \
        CUresult ck_rc_ = (call);                                                           \
        if (ck_rc_ != CUDA_SUCCESS) {                                                       \
            fg_error ck_e_;                                                                 \
            cuda_api_fail(&ck_e_, ck_rc_, #call, __FILE__, __LINE__);                       \
            cr_assert_fail("%s", ck_e_.msg);                                                \
        }                                                                                   \
    } while (0)

/* Loads the driver, or skips the test with the reason; then makes device 0's primary context current,
 * creates the flashgen context and a stream. */
static void gpu_open(gpu_env *env) {
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
static void gpu_close(gpu_env *env) {
    if (env->stream)
        env->cu->cuStreamDestroy(env->stream);
    fg_context_destroy(env->ctx);
    CUcontext popped;
    env->cu->cuCtxPopCurrent(&popped);
    env->cu->cuDevicePrimaryCtxRelease(env->dev);
    remove_tree(env->own_dir);
}

/* 1 when the environment sets `name` to 0 (the runtime's switches for turning a family off). */
static int env_is_zero(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}

/* FLASHGEN_EMULATE_ARCH's value when the run emulates an older arch, else NULL. */
static const char *emulated_arch(void) {
    const char *em = getenv("FLASHGEN_EMULATE_ARCH");
    return em && *em ? em : NULL;
}

/* The device's compute capability, times ten (90 on an H100/H200). */
static int gpu_cc(const gpu_env *env) {
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

typedef struct dbuf {
    fg_tensor view;   /* the device view given to flashgen (data = device pointer) */
    fg_tensor host;   /* the same view over img */
    unsigned char *img;/* host image of the allocation: span + guard elements */
    CUdeviceptr dptr; /* the allocation */
    int64_t span;     /* elements from the first element of the view to one past its last */
    int64_t count;    /* elements in the view (< span when strided) */
    int64_t guard;    /* guard elements after span */
    size_t esize;     /* bytes per element */
} dbuf;

/* Contiguous strides for shape, or padded ones (padded = 1 for 16-bit elements, 2 for 1-byte ones):
 * every stride of a 4-d view grows by a multiple of 16 bytes (rows stay 16-byte aligned), as when
 * Q/K/V are slices of a larger buffer. */
static void make_strides(int ndim, const int64_t *shape, int padded, int64_t *stride) {
    stride[ndim - 1] = 1;
    static const int64_t pad4[4] = {40, 24, 16, 0}, pad3[3] = {8, 8, 0};
    for (int i = ndim - 2; i >= 0; i--)
        stride[i] = stride[i + 1] * shape[i + 1] + (padded ? padded * (ndim == 4 ? pad4[i] : pad3[i]) : 0);
}

/* Allocates b for a view of `ndim` dims (strides given, or contiguous when stride is NULL) followed by
 * `guard` guard elements, on the device and as a host image. `room` elements are added to the span for
 * tests that later widen the view. */
static void dbuf_init(gpu_env *env, dbuf *b, fg_dtype dt, int ndim, const int64_t *shape, const int64_t *stride,
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
static void dbuf_free(gpu_env *env, dbuf *b) {
    if (b->dptr)
        env->cu->cuMemFree(b->dptr);
    free(b->img);
    memset(b, 0, sizeof *b);
}

/* Fills the view with N(0,1) values from `seed` (padding NaN) and uploads it. */
static void dbuf_upload_random(gpu_env *env, dbuf *b, uint64_t seed) {
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
static void dbuf_poison(gpu_env *env, dbuf *b) {
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
static void dbuf_download(gpu_env *env, dbuf *b) {
    size_t bytes = (size_t)(b->span + b->guard) * b->esize;
    if (bytes)
        CK(env->cu->cuMemcpyDtoH(b->img, b->dptr, bytes));
}

/* Fails unless the guard band holds its pattern. */
static void check_guard(const dbuf *b, const char *name) {
    size_t gbytes = (size_t)b->guard * b->esize;
    const unsigned char *g = b->img + (size_t)b->span * b->esize;
    for (size_t i = 0; i < gbytes; i++)
        cr_assert_eq(g[i], guard_byte((int64_t)i), "%s: guard element %zu after the last element was overwritten",
                     name, i / b->esize);
}

/* Fails if any element of the span outside the view (padding of a strided output) lost its poison. */
static void check_outside_view(const dbuf *b, const char *name) {
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
static void check_untouched(const dbuf *b, const char *name) {
    for (size_t i = 0; i < (size_t)b->span * b->esize; i++)
        cr_assert_eq(b->img[i], 0xFF, "%s: element %zu was written by a call that failed", name, i / b->esize);
    check_guard(b, name);
}

/* ------------------------------------------------------------------------------------------------ */
/* One forward case                                                                                  */
/* ------------------------------------------------------------------------------------------------ */

typedef struct fwd_case {
    fg_dtype dt;   /* F16 or BF16 */
    int b;         /* batch */
    int sq, sk;    /* query and key lengths */
    int hq, hkv;   /* query and KV heads */
    int d;         /* head dim */
    int causal;    /* bottom-right causal mask */
    float scale;   /* softmax scale, 0 for the default */
    int strided;   /* Q/K/V/O/LSE as padded slices of larger buffers */
    int no_lse;    /* 1: do not request the LSE */
    int tiles[4];  /* block_m, block_n, warps, stages of an explicit variant; all 0: dispatch chooses */
    int out_f16;   /* FP8 only: O in fp16 (else bf16) */
    int descale;   /* FP8 only: 0 none, 1 one factor per tensor, 2 one per (batch, kv head) */
    float amp;     /* FP8 only: inputs are N(0,1) * amp, rounded (saturating) to the format; 0 means 1 */
    float vmean;   /* FP8 only: added to V's entries before rounding (a V whose columns do not average to 0) */
} fwd_case;

typedef struct fwd_run {
    fwd_case c;       /* the case */
    dbuf q, k, v;     /* inputs */
    dbuf o, lse;      /* outputs (lse unused when c.no_lse) */
    dbuf dq, dk, dv;  /* FP8 descales (fp32), when c.descale */
    fg_fwd_args args; /* what fg_attention_fwd receives */
    int sum_rounded;  /* set by run_launch: the kernel that ran divides O by the sum of the e4m3-rounded P
                         (sm_90a FP8 with spec_fp8_pv_sum), which the reference then models */
} fwd_run;


/* The dtype's short name for log lines. */
static const char *dt_name(fg_dtype dt) {
    return dt == FG_DTYPE_F16 ? "f16" : dt == FG_DTYPE_BF16 ? "bf16" : dt == FG_DTYPE_E4M3 ? "e4m3"
                                                                      : dt == FG_DTYPE_E5M2 ? "e5m2" : "?";
}

/* Writes the case's one-line description into buf (n bytes). */
static void case_name(const fwd_case *c, char *buf, size_t n) {
    int len = snprintf(buf, n, "%s b=%d sq=%d sk=%d hq=%d hkv=%d d=%d causal=%d scale=%g%s%s", dt_name(c->dt), c->b,
                       c->sq, c->sk, c->hq, c->hkv, c->d, c->causal, (double)c->scale, c->strided ? " strided" : "",
                       c->no_lse ? " no-lse" : "");
    if (c->tiles[0] && len > 0 && (size_t)len < n)
        len += snprintf(buf + len, n - (size_t)len, " tiles %dx%d w%d s%d", c->tiles[0], c->tiles[1], c->tiles[2],
                        c->tiles[3]);
    if (dtype_is_fp8(c->dt) && len > 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, " out=%s descale=%s amp=%g vmean=%g", c->out_f16 ? "f16" : "bf16",
                 c->descale == 0 ? "none" : c->descale == 1 ? "tensor" : "head", (double)(c->amp ? c->amp : 1.f),
                 (double)c->vmean);
}

/* Allocates and uploads a case's tensors and fills in the arguments. */
static void run_setup(gpu_env *env, fwd_run *r, const fwd_case *c) {
    memset(r, 0, sizeof *r);
    r->c = *c;
    int64_t qs[4] = {c->b, c->sq, c->hq, c->d}, ks[4] = {c->b, c->sk, c->hkv, c->d}, ls[3] = {c->b, c->hq, c->sq};
    int64_t st[4];
    const fg_dtype odt = dtype_is_fp8(c->dt) ? (c->out_f16 ? FG_DTYPE_F16 : FG_DTYPE_BF16) : c->dt;
    const int pad = c->strided ? (dtype_is_fp8(c->dt) ? 2 : 1) : 0; /* in elements: 16-byte multiples either way */
    make_strides(4, qs, pad, st);
    dbuf_init(env, &r->q, c->dt, 4, qs, st, 0, 0);
    int64_t ost[4];
    make_strides(4, qs, c->strided, ost);
    dbuf_init(env, &r->o, odt, 4, qs, ost, GUARD, 0);
    make_strides(4, ks, pad, st);
    dbuf_init(env, &r->k, c->dt, 4, ks, st, 0, 0);
    if (dtype_is_fp8(c->dt)) {
        /* V key-major, as FP8 takes it: [b, hkv, d, skp] viewed as [b, sk, hkv, d]. The rows are padded
         * past sk (to a multiple of 16, plus 16 when strided) and the padding holds NaN, which the kernel
         * must never let reach a probability. */
        int64_t skp = (c->sk + 15) / 16 * 16 + (c->strided ? 16 : 0);
        int64_t vst[4] = {c->hkv * c->d * skp, 1, c->d * skp, skp};
        dbuf_init(env, &r->v, c->dt, 4, ks, vst, 0, 0);
    } else {
        dbuf_init(env, &r->v, c->dt, 4, ks, st, 0, 0);
    }
    dbuf_upload_random(env, &r->q, 0x51ull + (uint64_t)c->d);
    dbuf_upload_random(env, &r->k, 0x52ull + (uint64_t)c->sk);
    dbuf_upload_random(env, &r->v, 0x53ull + (uint64_t)c->sq);
    if (dtype_is_fp8(c->dt) && ((c->amp != 0.f && c->amp != 1.f) || c->vmean != 0.f)) {
        /* Scaled inputs, saturated to the format's largest finite value (the saturation cases), and V
         * shifted by vmean. */
        const float amp = c->amp != 0.f ? c->amp : 1.f;
        dbuf *bs[3] = {&r->q, &r->k, &r->v};
        for (int i = 0; i < 3; i++) {
            dbuf *b = bs[i];
            int64_t sh[4] = {b->view.shape[0], b->view.shape[1], b->view.shape[2], b->view.shape[3]};
            for (int64_t x0 = 0; x0 < sh[0]; x0++)
                for (int64_t x1 = 0; x1 < sh[1]; x1++)
                    for (int64_t x2 = 0; x2 < sh[2]; x2++)
                        for (int64_t x3 = 0; x3 < sh[3]; x3++) {
                            unsigned char *e = b->img + x0 * b->view.stride[0] + x1 * b->view.stride[1] +
                                               x2 * b->view.stride[2] + x3 * b->view.stride[3];
                            float f = (c->dt == FG_DTYPE_E4M3 ? ref_e4m3_to_float(*e) : ref_e5m2_to_float(*e)) * amp +
                                      (i == 2 ? c->vmean : 0.f);
                            *e = c->dt == FG_DTYPE_E4M3 ? ref_float_to_e4m3(f, 1) : ref_float_to_e5m2(f, 1);
                        }
            CK(env->cu->cuMemcpyHtoD(b->dptr, b->img, (size_t)b->span * b->esize));
        }
    }
    if (dtype_is_fp8(c->dt) && c->descale) {
        /* Factors around 1 (0.5 .. 1.5), different per tensor and per (batch, kv head). */
        int64_t dsh[2] = {c->descale == 1 ? 1 : c->b, c->hkv};
        dbuf *ds[3] = {&r->dq, &r->dk, &r->dv};
        for (int i = 0; i < 3; i++) {
            if (c->descale == 1) dbuf_init(env, ds[i], FG_DTYPE_F32, 1, dsh, NULL, 0, 0);
            else dbuf_init(env, ds[i], FG_DTYPE_F32, 2, dsh, NULL, 0, 0);
            float *f = (float *)ds[i]->img;
            /* With scaled inputs the factors undo the scale, as a quantizer's amax / max_finite would:
             * the stored values saturate, the scores stay those of N(0,1) inputs. Scores of 1e10 (e5m2
             * at its maximum, undescaled) are beyond fp32's log2-domain softmax in any kernel. */
            const float undo = c->amp != 0.f ? 1.f / c->amp : 1.f;
            for (int64_t j = 0; j < ds[i]->span; j++) f[j] = (0.5f + (float)((j * 7 + i * 3) % 11) / 10.f) * undo;
            CK(env->cu->cuMemcpyHtoD(ds[i]->dptr, ds[i]->img, (size_t)ds[i]->span * 4));
        }
        r->args.q_descale = r->dq.view;
        r->args.k_descale = r->dk.view;
        r->args.v_descale = r->dv.view;
    }
    if (!c->no_lse) {
        make_strides(3, ls, c->strided, st);
        dbuf_init(env, &r->lse, FG_DTYPE_F32, 3, ls, st, GUARD, 0);
    }
    r->args.q = r->q.view;
    r->args.k = r->k.view;
    r->args.v = r->v.view;
    r->args.o = r->o.view;
    if (!c->no_lse)
        r->args.lse = r->lse.view;
    r->args.softmax_scale = c->scale;
    r->args.causal = c->causal;
}

/* Releases every buffer of r. */
static void run_free(gpu_env *env, fwd_run *r) {
    dbuf_free(env, &r->dq);
    dbuf_free(env, &r->dk);
    dbuf_free(env, &r->dv);
    dbuf_free(env, &r->q);
    dbuf_free(env, &r->k);
    dbuf_free(env, &r->v);
    dbuf_free(env, &r->o);
    dbuf_free(env, &r->lse);
}

/* Whether a case's explicit tiles are the sm_90a family's (a producer warpgroup plus one consumer warpgroup
 * per 64 rows); other explicit tiles run the mma.sync family. */
static int wgmma_tiles(const fwd_case *c) {
    return c->tiles[0] && c->tiles[0] % 64 == 0 && c->tiles[2] == 4 * (c->tiles[0] / 64 + 1);
}

/* The explicit variant of a case for compute capability cc (sm_90a for the wgmma family's tiles on 9.0). */
static fg_spec explicit_spec(const fwd_case *c, int cc) {
    fg_spec s;
    fg_error e;
    fg_error_clear(&e);
    char text[FG_SPEC_NAME_MAX];
    snprintf(text, sizeof text, "kind=fwd arch=sm_%d%s dtype=%s head_dim=%d causal=%d block_m=%d block_n=%d "
             "warps=%d stages=%d%s", cc, cc == 90 && wgmma_tiles(c) ? "a" : "", dtype_name(c->dt), c->d, c->causal,
             c->tiles[0], c->tiles[1], c->tiles[2], c->tiles[3],
             dtype_is_fp8(c->dt) ? (c->out_f16 ? " out=fp16" : " out=bf16") : "");
    cr_assert_eq(spec_parse(text, &s, &e), FG_OK, "%s: %s", text, e.msg);
    return s;
}

/* A case's explicit sm_90a tiles must be ones the family takes: checked before any GPU is looked for, so
 * that a tile the rules came to refuse fails here (and in CI) instead of skipping on the GPU. */
static void assert_sm90a_tiles_valid(const fwd_case *c) {
    if (!wgmma_tiles(c)) return;
    fg_spec s = explicit_spec(c, 90);
    fg_error e;
    fg_error_clear(&e);
    char name[200];
    case_name(c, name, sizeof name);
    cr_assert_eq(spec_validate(&s, &e), FG_OK, "%s: the sm_90a family refuses these tiles: %s", name, e.msg);
}

/* Poisons the outputs, calls fg_attention_fwd on the stream, waits, and downloads the outputs. */
static void run_launch(gpu_env *env, fwd_run *r) {
    dbuf_poison(env, &r->o);
    if (!r->c.no_lse)
        dbuf_poison(env, &r->lse);
    CK(env->cu->cuCtxSynchronize()); /* the poison went through the legacy stream */
    char name[200];
    case_name(&r->c, name, sizeof name);
    if (r->c.tiles[0]) { /* an explicit variant, through the runtime's entry for the tuner */
        fg_error e;
        fg_error_clear(&e);
        /* Hopper's two families: the sm_90a tiles (wgmma_tiles) run as sm_90a, the mma.sync ones as sm_90 */
        const int cc = gpu_cc(env);
        if (wgmma_tiles(&r->c) && cc != 90)
            cr_skip_test("%s: tiles of the sm_90a family, which this GPU (sm_%d) does not run", name, cc);
        if (wgmma_tiles(&r->c) &&
            (env_is_zero("FLASHGEN_WGMMA") || (dtype_is_fp8(r->c.dt) && env_is_zero("FLASHGEN_WGMMA_FP8"))))
            cr_skip_test("%s: tiles of the sm_90a family, which FLASHGEN_WGMMA=0 / FLASHGEN_WGMMA_FP8=0 turn off", name);
        fg_spec s = explicit_spec(&r->c, cc);
        r->sum_rounded = spec_fp8_sum_rounded(&s);
        fg_status st = rt_fwd_with_spec(env->ctx, &s, &r->args, (void *)env->stream, &e);
        /* mma.sync tiles may not fit a smaller GPU's shared memory (skipped, as bwd_launch does); any other
         * refusal, and any of sm_90a tiles (one kind of part), is the test's error (assert_sm90a_tiles_valid
         * catches the latter without a GPU) */
        if (st == FG_ERR_UNSUPPORTED && !spec_is_wgmma(&s) && strstr(e.msg, "shared memory"))
            cr_skip_test("%s: %s", name, e.msg);
        cr_assert_eq(st, FG_OK, "%s: rt_fwd_with_spec returned %s: %s", name, fg_status_string(st), e.msg);
    } else {
        fg_spec s; /* the variant dispatch takes, for what the reference must model */
        fg_error e;
        fg_error_clear(&e);
        cr_assert_eq(rt_fwd_spec(env->ctx, &r->args, &s, &e), FG_OK, "%s: %s", name, e.msg);
        r->sum_rounded = spec_fp8_sum_rounded(&s);
        fg_status st = fg_attention_fwd(env->ctx, &r->args, (void *)env->stream);
        cr_assert_eq(st, FG_OK, "%s: fg_attention_fwd returned %s: %s", name, fg_status_string(st),
                     fg_last_error(env->ctx));
    }
    CK(env->cu->cuStreamSynchronize(env->stream));
    dbuf_download(env, &r->o);
    if (!r->c.no_lse)
        dbuf_download(env, &r->lse);
}

/* Judges the downloaded outputs: guard bands, padding, then every element against the reference. */
static void run_verify(fwd_run *r) {
    char name[200], line[768];
    case_name(&r->c, name, sizeof name);
    check_guard(&r->o, "O");
    check_outside_view(&r->o, "O");
    if (!r->c.no_lse) {
        check_guard(&r->lse, "LSE");
        check_outside_view(&r->lse, "LSE");
    }
    ref_problem p = {.q = r->q.host, .k = r->k.host, .v = r->v.host, .softmax_scale = r->c.scale,
                     .causal = r->c.causal, .q_descale = r->dq.host, .k_descale = r->dk.host,
                     .v_descale = r->dv.host, .out_dtype = r->o.view.dtype, .fp8_sum_rounded = r->sum_rounded};
    ref_report rep;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_check_fwd(&p, &r->o.host, r->c.no_lse ? NULL : &r->lse.host, &rep, &e), FG_OK, "%s: %s", name,
                 e.msg);
    ref_report_format(&rep, line, sizeof line);
    fprintf(stderr, "gpu_fwd: %s: %s\n", name, line);
    cr_assert(rep.pass, "%s: %s", name, line);
}

/* The whole life of one case. */
/* Skips the calling test (closing env) on a GPU without FP8 mma.sync (below sm_89, or sm_87). */
static void skip_without_fp8(gpu_env *env) {
    const int cc = gpu_cc(env);
    if (cc < 89 || cc == 87) {
        gpu_close(env);
        cr_skip_test("FP8 needs sm_89 or newer; this GPU is sm_%d", cc);
    }
}

static void run_case(const fwd_case *c) {
    assert_sm90a_tiles_valid(c);
    gpu_env env;
    gpu_open(&env);
    if (dtype_is_fp8(c->dt)) skip_without_fp8(&env);
    fwd_run r;
    run_setup(&env, &r, c);
    run_launch(&env, &r);
    run_verify(&r);
    run_free(&env, &r);
    gpu_close(&env);
}

/* ------------------------------------------------------------------------------------------------ */
/* The sweeps: each dimension covered with the others at modest values                               */
/* ------------------------------------------------------------------------------------------------ */

static const int head_dims[] = {32, 40, 64, 80, 96, 128, 160, 192, 224, 256};
static const int seqlens[][2] = {{1, 1},       {1, 239},     {239, 1},     {113, 203},
                                 {128, 128},   {200, 200},   {799, 3},     {1023, 1024},
                                 {1024, 1023}, {1025, 1025}, {2048, 2048}, {4224, 4224}};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* A contiguous case with the default scale and the LSE requested. */
static fwd_case mk(fg_dtype dt, int b, int sq, int sk, int hq, int hkv, int d, int causal) {
    fwd_case c = {dt, b, sq, sk, hq, hkv, d, causal, 0.0f, 0, 0, {0, 0, 0, 0}, 0, 0, 0.0f, 0.0f};
    return c;
}

/* Tiles the tile policy does not choose on every GPU, which the tuner may: block_n that are multiples
 * of 16 but not powers of two, 64-row and 2-stage tiles, 4 stages. Each runs on query and key lengths
 * that are multiples of none of its tile sizes, causal with sq < sk and sq > sk (fully masked rows). */
static const struct { int d, tiles[4]; } tile_variants[] = {
    {64, {64, 96, 4, 3}},  {64, {128, 112, 4, 2}}, {64, {64, 48, 4, 4}},  {96, {128, 80, 8, 2}},
    {128, {128, 48, 4, 3}}, {128, {64, 96, 4, 2}}, {128, {128, 80, 8, 2}}, {192, {128, 112, 8, 2}},
    {256, {128, 80, 8, 2}}, {256, {128, 48, 8, 3}},
    /* one stage (K and V in one buffer each, loading in turn): whole blocks and, at d 128 128 x 64 on 4
     * warps, two 32-key sub-blocks */
    {256, {64, 64, 4, 1}},  {128, {128, 64, 4, 1}}, {64, {64, 48, 4, 1}},
    /* the sm_90a (wgmma) family: 1, 2 and 3 consumer warpgroups, 64-byte swizzled tiles (head_dim 32,
     * 96, 160: not multiples of 64), block_n up to 176, 3 stages; skipped where sm_90a cannot run */
    {32, {128, 128, 12, 2}}, {64, {64, 96, 8, 3}},    {96, {128, 112, 12, 2}}, {128, {192, 64, 16, 2}},
    {128, {128, 176, 12, 2}}, {160, {128, 64, 12, 3}}, {256, {64, 64, 8, 2}},
};
ParameterizedTestParameters(fwd, tiles) {
    static fwd_case cases[3 * NELEM(tile_variants)];
    for (size_t i = 0; i < NELEM(tile_variants); i++) {
        int d = tile_variants[i].d;
        cases[3 * i] = mk(FG_DTYPE_BF16, 2, 211, 333, 2, 1, d, 0);
        cases[3 * i + 1] = mk(FG_DTYPE_F16, 1, 211, 333, 2, 2, d, 1);
        cases[3 * i + 2] = mk(FG_DTYPE_BF16, 1, 333, 211, 2, 2, d, 1);
        for (int j = 0; j < 3; j++)
            memcpy(cases[3 * i + j].tiles, tile_variants[i].tiles, sizeof cases[0].tiles);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, tiles, .timeout = 300) {
    run_case(c);
}

/* The sm_90a FP8 tiles wider than one V^T swizzle row (V^T stored in chunks of 128, 64 or 32 keys,
 * spec_fp8_vt_bytes): d 64 with block_n 160 (5 chunks of 32), 192 (3 of 64), 224 (7 of 32), and d 128 with
 * block_n 96 (3 of 32; since the two-level accumulation d 128 takes nothing wider than 128); lengths that
 * are multiples of none, GQA, causal with sq > sk. Skipped where sm_90a cannot run. */
ParameterizedTestParameters(fwd, fp8_wide_tiles) {
    static fwd_case cases[8];
    static const int t[4][4] = {{128, 160, 12, 2}, {128, 192, 12, 2}, {128, 224, 12, 2}, {128, 96, 12, 3}};
    for (int i = 0; i < 4; i++) {
        const int d = i < 3 ? 64 : 128;
        cases[2 * i] = mk(i == 2 ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3, 2, 211, 533, 4, 2, d, 0);
        cases[2 * i + 1] = mk(FG_DTYPE_E4M3, 1, 533, 211, 2, 2, d, 1);
        memcpy(cases[2 * i].tiles, t[i], sizeof cases[0].tiles);
        memcpy(cases[2 * i + 1].tiles, t[i], sizeof cases[0].tiles);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, fp8_wide_tiles, .timeout = 300) {
    run_case(c);
}

/* mma.sync tiles whose S does not fit beside O run their key blocks in sub-blocks (spec_fwd_sub_n): 128 x 64
 * and 128 x 96 on 4 warps at d 128 (32- and 48-key steps), 128 x 128 at d 64 (64-key steps), and FP8 128 x
 * 128 at d 128 (32-key steps over the permuted key order and V^T chunks), and FP8 128 x 64 in one stage. Lengths that are multiples of
 * neither size, causal with sq < sk and sq > sk, so masks fall inside a sub-block and whole sub-blocks
 * are masked. */
ParameterizedTestParameters(fwd, key_sub_blocks) {
    static fwd_case cases[10];
    static const int t[5][4] = {{128, 64, 4, 2}, {128, 96, 4, 2}, {128, 128, 4, 2}, {128, 128, 4, 2}, {128, 64, 4, 1}};
    cases[0] = mk(FG_DTYPE_BF16, 2, 211, 333, 2, 1, 128, 0);
    cases[1] = mk(FG_DTYPE_F16, 1, 333, 211, 2, 2, 128, 1);
    cases[2] = mk(FG_DTYPE_BF16, 1, 211, 333, 2, 2, 128, 1);
    cases[3] = mk(FG_DTYPE_F16, 2, 300, 300, 2, 2, 128, 0);
    cases[4] = mk(FG_DTYPE_BF16, 1, 333, 211, 2, 2, 64, 1);
    cases[5] = mk(FG_DTYPE_F16, 2, 211, 333, 2, 1, 64, 0);
    cases[6] = mk(FG_DTYPE_E4M3, 1, 211, 333, 2, 2, 128, 0);
    cases[7] = mk(FG_DTYPE_E4M3, 1, 333, 211, 2, 2, 128, 1);
    cases[8] = mk(FG_DTYPE_E4M3, 2, 211, 333, 2, 1, 128, 0); /* one stage: V^T and K loading in turn */
    cases[9] = mk(FG_DTYPE_E4M3, 1, 333, 211, 2, 2, 128, 1);
    for (int i = 0; i < 10; i++) /* two cases a tile */
        memcpy(cases[i].tiles, t[i / 2], sizeof cases[0].tiles);
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, key_sub_blocks, .timeout = 300) {
    run_case(c);
}

/* NaN inputs propagate exactly where the math says and nowhere else: a NaN in Q reaches only its query
 * row (O and LSE NaN), a NaN in K only the rows that see that key (not rows the causal mask hides it
 * from), and every other element is as without the NaN. Judged element by element against the fp64
 * reference computed on the same inputs: NaN where it is NaN, else within the TESTING.md bound. FP8
 * (e4m3, whose NaN is 0x7F) and bf16, causal and not. */
static void nan_case(fg_dtype dt, int causal) {
    fwd_case c = mk(dt, 1, 64, 80, 2, 2, 64, causal);
    gpu_env env;
    gpu_open(&env);
    if (dtype_is_fp8(dt)) skip_without_fp8(&env);
    fwd_run r;
    run_setup(&env, &r, &c);
    /* Q[0, row 5, head 0, dim 3], K[0, key 40, kv head 1, dim 7] and K[0, key 63, kv head 0, dim 11] become
     * NaN (key 63: the last column of a 64-key block; session 19 also ran this test with 2^x of every
     * eighth n8 column group by a polynomial, bench/results/2026-11-30-h200-session19/). */
    size_t es = r.q.esize;
    unsigned char *nan_at[3] = {r.q.img + (size_t)(5 * r.q.view.stride[1] + 3) * es,
                                r.k.img + (size_t)(40 * r.k.view.stride[1] + 1 * r.k.view.stride[2] + 7) * es,
                                r.k.img + (size_t)(63 * r.k.view.stride[1] + 11) * es};
    for (int i = 0; i < 3; i++) {
        if (es == 1) {
            nan_at[i][0] = 0x7F;
        } else {
            nan_at[i][0] = 0xC0; /* 0x7FC0: a quiet NaN in bf16 (little-endian) */
            nan_at[i][1] = 0x7F;
        }
    }
    CK(env.cu->cuMemcpyHtoD(r.q.dptr, r.q.img, (size_t)r.q.span * es));
    CK(env.cu->cuMemcpyHtoD(r.k.dptr, r.k.img, (size_t)r.k.span * es));
    run_launch(&env, &r);
    ref_problem p = {.q = r.q.host, .k = r.k.host, .v = r.v.host, .causal = causal, .out_dtype = r.o.view.dtype,
                     .fp8_sum_rounded = r.sum_rounded};
    size_t n = (size_t)(1 * 64 * 2 * 64);
    double *ref = malloc(n * sizeof *ref), *low = malloc(n * sizeof *low), *lse = malloc(2 * 64 * sizeof *lse);
    cr_assert(ref && low && lse);
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_fwd(&p, REF_32, ref, lse, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(ref_attention_fwd(&p, REF_LOWP, low, NULL, &e), FG_OK, "%s", e.msg);
    double lowp_err = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(ref[i]) && fabs(low[i] - ref[i]) > lowp_err) lowp_err = fabs(low[i] - ref[i]);
    double bound = 2 * lowp_err + 1e-5;
    int nan_rows = 0;
    for (int s = 0; s < 64; s++)
        for (int h = 0; h < 2; h++) {
            int row_nan = isnan(lse[h * 64 + s]);
            float got_lse = ((float *)r.lse.img)[h * r.lse.view.stride[1] + s * r.lse.view.stride[2]];
            cr_assert_eq(isnan(got_lse) != 0, row_nan, "row %d head %d: LSE %g, reference %g", s, h, (double)got_lse,
                         lse[h * 64 + s]);
            nan_rows += row_nan;
            for (int d = 0; d < 64; d++) {
                size_t i = (size_t)((s * 2 + h) * 64 + d);
                uint16_t bits;
                memcpy(&bits, r.o.img + (size_t)(s * r.o.view.stride[1] + h * r.o.view.stride[2] + d) * 2, 2);
                double got = ref_to_float(r.o.view.dtype, bits);
                if (isnan(ref[i]))
                    cr_assert(isnan(got), "O[%d, %d, %d] = %g where the reference is NaN", s, h, d, got);
                else
                    cr_assert(fabs(got - ref[i]) <= bound, "O[%d, %d, %d] = %g, reference %g, bound %g", s, h, d, got,
                              ref[i], bound);
            }
        }
    /* Head 0: row 5 and the rows that see key 63, all of them or (causal, bottom-right: row i sees keys up to
     * i + 16) rows >= 47; head 1: the rows that see key 40, all or rows >= 24. */
    cr_assert_eq(nan_rows, causal ? 1 + (64 - 47) + (64 - 24) : 64 + 64, "%d rows NaN", nan_rows);
    free(ref);
    free(low);
    free(lse);
    run_free(&env, &r);
    gpu_close(&env);
}
Test(fwd, nan_inputs_e4m3, .timeout = 120) { nan_case(FG_DTYPE_E4M3, 0); }
Test(fwd, nan_inputs_e4m3_causal, .timeout = 120) { nan_case(FG_DTYPE_E4M3, 1); }
Test(fwd, nan_inputs_bf16_causal, .timeout = 120) { nan_case(FG_DTYPE_BF16, 1); }

/* FP8 (e4m3, e5m2; sm_89 and newer): every head dim FP8 takes, the sequence-length pairs, GQA, both
 * output types, descales per tensor and per (batch, kv head), strided Q/K/O and padded V^T rows holding
 * NaN, and saturation (inputs scaled by 400 (e4m3) / 50000 (e5m2) and saturated, so about a quarter of them sit
 * at the format's largest finite value, with descales that undo the scale). The reference rounds P to e4m3 as the kernel does (reference.h). Skipped with the
 * reason on a GPU without FP8 mma. */
static fwd_case mk8(fg_dtype dt, int b, int sq, int sk, int hq, int hkv, int d, int causal, int descale) {
    fwd_case c = mk(dt, b, sq, sk, hq, hkv, d, causal);
    c.descale = descale;
    return c;
}
/* The FP8 case set; returns how many. */
static int fp8_cases(fwd_case *cases) {
    int n = 0;
    static const int dims[] = {32, 64, 96, 128, 160, 192, 256};
    for (size_t i = 0; i < NELEM(dims); i++) {
        cases[n++] = mk8(FG_DTYPE_E4M3, 2, 113, 203, 2, 2, dims[i], 0, 1);
        cases[n++] = mk8(FG_DTYPE_E5M2, 1, 203, 113, 2, 1, dims[i], 1, 2);
    }
    static const int sl[][2] = {{1, 1}, {1, 239}, {239, 1}, {128, 128}, {799, 3}, {1025, 1025}, {2048, 2048}};
    for (size_t i = 0; i < NELEM(sl); i++) {
        int big = (int64_t)sl[i][0] * sl[i][1] > 1100 * 1100;
        cases[n++] = mk8(FG_DTYPE_E4M3, big ? 1 : 2, sl[i][0], sl[i][1], big ? 1 : 2, 1, 128, 0, 2);
        cases[n++] = mk8(FG_DTYPE_E4M3, big ? 1 : 2, sl[i][0], sl[i][1], big ? 1 : 2, big ? 1 : 2, 64, 1, 1);
    }
    cases[n] = mk8(FG_DTYPE_E4M3, 2, 300, 257, 8, 2, 128, 1, 2); /* GQA 4, fp16 out */
    cases[n++].out_f16 = 1;
    cases[n] = mk8(FG_DTYPE_E5M2, 1, 300, 257, 4, 1, 64, 0, 0); /* MQA, no descales, strided */
    cases[n++].strided = 1;
    cases[n] = mk8(FG_DTYPE_E4M3, 2, 129, 77, 2, 2, 256, 0, 1); /* strided, fp16 out */
    cases[n].strided = 1;
    cases[n++].out_f16 = 1;
    cases[n] = mk8(FG_DTYPE_E4M3, 1, 200, 300, 2, 2, 128, 0, 1); /* saturation */
    cases[n++].amp = 400.f;
    cases[n] = mk8(FG_DTYPE_E5M2, 1, 200, 300, 2, 2, 64, 1, 1);
    cases[n++].amp = 50000.f;
    return n;
}
ParameterizedTestParameters(fwd, fp8) {
    static fwd_case cases[64];
    return cr_make_param_array(fwd_case, cases, (size_t)fp8_cases(cases));
}
/* On Hopper (unless FLASHGEN_WGMMA=0 or FLASHGEN_WGMMA_FP8=0) the head dims that are multiples of 64
 * must run on the sm_90a family (QGMMA), not fall back to mma.sync unseen; the others, and every case
 * under FLASHGEN_WGMMA=0 (bench/gpu_check.sh runs the suite so too), run the mma.sync family. */
ParameterizedTest(fwd_case *c, fwd, fp8, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    skip_without_fp8(&env);
    fwd_run r;
    run_setup(&env, &r, c);
    const int cc = gpu_cc(&env);
    int wgmma = !env_is_zero("FLASHGEN_WGMMA") && !env_is_zero("FLASHGEN_WGMMA_FP8");
    char why[2048];
    cr_assert_eq(fg_explain(env.ctx, &r.args, why, sizeof why), FG_OK, "%s", fg_last_error(env.ctx));
    int on_sm90a = strstr(why, "arch=sm_90a,") != NULL;
    int want = cc == 90 && wgmma && c->d % 64 == 0;
    cr_assert_eq(on_sm90a, want, "FP8 d %d should run the %s family: %s", c->d, want ? "sm_90a" : "mma.sync", why);
    run_launch(&env, &r);
    run_verify(&r);
    run_free(&env, &r);
    gpu_close(&env);
}

/* FP8 over long key ranges, with V's columns averaging 0 and 1: Hopper's FP8 tensor cores add into their
 * accumulator with about 14 bits kept, so a P.V product accumulated over every key block in them loses
 * the low bits of each block's contribution, most where the terms do not cancel (V's mean, the row sums).
 * The sm_90a kernel adds the product into an fp32 level of O, every 128-256 keys in registers up to
 * head_dim 128 (forward_wgmma.cuh FG_O_FLUSH), every 512 keys at most in shared memory above and with three
 * consumer warpgroups (FG_O_FLUSH_SMEM; 1024 keys failed 5 of these cases' bounds, H200 session 20). */
ParameterizedTestParameters(fwd, fp8_long_keys) {
    static fwd_case cases[10];
    cases[0] = mk8(FG_DTYPE_E4M3, 1, 130, 16384, 2, 1, 64, 1, 1);
    cases[1] = mk8(FG_DTYPE_E4M3, 1, 200, 16384, 2, 2, 128, 0, 2);
    cases[2] = mk8(FG_DTYPE_E4M3, 1, 200, 16384, 2, 2, 128, 0, 1);
    cases[2].no_lse = 1;
    cases[3] = mk8(FG_DTYPE_E4M3, 1, 150, 16000, 2, 2, 128, 1, 1);
    cases[3].tiles[0] = 128, cases[3].tiles[1] = 96, cases[3].tiles[2] = 12, cases[3].tiles[3] = 2;
    cases[4] = mk8(FG_DTYPE_E4M3, 1, 130, 16384, 2, 2, 256, 0, 1);
    cases[5] = mk8(FG_DTYPE_E4M3, 1, 130, 32768, 1, 1, 64, 0, 1);
    cases[5].no_lse = 1;
    cases[6] = mk8(FG_DTYPE_E5M2, 1, 130, 16384, 2, 1, 128, 1, 1);
    for (int i = 0; i < 7; i++) cases[i].vmean = 1.f;
    cases[7] = mk8(FG_DTYPE_E4M3, 1, 130, 16384, 2, 2, 256, 1, 1); /* V of mean 0 */
    /* O's fp32 level in shared memory with one consumer warpgroup (d 192's policy 64 x 128) and with three
     * (d 64 192 x 128) */
    cases[8] = mk8(FG_DTYPE_E4M3, 1, 130, 16384, 2, 2, 192, 0, 1);
    cases[9] = mk8(FG_DTYPE_E4M3, 1, 200, 16384, 2, 2, 64, 1, 1);
    cases[9].tiles[0] = 192, cases[9].tiles[1] = 128, cases[9].tiles[2] = 16, cases[9].tiles[3] = 2;
    cases[8].vmean = cases[9].vmean = 1.f;
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, fp8_long_keys, .timeout = 300) {
    run_case(c); /* (run_case checks explicit sm_90a tiles first; run_launch skips them off sm_90) */
}

/* FP8 with and without the LSE: on sm_90a at head_dim 64/128 these are two instances of the kernel's tile
 * loop (forward_wgmma.cuh FG_PV_SUM: the fp32 row sums only for the LSE), which must give the same O, bit for
 * bit, and each pass the reference. Default tiles (d 64 causal, d 128 causal with sq > sk, d 128 e5m2 GQA)
 * and explicit ones: 128 x 96 and 128 x 64 (V^T chunks of 32 and 64 keys), one consumer warpgroup with
 * 3 stages, three with 4; lengths that are multiples of no tile; 12k-16k keys. Runs only where the sm_90a family does
 * (elsewhere the FP8 kernel has one tile loop, and the other FP8 tests cover it). */
ParameterizedTestParameters(fwd, fp8_lse_or_not) {
    static fwd_case cases[10];
    static const int t[4][4] = {{128, 96, 12, 2}, {128, 64, 12, 3}, {64, 128, 8, 3}, {192, 64, 16, 4}};
    cases[0] = mk8(FG_DTYPE_E4M3, 2, 300, 517, 4, 2, 64, 1, 1);
    cases[1] = mk8(FG_DTYPE_E4M3, 1, 517, 300, 2, 2, 128, 1, 2);
    cases[2] = mk8(FG_DTYPE_E5M2, 2, 300, 517, 4, 1, 128, 0, 1);
    cases[3] = mk8(FG_DTYPE_E5M2, 1, 333, 611, 2, 2, 128, 0, 1);
    cases[4] = mk8(FG_DTYPE_E4M3, 1, 611, 333, 2, 1, 128, 1, 2);
    cases[5] = mk8(FG_DTYPE_E4M3, 2, 333, 611, 2, 2, 128, 1, 1);
    cases[6] = mk8(FG_DTYPE_E4M3, 1, 611, 333, 4, 2, 64, 1, 2);
    for (int i = 0; i < 4; i++) memcpy(cases[3 + i].tiles, t[i], sizeof cases[0].tiles);
    /* Long key ranges: the P.V wgmma's row sums once accumulated over all of them in the tensor cores, whose
     * FP8 accumulation keeps about 14 bits; at 8k keys l was ~14% low (fixed 2026-11-30). */
    cases[7] = mk8(FG_DTYPE_E4M3, 1, 200, 16384, 2, 1, 128, 0, 2);
    cases[8] = mk8(FG_DTYPE_E4M3, 1, 130, 12000, 2, 2, 64, 1, 1);
    cases[9] = mk8(FG_DTYPE_E4M3, 1, 150, 16000, 2, 2, 128, 1, 1);
    memcpy(cases[9].tiles, t[0], sizeof cases[0].tiles);
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, fp8_lse_or_not, .timeout = 300) {
    assert_sm90a_tiles_valid(c);
    gpu_env env;
    gpu_open(&env);
    skip_without_fp8(&env);
    const int cc = gpu_cc(&env);
    if (cc != 90 || env_is_zero("FLASHGEN_WGMMA") || env_is_zero("FLASHGEN_WGMMA_FP8")) {
        gpu_close(&env);
        cr_skip_test("the FP8 kernel has two tile loops only on the sm_90a family (this GPU: sm_%d%s)", cc,
                     cc == 90 ? ", with it turned off" : "");
    }
    fwd_run r;
    run_setup(&env, &r, c); /* with the LSE */
    char name[200], why[2048];
    case_name(&r.c, name, sizeof name);
    if (!c->tiles[0]) { /* explicit tiles of this shape run as sm_90a on an sm_90 device (run_launch) */
        cr_assert_eq(fg_explain(env.ctx, &r.args, why, sizeof why), FG_OK, "%s", fg_last_error(env.ctx));
        cr_assert(strstr(why, "arch=sm_90a,") != NULL, "%s: should run the sm_90a family: %s", name, why);
    }
    run_launch(&env, &r);
    run_verify(&r);
    const size_t bytes = (size_t)(r.o.span + r.o.guard) * r.o.esize;
    unsigned char *with_lse = malloc(bytes);
    cr_assert(with_lse);
    memcpy(with_lse, r.o.img, bytes);
    r.c.no_lse = 1; /* the same inputs, the LSE not asked for */
    memset(&r.args.lse, 0, sizeof r.args.lse);
    run_launch(&env, &r);
    run_verify(&r);
    size_t first = bytes;
    for (size_t i = 0; i < bytes && first == bytes; i++)
        if (with_lse[i] != r.o.img[i]) first = i;
    cr_assert_eq(first, bytes, "%s: O differs at byte %zu of %zu with and without the LSE", name, first, bytes);
    free(with_lse);
    run_free(&env, &r);
    gpu_close(&env);
}

/* Every head dim: fp16 non-causal with sq < sk (LSE off once, to cover that path), bf16 causal. */
ParameterizedTestParameters(fwd, head_dims) {
    static fwd_case cases[2 * NELEM(head_dims)];
    for (size_t i = 0; i < NELEM(head_dims); i++) {
        cases[2 * i] = mk(FG_DTYPE_F16, 2, 113, 203, 2, 2, head_dims[i], 0);
        cases[2 * i].no_lse = head_dims[i] == 96;
        cases[2 * i + 1] = mk(FG_DTYPE_BF16, 1, 113, 203, 2, 1, head_dims[i], 1);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, head_dims, .timeout = 300) {
    run_case(c);
}

/* Every sequence-length pair, fp16 non-causal and bf16 causal (sq > sk rows fully masked included).
 * The two largest pairs run with one head and small head dims to keep the CPU reference short. */
ParameterizedTestParameters(fwd, seqlens) {
    static fwd_case cases[2 * NELEM(seqlens)];
    for (size_t i = 0; i < NELEM(seqlens); i++) {
        int sq = seqlens[i][0], sk = seqlens[i][1];
        int big = (int64_t)sq * sk > 1100 * 1100;
        int b = big ? 1 : 2, h = big ? 1 : 2, d = sq == 4224 ? 64 : 128;
        cases[2 * i] = mk(FG_DTYPE_F16, b, sq, sk, h, h, d, 0);
        cases[2 * i + 1] = mk(FG_DTYPE_BF16, b, sq, sk, h, h, d, 1);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, seqlens, .timeout = 300) {
    run_case(c);
}

/* More tiles than an H200 has SMs (132), several key blocks each: on the sm_90a family the persistent
 * loop carries its K/V ring, Q buffers and pingpong turns across tiles. 3 consumer warpgroups with GQA,
 * 64-byte swizzled tiles (d 96) with keyless tiles (causal, sq > sk), one Q buffer (d 256), 2 consumer
 * warpgroups causal, and a 1-warpgroup tile. Run with the default grid (persistent, tiles from a counter),
 * with tiles in a fixed stride, and with one CTA per tile (FLASHGEN_SM90_GRID). Elsewhere they are plain
 * cases. */
static fwd_case many_tiles_cases[5];
static void many_tiles_fill(void) {
    many_tiles_cases[0] = mk(FG_DTYPE_BF16, 3, 1000, 300, 8, 2, 64, 0);
    many_tiles_cases[1] = mk(FG_DTYPE_F16, 3, 1000, 777, 8, 8, 96, 1);
    many_tiles_cases[2] = mk(FG_DTYPE_BF16, 2, 1100, 500, 8, 4, 256, 0);
    many_tiles_cases[3] = mk(FG_DTYPE_F16, 2, 1100, 1500, 8, 8, 128, 1);
    many_tiles_cases[4] = mk(FG_DTYPE_BF16, 2, 600, 700, 8, 8, 128, 0);
    const int one_wg[4] = {64, 64, 8, 2};
    memcpy(many_tiles_cases[4].tiles, one_wg, sizeof one_wg);
}
ParameterizedTestParameters(fwd, many_tiles) {
    many_tiles_fill();
    return cr_make_param_array(fwd_case, many_tiles_cases, NELEM(many_tiles_cases));
}
ParameterizedTest(fwd_case *c, fwd, many_tiles, .timeout = 300) {
    run_case(c);
}
/* many_tiles again with one environment variable set (read by the context each test creates). */
#define MANY_TILES_WITH(name, var, value)                                                                \
    ParameterizedTestParameters(fwd, name) {                                                             \
        many_tiles_fill();                                                                               \
        return cr_make_param_array(fwd_case, many_tiles_cases, NELEM(many_tiles_cases));                 \
    }                                                                                                    \
    ParameterizedTest(fwd_case *c, fwd, name, .timeout = 300) {                                          \
        setenv(var, value, 1);                                                                           \
        run_case(c);                                                                                     \
    }
MANY_TILES_WITH(many_tiles_persistent, "FLASHGEN_SM90_GRID", "persistent")
MANY_TILES_WITH(many_tiles_one_cta_each, "FLASHGEN_SM90_GRID", "tiles")

/* The dynamic schedule's counter is per stream and put back to zero by each launch's last CTA: five calls
 * in a row on one context and stream, causal, then non-causal, then causal again (one counter serves
 * both), each output poisoned before and checked after (a counter left non-zero would skip tiles, leaving
 * poison). */
Test(fwd, dynamic_schedule_repeats, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    for (int k = 0; k < 3; k++) {
        fwd_case c = mk(FG_DTYPE_BF16, 2, 1100, 1500, 8, 8, 128, k != 1);
        fwd_run r;
        run_setup(&env, &r, &c);
        for (int i = 0; i < 5; i++) {
            run_launch(&env, &r);
            run_verify(&r);
        }
        run_free(&env, &r);
    }
    gpu_close(&env);
}
/* Causal calls order their tiles across a group of (head, batch) pairs by default (dispatch.c,
 * rt_causal_group: on sm_90a up to SMs / 8 pairs within the L2 bound, on mma.sync one batch's heads);
 * the head-by-head order (FLASHGEN_CAUSAL_GROUP=1, p.causal_group 0) stays selectable and must be as
 * right. */
MANY_TILES_WITH(many_tiles_head_order, "FLASHGEN_CAUSAL_GROUP", "1")

/* GQA ratios 1, 4, 8 (8 query heads), causal and not, plus a decode-like single query row. */
ParameterizedTestParameters(fwd, gqa) {
    static fwd_case cases[8];
    static const int kv[3] = {8, 2, 1};
    for (int i = 0; i < 3; i++) {
        cases[2 * i] = mk(FG_DTYPE_F16, 2, 113, 203, 8, kv[i], 64, 0);
        cases[2 * i + 1] = mk(FG_DTYPE_BF16, 1, 1024, 1023, 8, kv[i], 64, 1);
    }
    cases[6] = mk(FG_DTYPE_F16, 2, 1, 239, 8, 1, 128, 0);
    cases[7] = mk(FG_DTYPE_BF16, 2, 1, 239, 8, 2, 128, 1);
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, gqa, .timeout = 300) {
    run_case(c);
}

/* Q/K/V/O/LSE as slices of larger buffers (padded head, seq and batch strides, NaN in the padding). */
ParameterizedTestParameters(fwd, strided) {
    static fwd_case cases[4];
    cases[0] = mk(FG_DTYPE_F16, 2, 113, 203, 4, 1, 64, 0);
    cases[1] = mk(FG_DTYPE_BF16, 2, 203, 113, 4, 2, 128, 1);
    cases[2] = mk(FG_DTYPE_F16, 1, 1025, 1025, 2, 2, 96, 1);
    cases[3] = mk(FG_DTYPE_BF16, 2, 1, 239, 8, 1, 256, 0);
    for (int i = 0; i < 4; i++)
        cases[i].strided = 1;
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, strided, .timeout = 300) {
    run_case(c);
}

/* Non-default softmax scales: mild, tiny (nearly uniform) and large (peaked: exp overflows without the max).
 * The last two run the sm_90a kernel's lazy rescale (16-bit head_dim > 128, forward_wgmma.cuh FG_STALE) over
 * several key blocks, with maxima that jump by far more than its allowance (scale 1) and by less (0.25):
 * bench/probes/lazy_rescale_sim.c puts both at 0.50-0.60 of the bound with the allowance of 2^1. */
ParameterizedTestParameters(fwd, scale) {
    static fwd_case cases[5];
    cases[0] = mk(FG_DTYPE_F16, 1, 200, 200, 2, 2, 64, 0);
    cases[0].scale = 0.3f;
    cases[1] = mk(FG_DTYPE_BF16, 1, 113, 203, 2, 1, 128, 1);
    cases[1].scale = 0.01f;
    cases[2] = mk(FG_DTYPE_F16, 2, 128, 128, 2, 2, 32, 0);
    cases[2].scale = 2.0f;
    cases[3] = mk(FG_DTYPE_F16, 1, 200, 700, 2, 2, 256, 1);
    cases[3].scale = 1.0f;
    cases[4] = mk(FG_DTYPE_BF16, 1, 300, 520, 2, 1, 192, 0);
    cases[4].scale = 0.25f;
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, scale, .timeout = 300) {
    run_case(c);
}

/* seqlen_k = 0 is allowed: every row sees nothing, so O = 0 and LSE = -inf. */
ParameterizedTestParameters(fwd, empty_keys) {
    static fwd_case cases[2];
    cases[0] = mk(FG_DTYPE_F16, 2, 17, 0, 2, 2, 64, 0);
    cases[1] = mk(FG_DTYPE_BF16, 1, 17, 0, 4, 2, 128, 1);
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, empty_keys, .timeout = 300) {
    run_case(c);
}

/* ------------------------------------------------------------------------------------------------ */
/* Bitwise repeatability and a tensor over 2^31 elements                                             */
/* ------------------------------------------------------------------------------------------------ */

/* Five launches on the same inputs give the same O and LSE bytes (outputs re-poisoned each time). */
static void check_repeatable(const fwd_case *c) {
    gpu_env env;
    gpu_open(&env);
    fwd_run r;
    run_setup(&env, &r, c);
    run_launch(&env, &r);
    run_verify(&r);
    size_t ob = (size_t)(r.o.span + r.o.guard) * r.o.esize, lb = (size_t)(r.lse.span + r.lse.guard) * r.lse.esize;
    unsigned char *o0 = malloc(ob), *l0 = malloc(lb > 0 ? lb : 1);
    cr_assert(o0 && l0);
    memcpy(o0, r.o.img, ob);
    if (lb)
        memcpy(l0, r.lse.img, lb);
    for (int rep = 1; rep < 5; rep++) {
        run_launch(&env, &r);
        cr_assert_eq(memcmp(o0, r.o.img, ob), 0, "launch %d wrote different O bytes", rep + 1);
        cr_assert_eq(memcmp(l0, r.lse.img, lb), 0, "launch %d wrote different LSE bytes", rep + 1);
    }
    fprintf(stderr, "gpu_fwd: 5 launches gave identical O and LSE bytes\n");
    free(o0);
    free(l0);
    run_free(&env, &r);
    gpu_close(&env);
}

Test(fwd, repeatable_f16_causal_gqa, .timeout = 300) {
    fwd_case c = mk(FG_DTYPE_F16, 2, 1025, 1025, 4, 1, 128, 1);
    check_repeatable(&c);
}

Test(fwd, repeatable_bf16_long, .timeout = 300) {
    fwd_case c = mk(FG_DTYPE_BF16, 1, 2048, 2048, 2, 2, 64, 0);
    check_repeatable(&c);
}

/* Q and O of 2^31 + 2176 elements ([1, 2^24 + 17, 1, 128]): any 32-bit element offset wraps. Eight keys
 * keep the kernel and the reference (every element checked) short. */
Test(fwd, big_tensor_over_2_pow_31_elements, .timeout = 600) {
    fwd_case c = mk(FG_DTYPE_F16, 1, (1 << 24) + 17, 8, 1, 1, 128, 0);
    cr_assert_gt((int64_t)c.sq * c.hq * c.d, (int64_t)1 << 31);
    run_case(&c);
}

/* ------------------------------------------------------------------------------------------------ */
/* Bad arguments: refused with a sentence naming the argument, and nothing written                    */
/* ------------------------------------------------------------------------------------------------ */

enum mutation {
    M_NULL_ARGS, M_NULL_CTX, M_Q_NULL, M_K_NULL, M_V_NULL, M_O_NULL, M_K_DTYPE, M_O_DTYPE, M_FP8_INPUTS,
    M_Q_NDIM, M_K_BATCH, M_V_SEQLEN, M_O_SEQLEN, M_HEAD_DIM_7, M_HEAD_DIM_264, M_K_HEAD_DIM, M_Q_LAST_STRIDE,
    M_O_LAST_STRIDE, M_Q_MISALIGNED, M_O_MISALIGNED, M_KV_HEADS_NOT_DIVIDING, M_NEGATIVE_SEQLEN, M_NEGATIVE_BATCH,
    M_LSE_DTYPE, M_LSE_SHAPE, M_LSE_NDIM, M_COUNT
};

typedef struct bad_case {
    int id;                /* enum mutation */
    const char *what;      /* the rule broken, for messages */
    const char *names[4];  /* the message must mention one of these (none: not checked) */
} bad_case;

static const bad_case bad_cases[M_COUNT] = {
    {M_NULL_ARGS, "args is NULL", {"args"}},
    {M_NULL_CTX, "ctx is NULL", {"ctx"}},
    {M_Q_NULL, "q.data is NULL", {"q"}},
    {M_K_NULL, "k.data is NULL", {"k"}},
    {M_V_NULL, "v.data is NULL", {"v"}},
    {M_O_NULL, "o.data is NULL", {"o", "out", "output"}},
    {M_K_DTYPE, "k is bf16 while q is fp16", {"k", "dtype"}},
    {M_O_DTYPE, "o is bf16 while q is fp16", {"o", "out", "dtype"}},
    {M_FP8_INPUTS, "q/k/v are e4m3 with V laid out like K (fp8 V is key-major)", {"v", "key-major", "e4m3"}},
    {M_Q_NDIM, "q.ndim is 3", {"q", "ndim"}},
    {M_K_BATCH, "k/v batch 2, q batch 1", {"k", "v", "batch"}},
    {M_V_SEQLEN, "v has one key fewer than k", {"v", "k", "seqlen"}},
    {M_O_SEQLEN, "o has one row more than q", {"o", "out", "output"}},
    {M_HEAD_DIM_7, "head_dim 7", {"head_dim", "head dim", "headdim"}},
    {M_HEAD_DIM_264, "head_dim 264", {"head_dim", "head dim", "headdim"}},
    {M_K_HEAD_DIM, "k/v head_dim 32, q head_dim 64", {"head_dim", "head dim", "k", "v"}},
    {M_Q_LAST_STRIDE, "q.stride[3] is 2", {"stride", "contiguous"}},
    {M_O_LAST_STRIDE, "o.stride[3] is 2", {"stride", "contiguous"}},
    {M_Q_MISALIGNED, "q.data is 2 bytes past an aligned address", {"q", "align"}},
    {M_O_MISALIGNED, "o.data is 2 bytes past an aligned address", {"o", "out", "align"}},
    {M_KV_HEADS_NOT_DIVIDING, "3 KV heads for 4 query heads", {"head", "heads", "divide"}},
    {M_NEGATIVE_SEQLEN, "seqlen_q is -5", {"q", "seqlen", "negative", "shape"}},
    {M_NEGATIVE_BATCH, "batch is -1", {"batch", "negative", "shape", "q"}},
    {M_LSE_DTYPE, "lse is fp16", {"lse"}},
    {M_LSE_SHAPE, "lse has one row fewer than q", {"lse"}},
    {M_LSE_NDIM, "lse.ndim is 4", {"lse"}},
};

/* 1 when msg names `name`: short names (q, k, v, o, lse) as a separate token, longer ones anywhere,
 * ignoring case. */
static int mentions(const char *msg, const char *name) {
    size_t n = strlen(name);
    for (const char *p = msg; *p; p++) {
        if (strncasecmp(p, name, n) != 0)
            continue;
        if (n > 3)
            return 1;
        int before = p > msg && isalnum((unsigned char)p[-1]);
        int after = isalnum((unsigned char)p[n]);
        if (!before && !after)
            return 1;
    }
    return 0;
}

typedef struct { int id; } bad_param;

ParameterizedTestParameters(fwd, bad_arguments) {
    static bad_param ids[M_COUNT];
    for (int i = 0; i < M_COUNT; i++)
        ids[i].id = i;
    return cr_make_param_array(bad_param, ids, M_COUNT);
}

/* The problem every bad-argument test mutates: fp16, b=1, sq=sk=64, 4 query heads over 2 KV heads, d=64,
 * causal, with LSE; laid out with head stride 272 and room for 8 heads per row, so mutations that widen
 * d or the head count stay inside the allocations and break only the rule under test. */
#define BASE_SQ 64
static void base_setup(gpu_env *env, fwd_run *r) {
    memset(r, 0, sizeof *r);
    r->c = mk(FG_DTYPE_F16, 1, BASE_SQ, BASE_SQ, 4, 2, 64, 1);
    const int64_t hs = 272, ss = 8 * hs, bs = BASE_SQ * ss;
    int64_t qs[4] = {1, BASE_SQ, 4, 64}, ks[4] = {1, BASE_SQ, 2, 64}, ls[3] = {1, 4, BASE_SQ};
    int64_t st[4] = {bs, ss, hs, 1};
    dbuf_init(env, &r->q, FG_DTYPE_F16, 4, qs, st, 0, 0);
    dbuf_init(env, &r->k, FG_DTYPE_F16, 4, ks, st, 0, 0);
    dbuf_init(env, &r->v, FG_DTYPE_F16, 4, ks, st, 0, 0);
    dbuf_init(env, &r->o, FG_DTYPE_F16, 4, qs, st, GUARD, 0);
    dbuf_init(env, &r->lse, FG_DTYPE_F32, 3, ls, NULL, GUARD, 0);
    dbuf_upload_random(env, &r->q, 1);
    dbuf_upload_random(env, &r->k, 2);
    dbuf_upload_random(env, &r->v, 3);
    fg_fwd_args a = {.q = r->q.view, .k = r->k.view, .v = r->v.view, .o = r->o.view, .lse = r->lse.view,
                     .softmax_scale = 0.0f, .causal = 1};
    r->args = a;
}

/* The unmutated problem runs and is right, so each refusal below comes from its mutation alone. */
Test(fwd, bad_arguments_base_problem_is_valid, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    fwd_run r;
    base_setup(&env, &r);
    run_launch(&env, &r);
    run_verify(&r);
    run_free(&env, &r);
    gpu_close(&env);
}

ParameterizedTest(bad_param *bp, fwd, bad_arguments, .timeout = 300) {
    const bad_case *bc = &bad_cases[bp->id];
    cr_assert_eq(bc->id, bp->id, "bad_cases is out of order");
    gpu_env env;
    gpu_open(&env);
    fwd_run r;
    base_setup(&env, &r);
    fg_fwd_args a = r.args;

    switch (bc->id) {
    case M_Q_NULL: a.q.data = NULL; break;
    case M_K_NULL: a.k.data = NULL; break;
    case M_V_NULL: a.v.data = NULL; break;
    case M_O_NULL: a.o.data = NULL; break;
    case M_K_DTYPE: a.k.dtype = FG_DTYPE_BF16; break;
    case M_O_DTYPE: a.o.dtype = FG_DTYPE_BF16; break;
    case M_FP8_INPUTS: a.q.dtype = a.k.dtype = a.v.dtype = FG_DTYPE_E4M3; break;
    case M_Q_NDIM: a.q.ndim = 3; break;
    case M_K_BATCH: a.k.shape[0] = a.v.shape[0] = 2; break;
    case M_V_SEQLEN: a.v.shape[1] = BASE_SQ - 1; break;
    case M_O_SEQLEN: a.o.shape[1] = BASE_SQ + 1; break;
    case M_HEAD_DIM_7: a.q.shape[3] = a.k.shape[3] = a.v.shape[3] = a.o.shape[3] = 7; break;
    case M_HEAD_DIM_264: a.q.shape[3] = a.k.shape[3] = a.v.shape[3] = a.o.shape[3] = 264; break;
    case M_K_HEAD_DIM: a.k.shape[3] = a.v.shape[3] = 32; break;
    case M_Q_LAST_STRIDE: a.q.stride[3] = 2; break;
    case M_O_LAST_STRIDE: a.o.stride[3] = 2; break;
    case M_Q_MISALIGNED: a.q.data = (char *)a.q.data + 2; break;
    case M_O_MISALIGNED: a.o.data = (char *)a.o.data + 2; break;
    case M_KV_HEADS_NOT_DIVIDING: a.k.shape[2] = a.v.shape[2] = 3; break;
    case M_NEGATIVE_SEQLEN: a.q.shape[1] = a.o.shape[1] = a.lse.shape[2] = -5; break;
    case M_NEGATIVE_BATCH:
        a.q.shape[0] = a.k.shape[0] = a.v.shape[0] = a.o.shape[0] = a.lse.shape[0] = -1;
        break;
    case M_LSE_DTYPE: a.lse.dtype = FG_DTYPE_F16; break;
    case M_LSE_SHAPE: a.lse.shape[2] = BASE_SQ - 1; break;
    case M_LSE_NDIM: a.lse.ndim = 4; a.lse.shape[3] = 1; a.lse.stride[3] = 1; break;
    default: break;
    }

    dbuf_poison(&env, &r.o);
    dbuf_poison(&env, &r.lse);
    CK(env.cu->cuCtxSynchronize());
    fg_status s;
    const char *msg;
    if (bc->id == M_NULL_CTX) {
        s = fg_attention_fwd(NULL, &a, (void *)env.stream);
        msg = fg_last_error(NULL);
    } else {
        s = fg_attention_fwd(env.ctx, bc->id == M_NULL_ARGS ? NULL : &a, (void *)env.stream);
        msg = fg_last_error(env.ctx);
    }
    cr_assert_not_null(msg, "fg_last_error must never return NULL");
    fprintf(stderr, "gpu_fwd: bad argument (%s): %s: %s\n", bc->what, fg_status_string(s), msg);
    cr_assert(s == FG_ERR_INVALID_ARGUMENT || s == FG_ERR_UNSUPPORTED,
              "%s: expected FG_ERR_INVALID_ARGUMENT or FG_ERR_UNSUPPORTED, got %s (%s)", bc->what, fg_status_string(s),
              msg);
    if (bc->names[0]) {
        int named = 0;
        for (int i = 0; i < 4 && bc->names[i]; i++)
            named |= mentions(msg, bc->names[i]);
        cr_assert(named, "%s: the message \"%s\" does not name the argument (expected one of %s%s%s%s%s%s%s)",
                  bc->what, msg, bc->names[0], bc->names[1] ? ", " : "", bc->names[1] ? bc->names[1] : "",
                  bc->names[2] ? ", " : "", bc->names[2] ? bc->names[2] : "", bc->names[3] ? ", " : "",
                  bc->names[3] ? bc->names[3] : "");
    }
    CK(env.cu->cuCtxSynchronize());
    dbuf_download(&env, &r.o);
    dbuf_download(&env, &r.lse);
    check_untouched(&r.o, "O");
    check_untouched(&r.lse, "LSE");
    run_free(&env, &r);
    gpu_close(&env);
}

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

/* ------------------------------------------------------------------------------------------------ */
/* Where kernels come from: strict mode, bundles, the disk cache, the compile log                   */
/* ------------------------------------------------------------------------------------------------ */

/* Another flashgen context on device 0: cache_dir NULL disables the disk cache. */
static fg_context *extra_context(const char *cache_dir, int strict, fg_log_fn log, void *user) {
    fg_context_options opt;
    fg_context_options_init(&opt);
    opt.cache_dir = cache_dir;
    opt.disable_disk_cache = cache_dir == NULL;
    opt.strict = strict;
    opt.log_level = FG_LOG_INFO;
    opt.log_fn = log;
    opt.log_user = user;
    fg_context *ctx = NULL;
    fg_status st = fg_context_create(&ctx, &opt);
    cr_assert_eq(st, FG_OK, "fg_context_create: %s", fg_last_error(NULL));
    return ctx;
}

/* The variant name on the first line of fg_explain's text ("variant NAME\n..."). */
static void explained_variant(fg_context *ctx, const fg_fwd_args *a, char *name, size_t n, char *text, size_t tn) {
    cr_assert_eq(fg_explain(ctx, a, text, tn), FG_OK, "fg_explain: %s", fg_last_error(ctx));
    cr_assert_eq(strncmp(text, "variant ", 8), 0, "fg_explain text: %s", text);
    size_t len = strcspn(text + 8, "\n");
    cr_assert_lt(len, n);
    memcpy(name, text + 8, len);
    name[len] = '\0';
}

/* Compiles the variant s ahead of time into an in-memory bundle, as `flashgen bundle` does, and loads it
 * into ctx (which copies the bytes). */
static void bundle_one_into(fg_context *ctx, const fg_spec *s) {
    char name[FG_SPEC_NAME_MAX];
    cr_assert_gt(spec_format(s, name, sizeof name), 0);
    fg_error e;
    fg_compile_result cres;
    cr_assert_eq(compile_spec(s, 0, &cres, &e), FG_OK, "%s", e.msg);
    fg_bundle b = {0};
    cr_assert_eq(bundle_add(&b, name, cres.cubin, cres.cubin_size, &e), FG_OK, "%s", e.msg);
    uint8_t *bytes;
    size_t nbytes;
    cr_assert_eq(bundle_serialize(&b, &bytes, &nbytes, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(fg_bundle_load_memory(ctx, bytes, nbytes), FG_OK, "%s", fg_last_error(ctx));
    free(bytes);
    bundle_free(&b);
    compile_result_free(&cres);
}

/* Runs r with ctx in place of env's own context, then checks every element. */
static void launch_and_verify_with(gpu_env *env, fg_context *ctx, fwd_run *r) {
    fg_context *own = env->ctx;
    env->ctx = ctx;
    run_launch(env, r);
    env->ctx = own;
    run_verify(r);
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

/* Collects log lines (for the compile-log test). */
typedef struct log_sink {
    char text[8192]; /* every message, one per line */
} log_sink;

static void collect(void *user, fg_log_level level, const char *msg) {
    log_sink *s = user;
    size_t used = strlen(s->text);
    snprintf(s->text + used, sizeof s->text - used, "%d %s\n", (int)level, msg);
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

/* Empty tensors may come with NULL pointers (PyTorch's empty tensors do): sk = 0 with NULL K/V still
 * writes O = 0 and LSE = -inf, and sq = 0 with NULL Q/O launches nothing and succeeds. */
Test(fwd, empty_tensors_with_null_pointers, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    fwd_run r;
    fwd_case c = mk(FG_DTYPE_BF16, 2, 33, 0, 4, 2, 64, 0);
    run_setup(&env, &r, &c);
    r.args.k.data = NULL;
    r.args.v.data = NULL;
    run_launch(&env, &r);
    run_verify(&r);
    fg_fwd_args a = r.args;
    a.q.shape[1] = a.o.shape[1] = a.lse.shape[2] = 0;
    a.q.data = a.o.data = a.lse.data = NULL;
    fg_status st = fg_attention_fwd(env.ctx, &a, (void *)env.stream);
    cr_assert_eq(st, FG_OK, "sq = 0 with NULL q/o: %s", fg_last_error(env.ctx));
    run_free(&env, &r);
    gpu_close(&env);
}

/* ------------------------------------------------------------------------------------------------ */
/* The backward pass                                                                                  */
/* ------------------------------------------------------------------------------------------------ */

/* One backward case: the forward of `c` runs first (its O and LSE are the backward's inputs, and are
 * checked), then fg_attention_bwd with a random dO, NaN-poisoned gradients with guard bands, and the
 * gradients against the fp32 reference with TESTING.md's 3x rule (reference.h: ref_check_bwd). */
typedef struct bwd_run {
    fwd_run f;                 /* the forward: q, k, v, o, lse */
    dbuf dout, dq, dk, dv;     /* dO, and the gradients */
    CUdeviceptr ws;            /* the workspace */
    fg_bwd_args args;
    int tiles[4];              /* block_m, block_n, warps, stages of an explicit backward variant, or 0 */
} bwd_run;

/* c->tiles name the backward's variant (bwd::tiles); the forward that makes O and the LSE takes the policy's. */
static void bwd_setup(gpu_env *env, bwd_run *r, const fwd_case *c, int deterministic) {
    memset(r, 0, sizeof *r);
    memcpy(r->tiles, c->tiles, sizeof r->tiles);
    fwd_case fc = *c;
    memset(fc.tiles, 0, sizeof fc.tiles);
    run_setup(env, &r->f, &fc);
    run_launch(env, &r->f);
    run_verify(&r->f);
    memcpy(r->f.c.tiles, c->tiles, sizeof r->f.c.tiles); /* for case_name (the forward ran the policy's tiles) */
    int64_t qs[4] = {c->b, c->sq, c->hq, c->d}, ks[4] = {c->b, c->sk, c->hkv, c->d}, st[4];
    make_strides(4, qs, c->strided, st);
    dbuf_init(env, &r->dout, c->dt, 4, qs, st, 0, 0);
    dbuf_upload_random(env, &r->dout, 0x61ull + (uint64_t)c->sq);
    dbuf_init(env, &r->dq, c->dt, 4, qs, st, GUARD, 0);
    make_strides(4, ks, c->strided, st);
    dbuf_init(env, &r->dk, c->dt, 4, ks, st, GUARD, 0);
    dbuf_init(env, &r->dv, c->dt, 4, ks, st, GUARD, 0);
    fg_bwd_args *a = &r->args;
    a->q = r->f.q.view, a->k = r->f.k.view, a->v = r->f.v.view, a->o = r->f.o.view, a->lse = r->f.lse.view;
    a->dout = r->dout.view, a->dq = r->dq.view, a->dk = r->dk.view, a->dv = r->dv.view;
    a->softmax_scale = c->scale;
    a->causal = c->causal;
    a->deterministic = deterministic;
    cr_assert_eq(fg_attention_bwd_workspace_size(env->ctx, a, &a->workspace_size), FG_OK, "%s",
                 fg_last_error(env->ctx));
    if (a->workspace_size) {
        CK(env->cu->cuMemAlloc(&r->ws, a->workspace_size));
        /* Garbage in the workspace: the kernels must initialize what they use. */
        CK(env->cu->cuMemsetD8(r->ws, 0xFF, a->workspace_size));
        a->workspace = (void *)(uintptr_t)r->ws;
    }
}

/* Poisons the gradients, runs the backward, downloads them. */
static void bwd_launch(gpu_env *env, bwd_run *r) {
    dbuf *gs[3] = {&r->dq, &r->dk, &r->dv};
    for (int i = 0; i < 3; i++) dbuf_poison(env, gs[i]);
    CK(env->cu->cuCtxSynchronize());
    char name[200];
    case_name(&r->f.c, name, sizeof name);
    fg_status st;
    if (r->tiles[0]) { /* an explicit mma.sync variant (bwd::tiles) */
        fg_spec s;
        fg_error e;
        fg_error_clear(&e);
        char text[FG_SPEC_NAME_MAX];
        snprintf(text, sizeof text, "kind=bwd arch=sm_%d dtype=%s head_dim=%d causal=%d deterministic=%d block_m=%d "
                 "block_n=%d warps=%d stages=%d", gpu_cc(env), dtype_name(r->f.c.dt), r->f.c.d, r->f.c.causal,
                 r->args.deterministic, r->tiles[0], r->tiles[1], r->tiles[2], r->tiles[3]);
        cr_assert_eq(spec_parse(text, &s, &e), FG_OK, "%s: %s", text, e.msg);
        st = rt_bwd_with_spec(env->ctx, &s, &r->args, (void *)env->stream, &e);
        if (st == FG_ERR_UNSUPPORTED && strstr(e.msg, "shared memory"))
            cr_skip_test("%s: %s", name, e.msg); /* a GPU with less of it */
        cr_assert_eq(st, FG_OK, "%s: rt_bwd_with_spec returned %s: %s", name, fg_status_string(st), e.msg);
    } else {
        st = fg_attention_bwd(env->ctx, &r->args, (void *)env->stream);
    }
    if (st == FG_ERR_UNSUPPORTED && r->f.c.d > 128 && strstr(fg_last_error(env->ctx), "shared memory"))
        cr_skip_test("%s: %s", name, fg_last_error(env->ctx)); /* d > 128 tiles on a GPU with less of it */
    cr_assert_eq(st, FG_OK, "%s: fg_attention_bwd returned %s: %s", name, fg_status_string(st), fg_last_error(env->ctx));
    CK(env->cu->cuStreamSynchronize(env->stream));
    for (int i = 0; i < 3; i++) dbuf_download(env, gs[i]);
}

/* fg_explain_bwd names the family the call will run: the sm_90a (wgmma) kernel or a mma.sync one (the
 * d > 128 tiles a GPU's shared memory cannot hold are skipped, as bwd_launch does). */
static void bwd_expect_family(gpu_env *env, bwd_run *r, int sm90a, int tma) {
    char text[2048], name[200];
    case_name(&r->f.c, name, sizeof name);
    const fg_status st = fg_explain_bwd(env->ctx, &r->args, text, sizeof text);
    if (st == FG_ERR_UNSUPPORTED && r->f.c.d > 128 && strstr(fg_last_error(env->ctx), "shared memory"))
        cr_skip_test("%s: %s", name, fg_last_error(env->ctx));
    cr_assert_eq(st, FG_OK, "%s: fg_explain_bwd: %s", name, fg_last_error(env->ctx));
    cr_assert(strncmp(text, "variant ", 8) == 0 && strstr(text, "kind=bwd") && strstr(text, "workspace: "), "%s", text);
    cr_assert(sm90a == (strstr(text, "variant arch=sm_90a,") == text), "%s: the %s backward should run: %s", name,
              sm90a ? "sm_90a" : "mma.sync", text);
    if (tma >= 0) /* the mma.sync kernel's TMA loads (tma=1), where the caller says */
        cr_assert(tma == (strstr(text, ",tma=1,") != NULL && strstr(text, "loads by TMA") != NULL), "%s: %s", name, text);
}

static void bwd_verify(bwd_run *r) {
    char name[200], line[1024];
    case_name(&r->f.c, name, sizeof name);
    static const char *const gnames[3] = {"dQ", "dK", "dV"};
    dbuf *gs[3] = {&r->dq, &r->dk, &r->dv};
    for (int i = 0; i < 3; i++) {
        check_guard(gs[i], gnames[i]);
        check_outside_view(gs[i], gnames[i]);
    }
    ref_bwd_problem p = {.fwd = {.q = r->f.q.host, .k = r->f.k.host, .v = r->f.v.host,
                                 .softmax_scale = r->f.c.scale, .causal = r->f.c.causal, .out_dtype = r->f.c.dt},
                         .o = r->f.o.host, .d_o = r->dout.host, .lse = r->f.lse.host};
    ref_bwd_report rep;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_check_bwd(&p, &r->dq.host, &r->dk.host, &r->dv.host, &rep, &e), FG_OK, "%s: %s", name, e.msg);
    ref_bwd_report_format(&rep, line, sizeof line);
    fprintf(stderr, "gpu_bwd: %s det=%d: %s\n", name, r->args.deterministic, line);
    cr_assert(rep.pass, "%s: %s", name, line);
}

static void bwd_free(gpu_env *env, bwd_run *r) {
    dbuf_free(env, &r->dout);
    dbuf_free(env, &r->dq);
    dbuf_free(env, &r->dk);
    dbuf_free(env, &r->dv);
    if (r->ws) env->cu->cuMemFree(r->ws);
    run_free(env, &r->f);
}

/* The shape set: head dims of every backward tile (16-128, and 160-256 where the GPU's shared memory holds
 * them, with dQ by fp32 atomics there), query/key lengths that are multiples of no
 * tile (the FlashAttention regression: NaN in dQ when seqlen_k is not a multiple of the block), causal
 * with sq < sk and sq > sk (rows that see no key must get zero gradients, not NaN), GQA/MQA (dK, dV
 * summed over a KV head's query heads), strided views, a non-default scale; each in both modes. */
static fwd_case bwd_cases[32];
static int bwd_ncases;
static void bwd_fill(void) {
    int n = 0;
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 2, 128, 128, 2, 2, 64, 0);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 2, 113, 203, 4, 4, 64, 1);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 203, 113, 4, 2, 64, 1);   /* rows without keys; GQA 2 */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 300, 257, 8, 2, 128, 0);   /* GQA 4 */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 2, 257, 300, 4, 4, 128, 1);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 199, 199, 4, 1, 96, 1);    /* MQA */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 2, 77, 1000, 2, 2, 32, 0);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 1000, 77, 2, 2, 16, 1);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 150, 150, 2, 2, 80, 1);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 150, 151, 2, 2, 112, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 1, 239, 2, 2, 64, 0);     /* one query */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 239, 1, 2, 2, 128, 0);     /* one key */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 203, 257, 4, 2, 256, 1);  /* 8 keys a warp; GQA 2 */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 2, 130, 200, 2, 2, 192, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 257, 130, 2, 1, 160, 1);  /* rows without keys; MQA */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 100, 100, 2, 2, 224, 1);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 1, 239, 2, 2, 128, 0);    /* one query block a CTA, d 128 */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 1000, 77, 2, 2, 128, 1);   /* sq >> sk at d 128: 16 query blocks */
    /* the sm_90a kernel's dS^T buffers reused (3+ query blocks a CTA) at d 64, and its lagged dQ (d 128
     * without a mask) over 2 and 3 blocks with 16-bit dK/dV (MHA: the epilogue through the dQ staging) */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 517, 700, 4, 4, 64, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 517, 700, 4, 4, 64, 1);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 129, 300, 2, 2, 128, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 100, 130, 2, 2, 128, 0);
    /* d 128 without a mask on sm_90a: 80-query blocks (dQ^T), 13 of them, the last past the multiple of 128
     * (1000 queries: workspace rows padded to 1152), MHA; and 64-query ones (the runtime's choice at 512 and
     * below 128 queries), their dQ lagged over 8 blocks */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 1000, 390, 4, 4, 128, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 512, 200, 2, 2, 128, 0);
    fwd_case s = mk(FG_DTYPE_BF16, 2, 130, 140, 4, 2, 64, 1);
    s.strided = 1;
    s.scale = 0.3f;
    bwd_cases[n++] = s;
    bwd_ncases = n;
}
/* Causal with sq > sk: rows i < sq - sk see no key, and their dQ must be exactly 0 (not NaN, not noise). */
static void bwd_check_rows_without_keys(const fwd_case *c, const bwd_run *r) {
    if (!c->causal || c->sq <= c->sk) return;
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t i = 0; i < c->sq - c->sk; i++)
            for (int64_t h = 0; h < c->hq; h++)
                for (int64_t x = 0; x < c->d; x++) {
                    const uint16_t *e = (const uint16_t *)r->dq.img +
                                        (b * r->dq.view.stride[0] + i * r->dq.view.stride[1] + h * r->dq.view.stride[2] + x);
                    cr_assert_eq(*e & 0x7fff, 0, "dQ[%lld, %lld, %lld, %lld] of a row without keys is 0x%04x",
                                 (long long)b, (long long)i, (long long)h, (long long)x, *e);
                }
}
/* One case in one mode, on the family expected (sm90a: the sm_90a kernel, else mma.sync): the gradients
 * against the reference, and exact zeros for rows without keys. */
static void bwd_check_case(gpu_env *env, const fwd_case *c, int deterministic, int sm90a, int tma) {
    bwd_run r;
    bwd_setup(env, &r, c, deterministic);
    bwd_expect_family(env, &r, sm90a, tma);
    bwd_launch(env, &r);
    bwd_verify(&r);
    bwd_check_rows_without_keys(c, &r);
    bwd_free(env, &r);
}

/* The shape set's head dims 64 and 128 (the sm_90a kernel's: shapes_sm90a), or every multiple of 64 (the
 * mma.sync kernel's TMA loads: shapes_mma_tma). */
static struct criterion_test_params bwd_cases_of(int all64) {
    bwd_fill();
    static fwd_case cases[2][32];
    int n = 0;
    for (int i = 0; i < bwd_ncases; i++)
        if (bwd_cases[i].d == 64 || bwd_cases[i].d == 128 || (all64 && bwd_cases[i].d % 64 == 0))
            cases[all64][n++] = bwd_cases[i];
    return cr_make_param_array(fwd_case, cases[all64], (size_t)n);
}

ParameterizedTestParameters(bwd, shapes) {
    bwd_fill();
    return cr_make_param_array(fwd_case, bwd_cases, (size_t)bwd_ncases);
}
ParameterizedTest(fwd_case *c, bwd, shapes, .timeout = 600) {
    setenv("FLASHGEN_WGMMA_BWD", "0", 1); /* the mma.sync kernels on Hopper too (bwd::shapes_sm90a: the other) */
    setenv("FLASHGEN_BWD_TMA", "0", 1);   /* their cp.async loads, as before sm_90 (bwd::shapes_mma_tma: TMA) */
    gpu_env env;
    gpu_open(&env);
    for (int det = 0; det < 2; det++) bwd_check_case(&env, c, det, 0, 0);
    gpu_close(&env);
}

/* mma.sync backward tiles the policy chooses on other GPUs, through the runtime's entry for explicit variants:
 * one stage of query blocks (the next block loading behind the dQ product): the A100's tile at head_dim 224
 * and 256 (8 keys a warp), the 99 KiB parts' at 160 and 192, and one stage at 64 x 128 (d 128) and 32 x 64 on 4
 * warps (d 64); both modes, lengths that are multiples of no tile size, causal with sq < sk and sq > sk, GQA. */
ParameterizedTestParameters(bwd, tiles) {
    static const struct { int d, tiles[4]; } t[] = {
        {256, {64, 64, 8, 1}}, {224, {64, 64, 8, 1}}, {192, {64, 32, 4, 1}}, {160, {64, 64, 8, 1}},
        {128, {64, 128, 8, 1}}, {64, {32, 64, 4, 1}},
        /* 8 keys a warp at head_dim 128 and 64 (two stages): quarter-width dK/dV tiles, 32-row dQ groups, and on
         * sm_90+ the staged bulk adds of those groups */
        {128, {64, 64, 8, 2}},  {64, {64, 32, 4, 2}},
    };
    static fwd_case cases[2 * NELEM(t)];
    for (size_t i = 0; i < NELEM(t); i++) {
        cases[2 * i] = mk(FG_DTYPE_BF16, 1, 203, 257, 4, 2, t[i].d, 1);
        cases[2 * i + 1] = mk(FG_DTYPE_F16, 2, 150, 77, 2, 2, t[i].d, i % 2 == 0);
        memcpy(cases[2 * i].tiles, t[i].tiles, sizeof cases[0].tiles);
        memcpy(cases[2 * i + 1].tiles, t[i].tiles, sizeof cases[0].tiles);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, bwd, tiles, .timeout = 600) {
    gpu_env env;
    gpu_open(&env);
    for (int det = 0; det < 2; det++) {
        bwd_run r;
        bwd_setup(&env, &r, c, det);
        bwd_launch(&env, &r);
        bwd_verify(&r);
        bwd_check_rows_without_keys(c, &r);
        bwd_free(&env, &r);
    }
    gpu_close(&env);
}

/* The mma.sync backward's tma=1 variants (K, V, Q, dO by TMA: the default on sm_90+) on the shape set's head
 * dims that are multiples of 64 (64, 128, 192, 256), both modes; skipped before sm_90. */
ParameterizedTestParameters(bwd, shapes_mma_tma) {
    return bwd_cases_of(1);
}
ParameterizedTest(fwd_case *c, bwd, shapes_mma_tma, .timeout = 600) {
    setenv("FLASHGEN_WGMMA_BWD", "0", 1);
    unsetenv("FLASHGEN_BWD_TMA"); /* the default, read by the context gpu_open creates */
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    if (cc < 90) {
        gpu_close(&env);
        cr_skip_test("the mma.sync backward's TMA loads need compute capability 9.0 or newer (this one is sm_%d)", cc);
    }
    { /* devices whose backward tile has fewer than 64 query rows (the 99 KiB parts: block_m 32) take none */
        bwd_run r;
        bwd_setup(&env, &r, c, 0);
        char text[2048];
        cr_assert_eq(fg_explain_bwd(env.ctx, &r.args, text, sizeof text), FG_OK, "%s", fg_last_error(env.ctx));
        bwd_free(&env, &r);
        if (!strstr(text, ",tma=1,") && strstr(text, "block_m=32,")) {
            gpu_close(&env);
            cr_skip_test("this device's backward tile (block_m 32) takes no TMA loads: %s", text);
        }
    }
    for (int det = 0; det < 2; det++) bwd_check_case(&env, c, det, 0, 1);
    gpu_close(&env);
}

/* The sm_90a backward (backward_wgmma.cuh, wgmma), on the shape set's head dims 64 and 128 without the
 * deterministic mode (which it does not take): what a Hopper GPU runs by default (bwd::shapes runs the
 * mma.sync kernel there, with FLASHGEN_WGMMA_BWD=0); skipped on other GPUs. */
ParameterizedTestParameters(bwd, shapes_sm90a) {
    return bwd_cases_of(0);
}
ParameterizedTest(fwd_case *c, bwd, shapes_sm90a, .timeout = 600) {
    setenv("FLASHGEN_WGMMA_BWD", "1", 1); /* read by the context gpu_open creates */
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    if (cc != 90) {
        gpu_close(&env);
        cr_skip_test("the sm_90a backward needs a compute capability 9.0 device (this one is sm_%d)", cc);
    }
    if (env_is_zero("FLASHGEN_WGMMA")) {
        gpu_close(&env);
        cr_skip_test("FLASHGEN_WGMMA=0: the sm_90a family, the backward's included, is off in this run");
    }
    bwd_check_case(&env, c, 0, 1, -1);
    gpu_close(&env);
}

/* The deterministic mode: 50 runs give bitwise-identical gradients (GQA, a tail in both lengths, several
 * key blocks adding into each query block's dQ; FG_TEST_DET_RUNS, at least 2, sets fewer runs for a
 * compute-sanitizer pass). Causal (descending order): at d 64, whose dQ goes by bulk
 * reduce-adds on sm_90+, at d 192, whose dQ goes by fp32 atomics everywhere (16-byte ones on sm_90+), and at
 * d 128 with more queries than keys (the rank at query blocks some key blocks do not see). Not causal: the
 * rotated streams (d 128), and ascending where a head's key blocks are over half the SMs (d 64, 9000 keys). */
ParameterizedTestParameters(bwd, deterministic_is_bitwise_repeatable) {
    static fwd_case cases[5];
    cases[0] = mk(FG_DTYPE_BF16, 2, 517, 700, 4, 2, 64, 1);
    cases[1] = mk(FG_DTYPE_F16, 1, 517, 700, 4, 2, 192, 1);
    cases[2] = mk(FG_DTYPE_BF16, 1, 700, 517, 4, 4, 128, 1); /* causal, rows without keys: descending order */
    cases[3] = mk(FG_DTYPE_BF16, 2, 700, 517, 4, 2, 128, 0); /* not causal: rotated streams */
    cases[4] = mk(FG_DTYPE_F16, 1, 300, 9000, 2, 2, 64, 0);  /* 71 key blocks of 128, over half an H100's SMs:
                                                                ascending */
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *cp, bwd, deterministic_is_bitwise_repeatable, .timeout = 600) {
    gpu_env env;
    gpu_open(&env);
    fwd_case c = *cp;
    bwd_run r;
    bwd_setup(&env, &r, &c, 1);
    bwd_launch(&env, &r);
    bwd_verify(&r);
    dbuf *gs[3] = {&r.dq, &r.dk, &r.dv};
    unsigned char *first[3];
    size_t bytes[3];
    for (int i = 0; i < 3; i++) {
        bytes[i] = (size_t)gs[i]->span * gs[i]->esize;
        first[i] = malloc(bytes[i]);
        cr_assert_not_null(first[i]);
        memcpy(first[i], gs[i]->img, bytes[i]);
    }
    const char *runs_env = getenv("FG_TEST_DET_RUNS");
    const int runs = runs_env && atoi(runs_env) >= 2 ? atoi(runs_env) : 50;
    for (int rep = 1; rep < runs; rep++) {
        bwd_launch(&env, &r);
        for (int i = 0; i < 3; i++)
            cr_assert_eq(memcmp(first[i], gs[i]->img, bytes[i]), 0, "run %d: gradient %d differs bitwise from run 0",
                         rep, i);
    }
    for (int i = 0; i < 3; i++) free(first[i]);
    bwd_free(&env, &r);
    gpu_close(&env);
}

/* Bad arguments get a status and a sentence, before anything runs. */
/* The sm_90a backward loads Q, K, V and dO by TMA; a call whose tensors TMA cannot read (here K with
 * stride 0 over its heads, which the argument rules accept for inputs) runs the mma.sync kernel instead:
 * fg_explain_bwd says which. */
Test(bwd, tma_unready_views_take_mma_sync, .timeout = 300) {
    setenv("FLASHGEN_WGMMA_BWD", "1", 1);
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    if (cc != 90 || env_is_zero("FLASHGEN_WGMMA")) {
        gpu_close(&env);
        cr_skip_test("needs a compute capability 9.0 device with the sm_90a family on (this one: sm_%d)", cc);
    }
    fwd_case c = mk(FG_DTYPE_BF16, 1, 64, 64, 2, 2, 64, 0);
    bwd_run r;
    bwd_setup(&env, &r, &c, 0);
    char text[2048];
    cr_assert_eq(fg_explain_bwd(env.ctx, &r.args, text, sizeof text), FG_OK, "%s", fg_last_error(env.ctx));
    cr_assert(strstr(text, "variant arch=sm_90a,") == text, "%s", text);
    fg_bwd_args a = r.args;
    a.k.stride[2] = 0; /* both KV heads read head 0's rows; explained only, never run */
    cr_assert_eq(fg_explain_bwd(env.ctx, &a, text, sizeof text), FG_OK, "%s", fg_last_error(env.ctx));
    cr_assert(strstr(text, "variant arch=sm_90,") == text && strstr(text, "mma.sync path"), "%s", text);
    bwd_free(&env, &r);
    gpu_close(&env);
}

/* Strict mode with a bundle that holds the mma.sync backward's cp.async variant only (one built before the
 * TMA-load variants were the sm_90 default, or from a config without tma = true): dispatch takes it rather
 * than refusing the call for want of the tma=1 variant; the gradients are checked. sm_90 only. */
Test(bwd, strict_mode_takes_a_bundled_cp_async_variant, .timeout = 300) {
    setenv("FLASHGEN_WGMMA_BWD", "0", 1);
    unsetenv("FLASHGEN_BWD_TMA");
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    if (cc != 90) {
        gpu_close(&env);
        cr_skip_test("the TMA-load backward is the default on compute capability 9.0 only (this one: sm_%d)", cc);
    }
    fwd_case c = mk(FG_DTYPE_BF16, 1, 200, 200, 2, 2, 64, 0);
    bwd_run r;
    bwd_setup(&env, &r, &c, 0);
    fg_context *strict = extra_context(NULL, 1, NULL, NULL);
    char text[2048];
    cr_assert_eq(fg_explain_bwd(strict, &r.args, text, sizeof text), FG_OK, "%s", fg_last_error(strict));
    cr_assert(strstr(text, ",tma=1,") && strstr(text, "code: in no cache or bundle"), "%s", text);
    const size_t len = strcspn(text + 8, "\n");
    char name[FG_SPEC_NAME_MAX];
    cr_assert_lt(len, sizeof name);
    memcpy(name, text + 8, len);
    name[len] = '\0';
    fg_spec s;
    fg_error e;
    cr_assert_eq(spec_parse(name, &s, &e), FG_OK, "%s", e.msg);
    s.tma = 0;
    cr_assert_gt(spec_format(&s, name, sizeof name), 0);
    bundle_one_into(strict, &s);
    cr_assert_eq(fg_explain_bwd(strict, &r.args, text, sizeof text), FG_OK, "%s", fg_last_error(strict));
    cr_assert(strncmp(text + 8, name, strlen(name)) == 0 && strstr(text, "code: a loaded bundle"), "%s", text);
    fg_context *own = env.ctx;
    env.ctx = strict;
    bwd_launch(&env, &r);
    env.ctx = own;
    bwd_verify(&r);
    fprintf(stderr, "gpu_bwd: strict mode served %s from a bundle\n", name);
    fg_context_destroy(strict);
    bwd_free(&env, &r);
    gpu_close(&env);
}

Test(bwd, bad_arguments_are_refused, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    fwd_case c = mk(FG_DTYPE_F16, 1, 64, 64, 2, 2, 64, 0);
    bwd_run r;
    bwd_setup(&env, &r, &c, 0);
    fg_bwd_args a = r.args;
    a.workspace_size -= 1;
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "workspace_size"), "%s", fg_last_error(env.ctx));
    a = r.args;
    a.lse.data = NULL;
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "lse"), "%s", fg_last_error(env.ctx));
    a = r.args;
    a.dq.data = a.q.data; /* dq over q */
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "dq overlaps q"), "%s", fg_last_error(env.ctx));
    a = r.args;
    a.dk.dtype = FG_DTYPE_BF16;
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "dk.dtype"), "%s", fg_last_error(env.ctx));
    a = r.args;
    a.deterministic = 2;
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    /* fg_explain_bwd: the same checks; a buffer too small says how much it needs; no context, no crash */
    char text[2048];
    cr_assert_eq(fg_explain_bwd(env.ctx, &a, text, sizeof text), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(fg_explain_bwd(env.ctx, &r.args, text, 16), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "the explanation needs"), "%s", fg_last_error(env.ctx));
    cr_assert_neq(fg_explain_bwd(NULL, &r.args, text, sizeof text), FG_OK);
    /* rt_bwd_with_spec (explicit variants): one that does not match the call is refused, and the call is
     * checked as fg_attention_bwd checks it */
    fg_spec s;
    fg_error e;
    fg_error_clear(&e);
    char name[FG_SPEC_NAME_MAX];
    snprintf(name, sizeof name, "kind=bwd arch=sm_%d dtype=fp16 head_dim=128 block_m=64 block_n=64 warps=8 stages=2",
             gpu_cc(&env));
    cr_assert_eq(spec_parse(name, &s, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(rt_bwd_with_spec(env.ctx, &s, &r.args, (void *)env.stream, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "does not match the call"), "%s", e.msg);
    s.head_dim = 64, s.causal = 1;
    cr_assert_eq(rt_bwd_with_spec(env.ctx, &s, &r.args, (void *)env.stream, &e), FG_ERR_INVALID_ARGUMENT, "mask");
    s.causal = 0;
    a = r.args;
    a.workspace_size -= 1;
    cr_assert_eq(rt_bwd_with_spec(env.ctx, &s, &a, (void *)env.stream, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "workspace_size"), "%s", e.msg);
    bwd_free(&env, &r);
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
