// softmax.cuh: the online softmax of the forward pass (FlashAttention-2), in the log2 domain.
//
// Each thread holds, per m16 tile, two query rows (g and g+8) of the score block S, spread over the four
// threads of a quad (same g). Per row it keeps m, the running maximum of the raw scores, and l, its
// share of the running sum of exp2(c * (s - m)) with c = softmax_scale * log2(e). The O accumulator is
// rescaled when m grows; O is divided by l once, at the end.
// A row that has seen only masked (-inf) scores keeps m = -inf; its exponent base is taken as 0 so that
// exp2(-inf - 0) = 0 and nothing becomes NaN.
#ifndef FG_COMMON_SOFTMAX_CUH
#define FG_COMMON_SOFTMAX_CUH

#include "common/types.cuh"

__device__ __forceinline__ float fg_quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float fg_quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// One row's step of the online softmax: the row is element pair h (0: row g, 1: row g + 8) of the NT
// n8 tiles of s, spread over a quad. Updates the running maximum m and sum l, replaces the row's scores
// by P = exp2(c * s - c * m + shift), and returns the factor O must take (exp2(c * (m_old - m)), or 1
// when m did not grow; a NaN maximum never "grows", so the NaN stays in P and reaches l).
// SUM false: the row sum is left to the caller (the sm_90a FP8 kernel takes it from the P.V product).
// stale > 0 (a compile-time constant at every call): the maximum in use moves only when the block's exceeds
// it by more than 2^stale in P (FlashAttention-4's lazy rescale), so P may reach 2^(stale + shift) and
// corr is 1, skipping O's rescale, in most steps after a row's first blocks. m is only the exponent's
// base: l and O carry the same factor and the LSE is taken from the m in use. Only the rounding moves:
// a row's largest P is no longer exactly 1 (forward_wgmma.cuh FG_STALE says what that costs).
// PEERS: the block's row is spread over warps (the serving kernel's wide variants); peers is the largest score
// the others hold, so that every warp of the row takes the same maximum.
template <int NT, bool SUM = true, bool PEERS = false>
__device__ __forceinline__ float fg_softmax_row(float (&s)[NT][4], int h, float &row_max, float &row_sum,
                                                float scale_log2, float shift, float stale = 0.f,
                                                float peers = FG_NEG_INF) {
    float mx = row_max;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
    mx = fg_quad_max(mx);
    if (PEERS) mx = fmaxf(mx, peers);
    const float m_old = row_max;
    const bool grow = mx > m_old && (stale == 0.f || m_old == FG_NEG_INF || (mx - m_old) * scale_log2 > stale);
    const float m = grow ? mx : m_old;
    const float corr = grow ? fg_exp2((m_old - mx) * scale_log2) : 1.f; // exp2(-inf) = 0 for a first max
    row_max = m;
    const float base = (m == FG_NEG_INF ? 0.f : m * scale_log2) - shift;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        s[nt][2 * h] = fg_exp2(fmaf(s[nt][2 * h], scale_log2, -base));
        s[nt][2 * h + 1] = fg_exp2(fmaf(s[nt][2 * h + 1], scale_log2, -base));
        if (SUM) sum += s[nt][2 * h] + s[nt][2 * h + 1];
    }
    if (SUM) row_sum = row_sum * corr + sum;
    return corr;
}

// The natural-log LSE of a finished row: m * scale + ln(l) - shift * ln(2); -inf for a row that saw no
// key (l = 0); NaN when a NaN input reached the row (l NaN).
__device__ __forceinline__ float fg_row_lse(float l, float row_max, float scale_ln, float shift) {
    return l > 0.f ? row_max * scale_ln + (fg_log2(l) - shift) * 0.69314718055994531f : (l == 0.f ? FG_NEG_INF : l);
}

// The key blocks a query block starting at row m0 needs: all of them, or when causal up to its last
// row's diagonal (query i sees keys j <= i + sk - sq, the mask aligned to the bottom-right corner); and
// how many leading ones no row needs masked (wholly inside the keys and, when causal, at or left of the
// first row's diagonal).
__device__ __forceinline__ void fg_key_blocks(int m0, int sq, int sk, int &n_blocks, int &n_unmasked) {
    int n_end = sk;
    if (FG_CAUSAL) n_end = min(n_end, min(m0 + FG_BLOCK_M, sq) + sk - sq);
    n_blocks = n_end > 0 ? (n_end + FG_BLOCK_N - 1) / FG_BLOCK_N : 0;
    n_unmasked = sk / FG_BLOCK_N;
    if (FG_CAUSAL) n_unmasked = min(n_unmasked, max(0, m0 + sk - sq + 1) / FG_BLOCK_N);
    n_unmasked = min(n_unmasked, n_blocks);
}

// The order of the tiles (query block m_block of (head, batch) pair hb = head + heads * batch): tile
// `index` of M * HB, in the order the hardware (or a persistent CTA's stride) starts them. Non-causal
// tiles cost the same; they go head by head, so CTAs running together share K/V in L2. Causal tiles
// cost in proportion to m_block + 1: the heaviest must start first, or the last wave waits on a long
// tile started late. Pairs are taken in groups of `group` (the host's choice, p.causal_group), and
// within a group all pairs' longest query blocks come before any pair's next: with group 1 that is the
// per-head order (a long tile of the last head starts when fewer than M tiles remain), with a larger
// group the long tiles of the last group start earlier, while the group's K/V still fit in L2.
// 32-bit: the host sets group 1 unless M * HB <= INT32_MAX.
__device__ __forceinline__ void fg_tile_order(int index, int M, int HB, int group, int &m_block, int &hb) {
    if (!FG_CAUSAL || group <= 1) {
        m_block = M - 1 - index % M;
        hb = index / M;
        return;
    }
    const int span = group * M, first = index / span, within = index - first * span;
    const int size = min(group, HB - first * group); // the last group may be smaller
    m_block = M - 1 - within / size;
    hb = first * group + within % size;
}

// Folds the score block s (MT m-tiles x NT n8-tiles of C fragments) into the running statistics and
// replaces s by the unnormalized probabilities P = exp2(c * s - c * m + shift) (shift 8 on the FP8 path,
// so P fills e4m3's range; 0 otherwise: l carries the same factor, which the final O / l cancels).
//
// O (acc) and l are rescaled by exp2(c * (m_old - m_new)) only in warps where some row's maximum grew:
// after the first blocks of a row the maximum rarely moves, and skipping a multiply by exactly 1 changes
// no bit. (FlashAttention-4 goes further and keeps a stale maximum until it is 2^8 behind; measured here
// on this mma.sync path, that moved fp16 results off the low-precision reference by more than
// the tolerance rule allows on one shape of the GPU suite, so this path keeps the exact maximum. The
// sm_90a kernel keeps a maximum up to 2^1 stale at 16-bit head_dim > 128, forward_wgmma.cuh FG_STALE.)
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
            corr[mt][h] = fg_softmax_row<NT>(s[mt], h, row_max[mt][h], row_sum[mt][h], scale_log2, shift);
            grew |= corr[mt][h] != 1.f;
        }
    }
    // Warp-uniform branch: the quad reductions made `grow` equal across a row's four threads, and one
    // row growing anywhere in the warp sends the whole warp through the rescale. With one m16 tile per
    // warp the branch costs more than it saves: it splits the block step in two, so ptxas can no longer
    // hoist the V fragment loads above the softmax (H200: d256 128x64 8 warps 293 -> 325
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

#endif // FG_COMMON_SOFTMAX_CUH
