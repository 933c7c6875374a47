// merge.cuh: the exact merge of attention states (O_s, LSE_s) over key subsets, for split-KV's combine
// and for fg_merge_states. One warp a (token, head): M = max_s LSE_s, w_s = exp(LSE_s - M),
// O = sum_s w_s O_s / sum_s w_s, LSE = M + ln(sum_s w_s), in fp32. A state with LSE = -inf (no key) takes
// no part, whatever its O holds; when every state is empty, O = 0 and LSE = -inf. A NaN LSE makes O and
// LSE NaN. Products and sums are rounded one at a time (no fused multiply-add), so the merge of two
// states does not depend on their order.
#ifndef FG_MERGE_CUH
#define FG_MERGE_CUH

#include "common/fg_params.h"
#include "common/types.cuh"

constexpr int FG_MERGE_WARPS = 4;
constexpr int FG_MERGE_MAX_STATES = 256; // shared memory for the weights: 4 KiB a CTA
constexpr int FG_DT_F32 = 2, FG_DT_F16 = 0, FG_DT_BF16 = 1; // fg_dtype values

__device__ __forceinline__ float fg_load_elem(const void *base, i64 i, int dtype) {
    if (dtype == FG_DT_F32) return ((const float *)base)[i];
    const u32 bits = ((const u16 *)base)[i];
    if (dtype == FG_DT_BF16) return __uint_as_float(bits << 16);
    float f;
    asm("{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"((unsigned short)bits));
    return f;
}

__device__ __forceinline__ void fg_store_elem(void *base, i64 i, int dtype, float x) {
    if (dtype == FG_DT_F32) {
        ((float *)base)[i] = x;
        return;
    }
    unsigned short h;
    if (dtype == FG_DT_BF16) asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    else asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    ((unsigned short *)base)[i] = h;
}

extern "C" __global__ void __launch_bounds__(FG_MERGE_WARPS * 32)
fg_merge_kernel(const __grid_constant__ fg_merge_params p) {
    __shared__ float weights[FG_MERGE_WARPS][FG_MERGE_MAX_STATES];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, b = blockIdx.y;
    const i64 pair = (i64)blockIdx.x * FG_MERGE_WARPS + warp;
    int start = 0, len = p.tokens;
    if (p.cu_seqlens) {
        start = min(max(p.cu_seqlens[b], 0), p.total);
        len = min(min(max(p.cu_seqlens[b + 1], start), p.total) - start, p.tokens);
    }
    if (pair >= (i64)len * p.heads) return;
    const int tok = (int)(pair / p.heads), h = (int)(pair % p.heads);
    const i64 in_row = (p.cu_seqlens ? start : (i64)b * p.tokens) + tok;
    const i64 out_tok = (p.cu_seqlens ? start : 0) + tok;
    const float *lse_in = p.lse_in + in_row * p.lse_in_stride[1] + h * p.lse_in_stride[2];

    float m = FG_NEG_INF;
    bool nan = false;
    for (int s = lane; s < p.states; s += 32) {
        const float x = lse_in[s * p.lse_in_stride[0]];
        nan |= x != x;
        m = fmaxf(m, x);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    nan = __any_sync(0xffffffffu, nan);
    float sum = 0.f;
    for (int s = lane; s < p.states; s += 32) {
        const float x = lse_in[s * p.lse_in_stride[0]];
        const float w = m == FG_NEG_INF ? 0.f : expf(x - m); // exp(-inf) = 0 for an empty state
        weights[warp][s] = w;
        sum = __fadd_rn(sum, w);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
    __syncwarp();
    const float qnan = __int_as_float(0x7fffffff);
    const float inv = nan ? qnan : (sum > 0.f ? 1.f / sum : 0.f);

    const i64 in_base = in_row * p.o_in_stride[1] + h * p.o_in_stride[2];
    const i64 out_base = b * p.o_out_stride[0] + out_tok * p.o_out_stride[1] + h * p.o_out_stride[2];
    for (int c = lane; c < p.head_dim; c += 32) {
        float acc = 0.f;
        for (int s = 0; s < p.states; s++) {
            const float w = weights[warp][s];
            if (w != 0.f) acc = __fadd_rn(acc, __fmul_rn(w, fg_load_elem(p.o_in, in_base + s * p.o_in_stride[0] + c, p.in_dtype)));
        }
        fg_store_elem(p.o_out, out_base + c, p.out_dtype, __fmul_rn(acc, inv));
    }
    if (p.lse_out && lane == 0)
        p.lse_out[b * p.lse_out_stride[0] + h * p.lse_out_stride[1] + out_tok * p.lse_out_stride[2]] =
            nan ? qnan : (sum > 0.f ? m + logf(sum) : FG_NEG_INF);
}

#endif // FG_MERGE_CUH
