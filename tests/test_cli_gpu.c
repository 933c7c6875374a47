/* test_cli_gpu.c: the `flashgen` program's run and explain (tools/cli_gpu.c, with the model variants of
 * tools/cli_variants.c), info and cache (tools/cmd_info.c) commands, run as a user runs it through
 * cli_harness.c. Tests that need a GPU skip without one. */
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
#include "runtime/dispatch.h" /* serving_check_variants: the library's sentences the CLI must repeat */
#include "generator/emit.h"
#include "generator/spec.h"
#include "runtime/tunedb.h"
#include "tests/test_util.h"
#include "tests/cli_harness.h"

TestSuite(cli, .init = scratch_init, .fini = scratch_fini, .timeout = 60);

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
    cr_expect_not_null(strstr(r.err, "pass --arch sm_90a"), "the hint to explain for an arch:\n%s", r.err);
    run_free(&r);
    r = RUN("explain", "--bwd", "--iters", "3", "--seed", "1");
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "pass --arch sm_90a"), "explain takes run's options:\n%s", r.err);
    run_free(&r);
}

/* ---------------------------------------------------------------- explain --arch: no GPU needed */

Test(cli, explain_arch_without_a_gpu) {
    /* sm_90a, bf16, head_dim 128, causal: the wgmma family's forward variant (the arch's defaults). */
    run_result r = RUN("explain", "--arch", "sm_90a", "--dtype", "bf16", "--head-dim", "128", "--causal");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "variant arch=sm_90a,"), "%s%s", r.out, r.err);
    cr_expect_not_null(strstr(r.out, "causal=1"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "kind=fwd"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "head_dim=128"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "  assumed: "), "what it assumed is said:\n%s", r.out);
    run_free(&r);
    /* sm_80: the mma.sync family, named for sm_80. */
    r = RUN("explain", "--arch", "sm_80", "--head-dim", "64", "--iters", "5", "--seed", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "variant arch=sm_80,"), "%s%s", r.out, r.err);
    cr_expect_not_null(strstr(r.out, "kind=fwd"), "%s", r.out);
    run_free(&r);
    /* FP8 on sm_80: the fp8_arch rule's sentence, exit 1. */
    r = RUN("explain", "--arch", "sm_80", "--dtype", "e4m3");
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "flashgen explain: dtype e4m3 needs sm_89 or newer"), "%s", r.err);
    cr_expect_eq(r.out[0], '\0', "nothing explained:\n%s", r.out);
    run_free(&r);
    /* An arch flashgen does not target: the arch_known rule's sentence. */
    r = RUN("explain", "--arch", "sm_75");
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "arch sm_75 is not a target flashgen knows"), "%s", r.err);
    run_free(&r);
}

Test(cli, explain_arch_bwd_without_a_gpu) {
    /* sm_90 (no 'a'): the mma.sync backward with its TMA loads, as dispatch takes them on sm_90 by default. */
    run_result r = RUN("explain", "--bwd", "--arch", "sm_90", "--head-dim", "128");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "variant arch=sm_90,"), "%s%s", r.out, r.err);
    cr_expect_not_null(strstr(r.out, "kind=bwd"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "tma=1"), "%s", r.out);
    run_free(&r);
    /* sm_90a: the sm_90a backward at head_dim 128 (its 80-query block for 1024 queries). */
    r = RUN("explain", "--bwd", "--arch", "sm_90a", "--head-dim", "128");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "variant arch=sm_90a,block_m=80,"), "%s%s", r.out, r.err);
    cr_expect_not_null(strstr(r.out, "kind=bwd"), "%s", r.out);
    run_free(&r);
    /* sm_80: no TMA loads. */
    r = RUN("explain", "--bwd", "--arch", "sm_80", "--head-dim", "64", "--causal");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "variant arch=sm_80,"), "%s%s", r.out, r.err);
    cr_expect_not_null(strstr(r.out, "kind=bwd"), "%s", r.out);
    cr_expect_null(strstr(r.out, "tma=1"), "%s", r.out);
    run_free(&r);
    /* --bwd is 16-bit. */
    r = RUN("explain", "--bwd", "--arch", "sm_90a", "--dtype", "e4m3");
    EXPECT_STATUS(r, 2);
    cr_expect_not_null(strstr(r.err, "--bwd takes --dtype fp16 or bf16"), "%s", r.err);
    run_free(&r);
    /* The model variants' serving calls are chosen on the device: --arch takes none of them. */
    r = RUN("explain", "--arch", "sm_90a", "--window", "8,0");
    EXPECT_STATUS(r, 2);
    cr_expect_not_null(strstr(r.err, "flashgen explain: --arch explains fg_attention_fwd and fg_attention_bwd"), "%s",
                       r.err);
    cr_expect_not_null(strstr(r.err, "--window runs through the serving calls"), "%s", r.err);
    cr_expect_str_empty(r.out);
    run_free(&r);
}

Test(cli, run_small_problem_on_gpu, .timeout = 120) {
    fg_error err;
    REQUIRE_GPU(&err);
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

/* ---------------------------------------------------------------- the model variants */

/* A causal sliding window with a softcap that bends N(0, 1) logits (GQA, sq < sk), then both sides bounded
 * without the causal mask: fg_attention_fwd_varlen runs them, checked against the CPU reference of the same
 * variants; explain names the serving call's variant. */
Test(cli, run_window_softcap_on_gpu, .timeout = 300) {
    fg_error err;
    REQUIRE_GPU(&err);
    run_result r = RUN("run", "--dtype", "bf16", "--batch", "2", "--seqlen-q", "200", "--seqlen-k", "333", "--heads", "4",
                       "--heads-kv", "2", "--head-dim", "128", "--causal", "--window", "64,0", "--softcap", "2",
                       "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, ", causal, window (64, 0), softcap 2\n"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "window=1"), "the serving variant is explained:\n%s", r.out);
    cr_expect_not_null(strstr(r.out, "softcap=1"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "check: PASS"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "TFLOP/s"), "%s", r.out);
    run_free(&r);
    r = RUN("run", "--dtype", "fp16", "--batch", "1", "--seqlen-q", "257", "--heads", "4", "--head-dim", "64", "--window",
            "50,70", "--softcap", "5", "--iters", "2");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "check: PASS"), "%s", r.out);
    run_free(&r);
    r = RUN("explain", "--causal", "--window", "64,0", "--softcap", "2");
    EXPECT_STATUS(r, 0);
    cr_expect_eq(strncmp(r.out, "variant ", 8), 0, "fg_explain_varlen's text:\n%s", r.out);
    cr_expect_not_null(strstr(r.out, "window=1"), "%s", r.out);
    run_free(&r);
}

/* The backward with sinks: fg_attention_bwd_varlen on the packed form of the batch, after the packed forward;
 * dQ, dK, dV and dsink checked against the CPU references. */
Test(cli, run_sinks_bwd_on_gpu, .timeout = 300) {
    fg_error err;
    REQUIRE_GPU(&err);
    run_result r = RUN("run", "--bwd", "--dtype", "bf16", "--batch", "2", "--seqlen-q", "257", "--heads", "4",
                       "--heads-kv", "2", "--head-dim", "128", "--causal", "--sinks", "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "problem: backward, bf16"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "call: fg_attention_bwd_varlen"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "check: PASS"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "check dsink: PASS"), "%s", r.out);
    run_free(&r);
    r = RUN("explain", "--bwd", "--sinks", "--head-dim", "64");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "fg_attention_bwd_varlen"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "workspace: "), "%s", r.out);
    run_free(&r);
}

/* ALiBi and sinks with a top-left causal mask, more queries than keys (rows that see no key: O = 0, LSE = the
 * sink). */
Test(cli, run_alibi_top_left_on_gpu, .timeout = 300) {
    fg_error err;
    REQUIRE_GPU(&err);
    run_result r = RUN("run", "--dtype", "fp16", "--batch", "2", "--seqlen-q", "300", "--seqlen-k", "200", "--heads", "6",
                       "--heads-kv", "3", "--head-dim", "64", "--causal", "--causal-top-left", "--alibi", "--sinks",
                       "--iters", "2");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "alibi=1"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "sinks=1"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "check: PASS"), "%s", r.out);
    run_free(&r);
}

/* V of its own head dim (192 / 128, DeepSeek's): prefill-sized and decode-sized calls. */
Test(cli, run_head_dim_v_on_gpu, .timeout = 300) {
    fg_error err;
    REQUIRE_GPU(&err);
    run_result r = RUN("run", "--dtype", "bf16", "--batch", "2", "--seqlen-q", "300", "--heads", "4", "--head-dim", "192",
                       "--head-dim-v", "128", "--causal", "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "head_dim_v 128"), "the problem line:\n%s", r.out);
    cr_expect_not_null(strstr(r.out, "head_dim_v=128"), "the variant:\n%s", r.out);
    cr_expect_not_null(strstr(r.out, "check: PASS"), "%s", r.out);
    run_free(&r);
    r = RUN("run", "--dtype", "bf16", "--batch", "3", "--seqlen-q", "1", "--seqlen-k", "1000", "--heads", "8", "--heads-kv",
            "1", "--head-dim", "192", "--head-dim-v", "128", "--iters", "3");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "check: PASS"), "%s", r.out);
    run_free(&r);
}

/* What the library refuses of a serving call is refused before any device work, in its own words (exit 1); an
 * explain of the model variants names the device, not --arch, when there is none. */
Test(cli, variant_refusals_need_no_gpu) {
    fg_error want;
    fg_error_clear(&want);
    const variant_args top_left = {.causal = 0, .causal_top_left = 1};
    call_variants v;
    cr_assert_neq(serving_check_variants(&top_left, 16, 16, 0, &v, &want), FG_OK);
    const char *cmds[2] = {"run", "explain"};
    for (int i = 0; i < 2; i++) {
        run_result r = run((const char *const[]){cmds[i], "--causal-top-left", NULL});
        EXPECT_STATUS(r, 1);
        char line[1200];
        snprintf(line, sizeof line, "flashgen %s: %s\n", cmds[i], want.msg);
        cr_expect_str_eq(r.err, line);
        cr_expect_str_empty(r.out);
        run_free(&r);
    }
    run_result r = RUN("run", "--head-dim-v", "100", "--iters", "1");
    EXPECT_STATUS(r, 1);
    cr_expect_not_null(strstr(r.err, "flashgen run: v's head_dim 100 is not supported by serving calls"), "%s", r.err);
    run_free(&r);
    fg_error err;
    if (cuda_api_get(&err) == NULL) {
        r = RUN("explain", "--sinks");
        EXPECT_STATUS(r, 1);
        cr_expect_not_null(strstr(r.err, "no CUDA device: "), "%s", r.err);
        cr_expect_not_null(strstr(r.err, "explained on the device"), "not the --arch hint:\n%s", r.err);
        run_free(&r);
    }
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

/* Issue 37 item 5: `cache prune` applies --max-mb N, least recently used first; 0, from --max-mb or from
 * FLASHGEN_CACHE_MAX_MB, means no bound as it does for a compile (prune removed every entry), so only the
 * temporary files of killed writers go. ls, verify and info count the temporary file of a live writer. */
Test(cli, cache_prune_bounds_entries_and_counts_temporary_files) {
    const char *a = "arch=sm_80,block_m=64,block_n=64,causal=0,dtype=fp16,head_dim=64,kind=fwd,stages=2,warps=4";
    const char *b = "arch=sm_90,block_m=128,block_n=64,causal=1,dtype=bf16,head_dim=128,kind=fwd,stages=2,warps=8";
    put_entry(g_cache, a, (size_t)3 << 19); /* 1.5 MiB: past a 1 MiB bound alone */
    put_entry(g_cache, b, 5678);
    char entry_a[512], entry_b[512], live[256];
    find_entry(g_cache, a, entry_a, sizeof entry_a);
    find_entry(g_cache, b, entry_b, sizeof entry_b);
    const struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}}; /* a used long before b */
    cr_assert_eq(utimensat(AT_FDCWD, entry_a, old, 0), 0);
    snprintf(live, sizeof live, "%s/.tmp-%d-1-0-x.cubin", g_cache, (int)getpid()); /* this process writes it */
    write_text(live, "being written");
    setenv("FLASHGEN_CACHE_MAX_MB", "0", 1);
    run_result r = RUN("cache", "prune");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "removed 0 files") && strstr(r.out, "2 entries") && strstr(r.out, "no bound"),
                       "%s", r.out);
    run_free(&r);
    r = RUN("cache", "prune", "--max-mb", "0");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "2 entries") && strstr(r.out, "no bound"), "%s", r.out);
    run_free(&r);
    r = RUN("info");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "no bound") && strstr(r.out, "1 temporary file (13 bytes)"), "%s", r.out);
    run_free(&r);
    unsetenv("FLASHGEN_CACHE_MAX_MB");
    r = RUN("cache", "verify");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "2 good") && strstr(r.out, "1 temporary file (13 bytes)"), "%s", r.out);
    run_free(&r);
    r = RUN("cache", "prune", "--max-mb", "1");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "removed 1 file ") && strstr(r.out, "1 entries") && strstr(r.out, "bound 1 MiB"),
                       "%s", r.out);
    run_free(&r);
    cr_expect_eq(file_exists(entry_a), 0, "the least recently used entry was kept past the bound");
    cr_expect(file_exists(entry_b), "the recent entry was removed");
    cr_expect(file_exists(live), "a live writer's temporary file was removed");
    r = RUN("cache", "ls");
    EXPECT_STATUS(r, 0);
    cr_expect_not_null(strstr(r.out, "1 temporary file (13 bytes)"), "%s", r.out);
    run_free(&r);
}
