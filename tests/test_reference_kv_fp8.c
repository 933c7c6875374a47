/* test_reference_kv_fp8.c: FP8 KV caches beside 16-bit queries (the serving kernel's kv=e4m3|e5m2 variants) on the
 * CPU: the kernel's bit-level dequantization constants (templates/common/kv_fp8.h) against the reference's decoder
 * for every FP8 code and both 16-bit targets, and the reference's forward on such a cache (K and V decoded, times
 * their descales) against a hand computation. Needs no GPU; runs in CI. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"
#include "reference/reference.h"
#include "templates/common/kv_fp8.h"
#include "tests/reference_harness.h"

/* What the kernel's fg_kv8_dequant4 makes of FP8 code b for the 16-bit dtype t, in double: the code in the high
 * byte of a 16-bit lane, its 7 bits moved right within the lane, read as t and multiplied by 2^gap. The 16-bit
 * pattern before the multiply goes to *bits. */
static double dequant(int e5m2, fg_dtype t, uint8_t b, uint16_t *bits) {
    const int bf16 = t == FG_DTYPE_BF16;
    const unsigned h = (unsigned)b << 8;
    const unsigned v = (h & 0x8000u) | ((h >> FG_KV8_SHIFT(e5m2, bf16)) & FG_KV8_MASK(e5m2, bf16));
    *bits = (uint16_t)v;
    const double scale = ref_to_float(t, (uint16_t)FG_KV8_SCALE_BITS(e5m2, bf16));
    cr_assert_eq(scale, ldexp(1.0, FG_KV8_BIAS_GAP(e5m2, bf16)), "the scale pattern is 2^gap");
    return (double)ref_to_float(t, (uint16_t)v) * scale;
}

Test(kv_fp8, dequantization_is_exact_for_every_finite_code) {
    static const fg_dtype to[2] = {FG_DTYPE_F16, FG_DTYPE_BF16};
    for (int e5m2 = 0; e5m2 < 2; e5m2++)
        for (int t = 0; t < 2; t++) {
            int checked = 0;
            for (unsigned u = 0; u < 256; u++) {
                const float want = e5m2 ? ref_e5m2_to_float((uint8_t)u) : ref_e4m3_to_float((uint8_t)u);
                uint16_t bits;
                const double got = dequant(e5m2, to[t], (uint8_t)u, &bits);
                if (!isfinite(want)) continue; /* NaN (and e5m2's infinities): K and V must be finite */
                cr_assert(got == want && !signbit(got) == !signbit(want), "%s 0x%02x -> %s: %a, want %a",
                          e5m2 ? "e5m2" : "e4m3", u, dtype_name(to[t]), got, (double)want);
                /* the product is a value of the 16-bit format: its rounding there (the kernel's mul/fma) is exact */
                cr_assert_eq(ref_to_float(to[t], ref_from_float(to[t], want)), want, "0x%02x is not a %s value", u,
                             dtype_name(to[t]));
                checked++;
            }
            cr_assert_eq(checked, e5m2 ? 248 : 254, "finite codes");
        }
    /* e5m2 into fp16 is the code as fp16's high byte: no shift, a multiply by 1 */
    cr_assert_eq(FG_KV8_SHIFT(1, 0), 0);
    cr_assert_eq(FG_KV8_SCALE_BITS(1, 0), 0x3C00u);
}

/* One FP8 element of a contiguous host_fp8 view, set to the code of x. */
static void put8(fg_tensor *t, int64_t b, int64_t s, int64_t h, int64_t x, float v) {
    uint8_t *p = (uint8_t *)t->data + b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + x * t->stride[3];
    *p = (uint8_t)ref_from_float(t->dtype, v);
}

/* d 1, scale 1, two sequences of one query (q = 1) and two keys: K codes 0 and 2, V codes 1 and 3, each sequence its
 * own descales: sequence 0 kd 0.5, vd 2 (scores 0 and 1, values 2 and 6), sequence 1 kd 1, vd 0.25 (scores 0 and 2,
 * values 0.25 and 0.75). O = sum_j e^s_j v_j / sum_j e^s_j, LSE = log sum_j e^s_j. */
Test(kv_fp8, hand_computed_cache_with_descales_per_sequence) {
    for (int f = 0; f < 4; f++) {
        const fg_dtype qt = f % 2 ? FG_DTYPE_BF16 : FG_DTYPE_F16, kt = f / 2 ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3;
        fg_tensor q = host_tensor(qt, 2, 1, 1, 1, 0, 0);
        fg_tensor k = host_fp8(kt, 2, 2, 1, 1, 0), v = host_fp8(kt, 2, 2, 1, 1, 0);
        for (int b = 0; b < 2; b++) {
            *at(&q, b, 0, 0, 0) = ref_from_float(qt, 1);
            put8(&k, b, 0, 0, 0, 0), put8(&k, b, 1, 0, 0, 2);
            put8(&v, b, 0, 0, 0, 1), put8(&v, b, 1, 0, 0, 3);
        }
        ref_problem p = problem(q, k, v, 1.0f, 0);
        const float kd[2] = {0.5f, 1.0f}, vd[2] = {2.0f, 0.25f};
        p.k_descale = host_descale(kd, 2, 1, 1);
        p.v_descale = host_descale(vd, 2, 1, 1);
        double o[2], lse[2];
        fg_error e;
        fg_error_clear(&e);
        cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_OK, "%s", e.msg);
        const double e1 = exp(1.0), e2 = exp(2.0);
        cr_assert_lt(fabs(o[0] - (2 + 6 * e1) / (1 + e1)), 1e-15, "O[0] = %.17g", o[0]);
        cr_assert_lt(fabs(o[1] - (0.25 + 0.75 * e2) / (1 + e2)), 1e-15, "O[1] = %.17g", o[1]);
        cr_assert_lt(fabs(lse[0] - log(1 + e1)), 1e-15, "LSE[0] = %.17g", lse[0]);
        cr_assert_lt(fabs(lse[1] - log(1 + e2)), 1e-15, "LSE[1] = %.17g", lse[1]);
        /* lowp, as the kernel: P = (e^-s, 1) rounded to q's dtype, l unrounded, (P V) vd / l rounded to q's dtype */
        const double s[2] = {1, 2};
        cr_assert_eq(ref_attention_fwd(&p, REF_LOWP, o, lse, &e), FG_OK, "%s", e.msg);
        for (int b = 0; b < 2; b++) {
            const double p0 = ref_to_float(qt, ref_from_float(qt, (float)exp(-s[b])));
            const double want = ref_to_float(qt, ref_from_float(qt, (float)((p0 * 1 + 3) * vd[b] / (1 + exp(-s[b])))));
            cr_assert_eq(o[b], want, "%s/%s sequence %d: lowp O = %.17g, expected %.17g", dtype_name(qt),
                         dtype_name(kt), b, o[b], want);
        }
        free(p.k_descale.data);
        free(p.v_descale.data);
        qkv_free(&q, &k, &v);
    }
}

Test(kv_fp8, inconsistent_caches_are_refused) {
    fg_tensor q = host_tensor(FG_DTYPE_BF16, 1, 2, 2, 32, 0, 0);
    fg_tensor k = host_fp8(FG_DTYPE_E4M3, 1, 4, 1, 32, 0), v = host_fp8(FG_DTYPE_E5M2, 1, 4, 1, 32, 0);
    ref_problem p = problem(q, k, v, 0, 0);
    double o[128], lse[4];
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT, "e4m3 K with e5m2 V");
    cr_assert(strstr(e.msg, "one FP8 dtype"), "%s", e.msg);
    p.v.dtype = FG_DTYPE_E4M3;
    memset(p.v.data, 0, 4 * 32);
    memset(p.k.data, 0, 4 * 32);
    fill(&p.q, 7);
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_OK, "%s", e.msg);
    const float one[1] = {1.0f};
    p.q_descale = host_descale(one, 1, 1, 0); /* a 16-bit q takes no descale */
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "q_descale"), "%s", e.msg);
    free(p.q_descale.data);
    qkv_free(&q, &k, &v);
}
