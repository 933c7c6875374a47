// fast_math.cuh: tanh and the reciprocal step under it, for the built-in softcap (score_mods.cuh) and a custom mod's
// fg.tanh (generator/mod_emit.c: a mod's code includes this ahead of the kernel family).
#ifndef FG_COMMON_FAST_MATH_CUH
#define FG_COMMON_FAST_MATH_CUH

#include "common/types.cuh"

// 1 / (1 + 2^e) for e <= 0 (NaN stays NaN), to about 1e-8 relative. The forward is bound by the FMA pipe and
// the special-function unit together (the MUFU's 16 operations a clock an SM are two a score at full MMA rate,
// and the softmax's exp2 takes one), so this takes one MUFU operation (the exp2) and five FMAs: 1 + 2^e is in
// (1, 2], where a quadratic seed is within 1.01% of the reciprocal and two Newton steps take that to 1e-4 and
// 1e-8. (tanh.approx.f32 is one operation too, but off by up to 2^-11 relative, which a softcap of 50 turns into
// 0.02 in a logit: more than the LSE's tolerance.)
__device__ __forceinline__ float fg_rcp_1p_exp2(float e) {
    const float d = fg_exp2(e) + 1.f;
    float r = fmaf(fmaf(0.32323238f, d, -1.45454628f), d, 2.12121330f);
    r = fmaf(r, fmaf(-d, r, 1.f), r);
    return fmaf(r, fmaf(-d, r, 1.f), r);
}

// tanh(x) to about 3e-7 absolute: tanh|x| = 2 / (1 + e^(-2|x|)) - 1, the sign put back. e^(-2|x|) only falls, so
// a large |x| needs no clamp (it gives 1), and a NaN stays NaN.
__device__ __forceinline__ float fg_tanh(float x) {
    return copysignf(fmaf(2.f, fg_rcp_1p_exp2(fabsf(x) * -2.8853900817779268f), -1.f), x);
}

#endif // FG_COMMON_FAST_MATH_CUH
