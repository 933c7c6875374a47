/* validate.c: which specs flashgen refuses, as one flat list of rules (the cuDNN frontend's habit).
 * Each rule is a predicate that is true when the spec must be refused, and a sentence saying why.
 * tests/test_validate.c breaks each rule once, by name. Add a rule here, never a check elsewhere. */
#include <stdio.h>
#include "generator/validate.h"
#include "generator/mod.h"
#include "generator/spec.h"
#include "templates/common/bwd_tiles.h" /* templates/common: the backward kernel's tile-dependent warp layouts */

/* Opt-in maximum of dynamic shared memory per block, by compute capability (CUDA programming guide). */
size_t arch_smem_limit(int arch) {
    switch (arch) {
    case 80: case 87: return 166912;                      /* A100, Orin: 163 KiB */
    case 86: case 89: case 120: case 121: return 101376;  /* GA10x, Ada, consumer Blackwell: 99 KiB */
    case 90: case 100: case 103: case 110: return 232448; /* Hopper, datacenter Blackwell: 227 KiB */
    default: return 0;
    }
}

/* Targets that have an arch-specific ('a') variant in NVRTC 12.8+. */
static int arch_has_accel(int arch) {
    return arch == 90 || arch == 100 || arch == 103 || arch == 110 || arch == 120 || arch == 121;
}

/* Query rows each warp owns: 16 per m16 MMA tile, so block_m / (16 * warps) tiles per warp. */
static int m_tiles(const fg_spec *s) { return s->warps > 0 ? s->block_m / (16 * s->warps) : 0; }

/* Registers for the fp32 accumulators a thread holds across the KV loop: O (d/2 per m-tile) and S of one
 * key sub-block (spec_fwd_sub_n: block_n / 2 per m-tile when that fits, else a divisor's). The rule
 * refuses what cannot fit even in 16-key (FP8: 32-key) steps, not everything that might spill: with
 * NVRTC 13.0, 192 always spills while 161-176 spills or not depending on the tile, so those are left to
 * ptxas's report, which `flashgen tune` and the CI compile test read. FP8 variants accumulate in fp32
 * too, so the same count applies to them. */
static int acc_registers(const fg_spec *s) {
    return m_tiles(s) * (spec_head_dim_padded(s) / 2 + s->block_n / 2);
}

/* The wgmma family (sm_90a): block_m / 64 consumer warpgroups of 64 query rows each plus one producer
 * warpgroup. After setmaxnreg a consumer thread has 240 registers (2 consumer warpgroups or 1) or 160 (3):
 * O (d/2) and S (block_n/2) in fp32 and the previous block's P packed (block_n/4) are live at once. The
 * rule refuses what cannot fit; the ~20 registers of addresses and statistics are left to ptxas's spill
 * report (which `flashgen tune` and bundles read). */
static int wg_consumers(const fg_spec *s) { return s->block_m / 64; }
/* FP8 at head_dim <= 128 keeps O's fp32 level (spec_fp8_o_flush) besides the wgmma accumulator, the row-sum
 * group (spec_fp8_pv_sum) in both: d/2 + 8 more. */
static int wg_registers(const fg_spec *s) {
    return spec_head_dim_v(s) / 2 + s->block_n * 3 / 4 +
           (spec_fp8_o_flush(s) ? s->head_dim / 2 + spec_fp8_pv_sum(s) : 0);
}
static int wg_register_limit(const fg_spec *s) { return wg_consumers(s) == 3 ? 160 : 240; }

/* The backward (backward_mma.cuh): block_n = 16 x warps keys per CTA (8 x warps above head_dim 128), block_m
 * query rows a step; S^T and dP^T on warp tiles of 32 keys x block_m / (warps / (block_n / 32)) queries,
 * dV and dK on 16 or 32 keys x head_dim or half of it, dQ on block_m / 16 query groups times head_dim
 * slices. A thread holds dK and dV throughout (block_n (d + dv) / threads registers), then S^T and dP^T or its
 * dQ slice. d and dv are the padded head dims the kernel computes on (bwd_dim, bwd_dim_v: spec_bwd_dim_padded),
 * Q's and K's, V's and dO's. */
static int is_bwd(const fg_spec *s) { return s->kind == FG_KIND_BWD; }
static int bwd_dim(const fg_spec *s) { return spec_head_dim_padded(s); }
static int bwd_dim_v(const fg_spec *s) { return spec_head_dim_v_padded(s); }
static int bwd_qm(const fg_spec *s) { /* m16 tiles of a dQ warp tile: backward_mma.cuh's FG_DQ_M16_TILES */
    return fg_bwd_qm(s->block_m, s->block_n, s->warps, bwd_dim(s));
}
static int bwd_qgroups(const fg_spec *s) { return s->block_m / (16 * bwd_qm(s)) > 0 ? s->block_m / (16 * bwd_qm(s)) : 1; }
static int bwd_dsplit(const fg_spec *s) { return s->warps / bwd_qgroups(s) > 0 ? s->warps / bwd_qgroups(s) : 1; }
static int bwd_p1_qparts(const fg_spec *s) { return s->block_n >= 32 ? s->warps / (s->block_n / 32) : 0; }
static int bwd_p2_keys(const fg_spec *s) { /* keys of a phase-2 warp tile */
    const int parts = fg_bwd_p2_parts(s->block_n, s->warps, bwd_dim(s), bwd_dim_v(s)); /* FG_P2_DIM_PARTS */
    return s->warps / parts > 0 ? s->block_n / (s->warps / parts) : 0;
}
static int bwd_registers(const fg_spec *s) {
    const int dkv = s->warps > 0 ? s->block_n * (bwd_dim(s) + bwd_dim_v(s)) / (32 * s->warps) : 0;
    const int p1 = bwd_p1_qparts(s) > 0 ? 2 * s->block_m / bwd_p1_qparts(s) : 0, dq = bwd_qm(s) * bwd_dim(s) / 2 / bwd_dsplit(s);
    return dkv + (p1 > dq ? p1 : dq);
}

/* The serving forward (forward_serving.cuh): block_m / 16 warps over the rows, the rest over the keys of a
 * block; a thread holds O (d/2) and its warp's scores (block_n / warps_n / 2). */
static int is_serve(const fg_spec *s) { return s->kind == FG_KIND_SERVE; }
static int serve_warps_n(const fg_spec *s) { return s->block_m >= 16 ? s->warps * 16 / s->block_m : 0; }
static int serve_registers(const fg_spec *s) {
    const int wn = serve_warps_n(s), o_cols = spec_serve_wide(s) && wn > 0 ? spec_head_dim_v_padded(s) / wn
                                                                           : spec_head_dim_v_padded(s);
    return o_cols / 2 + (wn > 0 ? s->block_n / wn / 2 : 0);
}

typedef struct rule {
    const char *name;                          /* short id, used by tests */
    int (*refuse)(const fg_spec *s);           /* true: the spec breaks the rule */
    void (*say)(const fg_spec *s, fg_error *); /* writes the sentence */
    fg_status status;                          /* FG_ERR_UNSUPPORTED or FG_ERR_INVALID_ARGUMENT */
} rule;

#define RULE(id, cond, status, ...)                                                      \
    static int refuse_##id(const fg_spec *s) { return (cond); }                          \
    static void say_##id(const fg_spec *s, fg_error *e) { fg_fail(e, status, __VA_ARGS__); }

RULE(kind, s->kind != FG_KIND_FWD && s->kind != FG_KIND_BWD && s->kind != FG_KIND_SERVE && s->kind != FG_KIND_MERGE,
     FG_ERR_INVALID_ARGUMENT, "kind %d is not a kernel family (fwd, bwd, serve, merge)", (int)s->kind)
RULE(arch_known, arch_smem_limit(s->arch) == 0, FG_ERR_UNSUPPORTED,
     "arch sm_%d is not a target flashgen knows (sm_80, sm_86, sm_87, sm_89, sm_90, sm_100, sm_103, sm_110, sm_120, sm_121)", s->arch)
RULE(arch_accel, s->arch_accel && !arch_has_accel(s->arch), FG_ERR_UNSUPPORTED,
     "arch sm_%da does not exist: only sm_90, sm_100, sm_103, sm_110, sm_120 and sm_121 have an 'a' target", s->arch)
RULE(dtype_half, s->dtype != FG_DTYPE_F16 && s->dtype != FG_DTYPE_BF16 && !dtype_is_fp8(s->dtype),
     FG_ERR_UNSUPPORTED,
     "dtype %s has no forward kernel family in this flashgen: the mma.sync forward takes fp16, bf16, e4m3 or e5m2",
     dtype_name(s->dtype))
RULE(fp8_arch, dtype_is_fp8(s->dtype) && s->arch < 89, FG_ERR_UNSUPPORTED,
     "dtype %s needs sm_89 or newer (sm_89, sm_90, sm_100, sm_103, sm_110, sm_120, sm_121): sm_%d has no FP8 "
     "tensor-core mma (m16n8k32)", dtype_name(s->dtype), s->arch)
RULE(fp8_out, dtype_is_fp8(s->dtype) && s->out_dtype != FG_DTYPE_F16 && s->out_dtype != FG_DTYPE_BF16,
     FG_ERR_UNSUPPORTED, "out_dtype %s is not supported for dtype %s: an fp8 variant writes O as fp16 or bf16",
     dtype_name(s->out_dtype), dtype_name(s->dtype))
/* The serving kernel reads Q's fragments from shared memory above head_dim 128, so Q and K may be as wide as
 * an absorbed-MLA cache (576); the other kernels hold head_dim-wide tiles in registers. */
static int head_dim_max(const fg_spec *s) { return is_serve(s) ? 576 : 256; }
RULE(head_dim_range, s->head_dim < 8 || s->head_dim > head_dim_max(s) || s->head_dim % 8 != 0, FG_ERR_UNSUPPORTED,
     "head_dim %d is not supported: it must be a multiple of 8 from 8 to %d%s", s->head_dim, head_dim_max(s),
     is_serve(s) ? " (kind=serve)" : " (kind=serve takes up to 576)")
RULE(fp8_head_dim, dtype_is_fp8(s->dtype) && (s->head_dim < 32 || s->head_dim > 256 || s->head_dim % 32 != 0),
     FG_ERR_UNSUPPORTED,
     "head_dim %d is not supported for dtype %s: it must be a multiple of 32 from 32 to 256 (the FP8 mma's k-step "
     "is 32 bytes of head dim)", s->head_dim, dtype_name(s->dtype))
RULE(bwd_arch, is_bwd(s) && s->arch_accel && s->arch != 90, FG_ERR_UNSUPPORTED,
     "kind=bwd has no sm_%da kernel: the backward pass is the mma.sync family there (use arch sm_%d)", s->arch, s->arch)
RULE(bwd_wgmma, spec_is_wgmma_bwd(s) && ((s->head_dim != 64 && s->head_dim != 128) ||
                                          (s->head_dim == 64 ? s->block_m != 128
                                                             : s->block_m != 64 && (s->block_m != 80 || s->causal)) ||
                                          s->block_n != 128 || s->warps != 8 || s->stages != 2 || s->deterministic),
     FG_ERR_UNSUPPORTED,
     "kind=bwd on sm_90a (wgmma) takes head_dim 64 with block_m 128 or head_dim 128 with block_m 64 (or 80 without "
     "a causal mask), block_n 128, warps 8, stages 2 and "
     "deterministic=0 (got head_dim %d, %d x %d, warps %d, stages %d, causal=%d, deterministic=%d); arch sm_90 "
     "(mma.sync) takes the others", s->head_dim, s->block_m, s->block_n, s->warps, s->stages, s->causal != 0,
     s->deterministic)
RULE(bwd_tma, s->tma && !is_serve(s) && (!is_bwd(s) || spec_is_wgmma_bwd(s) || s->arch < 90 || s->head_dim % 64 != 0 ||
                                         spec_head_dim_v(s) % 64 != 0 || s->block_m % 64 != 0 || s->stages != 2),
     FG_ERR_UNSUPPORTED,
     "tma=1 (the mma.sync backward's loads by TMA) takes kind=bwd on arch sm_90 or newer (not sm_90a) at head_dim "
     "and head_dim_v 64, 128, 192 or 256 (TMA boxes of 64 columns) with block_m a multiple of 64 and stages 2 (got "
     "kind=%s, arch sm_%d%s, head_dim %d, head_dim_v %d, block_m %d, stages %d)", is_bwd(s) ? "bwd" : "fwd", s->arch,
     s->arch_accel ? "a" : "", s->head_dim, spec_head_dim_v(s), s->block_m, s->stages)
RULE(bwd_dtype, is_bwd(s) && s->dtype != FG_DTYPE_F16 && s->dtype != FG_DTYPE_BF16, FG_ERR_UNSUPPORTED,
     "dtype %s has no backward kernel: kind=bwd takes fp16 or bf16", dtype_name(s->dtype))
RULE(wgmma_dtype, spec_is_wgmma(s) && dtype_is_fp8(s->dtype) &&
                      (s->head_dim % 64 != 0 || s->block_n % 32 != 0 || s->block_n > 256), FG_ERR_UNSUPPORTED,
     "dtype %s on sm_90a (the wgmma family) takes head_dim a multiple of 64 and block_n a multiple of 32 up to 256 "
     "(FP8 tiles are 64- or 128-byte swizzled rows, V^T chunks of 32 to 128 keys); got head_dim %d, block_n %d; "
     "arch sm_90 (the mma.sync family) takes the others", dtype_name(s->dtype), s->head_dim, s->block_n)
RULE(wgmma_head_dim, spec_is_wgmma(s) && (s->head_dim < 32 || s->head_dim % 32 != 0), FG_ERR_UNSUPPORTED,
     "head_dim %d is not supported on sm_90a (the wgmma family): it must be a multiple of 32 from 32 to 256 "
     "(TMA tiles are 32- or 64-column chunks); arch sm_90 (mma.sync) takes multiples of 8", s->head_dim)
RULE(tiles_set, s->block_m <= 0 || s->block_n <= 0 || s->warps <= 0 || s->stages <= 0, FG_ERR_INVALID_ARGUMENT,
     "tile fields must be set (block_m=%d, block_n=%d, warps=%d, stages=%d): fill them from the tile policy",
     s->block_m, s->block_n, s->warps, s->stages)
RULE(wgmma_block_m, spec_is_wgmma(s) && s->block_m != 64 && s->block_m != 128 && s->block_m != 192,
     FG_ERR_UNSUPPORTED,
     "block_m %d is not supported on sm_90a (the wgmma family): it must be 64, 128 or 192 (one consumer "
     "warpgroup per 64 query rows, at most 3)", s->block_m)
RULE(wgmma_warps, spec_is_wgmma(s) && s->warps != 4 * (wg_consumers(s) + 1), FG_ERR_UNSUPPORTED,
     "warps %d with block_m %d is not supported on sm_90a (the wgmma family): it must be %d, a producer "
     "warpgroup plus one consumer warpgroup (4 warps) per 64 query rows", s->warps, s->block_m,
     4 * (wg_consumers(s) + 1))
RULE(wgmma_registers, spec_is_wgmma(s) && wg_registers(s) > wg_register_limit(s), FG_ERR_UNSUPPORTED,
     "block_n %d at head_dim %d needs about %d registers per consumer thread on sm_90a, more than the %d a "
     "consumer warpgroup gets with block_m %d%s: use a smaller block_n", s->block_n, s->head_dim,
     wg_registers(s), wg_register_limit(s), s->block_m,
     spec_fp8_o_flush(s) ? " (FP8 keeps a second, fp32 copy of O: the two-level accumulation)" : "")
RULE(bwd_tiles, is_bwd(s) && !spec_is_wgmma_bwd(s) && (s->warps < 2 || s->warps > 8 || (s->warps & (s->warps - 1)) != 0 ||
                               (s->block_n != 16 * s->warps && (s->block_n != 8 * s->warps || s->warps < 4)) ||
                               (s->block_m != 32 && s->block_m != 64 && s->block_m != 128) ||
                               s->block_m % (16 * bwd_p1_qparts(s)) != 0 || bwd_p2_keys(s) % 16 != 0 ||
                               s->warps % bwd_qgroups(s) != 0 || (bwd_dim(s) / 8) % (2 * bwd_dsplit(s)) != 0 ||
                               s->stages > 2),
     FG_ERR_UNSUPPORTED,
     "kind=bwd tiles block_m %d, block_n %d, warps %d, stages %d at head_dim %d (padded to %d), V's %d (padded to %d), "
     "are not supported: warps 2, 4 or 8 with block_n = 16 x warps (or 8 x warps from 4 warps), block_m 32, 64 or "
     "128 with 16 x warps / (block_n / 32) dividing it (the S^T tiles' query parts) and the dQ product's query groups "
     "(block_m / 16, or block_m / 32 with 8 keys a warp at a padded head_dim that is a multiple of 64) dividing "
     "warps, the padded head_dim / 8 a multiple of 2 x warps / groups (the dQ product's split), whole 16-key dK and "
     "dV tiles, stages 1 or 2", s->block_m, s->block_n, s->warps, s->stages, s->head_dim, bwd_dim(s),
     spec_head_dim_v(s), bwd_dim_v(s))
RULE(bwd_registers, is_bwd(s) && !spec_is_wgmma_bwd(s) && bwd_registers(s) > 200, FG_ERR_UNSUPPORTED,
     "kind=bwd block_m %d, block_n %d, warps %d at head_dim %d (V's %d) need about %d accumulator registers per "
     "thread (dK, dV, S^T, dP^T, dQ; limit 200): use a smaller block_m or block_n", s->block_m, s->block_n, s->warps,
     s->head_dim, spec_head_dim_v(s), bwd_registers(s))
RULE(serve_dtype, is_serve(s) && s->dtype != FG_DTYPE_F16 && s->dtype != FG_DTYPE_BF16, FG_ERR_UNSUPPORTED,
     "dtype %s has no serving kernel (packed tokens, paged KV, decode): kind=serve takes fp16 or bf16",
     dtype_name(s->dtype))
RULE(serve_tiles, is_serve(s) && ((s->block_m != 16 && s->block_m != 32 && s->block_m != 64 && s->block_m != 128) ||
                                  s->warps * 16 < s->block_m || (s->warps * 16) % s->block_m != 0 ||
                                  s->block_n % (16 * serve_warps_n(s)) != 0 || s->stages < 2 || s->arch_accel),
     FG_ERR_UNSUPPORTED,
     "kind=serve tiles block_m %d, block_n %d, warps %d, stages %d are not supported: block_m 16, 32, 64 or 128 "
     "with block_m / 16 warps over the rows dividing warps, block_n a multiple of 16 times the warps over the keys "
     "(warps x 16 / block_m), 2 to 4 stages, and a plain arch (no 'a' target)", s->block_m, s->block_n, s->warps,
     s->stages)
/* a K or V row's 16-byte chunks each have a loading thread (forward_serving.cuh's loaders: fg_fixed_step) */
RULE(serve_threads, is_serve(s) && s->warps * 32 < spec_row_chunks(s),
     FG_ERR_UNSUPPORTED,
     "kind=serve with %d warps has fewer threads than a row of K (head_dim %d) or V (head_dim_v %d) has 16-byte "
     "chunks (a thread loads a chunk column): use at least %d warps", s->warps, s->head_dim, spec_head_dim_v(s),
     (spec_row_chunks(s) + 31) / 32)
RULE(serve_tma, is_serve(s) && s->tma && (s->arch < 90 || s->head_dim % 64 != 0 || s->head_dim > 256 ||
                                         s->block_n % 8 != 0 || spec_head_dim_v(s) != s->head_dim || s->v_in_k),
     FG_ERR_UNSUPPORTED,
     "kind=serve tma=1 (K and V loaded by TMA) takes arch sm_90 or newer, head_dim 64, 128, 192 or 256, V of the "
     "same head dim and V in tensors of its own (got sm_%d, head_dim %d, head_dim_v %d, v_in_k=%d)", s->arch,
     s->head_dim, spec_head_dim_v(s), s->v_in_k != 0)
/* FP8 K and V with 16-bit Q (kind=serve kv=e4m3|e5m2): each key block's FP8 rows are copied by cp.async into
 * staging and dequantized by the CTA into 16-bit K and V tiles that the 16-bit compute reads (forward_serving.cuh,
 * serving_kv.cuh). The dequantization is integer and 16-bit FMA work every serving arch has (sm_80 and newer). */
RULE(kv_fp8_kind, s->kv_fp8 && !is_serve(s), FG_ERR_UNSUPPORTED,
     "kv=%s (FP8 K and V with 16-bit queries) is a variant of the serving kernel (kind=serve) only",
     dtype_name((fg_dtype)s->kv_fp8))
RULE(kv_fp8_dtype, s->kv_fp8 && !dtype_is_fp8((fg_dtype)s->kv_fp8), FG_ERR_INVALID_ARGUMENT,
     "kv_fp8 %d is not an FP8 dtype: kv takes e4m3 or e5m2 (0: K and V of dtype)", s->kv_fp8)
RULE(kv_fp8_tma, is_serve(s) && s->kv_fp8 && s->tma, FG_ERR_UNSUPPORTED,
     "kind=serve kv=%s loads K and V by cp.async into FP8 staging; tma=1 (TMA boxes of 16-bit tiles) is not taken "
     "with it", dtype_name((fg_dtype)s->kv_fp8))
RULE(kv_fp8_v_in_k, is_serve(s) && s->kv_fp8 && s->v_in_k, FG_ERR_UNSUPPORTED,
     "kind=serve kv=%s dequantizes V into a tile of its own; v_in_k=1 (V read from K's tiles) is not taken with it "
     "(a call whose V is a prefix view of K runs with V loaded on its own)", dtype_name((fg_dtype)s->kv_fp8))
RULE(kv_fp8_head_dim, is_serve(s) && s->kv_fp8 &&
                          (s->head_dim % 32 != 0 || s->head_dim > 256 || spec_head_dim_v(s) % 32 != 0 ||
                           spec_head_dim_v(s) > 256),
     FG_ERR_UNSUPPORTED,
     "kind=serve kv=%s takes head_dim and head_dim_v multiples of 32 up to 256 (got %d and %d): an FP8 row is "
     "staged in pairs of 16-byte chunks (32 elements), and V above 256 columns (the wide tiles) is not dequantized",
     dtype_name((fg_dtype)s->kv_fp8), s->head_dim, spec_head_dim_v(s))
/* V's own head dim: the serving kernel and the mma.sync backward take any multiple of 8 up to 256 beside any
 * head_dim (their tiles and loaders have a width per operand; the backward pads both to 32 where either is above
 * 128, which keeps every pair's warp split whole: spec_bwd_dim_padded), the serving kernel also multiples of 64 up
 * to 512 (its wide variants); the sm_90a forward's TMA boxes and wgmma n take multiples of 64; the sm_90a
 * backward's warpgroup tiles are laid out for one head dim. */
static int head_dim_v_ok(const fg_spec *s) {
    if (is_serve(s)) return s->head_dim_v % 8 == 0 && (s->head_dim_v <= 256 || (s->head_dim_v <= 512 && s->head_dim_v % 64 == 0));
    if (is_bwd(s) && !spec_is_wgmma_bwd(s)) return s->head_dim_v % 8 == 0 && s->head_dim_v <= 256;
    return s->kind == FG_KIND_FWD && s->varlen && spec_is_wgmma(s) && !dtype_is_fp8(s->dtype) && s->head_dim % 64 == 0 &&
           s->head_dim_v % 64 == 0 && s->head_dim_v <= 256;
}
RULE(head_dim_v, s->head_dim_v != 0 && !head_dim_v_ok(s), FG_ERR_UNSUPPORTED,
     "head_dim_v %d is not supported: V's own head dim is a variant of the serving kernel (kind=serve; a multiple "
     "of 8 up to 256, or of 64 up to 512), of the mma.sync backward (kind=bwd, not sm_90a, whose warpgroup tiles take "
     "one head dim; a multiple of 8 up to 256 beside any head_dim) and of the sm_90a forward with varlen=1 (16-bit; "
     "head_dim and head_dim_v multiples of 64 up to 256)", s->head_dim_v)
/* V wider than 256 (forward_serving.cuh FG_WIDE): the warps over a block's keys split O's columns in slabs of 64
 * (V's tile rows are 128-byte swizzled slabs), so each takes a whole number of them; reading V from K's tiles
 * needs K's rows in such slabs too. */
RULE(serve_wide, spec_serve_wide(s) && (serve_warps_n(s) == 0 || (spec_head_dim_v_padded(s) / 64) % serve_warps_n(s) != 0 ||
                                        (s->v_in_k && s->head_dim % 64 != 0)),
     FG_ERR_UNSUPPORTED,
     "kind=serve with head_dim_v %d (above 256) splits O's columns over the %d warps a row tile has over the keys "
     "(warps x 16 / block_m), in slabs of 64: head_dim_v / 64 must be a multiple of that count%s", spec_head_dim_v(s),
     serve_warps_n(s), s->v_in_k ? ", and with v_in_k=1 head_dim a multiple of 64" : "")
RULE(v_in_k, s->v_in_k && (!is_serve(s) || spec_head_dim_v(s) > s->head_dim), FG_ERR_UNSUPPORTED,
     "v_in_k=1 (V read from the first head_dim_v columns of K's tiles) takes kind=serve and head_dim_v at most "
     "head_dim (got head_dim %d, head_dim_v %d)", s->head_dim, spec_head_dim_v(s))
/* The model variants (window, sinks, softcap, alibi): on the serving kernel, on the sm_90a forward's varlen=1
 * variants (what the serving call runs for prefill on Hopper) and on the backward's varlen=1 ones of either
 * family (fg_attention_bwd_varlen), 16-bit; a window's query blocks per key block break the deterministic mode's
 * turn order (bwd_order.h), so it runs without that mode. */
static int mods_set(const fg_spec *s) { return s->window || s->sinks || s->softcap || s->alibi; }
RULE(model_variants, mods_set(s) && !is_serve(s) && !(s->kind == FG_KIND_FWD && s->varlen && spec_is_wgmma(s)) &&
                         !(is_bwd(s) && s->varlen && !(s->window && s->deterministic)),
     FG_ERR_UNSUPPORTED,
     "window=1, sinks=1, softcap=1 and alibi=1 (the model variants) are variants of the serving kernel "
     "(kind=serve), of the sm_90a forward with varlen=1 (what fg_attention_fwd_varlen runs) and of the "
     "backward with varlen=1 (fg_attention_bwd_varlen; a window outside the deterministic mode); other kinds and "
     "targets do not compile them")
/* A custom mod (generator/mod.h): on the serving kernel, the sm_90a forward's varlen=1 variants and the packed
 * sequences' backward (either family), whose rows know their sequence, head and positions, in fp16/bf16; its tree
 * must be registered in this process (the emitter takes the code from it, with score_mod's derivative for the
 * backward). */
RULE(mod_kind, s->mod[0] && !is_serve(s) && !(is_bwd(s) && s->varlen) &&
                   !(s->kind == FG_KIND_FWD && s->varlen && spec_is_wgmma(s) && !dtype_is_fp8(s->dtype)),
     FG_ERR_UNSUPPORTED,
     "mod=%s (a custom score or mask mod) is a variant of the serving kernel (kind=serve: fg_attention_fwd_varlen), of "
     "the sm_90a forward with varlen=1 (its prefill on Hopper) and of the backward with varlen=1 "
     "(fg_attention_bwd_varlen); other kinds do not compile custom mods yet", s->mod)
RULE(mod_known, s->mod[0] && !mod_lookup(s->mod), FG_ERR_UNSUPPORTED,
     "mod=%s names no custom mod this process has registered: create it from its text first (fg_mod_create)", s->mod)
RULE(serve_splits, s->splits < 0 || s->splits > 256 || (s->splits != 0 && !is_serve(s)), FG_ERR_UNSUPPORTED,
     "splits %d is not supported: a kind=serve variant runs 1 to 256 key splits (0: the call's choice), and other "
     "kinds have none", s->splits)
RULE(serve_registers, is_serve(s) && serve_registers(s) > FG_SPEC_ACC_REGS, FG_ERR_UNSUPPORTED,
     "kind=serve block_n %d over %d key warps at head_dim_v %d needs %d accumulator registers per thread (limit %d): "
     "use a smaller block_n or more warps", s->block_n, serve_warps_n(s), spec_head_dim_v(s), serve_registers(s),
     FG_SPEC_ACC_REGS)
RULE(fwd_varlen, s->varlen && !is_bwd(s) && (s->kind != FG_KIND_FWD || !spec_is_wgmma(s) || dtype_is_fp8(s->dtype)),
     FG_ERR_UNSUPPORTED,
     "varlen=1 (sequences of their own lengths) is a variant of the sm_90a forward (kind=fwd, arch sm_90a) in fp16 "
     "or bf16, or of the backward (kind=bwd); other targets run such forward calls on the serving kernel (kind=serve)")
RULE(warps, !spec_is_wgmma(s) && s->warps != 1 && s->warps != 2 && s->warps != 4 && s->warps != 8, FG_ERR_UNSUPPORTED,
     "warps %d is not supported: it must be 1, 2, 4 or 8", s->warps)
RULE(block_m_mma, !spec_is_wgmma(s) && !is_bwd(s) && !is_serve(s) && (s->block_m % (16 * s->warps) != 0 || (m_tiles(s) != 1 && m_tiles(s) != 2)), FG_ERR_UNSUPPORTED,
     "block_m %d with %d warps is not supported: each warp owns 16 or 32 query rows (the MMA's m16), so block_m "
     "must be 16 or 32 times warps", s->block_m, s->warps)
RULE(block_n_mma, s->block_n % 16 != 0 || s->block_n < 16 || s->block_n > 256, FG_ERR_UNSUPPORTED,
     "block_n %d is not supported: it must be a multiple of 16 from 16 to 256 (the MMA's k16 steps over keys)", s->block_n)
RULE(fp8_block_n, dtype_is_fp8(s->dtype) && s->block_n % 32 != 0, FG_ERR_UNSUPPORTED,
     "block_n %d is not supported for dtype %s: it must be a multiple of 32 (the FP8 P.V mma's k is 32 keys)",
     s->block_n, dtype_name(s->dtype))
RULE(stages, s->stages < (spec_is_wgmma(s) ? 2 : 1) || s->stages > 4, FG_ERR_UNSUPPORTED,
     "stages %d is not supported: the K/V pipeline has 2 to 4 stages (the mma.sync forward also 1: one K and one "
     "V buffer, each loading while the other is used; the mma.sync backward's query blocks 1 or 2)", s->stages)
RULE(registers, !spec_is_wgmma(s) && !is_bwd(s) && !is_serve(s) && spec_fwd_sub_n(s) == 0, FG_ERR_UNSUPPORTED,
     "block_m %d, block_n %d, warps %d at head_dim %d need %d accumulator registers per thread, and %d in the "
     "narrowest key steps (limit %d of 255 before spilling): use more warps", s->block_m, s->block_n, s->warps,
     s->head_dim, acc_registers(s), m_tiles(s) * (spec_head_dim_padded(s) / 2 + (dtype_is_fp8(s->dtype) ? 16 : 8)),
     FG_SPEC_ACC_REGS)
RULE(smem, arch_smem_limit(s->arch) != 0 && spec_smem_bytes(s) > arch_smem_limit(s->arch), FG_ERR_UNSUPPORTED,
     "block_m %d, block_n %d, stages %d at head_dim %d need %zu bytes of shared memory%s, more than sm_%d's %zu",
     s->block_m, s->block_n, s->stages, s->head_dim, spec_smem_bytes(s),
     spec_fp8_o_flush_smem(s) ? " (FP8 tiles and O's fp32 level, block_m x head_dim x 4 bytes)"
     : dtype_is_fp8(s->dtype) ? " (FP8 tiles, or the 16-bit O staged at the end, whichever is larger)"
                                   : "",
     s->arch, arch_smem_limit(s->arch))

#define R(id, st) {#id, refuse_##id, say_##id, st}
static const rule rules[] = {
    R(kind, FG_ERR_INVALID_ARGUMENT),   R(arch_known, FG_ERR_UNSUPPORTED), R(arch_accel, FG_ERR_UNSUPPORTED),
    R(dtype_half, FG_ERR_UNSUPPORTED),  R(fp8_arch, FG_ERR_UNSUPPORTED),   R(fp8_out, FG_ERR_UNSUPPORTED),
    R(head_dim_range, FG_ERR_UNSUPPORTED), R(fp8_head_dim, FG_ERR_UNSUPPORTED), R(head_dim_v, FG_ERR_UNSUPPORTED),
    R(bwd_arch, FG_ERR_UNSUPPORTED), R(bwd_wgmma, FG_ERR_UNSUPPORTED),
    R(bwd_tma, FG_ERR_UNSUPPORTED),     R(bwd_dtype, FG_ERR_UNSUPPORTED),   R(wgmma_dtype, FG_ERR_UNSUPPORTED),
    R(wgmma_head_dim, FG_ERR_UNSUPPORTED), R(tiles_set, FG_ERR_INVALID_ARGUMENT), R(wgmma_block_m, FG_ERR_UNSUPPORTED),
    R(wgmma_warps, FG_ERR_UNSUPPORTED), R(wgmma_registers, FG_ERR_UNSUPPORTED), R(bwd_tiles, FG_ERR_UNSUPPORTED),
    R(bwd_registers, FG_ERR_UNSUPPORTED), R(serve_dtype, FG_ERR_UNSUPPORTED), R(serve_tiles, FG_ERR_UNSUPPORTED),
    R(serve_splits, FG_ERR_UNSUPPORTED), R(serve_threads, FG_ERR_UNSUPPORTED), R(serve_tma, FG_ERR_UNSUPPORTED),
    R(serve_wide, FG_ERR_UNSUPPORTED), R(v_in_k, FG_ERR_UNSUPPORTED), R(kv_fp8_kind, FG_ERR_UNSUPPORTED),
    R(kv_fp8_dtype, FG_ERR_INVALID_ARGUMENT), R(kv_fp8_tma, FG_ERR_UNSUPPORTED), R(kv_fp8_v_in_k, FG_ERR_UNSUPPORTED),
    R(kv_fp8_head_dim, FG_ERR_UNSUPPORTED), R(model_variants, FG_ERR_UNSUPPORTED),
    R(mod_kind, FG_ERR_UNSUPPORTED), R(mod_known, FG_ERR_UNSUPPORTED), R(serve_registers, FG_ERR_UNSUPPORTED), R(fwd_varlen, FG_ERR_UNSUPPORTED), R(warps, FG_ERR_UNSUPPORTED),       R(block_m_mma, FG_ERR_UNSUPPORTED), R(block_n_mma, FG_ERR_UNSUPPORTED),
    R(fp8_block_n, FG_ERR_UNSUPPORTED), R(stages, FG_ERR_UNSUPPORTED),      R(registers, FG_ERR_UNSUPPORTED),
    R(smem, FG_ERR_UNSUPPORTED),
};
#define NRULES ((int)(sizeof rules / sizeof rules[0]))

int spec_rule_count(void) { return NRULES; }
const char *spec_rule_name(int i) { return i >= 0 && i < NRULES ? rules[i].name : NULL; }

fg_status spec_validate(const fg_spec *spec, fg_error *err) {
    /* the merge kernel has no tiles, dtype or head dim: the rules of the kind and the arch are its all */
    const int rules_of_merge = 3;
    for (int i = 0; i < (spec->kind == FG_KIND_MERGE ? rules_of_merge : NRULES); i++)
        if (rules[i].refuse(spec)) {
            fg_error tmp;
            rules[i].say(spec, &tmp);
            return fg_fail(err, rules[i].status, "%s", tmp.msg);
        }
    return FG_OK;
}
