/* test_cli_bundle.c: the `flashgen bundle` command (tools/cmd_bundle.c): bundles written, read back and verified,
 * nothing left behind by a config error or an interrupted write, spills refused unless allowed, C sources that
 * compile, --arch skipping what a target cannot build, and the variants of custom mods a config names; run as a
 * user runs it through cli_harness.c. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include "runtime/bundle.h"
#include "runtime/cache.h"
#include "runtime/cuda_api.h"
#include "generator/emit.h"
#include "generator/mod.h"
#include "generator/spec.h"
#include "runtime/tunedb.h"
#include "tests/test_util.h"
#include "tests/cli_harness.h"

TestSuite(cli, .init = scratch_init, .fini = scratch_fini, .timeout = 60);

/* ---------------------------------------------------------------- bundle */

Test(cli, bundle_writes_a_readable_bundle) {
    char cfg[160], out[160];
    snprintf(cfg, sizeof cfg, "%s/two.lua", g_dir);
    snprintf(out, sizeof out, "%s/two.fgb", g_dir);
    write_text(cfg, two_variants);
    run_result r = RUN("bundle", cfg, "-o", out, "-j", "2");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "[1/2] "), "progress lines on stderr:\n%s", r.err);
    cr_expect_not_null(strstr(r.err, "[2/2] "), "progress lines on stderr:\n%s", r.err);
    cr_expect_not_null(strstr(r.err, " regs, 0 spill)"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "wall"), "a final summary with the wall time:\n%s", r.err);

    fg_bundle b;
    fg_error err;
    cr_assert_eq(bundle_read(out, &b, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(b.count, 2u);
    /* bundle entries are sorted by name; two_names is in that order. */
    for (size_t i = 0; i < 2; i++) {
        cr_expect_str_eq(b.entries[i].name, two_names[i]);
        cr_expect_gt(b.entries[i].size, 1000u);
        cr_expect_eq(memcmp(b.entries[i].data, "\177ELF", 4), 0);
    }
    bundle_free(&b);
    run_free(&r);
}

Test(cli, bundle_with_a_config_error_writes_nothing) {
    char cfg[160], out[160];
    snprintf(cfg, sizeof cfg, "%s/broken.lua", g_dir);
    snprintf(out, sizeof out, "%s/broken.fgb", g_dir);
    write_text(cfg, "-- line 1\nvariants { kind = \"fwd\", arch = \"sm_80\",\n  dtype = = \"fp16\" }\n");
    run_result r = RUN("bundle", cfg, "-o", out, "-j", "2");
    EXPECT_STATUS(r, 1);
    char where[200];
    snprintf(where, sizeof where, "broken.lua:3");
    cr_expect_not_null(strstr(r.err, where), "the error names %s:\n%s", where, r.err);
    cr_expect_eq(strncmp(r.err, "flashgen bundle: ", 17), 0, "%s", r.err);
    cr_expect_eq(file_exists(out), 0, "a failed bundle must leave no output file");
    run_free(&r);
}

/* Interrupting a bundle while it compiles leaves neither the bundle nor a temporary file behind. */
Test(cli, interrupted_bundle_leaves_no_file) {
    char sub[160], cfg[200], out[200];
    snprintf(sub, sizeof sub, "%s/out", g_dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    snprintf(cfg, sizeof cfg, "%s/two.lua", g_dir);
    snprintf(out, sizeof out, "%s/two.fgb", sub);
    write_text(cfg, two_variants);
    pid_t pid = start_run(NULL, (const char *const[]){"bundle", cfg, "-o", out, "-j", "1", NULL});
    usleep(400 * 1000); /* one compile takes about a second: the signal lands mid-compile */
    cr_assert_eq(kill(pid, SIGINT), 0);
    run_result r = finish_run(pid);
    cr_expect_eq(r.status, 128 + SIGINT, "expected death by SIGINT, got status %d:\n%s", r.status, r.err);
    DIR *d = opendir(sub);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        cr_expect(strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0, "left behind: %s/%s", sub, e->d_name);
    closedir(d);
    run_free(&r);
}

/* A variant the validator refuses stops the bundle before any compile, naming the rule; no file. */
Test(cli, bundle_refuses_an_invalid_variant) {
    char cfg[160], out[160];
    snprintf(cfg, sizeof cfg, "%s/bad.lua", g_dir);
    snprintf(out, sizeof out, "%s/bad.fgb", g_dir);
    write_text(cfg, "variants { kind = \"fwd\", arch = \"sm_80\", dtype = \"fp16\", head_dim = 64,\n"
                    "           block_m = 64, block_n = 64, warps = 3, stages = 2 }\n");
    run_result r = RUN("bundle", cfg, "-o", out);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "warps"), "%s", r.err);
    cr_expect_eq(file_exists(out), 0);
    run_free(&r);
}

/* A variant that spills (the backward's d128 tile on sm_90, 44+ bytes with NVRTC 13.0) makes the bundle
 * refuse, naming it and --allow-spills, and write nothing; with --allow-spills it is bundled, with a
 * warning naming it. */
Test(cli, bundle_refuses_spills_unless_allowed, .timeout = 300) {
    char cfg[160], out[160];
    snprintf(cfg, sizeof cfg, "%s/spill.lua", g_dir);
    snprintf(out, sizeof out, "%s/spill.fgb", g_dir);
    write_text(cfg, "variants { kind = \"bwd\", arch = \"sm_90\", dtype = \"bf16\", head_dim = 128 }\n");
    run_result r = RUN("bundle", cfg, "-o", out);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "head_dim=128,kind=bwd"), "the spilling variant is named:\n%s", r.err);
    cr_expect_not_null(strstr(r.err, "--allow-spills"), "%s", r.err);
    cr_expect_eq(file_exists(out), 0, "a refused bundle must leave no output file");
    run_free(&r);

    r = RUN("bundle", cfg, "-o", out, "--allow-spills");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "warning: arch=sm_90,"), "a warning names the spilling variant:\n%s", r.err);
    fg_bundle b;
    fg_error err;
    cr_assert_eq(bundle_read(out, &b, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(b.count, 1u);
    bundle_free(&b);
    run_free(&r);
}

Test(cli, bundle_emit_c_compiles_and_holds_the_bundle) {
    char cfg[160], csrc[160], obj[160], main_c[160], exe[160], dumped[160], cmd[1024];
    snprintf(cfg, sizeof cfg, "%s/two.lua", g_dir);
    snprintf(csrc, sizeof csrc, "%s/kernels.c", g_dir);
    snprintf(obj, sizeof obj, "%s/kernels.o", g_dir);
    snprintf(main_c, sizeof main_c, "%s/dump.c", g_dir);
    snprintf(exe, sizeof exe, "%s/dump", g_dir);
    snprintf(dumped, sizeof dumped, "%s/dumped.fgb", g_dir);
    write_text(cfg, two_variants);
    run_result r = RUN("bundle", cfg, "-o", csrc, "-j", "2", "--emit-c", "--symbol", "my_kernels");
    EXPECT_STATUS(r, 0);
    run_free(&r);

    snprintf(cmd, sizeof cmd, "cc -c '%s' -o '%s'", csrc, obj);
    cr_assert_eq(system(cmd), 0, "the --emit-c output does not compile: %s", cmd);
    /* Link it to a program that writes the array out, and read that back as a bundle. */
    write_text(main_c, "#include <stdio.h>\n"
                       "extern const unsigned char my_kernels[];\n"
                       "extern const unsigned long my_kernels_size;\n"
                       "int main(int argc, char **argv) {\n"
                       "    FILE *f = fopen(argv[1], \"wb\");\n"
                       "    if (!f || fwrite(my_kernels, 1, my_kernels_size, f) != my_kernels_size) return 1;\n"
                       "    return fclose(f) != 0;\n"
                       "}\n");
    snprintf(cmd, sizeof cmd, "cc '%s' '%s' -o '%s' && '%s' '%s'", main_c, obj, exe, exe, dumped);
    cr_assert_eq(system(cmd), 0, "could not link or run %s", cmd);
    fg_bundle b;
    fg_error err;
    cr_assert_eq(bundle_read(dumped, &b, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(b.count, 2u);
    for (size_t i = 0; i < 2; i++) cr_expect_str_eq(b.entries[i].name, two_names[i]);
    bundle_free(&b);
}

/* ---------------------------------------------------------------- --arch skipping, bundle ls/verify */

/* A config with variants sm_80 cannot build (e4m3 at two head dims) and one plain fp16 forward. */
static const char mixed_variants[] =
    "variants { kind = \"fwd\", arch = \"sm_90\", dtype = \"fp16\", head_dim = 64,\n"
    "           block_m = 64, block_n = 64, warps = 4, stages = 2 }\n"
    "variants { kind = \"fwd\", arch = \"sm_90\", dtype = \"e4m3\", head_dim = {64, 128} }\n";

/* `bundle --arch sm_80` skips what sm_80 cannot build, a line each naming the variant and the rule, and
 * bundles the rest, readable by everyone (0644); `bundle ls` and `verify` read it without a GPU. */
Test(cli, bundle_arch_skips_unsupported_variants, .timeout = 120) {
    char cfg[160], out[160];
    snprintf(cfg, sizeof cfg, "%s/mixed.lua", g_dir);
    snprintf(out, sizeof out, "%s/a100.fgb", g_dir);
    write_text(cfg, mixed_variants);
    run_result r = RUN("bundle", cfg, "--arch", "sm_80", "-o", out);
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "flashgen bundle: skipping arch=sm_80,"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "dtype=e4m3"), "the e4m3 variant is named:\n%s", r.err);
    cr_expect_not_null(strstr(r.err, "needs sm_89 or newer"), "the rule's sentence:\n%s", r.err);
    cr_expect_not_null(strstr(r.err, "dtype=e4m3,head_dim=128"), "each skipped variant has its line:\n%s", r.err);
    struct stat st;
    cr_assert_eq(stat(out, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0644, "a bundle is meant to be shipped: mode %o", (unsigned)(st.st_mode & 0777));
    fg_bundle b;
    fg_error err;
    cr_assert_eq(bundle_read(out, &b, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(b.count, 1u);
    cr_expect_str_eq(b.entries[0].name, two_names[1]);
    bundle_free(&b);
    run_free(&r);

    r = RUN("bundle", "ls", out);
    EXPECT_STATUS(r, 0);
    char want[300];
    snprintf(want, sizeof want, "%s  sm_80  ", two_names[1]);
    cr_expect_eq(strncmp(r.out, want, strlen(want)), 0, "%s", r.out);
    cr_expect_eq(count_lines(r.out), 1);
    run_free(&r);
    r = RUN("bundle", "verify", out);
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "1 entries, every checksum matches"), "%s", r.out);
    run_free(&r);

    /* Without --arch the config's own archs must all build: sm_90 builds every one of them. With an arch that
     * builds none, the bundle is an error. */
    write_text(cfg, "variants { kind = \"fwd\", arch = \"sm_90\", dtype = \"e4m3\", head_dim = 64 }\n");
    r = RUN("bundle", cfg, "--arch", "sm_80", "-o", out);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "skipping"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "unsupported on the arch given"), "%s", r.err);
    run_free(&r);
}

/* On sm_120 the tma=1 backward (its block_m) is skipped, the e4m3 and fp16 forwards are bundled. */
Test(cli, bundle_arch_sm_120_skips_the_tma_backward, .timeout = 180) {
    char cfg[160], out[160];
    snprintf(cfg, sizeof cfg, "%s/mixed.lua", g_dir);
    snprintf(out, sizeof out, "%s/sm120.fgb", g_dir);
    write_text(cfg,
               "variants { kind = \"fwd\", arch = \"sm_90\", dtype = {\"fp16\", \"e4m3\"}, head_dim = 64 }\n"
               "variants { kind = \"bwd\", arch = \"sm_90\", dtype = \"fp16\", head_dim = 64, tma = true }\n");
    run_result r = RUN("bundle", cfg, "--arch", "sm_120", "-o", out);
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "skipping arch=sm_120,"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "tma=1 (the mma.sync backward's loads by TMA)"), "%s", r.err);
    run_free(&r);
    r = RUN("bundle", "ls", out);
    EXPECT_STATUS(r, 0);
    cr_expect_eq(count_lines(r.out), 2, "%s", r.out);
    cr_expect_not_null(strstr(r.out, "dtype=e4m3"), "%s", r.out);
    run_free(&r);
}

/* The default config lists for every arch a user bundles for, skipping what the arch cannot build. */
Test(cli, list_default_config_for_each_arch) {
    const char *archs[] = {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_120"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        run_result r = RUN("list", "configs/default.lua", "--arch", archs[i]);
        EXPECT_STATUS(r, 0);
        cr_expect_gt(count_lines(r.out), 10, "%s: %s", archs[i], r.out);
        if (strcmp(archs[i], "sm_80") == 0) { /* no FP8 inputs there (an FP8 KV cache beside 16-bit Q runs) */
            cr_expect_null(strstr(r.out, "dtype=e4m3"), "%s", r.out);
            cr_expect_not_null(strstr(r.out, "kv=e4m3"), "%s", r.out);
            cr_expect_not_null(strstr(r.err, "flashgen list: skipping"), "%s", r.err);
        }
        if (strcmp(archs[i], "sm_120") == 0) cr_expect_null(strstr(r.out, "tma=1"), "%s", r.out);
        run_free(&r);
    }
}

/* `bundle verify` names every entry whose payload is corrupt and exits 1; `ls` still lists them. */
Test(cli, bundle_verify_names_each_bad_entry) {
    fg_bundle b = {NULL, 0};
    fg_error err;
    uint8_t blob[64];
    memset(blob, 7, sizeof blob);
    cr_assert_eq(bundle_add(&b, "arch=sm_80,x=1", blob, sizeof blob, &err), FG_OK);
    cr_assert_eq(bundle_add(&b, "arch=sm_86,x=2", blob, sizeof blob, &err), FG_OK);
    cr_assert_eq(bundle_add(&b, "arch=sm_89,x=3", blob, sizeof blob, &err), FG_OK);
    char path[160];
    snprintf(path, sizeof path, "%s/k.fgb", g_dir);
    cr_assert_eq(bundle_write(path, &b, &err), FG_OK, "%s", err.msg);
    bundle_free(&b);
    run_result r = RUN("bundle", "verify", path);
    EXPECT_STATUS(r, 0);
    run_free(&r);
    size_t len;
    char *bytes = slurp(path, &len);
    bytes[len - 1] ^= 1;        /* the last payload (sm_89) */
    bytes[len - 64 - 1] ^= 1;   /* the second (sm_86) */
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, len, f), len);
    fclose(f);
    free(bytes);
    r = RUN("bundle", "verify", path);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "entry arch=sm_86,x=2: its 64 bytes do not match"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "entry arch=sm_89,x=3: its 64 bytes do not match"), "%s", r.err);
    cr_expect_null(strstr(r.err, "sm_80,x=1"), "%s", r.err);
    run_free(&r);
    r = RUN("bundle", "ls", path);
    EXPECT_STATUS(r, 0);
    cr_expect(has_line(r.out, "arch=sm_80,x=1  sm_80  64"), "%s", r.out);
    cr_expect_eq(count_lines(r.out), 3, "%s", r.out);
    run_free(&r);
    /* a config literally named ls is given as ./ls; `bundle ls` without a FILE is a usage error */
    r = RUN("bundle", "ls");
    EXPECT_STATUS(r, 2);
    run_free(&r);
}

/* A config's mod variant: `list` and `bundle ls` name it with the file's id (mod=ID), the name a runtime that
 * creates the same mod looks the cubin up by. One NVRTC compile. */
Test(cli, bundle_compiles_a_configs_mod_variant) {
    char mod[160], id[MOD_ID_LEN + 1], cfg[160], out[160], name[FG_SPEC_NAME_MAX];
    write_alibi_mod(mod, id, name);
    snprintf(cfg, sizeof cfg, "%s/serve.lua", g_dir);
    snprintf(out, sizeof out, "%s/serve.fgb", g_dir);
    write_text(cfg, "variants { kind = \"serve\", arch = \"sm_90\", dtype = \"bf16\", head_dim = 64, mod = \"alibi.lua\" }\n");
    run_result r = RUN("list", cfg);
    EXPECT_STATUS(r, 0);
    char line[FG_SPEC_NAME_MAX + 2];
    snprintf(line, sizeof line, "%s\n", name);
    cr_expect_str_eq(r.out, line);
    run_free(&r);

    r = RUN("bundle", cfg, "-o", out, "-j", "1");
    EXPECT_STATUS(r, 0);
    run_free(&r);
    r = RUN("bundle", "ls", out);
    EXPECT_STATUS(r, 0);
    cr_expect_eq(count_lines(r.out), 1, "%s", r.out);
    cr_expect_eq(strncmp(r.out, name, strlen(name)), 0, "want %s, got %s", name, r.out);
    cr_expect_eq(r.out[strlen(name)], ' ', "%s", r.out);
    run_free(&r);
}
