/* reference_harness.h: what the CPU reference's test programs (test_reference_numbers, _forward, _backward,
 * _check) share (reference_harness.c): host tensors and views (16-bit, FP8, descales, LSE), random problems,
 * the reference run and a naive forward to compare with, and the backward's problems, gradients and the
 * fixture ref_check_bwd is tried on. Every helper fails the running test on error. */
#ifndef FG_TESTS_REFERENCE_HARNESS_H
#define FG_TESTS_REFERENCE_HARNESS_H

#include <stdint.h>
#include "reference/reference.h"

/* A host tensor [b, s, h, d] of dtype dt. pad > 0 makes it a strided slice of a larger buffer: each
 * dim's stride gets `pad` extra elements and the padding holds NaN, which must never reach a result.
 * bhsd != 0 stores it head-major ([b, h, s, d] in memory) while the view stays [b, s, h, d]. */
fg_tensor host_tensor(fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int64_t pad, int bhsd);

/* The address of element [b, s, h, x] of a host view. */
uint16_t *at(const fg_tensor *t, int64_t b, int64_t s, int64_t h, int64_t x);

/* ref_fill_normal, failing the test on error. */
void fill(const fg_tensor *t, uint64_t seed);

/* Random contiguous Q [b, sq, hq, d], K and V [b, sk, hkv, d] of dtype dt, filled from seeds sq_seed,
 * k_seed and v_seed (ref_fill_normal). Free with qkv_free. */
void qkv_random(fg_tensor *q, fg_tensor *k, fg_tensor *v, fg_dtype dt, int64_t b, int64_t sq, int64_t sk,
                       int64_t hq, int64_t hkv, int64_t d, uint64_t q_seed, uint64_t k_seed, uint64_t v_seed);

/* Frees the storage of three host tensors (qkv_random's, or host_tensor's). */
void qkv_free(fg_tensor *q, fg_tensor *k, fg_tensor *v);

/* A ref_problem from its parts. */
ref_problem problem(fg_tensor q, fg_tensor k, fg_tensor v, float scale, int causal);

/* Runs the reference; returns malloc'd O (and *lse_out, malloc'd) contiguous. */
double *run_ref(const ref_problem *p, ref_mode mode, double **lse_out);

/* The forward pass written as plainly as possible, independent of reference/forward.c's row/unit machinery. */
void naive(const ref_problem *p, int lowp, double *o, double *lse);

/* max |a[i] - b[i]| over n elements; Inf when a NaN is involved. */
double max_abs_diff(const double *a, const double *b, int64_t n);

/* An fp8 host tensor [b, s, h, d]. vt != 0 lays it out key-major like the FP8 kernel's V (a [b, h, d, s']
 * buffer, s' = s rounded up to 16); the padding between and after rows holds NaN codes, which must never
 * reach a result. */
fg_tensor host_fp8(fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int vt);

/* A host fp32 descale view: [1] (per_head 0) or [b, hkv] (per_head 1) with transposed strides (h
 * outermost) to exercise them. Values from vals (b * hkv of them, row-major [b][h]; [1] takes vals[0]). */
fg_tensor host_descale(const float *vals, int64_t b, int64_t hkv, int per_head);

/* An fp8 problem: q [b, sq, hq, d], k and v [b, sk, hkv, d] (V key-major), filled from seeds; out bf16. */
ref_problem fp8_problem(fg_dtype dt, int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d);

/* Frees an fp8_problem's tensors and descale views. */
void fp8_problem_free(ref_problem *p);

/* An F32 host view [b, hq, sq] of a contiguous double LSE [b, hq, sq]. pad > 0 makes it a strided slice
 * (NaN in the padding); transposed != 0 stores it [b, sq, hq] in memory. */
fg_tensor lse_view(const double *lse, int64_t b, int64_t hq, int64_t sq, int64_t pad, int transposed);

/* A host tensor of dtype dt and the given shape (contiguous unless pad / bhsd) holding the contiguous double
 * array a rounded to the dtype. */
fg_tensor tensor_of(const double *a, fg_dtype dt, const int64_t *shape, int64_t pad, int bhsd);

/* A backward problem on q, k, v (v's head dim may differ from q's: O and dO have v's) with dO filled from `seed`,
 * O = the forward's ref_lowp output in the input dtype and the LSE = the forward's (ref32) as float, as a
 * kernel's forward would leave them. Free with
 * bwd_problem_free (which frees o, d_o and the LSE, not q, k, v). */
ref_bwd_problem bwd_problem(fg_tensor q, fg_tensor k, fg_tensor v, float scale, int causal, uint64_t seed);

/* Frees what bwd_problem allocated. */
void bwd_problem_free(ref_bwd_problem *p);

/* Gradients as ref_attention_bwd writes them (contiguous doubles) and their element counts. */
typedef struct grads {
    double *dq, *dk, *dv, *delta;
    int64_t nq, nk, nv, nrow; /* elements of dq, dk (k's shape), dv (v's) and delta */
} grads;

/* Allocates grads for p (NaN-filled, so that an element never written shows). */
grads grads_alloc(const ref_bwd_problem *p);

/* Frees grads. */
void grads_free(grads *g);

/* ref_attention_bwd in `mode`, failing the test on error. */
grads run_bwd(const ref_bwd_problem *p, ref_mode mode);

/* The kernel's view of a problem for ref_check_bwd: gradients as host tensors. */
typedef struct bwd_fixture {
    fg_tensor q, k, v;     /* inputs */
    ref_bwd_problem p;     /* the problem */
    fg_tensor dq, dk, dv;  /* gradients, initialized to ref_lowp: dq bf16 strided, dk bf16, dv F32 */
    float *dv_mem;         /* dv's storage */
} bwd_fixture;

/* Random bf16 inputs (b=2, sq=40, sk=30, 4 heads over 2, d=32, causal: rows 0..9 see nothing) with the
 * gradients = ref_lowp's, which must pass. Free with bwd_fixture_free. */
void bwd_fixture_make(bwd_fixture *f);

/* Frees what bwd_fixture_make allocated. */
void bwd_fixture_free(bwd_fixture *f);

#endif
