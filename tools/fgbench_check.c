/* fgbench_check.c: how `fgbench speed` judges a configuration's output: the whole O and LSE scanned for
 * NaN/Inf, and windows of query rows of three heads checked against the CPU reference on every core
 * (core/pool.h), within a fixed CPU budget per configuration. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "autotune/timing.h"
#include "core/pool.h"
#include "tools/fgbench.h"

/* One checked window: CHECK_ROWS (or fewer) query rows of one (batch, head). */
typedef struct slice_task {
    int64_t b, h;      /* batch and head */
    int64_t r0, rows;  /* first query row and row count */
    ref_report rep;    /* the reference's findings on this window */
    fg_status st;      /* FG_OK, or the reference's failure */
    fg_error err;      /* that failure */
} slice_task;

/* The checking threads' shared work: host views of one configuration and the windows to check. */
typedef struct check_job {
    const speed_cfg *cfg;      /* the configuration */
    const uint16_t *q, *k, *v; /* host inputs, read as [b, s, h, d] */
    const uint16_t *o;         /* host output */
    const float *lse;          /* host LSE [b, h, s] */
    slice_task *tasks;         /* the windows */
    int ntasks;                /* their count */
    atomic_int next;           /* next window to take */
} check_job;

/* Checks one window with ref_check_fwd on host views of the full tensors. Causal masks are bottom-right
 * aligned: query row i sees keys j <= i (sq = sk here), so rows [r0, r0 + n) need keys [0, r0 + n) and,
 * as a sub-problem with sq' = n and sk' = r0 + n, keep exactly their mask (j <= i' + sk' - sq'). */
static void check_window(const check_job *j, slice_task *t) {
    const speed_cfg *c = j->cfg;
    const int64_t S = c->seqlen, H = c->heads, D = c->head_dim;
    const size_t base = (size_t)(t->b * S * H * D);
    const int64_t keys = c->causal ? t->r0 + t->rows : S;
    fg_tensor q = bshd((void *)(j->q + base + (size_t)(t->r0 * H * D + t->h * D)), c->dtype, 1, t->rows, 1, D);
    fg_tensor k = bshd((void *)(j->k + base + (size_t)(t->h * D)), c->dtype, 1, keys, 1, D);
    fg_tensor v = bshd((void *)(j->v + base + (size_t)(t->h * D)), c->dtype, 1, keys, 1, D);
    fg_tensor o = bshd((void *)(j->o + base + (size_t)(t->r0 * H * D + t->h * D)), c->dtype, 1, t->rows, 1, D);
    /* The views keep the full tensors' strides: row r of the window is row r0 + r of the head. */
    q.stride[0] = k.stride[0] = v.stride[0] = o.stride[0] = S * H * D;
    q.stride[1] = k.stride[1] = v.stride[1] = o.stride[1] = H * D;
    q.stride[2] = k.stride[2] = v.stride[2] = o.stride[2] = D;
    fg_tensor lse = bhs((void *)(j->lse + (size_t)((t->b * H + t->h) * S + t->r0)), 1, 1, t->rows);
    lse.stride[0] = H * S;
    lse.stride[1] = S;
    ref_problem p = {.q = q, .k = k, .v = v, .softmax_scale = 0.f, .causal = c->causal};
    fg_error_clear(&t->err);
    t->st = ref_check_fwd(&p, &o, &lse, &t->rep, &t->err);
}

/* A checking thread: takes windows until none is left. */
static void *check_worker(void *arg) {
    check_job *j = arg;
    for (;;) {
        int i = atomic_fetch_add(&j->next, 1);
        if (i >= j->ntasks) break;
        check_window(j, &j->tasks[i]);
    }
    return NULL;
}

/* Plans the checked windows of c: heads (batch 0, head 0), (batch 0, head 1) and (last batch, last
 * head), each cut into CHECK_ROWS-row windows; all of them when that fits CHECK_BUDGET, else as many as
 * fit (at least CHECK_MIN_WINDOWS) spread evenly from the first row to the last. Windows are listed
 * last-first, so the costliest causal ones start first. *tasks is malloc'd (caller frees). */
static fg_status plan_check(const speed_cfg *c, slice_task **tasks, int *ntasks, int *nheads, int *nwin,
                            fg_error *err) {
    int64_t heads[3][2] = {{0, 0}, {0, 1}, {c->batch - 1, c->heads - 1}};
    int nh = c->heads > 1 ? 2 : 1;
    if (heads[2][0] != heads[nh - 1][0] || heads[2][1] != heads[nh - 1][1]) {
        heads[nh][0] = heads[2][0];
        heads[nh][1] = heads[2][1];
        nh++;
    }
    const int64_t S = c->seqlen;
    const int64_t full = (S + CHECK_ROWS - 1) / CHECK_ROWS;
    const double per_window = (double)CHECK_ROWS * (double)S * c->head_dim * (c->causal ? 0.5 : 1.0);
    int64_t nw = full;
    if ((double)nh * (double)full * per_window > CHECK_BUDGET) {
        nw = (int64_t)(CHECK_BUDGET / (nh * per_window));
        if (nw < CHECK_MIN_WINDOWS) nw = CHECK_MIN_WINDOWS;
        if (nw > full) nw = full;
    }
    slice_task *t = calloc((size_t)(nh * nw), sizeof *t);
    if (!t) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory planning %lld checked windows", (long long)(nh * nw));
    int n = 0;
    for (int64_t w = nw - 1; w >= 0; w--)
        for (int hi = 0; hi < nh; hi++) {
            slice_task *x = &t[n++];
            x->b = heads[hi][0];
            x->h = heads[hi][1];
            if (nw == full) { /* every row: consecutive windows, the last one shorter */
                x->r0 = w * CHECK_ROWS;
                x->rows = S - x->r0 < CHECK_ROWS ? S - x->r0 : CHECK_ROWS;
            } else {          /* nw >= 2 windows over S > nw x CHECK_ROWS rows: first at row 0, last ending at S */
                x->r0 = (S - CHECK_ROWS) * w / (nw - 1);
                x->rows = CHECK_ROWS;
            }
        }
    *tasks = t;
    *ntasks = n;
    *nheads = nh;
    *nwin = (int)nw;
    return FG_OK;
}

/* Counts non-finite values among n fp16/bf16 values (exponent all ones: Inf or NaN); *first gets the
 * index of the first one, or -1. */
static int64_t count_nonfinite16(const uint16_t *x, size_t n, fg_dtype dt, int64_t *first) {
    const uint16_t mask = dt == FG_DTYPE_F16 ? 0x7C00 : 0x7F80;
    int64_t count = 0;
    *first = -1;
    for (size_t i = 0; i < n; i++)
        if ((x[i] & mask) == mask && count++ == 0) *first = (int64_t)i;
    return count;
}

/* check_output: see fgbench.h. */
fg_status check_output(const speed_bufs *B, speed_result *r, int *pass, fg_error *err) {
    const speed_cfg *c = &r->cfg;
    double t0 = now_seconds();
    *pass = 0;
    int64_t o_first, lse_first = -1, lse_nonfinite = 0;
    int64_t o_nonfinite = count_nonfinite16(B->ho, cfg_elems(c), c->dtype, &o_first);
    for (size_t i = 0; i < cfg_lse_elems(c); i++)
        if (!isfinite(B->hlse[i]) && lse_nonfinite++ == 0) lse_first = (int64_t)i;

    check_job j;
    memset(&j, 0, sizeof j);
    j.cfg = c;
    j.q = B->hq, j.k = B->hk, j.v = B->hv, j.o = B->ho, j.lse = B->hlse;
    atomic_init(&j.next, 0);
    int nheads = 0, nwin = 0;
    fg_status st = plan_check(c, &j.tasks, &j.ntasks, &nheads, &nwin, err);
    if (st != FG_OK) return st;

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = cores < 1 ? 1 : (cores > 256 ? 256 : (int)cores), why = 0;
    if (nthreads > j.ntasks) nthreads = j.ntasks;
    if (pool_run(check_worker, &j, nthreads, &why) == 0) check_worker(&j); /* no thread: this one drains the queue */

    double max_lowp = 0, lse_max = 0;
    const slice_task *worst = NULL, *lse_bad_first = NULL;
    int64_t nonfinite = 0, lse_bad = 0;
    for (int i = 0; i < j.ntasks; i++) {
        const slice_task *t = &j.tasks[i];
        if (t->st != FG_OK) {
            st = fg_fail(err, t->st, "the CPU reference failed on batch %lld, head %lld, rows %lld..%lld: %s",
                         (long long)t->b, (long long)t->h, (long long)t->r0, (long long)(t->r0 + t->rows - 1),
                         t->err.msg);
            free(j.tasks);
            return st;
        }
        if (t->rep.max_lowp_err > max_lowp) max_lowp = t->rep.max_lowp_err;
        if (!worst || t->rep.max_err > worst->rep.max_err) worst = t;
        if (t->rep.lse_max_err > lse_max) lse_max = t->rep.lse_max_err;
        nonfinite += t->rep.nonfinite;
        lse_bad += t->rep.lse_bad;
        if (t->rep.lse_bad > 0 &&
            (!lse_bad_first || t->b < lse_bad_first->b || (t->b == lse_bad_first->b && t->h < lse_bad_first->h) ||
             (t->b == lse_bad_first->b && t->h == lse_bad_first->h && t->r0 < lse_bad_first->r0)))
            lse_bad_first = t; /* the lowest (batch, head, row): reports do not depend on thread timing */
    }
    if (!worst) { /* plan_check always plans a window; this keeps a broken plan from reading NULL */
        free(j.tasks);
        return fg_fail(err, FG_ERR_INTERNAL, "no window was checked for seqlen %d", c->seqlen);
    }
    r->max_err = worst->rep.max_err;
    r->bound = 2.0 * max_lowp + 1e-5;
    *pass = o_nonfinite == 0 && lse_nonfinite == 0 && nonfinite == 0 && lse_bad == 0 && r->max_err <= r->bound;
    int64_t rows = (int64_t)nwin * CHECK_ROWS < c->seqlen ? (int64_t)nwin * CHECK_ROWS : c->seqlen;
    int k = snprintf(r->message, sizeof r->message,
                     "max|out-ref32| %.3g %s bound %.3g, LSE max err %.3g; %d head%s x %lld of %d rows checked",
                     r->max_err, r->max_err <= r->bound ? "<=" : "EXCEEDS", r->bound, lse_max, nheads,
                     nheads == 1 ? "" : "s", (long long)rows, c->seqlen);
    if (!*pass && k > 0 && (size_t)k < sizeof r->message) {
        const int64_t *w = worst->rep.worst;
        k += snprintf(r->message + k, sizeof r->message - (size_t)k,
                      "; worst at [b %lld, s %lld, h %lld, d %lld]: out %.6g, ref %.6g; %lld non-finite in the "
                      "checked rows, %lld of %zu in all of O, %lld of %zu LSE rows",
                      (long long)worst->b, (long long)(worst->r0 + w[1]), (long long)worst->h, (long long)w[3],
                      worst->rep.worst_out, worst->rep.worst_ref, (long long)nonfinite, (long long)o_nonfinite,
                      cfg_elems(c), (long long)lse_nonfinite, cfg_lse_elems(c));
        if (o_first >= 0 && k > 0 && (size_t)k < sizeof r->message) {
            int64_t x = o_first, d = x % c->head_dim, h = x / c->head_dim % c->heads;
            int64_t s = x / ((int64_t)c->head_dim * c->heads) % c->seqlen;
            int64_t b = x / ((int64_t)c->head_dim * c->heads * c->seqlen);
            k += snprintf(r->message + k, sizeof r->message - (size_t)k, " (first in O at [%lld, %lld, %lld, %lld])",
                          (long long)b, (long long)s, (long long)h, (long long)d);
        }
        if (lse_first >= 0 && k > 0 && (size_t)k < sizeof r->message) {
            int64_t s = lse_first % c->seqlen, h = lse_first / c->seqlen % c->heads;
            int64_t b = lse_first / ((int64_t)c->seqlen * c->heads);
            k += snprintf(r->message + k, sizeof r->message - (size_t)k, " (first in LSE at [%lld, %lld, %lld])",
                          (long long)b, (long long)h, (long long)s);
        }
        if (lse_bad_first && k > 0 && (size_t)k < sizeof r->message) {
            const ref_report *lr = &lse_bad_first->rep;
            snprintf(r->message + k, sizeof r->message - (size_t)k,
                     "; %lld LSE rows out of tolerance, first [b %lld, h %lld, s %lld]: %.9g vs ref %.9g",
                     (long long)lse_bad, (long long)lse_bad_first->b, (long long)lse_bad_first->h,
                     (long long)(lse_bad_first->r0 + lr->lse_first_bad[2]), lr->lse_first_bad_val,
                     lr->lse_first_bad_ref);
        }
    }
    free(j.tasks);
    r->check_s = now_seconds() - t0;
    return FG_OK;
}

