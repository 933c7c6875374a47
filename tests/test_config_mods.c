/* test_config_mods.c: the mod files a bundle config names (variants{ mod = ... }: generator/config.c reads the
 * field, generator/config_finish.c checks the path, traces and registers the file); the rest of the loader is
 * test_config.c's. Each test writes its config and mod files in a scratch directory. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "generator/config.h"
#include "generator/mod.h"
#include "tests/test_util.h"

static char g_dir[64]; /* this test's scratch directory */

static void scratch_init(void) { test_scratch_make(g_dir, sizeof g_dir, "fg-cfgmod"); }
static void scratch_fini(void) { test_scratch_remove(g_dir, "fg-cfgmod"); }

TestSuite(config_mods, .init = scratch_init, .fini = scratch_fini, .timeout = 20);

/* A score mod (ALiBi from an aux array) and a mask mod (causal), the files the tests name. */
static const char alibi_text[] = "aux = { slope = fg.aux(\"f32\", 1) }\n"
                                 "score_mod = function(s, b, h, q, kv) return s - fg.load(slope, h) * fg.abs(q - kv) end\n";
static const char causal_text[] = "mask_mod = function(b, h, q, kv) return fg.le(kv, q) end\n";

/* Writes text to g_dir/name (its directory made when name has one level of them); path gets the full path. */
static void put(const char *name, const char *text, char *path, size_t n) {
    snprintf(path, n, "%s/%s", g_dir, name);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    mkdir(path, 0700); /* g_dir itself, or the one directory name has: EEXIST is fine */
    *slash = '/';
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fputs(text, f) >= 0 && fclose(f) == 0, 1);
}

/* The id the tracer gives the mod in file path. */
static void id_of(const char *path, char id[MOD_ID_LEN + 1]) {
    fg_mod m;
    fg_error err;
    cr_assert_eq(mod_trace_file(path, &m, &err), FG_OK, "%s", err.msg);
    mod_id(&m, id);
}

/* Loads config text written to g_dir/cfg.lua: its status, *cfg and err filled. */
static fg_status load(const char *text, fg_config *cfg, fg_error *err, char cfg_path[160]) {
    put("cfg.lua", text, cfg_path, 160);
    fg_error_clear(err);
    return config_load_file(cfg_path, NULL, cfg, err);
}

Test(config_mods, names_carry_the_traced_files_id) {
    char alibi[160], causal[160], cfg_path[160], a_id[MOD_ID_LEN + 1], c_id[MOD_ID_LEN + 1];
    put("mods/alibi.lua", alibi_text, alibi, sizeof alibi);
    put("causal.lua", causal_text, causal, sizeof causal);
    id_of(alibi, a_id);
    id_of(causal, c_id);
    fg_config cfg;
    fg_error err;
    fg_status st = load("variants { kind = 'serve', arch = 'sm_90', dtype = 'bf16', head_dim = 64,\n"
                        "           mod = {'mods/alibi.lua', 'causal.lua'} }\n"
                        "variants { kind = 'serve', arch = 'sm_90', dtype = 'bf16', head_dim = 64 }\n"
                        "variants { kind = 'serve', arch = 'sm_90', dtype = 'bf16', head_dim = 64,\n"
                        "           mod = 'mods/alibi.lua' }  -- a duplicate of the first\n",
                        &cfg, &err, cfg_path);
    cr_assert_eq(st, FG_OK, "%s", err.msg);
    cr_assert_eq(cfg.count, 3, "the two mods and the plain variant, the duplicate dropped");
    const char *want[3] = {a_id, c_id, ""};
    for (int i = 0; i < 3; i++) {
        cr_expect_str_eq(cfg.variants[i].mod, want[i], "variant %d", i);
        char name[FG_SPEC_NAME_MAX], part[32];
        cr_assert_gt(spec_format(&cfg.variants[i], name, sizeof name), 0);
        snprintf(part, sizeof part, "mod=%s,", want[i]);
        if (want[i][0]) cr_expect_not_null(strstr(name, part), "%s lacks %s", name, part);
        else cr_expect_null(strstr(name, "mod="), "%s", name);
    }
    cr_expect_not_null(mod_lookup(a_id), "the load registers the mods it traced, so their variants emit");
    cr_expect_not_null(mod_lookup(c_id));
    config_free(&cfg);
}

/* A mod the tracer refuses fails the load as the config's error: the config's line, then the mod's file:line. */
Test(config_mods, a_refused_mod_names_its_file_and_line) {
    char bad[160], cfg_path[160];
    put("bad.lua", "-- a mask with a branch\nmask_mod = function(b, h, q, kv)\n  if q then return true end\nend\n", bad,
        sizeof bad);
    fg_config cfg;
    fg_error err;
    fg_status st = load("-- line 1\n\nvariants { kind = 'serve', arch = 'sm_90', dtype = 'bf16', head_dim = 64,\n"
                        "           mod = 'bad.lua' }\n",
                        &cfg, &err, cfg_path);
    cr_assert_eq(st, FG_ERR_CONFIG, "status %d: %s", st, err.msg);
    char where[200];
    snprintf(where, sizeof where, "%s:3: variants: field 'mod': ", cfg_path);
    cr_expect_eq(strncmp(err.msg, where, strlen(where)), 0, "the config's line first: %s", err.msg);
    cr_expect_not_null(strstr(err.msg, "bad.lua:3: 'if' is refused"), "then the mod's file:line: %s", err.msg);
    cr_expect_eq(cfg.count, 0);
    cr_expect_null(cfg.variants);

    /* a missing file and a directory are the config's errors too, naming the path */
    st = load("variants { kind = 'serve', arch = 'sm_90', dtype = 'bf16', head_dim = 64, mod = 'absent.lua' }\n", &cfg,
              &err, cfg_path);
    cr_expect_eq(st, FG_ERR_CONFIG, "%s", err.msg);
    cr_expect_not_null(strstr(err.msg, "cfg.lua:1: variants: field 'mod': cannot open"), "%s", err.msg);
    cr_expect_not_null(strstr(err.msg, "absent.lua"), "%s", err.msg);
    char sub[160];
    snprintf(sub, sizeof sub, "%s/sub", g_dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    st = load("variants { kind = 'serve', arch = 'sm_90', dtype = 'bf16', head_dim = 64, mod = 'sub' }\n", &cfg, &err,
              cfg_path);
    cr_expect_eq(st, FG_ERR_CONFIG, "%s", err.msg);
    cr_expect_not_null(strstr(err.msg, "not a regular file"), "%s", err.msg);
}

/* A mod on another kind than serve is refused by validation's mod_kind rule, with the variant's name. */
Test(config_mods, a_mod_on_kind_fwd_is_refused_by_the_rule) {
    char alibi[160], cfg_path[160], id[MOD_ID_LEN + 1];
    put("alibi.lua", alibi_text, alibi, sizeof alibi);
    id_of(alibi, id);
    fg_config cfg;
    fg_error err;
    fg_status st = load("variants { kind = 'fwd', arch = 'sm_90', dtype = 'bf16', head_dim = 64, mod = 'alibi.lua' }\n",
                        &cfg, &err, cfg_path);
    cr_assert_eq(st, FG_ERR_CONFIG, "status %d: %s", st, err.msg);
    char rule[200];
    snprintf(rule, sizeof rule, "mod=%s (a custom score or mask mod) is a variant of the serving kernel", id);
    cr_expect_not_null(strstr(err.msg, rule), "%s", err.msg);
    cr_expect_not_null(strstr(err.msg, "cfg.lua:1: variant arch=sm_90"), "%s", err.msg);
}

/* The path rules, checked while the chunk runs (no file is read), and the field's type. */
Test(config_mods, paths_are_relative_and_stay_below_the_config) {
    char alibi[160];
    put("alibi.lua", alibi_text, alibi, sizeof alibi);
    struct {
        const char *mod, *what;
    } cases[] = {
        {"'/etc/passwd'", "is an absolute path"},
        {"'../alibi.lua'", "has a '..' component"},
        {"'x/../alibi.lua'", "has a '..' component"},
        {"''", "the path is empty"},
        {"'alibi.lua\\0x'", "NUL byte"},
        {"('x'):rep(600)", "at most 512"},
        {"64", "must be a mod file's path (a string) or a list of paths, got 64"},
        {"{'alibi.lua', true}", "(list item 2)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[300], cfg_path[160];
        snprintf(text, sizeof text, "variants { kind = 'serve', arch = 'sm_90', dtype = 'bf16', head_dim = 64,\n"
                 "  mod = %s }\n", cases[i].mod);
        fg_config cfg;
        fg_error err;
        fg_status st = load(text, &cfg, &err, cfg_path);
        cr_expect_eq(st, FG_ERR_CONFIG, "mod = %s: status %d (%s)", cases[i].mod, st, err.msg);
        cr_expect_not_null(strstr(err.msg, "cfg.lua:1: variants: field 'mod'"), "mod = %s: %s", cases[i].mod, err.msg);
        cr_expect_not_null(strstr(err.msg, cases[i].what), "mod = %s: %s", cases[i].mod, err.msg);
    }
    /* the merge kernel takes arch alone */
    fg_config cfg;
    fg_error err;
    char cfg_path[160];
    fg_status st = load("variants { kind = 'merge', arch = 'sm_90', mod = 'alibi.lua' }\n", &cfg, &err, cfg_path);
    cr_expect_eq(st, FG_ERR_CONFIG);
    cr_expect_not_null(strstr(err.msg, "field 'mod' is not a field of kind \"merge\""), "%s", err.msg);
}

/* A config from memory finds its mod files from its chunk name's directory, as a file's do from its path. */
Test(config_mods, a_string_config_resolves_from_its_chunk_name) {
    char alibi[160], chunk[160], id[MOD_ID_LEN + 1];
    put("alibi.lua", alibi_text, alibi, sizeof alibi);
    id_of(alibi, id);
    snprintf(chunk, sizeof chunk, "%s/inline.lua", g_dir);
    static const char text[] = "variants { kind = 'serve', arch = 'sm_80', dtype = 'fp16', head_dim = 64, mod = 'alibi.lua' }";
    fg_config cfg;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(config_load_string(chunk, text, strlen(text), NULL, &cfg, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(cfg.count, 1);
    cr_expect_str_eq(cfg.variants[0].mod, id);
    config_free(&cfg);
}
