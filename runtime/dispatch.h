/* dispatch.h: what the files of a call's path share. Not a public header (runtime.h holds the context's
 * inside and the rt_ entry points that tests and tools use).
 *   call_args.c  every rule on the caller's tensors, each failure a sentence naming the argument;
 *   select.c     problem -> variant (the device's arch and family, the tuning database, the tile policy);
 *   kernels.c    variant -> loaded kernel: memory, bundles, disk cache, NVRTC (FG_ERR_NOT_FOUND in strict mode);
 *   tiers.c      the JIT's quick first compile and the full one in the background (tiers.h);
 *   tma.c        the tensor maps of a launch that loads by TMA;
 *   launch.c     kernel launches on the caller's stream, the params struct by value;
 *   forward.c    the forward's parameters, grid and schedule; fg_attention_fwd, fg_prepare;
 *   backward.c   the backward's workspace, parameters and three launches; fg_attention_bwd;
 *   backward_varlen.c  the backward of packed sequences; fg_attention_bwd_varlen;
 *   explain.c    fg_explain and fg_explain_bwd;
 *   serving_args.c  the serving call's rules, and the check of its device-resident lengths;
 *   serving.c    the serving forward: tiles, split count, workspace, launches; fg_attention_fwd_varlen;
 *   serving_prefill.c  its prefill on the sm_90a forward (varlen=1 variants) where that family applies;
 *   merge.c      the merge of attention states: fg_merge_states and split-KV's combine.
 * Nothing on this path allocates device memory or synchronizes. */
#ifndef FG_DISPATCH_H
#define FG_DISPATCH_H

#include "runtime/runtime.h"
#include "templates/common/fg_params.h"

/* ---- select.c: variant selection */

/* What the choice of a variant reads of a device: its arch and families, shared memory, tile policy. A
 * context's (select_target_of), or an arch's defaults with no device (select_target_for_arch: `flashgen
 * explain --arch`). */
typedef struct select_target {
    int arch;                     /* compute capability x 10 */
    int wgmma, wgmma_fp8, wgmma_bwd; /* the sm_90a families of the forward, FP8 forward, backward (fg_context's) */
    int bwd_tma;                  /* the mma.sync backward's tma=1 variants may be taken */
    int sm_count;                 /* multiprocessors (0: unknown) */
    size_t smem_optin;            /* max dynamic shared memory per block */
    const char *device_name;      /* NULL: no device (errors name the arch) */
    const fg_tile_policy *policy; /* the default tiles */
} select_target;
/* The target of ctx's device (pointers into ctx). */
void select_target_of(const fg_context *ctx, select_target *t);
/* The target fg_context_create would make of a device of `arch` with no FLASHGEN_ knobs set and a driver
 * that encodes tensor maps: on arch 90 with accel set (sm_90a) the sm_90a families; accel 0 (sm_90) keeps
 * them off, as FLASHGEN_WGMMA=0 does; the mma.sync backward's TMA loads on 90 only (newer archs need
 * FLASHGEN_BWD_TMA=1); the arch's shared-memory limit; no SM count. policy: the tiles (borrowed). */
void select_target_for_arch(int arch, int accel, const fg_tile_policy *policy, select_target *t);
/* select_fwd_spec's choice on target t without a context: the same family, tile policy and rules, no tuning
 * database, no memory cache. `why` (may be NULL) receives the reason for the tiles. */
fg_status select_fwd_spec_for(const select_target *t, const fg_fwd_args *a, fg_spec *s, char *why, size_t nwhy,
                              fg_error *err);
/* select_bwd_spec's choice on target t without a context (no tuning database, no strict mode). */
fg_status select_bwd_spec_for(const select_target *t, const fg_bwd_args *a, fg_spec *s, fg_error *err);

/* The problem class of a call of `kind` (its q and k, its mask), as the tuning database keys it (sizes
 * bucketed). */
fg_tune_class select_problem_class(fg_kind kind, const fg_tensor *q, const fg_tensor *k, int causal);
/* The dtype of O a forward call asks for: o's for FP8 inputs (fp16 or bf16), else q's (they match). */
fg_dtype select_out_dtype(const fg_fwd_args *a);
/* Whether a forward call runs on the sm_90a (wgmma, TMA) family on ctx: 1 or 0 (its rule in select.c). */
int select_call_wgmma(const fg_context *ctx, const fg_fwd_args *a);
/* Whether TMA can read the backward's streamed tensors (Q, K, V, dO): the sm_90a kernel and the mma.sync
 * kernel's tma=1 variants need it. */
int select_bwd_tma_ready(const fg_bwd_args *a);
/* FG_OK when this device can run variant s: the spec's rules (spec_validate) and the device's shared-memory
 * limit; else the first broken rule's status and sentence in err. A variant already loaded on ctx passed
 * this check before its load, so it is answered from the memory cache without validating again. Takes
 * ctx->lock: the caller must not hold it. */
fg_status select_check_runnable(fg_context *ctx, const fg_spec *s, fg_error *err);
/* The forward variant for a checked call a on ctx, into *s (checked runnable). `why` (may be NULL) receives
 * the reason for the tiles. Errors go to err only. */
fg_status select_fwd_spec(fg_context *ctx, const fg_fwd_args *a, fg_spec *s, char *why, size_t nwhy, fg_error *err);
/* The backward variant for a checked call a on ctx, into *s (checked runnable); *tuned (may be NULL) says
 * whether its tiles came from the tuning database. Errors go to err only. */
fg_status select_bwd_spec(fg_context *ctx, const fg_bwd_args *a, fg_spec *s, int *tuned, fg_error *err);

/* ---- kernels.c: kernel lookup */

/* Where a variant's code comes from (fg_explain says it in words, in this order). */
typedef enum { KERNELS_FROM_MEMORY, KERNELS_FROM_DISK, KERNELS_FROM_BUNDLE, KERNELS_FROM_JIT } kernels_origin;

/* What kernels_get is asked for: the kernel for a call (a JIT compile may take the quick tier: tiers.h); only
 * where it would come from (nothing compiled or loaded); the kernel ahead of time (fg_prepare: a JIT compile is
 * the full one, at once, its caller having asked to pay for it up front). */
typedef enum { KERNELS_CALL, KERNELS_DRY, KERNELS_AHEAD } kernels_mode;

/* Finds or builds the kernel of variant s, which has passed select_check_runnable: by its canonical name in
 * the memory cache, then in the loaded bundles (newest first), and only then emits its source to key the
 * disk cache, and compiles it with NVRTC (strict mode: FG_ERR_NOT_FOUND instead). *from says which served.
 * KERNELS_DRY: only say where it would come from (no compile, no load; out may be NULL, else a memory hit's
 * entry). *out points into the memory cache, which may grow (and move) once the lock is released, and whose
 * entry's module and functions a tier-up replaces (under the lock). Caller holds ctx->lock. */
fg_status kernels_get(fg_context *ctx, const fg_spec *s, kernels_mode mode, kernels_origin *from, fg_kernel **out,
                      fg_error *err);
/* The memory cache's entry of the variant named `name`, or NULL. Caller holds ctx->lock. */
fg_kernel *kernels_find(fg_context *ctx, const char *name);
/* Loads cubin (of variant s; PTX under FLASHGEN_EMULATE_ARCH) as a module into k->module, with its functions
 * (fn, and fn_pre, fn_post, fn_map where s has them) and fn's shared-memory limit set; *ctas_per_sm says how
 * many CTAs fit an SM (0: unknown). On failure nothing stays loaded and err names the driver call. Reads only
 * what a context never changes, so it needs no lock. */
fg_status kernels_load_module(fg_context *ctx, const fg_spec *s, const uint8_t *cubin, fg_kernel *k, int *ctas_per_sm,
                              fg_error *err);
/* Loads cubin as variant s (named name) into the memory cache, *out its entry; source says where it came from
 * ("JIT", "disk cache", ...: a static string, kept). Logged at FG_LOG_INFO. Caller holds ctx->lock. */
fg_status kernels_load(fg_context *ctx, const fg_spec *s, const char *name, const uint8_t *cubin, const char *source,
                       fg_kernel **out, fg_error *err);
/* FLASHGEN_DUMP: writes the source, PTX and log of a JIT compile r of variant s (emitted source src of len bytes,
 * compiled with cflags) into the dump directory, named after the hex of the key it is stored under
 * (compile_result_key). The source is the flattened one (emit_flatten: the prelude with the templates it includes
 * expanded), so that the .cu compiles alone, as NVRTC compiled the prelude with its headers. Failures are logged
 * as warnings. Needs no lock. */
struct fg_compile_result;
void kernels_dump_compile(fg_context *ctx, const fg_spec *s, int cflags, const char *src, size_t len,
                          const struct fg_compile_result *r);
/* Stores the successful compile r of variant s (named name; src, len, cflags as above) in the disk cache, if the
 * context has one, under compile_result_key's key; a failure is logged as a warning. Needs no lock. */
void kernels_store(fg_context *ctx, const fg_spec *s, int cflags, const char *src, size_t len, const char *name,
                   const struct fg_compile_result *r);
/* The loaded kernel of variant s (its main entry point) for a launch: checked runnable on ctx
 * (select_check_runnable), then found or built as kernels_get does. Takes ctx->lock. */
fg_status kernels_function(fg_context *ctx, const fg_spec *s, CUfunction *fn, fg_error *err);
/* The same, with the module's fg_mask_map_kernel in *fn_map (NULL where the variant has none: spec_mask_map). */
fg_status kernels_functions(fg_context *ctx, const fg_spec *s, CUfunction *fn, CUfunction *fn_map, fg_error *err);
/* Where variant s's code would come from, without compiling or loading anything: KERNELS_FROM_MEMORY costs
 * a name lookup; with deep set, the bundles and the disk cache are looked up too (the disk cache after
 * emitting the source that keys it), else anything not loaded is KERNELS_FROM_JIT. Takes ctx->lock. */
kernels_origin kernels_origin_of(fg_context *ctx, const fg_spec *s, int deep);
/* Whether a kernel of exactly variant s (every field equal) is loaded on ctx. Caller holds ctx->lock. */
int kernels_loaded_spec(const fg_context *ctx, const fg_spec *s);

/* ---- tma.c: TMA descriptors */

/* The tensor maps of a launch that loads by TMA (fg_tma_params; the second kernel argument): Q and o (the
 * forward's O, the backward's dO; NULL: none, the kernel writes O from registers) in boxes of q_rows rows
 * (64; the backward's 80-query blocks take theirs whole), K and V in boxes of block_n keys, rows of rb
 * bytes (vt > 0: FP8's V key-major, boxes of vt keys by head_dim). A tensor with no rows gets no map: the
 * kernel loads none of it. Errors (the driver's refusal) go to err. */
fg_status tma_encode_maps(fg_context *ctx, fg_tma_params *tm, const fg_tensor *q, const fg_tensor *o,
                          const fg_tensor *k, const fg_tensor *v, int q_rows, int block_n, int rb, int vt,
                          fg_error *err);

/* ---- forward.c: the sm_90a forward's variable-length launch */

/* A varlen=1 launch (serving_prefill.c): the tensors TMA maps ([1, total, heads, d] views of packed tensors,
 * or the dense ones), the kernel's strides (batch stride 0 for packed tensors; lse_stride batch, head, token)
 * and the sequences' device offsets (fg_fwd_params' varlen fields). */
typedef struct fwd_varlen {
    fg_tensor q_map, k_map, v_map;
    long long q_stride[3], k_stride[3], v_stride[3], o_stride[3], lse_stride[3];
    const int *cu_q, *cu_k, *used_k;
    int total_q, total_k;
    int window_left, window_right;  /* the model variants (fg_fwd_params' fields; -1: no bound) */
    int causal_top_left;
    const float *sinks, *alibi_slopes;
    float softcap;
    fg_mod_aux mod_aux;             /* a custom mod's arrays */
} fwd_varlen;
/* Launches variant spec (varlen=1) on stream: a describes the grid as a dense call of batch sequences of the
 * longest length (q [batch, max_seqlen_q, hq, d], k [batch, keys, hkv, d]), with the data pointers. */
fg_status rt_fwd_launch_varlen(fg_context *ctx, const fg_spec *spec, const fg_fwd_args *a, const fwd_varlen *vl,
                               void *stream, fg_error *err);

/* ---- mask_map.c: a custom mask's block map (templates/mod_classify.cuh) */

/* The workspace bytes of the block map of mod m (NULL, or a mask that reads no aux array: 0) for batch sequences
 * of up to rows queries and keys keys with heads query heads, a multiple of 256; SIZE_MAX when they do not fit in
 * size_t (rt_check_mod refuses such a call). */
size_t rt_mask_map_bytes(const struct fg_mod *m, int batch, int heads, long long rows, long long keys);
/* Fills mod m's map at mem (rt_mask_map_bytes of the same shapes) on stream by fn_map (the module's, of a variant
 * with spec_mask_map: kernels_functions) and points aux at it (map, span_rows, span_cols, map_heads, map_rows,
 * map_cols); the sequences as the attention kernel sees them (cu_q and cu_k
 * NULL for dense rows; used_k NULL or the keys each uses). */
fg_status rt_mask_map_fill(fg_context *ctx, const struct fg_mod *m, CUfunction fn_map, void *mem, int batch, int heads,
                           long long rows, long long keys, const int *cu_q, const int *cu_k, const int *used_k,
                           int total_q, int total_k, fg_mod_aux *aux, void *stream, fg_error *err);
/* Writes at mem the map that settles nothing (every block mixed, every span whole: the kernels trim and skip
 * nothing by it), on stream: what a call that keeps no map leaves in a mask_map it was given to fill. */
fg_status rt_mask_map_settle_nothing(fg_context *ctx, const struct fg_mod *m, void *mem, int batch, int heads,
                                     long long rows, long long keys, void *stream, fg_error *err);
/* Points aux at a map an earlier call filled at mem (the same shapes), launching nothing (mask_map_ready). */
void rt_mask_map_bind(const struct fg_mod *m, void *mem, int batch, int heads, long long rows, long long keys,
                      fg_mod_aux *aux);
/* The rules of a call's own map buffer (fg_varlen_args.mask_map; need its rt_mask_map_bytes): set only with a mask
 * that reads aux arrays, 256-byte aligned, at least need bytes, mask_map_ready 0 or 1 and only with a buffer.
 * FG_OK or FG_ERR_INVALID_ARGUMENT with a sentence. */
fg_status rt_check_mask_map(const void *map, size_t size, int ready, size_t need, fg_error *err);

/* ---- launch.c: launches */

/* One kernel launch: the function, its grid and block, dynamic shared memory, its name for errors, and
 * whether it may start before the kernel launched before it on the stream has finished (programmatic
 * dependent launch; the kernel then waits for that one with griddepcontrol.wait before it reads what that
 * one writes: backward_mma.cuh fg_pdl_wait). */
typedef struct launch_item {
    CUfunction fn;                /* the kernel */
    unsigned grid[3], threads, smem; /* grid, threads a block, dynamic shared memory bytes */
    const char *kernel;           /* its name, for errors */
    int early;                    /* 1: programmatic dependent launch (only where ctx->pdl holds) */
} launch_item;

/* Launches items in order on stream, each with the same parameters, in the device's primary context;
 * items with an empty grid are skipped. Errors name the call and kernel that failed. */
fg_status launch_items(fg_context *ctx, const launch_item *items, int n, void *stream, void **params, fg_error *err);

/* ---- backward.c: the backward's workspace */

/* Workspace regions of a backward call (byte offsets, each 256-byte aligned) and the total. */
typedef struct backward_layout {
    size_t dq_accum; /* fg_bwd_params.dq_accum: fp32 dQ, [b, hq, rows padded, d padded] */
    size_t lse2;     /* fg_bwd_params.lse2: lse * log2(e), [b, hq, rows padded] */
    size_t dsum;     /* fg_bwd_params.dsum: rowsum(dO * O), [b, hq, rows padded] */
    size_t sem;      /* fg_bwd_params.dq_sem: the deterministic mode's dQ order (empty otherwise) */
    size_t dkv;      /* fg_bwd_params.dkv_accum: GQA's fp32 dK and dV per query head, rows of d and of dv (empty
                        otherwise) */
    size_t map;      /* fg_mod_aux.map: a custom mask's block map (rt_mask_map_bytes; varlen calls, else empty) */
    size_t map_bytes;
    size_t total;    /* bytes in all */
} backward_layout;

/* The workspace layout of a checked backward call on ctx: a function of the call and the device only, so
 * fg_attention_bwd_workspace_size holds for every variant of the call. FG_ERR_INVALID_ARGUMENT when its size
 * does not fit size_t (computed with checked arithmetic). */
fg_status backward_workspace_layout(const fg_context *ctx, const fg_bwd_args *a, backward_layout *L, fg_error *err);
/* Lays out the regions for heads_rows x rows accumulator rows (the dQ accumulator, of the padded head dim the
 * kernels compute on, spec_bwd_dim_padded(d, max(d, dv)); lse2, D; the deterministic mode's semaphores, one per 16
 * rows) and kv_rows rows of GQA's fp32 dK (head_dim d) and as many of dV (V's head dim dv): 0 when the size
 * overflows size_t. */
int backward_regions(size_t heads_rows, size_t rows, size_t d, size_t dv, int deterministic, size_t kv_rows,
                     backward_layout *L);
/* The backward of variable-length batches (backward_varlen.c): the sequences' offsets and the packed tensors as
 * TMA maps them ([1, total, heads, d] views). */
typedef struct bwd_varlen {
    fg_tensor q_map, k_map, v_map, do_map;
    const int *cu_q, *cu_k;
    int total_q, total_k;
    int window_left, window_right, causal_top_left; /* the model variants (fg_bwd_params' fields) */
    float softcap;
    const float *alibi_slopes, *sinks;
    float *dsink;
    fg_mod_aux mod_aux; /* a custom mod's arrays */
    const struct fg_mod *mod; /* and the mod (its mask's block map: mask_map.c) */
    void *mask_map;     /* the call's own block map (fg_varlen_bwd_args.mask_map), else NULL: the workspace's */
    int mask_map_ready; /* 1: an earlier call filled it */
} bwd_varlen;
/* Launches variant s (varlen=1) of a checked call: a holds the grids' shapes (batch, the longest lengths) and
 * the kernel's strides (batch strides 0), L the workspace (backward_varlen.c's layout). */
fg_status rt_bwd_launch_varlen(fg_context *ctx, const fg_spec *s, const fg_bwd_args *a, const backward_layout *L,
                               const bwd_varlen *vl, void *stream, fg_error *err);
/* The backward main kernel's key blocks for sk keys (its grid x before causal grouping). */
long long backward_key_blocks(const fg_spec *s, long long sk);

/* ---- serving_args.c, serving.c, merge.c: the serving path */

/* The model variants of a call as the kernels take them: the spec's keys (window also for a top-left causal
 * mask, which runs on the window variants), and the window's sides (-1 unbounded: also a side past every key of
 * every row, and both without a window). */
typedef struct call_variants {
    int window, sinks, softcap, alibi; /* the spec's keys */
    int window_left, window_right, causal_top_left;
} call_variants;
/* The model variants' arguments, fields of the same names in fg_varlen_args and fg_varlen_bwd_args
 * (VARIANT_ARGS_OF takes them from either). */
typedef struct variant_args {
    int causal, window, window_left, window_right, causal_top_left;
    float softcap;
    const float *sinks, *alibi_slopes;
} variant_args;
#define VARIANT_ARGS_OF(a)                                                                                    \
    ((variant_args){(a)->causal, (a)->window, (a)->window_left, (a)->window_right, (a)->causal_top_left,       \
                    (a)->softcap, (a)->sinks, (a)->alibi_slopes})
/* The variants' rules (each failure a sentence naming the argument), and what the kernels take of them into *v.
 * max_q and max_k bound a sequence's queries and keys (a side reaching past them is unbounded); need_data: the
 * per-head arrays' alignment is checked too. */
fg_status serving_check_variants(const variant_args *a, int max_q, int max_k, int need_data, call_variants *v,
                                 fg_error *err);
/* Whether v holds any model variant, and its keys into spec s. */
int call_variants_any(const call_variants *v);
void spec_take_variants(fg_spec *s, const call_variants *v);

/* A checked serving call (fg_varlen_args), in the kernel's terms. */
typedef struct serving_call {
    int packed_q, packed_k, paged; /* q is [total_q, hq, d]; k/v [total_k, hkv, d]; k/v are pages */
    int batch, hq, hkv, group, head_dim;
    int head_dim_v;                /* V's and O's (head_dim unless v is narrower or wider) */
    int v_in_k;                    /* v is a prefix view of k (same data and strides, head_dim_v <= head_dim) */
    int kv_fp8;                    /* k and v FP8: FG_DTYPE_E4M3 or FG_DTYPE_E5M2 (an FP8 KV cache); 0: q's dtype */
    int kv_descale[2];             /* k_descale, v_descale: 0 absent, 1 one for the tensor, 2 [batch, heads_kv] */
    int64_t total_q, total_k;      /* packed rows of q and of k/v (0 when not packed) */
    int seqlen_q;                  /* the grid's bound on a sequence's queries (dense: q's length) */
    int seqlen_k;                  /* a sequence's key capacity (dense: k's length; paged: max_pages x
                                      page_size; packed: total_k) */
    int max_k;                     /* max_seqlen_k, or the capacity: what the split count plans for */
    int bound_k;                   /* > 0: no sequence may have more keys (the backward's grid bound); 0: none */
    int page_size, num_pages;      /* paged keys */
    call_variants var;             /* the model variants */
    char mod_id[17];               /* a custom mod's id (fg_varlen_args.mod), "" without one */
    int causal;                    /* the call's mask */
    int64_t part_tokens;           /* query tokens the split partials hold (total_q, or batch x seqlen_q) */
} serving_call;

/* The structure of a packed or dense Q/K/V/O view (ndim, sizes, strides, dtype fp16/bf16, with fp8_ok also e4m3 and
 * e5m2, the last dim contiguous, with need_data a 16-byte aligned pointer and strides), each failure a sentence
 * naming `name`, the dim (from dims) and the rule; form: the layout expected, in words. serving_packed_dims:
 * "tokens", "heads", "head_dim". */
extern const char *const serving_packed_dims[3];
fg_status serving_check_view(const fg_tensor *t, const char *name, int ndim, const char *const *dims, const char *form,
                             int fp8_ok, int need_data, fg_error *err);
/* Copies the caller's arguments into *out after checking struct_size (a struct from a newer header may be
 * longer; one from an older or uninitialized caller is refused with a sentence). */
fg_status serving_args_copy(const fg_varlen_args *a, fg_varlen_args *out, fg_error *err);
/* A call's custom mod (NULL: none) and its aux arrays (FG_MOD_AUX_MAX entries): the arrays against the mod's
 * declarations (need_data: the pointers too), and the kernels' fg_mod_aux of them (serving_args.c). rows and keys
 * bound a sequence's queries and keys: a mod takes fewer than 2^23 of each (its positions are exact in fp32); a
 * mask's block map for batch sequences and heads query heads must fit in size_t (rt_mask_map_bytes). */
fg_status rt_check_mod(const fg_mod *m, const fg_tensor *aux, int need_data, int batch, int heads, long long rows,
                       long long keys, fg_error *err);
/* An aux array's (or its gradient's, what = "mod_aux_grad") layout: row-major contiguous, and with need_data a
 * 4-byte aligned pointer; FG_ERR_INVALID_ARGUMENT naming what[i] (name) and the rule. ndim 1 or 2 (checked first). */
fg_status rt_check_aux_layout(const fg_tensor *t, const char *what, int i, const char *name, int need_data,
                              fg_error *err);
void rt_mod_aux(const fg_mod *m, const fg_tensor *aux, fg_mod_aux *out);
/* Checks a serving call's host-visible arguments (need_data: a launch follows, so pointers must be set and
 * aligned and outputs disjoint from inputs) and describes it in *c. */
fg_status serving_check(const fg_varlen_args *a, int need_data, serving_call *c, fg_error *err);
/* FG_OPTION_CHECK_INPUTS: reads cu_seqlens_q/k, seqused_k and the block table back (synchronizing stream) and
 * judges them with serving_validate_lengths. Refused on a stream being captured. */
fg_status serving_check_device_inputs(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, void *stream,
                                      fg_error *err);
/* The rules of the device-resident inputs, on host copies (each may be NULL when the call has none): offsets
 * from 0 up, never decreasing, the last one the total, no sequence longer than max_seqlen_q (nor, with
 * c->bound_k, than bound_k keys); seqused_k within
 * each sequence's capacity; the table's pages that seqused_k reaches within [0, num_pages). The first broken
 * entry is named. */
fg_status serving_validate_lengths(const serving_call *c, const int32_t *cu_q, const int32_t *cu_k,
                                   const int32_t *used_k, const int32_t *table, int64_t table_stride, int max_seqlen_q,
                                   fg_error *err);

/* The plan of a serving call: its variant, grid, split count and workspace. */
typedef struct serving_plan {
    fg_spec spec;          /* kind=serve */
    int m_blocks;          /* row blocks per (sequence, KV head): ceil(seqlen_q x group / block_m) */
    int num_splits;        /* CTAs over one tile's keys */
    int split_blocks;      /* fixed split size in key blocks (split_size), or 0 */
    const char *split_why; /* the reason for num_splits, in words */
    char tuned_why[192];   /* the tuning database's account, when its choice is taken */
    size_t part_o, part_lse; /* workspace offsets of the partials (when num_splits > 1) */
    size_t workspace;      /* bytes needed (0 without splits) */
} serving_plan;

/* Plans a checked call on ctx (a: its arguments, c: serving_check's description). */
fg_status serving_plan_for(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, serving_plan *plan,
                           fg_error *err);

/* serving_prefill.c: a checked, non-empty call that the sm_90a forward takes (varlen=1 variants: Hopper, keys not
 * paged, no split asked for, the longest sequence at least 64 queries, tensors TMA can read) runs there:
 * serving_prefill_run returns 1 with the launch's status in *st, or 0 when the call is not one of those. */
int serving_prefill_run(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, void *stream, fg_status *st,
                        fg_error *err);
/* 1 with the sm_90a forward's variant for such a call in *spec, 0 when the call is not one of those. */
int serving_prefill_variant(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, fg_spec *spec);
/* The workspace bytes such a call's variant uses: its custom mask's block map (rt_mask_map_bytes), 0 without one. A
 * call without a workspace runs without the map (every block evaluated; fg_explain_varlen says so); one with a
 * smaller workspace is refused, naming workspace_size. */
size_t serving_prefill_workspace(const fg_varlen_args *a, const serving_call *c);
/* fg_explain_varlen's account of such a call into buf (1), or 0 when the call is not one of those. */
int serving_prefill_explain(fg_context *ctx, const fg_varlen_args *a, const serving_call *c, char *buf, size_t n);

/* Launches the merge kernel with parameters p on stream (merge.c): loads the arch's kind=merge variant. */
fg_status merge_launch(fg_context *ctx, const fg_merge_params *p, void *stream, fg_error *err);

#endif
