// forward_wgmma/consumer.cuh: the consumer warpgroups' main-loop steps: the online softmax of one S
// block and, for FP8, P packed as the P.V wgmma's A operand.
#ifndef FG_FORWARD_WGMMA_CONSUMER_CUH
#define FG_FORWARD_WGMMA_CONSUMER_CUH

#include "common/types.cuh"
#include "common/softmax.cuh"
#include "forward_wgmma/layout.cuh"

// The online-softmax step of one S block for this thread's two rows (g and g + 8 of its warp's 16):
// running maximum and sum updated, S replaced by P, and in corr the factor O must be multiplied by. Unlike
// fg_online_softmax it leaves O alone: here the previous block's P V may still be accumulating into it.
// SUM: keep the fp32 row sums (FP8 with FG_PV_SUM: only for the LSE).
// The lazy rescale's allowance (fg_softmax_row's stale, log2 units of P) at 16-bit head_dim above 128, where
// O's rescale is a branch: 1, so P <= 2. FlashAttention-4's 8 (P <= 256) is faster but breaks the error
// bound on rows whose weight sits on a few keys (they lose the exact P = 1 of their largest), and 1 keeps the error within the exact maximum's.
// 0 elsewhere: the 16-bit d <= 128 kernels multiply O every step without a test, and FP8, whose
// P = 2^(8 + stale) must stay below e4m3's 448, is slower with any allowance.
constexpr float FG_STALE = !FG_FP8 && FG_HEAD_DIM > 128 ? 1.f : 0.f;
template <bool SUM>
__device__ __forceinline__ void fg_softmax_stats(float (&s)[1][FG_NT][4], float (&row_max)[1][2],
                                                 float (&row_sum)[1][2], float (&corr)[2], float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; h++)
        corr[h] = fg_softmax_row<FG_NT, SUM>(s[0], h, row_max[0][h], row_sum[0][h], scale_log2, FG_P_SHIFT, FG_STALE);
}


#if FG_FP8
// P as the A operand of the FP8 P.V wgmma (m64 k32): a thread holds, per row, A positions 4t..4t+3 (a[0],
// a[1] for rows g, g + 8) and 16 + 4t..19 + 4t (a[2], a[3]) of a 32-key chunk, while the S accumulator gave
// it keys 8j + 2t and 8j + 2t + 1 of the chunk's n8 groups j = 0..3. Instead of moving P between the quad's
// lanes (two to four shuffles and byte permutes per register), the thread packs its own
// pairs, X_0 | X_1 << 16 and X_2 | X_3 << 16, and the V^T tile's keys are put in the same order in shared
// memory once per stage (fg_vt_reorder_unit): A position 4t + {0,1,2,3} of each 16 holds key 2t, 2t + 1,
// 8 + 2t, 9 + 2t. P.V sums over keys, so any order shared by both operands gives the same product.
// (FlashAttention-3 folds a reordering into the V transpose it does in shared memory; here V^T comes
// transposed by TMA, so the producer warpgroup's idle warps reorder it.)
__device__ __forceinline__ void fg_p_to_fp8(const float (&s)[1][FG_NT][4], int kc, u32 (&a)[4]) {
#pragma unroll
    for (int h = 0; h < 2; h++)
        asm("{ .reg .b16 x0, x1, x2, x3;\n"
            "cvt.rn.satfinite.e4m3x2.f32 x0, %3, %2;\n cvt.rn.satfinite.e4m3x2.f32 x1, %5, %4;\n"
            "cvt.rn.satfinite.e4m3x2.f32 x2, %7, %6;\n cvt.rn.satfinite.e4m3x2.f32 x3, %9, %8;\n"
            "mov.b32 %0, {x0, x1};\n mov.b32 %1, {x2, x3}; }"
            : "=r"(a[h]), "=r"(a[2 + h])
            : "f"(s[0][4 * kc][2 * h]), "f"(s[0][4 * kc][2 * h + 1]), "f"(s[0][4 * kc + 1][2 * h]),
              "f"(s[0][4 * kc + 1][2 * h + 1]), "f"(s[0][4 * kc + 2][2 * h]), "f"(s[0][4 * kc + 2][2 * h + 1]),
              "f"(s[0][4 * kc + 3][2 * h]), "f"(s[0][4 * kc + 3][2 * h + 1]));
}
#endif

#endif // FG_FORWARD_WGMMA_CONSUMER_CUH
