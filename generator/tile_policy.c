/* tile_policy.c: the default tile sizes of each variant, as data (rules matched last-first), so a Lua
 * config or the tuning database can override any of them without touching code. Each group of rules
 * says in one line why it is what it is; the measurements behind them are in docs/performance.md.
 *   - the mma.sync forward, head_dim <= 64: 128 x 64, 4 warps (32 query rows each), 3 stages;
 *   - head_dim <= 128: 128 x 32, 4 warps, 3 stages;
 *   - head_dim <= 256: 128 x 64, 8 warps, 2 stages;
 * and smaller tiles where the target has less shared memory (sm_80's 163 KiB; sm_86/89/120's 99 KiB).
 * sm_90 (the mma.sync family on Hopper) has its own rules: per head dim and mask, the tile closest to
 * each class's winner of a `flashgen tune configs/tune_fwd.lua` sweep over seqlen 512-8k and both
 * dtypes. A tuned database still picks per bucket; these are what an untuned H100/H200 runs.
 * 32 rows per warp halves the shared-memory reads of K and V per FLOP (each fragment serves two m16
 * tiles), which is what this kernel is bound by at small head dims; it needs ~160 accumulator
 * registers, so block_n shrinks as head_dim grows (validate.c's register rule): shipped variants do
 * not spill, so 128 x 64 at d 128, faster but spilling 20 bytes, is not the default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "generator/tile_policy.h"
#include "generator/spec.h"
#include "generator/validate.h" /* arch_smem_limit */
#include "generator/mod.h"
#include "core/alloc.h"

/* arch range, head_dim range, causal, dtype, block_m, block_n, warps, stages, family */
static const fg_tile_rule default_rules[] = {
    {80, 999, 8, 64, -1, -1, 128, 64, 4, 3, FG_FAMILY_MMA, FG_KIND_FWD},
    {80, 999, 65, 128, -1, -1, 128, 32, 4, 3, FG_FAMILY_MMA, FG_KIND_FWD},
    {80, 999, 129, 256, -1, -1, 128, 64, 8, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    /* sm_80/sm_87 (163 KiB): 128 x 64 x 8 warps needs 192 KiB at d 256 */
    {80, 80, 193, 256, -1, -1, 64, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {87, 87, 193, 256, -1, -1, 64, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    /* 99 KiB parts */
    {86, 86, 129, 256, -1, -1, 64, 32, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {89, 89, 129, 256, -1, -1, 64, 32, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {120, 121, 129, 256, -1, -1, 64, 32, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    /* sm_90, the mma.sync family on Hopper: within 5% of each class's tuned winner except where noted. */
    {90, 90, 8, 64, 0, -1, 128, 96, 4, 3, FG_FAMILY_MMA, FG_KIND_FWD},          /* wins 2k/8k; 8% behind 64x64 at 512 */
    /* d 64 causal: 128 x 64 in 2 stages, the closest single tile to each bucket's best (bf16 and fp16, 512-8k);
     * d 128: 128 x 48, spill-free because the loaders recompute their offsets (cp_async.cuh), best in every
     * bucket. */
    {90, 90, 8, 64, 1, -1, 128, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {90, 90, 65, 128, 0, -1, 128, 48, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {90, 90, 65, 128, 1, -1, 128, 48, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    /* d 193-256: FlashAttention-2's Hopper tile, 64 x 64 on 4 warps in one stage (96 KiB: two CTAs an SM),
     * the tuned winner of every head_dim 256 class, ahead of the 128 x 64 x 8 above. */
    {90, 90, 193, 256, -1, -1, 64, 64, 4, 1, FG_FAMILY_MMA, FG_KIND_FWD},
    /* FP8 (e4m3, e5m2) on sm_89 and sm_90. FP8 mma.sync is native (QMMA) on sm_89 but emulated on sm_90
     * (each m16n8k32 becomes fp8 -> f16 unpacks and two HMMAs), which costs registers. sm_89: the largest
     * tiles ptxas (NVRTC 13.0) compiles without spills. sm_90: the winners of `flashgen tune
     * configs/tune_fwd_fp8.lua`, with 32 rows per warp. d 129-256 spills on sm_90 with every tile (128 x 64 on
     * 8 warps the least), so the default bundle leaves it to JIT there, and Hopper runs FP8 on the wgmma
     * family (sm_90a) unless FLASHGEN_WGMMA_FP8=0. block_n is a multiple of 32 (the FP8 P.V mma's k: fp8_block_n). */
    {89, 89, 8, 128, -1, FG_DTYPE_E4M3, 128, 64, 8, 2, FG_FAMILY_MMA, FG_KIND_FWD},   /* 127 / 178 registers */
    {89, 89, 8, 128, -1, FG_DTYPE_E5M2, 128, 64, 8, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {89, 89, 129, 256, -1, FG_DTYPE_E4M3, 128, 32, 8, 2, FG_FAMILY_MMA, FG_KIND_FWD}, /* 209 registers, 64 KiB of the 99 */
    {89, 89, 129, 256, -1, FG_DTYPE_E5M2, 128, 32, 8, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {90, 90, 8, 64, 0, FG_DTYPE_E4M3, 128, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},     /* 255 registers, no spill */
    {90, 90, 8, 64, 0, FG_DTYPE_E5M2, 128, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {90, 90, 8, 64, 1, FG_DTYPE_E4M3, 64, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {90, 90, 8, 64, 1, FG_DTYPE_E5M2, 64, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {90, 90, 65, 128, -1, FG_DTYPE_E4M3, 64, 32, 4, 3, FG_FAMILY_MMA, FG_KIND_FWD},   /* 226 registers */
    {90, 90, 65, 128, -1, FG_DTYPE_E5M2, 64, 32, 4, 3, FG_FAMILY_MMA, FG_KIND_FWD},
    {90, 90, 129, 256, -1, FG_DTYPE_E4M3, 128, 64, 8, 2, FG_FAMILY_MMA, FG_KIND_FWD}, /* spills (see above) */
    {90, 90, 129, 256, -1, FG_DTYPE_E5M2, 128, 64, 8, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    /* The wgmma family (sm_90a, forward_wgmma.cuh), 16-bit. block_m is 64 per consumer warpgroup, warps 4 per
     * warpgroup plus the producer's 4. FlashAttention-3's tiles within this kernel's register budget
     * (validate.c): d 64 192 x 128 (3 consumers, 160 registers each), d 128 128 x 128, d 256 128 x 80 (the
     * largest that fits 227 KiB with 2 stages). d 128 non-causal 128 x 160: the tuned winner at 2k and within
     * 1% at 8k (`flashgen tune configs/tune_fwd_sm90a.lua`); causal keeps 128 x 128, the winner at 2k (128 x 192
     * wins longer sequences by a little, which a tuned database picks). */
    {90, 90, 32, 64, -1, -1, 192, 128, 16, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 65, 128, -1, -1, 128, 128, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 97, 128, 0, -1, 128, 160, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 129, 192, -1, -1, 128, 96, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 193, 256, -1, -1, 128, 80, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    /* The wgmma family's FP8 (e4m3, e5m2; head_dim a multiple of 64, block_n a multiple of 32 up to 256:
     * validate.c). d 128: 128 x 128. FlashAttention-3's 128 x 224 is no faster overall, and the two-level
     * accumulation (forward_wgmma.cuh FG_O_FLUSH) leaves no registers for 128 x 192/224 beside O's second copy;
     * with three consumers O's level moves to shared memory, where 192 x 128 spills and 192 x 64 is slower.
     * d 64: 192 x 128, three consumers with the level in shared memory, faster than 128 x 128 from 2k keys. */
    {90, 90, 64, 128, -1, FG_DTYPE_E4M3, 128, 128, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 64, 128, -1, FG_DTYPE_E5M2, 128, 128, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 64, 64, -1, FG_DTYPE_E4M3, 192, 128, 16, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 64, 64, -1, FG_DTYPE_E5M2, 192, 128, 16, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    /* above d 128 O's fp32 level lives in shared memory (block_m x d x 4 bytes; forward_wgmma.cuh
     * FG_O_FLUSH_SMEM): d 192 64 x 128, one consumer warpgroup (with two, 128 x 64/96/128 spill 4-24 bytes),
     * d 256 128 x 64 (230544 bytes) */
    {90, 90, 129, 192, -1, FG_DTYPE_E4M3, 64, 128, 8, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 129, 192, -1, FG_DTYPE_E5M2, 64, 128, 8, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 193, 256, -1, FG_DTYPE_E4M3, 128, 64, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 193, 256, -1, FG_DTYPE_E5M2, 128, 64, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    /* The serving forward (forward_serving.cuh) for prefill: 64 rows on 4 warps, one m16 tile each, 64 keys a
     * block (32 above head_dim 128, the register rule's limit beside O). Decode tiles (block_m 16 or 32: the
     * runtime sets it when a call packs at most 32 rows) are serve_decode_tiles's. */
    {80, 999, 8, 128, -1, -1, 64, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_SERVE},
    {80, 999, 129, 256, -1, -1, 64, 32, 4, 2, FG_FAMILY_MMA, FG_KIND_SERVE},
    /* Above 256 (Q/K up to 576, V up to 512: absorbed MLA, head_dim 512): 32 rows on 2 x 2 warps, 32 keys a block;
     * with V wider than 256 the two key warps split O's columns (FG_WIDE), 128 registers of O each at 512. */
    {80, 999, 257, 576, -1, -1, 32, 32, 4, 2, FG_FAMILY_MMA, FG_KIND_SERVE},
    /* The mma.sync backward (backward_mma.cuh; validate.c's bwd rules): block_n = 16 x warps keys, block_m 32,
     * 64 or 128 query rows a step. The widest tiles that compile (fp32 dQ traffic per FLOP falls as block_n
     * grows, and shared-memory reads per MMA as block_m grows), though ptxas spills at d 96 (4-16 bytes)
     * and d 128 (44-68) on NVRTC 13.0: the wider tile still wins (d 64 128 x 128 1.15x 64 x 128 on Hopper).
     * Spilling variants compile at first use, or go into a bundle with `flashgen bundle --allow-spills`.
     * Other head dims up to 128: 32 x 32 with 2 warps. Above 128 64 x 64 with 8 warps, 8 keys a warp
     * (FlashAttention-2's tile there): dK and dV take d / 2 registers a thread. The kernel computes on the
     * padded head dim (16s, above 128 32s: spec_bwd_head_dim_padded), so a head dim takes the tile of the
     * one it pads to: 49-64 that of 64, 81-96 of 96, 113-128 of 128. */
    {80, 999, 8, 64, -1, -1, 32, 32, 2, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 49, 64, -1, -1, 64, 128, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD}, /* spill-free before sm_90 */
    {90, 999, 49, 64, -1, -1, 128, 128, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 65, 128, -1, -1, 32, 32, 2, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 81, 96, -1, -1, 64, 128, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 113, 128, -1, -1, 64, 128, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 129, 256, -1, -1, 64, 64, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    /* The wgmma family's backward (sm_90a, backward_wgmma.cuh): two warpgroups of 64 keys; 64 queries a step at
     * head_dim 128, 128 at 64 (dQ split by query rows; FlashAttention-3's tile there); at 128 without a causal
     * mask 80 (FlashAttention-3's tile there, dQ^T = K^T dS^T), faster than 64 from 1k queries; dispatch
     * takes 64 where 80 would pad over 4% more rows (512). */
    {90, 90, 64, 64, -1, -1, 128, 128, 8, 2, FG_FAMILY_WGMMA, FG_KIND_BWD},
    {90, 90, 65, 128, -1, -1, 64, 128, 8, 2, FG_FAMILY_WGMMA, FG_KIND_BWD},
    {90, 90, 128, 128, 0, -1, 80, 128, 8, 2, FG_FAMILY_WGMMA, FG_KIND_BWD},
    /* One stage of query blocks where two do not fit (the next block loads behind the dQ product; FlashAttention-2
     * single-buffers these tiles too): above head_dim 192 on an A100 or Orin (163 KiB; 64 x 64 in two stages needs
     * 214016 bytes at d 256), and on 99 KiB parts 64 x 64 at 129-160 (98816 bytes at d 160) and 64 x 32 on 4 warps
     * at 161-192 (82432 bytes). Past 192 those parts have no backward tile: K and V of 64 keys alone take 64 KiB at
     * d 256, and narrower warp tiles need more dK, dV registers than a thread has. ptxas (NVRTC 13.0) spills
     * 24-56 bytes at d 224-256 on sm_80 (these compile at first use; bundles take them with --allow-spills). */
    {80, 87, 193, 256, -1, -1, 64, 64, 8, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    /* 99 KiB parts: 64 keys a block at (padded) head_dim 64, 96 and 128; at 80 and 112 the dQ product's split
     * of 32 x 64 on 4 warps does not divide head_dim / 8, so those keep 32 x 32 on 2 warps. */
    {86, 86, 49, 64, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {86, 86, 81, 96, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {86, 86, 113, 128, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {89, 89, 49, 64, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {89, 89, 81, 96, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {89, 89, 113, 128, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {120, 121, 49, 64, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {120, 121, 81, 96, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {120, 121, 113, 128, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    /* Hopper at (padded) head_dim 80 to 112: 64 x 64 on 4 warps, one stage (`flashgen tune` on an H100, bf16, 4k:
     * 1.50-1.55x the 32 x 32 tile at d 72 and 80, 1.11x the 64 x 128 one at d 96, 1.42x 32 x 32 at d 104, where it
     * spills 84 bytes and still wins). */
    {90, 90, 65, 112, -1, -1, 64, 64, 4, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {86, 86, 129, 160, -1, -1, 64, 64, 8, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {89, 89, 129, 160, -1, -1, 64, 64, 8, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {120, 121, 129, 160, -1, -1, 64, 64, 8, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {86, 86, 161, 192, -1, -1, 64, 32, 4, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {89, 89, 161, 192, -1, -1, 64, 32, 4, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {120, 121, 161, 192, -1, -1, 64, 32, 4, 1, FG_FAMILY_MMA, FG_KIND_BWD},
};

fg_status tile_policy_add(fg_tile_policy *p, const fg_tile_rule *r, fg_error *err) {
    if (p->count >= FG_TILE_POLICY_MAX_RULES)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the tile policy already holds %d rules, the most it takes (each "
                       "variant is matched against every rule)", FG_TILE_POLICY_MAX_RULES);
    if (p->count == p->cap) {
        int cap = p->cap ? p->cap * 2 : 16;
        fg_tile_rule *n = fg_realloc(p->rules, (size_t)cap * sizeof *n);
        if (!n) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory growing the tile policy");
        p->rules = n;
        p->cap = cap;
    }
    p->rules[p->count++] = *r;
    return FG_OK;
}

fg_status tile_policy_init_default(fg_tile_policy *p, fg_error *err) {
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < sizeof default_rules / sizeof default_rules[0]; i++) {
        fg_status st = tile_policy_add(p, &default_rules[i], err);
        if (st != FG_OK) {
            tile_policy_free(p);
            return st;
        }
    }
    return FG_OK;
}

fg_status tile_policy_copy(fg_tile_policy *dst, const fg_tile_policy *src, fg_error *err) {
    memset(dst, 0, sizeof *dst);
    for (int i = 0; i < src->count; i++) {
        fg_status st = tile_policy_add(dst, &src->rules[i], err);
        if (st != FG_OK) {
            tile_policy_free(dst);
            return st;
        }
    }
    return FG_OK;
}

void tile_policy_free(fg_tile_policy *p) {
    free(p->rules);
    memset(p, 0, sizeof *p);
}

const fg_tile_rule *tile_policy_lookup(const fg_tile_policy *p, const fg_spec *s) {
    for (int i = p->count - 1; i >= 0; i--) {
        const fg_tile_rule *r = &p->rules[i];
        if (s->arch < r->arch_min || s->arch > r->arch_max) continue;
        if (s->head_dim < r->head_dim_min || s->head_dim > r->head_dim_max) continue;
        if (r->causal >= 0 && r->causal != (s->causal != 0)) continue;
        if (r->dtype >= 0 && r->dtype != (int)s->dtype) continue;
        if (r->family != FG_FAMILY_ANY &&
            (r->family == FG_FAMILY_WGMMA) != (spec_is_wgmma(s) || spec_is_wgmma_bwd(s)))
            continue;
        if (r->kind != (int)s->kind) continue;
        return r;
    }
    return NULL;
}

/* The serving forward's decode tiles (block_m 16 or 32 packed rows): 4 warps split over the keys of 64-key
 * blocks, in as many stages as the arch's shared memory holds, up to 4 (the bytes in flight that keep HBM
 * busy from one CTA an SM); where two stages of 64 keys do not fit (head_dim above 192 on 99 KiB parts, above
 * 256 on Hopper), 32-key blocks over 2 key warps. A wide variant (V above 256 columns, split over the key
 * warps) takes 4 key warps a row tile, 2 in 32-key blocks where 2 warps have a thread for each 16 bytes of a
 * K or V row. What fits nowhere keeps the first tiles, for the shared-memory rule to name the limit. */
static void serve_decode_tiles(fg_spec *s) {
    const fg_spec given = *s;
    const int rows = s->block_m / 16; /* row tiles */
    fg_spec first = given;
    for (int narrow = 0; narrow < 2; narrow++) {
        *s = given;
        if (narrow && spec_serve_wide(s) && !s->warps && rows * 2 * 32 < spec_row_chunks(s)) break;
        if (!s->block_n) s->block_n = narrow ? 32 : 64;
        if (!s->warps) s->warps = spec_serve_wide(s) ? rows * (narrow ? 2 : 4) : narrow ? s->block_m / 8 : 4;
        if (!s->stages)
            for (s->stages = 4; s->stages > 2 && spec_smem_bytes(s) > arch_smem_limit(s->arch); s->stages--) {
            }
        if (spec_smem_bytes(s) <= arch_smem_limit(s->arch)) return;
        if (!narrow) first = *s;
    }
    *s = first;
}

/* A custom mod's registers come on top of the tile's: at head dims up to 128 it takes 128-query tiles on two consumer
 * warpgroups, which compile spill-free with the shipped examples, where the default rules' 128 x 160 (d 128) and
 * 192 x 128 (d 64) tiles spill 940 to 1256 bytes (NVRTC 13.0). Their key blocks: 128 at d 64; at d 128, 64 for a mod
 * that loads from an aux array at an index that moves with q or kv (a table load a score, or a mask with a block map
 * of 64-key blocks) and 96 for others, as measured fastest on an H100 for the shipped examples (bias table, document,
 * block sparse at 64; ALiBi, softcap, prefix-LM, window at 96). */
int spec_mod_tiles(fg_spec *s) {
    if (!s->mod[0] || !spec_is_wgmma(s) || s->head_dim > 128 || spec_head_dim_v(s) > 128) return 0;
    const fg_mod *m = mod_lookup(s->mod);
    s->block_m = 128, s->warps = 12, s->stages = 2;
    s->block_n = s->head_dim <= 64 && spec_head_dim_v(s) <= 64 ? 128 : m && mod_loads_by_position(m) ? 64 : 96;
    return 1;
}

fg_status spec_fill_tiles(fg_spec *s, const fg_tile_policy *p, fg_error *err) {
    if (s->kind == FG_KIND_MERGE) return FG_OK; /* no tiles */
    if (s->block_m && s->block_n && s->warps && s->stages) return FG_OK;
    if (!s->block_m && !s->block_n && !s->warps && !s->stages && spec_mod_tiles(s)) return FG_OK;
    if (s->kind == FG_KIND_SERVE && (s->block_m == 16 || s->block_m == 32)) {
        serve_decode_tiles(s);
        return FG_OK;
    }
    /* A variant whose V is wider than Q and K takes the tiles of V's head dim (O's registers and staging; the
     * backward's dV registers and V, dO tiles). A backward variant takes those of Q's head dim instead where the
     * wider one's tiles are not valid for it: with the default rules, where they do not split Q's padded head dim
     * (the dQ product's warp split: 64 x 128 on 8 warps at V's 128 with Q's 48), and Q's tile there, 32 x 32 on
     * 2 warps, holds V up to 128. The spec is validated afterwards either way. */
    fg_spec key = *s;
    if (spec_head_dim_v(s) > s->head_dim) key.head_dim = spec_head_dim_v(s);
    if (s->kind == FG_KIND_BWD && spec_head_dim_v(s) != s->head_dim && !s->block_m && !s->block_n && !s->warps &&
        !s->stages) {
        const fg_tile_rule *wide = tile_policy_lookup(p, &key);
        fg_spec t = *s;
        fg_error quiet;
        if (wide) t.block_m = wide->block_m, t.block_n = wide->block_n, t.warps = wide->warps, t.stages = wide->stages;
        if (!wide || spec_validate(&t, &quiet) != FG_OK) key.head_dim = s->head_dim;
    }
    const fg_tile_rule *r = tile_policy_lookup(p, &key);
    if (!r) {
        char arch[16];
        spec_arch_format(s->arch, s->arch_accel, arch, sizeof arch);
        char dv[32] = "";
        if (spec_head_dim_v(s) != s->head_dim) snprintf(dv, sizeof dv, " (V's %d)", spec_head_dim_v(s));
        return fg_fail(err, FG_ERR_UNSUPPORTED,
                       "no tile policy rule covers arch %s, head_dim %d%s, causal %d, dtype %s: give block_m, "
                       "block_n, warps and stages explicitly or add a tile_policy rule",
                       arch, s->head_dim, dv, s->causal, dtype_name(s->dtype));
    }
    if (!s->block_m) s->block_m = r->block_m;
    if (!s->block_n) s->block_n = r->block_n;
    if (!s->warps) s->warps = r->warps;
    if (!s->stages) s->stages = r->stages;
    return FG_OK;
}
