/* test_gpu_fp8.c: the GPU suite of the FP8 forward (e4m3 and e5m2 inputs; suite `fwd`, tests fp8*), judged
 * by the CPU reference, which rounds P to e4m3 as the kernel does (reference/reference.h): every head dim
 * FP8 takes, the sequence-length pairs, GQA, both output types, descales, saturation, the sm_90a family's
 * wide tiles, long key ranges, and O bitwise equal with and without the LSE. Without a GPU, or on one
 * without FP8 mma (below sm_89), every test skips with the reason. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashgen.h"
#include "reference/reference.h"
#include "tests/gpu_harness.h"

/* FP8 (e4m3, e5m2; sm_89 and newer): every head dim FP8 takes, the sequence-length pairs, GQA, both output
 * types, descales per tensor and per (batch, kv head), strided Q/K/O and padded V^T rows holding NaN, and
 * saturation (inputs scaled by 400 (e4m3) / 50000 (e5m2) and saturated, so about a quarter of them sit at
 * the format's largest finite value, with descales that undo the scale). The reference rounds P to e4m3 as
 * the kernel does (reference.h). Skipped with the reason on a GPU without FP8 mma. */
static fwd_case mk8(fg_dtype dt, int b, int sq, int sk, int hq, int hkv, int d, int causal, int descale) {
    fwd_case c = mk(dt, b, sq, sk, hq, hkv, d, causal);
    c.descale = descale;
    return c;
}
/* The FP8 case set; returns how many. */
static int fp8_cases(fwd_case *cases) {
    int n = 0;
    static const int dims[] = {32, 64, 96, 128, 160, 192, 256};
    for (size_t i = 0; i < NELEM(dims); i++) {
        cases[n++] = mk8(FG_DTYPE_E4M3, 2, 113, 203, 2, 2, dims[i], 0, 1);
        cases[n++] = mk8(FG_DTYPE_E5M2, 1, 203, 113, 2, 1, dims[i], 1, 2);
    }
    static const int sl[][2] = {{1, 1}, {1, 239}, {239, 1}, {128, 128}, {799, 3}, {1025, 1025}, {2048, 2048}};
    for (size_t i = 0; i < NELEM(sl); i++) {
        int big = (int64_t)sl[i][0] * sl[i][1] > 1100 * 1100;
        cases[n++] = mk8(FG_DTYPE_E4M3, big ? 1 : 2, sl[i][0], sl[i][1], big ? 1 : 2, 1, 128, 0, 2);
        cases[n++] = mk8(FG_DTYPE_E4M3, big ? 1 : 2, sl[i][0], sl[i][1], big ? 1 : 2, big ? 1 : 2, 64, 1, 1);
    }
    cases[n] = mk8(FG_DTYPE_E4M3, 2, 300, 257, 8, 2, 128, 1, 2); /* GQA 4, fp16 out */
    cases[n++].out_f16 = 1;
    cases[n] = mk8(FG_DTYPE_E5M2, 1, 300, 257, 4, 1, 64, 0, 0); /* MQA, no descales, strided */
    cases[n++].strided = 1;
    cases[n] = mk8(FG_DTYPE_E4M3, 2, 129, 77, 2, 2, 256, 0, 1); /* strided, fp16 out */
    cases[n].strided = 1;
    cases[n++].out_f16 = 1;
    cases[n] = mk8(FG_DTYPE_E4M3, 1, 200, 300, 2, 2, 128, 0, 1); /* saturation */
    cases[n++].amp = 400.f;
    cases[n] = mk8(FG_DTYPE_E5M2, 1, 200, 300, 2, 2, 64, 1, 1);
    cases[n++].amp = 50000.f;
    return n;
}
ParameterizedTestParameters(fwd, fp8) {
    static fwd_case cases[64];
    return cr_make_param_array(fwd_case, cases, (size_t)fp8_cases(cases));
}
/* On Hopper (unless FLASHGEN_WGMMA=0 or FLASHGEN_WGMMA_FP8=0) the head dims that are multiples of 64
 * must run on the sm_90a family (QGMMA), not fall back to mma.sync unseen; the others, and every case
 * under FLASHGEN_WGMMA=0 (bench/gpu_check.sh runs the suite so too), run the mma.sync family. */
ParameterizedTest(fwd_case *c, fwd, fp8, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    skip_without_fp8(&env);
    fwd_run r;
    run_setup(&env, &r, c);
    const int cc = gpu_cc(&env);
    int wgmma = !env_is_zero("FLASHGEN_WGMMA") && !env_is_zero("FLASHGEN_WGMMA_FP8");
    char why[2048];
    cr_assert_eq(fg_explain(env.ctx, &r.args, why, sizeof why), FG_OK, "%s", fg_last_error(env.ctx));
    int on_sm90a = strstr(why, "arch=sm_90a,") != NULL;
    int want = cc == 90 && wgmma && c->d % 64 == 0;
    cr_assert_eq(on_sm90a, want, "FP8 d %d should run the %s family: %s", c->d, want ? "sm_90a" : "mma.sync", why);
    run_launch(&env, &r);
    run_verify(&r);
    run_free(&env, &r);
    gpu_close(&env);
}

/* FP8 over long key ranges, with V's columns averaging 0 and 1: Hopper's FP8 tensor cores add into their
 * accumulator with about 14 bits kept, so a P.V product accumulated over every key block in them loses
 * the low bits of each block's contribution, most where the terms do not cancel (V's mean, the row sums).
 * The sm_90a kernel adds the product into an fp32 level of O, every 128-256 keys in registers up to
 * head_dim 128 (forward_wgmma.cuh FG_O_FLUSH), every 512 keys at most in shared memory above and with three
 * consumer warpgroups (FG_O_FLUSH_SMEM; flushing every 1024 keys fails these cases' bounds). */
ParameterizedTestParameters(fwd, fp8_long_keys) {
    static fwd_case cases[10];
    cases[0] = mk8(FG_DTYPE_E4M3, 1, 130, 16384, 2, 1, 64, 1, 1);
    cases[1] = mk8(FG_DTYPE_E4M3, 1, 200, 16384, 2, 2, 128, 0, 2);
    cases[2] = mk8(FG_DTYPE_E4M3, 1, 200, 16384, 2, 2, 128, 0, 1);
    cases[2].no_lse = 1;
    cases[3] = mk8(FG_DTYPE_E4M3, 1, 150, 16000, 2, 2, 128, 1, 1);
    cases[3].tiles[0] = 128, cases[3].tiles[1] = 96, cases[3].tiles[2] = 12, cases[3].tiles[3] = 2;
    cases[4] = mk8(FG_DTYPE_E4M3, 1, 130, 16384, 2, 2, 256, 0, 1);
    cases[5] = mk8(FG_DTYPE_E4M3, 1, 130, 32768, 1, 1, 64, 0, 1);
    cases[5].no_lse = 1;
    cases[6] = mk8(FG_DTYPE_E5M2, 1, 130, 16384, 2, 1, 128, 1, 1);
    for (int i = 0; i < 7; i++) cases[i].vmean = 1.f;
    cases[7] = mk8(FG_DTYPE_E4M3, 1, 130, 16384, 2, 2, 256, 1, 1); /* V of mean 0 */
    /* O's fp32 level in shared memory with one consumer warpgroup (d 192's policy 64 x 128) and with three
     * (d 64 192 x 128) */
    cases[8] = mk8(FG_DTYPE_E4M3, 1, 130, 16384, 2, 2, 192, 0, 1);
    cases[9] = mk8(FG_DTYPE_E4M3, 1, 200, 16384, 2, 2, 64, 1, 1);
    cases[9].tiles[0] = 192, cases[9].tiles[1] = 128, cases[9].tiles[2] = 16, cases[9].tiles[3] = 2;
    cases[8].vmean = cases[9].vmean = 1.f;
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, fp8_long_keys, .timeout = 300) {
    run_case(c); /* (run_case checks explicit sm_90a tiles first; run_launch skips them off sm_90) */
}

/* FP8 with and without the LSE: on sm_90a at head_dim 64/128 these are two instances of the kernel's tile
 * loop (forward_wgmma.cuh FG_PV_SUM: the fp32 row sums only for the LSE), which must give the same O, bit for
 * bit, and each pass the reference. Default tiles (d 64 causal, d 128 causal with sq > sk, d 128 e5m2 GQA)
 * and explicit ones: 128 x 96 and 128 x 64 (V^T chunks of 32 and 64 keys), one consumer warpgroup with
 * 3 stages, three with 4; lengths that are multiples of no tile; 12k-16k keys. Runs only where the sm_90a family does
 * (elsewhere the FP8 kernel has one tile loop, and the other FP8 tests cover it). */
ParameterizedTestParameters(fwd, fp8_lse_or_not) {
    static fwd_case cases[10];
    static const int t[4][4] = {{128, 96, 12, 2}, {128, 64, 12, 3}, {64, 128, 8, 3}, {192, 64, 16, 4}};
    cases[0] = mk8(FG_DTYPE_E4M3, 2, 300, 517, 4, 2, 64, 1, 1);
    cases[1] = mk8(FG_DTYPE_E4M3, 1, 517, 300, 2, 2, 128, 1, 2);
    cases[2] = mk8(FG_DTYPE_E5M2, 2, 300, 517, 4, 1, 128, 0, 1);
    cases[3] = mk8(FG_DTYPE_E5M2, 1, 333, 611, 2, 2, 128, 0, 1);
    cases[4] = mk8(FG_DTYPE_E4M3, 1, 611, 333, 2, 1, 128, 1, 2);
    cases[5] = mk8(FG_DTYPE_E4M3, 2, 333, 611, 2, 2, 128, 1, 1);
    cases[6] = mk8(FG_DTYPE_E4M3, 1, 611, 333, 4, 2, 64, 1, 2);
    for (int i = 0; i < 4; i++) memcpy(cases[3 + i].tiles, t[i], sizeof cases[0].tiles);
    /* Long key ranges: row sums accumulated over all of them in the tensor cores, whose FP8 accumulation
     * keeps about 14 bits, come out ~14% low at 8k keys; the kernel's must not. */
    cases[7] = mk8(FG_DTYPE_E4M3, 1, 200, 16384, 2, 1, 128, 0, 2);
    cases[8] = mk8(FG_DTYPE_E4M3, 1, 130, 12000, 2, 2, 64, 1, 1);
    cases[9] = mk8(FG_DTYPE_E4M3, 1, 150, 16000, 2, 2, 128, 1, 1);
    memcpy(cases[9].tiles, t[0], sizeof cases[0].tiles);
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, fp8_lse_or_not, .timeout = 300) {
    assert_sm90a_tiles_valid(c);
    gpu_env env;
    gpu_open(&env);
    skip_without_fp8(&env);
    const int cc = gpu_cc(&env);
    if (cc != 90 || env_is_zero("FLASHGEN_WGMMA") || env_is_zero("FLASHGEN_WGMMA_FP8")) {
        gpu_close(&env);
        cr_skip_test("the FP8 kernel has two tile loops only on the sm_90a family (this GPU: sm_%d%s)", cc,
                     cc == 90 ? ", with it turned off" : "");
    }
    fwd_run r;
    run_setup(&env, &r, c); /* with the LSE */
    char name[200], why[2048];
    case_name(&r.c, name, sizeof name);
    if (!c->tiles[0]) { /* explicit tiles of this shape run as sm_90a on an sm_90 device (run_launch) */
        cr_assert_eq(fg_explain(env.ctx, &r.args, why, sizeof why), FG_OK, "%s", fg_last_error(env.ctx));
        cr_assert(strstr(why, "arch=sm_90a,") != NULL, "%s: should run the sm_90a family: %s", name, why);
    }
    run_launch(&env, &r);
    run_verify(&r);
    const size_t bytes = (size_t)(r.o.span + r.o.guard) * r.o.esize;
    unsigned char *with_lse = malloc(bytes);
    cr_assert(with_lse);
    memcpy(with_lse, r.o.img, bytes);
    r.c.no_lse = 1; /* the same inputs, the LSE not asked for */
    memset(&r.args.lse, 0, sizeof r.args.lse);
    run_launch(&env, &r);
    run_verify(&r);
    size_t first = bytes;
    for (size_t i = 0; i < bytes && first == bytes; i++)
        if (with_lse[i] != r.o.img[i]) first = i;
    cr_assert_eq(first, bytes, "%s: O differs at byte %zu of %zu with and without the LSE", name, first, bytes);
    free(with_lse);
    run_free(&env, &r);
    gpu_close(&env);
}

/* The sm_90a FP8 tiles wider than one V^T swizzle row (V^T stored in chunks of 128, 64 or 32 keys,
 * spec_fp8_vt_bytes): d 64 with block_n 160 (5 chunks of 32), 192 (3 of 64), 224 (7 of 32), and d 128 with
 * block_n 96 (3 of 32; since the two-level accumulation d 128 takes nothing wider than 128); lengths that
 * are multiples of none, GQA, causal with sq > sk. Skipped where sm_90a cannot run. */
ParameterizedTestParameters(fwd, fp8_wide_tiles) {
    static fwd_case cases[8];
    static const int t[4][4] = {{128, 160, 12, 2}, {128, 192, 12, 2}, {128, 224, 12, 2}, {128, 96, 12, 3}};
    for (int i = 0; i < 4; i++) {
        const int d = i < 3 ? 64 : 128;
        cases[2 * i] = mk(i == 2 ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3, 2, 211, 533, 4, 2, d, 0);
        cases[2 * i + 1] = mk(FG_DTYPE_E4M3, 1, 533, 211, 2, 2, d, 1);
        memcpy(cases[2 * i].tiles, t[i], sizeof cases[0].tiles);
        memcpy(cases[2 * i + 1].tiles, t[i], sizeof cases[0].tiles);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, fp8_wide_tiles, .timeout = 300) {
    run_case(c);
}
