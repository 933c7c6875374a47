/* fg_params.h: the run-time parameters of a forward kernel, passed by value as a __grid_constant__
 * argument. This one definition is compiled into the host library (runtime/) and included by
 * every kernel template, so host and device can never disagree on the layout.
 * Plain C with fixed-width types spelled as built-ins: it needs no toolkit header. Everything that
 * varies per call lives here and never causes a recompile. Strides are in elements. */
#ifndef FG_PARAMS_H
#define FG_PARAMS_H

/* A custom mod's aux arrays (generator/mod.h): in the mod's aux order, each a device pointer (f32 or i32,
 * row-major) and its extents (rank 1: extent[i][1] is 1); a load outside them marks the score bad.
 * map: where the mask reads aux arrays, its verdict on each block of FG_MAP_BLOCK query rows by FG_MAP_BLOCK keys
 * of each sequence (0 hidden, 1 kept, 2 mixed: mod_interval.h's FG_IV_*), written per call by
 * fg_mask_map_kernel (mod_classify.cuh) into the call's workspace: byte ((b * map_heads + h) * map_rows + row
 * block) * map_cols + key block, h the query head or 0 when map_heads is 1 (a mask that does not read h). Null
 * when the call has none: the kernels then classify blocks by intervals alone.
 * span_rows, span_cols: with the map, the span each row block sees and each key block is seen from, a pair of ints
 * each: for row block i = (b * map_heads + h) * map_rows + r, span_rows[2 i] is the first key block not hidden from
 * it and span_rows[2 i + 1] is INT_MAX - 1 - the last (both INT_MAX when every one is hidden: the pair starts so
 * and narrows by atomicMin alone); span_cols likewise for key block (b * map_heads + h) * map_cols + c and the row
 * blocks it is not hidden from. The kernels trim a tile's blocks to them at once. */
#define FG_MOD_MAX_AUX 8
#define FG_MAP_BLOCK 64
typedef struct fg_mod_aux {
    const void *ptr[FG_MOD_MAX_AUX];
    float *grad[FG_MOD_MAX_AUX]; /* the backward's: a trainable array's gradient (f32, its shape), or null for none */
    int extent[FG_MOD_MAX_AUX][2];
    const unsigned char *map;
    const int *span_rows, *span_cols;
    int map_heads, map_rows, map_cols;
} fg_mod_aux;

/* The launch of fg_mask_map_kernel: the call's sequences as the attention kernel sees them (cu_seqlens_q/k null for
 * dense rows of seqlen_q / seqlen_k; seqused_k null or the keys each sequence uses), and the map to fill
 * (aux.map and its spans, written through a cast: the attention kernels only read them; the spans start at
 * INT_MAX). The grid: (key blocks / 4 rounded up, row blocks, batch * map_heads), 128 threads. */
typedef struct fg_mask_map_params {
    fg_mod_aux aux;
    const int *cu_seqlens_q;
    const int *cu_seqlens_k;
    const int *seqused_k;
    int seqlen_q, seqlen_k; /* dense lengths (the capacity for keys) */
    int total_q, total_k;   /* packed rows, bounding cu_seqlens' entries */
} fg_mask_map_params;

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
    int causal_group;           /* causal only: query blocks are ordered longest first across groups of
                                   this many (head, batch) pairs (>= 1; 1 orders within each head) */
    /* FP8 variants only (ignored otherwise): descale factors, fp32 on the device, one per tensor or one
     * per (batch, kv head): element (b, h) at ptr[b * stride[0] + h * stride[1]] (strides 0 for one value
     * per tensor). A null pointer means 1. For FP8, V is given key-major: v_stride[1] is 1 and the head
     * dim's stride is v_dstride (a multiple of 16 bytes), i.e. V^T rows of seqlen_k keys. */
    const float *q_descale;
    const float *k_descale;
    const float *v_descale;
    long long q_descale_stride[2];
    long long k_descale_stride[2];
    long long v_descale_stride[2];
    long long v_dstride;        /* FP8: elements between consecutive head-dim rows of V (V^T layout) */
    /* sm_90a family: two ints (the next tile to hand out past the first gridDim.x, and the CTAs done taking
     * tiles), zero before the launch and put back to zero by its last CTA (so one per stream: the host's
     * tile_counter_for); 0: tiles in a stride of gridDim.x */
    int *tile_counter;
    /* sm_90a variants with varlen=1 (forward_wgmma.cuh FG_VARLEN; ignored otherwise): sequence b's queries
     * are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of a packed Q and O ([total_q, hq, d], batch
     * stride 0; the LSE [hq, total_q]), or with cu_seqlens_q 0 the batch's seqlen_q rows; its keys likewise
     * with cu_seqlens_k (K and V [total_k, hkv, d]), the first seqused_k[b] of them when seqused_k is set.
     * seqlen_q is then the longest sequence's queries (the grid's bound) and seqlen_k the keys a sequence
     * may hold (the dense capacity, or total_k). Offsets read from device memory are clamped to total_q
     * and total_k, so a bad entry moves the rows read, never outside the tensors. */
    const int *cu_seqlens_q;
    const int *cu_seqlens_k;
    const int *seqused_k;
    int total_q, total_k;
    /* The model variants (varlen=1 variants with the spec's window, sinks, softcap, alibi; common/score_mods.cuh),
     * as fg_serve_params' fields of the same names. */
    int window_left, window_right;
    const float *sinks;
    float softcap;
    const float *alibi_slopes;
    int causal_top_left;
    fg_mod_aux mod_aux;         /* mod=ID variants: the custom mod's aux arrays (generator/mod.h) */
} fg_fwd_params;

/* The run-time parameters of the backward kernels (backward_mma.cuh). Q, K, V, O, dO and the gradients use
 * the forward's layouts and strides (in elements); the workspace regions are laid out by the host
 * (runtime/dispatch_bwd.c) with rows padded to a multiple of 64. */
typedef struct fg_bwd_params {
    const void *q, *k, *v, *o, *dout; /* [b, sq, hq, d], [b, sk, hkv, d] x 2, [b, sq, hq, d] x 2 */
    const float *lse;           /* [b, hq, sq], natural log, from the forward */
    void *dq, *dk, *dv;         /* outputs, the layouts of q, k, v */
    float *dq_accum;            /* workspace: [b, hq, sq_pad, d] fp32 (sq_pad: fg_bwd_rows_padded) */
    float *lse2;                /* workspace: [b, hq, sq_pad], lse * log2(e) (+inf for padding rows) */
    float *dsum;                /* workspace: [b, hq, sq_pad], rowsum(dO * O) */
    float *dkv_accum;           /* workspace for GQA (hq != hkv): [2][b, hq, sk, d] fp32 (dK, dV per query
                                   head), else 0 */
    int *dq_sem;                /* workspace for the deterministic mode: [b, hq, sq_pad / block_m], else 0 */
    long long q_stride[3], k_stride[3], v_stride[3], o_stride[3], do_stride[3];
    long long dq_stride[3], dk_stride[3], dv_stride[3], lse_stride[3];
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    float scale_log2;           /* softmax_scale * log2(e) */
    float softmax_scale;
    int causal_group_log2;      /* causal, L > 0: the main kernel's grid is (key blocks * 2^L, heads / 2^L,
                                   batch), 2^L heads' key blocks interleaved (fg_bwd_cta_tile); else (key
                                   blocks, heads, batch) */
    int dq_rotate;              /* deterministic, not causal: key block j streams the query blocks from
                                   j mod their count on, wrapping (fg_bwd_turn_rank); the host sets it only
                                   where every key block of a head can be resident at once */
    /* varlen=1 variants (backward_common.cuh FG_VARLEN; ignored otherwise): sequence b's queries are rows
     * cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of packed Q, O, dO, dQ ([total_q, hq, d], batch stride 0;
     * the LSE [hq, total_q]), its keys likewise of K, V, dK, dV with cu_seqlens_k; offsets are clamped to
     * total_q and total_k. seqlen_q and seqlen_k are then the longest sequence's (the grids' bounds), and
     * the workspace is laid out per sequence (fg_bwd_seq_params). Each CTA works on a copy of these
     * parameters for its sequence alone, a batch of one whose first rows are q_row0 and k_row0 of the packed
     * tensors (the rows its TMA loads start from); the host leaves those two 0. */
    const int *cu_seqlens_q, *cu_seqlens_k;
    int total_q, total_k;
    int q_row0, k_row0;
    /* The model variants (varlen=1 variants with the spec's window, sinks, softcap, alibi; score_mods.cuh), as
     * the forward's fields of the same names; dsink: sinks=1, fp32 [heads_q], the sinks' gradient, added into
     * by the post kernel (the host zeroes it first, on the stream). */
    int window_left, window_right, causal_top_left;
    float softcap;
    const float *alibi_slopes;
    const float *sinks;
    float *dsink;
    fg_mod_aux mod_aux;         /* mod=ID variants: the custom mod's aux arrays (generator/mod.h) */
} fg_bwd_params;

/* The backward of variable-length sequences places sequence b's workspace rows (per query head) at
 * W(b) = (q_start + FG_BWD_SEQ_PAD x b) rounded down to a multiple of 128, and the host sizes the workspace
 * for (total_q + FG_BWD_SEQ_PAD x batch) rows rounded up to 128: the device and host sides of one layout. */
#define FG_BWD_SEQ_PAD 384

/* The run-time parameters of the serving forward (forward_serving.cuh): variable-length batches, paged
 * KV caches, decode with the query heads of one KV head packed as the rows of a tile, and keys split over
 * CTAs. Sequence b's queries are rows q_start(b) .. of Q (q_start = cu_seqlens_q[b], or 0 with a batch
 * stride), its keys rows k_start(b) .. of K and V, or the pages block_table[b][*]. Every length read from
 * device memory is clamped to what the host described (total_q, total_k, the table's capacity), so a bad
 * entry changes which rows are read, never whether they lie inside the tensors. */
typedef struct fg_serve_params {
    const void *q, *k, *v;      /* Q [.., hq, d]; K, V [.., hkv, d] rows (tokens or page slots) */
    void *o;                    /* like Q */
    float *lse;                 /* natural-log LSE, or 0 */
    long long q_stride[3];      /* batch (0 for packed tokens), token, head */
    long long k_stride[3];      /* batch (or page), token (or slot in a page), head */
    long long v_stride[3];      /* the same for V */
    long long o_stride[3];      /* like q_stride */
    long long lse_stride[3];    /* batch (0 for packed tokens), head, token */
    const int *cu_seqlens_q;    /* [batch + 1] or 0: Q is [batch, seqlen_q, hq, d] */
    const int *cu_seqlens_k;    /* [batch + 1] or 0 */
    const int *seqused_k;       /* [batch] keys in use per sequence, or 0 */
    const int *block_table;     /* [batch, max_pages] page indices, or 0: K and V are not paged */
    long long block_table_stride; /* elements between sequences' rows of the table */
    int max_pages;              /* pages a sequence may use (the table's columns) */
    int page_size;              /* slots a page */
    int num_pages;              /* pages in K and V: an index outside [0, num_pages) reads nothing */
    int batch, heads_q, heads_kv, group; /* group = heads_q / heads_kv, the rows one token packs */
    int seqlen_q;               /* dense Q: its length; packed tokens: the longest sequence (the grid's bound) */
    int seqlen_k;               /* dense K/V: their length (each sequence's capacity) */
    int total_q, total_k;       /* packed tokens: the rows of Q and of K/V (bounds for cu_seqlens) */
    int head_dim;               /* Q's and K's */
    int head_dim_v;             /* V's and O's (head_dim unless the variant names head_dim_v) */
    float scale_log2;           /* softmax_scale * log2(e) */
    float softmax_scale;
    int num_splits;             /* CTAs over the keys of one tile of rows (grid x = row blocks * num_splits) */
    int split_blocks;           /* > 0: split s takes key blocks [s * split_blocks, (s + 1) * split_blocks), bounds
                                   that depend on the sequence alone; 0: each tile's blocks in num_splits even parts */
    float *o_part;              /* num_splits > 1: fp32 [num_splits, tokens, hq, head_dim_v], normalized per split */
    float *lse_part;            /* num_splits > 1: fp32 [num_splits, tokens, hq] */
    long long part_tokens;      /* tokens of the partials (total_q, or batch * seqlen_q) */
    int window_left, window_right; /* window=1 variants: the keys a query sees around its diagonal (-1: no bound) */
    const float *sinks;         /* sinks=1 variants: per query head a logit joining the softmax's denominator
                                   (split 0's state holds it, so that the merge counts it once) */
    float softcap;              /* softcap=1 variants: the cap (> 0), logits become cap * tanh(logit / cap) */
    const float *alibi_slopes;  /* alibi=1 variants: per query head a slope, logits biased by -slope * |d - j| */
    fg_mod_aux mod_aux;         /* mod=ID variants: the custom mod's aux arrays (generator/mod.h) */
    int causal_top_left;        /* window=1 causal variants: query i sees keys j <= i (top-left aligned), not j <= d */
    /* kv=e4m3|e5m2 variants (FP8 K and V; ignored otherwise): descale factors, fp32 on the device, or 0 for 1: the factor
     * of (sequence b, KV head h) at ptr[b * stride[0] + h * stride[1]] (strides 0: one for the tensor). K's
     * multiplies the scores (the CTA folds it into its softmax scale), V's the CTA's O. */
    const float *k_descale, *v_descale;
    long long k_descale_stride[2], v_descale_stride[2];
} fg_serve_params;

/* The merge of attention states (merge.cuh): for each (token, head), O = sum_s w_s O_s / sum_s w_s and
 * LSE = M + ln(sum_s w_s) with w_s = exp(LSE_s - M), M = max_s LSE_s; states with LSE = -inf take no part.
 * Token t of sequence b is row in_row = (cu ? cu[b] : b * tokens) + t of the states and row (cu ? cu[b] +
 * t : t) of batch b of the output. Element types are fg_dtype values: fp32, fp16 or bf16. */
typedef struct fg_merge_params {
    const void *o_in;           /* [states, rows, heads, dv] */
    const float *lse_in;        /* [states, rows, heads] */
    void *o_out;                /* [batch, tokens, heads, dv] (batch stride 0 with cu) */
    float *lse_out;             /* [batch, heads, tokens], or 0 */
    long long o_in_stride[3];   /* state, row, head */
    long long lse_in_stride[3]; /* state, row, head */
    long long o_out_stride[3];  /* batch, token, head */
    long long lse_out_stride[3];/* batch, head, token */
    const int *cu_seqlens;      /* [batch + 1] token offsets, or 0 */
    int total;                  /* with cu: the rows cu indexes (its entries are clamped to it) */
    int states, tokens, heads, head_dim, batch;
    int in_dtype, out_dtype;    /* fg_dtype of o_in and o_out */
} fg_merge_params;

/* The TMA tensor maps of the sm_90a (wgmma) family: CUtensorMap objects (128 bytes, 64-byte aligned)
 * made on the host by cuTensorMapEncodeTiled, passed as a second __grid_constant__ argument. Each maps
 * its tensor as 4-d (head_dim, seqlen, heads, batch) with the box of one column chunk of a tile. */
#ifdef __cplusplus
#define FG_ALIGN64 alignas(64)
#else
#define FG_ALIGN64 _Alignas(64)
#endif
typedef struct fg_tma_params {
    FG_ALIGN64 unsigned long long q[16]; /* box (chunk, 64 rows; the backward's 80-query blocks: 80) */
    FG_ALIGN64 unsigned long long k[16]; /* box (chunk, block_n rows) */
    FG_ALIGN64 unsigned long long v[16]; /* box (chunk, block_n rows) */
    FG_ALIGN64 unsigned long long o[16]; /* box (chunk, 64 or 80 rows, as q), written by TMA stores */
} fg_tma_params;

#endif
