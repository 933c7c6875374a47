/* test_reference_backward.c: the CPU reference's backward pass (reference/backward.c) against naive loops and
 * finite differences of the forward: masked rows, GQA sums, strided views, the lowp gap and refused
 * problems. Needs no GPU; runs in CI. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "tests/reference_harness.h"

/* The LSE element [b, h, i] of an F32 view. */
static float *lse_at_view(const fg_tensor *t, int64_t b, int64_t h, int64_t i) {
    return (float *)t->data + b * t->stride[0] + h * t->stride[1] + i * t->stride[2];
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

/* L = sum(O * W) with O the REF_32 forward output of p (W: the weights, a host tensor shaped like O: q's with v's
 * head dim). */
static double fd_loss(const ref_problem *p, const fg_tensor *w) {
    double *o = run_ref(p, REF_32, NULL), l = 0;
    const int64_t *sh = w->shape;
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
        int64_t b, sq, sk, hq, hkv, d, dv;
        int causal;
        float scale;
    } cases[] = {
        {1, 5, 7, 2, 1, 8, 8, 0, 0},    /* the brief's shape, two query heads on one KV head */
        {1, 5, 7, 2, 1, 8, 8, 1, 0},    /* causal, bottom-right: row 0 sees keys 0..2 */
        {2, 7, 5, 4, 2, 8, 8, 1, 0.5f}, /* GQA 2:1, causal sq > sk: rows 0, 1 see nothing; scale given */
        {1, 5, 7, 2, 1, 24, 16, 1, 0},  /* V narrower than Q and K (192/128 in small): dQ, dK of 24, dV of 16 */
        {2, 6, 5, 2, 2, 16, 24, 0, 0},  /* V wider */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t B = cases[c].b, SQ = cases[c].sq, SK = cases[c].sk, HQ = cases[c].hq, HKV = cases[c].hkv;
        const int64_t D = cases[c].d, DV = cases[c].dv;
        fg_tensor q = host_tensor(FG_DTYPE_F16, B, SQ, HQ, D, 0, 0), k = host_tensor(FG_DTYPE_F16, B, SK, HKV, D, 0, 0);
        fg_tensor v = host_tensor(FG_DTYPE_F16, B, SK, HKV, DV, 0, 0);
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
            const double scale = fmax(max_abs(an[t], t == 0 ? g.nq : t == 1 ? g.nk : g.nv), 1e-3);
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

/* A custom mod's callbacks (reference.h): score 3 tanh(logit / 3) + 0.1 (i - j) + 0.05 b h, its derivative, and
 * a mask hiding the keys with (i + 2 j + b) % 3 == 0, which leaves some rows without a key. */
static double mod_score(const void *user, double x, int b, int h, int i, int j) {
    (void)user;
    return 3.0 * tanh(x / 3.0) + 0.1 * (i - j) + 0.05 * b * h;
}
static double mod_score_grad(const void *user, double x, int b, int h, int i, int j, double *d) {
    const double t = tanh(x / 3.0);
    *d = 1.0 - t * t;
    return mod_score(user, x, b, h, i, j);
}
static int mod_mask(const void *user, int b, int h, int i, int j) {
    (void)user, (void)h;
    return (i + 2 * j + b) % 3 != 0;
}

/* The custom mods' backward: REF_32's dQ, dK, dV against central differences of the REF_32 forward with the same
 * callbacks (score alone, mask alone, both with causal), every element; and a score mod without its derivative
 * is refused. */
Test(backward, custom_mods_match_finite_differences) {
    static const struct { int score, mask, causal; int64_t b, sq, sk; } cases[] = {
        {1, 0, 0, 1, 5, 7}, {0, 1, 0, 2, 6, 5}, {1, 1, 1, 2, 7, 6},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t B = cases[c].b, SQ = cases[c].sq, SK = cases[c].sk, HQ = 2, HKV = 1, D = 8;
        fg_tensor q = host_tensor(FG_DTYPE_F16, B, SQ, HQ, D, 0, 0), k = host_tensor(FG_DTYPE_F16, B, SK, HKV, D, 0, 0);
        fg_tensor v = host_tensor(FG_DTYPE_F16, B, SK, HKV, D, 0, 0);
        fd_fill(&q, 800 + c);
        fd_fill(&k, 810 + c);
        fd_fill(&v, 820 + c);
        ref_bwd_problem p = bwd_problem(q, k, v, 0, cases[c].causal, 830 + c);
        if (cases[c].score) p.fwd.mod_score = mod_score, p.fwd.mod_score_grad = mod_score_grad;
        if (cases[c].mask) p.fwd.mod_mask = mod_mask;
        /* the forward's O and LSE again, with the mod */
        double *lse, *o = run_ref(&p.fwd, REF_LOWP, &lse);
        free(p.o.data), free(p.lse.data);
        const int64_t oshape[4] = {B, SQ, HQ, D};
        p.o = tensor_of(o, q.dtype, oshape, 0, 0);
        p.lse = lse_view(lse, B, HQ, SQ, 0, 0);
        free(o), free(lse);
        grads g = run_bwd(&p, REF_32);
        const fg_tensor *in[3] = {&q, &k, &v};
        const double *an[3] = {g.dq, g.dk, g.dv};
        for (int t = 0; t < 3; t++) {
            const int64_t *sh = in[t]->shape;
            const double scale = fmax(max_abs(an[t], t == 0 ? g.nq : t == 1 ? g.nk : g.nv), 1e-3);
            for (int64_t b = 0; b < sh[0]; b++)
                for (int64_t s2 = 0; s2 < sh[1]; s2++)
                    for (int64_t h = 0; h < sh[2]; h++)
                        for (int64_t x = 0; x < sh[3]; x++) {
                            const double fd = fd_grad(&p.fwd, &p.d_o, in[t], b, s2, h, x);
                            const double a = an[t][((b * sh[1] + s2) * sh[2] + h) * sh[3] + x];
                            cr_assert(fabs(fd - a) / scale < 2e-6, "case %zu grad %d [%lld,%lld,%lld,%lld]: analytic %.12g, "
                                      "finite differences %.12g", c, t, (long long)b, (long long)s2, (long long)h,
                                      (long long)x, a, fd);
                        }
        }
        grads_free(&g);
        if (cases[c].score) { /* without the derivative the backward reference refuses */
            p.fwd.mod_score_grad = NULL;
            double *dq = calloc((size_t)g.nq + 1, sizeof *dq), *dk = calloc((size_t)g.nk + 1, sizeof *dk);
            double *dv = calloc((size_t)g.nv + 1, sizeof *dv);
            fg_error e;
            cr_assert_eq(ref_attention_bwd(&p, REF_32, dq, dk, dv, NULL, &e), FG_ERR_INVALID_ARGUMENT);
            cr_assert(strstr(e.msg, "mod_score_grad"), "%s", e.msg);
            free(dq), free(dk), free(dv);
        }
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
