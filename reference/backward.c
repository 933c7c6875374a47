/* backward.c: the CPU reference of the attention backward pass (16-bit inputs): ref_attention_bwd (dQ,
 * dK, dV of either reference) and ref_check_bwd (a kernel's gradients judged element by element), in
 * double from inputs upcast exactly. Contracts in reference.h. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "reference/ref_internal.h"

/* Two passes, so that every output element has one writer and a fixed summation order (the result does
 * not depend on the thread count):
 *   pass 1, units of (batch, query head, block of query rows): per row, P and dP over its keys, then D
 *           (stored for pass 2) and dQ;
 *   pass 2, units of (batch, KV head, block of keys): for the query heads of the group in order, over
 *           chunks of query rows in order, P and dP again, then dK and dV of the block's keys.
 * Pass 1 caches the K/V head it reads, pass 2 a chunk of Q/dO rows, upcast to double once. The hot loops
 * work on four rows at a time (eight independent dot products, one store per four products, K and V read
 * once per four query rows) and two elements at a time (packed arithmetic at -O2): b=2, s=1024, h=8,
 * d=128 takes 2-3 s on two cores, half the time of one row at a time. */

#define BWD_ROWS 64 /* query rows per pass-1 unit, keys per pass-2 unit, query rows per pass-2 chunk */

/* Per-thread scratch of the backward pass. */
typedef struct bwd_scratch {
    double *kd;            /* pass 1: the cached K head [sk][d] */
    double *vd;            /* pass 1: the cached V head [sk][d] */
    int64_t kv_b;          /* batch of the cached K/V head, -1 when none */
    int64_t kv_h;          /* its KV head */
    double *p;             /* pass 1: P of four rows [4][sk] */
    double *dp;            /* pass 1: their dP [4][sk] */
    double *ds;            /* pass 1: their dS, ref32 [4][sk] */
    double *dsl;           /* pass 1: their dS, ref_lowp [4][sk] */
    double *fac;           /* pass 1: the softcap's derivative factor of each pair, 1 without one [4][sk] */
    double *row;           /* pass 1: four q rows, four dO rows, [2][4][d] */
    double *dq32;          /* pass 1: dQ of those rows, ref32 [4][d] */
    double *dqlow;         /* pass 1: dQ of those rows, ref_lowp [4][d] */
    double *blk;           /* pass 2: the K rows then the V rows of the unit's keys, [2][BWD_ROWS][d] */
    double *chunk;         /* pass 2: Q rows then dO rows of a chunk of query rows, [2][BWD_ROWS][d] */
    double *acc;           /* pass 2: dK, dV of ref32, then dK, dV of ref_lowp, [4][BWD_ROWS][d] */
    grad_findings f[3];    /* ref_check_bwd's findings for dq, dk, dv */
} bwd_scratch;

/* One call of ref_attention_bwd or ref_check_bwd: geometry, what to compute and where it goes. */
typedef struct bwd_job {
    const ref_bwd_problem *p; /* inputs */
    fg_dtype dt;              /* input dtype (F16 or BF16) */
    int64_t b, sq, sk;        /* batch, query and key lengths */
    int64_t hq, hkv, d;       /* heads and Q/K's head dim */
    int64_t vdim;             /* V's, O's and dO's head dim */
    int64_t w;                /* the scratch rows' width, max(d, vdim): Q/K rows hold d values, V/dO rows dv,
                                 zeros after them, so one dot product over w is exact for both */
    int64_t group;            /* hq / hkv */
    double scale;             /* softmax scale actually used */
    int want32;               /* compute ref32 */
    int wantlow;              /* compute ref_lowp */
    int64_t q_units;          /* pass 1 units per (batch, query head): ceil(sq / BWD_ROWS) */
    int64_t k_units;          /* pass 2 units per (batch, KV head): ceil(sk / BWD_ROWS) */
    double *d32;              /* ref32's D [b, hq, sq], written by pass 1 (when want32) */
    double *dlow;             /* ref_lowp's D [b, hq, sq], written by pass 1 (when wantlow) */
    bwd_scratch *scr;         /* one per thread */
    int store;                /* 1: ref_attention_bwd stores the reference; 0: ref_check_bwd compares */
    /* ref_attention_bwd: the one reference computed, contiguous (NULL when store is 0, or when empty) */
    double *dq;               /* [b, sq, hq, d] */
    double *dk;               /* [b, sk, hkv, d] */
    double *dv;               /* [b, sk, hkv, dv] */
    /* ref_check_bwd: the kernel's gradients (host) */
    const fg_tensor *gq;      /* dQ */
    const fg_tensor *gk;      /* dK */
    const fg_tensor *gv;      /* dV */
} bwd_job;

/* Element [i0, i1, i2, i3] of a host gradient view (F16, BF16 or F32) as a double; tables filled. */
static double grad_at(const fg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int64_t off = i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3];
    if (t->dtype == FG_DTYPE_F32)
        return (double)((const float *)t->data)[off];
    return fast_to_float(t->dtype, ((const uint16_t *)t->data)[off]);
}

/* The LSE of (batch bi, head h, row i) from the problem's F32 view. */
static double lse_at(const fg_tensor *t, int64_t bi, int64_t h, int64_t i) {
    return (double)((const float *)t->data)[bi * t->stride[0] + h * t->stride[1] + i * t->stride[2]];
}


/* s[r] = a_r . u and g[r] = b_r . w for the four consecutive rows a_r = a + r d, b_r = b + r d: sixteen
 * independent chains (each dot product sums its even and its odd elements apart, then adds the two),
 * written two elements at a time so that compilers use packed arithmetic at -O2. The products are exact in
 * double and the sums' rounding (~1e-16 relative) is far below anything the checks resolve. */
static inline void dot4x2(const double *restrict a, const double *restrict b, const double *restrict u,
                          const double *restrict w, int64_t d, double *s, double *g) {
    const double *a1 = a + d, *a2 = a + 2 * d, *a3 = a + 3 * d, *b1 = b + d, *b2 = b + 2 * d, *b3 = b + 3 * d;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0, g0 = 0, g1 = 0, g2 = 0, g3 = 0; /* even elements */
    double t0 = 0, t1 = 0, t2 = 0, t3 = 0, h0 = 0, h1 = 0, h2 = 0, h3 = 0; /* odd elements */
    int64_t x = 0;
    for (; x + 2 <= d; x += 2) {
        s0 += a[x] * u[x];
        t0 += a[x + 1] * u[x + 1];
        s1 += a1[x] * u[x];
        t1 += a1[x + 1] * u[x + 1];
        s2 += a2[x] * u[x];
        t2 += a2[x + 1] * u[x + 1];
        s3 += a3[x] * u[x];
        t3 += a3[x + 1] * u[x + 1];
        g0 += b[x] * w[x];
        h0 += b[x + 1] * w[x + 1];
        g1 += b1[x] * w[x];
        h1 += b1[x + 1] * w[x + 1];
        g2 += b2[x] * w[x];
        h2 += b2[x + 1] * w[x + 1];
        g3 += b3[x] * w[x];
        h3 += b3[x + 1] * w[x + 1];
    }
    if (x < d) {
        s0 += a[x] * u[x];
        s1 += a1[x] * u[x];
        s2 += a2[x] * u[x];
        s3 += a3[x] * u[x];
        g0 += b[x] * w[x];
        g1 += b1[x] * w[x];
        g2 += b2[x] * w[x];
        g3 += b3[x] * w[x];
    }
    s[0] = s0 + t0, s[1] = s1 + t1, s[2] = s2 + t2, s[3] = s3 + t3;
    g[0] = g0 + h0, g[1] = g1 + h1, g[2] = g2 + h2, g[3] = g3 + h3;
}

/* *s = a . u and *g = b . w (one row: the tail of dot4x2), summed exactly as dot4x2 sums each row. */
static inline void dot1x2(const double *restrict a, const double *restrict b, const double *restrict u,
                          const double *restrict w, int64_t d, double *s, double *g) {
    double s0 = 0, t0 = 0, g0 = 0, h0 = 0;
    int64_t x = 0;
    for (; x + 2 <= d; x += 2) {
        s0 += a[x] * u[x];
        t0 += a[x + 1] * u[x + 1];
        g0 += b[x] * w[x];
        h0 += b[x + 1] * w[x + 1];
    }
    if (x < d) {
        s0 += a[x] * u[x];
        g0 += b[x] * w[x];
    }
    *s = s0 + t0;
    *g = g0 + h0;
}

/* y += c[0] a_0 + c[1] a_1 + c[2] a_2 + c[3] a_3 for the four consecutive rows a_r = a + r d (one load
 * and store of y per four products). Written two elements at a time, which compilers turn into packed
 * arithmetic at -O2; the operations and their order per element are the same. */
static inline void axpy4(double *restrict y, const double *restrict a, const double *c, int64_t d) {
    const double *a1 = a + d, *a2 = a + 2 * d, *a3 = a + 3 * d;
    const double c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    int64_t x = 0;
    for (; x + 2 <= d; x += 2) {
        y[x] += ((c0 * a[x] + c1 * a1[x]) + c2 * a2[x]) + c3 * a3[x];
        y[x + 1] += ((c0 * a[x + 1] + c1 * a1[x + 1]) + c2 * a2[x + 1]) + c3 * a3[x + 1];
    }
    if (x < d)
        y[x] += ((c0 * a[x] + c1 * a1[x]) + c2 * a2[x]) + c3 * a3[x];
}

/* y += c a (one row: the tail of axpy4), two elements at a time like axpy4. */
static inline void axpy1(double *restrict y, const double *restrict a, double c, int64_t d) {
    int64_t x = 0;
    for (; x + 2 <= d; x += 2) {
        y[x] += c * a[x];
        y[x + 1] += c * a[x + 1];
    }
    if (x < d)
        y[x] += c * a[x];
}

/* Makes the K and V of (batch bi, KV head kh) the cached ones in s (pass 1), row-major [sk][d]. */
static void bwd_load_kv(const bwd_job *j, bwd_scratch *s, int64_t bi, int64_t kh) {
    if (s->kv_b == bi && s->kv_h == kh)
        return;
    for (int64_t t = 0; t < j->sk; t++)
        for (int64_t x = 0; x < j->w; x++) {
            s->kd[t * j->w + x] = x < j->d ? elem_float(j->dt, &j->p->fwd.k, bi, t, kh, x) : 0.0;
            s->vd[t * j->w + x] = x < j->vdim ? elem_float(j->dt, &j->p->fwd.v, bi, t, kh, x) : 0.0;
        }
    s->kv_b = bi;
    s->kv_h = kh;
}

/* One past the last key query row i may see (the mask's and the window's right edge): keys past it never
 * count. The keys below it that the row does not see (a window's left edge) are bwd_logit's to drop. */
static int64_t visible_keys(const bwd_job *j, int64_t i) {
    const ref_problem *f = &j->p->fwd;
    const int64_t diag = i + j->sk - j->sq;
    int64_t e = j->sk;
    if (f->causal && (f->causal_top_left ? i : diag) + 1 < e) e = (f->causal_top_left ? i : diag) + 1;
    if (f->window && f->window_right >= 0 && diag + f->window_right + 1 < e) e = diag + f->window_right + 1;
    return e < 0 ? 0 : e;
}

/* The first query row that may see key `key` (rows before it never do; later ones that do not are
 * bwd_logit's to drop). */
static int64_t first_row(const bwd_job *j, int64_t key) {
    const ref_problem *f = &j->p->fwd;
    int64_t i0 = 0;
    if (f->causal) i0 = f->causal_top_left ? key : key - (j->sk - j->sq);
    if (f->window && f->window_right >= 0 && key - (j->sk - j->sq) - f->window_right > i0)
        i0 = key - (j->sk - j->sq) - f->window_right;
    return i0 < 0 ? 0 : i0;
}

/* Row i's logit for key t of head h from its raw score s = q.k (reference.h: scale, softcap, ALiBi), and in
 * *dfac the softcap's derivative factor (d logit / d (scale s)); 0 when the row does not see the key (the
 * window's left edge; visible_keys and first_row bound the rest). */
static int bwd_logit_in(const bwd_job *j, int64_t bi, int64_t i, int64_t t, int64_t h, double s, double *logit,
                        double *dfac, double *mod_in) {
    const ref_problem *f = &j->p->fwd;
    const int64_t diag = i + j->sk - j->sq;
    if (f->window && f->window_left >= 0 && t < diag - f->window_left) return 0;
    double x = s * j->scale, g = 1.0;
    if (f->softcap > 0) {
        const double th = tanh(x / f->softcap);
        x = f->softcap * th;
        g = 1.0 - th * th;
    }
    if (f->alibi_slopes.data)
        x -= ((const float *)f->alibi_slopes.data)[h * f->alibi_slopes.stride[0]] * fabs((double)(diag - t));
    const int b = (int)bi + f->mod_batch0;
    if (mod_in) *mod_in = x;
    if (f->mod_score_grad) { /* a custom mod's score and its derivative (ref_attention_bwd requires both) */
        double d = 1.0;
        x = f->mod_score_grad(f->mod_user, x, b, (int)h, (int)diag, (int)t, &d);
        g *= d;
    }
    if (f->mod_mask) {
        const int keep = f->mod_mask(f->mod_user, b, (int)h, (int)diag, (int)t);
        if (keep == 0) return 0;
        if (keep < 0) x = NAN;
    }
    *logit = x;
    *dfac = g;
    return 1;
}
static int bwd_logit(const bwd_job *j, int64_t bi, int64_t i, int64_t t, int64_t h, double s, double *logit,
                     double *dfac) {
    return bwd_logit_in(j, bi, i, t, h, s, logit, dfac, NULL);
}

/* y_r += sum_t c[r cs + t] a_t for the four rows y_r = y + r d and the four consecutive rows a_t = a + t d:
 * axpy4 on each y_r, so that the a_t are read from memory once for the four rows. */
static inline void axpy4x4(double *restrict y, const double *restrict a, const double *c, int64_t cs, int64_t d) {
    for (int r = 0; r < 4; r++)
        axpy4(y + r * d, a, c + r * cs, d);
}

/* Pass 1 for the nr (1..4) consecutive query rows i.. of (batch bi, head h), their K/V head loaded: stores
 * D of each wanted reference and leaves the rows' dQ of ref32 in s->dq32 and of ref_lowp in s->dqlow
 * ([4][d]). Four rows share each pass over K and V. A row that sees no key, or whose LSE is -inf, has
 * P = 0 everywhere and gets dQ = 0 (exp(s - (-inf)) is never formed); masked pairs are never multiplied
 * in, so a NaN in a key reaches only the rows that see it. */
static void bwd_query_rows(const bwd_job *j, bwd_scratch *s, int64_t bi, int64_t h, int64_t i, int nr) {
    const int64_t d = j->w, sk = j->sk; /* rows of width w (bwd_job) */
    const ref_bwd_problem *p = j->p;
    const int64_t row0 = (bi * j->hq + h) * j->sq + i;
    double *q = s->row, *g = s->row + 4 * d, lse[4], dlow[4] = {0, 0, 0, 0};
    int64_t n[4] = {0, 0, 0, 0}, nmin = sk, nmax = 0;
    for (int r = 0; r < 4; r++)
        for (int64_t x = 0; x < d; x++) {
            q[r * d + x] = r < nr && x < j->d ? elem_float(j->dt, &p->fwd.q, bi, i + r, h, x) : 0.0;
            g[r * d + x] = r < nr && x < j->vdim ? elem_float(j->dt, &p->d_o, bi, i + r, h, x) : 0.0;
            s->dq32[r * d + x] = s->dqlow[r * d + x] = 0.0;
        }
    for (int r = 0; r < nr; r++) {
        if (j->wantlow) { /* the kernel's preprocessing: rowsum(dO * O) of the 16-bit tensors, every row */
            for (int64_t x = 0; x < j->vdim; x++)
                dlow[r] += g[r * d + x] * elem_float(j->dt, &p->o, bi, i + r, h, x);
            j->dlow[row0 + r] = dlow[r];
        }
        lse[r] = lse_at(&p->lse, bi, h, i + r);
        n[r] = lse[r] == -INFINITY ? 0 : visible_keys(j, i + r);
        nmin = n[r] < nmin ? n[r] : nmin;
        nmax = n[r] > nmax ? n[r] : nmax;
        if (j->want32 && n[r] == 0)
            j->d32[row0 + r] = 0.0;
    }
    if (nmax == 0)
        return;

    /* P and dP, four rows against one key at a time; P = 0 past a row's last key. */
    double *pr = s->p, *dp = s->dp;
    for (int64_t t = 0; t < nmax; t++) {
        double sc[4], gv[4];
        if (nr == 4)
            dot4x2(q, g, s->kd + t * d, s->vd + t * d, d, sc, gv);
        else
            for (int r = 0; r < nr; r++)
                dot1x2(q + r * d, g + r * d, s->kd + t * d, s->vd + t * d, d, sc + r, gv + r);
        for (int r = 0; r < nr; r++) {
            double logit, g = 1.0;
            const int seen = t < n[r] && bwd_logit(j, bi, i + r, t, h, sc[r], &logit, &g);
            pr[r * sk + t] = seen ? exp(logit - lse[r]) : 0.0;
            dp[r * sk + t] = gv[r];
            s->fac[r * sk + t] = g;
        }
    }

    /* dS of each wanted reference, then dQ = scale * dS K: four rows by four keys up to the shortest row,
     * then each row's own remaining keys. */
    for (int ref = 0; ref < 2; ref++) {
        if (!(ref ? j->wantlow : j->want32))
            continue;
        double *ds = ref ? s->dsl : s->ds, *y = ref ? s->dqlow : s->dq32;
        for (int r = 0; r < nr; r++) {
            double dr = dlow[r];
            if (!ref) {
                dr = 0;
                for (int64_t t = 0; t < n[r]; t++)
                    dr += pr[r * sk + t] * dp[r * sk + t];
                if (n[r] > 0)
                    j->d32[row0 + r] = dr;
            }
            for (int64_t t = 0; t < n[r]; t++) { /* (the softcap's factor: 1 without one) */
                double v = pr[r * sk + t] * (dp[r * sk + t] - dr) * s->fac[r * sk + t];
                ds[r * sk + t] = ref ? round_to(j->dt, v) : v;
            }
        }
        int64_t t0 = 0;
        if (nr == 4)
            for (; t0 + 4 <= nmin; t0 += 4)
                axpy4x4(y, s->kd + t0 * d, ds + t0, sk, d);
        for (int r = 0; r < nr; r++) {
            int64_t t = t0;
            for (; t + 4 <= n[r]; t += 4)
                axpy4(y + r * d, s->kd + t * d, ds + r * sk + t, d);
            for (; t < n[r]; t++)
                axpy1(y + r * d, s->kd + t * d, ds[r * sk + t], d);
        }
        for (int r = 0; r < nr; r++)
            for (int64_t x = 0; x < d; x++)
                y[r * d + x] = ref ? round_to(j->dt, j->scale * y[r * d + x]) : j->scale * y[r * d + x];
    }
}

/* Pass 1's unit: (batch, query head, block of rows). Stores the computed reference's dQ rows
 * (ref_attention_bwd) or folds both against the kernel's dQ (ref_check_bwd). */
static void bwd_q_unit(void *arg, int tid, int64_t unit) {
    const bwd_job *j = arg;
    bwd_scratch *s = &j->scr[tid];
    const int64_t d = j->d, w = j->w;
    const int64_t blk = unit % j->q_units, bh = unit / j->q_units;
    const int64_t h = bh % j->hq, bi = bh / j->hq;
    const int64_t r0 = blk * BWD_ROWS, r1 = r0 + BWD_ROWS < j->sq ? r0 + BWD_ROWS : j->sq;
    bwd_load_kv(j, s, bi, h / j->group);
    for (int64_t i = r0; i < r1; i += 4) {
        const int nr = i + 4 <= r1 ? 4 : (int)(r1 - i);
        bwd_query_rows(j, s, bi, h, i, nr);
        for (int r = 0; r < nr; r++) {
            const int64_t lin0 = ((bi * j->sq + i + r) * j->hq + h) * d;
            const double *a32 = s->dq32 + r * w, *alow = s->dqlow + r * w;
            if (j->store) {
                memcpy(j->dq + lin0, j->want32 ? a32 : alow, (size_t)d * sizeof *j->dq);
                continue;
            }
            for (int64_t x = 0; x < d; x++)
                ref_findings_fold(&s->f[0], grad_at(j->gq, bi, i + r, h, x), a32[x], alow[x], lin0 + x);
        }
    }
}

/* Pass 2 for query rows i .. i+nr-1 (nr = 4, or 1 in a tail) of the loaded chunk starting at row c0, against
 * key t of the unit's block: P, dP, dS of those rows, added into the key's dK and dV accumulators of
 * each wanted reference. Rows whose LSE is -inf have zeroed Q/dO in the chunk and get P = dS = 0. */
static void bwd_key_rows(const bwd_job *j, bwd_scratch *s, int64_t h, int64_t bi, int64_t c0, int64_t i, int nr,
                         int64_t j0, int64_t t) {
    const int64_t d = j->w, r = i - c0, base = (bi * j->hq + h) * j->sq; /* rows of width w */
    const double *kt = s->blk + t * d, *vt = s->blk + (BWD_ROWS + t) * d;
    const double *qr = s->chunk + r * d, *gr = s->chunk + (BWD_ROWS + r) * d;
    double sc[4], dp[4], pr[4], ds[4], pl[4], dsl[4];
    if (nr == 4)
        dot4x2(qr, gr, kt, vt, d, sc, dp);
    else
        dot1x2(qr, gr, kt, vt, d, sc, dp);
    for (int u = 0; u < nr; u++) {
        const double lse = lse_at(&j->p->lse, bi, h, i + u);
        double logit, g = 1.0;
        const int seen = lse != -INFINITY && j0 + t < visible_keys(j, i + u) && bwd_logit(j, bi, i + u, j0 + t, h, sc[u], &logit, &g);
        pr[u] = seen ? exp(logit - lse) : 0.0;
        if (j->want32)
            ds[u] = pr[u] * (dp[u] - j->d32[base + i + u]) * g;
        if (j->wantlow) {
            pl[u] = round_to(j->dt, pr[u]);
            dsl[u] = round_to(j->dt, pr[u] * (dp[u] - j->dlow[base + i + u]) * g);
        }
    }
    double *dk32 = s->acc + t * d, *dv32 = s->acc + (BWD_ROWS + t) * d;
    double *dkl = s->acc + (2 * BWD_ROWS + t) * d, *dvl = s->acc + (3 * BWD_ROWS + t) * d;
    if (nr == 4) {
        if (j->want32) {
            axpy4(dk32, qr, ds, d);
            axpy4(dv32, gr, pr, d);
        }
        if (j->wantlow) {
            axpy4(dkl, qr, dsl, d);
            axpy4(dvl, gr, pl, d);
        }
    } else {
        if (j->want32) {
            axpy1(dk32, qr, ds[0], d);
            axpy1(dv32, gr, pr[0], d);
        }
        if (j->wantlow) {
            axpy1(dkl, qr, dsl[0], d);
            axpy1(dvl, gr, pl[0], d);
        }
    }
}

/* Pass 2's unit: (batch, KV head, block of keys). Sums dK and dV of its keys over the query heads of the
 * group and the rows that see each key, then stores the computed reference (ref_attention_bwd) or folds
 * both against the kernel's dK and dV (ref_check_bwd). */
static void bwd_k_unit(void *arg, int tid, int64_t unit) {
    const bwd_job *j = arg;
    bwd_scratch *s = &j->scr[tid];
    const int64_t d = j->w; /* rows of width w; dK has j->d columns, dV j->vdim */
    const int64_t blk = unit % j->k_units, bk = unit / j->k_units;
    const int64_t kh = bk % j->hkv, bi = bk / j->hkv;
    const int64_t j0 = blk * BWD_ROWS, nk = j0 + BWD_ROWS < j->sk ? BWD_ROWS : j->sk - j0;
    for (int64_t t = 0; t < nk; t++)
        for (int64_t x = 0; x < d; x++) {
            s->blk[t * d + x] = x < j->d ? elem_float(j->dt, &j->p->fwd.k, bi, j0 + t, kh, x) : 0.0;
            s->blk[(BWD_ROWS + t) * d + x] = x < j->vdim ? elem_float(j->dt, &j->p->fwd.v, bi, j0 + t, kh, x) : 0.0;
        }
    memset(s->acc, 0, (size_t)(4 * BWD_ROWS * d) * sizeof *s->acc);

    for (int64_t h = kh * j->group; h < (kh + 1) * j->group; h++)
        for (int64_t c0 = first_row(j, j0); c0 < j->sq; c0 += BWD_ROWS) {
            const int64_t c1 = c0 + BWD_ROWS < j->sq ? c0 + BWD_ROWS : j->sq;
            for (int64_t i = c0; i < c1; i++) {
                const int keep = lse_at(&j->p->lse, bi, h, i) != -INFINITY;
                double *qr = s->chunk + (i - c0) * d, *gr = s->chunk + (BWD_ROWS + i - c0) * d;
                for (int64_t x = 0; x < d; x++) {
                    qr[x] = keep && x < j->d ? elem_float(j->dt, &j->p->fwd.q, bi, i, h, x) : 0.0;
                    gr[x] = keep && x < j->vdim ? elem_float(j->dt, &j->p->d_o, bi, i, h, x) : 0.0;
                }
            }
            for (int64_t t = 0; t < nk; t++) { /* key by key, over the chunk's rows that see the key */
                int64_t i = first_row(j, j0 + t) > c0 ? first_row(j, j0 + t) : c0;
                for (; i + 4 <= c1; i += 4)
                    bwd_key_rows(j, s, h, bi, c0, i, 4, j0, t);
                for (; i < c1; i++)
                    bwd_key_rows(j, s, h, bi, c0, i, 1, j0, t);
            }
        }

    for (int64_t t = 0; t < nk; t++) {
        const int64_t lk = ((bi * j->sk + j0 + t) * j->hkv + kh) * j->d, lv = ((bi * j->sk + j0 + t) * j->hkv + kh) * j->vdim;
        for (int64_t x = 0; x < j->d; x++) {
            const double k32 = j->scale * s->acc[t * d + x];
            const double klow = round_to(j->dt, j->scale * s->acc[(2 * BWD_ROWS + t) * d + x]);
            if (j->store)
                j->dk[lk + x] = j->want32 ? k32 : klow;
            else
                ref_findings_fold(&s->f[1], grad_at(j->gk, bi, j0 + t, kh, x), k32, klow, lk + x);
        }
        for (int64_t x = 0; x < j->vdim; x++) {
            const double v32 = s->acc[(BWD_ROWS + t) * d + x];
            const double vlow = round_to(j->dt, s->acc[(3 * BWD_ROWS + t) * d + x]);
            if (j->store)
                j->dv[lv + x] = j->want32 ? v32 : vlow;
            else
                ref_findings_fold(&s->f[2], grad_at(j->gv, bi, j0 + t, kh, x), v32, vlow, lv + x);
        }
    }
}


/* Fills j's geometry from p, allocates one scratch per thread and the D arrays the caller did not give
 * (d32 / dlow already set are kept); *nthreads receives the thread count. Free with bwd_free. */
static fg_status bwd_init(bwd_job *j, const ref_bwd_problem *p, int *nthreads, fg_error *err) {
    if (ref_tables_fill() != 0)
        return fg_fail(err, FG_ERR_INTERNAL, "reference: pthread_once failed");
    j->p = p;
    j->dt = p->fwd.q.dtype;
    j->b = p->fwd.q.shape[0];
    j->sq = p->fwd.q.shape[1];
    j->hq = p->fwd.q.shape[2];
    j->d = p->fwd.q.shape[3];
    j->vdim = p->fwd.v.shape[3];
    j->w = j->d > j->vdim ? j->d : j->vdim;
    j->sk = p->fwd.k.shape[1];
    j->hkv = p->fwd.k.shape[2];
    j->group = j->hq / j->hkv;
    j->scale = p->fwd.softmax_scale != 0.0f ? (double)p->fwd.softmax_scale : 1.0 / sqrt((double)j->d);
    j->q_units = (j->sq + BWD_ROWS - 1) / BWD_ROWS;
    j->k_units = (j->sk + BWD_ROWS - 1) / BWD_ROWS;
    const int64_t rows = j->b * j->hq * j->sq;
    size_t nrow = (size_t)(rows > 0 ? rows : 1);
    if (j->want32 && !j->d32 && !(j->d32 = malloc(nrow * sizeof *j->d32)))
        return fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %lld row sums", (long long)rows);
    if (j->wantlow && !j->dlow && !(j->dlow = malloc(nrow * sizeof *j->dlow)))
        return fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %lld row sums", (long long)rows);
    int n1 = ref_thread_count(j->b * j->hq * j->q_units), n2 = ref_thread_count(j->b * j->hkv * j->k_units);
    int n = n1 > n2 ? n1 : n2;
    j->scr = calloc((size_t)n, sizeof *j->scr);
    if (!j->scr)
        return fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %d thread states", n);
    const size_t d = (size_t)j->w, sk = (size_t)(j->sk > 0 ? j->sk : 1); /* rows of width w */
    for (int i = 0; i < n; i++) {
        bwd_scratch *s = &j->scr[i];
        s->kd = malloc(sk * d * sizeof *s->kd);
        s->vd = malloc(sk * d * sizeof *s->vd);
        s->p = malloc(20 * sk * sizeof *s->p);
        s->row = malloc(16 * d * sizeof *s->row);
        s->blk = malloc(2 * BWD_ROWS * d * sizeof *s->blk);
        s->chunk = malloc(2 * BWD_ROWS * d * sizeof *s->chunk);
        s->acc = malloc(4 * BWD_ROWS * d * sizeof *s->acc);
        *nthreads = i + 1;
        if (!s->kd || !s->vd || !s->p || !s->row || !s->blk || !s->chunk || !s->acc)
            return fg_fail(err, FG_ERR_NO_MEMORY,
                           "reference: out of memory for the K/V cache of sk=%lld, d=%lld per thread", (long long)j->sk,
                           (long long)j->d);
        s->dp = s->p + 4 * sk;
        s->ds = s->p + 8 * sk;
        s->dsl = s->p + 12 * sk;
        s->fac = s->p + 16 * sk;
        s->dq32 = s->row + 8 * d;
        s->dqlow = s->row + 12 * d;
        s->kv_b = s->kv_h = -1;
        for (int g = 0; g < 3; g++)
            s->f[g].worst_lin = s->f[g].first_nf_lin = -1;
    }
    *nthreads = n;
    return FG_OK;
}

/* Frees the scratch of the first nthreads threads, the scratch array and the D arrays that bwd_init
 * allocated (not a caller's: own32 / ownlow say which are ours). */
static void bwd_free(bwd_job *j, int nthreads, int own32, int ownlow) {
    if (j->scr) {
        for (int i = 0; i < nthreads; i++) {
            bwd_scratch *s = &j->scr[i];
            free(s->kd);
            free(s->vd);
            free(s->p);
            free(s->row);
            free(s->blk);
            free(s->chunk);
            free(s->acc);
        }
        free(j->scr);
        j->scr = NULL;
    }
    if (own32)
        free(j->d32);
    if (ownlow)
        free(j->dlow);
}

/* Runs both passes of j on n threads (pass 2 reads the D that pass 1 stores). */
static void bwd_run(bwd_job *j, int n) {
    ref_run_parallel(j, bwd_q_unit, j->b * j->hq * j->q_units, n);
    ref_run_parallel(j, bwd_k_unit, j->b * j->hkv * j->k_units, n);
}

/* Contract in reference.h. */
fg_status ref_attention_bwd(const ref_bwd_problem *p, ref_mode mode, double *dq, double *dk, double *dv,
                            double *delta, fg_error *err) {
    fg_status st = ref_check_bwd_problem(p, err);
    if (st)
        return st;
    if (mode != REF_32 && mode != REF_LOWP)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: mode must be REF_32 or REF_LOWP");
    if (!dq && ref_elements(&p->fwd.q) > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the output array dq is NULL");
    if ((!dk || !dv) && ref_elements(&p->fwd.k) > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the output arrays dk and dv must not be NULL");
    bwd_job j;
    memset(&j, 0, sizeof j);
    j.want32 = mode == REF_32;
    j.wantlow = mode == REF_LOWP;
    if (j.want32)
        j.d32 = delta;
    else
        j.dlow = delta;
    j.store = 1; /* dq, dk, dv are NULL only for empty tensors, which no unit touches */
    j.dq = dq;
    j.dk = dk;
    j.dv = dv;
    int n = 0;
    st = bwd_init(&j, p, &n, err);
    if (st == FG_OK)
        bwd_run(&j, n);
    bwd_free(&j, n, j.want32 && !delta, j.wantlow && !delta);
    return st;
}

/* Merges the threads' findings f[g] of j into one gradient report; shape: the gradient's sizes. */
static void grad_merge(const bwd_job *j, int n, int g, const int64_t *shape, ref_grad_report *r) {
    memset(r, 0, sizeof *r);
    int64_t worst = -1, first_nf = -1;
    for (int i = 0; i < n; i++) {
        ref_findings_merge(&j->scr[i].f[g], &r->max_lowp_err, &r->max_err, &r->worst_out, &r->worst_ref, &worst,
                       &r->nonfinite, &first_nf);
    }
    ref_unflatten(worst, shape, 4, r->worst);
    ref_unflatten(first_nf, shape, 4, r->first_nonfinite);
    r->bound = ref_bwd_bound(r->max_lowp_err);
    r->pass = r->nonfinite == 0 && r->max_err <= r->bound;
}

/* Contract in reference.h. */
fg_status ref_check_bwd(const ref_bwd_problem *p, const fg_tensor *dq, const fg_tensor *dk, const fg_tensor *dv,
                        ref_bwd_report *r, fg_error *err) {
    fg_status st = ref_check_bwd_problem(p, err);
    if (st)
        return st;
    if (!dq || !dk || !dv || !r)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: dq, dk, dv and the report must not be NULL");
    const fg_tensor *g[3] = {dq, dk, dv};
    static const char *const names[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        const fg_tensor *like = i == 0 ? &p->fwd.q : i == 1 ? &p->fwd.k : &p->fwd.v;
        if ((st = ref_check_like(g[i], names[i], like, i == 0 ? "q" : i == 1 ? "k" : "v", err)))
            return st;
        if (g[i]->dtype != FG_DTYPE_F16 && g[i]->dtype != FG_DTYPE_BF16 && g[i]->dtype != FG_DTYPE_F32)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.dtype must be F16, BF16 or F32", names[i]);
    }
    bwd_job j;
    memset(&j, 0, sizeof j);
    j.want32 = j.wantlow = 1;
    j.gq = dq;
    j.gk = dk;
    j.gv = dv;
    int n = 0;
    st = bwd_init(&j, p, &n, err);
    if (st == FG_OK) {
        bwd_run(&j, n);
        grad_merge(&j, n, 0, p->fwd.q.shape, &r->dq);
        grad_merge(&j, n, 1, p->fwd.k.shape, &r->dk);
        grad_merge(&j, n, 2, p->fwd.v.shape, &r->dv);
        r->pass = r->dq.pass && r->dk.pass && r->dv.pass;
    }
    bwd_free(&j, n, 1, 1);
    return st;
}


/* rowsum(dO_i O_i) of row i (batch bi, head h) of the given 16-bit tensors, over V's head dim dv, as the kernels'
 * preprocessing forms D. */
static double dout_dot_o(const ref_bwd_problem *p, fg_dtype dt, int64_t dv, int64_t bi, int64_t i, int64_t h) {
    double d = 0;
    for (int64_t x = 0; x < dv; x++)
        d += elem_float(dt, &p->d_o, bi, i, h, x) * elem_float(dt, &p->o, bi, i, h, x);
    return d;
}

/* Contract in reference.h. A few multiplications a row: one thread. */
fg_status ref_sink_grad(const ref_bwd_problem *p, double *dsink, fg_error *err) {
    fg_status st = ref_check_bwd_problem(p, err);
    if (st)
        return st;
    if (!p->fwd.sinks.data || !dsink)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: ref_sink_grad needs a problem with sinks and an output");
    if (ref_tables_fill() != 0)
        return fg_fail(err, FG_ERR_INTERNAL, "reference: pthread_once failed");
    const fg_dtype dt = p->fwd.q.dtype;
    const int64_t b = p->fwd.q.shape[0], sq = p->fwd.q.shape[1], hq = p->fwd.q.shape[2], dv = p->fwd.v.shape[3];
    for (int64_t h = 0; h < hq; h++) {
        const double sink = ((const float *)p->fwd.sinks.data)[h * p->fwd.sinks.stride[0]];
        double g = 0;
        for (int64_t bi = 0; bi < b; bi++)
            for (int64_t i = 0; i < sq; i++)
                g -= exp(sink - lse_at(&p->lse, bi, h, i)) * dout_dot_o(p, dt, dv, bi, i, h);
        dsink[h] = g;
    }
    return FG_OK;
}

/* Contract in reference.h. One thread: the visitor may add into shared sums. */
fg_status ref_score_grads(const ref_bwd_problem *p, ref_score_grad_visit visit, void *user, fg_error *err) {
    fg_status st = ref_check_bwd_problem(p, err);
    if (st)
        return st;
    if (!visit)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: ref_score_grads needs a visitor");
    if (ref_tables_fill() != 0)
        return fg_fail(err, FG_ERR_INTERNAL, "reference: pthread_once failed");
    bwd_job j;
    memset(&j, 0, sizeof j);
    j.p = p, j.dt = p->fwd.q.dtype;
    j.b = p->fwd.q.shape[0], j.sq = p->fwd.q.shape[1], j.hq = p->fwd.q.shape[2], j.d = p->fwd.q.shape[3];
    j.vdim = p->fwd.v.shape[3], j.sk = p->fwd.k.shape[1], j.hkv = p->fwd.k.shape[2], j.group = j.hq / j.hkv;
    j.scale = p->fwd.softmax_scale != 0.0f ? (double)p->fwd.softmax_scale : 1.0 / sqrt((double)j.d);
    for (int64_t bi = 0; bi < j.b; bi++)
        for (int64_t h = 0; h < j.hq; h++)
            for (int64_t i = 0; i < j.sq; i++) {
                const double lse = lse_at(&p->lse, bi, h, i);
                if (lse == -INFINITY)
                    continue;
                const double dsum = dout_dot_o(p, j.dt, j.vdim, bi, i, h);
                const int64_t n = visible_keys(&j, i), kh = h / j.group;
                for (int64_t t = 0; t < n; t++) {
                    double sc = 0, dp = 0, logit, fac, in;
                    for (int64_t x = 0; x < j.d; x++)
                        sc += elem_float(j.dt, &p->fwd.q, bi, i, h, x) * elem_float(j.dt, &p->fwd.k, bi, t, kh, x);
                    if (!bwd_logit_in(&j, bi, i, t, h, sc, &logit, &fac, &in))
                        continue;
                    for (int64_t x = 0; x < j.vdim; x++)
                        dp += elem_float(j.dt, &p->d_o, bi, i, h, x) * elem_float(j.dt, &p->fwd.v, bi, t, kh, x);
                    const double pr = exp(logit - lse);
                    visit(user, (int)bi + p->fwd.mod_batch0, (int)h, (int)(i + j.sk - j.sq), (int)t, in, pr * (dp - dsum));
                }
            }
    return FG_OK;
}
