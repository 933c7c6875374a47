/* fg_params.h: the run-time parameters of a forward kernel, passed by value as a __grid_constant__
 * argument. This one definition is compiled into the host library (runtime/) and pasted by the emitter
 * into every generated kernel, so host and device can never disagree on the layout.
 * Plain C with fixed-width types spelled as built-ins: NVRTC sees it with no headers. Everything that
 * varies per call lives here and never causes a recompile. Strides are in elements. */
#ifndef FG_PARAMS_H
#define FG_PARAMS_H

typedef struct fg_fwd_params {
    const void *q;              /* [b, sq, hq, d] */
    const void *k;              /* [b, sk, hkv, d] */
    const void *v;              /* [b, sk, hkv, d] */
    void *o;                    /* [b, sq, hq, d] */
    float *lse;                 /* [b, hq, sq] natural-log LSE, or 0 when not requested */
    long long q_stride[3];      /* batch, seq, head strides of Q */
    long long k_stride[3];      /* batch, seq, head strides of K */
    long long v_stride[3];      /* batch, seq, head strides of V */
    long long o_stride[3];      /* batch, seq, head strides of O */
    long long lse_stride[3];    /* batch, head, seq strides of LSE */
    int batch;                  /* b */
    int heads_q;                /* hq */
    int heads_kv;               /* hkv, divides hq */
    int seqlen_q;               /* sq >= 1 (the host skips empty launches) */
    int seqlen_k;               /* sk >= 0 */
    int head_dim;               /* d, equal to the spec's head_dim (checked on the host) */
    float scale_log2;           /* softmax_scale * log2(e): scores are exponentiated with exp2 */
    float softmax_scale;        /* softmax_scale itself, for the LSE in natural log */
} fg_fwd_params;

#endif
