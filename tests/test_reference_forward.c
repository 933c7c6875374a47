/* test_reference_forward.c: the CPU reference's forward pass (reference/forward.c) against hand-computed
 * cases and naive loops. The GPU suites trust this reference, so every semantic rule of the forward pass
 * (causal alignment, GQA, masked rows, scale, strides, the FP8 formula and descales) is pinned here first.
 * Needs no GPU; runs in CI. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "tests/reference_harness.h"

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
