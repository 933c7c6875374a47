/* serving_args.c: the rules of a serving call's arguments (fg_varlen_args), each failure a sentence naming the
 * argument and the rule, and the check of its device-resident inputs (FG_OPTION_CHECK_INPUTS): the lengths
 * and the block table read back to the host and judged there, entry by entry. Reading them back costs a
 * synchronization whichever side judges them; judged on the host, the rules are plain C that CI tests
 * without a GPU (serving_validate_lengths), and the sentence can quote the entry. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/call_args.h"
#include "generator/mod.h"
#include "runtime/dispatch.h"
#include "core/alloc.h"

const char *const serving_packed_dims[3] = {"tokens", "heads", "head_dim"};
static const char *const dense_dims[4] = {"batch", "seqlen", "heads", "head_dim"};
static const char *const paged_dims[4] = {"num_pages", "page_size", "heads", "head_dim"};

/* Past this many bytes a view cannot be real memory. */
#define SPAN_LIMIT (1ll << 48)

static int empty_view(const fg_tensor *t) {
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return 1;
    return 0;
}

/* Structure of a Q/K/V/O view: ndim, sizes and strides in range, a pointer when needed, the last dim
 * contiguous, 16-byte aligned pointer and strides (dims of size 1 excepted), an extent within memory. */
fg_status serving_check_view(const fg_tensor *t, const char *name, int ndim, const char *const *dims, const char *form,
                            int fp8_ok, int need_data, fg_error *err) {
    if (t->ndim != ndim)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.ndim is %d; here it must be %d (%s)", name, t->ndim, ndim, form);
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] < 0 || t->shape[i] > INT32_MAX)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.shape[%d] (%s) is %lld; sizes must be in [0, 2^31)", name,
                           i, dims[i], (long long)t->shape[i]);
        if (t->stride[i] < 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.stride[%d] (%s) is %lld; strides must be >= 0", name, i,
                           dims[i], (long long)t->stride[i]);
    }
    if (t->dtype != FG_DTYPE_F16 && t->dtype != FG_DTYPE_BF16 && t->dtype != FG_DTYPE_F32 && !(fp8_ok && dtype_is_fp8(t->dtype)))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.dtype is %s; it must be fp16 or bf16%s", name, dtype_name(t->dtype),
                       fp8_ok ? " (or e4m3 or e5m2: an FP8 KV cache)" : "");
    const int64_t last = rt_view_last_offset(t);
    if (last < 0 || last >= SPAN_LIMIT / dtype_size(t->dtype)) /* (divided: the product may overflow) */
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s's strides with its shape span more than 2^48 bytes", name);
    if (ndim >= 2 && t->shape[ndim - 1] > 1 && t->stride[ndim - 1] != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.stride[%d] (head_dim) is %lld; the last dimension must be "
                       "contiguous (stride 1)", name, ndim - 1, (long long)t->stride[ndim - 1]);
    if (!need_data || empty_view(t)) return FG_OK;
    if (!t->data) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.data is NULL", name);
    if ((uintptr_t)t->data % 16 != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.data (%p) is not 16-byte aligned; flashgen loads 16 bytes "
                       "at a time", name, t->data);
    for (int i = 0; i + 1 < ndim; i++)
        if (t->shape[i] > 1 && (t->stride[i] * dtype_size(t->dtype)) % 16 != 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.stride[%d] (%s) is %lld elements, not a multiple of 16 "
                           "bytes", name, i, dims[i], (long long)t->stride[i]);
    return FG_OK;
}

/* fg_varlen_args as 0.4.0 introduced it: the size older callers may pass (rt_args_copy). */
#define VARLEN_ARGS_FIRST_SIZE (offsetof(fg_varlen_args, workspace_size) + sizeof(size_t))

fg_status serving_args_copy(const fg_varlen_args *a, fg_varlen_args *out, fg_error *err) {
    return rt_args_copy(a, out, sizeof *out, VARLEN_ARGS_FIRST_SIZE, "fg_varlen_args", err);
}

static const char *const kv_descale_names[2] = {"k_descale", "v_descale"};

/* The descale factors of FP8 K and V (fg_varlen_args' k_descale, v_descale): only with FP8 k and v, each given one
 * rt_check_descale's rules for the call's batch and heads_kv. Without data (the queries that take no pointers), a
 * descale of ndim > 0 counts as given. */
static fg_status check_kv_descales(const fg_varlen_args *a, int need_data, serving_call *c, fg_error *err) {
    const fg_tensor *ds[2] = {&a->k_descale, &a->v_descale};
    for (int i = 0; i < 2; i++) {
        if (!ds[i]->data && (need_data || ds[i]->ndim == 0)) continue;
        if (!c->kv_fp8)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s is set but k and v are %s; descale factors are for FP8 k "
                           "and v (e4m3, e5m2) only: leave %s.data NULL", kv_descale_names[i], dtype_name(a->k.dtype),
                           kv_descale_names[i]);
        fg_status st = rt_check_descale(ds[i], kv_descale_names[i], c->batch, c->hkv, need_data, err);
        if (st != FG_OK) return st;
        c->kv_descale[i] = ds[i]->ndim == 2 ? 2 : 1;
    }
    return FG_OK;
}

fg_status serving_check(const fg_varlen_args *a, int need_data, serving_call *c, fg_error *err) {
    memset(c, 0, sizeof *c);
    fg_status st;
    const int packed_q = a->cu_seqlens_q != NULL || (!need_data && a->q.ndim == 3);
    const int paged = a->block_table != NULL || (!need_data && a->max_pages > 0);
    const int packed_k = !paged && (a->cu_seqlens_k != NULL || (!need_data && a->k.ndim == 3));
    if (a->q.ndim == 3 && !packed_q)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "q is 3-d (packed tokens) but cu_seqlens_q is NULL; packed "
                       "queries need their sequences' offsets");
    if (dtype_is_fp8(a->q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "q.dtype is %s; serving calls take fp16 or bf16 queries: FP8 goes "
                       "in K and V only (an FP8 KV cache, with q and o 16-bit)", dtype_name(a->q.dtype));
    if ((st = serving_check_view(&a->q, "q", packed_q ? 3 : 4, packed_q ? serving_packed_dims : dense_dims,
                         packed_q ? "[total_q, heads_q, head_dim] with cu_seqlens_q" : "[batch, seqlen_q, heads_q, head_dim]",
                         0, need_data, err)) != FG_OK)
        return st;
    if ((st = serving_check_view(&a->o, "o", a->q.ndim, packed_q ? serving_packed_dims : dense_dims, "like q", 0, need_data,
                                 err)) != FG_OK)
        return st;
    const char *kform = paged ? "[num_pages, page_size, heads_kv, head_dim] with block_table"
                              : packed_k ? "[total_k, heads_kv, head_dim] with cu_seqlens_k"
                                         : "[batch, seqlen_k, heads_kv, head_dim]";
    const char *const *kdims = paged ? paged_dims : packed_k ? serving_packed_dims : dense_dims;
    if (paged && a->cu_seqlens_k)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "cu_seqlens_k and block_table are both set; paged keys take "
                       "their lengths from seqused_k");
    if ((st = serving_check_view(&a->k, "k", packed_k ? 3 : 4, kdims, kform, 1, need_data, err)) != FG_OK) return st;
    if ((st = serving_check_view(&a->v, "v", packed_k ? 3 : 4, kdims, kform, 1, need_data, err)) != FG_OK) return st;
    const int qn = a->q.ndim, kn = a->k.ndim;
    if (a->q.dtype != FG_DTYPE_F16 && a->q.dtype != FG_DTYPE_BF16)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "q.dtype is %s; serving calls take fp16 or bf16",
                       dtype_name(a->q.dtype));
    /* K and V of q's dtype, or both of one FP8 dtype (an FP8 KV cache, dequantized in the kernel) */
    const int kv_fp8 = dtype_is_fp8(a->k.dtype) || dtype_is_fp8(a->v.dtype);
    if (kv_fp8 && a->k.dtype != a->v.dtype)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "k is %s and v is %s; an FP8 KV cache has K and V of one FP8 dtype "
                       "(both e4m3 or both e5m2)", dtype_name(a->k.dtype), dtype_name(a->v.dtype));
    if (kv_fp8 && a->o.dtype != a->q.dtype)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "q is %s and o is %s; with FP8 k and v, q and o share one 16-bit "
                       "dtype (the one K and V are dequantized to)", dtype_name(a->q.dtype), dtype_name(a->o.dtype));
    if (!kv_fp8 && (a->k.dtype != a->q.dtype || a->v.dtype != a->q.dtype || a->o.dtype != a->q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "q, k, v and o must share one dtype (q %s, k %s, v %s, o %s), or k "
                       "and v one FP8 dtype (e4m3 or e5m2)", dtype_name(a->q.dtype), dtype_name(a->k.dtype),
                       dtype_name(a->v.dtype), dtype_name(a->o.dtype));
    c->kv_fp8 = kv_fp8 ? (int)a->k.dtype : 0;
    /* V may have a head dim of its own (head_dim_v); O has V's */
    for (int i = 0; i < qn - 1; i++)
        if (a->o.shape[i] != a->q.shape[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o.shape[%d] is %lld but q.shape[%d] is %lld; o is shaped like q",
                           i, (long long)a->o.shape[i], i, (long long)a->q.shape[i]);
    for (int i = 0; i < kn - 1; i++)
        if (a->v.shape[i] != a->k.shape[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "v.shape[%d] is %lld but k.shape[%d] is %lld; v is shaped like k",
                           i, (long long)a->v.shape[i], i, (long long)a->k.shape[i]);
    if (a->o.shape[qn - 1] != a->v.shape[kn - 1])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o's head_dim is %lld but v's is %lld; O has V's head dim",
                       (long long)a->o.shape[qn - 1], (long long)a->v.shape[kn - 1]);
    c->packed_q = packed_q, c->packed_k = packed_k, c->paged = paged;
    c->hq = (int)a->q.shape[qn - 2];
    c->hkv = (int)a->k.shape[kn - 2];
    c->head_dim = (int)a->q.shape[qn - 1];
    if (a->k.shape[kn - 1] != c->head_dim)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "k's head_dim is %lld but q's is %d; they must be equal",
                       (long long)a->k.shape[kn - 1], c->head_dim);
    c->head_dim_v = (int)a->v.shape[kn - 1];
    const int dims[2] = {c->head_dim, c->head_dim_v}, dim_max[2] = {576, 512};
    for (int i = 0; i < 2; i++)
        if (dims[i] < 8 || dims[i] > dim_max[i] || dims[i] % 8 != 0)
            return fg_fail(err, FG_ERR_UNSUPPORTED, "%s %d is not supported by serving calls: a multiple of 8 from 8 to "
                           "%d", i ? "v's head_dim" : "head_dim", dims[i], dim_max[i]);
    /* FP8 K and V: their rows are staged in pairs of 16-byte chunks, 32 elements (serving_kv.cuh) */
    if (kv_fp8 && (c->head_dim % 32 != 0 || c->head_dim > 256 || c->head_dim_v % 32 != 0 || c->head_dim_v > 256))
        return fg_fail(err, FG_ERR_UNSUPPORTED, "with FP8 k and v (%s), head_dim (%d) and v's head_dim (%d) must be "
                       "multiples of 32 up to 256", dtype_name(a->k.dtype), c->head_dim, c->head_dim_v);
    /* V a prefix view of K (an absorbed-MLA cache: v = k[..., :head_dim_v]): its rows are K's, loaded once (FP8: V's
       rows are loaded on their own, a tile of their own to dequantize into) */
    c->v_in_k = !kv_fp8 && a->k.data && a->v.data == a->k.data && c->head_dim_v <= c->head_dim;
    for (int i = 0; i < kn - 1 && c->v_in_k; i++) c->v_in_k = a->v.stride[i] == a->k.stride[i];
    if (c->hkv <= 0 || c->hq % c->hkv != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "heads_kv (%d) must be positive and divide heads_q (%d)", c->hkv, c->hq);
    c->group = c->hq / c->hkv;
    /* batch and the query side */
    if (packed_q) {
        if (a->batch < 0 || (need_data && a->batch == 0 && a->q.shape[0] > 0))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "batch is %d; with cu_seqlens_q it must be the number of "
                           "sequences (cu_seqlens_q has batch + 1 entries)", a->batch);
        if ((a->max_seqlen_q < 0 || (a->max_seqlen_q == 0 && a->q.shape[0] > 0)) && a->batch > 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "max_seqlen_q is %d; packed queries need the longest "
                           "sequence's length (an upper bound) to size the grid (0 only when q has no rows)",
                           a->max_seqlen_q);
        c->batch = a->batch;
        c->total_q = a->q.shape[0];
        c->seqlen_q = a->max_seqlen_q < c->total_q ? a->max_seqlen_q : (int)c->total_q;
        c->part_tokens = c->total_q;
    } else {
        if (a->batch != 0 && a->batch != a->q.shape[0])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "batch is %d but q.shape[0] is %lld; leave batch 0 with dense "
                           "q", a->batch, (long long)a->q.shape[0]);
        c->batch = (int)a->q.shape[0];
        c->seqlen_q = (int)a->q.shape[1];
        c->part_tokens = (int64_t)c->batch * c->seqlen_q;
    }
    /* the key side */
    if (paged) {
        if (!a->seqused_k && need_data)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "block_table is set but seqused_k is NULL; paged keys "
                               "take each sequence's length from seqused_k");
        if (a->max_pages <= 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "max_pages is %d; with block_table it must be the table's "
                           "columns (> 0)", a->max_pages);
        if (a->block_table_stride != 0 && a->block_table_stride < a->max_pages)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "block_table_stride is %lld, below max_pages (%d): the "
                           "table's rows would overlap", (long long)a->block_table_stride, a->max_pages);
        c->page_size = (int)a->k.shape[1];
        c->num_pages = (int)a->k.shape[0];
        if (c->page_size <= 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "k.shape[1] (page_size) is 0; a page holds at least one key");
        if ((int64_t)a->max_pages * c->page_size > INT32_MAX)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "max_pages x page_size (%lld) is 2^31 keys or more",
                           (long long)a->max_pages * c->page_size);
        c->seqlen_k = a->max_pages * c->page_size;
    } else if (packed_k) {
        c->total_k = a->k.shape[0];
        c->seqlen_k = (int)c->total_k;
    } else {
        if (a->k.shape[0] != c->batch)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "k.shape[0] is %lld but the batch is %d; dense keys hold one "
                           "cache per sequence", (long long)a->k.shape[0], c->batch);
        c->seqlen_k = (int)a->k.shape[1];
    }
    if (a->max_seqlen_k < 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "max_seqlen_k is %d; it must be >= 0 (0: the capacity)", a->max_seqlen_k);
    c->max_k = a->max_seqlen_k > 0 && a->max_seqlen_k < c->seqlen_k ? a->max_seqlen_k : c->seqlen_k;
    if (a->lse.data || (!need_data && a->lse.ndim)) {
        const int ln = packed_q ? 2 : 3;
        if (a->lse.dtype != FG_DTYPE_F32 || a->lse.ndim != ln)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse must be fp32 of ndim %d (%s), got %s of ndim %d", ln,
                           packed_q ? "[heads_q, total_q]" : "[batch, heads_q, seqlen_q]", dtype_name(a->lse.dtype),
                           a->lse.ndim);
        const int64_t want[3] = {packed_q ? c->hq : c->batch, packed_q ? c->total_q : c->hq, c->seqlen_q};
        for (int i = 0; i < ln; i++) {
            if (a->lse.shape[i] != want[i])
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse.shape[%d] is %lld; it must be %lld (%s)", i,
                               (long long)a->lse.shape[i], (long long)want[i],
                               packed_q ? "[heads_q, total_q]" : "[batch, heads_q, seqlen_q]");
            if (a->lse.stride[i] < 0)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse.stride[%d] is negative", i);
        }
        if (need_data && (uintptr_t)a->lse.data % 4 != 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse.data is not 4-byte aligned");
    }
    if (!(a->softmax_scale >= 0.f) || a->softmax_scale > 3.4e38f)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "softmax_scale is %g; it must be finite and >= 0 (0: 1/sqrt(head_dim))",
                       (double)a->softmax_scale);
    if (a->causal != 0 && a->causal != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "causal is %d; it must be 0 or 1", a->causal);
    if (a->num_splits < 0 || a->num_splits > 256)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "num_splits is %d; it must be 0 (chosen), 1 or up to 256",
                       a->num_splits);
    if (a->split_size < 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "split_size is %d; it must be >= 0 (0: off)", a->split_size);
    if (a->split_size > 0 && a->num_splits > 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "num_splits %d and split_size %d are both set; give one (split_size "
                       "fixes the splits' boundaries, num_splits their count)", a->num_splits, a->split_size);
    c->causal = a->causal;
    const variant_args va = VARIANT_ARGS_OF(a);
    if ((st = serving_check_variants(&va, c->seqlen_q, c->seqlen_k, need_data, &c->var, err)) != FG_OK) return st;
    if ((st = rt_check_mod(a->mod, a->mod_aux, need_data, c->batch, c->hq, c->seqlen_q, c->packed_k ? c->max_k : c->seqlen_k,
                           err)) != FG_OK ||
        (st = rt_check_mask_map(a->mask_map, a->mask_map_size, a->mask_map_ready,
                                rt_mask_map_bytes(a->mod, c->batch, c->hq, c->seqlen_q, c->packed_k ? c->max_k : c->seqlen_k),
                                err)) != FG_OK)
        return st;
    if (a->mod) mod_id(a->mod, c->mod_id);
    if ((st = check_kv_descales(a, need_data, c, err)) != FG_OK) return st;
    if (need_data) {
        const fg_tensor *in[3] = {&a->q, &a->k, &a->v};
        static const char *const names[3] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++)
            if (rt_views_overlap(&a->o, in[i]))
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o overlaps %s in memory; the output must not share "
                               "memory with an input", names[i]);
        if (a->lse.data)
            for (int i = 0; i < 3; i++)
                if (rt_views_overlap(&a->lse, in[i]) || rt_views_overlap(&a->lse, &a->o))
                    return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse overlaps %s in memory; outputs must not share "
                                   "memory with other tensors", rt_views_overlap(&a->lse, &a->o) ? "o" : names[i]);
        const fg_tensor *ds[2] = {&a->k_descale, &a->v_descale};
        for (int i = 0; i < 2; i++)
            if (rt_views_overlap(&a->o, ds[i]) || (a->lse.data && rt_views_overlap(&a->lse, ds[i])))
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s overlaps %s in memory; outputs must not share memory "
                               "with the descale factors", rt_views_overlap(&a->o, ds[i]) ? "o" : "lse", kv_descale_names[i]);
        if ((uintptr_t)a->workspace % 256 != 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "workspace (%p) is not 256-byte aligned", a->workspace);
    }
    return FG_OK;
}

fg_status serving_check_variants(const variant_args *a, int max_q, int max_k, int need_data, call_variants *v,
                                 fg_error *err) {
    memset(v, 0, sizeof *v);
    if (a->window != 0 && a->window != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "window is %d; it must be 0 (none) or 1", a->window);
    if (a->window && (a->window_left < -1 || a->window_right < -1))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "window_left (%d) and window_right (%d) must be >= 0, or -1 for an "
                       "unbounded side", a->window_left, a->window_right);
    if (a->causal_top_left != 0 && a->causal_top_left != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "causal_top_left is %d; it must be 0 or 1", a->causal_top_left);
    if (a->causal_top_left && !a->causal)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "causal_top_left is 1 but causal is 0; it aligns the causal mask, "
                       "so it needs causal = 1");
    if (!(a->softcap >= 0.f) || a->softcap > 3.4e38f)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "softcap is %g; it must be finite and >= 0 (0: none)",
                       (double)a->softcap);
    const float *per_head[2] = {a->sinks, a->alibi_slopes};
    static const char *const names[2] = {"sinks", "alibi_slopes"};
    for (int i = 0; i < 2; i++)
        if (need_data && (uintptr_t)per_head[i] % 4 != 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s (%p) is not 4-byte aligned; it must be fp32 [heads_q] in "
                           "device memory", names[i], (const void *)per_head[i]);
    /* A side that reaches past every key of every row is unbounded: the diagonal d = i + sk - sq lies in
     * [sk - sq, sk - 1], so left >= sk - 1 and right >= sq - 1 mask nothing. Capping keeps d -/+ side in int. */
    v->window_left = !a->window || a->window_left > max_k ? -1 : a->window_left;
    v->window_right = !a->window || a->window_right > max_q ? -1 : a->window_right;
    v->causal_top_left = a->causal_top_left;
    /* top-left causal runs on the window variants (their row spans take the alignment: score_mods.cuh) */
    v->window = v->window_left >= 0 || v->window_right >= 0 || v->causal_top_left;
    v->sinks = a->sinks != NULL;
    v->softcap = a->softcap > 0.f;
    v->alibi = a->alibi_slopes != NULL;
    return FG_OK;
}

int call_variants_any(const call_variants *v) { return v->window || v->sinks || v->softcap || v->alibi; }

void spec_take_variants(fg_spec *s, const call_variants *v) {
    s->window = v->window, s->sinks = v->sinks, s->softcap = v->softcap, s->alibi = v->alibi;
}

/* ---- device-resident inputs, judged on the host ---- */

fg_status serving_validate_lengths(const serving_call *c, const int32_t *cu_q, const int32_t *cu_k,
                                   const int32_t *used_k, const int32_t *table, int64_t table_stride, int max_seqlen_q,
                                   fg_error *err) {
    const int32_t *cus[2] = {cu_q, cu_k};
    static const char *const cu_names[2] = {"cu_seqlens_q", "cu_seqlens_k"};
    const int64_t totals[2] = {c->total_q, c->total_k};
    for (int w = 0; w < 2; w++) {
        const int32_t *cu = cus[w];
        if (!cu) continue;
        if (cu[0] < 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s[0] is %d; offsets start at 0 or above", cu_names[w], cu[0]);
        for (int b = 0; b < c->batch; b++)
            if (cu[b + 1] < cu[b])
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s[%d] is %d, below %s[%d] = %d; offsets must not "
                               "decrease", cu_names[w], b + 1, cu[b + 1], cu_names[w], b, cu[b]);
        if (cu[c->batch] != totals[w])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s[%d] (the last entry) is %d; it must be the total "
                           "(%s.shape[0] = %lld)", cu_names[w], c->batch, cu[c->batch], w ? "k" : "q",
                           (long long)totals[w]);
        const int bound = w == 0 ? max_seqlen_q : c->bound_k;
        for (int b = 0; (w == 0 || bound > 0) && b < c->batch; b++)
            if (cu[b + 1] - cu[b] > bound)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "sequence %d has %d %s, more than max_seqlen_%s (%d)", b,
                               cu[b + 1] - cu[b], w ? "keys" : "queries", w ? "k" : "q", bound);
    }
    for (int b = 0; used_k && b < c->batch; b++) {
        const int64_t cap = cu_k ? (int64_t)cu_k[b + 1] - cu_k[b] : c->seqlen_k;
        if (used_k[b] < 0 || used_k[b] > cap)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "seqused_k[%d] is %d; it must lie in [0, %lld] (%s)", b,
                           used_k[b], (long long)cap,
                           c->paged ? "the table's capacity, max_pages x page_size" : "the sequence's keys");
    }
    for (int b = 0; table && b < c->batch; b++) {
        const int64_t pages = ((int64_t)used_k[b] + c->page_size - 1) / c->page_size;
        for (int64_t i = 0; i < pages; i++) {
            const int32_t pg = table[b * table_stride + i];
            if (pg < 0 || pg >= c->num_pages)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "block_table[%d][%lld] is %d, outside [0, %d) (k.shape[0], "
                               "the pages there are)", b, (long long)i, pg, c->num_pages);
        }
    }
    return FG_OK;
}

/* Copies n int32 from device memory at src on stream into a new host array (*out, to free). */
static fg_status read_back(fg_context *ctx, const int32_t *src, size_t n, void *stream, int32_t **out, fg_error *err) {
    *out = NULL;
    if (!src) return FG_OK;
    int32_t *h = fg_malloc(n * sizeof *h + 1);
    if (!h) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory reading back %zu lengths", n);
    /* the stream's work first (it may be what wrote them), then a plain copy */
    CUresult rc = ctx->cu->cuStreamSynchronize((CUstream)stream);
    if (rc == CUDA_SUCCESS) rc = ctx->cu->cuMemcpyDtoH(h, (CUdeviceptr)(uintptr_t)src, n * sizeof *h);
    if (rc != CUDA_SUCCESS) {
        free(h);
        return cuda_api_fail(err, rc, "reading back the serving call's device lengths (FG_OPTION_CHECK_INPUTS)",
                             __FILE__, __LINE__);
    }
    *out = h;
    return FG_OK;
}

fg_status serving_check_device_inputs(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, void *stream,
                                      fg_error *err) {
    const fg_cuda_api *cu = ctx->cu;
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (cu->cuStreamIsCapturing((CUstream)stream, &capture) == CUDA_SUCCESS && capture != CU_STREAM_CAPTURE_STATUS_NONE)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "FG_OPTION_CHECK_INPUTS reads the lengths back, which a stream "
                       "being captured into a CUDA graph cannot do: turn the option off for the capture");
    const int64_t tstride = a->block_table_stride ? a->block_table_stride : a->max_pages;
    int32_t *cq = NULL, *ck = NULL, *uk = NULL, *tb = NULL;
    CUcontext popped;
    FG_CU(err, cu->cuCtxPushCurrent(ctx->cuctx));
    fg_status st = read_back(ctx, a->cu_seqlens_q, (size_t)c->batch + 1, stream, &cq, err);
    if (st == FG_OK) st = read_back(ctx, a->cu_seqlens_k, (size_t)c->batch + 1, stream, &ck, err);
    if (st == FG_OK) st = read_back(ctx, a->seqused_k, (size_t)c->batch, stream, &uk, err);
    if (st == FG_OK && c->batch > 0)
        st = read_back(ctx, a->block_table, (size_t)((c->batch - 1) * tstride + a->max_pages), stream, &tb, err);
    cu->cuCtxPopCurrent(&popped);
    if (st == FG_OK) st = serving_validate_lengths(c, cq, ck, uk, tb, tstride, c->seqlen_q, err);
    free(cq);
    free(ck);
    free(uk);
    free(tb);
    return st;
}

/* ---- a call's custom mod (fg_varlen_args, fg_varlen_bwd_args) ---- */

fg_status rt_check_mod(const fg_mod *m, const fg_tensor *aux, int need_data, int batch, int heads, long long rows,
                       long long keys, fg_error *err) {
    const int n = m ? m->n_aux : 0;
    /* a mod computes with positions in fp32 (generator/mod_emit.c's shadows): exact below 2^23, with their sums */
    if (m && (rows >= (1 << 23) || keys >= (1 << 23)))
        return fg_fail(err, FG_ERR_UNSUPPORTED, "a call with a custom mod takes sequences of fewer than 2^23 (8388608) "
                       "queries and keys, where a mod's positions and their differences are exact in fp32; this one's "
                       "longest has %lld %s", rows >= (1 << 23) ? rows : keys, rows >= (1 << 23) ? "queries" : "keys");
    /* the workspace query reports the map's bytes: a size that wrapped would let a small workspace through */
    if (rt_mask_map_bytes(m, batch, heads, rows, keys) == SIZE_MAX)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the custom mask's block map for %d sequences x %d heads_q of up to "
                       "%lld queries and %lld keys does not fit in size_t: the call is too large", batch, heads, rows, keys);
    for (int i = 0; i < FG_MOD_AUX_MAX; i++) {
        const fg_tensor *t = &aux[i];
        if (i >= n) {
            if (t->data || t->ndim)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux[%d] is set, but %s; leave it unset", i,
                               m ? "the mod declares fewer aux arrays" : "the call has no mod");
            continue;
        }
        const mod_aux *x = &m->aux[i];
        const fg_dtype want = x->is_int ? FG_DTYPE_I32 : FG_DTYPE_F32;
        if (t->dtype != want || t->ndim != x->rank)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux[%d] (%s) must be %s of rank %d, as the mod declares it "
                           "(got %s of rank %d)", i, x->name, x->is_int ? "i32" : "f32", x->rank,
                           dtype_name(t->dtype), t->ndim);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 1 || t->shape[d] > INT32_MAX)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux[%d] (%s) has extent %lld in dim %d; each must be "
                               "1 to %d", i, x->name, (long long)t->shape[d], d, INT32_MAX);
        fg_status st = rt_check_aux_layout(t, "mod_aux", i, x->name, need_data, err);
        if (st != FG_OK) return st;
    }
    return FG_OK;
}

fg_status rt_check_aux_layout(const fg_tensor *t, const char *what, int i, const char *name, int need_data,
                              fg_error *err) {
    if (t->stride[t->ndim - 1] != 1 || (t->ndim == 2 && t->stride[0] != t->shape[1]))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s[%d] (%s) must be contiguous (row-major)", what, i, name);
    if (need_data && (!t->data || (uintptr_t)t->data % 4 != 0))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s[%d] (%s) must be a 4-byte aligned device pointer (got %p)",
                       what, i, name, t->data);
    return FG_OK;
}

void rt_mod_aux(const fg_mod *m, const fg_tensor *aux, fg_mod_aux *out) {
    memset(out, 0, sizeof *out);
    const int n = m ? m->n_aux : 0;
    for (int i = 0; i < n; i++) {
        out->ptr[i] = aux[i].data;
        out->extent[i][0] = (int)aux[i].shape[0];
        out->extent[i][1] = aux[i].ndim == 2 ? (int)aux[i].shape[1] : 1;
    }
}
