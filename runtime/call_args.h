/* call_args.h: the rules a forward call's arguments must obey, checked before anything is chosen or launched.
 * Kept apart from dispatch so that CI, which has no GPU, tests every rule (tests/test_call_args.c). */
#ifndef FG_CALL_ARGS_H
#define FG_CALL_ARGS_H

#include <stdint.h>
#include "core/error.h"

/* Checks a's tensors, sizes, strides, dtypes, scale and mask. need_data: a launch will follow, so
 * pointers must be set (unless the tensor is empty), aligned, and the outputs must not overlap
 * themselves or the inputs. Returns FG_OK, or FG_ERR_INVALID_ARGUMENT / FG_ERR_UNSUPPORTED with a
 * sentence naming the argument and the rule. */
fg_status rt_check_fwd_args(const fg_fwd_args *a, int need_data, fg_error *err);

/* The backward's rules: q, k, v, o, lse as for the forward (lse required) except that V may have a head dim of
 * its own (head_dim_v: a multiple of 8 up to 256) which O has, dout like o, dq like q, dk like k and dv like v
 * (dtype, shape; last dim contiguous), 16-bit dtypes, 16-byte alignment, outputs
 * overlapping neither the inputs nor each other, a workspace of at least `need` bytes (checked when
 * need_data), deterministic 0 or 1. */
fg_status rt_check_bwd_args(const fg_bwd_args *a, int need_data, size_t need, fg_error *err);

/* Copies a caller's argument struct that starts with its size (size_t struct_size, set by the struct's
 * _init function) into dst (dst_size bytes, this build's struct): min(struct_size, dst_size) bytes, the rest
 * zeroed, so a caller built against an older, shorter header keeps working and a newer, longer one is read
 * as far as this build knows. A struct_size below first_size (the struct's size when it was introduced) is
 * refused with a sentence naming `type` and its init function (an uninitialized struct). */
fg_status rt_args_copy(const void *src, void *dst, size_t dst_size, size_t first_size, const char *type,
                       fg_error *err);

/* A descale tensor given (data set) to a call of batch sequences and hkv KV heads, named `name`: fp32, ndim 1 of shape
 * [1] (one factor for the tensor) or ndim 2 of shape [batch, heads_kv], strides >= 0, within 2^48 bytes, and with
 * need_data a 4-byte aligned pointer. FG_ERR_INVALID_ARGUMENT with a sentence naming it and the rule. */
fg_status rt_check_descale(const fg_tensor *t, const char *name, int64_t batch, int64_t hkv, int need_data,
                           fg_error *err);

/* The largest element offset of view t (the sum of (shape - 1) * stride), -1 on overflow, 0 when empty. */
int64_t rt_view_last_offset(const fg_tensor *t);
/* 1 when the bytes two views span intersect (empty views and NULL data touch nothing). */
int rt_views_overlap(const fg_tensor *a, const fg_tensor *b);

/* A packed [tokens, heads, d] view as [1, tokens, heads, d]: the batch of one TMA maps and the kernels index. */
fg_tensor rt_packed_as_batch_of_one(const fg_tensor *t);

/* 1 when the call has nothing to compute (batch, seqlen_q or query heads is 0). */
int rt_fwd_is_empty(const fg_fwd_args *a);

#endif
