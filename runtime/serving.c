/* serving.c: the serving forward (fg_attention_fwd_varlen): the variant's tiles, the split count over keys and
 * its workspace, the launch of forward_serving.cuh and, when keys are split, of the merge that combines the
 * splits; fg_explain_varlen and fg_context_set_option. The split count is a function of host arguments only,
 * so a CUDA graph replays the grid and workspace it captured. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "runtime/call_args.h"
#include "runtime/dispatch.h"

/* Whether a call's K and V can load by TMA (the tma=1 variants): the context takes them (FLASHGEN_SERVE_TMA), the
 * keys are packed or in a dense cache (a tensor map has no page table), head_dim (V's too) is 64, 128, 192 or 256
 * (128-byte swizzled boxes; the wide variants above 256 load by cp.async), V is a tensor of its own, and the key
 * tensors' pointers and strides are multiples of 16 bytes (serving_check's rules). */
static int serve_tma_applies(const fg_context *ctx, const serving_call *c) {
    return ctx->serve_tma && !c->paged && c->head_dim % 64 == 0 && c->head_dim <= 256 && c->head_dim_v == c->head_dim &&
           !c->v_in_k && !c->kv_fp8; /* (FP8 K and V are staged by cp.async for their dequantization) */
}

/* The variant a call's model variants (sinks, window, softcap, ALiBi) and V's head dim decide, whatever chose
 * its tiles and splits. */
static void spec_take_call_variant(fg_spec *s, const serving_call *c) {
    spec_take_variants(s, &c->var);
    memcpy(s->mod, c->mod_id, sizeof s->mod);
    s->head_dim_v = c->head_dim_v != c->head_dim ? c->head_dim_v : 0;
    s->v_in_k = c->v_in_k;
    s->kv_fp8 = c->kv_fp8;
}

/* The kernel of a plan's spec: the split count is a launch choice, not the kernel's. */
static fg_spec kernel_spec(const fg_spec *s) {
    fg_spec code = *s;
    code.splits = 0;
    return code;
}

/* The tiles of a serving call: decode-sized calls (at most 32 packed rows: query tokens x query heads a KV
 * head) take a tile of 16 or 32 rows with the warps split over the keys, so that all of a CTA's warps work on
 * the one row tile while its K/V stream in; longer calls the tile policy's prefill tile (spec_fill_tiles has
 * both). */
static fg_status serve_tiles(const fg_context *ctx, const serving_call *c, fg_dtype dt, int causal, fg_spec *s,
                             fg_error *err) {
    memset(s, 0, sizeof *s);
    s->kind = FG_KIND_SERVE;
    s->arch = ctx->arch;
    s->dtype = dt;
    s->out_dtype = dt;
    s->head_dim = c->head_dim;
    s->causal = causal;
    const int64_t rows = (int64_t)c->seqlen_q * c->group;
    if (rows <= 32) s->block_m = rows <= 16 ? 16 : 32;
    s->tma = serve_tma_applies(ctx, c);
    spec_take_call_variant(s, c);
    return spec_fill_tiles(s, &ctx->policy, err);
}

/* CTAs of variant s an SM, from shared memory (the kernels run at most 2: 128 threads of up to 255 registers). */
static int ctas_per_sm(const fg_context *ctx, const fg_spec *s) {
    const size_t need = spec_smem_bytes(s) + 1024, have = ctx->smem_optin + 1024;
    const int n = (int)(have / need);
    return n < 1 ? 1 : n > 2 ? 2 : n;
}

/* The split count when the call leaves it to flashgen. No split when the tiles already fill 80% of the GPU's CTA
 * slots or a tile has at most 4 key blocks. A decode tile (block_m 16 or 32) of a dense or packed cache streams
 * K and V and computes little, so what it needs is enough bytes in flight to keep the memory busy: the fewest
 * splits whose CTAs together have the memory's bandwidth times 2.5 us in flight (each its stages of K and V;
 * without the bandwidth, 60 KiB an SM), at least 2 key blocks a split. Measured on an H100 (3.35 TB/s: 8 MiB,
 * 64 CTAs of 128 KiB; bf16, d 128, GQA 32/8, one query token, CUDA-graph replays: bench/probes/decode_splits.py):
 * 64 CTAs were the fastest count at 1 x 128k, 2 x 64k, 4 x 32k and 8 x 32k keys (183, 180, 178 and 339 us),
 * where FlashAttention-3's wave-fill rule took 15, 6, 3 and 2 splits (200, 186, 183, 349 us): more splits only add
 * partials to merge. On an H200
 * 64 such CTAs kept its memory 60% busy (ncu), hence the bandwidth's part. A paged cache's CTAs keep fewer bytes
 * in flight (each row's page is looked up first: 55% of peak at 32 x 4k against the dense cache's 87% on the
 * H200), and with 64 of them 8 x 32k ran at half the dense speed; they, and prefill tiles, take the wave-fill
 * rule: among 1 .. min(128, key blocks, slots) the smallest count whose last wave is at least 85% as full as the
 * best count's (a wave's fill: w / ceil(w), w = tiles x splits / slots). */
static int split_rule(const fg_context *ctx, const serving_call *c, const fg_spec *s, int m_blocks, const char **why) {
    const int64_t tiles = (int64_t)m_blocks * c->hkv * c->batch;
    const int64_t slots = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 1) * ctas_per_sm(ctx, s);
    /* a tile's keys: every key, or with a window its rows' span of them */
    int64_t keys = c->max_k;
    const call_variants *w = &c->var;
    if (w->window_left >= 0 && (w->window_right >= 0 || c->causal)) {
        const int64_t span = (int64_t)w->window_left + c->seqlen_q + (w->window_right > 0 ? w->window_right : 0);
        if (span < keys) keys = span;
    }
    const int64_t n_blocks = (keys + s->block_n - 1) / s->block_n;
    if (tiles * 10 >= slots * 8) {
        *why = "no split: the tiles fill the GPU";
        return 1;
    }
    if (n_blocks <= 4) {
        *why = "no split: a tile has at most 4 key blocks";
        return 1;
    }
    if (s->block_m <= 32 && !c->paged) {
        const int64_t in_flight = (int64_t)s->stages * s->block_n * dtype_size(spec_kv_dtype(s)) *
                                  (spec_head_dim_padded(s) + (s->v_in_k ? 0 : spec_head_dim_v_padded(s)));
        const int64_t want = ctx->mem_bandwidth > 0 ? (int64_t)(ctx->mem_bandwidth * 2.5e-6)
                                                    : (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 1) * 60 * 1024;
        int64_t n = (want + tiles * in_flight - 1) / (tiles * in_flight);
        const int64_t most = n_blocks / 2 < 128 ? n_blocks / 2 : 128;
        n = n > most ? most : n < 1 ? 1 : n;
        *why = n > 1 ? "split: the fewest that keep the memory's bandwidth x 2.5 us of K and V in flight"
                     : "no split: the tiles keep the memory's bandwidth x 2.5 us of K and V in flight";
        return (int)n;
    }
    int64_t max = n_blocks < 128 ? n_blocks : 128;
    if (max > slots) max = slots;
    double best = 0, eff[129];
    for (int64_t n = 1; n <= max; n++) {
        const double w = (double)(tiles * n) / (double)slots;
        eff[n] = w / ceil(w);
        if (eff[n] > best) best = eff[n];
    }
    *why = "split: the smallest count within 85% of the best wave fill";
    for (int64_t n = 1; n <= max; n++)
        if (eff[n] >= 0.85 * best) return (int)n;
    return 1;
}

/* The workspace of plan's split count: fp32 O and LSE partials of every split, each region 256-byte aligned. */
static void plan_workspace(const serving_call *c, serving_plan *plan) {
    plan->part_o = plan->part_lse = plan->workspace = 0;
    if (plan->num_splits <= 1) return;
    const size_t rows = (size_t)plan->num_splits * (size_t)c->part_tokens * (size_t)c->hq;
    plan->part_lse = (rows * (size_t)c->head_dim_v * 4 + 255) / 256 * 256;
    plan->workspace = plan->part_lse + (rows * 4 + 255) / 256 * 256;
}

/* The tuning database's choice for the call's bucket (`flashgen tune` with a kind "serve" space): tiles and split
 * count of the fastest candidate measured at the same query-length bucket (keys and batch x heads: the nearest
 * bucket measured). 1 when it applies (plan's spec, m_blocks and num_splits set), else 0. */
static int serving_tuned(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, serving_plan *plan) {
    /* buckets are measured with K and V of Q's dtype and head dim */
    if (!ctx->tuned || c->head_dim_v != c->head_dim || c->kv_fp8) return 0;
    fg_tune_class q;
    memset(&q, 0, sizeof q);
    q.kind = FG_KIND_SERVE, q.dtype = a->q.dtype, q.head_dim = c->head_dim, q.causal = a->causal, q.gqa = c->group;
    q.seqlen_q = c->seqlen_q, q.seqlen_k = c->max_k, q.batch_heads = (int64_t)c->batch * c->hq;
    fg_spec t;
    fg_tune_record rec;
    if (tunedb_best_for(&ctx->tunedb, &q, 0, &t, &rec, plan->tuned_why, sizeof plan->tuned_why) != FG_OK ||
        rec.cls.seqlen_q != tunedb_bucket(c->seqlen_q) || t.splits < 1 || t.arch != ctx->arch)
        return 0;
    plan->spec = t;
    /* a bucket's winner may have loaded by TMA; a paged call, or a context without tensor maps, cannot */
    if (t.tma && (c->paged || !ctx->tma_maps)) plan->spec.tma = 0;
    spec_take_call_variant(&plan->spec, c); /* the bucket's tiles and splits serve any sinks and window */
    plan->m_blocks = (int)(((int64_t)c->seqlen_q * c->group + t.block_m - 1) / t.block_m);
    plan->num_splits = t.splits;
    plan->split_why = plan->tuned_why;
    return 1;
}

fg_status serving_plan_for(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, serving_plan *plan,
                           fg_error *err) {
    memset(plan, 0, sizeof *plan);
    fg_status st = serve_tiles(ctx, c, a->q.dtype, a->causal, &plan->spec, err);
    if (st != FG_OK) return st;
    const fg_spec *s = &plan->spec;
    plan->m_blocks = (int)(((int64_t)c->seqlen_q * c->group + s->block_m - 1) / s->block_m);
    const int64_t n_blocks = ((int64_t)c->max_k + s->block_n - 1) / s->block_n;
    if (a->split_size > 0) {
        plan->split_blocks = (a->split_size + s->block_n - 1) / s->block_n;
        const int64_t n = (n_blocks + plan->split_blocks - 1) / plan->split_blocks;
        plan->num_splits = n < 1 ? 1 : n > 256 ? 256 : (int)n;
        plan->split_why = "split_size: fixed boundaries per sequence";
    } else if (a->num_splits > 0) {
        plan->num_splits = a->num_splits;
        plan->split_why = "num_splits given by the call";
    } else if (ctx->num_splits > 0) {
        plan->num_splits = ctx->num_splits;
        plan->split_why = "FLASHGEN_NUM_SPLITS";
    } else {
        if (!serving_tuned(ctx, a, c, plan)) plan->num_splits = split_rule(ctx, c, s, plan->m_blocks, &plan->split_why);
        if (plan->num_splits > 1 && !a->workspace) {
            plan->num_splits = 1;
            plan->split_why = "no split: the call gave no workspace (fg_attention_fwd_varlen_workspace_size)";
        }
    }
    if ((int64_t)plan->m_blocks * plan->num_splits > INT32_MAX)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "max_seqlen_q x heads_q / heads_kv (%lld rows) with %d splits "
                       "exceeds the grid", (long long)c->seqlen_q * c->group, plan->num_splits);
    plan_workspace(c, plan);
    return FG_OK;
}

/* The parameters of the serving kernel for a checked call. */
static void serve_params(const fg_varlen_args *a, const serving_call *c, const serving_plan *plan, fg_serve_params *p) {
    memset(p, 0, sizeof *p);
    p->q = a->q.data, p->k = a->k.data, p->v = a->v.data, p->o = a->o.data;
    p->lse = (float *)a->lse.data;
    /* batch, token, head strides; packed tensors have batch stride 0 */
    const fg_tensor *t4[4] = {&a->q, &a->k, &a->v, &a->o};
    long long *out[4] = {p->q_stride, p->k_stride, p->v_stride, p->o_stride};
    for (int i = 0; i < 4; i++) {
        const fg_tensor *t = t4[i];
        if (t->ndim == 3) out[i][0] = 0, out[i][1] = t->stride[0], out[i][2] = t->stride[1];
        else out[i][0] = t->stride[0], out[i][1] = t->stride[1], out[i][2] = t->stride[2];
    }
    if (a->lse.data) {
        if (c->packed_q) p->lse_stride[0] = 0, p->lse_stride[1] = a->lse.stride[0], p->lse_stride[2] = a->lse.stride[1];
        else p->lse_stride[0] = a->lse.stride[0], p->lse_stride[1] = a->lse.stride[1], p->lse_stride[2] = a->lse.stride[2];
    }
    p->cu_seqlens_q = a->cu_seqlens_q;
    p->cu_seqlens_k = c->paged ? NULL : a->cu_seqlens_k;
    p->seqused_k = a->seqused_k;
    p->block_table = c->paged ? a->block_table : NULL;
    p->block_table_stride = a->block_table_stride ? a->block_table_stride : a->max_pages;
    p->max_pages = a->max_pages;
    p->page_size = c->page_size;
    p->num_pages = c->num_pages;
    p->batch = c->batch, p->heads_q = c->hq, p->heads_kv = c->hkv, p->group = c->group;
    p->seqlen_q = c->seqlen_q;
    p->seqlen_k = c->seqlen_k;
    p->total_q = (int)c->total_q, p->total_k = (int)c->total_k;
    p->head_dim = c->head_dim;
    p->head_dim_v = c->head_dim_v;
    p->softmax_scale = a->softmax_scale != 0.f ? a->softmax_scale : (float)(1.0 / sqrt((double)c->head_dim));
    p->scale_log2 = (float)((double)p->softmax_scale * 1.4426950408889634);
    p->num_splits = plan->num_splits;
    p->split_blocks = plan->split_blocks;
    if (plan->num_splits > 1) {
        p->o_part = (float *)((char *)a->workspace + plan->part_o);
        p->lse_part = (float *)((char *)a->workspace + plan->part_lse);
    }
    p->part_tokens = c->part_tokens;
    p->sinks = a->sinks;
    p->window_left = c->var.window_left; /* -1 without a window (serving_check_variants) */
    p->window_right = c->var.window_right;
    p->softcap = a->softcap;
    p->alibi_slopes = a->alibi_slopes;
    p->causal_top_left = c->var.causal_top_left;
    rt_mod_aux(a->mod, a->mod_aux, &p->mod_aux);
    /* FP8 K and V's descales: [1] read with strides 0, [batch, heads_kv] with its own */
    const fg_tensor *ds[2] = {&a->k_descale, &a->v_descale};
    const float **dp[2] = {&p->k_descale, &p->v_descale};
    long long *dst[2] = {p->k_descale_stride, p->v_descale_stride};
    for (int i = 0; i < 2; i++) {
        *dp[i] = ds[i]->data;
        dst[i][0] = ds[i]->ndim == 2 ? ds[i]->stride[0] : 0;
        dst[i][1] = ds[i]->ndim == 2 ? ds[i]->stride[1] : 0;
    }
}

/* The merge of a split call's partials into O and LSE (merge.cuh), sequence by sequence. */
static void combine_params(const fg_varlen_args *a, const serving_call *c, const fg_serve_params *sp, fg_merge_params *m) {
    memset(m, 0, sizeof *m);
    m->o_in = sp->o_part;
    m->lse_in = sp->lse_part;
    m->o_out = a->o.data;
    m->lse_out = sp->lse;
    const long long rows = (long long)c->part_tokens * c->hq;
    m->o_in_stride[0] = rows * c->head_dim_v, m->o_in_stride[1] = (long long)c->hq * c->head_dim_v, m->o_in_stride[2] = c->head_dim_v;
    m->lse_in_stride[0] = rows, m->lse_in_stride[1] = c->hq, m->lse_in_stride[2] = 1;
    memcpy(m->o_out_stride, sp->o_stride, sizeof m->o_out_stride);
    m->lse_out_stride[0] = sp->lse_stride[0], m->lse_out_stride[1] = sp->lse_stride[1], m->lse_out_stride[2] = sp->lse_stride[2];
    m->cu_seqlens = a->cu_seqlens_q;
    m->total = (int)c->total_q;
    m->states = sp->num_splits, m->tokens = c->seqlen_q, m->heads = c->hq, m->head_dim = c->head_dim_v, m->batch = c->batch;
    m->in_dtype = FG_DTYPE_F32, m->out_dtype = a->o.dtype;
}

static int serving_empty(const serving_call *c) {
    return c->batch == 0 || c->seqlen_q == 0 || c->hq == 0 || (c->packed_q && c->total_q == 0);
}

/* Runs a checked call with variant s (serving_plan_for's, or the caller's). */
static fg_status serve_run(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, const serving_plan *plan,
                           void *stream, fg_error *err) {
    if (plan->workspace > 0 && (!a->workspace || a->workspace_size < plan->workspace))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "workspace_size is %zu bytes; %d key splits need %zu "
                       "(fg_attention_fwd_varlen_workspace_size)", a->workspace ? a->workspace_size : 0,
                       plan->num_splits, plan->workspace);
    if (c->batch > 65535 || c->hkv > 65535)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "batch (%d) and heads_kv (%d) must be at most 65535 (the grid's "
                       "y and z)", c->batch, c->hkv);
    fg_spec code = kernel_spec(&plan->spec);
    fg_status st;
    if (ctx->check_inputs && (st = serving_check_device_inputs(ctx, a, c, stream, err)) != FG_OK) return st;
    CUfunction fn;
    if ((st = kernels_function(ctx, &code, &fn, err)) != FG_OK) return st;
    fg_serve_params p;
    serve_params(a, c, plan, &p);
    fg_tma_params tm;
    void *params[] = {&p, &tm};
    if (code.tma) { /* K and V as TMA maps them: [1, total_k, hkv, d] for packed keys, else the dense cache */
        if (c->paged)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "a tma=1 serving variant cannot read a paged cache");
        const int packed = a->k.ndim == 3;
        fg_tensor k4 = packed ? rt_packed_as_batch_of_one(&a->k) : a->k, none;
        fg_tensor v4 = packed ? rt_packed_as_batch_of_one(&a->v) : a->v;
        memset(&none, 0, sizeof none); /* no Q map: the serving kernel loads Q by cp.async */
        none.ndim = 4;
        if ((st = tma_encode_maps(ctx, &tm, &none, NULL, &k4, &v4, 64, code.block_n, 128, 0, err)) != FG_OK) return st;
    }
    const launch_item item = {fn,
                              {(unsigned)(plan->m_blocks * plan->num_splits), (unsigned)c->hkv, (unsigned)c->batch},
                              (unsigned)spec_threads(&plan->spec), (unsigned)spec_smem_bytes(&plan->spec),
                              "fg_attention_fwd_kernel (serving)", 0};
    if ((st = launch_items(ctx, &item, 1, stream, params, err)) != FG_OK || plan->num_splits == 1) return st;
    fg_merge_params m;
    combine_params(a, c, &p, &m);
    return merge_launch(ctx, &m, stream, err);
}

fg_status fg_attention_fwd_varlen(fg_context *ctx, const fg_varlen_args *args, void *stream) {
    if (!ctx) return rt_no_context("fg_attention_fwd_varlen");
    fg_error err;
    fg_error_clear(&err);
    fg_varlen_args a;
    serving_call c;
    serving_plan plan;
    if (serving_args_copy(args, &a, &err) != FG_OK || serving_check(&a, 1, &c, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    if (serving_empty(&c)) return FG_OK;
    fg_status st;
    if (serving_prefill_run(ctx, &a, &c, stream, &st, &err)) return st == FG_OK ? FG_OK : rt_set_error(ctx, &err);
    /* the serving kernel classifies by intervals and fills no map: a mask_map it is given to fill holds the map that
       settles nothing (every block mixed), which a later call reading it (mask_map_ready) evaluates in full */
    if (a.mask_map && !a.mask_map_ready &&
        rt_mask_map_settle_nothing(ctx, a.mod, a.mask_map, c.batch, c.hq, c.seqlen_q, c.packed_k ? c.max_k : c.seqlen_k,
                                   stream, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    if (serving_plan_for(ctx, &a, &c, &plan, &err) != FG_OK || serve_run(ctx, &a, &c, &plan, stream, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    return FG_OK;
}

fg_status rt_varlen_with_spec(fg_context *ctx, const fg_spec *spec, const fg_varlen_args *args, void *stream,
                              fg_error *err) {
    fg_varlen_args a;
    serving_call c;
    serving_plan plan;
    fg_status st;
    if ((st = serving_args_copy(args, &a, err)) != FG_OK || (st = serving_check(&a, 1, &c, err)) != FG_OK) return st;
    if (serving_empty(&c)) return FG_OK;
    if ((st = serving_plan_for(ctx, &a, &c, &plan, err)) != FG_OK) return st;
    if (spec->kind != FG_KIND_SERVE || spec->dtype != a.q.dtype || spec->head_dim != c.head_dim ||
        spec_head_dim_v(spec) != c.head_dim_v || spec->kv_fp8 != c.kv_fp8 ||
        (spec->causal != 0) != (a.causal != 0) || spec->arch != ctx->arch)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the variant does not match the call (kind=serve, dtype, kv, "
                       "head_dim, mask) or this device's arch sm_%d", ctx->arch);
    plan.spec = *spec;
    plan.spec.out_dtype = spec->dtype;
    spec_take_call_variant(&plan.spec, &c);
    if (spec->splits > 0 && a.split_size == 0) { /* the variant's own split count (the tuner's candidates) */
        plan.num_splits = spec->splits;
        plan_workspace(&c, &plan);
    }
    /* the explicit tiles change the row blocks, and the key blocks a split size covers */
    plan.m_blocks = (int)(((int64_t)c.seqlen_q * c.group + spec->block_m - 1) / spec->block_m);
    if (a.split_size > 0) plan.split_blocks = (a.split_size + spec->block_n - 1) / spec->block_n;
    return serve_run(ctx, &a, &c, &plan, stream, err);
}

fg_status fg_attention_fwd_varlen_workspace_size(fg_context *ctx, const fg_varlen_args *args, size_t *bytes) {
    if (!ctx) return rt_no_context("fg_attention_fwd_varlen_workspace_size");
    fg_error err;
    fg_error_clear(&err);
    if (!bytes) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "bytes is NULL");
        return rt_set_error(ctx, &err);
    }
    *bytes = 0;
    fg_varlen_args a;
    serving_call c;
    serving_plan plan;
    if (serving_args_copy(args, &a, &err) != FG_OK || serving_check(&a, 0, &c, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    if (serving_empty(&c)) return FG_OK;
    a.workspace = (void *)(uintptr_t)256; /* the size a call with a workspace needs */
    if (serving_plan_for(ctx, &a, &c, &plan, &err) != FG_OK) return rt_set_error(ctx, &err);
    *bytes = plan.workspace;
    /* the sm_90a prefill's (a custom mask's block map), where it takes the call: the larger of the two holds for
       either path (a variant named explicitly runs the serving kernel's plan) */
    fg_spec prefill;
    const size_t map = serving_prefill_workspace(&a, &c);
    if (map > *bytes && serving_prefill_variant(ctx, &a, &c, &prefill)) *bytes = map;
    return FG_OK;
}

fg_status fg_explain_varlen(fg_context *ctx, const fg_varlen_args *args, char *buf, size_t n) {
    if (!ctx) return rt_no_context("fg_explain_varlen");
    fg_error err;
    fg_error_clear(&err);
    if (!buf || n == 0) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "buf is NULL or n is 0");
        return rt_set_error(ctx, &err);
    }
    buf[0] = '\0';
    fg_varlen_args a;
    serving_call c;
    serving_plan plan;
    if (serving_args_copy(args, &a, &err) != FG_OK || serving_check(&a, 0, &c, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    if (!serving_empty(&c) && serving_prefill_explain(ctx, &a, &c, buf, n)) return FG_OK;
    if (serving_plan_for(ctx, &a, &c, &plan, &err) != FG_OK) return rt_set_error(ctx, &err);
    char name[FG_SPEC_NAME_MAX];
    fg_spec code = kernel_spec(&plan.spec);
    spec_format(&code, name, sizeof name);
    static const char *const origin[] = {"memory", "disk cache", "bundle", "JIT compile"};
    const kernels_origin from = kernels_origin_of(ctx, &code, 1);
    char kv[224] = "";
    if (c.kv_fp8) {
        static const char *const how[3] = {"absent (1)", "one for the tensor", "one per (sequence, KV head)"};
        snprintf(kv, sizeof kv, "keys and values: %s (an FP8 KV cache), dequantized exactly to %s in the kernel; "
                 "k_descale %s, v_descale %s\n", dtype_name((fg_dtype)c.kv_fp8), dtype_name(a.q.dtype),
                 how[c.kv_descale[0]], how[c.kv_descale[1]]);
    }
    snprintf(buf, n,
             "variant %s\n"
             "queries: %s, %d sequences, up to %d tokens each; keys: %s, up to %d each\n"
             "%s"
             "rows: the %d query heads of each KV head packed with the tokens (%lld rows a sequence), %d-row tiles: "
             "grid (%d row blocks x %d splits, %d KV heads, %d sequences)\n"
             "splits: %d (%s)\n"
             "workspace: %zu bytes\n"
             "code: %s\n",
             name, c.packed_q ? "packed" : "dense", c.batch, c.seqlen_q,
             c.paged ? "paged" : c.packed_k ? "packed" : "dense", c.max_k, kv, c.group, (long long)c.seqlen_q * c.group,
             plan.spec.block_m, plan.m_blocks, plan.num_splits, c.hkv, c.batch, plan.num_splits, plan.split_why,
             plan.workspace, origin[from]);
    return FG_OK;
}

fg_status fg_context_set_option(fg_context *ctx, fg_option option, int64_t value) {
    if (!ctx) return rt_no_context("fg_context_set_option");
    fg_error err;
    fg_error_clear(&err);
    const char *what = option == FG_OPTION_CHECK_INPUTS ? "FG_OPTION_CHECK_INPUTS" : "FG_OPTION_JIT_TIERS";
    switch (option) {
    case FG_OPTION_CHECK_INPUTS:
        if (value != 0 && value != 1) break;
        __atomic_store_n(&ctx->check_inputs, (int)value, __ATOMIC_RELAXED);
        return FG_OK;
    case FG_OPTION_JIT_TIERS:
        if (value != 0 && value != 1) break;
        pthread_mutex_lock(&ctx->lock);
        ctx->tiers.on = (int)value;
        pthread_mutex_unlock(&ctx->lock);
        return FG_OK;
    default:
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "option %d is not an fg_option", (int)option);
        return rt_set_error(ctx, &err);
    }
    fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "%s takes 0 or 1, not %lld", what, (long long)value);
    return rt_set_error(ctx, &err);
}

void fg_varlen_args_init(fg_varlen_args *a) {
    if (!a) return;
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
}
