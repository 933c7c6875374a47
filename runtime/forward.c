/* forward.c: the forward launch. From a checked call and its variant to one launch: the parameters, the
 * causal tile order, the grid and the sm_90a family's per-stream tile counters; the forward entry points
 * fg_attention_fwd (with its repeat-class fast path), fg_prepare, rt_fwd_with_spec, rt_fwd_spec and the
 * sm_90a family's variable-length launch (rt_fwd_launch_varlen, for serving.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "runtime/call_args.h"
#include "runtime/dispatch.h"

/* The causal tile order (fg_tile_order in templates/common/softmax.cuh, fg_cta_tile in forward_mma.cuh): how
 * many (head, batch) pairs G start their query blocks together, longest first; 1 is head by head.
 * Head by head, the last head's longest block starts when fewer than one head's blocks remain and the
 * grid ends waiting on it (a list-scheduling model puts that tail at 5-15% of the run at 2k-4k keys);
 * interleaving G pairs shortens it once G's blocks outlast a wave. But the CTAs running together then
 * serve G pairs, each pair's K/V stream shared by fewer of them, so G stays small: across all pairs, K and V
 * come from DRAM. The bound: at most SMs / 8 pairs (the CTAs running together, one or two per SM, serve
 * each pair with several), and on the sm_90a family also as many pairs as keep their K and V within a
 * third of the L2 (query heads sharing a KV head count once); the sm_90a family takes the largest power of
 * two under that dividing heads x batch (an uneven last group brings the tail back), the mma.sync family
 * the heads of one batch or none (the grouping its grid gives without a division, fg_cta_tile), at most
 * SMs / 4 of them, with its query blocks within grid y (65535). FLASHGEN_CAUSAL_GROUP=N sets the cap
 * instead, to measure the choice. */
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
        const int64_t kv_bytes = 2 * a->k.shape[1] * (int64_t)s->head_dim * dtype_size(s->dtype);
        cap = ctx->sm_count / 8;
        if (ctx->l2_bytes <= 0) return 1;
        if (kv_bytes > 0 && (int64_t)ctx->l2_bytes / 3 * (heads / a->k.shape[2]) / kv_bytes < cap)
            cap = (int64_t)ctx->l2_bytes / 3 * (heads / a->k.shape[2]) / kv_bytes;
    }
    int64_t g = 1;
    while (g * 2 <= cap && pairs % (g * 2) == 0) g *= 2;
    return (int)g;
}

/* The sm_90a family's tiles: query blocks x heads x batch (rt_launch_grid, and launch_fwd's one-CTA-a-tile
 * fallback when no counter can be had). */
static int64_t wgmma_tiles(const fg_spec *s, const fg_fwd_args *a) {
    return (a->q.shape[1] + s->block_m - 1) / s->block_m * a->q.shape[2] * a->q.shape[0];
}

/* The grid of a launch. The mma.sync family: (query blocks, heads, batch). The sm_90a family: tiles in a
 * 1-d grid, persistent: one CTA an SM, each CTA's producer taking its next tile from a per-stream counter
 * (FlashAttention-3's dynamic schedule; FG_GRID_DYNAMIC, the counter from tile_counter_for), longest first
 * for causal calls. Causal tiles cost in proportion to their keys, so a fixed stride gives some SMs all
 * the heavy ones, and one CTA per tile, balanced by the hardware scheduler, pays every tile's prologue and
 * epilogue in series. Non-causal tiles cost the same,
 * but SMs do not run at one speed, so the counter beats a fixed stride there too. FLASHGEN_SM90_GRID=
 * tiles|persistent (a stride) forces the others, for measuring. Returns the FG_GRID_* mode. */
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

/* Fills the kernel's parameters from a checked call and launches fn (the variant s) on stream. With vl (a
 * varlen=1 variant) a describes the grid (batch, the longest sequence's queries, heads) and vl the kernel's
 * strides, sequence offsets and the tensors TMA maps. */
static fg_status launch_fwd(fg_context *ctx, const fg_spec *sp, CUfunction fn, const fg_fwd_args *a,
                            const fwd_varlen *vl, void *stream, fg_error *err) {
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
    if (dtype_is_fp8(s.dtype)) {
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

    if (vl) {
        memcpy(p.q_stride, vl->q_stride, sizeof p.q_stride);
        memcpy(p.k_stride, vl->k_stride, sizeof p.k_stride);
        memcpy(p.v_stride, vl->v_stride, sizeof p.v_stride);
        memcpy(p.o_stride, vl->o_stride, sizeof p.o_stride);
        memcpy(p.lse_stride, vl->lse_stride, sizeof p.lse_stride);
        p.cu_seqlens_q = vl->cu_q, p.cu_seqlens_k = vl->cu_k, p.seqused_k = vl->used_k;
        p.total_q = vl->total_q, p.total_k = vl->total_k;
        p.window_left = vl->window_left, p.window_right = vl->window_right, p.causal_top_left = vl->causal_top_left;
        p.sinks = vl->sinks, p.alibi_slopes = vl->alibi_slopes, p.softcap = vl->softcap;
        p.mod_aux = vl->mod_aux;
    }

    fg_tma_params tm;
    void *params[] = {&p, &tm};
    if (vl) { /* varlen variants write O from the registers (spec_wgmma_o_direct) */
        const int rb = (s.head_dim * dtype_size(s.dtype)) % 128 == 0 ? 128 : 64;
        const fg_status st = tma_encode_maps(ctx, &tm, &vl->q_map, NULL, &vl->k_map, &vl->v_map, 64, s.block_n, rb, 0, err);
        if (st != FG_OK) return st;
    } else if (spec_is_wgmma(&s)) {
        const int fp8 = dtype_is_fp8(s.dtype);
        /* bytes per swizzled chunk row, as the emitter chose (emit.c): 128 when head_dim fills them (the
         * 16-bit O's rows are Q's) */
        const int rb = (s.head_dim * dtype_size(s.dtype)) % 128 == 0 ? 128 : 64;
        /* no map of O where the kernel writes it from the registers (spec_wgmma_o_direct) */
        const fg_status st = tma_encode_maps(ctx, &tm, &a->q, spec_wgmma_o_direct(&s) ? NULL : &a->o, &a->k, &a->v, 64,
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
    fg_tune_class cls = select_problem_class(FG_KIND_FWD, &a->q, &a->k, a->causal);
    if (!ctx->tuned) cls.gqa = 0, cls.seqlen_q = cls.seqlen_k = cls.batch_heads = 0; /* the policy ignores them */
    const fg_dtype out_dtype = select_out_dtype(a); /* not in the class: an FP8 call writing fp16 vs bf16 */
    const int wgmma = select_call_wgmma(ctx, a);  /* nor whether its tensors suit TMA */
    /* FP8 on the mma.sync family outside Hopper (where ptxas runs it as f16 HMMA with fp32 accumulation):
     * Ada's FP8 mma.sync accumulates with 13 mantissa bits (SageAttention2), and this kernel carries O in
     * that accumulator over every key block, the drift the sm_90a kernel's two-level accumulation exists to
     * avoid. No such part is at hand to check it on, so the risk is said once per context, not silently. */
    if (!wgmma && ctx->arch >= 89 && ctx->arch != 90 && dtype_is_fp8(a->q.dtype) && a->k.shape[1] > 256 &&
        !__atomic_load_n(&ctx->fp8_accum_warned, __ATOMIC_RELAXED) &&
        !__atomic_exchange_n(&ctx->fp8_accum_warned, 1, __ATOMIC_RELAXED))
        rt_log(ctx, FG_LOG_WARN, "FP8 on sm_%d runs the mma.sync kernel, which accumulates P.V in the tensor "
               "cores' FP8 accumulator (13 mantissa bits on Ada) over all %lld keys without an fp32 level: O "
               "may drift low where V's columns do not average 0 (measured on Hopper before its fix: 23%% at "
               "16k keys); fp16/bf16 inputs are accurate", ctx->arch, (long long)a->k.shape[1]);
    pthread_mutex_lock(&ctx->lock);
    if (ctx->last_kernel >= 0 && memcmp(&ctx->last_class, &cls, sizeof cls) == 0 && ctx->last_out_dtype == out_dtype &&
        ctx->last_wgmma == wgmma) {
        s = ctx->kernels[ctx->last_kernel].spec;
        fn = ctx->kernels[ctx->last_kernel].fn;
    }
    pthread_mutex_unlock(&ctx->lock);
    if (!fn) {
        if (select_fwd_spec(ctx, a, &s, NULL, 0, &err) != FG_OK) return rt_set_error(ctx, &err);
        pthread_mutex_lock(&ctx->lock);
        fg_kernel *k = NULL;
        kernels_origin from;
        fg_status st = kernels_get(ctx, &s, KERNELS_CALL, &from, &k, &err);
        if (st == FG_OK) {
            fn = k->fn;
            ctx->last_kernel = (int)(k - ctx->kernels);
            ctx->last_class = cls;
            ctx->last_out_dtype = out_dtype;
            ctx->last_wgmma = wgmma;
        }
        pthread_mutex_unlock(&ctx->lock);
        if (st != FG_OK) return rt_set_error(ctx, &err);
    }

    return launch_fwd(ctx, &s, fn, a, NULL, stream, &err) == FG_OK ? FG_OK : rt_set_error(ctx, &err);
}

fg_status rt_fwd_with_spec(fg_context *ctx, const fg_spec *spec, const fg_fwd_args *a, void *stream, fg_error *err) {
    fg_status st = rt_check_fwd_args(a, 1, err);
    if (st != FG_OK || rt_fwd_is_empty(a)) return st;
    if (spec->kind != FG_KIND_FWD || spec->dtype != a->q.dtype || spec_out_dtype(spec) != select_out_dtype(a) ||
        spec->head_dim != (int)a->q.shape[3] || (spec->causal != 0) != (a->causal != 0) || spec->arch != ctx->arch)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the variant does not match the call (dtype, output dtype, "
                       "head_dim, mask) or this device's arch sm_%d", ctx->arch);
    /* an 'a' (arch-specific) target runs here only as the wgmma family, on a context that takes it */
    if (spec->arch_accel && !ctx->wgmma)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "this context runs no sm_90a (wgmma) variant: the device is not "
                       "sm_90, the driver lacks cuTensorMapEncodeTiled, or FLASHGEN_WGMMA=0");
    if (spec_is_wgmma(spec) && !select_call_wgmma(ctx, a))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "an sm_90a (wgmma) variant needs tensors TMA can read (16-byte "
                       "aligned pointers, strides multiples of 16 bytes) with head_dim a multiple of 32 (FP8: of 64, "
                       "V key-major, and FLASHGEN_WGMMA_FP8 not 0)");
    CUfunction fn;
    if ((st = kernels_function(ctx, spec, &fn, err)) != FG_OK) return st;
    return launch_fwd(ctx, spec, fn, a, NULL, stream, err);
}

fg_status rt_fwd_launch_varlen(fg_context *ctx, const fg_spec *spec, const fg_fwd_args *a, const fwd_varlen *vl,
                               void *stream, fg_error *err) {
    CUfunction fn;
    fg_status st = kernels_function(ctx, spec, &fn, err);
    return st == FG_OK ? launch_fwd(ctx, spec, fn, a, vl, stream, err) : st;
}

fg_status rt_fwd_spec(fg_context *ctx, const fg_fwd_args *a, fg_spec *s, fg_error *err) {
    fg_status st = rt_check_fwd_args(a, 0, err);
    return st != FG_OK ? st : select_fwd_spec(ctx, a, s, NULL, 0, err);
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
    kernels_origin from;
    fg_kernel *k;
    fg_status st = kernels_get(ctx, &s, KERNELS_AHEAD, &from, &k, &err);
    /* A call before this one loaded the variant's quick build: what the caller pays for up front is the
     * optimized one, so its tier-up is waited for. */
    char quick[FG_SPEC_NAME_MAX] = "";
    if (st == FG_OK && k->quick) snprintf(quick, sizeof quick, "%s", k->name);
    pthread_mutex_unlock(&ctx->lock);
    if (st != FG_OK) return rt_set_error(ctx, &err);
    if (quick[0]) tiers_wait(ctx, quick);
    return FG_OK;
}
