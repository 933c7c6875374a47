// softmax.cuh: the online softmax of the forward pass (FlashAttention-2), in the log2 domain.
//
// Each thread holds, per m16 tile, two query rows (g and g+8) of the score block S, spread over the four
// threads of a quad (same g). Per row it keeps m, the running maximum of the raw scores, and l, its
// share of the running sum of exp2(c * (s - m)) with c = softmax_scale * log2(e). The O accumulator is
// rescaled when m grows; O is divided by l once, at the end.
// A row that has seen only masked (-inf) scores keeps m = -inf; its exponent base is taken as 0 so that
// exp2(-inf - 0) = 0 and nothing becomes NaN.

__device__ __forceinline__ float fg_quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float fg_quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Folds the score block s (MT m-tiles x NT n8-tiles of C fragments) into the running statistics and
// replaces s by the unnormalized probabilities P = exp2(c * s - c * m + shift) (shift 8 on the FP8 path,
// so P fills e4m3's range; 0 otherwise: l carries the same factor, which the final O / l cancels).
//
// O (acc) and l are rescaled by exp2(c * (m_old - m_new)) only in warps where some row's maximum grew:
// after the first blocks of a row the maximum rarely moves, and skipping a multiply by exactly 1 changes
// no bit. (FlashAttention-4 goes further and keeps a stale maximum until it is 2^8 behind; measured here
// that moved fp16 results off the low-precision reference by more than the tolerance rule allows on one
// shape of the GPU suite, so flashgen keeps the exact maximum.)
template <int MT, int NT, int DT>
__device__ __forceinline__ void fg_online_softmax(float (&s)[MT][NT][4], float (&row_max)[MT][2],
                                                  float (&row_sum)[MT][2], float (&acc)[MT][DT][4],
                                                  float scale_log2, float shift) {
    float corr[MT][2];
    bool grew = false;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = row_max[mt][h];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
            mx = fg_quad_max(mx);
            const float m_old = row_max[mt][h];
            const bool grow = mx > m_old;
            const float m = grow ? mx : m_old;
            corr[mt][h] = grow ? fg_exp2((m_old - mx) * scale_log2) : 1.f; // exp2(-inf) = 0 for a first max
            grew |= grow;
            row_max[mt][h] = m;
            const float base = (m == FG_NEG_INF ? 0.f : m * scale_log2) - shift;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                s[mt][nt][2 * h] = fg_exp2(fmaf(s[mt][nt][2 * h], scale_log2, -base));
                s[mt][nt][2 * h + 1] = fg_exp2(fmaf(s[mt][nt][2 * h + 1], scale_log2, -base));
                sum += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
            }
            row_sum[mt][h] = row_sum[mt][h] * corr[mt][h] + sum;
        }
    }
    // Warp-uniform branch: the quad reductions made `grow` equal across a row's four threads, and one
    // row growing anywhere in the warp sends the whole warp through the rescale. With one m16 tile per
    // warp the branch costs more than it saves: it splits the block step in two, so ptxas can no longer
    // hoist the V fragment loads above the softmax (H200, 2026-11-29: d256 128x64 8 warps 293 -> 325
    // TFLOP/s with the branch removed; d128 causal 128x64 4 warps 302 -> 329 with it kept).
    if (MT == 1 || __any_sync(0xffffffffu, grew)) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                acc[mt][dt][0] *= corr[mt][0];
                acc[mt][dt][1] *= corr[mt][0];
                acc[mt][dt][2] *= corr[mt][1];
                acc[mt][dt][3] *= corr[mt][1];
            }
    }
}
