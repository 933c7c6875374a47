/* test_reference_numbers.c: the CPU reference's numbers (reference/convert.c, reference/fill.c): the 16-bit
 * and FP8 conversions checked exhaustively against their formulas and the compiler (every bit pattern round
 * trips, ties round to even, FP8 saturation and NaN), and the deterministic normal fill of contiguous,
 * strided and FP8 views. Needs no GPU; runs in CI. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "tests/reference_harness.h"

/* ---- conversions ---- */

Test(conversion, f16_every_pattern_matches_the_formula_and_round_trips) {
    for (uint32_t u = 0; u < 0x10000u; u++) {
        uint16_t h = (uint16_t)u;
        float f = ref_f16_to_float(h);
        int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
        if (exp == 0x1F && man != 0) {
            cr_assert(isnan(f), "0x%04x must decode to NaN", u);
            uint16_t back = ref_float_to_f16(f);
            cr_assert(((back >> 10) & 0x1F) == 0x1F && (back & 0x3FF) != 0 && (back >> 15) == sign,
                      "NaN 0x%04x must encode back to a NaN of the same sign, got 0x%04x", u, back);
            continue;
        }
        double want = exp == 0x1F ? INFINITY : exp == 0 ? ldexp(man, -24) : ldexp(1024 + man, exp - 25);
        if (sign)
            want = -want;
        cr_assert(f == want && !signbit(f) == !signbit(want), "0x%04x decodes to %a, expected %a", u, f, want);
        cr_assert_eq(ref_float_to_f16(f), h, "0x%04x does not round-trip (got 0x%04x)", u, ref_float_to_f16(f));
    }
}

Test(conversion, bf16_every_pattern_round_trips) {
    for (uint32_t u = 0; u < 0x10000u; u++) {
        uint16_t h = (uint16_t)u;
        float f = ref_bf16_to_float(h);
        int exp = (h >> 7) & 0xFF, man = h & 0x7F;
        if (exp == 0xFF && man != 0) {
            uint16_t back = ref_float_to_bf16(f);
            cr_assert(isnan(f) && ((back >> 7) & 0xFF) == 0xFF && (back & 0x7F) != 0 && (back >> 15) == (u >> 15),
                      "NaN 0x%04x must stay a NaN of the same sign (got 0x%04x)", u, back);
            continue;
        }
        double want = exp == 0xFF ? INFINITY : exp == 0 ? ldexp(man, -133) : ldexp(128 + man, exp - 134);
        if (h >> 15)
            want = -want;
        cr_assert(f == want && !signbit(f) == !signbit(want), "bf16 0x%04x decodes to %a, expected %a", u, f, want);
        cr_assert_eq(ref_float_to_bf16(f), h, "bf16 0x%04x does not round-trip", u);
    }
}

/* For each pair of adjacent finite values (lo, hi) of a 16-bit format, the float midpoint must round to
 * the one with an even mantissa, and the floats just below/above it to lo/hi. Covers subnormals, the
 * normal/subnormal boundary and every binade. */
static void check_ties(fg_dtype dt, uint16_t max_finite, const char *name) {
    for (uint32_t u = 0; u < max_finite; u++) {
        for (int neg = 0; neg < 2; neg++) {
            uint16_t lo = (uint16_t)(u | (neg ? 0x8000u : 0)), hi = (uint16_t)((u + 1) | (neg ? 0x8000u : 0));
            float flo = ref_to_float(dt, lo), fhi = ref_to_float(dt, hi);
            float mid = (float)(((double)flo + (double)fhi) / 2);
            cr_assert_eq((double)mid, ((double)flo + (double)fhi) / 2, "%s midpoint not exact in float", name);
            uint16_t even = (lo & 1) ? hi : lo;
            cr_assert_eq(ref_from_float(dt, mid), even, "%s: tie %a between 0x%04x and 0x%04x gave 0x%04x", name,
                         mid, lo, hi, ref_from_float(dt, mid));
            float below = nextafterf(mid, flo), above = nextafterf(mid, fhi);
            cr_assert_eq(ref_from_float(dt, below), lo, "%s: %a must round to 0x%04x", name, below, lo);
            cr_assert_eq(ref_from_float(dt, above), hi, "%s: %a must round to 0x%04x", name, above, hi);
        }
    }
}

Test(conversion, f16_rounds_to_nearest_even) {
    check_ties(FG_DTYPE_F16, 0x7BFF, "f16");
    /* Overflow: 65504 is the largest finite; its upper midpoint 65520 is a tie that goes to Inf (even). */
    cr_assert_eq(ref_float_to_f16(nextafterf(65520.0f, 0)), 0x7BFF);
    cr_assert_eq(ref_float_to_f16(65520.0f), 0x7C00);
    cr_assert_eq(ref_float_to_f16(-1e30f), 0xFC00);
    cr_assert_eq(ref_float_to_f16(INFINITY), 0x7C00);
    /* Underflow: half the smallest subnormal is a tie that goes to zero; anything above goes up. */
    cr_assert_eq(ref_float_to_f16(0x1p-25f), 0x0000);
    cr_assert_eq(ref_float_to_f16(nextafterf(0x1p-25f, 1)), 0x0001);
    cr_assert_eq(ref_float_to_f16(-0x1p-26f), 0x8000);
    cr_assert_eq(ref_float_to_f16(0x1p-149f), 0x0000, "float subnormals are far below fp16's range");
    cr_assert_eq(ref_float_to_f16(-0.0f), 0x8000);
}

Test(conversion, bf16_rounds_to_nearest_even) {
    check_ties(FG_DTYPE_BF16, 0x7F7F, "bf16");
    float max_bf16 = ref_bf16_to_float(0x7F7F);
    float upper_mid = (float)((double)max_bf16 + ldexp(1, 127 - 8));
    cr_assert_eq(ref_float_to_bf16(upper_mid), 0x7F80, "the tie above the largest bf16 goes to Inf");
    cr_assert_eq(ref_float_to_bf16(nextafterf(upper_mid, 0)), 0x7F7F);
    cr_assert_eq(ref_float_to_bf16(0x1p-149f), 0x0000, "2^-149 is below half of bf16's smallest subnormal");
    cr_assert_eq(ref_float_to_bf16(0x1p-133f), 0x0001, "2^-133 is bf16's smallest subnormal");
}

#if defined(__FLT16_MAX__)
/* The compiler's own float->_Float16 conversion (IEEE, round to nearest even) as an oracle, over every
 * float whose exponent lies in or near fp16's range, with the low mantissa bits that decide rounding
 * swept over the interesting cases, plus pseudo-random floats. */
Test(conversion, f16_agrees_with_the_compiler) {
    static const uint32_t low[] = {0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFFFF};
    for (uint32_t e = 90; e <= 145; e++)
        for (uint32_t top = 0; top < 1024; top++)
            for (size_t k = 0; k < sizeof low / sizeof low[0]; k++)
                for (uint32_t sign = 0; sign < 2; sign++) {
                    uint32_t bits = (sign << 31) | (e << 23) | (((top << 13) | low[k]) & 0x7FFFFFu);
                    float f;
                    memcpy(&f, &bits, sizeof f);
                    _Float16 c = (_Float16)f;
                    uint16_t want;
                    memcpy(&want, &c, sizeof want);
                    cr_assert_eq(ref_float_to_f16(f), want, "%a: got 0x%04x, compiler 0x%04x", f, ref_float_to_f16(f),
                                 want);
                }
    uint32_t x = 2463534242u;
    for (int i = 0; i < 1 << 22; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        float f;
        memcpy(&f, &x, sizeof f);
        if (isnan(f))
            continue;
        _Float16 c = (_Float16)f;
        uint16_t want;
        memcpy(&want, &c, sizeof want);
        cr_assert_eq(ref_float_to_f16(f), want, "%a: got 0x%04x, compiler 0x%04x", f, ref_float_to_f16(f), want);
    }
}
#endif

/* ---- random fill ---- */

Test(fill, is_deterministic_and_standard_normal) {
    const int64_t n = 1 << 20;
    fg_tensor a = host_tensor(FG_DTYPE_BF16, 1, n / 64, 1, 64, 0, 0);
    fg_tensor b = host_tensor(FG_DTYPE_BF16, 1, n / 64, 1, 64, 0, 0);
    fg_tensor c = host_tensor(FG_DTYPE_BF16, 1, n / 64, 1, 64, 0, 0);
    fill(&a, 42);
    fill(&b, 42);
    fill(&c, 43);
    cr_assert_eq(memcmp(a.data, b.data, (size_t)n * 2), 0, "one seed must give the same values");
    int64_t same = 0;
    double sum = 0, sum2 = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t x = ((uint16_t *)a.data)[i];
        same += x == ((uint16_t *)c.data)[i];
        double v = ref_bf16_to_float(x);
        cr_assert(isfinite(v));
        sum += v;
        sum2 += v * v;
    }
    double mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
    cr_assert_lt(same, n / 50, "seeds 42 and 43 agree on %lld of %lld elements", (long long)same, (long long)n);
    cr_assert_lt(fabs(mean), 0.01, "mean %g", mean);
    cr_assert_lt(fabs(sd - 1), 0.01, "standard deviation %g", sd);
    free(a.data);
    free(b.data);
    free(c.data);
}

Test(fill, strided_view_gets_the_contiguous_values_and_padding_is_untouched) {
    fg_tensor c = host_tensor(FG_DTYPE_F16, 2, 9, 3, 40, 0, 0);
    fg_tensor s = host_tensor(FG_DTYPE_F16, 2, 9, 3, 40, 8, 1);
    fill(&c, 7);
    fill(&s, 7);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < 9; i++)
            for (int64_t h = 0; h < 3; h++)
                for (int64_t x = 0; x < 40; x++)
                    cr_assert_eq(*at(&c, b, i, h, x), *at(&s, b, i, h, x), "element [%lld,%lld,%lld,%lld] differs",
                                 (long long)b, (long long)i, (long long)h, (long long)x);
    int64_t nan_left = 0, total = 2 * s.stride[0] + 1;
    for (int64_t i = 0; i < total; i++)
        nan_left += isnan(ref_f16_to_float(((uint16_t *)s.data)[i]));
    cr_assert_eq(nan_left, total - 2 * 9 * 3 * 40, "the padding must keep its NaN");
    free(c.data);
    free(s.data);
}

Test(fill, a_mean_shifts_the_same_draws_and_out_of_range_means_are_refused) {
    /* e4m3, as the CLI fills an FP8 V: the draws of mean 0 plus 1, then rounded (relative error <= 2^-4) */
    const int64_t n = 1 << 16;
    fg_tensor z = host_tensor(FG_DTYPE_E4M3, 1, n / 64, 1, 64, 0, 0);
    fg_tensor m = host_tensor(FG_DTYPE_E4M3, 1, n / 64, 1, 64, 0, 0);
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_fill_normal_mean(&z, 5, 0.f, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(ref_fill_normal_mean(&m, 5, 1.f, &e), FG_OK, "%s", e.msg);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = ref_e4m3_to_float(((uint8_t *)z.data)[i]), b = ref_e4m3_to_float(((uint8_t *)m.data)[i]);
        /* both within 2^-4 (relative) of the exact draws x and x + 1 */
        cr_assert_leq(fabs(b - a - 1), (fabs(a) + fabs(b)) / 16 + 1e-6, "element %lld: %g then %g", (long long)i, a, b);
        sum += b;
    }
    cr_assert_lt(fabs(sum / n - 1), 0.02, "mean %g", sum / n);
    /* mean 0 is ref_fill_normal */
    fg_tensor r = host_tensor(FG_DTYPE_E4M3, 1, n / 64, 1, 64, 0, 0);
    fill(&r, 5);
    cr_assert_eq(memcmp(r.data, z.data, (size_t)n), 0);
    cr_assert_eq(ref_fill_normal_mean(&m, 5, 16.f, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "mean") != NULL, "%s", e.msg);
    cr_assert_eq(ref_fill_normal_mean(&m, 5, NAN, &e), FG_ERR_INVALID_ARGUMENT);
    free(z.data);
    free(m.data);
    free(r.data);
}

/* The value a format code must decode to, from its fields (e4m3: NaN only at S.1111.111; e5m2: IEEE). */
static double fp8_formula(fg_dtype dt, uint8_t c) {
    int ebits = dt == FG_DTYPE_E4M3 ? 4 : 5, mbits = 7 - ebits, bias = dt == FG_DTYPE_E4M3 ? 7 : 15;
    int e = (c >> mbits) & ((1 << ebits) - 1), m = c & ((1 << mbits) - 1);
    double mag;
    if (dt == FG_DTYPE_E4M3 && e == 15 && m == 7)
        return NAN;
    if (dt == FG_DTYPE_E5M2 && e == 31)
        mag = m ? NAN : INFINITY;
    else if (e == 0)
        mag = ldexp(m, 1 - bias - mbits);
    else
        mag = ldexp((1 << mbits) + m, e - bias - mbits);
    return (c & 0x80) ? -mag : mag;
}

/* The encoder of dt. */
static uint8_t fp8_encode(fg_dtype dt, float f, int saturate) {
    return dt == FG_DTYPE_E4M3 ? ref_float_to_e4m3(f, saturate) : ref_float_to_e5m2(f, saturate);
}

Test(conversion, fp8_every_code_decodes_by_the_formula_and_round_trips) {
    for (int f = 0; f < 2; f++) {
        fg_dtype dt = f ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3;
        const char *name = f ? "e5m2" : "e4m3";
        int nans = 0, infs = 0;
        for (uint32_t u = 0; u < 256; u++) {
            uint8_t c = (uint8_t)u;
            float x = ref_to_float(dt, c);
            double want = fp8_formula(dt, c);
            if (isnan(want)) {
                nans++;
                cr_assert(isnan(x), "%s 0x%02x must decode to NaN, got %a", name, u, x);
                for (int sat = 0; sat < 2; sat++)
                    cr_assert_eq(fp8_encode(dt, x, sat), (c & 0x80) | 0x7F, "%s NaN 0x%02x encodes to 0x%02x", name, u,
                                 fp8_encode(dt, x, sat));
                continue;
            }
            cr_assert(x == want && !signbit(x) == !signbit(want), "%s 0x%02x decodes to %a, expected %a", name, u, x,
                      want);
            cr_assert_eq(x, f ? ref_e5m2_to_float(c) : ref_e4m3_to_float(c), "ref_to_float dispatch");
            if (isinf(x)) {
                infs++;
                cr_assert_eq(fp8_encode(dt, x, 0), c, "%s: Inf stays Inf without saturation", name);
                cr_assert_eq(fp8_encode(dt, x, 1), (c & 0x80) | 0x7B, "%s: Inf saturates to the largest finite", name);
                continue;
            }
            cr_assert_eq(fp8_encode(dt, x, 0), c, "%s 0x%02x does not round-trip (got 0x%02x)", name, u,
                         fp8_encode(dt, x, 0));
            cr_assert_eq(fp8_encode(dt, x, 1), c, "%s 0x%02x does not round-trip saturating", name, u);
            cr_assert_eq(ref_from_float(dt, x), c, "ref_from_float dispatch");
        }
        cr_assert_eq(nans, f ? 6 : 2, "%s NaN codes", name);
        cr_assert_eq(infs, f ? 2 : 0, "%s Inf codes", name);
    }
    cr_assert_eq(ref_e4m3_to_float(0x7E), REF_E4M3_MAX);
    cr_assert_eq(ref_e5m2_to_float(0x7B), REF_E5M2_MAX);
    /* e5m2 is the upper byte of fp16: every code agrees with the fp16 decoder */
    for (uint32_t u = 0; u < 256; u++) {
        float a = ref_e5m2_to_float((uint8_t)u), b = ref_f16_to_float((uint16_t)(u << 8));
        cr_assert((isnan(a) && isnan(b)) || a == b, "e5m2 0x%02x: %a, fp16 0x%04x: %a", u, a, u << 8, b);
    }
}

Test(conversion, fp8_rounds_to_nearest_even) {
    for (int f = 0; f < 2; f++) {
        fg_dtype dt = f ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3;
        const char *name = f ? "e5m2" : "e4m3";
        uint8_t max_finite = f ? 0x7B : 0x7E;
        for (uint32_t u = 0; u < max_finite; u++) /* every pair of adjacent values, subnormals included */
            for (int neg = 0; neg < 2; neg++) {
                uint8_t lo = (uint8_t)(u | (neg ? 0x80u : 0)), hi = (uint8_t)((u + 1) | (neg ? 0x80u : 0));
                float flo = ref_to_float(dt, lo), fhi = ref_to_float(dt, hi);
                float mid = (flo + fhi) / 2; /* exact: a few bits wide */
                uint8_t even = (lo & 1) ? hi : lo;
                for (int sat = 0; sat < 2; sat++) {
                    cr_assert_eq(fp8_encode(dt, mid, sat), even, "%s: tie %a between 0x%02x and 0x%02x gave 0x%02x",
                                 name, mid, lo, hi, fp8_encode(dt, mid, sat));
                    cr_assert_eq(fp8_encode(dt, nextafterf(mid, flo), sat), lo, "%s: below the tie", name);
                    cr_assert_eq(fp8_encode(dt, nextafterf(mid, fhi), sat), hi, "%s: above the tie", name);
                }
            }
    }
    /* subnormals and underflow */
    cr_assert_eq(ref_e4m3_to_float(0x01), 0x1p-9f, "e4m3's smallest subnormal");
    cr_assert_eq(ref_e4m3_to_float(0x08), 0x1p-6f, "e4m3's smallest normal");
    cr_assert_eq(ref_e5m2_to_float(0x01), 0x1p-16f, "e5m2's smallest subnormal");
    cr_assert_eq(ref_e5m2_to_float(0x04), 0x1p-14f, "e5m2's smallest normal");
    cr_assert_eq(ref_float_to_e4m3(0x1p-10f, 0), 0x00, "half the smallest subnormal ties to zero");
    cr_assert_eq(ref_float_to_e4m3(nextafterf(0x1p-10f, 1), 0), 0x01);
    cr_assert_eq(ref_float_to_e4m3(-0x1p-12f, 1), 0x80, "tiny negatives keep their sign");
    cr_assert_eq(ref_float_to_e5m2(0x1p-17f, 0), 0x00);
    cr_assert_eq(ref_float_to_e5m2(0x1.8p-17f, 0), 0x01);
    cr_assert_eq(ref_float_to_e4m3(0x1p-149f, 0), 0x00);
    cr_assert_eq(ref_float_to_e4m3(-0.0f, 0), 0x80);
}

Test(conversion, fp8_saturation_overflow_and_nan) {
    /* e4m3: 448 is the largest; 464 ties to it (even mantissa), anything above overflows */
    cr_assert_eq(ref_float_to_e4m3(448.0f, 0), 0x7E);
    cr_assert_eq(ref_float_to_e4m3(464.0f, 0), 0x7E, "the tie above 448 goes to the even 448");
    cr_assert_eq(ref_float_to_e4m3(nextafterf(464.0f, 1e9f), 0), 0x7F, "past it: NaN (e4m3 has no Inf)");
    cr_assert_eq(ref_float_to_e4m3(nextafterf(464.0f, 1e9f), 1), 0x7E, "saturated: 448");
    cr_assert_eq(ref_float_to_e4m3(1e30f, 1), 0x7E);
    cr_assert_eq(ref_float_to_e4m3(-1e30f, 1), 0xFE);
    cr_assert_eq(ref_float_to_e4m3(-1e30f, 0), 0xFF);
    cr_assert_eq(ref_float_to_e4m3(INFINITY, 0), 0x7F);
    cr_assert_eq(ref_float_to_e4m3(-INFINITY, 1), 0xFE);
    /* e5m2: 57344 is the largest; 61440 ties to 65536 (even), which is Inf */
    cr_assert_eq(ref_float_to_e5m2(57344.0f, 0), 0x7B);
    cr_assert_eq(ref_float_to_e5m2(nextafterf(61440.0f, 0), 0), 0x7B);
    cr_assert_eq(ref_float_to_e5m2(61440.0f, 0), 0x7C, "the tie above 57344 goes to Inf");
    cr_assert_eq(ref_float_to_e5m2(61440.0f, 1), 0x7B, "saturated: 57344");
    cr_assert_eq(ref_float_to_e5m2(-1e30f, 0), 0xFC);
    cr_assert_eq(ref_float_to_e5m2(-INFINITY, 1), 0xFB);
    /* NaN, either sign, both modes */
    cr_assert_eq(ref_float_to_e4m3(NAN, 1), 0x7F);
    cr_assert_eq(ref_float_to_e4m3(-NAN, 0), 0xFF);
    cr_assert_eq(ref_float_to_e5m2(NAN, 0), 0x7F);
    cr_assert_eq(ref_float_to_e5m2(-NAN, 1), 0xFF);
    cr_assert(isnan(ref_e4m3_to_float(0xFF)) && isnan(ref_e5m2_to_float(0x7D)) && isnan(ref_e5m2_to_float(0xFE)));
    cr_assert(isinf(ref_e5m2_to_float(0xFC)) && ref_e5m2_to_float(0xFC) < 0);
    /* a value the 16-bit types keep exactly but fp8 must round: 1 + 2^-4 */
    cr_assert_eq(ref_float_to_e4m3(1.0625f, 0), 0x38, "1 + 2^-4 ties to 1 in e4m3 (3 mantissa bits)");
    cr_assert_eq(ref_float_to_e4m3(1.0625f + 0x1p-10f, 0), 0x39);
}

Test(fill, fp8_views_get_rounded_normals_and_keep_their_padding) {
    for (int f = 0; f < 2; f++) {
        fg_dtype dt = f ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3;
        fg_tensor c = host_fp8(dt, 2, 300, 3, 64, 0), s = host_fp8(dt, 2, 300, 3, 64, 1);
        fill(&c, 9);
        fill(&s, 9);
        double sum = 0, sum2 = 0;
        int64_t n = 2 * 300 * 3 * 64, same_as_bf16 = 0, adjacent = 0;
        fg_tensor ref = host_tensor(FG_DTYPE_BF16, 2, 300, 3, 64, 0, 0);
        fill(&ref, 9); /* the same samples, rounded to bf16 */
        for (int64_t b = 0; b < 2; b++)
            for (int64_t i = 0; i < 300; i++)
                for (int64_t h = 0; h < 3; h++)
                    for (int64_t x = 0; x < 64; x++) {
                        uint8_t a = ((uint8_t *)c.data)[b * c.stride[0] + i * c.stride[1] + h * c.stride[2] + x];
                        uint8_t z = ((uint8_t *)s.data)[b * s.stride[0] + i + h * s.stride[2] + x * s.stride[3]];
                        cr_assert_eq(a, z, "the key-major view must get the same values");
                        double v = ref_to_float(dt, a);
                        cr_assert(isfinite(v));
                        sum += v;
                        sum2 += v * v;
                        /* the bf16 value rounded again: equal but where it sat on an fp8 tie (double rounding) */
                        uint8_t twice = fp8_encode(dt, ref_bf16_to_float(*at(&ref, b, i, h, x)), 1);
                        same_as_bf16 += a == twice;
                        adjacent += a != twice && (a & 0x80) == (twice & 0x80) && abs((a & 0x7F) - (twice & 0x7F)) == 1;
                    }
        double mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
        cr_assert_lt(fabs(mean), 0.02, "mean %g", mean);
        cr_assert_lt(fabs(sd - 1), 0.03, "standard deviation %g", sd);
        cr_assert_gt(same_as_bf16, n * 95 / 100, "fp8 values are the same normals, rounded (%lld of %lld)",
                     (long long)same_as_bf16, (long long)n);
        cr_assert_eq(same_as_bf16 + adjacent, n, "the others are one code away (a tie rounded twice)");
        int64_t sp = s.stride[3], nan_left = 0, total = 2 * s.stride[0] + 1;
        for (int64_t i = 0; i < total; i++)
            nan_left += ((uint8_t *)s.data)[i] == 0x7F;
        cr_assert_geq(nan_left, total - n, "the padding (%lld-key rows) must keep its NaN codes", (long long)sp);
        free(c.data);
        free(s.data);
        free(ref.data);
    }
}
