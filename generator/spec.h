/* spec.h: fg_spec, the compile-time parameters of one kernel variant, and its canonical text form.
 *
 * The canonical text (keys sorted, comma-separated `key=value`, no spaces) is the variant's name in the
 * CLI, the caches, bundle indexes and logs:
 *   arch=sm_90a,block_m=128,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=4
 * Backward variants (kind=bwd) also name their mode, between causal and dtype:
 *   arch=sm_90,block_m=32,block_n=64,causal=1,deterministic=0,dtype=bf16,head_dim=128,kind=bwd,stages=2,warps=4
 * FP8 variants (dtype e4m3 or e5m2) also name their output dtype, between kind and stages:
 *   arch=sm_90a,block_m=128,block_n=64,causal=0,dtype=e4m3,head_dim=128,kind=fwd,out=bf16,stages=3,warps=4
 * Serving variants (kind=serve) have the forward's keys, and splits=N (between kind and stages) where the
 * split count is fixed (the tuning database's entries). The model variants name alibi=1 (first), sinks=1 and
 * softcap=1 (before splits) and window=1 (last) where they are compiled in:
 *   alibi=1,arch=sm_90,block_m=64,block_n=64,causal=1,dtype=bf16,head_dim=128,kind=serve,softcap=1,stages=2,warps=4
 * A variant whose V and O have a head dim of their own (serving, the sm_90a forward's varlen=1 ones, the mma.sync
 * backward) names it after head_dim:
 *   arch=sm_90,block_m=64,block_n=32,causal=1,dtype=bf16,head_dim=192,head_dim_v=128,kind=serve,stages=2,warps=4
 * and a serving variant that reads V from the first head_dim_v columns of K's rows (V a prefix view of K: the
 * absorbed MLA cache) names v_in_k=1 between tma's place and warps. The sm_90a forward's variable-length
 * variants name varlen=1, between v_in_k's place and warps:
 *   arch=sm_90a,block_m=128,block_n=128,causal=1,dtype=bf16,head_dim=128,kind=fwd,stages=2,varlen=1,warps=12
 * A serving variant whose K and V are FP8 (dequantized to Q's dtype in the kernel) names their dtype after kind:
 *   arch=sm_90,block_m=16,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=serve,kv=e4m3,stages=4,warps=4
 * A variant with a custom score or mask mod (generator/mod.h) names its id after kind:
 *   arch=sm_90,block_m=64,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=serve,mod=3f2a9c0d11b7e845,stages=2,warps=4
 * The merge of attention states has only two:
 *   arch=sm_90,kind=merge
 * spec_format(spec_parse(text)) == text for every canonical text. */
#ifndef FG_SPEC_H
#define FG_SPEC_H

#include <stddef.h>
#include "core/dtype.h"
#include "core/error.h"

typedef enum fg_kind {
    FG_KIND_FWD = 0, /* forward pass */
    FG_KIND_BWD = 1,  /* backward pass (three kernels: pre, main, post; templates/backward_mma.cuh) */
    FG_KIND_SERVE = 2, /* serving forward: packed tokens, paged KV, decode, split keys (forward_serving.cuh) */
    FG_KIND_MERGE = 3  /* the merge of attention states (templates/merge.cuh): only kind and arch name it */
} fg_kind;

typedef struct fg_spec {
    fg_kind kind;   /* which kernel family */
    int arch;       /* target compute capability times ten: 80, 86, 89, 90, 100, 120, ... */
    int arch_accel; /* 1 for the arch-specific 'a' targets (sm_90a): such a cubin runs on that exact arch only.
                       The suffix only: the family a spec runs is spec_is_wgmma / spec_is_wgmma_bwd */
    fg_dtype dtype; /* element type of Q, K, V and O */
    int head_dim;   /* d */
    int block_m;    /* query rows per CTA; 0 = unset (filled from the tile policy) */
    int block_n;    /* keys per pipeline step; 0 = unset */
    int warps;      /* warps per CTA; 0 = unset */
    int stages;     /* K/V shared-memory pipeline depth; 0 = unset */
    int causal;     /* 1: bottom-right aligned causal mask compiled in */
    fg_dtype out_dtype; /* dtype of O. FP8 specs (dtype e4m3/e5m2): fp16 or bf16 (spec_parse defaults it to
                           bf16). 16-bit specs ignore it (O has dtype): formatting omits it, spec_equal and
                           validation ignore it. Last, so positional initializers of the fields above work. */
    int deterministic;  /* kind=bwd: 1 = gradients bitwise identical across runs (dQ added in a fixed order);
                           named only in bwd specs ("deterministic=0|1") */
    int tma;            /* kind=bwd, mma.sync family on sm_90+: K, V, Q, dO loaded by TMA (tensor maps) and the
                           LSE/D rows by bulk copies, from one thread, instead of cp.async from all; kind=serve on
                           sm_90+: K and V by TMA (keys packed or in a dense cache, not paged); named only
                           when 1 ("tma=1"), so a name without TMA loads has no tma key */
    int splits;         /* kind=serve: the key splits a call runs with (1-256; 0: the call's own choice). A launch
                           choice, not a compile one (the kernel's code is the same for every value), kept in
                           the spec so that the tuning database can record it with the tiles; named only when
                           set ("splits=N") */
    int varlen;         /* sequences of their own lengths: kind=fwd, sm_90a (wgmma) family, fp16/bf16, in packed
                           or dense tensors (cu_seqlens, seqused_k; fg_fwd_params' varlen fields), what the
                           serving call runs for prefill on Hopper; kind=bwd, either family, in packed tensors
                           (fg_bwd_params' varlen fields: fg_attention_bwd_varlen); named only when 1
                           ("varlen=1") */
    /* The model variants (templates/common/score_mods.cuh): kind=serve; kind=fwd with varlen=1 (the sm_90a
     * forward the serving call runs for prefill); kind=bwd with varlen=1 on the mma.sync family (the backward
     * of packed sequences), a window outside the deterministic mode; 16-bit. Each is named only when 1
     * ("window=1", ...). */
    int window;         /* a sliding window around each query's diagonal (fg_varlen_args.window) */
    int sinks;          /* attention sinks: a per-head logit in every row's denominator (fg_varlen_args.sinks) */
    int softcap;        /* logits capped by cap * tanh(logit / cap) (fg_varlen_args.softcap) */
    int alibi;          /* ALiBi: logits biased by -slope_h * |d - j| (fg_varlen_args.alibi_slopes) */
    int head_dim_v;     /* kind=serve; kind=fwd with varlen=1 (sm_90a, 16-bit, both multiples of 64); kind=bwd on the
                           mma.sync family (V, dV, O, dO of this head dim; Q, K, dQ, dK of head_dim): V's and O's
                           head dim where it differs from head_dim (DeepSeek's 192/128); 0 (or head_dim): the
                           same. Named only when it differs ("head_dim_v=128") */
    int v_in_k;         /* kind=serve: V is a prefix view of K (its first head_dim_v columns, K's rows and strides,
                           as in an absorbed-MLA cache), so the kernel loads K's rows only and reads V's fragments
                           from K's tiles. Named only when 1 ("v_in_k=1") */
    int kv_fp8;         /* kind=serve: K and V in FP8, FG_DTYPE_E4M3 or FG_DTYPE_E5M2, staged by cp.async and dequantized
                           exactly into 16-bit tiles of dtype (Q's and O's) in the kernel; 0: K and V of dtype.
                           Named only when set ("kv=e4m3", between kind and mod) */
    char mod[17];       /* a custom mod's id (generator/mod.h, mod_id: 16 hex digits), "" for none: kind=serve and
                           kind=fwd with varlen=1 (the sm_90a forward), 16-bit; its code comes from the tree registered
                           under that id (mod_registry.h). Named only when set ("mod=ID", between kind and out) */
} fg_spec;

/* V's (and O's) head dim: head_dim_v where set, else head_dim; and it rounded up to the MMA k (16), for kind=bwd
 * as spec_bwd_dim_padded rounds it. */
int spec_head_dim_v(const fg_spec *spec);
int spec_head_dim_v_padded(const fg_spec *spec);

/* The 16-byte chunks of the wider of a K row and a V row (the serving kernel's loaders give each a thread). */
int spec_row_chunks(const fg_spec *spec);
/* 1 for a serving variant whose V is wider than 256 (forward_serving.cuh FG_WIDE: its key warps split O's columns). */
int spec_serve_wide(const fg_spec *spec);
/* K's and V's dtype: kv_fp8's FP8 dtype where set, else dtype. */
fg_dtype spec_kv_dtype(const fg_spec *spec);
/* 1 when spec compiles in a model variant (window, sinks, softcap, alibi). */
int spec_has_mods(const fg_spec *spec);

/* A kind's name in canonical texts, configs and tuning databases: "fwd", "bwd", "serve", "merge" ("unknown"
 * for other values). */
const char *spec_kind_name(fg_kind k);

/* Longest canonical text plus NUL, with room to spare. */
#define FG_SPEC_NAME_MAX 256

/* Writes the canonical text of spec into buf (n bytes). Returns the length, or -1 if it did not fit. */
int spec_format(const fg_spec *spec, char *buf, size_t n);

/* Parses `key=value` pairs separated by commas and/or whitespace, in any order. kind, arch, dtype and
 * head_dim are required; tile fields (block_m, block_n, warps, stages) may be omitted (left 0); causal
 * defaults to 0. `out` (fp16 or bf16) is the output dtype of an FP8 spec, bf16 when absent; for a 16-bit
 * dtype it may only repeat dtype, and out_dtype is set to dtype. Unknown keys, repeated keys and bad
 * values are errors naming the key. */
fg_status spec_parse(const char *text, fg_spec *out, fg_error *err);

/* "sm_90a" <-> (90, 1). spec_arch_parse accepts "sm_XY" or "sm_XYa"; returns FG_ERR_INVALID_ARGUMENT otherwise. */
fg_status spec_arch_parse(const char *text, int *arch, int *accel, fg_error *err);
int spec_arch_format(int arch, int accel, char *buf, size_t n);

/* Equality of every field (out_dtype only where it means something: FP8 specs). */
int spec_equal(const fg_spec *a, const fg_spec *b);

/* The dtype the kernel writes O in: out_dtype for FP8 specs, dtype otherwise. */
fg_dtype spec_out_dtype(const fg_spec *spec);

/* Derived quantities the validator, emitter and runtime share. */
int spec_head_dim_padded(const fg_spec *spec);   /* the head dim the kernel computes on: head_dim rounded up
                                                    to the MMA k (16); kind=bwd, spec_bwd_dim_padded's */
/* The backward's compute width for one of its head dims (dim: Q's and K's, or V's and O's) when the wider of the
 * two is `widest`: dim rounded up to 16, and when widest is above 128 to 32 (a warp's dK and dV tiles there split
 * both in halves or quarters of a multiple of 16). Its fp32 dQ accumulator has rows as wide as Q's. */
int spec_bwd_dim_padded(int dim, int widest);
/* spec_bwd_dim_padded for V of Q's head dim: head_dim rounded up to 16, above 128 to 32. */
int spec_bwd_head_dim_padded(int head_dim);
size_t spec_smem_bytes(const fg_spec *spec);     /* dynamic shared memory the kernel needs (Q/K/V elements
                                                    of dtype_size bytes: 1 for FP8) */
int spec_threads(const fg_spec *spec);           /* warps * 32 */
/* The mma.sync forward's key sub-block: the keys of one online-softmax step, block_n itself when S (block_n
 * / 2 fp32 per m16 tile) fits beside O under FG_SPEC_ACC_REGS accumulator registers a thread, else the
 * largest multiple of 16 (32 for FP8) dividing block_n that fits; 0 when none does. The whole block still
 * loads behind one barrier: a wide block with narrow steps halves the barriers of a narrow block. */
int spec_fwd_sub_n(const fg_spec *spec);
#define FG_SPEC_ACC_REGS 176
int spec_bwd_sm90_dq_n(const fg_spec *spec);     /* the sm_90a backward: the dQ columns a warpgroup computes
                                                   (head_dim / 2 at 128, by columns; head_dim at 64, for
                                                   its 64 of the 128 queries; backward_wgmma.cuh) */
int spec_bwd_sm90_dq_t(const fg_spec *spec);     /* the sm_90a backward with 80-query blocks (head_dim 128, not
                                                   causal): dQ^T = K^T dS^T, each warpgroup its half of the
                                                   columns for the block's 80 queries (backward_wgmma.cuh) */
int spec_bwd_rows_block(const fg_spec *spec);    /* kind=bwd: the rows of a post-kernel CTA (whole groups of the
                                                   dQ accumulator) and of a Q or dO TMA box: 80 with dQ^T,
                                                   else 64 (backward_mma.cuh FG_BW_ROWS) */
int spec_bwd_dq_staged(const fg_spec *spec);     /* kind=bwd: 1 when dQ is staged in shared memory and added by
                                                    bulk reduce-adds (sm_90 and newer, head_dim and head_dim_v
                                                    <= 128), 0 for fp32 atomics */
/* 1 for the forward of the wgmma family (sm_90a: TMA, wgmma, warp specialization, templates/forward_wgmma.cuh);
 * the other targets, sm_90 included, run the mma.sync family (templates/forward_mma.cuh). The one test of
 * "is this the wgmma family" in generator/: code asks it here, never of arch_accel, which means only the
 * 'a' suffix of the arch name. */
int spec_is_wgmma(const fg_spec *spec);
/* 1 for the backward of the wgmma family (kind=bwd, sm_90a: templates/backward_wgmma.cuh). */
int spec_is_wgmma_bwd(const fg_spec *spec);
/* 1 when the variant reads a custom mask's block map (fg_params.h's fg_mod_aux.map) and its module holds the
 * kernel that fills it (templates/mod_classify.cuh): a registered mod whose mask reads aux arrays, on the sm_90a
 * forward with varlen=1 or the backward. */
int spec_mask_map(const fg_spec *spec);
/* Q buffers of a wgmma-family kernel: 2 when they fit the arch's shared memory with the K/V stages (the
 * next tile's Q then loads during this one), else 1; 1 for the mma.sync family. */
int spec_q_stages(const fg_spec *spec);
int spec_wgmma_o_direct(const fg_spec *spec);    /* the sm_90a forward writes O from the registers (FP8, and
                                                    16-bit with one Q buffer; forward_wgmma.cuh FG_O_DIRECT), not by
                                                    a TMA store: it needs no tensor map of O */
/* The sm_90a FP8 forward's extra P.V columns that hold the row sums (8 rows of ones under V^T; forward_wgmma.cuh
 * FG_PV_SUM): 8 at head_dim 64, and at 128 below three consumer warpgroups; else (and for other dtypes) 0. */
int spec_fp8_pv_sum(const fg_spec *spec);
/* Whether variant spec divides O by the sum of the e4m3-rounded P (an sm_90a FP8 variant with those row sums):
 * what a check of its output must model (reference/reference.h fp8_sum_rounded). */
int spec_fp8_sum_rounded(const fg_spec *spec);
/* The sm_90a FP8 forward's two-level accumulation (forward_wgmma.cuh FG_O_FLUSH): every how many key blocks the
 * P.V accumulator is added into fp32 registers and restarted (1 at head_dim 64, 2 at 128); 0 (no fp32
 * level) for 16-bit variants, and above head_dim 128 or with three consumer warpgroups, where O's second
 * copy does not fit the consumers' registers. */
int spec_fp8_o_flush(const fg_spec *spec);
/* Above head_dim 128, and with three consumer warpgroups, the same with O's fp32 level in shared memory
 * (block_m x (head_dim + spec_fp8_pv_sum) x 4 bytes; forward_wgmma.cuh FG_O_FLUSH_SMEM): the period in key
 * blocks, at most 512 keys' worth (512 / block_n, 1 above block_n 256); 0 elsewhere. */
int spec_fp8_o_flush_smem(const fg_spec *spec);
/* The sm_90a FP8 forward's V^T tile (head_dim rows of block_n key bytes) is stored as chunks of this many
 * keys, each row one swizzled unit (128, 64 or 32 bytes: the largest dividing block_n). */
int spec_fp8_vt_bytes(const fg_spec *spec);

/* Validation and the tile policy have their own headers; spec.h includes them so that files outside
 * generator/ that include only spec.h keep compiling. New code includes what it uses. */
#include "generator/tile_policy.h"
#include "generator/validate.h"

#endif
