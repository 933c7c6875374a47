/* test_gpu_backward.c: the GPU suite of the backward pass (suite `bwd`): each case runs its forward, then
 * fg_attention_bwd, and the gradients are judged against the fp32 reference with the 3x rule
 * (ref_check_bwd, docs/numerics.md); the shape set on each kernel family (mma.sync with cp.async or TMA
 * loads, the sm_90a kernel), explicit tiles, bitwise repeatability of the deterministic mode, views TMA
 * cannot read, strict mode with a bundled variant, and bad arguments. Without a GPU every test skips with
 * the reason. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashgen.h"
#include "reference/reference.h"
#include "tests/gpu_harness.h"

/* The shape set: head dims of every backward tile (16-128, and 160-256 where the GPU's shared memory holds
 * them, with dQ by fp32 atomics there), head dims the kernels pad (8 to 16, 40 to 48, 72 to 80, 136 to 160,
 * 200 to 224, 248 to 256: zeros read past head_dim, no column written past it, which strided views, whose
 * rows' padding is NaN in the inputs and poisoned in the gradients, would catch), query/key lengths that are
 * multiples of no
 * tile (the FlashAttention regression: NaN in dQ when seqlen_k is not a multiple of the block), causal
 * with sq < sk and sq > sk (rows that see no key must get zero gradients, not NaN), GQA/MQA (dK, dV
 * summed over a KV head's query heads), strided views, a non-default scale; each in both modes. */
static fwd_case bwd_cases[40];
static int bwd_ncases;
static void bwd_fill(void) {
    int n = 0;
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 2, 128, 128, 2, 2, 64, 0);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 2, 113, 203, 4, 4, 64, 1);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 203, 113, 4, 2, 64, 1);   /* rows without keys; GQA 2 */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 300, 257, 8, 2, 128, 0);   /* GQA 4 */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 2, 257, 300, 4, 4, 128, 1);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 199, 199, 4, 1, 96, 1);    /* MQA */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 2, 77, 1000, 2, 2, 32, 0);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 1000, 77, 2, 2, 16, 1);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 150, 150, 2, 2, 80, 1);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 150, 151, 2, 2, 112, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 1, 239, 2, 2, 64, 0);     /* one query */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 239, 1, 2, 2, 128, 0);     /* one key */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 203, 257, 4, 2, 256, 1);  /* 8 keys a warp; GQA 2 */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 2, 130, 200, 2, 2, 192, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 257, 130, 2, 1, 160, 1);  /* rows without keys; MQA */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 100, 100, 2, 2, 224, 1);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 1, 239, 2, 2, 128, 0);    /* one query block a CTA, d 128 */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 1000, 77, 2, 2, 128, 1);   /* sq >> sk at d 128: 16 query blocks */
    /* the sm_90a kernel's dS^T buffers reused (3+ query blocks a CTA) at d 64, and its lagged dQ (d 128
     * without a mask) over 2 and 3 blocks with 16-bit dK/dV (MHA: the epilogue through the dQ staging) */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 517, 700, 4, 4, 64, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 517, 700, 4, 4, 64, 1);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 129, 300, 2, 2, 128, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 100, 130, 2, 2, 128, 0);
    /* d 128 without a mask on sm_90a: 80-query blocks (dQ^T), 13 of them, the last past the multiple of 128
     * (1000 queries: workspace rows padded to 1152), MHA; and 64-query ones (the runtime's choice at 512 and
     * below 128 queries), their dQ lagged over 8 blocks */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 1000, 390, 4, 4, 128, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 512, 200, 2, 2, 128, 0);
    fwd_case s = mk(FG_DTYPE_BF16, 2, 130, 140, 4, 2, 64, 1);
    s.strided = 1;
    s.scale = 0.3f;
    bwd_cases[n++] = s;
    /* padded head dims */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 203, 257, 4, 2, 8, 1);    /* GQA 2 */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 2, 150, 77, 2, 2, 40, 0);
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 257, 130, 4, 1, 72, 1);   /* rows without keys; MQA */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 130, 200, 8, 2, 136, 0);   /* GQA 4 */
    bwd_cases[n++] = mk(FG_DTYPE_BF16, 1, 199, 199, 2, 2, 200, 1);
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 100, 300, 4, 2, 248, 0);   /* GQA 2 */
    bwd_cases[n++] = mk(FG_DTYPE_F16, 1, 119, 202, 4, 2, 72, 0);    /* GQA 2, fewer queries than keys */
    s = mk(FG_DTYPE_BF16, 2, 130, 140, 2, 2, 72, 1);               /* MHA: dK, dV through the K, V tiles */
    s.strided = 1;
    bwd_cases[n++] = s;
    s = mk(FG_DTYPE_F16, 1, 150, 151, 4, 2, 136, 0);               /* GQA: the post kernel's sums */
    s.strided = 1;
    bwd_cases[n++] = s;
    bwd_ncases = n;
}
/* Causal with sq > sk: rows i < sq - sk see no key, and their dQ must be exactly 0 (not NaN, not noise). */
static void bwd_check_rows_without_keys(const fwd_case *c, const bwd_run *r) {
    if (!c->causal || c->sq <= c->sk) return;
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t i = 0; i < c->sq - c->sk; i++)
            for (int64_t h = 0; h < c->hq; h++)
                for (int64_t x = 0; x < c->d; x++) {
                    const uint16_t *e = (const uint16_t *)r->dq.img +
                                        (b * r->dq.view.stride[0] + i * r->dq.view.stride[1] + h * r->dq.view.stride[2] + x);
                    cr_assert_eq(*e & 0x7fff, 0, "dQ[%lld, %lld, %lld, %lld] of a row without keys is 0x%04x",
                                 (long long)b, (long long)i, (long long)h, (long long)x, *e);
                }
}
/* One case in one mode, on the family expected (sm90a: the sm_90a kernel, else mma.sync): the gradients
 * against the reference, and exact zeros for rows without keys. */
static void bwd_check_case(gpu_env *env, const fwd_case *c, int deterministic, int sm90a, int tma) {
    bwd_run r;
    bwd_setup(env, &r, c, deterministic);
    bwd_expect_family(env, &r, sm90a, tma);
    bwd_launch(env, &r);
    bwd_verify(&r);
    bwd_check_rows_without_keys(c, &r);
    bwd_free(env, &r);
}

/* The shape set's head dims 64 and 128 (the sm_90a kernel's: shapes_sm90a), or every multiple of 64 (the
 * mma.sync kernel's TMA loads: shapes_mma_tma). */
static struct criterion_test_params bwd_cases_of(int all64) {
    bwd_fill();
    static fwd_case cases[2][40];
    int n = 0;
    for (int i = 0; i < bwd_ncases; i++)
        if (bwd_cases[i].d == 64 || bwd_cases[i].d == 128 || (all64 && bwd_cases[i].d % 64 == 0))
            cases[all64][n++] = bwd_cases[i];
    return cr_make_param_array(fwd_case, cases[all64], (size_t)n);
}

ParameterizedTestParameters(bwd, shapes) {
    bwd_fill();
    return cr_make_param_array(fwd_case, bwd_cases, (size_t)bwd_ncases);
}
ParameterizedTest(fwd_case *c, bwd, shapes, .timeout = 600) {
    setenv("FLASHGEN_WGMMA_BWD", "0", 1); /* the mma.sync kernels on Hopper too (bwd::shapes_sm90a: the other) */
    setenv("FLASHGEN_BWD_TMA", "0", 1);   /* their cp.async loads, as before sm_90 (bwd::shapes_mma_tma: TMA) */
    gpu_env env;
    gpu_open(&env);
    for (int det = 0; det < 2; det++) bwd_check_case(&env, c, det, 0, 0);
    gpu_close(&env);
}

/* mma.sync backward tiles the policy chooses on other GPUs, through the runtime's entry for explicit variants:
 * one stage of query blocks (the next block loading behind the dQ product): the A100's tile at head_dim 224
 * and 256 (8 keys a warp), the 99 KiB parts' at 160 and 192, and one stage at 64 x 128 (d 128) and 32 x 64 on 4
 * warps (d 64); both modes, lengths that are multiples of no tile size, causal with sq < sk and sq > sk, GQA. */
ParameterizedTestParameters(bwd, tiles) {
    static const struct { int d, tiles[4]; } t[] = {
        {256, {64, 64, 8, 1}}, {224, {64, 64, 8, 1}}, {192, {64, 32, 4, 1}}, {160, {64, 64, 8, 1}},
        {128, {64, 128, 8, 1}}, {64, {32, 64, 4, 1}},
        /* 8 keys a warp at head_dim 128 and 64 (two stages): quarter-width dK/dV tiles, 32-row dQ groups, and on
         * sm_90+ the staged bulk adds of those groups */
        {128, {64, 64, 8, 2}},  {64, {64, 32, 4, 2}},
    };
    static fwd_case cases[2 * NELEM(t)];
    for (size_t i = 0; i < NELEM(t); i++) {
        cases[2 * i] = mk(FG_DTYPE_BF16, 1, 203, 257, 4, 2, t[i].d, 1);
        cases[2 * i + 1] = mk(FG_DTYPE_F16, 2, 150, 77, 2, 2, t[i].d, i % 2 == 0);
        memcpy(cases[2 * i].tiles, t[i].tiles, sizeof cases[0].tiles);
        memcpy(cases[2 * i + 1].tiles, t[i].tiles, sizeof cases[0].tiles);
    }
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *c, bwd, tiles, .timeout = 600) {
    gpu_env env;
    gpu_open(&env);
    for (int det = 0; det < 2; det++) {
        bwd_run r;
        bwd_setup(&env, &r, c, det);
        bwd_launch(&env, &r);
        bwd_verify(&r);
        bwd_check_rows_without_keys(c, &r);
        bwd_free(&env, &r);
    }
    gpu_close(&env);
}

/* The mma.sync backward's tma=1 variants (K, V, Q, dO by TMA: the default on sm_90+) on the shape set's head
 * dims that are multiples of 64 (64, 128, 192, 256), both modes; skipped before sm_90. */
ParameterizedTestParameters(bwd, shapes_mma_tma) {
    return bwd_cases_of(1);
}
ParameterizedTest(fwd_case *c, bwd, shapes_mma_tma, .timeout = 600) {
    setenv("FLASHGEN_WGMMA_BWD", "0", 1);
    unsetenv("FLASHGEN_BWD_TMA"); /* the default, read by the context gpu_open creates */
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    if (cc < 90) {
        gpu_close(&env);
        cr_skip_test("the mma.sync backward's TMA loads need compute capability 9.0 or newer (this one is sm_%d)", cc);
    }
    { /* devices whose backward tile has fewer than 64 query rows (the 99 KiB parts: block_m 32) take none */
        bwd_run r;
        bwd_setup(&env, &r, c, 0);
        char text[2048];
        cr_assert_eq(fg_explain_bwd(env.ctx, &r.args, text, sizeof text), FG_OK, "%s", fg_last_error(env.ctx));
        bwd_free(&env, &r);
        if (!strstr(text, ",tma=1,") && strstr(text, "block_m=32,")) {
            gpu_close(&env);
            cr_skip_test("this device's backward tile (block_m 32) takes no TMA loads: %s", text);
        }
    }
    for (int det = 0; det < 2; det++) bwd_check_case(&env, c, det, 0, 1);
    gpu_close(&env);
}

/* The sm_90a backward (backward_wgmma.cuh, wgmma), on the shape set's head dims 64 and 128 without the
 * deterministic mode (which it does not take): what a Hopper GPU runs by default (bwd::shapes runs the
 * mma.sync kernel there, with FLASHGEN_WGMMA_BWD=0); skipped on other GPUs. */
ParameterizedTestParameters(bwd, shapes_sm90a) {
    return bwd_cases_of(0);
}
ParameterizedTest(fwd_case *c, bwd, shapes_sm90a, .timeout = 600) {
    setenv("FLASHGEN_WGMMA_BWD", "1", 1); /* read by the context gpu_open creates */
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    if (cc != 90) {
        gpu_close(&env);
        cr_skip_test("the sm_90a backward needs a compute capability 9.0 device (this one is sm_%d)", cc);
    }
    if (env_is_zero("FLASHGEN_WGMMA")) {
        gpu_close(&env);
        cr_skip_test("FLASHGEN_WGMMA=0: the sm_90a family, the backward's included, is off in this run");
    }
    bwd_check_case(&env, c, 0, 1, -1);
    gpu_close(&env);
}

/* The deterministic mode: 50 runs give bitwise-identical gradients (GQA, a tail in both lengths, several
 * key blocks adding into each query block's dQ; FG_TEST_DET_RUNS, at least 2, sets fewer runs for a
 * compute-sanitizer pass). Causal (descending order): at d 64, whose dQ goes by bulk
 * reduce-adds on sm_90+, at d 192, whose dQ goes by fp32 atomics everywhere (16-byte ones on sm_90+), and at
 * d 128 with more queries than keys (the rank at query blocks some key blocks do not see). Not causal: the
 * rotated streams (d 128), and ascending where a head's key blocks are over half the SMs (d 64, 9000 keys).
 * A padded head dim, d 72 (computed at 80), not causal. */
ParameterizedTestParameters(bwd, deterministic_is_bitwise_repeatable) {
    static fwd_case cases[6];
    cases[0] = mk(FG_DTYPE_BF16, 2, 517, 700, 4, 2, 64, 1);
    cases[1] = mk(FG_DTYPE_F16, 1, 517, 700, 4, 2, 192, 1);
    cases[2] = mk(FG_DTYPE_BF16, 1, 700, 517, 4, 4, 128, 1); /* causal, rows without keys: descending order */
    cases[3] = mk(FG_DTYPE_BF16, 2, 700, 517, 4, 2, 128, 0); /* not causal: rotated streams */
    cases[4] = mk(FG_DTYPE_F16, 1, 300, 9000, 2, 2, 64, 0);  /* 71 key blocks of 128, over half an H100's SMs:
                                                                ascending */
    cases[5] = mk(FG_DTYPE_BF16, 1, 517, 700, 4, 2, 72, 0);
    return cr_make_param_array(fwd_case, cases, NELEM(cases));
}
ParameterizedTest(fwd_case *cp, bwd, deterministic_is_bitwise_repeatable, .timeout = 600) {
    gpu_env env;
    gpu_open(&env);
    fwd_case c = *cp;
    bwd_run r;
    bwd_setup(&env, &r, &c, 1);
    bwd_launch(&env, &r);
    bwd_verify(&r);
    dbuf *gs[3] = {&r.dq, &r.dk, &r.dv};
    unsigned char *first[3];
    size_t bytes[3];
    for (int i = 0; i < 3; i++) {
        bytes[i] = (size_t)gs[i]->span * gs[i]->esize;
        first[i] = malloc(bytes[i]);
        cr_assert_not_null(first[i]);
        memcpy(first[i], gs[i]->img, bytes[i]);
    }
    const char *runs_env = getenv("FG_TEST_DET_RUNS");
    const int runs = runs_env && atoi(runs_env) >= 2 ? atoi(runs_env) : 50;
    for (int rep = 1; rep < runs; rep++) {
        bwd_launch(&env, &r);
        for (int i = 0; i < 3; i++)
            cr_assert_eq(memcmp(first[i], gs[i]->img, bytes[i]), 0, "run %d: gradient %d differs bitwise from run 0",
                         rep, i);
    }
    for (int i = 0; i < 3; i++) free(first[i]);
    bwd_free(&env, &r);
    gpu_close(&env);
}

/* Bad arguments get a status and a sentence, before anything runs. */
/* The sm_90a backward loads Q, K, V and dO by TMA; a call whose tensors TMA cannot read (here K with
 * stride 0 over its heads, which the argument rules accept for inputs) runs the mma.sync kernel instead:
 * fg_explain_bwd says which. */
Test(bwd, tma_unready_views_take_mma_sync, .timeout = 300) {
    setenv("FLASHGEN_WGMMA_BWD", "1", 1);
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    if (cc != 90 || env_is_zero("FLASHGEN_WGMMA")) {
        gpu_close(&env);
        cr_skip_test("needs a compute capability 9.0 device with the sm_90a family on (this one: sm_%d)", cc);
    }
    fwd_case c = mk(FG_DTYPE_BF16, 1, 64, 64, 2, 2, 64, 0);
    bwd_run r;
    bwd_setup(&env, &r, &c, 0);
    char text[2048];
    cr_assert_eq(fg_explain_bwd(env.ctx, &r.args, text, sizeof text), FG_OK, "%s", fg_last_error(env.ctx));
    cr_assert(strstr(text, "variant arch=sm_90a,") == text, "%s", text);
    fg_bwd_args a = r.args;
    a.k.stride[2] = 0; /* both KV heads read head 0's rows; explained only, never run */
    cr_assert_eq(fg_explain_bwd(env.ctx, &a, text, sizeof text), FG_OK, "%s", fg_last_error(env.ctx));
    cr_assert(strstr(text, "variant arch=sm_90,") == text && strstr(text, "mma.sync path"), "%s", text);
    bwd_free(&env, &r);
    gpu_close(&env);
}

/* Strict mode with a bundle that holds only the mma.sync backward's cp.async variant (as a config without
 * tma = true, or an older flashgen, builds it): dispatch takes it rather than refusing the call for want
 * of the tma=1 variant; the gradients are checked. sm_90 only. */
Test(bwd, strict_mode_takes_a_bundled_cp_async_variant, .timeout = 300) {
    setenv("FLASHGEN_WGMMA_BWD", "0", 1);
    unsetenv("FLASHGEN_BWD_TMA");
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    if (cc != 90) {
        gpu_close(&env);
        cr_skip_test("the TMA-load backward is the default on compute capability 9.0 only (this one: sm_%d)", cc);
    }
    fwd_case c = mk(FG_DTYPE_BF16, 1, 200, 200, 2, 2, 64, 0);
    bwd_run r;
    bwd_setup(&env, &r, &c, 0);
    fg_context *strict = extra_context(NULL, 1, NULL, NULL);
    char text[2048];
    cr_assert_eq(fg_explain_bwd(strict, &r.args, text, sizeof text), FG_OK, "%s", fg_last_error(strict));
    cr_assert(strstr(text, ",tma=1,") && strstr(text, "code: in no cache or bundle"), "%s", text);
    const size_t len = strcspn(text + 8, "\n");
    char name[FG_SPEC_NAME_MAX];
    cr_assert_lt(len, sizeof name);
    memcpy(name, text + 8, len);
    name[len] = '\0';
    fg_spec s;
    fg_error e;
    cr_assert_eq(spec_parse(name, &s, &e), FG_OK, "%s", e.msg);
    s.tma = 0;
    cr_assert_gt(spec_format(&s, name, sizeof name), 0);
    bundle_one_into(strict, &s);
    cr_assert_eq(fg_explain_bwd(strict, &r.args, text, sizeof text), FG_OK, "%s", fg_last_error(strict));
    cr_assert(strncmp(text + 8, name, strlen(name)) == 0 && strstr(text, "code: a loaded bundle"), "%s", text);
    fg_context *own = env.ctx;
    env.ctx = strict;
    bwd_launch(&env, &r);
    env.ctx = own;
    bwd_verify(&r);
    fprintf(stderr, "gpu_bwd: strict mode served %s from a bundle\n", name);
    fg_context_destroy(strict);
    bwd_free(&env, &r);
    gpu_close(&env);
}

Test(bwd, bad_arguments_are_refused, .timeout = 300) {
    gpu_env env;
    gpu_open(&env);
    fwd_case c = mk(FG_DTYPE_F16, 1, 64, 64, 2, 2, 64, 0);
    bwd_run r;
    bwd_setup(&env, &r, &c, 0);
    fg_bwd_args a = r.args;
    a.workspace_size -= 1;
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "workspace_size"), "%s", fg_last_error(env.ctx));
    a = r.args;
    a.lse.data = NULL;
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "lse"), "%s", fg_last_error(env.ctx));
    a = r.args;
    a.dq.data = a.q.data; /* dq over q */
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "dq overlaps q"), "%s", fg_last_error(env.ctx));
    a = r.args;
    a.dk.dtype = FG_DTYPE_BF16;
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "dk.dtype"), "%s", fg_last_error(env.ctx));
    a = r.args;
    a.deterministic = 2;
    cr_assert_eq(fg_attention_bwd(env.ctx, &a, (void *)env.stream), FG_ERR_INVALID_ARGUMENT);
    /* fg_explain_bwd: the same checks; a buffer too small says how much it needs; no context, no crash */
    char text[2048];
    cr_assert_eq(fg_explain_bwd(env.ctx, &a, text, sizeof text), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(fg_explain_bwd(env.ctx, &r.args, text, 16), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "the explanation needs"), "%s", fg_last_error(env.ctx));
    cr_assert_neq(fg_explain_bwd(NULL, &r.args, text, sizeof text), FG_OK);
    /* rt_bwd_with_spec (explicit variants): one that does not match the call is refused, and the call is
     * checked as fg_attention_bwd checks it */
    fg_spec s;
    fg_error e;
    fg_error_clear(&e);
    char name[FG_SPEC_NAME_MAX];
    snprintf(name, sizeof name, "kind=bwd arch=sm_%d dtype=fp16 head_dim=128 block_m=64 block_n=64 warps=8 stages=2",
             gpu_cc(&env));
    cr_assert_eq(spec_parse(name, &s, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(rt_bwd_with_spec(env.ctx, &s, &r.args, (void *)env.stream, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "does not match the call"), "%s", e.msg);
    s.head_dim = 64, s.causal = 1;
    cr_assert_eq(rt_bwd_with_spec(env.ctx, &s, &r.args, (void *)env.stream, &e), FG_ERR_INVALID_ARGUMENT, "mask");
    s.causal = 0;
    a = r.args;
    a.workspace_size -= 1;
    cr_assert_eq(rt_bwd_with_spec(env.ctx, &s, &a, (void *)env.stream, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "workspace_size"), "%s", e.msg);
    bwd_free(&env, &r);
    gpu_close(&env);
}
