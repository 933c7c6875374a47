// backward_pre_post.cuh: the backward's first and last kernels, shared by both backward families (the
// mma.sync main kernel, backward_mma.cuh, and the sm_90a one, backward_wgmma.cuh, run between them):
//   fg_bwd_pre_kernel   per query row: D = rowsum(dO * O) and the LSE in the log2 domain (lse * log2 e;
//                       +inf for the padding rows past seqlen_q, so their P is 0) into the workspace;
//                       the fp32 dQ accumulator zeroed; the deterministic mode's semaphores zeroed.
//   fg_bwd_post_kernel  dQ = accumulator * scale in the output dtype; with GQA, dK and dV = the sum over
//                       the query heads of a KV head, in head order (so GQA needs no atomics).
#ifndef FG_BACKWARD_PRE_POST_CUH
#define FG_BACKWARD_PRE_POST_CUH

#include "backward_common.cuh"

// ---- pre: D, lse2, zeroed accumulators ----
// D = rowsum(dO * O) runs over V's head dim (FG_HEAD_DIM_V: O and dO have V's).
extern "C" __global__ void __launch_bounds__(256)
fg_bwd_pre_kernel(const __grid_constant__ fg_bwd_params launch) {
    fg_pdl_launch_dependents(); // the main kernel may launch (its K/V loads overlap this grid's end)
    FG_BWD_PARAMS(launch);
    // FG_VARLEN: the grid covers the longest sequence's rows; this one's are fewer
    if (FG_VARLEN && (int)blockIdx.x * 64 >= fg_bwd_rows_read(p.seqlen_q)) return;
    const int head = blockIdx.y, batch = FG_BWD_BATCH, tid = threadIdx.x;
    const i64 sq_pad = fg_bwd_rows_padded(p.seqlen_q);
    const i64 bh = (i64)batch * p.heads_q + head;
    // 4 threads per row, 64 rows per block.
    const int r = blockIdx.x * 64 + tid / 4, part = tid % 4;
    float d = 0.f;
    if (r < p.seqlen_q) {
        const u16 *o = (const u16 *)p.o + batch * p.o_stride[0] + (i64)r * p.o_stride[1] + head * p.o_stride[2];
        const u16 *dout = (const u16 *)p.dout + batch * p.do_stride[0] + (i64)r * p.do_stride[1] + head * p.do_stride[2];
        for (int c = part * 8; c < FG_HEAD_DIM_V; c += 32) {
            uint4 a = *(const uint4 *)(o + c), b = *(const uint4 *)(dout + c);
            const u32 av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 x = fg_unpack2(av[k]), y = fg_unpack2(bv[k]);
                d = fmaf(x.x, y.x, fmaf(x.y, y.y, d));
            }
        }
    }
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    d += __shfl_xor_sync(0xffffffffu, d, 2);
    if (part == 0) { // the grid covers the rows the main kernel reads (sq_pad, or with dQ^T to its last block)
        // +inf makes P = 0: padding rows, and rows whose LSE is -inf (they saw no key; were such an LSE
        // given for a row that does see keys, exp2(s - (-inf)) would make P infinite). A NaN stays NaN.
        float lse2 = __int_as_float(0x7f800000);
        if (r < p.seqlen_q) {
            const float lse = p.lse[batch * p.lse_stride[0] + head * p.lse_stride[1] + (i64)r * p.lse_stride[2]];
            if (lse != FG_NEG_INF) lse2 = lse * FG_LOG2E;
        }
        p.lse2[bh * sq_pad + r] = lse2;
        p.dsum[bh * sq_pad + r] = d;
    }
    // Zero this block's part of the dQ accumulator's groups (FG_DQ_GROUP_ROWS rows, one contiguous run each) that hold
    // rows below seqlen_q, 16 bytes per store: the post kernel converts no other rows (the rest are added
    // into, never read for output). So the padding costs few stores: at 512 queries with 80-query blocks, 560
    // rows zeroed instead of 576 (+7% pre-kernel time with all zeroed; H200).
    const int zend = ((p.seqlen_q + FG_DQ_GROUP_ROWS - 1) / FG_DQ_GROUP_ROWS * FG_DQ_GROUP_ROWS - (int)blockIdx.x * 64) * (FG_HEAD_DIM_PADDED / 4);
    float4 *acc = (float4 *)(p.dq_accum + (bh * sq_pad + (i64)blockIdx.x * 64) * FG_HEAD_DIM_PADDED);
#pragma unroll
    for (int i = tid; i < 64 * FG_HEAD_DIM_PADDED / 4; i += 256)
        if (i < zend) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (p.dq_sem != 0 && blockIdx.x == 0) {
        const int m_blocks = (int)(sq_pad / FG_BLOCK_M);
        for (int i = tid; i < m_blocks; i += 256) p.dq_sem[bh * m_blocks + i] = 0;
    }
}


// ---- post: dQ in the output dtype; GQA: dK, dV summed over query heads; with sinks, their gradient ----

// FG_SINKS: the rows r0 .. r0 + FG_BW_ROWS - 1 of (batch, head)'s share of d loss / d sink_h =
// -sum_i P_i(sink) D_i, P_i(sink) = exp(sink_h - LSE_i) (the forward's LSE includes the sink), from the pre
// kernel's lse2 (+inf past seqlen_q and for rows without keys: P = 0) and D; one atomic add a warp.
__device__ __forceinline__ void fg_bwd_dsink_add(const fg_bwd_params &p, float *dsink, int head, int batch, int r0,
                                                 int tid) {
    const i64 base = ((i64)batch * p.heads_q + head) * fg_bwd_rows_padded(p.seqlen_q);
    const float sink2 = __ldg(p.sinks + head) * FG_LOG2E;
    float x = 0.f;
    for (int r = tid; r < FG_BW_ROWS; r += 256)
        if (r0 + r < p.seqlen_q) x -= fg_exp2(sink2 - p.lse2[base + r0 + r]) * p.dsum[base + r0 + r];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    if (tid % 32 == 0 && x != 0.f) atomicAdd(dsink + head, x);
}

// The 16-byte unit of the dQ accumulator at float offset 4 u of a block of FG_BW_ROWS rows (fg_dq_index's
// inverse): its first value is (row, col) of the block; in fragment order it holds (row, col), (row, col + 1),
// (row + 8, col), (row + 8, col + 1), with dQ^T (row, col), (row + 1, col), (row, col + 8), (row + 1, col + 8);
// row-major four columns of one row.
__device__ __forceinline__ void fg_dq_unit(u32 u, u32 &row, u32 &col) {
#if FG_BW_DQ_T
    constexpr u32 G = FG_DQ_GROUP_ROWS, W = FG_DQ_GROUP_COLS;
    const u32 o = (4 * u) % (G * FG_HEAD_DIM_PADDED), lane = u % 32, step = (o % (G * W)) / 128;
    row = (4 * u) / (G * FG_HEAD_DIM_PADDED) * G + step % (G / 8) * 8 + (lane % 4) * 2;
    col = o / (G * W) * W + step / (G / 8) * 16 + lane / 4;
#elif FG_DQ_FRAG
    constexpr u32 G = FG_DQ_GROUP_ROWS, W = FG_DQ_GROUP_COLS; // unsigned: the divisions by powers of two are shifts
    const u32 o = (4 * u) % (G * FG_HEAD_DIM_PADDED), lane = u % 32, step = (o % (G * W)) / 128;
    row = (4 * u) / (G * FG_HEAD_DIM_PADDED) * G + step / (W / 8) * 16 + lane / 4;
    col = o / (G * W) * W + step % (W / 8) * 8 + (lane % 4) * 2;
#else
    row = (4 * u) / FG_HEAD_DIM_PADDED;
    col = (4 * u) % FG_HEAD_DIM_PADDED;
#endif
}
// A CTA converts FG_BW_ROWS (64, or 80 with dQ^T) rows of dQ. In every accumulator layout they are one
// contiguous run of FG_BW_ROWS x FG_HEAD_DIM_PADDED floats (fg_dq_index keeps its groups of FG_DQ_GROUP_ROWS
// rows, which divides FG_BW_ROWS, whole), so the CTA reads the run once with 16-byte loads, every 32-byte sector
// by one warp instruction, puts each unit's values (scaled, in the output dtype) into a row-major tile in
// shared memory, and writes the rows' columns below head_dim out in 16-byte runs. The tile's rows are FG_POST_PITCH bytes apart, 4
// banks apart modulo 32: a warp's 32 units of one n8 step (8 rows x 4 column pairs, and 8 rows lower) land
// on 32 banks (dQ^T: pairs of lanes trade values so that each stores whole 4-byte pairs of one row, again on 32
// banks). (The kernel before
// gathered each thread's 8 columns of a row as float2s through fg_dq_index, half of every unit, the other
// half by another warp: 73 us against cuDNN's 58 us for its conversion at head_dim 128, 16384 tokens,
// bf16, H200 profile.)
constexpr int FG_POST_PITCH = FG_HEAD_DIM_PADDED * 2 + 16;

// GQA: rows r0 .. r0 + FG_BW_ROWS - 1 (those below seqlen_k) of dK (WHICH 0) and dV (1), for WHICH from W0 to W1 - 1,
// of KV head `head`: the sum over its query heads' fp32 rows (fg_bwd_store_dkdv's accumulator: dK's plane, then
// dV's, rows of FG_HEAD_DIM and FG_HEAD_DIM_V floats) in head order, in the output dtype. CH: 16-byte units of a row
// (its head dim / 8); one pass for both where they are as wide, else one each.
template <int W0, int W1, int CH>
__device__ __forceinline__ void fg_bwd_post_dkdv_sum(const fg_bwd_params &p, int head, int batch, int r0, int tid) {
    for (int i = tid; i < FG_BW_ROWS * CH; i += 256) {
        const int r = r0 + i / CH, c = (i % CH) * 8;
        if (p.dkv_accum != 0 && head < p.heads_kv && r < p.seqlen_k) {
            const int group = p.heads_q / p.heads_kv;
            const i64 plane = (i64)p.batch * p.heads_q * p.seqlen_k * FG_HEAD_DIM; // dK's (fg_bwd_dv_accum)
#pragma unroll
            for (int which = W0; which < W1; which++) {
                const int w = which == 0 ? FG_HEAD_DIM : FG_HEAD_DIM_V; // floats of an accumulator row
                float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
                for (int hq = head * group; hq < (head + 1) * group; hq++) {
                    const float *a = p.dkv_accum + which * plane + (((i64)batch * p.heads_q + hq) * p.seqlen_k + r) * w + c;
#pragma unroll
                    for (int k = 0; k < 8; k++) sum[k] += a[k];
                }
                u32 out[4];
#pragma unroll
                for (int k = 0; k < 4; k++) out[k] = fg_pack2(sum[2 * k], sum[2 * k + 1]);
                u16 *dst = which == 0 ? (u16 *)p.dk + batch * p.dk_stride[0] + (i64)r * p.dk_stride[1] + head * p.dk_stride[2] + c
                                      : (u16 *)p.dv + batch * p.dv_stride[0] + (i64)r * p.dv_stride[1] + head * p.dv_stride[2] + c;
                *(uint4 *)dst = make_uint4(out[0], out[1], out[2], out[3]);
            }
        }
    }
}
extern "C" __global__ void __launch_bounds__(256)
fg_bwd_post_kernel(const __grid_constant__ fg_bwd_params launch) {
    __shared__ __align__(16) unsigned char tile[FG_BW_ROWS * FG_POST_PITCH];
    fg_pdl_wait(); // the main kernel's dQ (and with GQA dK, dV) is complete
    FG_BWD_PARAMS(launch);
    const int head = blockIdx.y, batch = FG_BWD_BATCH, tid = threadIdx.x, r0 = blockIdx.x * FG_BW_ROWS;
    constexpr int CH = FG_HEAD_DIM / 8; // 8 elements (16 output bytes) per thread step: the columns below head_dim
    if constexpr (FG_SINKS) fg_bwd_dsink_add(p, launch.dsink, head, batch, r0, tid);
    if (r0 < p.seqlen_q) { // the same for the whole CTA
        const float4 *a = (const float4 *)(p.dq_accum + (((i64)batch * p.heads_q + head) * fg_bwd_rows_padded(p.seqlen_q) + r0) * FG_HEAD_DIM_PADDED);
        const float s = p.softmax_scale;
        constexpr int STEPS = FG_BW_ROWS * FG_HEAD_DIM_PADDED / 1024; // 256 units a step
        static_assert(FG_BW_ROWS * FG_HEAD_DIM_PADDED % 1024 == 0, "whole steps");
        float4 xs[STEPS];
        // every load in flight before the stores; none of a unit whose rows are all past seqlen_q (in the last
        // CTA of a (batch, head): at 512 queries and 80-row CTAs, 48 of its 80 rows)
        const int rows = p.seqlen_q - r0;
#pragma unroll
        for (int k = 0; k < STEPS; k++) {
            u32 row, col;
            fg_dq_unit(tid + 256 * k, row, col);
            xs[k] = (int)row < rows ? a[tid + 256 * k] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < STEPS; k++) {
            const float4 x = xs[k];
            u32 row, col;
            fg_dq_unit(tid + 256 * k, row, col);
            unsigned char *const t = tile + row * FG_POST_PITCH + col * 2;
#if FG_BW_DQ_T
            // Lanes l and l ^ 4 hold columns col and col ^ 1 of the same rows: the even column's lane takes row
            // `row` of both, the odd one's row + 1, so each stores two 4-byte pairs (32 banks a warp).
            const bool odd = (tid / 4) % 2;
            const float y0 = __shfl_xor_sync(0xffffffffu, odd ? x.x : x.y, 4);
            const float y1 = __shfl_xor_sync(0xffffffffu, odd ? x.z : x.w, 4);
            unsigned char *const tp = odd ? t + FG_POST_PITCH - 2 : t;
            *(u32 *)tp = odd ? fg_pack2(y0 * s, x.y * s) : fg_pack2(x.x * s, y0 * s);
            *(u32 *)(tp + 16) = odd ? fg_pack2(y1 * s, x.w * s) : fg_pack2(x.z * s, y1 * s);
#elif FG_DQ_FRAG
            *(u32 *)t = fg_pack2(x.x * s, x.y * s);
            *(u32 *)(t + 8 * FG_POST_PITCH) = fg_pack2(x.z * s, x.w * s);
#else
            *(uint2 *)t = make_uint2(fg_pack2(x.x * s, x.y * s), fg_pack2(x.z * s, x.w * s));
#endif
        }
        __syncthreads();
        for (int i = tid; i < FG_BW_ROWS * CH; i += 256) {
            const int r = i / CH, c = (i % CH) * 8;
            if (r0 + r < p.seqlen_q) {
                u16 *dq = (u16 *)p.dq + batch * p.dq_stride[0] + (i64)(r0 + r) * p.dq_stride[1] + head * p.dq_stride[2] + c;
                *(uint4 *)dq = *(const uint4 *)(tile + r * FG_POST_PITCH + c * 2);
            }
        }
    }
    if constexpr (FG_SAME_V) {
        fg_bwd_post_dkdv_sum<0, 2, CH>(p, head, batch, r0, tid);
    } else {
        fg_bwd_post_dkdv_sum<0, 1, CH>(p, head, batch, r0, tid);
        fg_bwd_post_dkdv_sum<1, 2, FG_HEAD_DIM_V / 8>(p, head, batch, r0, tid);
    }
}

#endif // FG_BACKWARD_PRE_POST_CUH
