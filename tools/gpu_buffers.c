/* gpu_buffers.c: the GPU side of a problem that `run` and `tune` (cmd_tune.c) share: the call's tensors
 * (problem_args), device buffers with N(0, 1) inputs and poisoned outputs, and the check of what a kernel
 * wrote against the CPU reference (forward and backward). Part of the `flashgen` program; cli.h declares it. */
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

/* Fills args with contiguous Q/K/O/LSE tensors of problem p at the given (device) addresses, and V
 * contiguous too, or for FP8 key-major (a [b, hkv, d, vt_row] buffer viewed as [b, sk, hkv, d]). */
void problem_args(const problem *p, void *q, void *k, void *v, void *o, void *lse, fg_fwd_args *a) {
    memset(a, 0, sizeof *a);
    a->q = contiguous(q, p->dtype, p->batch, p->seqlen_q, p->heads, p->head_dim);
    a->k = contiguous(k, p->dtype, p->batch, p->seqlen_k, p->heads_kv, p->head_dim);
    a->v = contiguous(v, p->dtype, p->batch, p->seqlen_k, p->heads_kv, p->head_dim);
    if (dtype_is_fp8(p->dtype)) {
        int64_t r = vt_row(p);
        a->v.stride[0] = p->heads_kv * p->head_dim * r;
        a->v.stride[1] = 1;
        a->v.stride[2] = p->head_dim * r;
        a->v.stride[3] = r;
    }
    a->o = contiguous(o, out_dtype_of(p), p->batch, p->seqlen_q, p->heads, p->head_dim);
    a->lse = contiguous(lse, FG_DTYPE_F32, p->batch, p->heads, p->seqlen_q, 0);
    a->causal = p->causal;
}

/* FWD_MAX_COPIES and fwd_buffers are in cli.h; the timing loop is autotune/timing.h's. */

/* Device bytes of one copy of p's tensors (Q, K, V, O and the LSE). */
double fwd_copy_bytes(const problem *p) {
    double esz = (double)dtype_size(p->dtype), oesz = (double)dtype_size(out_dtype_of(p));
    double q = (double)p->batch * (double)p->seqlen_q * (double)p->heads * (double)p->head_dim;
    double kv = (double)p->batch * (double)p->seqlen_k * (double)p->heads_kv * (double)p->head_dim;
    return q * (esz + oesz) + 2 * kv * esz + (double)p->batch * (double)p->heads * (double)p->seqlen_q * 4.0;
}

/* Frees every buffer of B (device memory in the current context) and zeroes it. */
void fwd_buffers_free(const fg_cuda_api *cu, fwd_buffers *B) {
    for (int c = 0; c < FWD_MAX_COPIES; c++) {
        CUdeviceptr *slots[5] = {&B->q[c], &B->k[c], &B->v[c], &B->o[c], &B->lse[c]};
        for (int i = 0; i < 5; i++)
            if (*slots[i]) cu->cuMemFree(*slots[i]);
    }
    free(B->hq);
    free(B->hk);
    free(B->hv);
    memset(B, 0, sizeof *B);
}

/* Fills poisoned outputs: all-ones bytes are NaN in fp16, bf16 and fp32, so any element the kernel
 * fails to write shows up. Waits for the memsets (they run on the legacy stream, which a non-blocking
 * stream does not wait for). Needs the context current. */
fg_status fwd_poison(const fg_cuda_api *cu, const fwd_buffers *B, int copy, fg_error *err) {
    FG_CU(err, cu->cuMemsetD8(B->o[copy], 0xFF, B->nq * B->oesz));
    FG_CU(err, cu->cuMemsetD8(B->lse[copy], 0xFF, B->nlse * sizeof(float)));
    FG_CU(err, cu->cuCtxSynchronize());
    return FG_OK;
}

/* Makes B (zeroed here first) hold problem p: host inputs filled from `seed` (Q, K and V from seed*3,
 * seed*3+1, seed*3+2) and up to `copies` device copies of every tensor (at least one), each uploaded,
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
    B->nq = (size_t)(p->batch * p->seqlen_q * p->heads * p->head_dim);
    B->nkv = (size_t)(p->batch * p->seqlen_k * p->heads_kv * p->head_dim);
    B->nv = dtype_is_fp8(p->dtype) ? (size_t)(p->batch * p->heads_kv * p->head_dim * vt_row(p)) : B->nkv;
    B->nlse = (size_t)(p->batch * p->heads * p->seqlen_q);
    B->hq = malloc(B->nq * B->esz);
    B->hk = malloc(B->nkv * B->esz);
    B->hv = malloc(B->nv * B->esz);
    if (!B->hq || !B->hk || !B->hv)
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for a problem of %zu + 2 x %zu elements", B->nq, B->nkv);
    memset(B->hv, 0xFF, B->nv * B->esz); /* V^T's row padding: NaN, which the kernel must never read as a key */
    problem_args(p, B->hq, B->hk, B->hv, NULL, NULL, &B->host);
    fg_status st;
    if ((st = ref_fill_normal(&B->host.q, seed * 3 + 0, err)) != FG_OK ||
        (st = ref_fill_normal(&B->host.k, seed * 3 + 1, err)) != FG_OK ||
        (st = ref_fill_normal_mean(&B->host.v, seed * 3 + 2, dtype_is_fp8(p->dtype) ? FP8_V_MEAN : 0.f, err)) !=
            FG_OK)
        return st;
    if (copies < 1) copies = 1;
    if (copies > FWD_MAX_COPIES) copies = FWD_MAX_COPIES;
    size_t sizes[5] = {B->nq * B->esz, B->nkv * B->esz, B->nv * B->esz, B->nq * B->oesz, B->nlse * sizeof(float)};
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

/* Judges the output of copy `copy` of B (problem p, written by variant `ran`) against the CPU reference, on a slice: batches
 * [0, nb), query heads [0, nh) and query rows [row0, seqlen_q). The last rows are the ones to keep:
 * with the bottom-right aligned causal mask they see the same keys in the slice as in the whole
 * problem, and they hold the partial last tile. nh must keep every head with its own K/V head under
 * the slice's GQA grouping (all heads, whole groups, or part of the first group). Copies O and LSE back (the
 * kernel must have finished: synchronize its stream first) and fills *rep. FG_ERR_CUDA naming the
 * copy that failed, FG_ERR_NO_MEMORY, FG_ERR_INTERNAL for a slice that breaks those rules. */
fg_status fwd_check(const fg_cuda_api *cu, const fwd_buffers *B, const problem *p, const fg_spec *ran, int copy,
                    int64_t nb, int64_t nh, int64_t row0, ref_report *rep, fg_error *err) {
    int64_t sq = p->seqlen_q, hq = p->heads, d = p->head_dim, group = p->heads / p->heads_kv;
    int64_t rows = sq - row0, nkv = (nh + group - 1) / group;
    int keeps_groups = nh >= 1 && nh <= hq && nh % nkv == 0;
    for (int64_t h = 0; keeps_groups && h < nh; h++) keeps_groups = h / (nh / nkv) == h / group;
    if (nb < 1 || nb > p->batch || row0 < 0 || rows < 1 || !keeps_groups)
        return fg_fail(err, FG_ERR_INTERNAL, "check slice (batches %lld, heads %lld, rows from %lld) does not fit the "
                       "problem (a flashgen bug)", (long long)nb, (long long)nh, (long long)row0);
    size_t esz = B->esz, orow = (size_t)(hq * d) * B->oesz; /* bytes of one query row of O, every head */
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
    out.stride[0] = rows * hq * d;
    fg_tensor lse;
    memset(&lse, 0, sizeof lse);
    lse.data = hl + row0;
    lse.dtype = FG_DTYPE_F32;
    lse.ndim = 3;
    lse.shape[0] = nb, lse.shape[1] = nh, lse.shape[2] = rows;
    lse.stride[0] = nh * sq, lse.stride[1] = sq, lse.stride[2] = 1;
    ref_problem rp = {.q = q, .k = k, .v = v, .softmax_scale = 0.f, .causal = p->causal, .out_dtype = out_dtype_of(p),
                      .fp8_sum_rounded = spec_fp8_sum_rounded(ran)};
    st = ref_check_fwd(&rp, &out, &lse, rep, err);
done:
    free(ho);
    free(hl);
    return st;
}

/* The FLOPs of one forward pass by FlashAttention's convention: 4*b*h*sq*sk*d, half when causal. */
double fwd_flops(const problem *p) {
    return 4.0 * (double)p->batch * (double)p->heads * (double)p->seqlen_q * (double)p->seqlen_k *
           (double)p->head_dim * (p->causal ? 0.5 : 1.0);
}

/* ---- the backward's buffers and check, for `tune` of kind = "bwd" spaces ---- */

void bwd_problem_args(const problem *p, void *q, void *k, void *v, void *o, void *lse, void *dout, void *dq, void *dk,
                      void *dv, fg_bwd_args *a) {
    fg_fwd_args f;
    problem_args(p, q, k, v, o, lse, &f);
    memset(a, 0, sizeof *a);
    a->q = f.q, a->k = f.k, a->v = f.v, a->o = f.o, a->lse = f.lse;
    a->dout = contiguous(dout, p->dtype, p->batch, p->seqlen_q, p->heads, p->head_dim);
    a->dq = contiguous(dq, p->dtype, p->batch, p->seqlen_q, p->heads, p->head_dim);
    a->dk = contiguous(dk, p->dtype, p->batch, p->seqlen_k, p->heads_kv, p->head_dim);
    a->dv = contiguous(dv, p->dtype, p->batch, p->seqlen_k, p->heads_kv, p->head_dim);
    a->causal = p->causal;
}

double bwd_copy_bytes(const problem *p) {
    const double esz = (double)dtype_size(p->dtype);
    const double q = (double)p->batch * (double)p->seqlen_q * (double)p->heads * (double)p->head_dim;
    const double kv = (double)p->batch * (double)p->seqlen_k * (double)p->heads_kv * (double)p->head_dim;
    return esz * (4 * q + 4 * kv) + (double)p->batch * (double)p->heads * (double)p->seqlen_q * 4.0;
}

void bwd_buffers_free(const fg_cuda_api *cu, bwd_buffers *B) {
    CUdeviceptr *slots[5] = {&B->dout, &B->dq, &B->dk, &B->dv, &B->ws};
    for (int i = 0; i < 5; i++)
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
    FG_CU(err, cu->cuMemsetD8(B->dv, 0xFF, B->F.nkv * B->F.esz));
    FG_CU(err, cu->cuCtxSynchronize());
    return FG_OK;
}

fg_status bwd_buffers_init(fg_context *ctx, const problem *p, uint64_t seed, bwd_buffers *B, fg_error *err) {
    memset(B, 0, sizeof *B);
    const fg_cuda_api *cu = ctx->cu;
    if (p->dtype != FG_DTYPE_F16 && p->dtype != FG_DTYPE_BF16)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the backward takes fp16 or bf16, not %s", dtype_name(p->dtype));
    fg_status st = fwd_buffers_init(cu, p, seed, 1, &B->F, err);
    if (st != FG_OK) return st;
    /* O and the LSE the backward reads: the forward of these very inputs (the policy's, or the tuned, variant) */
    if ((st = fg_attention_fwd(ctx, &B->F.dev[0], NULL)) != FG_OK)
        return fg_fail(err, st, "the forward that makes O and the LSE failed: %s", fg_last_error(ctx));
    FG_CU(err, cu->cuCtxSynchronize());
    const size_t nq = B->F.nq, nkv = B->F.nkv, esz = B->F.esz;
    if (!(B->hdo = malloc(nq * esz)))
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for dO (%zu elements)", nq);
    const fg_tensor host_do = contiguous(B->hdo, p->dtype, p->batch, p->seqlen_q, p->heads, p->head_dim);
    if ((st = ref_fill_normal(&host_do, seed * 3 + 3, err)) != FG_OK) return st;
    CUdeviceptr *slots[4] = {&B->dout, &B->dq, &B->dk, &B->dv};
    const size_t sizes[4] = {nq * esz, nq * esz, nkv * esz, nkv * esz};
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
    if (fg_attention_bwd_workspace_size(ctx, &B->dev, &B->ws_bytes) != FG_OK)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the backward problem: %s", fg_last_error(ctx));
    if (B->ws_bytes) {
        CUresult rc = cu->cuMemAlloc(&B->ws, B->ws_bytes); /* 256-byte aligned, as the workspace must be */
        if (rc != CUDA_SUCCESS) {
            B->ws = 0;
            return cuda_api_fail(err, rc, "cuMemAlloc (the backward's workspace)", __FILE__, __LINE__);
        }
        B->dev.workspace = (void *)(uintptr_t)B->ws;
        B->dev.workspace_size = B->ws_bytes;
    }
    return bwd_poison(cu, B, err);
}

fg_status bwd_check(const fg_cuda_api *cu, const bwd_buffers *B, const problem *p, ref_bwd_report *rep, fg_error *err) {
    const size_t nq = B->F.nq, nkv = B->F.nkv, esz = B->F.esz, nlse = B->F.nlse;
    uint8_t *h = malloc(nq * esz * 2 + nkv * esz * 2 + nlse * sizeof(float));
    if (!h) return fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for the gradients to check");
    uint8_t *ho = h, *hdq = ho + nq * esz, *hdk = hdq + nq * esz, *hdv = hdk + nkv * esz, *hl = hdv + nkv * esz;
    const fg_fwd_args *f = &B->F.dev[0];
    struct { void *dst; CUdeviceptr src; size_t bytes; } copies[5] = {
        {ho, (CUdeviceptr)(uintptr_t)f->o.data, nq * esz}, {hdq, B->dq, nq * esz}, {hdk, B->dk, nkv * esz},
        {hdv, B->dv, nkv * esz}, {hl, (CUdeviceptr)(uintptr_t)f->lse.data, nlse * sizeof(float)}};
    for (int i = 0; i < 5; i++) {
        CUresult rc = cu->cuMemcpyDtoH(copies[i].dst, copies[i].src, copies[i].bytes);
        if (rc != CUDA_SUCCESS) {
            free(h);
            return cuda_api_fail(err, rc, "cuMemcpyDtoH (the gradients to check)", __FILE__, __LINE__);
        }
    }
    fg_bwd_args v;
    bwd_problem_args(p, B->F.hq, B->F.hk, B->F.hv, ho, hl, B->hdo, hdq, hdk, hdv, &v);
    ref_bwd_problem rp = {.fwd = {.q = v.q, .k = v.k, .v = v.v, .softmax_scale = 0.f, .causal = p->causal,
                                  .out_dtype = p->dtype},
                          .o = v.o, .d_o = v.dout, .lse = v.lse};
    fg_status st = ref_check_bwd(&rp, &v.dq, &v.dk, &v.dv, rep, err);
    free(h);
    return st;
}
