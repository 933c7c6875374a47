/* backward.c: the backward launch. The workspace's layout (its size is a function of the call and the
 * device only), the checks of a call, and its three kernels (pre: D, lse2 and the zeroed dQ accumulator;
 * main; post: dQ, and GQA's dK and dV sums) with the causal key-block order; the backward entry points
 * fg_attention_bwd, fg_attention_bwd_workspace_size and rt_bwd_with_spec. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "runtime/call_args.h"
#include "runtime/dispatch.h"


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

/* x * y * z * w into *out; 0 on overflow of size_t. */
static int mul4(size_t x, size_t y, size_t z, size_t w, size_t *out) {
    return !__builtin_mul_overflow(x, y, out) && !__builtin_mul_overflow(*out, z, out) &&
           !__builtin_mul_overflow(*out, w, out);
}

/* *off + bytes, aligned to 256, into *off; 0 on overflow. */
static int advance(size_t *off, size_t bytes) {
    return !__builtin_add_overflow(*off, bytes, off) && !__builtin_add_overflow(*off, 255, off) && ((*off &= ~(size_t)255), 1);
}

int backward_regions(size_t heads_rows, size_t rows, size_t d, size_t dv, int deterministic, size_t kv_rows,
                     backward_layout *L) {
    size_t off = 0, dq, lse, sem, dkv;
    memset(L, 0, sizeof *L);
    const size_t widest = d > dv ? d : dv; /* (the call's rules keep both <= 256) */
    const size_t d_pad = widest <= 256 ? (size_t)spec_bwd_dim_padded((int)d, (int)widest) : d;
    const int ok = mul4(heads_rows, rows, d_pad, 4, &dq) && mul4(heads_rows, rows, 1, 4, &lse) &&
                   mul4(heads_rows, rows / 16, 1, deterministic ? 4 : 0, &sem) && mul4(kv_rows, d + dv, 1, 4, &dkv) &&
                   (L->dq_accum = off, advance(&off, dq)) && (L->lse2 = off, advance(&off, lse)) &&
                   (L->dsum = off, advance(&off, lse)) && (L->sem = off, advance(&off, sem)) &&
                   (L->dkv = off, advance(&off, dkv));
    L->total = off;
    return ok;
}

fg_status backward_workspace_layout(const fg_context *ctx, const fg_bwd_args *a, backward_layout *L, fg_error *err) {
    const size_t b = (size_t)a->q.shape[0], hq = (size_t)a->q.shape[2], hkv = (size_t)a->k.shape[2];
    const size_t sq_pad = bwd_rows_padded(ctx, a), sk = (size_t)a->k.shape[1];
    const size_t d = (size_t)a->q.shape[3], dv = (size_t)a->v.shape[3];
    size_t bhq, kv_rows;
    const int ok = mul4(b, hq, 1, 1, &bhq) && mul4(b, hq, sk, hq != hkv, &kv_rows) &&
                   backward_regions(bhq, sq_pad, d, dv, a->deterministic, kv_rows, L);
    if (!ok)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the backward's workspace for batch %lld x heads_q %lld x seqlen "
                       "%lld (keys %lld) x head_dim %lld (V's %lld) does not fit in size_t: the call is too large",
                       (long long)b, (long long)hq, (long long)a->q.shape[1], (long long)sk, (long long)d, (long long)dv);
    return FG_OK;
}

fg_status fg_attention_bwd_workspace_size(fg_context *ctx, const fg_bwd_args *a, size_t *bytes) {
    if (!ctx) return rt_no_context("fg_attention_bwd_workspace_size");
    fg_error err;
    fg_error_clear(&err);
    if (!a || !bytes) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_attention_bwd_workspace_size: %s is NULL", !a ? "args" : "bytes");
        return rt_set_error(ctx, &err);
    }
    backward_layout L;
    if (rt_check_bwd_args(a, 0, 0, &err) != FG_OK || backward_workspace_layout(ctx, a, &L, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    *bytes = L.total;
    return FG_OK;
}

long long backward_key_blocks(const fg_spec *s, long long sk) { return (sk + s->block_n - 1) / s->block_n; }

/* How many heads' causal key blocks the backward's main kernel interleaves (fg_bwd_cta_tile, backward_mma.cuh):
 * 1 unless causal on the sm_90a kernel (the mma.sync kernel keeps its grid: the grouped order spills
 * there), else the largest power of two dividing the heads whose streamed
 * rows (Q and dO, 16-bit, and the fp32 dQ accumulator: 8 bytes a head_dim column a query row) fit in a
 * third of L2, as FlashAttention-3's backward sizes its head sections. FLASHGEN_CAUSAL_GROUP=N caps it
 * instead (1: head by head, to measure the choice). A driver that cannot say the L2 size leaves 1. */
int rt_bwd_causal_group(const fg_context *ctx, const fg_spec *s, const fg_bwd_args *a) {
    if (!s->causal || !spec_is_wgmma_bwd(s)) return 1;
    const int64_t heads = a->q.shape[2], nb = backward_key_blocks(s, a->k.shape[1]);
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

/* The checks of a backward call (fg_attention_bwd, rt_bwd_with_spec): the arguments, then the workspace
 * against the layout it needs (into *L); *empty when there is nothing to compute (no batch, no heads, or
 * neither queries nor keys). */
static fg_status bwd_check_call(const fg_context *ctx, const fg_bwd_args *a, backward_layout *L, int *empty, fg_error *err) {
    fg_status st = rt_check_bwd_args(a, 0, 0, err);
    if (st != FG_OK) return st;
    if ((st = backward_workspace_layout(ctx, a, L, err)) != FG_OK) return st;
    if ((st = rt_check_bwd_args(a, 1, L->total, err)) != FG_OK) return st;
    *empty = a->q.shape[0] == 0 || a->q.shape[2] == 0 || (a->q.shape[1] == 0 && a->k.shape[1] == 0);
    return FG_OK;
}

/* The backward of a checked, non-empty call with variant s: its three kernels on the stream. With vl (a varlen=1
 * variant) a describes the grids (batch sequences of the longest lengths) with the kernel's strides (batch 0),
 * and vl the sequences' offsets and the packed tensors TMA maps. */
static fg_status launch_bwd(fg_context *ctx, const fg_spec *s, const fg_bwd_args *a, const backward_layout *L,
                            const bwd_varlen *vl, void *stream, fg_error *err) {
    const int64_t b = a->q.shape[0], sq = a->q.shape[1], hq = a->q.shape[2], sk = a->k.shape[1];
    pthread_mutex_lock(&ctx->lock);
    fg_kernel *k = NULL;
    kernels_origin from;
    fg_status st = kernels_get(ctx, s, KERNELS_CALL, &from, &k, err);
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
    p.dq_rotate = a->deterministic && !a->causal && ctx->det_rotate && 2 * backward_key_blocks(s, sk) <= ctx->sm_count;
    if (vl) {
        p.cu_seqlens_q = vl->cu_q, p.cu_seqlens_k = vl->cu_k, p.total_q = vl->total_q, p.total_k = vl->total_k;
        p.window_left = vl->window_left, p.window_right = vl->window_right, p.causal_top_left = vl->causal_top_left;
        p.softcap = vl->softcap, p.alibi_slopes = vl->alibi_slopes, p.sinks = vl->sinks, p.dsink = vl->dsink;
        p.mod_aux = vl->mod_aux;
    }

    /* The second argument of the sm_90a main kernel and of the mma.sync one's tma=1 variants: the tensor
     * maps of Q, K, V and dO (as the forward's O), boxes of 64 columns by 64 query rows (80 for the sm_90a
     * kernel's 80-query blocks) or block_n keys
     * (backward_wgmma.cuh, backward_mma.cuh); the other kernels ignore it. */
    fg_tma_params tm;
    memset(&tm, 0, sizeof tm);
    void *params[] = {&p, &tm};
    const fg_tensor *mq = vl ? &vl->q_map : &a->q, *mdo = vl ? &vl->do_map : &a->dout, *mk = vl ? &vl->k_map : &a->k,
                    *mv = vl ? &vl->v_map : &a->v;
    if ((spec_is_wgmma_bwd(s) || s->tma) && sk > 0 &&
        (st = tma_encode_maps(ctx, &tm, mq, mdo, mk, mv, spec_bwd_rows_block(s), s->block_n, 128, 0, err)) != FG_OK)
        return st;
    const unsigned h = (unsigned)hq, bb = (unsigned)b, post_rows = (unsigned)spec_bwd_rows_block(s);
    /* pre (D, lse2, zeroed accumulator), main (none without keys: dK, dV are empty), post. Main and post
     * launch early where ctx->pdl allows it (a 9.0+ device running its own code, which is where the kernels'
     * griddepcontrol instructions exist: the variant's arch is the context's): main loads its K and V while pre ends, and
     * each waits for the kernel before it before touching the workspace (backward_mma.cuh). Pre starts after
     * everything before it on the stream, as any launch, so main's early loads of K and V, which the
     * caller's earlier work wrote, are safe. */
    /* a custom mask's block map first (varlen calls whose mask reads aux arrays): pre, a plain launch, starts after
       it, and main, early, after pre's CTAs have all started */
    if (vl && vl->mask_map && vl->mask_map_ready) /* an earlier call's map (checked against this call's shapes) */
        rt_mask_map_bind(vl->mod, vl->mask_map, (int)b, (int)hq, sq, sk, &p.mod_aux);
    else if (vl && (vl->mask_map || L->map_bytes > 0) &&
        (st = rt_mask_map_fill(ctx, vl->mod, kern.fn_map, vl->mask_map ? vl->mask_map : ws + L->map, (int)b, (int)hq, sq,
                               sk, vl->cu_q, vl->cu_k, NULL,
                               vl->total_q, vl->total_k, &p.mod_aux, stream, err)) != FG_OK)
        return st;
    const int early = ctx->pdl;
    const launch_item items[3] = {
        {kern.fn_pre, {(unsigned)((bwd_rows_read(s, sq) + 63) / 64), h, bb}, 256, 0, "fg_bwd_pre_kernel", 0},
        {kern.fn, {(unsigned)(backward_key_blocks(s, sk) * group), h / (unsigned)group, bb},
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
    backward_layout L;
    int empty;
    fg_spec s;
    if (bwd_check_call(ctx, a, &L, &empty, &err) != FG_OK ||
        (!empty &&
         (select_bwd_spec(ctx, a, &s, NULL, &err) != FG_OK || launch_bwd(ctx, &s, a, &L, NULL, stream, &err) != FG_OK)))
        return rt_set_error(ctx, &err);
    return FG_OK;
}

fg_status rt_bwd_with_spec(fg_context *ctx, const fg_spec *spec, const fg_bwd_args *a, void *stream, fg_error *err) {
    backward_layout L;
    int empty;
    fg_status st = bwd_check_call(ctx, a, &L, &empty, err);
    if (st != FG_OK || empty) return st;
    if (spec->kind != FG_KIND_BWD || spec->dtype != a->q.dtype || spec->head_dim != (int)a->q.shape[3] ||
        spec_head_dim_v(spec) != (int)a->v.shape[3] || (spec->causal != 0) != (a->causal != 0) ||
        (spec->deterministic != 0) != (a->deterministic != 0) || spec->arch != ctx->arch)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the variant does not match the call (kind, dtype, head_dim, "
                       "head_dim_v, mask, deterministic) or this device's arch sm_%d", ctx->arch);
    if ((spec_is_wgmma_bwd(spec) && !ctx->wgmma) || (spec->tma && ctx->cu->cuTensorMapEncodeTiled == NULL))
        return fg_fail(err, FG_ERR_UNSUPPORTED, "this context runs no %s variant: %s",
                       spec->tma ? "tma=1 backward" : "sm_90a (wgmma) backward",
                       spec->tma ? "the driver lacks cuTensorMapEncodeTiled"
                                 : "the device is not sm_90, the driver lacks cuTensorMapEncodeTiled, or FLASHGEN_WGMMA=0");
    if ((spec_is_wgmma_bwd(spec) || spec->tma) && !select_bwd_tma_ready(a))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "an sm_90a or tma=1 backward variant needs Q, K, V and dO "
                       "that TMA can read (16-byte aligned pointers, strides multiples of 16 bytes)");
    if ((st = select_check_runnable(ctx, spec, err)) != FG_OK) return st;
    return launch_bwd(ctx, spec, a, &L, NULL, stream, err);
}

fg_status rt_bwd_launch_varlen(fg_context *ctx, const fg_spec *s, const fg_bwd_args *a, const backward_layout *L,
                               const bwd_varlen *vl, void *stream, fg_error *err) {
    return launch_bwd(ctx, s, a, L, vl, stream, err);
}
