/* test_validate.c: every validation rule (generator/validate.c), each broken once by name, and the
 * limits behind them (head dims, FP8's arches and tiles, shared memory per arch); the spec's text and
 * the tile policy are test_spec.c's. Needs no GPU. */
#include <criterion/criterion.h>
#include <string.h>
#include "generator/spec.h"
#include "generator/tile_policy.h"
#include "generator/validate.h"
#include "tests/spec_cases.h"

/* One test per rule: break exactly that rule and check the sentence names it. */
typedef struct broken {
    const char *rule;        /* validate.c's rule name */
    void (*mutate)(fg_spec *);
    const char *mention;     /* a word the sentence must contain */
} broken;

static void m_kind(fg_spec *s) { s->kind = (fg_kind)7; }
static void m_arch_known(fg_spec *s) { s->arch = 75; s->arch_accel = 0; }
static void m_arch_accel(fg_spec *s) { s->arch = 80; s->arch_accel = 1; }
static void m_dtype(fg_spec *s) { s->dtype = FG_DTYPE_F32; }
static void m_fp8(fg_spec *s) { s->dtype = FG_DTYPE_E4M3; s->out_dtype = FG_DTYPE_BF16; }
static void m_fp8_arch_80(fg_spec *s) { m_fp8(s); s->arch = 80; s->arch_accel = 0; }
static void m_fp8_arch_86(fg_spec *s) { m_fp8(s); s->dtype = FG_DTYPE_E5M2; s->arch = 86; s->arch_accel = 0; }
static void m_fp8_arch_87(fg_spec *s) { m_fp8(s); s->arch = 87; s->arch_accel = 0; }
static void m_fp8_out(fg_spec *s) { m_fp8(s); s->out_dtype = FG_DTYPE_E5M2; }
static void m_fp8_out_f32(fg_spec *s) { m_fp8(s); s->out_dtype = FG_DTYPE_F32; }
static void m_fp8_head_dim(fg_spec *s) { m_fp8(s); s->head_dim = 48; }
static void m_fp8_head_dim_small(fg_spec *s) { m_fp8(s); s->head_dim = 16; s->block_n = 32; }
static void m_fp8_block_n(fg_spec *s) { m_fp8(s); s->block_n = 48; }
static void m_head_dim_odd(fg_spec *s) { s->head_dim = 60; }
static void m_head_dim_big(fg_spec *s) { s->head_dim = 264; }
static void m_tiles(fg_spec *s) { s->block_n = 0; }
static void m_warps(fg_spec *s) { s->warps = 3; }
static void m_block_m(fg_spec *s) { s->block_m = 96; s->warps = 4; }
static void m_block_n(fg_spec *s) { s->block_n = 40; }
static void m_stages(fg_spec *s) { s->stages = 5; }
static void m_stages_wgmma(fg_spec *s) { *s = wg_base(); s->stages = 1; }
static void m_registers(fg_spec *s) { s->block_m = 128; s->warps = 4; s->block_n = 64; s->head_dim = 256; }
static void m_smem(fg_spec *s) { s->arch = 86; s->arch_accel = 0; s->head_dim = 256; s->block_n = 64; s->stages = 2; }
/* The wgmma family's rules, each broken from the valid sm_90a spec wg_base(). */
static void m_wgmma_dtype(fg_spec *s) {
    *s = wg_base(); s->dtype = FG_DTYPE_E4M3; s->out_dtype = FG_DTYPE_BF16; s->head_dim = 96; s->block_n = 64;
}
static void m_wgmma_dtype_e5m2(fg_spec *s) {
    *s = wg_base(); s->dtype = FG_DTYPE_E5M2; s->out_dtype = FG_DTYPE_BF16; s->block_n = 288;
}
static void m_wgmma_head_dim(fg_spec *s) { *s = wg_base(); s->head_dim = 48; }
static void m_wgmma_head_dim_small(fg_spec *s) { *s = wg_base(); s->head_dim = 16; }
static void m_wgmma_block_m(fg_spec *s) { *s = wg_base(); s->block_m = 96; s->warps = 8; }
static void m_wgmma_block_m_big(fg_spec *s) { *s = wg_base(); s->block_m = 256; s->warps = 20; s->block_n = 64; }
static void m_wgmma_warps(fg_spec *s) { *s = wg_base(); s->warps = 8; }
static void m_wgmma_warps_mma(fg_spec *s) { *s = wg_base(); s->block_m = 64; s->warps = 4; }
static void m_wgmma_registers(fg_spec *s) { *s = wg_base(); s->block_m = 192; s->warps = 16; s->block_n = 160; }
/* The backward's rules, each broken from bwd_base(). */
static void m_bwd_arch(fg_spec *s) { *s = bwd_base(); s->arch = 100; s->arch_accel = 1; }
static void m_bwd_wgmma(fg_spec *s) { *s = bwd_base(); s->arch_accel = 1; }
static void m_bwd_tma(fg_spec *s) { *s = bwd_base(); s->tma = 1; s->head_dim = 96; }
static void m_bwd_dtype(fg_spec *s) { *s = bwd_base(); s->dtype = FG_DTYPE_E4M3; s->out_dtype = FG_DTYPE_BF16; s->arch = 89; }
static void m_bwd_tiles_bn(fg_spec *s) { *s = bwd_base(); s->block_n = 48; }
static void m_bwd_tiles_split(fg_spec *s) { *s = bwd_base(); s->block_m = 32; s->head_dim = 80; }
static void m_bwd_tiles_split_padded(fg_spec *s) { *s = bwd_base(); s->block_m = 32; s->head_dim = 72; }
static void m_bwd_tiles_stages(fg_spec *s) { *s = bwd_base(); s->stages = 3; }
static void m_bwd_registers(fg_spec *s) { *s = bwd_base(); s->block_m = 128; s->block_n = 128; s->warps = 8; }
/* V of a head dim of its own: dK's and dV's registers both count; the dQ product splits Q's head dim, not V's. */
static void m_bwd_registers_dim_v(fg_spec *s) { *s = bwd_base(); s->head_dim_v = 256; }
static void m_bwd_tiles_dim_v(fg_spec *s) { *s = bwd_base(); s->head_dim = 48, s->head_dim_v = 128, s->block_m = 64, s->block_n = 128, s->warps = 8; }
static void m_bwd_tma_dim_v(fg_spec *s) { *s = bwd_base(); s->tma = 1, s->block_m = 64, s->head_dim_v = 96; }
static void m_head_dim_v_bwd(fg_spec *s) { *s = bwd_base(); s->head_dim_v = 100; }
static void m_head_dim_v_bwd_wg(fg_spec *s) { *s = bwd_base(); s->arch_accel = 1, s->deterministic = 0, s->block_m = 64, s->block_n = 128, s->warps = 8, s->head_dim_v = 64; }
/* The serving forward's rules, each broken from serve_base(). */
static fg_spec serve_base(void) {
    fg_spec s = base();
    s.kind = FG_KIND_SERVE;
    s.block_m = 16, s.block_n = 64, s.warps = 4, s.stages = 4;
    return s;
}
static void m_serve_dtype(fg_spec *s) { *s = serve_base(); s->dtype = FG_DTYPE_E4M3; s->out_dtype = FG_DTYPE_BF16; s->arch = 89; }
static void m_serve_tiles(fg_spec *s) { *s = serve_base(); s->block_m = 48; }
static void m_serve_tiles_keys(fg_spec *s) { *s = serve_base(); s->block_n = 48; }
static void m_serve_tiles_accel(fg_spec *s) { *s = serve_base(); s->arch_accel = 1; }
static void m_serve_splits(fg_spec *s) { *s = serve_base(); s->splits = 257; }
static void m_serve_splits_kind(fg_spec *s) { s->splits = 4; }
static void m_fwd_varlen(fg_spec *s) { s->varlen = 1; } /* base() is the mma.sync family (sm_90) */
static void m_fwd_varlen_fp8(fg_spec *s) { s->varlen = 1, s->arch = 90, s->arch_accel = 1, s->dtype = FG_DTYPE_E4M3, s->out_dtype = FG_DTYPE_BF16; s->block_m = 128, s->block_n = 128, s->warps = 12, s->stages = 2; }
static void m_serve_tma(fg_spec *s) { *s = serve_base(); s->tma = 1, s->arch = 80; }
static void m_serve_tma_dim(fg_spec *s) { *s = serve_base(); s->tma = 1, s->arch = 90, s->head_dim = 96; }
static void m_mods_sinks(fg_spec *s) { s->sinks = 1; } /* base(): kind=fwd, mma.sync family */
static void m_mods_window(fg_spec *s) { s->window = 1; }
static void m_mods_softcap_dense(fg_spec *s) { *s = wg_base(); s->softcap = 1; } /* sm_90a without varlen=1 */
static void m_mods_alibi_bwd(fg_spec *s) { s->kind = FG_KIND_BWD, s->alibi = 1, s->block_m = 64, s->block_n = 64; }
static void m_mods_window_det(fg_spec *s) { m_mods_alibi_bwd(s); s->alibi = 0, s->window = 1, s->varlen = 1, s->deterministic = 1; }
static void m_mod_kind(fg_spec *s) { memcpy(s->mod, "0123456789abcdef", 17); } /* base(): kind=fwd */
static void m_mod_known(fg_spec *s) { *s = serve_base(); memcpy(s->mod, "0123456789abcdef", 17); } /* never registered */
static void m_head_dim_v(fg_spec *s) { *s = serve_base(); s->head_dim_v = 100; }
static void m_head_dim_v_kind(fg_spec *s) { s->head_dim_v = 64; } /* base(): kind=fwd, mma.sync family */
static void m_head_dim_v_wg(fg_spec *s) { *s = wg_base(); s->varlen = 1, s->head_dim_v = 96; } /* not a multiple of 64 */
static void m_serve_wide(fg_spec *s) { *s = serve_base(); s->head_dim_v = 512, s->block_n = 48, s->warps = 3 * s->block_m / 16; }
static void m_serve_wide_v_in_k(fg_spec *s) { *s = serve_base(); s->head_dim = 520, s->head_dim_v = 512, s->v_in_k = 1; }
static void m_serve_wide_dim(fg_spec *s) { *s = serve_base(); s->head_dim_v = 264; }
static void m_v_in_k(fg_spec *s) { *s = serve_base(); s->head_dim_v = 192, s->v_in_k = 1; }
static void m_v_in_k_tma(fg_spec *s) { *s = serve_base(); s->arch = 90, s->v_in_k = 1, s->tma = 1; }
static void m_serve_threads(fg_spec *s) { *s = serve_base(); s->head_dim = 576, s->head_dim_v = 512, s->v_in_k = 1, s->block_m = 16, s->block_n = 32, s->warps = 2; }
static void m_serve_tma_wide(fg_spec *s) { *s = serve_base(); s->arch = 90, s->tma = 1, s->head_dim = 512, s->stages = 2; }
static void m_head_dim_serve(fg_spec *s) { *s = serve_base(); s->head_dim = 584; }
static void m_serve_tma_dim_v(fg_spec *s) { *s = serve_base(); s->tma = 1, s->arch = 90, s->head_dim = 192, s->head_dim_v = 128; }
/* FP8 K and V (kv=e4m3|e5m2) with 16-bit Q, the serving kernel's. */
static void m_kv_fp8_kind(fg_spec *s) { s->kv_fp8 = FG_DTYPE_E4M3; } /* base(): kind=fwd */
static void m_kv_fp8_dtype(fg_spec *s) { *s = serve_base(); s->kv_fp8 = FG_DTYPE_BF16; }
static void m_kv_fp8_tma(fg_spec *s) { *s = serve_base(); s->kv_fp8 = FG_DTYPE_E4M3, s->arch = 90, s->tma = 1; }
static void m_kv_fp8_v_in_k(fg_spec *s) { *s = serve_base(); s->kv_fp8 = FG_DTYPE_E5M2, s->head_dim_v = 64, s->v_in_k = 1; }
static void m_kv_fp8_head_dim(fg_spec *s) { *s = serve_base(); s->kv_fp8 = FG_DTYPE_E4M3, s->head_dim = 80; }
static void m_kv_fp8_wide(fg_spec *s) { *s = serve_base(); s->kv_fp8 = FG_DTYPE_E5M2, s->arch = 90, s->head_dim_v = 512, s->stages = 2; }
static void m_serve_registers(fg_spec *s) { *s = serve_base(); s->block_m = 64; s->block_n = 256; s->head_dim = 256; s->stages = 2; }

static const broken rules[] = {
    {"kind", m_kind, "kind"},
    {"arch_known", m_arch_known, "sm_75"},
    {"arch_accel", m_arch_accel, "sm_80a"},
    {"dtype_half", m_dtype, "fp32"},
    {"fp8_arch", m_fp8_arch_80, "sm_80 has no FP8"},
    {"fp8_arch", m_fp8_arch_86, "sm_86 has no FP8"},
    {"fp8_arch", m_fp8_arch_87, "needs sm_89 or newer"},
    {"fp8_out", m_fp8_out, "out_dtype e5m2"},
    {"fp8_out", m_fp8_out_f32, "fp16 or bf16"},
    {"fp8_head_dim", m_fp8_head_dim, "head_dim 48"},
    {"fp8_head_dim", m_fp8_head_dim_small, "multiple of 32 from 32 to 256"},
    {"fp8_block_n", m_fp8_block_n, "block_n 48"},
    {"head_dim_range", m_head_dim_odd, "multiple of 8"},
    {"head_dim_range", m_head_dim_big, "264"},
    {"tiles_set", m_tiles, "block_n=0"},
    {"warps", m_warps, "warps 3"},
    {"block_m_mma", m_block_m, "block_m 96"},
    {"block_n_mma", m_block_n, "block_n 40"},
    {"stages", m_stages, "stages 5"},
    {"stages", m_stages_wgmma, "stages 1 is not supported"},
    {"registers", m_registers, "registers"},
    {"smem", m_smem, "shared memory"},
    {"wgmma_dtype", m_wgmma_dtype, "got head_dim 96"},
    {"wgmma_dtype", m_wgmma_dtype_e5m2, "block_n 288"},
    {"wgmma_head_dim", m_wgmma_head_dim, "head_dim 48 is not supported on sm_90a"},
    {"wgmma_head_dim", m_wgmma_head_dim_small, "head_dim 16 is not supported on sm_90a"},
    {"wgmma_block_m", m_wgmma_block_m, "block_m 96 is not supported on sm_90a"},
    {"wgmma_block_m", m_wgmma_block_m_big, "64, 128 or 192"},
    {"wgmma_warps", m_wgmma_warps, "warps 8 with block_m 128 is not supported on sm_90a"},
    {"wgmma_warps", m_wgmma_warps_mma, "it must be 8, a producer"},
    {"wgmma_registers", m_wgmma_registers, "more than the 160"},
    {"bwd_arch", m_bwd_arch, "kind=bwd has no sm_100a kernel"},
    {"bwd_tma", m_bwd_tma, "tma=1 (the mma.sync backward's loads by TMA) takes kind=bwd"},
    {"bwd_wgmma", m_bwd_wgmma, "kind=bwd on sm_90a (wgmma) takes head_dim 64 with block_m 128"},
    {"bwd_dtype", m_bwd_dtype, "dtype e4m3 has no backward kernel"},
    {"bwd_tiles", m_bwd_tiles_bn, "block_n = 16 x warps"},
    {"bwd_tiles", m_bwd_tiles_split, "the dQ product's split"},
    {"bwd_tiles", m_bwd_tiles_split_padded, "at head_dim 72 (padded to 80)"},
    {"bwd_tiles", m_bwd_tiles_stages, "stages 3"},
    {"bwd_registers", m_bwd_registers, "limit 200"},
    {"bwd_registers", m_bwd_registers_dim_v, "at head_dim 128 (V's 256)"},
    {"bwd_tiles", m_bwd_tiles_dim_v, "at head_dim 48 (padded to 48), V's 128 (padded to 128)"},
    {"bwd_tma", m_bwd_tma_dim_v, "head_dim_v 96"},
    {"head_dim_v", m_head_dim_v_bwd, "head_dim_v 100"},
    {"head_dim_v", m_head_dim_v_bwd_wg, "not sm_90a"},
    {"serve_dtype", m_serve_dtype, "no serving kernel"},
    {"serve_tiles", m_serve_tiles, "block_m 48"},
    {"serve_tiles", m_serve_tiles_keys, "multiple of 16 times the warps over the keys"},
    {"serve_tiles", m_serve_tiles_accel, "no 'a' target"},
    {"serve_registers", m_serve_registers, "kind=serve block_n 256"},
    {"serve_splits", m_serve_splits, "splits 257"},
    {"serve_splits", m_serve_splits_kind, "other kinds have none"},
    {"fwd_varlen", m_fwd_varlen, "varlen=1"},
    {"serve_tma", m_serve_tma, "got sm_80"},
    {"model_variants", m_mods_sinks, "sinks=1"},
    {"model_variants", m_mods_window, "window=1"},
    {"model_variants", m_mods_softcap_dense, "sm_90a forward with varlen=1"},
    {"model_variants", m_mods_alibi_bwd, "other kinds"},
    {"model_variants", m_mods_window_det, "outside the deterministic mode"},
    {"mod_kind", m_mod_kind, "variant of the serving kernel"},
    {"mod_known", m_mod_known, "fg_mod_create"},
    {"serve_tma", m_serve_tma_dim, "head_dim 96"},
    {"serve_tma", m_serve_tma_dim_v, "head_dim_v 128"},
    {"head_dim_v", m_head_dim_v, "head_dim_v 100"},
    {"head_dim_v", m_head_dim_v_kind, "kind=serve"},
    {"head_dim_v", m_head_dim_v_wg, "head_dim_v 96"},
    {"head_dim_v", m_serve_wide_dim, "or of 64 up to 512"},
    {"serve_wide", m_serve_wide, "head_dim_v / 64 must be a multiple of that count"},
    {"serve_wide", m_serve_wide_v_in_k, "with v_in_k=1 head_dim a multiple of 64"},
    {"v_in_k", m_v_in_k, "head_dim_v at most head_dim"},
    {"serve_tma", m_v_in_k_tma, "v_in_k=1"},
    {"serve_tma", m_serve_tma_wide, "head_dim 512"},
    {"serve_threads", m_serve_threads, "use at least 3 warps"},
    {"head_dim_range", m_head_dim_serve, "from 8 to 576 (kind=serve)"},
    {"fwd_varlen", m_fwd_varlen_fp8, "in fp16 or bf16"},
    {"kv_fp8_kind", m_kv_fp8_kind, "kv=e4m3 (FP8 K and V with 16-bit queries) is a variant of the serving kernel"},
    {"kv_fp8_dtype", m_kv_fp8_dtype, "kv_fp8 1 is not an FP8 dtype"},
    {"kv_fp8_tma", m_kv_fp8_tma, "tma=1 (TMA boxes of 16-bit tiles) is not taken"},
    {"kv_fp8_v_in_k", m_kv_fp8_v_in_k, "kv=e5m2 dequantizes V into a tile of its own"},
    {"kv_fp8_head_dim", m_kv_fp8_head_dim, "multiples of 32 up to 256 (got 80 and 80)"},
    {"kv_fp8_head_dim", m_kv_fp8_wide, "(got 128 and 512)"},
};

/* Serving and merge specs: the decode and prefill tiles are valid, and the merge kernel has no tile rules. */
Test(validate, serve_and_merge_specs) {
    fg_error e;
    fg_spec s = serve_base();
    cr_assert_eq(spec_validate(&s, &e), FG_OK, "%s", e.msg);
    const int tiles[][4] = {{16, 64, 4, 4}, {32, 64, 4, 3}, {64, 64, 4, 2}, {128, 64, 8, 2}, {16, 128, 4, 2}};
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++)
        for (int d = 8; d <= 256; d += 8) {
            s = serve_base();
            s.block_m = tiles[i][0], s.block_n = tiles[i][1], s.warps = tiles[i][2], s.stages = tiles[i][3];
            s.head_dim = d;
            if (spec_smem_bytes(&s) > arch_smem_limit(90)) continue;
            cr_assert_eq(spec_validate(&s, &e), FG_OK, "%d x %d head_dim %d: %s", s.block_m, s.block_n, d, e.msg);
            s.kv_fp8 = d % 16 ? FG_DTYPE_E4M3 : FG_DTYPE_E5M2; /* FP8 K and V: head dims in 32s */
            const fg_status st = spec_validate(&s, &e);
            cr_assert_eq(st, d % 32 ? FG_ERR_UNSUPPORTED : FG_OK, "kv=%s %d x %d head_dim %d: %s",
                         dtype_name((fg_dtype)s.kv_fp8), s.block_m, s.block_n, d, e.msg);
        }
    fg_spec m;
    memset(&m, 0, sizeof m);
    m.kind = FG_KIND_MERGE;
    m.arch = 80;
    cr_assert_eq(spec_validate(&m, &e), FG_OK, "%s", e.msg);
    m.arch = 75;
    cr_assert_eq(spec_validate(&m, &e), FG_ERR_UNSUPPORTED);
}

Test(validate, every_rule_refuses_with_its_sentence) {
    fg_error e;
    fg_spec ok = base();
    cr_assert_eq(spec_validate(&ok, &e), FG_OK, "%s", e.msg);
    ok = wg_base();
    cr_assert_eq(spec_validate(&ok, &e), FG_OK, "%s", e.msg);
    int covered[64] = {0};
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        fg_spec s = base();
        rules[i].mutate(&s);
        fg_error_clear(&e);
        fg_status st = spec_validate(&s, &e);
        cr_assert_neq(st, FG_OK, "rule %s: spec was accepted", rules[i].rule);
        cr_assert(strstr(e.msg, rules[i].mention), "rule %s: '%s' does not mention '%s'", rules[i].rule, e.msg,
                  rules[i].mention);
        for (int r = 0; r < spec_rule_count(); r++)
            if (strcmp(spec_rule_name(r), rules[i].rule) == 0) covered[r] = 1;
    }
    for (int r = 0; r < spec_rule_count(); r++)
        cr_assert(covered[r], "validation rule '%s' has no test here", spec_rule_name(r));
}

/* A valid sm_90a spec is accepted, and the same tiles are refused by the other family: a warpgroup tile
 * (12 warps) on sm_90, an mma.sync tile (8 warps for 128 rows) on sm_90a. */
Test(validate, sm_90a_spec_accepted_with_warpgroup_tiles) {
    fg_spec s;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(spec_parse("kind=fwd arch=sm_90a dtype=bf16 head_dim=128 block_m=128 block_n=128 warps=12 stages=2",
                            &s, &e),
                 FG_OK, "%s", e.msg);
    cr_assert(s.arch == 90 && s.arch_accel == 1);
    cr_assert(spec_is_wgmma(&s));
    fg_spec want = wg_base();
    cr_assert(spec_equal(&s, &want));
    cr_assert_eq(spec_validate(&s, &e), FG_OK, "%s", e.msg);
    const int tiles[][3] = {{64, 8, 192}, {128, 12, 128}, {192, 16, 64}}; /* block_m, warps, block_n */
    for (int t = 0; t < 3; t++)
        for (int dt = 0; dt < 2; dt++) {
            s = wg_base();
            s.dtype = dt ? FG_DTYPE_F16 : FG_DTYPE_BF16;
            s.head_dim = 64;
            s.block_m = tiles[t][0];
            s.warps = tiles[t][1];
            s.block_n = tiles[t][2];
            s.causal = t % 2;
            cr_assert_eq(spec_validate(&s, &e), FG_OK, "block_m %d, %d warps: %s", tiles[t][0], tiles[t][1], e.msg);
        }
    cr_assert_eq(spec_parse("kind=fwd arch=sm_90 dtype=bf16 head_dim=128 block_m=128 block_n=128 warps=12 stages=2",
                            &s, &e),
                 FG_OK, "%s", e.msg);
    cr_assert(s.arch == 90 && s.arch_accel == 0);
    cr_assert_not(spec_is_wgmma(&s));
    cr_assert_eq(spec_validate(&s, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "warps 12 is not supported"), "%s", e.msg);
    s = base();
    s.arch_accel = 1;
    cr_assert_eq(spec_validate(&s, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "sm_90a") && strstr(e.msg, "must be 12"), "%s", e.msg);
    /* spec_is_wgmma: sm_90a only */
    s = base();
    cr_assert_not(spec_is_wgmma(&s));
    s.arch = 100;
    s.arch_accel = 1;
    cr_assert_not(spec_is_wgmma(&s), "sm_100a is not the wgmma family");
}

Test(validate, wgmma_head_dim_every_multiple_of_32_from_32_to_256) {
    fg_error e;
    for (int d = 1; d <= 300; d++) {
        fg_spec s = wg_base();
        s.head_dim = d;
        s.block_n = 32;
        int want_ok = d % 32 == 0 && d >= 32 && d <= 256;
        fg_error_clear(&e);
        cr_assert_eq(spec_validate(&s, &e) == FG_OK, want_ok, "head_dim %d: %s", d, e.msg);
        /* the mma.sync family on the same GPU takes every multiple of 8 */
        s.arch_accel = 0;
        s.warps = 8;
        cr_assert_eq(spec_validate(&s, &e) == FG_OK, d % 8 == 0 && d <= 256, "sm_90 head_dim %d: %s", d, e.msg);
    }
}

Test(validate, head_dim_every_multiple_of_8_from_8_to_256) {
    fg_error e;
    for (int d = 1; d <= 300; d++) {
        fg_spec s = base();
        s.head_dim = d;
        s.block_n = 32;
        int want_ok = d % 8 == 0 && d >= 8 && d <= 256;
        cr_assert_eq(spec_validate(&s, &e) == FG_OK, want_ok, "head_dim %d: %s", d, e.msg);
    }
}

/* The backward takes every multiple of 8 from 8 to 256 (32 x 32 on 2 warps up to 128, 64 x 64 on 8 above), and
 * its rules read the head dim it computes on (to 16, above 128 to 32): the padded one's shared memory. */
Test(validate, backward_head_dim_every_multiple_of_8_by_its_padded_one) {
    fg_error e;
    for (int d = 1; d <= 300; d++) {
        fg_spec s = bwd_base();
        s.head_dim = d;
        if (d > 128) s.block_m = 64, s.block_n = 64, s.warps = 8;
        else s.block_m = 32, s.block_n = 32, s.warps = 2;
        const int want_ok = d % 8 == 0 && d >= 8 && d <= 256;
        fg_error_clear(&e);
        cr_assert_eq(spec_validate(&s, &e) == FG_OK, want_ok, "head_dim %d: %s", d, e.msg);
        if (!want_ok) continue;
        const int padded = d > 128 ? (d + 31) / 32 * 32 : (d + 15) / 16 * 16;
        cr_assert_eq(spec_head_dim_padded(&s), padded, "head_dim %d", d);
        cr_assert_eq(spec_bwd_head_dim_padded(d), padded, "head_dim %d", d);
        fg_spec p = s;
        p.head_dim = padded;
        cr_assert_eq(spec_smem_bytes(&s), spec_smem_bytes(&p), "head_dim %d: the tiles are %d wide", d, padded);
        fg_spec f = s; /* the forward pads to 16 only */
        f.kind = FG_KIND_FWD;
        cr_assert_eq(spec_head_dim_padded(&f), (d + 15) / 16 * 16, "forward head_dim %d", d);
    }
}

/* V of a head dim of its own (head_dim_v): every pair of multiples of 8 up to 256, both masks, gets tiles from the
 * default policy that pass every rule (registers, shared memory) on the A100, the 99 KiB parts and Hopper, except
 * some where the wider of the two is above 192 on a 99 KiB part (no tile there for V of Q's head dim; a narrow Q's
 * 32 x 32 tile takes some); the pair's padded widths follow the wider one (both to 32 above 128); the sm_90a
 * backward takes none of them. */
Test(validate, backward_every_pair_of_head_dims_gets_valid_tiles) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    static const int arches[] = {80, 86, 89, 90, 120};
    for (size_t a = 0; a < sizeof arches / sizeof arches[0]; a++)
        for (int d = 8; d <= 256; d += 8)
            for (int dv = 8; dv <= 256; dv += 8) {
                fg_spec s = {.kind = FG_KIND_BWD, .arch = arches[a], .dtype = FG_DTYPE_BF16, .head_dim = d,
                             .head_dim_v = dv == d ? 0 : dv, .causal = (d + dv) / 8 % 2, .varlen = 1};
                s.out_dtype = s.dtype;
                const int widest = d > dv ? d : dv, small_smem = arch_smem_limit(arches[a]) < 150000;
                fg_error_clear(&e);
                const int ok = spec_fill_tiles(&s, &p, &e) == FG_OK && spec_validate(&s, &e) == FG_OK;
                if (!ok && small_smem && widest > 192) continue; /* Q's head dim's tile, where it takes V */
                cr_assert(ok, "sm_%d d %d dv %d: %s", arches[a], d, dv, e.msg);
                const int step = widest > 128 ? 32 : 16;
                cr_assert_eq(spec_head_dim_padded(&s), (d + step - 1) / step * step, "d %d dv %d", d, dv);
                cr_assert_eq(spec_head_dim_v_padded(&s), (dv + step - 1) / step * step, "d %d dv %d", d, dv);
                if (!s.head_dim_v) continue;
                fg_spec t = s; /* the sm_90a backward takes no V of its own */
                t.arch = 90, t.arch_accel = 1, t.block_m = 64, t.block_n = 128, t.warps = 8, t.stages = 2;
                cr_assert_eq(spec_validate(&t, &e), FG_ERR_UNSUPPORTED, "d %d dv %d on sm_90a", d, dv);
            }
    tile_policy_free(&p);
}

Test(validate, fp8_head_dim_every_multiple_of_32_from_32_to_256) {
    fg_error e;
    for (int d = 1; d <= 300; d++) {
        fg_spec s = base();
        s.dtype = FG_DTYPE_E4M3;
        s.out_dtype = FG_DTYPE_F16;
        s.head_dim = d;
        s.block_n = 32;
        int want_ok = d % 32 == 0 && d >= 32 && d <= 256;
        cr_assert_eq(spec_validate(&s, &e) == FG_OK, want_ok, "head_dim %d: %s", d, e.msg);
    }
}

Test(validate, fp8_runs_on_sm_89_and_newer_only) {
    const int archs[][2] = {{80, 0}, {86, 0}, {87, 0}, {89, 0}, {90, 0}, {90, 1}, {100, 0}, {100, 1}, {103, 0},
                            {110, 0}, {120, 0}, {120, 1}, {121, 0}};
    fg_error e;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (int dt = 0; dt < 2; dt++) {
            fg_spec s = base(); /* 128 x 64, 8 warps, 2 stages, d 128: fits every arch's shared memory in fp8 */
            s.arch = archs[a][0];
            s.arch_accel = archs[a][1];
            s.dtype = dt ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3;
            s.out_dtype = FG_DTYPE_BF16;
            /* sm_90a is the wgmma family: its FP8 tiles are its own (block_m 128 with 12 warps) */
            if (spec_is_wgmma(&s)) s.warps = 12, s.block_n = 128;
            int want_ok = s.arch >= 89;
            fg_error_clear(&e);
            cr_assert_eq(spec_validate(&s, &e) == FG_OK, want_ok, "sm_%d%s: %s", s.arch, s.arch_accel ? "a" : "",
                         e.msg);
        }
}

Test(validate, fp8_block_n_multiples_of_32) {
    fg_error e;
    for (int n = 16; n <= 256; n += 16) {
        fg_spec s = base();
        s.dtype = FG_DTYPE_E5M2;
        s.out_dtype = FG_DTYPE_BF16;
        s.head_dim = 64;
        s.block_n = n;
        cr_assert_eq(spec_validate(&s, &e) == FG_OK, n % 32 == 0 && s.block_n <= 256, "block_n %d: %s", n, e.msg);
        s.dtype = FG_DTYPE_BF16; /* the 16-bit rule stays a multiple of 16 */
        cr_assert_eq(spec_validate(&s, &e), FG_OK, "bf16 block_n %d: %s", n, e.msg);
    }
}

Test(validate, smem_limits_per_arch) {
    cr_assert_eq(arch_smem_limit(80), 166912);
    cr_assert_eq(arch_smem_limit(86), 101376);
    cr_assert_eq(arch_smem_limit(89), 101376);
    cr_assert_eq(arch_smem_limit(90), 232448);
    cr_assert_eq(arch_smem_limit(75), 0);
    fg_spec s = base(); /* 128 x 64 at d128, 2 stages: 32 KiB + 64 KiB */
    cr_assert_eq(spec_smem_bytes(&s), 128u * 256 + 2u * 2 * 64 * 256);
    s.head_dim = 40; /* padded to 48 */
    cr_assert_eq(spec_head_dim_padded(&s), 48);
    cr_assert_eq(spec_smem_bytes(&s), (128u + 4 * 64) * 96);
    /* fp8: one byte per element, so every tile is half the bytes (V^T holds as many bytes as V) */
    s = base();
    s.dtype = FG_DTYPE_E4M3;
    s.out_dtype = FG_DTYPE_BF16;
    cr_assert_eq(spec_smem_bytes(&s), 128u * 128 + 2u * 2 * 64 * 128);
    s.stages = 4;
    s.head_dim = 256;
    cr_assert_eq(spec_smem_bytes(&s), 128u * 256 + 2u * 4 * 64 * 256);
    /* the 16-bit O the epilogue stages from the Q tile on needs block_m rows of 2-byte elements */
    s.block_m = 256;
    s.block_n = 32;
    s.stages = 2;
    s.head_dim = 64;
    cr_assert_eq(spec_smem_bytes(&s), 256u * 64 * 2, "O staging (32 KiB) exceeds the fp8 tiles (24 KiB)");
    s.dtype = FG_DTYPE_BF16;
    cr_assert_eq(spec_smem_bytes(&s), (256u + 2 * 2 * 32) * 128, "16-bit: the tiles, as before");
    /* one stage (mma.sync forward): one K and one V tile beside Q; FlashAttention-2's 64 x 64 at d 256 is
     * 96 KiB, two CTAs an SM on sm_90 */
    s = base();
    s.stages = 1;
    s.head_dim = 256;
    s.block_m = 64;
    s.warps = 4;
    fg_error err;
    cr_assert_eq(spec_validate(&s, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(spec_smem_bytes(&s), 98304u);
    cr_assert_leq(2 * spec_smem_bytes(&s), arch_smem_limit(90));
    /* sm_90a: 16-bit Q and K/V stages at head_dim columns (no padding), plus 1 KiB of alignment slack
     * and the mbarriers (a few 8-byte words per stage) */
    const int wg[][4] = {{128, 128, 128, 2}, {192, 128, 64, 2}, {128, 80, 256, 2}, {64, 64, 32, 4}};
    for (int i = 0; i < 4; i++) {
        s = wg_base();
        s.block_m = wg[i][0];
        s.block_n = wg[i][1];
        s.head_dim = wg[i][2];
        s.stages = wg[i][3];
        s.warps = 4 * (s.block_m / 64 + 1);
        /* Q is double-buffered where two Q tiles fit (spec_q_stages) */
        size_t q = (size_t)spec_q_stages(&s);
        cr_assert(q == 1 || q == 2, "%zu Q buffers", q);
        size_t tiles = 2u * (size_t)s.head_dim * (q * (size_t)s.block_m + 2u * (size_t)s.block_n * (size_t)s.stages);
        size_t got = spec_smem_bytes(&s);
        cr_assert(got > 1024 + tiles && got < 2048 + tiles && (got - tiles) % 8 == 0, "%d x %d, d %d, %d stages: %zu "
                  "bytes for %zu of tiles", s.block_m, s.block_n, s.head_dim, s.stages, got, tiles);
        fg_error e;
        cr_assert_eq(spec_validate(&s, &e), FG_OK, "%s", e.msg);
        s.stages++;
        if ((size_t)spec_q_stages(&s) == q) /* (a stage more may leave room for one Q buffer only) */
            cr_assert_gt(spec_smem_bytes(&s), got + 2u * 2 * s.head_dim * s.block_n - 1, "a stage adds a K and a V tile");
    }
    /* two Q buffers where they fit: 128 x 128 at head_dim 128 (192 KiB), not 128 x 192 (two would need 256) */
    s = wg_base();
    s.head_dim = 128;
    s.block_m = 128;
    s.block_n = 128;
    s.warps = 12;
    s.stages = 2;
    cr_assert_eq(spec_q_stages(&s), 2);
    s.block_n = 192;
    cr_assert_eq(spec_q_stages(&s), 1);
    s.arch_accel = 0;
    cr_assert_eq(spec_q_stages(&s), 1, "the mma.sync family has one Q tile");
    /* 128 x 80 is the largest 2-stage tile at head_dim 256 under sm_90's 227 KiB (tile_policy.c) */
    s = wg_base();
    s.head_dim = 256;
    s.block_n = 80;
    cr_assert_leq(spec_smem_bytes(&s), arch_smem_limit(90));
    s.block_n = 96;
    cr_assert_gt(spec_smem_bytes(&s), arch_smem_limit(90));
    fg_error e;
    cr_assert_eq(spec_validate(&s, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "shared memory"), "%s", e.msg);
}
