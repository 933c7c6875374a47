/* ref_internal.h: what the files of the CPU reference share and its users do not see: the decode tables
 * and element access of the hot loops (convert.c), the thread pool (threads.c), the argument checks and
 * the findings a check folds element by element (check.c). The public contract is reference.h. */
#ifndef FG_REFERENCE_INTERNAL_H
#define FG_REFERENCE_INTERNAL_H

#include <stdint.h>
#include "reference/reference.h"

/* ---- decode tables and element access (convert.c) ---- */

/* fp16 and fp8 -> float by table in the hot loops (the branchy decode dominates the reference's profile
 * otherwise); filled once per process by ref_tables_fill, before any use. */
extern float ref_f16_table[65536]; /* ref_f16_to_float of every pattern */
extern float ref_e4m3_table[256];  /* ref_e4m3_to_float of every pattern */
extern float ref_e5m2_table[256];  /* ref_e5m2_to_float of every pattern */

/* Fills the tables once per process (pthread_once); returns pthread_once's result (0 on success). */
int ref_tables_fill(void);

/* 1 for the FP8 dtypes. */
static inline int ref_is_fp8(fg_dtype dtype) {
    return dtype == FG_DTYPE_E4M3 || dtype == FG_DTYPE_E5M2;
}

/* ref_to_float for F16/BF16 once the tables are filled (ref_tables_fill). */
static inline float fast_to_float(fg_dtype dtype, uint16_t bits) {
    return dtype == FG_DTYPE_F16 ? ref_f16_table[bits] : ref_bf16_to_float(bits);
}

/* Rounds x to dtype (F16 or BF16; through float, as the kernel rounds its fp32 values) and back. */
static inline double round_to(fg_dtype dtype, double x) {
    return fast_to_float(dtype, ref_from_float(dtype, (float)x));
}

/* Rounds x to e4m3 through float, saturating (the FP8 kernel's P), and back; tables filled. */
static inline double round_to_e4m3(double x) {
    return ref_e4m3_table[ref_float_to_e4m3((float)x, 1)];
}

/* Element [i0, i1, i2, i3] of a host view of dtype dt (F16, BF16, E4M3, E5M2) as a float; tables filled. */
static inline float elem_float(fg_dtype dt, const fg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int64_t off = i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3];
    if (dt == FG_DTYPE_E4M3)
        return ref_e4m3_table[((const uint8_t *)t->data)[off]];
    if (dt == FG_DTYPE_E5M2)
        return ref_e5m2_table[((const uint8_t *)t->data)[off]];
    return fast_to_float(dt, ((const uint16_t *)t->data)[off]);
}

/* The descale factor of (batch b, KV head h) in a host view t (data NULL: 1; [1]: its one value). */
static inline double descale_at(const fg_tensor *t, int64_t b, int64_t h) {
    if (!t->data)
        return 1.0;
    const float *d = t->data;
    return t->ndim == 2 ? (double)d[b * t->stride[0] + h * t->stride[1]] : (double)d[0];
}

/* ---- threads (threads.c) ---- */

/* Processes unit `unit` of job on the thread with scratch index tid. */
typedef void (*ref_unit_fn)(void *job, int tid, int64_t unit);

/* How many threads to use for `units` units: every online core, at most one per unit. */
int ref_thread_count(int64_t units);
/* Runs fn over units 0 .. units-1 on up to nthreads threads (the caller is one of them, with tid 0);
 * returns after every unit is done. Never fails: a thread that cannot be created is not used. */
void ref_run_parallel(void *job, ref_unit_fn fn, int64_t units, int nthreads);

/* ---- argument checks (check.c); each names the offending field in err ---- */

/* The number of elements in t's view (0 when any size is 0). */
int64_t ref_elements(const fg_tensor *t);
/* Checks that t is a host view of `ndim` dims with non-negative sizes and data unless empty. */
fg_status ref_check_view(const fg_tensor *t, const char *name, int ndim, fg_error *err);
/* Checks that p describes a consistent forward problem (dims, sizes, dtypes, GQA divisibility). */
fg_status ref_check_problem(const ref_problem *p, fg_error *err);
/* Checks that t has `like`'s dims and sizes (like: a validated 4-d view). */
fg_status ref_check_like(const fg_tensor *t, const char *name, const fg_tensor *like, const char *like_name,
                         fg_error *err);
/* Checks that p describes a consistent 16-bit backward problem. */
fg_status ref_check_bwd_problem(const ref_bwd_problem *p, fg_error *err);

/* ---- findings and the tolerance rule (check.c) ---- */

/* What a check found so far in one output tensor (O, or a gradient); "lin" = row-major logical index. */
typedef struct grad_findings {
    double max_err;        /* max |out - ref32| */
    int64_t worst_lin;     /* its element, -1 when none */
    double worst_out;      /* the output there */
    double worst_ref;      /* ref32 there */
    double max_lowp;       /* max |ref_lowp - ref32| */
    int64_t nonfinite;     /* NaN/Inf outputs */
    int64_t first_nf_lin;  /* first of them, -1 when none */
} grad_findings;

/* Folds one element into f: out is the kernel's value, r32 and rlow the references, lin its index. */
void ref_findings_fold(grad_findings *f, double out, double r32, double rlow, int64_t lin);
/* Merges findings g (one thread's) into the report fields: the largest lowp gap, the worst element (ties
 * to the lowest index, so a report does not depend on timing), the non-finite count and first. */
void ref_findings_merge(const grad_findings *g, double *max_lowp, double *max_err, double *worst_out,
                        double *worst_ref, int64_t *worst, int64_t *nonfinite, int64_t *first_nf);
/* Writes the row-major logical index lin of a tensor with the given sizes as per-dim indices (-1 each
 * when lin < 0). */
void ref_unflatten(int64_t lin, const int64_t *shape, int ndim, int64_t *idx);
/* The forward's bound on max|out - ref32|: 2 * max|ref_lowp - ref32| + 1e-5. */
double ref_fwd_bound(double max_lowp_err);
/* A gradient's bound: REF_BWD_FACTOR * max|ref_lowp - ref32| + REF_BWD_ATOL. */
double ref_bwd_bound(double max_lowp_err);

#endif
