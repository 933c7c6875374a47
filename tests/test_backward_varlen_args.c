/* test_backward_varlen_args.c: the host side of fg_attention_bwd_varlen without a GPU: each rule of its
 * arguments broken once, with the status and the sentence it must give (the call stops before touching the
 * device), V of a head dim of its own, and its workspace size as the layout of backward_common.cuh's
 * fg_bwd_seq_params needs it. */
#include <criterion/criterion.h>
#include <string.h>
#include "runtime/dispatch.h"
#include "tests/host_views.h"

/* A valid call: 3 sequences, 100 query and 300 key tokens, 8 / 2 heads, head_dim 128. */
static fg_varlen_bwd_args call(void) {
    fg_varlen_bwd_args a;
    fg_varlen_bwd_args_init(&a);
    a.q = t3(FG_DTYPE_BF16, 100, 8, 128, 0x1000000);
    a.o = t3(FG_DTYPE_BF16, 100, 8, 128, 0x2000000);
    a.dout = t3(FG_DTYPE_BF16, 100, 8, 128, 0x3000000);
    a.dq = t3(FG_DTYPE_BF16, 100, 8, 128, 0x4000000);
    a.k = t3(FG_DTYPE_BF16, 300, 2, 128, 0x5000000);
    a.v = t3(FG_DTYPE_BF16, 300, 2, 128, 0x6000000);
    a.dk = t3(FG_DTYPE_BF16, 300, 2, 128, 0x7000000);
    a.dv = t3(FG_DTYPE_BF16, 300, 2, 128, 0x8000000);
    a.lse = (fg_tensor){ADDR(0x9000000), FG_DTYPE_F32, 2, {8, 100, 0, 0}, {100, 1, 0, 0}};
    a.cu_seqlens_q = ADDR(0xa000000);
    a.cu_seqlens_k = ADDR(0xa000100);
    a.batch = 3;
    a.max_seqlen_q = 60;
    a.max_seqlen_k = 200;
    a.workspace = ADDR(0x10000000);
    a.workspace_size = (size_t)1 << 30;
    return a;
}

static fg_context *fake_context(void) {
    static fg_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.arch = 90, ctx.sm_count = 132, ctx.smem_optin = 232448;
    return &ctx;
}

static void expect(const fg_varlen_bwd_args *a, fg_status want, const char *mention) {
    fg_context *ctx = fake_context();
    const fg_status st = fg_attention_bwd_varlen(ctx, a, NULL);
    cr_assert_eq(st, want, "status %d, want %d: %s", st, want, fg_last_error(ctx));
    cr_assert(strstr(fg_last_error(ctx), mention), "'%s' does not mention '%s'", fg_last_error(ctx), mention);
}

Test(backward_varlen_args, each_rule_names_its_argument) {
    fg_varlen_bwd_args a = call();
    a.struct_size = 8;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "fg_varlen_bwd_args_init");
    a = call(), a.dq.shape[0] = 99;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "dq.shape[0] (tokens)");
    a = call(), a.dv.shape[1] = 4;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "dv.shape[1] (heads)");
    a = call(), a.k.ndim = 4;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "k.ndim");
    a = call(), a.lse.shape[1] = 99;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "[heads_q, total_q] = [8, 100]");
    a = call(), a.max_seqlen_q = 101;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "max_seqlen_q (101)");
    a = call(), a.max_seqlen_k = 0;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "max_seqlen_k is 0");
    a = call(), a.batch = 70000;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "batch is 70000");
    a = call(), a.cu_seqlens_k = NULL;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "cu_seqlens_k");
    a = call(), a.cu_seqlens_q = ADDR(0xa000002);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "cu_seqlens_q");
    a = call(), a.dq.data = a.q.data;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "dq overlaps q");
    a = call(), a.workspace_size = 1000;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "workspace_size is 1000 bytes");
    a = call(), a.deterministic = 2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "deterministic is 2");
    /* the model variants */
    a = call(), a.window = 1, a.window_left = 10, a.window_right = 0, a.deterministic = 1;
    expect(&a, FG_ERR_UNSUPPORTED, "deterministic = 1 are both set");
    a = call(), a.causal_top_left = 1;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "causal_top_left is 1 but causal is 0");
    a = call(), a.window = 1, a.window_left = -2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "window_left (-2)");
    a = call(), a.softcap = -1.f;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "softcap is -1");
    a = call(), a.sinks = (const float *)ADDR(0xb000000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "sinks and dsink must be given together");
    a = call(), a.sinks = (const float *)ADDR(0xb000000), a.dsink = (float *)ADDR(0xb000100), a.deterministic = 1;
    expect(&a, FG_ERR_UNSUPPORTED, "sinks and deterministic = 1 are both set");
    a = call(), a.alibi_slopes = (const float *)ADDR(0xb000002);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "alibi_slopes");
    a = call();
    a.q.shape[2] = a.o.shape[2] = a.dout.shape[2] = a.dq.shape[2] = 24;
    a.k.shape[2] = a.v.shape[2] = a.dk.shape[2] = a.dv.shape[2] = 24;
    a.q.stride[1] = a.o.stride[1] = a.dout.stride[1] = a.dq.stride[1] = 32; /* rows stay 16-byte aligned */
    a.q.stride[0] = a.o.stride[0] = a.dout.stride[0] = a.dq.stride[0] = 8 * 32;
    a.k.stride[1] = a.v.stride[1] = a.dk.stride[1] = a.dv.stride[1] = 32;
    a.k.stride[0] = a.v.stride[0] = a.dk.stride[0] = a.dv.stride[0] = 2 * 32;
    expect(&a, FG_ERR_UNSUPPORTED, "head_dim 24");
    a = call();
    a.q.dtype = a.o.dtype = a.dout.dtype = a.dq.dtype = FG_DTYPE_E4M3;
    a.k.dtype = a.v.dtype = a.dk.dtype = a.dv.dtype = FG_DTYPE_E4M3;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "fp16 or bf16");
}

/* heads_q x (total_q + 384 x batch, rounded up to 128) rows of fp32 dQ (head_dim wide), lse2 and D; the
 * deterministic mode's semaphores (one per 16 rows); GQA's fp32 dK and dV per query head. Regions 256-byte
 * aligned. */
Test(backward_varlen_args, workspace_holds_each_sequence_at_its_offset) {
    fg_context *ctx = fake_context();
    const size_t rows = (100 + 384 * 3 + 127) / 128 * 128;
    const size_t dq = 8 * rows * 128 * 4, stat = (8 * rows * 4 + 255) / 256 * 256, dkv = 2 * 8 * 300 * 128 * 4;
    struct { int det, gqa; size_t want; } cells[] = {
        {0, 1, dq + 2 * stat + dkv},
        {1, 1, dq + 2 * stat + (8 * (rows / 16) * 4 + 255) / 256 * 256 + dkv},
        {0, 0, dq + 2 * stat},
    };
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        fg_varlen_bwd_args a = call();
        a.deterministic = cells[i].det;
        if (!cells[i].gqa) a.k.shape[1] = a.v.shape[1] = a.dk.shape[1] = a.dv.shape[1] = 8,
                           a.k.stride[0] = a.v.stride[0] = a.dk.stride[0] = a.dv.stride[0] = 8 * 128;
        a.workspace = NULL, a.workspace_size = 0;
        size_t bytes = 0;
        cr_assert_eq(fg_attention_bwd_varlen_workspace_size(ctx, &a, &bytes), FG_OK, "%s", fg_last_error(ctx));
        cr_assert_eq(bytes, cells[i].want, "case %zu: %zu bytes, want %zu", i, bytes, cells[i].want);
    }
    /* no sequences: nothing to do, no workspace asked for beyond the layout of zero rows */
    fg_varlen_bwd_args a = call();
    a.batch = 0;
    size_t bytes = 1;
    cr_assert_eq(fg_attention_bwd_varlen_workspace_size(ctx, &a, &bytes), FG_OK, "%s", fg_last_error(ctx));
    cr_assert_eq(fg_attention_bwd_varlen(ctx, &a, NULL), FG_OK, "%s", fg_last_error(ctx));
}

/* The valid call with V of a head dim of its own (DeepSeek's 192/128): q, k, dq, dk of 192, v, o, dout, dv of 128. */
static fg_varlen_bwd_args call_dv(void) {
    fg_varlen_bwd_args a = call();
    a.q = t3(FG_DTYPE_BF16, 100, 8, 192, 0x1000000), a.dq = t3(FG_DTYPE_BF16, 100, 8, 192, 0x4000000);
    a.k = t3(FG_DTYPE_BF16, 300, 2, 192, 0x5000000), a.dk = t3(FG_DTYPE_BF16, 300, 2, 192, 0x7000000);
    return a;
}

/* V's head dim comes from v's shape, as the forward's serving call takes it; O, dO and dV must have it, Q, K, dQ
 * and dK q's, each mismatch refused naming the tensor and the rule; V's head dim has the rules of q's. */
Test(backward_varlen_args, v_of_its_own_head_dim) {
    fg_context *ctx = fake_context();
    fg_varlen_bwd_args a = call_dv();
    a.workspace = NULL, a.workspace_size = 0;
    size_t bytes = 0;
    cr_assert_eq(fg_attention_bwd_varlen_workspace_size(ctx, &a, &bytes), FG_OK, "%s", fg_last_error(ctx));
    a = call_dv(), a.o = t3(FG_DTYPE_BF16, 100, 8, 192, 0x2000000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "o.shape[2] (head_dim) is 192; it must be v's, 128; O, dO and dV have V's");
    a = call_dv(), a.dout = t3(FG_DTYPE_BF16, 100, 8, 192, 0x3000000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "dout.shape[2] (head_dim) is 192; it must be v's, 128");
    a = call_dv(), a.dv = t3(FG_DTYPE_BF16, 300, 2, 192, 0x8000000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "dv.shape[2] (head_dim) is 192; it must be v's, 128");
    a = call_dv(), a.dk = t3(FG_DTYPE_BF16, 300, 2, 128, 0x7000000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "dk.shape[2] (head_dim) is 128; it must be k's, 192");
    a = call_dv(), a.dq = t3(FG_DTYPE_BF16, 100, 8, 128, 0x4000000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "dq.shape[2] (head_dim) is 128; it must be q's, 192");
    a = call_dv(), a.k = t3(FG_DTYPE_BF16, 300, 2, 128, 0x5000000), a.dk = t3(FG_DTYPE_BF16, 300, 2, 128, 0x7000000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "k's head_dim (128) differs from q's (192)");
    a = call_dv();
    a.v = t3(FG_DTYPE_BF16, 300, 2, 264, 0x6000000), a.dv = t3(FG_DTYPE_BF16, 300, 2, 264, 0x8000000);
    a.o = t3(FG_DTYPE_BF16, 100, 8, 264, 0x2000000), a.dout = t3(FG_DTYPE_BF16, 100, 8, 264, 0x3000000);
    expect(&a, FG_ERR_UNSUPPORTED, "v's head_dim 264 is not supported");
}

/* The workspace with V of its own head dim: dQ's rows of Q's head dim (192), GQA's fp32 dK rows of 192 and dV rows of
 * 128 per query head. */
Test(backward_varlen_args, workspace_with_v_of_its_own_head_dim) {
    fg_context *ctx = fake_context();
    const size_t rows = (100 + 384 * 3 + 127) / 128 * 128;
    const size_t dq = 8 * rows * 192 * 4, stat = (8 * rows * 4 + 255) / 256 * 256, dkv = 8 * 300 * (192 + 128) * 4;
    fg_varlen_bwd_args a = call_dv();
    a.workspace = NULL, a.workspace_size = 0;
    size_t bytes = 0;
    cr_assert_eq(fg_attention_bwd_varlen_workspace_size(ctx, &a, &bytes), FG_OK, "%s", fg_last_error(ctx));
    cr_assert_eq(bytes, dq + 2 * stat + dkv, "%zu bytes, want %zu", bytes, dq + 2 * stat + dkv);
}

/* The arguments' size: a caller's struct from a newer header (longer) is read as far as this build knows; an
 * uninitialized one (struct_size 0 or short) is refused naming the init function. */
Test(backward_varlen_args, struct_size_grows_compatibly) {
    fg_context *ctx = fake_context();
    struct {
        fg_varlen_bwd_args a;
        unsigned char later_fields[64];
    } newer;
    memset(&newer, 0xAB, sizeof newer);
    newer.a = call();
    newer.a.workspace = NULL, newer.a.workspace_size = 0;
    newer.a.struct_size = sizeof newer;
    size_t bytes = 0;
    cr_assert_eq(fg_attention_bwd_varlen_workspace_size(ctx, &newer.a, &bytes), FG_OK, "%s", fg_last_error(ctx));
    cr_assert_gt(bytes, 0);
    fg_varlen_bwd_args a = call();
    a.struct_size = 0;
    cr_assert_eq(fg_attention_bwd_varlen_workspace_size(ctx, &a, &bytes), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(ctx), "fg_varlen_bwd_args_init"), "%s", fg_last_error(ctx));
}

/* mod_aux_grad: only for an array the mod declares trainable, f32 of its aux array's shape, contiguous, aligned,
 * overlapping no other tensor, without a mod or past the mod's arrays refused, and not in the deterministic mode. */
Test(backward_varlen_args, aux_gradients_follow_their_rules) {
    static const char text[] = "aux = { bias = fg.aux('f32', 2, 'trainable'), slope = fg.aux('f32', 1) }\n"
                               "score_mod = function(s, b, h, q, kv) return s + fg.load(bias, h, kv % 4) - fg.load(slope, h) end\n";
    fg_mod *m = NULL;
    cr_assert_eq(fg_mod_create(text, strlen(text), "mod.lua", &m), FG_OK, "%s", fg_last_error(NULL));
    cr_assert_eq(fg_mod_aux_trainable(m, 0), 1);
    cr_assert_eq(fg_mod_aux_trainable(m, 1), 0);
    cr_assert_eq(fg_mod_aux_trainable(m, 2), -1);
    cr_assert_eq(fg_mod_aux_trainable(NULL, 0), -1);
    const fg_tensor bias = {ADDR(0xc000000), FG_DTYPE_F32, 2, {8, 4, 0, 0}, {4, 1, 0, 0}};
    const fg_tensor slope = {ADDR(0xc001000), FG_DTYPE_F32, 1, {8, 0, 0, 0}, {1, 0, 0, 0}};
    fg_tensor grad = bias;
    grad.data = ADDR(0xc002000);
    fg_varlen_bwd_args a = call();
    a.mod_aux_grad[0] = grad;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[0] is set, but the call has no mod");
    const fg_varlen_bwd_args with_mod = (a.mod = m, a.mod_aux[0] = bias, a.mod_aux[1] = slope, a);
    a = with_mod, a.mod_aux_grad[1] = slope, a.mod_aux_grad[1].data = ADDR(0xc003000);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "declares 'slope' without \"trainable\": declare it fg.aux(\"f32\", 1, \"trainable\")");
    a = with_mod, a.mod_aux_grad[2] = grad;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[2] is set, but the mod declares fewer aux arrays");
    a = with_mod, a.deterministic = 1;
    expect(&a, FG_ERR_UNSUPPORTED, "mod_aux_grad[0] (bias) and deterministic = 1 are both set");
    a = with_mod, a.mod_aux_grad[0].shape[1] = 5, a.mod_aux_grad[0].stride[0] = 5;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[0] (bias) must be f32 of mod_aux[0]'s shape");
    a = with_mod, a.mod_aux_grad[0].dtype = FG_DTYPE_BF16;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "must be f32 of mod_aux[0]'s shape");
    a = with_mod, a.mod_aux_grad[0].stride[0] = 8;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[0] (bias) must be contiguous");
    a = with_mod, a.mod_aux_grad[0].data = ADDR(0xc002002);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "4-byte aligned device pointer");
    a = with_mod, a.mod_aux_grad[0].data = a.dq.data;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mod_aux_grad[0] (bias) overlaps dq in memory");
    a = with_mod, a.mod_aux_grad[0].data = bias.data;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "overlaps mod_aux[0] in memory");
    fg_mod_destroy(m);
}

/* mask_map (a custom mask's block map kept across calls): only with a mask that reads aux arrays, 256-byte aligned,
 * of fg_mask_map_size bytes at least; mask_map_ready 0 or 1, and only with a buffer. fg_mask_map_size gives 0
 * without such a mask and refuses negative sizes. */
Test(backward_varlen_args, mask_map_follows_its_rules) {
    static const char doc_text[] = "aux = { doc = fg.aux('i32', 1) }\n"
                                   "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, q), fg.load(doc, kv)) end\n";
    static const char win_text[] = "mask_mod = function(b, h, q, kv) return fg.le(kv, q) end\n";
    fg_mod *doc = NULL, *win = NULL;
    cr_assert_eq(fg_mod_create(doc_text, strlen(doc_text), "doc.lua", &doc), FG_OK, "%s", fg_last_error(NULL));
    cr_assert_eq(fg_mod_create(win_text, strlen(win_text), "win.lua", &win), FG_OK, "%s", fg_last_error(NULL));
    size_t need = 0;
    cr_assert_eq(fg_mask_map_size(doc, 3, 8, 60, 200, &need), FG_OK);
    cr_assert_gt(need, 0);
    cr_assert_eq(need % 256, 0);
    size_t none = 1;
    cr_assert_eq(fg_mask_map_size(win, 3, 8, 60, 200, &none), FG_OK);
    cr_assert_eq(none, 0);
    cr_assert_eq(fg_mask_map_size(doc, -1, 8, 60, 200, &none), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(fg_last_error(NULL), "must be >= 0"), "%s", fg_last_error(NULL));
    const fg_tensor docs = {ADDR(0xc000000), FG_DTYPE_I32, 1, {300, 0, 0, 0}, {1, 0, 0, 0}};
    fg_varlen_bwd_args a = call();
    a.mod = doc, a.mod_aux[0] = docs;
    const fg_varlen_bwd_args with_doc = a;
    a.mask_map = ADDR(0xd000000), a.mask_map_size = need - 256;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mask_map_size is");
    a = with_doc, a.mask_map = ADDR(0xd000080), a.mask_map_size = need;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "is not 256-byte aligned");
    a = with_doc, a.mask_map_ready = 1;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mask_map is NULL but mask_map_ready is set");
    a = with_doc, a.mask_map = ADDR(0xd000000), a.mask_map_size = need, a.mask_map_ready = 2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "mask_map_ready is 2");
    a = call(), a.mod = win, a.mask_map = ADDR(0xd000000), a.mask_map_size = need;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "the call has no mask that reads aux arrays");
    /* with its own map the workspace holds no map: the query gives less */
    fg_context *ctx = fake_context();
    size_t with_ws = 0, with_own = 0;
    a = with_doc, a.workspace = NULL, a.workspace_size = 0;
    cr_assert_eq(fg_attention_bwd_varlen_workspace_size(ctx, &a, &with_ws), FG_OK, "%s", fg_last_error(ctx));
    a.mask_map = ADDR(0xd000000), a.mask_map_size = need;
    cr_assert_eq(fg_attention_bwd_varlen_workspace_size(ctx, &a, &with_own), FG_OK, "%s", fg_last_error(ctx));
    cr_assert_geq(with_ws, with_own + need - 256, "%zu against %zu", with_ws, with_own);
    fg_mod_destroy(doc);
    fg_mod_destroy(win);
}
