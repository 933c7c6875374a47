/* test_args.c: every rule on a forward call's arguments (runtime/args.c), without a GPU: the pointers
 * are host addresses that are never dereferenced. Each case breaks one rule of a valid call and checks
 * the status and that the sentence names the argument. The GPU suite repeats the common ones through
 * fg_attention_fwd and checks that nothing is written. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include "args.h"

/* Fake device addresses, far apart and 256-byte aligned; only their values matter here. */
#define BASE_Q ((uintptr_t)0x10000000)
#define BASE_K ((uintptr_t)0x20000000)
#define BASE_V ((uintptr_t)0x30000000)
#define BASE_O ((uintptr_t)0x40000000)
#define BASE_L ((uintptr_t)0x50000000)

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
    a = valid(); a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = FG_DTYPE_E4M3; expect(&a, FG_ERR_UNSUPPORTED, "e4m3");
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

Test(args, explain_and_prepare_need_no_pointers) {
    fg_fwd_args a = valid();
    a.q.data = a.k.data = a.v.data = a.o.data = NULL;
    fg_error e;
    cr_assert_eq(rt_check_fwd_args(&a, 0, &e), FG_OK, "%s", e.msg);
}
