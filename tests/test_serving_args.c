/* test_serving_args.c: the rules of a serving call's host arguments (serving_check), each broken once with
 * the sentence it must give, the checks of its device-resident lengths on host copies
 * (serving_validate_lengths), and the plan's split count and workspace as functions of host arguments only.
 * Needs no GPU. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <string.h>
#include "runtime/dispatch.h"
#include "tests/host_views.h"

/* A valid packed call: 3 sequences, 100 query tokens, 300 key tokens, 8/2 heads, d 128. */
static fg_varlen_args packed(void) {
    fg_varlen_args a;
    fg_varlen_args_init(&a);
    a.q = t3(FG_DTYPE_BF16, 100, 8, 128, 0x100000);
    a.o = t3(FG_DTYPE_BF16, 100, 8, 128, 0x200000);
    a.k = t3(FG_DTYPE_BF16, 300, 2, 128, 0x300000);
    a.v = t3(FG_DTYPE_BF16, 300, 2, 128, 0x400000);
    a.cu_seqlens_q = ADDR(0x500000);
    a.cu_seqlens_k = ADDR(0x500100);
    a.batch = 3;
    a.max_seqlen_q = 60;
    return a;
}

/* A valid paged decode call: 4 sequences of 1 query, 64 pages of 16 slots, 10 pages a sequence at most. */
static fg_varlen_args paged(void) {
    fg_varlen_args a;
    fg_varlen_args_init(&a);
    a.q = t4(FG_DTYPE_F16, 4, 1, 32, 128, 0x100000);
    a.o = t4(FG_DTYPE_F16, 4, 1, 32, 128, 0x200000);
    a.k = t4(FG_DTYPE_F16, 64, 16, 8, 128, 0x300000);
    a.v = t4(FG_DTYPE_F16, 64, 16, 8, 128, 0x800000);
    a.seqused_k = ADDR(0x500000);
    a.block_table = ADDR(0x600000);
    a.max_pages = 10;
    return a;
}

/* A valid dense decode with a workspace: `batch` caches of `keys` keys, one bf16 query token, 32/8 heads, d 128. */
static fg_varlen_args dense_decode(int batch, int keys) {
    fg_varlen_args a;
    fg_varlen_args_init(&a);
    a.q = t4(FG_DTYPE_BF16, batch, 1, 32, 128, 0x100000);
    a.o = t4(FG_DTYPE_BF16, batch, 1, 32, 128, 0x200000);
    a.k = t4(FG_DTYPE_BF16, batch, keys, 8, 128, 0x10000000);
    a.v = t4(FG_DTYPE_BF16, batch, keys, 8, 128, 0x90000000);
    a.workspace = ADDR(0x1000);
    return a;
}

static void expect(const fg_varlen_args *a, fg_status want, const char *mention) {
    serving_call c;
    fg_error e;
    fg_error_clear(&e);
    fg_status st = serving_check(a, 1, &c, &e);
    cr_assert_eq(st, want, "status %d, want %d: %s", st, want, e.msg);
    if (mention) cr_assert(strstr(e.msg, mention), "'%s' does not mention '%s'", e.msg, mention);
}

Test(serving_args, valid_calls_are_described) {
    fg_varlen_args a = packed();
    serving_call c;
    fg_error e;
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(c.packed_q && c.packed_k && !c.paged);
    cr_assert_eq(c.batch, 3);
    cr_assert_eq(c.group, 4);
    cr_assert_eq(c.seqlen_q, 60);
    cr_assert_eq(c.max_k, 300);
    a = paged();
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(!c.packed_q && c.paged);
    cr_assert_eq(c.batch, 4);
    cr_assert_eq(c.seqlen_k, 160);
    cr_assert_eq(c.page_size, 16);
    cr_assert_eq(c.num_pages, 64);
    cr_assert_eq(c.part_tokens, 4);
    cr_assert(!c.v_in_k, "v has memory of its own");
    /* absorbed MLA: v = k[..., :512] (same data and strides), one KV head of 576: V read from K's tiles */
    a = paged();
    a.q = t4(FG_DTYPE_BF16, 4, 1, 16, 576, 0x100000), a.o = t4(FG_DTYPE_BF16, 4, 1, 16, 512, 0x200000);
    a.k = t4(FG_DTYPE_BF16, 64, 16, 1, 576, 0x300000), a.v = a.k, a.v.shape[3] = 512;
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(c.v_in_k && c.head_dim == 576 && c.head_dim_v == 512);
    a.v.stride[0] = a.k.stride[0] * 2; /* other strides over the same memory: not K's prefix */
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(!c.v_in_k, "v with its own strides is not K's prefix");
    a.v = a.k, a.v.shape[3] = 512, a.k.data = a.v.data = NULL; /* explain without data: a V of its own */
    cr_assert_eq(serving_check(&a, 0, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(!c.v_in_k);
}

/* A window side that reaches past every key of every row is unbounded, so the variant without window=1 runs:
 * left past the key capacity, right past the longest query run (sq - 1 from the bottom-right diagonal). */
Test(serving_args, window_sides_past_every_key_are_unbounded) {
    fg_varlen_args a = packed(); /* 60 queries, 300 keys at most */
    serving_call c;
    fg_error e;
    a.window = 1, a.window_left = 301, a.window_right = 61;
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(!c.var.window && c.var.window_left == -1 && c.var.window_right == -1);
    a.window_right = 59; /* a row of a 60-query sequence against fewer keys still has keys right of d + 59 */
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(c.var.window && c.var.window_left == -1 && c.var.window_right == 59);
    a.window = 0, a.window_left = 5; /* sides are read only with window = 1 */
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(!c.var.window && c.var.window_left == -1 && c.var.window_right == -1);
}

Test(serving_args, each_rule_gives_its_sentence) {
    fg_varlen_args a = packed();
    a.struct_size = 0;
    fg_error e;
    fg_varlen_args copy;
    cr_assert_eq(serving_args_copy(&a, &copy, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "fg_varlen_args_init"), "%s", e.msg);
    cr_assert_eq(serving_args_copy(NULL, &copy, &e), FG_ERR_INVALID_ARGUMENT);
    a = packed(), a.cu_seqlens_q = NULL;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "cu_seqlens_q is NULL");
    a = packed(), a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = FG_DTYPE_E4M3;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "fp16 or bf16");
    a = packed(), a.o.dtype = FG_DTYPE_F16;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "share one dtype");
    a = packed(), a.o.shape[0] = 99, a.o.stride[0] = 1024;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "o is shaped like q");
    a = packed(), a.v.shape[0] = 299;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "v is shaped like k");
    a = packed(), a.k.shape[1] = a.v.shape[1] = 3;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "divide heads_q");
    a = packed(), a.q = t3(FG_DTYPE_BF16, 100, 8, 96, 0x100000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "k's head_dim is 128 but q's is 96");
    a = packed(), a.o = t3(FG_DTYPE_BF16, 100, 8, 96, 0x200000); /* O has V's head dim, which may differ from Q's */
    expect(&a, FG_ERR_INVALID_ARGUMENT, "o's head_dim is 96 but v's is 128");
    a = packed(), a.v.shape[2] = 260;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "o's head_dim is 128 but v's is 260");
    a.o.shape[2] = 260;
    expect(&a, FG_ERR_UNSUPPORTED, "v's head_dim 260 is not supported");
    a = packed(), a.q.stride[2] = 2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "contiguous");
    a = packed(), a.q.data = ADDR(0x100008);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "16-byte aligned");
    a = packed(), a.k.stride[0] = 260, a.v.stride[0] = 260;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "multiple of 16");
    a = packed(), a.batch = 0;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "batch + 1 entries");
    a = packed(), a.max_seqlen_q = 0;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "max_seqlen_q");
    a = packed(), a.lse = t3(FG_DTYPE_F32, 3, 8, 100, 0x900000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "[heads_q, total_q]");
    a = packed(), a.lse = (fg_tensor){ADDR(0x900000), FG_DTYPE_F32, 2, {8, 99}, {99, 1}};
    expect(&a, FG_ERR_INVALID_ARGUMENT, "lse.shape[1] is 99");
    a = packed(), a.causal = 2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "causal");
    a = packed(), a.softmax_scale = -1.f;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "softmax_scale");
    a = packed(), a.num_splits = 257;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "num_splits");
    a = packed(), a.num_splits = 4, a.split_size = 512;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "both set");
    a = packed(), a.split_size = -1;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "split_size");
    a = packed(), a.window = 2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "window is 2");
    a = packed(), a.window = 1, a.window_left = -2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "window_left (-2)");
    a = packed(), a.o.data = ADDR(0x100000 + 4096);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "o overlaps q");
    a = packed(), a.workspace = ADDR(0x1000010);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "256-byte aligned");
    a = paged(), a.seqused_k = NULL;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "seqused_k is NULL");
    a = paged(), a.max_pages = 0;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "max_pages");
    a = paged(), a.block_table_stride = 5;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "overlap");
    a = paged(), a.cu_seqlens_k = ADDR(0x700000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "both set");
    a = paged(), a.block_table = NULL; /* dense keys must then hold one cache per sequence */
    expect(&a, FG_ERR_INVALID_ARGUMENT, "one cache per sequence");
    a = paged(), a.batch = 5;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "leave batch 0");
    a = paged(), a.q = t4(FG_DTYPE_F16, 4, 1, 32, 584, 0x100000), a.o = t4(FG_DTYPE_F16, 4, 1, 32, 584, 0x200000);
    a.k.shape[3] = a.v.shape[3] = 584;
    expect(&a, FG_ERR_UNSUPPORTED, "head_dim 584 is not supported by serving calls: a multiple of 8 from 8 to 576");
    a.q.shape[3] = a.k.shape[3] = 576, a.v.shape[3] = a.o.shape[3] = 520; /* V's limit is 512 */
    expect(&a, FG_ERR_UNSUPPORTED, "v's head_dim 520 is not supported by serving calls: a multiple of 8 from 8 to 512");
}

Test(serving_args, device_lengths_name_the_first_bad_entry) {
    fg_varlen_args a = packed();
    serving_call c;
    fg_error e;
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    const int32_t cq[4] = {0, 30, 60, 100}, ck[4] = {0, 100, 200, 300};
    cr_assert_eq(serving_validate_lengths(&c, cq, ck, NULL, NULL, 0, 60, &e), FG_OK, "%s", e.msg);
    struct { int32_t q[4], k[4]; const char *mention; } bad[] = {
        {{-1, 30, 60, 100}, {0, 100, 200, 300}, "cu_seqlens_q[0] is -1"},
        {{0, 30, 20, 100}, {0, 100, 200, 300}, "cu_seqlens_q[2] is 20"},
        {{0, 30, 60, 99}, {0, 100, 200, 300}, "cu_seqlens_q[3] (the last entry) is 99"},
        {{0, 30, 39, 100}, {0, 100, 200, 300}, "sequence 2 has 61 queries"},
        {{0, 30, 60, 100}, {0, 100, 200, 301}, "cu_seqlens_k[3]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fg_error_clear(&e);
        cr_assert_eq(serving_validate_lengths(&c, bad[i].q, bad[i].k, NULL, NULL, 0, 60, &e), FG_ERR_INVALID_ARGUMENT,
                     "case %zu accepted", i);
        cr_assert(strstr(e.msg, bad[i].mention), "'%s' does not mention '%s'", e.msg, bad[i].mention);
    }
    c.bound_k = 90; /* the backward's max_seqlen_k */
    cr_assert_eq(serving_validate_lengths(&c, cq, ck, NULL, NULL, 0, 60, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "sequence 0 has 100 keys, more than max_seqlen_k (90)"), "%s", e.msg);
    c.bound_k = 0;
    const int32_t used_bad[3] = {100, 101, 5};
    cr_assert_eq(serving_validate_lengths(&c, cq, ck, used_bad, NULL, 0, 60, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "seqused_k[1] is 101"), "%s", e.msg);
    /* paged: pages past a sequence's keys are never judged (nor read) */
    a = paged();
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    int32_t table[4 * 10];
    for (int i = 0; i < 40; i++) table[i] = i < 20 ? i : -99;
    const int32_t used[4] = {16, 17, 0, 160};
    table[30] = 5, table[31] = 6; /* sequence 3 needs all 10 of its pages */
    for (int i = 32; i < 40; i++) table[i] = i;
    cr_assert_eq(serving_validate_lengths(&c, NULL, NULL, used, table, 10, 1, &e), FG_OK, "%s", e.msg);
    table[11] = 64;
    cr_assert_eq(serving_validate_lengths(&c, NULL, NULL, used, table, 10, 1, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "block_table[1][1] is 64"), "%s", e.msg);
    table[11] = 3;
    const int32_t too_long[4] = {16, 17, 0, 161};
    cr_assert_eq(serving_validate_lengths(&c, NULL, NULL, too_long, table, 10, 1, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "seqused_k[3] is 161") && strstr(e.msg, "max_pages x page_size"), "%s", e.msg);
}

/* The split count and workspace follow from host arguments alone (a graph replays them): decode on a
 * 132-SM Hopper with the rule's choices, a given count, split_size, and no split without a workspace. */
Test(serving_args, split_plan_depends_on_host_arguments_only) {
    fg_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.arch = 90, ctx.sm_count = 132, ctx.smem_optin = 232448;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&ctx.policy, &e), FG_OK, "%s", e.msg);
    /* (1 x 128k: 8 tiles of 4 stages x 64 keys x 512 bytes; 60 KiB x 132 SMs takes 8 of them a tile) */
    struct { int batch, keys, want; } cells[] = {{32, 4096, 1}, {8, 32768, 1}, {1, 131072, 8}, {2, 65536, 4}, {64, 2048, 1},
                                                 {1, 200, 1}, {1, 512, 4}};
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        fg_varlen_args a = dense_decode(cells[i].batch, cells[i].keys);
        serving_call c;
        serving_plan p;
        cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(serving_plan_for(&ctx, &a, &c, &p, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(p.spec.block_m, 16, "decode takes the 16-row tile");
        cr_assert_eq(p.num_splits, cells[i].want, "%d x %d keys: %d splits (%s)", cells[i].batch, cells[i].keys,
                     p.num_splits, p.split_why);
        const size_t want_ws = p.num_splits > 1
                                   ? ((size_t)p.num_splits * cells[i].batch * 32 * 128 * 4 + 255) / 256 * 256 +
                                         ((size_t)p.num_splits * cells[i].batch * 32 * 4 + 255) / 256 * 256
                                   : 0;
        cr_assert_eq(p.workspace, want_ws);
        a.num_splits = 7;
        cr_assert_eq(serving_plan_for(&ctx, &a, &c, &p, &e), FG_OK);
        cr_assert_eq(p.num_splits, 7);
        a.num_splits = 0, a.split_size = 1000; /* 16 blocks of 64 keys a split */
        cr_assert_eq(serving_plan_for(&ctx, &a, &c, &p, &e), FG_OK);
        cr_assert_eq(p.split_blocks, 16);
        cr_assert_eq(p.num_splits, (cells[i].keys + 1023) / 1024);
        a.split_size = 0, a.workspace = NULL;
        cr_assert_eq(serving_plan_for(&ctx, &a, &c, &p, &e), FG_OK);
        cr_assert_eq(p.num_splits, 1);
    }
    /* with the memory's bandwidth known: an H100's (3.35 TB/s, 8.4 MB in flight) and an H200's (4.8 TB/s, 12 MB);
     * a paged cache takes the wave-fill rule (1 x 128k: 15 splits on 132 SMs) */
    struct { double bw; int batch, keys, paged, want; } bws[] = {{3.35e12, 1, 131072, 0, 8}, {3.35e12, 8, 32768, 0, 1},
                                                                {4.8e12, 1, 131072, 0, 12}, {4.8e12, 8, 32768, 0, 2},
                                                                {4.8e12, 1, 131072, 1, 15}};
    for (size_t i = 0; i < sizeof bws / sizeof bws[0]; i++) {
        ctx.mem_bandwidth = bws[i].bw;
        fg_varlen_args a = dense_decode(bws[i].batch, bws[i].keys);
        if (bws[i].paged) { /* the same keys in pages of 256 */
            a.k.ndim = a.v.ndim = 4;
            a.k.shape[0] = a.v.shape[0] = (int64_t)bws[i].batch * bws[i].keys / 256, a.k.shape[1] = a.v.shape[1] = 256;
            a.k.stride[0] = a.v.stride[0] = 256 * a.k.stride[1];
            a.block_table = (const int32_t *)ADDR(0x900000), a.max_pages = bws[i].keys / 256;
            a.seqused_k = (const int32_t *)ADDR(0xa00000);
        }
        serving_call c;
        serving_plan p;
        cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(serving_plan_for(&ctx, &a, &c, &p, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(p.num_splits, bws[i].want, "%.3g B/s, %d x %d keys%s: %d splits (%s)", bws[i].bw, bws[i].batch,
                     bws[i].keys, bws[i].paged ? ", paged" : "", p.num_splits, p.split_why);
    }
    tile_policy_free(&ctx.policy);
}

/* FP8 KV caches (k and v e4m3 or e5m2 beside 16-bit q and o): each rule's sentence, the descales' rules, a 0.4.0
 * struct reading them as absent, and the plan: a kv=e4m3 variant (never TMA, never the sm_90a prefill) whose FP8
 * stages hold half the bytes, so that the rule takes twice the splits for the same bytes in flight. */
Test(serving_args, fp8_kv_cache_rules) {
    fg_varlen_args a = paged();
    a.k.dtype = a.v.dtype = FG_DTYPE_E4M3;
    serving_call c;
    fg_error e;
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(c.kv_fp8 == FG_DTYPE_E4M3 && c.kv_descale[0] == 0 && c.kv_descale[1] == 0);
    const float *one = (const float *)ADDR(0xb00000), *per = (const float *)ADDR(0xc00000);
    a.k_descale = (fg_tensor){(void *)one, FG_DTYPE_F32, 1, {1}, {1}};
    a.v_descale = (fg_tensor){(void *)per, FG_DTYPE_F32, 2, {4, 8}, {1, 4}}; /* [batch, heads_kv], any strides */
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(c.kv_descale[0] == 1 && c.kv_descale[1] == 2);
    fg_varlen_args b = a;
    b.k.dtype = FG_DTYPE_E5M2;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "k is e5m2 and v is e4m3; an FP8 KV cache has K and V of one FP8 dtype");
    b = a, b.q.dtype = b.o.dtype = FG_DTYPE_E4M3;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "FP8 goes in K and V only");
    b = a, b.o.dtype = FG_DTYPE_BF16;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "q and o share one 16-bit dtype");
    b = a, b.q.shape[3] = b.o.shape[3] = b.k.shape[3] = b.v.shape[3] = 80;
    expect(&b, FG_ERR_UNSUPPORTED, "head_dim (80) and v's head_dim (80) must be multiples of 32 up to 256");
    b = a, b.k.dtype = b.v.dtype = FG_DTYPE_F16;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "k_descale is set but k and v are fp16; descale factors are for FP8 k and v");
    b = a, b.k_descale.dtype = FG_DTYPE_BF16;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "k_descale.dtype is bf16; descale factors are fp32");
    b = a, b.k_descale.shape[0] = 2;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "k_descale.shape is [2]; a one-dimensional descale tensor has shape [1]");
    b = a, b.v_descale.shape[1] = 2;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "v_descale.shape is [4, 2]; a two-dimensional descale tensor has shape "
                                        "[batch, heads_kv] = [4, 8]");
    b = a, b.v_descale.ndim = 3;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "v_descale.ndim is 3");
    b = a, b.k_descale.data = ADDR(0xb00002);
    expect(&b, FG_ERR_INVALID_ARGUMENT, "k_descale.data (0xb00002) is not 4-byte aligned");
    b = a, b.v_descale.data = ADDR(0x200000 + 64); /* inside o */
    expect(&b, FG_ERR_INVALID_ARGUMENT, "o overlaps v_descale in memory");
    /* without data (explain, the workspace query) a descale counts by its ndim */
    b = a, b.k_descale.data = NULL, b.k.dtype = b.v.dtype = FG_DTYPE_F16, b.v_descale.data = NULL, b.v_descale.ndim = 0;
    cr_assert_eq(serving_check(&b, 0, &c, &e), FG_ERR_INVALID_ARGUMENT, "a descale without data and 16-bit k, v");
    /* a struct from 0.4.0's header ends before the descales: read as absent */
    b = a, b.struct_size = offsetof(fg_varlen_args, k_descale);
    fg_varlen_args copy;
    cr_assert_eq(serving_args_copy(&b, &copy, &e), FG_OK, "%s", e.msg);
    cr_assert(!copy.k_descale.data && !copy.v_descale.data && copy.k_descale.ndim == 0);
    /* v a prefix view of k: loaded on its own (a tile of its own to dequantize into) */
    b = a, b.v = b.k;
    cr_assert_eq(serving_check(&b, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(!c.v_in_k);
    /* the plan: 1 x 128k dense decode on 132 SMs (60 KiB an SM in flight), FP8 stages of 32 KiB a tile */
    fg_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.arch = 90, ctx.sm_count = 132, ctx.smem_optin = 232448, ctx.serve_tma = 1, ctx.wgmma = 1, ctx.prefill_sm90a = 1;
    cr_assert_eq(tile_policy_init_default(&ctx.policy, &e), FG_OK, "%s", e.msg);
    fg_varlen_args d = dense_decode(1, 131072);
    d.k.dtype = d.v.dtype = FG_DTYPE_E4M3;
    serving_plan p;
    cr_assert_eq(serving_check(&d, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(serving_plan_for(&ctx, &d, &c, &p, &e), FG_OK, "%s", e.msg);
    cr_assert(p.spec.kv_fp8 == FG_DTYPE_E4M3 && !p.spec.tma && p.spec.block_m == 16 && p.spec.stages == 4,
              "kv %d tma %d block_m %d stages %d", p.spec.kv_fp8, p.spec.tma, p.spec.block_m, p.spec.stages);
    cr_assert_eq(p.num_splits, 16, "twice bf16's 8 (%s)", p.split_why);
    fg_spec s;
    d = packed(), d.k.dtype = d.v.dtype = FG_DTYPE_E5M2, d.max_seqlen_q = 100;
    cr_assert_eq(serving_check(&d, 0, &c, &e), FG_OK, "%s", e.msg);
    cr_assert(!serving_prefill_variant(&ctx, &d, &c, &s), "an FP8 KV cache stays on the serving kernel");
    tile_policy_free(&ctx.policy);
}

/* With a tuning database that measured the call's query-length bucket, its fastest serve candidate gives the
 * tiles and the split count; another query-length bucket, or a call that sets num_splits, keeps the rule. */
Test(serving_args, tuned_split_count_overrides_the_rule) {
    fg_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.arch = 90, ctx.sm_count = 132, ctx.smem_optin = 232448, ctx.tuned = 1;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&ctx.policy, &e), FG_OK, "%s", e.msg);
    fg_tune_identity id;
    tunedb_identity_init(&id, "NVIDIA H100", 90, 132, 13000, "13.0");
    tunedb_init(&ctx.tunedb, &id);
    const int splits[3] = {4, 6, 9}; /* 6 is the fastest */
    const double ms[3] = {0.30, 0.20, 0.25};
    for (int i = 0; i < 3; i++) {
        fg_tune_record r;
        memset(&r, 0, sizeof r);
        r.cls = (fg_tune_class){FG_KIND_SERVE, FG_DTYPE_BF16, 128, 0, 4, 1, 131072, 32};
        r.spec = (fg_spec){.kind = FG_KIND_SERVE, .arch = 90, .dtype = FG_DTYPE_BF16, .out_dtype = FG_DTYPE_BF16,
                           .head_dim = 128, .block_m = 16, .block_n = 64, .warps = 4, .stages = 3, .splits = splits[i]};
        r.status = FG_TUNE_OK;
        r.ms = ms[i];
        cr_assert_eq(tunedb_add(&ctx.tunedb, &r, &e), FG_OK, "%s", e.msg);
    }
    fg_varlen_args a = dense_decode(1, 131072);
    serving_call c;
    serving_plan p;
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(serving_plan_for(&ctx, &a, &c, &p, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(p.num_splits, 6, "the tuned winner's splits: %d (%s)", p.num_splits, p.split_why);
    cr_assert_eq(p.spec.stages, 3);
    cr_assert(strstr(p.split_why, "tuned"), "%s", p.split_why);
    cr_assert_eq(p.workspace, (size_t)6 * 32 * 128 * 4 + 6 * 32 * 4);
    a.num_splits = 2; /* the call's own count wins */
    cr_assert_eq(serving_plan_for(&ctx, &a, &c, &p, &e), FG_OK);
    cr_assert_eq(p.num_splits, 2);
    a.num_splits = 0; /* another query-length bucket (4 tokens): the rule */
    a.q.shape[1] = a.o.shape[1] = 4;
    a.q.stride[0] = a.o.stride[0] = 4 * 32 * 128;
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(serving_plan_for(&ctx, &a, &c, &p, &e), FG_OK);
    cr_assert_eq(p.num_splits, 8, "%s", p.split_why);
    tunedb_free(&ctx.tunedb);
    tile_policy_free(&ctx.policy);
}

/* Which calls the sm_90a forward's varlen variants take (serving_prefill.c), decided on host arguments: on a
 * Hopper context with FLASHGEN_PREFILL_SM90A, sequences of 64 queries or more whose keys are not paged, no
 * split asked for, head_dim a multiple of 32, tensors TMA can read; with the call's model variants. */
Test(serving_args, prefill_on_the_sm90a_forward) {
    fg_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.arch = 90, ctx.sm_count = 132, ctx.smem_optin = 232448, ctx.wgmma = 1, ctx.prefill_sm90a = 1;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&ctx.policy, &e), FG_OK, "%s", e.msg);
    struct { const char *what; int max_q, num_splits, d, misaligned, paged, knob, window, softcap, want; } cells[] = {
        {"a packed prefill", 64, 0, 128, 0, 0, 1, 0, 0, 1},
        {"queries below a block", 63, 0, 128, 0, 0, 1, 0, 0, 0},
        {"a split asked for", 100, 2, 128, 0, 0, 1, 0, 0, 0},
        {"head_dim 72", 100, 0, 72, 0, 0, 1, 0, 0, 0},
        {"a row stride TMA cannot take", 100, 0, 128, 1, 0, 1, 0, 0, 0},
        {"a paged cache", 100, 0, 128, 0, 1, 1, 0, 0, 0},
        {"FLASHGEN_PREFILL_SM90A off", 100, 0, 128, 0, 0, 0, 0, 0, 0},
        {"a sliding window", 100, 0, 128, 0, 0, 1, 1, 0, 1},
        {"a softcap", 100, 0, 128, 0, 0, 1, 0, 1, 1},
    };
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        fg_varlen_args a = cells[i].paged ? paged() : packed();
        const int d = cells[i].d;
        if (!cells[i].paged) {
            a.q = t3(FG_DTYPE_BF16, 100, 8, d, 0x100000), a.o = t3(FG_DTYPE_BF16, 100, 8, d, 0x200000);
            a.k = t3(FG_DTYPE_BF16, 300, 2, d, 0x300000), a.v = t3(FG_DTYPE_BF16, 300, 2, d, 0x400000);
        }
        a.max_seqlen_q = cells[i].paged ? 0 : cells[i].max_q;
        if (cells[i].paged) a.q = t4(FG_DTYPE_F16, 4, 100, 32, 128, 0x100000), a.o = t4(FG_DTYPE_F16, 4, 100, 32, 128, 0x200000);
        a.num_splits = cells[i].num_splits;
        a.window = cells[i].window, a.window_left = 10, a.window_right = 0;
        a.softcap = cells[i].softcap ? 30.f : 0.f;
        if (cells[i].misaligned) a.q.stride[0] = 8 * d + 4, a.o.stride[0] = 8 * d + 4; /* 8 bytes past a multiple of 16 */
        ctx.prefill_sm90a = cells[i].knob;
        serving_call c;
        fg_status st = serving_check(&a, 0, &c, &e);
        cr_assert_eq(st, FG_OK, "%s: %s", cells[i].what, e.msg);
        fg_spec s;
        const int got = serving_prefill_variant(&ctx, &a, &c, &s);
        cr_assert_eq(got, cells[i].want, "%s: %s", cells[i].what, got ? "taken" : "not taken");
        if (got)
            cr_assert(s.kind == FG_KIND_FWD && s.varlen && spec_is_wgmma(&s) && s.head_dim == d && s.causal == a.causal &&
                          s.softcap == cells[i].softcap && s.window == cells[i].window,
                      "%s: not an sm_90a varlen variant", cells[i].what);
    }
    /* V of its own head dim: the tiles of the wider one's (64/128: 128 x 128), or of V's where it is narrower and
     * they fit (192/128 causal: 128 x 128), else Q's (192/128 without a mask: 128 x 96) */
    struct { int d, dv, causal, block_n; } dims[] = {{192, 128, 1, 128}, {192, 128, 0, 96}, {64, 128, 1, 128}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        fg_varlen_args a = packed();
        a.q = t3(FG_DTYPE_BF16, 100, 8, dims[i].d, 0x100000), a.o = t3(FG_DTYPE_BF16, 100, 8, dims[i].dv, 0x200000);
        a.k = t3(FG_DTYPE_BF16, 300, 2, dims[i].d, 0x300000), a.v = t3(FG_DTYPE_BF16, 300, 2, dims[i].dv, 0x400000);
        a.causal = dims[i].causal, a.max_seqlen_q = 100;
        serving_call c;
        cr_assert_eq(serving_check(&a, 0, &c, &e), FG_OK, "%s", e.msg);
        fg_spec s;
        cr_assert(serving_prefill_variant(&ctx, &a, &c, &s), "%d/%d taken", dims[i].d, dims[i].dv);
        cr_assert(s.head_dim == dims[i].d && spec_head_dim_v(&s) == dims[i].dv && s.block_m == 128 &&
                      s.block_n == dims[i].block_n,
                  "%d/%d causal %d: %d x %d", dims[i].d, dims[i].dv, dims[i].causal, s.block_m, s.block_n);
    }
    tile_policy_free(&ctx.policy);
}

/* A call's custom mod: its aux arrays against the mod's declarations (rt_check_mod), each refusal naming the array
 * and the rule; a call whose arrays match is taken and names the mod's id. */
Test(serving_args, custom_mod_arrays_are_checked) {
    static const char text[] = "aux = { bias = fg.aux('f32', 2), doc = fg.aux('i32', 1) }\n"
                               "score_mod = function(s, b, h, q, kv) return s + fg.load(bias, h, fg.load(doc, kv)) end\n";
    fg_mod *m = NULL;
    cr_assert_eq(fg_mod_create(text, strlen(text), "m.lua", &m), FG_OK, "%s", fg_last_error(NULL));
    fg_varlen_args a = packed();
    a.mod = m;
    a.mod_aux[0] = (fg_tensor){ADDR(0x700000), FG_DTYPE_F32, 2, {8, 64, 0, 0}, {64, 1, 0, 0}};
    a.mod_aux[1] = (fg_tensor){ADDR(0x710000), FG_DTYPE_I32, 1, {300, 0, 0, 0}, {1, 0, 0, 0}};
    serving_call c;
    fg_error e;
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    cr_assert_str_eq(c.mod_id, fg_mod_id(m));
    fg_varlen_args b = a;
    b.mod_aux[1].dtype = FG_DTYPE_F32;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "mod_aux[1] (doc) must be i32 of rank 1");
    b = a, b.mod_aux[0].ndim = 1;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "mod_aux[0] (bias) must be f32 of rank 2");
    b = a, b.mod_aux[0].stride[0] = 128;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "mod_aux[0] (bias) must be contiguous");
    b = a, b.mod_aux[1].shape[0] = 0;
    expect(&b, FG_ERR_INVALID_ARGUMENT, "mod_aux[1] (doc) has extent 0");
    b = a, b.mod_aux[1].data = ADDR(0x710002);
    expect(&b, FG_ERR_INVALID_ARGUMENT, "4-byte aligned");
    b = a, b.mod_aux[2] = a.mod_aux[1];
    expect(&b, FG_ERR_INVALID_ARGUMENT, "mod_aux[2] is set, but the mod declares fewer aux arrays");
    b = packed(), b.mod_aux[0] = a.mod_aux[0];
    expect(&b, FG_ERR_INVALID_ARGUMENT, "mod_aux[0] is set, but the call has no mod");
    /* a mod's positions are exact in fp32 below 2^23 (generator/mod_emit.c): longer sequences are refused */
    b = a, b.k.shape[0] = b.v.shape[0] = 1 << 23, b.max_seqlen_k = 1 << 23;
    b.v.data = ADDR(0x800000000);
    expect(&b, FG_ERR_UNSUPPORTED, "fewer than 2^23 (8388608) queries and keys");
    b.max_seqlen_k = (1 << 23) - 1;
    cr_assert_eq(serving_check(&b, 1, &c, &e), FG_OK, "%s", e.msg);
    fg_mod_destroy(m);
}

/* Issue 37 item 7's rule for the custom-mod workspace: a mask's block map is sized with checked arithmetic, and a
 * call whose map would not fit in size_t is refused instead of reporting a wrapped, small workspace (65535
 * sequences x 65535 heads x 2^17 x 2^17 blocks of 64 x 64 is 2^66 bytes). */
Test(serving_args, mask_map_size_overflow_is_refused) {
    static const char text[] = "aux = { doc = fg.aux('i32', 1) }\n"
                               "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, h), fg.load(doc, kv)) end\n";
    fg_mod *m = NULL;
    cr_assert_eq(fg_mod_create(text, strlen(text), "m.lua", &m), FG_OK, "%s", fg_last_error(NULL));
    const int64_t tokens = (1 << 23) - 1, heads = 65535;
    cr_assert_eq(rt_mask_map_bytes(m, 65535, (int)heads, tokens, tokens), SIZE_MAX);
    cr_assert_lt(rt_mask_map_bytes(m, 1, 8, tokens, tokens), SIZE_MAX, "a call of one sequence fits");
    fg_varlen_args a;
    fg_varlen_args_init(&a);
    a.q = t3(FG_DTYPE_BF16, tokens, heads, 128, (uintptr_t)1 << 48);
    a.o = t3(FG_DTYPE_BF16, tokens, heads, 128, (uintptr_t)2 << 48);
    a.k = t3(FG_DTYPE_BF16, tokens, heads, 128, (uintptr_t)3 << 48);
    a.v = t3(FG_DTYPE_BF16, tokens, heads, 128, (uintptr_t)4 << 48);
    a.cu_seqlens_q = ADDR(0x500000);
    a.cu_seqlens_k = ADDR(0x600000);
    a.batch = 65535;
    a.max_seqlen_q = a.max_seqlen_k = (int)tokens;
    a.mod = m;
    a.mod_aux[0] = (fg_tensor){ADDR(0x700000), FG_DTYPE_I32, 1, {65535, 0, 0, 0}, {1, 0, 0, 0}};
    expect(&a, FG_ERR_INVALID_ARGUMENT, "the custom mask's block map for 65535 sequences x 65535 heads_q");
    a.batch = 1; /* the same tokens in one sequence: a map of about 2^50 bytes, which fits */
    serving_call c;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(serving_check(&a, 1, &c, &e), FG_OK, "%s", e.msg);
    fg_mod_destroy(m);
}

/* A forward's own block map (mask_map): the rules of fg_attention_bwd_varlen's (test_backward_varlen_args), here on
 * the serving call's check: sized by the call's batch, heads and longest lengths, only for a mask that reads aux
 * arrays; a call that gives it takes no map bytes in its workspace. */
Test(serving_args, mask_map_follows_its_rules) {
    static const char text[] = "aux = { doc = fg.aux('i32', 1) }\n"
                               "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, q), fg.load(doc, kv)) end\n";
    fg_mod *m = NULL;
    cr_assert_eq(fg_mod_create(text, strlen(text), "doc.lua", &m), FG_OK, "%s", fg_last_error(NULL));
    fg_varlen_args a = packed();
    a.max_seqlen_k = 200;
    a.mod = m;
    a.mod_aux[0] = (fg_tensor){ADDR(0x700000), FG_DTYPE_I32, 1, {300, 0, 0, 0}, {1, 0, 0, 0}};
    size_t need = 0;
    cr_assert_eq(fg_mask_map_size(m, 3, 8, 60, 200, &need), FG_OK);
    const fg_varlen_args base = a;
    a.mask_map = ADDR(0x800000), a.mask_map_size = need;
    expect(&a, FG_OK, NULL);
    a.mask_map_ready = 1;
    expect(&a, FG_OK, NULL);
    a = base, a.mask_map = ADDR(0x800000), a.mask_map_size = need - 1;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "the block map of this call needs");
    a = base, a.mask_map = ADDR(0x800010), a.mask_map_size = need;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "not 256-byte aligned");
    a = base, a.mask_map_size = need;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mask_map is NULL but mask_map_size is set");
    a = base, a.mask_map = ADDR(0x800000), a.mask_map_size = need, a.mask_map_ready = -1;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mask_map_ready is -1");
    a = packed(), a.mask_map = ADDR(0x800000), a.mask_map_size = need;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "no mask that reads aux arrays");
    fg_mod_destroy(m);
}
