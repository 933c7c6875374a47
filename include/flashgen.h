/* flashgen.h: the one public header of flashgen, a generator of FlashAttention kernels.
 *
 * flashgen writes CUDA source specialized for one variant (head dim, tiles, causal mask, precision,
 * target GPU), compiles it at run time with NVRTC, caches the compiled code in memory and on disk,
 * and launches it through the CUDA driver API on the caller's stream.
 *
 * Conventions (those of cuBLAS, cuDNN and SQLite):
 *   - every call returns an fg_status; FG_OK is 0;
 *   - on failure fg_last_error(ctx) returns one sentence naming the bad argument and the rule it broke;
 *   - the library never prints unless asked (log level or callback), never exits, never aborts;
 *   - nothing synchronizes the stream; once a variant is loaded (fg_prepare, or a first call) no call
 *     allocates device memory (loading a module does);
 *   - a context may be shared by threads. The first call of a variant compiles or loads it while
 *     holding the context's lock, so other threads' calls wait for it: call fg_prepare up front. A
 *     log_fn must not call back into flashgen on the same context (it may run under that lock), and may
 *     be called from the context's background compile threads;
 *   - with FG_OPTION_JIT_TIERS or FLASHGEN_JIT_TIERS=1 (off by default), a variant in no cache and no bundle is
 *     first compiled quick (NVRTC's --Ofast-compile=max: well under the full compile's time, code that may run
 *     slower) and its optimized build compiled in the background, replacing the quick one when ready
 *     (fg_wait_compiles waits for that). fg_prepare compiles the optimized build at once.
 *
 * Tensors use FlashAttention's layout [batch, seqlen, heads, head_dim] with the last dim contiguous;
 * strides are in elements. GQA/MQA: K and V may have fewer heads than Q, dividing them. FP8 inputs
 * (e4m3, e5m2) take V key-major and descale factors: see fg_fwd_args. The serving call takes FP8 K and V
 * (an FP8 KV cache, V token-major as caches keep it) beside 16-bit Q: see fg_varlen_args.
 */
#ifndef FLASHGEN_H
#define FLASHGEN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* FG_API marks the public functions: the library is compiled with -fvisibility=hidden and
 * include/flashgen.map, so only these are exported from libflashgen.so. */
#if defined(__GNUC__) || defined(__clang__)
#define FG_API __attribute__((visibility("default")))
#else
#define FG_API
#endif

/* 0.2.0: fg_fwd_args gained q/k/v_descale (FP8) at its end, so a program built against 0.1.0's header
 * must be rebuilt (its shorter struct would be read past its end). The version also keys the disk cache,
 * bundles and tuning databases: those of 0.1.0 are recompiled, refused or ignored, never trusted.
 * 0.3.0: arch sm_90a names the wgmma family (TMA, wgmma, warp specialization); the mma.sync family's
 * Hopper target is sm_90. The API is 0.2.0's; caches, bundles and tuning databases of 0.2.0 are not trusted.
 * 0.4.0: the serving calls (fg_attention_fwd_varlen, fg_merge_states, fg_context_set_option) and the backward
 * of packed sequences (fg_attention_bwd_varlen) are added; the structs of 0.3.0 are unchanged, so programs built against 0.3.0's header keep working. */
#define FG_VERSION_MAJOR 0
#define FG_VERSION_MINOR 4
#define FG_VERSION_PATCH 0
#define FG_VERSION_STRING "0.4.0"

typedef enum fg_status {
    FG_OK = 0,
    FG_ERR_INVALID_ARGUMENT = 1, /* a null pointer, bad shape, stride, dtype, alignment or size */
    FG_ERR_UNSUPPORTED = 2,      /* a valid request flashgen has no kernel for (head dim, arch, dtype) */
    FG_ERR_NO_DEVICE = 3,        /* no CUDA device, or the driver could not be loaded */
    FG_ERR_CUDA = 4,             /* a CUDA driver call failed; the message names the call */
    FG_ERR_COMPILE = 5,          /* NVRTC refused the generated source (a flashgen bug: report it) */
    FG_ERR_NOT_FOUND = 6,        /* strict mode: the variant is in no cache and no bundle */
    FG_ERR_IO = 7,               /* a file could not be read or written */
    FG_ERR_FORMAT = 8,           /* a file is not what it claims (bundle, cache entry, config) */
    FG_ERR_CONFIG = 9,           /* a Lua config failed; the message carries file:line */
    FG_ERR_NO_MEMORY = 10,       /* host memory ran out */
    FG_ERR_INTERNAL = 11         /* an invariant broke: a flashgen bug */
} fg_status;

typedef enum fg_dtype {
    FG_DTYPE_F16 = 0,
    FG_DTYPE_BF16 = 1,
    FG_DTYPE_F32 = 2,  /* the LSE output and the FP8 descale factors */
    FG_DTYPE_E4M3 = 3, /* FP8 Q/K/V: 1 sign, 4 exponent (bias 7), 3 mantissa bits, no infinities, max 448 */
    FG_DTYPE_E5M2 = 4, /* FP8 Q/K/V: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like, max 57344 */
    FG_DTYPE_I32 = 5   /* 32-bit ints: a custom mod's i32 aux arrays */
} fg_dtype;

typedef enum fg_log_level {
    FG_LOG_NONE = 0,
    FG_LOG_ERROR = 1,
    FG_LOG_WARN = 2,
    FG_LOG_INFO = 3, /* compiles (variant and seconds), bundle loads, cache decisions */
    FG_LOG_DEBUG = 4
} fg_log_level;

typedef void (*fg_log_fn)(void *user, fg_log_level level, const char *message);

/* A strided view of device memory. Strides are in elements; the last one must be 1 (except FP8 V, whose
 * keys are contiguous instead: see fg_fwd_args). */
typedef struct fg_tensor {
    void *data;          /* device pointer (CUdeviceptr cast to a pointer) */
    fg_dtype dtype;      /* element type */
    int ndim;            /* 4 for Q/K/V/O ([batch, seqlen, heads, head_dim]), 3 for LSE ([batch, heads, seqlen_q]),
                            1 or 2 for FP8 descale factors ([1] or [batch, heads_kv]) */
    int64_t shape[4];    /* sizes, outermost first */
    int64_t stride[4];   /* strides in elements, outermost first */
} fg_tensor;

/* Arguments of one forward call. O = softmax(scale * Q K^T [+ causal mask]) V.
 *
 * FP8 (q, k and v all e4m3, or all e5m2; sm_89 or newer, with the FP8 mma.sync m16n8k32):
 *   - o is fp16 or bf16 (its dtype chooses the variant's output dtype); lse as for 16-bit inputs;
 *   - head_dim is a multiple of 32 from 32 to 256;
 *   - q and k as for 16-bit inputs: last dim contiguous, the pointer and the strides of dims longer than 1
 *     multiples of 16 bytes (16 elements);
 *   - v is given key-major ("V^T layout"): v.stride[1] == 1, v.stride[3] (the head-dim stride) a multiple
 *     of 16 and >= seqlen_k, the pointer and the other strides of dims longer than 1 multiples of 16
 *     bytes. That is a [batch, heads_kv, head_dim, seqlen_k'] buffer (seqlen_k' >= seqlen_k, a multiple
 *     of 16) viewed as [batch, seqlen_k, heads_kv, head_dim]; padding keys are never used;
 *   - the descale factors below: the softmax uses softmax_scale * q_descale * k_descale, and
 *     O = (P V) * v_descale / l; the LSE is the natural-log LSE of the descaled scores
 *     (softmax_scale * q_descale * k_descale * Q K^T). Query head h takes the factors of its KV head,
 *     h / (heads_q / heads_kv). Descales must be positive and finite (a quantizer's amax / max_finite
 *     is): they live in device memory, so the call cannot check them, and the kernel's running row
 *     maximum assumes a positive score scale.
 * In fp16/bf16 calls the descale tensors must have data NULL and V is laid out like K. */
typedef struct fg_fwd_args {
    fg_tensor q;         /* [batch, seqlen_q, heads_q, head_dim], fp16, bf16, e4m3 or e5m2 */
    fg_tensor k;         /* [batch, seqlen_k, heads_kv, head_dim], heads_kv divides heads_q; q's dtype */
    fg_tensor v;         /* [batch, seqlen_k, heads_kv, head_dim], q's dtype; FP8: key-major (see above) */
    fg_tensor o;         /* [batch, seqlen_q, heads_q, head_dim], written by the call; q's dtype, or for
                            FP8 inputs fp16 or bf16 */
    fg_tensor lse;       /* optional ([batch, heads_q, seqlen_q], fp32, natural log); data NULL to skip */
    float softmax_scale; /* 0 means 1/sqrt(head_dim) */
    int causal;          /* 1: query i sees keys j <= i + seqlen_k - seqlen_q (bottom-right aligned) */
    /* FP8 only: fp32 device tensors, either ndim 1 of shape [1] (one factor for the whole tensor) or
     * ndim 2 of shape [batch, heads_kv] (any strides, 4-byte aligned). data NULL means 1.0. The kernel
     * reads them on the device (no host synchronization); outputs must not overlap them. */
    fg_tensor q_descale; /* multiplies Q: the dequantized Q is q * q_descale */
    fg_tensor k_descale; /* multiplies K */
    fg_tensor v_descale; /* multiplies V */
} fg_fwd_args;

/* Arguments of one backward call: the gradients of O = attention(Q, K, V) for a given dO, recomputing the
 * attention from the forward's LSE (no N x N storage). 16-bit only (fp16 or bf16, all tensors one
 * dtype), head_dim a multiple of 8 from 8 to 256, as the forward's (the kernels compute on it rounded up to
 * 16, above 128 to 32, reading zeros past it and writing no column past it; above 128 the tiles need shared
 * memory: up to 192 on every sm_80+ GPU, up to 256 on an A100 and on an H100 and newer; a GPU with 99 KiB a
 * block refuses head_dim above 192 with FG_ERR_UNSUPPORTED), the mma.sync kernels on every arch
 * (sm_80+; on Hopper arch sm_90) and on an H100/H200 a wgmma kernel (arch sm_90a) for head_dim 64 and 128
 * outside the deterministic mode (FLASHGEN_WGMMA_BWD=0 in the environment sends those to mma.sync too).
 *   - q, k, v, o, lse as given to and returned by the forward (lse required), dout like o; v (and so o and
 *     dout) may have a head dim of its own, v.shape[3], a multiple of 8 up to 256 (DeepSeek's 192/128, as the
 *     serving forward fg_attention_fwd_varlen computes it), run by the mma.sync kernels only;
 *   - dq like q, dk like k, dv like v (with GQA, the gradient of a KV head sums over its query heads);
 *   - every 4-d tensor: last dim contiguous, the pointer and the strides of dims longer than 1 multiples
 *     of 16 bytes; the outputs must not overlap the inputs or each other;
 *   - workspace: device memory of at least fg_attention_bwd_workspace_size() bytes, 256-byte aligned,
 *     used by this call only (an fp32 dQ accumulator and per-row terms; with GQA fp32 dK/dV per query
 *     head). The caller owns it; flashgen never allocates on this path.
 * deterministic = 1: the gradients are bitwise identical from run to run (the key blocks add into dQ in
 * a fixed order, one after another); 0: fp32 atomics in whatever order they land (faster). */
typedef struct fg_bwd_args {
    fg_tensor q, k, v, o;  /* the forward's inputs and its output */
    fg_tensor dout;        /* dL/dO, like o */
    fg_tensor lse;         /* [batch, heads_q, seqlen_q] fp32, natural log, from the forward */
    fg_tensor dq, dk, dv;  /* written: like q, k, v */
    float softmax_scale;   /* the forward's (0 means 1/sqrt(head_dim)) */
    int causal;            /* the forward's mask */
    int deterministic;     /* 1: bitwise-reproducible gradients */
    void *workspace;       /* device memory, 256-byte aligned */
    size_t workspace_size; /* its bytes */
} fg_bwd_args;

typedef struct fg_context_options {
    int device;            /* CUDA device ordinal */
    const char *cache_dir; /* NULL: $FLASHGEN_CACHE_DIR, else $XDG_CACHE_HOME/flashgen, else ~/.cache/flashgen */
    int disable_disk_cache;/* 1: keep compiled kernels in memory only */
    int strict;            /* 1: a variant found in no cache and no bundle is FG_ERR_NOT_FOUND, never compiled */
    fg_log_level log_level;/* messages at or above this importance go to log_fn (or stderr when log_fn is NULL) */
    fg_log_fn log_fn;      /* optional log sink */
    void *log_user;        /* passed back to log_fn */
    const char *tuning_db; /* per-GPU tuning database (`flashgen tune`); NULL: the default file in the
                              cache directory for this GPU; "" to use none. A file made for another
                              GPU or version is ignored with a warning, never trusted. */
} fg_context_options;

typedef struct fg_context fg_context;

/* Fills *opt with the defaults: device 0, default cache directory, disk cache on, not strict, warnings logged. */
FG_API void fg_context_options_init(fg_context_options *opt);

/* Creates a context bound to opt->device (opt may be NULL for the defaults). On failure *ctx is NULL and
 * the reason is returned; fg_last_error(NULL) then gives the sentence. The context owns a CUDA primary
 * context retain, the in-memory kernel cache and loaded bundles; destroy it with fg_context_destroy. */
FG_API fg_status fg_context_create(fg_context **ctx, const fg_context_options *opt);
FG_API void fg_context_destroy(fg_context *ctx);

/* Runs the forward pass on `stream` (a CUstream; NULL for the legacy default stream). The first call for a
 * variant may compile it (logged at FG_LOG_INFO with its time; with tiers on, quick, its optimized build
 * following in the background: see fg_wait_compiles); fg_prepare compiles the optimized build ahead. */
FG_API fg_status fg_attention_fwd(fg_context *ctx, const fg_fwd_args *args, void *stream);

/* The workspace bytes fg_attention_bwd needs for args' shapes (data pointers may be NULL). */
FG_API fg_status fg_attention_bwd_workspace_size(fg_context *ctx, const fg_bwd_args *args, size_t *bytes);

/* Runs the backward pass on `stream`: three kernels (per-row terms, the main one over key blocks, dQ
 * conversion and the GQA sums), no synchronization, no allocation. The first call of a variant may
 * compile it like the forward's. */
FG_API fg_status fg_attention_bwd(fg_context *ctx, const fg_bwd_args *args, void *stream);

/* Compiles (or loads from cache or bundle) the variant that fg_attention_fwd would run for args, without
 * launching anything: a compile here is the optimized build, at once (no quick tier), and a variant an earlier
 * call loaded quick is waited for until its optimized build has replaced it. Tensor data pointers may be NULL
 * here. */
FG_API fg_status fg_prepare(fg_context *ctx, const fg_fwd_args *args);

/* Waits until every optimized build the context is compiling in the background (the JIT's tier-ups, queued
 * by first calls of variants in no cache) has replaced its quick build, or failed: a failure was logged as a
 * warning and leaves the quick build running, so the status is FG_OK either way (FG_ERR_INVALID_ARGUMENT only
 * for a NULL ctx). Benchmarks call it after their warm-up, so that they never time a quick build, and programs
 * before they capture a CUDA graph (a graph keeps the kernel it captured). Calls that start while it waits may
 * queue more; it returns once none is pending. */
FG_API fg_status fg_wait_compiles(fg_context *ctx);

/* Writes into buf (at most n bytes, NUL-terminated) which variant would run for args and why: the spec's
 * canonical name, where its code would come from (memory, disk cache, bundle, JIT) and the reason for
 * its tile choice. Tensor data pointers may be NULL here. */
FG_API fg_status fg_explain(fg_context *ctx, const fg_fwd_args *args, char *buf, size_t n);

/* The same for a backward call: which variant fg_attention_bwd would run for args ("variant NAME" on the
 * first line), its kernels and grid, where its tiles come from (the tuning database, the tile policy, or
 * the sm_90a backward's one tile), the workspace it needs and where its code would come from. Tensor
 * data pointers and the workspace may be NULL here. */
FG_API fg_status fg_explain_bwd(fg_context *ctx, const fg_bwd_args *args, char *buf, size_t n);

/* Loads a bundle file written by `flashgen bundle`; its kernels are then used before any JIT compile. */
FG_API fg_status fg_bundle_load(fg_context *ctx, const char *path);

/* Same, from memory (for example the array written by `flashgen bundle --emit-c`). The bytes are copied. */
FG_API fg_status fg_bundle_load_memory(fg_context *ctx, const void *data, size_t size);

/* ---- Serving: packed variable-length batches, paged KV caches, decode (one kernel family, mma.sync) ----
 *
 * One call covers FlashAttention's flash_attn_varlen_func and flash_attn_with_kvcache. Queries:
 *   - packed: q [total_q, heads_q, head_dim] with cu_seqlens_q (batch + 1 int32 offsets, device memory);
 *     sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1; or
 *   - dense: q [batch, seqlen_q, heads_q, head_dim] (cu_seqlens_q NULL), every sequence seqlen_q tokens.
 * Keys and values (k and v alike):
 *   - packed: [total_k, heads_kv, head_dim] with cu_seqlens_k;
 *   - dense (a cache per sequence): [batch, seqlen_k, heads_kv, head_dim];
 *   - paged: [num_pages, page_size, heads_kv, head_dim] with block_table ([batch, max_pages] int32, device
 *     memory, row b's first slots the pages of sequence b in order; any page size from 1, pages in any order)
 *     and seqused_k (required: key j of sequence b is slot j % page_size of page block_table[b][j / page_size]).
 * seqused_k (optional with packed or dense keys, [batch] int32 on the device) shortens each sequence's keys to
 * its first seqused_k[b] (a cache filled below its capacity). o is shaped like q; lse (optional, fp32, natural
 * log) is [heads_q, total_q] for packed queries, [batch, heads_q, seqlen_q] for dense ones. causal is bottom-
 * right aligned per sequence (query i of sq sees keys j <= i + sk - sq). A query row that sees no key gets
 * O = 0 and LSE = -inf. heads_kv divides heads_q (GQA/MQA); fp16 or bf16; head_dim a multiple of 8 up to 256.
 * FP8 KV caches: k and v may both be e4m3 (or both e5m2) with q and o fp16 or bf16, in any of the layouts above
 * (V token-major like K; strides in elements, which are bytes), head_dim and V's a multiple of 32 up to 256. The
 * kernel dequantizes K and V exactly into q's dtype and computes as for 16-bit K and V, with k_descale and
 * v_descale (below): the scores are softmax_scale * k_descale * Q K^T (the LSE is theirs), O = P V * v_descale.
 * K and V must be finite (an FP8 NaN code reads as a finite value).
 * Layout rules as for fg_fwd_args: last dim contiguous, pointers and strides of dims longer than 1 multiples
 * of 16 bytes, outputs overlapping nothing.
 *
 * Device-resident inputs (cu_seqlens_*, seqused_k, block_table) are not read by the host. Every length the
 * kernel reads is clamped to what the host arguments describe (total_q, total_k, the table's capacity
 * max_pages * page_size, max_seqlen_q), and a page index outside [0, num_pages) reads nothing (its keys
 * count as zeros), so a bad entry never makes a kernel touch memory outside the tensors given; but the
 * answer is then wrong. FG_OPTION_CHECK_INPUTS (fg_context_set_option, or FLASHGEN_CHECK_INPUTS=1) checks
 * them first, at the price of a synchronization: the call returns FG_ERR_INVALID_ARGUMENT naming the first bad
 * entry. max_seqlen_q must bound every sequence's queries (rows past it are not computed).
 *
 * Keys may be split over several CTAs per tile of rows (flash-decoding), which needs a workspace for the
 * partial results: fg_attention_fwd_varlen_workspace_size gives its size for the call's shapes (and for any
 * call with the same host arguments), so a caller can size it once for its largest shapes. The split count
 * depends on host arguments only (batch, heads, max_seqlen_q, max_seqlen_k, the device, the tuning
 * database): a call captured in a CUDA graph replays with the same grid whatever the device lengths. With
 * split_size > 0 the splits' boundaries are multiples of split_size keys (rounded up to the kernel's key
 * block) within each sequence, so a sequence's result does not depend on its batchmates. */
#define FG_MOD_AUX_MAX 8 /* aux arrays a custom mod may declare */
struct fg_mod;
typedef struct fg_varlen_args {
    size_t struct_size;        /* sizeof(fg_varlen_args), set by fg_varlen_args_init: fields added later
                                  are read only when a caller's struct has them */
    fg_tensor q;               /* [total_q, heads_q, d] with cu_seqlens_q, or [batch, seqlen_q, heads_q, d] */
    fg_tensor k;               /* [total_k, heads_kv, d], [batch, seqlen_k, heads_kv, d], or paged
                                  [num_pages, page_size, heads_kv, d] */
    fg_tensor v;               /* like k */
    fg_tensor o;               /* like q; written */
    fg_tensor lse;             /* optional (data NULL to skip): [heads_q, total_q] or [batch, heads_q, seqlen_q] */
    const int32_t *cu_seqlens_q; /* device, [batch + 1], or NULL (dense q) */
    const int32_t *cu_seqlens_k; /* device, [batch + 1], or NULL */
    const int32_t *seqused_k;  /* device, [batch], or NULL; required with block_table */
    const int32_t *block_table;/* device, [batch, max_pages], or NULL (keys not paged) */
    int64_t block_table_stride;/* int32 elements between rows of block_table (0: max_pages) */
    int max_pages;             /* columns of block_table */
    int batch;                 /* sequences: required with cu_seqlens_q; else 0 or q.shape[0] */
    int max_seqlen_q;          /* packed q: the longest sequence's queries (an upper bound; 0 only when q has
                                  no rows) */
    int max_seqlen_k;          /* an upper bound of any sequence's keys, for the split count (0: the capacity
                                  the tensors allow) */
    float softmax_scale;       /* 0 means 1/sqrt(head_dim) */
    int causal;                /* 1: bottom-right aligned per sequence */
    int num_splits;            /* 0: chosen (tuning database, else the rule); 1: no split; 2..256: that many */
    int split_size;            /* > 0: keys a split takes, fixed per sequence (batch-invariant); 0: off */
    void *workspace;           /* device memory, 256-byte aligned, for split partials; NULL with
                                  num_splits 0 runs unsplit */
    size_t workspace_size;     /* its bytes */
    const float *sinks;        /* device, fp32 [heads_q], or NULL: attention sinks (gpt-oss): per query head a
                                  logit that joins every row's softmax denominator and attends to no value,
                                  O_i = sum_j e^(l_ij) v_j / (e^(sink_h) + sum_j e^(l_ij)), the LSE including it;
                                  a row that sees no key gets O = 0 and LSE = sink_h */
    int window;                /* 1: a sliding window: query i of a sequence (diagonal d = i + sk - sq) sees only
                                  keys j with d - window_left <= j <= d + window_right, besides the causal
                                  limit; a side of -1 is unbounded. 0: no window (the two below unread) */
    int window_left, window_right;
    float softcap;             /* > 0: logits capped, softcap * tanh(logit / softcap) before the softmax (Gemma 2);
                                  0: none */
    const float *alibi_slopes; /* device, fp32 [heads_q], or NULL: ALiBi, logit_ij -= slope_h * |d - j| (d the
                                  query's bottom-right aligned diagonal), after the softcap */
    int causal_top_left;       /* with causal = 1: query i of a sequence sees keys j <= i (aligned to the top-left
                                  corner, as some frameworks mean causal when sq != sk) instead of j <= d; a
                                  window stays around d */
    const struct fg_mod *mod;  /* a custom score and/or mask mod (fg_mod_create), or NULL. Its score_mod takes each
                                  logit after the softcap and ALiBi; its mask_mod hides keys besides the causal and
                                  window limits (a row it leaves without a key gets O = 0 and LSE = -inf) */
    fg_tensor mod_aux[FG_MOD_AUX_MAX]; /* the mod's aux arrays in its order (fg_mod_aux): device memory, contiguous,
                                  of the declared dtype (F32 or I32) and rank; the rest unset (data NULL) */
    /* A custom mask's block map kept across calls (docs/mods.md), for masks that read aux arrays: where mask_map is
     * set (device memory, 256-byte aligned, mask_map_size >= fg_mask_map_size bytes) the map lives there, not in
     * the workspace; the call fills it, or with mask_map_ready = 1 reads it as an earlier call (forward or backward)
     * filled it and runs no classification. With ready, the caller vouches that the mod, its aux arrays' values,
     * the lengths, batch and heads are those of the call that filled it: a stale map skips the wrong blocks. */
    void *mask_map;
    size_t mask_map_size;
    int mask_map_ready;
    /* FP8 K and V only (data NULL otherwise, and data NULL means 1.0): fp32 device tensors, ndim 1 of shape [1] (one
     * factor for the tensor) or ndim 2 of shape [batch, heads_kv] (a factor per sequence and KV head; any strides,
     * 4-byte aligned), read on the device; outputs must not overlap them. Positive and finite (the kernel's running
     * row maximum assumes a positive score scale). A struct from 0.4.0's header, which ends above, reads them as
     * absent. */
    fg_tensor k_descale; /* multiplies K: the dequantized K is k * k_descale */
    fg_tensor v_descale; /* multiplies V */
} fg_varlen_args;

/* Zeroes *a and sets struct_size. */
FG_API void fg_varlen_args_init(fg_varlen_args *a);

/* ---- custom score and mask mods (docs/mods.md) ----
 * A mod is Lua text that defines score_mod(s, b, h, q, kv) and/or mask_mod(b, h, q, kv) over an expression
 * vocabulary (fg.where, fg.eq, fg.load, ...) and declares its aux arrays; fg_mod_create traces it once, in the
 * sandbox configs run in, into an expression tree from which the generator emits device code (no text of the
 * mod reaches the compiler). The serving call runs it (fg_varlen_args.mod); the variant's name carries the
 * mod's id, so caches and bundles stay exact. A mod is immutable and may be shared by threads and contexts. */
typedef struct fg_mod fg_mod;
/* Traces `text` (len bytes; name, e.g. a file name, prefixes its messages) into *mod. FG_ERR_CONFIG with
 * "name:line: ..." for anything outside the vocabulary; FG_ERR_INVALID_ARGUMENT for NULL pointers;
 * FG_ERR_NO_MEMORY. On failure *mod is NULL and fg_last_error(NULL) holds the sentence. */
FG_API fg_status fg_mod_create(const char *text, size_t len, const char *name, fg_mod **mod);
FG_API void fg_mod_destroy(fg_mod *mod);
/* The mod's id (16 hex digits; the mod=ID of its variants' names). */
FG_API const char *fg_mod_id(const fg_mod *mod);
/* Its aux arrays: how many, and array i's name, dtype (FG_DTYPE_F32 or FG_DTYPE_I32) and rank (1 or 2), in the
 * order fg_varlen_args.mod_aux takes them (by name). FG_ERR_INVALID_ARGUMENT for i out of range. */
FG_API int fg_mod_aux_count(const fg_mod *mod);
FG_API fg_status fg_mod_aux_info(const fg_mod *mod, int i, const char **name, fg_dtype *dtype, int *rank);
/* 1 when aux array i is declared trainable (fg.aux("f32", rank, "trainable"): fg_varlen_bwd_args.mod_aux_grad can
 * receive its gradient), 0 when not, -1 for a NULL mod or i out of range. */
FG_API int fg_mod_aux_trainable(const fg_mod *mod, int i);
/* The bytes of mod's block map (fg_varlen_args.mask_map) for batch sequences of up to max_seqlen_q queries and
 * max_seqlen_k keys (a dense cache's capacity) with heads_q query heads: 0 for a mod whose mask reads no aux array
 * (or NULL). FG_ERR_INVALID_ARGUMENT for a negative size, a NULL bytes or a map past size_t. */
FG_API fg_status fg_mask_map_size(const fg_mod *mod, int batch, int heads_q, int max_seqlen_q, int max_seqlen_k,
                                  size_t *bytes);

/* Runs the serving forward on `stream`: one kernel, and when keys are split a merge kernel after it. No
 * synchronization, no allocation (unless FG_OPTION_CHECK_INPUTS is on). */
FG_API fg_status fg_attention_fwd_varlen(fg_context *ctx, const fg_varlen_args *args, void *stream);

/* The workspace bytes the call needs (0 when its keys are not split). Data pointers may be NULL here. */
FG_API fg_status fg_attention_fwd_varlen_workspace_size(fg_context *ctx, const fg_varlen_args *args, size_t *bytes);

/* Which variant fg_attention_fwd_varlen would run for args and why: its name, the packing of query heads,
 * the split count and its reason, the workspace, where its code comes from. Data pointers may be NULL. */
FG_API fg_status fg_explain_varlen(fg_context *ctx, const fg_varlen_args *args, char *buf, size_t n);

/* The backward of variable-length batches: the gradients of fg_attention_fwd_varlen's packed form (queries and
 * keys packed with cu_seqlens_q and cu_seqlens_k, no cache, no pages), what training on packed sequences
 * needs. Tensors as the forward's: q, dq [total_q, heads_q, d]; k, dk [total_k, heads_kv, d]; v, dv
 * [total_k, heads_kv, dv] and o, dout [total_q, heads_q, dv], where V's head dim dv (v.shape[2], a multiple of 8
 * up to 256) may differ from d (DeepSeek's 192/128), as the forward takes it; lse [heads_q, total_q] fp32 (the
 * forward's, natural log). causal is bottom-right aligned per sequence, as
 * in the forward. The rules of fg_attention_bwd apply to each tensor (dtypes, head dims, alignment, outputs
 * overlapping nothing). cu_seqlens_q/k are read on the device only: offsets are clamped to total_q and
 * total_k, so a bad entry gives wrong gradients but no access outside the tensors; max_seqlen_q/k must bound
 * every sequence (rows past them are not computed); FG_OPTION_CHECK_INPUTS reads cu_seqlens_q/k back first
 * (synchronizing the stream) and refuses a bad entry or a sequence past max_seqlen_q/k by name. A workspace of fg_attention_bwd_varlen_workspace_size
 * bytes (256-byte aligned) holds each sequence's fp32 dQ accumulator: about heads_q x (total_q + 384 x batch)
 * x (head_dim rounded up as above + 2) x 4 bytes, and with GQA heads_q x total_k x (d + dv) x 4 more. No
 * synchronization, no allocation (unless FG_OPTION_CHECK_INPUTS is on). */
typedef struct fg_varlen_bwd_args {
    size_t struct_size;        /* sizeof(fg_varlen_bwd_args), set by fg_varlen_bwd_args_init: fields added
                                  later are read only when a caller's struct has them */
    fg_tensor q, k, v, o;      /* the forward's inputs and output, packed */
    fg_tensor dout;            /* dL/dO, like o */
    fg_tensor lse;             /* [heads_q, total_q] fp32, from the forward */
    fg_tensor dq, dk, dv;      /* written: like q, k, v */
    const int32_t *cu_seqlens_q; /* device, [batch + 1] */
    const int32_t *cu_seqlens_k; /* device, [batch + 1] */
    int batch;                 /* sequences */
    int max_seqlen_q;          /* the longest sequence's queries (an upper bound) */
    int max_seqlen_k;          /* the longest sequence's keys (an upper bound) */
    float softmax_scale;       /* the forward's (0 means 1/sqrt(head_dim)) */
    int causal;                /* the forward's mask */
    int deterministic;         /* 1: bitwise-reproducible gradients */
    void *workspace;           /* device memory, 256-byte aligned */
    size_t workspace_size;     /* its bytes */
    /* The forward's model variants (fg_varlen_args' fields of the same names; the backward of a call must be
     * given the variants its forward ran with): */
    const float *sinks;        /* device, fp32 [heads_q], or NULL */
    float *dsink;              /* with sinks: device, fp32 [heads_q], written: the sinks' gradient,
                                  -sum over rows of exp(sink_h - LSE_i) rowsum(dO_i O_i) */
    int window, window_left, window_right; /* a sliding window (not in the deterministic mode; nor sinks) */
    float softcap;             /* > 0: the logit softcap; its derivative joins dS */
    const float *alibi_slopes; /* device, fp32 [heads_q], or NULL */
    int causal_top_left;       /* with causal: the mask aligned top-left (as a window: not deterministic) */
    const struct fg_mod *mod;  /* the forward's custom mod, or NULL: score_mod's derivative joins dS */
    fg_tensor mod_aux[FG_MOD_AUX_MAX]; /* its aux arrays, as fg_varlen_args.mod_aux */
    /* Written where set: the loss's gradient in aux array i (mod_aux_grad[i], fp32, contiguous, mod_aux[i]'s shape,
     * overlapping no other tensor of the call), which the mod must declare fg.aux("f32", rank, "trainable"). The
     * call zeroes it on the stream, then the kernels add each score's share by fp32 atomics (so not in the
     * deterministic mode). Unset entries (data NULL, ndim 0): no gradient. */
    fg_tensor mod_aux_grad[FG_MOD_AUX_MAX];
    /* A custom mask's block map kept across calls (docs/mods.md), for masks that read aux arrays: where mask_map is
     * set (device memory, 256-byte aligned, mask_map_size >= fg_mask_map_size bytes) the map lives there, not in
     * the workspace; the call fills it, or with mask_map_ready = 1 reads it as an earlier call (forward or backward)
     * filled it and runs no classification. With ready, the caller vouches that the mod, its aux arrays' values,
     * the lengths, batch and heads are those of the call that filled it: a stale map skips the wrong blocks. */
    void *mask_map;
    size_t mask_map_size;
    int mask_map_ready;
} fg_varlen_bwd_args;

/* Zeroes *a and sets struct_size. */
FG_API void fg_varlen_bwd_args_init(fg_varlen_bwd_args *a);
/* Runs the backward of packed sequences on `stream`: three kernels, as fg_attention_bwd. */
FG_API fg_status fg_attention_bwd_varlen(fg_context *ctx, const fg_varlen_bwd_args *args, void *stream);
/* The workspace bytes the call needs (data pointers may be NULL). */
FG_API fg_status fg_attention_bwd_varlen_workspace_size(fg_context *ctx, const fg_varlen_bwd_args *args, size_t *bytes);

/* The exact merge of attention states computed over disjoint key sets (split-KV, shared-prefix or cascade
 * attention, ring attention across GPUs): for each (token, head), with M = max_s LSE_s and w_s =
 * exp(LSE_s - M), O = sum_s w_s O_s / sum_s w_s and LSE = M + ln(sum_s w_s), in fp32. A state with LSE =
 * -inf holds no key and takes no part (its O is not read); when every state is empty O = 0 and LSE = -inf.
 * A NaN LSE gives NaN. The merge of two states does not depend on their order (bitwise). */
typedef struct fg_merge_args {
    size_t struct_size;        /* sizeof(fg_merge_args), set by fg_merge_args_init: fields added later are
                                  read only when a caller's struct has them */
    fg_tensor o_states;        /* [states, tokens, heads, head_dim], fp32, fp16 or bf16; last dim contiguous */
    fg_tensor lse_states;      /* [states, tokens, heads], fp32, natural log; any strides */
    fg_tensor o;               /* [tokens, heads, head_dim], fp32, fp16 or bf16; last dim contiguous; written */
    fg_tensor lse;             /* optional [tokens, heads] fp32; written */
} fg_merge_args;

/* Zeroes *a and sets struct_size. */
FG_API void fg_merge_args_init(fg_merge_args *a);

/* Merges up to 256 states on `stream` (one kernel; no synchronization, no allocation). */
FG_API fg_status fg_merge_states(fg_context *ctx, const fg_merge_args *args, void *stream);

/* Options of a context that can change after it is made. */
typedef enum fg_option {
    FG_OPTION_CHECK_INPUTS = 1, /* 1: fg_attention_fwd_varlen reads cu_seqlens, seqused_k and block_table back
                                  (synchronizing the stream) and refuses bad entries; 0 (the default, unless
                                  FLASHGEN_CHECK_INPUTS=1): they are trusted, clamped on the device */
    FG_OPTION_JIT_TIERS = 2    /* 1: a call's JIT compile is a quick one, its optimized build following in the
                                  background (fg_wait_compiles); 0 (the default, unless FLASHGEN_JIT_TIERS=1): one
                                  full compile, the call waiting for it. Builds already queued still finish. A
                                  context under FLASHGEN_EMULATE_ARCH compiles PTX, full, whatever it says */
} fg_option;

/* Sets an option of ctx (for calls that start after it returns). */
FG_API fg_status fg_context_set_option(fg_context *ctx, fg_option option, int64_t value);

/* The sentence describing the last failure of a call on ctx made by this thread (errors are kept per
 * thread, so threads sharing a context never see each other's). With ctx NULL: the last failure on this
 * thread of fg_context_create or of a call given a NULL context. Never NULL ("no error" when there was
 * none). Valid until this thread's next failing call. */
FG_API const char *fg_last_error(const fg_context *ctx);

/* A short constant name for a status ("FG_ERR_INVALID_ARGUMENT"). */
FG_API const char *fg_status_string(fg_status status);

#ifdef __cplusplus
}
#endif
#endif
