/* backward_varlen.c: the backward of packed variable-length sequences (fg_attention_bwd_varlen). The kernels
 * are the backward's own, compiled with varlen=1 (backward_common.cuh FG_VARLEN): every CTA takes its
 * sequence's rows from cu_seqlens_q/k and works as on a batch of one. Here: the rules of the call, the
 * workspace laid out per sequence, and the launch as a dense call of the longest lengths. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "runtime/call_args.h"
#include "generator/mod.h"
#include "runtime/dispatch.h"

typedef struct bwd_varlen_call {
    int batch, hq, hkv, d, max_q, max_k;
    int dv;                                /* V's, O's, dO's and dV's head dim (v's shape; d unless it has its own) */
    int64_t total_q, total_k;
    call_variants var;                     /* the model variants, as serving_call's */
    fg_bwd_args view; /* the packed tensors as one batch of total rows (for fg_attention_bwd's rules) */
} bwd_varlen_call;

/* fg_varlen_bwd_args as 0.4.0 introduced it: the size older callers may pass (rt_args_copy). */
#define BWD_ARGS_FIRST_SIZE (offsetof(fg_varlen_bwd_args, workspace_size) + sizeof(size_t))

static fg_status copy_args(const fg_varlen_bwd_args *a, fg_varlen_bwd_args *out, fg_error *err) {
    return rt_args_copy(a, out, sizeof *out, BWD_ARGS_FIRST_SIZE, "fg_varlen_bwd_args", err);
}

/* The workspace of a checked call: per query head, FG_BWD_SEQ_PAD rows a sequence beyond its tokens, rounded up
 * to 128 (the layout of fg_bwd_seq_params). */
static fg_status layout(const fg_varlen_bwd_args *a, const bwd_varlen_call *c, backward_layout *L, fg_error *err) {
    size_t rows, kv_rows;
    const int ok = !__builtin_mul_overflow((size_t)c->batch, (size_t)FG_BWD_SEQ_PAD, &rows) &&
                   !__builtin_add_overflow(rows, (size_t)c->total_q + 127, &rows) && ((rows = rows / 128 * 128), 1) &&
                   !__builtin_mul_overflow((size_t)c->hq, c->hq != c->hkv ? (size_t)c->total_k : 0, &kv_rows) &&
                   backward_regions((size_t)c->hq, rows, (size_t)c->d, (size_t)c->dv, a->deterministic, kv_rows, L);
    if (!ok)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the backward's workspace for %lld query tokens in %d sequences x "
                       "heads_q %d x head_dim %d (V's %d) does not fit in size_t: the call is too large",
                       (long long)c->total_q, c->batch, c->hq, c->d, c->dv);
    /* then a custom mask's block map (mask_map.c), at a 256-byte boundary */
    L->map_bytes = a->mask_map ? 0 : rt_mask_map_bytes(a->mod, c->batch, c->hq, c->max_q, c->max_k); /* below SIZE_MAX:
                                                                                                        rt_check_mod */
    L->map = (L->total + 255) / 256 * 256; /* total is a multiple of 256 (backward_regions) */
    if (L->map_bytes > 0 && __builtin_add_overflow(L->map, L->map_bytes, &L->total))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the backward's workspace and the custom mask's block map for %d "
                       "sequences x heads_q %d do not fit in size_t together: the call is too large", c->batch, c->hq);
    return FG_OK;
}

/* mod_aux_grad's rules (flashgen.h): only where the mod declares the array trainable, fp32 of its aux array's shape,
 * contiguous and aligned, overlapping no other tensor of the call; not in the deterministic mode. Set means a data
 * pointer or a shape (ndim). */
static fg_status check_aux_grads(const fg_varlen_bwd_args *a, fg_error *err) {
    const int n = a->mod ? a->mod->n_aux : 0;
    const fg_tensor *others[8] = {&a->q, &a->k, &a->v, &a->o, &a->dout, &a->dq, &a->dk, &a->dv};
    static const char *const other_names[8] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv"};
    for (int i = 0; i < FG_MOD_AUX_MAX; i++) {
        const fg_tensor *g = &a->mod_aux_grad[i], *x = &a->mod_aux[i];
        if (!g->data && !g->ndim) continue;
        if (i >= n)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[%d] is set, but %s; leave it unset", i,
                           a->mod ? "the mod declares fewer aux arrays" : "the call has no mod");
        const mod_aux *d = &a->mod->aux[i];
        if (!d->trainable)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[%d] (%s) is set, but the mod declares '%s' without "
                           "\"trainable\": declare it fg.aux(\"%s\", %d, \"trainable\") to receive its gradient", i,
                           d->name, d->name, d->is_int ? "i32" : "f32", d->rank);
        if (a->deterministic)
            return fg_fail(err, FG_ERR_UNSUPPORTED, "mod_aux_grad[%d] (%s) and deterministic = 1 are both set; an aux "
                           "array's gradient is summed by fp32 atomics in no fixed order: run it without the "
                           "deterministic mode", i, d->name);
        int same = g->dtype == FG_DTYPE_F32 && g->ndim == x->ndim;
        for (int k = 0; same && k < x->ndim; k++) same = g->shape[k] == x->shape[k];
        if (!same)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[%d] (%s) must be f32 of mod_aux[%d]'s shape "
                           "(got %s of rank %d)", i, d->name, i, dtype_name(g->dtype), g->ndim);
        fg_status st = rt_check_aux_layout(g, "mod_aux_grad", i, d->name, 1, err);
        if (st != FG_OK) return st;
        for (int k = 0; k < 8; k++)
            if (rt_views_overlap(g, others[k]))
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[%d] (%s) overlaps %s in memory; the gradients "
                               "must not share memory with other tensors", i, d->name, other_names[k]);
        for (int k = 0; k < n; k++)
            if (rt_views_overlap(g, &a->mod_aux[k]) || (k != i && rt_views_overlap(g, &a->mod_aux_grad[k])))
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[%d] (%s) overlaps mod_aux%s[%d] in memory; the "
                               "gradients must not share memory with other tensors", i, d->name,
                               rt_views_overlap(g, &a->mod_aux[k]) ? "" : "_grad", k);
    }
    return FG_OK;
}

/* The model variants' rules (the forward's, serving_check_variants), those of the deterministic mode, dsink
 * given with sinks, and a custom mod's aux arrays (rt_check_mod). */
static fg_status check_variants(const fg_varlen_bwd_args *a, int need_data, bwd_varlen_call *c, fg_error *err) {
    const variant_args va = VARIANT_ARGS_OF(a);
    fg_status st = serving_check_variants(&va, c->max_q, c->max_k, need_data, &c->var, err);
    if (st != FG_OK) return st;
    if (c->var.window && a->deterministic)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "a window (or a top-left causal mask) and deterministic = 1 are both "
                       "set; the deterministic mode's order of dQ additions assumes every key block from the diagonal "
                       "on sees a query block: run the window without it");
    if (a->sinks && a->deterministic)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "sinks and deterministic = 1 are both set; dsink is summed by fp32 "
                       "atomics in no fixed order: run the sinks without the deterministic mode");
    if ((a->sinks != NULL) != (a->dsink != NULL) && need_data)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "sinks and dsink must be given together (dsink, fp32 [heads_q], "
                       "receives the sinks' gradient)");
    if (need_data && (uintptr_t)a->dsink % 4 != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "dsink (%p) is not 4-byte aligned; it must be fp32 [heads_q] in "
                       "device memory", (void *)a->dsink);
    if ((st = rt_check_mod(a->mod, a->mod_aux, need_data, c->batch, c->hq, c->max_q, c->max_k, err)) != FG_OK ||
        (st = rt_check_mask_map(a->mask_map, a->mask_map_size, a->mask_map_ready,
                                rt_mask_map_bytes(a->mod, c->batch, c->hq, c->max_q, c->max_k), err)) != FG_OK)
        return st;
    return need_data ? check_aux_grads(a, err) : FG_OK;
}

/* The rules of a call (need_data: a launch follows), then the workspace's layout into *L. V's head dim is v's
 * (v.shape[2]), as the forward's serving call takes it: o, dout and dv have it, q, k, dq and dk q's. */
static fg_status check_call(const fg_varlen_bwd_args *a, int need_data, bwd_varlen_call *c, backward_layout *L,
                            fg_error *err) {
    memset(c, 0, sizeof *c);
    static const char form_q[] = "[total_q, heads_q, head_dim] with cu_seqlens_q";
    static const char form_k[] = "[total_k, heads_kv, head_dim] with cu_seqlens_k";
    static const char form_o[] = "[total_q, heads_q, head_dim_v] with cu_seqlens_q (head_dim_v: v's head dim)";
    static const char form_v[] = "[total_k, heads_kv, head_dim_v] with cu_seqlens_k";
    const fg_tensor *qs[4] = {&a->q, &a->o, &a->dout, &a->dq}, *ks[4] = {&a->k, &a->v, &a->dk, &a->dv};
    static const char *const qn[4] = {"q", "o", "dout", "dq"}, *const kn[4] = {"k", "v", "dk", "dv"};
    /* the tensors of V's head dim (o, dout; v, dv): their dim 2 is v's, the others' q's; dims 0 and 1 q's or k's */
    static const int own_q[4] = {0, 1, 1, 0}, own_k[4] = {0, 1, 0, 1};
    fg_status st;
    for (int i = 0; i < 4; i++) {
        const char *fq = own_q[i] ? form_o : form_q, *fk = own_k[i] ? form_v : form_k;
        if ((st = serving_check_view(qs[i], qn[i], 3, serving_packed_dims, fq, 0, need_data, err)) != FG_OK ||
            (st = serving_check_view(ks[i], kn[i], 3, serving_packed_dims, fk, 0, need_data, err)) != FG_OK)
            return st;
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            const int vq = j == 2 && own_q[i], vk = j == 2 && own_k[i];
            const fg_tensor *qr = vq ? &a->v : &a->q, *kr = vk ? &a->v : &a->k;
            const char *qrn = vq ? "v's" : "q's", *krn = vk ? "v's" : "k's";
            const char *why = j < 2 ? "" : "; O, dO and dV have V's head dim (v.shape[2]), Q, K, dQ and dK q's";
            if (qs[i]->shape[j] != qr->shape[j])
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.shape[%d] (%s) is %lld; it must be %s, %lld%s", qn[i], j,
                               serving_packed_dims[j], (long long)qs[i]->shape[j], qrn, (long long)qr->shape[j], why);
            if (ks[i]->shape[j] != kr->shape[j])
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.shape[%d] (%s) is %lld; it must be %s, %lld%s", kn[i], j,
                               serving_packed_dims[j], (long long)ks[i]->shape[j], krn, (long long)kr->shape[j], why);
        }
    if (a->lse.ndim != 2 || a->lse.dtype != FG_DTYPE_F32 || a->lse.shape[0] != a->q.shape[1] ||
        a->lse.shape[1] != a->q.shape[0])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse must be fp32 [heads_q, total_q] = [%lld, %lld] (the forward's "
                       "packed LSE); it is %s with ndim %d", (long long)a->q.shape[1], (long long)a->q.shape[0],
                       dtype_name(a->lse.dtype), a->lse.ndim);
    c->total_q = a->q.shape[0], c->total_k = a->k.shape[0];
    c->hq = (int)a->q.shape[1], c->hkv = (int)a->k.shape[1], c->d = (int)a->q.shape[2], c->dv = (int)a->v.shape[2];
    if (a->batch < 0 || a->batch > 65535)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "batch is %d; it must be in [0, 65535] (the grid's z)", a->batch);
    c->batch = a->batch;
    if (a->max_seqlen_q < 0 || a->max_seqlen_q > c->total_q || a->max_seqlen_k < 0 || a->max_seqlen_k > c->total_k)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "max_seqlen_q (%d) and max_seqlen_k (%d) must be in [0, total_q] "
                       "and [0, total_k] (%lld, %lld)", a->max_seqlen_q, a->max_seqlen_k, (long long)c->total_q,
                       (long long)c->total_k);
    if (c->batch > 0 && ((c->total_q > 0 && a->max_seqlen_q == 0) || (c->total_k > 0 && a->max_seqlen_k == 0)))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "max_seqlen_%s is 0 with %lld packed tokens; it must bound the "
                       "longest sequence", c->total_q > 0 && a->max_seqlen_q == 0 ? "q" : "k",
                       (long long)(c->total_q > 0 && a->max_seqlen_q == 0 ? c->total_q : c->total_k));
    c->max_q = a->max_seqlen_q, c->max_k = a->max_seqlen_k;
    if ((st = check_variants(a, need_data, c, err)) != FG_OK) return st;
    if (need_data && c->batch > 0) {
        const int32_t *cu[2] = {a->cu_seqlens_q, a->cu_seqlens_k};
        for (int i = 0; i < 2; i++)
            if (!cu[i] || (uintptr_t)cu[i] % 4 != 0)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cu_seqlens_%s (%p) must be device memory holding batch + 1 "
                               "int32 offsets, 4-byte aligned", i ? "k" : "q", (const void *)cu[i]);
    }
    /* fg_attention_bwd's rules on the packed tensors as one batch (dtypes, head dims, alignment, overlaps) */
    fg_bwd_args *v = &c->view;
    v->q = rt_packed_as_batch_of_one(&a->q), v->o = rt_packed_as_batch_of_one(&a->o), v->dout = rt_packed_as_batch_of_one(&a->dout), v->dq = rt_packed_as_batch_of_one(&a->dq);
    v->k = rt_packed_as_batch_of_one(&a->k), v->v = rt_packed_as_batch_of_one(&a->v), v->dk = rt_packed_as_batch_of_one(&a->dk), v->dv = rt_packed_as_batch_of_one(&a->dv);
    v->lse = a->lse;
    v->lse.ndim = 3, v->lse.shape[0] = 1, v->lse.shape[1] = a->lse.shape[0], v->lse.shape[2] = a->lse.shape[1];
    v->lse.stride[0] = 0, v->lse.stride[1] = a->lse.stride[0], v->lse.stride[2] = a->lse.stride[1];
    v->softmax_scale = a->softmax_scale, v->causal = a->causal, v->deterministic = a->deterministic;
    v->workspace = a->workspace, v->workspace_size = a->workspace_size;
    if ((st = rt_check_bwd_args(v, 0, 0, err)) != FG_OK || (st = layout(a, c, L, err)) != FG_OK) return st;
    return rt_check_bwd_args(v, need_data, L->total, err);
}

static int call_empty(const bwd_varlen_call *c) {
    return c->batch == 0 || c->hq == 0 || (c->total_q == 0 && c->total_k == 0);
}

/* The call as a dense one of the longest lengths: `sel` with strides TMA can read when the packed tensors can
 * (for the choice of variant), `kern` with the kernel's strides (batch 0; the LSE's batch, head, token). */
static void dense_forms(const bwd_varlen_call *c, fg_bwd_args *sel, fg_bwd_args *kern) {
    *kern = c->view;
    fg_tensor *qt[4] = {&kern->q, &kern->o, &kern->dout, &kern->dq}, *kt[4] = {&kern->k, &kern->v, &kern->dk, &kern->dv};
    for (int i = 0; i < 4; i++) {
        qt[i]->shape[0] = c->batch, qt[i]->shape[1] = c->max_q;
        kt[i]->shape[0] = c->batch, kt[i]->shape[1] = c->max_k;
    }
    kern->lse.shape[0] = c->batch, kern->lse.shape[2] = c->max_q;
    *sel = *kern;
    fg_tensor *st[9] = {&sel->q, &sel->o, &sel->dout, &sel->dq, &sel->k, &sel->v, &sel->dk, &sel->dv, &sel->lse};
    for (int i = 0; i < 9; i++) st[i]->stride[0] = st[i]->stride[1] * (st[i]->shape[1] > 0 ? st[i]->shape[1] : 1);
}

/* FG_OPTION_CHECK_INPUTS: cu_seqlens_q/k read back and judged by the serving call's rules, with max_seqlen_q
 * and max_seqlen_k as bounds (the kernels' grids cover no more). */
static fg_status check_device_lengths(fg_context *ctx, const fg_varlen_bwd_args *a, const bwd_varlen_call *c,
                                      void *stream, fg_error *err) {
    fg_varlen_args lens;
    memset(&lens, 0, sizeof lens);
    lens.cu_seqlens_q = a->cu_seqlens_q, lens.cu_seqlens_k = a->cu_seqlens_k;
    serving_call sc;
    memset(&sc, 0, sizeof sc);
    sc.packed_q = sc.packed_k = 1;
    sc.batch = c->batch, sc.hq = c->hq, sc.hkv = c->hkv, sc.head_dim = c->d;
    sc.total_q = c->total_q, sc.total_k = c->total_k;
    sc.seqlen_q = c->max_q, sc.seqlen_k = (int)c->total_k, sc.max_k = c->max_k, sc.bound_k = c->max_k;
    return serving_check_device_inputs(ctx, &lens, &sc, stream, err);
}

/* dsink and the aux arrays' gradients start at 0 on the stream (the kernels add into them), even when no kernel
 * runs. */
static fg_status zero_sums(fg_context *ctx, const fg_varlen_bwd_args *a, const bwd_varlen_call *c, void *stream,
                           fg_error *err) {
    if (a->dsink && c->hq > 0)
        FG_CU(err, ctx->cu->cuMemsetD32Async((CUdeviceptr)(uintptr_t)a->dsink, 0u, (size_t)c->hq, (CUstream)stream));
    for (int i = 0; i < FG_MOD_AUX_MAX; i++) { /* likewise the aux arrays' gradients (checked: contiguous fp32) */
        const fg_tensor *g = &a->mod_aux_grad[i];
        if (g->data)
            FG_CU(err, ctx->cu->cuMemsetD32Async((CUdeviceptr)(uintptr_t)g->data, 0u,
                                                 (size_t)(g->shape[0] * (g->ndim == 2 ? g->shape[1] : 1)), (CUstream)stream));
    }
    return FG_OK;
}

fg_status fg_attention_bwd_varlen(fg_context *ctx, const fg_varlen_bwd_args *args, void *stream) {
    if (!ctx) return rt_no_context("fg_attention_bwd_varlen");
    fg_error err;
    fg_error_clear(&err);
    fg_varlen_bwd_args a;
    bwd_varlen_call c;
    backward_layout L;
    if (copy_args(args, &a, &err) != FG_OK || check_call(&a, 1, &c, &L, &err) != FG_OK) return rt_set_error(ctx, &err);
    if (zero_sums(ctx, &a, &c, stream, &err) != FG_OK) return rt_set_error(ctx, &err);
    if (call_empty(&c)) return FG_OK;
    if (ctx->check_inputs && check_device_lengths(ctx, &a, &c, stream, &err) != FG_OK) return rt_set_error(ctx, &err);
    fg_bwd_args sel, kern;
    dense_forms(&c, &sel, &kern);
    fg_spec s;
    if (select_bwd_spec(ctx, &sel, &s, NULL, &err) != FG_OK) return rt_set_error(ctx, &err);
    s.varlen = 1;
    spec_take_variants(&s, &c.var);
    if (a.mod) mod_id(a.mod, s.mod);
    bwd_varlen vl;
    memset(&vl, 0, sizeof vl);
    vl.q_map = c.view.q, vl.k_map = c.view.k, vl.v_map = c.view.v, vl.do_map = c.view.dout;
    vl.cu_q = a.cu_seqlens_q, vl.cu_k = a.cu_seqlens_k;
    vl.total_q = (int)c.total_q, vl.total_k = (int)c.total_k;
    vl.window_left = c.var.window_left, vl.window_right = c.var.window_right, vl.causal_top_left = a.causal_top_left;
    vl.softcap = a.softcap, vl.alibi_slopes = a.alibi_slopes, vl.sinks = a.sinks, vl.dsink = a.dsink;
    rt_mod_aux(a.mod, a.mod_aux, &vl.mod_aux);
    for (int i = 0; i < FG_MOD_AUX_MAX; i++) vl.mod_aux.grad[i] = (float *)a.mod_aux_grad[i].data;
    vl.mod = a.mod;
    vl.mask_map = a.mask_map, vl.mask_map_ready = a.mask_map_ready;
    if (rt_bwd_launch_varlen(ctx, &s, &kern, &L, &vl, stream, &err) != FG_OK) return rt_set_error(ctx, &err);
    return FG_OK;
}

fg_status fg_attention_bwd_varlen_workspace_size(fg_context *ctx, const fg_varlen_bwd_args *args, size_t *bytes) {
    if (!ctx) return rt_no_context("fg_attention_bwd_varlen_workspace_size");
    fg_error err;
    fg_error_clear(&err);
    if (!bytes) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "bytes is NULL");
        return rt_set_error(ctx, &err);
    }
    *bytes = 0;
    fg_varlen_bwd_args a;
    bwd_varlen_call c;
    backward_layout L;
    if (copy_args(args, &a, &err) != FG_OK || check_call(&a, 0, &c, &L, &err) != FG_OK) return rt_set_error(ctx, &err);
    *bytes = L.total;
    return FG_OK;
}

void fg_varlen_bwd_args_init(fg_varlen_bwd_args *a) {
    if (!a) return;
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
}
