/* spec.c: fg_spec's canonical text form (format and parse) and the quantities derived from a spec.
 * The canonical text is the variant's name everywhere, so it must be stable: keys sorted, commas, no
 * spaces, integers in decimal, booleans as 0/1. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "generator/spec.h"
#include "generator/mod.h"
#include "generator/validate.h" /* arch_smem_limit */

fg_dtype spec_out_dtype(const fg_spec *spec) { return dtype_is_fp8(spec->dtype) ? spec->out_dtype : spec->dtype; }


int spec_arch_format(int arch, int accel, char *buf, size_t n) {
    int r = snprintf(buf, n, "sm_%d%s", arch, accel ? "a" : "");
    return (r < 0 || (size_t)r >= n) ? -1 : r;
}

fg_status spec_arch_parse(const char *text, int *arch, int *accel, fg_error *err) {
    const char *p = text;
    if (strncmp(p, "sm_", 3) != 0) goto bad;
    p += 3;
    if (!isdigit((unsigned char)p[0]) || !isdigit((unsigned char)p[1])) goto bad;
    int v = 0, digits = 0;
    while (isdigit((unsigned char)*p) && digits < 3) v = v * 10 + (*p++ - '0'), digits++;
    int a = 0;
    if (*p == 'a') a = 1, p++;
    if (*p != '\0' || v < 10) goto bad;
    *arch = v;
    *accel = a;
    return FG_OK;
bad:
    return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                   "arch '%s' is not a CUDA target name like sm_80, sm_89 or sm_90a", text);
}

const char *spec_kind_name(fg_kind k) {
    switch (k) {
    case FG_KIND_FWD: return "fwd";
    case FG_KIND_BWD: return "bwd";
    case FG_KIND_SERVE: return "serve";
    case FG_KIND_MERGE: return "merge";
    }
    return "unknown";
}

int spec_format(const fg_spec *s, char *buf, size_t n) {
    char arch[16], out[16] = "";
    if (spec_arch_format(s->arch, s->arch_accel, arch, sizeof arch) < 0) return -1;
    if (s->kind == FG_KIND_MERGE) {
        int r = snprintf(buf, n, "arch=%s,kind=merge", arch);
        return (r < 0 || (size_t)r >= n) ? -1 : r;
    }
    /* Only FP8 variants name their output dtype: a 16-bit variant's O has its input dtype. */
    if (dtype_is_fp8(s->dtype)) snprintf(out, sizeof out, "out=%s,", dtype_name(s->out_dtype));
    char det[24] = "";
    if (s->kind == FG_KIND_BWD) snprintf(det, sizeof det, "deterministic=%d,", s->deterministic ? 1 : 0);
    const char *tma = (s->kind == FG_KIND_BWD || s->kind == FG_KIND_SERVE) && s->tma ? "tma=1," : "";
    const int mods = s->kind != FG_KIND_MERGE; /* kinds that take model variants */
    char splits[24] = "";
    if (s->kind == FG_KIND_SERVE && s->splits) snprintf(splits, sizeof splits, "splits=%d,", s->splits);
    const char *varlen = (s->kind == FG_KIND_FWD || s->kind == FG_KIND_BWD) && s->varlen ? "varlen=1," : "";
    char dv[24] = "";
    if (spec_head_dim_v(s) != s->head_dim)
        snprintf(dv, sizeof dv, "head_dim_v=%d,", s->head_dim_v);
    char mod[32] = "";
    if (mods && s->mod[0]) snprintf(mod, sizeof mod, "mod=%.16s,", s->mod);
    char kv[16] = "";
    if (s->kind == FG_KIND_SERVE && s->kv_fp8) snprintf(kv, sizeof kv, "kv=%s,", dtype_name((fg_dtype)s->kv_fp8));
    /* keys in byte order: [alibi] arch block_m block_n causal [deterministic] dtype head_dim [head_dim_v] kind
     * [kv] [mod] [out] [sinks] [softcap] [splits] stages [tma] [v_in_k] [varlen] warps [window] */
    const char *v_in_k = s->kind == FG_KIND_SERVE && s->v_in_k ? "v_in_k=1," : "";
    int r = snprintf(buf, n,
                     "%sarch=%s,block_m=%d,block_n=%d,causal=%d,%sdtype=%s,head_dim=%d,%skind=%s,%s%s%s%s%s%sstages=%d,%s%s%swarps=%d%s",
                     mods && s->alibi ? "alibi=1," : "", arch, s->block_m, s->block_n, s->causal ? 1 : 0, det,
                     dtype_name(s->dtype), s->head_dim, dv, spec_kind_name(s->kind), kv, mod, out,
                     mods && s->sinks ? "sinks=1," : "", mods && s->softcap ? "softcap=1," : "", splits, s->stages, tma,
                     v_in_k, varlen, s->warps, mods && s->window ? ",window=1" : "");
    return (r < 0 || (size_t)r >= n) ? -1 : r;
}

int spec_head_dim_v(const fg_spec *s) { return s->head_dim_v > 0 ? s->head_dim_v : s->head_dim; }

int spec_head_dim_v_padded(const fg_spec *s) {
    const int dv = spec_head_dim_v(s);
    return s->kind == FG_KIND_BWD ? spec_bwd_dim_padded(dv, s->head_dim > dv ? s->head_dim : dv) : (dv + 15) / 16 * 16;
}

int spec_row_chunks(const fg_spec *s) {
    const int d = spec_head_dim_padded(s), dv = spec_head_dim_v_padded(s);
    return (d > dv ? d : dv) / 8;
}

fg_dtype spec_kv_dtype(const fg_spec *s) { return s->kv_fp8 ? (fg_dtype)s->kv_fp8 : s->dtype; }

int spec_serve_wide(const fg_spec *s) { return s->kind == FG_KIND_SERVE && spec_head_dim_v_padded(s) > 256; }

int spec_has_mods(const fg_spec *s) {
    return s->kind != FG_KIND_MERGE && (s->window || s->sinks || s->softcap || s->alibi || s->mod[0]);
}

/* Parses a non-negative decimal integer that fits an int; the whole token must be the number. */
static int parse_int(const char *v, int *out) {
    if (!isdigit((unsigned char)v[0])) return -1;
    errno = 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (errno || *end || x > 1000000) return -1;
    *out = (int)x;
    return 0;
}

fg_status spec_parse(const char *text, fg_spec *out, fg_error *err) {
    enum { K_KIND, K_ARCH, K_DTYPE, K_HEAD_DIM, K_BLOCK_M, K_BLOCK_N, K_WARPS, K_STAGES, K_CAUSAL, K_OUT, K_DET,
           K_TMA, K_SPLITS, K_VARLEN, K_SINKS, K_WINDOW, K_SOFTCAP, K_ALIBI, K_HEAD_DIM_V, K_V_IN_K, K_MOD, K_KV,
           K_COUNT };
    static const char *const keys[K_COUNT] = {"kind",   "arch",   "dtype",  "head_dim", "block_m",       "block_n",
                                              "warps",  "stages", "causal", "out",      "deterministic", "tma",
                                              "splits", "varlen", "sinks",  "window", "softcap", "alibi", "head_dim_v",
                                              "v_in_k", "mod",    "kv"};
    int seen[K_COUNT] = {0};
    fg_spec s;
    memset(&s, 0, sizeof s);
    if (!text) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec text is NULL");
    const char *p = text;
    char tok[128];
    for (;;) {
        while (*p == ',' || isspace((unsigned char)*p)) p++;
        if (!*p) break;
        size_t len = strcspn(p, ", \t\r\n");
        if (len >= sizeof tok)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: '%.40s...' is too long to be a key=value pair", p);
        memcpy(tok, p, len);
        tok[len] = '\0';
        p += len;
        char *eq = strchr(tok, '=');
        if (!eq)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: '%s' is not a key=value pair", tok);
        *eq = '\0';
        const char *key = tok, *val = eq + 1;
        int k = 0;
        while (k < K_COUNT && strcmp(key, keys[k]) != 0) k++;
        if (k == K_COUNT)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "spec: unknown key '%s' (keys: kind, arch, dtype, head_dim, block_m, block_n, warps, "
                           "stages, causal, out, deterministic, tma, splits, varlen, sinks, window, softcap, alibi, "
                           "head_dim_v, v_in_k, mod, kv)", key);
        if (seen[k]) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: key '%s' appears twice", key);
        seen[k] = 1;
        fg_status st;
        int *field = NULL;
        switch (k) {
        case K_KIND:
            if (strcmp(val, "fwd") == 0) s.kind = FG_KIND_FWD;
            else if (strcmp(val, "bwd") == 0) s.kind = FG_KIND_BWD;
            else if (strcmp(val, "serve") == 0) s.kind = FG_KIND_SERVE;
            else if (strcmp(val, "merge") == 0) s.kind = FG_KIND_MERGE;
            else return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: kind '%s' is not one of: fwd, bwd, serve, merge", val);
            break;
        case K_ARCH:
            if ((st = spec_arch_parse(val, &s.arch, &s.arch_accel, err)) != FG_OK) return st;
            break;
        case K_DTYPE:
            if ((st = dtype_parse(val, &s.dtype, err)) != FG_OK) return st;
            break;
        case K_CAUSAL:
        case K_DET:
        case K_TMA:
        case K_VARLEN:
        case K_SINKS:
        case K_WINDOW:
        case K_SOFTCAP:
        case K_ALIBI:
        case K_V_IN_K: {
            int *flag = k == K_CAUSAL ? &s.causal : k == K_DET ? &s.deterministic : k == K_TMA ? &s.tma
                      : k == K_VARLEN ? &s.varlen : k == K_SINKS ? &s.sinks : k == K_WINDOW ? &s.window
                      : k == K_SOFTCAP ? &s.softcap : k == K_ALIBI ? &s.alibi : &s.v_in_k;
            if (strcmp(val, "0") == 0 || strcmp(val, "false") == 0) *flag = 0;
            else if (strcmp(val, "1") == 0 || strcmp(val, "true") == 0) *flag = 1;
            else return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: %s must be 0 or 1, got '%s'", key, val);
            break;
        }
        case K_OUT:
            if (strcmp(val, "fp16") == 0) s.out_dtype = FG_DTYPE_F16;
            else if (strcmp(val, "bf16") == 0) s.out_dtype = FG_DTYPE_BF16;
            else return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                                "spec: out must be fp16 or bf16 (the output dtype of an fp8 variant), got '%s'", val);
            break;
        case K_MOD: {
            size_t n = strlen(val), hex = strspn(val, "0123456789abcdef");
            if (n != 16 || hex != 16)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                               "spec: mod must be a custom mod's id, 16 lowercase hex digits, got '%s'", val);
            memcpy(s.mod, val, 17);
            break;
        }
        case K_KV: {
            fg_dtype kv;
            if (dtype_parse(val, &kv, err) != FG_OK || !dtype_is_fp8(kv))
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                               "spec: kv must be e4m3 or e5m2 (K and V in FP8; absent: of dtype), got '%s'", val);
            s.kv_fp8 = (int)kv;
            break;
        }
        case K_HEAD_DIM: field = &s.head_dim; break;
        case K_BLOCK_M: field = &s.block_m; break;
        case K_BLOCK_N: field = &s.block_n; break;
        case K_WARPS: field = &s.warps; break;
        case K_STAGES: field = &s.stages; break;
        case K_SPLITS: field = &s.splits; break;
        case K_HEAD_DIM_V: field = &s.head_dim_v; break;
        }
        if (field && parse_int(val, field) != 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: %s must be a non-negative integer, got '%s'", key, val);
    }
    if (seen[K_KIND] && s.kind == FG_KIND_MERGE) { /* one kernel an arch: no other key */
        for (int k = K_DTYPE; k < K_COUNT; k++)
            if (seen[k])
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: kind=merge takes only kind and arch, not '%s'", keys[k]);
        if (!seen[K_ARCH]) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: required key 'arch' is missing");
        *out = s;
        return FG_OK;
    }
    for (int k = K_KIND; k <= K_HEAD_DIM; k++)
        if (!seen[k]) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: required key '%s' is missing", keys[k]);
    if (seen[K_DET] && s.kind != FG_KIND_BWD)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: deterministic is a key of kind=bwd variants only");
    if (seen[K_TMA] && s.kind != FG_KIND_BWD && s.kind != FG_KIND_SERVE)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: tma is a key of kind=bwd and kind=serve variants only");
    if (seen[K_VARLEN] && s.kind != FG_KIND_FWD && s.kind != FG_KIND_BWD)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: varlen is a key of kind=fwd and kind=bwd variants only");
    for (int k = K_SINKS; k <= K_MOD; k++)
        if ((k <= K_ALIBI || k == K_MOD) && seen[k] && s.kind == FG_KIND_MERGE)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: %s is a key of kind=serve, fwd and bwd variants only",
                           keys[k]);
    if (seen[K_HEAD_DIM_V] && s.kind == FG_KIND_MERGE)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: head_dim_v is a key of kind=serve, fwd and bwd variants only");
    if (s.head_dim_v == s.head_dim) s.head_dim_v = 0; /* the same: one name */
    if (seen[K_V_IN_K] && s.kind != FG_KIND_SERVE)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: v_in_k is a key of kind=serve variants only");
    if (seen[K_KV] && s.kind != FG_KIND_SERVE)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: kv is a key of kind=serve variants only");
    if (seen[K_SPLITS] && s.kind != FG_KIND_SERVE)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "spec: splits is a key of kind=serve variants only");
    if (dtype_is_fp8(s.dtype)) {
        if (!seen[K_OUT]) s.out_dtype = FG_DTYPE_BF16;
    } else {
        if (seen[K_OUT] && s.out_dtype != s.dtype)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "spec: out=%s is for fp8 dtypes (e4m3, e5m2) only; a dtype=%s variant writes O as %s",
                           dtype_name(s.out_dtype), dtype_name(s.dtype), dtype_name(s.dtype));
        s.out_dtype = s.dtype;
    }
    *out = s;
    return FG_OK;
}

int spec_equal(const fg_spec *a, const fg_spec *b) {
    return a->kind == b->kind &&
           (a->kind != FG_KIND_BWD || (a->deterministic != 0) == (b->deterministic != 0)) &&
           ((a->kind != FG_KIND_BWD && a->kind != FG_KIND_SERVE) || (a->tma != 0) == (b->tma != 0)) &&
           (a->kind != FG_KIND_SERVE ||
            (a->splits == b->splits && (a->v_in_k != 0) == (b->v_in_k != 0) && a->kv_fp8 == b->kv_fp8)) &&
           spec_head_dim_v(a) == spec_head_dim_v(b) &&
           (a->kind == FG_KIND_MERGE ||
            ((a->sinks != 0) == (b->sinks != 0) && (a->window != 0) == (b->window != 0) &&
             (a->softcap != 0) == (b->softcap != 0) && (a->alibi != 0) == (b->alibi != 0) &&
             strcmp(a->mod, b->mod) == 0)) &&
           ((a->kind != FG_KIND_FWD && a->kind != FG_KIND_BWD) || (a->varlen != 0) == (b->varlen != 0)) &&
           a->arch == b->arch && a->arch_accel == b->arch_accel && a->dtype == b->dtype &&
           a->head_dim == b->head_dim && a->block_m == b->block_m && a->block_n == b->block_n &&
           a->warps == b->warps && a->stages == b->stages && (a->causal != 0) == (b->causal != 0) &&
           spec_out_dtype(a) == spec_out_dtype(b);
}

int spec_bwd_dim_padded(int dim, int widest) { return widest > 128 ? (dim + 31) / 32 * 32 : (dim + 15) / 16 * 16; }

int spec_bwd_head_dim_padded(int head_dim) { return spec_bwd_dim_padded(head_dim, head_dim); }

int spec_head_dim_padded(const fg_spec *spec) {
    if (spec->kind != FG_KIND_BWD) return (spec->head_dim + 15) / 16 * 16;
    const int dv = spec_head_dim_v(spec);
    return spec_bwd_dim_padded(spec->head_dim, spec->head_dim > dv ? spec->head_dim : dv);
}

int spec_threads(const fg_spec *spec) { return spec->kind == FG_KIND_MERGE ? 128 : spec->warps * 32; } /* merge.cuh: 4 warps */

int spec_fwd_sub_n(const fg_spec *spec) {
    if (spec->warps <= 0 || spec->block_m % (16 * spec->warps) != 0) return 0;
    const int mt = spec->block_m / (16 * spec->warps), step = dtype_is_fp8(spec->dtype) ? 32 : 16;
    for (int n = spec->block_n - spec->block_n % step; n >= step; n -= step)
        if (spec->block_n % n == 0 && mt * (spec_head_dim_padded(spec) / 2 + n / 2) <= FG_SPEC_ACC_REGS) return n;
    return 0;
}

int spec_bwd_dq_staged(const fg_spec *spec) {
    /* Above head_dim 128 (Q's or V's) the staging (block_m x d fp32) would not fit beside the tiles. */
    return spec->kind == FG_KIND_BWD && spec->arch >= 90 && spec->head_dim <= 128 && spec_head_dim_v(spec) <= 128;
}

int spec_is_wgmma(const fg_spec *spec) { return spec->kind == FG_KIND_FWD && spec->arch == 90 && spec->arch_accel; }

int spec_is_wgmma_bwd(const fg_spec *spec) { return spec->kind == FG_KIND_BWD && spec->arch == 90 && spec->arch_accel; }

int spec_mask_map(const fg_spec *spec) {
    if (!spec->mod[0] || !(spec->kind == FG_KIND_BWD || (spec->kind == FG_KIND_FWD && spec->varlen && spec_is_wgmma(spec))))
        return 0;
    const fg_mod *m = mod_lookup(spec->mod);
    return m && mod_mask_reads_aux(m);
}

int spec_bwd_sm90_dq_n(const fg_spec *spec) { return spec->head_dim == 128 ? 64 : spec->head_dim; }

int spec_bwd_sm90_dq_t(const fg_spec *spec) { return spec_is_wgmma_bwd(spec) && spec->block_m == 80; }

int spec_bwd_rows_block(const fg_spec *spec) { return spec_bwd_sm90_dq_t(spec) ? 80 : 64; }

/* backward_mma.cuh's main kernel: K and V tiles (block_n rows), `stages` (1 or 2) stages of Q and dO (block_m
 * rows), the P^T and dS^T tiles (block_n x block_m, 16-bit), as many stages of the LSE and D rows (block_m
 * floats each)
 * and, on sm_90 and newer, the dQ staging (block_m x head_dim fp32, in fragment order) of the bulk reduce-adds;
 * every row at the padded head dim (spec_head_dim_padded), as the kernel computes: K's and Q's that of head_dim,
 * V's and dO's that of head_dim_v (spec_head_dim_v_padded). */
static size_t bwd_smem_bytes(const fg_spec *s) {
    size_t d = (size_t)spec_head_dim_padded(s), bm = (size_t)s->block_m, bn = (size_t)s->block_n;
    const size_t dv = (size_t)spec_head_dim_v_padded(s);
    if (spec_is_wgmma_bwd(s)) { /* backward_wgmma.cuh: 1 KiB of alignment slack, K and V, 2 stages of Q and dO,
                                   two dS^T buffers, two warpgroups' dQ staging
                                   (64 x dqn fp32 each; block_m x dqn with dQ^T), 2 stages of the LSE and D
                                   rows, 9 mbarriers */
        const size_t dqn = (size_t)spec_bwd_sm90_dq_n(s), dqm = spec_bwd_sm90_dq_t(s) ? bm : 64u;
        return 1024u + 2u * bn * d * 2u + 2u * 2u * bm * d * 2u + 2u * bn * bm * 2u + 2u * dqm * dqn * 4u +
               2u * 2u * bm * 4u + 72u;
    }
    const size_t st = (size_t)s->stages;
    return (d + dv) * 2u * bn + st * (d + dv) * 2u * bm + 2u * bn * bm * 2u + st * 2u * bm * 4u +
           (spec_bwd_dq_staged(s) ? bm * d * 4u : 0u) +
           (s->tma ? 1024u + 24u : 0u); /* tma=1: 1 KiB of alignment slack (TMA's swizzle), 3 mbarriers */
}

/* The sm_90a forward's shared memory with q Q buffers: 1 KiB of alignment slack, the Q buffers, K and V
 * stages, their mbarriers, the tile ring (4 mbarriers, 2 tile indices, a count) of the dynamic
 * schedule and a flag, and for FP8 a V^T "reordered" mbarrier per stage (forward_wgmma.cuh). */
static size_t wgmma_fwd_smem(const fg_spec *spec, size_t q) {
    return 1024u + (size_t)dtype_size(spec->dtype) *
                       ((size_t)spec->head_dim * (q * (size_t)spec->block_m + (size_t)spec->block_n * (size_t)spec->stages) +
                        (size_t)spec_head_dim_v(spec) * (size_t)spec->block_n * (size_t)spec->stages) + /* Q, K; V */
           (size_t)spec_fp8_pv_sum(spec) * (size_t)spec->block_n * (size_t)spec->stages + /* ones rows (FG_PV_SUM) */
           (spec_fp8_o_flush_smem(spec) ? (size_t)spec->block_m * (size_t)(spec->head_dim + spec_fp8_pv_sum(spec)) * 4u
                                         : 0u) + /* O's fp32 level, the row-sum group included */
           8u * (2u * q + 4u * (size_t)spec->stages + 6u +
                 (dtype_is_fp8(spec->dtype) ? (size_t)spec->stages : 0u)); /* FP8: V^T "reordered" mbarriers */
}

/* The sm_90a FP8 forward's row sums by the P.V wgmma (forward_wgmma.cuh FG_PV_SUM): 8 rows of ones under each
 * V^T chunk, at head_dim 64 and 128. Above that O's accumulator is large enough that the extra group spills
 * (d 192: 32 bytes), and d 256 has no room in wgmma's n; d 128 with three consumer warpgroups (160
 * registers each) would spill too. */
int spec_fp8_pv_sum(const fg_spec *spec) {
    return dtype_is_fp8(spec->dtype) && (spec->head_dim <= 64 || (spec->head_dim <= 128 && spec->block_m < 192))
               ? 8 : 0;
}

/* Where an sm_90a FP8 variant keeps O's fp32 level (the two-level accumulation): 0 none (other variants),
 * 1 in registers, 2 in shared memory (thread-private 16-byte units), where the registers have no room for
 * it: above head_dim 128, and with three consumer warpgroups (160 registers each). */
static int fp8_o_level(const fg_spec *spec) {
    if (!spec_is_wgmma(spec) || !dtype_is_fp8(spec->dtype)) return 0;
    return spec->head_dim > 128 || spec->block_m == 192 ? 2 : 1;
}

int spec_fp8_o_flush_smem(const fg_spec *spec) {
    /* Flushed every 512 keys (a read and a write of the whole level each time). The kernels at d 256 and with
     * three consumer warpgroups are bound by shared memory's bandwidth (the level's traffic comes on top of
     * the wgmma operands' and the V^T reorder's), so the period trades accuracy for speed: 512 keys keeps
     * every fwd/fp8* test within its bound (docs/numerics.md), 1024 does not. */
    if (fp8_o_level(spec) != 2) return 0;
    return spec->block_n <= 256 ? 512 / spec->block_n : 1;
}

int spec_fp8_o_flush(const fg_spec *spec) {
    if (fp8_o_level(spec) != 1) return 0;
    /* Every 2 steps at d 128, which is faster than every step; at d 64 the longer period gains nothing, so
     * every step. Either period keeps every fwd/fp8* test within its bound (docs/numerics.md). */
    return spec->head_dim <= 64 ? 1 : 2;
}

int spec_fp8_sum_rounded(const fg_spec *spec) {
    return spec_is_wgmma(spec) && spec_fp8_pv_sum(spec) > 0;
}

int spec_fp8_vt_bytes(const fg_spec *spec) {
    return spec->block_n % 128 == 0 ? 128 : spec->block_n % 64 == 0 ? 64 : 32;
}

int spec_q_stages(const fg_spec *spec) {
    if (!spec_is_wgmma(spec)) return 1;
    return wgmma_fwd_smem(spec, 2) <= arch_smem_limit(spec->arch) ? 2 : 1;
}

int spec_wgmma_o_direct(const fg_spec *spec) {
    return spec_is_wgmma(spec) && spec->kind == FG_KIND_FWD &&
           (dtype_is_fp8(spec->dtype) || spec_q_stages(spec) == 1 || spec->varlen);
}

/* The wgmma family (sm_90a): see wgmma_fwd_smem. The mma.sync family: its Q tile plus `stages` K and V
 * tiles, each row head_dim_padded elements of the input dtype (swizzled, never padded): FP8 tiles are half
 * the bytes of 16-bit ones. An FP8 V tile is stored transposed (V^T, head_dim rows of block_n keys) and
 * holds the same number of bytes. The epilogue stages O (16-bit) in the same memory from the Q tile on, so
 * FP8 needs at least block_m 16-bit rows: more than the tiles only when 2 * stages * block_n < block_m
 * (256 x 32 with 2 stages, say). */
/* forward_serving.cuh: the Q tile and the K/V stages (K of head_dim, V of head_dim_v), 16-bit (kv_fp8: FP8 stages, one
 * byte an element, and one 16-bit K and V tile they are dequantized into); at the end, over the K/V stages, O in fp32
 * (rows of head_dim_v + 8 floats) and the row statistics. */
static size_t serve_smem_bytes(const fg_spec *s) {
    const size_t dp = (size_t)spec_head_dim_padded(s), dvp = (size_t)spec_head_dim_v_padded(s), bm = (size_t)s->block_m;
    const size_t bn = (size_t)s->block_n, wide = (size_t)spec_serve_wide(s);
    const size_t warps_n = s->block_m >= 16 && s->warps * 16 >= s->block_m ? (size_t)(s->warps * 16 / s->block_m) : 1;
    /* K (and V unless v_in_k) stages; a wide variant's P tile and per-warp row maxima after them */
    const size_t row = dp + (s->v_in_k ? 0u : dvp);
    const size_t kv = (s->kv_fp8 ? 2u * bn * row + bn * row * (size_t)s->stages : 2u * bn * row * (size_t)s->stages) +
                      wide * (bm * bn * 2u + warps_n * bm * 4u);
    /* O staged in fp32 (one copy a key warp, or one in all for a wide variant whose warps own its columns), then the
     * row states: each key warp's, and the sinks' */
    const size_t staged = (wide ? 1u : warps_n) * bm * (dvp + 8) * 4 + (warps_n + (s->sinks ? 1u : 0u)) * bm * 8u;
    /* tma=1: 1 KiB of slack for the tiles' 1024-byte alignment (TMA's swizzle) and a full mbarrier a stage */
    const size_t tma = s->tma ? 1024u + 8u * (size_t)s->stages : 0u;
    return dp * 2u * bm + (kv > staged ? kv : staged) + tma;
}

size_t spec_smem_bytes(const fg_spec *spec) {
    if (spec->kind == FG_KIND_MERGE) return 0; /* static: 4 KiB of weights */
    if (spec->kind == FG_KIND_SERVE) return serve_smem_bytes(spec);
    if (spec->kind == FG_KIND_BWD) return bwd_smem_bytes(spec);
    if (spec_is_wgmma(spec)) return wgmma_fwd_smem(spec, (size_t)spec_q_stages(spec));
    size_t dp = (size_t)spec_head_dim_padded(spec);
    size_t tiles = dp * (size_t)dtype_size(spec->dtype) *
                   ((size_t)spec->block_m + 2u * (size_t)spec->block_n * (size_t)spec->stages);
    size_t o_tile = dp * 2u * (size_t)spec->block_m;
    return tiles > o_tile ? tiles : o_tile;
}
