/* test_reference_variants.c: the CPU reference's model variants (reference.h: sliding window, top-left causal,
 * softcap, ALiBi, attention sinks) against naive loops written from their definitions, alone and combined,
 * with windows of 0, 1 and wider than the sequence, sq != sk both ways, rows that see no key, and the rules
 * the reference refuses. Needs no GPU; runs in CI. */
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
    const int64_t SK = p->k.shape[1], HKV = p->k.shape[2];
    const double scale = p->softmax_scale != 0 ? p->softmax_scale : 1.0 / sqrt((double)D);
    double *w = malloc((size_t)(SK + 1) * sizeof *w);
    cr_assert(w);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HQ; h++)
            for (int64_t i = 0; i < SQ; i++) {
                const int64_t kh = h / (HQ / HKV), diag = i + SK - SQ;
                double den = 0, *orow = o + ((b * SQ + i) * HQ + h) * D;
                for (int64_t x = 0; x < D; x++) orow[x] = 0;
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
                        for (int64_t x = 0; x < D; x++)
                            orow[x] += w[j] / total * (double)ref_to_float(p->v.dtype, *at(&p->v, b, j, kh, x));
            }
    free(w);
}

static fg_tensor per_head(float *vals, int64_t n) {
    fg_tensor t = {vals, FG_DTYPE_F32, 1, {n, 0, 0, 0}, {1, 0, 0, 0}};
    return t;
}

static void check_case(fg_dtype dt, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                       const variant *v, uint64_t seed) {
    fg_tensor q, k, vv;
    qkv_random(&q, &k, &vv, dt, b, sq, sk, hq, hkv, d, seed, seed + 1, seed + 2);
    ref_problem p = problem(q, k, vv, 0, v->causal);
    p.causal_top_left = v->top_left;
    p.window = v->window, p.window_left = v->left, p.window_right = v->right;
    p.softcap = v->softcap;
    float slopes[16], sinks[16];
    for (int64_t h = 0; h < hq; h++) slopes[h] = 0.5f / (float)(h + 1), sinks[h] = (float)h * 0.75f - 1.0f;
    if (v->alibi) p.alibi_slopes = per_head(slopes, hq);
    if (v->sinks) p.sinks = per_head(sinks, hq);
    const int64_t no = b * sq * hq * d, nl = b * hq * sq;
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
    /* the backward reference takes no variant yet */
    ref_bwd_problem bp;
    memset(&bp, 0, sizeof bp);
    bp.fwd = problem(q, k, v, 0, 0);
    bp.fwd.window = 1, bp.fwd.window_left = 2, bp.fwd.window_right = 2;
    bp.o = q, bp.d_o = q;
    bp.lse = (fg_tensor){lse, FG_DTYPE_F32, 3, {1, 2, 8, 0}, {16, 8, 1, 0}};
    double g[256];
    cr_assert_eq(ref_attention_bwd(&bp, REF_32, g, g, g, NULL, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "no model variants"), "%s", e.msg);
    qkv_free(&q, &k, &v);
}
