/* cli_harness.h: what the `flashgen` program's test programs (test_cli, test_cli_bundle, test_cli_gpu,
 * test_cli_tune) share (cli_harness.c): a scratch directory per test (g_dir, with g_cache for
 * FLASHGEN_CACHE_DIR), running build/flashgen (or $FLASHGEN_BIN) with its stdout and stderr captured, reading
 * and writing files, a small two-variant config and a mod file.
 * Each program declares TestSuite(cli, .init = scratch_init, .fini = scratch_fini). */
#ifndef FG_TESTS_CLI_HARNESS_H
#define FG_TESTS_CLI_HARNESS_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <sys/types.h>

extern char g_dir[64];
extern char g_cache[128];

/* Criterion .init: a fresh scratch directory per test, so tests may run in parallel. */
void scratch_init(void);

/* Criterion .fini: removes the scratch directory (only ever one of ours). */
void scratch_fini(void);

/* Criterion does not run .fini for a skipped test: remove the scratch directory, then skip. */
#define SKIP(...)                                                                                   \
    do {                                                                                            \
        scratch_fini();                                                                             \
        cr_skip_test(__VA_ARGS__);                                                                  \
    } while (0)

/* Skips the calling test unless a CUDA driver and a device are present (err: scratch for the reason; the
 * including file brings runtime/cuda_api.h). */
#define REQUIRE_GPU(err)                                                                                    \
    do {                                                                                                   \
        const fg_cuda_api *req_cu_ = cuda_api_get(err);                                                    \
        int req_count_ = 0;                                                                                \
        if (req_cu_ == NULL) SKIP("no CUDA device: %s", (err)->msg);                                       \
        if (req_cu_->cuDeviceGetCount(&req_count_) != CUDA_SUCCESS || req_count_ == 0)                    \
            SKIP("a CUDA driver but no device");                                                           \
    } while (0)

/* What one run of the program did. */
typedef struct run_result {
    int status;   /* exit status, or 128 + signal when killed */
    char *out;    /* captured stdout (NUL-terminated, caller frees with run_free) */
    char *err;    /* captured stderr */
} run_result;

/* Reads a whole file as a string (asserting on failure). */
char *slurp(const char *path, size_t *len_out);

/* Writes a string to a file (asserting on failure). */
void write_text(const char *path, const char *text);

/* Starts flashgen with the NULL-terminated argument list args (not counting argv[0]), stdout and stderr
 * going to g_dir/stdout and g_dir/stderr, FLASHGEN_CACHE_DIR set to cache_dir (g_cache when NULL).
 * Returns the child's pid; finish_run collects it. */
pid_t start_run(const char *cache_dir, const char *const *args);

/* Waits for the child started by start_run and collects its exit status and output. */
run_result finish_run(pid_t pid);

/* Runs flashgen to completion with FLASHGEN_CACHE_DIR set to cache_dir (g_cache when NULL). */
run_result run_with_cache(const char *cache_dir, const char *const *args);

/* Runs flashgen with the test's cache directory. */
run_result run(const char *const *args);

/* RUN("gen", "--help"): runs flashgen with those arguments (the NULL terminator is added). */
#define RUN(...) run((const char *const[]){__VA_ARGS__, NULL})

/* Frees the captured output of a run. */
void run_free(run_result *r);

/* Asserts the exit status, showing both streams when it is wrong. */
#define EXPECT_STATUS(r, want)                                                                               \
    cr_assert_eq((r).status, (want), "exit status %d, expected %d\n--- stdout:\n%.2000s\n--- stderr:\n%.2000s", \
                 (r).status, (want), (r).out, (r).err)

/* Counts the lines of text (each ending in '\n'). */
int count_lines(const char *text);

/* Returns 1 when `line` is one of the newline-terminated lines of text. */
int has_line(const char *text, const char *line);

/* A two-variant config: sm_80 fp16 and bf16 at head_dim 64 with explicit tiles (for list and bundle), and the
 * canonical names of its variants in name order. */
extern const char two_variants[];
extern const char *const two_names[2];

/* The canonical name of a partial spec once the default tile policy has filled it, into name
 * (FG_SPEC_NAME_MAX bytes). */
void canonical(const char *partial, char *name);

/* The serving variant the mod tests give the mod: the spec without tiles and mod, as gen takes it. */
extern const char alibi_variant[];
/* Writes a score mod (ALiBi, the slopes an aux array "slope" of f32, rank 1) to g_dir/alibi.lua: its path into
 * path (160 bytes), the id the tracer gives it into id (17 bytes), and the canonical name of alibi_variant with
 * it, tiles from the default policy, into name (FG_SPEC_NAME_MAX bytes); this process does not register it. */
void write_alibi_mod(char *path, char *id, char *name);

/* Returns 1 when anything (a file, a link) exists at path. */
int file_exists(const char *path);

#endif
