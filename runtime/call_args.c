/* call_args.c: every rule a forward call's arguments obey (see call_args.h), each failure a sentence that names
 * the argument and the rule. Order matters only for which sentence a caller sees first: types, then
 * structure (ndim, sizes, strides), then shapes against each other, then what the kernel needs
 * (head_dim, grid and position limits, the FP8 V layout, descale factors, alignment), then memory
 * (extent, overlap), then scalars.
 * FP8 calls (q, k, v e4m3 or e5m2) differ in three ways: O is fp16 or bf16; V is key-major (V^T layout:
 * stride[1] is 1 and the head-dim stride steps over rows of keys); and q/k/v_descale may be given. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "runtime/call_args.h"
#include "generator/spec.h"

static const char *const qkvo_dims[4] = {"batch", "seqlen", "heads", "head_dim"};
static const char *const lse_dims[3] = {"batch", "heads", "seqlen_q"};

/* Past this many bytes a view cannot be real memory; it also keeps every offset far from int64 overflow. */
#define FG_MAX_SPAN_BYTES (1ll << 48)

/* The largest element offset of t (sum of (shape - 1) * stride), or -1 on overflow. 0 for empty views. */
int64_t rt_view_last_offset(const fg_tensor *t) {
    int64_t total = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) return 0;
        int64_t term;
        if (__builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &term) || __builtin_add_overflow(total, term, &total))
            return -1;
    }
    return total;
}

static int is_fp8(fg_dtype dt) { return dt == FG_DTYPE_E4M3 || dt == FG_DTYPE_E5M2; }

static int is_half(fg_dtype dt) { return dt == FG_DTYPE_F16 || dt == FG_DTYPE_BF16; }

/* Structure of one tensor: ndim, sizes and strides in range, a pointer when one is needed, one
 * dimension contiguous (Q/K/V/O only: LSE elements are written one by one with full strides) -- the
 * last, or for FP8 V (key_major) the seqlen dimension -- and an extent that fits in memory. */
static fg_status check_tensor(const fg_tensor *t, const char *name, int ndim, int need_data, int key_major,
                              fg_error *err) {
    const char *const *dims = ndim == 4 ? qkvo_dims : lse_dims;
    if (t->ndim != ndim)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.ndim is %d; it must be %d (%s)", name, t->ndim, ndim,
                       ndim == 4 ? "[batch, seqlen, heads, head_dim]" : "[batch, heads, seqlen_q]");
    int empty = 0;
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] < 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.shape[%d] (%s) is %lld; sizes must be >= 0", name, i,
                           dims[i], (long long)t->shape[i]);
        if (t->shape[i] > INT32_MAX)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.shape[%d] (%s) is %lld; sizes must be < 2^31", name, i,
                           dims[i], (long long)t->shape[i]);
        if (t->stride[i] < 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.stride[%d] (%s) is %lld; strides must be >= 0", name, i,
                           dims[i], (long long)t->stride[i]);
        empty |= t->shape[i] == 0;
    }
    /* An empty tensor may have a NULL pointer (PyTorch gives empty tensors one): nothing is read or written. */
    if (need_data && !t->data && !empty) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.data is NULL", name);
    if (ndim == 4 && !key_major && t->shape[3] > 1 && t->stride[3] != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "%s.stride[3] (head_dim) is %lld; the last dimension must be contiguous (stride 1)", name,
                       (long long)t->stride[3]);
    if (ndim == 4 && key_major && t->shape[1] > 1 && t->stride[1] != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "%s.stride[1] (seqlen) is %lld; with %s inputs %s must be key-major (V^T layout): stride[1] 1, "
                       "keys contiguous, stride[3] stepping over rows of keys", name, (long long)t->stride[1],
                       dtype_name(t->dtype), name);
    int64_t last = rt_view_last_offset(t), bytes;
    if (last < 0 || __builtin_mul_overflow(last + 1, (int64_t)dtype_size(t->dtype), &bytes) ||
        bytes > FG_MAX_SPAN_BYTES)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "%s's strides [%lld, %lld, %lld%s] with its shape span more than 2^48 bytes; no device has that "
                       "much memory", name, (long long)t->stride[0], (long long)t->stride[1], (long long)t->stride[2],
                       ndim == 4 ? (key_major ? ", ..." : ", 1") : "");
    return FG_OK;
}

/* The 16-byte rule of the cp.async loads and vector stores: the pointer, and the stride of every
 * dimension but the contiguous one (`contig`: 3, or 1 for FP8 V) that has more than one element (a
 * dimension of size 1 is never stepped over). */
static fg_status check_align16(const fg_tensor *t, const char *name, int contig, fg_error *err) {
    int esize = dtype_size(t->dtype);
    if ((uintptr_t)t->data % 16 != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.data (%p) is not 16-byte aligned; flashgen loads 16 bytes at a time",
                       name, t->data);
    for (int i = 0; i < 4; i++)
        if (i != contig && t->shape[i] > 1 && (t->stride[i] * esize) % 16 != 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "%s.stride[%d] (%s) is %lld elements, not a multiple of 16 bytes (%d elements)", name, i,
                           qkvo_dims[i], (long long)t->stride[i], 16 / esize);
    return FG_OK;
}

/* 1 when two elements of t share an address: the dimensions of size > 1, taken by increasing stride,
 * must each step over everything the smaller ones span. (A sufficient test; the layouts it refuses as
 * overlapping but that are not, interleavings of several dims in one stride, are not real layouts.) */
static int self_overlaps(const fg_tensor *t) {
    int idx[4], n = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 1) idx[n++] = i;
    for (int i = 1; i < n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && t->stride[idx[j]] < t->stride[idx[j - 1]]; j--) {
            int tmp = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = tmp;
        }
    int64_t span = 1; /* elements covered by the dimensions processed so far */
    for (int i = 0; i < n; i++) {
        if (t->stride[idx[i]] < span) return 1;
        span += t->stride[idx[i]] * (t->shape[idx[i]] - 1);
    }
    return 0;
}

static int is_empty(const fg_tensor *t) {
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return 1;
    return 0;
}

/* The bytes [lo, hi) a non-empty view touches (its real strides: FP8 V's head-dim stride included). */
static void byte_range(const fg_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)(rt_view_last_offset(t) + 1) * (uintptr_t)dtype_size(t->dtype);
}

/* Empty views touch nothing, so they are disjoint from everything. */
static int disjoint(const fg_tensor *a, const fg_tensor *b) {
    if (is_empty(a) || is_empty(b) || !a->data || !b->data) return 1;
    uintptr_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return ahi <= blo || bhi <= alo;
}

int rt_views_overlap(const fg_tensor *a, const fg_tensor *b) { return !disjoint(a, b); }

static int same_view(const fg_tensor *a, const fg_tensor *b) {
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->stride[i] != b->stride[i])) return 0;
    return 1;
}

/* Outputs never overlap themselves, each other, K, V or a descale tensor; O may be Q itself (each CTA
 * reads its Q rows before it writes the same O rows) but not part of it. */
static fg_status check_overlap(const fg_fwd_args *a, fg_error *err) {
    const fg_tensor *descales[3] = {&a->q_descale, &a->k_descale, &a->v_descale};
    static const char *const dnames[3] = {"q_descale", "k_descale", "v_descale"};
    for (int i = 0; i < 3; i++) {
        if (!descales[i]->data) continue;
        if (!disjoint(&a->o, descales[i]) || (a->lse.data && !disjoint(&a->lse, descales[i])))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "%s overlaps %s in memory; outputs must not share memory with the descale factors",
                           !disjoint(&a->o, descales[i]) ? "o" : "lse", dnames[i]);
    }
    if (self_overlaps(&a->o))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "o's strides [%lld, %lld, %lld, 1] make distinct elements share memory; an output must not overlap itself",
                       (long long)a->o.stride[0], (long long)a->o.stride[1], (long long)a->o.stride[2]);
    if (!disjoint(&a->o, &a->k) || !disjoint(&a->o, &a->v))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o overlaps %s in memory; the output must not share memory with k or v",
                       !disjoint(&a->o, &a->k) ? "k" : "v");
    if (!same_view(&a->o, &a->q) && !disjoint(&a->o, &a->q))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "o overlaps q in memory without being exactly q (same pointer and strides); that in-place form is the only overlap allowed");
    if (a->lse.data) {
        if (self_overlaps(&a->lse))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "lse's strides [%lld, %lld, %lld] make distinct elements share memory; an output must not overlap itself",
                           (long long)a->lse.stride[0], (long long)a->lse.stride[1], (long long)a->lse.stride[2]);
        const fg_tensor *others[4] = {&a->q, &a->k, &a->v, &a->o};
        static const char *const names[4] = {"q", "k", "v", "o"};
        for (int i = 0; i < 4; i++)
            if (!disjoint(&a->lse, others[i]))
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse overlaps %s in memory; outputs must not share memory with other tensors",
                               names[i]);
    }
    return FG_OK;
}

/* One descale tensor (name: "q_descale", ...). With 16-bit inputs it must be absent (data NULL). With
 * FP8 inputs, absent means 1; given, rt_check_descale's rules. */
static fg_status check_descale(const fg_tensor *t, const char *name, const fg_fwd_args *a, int need_data,
                               fg_error *err) {
    if (!t->data) return FG_OK;
    if (!is_fp8(a->q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "%s.data is set but q is %s; descale factors are for fp8 (e4m3, e5m2) inputs only: leave "
                       "%s.data NULL", name, dtype_name(a->q.dtype), name);
    return rt_check_descale(t, name, a->q.shape[0], a->k.shape[2], need_data, err);
}

fg_status rt_check_descale(const fg_tensor *t, const char *name, int64_t b, int64_t hkv, int need_data, fg_error *err) {
    if (t->dtype != FG_DTYPE_F32)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.dtype is %s; descale factors are fp32", name,
                       dtype_name(t->dtype));
    if (t->ndim != 1 && t->ndim != 2)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "%s.ndim is %d; a descale tensor is ndim 1 ([1], one factor per tensor) or ndim 2 "
                       "([batch, heads_kv])", name, t->ndim);
    if (t->ndim == 1 && t->shape[0] != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "%s.shape is [%lld]; a one-dimensional descale tensor has shape [1] (one factor per tensor)",
                       name, (long long)t->shape[0]);
    if (t->ndim == 2 && (t->shape[0] != b || t->shape[1] != hkv))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "%s.shape is [%lld, %lld]; a two-dimensional descale tensor has shape [batch, heads_kv] = "
                       "[%lld, %lld]", name, (long long)t->shape[0], (long long)t->shape[1], (long long)b,
                       (long long)hkv);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 1 && t->stride[i] < 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.stride[%d] is %lld; strides must be >= 0", name, i,
                           (long long)t->stride[i]);
    int64_t last = t->ndim == 2 ? rt_view_last_offset(t) : 0, bytes;
    if (last < 0 || __builtin_mul_overflow(last + 1, (int64_t)4, &bytes) || bytes > FG_MAX_SPAN_BYTES)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "%s's strides [%lld, %lld] with its shape span more than 2^48 bytes; no device has that much "
                       "memory", name, (long long)t->stride[0], (long long)t->stride[1]);
    if (need_data && (uintptr_t)t->data % 4 != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.data (%p) is not 4-byte aligned (fp32)", name, t->data);
    return FG_OK;
}

fg_tensor rt_packed_as_batch_of_one(const fg_tensor *t) {
    fg_tensor v = *t;
    v.ndim = 4;
    v.shape[0] = 1, v.shape[1] = t->shape[0], v.shape[2] = t->shape[1], v.shape[3] = t->shape[2];
    v.stride[0] = 0, v.stride[1] = t->stride[0], v.stride[2] = t->stride[1], v.stride[3] = 1;
    return v;
}

int rt_fwd_is_empty(const fg_fwd_args *a) {
    return a->q.shape[0] == 0 || a->q.shape[1] == 0 || a->q.shape[2] == 0;
}

/* rt_check_fwd_args's rules; own_v (the backward's): V and O may have a head dim of their own (head_dim_v), O V's. */
static fg_status check_fwd_args(const fg_fwd_args *a, int need_data, int own_v, fg_error *err) {
    fg_status st;
    static const char *const names[4] = {"q", "k", "v", "o"};
    const fg_tensor *ts[4] = {&a->q, &a->k, &a->v, &a->o};
    const int fp8 = is_fp8(a->q.dtype);
    for (int i = 0; i < 4; i++) {
        fg_dtype dt = ts[i]->dtype;
        if (i < 3 && !is_half(dt) && !is_fp8(dt))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.dtype is %s; the forward takes fp16, bf16, e4m3 or e5m2",
                           names[i], dtype_name(dt));
        if (i == 3 && !is_half(dt))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o.dtype is %s; the output is fp16 or bf16 (%s)",
                           dtype_name(dt), fp8 ? "either, with fp8 inputs" : "q's dtype");
    }
    for (int i = 1; i < 3; i++)
        if (ts[i]->dtype != a->q.dtype)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.dtype (%s) differs from q.dtype (%s); %s", names[i],
                           dtype_name(ts[i]->dtype), dtype_name(a->q.dtype),
                           fp8 ? "q, k and v must share one fp8 dtype" : "all four must match");
    if (!fp8 && a->o.dtype != a->q.dtype)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o.dtype (%s) differs from q.dtype (%s); all four must match",
                       dtype_name(a->o.dtype), dtype_name(a->q.dtype));
    /* dtypes agree, so each tensor's structure can be judged by its layout rule (FP8 V: key-major) */
    for (int i = 0; i < 4; i++)
        if ((st = check_tensor(ts[i], names[i], 4, need_data, i == 2 && fp8, err)) != FG_OK) return st;
    const int64_t *q = a->q.shape, *k = a->k.shape, *v = a->v.shape, *o = a->o.shape;
    if (k[0] != q[0] || v[0] != q[0] || o[0] != q[0])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "batch sizes differ: q %lld, k %lld, v %lld, o %lld",
                       (long long)q[0], (long long)k[0], (long long)v[0], (long long)o[0]);
    if (v[1] != k[1])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "v.shape[1] (seqlen %lld) differs from k.shape[1] (%lld)",
                       (long long)v[1], (long long)k[1]);
    if (o[1] != q[1] || o[2] != q[2])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o.shape [.., %lld, %lld, ..] differs from q.shape [.., %lld, %lld, ..]",
                       (long long)o[1], (long long)o[2], (long long)q[1], (long long)q[2]);
    if (v[2] != k[2])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "v.shape[2] (heads %lld) differs from k.shape[2] (%lld)",
                       (long long)v[2], (long long)k[2]);
    if (!own_v && (k[3] != q[3] || v[3] != q[3] || o[3] != q[3]))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "head_dim differs: q %lld, k %lld, v %lld, o %lld",
                       (long long)q[3], (long long)k[3], (long long)v[3], (long long)o[3]);
    if (own_v && k[3] != q[3])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "k's head_dim (%lld) differs from q's (%lld); Q and K share one "
                       "head dim (V, O and dO may have one of their own)", (long long)k[3], (long long)q[3]);
    if (own_v && o[3] != v[3])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o's head_dim (%lld) differs from v's (%lld); O has V's head dim",
                       (long long)o[3], (long long)v[3]);
    if (q[2] > 0 && k[2] < 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "k/v heads are %lld; with %lld q heads there must be at least one",
                       (long long)k[2], (long long)q[2]);
    if (q[2] > 0 && q[2] % k[2] != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "k/v heads (%lld) must divide q heads (%lld) (GQA/MQA: each K/V head serves a group of query heads)",
                       (long long)k[2], (long long)q[2]);
    if (q[3] < 8 || q[3] > 256 || q[3] % 8 != 0)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "head_dim %lld is not supported: it must be a multiple of 8 from 8 to 256",
                       (long long)q[3]);
    if (own_v && v[3] != q[3] && (v[3] < 8 || v[3] > 256 || v[3] % 8 != 0))
        return fg_fail(err, FG_ERR_UNSUPPORTED, "v's head_dim %lld is not supported: it must be a multiple of 8 from 8 to "
                       "256 (as q's)", (long long)v[3]);
    if (q[0] > 65535 || q[2] > 65535)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "batch (%lld) and q heads (%lld) must each be at most 65535 (CUDA grid limits)",
                       (long long)q[0], (long long)q[2]);
    /* The kernel's row and key positions, and the causal offset sk - sq, are 32-bit: keep every sum of
     * them, plus a tile, below 2^31. */
    if (q[1] + k[1] > (int64_t)INT32_MAX - 512)
        return fg_fail(err, FG_ERR_UNSUPPORTED,
                       "seqlen_q + seqlen_k is %lld; it must be below 2^31 - 512 (the kernel's positions are 32-bit)",
                       (long long)(q[1] + k[1]));
    /* FP8 V^T: each head-dim row holds seqlen_k keys (the 16-byte multiple of its stride is an alignment
     * rule, checked with the others when a launch follows) */
    if (fp8 && !is_empty(&a->v) && v[3] > 1 && a->v.stride[3] < v[1])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "v.stride[3] (head_dim) is %lld, less than seqlen_k (%lld); with %s inputs v is key-major (V^T "
                       "layout): each head-dim row holds seqlen_k contiguous keys, so the head-dim stride must be at "
                       "least seqlen_k (and a multiple of 16)", (long long)a->v.stride[3], (long long)v[1],
                       dtype_name(a->q.dtype));
    static const char *const dnames[3] = {"q_descale", "k_descale", "v_descale"};
    const fg_tensor *ds[3] = {&a->q_descale, &a->k_descale, &a->v_descale};
    for (int i = 0; i < 3; i++)
        if ((st = check_descale(ds[i], dnames[i], a, need_data, err)) != FG_OK) return st;
    if (a->lse.data) {
        if (a->lse.dtype != FG_DTYPE_F32)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse.dtype is %s; the log-sum-exp is written as fp32",
                           dtype_name(a->lse.dtype));
        if ((st = check_tensor(&a->lse, "lse", 3, 1, 0, err)) != FG_OK) return st;
        if (a->lse.shape[0] != q[0] || a->lse.shape[1] != q[2] || a->lse.shape[2] != q[1])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "lse.shape is [%lld, %lld, %lld]; it must be [batch, q heads, seqlen_q] = [%lld, %lld, %lld]",
                           (long long)a->lse.shape[0], (long long)a->lse.shape[1], (long long)a->lse.shape[2],
                           (long long)q[0], (long long)q[2], (long long)q[1]);
        if ((uintptr_t)a->lse.data % 4 != 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse.data (%p) is not 4-byte aligned", a->lse.data);
    }
    if (need_data && !rt_fwd_is_empty(a)) {
        for (int i = 0; i < 4; i++)
            if (!is_empty(ts[i]) && (st = check_align16(ts[i], names[i], i == 2 && fp8 ? 1 : 3, err)) != FG_OK)
                return st;
        if ((st = check_overlap(a, err)) != FG_OK) return st;
    }
    if (!(a->softmax_scale == 0.f || (isfinite(a->softmax_scale) && a->softmax_scale > 0.f)))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "softmax_scale is %g; it must be a positive finite number (or 0 for 1/sqrt(head_dim))",
                       (double)a->softmax_scale);
    if (a->causal != 0 && a->causal != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "causal is %d; it must be 0 or 1", a->causal);
    return FG_OK;
}

fg_status rt_check_fwd_args(const fg_fwd_args *a, int need_data, fg_error *err) {
    return check_fwd_args(a, need_data, 0, err);
}

/* One gradient (or dO) tensor against the tensor it mirrors: dtype, shape, structure, alignment. */
static fg_status check_like(const fg_tensor *t, const char *name, const fg_tensor *ref, const char *ref_name,
                            int need_data, fg_error *err) {
    if (t->dtype != ref->dtype)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.dtype (%s) differs from %s.dtype (%s); they must match",
                       name, dtype_name(t->dtype), ref_name, dtype_name(ref->dtype));
    fg_status st = check_tensor(t, name, 4, need_data, 0, err);
    if (st != FG_OK) return st;
    for (int i = 0; i < 4; i++)
        if (t->shape[i] != ref->shape[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.shape[%d] (%s) is %lld; it must be %s's, %lld", name, i,
                           qkvo_dims[i], (long long)t->shape[i], ref_name, (long long)ref->shape[i]);
    if (need_data && !is_empty(t)) return check_align16(t, name, 3, err);
    return FG_OK;
}

/* The byte range [lo, hi) a view spans (hi = lo for an empty one). */
static void span(const fg_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    *lo = (uintptr_t)t->data;
    *hi = is_empty(t) ? *lo : *lo + (uintptr_t)((rt_view_last_offset(t) + 1) * dtype_size(t->dtype));
}

fg_status rt_args_copy(const void *src, void *dst, size_t dst_size, size_t first_size, const char *type,
                       fg_error *err) {
    if (!src) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "args is NULL");
    size_t have;
    memcpy(&have, src, sizeof have);
    if (have < first_size)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "args->struct_size is %zu; it must be sizeof(%s) (%zu in this "
                       "build): initialize the arguments with %s_init", have, type, dst_size, type);
    const size_t n = have < dst_size ? have : dst_size;
    memcpy(dst, src, n);
    memset((char *)dst + n, 0, dst_size - n);
    ((size_t *)dst)[0] = dst_size;
    return FG_OK;
}

fg_status rt_check_bwd_args(const fg_bwd_args *a, int need_data, size_t need, fg_error *err) {
    fg_fwd_args f;
    memset(&f, 0, sizeof f);
    f.q = a->q, f.k = a->k, f.v = a->v, f.o = a->o, f.lse = a->lse;
    f.softmax_scale = a->softmax_scale;
    f.causal = a->causal;
    if (!is_half(a->q.dtype))
        return fg_fail(err, FG_ERR_UNSUPPORTED, "q.dtype is %s; the backward takes fp16 or bf16",
                       dtype_name(a->q.dtype));
    if (!a->lse.data && need_data && a->q.shape[0] != 0 && a->q.shape[1] != 0 && a->q.shape[2] != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "lse.data is NULL; the backward recomputes P from the forward's LSE: pass the forward's lse");
    fg_status st = check_fwd_args(&f, need_data, 1, err);
    if (st != FG_OK) return st;
    if (a->lse.data == NULL && a->lse.ndim != 0 && !need_data &&
        (st = check_tensor(&a->lse, "lse", 3, 0, 0, err)) != FG_OK)
        return st;
    if ((st = check_like(&a->dout, "dout", &a->o, "o", need_data, err)) != FG_OK ||
        (st = check_like(&a->dq, "dq", &a->q, "q", need_data, err)) != FG_OK ||
        (st = check_like(&a->dk, "dk", &a->k, "k", need_data, err)) != FG_OK ||
        (st = check_like(&a->dv, "dv", &a->v, "v", need_data, err)) != FG_OK)
        return st;
    if (a->deterministic != 0 && a->deterministic != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "deterministic is %d; it must be 0 or 1", a->deterministic);
    /* A gradient whose distinct elements share memory (a zero or too small stride on a dimension longer than 1)
     * would race and make the deterministic mode nondeterministic. */
    const fg_tensor *grads[3] = {&a->dq, &a->dk, &a->dv};
    static const char *const grad_names[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++)
        if (self_overlaps(grads[i]))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s's strides [%lld, %lld, %lld, 1] make distinct elements "
                           "share memory; an output must not overlap itself", grad_names[i],
                           (long long)grads[i]->stride[0], (long long)grads[i]->stride[1], (long long)grads[i]->stride[2]);
    if (need_data) {
        /* The outputs are written while the inputs are read, in any order: no byte may be shared. */
        const fg_tensor *outs[3] = {&a->dq, &a->dk, &a->dv};
        static const char *const out_names[3] = {"dq", "dk", "dv"};
        const fg_tensor *ins[6] = {&a->q, &a->k, &a->v, &a->o, &a->dout, &a->lse};
        static const char *const in_names[6] = {"q", "k", "v", "o", "dout", "lse"};
        for (int i = 0; i < 3; i++) {
            uintptr_t lo, hi;
            span(outs[i], &lo, &hi);
            for (int j = 0; j < 6 + i; j++) {
                const fg_tensor *other = j < 6 ? ins[j] : outs[j - 6];
                uintptr_t olo, ohi;
                span(other, &olo, &ohi);
                if (lo < ohi && olo < hi)
                    return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s overlaps %s in memory; the gradients must "
                                   "not share bytes with the inputs or each other", out_names[i],
                                   j < 6 ? in_names[j] : out_names[j - 6]);
            }
        }
        if (need > 0 && a->workspace) { /* the workspace is written too: no tensor may share its bytes */
            const uintptr_t wlo = (uintptr_t)a->workspace, whi = wlo + need;
            for (int j = 0; j < 9; j++) {
                const fg_tensor *t = j < 6 ? ins[j] : outs[j - 6];
                uintptr_t lo, hi;
                span(t, &lo, &hi);
                if (lo < whi && wlo < hi)
                    return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the workspace overlaps %s in memory; it must be "
                                   "memory of its own", j < 6 ? in_names[j] : out_names[j - 6]);
            }
        }
        if (a->workspace_size < need)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "workspace_size is %zu bytes; this call needs %zu "
                           "(fg_attention_bwd_workspace_size)", a->workspace_size, need);
        if (need > 0 && (!a->workspace || (uintptr_t)a->workspace % 256 != 0))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "workspace (%p) is %s; it must be device memory, 256-byte "
                           "aligned", a->workspace, a->workspace ? "not 256-byte aligned" : "NULL");
    }
    return FG_OK;
}
