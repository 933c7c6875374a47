/* gpu_buffers.c: the GPU side of a problem that `run` and `tune` (cmd_tune.c) share: the call's tensors
 * (problem_args), device buffers with N(0, 1) inputs and poisoned outputs, and the check of what a kernel
 * wrote against the CPU reference (forward and backward), the model variants included (their values and
 * serving calls are cli_variants.c's). Part of the `flashgen` program; cli.h declares it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashgen.h"
#include "generator/spec.h"
#include "reference/reference.h"
#include "runtime/cuda_api.h"
#include "runtime/runtime.h" /* the context's driver entry points, for the backward's buffers */
#include "tools/cli.h"

/* A contiguous [d0, d1, d2, d3] tensor description (or [d0, d1, d2] when d3 is 0) at `data`. */
static fg_tensor contiguous(void *data, fg_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = d3 ? 4 : 3;
    int64_t shape[4] = {d0, d1, d2, d3};
    int64_t stride = 1;
    for (int i = t.ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = stride;
        stride *= shape[i];
    }
    return t;
}

/* Keys per row of an FP8 problem's key-major V: seqlen_k rounded up to 16 (rows 16-byte aligned). */
static int64_t vt_row(const problem *p) { return (p->seqlen_k + 15) / 16 * 16; }

/* O's dtype for problem p. */
static fg_dtype out_dtype_of(const problem *p) { return dtype_is_fp8(p->dtype) ? p->out_dtype : p->dtype; }

long long problem_head_dim_v(const problem *p) { return p->head_dim_v > 0 ? p->head_dim_v : p->head_dim; }

/* Fills args with contiguous Q/K/O/LSE tensors of problem p at the given (device) addresses, and V
 * contiguous too, or for FP8 key-major (a [b, hkv, d, vt_row] buffer viewed as [b, sk, hkv, d]). V and O
 * have V's head dim (fg_attention_fwd refuses one that differs: such problems go to the serving call). */
void problem_args(const problem *p, void *q, void *k, void *v, void *o, void *lse, fg_fwd_args *a) {
    const long long dv = problem_head_dim_v(p);
    memset(a, 0, sizeof *a);
    a->q = contiguous(q, p->dtype, p->batch, p->seqlen_q, p->heads, p->head_dim);
    a->k = contiguous(k, p->dtype, p->batch, p->seqlen_k, p->heads_kv, p->head_dim);
    a->v = contiguous(v, p->dtype, p->batch, p->seqlen_k, p->heads_kv, dv);
    if (dtype_is_fp8(p->dtype)) {
        int64_t r = vt_row(p);
        a->v.stride[0] = p->heads_kv * p->head_dim * r;
        a->v.stride[1] = 1;
        a->v.stride[2] = p->head_dim * r;
        a->v.stride[3] = r;
    }
    a->o = contiguous(o, out_dtype_of(p), p->batch, p->seqlen_q, p->heads, dv);
    a->lse = contiguous(lse, FG_DTYPE_F32, p->batch, p->heads, p->seqlen_q, 0);
    a->causal = p->causal;
}

/* FWD_MAX_COPIES and fwd_buffers are in cli.h; the timing loop is autotune/timing.h's. */

/* Device bytes of one copy of p's tensors (Q, K, V, O and the LSE). */
double fwd_copy_bytes(const problem *p) {
    double esz = (double)dtype_size(p->dtype), oesz = (double)dtype_size(out_dtype_of(p));
    double rows_q = (double)p->batch * (double)p->seqlen_q * (double)p->heads;
    double rows_kv = (double)p->batch * (double)p->seqlen_k * (double)p->heads_kv;
    double d = (double)p->head_dim, dv = (double)problem_head_dim_v(p);
    return rows_q * (d * esz + dv * oesz) + rows_kv * (d + dv) * esz + rows_q * 4.0;
}

/* Frees every buffer of B (device memory in the current context) and zeroes it. */
void fwd_buffers_free(const fg_cuda_api *cu, fwd_buffers *B) {
    for (int c = 0; c < FWD_MAX_COPIES; c++) {
        CUdeviceptr *slots[5] = {&B->q[c], &B->k[c], &B->v[c], &B->o[c], &B->lse[c]};
        for (int i = 0; i < 5; i++)
            if (*slots[i]) cu->cuMemFree(*slots[i]);
    }
    if (B->sinks) cu->cuMemFree(B->sinks);
    if (B->slopes) cu->cuMemFree(B->slopes);
    free(B->hq);
    free(B->hk);
    free(B->hv);
    free(B->hsinks);
    free(B->hslopes);
    memset(B, 0, sizeof *B);
}

/* Fills poisoned outputs: all-ones bytes are NaN in fp16, bf16 and fp32, so any element the kernel
 * fails to write shows up. Waits for the memsets (they run on the legacy stream, which a non-blocking
 * stream does not wait for). Needs the context current. */
fg_status fwd_poison(const fg_cuda_api *cu, const fwd_buffers *B, int copy, fg_error *err) {
    FG_CU(err, cu->cuMemsetD8(B->o[copy], 0xFF, B->no * B->oesz));
    FG_CU(err, cu->cuMemsetD8(B->lse[copy], 0xFF, B->nlse * sizeof(float)));
    FG_CU(err, cu->cuCtxSynchronize());
    return FG_OK;
}

/* Makes B (zeroed here first) hold problem p: host inputs filled from `seed` (Q, K and V from seed*3,
 * seed*3+1, seed*3+2), the model variants' per-head values (sinks, ALiBi slopes) on the host and the device
 * when p asks for them, and up to `copies` device copies of every tensor (at least one), each uploaded,
 * its outputs poisoned. A copy after the first that does not fit in device memory is not made (check
 * B->ncopies); any other failure is an error. Needs the device's context current; on failure the
 * caller still calls fwd_buffers_free. */
/* An FP8 V's mean: with V's columns averaging 0 the terms of P.V cancel, and a kernel whose accumulation
 * drifts over long key ranges still passes; with mean 1 such drift shows, so `run` and `tune` check FP8
 * with 1. */
#define FP8_V_MEAN 1.f

fg_status fwd_buffers_init(const fg_cuda_api *cu, const problem *p, uint64_t seed, int copies, fwd_buffers *B,
                           fg_error *err) {
    memset(B, 0, sizeof *B);
    B->esz = (size_t)dtype_size(p->dtype);
    B->oesz = (size_t)dtype_size(out_dtype_of(p));
    const long long dv = problem_head_dim_v(p);
    B->nq = (size_t)(p->batch * p->seqlen_q * p->heads * p->head_dim);
    B->no = (size_t)(p->batch * p->seqlen_q * p->heads * dv);
    B->nkv = (size_t)(p->batch * p->seqlen_k * p->heads_kv * p->head_dim);
    B->nv = dtype_is_fp8(p->dtype) ? (size_t)(p->batch * p->heads_kv * p->head_dim * vt_row(p))
                                   : (size_t)(p->batch * p->seqlen_k * p->heads_kv * dv);
    B->nlse = (size_t)(p->batch * p->heads * p->seqlen_q);
    B->hq = malloc(B->nq * B->esz);
    B->hk = malloc(B->nkv * B->esz);
    B->hv = malloc(B->nv * B->esz);
    if (!B->hq || !B->hk || !B->hv)
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for a problem of %zu + %zu + %zu elements", B->nq,
                       B->nkv, B->nv);
    memset(B->hv, 0xFF, B->nv * B->esz); /* V^T's row padding: NaN, which the kernel must never read as a key */
    problem_args(p, B->hq, B->hk, B->hv, NULL, NULL, &B->host);
    fg_status st;
    if ((st = ref_fill_normal(&B->host.q, seed * 3 + 0, err)) != FG_OK ||
        (st = ref_fill_normal(&B->host.k, seed * 3 + 1, err)) != FG_OK ||
        (st = ref_fill_normal_mean(&B->host.v, seed * 3 + 2, dtype_is_fp8(p->dtype) ? FP8_V_MEAN : 0.f, err)) !=
            FG_OK)
        return st;
    if ((st = variant_buffers_init(cu, p, seed, B, err)) != FG_OK) return st;
    if (copies < 1) copies = 1;
    if (copies > FWD_MAX_COPIES) copies = FWD_MAX_COPIES;
    size_t sizes[5] = {B->nq * B->esz, B->nkv * B->esz, B->nv * B->esz, B->no * B->oesz, B->nlse * sizeof(float)};
    for (int c = 0; c < copies; c++) {
        CUdeviceptr *slots[5] = {&B->q[c], &B->k[c], &B->v[c], &B->o[c], &B->lse[c]};
        CUresult rc = CUDA_SUCCESS;
        for (int i = 0; i < 5 && rc == CUDA_SUCCESS; i++) {
            rc = cu->cuMemAlloc(slots[i], sizes[i]);
            if (rc != CUDA_SUCCESS) *slots[i] = 0; /* never free what was not allocated */
        }
        if (rc == CUDA_ERROR_OUT_OF_MEMORY && c > 0) {
            /* Extra copies only keep the inputs out of L2; fewer of them still time correctly. */
            for (int i = 0; i < 5; i++)
                if (*slots[i]) {
                    cu->cuMemFree(*slots[i]);
                    *slots[i] = 0;
                }
            break;
        }
        if (rc != CUDA_SUCCESS)
            return cuda_api_fail(err, rc, "cuMemAlloc (Q, K, V, O and LSE of one copy of the problem)", __FILE__, __LINE__);
        FG_CU(err, cu->cuMemcpyHtoD(B->q[c], B->hq, sizes[0]));
        FG_CU(err, cu->cuMemcpyHtoD(B->k[c], B->hk, sizes[1]));
        FG_CU(err, cu->cuMemcpyHtoD(B->v[c], B->hv, sizes[2]));
        if ((st = fwd_poison(cu, B, c, err)) != FG_OK) return st;
        problem_args(p, (void *)(uintptr_t)B->q[c], (void *)(uintptr_t)B->k[c], (void *)(uintptr_t)B->v[c],
                     (void *)(uintptr_t)B->o[c], (void *)(uintptr_t)B->lse[c], &B->dev[c]);
        B->ncopies = c + 1;
    }
    return FG_OK;
}

/* A 1-d F32 host view of the first n entries of a per-head array (data NULL when the array is). */
static fg_tensor per_head_view(const float *data, int64_t n) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    if (!data) return t;
    t.data = (void *)data, t.dtype = FG_DTYPE_F32, t.ndim = 1, t.shape[0] = n, t.stride[0] = 1;
    return t;
}

/* The model variants of p into the reference problem rp, for query heads [0, nh) (B holds their values). */
static void variants_to_reference(const problem *p, const fwd_buffers *B, int64_t nh, ref_problem *rp) {
    rp->window = p->window, rp->window_left = p->window_left, rp->window_right = p->window_right;
    rp->causal_top_left = p->causal_top_left;
    rp->softcap = p->softcap;
    rp->sinks = per_head_view(B->hsinks, nh);
    rp->alibi_slopes = per_head_view(B->hslopes, nh);
}

/* Judges the output of copy `copy` of B (problem p, written by variant `ran`; NULL for a serving call) against the CPU
 * reference, the model variants included, on a slice: batches
 * [0, nb), query heads [0, nh) and query rows [row0, seqlen_q). The last rows are the ones to keep:
 * with the bottom-right aligned causal mask (and a window about that diagonal) they see the same keys in the
 * slice as in the whole problem, and they hold the partial last tile; a top-left causal mask needs every row
 * (row0 0). nh must keep every head with its own K/V head under
 * the slice's GQA grouping (all heads, whole groups, or part of the first group). Copies O and LSE back (the
 * kernel must have finished: synchronize its stream first) and fills *rep. FG_ERR_CUDA naming the
 * copy that failed, FG_ERR_NO_MEMORY, FG_ERR_INTERNAL for a slice that breaks those rules. */
fg_status fwd_check(const fg_cuda_api *cu, const fwd_buffers *B, const problem *p, const fg_spec *ran, int copy,
                    int64_t nb, int64_t nh, int64_t row0, ref_report *rep, fg_error *err) {
    int64_t sq = p->seqlen_q, hq = p->heads, dv = problem_head_dim_v(p), group = p->heads / p->heads_kv;
    int64_t rows = sq - row0, nkv = (nh + group - 1) / group;
    int keeps_groups = nh >= 1 && nh <= hq && nh % nkv == 0;
    for (int64_t h = 0; keeps_groups && h < nh; h++) keeps_groups = h / (nh / nkv) == h / group;
    if (nb < 1 || nb > p->batch || row0 < 0 || rows < 1 || !keeps_groups || (p->causal_top_left && row0 > 0))
        return fg_fail(err, FG_ERR_INTERNAL, "check slice (batches %lld, heads %lld, rows from %lld) does not fit the "
                       "problem (a flashgen bug)", (long long)nb, (long long)nh, (long long)row0);
    size_t esz = B->esz, orow = (size_t)(hq * dv) * B->oesz; /* bytes of one query row of O, every head */
    uint8_t *ho = malloc((size_t)(nb * rows) * orow);
    float *hl = malloc((size_t)(nb * nh * sq) * sizeof(float));
    fg_status st = FG_OK;
    if (!ho || !hl) {
        st = fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for the output slice to check");
        goto done;
    }
    for (int64_t b = 0; b < nb; b++) {
        /* Rows row0.. of batch b are contiguous in O ([b, sq, hq, d]); heads 0..nh-1 of batch b are
         * contiguous in the LSE ([b, hq, sq]). */
        CUresult rc = cu->cuMemcpyDtoH(ho + (size_t)(b * rows) * orow, B->o[copy] + (size_t)(b * sq + row0) * orow,
                                       (size_t)rows * orow);
        if (rc == CUDA_SUCCESS)
            rc = cu->cuMemcpyDtoH(hl + b * nh * sq, B->lse[copy] + (size_t)(b * hq * sq) * sizeof(float),
                                  (size_t)(nh * sq) * sizeof(float));
        if (rc != CUDA_SUCCESS) {
            st = cuda_api_fail(err, rc, "cuMemcpyDtoH (the output to check)", __FILE__, __LINE__);
            goto done;
        }
    }
    fg_tensor q = B->host.q, k = B->host.k, v = B->host.v;
    q.data = (uint8_t *)q.data + (size_t)(row0 * q.stride[1]) * esz;
    q.shape[0] = nb, q.shape[1] = rows, q.shape[2] = nh;
    k.shape[0] = v.shape[0] = nb;
    k.shape[2] = v.shape[2] = nkv;
    fg_tensor out = q;
    out.data = ho;
    out.dtype = out_dtype_of(p);
    out.shape[3] = dv;
    out.stride[0] = rows * hq * dv, out.stride[1] = hq * dv, out.stride[2] = dv;
    fg_tensor lse;
    memset(&lse, 0, sizeof lse);
    lse.data = hl + row0;
    lse.dtype = FG_DTYPE_F32;
    lse.ndim = 3;
    lse.shape[0] = nb, lse.shape[1] = nh, lse.shape[2] = rows;
    lse.stride[0] = nh * sq, lse.stride[1] = sq, lse.stride[2] = 1;
    ref_problem rp = {.q = q, .k = k, .v = v, .softmax_scale = 0.f, .causal = p->causal, .out_dtype = out_dtype_of(p),
                      .fp8_sum_rounded = ran ? spec_fp8_sum_rounded(ran) : 0};
    variants_to_reference(p, B, nh, &rp);
    st = ref_check_fwd(&rp, &out, &lse, rep, err);
done:
    free(ho);
    free(hl);
    return st;
}

/* The FLOPs of one forward pass by FlashAttention's convention: 2*b*h*sq*sk*(d + dv) (4*b*h*sq*sk*d with V of Q's
 * head dim), half when causal; with a window or a top-left causal mask, the query-key pairs the mask lets
 * through, counted row by row, in place of sq*sk (FlashAttention's benchmarks count windows so). */
double fwd_flops(const problem *p) {
    const double sq = (double)p->seqlen_q, sk = (double)p->seqlen_k;
    double pairs = sq * sk * (p->causal ? 0.5 : 1.0);
    if (p->window || p->causal_top_left) {
        pairs = 0;
        for (long long i = 0; i < p->seqlen_q; i++) { /* keys [lo, hi] of row i, as reference/forward.c masks them */
            const long long diag = i + p->seqlen_k - p->seqlen_q;
            long long lo = 0, hi = p->seqlen_k - 1;
            if (p->causal) hi = p->causal_top_left ? i : diag;
            if (p->window && p->window_left >= 0 && diag - p->window_left > lo) lo = diag - p->window_left;
            if (p->window && p->window_right >= 0 && diag + p->window_right < hi) hi = diag + p->window_right;
            if (hi > p->seqlen_k - 1) hi = p->seqlen_k - 1;
            if (hi >= lo) pairs += (double)(hi - lo + 1);
        }
    }
    return 2.0 * (double)p->batch * (double)p->heads * pairs * (double)(p->head_dim + problem_head_dim_v(p));
}

/* ---- the backward's buffers and check, for `tune` of kind = "bwd" spaces ---- */

void bwd_problem_args(const problem *p, void *q, void *k, void *v, void *o, void *lse, void *dout, void *dq, void *dk,
                      void *dv, fg_bwd_args *a) {
    fg_fwd_args f;
    problem_args(p, q, k, v, o, lse, &f);
    memset(a, 0, sizeof *a);
    a->q = f.q, a->k = f.k, a->v = f.v, a->o = f.o, a->lse = f.lse;
    a->dout = contiguous(dout, p->dtype, p->batch, p->seqlen_q, p->heads, problem_head_dim_v(p));
    a->dq = contiguous(dq, p->dtype, p->batch, p->seqlen_q, p->heads, p->head_dim);
    a->dk = contiguous(dk, p->dtype, p->batch, p->seqlen_k, p->heads_kv, p->head_dim);
    a->dv = contiguous(dv, p->dtype, p->batch, p->seqlen_k, p->heads_kv, problem_head_dim_v(p));
    a->causal = p->causal;
}

double bwd_copy_bytes(const problem *p) {
    const double esz = (double)dtype_size(p->dtype), d = (double)p->head_dim, dv = (double)problem_head_dim_v(p);
    const double rows_q = (double)p->batch * (double)p->seqlen_q * (double)p->heads;
    const double rows_kv = (double)p->batch * (double)p->seqlen_k * (double)p->heads_kv;
    return esz * (rows_q * (2 * d + 2 * dv) + rows_kv * (2 * d + 2 * dv)) + rows_q * 4.0;
}

void bwd_buffers_free(const fg_cuda_api *cu, bwd_buffers *B) {
    CUdeviceptr *slots[8] = {&B->dout, &B->dq, &B->dk, &B->dv, &B->ws, &B->cu_q, &B->cu_k, &B->dsink};
    for (int i = 0; i < 8; i++)
        if (*slots[i]) cu->cuMemFree(*slots[i]);
    fwd_buffers_free(cu, &B->F);
    free(B->hdo);
    memset(B, 0, sizeof *B);
}

fg_status bwd_poison(const fg_cuda_api *cu, const bwd_buffers *B, fg_error *err) {
    /* the workspace too: the kernels must initialize what they use of it */
    if (B->ws) FG_CU(err, cu->cuMemsetD8(B->ws, 0xFF, B->ws_bytes));
    FG_CU(err, cu->cuMemsetD8(B->dq, 0xFF, B->F.nq * B->F.esz));
    FG_CU(err, cu->cuMemsetD8(B->dk, 0xFF, B->F.nkv * B->F.esz));
    FG_CU(err, cu->cuMemsetD8(B->dv, 0xFF, B->F.nv * B->F.esz));
    if (B->dsink) FG_CU(err, cu->cuMemsetD8(B->dsink, 0xFF, (size_t)B->dev.q.shape[2] * sizeof(float)));
    FG_CU(err, cu->cuCtxSynchronize());
    return FG_OK;
}

/* With model variants: the offsets of the uniform batch's sequences (cu_q, cu_k) and, with sinks, dsink. */
static fg_status packed_buffers_init(const fg_cuda_api *cu, const problem *p, bwd_buffers *B, fg_error *err) {
    if ((double)p->batch * (double)(p->seqlen_q > p->seqlen_k ? p->seqlen_q : p->seqlen_k) > (double)INT32_MAX)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "batch x seqlen is 2^31 tokens or more; packed offsets are int32");
    int32_t *cu_q = malloc((size_t)(p->batch + 1) * 2 * sizeof(int32_t));
    if (!cu_q) return fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for the sequences' offsets");
    int32_t *cu_k = cu_q + p->batch + 1;
    for (long long b = 0; b <= p->batch; b++)
        cu_q[b] = (int32_t)(b * p->seqlen_q), cu_k[b] = (int32_t)(b * p->seqlen_k);
    const size_t bytes = (size_t)(p->batch + 1) * sizeof(int32_t);
    CUdeviceptr *slots[3] = {&B->cu_q, &B->cu_k, &B->dsink};
    const size_t sizes[3] = {bytes, bytes, p->sinks ? (size_t)p->heads * sizeof(float) : 0};
    CUresult rc = CUDA_SUCCESS;
    for (int i = 0; i < 3 && rc == CUDA_SUCCESS; i++)
        if (sizes[i] && (rc = cu->cuMemAlloc(slots[i], sizes[i])) != CUDA_SUCCESS) *slots[i] = 0; /* never freed */
    if (rc == CUDA_SUCCESS) rc = cu->cuMemcpyHtoD(B->cu_q, cu_q, bytes);
    if (rc == CUDA_SUCCESS) rc = cu->cuMemcpyHtoD(B->cu_k, cu_k, bytes);
    free(cu_q);
    if (rc != CUDA_SUCCESS) return cuda_api_fail(err, rc, "cuMemAlloc or cuMemcpyHtoD (the sequences' offsets)", __FILE__, __LINE__);
    return FG_OK;
}

/* O and the LSE the backward reads: the forward of these very inputs (the policy's, or the tuned, variant); with
 * model variants the serving call in the packed form the backward takes (its LSE [heads, batch x seqlen_q]). */
static fg_status bwd_forward(fg_context *ctx, const problem *p, const bwd_buffers *B, fg_error *err) {
    fg_status st;
    if (B->cu_q) {
        fg_varlen_args a;
        problem_varlen_args(p, &B->F.dev[0], 1, (const float *)(uintptr_t)B->F.sinks,
                            (const float *)(uintptr_t)B->F.slopes, (const int32_t *)(uintptr_t)B->cu_q,
                            (const int32_t *)(uintptr_t)B->cu_k, &a);
        st = fg_attention_fwd_varlen(ctx, &a, NULL);
    } else {
        st = fg_attention_fwd(ctx, &B->F.dev[0], NULL);
    }
    if (st != FG_OK) return fg_fail(err, st, "the forward that makes O and the LSE failed: %s", fg_last_error(ctx));
    FG_CU(err, ctx->cu->cuCtxSynchronize());
    return FG_OK;
}

fg_status bwd_buffers_init(fg_context *ctx, const problem *p, uint64_t seed, bwd_buffers *B, fg_error *err) {
    memset(B, 0, sizeof *B);
    const fg_cuda_api *cu = ctx->cu;
    if (p->dtype != FG_DTYPE_F16 && p->dtype != FG_DTYPE_BF16)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the backward takes fp16 or bf16, not %s", dtype_name(p->dtype));
    fg_status st = fwd_buffers_init(cu, p, seed, 1, &B->F, err);
    if (st != FG_OK) return st;
    if (problem_has_variants(p) && (st = packed_buffers_init(cu, p, B, err)) != FG_OK) return st;
    if ((st = bwd_forward(ctx, p, B, err)) != FG_OK) return st;
    const size_t nq = B->F.nq, no = B->F.no, nkv = B->F.nkv, nv = B->F.nv, esz = B->F.esz;
    if (!(B->hdo = malloc(no * esz)))
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for dO (%zu elements)", no);
    const fg_tensor host_do = contiguous(B->hdo, p->dtype, p->batch, p->seqlen_q, p->heads, problem_head_dim_v(p));
    if ((st = ref_fill_normal(&host_do, seed * 3 + 3, err)) != FG_OK) return st;
    CUdeviceptr *slots[4] = {&B->dout, &B->dq, &B->dk, &B->dv};
    const size_t sizes[4] = {no * esz, nq * esz, nkv * esz, nv * esz};
    for (int i = 0; i < 4; i++) {
        CUresult rc = cu->cuMemAlloc(slots[i], sizes[i]);
        if (rc != CUDA_SUCCESS) {
            *slots[i] = 0;
            return cuda_api_fail(err, rc, "cuMemAlloc (dO and the gradients of the backward problem)", __FILE__, __LINE__);
        }
    }
    FG_CU(err, cu->cuMemcpyHtoD(B->dout, B->hdo, sizes[0]));
    const fg_fwd_args *f = &B->F.dev[0];
    bwd_problem_args(p, f->q.data, f->k.data, f->v.data, f->o.data, f->lse.data, (void *)(uintptr_t)B->dout,
                     (void *)(uintptr_t)B->dq, (void *)(uintptr_t)B->dk, (void *)(uintptr_t)B->dv, &B->dev);
    if (B->cu_q)
        problem_varlen_bwd_args(p, &B->dev, (const float *)(uintptr_t)B->F.sinks, (const float *)(uintptr_t)B->F.slopes,
                                (float *)(uintptr_t)B->dsink, (const int32_t *)(uintptr_t)B->cu_q,
                                (const int32_t *)(uintptr_t)B->cu_k, &B->vdev);
    if ((B->cu_q ? fg_attention_bwd_varlen_workspace_size(ctx, &B->vdev, &B->ws_bytes)
                 : fg_attention_bwd_workspace_size(ctx, &B->dev, &B->ws_bytes)) != FG_OK)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s", fg_last_error(ctx));
    if (B->ws_bytes) {
        CUresult rc = cu->cuMemAlloc(&B->ws, B->ws_bytes); /* 256-byte aligned, as the workspace must be */
        if (rc != CUDA_SUCCESS) {
            B->ws = 0;
            return cuda_api_fail(err, rc, "cuMemAlloc (the backward's workspace)", __FILE__, __LINE__);
        }
        B->dev.workspace = B->vdev.workspace = (void *)(uintptr_t)B->ws;
        B->dev.workspace_size = B->vdev.workspace_size = B->ws_bytes;
    }
    return bwd_poison(cu, B, err);
}

/* The reference problem of B's backward (p's forward with its model variants) on the host copies in v; the
 * LSE as the forward wrote it ([b, hq, sq], or packed [hq, b x sq] after a serving call), viewed [b, hq, sq]. */
static ref_bwd_problem bwd_reference(const problem *p, const bwd_buffers *B, const fg_bwd_args *v) {
    ref_bwd_problem rp = {.fwd = {.q = v->q, .k = v->k, .v = v->v, .softmax_scale = 0.f, .causal = p->causal,
                                  .out_dtype = p->dtype},
                          .o = v->o, .d_o = v->dout, .lse = v->lse};
    variants_to_reference(p, &B->F, p->heads, &rp.fwd);
    if (B->cu_q) rp.lse.stride[0] = p->seqlen_q, rp.lse.stride[1] = p->batch * p->seqlen_q;
    return rp;
}

/* Copies B's O, LSE and gradients back into one host block (*h, to free) and describes them in *v. */
static fg_status bwd_download(const fg_cuda_api *cu, const bwd_buffers *B, const problem *p, uint8_t **h, fg_bwd_args *v,
                              fg_error *err) {
    const size_t nq = B->F.nq, no = B->F.no, nkv = B->F.nkv, nv = B->F.nv, esz = B->F.esz, nlse = B->F.nlse;
    *h = malloc((nq + no + nkv + nv) * esz + nlse * sizeof(float));
    if (!*h) return fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for the gradients to check");
    uint8_t *ho = *h, *hdq = ho + no * esz, *hdk = hdq + nq * esz, *hdv = hdk + nkv * esz, *hl = hdv + nv * esz;
    const fg_fwd_args *f = &B->F.dev[0];
    struct { void *dst; CUdeviceptr src; size_t bytes; } copies[5] = {
        {ho, (CUdeviceptr)(uintptr_t)f->o.data, no * esz}, {hdq, B->dq, nq * esz}, {hdk, B->dk, nkv * esz},
        {hdv, B->dv, nv * esz}, {hl, (CUdeviceptr)(uintptr_t)f->lse.data, nlse * sizeof(float)}};
    for (int i = 0; i < 5; i++) {
        CUresult rc = cu->cuMemcpyDtoH(copies[i].dst, copies[i].src, copies[i].bytes);
        if (rc != CUDA_SUCCESS) return cuda_api_fail(err, rc, "cuMemcpyDtoH (the gradients to check)", __FILE__, __LINE__);
    }
    bwd_problem_args(p, B->F.hq, B->F.hk, B->F.hv, ho, hl, B->hdo, hdq, hdk, hdv, v);
    return FG_OK;
}

/* dsink against the reference's, summed over the sequences as the kernel sums it: each head within 1e-3 of the
 * sum of the sequences' terms' magnitudes, plus 1e-5 (the rule of tests/test_gpu_backward_varlen.c). */
static fg_status dsink_judge(const fg_cuda_api *cu, const bwd_buffers *B, const problem *p, const fg_bwd_args *v,
                             dsink_report *r, fg_error *err) {
    memset(r, 0, sizeof *r);
    r->pass = 1, r->worst = -1;
    if (!B->dsink) return FG_OK;
    const int64_t hq = p->heads;
    float *got = malloc((size_t)hq * sizeof *got);
    double *sum = calloc((size_t)hq * 3, sizeof *sum), *mag = sum + hq, *ds = mag + hq;
    fg_status st = !got || !sum ? fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for dsink") : FG_OK;
    if (st == FG_OK) {
        CUresult rc = cu->cuMemcpyDtoH(got, B->dsink, (size_t)hq * sizeof *got);
        if (rc != CUDA_SUCCESS) st = cuda_api_fail(err, rc, "cuMemcpyDtoH (dsink)", __FILE__, __LINE__);
    }
    const ref_bwd_problem whole = bwd_reference(p, B, v);
    for (int64_t b = 0; st == FG_OK && b < p->batch; b++) { /* one sequence at a time: the magnitudes */
        ref_bwd_problem one = whole;
        fg_tensor *t[6] = {&one.fwd.q, &one.fwd.k, &one.fwd.v, &one.o, &one.d_o, &one.lse};
        for (int i = 0; i < 6; i++) {
            const size_t esz = i == 5 ? sizeof(float) : B->F.esz;
            t[i]->data = (uint8_t *)t[i]->data + (size_t)(b * t[i]->stride[0]) * esz;
            t[i]->shape[0] = 1;
        }
        if ((st = ref_sink_grad(&one, ds, err)) != FG_OK) break;
        for (int64_t i = 0; i < hq; i++) sum[i] += ds[i], mag[i] += fabs(ds[i]);
    }
    /* the report names the first head out of bounds (a NaN is), else the head of the largest error */
    for (int64_t i = 0; st == FG_OK && i < hq; i++) {
        const double e = fabs((double)got[i] - sum[i]), bound = 1e-3 * mag[i] + 1e-5;
        const int bad = !(e <= bound), take = r->pass ? bad || r->worst < 0 || e > r->max_err : 0;
        if (bad) r->pass = 0;
        if (take) r->max_err = e, r->bound = bound, r->worst = i, r->worst_out = got[i], r->worst_ref = sum[i];
    }
    r->checked = st == FG_OK;
    free(got);
    free(sum);
    return st;
}

fg_status bwd_check(const fg_cuda_api *cu, const bwd_buffers *B, const problem *p, ref_bwd_report *rep, dsink_report *ds,
                    fg_error *err) {
    uint8_t *h = NULL;
    fg_bwd_args v;
    fg_status st = bwd_download(cu, B, p, &h, &v, err);
    if (st == FG_OK) {
        const ref_bwd_problem rp = bwd_reference(p, B, &v);
        st = ref_check_bwd(&rp, &v.dq, &v.dk, &v.dv, rep, err);
    }
    if (st == FG_OK && ds) st = dsink_judge(cu, B, p, &v, ds, err); /* on the same host copies */
    free(h);
    return st;
}

char *dsink_report_format(const dsink_report *r, char *buf, size_t n) {
    if (!r->checked) snprintf(buf, n, "no sinks");
    else if (r->worst < 0) snprintf(buf, n, "no heads");
    else
        snprintf(buf, n, "|dsink - ref| %.3g at head %lld (dsink %.6g, reference %.6g), bound %.3g", r->max_err,
                 (long long)r->worst, r->worst_out, r->worst_ref, r->bound);
    return buf;
}
