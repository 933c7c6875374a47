/* test_config.c: the bundle config loader (generator/config.c), which runs configs in the Lua sandbox
 * (test_lua_sandbox.c's). Covers the product, field type errors, tile overrides, duplicates, the arch
 * override and validation. Run from the repository root (configs/default.lua). */
#include <criterion/criterion.h>
#include "tests/test_util.h"
#include <unistd.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generator/config.h"
#include "generator/tile_policy.h"
#include "generator/validate.h"

/* A regression that lets a runaway script loop must fail the test, not hang the suite. */
TestSuite(config, .timeout = 20);

/* ---- config loader ---- */

/* Loads text as config "cfg.lua" and asserts success. */
static void load_ok(const char *text, const char *arch_override, fg_config *cfg) {
    fg_error err;
    fg_error_clear(&err);
    fg_status st = config_load_string("cfg.lua", text, strlen(text), arch_override, cfg, &err);
    cr_assert_eq(st, FG_OK, "config failed (%d): %s\n%s", st, err.msg, text);
}

/* Loads text as config "cfg.lua", asserts it fails with status `want`, a message that starts with
 * `where` and contains `what`, and an output left empty. */
static void load_fails(const char *text, const char *arch_override, fg_status want, const char *where,
                       const char *what) {
    fg_error err;
    fg_error_clear(&err);
    fg_config cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    fg_status st = config_load_string("cfg.lua", text, strlen(text), arch_override, &cfg, &err);
    cr_assert_eq(st, want, "status %d, message: %s\n%s", st, err.msg, text);
    cr_assert(strncmp(err.msg, where, strlen(where)) == 0, "message should start with '%s': %s", where, err.msg);
    cr_assert(strstr(err.msg, what) != NULL, "message should mention '%s': %s", what, err.msg);
    cr_assert_null(cfg.variants);
    cr_assert_eq(cfg.count, 0);
}

/* Writes the canonical name of variant i of cfg into buf; returns its length or -1. */
static int spec_named(const fg_config *cfg, int i, char *buf, size_t n) {
    return spec_format(&cfg->variants[i], buf, n);
}

Test(config, cartesian_product) {
    fg_config cfg;
    load_ok("variants { kind = 'fwd', arch = {'sm_80', 'sm_90a'}, dtype = {'fp16', 'bf16'},\n"
            "           head_dim = {64, 128}, causal = {false, true} }",
            NULL, &cfg);
    cr_assert_eq(cfg.count, 16);
    /* the last field varies fastest */
    cr_assert_eq(cfg.variants[0].arch, 80);
    cr_assert_eq(cfg.variants[0].causal, 0);
    cr_assert_eq(cfg.variants[1].causal, 1);
    cr_assert_eq(cfg.variants[2].head_dim, 128);
    cr_assert_eq(cfg.variants[4].dtype, FG_DTYPE_BF16);
    cr_assert_eq(cfg.variants[8].arch, 90);
    cr_assert_eq(cfg.variants[8].arch_accel, 1);
    for (int i = 0; i < cfg.count; i++) {
        fg_error err;
        cr_assert_eq(spec_validate(&cfg.variants[i], &err), FG_OK, "%s", err.msg);
        for (int j = 0; j < i; j++)
            cr_assert(!spec_equal(&cfg.variants[i], &cfg.variants[j]));
    }
    config_free(&cfg);
    cr_assert_null(cfg.variants);
}

/* The model variants are fields of their own (kind "serve", and "fwd" with varlen), named in the variants. */
Test(config, model_variant_fields) {
    fg_config cfg;
    load_ok("variants { kind = 'serve', arch = 'sm_90', dtype = 'bf16', head_dim = 128, causal = true,\n"
            "           window = {false, true}, sinks = true, softcap = {false, true}, alibi = true }\n"
            "variants { kind = 'fwd', arch = 'sm_90a', dtype = 'fp16', head_dim = 64, varlen = true, softcap = true }",
            NULL, &cfg);
    cr_assert_eq(cfg.count, 5);
    char name[FG_SPEC_NAME_MAX];
    cr_assert_gt(spec_named(&cfg, 3, name, sizeof name), 0);
    cr_assert(strstr(name, "alibi=1,") == name && strstr(name, "sinks=1,softcap=1,") && strstr(name, ",window=1"), "%s", name);
    cr_assert_gt(spec_named(&cfg, 4, name, sizeof name), 0);
    cr_assert(strstr(name, "softcap=1") && strstr(name, "varlen=1"), "%s", name);
    config_free(&cfg);
    load_fails("variants { kind = 'bwd', arch = 'sm_90', dtype = 'bf16', head_dim = 128, window = true }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: ", "of the backward with varlen=1");
    load_fails("variants { kind = 'fwd', arch = 'sm_90a', dtype = 'bf16', head_dim = 128, sinks = true }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: ", "sm_90a forward with varlen=1");
}

/* head_dim_v (V's and O's head dim) is a field of its own, a list like head_dim's; the head_dim's value itself names
 * no head_dim_v; validation says where it is taken (kind "serve", "fwd" with varlen on sm_90a, the mma.sync "bwd"). */
Test(config, head_dim_v_field) {
    fg_config cfg;
    load_ok("variants { kind = 'bwd', arch = 'sm_90', dtype = 'bf16', head_dim = 192, head_dim_v = {128, 192},\n"
            "           causal = true, varlen = true }",
            NULL, &cfg);
    cr_assert_eq(cfg.count, 2);
    char name[FG_SPEC_NAME_MAX];
    cr_assert_gt(spec_named(&cfg, 0, name, sizeof name), 0);
    cr_assert(strstr(name, "head_dim=192,head_dim_v=128,kind=bwd"), "%s", name);
    cr_assert_gt(spec_named(&cfg, 1, name, sizeof name), 0);
    cr_assert(!strstr(name, "head_dim_v") && cfg.variants[1].head_dim_v == 0, "%s", name);
    config_free(&cfg);
    load_fails("variants { kind = 'fwd', arch = 'sm_90', dtype = 'bf16', head_dim = 192, head_dim_v = 128 }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: ", "head_dim_v 128 is not supported");
    load_fails("variants { kind = 'bwd', arch = 'sm_90', dtype = 'bf16', head_dim = 192, head_dim_v = 'wide' }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: ", "field 'head_dim_v' must be an integer or a list of integers");
    load_fails("variants { kind = 'merge', arch = 'sm_90', head_dim_v = 128 }", NULL, FG_ERR_CONFIG, "cfg.lua:1: ",
               "field 'head_dim_v' is not a field of kind \"merge\"");
}

Test(config, scalars_defaults_and_policy_tiles) {
    fg_config cfg;
    load_ok("variants { kind = 'fwd', arch = 'sm_80', dtype = 'bf16', head_dim = 128 }", NULL, &cfg);
    cr_assert_eq(cfg.count, 1);
    fg_spec s = cfg.variants[0];
    cr_assert_eq(s.causal, 0);
    fg_tile_policy def;
    fg_error err;
    cr_assert_eq(tile_policy_init_default(&def, &err), FG_OK);
    const fg_tile_rule *r = tile_policy_lookup(&def, &s);
    cr_assert_not_null(r);
    cr_assert_eq(s.block_m, r->block_m);
    cr_assert_eq(s.block_n, r->block_n);
    cr_assert_eq(s.warps, r->warps);
    cr_assert_eq(s.stages, r->stages);
    cr_assert_eq(cfg.policy.count, def.count);
    tile_policy_free(&def);
    config_free(&cfg);
}

Test(config, causal_accepts_0_and_1) {
    fg_config cfg;
    load_ok("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64, causal = {0, 1} }", NULL,
            &cfg);
    cr_assert_eq(cfg.count, 2);
    cr_assert_eq(cfg.variants[0].causal, 0);
    cr_assert_eq(cfg.variants[1].causal, 1);
    config_free(&cfg);
}

Test(config, explicit_tiles_kept) {
    fg_config cfg;
    load_ok("variants { kind = 'fwd', arch = 'sm_90', dtype = 'fp16', head_dim = 64,\n"
            "           block_m = 64, block_n = {32, 64}, warps = 4, stages = 3 }",
            NULL, &cfg);
    cr_assert_eq(cfg.count, 2);
    cr_assert_eq(cfg.variants[0].block_m, 64);
    cr_assert_eq(cfg.variants[0].block_n, 32);
    cr_assert_eq(cfg.variants[1].block_n, 64);
    cr_assert_eq(cfg.variants[1].warps, 4);
    cr_assert_eq(cfg.variants[1].stages, 3);
    config_free(&cfg);
    /* sm_90a (the wgmma family) keeps explicit warpgroup tiles too */
    load_ok("variants { kind = 'fwd', arch = 'sm_90a', dtype = 'bf16', head_dim = 128,\n"
            "           block_m = 128, block_n = {96, 128}, warps = 12, stages = {2, 3} }\n",
            NULL, &cfg);
    cr_assert_eq(cfg.count, 4);
    cr_assert_eq(cfg.variants[0].block_n, 96);
    cr_assert_eq(cfg.variants[3].block_n, 128);
    cr_assert_eq(cfg.variants[3].stages, 3);
    for (int i = 0; i < cfg.count; i++)
        cr_assert(cfg.variants[i].block_m == 128 && cfg.variants[i].warps == 12, "variant %d", i);
    config_free(&cfg);
    /* ... and refuses the combinations whose warps do not match block_m */
    load_fails("variants { kind = 'fwd', arch = 'sm_90a', dtype = 'bf16', head_dim = 128,\n"
               "           block_m = 64, block_n = 96, warps = {8, 12}, stages = 3 }\n",
               NULL, FG_ERR_CONFIG, "cfg.lua:1: variant arch=sm_90a,", "warps 12 with block_m 64");
}

Test(config, tile_policy_override_applies) {
    /* The override comes after the variants it affects: tiles are filled once the chunk has run. */
    fg_config cfg;
    load_ok("variants { kind = 'fwd', arch = {'sm_80', 'sm_90a'}, dtype = 'fp16', head_dim = {64, 128} }\n"
            "tile_policy { arch = {'sm_80', 'sm_89'}, head_dim = {33, 64}, causal = false, dtype = 'fp16',\n"
            "              block_m = 64, block_n = 64, warps = 4, stages = 3 }",
            NULL, &cfg);
    cr_assert_eq(cfg.count, 4);
    fg_tile_policy def;
    fg_error err;
    cr_assert_eq(tile_policy_init_default(&def, &err), FG_OK);
    cr_assert_eq(cfg.policy.count, def.count + 1);
    const fg_tile_rule *last = &cfg.policy.rules[cfg.policy.count - 1];
    cr_assert_eq(last->arch_min, 80);
    cr_assert_eq(last->arch_max, 89);
    cr_assert_eq(last->head_dim_min, 33);
    cr_assert_eq(last->head_dim_max, 64);
    cr_assert_eq(last->causal, 0);
    cr_assert_eq(last->dtype, FG_DTYPE_F16);
    for (int i = 0; i < cfg.count; i++) {
        const fg_spec *s = &cfg.variants[i];
        if (s->arch == 80 && s->head_dim == 64) {
            cr_assert_eq(s->block_m, 64);
            cr_assert_eq(s->block_n, 64);
            cr_assert_eq(s->warps, 4);
            cr_assert_eq(s->stages, 3);
        } else {
            const fg_tile_rule *r = tile_policy_lookup(&def, s);
            cr_assert_not_null(r);
            cr_assert_eq(s->block_m, r->block_m, "variant %d keeps the default", i);
            cr_assert_eq(s->stages, r->stages);
        }
    }
    tile_policy_free(&def);
    config_free(&cfg);
}

Test(config, tile_policy_any_match_fields) {
    fg_config cfg;
    load_ok("tile_policy { block_m = 64, block_n = 32, warps = 4, stages = 2 }\n"
            "variants { kind = 'fwd', arch = {'sm_80', 'sm_90'}, dtype = {'fp16', 'bf16'}, head_dim = {64, 256},\n"
            "           causal = {true, false} }",
            NULL, &cfg);
    cr_assert_eq(cfg.count, 16);
    const fg_tile_rule *last = &cfg.policy.rules[cfg.policy.count - 1];
    cr_assert_eq(last->causal, -1);
    cr_assert_eq(last->dtype, -1);
    cr_assert_eq(last->family, FG_FAMILY_MMA, "a rule that does not name sm_90a is for the mma.sync family");
    for (int i = 0; i < cfg.count; i++) {
        cr_assert_eq(cfg.variants[i].block_n, 32);
        cr_assert_eq(cfg.variants[i].warps, 4);
    }
    config_free(&cfg);
}

/* A tile_policy rule naming sm_90a applies to the sm_90a (wgmma) family only; one naming sm_90, or no arch,
 * to the mma.sync family only, sm_90 included. */
Test(config, tile_policy_arch_sm_90a_and_sm_90_pick_their_family) {
    const char *variants = "variants { kind = 'fwd', arch = {'sm_90', 'sm_90a'}, dtype = 'fp16', head_dim = {64, 128} }\n";
    fg_tile_policy def;
    fg_error err;
    cr_assert_eq(tile_policy_init_default(&def, &err), FG_OK);
    char text[1024];
    fg_config cfg;

    snprintf(text, sizeof text, "%stile_policy { arch = 'sm_90a', head_dim = {65, 128}, block_m = 64, block_n = 64,\n"
             "              warps = 8, stages = 3 }", variants);
    load_ok(text, NULL, &cfg);
    cr_assert_eq(cfg.count, 4);
    const fg_tile_rule *last = &cfg.policy.rules[cfg.policy.count - 1];
    cr_assert(last->arch_min == 90 && last->arch_max == 90);
    cr_assert_eq(last->family, FG_FAMILY_WGMMA);
    for (int i = 0; i < cfg.count; i++) {
        const fg_spec *s = &cfg.variants[i];
        const fg_tile_rule *r = tile_policy_lookup(&def, s);
        cr_assert_not_null(r);
        if (s->arch_accel && s->head_dim == 128)
            cr_assert(s->block_m == 64 && s->block_n == 64 && s->warps == 8 && s->stages == 3, "variant %d", i);
        else
            cr_assert(s->block_m == r->block_m && s->block_n == r->block_n && s->warps == r->warps &&
                      s->stages == r->stages, "variant %d keeps its default", i);
    }
    config_free(&cfg);

    snprintf(text, sizeof text, "%stile_policy { arch = 'sm_90', head_dim = {65, 128}, block_m = 64, block_n = 64,\n"
             "              warps = 4, stages = 3 }", variants);
    load_ok(text, NULL, &cfg);
    cr_assert_eq(cfg.count, 4);
    last = &cfg.policy.rules[cfg.policy.count - 1];
    cr_assert(last->arch_min == 90 && last->arch_max == 90);
    cr_assert_eq(last->family, FG_FAMILY_MMA);
    for (int i = 0; i < cfg.count; i++) {
        const fg_spec *s = &cfg.variants[i];
        const fg_tile_rule *r = tile_policy_lookup(&def, s);
        cr_assert_not_null(r);
        if (!s->arch_accel && s->head_dim == 128)
            cr_assert(s->block_m == 64 && s->block_n == 64 && s->warps == 4 && s->stages == 3, "variant %d", i);
        else
            cr_assert(s->block_m == r->block_m && s->block_n == r->block_n && s->warps == r->warps &&
                      s->stages == r->stages, "variant %d keeps its default", i);
        if (s->arch_accel)
            cr_assert_eq(r->family, FG_FAMILY_WGMMA, "variant %d", i);
    }
    config_free(&cfg);

    /* A rule without arch is an mma.sync rule: sm_90a variants keep the wgmma defaults. */
    snprintf(text, sizeof text, "%stile_policy { block_m = 64, block_n = 32, warps = 4, stages = 2 }", variants);
    load_ok(text, NULL, &cfg);
    for (int i = 0; i < cfg.count; i++) {
        const fg_spec *s = &cfg.variants[i];
        if (s->arch_accel)
            cr_assert(s->warps == 4 * (s->block_m / 64 + 1) && s->block_n != 32, "variant %d", i);
        else
            cr_assert(s->block_m == 64 && s->block_n == 32 && s->warps == 4 && s->stages == 2, "variant %d", i);
    }
    config_free(&cfg);

    /* An mma.sync tile given to sm_90a is caught when the variant is validated. */
    snprintf(text, sizeof text, "%stile_policy { arch = 'sm_90a', block_m = 128, block_n = 64, warps = 8, stages = 2 }",
             variants);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:1: variant arch=sm_90a,", "it must be 12");
    tile_policy_free(&def);
}

Test(config, duplicates_dropped_keeping_first_order) {
    /* The third call repeats the first variant with explicit tiles equal to what the policy gives it. */
    fg_tile_policy def;
    fg_error err;
    cr_assert_eq(tile_policy_init_default(&def, &err), FG_OK);
    fg_spec probe = {.kind = FG_KIND_FWD, .arch = 80, .dtype = FG_DTYPE_F16, .head_dim = 128};
    const fg_tile_rule *r = tile_policy_lookup(&def, &probe);
    cr_assert_not_null(r);
    char text[1024];
    snprintf(text, sizeof text,
             "variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = {128, 64} }\n"
             "variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = {64, 96}, causal = 0 }\n"
             "variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 128,\n"
             "           block_m = %d, block_n = %d, warps = %d, stages = %d }",
             r->block_m, r->block_n, r->warps, r->stages);
    tile_policy_free(&def);
    fg_config cfg;
    load_ok(text, NULL, &cfg);
    cr_assert_eq(cfg.count, 3);
    cr_assert_eq(cfg.variants[0].head_dim, 128);
    cr_assert_eq(cfg.variants[1].head_dim, 64);
    cr_assert_eq(cfg.variants[2].head_dim, 96);
    config_free(&cfg);
}

Test(config, lua_logic_builds_variants) {
    fg_config cfg;
    load_ok("for _, d in ipairs({32, 64, 128}) do\n"
            "  for _, c in ipairs({false, true}) do\n"
            "    variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = d, causal = c }\n"
            "  end\n"
            "end",
            NULL, &cfg);
    cr_assert_eq(cfg.count, 6);
    config_free(&cfg);
}

Test(config, arch_override_replaces_every_arch_list) {
    fg_config cfg;
    load_ok("variants { kind = 'fwd', arch = {'sm_80', 'sm_90a'}, dtype = 'fp16', head_dim = 64 }\n"
            "variants { kind = 'fwd', arch = 'sm_80', dtype = 'bf16', head_dim = 128 }",
            " sm_86 , sm_90a", &cfg);
    cr_assert_eq(cfg.count, 4);
    int n86 = 0, n90a = 0;
    for (int i = 0; i < cfg.count; i++) {
        n86 += cfg.variants[i].arch == 86 && !cfg.variants[i].arch_accel;
        n90a += cfg.variants[i].arch == 90 && cfg.variants[i].arch_accel;
    }
    cr_assert_eq(n86, 2);
    cr_assert_eq(n90a, 2);
    config_free(&cfg);
    /* with an override the config may leave arch out */
    load_ok("variants { kind = 'fwd', dtype = 'fp16', head_dim = 64 }", "sm_89", &cfg);
    cr_assert_eq(cfg.count, 1);
    cr_assert_eq(cfg.variants[0].arch, 89);
    config_free(&cfg);
    load_fails("variants { kind = 'fwd', dtype = 'fp16', head_dim = 64 }", "sm_80,,sm_90", FG_ERR_INVALID_ARGUMENT,
               "arch override", "empty entry");
    load_fails("variants { kind = 'fwd', dtype = 'fp16', head_dim = 64 }", "sm80", FG_ERR_INVALID_ARGUMENT,
               "arch override", "sm80");
}

Test(config, zero_variants_refused) {
    load_fails("-- nothing here\nlocal x = 1\n", NULL, FG_ERR_CONFIG, "cfg.lua:", "lists no variants");
    load_fails("tile_policy { block_m = 64, block_n = 64, warps = 4, stages = 2 }", NULL, FG_ERR_CONFIG, "cfg.lua:",
               "lists no variants");
}

Test(config, fp8_variants_and_their_output_dtype) {
    fg_config cfg;
    char name[FG_SPEC_NAME_MAX];
    /* out absent: fp8 writes bf16, a 16-bit variant its own dtype */
    load_ok("variants { kind = 'fwd', arch = 'sm_90', dtype = {'e4m3', 'fp16'}, head_dim = 128 }", NULL, &cfg);
    cr_assert_eq(cfg.count, 2);
    cr_assert_eq(cfg.variants[0].dtype, FG_DTYPE_E4M3);
    cr_assert_eq(cfg.variants[0].out_dtype, FG_DTYPE_BF16);
    cr_assert_gt(spec_named(&cfg, 0, name, sizeof name), 0);
    cr_assert(strstr(name, ",dtype=e4m3,") && strstr(name, ",out=bf16,"), "%s", name);
    cr_assert_eq(cfg.variants[1].out_dtype, FG_DTYPE_F16);
    config_free(&cfg);
    /* out is part of the product for fp8; 16-bit variants ignore it, so theirs collapse to one */
    load_ok("variants { kind = 'fwd', arch = 'sm_89', dtype = {'e5m2', 'bf16'}, head_dim = 64,\n"
            "           out = {'fp16', 'bf16'} }", NULL, &cfg);
    cr_assert_eq(cfg.count, 3);
    cr_assert(cfg.variants[0].dtype == FG_DTYPE_E5M2 && cfg.variants[0].out_dtype == FG_DTYPE_F16);
    cr_assert(cfg.variants[1].dtype == FG_DTYPE_E5M2 && cfg.variants[1].out_dtype == FG_DTYPE_BF16);
    cr_assert(cfg.variants[2].dtype == FG_DTYPE_BF16 && cfg.variants[2].out_dtype == FG_DTYPE_BF16);
    cr_assert(cfg.variants[0].block_n % 32 == 0 && cfg.variants[1].block_n % 32 == 0, "fp8 tiles step 32 keys");
    config_free(&cfg);
    /* a tile_policy rule may target an fp8 dtype */
    load_ok("tile_policy { dtype = 'e4m3', block_m = 64, block_n = 64, warps = 4, stages = 2 }\n"
            "variants { kind = 'fwd', arch = 'sm_90', dtype = {'e4m3', 'e5m2'}, head_dim = 64 }", NULL, &cfg);
    cr_assert_eq(cfg.count, 2);
    cr_assert(cfg.variants[0].block_m == 64 && cfg.variants[0].block_n == 64, "the rule applies to e4m3");
    cr_assert(cfg.variants[1].block_m == 128 && cfg.variants[1].block_n == 64 && cfg.variants[1].warps == 4,
              "e5m2 keeps the sm_90 fp8 d64 default");
    config_free(&cfg);
    load_fails("variants { kind = 'fwd', arch = 'sm_90', dtype = 'e4m3', head_dim = 64, out = 'e5m2' }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variant arch=sm_90,", "out_dtype e5m2");
    load_fails("variants { kind = 'fwd', arch = 'sm_90', dtype = 'e4m3', head_dim = 64, out = 'fp32' }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variants: ", "field 'out': dtype 'fp32'");
    load_fails("variants { kind = 'fwd', arch = 'sm_90', dtype = 'e4m3', head_dim = 64, out = 16 }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variants: ", "field 'out' must be a string or a list of strings");
    load_fails("variants { kind = 'fwd', arch = 'sm_90', dtype = 'e4m3', head_dim = 48 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variant arch=sm_90,", "multiple of 32");
    /* sm_90a's FP8 takes head dims that are multiples of 64: the sentence points at sm_90 for the others */
    load_fails("variants { kind = 'fwd', arch = 'sm_90a', dtype = 'e5m2', head_dim = 96 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variant arch=sm_90a,", "arch sm_90 (the mma.sync family) takes the others");
    load_fails("variants { kind = 'fwd', arch = 'sm_86', dtype = 'e5m2', head_dim = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variant arch=sm_86,", "needs sm_89 or newer");
}

Test(config, invalid_variant_names_variant_and_rule) {
    load_fails("local a = 1\nvariants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = {64, 7} }", NULL,
               FG_ERR_CONFIG, "cfg.lua:2: variant arch=sm_80,", "head_dim 7 is not supported");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 7,\n"
               "           block_m = 64, block_n = 64, warps = 4, stages = 2 }",
               NULL, FG_ERR_CONFIG, "cfg.lua:1: variant ", "head_dim 7 is not supported");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64, warps = 3 }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variant arch=sm_80,", "warps 3 is not supported");
    load_fails("variants { kind = 'fwd', arch = 'sm_70', dtype = 'fp16', head_dim = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variant arch=sm_70,", "sm_70");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'e4m3', head_dim = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variant ", "dtype e4m3");
}

Test(config, field_type_errors_name_field_and_type) {
    load_fails("local a = 1\n\nvariants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = '128' }", NULL,
               FG_ERR_CONFIG, "cfg.lua:3: variants: ",
               "field 'head_dim' must be an integer or a list of integers, got string");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = {64, 'x'} }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'head_dim' must be an integer or a list of integers, got string (list item 2)");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64.5 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'head_dim' must be an integer or a list of integers, got 64.5");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = -64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'head_dim' must be a positive integer, got -64");
    load_fails("variants { kind = 'fwd', arch = 80, dtype = 'fp16', head_dim = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'arch' must be a string or a list of strings, got 80");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64, causal = 'yes' }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variants: ", "field 'causal' must be a boolean (or 0/1) or a list of booleans, got string");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64, causal = 2 }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variants: ", "field 'causal' must be a boolean");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64, warps = true }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variants: ", "field 'warps' must be an integer or a list of integers, got boolean");
    load_fails("variants { kind = 'back', arch = 'sm_80', dtype = 'fp16', head_dim = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'kind' must name a kernel family (\"fwd\", \"bwd\", \"serve\", \"merge\")");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64, deterministic = true }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variants: ", "field 'deterministic' is for kind = \"bwd\" only");
    {
        fg_config cfg;
        load_ok("variants { kind = 'bwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64, deterministic = {false, true} }",
                NULL, &cfg);
        cr_assert_eq(cfg.count, 2);
        cr_assert(cfg.variants[0].kind == FG_KIND_BWD && cfg.variants[1].kind == FG_KIND_BWD);
        cr_assert(cfg.variants[0].deterministic != cfg.variants[1].deterministic);
        config_free(&cfg);
    }
    load_fails("variants { kind = 'fwd', arch = 'sm_90', dtype = 'fp16', head_dim = 64, tma = true }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variants: ", "field 'tma' is for kind = \"bwd\" only");
    load_fails("variants { kind = 'bwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64, tma = true }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: ", "sm_90 or newer");
    {
        fg_config cfg;
        load_ok("variants { kind = 'bwd', arch = 'sm_90', dtype = 'bf16', head_dim = 128, tma = {false, true} }",
                NULL, &cfg);
        cr_assert_eq(cfg.count, 2);
        cr_assert(cfg.variants[0].tma == 0 && cfg.variants[1].tma == 1);
        config_free(&cfg);
    }
    load_fails("variants { kind = 'fwd', arch = 'sm80', dtype = 'fp16', head_dim = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'arch': arch 'sm80'");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp32', head_dim = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'dtype': dtype 'fp32'");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = {} }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'head_dim' is an empty list");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = {64, x = 1} }", NULL,
               FG_ERR_CONFIG, "cfg.lua:1: variants: ", "not a list");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = {{64}} }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "nested table");
}

Test(config, unknown_and_missing_fields) {
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dims = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "unknown field 'head_dims'");
    load_fails("variants { 'sm_80' }", NULL, FG_ERR_CONFIG, "cfg.lua:1: variants: ", "field names must be strings");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16' }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'head_dim' is required");
    load_fails("variants { arch = 'sm_80', dtype = 'fp16', head_dim = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'kind' is required");
    load_fails("variants { kind = 'fwd', dtype = 'fp16', head_dim = 64 }", NULL, FG_ERR_CONFIG,
               "cfg.lua:1: variants: ", "field 'arch' is required");
    load_fails("variants('fwd')", NULL, FG_ERR_CONFIG, "cfg.lua:1: variants: ", "expects one table");
    load_fails("local a\nvariants()", NULL, FG_ERR_CONFIG, "cfg.lua:2: variants: ", "got no value");
}

Test(config, tile_policy_errors) {
    const char *v = "variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64 }\n";
    char text[512];
    snprintf(text, sizeof text, "%stile_policy { arch = 'sm_80', block_m = 64, block_n = 64, stages = 2 }", v);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:2: tile_policy: ", "field 'warps' is required");
    snprintf(text, sizeof text, "%stile_policy { head_dim = {128, 64}, block_m = 64, block_n = 64, warps = 4, stages = 2 }", v);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:2: tile_policy: ", "reversed");
    snprintf(text, sizeof text, "%stile_policy { head_dim = {64, 96, 128}, block_m = 64, block_n = 64, warps = 4, stages = 2 }", v);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:2: tile_policy: ",
               "field 'head_dim' must be an integer or a {lo, hi} pair of integers");
    snprintf(text, sizeof text, "%stile_policy { arch = {'sm_90', 'sm_80'}, block_m = 64, block_n = 64, warps = 4, stages = 2 }", v);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:2: tile_policy: ", "reversed");
    snprintf(text, sizeof text, "%stile_policy { dtype = {'fp16'}, block_m = 64, block_n = 64, warps = 4, stages = 2 }", v);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:2: tile_policy: ", "field 'dtype' must be a string, got table");
    snprintf(text, sizeof text, "%stile_policy { causal = 'no', block_m = 64, block_n = 64, warps = 4, stages = 2 }", v);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:2: tile_policy: ", "field 'causal' must be a boolean (or 0/1), got string");
    snprintf(text, sizeof text, "%stile_policy { block_m = {64}, block_n = 64, warps = 4, stages = 2 }", v);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:2: tile_policy: ", "field 'block_m' must be an integer, got table");
    snprintf(text, sizeof text, "%stile_policy { block = 64, block_n = 64, warps = 4, stages = 2 }", v);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:2: tile_policy: ", "unknown field 'block'");
    /* an override that gives an invalid tile is caught when the variant is validated */
    snprintf(text, sizeof text, "%stile_policy { block_m = 64, block_n = 64, warps = 4, stages = 9 }", v);
    load_fails(text, NULL, FG_ERR_CONFIG, "cfg.lua:1: variant arch=sm_80,", "stages 9 is not supported");
}

Test(config, too_many_variants_refused) {
    load_fails("local d = {} for i = 1, 128 do d[i] = 8 * ((i - 1) % 32 + 1) end\n"
               "variants { kind = 'fwd', arch = {'sm_80', 'sm_86', 'sm_89', 'sm_90'}, dtype = {'fp16', 'bf16'},\n"
               "           head_dim = d, causal = {false, true}, block_n = {16, 32, 64, 128, 256}, stages = {2, 3, 4},\n"
               "           warps = {1, 2, 4, 8} }",
               NULL, FG_ERR_CONFIG, "cfg.lua:2: variants: ", "at most");
}

Test(config, sandbox_errors_pass_through) {
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64 }\nwhile true do end", NULL,
               FG_ERR_CONFIG, "cfg.lua:2:", "instruction budget exceeded");
    load_fails("variants { kind = 'fwd', arch = 'sm_80', dtype = 'fp16', head_dim = 64 }\nos.exit(1)", NULL,
               FG_ERR_CONFIG, "cfg.lua:2:", "global 'os'");
    load_fails("variants { kind = 'fwd',\n", NULL, FG_ERR_CONFIG, "cfg.lua:", "expected");
}

Test(config, host_functions_ignore_metatables) {
    /* Reads are raw: an __index on the argument table must not supply fields. */
    load_fails("local t = setmetatable({kind = 'fwd', arch = 'sm_80', dtype = 'fp16'}, {__index = function() return 64 end})\n"
               "variants(t)",
               NULL, FG_ERR_CONFIG, "cfg.lua:2: variants: ", "field 'head_dim' is required");
}

/* config_skip_fn for the default bundle under another arch: only the wide serving variants (Hopper's shared
 * memory) may be dropped, for shared memory. */
static void count_wide_skips(void *user, const char *name, const char *why) {
    cr_assert(strstr(name, "kind=serve") && strstr(name, "head_dim=5") && strstr(why, "shared memory"), "%s: %s", name, why);
    ++*(int *)user;
}

Test(config, default_config_loads_and_validates) {
    fg_config cfg;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(config_load_file("configs/default.lua", NULL, &cfg, &err), FG_OK, "%s", err.msg);
    cr_assert_geq(cfg.count, 20);
    /* 60 16-bit forward variants (sm_80, sm_90 and sm_90a), 32 FP8 ones (sm_89, sm_90a and sm_90), 12
     * backward ones (sm_80, sm_90 and sm_90 with TMA loads, head_dim 64) and their 12 varlen ones, 6 varlen ones at
     * 192/128 (head_dim_v), 72 serving ones, 12 of the sm_90a forward's varlen ones, 2 merges, 20 with model
     * variants, and 12 serving ones of FP8 KV caches */
    cr_assert_leq(cfg.count, 250, "the default bundle should stay small enough for CI: %d variants", cfg.count);
    int archs[6] = {0, 0, 0, 0, 0, 0}, bwd80 = 0, bwd90 = 0, bwd90_tma = 0, serve80 = 0, serve90 = 0, merges = 0,
        varlen = 0, mods = 0, wide = 0, kv8 = 0;
    for (int i = 0; i < cfg.count; i++) {
        const fg_spec *s = &cfg.variants[i];
        char name[FG_SPEC_NAME_MAX];
        cr_assert_gt(spec_named(&cfg, i, name, sizeof name), 0);
        cr_assert_eq(spec_validate(s, &err), FG_OK, "%s: %s", name, err.msg);
        if (spec_has_mods(s)) { /* the model variants: serving kernel and sm_90a prefill, 16-bit */
            cr_assert(!dtype_is_fp8(s->dtype) && (s->kind == FG_KIND_SERVE || (s->varlen && spec_is_wgmma(s)) ||
                                                   (s->kind == FG_KIND_BWD && s->varlen && !spec_is_wgmma_bwd(s))),
                      "%s", name);
            mods++;
            continue;
        }
        if (s->kv_fp8) { /* FP8 KV caches: the serving kernel's decode tiles, 16-bit queries */
            cr_assert(s->kind == FG_KIND_SERVE && s->block_m == 16 && !dtype_is_fp8(s->dtype) && !s->arch_accel, "%s", name);
            kv8++;
            continue;
        }
        if (s->kind == FG_KIND_SERVE && (s->head_dim > 256 || spec_serve_wide(s))) { /* MLA, head_dim 512: Hopper's */
            cr_assert(s->arch == 90 && !s->arch_accel && spec_head_dim_v(s) == 512, "%s", name);
            wide++;
            continue;
        }
        if (s->kind == FG_KIND_BWD) { /* the backward: mma.sync only */
            cr_assert(!s->arch_accel && !dtype_is_fp8(s->dtype), "%s", name);
            bwd80 += s->arch == 80;
            bwd90 += s->arch == 90 && !s->tma;
            bwd90_tma += s->arch == 90 && s->tma;
            continue;
        }
        if (s->kind == FG_KIND_SERVE || s->kind == FG_KIND_MERGE) { /* serving: mma.sync, sm_80 and sm_90 alike */
            cr_assert(!s->arch_accel && !dtype_is_fp8(s->dtype), "%s", name);
            serve80 += s->kind == FG_KIND_SERVE && s->arch == 80;
            serve90 += s->kind == FG_KIND_SERVE && s->arch == 90;
            merges += s->kind == FG_KIND_MERGE;
            continue;
        }
        if (s->varlen && s->kind == FG_KIND_FWD) { /* the sm_90a forward's variable-length variants */
            cr_assert(spec_is_wgmma(s) && !dtype_is_fp8(s->dtype), "%s", name);
            varlen++;
            continue;
        }
        archs[0] += s->arch == 80;
        archs[1] += s->arch == 90 && s->arch_accel && !dtype_is_fp8(s->dtype); /* the wgmma family */
        archs[2] += s->arch == 90 && !s->arch_accel && !dtype_is_fp8(s->dtype); /* mma.sync on Hopper */
        archs[3] += s->arch == 90 && !s->arch_accel && dtype_is_fp8(s->dtype);  /* FP8 on Hopper */
        archs[4] += s->arch == 89 && dtype_is_fp8(s->dtype);              /* FP8 on Ada */
        archs[5] += s->arch == 90 && s->arch_accel && dtype_is_fp8(s->dtype);   /* FP8, wgmma family */
        if (s->arch_accel)
            cr_assert(spec_is_wgmma(s), "%s", name);
        for (int j = 0; j < i; j++)
            cr_assert(!spec_equal(&cfg.variants[i], &cfg.variants[j]), "%s listed twice", name);
    }
    cr_assert_eq(archs[0] + archs[1] + archs[2] + archs[3] + archs[4] + archs[5] + bwd80 + bwd90 + bwd90_tma + serve80 +
                     serve90 + merges + varlen + mods + wide + kv8,
                 cfg.count);
    cr_assert_eq(kv8, 12, "the FP8 KV cache variants: %d", kv8);
    cr_assert_eq(wide, 10, "the MLA and head_dim 512 serving variants: %d", wide);
    cr_assert_eq(mods, 20, "variants with model variants: %d", mods);
    cr_assert_eq(varlen, 12, "the sm_90a forward's varlen variants: %d", varlen);
    cr_assert(serve80 > 0 && serve80 == serve90 && merges == 2, "serving variants: %d on sm_80, %d on sm_90, %d merges",
              serve80, serve90, merges);
    cr_assert(bwd80 > 0 && bwd80 == bwd90 && bwd90 == bwd90_tma,
              "backward variants: %d on sm_80, %d on sm_90, %d on sm_90 with TMA loads", bwd80, bwd90, bwd90_tma);
    for (int a = 0; a < 6; a++)
        cr_assert_gt(archs[a], 0, "class %d of the default bundle is empty", a);
    cr_assert_eq(archs[1], archs[2], "sm_90a and sm_90 list the same 16-bit variants");
    cr_assert_eq(archs[0], archs[2], "sm_80 and sm_90 list the same 16-bit variants");
    cr_assert_eq(archs[5], archs[4], "sm_90a and sm_89 list the same FP8 variants");
    config_free(&cfg);
    /* the same bundle for one other arch (its 99 KiB a block drop the MLA and head_dim 512 variants) */
    int dropped = 0;
    cr_assert_eq(config_load_file_skipping("configs/default.lua", "sm_89", count_wide_skips, &dropped, &cfg, &err), FG_OK,
                 "%s", err.msg);
    cr_assert_eq(dropped, 10, "sm_89 drops %d variants", dropped);
    for (int i = 0; i < cfg.count; i++) /* the TMA-load backward variants retargeted: the cp.async ones */
        cr_assert(spec_validate(&cfg.variants[i], &err) == FG_OK && !cfg.variants[i].tma, "%s", err.msg);
    config_free(&cfg);
    /* and for sm_90a (the README's --arch sm_89,sm_90a example): the wgmma family takes no tma key; the backward
     * variants with V of its own head dim, the mma.sync family's, go to sm_90 and keep their TMA loads */
    dropped = 0;
    cr_assert_eq(config_load_file_skipping("configs/default.lua", "sm_89,sm_90a", count_wide_skips, &dropped, &cfg, &err),
                 FG_OK, "%s", err.msg);
    cr_assert_eq(dropped, 10, "sm_89,sm_90a drops %d variants", dropped);
    for (int i = 0; i < cfg.count; i++) {
        const fg_spec *s = &cfg.variants[i];
        cr_assert(spec_validate(s, &err) == FG_OK, "%s", err.msg);
        cr_assert(!s->tma || (s->kind == FG_KIND_BWD && s->head_dim_v && s->arch == 90 && !s->arch_accel));
    }
    config_free(&cfg);
}

Test(config, missing_file_is_io_error) {
    fg_config cfg;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(config_load_file("configs/does_not_exist.lua", NULL, &cfg, &err), FG_ERR_IO);
    cr_assert(strstr(err.msg, "configs/does_not_exist.lua") != NULL, "%s", err.msg);
    cr_assert_eq(cfg.count, 0);
    config_free(&cfg); /* freeing an empty config is harmless */
}

/* Issue 37 item 6: a FIFO named as a config is refused at once instead of blocking the reader. */
Test(config, fifo_config_is_refused_without_blocking) {
    char dir[64], fifo[96];
    test_scratch_make(dir, sizeof dir, "fg-test-config-fifo");
    snprintf(fifo, sizeof fifo, "%s/cfg.lua", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    fg_config cfg;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(config_load_file(fifo, NULL, &cfg, &err), FG_ERR_IO);
    cr_assert(strstr(err.msg, "not a regular file"), "%s", err.msg);
    test_scratch_remove(dir, "fg-test-config-fifo");
}

/* Issue 37 item 3: tile_policy{} rules are bounded (FG_TILE_POLICY_MAX_RULES with the built-in ones): a config
 * adding rules in a loop fails at the call past the bound, naming it, instead of holding millions of rules
 * outside the Lua memory bound and matching every variant against all of them. */
Test(config, tile_policy_rules_are_bounded) {
    load_fails("for i = 1, 5000 do\n"
               "  tile_policy { arch = \"sm_80\", head_dim = 64, block_m = 64, block_n = 64, warps = 4, stages = 2 }\n"
               "end\n"
               "variants { kind = \"fwd\", arch = \"sm_80\", dtype = \"fp16\", head_dim = 64 }\n",
               NULL, FG_ERR_CONFIG, "cfg.lua:2:", "4096 rules");
}
