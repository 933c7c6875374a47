/* serving_prefill.c: the serving forward's prefill on Hopper (with FLASHGEN_PREFILL_SM90A=1). A call whose
 * sequences fill query tiles runs the sm_90a forward's varlen=1 variant (TMA, wgmma, warp specialization;
 * forward_wgmma.cuh FG_VARLEN), the dense forward's speed on packed sequences, rather than the serving
 * kernel's mma.sync tiles. Decode-sized calls, paged caches and calls that ask for key splits stay on the
 * serving kernel (serving.c). */
#include <string.h>
#include "runtime/call_args.h"
#include "generator/mod.h"
#include "runtime/dispatch.h"

/* The longest sequence's queries from which the sm_90a forward takes a call: below, most of its 64-row query
 * blocks would be empty, and the serving kernel packs a KV head's query heads into its rows instead. */
#define PREFILL_MIN_Q 64

/* The grid of the call as a dense one (batch sequences of the longest length; strides TMA-legal, unused by
 * the kernel), the kernel's view of its tensors (vl), and O as TMA would see it (for the rules only: the
 * kernel writes O from its registers). */
static void prefill_views(const fg_varlen_args *a, const serving_call *c, fg_fwd_args *g, fwd_varlen *vl,
                          fg_tensor *o_map) {
    memset(g, 0, sizeof *g);
    memset(vl, 0, sizeof *vl);
    const fg_tensor *src[4] = {&a->q, &a->k, &a->v, &a->o};
    fg_tensor *dense[4] = {&g->q, &g->k, &g->v, &g->o};
    fg_tensor *map[4] = {&vl->q_map, &vl->k_map, &vl->v_map, o_map};
    long long *stride[4] = {vl->q_stride, vl->k_stride, vl->v_stride, vl->o_stride};
    for (int i = 0; i < 4; i++) {
        const fg_tensor *t = src[i];
        const int is_q = i == 0 || i == 3, packed = is_q ? c->packed_q : c->packed_k;
        const int64_t rows = is_q ? c->seqlen_q : c->packed_k ? c->max_k : c->seqlen_k;
        fg_tensor *d = dense[i];
        d->data = t->data, d->dtype = t->dtype, d->ndim = 4;
        if (packed) {
            d->shape[0] = c->batch, d->shape[1] = rows, d->shape[2] = t->shape[1], d->shape[3] = t->shape[2];
            d->stride[0] = t->stride[0] * rows, d->stride[1] = t->stride[0], d->stride[2] = t->stride[1], d->stride[3] = 1;
            stride[i][0] = 0, stride[i][1] = t->stride[0], stride[i][2] = t->stride[1];
            if (map[i]) *map[i] = rt_packed_as_batch_of_one(t);
        } else {
            *d = *t;
            d->shape[1] = rows; /* dense q: its length; dense k/v: the capacity */
            stride[i][0] = t->stride[0], stride[i][1] = t->stride[1], stride[i][2] = t->stride[2];
            if (map[i]) *map[i] = *t;
        }
    }
    if (a->lse.data) {
        g->lse.data = a->lse.data, g->lse.dtype = FG_DTYPE_F32, g->lse.ndim = 3;
        g->lse.shape[0] = c->batch, g->lse.shape[1] = c->hq, g->lse.shape[2] = c->seqlen_q;
        if (c->packed_q)
            vl->lse_stride[0] = 0, vl->lse_stride[1] = a->lse.stride[0], vl->lse_stride[2] = a->lse.stride[1];
        else
            vl->lse_stride[0] = a->lse.stride[0], vl->lse_stride[1] = a->lse.stride[1], vl->lse_stride[2] = a->lse.stride[2];
        for (int i = 0; i < 3; i++) g->lse.stride[i] = vl->lse_stride[i];
    }
    g->softmax_scale = a->softmax_scale;
    g->causal = a->causal;
    vl->cu_q = c->packed_q ? a->cu_seqlens_q : NULL;
    vl->cu_k = c->packed_k ? a->cu_seqlens_k : NULL;
    vl->used_k = a->seqused_k;
    vl->total_q = (int)c->total_q, vl->total_k = (int)c->total_k;
    vl->window_left = c->var.window_left, vl->window_right = c->var.window_right;
    vl->causal_top_left = c->var.causal_top_left;
    vl->sinks = a->sinks, vl->alibi_slopes = a->alibi_slopes, vl->softcap = a->softcap;
    rt_mod_aux(a->mod, a->mod_aux, &vl->mod_aux);
}

/* Whether the call runs here, and if so its variant in *spec: on a context with the sm_90a forward and
 * FLASHGEN_PREFILL_SM90A not 0 (the default), V of Q's head dim or (both multiples of 64) its own, keys packed or
 * dense (not paged) and of Q's dtype (an FP8 KV cache runs on the serving kernel), no split asked for, the longest
 * sequence at least PREFILL_MIN_Q queries, and tensors TMA can read (select_call_wgmma on the views TMA maps). The
 * call's model variants (window, top-left causal, sinks, softcap, ALiBi) are compiled in. */
static int prefill_spec(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, fg_spec *spec,
                        fg_fwd_args *g, fwd_varlen *vl, char *why, size_t nwhy) {
    const int own_v = c->head_dim_v != c->head_dim; /* V of its own head dim: both multiples of 64 here */
    if (own_v && (c->head_dim % 64 != 0 || c->head_dim_v % 64 != 0)) return 0;
    if (!ctx->prefill_sm90a || c->paged || c->kv_fp8 || a->num_splits > 1 || a->split_size > 0 ||
        c->seqlen_q < PREFILL_MIN_Q)
        return 0;
    fg_fwd_args maps;
    memset(&maps, 0, sizeof maps);
    prefill_views(a, c, g, vl, &maps.o);
    maps.q = vl->q_map, maps.k = vl->k_map, maps.v = vl->v_map;
    if (!select_call_wgmma(ctx, g) || !select_call_wgmma(ctx, &maps)) return 0;
    fg_error err;
    if (select_fwd_spec(ctx, g, spec, why, nwhy, &err) != FG_OK || !spec_is_wgmma(spec)) return 0;
    spec->varlen = 1;
    spec_take_variants(spec, &c->var);
    memcpy(spec->mod, c->mod_id, sizeof spec->mod);
    if (own_v) {
        /* Tiles for V's head dim where it is wider (as the policy picks them for such a spec). Where it is
         * narrower, O and P leave registers for V's head dim's tiles when the shared memory holds them: 192/128
         * causal runs 128 x 128 (H200, 2 x 8k, 16 heads: 980 us against 128 x 96's 1034, FA4 1011). */
        spec->head_dim_v = c->head_dim_v;
        fg_spec t = *spec;
        t.block_m = t.block_n = t.warps = t.stages = 0;
        if (c->head_dim_v < c->head_dim) t.head_dim = c->head_dim_v, t.head_dim_v = 0;
        if (spec_fill_tiles(&t, &ctx->policy, &err) == FG_OK) {
            t.head_dim = spec->head_dim, t.head_dim_v = c->head_dim_v;
            if (spec_validate(&t, &err) == FG_OK) *spec = t;
        }
    }
    spec_mod_tiles(spec); /* (over the policy's and the tuning database's) */
    return spec_validate(spec, &err) == FG_OK;
}

int serving_prefill_variant(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, fg_spec *spec) {
    fg_fwd_args g;
    fwd_varlen vl;
    return prefill_spec(ctx, a, c, spec, &g, &vl, NULL, 0);
}

/* The block map's keys a sequence: the grid's key rows (the longest packed sequence, or a dense cache's capacity). */
static long long map_keys(const serving_call *c) { return c->packed_k ? c->max_k : c->seqlen_k; }

/* The block map's bytes (in the workspace, or in the call's own mask_map) */
static size_t map_bytes(const fg_varlen_args *a, const serving_call *c) {
    return rt_mask_map_bytes(a->mod, c->batch, c->hq, c->seqlen_q, map_keys(c));
}

size_t serving_prefill_workspace(const fg_varlen_args *a, const serving_call *c) {
    return a->mask_map ? 0 : map_bytes(a, c);
}

int serving_prefill_run(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, void *stream, fg_status *st,
                        fg_error *err) {
    fg_spec spec;
    fg_fwd_args g;
    fwd_varlen vl;
    if (!prefill_spec(ctx, a, c, &spec, &g, &vl, NULL, 0)) return 0;
    *st = FG_OK;
    if (ctx->check_inputs && (*st = serving_check_device_inputs(ctx, a, c, stream, err)) != FG_OK) return 1;
    const size_t map = serving_prefill_workspace(a, c);
    if (map > 0 && a->workspace && a->workspace_size < map) {
        *st = fg_fail(err, FG_ERR_INVALID_ARGUMENT, "workspace_size is %zu bytes; the custom mask's block map needs %zu "
                      "(fg_attention_fwd_varlen_workspace_size), or pass no workspace to run without it",
                      a->workspace_size, map);
        return 1;
    }
    void *const mem = a->mask_map ? a->mask_map : map > 0 ? a->workspace : NULL; /* (mask_map: checked) */
    if (mem && a->mask_map_ready) { /* an earlier call's map */
        rt_mask_map_bind(a->mod, mem, c->batch, c->hq, c->seqlen_q, map_keys(c), &vl.mod_aux);
    } else if (mem) { /* the mask's block map first, on the same stream */
        CUfunction fn, fn_map;
        if ((*st = kernels_functions(ctx, &spec, &fn, &fn_map, err)) != FG_OK ||
            (*st = rt_mask_map_fill(ctx, a->mod, fn_map, mem, c->batch, c->hq, c->seqlen_q, map_keys(c), vl.cu_q, vl.cu_k,
                                    vl.used_k, vl.total_q, vl.total_k, &vl.mod_aux, stream, err)) != FG_OK)
            return 1;
    }
    *st = rt_fwd_launch_varlen(ctx, &spec, &g, &vl, stream, err);
    return 1;
}

int serving_prefill_explain(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, char *buf, size_t n) {
    fg_spec spec;
    fg_fwd_args g;
    fwd_varlen vl;
    char why[256] = "";
    if (!prefill_spec(ctx, a, c, &spec, &g, &vl, why, sizeof why)) return 0;
    char name[FG_SPEC_NAME_MAX];
    spec_format(&spec, name, sizeof name);
    static const char *const origin[] = {"memory", "disk cache", "bundle", "JIT compile"};
    /* the custom mask's block map: its bytes and the classification's cost, one fg_user_mask a position of the
       blocks intervals leave open (at most every position of every sequence's grid) */
    const size_t map = map_bytes(a, c);
    const int per_head = a->mod && mod_mask_reads_head(a->mod);
    char ws[360] = "none";
    if (map > 0 && a->mask_map && a->mask_map_ready)
        snprintf(ws, sizeof ws, "none; the custom mask's block map (%zu bytes) is the call's mask_map, as an earlier "
                 "call filled it: no classification, and the attention skips the blocks it hides", map);
    else if (map > 0)
        snprintf(ws, sizeof ws, "%zu bytes, the custom mask's block map (%s): a classification kernel before the "
                 "attention evaluates the mask at up to %lld positions (every position of each sequence%s) and "
                 "the attention skips the blocks it hides", a->mask_map ? 0 : map,
                 a->mask_map ? "in the call's mask_map" : a->workspace ? "given" : "no workspace given: every block evaluates the mask",
                 (long long)c->batch * c->seqlen_q * map_keys(c) * (per_head ? c->hq : 1), per_head ? ", each query head" : "");
    snprintf(buf, n,
             "variant %s\n"
             "queries: %s, %d sequences, up to %d tokens each; keys: %s, up to %d each\n"
             "prefill on the sm_90a forward (TMA, wgmma): tiles of %d queries of one sequence and head, %lld "
             "in the grid's bound; no key split\n"
             "tiles: %s\n"
             "workspace: %s\n"
             "code: %s\n",
             name, c->packed_q ? "packed" : "dense", c->batch, c->seqlen_q, c->packed_k ? "packed" : "dense", c->max_k,
             spec.block_m, (long long)((c->seqlen_q + spec.block_m - 1) / spec.block_m) * c->hq * c->batch,
             why[0] ? why : "the tile policy", ws, origin[kernels_origin_of(ctx, &spec, 1)]);
    return 1;
}
