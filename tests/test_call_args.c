/* test_args.c: every rule on a forward call's arguments (runtime/call_args.c), without a GPU: the pointers
 * are host addresses that are never dereferenced. Each case breaks one rule of a valid call and checks
 * the status and that the sentence names the argument. The GPU suite repeats the common ones through
 * fg_attention_fwd and checks that nothing is written. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include "runtime/call_args.h"
#include "templates/common/bwd_order.h"
#include "runtime/dispatch.h"

/* Fake device addresses, far apart and 256-byte aligned; only their values matter here. */
#define BASE_Q ((uintptr_t)0x10000000)
#define BASE_K ((uintptr_t)0x20000000)
#define BASE_V ((uintptr_t)0x30000000)
#define BASE_O ((uintptr_t)0x40000000)
#define BASE_L ((uintptr_t)0x50000000)
#define BASE_D ((uintptr_t)0x60000000) /* descale factors */

static fg_tensor view(uintptr_t base, fg_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d) {
    fg_tensor t = {(void *)base, dt, 4, {b, s, h, d}, {s * h * d, h * d, d, 1}};
    return t;
}

/* A valid call: bf16, b=2, sq=100, sk=300, 8 query heads over 2 KV heads, d=64, causal, with LSE. */
static fg_fwd_args valid(void) {
    fg_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = view(BASE_Q, FG_DTYPE_BF16, 2, 100, 8, 64);
    a.k = view(BASE_K, FG_DTYPE_BF16, 2, 300, 2, 64);
    a.v = view(BASE_V, FG_DTYPE_BF16, 2, 300, 2, 64);
    a.o = view(BASE_O, FG_DTYPE_BF16, 2, 100, 8, 64);
    fg_tensor l = {(void *)BASE_L, FG_DTYPE_F32, 3, {2, 8, 100}, {800, 100, 1}};
    a.lse = l;
    a.causal = 1;
    return a;
}

static void expect(const fg_fwd_args *a, fg_status want, const char *mention) {
    fg_error e;
    fg_error_clear(&e);
    fg_status st = rt_check_fwd_args(a, 1, &e);
    cr_assert_eq(st, want, "expected %s, got %s (%s)", fg_status_string(want), fg_status_string(st), e.msg);
    if (mention) cr_assert(strstr(e.msg, mention), "'%s' does not mention '%s'", e.msg, mention);
}

/* A valid FP8 call: e4m3 Q/K, V key-major (a [b, hkv, d, 304] buffer viewed as [b, 300, hkv, d]: each
 * head-dim row holds the 300 keys, rounded up to 16), O bf16, one Q factor, per-head K factors, no V
 * factor (1.0); the shapes of valid(). */
static fg_fwd_args valid_fp8(void) {
    fg_fwd_args a = valid();
    a.q.dtype = a.k.dtype = a.v.dtype = FG_DTYPE_E4M3;
    const int64_t skp = 304;
    fg_tensor vt = {(void *)BASE_V, FG_DTYPE_E4M3, 4, {2, 300, 2, 64}, {2 * 64 * skp, 1, 64 * skp, skp}};
    a.v = vt;
    fg_tensor qd = {(void *)BASE_D, FG_DTYPE_F32, 1, {1}, {1}};
    fg_tensor kd = {(void *)(BASE_D + 64), FG_DTYPE_F32, 2, {2, 2}, {2, 1}};
    a.q_descale = qd;
    a.k_descale = kd;
    return a;
}

Test(args, the_base_call_is_valid) {
    fg_fwd_args a = valid();
    expect(&a, FG_OK, NULL);
}

Test(args, null_and_shape_rules) {
    fg_fwd_args a;
    a = valid(); a.q.data = NULL; expect(&a, FG_ERR_INVALID_ARGUMENT, "q.data is NULL");
    a = valid(); a.v.data = NULL; expect(&a, FG_ERR_INVALID_ARGUMENT, "v.data is NULL");
    a = valid(); a.k.ndim = 3; expect(&a, FG_ERR_INVALID_ARGUMENT, "k.ndim");
    a = valid(); a.q.shape[1] = a.o.shape[1] = a.lse.shape[2] = -1; expect(&a, FG_ERR_INVALID_ARGUMENT, "q.shape[1]");
    a = valid(); a.k.stride[0] = -8; expect(&a, FG_ERR_INVALID_ARGUMENT, "k.stride[0]");
    a = valid(); a.o.shape[1] = 101; expect(&a, FG_ERR_INVALID_ARGUMENT, "o.shape");
    a = valid(); a.v.shape[1] = 299; expect(&a, FG_ERR_INVALID_ARGUMENT, "v.shape[1]");
    a = valid(); a.k.shape[0] = a.v.shape[0] = 3; expect(&a, FG_ERR_INVALID_ARGUMENT, "batch");
    a = valid(); a.k.shape[3] = a.v.shape[3] = 32; expect(&a, FG_ERR_INVALID_ARGUMENT, "head_dim differs");
    a = valid(); a.k.shape[2] = a.v.shape[2] = 3; expect(&a, FG_ERR_INVALID_ARGUMENT, "divide");
    a = valid(); a.k.shape[2] = a.v.shape[2] = 0; expect(&a, FG_ERR_INVALID_ARGUMENT, "k/v heads");
}

Test(args, dtype_rules) {
    fg_fwd_args a;
    a = valid(); a.o.dtype = FG_DTYPE_F16; expect(&a, FG_ERR_INVALID_ARGUMENT, "o.dtype");
    a = valid(); a.o.dtype = FG_DTYPE_E4M3; expect(&a, FG_ERR_INVALID_ARGUMENT, "o.dtype is e4m3");
    a = valid(); a.k.dtype = FG_DTYPE_E4M3;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "k.dtype (e4m3) differs from q.dtype (bf16)");
    a = valid(); a.q.dtype = (fg_dtype)42; expect(&a, FG_ERR_INVALID_ARGUMENT, "q.dtype");
    a = valid(); a.lse.dtype = FG_DTYPE_F16; expect(&a, FG_ERR_INVALID_ARGUMENT, "lse.dtype");
}

Test(args, kernel_limits) {
    fg_fwd_args a;
    int bad_dims[] = {0, 4, 7, 60, 264, 512};
    for (size_t i = 0; i < sizeof bad_dims / sizeof bad_dims[0]; i++) {
        a = valid();
        a.q.shape[3] = a.k.shape[3] = a.v.shape[3] = a.o.shape[3] = bad_dims[i];
        expect(&a, FG_ERR_UNSUPPORTED, "head_dim");
    }
    a = valid(); a.q.shape[0] = a.k.shape[0] = a.v.shape[0] = a.o.shape[0] = a.lse.shape[0] = 70000;
    expect(&a, FG_ERR_UNSUPPORTED, "65535");
    /* positions are 32-bit in the kernel: seqlen_q + seqlen_k must stay below 2^31 - 512 */
    a = valid();
    a.q.shape[1] = a.o.shape[1] = a.lse.shape[2] = 1100000000;
    a.k.shape[1] = a.v.shape[1] = 1100000000;
    a.q.shape[0] = a.k.shape[0] = a.v.shape[0] = a.o.shape[0] = a.lse.shape[0] = 1;
    a.q.shape[2] = a.o.shape[2] = a.lse.shape[1] = 1;
    a.k.shape[2] = a.v.shape[2] = 1;
    a.q.shape[3] = a.k.shape[3] = a.v.shape[3] = a.o.shape[3] = 8;
    for (int i = 0; i < 3; i++) a.q.stride[i] = a.k.stride[i] = a.v.stride[i] = a.o.stride[i] = 8;
    a.lse.stride[0] = a.lse.stride[1] = a.lse.stride[2] = 1;
    expect(&a, FG_ERR_UNSUPPORTED, "seqlen_q + seqlen_k");
}

Test(args, strides_alignment_and_extent) {
    fg_fwd_args a;
    a = valid(); a.q.stride[3] = 2; expect(&a, FG_ERR_INVALID_ARGUMENT, "q.stride[3]");
    a = valid(); a.k.data = (void *)(BASE_K + 2); expect(&a, FG_ERR_INVALID_ARGUMENT, "k.data");
    a = valid(); a.v.stride[1] = 2 * 64 + 4; expect(&a, FG_ERR_INVALID_ARGUMENT, "v.stride[1]");
    /* a stride over a dimension of size 1 is never used: any value is fine */
    a = valid();
    a.q.shape[0] = a.k.shape[0] = a.v.shape[0] = a.o.shape[0] = a.lse.shape[0] = 1;
    a.q.stride[0] = 3;
    a.k.shape[2] = a.v.shape[2] = 1;
    a.k.stride[2] = a.v.stride[2] = 1;
    expect(&a, FG_OK, NULL);
    /* strides so large the view would span more than any memory (and overflow 64-bit offsets) */
    a = valid(); a.q.stride[0] = INT64_C(1) << 62; expect(&a, FG_ERR_INVALID_ARGUMENT, "2^48");
    a = valid(); a.k.stride[1] = INT64_MAX - 7; expect(&a, FG_ERR_INVALID_ARGUMENT, "2^48");
}

Test(args, outputs_must_not_overlap) {
    fg_fwd_args a;
    a = valid(); a.o.stride[0] = 0; expect(&a, FG_ERR_INVALID_ARGUMENT, "o's strides");
    a = valid(); a.o.stride[2] = 32; expect(&a, FG_ERR_INVALID_ARGUMENT, "o's strides"); /* heads overlap rows */
    a = valid(); a.o.data = a.k.data; expect(&a, FG_ERR_INVALID_ARGUMENT, "o overlaps k");
    a = valid(); a.o.data = (void *)(BASE_V + 4096); expect(&a, FG_ERR_INVALID_ARGUMENT, "o overlaps v");
    a = valid(); a.o.data = (void *)(BASE_Q + 1024); expect(&a, FG_ERR_INVALID_ARGUMENT, "o overlaps q");
    a = valid(); a.o = a.q; expect(&a, FG_OK, NULL); /* in place into Q is safe */
    a = valid(); a.lse.stride[0] = a.lse.stride[1] = 0; expect(&a, FG_ERR_INVALID_ARGUMENT, "lse's strides");
    a = valid(); a.lse.data = (void *)BASE_O; expect(&a, FG_ERR_INVALID_ARGUMENT, "lse overlaps o");
    /* an LSE laid out [b, sq, h] and viewed as [b, h, sq] (last stride not 1) is fine */
    a = valid(); a.lse.stride[0] = 800; a.lse.stride[1] = 1; a.lse.stride[2] = 8; expect(&a, FG_OK, NULL);
}

Test(args, empty_problems_and_null_pointers) {
    fg_fwd_args a;
    a = valid(); /* sk = 0 with NULL K/V: O = 0, LSE = -inf */
    a.k.shape[1] = a.v.shape[1] = 0;
    a.k.data = a.v.data = NULL;
    expect(&a, FG_OK, NULL);
    cr_assert_not(rt_fwd_is_empty(&a));
    a = valid(); /* sq = 0: nothing to do */
    a.q.shape[1] = a.o.shape[1] = a.lse.shape[2] = 0;
    a.q.data = a.o.data = a.lse.data = NULL;
    expect(&a, FG_OK, NULL);
    cr_assert(rt_fwd_is_empty(&a));
    a = valid(); /* no query heads (and no KV heads): nothing to do */
    a.q.shape[2] = a.o.shape[2] = a.lse.shape[1] = 0;
    a.k.shape[2] = a.v.shape[2] = 0;
    expect(&a, FG_OK, NULL);
    cr_assert(rt_fwd_is_empty(&a));
}

Test(args, scalars) {
    fg_fwd_args a;
    a = valid(); a.softmax_scale = -1.f; expect(&a, FG_ERR_INVALID_ARGUMENT, "softmax_scale");
    a = valid(); a.softmax_scale = __builtin_nanf(""); expect(&a, FG_ERR_INVALID_ARGUMENT, "softmax_scale");
    a = valid(); a.softmax_scale = 0.125f; expect(&a, FG_OK, NULL);
    a = valid(); a.causal = 2; expect(&a, FG_ERR_INVALID_ARGUMENT, "causal");
}

/* ---- FP8 ---- */

Test(args, fp8_base_calls_are_valid) {
    fg_fwd_args a;
    a = valid_fp8(); expect(&a, FG_OK, NULL);
    a = valid_fp8(); a.o.dtype = FG_DTYPE_F16; expect(&a, FG_OK, NULL); /* O fp16 */
    a = valid_fp8(); a.q.dtype = a.k.dtype = a.v.dtype = FG_DTYPE_E5M2; expect(&a, FG_OK, NULL);
    a = valid_fp8(); /* no descale factors at all: 1.0 each */
    a.q_descale.data = a.k_descale.data = NULL;
    expect(&a, FG_OK, NULL);
    a = valid_fp8(); /* per-tensor factors for all three; per-head ones with any strides, also 0 */
    a.v_descale = a.q_descale;
    a.k_descale.stride[0] = 0;
    a.k_descale.stride[1] = 0;
    expect(&a, FG_OK, NULL);
    a = valid_fp8(); /* an absent factor's other fields are not looked at */
    a.q_descale.data = NULL;
    a.q_descale.ndim = 7;
    a.q_descale.dtype = FG_DTYPE_E4M3;
    expect(&a, FG_OK, NULL);
    a = valid_fp8(); /* one key: stride[1] is never stepped over */
    a.k.shape[1] = a.v.shape[1] = 1;
    a.v.stride[1] = 64;
    a.v.stride[3] = 16;
    a.v.stride[2] = 64 * 16;
    a.v.stride[0] = 2 * 64 * 16;
    expect(&a, FG_OK, NULL);
    a = valid_fp8(); /* rows exactly seqlen_k long when it is a multiple of 16 */
    a.k.shape[1] = a.v.shape[1] = 320;
    a.k.stride[0] = 320 * 2 * 64;
    a.v.stride[3] = 320;
    a.v.stride[2] = 64 * 320;
    a.v.stride[0] = 2 * 64 * 320;
    expect(&a, FG_OK, NULL);
}

Test(args, fp8_dtype_mix_and_output_dtype) {
    fg_fwd_args a;
    a = valid_fp8(); a.k.dtype = FG_DTYPE_E5M2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "k.dtype (e5m2) differs from q.dtype (e4m3); q, k and v must share one fp8");
    a = valid_fp8(); a.v.dtype = FG_DTYPE_BF16;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "v.dtype (bf16) differs from q.dtype (e4m3)");
    a = valid_fp8(); a.o.dtype = FG_DTYPE_E4M3;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "o.dtype is e4m3; the output is fp16 or bf16");
    a = valid_fp8(); a.o.dtype = FG_DTYPE_F32; expect(&a, FG_ERR_INVALID_ARGUMENT, "o.dtype is fp32");
    a = valid(); a.q.dtype = FG_DTYPE_E5M2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "k.dtype (bf16) differs from q.dtype (e5m2)");
}

Test(args, fp8_v_layout) {
    fg_fwd_args a;
    /* V laid out like K (head_dim contiguous) is refused: fp8 V is key-major */
    a = valid_fp8(); a.v = a.k; a.v.data = (void *)BASE_V;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "v.stride[1] (seqlen) is 128");
    a = valid_fp8(); a.v.stride[1] = 2; expect(&a, FG_ERR_INVALID_ARGUMENT, "key-major");
    /* head-dim rows shorter than seqlen_k would overlap the next row */
    a = valid_fp8(); a.v.stride[3] = 288; expect(&a, FG_ERR_INVALID_ARGUMENT, "less than seqlen_k (300)");
    /* rows must start on 16 bytes: the head-dim stride is a multiple of 16 one-byte elements */
    a = valid_fp8(); a.v.stride[3] = 310; expect(&a, FG_ERR_INVALID_ARGUMENT, "v.stride[3] (head_dim) is 310 elements");
    a = valid_fp8(); a.v.stride[0] += 8; expect(&a, FG_ERR_INVALID_ARGUMENT, "v.stride[0]");
    a = valid_fp8(); a.v.stride[2] += 4; expect(&a, FG_ERR_INVALID_ARGUMENT, "v.stride[2]");
    a = valid_fp8(); a.v.data = (void *)(BASE_V + 8); expect(&a, FG_ERR_INVALID_ARGUMENT, "v.data");
    /* the head-dim stride takes part in the extent like any other */
    a = valid_fp8(); a.v.stride[3] = INT64_C(1) << 47; expect(&a, FG_ERR_INVALID_ARGUMENT, "2^48");
    /* no seqlen_k: V is empty, its layout is not looked at */
    a = valid_fp8();
    a.k.shape[1] = a.v.shape[1] = 0;
    a.v.stride[3] = 0;
    a.k.data = a.v.data = NULL;
    expect(&a, FG_OK, NULL);
}

Test(args, fp8_q_and_k_rows_are_16_bytes) {
    fg_fwd_args a;
    /* 72 elements: 144 bytes in bf16 (fine), 72 bytes in fp8 (not a multiple of 16) */
    a = valid(); a.q.stride[2] = 72; a.q.stride[1] = 8 * 72; a.q.stride[0] = 100 * 8 * 72; expect(&a, FG_OK, NULL);
    a = valid_fp8(); a.q.stride[2] = 72; a.q.stride[1] = 8 * 72; a.q.stride[0] = 100 * 8 * 72;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "q.stride[2] (heads) is 72 elements, not a multiple of 16 bytes (16 elements)");
    a = valid_fp8(); a.k.stride[3] = 2; expect(&a, FG_ERR_INVALID_ARGUMENT, "k.stride[3]");
}

Test(args, fp8_v_extent_uses_its_strides) {
    /* V^T spans (2-1)*38912 + 299*1 + (2-1)*19456 + 63*304 + 1 = 77820 bytes from BASE_V */
    fg_fwd_args a;
    a = valid_fp8(); a.o.data = (void *)(BASE_V + 77808); expect(&a, FG_ERR_INVALID_ARGUMENT, "o overlaps v");
    a = valid_fp8(); a.o.data = (void *)(BASE_V + 77824); a.lse.data = (void *)(BASE_V + 77824 + 2 * 100 * 8 * 64 * 2);
    expect(&a, FG_OK, NULL);
}

Test(args, descale_rules) {
    fg_fwd_args a;
    /* 16-bit calls take no descale factors */
    a = valid(); a.q_descale = valid_fp8().q_descale;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "q_descale.data is set but q is bf16; descale factors are for fp8");
    a = valid(); a.v_descale = valid_fp8().k_descale; expect(&a, FG_ERR_INVALID_ARGUMENT, "v_descale.data is set");
    a = valid_fp8(); a.k_descale.dtype = FG_DTYPE_BF16;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "k_descale.dtype is bf16; descale factors are fp32");
    a = valid_fp8(); a.q_descale.ndim = 3; expect(&a, FG_ERR_INVALID_ARGUMENT, "q_descale.ndim is 3");
    a = valid_fp8(); a.q_descale.ndim = 0; expect(&a, FG_ERR_INVALID_ARGUMENT, "q_descale.ndim is 0");
    a = valid_fp8(); a.q_descale.shape[0] = 2;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "q_descale.shape is [2]; a one-dimensional");
    a = valid_fp8(); a.k_descale.shape[1] = 8; /* per query head is not a layout flashgen takes */
    expect(&a, FG_ERR_INVALID_ARGUMENT, "k_descale.shape is [2, 8]; a two-dimensional descale tensor has shape "
                                        "[batch, heads_kv] = [2, 2]");
    a = valid_fp8(); a.k_descale.shape[0] = 1; expect(&a, FG_ERR_INVALID_ARGUMENT, "k_descale.shape is [1, 2]");
    a = valid_fp8(); a.k_descale.stride[0] = -2; expect(&a, FG_ERR_INVALID_ARGUMENT, "k_descale.stride[0] is -2");
    a = valid_fp8(); a.k_descale.stride[1] = INT64_C(1) << 50;
    expect(&a, FG_ERR_INVALID_ARGUMENT, "k_descale's strides");
    a = valid_fp8(); a.v_descale = a.q_descale; a.v_descale.data = (void *)(BASE_D + 130);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "v_descale.data");
    /* outputs must not overlap the factors (inputs may share them) */
    a = valid_fp8(); a.k_descale.data = (void *)(BASE_O + 256);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "o overlaps k_descale");
    a = valid_fp8(); a.q_descale.data = (void *)(BASE_L + 4);
    expect(&a, FG_ERR_INVALID_ARGUMENT, "lse overlaps q_descale");
    a = valid_fp8(); a.v_descale = a.k_descale = a.q_descale; expect(&a, FG_OK, NULL); /* inputs may share one */
}

Test(args, fp8_explain_needs_no_pointers_or_alignment) {
    fg_fwd_args a = valid_fp8();
    a.q.data = a.k.data = a.v.data = a.o.data = a.lse.data = NULL;
    a.v.stride[3] = 310; /* an alignment rule: judged only when a launch follows */
    fg_error e;
    cr_assert_eq(rt_check_fwd_args(&a, 0, &e), FG_OK, "%s", e.msg);
    a.v.stride[3] = 296; /* a layout rule: judged always */
    cr_assert_eq(rt_check_fwd_args(&a, 0, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "seqlen_k"), "%s", e.msg);
}

Test(args, explain_and_prepare_need_no_pointers) {
    fg_fwd_args a = valid();
    a.q.data = a.k.data = a.v.data = a.o.data = NULL;
    fg_error e;
    cr_assert_eq(rt_check_fwd_args(&a, 0, &e), FG_OK, "%s", e.msg);
}

/* ---- the backward (rt_check_bwd_args) ---- */

#define BASE_DO ((uintptr_t)0x70000000)
#define BASE_DQ ((uintptr_t)0x80000000)
#define BASE_DK ((uintptr_t)0x90000000)
#define BASE_DV ((uintptr_t)0xA0000000)
#define BASE_WS ((uintptr_t)0xB0000000)

/* A valid backward call over valid()'s forward: dO like O, gradients like Q, K, V, a 1 MiB workspace. */
static fg_bwd_args valid_bwd(void) {
    fg_fwd_args f = valid();
    fg_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o, a.lse = f.lse;
    a.dout = view(BASE_DO, FG_DTYPE_BF16, 2, 100, 8, 64);
    a.dq = view(BASE_DQ, FG_DTYPE_BF16, 2, 100, 8, 64);
    a.dk = view(BASE_DK, FG_DTYPE_BF16, 2, 300, 2, 64);
    a.dv = view(BASE_DV, FG_DTYPE_BF16, 2, 300, 2, 64);
    a.causal = 1;
    a.workspace = (void *)BASE_WS;
    a.workspace_size = 1 << 20;
    return a;
}

static void expect_bwd(const fg_bwd_args *a, fg_status want, const char *mention) {
    fg_error e;
    fg_error_clear(&e);
    fg_status st = rt_check_bwd_args(a, 1, 1 << 20, &e);
    cr_assert_eq(st, want, "expected %s, got %s (%s)", fg_status_string(want), fg_status_string(st), e.msg);
    if (mention) cr_assert(strstr(e.msg, mention), "'%s' does not mention '%s'", e.msg, mention);
}

Test(args, backward_rules) {
    fg_bwd_args a = valid_bwd();
    expect_bwd(&a, FG_OK, NULL);
    a = valid_bwd(), a.lse.data = NULL;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "lse.data is NULL");
    a = valid_bwd(), a.dout.shape[1] = 99;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "dout.shape[1]");
    a = valid_bwd(), a.dk.dtype = FG_DTYPE_F16;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "dk.dtype");
    a = valid_bwd(), a.dv.stride[3] = 2;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "dv.stride[3]");
    a = valid_bwd(), a.dq.data = (void *)(BASE_DQ + 2);
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "dq.data");
    a = valid_bwd(), a.dq.data = (void *)(BASE_Q + 128);
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "dq overlaps q");
    a = valid_bwd(), a.dv.data = a.dk.data;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "dv overlaps dk");
    a = valid_bwd(), a.workspace = (void *)BASE_DQ;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "the workspace overlaps dq");
    a = valid_bwd(); /* seqlen_q 0: an empty LSE may be NULL, as PyTorch gives empty tensors */
    a.q.shape[1] = a.o.shape[1] = a.dout.shape[1] = a.dq.shape[1] = a.lse.shape[2] = 0;
    a.lse.data = NULL;
    expect_bwd(&a, FG_OK, NULL);
    a = valid_bwd(), a.workspace_size = (1 << 20) - 1;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "workspace_size");
    a = valid_bwd(), a.workspace = (void *)(BASE_WS + 16);
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "256-byte aligned");
    a = valid_bwd(), a.deterministic = 3;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "deterministic");
    a = valid_bwd();
    a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = FG_DTYPE_E4M3;
    expect_bwd(&a, FG_ERR_UNSUPPORTED, "fp16 or bf16");
    /* The backward takes the forward's head dims, every multiple of 8 from 8 to 256 (176 and 72 computed at 192
     * and 80); whether the GPU's shared memory holds the tiles of 256 is the kernel's to say. 264: no. */
    static const struct { int d; const char *says; } dims[5] = {
        {176, NULL}, {72, NULL}, {256, NULL}, {8, NULL}, {264, "head_dim 264 is not supported"}};
    for (int j = 0; j < 5; j++) {
        a = valid_bwd();
        fg_tensor *ts[8] = {&a.q, &a.k, &a.v, &a.o, &a.dout, &a.dq, &a.dk, &a.dv};
        for (int i = 0; i < 8; i++) {
            ts[i]->shape[3] = dims[j].d;
            ts[i]->stride[2] = dims[j].d;
            ts[i]->stride[1] = ts[i]->shape[2] * dims[j].d;
            ts[i]->stride[0] = ts[i]->shape[1] * ts[i]->stride[1];
        }
        expect_bwd(&a, dims[j].says ? FG_ERR_UNSUPPORTED : FG_OK, dims[j].says);
    }
    /* The workspace query (need_data 0) takes NULL pointers. */
    a = valid_bwd();
    a.workspace = NULL, a.workspace_size = 0, a.dq.data = a.dk.data = a.dv.data = NULL;
    fg_error e;
    cr_assert_eq(rt_check_bwd_args(&a, 0, 0, &e), FG_OK, "%s", e.msg);
}

/* The backward takes V of a head dim of its own (head_dim_v, v.shape[3]), which O, dO and dV have; Q, K, dQ and dK
 * keep q's. Mismatches name the tensor and the rule; the forward call (fg_attention_fwd) still refuses it. */
Test(args, backward_v_of_its_own_head_dim) {
    fg_bwd_args a = valid_bwd();
    fg_tensor *vs[4] = {&a.v, &a.o, &a.dout, &a.dv};
    for (int i = 0; i < 4; i++) { /* 64 -> 32: strides shrink, so the views stay inside their old spans */
        vs[i]->shape[3] = 32, vs[i]->stride[2] = 32;
        vs[i]->stride[1] = vs[i]->shape[2] * 32, vs[i]->stride[0] = vs[i]->shape[1] * vs[i]->stride[1];
    }
    expect_bwd(&a, FG_OK, NULL);
    fg_bwd_args b = a;
    b.o.shape[3] = 64;
    expect_bwd(&b, FG_ERR_INVALID_ARGUMENT, "o's head_dim (64) differs from v's (32)");
    b = a, b.dout.shape[3] = 64;
    expect_bwd(&b, FG_ERR_INVALID_ARGUMENT, "dout.shape[3] (head_dim) is 64; it must be o's, 32");
    b = a, b.dv.shape[3] = 64;
    expect_bwd(&b, FG_ERR_INVALID_ARGUMENT, "dv.shape[3] (head_dim) is 64; it must be v's, 32");
    b = a, b.k.shape[3] = 32;
    expect_bwd(&b, FG_ERR_INVALID_ARGUMENT, "k's head_dim (32) differs from q's (64)");
    b = a, b.v.shape[3] = b.o.shape[3] = b.dout.shape[3] = b.dv.shape[3] = 12;
    expect_bwd(&b, FG_ERR_UNSUPPORTED, "v's head_dim 12 is not supported");
    fg_fwd_args f = valid();
    f.v = a.v, f.o = a.o;
    fg_error e;
    cr_assert_eq(rt_check_fwd_args(&f, 1, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "head_dim differs"), "%s", e.msg);
}

/* The forward's schedule (runtime/forward.c rt_causal_group, rt_launch_grid), on a context as an H200
 * would fill it (132 SMs, 60 MiB of L2): which causal calls interleave how many (head, batch) pairs, and
 * the grid each family gets. */
static fg_fwd_args shaped(int b, int sq, int hq, int hkv, int d) {
    fg_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = view(BASE_Q, FG_DTYPE_BF16, b, sq, hq, d);
    a.k = view(BASE_K, FG_DTYPE_BF16, b, sq, hkv, d);
    a.causal = 1;
    return a;
}

/* A context as an H200 fills it for the schedule rules: 132 SMs, 60 MiB of L2, nothing else. */
static fg_context h200_like(void) {
    fg_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.sm_count = 132;
    ctx.l2_bytes = 60 << 20;
    return ctx;
}

Test(args, causal_tile_order_and_grid) {
    fg_context ctx = h200_like();
    fg_spec mma = {.kind = FG_KIND_FWD, .arch = 90, .dtype = FG_DTYPE_BF16, .head_dim = 128, .block_m = 128,
                   .block_n = 48, .warps = 4, .stages = 2, .causal = 1};
    fg_spec wg = mma;
    wg.arch_accel = 1, wg.block_n = 128, wg.warps = 12;
    /* The protocol's d 128 2k: 8 x 16 pairs, 16 query blocks of 128. */
    fg_fwd_args a = shaped(8, 2048, 16, 16, 128);
    cr_assert_eq(rt_causal_group(&ctx, &mma, &a), 16, "mma.sync: one batch's heads (16 <= 132 / 4)");
    unsigned g[3];
    cr_assert_eq(rt_launch_grid(&ctx, &mma, &a, rt_causal_group(&ctx, &mma, &a), g), 0);
    cr_assert(g[0] == 16 && g[1] == 16 && g[2] == 8, "grouped grid (heads, query blocks, batch): %u %u %u", g[0], g[1], g[2]);
    /* sm_90a: at most 132 / 8 = 16 pairs and a third of the L2 over 1 MiB of K/V each (20): 16. */
    cr_assert_eq(rt_causal_group(&ctx, &wg, &a), 16);
    cr_assert_eq(rt_launch_grid(&ctx, &wg, &a, rt_causal_group(&ctx, &wg, &a), g), FG_GRID_DYNAMIC,
                 "causal sm_90a: persistent, tiles from a counter");
    cr_assert(g[0] == 132 && g[1] == 1 && g[2] == 1, "one CTA an SM: %u", g[0]);
    ctx.sm90_grid = 1; /* FLASHGEN_SM90_GRID=tiles */
    cr_assert_eq(rt_launch_grid(&ctx, &wg, &a, rt_causal_group(&ctx, &wg, &a), g), FG_GRID_TILES);
    cr_assert(g[0] == 16 * 128 && g[1] == 1 && g[2] == 1, "1-d grid of tiles: %u", g[0]);
    ctx.sm90_grid = 2; /* persistent */
    cr_assert_eq(rt_launch_grid(&ctx, &wg, &a, rt_causal_group(&ctx, &wg, &a), g), FG_GRID_STRIDE);
    cr_assert_eq(g[0], 132);
    ctx.sm90_grid = 0;
    wg.causal = 0;
    cr_assert_eq(rt_launch_grid(&ctx, &wg, &a, 1, g), FG_GRID_DYNAMIC, "non-causal sm_90a: tiles from a counter too");
    cr_assert_eq(g[0], 132);
    wg.causal = 1;
    /* 16k: 8 MiB of K/V a pair, so 2 pairs fit a third of the L2; 12 pairs: the largest power of two
     * dividing them under the cap. */
    a = shaped(1, 16384, 16, 16, 128);
    cr_assert_eq(rt_causal_group(&ctx, &wg, &a), 2);
    a = shaped(3, 2048, 4, 4, 128);
    cr_assert_eq(rt_causal_group(&ctx, &wg, &a), 4);
    /* GQA: 8 query heads a KV head share its K/V, so the L2 bound grows 8 times (the SM bound stays). */
    a = shaped(1, 16384, 16, 2, 128);
    cr_assert_eq(rt_causal_group(&ctx, &wg, &a), 16);
    /* mma.sync: more heads than 132 / 4 = 33, or query blocks past grid y's 65535: head by head. */
    a = shaped(1, 2048, 64, 64, 128);
    cr_assert_eq(rt_causal_group(&ctx, &mma, &a), 1);
    cr_assert_eq(rt_launch_grid(&ctx, &mma, &a, rt_causal_group(&ctx, &mma, &a), g), 0);
    cr_assert(g[0] == 16 && g[1] == 64 && g[2] == 1, "plain grid (query blocks, heads, batch): %u %u %u", g[0], g[1], g[2]);
    a = shaped(1, 65536 * 128 + 1, 2, 2, 128);
    cr_assert_eq(rt_causal_group(&ctx, &mma, &a), 1);
    /* Tile counts past 2^31 (the kernels' 32-bit tile index), a driver that gives no L2 size, and
     * non-causal calls: head by head. */
    a = shaped(65535, 65536, 1024, 1024, 128);
    cr_assert_eq(rt_causal_group(&ctx, &wg, &a), 1);
    a = shaped(8, 2048, 16, 16, 128);
    fg_context no_l2 = ctx;
    no_l2.l2_bytes = 0;
    cr_assert_eq(rt_causal_group(&no_l2, &wg, &a), 1);
    a.causal = 0;
    fg_spec nc = mma;
    nc.causal = 0;
    cr_assert_eq(rt_causal_group(&ctx, &nc, &a), 1);
    /* FLASHGEN_CAUSAL_GROUP=N caps the group instead of the rule (1: head by head). */
    a = shaped(8, 2048, 16, 16, 128);
    ctx.causal_group = 8;
    cr_assert_eq(rt_causal_group(&ctx, &wg, &a), 8);
    cr_assert_eq(rt_causal_group(&ctx, &mma, &a), 1, "mma.sync groups all 16 heads or none");
    ctx.causal_group = 1;
    cr_assert_eq(rt_causal_group(&ctx, &wg, &a), 1);
}

/* The backward's causal order (runtime/backward.c rt_bwd_causal_group) on the same H200-like context: the sm_90a
 * kernel interleaves the key blocks of the largest power of two of heads dividing the heads whose Q, dO and dQ
 * accumulator (8 bytes a head_dim column a padded query row) fit in a third of L2; the mma.sync kernel, non-causal
 * calls and a driver without an L2 size go head by head; FLASHGEN_CAUSAL_GROUP=N caps it. */
static fg_bwd_args bwd_shaped(int b, int s, int hq, int d) {
    fg_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = view(BASE_Q, FG_DTYPE_BF16, b, s, hq, d);
    a.k = view(BASE_K, FG_DTYPE_BF16, b, s, hq, d);
    a.causal = 1;
    return a;
}

Test(args, bwd_causal_order) {
    fg_context ctx = h200_like();
    fg_spec wg = {.kind = FG_KIND_BWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 128,
                  .block_m = 64, .block_n = 128, .warps = 8, .stages = 2, .causal = 1};
    fg_bwd_args a = bwd_shaped(8, 2048, 16, 128); /* 2 MiB a head: 10 fit 20 MiB, so 8 */
    cr_assert_eq(rt_bwd_causal_group(&ctx, &wg, &a), 8);
    a = bwd_shaped(32, 512, 16, 128); /* 512 KiB a head: all 16 */
    cr_assert_eq(rt_bwd_causal_group(&ctx, &wg, &a), 16);
    a = bwd_shaped(1, 16384, 16, 128); /* 16 MiB a head: head by head */
    cr_assert_eq(rt_bwd_causal_group(&ctx, &wg, &a), 1);
    a = bwd_shaped(1, 16384, 32, 64); /* 8 MiB a head: 2 */
    wg.head_dim = 64, wg.block_m = 128;
    cr_assert_eq(rt_bwd_causal_group(&ctx, &wg, &a), 2);
    wg.head_dim = 128, wg.block_m = 64;
    a = bwd_shaped(8, 2048, 12, 128); /* at most 10, dividing 12: 4 */
    cr_assert_eq(rt_bwd_causal_group(&ctx, &wg, &a), 4);
    a = bwd_shaped(8, 2048, 16, 128);
    fg_spec mma = wg;
    mma.arch_accel = 0;
    cr_assert_eq(rt_bwd_causal_group(&ctx, &mma, &a), 1, "the mma.sync kernel keeps its grid");
    fg_spec nc = wg;
    nc.causal = 0;
    cr_assert_eq(rt_bwd_causal_group(&ctx, &nc, &a), 1);
    fg_context no_l2 = ctx;
    no_l2.l2_bytes = 0;
    cr_assert_eq(rt_bwd_causal_group(&no_l2, &wg, &a), 1);
    ctx.causal_group = 1; /* FLASHGEN_CAUSAL_GROUP=1 */
    cr_assert_eq(rt_bwd_causal_group(&ctx, &wg, &a), 1);
    ctx.causal_group = 4;
    cr_assert_eq(rt_bwd_causal_group(&ctx, &wg, &a), 4);
    ctx.causal_group = 64; /* a cap above the heads: the heads */
    cr_assert_eq(rt_bwd_causal_group(&ctx, &wg, &a), 16);
}


/* The backward's workspace (fg_attention_bwd_workspace_size; runtime/backward.c bwd_rows_padded): each (batch, head)'s
 * rows padded to a multiple of 128, and on an sm_90 device at head_dim 128 without a causal mask, where the
 * sm_90a kernel's 80-query blocks may run, to the multiple of 128 at or past the last 80-row block (250
 * queries: 4 blocks, 320 rows, so 384). MHA, not deterministic: the fp32 dQ accumulator, then the LSE and D
 * rows, each region 256-byte aligned. */
static size_t bwd_ws(fg_context *ctx, int64_t sq, int64_t d, int causal) {
    fg_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = view(BASE_Q, FG_DTYPE_BF16, 1, sq, 2, d);
    a.k = view(BASE_K, FG_DTYPE_BF16, 1, 300, 2, d);
    a.v = view(BASE_V, FG_DTYPE_BF16, 1, 300, 2, d);
    a.o = view(BASE_O, FG_DTYPE_BF16, 1, sq, 2, d);
    a.dout = view(BASE_DO, FG_DTYPE_BF16, 1, sq, 2, d);
    a.dq = view(BASE_DQ, FG_DTYPE_BF16, 1, sq, 2, d);
    a.dk = view(BASE_DK, FG_DTYPE_BF16, 1, 300, 2, d);
    a.dv = view(BASE_DV, FG_DTYPE_BF16, 1, 300, 2, d);
    fg_tensor l = {(void *)BASE_L, FG_DTYPE_F32, 3, {1, 2, sq}, {2 * sq, sq, 1}};
    a.lse = l;
    a.causal = causal;
    size_t bytes = 0;
    cr_assert_eq(fg_attention_bwd_workspace_size(ctx, &a, &bytes), FG_OK);
    return bytes;
}
static size_t ws_for_rows(int64_t rows, int64_t d) {
    const size_t acc = (size_t)(2 * rows * d * 4 + 255) / 256 * 256, row = (size_t)(2 * rows * 4 + 255) / 256 * 256;
    return acc + 2 * row;
}

/* Issue 37 item 7: a gradient whose elements share memory is refused like O and LSE are (a zero stride on a
 * dimension longer than 1 raced the gradients and broke the deterministic mode), with data or without. */
Test(args, backward_gradients_overlapping_themselves_are_refused) {
    fg_bwd_args a = valid_bwd();
    a.dq.stride[1] = 0;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "dq's strides [51200, 0, 64, 1] make distinct elements share memory");
    a = valid_bwd(), a.dk.stride[2] = 32;
    expect_bwd(&a, FG_ERR_INVALID_ARGUMENT, "dk's strides");
    a = valid_bwd(), a.dv.stride[0] = 0;
    fg_error e;
    cr_assert_eq(rt_check_bwd_args(&a, 0, 0, &e), FG_ERR_INVALID_ARGUMENT, "the workspace query refuses it too");
    cr_assert(strstr(e.msg, "dv's strides"), "%s", e.msg);
}

/* Issue 37 item 7: the workspace size is computed with checked arithmetic; a GQA shape whose per-query-head
 * dK/dV accumulator exceeds size_t is refused with a sentence instead of wrapping to a small size. */
Test(args, backward_workspace_size_overflow_is_refused) {
    fg_context ctx = h200_like();
    ctx.arch = 90;
    fg_bwd_args a;
    memset(&a, 0, sizeof a);
    const int64_t hq = 65535, sk = (int64_t)1 << 30;
    a.q = view(0, FG_DTYPE_BF16, 1, 1, hq, 64);
    a.o = a.dout = a.dq = a.q;
    a.k = view(0, FG_DTYPE_BF16, 1, sk, 1, 64);
    a.v = a.dk = a.dv = a.k;
    fg_tensor l = {NULL, FG_DTYPE_F32, 3, {1, hq, 1}, {hq, 1, 1}};
    a.lse = l;
    fg_error e;
    fg_error_clear(&e);
    cr_assert_eq(rt_check_bwd_args(&a, 0, 0, &e), FG_OK, "the shape itself is valid: %s", e.msg);
    backward_layout L;
    cr_assert_eq(backward_workspace_layout(&ctx, &a, &L, &e), FG_OK, "about 2^57 bytes fit 64 bits: %s", e.msg);
    cr_assert_eq(L.total % 256, 0);
    cr_assert_geq(L.total, (size_t)2 * hq * sk * 64 * 4);
    /* batch 1024 x 2^31 - 1024 keys: K spans just under 2^48 bytes, and the accumulator 2 x 1024 x 65535 x 2^31 x 256
     * bytes, about 2^66 */
    a.q = view(0, FG_DTYPE_BF16, 1024, 1, hq, 64);
    a.o = a.dout = a.dq = a.q;
    a.k = view(0, FG_DTYPE_BF16, 1024, ((int64_t)1 << 31) - 1024, 1, 64);
    a.v = a.dk = a.dv = a.k;
    fg_tensor l2 = {NULL, FG_DTYPE_F32, 3, {1024, hq, 1}, {hq, 1, 1}};
    a.lse = l2;
    cr_assert_eq(rt_check_bwd_args(&a, 0, 0, &e), FG_OK, "the shape itself is valid: %s", e.msg);
    cr_assert_eq(backward_workspace_layout(&ctx, &a, &L, &e), FG_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "does not fit in size_t"), "%s", e.msg);
    size_t bytes = 1;
    cr_assert_eq(fg_attention_bwd_workspace_size(&ctx, &a, &bytes), FG_ERR_INVALID_ARGUMENT);
}

Test(args, bwd_workspace_rows) {
    fg_context ctx = h200_like();
    ctx.arch = 90;
    cr_assert_eq(bwd_ws(&ctx, 250, 128, 0), ws_for_rows(384, 128), "80-row blocks: 320 rows, padded to 384");
    cr_assert_eq(bwd_ws(&ctx, 250, 128, 1), ws_for_rows(256, 128), "causal: 64-row blocks only");
    cr_assert_eq(bwd_ws(&ctx, 240, 128, 0), ws_for_rows(256, 128), "240 = 3 blocks of 80, within 256");
    cr_assert_eq(bwd_ws(&ctx, 1000, 128, 0), ws_for_rows(1152, 128), "1040 rows of 80-row blocks");
    cr_assert_eq(bwd_ws(&ctx, 250, 64, 0), ws_for_rows(256, 64), "head_dim 64: 128-query blocks");
    ctx.arch = 80;
    cr_assert_eq(bwd_ws(&ctx, 250, 128, 0), ws_for_rows(256, 128), "sm_80: no sm_90a kernel");
}

/* ---- the deterministic backward's dQ order (templates/common/bwd_order.h, pasted into the kernels) ---- */

/* Causal: at every query block the key blocks that see it are 0 .. top, and their ranks are a permutation
 * in descending order (each key block's predecessor reached the block earlier: its stream starts later);
 * every key block sees the last query block. */
Test(args, bwd_order_causal_ranks) {
    static const int lens[] = {1, 7, 64, 100, 130, 257, 700, 1000};
    static const int blocks[] = {32, 64, 128};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int x = 0; x < 8; x++)
                for (int y = 0; y < 8; y++) {
                    const int bm = blocks[a], bn = blocks[b], sq = lens[x], sk = lens[y];
                    const int nb = (sk + bn - 1) / bn, nm = (sq + bm - 1) / bm;
                    for (int j = 0; j < nb; j++) {
                        const int f = fg_bwd_first_query_block(j * bn, sq, sk, bm, 1);
                        cr_assert(f >= 0 && f < nm, "bm %d bn %d sq %d sk %d: key block %d starts at %d of %d", bm,
                                  bn, sq, sk, j, f, nm);
                        if (j > 0)
                            cr_assert_geq(f, fg_bwd_first_query_block((j - 1) * bn, sq, sk, bm, 1));
                    }
                    for (int m = 0; m < nm; m++) {
                        int seen = 0;
                        for (int j = 0; j < nb; j++) seen += fg_bwd_first_query_block(j * bn, sq, sk, bm, 1) <= m;
                        for (int j = 0; j < seen; j++) {
                            cr_assert_leq(fg_bwd_first_query_block(j * bn, sq, sk, bm, 1), m, "0 .. top see m");
                            cr_assert_eq(fg_bwd_rank_causal(j, m, nb, bm, bn, sq, sk), seen - 1 - j,
                                         "bm %d bn %d sq %d sk %d m %d j %d", bm, bn, sq, sk, m, j);
                        }
                    }
                }
}

/* Rotated streams (not causal): at every query block the ranks are a permutation, in the order the key
 * blocks reach the block (key block j streams from j mod n_m on), ties ascending. */
Test(args, bwd_order_rotated_ranks) {
    for (int nb = 1; nb <= 40; nb++)
        for (int nm = 1; nm <= 40; nm++)
            for (int m = 0; m < nm; m++) {
                unsigned char used[40] = {0};
                for (int j = 0; j < nb; j++) {
                    const int r = fg_bwd_rank_rotated(j, m, nb, nm);
                    cr_assert(r >= 0 && r < nb && !used[r], "nb %d nm %d m %d j %d: rank %d", nb, nm, m, j, r);
                    used[r] = 1;
                    for (int k = 0; k < nb; k++) { /* k before j exactly when it arrives first, or ties lower */
                        const int sj = (m - j % nm + nm) % nm, sk = (m - k % nm + nm) % nm;
                        const int before = sk < sj || (sk == sj && k < j);
                        cr_assert_eq(fg_bwd_rank_rotated(k, m, nb, nm) < r, before, "nb %d nm %d m %d: %d vs %d", nb,
                                     nm, m, k, j);
                    }
                }
            }
}

/* A model of the deterministic main kernel's waits: launches of `heads` heads of nb key blocks each over
 * nm query blocks, CTAs dispatched in grid order (the causal grid's x reversed) into `slots` resident
 * places, the launches taking freed places in turn. A CTA streams its query blocks; at each it first hands
 * on the turn of its previous add (the deferred hand-on), then waits until the block's count equals its
 * rank, adds, and moves on; after its last block it hands on and exits. Returns 1 when every CTA
 * finished, 0 on a deadlock (a round in which nothing moved). order: 0 ascending, 1 causal, 2 rotated. */
#define ORD_MAXC 4096
typedef struct { int head, j, it, phase, pending, done, resident; } ord_cta;
static int order_run(int order, int launches, int heads, int nb, int nm, int bm, int bn, int slots) {
    static ord_cta c[2][ORD_MAXC];
    static int sem[2][64][128];
    const int sq = nm * bm, sk = nb * bn, n = heads * nb;
    cr_assert_leq(n, ORD_MAXC);
    memset(sem, 0, sizeof sem);
    int next[2] = {0, 0}, free_slots = slots, done = 0, turn = 0;
    for (int l = 0; l < launches; l++)
        for (int i = 0; i < n; i++) {
            ord_cta *t = &c[l][i];
            memset(t, 0, sizeof *t);
            t->head = i / nb;
            t->j = order == 1 ? nb - 1 - i % nb : i % nb; /* grid order: the causal x runs backwards */
            t->it = 0, t->pending = -1;
        }
    for (;;) {
        while (free_slots > 0) { /* in-order dispatch per launch, the launches in turn */
            int l = turn, tries = 0;
            while (tries < launches && next[l] == n) l = (l + 1) % launches, tries++;
            if (next[l] == n) break;
            c[l][next[l]++].resident = 1, free_slots--, turn = (l + 1) % launches;
        }
        if (done == launches * n) {
            for (int l = 0; l < launches; l++)
                for (int h = 0; h < heads; h++)
                    for (int m = 0; m < nm; m++) {
                        int seen = 0;
                        for (int j = 0; j < nb; j++) seen += fg_bwd_first_query_block(j * bn, sq, sk, bm, order == 1) <= m;
                        cr_assert_eq(sem[l][h][m], seen, "query block %d: %d adds, %d key blocks see it", m,
                                     sem[l][h][m], seen);
                    }
            return 1;
        }
        int moved = 0;
        for (int l = 0; l < launches; l++)
            for (int i = 0; i < n; i++) {
                ord_cta *t = &c[l][i];
                if (!t->resident || t->done) continue;
                const int first = fg_bwd_first_query_block(t->j * bn, sq, sk, bm, order == 1);
                const int len = nm - first;
                if (t->phase == 0) { /* the middle of a block: hand the previous add's turn on */
                    if (t->pending >= 0) sem[l][t->head][t->pending]++;
                    t->pending = -1, t->phase = 1, moved = 1;
                    continue;
                }
                const int m = order == 2 ? (t->j % nm + t->it) % nm : first + t->it;
                const int rank = order == 1 ? fg_bwd_rank_causal(t->j, m, nb, bm, bn, sq, sk)
                                 : order == 2 ? fg_bwd_rank_rotated(t->j, m, nb, nm) : t->j;
                if (sem[l][t->head][m] != rank) continue; /* waiting for its turn */
                t->pending = m, t->it++, t->phase = 0, moved = 1;
                if (t->it == len) { /* the last block: hand on, exit */
                    sem[l][t->head][m]++;
                    t->done = 1, t->resident = 0, free_slots++, done++;
                }
            }
        if (!moved) return 0;
    }
}

/* The orders' forward progress under in-order dispatch: causal and ascending with one resident CTA (they
 * wait only on CTAs dispatched before), the rotated order with a head's key blocks resident, and with two
 * concurrent launches when a head's key blocks are at most half the places (launch_bwd's rule). At the
 * end every query block's count is its number of key blocks: each added exactly once, in rank order. */
Test(args, bwd_order_makes_progress) {
    static const int bmn[][2] = {{64, 128}, {128, 128}, {64, 64}, {128, 64}, {64, 32}};
    for (int t = 0; t < 5; t++)
        for (int nb = 1; nb <= 12; nb += 3)
            for (int nm = 1; nm <= 13; nm += 4) {
                const int bm = bmn[t][0], bn = bmn[t][1];
                cr_assert(order_run(1, 1, 3, nb, nm, bm, bn, 1), "causal, 1 place: nb %d nm %d", nb, nm);
                cr_assert(order_run(1, 2, 3, nb, nm, bm, bn, 2), "causal, two launches");
                cr_assert(order_run(0, 1, 3, nb, nm, bm, bn, 1), "ascending, 1 place: nb %d nm %d", nb, nm);
                cr_assert(order_run(2, 1, 3, nb, nm, bm, bn, nb), "rotated, nb places: nb %d nm %d", nb, nm);
                cr_assert(order_run(2, 2, 3, nb, nm, bm, bn, 2 * nb), "rotated, two launches, 2 nb places");
            }
    /* and the reason for the rule: the rotated order can hang when a head's key blocks do not fit */
    cr_assert_not(order_run(2, 1, 2, 11, 11, 64, 64, 5), "rotated, 11 key blocks in 5 places");
}
