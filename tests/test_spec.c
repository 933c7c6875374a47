/* test_spec.c: the spec's canonical text, its parser, the tile policy, and every validation rule
 * (generator/spec.c, validate.c, tile_policy.c). Needs no GPU. */
#include <criterion/criterion.h>
#include <string.h>
#include "spec.h"

static fg_spec base(void) {
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 128,
                 .block_m = 128, .block_n = 64, .warps = 8, .stages = 2, .causal = 0};
    return s;
}

Test(spec, canonical_text_is_sorted_and_stable) {
    fg_spec s = base();
    char buf[FG_SPEC_NAME_MAX];
    cr_assert_gt(spec_format(&s, buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "arch=sm_90a,block_m=128,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=8");
}

Test(spec, round_trip_every_field_combination) {
    const int archs[][2] = {{80, 0}, {86, 0}, {89, 0}, {90, 0}, {90, 1}, {120, 0}, {120, 1}};
    int checked = 0;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (int dt = 0; dt < 2; dt++)
            for (int d = 8; d <= 256; d += 8)
                for (int c = 0; c < 2; c++) {
                    fg_spec s = base(), back;
                    s.arch = archs[a][0];
                    s.arch_accel = archs[a][1];
                    s.dtype = dt ? FG_DTYPE_BF16 : FG_DTYPE_F16;
                    s.head_dim = d;
                    s.causal = c;
                    s.block_m = 16 * (1 + d % 3);
                    s.stages = 2 + d % 3;
                    char text[FG_SPEC_NAME_MAX], again[FG_SPEC_NAME_MAX];
                    fg_error e;
                    cr_assert_gt(spec_format(&s, text, sizeof text), 0);
                    cr_assert_eq(spec_parse(text, &back, &e), FG_OK, "%s: %s", text, e.msg);
                    cr_assert(spec_equal(&s, &back), "%s did not round-trip", text);
                    cr_assert_gt(spec_format(&back, again, sizeof again), 0);
                    cr_assert_str_eq(text, again);
                    checked++;
                }
    cr_assert_eq(checked, 7 * 2 * 32 * 2);
}

Test(spec, parse_accepts_any_order_spaces_and_partial_tiles) {
    fg_spec s;
    fg_error e;
    cr_assert_eq(spec_parse("  head_dim=64 dtype=fp16,kind=fwd  arch=sm_80 causal=true ", &s, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(s.arch, 80);
    cr_assert_eq(s.arch_accel, 0);
    cr_assert_eq(s.dtype, FG_DTYPE_F16);
    cr_assert_eq(s.head_dim, 64);
    cr_assert_eq(s.causal, 1);
    cr_assert_eq(s.block_m, 0);
    cr_assert_eq(s.warps, 0);
}

Test(spec, parse_errors_name_the_key) {
    struct { const char *text, *expect; } cases[] = {
        {"kind=fwd,arch=sm_90a,dtype=bf16", "head_dim"},                 /* missing required key */
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,colour=red", "colour"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,head_dim=64", "twice"},
        {"kind=fwd,arch=sm90,dtype=bf16,head_dim=128", "sm90"},
        {"kind=fwd,arch=sm_90a,dtype=bf17,head_dim=128", "bf17"},
        {"kind=bwd,arch=sm_90a,dtype=bf16,head_dim=128", "kind"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=-8", "head_dim"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=12x", "head_dim"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,causal=2", "causal"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim", "key=value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_spec s;
        fg_error e;
        fg_error_clear(&e);
        cr_assert_neq(spec_parse(cases[i].text, &s, &e), FG_OK, "%s was accepted", cases[i].text);
        cr_assert(strstr(e.msg, cases[i].expect), "'%s' -> '%s' does not mention '%s'", cases[i].text, e.msg,
                  cases[i].expect);
    }
}

Test(spec, default_policy_fills_valid_tiles_for_every_head_dim_and_arch) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    const int archs[][2] = {{80, 0}, {86, 0}, {87, 0}, {89, 0}, {90, 1}, {90, 0}, {100, 0}, {120, 0}};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (int d = 8; d <= 256; d += 8)
            for (int c = 0; c < 2; c++)
                for (int dt = 0; dt < 2; dt++) {
                    fg_spec s = {.kind = FG_KIND_FWD, .arch = archs[a][0], .arch_accel = archs[a][1],
                                 .dtype = dt ? FG_DTYPE_BF16 : FG_DTYPE_F16, .head_dim = d, .causal = c};
                    cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK, "%s", e.msg);
                    char name[FG_SPEC_NAME_MAX];
                    spec_format(&s, name, sizeof name);
                    cr_assert_eq(spec_validate(&s, &e), FG_OK, "default tiles of %s refused: %s", name, e.msg);
                }
    tile_policy_free(&p);
}

Test(spec, policy_override_takes_precedence_and_set_fields_are_kept) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    fg_tile_rule r = {90, 90, 128, 128, 1, -1, 64, 16, 4, 4};
    cr_assert_eq(tile_policy_add(&p, &r, &e), FG_OK);
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 128, .causal = 1};
    cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK);
    cr_assert_eq(s.block_m, 64);
    cr_assert_eq(s.block_n, 16);
    cr_assert_eq(s.warps, 4);
    cr_assert_eq(s.stages, 4);
    fg_spec t = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 128, .causal = 0,
                 .block_n = 128};
    cr_assert_eq(spec_fill_tiles(&t, &p, &e), FG_OK);
    cr_assert_eq(t.block_n, 128, "an explicitly set field must not be overwritten");
    fg_tile_policy def;
    cr_assert_eq(tile_policy_init_default(&def, &e), FG_OK);
    fg_spec plain = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 128};
    cr_assert_eq(spec_fill_tiles(&plain, &def, &e), FG_OK);
    cr_assert_eq(t.stages, plain.stages, "the override is for causal only");
    cr_assert_neq(t.stages, 4, "the override is for causal only");
    tile_policy_free(&def);
    fg_spec u = {.kind = FG_KIND_FWD, .arch = 75, .dtype = FG_DTYPE_BF16, .head_dim = 128};
    cr_assert_eq(spec_fill_tiles(&u, &p, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "sm_75"), "%s", e.msg);
    tile_policy_free(&p);
}

/* One test per rule: break exactly that rule and check the sentence names it. */
typedef struct broken {
    const char *rule;        /* validate.c's rule name */
    void (*mutate)(fg_spec *);
    const char *mention;     /* a word the sentence must contain */
} broken;

static void m_kind(fg_spec *s) { s->kind = (fg_kind)7; }
static void m_arch_known(fg_spec *s) { s->arch = 75; s->arch_accel = 0; }
static void m_arch_accel(fg_spec *s) { s->arch = 80; s->arch_accel = 1; }
static void m_dtype(fg_spec *s) { s->dtype = FG_DTYPE_E4M3; }
static void m_head_dim_odd(fg_spec *s) { s->head_dim = 60; }
static void m_head_dim_big(fg_spec *s) { s->head_dim = 264; }
static void m_tiles(fg_spec *s) { s->block_n = 0; }
static void m_warps(fg_spec *s) { s->warps = 3; }
static void m_block_m(fg_spec *s) { s->block_m = 96; s->warps = 4; }
static void m_block_n(fg_spec *s) { s->block_n = 40; }
static void m_stages(fg_spec *s) { s->stages = 5; }
static void m_registers(fg_spec *s) { s->block_m = 128; s->warps = 4; s->block_n = 64; }
static void m_smem(fg_spec *s) { s->arch = 86; s->arch_accel = 0; s->head_dim = 256; s->block_n = 64; s->stages = 2; }

static const broken rules[] = {
    {"kind", m_kind, "kind"},
    {"arch_known", m_arch_known, "sm_75"},
    {"arch_accel", m_arch_accel, "sm_80a"},
    {"dtype_half", m_dtype, "e4m3"},
    {"head_dim_range", m_head_dim_odd, "multiple of 8"},
    {"head_dim_range", m_head_dim_big, "264"},
    {"tiles_set", m_tiles, "block_n=0"},
    {"warps", m_warps, "warps 3"},
    {"block_m_mma", m_block_m, "block_m 96"},
    {"block_n_mma", m_block_n, "block_n 40"},
    {"stages", m_stages, "stages 5"},
    {"registers", m_registers, "registers"},
    {"smem", m_smem, "shared memory"},
};

Test(validate, every_rule_refuses_with_its_sentence) {
    fg_error e;
    fg_spec ok = base();
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
}
