/* test_reference.c: the CPU reference (tests/reference.c) checked against hand-computed cases, exhaustive
 * conversion checks and a naive loop implementation. Needs no GPU; runs in CI. The GPU suite trusts this
 * reference, so every semantic rule of the forward pass (causal alignment, GQA, masked rows, scale,
 * strides) is pinned here first. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference.h"

/* ---- helpers ---- */

/* A host tensor [b, s, h, d] of dtype dt. pad > 0 makes it a strided slice of a larger buffer: each
 * dim's stride gets `pad` extra elements and the padding holds NaN, which must never reach a result.
 * bhsd != 0 stores it head-major ([b, h, s, d] in memory) while the view stays [b, s, h, d]. */
static fg_tensor host_tensor(fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int64_t pad, int bhsd) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = 4;
    t.shape[0] = b;
    t.shape[1] = s;
    t.shape[2] = h;
    t.shape[3] = d;
    t.stride[3] = 1;
    int64_t total;
    if (bhsd) {
        t.stride[1] = d + pad;
        t.stride[2] = s * t.stride[1] + pad;
        t.stride[0] = h * t.stride[2] + pad;
    } else {
        t.stride[2] = d + pad;
        t.stride[1] = h * t.stride[2] + pad;
        t.stride[0] = s * t.stride[1] + pad;
    }
    total = b * t.stride[0] + 1;
    uint16_t *mem = malloc((size_t)total * sizeof *mem);
    cr_assert_not_null(mem, "out of memory for a %lld-element test tensor", (long long)total);
    uint16_t nan_bits = ref_from_float(dt, NAN);
    for (int64_t i = 0; i < total; i++)
        mem[i] = nan_bits;
    t.data = mem;
    return t;
}

/* The address of element [b, s, h, x] of a host view. */
static uint16_t *at(const fg_tensor *t, int64_t b, int64_t s, int64_t h, int64_t x) {
    return (uint16_t *)t->data + b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + x * t->stride[3];
}

/* ref_fill_normal, failing the test on error. */
static void fill(const fg_tensor *t, uint64_t seed) {
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_fill_normal(t, seed, &e), FG_OK, "ref_fill_normal: %s", e.msg);
}

/* A ref_problem from its parts. */
static ref_problem problem(fg_tensor q, fg_tensor k, fg_tensor v, float scale, int causal) {
    ref_problem p;
    p.q = q;
    p.k = k;
    p.v = v;
    p.softmax_scale = scale;
    p.causal = causal;
    return p;
}

/* Runs the reference; returns malloc'd O (and *lse_out, malloc'd) contiguous. */
static double *run_ref(const ref_problem *p, ref_mode mode, double **lse_out) {
    int64_t no = p->q.shape[0] * p->q.shape[1] * p->q.shape[2] * p->q.shape[3];
    int64_t nl = p->q.shape[0] * p->q.shape[2] * p->q.shape[1];
    double *o = malloc((size_t)(no > 0 ? no : 1) * sizeof *o);
    double *lse = malloc((size_t)(nl > 0 ? nl : 1) * sizeof *lse);
    cr_assert(o && lse, "out of memory");
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_fwd(p, mode, o, lse, &e), FG_OK, "ref_attention_fwd: %s", e.msg);
    if (lse_out)
        *lse_out = lse;
    else
        free(lse);
    return o;
}

/* The forward pass written as plainly as possible, independent of reference.c's row/unit machinery. */
static void naive(const ref_problem *p, int lowp, double *o, double *lse) {
    int64_t B = p->q.shape[0], SQ = p->q.shape[1], HQ = p->q.shape[2], D = p->q.shape[3];
    int64_t SK = p->k.shape[1], HKV = p->k.shape[2];
    double scale = p->softmax_scale != 0 ? p->softmax_scale : 1.0 / sqrt((double)D);
    fg_dtype dt = p->q.dtype;
    double *s = malloc((size_t)(SK + 1) * sizeof *s);
    cr_assert_not_null(s);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HQ; h++) {
            int64_t kh = h / (HQ / HKV);
            for (int64_t i = 0; i < SQ; i++) {
                double m = -INFINITY;
                for (int64_t j = 0; j < SK; j++) {
                    if (p->causal && j > i + SK - SQ) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    double dot = 0;
                    for (int64_t x = 0; x < D; x++)
                        dot += (double)ref_to_float(dt, *at(&p->q, b, i, h, x)) *
                               (double)ref_to_float(dt, *at(&p->k, b, j, kh, x));
                    s[j] = dot * scale;
                    m = fmax(m, s[j]);
                }
                double *orow = o + ((b * SQ + i) * HQ + h) * D;
                if (m == -INFINITY) {
                    for (int64_t x = 0; x < D; x++)
                        orow[x] = 0;
                    lse[(b * HQ + h) * SQ + i] = -INFINITY;
                    continue;
                }
                double l = 0;
                for (int64_t j = 0; j < SK; j++)
                    l += s[j] == -INFINITY ? 0 : exp(s[j] - m);
                for (int64_t x = 0; x < D; x++) {
                    double acc = 0;
                    for (int64_t j = 0; j < SK; j++) {
                        if (s[j] == -INFINITY)
                            continue;
                        double pj = exp(s[j] - m);
                        if (lowp)
                            pj = ref_to_float(dt, ref_from_float(dt, (float)pj));
                        acc += pj * ref_to_float(dt, *at(&p->v, b, j, kh, x));
                    }
                    orow[x] = lowp ? ref_to_float(dt, ref_from_float(dt, (float)(acc / l))) : acc / l;
                }
                lse[(b * HQ + h) * SQ + i] = m + log(l);
            }
        }
    free(s);
}

/* max |a[i] - b[i]| over n elements; Inf when a NaN is involved. */
static double max_abs_diff(const double *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

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

/* ---- semantics ---- */

Test(reference, softmax_rows_sum_to_one) {
    /* V = identity over (key, dim) makes O[i][x] = P[i][x]: each row is the softmax itself. */
    const int64_t sq = 7, sk = 16;
    for (int causal = 0; causal < 2; causal++) {
        fg_tensor q = host_tensor(FG_DTYPE_F16, 1, sq, 2, sk, 0, 0), k = host_tensor(FG_DTYPE_F16, 1, sk, 2, sk, 0, 0);
        fg_tensor v = host_tensor(FG_DTYPE_F16, 1, sk, 2, sk, 0, 0);
        fill(&q, 1);
        fill(&k, 2);
        for (int64_t j = 0; j < sk; j++)
            for (int64_t h = 0; h < 2; h++)
                for (int64_t x = 0; x < sk; x++)
                    *at(&v, 0, j, h, x) = ref_float_to_f16(j == x ? 1.0f : 0.0f);
        ref_problem p = problem(q, k, v, 0, causal);
        double *o = run_ref(&p, REF_32, NULL);
        for (int64_t i = 0; i < sq; i++)
            for (int64_t h = 0; h < 2; h++) {
                double sum = 0;
                for (int64_t x = 0; x < sk; x++) {
                    double px = o[(i * 2 + h) * sk + x];
                    cr_assert_geq(px, 0.0);
                    if (causal && x > i + sk - sq)
                        cr_assert_eq(px, 0.0, "row %lld must not see key %lld", (long long)i, (long long)x);
                    sum += px;
                }
                cr_assert_lt(fabs(sum - 1), 1e-12, "row %lld head %lld sums to %.17g", (long long)i, (long long)h, sum);
            }
        free(o);
        free(q.data);
        free(k.data);
        free(v.data);
    }
}

/* Q = 0 makes every visible key equally likely, so the mask shows directly in O with V = identity. */
static void uniform_case(int64_t sq, int64_t sk, double *o, double *lse) {
    fg_tensor q = host_tensor(FG_DTYPE_F16, 1, sq, 1, sk, 0, 0), k = host_tensor(FG_DTYPE_F16, 1, sk, 1, sk, 0, 0);
    fg_tensor v = host_tensor(FG_DTYPE_F16, 1, sk, 1, sk, 0, 0);
    for (int64_t i = 0; i < sq; i++)
        for (int64_t x = 0; x < sk; x++)
            *at(&q, 0, i, 0, x) = 0;
    fill(&k, 3);
    for (int64_t j = 0; j < sk; j++)
        for (int64_t x = 0; x < sk; x++)
            *at(&v, 0, j, 0, x) = ref_float_to_f16(j == x ? 1.0f : 0.0f);
    ref_problem p = problem(q, k, v, 0, 1);
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_OK, "%s", e.msg);
    free(q.data);
    free(k.data);
    free(v.data);
}

Test(reference, causal_is_bottom_right_aligned) {
    /* sq=2, sk=4: row 0 sees keys 0..2 (0 + 4 - 2 = 2), row 1 sees all four. */
    double o[8], lse[2];
    uniform_case(2, 4, o, lse);
    const double want[8] = {1 / 3.0, 1 / 3.0, 1 / 3.0, 0, 0.25, 0.25, 0.25, 0.25};
    for (int i = 0; i < 8; i++)
        cr_assert_lt(fabs(o[i] - want[i]), 1e-15, "sq=2 sk=4: O[%d] = %.17g, expected %.17g", i, o[i], want[i]);
    cr_assert_lt(fabs(lse[0] - log(3)), 1e-15);
    cr_assert_lt(fabs(lse[1] - log(4)), 1e-15);

    /* sq=4, sk=2: rows 0 and 1 see nothing (O = 0, LSE = -inf), row 2 sees key 0, row 3 keys 0 and 1. */
    double o2[8], lse2[4];
    uniform_case(4, 2, o2, lse2);
    const double want2[8] = {0, 0, 0, 0, 1, 0, 0.5, 0.5};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(o2[i], want2[i], "sq=4 sk=2: O[%d] = %.17g, expected %.17g", i, o2[i], want2[i]);
    cr_assert(isinf(lse2[0]) && lse2[0] < 0 && isinf(lse2[1]) && lse2[1] < 0);
    cr_assert_eq(lse2[2], 0.0);
    cr_assert_lt(fabs(lse2[3] - log(2)), 1e-15);
}

Test(reference, hand_computed_scores) {
    /* d=1, scale 1: q = 1, keys 0 and 2, values 1 and 3: O = (1 + 3e^2) / (1 + e^2), LSE = log(1 + e^2). */
    for (int dt = 0; dt < 2; dt++) {
        fg_dtype t = dt ? FG_DTYPE_BF16 : FG_DTYPE_F16;
        fg_tensor q = host_tensor(t, 1, 1, 1, 1, 0, 0), k = host_tensor(t, 1, 2, 1, 1, 0, 0);
        fg_tensor v = host_tensor(t, 1, 2, 1, 1, 0, 0);
        *at(&q, 0, 0, 0, 0) = ref_from_float(t, 1);
        *at(&k, 0, 0, 0, 0) = ref_from_float(t, 0);
        *at(&k, 0, 1, 0, 0) = ref_from_float(t, 2);
        *at(&v, 0, 0, 0, 0) = ref_from_float(t, 1);
        *at(&v, 0, 1, 0, 0) = ref_from_float(t, 3);
        ref_problem p = problem(q, k, v, 1.0f, 0);
        double o, lse, e2 = exp(2.0);
        fg_error e;
        fg_error_clear(&e);
        cr_assert_eq(ref_attention_fwd(&p, REF_32, &o, &lse, &e), FG_OK, "%s", e.msg);
        cr_assert_lt(fabs(o - (1 + 3 * e2) / (1 + e2)), 1e-15, "O = %.17g", o);
        cr_assert_lt(fabs(lse - log(1 + e2)), 1e-15, "LSE = %.17g", lse);
        /* lowp: P = (e^-2, 1) rounded to the dtype, l unrounded, O rounded at the end. */
        double p0 = ref_to_float(t, ref_from_float(t, (float)exp(-2.0)));
        double want = ref_to_float(t, ref_from_float(t, (float)((p0 * 1 + 1 * 3) / (1 + exp(-2.0)))));
        cr_assert_eq(ref_attention_fwd(&p, REF_LOWP, &o, &lse, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(o, want, "lowp O = %.17g, expected %.17g", o, want);
        free(q.data);
        free(k.data);
        free(v.data);
    }
}

Test(reference, gqa_maps_query_head_h_to_kv_head_h_over_group) {
    /* hq=4, hkv=2: heads 0,1 read KV head 0 and heads 2,3 read KV head 1; constant V per head shows it. */
    fg_tensor q = host_tensor(FG_DTYPE_F16, 2, 5, 4, 8, 0, 0), k = host_tensor(FG_DTYPE_F16, 2, 6, 2, 8, 0, 0);
    fg_tensor v = host_tensor(FG_DTYPE_F16, 2, 6, 2, 8, 0, 0);
    fill(&q, 4);
    fill(&k, 5);
    const float c[2] = {1.0f, -2.0f};
    for (int64_t b = 0; b < 2; b++)
        for (int64_t j = 0; j < 6; j++)
            for (int64_t h = 0; h < 2; h++)
                for (int64_t x = 0; x < 8; x++)
                    *at(&v, b, j, h, x) = ref_float_to_f16(c[h]);
    ref_problem p = problem(q, k, v, 0, 0);
    double *o = run_ref(&p, REF_32, NULL);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < 5; i++)
            for (int64_t h = 0; h < 4; h++)
                for (int64_t x = 0; x < 8; x++)
                    cr_assert_lt(fabs(o[((b * 5 + i) * 4 + h) * 8 + x] - c[h / 2]), 1e-14,
                                 "head %lld must read KV head %lld", (long long)h, (long long)h / 2);
    free(o);

    /* The same with random V equals running MHA on K/V heads copied out to hq. */
    fill(&v, 6);
    fg_tensor k4 = host_tensor(FG_DTYPE_F16, 2, 6, 4, 8, 0, 0), v4 = host_tensor(FG_DTYPE_F16, 2, 6, 4, 8, 0, 0);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t j = 0; j < 6; j++)
            for (int64_t h = 0; h < 4; h++)
                for (int64_t x = 0; x < 8; x++) {
                    *at(&k4, b, j, h, x) = *at(&k, b, j, h / 2, x);
                    *at(&v4, b, j, h, x) = *at(&v, b, j, h / 2, x);
                }
    for (int causal = 0; causal < 2; causal++) {
        ref_problem pg = problem(q, k, v, 0, causal), pm = problem(q, k4, v4, 0, causal);
        double *lg, *lm;
        double *og = run_ref(&pg, REF_LOWP, &lg), *om = run_ref(&pm, REF_LOWP, &lm);
        cr_assert_eq(memcmp(og, om, 2 * 5 * 4 * 8 * sizeof *og), 0, "GQA differs from copied heads");
        cr_assert_eq(memcmp(lg, lm, 2 * 4 * 5 * sizeof *lg), 0, "GQA LSE differs from copied heads");
        free(og);
        free(om);
        free(lg);
        free(lm);
    }
    free(q.data);
    free(k.data);
    free(v.data);
    free(k4.data);
    free(v4.data);
}

Test(reference, fully_masked_rows_give_zero_and_minus_infinity) {
    for (int mode = 0; mode < 2; mode++) {
        /* causal sq=5 > sk=2: rows 0..2 see no key (row i sees j <= i - 3). */
        fg_tensor q = host_tensor(FG_DTYPE_BF16, 1, 5, 2, 16, 0, 0), k = host_tensor(FG_DTYPE_BF16, 1, 2, 2, 16, 0, 0);
        fg_tensor v = host_tensor(FG_DTYPE_BF16, 1, 2, 2, 16, 0, 0);
        fill(&q, 8);
        fill(&k, 9);
        fill(&v, 10);
        ref_problem p = problem(q, k, v, 0, 1);
        double *lse, *o = run_ref(&p, (ref_mode)mode, &lse);
        for (int64_t i = 0; i < 5; i++)
            for (int64_t h = 0; h < 2; h++) {
                double l = lse[h * 5 + i];
                double norm = 0;
                for (int64_t x = 0; x < 16; x++)
                    norm += fabs(o[(i * 2 + h) * 16 + x]);
                if (i < 3) {
                    cr_assert(isinf(l) && l < 0, "row %lld: LSE %g, expected -inf", (long long)i, l);
                    cr_assert_eq(norm, 0.0, "row %lld must be all zero", (long long)i);
                } else {
                    cr_assert(isfinite(l) && norm > 0, "row %lld sees keys", (long long)i);
                }
            }
        free(o);
        free(lse);

        /* sk = 0: nothing to see anywhere, causal or not. */
        fg_tensor k0 = host_tensor(FG_DTYPE_BF16, 1, 0, 2, 16, 0, 0), v0 = host_tensor(FG_DTYPE_BF16, 1, 0, 2, 16, 0, 0);
        for (int causal = 0; causal < 2; causal++) {
            ref_problem p0 = problem(q, k0, v0, 0, causal);
            double *l0, *o0 = run_ref(&p0, (ref_mode)mode, &l0);
            for (int64_t i = 0; i < 5 * 2 * 16; i++)
                cr_assert_eq(o0[i], 0.0);
            for (int64_t i = 0; i < 2 * 5; i++)
                cr_assert(isinf(l0[i]) && l0[i] < 0);
            free(o0);
            free(l0);
        }
        free(q.data);
        free(k.data);
        free(v.data);
        free(k0.data);
        free(v0.data);
    }
}

/* max|ref_lowp - ref32| on one random problem of dtype dt. */
static double lowp_gap(fg_dtype dt) {
    fg_tensor q = host_tensor(dt, 1, 64, 2, 64, 0, 0), k = host_tensor(dt, 1, 96, 2, 64, 0, 0);
    fg_tensor v = host_tensor(dt, 1, 96, 2, 64, 0, 0);
    fill(&q, 11);
    fill(&k, 12);
    fill(&v, 13);
    ref_problem p = problem(q, k, v, 0, 0);
    double *o32 = run_ref(&p, REF_32, NULL), *olp = run_ref(&p, REF_LOWP, NULL);
    double gap = max_abs_diff(o32, olp, 64 * 2 * 64);
    free(o32);
    free(olp);
    free(q.data);
    free(k.data);
    free(v.data);
    return gap;
}

Test(reference, lowp_differs_from_ref32_by_a_small_nonzero_amount) {
    double g16 = lowp_gap(FG_DTYPE_F16), gb16 = lowp_gap(FG_DTYPE_BF16);
    cr_log_info("max|lowp - ref32|: f16 %.3g, bf16 %.3g", g16, gb16);
    cr_assert(g16 > 1e-6 && g16 < 2e-3, "f16 gap %g is not the size of fp16 rounding", g16);
    cr_assert(gb16 > 1e-5 && gb16 < 2e-2, "bf16 gap %g is not the size of bf16 rounding", gb16);
    cr_assert_gt(gb16, g16, "bf16 keeps 8 bits, fp16 11: its gap must be larger");
}

Test(reference, strided_view_equals_contiguous_copy) {
    for (int layout = 1; layout <= 2; layout++) {
        /* layout 1: padded [b, s, h, d] (every stride larger); layout 2: padded head-major memory. */
        fg_tensor qc = host_tensor(FG_DTYPE_F16, 2, 33, 4, 24, 0, 0), kc = host_tensor(FG_DTYPE_F16, 2, 47, 2, 24, 0, 0);
        fg_tensor vc = host_tensor(FG_DTYPE_F16, 2, 47, 2, 24, 0, 0);
        fg_tensor qs = host_tensor(FG_DTYPE_F16, 2, 33, 4, 24, 8, layout == 2);
        fg_tensor ks = host_tensor(FG_DTYPE_F16, 2, 47, 2, 24, 16, layout == 2);
        fg_tensor vs = host_tensor(FG_DTYPE_F16, 2, 47, 2, 24, 3, layout == 2);
        fill(&qc, 21);
        fill(&kc, 22);
        fill(&vc, 23);
        fill(&qs, 21);
        fill(&ks, 22);
        fill(&vs, 23);
        for (int causal = 0; causal < 2; causal++) {
            ref_problem pc = problem(qc, kc, vc, 0, causal), ps = problem(qs, ks, vs, 0, causal);
            for (int mode = 0; mode < 2; mode++) {
                double *lc, *ls;
                double *oc = run_ref(&pc, (ref_mode)mode, &lc), *os = run_ref(&ps, (ref_mode)mode, &ls);
                cr_assert_eq(memcmp(oc, os, 2 * 33 * 4 * 24 * sizeof *oc), 0, "layout %d mode %d: O differs", layout,
                             mode);
                cr_assert_eq(memcmp(lc, ls, 2 * 4 * 33 * sizeof *lc), 0, "layout %d: LSE differs", layout);
                free(oc);
                free(os);
                free(lc);
                free(ls);
            }
        }
        free(qc.data);
        free(kc.data);
        free(vc.data);
        free(qs.data);
        free(ks.data);
        free(vs.data);
    }
}

Test(reference, matches_naive_loops) {
    static const struct {
        fg_dtype dt;
        int64_t b, sq, sk, hq, hkv, d;
        float scale;
        int causal;
    } cases[] = {
        {FG_DTYPE_F16, 2, 37, 53, 4, 2, 40, 0, 0},  {FG_DTYPE_F16, 1, 53, 37, 4, 1, 40, 0, 1},
        {FG_DTYPE_BF16, 2, 64, 64, 2, 2, 32, 0, 1}, {FG_DTYPE_BF16, 1, 1, 129, 8, 1, 16, 0.7f, 0},
        {FG_DTYPE_F16, 1, 130, 3, 2, 2, 8, 2.0f, 1}, {FG_DTYPE_F16, 3, 200, 70, 1, 1, 24, 0.05f, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fg_tensor q = host_tensor(cases[c].dt, cases[c].b, cases[c].sq, cases[c].hq, cases[c].d, 0, 0);
        fg_tensor k = host_tensor(cases[c].dt, cases[c].b, cases[c].sk, cases[c].hkv, cases[c].d, 0, 0);
        fg_tensor v = host_tensor(cases[c].dt, cases[c].b, cases[c].sk, cases[c].hkv, cases[c].d, 0, 0);
        fill(&q, 100 + c);
        fill(&k, 200 + c);
        fill(&v, 300 + c);
        ref_problem p = problem(q, k, v, cases[c].scale, cases[c].causal);
        int64_t no = cases[c].b * cases[c].sq * cases[c].hq * cases[c].d, nl = cases[c].b * cases[c].hq * cases[c].sq;
        double *on = malloc((size_t)no * sizeof *on), *ln = malloc((size_t)nl * sizeof *ln);
        cr_assert(on && ln);
        for (int mode = 0; mode < 2; mode++) {
            naive(&p, mode, on, ln);
            double *lr, *orf = run_ref(&p, (ref_mode)mode, &lr);
            double eo = max_abs_diff(on, orf, no);
            cr_assert_lt(eo, 1e-12, "case %zu mode %d: O differs from the naive loops by %g", c, mode, eo);
            for (int64_t i = 0; i < nl; i++)
                cr_assert(ln[i] == lr[i] || fabs(ln[i] - lr[i]) < 1e-12, "case %zu: LSE[%lld] %.17g vs naive %.17g", c,
                          (long long)i, lr[i], ln[i]);
            free(orf);
            free(lr);
        }
        free(on);
        free(ln);
        free(q.data);
        free(k.data);
        free(v.data);
    }
}

Test(reference, scale_zero_means_inverse_sqrt_head_dim) {
    fg_tensor q = host_tensor(FG_DTYPE_F16, 1, 20, 2, 64, 0, 0), k = host_tensor(FG_DTYPE_F16, 1, 30, 2, 64, 0, 0);
    fg_tensor v = host_tensor(FG_DTYPE_F16, 1, 30, 2, 64, 0, 0);
    fill(&q, 31);
    fill(&k, 32);
    fill(&v, 33);
    ref_problem p0 = problem(q, k, v, 0, 0), p8 = problem(q, k, v, 0.125f, 0), p2 = problem(q, k, v, 0.25f, 0);
    double *o0 = run_ref(&p0, REF_32, NULL), *o8 = run_ref(&p8, REF_32, NULL), *o2 = run_ref(&p2, REF_32, NULL);
    cr_assert_eq(memcmp(o0, o8, 20 * 2 * 64 * sizeof *o0), 0, "scale 0 must equal 1/sqrt(64) = 0.125");
    cr_assert_gt(max_abs_diff(o0, o2, 20 * 2 * 64), 1e-3, "a different scale must change O");
    free(o0);
    free(o8);
    free(o2);
    free(q.data);
    free(k.data);
    free(v.data);
}

Test(reference, inconsistent_problems_are_refused) {
    fg_tensor q = host_tensor(FG_DTYPE_F16, 1, 4, 4, 8, 0, 0), k = host_tensor(FG_DTYPE_F16, 1, 4, 3, 8, 0, 0);
    fg_tensor v = host_tensor(FG_DTYPE_F16, 1, 4, 3, 8, 0, 0);
    double o[128], lse[16];
    fg_error e;
    ref_problem p = problem(q, k, v, 0, 0);
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT, "3 KV heads for 4 Q heads");
    cr_assert_not_null(strstr(e.msg, "heads"), "%s", e.msg);
    k.shape[2] = v.shape[2] = 2;
    p = problem(q, k, v, 0, 0);
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_OK, "%s", e.msg);
    p.v.dtype = FG_DTYPE_BF16;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(e.msg, "dtype"), "%s", e.msg);
    p = problem(q, k, v, 0, 0);
    p.k.shape[3] = 16;
    p.v.shape[3] = 16;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(e.msg, "head_dim"), "%s", e.msg);
    p = problem(q, k, v, 0, 0);
    p.q.shape[1] = -1;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(e.msg, "q.shape[1]"), "%s", e.msg);
    p = problem(q, k, v, 0, 0);
    p.k.data = NULL;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(e.msg, "k.data"), "%s", e.msg);
    free(q.data);
    free(k.data);
    free(v.data);
}

/* ---- the pass/fail rule ---- */

typedef struct check_fixture {
    fg_tensor q, k, v;   /* inputs */
    ref_problem p;       /* the problem */
    fg_tensor out;       /* an output, initialized to ref_lowp */
    fg_tensor lse;       /* an LSE, initialized to ref32's (as float) */
    float *lse_mem;      /* its storage */
} check_fixture;

/* Random inputs (b=2, sq=40, sk=30, 4 heads over 2, d=32) with out = ref_lowp in a strided view and
 * lse = ref32's LSE as float: an output that must pass. Free with fixture_free. */
static void fixture(check_fixture *f, fg_dtype dt, int causal) {
    f->q = host_tensor(dt, 2, 40, 4, 32, 0, 0);
    f->k = host_tensor(dt, 2, 30, 2, 32, 0, 0);
    f->v = host_tensor(dt, 2, 30, 2, 32, 0, 0);
    fill(&f->q, 51);
    fill(&f->k, 52);
    fill(&f->v, 53);
    f->p = problem(f->q, f->k, f->v, 0, causal);
    double *lse, *o = run_ref(&f->p, REF_LOWP, &lse);
    f->out = host_tensor(dt, 2, 40, 4, 32, 8, 0); /* strided, as a device copy may be */
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < 40; i++)
            for (int64_t h = 0; h < 4; h++)
                for (int64_t x = 0; x < 32; x++)
                    *at(&f->out, b, i, h, x) = ref_from_float(dt, (float)o[((b * 40 + i) * 4 + h) * 32 + x]);
    f->lse_mem = malloc(2 * 4 * 40 * sizeof *f->lse_mem);
    cr_assert_not_null(f->lse_mem);
    for (int i = 0; i < 2 * 4 * 40; i++)
        f->lse_mem[i] = (float)lse[i];
    memset(&f->lse, 0, sizeof f->lse);
    f->lse.data = f->lse_mem;
    f->lse.dtype = FG_DTYPE_F32;
    f->lse.ndim = 3;
    f->lse.shape[0] = 2;
    f->lse.shape[1] = 4;
    f->lse.shape[2] = 40;
    f->lse.stride[0] = 4 * 40;
    f->lse.stride[1] = 40;
    f->lse.stride[2] = 1;
    free(o);
    free(lse);
}

/* Frees what fixture allocated. */
static void fixture_free(check_fixture *f) {
    free(f->q.data);
    free(f->k.data);
    free(f->v.data);
    free(f->out.data);
    free(f->lse_mem);
}

/* ref_check_fwd on the fixture, logging the report line. */
static ref_report check(check_fixture *f) {
    ref_report r;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_check_fwd(&f->p, &f->out, &f->lse, &r, &e), FG_OK, "ref_check_fwd: %s", e.msg);
    char line[512];
    cr_log_info("%s", ref_report_format(&r, line, sizeof line));
    return r;
}

Test(check, the_lowp_reference_itself_passes) {
    for (int dt = 0; dt < 2; dt++) {
        check_fixture f;
        fixture(&f, dt ? FG_DTYPE_BF16 : FG_DTYPE_F16, dt);
        ref_report r = check(&f);
        cr_assert(r.pass, "ref_lowp must pass its own bound");
        cr_assert_eq(r.max_err, r.max_lowp_err, "out == ref_lowp, so both maxima are the same");
        cr_assert_gt(r.max_lowp_err, 0.0);
        cr_assert_eq(r.bound, 2 * r.max_lowp_err + 1e-5);
        cr_assert_eq(r.nonfinite, 0);
        cr_assert(r.lse_checked && r.lse_bad == 0);
        cr_assert_lt(r.lse_max_err, 1e-5, "float LSE is within float rounding");
        fixture_free(&f);
    }
}

Test(check, an_error_above_the_bound_fails_and_is_located) {
    check_fixture f;
    fixture(&f, FG_DTYPE_F16, 0);
    uint16_t *e = at(&f.out, 1, 17, 2, 5);
    *e = ref_float_to_f16(ref_f16_to_float(*e) + 0.05f);
    ref_report r = check(&f);
    cr_assert_not(r.pass);
    cr_assert(r.worst[0] == 1 && r.worst[1] == 17 && r.worst[2] == 2 && r.worst[3] == 5,
              "worst at [%lld,%lld,%lld,%lld]", (long long)r.worst[0], (long long)r.worst[1], (long long)r.worst[2],
              (long long)r.worst[3]);
    cr_assert_gt(r.max_err, 0.04);
    fixture_free(&f);
}

Test(check, a_wrong_scale_fails) {
    /* A subtle bug: the kernel used a softmax scale 1% off. Every element moves a little. */
    check_fixture f;
    fixture(&f, FG_DTYPE_F16, 1);
    ref_problem wrong = f.p;
    wrong.softmax_scale = (float)(1.01 / sqrt(32.0));
    double *o = run_ref(&wrong, REF_LOWP, NULL);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < 40; i++)
            for (int64_t h = 0; h < 4; h++)
                for (int64_t x = 0; x < 32; x++)
                    *at(&f.out, b, i, h, x) = ref_float_to_f16((float)o[((b * 40 + i) * 4 + h) * 32 + x]);
    ref_report r = check(&f);
    cr_assert_not(r.pass, "a 1%% scale error must exceed the bound (err %g, bound %g)", r.max_err, r.bound);
    free(o);
    fixture_free(&f);
}

Test(check, nan_or_inf_output_fails) {
    check_fixture f;
    fixture(&f, FG_DTYPE_BF16, 0);
    *at(&f.out, 0, 3, 1, 31) = ref_float_to_bf16(NAN);
    *at(&f.out, 1, 39, 3, 0) = ref_float_to_bf16(INFINITY);
    ref_report r = check(&f);
    cr_assert_not(r.pass);
    cr_assert_eq(r.nonfinite, 2);
    cr_assert(r.first_nonfinite[0] == 0 && r.first_nonfinite[1] == 3 && r.first_nonfinite[2] == 1 &&
              r.first_nonfinite[3] == 31);
    fixture_free(&f);
}

Test(check, lse_rules) {
    check_fixture f;
    fixture(&f, FG_DTYPE_F16, 1); /* causal sq=40 > sk=30: rows 0..9 are fully masked */
    float *L = f.lse_mem;
    cr_assert(isinf(L[0]) && L[0] < 0 && isfinite(L[10]), "fixture: row 0 masked, row 10 not");

    ref_report r = check(&f);
    cr_assert(r.pass);

    L[1 * 40 + 0] = 0.0f; /* [0, 1, 0]: masked row given a finite LSE */
    r = check(&f);
    cr_assert(!r.pass && r.lse_bad == 1);
    cr_assert(r.lse_first_bad[0] == 0 && r.lse_first_bad[1] == 1 && r.lse_first_bad[2] == 0);
    L[1 * 40 + 0] = -INFINITY;

    L[(1 * 4 + 2) * 40 + 20] = -INFINITY; /* a visible row given -inf */
    r = check(&f);
    cr_assert(!r.pass && r.lse_bad == 1);
    L[(1 * 4 + 2) * 40 + 20] = NAN;
    r = check(&f);
    cr_assert(!r.pass && r.lse_bad == 1);
    cr_assert(r.lse_first_bad[0] == 1 && r.lse_first_bad[1] == 2 && r.lse_first_bad[2] == 20);

    fixture_free(&f);
    fixture(&f, FG_DTYPE_F16, 1);
    L = f.lse_mem;
    L[(0 * 4 + 3) * 40 + 39] += 1e-2f; /* off by more than the tolerance */
    r = check(&f);
    cr_assert(!r.pass && r.lse_bad == 1 && r.lse_max_err > 9e-3);
    cr_assert(r.lse_worst[0] == 0 && r.lse_worst[1] == 3 && r.lse_worst[2] == 39);
    fixture_free(&f);
}
