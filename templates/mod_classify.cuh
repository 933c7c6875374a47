// mod_classify.cuh: a custom mask's block map (fg_mod_aux.map, fg_params.h), for masks that read aux arrays, whose
// blocks intervals cannot settle. The verdict of each block of FG_MAP_BLOCK query rows by FG_MAP_BLOCK keys of each
// sequence (and query head, where the mask reads it): the interval verdict (fg_user_mask_block) where it settles
// the block, else fg_user_mask at every position the block holds within the sequence: hidden when every one is
// hidden, kept when every one is kept, mixed otherwise (also where one goes bad: the attention kernel then
// evaluates the mask itself, and its NaN reaches O), and each row block's span of key blocks not hidden and each key
// block's span of row blocks (fg_params.h). Included after the kernel family by a variant whose mod has such a mask
// (FG_USER_MASK_MAP); each warp takes one block.
#ifndef FG_MOD_CLASSIFY_CUH
#define FG_MOD_CLASSIFY_CUH

#include "common/fg_params.h"
#include "common/types.cuh"

// (128 threads a CTA; __maxnreg__: in a module whose attention kernel moves registers by setmaxnreg, ptxas held this
// kernel to 32 registers under __launch_bounds__(128) and spilled 4 bytes)
extern "C" __global__ void __maxnreg__(64) fg_mask_map_kernel(const __grid_constant__ fg_mask_map_params p) {
    const int lane = (int)threadIdx.x % 32, cb = (int)blockIdx.x * 4 + (int)threadIdx.x / 32, rb = (int)blockIdx.y;
    const int heads = p.aux.map_heads, b = (int)blockIdx.z / heads, h = (int)blockIdx.z % heads;
    if (cb >= p.aux.map_cols) return;
    int q0 = 0, sq = p.seqlen_q, k0 = 0, sk = p.seqlen_k;
    if (p.cu_seqlens_q) fg_seq_span(p.cu_seqlens_q, b, p.total_q, q0, sq);
    if (p.cu_seqlens_k) fg_seq_span(p.cu_seqlens_k, b, p.total_k, k0, sk);
    if (p.seqused_k) sk = min(max(__ldg(p.seqused_k + b), 0), sk);
    const int r0 = rb * FG_MAP_BLOCK, c0 = cb * FG_MAP_BLOCK;
    unsigned char *const out = (unsigned char *)p.aux.map + (((long long)b * heads + h) * p.aux.map_rows + rb) * p.aux.map_cols + cb;
    if (r0 >= sq || c0 >= sk) { // no attention kernel reads it
        if (lane == 0) *out = FG_IV_MIXED;
        return;
    }
    const int rows = min(FG_MAP_BLOCK, sq - r0), cols = min(FG_MAP_BLOCK, sk - c0), off = sk - sq;
    int verdict = fg_user_mask_block(b, h, h, r0 + off, r0 + rows - 1 + off, c0, c0 + cols - 1);
    if (verdict == FG_IV_MIXED) {
        bool kept = false, hidden = false;
        // row by row, the lanes across the row's keys (no division a position); settled mixed: stop
        for (int r = 0; r < rows; r++) {
            const int q = r0 + r + off;
#pragma unroll
            for (int c0l = 0; c0l < FG_MAP_BLOCK; c0l += 32) {
                const int kv = c0 + c0l + lane;
                if (c0l + lane < cols) {
                    const float keep = fg_user_mask(b, h, q, kv, (float)(q - kv), (float)kv, 0.f, p.aux); // 0, -inf or NaN
                    kept |= keep == 0.f;
                    hidden |= keep == FG_NEG_INF;
                    if (keep != keep) kept = hidden = true; // bad: mixed
                }
            }
            if ((r & 3) == 3 && __any_sync(~0u, kept) && __any_sync(~0u, hidden)) break; // (the warp's lanes step together)
        }
        kept = __any_sync(~0u, kept), hidden = __any_sync(~0u, hidden);
        verdict = kept && hidden ? FG_IV_MIXED : kept ? FG_IV_KEPT : FG_IV_HIDDEN;
    }
    if (lane == 0) {
        *out = (unsigned char)verdict;
        if (verdict != FG_IV_HIDDEN) { // the spans of its row block and key block (fg_params.h)
            int *const row = (int *)p.aux.span_rows + 2 * (((long long)b * heads + h) * p.aux.map_rows + rb);
            int *const key = (int *)p.aux.span_cols + 2 * (((long long)b * heads + h) * p.aux.map_cols + cb);
            atomicMin(row, cb), atomicMin(row + 1, 0x7ffffffe - cb);
            atomicMin(key, rb), atomicMin(key + 1, 0x7ffffffe - rb);
        }
    }
}

#endif // FG_MOD_CLASSIFY_CUH
