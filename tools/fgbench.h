/* fgbench.h: what the files of the fgbench program share: fgbench.c (options, the device, the variant a
 * call runs, main), fgbench_speed.c (`fgbench speed`), fgbench_check.c (its CPU check of each output) and
 * fgbench_jit.c (`fgbench jit`). Messages, usage errors and option parsing are tools/harness.h's, the
 * timing loop autotune/timing.h's, threads core/pool.h's: the same as the flashgen program's. */
#ifndef FG_FGBENCH_H
#define FG_FGBENCH_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "flashgen.h"
#include "generator/spec.h"
#include "reference/reference.h"
#include "runtime/cuda_api.h"
#include "tools/harness.h"

/* The benchmark protocol's problem sizes. A test build may shrink them (-DPROTO_TOKENS=...) to run the
 * program against a CPU stand-in for the driver. */
#ifndef PROTO_TOKENS
#define PROTO_TOKENS 16384 /* batch x seqlen */
#endif
#ifndef PROTO_HIDDEN
#define PROTO_HIDDEN 2048  /* heads x head_dim */
#endif

#define MAX_LIST 32            /* entries in --head-dims or --seqlens */
#define MAX_COPIES 8           /* input sets rotated at most */
#define CHECK_ROWS 64          /* query rows per checked window (one work unit of the reference) */
#ifndef CHECK_BUDGET
#define CHECK_BUDGET 2.0e9     /* row x key x head_dim products the CPU check may spend per configuration */
#endif
#define CHECK_MIN_WINDOWS 3    /* first, middle and last rows of each checked head, whatever the budget */
#define WARMUP_MIN_MS 100.0    /* warm-up also lasts at least this much GPU time, so clocks settle */
#define WARMUP_MAX 20000       /* and at most this many launches */
#define INPUT_SEEDS 1          /* Q, K and V are filled with seeds 1, 2 and 3 */

/* The benchmark protocol's JIT targets and how `jit` measures them. */
#define TARGET_COLD_MS 1000.0  /* a cold compile of one variant */
#define TARGET_DISK_MS 2.0     /* a disk-cache hit */
#define TARGET_CALL_US 5.0     /* host overhead per call */
#define COLD_REPS 7            /* cold compiles, each in a fresh cache directory (7: single compiles vary widely on a shared host) */
#define DISK_REPS 20           /* disk-cache loads, each in a fresh context */
#define CALLS 10000            /* timed calls for the host overhead */
#define CALL_BATCH 100         /* calls between stream synchronizations: the launch queue never fills */
#define CALL_WARMUP 200        /* untimed calls first */
#define TINY_SEQLEN 128        /* the overhead problem: b = 1, sq = sk = 128, h = 1 */

/* ---- fgbench.c: messages, the device, problems and variants */

extern const char *bench_mode;  /* "speed" or "jit": the CMD of every message (say, usage_error) */
extern const char *bench_prog;  /* "fgbench speed" or "fgbench jit": prefixes the report's lines on stdout */
extern int release_failures;    /* cleanup driver calls that failed (each printed); exit status 1 */

/* Reports a driver call that failed while releasing something (nothing else can be done about it) and
 * remembers it for the exit status. */
void release_check(CUresult rc, const char *call, int line);
#define RELEASE(call) release_check((call), #call, __LINE__)

/* Checks a driver call in a function with an `fg_error *err` and a `fail:` label: a failure records the
 * call's text, file and line in err and jumps to the cleanup. */
#define CK(call)                                                                                   \
    do {                                                                                           \
        CUresult ck_rc_ = (call);                                                                  \
        if (ck_rc_ != CUDA_SUCCESS) {                                                              \
            cuda_api_fail(err, ck_rc_, #call, __FILE__, __LINE__);                                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Sorts v (n >= 1) in place and returns its median. */
double sort_median(double *v, int n);
/* The nearest-rank p-quantile (0 < p <= 1) of sorted v (n >= 1). */
double sorted_quantile(const double *v, int n, double p);

/* The GPU fgbench measures, with its primary context current on the main thread. */
typedef struct bench_device {
    const fg_cuda_api *cu; /* driver entry points */
    int ordinal;           /* --device */
    CUdevice dev;          /* its handle */
    CUcontext pctx;        /* its retained primary context (NULL until retained) */
    int pushed;            /* 1 while pctx is current on this thread */
    char name[256];        /* e.g. "NVIDIA H200" */
    int cc_major, cc_minor;/* compute capability */
    int sm_count;          /* multiprocessors */
    int l2_bytes;          /* L2 cache size */
    int driver_version;    /* e.g. 13000 for 13.0 */
    size_t total_mem;      /* device memory in bytes */
} bench_device;

/* Loads the driver, describes device `ordinal`, retains its primary context and makes it current on this
 * thread (fgbench's own allocations live there; fg_context_create retains the same context). Returns
 * FG_ERR_NO_DEVICE with the reason when there is no usable GPU. Undo with device_close, also on failure. */
fg_status device_open(bench_device *d, int ordinal, fg_error *err);
/* Pops and releases what device_open set up (safe after a partial device_open). */
void device_close(bench_device *d);
/* Prints the line every report starts with: device, driver, NVRTC and flashgen versions. */
void print_device(const bench_device *d);
/* Creates a flashgen context on the device (warnings logged; cache_dir NULL for the default). On failure
 * returns the status with the sentence in err; "no CUDA device: ..." when there is none. */
fg_status bench_context(const bench_device *d, const char *cache_dir, fg_context **ctx, fg_error *err);
/* A contiguous [b, s, h, d] tensor at data. */
fg_tensor bshd(void *data, fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d);
/* A contiguous fp32 [b, h, s] LSE tensor at data. */
fg_tensor bhs(void *data, int64_t b, int64_t h, int64_t s);
/* Forward arguments for a self-attention problem (sq = sk = s, as many K/V heads as Q heads) on contiguous
 * tensors at the given addresses; lse NULL leaves the LSE out. */
fg_fwd_args bench_args(fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int causal, void *q, void *k, void *v,
                       void *o, void *lse);
/* Asks fg_explain which variant would run for a: its canonical name into name (FG_SPEC_NAME_MAX bytes), the
 * parsed spec, and where its code would come from, in one word ("memory", "disk cache", "bundle", "JIT"). */
fg_status describe_variant(fg_context *ctx, const fg_fwd_args *a, char *name, fg_spec *spec, const char **origin,
                           fg_error *err);

/* ---- fgbench_speed.c and fgbench_check.c: `fgbench speed` */

typedef struct speed_opts {
    fg_dtype dtypes[2];      /* --dtype */
    int ndtypes;             /* 1 or 2 */
    int head_dims[MAX_LIST]; /* --head-dims */
    int nhead_dims;          /* count */
    int seqlens[MAX_LIST];   /* --seqlens */
    int nseqlens;            /* count */
    int causals[2];          /* --causal: 0, 1 or both */
    int ncausals;            /* 1 or 2 */
    int iters;               /* timed launches per configuration */
    int warmup;              /* untimed launches first (at least; see WARMUP_MIN_MS) */
    const char *csv;         /* --csv FILE, or NULL */
    int device;              /* --device */
} speed_opts;

/* One configuration of the sweep: the protocol's shape for (dtype, head_dim, mask, seqlen). */
typedef struct speed_cfg {
    fg_dtype dtype; /* element type */
    int head_dim;   /* d */
    int causal;     /* 0 or 1 */
    int seqlen;     /* sq = sk */
    int batch;      /* PROTO_TOKENS / seqlen, at least 1 */
    int heads;      /* PROTO_HIDDEN / head_dim, at least 1 */
} speed_cfg;

/* How a configuration ended; also indexes the table's words. */
typedef enum {
    RES_PENDING, /* not reached (the sweep stopped after a CUDA error) */
    RES_OK,      /* checked and timed */
    RES_WRONG,   /* the output failed the check: no time reported */
    RES_ERROR    /* a call failed (the message says which) */
} res_state;

/* What the sweep learned about one configuration. */
typedef struct speed_result {
    speed_cfg cfg;                  /* the configuration */
    res_state state;                /* what happened */
    char variant[FG_SPEC_NAME_MAX]; /* the spec that ran ("" before fg_explain) */
    fg_spec spec;                   /* parsed from variant (tiles for the table) */
    const char *origin;             /* where its code came from before fg_prepare */
    double prepare_s;               /* wall time of fg_prepare */
    double ms_median, ms_min, ms_max; /* kernel time over the timed launches */
    double tflops;                  /* FLOPs / median time */
    int warmup;                     /* warm-up launches actually run */
    int registers, spill;           /* from compile_spec, -1 when unknown */
    size_t smem;                    /* dynamic shared memory per block, bytes */
    double max_err, bound;          /* the check's max |out - ref32| and its bound */
    double check_s;                 /* CPU time of the check (wall) */
    char message[1024];             /* the check's account, or the failure */
} speed_result;

/* FLOPs of a configuration, FlashAttention's convention (causal counts half). */
static inline double cfg_flops(const speed_cfg *c) {
    return 4.0 * c->batch * c->heads * (double)c->seqlen * c->seqlen * c->head_dim * (c->causal ? 0.5 : 1.0);
}

/* Elements of one Q/K/V/O tensor of c. */
static inline size_t cfg_elems(const speed_cfg *c) {
    return (size_t)c->batch * (size_t)c->seqlen * (size_t)c->heads * (size_t)c->head_dim;
}

/* Elements of c's LSE. */
static inline size_t cfg_lse_elems(const speed_cfg *c) {
    return (size_t)c->batch * (size_t)c->heads * (size_t)c->seqlen;
}

/* Device and host buffers of a sweep, sized for its largest configuration and shared by all of them:
 * inputs are one flat random array per tensor (filled once per dtype) that each configuration reads
 * as its own [b, s, h, d]; `copies` sets are rotated so a launch never finds its inputs in L2. */
typedef struct speed_bufs {
    int copies;                 /* input sets rotated */
    size_t n_max;               /* elements of the largest Q/K/V/O */
    size_t lse_max;             /* elements of the largest LSE */
    size_t n_fill;              /* n_max rounded up to whole 64-element fill rows */
    CUdeviceptr q[MAX_COPIES], k[MAX_COPIES], v[MAX_COPIES], o[MAX_COPIES]; /* device sets (0: none) */
    CUdeviceptr lse[MAX_COPIES];/* device LSE per set */
    uint16_t *hq, *hk, *hv;     /* host inputs, n_fill elements */
    uint16_t *ho;               /* host copy of set 0's output, n_max elements */
    float *hlse;                /* host copy of set 0's LSE */
    CUstream stream;            /* non-blocking stream of every launch */
} speed_bufs;

/* The forward arguments of configuration c on input set `copy`. */
static inline fg_fwd_args cfg_args(const speed_cfg *c, const speed_bufs *B, int copy) {
    return bench_args(c->dtype, c->batch, c->seqlen, c->heads, c->head_dim, c->causal,
                        (void *)(uintptr_t)B->q[copy], (void *)(uintptr_t)B->k[copy], (void *)(uintptr_t)B->v[copy],
                        (void *)(uintptr_t)B->o[copy], (void *)(uintptr_t)B->lse[copy]);
}

/* Judges set 0's output of configuration r->cfg, already copied to the host (fgbench_check.c): the whole O
 * and LSE must be finite (they were poisoned with NaN before the launch, so this also catches unwritten
 * elements), and the planned windows must pass the reference's rule taken over all of them together:
 * max|out - ref32| <= 2 max|ref_lowp - ref32| + 1e-5 and every LSE row within tolerance. Sets *pass and
 * r->max_err, r->bound, r->message. Errors: out of memory, or the reference refusing a view. */
fg_status check_output(const speed_bufs *B, speed_result *r, int *pass, fg_error *err);

/* `fgbench speed`: the sweep on dev. Returns the exit status. */
int run_speed(const bench_device *dev, const speed_opts *o);

/* ---- fgbench_jit.c: `fgbench jit` */

typedef struct jit_opts {
    int head_dim;   /* --head-dim */
    fg_dtype dtype; /* --dtype */
    int causal;     /* --causal */
    int device;     /* --device */
} jit_opts;

/* `fgbench jit` on dev. Returns the exit status. */
int run_jit(const bench_device *dev, const jit_opts *o);

#endif
