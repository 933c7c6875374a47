/* fgbench.c: flashgen's benchmark program (build/fgbench): its options, the device, the variant a call
 * runs, and main.
 *
 *   fgbench speed   times the forward kernel on the shapes of the benchmark protocol (16384 tokens =
 *                   batch x seqlen, hidden 2048 = heads x head_dim, layout [b, s, h, d]) and prints ms and
 *                   TFLOP/s per configuration, each output checked first (fgbench_speed.c, fgbench_check.c).
 *   fgbench jit     measures what a user waits for: a cold NVRTC compile, a disk-cache load, and the host
 *                   time of one fg_attention_fwd call, against the protocol's JIT targets (fgbench_jit.c).
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
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/knobs.h"
#include "runtime/compile.h"
#include "tools/fgbench.h"

/* ------------------------------------------------------------------ messages and small helpers */

const char *bench_mode = "";
const char *bench_prog = "fgbench";
int release_failures;

/* release_check: see fgbench.h. */
void release_check(CUresult rc, const char *call, int line) {
    if (rc == CUDA_SUCCESS) return;
    fg_error e;
    cuda_api_fail(&e, rc, call, __FILE__, line);
    say(bench_mode, "warning: %s", e.msg);
    release_failures++;
}
/* qsort order for doubles. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* sort_median: see fgbench.h. */
double sort_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* sorted_quantile: see fgbench.h. */
double sorted_quantile(const double *v, int n, double p) {
    int i = (int)ceil(p * n) - 1;
    return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

/* Parses a comma-separated list of integers in [lo, hi] (at most MAX_LIST) into out; *n gets the count.
 * Returns 0, or EXIT_USAGE after saying why. */
static int parse_int_list(const char *opt, const char *text, long lo, long hi, int *out, int *n) {
    char buf[1024];
    if (strlen(text) >= sizeof buf) return usage_error(bench_mode, "%s: the list is too long", opt);
    strcpy(buf, text);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) return usage_error(bench_mode, "%s: at most %d values", opt, MAX_LIST);
        long long v;
        if (parse_number(bench_mode, opt, tok, lo, hi, &v) != 0) return EXIT_USAGE;
        out[(*n)++] = (int)v;
    }
    if (*n == 0) return usage_error(bench_mode, "%s '%s': expected a comma-separated list of integers", opt, text);
    return 0;
}

/* ------------------------------------------------------------------ the device */


/* device_open: see fgbench.h. */
fg_status device_open(bench_device *d, int ordinal, fg_error *err) {
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

/* device_close: see fgbench.h. */
void device_close(bench_device *d) {
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

/* print_device: see fgbench.h. */
void print_device(const bench_device *d) {
    printf("%s: %s (sm_%d%d, %d SMs, %.0f MiB L2, %.0f GiB), driver %d.%d, NVRTC %s, flashgen %s\n", bench_prog, d->name,
           d->cc_major, d->cc_minor, d->sm_count, d->l2_bytes / 1048576.0, (double)d->total_mem / 1073741824.0,
           d->driver_version / 1000, d->driver_version % 1000 / 10, compile_nvrtc_version(), FG_VERSION_STRING);
}

/* bench_context: see fgbench.h. */
fg_status bench_context(const bench_device *d, const char *cache_dir, fg_context **ctx, fg_error *err) {
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

/* bshd: see fgbench.h. */
fg_tensor bshd(void *data, fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = 4;
    t.shape[0] = b, t.shape[1] = s, t.shape[2] = h, t.shape[3] = d;
    t.stride[0] = s * h * d, t.stride[1] = h * d, t.stride[2] = d, t.stride[3] = 1;
    return t;
}

/* bhs: see fgbench.h. */
fg_tensor bhs(void *data, int64_t b, int64_t h, int64_t s) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = FG_DTYPE_F32;
    t.ndim = 3;
    t.shape[0] = b, t.shape[1] = h, t.shape[2] = s;
    t.stride[0] = h * s, t.stride[1] = s, t.stride[2] = 1;
    return t;
}

/* bench_args: see fgbench.h. */
fg_fwd_args bench_args(fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int causal, void *q, void *k, void *v,
                       void *o, void *lse) {
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

/* describe_variant: see fgbench.h. */
fg_status describe_variant(fg_context *ctx, const fg_fwd_args *a, char *name, fg_spec *spec, const char **origin,
                           fg_error *err) {
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

/* parse_number for an int option of fgbench: 0, or EXIT_USAGE (printed). */
static int parse_int_option(const char *opt, const char *text, long long lo, long long hi, int *out) {
    long long v;
    if (parse_number(bench_mode, opt, text, lo, hi, &v) != 0) return EXIT_USAGE;
    *out = (int)v;
    return 0;
}

/* Parses --dtype's value: fp16, bf16, or (when both_ok) both. Returns 0 or EXIT_USAGE. */
static int parse_dtype(const char *text, int both_ok, fg_dtype *out, int *n) {
    if (strcmp(text, "bf16") == 0) out[0] = FG_DTYPE_BF16, *n = 1;
    else if (strcmp(text, "fp16") == 0) out[0] = FG_DTYPE_F16, *n = 1;
    else if (both_ok && strcmp(text, "both") == 0) out[0] = FG_DTYPE_BF16, out[1] = FG_DTYPE_F16, *n = 2;
    else return usage_error(bench_mode, "--dtype '%s': expected bf16 or fp16%s", text, both_ok ? " or both" : "");
    return 0;
}

/* Parses --causal's value: 0, 1, or (when both_ok) both. Returns 0 or EXIT_USAGE. */
static int parse_causal(const char *text, int both_ok, int *out, int *n) {
    if (strcmp(text, "0") == 0) out[0] = 0, *n = 1;
    else if (strcmp(text, "1") == 0) out[0] = 1, *n = 1;
    else if (both_ok && strcmp(text, "both") == 0) out[0] = 0, out[1] = 1, *n = 2;
    else return usage_error(bench_mode, "--causal '%s': expected 0 or 1%s", text, both_ok ? " or both" : "");
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
        case 'i': rc = parse_int_option("--iters", optarg, 1, 100000, &o->iters); break;
        case 'w': rc = parse_int_option("--warmup", optarg, 0, 100000, &o->warmup); break;
        case 'o': o->csv = optarg; break;
        case 'D': rc = parse_int_option("--device", optarg, 0, 1023, &o->device); break;
        default: return bad_option(bench_mode, argv, c);
        }
        if (rc) return rc;
    }
    if (optind < argc) return usage_error(bench_mode, "unexpected argument '%s'", argv[optind]);
    if (o->iters < 20)
        say(bench_mode, "note: --iters %d is below the protocol's 20 timed runs: the figures are not comparable", o->iters);
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
        case 'd': rc = parse_int_option("--head-dim", optarg, 1, 4096, &o->head_dim); break;
        case 't': rc = parse_dtype(optarg, 0, &o->dtype, &n); break;
        case 'c': rc = parse_causal(optarg, 0, &o->causal, &n); break;
        case 'D': rc = parse_int_option("--device", optarg, 0, 1023, &o->device); break;
        default: return bad_option(bench_mode, argv, c);
        }
        if (rc) return rc;
    }
    if (optind < argc) return usage_error(bench_mode, "unexpected argument '%s'", argv[optind]);
    return -1;
}

/* Parses the mode and its options, opens the device (or says "no CUDA device: <reason>") and runs the mode. */
int main(int argc, char **argv) {
    tool_program = "fgbench";
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
        bench_mode = "speed";
        bench_prog = "fgbench speed";
        if ((rc = parse_speed(argc - 1, argv + 1, &so)) >= 0) return rc;
        device = so.device;
    } else if (strcmp(argv[1], "jit") == 0) {
        bench_mode = "jit";
        bench_prog = "fgbench jit";
        if ((rc = parse_jit(argc - 1, argv + 1, &jo)) >= 0) return rc;
        device = jo.device;
        /* Where a driver is installed, NVRTC serves a repeated compile of the same source and options from
         * the CUDA compute cache (~/.nv/ComputeCache) in tens of ms, without running ptxas. A cold compile is what a new variant, or the first call on a new
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
        say(bench_mode, "FLASHGEN_EMULATE_ARCH=%s is set: its timings would be of another arch's code compiled by the "
            "driver, so unset it to benchmark (the variable is for testing that code)", emu);
        return EXIT_FAIL;
    }
    bench_device dev;
    fg_error err;
    fg_error_clear(&err);
    fg_status st = device_open(&dev, device, &err);
    if (st != FG_OK) {
        if (st == FG_ERR_NO_DEVICE) say(bench_mode, "no CUDA device: %s", err.msg);
        else say(bench_mode, "%s", err.msg);
        device_close(&dev);
        return EXIT_FAIL;
    }
    rc = speed ? run_speed(&dev, &so) : run_jit(&dev, &jo);
    device_close(&dev);
    return release_failures ? EXIT_FAIL : rc;
}

