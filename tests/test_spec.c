/* test_spec.c: the spec's canonical text, its parser and the tile policy (generator/spec.c,
 * tile_policy.c); the validation rules are test_validate.c's. Needs no GPU. */
#include <criterion/criterion.h>
#include <string.h>
#include "generator/spec.h"
#include "generator/tile_policy.h"
#include "generator/validate.h"
#include "tests/spec_cases.h"

Test(spec, canonical_text_is_sorted_and_stable) {
    fg_spec s = base();
    char buf[FG_SPEC_NAME_MAX];
    cr_assert_gt(spec_format(&s, buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "arch=sm_90,block_m=128,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=8");
    /* The 'a' target keeps its suffix. */
    s = wg_base();
    cr_assert_gt(spec_format(&s, buf, sizeof buf), 0);
    cr_assert_str_eq(buf,
                     "arch=sm_90a,block_m=128,block_n=128,causal=0,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=12");
}

Test(spec, fp8_canonical_text_names_the_output_dtype) {
    fg_spec s = base();
    char buf[FG_SPEC_NAME_MAX];
    s.dtype = FG_DTYPE_E4M3;
    s.out_dtype = FG_DTYPE_BF16;
    cr_assert_gt(spec_format(&s, buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "arch=sm_90,block_m=128,block_n=64,causal=0,dtype=e4m3,head_dim=128,kind=fwd,out=bf16,"
                          "stages=2,warps=8");
    s.dtype = FG_DTYPE_E5M2;
    s.out_dtype = FG_DTYPE_F16;
    cr_assert_gt(spec_format(&s, buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "arch=sm_90,block_m=128,block_n=64,causal=0,dtype=e5m2,head_dim=128,kind=fwd,out=fp16,"
                          "stages=2,warps=8");
    /* 16-bit names never carry out=, whatever out_dtype holds */
    s = base();
    s.out_dtype = FG_DTYPE_E4M3;
    cr_assert_gt(spec_format(&s, buf, sizeof buf), 0);
    cr_assert_str_eq(buf,
                     "arch=sm_90,block_m=128,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=8");
}

Test(spec, out_key_defaults_and_rules) {
    fg_spec s;
    fg_error e;
    cr_assert_eq(spec_parse("kind=fwd,arch=sm_90,dtype=e4m3,head_dim=128", &s, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(s.out_dtype, FG_DTYPE_BF16, "an fp8 spec without out= writes bf16");
    cr_assert_eq(spec_out_dtype(&s), FG_DTYPE_BF16);
    cr_assert_eq(spec_parse("out=fp16 kind=fwd,arch=sm_89,dtype=e5m2,head_dim=64", &s, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(s.dtype, FG_DTYPE_E5M2);
    cr_assert_eq(s.out_dtype, FG_DTYPE_F16);
    /* a 16-bit spec may repeat its own dtype as out=, which changes nothing */
    cr_assert_eq(spec_parse("kind=fwd,arch=sm_80,dtype=fp16,head_dim=64,out=fp16", &s, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(s.out_dtype, FG_DTYPE_F16);
    cr_assert_eq(spec_parse("kind=fwd,arch=sm_80,dtype=bf16,head_dim=64", &s, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(s.out_dtype, FG_DTYPE_BF16, "a 16-bit spec's out_dtype is its dtype");
    /* spec_equal: out_dtype counts for fp8 specs only */
    fg_spec a = base(), b = base();
    a.out_dtype = FG_DTYPE_F16;
    b.out_dtype = FG_DTYPE_E5M2;
    cr_assert(spec_equal(&a, &b), "a 16-bit spec's out_dtype is ignored");
    cr_assert_eq(spec_out_dtype(&b), FG_DTYPE_BF16);
    a.dtype = b.dtype = FG_DTYPE_E4M3;
    a.out_dtype = FG_DTYPE_F16;
    b.out_dtype = FG_DTYPE_BF16;
    cr_assert_not(spec_equal(&a, &b), "fp8 specs writing fp16 and bf16 are different variants");
    b.out_dtype = FG_DTYPE_F16;
    cr_assert(spec_equal(&a, &b));
}

Test(spec, round_trip_every_field_combination) {
    const int archs[][2] = {{80, 0}, {86, 0}, {89, 0}, {90, 0}, {90, 1}, {120, 0}, {120, 1}};
    /* dtype and output dtype: the 16-bit ones write their own dtype; fp8 writes fp16 or bf16 */
    const fg_dtype dts[][2] = {{FG_DTYPE_F16, FG_DTYPE_F16},   {FG_DTYPE_BF16, FG_DTYPE_BF16},
                               {FG_DTYPE_E4M3, FG_DTYPE_F16},  {FG_DTYPE_E4M3, FG_DTYPE_BF16},
                               {FG_DTYPE_E5M2, FG_DTYPE_F16},  {FG_DTYPE_E5M2, FG_DTYPE_BF16}};
    int checked = 0;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (int dt = 0; dt < 6; dt++)
            for (int d = 8; d <= 256; d += 8)
                for (int c = 0; c < 2; c++) {
                    fg_spec s = base(), back;
                    s.arch = archs[a][0];
                    s.arch_accel = archs[a][1];
                    s.dtype = dts[dt][0];
                    s.out_dtype = dts[dt][1];
                    s.head_dim = d;
                    s.causal = c;
                    s.block_m = 16 * (1 + d % 3);
                    s.stages = 2 + d % 3;
                    char text[FG_SPEC_NAME_MAX], again[FG_SPEC_NAME_MAX];
                    fg_error e;
                    cr_assert_gt(spec_format(&s, text, sizeof text), 0);
                    cr_assert_eq(spec_parse(text, &back, &e), FG_OK, "%s: %s", text, e.msg);
                    cr_assert(spec_equal(&s, &back), "%s did not round-trip", text);
                    cr_assert_eq(back.out_dtype, s.out_dtype, "%s: out_dtype", text);
                    cr_assert_gt(spec_format(&back, again, sizeof again), 0);
                    cr_assert_str_eq(text, again);
                    checked++;
                }
    cr_assert_eq(checked, 7 * 6 * 32 * 2);
}

/* kv names FP8 K and V: two variants that differ only there have two names, and equal only with the same kv. */
Test(spec, kv_key_names_fp8_keys_and_values) {
    fg_spec a, b;
    fg_error e;
    cr_assert_eq(spec_parse("kind=serve arch=sm_90 dtype=bf16 head_dim=128 block_m=16", &a, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(a.kv_fp8, 0);
    cr_assert_eq(spec_kv_dtype(&a), FG_DTYPE_BF16);
    cr_assert_eq(spec_parse("kind=serve arch=sm_90 dtype=bf16 head_dim=128 block_m=16 kv=e5m2", &b, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(b.kv_fp8, FG_DTYPE_E5M2);
    cr_assert_eq(spec_kv_dtype(&b), FG_DTYPE_E5M2);
    cr_assert(!spec_equal(&a, &b));
    b.kv_fp8 = 0;
    cr_assert(spec_equal(&a, &b));
    /* FP8 stages take a byte an element, beside one 16-bit K and V tile: less than 16-bit stages from 3 on */
    fg_spec s = a;
    s.block_n = 64, s.warps = 4, s.stages = 4;
    const size_t bf16 = spec_smem_bytes(&s);
    s.kv_fp8 = FG_DTYPE_E4M3;
    cr_assert_eq(spec_smem_bytes(&s), 16 * 128 * 2 + 64 * 256 * 2 + 4 * 64 * 256, "Q, the 16-bit K and V, 4 FP8 stages");
    cr_assert_lt(spec_smem_bytes(&s), bf16);
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

/* The serving forward names itself kind=serve with the forward's keys; the merge only its arch; the sm_90a
 * forward's variable-length variants varlen=1. */
Test(spec, serve_and_merge_texts_round_trip) {
    static const char *const texts[] = {
        "arch=sm_90,block_m=16,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=serve,stages=4,warps=4",
        "arch=sm_80,block_m=64,block_n=32,causal=1,dtype=fp16,head_dim=256,kind=serve,stages=2,warps=4",
        "arch=sm_90,block_m=16,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=serve,splits=12,stages=4,warps=4",
        "arch=sm_90,block_m=16,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=serve,stages=4,tma=1,warps=4",
        "arch=sm_90,block_m=16,block_n=64,causal=1,dtype=fp16,head_dim=64,kind=serve,sinks=1,splits=3,stages=4,warps=4",
        "arch=sm_80,block_m=64,block_n=32,causal=1,dtype=bf16,head_dim=128,kind=serve,stages=2,warps=4,window=1",
        "alibi=1,arch=sm_90,block_m=64,block_n=64,causal=1,dtype=bf16,head_dim=128,kind=serve,softcap=1,stages=2,warps=4",
        "arch=sm_90,block_m=64,block_n=32,causal=1,dtype=bf16,head_dim=192,head_dim_v=128,kind=serve,stages=2,warps=4",
        "arch=sm_90,block_m=16,block_n=64,causal=0,dtype=bf16,head_dim=576,head_dim_v=512,kind=serve,stages=2,v_in_k=1,"
        "warps=4",
        "arch=sm_90,block_m=64,block_n=64,causal=1,deterministic=0,dtype=bf16,head_dim=192,head_dim_v=128,kind=bwd,stages=2,"
        "tma=1,varlen=1,warps=8",
        "arch=sm_80,block_m=32,block_n=32,causal=0,deterministic=1,dtype=fp16,head_dim=72,head_dim_v=40,kind=bwd,stages=2,"
        "warps=2",
        "arch=sm_90a,block_m=128,block_n=96,causal=1,dtype=bf16,head_dim=192,head_dim_v=128,kind=fwd,stages=2,varlen=1,"
        "warps=12",
        "alibi=1,arch=sm_90a,block_m=128,block_n=128,causal=1,dtype=bf16,head_dim=128,kind=fwd,sinks=1,softcap=1,stages=2,"
        "varlen=1,warps=12,window=1",
        "arch=sm_90,kind=merge",
        "arch=sm_120,kind=merge",
        "arch=sm_90a,block_m=128,block_n=128,causal=1,dtype=bf16,head_dim=128,kind=fwd,stages=2,varlen=1,warps=12",
        /* FP8 K and V with 16-bit queries: kv between kind and mod */
        "arch=sm_90,block_m=16,block_n=64,causal=0,dtype=bf16,head_dim=128,kind=serve,kv=e4m3,stages=4,warps=4",
        "arch=sm_80,block_m=64,block_n=64,causal=1,dtype=fp16,head_dim=64,kind=serve,kv=e5m2,sinks=1,splits=2,stages=2,"
        "warps=4,window=1",
        "arch=sm_89,block_m=32,block_n=32,causal=1,dtype=bf16,head_dim=256,head_dim_v=128,kind=serve,kv=e5m2,stages=2,"
        "warps=4",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        fg_spec s;
        fg_error e;
        char buf[FG_SPEC_NAME_MAX];
        cr_assert_eq(spec_parse(texts[i], &s, &e), FG_OK, "%s: %s", texts[i], e.msg);
        cr_assert_gt(spec_format(&s, buf, sizeof buf), 0);
        cr_assert_str_eq(buf, texts[i]);
        cr_assert_eq(spec_validate(&s, &e), FG_OK, "%s: %s", texts[i], e.msg);
    }
}

Test(spec, parse_errors_name_the_key) {
    struct { const char *text, *expect; } cases[] = {
        {"kind=fwd,arch=sm_90a,dtype=bf16", "head_dim"},                 /* missing required key */
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,colour=red", "colour"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,head_dim=64", "twice"},
        {"kind=fwd,arch=sm90,dtype=bf16,head_dim=128", "sm90"},
        {"kind=fwd,arch=sm_90a,dtype=bf17,head_dim=128", "bf17"},
        {"kind=back,arch=sm_90a,dtype=bf16,head_dim=128", "kind"},
        {"kind=fwd,arch=sm_90,dtype=bf16,head_dim=128,deterministic=1", "deterministic"}, /* bwd only */
        {"kind=bwd,arch=sm_90,dtype=bf16,head_dim=128,deterministic=2", "deterministic"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=-8", "head_dim"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=12x", "head_dim"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,causal=2", "causal"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim", "key=value"},
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,out=fp16", "out=fp16"},  /* out= of a 16-bit spec */
        {"kind=fwd,arch=sm_90,dtype=e4m3,head_dim=128,out=fp32", "out"},       /* fp8 writes fp16 or bf16 */
        {"kind=fwd,arch=sm_90,dtype=e4m3,head_dim=128,out=e5m2", "out"},
        {"kind=fwd,arch=sm_90,dtype=e4m3,head_dim=128,out=bf16,out=bf16", "twice"},
        {"kind=merge,arch=sm_90,dtype=bf16", "dtype"},                            /* merge: kind and arch only */
        {"kind=merge,dtype=bf16", "dtype"},
        {"kind=merge", "arch"},
        {"kind=fwd,arch=sm_90,dtype=bf16,head_dim=128,splits=2", "splits"},         /* serve only */
        {"kind=serve,arch=sm_90,dtype=bf16,head_dim=128,varlen=1", "varlen"},       /* fwd only */
        {"kind=merge,arch=sm_90,sinks=1", "sinks"},           /* the merge has no model variants */
        {"kind=merge,arch=sm_90,window=1", "window"},
        {"kind=merge,arch=sm_90,softcap=1", "softcap"},
        {"kind=merge,arch=sm_90,alibi=1", "alibi"},
        {"kind=serve,arch=sm_90,dtype=bf16,head_dim=128,softcap=yes", "softcap"},
        {"kind=merge,arch=sm_90,head_dim_v=64", "head_dim_v"},
        {"kind=serve,arch=sm_90,dtype=bf16,head_dim=128,window=2", "window"},
        {"kind=fwd,arch=sm_90,dtype=bf16,head_dim=128,v_in_k=1", "v_in_k"}, /* serve only */
        {"kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,varlen=2", "varlen"},
        {"kind=fwd,arch=sm_90,dtype=bf16,head_dim=128,kv=e4m3", "kv is a key of kind=serve"}, /* serve only */
        {"kind=serve,arch=sm_90,dtype=bf16,head_dim=128,kv=bf16", "kv must be e4m3 or e5m2"},
        {"kind=serve,arch=sm_90,dtype=bf16,head_dim=128,kv=fp8", "got 'fp8'"},
        {"kind=serve,arch=sm_90,dtype=bf16,head_dim=128,kv=e4m3,kv=e5m2", "twice"},
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

/* Every head dim the mma.sync family takes (multiples of 8) on every arch, sm_90 included; on sm_90a (the
 * wgmma family) every multiple of 32, while the other head dims are refused there, by the policy (no rule
 * below 32) or by validation. */
Test(spec, default_policy_fills_valid_tiles_for_every_head_dim_and_arch) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    const int archs[][2] = {{80, 0}, {86, 0}, {87, 0}, {89, 0}, {90, 1}, {90, 0}, {100, 0}, {120, 0}};
    int wgmma_ok = 0;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (int d = 8; d <= 256; d += 8)
            for (int c = 0; c < 2; c++)
                for (int dt = 0; dt < 2; dt++) {
                    fg_spec s = {.kind = FG_KIND_FWD, .arch = archs[a][0], .arch_accel = archs[a][1],
                                 .dtype = dt ? FG_DTYPE_BF16 : FG_DTYPE_F16, .head_dim = d, .causal = c};
                    char name[FG_SPEC_NAME_MAX];
                    if (spec_is_wgmma(&s) && d % 32 != 0) {
                        fg_error_clear(&e);
                        fg_status st = spec_fill_tiles(&s, &p, &e);
                        if (st == FG_OK) st = spec_validate(&s, &e);
                        spec_format(&s, name, sizeof name);
                        cr_assert_eq(st, FG_ERR_UNSUPPORTED, "%s was accepted on sm_90a", name);
                        cr_assert(strstr(e.msg, "sm_90a"), "%s: %s", name, e.msg);
                        continue;
                    }
                    cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK, "%s", e.msg);
                    spec_format(&s, name, sizeof name);
                    cr_assert_eq(spec_validate(&s, &e), FG_OK, "default tiles of %s refused: %s", name, e.msg);
                    wgmma_ok += spec_is_wgmma(&s);
                }
    cr_assert_eq(wgmma_ok, 8 * 2 * 2, "sm_90a: head_dim 32, 64, ..., 256, causal or not, fp16 and bf16");
    tile_policy_free(&p);
}

/* The defaults for fp8 pass validation wherever fp8 runs (block_n a multiple of 32 included), and the
 * fp8 rule of sm_90 is what tile_policy.c says. sm_90a (the wgmma family) has no FP8 kernel: refused. */
Test(spec, default_policy_fills_valid_fp8_tiles) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    const int archs[][2] = {{89, 0}, {90, 0}, {100, 0}, {103, 0}, {110, 0}, {120, 0}, {121, 0}};
    const fg_dtype dts[2] = {FG_DTYPE_E4M3, FG_DTYPE_E5M2};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (int d = 32; d <= 256; d += 32)
            for (int c = 0; c < 2; c++)
                for (int dt = 0; dt < 4; dt++) {
                    fg_spec s = {.kind = FG_KIND_FWD, .arch = archs[a][0], .arch_accel = archs[a][1],
                                 .dtype = dts[dt % 2], .head_dim = d, .causal = c,
                                 .out_dtype = dt / 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16};
                    cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK, "%s", e.msg);
                    char name[FG_SPEC_NAME_MAX];
                    spec_format(&s, name, sizeof name);
                    cr_assert_eq(spec_validate(&s, &e), FG_OK, "default tiles of %s refused: %s", name, e.msg);
                    cr_assert_eq(s.block_n % 32, 0, "%s", name);
                }
    for (int d = 32; d <= 256; d += 32)
        for (int dt = 0; dt < 2; dt++) {
            fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = dts[dt], .head_dim = d,
                         .out_dtype = FG_DTYPE_BF16};
            fg_error_clear(&e);
            fg_status st = spec_fill_tiles(&s, &p, &e);
            if (st == FG_OK) st = spec_validate(&s, &e);
            /* the wgmma family's FP8 takes head dims that are multiples of 64 (64- or 128-byte rows) */
            if (d % 64 == 0) {
                cr_assert_eq(st, FG_OK, "fp8 head_dim %d on sm_90a: %s", d, e.msg);
                cr_assert(s.block_n == 64 || s.block_n == 128, "d %d: block_n %d", d, s.block_n);
            } else {
                cr_assert_eq(st, FG_ERR_UNSUPPORTED, "fp8 head_dim %d was accepted on sm_90a", d);
                cr_assert(strstr(e.msg, "sm_90a") && strstr(e.msg, dtype_name(dts[dt])), "%s", e.msg);
            }
        }
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 0, .dtype = FG_DTYPE_E5M2, .head_dim = 128,
                 .causal = 1, .out_dtype = FG_DTYPE_BF16};
    cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK, "%s", e.msg);
    /* sm_90's FP8 rule for d 65-128 (the H200 sweep's winner, tile_policy.c) */
    cr_assert(s.block_m == 64 && s.block_n == 32 && s.warps == 4 && s.stages == 3, "%d x %d, %d warps, %d stages",
              s.block_m, s.block_n, s.warps, s.stages);
    fg_spec h = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 0, .dtype = FG_DTYPE_BF16, .head_dim = 128,
                 .causal = 1};
    cr_assert_eq(spec_fill_tiles(&h, &p, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(h.block_n, 48, "the 16-bit sm_90 causal d128 tile is unchanged");
    tile_policy_free(&p);
}

Test(spec, policy_override_takes_precedence_and_set_fields_are_kept) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    fg_tile_rule r = {90, 90, 128, 128, 1, -1, 64, 16, 4, 4, FG_FAMILY_MMA, FG_KIND_FWD};
    cr_assert_eq(tile_policy_add(&p, &r, &e), FG_OK);
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 0, .dtype = FG_DTYPE_BF16, .head_dim = 128, .causal = 1};
    cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK);
    cr_assert_eq(s.block_m, 64);
    cr_assert_eq(s.block_n, 16);
    cr_assert_eq(s.warps, 4);
    cr_assert_eq(s.stages, 4);
    fg_spec t = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 0, .dtype = FG_DTYPE_BF16, .head_dim = 128, .causal = 0,
                 .block_n = 128};
    cr_assert_eq(spec_fill_tiles(&t, &p, &e), FG_OK);
    cr_assert_eq(t.block_n, 128, "an explicitly set field must not be overwritten");
    fg_tile_policy def;
    cr_assert_eq(tile_policy_init_default(&def, &e), FG_OK);
    fg_spec plain = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 0, .dtype = FG_DTYPE_BF16, .head_dim = 128};
    cr_assert_eq(spec_fill_tiles(&plain, &def, &e), FG_OK);
    cr_assert_eq(t.stages, plain.stages, "the override is for causal only");
    cr_assert_neq(t.stages, 4, "the override is for causal only");
    tile_policy_free(&def);
    fg_spec u = {.kind = FG_KIND_FWD, .arch = 75, .dtype = FG_DTYPE_BF16, .head_dim = 128};
    cr_assert_eq(spec_fill_tiles(&u, &p, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "sm_75"), "%s", e.msg);
    /* The override names the mma.sync family: sm_90a (wgmma) keeps its own default. */
    fg_spec w = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 128,
                 .causal = 1};
    const fg_tile_rule *wr = tile_policy_lookup(&p, &w);
    cr_assert(wr && wr != &p.rules[p.count - 1] && wr->family == FG_FAMILY_WGMMA);
    cr_assert_eq(spec_fill_tiles(&w, &p, &e), FG_OK, "%s", e.msg);
    cr_assert(w.block_n != 16 && w.warps == 4 * (w.block_m / 64 + 1), "%d x %d, %d warps", w.block_m, w.block_n,
              w.warps);
    tile_policy_free(&p);
}

/* sm_90a specs get the wgmma family's rules and sm_90 specs the mma.sync family's, for the same compute
 * capability; an added rule applies to the family it names (both for FG_FAMILY_ANY). */
/* The same forward problem (dtype, head_dim, no mask) as an sm_90a spec (*a) and an sm_90 one (*b),
 * tiles unset. */
static void hopper_pair(fg_dtype dtype, int head_dim, fg_spec *a, fg_spec *b) {
    *a = (fg_spec){.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = dtype, .head_dim = head_dim};
    *b = *a;
    b->arch_accel = 0;
}

Test(spec, policy_rules_follow_the_kernel_family) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    for (int d = 32; d <= 256; d += 32)
        for (int c = 0; c < 2; c++)
            for (int dt = 0; dt < 2; dt++) {
                fg_spec wg = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1,
                              .dtype = dt ? FG_DTYPE_BF16 : FG_DTYPE_F16, .head_dim = d, .causal = c};
                fg_spec mma = wg;
                mma.arch_accel = 0;
                cr_assert(spec_is_wgmma(&wg) && !spec_is_wgmma(&mma));
                const fg_tile_rule *rw = tile_policy_lookup(&p, &wg), *rm = tile_policy_lookup(&p, &mma);
                cr_assert(rw && rm, "head_dim %d causal %d: no rule", d, c);
                cr_assert_eq(rw->family, FG_FAMILY_WGMMA, "sm_90a head_dim %d causal %d", d, c);
                cr_assert_eq(rm->family, FG_FAMILY_MMA, "sm_90 head_dim %d causal %d", d, c);
                cr_assert_eq(spec_fill_tiles(&wg, &p, &e), FG_OK, "%s", e.msg);
                cr_assert_eq(spec_fill_tiles(&mma, &p, &e), FG_OK, "%s", e.msg);
                /* wgmma tiles: 64 rows per consumer warpgroup plus the producer warpgroup */
                cr_assert(wg.block_m == 64 || wg.block_m == 128 || wg.block_m == 192, "block_m %d", wg.block_m);
                cr_assert_eq(wg.warps, 4 * (wg.block_m / 64 + 1));
                cr_assert(mma.warps == 1 || mma.warps == 2 || mma.warps == 4 || mma.warps == 8, "warps %d", mma.warps);
                cr_assert_eq(spec_validate(&wg, &e), FG_OK, "%s", e.msg);
                cr_assert_eq(spec_validate(&mma, &e), FG_OK, "%s", e.msg);
            }
    /* sm_90 keeps the mma.sync rules of the H200 sweep (tile_policy.c) for bf16 head_dim 128 and 64, not
     * causal, while sm_90a gets warpgroup tiles (which the wgmma sweeps may change: checked by shape). */
    fg_spec a, b;
    hopper_pair(FG_DTYPE_BF16, 128, &a, &b);
    cr_assert_eq(spec_fill_tiles(&a, &p, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(spec_fill_tiles(&b, &p, &e), FG_OK, "%s", e.msg);
    cr_assert(a.warps == 4 * (a.block_m / 64 + 1) && a.warps != b.warps, "sm_90a d128: %d x %d, %d warps", a.block_m,
              a.block_n, a.warps);
    cr_assert(b.block_m == 128 && b.block_n == 48 && b.warps == 4 && b.stages == 2, "sm_90 d128: %d x %d, %d warps, "
              "%d stages", b.block_m, b.block_n, b.warps, b.stages);
    hopper_pair(FG_DTYPE_BF16, 64, &a, &b);
    cr_assert_eq(spec_fill_tiles(&a, &p, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(spec_fill_tiles(&b, &p, &e), FG_OK, "%s", e.msg);
    cr_assert(a.warps == 4 * (a.block_m / 64 + 1) && a.warps != b.warps, "sm_90a d64: %d x %d, %d warps", a.block_m,
              a.block_n, a.warps);
    cr_assert(b.block_m == 128 && b.block_n == 96 && b.warps == 4 && b.stages == 3, "sm_90 d64: %d x %d, %d warps, "
              "%d stages", b.block_m, b.block_n, b.warps, b.stages);
    /* No wgmma rule below head_dim 32: sm_90a has no tile there, sm_90 does. */
    hopper_pair(FG_DTYPE_F16, 16, &a, &b);
    cr_assert_null(tile_policy_lookup(&p, &a));
    cr_assert_not_null(tile_policy_lookup(&p, &b));

    /* Added rules: a wgmma one, then an mma.sync one; each leaves the other family alone. */
    const fg_spec wg = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 128};
    fg_spec mma = wg, amp = wg;
    mma.arch_accel = 0;
    amp.arch = 80;
    amp.arch_accel = 0;
    const fg_tile_rule rw = {80, 90, 8, 256, -1, -1, 64, 64, 8, 3, FG_FAMILY_WGMMA, FG_KIND_FWD};
    const fg_tile_rule rm = {90, 90, 8, 256, -1, -1, 64, 32, 4, 2, FG_FAMILY_MMA, FG_KIND_FWD};
    const fg_tile_rule ra = {90, 90, 8, 256, -1, -1, 128, 64, 8, 4, FG_FAMILY_ANY, FG_KIND_FWD};
    cr_assert_eq(tile_policy_add(&p, &rw, &e), FG_OK);
    cr_assert_eq(tile_policy_lookup(&p, &wg)->block_n, 64, "the wgmma rule applies to sm_90a");
    cr_assert_eq(tile_policy_lookup(&p, &mma)->block_n, 48, "sm_90 keeps its default");
    cr_assert_eq(tile_policy_lookup(&p, &amp)->family, FG_FAMILY_MMA, "sm_80 is never the wgmma family");
    cr_assert_eq(tile_policy_add(&p, &rm, &e), FG_OK);
    cr_assert_eq(tile_policy_lookup(&p, &wg), &p.rules[p.count - 2], "sm_90a keeps the wgmma rule");
    cr_assert_eq(tile_policy_lookup(&p, &mma), &p.rules[p.count - 1], "the mma.sync rule applies to sm_90");
    fg_spec filled = wg;
    cr_assert_eq(spec_fill_tiles(&filled, &p, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(spec_validate(&filled, &e), FG_OK, "64 x 64 with 8 warps is a valid sm_90a tile: %s", e.msg);
    filled = mma;
    cr_assert_eq(spec_fill_tiles(&filled, &p, &e), FG_OK, "%s", e.msg);
    cr_assert(filled.block_m == 64 && filled.block_n == 32 && filled.warps == 4 && filled.stages == 2);
    cr_assert_eq(tile_policy_add(&p, &ra, &e), FG_OK);
    cr_assert_eq(tile_policy_lookup(&p, &wg), &p.rules[p.count - 1], "FG_FAMILY_ANY applies to sm_90a");
    cr_assert_eq(tile_policy_lookup(&p, &mma), &p.rules[p.count - 1], "FG_FAMILY_ANY applies to sm_90");
    tile_policy_free(&p);
}

/* The sm_90a FP8 forward's shared memory, byte for byte against forward_wgmma.cuh's layout: 1 KiB of slack, the
 * Q buffers and K/V stages (one byte an element), at head_dim 64/128 the 8 rows of ones under each V^T
 * chunk of every stage (the P.V wgmma's row sums: spec_fp8_pv_sum; not above d 128; three consumer
 * warpgroups at d 128 no longer fit the registers), and 8-byte words: Q's two barriers a buffer, K/V's four a stage, the tile ring's
 * six (4 barriers, 2 indices, the count and the reordering warps' stop) and FP8's "reordered" barrier a
 * stage. The figures are the ones `flashgen compile` reports for these variants. */
Test(spec, fp8_sm90a_smem_and_row_sums) {
    static const struct {
        int d, bm, bn, st, pv_sum;
        int flush_smem; /* the shared-memory level's period in key blocks: at most 512 keys; 0 without one */
        size_t bytes;
    } c[] = {
        {128, 128, 128, 2, 8, 0, 1024 + 128 * (2 * 128 + 2 * 128 * 2) + 8 * 128 * 2 + 8 * (2 * 2 + 4 * 2 + 6 + 2)},
        {64, 128, 128, 2, 8, 0, 1024 + 64 * (2 * 128 + 2 * 128 * 2) + 8 * 128 * 2 + 8 * (2 * 2 + 4 * 2 + 6 + 2)},
        /* above d 128: O's fp32 level in shared memory (block_m x d x 4), one Q buffer (two at 128 x 96) */
        {256, 128, 64, 2, 0, 8, 1024 + 256 * (128 + 2 * 64 * 2) + 128 * 256 * 4 + 8 * (2 * 1 + 4 * 2 + 6 + 2)},
        {192, 128, 128, 2, 0, 4, 1024 + 192 * (128 + 2 * 128 * 2) + 128 * 192 * 4 + 8 * (2 * 1 + 4 * 2 + 6 + 2)},
        {192, 128, 96, 2, 0, 5, 1024 + 192 * (2 * 128 + 2 * 96 * 2) + 128 * 192 * 4 + 8 * (2 * 2 + 4 * 2 + 6 + 2)},
        /* three consumer warpgroups: the fp32 level in shared memory too (192 x (d + the row-sum group) x 4) */
        {64, 192, 64, 2, 8, 8, 1024 + 64 * (2 * 192 + 2 * 64 * 2) + 8 * 64 * 2 + 192 * (64 + 8) * 4 + 8 * (2 * 2 + 4 * 2 + 6 + 2)},
        {64, 64, 224, 3, 8, 0, 1024 + 64 * (2 * 64 + 2 * 224 * 3) + 8 * 224 * 3 + 8 * (2 * 2 + 4 * 3 + 6 + 3)},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        fg_spec s = wg_base();
        s.dtype = FG_DTYPE_E4M3;
        s.out_dtype = FG_DTYPE_BF16;
        s.head_dim = c[i].d;
        s.block_m = c[i].bm;
        s.block_n = c[i].bn;
        s.stages = c[i].st;
        s.warps = 4 * (s.block_m / 64 + 1);
        fg_error e;
        cr_assert_eq(spec_validate(&s, &e), FG_OK, "d %d %d x %d: %s", s.head_dim, s.block_m, s.block_n, e.msg);
        cr_assert_eq(spec_fp8_pv_sum(&s), c[i].pv_sum, "d %d %d x %d", s.head_dim, s.block_m, s.block_n);
        /* what the CLI's and the tests' checks model (the tuner once judged these variants by the plain formula
         * and recorded them as wrong at 8k keys) */
        cr_assert_eq(spec_fp8_sum_rounded(&s), c[i].pv_sum > 0, "d %d %d x %d", s.head_dim, s.block_m, s.block_n);
        /* the two-level accumulation up to head_dim 128 (above it O's second copy does not fit): every step
         * at d 64, every 2 at d 128 */
        const int smem_level = c[i].d > 128 || c[i].bm == 192;
        cr_assert_eq(spec_fp8_o_flush(&s), smem_level ? 0 : c[i].d <= 64 ? 1 : 2, "d %d %d x %d", s.head_dim,
                     s.block_m, s.block_n);
        /* ... and in shared memory above, every 512 keys at most (d 256 128 x 64: every 8 blocks) */
        cr_assert_eq(spec_fp8_o_flush_smem(&s), c[i].flush_smem, "d %d %d x %d", s.head_dim, s.block_m, s.block_n);
        cr_assert_eq(smem_level, c[i].flush_smem > 0);
        cr_assert_eq(spec_smem_bytes(&s), c[i].bytes, "d %d %d x %d, %d stages: %zu bytes, expected %zu", s.head_dim,
                     s.block_m, s.block_n, s.stages, spec_smem_bytes(&s), c[i].bytes);
        fg_spec mma = s; /* the mma.sync family's FP8 sums in fp32 */
        mma.arch_accel = 0;
        cr_assert_eq(spec_fp8_sum_rounded(&mma), 0);
        cr_assert_eq(spec_fp8_o_flush(&mma), 0);
        s.dtype = FG_DTYPE_BF16; /* 16-bit kernels have no row-sum rows */
        cr_assert_eq(spec_fp8_pv_sum(&s), 0);
        cr_assert_eq(spec_fp8_sum_rounded(&s), 0);
    }
}

/* The backward's canonical name carries its mode; it round-trips, takes its tiles from the bwd rules (not
 * the forward's), and every policy tile for head dims 16..128 is valid. */
/* The mma.sync forward's key sub-blocks: the whole block while S fits beside O (176 accumulator registers),
 * else the widest divisor that fits (16-key steps, FP8 32); refused only when no step fits. */
Test(spec, forward_key_sub_blocks) {
    fg_spec s = base(); /* d 128, 128 x 64, 8 warps: one m16 tile a warp, 64 + 32 registers */
    cr_assert_eq(spec_fwd_sub_n(&s), 64);
    s.warps = 4; /* two m16 tiles a warp: 2 * (64 + 32) = 192 > 176, so 32-key steps (2 * (64 + 16)) */
    cr_assert_eq(spec_fwd_sub_n(&s), 32);
    cr_assert_eq(spec_validate(&s, NULL), FG_OK);
    s.block_n = 96; /* 96 does not fit, 80 and 64 do not divide it, 48 fits: 2 * (64 + 24) = 176 */
    cr_assert_eq(spec_fwd_sub_n(&s), 48);
    s.block_n = 80; /* only 16 divides 80 among the multiples of 16 that fit */
    cr_assert_eq(spec_fwd_sub_n(&s), 16);
    s.dtype = FG_DTYPE_E4M3;
    s.out_dtype = FG_DTYPE_BF16;
    s.block_n = 128; /* FP8 steps are multiples of 32: 128 and 64 do not fit (256, 192), 32 does */
    cr_assert_eq(spec_fwd_sub_n(&s), 32);
    s = base();
    s.head_dim = 256;
    s.warps = 4; /* 2 * (128 + 8) = 272 even in 16-key steps */
    cr_assert_eq(spec_fwd_sub_n(&s), 0);
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(spec_validate(&s, &err), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "accumulator registers") != NULL && strstr(err.msg, "narrowest key steps") != NULL, "%s",
              err.msg);
}

Test(spec, backward_name_policy_and_rules) {
    fg_spec s = bwd_base();
    char name[FG_SPEC_NAME_MAX];
    cr_assert_gt(spec_format(&s, name, sizeof name), 0);
    cr_assert_str_eq(name, "arch=sm_90,block_m=32,block_n=64,causal=1,deterministic=1,dtype=bf16,head_dim=128,"
                           "kind=bwd,stages=2,warps=4");
    fg_spec back;
    fg_error e;
    cr_assert_eq(spec_parse(name, &back, &e), FG_OK, "%s", e.msg);
    cr_assert(spec_equal(&s, &back));
    back.deterministic = 0;
    cr_assert_not(spec_equal(&s, &back), "the mode is part of the variant");
    /* tma=1 (the mma.sync kernel's TMA loads): named only when set, between stages and warps; part of the
     * variant; a bwd key only; sm_90+ mma.sync, head_dim a multiple of 64 (64 to 256), block_m a multiple of 64 */
    fg_spec tm = bwd_base();
    tm.block_m = 64, tm.block_n = 128, tm.warps = 8, tm.tma = 1;
    cr_assert_gt(spec_format(&tm, name, sizeof name), 0);
    cr_assert_str_eq(name, "arch=sm_90,block_m=64,block_n=128,causal=1,deterministic=1,dtype=bf16,head_dim=128,"
                           "kind=bwd,stages=2,tma=1,warps=8");
    cr_assert_eq(spec_parse(name, &back, &e), FG_OK, "%s", e.msg);
    cr_assert(spec_equal(&tm, &back) && back.tma == 1);
    back.tma = 0;
    cr_assert_not(spec_equal(&tm, &back), "the loads are part of the variant");
    cr_assert_eq(spec_validate(&tm, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(spec_parse("kind=fwd,arch=sm_90,dtype=bf16,head_dim=64,tma=1", &back, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "tma is a key of kind=bwd"), "%s", e.msg);
    cr_assert_eq(spec_parse("kind=bwd,arch=sm_90,dtype=bf16,head_dim=64,tma=2", &back, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "tma must be 0 or 1"), "%s", e.msg);
    tm.arch = 80;
    cr_assert_eq(spec_validate(&tm, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "tma=1") && strstr(e.msg, "sm_90 or newer"), "%s", e.msg);
    tm.arch = 90, tm.block_m = 32, tm.warps = 4, tm.block_n = 64;
    cr_assert_eq(spec_validate(&tm, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "block_m a multiple of 64"), "%s", e.msg);
    /* d 192 and 256: TMA loads into the same tiles; their dQ goes by vector reductions from
     * the registers, with no staging, so only the alignment slack and the three mbarriers are added */
    fg_spec big = {.kind = FG_KIND_BWD, .arch = 90, .dtype = FG_DTYPE_BF16, .head_dim = 256, .block_m = 64,
                   .block_n = 64, .warps = 8, .stages = 2, .tma = 1};
    cr_assert_eq(spec_validate(&big, &e), FG_OK, "%s", e.msg);
    cr_assert_not(spec_bwd_dq_staged(&big));
    fg_spec big0 = big;
    big0.tma = 0;
    cr_assert_eq(spec_smem_bytes(&big) - spec_smem_bytes(&big0), (size_t)(1024 + 24));
    big.head_dim = 192;
    cr_assert_eq(spec_validate(&big, &e), FG_OK, "%s", e.msg);
    big.head_dim = 160;
    cr_assert_eq(spec_validate(&big, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "64, 128, 192 or 256"), "%s", e.msg);
    fg_tile_policy pol;
    cr_assert_eq(tile_policy_init_default(&pol, &e), FG_OK);
    /* Every multiple of 8 up to 128 (sm_80, the 99 KiB parts, sm_90), 16 keys a warp; a head dim the kernel pads
     * takes the tile of the one it pads to. */
    for (int d = 8; d <= 128; d += 8)
        for (int arch = 80; arch <= 90; arch += (arch == 80 ? 6 : 4)) {
            fg_spec t = {.kind = FG_KIND_BWD, .arch = arch, .dtype = FG_DTYPE_F16, .head_dim = d, .causal = d % 32 == 0};
            cr_assert_eq(spec_fill_tiles(&t, &pol, &e), FG_OK, "d %d: %s", d, e.msg);
            cr_assert_eq(t.block_n, 16 * t.warps, "d %d", d);
            cr_assert_eq(spec_validate(&t, &e), FG_OK, "d %d sm_%d: %s", d, arch, e.msg);
            cr_assert_eq(tile_policy_lookup(&pol, &t)->kind, FG_KIND_BWD, "d %d: a backward rule", d);
            fg_spec u = {.kind = FG_KIND_BWD, .arch = arch, .dtype = FG_DTYPE_F16, .head_dim = spec_bwd_head_dim_padded(d),
                         .causal = t.causal};
            cr_assert_eq(spec_fill_tiles(&u, &pol, &e), FG_OK, "d %d: %s", u.head_dim, e.msg);
            cr_assert(t.block_m == u.block_m && t.block_n == u.block_n && t.warps == u.warps && t.stages == u.stages,
                      "d %d sm_%d: %d x %d w%d s%d, not d %d's %d x %d w%d s%d", d, arch, t.block_m, t.block_n, t.warps,
                      t.stages, u.head_dim, u.block_m, u.block_n, u.warps, u.stages);
            fg_spec f = t;
            f.kind = FG_KIND_FWD;
            cr_assert_eq(tile_policy_lookup(&pol, &f)->kind, FG_KIND_FWD, "d %d: the forward never gets a backward rule", d);
        }
    /* Above 128 (every multiple of 8, computed at the next multiple of 32): 64 x 64 on 8 warps (8 keys a warp).
     * sm_90 holds them in two stages up to 256, sm_80 up to 192 and in one stage above; the 99 KiB parts (sm_86)
     * in one stage up to 160, 64 x 32 on 4 warps up to 192, and above it the refusal names the shared memory. */
    for (int d = 136; d <= 256; d += 8)
        for (int arch = 80; arch <= 90; arch += (arch == 80 ? 6 : 4)) {
            fg_spec t = {.kind = FG_KIND_BWD, .arch = arch, .dtype = FG_DTYPE_BF16, .head_dim = d, .causal = 1};
            cr_assert_eq(spec_fill_tiles(&t, &pol, &e), FG_OK, "d %d: %s", d, e.msg);
            if (arch == 86 && d > 160 && d <= 192) /* 99 KiB: 64 x 32 on 4 warps, one stage */
                cr_assert(t.block_m == 64 && t.block_n == 32 && t.warps == 4 && t.stages == 1, "d %d: %dx%d w%d s%d", d,
                          t.block_m, t.block_n, t.warps, t.stages);
            else
                cr_assert(t.block_m == 64 && t.block_n == 64 && t.warps == 8, "d %d: %dx%d w%d", d, t.block_m, t.block_n,
                          t.warps);
            if (arch != 86 || d <= 160)
                cr_assert_eq(t.stages, (arch == 80 && d > 192) || arch == 86 ? 1 : 2, "d %d sm_%d: stages %d", d, arch,
                             t.stages);
            fg_status st = spec_validate(&t, &e);
            if (arch == 86 && d > 192) {
                cr_assert_eq(st, FG_ERR_UNSUPPORTED, "d %d sm_86", d);
                cr_assert(strstr(e.msg, "shared memory") != NULL, "%s", e.msg);
            } else {
                cr_assert_eq(st, FG_OK, "d %d sm_%d: %s", d, arch, e.msg);
            }
            cr_assert_not(spec_bwd_dq_staged(&t), "d %d: dQ staging rows would not fit", d);
        }
    /* One stage: the smaller shared memory; tma=1 takes two. */
    {
        fg_spec one = {.kind = FG_KIND_BWD, .arch = 80, .dtype = FG_DTYPE_BF16, .head_dim = 256, .block_m = 64,
                       .block_n = 64, .warps = 8, .stages = 1};
        fg_spec two = one;
        two.stages = 2;
        cr_assert_eq(spec_smem_bytes(&two) - spec_smem_bytes(&one), (size_t)(2 * 64 * 256 * 2 + 2 * 64 * 4));
        fg_spec t1 = {.kind = FG_KIND_BWD, .arch = 90, .dtype = FG_DTYPE_BF16, .head_dim = 128, .block_m = 64,
                      .block_n = 128, .warps = 8, .stages = 1, .tma = 1};
        cr_assert_eq(spec_validate(&t1, &e), FG_ERR_UNSUPPORTED);
        cr_assert(strstr(e.msg, "stages 2") != NULL, "%s", e.msg);
        t1.tma = 0;
        cr_assert_eq(spec_validate(&t1, &e), FG_OK, "%s", e.msg);
        t1.stages = 3;
        cr_assert_eq(spec_validate(&t1, &e), FG_ERR_UNSUPPORTED);
    }
    /* The sm_90a backward (backward_wgmma.cuh): head_dim 64 (128 x 128) or 128 (64 x 128) on 8 warps, not
     * deterministic; the policy gives it its tile, the rules refuse the rest with a sentence naming sm_90 as
     * the way out. */
    for (int i = 0; i < 4; i++) {
        const int d = i < 2 ? 64 : 128;
        fg_spec w = {.kind = FG_KIND_BWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_F16, .head_dim = d, .causal = i % 2};
        w.out_dtype = w.dtype;
        cr_assert_eq(spec_fill_tiles(&w, &pol, &e), FG_OK, "%s", e.msg);
        /* head_dim 128 without a causal mask: 80-query blocks (dQ^T, FlashAttention-3's tile there) */
        cr_assert(w.block_m == (d == 64 ? 128 : w.causal ? 64 : 80) && w.block_n == 128 && w.warps == 8, "d %d: %dx%d w%d",
                  d, w.block_m, w.block_n, w.warps);
        cr_assert_eq(spec_bwd_sm90_dq_t(&w), w.block_m == 80);
        cr_assert_eq(spec_bwd_rows_block(&w), w.block_m == 80 ? 80 : 64);
        cr_assert_eq(spec_validate(&w, &e), FG_OK, "d %d: %s", d, e.msg);
        cr_assert(spec_is_wgmma_bwd(&w) && !spec_is_wgmma(&w));
        cr_assert_gt(spec_format(&w, name, sizeof name), 0);
        cr_assert(strstr(name, "arch=sm_90a") && strstr(name, "kind=bwd"), "%s", name);
        w.deterministic = 1;
        cr_assert_eq(spec_validate(&w, &e), FG_ERR_UNSUPPORTED);
        cr_assert(strstr(e.msg, "sm_90a") && strstr(e.msg, "deterministic=0"), "%s", e.msg);
    }
    fg_spec w = {.kind = FG_KIND_BWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 96,
                 .block_m = 64, .block_n = 128, .warps = 8, .stages = 2};
    w.out_dtype = w.dtype;
    cr_assert_eq(spec_validate(&w, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "head_dim 64 with block_m 128 or head_dim 128"), "%s", e.msg);
    w.head_dim = 128, w.block_m = 128; /* 128-query blocks only at head_dim 64 */
    cr_assert_eq(spec_validate(&w, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "head_dim 128 with block_m 64"), "%s", e.msg);
    w.block_m = 80; /* 80-query blocks only without a causal mask */
    cr_assert_eq(spec_validate(&w, &e), FG_OK, "%s", e.msg);
    w.causal = 1;
    cr_assert_eq(spec_validate(&w, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "or 80 without a causal mask"), "%s", e.msg);
    w.causal = 0;
    w.head_dim = 64, w.block_m = 64; /* and only those there */
    cr_assert_eq(spec_validate(&w, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "head_dim 64 with block_m 128"), "%s", e.msg);
    w.head_dim = 96;
    w.arch = 100;
    cr_assert_eq(spec_validate(&w, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "no sm_100a kernel"), "%s", e.msg);
    /* 8 keys a warp needs 4 warps or more (two 32-key groups of phase 1 at least one query quarter each),
     * and block_m a multiple of 4 x 16 with 8 warps; the register estimate still bounds the tile. */
    fg_spec t = bwd_base();
    t.warps = 2, t.block_n = 16, t.block_m = 32;
    cr_assert_eq(spec_validate(&t, &e), FG_ERR_UNSUPPORTED);
    t = bwd_base();
    t.head_dim = 256, t.warps = 8, t.block_n = 64, t.block_m = 32;
    cr_assert_eq(spec_validate(&t, &e), FG_ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "query parts") != NULL, "%s", e.msg);
    t.block_m = 128; /* dK, dV 128 + S^T, dP^T 64 of a 32-row query quarter: 192, but dQ's 128 + 128 */
    cr_assert_eq(spec_validate(&t, &e), FG_ERR_UNSUPPORTED);
    tile_policy_free(&pol);
}
