/* tile_policy.c: the default tile sizes of each variant, as data (rules matched last-first), so a Lua
 * config or the tuning database can override any of them without touching code.
 * The built-in table comes from a sweep on an H200 (bench/results/2026-11-29-h200-tile-sweep.md):
 *   - head_dim <= 64: 128 x 64, 4 warps (32 query rows each), 3 stages;
 *   - head_dim <= 128: 128 x 32, 4 warps, 3 stages;
 *   - head_dim <= 256: 128 x 64, 8 warps, 2 stages;
 * and smaller tiles where the target has less shared memory (sm_80's 163 KiB; sm_86/89/120's 99 KiB).
 * Hopper (sm_90) has its own rules from a `flashgen tune configs/tune_fwd.lua` sweep on an H200 (2592
 * candidates; bench/results/2026-11-29-h200-tune/): per head dim and mask, the tile whose time was
 * closest to each class's winner over seqlen 512/2k/8k and both dtypes. A tuned database still picks
 * per bucket; these are what an untuned H100/H200 runs.
 * 32 rows per warp halves the shared-memory reads of K and V per FLOP (each fragment serves two m16
 * tiles), which is what this kernel is bound by at small head dims; it needs ~160 accumulator
 * registers, so block_n shrinks as head_dim grows (validate.c's register rule): 128 x 64 at d 128
 * measured faster still (329 vs 307 TFLOP/s causal at 4k) but spills 20 bytes, and shipped variants
 * do not spill. */
#include <stdlib.h>
#include <string.h>
#include "spec.h"

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
    /* sm_90 (H200 sweep). Within 5% of each class's winner except where noted. */
    {90, 90, 8, 64, 0, -1, 128, 96, 4, 3, FG_FAMILY_MMA, FG_KIND_FWD},          /* 2k/8k winner; 8% behind 64x64 at 512 */
    /* The next two from the session-7 database (bench/results/2026-11-29-h200-session7/final/; its 8 buckets a
     * class, bf16 and fp16, 512-8k): d 64 causal 128 x 64 in 2 stages, 1.019x the per-bucket best in geomean
     * (64 x 64 x 3 stages 1.032x); d 128 non-causal 128 x 48, spill-free since the loaders recompute their
     * offsets (cp_async.cuh), the best in every bucket (128 x 32 1.036x). */
    {90, 90, 8, 64, 1, -1, 128, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {90, 90, 65, 128, 0, -1, 128, 48, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    {90, 90, 65, 128, 1, -1, 128, 48, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD},
    /* d 193-256: FlashAttention-2's Hopper tile, 64 x 64 on 4 warps in one stage (96 KiB: two CTAs an SM), the
     * winner of all 16 head_dim 256 classes of the H200 tune (bench/results/2026-11-29-h200-session7/),
     * 3.7-14% ahead of the 128 x 64 x 8 above. */
    {90, 90, 193, 256, -1, -1, 64, 64, 4, 1, FG_FAMILY_MMA, FG_KIND_FWD},
    /* FP8 (e4m3, e5m2) on sm_89 and sm_90. FP8 mma.sync is native (QMMA) on sm_89 but emulated on sm_90
     * (each m16n8k32 becomes fp8 -> f16 unpacks and two HMMAs), which costs registers. sm_89: from ptxas
     * reports (NVRTC 13.0). sm_90: the winners of `flashgen tune configs/tune_fwd_fp8.lua` on an H200
     * (bench/results/2026-11-29-h200-fp8/), 10-30% faster than 16 rows per warp. d 129-256 spills on sm_90
     * with every tile tried (128x64 8 warps: 52 bytes, the least, when measured; 1044 on NVRTC 13.0 with the
     * kernel as of session 7, 64x32 4 warps 468); the default bundle leaves it to JIT there, and Hopper runs
     * FP8 on the sm_90a family unless FLASHGEN_WGMMA_FP8=0. block_n is a multiple of 32 (the FP8 P.V mma's k: fp8_block_n). */
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
    /* sm_90a: the wgmma family (forward_wgmma.cuh), 16-bit. block_m is 64 per consumer warpgroup, warps
     * 4 per warpgroup plus the producer's 4. Starting points from FlashAttention-3's tiles, within this
     * kernel's register budget (validate.c): d 64 192 x 128 (3 consumers, 160 registers each), d 128
     * 128 x 128, d 256 128 x 80 (the largest that fits 227 KiB with 2 stages); then, from `flashgen tune
     * configs/tune_fwd_sm90a.lua` on an H200 with the persistent, double-buffered-Q kernel
     * (bench/results/2026-11-29-h200-sm90a/tuned/), d 128 non-causal 128 x 160: the winner at 2k (657
     * TFLOP/s; 128 x 192 618), 0.7% behind 128 x 192 at 8k. Causal keeps 128 x 128 (the winner at 2k; 128
     * x 192 wins 8k by 2.3%, which a tuned database picks). */
    {90, 90, 32, 64, -1, -1, 192, 128, 16, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 65, 128, -1, -1, 128, 128, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 97, 128, 0, -1, 128, 160, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 129, 192, -1, -1, 128, 96, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    {90, 90, 193, 256, -1, -1, 128, 80, 12, 2, FG_FAMILY_WGMMA, FG_KIND_FWD},
    /* sm_90a FP8 (e4m3, e5m2; head_dim a multiple of 64, block_n a multiple of 32 up to 256: validate.c).
     * FlashAttention-3's d 128 FP8 tile is 128 x 224: on an H200 (session 13, bench/fp8.py, same calls) it
     * ran 3-7% faster than 128 x 128 at 8k-16k and 7-9% slower at 2k (0.995x overall), so the policy keeps
     * 128 x 128 and a tuned database may take 224 (tune_fwd_sm90a_fp8.lua). Since the two-level
     * accumulation (forward_wgmma.cuh FG_O_FLUSH, 2026-11-30) O's second copy leaves no room for 128 x 192/224 at
     * d 128 in registers; with three consumers O's level is in shared memory, and there 192 x 128 spills
     * (168 bytes) and 192 x 64 ran 0.82x of 128 x 128 (H200, 2k-16k, session 16 call 2). d 64 192 x 128,
     * three consumers with the level in shared memory: 1.097x 128 x 128 at 4k and 16k (8 pairs, session 16
     * call 1); in single runs +7-13% at 2k-16k, +3% at 512 non-causal, -8% at 512-1k causal (call 2's
     * fp8_full against session 15's). */
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
    /* The backward (backward_mma.cuh; validate.c's bwd rules): block_n = 16 x warps keys, block_m 32, 64 or
     * 128 query rows a step. The widest tiles that compile (fp32 dQ traffic per FLOP falls as block_n
     * grows, and shared-memory reads per MMA as block_m grows), though ptxas spills at d 96 (4-16 bytes)
     * and d 128 (44-68) on NVRTC 13.0: on the H200 d 64 128 x 128 ran 1.15x 64 x 128, which ran 1.4x
     * 32 x 128; d 128 64 x 128 ran 1.3x 32 x 128 (bench/results/2026-11-29-h200-session4/bwd-steps/).
     * Spilling variants compile at first use, or go into a bundle with `flashgen bundle --allow-spills`.
     * Other multiples of 16 up to 128: 32 x 32 with 2 warps. Above 128 (multiples of 32) 64 x 64 with 8
     * warps, 8 keys a warp (FlashAttention-2's tile there): dK and dV take d / 2 registers a thread. */
    {80, 999, 16, 64, -1, -1, 32, 32, 2, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 64, 64, -1, -1, 64, 128, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD}, /* spill-free before sm_90 */
    {90, 999, 64, 64, -1, -1, 128, 128, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 65, 128, -1, -1, 32, 32, 2, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 96, 96, -1, -1, 64, 128, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 128, 128, -1, -1, 64, 128, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {80, 999, 129, 256, -1, -1, 64, 64, 8, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    /* sm_90a (backward_wgmma.cuh, wgmma): two warpgroups of 64 keys; 64 queries a step at head_dim 128, 128 at
     * 64 (dQ split by query rows; FlashAttention-3's tile there); at 128 without a causal mask 80
     * (FlashAttention-3's tile there, dQ^T = K^T dS^T): 1.057-1.072x 64 from 1k to 16k queries on the H200
     * (bf16, session 17 call 3), and dispatch takes 64 where 80 would pad over 4% more rows (512). */
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
    /* 99 KiB parts: 64 keys a block from head_dim 64 */
    {86, 86, 64, 128, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {89, 89, 64, 128, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {120, 121, 64, 128, -1, -1, 32, 64, 4, 2, FG_FAMILY_MMA, FG_KIND_BWD},
    {86, 86, 129, 160, -1, -1, 64, 64, 8, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {89, 89, 129, 160, -1, -1, 64, 64, 8, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {120, 121, 129, 160, -1, -1, 64, 64, 8, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {86, 86, 161, 192, -1, -1, 64, 32, 4, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {89, 89, 161, 192, -1, -1, 64, 32, 4, 1, FG_FAMILY_MMA, FG_KIND_BWD},
    {120, 121, 161, 192, -1, -1, 64, 32, 4, 1, FG_FAMILY_MMA, FG_KIND_BWD},
};

fg_status tile_policy_add(fg_tile_policy *p, const fg_tile_rule *r, fg_error *err) {
    if (p->count == p->cap) {
        int cap = p->cap ? p->cap * 2 : 16;
        fg_tile_rule *n = realloc(p->rules, (size_t)cap * sizeof *n);
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

fg_status spec_fill_tiles(fg_spec *s, const fg_tile_policy *p, fg_error *err) {
    if (s->block_m && s->block_n && s->warps && s->stages) return FG_OK;
    const fg_tile_rule *r = tile_policy_lookup(p, s);
    if (!r) {
        char arch[16];
        spec_arch_format(s->arch, s->arch_accel, arch, sizeof arch);
        return fg_fail(err, FG_ERR_UNSUPPORTED,
                       "no tile policy rule covers arch %s, head_dim %d, causal %d, dtype %s: give block_m, "
                       "block_n, warps and stages explicitly or add a tile_policy rule",
                       arch, s->head_dim, s->causal, spec_dtype_name(s->dtype));
    }
    if (!s->block_m) s->block_m = r->block_m;
    if (!s->block_n) s->block_n = r->block_n;
    if (!s->warps) s->warps = r->warps;
    if (!s->stages) s->stages = r->stages;
    return FG_OK;
}
