/* cli_harness.c: running the `flashgen` program for its tests (see cli_harness.h). */
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
#include "generator/mod.h"
#include "generator/spec.h"
#include "tests/cli_harness.h"
#include "tests/test_util.h"

char g_dir[64];    /* this test's scratch directory */
char g_cache[128]; /* g_dir/cache: FLASHGEN_CACHE_DIR of every run */

/* Criterion .init: a fresh scratch directory per test, so tests may run in parallel. */
void scratch_init(void) {
    test_scratch_make(g_dir, sizeof g_dir, "fg-test-cli");
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_dir);
}

/* Criterion .fini: removes the scratch directory (only ever one of ours). */
void scratch_fini(void) { test_scratch_remove(g_dir, "fg-test-cli"); }

/* Reads a whole file as a string (asserting on failure). */
char *slurp(const char *path, size_t *len_out) {
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
void write_text(const char *path, const char *text) {
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
pid_t start_run(const char *cache_dir, const char *const *args) {
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
        /* the signals the tests send act as they would from a terminal, even when the test command runs in
         * the background of a non-interactive shell (which starts it with SIGINT and SIGQUIT ignored) */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Waits for the child started by start_run and collects its exit status and output. */
run_result finish_run(pid_t pid) {
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
run_result run_with_cache(const char *cache_dir, const char *const *args) {
    return finish_run(start_run(cache_dir, args));
}

/* Runs flashgen with the test's cache directory. */
run_result run(const char *const *args) { return run_with_cache(NULL, args); }

/* Frees the captured output of a run. */
void run_free(run_result *r) {
    free(r->out);
    free(r->err);
}

/* Counts the lines of text (each ending in '\n'). */
int count_lines(const char *text) {
    int n = 0;
    for (; *text; text++) n += *text == '\n';
    return n;
}

/* Returns 1 when anything (a file, a link) exists at path. */
int file_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

int has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n') return 1;
    return 0;
}

const char alibi_variant[] = "kind=serve,arch=sm_90,dtype=bf16,head_dim=64";

const char two_variants[] =
    "-- two small variants\n"
    "variants { kind = \"fwd\", arch = \"sm_80\", dtype = {\"fp16\", \"bf16\"}, head_dim = 64,\n"
    "           block_m = 64, block_n = 64, warps = 4, stages = 2 }\n";
const char *const two_names[2] = {
    "arch=sm_80,block_m=64,block_n=64,causal=0,dtype=bf16,head_dim=64,kind=fwd,stages=2,warps=4",
    "arch=sm_80,block_m=64,block_n=64,causal=0,dtype=fp16,head_dim=64,kind=fwd,stages=2,warps=4",
};

void canonical(const char *partial, char *name) {
    fg_spec s;
    fg_error err;
    fg_tile_policy pol;
    cr_assert_eq(spec_parse(partial, &s, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(tile_policy_init_default(&pol, &err), FG_OK);
    cr_assert_eq(spec_fill_tiles(&s, &pol, &err), FG_OK, "%s", err.msg);
    tile_policy_free(&pol);
    cr_assert_gt(spec_format(&s, name, FG_SPEC_NAME_MAX), 0);
}

void write_alibi_mod(char *path, char *id, char *name) {
    snprintf(path, 160, "%s/alibi.lua", g_dir);
    write_text(path, "-- ALiBi, the slopes an aux array\n"
                     "aux = { slope = fg.aux(\"f32\", 1) }\n"
                     "score_mod = function(s, b, h, q, kv) return s - fg.load(slope, h) * fg.abs(q - kv) end\n");
    fg_mod m;
    fg_error err;
    cr_assert_eq(mod_trace_file(path, &m, &err), FG_OK, "%s", err.msg);
    mod_id(&m, id);
    char partial[128];
    snprintf(partial, sizeof partial, "%s,mod=%s", alibi_variant, id);
    canonical(partial, name);
}
