/* test_reference_variants.c: the CPU reference's model variants (reference.h: sliding window, top-left causal,
 * softcap, ALiBi, attention sinks), forward and backward (with the sinks' gradient), against naive loops
 * written from their definitions, alone and combined, with windows of 0, 1 and wider than the sequence,
 * sq != sk both ways, rows that see no key, and the rules the reference refuses. Needs no GPU; runs in CI. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "tests/reference_harness.h"

typedef struct variant {
    int causal, top_left, window;
    int64_t left, right;
    float softcap;
    int alibi, sinks;
} variant;

/* O (ref32) and LSE of p from the definitions, one (batch, head, row) at a time. */
static void naive_variant(const ref_problem *p, double *o, double *lse) {
    const int64_t B = p->q.shape[0], SQ = p->q.shape[1], HQ = p->q.shape[2], D = p->q.shape[3];
    const int64_t SK = p->k.shape[1], HKV = p->k.shape[2], DV = p->v.shape[3];
    const double scale = p->softmax_scale != 0 ? p->softmax_scale : 1.0 / sqrt((double)D);
    double *w = malloc((size_t)(SK + 1) * sizeof *w);
    cr_assert(w);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HQ; h++)
            for (int64_t i = 0; i < SQ; i++) {
                const int64_t kh = h / (HQ / HKV), diag = i + SK - SQ;
                double den = 0, *orow = o + ((b * SQ + i) * HQ + h) * DV;
                for (int64_t x = 0; x < DV; x++) orow[x] = 0;
                for (int64_t j = 0; j < SK; j++) {
                    int seen = 1;
                    if (p->causal) seen = seen && j <= (p->causal_top_left ? i : diag);
                    if (p->window && p->window_left >= 0) seen = seen && j >= diag - p->window_left;
                    if (p->window && p->window_right >= 0) seen = seen && j <= diag + p->window_right;
                    if (!seen) {
                        w[j] = 0;
                        continue;
                    }
                    double dot = 0;
                    for (int64_t x = 0; x < D; x++)
                        dot += (double)ref_to_float(p->q.dtype, *at(&p->q, b, i, h, x)) *
                               (double)ref_to_float(p->k.dtype, *at(&p->k, b, j, kh, x));
                    double logit = scale * dot;
                    if (p->softcap > 0) logit = p->softcap * tanh(logit / p->softcap);
                    if (p->alibi_slopes.data) logit -= ((const float *)p->alibi_slopes.data)[h] * fabs((double)(diag - j));
                    w[j] = exp(logit); /* the inputs keep logits far from overflow */
                    den += w[j];
                }
                const double sink = p->sinks.data ? ((const float *)p->sinks.data)[h] : -INFINITY;
                const double total = den + exp(sink);
                lse[(b * HQ + h) * SQ + i] = total > 0 ? log(total) : -INFINITY;
                if (den == 0) continue; /* no key: O = 0 */
                for (int64_t j = 0; j < SK; j++)
                    if (w[j] != 0)
                        for (int64_t x = 0; x < DV; x++)
                            orow[x] += w[j] / total * (double)ref_to_float(p->v.dtype, *at(&p->v, b, j, kh, x));
            }
    free(w);
}

static fg_tensor per_head(float *vals, int64_t n) {
    fg_tensor t = {vals, FG_DTYPE_F32, 1, {n, 0, 0, 0}, {1, 0, 0, 0}};
    return t;
}

/* q, k, v as qkv_random makes them, with v's head dim dv (d: the same). */
static void qkv_dv(fg_tensor *q, fg_tensor *k, fg_tensor *v, fg_dtype dt, int64_t b, int64_t sq, int64_t sk, int64_t hq,
                   int64_t hkv, int64_t d, int64_t dv, uint64_t seed) {
    qkv_random(q, k, v, dt, b, sq, sk, hq, hkv, d, seed, seed + 1, seed + 2);
    if (dv == d) return;
    free(v->data);
    *v = host_tensor(dt, b, sk, hkv, dv, 0, 0);
    fill(v, seed + 2);
}

static void check_case_dv(fg_dtype dt, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                          int64_t dv, const variant *v, uint64_t seed) {
    fg_tensor q, k, vv;
    qkv_dv(&q, &k, &vv, dt, b, sq, sk, hq, hkv, d, dv, seed);
    ref_problem p = problem(q, k, vv, 0, v->causal);
    p.causal_top_left = v->top_left;
    p.window = v->window, p.window_left = v->left, p.window_right = v->right;
    p.softcap = v->softcap;
    float slopes[16], sinks[16];
    for (int64_t h = 0; h < hq; h++) slopes[h] = 0.5f / (float)(h + 1), sinks[h] = (float)h * 0.75f - 1.0f;
    if (v->alibi) p.alibi_slopes = per_head(slopes, hq);
    if (v->sinks) p.sinks = per_head(sinks, hq);
    const int64_t no = b * sq * hq * dv, nl = b * hq * sq;
    double *on = malloc((size_t)(no + 1) * sizeof *on), *ln = malloc((size_t)(nl + 1) * sizeof *ln);
    cr_assert(on && ln);
    naive_variant(&p, on, ln);
    double *lr, *orf = run_ref(&p, REF_32, &lr);
    const double eo = max_abs_diff(on, orf, no);
    cr_assert_lt(eo, 1e-12, "seed %llu: O differs from the definition by %g", (unsigned long long)seed, eo);
    for (int64_t i = 0; i < nl; i++)
        cr_assert(ln[i] == lr[i] || fabs(ln[i] - lr[i]) < 1e-12 * (1 + fabs(ln[i])),
                  "seed %llu: LSE[%lld] %.17g, the definition's %.17g", (unsigned long long)seed, (long long)i, lr[i], ln[i]);
    free(orf), free(lr), free(on), free(ln);
    qkv_free(&q, &k, &vv);
}

static void check_case(fg_dtype dt, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                       const variant *v, uint64_t seed) {
    check_case_dv(dt, b, sq, sk, hq, hkv, d, d, v, seed);
}

Test(reference_variants, sliding_windows) {
    const variant cases[] = {
        {.window = 1, .left = 3, .right = 2},            /* both sides */
        {.window = 1, .left = 0, .right = 0},            /* the diagonal alone */
        {.window = 1, .left = 1, .right = -1},           /* left only */
        {.window = 1, .left = -1, .right = 1},           /* right only */
        {.window = 1, .left = 500, .right = 500},        /* wider than the sequence */
        {.causal = 1, .window = 1, .left = 5, .right = -1}, /* the usual local causal layer */
        {.causal = 1, .window = 1, .left = 0, .right = -1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        check_case(FG_DTYPE_BF16, 2, 37, 53, 4, 2, 32, &cases[c], 10 + c); /* sq < sk */
        check_case(FG_DTYPE_F16, 1, 61, 29, 2, 1, 24, &cases[c], 30 + c);  /* sq > sk: rows without keys */
    }
}

Test(reference_variants, top_left_causal) {
    const variant tl = {.causal = 1, .top_left = 1}, tlw = {.causal = 1, .top_left = 1, .window = 1, .left = 4, .right = -1};
    check_case(FG_DTYPE_BF16, 1, 20, 45, 2, 2, 16, &tl, 50);
    check_case(FG_DTYPE_BF16, 1, 45, 20, 2, 2, 16, &tl, 51);
    check_case(FG_DTYPE_F16, 2, 33, 33, 4, 1, 32, &tlw, 52);
}

Test(reference_variants, softcap_alibi_and_sinks) {
    const variant cases[] = {
        {.softcap = 5.0f},
        {.softcap = 0.25f, .causal = 1},
        {.alibi = 1},
        {.alibi = 1, .causal = 1},
        {.sinks = 1},
        {.sinks = 1, .causal = 1, .window = 1, .left = 3, .right = -1}, /* gpt-oss's local layers */
        {.softcap = 30.0f, .window = 1, .left = 8, .right = 8},        /* Gemma's local layers */
        {.alibi = 1, .sinks = 1, .softcap = 2.0f, .causal = 1},
        {.alibi = 1, .window = 1, .left = 3, .right = 2},              /* the bias counts from the diagonal */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        check_case(FG_DTYPE_BF16, 2, 29, 40, 4, 2, 32, &cases[c], 70 + c);
        check_case(FG_DTYPE_F16, 1, 40, 17, 4, 4, 16, &cases[c], 90 + c);
    }
}

/* A row that sees no key: O = 0, and the LSE is -inf, or the sink's logit with one. */
Test(reference_variants, rows_without_keys) {
    fg_tensor q, k, v;
    qkv_random(&q, &k, &v, FG_DTYPE_BF16, 1, 8, 4, 2, 2, 16, 1, 2, 3);
    ref_problem p = problem(q, k, v, 0, 1); /* causal, sq 8 > sk 4: rows 0..3 see nothing */
    float sinks[2] = {0.5f, -2.0f};
    p.sinks = per_head(sinks, 2);
    double *lse, *o = run_ref(&p, REF_32, &lse);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < 4; i++) {
            cr_assert_eq(lse[h * 8 + i], (double)sinks[h], "row %lld head %lld: LSE %g", (long long)i, (long long)h,
                         lse[h * 8 + i]);
            for (int64_t x = 0; x < 16; x++) cr_assert_eq(o[(i * 2 + h) * 16 + x], 0.0);
        }
    free(o), free(lse);
    qkv_free(&q, &k, &v);
}

Test(reference_variants, inconsistent_variants_are_refused) {
    fg_tensor q, k, v;
    qkv_random(&q, &k, &v, FG_DTYPE_BF16, 1, 8, 8, 2, 1, 16, 4, 5, 6);
    double o[256], lse[16];
    fg_error e;
    ref_problem p = problem(q, k, v, 0, 0);
    p.causal_top_left = 1;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "causal_top_left"), "%s", e.msg);
    p = problem(q, k, v, 0, 0);
    p.softcap = -1.0f;
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "softcap"), "%s", e.msg);
    float three[3] = {1, 2, 3};
    p = problem(q, k, v, 0, 0);
    p.alibi_slopes = per_head(three, 3);
    cr_assert_eq(ref_attention_fwd(&p, REF_32, o, lse, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "alibi_slopes must be F32 of shape [heads_q] = [2]"), "%s", e.msg);
    qkv_free(&q, &k, &v);
}

/* The gradients from the definitions, over the keys each row sees: P = exp(logit - LSE) (the given LSE, which
 * holds the sink), dP = dO . v, D = sum_j P dP, dS = P (dP - D) x the softcap's derivative, dQ = scale
 * sum_j dS k, dK = scale sum_i dS q and dV = sum_i P dO over a KV head's query heads; dsink_h = -sum_i
 * exp(sink_h - LSE_i) (dO_i . O_i). Outputs contiguous, zeroed here. */
static void naive_variant_bwd(const ref_bwd_problem *bp, double *dq, double *dk, double *dv, double *dsink) {
    const ref_problem *p = &bp->fwd;
    const int64_t B = p->q.shape[0], SQ = p->q.shape[1], HQ = p->q.shape[2], D = p->q.shape[3];
    const int64_t SK = p->k.shape[1], HKV = p->k.shape[2], DV = p->v.shape[3];
    const double scale = p->softmax_scale != 0 ? p->softmax_scale : 1.0 / sqrt((double)D);
    const fg_dtype dt = p->q.dtype;
    memset(dq, 0, (size_t)(B * SQ * HQ * D) * sizeof *dq);
    memset(dk, 0, (size_t)(B * SK * HKV * D + 1) * sizeof *dk);
    memset(dv, 0, (size_t)(B * SK * HKV * DV + 1) * sizeof *dv);
    for (int64_t h = 0; h < HQ; h++) dsink[h] = 0;
    double *P = malloc((size_t)(SK + 1) * sizeof *P), *G = malloc((size_t)(SK + 1) * sizeof *G),
           *DP = malloc((size_t)(SK + 1) * sizeof *DP);
    cr_assert(P && G && DP);
#define F(t, b, s, hh, x) ((double)ref_to_float(dt, *at(t, b, s, hh, x)))
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HQ; h++)
            for (int64_t i = 0; i < SQ; i++) {
                const int64_t kh = h / (HQ / HKV), diag = i + SK - SQ;
                const double lse = ((const float *)bp->lse.data)[b * bp->lse.stride[0] + h * bp->lse.stride[1] + i * bp->lse.stride[2]];
                double Dsum = 0, dout_o = 0;
                for (int64_t x = 0; x < DV; x++) dout_o += F(&bp->d_o, b, i, h, x) * F(&bp->o, b, i, h, x);
                if (p->sinks.data) dsink[h] -= exp(((const float *)p->sinks.data)[h] - lse) * dout_o;
                for (int64_t j = 0; j < SK; j++) {
                    int seen = lse != -INFINITY;
                    if (p->causal) seen = seen && j <= (p->causal_top_left ? i : diag);
                    if (p->window && p->window_left >= 0) seen = seen && j >= diag - p->window_left;
                    if (p->window && p->window_right >= 0) seen = seen && j <= diag + p->window_right;
                    P[j] = DP[j] = 0, G[j] = 1;
                    if (!seen) continue;
                    double dot = 0, dpv = 0;
                    for (int64_t x = 0; x < D; x++) dot += F(&p->q, b, i, h, x) * F(&p->k, b, j, kh, x);
                    for (int64_t x = 0; x < DV; x++) dpv += F(&bp->d_o, b, i, h, x) * F(&p->v, b, j, kh, x);
                    double logit = scale * dot;
                    if (p->softcap > 0) {
                        const double th = tanh(logit / p->softcap);
                        logit = p->softcap * th;
                        G[j] = 1 - th * th;
                    }
                    if (p->alibi_slopes.data) logit -= ((const float *)p->alibi_slopes.data)[h] * fabs((double)(diag - j));
                    P[j] = exp(logit - lse);
                    DP[j] = dpv;
                    Dsum += P[j] * dpv;
                }
                for (int64_t j = 0; j < SK; j++) {
                    if (P[j] == 0) continue;
                    const double ds = P[j] * (DP[j] - Dsum) * G[j];
                    for (int64_t x = 0; x < D; x++) {
                        dq[((b * SQ + i) * HQ + h) * D + x] += scale * ds * F(&p->k, b, j, kh, x);
                        dk[((b * SK + j) * HKV + kh) * D + x] += scale * ds * F(&p->q, b, i, h, x);
                    }
                    for (int64_t x = 0; x < DV; x++) dv[((b * SK + j) * HKV + kh) * DV + x] += P[j] * F(&bp->d_o, b, i, h, x);
                }
            }
#undef F
    free(P), free(G), free(DP);
}

static void check_bwd_case_dv(fg_dtype dt, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                              int64_t dvd, const variant *v, uint64_t seed) {
    fg_tensor q, k, vv;
    qkv_dv(&q, &k, &vv, dt, b, sq, sk, hq, hkv, d, dvd, seed);
    ref_bwd_problem bp;
    memset(&bp, 0, sizeof bp);
    ref_problem *p = &bp.fwd;
    *p = problem(q, k, vv, 0, v->causal);
    p->causal_top_left = v->top_left;
    p->window = v->window, p->window_left = v->left, p->window_right = v->right;
    p->softcap = v->softcap;
    float slopes[16], sinks[16];
    for (int64_t h = 0; h < hq; h++) slopes[h] = 0.5f / (float)(h + 1), sinks[h] = (float)h * 0.75f - 1.0f;
    if (v->alibi) p->alibi_slopes = per_head(slopes, hq);
    if (v->sinks) p->sinks = per_head(sinks, hq);
    /* O and the LSE as a kernel's forward leaves them: the 16-bit ref_lowp O, the ref32 LSE as float */
    double *lse, *olow = run_ref(p, REF_LOWP, NULL), *o32 = run_ref(p, REF_32, &lse);
    const int64_t shape[4] = {b, sq, hq, dvd};
    bp.o = tensor_of(olow, dt, shape, 0, 0);
    bp.d_o = host_tensor(dt, b, sq, hq, dvd, 0, 0);
    fill(&bp.d_o, seed + 3);
    bp.lse = lse_view(lse, b, hq, sq, 0, 0);
    const int64_t nq = b * sq * hq * d, nk = b * sk * hkv * d, nv = b * sk * hkv * dvd;
    double *dq = malloc((size_t)(nq + 1) * sizeof *dq), *dk = malloc((size_t)(nk + 1) * sizeof *dk),
           *dv = malloc((size_t)(nv + 1) * sizeof *dv), *nq_ = malloc((size_t)(nq + 1) * sizeof *nq_),
           *nk_ = malloc((size_t)(nk + 1) * sizeof *nk_), *nv_ = malloc((size_t)(nv + 1) * sizeof *nv_);
    double dsink[16], nsink[16];
    cr_assert(dq && dk && dv && nq_ && nk_ && nv_);
    fg_error e;
    cr_assert_eq(ref_attention_bwd(&bp, REF_32, dq, dk, dv, NULL, &e), FG_OK, "%s", e.msg);
    naive_variant_bwd(&bp, nq_, nk_, nv_, nsink);
    const double eq = max_abs_diff(dq, nq_, nq), ek = max_abs_diff(dk, nk_, nk), ev = max_abs_diff(dv, nv_, nv);
    cr_assert(eq < 1e-10 && ek < 1e-10 && ev < 1e-10, "seed %llu: dq %g, dk %g, dv %g from the definitions",
              (unsigned long long)seed, eq, ek, ev);
    if (v->sinks) {
        cr_assert_eq(ref_sink_grad(&bp, dsink, &e), FG_OK, "%s", e.msg);
        for (int64_t h = 0; h < hq; h++)
            cr_assert(fabs(dsink[h] - nsink[h]) < 1e-9 * (1 + fabs(nsink[h])), "seed %llu: dsink[%lld] %.17g vs %.17g",
                      (unsigned long long)seed, (long long)h, dsink[h], nsink[h]);
    } else {
        cr_assert_eq(ref_sink_grad(&bp, dsink, &e), FG_ERR_INVALID_ARGUMENT, "a problem without sinks has no dsink");
    }
    free(dq), free(dk), free(dv), free(nq_), free(nk_), free(nv_), free(olow), free(o32), free(lse);
    free(bp.o.data), free(bp.d_o.data), free(bp.lse.data);
    qkv_free(&q, &k, &vv);
}

static void check_bwd_case(fg_dtype dt, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                           const variant *v, uint64_t seed) {
    check_bwd_case_dv(dt, b, sq, sk, hq, hkv, d, d, v, seed);
}

/* V's head dim other than Q/K's (DeepSeek's 192 / 128, MLA's 576 / 512 scaled down): O and dO take V's,
 * forward and backward, with GQA, causal, a window and sinks (dsink's D = dO . O over V's head dim). */
Test(reference_variants, unequal_head_dims) {
    const variant plain = {0}, causal = {.causal = 1}, local = {.causal = 1, .window = 1, .left = 5, .right = -1};
    const variant sunk = {.causal = 1, .sinks = 1};
    const variant *vs[4] = {&plain, &causal, &local, &sunk};
    for (int c = 0; c < 4; c++) {
        check_case_dv(FG_DTYPE_BF16, 2, 23, 31, 4, 2, 24, 16, vs[c], 700 + c);  /* dv < d */
        check_case_dv(FG_DTYPE_F16, 1, 31, 23, 2, 1, 16, 40, vs[c], 710 + c);   /* dv > d */
        check_bwd_case_dv(FG_DTYPE_BF16, 2, 23, 31, 4, 2, 24, 16, vs[c], 720 + c);
        check_bwd_case_dv(FG_DTYPE_F16, 1, 31, 23, 2, 1, 16, 40, vs[c], 730 + c);
    }
}

Test(reference_variants, gradients_from_the_definitions) {
    const variant cases[] = {
        {.window = 1, .left = 3, .right = 2},
        {.causal = 1, .window = 1, .left = 4, .right = -1},
        {.causal = 1, .top_left = 1},
        {.softcap = 2.0f},
        {.softcap = 30.0f, .causal = 1, .window = 1, .left = 6, .right = -1},
        {.alibi = 1, .causal = 1},
        {.alibi = 1, .window = 1, .left = 3, .right = 2},
        {.sinks = 1},
        {.sinks = 1, .causal = 1, .window = 1, .left = 3, .right = -1},
        {.alibi = 1, .sinks = 1, .softcap = 1.5f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        check_bwd_case(FG_DTYPE_BF16, 2, 29, 37, 4, 2, 16, &cases[c], 300 + 10 * c); /* GQA, sq < sk */
        check_bwd_case(FG_DTYPE_F16, 1, 41, 19, 2, 2, 24, &cases[c], 500 + 10 * c);  /* sq > sk */
    }
}
