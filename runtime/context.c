/* context.c: fg_context's life cycle, logging, last-error handling and bundle loading. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/compile.h"
#include "core/knobs.h"
#include "runtime/runtime.h"
#include "core/alloc.h"

/* fg_context_create's failure, and that of a call given no context, has no context to hold it: it
 * lives here, per thread. */
static _Thread_local fg_error create_error;

void fg_context_options_init(fg_context_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->log_level = FG_LOG_WARN;
}

const char *fg_status_string(fg_status s) {
    switch (s) {
    case FG_OK: return "FG_OK";
    case FG_ERR_INVALID_ARGUMENT: return "FG_ERR_INVALID_ARGUMENT";
    case FG_ERR_UNSUPPORTED: return "FG_ERR_UNSUPPORTED";
    case FG_ERR_NO_DEVICE: return "FG_ERR_NO_DEVICE";
    case FG_ERR_CUDA: return "FG_ERR_CUDA";
    case FG_ERR_COMPILE: return "FG_ERR_COMPILE";
    case FG_ERR_NOT_FOUND: return "FG_ERR_NOT_FOUND";
    case FG_ERR_IO: return "FG_ERR_IO";
    case FG_ERR_FORMAT: return "FG_ERR_FORMAT";
    case FG_ERR_CONFIG: return "FG_ERR_CONFIG";
    case FG_ERR_NO_MEMORY: return "FG_ERR_NO_MEMORY";
    case FG_ERR_INTERNAL: return "FG_ERR_INTERNAL";
    }
    return "FG_ERR_UNKNOWN";
}

static const char *level_name(fg_log_level l) {
    static const char *const names[] = {"none", "error", "warning", "info", "debug"};
    return (unsigned)l <= FG_LOG_DEBUG ? names[l] : "log";
}

void rt_log(fg_context *ctx, fg_log_level level, const char *fmt, ...) {
    if (!ctx || level > ctx->opt.log_level || level == FG_LOG_NONE) return;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx->opt.log_fn) ctx->opt.log_fn(ctx->opt.log_user, level, msg);
    else fprintf(stderr, "flashgen %s: %s\n", level_name(level), msg);
}

/* The last failure on this thread of a call on a context, and which context: a context shared by
 * several threads gives each thread its own sentence, never another thread's (or a torn one). */
static _Thread_local const fg_context *last_ctx;
static _Thread_local fg_error last_error;

fg_status rt_set_error(fg_context *ctx, const fg_error *err) {
    last_ctx = ctx;
    last_error = *err;
    rt_log(ctx, FG_LOG_DEBUG, "%s: %s", fg_status_string(err->status), err->msg);
    return err->status;
}

fg_status rt_set_error_without_context(const fg_error *err) {
    create_error = *err;
    return err->status;
}

fg_status rt_no_context(const char *fn) {
    return fg_fail(&create_error, FG_ERR_INVALID_ARGUMENT, "%s: ctx is NULL (create one with fg_context_create)", fn);
}

const char *fg_last_error(const fg_context *ctx) {
    if (!ctx) return create_error.msg[0] ? create_error.msg : "no error";
    return last_ctx == ctx && last_error.msg[0] ? last_error.msg : "no error";
}

/* Loads this GPU's tuning database, if there is one: `path`, else the default file in the disk cache's
 * directory. Missing is normal (logged at debug); a file for another GPU or version, or a corrupt one,
 * is ignored with a warning: without it the tile policy chooses. Running out of host memory is the one
 * failure (FG_ERR_NO_MEMORY in err): a context made without a database that is there would dispatch
 * differently from the same program's next run, and say nothing. */
static fg_status load_tuning_db(fg_context *ctx, const char *path, fg_error *out) {
    fg_tune_identity id;
    int driver = 0;
    ctx->cu->cuDriverGetVersion(&driver);
    tunedb_identity_init(&id, ctx->device_name, ctx->arch, ctx->sm_count, driver, compile_nvrtc_version());
    tunedb_init(&ctx->tunedb, &id);
    char buf[1024];
    fg_error err;
    fg_error_clear(&err);
    if (path && !*path) {
        snprintf(ctx->tunedb_note, sizeof ctx->tunedb_note, "none (options.tuning_db is \"\")");
        return FG_OK;
    }
    if (!path) {
        if (!ctx->disk_ok) {
            snprintf(ctx->tunedb_note, sizeof ctx->tunedb_note, "none (no disk cache directory to look in)");
            return FG_OK;
        }
        if (tunedb_path(ctx->disk.dir, &id, buf, sizeof buf, &err) != FG_OK) {
            snprintf(ctx->tunedb_note, sizeof ctx->tunedb_note, "none (%s)", err.msg);
            return FG_OK;
        }
        path = buf;
    }
    fg_status st = tunedb_load(path, &id, &ctx->tunedb, &err);
    if (st == FG_ERR_NO_MEMORY) return fg_fail(out, st, "loading the tuning database %.900s: %s", path, err.msg);
    if (st == FG_OK) {
        ctx->tuned = 1;
        snprintf(ctx->tunedb_note, sizeof ctx->tunedb_note, "%s (%d measured candidates)", path, ctx->tunedb.count);
        rt_log(ctx, FG_LOG_INFO, "tuning database %s: %d measured candidates", path, ctx->tunedb.count);
    } else if (st == FG_ERR_NOT_FOUND) {
        snprintf(ctx->tunedb_note, sizeof ctx->tunedb_note, "none at %.1000s (run `flashgen tune`)", path);
        rt_log(ctx, FG_LOG_DEBUG, "no tuning database at %s", path);
    } else {
        snprintf(ctx->tunedb_note, sizeof ctx->tunedb_note, "ignored: %.1100s", err.msg);
        rt_log(ctx, FG_LOG_WARN, "tuning database ignored: %s", err.msg);
    }
    return FG_OK;
}

fg_status fg_context_create(fg_context **out, const fg_context_options *opt_in) {
    fg_error *err = &create_error;
    fg_error_clear(err);
    if (!out) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "fg_context_create: ctx (the output pointer) is NULL");
    *out = NULL;
    fg_context_options opt;
    if (opt_in) opt = *opt_in;
    else fg_context_options_init(&opt);
    if (opt.device < 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "options.device is %d: a device ordinal is >= 0", opt.device);
    if ((unsigned)opt.log_level > FG_LOG_DEBUG)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "options.log_level %d is not an fg_log_level (0..4)", (int)opt.log_level);

    const fg_cuda_api *cu = cuda_api_get(err);
    if (!cu) return err->status;
    int count = 0;
    FG_CU(err, cu->cuDeviceGetCount(&count));
    if (count == 0) return fg_fail(err, FG_ERR_NO_DEVICE, "no CUDA device is visible to this process");
    if (opt.device >= count)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "options.device is %d but only %d CUDA device%s visible",
                       opt.device, count, count == 1 ? " is" : "s are");

    fg_context *ctx = fg_calloc(1, sizeof *ctx);
    if (!ctx) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory allocating a context");
    ctx->cu = cu;
    ctx->opt = opt;
    ctx->last_kernel = -1;
    ctx->opt.cache_dir = NULL; /* the caller's strings need not outlive this call; disk.dir keeps it */
    ctx->opt.tuning_db = NULL;
    if (pthread_mutex_init(&ctx->lock, NULL) != 0) {
        free(ctx);
        return fg_fail(err, FG_ERR_INTERNAL, "pthread_mutex_init failed for a new context");
    }
    int major = 0, minor = 0, smem = 0;
    if (cu->cuDeviceGet(&ctx->device, opt.device) != CUDA_SUCCESS ||
        cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx->device) != CUDA_SUCCESS ||
        cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx->device) != CUDA_SUCCESS ||
        cu->cuDeviceGetAttribute(&ctx->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->device) != CUDA_SUCCESS ||
        cu->cuDeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, ctx->device) != CUDA_SUCCESS ||
        cu->cuDeviceGetName(ctx->device_name, (int)sizeof ctx->device_name, ctx->device) != CUDA_SUCCESS) {
        fg_fail(err, FG_ERR_CUDA, "could not query CUDA device %d (cuDeviceGet/cuDeviceGetAttribute failed)", opt.device);
        goto fail;
    }
    ctx->arch = ctx->device_arch = major * 10 + minor;
    ctx->smem_optin = (size_t)smem;
    {
        /* FLASHGEN_EMULATE_ARCH=80 (a test aid): run an older target's kernels on this GPU. Specs get that
         * arch and its shared-memory limit; each kernel is compiled to its PTX, which the driver compiles for
         * this device at load; the newer families (sm_90a, TMA loads, programmatic launch) stay off. An
         * unusable value fails the context: a test run that meant to emulate must not silently run native. */
        const char *em = knob_value(FG_KNOB_EMULATE_ARCH);
        if (em) {
            char *end;
            errno = 0;
            const long a = strtol(em, &end, 10);
            if (errno || *end || a < 80 || a > ctx->device_arch || arch_smem_limit((int)a) == 0) {
                fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                        "FLASHGEN_EMULATE_ARCH=%s: give a compute capability x 10 that flashgen targets, from 80 up "
                        "to this device's %d (for example 80)", em, ctx->device_arch);
                goto fail;
            }
            if (a != ctx->device_arch) {
                ctx->arch = (int)a;
                ctx->emulated = 1;
                if (ctx->smem_optin > arch_smem_limit((int)a)) ctx->smem_optin = arch_smem_limit((int)a);
            }
        }
    }
    {
        /* An emulating context takes none of the newer families: sm_90a code is arch-specific (its PTX compiles
         * for sm_90 only), and TMA loads and early launch are not what the emulated target would run. */
        ctx->tma_maps = !ctx->emulated && ctx->arch >= 90 && cu->cuTensorMapEncodeTiled != NULL;
        ctx->wgmma = ctx->tma_maps && ctx->arch == 90 && !knob_is_zero(FG_KNOB_WGMMA);
        ctx->wgmma_fp8 = ctx->wgmma && !knob_is_zero(FG_KNOB_WGMMA_FP8);
        /* Not read (the wgmma FP8 kernel is accurate at every head_dim): said, not ignored silently, to a
         * caller who sets it for speed. */
        const char *fa = knob_value(FG_KNOB_FP8_FAST_ACCUM);
        if (fa && strcmp(fa, "0") != 0)
            rt_log(ctx, FG_LOG_WARN, "FLASHGEN_FP8_FAST_ACCUM is no longer read: FP8 calls above head_dim 128 run "
                   "the sm_90a kernel with O's fp32 level in shared memory, accurate at any key length");
        const char *g = knob_value(FG_KNOB_SM90_GRID);
        ctx->sm90_grid = !g ? 0 : strcmp(g, "tiles") == 0 ? 1 : strcmp(g, "persistent") == 0 ? 2 : 0;
        if (g && ctx->sm90_grid == 0 && strcmp(g, "auto") != 0 && strcmp(g, "dynamic") != 0)
            rt_log(ctx, FG_LOG_WARN, "FLASHGEN_SM90_GRID=%s is not auto, tiles, persistent or dynamic: using auto", g);
        ctx->wgmma_bwd = ctx->wgmma && !knob_is_zero(FG_KNOB_WGMMA_BWD);
        ctx->det_rotate = !knob_is_zero(FG_KNOB_DET_ROTATE);
        char bad[256];
        if (knob_bad_switch(bad, sizeof bad)) rt_log(ctx, FG_LOG_WARN, "%s", bad);
        ctx->check_inputs = knob_is_one(FG_KNOB_CHECK_INPUTS);
        const char *ns = knob_value(FG_KNOB_NUM_SPLITS);
        if (ns && strcmp(ns, "auto") != 0) {
            char *end;
            const long n = strtol(ns, &end, 10);
            if (*end == 0 && n >= 1 && n <= 256) ctx->num_splits = (int)n;
            else rt_log(ctx, FG_LOG_WARN, "FLASHGEN_NUM_SPLITS=%s is not auto or 1-256: using auto", ns);
        }
        ctx->pdl = !ctx->emulated && ctx->arch >= 90 && cu->cuLaunchKernelEx != NULL && !knob_is_zero(FG_KNOB_PDL);
        ctx->serve_tma = ctx->tma_maps && knob_is_one(FG_KNOB_SERVE_TMA);
        ctx->prefill_sm90a = ctx->wgmma && !knob_is_zero(FG_KNOB_PREFILL_SM90A);
        /* On by default on sm_90, where TMA loads take the address arithmetic out of the backward's loop;
         * newer archs take them only with FLASHGEN_BWD_TMA=1: their speed there is unverified. */
        ctx->bwd_tma = ctx->tma_maps && (ctx->arch == 90 ? !knob_is_zero(FG_KNOB_BWD_TMA) : knob_is_one(FG_KNOB_BWD_TMA));
        const char *cg = knob_value(FG_KNOB_CAUSAL_GROUP);
        if (cg && strcmp(cg, "auto") != 0) {
            char *end;
            errno = 0;
            const long n = strtol(cg, &end, 10);
            if (errno == 0 && *end == 0 && n >= 1 && n <= INT32_MAX)
                ctx->causal_group = (int)n;
            else
                rt_log(ctx, FG_LOG_WARN, "FLASHGEN_CAUSAL_GROUP=%s is not auto or a whole number from 1 to %d: using auto",
                       cg, INT32_MAX);
        }
        /* A driver that cannot say leaves 0: causal tiles are then ordered head by head (rt_causal_group). */
        if (cu->cuDeviceGetAttribute(&ctx->l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, ctx->device) != CUDA_SUCCESS)
            ctx->l2_bytes = 0;
        /* double data rate: two transfers a clock of the bus's width */
        int mem_khz = 0, bus_bits = 0;
        if (cu->cuDeviceGetAttribute(&mem_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, ctx->device) == CUDA_SUCCESS &&
            cu->cuDeviceGetAttribute(&bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, ctx->device) == CUDA_SUCCESS)
            ctx->mem_bandwidth = 2.0 * (double)mem_khz * 1e3 * (double)bus_bits / 8.0;
    }
    if (tiers_init(ctx, err) != FG_OK) goto fail;
    if (ctx->arch < 80) {
        fg_fail(err, FG_ERR_UNSUPPORTED, "device %d (%s) has compute capability %d.%d; flashgen's kernels need 8.0 or newer",
                opt.device, ctx->device_name, major, minor);
        goto fail;
    }
    CUresult rc = cu->cuDevicePrimaryCtxRetain(&ctx->cuctx, ctx->device);
    if (rc != CUDA_SUCCESS) {
        cuda_api_fail(err, rc, "cuDevicePrimaryCtxRetain", __FILE__, __LINE__);
        ctx->cuctx = NULL;
        goto fail;
    }
    if (tile_policy_init_default(&ctx->policy, err) != FG_OK) goto fail;

    if (!opt.disable_disk_cache) {
        fg_error cerr;
        fg_error_clear(&cerr);
        if (cache_open(&ctx->disk, opt_in ? opt_in->cache_dir : NULL, &cerr) == FG_OK) {
            ctx->disk_ok = 1;
        } else {
            /* A cache we may not use is not fatal: kernels still compile, they are just not kept. */
            snprintf(ctx->disk_problem, sizeof ctx->disk_problem, "%s", cerr.msg);
            rt_log(ctx, FG_LOG_WARN, "disk cache disabled: %s", cerr.msg);
        }
    } else {
        snprintf(ctx->disk_problem, sizeof ctx->disk_problem, "disabled by options.disable_disk_cache");
    }
    if (load_tuning_db(ctx, opt_in ? opt_in->tuning_db : NULL, err) != FG_OK) goto fail;
    /* The sm_90a family's tile counters, zero from the start (a failure only costs the dynamic schedule).
     * Made after the last step that can fail, so the failure path has no device memory to free. */
    if (ctx->wgmma && cu->cuCtxPushCurrent(ctx->cuctx) == CUDA_SUCCESS) {
        CUcontext popped;
        const size_t bytes = FG_TILE_CTRS * 2 * sizeof(int);
        if (cu->cuMemAlloc(&ctx->tile_ctrs, bytes) != CUDA_SUCCESS) {
            ctx->tile_ctrs = 0;
        } else if (cu->cuMemsetD8(ctx->tile_ctrs, 0, bytes) != CUDA_SUCCESS) {
            cu->cuMemFree(ctx->tile_ctrs);
            ctx->tile_ctrs = 0;
        }
        cu->cuCtxPopCurrent(&popped);
        if (!ctx->tile_ctrs) rt_log(ctx, FG_LOG_WARN, "no memory for tile counters: sm_90a forward calls run one CTA per tile");
    }
    const char *dump = knob_value(FG_KNOB_DUMP);
    if (dump) {
        ctx->dump = 1;
        snprintf(ctx->dump_dir, sizeof ctx->dump_dir, "%s", dump);
    }
    rt_log(ctx, FG_LOG_INFO, "context on device %d: %s, sm_%d, %d SMs, %zu bytes shared memory per block",
           opt.device, ctx->device_name, ctx->arch, ctx->sm_count, ctx->smem_optin);
    if (ctx->emulated)
        rt_log(ctx, FG_LOG_WARN, "FLASHGEN_EMULATE_ARCH: running sm_%d's kernels on this sm_%d device (compiled from "
               "their PTX by the driver); for testing that arch's code, not for speed", ctx->arch, ctx->device_arch);
    *out = ctx;
    return FG_OK;
fail:
    if (ctx->cuctx) cu->cuDevicePrimaryCtxRelease(ctx->device);
    tiers_free(ctx);
    tile_policy_free(&ctx->policy);
    tunedb_free(&ctx->tunedb);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return err->status;
}

void fg_context_destroy(fg_context *ctx) {
    if (!ctx) return;
    tiers_stop(ctx); /* no background compile may touch the context past here */
    if (ctx->cuctx && ctx->cu->cuCtxPushCurrent(ctx->cuctx) == CUDA_SUCCESS) {
        for (int i = 0; i < ctx->nkernels; i++) ctx->cu->cuModuleUnload(ctx->kernels[i].module);
        for (int i = 0; i < ctx->tiers.nretired; i++) ctx->cu->cuModuleUnload(ctx->tiers.retired[i]);
        if (ctx->tile_ctrs) ctx->cu->cuMemFree(ctx->tile_ctrs);
        CUcontext popped;
        ctx->cu->cuCtxPopCurrent(&popped);
    }
    free(ctx->kernels);
    tiers_free(ctx);
    for (int i = 0; i < ctx->nbundles; i++) bundle_free(&ctx->bundles[i]);
    free(ctx->bundles);
    tile_policy_free(&ctx->policy);
    tunedb_free(&ctx->tunedb);
    if (ctx->cuctx) ctx->cu->cuDevicePrimaryCtxRelease(ctx->device);
    pthread_mutex_destroy(&ctx->lock);
    if (last_ctx == ctx) last_ctx = NULL; /* a later context at the same address starts clean */
    free(ctx);
}

/* Takes ownership of a parsed bundle and appends it to the context's list. */
static fg_status add_bundle(fg_context *ctx, fg_bundle *b, const char *what, fg_error *err) {
    pthread_mutex_lock(&ctx->lock);
    fg_bundle *n = fg_realloc(ctx->bundles, (size_t)(ctx->nbundles + 1) * sizeof *n);
    if (!n) {
        pthread_mutex_unlock(&ctx->lock);
        bundle_free(b);
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory adding bundle %s", what);
    }
    ctx->bundles = n;
    ctx->bundles[ctx->nbundles++] = *b;
    pthread_mutex_unlock(&ctx->lock);
    rt_log(ctx, FG_LOG_INFO, "loaded bundle %s: %zu kernels", what, b->count);
    if (ctx->emulated)
        rt_log(ctx, FG_LOG_WARN, "bundle %s: this context emulates sm_%d (FLASHGEN_EMULATE_ARCH), whose calls read no "
               "bundle (their machine code is not this sm_%d device's); its kernels compile from PTX instead", what,
               ctx->arch, ctx->device_arch);
    return FG_OK;
}

fg_status fg_bundle_load(fg_context *ctx, const char *path) {
    if (!ctx) return rt_no_context("fg_bundle_load");
    fg_error err;
    fg_error_clear(&err);
    if (!path) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_bundle_load: path is NULL");
        return rt_set_error(ctx, &err);
    }
    fg_bundle b;
    if (bundle_read(path, &b, &err) != FG_OK) return rt_set_error(ctx, &err);
    if (add_bundle(ctx, &b, path, &err) != FG_OK) return rt_set_error(ctx, &err);
    return FG_OK;
}

fg_status fg_bundle_load_memory(fg_context *ctx, const void *data, size_t size) {
    if (!ctx) return rt_no_context("fg_bundle_load_memory");
    fg_error err;
    fg_error_clear(&err);
    if (!data) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_bundle_load_memory: data is NULL");
        return rt_set_error(ctx, &err);
    }
    fg_bundle b;
    if (bundle_parse(data, size, &b, &err) != FG_OK) return rt_set_error(ctx, &err);
    if (add_bundle(ctx, &b, "(memory)", &err) != FG_OK) return rt_set_error(ctx, &err);
    return FG_OK;
}
