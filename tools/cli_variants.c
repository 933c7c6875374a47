/* cli_variants.c: the model variants of `flashgen run` and `explain` (sliding windows, a top-left causal mask,
 * logit softcaps, attention sinks, ALiBi, V of its own head dim): their option values, the per-head values
 * the calls take, and the serving calls that carry them (fg_attention_fwd_varlen on the dense tensors,
 * fg_attention_bwd_varlen on the same memory packed), checked by the library's own rules. The buffers and the
 * checks against the CPU reference are gpu_buffers.c's, shared with the plain calls. Part of the `flashgen`
 * program; cli.h declares it. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashgen.h"
#include "runtime/call_args.h"
#include "runtime/dispatch.h" /* serving_check: the serving call's rules, without a device */
#include "tools/cli.h"

/* ------------------------------------------------------------------ options */

/* One side of --window: -1 (unbounded) or a key count that fits the call's int. 0, or -1 when text is not one. */
static int window_side(const char *text, size_t len, long long *out) {
    char buf[32];
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    const char *digits = buf[0] == '-' ? buf + 1 : buf;
    if (*digits < '0' || *digits > '9') return -1;
    errno = 0;
    char *end;
    const long long v = strtoll(buf, &end, 10);
    if (errno || *end != '\0' || v < -1 || v > INT_MAX) return -1;
    *out = v;
    return 0;
}

int parse_window(const char *cmd, const char *text, problem *p) {
    const char *comma = strchr(text, ',');
    if (!comma || window_side(text, (size_t)(comma - text), &p->window_left) != 0 ||
        window_side(comma + 1, strlen(comma + 1), &p->window_right) != 0)
        return usage_error(cmd, "--window expects L,R: the keys a query sees left and right of its diagonal, each a "
                           "whole number from 0 to %d or -1 for an unbounded side, got '%s'", INT_MAX, text);
    p->window = 1;
    return 0;
}

int parse_softcap(const char *cmd, const char *text, problem *p) {
    errno = 0;
    char *end;
    const double v = strtod(text, &end);
    /* the library's softcap is a float: a cap past FLT_MAX would become infinite */
    if (end == text || *end != '\0' || errno || !(v > 0.0) || v > 3.4e38)
        return usage_error(cmd, "--softcap expects a number above 0 (the cap C of C * tanh(logit / C); leave the "
                           "option out for none), got '%s'", text);
    p->softcap = (float)v;
    return 0;
}

const char *problem_variant_option(const problem *p) {
    return p->window ? "--window" : p->softcap > 0.f ? "--softcap" : p->sinks ? "--sinks" : p->alibi ? "--alibi"
           : p->head_dim_v > 0 ? "--head-dim-v" : p->causal_top_left ? "--causal-top-left" : NULL;
}

int problem_has_variants(const problem *p) { return problem_variant_option(p) != NULL; }

char *problem_variants_text(const problem *p, char *buf, size_t n) {
    size_t used = strlen(buf);
    /* each piece clipped to what is left of buf, which stays NUL-terminated */
#define APPEND(...) (used += (size_t)snprintf(buf + used, used < n ? n - used : 0, __VA_ARGS__), used = used < n ? used : n)
    if (p->causal_top_left) APPEND(" (top-left)");
    if (p->window) APPEND(", window (%lld, %lld)", p->window_left, p->window_right);
    if (p->softcap > 0.f) APPEND(", softcap %g", (double)p->softcap);
    if (p->sinks) APPEND(", sinks");
    if (p->alibi) APPEND(", ALiBi");
    if (p->head_dim_v > 0) APPEND(", head_dim_v %lld", p->head_dim_v);
#undef APPEND
    return buf;
}

/* ------------------------------------------------------------------ per-head values */

/* splitmix64: a fixed sequence from a seed, so that --seed reproduces the sinks. */
static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Query head h's sink logit: ln(seqlen_k) + u, u uniform in [-2, 2] from the seed. The keys' softmax terms sum
 * to about seqlen_k x e^(1/2) for N(0, 1) inputs, so such a sink takes from a tenth to most of each row's
 * weight: a kernel that drops or misplaces it fails the check (a sink far below the keys would change O less
 * than the tolerance). */
static void variant_sinks(const problem *p, uint64_t seed, float *out) {
    const double base = log((double)(p->seqlen_k > 0 ? p->seqlen_k : 1));
    for (long long h = 0; h < p->heads; h++) {
        const double u = (double)(mix64(seed * 0x100000001B3ull + 0x51D5ull + (uint64_t)h) >> 11) * 0x1p-53;
        out[h] = (float)(base - 2.0 + 4.0 * u);
    }
}

/* The ALiBi slopes of n heads (Press et al., and FlashAttention's tests): for n a power of two the geometric
 * sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8); otherwise those of the largest power of two p below n, then every
 * other slope of 2p's sequence (2^(-4/p), 2^(-12/p), ...) for the remaining n - p heads. */
static void variant_alibi_slopes(long long n, float *out) {
    long long pow2 = 1;
    while (pow2 * 2 <= n) pow2 *= 2;
    for (long long h = 0; h < pow2; h++) out[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)pow2);
    for (long long h = pow2; h < n; h++) out[h] = (float)exp2(-4.0 * (double)(2 * (h - pow2) + 1) / (double)pow2);
}

/* Host arrays of p's sinks and slopes (each NULL when p has none); FG_ERR_NO_MEMORY. */
static fg_status variant_values(const problem *p, uint64_t seed, float **sinks, float **slopes, fg_error *err) {
    *sinks = p->sinks ? malloc((size_t)p->heads * sizeof(float)) : NULL;
    *slopes = p->alibi ? malloc((size_t)p->heads * sizeof(float)) : NULL;
    if ((p->sinks && !*sinks) || (p->alibi && !*slopes))
        return fg_fail(err, FG_ERR_NO_MEMORY, "out of host memory for %lld heads' sinks and slopes", p->heads);
    if (*sinks) variant_sinks(p, seed, *sinks);
    if (*slopes) variant_alibi_slopes(p->heads, *slopes);
    return FG_OK;
}

fg_status variant_buffers_init(const fg_cuda_api *cu, const problem *p, uint64_t seed, fwd_buffers *B, fg_error *err) {
    fg_status st = variant_values(p, seed, &B->hsinks, &B->hslopes, err);
    const float *host[2] = {B->hsinks, B->hslopes};
    CUdeviceptr *dev[2] = {&B->sinks, &B->slopes};
    for (int i = 0; i < 2 && st == FG_OK; i++) {
        if (!host[i]) continue;
        const size_t bytes = (size_t)p->heads * sizeof(float);
        CUresult rc = cu->cuMemAlloc(dev[i], bytes); /* 256-byte aligned: the 4 bytes the call asks for */
        if (rc != CUDA_SUCCESS) *dev[i] = 0;
        else rc = cu->cuMemcpyHtoD(*dev[i], host[i], bytes);
        if (rc != CUDA_SUCCESS) st = cuda_api_fail(err, rc, "cuMemAlloc or cuMemcpyHtoD (the sinks or ALiBi slopes)", __FILE__, __LINE__);
    }
    return st;
}

/* ------------------------------------------------------------------ the serving calls */

/* A contiguous [b, s, h, d] view as the packed [b x s, h, d] view of the same memory. */
static fg_tensor packed_view(const fg_tensor *t) {
    fg_tensor r = *t;
    r.ndim = 3;
    r.shape[0] = t->shape[0] * t->shape[1], r.shape[1] = t->shape[2], r.shape[2] = t->shape[3], r.shape[3] = 0;
    r.stride[0] = t->stride[1], r.stride[1] = t->stride[2], r.stride[2] = t->stride[3], r.stride[3] = 0;
    return r;
}

/* The packed LSE [heads, batch x seqlen_q] in the memory of the dense one (the same size). */
static fg_tensor packed_lse(const problem *p, void *data) {
    fg_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data, t.dtype = FG_DTYPE_F32, t.ndim = 2;
    t.shape[0] = p->heads, t.shape[1] = p->batch * p->seqlen_q;
    t.stride[0] = t.shape[1], t.stride[1] = 1;
    return t;
}

void problem_varlen_args(const problem *p, const fg_fwd_args *f, int packed, const float *sinks, const float *slopes,
                         const int32_t *cu_q, const int32_t *cu_k, fg_varlen_args *a) {
    fg_varlen_args_init(a);
    if (packed) {
        a->q = packed_view(&f->q), a->k = packed_view(&f->k), a->v = packed_view(&f->v), a->o = packed_view(&f->o);
        a->lse = packed_lse(p, f->lse.data);
        a->cu_seqlens_q = cu_q, a->cu_seqlens_k = cu_k;
        a->batch = (int)p->batch, a->max_seqlen_q = (int)p->seqlen_q, a->max_seqlen_k = (int)p->seqlen_k;
    } else {
        a->q = f->q, a->k = f->k, a->v = f->v, a->o = f->o, a->lse = f->lse;
    }
    a->causal = p->causal, a->causal_top_left = p->causal_top_left;
    a->window = p->window, a->window_left = (int)p->window_left, a->window_right = (int)p->window_right;
    a->softcap = p->softcap, a->sinks = sinks, a->alibi_slopes = slopes;
}

void problem_varlen_bwd_args(const problem *p, const fg_bwd_args *b, const float *sinks, const float *slopes,
                             float *dsink, const int32_t *cu_q, const int32_t *cu_k, fg_varlen_bwd_args *a) {
    fg_varlen_bwd_args_init(a);
    a->q = packed_view(&b->q), a->k = packed_view(&b->k), a->v = packed_view(&b->v), a->o = packed_view(&b->o);
    a->dout = packed_view(&b->dout), a->dq = packed_view(&b->dq), a->dk = packed_view(&b->dk);
    a->dv = packed_view(&b->dv);
    a->lse = packed_lse(p, b->lse.data);
    a->cu_seqlens_q = cu_q, a->cu_seqlens_k = cu_k;
    a->batch = (int)p->batch, a->max_seqlen_q = (int)p->seqlen_q, a->max_seqlen_k = (int)p->seqlen_k;
    a->causal = p->causal, a->causal_top_left = p->causal_top_left;
    a->window = p->window, a->window_left = (int)p->window_left, a->window_right = (int)p->window_right;
    a->softcap = p->softcap, a->sinks = sinks, a->alibi_slopes = slopes, a->dsink = dsink;
}

/* What the rules of a call without data read of a per-head array: that there is one (it selects the variant). */
static float present;

fg_status variant_check(const problem *p, fg_error *err) {
    fg_fwd_args f;
    problem_args(p, NULL, NULL, NULL, NULL, NULL, &f);
    fg_varlen_args a;
    problem_varlen_args(p, &f, p->bwd, p->sinks ? &present : NULL, p->alibi ? &present : NULL, NULL, NULL, &a);
    serving_call c;
    return serving_check(&a, 0, &c, err);
}

fg_status variant_bwd_check(fg_context *ctx, const problem *p, fg_error *err) {
    fg_bwd_args b;
    bwd_problem_args(p, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &b);
    fg_varlen_bwd_args a;
    problem_varlen_bwd_args(p, &b, p->sinks ? &present : NULL, p->alibi ? &present : NULL, p->sinks ? &present : NULL,
                            NULL, NULL, &a);
    size_t bytes;
    if (fg_attention_bwd_varlen_workspace_size(ctx, &a, &bytes) != FG_OK)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s", fg_last_error(ctx));
    return FG_OK;
}

fg_status variant_call_init(fg_context *ctx, const fg_cuda_api *cu, const problem *p, const fwd_buffers *B,
                            fg_varlen_args *a, CUdeviceptr *ws, fg_error *err) {
    *ws = 0;
    problem_varlen_args(p, &B->dev[0], 0, (const float *)(uintptr_t)B->sinks, (const float *)(uintptr_t)B->slopes, NULL,
                        NULL, a);
    size_t bytes = 0;
    if (fg_attention_fwd_varlen_workspace_size(ctx, a, &bytes) != FG_OK)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "%s", fg_last_error(ctx));
    if (bytes) { /* the split partials: a call given a workspace may split its keys, as serving callers' do */
        CUresult rc = cu->cuMemAlloc(ws, bytes); /* 256-byte aligned, as the workspace must be */
        if (rc != CUDA_SUCCESS) {
            *ws = 0;
            return cuda_api_fail(err, rc, "cuMemAlloc (the serving call's workspace)", __FILE__, __LINE__);
        }
        a->workspace = (void *)(uintptr_t)*ws, a->workspace_size = bytes;
    }
    return FG_OK;
}

/* ------------------------------------------------------------------ explain */

fg_status explain_bwd_varlen(fg_context *ctx, const problem *p, const fg_varlen_bwd_args *a, char *buf, size_t n) {
    size_t ws = 0;
    fg_status st = fg_attention_bwd_varlen_workspace_size(ctx, a, &ws);
    if (st != FG_OK) return st;
    snprintf(buf, n,
             "call: fg_attention_bwd_varlen, %lld packed sequences of %lld queries and %lld keys, after "
             "fg_attention_fwd_varlen in the same form (O and the LSE)\n"
             "  workspace: %zu bytes\n"
             "  variant: not explained: the library explains the backward of dense batches (fg_explain_bwd), not "
             "of packed sequences",
             p->batch, p->seqlen_q, p->seqlen_k, ws);
    return FG_OK;
}

int explain_variants(fg_context *ctx, const problem *p) {
    char buf[4096];
    /* Explain reads no data: a per-head array's presence selects the variant (as in variant_check). */
    const float *sinks = p->sinks ? &present : NULL, *slopes = p->alibi ? &present : NULL;
    fg_status st;
    if (!p->bwd) {
        fg_fwd_args f;
        problem_args(p, NULL, NULL, NULL, NULL, NULL, &f);
        fg_varlen_args a;
        problem_varlen_args(p, &f, 0, sinks, slopes, NULL, NULL, &a);
        a.workspace = (void *)(uintptr_t)256; /* the plan of a call given a workspace, as `run` gives one */
        st = fg_explain_varlen(ctx, &a, buf, sizeof buf);
    } else {
        fg_bwd_args b;
        bwd_problem_args(p, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &b);
        fg_varlen_bwd_args a;
        problem_varlen_bwd_args(p, &b, sinks, slopes, NULL, NULL, NULL, &a);
        st = explain_bwd_varlen(ctx, p, &a, buf, sizeof buf);
    }
    if (st != FG_OK) {
        say("explain", "%s", fg_last_error(ctx));
        return EXIT_FAIL;
    }
    fputs(buf, stdout);
    if (buf[0] && buf[strlen(buf) - 1] != '\n') putchar('\n');
    return EXIT_OK;
}
