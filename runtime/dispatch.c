/* dispatch.c: a forward call from arguments to a launch.
 *   (args.c)     every rule on the caller's tensors, each failure a sentence naming the argument;
 *   choose_spec  problem -> variant (the device's arch, the tile policy);
 *   get_kernel   memory cache -> disk cache -> bundles -> NVRTC (or FG_ERR_NOT_FOUND in strict mode);
 *   launch       one cuLaunchKernel on the caller's stream with the params struct by value.
 * Nothing here allocates device memory or synchronizes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "compile.h"
#include "emit.h"
#include "fg_params.h"
#include "args.h"
#include "runtime.h"
#include "sha256.h"

/* ------------------------------------------------------------------ variant choice */

/* The problem class of a call of `kind` (its q and k, its mask), as the tuning database keys it (sizes
 * bucketed). */
static fg_tune_class problem_class(fg_kind kind, const fg_tensor *q, const fg_tensor *k, int causal) {
    fg_tune_class c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.dtype = q->dtype;
    c.head_dim = (int)q->shape[3];
    c.causal = causal;
    c.gqa = k->shape[2] > 0 ? (int)(q->shape[2] / k->shape[2]) : 1; /* no heads: an empty call */
    c.seqlen_q = tunedb_bucket(q->shape[1]);
    c.seqlen_k = tunedb_bucket(k->shape[1]);
    c.batch_heads = tunedb_bucket(q->shape[0] * q->shape[2]);
    return c;
}

/* A variant this device can run: the spec's rules, and the device's own shared-memory limit. */
static fg_status check_runnable(const fg_context *ctx, const fg_spec *s, fg_error *err) {
    fg_status st = spec_validate(s, err);
    if (st != FG_OK) return st;
    if (spec_smem_bytes(s) > ctx->smem_optin) {
        char name[FG_SPEC_NAME_MAX];
        spec_format(s, name, sizeof name);
        return fg_fail(err, FG_ERR_UNSUPPORTED, "variant %s needs %zu bytes of shared memory; device %s allows %zu per block",
                       name, spec_smem_bytes(s), ctx->device_name, ctx->smem_optin);
    }
    return FG_OK;
}

/* The dtype of O a call asks for: o's for FP8 inputs (fp16 or bf16), else q's (they match). */
static fg_dtype call_out_dtype(const fg_fwd_args *a) {
    return spec_dtype_is_fp8(a->q.dtype) ? a->o.dtype : a->q.dtype;
}

/* TMA reads a tensor when its base address is 16-byte aligned and the byte strides of its dims longer
 * than 1 are positive multiples of 16 below 2^40 (a dim of extent 1 is never stepped, whatever its stride). */
static int tensor_tma_ok(const fg_tensor *t, int contig) {
    const int64_t es = spec_dtype_size(t->dtype);
    if ((uintptr_t)t->data % 16 != 0) return 0;
    for (int i = 0; i < 4; i++) {
        if (i == contig) { /* the contiguous dim: head_dim, or the keys of FP8's key-major V */
            if (t->shape[i] > 1 && t->stride[i] != 1) return 0;
            continue;
        }
        if (t->shape[i] > 1 && (t->stride[i] <= 0 || (t->stride[i] * es) % 16 != 0 || t->stride[i] * es >= (1LL << 40)))
            return 0;
    }
    return 1;
}

/* Whether a call runs on the sm_90a (wgmma, TMA) family: the context allows it (a 9.0 device), head_dim
 * is a multiple of 32 (TMA tiles are 64- or 128-byte chunks; FP8: of 64, unless
 * FLASHGEN_WGMMA_FP8=0), and every tensor is TMA-ready (FP8's V key-major). Other calls on
 * Hopper run the mma.sync family (arch sm_90). */
static int call_wgmma(const fg_context *ctx, const fg_fwd_args *a) {
    /* The kernel numbers its tiles (64-row query blocks at the smallest, times heads, times batch) in an
     * int and steps by the grid: a problem with more than INT_MAX - SMs of them runs the mma.sync
     * family, whose grid is 3-d. */
    const int64_t tiles = (a->q.shape[1] + 63) / 64 * a->q.shape[2] * a->q.shape[0];
    const int fp8 = spec_dtype_is_fp8(a->q.dtype);
    if (fp8 && (!ctx->wgmma_fp8 || a->q.shape[3] % 64 != 0)) return 0;
    return ctx->wgmma && a->q.shape[3] % 32 == 0 && a->q.shape[3] <= 256 &&
           tiles <= (int64_t)INT32_MAX - ctx->sm_count && tensor_tma_ok(&a->q, 3) && tensor_tma_ok(&a->k, 3) &&
           tensor_tma_ok(&a->v, fp8 ? 1 : 3) && tensor_tma_ok(&a->o, 3);
}

/* The variant for a problem on ctx's device: the device's arch (on Hopper sm_90a, the wgmma family, for
 * calls it takes, else sm_90, the mma.sync family), dtype, output dtype, head_dim and mask from the call; tiles
 * from the tuning database's winner for the nearest bucket when there is one, else from the tile
 * policy. `why` (may be NULL) receives the reason for the tiles. */
static fg_status choose_spec(fg_context *ctx, const fg_fwd_args *a, fg_spec *s, char *why, size_t nwhy, fg_error *err) {
    memset(s, 0, sizeof *s);
    s->kind = FG_KIND_FWD;
    s->arch = ctx->arch;
    s->arch_accel = call_wgmma(ctx, a);
    s->dtype = a->q.dtype;
    s->out_dtype = call_out_dtype(a);
    s->head_dim = (int)a->q.shape[3];
    s->causal = a->causal;
    char tuned_why[256] = "";
    if (ctx->tuned) {
        fg_tune_class c = problem_class(FG_KIND_FWD, &a->q, &a->k, a->causal);
        fg_spec t;
        fg_error terr;
        if (tunedb_best_for(&ctx->tunedb, &c, s->arch_accel, &t, NULL, tuned_why, sizeof tuned_why) == FG_OK) {
            /* The database keys FP8 classes by the input dtype only: the winner's tiles serve either output. */
            t.out_dtype = s->out_dtype;
            if (t.arch == s->arch && t.arch_accel == s->arch_accel && check_runnable(ctx, &t, &terr) == FG_OK) {
                *s = t;
                if (why) snprintf(why, nwhy, "%s", tuned_why);
                return FG_OK;
            }
        }
    }
    const fg_tile_rule *r = tile_policy_lookup(&ctx->policy, s);
    fg_status st = spec_fill_tiles(s, &ctx->policy, err);
    if (st != FG_OK) return st;
    if (why && r)
        snprintf(why, nwhy, "tile policy rule for sm_%d..sm_%d, head_dim %d..%d%s%s%s%s%s", r->arch_min, r->arch_max,
                 r->head_dim_min, r->head_dim_max, r->causal < 0 ? "" : (r->causal ? ", causal" : ", not causal"),
                 r->dtype < 0 ? "" : ", ", r->dtype < 0 ? "" : spec_dtype_name((fg_dtype)r->dtype),
                 ctx->tuned ? "; the tuning database has no winner: " : "", tuned_why);
    return check_runnable(ctx, s, err);
}

/* ------------------------------------------------------------------ kernel lookup */

static fg_kernel *find_loaded(fg_context *ctx, const char *name) {
    for (int i = 0; i < ctx->nkernels; i++)
        if (strcmp(ctx->kernels[i].name, name) == 0) return &ctx->kernels[i];
    return NULL;
}

/* Loads a cubin into the context and records it in the memory cache. Caller holds ctx->lock. */
static fg_status load_cubin(fg_context *ctx, const fg_spec *s, const char *name, const uint8_t *cubin,
                            const char *source, fg_kernel **out, fg_error *err) {
    const fg_cuda_api *cu = ctx->cu;
    if (ctx->nkernels == ctx->capkernels) {
        int cap = ctx->capkernels ? ctx->capkernels * 2 : 16;
        fg_kernel *n = realloc(ctx->kernels, (size_t)cap * sizeof *n);
        if (!n) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory growing the kernel cache");
        ctx->kernels = n;
        ctx->capkernels = cap;
    }
    fg_kernel k;
    memset(&k, 0, sizeof k);
    snprintf(k.name, sizeof k.name, "%s", name);
    k.spec = *s;
    k.source = source;
    FG_CU(err, cu->cuCtxPushCurrent(ctx->cuctx));
    CUcontext popped;
    CUresult rc = cu->cuModuleLoadData(&k.module, cubin);
    if (rc == CUDA_SUCCESS)
        rc = cu->cuModuleGetFunction(&k.fn, k.module, s->kind == FG_KIND_BWD ? FG_BWD_MAIN_NAME : FG_KERNEL_NAME);
    if (rc == CUDA_SUCCESS && s->kind == FG_KIND_BWD) rc = cu->cuModuleGetFunction(&k.fn_pre, k.module, FG_BWD_PRE_NAME);
    if (rc == CUDA_SUCCESS && s->kind == FG_KIND_BWD) rc = cu->cuModuleGetFunction(&k.fn_post, k.module, FG_BWD_POST_NAME);
    size_t smem = spec_smem_bytes(s);
    if (rc == CUDA_SUCCESS) rc = cu->cuFuncSetAttribute(k.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
    /* (Preferring all of L1 as shared memory, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, changed nothing
     * on the H200, 2026-11-29: the one-stage head_dim 256 tiles, 64 x 64 on 4 warps among them, timed the same
     * with and without it; so the driver's default stays.) How many CTAs fit an SM goes to the info log, a
     * diagnostic: a failed query leaves 0 ("unknown") rather than failing the load. */
    int ctas_per_sm = 0;
    if (rc == CUDA_SUCCESS &&
        cu->cuOccupancyMaxActiveBlocksPerMultiprocessor(&ctas_per_sm, k.fn, spec_threads(s), smem) != CUDA_SUCCESS)
        ctas_per_sm = 0;
    if (rc != CUDA_SUCCESS) {
        if (k.module) cu->cuModuleUnload(k.module);
        cu->cuCtxPopCurrent(&popped);
        return cuda_api_fail(err, rc,
                             ctx->emulated ? "loading a variant's PTX under FLASHGEN_EMULATE_ARCH (the driver compiles it; "
                                             "a driver older than NVRTC's PTX cannot: cuModuleLoadData/GetFunction/"
                                             "FuncSetAttribute)"
                                           : "loading the cubin of a variant (cuModuleLoadData/GetFunction/FuncSetAttribute)",
                             __FILE__, __LINE__);
    }
    cu->cuCtxPopCurrent(&popped);
    rt_log(ctx, FG_LOG_INFO, "loaded %s (%s): %d threads, %zu bytes of shared memory, %d CTA%s an SM%s", name, source,
           spec_threads(s), smem, ctas_per_sm, ctas_per_sm == 1 ? "" : "s", ctas_per_sm ? "" : " (unknown)");
    ctx->kernels[ctx->nkernels] = k;
    *out = &ctx->kernels[ctx->nkernels++];
    return FG_OK;
}

/* Writes source, PTX and log of a JIT compile under FLASHGEN_DUMP, named after the cache key. The source
 * is the flattened one (emit_flatten: the prelude with the templates it includes expanded), so that the
 * .cu compiles alone, as NVRTC compiled the prelude with its headers. */
static void dump_compile(fg_context *ctx, const char *hex, const char *src, const fg_compile_result *r) {
    mkdir(ctx->dump_dir, 0700);
    char *flat = NULL;
    fg_error fe;
    if (emit_flatten(src, &flat, NULL, &fe) != FG_OK) rt_log(ctx, FG_LOG_WARN, "FLASHGEN_DUMP: %s", fe.msg);
    const char *exts[3] = {"cu", "ptx", "log"};
    const char *texts[3] = {flat, r->ptx, r->log};
    for (int i = 0; i < 3; i++) {
        if (!texts[i]) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s.%s", ctx->dump_dir, hex, exts[i]);
        fg_error e;
        if (fg_write_file_atomic(path, texts[i], strlen(texts[i]), &e) != FG_OK)
            rt_log(ctx, FG_LOG_WARN, "FLASHGEN_DUMP: %s", e.msg);
    }
    free(flat);
    rt_log(ctx, FG_LOG_INFO, "FLASHGEN_DUMP: wrote %s/%s.{cu,ptx,log}", ctx->dump_dir, hex);
}

/* fg_explain's note on the arch under FLASHGEN_EMULATE_ARCH ("", or ", emulated on sm_90: code from PTX"). */
static const char *emulated_note(const fg_context *ctx, char buf[64]) {
    if (!ctx->emulated) return "";
    snprintf(buf, 64, ", emulated on sm_%d: code from PTX", ctx->device_arch);
    return buf;
}

/* Where a variant's code would come from, without loading it (for fg_explain). */
typedef enum { FROM_MEMORY, FROM_DISK, FROM_BUNDLE, FROM_JIT } origin;

/* Finds or builds the kernel for spec. `dry`: only report where it would come from (no compile, no
 * load). Caller holds ctx->lock. */
static fg_status get_kernel(fg_context *ctx, const fg_spec *s, int dry, origin *from, fg_kernel **out, fg_error *err) {
    char name[FG_SPEC_NAME_MAX];
    if (spec_format(s, name, sizeof name) < 0) return fg_fail(err, FG_ERR_INTERNAL, "unformattable spec");
    fg_kernel *k = find_loaded(ctx, name);
    if (k) {
        *from = FROM_MEMORY;
        if (out) *out = k;
        return FG_OK;
    }
    fg_status st;
    char *src = NULL;
    size_t len = 0;
    uint8_t key[32];
    char hex[65];
    if ((st = emit_source(s, &src, &len, err)) != FG_OK) return st;
    const int cflags = ctx->emulated ? FG_COMPILE_AS_PTX : 0;
    compile_cache_key(s, cflags, src, len, key);
    sha256_hex(key, hex);

    /* disk cache */
    if (ctx->disk_ok) {
        uint8_t *cubin = NULL;
        size_t size = 0;
        fg_error miss;
        if (cache_get(&ctx->disk, key, &cubin, &size, &miss) == FG_OK) {
            *from = FROM_DISK;
            st = dry ? FG_OK : load_cubin(ctx, s, name, cubin, "disk cache", out, err);
            free(cubin);
            free(src);
            return st;
        }
        rt_log(ctx, FG_LOG_DEBUG, "disk cache miss for %s: %s", name, miss.msg);
    }
    /* bundles, newest first (not under FLASHGEN_EMULATE_ARCH: their cubins are the emulated arch's machine
     * code, which this GPU cannot load) */
    for (int i = ctx->emulated ? -1 : ctx->nbundles - 1; i >= 0; i--) {
        const fg_bundle_entry *e = bundle_find(&ctx->bundles[i], name);
        if (e) {
            *from = FROM_BUNDLE;
            free(src);
            return dry ? FG_OK : load_cubin(ctx, s, name, e->data, "bundle", out, err);
        }
    }
    *from = FROM_JIT;
    if (dry) {
        free(src);
        return FG_OK;
    }
    if (ctx->opt.strict) {
        free(src);
        return fg_fail(err, FG_ERR_NOT_FOUND,
                       "strict mode: variant %s is in no cache and no loaded bundle (add it to a bundle, or call "
                       "fg_prepare without strict mode)", name);
    }
    rt_log(ctx, FG_LOG_INFO, "compiling %s with NVRTC ...", name);
    fg_compile_result r;
    st = compile_source(s, src, len, cflags | (ctx->dump ? FG_COMPILE_KEEP_PTX : 0), &r, err);
    if (ctx->dump) dump_compile(ctx, hex, src, &r);
    free(src);
    if (st != FG_OK) {
        compile_result_free(&r);
        return st;
    }
    if (ctx->emulated)
        rt_log(ctx, FG_LOG_INFO, "compiled %s in %.2f s (to PTX: the driver compiles it for sm_%d at load)", name,
               r.seconds, ctx->device_arch);
    else
        rt_log(ctx, FG_LOG_INFO, "compiled %s in %.2f s (%d registers, %d bytes spilled)", name, r.seconds,
               r.registers, r.spill_stores);
    if (ctx->disk_ok) {
        fg_error werr;
        if (cache_put(&ctx->disk, key, name, r.cubin, r.cubin_size, &werr) != FG_OK)
            rt_log(ctx, FG_LOG_WARN, "could not store %s in the disk cache: %s", name, werr.msg);
    }
    st = load_cubin(ctx, s, name, r.cubin, "JIT", out, err);
    compile_result_free(&r);
    return st;
}

/* ------------------------------------------------------------------ public entry points */

/* A 4-d tiled tensor map: dims innermost first, byte strides of dims 1..3 (an extent-1 dim is never
 * stepped and gets `unit`, a legal stride), a box of `box_bytes` bytes (128, 64 or 32: one swizzled row) by
 * `rows`, swizzled to match; elements past the dims read as zeros. */
static fg_status encode_map(fg_context *ctx, CUtensorMap *m, fg_dtype dt, void *data, const int64_t dim[4],
                            const int64_t stride_bytes[3], int64_t unit, int box_bytes, int rows, const char *what,
                            fg_error *err) {
    const int64_t es = spec_dtype_size(dt);
    cuuint64_t d[4], st[3];
    for (int i = 0; i < 4; i++) d[i] = (cuuint64_t)dim[i];
    for (int i = 0; i < 3; i++) st[i] = (cuuint64_t)(dim[i + 1] > 1 ? stride_bytes[i] : unit);
    cuuint32_t box[4] = {(cuuint32_t)(box_bytes / es), (cuuint32_t)rows, 1, 1}, estride[4] = {1, 1, 1, 1};
    CUresult rc = ctx->cu->cuTensorMapEncodeTiled(
        m, es == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                   : (dt == FG_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16),
        4, data, d, st, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
        box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : box_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return rc == CUDA_SUCCESS ? FG_OK : cuda_api_fail(err, rc, what, __FILE__, __LINE__);
}

/* The tensor map of a [batch, seqlen, heads, head_dim] tensor (16-bit or FP8) as TMA sees it: 4-d
 * (head_dim, seqlen, heads, batch), boxes of one chunk of `row_bytes` bytes (64 or 128) by `rows` rows,
 * swizzled like the kernel's tiles (wgmma.cuh). Rows past seqlen read as zeros and are never written. */
static fg_status encode_tma(fg_context *ctx, CUtensorMap *m, const fg_tensor *t, int rows, int row_bytes, fg_error *err) {
    const int64_t es = spec_dtype_size(t->dtype);
    const int64_t dim[4] = {t->shape[3], t->shape[1], t->shape[2], t->shape[0]};
    const int64_t st[3] = {t->stride[1] * es, t->stride[2] * es, t->stride[0] * es};
    return encode_map(ctx, m, t->dtype, t->data, dim, st, t->shape[3] * es, row_bytes, rows, "cuTensorMapEncodeTiled", err);
}

/* FP8's V, given key-major (V^T rows of keys, v.stride[3] apart), as TMA sees it: 4-d (keys, head_dim,
 * heads, batch), boxes of vt_bytes keys (one 128-, 64- or 32-byte swizzled row: spec_fp8_vt_bytes) by
 * head_dim rows. Keys past seqlen_k read as zeros (the padding of the caller's rows is never read). */
static fg_status encode_tma_vt(fg_context *ctx, CUtensorMap *m, const fg_tensor *v, int vt_bytes, fg_error *err) {
    const int64_t dim[4] = {v->shape[1], v->shape[3], v->shape[2], v->shape[0]};
    const int64_t st[3] = {v->stride[3], v->stride[2], v->stride[0]};
    return encode_map(ctx, m, v->dtype, v->data, dim, st, (v->shape[1] + 15) / 16 * 16, vt_bytes, (int)v->shape[3],
                      "cuTensorMapEncodeTiled (V^T)", err);
}

/* The tensor maps of a launch that loads by TMA (fg_tma_params; the second kernel argument): Q and o (the
 * forward's O, the backward's dO; NULL: none, the kernel writes O from registers) in boxes of q_rows rows (64; the
 * backward's 80-query blocks take theirs whole), K and V
 * in boxes of block_n keys, rows of rb bytes (vt > 0: FP8's V key-major, boxes of vt keys by head_dim). A
 * tensor with no rows gets no map: the kernel loads none of it. */
static fg_status encode_maps(fg_context *ctx, fg_tma_params *tm, const fg_tensor *q, const fg_tensor *o,
                             const fg_tensor *k, const fg_tensor *v, int q_rows, int block_n, int rb, int vt,
                             fg_error *err) {
    memset(tm, 0, sizeof *tm);
    fg_status st;
    if (q->shape[1] > 0 && ((st = encode_tma(ctx, (CUtensorMap *)tm->q, q, q_rows, rb, err)) != FG_OK ||
                            (o && (st = encode_tma(ctx, (CUtensorMap *)tm->o, o, q_rows, rb, err)) != FG_OK)))
        return st;
    if (k->shape[1] > 0 &&
        ((st = encode_tma(ctx, (CUtensorMap *)tm->k, k, block_n, rb, err)) != FG_OK ||
         (st = vt ? encode_tma_vt(ctx, (CUtensorMap *)tm->v, v, vt, err)
                  : encode_tma(ctx, (CUtensorMap *)tm->v, v, block_n, rb, err)) != FG_OK))
        return st;
    return FG_OK;
}

/* One kernel launch: the function, its grid and block, dynamic shared memory, its name for errors, and
 * whether it may start before the kernel launched before it on the stream has finished (programmatic
 * dependent launch; the kernel then waits for that one with griddepcontrol.wait before it reads what that
 * one writes: backward_mma.cuh fg_pdl_wait). */
typedef struct launch_item {
    CUfunction fn;
    unsigned grid[3], threads, smem;
    const char *kernel; /* its name, for errors */
    int early;
} launch_item;

/* Launches items in order on stream with the same parameters, in the device's primary context: switched
 * to only when the caller's thread has another current. Items with an empty grid are skipped. An early
 * item goes through cuLaunchKernelEx with programmatic stream serialization: it launches once every CTA
 * of the kernel before it has run griddepcontrol.launch_dependents (or ended), while that kernel's last
 * CTAs still run, instead of after the whole grid has drained. The caller sets early only where
 * ctx->pdl holds. */
static fg_status launch_items(fg_context *ctx, const launch_item *items, int n, void *stream, void **params,
                              fg_error *err) {
    const fg_cuda_api *cu = ctx->cu;
    CUcontext current = NULL, popped;
    CUresult rc = cu->cuCtxGetCurrent(&current);
    const int push = rc != CUDA_SUCCESS || current != ctx->cuctx;
    rc = push ? cu->cuCtxPushCurrent(ctx->cuctx) : CUDA_SUCCESS;
    const launch_item *failed = NULL; /* the last item launched: the one that failed, if one did (none: the push) */
    for (int i = 0; i < n && rc == CUDA_SUCCESS; i++) {
        const launch_item *l = &items[i];
        if (l->grid[0] == 0 || l->grid[1] == 0 || l->grid[2] == 0) continue;
        failed = l;
        if (l->early) {
            CUlaunchAttribute attr;
            memset(&attr, 0, sizeof attr);
            attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            CUlaunchConfig cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.gridDimX = l->grid[0], cfg.gridDimY = l->grid[1], cfg.gridDimZ = l->grid[2];
            cfg.blockDimX = l->threads, cfg.blockDimY = cfg.blockDimZ = 1;
            cfg.sharedMemBytes = l->smem;
            cfg.hStream = (CUstream)stream;
            cfg.attrs = &attr;
            cfg.numAttrs = 1;
            rc = cu->cuLaunchKernelEx(&cfg, l->fn, params, NULL);
        } else {
            rc = cu->cuLaunchKernel(l->fn, l->grid[0], l->grid[1], l->grid[2], l->threads, 1, 1, l->smem,
                                    (CUstream)stream, params, NULL);
        }
    }
    if (push) cu->cuCtxPopCurrent(&popped);
    if (rc == CUDA_SUCCESS) return FG_OK;
    char what[96] = "cuCtxPushCurrent";
    if (failed)
        snprintf(what, sizeof what, "%s(%s)", failed->early ? "cuLaunchKernelEx" : "cuLaunchKernel", failed->kernel);
    return cuda_api_fail(err, rc, what, __FILE__, __LINE__);
}

/* The causal tile order (fg_tile_order in templates/common/softmax.cuh, fg_cta_tile in forward_mma.cuh): how
 * many (head, batch) pairs G start their query blocks together, longest first; 1 is head by head.
 * Head by head, the last head's longest block starts when fewer than one head's blocks remain and the
 * grid ends waiting on it: a list-scheduling model of the protocol's causal shapes puts that tail at
 * 5-15% of the run at 2k-4k, and 0-3% with G pairs interleaved once G's blocks outlast a wave. But the
 * CTAs running together then serve G pairs, each pair's K/V stream shared by fewer of them. Measured on
 * the H200 (2026-11-29, `fgbench speed --causal 1`, bf16, FLASHGEN_CAUSAL_GROUP=N; bench/results/
 * 2026-11-29-h200-session5/causal-order/):
 *  - across all pairs: d 64 5-17% slower (K/V from DRAM), sm_90a 512-1k up to 15% slower;
 *  - mma.sync family, G = the heads of one batch (8-32 here): d 128/256 at 2k-8k 6-12% faster, the rest
 *    within noise (geomean +4.6% at 2k-16k, +1% at 512-1k);
 *  - sm_90a family, G = 4-16 and at most as many pairs as keep their K and V within a third of the L2:
 *    2k-8k 1-10% faster (geomean +3%); G 32-64 at 512 7-8% slower.
 * So: at most SMs / 8 pairs (16 on an H200: the CTAs running together, one or two per SM, serve each pair
 * with several), and on the sm_90a family also the L2 bound (query heads sharing a KV head count once);
 * the sm_90a family takes the largest power of two under that dividing heads x batch (an uneven last group
 * brings the tail back), the mma.sync family the heads of one batch or none (the grouping its grid gives
 * without a division, fg_cta_tile), at most SMs / 4 of them (33 on an H200), with its query blocks within
 * grid y (65535). FLASHGEN_CAUSAL_GROUP=N sets the cap instead, to measure the choice. */
int rt_causal_group(const fg_context *ctx, const fg_spec *s, const fg_fwd_args *a) {
    if (!s->causal) return 1;
    const int64_t pairs = a->q.shape[0] * a->q.shape[2], heads = a->q.shape[2];
    const int64_t m_blocks = (a->q.shape[1] + s->block_m - 1) / s->block_m;
    if (m_blocks * pairs > INT32_MAX) return 1; /* the kernels' tile indices are 32-bit */
    if (!spec_is_wgmma(s)) {
        const int64_t cap = ctx->causal_group ? ctx->causal_group : ctx->sm_count / 4;
        return heads > 1 && heads <= cap && m_blocks <= 65535 ? (int)heads : 1;
    }
    int64_t cap = ctx->causal_group;
    if (cap == 0) {
        const int64_t kv_bytes = 2 * a->k.shape[1] * (int64_t)s->head_dim * spec_dtype_size(s->dtype);
        cap = ctx->sm_count / 8;
        if (ctx->l2_bytes <= 0) return 1;
        if (kv_bytes > 0 && (int64_t)ctx->l2_bytes / 3 * (heads / a->k.shape[2]) / kv_bytes < cap)
            cap = (int64_t)ctx->l2_bytes / 3 * (heads / a->k.shape[2]) / kv_bytes;
    }
    int64_t g = 1;
    while (g * 2 <= cap && pairs % (g * 2) == 0) g *= 2;
    return (int)g;
}

/* The sm_90a family's tiles: query blocks x heads x batch (rt_launch_grid, and launch's one-CTA-a-tile
 * fallback when no counter can be had). */
static int64_t wgmma_tiles(const fg_spec *s, const fg_fwd_args *a) {
    return (a->q.shape[1] + s->block_m - 1) / s->block_m * a->q.shape[2] * a->q.shape[0];
}

/* The grid of a launch. The mma.sync family: (query blocks, heads, batch). The sm_90a family: tiles in a
 * 1-d grid, persistent: one CTA an SM, each CTA's producer taking its next tile from a per-stream counter
 * (FlashAttention-3's dynamic schedule; FG_GRID_DYNAMIC, the counter from tile_counter_for), longest first
 * for causal calls. Causal tiles cost in proportion to their keys: a fixed stride gave some SMs all the
 * heavy ones (d 128 causal 16k: 445 against 710 TFLOP/s), and one CTA per tile, balanced by the hardware
 * scheduler, paid every tile's prologue and epilogue in series (H200, 2026-11-29, same build, bf16
 * causal: the counter 1.0745x one CTA per tile over 18 configs). Non-causal tiles cost the same, but SMs
 * do not run at one speed: the counter measured 1.0097x the fixed stride over the 18 bf16 non-causal
 * configs (bench/results/2026-11-29-h200-session8). FLASHGEN_SM90_GRID=tiles|persistent (a stride)
 * forces the others, for measuring. Returns the FG_GRID_* mode. */
int rt_launch_grid(const fg_context *ctx, const fg_spec *s, const fg_fwd_args *a, int group, unsigned grid[3]) {
    int64_t m_blocks = (a->q.shape[1] + s->block_m - 1) / s->block_m;
    grid[0] = (unsigned)m_blocks;
    grid[1] = (unsigned)a->q.shape[2];
    grid[2] = (unsigned)a->q.shape[0];
    if (!spec_is_wgmma(s) && group > 1) { /* (heads, query blocks, batch): fg_cta_tile */
        grid[0] = (unsigned)a->q.shape[2];
        grid[1] = (unsigned)m_blocks;
    }
    if (spec_is_wgmma(s)) {
        const int64_t tiles = wgmma_tiles(s, a);
        const int mode = ctx->sm90_grid == 1 ? FG_GRID_TILES : ctx->sm90_grid == 2 ? FG_GRID_STRIDE : FG_GRID_DYNAMIC;
        grid[0] = (unsigned)(mode != FG_GRID_TILES && tiles > ctx->sm_count ? ctx->sm_count : tiles);
        grid[1] = grid[2] = 1;
        return mode;
    }
    return FG_GRID_TILES;
}

/* The tile counter of `stream` for the dynamic schedule: a pair of ints of the context's table
 * (ctx->tile_ctrs, zeroed when the context was made), handed to the stream on its first such call. Every
 * launch's last CTA puts the pair back to zero, and launches on one stream run one after another, so a
 * stream needs only one. NULL, and the caller runs one CTA per tile, where no two launches sharing the
 * pair can be ruled out, or none is left: the per-thread default stream (one handle for many host
 * threads' streams, whose launches overlap); a stream being captured into a graph (a graph may be
 * replayed on several streams at once, or beside eager calls on the stream it was captured from);
 * a stream past the table's FG_TILE_CTRS; a context whose table could not be allocated. No CUDA call here
 * allocates or synchronizes, so a graph another thread is capturing is left alone. */
static int *tile_counter_for(fg_context *ctx, void *stream) {
    if ((CUstream)stream == CU_STREAM_PER_THREAD || !ctx->tile_ctrs) return NULL;
    const fg_cuda_api *cu = ctx->cu;
    CUcontext current = NULL, popped;
    const int push = cu->cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != ctx->cuctx;
    if (push && cu->cuCtxPushCurrent(ctx->cuctx) != CUDA_SUCCESS) return NULL;
    /* Keyed by handle and ID: a stream destroyed with work queued may hand its handle to a new one whose
     * launches overlap that work; they must not share a counter. (Pairs are never taken back: a program
     * that makes a new stream for every call runs one CTA per tile once the table is full.) */
    unsigned long long id = 0;
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    int *out = NULL;
    if (cu->cuStreamIsCapturing((CUstream)stream, &capture) == CUDA_SUCCESS && capture == CU_STREAM_CAPTURE_STATUS_NONE &&
        (!cu->cuStreamGetId || cu->cuStreamGetId((CUstream)stream, &id) == CUDA_SUCCESS)) {
        pthread_mutex_lock(&ctx->lock);
        int i = 0;
        while (i < ctx->ntile_ctr && !(ctx->tile_ctr[i].stream == stream && ctx->tile_ctr[i].id == id)) i++;
        if (i == ctx->ntile_ctr && i < FG_TILE_CTRS) {
            ctx->tile_ctr[i].stream = stream;
            ctx->tile_ctr[i].id = id;
            ctx->ntile_ctr++;
        }
        if (i < ctx->ntile_ctr) out = (int *)(uintptr_t)(ctx->tile_ctrs + (CUdeviceptr)i * 2 * sizeof(int));
        pthread_mutex_unlock(&ctx->lock);
    }
    if (push) cu->cuCtxPopCurrent(&popped);
    if (!out) rt_log(ctx, FG_LOG_DEBUG, "no tile counter for stream %p: one CTA per tile", stream);
    return out;
}

/* Fills the kernel's parameters from a checked call and launches fn (the variant s) on stream. */
static fg_status launch(fg_context *ctx, const fg_spec *sp, CUfunction fn, const fg_fwd_args *a, void *stream,
                        fg_error *err) {
    const fg_spec s = *sp;
    fg_fwd_params p;
    memset(&p, 0, sizeof p);
    p.q = a->q.data;
    p.k = a->k.data;
    p.v = a->v.data;
    p.o = a->o.data;
    p.lse = (float *)a->lse.data;
    for (int i = 0; i < 3; i++) {
        p.q_stride[i] = a->q.stride[i];
        p.k_stride[i] = a->k.stride[i];
        p.v_stride[i] = a->v.stride[i];
        p.o_stride[i] = a->o.stride[i];
        p.lse_stride[i] = a->lse.data ? a->lse.stride[i] : 0;
    }
    p.batch = (int)a->q.shape[0];
    p.seqlen_q = (int)a->q.shape[1];
    p.heads_q = (int)a->q.shape[2];
    p.head_dim = (int)a->q.shape[3];
    p.seqlen_k = (int)a->k.shape[1];
    p.heads_kv = (int)a->k.shape[2];
    p.softmax_scale = a->softmax_scale != 0.f ? a->softmax_scale : (float)(1.0 / sqrt((double)p.head_dim));
    p.scale_log2 = (float)((double)p.softmax_scale * 1.4426950408889634);
    const int group = rt_causal_group(ctx, &s, a);
    p.causal_group = group > 1 ? group : 0; /* 0: head by head (the mma.sync family's plain grid) */
    if (spec_dtype_is_fp8(s.dtype)) {
        /* V is key-major: keys contiguous (stride[1] is 1 whenever seqlen_k > 1; set so for one key too),
         * head-dim rows v.stride[3] apart. Descale factors: [1] has strides 0, [b, hkv] its own. */
        p.v_stride[1] = 1;
        p.v_dstride = a->v.stride[3];
        const fg_tensor *ds[3] = {&a->q_descale, &a->k_descale, &a->v_descale};
        const float **ptrs[3] = {&p.q_descale, &p.k_descale, &p.v_descale};
        long long *strides[3] = {p.q_descale_stride, p.k_descale_stride, p.v_descale_stride};
        for (int i = 0; i < 3; i++) {
            *ptrs[i] = (const float *)ds[i]->data;
            strides[i][0] = ds[i]->data && ds[i]->ndim == 2 ? ds[i]->stride[0] : 0;
            strides[i][1] = ds[i]->data && ds[i]->ndim == 2 ? ds[i]->stride[1] : 0;
        }
    }

    fg_tma_params tm;
    void *params[] = {&p, &tm};
    if (spec_is_wgmma(&s)) {
        const int fp8 = spec_dtype_is_fp8(s.dtype);
        /* bytes per swizzled chunk row, as the emitter chose (emit.c): 128 when head_dim fills them (the
         * 16-bit O's rows are Q's) */
        const int rb = (s.head_dim * spec_dtype_size(s.dtype)) % 128 == 0 ? 128 : 64;
        /* no map of O where the kernel writes it from the registers (spec_wgmma_o_direct) */
        const fg_status st = encode_maps(ctx, &tm, &a->q, spec_wgmma_o_direct(&s) ? NULL : &a->o, &a->k, &a->v, 64,
                                         s.block_n, rb, fp8 ? spec_fp8_vt_bytes(&s) : 0, err);
        if (st != FG_OK) return st;
    }
    unsigned grid[3];
    if (rt_launch_grid(ctx, &s, a, group, grid) == FG_GRID_DYNAMIC && !(p.tile_counter = tile_counter_for(ctx, stream)))
        grid[0] = (unsigned)wgmma_tiles(&s, a); /* one CTA a tile */
    const launch_item item = {fn, {grid[0], grid[1], grid[2]}, (unsigned)spec_threads(&s), (unsigned)spec_smem_bytes(&s),
                              "fg_attention_fwd_kernel", 0};
    return launch_items(ctx, &item, 1, stream, params, err);
}

fg_status fg_attention_fwd(fg_context *ctx, const fg_fwd_args *a, void *stream) {
    if (!ctx) return rt_no_context("fg_attention_fwd");
    fg_error err;
    fg_error_clear(&err);
    if (!a) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_attention_fwd: args is NULL");
        return rt_set_error(ctx, &err);
    }
    if (rt_check_fwd_args(a, 1, &err) != FG_OK) return rt_set_error(ctx, &err);
    if (rt_fwd_is_empty(a)) return FG_OK;
    /* The variant depends on the problem only through its class (dtype, head_dim, mask, and with a
     * tuning database the GQA ratio and size buckets): a repeat of the last class skips choosing and
     * looking up (host overhead per call is a JIT library's tax). */
    fg_spec s;
    CUfunction fn = NULL;
    fg_tune_class cls = problem_class(FG_KIND_FWD, &a->q, &a->k, a->causal);
    if (!ctx->tuned) cls.gqa = 0, cls.seqlen_q = cls.seqlen_k = cls.batch_heads = 0; /* the policy ignores them */
    const fg_dtype out_dtype = call_out_dtype(a); /* not in the class: an FP8 call writing fp16 vs bf16 */
    const int accel = call_wgmma(ctx, a);         /* nor whether its tensors suit TMA */
    /* FP8 on the mma.sync family outside Hopper (where ptxas runs it as f16 HMMA with fp32 accumulation):
     * Ada's FP8 mma.sync accumulates with 13 mantissa bits (SageAttention2), and this kernel carries O in
     * that accumulator over every key block, the drift that made the sm_90a kernel's O 23% low at 16k keys
     * with V's columns averaging 1 before its two-level accumulation. Not measured on such a part (none
     * here): said once per context rather than silently. */
    if (!accel && ctx->arch >= 89 && ctx->arch != 90 && spec_dtype_is_fp8(a->q.dtype) && a->k.shape[1] > 256 &&
        !__atomic_load_n(&ctx->fp8_accum_warned, __ATOMIC_RELAXED) &&
        !__atomic_exchange_n(&ctx->fp8_accum_warned, 1, __ATOMIC_RELAXED))
        rt_log(ctx, FG_LOG_WARN, "FP8 on sm_%d runs the mma.sync kernel, which accumulates P.V in the tensor "
               "cores' FP8 accumulator (13 mantissa bits on Ada) over all %lld keys without an fp32 level: O "
               "may drift low where V's columns do not average 0 (measured on Hopper before its fix: 23%% at "
               "16k keys); fp16/bf16 inputs are accurate", ctx->arch, (long long)a->k.shape[1]);
    pthread_mutex_lock(&ctx->lock);
    if (ctx->last_kernel >= 0 && memcmp(&ctx->last_class, &cls, sizeof cls) == 0 && ctx->last_out_dtype == out_dtype &&
        ctx->last_accel == accel) {
        s = ctx->kernels[ctx->last_kernel].spec;
        fn = ctx->kernels[ctx->last_kernel].fn;
    }
    pthread_mutex_unlock(&ctx->lock);
    if (!fn) {
        if (choose_spec(ctx, a, &s, NULL, 0, &err) != FG_OK) return rt_set_error(ctx, &err);
        pthread_mutex_lock(&ctx->lock);
        fg_kernel *k = NULL;
        origin from;
        fg_status st = get_kernel(ctx, &s, 0, &from, &k, &err);
        if (st == FG_OK) {
            fn = k->fn;
            ctx->last_kernel = (int)(k - ctx->kernels);
            ctx->last_class = cls;
            ctx->last_out_dtype = out_dtype;
            ctx->last_accel = accel;
        }
        pthread_mutex_unlock(&ctx->lock);
        if (st != FG_OK) return rt_set_error(ctx, &err);
    }

    return launch(ctx, &s, fn, a, stream, &err) == FG_OK ? FG_OK : rt_set_error(ctx, &err);
}

fg_status rt_fwd_with_spec(fg_context *ctx, const fg_spec *spec, const fg_fwd_args *a, void *stream, fg_error *err) {
    fg_status st = rt_check_fwd_args(a, 1, err);
    if (st != FG_OK || rt_fwd_is_empty(a)) return st;
    if (spec->kind != FG_KIND_FWD || spec->dtype != a->q.dtype || spec_out_dtype(spec) != call_out_dtype(a) ||
        spec->head_dim != (int)a->q.shape[3] || (spec->causal != 0) != (a->causal != 0) || spec->arch != ctx->arch)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the variant does not match the call (dtype, output dtype, "
                       "head_dim, mask) or this device's arch sm_%d", ctx->arch);
    if (spec->arch_accel && !ctx->wgmma)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "this context runs no sm_90a (wgmma) variant: the device is not "
                       "sm_90, the driver lacks cuTensorMapEncodeTiled, or FLASHGEN_WGMMA=0");
    if (spec->arch_accel && !call_wgmma(ctx, a))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "an sm_90a (wgmma) variant needs tensors TMA can read (16-byte "
                       "aligned pointers, strides multiples of 16 bytes) with head_dim a multiple of 32 (FP8: of 64, "
                       "V key-major, and FLASHGEN_WGMMA_FP8 not 0)");
    if ((st = check_runnable(ctx, spec, err)) != FG_OK) return st;
    pthread_mutex_lock(&ctx->lock);
    fg_kernel *k = NULL;
    origin from;
    st = get_kernel(ctx, spec, 0, &from, &k, err);
    CUfunction fn = st == FG_OK ? k->fn : NULL;
    pthread_mutex_unlock(&ctx->lock);
    return st == FG_OK ? launch(ctx, spec, fn, a, stream, err) : st;
}

fg_status rt_fwd_spec(fg_context *ctx, const fg_fwd_args *a, fg_spec *s, fg_error *err) {
    fg_status st = rt_check_fwd_args(a, 0, err);
    return st != FG_OK ? st : choose_spec(ctx, a, s, NULL, 0, err);
}

fg_status fg_prepare(fg_context *ctx, const fg_fwd_args *a) {
    if (!ctx) return rt_no_context("fg_prepare");
    fg_error err;
    fg_error_clear(&err);
    if (!a) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_prepare: args is NULL");
        return rt_set_error(ctx, &err);
    }
    fg_spec s;
    if (rt_fwd_spec(ctx, a, &s, &err) != FG_OK) return rt_set_error(ctx, &err);
    pthread_mutex_lock(&ctx->lock);
    origin from;
    fg_kernel *k;
    fg_status st = get_kernel(ctx, &s, 0, &from, &k, &err);
    pthread_mutex_unlock(&ctx->lock);
    return st == FG_OK ? FG_OK : rt_set_error(ctx, &err);
}

/* Where an explained variant's code would come from, in words. */
static const char *origin_text(const fg_context *ctx, origin from) {
    static const char *const origins[] = {
        "already loaded (memory cache)", "disk cache", "a loaded bundle",
        "not compiled yet: the first call compiles it with NVRTC"};
    if (from == FROM_JIT && ctx->opt.strict) return "in no cache or bundle: strict mode makes the call fail";
    return origins[from];
}

/* The explain functions' argument check (fn names the caller): FG_OK, or the error set on ctx. */
static fg_status explain_args(fg_context *ctx, const char *fn, const void *args, char *buf, size_t n) {
    if (args && buf && n > 0) {
        buf[0] = '\0';
        return FG_OK;
    }
    fg_error err;
    fg_error_clear(&err);
    fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "%s: %s is NULL or empty", fn, !args ? "args" : "buf");
    return rt_set_error(ctx, &err);
}

/* The spec's name and where its code would come from, without compiling or loading anything. */
static fg_status explain_lookup(fg_context *ctx, const fg_spec *s, char name[FG_SPEC_NAME_MAX], const char **where,
                                fg_error *err) {
    pthread_mutex_lock(&ctx->lock);
    origin from;
    const fg_status st = get_kernel(ctx, s, 1, &from, NULL, err);
    pthread_mutex_unlock(&ctx->lock);
    if (st != FG_OK) return st;
    spec_format(s, name, FG_SPEC_NAME_MAX);
    *where = origin_text(ctx, from);
    return FG_OK;
}

/* FG_OK when snprintf's len fit the caller's n bytes, else the error naming fn and the bytes it needs. */
static fg_status explain_fits(fg_context *ctx, const char *fn, size_t n, int len) {
    if (len >= 0 && (size_t)len < n) return FG_OK;
    fg_error err;
    fg_error_clear(&err);
    fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "%s: buf holds %zu bytes; the explanation needs %d", fn, n, len < 0 ? 0 : len + 1);
    return rt_set_error(ctx, &err);
}

fg_status fg_explain(fg_context *ctx, const fg_fwd_args *a, char *buf, size_t n) {
    if (!ctx) return rt_no_context("fg_explain");
    if (explain_args(ctx, "fg_explain", a, buf, n) != FG_OK) return FG_ERR_INVALID_ARGUMENT;
    fg_error err;
    fg_error_clear(&err);
    fg_spec s;
    char why[600] = "tiles given";
    if (rt_check_fwd_args(a, 0, &err) != FG_OK || choose_spec(ctx, a, &s, why, sizeof why, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    char name[FG_SPEC_NAME_MAX];
    const char *where;
    if (explain_lookup(ctx, &s, name, &where, &err) != FG_OK) return rt_set_error(ctx, &err);
    unsigned grid[3];
    const int group = rt_causal_group(ctx, &s, a);
    const int mode = rt_launch_grid(ctx, &s, a, group, grid);
    char path[128] = "FlashAttention-2 mma.sync path (sm_80+)";
    if (spec_is_wgmma(&s))
        snprintf(path, sizeof path, "FlashAttention-3 style sm_90a path (TMA, %s, %d consumer warpgroups)",
                 spec_dtype_is_fp8(s.dtype) ? "FP8 wgmma" : "wgmma", s.block_m / 64);
    else if (spec_dtype_is_fp8(s.dtype))
        snprintf(path, sizeof path, "FP8 mma.sync m16n8k32 path (sm_89+)");
    if (spec_dtype_is_fp8(s.dtype)) {
        const size_t used = strlen(path);
        snprintf(path + used, sizeof path - used, ", %s inputs, out=%s", spec_dtype_name(s.dtype),
                 spec_dtype_name(s.out_dtype));
    }
    char order[96] = "";
    if (s.causal)
        snprintf(order, sizeof order, ", causal order: longest first across %d (head, batch) pairs", group);
    char emu[64];
    int len = snprintf(buf, n,
             "variant %s\n  kernel: forward, %s, %d threads, %zu bytes shared memory, "
             "grid (%u, %u, %u)%s%s\n"
             "  tiles: %s\n  code: %s\n  device: %s (sm_%d%s, %d SMs)\n  disk cache: %s\n  tuning database: %s",
             name, path, spec_threads(&s), spec_smem_bytes(&s),
             grid[0], grid[1], grid[2],
             !spec_is_wgmma(&s)          ? ""
             : mode == FG_GRID_STRIDE    ? " (persistent: tiles in a stride)"
             : mode == FG_GRID_DYNAMIC   ? " (persistent: tiles from the stream's counter, causal ones longest first; one CTA per tile under graph capture, on the per-thread default stream or past " FG_STR(FG_TILE_CTRS) " streams)"
                                         : " (one CTA per tile)",
             order,
             why, where, ctx->device_name, ctx->arch, emulated_note(ctx, emu), ctx->sm_count,
             ctx->disk_ok ? ctx->disk.dir : ctx->disk_problem, ctx->tunedb_note);
    return explain_fits(ctx, "fg_explain", n, len);
}

/* ------------------------------------------------------------------ backward */

/* Workspace regions of a backward call (byte offsets, each 256-byte aligned) and the total. */
typedef struct bwd_layout {
    size_t dq_accum, lse2, dsum, sem, dkv, total;
} bwd_layout;

static size_t align256(size_t x) { return (x + 255) / 256 * 256; }

/* The workspace's rows a (batch, head) (backward_mma.cuh's fg_bwd_rows_padded, the same rule): a multiple of 128, every
 * block_m but 80 dividing it; on an sm_90 device at head_dim 128 without a causal mask, where the sm_90a kernel's
 * 80-query blocks may run (spec_bwd_sm90_dq_t), the multiple of 128 at or past the last such block's end, so
 * that its LSE and D rows and its dQ accumulator group stay inside the (batch, head)'s rows. A function of
 * the call and the device only, so that fg_attention_bwd_workspace_size holds for every variant of it. */
static size_t bwd_rows_padded(const fg_context *ctx, const fg_bwd_args *a) {
    size_t sq = (size_t)a->q.shape[1];
    if (ctx->arch == 90 && a->q.shape[3] == 128 && !a->causal) sq = (sq + 79) / 80 * 80;
    return (sq + 127) / 128 * 128;
}

/* The rows of the dQ accumulator the main kernel of variant s adds into (and that the pre kernel prepares). */
static size_t bwd_rows_read(const fg_spec *s, int64_t sq) {
    const size_t bm = spec_bwd_sm90_dq_t(s) ? (size_t)s->block_m : 128;
    return ((size_t)sq + bm - 1) / bm * bm;
}

static void bwd_workspace_layout(const fg_context *ctx, const fg_bwd_args *a, bwd_layout *L) {
    const size_t b = (size_t)a->q.shape[0], hq = (size_t)a->q.shape[2], hkv = (size_t)a->k.shape[2];
    const size_t sq_pad = bwd_rows_padded(ctx, a), sk = (size_t)a->k.shape[1];
    const size_t d = (size_t)a->q.shape[3];
    size_t off = 0;
    L->dq_accum = off, off = align256(off + b * hq * sq_pad * d * 4);
    L->lse2 = off, off = align256(off + b * hq * sq_pad * 4);
    L->dsum = off, off = align256(off + b * hq * sq_pad * 4);
    L->sem = off, off = align256(off + (a->deterministic ? b * hq * (sq_pad / 16) * 4 : 0));
    L->dkv = off, off = align256(off + (hq != hkv ? 2 * b * hq * sk * d * 4 : 0));
    L->total = off;
}

/* Whether TMA can read the backward's streamed tensors (Q, K, V, dO): the sm_90a kernel and the mma.sync
 * kernel's tma=1 variants need it. */
static int bwd_tma_ready(const fg_bwd_args *a) {
    return tensor_tma_ok(&a->q, 3) && tensor_tma_ok(&a->k, 3) && tensor_tma_ok(&a->v, 3) && tensor_tma_ok(&a->dout, 3);
}

/* Where the variant's code would come from, without compiling or loading anything: FROM_MEMORY costs a
 * name lookup; with deep set, the disk cache and the loaded bundles are looked up too (which emits the
 * source to key the cache), else anything not loaded is FROM_JIT. */
static origin code_origin(fg_context *ctx, const fg_spec *s, int deep) {
    char name[FG_SPEC_NAME_MAX];
    origin from = FROM_JIT;
    fg_error quiet;
    pthread_mutex_lock(&ctx->lock);
    if (!deep) from = spec_format(s, name, sizeof name) >= 0 && find_loaded(ctx, name) ? FROM_MEMORY : FROM_JIT;
    else if (get_kernel(ctx, s, 1, &from, NULL, &quiet) != FG_OK) from = FROM_JIT;
    pthread_mutex_unlock(&ctx->lock);
    return from;
}

/* runtime.h: whether the mma.sync backward variant s takes TMA loads on this context. */
int rt_bwd_tma(const fg_context *ctx, const fg_spec *s) {
    if (s->kind != FG_KIND_BWD || !ctx->bwd_tma) return 0;
    fg_spec t = *s;
    t.tma = 1;
    fg_error quiet;
    /* validate.c's bwd_tma rule says which tiles take TMA loads (sm_90+, not sm_90a, head_dim a multiple of 64, block_m a
     * multiple of 64, two stages); the device, whether its 1 KiB of alignment slack still fits */
    return check_runnable(ctx, &t, &quiet) == FG_OK;
}

/* The backward variant for a call: kind bwd, the device's arch (the mma.sync family: sm_90, not sm_90a,
 * on Hopper, unless the sm_90a kernel takes the call), the call's dtype, head_dim, mask and mode; tiles from
 * the tuning database (*tuned set) or the tile policy. */
static fg_status choose_bwd_spec(fg_context *ctx, const fg_bwd_args *a, fg_spec *s, int *tuned, fg_error *err) {
    if (tuned) *tuned = 0;
    memset(s, 0, sizeof *s);
    s->kind = FG_KIND_BWD;
    s->arch = ctx->arch;
    s->dtype = s->out_dtype = a->q.dtype;
    s->head_dim = (int)a->q.shape[3];
    s->causal = a->causal;
    s->deterministic = a->deterministic;
    /* The sm_90a backward (backward_wgmma.cuh) where it applies (head_dim 64 or 128, not deterministic, Q, K, V
     * and dO TMA-ready), unless FLASHGEN_WGMMA_BWD=0. On the H200 it ran at 1.11-1.61x FlashAttention-2's
     * backward in the same runs (bf16 and fp16, d 64 and 128), the mma.sync kernel at 0.87-0.96x
     * (bench/results/2026-11-29-h200-session9/final/). */
    const int tma_ok = bwd_tma_ready(a);
    s->arch_accel = ctx->wgmma_bwd && (s->head_dim == 64 || s->head_dim == 128) && !s->deterministic && tma_ok;
    /* The mma.sync kernel's tiles: the tuning database's winner for the nearest bucket (`flashgen tune` of a
     * kind = "bwd" space), outside the deterministic mode, when it is runnable here; else the tile policy. The
     * loads by TMA are chosen below either way, as the tuner chose them for its candidates (rt_bwd_tma). */
    if (ctx->tuned && !s->arch_accel && !s->deterministic) {
        const fg_tune_class c = problem_class(FG_KIND_BWD, &a->q, &a->k, a->causal);
        fg_spec t;
        fg_error terr;
        if (tunedb_best_for(&ctx->tunedb, &c, 0, &t, NULL, NULL, 0) == FG_OK && t.kind == FG_KIND_BWD &&
            t.arch == s->arch && !t.arch_accel) {
            t.tma = 0, t.deterministic = 0;
            if (check_runnable(ctx, &t, &terr) == FG_OK) {
                s->block_m = t.block_m, s->block_n = t.block_n, s->warps = t.warps, s->stages = t.stages;
                if (tuned) *tuned = 1;
            }
        }
    }
    fg_status st = spec_fill_tiles(s, &ctx->policy, err);
    if (st != FG_OK) return st;
    /* The sm_90a kernel's 80-query blocks (dQ^T) at head_dim 128 without a mask ran 4-7.5% faster than its
     * 64-query blocks from 1k to 16k queries (H200, bf16, session 17), but a length they divide badly pays
     * for the padding rows of its last block: 512 queries take 560 rows of work, and there 64-query blocks
     * ran 1% faster. So 64 where 80-query blocks would cover over 4% more rows than 64-query ones. */
    if (spec_bwd_sm90_dq_t(s)) {
        const int64_t sq = a->q.shape[1], r80 = (sq + 79) / 80 * 80, r64 = (sq + 63) / 64 * 64;
        if (r80 * 100 > r64 * 104) s->block_m = 64;
    }
    /* The mma.sync kernel's TMA loads (tma=1; FLASHGEN_BWD_TMA=0 turns them off) where its tiles take them and
     * their 1 KiB of alignment slack still fits the device (else the cp.async variant runs). On the H200 they
     * ran at 1.125x the cp.async loads, bf16 d 64/128 (bench/results/2026-11-29-h200-session10/). */
    if (tma_ok && rt_bwd_tma(ctx, s)) {
        s->tma = 1;
        /* Strict mode compiles nothing: a cache or bundle holding only the cp.async variant (one built
         * before tma=1 was the default, or from a config without tma = true) still serves the call.
         * Loaded variants are checked first, so once one serves, later calls skip the deep lookups. */
        if (!ctx->opt.strict || code_origin(ctx, s, 0) == FROM_MEMORY) return FG_OK;
        fg_spec plain = *s;
        plain.tma = 0;
        if (code_origin(ctx, &plain, 0) == FROM_MEMORY ||
            (code_origin(ctx, s, 1) == FROM_JIT && code_origin(ctx, &plain, 1) != FROM_JIT)) {
            *s = plain;
            return check_runnable(ctx, s, err);
        }
        return FG_OK;
    }
    st = check_runnable(ctx, s, err);
    const size_t limit = arch_smem_limit(s->arch);
    if (st == FG_ERR_UNSUPPORTED && s->head_dim > 128 && (spec_smem_bytes(s) > ctx->smem_optin ||
                                                          (limit != 0 && spec_smem_bytes(s) > limit))) {
        /* the policy's tile for this head_dim does not fit this GPU's shared memory */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return fg_fail(err, st,
                       "head_dim %d has no backward kernel that fits the shared memory of %s (sm_%d): above 128 "
                       "the backward takes head_dim up to 192 on GPUs with 99 KiB of shared memory a block, up to "
                       "256 on an A100 and on an H100 and newer (%s)",
                       s->head_dim, ctx->device_name, ctx->arch, why);
    }
    return st;
}

fg_status fg_attention_bwd_workspace_size(fg_context *ctx, const fg_bwd_args *a, size_t *bytes) {
    if (!ctx) return rt_no_context("fg_attention_bwd_workspace_size");
    fg_error err;
    fg_error_clear(&err);
    if (!a || !bytes) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_attention_bwd_workspace_size: %s is NULL", !a ? "args" : "bytes");
        return rt_set_error(ctx, &err);
    }
    if (rt_check_bwd_args(a, 0, 0, &err) != FG_OK) return rt_set_error(ctx, &err);
    bwd_layout L;
    bwd_workspace_layout(ctx, a, &L);
    *bytes = L.total;
    return FG_OK;
}

/* The backward main kernel's grid x: its key blocks (launch_bwd and fg_explain_bwd). */
static long long bwd_key_blocks(const fg_spec *s, long long sk) { return (sk + s->block_n - 1) / s->block_n; }

/* How many heads' causal key blocks the backward's main kernel interleaves (fg_bwd_cta_tile, backward_mma.cuh):
 * 1 unless causal on the sm_90a kernel (the mma.sync kernel keeps its grid: the grouped order spilled
 * there), else the largest power of two dividing the heads whose streamed
 * rows (Q and dO, 16-bit, and the fp32 dQ accumulator: 8 bytes a head_dim column a query row) fit in a
 * third of L2, as FlashAttention-3's backward sizes its head sections. FLASHGEN_CAUSAL_GROUP=N caps it
 * instead (1: head by head, to measure the choice). A driver that cannot say the L2 size leaves 1. */
int rt_bwd_causal_group(const fg_context *ctx, const fg_spec *s, const fg_bwd_args *a) {
    if (!s->causal || !spec_is_wgmma_bwd(s)) return 1;
    const int64_t heads = a->q.shape[2], nb = bwd_key_blocks(s, a->k.shape[1]);
    int64_t cap = ctx->causal_group;
    if (cap == 0) {
        const int64_t pair_bytes = (a->q.shape[1] + 127) / 128 * 128 * a->q.shape[3] * 8; /* sq_pad rows */
        if (ctx->l2_bytes <= 0 || pair_bytes <= 0) return 1;
        cap = (int64_t)ctx->l2_bytes / 3 / pair_bytes;
    }
    int64_t g = 1;
    while (g * 2 <= cap && heads % (g * 2) == 0 && nb * g * 2 <= INT32_MAX) g *= 2;
    return (int)g;
}

fg_status fg_explain_bwd(fg_context *ctx, const fg_bwd_args *a, char *buf, size_t n) {
    if (!ctx) return rt_no_context("fg_explain_bwd");
    if (explain_args(ctx, "fg_explain_bwd", a, buf, n) != FG_OK) return FG_ERR_INVALID_ARGUMENT;
    fg_error err;
    fg_error_clear(&err);
    fg_spec s;
    int tuned;
    if (rt_check_bwd_args(a, 0, 0, &err) != FG_OK || choose_bwd_spec(ctx, a, &s, &tuned, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    char name[FG_SPEC_NAME_MAX];
    const char *where;
    if (explain_lookup(ctx, &s, name, &where, &err) != FG_OK) return rt_set_error(ctx, &err);
    bwd_layout L;
    bwd_workspace_layout(ctx, a, &L);
    const int group = rt_bwd_causal_group(ctx, &s, a);
    const char *path = spec_is_wgmma_bwd(&s) ? "sm_90a path (wgmma, two warpgroups of 64 keys)"
                       : s.tma             ? "mma.sync path (sm_80+), loads by TMA"
                                           : "mma.sync path (sm_80+)";
    char emu[64];
    int len = snprintf(buf, n,
                       "variant %s\n  kernel: backward main kernel, %s, %d threads, %zu bytes shared memory, "
                       "grid (%lld, %lld, %lld)%s%s\n"
                       "  tiles: %s\n"
                       "  workspace: %zu bytes\n  code: %s\n  device: %s (sm_%d%s, %d SMs)\n  disk cache: %s",
                       name, path, spec_threads(&s), spec_smem_bytes(&s), bwd_key_blocks(&s, a->k.shape[1]) * group,
                       (long long)a->q.shape[2] / group, (long long)a->q.shape[0],
                       group > 1 ? ", causal key blocks of heads in groups (longest first across a group)" : "",
                       s.deterministic ? ", deterministic (dQ added in a fixed order)" : "",
                       tuned ? "the tuning database's winner for the nearest bucket"
                       : spec_is_wgmma_bwd(&s) ? (s.head_dim == 128 && !s.causal
                                                      ? "the sm_90a backward's tile (80 or 64 queries, whichever "
                                                        "covers seqlen_q with fewer padding rows, 80 within 4%)"
                                                      : "the sm_90a backward's one tile")
                                               : "the tile policy", L.total, where,
                       ctx->device_name, ctx->arch, emulated_note(ctx, emu), ctx->sm_count,
                       ctx->disk_ok ? ctx->disk.dir : ctx->disk_problem);
    return explain_fits(ctx, "fg_explain_bwd", n, len);
}

/* The checks of a backward call (fg_attention_bwd, rt_bwd_with_spec): the arguments, then the workspace
 * against the layout it needs (into *L); *empty when there is nothing to compute (no batch, no heads, or
 * neither queries nor keys). */
static fg_status bwd_check_call(const fg_context *ctx, const fg_bwd_args *a, bwd_layout *L, int *empty, fg_error *err) {
    fg_status st = rt_check_bwd_args(a, 0, 0, err);
    if (st != FG_OK) return st;
    bwd_workspace_layout(ctx, a, L);
    if ((st = rt_check_bwd_args(a, 1, L->total, err)) != FG_OK) return st;
    *empty = a->q.shape[0] == 0 || a->q.shape[2] == 0 || (a->q.shape[1] == 0 && a->k.shape[1] == 0);
    return FG_OK;
}

/* The backward of a checked, non-empty call with variant s: its three kernels on the stream. */
static fg_status launch_bwd(fg_context *ctx, const fg_spec *s, const fg_bwd_args *a, const bwd_layout *L,
                            void *stream, fg_error *err) {
    const int64_t b = a->q.shape[0], sq = a->q.shape[1], hq = a->q.shape[2], sk = a->k.shape[1];
    pthread_mutex_lock(&ctx->lock);
    fg_kernel *k = NULL;
    origin from;
    fg_status st = get_kernel(ctx, s, 0, &from, &k, err);
    fg_kernel kern;
    if (st == FG_OK) kern = *k; /* a copy: the cache may grow (and move) once the lock is released */
    pthread_mutex_unlock(&ctx->lock);
    if (st != FG_OK) return st;

    fg_bwd_params p;
    memset(&p, 0, sizeof p);
    p.q = a->q.data, p.k = a->k.data, p.v = a->v.data, p.o = a->o.data, p.dout = a->dout.data;
    p.lse = (const float *)a->lse.data;
    p.dq = a->dq.data, p.dk = a->dk.data, p.dv = a->dv.data;
    char *ws = (char *)a->workspace;
    p.dq_accum = (float *)(ws + L->dq_accum);
    p.lse2 = (float *)(ws + L->lse2);
    p.dsum = (float *)(ws + L->dsum);
    p.dq_sem = a->deterministic ? (int *)(ws + L->sem) : NULL;
    p.dkv_accum = a->q.shape[2] != a->k.shape[2] ? (float *)(ws + L->dkv) : NULL;
    const fg_tensor *ts[9] = {&a->q, &a->k, &a->v, &a->o, &a->dout, &a->dq, &a->dk, &a->dv, &a->lse};
    long long *strides[9] = {p.q_stride, p.k_stride, p.v_stride, p.o_stride, p.do_stride,
                             p.dq_stride, p.dk_stride, p.dv_stride, p.lse_stride};
    for (int t = 0; t < 9; t++)
        for (int i = 0; i < 3; i++) strides[t][i] = ts[t]->stride[i];
    p.batch = (int)b, p.heads_q = (int)hq, p.heads_kv = (int)a->k.shape[2];
    p.seqlen_q = (int)sq, p.seqlen_k = (int)sk, p.head_dim = (int)a->q.shape[3];
    p.softmax_scale = a->softmax_scale != 0.f ? a->softmax_scale : (float)(1.0 / sqrt((double)p.head_dim));
    p.scale_log2 = (float)((double)p.softmax_scale * 1.4426950408889634);
    const int group = rt_bwd_causal_group(ctx, s, a);
    while ((1 << p.causal_group_log2) < group) p.causal_group_log2++;
    /* The deterministic mode's rotated order makes a key block wait on key blocks after it in the grid, so
     * a head's key blocks must be able to run at once. In-order dispatch leaves at most one head of a launch
     * partly started, holding fewer SMs than its key blocks; with at most half the SMs' worth of key blocks
     * (the main kernel runs at least one CTA an SM) two such launches on concurrent streams still leave an
     * SM free for the CTAs they wait on. More key blocks, or FLASHGEN_DET_ROTATE=0: ascending, which waits
     * only on CTAs dispatched before. (backward_mma.cuh, fg_bwd_turn_rank.) */
    p.dq_rotate = a->deterministic && !a->causal && ctx->det_rotate && 2 * bwd_key_blocks(s, sk) <= ctx->sm_count;

    /* The second argument of the sm_90a main kernel and of the mma.sync one's tma=1 variants: the tensor
     * maps of Q, K, V and dO (as the forward's O), boxes of 64 columns by 64 query rows (80 for the sm_90a
     * kernel's 80-query blocks) or block_n keys
     * (backward_wgmma.cuh, backward_mma.cuh); the other kernels ignore it. */
    fg_tma_params tm;
    memset(&tm, 0, sizeof tm);
    void *params[] = {&p, &tm};
    if ((spec_is_wgmma_bwd(s) || s->tma) && sk > 0 &&
        (st = encode_maps(ctx, &tm, &a->q, &a->dout, &a->k, &a->v, spec_bwd_rows_block(s), s->block_n, 128, 0, err)) !=
            FG_OK)
        return st;
    const unsigned h = (unsigned)hq, bb = (unsigned)b, post_rows = (unsigned)spec_bwd_rows_block(s);
    /* pre (D, lse2, zeroed accumulator), main (none without keys: dK, dV are empty), post. Main and post
     * launch early where ctx->pdl allows it (a 9.0+ device running its own code, which is where the kernels'
     * griddepcontrol instructions exist: the variant's arch is the context's): main loads its K and V while pre ends, and
     * each waits for the kernel before it before touching the workspace (backward_mma.cuh). Pre starts after
     * everything before it on the stream, as any launch, so main's early loads of K and V, which the
     * caller's earlier work wrote, are safe. */
    const int early = ctx->pdl;
    const launch_item items[3] = {
        {kern.fn_pre, {(unsigned)((bwd_rows_read(s, sq) + 63) / 64), h, bb}, 256, 0, "fg_bwd_pre_kernel", 0},
        {kern.fn, {(unsigned)(bwd_key_blocks(s, sk) * group), h / (unsigned)group, bb},
         (unsigned)spec_threads(s),
         (unsigned)spec_smem_bytes(s), "fg_bwd_main_kernel", early},
        {kern.fn_post, {((unsigned)(sq > sk ? sq : sk) + post_rows - 1) / post_rows, h, bb}, 256, 0,
         "fg_bwd_post_kernel", early},
    };
    return launch_items(ctx, items, 3, stream, params, err);
}

fg_status fg_attention_bwd(fg_context *ctx, const fg_bwd_args *a, void *stream) {
    if (!ctx) return rt_no_context("fg_attention_bwd");
    fg_error err;
    fg_error_clear(&err);
    if (!a) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_attention_bwd: args is NULL");
        return rt_set_error(ctx, &err);
    }
    bwd_layout L;
    int empty;
    fg_spec s;
    if (bwd_check_call(ctx, a, &L, &empty, &err) != FG_OK ||
        (!empty && (choose_bwd_spec(ctx, a, &s, NULL, &err) != FG_OK || launch_bwd(ctx, &s, a, &L, stream, &err) != FG_OK)))
        return rt_set_error(ctx, &err);
    return FG_OK;
}

fg_status rt_bwd_with_spec(fg_context *ctx, const fg_spec *spec, const fg_bwd_args *a, void *stream, fg_error *err) {
    bwd_layout L;
    int empty;
    fg_status st = bwd_check_call(ctx, a, &L, &empty, err);
    if (st != FG_OK || empty) return st;
    if (spec->kind != FG_KIND_BWD || spec->dtype != a->q.dtype || spec->head_dim != (int)a->q.shape[3] ||
        (spec->causal != 0) != (a->causal != 0) || (spec->deterministic != 0) != (a->deterministic != 0) ||
        spec->arch != ctx->arch)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the variant does not match the call (kind, dtype, head_dim, "
                       "mask, deterministic) or this device's arch sm_%d", ctx->arch);
    if ((spec_is_wgmma_bwd(spec) && !ctx->wgmma) || (spec->tma && ctx->cu->cuTensorMapEncodeTiled == NULL))
        return fg_fail(err, FG_ERR_UNSUPPORTED, "this context runs no %s variant: %s",
                       spec->tma ? "tma=1 backward" : "sm_90a (wgmma) backward",
                       spec->tma ? "the driver lacks cuTensorMapEncodeTiled"
                                 : "the device is not sm_90, the driver lacks cuTensorMapEncodeTiled, or FLASHGEN_WGMMA=0");
    if ((spec_is_wgmma_bwd(spec) || spec->tma) && !bwd_tma_ready(a))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "an sm_90a or tma=1 backward variant needs Q, K, V and dO "
                       "that TMA can read (16-byte aligned pointers, strides multiples of 16 bytes)");
    if ((st = check_runnable(ctx, spec, err)) != FG_OK) return st;
    return launch_bwd(ctx, spec, a, &L, stream, err);
}
