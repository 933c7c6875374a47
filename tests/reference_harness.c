/* reference_harness.c: the helpers the CPU reference's test programs share (see reference_harness.h). */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "tests/reference_harness.h"

/* A host tensor [b, s, h, d] of dtype dt. pad > 0 makes it a strided slice of a larger buffer: each
 * dim's stride gets `pad` extra elements and the padding holds NaN, which must never reach a result.
 * bhsd != 0 stores it head-major ([b, h, s, d] in memory) while the view stays [b, s, h, d]. */
fg_tensor host_tensor(fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int64_t pad, int bhsd) {
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
uint16_t *at(const fg_tensor *t, int64_t b, int64_t s, int64_t h, int64_t x) {
    return (uint16_t *)t->data + b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + x * t->stride[3];
}

/* ref_fill_normal, failing the test on error. */
void fill(const fg_tensor *t, uint64_t seed) {
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_fill_normal(t, seed, &e), FG_OK, "ref_fill_normal: %s", e.msg);
}

/* Random contiguous Q [b, sq, hq, d], K and V [b, sk, hkv, d] of dtype dt, filled from seeds sq_seed,
 * k_seed and v_seed (ref_fill_normal). Free with qkv_free. */
void qkv_random(fg_tensor *q, fg_tensor *k, fg_tensor *v, fg_dtype dt, int64_t b, int64_t sq, int64_t sk,
                       int64_t hq, int64_t hkv, int64_t d, uint64_t q_seed, uint64_t k_seed, uint64_t v_seed) {
    *q = host_tensor(dt, b, sq, hq, d, 0, 0);
    *k = host_tensor(dt, b, sk, hkv, d, 0, 0);
    *v = host_tensor(dt, b, sk, hkv, d, 0, 0);
    fill(q, q_seed);
    fill(k, k_seed);
    fill(v, v_seed);
}

/* Frees the storage of three host tensors (qkv_random's, or host_tensor's). */
void qkv_free(fg_tensor *q, fg_tensor *k, fg_tensor *v) {
    free(q->data);
    free(k->data);
    free(v->data);
}

/* A ref_problem from its parts. */
ref_problem problem(fg_tensor q, fg_tensor k, fg_tensor v, float scale, int causal) {
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
double *run_ref(const ref_problem *p, ref_mode mode, double **lse_out) {
    int64_t no = p->q.shape[0] * p->q.shape[1] * p->q.shape[2] * p->v.shape[3]; /* O has v's head dim */
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
void naive(const ref_problem *p, int lowp, double *o, double *lse) {
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
double max_abs_diff(const double *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* An fp8 host tensor [b, s, h, d]. vt != 0 lays it out key-major like the FP8 kernel's V (a [b, h, d, s']
 * buffer, s' = s rounded up to 16); the padding between and after rows holds NaN codes, which must never
 * reach a result. */
fg_tensor host_fp8(fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int vt) {
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
fg_tensor host_descale(const float *vals, int64_t b, int64_t hkv, int per_head) {
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

/* An fp8 problem: q [b, sq, hq, d], k and v [b, sk, hkv, d] (V key-major), filled from seeds; out bf16. */
ref_problem fp8_problem(fg_dtype dt, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d) {
    fg_tensor q = host_fp8(dt, b, sq, hq, d, 0), k = host_fp8(dt, b, sk, hkv, d, 0), v = host_fp8(dt, b, sk, hkv, d, 1);
    fill(&q, 61);
    fill(&k, 62);
    fill(&v, 63);
    ref_problem p = problem(q, k, v, 0, 0);
    p.out_dtype = FG_DTYPE_BF16;
    return p;
}

/* Frees an fp8_problem's tensors and descale views. */
void fp8_problem_free(ref_problem *p) {
    free(p->q.data);
    free(p->k.data);
    free(p->v.data);
    free(p->q_descale.data);
    free(p->k_descale.data);
    free(p->v_descale.data);
}

/* An F32 host view [b, hq, sq] of a contiguous double LSE [b, hq, sq]. pad > 0 makes it a strided slice
 * (NaN in the padding); transposed != 0 stores it [b, sq, hq] in memory. */
fg_tensor lse_view(const double *lse, int64_t b, int64_t hq, int64_t sq, int64_t pad, int transposed) {
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

/* A host tensor like q (same dtype and shape, contiguous unless pad / bhsd) holding the contiguous
 * double array a rounded to the dtype. */
fg_tensor tensor_of(const double *a, fg_dtype dt, const int64_t *shape, int64_t pad, int bhsd) {
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
ref_bwd_problem bwd_problem(fg_tensor q, fg_tensor k, fg_tensor v, float scale, int causal, uint64_t seed) {
    ref_bwd_problem p;
    memset(&p, 0, sizeof p);
    p.fwd = problem(q, k, v, scale, causal);
    double *lse, *o = run_ref(&p.fwd, REF_LOWP, &lse);
    const int64_t oshape[4] = {q.shape[0], q.shape[1], q.shape[2], v.shape[3]}; /* O has V's head dim */
    p.o = tensor_of(o, q.dtype, oshape, 0, 0);
    p.d_o = host_tensor(q.dtype, q.shape[0], q.shape[1], q.shape[2], v.shape[3], 0, 0);
    fill(&p.d_o, seed);
    p.lse = lse_view(lse, q.shape[0], q.shape[2], q.shape[1], 0, 0);
    free(o);
    free(lse);
    return p;
}

/* Frees what bwd_problem allocated. */
void bwd_problem_free(ref_bwd_problem *p) {
    free(p->o.data);
    free(p->d_o.data);
    free(p->lse.data);
}

/* Allocates grads for p (NaN-filled, so that an element never written shows). */
grads grads_alloc(const ref_bwd_problem *p) {
    grads g;
    g.nq = p->fwd.q.shape[0] * p->fwd.q.shape[1] * p->fwd.q.shape[2] * p->fwd.q.shape[3];
    g.nk = p->fwd.k.shape[0] * p->fwd.k.shape[1] * p->fwd.k.shape[2] * p->fwd.k.shape[3];
    g.nv = p->fwd.v.shape[0] * p->fwd.v.shape[1] * p->fwd.v.shape[2] * p->fwd.v.shape[3];
    g.nrow = p->fwd.q.shape[0] * p->fwd.q.shape[2] * p->fwd.q.shape[1];
    g.dq = malloc((size_t)(g.nq + 1) * sizeof *g.dq);
    g.dk = malloc((size_t)(g.nk + 1) * sizeof *g.dk);
    g.dv = malloc((size_t)(g.nv + 1) * sizeof *g.dv);
    g.delta = malloc((size_t)(g.nrow + 1) * sizeof *g.delta);
    cr_assert(g.dq && g.dk && g.dv && g.delta, "out of memory");
    for (int64_t i = 0; i <= g.nq; i++)
        g.dq[i] = NAN;
    for (int64_t i = 0; i <= g.nk; i++)
        g.dk[i] = NAN;
    for (int64_t i = 0; i <= g.nv; i++)
        g.dv[i] = NAN;
    for (int64_t i = 0; i <= g.nrow; i++)
        g.delta[i] = NAN;
    return g;
}

/* Frees grads. */
void grads_free(grads *g) {
    free(g->dq);
    free(g->dk);
    free(g->dv);
    free(g->delta);
}

/* ref_attention_bwd in `mode`, failing the test on error. */
grads run_bwd(const ref_bwd_problem *p, ref_mode mode) {
    grads g = grads_alloc(p);
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_bwd(p, mode, g.dq, g.dk, g.dv, g.delta, &e), FG_OK, "ref_attention_bwd: %s", e.msg);
    return g;
}

/* Random bf16 inputs (b=2, sq=40, sk=30, 4 heads over 2, d=32, causal: rows 0..9 see nothing) with the
 * gradients = ref_lowp's, which must pass. Free with bwd_fixture_free. */
void bwd_fixture_make(bwd_fixture *f) {
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
void bwd_fixture_free(bwd_fixture *f) {
    bwd_problem_free(&f->p);
    qkv_free(&f->q, &f->k, &f->v);
    free(f->dq.data);
    free(f->dk.data);
    free(f->dv_mem);
}
