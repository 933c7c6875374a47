/* merge.c: the merge of attention states (templates/merge.cuh): fg_merge_states, and merge_launch, which
 * split-KV's combine (serving.c) shares. The kernel is one variant per arch (kind=merge), found or built
 * like any other. */
#include <stdint.h>
#include <string.h>
#include "generator/emit.h"
#include "runtime/call_args.h"
#include "runtime/dispatch.h"

#define MERGE_MAX_STATES 256 /* merge.cuh FG_MERGE_MAX_STATES */
#define MERGE_WARPS 4        /* merge.cuh FG_MERGE_WARPS: one (token, head) a warp */

fg_status merge_launch(fg_context *ctx, const fg_merge_params *p, void *stream, fg_error *err) {
    fg_spec s;
    memset(&s, 0, sizeof s);
    s.kind = FG_KIND_MERGE;
    s.arch = ctx->arch;
    CUfunction fn;
    fg_status st = kernels_function(ctx, &s, &fn, err);
    if (st != FG_OK) return st;
    const int64_t pairs = (int64_t)p->tokens * p->heads, blocks = (pairs + MERGE_WARPS - 1) / MERGE_WARPS;
    if (blocks > INT32_MAX || p->batch > 65535)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%lld (token, head) pairs in %d sequences exceed the merge's grid",
                       (long long)pairs, p->batch);
    fg_merge_params copy = *p;
    void *params[] = {&copy};
    const launch_item item = {fn, {(unsigned)blocks, (unsigned)p->batch, 1}, MERGE_WARPS * 32, 0, FG_MERGE_NAME, 0};
    return launch_items(ctx, &item, 1, stream, params, err);
}

static int merge_dtype(fg_dtype d) { return d == FG_DTYPE_F32 || d == FG_DTYPE_F16 || d == FG_DTYPE_BF16; }

/* The rules of fg_merge_args (need_data: pointers set). */
static fg_status merge_check(const fg_merge_args *a, fg_error *err) {
    const fg_tensor *t[4] = {&a->o_states, &a->lse_states, &a->o, &a->lse};
    static const char *const names[4] = {"o_states", "lse_states", "o", "lse"};
    static const int ndims[4] = {4, 3, 3, 2};
    static const char *const forms[4] = {"[states, tokens, heads, head_dim]", "[states, tokens, heads]",
                                         "[tokens, heads, head_dim]", "[tokens, heads]"};
    for (int i = 0; i < 4; i++) {
        if (i == 3 && !a->lse.data) continue;
        if (t[i]->ndim != ndims[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.ndim is %d; it must be %d (%s)", names[i], t[i]->ndim,
                           ndims[i], forms[i]);
        for (int d = 0; d < ndims[i]; d++)
            if (t[i]->shape[d] < 0 || t[i]->shape[d] > INT32_MAX || t[i]->stride[d] < 0)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.shape[%d] or .stride[%d] is out of range (sizes in "
                               "[0, 2^31), strides >= 0)", names[i], d, d);
        const int is_o = i == 0 || i == 2;
        if (is_o ? !merge_dtype(t[i]->dtype) : t[i]->dtype != FG_DTYPE_F32)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.dtype is %s; it must be %s", names[i],
                           dtype_name(t[i]->dtype), is_o ? "fp32, fp16 or bf16" : "fp32");
        if (is_o && t[i]->shape[ndims[i] - 1] > 1 && t[i]->stride[ndims[i] - 1] != 1)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s's last dimension (head_dim) must be contiguous", names[i]);
        if ((uintptr_t)t[i]->data % (uintptr_t)dtype_size(t[i]->dtype) != 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s.data is not aligned to its element size", names[i]);
    }
    const int64_t S = a->o_states.shape[0], T = a->o_states.shape[1], H = a->o_states.shape[2], D = a->o_states.shape[3];
    if (a->lse_states.shape[0] != S || a->lse_states.shape[1] != T || a->lse_states.shape[2] != H)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse_states is [%lld, %lld, %lld]; it must be [states, tokens, "
                       "heads] = [%lld, %lld, %lld], o_states' first three", (long long)a->lse_states.shape[0],
                       (long long)a->lse_states.shape[1], (long long)a->lse_states.shape[2], (long long)S, (long long)T,
                       (long long)H);
    if (a->o.shape[0] != T || a->o.shape[1] != H || a->o.shape[2] != D)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o is [%lld, %lld, %lld]; it must be [tokens, heads, head_dim] = "
                       "[%lld, %lld, %lld]", (long long)a->o.shape[0], (long long)a->o.shape[1],
                       (long long)a->o.shape[2], (long long)T, (long long)H, (long long)D);
    if (a->lse.data && (a->lse.shape[0] != T || a->lse.shape[1] != H))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse is [%lld, %lld]; it must be [tokens, heads] = [%lld, %lld]",
                       (long long)a->lse.shape[0], (long long)a->lse.shape[1], (long long)T, (long long)H);
    if (S < 1 || S > MERGE_MAX_STATES)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o_states holds %lld states; the merge takes 1 to %d",
                       (long long)S, MERGE_MAX_STATES);
    for (int i = 0; i < 2; i++)
        if (rt_views_overlap(&a->o, t[i]) || (a->lse.data && rt_views_overlap(&a->lse, t[i])))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s overlaps %s in memory; outputs must not share memory with "
                           "the states", rt_views_overlap(&a->o, t[i]) ? "o" : "lse", names[i]);
    if (a->lse.data && rt_views_overlap(&a->lse, &a->o))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lse overlaps o in memory");
    if (T * H > 0 && D > 0 && (!a->o_states.data || !a->lse_states.data || !a->o.data))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "o_states, lse_states and o need data pointers");
    return FG_OK;
}

fg_status fg_merge_states(fg_context *ctx, const fg_merge_args *args, void *stream) {
    if (!ctx) return rt_no_context("fg_merge_states");
    fg_error err;
    fg_error_clear(&err);
    fg_merge_args a; /* as 0.4.0 introduced it: every field up to the last one of that version */
    if (rt_args_copy(args, &a, sizeof a, sizeof a, "fg_merge_args", &err) != FG_OK) return rt_set_error(ctx, &err);
    if (merge_check(&a, &err) != FG_OK) return rt_set_error(ctx, &err);
    if (a.o_states.shape[1] == 0 || a.o_states.shape[2] == 0) return FG_OK;
    fg_merge_params p;
    memset(&p, 0, sizeof p);
    p.o_in = a.o_states.data;
    p.lse_in = (const float *)a.lse_states.data;
    p.o_out = a.o.data;
    p.lse_out = (float *)a.lse.data;
    for (int i = 0; i < 3; i++) p.o_in_stride[i] = a.o_states.stride[i], p.lse_in_stride[i] = a.lse_states.stride[i];
    p.o_out_stride[0] = 0, p.o_out_stride[1] = a.o.stride[0], p.o_out_stride[2] = a.o.stride[1];
    if (a.lse.data) p.lse_out_stride[0] = 0, p.lse_out_stride[1] = a.lse.stride[1], p.lse_out_stride[2] = a.lse.stride[0];
    p.states = (int)a.o_states.shape[0], p.tokens = (int)a.o_states.shape[1], p.heads = (int)a.o_states.shape[2];
    p.head_dim = (int)a.o_states.shape[3], p.batch = 1;
    p.in_dtype = a.o_states.dtype, p.out_dtype = a.o.dtype;
    if (merge_launch(ctx, &p, stream, &err) != FG_OK) return rt_set_error(ctx, &err);
    return FG_OK;
}

void fg_merge_args_init(fg_merge_args *a) {
    if (!a) return;
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
}
