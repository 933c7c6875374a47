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

// Folds the score block s (MT m-tiles x NT n8-tiles of C fragments) into the running statistics:
// rescales acc (MT x DT n8-tiles of O) and row_sum by exp2(c * (m_old - m_new)), and replaces s by the
// unnormalized probabilities P = exp2(c * s - c * m_new).
template <int MT, int NT, int DT>
__device__ __forceinline__ void fg_online_softmax(float (&s)[MT][NT][4], float (&row_max)[MT][2],
                                                  float (&row_sum)[MT][2], float (&acc)[MT][DT][4],
                                                  float scale_log2) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = row_max[mt][h];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
            mx = fg_quad_max(mx);
            const float base = mx == FG_NEG_INF ? 0.f : mx * scale_log2;
            const float corr = fg_exp2(row_max[mt][h] * scale_log2 - base);
            row_max[mt][h] = mx;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                s[mt][nt][2 * h] = fg_exp2(fmaf(s[mt][nt][2 * h], scale_log2, -base));
                s[mt][nt][2 * h + 1] = fg_exp2(fmaf(s[mt][nt][2 * h + 1], scale_log2, -base));
                sum += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
            }
            row_sum[mt][h] = row_sum[mt][h] * corr + sum;
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                acc[mt][dt][2 * h] *= corr;
                acc[mt][dt][2 * h + 1] *= corr;
            }
        }
    }
}
