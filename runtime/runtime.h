/* runtime.h: the inside of fg_context, shared by context.c (life cycle, logging, bundles) and the files of
 * a call's path (dispatch.h lists them), and the rt_ entry points the tools and tests use. Not a public
 * header. */
#ifndef FG_RUNTIME_H
#define FG_RUNTIME_H

#include <pthread.h>
#include "runtime/bundle.h"
#include "runtime/cache.h"
#include "runtime/cuda_api.h"
#include "generator/spec.h"
#include "runtime/tiers.h"
#include "runtime/tunedb.h"

/* One loaded kernel: the in-memory cache entry. */
typedef struct fg_kernel {
    char name[FG_SPEC_NAME_MAX]; /* spec canonical text */
    fg_spec spec;                /* the variant */
    CUmodule module;             /* owns the code (a tier-up replaces it and the functions below, under the lock) */
    CUfunction fn;               /* FG_KERNEL_NAME in module; for kind=bwd the main kernel */
    CUfunction fn_pre, fn_post;  /* kind=bwd: fg_bwd_pre_kernel, fg_bwd_post_kernel (NULL for the forward) */
    CUfunction fn_map;           /* spec_mask_map variants: fg_mask_map_kernel (mod_classify.cuh); else NULL */
    const char *source;          /* where it came from: "JIT", "disk cache", "bundle" (a static string) */
    int quick;                   /* 1: the quick tier's build (tiers.h), until its tier-up replaces it */
} fg_kernel;

/* Streams that get a tile counter of their own (rt_launch_grid's dynamic schedule) per context. */
#define FG_TILE_CTRS 64
#define FG_STR_(x) #x
#define FG_STR(x) FG_STR_(x) /* a macro's value as a string literal */

struct fg_context {
    const fg_cuda_api *cu;       /* driver entry points */
    CUdevice device;             /* the device this context launches on */
    CUcontext cuctx;             /* its retained primary context */
    int arch;                    /* compute capability x 10 */
    int wgmma;                   /* 1: calls that fit run the sm_90a (wgmma, TMA) family: a 9.0 device, a driver
                                    with cuTensorMapEncodeTiled, and FLASHGEN_WGMMA not 0 */
    int wgmma_fp8;               /* FP8 calls take the sm_90a family too (unless FLASHGEN_WGMMA_FP8=0, which
                                    sends them to the mma.sync family, to measure one against the other) */
    int sm90_grid;               /* the sm_90a family's grid (FLASHGEN_SM90_GRID): 0 ("auto", or "dynamic", the
                                    same) persistent, tiles from a counter; 1 "tiles" one CTA per tile; 2
                                    "persistent" tiles in a fixed stride; for measuring the choice */
    int det_rotate;              /* the deterministic backward's rotated order (backward.c) may be taken; 0 with
                                    FLASHGEN_DET_ROTATE=0 (the ascending order, which needs no co-resident CTAs) */
    int causal_group;            /* FLASHGEN_CAUSAL_GROUP: 0 auto (rt_causal_group), else at most this many
                                    (head, batch) pairs per group of the causal tile order; for measuring the choice */
    int wgmma_bwd;               /* backward calls the sm_90a kernel takes (head_dim 64/128, not deterministic) run it
                                    on a wgmma-capable 9.0 device, unless FLASHGEN_WGMMA_BWD=0 (which sends them to the
                                    mma.sync kernel, to measure one against the other) */
    int bwd_tma;                 /* sm_90 unless FLASHGEN_BWD_TMA=0 (newer: =1): the mma.sync backward's tma=1
                                    variants (TMA loads) for calls whose Q, K, V, dO TMA can read, at
                                    head_dim 64, 128, 192 and 256 (rt_bwd_tma) */
    int pdl;                     /* the backward's main and post kernels are launched early, each waiting in the
                                    kernel for the one before (programmatic dependent launch): a 9.0+ device, a
                                    driver with cuLaunchKernelEx, and FLASHGEN_PDL not 0 (backward.c) */
    int emulated;                /* FLASHGEN_EMULATE_ARCH: `arch` is an older target than the device's (device_arch);
                                    kernels are compiled to its PTX and the driver compiles that for the device, so
                                    that arch's code paths run on this GPU (a test aid: timings are not that GPU's) */
    int device_arch;             /* the device's own compute capability x 10 */
    int sm_count;                /* multiprocessors */
    int l2_bytes;                /* L2 cache size (0 when the driver does not say) */
    double mem_bandwidth;        /* peak device-memory bytes a second, from the memory clock and bus width (0 when
                                    the driver does not say): the serving call's split count for decode */
    size_t smem_optin;           /* max dynamic shared memory per block (opt-in) */
    char device_name[256];       /* e.g. "NVIDIA H200" */
    fg_context_options opt;      /* options as given (cache_dir copied below) */
    int disk_ok;                 /* the disk cache is usable */
    fg_disk_cache disk;          /* its location */
    char disk_problem[1024];     /* why the disk cache is off, for fg_explain */
    fg_tile_policy policy;       /* default tiles */
    fg_bundle *bundles;          /* loaded bundles */
    int nbundles;                /* how many */
    fg_kernel *kernels;          /* in-memory cache */
    int nkernels, capkernels;    /* used / allocated */
    int dump;                    /* FLASHGEN_DUMP is set: write source, PTX and log of each JIT compile */
    char dump_dir[1024];         /* where */
    int tuned;                   /* a tuning database for this GPU is loaded */
    fg_tunedb tunedb;            /* it (records of every measured candidate) */
    char tunedb_note[1200];      /* its path and size, or why there is none (for fg_explain) */
    int last_kernel;             /* fast path: index in kernels of the last launched variant, or -1 */
    fg_tune_class last_class;    /* ... and the problem class it serves (sizes bucketed; the buckets
                                    matter only with a tuning database: the policy ignores them) */
    fg_dtype last_out_dtype;     /* ... and the dtype of O it writes (an FP8 class may write fp16 or bf16) */
    int last_wgmma;              /* ... and whether it is the sm_90a family (which needs TMA-ready tensors) */
    int fp8_accum_warned;        /* the FP8 mma.sync accumulation warning was logged (fg_attention_fwd) */
    CUdeviceptr tile_ctrs;       /* the sm_90a family's tile counters (fg_fwd_params.tile_counter): FG_TILE_CTRS
                                    pairs of ints, allocated and zeroed with the context (so a call never
                                    allocates, even while another thread captures a graph), 0 if that failed;
                                    a pair is zero between launches (each launch's last CTA puts it back) */
    struct {                     /* which stream owns each pair (guarded by lock) */
        void *stream;            /* the handle */
        unsigned long long id;   /* its cuStreamGetId (unique in the process, unlike a handle a destroyed
                                    stream's successor may reuse while the old one's kernel still runs) */
    } tile_ctr[FG_TILE_CTRS];
    int ntile_ctr;               /* pairs handed out; streams past FG_TILE_CTRS run one CTA per tile */
    int check_inputs;            /* FG_OPTION_CHECK_INPUTS (FLASHGEN_CHECK_INPUTS): serving calls check their
                                    device-resident lengths and tables on the host first (serving_args.c) */
    int prefill_sm90a;           /* the wgmma forward, FLASHGEN_PREFILL_SM90A not 0: serving prefill calls run its
                                    varlen variants (serving_prefill.c) */
    int tma_maps;                /* TMA tensor maps can be made and used: sm_90+, a driver with
                                    cuTensorMapEncodeTiled, not emulating an older arch */
    int serve_tma;               /* FLASHGEN_SERVE_TMA=1 on sm_90+: the serving kernel's tma=1 variants for calls
                                    whose keys are not paged (serving.c serve_tiles) */
    int num_splits;              /* FLASHGEN_NUM_SPLITS: 0 auto, else the serving calls' split count when
                                    they leave it to flashgen (for measuring the rule) */
    tiers_state tiers;           /* the JIT's tier-ups in the background (tiers.h; guarded by lock) */
    pthread_mutex_t lock;        /* guards kernels, bundles, the fast path and tiers */
};

/* Logs through the context's sink when level is enabled. */
void rt_log(fg_context *ctx, fg_log_level level, const char *fmt, ...) FG_PRINTF(3, 4);

/* Runs the forward pass with an explicit variant instead of the one dispatch would choose (the
 * autotuner times candidates through it). The arguments get every check fg_attention_fwd makes; the
 * spec must match the call (dtype, head_dim, mask) and the device (arch, shared memory). Its kernel is
 * found or built like any other (memory, bundles, disk, NVRTC). Errors go to err only. */
fg_status rt_fwd_with_spec(fg_context *ctx, const fg_spec *spec, const fg_fwd_args *a, void *stream, fg_error *err);
/* The variant fg_attention_fwd would run for call a on ctx (the call checked as fg_prepare checks it), into *s:
 * for the CLI's and the tests' checks, which must know what the kernel computes (an sm_90a FP8 variant with
 * wgmma row sums normalizes O by the sum of the e4m3-rounded P). Errors go to err only. */
fg_status rt_fwd_spec(fg_context *ctx, const fg_fwd_args *a, fg_spec *s, fg_error *err);
/* Whether the mma.sync backward variant s (tiles set, tma 0) takes its loads by TMA on this context when the
 * call's tensors allow them (select.c's select_bwd_spec; the tuner gives its candidates the same): sm_90+
 * with FLASHGEN_BWD_TMA not 0 (on by default on sm_90 only), head_dim 64, 128, 192 or 256, block_m a multiple of 64, two
 * stages, and the alignment slack fitting the device. */
int rt_bwd_tma(const fg_context *ctx, const fg_spec *s);
/* The backward with the variant given (the GPU tests' entry for tiles the policy does not choose): the call
 * is checked as fg_attention_bwd checks it, the variant against the call and this device. */
fg_status rt_bwd_with_spec(fg_context *ctx, const fg_spec *spec, const fg_bwd_args *a, void *stream, fg_error *err);

/* The serving forward (fg_attention_fwd_varlen) with the variant given (kind=serve: the GPU tests' entry for
 * tiles the rule does not choose); the call is checked as fg_attention_fwd_varlen checks it, the variant
 * against the call and this device. Errors go to err only. */
fg_status rt_varlen_with_spec(fg_context *ctx, const fg_spec *spec, const fg_varlen_args *args, void *stream,
                              fg_error *err);

/* The forward's schedule for a checked call of variant s (forward.c; exposed for the CPU tests): the
 * causal tile order's group of (head, batch) pairs (1: head by head; see the rule there), and the launch
 * grid for that group (returns an FG_GRID_* mode). A launch computes the group once for both. */
int rt_causal_group(const fg_context *ctx, const fg_spec *s, const fg_fwd_args *a);
/* The sm_90a family's schedules (rt_launch_grid): one CTA per tile; persistent CTAs taking tiles in a stride
 * of the grid; persistent CTAs taking them from a counter. The mma.sync family is always FG_GRID_TILES. */
enum { FG_GRID_TILES = 0, FG_GRID_STRIDE = 1, FG_GRID_DYNAMIC = 2 };
int rt_launch_grid(const fg_context *ctx, const fg_spec *s, const fg_fwd_args *a, int group, unsigned grid[3]);
/* The backward's causal order (backward.c; exposed for the CPU tests): how many heads' key blocks the sm_90a
 * main kernel interleaves, longest first (1: head by head, and always 1 for the mma.sync kernel). */
int rt_bwd_causal_group(const fg_context *ctx, const fg_spec *s, const fg_bwd_args *a);

/* Records "FN: ctx is NULL" where fg_last_error(NULL) finds it; returns FG_ERR_INVALID_ARGUMENT. */
fg_status rt_no_context(const char *fn);
/* Keeps err as the error fg_last_error(NULL) reports (calls that take no context: fg_mod_create); returns its status. */
fg_status rt_set_error_without_context(const fg_error *err);

/* Records a failure as this thread's last error on ctx and returns its status. */
fg_status rt_set_error(fg_context *ctx, const fg_error *err);

#endif
