/* check.c: how the reference judges: the argument checks of its problems (a sentence naming the field),
 * the findings folded element by element into a report (worst element, non-finite outputs, ties to the
 * lowest index so a report does not depend on timing), the tolerance rule (docs/numerics.md): forward
 * max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5, gradients 3x, nothing NaN/Inf, and the one-line
 * report texts. Contracts in reference.h and ref_internal.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "reference/ref_internal.h"

/* ------------------------------------------------------------------------------------------------ */
/* Argument checks                                                                                   */
/* ------------------------------------------------------------------------------------------------ */

/* The number of elements in t's view (0 when any size is 0). */
int64_t ref_elements(const fg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* Checks that t is a host view of `ndim` dims with non-negative sizes and data unless empty. */
fg_status ref_check_view(const fg_tensor *t, const char *name, int ndim, fg_error *err) {
    if (t->ndim != ndim)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.ndim is %d, expected %d", name, t->ndim,
                       ndim);
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] < 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.shape[%d] is %lld, sizes must be >= 0",
                           name, i, (long long)t->shape[i]);
    if (!t->data && ref_elements(t) > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.data is NULL", name);
    return FG_OK;
}

/* Checks that p describes a consistent problem (dims, sizes, dtypes, GQA divisibility); names the
 * offending field in err. */
fg_status ref_check_problem(const ref_problem *p, fg_error *err) {
    if (!p)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the problem is NULL");
    fg_status st;
    if ((st = ref_check_view(&p->q, "q", 4, err)) || (st = ref_check_view(&p->k, "k", 4, err)) ||
        (st = ref_check_view(&p->v, "v", 4, err)))
        return st;
    if (p->q.dtype != FG_DTYPE_F16 && p->q.dtype != FG_DTYPE_BF16 && !ref_is_fp8(p->q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: q.dtype must be F16, BF16, E4M3 or E5M2");
    /* k and v of q's dtype, or (an FP8 KV cache) both of one FP8 dtype beside a 16-bit q */
    const int kv8 = !ref_is_fp8(p->q.dtype) && ref_is_fp8(p->k.dtype);
    if (kv8 ? p->v.dtype != p->k.dtype : (p->k.dtype != p->q.dtype || p->v.dtype != p->q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: k and v must have q's dtype, or (q 16-bit) one FP8 "
                       "dtype");
    if (ref_is_fp8(p->q.dtype) && p->out_dtype != FG_DTYPE_F16 && p->out_dtype != FG_DTYPE_BF16)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out_dtype must be F16 or BF16 for fp8 inputs");
    const fg_tensor *ds[3] = {&p->q_descale, &p->k_descale, &p->v_descale};
    static const char *const dnames[3] = {"q_descale", "k_descale", "v_descale"};
    for (int i = 0; i < 3; i++) {
        const fg_tensor *t = ds[i];
        if (!t->data)
            continue;
        if (!ref_is_fp8(p->q.dtype) && !(kv8 && i > 0))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s is for fp8 inputs only (k's and v's: an FP8 "
                           "KV cache's)", dnames[i]);
        int ok_shape = (t->ndim == 1 && t->shape[0] == 1) ||
                       (t->ndim == 2 && t->shape[0] == p->q.shape[0] && t->shape[1] == p->k.shape[2]);
        if (t->dtype != FG_DTYPE_F32 || !ok_shape)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "reference: %s must be F32 of shape [1] or [batch, heads_kv] = [%lld, %lld]", dnames[i],
                           (long long)p->q.shape[0], (long long)p->k.shape[2]);
    }
    const int variants = p->window || p->causal_top_left || p->softcap != 0.0f || p->alibi_slopes.data || p->sinks.data;
    if (variants && ref_is_fp8(p->q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the model variants (window, causal_top_left, softcap, "
                       "alibi_slopes, sinks) take 16-bit inputs only");
    if (p->causal_top_left && !p->causal)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: causal_top_left is set without causal");
    if (!(p->softcap >= 0.0f) || isinf(p->softcap))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: softcap must be finite and >= 0 (0: none)");
    const fg_tensor *per_head[2] = {&p->alibi_slopes, &p->sinks};
    static const char *const hnames[2] = {"alibi_slopes", "sinks"};
    for (int i = 0; i < 2; i++) {
        const fg_tensor *t = per_head[i];
        if (t->data && (t->dtype != FG_DTYPE_F32 || t->ndim != 1 || t->shape[0] != p->q.shape[2] || t->stride[0] < 0))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s must be F32 of shape [heads_q] = [%lld]",
                           hnames[i], (long long)p->q.shape[2]);
    }
    for (int i = 0; i < 3; i++) /* V's head dim may differ from Q/K's (O has V's) */
        if (p->k.shape[i] != p->v.shape[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: k.shape[%d] (%lld) != v.shape[%d] (%lld)",
                           i, (long long)p->k.shape[i], i, (long long)p->v.shape[i]);
    if (p->v.shape[3] < 1 || (p->v.shape[3] != p->q.shape[3] && ref_is_fp8(p->q.dtype)))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: v's head_dim (%lld) must be >= 1, and q's (%lld) for "
                       "fp8 inputs", (long long)p->v.shape[3], (long long)p->q.shape[3]);
    if (p->k.shape[0] != p->q.shape[0])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: k's batch (%lld) != q's batch (%lld)",
                       (long long)p->k.shape[0], (long long)p->q.shape[0]);
    if (p->k.shape[3] != p->q.shape[3])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: k's head_dim (%lld) != q's head_dim (%lld)",
                       (long long)p->k.shape[3], (long long)p->q.shape[3]);
    if (p->q.shape[3] < 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: head_dim must be >= 1");
    if (p->q.shape[2] < 1 || p->k.shape[2] < 1 || p->q.shape[2] % p->k.shape[2] != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "reference: k's heads (%lld) must be >= 1 and divide q's heads (%lld)",
                       (long long)p->k.shape[2], (long long)p->q.shape[2]);
    return FG_OK;
}

/* Checks that t has `like`'s dims and sizes (like: a validated 4-d view); names both in err. */
fg_status ref_check_like(const fg_tensor *t, const char *name, const fg_tensor *like, const char *like_name,
                            fg_error *err) {
    fg_status st = ref_check_view(t, name, 4, err);
    if (st)
        return st;
    for (int i = 0; i < 4; i++)
        if (t->shape[i] != like->shape[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.shape[%d] (%lld) != %s.shape[%d] (%lld)",
                           name, i, (long long)t->shape[i], like_name, i, (long long)like->shape[i]);
    return FG_OK;
}

/* Checks that p describes a consistent 16-bit backward problem; names the offending field in err. */
fg_status ref_check_bwd_problem(const ref_bwd_problem *p, fg_error *err) {
    if (!p)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the backward problem is NULL");
    fg_status st = ref_check_problem(&p->fwd, err);
    if (st)
        return st;
    if (p->fwd.mod_score && !p->fwd.mod_score_grad)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: a custom score mod needs mod_score_grad (its derivative) "
                       "in the backward");
    if (ref_is_fp8(p->fwd.q.dtype) || ref_is_fp8(p->fwd.k.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "reference: fwd.%s.dtype is FP8; the backward reference takes F16 or BF16 inputs only "
                       "(FP8 backward is not supported)", ref_is_fp8(p->fwd.q.dtype) ? "q" : "k");
    /* O and dO: [batch, seqlen_q, heads_q, v's head_dim] */
    fg_tensor o_like = p->fwd.q;
    o_like.shape[3] = p->fwd.v.shape[3];
    if ((st = ref_check_like(&p->o, "o", &o_like, "O's", err)) || (st = ref_check_like(&p->d_o, "d_o", &o_like, "O's", err)))
        return st;
    if (p->o.dtype != p->fwd.q.dtype || p->d_o.dtype != p->fwd.q.dtype)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: o and d_o must have q's dtype");
    if ((st = ref_check_view(&p->lse, "lse", 3, err)))
        return st;
    if (p->lse.dtype != FG_DTYPE_F32)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: lse.dtype must be F32");
    const int64_t want[3] = {p->fwd.q.shape[0], p->fwd.q.shape[2], p->fwd.q.shape[1]};
    for (int i = 0; i < 3; i++)
        if (p->lse.shape[i] != want[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "reference: lse.shape[%d] is %lld, expected %lld ([batch, heads_q, seqlen_q])", i,
                           (long long)p->lse.shape[i], (long long)want[i]);
    return FG_OK;
}

/* ------------------------------------------------------------------------------------------------ */
/* Findings and the tolerance rule                                                                  */
/* ------------------------------------------------------------------------------------------------ */

/* Folds one element into f: out is the kernel's value, r32 and rlow the references, lin its index. */
void ref_findings_fold(grad_findings *f, double out, double r32, double rlow, int64_t lin) {
    double lowp = fabs(rlow - r32);
    if (lowp > f->max_lowp)
        f->max_lowp = lowp;
    if (!isfinite(out)) {
        if (f->nonfinite++ == 0 || lin < f->first_nf_lin)
            f->first_nf_lin = lin;
        return;
    }
    double e = fabs(out - r32);
    if (f->worst_lin < 0 || e > f->max_err || (e == f->max_err && lin < f->worst_lin)) {
        f->max_err = e;
        f->worst_lin = lin;
        f->worst_out = out;
        f->worst_ref = r32;
    }
}

/* Merges findings g (one thread's) into the report fields: the largest lowp gap, the worst element
 * (ties to the lowest index, so a report does not depend on timing), the non-finite count and first. */
void ref_findings_merge(const grad_findings *g, double *max_lowp, double *max_err, double *worst_out,
                           double *worst_ref, int64_t *worst, int64_t *nonfinite, int64_t *first_nf) {
    if (g->max_lowp > *max_lowp)
        *max_lowp = g->max_lowp;
    if (g->worst_lin >= 0 &&
        (*worst < 0 || g->max_err > *max_err || (g->max_err == *max_err && g->worst_lin < *worst))) {
        *worst = g->worst_lin;
        *max_err = g->max_err;
        *worst_out = g->worst_out;
        *worst_ref = g->worst_ref;
    }
    *nonfinite += g->nonfinite;
    if (g->first_nf_lin >= 0 && (*first_nf < 0 || g->first_nf_lin < *first_nf))
        *first_nf = g->first_nf_lin;
}


/* Writes the row-major logical index lin of a tensor with the given sizes as per-dim indices. */
void ref_unflatten(int64_t lin, const int64_t *shape, int ndim, int64_t *idx) {
    for (int i = ndim - 1; i >= 0; i--) {
        if (lin < 0) {
            idx[i] = -1;
            continue;
        }
        idx[i] = shape[i] > 0 ? lin % shape[i] : 0;
        lin = shape[i] > 0 ? lin / shape[i] : 0;
    }
}

/* Contract in ref_internal.h. */
double ref_fwd_bound(double max_lowp_err) {
    return 2.0 * max_lowp_err + 1e-5;
}

/* Contract in ref_internal.h. */
double ref_bwd_bound(double max_lowp_err) {
    return REF_BWD_FACTOR * max_lowp_err + REF_BWD_ATOL;
}

/* ------------------------------------------------------------------------------------------------ */
/* Reports                                                                                          */
/* ------------------------------------------------------------------------------------------------ */

/* Contract in reference.h. */
char *ref_report_format(const ref_report *r, char *buf, size_t n) {
    if (!buf || n == 0)
        return buf;
    int k = snprintf(buf, n,
                     "%s: max|out-ref32| %.3g at [%lld,%lld,%lld,%lld] (out %.6g, ref %.6g), bound %.3g "
                     "(max|lowp-ref32| %.3g); non-finite %lld",
                     r->pass ? "ok" : "FAIL", r->max_err, (long long)r->worst[0], (long long)r->worst[1],
                     (long long)r->worst[2], (long long)r->worst[3], r->worst_out, r->worst_ref, r->bound,
                     r->max_lowp_err, (long long)r->nonfinite);
    if (r->nonfinite > 0 && k >= 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, " (first at [%lld,%lld,%lld,%lld])",
                      (long long)r->first_nonfinite[0], (long long)r->first_nonfinite[1],
                      (long long)r->first_nonfinite[2], (long long)r->first_nonfinite[3]);
    if (r->lse_checked && k >= 0 && (size_t)k < n) {
        k += snprintf(buf + k, n - (size_t)k, "; lse max err %.3g at [%lld,%lld,%lld], bad rows %lld",
                      r->lse_max_err, (long long)r->lse_worst[0], (long long)r->lse_worst[1],
                      (long long)r->lse_worst[2], (long long)r->lse_bad);
        if (r->lse_bad > 0 && k >= 0 && (size_t)k < n)
            snprintf(buf + k, n - (size_t)k, " (first [%lld,%lld,%lld]: %.9g vs ref %.9g)",
                     (long long)r->lse_first_bad[0], (long long)r->lse_first_bad[1],
                     (long long)r->lse_first_bad[2], r->lse_first_bad_val, r->lse_first_bad_ref);
    }
    return buf;
}


/* Contract in reference.h. */
char *ref_bwd_report_format(const ref_bwd_report *r, char *buf, size_t n) {
    if (!buf || n == 0)
        return buf;
    const ref_grad_report *g[3] = {&r->dq, &r->dk, &r->dv};
    static const char *const names[3] = {"dq", "dk", "dv"};
    int k = snprintf(buf, n, "%s", r->pass ? "ok" : "FAIL");
    for (int i = 0; i < 3 && k >= 0 && (size_t)k < n; i++) {
        const ref_grad_report *e = g[i];
        k += snprintf(buf + k, n - (size_t)k,
                      "%s %s %s: max|out-ref32| %.3g at [%lld,%lld,%lld,%lld] (out %.6g, ref %.6g), bound %.3g "
                      "(max|lowp-ref32| %.3g), non-finite %lld",
                      i ? ";" : ":", names[i], e->pass ? "ok" : "FAIL", e->max_err, (long long)e->worst[0],
                      (long long)e->worst[1], (long long)e->worst[2], (long long)e->worst[3], e->worst_out,
                      e->worst_ref, e->bound, e->max_lowp_err, (long long)e->nonfinite);
        if (e->nonfinite > 0 && k >= 0 && (size_t)k < n)
            k += snprintf(buf + k, n - (size_t)k, " (first at [%lld,%lld,%lld,%lld])",
                          (long long)e->first_nonfinite[0], (long long)e->first_nonfinite[1],
                          (long long)e->first_nonfinite[2], (long long)e->first_nonfinite[3]);
    }
    return buf;
}
