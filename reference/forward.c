/* forward.c: the CPU reference of the attention forward pass, one query row at a time, in double from
 * inputs upcast exactly: ref_attention_fwd (either reference stored), ref_check_fwd (a kernel's O and LSE
 * judged element by element) and ref_rmse_fwd. Work is split over (batch, head, block of query rows)
 * units so that one head with millions of rows still uses every core; each worker upcasts the K/V head
 * its unit reads once and reuses it while consecutive units share that head. All memory is allocated
 * before the threads start, so workers cannot fail. Contracts in reference.h. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "reference/ref_internal.h"

/* ------------------------------------------------------------------------------------------------ */
/* The forward pass, one query row at a time                                                        */
/* ------------------------------------------------------------------------------------------------ */

/* Per-thread scratch. */
typedef struct scratch {
    float *kf;          /* the cached K head, [sk][d] */
    float *vf;          /* the cached V head, transposed [d][sk]: P.V becomes d dot products */
    int64_t kv_b;       /* batch of the cached head, -1 when none */
    int64_t kv_h;       /* KV head of the cached head */
    double *s;          /* scores, then unrounded P, of one row [sk] */
    double *pl;         /* P rounded to the input dtype [sk] */
    double *q;          /* the query row [d] */
    double *o32;        /* ref32 output row [d] */
    double *olow;       /* ref_lowp output row [d] */
    double lse_slack;   /* FP8: the LSE rule's allowance for FP8 tensor-core accumulation, this row */
    grad_findings f;        /* ref_check_fwd's running findings on O, merged after the threads end */
    double lse_max;         /* max |lse - ref| over finite references */
    int64_t lse_worst_lin;  /* its row, -1 when none */
    int64_t lse_bad;        /* rows breaking the LSE rule */
    int64_t lse_bad_lin;    /* first of them, -1 when none */
    double lse_bad_val;     /* its value */
    double lse_bad_ref;     /* its reference */
} scratch;

typedef struct fwd_job {
    const ref_problem *p;    /* inputs */
    fg_dtype dt;             /* input dtype (q's) */
    fg_dtype kdt;            /* K's and V's (dt, or E4M3/E5M2 beside a 16-bit q: an FP8 KV cache) */
    fg_dtype odt;            /* output dtype (dt, or p->out_dtype for FP8) */
    int fp8;                 /* the inputs are E4M3 or E5M2 */
    int fp8_sum_rounded;     /* p->fp8_sum_rounded, for FP8 problems */
    int64_t b, sq, sk;       /* batch, query and key lengths */
    int64_t hq, hkv, d;      /* heads and Q/K's head dim */
    int64_t dv;              /* V's and O's head dim (d unless the problem's V is narrower or wider) */
    int64_t group;           /* hq / hkv */
    double scale;            /* softmax scale actually used */
    int64_t rows_per_unit;   /* query rows per work unit */
    int64_t units_per_head;  /* ceil(sq / rows_per_unit) */
    scratch *scr;            /* one per thread */
    /* ref_attention_fwd */
    ref_mode mode;           /* which output to store */
    double *o;               /* [b, sq, hq, d] */
    double *lse;             /* [b, hq, sq] or NULL */
    /* ref_check_fwd */
    const fg_tensor *out;    /* kernel output (host) */
    const fg_tensor *lse_out;/* kernel LSE (host) or NULL */
    /* ref_rmse_fwd */
    double *unit_sse;        /* per unit: sum of (out - ref32)^2 over its finite outputs, NaN if any is not */
} fwd_job;

/* Makes the K and V of (batch bi, KV head kh) the cached ones in s. */
static void load_kv(const fwd_job *j, scratch *s, int64_t bi, int64_t kh) {
    if (s->kv_b == bi && s->kv_h == kh)
        return;
    for (int64_t t = 0; t < j->sk; t++) {
        for (int64_t x = 0; x < j->d; x++)
            s->kf[t * j->d + x] = elem_float(j->kdt, &j->p->k, bi, t, kh, x);
        for (int64_t x = 0; x < j->dv; x++)
            s->vf[x * j->sk + t] = elem_float(j->kdt, &j->p->v, bi, t, kh, x);
    }
    s->kv_b = bi;
    s->kv_h = kh;
}

/* Computes query row i of (batch bi, head h): s->o32 and s->olow receive both references' O, and the
 * LSE is returned (-inf, with O = 0, when the row sees no key). The KV head must already be loaded. FP8
 * rows work on the raw fp8 values and apply the descale factors as the kernel does: c = scale * qd * kd
 * on the scores, vd on P.V (reference.h); so do rows of an FP8 KV cache beside a 16-bit q (kd and vd), whose
 * P is rounded to q's dtype as a 16-bit row's. */
/* The model variants of a row (reference.h): the keys [lo, lo + n) it sees, from the mask and the window. */
static int64_t visible_keys(const fwd_job *j, int64_t i, int64_t *lo) {
    const ref_problem *p = j->p;
    const int64_t diag = i + j->sk - j->sq; /* the bottom-right diagonal */
    int64_t a = 0, e = j->sk;               /* keys [a, e) */
    if (p->causal) {
        const int64_t last = p->causal_top_left ? i : diag;
        if (last + 1 < e) e = last + 1;
    }
    if (p->window) {
        if (p->window_left >= 0 && diag - p->window_left > a) a = diag - p->window_left;
        if (p->window_right >= 0 && diag + p->window_right + 1 < e) e = diag + p->window_right + 1;
    }
    *lo = a;
    return e > a ? e - a : 0;
}

/* Element h of a per-head F32 host array (alibi_slopes, sinks). */
static double per_head(const fg_tensor *t, int64_t h) { return ((const float *)t->data)[h * t->stride[0]]; }

static double forward_row(const fwd_job *j, scratch *s, int64_t bi, int64_t i, int64_t h) {
    const int64_t d = j->d;
    int64_t lo;
    const int64_t n = visible_keys(j, i, &lo);
    const int sink = j->p->sinks.data != NULL;
    const double sink_logit = sink ? per_head(&j->p->sinks, h) : -INFINITY;
    if (n == 0) {
        for (int64_t x = 0; x < j->dv; x++)
            s->o32[x] = s->olow[x] = 0.0;
        return sink_logit; /* -inf without a sink */
    }
    const double cap = j->p->softcap;
    const double slope = j->p->alibi_slopes.data ? per_head(&j->p->alibi_slopes, h) : 0.0;
    const int64_t diag = i + j->sk - j->sq;
    double *restrict q = s->q, *restrict sc = s->s, *restrict pl = s->pl;
    for (int64_t x = 0; x < d; x++)
        q[x] = elem_float(j->dt, &j->p->q, bi, i, h, x);
    const int64_t kh = h / j->group;
    const double c = j->scale * descale_at(&j->p->q_descale, bi, kh) * descale_at(&j->p->k_descale, bi, kh);
    const double vd = descale_at(&j->p->v_descale, bi, kh);

    /* Scores. Four accumulation chains hide the add latency; the products are exact in double and the
     * sums' rounding (~1e-16 relative) is far below anything the checks resolve. */
    double m = -INFINITY, mag = 0;
    int m_nan = 0; /* a NaN score (a custom mod's bad load): the row's O and LSE are NaN */
    for (int64_t t = 0; t < n; t++) {
        const float *restrict kr = s->kf + (lo + t) * d;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int64_t x = 0;
        for (; x + 4 <= d; x += 4) {
            a0 += q[x] * kr[x];
            a1 += q[x + 1] * kr[x + 1];
            a2 += q[x + 2] * kr[x + 2];
            a3 += q[x + 3] * kr[x + 3];
        }
        for (; x < d; x++)
            a0 += q[x] * kr[x];
        sc[t] = ((a0 + a1) + (a2 + a3)) * c;
        if (cap > 0)
            sc[t] = cap * tanh(sc[t] / cap);
        if (slope != 0)
            sc[t] -= slope * fabs((double)(diag - (lo + t)));
        if (j->p->mod_score)
            sc[t] = j->p->mod_score(j->p->mod_user, sc[t], (int)bi + j->p->mod_batch0, (int)h, (int)diag, (int)(lo + t));
        if (j->p->mod_mask) {
            const int keep = j->p->mod_mask(j->p->mod_user, (int)bi + j->p->mod_batch0, (int)h, (int)diag, (int)(lo + t));
            if (keep <= 0) sc[t] = keep == 0 ? -INFINITY : NAN;
        }
        if (sc[t] != sc[t]) m_nan = 1;
        if (sc[t] > m)
            m = sc[t];
        if (j->fp8) {
            double a = 0;
            for (x = 0; x < d; x++)
                a += fabs(q[x] * kr[x]);
            if (a * fabs(c) > mag)
                mag = a * fabs(c);
        }
    }
    /* FP8 tensor cores do not accumulate in full fp32: on Hopper (wgmma, and mma e4m3 on Ada and Hopper
     * per SageAttention2) products are aligned to the largest exponent and the sum kept to about 13
     * mantissa bits, truncated, once per k32 instruction (DeepSeek-V3 report, section 3.5.2; SageAttention2
     * calls it an FP22 accumulator); flashgen's sm_90a FP8 kernel's LSE errors of 1-2e-3 come from exactly
     * this. A score is then off by up to about
     * 2^-13 * (d/32 + 1) * sum|q.k| * scale, and the LSE by as much as its largest score. The allowance is
     * twice that; a wrong scale, base or row maximum is still off by orders of magnitude more. */
    s->lse_slack = j->fp8 ? ldexp((double)(d / 32 + 1) * mag, -12) : 0.0;

    if (m == -INFINITY && !m_nan) { /* a custom mask hid every key: as a row that sees none */
        for (int64_t x = 0; x < j->dv; x++)
            s->o32[x] = s->olow[x] = 0.0;
        return sink_logit;
    }
    /* P, its rounded copy, and l from the unrounded P. FP8 scales P by 2^8 (exactly, so the lowp row sum
     * is 2^8 l) before rounding it to e4m3, using (0, 256] of the format's range; with fp8_sum_rounded the
     * lowp O is divided by the sum of the rounded P instead (the LSE keeps l either way). */
    double l = 0, l_rounded = 0;
    for (int64_t t = 0; t < n; t++) {
        sc[t] = exp(sc[t] - m);
        pl[t] = j->fp8 ? round_to_e4m3(ldexp(sc[t], 8)) : round_to(j->dt, sc[t]);
        l += sc[t];
        l_rounded += pl[t];
    }
    /* The sink's share of the denominator (a key without a value), relative to the keys' maximum m; a sink
     * far above every key makes it infinite and O 0, its limit. The LSE takes the larger of the two as its
     * base so that it stays finite. */
    double lse = m + log(l);
    if (sink) {
        const double big = sink_logit > m ? sink_logit : m;
        lse = big + log(l * exp(m - big) + exp(sink_logit - big));
        l += exp(sink_logit - m);
        l_rounded += exp(sink_logit - m);
    }
    const double l_low = j->fp8_sum_rounded ? l_rounded : j->fp8 ? ldexp(l, 8) : l;

    /* O = P.V / l for both references, one output column at a time over the transposed V. */
    for (int64_t x = 0; x < j->dv; x++) {
        const float *restrict vc = s->vf + x * j->sk + lo;
        double e0 = 0, e1 = 0, r0 = 0, r1 = 0;
        int64_t t = 0;
        for (; t + 2 <= n; t += 2) {
            e0 += sc[t] * vc[t];
            e1 += sc[t + 1] * vc[t + 1];
            r0 += pl[t] * vc[t];
            r1 += pl[t + 1] * vc[t + 1];
        }
        if (t < n) {
            e0 += sc[t] * vc[t];
            r0 += pl[t] * vc[t];
        }
        s->o32[x] = (e0 + e1) / l * vd;
        s->olow[x] = round_to(j->odt, (r0 + r1) * vd / l_low);
    }
    return lse;
}

/* Maps a unit to (batch, head, first row, end row). Units run batch-major, then head, then row block, so
 * consecutive units mostly share a KV head. */
static void unit_rows(const fwd_job *j, int64_t unit, int64_t *bi, int64_t *h, int64_t *r0, int64_t *r1) {
    int64_t blk = unit % j->units_per_head;
    int64_t bh = unit / j->units_per_head;
    *h = bh % j->hq;
    *bi = bh / j->hq;
    *r0 = blk * j->rows_per_unit;
    *r1 = *r0 + j->rows_per_unit < j->sq ? *r0 + j->rows_per_unit : j->sq;
}

/* ref_attention_fwd's unit: computes its rows and stores the requested reference. */
static void fwd_unit(void *arg, int tid, int64_t unit) {
    const fwd_job *j = arg;
    scratch *s = &j->scr[tid];
    int64_t bi, h, r0, r1;
    unit_rows(j, unit, &bi, &h, &r0, &r1);
    load_kv(j, s, bi, h / j->group);
    for (int64_t i = r0; i < r1; i++) {
        double lse = forward_row(j, s, bi, i, h);
        double *dst = j->o + ((bi * j->sq + i) * j->hq + h) * j->dv;
        memcpy(dst, j->mode == REF_LOWP ? s->olow : s->o32, (size_t)j->dv * sizeof *dst);
        if (j->lse)
            j->lse[(bi * j->hq + h) * j->sq + i] = lse;
    }
}

/* ref_check_fwd's unit: computes its rows and folds the comparison with the kernel's output into the
 * thread's running findings. */
static void check_unit(void *arg, int tid, int64_t unit) {
    const fwd_job *j = arg;
    scratch *s = &j->scr[tid];
    int64_t bi, h, r0, r1;
    unit_rows(j, unit, &bi, &h, &r0, &r1);
    load_kv(j, s, bi, h / j->group);
    for (int64_t i = r0; i < r1; i++) {
        double ref_lse = forward_row(j, s, bi, i, h);
        int64_t lin0 = ((bi * j->sq + i) * j->hq + h) * j->dv;
        for (int64_t x = 0; x < j->dv; x++)
            ref_findings_fold(&s->f, elem_float(j->odt, j->out, bi, i, h, x), s->o32[x], s->olow[x], lin0 + x);
        if (!j->lse_out)
            continue;
        const fg_tensor *L = j->lse_out;
        double got = ((const float *)L->data)[bi * L->stride[0] + h * L->stride[1] + i * L->stride[2]];
        int64_t lin = (bi * j->hq + h) * j->sq + i;
        int bad;
        if (isinf(ref_lse)) {
            bad = !(isinf(got) && got < 0);
        } else {
            bad = !isfinite(got);
            if (!bad) {
                double e = fabs(got - ref_lse);
                bad = e > REF_LSE_ATOL + REF_LSE_RTOL * fabs(ref_lse) + s->lse_slack;
                if (s->lse_worst_lin < 0 || e > s->lse_max || (e == s->lse_max && lin < s->lse_worst_lin)) {
                    s->lse_max = e;
                    s->lse_worst_lin = lin;
                }
            }
        }
        if (bad && (s->lse_bad++ == 0 || lin < s->lse_bad_lin)) {
            s->lse_bad_lin = lin;
            s->lse_bad_val = got;
            s->lse_bad_ref = ref_lse;
        }
    }
}

/* Fills j's geometry from p, allocates one scratch per thread; *nthreads receives the thread count. */
static fg_status job_init(fwd_job *j, const ref_problem *p, int *nthreads, fg_error *err) {
    memset(j, 0, sizeof *j);
    if (ref_tables_fill() != 0)
        return fg_fail(err, FG_ERR_INTERNAL, "reference: pthread_once failed");
    j->p = p;
    j->dt = p->q.dtype;
    j->kdt = p->k.dtype;
    j->fp8 = ref_is_fp8(j->dt);
    j->fp8_sum_rounded = j->fp8 && p->fp8_sum_rounded;
    j->odt = j->fp8 ? p->out_dtype : j->dt;
    j->b = p->q.shape[0];
    j->sq = p->q.shape[1];
    j->hq = p->q.shape[2];
    j->d = p->q.shape[3];
    j->dv = p->v.shape[3];
    j->sk = p->k.shape[1];
    j->hkv = p->k.shape[2];
    j->group = j->hq / j->hkv;
    j->scale = p->softmax_scale != 0.0f ? (double)p->softmax_scale : 1.0 / sqrt((double)j->d);
    /* Row blocks small enough to balance causal rows across threads, large enough to amortize the
     * per-unit bookkeeping. */
    j->rows_per_unit = 64;
    j->units_per_head = j->sq > 0 ? (j->sq + j->rows_per_unit - 1) / j->rows_per_unit : 0;
    int64_t units = j->b * j->hq * j->units_per_head;
    int n = ref_thread_count(units);
    j->scr = calloc((size_t)n, sizeof *j->scr);
    if (!j->scr)
        return fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %d thread states", n);
    const int64_t dmax = j->d > j->dv ? j->d : j->dv;
    size_t kv = (size_t)(j->sk * dmax > 0 ? j->sk * dmax : 1);
    size_t sk = (size_t)(j->sk > 0 ? j->sk : 1);
    for (int i = 0; i < n; i++) {
        scratch *s = &j->scr[i];
        s->kf = malloc(kv * sizeof *s->kf);
        s->vf = malloc(kv * sizeof *s->vf);
        s->s = malloc(sk * sizeof *s->s);
        s->pl = malloc(sk * sizeof *s->pl);
        s->q = malloc((size_t)(j->d + 2 * j->dv) * sizeof *s->q);
        if (!s->kf || !s->vf || !s->s || !s->pl || !s->q) {
            *nthreads = i + 1;
            return fg_fail(err, FG_ERR_NO_MEMORY,
                           "reference: out of memory for the K/V cache of sk=%lld, d=%lld per thread",
                           (long long)j->sk, (long long)j->d);
        }
        s->o32 = s->q + j->d;
        s->olow = s->q + j->d + j->dv;
        s->kv_b = -1;
        s->kv_h = -1;
        s->f.worst_lin = s->f.first_nf_lin = s->lse_worst_lin = s->lse_bad_lin = -1;
    }
    *nthreads = n;
    return FG_OK;
}

/* Frees the scratch of the first nthreads threads and the scratch array (which may be NULL). */
static void job_free(fwd_job *j, int nthreads) {
    if (!j->scr)
        return;
    for (int i = 0; i < nthreads; i++) {
        free(j->scr[i].kf);
        free(j->scr[i].vf);
        free(j->scr[i].s);
        free(j->scr[i].pl);
        free(j->scr[i].q);
    }
    free(j->scr);
    j->scr = NULL;
}

/* Contract in reference.h. */
fg_status ref_attention_fwd(const ref_problem *p, ref_mode mode, double *o, double *lse, fg_error *err) {
    fg_status st = ref_check_problem(p, err);
    if (st)
        return st;
    if (!o && ref_elements(&p->q) > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the output array o is NULL");
    fwd_job j;
    int n = 0;
    st = job_init(&j, p, &n, err);
    if (st == FG_OK) {
        j.mode = mode;
        j.o = o;
        j.lse = lse;
        ref_run_parallel(&j, fwd_unit, j.b * j.hq * j.units_per_head, n);
    }
    job_free(&j, n);
    return st;
}

/* Contract in reference.h. */
fg_status ref_check_fwd(const ref_problem *p, const fg_tensor *out, const fg_tensor *lse, ref_report *r,
                        fg_error *err) {
    fg_status st = ref_check_problem(p, err);
    if (st)
        return st;
    if (!out || !r)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out and the report must not be NULL");
    if ((st = ref_check_view(out, "out", 4, err)))
        return st;
    if (out->dtype != (ref_is_fp8(p->q.dtype) ? p->out_dtype : p->q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out.dtype differs from O's dtype (%s)",
                       ref_is_fp8(p->q.dtype) ? "p->out_dtype for fp8 inputs" : "q.dtype");
    const int64_t oshape[4] = {p->q.shape[0], p->q.shape[1], p->q.shape[2], p->v.shape[3]};
    for (int i = 0; i < 4; i++)
        if (out->shape[i] != oshape[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out.shape[%d] (%lld) != O's (%lld: [batch, "
                           "seqlen_q, heads_q, v's head_dim])", i, (long long)out->shape[i], (long long)oshape[i]);
    if (lse) {
        if ((st = ref_check_view(lse, "lse", 3, err)))
            return st;
        if (lse->dtype != FG_DTYPE_F32)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: lse.dtype must be F32");
        const int64_t want[3] = {p->q.shape[0], p->q.shape[2], p->q.shape[1]};
        for (int i = 0; i < 3; i++)
            if (lse->shape[i] != want[i])
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                               "reference: lse.shape[%d] is %lld, expected %lld ([batch, heads_q, seqlen_q])", i,
                               (long long)lse->shape[i], (long long)want[i]);
    }

    fwd_job j;
    int n = 0;
    st = job_init(&j, p, &n, err);
    if (st) {
        job_free(&j, n);
        return st;
    }
    j.out = out;
    j.lse_out = lse;
    ref_run_parallel(&j, check_unit, j.b * j.hq * j.units_per_head, n);

    /* Merge the threads' findings; ties go to the lowest index so the report does not depend on timing. */
    memset(r, 0, sizeof *r);
    int64_t worst = -1, first_nf = -1, lse_worst = -1, lse_bad = -1;
    for (int i = 0; i < n; i++) {
        const scratch *s = &j.scr[i];
        ref_findings_merge(&s->f, &r->max_lowp_err, &r->max_err, &r->worst_out, &r->worst_ref, &worst, &r->nonfinite,
                       &first_nf);
        if (s->lse_worst_lin >= 0 && (lse_worst < 0 || s->lse_max > r->lse_max_err ||
                                      (s->lse_max == r->lse_max_err && s->lse_worst_lin < lse_worst))) {
            lse_worst = s->lse_worst_lin;
            r->lse_max_err = s->lse_max;
        }
        r->lse_bad += s->lse_bad;
        if (s->lse_bad_lin >= 0 && (lse_bad < 0 || s->lse_bad_lin < lse_bad)) {
            lse_bad = s->lse_bad_lin;
            r->lse_first_bad_val = s->lse_bad_val;
            r->lse_first_bad_ref = s->lse_bad_ref;
        }
    }
    const int64_t lse_shape[3] = {p->q.shape[0], p->q.shape[2], p->q.shape[1]};
    ref_unflatten(worst, oshape, 4, r->worst);
    ref_unflatten(first_nf, oshape, 4, r->first_nonfinite);
    ref_unflatten(lse_worst, lse_shape, 3, r->lse_worst);
    ref_unflatten(lse_bad, lse_shape, 3, r->lse_first_bad);
    r->bound = ref_fwd_bound(r->max_lowp_err);
    r->lse_checked = lse != NULL;
    r->pass = r->nonfinite == 0 && r->max_err <= r->bound && r->lse_bad == 0;
    job_free(&j, n);
    return FG_OK;
}

/* ref_rmse_fwd's unit: computes its rows and stores the sum of (out - ref32)^2 over them (NaN when an
 * output is NaN or Inf) in the unit's slot, so the total is summed in unit order whatever the timing. */
static void rmse_unit(void *arg, int tid, int64_t unit) {
    const fwd_job *j = arg;
    scratch *s = &j->scr[tid];
    int64_t bi, h, r0, r1;
    unit_rows(j, unit, &bi, &h, &r0, &r1);
    load_kv(j, s, bi, h / j->group);
    double sse = 0;
    for (int64_t i = r0; i < r1; i++) {
        forward_row(j, s, bi, i, h);
        for (int64_t x = 0; x < j->dv; x++) {
            double out = elem_float(j->odt, j->out, bi, i, h, x);
            double e = isfinite(out) ? out - s->o32[x] : NAN;
            sse += e * e;
        }
    }
    j->unit_sse[unit] = sse;
}

/* Contract in reference.h. */
double ref_rmse_fwd(const ref_problem *p, const fg_tensor *out, fg_error *err) {
    fg_status st = ref_check_problem(p, err);
    if (st)
        return -1.0;
    if (!out) {
        fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out must not be NULL");
        return -1.0;
    }
    if (ref_check_view(out, "out", 4, err))
        return -1.0;
    if (out->dtype != (ref_is_fp8(p->q.dtype) ? p->out_dtype : p->q.dtype)) {
        fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out.dtype differs from O's dtype (%s)",
                ref_is_fp8(p->q.dtype) ? "p->out_dtype for fp8 inputs" : "q.dtype");
        return -1.0;
    }
    for (int i = 0; i < 4; i++)
        if (out->shape[i] != (i < 3 ? p->q.shape[i] : p->v.shape[3])) {
            fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out.shape[%d] (%lld) != O's (%lld: [batch, seqlen_q, "
                    "heads_q, v's head_dim])", i, (long long)out->shape[i], (long long)(i < 3 ? p->q.shape[i] : p->v.shape[3]));
            return -1.0;
        }
    int64_t count = ref_elements(out);
    if (count == 0)
        return 0.0;
    fwd_job j;
    int n = 0;
    if (job_init(&j, p, &n, err)) {
        job_free(&j, n);
        return -1.0;
    }
    int64_t units = j.b * j.hq * j.units_per_head;
    j.out = out;
    j.unit_sse = malloc((size_t)units * sizeof *j.unit_sse);
    if (!j.unit_sse) {
        job_free(&j, n);
        fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %lld partial sums", (long long)units);
        return -1.0;
    }
    ref_run_parallel(&j, rmse_unit, units, n);
    double sse = 0;
    for (int64_t u = 0; u < units; u++)
        sse += j.unit_sse[u];
    free(j.unit_sse);
    job_free(&j, n);
    return sqrt(sse / (double)count);
}

