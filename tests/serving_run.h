/* serving_run.h: one serving call (fg_attention_fwd_varlen) set up, run and judged sequence by sequence
 * against the CPU reference (serving_run.c), for test_gpu_serving.
 *
 * Inputs are filled with N(0, 1) (FP8 K and V: rounded to e4m3 or e5m2); everything a correct kernel must not read
 * holds NaN: the padding of
 * strided views, the slots of a dense cache past seqused_k, the pages no sequence uses and the slots past a
 * sequence's keys in its last page, the table entries past a sequence's pages (garbage indices). Outputs
 * are NaN-poisoned with guard bands, and the workspace starts full of NaN. Each sequence's rows of O and
 * LSE are judged by ref_check_fwd on a host view of that sequence alone (the tolerance rule of
 * reference/reference.h), so a row written for the wrong sequence, head or key range fails. */
#ifndef FG_TESTS_SERVING_RUN_H
#define FG_TESTS_SERVING_RUN_H

#include "generator/mod.h"
#include "reference/reference.h"
#include "tests/gpu_harness.h"

enum { SERVE_K_PACKED = 0, SERVE_K_DENSE = 1, SERVE_K_PAGED = 2 };

typedef struct serve_case {
    fg_dtype dt;       /* F16 or BF16 */
    int kv_fp8;        /* FG_DTYPE_E4M3 or FG_DTYPE_E5M2: K and V in that FP8 dtype (an FP8 KV cache); 0: dt */
    int descale;       /* FP8 K and V: 0 no descales, 1 one for the tensor each, 2 one per (sequence, KV head) */
    int batch;
    const int *lq;     /* queries of each sequence (batch entries) */
    const int *lk;     /* keys of each sequence */
    int hq, hkv, d;
    int dv;            /* V's and O's head dim (0: d) */
    int v_in_k;        /* v is the prefix view k[..., :dv] (an absorbed-MLA cache): K's memory and strides */
    int causal;
    int q_dense;       /* 1: q is [batch, lq[0], hq, d] (every lq equal) instead of packed */
    int k_mode;        /* SERVE_K_PACKED, SERVE_K_DENSE (a cache of cap_k keys a sequence, seqused_k) or SERVE_K_PAGED */
    int cap_k;         /* dense caches: keys a sequence holds (>= every lk); 0: the longest lk */
    int no_seqused;    /* dense caches whose every sequence fills them (lk = cap_k): no seqused_k, K's shape says */
    int page_size;     /* paged */
    int num_splits;    /* the call's num_splits (0: chosen) */
    int split_size;    /* the call's split_size */
    int tiles[4];      /* block_m, block_n, warps, stages of an explicit kind=serve variant, or all 0 */
    int tma;           /* with tiles: the variant's tma=1 (K and V loaded by TMA; sm_90 and newer) */
    int sinks;         /* attention sinks: query head h's logit serve_sink(h) */
    int window, window_left, window_right; /* a sliding window (fg_varlen_args' fields) */
    float softcap;     /* a logit softcap (0: none) */
    int alibi;         /* ALiBi: query head h's slope serve_slope(h) */
    int causal_top_left; /* with causal: the mask aligned top-left */
    int strided;       /* q, k, v, o as padded slices of larger buffers */
    int no_lse;        /* do not request the LSE */
    uint64_t seed;
    const fg_mod *mod; /* a custom mod (fg_mod_create), or NULL; its aux arrays' host data and extents below, in
                          its order (uploaded by serve_setup; the reference evaluates the tree on them) */
    const void *aux[FG_MOD_AUX_MAX];
    int64_t aux_shape[FG_MOD_AUX_MAX][2];
} serve_case;

typedef struct serve_run {
    serve_case c;
    int lq[1024], lk[1024];   /* the case's lengths (batch <= 1024) */
    int32_t cu_q[1025], cu_k[1025];
    int32_t *table;           /* host copy of the block table [batch, max_pages] */
    int max_pages, num_pages, total_q, total_k, seqlen_q;
    dbuf q, k, v, o, lse;
    CUdeviceptr d_cu_q, d_cu_k, d_used, d_table, ws, d_sinks, d_slopes;
    CUdeviceptr d_aux[FG_MOD_AUX_MAX]; /* the mod's aux arrays */
    float sinks[256];         /* the sinks' values (c.sinks), [hq] */
    float slopes[256];        /* the ALiBi slopes (c.alibi), [hq] */
    float *descales[2];       /* FP8 K's and V's descales (c.descale): [1], or [batch, hkv] stored head-major */
    CUdeviceptr d_descales[2];
    size_t ws_size;
    fg_varlen_args args;
} serve_run;

/* Query head h's sink logit in the cases with sinks: spread over [-2, 2.2] so that some rows are dominated by
 * their sink and others by their keys. */
float serve_sink(int h);
/* Query head h's ALiBi slope in the cases with ALiBi: 0.1 to 0.1 / 128, halving from head to head (repeating
 * every 8), so that some heads look far and others near. */
float serve_slope(int h);
/* FP8 K's (kv 0) or V's (kv 1) descale in the cases with descales: per tensor 0.7 and 1.6, per (sequence b, KV head
 * h) spread over [0.5, 1.1] and [0.25, 1.45], so that a factor taken from the wrong sequence or head shows. */
float serve_descale(int kv, int per_head, int b, int h);
/* Builds the case's tensors, lengths and table (uploaded), and the arguments with a workspace of the size
 * fg_attention_fwd_varlen_workspace_size gives. */
void serve_setup(gpu_env *env, serve_run *r, const serve_case *c);
/* Poisons the outputs, runs the call (or the explicit variant of c->tiles), waits, downloads O and LSE. */
void serve_launch(gpu_env *env, serve_run *r);
/* Guard bands and padding, then each sequence's rows against the reference. */
void serve_verify(serve_run *r);
void serve_free(gpu_env *env, serve_run *r);
/* Open, set up, launch, verify, free, close. */
void serve_case_run(const serve_case *c);
/* The reference's callbacks of a case's custom mod (none without one) for sequence b: its fp64 evaluation on the
 * case's host arrays, and score_mod's derivative (mod_grad) for the backward; mu holds their state. */
typedef struct serve_mod_user {
    const fg_mod *mod;
    fg_mod with_grad; /* the tree with score_mod's derivative, node grad */
    int grad;
    mod_inputs in;
} serve_mod_user;
void serve_mod_hook(const serve_case *c, int b, serve_mod_user *mu, ref_problem *p);
/* The 4-d view [1, rows, heads, d] of a packed 3-d tensor (a 4-d one as it is), for the reference's fills
 * and checks, which take [batch, seqlen, heads, head_dim]. */
fg_tensor serve_view4(const fg_tensor *t);
/* Rows [row0, row0 + n) of batch b of a 4-d host view, as a view of one sequence. */
fg_tensor serve_rows_of(const fg_tensor *t4, int64_t b, int64_t row0, int64_t n, size_t esize);
/* Device memory holding n int32 values (uploaded). */
CUdeviceptr upload_ints(gpu_env *env, const int32_t *v, size_t n);

#endif
