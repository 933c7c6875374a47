/* test_gpu_forward.c: the GPU suite of the forward pass in fp16 and bf16 (suite `fwd`), through the public
 * API (include/flashgen.h), judged by the CPU reference (reference/reference.h) with the tolerance rule
 * (docs/numerics.md): every head dim and sequence-length pair, tiles the policy does not choose, key
 * sub-blocks, NaN inputs, GQA, strided views, softmax scales, empty keys, grids of many tiles, bitwise
 * repeatability, a tensor over 2^31 elements, and bad arguments refused with a sentence and nothing
 * written. The FP8 forward is test_gpu_fp8.c's; the harness is gpu_harness.h's. Without a GPU every test
 * skips with the reason. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "flashgen.h"
#include "reference/reference.h"
#include "tests/gpu_harness.h"

/* ------------------------------------------------------------------------------------------------ */
/* The sweeps: each dimension covered with the others at modest values                               */
/* ------------------------------------------------------------------------------------------------ */

static const int head_dims[] = {32, 40, 64, 80, 96, 128, 160, 192, 224, 256};
static const int seqlens[][2] = {{1, 1},       {1, 239},     {239, 1},     {113, 203},
                                 {128, 128},   {200, 200},   {799, 3},     {1023, 1024},
                                 {1024, 1023}, {1025, 1025}, {2048, 2048}, {4224, 4224}};

/* Tiles the tile policy does not choose on every GPU, which the tuner may: block_n that are multiples
 * of 16 but not powers of two, 64-row and 2-stage tiles, 4 stages. Each runs on query and key lengths
 * that are multiples of none of its tile sizes, causal with sq < sk and sq > sk (fully masked rows). */
static const struct { int d, tiles[4]; } tile_variants[] = {
    {64, {64, 96, 4, 3}},  {64, {128, 112, 4, 2}}, {64, {64, 48, 4, 4}},  {96, {128, 80, 8, 2}},
    {128, {128, 48, 4, 3}}, {128, {64, 96, 4, 2}}, {128, {128, 80, 8, 2}}, {192, {128, 112, 8, 2}},
    {256, {128, 80, 8, 2}}, {256, {128, 48, 8, 3}},
    /* one stage (K and V in one buffer each, loading in turn): whole blocks and, at d 128 128 x 64 on 4
     * warps, two 32-key sub-blocks */
    {256, {64, 64, 4, 1}},  {128, {128, 64, 4, 1}}, {64, {64, 48, 4, 1}},
    /* the sm_90a (wgmma) family: 1, 2 and 3 consumer warpgroups, 64-byte swizzled tiles (head_dim 32,
     * 96, 160: not multiples of 64), block_n up to 176, 3 stages; skipped where sm_90a cannot run */
    {32, {128, 128, 12, 2}}, {64, {64, 96, 8, 3}},    {96, {128, 112, 12, 2}}, {128, {192, 64, 16, 2}},
    {128, {128, 176, 12, 2}}, {160, {128, 64, 12, 3}}, {256, {64, 64, 8, 2}},
};
ParameterizedTestParameters(fwd, tiles) {
    static fwd_case cases[3 * NELEM(tile_variants)];
    for (size_t i = 0; i < NELEM(tile_variants); i++) {
        int d = tile_variants[i].d;
        cases[3 * i] = mk(FG_DTYPE_BF16, 2, 211, 333, 2, 1, d, 0);
        cases[3 * i + 1] = mk(FG_DTYPE_F16, 1, 211, 333, 2, 2, d, 1);
        cases[3 * i + 2] = mk(FG_DTYPE_BF16, 1, 333, 211, 2, 2, d, 1);
        for (int j = 0; j < 3; j++)
            memcpy(cases[3 * i + j].tiles, tile_variants[i].tiles, sizeof cases[0].tiles);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, tiles, .timeout = 300) {
    run_case(c);
}

/* mma.sync tiles whose S does not fit beside O run their key blocks in sub-blocks (spec_fwd_sub_n): 128 x
 * 64 and 128 x 96 on 4 warps at d 128 (32- and 48-key steps), 128 x 128 at d 64 (64-key steps), and FP8
 * 128 x 128 at d 128 (32-key steps over the permuted key order and V^T chunks), and FP8 128 x 64 in one
 * stage. Lengths that are multiples of neither size, causal with sq < sk and sq > sk, so masks fall inside
 * a sub-block and whole sub-blocks are masked. */
ParameterizedTestParameters(fwd, key_sub_blocks) {
    static fwd_case cases[10];
    static const int t[5][4] = {{128, 64, 4, 2}, {128, 96, 4, 2}, {128, 128, 4, 2}, {128, 128, 4, 2}, {128, 64, 4, 1}};
    cases[0] = mk(FG_DTYPE_BF16, 2, 211, 333, 2, 1, 128, 0);
    cases[1] = mk(FG_DTYPE_F16, 1, 333, 211, 2, 2, 128, 1);
    cases[2] = mk(FG_DTYPE_BF16, 1, 211, 333, 2, 2, 128, 1);
    cases[3] = mk(FG_DTYPE_F16, 2, 300, 300, 2, 2, 128, 0);
    cases[4] = mk(FG_DTYPE_BF16, 1, 333, 211, 2, 2, 64, 1);
    cases[5] = mk(FG_DTYPE_F16, 2, 211, 333, 2, 1, 64, 0);
    cases[6] = mk(FG_DTYPE_E4M3, 1, 211, 333, 2, 2, 128, 0);
    cases[7] = mk(FG_DTYPE_E4M3, 1, 333, 211, 2, 2, 128, 1);
    cases[8] = mk(FG_DTYPE_E4M3, 2, 211, 333, 2, 1, 128, 0); /* one stage: V^T and K loading in turn */
    cases[9] = mk(FG_DTYPE_E4M3, 1, 333, 211, 2, 2, 128, 1);
    for (int i = 0; i < 10; i++) /* two cases a tile */
        memcpy(cases[i].tiles, t[i / 2], sizeof cases[0].tiles);
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, key_sub_blocks, .timeout = 300) {
    run_case(c);
}

/* NaN inputs propagate exactly where the math says and nowhere else: a NaN in Q reaches only its query row
 * (O and LSE NaN), a NaN in K only the rows that see that key (not rows the causal mask hides it from),
 * and every other element is as without the NaN. Judged element by element against the fp64 reference
 * computed on the same inputs: NaN where it is NaN, else within the tolerance rule's bound
 * (docs/numerics.md). FP8 (e4m3, whose NaN is 0x7F) and bf16, causal and not. */
static void nan_case(fg_dtype dt, int causal) {
    fwd_case c = mk(dt, 1, 64, 80, 2, 2, 64, causal);
    gpu_env env;
    gpu_open(&env);
    if (dtype_is_fp8(dt)) skip_without_fp8(&env);
    fwd_run r;
    run_setup(&env, &r, &c);
    /* Q[0, row 5, head 0, dim 3], K[0, key 40, kv head 1, dim 7] and K[0, key 63, kv head 0, dim 11] become
     * NaN (key 63: the last column of a 64-key block). */
    size_t es = r.q.esize;
    unsigned char *nan_at[3] = {r.q.img + (size_t)(5 * r.q.view.stride[1] + 3) * es,
                                r.k.img + (size_t)(40 * r.k.view.stride[1] + 1 * r.k.view.stride[2] + 7) * es,
                                r.k.img + (size_t)(63 * r.k.view.stride[1] + 11) * es};
    for (int i = 0; i < 3; i++) {
        if (es == 1) {
            nan_at[i][0] = 0x7F;
        } else {
            nan_at[i][0] = 0xC0; /* 0x7FC0: a quiet NaN in bf16 (little-endian) */
            nan_at[i][1] = 0x7F;
        }
    }
    CK(env.cu->cuMemcpyHtoD(r.q.dptr, r.q.img, (size_t)r.q.span * es));
    CK(env.cu->cuMemcpyHtoD(r.k.dptr, r.k.img, (size_t)r.k.span * es));
    run_launch(&env, &r);
    ref_problem p = {.q = r.q.host, .k = r.k.host, .v = r.v.host, .causal = causal, .out_dtype = r.o.view.dtype,
                     .fp8_sum_rounded = r.sum_rounded};
    size_t n = (size_t)(1 * 64 * 2 * 64);
    double *ref = malloc(n * sizeof *ref), *low = malloc(n * sizeof *low), *lse = malloc(2 * 64 * sizeof *lse);
    cr_assert(ref && low && lse);
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(ref_attention_fwd(&p, REF_32, ref, lse, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(ref_attention_fwd(&p, REF_LOWP, low, NULL, &e), FG_OK, "%s", e.msg);
    double lowp_err = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(ref[i]) && fabs(low[i] - ref[i]) > lowp_err) lowp_err = fabs(low[i] - ref[i]);
    double bound = 2 * lowp_err + 1e-5;
    int nan_rows = 0;
    for (int s = 0; s < 64; s++)
        for (int h = 0; h < 2; h++) {
            int row_nan = isnan(lse[h * 64 + s]);
            float got_lse = ((float *)r.lse.img)[h * r.lse.view.stride[1] + s * r.lse.view.stride[2]];
            cr_assert_eq(isnan(got_lse) != 0, row_nan, "row %d head %d: LSE %g, reference %g", s, h, (double)got_lse,
                         lse[h * 64 + s]);
            nan_rows += row_nan;
            for (int d = 0; d < 64; d++) {
                size_t i = (size_t)((s * 2 + h) * 64 + d);
                uint16_t bits;
                memcpy(&bits, r.o.img + (size_t)(s * r.o.view.stride[1] + h * r.o.view.stride[2] + d) * 2, 2);
                double got = ref_to_float(r.o.view.dtype, bits);
                if (isnan(ref[i]))
                    cr_assert(isnan(got), "O[%d, %d, %d] = %g where the reference is NaN", s, h, d, got);
                else
                    cr_assert(fabs(got - ref[i]) <= bound, "O[%d, %d, %d] = %g, reference %g, bound %g", s, h, d, got,
                              ref[i], bound);
            }
        }
    /* Head 0: row 5 and the rows that see key 63, all of them or (causal, bottom-right: row i sees keys up to
     * i + 16) rows >= 47; head 1: the rows that see key 40, all or rows >= 24. */
    cr_assert_eq(nan_rows, causal ? 1 + (64 - 47) + (64 - 24) : 64 + 64, "%d rows NaN", nan_rows);
    free(ref);
    free(low);
    free(lse);
    run_free(&env, &r);
    gpu_close(&env);
}
Test(fwd, nan_inputs_e4m3, .timeout = 120) { nan_case(FG_DTYPE_E4M3, 0); }
Test(fwd, nan_inputs_e4m3_causal, .timeout = 120) { nan_case(FG_DTYPE_E4M3, 1); }
Test(fwd, nan_inputs_bf16_causal, .timeout = 120) { nan_case(FG_DTYPE_BF16, 1); }

/* Every head dim: fp16 non-causal with sq < sk (LSE off once, to cover that path), bf16 causal. */
ParameterizedTestParameters(fwd, head_dims) {
    static fwd_case cases[2 * NELEM(head_dims)];
    for (size_t i = 0; i < NELEM(head_dims); i++) {
        cases[2 * i] = mk(FG_DTYPE_F16, 2, 113, 203, 2, 2, head_dims[i], 0);
        cases[2 * i].no_lse = head_dims[i] == 96;
        cases[2 * i + 1] = mk(FG_DTYPE_BF16, 1, 113, 203, 2, 1, head_dims[i], 1);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, head_dims, .timeout = 300) {
    run_case(c);
}

/* Every sequence-length pair, fp16 non-causal and bf16 causal (sq > sk rows fully masked included).
 * The two largest pairs run with one head and small head dims to keep the CPU reference short. */
ParameterizedTestParameters(fwd, seqlens) {
    static fwd_case cases[2 * NELEM(seqlens)];
    for (size_t i = 0; i < NELEM(seqlens); i++) {
        int sq = seqlens[i][0], sk = seqlens[i][1];
        int big = (int64_t)sq * sk > 1100 * 1100;
        int b = big ? 1 : 2, h = big ? 1 : 2, d = sq == 4224 ? 64 : 128;
        cases[2 * i] = mk(FG_DTYPE_F16, b, sq, sk, h, h, d, 0);
        cases[2 * i + 1] = mk(FG_DTYPE_BF16, b, sq, sk, h, h, d, 1);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, seqlens, .timeout = 300) {
    run_case(c);
}

/* More tiles than an H200 has SMs (132), several key blocks each: on the sm_90a family the persistent
 * loop carries its K/V ring, Q buffers and pingpong turns across tiles. 3 consumer warpgroups with GQA,
 * 64-byte swizzled tiles (d 96) with keyless tiles (causal, sq > sk), one Q buffer (d 256), 2 consumer
 * warpgroups causal, and a 1-warpgroup tile. Run with the default grid (persistent, tiles from a counter),
 * with tiles in a fixed stride, and with one CTA per tile (FLASHGEN_SM90_GRID). Elsewhere they are plain
 * cases. */
static fwd_case many_tiles_cases[5];
static void many_tiles_fill(void) {
    many_tiles_cases[0] = mk(FG_DTYPE_BF16, 3, 1000, 300, 8, 2, 64, 0);
    many_tiles_cases[1] = mk(FG_DTYPE_F16, 3, 1000, 777, 8, 8, 96, 1);
    many_tiles_cases[2] = mk(FG_DTYPE_BF16, 2, 1100, 500, 8, 4, 256, 0);
    many_tiles_cases[3] = mk(FG_DTYPE_F16, 2, 1100, 1500, 8, 8, 128, 1);
    many_tiles_cases[4] = mk(FG_DTYPE_BF16, 2, 600, 700, 8, 8, 128, 0);
    const int one_wg[4] = {64, 64, 8, 2};
    memcpy(many_tiles_cases[4].tiles, one_wg, sizeof one_wg);
}
ParameterizedTestParameters(fwd, many_tiles) {
    many_tiles_fill();
    return cr_make_param_array(fwd_case, many_tiles_cases, NELEM(many_tiles_cases));
}
ParameterizedTest(fwd_case *c, fwd, many_tiles, .timeout = 300) {
    run_case(c);
}
/* many_tiles again with one environment variable set (read by the context each test creates). */
#define MANY_TILES_WITH(name, var, value)                                                                \
    ParameterizedTestParameters(fwd, name) {                                                             \
        many_tiles_fill();                                                                               \
        return cr_make_param_array(fwd_case, many_tiles_cases, NELEM(many_tiles_cases));                 \
    }                                                                                                    \
    ParameterizedTest(fwd_case *c, fwd, name, .timeout = 300) {                                          \
        setenv(var, value, 1);                                                                           \
        run_case(c);                                                                                     \
    }
MANY_TILES_WITH(many_tiles_persistent, "FLASHGEN_SM90_GRID", "persistent")
MANY_TILES_WITH(many_tiles_one_cta_each, "FLASHGEN_SM90_GRID", "tiles")

/* The dynamic schedule's counter is per stream and put back to zero by each launch's last CTA: five calls
 * in a row on one context and stream, causal, then non-causal, then causal again (one counter serves
 * both), each output poisoned before and checked after (a counter left non-zero would skip tiles, leaving
 * poison). */
Test(fwd, dynamic_schedule_repeats, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    for (int k = 0; k < 3; k++) {
        fwd_case c = mk(FG_DTYPE_BF16, 2, 1100, 1500, 8, 8, 128, k != 1);
        fwd_run r;
        run_setup(&env, &r, &c);
        for (int i = 0; i < 5; i++) {
            run_launch(&env, &r);
            run_verify(&r);
        }
        run_free(&env, &r);
    }
    gpu_close(&env);
}
/* Causal calls order their tiles across a group of (head, batch) pairs by default (runtime/forward.c,
 * rt_causal_group: on sm_90a up to SMs / 8 pairs within the L2 bound, on mma.sync one batch's heads);
 * the head-by-head order (FLASHGEN_CAUSAL_GROUP=1, p.causal_group 0) stays selectable and must be as
 * right. */
MANY_TILES_WITH(many_tiles_head_order, "FLASHGEN_CAUSAL_GROUP", "1")

/* GQA ratios 1, 4, 8 (8 query heads), causal and not, plus a decode-like single query row. */
ParameterizedTestParameters(fwd, gqa) {
    static fwd_case cases[8];
    static const int kv[3] = {8, 2, 1};
    for (int i = 0; i < 3; i++) {
        cases[2 * i] = mk(FG_DTYPE_F16, 2, 113, 203, 8, kv[i], 64, 0);
        cases[2 * i + 1] = mk(FG_DTYPE_BF16, 1, 1024, 1023, 8, kv[i], 64, 1);
    }
    cases[6] = mk(FG_DTYPE_F16, 2, 1, 239, 8, 1, 128, 0);
    cases[7] = mk(FG_DTYPE_BF16, 2, 1, 239, 8, 2, 128, 1);
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, gqa, .timeout = 300) {
    run_case(c);
}

/* Q/K/V/O/LSE as slices of larger buffers (padded head, seq and batch strides, NaN in the padding). */
ParameterizedTestParameters(fwd, strided) {
    static fwd_case cases[4];
    cases[0] = mk(FG_DTYPE_F16, 2, 113, 203, 4, 1, 64, 0);
    cases[1] = mk(FG_DTYPE_BF16, 2, 203, 113, 4, 2, 128, 1);
    cases[2] = mk(FG_DTYPE_F16, 1, 1025, 1025, 2, 2, 96, 1);
    cases[3] = mk(FG_DTYPE_BF16, 2, 1, 239, 8, 1, 256, 0);
    for (int i = 0; i < 4; i++)
        cases[i].strided = 1;
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, strided, .timeout = 300) {
    run_case(c);
}

/* Non-default softmax scales: mild, tiny (nearly uniform) and large (peaked: exp overflows without the max).
 * The last two run the sm_90a kernel's lazy rescale (16-bit head_dim > 128, forward_wgmma.cuh FG_STALE) over
 * several key blocks, with maxima that jump by far more than its allowance (scale 1) and by less (0.25):
 * bench/probes/lazy_rescale_sim.c puts both at 0.50-0.60 of the bound with the allowance of 2^1. */
ParameterizedTestParameters(fwd, scale) {
    static fwd_case cases[5];
    cases[0] = mk(FG_DTYPE_F16, 1, 200, 200, 2, 2, 64, 0);
    cases[0].scale = 0.3f;
    cases[1] = mk(FG_DTYPE_BF16, 1, 113, 203, 2, 1, 128, 1);
    cases[1].scale = 0.01f;
    cases[2] = mk(FG_DTYPE_F16, 2, 128, 128, 2, 2, 32, 0);
    cases[2].scale = 2.0f;
    cases[3] = mk(FG_DTYPE_F16, 1, 200, 700, 2, 2, 256, 1);
    cases[3].scale = 1.0f;
    cases[4] = mk(FG_DTYPE_BF16, 1, 300, 520, 2, 1, 192, 0);
    cases[4].scale = 0.25f;
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, scale, .timeout = 300) {
    run_case(c);
}

/* seqlen_k = 0 is allowed: every row sees nothing, so O = 0 and LSE = -inf. */
ParameterizedTestParameters(fwd, empty_keys) {
    static fwd_case cases[2];
    cases[0] = mk(FG_DTYPE_F16, 2, 17, 0, 2, 2, 64, 0);
    cases[1] = mk(FG_DTYPE_BF16, 1, 17, 0, 4, 2, 128, 1);
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, fwd, empty_keys, .timeout = 300) {
    run_case(c);
}

/* ------------------------------------------------------------------------------------------------ */
/* Bitwise repeatability and a tensor over 2^31 elements                                             */
/* ------------------------------------------------------------------------------------------------ */

/* Five launches on the same inputs give the same O and LSE bytes (outputs re-poisoned each time). */
static void check_repeatable(const fwd_case *c) {
    gpu_env env;
    gpu_open(&env);
    fwd_run r;
    run_setup(&env, &r, c);
    run_launch(&env, &r);
    run_verify(&r);
    size_t ob = (size_t)(r.o.span + r.o.guard) * r.o.esize, lb = (size_t)(r.lse.span + r.lse.guard) * r.lse.esize;
    unsigned char *o0 = malloc(ob), *l0 = malloc(lb > 0 ? lb : 1);
    cr_assert(o0 && l0);
    memcpy(o0, r.o.img, ob);
    if (lb)
        memcpy(l0, r.lse.img, lb);
    for (int rep = 1; rep < 5; rep++) {
        run_launch(&env, &r);
        cr_assert_eq(memcmp(o0, r.o.img, ob), 0, "launch %d wrote different O bytes", rep + 1);
        cr_assert_eq(memcmp(l0, r.lse.img, lb), 0, "launch %d wrote different LSE bytes", rep + 1);
    }
    fprintf(stderr, "gpu_fwd: 5 launches gave identical O and LSE bytes\n");
    free(o0);
    free(l0);
    run_free(&env, &r);
    gpu_close(&env);
}

Test(fwd, repeatable_f16_causal_gqa, .timeout = 300) {
    fwd_case c = mk(FG_DTYPE_F16, 2, 1025, 1025, 4, 1, 128, 1);
    check_repeatable(&c);
}

Test(fwd, repeatable_bf16_long, .timeout = 300) {
    fwd_case c = mk(FG_DTYPE_BF16, 1, 2048, 2048, 2, 2, 64, 0);
    check_repeatable(&c);
}

/* Q and O of 2^31 + 2176 elements ([1, 2^24 + 17, 1, 128]): any 32-bit element offset wraps. Eight keys
 * keep the kernel and the reference (every element checked) short. */
Test(fwd, big_tensor_over_2_pow_31_elements, .timeout = 600) {
    fwd_case c = mk(FG_DTYPE_F16, 1, (1 << 24) + 17, 8, 1, 1, 128, 0);
    cr_assert_gt((int64_t)c.sq * c.hq * c.d, (int64_t)1 << 31);
    run_case(&c);
}

/* ------------------------------------------------------------------------------------------------ */
/* Bad arguments: refused with a sentence naming the argument, and nothing written                    */
/* ------------------------------------------------------------------------------------------------ */

enum mutation {
    M_NULL_ARGS, M_NULL_CTX, M_Q_NULL, M_K_NULL, M_V_NULL, M_O_NULL, M_K_DTYPE, M_O_DTYPE, M_FP8_INPUTS,
    M_Q_NDIM, M_K_BATCH, M_V_SEQLEN, M_O_SEQLEN, M_HEAD_DIM_7, M_HEAD_DIM_264, M_K_HEAD_DIM, M_Q_LAST_STRIDE,
    M_O_LAST_STRIDE, M_Q_MISALIGNED, M_O_MISALIGNED, M_KV_HEADS_NOT_DIVIDING, M_NEGATIVE_SEQLEN, M_NEGATIVE_BATCH,
    M_LSE_DTYPE, M_LSE_SHAPE, M_LSE_NDIM, M_COUNT
};

typedef struct bad_case {
    int id;                /* enum mutation */
    const char *what;      /* the rule broken, for messages */
    const char *names[4];  /* the message must mention one of these (none: not checked) */
} bad_case;

static const bad_case bad_cases[M_COUNT] = {
    {M_NULL_ARGS, "args is NULL", {"args"}},
    {M_NULL_CTX, "ctx is NULL", {"ctx"}},
    {M_Q_NULL, "q.data is NULL", {"q"}},
    {M_K_NULL, "k.data is NULL", {"k"}},
    {M_V_NULL, "v.data is NULL", {"v"}},
    {M_O_NULL, "o.data is NULL", {"o", "out", "output"}},
    {M_K_DTYPE, "k is bf16 while q is fp16", {"k", "dtype"}},
    {M_O_DTYPE, "o is bf16 while q is fp16", {"o", "out", "dtype"}},
    {M_FP8_INPUTS, "q/k/v are e4m3 with V laid out like K (fp8 V is key-major)", {"v", "key-major", "e4m3"}},
    {M_Q_NDIM, "q.ndim is 3", {"q", "ndim"}},
    {M_K_BATCH, "k/v batch 2, q batch 1", {"k", "v", "batch"}},
    {M_V_SEQLEN, "v has one key fewer than k", {"v", "k", "seqlen"}},
    {M_O_SEQLEN, "o has one row more than q", {"o", "out", "output"}},
    {M_HEAD_DIM_7, "head_dim 7", {"head_dim", "head dim", "headdim"}},
    {M_HEAD_DIM_264, "head_dim 264", {"head_dim", "head dim", "headdim"}},
    {M_K_HEAD_DIM, "k/v head_dim 32, q head_dim 64", {"head_dim", "head dim", "k", "v"}},
    {M_Q_LAST_STRIDE, "q.stride[3] is 2", {"stride", "contiguous"}},
    {M_O_LAST_STRIDE, "o.stride[3] is 2", {"stride", "contiguous"}},
    {M_Q_MISALIGNED, "q.data is 2 bytes past an aligned address", {"q", "align"}},
    {M_O_MISALIGNED, "o.data is 2 bytes past an aligned address", {"o", "out", "align"}},
    {M_KV_HEADS_NOT_DIVIDING, "3 KV heads for 4 query heads", {"head", "heads", "divide"}},
    {M_NEGATIVE_SEQLEN, "seqlen_q is -5", {"q", "seqlen", "negative", "shape"}},
    {M_NEGATIVE_BATCH, "batch is -1", {"batch", "negative", "shape", "q"}},
    {M_LSE_DTYPE, "lse is fp16", {"lse"}},
    {M_LSE_SHAPE, "lse has one row fewer than q", {"lse"}},
    {M_LSE_NDIM, "lse.ndim is 4", {"lse"}},
};

/* 1 when msg names `name`: short names (q, k, v, o, lse) as a separate token, longer ones anywhere,
 * ignoring case. */
static int mentions(const char *msg, const char *name) {
    size_t n = strlen(name);
    for (const char *p = msg; *p; p++) {
        if (strncasecmp(p, name, n) != 0)
            continue;
        if (n > 3)
            return 1;
        int before = p > msg && isalnum((unsigned char)p[-1]);
        int after = isalnum((unsigned char)p[n]);
        if (!before && !after)
            return 1;
    }
    return 0;
}

typedef struct { int id; } bad_param;

ParameterizedTestParameters(fwd, bad_arguments) {
    static bad_param ids[M_COUNT];
    for (int i = 0; i < M_COUNT; i++)
        ids[i].id = i;
    return cr_make_param_array(bad_param, ids, M_COUNT);
}

/* The problem every bad-argument test mutates: fp16, b=1, sq=sk=64, 4 query heads over 2 KV heads, d=64,
 * causal, with LSE; laid out with head stride 272 and room for 8 heads per row, so mutations that widen
 * d or the head count stay inside the allocations and break only the rule under test. */
#define BASE_SQ 64
static void base_setup(gpu_env *env, fwd_run *r) {
    memset(r, 0, sizeof *r);
    r->c = mk(FG_DTYPE_F16, 1, BASE_SQ, BASE_SQ, 4, 2, 64, 1);
    const int64_t hs = 272, ss = 8 * hs, bs = BASE_SQ * ss;
    int64_t qs[4] = {1, BASE_SQ, 4, 64}, ks[4] = {1, BASE_SQ, 2, 64}, ls[3] = {1, 4, BASE_SQ};
    int64_t st[4] = {bs, ss, hs, 1};
    dbuf_init(env, &r->q, FG_DTYPE_F16, 4, qs, st, 0, 0);
    dbuf_init(env, &r->k, FG_DTYPE_F16, 4, ks, st, 0, 0);
    dbuf_init(env, &r->v, FG_DTYPE_F16, 4, ks, st, 0, 0);
    dbuf_init(env, &r->o, FG_DTYPE_F16, 4, qs, st, GUARD, 0);
    dbuf_init(env, &r->lse, FG_DTYPE_F32, 3, ls, NULL, GUARD, 0);
    dbuf_upload_random(env, &r->q, 1);
    dbuf_upload_random(env, &r->k, 2);
    dbuf_upload_random(env, &r->v, 3);
    fg_fwd_args a = {.q = r->q.view, .k = r->k.view, .v = r->v.view, .o = r->o.view, .lse = r->lse.view,
                     .softmax_scale = 0.0f, .causal = 1};
    r->args = a;
}

/* The unmutated problem runs and is right, so each refusal below comes from its mutation alone. */
Test(fwd, bad_arguments_base_problem_is_valid, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    fwd_run r;
    base_setup(&env, &r);
    run_launch(&env, &r);
    run_verify(&r);
    run_free(&env, &r);
    gpu_close(&env);
}

ParameterizedTest(bad_param *bp, fwd, bad_arguments, .timeout = 300) {
    const bad_case *bc = &bad_cases[bp->id];
    cr_assert_eq(bc->id, bp->id, "bad_cases is out of order");
    gpu_env env;
    gpu_open(&env);
    fwd_run r;
    base_setup(&env, &r);
    fg_fwd_args a = r.args;

    switch (bc->id) {
    case M_Q_NULL: a.q.data = NULL; break;
    case M_K_NULL: a.k.data = NULL; break;
    case M_V_NULL: a.v.data = NULL; break;
    case M_O_NULL: a.o.data = NULL; break;
    case M_K_DTYPE: a.k.dtype = FG_DTYPE_BF16; break;
    case M_O_DTYPE: a.o.dtype = FG_DTYPE_BF16; break;
    case M_FP8_INPUTS: a.q.dtype = a.k.dtype = a.v.dtype = FG_DTYPE_E4M3; break;
    case M_Q_NDIM: a.q.ndim = 3; break;
    case M_K_BATCH: a.k.shape[0] = a.v.shape[0] = 2; break;
    case M_V_SEQLEN: a.v.shape[1] = BASE_SQ - 1; break;
    case M_O_SEQLEN: a.o.shape[1] = BASE_SQ + 1; break;
    case M_HEAD_DIM_7: a.q.shape[3] = a.k.shape[3] = a.v.shape[3] = a.o.shape[3] = 7; break;
    case M_HEAD_DIM_264: a.q.shape[3] = a.k.shape[3] = a.v.shape[3] = a.o.shape[3] = 264; break;
    case M_K_HEAD_DIM: a.k.shape[3] = a.v.shape[3] = 32; break;
    case M_Q_LAST_STRIDE: a.q.stride[3] = 2; break;
    case M_O_LAST_STRIDE: a.o.stride[3] = 2; break;
    case M_Q_MISALIGNED: a.q.data = (char *)a.q.data + 2; break;
    case M_O_MISALIGNED: a.o.data = (char *)a.o.data + 2; break;
    case M_KV_HEADS_NOT_DIVIDING: a.k.shape[2] = a.v.shape[2] = 3; break;
    case M_NEGATIVE_SEQLEN: a.q.shape[1] = a.o.shape[1] = a.lse.shape[2] = -5; break;
    case M_NEGATIVE_BATCH:
        a.q.shape[0] = a.k.shape[0] = a.v.shape[0] = a.o.shape[0] = a.lse.shape[0] = -1;
        break;
    case M_LSE_DTYPE: a.lse.dtype = FG_DTYPE_F16; break;
    case M_LSE_SHAPE: a.lse.shape[2] = BASE_SQ - 1; break;
    case M_LSE_NDIM: a.lse.ndim = 4; a.lse.shape[3] = 1; a.lse.stride[3] = 1; break;
    default: break;
    }

    dbuf_poison(&env, &r.o);
    dbuf_poison(&env, &r.lse);
    CK(env.cu->cuCtxSynchronize());
    fg_status s;
    const char *msg;
    if (bc->id == M_NULL_CTX) {
        s = fg_attention_fwd(NULL, &a, (void *)env.stream);
        msg = fg_last_error(NULL);
    } else {
        s = fg_attention_fwd(env.ctx, bc->id == M_NULL_ARGS ? NULL : &a, (void *)env.stream);
        msg = fg_last_error(env.ctx);
    }
    cr_assert_not_null(msg, "fg_last_error must never return NULL");
    fprintf(stderr, "gpu_fwd: bad argument (%s): %s: %s\n", bc->what, fg_status_string(s), msg);
    cr_assert(s == FG_ERR_INVALID_ARGUMENT || s == FG_ERR_UNSUPPORTED,
              "%s: expected FG_ERR_INVALID_ARGUMENT or FG_ERR_UNSUPPORTED, got %s (%s)", bc->what, fg_status_string(s),
              msg);
    if (bc->names[0]) {
        int named = 0;
        for (int i = 0; i < 4 && bc->names[i]; i++)
            named |= mentions(msg, bc->names[i]);
        cr_assert(named, "%s: the message \"%s\" does not name the argument (expected one of %s%s%s%s%s%s%s)",
                  bc->what, msg, bc->names[0], bc->names[1] ? ", " : "", bc->names[1] ? bc->names[1] : "",
                  bc->names[2] ? ", " : "", bc->names[2] ? bc->names[2] : "", bc->names[3] ? ", " : "",
                  bc->names[3] ? bc->names[3] : "");
    }
    CK(env.cu->cuCtxSynchronize());
    dbuf_download(&env, &r.o);
    dbuf_download(&env, &r.lse);
    check_untouched(&r.o, "O");
    check_untouched(&r.lse, "LSE");
    run_free(&env, &r);
    gpu_close(&env);
}
/* Empty tensors may come with NULL pointers (PyTorch's empty tensors do): sk = 0 with NULL K/V still
 * writes O = 0 and LSE = -inf, and sq = 0 with NULL Q/O launches nothing and succeeds. */
Test(fwd, empty_tensors_with_null_pointers, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    fwd_run r;
    fwd_case c = mk(FG_DTYPE_BF16, 2, 33, 0, 4, 2, 64, 0);
    run_setup(&env, &r, &c);
    r.args.k.data = NULL;
    r.args.v.data = NULL;
    run_launch(&env, &r);
    run_verify(&r);
    fg_fwd_args a = r.args;
    a.q.shape[1] = a.o.shape[1] = a.lse.shape[2] = 0;
    a.q.data = a.o.data = a.lse.data = NULL;
    fg_status st = fg_attention_fwd(env.ctx, &a, (void *)env.stream);
    cr_assert_eq(st, FG_OK, "sq = 0 with NULL q/o: %s", fg_last_error(env.ctx));
    run_free(&env, &r);
    gpu_close(&env);
}
