/* gpu_harness.h: what the GPU test programs (test_gpu_forward, test_gpu_fp8, test_gpu_backward,
 * test_gpu_runtime) share: the device and a flashgen context per test, device buffers with a host image,
 * the poisoned outputs and their checks (gpu_harness.c), and one forward or backward call set up, run
 * and judged by the CPU reference (gpu_run.c).
 *
 * Every GPU test starts with gpu_open(), which skips the test with "no CUDA device: <reason>" when the
 * driver or a device is missing, so CI without a GPU passes and says what it did not run. Outputs are
 * poisoned (NaN) before each launch and followed by a guard band of GUARD elements with a known byte
 * pattern; a test fails on any NaN left in the view, any changed guard byte, and any write between the
 * elements of a strided output. Inputs that are strided views carry NaN in their padding, so a kernel
 * that reads outside its view produces NaN.
 *
 * Each test runs in its own process (Criterion). A program shares one disk cache directory among its
 * tests so a variant is compiled once per run: $FG_TEST_CACHE_DIR if set (kept), else a mkdtemp directory
 * made before the first test and removed after the last (the report hooks in gpu_harness.c). The
 * environment the runtime reads (FLASHGEN_EMULATE_ARCH, FLASHGEN_WGMMA, ...) is read here through
 * emulated_arch() and env_is_zero(). */
#ifndef FG_TESTS_GPU_HARNESS_H
#define FG_TESTS_GPU_HARNESS_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>
#include "flashgen.h"
#include "runtime/cuda_api.h"
#include "runtime/runtime.h"

#define GUARD 1024 /* elements of known pattern after each output */
#define CACHE_ENV "FG_TEST_CACHE_DIR"
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the device (gpu_harness.c) ---- */

typedef struct gpu_env {
    const fg_cuda_api *cu; /* the driver table */
    CUdevice dev;          /* device 0 */
    CUcontext pctx;        /* its primary context, retained and current while the test runs */
    fg_context *ctx;       /* the flashgen context under test */
    CUstream stream;       /* a non-blocking stream for the launches */
    CUmodule poison_mod;   /* gpu_poison_shared's kernel, loaded on its first use */
    CUfunction poison_fn;
    unsigned poison_bytes, poison_ctas; /* its launch: the device's shared memory a block, four CTAs an SM */
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
 * creates the flashgen context (on the program's cache directory) and a stream. */
void gpu_open(gpu_env *env);
/* Undoes gpu_open: stream, flashgen context, primary context, and a cache directory it made. */
void gpu_close(gpu_env *env);
/* Fills every SM's shared memory with all-ones bytes (NaN in fp16, bf16 and fp32) and waits: shared memory
 * keeps its contents from kernel to kernel, so a kernel that reads a tile's bytes it never wrote (a padding
 * column, a row past the end) sees NaN, which reaches its outputs, instead of whatever the last kernel left
 * (often finite, so such a read passes unseen). The launch helpers call it before each call they judge. */
void gpu_poison_shared(gpu_env *env);
/* 1 when the environment sets `name` to 0 (the runtime's switches for turning a family off). */
int env_is_zero(const char *name);
/* FLASHGEN_EMULATE_ARCH's value when the run emulates an older arch, else NULL. */
const char *emulated_arch(void);
/* The compute capability the runtime targets, times ten: the device's (90 on an H100/H200), or the
 * emulated arch's under FLASHGEN_EMULATE_ARCH. */
int gpu_cc(const gpu_env *env);
/* Makes a fresh 0700 directory under $TMPDIR (or /tmp) into buf; returns 0 or -1. */
int make_temp_dir(char *buf, size_t n);
/* Removes dir and everything below it (a directory a test created); "" is a no-op. */
void remove_tree(const char *dir);

/* ---- device buffers with a host image, and the checks of poisoned outputs (gpu_harness.c) ---- */

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
void make_strides(int ndim, const int64_t *shape, int padded, int64_t *stride);
/* Allocates b for a view of `ndim` dims (strides given, or contiguous when stride is NULL) followed by
 * `guard` guard elements, on the device and as a host image; `room` elements are added to the span. */
void dbuf_init(gpu_env *env, dbuf *b, fg_dtype dt, int ndim, const int64_t *shape, const int64_t *stride,
               int64_t guard, int64_t room);
/* Releases b's device allocation and host image; b is zeroed and may be freed again. */
void dbuf_free(gpu_env *env, dbuf *b);
/* Fills the view with N(0,1) values from `seed` (padding NaN) and uploads it. */
void dbuf_upload_random(gpu_env *env, dbuf *b, uint64_t seed);
/* Poisons the whole span with NaN (all-ones bytes) and writes the guard band. */
void dbuf_poison(gpu_env *env, dbuf *b);
/* Copies the span and guard band back into b's host image. */
void dbuf_download(gpu_env *env, dbuf *b);
/* Fails unless the guard band holds its pattern. */
void check_guard(const dbuf *b, const char *name);
/* Fails if any element of the span outside the view (padding of a strided output) lost its poison. */
void check_outside_view(const dbuf *b, const char *name);
/* Fails unless the whole span is still poisoned and the guard intact: nothing was written. */
void check_untouched(const dbuf *b, const char *name);

/* ---- one forward call (gpu_run.c) ---- */

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

/* A contiguous case with the default scale and the LSE requested. */
fwd_case mk(fg_dtype dt, int b, int sq, int sk, int hq, int hkv, int d, int causal);
/* Writes the case's one-line description into buf (n bytes). */
void case_name(const fwd_case *c, char *buf, size_t n);
/* Allocates and uploads a case's tensors and fills in the arguments. */
void run_setup(gpu_env *env, fwd_run *r, const fwd_case *c);
/* Poisons the outputs, calls fg_attention_fwd (or, with explicit tiles, the runtime's entry for an
 * explicit variant) on the stream, waits, and downloads the outputs. */
void run_launch(gpu_env *env, fwd_run *r);
/* Judges the downloaded outputs: guard bands, padding, then every element against the reference. */
void run_verify(fwd_run *r);
/* Releases every buffer of r. */
void run_free(gpu_env *env, fwd_run *r);
/* Fails unless a case's explicit sm_90a tiles are ones the family takes (checked without a GPU). */
void assert_sm90a_tiles_valid(const fwd_case *c);
/* Skips the calling test (closing env) on a GPU without FP8 mma.sync (below sm_89, or sm_87). */
void skip_without_fp8(gpu_env *env);
/* The whole life of one case: open, set up, launch, verify, free, close. */
void run_case(const fwd_case *c);

/* ---- other contexts, bundles and logs (gpu_run.c) ---- */

typedef struct log_sink {
    char text[8192]; /* every message, one per line */
} log_sink;

/* Another flashgen context on device 0: cache_dir NULL disables the disk cache. */
fg_context *extra_context(const char *cache_dir, int strict, fg_log_fn log, void *user);
/* The variant name on the first line of fg_explain's text ("variant NAME\n..."); text receives it all. */
void explained_variant(fg_context *ctx, const fg_fwd_args *a, char *name, size_t n, char *text, size_t tn);
/* Compiles the variant s ahead of time into an in-memory bundle and loads it into ctx. */
void bundle_one_into(fg_context *ctx, const fg_spec *s);
/* Runs r with ctx in place of env's own context, then checks every element. */
void launch_and_verify_with(gpu_env *env, fg_context *ctx, fwd_run *r);
/* An fg_log_fn that appends "LEVEL MESSAGE\n" to the log_sink `user`. */
void collect(void *user, fg_log_level level, const char *msg);

/* ---- one backward call (gpu_run.c) ---- */

/* One backward case: the forward of `c` runs first (its O and LSE are the backward's inputs, and are
 * checked), then fg_attention_bwd with a random dO, NaN-poisoned gradients with guard bands, and the
 * gradients against the fp32 reference with the 3x rule of ref_check_bwd (reference/reference.h). */
typedef struct bwd_run {
    fwd_run f;                 /* the forward: q, k, v, o, lse */
    dbuf dout, dq, dk, dv;     /* dO, and the gradients */
    CUdeviceptr ws;            /* the workspace */
    fg_bwd_args args;          /* what fg_attention_bwd receives */
    int tiles[4];              /* block_m, block_n, warps, stages of an explicit backward variant, or 0 */
} bwd_run;

/* Runs the forward of c and sets up its backward (c->tiles name the backward's variant; the forward
 * takes the policy's), with a workspace full of garbage. */
void bwd_setup(gpu_env *env, bwd_run *r, const fwd_case *c, int deterministic);
/* Poisons the gradients, runs the backward, downloads them. */
void bwd_launch(gpu_env *env, bwd_run *r);
/* Fails unless fg_explain_bwd names the family expected (sm90a: the sm_90a kernel, else mma.sync; tma >= 0:
 * whether the mma.sync kernel loads by TMA). */
void bwd_expect_family(gpu_env *env, bwd_run *r, int sm90a, int tma);
/* Judges the downloaded gradients: guard bands, padding, then every element against the reference. */
void bwd_verify(bwd_run *r);
/* Releases every buffer of r, the forward's included. */
void bwd_free(gpu_env *env, bwd_run *r);

#endif
