/* test_cli.c: the `flashgen` program's gen, compile and list commands (tools/cli.c), its mod command and
 * --mod option (tools/cmd_mod.c) and its usage (help, version, usage errors), run as a user runs it through cli_harness.c; the bundle command's tests are
 * test_cli_bundle.c's. */
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
#include "generator/validate.h"
#include "runtime/tunedb.h"
#include "tests/test_util.h"
#include "tests/cli_harness.h"

TestSuite(cli, .init = scratch_init, .fini = scratch_fini, .timeout = 60);

/* ---------------------------------------------------------------- help, version, usage errors */

Test(cli, help_of_every_command_exits_0) {
    run_result r = RUN("--help");
    EXPECT_STATUS(r, 0);
    const char *cmds[] = {"gen", "compile", "list", "bundle", "run", "explain", "tune", "info", "cache", "mod"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "\n  %s ", cmds[i]);
        cr_expect_not_null(strstr(r.out, want), "flashgen --help does not list '%s':\n%s", cmds[i], r.out);
    }
    cr_expect_not_null(strstr(r.out, "head_dim_range"), "--help should list the validation rules");
    run_free(&r);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        r = RUN(cmds[i], "--help");
        EXPECT_STATUS(r, 0);
        char want[64];
        snprintf(want, sizeof want, "usage: flashgen %s", cmds[i]);
        cr_expect_not_null(strstr(r.out, want), "'%s --help' printed:\n%s", cmds[i], r.out);
        cr_expect_str_empty(r.err, "'%s --help' wrote to stderr: %s", cmds[i], r.err);
        run_free(&r);
    }
    r = RUN("help", "bundle");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "usage: flashgen bundle"));
    run_free(&r);
}

Test(cli, version) {
    run_result r = RUN("--version");
    EXPECT_STATUS(r, 0);
    cr_expect_str_eq(r.out, "flashgen " FG_VERSION_STRING "\n");
    run_free(&r);
}

Test(cli, no_arguments_and_unknown_command_exit_2) {
    run_result r = run((const char *const[]){NULL});
    EXPECT_STATUS(r, 2);
    cr_expect_not_null(strstr(r.err, "usage: flashgen"), "%s", r.err);
    run_free(&r);
    r = RUN("frobnicate");
    EXPECT_STATUS(r, 2);
    cr_expect_not_null(strstr(r.err, "unknown command 'frobnicate'"), "%s", r.err);
    cr_expect_str_empty(r.out);
    run_free(&r);
    r = RUN("--frobnicate");
    EXPECT_STATUS(r, 2);
    cr_expect_not_null(strstr(r.err, "--frobnicate"), "%s", r.err);
    run_free(&r);
}

/* Each bad option exits 2 with a message that starts with the command and names the option. */
Test(cli, bad_options_exit_2_naming_the_option) {
    struct {
        const char *args[8];
        const char *prefix, *names;
    } cases[] = {
        {{"gen", "--frob", "arch=sm_90a", NULL}, "flashgen gen: ", "'--frob'"},
        {{"gen", NULL}, "flashgen gen: ", "SPEC"},
        {{"compile", "arch=sm_80", "dtype=fp16", "head_dim=64", NULL}, "flashgen compile: ", "-o"},
        {{"compile", "arch=sm_80", "-o", NULL}, "flashgen compile: ", "'-o' needs a value"},
        {{"list", NULL}, "flashgen list: ", "CONFIG"},
        {{"gen", "arch=sm_80", "--mod", NULL}, "flashgen gen: ", "'--mod' needs a value"},
        {{"mod", NULL}, "flashgen mod: ", "FILE"},
        {{"mod", "a.lua", "b.lua", NULL}, "flashgen mod: ", "'b.lua'"},
        {{"mod", "a.lua", "--cuda", "--id", NULL}, "flashgen mod: ", "--cuda and --id"},
        {{"mod", "--frob", "a.lua", NULL}, "flashgen mod: ", "'--frob'"},
        {{"bundle", "x.lua", "-o", "x.bin", "-j", "-3", NULL}, "flashgen bundle: ", "-j"},
        {{"bundle", "x.lua", "-o", "x.bin", "--jobs", "4x", NULL}, "flashgen bundle: ", "'4x'"},
        {{"bundle", "x.lua", NULL}, "flashgen bundle: ", "-o"},
        {{"bundle", "x.lua", "-o", "x.c", "--emit-c", "--symbol", "1abc", NULL}, "flashgen bundle: ", "--symbol"},
        {{"run", "--batch", "abc", NULL}, "flashgen run: ", "--batch"},
        {{"run", "--seqlen-q", "-5", NULL}, "flashgen run: ", "--seqlen-q"},
        {{"run", "--head-dim", "", NULL}, "flashgen run: ", "--head-dim"},
        {{"run", "--iters", "99999999999999999999", NULL}, "flashgen run: ", "--iters"},
        {{"run", "--dtype", "fp32", NULL}, "flashgen run: ", "--dtype"},
        {{"run", "--heads", "8", "--heads-kv", "3", NULL}, "flashgen run: ", "--heads-kv"},
        {{"run", "stray", NULL}, "flashgen run: ", "'stray'"},
        {{"run", "--window", "5", NULL}, "flashgen run: ", "--window expects L,R"},
        {{"run", "--window", "-2,0", NULL}, "flashgen run: ", "--window expects L,R"},
        {{"run", "--window", "1,2,3", NULL}, "flashgen run: ", "--window expects L,R"},
        {{"run", "--softcap", "0", NULL}, "flashgen run: ", "--softcap expects a number above 0"},
        {{"run", "--softcap", "nan", NULL}, "flashgen run: ", "--softcap expects a number above 0"},
        {{"run", "--head-dim-v", "0", NULL}, "flashgen run: ", "--head-dim-v"},
        {{"run", "--sinks", "--dtype", "e4m3", NULL}, "flashgen run: ", "--sinks takes --dtype fp16 or bf16"},
        {{"explain", "--alibi", "--dtype", "e5m2", NULL}, "flashgen explain: ", "--alibi takes --dtype fp16 or bf16"},
        {{"explain", "--causal-top-left", "--softcap", "x", NULL}, "flashgen explain: ", "--softcap"},
        {{"explain", "--frob", NULL}, "flashgen explain: ", "'--frob'"},
        {{"explain", "--arch", "ampere", NULL}, "flashgen explain: ", "sm_90a"},
        {{"explain", "--arch", "sm_100a", NULL}, "flashgen explain: ", "give sm_100"},
        {{"info", "--verbose", NULL}, "flashgen info: ", "'--verbose'"},
        {{"tune", NULL}, "flashgen tune: ", "SPACE"},
        {{"tune", "a.lua", "b.lua", NULL}, "flashgen tune: ", "'b.lua'"},
        {{"tune", "a.lua", "--iters", "0", NULL}, "flashgen tune: ", "--iters"},
        {{"tune", "a.lua", "--budget", "soon", NULL}, "flashgen tune: ", "--budget"},
        {{"tune", "a.lua", "-j", "0", NULL}, "flashgen tune: ", "-j"},
        {{"tune", "a.lua", "--device", "-1", NULL}, "flashgen tune: ", "--device"},
        {{"tune", "a.lua", "--db", "", NULL}, "flashgen tune: ", "--db"},
        {{"tune", "a.lua", "--frob", NULL}, "flashgen tune: ", "'--frob'"},
        {{"tune", "--show", "x.lua", "-j", "2", NULL}, "flashgen tune: ", "--show"},
        {{"tune", "--show", "x.lua", "y.lua", NULL}, "flashgen tune: ", "'y.lua'"},
        {{"tune", "--show", "x.lua", "--db", "y.lua", NULL}, "flashgen tune: ", "--db"},
        {{"cache", NULL}, "flashgen cache: ", "ls, verify, clear or prune"},
        {{"cache", "shred", NULL}, "flashgen cache: ", "'shred'"},
        {{"cache", "ls", "--dir", NULL}, "flashgen cache: ", "'--dir' needs a value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r = run(cases[i].args);
        cr_expect_eq(r.status, 2, "case %zu (%s %s): exit %d, stderr: %s", i, cases[i].args[0],
                     cases[i].args[1] ? cases[i].args[1] : "", r.status, r.err);
        cr_expect_eq(strncmp(r.err, cases[i].prefix, strlen(cases[i].prefix)), 0, "case %zu: stderr '%s'", i, r.err);
        cr_expect_not_null(strstr(r.err, cases[i].names), "case %zu: stderr '%s' does not name %s", i, r.err,
                           cases[i].names);
        run_free(&r);
    }
}

/* ---------------------------------------------------------------- gen */

/* gen prints exactly the library's emitted source for the tile-filled spec: no #include, the name. */
Test(cli, gen_prints_the_emitted_source) {
    char name[FG_SPEC_NAME_MAX];
    canonical("kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,causal=1", name);
    run_result r = RUN("gen", "arch=sm_90a", "dtype=bf16", "head_dim=128", "causal=1");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, name), "the source does not name the variant %s", name);
    cr_expect_null(strstr(r.out, "#include"), "generated source must not #include anything");
    cr_expect_not_null(strstr(r.out, FG_KERNEL_NAME));

    fg_spec s;
    fg_error err;
    cr_assert_eq(spec_parse(name, &s, &err), FG_OK, "%s", err.msg);
    char *pre, *src;
    size_t len;
    cr_assert_eq(emit_source(&s, &pre, NULL, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(emit_flatten(pre, &src, &len, &err), FG_OK, "%s", err.msg); /* gen prints the flattened source */
    free(pre);
    cr_expect_eq(strlen(r.out), len, "gen printed %zu bytes, the flattened source has %zu", strlen(r.out), len);
    cr_expect_eq(strcmp(r.out, src), 0, "gen's output differs from the flattened emit_source");

    /* The canonical text as one argument gives the same bytes. */
    run_result c = RUN("gen", name);
    EXPECT_STATUS(c, 0);
    cr_expect_str_eq(c.out, src);
    free(src);
    run_free(&c);
    run_free(&r);
}

Test(cli, gen_refuses_an_invalid_spec_naming_the_field) {
    run_result r = RUN("gen", "arch=sm_90a,dtype=bf16,head_dim=7");
    EXPECT_STATUS(r, 1);
    cr_expect_str_empty(r.out, "a refused spec must print no source");
    cr_expect_eq(strncmp(r.err, "flashgen gen: ", 14), 0, "%s", r.err);
    cr_expect_not_null(strstr(r.err, "head_dim 7"), "%s", r.err);
    /* No tile rule covers head_dim 7 either, but the message must be the validation rule's sentence
     * (which says what head_dim may be), exactly as the library words it. */
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 7, .block_m = 64,
                 .block_n = 64, .warps = 4, .stages = 2, .out_dtype = FG_DTYPE_BF16};
    fg_error verr;
    cr_assert_neq(spec_validate(&s, &verr), FG_OK);
    char want[1200];
    snprintf(want, sizeof want, "flashgen gen: %s\n", verr.msg);
    cr_expect_str_eq(r.err, want);
    run_free(&r);

    struct {
        const char *spec, *names;
    } cases[] = {
        {"dtype=bf16,head_dim=64", "arch"},                       /* a required key is missing */
        {"arch=sm_90a,dtype=bf16,head_dim=sixty", "head_dim"},    /* not a number */
        {"arch=sm_90a,dtype=fp64,head_dim=64", "fp64"},           /* unknown dtype */
        {"arch=sm_75,dtype=bf16,head_dim=64", "sm_75"},           /* unknown target */
        {"arch=sm_90a,dtype=bf16,head_dim=64,colour=red", "colour"},
        {"arch=sm_80,dtype=fp16,head_dim=64,block_m=64,block_n=64,warps=3,stages=2", "warps 3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r = RUN("gen", cases[i].spec);
        cr_expect_eq(r.status, 1, "%s: exit %d (%s)", cases[i].spec, r.status, r.err);
        cr_expect_not_null(strstr(r.err, cases[i].names), "%s: stderr '%s' does not name %s", cases[i].spec, r.err,
                           cases[i].names);
        cr_expect_str_empty(r.out);
        run_free(&r);
    }
}

/* ---------------------------------------------------------------- compile */

Test(cli, compile_writes_a_cubin_and_reports_registers) {
    char cubin[160], ptx[160], name[FG_SPEC_NAME_MAX];
    snprintf(cubin, sizeof cubin, "%s/k.cubin", g_dir);
    snprintf(ptx, sizeof ptx, "%s/k.ptx", g_dir);
    canonical("kind=fwd,arch=sm_80,dtype=fp16,head_dim=64", name);
    run_result r = RUN("compile", "arch=sm_80", "dtype=fp16", "head_dim=64", "-o", cubin, "--ptx", ptx);
    EXPECT_STATUS(r, 0);
    cr_expect_eq(count_lines(r.out), 1, "compile prints one line, got:\n%s", r.out);
    cr_expect_eq(strncmp(r.out, name, strlen(name)), 0, "the line starts with the name: %s", r.out);
    cr_expect_not_null(strstr(r.out, " registers"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "bytes shared memory"), "%s", r.out);
    /* The register count is a real number from ptxas, not the -1 of "not found". */
    const char *reg = strstr(r.out, " registers");
    cr_assert_not_null(reg);
    const char *p = reg;
    while (p > r.out && p[-1] >= '0' && p[-1] <= '9') p--;
    cr_expect_gt(atoi(p), 0, "registers: %s", r.out);

    size_t len;
    char *bin = slurp(cubin, &len);
    cr_expect_gt(len, 1000u, "the cubin is %zu bytes", len);
    cr_expect_eq(memcmp(bin, "\177ELF", 4), 0, "a cubin is an ELF file");
    free(bin);
    char *text = slurp(ptx, NULL);
    cr_expect_not_null(strstr(text, FG_KERNEL_NAME), "the PTX defines the kernel");
    free(text);
    struct stat st;
    cr_assert_eq(stat(cubin, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600, "written with mode 0600 (fg_write_file_atomic)");
    run_free(&r);

    /* --log prints the ptxas report too. */
    r = RUN("compile", name, "-o", cubin, "--log");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "ptxas"), "--log prints the ptxas report:\n%s", r.out);
    run_free(&r);

    /* --quick compiles as the JIT's first tier does: another cubin of the same variant. */
    char full[160];
    snprintf(full, sizeof full, "%s/full.cubin", g_dir);
    cr_assert_eq(rename(cubin, full), 0);
    r = RUN("compile", name, "-o", cubin, "--quick", "--log");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, name), "%s", r.out);
    size_t qlen, flen;
    char *q = slurp(cubin, &qlen), *f = slurp(full, &flen);
    cr_expect(qlen > 1000 && memcmp(q, "\177ELF", 4) == 0, "the quick build is a cubin too");
    cr_expect(qlen != flen || memcmp(q, f, qlen) != 0, "the quick build is not the full one");
    free(q);
    free(f);
    run_free(&r);
}

Test(cli, compile_fails_cleanly) {
    char cubin[160];
    snprintf(cubin, sizeof cubin, "%s/none/k.cubin", g_dir);
    run_result r = RUN("compile", "arch=sm_80,dtype=fp16,head_dim=64", "-o", cubin);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "flashgen compile: cannot write"), "%s", r.err);
    run_free(&r);
    snprintf(cubin, sizeof cubin, "%s/k.cubin", g_dir);
    r = RUN("compile", "arch=sm_80,dtype=fp16,head_dim=7", "-o", cubin);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "head_dim"), "%s", r.err);
    cr_expect_eq(file_exists(cubin), 0, "a refused spec writes no cubin");
    run_free(&r);
}

/* ---------------------------------------------------------------- list */

Test(cli, list_prints_the_configs_variants) {
    char cfg[160];
    snprintf(cfg, sizeof cfg, "%s/small.lua", g_dir);
    write_text(cfg, "variants { kind = \"fwd\", arch = \"sm_80\", dtype = {\"fp16\", \"bf16\"}, head_dim = 64,\n"
                    "           block_m = 64, block_n = 64, warps = 4, stages = 2 }\n"
                    "variants { kind = \"fwd\", arch = \"sm_90a\", dtype = \"bf16\", head_dim = 128, causal = true }\n"
                    "variants { kind = \"fwd\", arch = \"sm_80\", dtype = \"fp16\", head_dim = 64,\n"
                    "           block_m = 64, block_n = 64, warps = 4, stages = 2 }  -- a duplicate\n");
    char tiled[FG_SPEC_NAME_MAX];
    canonical("kind=fwd,arch=sm_90a,dtype=bf16,head_dim=128,causal=1", tiled);
    run_result r = RUN("list", cfg);
    EXPECT_STATUS(r, 0);
    cr_expect_eq(count_lines(r.out), 3, "three unique variants, got:\n%s", r.out);
    cr_expect(has_line(r.out, two_names[0]), "missing %s in:\n%s", two_names[0], r.out);
    cr_expect(has_line(r.out, two_names[1]), "missing %s in:\n%s", two_names[1], r.out);
    cr_expect(has_line(r.out, tiled), "missing %s (tiles from the default policy) in:\n%s", tiled, r.out);
    run_free(&r);

    /* --arch replaces every arch field. */
    r = RUN("list", cfg, "--arch", "sm_86");
    EXPECT_STATUS(r, 0);
    cr_expect_eq(count_lines(r.out), 3, "%s", r.out);
    char overridden[FG_SPEC_NAME_MAX];
    canonical("kind=fwd,arch=sm_86,dtype=bf16,head_dim=128,causal=1", overridden);
    cr_expect(has_line(r.out, overridden), "missing %s in:\n%s", overridden, r.out);
    cr_expect_null(strstr(r.out, "sm_80"), "--arch sm_86 left an sm_80 variant:\n%s", r.out);
    run_free(&r);

    char missing[160];
    snprintf(missing, sizeof missing, "%s/absent.lua", g_dir);
    r = RUN("list", missing);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "absent.lua"), "%s", r.err);
    run_free(&r);
}

/* `flashgen` alone prints a short usage (the commands, COMMAND --help), exit 2; --help the full text. */
Test(cli, no_arguments_prints_a_short_usage) {
    run_result r = run((const char *const[]){NULL});
    EXPECT_STATUS(r, 2);
    cr_expect_leq(count_lines(r.err), 15, "%s", r.err);
    cr_expect_not_null(strstr(r.err, "flashgen COMMAND --help"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "bundle"), "%s", r.err);
    run_free(&r);
}

/* ---------------------------------------------------------------- mod, and gen's and compile's --mod */

/* `flashgen mod FILE` prints the id the tracer gives the file, the functions, the aux arrays, the canonical
 * text; --cuda the device code in its place; --id the id alone. */
Test(cli, mod_prints_the_id_aux_and_tree) {
    char path[160], id[MOD_ID_LEN + 1], name[FG_SPEC_NAME_MAX];
    write_alibi_mod(path, id, name);
    fg_mod m;
    fg_error err;
    cr_assert_eq(mod_trace_file(path, &m, &err), FG_OK, "%s", err.msg);
    char canon[8192], head[128];
    cr_assert_gt(mod_canonical(&m, canon, sizeof canon), 0);
    snprintf(head, sizeof head, "id %s\nfunctions score_mod\naux slope f32 rank 1\nnodes %d\n\n", id, m.n_nodes);
    run_result r = RUN("mod", path);
    EXPECT_STATUS(r, 0);
    cr_expect_eq(strncmp(r.out, head, strlen(head)), 0, "want it to start with:\n%s\ngot:\n%s", head, r.out);
    cr_expect_str_eq(r.out + (strncmp(r.out, head, strlen(head)) == 0 ? strlen(head) : 0), canon);
    cr_expect_str_empty(r.err);
    run_free(&r);

    r = RUN("mod", path, "--cuda");
    EXPECT_STATUS(r, 0);
    cr_expect_eq(strncmp(r.out, head, strlen(head)), 0, "%s", r.out);
    cr_expect_not_null(strstr(r.out, "fg_user_score("), "%s", r.out);
    run_free(&r);

    r = RUN("mod", "--id", path);
    EXPECT_STATUS(r, 0);
    char line[32];
    snprintf(line, sizeof line, "%s\n", id);
    cr_expect_str_eq(r.out, line);
    run_free(&r);

    /* a refused mod: exit 1, the file:line and the sentence, nothing on stdout */
    char bad[160];
    snprintf(bad, sizeof bad, "%s/bad.lua", g_dir);
    write_text(bad, "score_mod = function(s, b, h, q, kv)\n  return s ^ 2\nend\n");
    r = RUN("mod", bad);
    EXPECT_STATUS(r, 1);
    cr_expect_str_empty(r.out);
    cr_expect_eq(strncmp(r.err, "flashgen mod: ", 14), 0, "%s", r.err);
    cr_expect_not_null(strstr(r.err, "bad.lua:2:"), "%s", r.err);
    run_free(&r);
}

/* gen --mod sets the spec's mod to the file's id and emits its code; a spec naming that id gives the same bytes,
 * one naming another is refused, and one naming it without --mod gets the mod_known rule's sentence. */
Test(cli, gen_with_a_mod_file) {
    char path[160], id[MOD_ID_LEN + 1], name[FG_SPEC_NAME_MAX];
    write_alibi_mod(path, id, name);
    run_result r = RUN("gen", alibi_variant, "--mod", path);
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, name), "the source names %s", name);
    cr_expect_not_null(strstr(r.out, "fg_user_score("), "the mod's device code is in the source");
    run_free(&r);
    /* the name with its mod= id names the same variant */
    run_result same = RUN("gen", name, "--mod", path);
    EXPECT_STATUS(same, 0);
    r = RUN("gen", alibi_variant, "--mod", path);
    cr_expect_str_eq(same.out, r.out);
    run_free(&same);
    run_free(&r);

    r = RUN("gen", "kind=serve,arch=sm_90,dtype=bf16,head_dim=64,mod=0123456789abcdef", "--mod", path);
    EXPECT_STATUS(r, 1);
    cr_expect_str_empty(r.out);
    cr_expect_not_null(strstr(r.err, "flashgen gen: SPEC names mod=0123456789abcdef, but "), "%s", r.err);
    cr_expect_not_null(strstr(r.err, id), "the message gives the file's id: %s", r.err);
    run_free(&r);

    fg_spec s; /* this process has not registered the mod: its rules answer as the program's do without --mod */
    fg_error verr;
    cr_assert_eq(spec_parse(name, &s, &verr), FG_OK, "%s", verr.msg);
    cr_assert_eq(spec_validate(&s, &verr), FG_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(verr.msg, "names no custom mod this process has registered"), "%s", verr.msg);
    char want[1200];
    snprintf(want, sizeof want, "flashgen gen: %s\n", verr.msg);
    r = RUN("gen", name);
    EXPECT_STATUS(r, 1);
    cr_expect_str_eq(r.err, want);
    run_free(&r);

    /* a mod on kind=fwd (gen's default kind): the mod_kind rule */
    r = RUN("gen", "arch=sm_90", "dtype=bf16", "head_dim=64", "--mod", path);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "is a variant of the serving kernel"), "%s", r.err);
    run_free(&r);
}

/* compile --mod compiles the variant with the mod (one NVRTC compile) under the name carrying its id. */
Test(cli, compile_with_a_mod_file) {
    char path[160], id[MOD_ID_LEN + 1], cubin[160], name[FG_SPEC_NAME_MAX];
    write_alibi_mod(path, id, name);
    snprintf(cubin, sizeof cubin, "%s/k.cubin", g_dir);
    run_result r = RUN("compile", alibi_variant, "--mod", path, "-o", cubin);
    EXPECT_STATUS(r, 0);
    cr_expect_eq(strncmp(r.out, name, strlen(name)), 0, "the line starts with %s: %s", name, r.out);
    size_t len;
    char *bin = slurp(cubin, &len);
    cr_expect_eq(memcmp(bin, "\177ELF", 4), 0, "a cubin is an ELF file");
    free(bin);
    run_free(&r);
}
