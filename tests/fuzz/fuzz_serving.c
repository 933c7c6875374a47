/* fuzz_serving.c: libFuzzer target for the rules of a call's arguments: a serving call's
 * (runtime/serving_args.c) and, on the same tensors, the dense forward's and backward's (runtime/call_args.c),
 * built by tests/fuzz/run.sh.
 *
 * The input's bytes become an fg_varlen_args (every tensor's ndim, dtype, shape, strides and pointer, the
 * lengths' pointers, the table's columns and stride, batch, the longest lengths, splits), then host copies of
 * the device-resident lengths and block table sized as FG_OPTION_CHECK_INPUTS reads them back. Whatever the
 * values, serving_check (with and without data) and serving_validate_lengths must return without crashing or
 * undefined behaviour (UBSan is fatal here), a refusal must carry a sentence, and a call accepted with data
 * must describe itself consistently (heads dividing, lengths in range). The same tensors, with three more for
 * the gradients, go through rt_check_fwd_args and rt_check_bwd_args under the same rules. A broken invariant
 * aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/call_args.h"
#include "runtime/dispatch.h"

/* runtime/mods.c (the serving call's checks of a mod) also holds fg_mod_create, which reports through the
 * context module; this target links no context, and no mod is created here. */
fg_status rt_set_error_without_context(const fg_error *err) { return err->status; }

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

/* The next k bytes as an unsigned value (zeros once the input runs out). */
static uint64_t take(reader *r, int k) {
    uint64_t v = 0;
    for (int i = 0; i < k; i++) {
        v = v << 8 | (r->n ? *r->p : 0);
        if (r->n) r->p++, r->n--;
    }
    return v;
}

/* A size: small values mostly, now and then an extreme one. */
static int64_t take_size(reader *r) {
    const uint8_t kind = (uint8_t)take(r, 1);
    switch (kind % 8) {
    case 0: return (int64_t)(int32_t)take(r, 4);       /* anything, negative included */
    case 1: return (int64_t)INT32_MAX - (int64_t)take(r, 1);
    default: return (int64_t)take(r, 1) % 300;
    }
}

static void fuzz_fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_serving: %s\n  detail: %s\n", what, detail);
    abort();
}

static void take_tensor(reader *r, fg_tensor *t) {
    static const fg_dtype dts[4] = {FG_DTYPE_F16, FG_DTYPE_BF16, FG_DTYPE_F32, FG_DTYPE_E4M3};
    t->ndim = (int)(take(r, 1) % 5);
    t->dtype = dts[take(r, 1) % 4];
    for (int i = 0; i < 4; i++) t->shape[i] = take_size(r);
    for (int i = 0; i < 4; i++) t->stride[i] = take_size(r);
    const uint8_t ptr = (uint8_t)take(r, 1);
    t->data = ptr % 4 == 0 ? NULL : (void *)(uintptr_t)(0x10000000ull * (ptr % 16 + 1) + (ptr % 4 == 3 ? 8 : 0));
}

/* n int32 from the input (n bounded by the caller), or NULL when absent. */
static int32_t *take_ints(reader *r, int present, size_t n) {
    if (!present) return NULL;
    int32_t *v = malloc(n * sizeof *v + 4);
    if (!v) fuzz_fail("out of memory for the lengths", "");
    for (size_t i = 0; i < n; i++) {
        const uint8_t kind = (uint8_t)take(r, 1);
        v[i] = kind % 4 == 0 ? (int32_t)take(r, 4) : (int32_t)(take(r, 2) % 2000);
    }
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    fg_varlen_args a;
    memset(&a, 0, sizeof a); /* as fg_varlen_args_init (serving.c, not linked here) */
    a.struct_size = sizeof a;
    take_tensor(&r, &a.q), take_tensor(&r, &a.k), take_tensor(&r, &a.v), take_tensor(&r, &a.o), take_tensor(&r, &a.lse);
    const uint8_t flags = (uint8_t)take(&r, 1);
    a.cu_seqlens_q = flags & 1 ? (const int32_t *)(uintptr_t)0x50000000 : NULL;
    a.cu_seqlens_k = flags & 2 ? (const int32_t *)(uintptr_t)0x50001000 : NULL;
    a.seqused_k = flags & 4 ? (const int32_t *)(uintptr_t)0x50002000 : NULL;
    a.block_table = flags & 8 ? (const int32_t *)(uintptr_t)0x50003000 : NULL;
    a.causal = (flags >> 4) & 1;
    a.block_table_stride = take_size(&r);
    a.max_pages = (int)take_size(&r);
    a.batch = (int)take_size(&r);
    a.max_seqlen_q = (int)take_size(&r);
    a.max_seqlen_k = (int)take_size(&r);
    a.num_splits = (int)(take(&r, 1) % 260) - 1;
    a.split_size = (int)take_size(&r);
    a.softmax_scale = (float)(int8_t)take(&r, 1) / 8.0f;
    a.workspace = flags & 32 ? (void *)(uintptr_t)0x60000000 : NULL;
    a.workspace_size = (size_t)take(&r, 3);
    a.sinks = flags & 64 ? (const float *)(uintptr_t)0x50004000 : NULL;
    a.window = (int)(take(&r, 1) % 3);
    a.window_left = (int)take_size(&r), a.window_right = (int)take_size(&r);
    a.softcap = (float)(int8_t)take(&r, 1) / 4.0f;
    a.alibi_slopes = flags & 128 ? (const float *)(uintptr_t)(0x50008000 + (take(&r, 1) & 3)) : NULL;

    /* the dense calls' rules on the same tensors */
    fg_bwd_args bw;
    memset(&bw, 0, sizeof bw);
    bw.q = a.q, bw.k = a.k, bw.v = a.v, bw.o = a.o, bw.lse = a.lse;
    take_tensor(&r, &bw.dout), take_tensor(&r, &bw.dq), take_tensor(&r, &bw.dk), take_tensor(&r, &bw.dv);
    bw.causal = a.causal, bw.deterministic = (int)(take(&r, 1) % 3);
    bw.workspace = a.workspace, bw.workspace_size = a.workspace_size;
    fg_fwd_args fw;
    memset(&fw, 0, sizeof fw);
    fw.q = a.q, fw.k = a.k, fw.v = a.v, fw.o = a.o, fw.lse = a.lse, fw.causal = a.causal;
    fg_error err;
    for (int need = 0; need < 2; need++) {
        fg_error_clear(&err);
        if (rt_check_fwd_args(&fw, need, &err) != FG_OK && !err.msg[0]) fuzz_fail("rt_check_fwd_args without a sentence", "");
        fg_error_clear(&err);
        if (rt_check_bwd_args(&bw, need, (size_t)take(&r, 3), &err) != FG_OK && !err.msg[0])
            fuzz_fail("rt_check_bwd_args without a sentence", "");
    }

    serving_call c;
    for (int need = 0; need < 2; need++) {
        fg_error_clear(&err);
        if (serving_check(&a, need, &c, &err) != FG_OK) {
            if (!err.msg[0]) fuzz_fail("serving_check refused without a sentence", "");
            return 0;
        }
    }
    /* accepted with data: a consistent description */
    if (c.hq <= 0 || c.hkv <= 0 || c.hq % c.hkv != 0 || c.group != c.hq / c.hkv || c.batch < 0 || c.seqlen_q < 0 ||
        c.head_dim <= 0 || c.head_dim > 256)
        fuzz_fail("an accepted call described itself inconsistently", "");
    /* the device-resident inputs, as the checking mode reads them back */
    if (c.batch > 4096) return 0; /* the host copies stay small */
    const int64_t tstride = a.block_table_stride ? a.block_table_stride : a.max_pages;
    const int64_t tcount = c.batch > 0 ? (int64_t)(c.batch - 1) * tstride + a.max_pages : 0;
    if (a.block_table && (tcount < 0 || tcount > (1 << 16))) return 0;
    int32_t *cq = take_ints(&r, a.cu_seqlens_q != NULL, (size_t)c.batch + 1);
    int32_t *ck = take_ints(&r, a.cu_seqlens_k != NULL, (size_t)c.batch + 1);
    int32_t *uk = take_ints(&r, a.seqused_k != NULL, (size_t)c.batch);
    int32_t *tb = take_ints(&r, a.block_table != NULL, (size_t)tcount);
    fg_error_clear(&err);
    if (serving_validate_lengths(&c, cq, ck, uk, tb, tstride, c.seqlen_q, &err) != FG_OK && !err.msg[0])
        fuzz_fail("serving_validate_lengths refused without a sentence", "");
    free(cq), free(ck), free(uk), free(tb);
    return 0;
}
