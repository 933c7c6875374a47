/* test_cli.c: the `flashgen` program (tools/cli.c), run as a user runs it.
 *
 * Each test forks and execs build/flashgen (or $FLASHGEN_BIN) from the repository root, with stdout and
 * stderr captured to files and FLASHGEN_CACHE_DIR pointing into the test's own mkdtemp directory, so no
 * test touches the user's cache. What is checked: exit codes (0 success, 1 failure, 2 usage), the
 * "flashgen <cmd>: <sentence>" messages naming the bad option or field, that `gen` prints exactly what
 * the library emits, that `compile` writes a real cubin, that `list` and `bundle` agree with the config,
 * that bundles read back with the right names, that a failing bundle leaves no file, that --emit-c output
 * compiles and holds the same bundle, the cache subcommands on entries made here with cache_put, and
 * `tune`: its usage errors, a tuning space's errors as file:line before any GPU is needed, `--show` on
 * databases written here with tunedb_save (a table with the winner marked; a corrupt file refused).
 * NVRTC compiles need no GPU; the GPU cases (`run`, `tune`) check the no-device message or, with a GPU,
 * run a small problem and a tiny sweep. */
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
#include "generator/spec.h"
#include "runtime/tunedb.h"
#include "tests/test_util.h"

static char g_dir[64];    /* this test's scratch directory */
static char g_cache[128]; /* g_dir/cache: FLASHGEN_CACHE_DIR of every run */

/* Criterion .init: a fresh scratch directory per test, so tests may run in parallel. */
static void scratch_init(void) {
    test_scratch_make(g_dir, sizeof g_dir, "fg-test-cli");
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_dir);
}

/* Criterion .fini: removes the scratch directory (only ever one of ours). */
static void scratch_fini(void) { test_scratch_remove(g_dir, "fg-test-cli"); }

TestSuite(cli, .init = scratch_init, .fini = scratch_fini, .timeout = 60);

/* Criterion does not run .fini for a skipped test: remove the scratch directory, then skip. */
#define SKIP(...)                                                                                   \
    do {                                                                                            \
        scratch_fini();                                                                             \
        cr_skip_test(__VA_ARGS__);                                                                  \
    } while (0)

/* What one run of the program did. */
typedef struct run_result {
    int status;   /* exit status, or 128 + signal when killed */
    char *out;    /* captured stdout (NUL-terminated, caller frees with run_free) */
    char *err;    /* captured stderr */
} run_result;

/* Reads a whole file as a string (asserting on failure). */
static char *slurp(const char *path, size_t *len_out) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
    }
    fclose(f);
    buf[len] = '\0';
    if (len_out) *len_out = len;
    return buf;
}

/* Writes a string to a file (asserting on failure). */
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot create %s: %s", path, strerror(errno));
    cr_assert_eq(fputs(text, f) >= 0, 1);
    cr_assert_eq(fclose(f), 0);
}

/* The program under test. */
static const char *flashgen_bin(void) {
    const char *b = getenv("FLASHGEN_BIN");
    return b && *b ? b : "build/flashgen";
}

/* Starts flashgen with the NULL-terminated argument list args (not counting argv[0]), stdout and stderr
 * going to g_dir/stdout and g_dir/stderr, FLASHGEN_CACHE_DIR set to cache_dir (g_cache when NULL).
 * Returns the child's pid; finish_run collects it. */
static pid_t start_run(const char *cache_dir, const char *const *args) {
    const char *bin = flashgen_bin();
    cr_assert_eq(access(bin, X_OK), 0, "%s is not an executable (%s): build it with ninja, or set FLASHGEN_BIN",
                 bin, strerror(errno));
    char out_path[160], err_path[160];
    snprintf(out_path, sizeof out_path, "%s/stdout", g_dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", g_dir);
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork failed: %s", strerror(errno));
    if (pid == 0) {
        int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(126);
        setenv("FLASHGEN_CACHE_DIR", cache_dir ? cache_dir : g_cache, 1);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Waits for the child started by start_run and collects its exit status and output. */
static run_result finish_run(pid_t pid) {
    char out_path[160], err_path[160];
    snprintf(out_path, sizeof out_path, "%s/stdout", g_dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", g_dir);
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    run_result r;
    r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    r.out = slurp(out_path, NULL);
    r.err = slurp(err_path, NULL);
    return r;
}

/* Runs flashgen to completion with FLASHGEN_CACHE_DIR set to cache_dir (g_cache when NULL). */
static run_result run_with_cache(const char *cache_dir, const char *const *args) {
    return finish_run(start_run(cache_dir, args));
}

/* Runs flashgen with the test's cache directory. */
static run_result run(const char *const *args) { return run_with_cache(NULL, args); }

/* RUN("gen", "--help"): runs flashgen with those arguments (the NULL terminator is added). */
#define RUN(...) run((const char *const[]){__VA_ARGS__, NULL})

/* Frees the captured output of a run. */
static void run_free(run_result *r) {
    free(r->out);
    free(r->err);
}

/* Asserts the exit status, showing both streams when it is wrong. */
#define EXPECT_STATUS(r, want)                                                                               \
    cr_assert_eq((r).status, (want), "exit status %d, expected %d\n--- stdout:\n%.2000s\n--- stderr:\n%.2000s", \
                 (r).status, (want), (r).out, (r).err)

/* The canonical name of a partial spec once the default tile policy has filled it. */
static void canonical(const char *partial, char name[FG_SPEC_NAME_MAX]) {
    fg_spec s;
    fg_error err;
    fg_tile_policy pol;
    cr_assert_eq(spec_parse(partial, &s, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(tile_policy_init_default(&pol, &err), FG_OK);
    cr_assert_eq(spec_fill_tiles(&s, &pol, &err), FG_OK, "%s", err.msg);
    tile_policy_free(&pol);
    cr_assert_gt(spec_format(&s, name, FG_SPEC_NAME_MAX), 0);
}

/* Counts the lines of text (each ending in '\n'). */
static int count_lines(const char *text) {
    int n = 0;
    for (; *text; text++) n += *text == '\n';
    return n;
}

/* Returns 1 when `line` is one of the newline-terminated lines of text. */
static int has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n') return 1;
    return 0;
}

/* Returns 1 when anything (a file, a link) exists at path. */
static int file_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A two-variant config: sm_80 fp16 and bf16 at head_dim 64 with explicit tiles, for bundles. */
static const char two_variants[] =
    "-- two small variants\n"
    "variants { kind = \"fwd\", arch = \"sm_80\", dtype = {\"fp16\", \"bf16\"}, head_dim = 64,\n"
    "           block_m = 64, block_n = 64, warps = 4, stages = 2 }\n";
static const char *const two_names[2] = {
    "arch=sm_80,block_m=64,block_n=64,causal=0,dtype=bf16,head_dim=64,kind=fwd,stages=2,warps=4",
    "arch=sm_80,block_m=64,block_n=64,causal=0,dtype=fp16,head_dim=64,kind=fwd,stages=2,warps=4",
};

/* ---------------------------------------------------------------- help, version, usage errors */

Test(cli, help_of_every_command_exits_0) {
    run_result r = RUN("--help");
    EXPECT_STATUS(r, 0);
    const char *cmds[] = {"gen", "compile", "list", "bundle", "run", "explain", "tune", "info", "cache"};
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
        {{"explain", "--iters", "3", NULL}, "flashgen explain: ", "'--iters'"},
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
        {{"cache", NULL}, "flashgen cache: ", "ls, verify or clear"},
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
    fg_spec s = {FG_KIND_FWD, 90, 1, FG_DTYPE_BF16, 7, 64, 64, 4, 2, 0, FG_DTYPE_BF16, 0, 0};
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

/* ---------------------------------------------------------------- run, info */

Test(cli, run_without_a_gpu_says_so) {
    fg_error err;
    if (cuda_api_get(&err) != NULL) SKIP("a CUDA driver is present: see run_small_problem_on_gpu");
    run_result r = RUN("run", "--seqlen-q", "64", "--iters", "2");
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "flashgen run: no CUDA device: "), "%s", r.err);
    run_free(&r);
    r = RUN("explain");
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "flashgen explain: no CUDA device: "), "%s", r.err);
    run_free(&r);
}

Test(cli, run_small_problem_on_gpu, .timeout = 120) {
    fg_error err;
    if (cuda_api_get(&err) == NULL) SKIP("no CUDA device: %s", err.msg);
    int count = 0;
    if (cuda_api_get(&err)->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
        SKIP("a CUDA driver but no device");
    run_result r = RUN("run", "--dtype", "fp16", "--batch", "1", "--seqlen-q", "113", "--seqlen-k", "203", "--heads",
                       "4", "--heads-kv", "2", "--head-dim", "64", "--causal", "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "check: PASS"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "TFLOP/s"), "%s", r.out);
    run_free(&r);
    /* FP8 (sm_89+): key-major V with NaN row padding, fp16 O; checked against the FP8 reference. */
    int major = 0, minor = 0;
    CUdevice dev;
    const fg_cuda_api *cu = cuda_api_get(&err);
    if (cu->cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
        cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) == CUDA_SUCCESS &&
        cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) == CUDA_SUCCESS &&
        major * 10 + minor >= 89 && major * 10 + minor != 87) {
        r = RUN("run", "--dtype", "e4m3", "--out", "fp16", "--batch", "1", "--seqlen-q", "113", "--seqlen-k", "203",
                "--heads", "4", "--heads-kv", "2", "--head-dim", "96", "--causal", "--iters", "3");
        EXPECT_STATUS(r, 0);
        cr_expect_not_null(strstr(r.out, "check: PASS"), "%s", r.out);
        run_free(&r);
    }
    /* --bwd: the backward's explain, every gradient element against the CPU references, the timing (causal
     * with sq > sk: rows without keys; GQA). */
    r = RUN("run", "--bwd", "--dtype", "bf16", "--batch", "1", "--seqlen-q", "203", "--seqlen-k", "113", "--heads", "4",
            "--heads-kv", "2", "--head-dim", "128", "--causal", "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "problem: backward, bf16"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "kind=bwd"), "the backward's variant is explained:\n%s", r.out);
    cr_expect_not_null(strstr(r.out, "check: PASS"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "2.5x the forward's"), "%s", r.out);
    run_free(&r);
}

/* run --bwd refuses what the backward does not take before touching a GPU. */
Test(cli, run_bwd_refuses_fp8) {
    run_result r = RUN("run", "--bwd", "--dtype", "e4m3");
    EXPECT_STATUS(r, 2);
    cr_expect_not_null(strstr(r.err, "--bwd takes --dtype fp16 or bf16"), "%s", r.err);
    run_free(&r);
}

Test(cli, info_exits_0) {
    run_result r = RUN("info");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "flashgen:       " FG_VERSION_STRING), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "NVRTC:"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, g_cache), "info names the cache directory from FLASHGEN_CACHE_DIR:\n%s", r.out);
    cr_expect_not_null(strstr(r.out, "0 entries"), "%s", r.out);
    fg_error err;
    if (cuda_api_get(&err) == NULL) cr_expect_not_null(strstr(r.out, "no CUDA device: "), "%s", r.out);
    else cr_expect_not_null(strstr(r.out, "target arch:"), "%s", r.out);
    run_free(&r);

    /* An unsafe cache directory is reported, not fatal. */
    char bad[160];
    snprintf(bad, sizeof bad, "%s/open", g_dir);
    cr_assert_eq(mkdir(bad, 0700), 0);
    cr_assert_eq(chmod(bad, 0777), 0);
    r = run_with_cache(bad, (const char *const[]){"info", NULL});
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "unusable"), "%s", r.out);
    run_free(&r);
}

/* ---------------------------------------------------------------- cache */

/* Stores payload under a key made from name and the arch option opt into the cache at dir. */
static void put_payload(const char *dir, const char *name, const char *opt, const uint8_t *payload, size_t n) {
    fg_disk_cache c;
    fg_error err;
    cr_assert_eq(cache_open(&c, dir, &err), FG_OK, "%s", err.msg);
    uint8_t key[32];
    const char *opts[] = {opt};
    fg_cache_key_inputs in = {name, strlen(name), "13.0", opts, 1, "sm_80", FG_VERSION_STRING, NULL};
    cache_key(&in, key);
    cr_assert_eq(cache_put(&c, key, name, payload, n, &err), FG_OK, "%s", err.msg);
}

/* Puts an entry with `n` payload bytes under a key derived from `name` into the cache at dir. */
static void put_entry(const char *dir, const char *name, size_t n) {
    uint8_t *payload = malloc(n);
    cr_assert_not_null(payload);
    for (size_t i = 0; i < n; i++) payload[i] = (uint8_t)(i * 7 + n);
    put_payload(dir, name, "--gpu-architecture=sm_80", payload, n);
    free(payload);
}

/* The entry file (`<hex>.cubin`) whose text contains `name`, into path. */
static void find_entry(const char *dir, const char *name, char *path, size_t n) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -l -F '%s' '%s'/*.cubin", name, dir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    cr_assert_not_null(fgets(path, (int)n, p), "no entry holds %s", name);
    pclose(p);
    path[strcspn(path, "\n")] = '\0';
}

Test(cli, cache_ls_verify_clear) {
    const char *a = "arch=sm_80,block_m=64,block_n=64,causal=0,dtype=fp16,head_dim=64,kind=fwd,stages=2,warps=4";
    const char *b = "arch=sm_90,block_m=128,block_n=64,causal=1,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=8";
    put_entry(g_cache, a, 1234);
    put_entry(g_cache, b, 5678);

    run_result r = RUN("cache", "ls");
    EXPECT_STATUS(r, 0);
    cr_expect_eq(count_lines(r.out), 2, "%s", r.out);
    cr_expect_not_null(strstr(r.out, a), "%s", r.out);
    cr_expect_not_null(strstr(r.out, b), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "  1234\n"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "  5678\n"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, ".cubin  "), "%s", r.out);
    cr_expect_null(strstr(r.out, "  ptx"), "no entry here is PTX: %s", r.out);
    run_free(&r);

    /* The PTX of a (here: the same) variant, as a context under FLASHGEN_EMULATE_ARCH stores it: its own key,
     * the same name, marked. */
    const char ptx[] = "//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_80\n";
    put_payload(g_cache, a, "--gpu-architecture=compute_80", (const uint8_t *)ptx, sizeof ptx);
    r = RUN("cache", "ls");
    EXPECT_STATUS(r, 0);
    cr_expect_eq(count_lines(r.out), 3, "%s", r.out);
    char line[512];
    snprintf(line, sizeof line, "  %s  %zu  ptx\n", a, sizeof ptx);
    cr_expect_not_null(strstr(r.out, line), "the PTX entry is marked (%s):\n%s", line, r.out);
    cr_expect_not_null(strstr(r.out, "  1234\n"), "the cubin is not: %s", r.out);
    run_free(&r);
    r = RUN("cache", "clear");
    EXPECT_STATUS(r, 0);
    run_free(&r);
    put_entry(g_cache, a, 1234);
    put_entry(g_cache, b, 5678);

    r = RUN("cache", "verify");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "2 good"), "%s", r.out);
    run_free(&r);

    /* Flip the last payload byte of b's entry: verify fails naming that file, ls marks it. */
    char entry[512];
    find_entry(g_cache, b, entry, sizeof entry);
    int fd = open(entry, O_RDWR);
    cr_assert_geq(fd, 0);
    off_t end = lseek(fd, -1, SEEK_END);
    unsigned char byte;
    cr_assert_eq(pread(fd, &byte, 1, end), 1);
    byte ^= 0x40;
    cr_assert_eq(pwrite(fd, &byte, 1, end), 1);
    close(fd);
    const char *base = strrchr(entry, '/') + 1;
    r = RUN("cache", "verify");
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, base), "verify names the bad entry %s:\n%s", base, r.err);
    cr_expect_not_null(strstr(r.out, "1 good"), "%s", r.out);
    run_free(&r);
    r = RUN("cache", "ls");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "BAD"), "%s", r.out);
    run_free(&r);

    /* --dir names another cache; it is empty. */
    char other[160];
    snprintf(other, sizeof other, "%s/other", g_dir);
    r = RUN("cache", "ls", "--dir", other);
    EXPECT_STATUS(r, 0);
    cr_expect_str_empty(r.out);
    run_free(&r);

    /* A file that is not an entry survives clear. */
    char keep[200];
    snprintf(keep, sizeof keep, "%s/notes.txt", g_cache);
    write_text(keep, "mine\n");
    r = RUN("cache", "clear");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "removed 2 entries"), "%s", r.out);
    run_free(&r);
    cr_expect(file_exists(keep));
    cr_expect_eq(file_exists(entry), 0);
    r = RUN("cache", "ls");
    EXPECT_STATUS(r, 0);
    cr_expect_str_empty(r.out);
    run_free(&r);
}

Test(cli, cache_refuses_an_unsafe_directory) {
    char bad[160];
    snprintf(bad, sizeof bad, "%s/open", g_dir);
    cr_assert_eq(mkdir(bad, 0700), 0);
    cr_assert_eq(chmod(bad, 0777), 0);
    run_result r = RUN("cache", "ls", "--dir", bad);
    EXPECT_STATUS(r, 1);
    cr_expect_eq(strncmp(r.err, "flashgen cache: ", 16), 0, "%s", r.err);
    cr_expect_not_null(strstr(r.err, bad), "the message names the directory: %s", r.err);
    run_free(&r);
}

/* ---------------------------------------------------------------- tune */

/* A one-problem space small enough for a quick sweep: 4 candidates, the two with block_m 64 and 8 warps
 * refused by validation. */
static const char tiny_space[] =
    "-- a tiny tuning space\n"
    "space { dtype = \"fp16\", head_dim = 64, gqa = 2, seqlen_q = 100, seqlen_k = 200, batch_heads = 8,\n"
    "        block_m = {64, 128}, block_n = 64, warps = {4, 8}, stages = 2 }\n";

/* Skips the calling test unless a CUDA driver and a device are present (err: scratch for the reason). */
#define REQUIRE_GPU(err)                                                                              \
    do {                                                                                             \
        const fg_cuda_api *req_cu_ = cuda_api_get(err);                                              \
        int req_count_ = 0;                                                                          \
        if (req_cu_ == NULL) SKIP("no CUDA device: %s", (err)->msg);                                 \
        if (req_cu_->cuDeviceGetCount(&req_count_) != CUDA_SUCCESS || req_count_ == 0)              \
            SKIP("a CUDA driver but no device");                                                     \
    } while (0)

/* Errors in the space, or a problem that cannot be laid out, are reported with file:line before any GPU
 * is needed (so they show on machines without one), and nothing is written. */
Test(cli, tune_reports_space_errors_with_file_line) {
    struct {
        const char *name, *text, *want1, *want2;
    } cases[] = {
        {"syntax.lua", "-- line 1\nspace { dtype = \"bf16\",\n  head_dim = = 64 }\n", "syntax.lua:3", NULL},
        {"field.lua", "space { dtype = \"bf16\", head_dim = 64, seqlen_q = 128, batch_heads = 4,\n"
                      "        block_n = 64, warps = 4, stages = 2 }\n", "field.lua:1", "block_m"},
        {"grid.lua", "\nspace { dtype = \"bf16\", head_dim = 64, seqlen_q = 128, batch_heads = 40000000,\n"
                     "        block_m = 64, block_n = 64, warps = 4, stages = 2 }\n", "grid.lua:2", "65535"},
        {"empty.lua", "-- nothing here\n", "empty.lua", "space"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[200], db[200];
        snprintf(path, sizeof path, "%s/%s", g_dir, cases[i].name);
        snprintf(db, sizeof db, "%s/db.lua", g_dir);
        write_text(path, cases[i].text);
        run_result r = RUN("tune", path, "--db", db);
        cr_expect_eq(r.status, 1, "%s: exit %d, stderr: %s", cases[i].name, r.status, r.err);
        cr_expect_eq(strncmp(r.err, "flashgen tune: ", 15), 0, "%s: %s", cases[i].name, r.err);
        cr_expect_not_null(strstr(r.err, cases[i].want1), "%s: stderr does not name %s: %s", cases[i].name,
                           cases[i].want1, r.err);
        if (cases[i].want2)
            cr_expect_not_null(strstr(r.err, cases[i].want2), "%s: stderr does not name %s: %s", cases[i].name,
                               cases[i].want2, r.err);
        cr_expect_null(strstr(r.err, "no CUDA device"), "%s: the space error must come first: %s", cases[i].name, r.err);
        cr_expect_str_empty(r.out);
        cr_expect_eq(file_exists(db), 0, "%s: a failed sweep wrote %s", cases[i].name, db);
        run_free(&r);
    }
    char missing[200];
    snprintf(missing, sizeof missing, "%s/absent.lua", g_dir);
    run_result r = RUN("tune", missing);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "absent.lua"), "%s", r.err);
    run_free(&r);
}

/* Returns 1 when dir holds an entry whose name starts with prefix (a missing dir holds none). */
static int dir_has_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) found |= strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return found;
}

/* FLASHGEN_EMULATE_ARCH (another arch's code, for tests) and a sweep do not mix: refused before any GPU is
 * looked for, with a sentence naming the variable, and nothing written. */
Test(cli, tune_refuses_an_emulated_arch) {
    char space[200];
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    write_text(space, tiny_space);
    setenv("FLASHGEN_EMULATE_ARCH", "80", 1);
    run_result r = RUN("tune", space, "--iters", "2");
    unsetenv("FLASHGEN_EMULATE_ARCH");
    EXPECT_STATUS(r, 1);
    cr_expect_eq(strncmp(r.err, "flashgen tune: FLASHGEN_EMULATE_ARCH=80 is set", 46), 0, "%s", r.err);
    cr_expect_str_empty(r.out);
    cr_expect_eq(dir_has_prefix(g_cache, "tune-"), 0, "no database may be written");
    run_free(&r);
}

Test(cli, tune_without_a_gpu_says_so) {
    fg_error err;
    if (cuda_api_get(&err) != NULL) SKIP("a CUDA driver is present: see tune_tiny_sweep_on_gpu");
    char space[200];
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    write_text(space, tiny_space);
    run_result r = RUN("tune", space, "--iters", "2");
    EXPECT_STATUS(r, 1);
    cr_expect_eq(strncmp(r.err, "flashgen tune: no CUDA device: ", 31), 0, "%s", r.err);
    cr_expect_str_empty(r.out);
    cr_expect_eq(dir_has_prefix(g_cache, "tune-"), 0, "no database may be written without a GPU");
    run_free(&r);
    /* --show without FILE means this GPU's database: it needs the GPU to know which. */
    r = RUN("tune", "--show");
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "flashgen tune: no CUDA device: "), "%s", r.err);
    run_free(&r);
}

/* A record of class c on sm_90, the mma.sync family on Hopper (tunedb rules: complete tiles, the class's
 * dtype/head_dim/mask). */
static fg_tune_record tune_rec(fg_tune_class c, int bm, int bn, int warps, fg_tune_status st, double ms, const char *note) {
    fg_tune_record r;
    memset(&r, 0, sizeof r);
    r.cls = c;
    r.spec = (fg_spec){FG_KIND_FWD, 90, 0, c.dtype, c.head_dim, bm, bn, warps, 2, c.causal, c.dtype, 0, 0};
    r.status = st;
    r.ms = ms;
    r.tflops = ms > 0 ? 100.0 / ms : 0;
    snprintf(r.note, sizeof r.note, "%s", note);
    return r;
}

/* Writes a database with records of every status into path. */
static void write_sample_db(const char *path) {
    fg_tune_identity id;
    tunedb_identity_init(&id, "NVIDIA H200", 90, 132, 13000, "13.0");
    fg_tunedb db;
    tunedb_init(&db, &id);
    fg_tune_class a = {FG_KIND_FWD, FG_DTYPE_BF16, 128, 0, 1, 2048, 2048, 128};
    fg_tune_class b = {FG_KIND_FWD, FG_DTYPE_BF16, 128, 1, 1, 8192, 8192, 32};
    fg_tune_record recs[] = {
        tune_rec(a, 128, 64, 8, FG_TUNE_OK, 1.25, "max err 0.002"),
        tune_rec(a, 128, 48, 4, FG_TUNE_OK, 0.75, "max err 0.002"),        /* the winner of a, and sm_90's default */
        tune_rec(a, 64, 64, 4, FG_TUNE_WRONG, 0.5, "check failed"),       /* faster, but wrong: never wins */
        tune_rec(a, 64, 64, 8, FG_TUNE_REFUSED, 0, "block_m 64 with 8 warps is not supported"),
        tune_rec(a, 128, 128, 4, FG_TUNE_SPILLED, 0, "spills 64 bytes"),
        tune_rec(b, 128, 64, 8, FG_TUNE_FAILED, 0, "cuLaunchKernel failed"),
        tune_rec(b, 128, 32, 4, FG_TUNE_OK, 9.5, ""),
    };
    fg_error err;
    fg_error_clear(&err);
    for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++)
        cr_assert_eq(tunedb_add(&db, &recs[i], &err), FG_OK, "%s", err.msg);
    cr_assert_eq(tunedb_save(path, &db, &err), FG_OK, "%s", err.msg);
    tunedb_free(&db);
}

/* --show FILE needs no GPU, prints exactly the library's table of the file, and marks the fastest ok
 * record of each class, never a faster record of another status. */
Test(cli, tune_show_prints_the_database_table) {
    char db[200];
    snprintf(db, sizeof db, "%s/tune.lua", g_dir);
    write_sample_db(db);

    /* What the table must be: tunedb_format_table of the same file. */
    fg_tunedb loaded;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    char *want = NULL;
    size_t want_len = 0;
    FILE *mem = open_memstream(&want, &want_len);
    cr_assert_not_null(mem);
    cr_assert_eq(tunedb_format_table(&loaded, mem, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(fclose(mem), 0);
    tunedb_free(&loaded);

    run_result r = RUN("tune", "--show", db);
    EXPECT_STATUS(r, 0);
    cr_expect_str_empty(r.err);
    cr_expect_str_eq(r.out, want);
    cr_expect_not_null(strstr(r.out, "NVIDIA H200"), "%s", r.out);
    const char *statuses[] = {"ok", "wrong", "failed", "spilled", "refused"};
    for (size_t i = 0; i < 5; i++) {
        char word[16];
        snprintf(word, sizeof word, " %s ", statuses[i]);
        cr_expect_not_null(strstr(r.out, word), "the table lacks a '%s' record:\n%s", statuses[i], r.out);
    }
    /* One '*' per class with an ok record: on the 0.75 ms record and the 9.5 ms one. */
    int stars = 0;
    for (const char *line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "  *", 3) != 0) continue;
        stars++;
        size_t n = strcspn(line, "\n");
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), line);
        cr_expect(strstr(buf, " ok ") != NULL, "the winner must be ok: %s", buf);
        cr_expect(strstr(buf, "0.7500") != NULL || strstr(buf, "9.5000") != NULL, "wrong winner: %s", buf);
    }
    cr_expect_eq(stars, 2, "expected two winners:\n%s", r.out);
    run_free(&r);

    /* --csv: a header and one line per record, the winners flagged in the dispatch column. */
    r = RUN("tune", "--show", db, "--csv");
    EXPECT_STATUS(r, 0);
    cr_expect_eq(strncmp(r.out, "gpu,kind,dtype,head_dim,causal,gqa,", 35), 0, "%s", r.out);
    int lines = 0;
    for (const char *p = r.out; *p; p++) lines += *p == '\n';
    cr_expect_eq(lines, 1 + 7, "%s", r.out);
    cr_expect_not_null(strstr(r.out, ",128,48,4,2,ok,0.75,133.333,1,1,\"max err 0.002\""), "%s", r.out);
    run_free(&r);

    /* The same through --db. */
    r = RUN("tune", "--show", "--db", db);
    EXPECT_STATUS(r, 0);
    cr_expect_str_eq(r.out, want);
    run_free(&r);
    free(want);
}

Test(cli, tune_show_refuses_a_corrupt_or_missing_file) {
    char db[200], cut[200];
    snprintf(db, sizeof db, "%s/tune.lua", g_dir);
    snprintf(cut, sizeof cut, "%s/cut.lua", g_dir);
    write_sample_db(db);

    /* A syntax error: the reason with file:line. */
    char bad[200];
    snprintf(bad, sizeof bad, "%s/bad.lua", g_dir);
    write_text(bad, "tuning { format = 1, results = 1,\n  gpu = { name = \"NVIDIA H200\" \n");
    run_result r = RUN("tune", "--show", bad);
    EXPECT_STATUS(r, 1);
    cr_expect_str_empty(r.out);
    cr_expect_eq(strncmp(r.err, "flashgen tune: ", 15), 0, "%s", r.err);
    cr_expect_not_null(strstr(r.err, "bad.lua:"), "the reason names file:line: %s", r.err);
    run_free(&r);

    /* The saved file without its last line: fewer results than the header says. */
    size_t len;
    char *text = slurp(db, &len);
    cr_assert_gt(len, 2u);
    size_t keep = len - 1;
    while (keep > 0 && text[keep - 1] != '\n') keep--;
    text[keep] = '\0';
    write_text(cut, text);
    free(text);
    r = RUN("tune", "--show", cut);
    EXPECT_STATUS(r, 1);
    cr_expect_str_empty(r.out);
    cr_expect_not_null(strstr(r.err, "cut.lua"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "result"), "the reason is the result count: %s", r.err);
    run_free(&r);

    char missing[200];
    snprintf(missing, sizeof missing, "%s/absent.lua", g_dir);
    r = RUN("tune", "--show", missing);
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "no tuning database at "), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "absent.lua"), "%s", r.err);
    run_free(&r);
}

/* With a GPU: writes `text` to DIR/NAME.lua and tunes it into DIR/NAME-db.lua (db, n bytes) with 3 iterations
 * and 2 compile threads; the run must succeed, and its output goes back to the caller to check. */
static run_result tune_tiny(const char *name, const char *text, char *db, size_t n) {
    char space[200];
    snprintf(space, sizeof space, "%s/%s.lua", g_dir, name);
    snprintf(db, n, "%s/%s-db.lua", g_dir, name);
    write_text(space, text);
    run_result r = RUN("tune", space, "--db", db, "--iters", "3", "-j", "2");
    EXPECT_STATUS(r, 0);
    return r;
}

/* With a GPU: a tiny sweep records every candidate, the database loads and answers tunedb_best, a second
 * run resumes (measures nothing again), and a corrupt database is moved aside, never overwritten. */
Test(cli, tune_tiny_sweep_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char db[200], space[200];
    run_result r = tune_tiny("tiny", tiny_space, db, sizeof db);
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    cr_expect_not_null(strstr(r.err, "[4/4]"), "progress reaches 4/4:\n%s", r.err);
    cr_expect_not_null(strstr(r.out, "'*' marks"), "the table is printed:\n%s", r.out);
    run_free(&r);
    fg_tunedb loaded;
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4, "every candidate is recorded, refused ones too");
    int refused = 0, ok = 0;
    for (int i = 0; i < loaded.count; i++) {
        refused += loaded.records[i].status == FG_TUNE_REFUSED;
        ok += loaded.records[i].status == FG_TUNE_OK;
    }
    cr_expect_eq(refused, 1, "block_m 64 with 8 warps is refused");
    cr_expect_geq(ok, 1, "at least one candidate is correct and timed");
    fg_tune_class q = {FG_KIND_FWD, FG_DTYPE_F16, 64, 0, 2, 100, 200, 8};
    fg_spec best;
    cr_expect_eq(tunedb_best(&loaded, &q, &best, NULL, NULL, 0), FG_OK, "the sweep's winner answers the lookup");
    tunedb_free(&loaded);

    /* Resume: everything is in the database already. */
    r = RUN("tune", space, "--db", db, "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "4 already measured"), "%s", r.err);
    run_free(&r);

    /* A corrupt database is moved aside to FILE.bad-<time>, and a new one made. */
    write_text(db, "tuning { format = \n");
    r = RUN("tune", space, "--db", db, "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "moved it aside to "), "%s", r.err);
    cr_expect(dir_has_prefix(g_dir, "tiny-db.lua.bad-"), "the corrupt file is kept aside");
    run_free(&r);
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4);
    tunedb_free(&loaded);
}

/* A kind = "bwd" space: the backward's candidates checked (every gradient element against the CPU references on
 * a small problem of the class) and timed, a refused tile recorded with its rule, the records of kind "bwd";
 * and fg_attention_bwd on a context that reads the database runs the winner's tiles (fg_explain_bwd says so). */
static const char tiny_bwd_space[] =
    "space { kind = \"bwd\", dtype = \"bf16\", head_dim = 64, causal = true, gqa = 2, seqlen_q = 300, seqlen_k = 200,\n"
    "        batch_heads = 8, block_m = {32, 64}, block_n = 64, warps = {4, 8}, stages = {1, 2} }\n";

Test(cli, tune_tiny_backward_sweep_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char db[200];
    run_result r = tune_tiny("tiny-bwd", tiny_bwd_space, db, sizeof db);
    cr_expect_not_null(strstr(r.err, "timing the backward at batch"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "[8/8]"), "progress reaches 8/8:\n%s", r.err);
    run_free(&r);
    fg_tunedb loaded;
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 8, "every candidate is recorded, refused ones too");
    int refused = 0, ok = 0, checked = 0;
    for (int i = 0; i < loaded.count; i++) {
        const fg_tune_record *rec = &loaded.records[i];
        cr_expect_eq(rec->cls.kind, FG_KIND_BWD);
        refused += rec->status == FG_TUNE_REFUSED;
        ok += rec->status == FG_TUNE_OK;
        checked += rec->status == FG_TUNE_OK && strstr(rec->note, "gradients checked") != NULL;
    }
    cr_expect_eq(refused, 2, "32 x 64 on 8 warps (8 keys a warp, 32 rows) is refused by the backward's rules, both stages");
    cr_expect_geq(ok, 1, "at least one candidate is correct and timed");
    cr_expect_eq(checked, ok, "every timed candidate was checked first");
    fg_tune_class q = {FG_KIND_BWD, FG_DTYPE_BF16, 64, 1, 2, 300, 200, 8};
    fg_spec best;
    cr_assert_eq(tunedb_best(&loaded, &q, &best, NULL, NULL, 0), FG_OK, "the sweep's winner answers the lookup");
    tunedb_free(&loaded);
    /* Dispatch: a context reading the database runs the winner's tiles for a call of the class (the mma.sync
     * kernel: FLASHGEN_WGMMA_BWD=0, else Hopper's sm_90a backward takes head_dim 64). Tensor data may be NULL
     * for fg_explain_bwd. */
    setenv("FLASHGEN_WGMMA_BWD", "0", 1);
    fg_context_options opt;
    fg_context_options_init(&opt);
    opt.tuning_db = db;
    opt.disable_disk_cache = 1;
    fg_context *ctx = NULL;
    cr_assert_eq(fg_context_create(&ctx, &opt), FG_OK, "%s", fg_last_error(NULL));
    unsetenv("FLASHGEN_WGMMA_BWD");
    fg_tensor t[9];
    const int64_t shapes[9][4] = {{1, 300, 8, 64}, {1, 200, 4, 64}, {1, 200, 4, 64}, {1, 300, 8, 64}, {1, 300, 8, 64},
                                  {1, 300, 8, 64}, {1, 200, 4, 64}, {1, 200, 4, 64}, {1, 8, 300, 0}};
    for (int i = 0; i < 9; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].dtype = i == 8 ? FG_DTYPE_F32 : FG_DTYPE_BF16;
        t[i].ndim = i == 8 ? 3 : 4;
        int64_t stride = 1;
        for (int k = t[i].ndim - 1; k >= 0; k--) t[i].shape[k] = shapes[i][k], t[i].stride[k] = stride, stride *= shapes[i][k];
    }
    fg_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = t[0], a.k = t[1], a.v = t[2], a.o = t[3], a.dout = t[4], a.dq = t[5], a.dk = t[6], a.dv = t[7], a.lse = t[8];
    a.causal = 1;
    char text[2048], want[64];
    cr_assert_eq(fg_explain_bwd(ctx, &a, text, sizeof text), FG_OK, "%s", fg_last_error(ctx));
    snprintf(want, sizeof want, "block_m=%d,block_n=%d,", best.block_m, best.block_n);
    cr_expect_not_null(strstr(text, want), "the tuned winner (%s warps %d stages %d): %s", want, best.warps, best.stages,
                       text);
    snprintf(want, sizeof want, "stages=%d,", best.stages);
    cr_expect_not_null(strstr(text, want), "%s", text);
    cr_expect_not_null(strstr(text, "tiles: the tuning database's winner"), "%s", text);
    fg_context_destroy(ctx);
}

/* --device all: one worker process per GPU (on a one-GPU machine, one worker), each writing its own part
 * file that the parent merges into the model's database and removes; the table is printed once. A part
 * left by a killed run is merged before the workers start, so its records are not measured again. */
Test(cli, tune_device_all_merges_worker_parts_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char space[200], db[200], part[240];
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    snprintf(db, sizeof db, "%s/multi-db.lua", g_dir);
    write_text(space, tiny_space);

    run_result r = RUN("tune", space, "--device", "all", "--db", db, "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "[gpu 0] "), "worker lines carry their GPU:\n%s", r.err);
    cr_expect_not_null(strstr(r.err, "merged the workers' "), "%s", r.err);
    const char *table = strstr(r.out, "'*' marks");
    cr_expect(table && !strstr(table + 1, "'*' marks"), "the table is printed once, by the parent:\n%s", r.out);
    run_free(&r);
    cr_expect_eq(dir_has_prefix(g_dir, "multi-db.lua.gpu"), 0, "the part files are removed after the merge");
    fg_tunedb loaded;
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4, "every candidate is recorded in the model's database");

    /* A part left behind (as by a killed run): its records are merged first, and count as measured. */
    snprintf(part, sizeof part, "%s.gpu7.part", db);
    cr_assert_eq(tunedb_save(part, &loaded, &err), FG_OK, "%s", err.msg);
    tunedb_free(&loaded);
    write_text(db, "tuning { format = \n"); /* and the database itself corrupt: moved aside, rebuilt from the part */
    r = RUN("tune", space, "--device", "0", "--device", "all", "--db", db, "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "merged 4 records left by an earlier run"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "4 already measured"), "%s", r.err);
    run_free(&r);
    cr_expect_eq(dir_has_prefix(g_dir, "multi-db.lua.gpu"), 0);
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4);
    tunedb_free(&loaded);
}

/* Ctrl-C mid-sweep: the current candidate finishes, what was measured is saved, exit 1; the same
 * command resumes without measuring those again, and --budget stops a sweep early with exit 0. */
Test(cli, tune_interrupt_saves_and_resumes_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char space[200], db[200];
    snprintf(space, sizeof space, "%s/six.lua", g_dir);
    snprintf(db, sizeof db, "%s/six-db.lua", g_dir);
    /* 6 problems x 4 candidates; one compile takes about a second on one thread, so the signal lands
     * after some problems are done and before all are. */
    write_text(space, "space { dtype = \"bf16\", head_dim = {32, 64, 96}, causal = {false, true}, seqlen_q = 256,\n"
                      "        batch_heads = 8, block_m = {64, 128}, block_n = {32, 64}, warps = 4, stages = 2 }\n");
    pid_t pid = start_run(NULL, (const char *const[]){"tune", space, "--db", db, "-j", "1", "--iters", "2", NULL});
    sleep(4);
    cr_assert_eq(kill(pid, SIGINT), 0);
    run_result r = finish_run(pid);
    int total = 24, saved = 0;
    if (r.status == 0) { /* finished before the signal: nothing to resume; the test says so */
        cr_log_warn("the sweep finished within 4 s; the interrupt was not exercised");
    } else {
        EXPECT_STATUS(r, 1);
        cr_expect_not_null(strstr(r.err, "interrupted; "), "%s", r.err);
        fg_tunedb part;
        cr_assert_eq(tunedb_load(db, NULL, &part, &err), FG_OK, "the database is saved on interrupt: %s", err.msg);
        saved = part.count;
        tunedb_free(&part);
        cr_expect(saved > 0 && saved < total, "saved %d of %d", saved, total);
    }
    run_free(&r);

    r = RUN("tune", space, "--db", db, "--iters", "2", "--budget", "1");
    EXPECT_STATUS(r, 0);
    char want[64];
    snprintf(want, sizeof want, "%d already measured", saved);
    cr_expect_not_null(strstr(r.err, want), "the resumed sweep skips what was saved:\n%s", r.err);
    run_free(&r);
    r = RUN("tune", space, "--db", db, "--iters", "2");
    EXPECT_STATUS(r, 0);
    run_free(&r);
    fg_tunedb all;
    cr_assert_eq(tunedb_load(db, NULL, &all, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(all.count, total);
    tunedb_free(&all);
}

/* Two workers dealing a space's problems and merging into one database: on a one-GPU machine both run
 * on device 0 (FLASHGEN_TUNE_SHARE_DEVICE=1, the test hook that allows a device twice). */
Test(cli, tune_two_workers_deal_problems_and_merge_on_gpu, .timeout = 300) {
    fg_error err;
    fg_error_clear(&err);
    REQUIRE_GPU(&err);
    char space[200], db[200];
    snprintf(space, sizeof space, "%s/two.lua", g_dir);
    snprintf(db, sizeof db, "%s/two-db.lua", g_dir);
    write_text(space, "space { dtype = \"bf16\", head_dim = 64, seqlen_q = {100, 300}, batch_heads = 8,\n"
                      "        block_m = {64, 128}, block_n = 64, warps = 4, stages = 2 }\n");
    setenv("FLASHGEN_TUNE_SHARE_DEVICE", "1", 1);
    run_result r = RUN("tune", space, "--device", "0,0", "--db", db, "--iters", "2");
    unsetenv("FLASHGEN_TUNE_SHARE_DEVICE");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.err, "this worker: every 2nd problem from number 1"), "worker 0 takes problem 1:\n%s",
                       r.err);
    cr_expect_not_null(strstr(r.err, "this worker: every 2nd problem from number 2"), "worker 1 takes problem 2:\n%s",
                       r.err);
    cr_expect_not_null(strstr(r.err, "2 workers started"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "merged the workers' "), "%s", r.err);
    run_free(&r);
    cr_expect_eq(dir_has_prefix(g_dir, "two-db.lua.gpu"), 0, "the part files are removed after the merge");
    fg_tunedb loaded;
    cr_assert_eq(tunedb_load(db, NULL, &loaded, &err), FG_OK, "%s", err.msg);
    cr_expect_eq(loaded.count, 4, "both problems' two candidates are in the merged database");
    tunedb_free(&loaded);
}

/* --device takes an ordinal, a list or all; --csv goes with --show; --shard is one worker's. */
Test(cli, tune_device_and_csv_usage_errors) {
    static const struct {
        const char *args[4];
        const char *says;
    } cases[] = {
        {{"--device", "0,0", NULL}, "device 0 is listed twice"},
        {{"--device", "1,x", NULL}, "expected an ordinal (0-1023), a list such as 0,2,3, or all"},
        {{"--device", "-1", NULL}, "expected an ordinal"},
        {{"--csv", NULL}, "--csv is a form of --show"},
        {{"--shard", "2/2", NULL}, "--shard '2/2': expected K/N with 0 <= K < N"},
        {{"--shard", "0/2", "--device", "all"}, "--shard is for one worker of a sweep: one --device"},
    };
    char space[200];
    snprintf(space, sizeof space, "%s/tiny.lua", g_dir);
    write_text(space, tiny_space);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[8] = {"tune", space};
        int n = 2;
        for (int k = 0; k < 4 && cases[i].args[k]; k++) argv[n++] = cases[i].args[k];
        argv[n] = NULL;
        run_result r = run(argv);
        EXPECT_STATUS(r, 2);
        cr_expect_not_null(strstr(r.err, cases[i].says), "case %zu: %s", i, r.err);
        run_free(&r);
    }
    run_result r = RUN("tune", "--show", "--device", "0,1", "x.lua");
    EXPECT_STATUS(r, 2);
    cr_expect_not_null(strstr(r.err, "--show takes one --device"), "%s", r.err);
    run_free(&r);
}
