/* test_reference_check.c: the pass/fail rule (reference/check.c) that judges a kernel's output against the
 * CPU reference: ref_check_fwd (errors located, a wrong scale, NaN/Inf, the LSE rules and the FP8 allowance,
 * outputs judged in their dtype) and ref_check_bwd for gradients. Needs no GPU; runs in CI. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "tests/reference_harness.h"

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
