/* test_gpu_prefill.c: the serving forward's prefill (fg_attention_fwd_varlen with the longest sequence at least
 * 64 queries), which on Hopper with FLASHGEN_PREFILL_SM90A=1 runs the sm_90a forward's varlen=1 variants and
 * elsewhere the serving kernel (each case runs both ways):
 * packed sequences of mixed lengths (0, 1, and either side of the 64-row query block), queries longer than
 * keys, head dims 64 to 256, strided views, dense caches below capacity whose unused slots hold NaN, long
 * sequences. Every element of every sequence is judged against the CPU reference (serving_run.c). */
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"
#include "tests/serving_run.h"

static serve_case pc(fg_dtype dt, int batch, const int *lq, const int *lk, int hq, int hkv, int d, int causal) {
    serve_case c;
    memset(&c, 0, sizeof c);
    c.dt = dt, c.batch = batch, c.lq = lq, c.lk = lk, c.hq = hq, c.hkv = hkv, c.d = d, c.causal = causal;
    return c;
}

/* Runs case c on one context (FLASHGEN_PREFILL_SM90A as sm90a says) after checking which family
 * fg_explain_varlen names for it: the sm_90a forward where that context takes it (head_dim a multiple of 32),
 * the serving kernel elsewhere. */
static void run_prefill_with(const serve_case *c, int sm90a_on) {
    setenv("FLASHGEN_PREFILL_SM90A", sm90a_on ? "1" : "0", 1); /* read when gpu_open makes the context */
    gpu_env env;
    gpu_open(&env);
    serve_run *r = calloc(1, sizeof *r);
    cr_assert(r);
    serve_setup(&env, r, c);
    char text[2048];
    cr_assert_eq(fg_explain_varlen(env.ctx, &r->args, text, sizeof text), FG_OK, "%s", fg_last_error(env.ctx));
    const int own_v = c->dv != 0 && c->dv != c->d;
    const int sm90a = env.ctx->prefill_sm90a && c->d % 32 == 0 && c->k_mode != SERVE_K_PAGED &&
                      (!own_v || (c->d % 64 == 0 && c->dv % 64 == 0));
    cr_assert_eq(env.ctx->prefill_sm90a, sm90a_on && env.ctx->wgmma, "FLASHGEN_PREFILL_SM90A was not taken");
    if (sm90a)
        cr_assert(strstr(text, "prefill on the sm_90a forward") && strstr(text, "varlen=1"), "%s", text);
    else
        cr_assert(strstr(text, "kind=serve"), "%s", text);
    serve_launch(&env, r);
    serve_verify(r);
    serve_free(&env, r);
    free(r);
    gpu_close(&env);
}

/* Each case on both families where the GPU has both (Hopper), else on the serving kernel. */
static void run_prefill(const serve_case *c) {
    run_prefill_with(c, 1);
    run_prefill_with(c, 0);
}

static const int mixed[] = {0, 1, 63, 64, 65, 129, 300, 700, 1};

Test(prefill, mixed_lengths_around_the_query_block) {
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = pc(FG_DTYPE_BF16, 9, mixed, mixed, 8, 2, 128, causal);
        run_prefill(&c);
    }
}

Test(prefill, queries_and_keys_of_other_lengths) {
    /* causal with sq > sk: rows that see no key (O = 0, LSE = -inf); a sequence with keys and no queries,
     * one with queries and no keys */
    static const int lq[] = {100, 7, 0, 64, 250, 1, 90};
    static const int lk[] = {300, 7, 5, 0, 250, 1000, 33};
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = pc(FG_DTYPE_F16, 7, lq, lk, 4, 4, 64, causal);
        run_prefill(&c);
    }
}

Test(prefill, head_dims) {
    static const int lq[] = {70, 1, 130, 0, 200};
    static const int lk[] = {70, 9, 400, 3, 129};
    static const int dims[] = {64, 96, 128, 192, 256, 72};
    for (size_t i = 0; i < NELEM(dims); i++) {
        serve_case c = pc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 5, lq, lk, 6, 2, dims[i], (int)(i % 2));
        c.seed = 5 + i;
        run_prefill(&c);
    }
}

Test(prefill, gqa_strided_views_and_no_lse) {
    static const int lq[] = {128, 65, 1, 300};
    serve_case c = pc(FG_DTYPE_BF16, 4, lq, lq, 32, 8, 128, 1);
    c.strided = 1;
    run_prefill(&c);
    c.strided = 0, c.no_lse = 1, c.hkv = 1;
    run_prefill(&c);
}

Test(prefill, dense_cache_with_nan_in_unused_slots) {
    /* slots past seqused_k hold NaN (serving_run.c): keys there are masked, and the V rows under them must
     * not reach O (0 * NaN) */
    static const int lq[] = {100, 64, 90, 1};
    static const int lk[] = {1000, 65, 0, 130};
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = pc(FG_DTYPE_BF16, 4, lq, lk, 8, 2, 128, causal);
        c.k_mode = SERVE_K_DENSE, c.cap_k = 1100;
        run_prefill(&c);
        c.q_dense = 1;
        static const int lq_dense[] = {96, 96, 96, 96};
        c.lq = lq_dense;
        run_prefill(&c);
    }
}

Test(prefill, long_sequences) {
    static const int lq[] = {2500, 1, 1200, 777};
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = pc(FG_DTYPE_BF16, 4, lq, lq, 4, 2, 128, causal);
        c.seed = 40 + causal;
        run_prefill(&c);
    }
}

/* The model variants on both families: sliding windows (either side unbounded, 0, wider than the sequences; the
 * blocks left of a window skipped, those crossing its left edge masked), attention sinks (rows with no key get
 * LSE = the sink), softcaps, ALiBi and top-left causal masks, alone and together, causal or not, sq != sk both
 * ways. */
Test(prefill, model_variants) {
    static const int lq[] = {300, 64, 1, 0, 700, 129}, lk[] = {300, 200, 50, 70, 500, 129};
    static const struct { int causal, window, left, right, sinks, alibi; float softcap; int top_left; } v[] = {
        {1, 1, 100, 0, 0, 0, 0.f, 0},     /* Mistral-style causal window */
        {0, 1, 64, 64, 0, 0, 0.f, 0},     /* both sides bounded */
        {1, 1, 0, 0, 1, 0, 0.f, 0},       /* a window of 0 with sinks: the diagonal and the sink */
        {0, 1, -1, 5, 0, 0, 0.f, 0},      /* the left side unbounded */
        {1, 1, 5000, -1, 0, 0, 0.f, 0},   /* wider than every sequence */
        {1, 0, 0, 0, 1, 0, 0.f, 0},       /* sinks alone */
        {0, 0, 0, 0, 0, 0, 2.0f, 0},      /* softcap alone */
        {1, 0, 0, 0, 0, 1, 0.f, 0},       /* ALiBi, causal */
        {0, 0, 0, 0, 0, 1, 0.f, 0},       /* ALiBi, both sides */
        {1, 1, 127, 0, 1, 0, 3.0f, 0},    /* gpt-oss / Gemma: window + sinks + softcap */
        {1, 1, 200, 0, 1, 1, 4.0f, 0},    /* everything */
        {1, 0, 0, 0, 0, 0, 0.f, 1},    /* top-left causal */
        {1, 1, 64, -1, 0, 1, 0.f, 1},  /* top-left causal with a window and ALiBi */
    };
    for (size_t i = 0; i < NELEM(v); i++) {
        serve_case c = pc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 6, lq, lk, 8, 2, i % 3 == 2 ? 64 : 128, v[i].causal);
        c.window = v[i].window, c.window_left = v[i].left, c.window_right = v[i].right;
        c.sinks = v[i].sinks, c.alibi = v[i].alibi, c.softcap = v[i].softcap, c.seed = 500 + i;
        c.causal_top_left = v[i].top_left;
        run_prefill(&c);
    }
}

/* V of its own head dim (DeepSeek's 192/128, and V wider than Q and K) on the sm_90a forward's head_dim_v
 * variants (both head dims multiples of 64; 72/40 stays on the serving kernel), causal and not, GQA. */
Test(prefill, v_of_its_own_head_dim) {
    static const int lq[] = {300, 64, 1, 0, 700, 129}, lk[] = {300, 200, 50, 70, 500, 129};
    static const int dims[][2] = {{192, 128}, {128, 64}, {64, 128}, {72, 40}};
    for (size_t i = 0; i < NELEM(dims); i++) {
        serve_case c = pc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 6, lq, lk, 8, 2, dims[i][0], (int)(i % 2 == 0));
        c.dv = dims[i][1], c.seed = 600 + i;
        run_prefill(&c);
    }
}
