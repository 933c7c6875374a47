/* reference.h: the CPU reference of the attention forward and backward passes, and the helpers the GPU
 * suites and the CLI share to judge a kernel's output (the tolerance rule: docs/numerics.md). The
 * backward pass is at the end.
 *
 * Two references on the same inputs, computed in double precision on every core:
 *   ref32    the exact math from the upcast fp16/bf16 inputs (FP8: from the dequantized inputs, each
 *            element times its descale factor);
 *   ref_lowp the kernel's precision: P = exp(scale*s - rowmax) rounded to the input dtype before P.V,
 *            the row sum l taken from the unrounded P, O rounded to the dtype at the end (as
 *            FlashAttention's own tests build their reference). FP8 inputs (e4m3, e5m2), as the FP8
 *            kernel computes:
 *              c = scale * q_descale * k_descale;  m = max_j c * s_j  (s = Q K^T of the raw fp8 values);
 *              P_j = exp2((c * s_j - m) * log2(e) + 8) = 2^8 exp(c * s_j - m), in (0, 256];
 *              l = sum_j P_j (unrounded);  P_j rounded to e4m3 (saturating) for the P.V product;
 *              O = (sum_j e4m3(P_j) v_j) * v_descale / l, rounded to the output dtype (fp16 or bf16).
 *          An FP8 KV cache (k and v e4m3 or e5m2 beside a 16-bit q, the serving kernel's kv=e4m3|e5m2): K and V
 *          decoded exactly, the scores c * s_j with c = scale * k_descale, P rounded to q's dtype as for 16-bit
 *          inputs, O = (sum_j P_j v_j) * v_descale / l rounded to q's dtype.
 * A kernel output passes when max|out - ref32| <= 2 * max|ref_lowp - ref32| + 1e-5 and nothing is NaN/Inf.
 *
 * Tensors are host arrays described by an fg_tensor exactly like the public API's device tensors
 * ([batch, seqlen, heads, head_dim], strides in elements, any strides allowed here), so one description
 * serves the device buffer and its host copy. Semantics follow include/flashgen.h: softmax_scale 0 means
 * 1/sqrt(head_dim); causal is bottom-right aligned (query i sees keys j <= i + seqlen_k - seqlen_q);
 * K/V head h/(heads_q/heads_kv) serves query head h (GQA); a row that sees no key has O = 0, LSE = -inf.
 * LSE is the natural log of sum_j exp(scale * s_ij), laid out [batch, heads_q, seqlen_q] (FP8: of the
 * descaled scores, c * s_ij). */
#ifndef FG_TEST_REFERENCE_H
#define FG_TEST_REFERENCE_H

#include <stdint.h>
#include "core/error.h"

/* ---- exact conversions, round to nearest even; NaN stays NaN (quieted), Inf and subnormals exact ---- */
float ref_f16_to_float(uint16_t h);
uint16_t ref_float_to_f16(float f);
float ref_bf16_to_float(uint16_t h);
uint16_t ref_float_to_bf16(float f);

/* ---- FP8 (the OCP 8-bit formats of CUDA's __nv_fp8_e4m3 and __nv_fp8_e5m2) ----
 * e4m3: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 (0x7F, 0xFF) is
 *       NaN; largest finite 448, smallest subnormal 2^-9.
 * e5m2: 1 sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: exponent 31 is Inf (mantissa 0)
 *       or NaN; largest finite 57344, smallest subnormal 2^-16.
 * Decoding is exact. Encoding rounds to nearest, ties to even, subnormals included. A value that rounds
 * past the largest finite one (and Inf) becomes, with `saturate`, the largest finite value of its sign;
 * without, NaN (e4m3, which has no Inf) or Inf (e5m2). NaN encodes as 0x7F with its sign bit. */
#define REF_E4M3_MAX 448.0f
#define REF_E5M2_MAX 57344.0f
float ref_e4m3_to_float(uint8_t b);
float ref_e5m2_to_float(uint8_t b);
uint8_t ref_float_to_e4m3(float f, int saturate);
uint8_t ref_float_to_e5m2(float f, int saturate);

/* The same for a dtype chosen at run time (FG_DTYPE_F16, FG_DTYPE_BF16, or FG_DTYPE_E4M3 / FG_DTYPE_E5M2
 * in the low byte, encoded without saturation; any other dtype gives NaN / 0). */
float ref_to_float(fg_dtype dtype, uint16_t bits);
uint16_t ref_from_float(fg_dtype dtype, float f);

/* Fills every element of the view t (host data: fp16, bf16, e4m3 or e5m2) with N(0, 1) samples rounded
 * to t->dtype (fp8: one byte per element, rounded to nearest even, saturating).
 * Element values depend only on (seed, logical index b,s,h,d in row-major order), not on the strides
 * or the thread count: a strided view and a contiguous copy filled with one seed hold the same values.
 * Memory between the view's elements (padding) is left untouched. Uses every core. */
fg_status ref_fill_normal(const fg_tensor *t, uint64_t seed, fg_error *err);
/* The same with N(mean, 1) samples (the same N(0, 1) draws plus mean, then rounded): an FP8 V whose columns
 * average `mean` shows accumulation drift that a V of mean 0 hides (the sm_90a FP8 kernel once lost 23% of
 * O at 16k keys that way). mean must lie in (-16, 16). */
fg_status ref_fill_normal_mean(const fg_tensor *t, uint64_t seed, float mean, fg_error *err);

/* One forward problem on host tensors. q, k, v share one dtype (F16, BF16, E4M3 or E5M2), or k and v one FP8 dtype
 * beside a 16-bit q (an FP8 KV cache); any strides (an FP8 V in the kernel's key-major layout is just another
 * strided view here). */
typedef struct ref_problem {
    fg_tensor q;         /* [b, sq, hq, d] */
    fg_tensor k;         /* [b, sk, hkv, d], hkv divides hq; sk may be 0 */
    fg_tensor v;         /* [b, sk, hkv, dv]: dv may differ from q's and k's d (16-bit); O is [b, sq, hq, dv] */
    float softmax_scale; /* 0 means 1/sqrt(d) */
    int causal;          /* 1: bottom-right aligned causal mask */
    /* FP8 only (absent, data NULL, for 16-bit problems; an FP8 KV cache takes k's and v's): descale factors as
     * host views with the public API's convention: F32, ndim 1 of shape [1] or ndim 2 of shape [b, hkv], any
     * strides; data NULL means 1. Query head h takes the factors of KV head h / (hq / hkv). */
    fg_tensor q_descale;
    fg_tensor k_descale;
    fg_tensor v_descale;
    fg_dtype out_dtype;  /* FP8 only: O's dtype, F16 or BF16; ignored for 16-bit problems (O has q's dtype) */
    int fp8_sum_rounded; /* FP8 only: REF_LOWP divides O by the sum of the e4m3-rounded P, as the sm_90a kernel
                            does at head_dim 64/128 (its row sums come from the P.V product: forward_wgmma.cuh
                            FG_PV_SUM); 0: by the sum of the unrounded P, as the other FP8 kernels */
    /* Model variants, each off when zero or NULL; 16-bit problems only. With d = i + sk - sq (query i's
     * bottom-right diagonal) and logit_ij = scale * s_ij:
     *   window           1: query i sees only keys j with d - window_left <= j <= d + window_right (a negative
     *                    side is unbounded), besides the causal limit when causal is set;
     *   causal_top_left  with causal: query i sees keys j <= i (top-left aligned) instead of j <= d;
     *   softcap          > 0: logit_ij = softcap * tanh(scale * s_ij / softcap);
     *   alibi_slopes     F32 [heads_q] (data NULL: none): logit_ij -= slope_h * |d - j|, after the softcap;
     *   sinks            F32 [heads_q] (data NULL: none): exp(sink_h) joins every row's softmax denominator as a
     *                    key without a value: O_i = sum_j exp(logit_ij) v_j / (exp(sink_h) + sum_j exp(logit_ij))
     *                    and the LSE includes it; a row that sees no key gets O = 0 and LSE = sink_h.
     * The backward reference takes them all: the softcap's derivative in dS, and the sinks' gradient from
     * ref_sink_grad. */
    int window;
    int64_t window_left, window_right;
    int causal_top_left;
    float softcap;
    fg_tensor alibi_slopes;
    fg_tensor sinks;
    /* A custom mod (generator/mod.h; the tests pass its fp64 evaluation): score, when set, replaces logit_ij
     * (after the softcap and ALiBi) by score(user, logit_ij, b, h, d, j) with d = i + sk - sq, query i's position
     * among the keys (bottom-right aligned, as causal); mask, when set, hides key j from query i where it gives
     * 0 (the logit -inf) and makes the logit NaN where it gives -1 (an out-of-range
     * load). b is the batch index plus mod_batch0 (a test that checks one sequence of a packed call at a time
     * passes that sequence's index). A row whose every key the mask hides gets O = 0 and LSE = -inf (the sink
     * with sinks). The backward reference takes score's derivative from mod_score_grad (required with
     * mod_score there): the value as mod_score, and d score / d logit in *d. */
    double (*mod_score)(const void *user, double logit, int b, int h, int i, int j);
    double (*mod_score_grad)(const void *user, double logit, int b, int h, int i, int j, double *d);
    int (*mod_mask)(const void *user, int b, int h, int i, int j);
    const void *mod_user;
    int mod_batch0;
} ref_problem;

typedef enum ref_mode {
    REF_32 = 0,  /* exact math in double from the upcast (FP8: dequantized) inputs */
    REF_LOWP = 1 /* P and O rounded as the kernel does (see the top of this file) */
} ref_mode;

/* Computes the forward pass of p in `mode`. o (caller-owned, b*sq*hq*dv doubles) receives O contiguous
 * [b, sq, hq, dv]; lse (b*hq*sq doubles, or NULL) receives the LSE contiguous [b, hq, sq] (the same in
 * both modes). Returns FG_ERR_INVALID_ARGUMENT for an inconsistent problem, FG_ERR_NO_MEMORY. */
fg_status ref_attention_fwd(const ref_problem *p, ref_mode mode, double *o, double *lse, fg_error *err);

/* LSE tolerance: |lse - ref| <= REF_LSE_ATOL + REF_LSE_RTOL * |ref|, plus for FP8 an allowance for the
 * tensor cores' reduced-precision accumulation of the scores (forward_row in reference/forward.c). The kernel's
 * LSE comes from fp32 scores and an fp32 row sum over at most a few thousand terms; its error is ~1e-6,
 * so these leave a wide margin while a wrong scale, base (log2 vs ln) or row max is off by far more. */
#define REF_LSE_ATOL 5e-4
#define REF_LSE_RTOL 5e-5

/* What ref_check_fwd found. Indices of the worst elements are logical ([b, s, h, d] / [b, h, s]). */
typedef struct ref_report {
    int pass;                  /* 1 when every rule below holds */
    double max_err;            /* max |out - ref32| over finite outputs */
    double max_lowp_err;       /* max |ref_lowp - ref32| */
    double bound;              /* 2 * max_lowp_err + 1e-5 */
    int64_t worst[4];          /* where max_err occurs (all -1 when there are no elements) */
    double worst_out;          /* the output at worst */
    double worst_ref;          /* ref32 at worst */
    int64_t nonfinite;         /* outputs that are NaN or Inf (must be 0) */
    int64_t first_nonfinite[4];/* the first of them in row-major order, or -1 */
    int lse_checked;           /* 1 when an LSE tensor was given */
    double lse_max_err;        /* max |lse - ref| over rows whose reference is finite */
    int64_t lse_worst[3];      /* where lse_max_err occurs, or -1 */
    int64_t lse_bad;           /* rows out of tolerance, non-finite where the reference is finite,
                                  or not -inf where the reference is -inf (must be 0) */
    int64_t lse_first_bad[3];  /* the first bad row in row-major order, or -1 */
    double lse_first_bad_val;  /* its value */
    double lse_first_bad_ref;  /* its reference */
} ref_report;

/* Judges a kernel's output against both references, row by row on every core, without storing the
 * references (so a 2^31-element output needs no extra memory). out: host copy of O, of O's dtype (q's,
 * or p->out_dtype for FP8) and shape [b, sq, hq, d], any strides. lse: host copy of the LSE
 * (FG_DTYPE_F32, ndim 3, [b, hq, sq]) or NULL to skip it. Fills *r (r->pass tells the verdict); returns
 * FG_OK unless the arguments are inconsistent (FG_ERR_INVALID_ARGUMENT) or memory runs out
 * (FG_ERR_NO_MEMORY). */
fg_status ref_check_fwd(const ref_problem *p, const fg_tensor *out, const fg_tensor *lse, ref_report *r,
                        fg_error *err);

/* The root-mean-square error of a kernel's output against REF_32, in double, over every element of out
 * (a host copy of O as for ref_check_fwd), computed row by row on every core like ref_check_fwd: the
 * accuracy figure of the FP8 study. 0 for an empty output; NaN when an output element is NaN or Inf.
 * On inconsistent arguments or no memory, returns -1 with err filled. */
double ref_rmse_fwd(const ref_problem *p, const fg_tensor *out, fg_error *err);

/* Writes a one-line account of r into buf (n bytes, NUL-terminated, truncated if needed):
 * errors, bound, worst element, non-finite count and the LSE findings. Returns buf. */
char *ref_report_format(const ref_report *r, char *buf, size_t n);

/* ---- the backward pass ----
 * Given dO = dL/dO, the gradients of L with respect to Q, K and V, recomputed as FlashAttention's backward
 * does (KERNELS.md, "Backward"). With s_ij = q_i . k_j over the keys j that query row i sees (the forward's
 * mask) and LSE_i the GIVEN log-sum-exp (the kernel recomputes P from the LSE the forward saved, so both
 * references do too, from the same fp32 values):
 *   P_ij  = exp(scale * s_ij - LSE_i)            0 for a masked pair, and for every key of a row that sees
 *                                                no key (causal with sq > sk, sk = 0) or whose LSE is -inf:
 *                                                such a row contributes nothing and gets dQ = 0 (never NaN)
 *   dP_ij = dO_i . v_j
 *   dS_ij = P_ij (dP_ij - D_i)
 *   dQ_i  = scale * sum_j dS_ij k_j
 *   dK_j  = scale * sum_h sum_i dS_ij q_i         h over the hq / hkv query heads that share j's KV head
 *   dV_j  =         sum_h sum_i P_ij dO_i
 * ref32    all of it in double from the upcast inputs, with D_i = sum_j P_ij dP_ij, which is rowsum(dO_i * O_i)
 *          for the exact O = P V: the exact gradient (the o tensor is not used).
 * ref_lowp the kernel's precision, as FA2/FA3 convert P and dS to 16 bits for their MMAs (rnd: round to the
 *          input dtype through float, to nearest even):
 *            D_i   = sum_x dO_ix O_ix               from the given 16-bit O and dO (double; the kernel's fp32)
 *            dV_j  = sum_h sum_i rnd(P_ij) dO_i
 *            dS_ij = rnd(P_ij (dP_ij - D_i))        P unrounded here
 *            dQ_i  = rnd(scale * sum_j dS_ij k_j),  dK_j = rnd(scale * sum_h sum_i dS_ij q_i),  dV_j rounded
 *          (each gradient rounded to the input dtype once at the end, as the kernel writes it).
 * A kernel's gradients pass when, for each of dQ, dK and dV,
 *   max|out - ref32| <= REF_BWD_FACTOR * max|ref_lowp - ref32| + REF_BWD_ATOL
 * and none is NaN/Inf: the tolerance rule (docs/numerics.md: 2 * max|ref_lowp - ref32| + 1e-5 for the
 * forward, 3x for gradients, the forward's 1e-5 kept). A wrong o inflates ref_lowp's gap and so the bound: pass the
 * forward output of this very problem (one that ref_check_fwd passed), as the kernel will read it. */
#define REF_BWD_FACTOR 3.0
#define REF_BWD_ATOL 1e-5

/* One backward problem on host tensors. fwd.q, k, v are F16 or BF16 (FP8 backward is not supported);
 * fwd's descale fields stay absent. Any strides. */
typedef struct ref_bwd_problem {
    ref_problem fwd;  /* q, k, v, softmax_scale, causal of the forward pass */
    fg_tensor o;      /* [b, sq, hq, dv], q's dtype: the forward's output (used by ref_lowp's D only) */
    fg_tensor d_o;    /* [b, sq, hq, dv], q's dtype: the gradient of the loss with respect to O */
    fg_tensor lse;    /* [b, hq, sq], F32: the forward's LSE (natural log; -inf for a row that sees no key) */
} ref_bwd_problem;

/* Computes the gradients of p in `mode` (see above) on every core; the result does not depend on the
 * thread count. Caller-owned outputs, contiguous: dq [b, sq, hq, d] (b*sq*hq*d doubles), dk [b, sk, hkv, d]
 * and dv [b, sk, hkv, dv] (NULL allowed when sk = 0), delta (b*hq*sq doubles, or NULL)
 * [b, hq, sq] receives the D_i of the mode (ref32: sum_j P_ij dP_ij, 0 for a row without keys; ref_lowp:
 * rowsum(dO_i * O_i) of the given tensors, not rounded). Each thread holds one K/V head in double (2*sk*d
 * doubles). About 3 s for b=2, s=1024, h=8, d=128 on two cores. Returns FG_ERR_INVALID_ARGUMENT for an
 * inconsistent problem (FP8 inputs included), FG_ERR_NO_MEMORY. */
fg_status ref_attention_bwd(const ref_bwd_problem *p, ref_mode mode, double *dq, double *dk, double *dv,
                            double *delta, fg_error *err);

/* The gradient of the loss with respect to each query head's sink logit (problems with sinks): dsink_h =
 * -sum over batch and rows of exp(sink_h - LSE_i) D_i, with D_i = dO_i . O_i of the given O and dO (the
 * sink's probability times the row's D: the sink takes part in the normalization only). dsink: [heads_q]
 * doubles. FG_ERR_INVALID_ARGUMENT without sinks or for an inconsistent problem. */
fg_status ref_sink_grad(const ref_bwd_problem *p, double *dsink, fg_error *err);

/* For the gradients of a custom mod's trainable aux arrays: calls visit(user, b, h, q, kv, s, g) for every score a
 * row sees (mask and window kept, LSE finite), in the mod's terms (b with mod_batch0, q the row's position among the
 * keys, kv the key), with s the logit score_mod takes and g = dL/d(score_mod's result) = P (dP - D), D = rowsum(dO O)
 * of the given O and dO as the kernels form it. One thread, in a fixed order. FG_ERR_INVALID_ARGUMENT for an
 * inconsistent problem or a NULL visit. */
typedef void (*ref_score_grad_visit)(void *user, int b, int h, int q, int kv, double s, double g);
fg_status ref_score_grads(const ref_bwd_problem *p, ref_score_grad_visit visit, void *user, fg_error *err);

/* What ref_check_bwd found for one gradient tensor. Indices are logical ([b, s, h, d]). */
typedef struct ref_grad_report {
    int pass;                   /* 1 when max_err <= bound and nonfinite == 0 */
    double max_err;             /* max |out - ref32| over finite outputs */
    double max_lowp_err;        /* max |ref_lowp - ref32| */
    double bound;               /* REF_BWD_FACTOR * max_lowp_err + REF_BWD_ATOL */
    int64_t worst[4];           /* where max_err occurs (all -1 when there are no elements) */
    double worst_out;           /* the output at worst */
    double worst_ref;           /* ref32 at worst */
    int64_t nonfinite;          /* outputs that are NaN or Inf (must be 0) */
    int64_t first_nonfinite[4]; /* the first of them in row-major order, or -1 */
} ref_grad_report;

/* What ref_check_bwd found: pass is 1 when all three gradients pass. */
typedef struct ref_bwd_report {
    int pass;
    ref_grad_report dq, dk, dv;
} ref_bwd_report;

/* Judges a kernel's gradients against both references, on every core, without storing the references
 * (only their D, two doubles per query row).
 * dq: host copy of dQ, shape [b, sq, hq, d]; dk, dv: host copies of dK and dV, shapes [b, sk, hkv, d] and
 * [b, sk, hkv, dv]; each F16, BF16 or F32 (independently), any strides. Fills *r (r->pass tells the verdict); returns FG_OK unless
 * the arguments are inconsistent (FG_ERR_INVALID_ARGUMENT) or memory runs out (FG_ERR_NO_MEMORY). */
fg_status ref_check_bwd(const ref_bwd_problem *p, const fg_tensor *dq, const fg_tensor *dk, const fg_tensor *dv,
                        ref_bwd_report *r, fg_error *err);

/* Writes a one-line account of r into buf (n bytes, NUL-terminated, truncated if needed): per gradient the
 * error, bound, worst element and non-finite count. Returns buf. */
char *ref_bwd_report_format(const ref_bwd_report *r, char *buf, size_t n);

#endif
