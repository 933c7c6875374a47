/* test_reference.c: the CPU reference (reference/, reference.h) checked against hand-computed cases, exhaustive
 * conversion checks and a naive loop implementation. Needs no GPU; runs in CI. The GPU suite trusts this
 * reference, so every semantic rule of the forward pass (causal alignment, GQA, masked rows, scale,
 * strides) is pinned here first. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"

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

/* Random contiguous Q [b, sq, hq, d], K and V [b, sk, hkv, d] of dtype dt, filled from seeds sq_seed,
 * k_seed and v_seed (ref_fill_normal). Free with qkv_free. */
static void qkv_random(fg_tensor *q, fg_tensor *k, fg_tensor *v, fg_dtype dt, int64_t b, int64_t sq, int64_t sk,
                       int64_t hq, int64_t hkv, int64_t d, uint64_t q_seed, uint64_t k_seed, uint64_t v_seed) {
    *q = host_tensor(dt, b, sq, hq, d, 0, 0);
    *k = host_tensor(dt, b, sk, hkv, d, 0, 0);
    *v = host_tensor(dt, b, sk, hkv, d, 0, 0);
    fill(q, q_seed);
    fill(k, k_seed);
    fill(v, v_seed);
}

/* Frees the storage of three host tensors (qkv_random's, or host_tensor's). */
static void qkv_free(fg_tensor *q, fg_tensor *k, fg_tensor *v) {
    free(q->data);
    free(k->data);
    free(v->data);
}

/* A ref_problem from its parts. */
static ref_problem problem(fg_tensor q, fg_tensor k, fg_tensor v, float scale, int causal) {
    ref_problem p;
    memset(&p, 0, sizeof p); /* no descale factors */
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

/* The forward pass written as plainly as possible, independent of reference/forward.c's row/unit machinery. */
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
        qkv_free(&q, &k, &v);
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
    qkv_free(&q, &k, &v);
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
        qkv_free(&q, &k, &v);
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
    qkv_free(&q, &k, &v);
    free(k4.data);
    free(v4.data);
}

Test(reference, fully_masked_rows_give_zero_and_minus_infinity) {
    for (int mode = 0; mode < 2; mode++) {
        /* causal sq=5 > sk=2: rows 0..2 see no key (row i sees j <= i - 3). */
        fg_tensor q, k, v;
        qkv_random(&q, &k, &v, FG_DTYPE_BF16, 1, 5, 2, 2, 2, 16, 8, 9, 10);
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
        qkv_free(&q, &k, &v);
        free(k0.data);
        free(v0.data);
    }
}

/* max|ref_lowp - ref32| on one random problem of dtype dt. */
static double lowp_gap(fg_dtype dt) {
    fg_tensor q, k, v;
    qkv_random(&q, &k, &v, dt, 1, 64, 96, 2, 2, 64, 11, 12, 13);
    ref_problem p = problem(q, k, v, 0, 0);
    double *o32 = run_ref(&p, REF_32, NULL), *olp = run_ref(&p, REF_LOWP, NULL);
    double gap = max_abs_diff(o32, olp, 64 * 2 * 64);
    free(o32);
    free(olp);
    qkv_free(&q, &k, &v);
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
        fg_tensor q, k, v;
        qkv_random(&q, &k, &v, cases[c].dt, cases[c].b, cases[c].sq, cases[c].sk, cases[c].hq, cases[c].hkv,
                   cases[c].d, 100 + c, 200 + c, 300 + c);
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
        qkv_free(&q, &k, &v);
    }
}

Test(reference, scale_zero_means_inverse_sqrt_head_dim) {
    fg_tensor q, k, v;
    qkv_random(&q, &k, &v, FG_DTYPE_F16, 1, 20, 30, 2, 2, 64, 31, 32, 33);
    ref_problem p0 = problem(q, k, v, 0, 0), p8 = problem(q, k, v, 0.125f, 0), p2 = problem(q, k, v, 0.25f, 0);
    double *o0 = run_ref(&p0, REF_32, NULL), *o8 = run_ref(&p8, REF_32, NULL), *o2 = run_ref(&p2, REF_32, NULL);
    cr_assert_eq(memcmp(o0, o8, 20 * 2 * 64 * sizeof *o0), 0, "scale 0 must equal 1/sqrt(64) = 0.125");
    cr_assert_gt(max_abs_diff(o0, o2, 20 * 2 * 64), 1e-3, "a different scale must change O");
    free(o0);
    free(o8);
    free(o2);
    qkv_free(&q, &k, &v);
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
    qkv_free(&q, &k, &v);
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
    qkv_random(&f->q, &f->k, &f->v, dt, 2, 40, 30, 4, 2, 32, 51, 52, 53);
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
    qkv_free(&f->q, &f->k, &f->v);
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

/* ================================================================================================ */
/* FP8                                                                                               */
/* ================================================================================================ */

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

/* An fp8 host tensor [b, s, h, d]. vt != 0 lays it out key-major like the FP8 kernel's V (a [b, h, d, s']
 * buffer, s' = s rounded up to 16); the padding between and after rows holds NaN codes, which must never
 * reach a result. */
static fg_tensor host_fp8(fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int vt) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = 4;
    t.shape[0] = b;
    t.shape[1] = s;
    t.shape[2] = h;
    t.shape[3] = d;
    if (vt) {
        int64_t sp = (s + 15) / 16 * 16 + 16; /* one more block of padding to catch reads past s */
        t.stride[1] = 1;
        t.stride[3] = sp;
        t.stride[2] = d * sp;
        t.stride[0] = h * d * sp;
    } else {
        t.stride[3] = 1;
        t.stride[2] = d;
        t.stride[1] = h * d;
        t.stride[0] = s * h * d;
    }
    size_t total = (size_t)(b * t.stride[0]) + 1;
    t.data = malloc(total);
    cr_assert_not_null(t.data);
    memset(t.data, 0x7F, total);
    return t;
}

/* A host fp32 descale view: [1] (per_head 0) or [b, hkv] (per_head 1) with transposed strides (h
 * outermost) to exercise them. Values from vals (b * hkv of them, row-major [b][h]; [1] takes vals[0]). */
static fg_tensor host_descale(const float *vals, int64_t b, int64_t hkv, int per_head) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = FG_DTYPE_F32;
    float *mem = malloc((size_t)(b * hkv + 1) * sizeof *mem);
    cr_assert_not_null(mem);
    t.data = mem;
    if (!per_head) {
        t.ndim = 1;
        t.shape[0] = 1;
        t.stride[0] = 1;
        mem[0] = vals[0];
        return t;
    }
    t.ndim = 2;
    t.shape[0] = b;
    t.shape[1] = hkv;
    t.stride[0] = 1;
    t.stride[1] = b;
    for (int64_t i = 0; i < b; i++)
        for (int64_t h = 0; h < hkv; h++)
            mem[i * t.stride[0] + h * t.stride[1]] = vals[i * hkv + h];
    return t;
}

/* A contiguous bf16 copy of an fp8 view with each element times the descale of its (batch, KV head):
 * exact when the factors are powers of two (an fp8 value has at most 4 significant bits). For Q, `group`
 * maps head h to KV head h / group; desc may be NULL (1). */
static fg_tensor dequant_bf16(const fg_tensor *t, const float *desc, int64_t hkv, int64_t group) {
    fg_tensor c = host_tensor(FG_DTYPE_BF16, t->shape[0], t->shape[1], t->shape[2], t->shape[3], 0, 0);
    for (int64_t b = 0; b < t->shape[0]; b++)
        for (int64_t s = 0; s < t->shape[1]; s++)
            for (int64_t h = 0; h < t->shape[2]; h++)
                for (int64_t x = 0; x < t->shape[3]; x++) {
                    uint8_t code = ((const uint8_t *)t->data)[b * t->stride[0] + s * t->stride[1] + h * t->stride[2] +
                                                              x * t->stride[3]];
                    float v = ref_to_float(t->dtype, code) * (desc ? desc[b * hkv + h / group] : 1.0f);
                    uint16_t bits = ref_float_to_bf16(v);
                    cr_assert_eq(ref_bf16_to_float(bits), v, "dequantized value %a is not exact in bf16", v);
                    *at(&c, b, s, h, x) = bits;
                }
    return c;
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

/* The FP8 lowp rule written out plainly from reference.h's formula (exp2, log2(e), the 2^8 shift), for
 * one problem without masking or GQA subtleties beyond h / group: O in double before the final rounding. */
static void naive_fp8_lowp(const ref_problem *p, double *o) {
    int64_t B = p->q.shape[0], SQ = p->q.shape[1], HQ = p->q.shape[2], D = p->q.shape[3];
    int64_t SK = p->k.shape[1], HKV = p->k.shape[2];
    double scale = p->softmax_scale != 0 ? p->softmax_scale : 1.0 / sqrt((double)D);
    double *s = malloc((size_t)SK * sizeof *s);
    cr_assert_not_null(s);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HQ; h++) {
            int64_t kh = h / (HQ / HKV);
            const float *qd = p->q_descale.data, *kd = p->k_descale.data, *vd = p->v_descale.data;
            double c = scale * (qd ? qd[0] : 1) * (kd ? kd[0] : 1), vdesc = vd ? vd[0] : 1;
            for (int64_t i = 0; i < SQ; i++) {
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j < SK; j++) {
                    double dot = 0;
                    for (int64_t x = 0; x < D; x++) {
                        const uint8_t *qe = (const uint8_t *)p->q.data, *ke = (const uint8_t *)p->k.data;
                        dot += (double)ref_to_float(p->q.dtype, qe[b * p->q.stride[0] + i * p->q.stride[1] +
                                                                   h * p->q.stride[2] + x * p->q.stride[3]]) *
                               ref_to_float(p->k.dtype, ke[b * p->k.stride[0] + j * p->k.stride[1] +
                                                            kh * p->k.stride[2] + x * p->k.stride[3]]);
                    }
                    s[j] = c * dot;
                    m = fmax(m, s[j]);
                }
                for (int64_t j = 0; j < SK; j++) {
                    float unrounded = (float)exp2((s[j] - m) * 1.4426950408889634 + 8);
                    l += p->fp8_sum_rounded ? ref_e4m3_to_float(ref_float_to_e4m3(unrounded, 1))
                                            : exp2((s[j] - m) * 1.4426950408889634 + 8);
                }
                for (int64_t x = 0; x < D; x++) {
                    double acc = 0;
                    for (int64_t j = 0; j < SK; j++) {
                        float unrounded = (float)exp2((s[j] - m) * 1.4426950408889634 + 8);
                        double pj = ref_e4m3_to_float(ref_float_to_e4m3(unrounded, 1));
                        const uint8_t *ve = (const uint8_t *)p->v.data;
                        acc += pj * ref_to_float(p->v.dtype, ve[b * p->v.stride[0] + j * p->v.stride[1] +
                                                                kh * p->v.stride[2] + x * p->v.stride[3]]);
                    }
                    o[((b * SQ + i) * HQ + h) * D + x] = acc * vdesc / l;
                }
            }
        }
    free(s);
}

/* An fp8 problem: q [b, sq, hq, d], k and v [b, sk, hkv, d] (V key-major), filled from seeds; out bf16. */
static ref_problem fp8_problem(fg_dtype dt, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d) {
    fg_tensor q = host_fp8(dt, b, sq, hq, d, 0), k = host_fp8(dt, b, sk, hkv, d, 0), v = host_fp8(dt, b, sk, hkv, d, 1);
    fill(&q, 61);
    fill(&k, 62);
    fill(&v, 63);
    ref_problem p = problem(q, k, v, 0, 0);
    p.out_dtype = FG_DTYPE_BF16;
    return p;
}

/* Frees an fp8_problem's tensors and descale views. */
static void fp8_problem_free(ref_problem *p) {
    free(p->q.data);
    free(p->k.data);
    free(p->v.data);
    free(p->q_descale.data);
    free(p->k_descale.data);
    free(p->v_descale.data);
}

Test(reference, fp8_lowp_follows_the_kernel_formula_and_differs_plausibly_from_ref32) {
    for (int f = 0; f < 2; f++) {
        fg_dtype dt = f ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3;
        ref_problem p = fp8_problem(dt, 1, 40, 300, 4, 2, 64);
        float one_q = 0.75f, one_k = 1.25f, one_v = 0.5f;
        p.q_descale = host_descale(&one_q, 1, 2, 0);
        p.k_descale = host_descale(&one_k, 1, 2, 0);
        p.v_descale = host_descale(&one_v, 1, 2, 0);
        int64_t n = 40 * 4 * 64;
        double *lse32, *lselow;
        double *o32 = run_ref(&p, REF_32, &lse32), *olow = run_ref(&p, REF_LOWP, &lselow);
        double *naive_o = malloc((size_t)n * sizeof *naive_o);
        cr_assert_not_null(naive_o);
        naive_fp8_lowp(&p, naive_o);
        double gap = max_abs_diff(olow, o32, n), worst_ulp = 0, omax = 0;
        for (int64_t i = 0; i < n; i++) {
            /* the reference rounds O to bf16; the plain formula is O before rounding: within bf16's unit
             * roundoff, 2^-8 relative (exp vs exp2 moves only the last bits of a double) */
            double e = fabs(olow[i] - naive_o[i]) / fmax(fabs(naive_o[i]), 1e-30);
            worst_ulp = fmax(worst_ulp, e);
            omax = fmax(omax, fabs(o32[i]));
        }
        cr_log_info("%s: max|lowp - ref32| %.3g (max|O| %.3g), lowp vs the plain formula %.3g relative",
                    f ? "e5m2" : "e4m3", gap, omax, worst_ulp);
        cr_assert_leq(worst_ulp, 0x1p-8, "REF_LOWP departs from the kernel formula by %g", worst_ulp);
        /* P in e4m3 keeps 3 mantissa bits: the gap is far above bf16 rounding of O, far below O itself */
        cr_assert(gap > 1e-3 * omax && gap < 0.1 * omax, "gap %g for max|O| %g", gap, omax);
        cr_assert_eq(max_abs_diff(lse32, lselow, 40 * 4), 0.0, "the LSE is the same in both modes");
        /* fp8_sum_rounded (the sm_90a kernel at head_dim 64/128): O divided by the sum of the rounded P,
         * again as the plain formula has it; a different O (the sums differ), the same LSE */
        p.fp8_sum_rounded = 1;
        double *lse_r, *olow_r = run_ref(&p, REF_LOWP, &lse_r);
        naive_fp8_lowp(&p, naive_o);
        worst_ulp = 0;
        for (int64_t i = 0; i < n; i++)
            worst_ulp = fmax(worst_ulp, fabs(olow_r[i] - naive_o[i]) / fmax(fabs(naive_o[i]), 1e-30));
        cr_assert_leq(worst_ulp, 0x1p-8, "REF_LOWP with rounded sums departs from its formula by %g", worst_ulp);
        double moved = max_abs_diff(olow_r, olow, n), gap_r = max_abs_diff(olow_r, o32, n);
        cr_log_info("%s, rounded sums: max|lowp - ref32| %.3g, moved %.3g from the unrounded-sum lowp",
                    f ? "e5m2" : "e4m3", gap_r, moved);
        cr_assert(moved > 0 && gap_r < 0.1 * omax, "moved %g, gap %g for max|O| %g", moved, gap_r, omax);
        cr_assert_eq(max_abs_diff(lse_r, lselow, 40 * 4), 0.0, "the LSE keeps the unrounded sum");
        free(olow_r);
        free(lse_r);
        free(o32);
        free(olow);
        free(lse32);
        free(lselow);
        free(naive_o);
        fp8_problem_free(&p);
    }
}

Test(reference, fp8_ref32_is_exact_math_on_the_dequantized_inputs) {
    /* Power-of-two factors per (batch, KV head) make the dequantized inputs exact in bf16, so REF_32 of
     * the fp8 problem must equal REF_32 of the bf16 problem holding them (GQA 2: Q head h takes KV head
     * h / 2's factor). */
    const int64_t b = 2, sq = 33, sk = 70, hq = 4, hkv = 2, d = 32;
    const float qd[4] = {0.5f, 2.0f, 1.0f, 0.25f}, kd[4] = {4.0f, 0.125f, 1.0f, 2.0f}, vd[4] = {2.0f, 0.5f, 8.0f, 1.0f};
    for (int causal = 0; causal < 2; causal++) {
        ref_problem p = fp8_problem(FG_DTYPE_E4M3, b, sq, sk, hq, hkv, d);
        p.causal = causal;
        p.softmax_scale = 0.3f;
        p.q_descale = host_descale(qd, b, hkv, 1);
        p.k_descale = host_descale(kd, b, hkv, 1);
        p.v_descale = host_descale(vd, b, hkv, 1);
        fg_tensor q16 = dequant_bf16(&p.q, qd, hkv, hq / hkv), k16 = dequant_bf16(&p.k, kd, hkv, 1);
        fg_tensor v16 = dequant_bf16(&p.v, vd, hkv, 1);
        ref_problem p16 = problem(q16, k16, v16, 0.3f, causal);
        double *l8, *l16, *o8 = run_ref(&p, REF_32, &l8), *o16 = run_ref(&p16, REF_32, &l16);
        double diff = max_abs_diff(o8, o16, b * sq * hq * d), ldiff = max_abs_diff(l8, l16, b * hq * sq);
        cr_assert_lt(diff, 1e-12, "O differs by %g", diff);
        cr_assert_lt(ldiff, 1e-12, "LSE differs by %g", ldiff);
        free(o8);
        free(o16);
        free(l8);
        free(l16);
        free(q16.data);
        free(k16.data);
        free(v16.data);
        fp8_problem_free(&p);
    }
}

Test(reference, fp8_descale_per_tensor_equals_the_same_value_per_head) {
    const int64_t b = 2, hkv = 3;
    const float one[1] = {0.37f}, two[1] = {1.9f}, three[1] = {0.041f};
    float q6[6], k6[6], v6[6];
    for (int i = 0; i < 6; i++)
        q6[i] = one[0], k6[i] = two[0], v6[i] = three[0];
    ref_problem a = fp8_problem(FG_DTYPE_E5M2, b, 20, 50, 6, hkv, 64);
    ref_problem h = a; /* the same tensors, per-head factors */
    a.q_descale = host_descale(one, b, hkv, 0);
    a.k_descale = host_descale(two, b, hkv, 0);
    a.v_descale = host_descale(three, b, hkv, 0);
    h.q_descale = host_descale(q6, b, hkv, 1);
    h.k_descale = host_descale(k6, b, hkv, 1);
    h.v_descale = host_descale(v6, b, hkv, 1);
    for (int mode = 0; mode < 2; mode++) {
        double *la, *lh, *oa = run_ref(&a, (ref_mode)mode, &la), *oh = run_ref(&h, (ref_mode)mode, &lh);
        cr_assert_eq(memcmp(oa, oh, (size_t)(b * 20 * 6 * 64) * sizeof *oa), 0, "mode %d: O differs", mode);
        cr_assert_eq(memcmp(la, lh, (size_t)(b * 6 * 20) * sizeof *la), 0, "mode %d: LSE differs", mode);
        free(oa);
        free(oh);
        free(la);
        free(lh);
    }
    /* no factors at all is the same as factors of 1 */
    ref_problem n = a;
    memset(&n.q_descale, 0, sizeof n.q_descale);
    memset(&n.k_descale, 0, sizeof n.k_descale);
    memset(&n.v_descale, 0, sizeof n.v_descale);
    ref_problem u = n;
    const float unit[6] = {1, 1, 1, 1, 1, 1};
    u.q_descale = host_descale(unit, b, hkv, 1);
    double *on = run_ref(&n, REF_LOWP, NULL), *ou = run_ref(&u, REF_LOWP, NULL);
    cr_assert_eq(memcmp(on, ou, (size_t)(b * 20 * 6 * 64) * sizeof *on), 0, "NULL factors mean 1");
    free(on);
    free(ou);
    free(u.q_descale.data);
    free(h.q_descale.data);
    free(h.k_descale.data);
    free(h.v_descale.data);
    fp8_problem_free(&a);
}

/* A bf16 host copy of a contiguous double O [b, sq, h, d]. */
static fg_tensor bf16_of(const double *o, int64_t b, int64_t sq, int64_t h, int64_t d) {
    fg_tensor t = host_tensor(FG_DTYPE_BF16, b, sq, h, d, 0, 0);
    for (int64_t i = 0; i < b * sq * h * d; i++)
        ((uint16_t *)t.data)[i] = ref_float_to_bf16((float)o[i]);
    return t;
}

Test(check, fp8_outputs_are_judged_in_the_output_dtype) {
    ref_problem p = fp8_problem(FG_DTYPE_E4M3, 2, 40, 100, 4, 2, 64);
    const float v[4] = {0.5f, 0.25f, 1.5f, 3.0f};
    p.v_descale = host_descale(v, 2, 2, 1);
    p.causal = 1;
    double *olow = run_ref(&p, REF_LOWP, NULL), *o32 = run_ref(&p, REF_32, NULL);
    fg_tensor out = bf16_of(olow, 2, 40, 4, 64), good = bf16_of(o32, 2, 40, 4, 64);
    ref_report r;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_check_fwd(&p, &out, NULL, &r, &e), FG_OK, "%s", e.msg);
    cr_assert(r.pass && r.max_err == r.max_lowp_err && r.max_err > 0, "the lowp reference passes its own bound");
    /* a kernel that forgot v_descale is far off */
    fg_tensor saved = p.v_descale;
    memset(&p.v_descale, 0, sizeof p.v_descale);
    double *forgot = run_ref(&p, REF_LOWP, NULL);
    p.v_descale = saved;
    fg_tensor bad = bf16_of(forgot, 2, 40, 4, 64);
    cr_assert_eq(ref_check_fwd(&p, &bad, NULL, &r, &e), FG_OK, "%s", e.msg);
    cr_assert_not(r.pass, "an output without v_descale must fail");
    /* RMSE against REF_32: 0 <= rmse(ref32 rounded to bf16) < rmse(lowp) <= max error; NaN propagates */
    double r_good = ref_rmse_fwd(&p, &good, &e), r_low = ref_rmse_fwd(&p, &out, &e), r_bad = ref_rmse_fwd(&p, &bad, &e);
    cr_log_info("fp8 RMSE vs REF_32: ref32 in bf16 %.3g, lowp %.3g, without v_descale %.3g", r_good, r_low, r_bad);
    cr_assert(r_good >= 0 && r_good < r_low && r_low <= r.max_lowp_err && r_low < r_bad, "%g %g %g", r_good, r_low,
              r_bad);
    ((uint16_t *)out.data)[77] = ref_float_to_bf16(NAN);
    cr_assert(isnan(ref_rmse_fwd(&p, &out, &e)), "a NaN output gives a NaN RMSE");
    /* the output's dtype is the problem's out_dtype */
    out.dtype = FG_DTYPE_F16;
    fg_error_clear(&e);
    cr_assert_eq(ref_check_fwd(&p, &out, NULL, &r, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "out.dtype"), "%s", e.msg);
    cr_assert_eq(ref_rmse_fwd(&p, &out, &e), -1.0);
    free(olow);
    free(o32);
    free(forgot);
    free(out.data);
    free(good.data);
    free(bad.data);
    fp8_problem_free(&p);
}

Test(check, rmse_of_16_bit_outputs) {
    check_fixture f;
    fixture(&f, FG_DTYPE_F16, 1);
    fg_error e;
    fg_error_clear(&e);
    double r = ref_rmse_fwd(&f.p, &f.out, &e);
    ref_report rep = check(&f);
    cr_assert(r > 0 && r <= rep.max_err, "rmse %g, max error %g", r, rep.max_err);
    fg_tensor empty = f.out;
    empty.shape[1] = 0;
    ref_problem pe = f.p;
    pe.q.shape[1] = 0;
    cr_assert_eq(ref_rmse_fwd(&pe, &empty, &e), 0.0, "an empty output has no error");
    cr_assert_eq(ref_rmse_fwd(&f.p, NULL, &e), -1.0);
    fixture_free(&f);
}

Test(reference, fp8_inconsistent_problems_are_refused) {
    ref_problem p = fp8_problem(FG_DTYPE_E4M3, 1, 4, 8, 2, 1, 32);
    double o[256], lse[8];
    fg_error e;
    p.out_dtype = FG_DTYPE_E4M3;
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "out_dtype"), "%s", e.msg);
    p.out_dtype = FG_DTYPE_F16;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_OK, "%s", e.msg);
    const float bad[3] = {1, 1, 1};
    p.k_descale = host_descale(bad, 1, 3, 1); /* [1, 3] for one KV head */
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "k_descale"), "%s", e.msg);
    p.k_descale.dtype = FG_DTYPE_BF16;
    p.k_descale.shape[1] = 1;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    p.k_descale.dtype = FG_DTYPE_F32;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_OK, "%s", e.msg);
    p.v.dtype = FG_DTYPE_E5M2;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT, "e4m3 Q/K with e5m2 V");
    p.v.dtype = FG_DTYPE_E4M3;
    /* descale factors with 16-bit inputs are a mistake */
    fg_tensor q16 = host_tensor(FG_DTYPE_F16, 1, 4, 2, 32, 0, 0), kv16 = host_tensor(FG_DTYPE_F16, 1, 8, 1, 32, 0, 0);
    ref_problem h = problem(q16, kv16, kv16, 0, 0);
    h.q_descale = p.k_descale;
    cr_assert_eq(ref_attention_fwd(&h, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "fp8"), "%s", e.msg);
    free(q16.data);
    free(kv16.data);
    fp8_problem_free(&p);
}

/* ================================================================================================ */
/* Backward                                                                                          */
/* ================================================================================================ */

/* An F32 host view [b, hq, sq] of a contiguous double LSE [b, hq, sq]. pad > 0 makes it a strided slice
 * (NaN in the padding); transposed != 0 stores it [b, sq, hq] in memory. */
static fg_tensor lse_view(const double *lse, int64_t b, int64_t hq, int64_t sq, int64_t pad, int transposed) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = FG_DTYPE_F32;
    t.ndim = 3;
    t.shape[0] = b;
    t.shape[1] = hq;
    t.shape[2] = sq;
    if (transposed) {
        t.stride[1] = 1 + pad;
        t.stride[2] = hq * t.stride[1] + pad;
        t.stride[0] = sq * t.stride[2] + pad;
    } else {
        t.stride[2] = 1 + pad;
        t.stride[1] = sq * t.stride[2] + pad;
        t.stride[0] = hq * t.stride[1] + pad;
    }
    int64_t total = b * t.stride[0] + 1;
    float *mem = malloc((size_t)total * sizeof *mem);
    cr_assert_not_null(mem);
    for (int64_t i = 0; i < total; i++)
        mem[i] = NAN;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < hq; h++)
            for (int64_t i = 0; i < sq; i++)
                mem[bi * t.stride[0] + h * t.stride[1] + i * t.stride[2]] = (float)lse[(bi * hq + h) * sq + i];
    t.data = mem;
    return t;
}

/* The LSE element [b, h, i] of an F32 view. */
static float *lse_at_view(const fg_tensor *t, int64_t b, int64_t h, int64_t i) {
    return (float *)t->data + b * t->stride[0] + h * t->stride[1] + i * t->stride[2];
}

/* A host tensor like q (same dtype and shape, contiguous unless pad / bhsd) holding the contiguous
 * double array a rounded to the dtype. */
static fg_tensor tensor_of(const double *a, fg_dtype dt, const int64_t *shape, int64_t pad, int bhsd) {
    fg_tensor t = host_tensor(dt, shape[0], shape[1], shape[2], shape[3], pad, bhsd);
    for (int64_t b = 0; b < shape[0]; b++)
        for (int64_t s = 0; s < shape[1]; s++)
            for (int64_t h = 0; h < shape[2]; h++)
                for (int64_t x = 0; x < shape[3]; x++)
                    *at(&t, b, s, h, x) =
                        ref_from_float(dt, (float)a[((b * shape[1] + s) * shape[2] + h) * shape[3] + x]);
    return t;
}

/* A backward problem on q, k, v with dO filled from `seed`, O = the forward's ref_lowp output in the input
 * dtype and the LSE = the forward's (ref32) as float, as a kernel's forward would leave them. Free with
 * bwd_problem_free (which frees o, d_o and the LSE, not q, k, v). */
static ref_bwd_problem bwd_problem(fg_tensor q, fg_tensor k, fg_tensor v, float scale, int causal, uint64_t seed) {
    ref_bwd_problem p;
    memset(&p, 0, sizeof p);
    p.fwd = problem(q, k, v, scale, causal);
    double *lse, *o = run_ref(&p.fwd, REF_LOWP, &lse);
    p.o = tensor_of(o, q.dtype, q.shape, 0, 0);
    p.d_o = host_tensor(q.dtype, q.shape[0], q.shape[1], q.shape[2], q.shape[3], 0, 0);
    fill(&p.d_o, seed);
    p.lse = lse_view(lse, q.shape[0], q.shape[2], q.shape[1], 0, 0);
    free(o);
    free(lse);
    return p;
}

/* Frees what bwd_problem allocated. */
static void bwd_problem_free(ref_bwd_problem *p) {
    free(p->o.data);
    free(p->d_o.data);
    free(p->lse.data);
}

/* Gradients as ref_attention_bwd writes them (contiguous doubles) and their element counts. */
typedef struct grads {
    double *dq, *dk, *dv, *delta;
    int64_t nq, nk, nrow;
} grads;

/* Allocates grads for p (NaN-filled, so that an element never written shows). */
static grads grads_alloc(const ref_bwd_problem *p) {
    grads g;
    g.nq = p->fwd.q.shape[0] * p->fwd.q.shape[1] * p->fwd.q.shape[2] * p->fwd.q.shape[3];
    g.nk = p->fwd.k.shape[0] * p->fwd.k.shape[1] * p->fwd.k.shape[2] * p->fwd.k.shape[3];
    g.nrow = p->fwd.q.shape[0] * p->fwd.q.shape[2] * p->fwd.q.shape[1];
    g.dq = malloc((size_t)(g.nq + 1) * sizeof *g.dq);
    g.dk = malloc((size_t)(g.nk + 1) * sizeof *g.dk);
    g.dv = malloc((size_t)(g.nk + 1) * sizeof *g.dv);
    g.delta = malloc((size_t)(g.nrow + 1) * sizeof *g.delta);
    cr_assert(g.dq && g.dk && g.dv && g.delta, "out of memory");
    for (int64_t i = 0; i <= g.nq; i++)
        g.dq[i] = NAN;
    for (int64_t i = 0; i <= g.nk; i++)
        g.dk[i] = g.dv[i] = NAN;
    for (int64_t i = 0; i <= g.nrow; i++)
        g.delta[i] = NAN;
    return g;
}

/* Frees grads. */
static void grads_free(grads *g) {
    free(g->dq);
    free(g->dk);
    free(g->dv);
    free(g->delta);
}

/* ref_attention_bwd in `mode`, failing the test on error. */
static grads run_bwd(const ref_bwd_problem *p, ref_mode mode) {
    grads g = grads_alloc(p);
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_bwd(p, mode, g.dq, g.dk, g.dv, g.delta, &e), FG_OK, "ref_attention_bwd: %s", e.msg);
    return g;
}

/* max |a[i]| over n elements. */
static double max_abs(const double *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* 1 when every one of n elements is finite. */
static int all_finite(const double *a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(a[i]))
            return 0;
    return 1;
}

/* The backward pass written as plainly as possible from reference.h's formulas, independent of
 * reference/backward.c's passes and tiles: the whole P matrix of each (batch, head), then every gradient. */
static void naive_bwd(const ref_bwd_problem *p, int lowp, grads *g) {
    const fg_tensor *Q = &p->fwd.q, *K = &p->fwd.k, *V = &p->fwd.v;
    int64_t B = Q->shape[0], SQ = Q->shape[1], HQ = Q->shape[2], D = Q->shape[3];
    int64_t SK = K->shape[1], HKV = K->shape[2], G = HQ / HKV;
    double scale = p->fwd.softmax_scale != 0 ? p->fwd.softmax_scale : 1.0 / sqrt((double)D);
    fg_dtype dt = Q->dtype;
    double *P = malloc((size_t)(SQ * SK + 1) * sizeof *P), *dS = malloc((size_t)(SQ * SK + 1) * sizeof *dS);
    cr_assert(P && dS);
    for (int64_t i = 0; i < g->nk; i++)
        g->dk[i] = g->dv[i] = 0;
#define F(t, b, s, h, x) ((double)ref_to_float(dt, *at(t, b, s, h, x)))
#define RND(x) ((double)ref_to_float(dt, ref_from_float(dt, (float)(x))))
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HQ; h++) {
            int64_t kh = h / G;
            for (int64_t i = 0; i < SQ; i++) {
                double lse = *lse_at_view(&p->lse, b, h, i), Drow = 0;
                for (int64_t j = 0; j < SK; j++) {
                    int seen = !p->fwd.causal || j <= i + SK - SQ;
                    double s = 0;
                    for (int64_t x = 0; x < D; x++)
                        s += F(Q, b, i, h, x) * F(K, b, j, kh, x);
                    P[i * SK + j] = seen && lse != -INFINITY ? exp(scale * s - lse) : 0;
                }
                if (lowp) {
                    for (int64_t x = 0; x < D; x++)
                        Drow += F(&p->d_o, b, i, h, x) * F(&p->o, b, i, h, x);
                } else {
                    for (int64_t j = 0; j < SK; j++) {
                        double dp = 0;
                        for (int64_t x = 0; x < D; x++)
                            dp += F(&p->d_o, b, i, h, x) * F(V, b, j, kh, x);
                        Drow += P[i * SK + j] * dp;
                    }
                }
                g->delta[(b * HQ + h) * SQ + i] = Drow;
                for (int64_t j = 0; j < SK; j++) {
                    double dp = 0;
                    for (int64_t x = 0; x < D; x++)
                        dp += F(&p->d_o, b, i, h, x) * F(V, b, j, kh, x);
                    double ds = P[i * SK + j] * (dp - Drow);
                    dS[i * SK + j] = lowp ? RND(ds) : ds;
                }
                for (int64_t x = 0; x < D; x++) {
                    double acc = 0;
                    for (int64_t j = 0; j < SK; j++)
                        acc += dS[i * SK + j] * F(K, b, j, kh, x);
                    g->dq[((b * SQ + i) * HQ + h) * D + x] = lowp ? RND(scale * acc) : scale * acc;
                }
            }
            for (int64_t j = 0; j < SK; j++)
                for (int64_t x = 0; x < D; x++) {
                    double ak = 0, av = 0;
                    for (int64_t i = 0; i < SQ; i++) {
                        double pij = P[i * SK + j];
                        ak += dS[i * SK + j] * F(Q, b, i, h, x);
                        av += (lowp ? RND(pij) : pij) * F(&p->d_o, b, i, h, x);
                    }
                    g->dk[((b * SK + j) * HKV + kh) * D + x] += scale * ak; /* summed over the group's heads */
                    g->dv[((b * SK + j) * HKV + kh) * D + x] += av;
                }
        }
    if (lowp)
        for (int64_t i = 0; i < g->nk; i++) {
            g->dk[i] = RND(g->dk[i]);
            g->dv[i] = RND(g->dv[i]);
        }
#undef F
#undef RND
    free(P);
    free(dS);
}

/* max |a - b| / max(max|b|, 1e-300) over n elements (Inf when a NaN is involved). */
static double rel_diff(const double *a, const double *b, int64_t n) {
    double m = max_abs(b, n);
    return max_abs_diff(a, b, n) / (m > 1e-300 ? m : 1e-300);
}

Test(backward, matches_naive_loops) {
    static const struct {
        fg_dtype dt;
        int64_t b, sq, sk, hq, hkv, d;
        int causal;
        float scale;
    } cases[] = {
        {FG_DTYPE_BF16, 1, 9, 13, 2, 1, 16, 0, 0},     /* odd lengths: tails of every 4-wide loop */
        {FG_DTYPE_BF16, 2, 13, 9, 4, 2, 33, 1, 0},     /* causal sq > sk: masked rows; odd head_dim */
        {FG_DTYPE_F16, 1, 70, 67, 3, 3, 8, 1, 0.3f},   /* over one 64-row unit and chunk, both ways */
        {FG_DTYPE_F16, 2, 5, 130, 4, 1, 24, 1, 0},     /* keys over two pass-2 units, MQA */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fg_dtype dt = cases[c].dt;
        fg_tensor q, k, v;
        qkv_random(&q, &k, &v, dt, cases[c].b, cases[c].sq, cases[c].sk, cases[c].hq, cases[c].hkv, cases[c].d,
                   600 + c, 610 + c, 620 + c);
        ref_bwd_problem p = bwd_problem(q, k, v, cases[c].scale, cases[c].causal, 630 + c);
        for (int mode = 0; mode < 2; mode++) {
            grads r = run_bwd(&p, (ref_mode)mode), n = grads_alloc(&p);
            naive_bwd(&p, mode, &n);
            double eq = rel_diff(r.dq, n.dq, r.nq), ek = rel_diff(r.dk, n.dk, r.nk), ev = rel_diff(r.dv, n.dv, r.nk);
            double ed = rel_diff(r.delta, n.delta, r.nrow);
            cr_log_info("case %zu mode %d: relative differences to the naive loops dq %.2g dk %.2g dv %.2g delta %.2g",
                        c, mode, eq, ek, ev, ed);
            cr_assert(eq < 1e-12 && ek < 1e-12 && ev < 1e-12 && ed < 1e-12,
                      "case %zu mode %d: dq %g dk %g dv %g delta %g", c, mode, eq, ek, ev, ed);
            grads_free(&r);
            grads_free(&n);
        }
        bwd_problem_free(&p);
        qkv_free(&q, &k, &v);
    }
}

/* Finite-difference inputs: N(0, 1) samples clamped to [-1.9, 1.9] and rounded to multiples of 2^-10, in
 * fp16. Every such value x has x +- 2^-10 and x +- 2^-9 exactly representable in fp16 (|x| < 2: an fp16
 * holds every multiple of 2^-10 there), so the perturbed problems are exact inputs of the reference
 * (bf16, with 8 significant bits, could not hold steps this small). */
static void fd_fill(const fg_tensor *t, uint64_t seed) {
    fill(t, seed);
    for (int64_t b = 0; b < t->shape[0]; b++)
        for (int64_t s = 0; s < t->shape[1]; s++)
            for (int64_t h = 0; h < t->shape[2]; h++)
                for (int64_t x = 0; x < t->shape[3]; x++) {
                    double v = ref_f16_to_float(*at(t, b, s, h, x));
                    v = fmax(-1.9, fmin(1.9, v));
                    *at(t, b, s, h, x) = ref_float_to_f16((float)(round(v * 1024) / 1024));
                }
}

/* L = sum(O * W) with O the REF_32 forward output of p (W: the weights, a host tensor like q). */
static double fd_loss(const ref_problem *p, const fg_tensor *w) {
    double *o = run_ref(p, REF_32, NULL), l = 0;
    const int64_t *sh = p->q.shape;
    for (int64_t b = 0; b < sh[0]; b++)
        for (int64_t s = 0; s < sh[1]; s++)
            for (int64_t h = 0; h < sh[2]; h++)
                for (int64_t x = 0; x < sh[3]; x++)
                    l += o[((b * sh[1] + s) * sh[2] + h) * sh[3] + x] * ref_f16_to_float(*at(w, b, s, h, x));
    free(o);
    return l;
}

/* dL/dx for element [b, s, h, x] of t (one of p's inputs) by the five-point central difference with step
 * hh = 2^-10: (8 (L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h))) / (12 h), error O(h^4) ~ 1e-12. */
static double fd_grad(const ref_problem *p, const fg_tensor *w, const fg_tensor *t, int64_t b, int64_t s, int64_t h,
                      int64_t x) {
    const double hh = 0x1p-10;
    uint16_t *e = at(t, b, s, h, x), saved = *e;
    double x0 = ref_f16_to_float(saved), l[4];
    const double steps[4] = {hh, -hh, 2 * hh, -2 * hh};
    for (int i = 0; i < 4; i++) {
        *e = ref_float_to_f16((float)(x0 + steps[i]));
        cr_assert_eq((double)ref_f16_to_float(*e), x0 + steps[i], "the perturbed input must be exact");
        l[i] = fd_loss(p, w);
    }
    *e = saved;
    return (8 * (l[0] - l[1]) - (l[2] - l[3])) / (12 * hh);
}

Test(backward, ref32_matches_finite_differences) {
    /* L = sum(O * W) for a fixed random W, so dL/dO = W: REF_32's dQ, dK, dV against central differences of
     * the REF_32 forward, every element. The backward reads the LSE of the unperturbed forward as float,
     * as a kernel would (its rounding, ~3e-8 relative, bounds the agreement). */
    static const struct {
        int64_t b, sq, sk, hq, hkv, d;
        int causal;
        float scale;
    } cases[] = {
        {1, 5, 7, 2, 1, 8, 0, 0},    /* the brief's shape, two query heads on one KV head */
        {1, 5, 7, 2, 1, 8, 1, 0},    /* causal, bottom-right: row 0 sees keys 0..2 */
        {2, 7, 5, 4, 2, 8, 1, 0.5f}, /* GQA 2:1, causal sq > sk: rows 0, 1 see nothing; scale given */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t B = cases[c].b, SQ = cases[c].sq, SK = cases[c].sk, HQ = cases[c].hq, HKV = cases[c].hkv;
        const int64_t D = cases[c].d;
        fg_tensor q = host_tensor(FG_DTYPE_F16, B, SQ, HQ, D, 0, 0), k = host_tensor(FG_DTYPE_F16, B, SK, HKV, D, 0, 0);
        fg_tensor v = host_tensor(FG_DTYPE_F16, B, SK, HKV, D, 0, 0);
        fd_fill(&q, 700 + c);
        fd_fill(&k, 710 + c);
        fd_fill(&v, 720 + c);
        ref_bwd_problem p = bwd_problem(q, k, v, cases[c].scale, cases[c].causal, 730 + c);
        grads g = run_bwd(&p, REF_32);
        const fg_tensor *in[3] = {&q, &k, &v};
        const double *an[3] = {g.dq, g.dk, g.dv};
        static const char *const names[3] = {"dq", "dk", "dv"};
        for (int t = 0; t < 3; t++) {
            const int64_t *sh = in[t]->shape;
            const double scale = fmax(max_abs(an[t], t ? g.nk : g.nq), 1e-3);
            double worst = 0;
            for (int64_t b = 0; b < sh[0]; b++)
                for (int64_t s = 0; s < sh[1]; s++)
                    for (int64_t h = 0; h < sh[2]; h++)
                        for (int64_t x = 0; x < sh[3]; x++) {
                            double fd = fd_grad(&p.fwd, &p.d_o, in[t], b, s, h, x);
                            double a = an[t][((b * sh[1] + s) * sh[2] + h) * sh[3] + x];
                            double e = fabs(fd - a) / scale;
                            worst = e > worst ? e : worst;
                            cr_assert(e < 2e-6, "case %zu %s[%lld,%lld,%lld,%lld]: analytic %.12g, finite "
                                      "differences %.12g", c, names[t], (long long)b, (long long)s, (long long)h,
                                      (long long)x, a, fd);
                        }
            cr_log_info("case %zu %s: max |fd - analytic| / max|analytic| = %.2g", c, names[t], worst);
        }
        grads_free(&g);
        bwd_problem_free(&p);
        qkv_free(&q, &k, &v);
    }
}

Test(backward, fully_masked_rows_give_zero_dq_and_no_nan) {
    /* causal sq=40 > sk=30: rows 0..9 see no key; their LSE is -inf as the forward writes it. */
    fg_tensor q, k, v;
    qkv_random(&q, &k, &v, FG_DTYPE_BF16, 2, 40, 30, 4, 2, 32, 800, 801, 802);
    ref_bwd_problem p = bwd_problem(q, k, v, 0, 1, 803);
    cr_assert(isinf(*lse_at_view(&p.lse, 1, 3, 9)) && isfinite(*lse_at_view(&p.lse, 1, 3, 10)), "fixture");
    for (int mode = 0; mode < 2; mode++) {
        grads g = run_bwd(&p, (ref_mode)mode);
        cr_assert(all_finite(g.dq, g.nq) && all_finite(g.dk, g.nk) && all_finite(g.dv, g.nk) &&
                      all_finite(g.delta, g.nrow), "mode %d: a NaN or Inf gradient", mode);
        for (int64_t b = 0; b < 2; b++)
            for (int64_t i = 0; i < 40; i++)
                for (int64_t h = 0; h < 4; h++) {
                    double norm = 0;
                    for (int64_t x = 0; x < 32; x++)
                        norm += fabs(g.dq[((b * 40 + i) * 4 + h) * 32 + x]);
                    /* row 10 sees one key: its softmax is constant, so its dQ is 0 up to rounding */
                    cr_assert(i < 10 ? norm == 0 : (i == 10 || norm > 0), "mode %d: dQ row %lld head %lld has norm %g",
                              mode, (long long)i, (long long)h, norm);
                    if (i < 10 && mode == REF_32)
                        cr_assert_eq(g.delta[(b * 4 + h) * 40 + i], 0.0, "a row without keys has D = 0");
                }

        /* Whatever LSE such a row carries (FlashAttention 2 writes +inf, a bug might write 0 or NaN), it
         * sees no key and contributes nothing. */
        static const float bogus[3] = {INFINITY, 0.0f, NAN};
        for (int w = 0; w < 3; w++) {
            for (int64_t b = 0; b < 2; b++)
                for (int64_t h = 0; h < 4; h++)
                    for (int64_t i = 0; i < 10; i++)
                        *lse_at_view(&p.lse, b, h, i) = bogus[w];
            grads o = run_bwd(&p, (ref_mode)mode);
            cr_assert(max_abs_diff(o.dq, g.dq, g.nq) == 0 && max_abs_diff(o.dk, g.dk, g.nk) == 0 &&
                          max_abs_diff(o.dv, g.dv, g.nk) == 0,
                      "mode %d: the LSE %g of rows without keys changed the gradients", mode, bogus[w]);
            grads_free(&o);
        }
        for (int64_t b = 0; b < 2; b++)
            for (int64_t h = 0; h < 4; h++)
                for (int64_t i = 0; i < 10; i++)
                    *lse_at_view(&p.lse, b, h, i) = -INFINITY;
        grads_free(&g);
    }

    /* A row that sees keys but carries LSE = -inf (no forward writes that) has P = 0: its dQ is 0 and it
     * adds to dK/dV exactly what a row with dO = 0 adds (nothing), never exp(s + inf) = Inf or NaN. */
    *lse_at_view(&p.lse, 1, 2, 25) = -INFINITY;
    ref_bwd_problem z = p;
    z.d_o = host_tensor(FG_DTYPE_BF16, 2, 40, 4, 32, 0, 0);
    memcpy(z.d_o.data, p.d_o.data, (size_t)(2 * 40 * 4 * 32) * sizeof(uint16_t));
    for (int64_t x = 0; x < 32; x++)
        *at(&z.d_o, 1, 25, 2, x) = 0;
    for (int mode = 0; mode < 2; mode++) {
        grads g = run_bwd(&p, (ref_mode)mode), gz = run_bwd(&z, (ref_mode)mode);
        for (int64_t x = 0; x < 32; x++)
            cr_assert_eq(g.dq[((1 * 40 + 25) * 4 + 2) * 32 + x], 0.0);
        cr_assert(all_finite(g.dq, g.nq) && all_finite(g.dk, g.nk) && all_finite(g.dv, g.nk));
        cr_assert(max_abs_diff(g.dk, gz.dk, g.nk) == 0 && max_abs_diff(g.dv, gz.dv, g.nk) == 0, "mode %d", mode);
        grads_free(&g);
        grads_free(&gz);
    }
    free(z.d_o.data);
    bwd_problem_free(&p);

    /* sk = 0: no key anywhere, causal or not: dQ = 0, D = 0 (ref32), dK and dV have no elements (NULL is
     * accepted for them). */
    fg_tensor k0 = host_tensor(FG_DTYPE_BF16, 2, 0, 2, 32, 0, 0), v0 = host_tensor(FG_DTYPE_BF16, 2, 0, 2, 32, 0, 0);
    for (int causal = 0; causal < 2; causal++) {
        ref_bwd_problem p0 = bwd_problem(q, k0, v0, 0, causal, 804);
        for (int mode = 0; mode < 2; mode++) {
            grads g = run_bwd(&p0, (ref_mode)mode);
            cr_assert_eq(g.nk, 0);
            for (int64_t i = 0; i < g.nq; i++)
                cr_assert_eq(g.dq[i], 0.0, "sk=0: dq[%lld] = %g", (long long)i, g.dq[i]);
            for (int64_t i = 0; i < g.nrow; i++)
                cr_assert(mode == REF_LOWP || g.delta[i] == 0.0);
            fg_error e;
            fg_error_clear(&e);
            cr_assert_eq(ref_attention_bwd(&p0, (ref_mode)mode, g.dq, NULL, NULL, NULL, &e), FG_OK, "%s", e.msg);
            grads_free(&g);
        }
        bwd_problem_free(&p0);
    }
    qkv_free(&q, &k, &v);
    free(k0.data);
    free(v0.data);
}

Test(backward, gqa_dk_dv_sum_the_query_heads_of_a_kv_head) {
    /* hq=6 over hkv=2 against the same problem with K/V copied out to six heads: dQ is the same, and dK/dV
     * of KV head kh is the sum of the copies' gradients over query heads 3kh .. 3kh+2. */
    fg_tensor q, k, v;
    qkv_random(&q, &k, &v, FG_DTYPE_BF16, 2, 37, 29, 6, 2, 40, 810, 811, 812);
    fg_tensor k6 = host_tensor(FG_DTYPE_BF16, 2, 29, 6, 40, 0, 0), v6 = host_tensor(FG_DTYPE_BF16, 2, 29, 6, 40, 0, 0);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t j = 0; j < 29; j++)
            for (int64_t h = 0; h < 6; h++)
                for (int64_t x = 0; x < 40; x++) {
                    *at(&k6, b, j, h, x) = *at(&k, b, j, h / 3, x);
                    *at(&v6, b, j, h, x) = *at(&v, b, j, h / 3, x);
                }
    for (int causal = 0; causal < 2; causal++) {
        ref_bwd_problem pg = bwd_problem(q, k, v, 0, causal, 813), pm = bwd_problem(q, k6, v6, 0, causal, 813);
        for (int mode = 0; mode < 2; mode++) {
            grads gg = run_bwd(&pg, (ref_mode)mode), gm = run_bwd(&pm, (ref_mode)mode);
            cr_assert_eq(max_abs_diff(gg.dq, gm.dq, gg.nq), 0.0, "dQ does not depend on how K/V heads are shared");
            cr_assert_eq(max_abs_diff(gg.delta, gm.delta, gg.nrow), 0.0);
            double *sumk = malloc((size_t)gg.nk * sizeof *sumk), *sumv = malloc((size_t)gg.nk * sizeof *sumv);
            cr_assert(sumk && sumv);
            for (int64_t b = 0; b < 2; b++)
                for (int64_t j = 0; j < 29; j++)
                    for (int64_t kh = 0; kh < 2; kh++)
                        for (int64_t x = 0; x < 40; x++) {
                            double a = 0, c = 0;
                            for (int64_t h = 3 * kh; h < 3 * kh + 3; h++) {
                                a += gm.dk[((b * 29 + j) * 6 + h) * 40 + x];
                                c += gm.dv[((b * 29 + j) * 6 + h) * 40 + x];
                            }
                            sumk[((b * 29 + j) * 2 + kh) * 40 + x] = a;
                            sumv[((b * 29 + j) * 2 + kh) * 40 + x] = c;
                        }
            /* ref32: equal up to the order of the sums. ref_lowp rounds once after the sum, the copies once
             * per head: a few bf16 units apart. */
            double ek = rel_diff(gg.dk, sumk, gg.nk), ev = rel_diff(gg.dv, sumv, gg.nk);
            double tol = mode == REF_32 ? 1e-13 : 0x1p-6;
            cr_log_info("causal %d mode %d: GQA vs summed copies dk %.2g dv %.2g", causal, mode, ek, ev);
            cr_assert(ek < tol && ev < tol, "causal %d mode %d: dk %g dv %g", causal, mode, ek, ev);
            free(sumk);
            free(sumv);
            grads_free(&gg);
            grads_free(&gm);
        }
        bwd_problem_free(&pg);
        bwd_problem_free(&pm);
    }
    qkv_free(&q, &k, &v);
    free(k6.data);
    free(v6.data);
}

Test(backward, strided_views_equal_contiguous_copies) {
    for (int layout = 1; layout <= 2; layout++) {
        /* layout 1: padded [b, s, h, d], LSE padded; layout 2: padded head-major, LSE stored [b, sq, hq]. */
        fg_tensor qc = host_tensor(FG_DTYPE_F16, 2, 45, 4, 24, 0, 0);
        fg_tensor kc = host_tensor(FG_DTYPE_F16, 2, 70, 2, 24, 0, 0);
        fg_tensor vc = host_tensor(FG_DTYPE_F16, 2, 70, 2, 24, 0, 0);
        fg_tensor qs = host_tensor(FG_DTYPE_F16, 2, 45, 4, 24, 8, layout == 2);
        fg_tensor ks = host_tensor(FG_DTYPE_F16, 2, 70, 2, 24, 16, layout == 2);
        fg_tensor vs = host_tensor(FG_DTYPE_F16, 2, 70, 2, 24, 3, layout == 2);
        fill(&qc, 820);
        fill(&kc, 821);
        fill(&vc, 822);
        fill(&qs, 820);
        fill(&ks, 821);
        fill(&vs, 822);
        for (int causal = 0; causal < 2; causal++) {
            ref_bwd_problem pc = bwd_problem(qc, kc, vc, 0, causal, 823), ps = pc;
            ps.fwd = problem(qs, ks, vs, 0, causal);
            ps.o = host_tensor(FG_DTYPE_F16, 2, 45, 4, 24, 5, layout == 2);
            ps.d_o = host_tensor(FG_DTYPE_F16, 2, 45, 4, 24, 1, layout == 2);
            for (int64_t b = 0; b < 2; b++)
                for (int64_t i = 0; i < 45; i++)
                    for (int64_t h = 0; h < 4; h++)
                        for (int64_t x = 0; x < 24; x++) {
                            *at(&ps.o, b, i, h, x) = *at(&pc.o, b, i, h, x);
                            *at(&ps.d_o, b, i, h, x) = *at(&pc.d_o, b, i, h, x);
                        }
            double lse[2 * 4 * 45];
            for (int64_t b = 0; b < 2; b++)
                for (int64_t h = 0; h < 4; h++)
                    for (int64_t i = 0; i < 45; i++)
                        lse[(b * 4 + h) * 45 + i] = *lse_at_view(&pc.lse, b, h, i);
            ps.lse = lse_view(lse, 2, 4, 45, layout == 1 ? 2 : 1, layout == 2);
            for (int mode = 0; mode < 2; mode++) {
                grads gc = run_bwd(&pc, (ref_mode)mode), gs = run_bwd(&ps, (ref_mode)mode);
                cr_assert(memcmp(gc.dq, gs.dq, (size_t)gc.nq * sizeof *gc.dq) == 0 &&
                              memcmp(gc.dk, gs.dk, (size_t)gc.nk * sizeof *gc.dk) == 0 &&
                              memcmp(gc.dv, gs.dv, (size_t)gc.nk * sizeof *gc.dv) == 0 &&
                              memcmp(gc.delta, gs.delta, (size_t)gc.nrow * sizeof *gc.delta) == 0,
                          "layout %d causal %d mode %d: the strided views give other gradients", layout, causal, mode);
                cr_assert(all_finite(gs.dq, gs.nq) && all_finite(gs.dk, gs.nk) && all_finite(gs.dv, gs.nk),
                          "the NaN padding reached a gradient");
                grads_free(&gc);
                grads_free(&gs);
            }
            free(ps.o.data);
            free(ps.d_o.data);
            free(ps.lse.data);
            bwd_problem_free(&pc);
        }
        free(qc.data);
        free(kc.data);
        free(vc.data);
        free(qs.data);
        free(ks.data);
        free(vs.data);
    }
}

/* max|ref_lowp - ref32| / max|ref32| of dQ, dK, dV (in gap[0..2]) on one N(0, 1) problem of dtype dt. */
static void bwd_lowp_gap(fg_dtype dt, int causal, double *gap) {
    fg_tensor q, k, v;
    qkv_random(&q, &k, &v, dt, 1, 128, 160, 2, 2, 64, 830, 831, 832);
    ref_bwd_problem p = bwd_problem(q, k, v, 0, causal, 833);
    grads g32 = run_bwd(&p, REF_32), glp = run_bwd(&p, REF_LOWP);
    gap[0] = rel_diff(glp.dq, g32.dq, g32.nq);
    gap[1] = rel_diff(glp.dk, g32.dk, g32.nk);
    gap[2] = rel_diff(glp.dv, g32.dv, g32.nk);
    grads_free(&g32);
    grads_free(&glp);
    bwd_problem_free(&p);
    qkv_free(&q, &k, &v);
}

Test(backward, lowp_differs_from_ref32_by_a_small_nonzero_amount) {
    for (int causal = 0; causal < 2; causal++) {
        double bf[3], hf[3];
        bwd_lowp_gap(FG_DTYPE_BF16, causal, bf);
        bwd_lowp_gap(FG_DTYPE_F16, causal, hf);
        cr_log_info("causal %d: max|lowp - ref32| / max|ref32|: bf16 dq %.3g dk %.3g dv %.3g; fp16 dq %.3g dk %.3g "
                    "dv %.3g", causal, bf[0], bf[1], bf[2], hf[0], hf[1], hf[2]);
        for (int i = 0; i < 3; i++) {
            cr_assert(bf[i] > 0 && bf[i] < 1e-1, "bf16 gradient %d: relative gap %g", i, bf[i]);
            cr_assert(hf[i] > 0 && hf[i] < bf[i], "fp16 (10 mantissa bits) must be closer than bf16 (7): %g vs %g",
                      hf[i], bf[i]);
        }
    }
}

/* The kernel's view of a problem for ref_check_bwd: gradients as host tensors. */
typedef struct bwd_fixture {
    fg_tensor q, k, v;     /* inputs */
    ref_bwd_problem p;     /* the problem */
    fg_tensor dq, dk, dv;  /* gradients, initialized to ref_lowp: dq bf16 strided, dk bf16, dv F32 */
    float *dv_mem;         /* dv's storage */
} bwd_fixture;

/* Random bf16 inputs (b=2, sq=40, sk=30, 4 heads over 2, d=32, causal: rows 0..9 see nothing) with the
 * gradients = ref_lowp's, which must pass. Free with bwd_fixture_free. */
static void bwd_fixture_make(bwd_fixture *f) {
    qkv_random(&f->q, &f->k, &f->v, FG_DTYPE_BF16, 2, 40, 30, 4, 2, 32, 840, 841, 842);
    f->p = bwd_problem(f->q, f->k, f->v, 0, 1, 843);
    grads g = run_bwd(&f->p, REF_LOWP);
    f->dq = tensor_of(g.dq, FG_DTYPE_BF16, f->q.shape, 8, 0);
    f->dk = tensor_of(g.dk, FG_DTYPE_BF16, f->k.shape, 0, 1);
    f->dv = f->dk;
    f->dv.dtype = FG_DTYPE_F32;
    f->dv.stride[3] = 1;
    f->dv.stride[2] = 32;
    f->dv.stride[1] = 2 * 32;
    f->dv.stride[0] = 30 * 2 * 32;
    f->dv_mem = malloc((size_t)g.nk * sizeof *f->dv_mem);
    cr_assert_not_null(f->dv_mem);
    for (int64_t i = 0; i < g.nk; i++)
        f->dv_mem[i] = (float)g.dv[i];
    f->dv.data = f->dv_mem;
    grads_free(&g);
}

/* Frees what bwd_fixture_make allocated. */
static void bwd_fixture_free(bwd_fixture *f) {
    bwd_problem_free(&f->p);
    qkv_free(&f->q, &f->k, &f->v);
    free(f->dq.data);
    free(f->dk.data);
    free(f->dv_mem);
}

/* ref_check_bwd on the fixture, logging the report line. */
static ref_bwd_report bwd_check(bwd_fixture *f) {
    ref_bwd_report r;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_check_bwd(&f->p, &f->dq, &f->dk, &f->dv, &r, &e), FG_OK, "ref_check_bwd: %s", e.msg);
    char line[1024];
    cr_log_info("%s", ref_bwd_report_format(&r, line, sizeof line));
    return r;
}

Test(check_bwd, the_lowp_reference_itself_passes) {
    bwd_fixture f;
    bwd_fixture_make(&f);
    ref_bwd_report r = bwd_check(&f);
    cr_assert(r.pass, "ref_lowp must pass its own bound");
    const ref_grad_report *g[3] = {&r.dq, &r.dk, &r.dv};
    for (int i = 0; i < 3; i++) {
        cr_assert(g[i]->pass && g[i]->nonfinite == 0);
        cr_assert_gt(g[i]->max_lowp_err, 0.0);
        cr_assert_eq(g[i]->max_err, g[i]->max_lowp_err, "ref_lowp is already in bf16: the copy is exact");
        cr_assert_eq(g[i]->bound, REF_BWD_FACTOR * g[i]->max_lowp_err + REF_BWD_ATOL);
    }
    cr_assert_eq(REF_BWD_FACTOR, 3.0, "the tolerance rule: 3x for gradients");
    /* REF_32 rounded to bf16 passes with room to spare */
    grads g32 = run_bwd(&f.p, REF_32);
    free(f.dq.data);
    f.dq = tensor_of(g32.dq, FG_DTYPE_BF16, f.q.shape, 0, 0);
    ref_bwd_report r32 = bwd_check(&f);
    cr_assert(r32.pass && r32.dq.max_err <= r32.dq.max_lowp_err);
    grads_free(&g32);
    bwd_fixture_free(&f);
}

Test(check_bwd, an_error_of_ten_bounds_fails_and_is_located) {
    static const int64_t where[3][4] = {{1, 17, 2, 5}, {0, 29, 1, 31}, {1, 3, 0, 0}};
    for (int t = 0; t < 3; t++) {
        bwd_fixture f;
        bwd_fixture_make(&f);
        ref_bwd_report r = bwd_check(&f);
        const ref_grad_report *g[3] = {&r.dq, &r.dk, &r.dv};
        const int64_t *w = where[t];
        double add = 10 * g[t]->bound;
        if (t == 2) {
            float *e = (float *)f.dv.data + w[0] * f.dv.stride[0] + w[1] * f.dv.stride[1] + w[2] * f.dv.stride[2] +
                       w[3] * f.dv.stride[3];
            *e += (float)add;
        } else {
            uint16_t *e = at(t ? &f.dk : &f.dq, w[0], w[1], w[2], w[3]);
            *e = ref_float_to_bf16(ref_bf16_to_float(*e) + (float)add);
        }
        r = bwd_check(&f);
        cr_assert_not(r.pass, "gradient %d: an error of 10x the bound must fail", t);
        for (int i = 0; i < 3; i++)
            cr_assert_eq(g[i]->pass, i != t, "only gradient %d fails", t);
        cr_assert(g[t]->worst[0] == w[0] && g[t]->worst[1] == w[1] && g[t]->worst[2] == w[2] && g[t]->worst[3] == w[3],
                  "gradient %d: worst at [%lld,%lld,%lld,%lld]", t, (long long)g[t]->worst[0],
                  (long long)g[t]->worst[1], (long long)g[t]->worst[2], (long long)g[t]->worst[3]);
        cr_assert_gt(g[t]->max_err, 8 * g[t]->bound);
        bwd_fixture_free(&f);
    }
}

Test(check_bwd, nan_or_inf_gradient_fails) {
    bwd_fixture f;
    bwd_fixture_make(&f);
    *at(&f.dk, 1, 4, 1, 7) = ref_float_to_bf16(NAN);
    *at(&f.dk, 1, 20, 0, 3) = ref_float_to_bf16(INFINITY);
    ((float *)f.dv.data)[5] = NAN;
    ref_bwd_report r = bwd_check(&f);
    cr_assert_not(r.pass);
    cr_assert(r.dq.pass && !r.dk.pass && !r.dv.pass);
    cr_assert_eq(r.dk.nonfinite, 2);
    cr_assert(r.dk.first_nonfinite[0] == 1 && r.dk.first_nonfinite[1] == 4 && r.dk.first_nonfinite[2] == 1 &&
              r.dk.first_nonfinite[3] == 7);
    cr_assert(r.dv.nonfinite == 1 && r.dv.first_nonfinite[3] == 5);
    /* a NaN in dQ of a row without keys (must be exactly 0) is caught too */
    *at(&f.dq, 0, 3, 2, 1) = ref_float_to_bf16(NAN);
    r = bwd_check(&f);
    cr_assert(!r.dq.pass && r.dq.nonfinite == 1 && r.dq.first_nonfinite[1] == 3);
    char line[1024];
    ref_bwd_report_format(&r, line, sizeof line);
    cr_assert(strstr(line, "FAIL") && strstr(line, "dk FAIL") && strstr(line, "first at [1,4,1,7]"), "%s", line);
    bwd_fixture_free(&f);
}

Test(backward, inconsistent_problems_are_refused) {
    bwd_fixture f;
    bwd_fixture_make(&f);
    ref_bwd_problem p = f.p;
    grads g = grads_alloc(&p);
    ref_bwd_report r;
    fg_error e;
    fg_error_clear(&e);
#define REFUSED(prob, what)                                                                                         \
    do {                                                                                                            \
        fg_error_clear(&e);                                                                                         \
        cr_assert_eq(ref_attention_bwd(&(prob), REF_32, g.dq, g.dk, g.dv, NULL, &e), FG_ERR_INVALID_ARGUMENT,      \
                     "%s must be refused", what);                                                                   \
        cr_assert(strstr(e.msg, what), "message '%s' must name %s", e.msg, what);                                  \
        cr_assert_eq(ref_check_bwd(&(prob), &f.dq, &f.dk, &f.dv, &r, &e), FG_ERR_INVALID_ARGUMENT);                \
    } while (0)
    ref_bwd_problem b = p;
    b.o.dtype = FG_DTYPE_F16;
    REFUSED(b, "d_o must have q's dtype"); /* the sentence names both */
    b = p;
    b.d_o.shape[1] = 39;
    REFUSED(b, "d_o.shape[1]");
    b = p;
    b.lse.dtype = FG_DTYPE_BF16;
    REFUSED(b, "lse.dtype");
    b = p;
    b.lse.shape[1] = 2;
    REFUSED(b, "lse.shape[1]");
    b = p;
    b.lse.ndim = 4;
    REFUSED(b, "lse.ndim");
    b = p;
    b.fwd.k.shape[2] = 3;
    b.fwd.v.shape[2] = 3;
    REFUSED(b, "divide");
    b = p;
    b.o.data = NULL;
    REFUSED(b, "o.data");
    /* FP8 is out of scope for the backward reference */
    ref_problem p8 = fp8_problem(FG_DTYPE_E4M3, 2, 40, 30, 4, 2, 32);
    b = p;
    b.fwd = p8;
    REFUSED(b, "FP8");
    fp8_problem_free(&p8);
    /* outputs and modes */
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_bwd(&p, REF_32, NULL, g.dk, g.dv, NULL, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "dq"), "%s", e.msg);
    cr_assert_eq(ref_attention_bwd(&p, REF_LOWP, g.dq, g.dk, NULL, NULL, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ref_attention_bwd(&p, (ref_mode)7, g.dq, g.dk, g.dv, NULL, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "mode"), "%s", e.msg);
    cr_assert_eq(ref_attention_bwd(NULL, REF_32, g.dq, g.dk, g.dv, NULL, &e), FG_ERR_INVALID_ARGUMENT);
    /* the kernel's gradients: dtypes and shapes */
    fg_tensor bad = f.dk;
    bad.dtype = FG_DTYPE_E4M3;
    cr_assert_eq(ref_check_bwd(&p, &f.dq, &bad, &f.dv, &r, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "dk.dtype"), "%s", e.msg);
    bad = f.dv;
    bad.shape[2] = 4;
    cr_assert_eq(ref_check_bwd(&p, &f.dq, &f.dk, &bad, &r, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "dv.shape[2]"), "%s", e.msg);
    bad = f.dq;
    bad.shape[1] = 30;
    cr_assert_eq(ref_check_bwd(&p, &bad, &f.dk, &f.dv, &r, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "dq.shape[1]"), "%s", e.msg);
    cr_assert_eq(ref_check_bwd(&p, &f.dq, &f.dk, &f.dv, NULL, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ref_check_bwd(&p, &f.dq, &f.dk, &f.dv, &r, &e), FG_OK, "%s", e.msg);
#undef REFUSED
    grads_free(&g);
    bwd_fixture_free(&f);
}

/* The LSE rule's FP8 allowance (the tensor cores' ~13-bit score accumulation, reference/forward.c forward_row):
 * one query and one key of 32 ones, so the LSE is the one score 32/sqrt(32) and the allowance
 * 2 * 32/sqrt(32) * 2^-12 ~ 2.8e-3. An LSE 2e-3 off passes in e4m3 and fails in fp16 (no allowance);
 * one 5e-3 off fails in both. */
Test(check, fp8_lse_allowance_is_the_accumulation_bound_and_no_more) {
    for (int fp8 = 0; fp8 < 2; fp8++) {
        uint8_t b8[32];
        uint16_t b16[32], o16[32];
        memset(b8, ref_float_to_e4m3(1.0f, 0), sizeof b8);
        for (int x = 0; x < 32; x++)
            b16[x] = o16[x] = ref_float_to_f16(1.0f);
        fg_tensor t = host_tensor(FG_DTYPE_F16, 1, 1, 1, 32, 0, 0); /* the view; storage replaced below */
        free(t.data);
        t.dtype = fp8 ? FG_DTYPE_E4M3 : FG_DTYPE_F16;
        t.data = fp8 ? (void *)b8 : (void *)b16;
        ref_problem p = problem(t, t, t, 0, 0);
        p.out_dtype = FG_DTYPE_F16;
        fg_tensor out = t;
        out.dtype = FG_DTYPE_F16;
        out.data = o16; /* O = 1 exactly */
        const double exact = 32.0 / sqrt(32.0);
        float lse_val;
        fg_tensor lse;
        memset(&lse, 0, sizeof lse);
        lse.data = &lse_val;
        lse.dtype = FG_DTYPE_F32;
        lse.ndim = 3;
        lse.shape[0] = lse.shape[1] = lse.shape[2] = 1;
        lse.stride[0] = lse.stride[1] = lse.stride[2] = 1;
        const double offs[3] = {0.0, 2e-3, 5e-3};
        const int want[2][3] = {{1, 0, 0}, {1, 1, 0}};
        for (int i = 0; i < 3; i++) {
            lse_val = (float)(exact + offs[i]);
            ref_report r;
            fg_error e;
            fg_error_clear(&e);
            cr_assert_eq(ref_check_fwd(&p, &out, &lse, &r, &e), FG_OK, "ref_check_fwd: %s", e.msg);
            cr_assert_eq(r.pass, want[fp8][i], "%s, LSE off by %g: pass %d (lse err %g)", fp8 ? "e4m3" : "fp16",
                         offs[i], r.pass, r.lse_max_err);
        }
    }
}
