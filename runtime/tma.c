/* tma.c: TMA descriptor encoding. The tensor maps (CUtensorMap, through cuTensorMapEncodeTiled) of the
 * caller's [batch, seqlen, heads, head_dim] tensors, boxed and swizzled as the kernels' shared-memory tiles
 * are (templates/common/wgmma.cuh), for the sm_90a kernels and the mma.sync backward's tma=1 variants. */
#include <stdint.h>
#include <string.h>
#include "runtime/dispatch.h"

/* A 4-d tiled tensor map: dims innermost first, byte strides of dims 1..3 (an extent-1 dim is never
 * stepped and gets `unit`, a legal stride), a box of `box_bytes` bytes (128, 64 or 32: one swizzled row) by
 * `rows`, swizzled to match; elements past the dims read as zeros. */
static fg_status encode_map(fg_context *ctx, CUtensorMap *m, fg_dtype dt, void *data, const int64_t dim[4],
                            const int64_t stride_bytes[3], int64_t unit, int box_bytes, int rows, const char *what,
                            fg_error *err) {
    const int64_t es = dtype_size(dt);
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
    const int64_t es = dtype_size(t->dtype);
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

/* The contract is in dispatch.h. */
fg_status tma_encode_maps(fg_context *ctx, fg_tma_params *tm, const fg_tensor *q, const fg_tensor *o,
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
