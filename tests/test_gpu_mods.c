/* test_gpu_mods.c: custom score and mask mods (fg_mod_create, docs/mods.md) in the serving forward on the GPU.
 * Each mod of the shipped examples runs over packed sequences of mixed lengths (0 and 1 among them), dense and
 * paged caches with split keys, and every element of O and the LSE is judged against the CPU reference, which
 * evaluates the same tree in fp64 (generator/mod.c) on the same aux arrays. Skipped, saying why, without a GPU. */
#include <stdlib.h>
#include <string.h>
#include "generator/mod.h"
#include "tests/serving_run.h"

static serve_case sc(fg_dtype dt, int batch, const int *lq, const int *lk, int hq, int hkv, int d, int causal) {
    serve_case c;
    memset(&c, 0, sizeof c);
    c.dt = dt, c.batch = batch, c.lq = lq, c.lk = lk, c.hq = hq, c.hkv = hkv, c.d = d, c.causal = causal;
    return c;
}

static fg_mod *traced(const char *text) {
    fg_mod *m = NULL;
    cr_assert_eq(fg_mod_create(text, strlen(text), "mod.lua", &m), FG_OK, "%s", fg_last_error(NULL));
    return m;
}

/* self-attention sequences (each sequence's queries and keys alike), 0 and 1 among them */
static const int mixed[] = {5, 0, 1, 130, 64, 17, 1, 200};
static const int decode_q[] = {1, 1, 1, 1, 1};
static const int cache_k[] = {1000, 1, 0, 257, 64};

/* The case over packed sequences, then as a decode over a paged cache with three key splits. */
static void run_both(serve_case c) {
    serve_case_run(&c);
    serve_case d = c;
    d.batch = 5, d.lq = decode_q, d.lk = cache_k, d.q_dense = 1, d.k_mode = SERVE_K_PAGED, d.page_size = 16;
    d.num_splits = 3, d.causal = 1, d.seed = c.seed + 1;
    serve_case_run(&d);
}

Test(mods, alibi_softcap_and_a_bias_table_as_score_mods) {
    static float slopes[8], bias[8][129];
    for (int h = 0; h < 8; h++) slopes[h] = 0.5f / (float)(1 << h);
    for (int h = 0; h < 8; h++)
        for (int r = 0; r < 129; r++) bias[h][r] = 0.01f * (float)((h * 37 + r * 11) % 50) - 0.25f;
    fg_mod *alibi = traced("aux = { slopes = fg.aux('f32', 1) }\n"
                           "score_mod = function(s, b, h, q, kv) return s - fg.load(slopes, h) * fg.abs(q - kv) end\n");
    fg_mod *cap = traced("score_mod = function(s, b, h, q, kv) return 20.0 * fg.tanh(s / 20.0) end\n");
    fg_mod *table = traced("aux = { bias = fg.aux('f32', 2) }\n"
                           "score_mod = function(s, b, h, q, kv)\n"
                           "    return s + fg.load(bias, h, fg.min(fg.max(kv - q, -64), 64) + 64)\n"
                           "end\n");
    serve_case c = sc(FG_DTYPE_BF16, 8, mixed, mixed, 8, 2, 128, 1);
    c.mod = alibi, c.aux[0] = slopes, c.aux_shape[0][0] = 8, c.seed = 900;
    run_both(c);
    c = sc(FG_DTYPE_F16, 8, mixed, mixed, 8, 2, 64, 0);
    c.mod = cap, c.seed = 910;
    run_both(c);
    c = sc(FG_DTYPE_BF16, 8, mixed, mixed, 8, 2, 128, 1);
    c.mod = table, c.aux[0] = bias, c.aux_shape[0][0] = 8, c.aux_shape[0][1] = 129, c.seed = 920;
    run_both(c);
    fg_mod_destroy(alibi), fg_mod_destroy(cap), fg_mod_destroy(table);
}

/* T5's bucketed relative-position bias (bidirectional, 32 buckets, distances past 128 in the last), buckets by
 * fg.floor. (The 1e-3 keeps the fp32 kernel and the fp64 reference on one side of the integers that powers of two
 * land on exactly; elsewhere the values stay 0.005 or more from an integer.) */
Test(mods, t5_buckets) {
    static float bias[8][32];
    for (int h = 0; h < 8; h++)
        for (int r = 0; r < 32; r++) bias[h][r] = 0.05f * (float)((h * 7 + r * 5) % 21) - 0.5f;
    fg_mod *t5 = traced("aux = { bias = fg.aux('f32', 2) }\n"
                        "score_mod = function(s, b, h, q, kv)\n"
                        "    local rel = kv - q\n"
                        "    local side = fg.where(fg.gt(rel, 0), 16, 0)\n"
                        "    local a = fg.abs(rel)\n"
                        "    local far = 8 + fg.floor(fg.log(fg.float(a) / 8.0) / 2.772588722239781 * 8.0 + 1e-3)\n"
                        "    return s + fg.load(bias, h, side + fg.where(fg.lt(a, 8), a, fg.min(far, 15)))\n"
                        "end\n");
    serve_case c = sc(FG_DTYPE_BF16, 8, mixed, mixed, 8, 2, 64, 0);
    c.mod = t5, c.aux[0] = bias, c.aux_shape[0][0] = 8, c.aux_shape[0][1] = 32, c.seed = 970;
    run_both(c);
    fg_mod_destroy(t5);
}

Test(mods, document_prefix_window_and_block_masks) {
    static int32_t doc[8][200], prefix[8];
    for (int b = 0; b < 8; b++) {
        prefix[b] = (b * 13) % 40;
        for (int t = 0; t < 200; t++) doc[b][t] = t / (23 + b);
    }
    static int32_t blocks[4][4] = {{1, 0, 0, 0}, {1, 1, 0, 0}, {0, 0, 0, 0}, {0, 1, 0, 1}}; /* row 2: no key */
    fg_mod *document = traced("aux = { doc = fg.aux('i32', 2) }\n"
                              "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, b, q), fg.load(doc, b, kv)) end\n");
    fg_mod *prefix_lm = traced("aux = { prefix = fg.aux('i32', 1) }\n"
                               "mask_mod = function(b, h, q, kv)\n"
                               "    return fg.or_(fg.le(kv, q), fg.lt(kv, fg.load(prefix, b)))\n"
                               "end\n");
    fg_mod *window = traced("mask_mod = function(b, h, q, kv) return fg.and_(fg.le(kv, q), fg.gt(kv, q - 32)) end\n");
    fg_mod *sparse = traced("aux = { blocks = fg.aux('i32', 2) }\n"
                            "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(blocks, q // 64, kv // 64), 1) end\n"
                            "score_mod = function(s, b, h, q, kv) return s * 0.5 end\n");
    serve_case c = sc(FG_DTYPE_BF16, 8, mixed, mixed, 8, 2, 128, 0);
    c.mod = document, c.aux[0] = doc, c.aux_shape[0][0] = 8, c.aux_shape[0][1] = 200, c.seed = 930;
    serve_case_run(&c);
    c = sc(FG_DTYPE_F16, 8, mixed, mixed, 4, 4, 64, 0);
    c.mod = prefix_lm, c.aux[0] = prefix, c.aux_shape[0][0] = 8, c.seed = 940;
    serve_case_run(&c);
    c = sc(FG_DTYPE_BF16, 8, mixed, mixed, 8, 2, 128, 0);
    c.mod = window, c.seed = 950;
    run_both(c);
    c = sc(FG_DTYPE_BF16, 8, mixed, mixed, 8, 1, 64, 0);
    c.mod = sparse, c.aux[0] = blocks, c.aux_shape[0][0] = 4, c.aux_shape[0][1] = 4, c.seed = 960;
    serve_case_run(&c);
    fg_mod_destroy(document), fg_mod_destroy(prefix_lm), fg_mod_destroy(window), fg_mod_destroy(sparse);
}

/* A call's aux arrays are checked against the mod's declarations before anything launches. */
Test(mods, aux_arrays_checked) {
    gpu_env env;
    gpu_open(&env);
    fg_mod *m = traced("aux = { slopes = fg.aux('f32', 1) }\n"
                       "score_mod = function(s, b, h, q, kv) return s - fg.load(slopes, h) * fg.abs(q - kv) end\n");
    static float slopes[8];
    serve_case c = sc(FG_DTYPE_BF16, 8, mixed, mixed, 8, 2, 64, 1);
    c.mod = m, c.aux[0] = slopes, c.aux_shape[0][0] = 8;
    serve_run *r = calloc(1, sizeof *r);
    cr_assert(r);
    serve_setup(&env, r, &c);
    fg_varlen_args a = r->args;
    a.mod_aux[0].dtype = FG_DTYPE_I32;
    cr_assert_eq(fg_attention_fwd_varlen(env.ctx, &a, env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "mod_aux[0] (slopes) must be f32 of rank 1"), "%s", fg_last_error(env.ctx));
    a = r->args;
    a.mod_aux[1] = a.mod_aux[0];
    cr_assert_eq(fg_attention_fwd_varlen(env.ctx, &a, env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "mod_aux[1] is set"), "%s", fg_last_error(env.ctx));
    a = r->args;
    a.mod_aux[0].stride[0] = 2;
    cr_assert_eq(fg_attention_fwd_varlen(env.ctx, &a, env.stream), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(env.ctx), "contiguous"), "%s", fg_last_error(env.ctx));
    serve_free(&env, r);
    free(r);
    fg_mod_destroy(m);
    gpu_close(&env);
}
