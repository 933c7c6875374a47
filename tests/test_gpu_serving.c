/* test_gpu_serving.c: the serving forward (fg_attention_fwd_varlen) on the GPU: packed variable-length
 * batches, dense caches with seqused_k, paged caches of several page sizes with shuffled tables, decode with
 * packed GQA and every split count, fixed split sizes (batch invariance), CUDA-graph replay, attention sinks, sliding windows, softcaps, ALiBi,
 * head dims above 256 (absorbed MLA's 576/512 with V inside K, 512), K and V by TMA, FP8 KV caches (e4m3 and e5m2 K and V
 * with their descales), and the checking mode of device-resident inputs. Every element of every sequence is judged
 * against the CPU reference (serving_run.c); GPU tests skip with the reason where there is no device. */
#include <stdlib.h>
#include <string.h>
#include "reference/reference.h"
#include "runtime/runtime.h"
#include "tests/serving_run.h"

static serve_case sc(fg_dtype dt, int batch, const int *lq, const int *lk, int hq, int hkv, int d, int causal) {
    serve_case c;
    memset(&c, 0, sizeof c);
    c.dt = dt, c.batch = batch, c.lq = lq, c.lk = lk, c.hq = hq, c.hkv = hkv, c.d = d, c.causal = causal;
    return c;
}

/* ---- packed variable-length batches ---- */

static const int mixed_q[] = {5, 0, 1, 130, 64, 17, 1, 200};
static const int mixed_k[] = {5, 0, 1, 130, 64, 17, 1, 200};
static const int uneven_q[] = {1, 7, 0, 33, 90, 3};
static const int uneven_k[] = {40, 7, 5, 0, 300, 1};
static const int decode_q[] = {1, 1, 1, 1, 1};
static const int cache_k[] = {1000, 1, 0, 257, 64};

Test(varlen, mixed_lengths_with_0_and_1) {
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = sc(FG_DTYPE_BF16, 8, mixed_q, mixed_k, 8, 2, 128, causal);
        serve_case_run(&c);
    }
}

Test(varlen, queries_and_keys_of_other_lengths) {
    /* causal with sq > sk leaves rows that see no key (O = 0, LSE = -inf); sk = 0 with sq > 0 too */
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = sc(FG_DTYPE_F16, 6, uneven_q, uneven_k, 4, 4, 64, causal);
        serve_case_run(&c);
    }
}

Test(varlen, mqa_and_head_dims) {
    static const int dims[] = {8, 64, 72, 96, 128, 192, 256};
    for (size_t i = 0; i < NELEM(dims); i++) {
        serve_case c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 1, dims[i], (int)(i % 2));
        serve_case_run(&c);
    }
}

/* Plain dense tensors (q [1, sq, hq, d], K and V [1, sk, hkv, d], no lengths at all): the call the backward's
 * users make for O and the LSE. Query counts below, at and above the key count, odd head dims, GQA, V of its own
 * head dim, both masks and dtypes. */
Test(varlen, dense_tensors_without_lengths) {
    static const int dims[][2] = {{72, 72}, {64, 64}, {128, 128}, {192, 128}, {96, 96}, {40, 40}, {88, 88}};
    static const int lens[][2] = {{119, 202}, {90, 120}, {148, 243}, {200, 200}, {161, 90}};
    for (size_t i = 0; i < NELEM(dims); i++)
        for (size_t j = 0; j < NELEM(lens); j++)
            for (int causal = 0; causal < 2; causal++) {
                serve_case c = sc((i + j) % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 1, &lens[j][0], &lens[j][1], 4, 2,
                                  dims[i][0], causal);
                c.dv = dims[i][1], c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.no_seqused = 1, c.num_splits = 1;
                c.seed = 300 + 16 * i + 2 * j + (size_t)causal;
                serve_case_run(&c);
            }
}

Test(varlen, strided_views_and_no_lse) {
    serve_case c = sc(FG_DTYPE_BF16, 8, mixed_q, mixed_k, 6, 3, 128, 1);
    c.strided = 1;
    serve_case_run(&c);
    c.strided = 0;
    c.no_lse = 1;
    serve_case_run(&c);
}

/* The tma=1 variants (K and V by TMA; Hopper and newer): packed keys whose loads run on into the next
 * sequence, dense caches whose unused slots hold NaN, decode and prefill tiles, head dims 64 to 256, splits. */
Test(varlen, tma_loads_of_keys) {
    gpu_env env;
    gpu_open(&env);
    const int cc = gpu_cc(&env);
    gpu_close(&env);
    if (cc < 90) cr_skip_test("tma=1 serving variants need sm_90 or newer (this GPU is sm_%d)", cc);
    static const int tiles[][4] = {{16, 64, 4, 4}, {32, 64, 4, 3}, {64, 64, 4, 2}};
    static const int dims[] = {64, 128, 256};
    for (size_t i = 0; i < NELEM(tiles); i++)
        for (size_t j = 0; j < NELEM(dims); j++) {
            serve_case c = sc(j == 1 ? FG_DTYPE_BF16 : FG_DTYPE_F16, 6, uneven_q, uneven_k, 8, 2, dims[j], (int)(i % 2));
            memcpy(c.tiles, tiles[i], sizeof c.tiles);
            if (dims[j] == 256) { /* what shared memory holds there: 3 stages, 32 keys on the 64-row tile */
                c.tiles[3] = c.tiles[3] > 3 ? 3 : c.tiles[3];
                if (c.tiles[0] == 64) c.tiles[1] = 32;
            }
            c.tma = 1;
            serve_case_run(&c);
            serve_case d = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 8, dims[j], 0);
            d.q_dense = 1, d.k_mode = SERVE_K_DENSE, d.cap_k = 1100, d.num_splits = 3, d.tma = 1;
            memcpy(d.tiles, tiles[0], sizeof d.tiles);
            if (dims[j] == 256) d.tiles[3] = 3;
            serve_case_run(&d);
        }
}

/* Attention sinks (gpt-oss): a per-head logit in every row's denominator; split 0's state holds it, so the
 * merge counts it once for every split count; rows that see no key get O = 0 and LSE = the sink. */
Test(sinks, decode_every_split_count_packed_and_paged) {
    for (int splits = 1; splits <= 5; splits++) {
        serve_case c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 8, 128, 0);
        c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100, c.num_splits = splits, c.sinks = 1;
        serve_case_run(&c);
    }
    serve_case c = sc(FG_DTYPE_F16, 5, decode_q, cache_k, 32, 8, 64, 0);
    c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 16, c.sinks = 1, c.seed = 77;
    serve_case_run(&c);
}

Test(sinks, varlen_with_rows_that_see_no_key) {
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, 128, causal);
        c.sinks = 1;
        serve_case_run(&c);
    }
}

/* Sliding windows: the keys a query sees around its diagonal, either side unbounded (-1), with causal masks,
 * split keys (counted or of a fixed size), paged caches and sinks; windows of 0 and wider than the sequences. */
Test(window, varlen_windows) {
    static const int w[][3] = {{0, 5, 2}, {1, 7, -1}, {0, 0, 0}, {1, 0, -1}, {0, 1000, 1000}, {0, -1, 3}};
    for (size_t i = 0; i < NELEM(w); i++) {
        serve_case c = sc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, i % 3 ? 128 : 64, w[i][0]);
        c.window = 1, c.window_left = w[i][1], c.window_right = w[i][2], c.seed = 90 + i;
        c.sinks = i == 1;
        serve_case_run(&c);
    }
}

Test(window, decode_over_caches_with_splits) {
    for (int splits = 1; splits <= 3; splits++) {
        serve_case c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 8, 128, 1);
        c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100, c.num_splits = splits;
        c.window = 1, c.window_left = 100, c.window_right = -1, c.sinks = splits == 2;
        serve_case_run(&c);
    }
    serve_case c = sc(FG_DTYPE_F16, 5, decode_q, cache_k, 32, 8, 128, 0);
    c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 16, c.window = 1, c.window_left = 50, c.window_right = 0;
    serve_case_run(&c);
    /* fixed split sizes count from key 0: the splits wholly left of the window are empty */
    c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 8, 128, 1);
    c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100, c.split_size = 128, c.window = 1, c.window_left = 200;
    c.window_right = -1;
    serve_case_run(&c);
}

/* Logit softcaps and ALiBi: on every score (not only masked blocks), with packed GQA rows of several heads (each
 * row its own head's slope), split keys, paged caches, and combined with windows, sinks and causal masks. */
Test(softcap, varlen_and_decode) {
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = sc(causal ? FG_DTYPE_F16 : FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, 128, causal);
        c.softcap = 1.5f, c.seed = 300 + causal;
        serve_case_run(&c);
    }
    for (int splits = 1; splits <= 3; splits += 2) {
        serve_case c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 8, 128, 0);
        c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 16, c.num_splits = splits, c.softcap = 3.0f;
        serve_case_run(&c);
    }
    /* softcap + window (Gemma 2), with sinks */
    serve_case c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, 64, 1);
    c.softcap = 2.0f, c.window = 1, c.window_left = 9, c.window_right = -1, c.sinks = 1, c.seed = 303;
    serve_case_run(&c);
}

Test(alibi, varlen_and_decode) {
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, 128, causal);
        c.alibi = 1, c.seed = 310 + causal;
        serve_case_run(&c);
    }
    serve_case c = sc(FG_DTYPE_F16, 5, decode_q, cache_k, 32, 8, 128, 1);
    c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100, c.num_splits = 3, c.alibi = 1;
    serve_case_run(&c);
    /* every variant at once */
    c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, 128, 1);
    c.alibi = 1, c.softcap = 4.0f, c.sinks = 1, c.window = 1, c.window_left = 20, c.window_right = 0, c.seed = 313;
    serve_case_run(&c);
}

/* Top-left aligned causal masks (query i sees keys j <= i): sq < sk and sq > sk in one batch (rows past the keys
 * see them all; the bottom-right mask would leave some empty), split decode, with a window around d. */
Test(top_left, causal_masks) {
    serve_case c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, 128, 1);
    c.causal_top_left = 1, c.seed = 320;
    serve_case_run(&c);
    c = sc(FG_DTYPE_F16, 5, decode_q, cache_k, 32, 8, 64, 1);
    c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100, c.num_splits = 2, c.causal_top_left = 1, c.seed = 321;
    serve_case_run(&c);
    c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, 64, 1);
    c.causal_top_left = 1, c.window = 1, c.window_left = 30, c.window_right = -1, c.sinks = 1, c.seed = 322;
    serve_case_run(&c);
}

/* V with a head dim of its own (DeepSeek's 192/128; narrower and wider V): O has V's head dim; prefill tiles,
 * decode with splits over a paged cache, an explicit decode tile, causal or not, with a window. */
Test(head_dim_v, unequal_qk_and_v) {
    static const int dims[][2] = {{192, 128}, {128, 64}, {64, 128}, {72, 40}};
    for (size_t i = 0; i < NELEM(dims); i++) {
        serve_case c = sc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, dims[i][0], (int)(i % 2));
        c.dv = dims[i][1], c.seed = 330 + i;
        serve_case_run(&c);
    }
    serve_case c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 8, 192, 1);
    c.dv = 128, c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 16, c.num_splits = 3, c.seed = 335;
    serve_case_run(&c);
    c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 8, 192, 0);
    c.dv = 128, c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100, c.window = 1, c.window_left = 300;
    c.window_right = -1, c.tiles[0] = 16, c.tiles[1] = 64, c.tiles[2] = 4, c.tiles[3] = 2, c.seed = 336;
    serve_case_run(&c);
}

/* Q/K above 256 and V above 256 (the wide variants, O's columns split over the key warps): absorbed MLA's 576/512
 * with V a prefix view of K in a paged cache (decode with 16 and 128 query heads on one KV head, split or not,
 * and prefill), head_dim 512 (decode over a dense cache, packed prefill), 576/512 with a V of its own, and the
 * model variants on a wide tile (sinks and a window: the epilogue's extra state). */
Test(wide, mla_and_head_dim_512) {
    static const int heads[] = {16, 128, 32}; /* the 16-row and 32-row decode tiles, and the prefill tile */
    for (int i = 0; i < 3; i++) {
        serve_case c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, heads[i], 1, 576, 0);
        c.dv = 512, c.v_in_k = 1, c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 64, c.num_splits = i == 1 ? 0 : 3;
        c.seed = 340 + i;
        serve_case_run(&c);
    }
    serve_case c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 16, 1, 576, 1);
    c.dv = 512, c.v_in_k = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 16, c.seed = 342;
    serve_case_run(&c);
    c = sc(FG_DTYPE_F16, 5, decode_q, cache_k, 8, 2, 512, 1);
    c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100, c.num_splits = 2, c.seed = 343;
    serve_case_run(&c);
    c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 2, 512, 1); /* 16 rows a KV head: 16 x 32 on 2 key warps */
    c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100, c.seed = 347;
    serve_case_run(&c);
    c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 4, 2, 512, 1);
    c.seed = 344;
    serve_case_run(&c);
    c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 4, 1, 576, 0);
    c.dv = 512, c.strided = 1, c.seed = 345;
    serve_case_run(&c);
    c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 1, 576, 1);
    c.dv = 512, c.v_in_k = 1, c.sinks = 1, c.window = 1, c.window_left = 50, c.window_right = -1, c.seed = 346;
    serve_case_run(&c);
}

Test(varlen, explicit_tiles) {
    static const int tiles[][4] = {{16, 64, 4, 2}, {32, 64, 4, 3}, {64, 64, 4, 2}, {128, 32, 8, 2}, {64, 128, 8, 2}};
    for (size_t i = 0; i < NELEM(tiles); i++) {
        serve_case c = sc(FG_DTYPE_BF16, 6, uneven_q, uneven_k, 8, 2, 128, 1);
        memcpy(c.tiles, tiles[i], sizeof c.tiles);
        serve_case_run(&c);
    }
}

/* ---- dense caches and paged caches ---- */


Test(cache, dense_cache_below_capacity) {
    serve_case c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 8, 128, 0);
    c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100;
    serve_case_run(&c);
}

Test(cache, paged_page_sizes) {
    static const int sizes[] = {1, 7, 16, 64, 256};
    for (size_t i = 0; i < NELEM(sizes); i++) {
        serve_case c = sc(FG_DTYPE_BF16, 5, decode_q, cache_k, 32, 8, 128, 0);
        c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = sizes[i], c.seed = 11 + i;
        serve_case_run(&c);
    }
}

Test(cache, paged_prefill_with_packed_queries) {
    static const int lq[] = {3, 40, 1, 0, 100};
    static const int lk[] = {10, 40, 500, 0, 130};
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = sc(FG_DTYPE_F16, 5, lq, lk, 8, 2, 128, causal);
        c.k_mode = SERVE_K_PAGED, c.page_size = 16;
        serve_case_run(&c);
        c.page_size = 64;
        c.d = 64;
        serve_case_run(&c);
    }
}

/* ---- decode: packed GQA, speculative query lengths, splits ---- */

Test(decode, query_lengths_1_to_16) {
    static const int lens[] = {1, 2, 4, 5, 8, 16};
    static const int lk[] = {3000, 77, 1024, 4096};
    for (size_t i = 0; i < NELEM(lens); i++) {
        int lq[4] = {lens[i], lens[i], lens[i], lens[i]};
        serve_case c = sc(FG_DTYPE_BF16, 4, lq, lk, 32, 8, 128, 1);
        c.q_dense = 1, c.k_mode = SERVE_K_DENSE;
        serve_case_run(&c);
    }
}

Test(decode, every_split_count) {
    static const int lq[] = {1, 1, 1};
    static const int lk[] = {5000, 130, 64};
    static const int splits[] = {1, 2, 3, 7, 16, 64, 100};
    for (size_t i = 0; i < NELEM(splits); i++) {
        serve_case c = sc(FG_DTYPE_BF16, 3, lq, lk, 32, 8, 128, 0);
        c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 16, c.num_splits = splits[i];
        serve_case_run(&c);
    }
}

Test(decode, head_dims_with_splits) {
    static const int dims[] = {64, 96, 128, 256, 40};
    static const int lq[] = {2, 2};
    static const int lk[] = {2048, 333};
    for (size_t i = 0; i < NELEM(dims); i++) {
        serve_case c = sc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, 2, lq, lk, 16, 2, dims[i], (int)(i % 2));
        c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.num_splits = 5;
        serve_case_run(&c);
    }
}

Test(decode, chosen_split_on_one_long_sequence) {
    static const int lq[] = {1};
    static const int lk[] = {70000};
    serve_case c = sc(FG_DTYPE_BF16, 1, lq, lk, 32, 8, 128, 0);
    c.q_dense = 1, c.k_mode = SERVE_K_DENSE;
    serve_case_run(&c);
}

Test(decode, gqa_group_of_7) {
    static const int lq[] = {3, 3};
    static const int lk[] = {900, 31};
    serve_case c = sc(FG_DTYPE_BF16, 2, lq, lk, 14, 2, 128, 1);
    c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 4, c.num_splits = 3;
    serve_case_run(&c);
}

/* A sequence's result under split_size does not depend on its batchmates: alone and in a batch, bitwise. */
Test(decode, fixed_split_size_is_batch_invariant) {
    gpu_env env;
    gpu_open(&env);
    static const int lq1[] = {1}, lk1[] = {3000};
    static const int lq3[] = {1, 1, 1}, lk3[] = {100, 3000, 12000};
    serve_case a = sc(FG_DTYPE_BF16, 1, lq1, lk1, 32, 8, 128, 0), b = sc(FG_DTYPE_BF16, 3, lq3, lk3, 32, 8, 128, 0);
    a.q_dense = b.q_dense = 1;
    a.k_mode = b.k_mode = SERVE_K_PACKED;
    a.split_size = b.split_size = 1024;
    serve_run *ra = calloc(1, sizeof *ra), *rb = calloc(1, sizeof *rb);
    cr_assert(ra && rb);
    serve_setup(&env, ra, &a);
    serve_setup(&env, rb, &b);
    /* the same sequence in both: copy the lone sequence's q, k, v into the batch's second one */
    const size_t qrow = (size_t)32 * 128 * 2, krow = (size_t)8 * 128 * 2;
    CK(env.cu->cuMemcpyDtoD(rb->q.dptr + qrow, ra->q.dptr, qrow));
    CK(env.cu->cuMemcpyDtoD(rb->k.dptr + 100 * krow, ra->k.dptr, 3000 * krow));
    CK(env.cu->cuMemcpyDtoD(rb->v.dptr + 100 * krow, ra->v.dptr, 3000 * krow));
    serve_launch(&env, ra);
    serve_launch(&env, rb);
    cr_assert(memcmp(ra->o.img, rb->o.img + qrow, qrow) == 0, "O of the sequence differs alone and in a batch");
    cr_assert(memcmp(ra->lse.img, rb->lse.img + 32 * 4, 32 * 4) == 0, "LSE differs alone and in a batch");
    serve_verify(ra);
    serve_free(&env, ra);
    serve_free(&env, rb);
    free(ra), free(rb);
    gpu_close(&env);
}

/* Captured at a short context, replayed after the device lengths grow: the grid and workspace hold. */
Test(decode, graph_replay_at_longer_context) {
    gpu_env env;
    gpu_open(&env);
    static const int lq[] = {1, 1, 1, 1};
    static const int lk[] = {8000, 8000, 8000, 8000};
    serve_case c = sc(FG_DTYPE_BF16, 4, lq, lk, 32, 8, 128, 0);
    c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 64;
    serve_run *r = calloc(1, sizeof *r);
    cr_assert(r);
    serve_setup(&env, r, &c);
    r->args.max_seqlen_k = 0; /* plan for the capacity */
    size_t ws = 0;
    cr_assert_eq(fg_attention_fwd_varlen_workspace_size(env.ctx, &r->args, &ws), FG_OK);
    cr_assert(ws <= r->ws_size || r->ws_size == 0 || ws > 0);
    if (ws > r->ws_size) {
        env.cu->cuMemFree(r->ws);
        CK(env.cu->cuMemAlloc(&r->ws, ws));
        r->args.workspace = (void *)(uintptr_t)r->ws, r->args.workspace_size = ws, r->ws_size = ws;
    }
    const int32_t short_lens[4] = {10, 100, 1, 64};
    CK(env.cu->cuMemcpyHtoD(r->d_used, short_lens, sizeof short_lens));
    fg_status st = fg_attention_fwd_varlen(env.ctx, &r->args, env.stream); /* loads the kernels before capture */
    cr_assert_eq(st, FG_OK, "%s", fg_last_error(env.ctx));
    CK(env.cu->cuStreamSynchronize(env.stream));
    CUgraph graph;
    CUgraphExec exec;
    CK(env.cu->cuStreamBeginCapture(env.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    st = fg_attention_fwd_varlen(env.ctx, &r->args, env.stream);
    CK(env.cu->cuStreamEndCapture(env.stream, &graph));
    cr_assert_eq(st, FG_OK, "captured call: %s", fg_last_error(env.ctx));
    CK(env.cu->cuGraphInstantiateWithFlags(&exec, graph, 0));
    CK(env.cu->cuMemcpyHtoD(r->d_used, r->lk, 4 * sizeof(int32_t))); /* the full lengths */
    dbuf_poison(&env, &r->o);
    dbuf_poison(&env, &r->lse);
    CK(env.cu->cuGraphLaunch(exec, env.stream));
    CK(env.cu->cuStreamSynchronize(env.stream));
    dbuf_download(&env, &r->o);
    dbuf_download(&env, &r->lse);
    serve_verify(r);
    env.cu->cuGraphExecDestroy(exec);
    env.cu->cuGraphDestroy(graph);
    serve_free(&env, r);
    free(r);
    gpu_close(&env);
}

/* ---- FP8 KV caches (kv=e4m3|e5m2: K and V in FP8 beside 16-bit queries, dequantized in the kernel) ----
 * Every case alternates the formats (e4m3, e5m2), the queries' dtype (fp16, bf16) and the descales (none, one for
 * each tensor, one per (sequence, KV head)); the reference decodes K and V and multiplies them by their descales. */

static serve_case kv8(int i, int batch, const int *lq, const int *lk, int hq, int hkv, int d, int causal) {
    serve_case c = sc(i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, batch, lq, lk, hq, hkv, d, causal);
    c.kv_fp8 = i / 2 % 2 ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3;
    c.descale = (i + 2) % 3;
    c.seed = 400 + (uint64_t)i;
    return c;
}

/* decode steps of 1 and 4 query tokens (packed GQA: 4 query heads a KV head, 4 or 16 rows) over a dense cache */
Test(kv_fp8, decode_query_lengths_1_and_4) {
    static const int lk[] = {3000, 77, 1024, 4096};
    for (int i = 0; i < 6; i++) {
        const int n = i < 3 ? 1 : 4;
        const int lq[4] = {n, n, n, n};
        serve_case c = kv8(i, 4, lq, lk, 32, 8, 128, n > 1);
        c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 4200;
        serve_case_run(&c);
    }
}

/* split keys (1 to 7 splits and the chosen count) with packed GQA groups of 4 and 7, head dims 64 to 256 */
Test(kv_fp8, packed_gqa_and_splits) {
    static const int splits[] = {0, 1, 2, 3, 7};
    static const int dims[] = {64, 128, 256};
    for (size_t i = 0; i < NELEM(splits); i++)
        for (size_t j = 0; j < NELEM(dims); j++) {
            serve_case c = kv8((int)(i * 3 + j), 5, decode_q, cache_k, 32, 8, dims[j], 0);
            c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 16, c.num_splits = splits[i];
            serve_case_run(&c);
        }
    static const int lq[] = {3, 3}, lk[] = {900, 31};
    for (int i = 0; i < 4; i++) {
        serve_case c = kv8(i, 2, lq, lk, 14, 2, 128, 1);
        c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 4, c.num_splits = 3;
        serve_case_run(&c);
    }
}

/* pages of 1, 16 and 256 slots in shuffled order (the pages no sequence uses, and the slots past a sequence's keys,
 * hold FP8 NaN codes) */
Test(kv_fp8, paged_page_sizes) {
    static const int sizes[] = {1, 16, 256};
    for (size_t i = 0; i < NELEM(sizes); i++)
        for (int f = 0; f < 2; f++) {
            serve_case c = kv8((int)(2 * i + f), 5, decode_q, cache_k, 32, 8, 128, 0);
            c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = sizes[i];
            serve_case_run(&c);
        }
}

/* packed prefill of mixed lengths (0 and 1 among them), causal or not, packed keys and paged ones, strided views */
Test(kv_fp8, varlen_prefill_mixed_lengths) {
    static const int dims[] = {64, 128, 256};
    for (int i = 0; i < 6; i++) {
        serve_case c = kv8(i, 8, mixed_q, mixed_k, 8, 2, dims[i % 3], i / 3);
        c.strided = i == 4;
        serve_case_run(&c);
    }
    for (int causal = 0; causal < 2; causal++) {
        serve_case c = kv8(causal + 1, 6, uneven_q, uneven_k, 4, 4, 64, causal);
        serve_case_run(&c);
        static const int lq[] = {3, 40, 1, 0, 100}, lk[] = {10, 40, 500, 0, 130};
        c = kv8(causal + 3, 5, lq, lk, 8, 2, 128, causal);
        c.k_mode = SERVE_K_PAGED, c.page_size = 16;
        serve_case_run(&c);
    }
}

/* every tile kind (the decode tiles dequantize by warp, the others by the whole CTA), V of its own head dim, and
 * the model variants, which see the descaled scores */
Test(kv_fp8, tiles_head_dim_v_and_model_variants) {
    static const int tiles[][4] = {{16, 64, 4, 2}, {32, 64, 4, 3}, {64, 64, 4, 2}, {128, 32, 8, 2}};
    for (size_t i = 0; i < NELEM(tiles); i++) {
        serve_case c = kv8((int)i, 6, uneven_q, uneven_k, 8, 2, 128, 1);
        memcpy(c.tiles, tiles[i], sizeof c.tiles);
        serve_case_run(&c);
    }
    serve_case c = kv8(1, 6, uneven_q, uneven_k, 8, 2, 192, 1);
    c.dv = 128;
    serve_case_run(&c);
    c = kv8(2, 5, decode_q, cache_k, 32, 8, 64, 1); /* gpt-oss: sinks and a window, split */
    c.q_dense = 1, c.k_mode = SERVE_K_DENSE, c.cap_k = 1100, c.num_splits = 3, c.sinks = 1, c.window = 1;
    c.window_left = 100, c.window_right = -1;
    serve_case_run(&c);
    c = kv8(3, 6, uneven_q, uneven_k, 8, 2, 128, 1);
    c.softcap = 2.0f, c.alibi = 1;
    serve_case_run(&c);
}

/* explain names the cache's dtype and its descales */
Test(kv_fp8, explain_names_the_cache) {
    gpu_env env;
    gpu_open(&env);
    serve_case c = kv8(0, 5, decode_q, cache_k, 32, 8, 128, 0);
    c.q_dense = 1, c.k_mode = SERVE_K_PAGED, c.page_size = 16, c.descale = 2;
    serve_run *r = calloc(1, sizeof *r);
    cr_assert(r);
    serve_setup(&env, r, &c);
    char text[2048];
    cr_assert_eq(fg_explain_varlen(env.ctx, &r->args, text, sizeof text), FG_OK, "%s", fg_last_error(env.ctx));
    cr_assert(strstr(text, "kv=e4m3") && strstr(text, "e4m3 (an FP8 KV cache)") &&
                  strstr(text, "v_descale one per (sequence, KV head)"), "%s", text);
    serve_free(&env, r);
    free(r);
    gpu_close(&env);
}

/* ---- device-resident inputs ---- */

/* Runs r's call with the checking option on and one device array replaced; expects `want` in the error. */
static void expect_refused(gpu_env *env, serve_run *r, CUdeviceptr dst, const int32_t *bad, size_t n, const char *want) {
    CK(env->cu->cuMemcpyHtoD(dst, bad, n * 4));
    cr_assert_eq(fg_context_set_option(env->ctx, FG_OPTION_CHECK_INPUTS, 1), FG_OK);
    const fg_status st = fg_attention_fwd_varlen(env->ctx, &r->args, env->stream);
    cr_assert_eq(st, FG_ERR_INVALID_ARGUMENT, "a bad entry was not refused (%s)", want);
    cr_assert(strstr(fg_last_error(env->ctx), want), "'%s' does not name %s", fg_last_error(env->ctx), want);
    cr_assert_eq(fg_context_set_option(env->ctx, FG_OPTION_CHECK_INPUTS, 0), FG_OK);
}

Test(inputs, checking_mode_names_the_first_bad_entry) {
    gpu_env env;
    gpu_open(&env);
    static const int lq[] = {4, 6, 2}, lk[] = {40, 60, 20};
    serve_case c = sc(FG_DTYPE_BF16, 3, lq, lk, 8, 2, 64, 1);
    serve_run *r = calloc(1, sizeof *r);
    cr_assert(r);
    serve_setup(&env, r, &c);
    const int32_t down[4] = {0, 4, 3, 12}, last[4] = {0, 4, 10, 11}, toolong[4] = {0, 1, 11, 12};
    expect_refused(&env, r, r->d_cu_q, down, 4, "cu_seqlens_q[2]");
    expect_refused(&env, r, r->d_cu_q, last, 4, "cu_seqlens_q[3]");
    expect_refused(&env, r, r->d_cu_q, toolong, 4, "max_seqlen_q");
    serve_free(&env, r);
    /* paged: a page outside the cache, a length past the table */
    c.q_dense = 0, c.k_mode = SERVE_K_PAGED, c.page_size = 16;
    serve_setup(&env, r, &c);
    int32_t *t = malloc((size_t)3 * r->max_pages * 4);
    memcpy(t, r->table, (size_t)3 * r->max_pages * 4);
    t[r->max_pages + 1] = r->num_pages;
    expect_refused(&env, r, r->d_table, t, (size_t)3 * r->max_pages, "block_table[1][1]");
    memcpy(t, r->table, (size_t)3 * r->max_pages * 4);
    CK(env.cu->cuMemcpyHtoD(r->d_table, t, (size_t)3 * r->max_pages * 4));
    const int32_t used[3] = {40, r->max_pages * 16 + 1, 20};
    expect_refused(&env, r, r->d_used, used, 3, "seqused_k[1]");
    /* without the option the same bad entries are clamped: nothing outside the tensors is touched */
    t[r->max_pages + 1] = -123456;
    CK(env.cu->cuMemcpyHtoD(r->d_table, t, (size_t)3 * r->max_pages * 4));
    dbuf_poison(&env, &r->o);
    cr_assert_eq(fg_attention_fwd_varlen(env.ctx, &r->args, env.stream), FG_OK, "%s", fg_last_error(env.ctx));
    CK(env.cu->cuStreamSynchronize(env.stream));
    dbuf_download(&env, &r->o);
    check_guard(&r->o, "o");
    free(t);
    serve_free(&env, r);
    free(r);
    gpu_close(&env);
}

Test(inputs, explain_names_packing_and_splits) {
    gpu_env env;
    gpu_open(&env);
    static const int lq[] = {1}, lk[] = {100000};
    serve_case c = sc(FG_DTYPE_BF16, 1, lq, lk, 32, 8, 128, 0);
    c.q_dense = 1, c.k_mode = SERVE_K_DENSE;
    serve_run *r = calloc(1, sizeof *r);
    cr_assert(r);
    serve_setup(&env, r, &c);
    char text[2048];
    cr_assert_eq(fg_explain_varlen(env.ctx, &r->args, text, sizeof text), FG_OK, "%s", fg_last_error(env.ctx));
    cr_assert(strstr(text, "kind=serve") && strstr(text, "the 4 query heads of each KV head packed"), "%s", text);
    cr_assert(strstr(text, "splits: ") && !strstr(text, "splits: 1 "), "one 100k-key sequence is not split: %s", text);
    serve_free(&env, r);
    free(r);
    gpu_close(&env);
}
