/* fgbench.c: flashgen's benchmark program (build/fgbench).
 *
 *   fgbench speed   times the forward kernel on the shapes of the project's benchmark protocol
 *                   (ANCHORS.md: 16384 tokens = batch x seqlen, hidden 2048 = heads x head_dim, layout
 *                   [b, s, h, d]) and prints ms and TFLOP/s per configuration. Every configuration's
 *                   output is first checked on a slice against the CPU reference (reference/reference.h), so
 *                   a wrong kernel reports WRONG, never a speed.
 *   fgbench jit     measures what a user waits for: a cold NVRTC compile, a disk-cache load, and the host
 *                   time of one fg_attention_fwd call, against ANCHORS.md's JIT targets.
 *
 * Kernels run through the public API (include/flashgen.h). What that API does not show comes from the
 * internal modules: device memory, streams and events from the fg_cuda_api driver table (in the device's
 * primary context, the one fg_context_create retains too), registers from compile_spec, and in `jit` the
 * pieces of a disk-cache load (emit_source, cache_key, cache_get, cuModuleLoadData).
 *
 * Exit status: 0 when every measurement ran and every checked output was right (targets missed are
 * reported, not failures); 1 on a failure, a WRONG output, or no CUDA device ("no CUDA device: <reason>");
 * 2 on a usage error. */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/knobs.h"
#include "flashgen.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/cuda_api.h"
#include "generator/emit.h"
#include "templates/common/fg_params.h"
#include "reference/reference.h"
#include "generator/spec.h"

#define EXIT_OK 0
#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* The protocol's problem sizes (ANCHORS.md). A test build may shrink them (-DPROTO_TOKENS=...) to run the
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

/* The JIT targets of ANCHORS.md and how `jit` measures them. */
#define TARGET_COLD_MS 1000.0  /* a cold compile of one variant */
#define TARGET_DISK_MS 2.0     /* a disk-cache hit */
#define TARGET_CALL_US 5.0     /* host overhead per call */
#define COLD_REPS 7            /* cold compiles, each in a fresh cache directory (7: single runs vary by 40% on a shared host) */
#define DISK_REPS 20           /* disk-cache loads, each in a fresh context */
#define CALLS 10000            /* timed calls for the host overhead */
#define CALL_BATCH 100         /* calls between stream synchronizations: the launch queue never fills */
#define CALL_WARMUP 200        /* untimed calls first */
#define TINY_SEQLEN 128        /* the overhead problem: b = 1, sq = sk = 128, h = 1 */

/* ------------------------------------------------------------------ messages and small helpers */

static const char *prog = "fgbench";  /* "fgbench speed" or "fgbench jit": prefixes every message */
static int release_failures;          /* cleanup driver calls that failed (each printed); exit status 1 */

/* Prints "PROG: <sentence>" on stderr. */
static void say(const char *fmt, ...) FG_PRINTF(1, 2);
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Prints a usage error naming the option and the rule; returns EXIT_USAGE. */
static int usage_error(const char *fmt, ...) FG_PRINTF(1, 2);
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; see '%s --help'\n", prog);
    va_end(ap);
    return EXIT_USAGE;
}

/* Reports a driver call that failed while releasing something (nothing else can be done about it) and
 * remembers it for the exit status. */
static void release_check(CUresult rc, const char *call, int line) {
    if (rc == CUDA_SUCCESS) return;
    fg_error e;
    cuda_api_fail(&e, rc, call, __FILE__, line);
    say("warning: %s", e.msg);
    release_failures++;
}
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

/* Seconds on the monotonic clock. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* qsort order for doubles. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v (n >= 1) in place and returns its median. */
static double sort_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The nearest-rank p-quantile (0 < p <= 1) of sorted v (n >= 1). */
static double sorted_quantile(const double *v, int n, double p) {
    int i = (int)ceil(p * n) - 1;
    return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

/* Parses a whole decimal integer in [lo, hi] for option `opt`. Returns 0, or EXIT_USAGE after saying why. */
static int parse_int(const char *opt, const char *text, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi)
        return usage_error("%s '%s': expected an integer from %ld to %ld", opt, text, lo, hi);
    *out = (int)v;
    return 0;
}

/* Parses a comma-separated list of integers in [lo, hi] (at most MAX_LIST) into out; *n gets the count.
 * Returns 0, or EXIT_USAGE after saying why. */
static int parse_int_list(const char *opt, const char *text, long lo, long hi, int *out, int *n) {
    char buf[1024];
    if (strlen(text) >= sizeof buf) return usage_error("%s: the list is too long", opt);
    strcpy(buf, text);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) return usage_error("%s: at most %d values", opt, MAX_LIST);
        if (parse_int(opt, tok, lo, hi, &out[*n]) != 0) return EXIT_USAGE;
        (*n)++;
    }
    if (*n == 0) return usage_error("%s '%s': expected a comma-separated list of integers", opt, text);
    return 0;
}

/* Turns getopt_long's '?' (unknown option) or ':' (missing argument) into a usage error. */
static int bad_option(char **argv, int c) {
    const char *arg = argv[optind - 1];
    if (c == ':') return usage_error("option %s needs a value", arg);
    return usage_error("unknown option %s", arg);
}

/* ------------------------------------------------------------------ the device */

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
static fg_status device_open(bench_device *d, int ordinal, fg_error *err) {
    memset(d, 0, sizeof *d);
    d->ordinal = ordinal;
    d->cu = cuda_api_get(err);
    if (!d->cu) return err->status;
    const fg_cuda_api *cu = d->cu;
    int count = 0;
    FG_CU(err, cu->cuDeviceGetCount(&count));
    if (count == 0) return fg_fail(err, FG_ERR_NO_DEVICE, "the CUDA driver sees no device");
    if (ordinal >= count)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "--device %d: the driver sees only %d device%s", ordinal, count,
                       count == 1 ? "" : "s");
    FG_CU(err, cu->cuDeviceGet(&d->dev, ordinal));
    FG_CU(err, cu->cuDeviceGetName(d->name, (int)sizeof d->name, d->dev));
    FG_CU(err, cu->cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev));
    FG_CU(err, cu->cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev));
    FG_CU(err, cu->cuDeviceGetAttribute(&d->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev));
    FG_CU(err, cu->cuDeviceGetAttribute(&d->l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d->dev));
    FG_CU(err, cu->cuDeviceTotalMem(&d->total_mem, d->dev));
    FG_CU(err, cu->cuDriverGetVersion(&d->driver_version));
    FG_CU(err, cu->cuDevicePrimaryCtxRetain(&d->pctx, d->dev));
    FG_CU(err, cu->cuCtxPushCurrent(d->pctx));
    d->pushed = 1;
    return FG_OK;
}

/* Pops and releases what device_open set up (safe after a partial device_open). */
static void device_close(bench_device *d) {
    if (d->pushed) {
        CUcontext popped;
        RELEASE(d->cu->cuCtxPopCurrent(&popped));
        d->pushed = 0;
    }
    if (d->pctx) {
        RELEASE(d->cu->cuDevicePrimaryCtxRelease(d->dev));
        d->pctx = NULL;
    }
}

/* Prints the line every report starts with: device, driver, NVRTC and flashgen versions. */
static void print_device(const bench_device *d) {
    printf("%s: %s (sm_%d%d, %d SMs, %.0f MiB L2, %.0f GiB), driver %d.%d, NVRTC %s, flashgen %s\n", prog, d->name,
           d->cc_major, d->cc_minor, d->sm_count, d->l2_bytes / 1048576.0, (double)d->total_mem / 1073741824.0,
           d->driver_version / 1000, d->driver_version % 1000 / 10, compile_nvrtc_version(), FG_VERSION_STRING);
}

/* Creates a flashgen context on the device (warnings logged; cache_dir NULL for the default). On failure
 * says why and returns the status; "no CUDA device: ..." when there is none. */
static fg_status open_context(const bench_device *d, const char *cache_dir, fg_context **ctx, fg_error *err) {
    fg_context_options opt;
    fg_context_options_init(&opt);
    opt.device = d->ordinal;
    opt.cache_dir = cache_dir;
    opt.log_level = FG_LOG_WARN;
    fg_status st = fg_context_create(ctx, &opt);
    if (st != FG_OK)
        return fg_fail(err, st, "%sfg_context_create: %s", st == FG_ERR_NO_DEVICE ? "no CUDA device: " : "",
                       fg_last_error(NULL));
    return FG_OK;
}

/* ------------------------------------------------------------------ problems and variants */

/* A contiguous [b, s, h, d] tensor at data. */
static fg_tensor bshd(void *data, fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = 4;
    t.shape[0] = b, t.shape[1] = s, t.shape[2] = h, t.shape[3] = d;
    t.stride[0] = s * h * d, t.stride[1] = h * d, t.stride[2] = d, t.stride[3] = 1;
    return t;
}

/* A contiguous fp32 [b, h, s] LSE tensor at data. */
static fg_tensor bhs(void *data, int64_t b, int64_t h, int64_t s) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = FG_DTYPE_F32;
    t.ndim = 3;
    t.shape[0] = b, t.shape[1] = h, t.shape[2] = s;
    t.stride[0] = h * s, t.stride[1] = s, t.stride[2] = 1;
    return t;
}

/* Forward arguments for a self-attention problem (sq = sk = s, as many K/V heads as Q heads) on
 * contiguous tensors at the given addresses; lse NULL leaves the LSE out. */
static fg_fwd_args problem_args(fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int causal, void *q, void *k,
                                void *v, void *o, void *lse) {
    fg_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = bshd(q, dt, b, s, h, d);
    a.k = bshd(k, dt, b, s, h, d);
    a.v = bshd(v, dt, b, s, h, d);
    a.o = bshd(o, dt, b, s, h, d);
    if (lse) a.lse = bhs(lse, b, h, s);
    a.causal = causal;
    return a;
}

/* Where fg_explain says a variant's code would come from, in one word. */
static const char *origin_word(const char *code) {
    if (!code) return "unknown";
    if (strncmp(code, "already loaded", 14) == 0) return "memory";
    if (strncmp(code, "disk cache", 10) == 0) return "disk cache";
    if (strncmp(code, "a loaded bundle", 15) == 0) return "bundle";
    if (strncmp(code, "not compiled yet", 16) == 0) return "JIT";
    return "unknown";
}

/* Asks fg_explain which variant would run for a: its canonical name into name (FG_SPEC_NAME_MAX bytes),
 * the parsed spec, and where its code would come from (origin_word). */
static fg_status describe_variant(fg_context *ctx, const fg_fwd_args *a, char *name, fg_spec *spec,
                                  const char **origin, fg_error *err) {
    char buf[4096], fmt[32];
    *origin = "unknown";
    fg_status st = fg_explain(ctx, a, buf, sizeof buf);
    if (st != FG_OK) return fg_fail(err, st, "fg_explain: %s", fg_last_error(ctx));
    snprintf(fmt, sizeof fmt, "variant %%%ds", FG_SPEC_NAME_MAX - 1);
    if (sscanf(buf, fmt, name) != 1)
        return fg_fail(err, FG_ERR_INTERNAL, "fg_explain's text does not start with \"variant NAME\": %.200s", buf);
    if ((st = spec_parse(name, spec, err)) != FG_OK) return st;
    const char *code = strstr(buf, "\n  code: ");
    *origin = origin_word(code ? code + strlen("\n  code: ") : NULL);
    return FG_OK;
}

/* Registers and spills of variants, compiled once each just for the report. */
typedef struct variant_info {
    char name[FG_SPEC_NAME_MAX]; /* spec canonical text */
    int registers;               /* per thread; -1 when the compile failed */
    int spill;                   /* bytes of spill stores; -1 when unknown */
} variant_info;

/* The variants compiled for the report so far, so each is compiled once per run. */
typedef struct variant_cache {
    variant_info v[64]; /* one per variant seen (later ones are compiled every time) */
    int n;              /* used */
} variant_cache;

/* Looks the variant up in vc, else compiles it with compile_spec (once more: the runtime keeps no ptxas
 * report) and remembers registers and spills. A failed compile gives -1 and a warning. */
static void variant_registers(variant_cache *vc, const fg_spec *s, const char *name, int *regs, int *spill) {
    for (int i = 0; i < vc->n; i++)
        if (strcmp(vc->v[i].name, name) == 0) {
            *regs = vc->v[i].registers;
            *spill = vc->v[i].spill;
            return;
        }
    fg_compile_result cr;
    fg_error e;
    fg_error_clear(&e);
    *regs = *spill = -1;
    if (compile_spec(s, 0, &cr, &e) == FG_OK) {
        *regs = cr.registers;
        *spill = cr.spill_stores;
    } else {
        say("warning: compiling %s for its register count failed: %s", name, e.msg);
    }
    compile_result_free(&cr);
    if (vc->n < (int)(sizeof vc->v / sizeof vc->v[0])) {
        variant_info *v = &vc->v[vc->n++];
        snprintf(v->name, sizeof v->name, "%s", name);
        v->registers = *regs;
        v->spill = *spill;
    }
}

/* ------------------------------------------------------------------ speed: options and results */

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
static double cfg_flops(const speed_cfg *c) {
    return 4.0 * c->batch * c->heads * (double)c->seqlen * c->seqlen * c->head_dim * (c->causal ? 0.5 : 1.0);
}

/* Elements of one Q/K/V/O tensor of c. */
static size_t cfg_elems(const speed_cfg *c) {
    return (size_t)c->batch * (size_t)c->seqlen * (size_t)c->heads * (size_t)c->head_dim;
}

/* Elements of c's LSE. */
static size_t cfg_lse_elems(const speed_cfg *c) {
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
    CUevent *ev;                /* 2 x iters events: start and stop of each timed launch */
    int nev;                    /* created so far */
} speed_bufs;

/* The forward arguments of configuration c on input set `copy`. */
static fg_fwd_args cfg_args(const speed_cfg *c, const speed_bufs *B, int copy) {
    return problem_args(c->dtype, c->batch, c->seqlen, c->heads, c->head_dim, c->causal,
                        (void *)(uintptr_t)B->q[copy], (void *)(uintptr_t)B->k[copy], (void *)(uintptr_t)B->v[copy],
                        (void *)(uintptr_t)B->o[copy], (void *)(uintptr_t)B->lse[copy]);
}

/* ------------------------------------------------------------------ speed: the output check */

/* One checked window: CHECK_ROWS (or fewer) query rows of one (batch, head). */
typedef struct slice_task {
    int64_t b, h;      /* batch and head */
    int64_t r0, rows;  /* first query row and row count */
    ref_report rep;    /* the reference's findings on this window */
    fg_status st;      /* FG_OK, or the reference's failure */
    fg_error err;      /* that failure */
} slice_task;

/* The checking threads' shared work: host views of one configuration and the windows to check. */
typedef struct check_job {
    const speed_cfg *cfg;      /* the configuration */
    const uint16_t *q, *k, *v; /* host inputs, read as [b, s, h, d] */
    const uint16_t *o;         /* host output */
    const float *lse;          /* host LSE [b, h, s] */
    slice_task *tasks;         /* the windows */
    int ntasks;                /* their count */
    atomic_int next;           /* next window to take */
} check_job;

/* Checks one window with ref_check_fwd on host views of the full tensors. Causal masks are bottom-right
 * aligned: query row i sees keys j <= i (sq = sk here), so rows [r0, r0 + n) need keys [0, r0 + n) and,
 * as a sub-problem with sq' = n and sk' = r0 + n, keep exactly their mask (j <= i' + sk' - sq'). */
static void check_window(const check_job *j, slice_task *t) {
    const speed_cfg *c = j->cfg;
    const int64_t S = c->seqlen, H = c->heads, D = c->head_dim;
    const size_t base = (size_t)(t->b * S * H * D);
    const int64_t keys = c->causal ? t->r0 + t->rows : S;
    fg_tensor q = bshd((void *)(j->q + base + (size_t)(t->r0 * H * D + t->h * D)), c->dtype, 1, t->rows, 1, D);
    fg_tensor k = bshd((void *)(j->k + base + (size_t)(t->h * D)), c->dtype, 1, keys, 1, D);
    fg_tensor v = bshd((void *)(j->v + base + (size_t)(t->h * D)), c->dtype, 1, keys, 1, D);
    fg_tensor o = bshd((void *)(j->o + base + (size_t)(t->r0 * H * D + t->h * D)), c->dtype, 1, t->rows, 1, D);
    /* The views keep the full tensors' strides: row r of the window is row r0 + r of the head. */
    q.stride[0] = k.stride[0] = v.stride[0] = o.stride[0] = S * H * D;
    q.stride[1] = k.stride[1] = v.stride[1] = o.stride[1] = H * D;
    q.stride[2] = k.stride[2] = v.stride[2] = o.stride[2] = D;
    fg_tensor lse = bhs((void *)(j->lse + (size_t)((t->b * H + t->h) * S + t->r0)), 1, 1, t->rows);
    lse.stride[0] = H * S;
    lse.stride[1] = S;
    ref_problem p = {.q = q, .k = k, .v = v, .softmax_scale = 0.f, .causal = c->causal};
    fg_error_clear(&t->err);
    t->st = ref_check_fwd(&p, &o, &lse, &t->rep, &t->err);
}

/* A checking thread: takes windows until none is left. */
static void *check_worker(void *arg) {
    check_job *j = arg;
    for (;;) {
        int i = atomic_fetch_add(&j->next, 1);
        if (i >= j->ntasks) break;
        check_window(j, &j->tasks[i]);
    }
    return NULL;
}

/* Plans the checked windows of c: heads (batch 0, head 0), (batch 0, head 1) and (last batch, last
 * head), each cut into CHECK_ROWS-row windows; all of them when that fits CHECK_BUDGET, else as many as
 * fit (at least CHECK_MIN_WINDOWS) spread evenly from the first row to the last. Windows are listed
 * last-first, so the costliest causal ones start first. *tasks is malloc'd (caller frees). */
static fg_status plan_check(const speed_cfg *c, slice_task **tasks, int *ntasks, int *nheads, int *nwin,
                            fg_error *err) {
    int64_t heads[3][2] = {{0, 0}, {0, 1}, {c->batch - 1, c->heads - 1}};
    int nh = c->heads > 1 ? 2 : 1;
    if (heads[2][0] != heads[nh - 1][0] || heads[2][1] != heads[nh - 1][1]) {
        heads[nh][0] = heads[2][0];
        heads[nh][1] = heads[2][1];
        nh++;
    }
    const int64_t S = c->seqlen;
    const int64_t full = (S + CHECK_ROWS - 1) / CHECK_ROWS;
    const double per_window = (double)CHECK_ROWS * (double)S * c->head_dim * (c->causal ? 0.5 : 1.0);
    int64_t nw = full;
    if ((double)nh * (double)full * per_window > CHECK_BUDGET) {
        nw = (int64_t)(CHECK_BUDGET / (nh * per_window));
        if (nw < CHECK_MIN_WINDOWS) nw = CHECK_MIN_WINDOWS;
        if (nw > full) nw = full;
    }
    slice_task *t = calloc((size_t)(nh * nw), sizeof *t);
    if (!t) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory planning %lld checked windows", (long long)(nh * nw));
    int n = 0;
    for (int64_t w = nw - 1; w >= 0; w--)
        for (int hi = 0; hi < nh; hi++) {
            slice_task *x = &t[n++];
            x->b = heads[hi][0];
            x->h = heads[hi][1];
            if (nw == full) { /* every row: consecutive windows, the last one shorter */
                x->r0 = w * CHECK_ROWS;
                x->rows = S - x->r0 < CHECK_ROWS ? S - x->r0 : CHECK_ROWS;
            } else {          /* nw >= 2 windows over S > nw x CHECK_ROWS rows: first at row 0, last ending at S */
                x->r0 = (S - CHECK_ROWS) * w / (nw - 1);
                x->rows = CHECK_ROWS;
            }
        }
    *tasks = t;
    *ntasks = n;
    *nheads = nh;
    *nwin = (int)nw;
    return FG_OK;
}

/* Counts non-finite values among n fp16/bf16 values (exponent all ones: Inf or NaN); *first gets the
 * index of the first one, or -1. */
static int64_t count_nonfinite16(const uint16_t *x, size_t n, fg_dtype dt, int64_t *first) {
    const uint16_t mask = dt == FG_DTYPE_F16 ? 0x7C00 : 0x7F80;
    int64_t count = 0;
    *first = -1;
    for (size_t i = 0; i < n; i++)
        if ((x[i] & mask) == mask && count++ == 0) *first = (int64_t)i;
    return count;
}

/* Judges set 0's output of configuration r->cfg, already copied to the host: the whole O and LSE must be
 * finite (they were poisoned with NaN before the launch, so this also catches unwritten elements), and the
 * planned windows must pass the reference's rule taken over all of them together:
 * max|out - ref32| <= 2 max|ref_lowp - ref32| + 1e-5 and every LSE row within tolerance.
 * Sets *pass and r->max_err, r->bound, r->message. Errors: out of memory, or the reference refusing a view. */
static fg_status check_output(const speed_bufs *B, speed_result *r, int *pass, fg_error *err) {
    const speed_cfg *c = &r->cfg;
    double t0 = now_s();
    *pass = 0;
    int64_t o_first, lse_first = -1, lse_nonfinite = 0;
    int64_t o_nonfinite = count_nonfinite16(B->ho, cfg_elems(c), c->dtype, &o_first);
    for (size_t i = 0; i < cfg_lse_elems(c); i++)
        if (!isfinite(B->hlse[i]) && lse_nonfinite++ == 0) lse_first = (int64_t)i;

    check_job j;
    memset(&j, 0, sizeof j);
    j.cfg = c;
    j.q = B->hq, j.k = B->hk, j.v = B->hv, j.o = B->ho, j.lse = B->hlse;
    atomic_init(&j.next, 0);
    int nheads = 0, nwin = 0;
    fg_status st = plan_check(c, &j.tasks, &j.ntasks, &nheads, &nwin, err);
    if (st != FG_OK) return st;

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = cores < 1 ? 1 : (cores > 256 ? 256 : (int)cores);
    if (nthreads > j.ntasks) nthreads = j.ntasks;
    pthread_t th[256];
    int started = 0;
    for (int i = 1; i < nthreads; i++) { /* a thread that cannot start is not needed: the others drain the queue */
        if (pthread_create(&th[started], NULL, check_worker, &j) != 0) break;
        started++;
    }
    check_worker(&j);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);

    double max_lowp = 0, lse_max = 0;
    const slice_task *worst = NULL, *lse_bad_first = NULL;
    int64_t nonfinite = 0, lse_bad = 0;
    for (int i = 0; i < j.ntasks; i++) {
        const slice_task *t = &j.tasks[i];
        if (t->st != FG_OK) {
            st = fg_fail(err, t->st, "the CPU reference failed on batch %lld, head %lld, rows %lld..%lld: %s",
                         (long long)t->b, (long long)t->h, (long long)t->r0, (long long)(t->r0 + t->rows - 1),
                         t->err.msg);
            free(j.tasks);
            return st;
        }
        if (t->rep.max_lowp_err > max_lowp) max_lowp = t->rep.max_lowp_err;
        if (!worst || t->rep.max_err > worst->rep.max_err) worst = t;
        if (t->rep.lse_max_err > lse_max) lse_max = t->rep.lse_max_err;
        nonfinite += t->rep.nonfinite;
        lse_bad += t->rep.lse_bad;
        if (t->rep.lse_bad > 0 &&
            (!lse_bad_first || t->b < lse_bad_first->b || (t->b == lse_bad_first->b && t->h < lse_bad_first->h) ||
             (t->b == lse_bad_first->b && t->h == lse_bad_first->h && t->r0 < lse_bad_first->r0)))
            lse_bad_first = t; /* the lowest (batch, head, row): reports do not depend on thread timing */
    }
    if (!worst) { /* plan_check always plans a window; this keeps a broken plan from reading NULL */
        free(j.tasks);
        return fg_fail(err, FG_ERR_INTERNAL, "no window was checked for seqlen %d", c->seqlen);
    }
    r->max_err = worst->rep.max_err;
    r->bound = 2.0 * max_lowp + 1e-5;
    *pass = o_nonfinite == 0 && lse_nonfinite == 0 && nonfinite == 0 && lse_bad == 0 && r->max_err <= r->bound;
    int64_t rows = (int64_t)nwin * CHECK_ROWS < c->seqlen ? (int64_t)nwin * CHECK_ROWS : c->seqlen;
    int k = snprintf(r->message, sizeof r->message,
                     "max|out-ref32| %.3g %s bound %.3g, LSE max err %.3g; %d head%s x %lld of %d rows checked",
                     r->max_err, r->max_err <= r->bound ? "<=" : "EXCEEDS", r->bound, lse_max, nheads,
                     nheads == 1 ? "" : "s", (long long)rows, c->seqlen);
    if (!*pass && k > 0 && (size_t)k < sizeof r->message) {
        const int64_t *w = worst->rep.worst;
        k += snprintf(r->message + k, sizeof r->message - (size_t)k,
                      "; worst at [b %lld, s %lld, h %lld, d %lld]: out %.6g, ref %.6g; %lld non-finite in the "
                      "checked rows, %lld of %zu in all of O, %lld of %zu LSE rows",
                      (long long)worst->b, (long long)(worst->r0 + w[1]), (long long)worst->h, (long long)w[3],
                      worst->rep.worst_out, worst->rep.worst_ref, (long long)nonfinite, (long long)o_nonfinite,
                      cfg_elems(c), (long long)lse_nonfinite, cfg_lse_elems(c));
        if (o_first >= 0 && k > 0 && (size_t)k < sizeof r->message) {
            int64_t x = o_first, d = x % c->head_dim, h = x / c->head_dim % c->heads;
            int64_t s = x / ((int64_t)c->head_dim * c->heads) % c->seqlen;
            int64_t b = x / ((int64_t)c->head_dim * c->heads * c->seqlen);
            k += snprintf(r->message + k, sizeof r->message - (size_t)k, " (first in O at [%lld, %lld, %lld, %lld])",
                          (long long)b, (long long)s, (long long)h, (long long)d);
        }
        if (lse_first >= 0 && k > 0 && (size_t)k < sizeof r->message) {
            int64_t s = lse_first % c->seqlen, h = lse_first / c->seqlen % c->heads;
            int64_t b = lse_first / ((int64_t)c->seqlen * c->heads);
            k += snprintf(r->message + k, sizeof r->message - (size_t)k, " (first in LSE at [%lld, %lld, %lld])",
                          (long long)b, (long long)h, (long long)s);
        }
        if (lse_bad_first && k > 0 && (size_t)k < sizeof r->message) {
            const ref_report *lr = &lse_bad_first->rep;
            snprintf(r->message + k, sizeof r->message - (size_t)k,
                     "; %lld LSE rows out of tolerance, first [b %lld, h %lld, s %lld]: %.9g vs ref %.9g",
                     (long long)lse_bad, (long long)lse_bad_first->b, (long long)lse_bad_first->h,
                     (long long)(lse_bad_first->r0 + lr->lse_first_bad[2]), lr->lse_first_bad_val,
                     lr->lse_first_bad_ref);
        }
    }
    free(j.tasks);
    r->check_s = now_s() - t0;
    return FG_OK;
}

/* ------------------------------------------------------------------ speed: one configuration */

/* Prepares, checks and times configuration r->cfg. A wrong output sets r->state = RES_WRONG and returns
 * FG_OK; any failure returns its status (FG_ERR_CUDA: the CUDA context may be unusable) with the
 * sentence in err; success sets RES_OK and the timings. */
static fg_status bench_one(const bench_device *dev, fg_context *ctx, speed_bufs *B, variant_cache *vc,
                           const speed_opts *o, speed_result *r, fg_error *err) {
    const fg_cuda_api *cu = dev->cu;
    const speed_cfg *c = &r->cfg;
    fg_fwd_args a0 = cfg_args(c, B, 0);
    fg_status st;
    double *ms = NULL;

    if ((st = describe_variant(ctx, &a0, r->variant, &r->spec, &r->origin, err)) != FG_OK) return st;
    r->smem = spec_smem_bytes(&r->spec);
    if (strcmp(r->origin, "JIT") == 0) {
        fprintf(stderr, "%s: compiling %s with NVRTC ...\n", prog, r->variant);
        fflush(stderr);
    }
    double t0 = now_s();
    st = fg_prepare(ctx, &a0);
    r->prepare_s = now_s() - t0;
    if (st != FG_OK) return fg_fail(err, st, "fg_prepare: %s", fg_last_error(ctx));
    variant_registers(vc, &r->spec, r->variant, &r->registers, &r->spill);

    /* The checked launch, on poisoned outputs. Memsets run on the legacy stream, which the non-blocking
     * launch stream does not wait for: synchronize the context before launching. */
    size_t n = cfg_elems(c), nl = cfg_lse_elems(c);
    float first_ms = 0.f;
    CK(cu->cuMemsetD8(B->o[0], 0xFF, n * 2));
    CK(cu->cuMemsetD8(B->lse[0], 0xFF, nl * sizeof(float)));
    CK(cu->cuCtxSynchronize());
    CK(cu->cuEventRecord(B->ev[0], B->stream));
    if ((st = fg_attention_fwd(ctx, &a0, B->stream)) != FG_OK)
        return fg_fail(err, st, "fg_attention_fwd: %s", fg_last_error(ctx));
    CK(cu->cuEventRecord(B->ev[1], B->stream));
    CK(cu->cuStreamSynchronize(B->stream));
    CK(cu->cuEventElapsedTime(&first_ms, B->ev[0], B->ev[1]));
    CK(cu->cuMemcpyDtoH(B->ho, B->o[0], n * 2));
    CK(cu->cuMemcpyDtoH(B->hlse, B->lse[0], nl * sizeof(float)));
    int pass = 0;
    if ((st = check_output(B, r, &pass, err)) != FG_OK) return st;
    if (!pass) {
        r->state = RES_WRONG;
        return FG_OK;
    }

    /* Warm-up, then one event pair around each timed launch; sets rotate from launch to launch. */
    int warm = o->warmup;
    if (first_ms > 0.f && WARMUP_MIN_MS / first_ms > warm)
        warm = WARMUP_MIN_MS / first_ms > WARMUP_MAX ? WARMUP_MAX : (int)ceil(WARMUP_MIN_MS / first_ms);
    r->warmup = warm;
    int set = 1 % B->copies;
    for (int i = 0; i < warm; i++, set = (set + 1) % B->copies) {
        fg_fwd_args a = cfg_args(c, B, set);
        if ((st = fg_attention_fwd(ctx, &a, B->stream)) != FG_OK)
            return fg_fail(err, st, "fg_attention_fwd (warm-up): %s", fg_last_error(ctx));
    }
    for (int i = 0; i < o->iters; i++, set = (set + 1) % B->copies) {
        fg_fwd_args a = cfg_args(c, B, set);
        CK(cu->cuEventRecord(B->ev[2 * i], B->stream));
        if ((st = fg_attention_fwd(ctx, &a, B->stream)) != FG_OK)
            return fg_fail(err, st, "fg_attention_fwd (timed): %s", fg_last_error(ctx));
        CK(cu->cuEventRecord(B->ev[2 * i + 1], B->stream));
    }
    CK(cu->cuEventSynchronize(B->ev[2 * o->iters - 1]));
    ms = malloc((size_t)o->iters * sizeof *ms);
    if (!ms) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for %d timings", o->iters);
    for (int i = 0; i < o->iters; i++) {
        float t = 0.f;
        CK(cu->cuEventElapsedTime(&t, B->ev[2 * i], B->ev[2 * i + 1]));
        ms[i] = t;
    }
    r->ms_median = sort_median(ms, o->iters);
    r->ms_min = ms[0];
    r->ms_max = ms[o->iters - 1];
    r->tflops = r->ms_median > 0 ? cfg_flops(c) / (r->ms_median * 1e-3) / 1e12 : 0.0;
    r->state = RES_OK;
    free(ms);
    return FG_OK;
fail:
    free(ms);
    return err->status;
}

/* ------------------------------------------------------------------ speed: the sweep */

/* "128x64 w8 s2": the tiles of a spec. */
static void tiles_text(const fg_spec *s, char *buf, size_t n) {
    snprintf(buf, n, "%dx%d w%d s%d", s->block_m, s->block_n, s->warps, s->stages);
}

/* Prints the result table (and the sentence of each row that did not end OK). */
static void print_table(const speed_result *res, int n) {
    printf("\n%-5s %4s %-6s %6s %5s %5s  %-14s %10s %10s %8s %5s %5s %8s  %s\n", "dtype", "d", "mask", "seqlen", "batch",
           "heads", "tiles", "median ms", "min ms", "TFLOP/s", "regs", "spill", "smem KiB", "check");
    for (int i = 0; i < n; i++) {
        const speed_result *r = &res[i];
        const speed_cfg *c = &r->cfg;
        char tiles[48] = "-", regs[16] = "-", spill[16] = "-", smem[16] = "-";
        if (r->variant[0]) {
            tiles_text(&r->spec, tiles, sizeof tiles);
            snprintf(smem, sizeof smem, "%.1f", (double)r->smem / 1024.0);
            if (r->registers >= 0) snprintf(regs, sizeof regs, "%d", r->registers);
            if (r->spill >= 0) snprintf(spill, sizeof spill, "%d", r->spill);
        }
        printf("%-5s %4d %-6s %6d %5d %5d  %-14s ", dtype_name(c->dtype), c->head_dim, c->causal ? "causal" : "none",
               c->seqlen, c->batch, c->heads, tiles);
        if (r->state == RES_OK)
            printf("%10.4f %10.4f %8.1f ", r->ms_median, r->ms_min, r->tflops);
        else
            printf("%10s %10s %8s ", "-", "-", "-");
        static const char *const state_word[] = {"SKIPPED", "ok", "WRONG", "ERROR"};
        printf("%5s %5s %8s  %s\n", regs, spill, smem, state_word[r->state]);
    }
    int notes = 0;
    for (int i = 0; i < n; i++) {
        const speed_result *r = &res[i];
        if (r->state == RES_OK || !r->message[0]) continue;
        if (notes++ == 0) printf("\n");
        printf("%s d=%d %s seqlen=%d: %s: %s\n", dtype_name(r->cfg.dtype), r->cfg.head_dim,
               r->cfg.causal ? "causal" : "none", r->cfg.seqlen, r->state == RES_WRONG ? "WRONG" : "ERROR", r->message);
    }
}

/* Writes the results as CSV to path (one header line, one line per configuration). */
static fg_status write_csv(const char *path, const speed_result *res, int n, const speed_opts *o, int copies,
                           fg_error *err) {
    FILE *f = fopen(path, "w");
    if (!f) return fg_fail(err, FG_ERR_IO, "--csv %s: cannot create it: %s", path, strerror(errno));
    fprintf(f, "dtype,head_dim,causal,seqlen,batch,heads,variant,block_m,block_n,warps,stages,status,ms_median,ms_min,"
               "ms_max,tflops,registers,spill_bytes,smem_bytes,max_err,bound,iters,warmup,copies\n");
    static const char *const status[] = {"skipped", "ok", "wrong", "error"};
    for (int i = 0; i < n; i++) {
        const speed_result *r = &res[i];
        const speed_cfg *c = &r->cfg;
        fprintf(f, "%s,%d,%d,%d,%d,%d,\"%s\",%d,%d,%d,%d,%s,", dtype_name(c->dtype), c->head_dim, c->causal,
                c->seqlen, c->batch, c->heads, r->variant, r->spec.block_m, r->spec.block_n, r->spec.warps,
                r->spec.stages, status[r->state]);
        if (r->state == RES_OK)
            fprintf(f, "%.6f,%.6f,%.6f,%.3f,", r->ms_median, r->ms_min, r->ms_max, r->tflops);
        else
            fprintf(f, ",,,,");
        fprintf(f, "%d,%d,%zu,%.6g,%.6g,%d,%d,%d\n", r->registers, r->spill, r->smem, r->max_err, r->bound, o->iters,
                r->warmup, copies);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return fg_fail(err, FG_ERR_IO, "--csv %s: writing it failed: %s", path, strerror(errno));
    return FG_OK;
}

/* How many input sets to rotate: enough that the data touched between two uses of one set is at least
 * three times the L2 (and at least two sets, so consecutive launches never share inputs), within half the
 * device memory. Returns the count and says why when only one set fits. */
static int choose_copies(const bench_device *dev, size_t set_min, size_t set_max) {
    double l2 = dev->l2_bytes > 0 ? (double)dev->l2_bytes : 0.0;
    double want = set_min > 0 ? ceil(3.0 * l2 / (double)set_min) : 2.0;
    int copies = want < 2.0 ? 2 : (want > MAX_COPIES ? MAX_COPIES : (int)want);
    while (copies > 1 && (double)copies * (double)set_max > 0.5 * (double)dev->total_mem) copies--;
    if (copies == 1)
        say("note: one input set is %.0f MiB; two would exceed half of the device's %.0f MiB, so the same set is "
            "reused and the tail of one launch's inputs may still be in L2 for the next",
            (double)set_max / 1048576.0, (double)dev->total_mem / 1048576.0);
    return copies;
}

/* `fgbench speed`: the sweep. Returns the exit status. */
static int run_speed(const bench_device *dev, const speed_opts *o) {
    const fg_cuda_api *cu = dev->cu;
    fg_error e;
    fg_error_clear(&e);
    fg_error *err = &e;
    int status = EXIT_FAIL;
    fg_context *ctx = NULL;
    speed_bufs B;
    memset(&B, 0, sizeof B);
    variant_cache *vc = calloc(1, sizeof *vc);
    int ncfg = o->ndtypes * o->nhead_dims * o->ncausals * o->nseqlens;
    speed_result *res = calloc((size_t)ncfg, sizeof *res);
    if (!vc || !res) {
        fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for %d results", ncfg);
        goto fail;
    }

    /* The configurations, dtype outermost (inputs are filled once per dtype), and the buffer sizes. */
    int n = 0;
    size_t set_min = SIZE_MAX, set_max = 0;
    for (int a = 0; a < o->ndtypes; a++)
        for (int b = 0; b < o->nhead_dims; b++)
            for (int c = 0; c < o->ncausals; c++)
                for (int s = 0; s < o->nseqlens; s++) {
                    speed_cfg *x = &res[n++].cfg;
                    x->dtype = o->dtypes[a];
                    x->head_dim = o->head_dims[b];
                    x->causal = o->causals[c];
                    x->seqlen = o->seqlens[s];
                    x->batch = PROTO_TOKENS / x->seqlen > 0 ? PROTO_TOKENS / x->seqlen : 1;
                    x->heads = PROTO_HIDDEN / x->head_dim > 0 ? PROTO_HIDDEN / x->head_dim : 1;
                    size_t ne = cfg_elems(x), nl = cfg_lse_elems(x), set = 4 * ne * 2 + nl * sizeof(float);
                    if (ne > B.n_max) B.n_max = ne;
                    if (nl > B.lse_max) B.lse_max = nl;
                    if (set < set_min) set_min = set;
                    if (set > set_max) set_max = set;
                }
    B.n_fill = (B.n_max + 63) / 64 * 64;
    B.copies = choose_copies(dev, set_min, set_max);

    B.hq = malloc(B.n_fill * 2);
    B.hk = malloc(B.n_fill * 2);
    B.hv = malloc(B.n_fill * 2);
    B.ho = malloc(B.n_max * 2);
    B.hlse = malloc(B.lse_max * sizeof(float));
    B.ev = calloc((size_t)(2 * o->iters), sizeof *B.ev);
    if (!B.hq || !B.hk || !B.hv || !B.ho || !B.hlse || !B.ev) {
        fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for inputs of %zu elements", B.n_fill);
        goto fail;
    }
    if (open_context(dev, NULL, &ctx, err) != FG_OK) goto fail;
    CK(cu->cuStreamCreate(&B.stream, CU_STREAM_NON_BLOCKING));
    for (; B.nev < 2 * o->iters; B.nev++) CK(cu->cuEventCreate(&B.ev[B.nev], CU_EVENT_DEFAULT));
    for (int i = 0; i < B.copies; i++) {
        CK(cu->cuMemAlloc(&B.q[i], B.n_max * 2));
        CK(cu->cuMemAlloc(&B.k[i], B.n_max * 2));
        CK(cu->cuMemAlloc(&B.v[i], B.n_max * 2));
        CK(cu->cuMemAlloc(&B.o[i], B.n_max * 2));
        CK(cu->cuMemAlloc(&B.lse[i], B.lse_max * sizeof(float)));
    }
    print_device(dev);
    printf("%s: protocol: batch = %d / seqlen, heads = %d / head_dim, layout [b, s, h, d], LSE written; median of %d "
           "timed launches after >= %d warm-up launches and >= %.0f ms; %d input set%s of %.0f MiB %s "
           "(L2 %.0f MiB)\n",
           prog, PROTO_TOKENS, PROTO_HIDDEN, o->iters, o->warmup, WARMUP_MIN_MS, B.copies, B.copies == 1 ? "" : "s",
           (double)set_max / 1048576.0, B.copies == 1 ? "(not rotated)" : "rotated", dev->l2_bytes / 1048576.0);
    fflush(stdout);

    int aborted = 0, all_ok = 1;
    int filled = -1; /* the dtype the inputs hold, -1 before the first fill */
    for (int i = 0; i < ncfg && !aborted; i++) {
        speed_result *r = &res[i];
        if ((int)r->cfg.dtype != filled) {
            /* The inputs of this dtype: flat N(0, 1) arrays read by every configuration as its own shape. */
            double t0 = now_s();
            fg_tensor flat[3] = {bshd(B.hq, r->cfg.dtype, 1, (int64_t)(B.n_fill / 64), 1, 64),
                                 bshd(B.hk, r->cfg.dtype, 1, (int64_t)(B.n_fill / 64), 1, 64),
                                 bshd(B.hv, r->cfg.dtype, 1, (int64_t)(B.n_fill / 64), 1, 64)};
            for (int t = 0; t < 3; t++)
                if (ref_fill_normal(&flat[t], INPUT_SEEDS + (uint64_t)t, err) != FG_OK) goto fail;
            for (int c = 0; c < B.copies; c++) {
                CK(cu->cuMemcpyHtoD(B.q[c], B.hq, B.n_max * 2));
                CK(cu->cuMemcpyHtoD(B.k[c], B.hk, B.n_max * 2));
                CK(cu->cuMemcpyHtoD(B.v[c], B.hv, B.n_max * 2));
            }
            CK(cu->cuCtxSynchronize()); /* pageable uploads may still be in flight when they return */
            filled = (int)r->cfg.dtype;
            fprintf(stderr, "%s: %s inputs filled and uploaded in %.1f s\n", prog, dtype_name(r->cfg.dtype),
                    now_s() - t0);
        }
        fg_error cerr;
        fg_error_clear(&cerr);
        fg_status st = bench_one(dev, ctx, &B, vc, o, r, &cerr);
        const speed_cfg *c = &r->cfg;
        fprintf(stderr, "%s: [%d/%d] %s d=%d %s seqlen=%d (batch %d, heads %d): ", prog, i + 1, ncfg,
                dtype_name(c->dtype), c->head_dim, c->causal ? "causal" : "none", c->seqlen, c->batch, c->heads);
        if (st != FG_OK) {
            r->state = RES_ERROR;
            snprintf(r->message, sizeof r->message, "%s", cerr.msg);
            fprintf(stderr, "ERROR: %s\n", cerr.msg);
            all_ok = 0;
            if (st == FG_ERR_CUDA) { /* a CUDA error may leave the context unusable: stop here */
                say("stopping the sweep after a CUDA error; the rest is not measured");
                aborted = 1;
            }
        } else {
            fprintf(stderr, "prepare %.2f s (%s), check %s in %.1f s (%s)", r->prepare_s, r->origin,
                    r->state == RES_OK ? "ok" : "WRONG", r->check_s, r->message);
            if (r->state == RES_OK)
                fprintf(stderr, ", %.4f ms, %.1f TFLOP/s\n", r->ms_median, r->tflops);
            else
                fprintf(stderr, "\n");
            if (r->state != RES_OK) all_ok = 0;
        }
    }
    print_table(res, ncfg);
    if (o->csv) {
        if (write_csv(o->csv, res, ncfg, o, B.copies, err) != FG_OK) goto fail;
        printf("\nwrote %s\n", o->csv);
    }
    status = all_ok && !aborted ? EXIT_OK : EXIT_FAIL;
    goto cleanup;
fail:
    say("%s", err->msg);
cleanup:
    for (int i = 0; i < B.nev; i++) RELEASE(cu->cuEventDestroy(B.ev[i]));
    if (B.stream) RELEASE(cu->cuStreamDestroy(B.stream));
    for (int i = 0; i < MAX_COPIES; i++) {
        if (B.q[i]) RELEASE(cu->cuMemFree(B.q[i]));
        if (B.k[i]) RELEASE(cu->cuMemFree(B.k[i]));
        if (B.v[i]) RELEASE(cu->cuMemFree(B.v[i]));
        if (B.o[i]) RELEASE(cu->cuMemFree(B.o[i]));
        if (B.lse[i]) RELEASE(cu->cuMemFree(B.lse[i]));
    }
    fg_context_destroy(ctx);
    free(B.ev);
    free(B.hq);
    free(B.hk);
    free(B.hv);
    free(B.ho);
    free(B.hlse);
    free(res);
    free(vc);
    return status;
}

/* ------------------------------------------------------------------ jit */

typedef struct jit_opts {
    int head_dim;   /* --head-dim */
    fg_dtype dtype; /* --dtype */
    int causal;     /* --causal */
    int device;     /* --device */
} jit_opts;

/* nftw callback of remove_tree: removes one entry, warning when it cannot. */
static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) != 0)
        say("warning: could not remove %s: %s", path, strerror(errno));
    return 0;
}

/* Removes dir and everything below it (symbolic links are removed, not followed). */
static void remove_tree(const char *dir) {
    if (dir[0] && nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        say("warning: could not remove %s: %s", dir, strerror(errno));
}

/* "PASS (0.62x the target)" or "MISS (1.45x the target)". */
static const char *verdict(double measured, double target, char *buf, size_t n) {
    snprintf(buf, n, "%s (%.2fx the target)", measured <= target ? "PASS" : "MISS", measured / target);
    return buf;
}

/* Results of the host-overhead measurement. */
typedef struct call_stats {
    double median_us, mean_us, p99_us; /* per call, host time until the call returns */
} call_stats;

/* One call to time: returns 0, or a failure status after recording the sentence in err. */
typedef int (*call_fn)(void *user, fg_error *err);

/* Times CALLS calls of fn(user), each alone on the host clock, after CALL_WARMUP untimed ones, in batches
 * of CALL_BATCH with a stream synchronization between batches (not timed), so the launch queue never fills
 * and no timed call waits on the GPU. Fills *out; returns fn's failure or a driver failure with err set. */
static fg_status time_calls(const fg_cuda_api *cu, CUstream stream, call_fn fn, void *user, call_stats *out,
                            fg_error *err) {
    double *t = malloc(CALLS * sizeof *t);
    if (!t) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for %d timings", CALLS);
    for (int i = 0; i < CALL_WARMUP; i++)
        if (fn(user, err) != 0) goto fail;
    CK(cu->cuStreamSynchronize(stream));
    double sum = 0;
    for (int i = 0; i < CALLS;) {
        for (int k = 0; k < CALL_BATCH && i < CALLS; k++, i++) {
            double t0 = now_s();
            int rc = fn(user, err);
            t[i] = (now_s() - t0) * 1e6;
            if (rc != 0) goto fail;
            sum += t[i];
        }
        CK(cu->cuStreamSynchronize(stream));
    }
    out->mean_us = sum / CALLS;
    out->median_us = sort_median(t, CALLS);
    out->p99_us = sorted_quantile(t, CALLS, 0.99);
    free(t);
    return FG_OK;
fail:
    free(t);
    return err->status;
}

/* One fg_attention_fwd call of the overhead loop. */
typedef struct fwd_call {
    fg_context *ctx;       /* warm context */
    const fg_fwd_args *a;  /* the tiny problem */
    CUstream stream;       /* where it runs */
} fwd_call;

/* call_fn for fwd_call: one fg_attention_fwd. */
static int call_fwd(void *user, fg_error *err) {
    fwd_call *c = user;
    fg_status st = fg_attention_fwd(c->ctx, c->a, c->stream);
    if (st != FG_OK) return fg_fail(err, st, "fg_attention_fwd: %s", fg_last_error(c->ctx));
    return 0;
}

/* One raw cuLaunchKernel of the empty kernel. */
typedef struct raw_call {
    const fg_cuda_api *cu; /* driver */
    CUfunction fn;         /* the empty kernel */
    CUstream stream;       /* where it runs */
    fg_fwd_params p;       /* a parameter block of the forward kernel's size (zeros) */
} raw_call;

/* call_fn for raw_call: one cuLaunchKernel of the empty kernel, 1 block of 128 threads. */
static int call_raw(void *user, fg_error *err) {
    raw_call *c = user;
    void *params[] = {&c->p};
    CUresult rc = c->cu->cuLaunchKernel(c->fn, 1, 1, 1, 128, 1, 1, 0, c->stream, params, NULL);
    if (rc != CUDA_SUCCESS) return cuda_api_fail(err, rc, "cuLaunchKernel(empty kernel)", __FILE__, __LINE__);
    return 0;
}

/* Compiles with NVRTC, for the device's arch, an empty kernel taking a parameter block as large as the
 * forward kernel's, and times raw cuLaunchKernel calls of it the way the forward calls are timed: the floor
 * under any launch. Returns FG_ERR_UNSUPPORTED with the reason when NVRTC cannot target the device. */
static fg_status time_raw_launch(const bench_device *dev, CUstream stream, call_stats *out, fg_error *err) {
    const fg_cuda_api *cu = dev->cu;
    char src[512], arch[64];
    snprintf(src, sizeof src,
             "struct alignas(8) fgbench_params { unsigned char bytes[%zu]; };\n"
             "extern \"C\" __global__ void fgbench_empty(const __grid_constant__ fgbench_params p) {}\n",
             sizeof(fg_fwd_params));
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", dev->cc_major, dev->cc_minor);
    const char *opts[] = {arch};
    nvrtcProgram prog_ = NULL;
    char *cubin = NULL;
    CUmodule mod = NULL;
    fg_status st = FG_OK;
    nvrtcResult nr;
    size_t size = 0;
#define NVR(call)                                                                                   \
    do {                                                                                            \
        if ((nr = (call)) != NVRTC_SUCCESS) {                                                       \
            st = fg_fail(err, FG_ERR_UNSUPPORTED, "%s failed: %s", #call, nvrtcGetErrorString(nr)); \
            goto done;                                                                              \
        }                                                                                           \
    } while (0)
    NVR(nvrtcCreateProgram(&prog_, src, "fgbench_empty.cu", 0, NULL, NULL));
    NVR(nvrtcCompileProgram(prog_, 1, opts));
    NVR(nvrtcGetCUBINSize(prog_, &size));
    cubin = malloc(size ? size : 1);
    if (!cubin) {
        st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for a %zu-byte cubin", size);
        goto done;
    }
    NVR(nvrtcGetCUBIN(prog_, cubin));
#undef NVR
    raw_call rc;
    memset(&rc, 0, sizeof rc);
    rc.cu = cu;
    rc.stream = stream;
    CUresult r = cu->cuModuleLoadData(&mod, cubin);
    if (r == CUDA_SUCCESS) r = cu->cuModuleGetFunction(&rc.fn, mod, "fgbench_empty");
    if (r != CUDA_SUCCESS) {
        st = cuda_api_fail(err, r, "cuModuleLoadData/cuModuleGetFunction(empty kernel)", __FILE__, __LINE__);
        goto done;
    }
    st = time_calls(cu, stream, call_raw, &rc, out, err);
done:
    if (mod) RELEASE(cu->cuModuleUnload(mod));
    if (prog_ && (nr = nvrtcDestroyProgram(&prog_)) != NVRTC_SUCCESS)
        say("warning: nvrtcDestroyProgram failed: %s", nvrtcGetErrorString(nr));
    free(cubin);
    return st;
}

/* Part (c): host time per fg_attention_fwd call with the kernel loaded (warm in-memory cache), on the tiny
 * problem; checks afterwards that the calls computed the right output (so no call can look fast by
 * doing nothing). Also times raw launches for comparison (raw_ok 0 and a note when impossible). */
static fg_status host_overhead(const bench_device *dev, const jit_opts *o, const char *cache_dir, call_stats *fwd,
                               call_stats *raw, int *raw_ok, char *raw_note, size_t nnote, fg_error *err) {
    const fg_cuda_api *cu = dev->cu;
    const int64_t S = TINY_SEQLEN, D = o->head_dim;
    const size_t n = (size_t)(S * D), bytes = n * 2;
    fg_context *ctx = NULL;
    CUstream stream = NULL;
    CUdeviceptr q = 0, k = 0, v = 0, out = 0;
    uint16_t *hq = malloc(bytes), *hk = malloc(bytes), *hv = malloc(bytes), *ho = malloc(bytes);
    fg_status st;
    if (!hq || !hk || !hv || !ho) {
        fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for the overhead problem");
        goto fail;
    }
    fg_fwd_args h = problem_args(o->dtype, 1, S, 1, D, o->causal, hq, hk, hv, ho, NULL);
    if (ref_fill_normal(&h.q, INPUT_SEEDS, err) != FG_OK || ref_fill_normal(&h.k, INPUT_SEEDS + 1, err) != FG_OK ||
        ref_fill_normal(&h.v, INPUT_SEEDS + 2, err) != FG_OK)
        goto fail;
    CK(cu->cuMemAlloc(&q, bytes));
    CK(cu->cuMemAlloc(&k, bytes));
    CK(cu->cuMemAlloc(&v, bytes));
    CK(cu->cuMemAlloc(&out, bytes));
    CK(cu->cuMemcpyHtoD(q, hq, bytes));
    CK(cu->cuMemcpyHtoD(k, hk, bytes));
    CK(cu->cuMemcpyHtoD(v, hv, bytes));
    CK(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    if (open_context(dev, cache_dir, &ctx, err) != FG_OK) goto fail;
    fg_fwd_args a = problem_args(o->dtype, 1, S, 1, D, o->causal, (void *)(uintptr_t)q, (void *)(uintptr_t)k,
                                 (void *)(uintptr_t)v, (void *)(uintptr_t)out, NULL);
    if ((st = fg_prepare(ctx, &a)) != FG_OK) {
        fg_fail(err, st, "fg_prepare: %s", fg_last_error(ctx));
        goto fail;
    }
    char name[FG_SPEC_NAME_MAX];
    fg_spec spec;
    const char *origin;
    if (describe_variant(ctx, &a, name, &spec, &origin, err) != FG_OK) goto fail;
    if (strcmp(origin, "memory") != 0) {
        fg_fail(err, FG_ERR_INTERNAL, "after fg_prepare, fg_explain says %s would come from %s, not memory", name, origin);
        goto fail;
    }
    /* Poison the output: the check at the end sees only what the timed calls wrote. */
    CK(cu->cuMemsetD8(out, 0xFF, bytes));
    CK(cu->cuCtxSynchronize());
    fwd_call fc = {ctx, &a, stream};
    if (time_calls(cu, stream, call_fwd, &fc, fwd, err) != FG_OK) goto fail;
    CK(cu->cuMemcpyDtoH(ho, out, bytes)); /* time_calls ended with a stream synchronization */
    ref_problem p = {.q = h.q, .k = h.k, .v = h.v, .softmax_scale = 0.f, .causal = o->causal};
    ref_report rep;
    if (ref_check_fwd(&p, &h.o, NULL, &rep, err) != FG_OK) goto fail;
    if (!rep.pass) {
        char line[512];
        fg_fail(err, FG_ERR_INTERNAL, "after the timed calls the output is wrong: %s",
                ref_report_format(&rep, line, sizeof line));
        goto fail;
    }
    fg_error rerr;
    fg_error_clear(&rerr);
    st = time_raw_launch(dev, stream, raw, &rerr);
    *raw_ok = st == FG_OK;
    if (st == FG_ERR_CUDA) {
        *err = rerr;
        goto fail;
    }
    if (st != FG_OK) snprintf(raw_note, nnote, "%s", rerr.msg);
    st = FG_OK;
    goto cleanup;
fail:
    st = err->status;
cleanup:
    fg_context_destroy(ctx);
    if (stream) RELEASE(cu->cuStreamDestroy(stream));
    if (q) RELEASE(cu->cuMemFree(q));
    if (k) RELEASE(cu->cuMemFree(k));
    if (v) RELEASE(cu->cuMemFree(v));
    if (out) RELEASE(cu->cuMemFree(out));
    free(hq);
    free(hk);
    free(hv);
    free(ho);
    return st;
}

/* The pieces of a disk-cache load, in ms. */
typedef struct load_split {
    double emit_ms, key_ms, read_ms, load_ms; /* medians over DISK_REPS */
    size_t source_bytes, cubin_bytes;         /* sizes involved */
} load_split;

/* Repeats, DISK_REPS times, the steps fg_prepare takes on a disk-cache hit, with the runtime's internal
 * functions on cache_dir (populated with spec's entry): emit the source, compute the key (options +
 * SHA-256), read and verify the entry (cache_get), load the module (cuModuleLoadData, cuModuleGetFunction,
 * cuFuncSetAttribute), and fills *out with each step's median. The key comes from compile_cache_key, the
 * runtime's own; a miss is an error. */
static fg_status split_disk_load(const bench_device *dev, const fg_spec *spec, const char *cache_dir, load_split *out,
                                 fg_error *err) {
    const fg_cuda_api *cu = dev->cu;
    double t[4][DISK_REPS];
    char *src = NULL;
    uint8_t *cubin = NULL;
    CUmodule mod = NULL;
    fg_disk_cache dc;
    if (cache_open(&dc, cache_dir, err) != FG_OK) return err->status;
    for (int i = 0; i < DISK_REPS; i++) {
        size_t len = 0, size = 0;
        double t0 = now_s();
        if (emit_source(spec, &src, &len, err) != FG_OK) goto fail;
        double t1 = now_s();
        uint8_t key[32];
        compile_cache_key(spec, 0, src, len, key);
        double t2 = now_s();
        fg_error miss;
        fg_error_clear(&miss);
        fg_status st = cache_get(&dc, key, &cubin, &size, &miss);
        if (st != FG_OK) {
            fg_fail(err, st, "the split could not find the entry fg_prepare loaded: %s", miss.msg);
            goto fail;
        }
        double t3 = now_s();
        CUfunction fn;
        CK(cu->cuModuleLoadData(&mod, cubin));
        CK(cu->cuModuleGetFunction(&fn, mod, FG_KERNEL_NAME));
        CK(cu->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)spec_smem_bytes(spec)));
        double t4 = now_s();
        CK(cu->cuModuleUnload(mod));
        mod = NULL;
        t[0][i] = (t1 - t0) * 1e3, t[1][i] = (t2 - t1) * 1e3, t[2][i] = (t3 - t2) * 1e3, t[3][i] = (t4 - t3) * 1e3;
        out->source_bytes = len;
        out->cubin_bytes = size;
        free(src);
        free(cubin);
        src = NULL;
        cubin = NULL;
    }
    out->emit_ms = sort_median(t[0], DISK_REPS);
    out->key_ms = sort_median(t[1], DISK_REPS);
    out->read_ms = sort_median(t[2], DISK_REPS);
    out->load_ms = sort_median(t[3], DISK_REPS);
    return FG_OK;
fail:
    if (mod) RELEASE(cu->cuModuleUnload(mod));
    free(src);
    free(cubin);
    return err->status;
}

/* Times fg_prepare on a fresh context over cache_dir; *origin_ok is 0 when fg_explain, asked first, did
 * not name `want` as the code's origin (the measurement would not be what it claims). */
static fg_status timed_prepare(const bench_device *dev, const char *cache_dir, const fg_fwd_args *a, const char *want,
                               double *ms, char *name, fg_spec *spec, fg_error *err) {
    fg_context *ctx = NULL;
    if (open_context(dev, cache_dir, &ctx, err) != FG_OK) return err->status;
    const char *origin;
    fg_status st = describe_variant(ctx, a, name, spec, &origin, err);
    if (st == FG_OK && strcmp(origin, want) != 0)
        st = fg_fail(err, FG_ERR_INTERNAL, "in %s, fg_explain says %s would come from %s; this measurement needs %s",
                     cache_dir, name, origin, want);
    if (st == FG_OK) {
        double t0 = now_s();
        st = fg_prepare(ctx, a);
        *ms = (now_s() - t0) * 1e3;
        if (st != FG_OK) fg_fail(err, st, "fg_prepare: %s", fg_last_error(ctx));
    }
    fg_context_destroy(ctx);
    return st;
}

/* `fgbench jit`. Returns the exit status. */
static int run_jit(const bench_device *dev, const jit_opts *o) {
    fg_error e;
    fg_error_clear(&e);
    fg_error *err = &e;
    int status = EXIT_FAIL;
    char root[4096] = "", dir[4200], populated[4200] = "";
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/fgbench-XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        fg_fail(err, FG_ERR_IO, "cannot create a temporary directory %s: %s", root, strerror(errno));
        root[0] = '\0';
        goto fail;
    }
    print_device(dev);
    fg_fwd_args a = problem_args(o->dtype, 1, TINY_SEQLEN, 1, o->head_dim, o->causal, NULL, NULL, NULL, NULL, NULL);
    char name[FG_SPEC_NAME_MAX];
    fg_spec spec;

    /* (a) cold compiles: a fresh context and an empty cache directory each time. */
    double cold[COLD_REPS] = {0}, cold_sorted[COLD_REPS] = {0};
    for (int i = 0; i < COLD_REPS; i++) {
        snprintf(dir, sizeof dir, "%s/cold-%d", root, i);
        if (timed_prepare(dev, dir, &a, "JIT", &cold[i], name, &spec, err) != FG_OK) goto fail;
        if (i == 0) printf("%s: variant %s\n\n(a) cold compile (fg_prepare, fresh context, empty cache directory)\n", prog, name);
        printf("    run %d: %.0f ms%s\n", i + 1, cold[i], i == 0 ? " (includes NVRTC's first use in this process)" : "");
        fflush(stdout);
        cold_sorted[i] = cold[i];
    }
    snprintf(populated, sizeof populated, "%s", dir);
    double cold_ms = sort_median(cold_sorted, COLD_REPS);
    printf("    median %.0f ms\n", cold_ms);
    /* compile_spec alone, and the cache write of its cubin alone (cache_put: the entry written to a temporary
     * file, fsync, rename, directory fsync) into a fresh directory: the two largest pieces of a cold prepare. */
    double pure[COLD_REPS], nvrtc_s[COLD_REPS], put[COLD_REPS];
    int regs = -1, spill = -1;
    for (int i = 0; i < COLD_REPS; i++) {
        fg_compile_result cr;
        double t0 = now_s();
        fg_status st = compile_spec(&spec, 0, &cr, err);
        pure[i] = (now_s() - t0) * 1e3;
        nvrtc_s[i] = cr.seconds * 1e3;
        regs = cr.registers;
        spill = cr.spill_stores;
        if (st == FG_OK) {
            char pdir[4200];
            snprintf(pdir, sizeof pdir, "%s/put-%d", root, i);
            fg_disk_cache pc;
            uint8_t key[32] = {(uint8_t)i};
            t0 = now_s();
            st = cache_open(&pc, pdir, err);
            if (st == FG_OK) st = cache_put(&pc, key, name, cr.cubin, cr.cubin_size, err);
            put[i] = (now_s() - t0) * 1e3;
        }
        compile_result_free(&cr);
        if (st != FG_OK) goto fail;
    }
    double pure_ms = sort_median(pure, COLD_REPS), nvrtc_ms = sort_median(nvrtc_s, COLD_REPS);
    double put_ms = sort_median(put, COLD_REPS);
    printf("    compile_spec alone (emit + NVRTC): median %.0f ms, of which NVRTC %.0f ms (%d registers, %d bytes "
           "spilled); fg_prepare minus compile_spec: %+.0f ms (cache key, cache write with fsync, module load), of "
           "which the cache write alone (cache_open + cache_put into a fresh directory) %.1f ms\n",
           pure_ms, nvrtc_ms, regs, spill, cold_ms - pure_ms, put_ms);

    /* (b) disk-cache hits: a fresh context on the populated directory each time. */
    double disk[DISK_REPS] = {0};
    for (int i = 0; i < DISK_REPS; i++)
        if (timed_prepare(dev, populated, &a, "disk cache", &disk[i], name, &spec, err) != FG_OK) goto fail;
    double disk_ms = sort_median(disk, DISK_REPS);
    printf("\n(b) disk-cache load (fg_prepare, fresh context, populated cache; context creation not timed)\n"
           "    median %.3f ms over %d (min %.3f, max %.3f)\n", disk_ms, DISK_REPS, disk[0], disk[DISK_REPS - 1]);
    load_split sp;
    memset(&sp, 0, sizeof sp);
    if (split_disk_load(dev, &spec, populated, &sp, err) != FG_OK) goto fail;
    printf("    pieces (medians of %d, internal APIs): emit_source %.3f ms (%zu bytes of source), cache_key %.3f ms,\n"
           "    cache_get (read + verify) %.3f ms (%zu-byte cubin), cuModuleLoadData + GetFunction + SetAttribute %.3f ms;"
           "\n    sum %.3f ms (fg_prepare also checks the arguments, chooses the variant and takes the context's lock)\n",
           DISK_REPS, sp.emit_ms, sp.source_bytes, sp.key_ms, sp.read_ms, sp.cubin_bytes, sp.load_ms,
           sp.emit_ms + sp.key_ms + sp.read_ms + sp.load_ms);

    /* (c) host overhead per call. */
    call_stats fwd, raw;
    memset(&fwd, 0, sizeof fwd);
    memset(&raw, 0, sizeof raw);
    int raw_ok = 0;
    char raw_note[1024] = "";
    if (host_overhead(dev, o, populated, &fwd, &raw, &raw_ok, raw_note, sizeof raw_note, err) != FG_OK) goto fail;
    printf("\n(c) host time per fg_attention_fwd call (b=1, s=%d, h=1, kernel loaded; %d calls in batches of %d)\n"
           "    median %.2f us, mean %.2f us, p99 %.2f us; the output of the calls checked against the CPU reference\n",
           TINY_SEQLEN, CALLS, CALL_BATCH, fwd.median_us, fwd.mean_us, fwd.p99_us);
    if (raw_ok)
        printf("    raw cuLaunchKernel of an empty kernel with a %zu-byte parameter block: median %.2f us, mean %.2f "
               "us, p99 %.2f us; flashgen adds %.2f us per call\n",
               sizeof(fg_fwd_params), raw.median_us, raw.mean_us, raw.p99_us, fwd.median_us - raw.median_us);
    else
        printf("    raw cuLaunchKernel: not measured (%s)\n", raw_note);

    char v1[64], v2[64], v3[64];
    printf("\n%-44s %12s %12s  %s\n", "JIT targets (ANCHORS.md)", "target", "measured", "verdict");
    printf("%-44s %9.0f ms %9.0f ms  %s\n", "cold compile of one variant (fg_prepare)", TARGET_COLD_MS, cold_ms,
           verdict(cold_ms, TARGET_COLD_MS, v1, sizeof v1));
    printf("%-44s %9.2f ms %9.3f ms  %s\n", "disk-cache hit (fg_prepare)", TARGET_DISK_MS, disk_ms,
           verdict(disk_ms, TARGET_DISK_MS, v2, sizeof v2));
    printf("%-44s %9.2f us %9.2f us  %s\n", "host overhead per fg_attention_fwd call", TARGET_CALL_US, fwd.median_us,
           verdict(fwd.median_us, TARGET_CALL_US, v3, sizeof v3));
    status = EXIT_OK;
    goto cleanup;
fail:
    say("%s", err->msg);
cleanup:
    if (root[0]) remove_tree(root);
    return status;
}

/* ------------------------------------------------------------------ options and main */

static const char usage_main[] =
    "usage: fgbench speed [options]   time the forward kernel on the benchmark protocol's shapes\n"
    "       fgbench jit [options]     cold compile, disk-cache load and per-call host time vs the JIT targets\n"
    "Each takes --help. Exit status: 0 all measured and right, 1 failure / WRONG output / no CUDA device,\n"
    "2 usage error.\n";

static const char usage_speed[] =
    "usage: fgbench speed [--dtype bf16|fp16|both] [--head-dims 64,128,256]\n"
    "                     [--seqlens 512,1024,2048,4096,8192,16384] [--causal 0|1|both]\n"
    "                     [--iters 20] [--warmup 5] [--csv FILE] [--device 0]\n"
    "\n"
    "For every combination: batch = 16384 / seqlen, heads = 2048 / head_dim (each at least 1), layout\n"
    "[b, s, h, d], sq = sk = seqlen, LSE written. fg_prepare first (compile time excluded); one launch whose\n"
    "output is checked against the CPU reference on a slice (batch 0 heads 0-1 and the last head of the\n"
    "last batch, in 64-row windows) and scanned for NaN/Inf everywhere; WRONG instead of a time when it\n"
    "fails. Then --warmup launches (at least, and at least 100 ms of GPU time) and --iters timed launches,\n"
    "each between two CUDA events on a non-blocking stream, input sets rotated so inputs are never found in\n"
    "L2. Prints the median, min and TFLOP/s (FLOPs 4 b h s^2 d, halved when causal), registers, spills and\n"
    "shared memory of the variant, as a table last; --csv also writes it as CSV.\n"
    "Defaults: bf16, head dims 64,128,256, all six seqlens, causal both, 20 iterations, 5 warm-up.\n";

static const char usage_jit[] =
    "usage: fgbench jit [--head-dim 128] [--dtype bf16|fp16] [--causal 0|1] [--device 0]\n"
    "\n"
    "(a) cold compile: fg_prepare on a fresh context with an empty cache directory, 7 times (median), and\n"
    "    (CUDA_CACHE_DISABLE=1 is set, so NVRTC cannot answer from the CUDA compute cache either)\n"
    "    compile_spec alone for comparison; (b) disk-cache load: fg_prepare on a fresh context over the\n"
    "    populated directory, 20 times (median), split into emit, key, read + verify, module load;\n"
    "(c) host time per fg_attention_fwd call with the kernel loaded, b=1 s=128 h=1, 10000 calls, and a raw\n"
    "    cuLaunchKernel of an empty kernel for comparison. Then target vs measured with PASS/MISS.\n"
    "Cache directories live under a private $TMPDIR (or /tmp) directory removed at the end.\n";

/* Parses --dtype's value: fp16, bf16, or (when both_ok) both. Returns 0 or EXIT_USAGE. */
static int parse_dtype(const char *text, int both_ok, fg_dtype *out, int *n) {
    if (strcmp(text, "bf16") == 0) out[0] = FG_DTYPE_BF16, *n = 1;
    else if (strcmp(text, "fp16") == 0) out[0] = FG_DTYPE_F16, *n = 1;
    else if (both_ok && strcmp(text, "both") == 0) out[0] = FG_DTYPE_BF16, out[1] = FG_DTYPE_F16, *n = 2;
    else return usage_error("--dtype '%s': expected bf16 or fp16%s", text, both_ok ? " or both" : "");
    return 0;
}

/* Parses --causal's value: 0, 1, or (when both_ok) both. Returns 0 or EXIT_USAGE. */
static int parse_causal(const char *text, int both_ok, int *out, int *n) {
    if (strcmp(text, "0") == 0) out[0] = 0, *n = 1;
    else if (strcmp(text, "1") == 0) out[0] = 1, *n = 1;
    else if (both_ok && strcmp(text, "both") == 0) out[0] = 0, out[1] = 1, *n = 2;
    else return usage_error("--causal '%s': expected 0 or 1%s", text, both_ok ? " or both" : "");
    return 0;
}

/* Parses `fgbench speed`'s options into o. Returns -1 to go on, or the exit status (help or usage error). */
static int parse_speed(int argc, char **argv, speed_opts *o) {
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},         {"dtype", required_argument, NULL, 't'},
        {"head-dims", required_argument, NULL, 'd'}, {"seqlens", required_argument, NULL, 's'},
        {"causal", required_argument, NULL, 'c'}, {"iters", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'w'}, {"csv", required_argument, NULL, 'o'},
        {"device", required_argument, NULL, 'D'}, {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    o->dtypes[0] = FG_DTYPE_BF16, o->ndtypes = 1;
    static const int hd[] = {64, 128, 256}, sl[] = {512, 1024, 2048, 4096, 8192, 16384};
    memcpy(o->head_dims, hd, sizeof hd), o->nhead_dims = 3;
    memcpy(o->seqlens, sl, sizeof sl), o->nseqlens = 6;
    o->causals[0] = 0, o->causals[1] = 1, o->ncausals = 2;
    o->iters = 20;
    o->warmup = 5;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'h': fputs(usage_speed, stdout); return EXIT_OK;
        case 't': rc = parse_dtype(optarg, 1, o->dtypes, &o->ndtypes); break;
        case 'd': rc = parse_int_list("--head-dims", optarg, 1, 4096, o->head_dims, &o->nhead_dims); break;
        case 's': rc = parse_int_list("--seqlens", optarg, 1, 1 << 20, o->seqlens, &o->nseqlens); break;
        case 'c': rc = parse_causal(optarg, 1, o->causals, &o->ncausals); break;
        case 'i': rc = parse_int("--iters", optarg, 1, 100000, &o->iters); break;
        case 'w': rc = parse_int("--warmup", optarg, 0, 100000, &o->warmup); break;
        case 'o': o->csv = optarg; break;
        case 'D': rc = parse_int("--device", optarg, 0, 1023, &o->device); break;
        default: return bad_option(argv, c);
        }
        if (rc) return rc;
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (o->iters < 20)
        say("note: --iters %d is below the protocol's 20 timed runs: the figures are not comparable", o->iters);
    return -1;
}

/* Parses `fgbench jit`'s options into o. Returns -1 to go on, or the exit status. */
static int parse_jit(int argc, char **argv, jit_opts *o) {
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},          {"head-dim", required_argument, NULL, 'd'},
        {"dtype", required_argument, NULL, 't'},   {"causal", required_argument, NULL, 'c'},
        {"device", required_argument, NULL, 'D'},  {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    o->head_dim = 128;
    o->dtype = FG_DTYPE_BF16;
    int c, n;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'h': fputs(usage_jit, stdout); return EXIT_OK;
        case 'd': rc = parse_int("--head-dim", optarg, 1, 4096, &o->head_dim); break;
        case 't': rc = parse_dtype(optarg, 0, &o->dtype, &n); break;
        case 'c': rc = parse_causal(optarg, 0, &o->causal, &n); break;
        case 'D': rc = parse_int("--device", optarg, 0, 1023, &o->device); break;
        default: return bad_option(argv, c);
        }
        if (rc) return rc;
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    return -1;
}

/* Parses the mode and its options, opens the device (or says "no CUDA device: <reason>") and runs the mode. */
int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage_main, stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage_main, stdout);
        return EXIT_OK;
    }
    speed_opts so;
    jit_opts jo;
    memset(&so, 0, sizeof so);
    memset(&jo, 0, sizeof jo);
    int rc, device, speed = strcmp(argv[1], "speed") == 0;
    if (speed) {
        prog = "fgbench speed";
        if ((rc = parse_speed(argc - 1, argv + 1, &so)) >= 0) return rc;
        device = so.device;
    } else if (strcmp(argv[1], "jit") == 0) {
        prog = "fgbench jit";
        if ((rc = parse_jit(argc - 1, argv + 1, &jo)) >= 0) return rc;
        device = jo.device;
        /* Where a driver is installed, NVRTC serves a repeated compile of the same source and options from
         * the CUDA compute cache (~/.nv/ComputeCache): measured on the H200 host, 25 ms and no ptxas report
         * instead of a real compile. A cold compile is what a new variant, or the first call on a new
         * machine, costs; so the cache is off for this process (before the driver or NVRTC starts). */
        setenv("CUDA_CACHE_DISABLE", "1", 1);
    } else {
        fprintf(stderr, "fgbench: unknown mode '%s'\n%s", argv[1], usage_main);
        return EXIT_USAGE;
    }
    const char *emu = knob_value(FG_KNOB_EMULATE_ARCH);
    if (emu && *emu) {
        /* Emulated contexts run another arch's PTX through the driver, under their own cache keys: neither a
         * speed nor a JIT figure of this GPU (nor of the emulated one), and the JIT split's cache lookups,
         * keyed as native code, would miss. */
        fprintf(stderr, "%s: FLASHGEN_EMULATE_ARCH=%s is set: its timings would be of another arch's code compiled "
                        "by the driver, so unset it to benchmark (the variable is for testing that code)\n", prog, emu);
        return EXIT_FAIL;
    }
    bench_device dev;
    fg_error err;
    fg_error_clear(&err);
    fg_status st = device_open(&dev, device, &err);
    if (st != FG_OK) {
        if (st == FG_ERR_NO_DEVICE) say("no CUDA device: %s", err.msg);
        else say("%s", err.msg);
        device_close(&dev);
        return EXIT_FAIL;
    }
    rc = speed ? run_speed(&dev, &so) : run_jit(&dev, &jo);
    device_close(&dev);
    return release_failures ? EXIT_FAIL : rc;
}
