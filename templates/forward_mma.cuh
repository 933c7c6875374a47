// forward_mma.cuh: the FlashAttention-2 forward kernel on the mma.sync path (sm_80 and newer).
//
// Grid: (query blocks, query heads, batch), or for causal (query heads, query blocks, batch) (see
// fg_cta_tile). A CTA owns FG_BLOCK_M query rows of one head; each of its warps owns FG_MT m16 tiles (16 rows each), so softmax statistics never cross warps. K and V stream
// through shared memory in FG_BLOCK_N-key blocks, FG_STAGES deep, loaded with cp.async while the
// previous block is computed. Per key block:
//   S = Q K^T          (mma.m16n8k16, Q and K fragments by ldmatrix from swizzled shared memory)
//   mask               (only on blocks that cross the causal diagonal or the end of the keys: those
//                       run in a separate, masked instance of the block step after the unmasked ones)
//   P = online softmax (fp32, log2 domain; O rescaled when the row maximum grows)
//   O += P V           (P reused from registers as the A operand; V by ldmatrix.trans)
// At the end O /= l (one normalization) and LSE = m * scale + ln(l), both staged through shared memory
// for 16-byte coalesced stores. Every offset into global memory is 64-bit.
//
// FP8 (FG_FP8, sm_89+): the same steps with mma.m16n8k32 on e4m3/e5m2 bytes. Q and K tiles hold 16
// elements per chunk, so a k chunk of the QK^T loop is 32 elements and the loop runs half as many times.
// The PV product needs V with keys as its reduction dimension in memory: the caller gives V key-major
// (V^T), loaded into [head_dim][keys] tiles and read by plain ldmatrix. P must become an A operand whose
// thread holds 4 consecutive keys (4t..4t+3) where S's accumulators hold 2 (2t, 2t+1) per n8 tile: rather
// than shuffling registers, S's columns are computed in a permuted key order (the K rows each lane's
// ldmatrix address points at), so that n8 tiles 2i and 2i+1 of S hold, at columns 2t and 2t+1, keys
// 16i + 4t + {0, 1} and 16i + 4t + {2, 3}. Descales fold into the softmax scale (q, k) and the final
// normalization (v); P is shifted by 2^8 into (0, 256], e4m3's range, before rounding, and the LSE
// takes the 2^8 back out.
#ifndef FG_FORWARD_MMA_CUH
#define FG_FORWARD_MMA_CUH

#include "common/fg_params.h"
#include "common/types.cuh"
#include "common/mma.cuh"
#include "common/cp_async.cuh"
#include "common/softmax.cuh"

constexpr int FG_THREADS = FG_WARPS * 32;
constexpr int FG_MT = FG_BLOCK_M / (16 * FG_WARPS); // m16 tiles per warp
constexpr int FG_NT = FG_SUB_N / 8;                 // n8 tiles of S per m16 tile (one sub-block of keys)
constexpr int FG_DT = FG_HEAD_DIM_PADDED / 8;       // n8 tiles of O per m16 tile
constexpr u32 FG_Q_BYTES = FG_BLOCK_M * FG_HEAD_DIM_PADDED * FG_ELEM_BYTES;
constexpr u32 FG_KV_BYTES = FG_BLOCK_N * FG_HEAD_DIM_PADDED * FG_ELEM_BYTES;
constexpr int FG_O_CHUNKS = FG_HEAD_DIM_PADDED / 8;      // 16-byte chunks of a 16-bit O row
constexpr int FG_VT_CHUNKS = FG_BLOCK_N / 16;           // FP8: chunks of a V^T tile row (keys)
constexpr float FG_P_SHIFT = FG_FP8 ? 8.f : 0.f;         // FP8: P = 2^8 * exp2(...) fills e4m3's range

// The key (relative to its block) of the S accumulator at n8 tile nt, column 2t + i, of thread t. 16-bit:
// the natural order; FP8: the permuted order described above.
__device__ __forceinline__ int fg_s_key(int nt, int t, int i) {
    return FG_FP8 ? 16 * (nt / 2) + 4 * t + 2 * (nt % 2) + i : 8 * nt + 2 * t + i;
}

// x, which the compiler can no longer see is x: what it computes is recomputed, not kept live from before.
__device__ __forceinline__ u32 fg_opaque(u32 x) {
    asm volatile("" : "+r"(x));
    return x;
}

// This CTA's tile: query block m_block of (head, batch). The heaviest blocks (the last query rows see the
// most keys) start first. Non-causal, and causal with p.causal_group 0: the grid is (query blocks, heads,
// batch), query blocks vary fastest (CTAs running together share K/V in L2) and go last to first. Causal
// with p.causal_group > 0 (the host's choice, runtime/forward.c): the grid is (heads, query blocks, batch), the
// order of fg_tile_order with a group of one batch's heads: all their last query blocks, then all their
// second-to-last, and so on. Both read the block index registers alone, which the compiler re-reads where
// it needs them (mapping pairs to groups of other sizes takes a division, and the values it leaves cost
// the largest tiles spills); head and batch are taken again in the epilogue (group passed through
// fg_opaque) rather than kept live across the key loop.
__device__ __forceinline__ void fg_cta_tile(int group, int &m_block, int &head, int &batch) {
    const bool grouped = FG_CAUSAL && group > 0;
    m_block = grouped ? gridDim.y - 1 - blockIdx.y : gridDim.x - 1 - blockIdx.x;
    head = grouped ? blockIdx.x : blockIdx.y;
    batch = blockIdx.z;
}

extern "C" __global__ void __launch_bounds__(FG_THREADS, 1)
fg_attention_fwd_kernel(const __grid_constant__ fg_fwd_params p) {
    extern __shared__ __align__(128) unsigned char fg_smem[];
    int m_block, head, batch;
    fg_cta_tile(p.causal_group, m_block, head, batch);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int kv_head = head / (p.heads_q / p.heads_kv);
    const int m0 = m_block * FG_BLOCK_M;
    const int sq = p.seqlen_q, sk = p.seqlen_k;

    const fg_in_t *q = (const fg_in_t *)p.q + batch * p.q_stride[0] + (i64)m0 * p.q_stride[1] + head * p.q_stride[2];
    const fg_in_t *k = (const fg_in_t *)p.k + batch * p.k_stride[0] + kv_head * p.k_stride[2];
    const fg_in_t *v = (const fg_in_t *)p.v + batch * p.v_stride[0] + kv_head * p.v_stride[2];

    // Softmax scale (log2 domain and natural) and the factor O takes at the end: FP8 descales fold in.
    float scale_log2 = p.scale_log2, scale_ln = p.softmax_scale, o_factor = 1.f;
    if constexpr (FG_FP8) {
        float qk = 1.f;
        if (p.q_descale) qk *= p.q_descale[batch * p.q_descale_stride[0] + kv_head * p.q_descale_stride[1]];
        if (p.k_descale) qk *= p.k_descale[batch * p.k_descale_stride[0] + kv_head * p.k_descale_stride[1]];
        if (p.v_descale) o_factor = p.v_descale[batch * p.v_descale_stride[0] + kv_head * p.v_descale_stride[1]];
        scale_log2 *= qk;
        scale_ln *= qk;
    }

    int n_blocks, n_unmasked;
    fg_key_blocks(m0, sq, sk, n_blocks, n_unmasked);

    const u32 s_q = fg_smem_addr(fg_smem);
    const u32 s_k = s_q + FG_Q_BYTES;
    const u32 s_v = s_k + FG_STAGES * FG_KV_BYTES;

    // Prologue: Q with the first K/V block in group 0, then blocks 1 .. STAGES-2, one group each.
    fg_tile_loader<FG_BLOCK_N, FG_THREADS> k_loader;
#if FG_FP8
    fg_vt_loader<FG_BLOCK_N, FG_THREADS> v_loader;
#else
    fg_tile_loader<FG_BLOCK_N, FG_THREADS> v_loader;
#endif
    // The row stride of V's tiles: rows of head dims (V^T, FP8) or rows of keys. Read from the parameters
    // at each use, like the other strides, so it holds no register.
#define FG_V_ROWS (FG_FP8 ? p.v_dstride : p.v_stride[1])
    {
        fg_tile_loader<FG_BLOCK_M, FG_THREADS> q_loader;
        q_loader.init(q, p.q_stride[1], tid);
        q_loader.load(s_q, sq - m0, p.q_stride[1]);
    }
    k_loader.init(k, p.k_stride[1], tid);
    v_loader.init(v, FG_V_ROWS, tid);
    if constexpr (FG_STAGES == 1) { // one K and one V buffer: Q with the first K in group 0, V follows in the step
        if (n_blocks > 0) k_loader.load(s_k, sk, p.k_stride[1]);
        fg_cp_async_commit();
    }
#pragma unroll
    for (int st = 0; st < FG_STAGES - 1; st++) {
        if (st < n_blocks) {
            k_loader.load(s_k + st * FG_KV_BYTES, sk - st * FG_BLOCK_N, p.k_stride[1]);
            v_loader.load(s_v + st * FG_KV_BYTES, sk - st * FG_BLOCK_N, FG_V_ROWS);
        }
        fg_cp_async_commit();
    }

    float acc[FG_MT][FG_DT][4];
    float row_max[FG_MT][2], row_sum[FG_MT][2];
#pragma unroll
    for (int mt = 0; mt < FG_MT; mt++) {
#pragma unroll
        for (int dt = 0; dt < FG_DT; dt++) acc[mt][dt][0] = acc[mt][dt][1] = acc[mt][dt][2] = acc[mt][dt][3] = 0.f;
        row_max[mt][0] = row_max[mt][1] = FG_NEG_INF;
        row_sum[mt][0] = row_sum[mt][1] = 0.f;
    }
    const int g = lane / 4, t = lane % 4;
    const int warp_row0 = warp * FG_MT * 16; // first row of this warp inside the block
    // ldmatrix lanes (lanes 8i..8i+7 address matrix i, which lands in register i):
    //   Q, the A operand: rows lane%16, chunk lane/16: matrices (rows 0-7, k 0-7), (8-15, 0-7),
    //     (0-7, 8-15), (8-15, 8-15) are a[0..3] in order;
    //   K, B operands of two n8 tiles: rows lane%8 + 8*(lane/16), chunk (lane/8)%2: registers {0, 1}
    //     are keys 0-7 (k 0-7, 8-15) and {2, 3} keys 8-15, each pair consecutive as the MMA wants;
    //   V, transposed B operands: rows lane%8 + 8*((lane/8)%2) = lane%16, chunk lane/16 (Q's offsets):
    //     registers {0, 1} are d 0-7 (keys 0-7, 8-15) and {2, 3} d 8-15.
    //   FP8: K rows in the permuted key order (lane%8 -> 4 * (lane%8 / 2) + lane%2, plus 2 for the second n8
    //     tile); V^T, the B operand of P.V, as K is for 16 bits (rows = head dims, chunks = keys).
    const fg_frag_offsets qv_off = fg_frag_offsets_make(lane % 16, lane / 16);
    const int k_row = FG_FP8 ? 4 * ((lane % 8) / 2) + 2 * (lane / 16) + lane % 2 : lane % 8 + (lane / 16) * 8;
    const fg_frag_offsets k_off = fg_frag_offsets_make(k_row, (lane / 8) % 2);
#if FG_FP8
    const fg_frag_offsets_t<FG_VT_CHUNKS> vt_off =
        fg_frag_offsets_make<FG_VT_CHUNKS>(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
#endif
    const u32 s_q_warp = s_q + (u32)(warp_row0 * FG_SLAB_CHUNKS * 16); // this warp's rows (offsets are linear in row)

    int stage = 0; // the shared-memory stage of block j; block j + STAGES - 1 goes to the one before it

    // One key block: wait for its K/V, prefetch a later block, S = Q K^T, (mask), softmax, O += P V.
    // (Tried and dropped: letting block 0's S start before V0 lands, as FlashAttention-2
    // does, through a `j == 0` branch and a second barrier in this step: head_dim 256 ran 9-11% slower at
    // every length, the branch splitting the step as the rescale branch in softmax.cuh would. Also dropped:
    // skipping, in masked blocks, the 16-key QK^T and PV steps past the last key any row of the warp sees
    // (a warp-uniform branch per step): causal ran 1-5% slower at 2k-16k (the last warp, which does all the
    // steps, lost the overlap of its ldmatrix with the MMAs), non-causal head_dim 256 gained 0.5% at 2k and
    // lost 1.5% at 512-1k. And peeling block 0 into its own step so its S starts before V0 lands: +0.1% at head_dim 256 and 4 bytes
    // of spills at 128 x 64; the one-stage pipeline below gives every block that overlap instead.)
    auto block_step = [&](int j, auto masked) {
        // Block j has landed for this thread; the barrier makes it visible to all, and tells everyone
        // that block j-1's buffers are free for the prefetch below.
        // One stage (FG_STAGES 1, FlashAttention-2's pipeline for large head dims, where two stages would
        // leave room for one CTA an SM): only K_j has landed; V_j loads into the one V buffer (every warp
        // is past P V_{j-1}) while S_j is computed, and K_{j+1} into the one K buffer while P V_j is.
        fg_cp_async_wait<FG_STAGES == 1 ? 0 : FG_STAGES - 2>();
        __syncthreads();
        if constexpr (FG_STAGES == 1) {
            v_loader.load(s_v, sk - j * FG_BLOCK_N, FG_V_ROWS);
            fg_cp_async_commit();
        } else {
            const int jn = j + FG_STAGES - 1;
            const int prefetch_stage = stage == 0 ? FG_STAGES - 1 : stage - 1;
            if (jn < n_blocks) {
                k_loader.load(s_k + prefetch_stage * FG_KV_BYTES, sk - jn * FG_BLOCK_N, p.k_stride[1]);
                v_loader.load(s_v + prefetch_stage * FG_KV_BYTES, sk - jn * FG_BLOCK_N, FG_V_ROWS);
            }
            fg_cp_async_commit();
        }
        const u32 sk_j = s_k + stage * FG_KV_BYTES;
        const u32 sv_j = s_v + stage * FG_KV_BYTES;
        stage = stage == FG_STAGES - 1 ? 0 : stage + 1;

        // The block's keys in sub-blocks of FG_SUB_N (the emitter's choice: the whole block when its S fits
        // the registers beside O), each a full step of the online softmax; one barrier serves them all.
#pragma unroll
        for (int sb = 0; sb < FG_BLOCK_N / FG_SUB_N; sb++) {
            const int key0 = sb * FG_SUB_N; // the sub-block's first key in the block
            // Opaque tile bases per sub-block: otherwise the compiler computes later sub-blocks' fragment
            // addresses ahead and holds them, which spills (128x64 at head_dim 128: 16 bytes).
            const u32 sk_s = FG_SUB_N < FG_BLOCK_N ? fg_opaque(sk_j) : sk_j;
            const u32 sv_s = FG_SUB_N < FG_BLOCK_N ? fg_opaque(sv_j) : sv_j;

            // S = Q K^T
            float s[FG_MT][FG_NT][4];
#pragma unroll
            for (int mt = 0; mt < FG_MT; mt++)
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < FG_HEAD_DIM_PADDED * FG_ELEM_BYTES / 32; kk++) {
                u32 qf[FG_MT][4];
#pragma unroll
                for (int mt = 0; mt < FG_MT; mt++)
                    fg_ldmatrix_x4(qf[mt], fg_frag_addr<FG_BLOCK_M>(s_q_warp, qv_off, mt * 16, kk));
#pragma unroll
                for (int n2 = 0; n2 < FG_NT / 2; n2++) {
                    u32 kf[4];
                    fg_ldmatrix_x4(kf, fg_frag_addr<FG_BLOCK_N>(sk_s, k_off, key0 + n2 * 16, kk));
#pragma unroll
                    for (int mt = 0; mt < FG_MT; mt++) {
                        fg_mma_qk(s[mt][2 * n2], qf[mt], kf[0], kf[1]);
                        fg_mma_qk(s[mt][2 * n2 + 1], qf[mt], kf[2], kf[3]);
                    }
                }
            }

            if constexpr (decltype(masked)::value) {
                // Per row, the first key (relative to this thread's first, fg_s_key(0, t, 0)) that must be masked.
#pragma unroll
                for (int mt = 0; mt < FG_MT; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int row = m0 + warp_row0 + mt * 16 + g + h * 8;
                        const int limit =
                            (FG_CAUSAL ? min(sk, row + sk - sq + 1) : sk) - j * FG_BLOCK_N - key0 - fg_s_key(0, t, 0);
#pragma unroll
                        for (int nt = 0; nt < FG_NT; nt++) {
                            if (fg_s_key(nt, 0, 0) >= limit) s[mt][nt][2 * h] = FG_NEG_INF;
                            if (fg_s_key(nt, 0, 1) >= limit) s[mt][nt][2 * h + 1] = FG_NEG_INF;
                        }
                    }
            }

            fg_online_softmax<FG_MT, FG_NT, FG_DT>(s, row_max, row_sum, acc, scale_log2, FG_P_SHIFT);
            if constexpr (FG_STAGES == 1) {
                // V_j has landed (the barrier shows it to all), and once every warp is past the last
                // sub-block's S, K_j's buffer takes K_{j+1}.
                if (sb == 0) {
                    fg_cp_async_wait<0>();
                    __syncthreads();
                }
                if (sb == FG_BLOCK_N / FG_SUB_N - 1) {
                    if (sb > 0) __syncthreads();
                    if (j + 1 < n_blocks) k_loader.load(s_k, sk - (j + 1) * FG_BLOCK_N, p.k_stride[1]);
                    fg_cp_async_commit();
                }
            }

#if FG_FP8
            // O += P V with P in e4m3: a 32-key chunk kc is n8 tiles 4kc..4kc+3 of S, whose permuted columns
            // give this thread keys 4t..4t+3 (tiles 4kc, 4kc+1) and 16+4t.. (tiles 4kc+2, 4kc+3).
            u32 pf[FG_MT][FG_SUB_N / 32][4];
#pragma unroll
            for (int mt = 0; mt < FG_MT; mt++)
#pragma unroll
                for (int kc = 0; kc < FG_SUB_N / 32; kc++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        pf[mt][kc][h] = fg_pack4_e4m3(s[mt][4 * kc][2 * h], s[mt][4 * kc][2 * h + 1],
                                                      s[mt][4 * kc + 1][2 * h], s[mt][4 * kc + 1][2 * h + 1]);
                        pf[mt][kc][2 + h] = fg_pack4_e4m3(s[mt][4 * kc + 2][2 * h], s[mt][4 * kc + 2][2 * h + 1],
                                                          s[mt][4 * kc + 3][2 * h], s[mt][4 * kc + 3][2 * h + 1]);
                    }
#pragma unroll
            for (int kc = 0; kc < FG_SUB_N / 32; kc++) {
#pragma unroll
                for (int d2 = 0; d2 < FG_DT / 2; d2++) {
                    u32 vf[4];
                    fg_ldmatrix_x4(vf, fg_frag_addr<FG_HEAD_DIM_PADDED>(sv_s, vt_off, d2 * 16, key0 / 32 + kc));
#pragma unroll
                    for (int mt = 0; mt < FG_MT; mt++) {
                        fg_mma_16832_fp8<0, FG_FP8_E5M2>(acc[mt][2 * d2], pf[mt][kc], vf[0], vf[1]);
                        fg_mma_16832_fp8<0, FG_FP8_E5M2>(acc[mt][2 * d2 + 1], pf[mt][kc], vf[2], vf[3]);
                    }
                }
            }
#else
            // O += P V. P is packed to 16 bits first, straight from the S fragments (which frees S's registers).
            u32 pf[FG_MT][FG_SUB_N / 16][4];
#pragma unroll
            for (int mt = 0; mt < FG_MT; mt++)
#pragma unroll
                for (int kk = 0; kk < FG_SUB_N / 16; kk++) fg_pack_a(s[mt][2 * kk], s[mt][2 * kk + 1], pf[mt][kk]);
#pragma unroll
            for (int kk = 0; kk < FG_SUB_N / 16; kk++) {
#pragma unroll
                for (int d2 = 0; d2 < FG_DT / 2; d2++) {
                    u32 vf[4];
                    fg_ldmatrix_x4_trans(vf, fg_frag_addr<FG_BLOCK_N>(sv_s, qv_off, key0 + kk * 16, d2));
#pragma unroll
                    for (int mt = 0; mt < FG_MT; mt++) {
                        fg_mma_16816(acc[mt][2 * d2], pf[mt][kk], vf[0], vf[1]);
                        fg_mma_16816(acc[mt][2 * d2 + 1], pf[mt][kk], vf[2], vf[3]);
                    }
                }
            }
#endif
        } // sub-blocks
    };

    int j = 0;
    for (; j < n_unmasked; j++) block_step(j, fg_bool<false>{});
    for (; j < n_blocks; j++) block_step(j, fg_bool<true>{});

    // Epilogue. Drain the (empty) trailing cp.async groups and make sure every warp is done with Q's
    // shared memory before it is reused for O.
    fg_cp_async_wait<0>();
    __syncthreads();
    float lse[FG_MT][2]; // the rows' LSE, stored below once O has left the registers
#pragma unroll
    for (int mt = 0; mt < FG_MT; mt++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float l = fg_quad_sum(row_sum[mt][h]);
            const float inv = l > 0.f ? o_factor / l : 0.f; // a row with nothing to attend gives O = 0
            const int r = warp_row0 + mt * 16 + g + h * 8;
#pragma unroll
            for (int dt = 0; dt < FG_DT; dt++) {
                const u32 packed = fg_pack2(acc[mt][dt][2 * h] * inv, acc[mt][dt][2 * h + 1] * inv);
                const u32 addr = s_q + fg_tile_offset<FG_O_CHUNKS>(r, dt, FG_BLOCK_M) + t * 4;
                asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(packed));
            }
            lse[mt][h] = fg_row_lse(l, row_max[mt][h], scale_ln, FG_P_SHIFT);
        }
    }
    if constexpr (FG_CAUSAL) { // recomputed, not kept (fg_cta_tile)
        int m_block_again;
        fg_cta_tile((int)fg_opaque(p.causal_group), m_block_again, head, batch);
    }
    if (p.lse != 0 && t == 0) {
#pragma unroll
        for (int mt = 0; mt < FG_MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = warp_row0 + mt * 16 + g + h * 8;
                if (m0 + r < sq)
                    p.lse[batch * p.lse_stride[0] + head * p.lse_stride[1] + (i64)(m0 + r) * p.lse_stride[2]] = lse[mt][h];
            }
    }
    __syncthreads();
    u16 *o = (u16 *)p.o + batch * p.o_stride[0] + (i64)m0 * p.o_stride[1] + head * p.o_stride[2];
#pragma unroll
    for (int i = tid; i < FG_BLOCK_M * FG_O_CHUNKS; i += FG_THREADS) {
        const int r = i / FG_O_CHUNKS, c = i % FG_O_CHUNKS;
        if (m0 + r < sq && c * 8 < FG_HEAD_DIM) {
            u32 x0, x1, x2, x3;
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                         : "r"(s_q + fg_tile_offset<FG_O_CHUNKS>(r, c, FG_BLOCK_M)));
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                         ::"l"(o + (i64)r * p.o_stride[1] + c * 8), "r"(x0), "r"(x1), "r"(x2), "r"(x3) : "memory");
        }
    }
}

#endif // FG_FORWARD_MMA_CUH
