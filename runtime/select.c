/* select.c: variant selection. From a checked call to the variant that runs it: the problem class the
 * tuning database keys, whether the call takes the sm_90a (wgmma, TMA) family (its tensors TMA-ready), the
 * tiles (the database's winner, else the tile policy), and the check that this device can run the variant.
 * Nothing here loads or launches a kernel. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "runtime/dispatch.h"

fg_tune_class select_problem_class(fg_kind kind, const fg_tensor *q, const fg_tensor *k, int causal) {
    fg_tune_class c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.dtype = q->dtype;
    c.head_dim = (int)q->shape[3];
    c.causal = causal;
    c.gqa = k->shape[2] > 0 ? (int)(q->shape[2] / k->shape[2]) : 1; /* no heads: an empty call */
    c.seqlen_q = tunedb_bucket(q->shape[1]);
    c.seqlen_k = tunedb_bucket(k->shape[1]);
    c.batch_heads = tunedb_bucket(q->shape[0] * q->shape[2]);
    return c;
}

void select_target_of(const fg_context *ctx, select_target *t) {
    memset(t, 0, sizeof *t);
    t->arch = ctx->arch;
    t->wgmma = ctx->wgmma, t->wgmma_fp8 = ctx->wgmma_fp8, t->wgmma_bwd = ctx->wgmma_bwd, t->bwd_tma = ctx->bwd_tma;
    t->sm_count = ctx->sm_count;
    t->smem_optin = ctx->smem_optin;
    t->device_name = ctx->device_name;
    t->policy = &ctx->policy;
}

/* The defaults fg_context_create takes on a device of this arch with no knobs set and a driver that encodes
 * tensor maps: the sm_90a families on a 9.0 device (accel: "sm_90a"; "sm_90" keeps them off, as
 * FLASHGEN_WGMMA=0 does), the backward's TMA loads on sm_90 only, the arch's shared-memory limit. */
void select_target_for_arch(int arch, int accel, const fg_tile_policy *policy, select_target *t) {
    memset(t, 0, sizeof *t);
    t->arch = arch;
    t->wgmma = t->wgmma_fp8 = t->wgmma_bwd = arch == 90 && accel;
    t->bwd_tma = arch == 90;
    t->sm_count = 0; /* unknown: only bounds the wgmma family's tile count, near INT_MAX */
    t->smem_optin = arch_smem_limit(arch);
    t->device_name = NULL;
    t->policy = policy;
}

/* select_check_runnable's rules, without the memory cache: the spec's rules, and the target's own
 * shared-memory limit. */
static fg_status check_rules(const select_target *t, const fg_spec *s, fg_error *err) {
    fg_status st = spec_validate(s, err);
    if (st != FG_OK) return st;
    if (spec_smem_bytes(s) > t->smem_optin) {
        char name[FG_SPEC_NAME_MAX];
        spec_format(s, name, sizeof name);
        if (t->device_name)
            return fg_fail(err, FG_ERR_UNSUPPORTED, "variant %s needs %zu bytes of shared memory; device %s allows %zu per block",
                           name, spec_smem_bytes(s), t->device_name, t->smem_optin);
        return fg_fail(err, FG_ERR_UNSUPPORTED, "variant %s needs %zu bytes of shared memory; sm_%d allows %zu per block",
                       name, spec_smem_bytes(s), t->arch, t->smem_optin);
    }
    return FG_OK;
}

/* The runnable check of the choice: select_check_runnable on a context (its memory cache first), else the
 * rules on the target alone (the same answer). */
static fg_status runnable(fg_context *ctx, const select_target *t, const fg_spec *s, fg_error *err) {
    return ctx ? select_check_runnable(ctx, s, err) : check_rules(t, s, err);
}

fg_status select_check_runnable(fg_context *ctx, const fg_spec *s, fg_error *err) {
    /* Every kernel in the memory cache was checked before its load (kernels_get's contract), and the answer
     * depends only on the spec and the device: a loaded variant is validated once, not on every call. */
    pthread_mutex_lock(&ctx->lock);
    const int loaded = kernels_loaded_spec(ctx, s);
    pthread_mutex_unlock(&ctx->lock);
    if (loaded) return FG_OK;
    select_target t;
    select_target_of(ctx, &t);
    return check_rules(&t, s, err);
}

fg_dtype select_out_dtype(const fg_fwd_args *a) {
    return dtype_is_fp8(a->q.dtype) ? a->o.dtype : a->q.dtype;
}

/* TMA reads a tensor when its base address is 16-byte aligned and the byte strides of its dims longer
 * than 1 are positive multiples of 16 below 2^40 (a dim of extent 1 is never stepped, whatever its stride). */
static int tensor_tma_ok(const fg_tensor *t, int contig) {
    const int64_t es = dtype_size(t->dtype);
    if ((uintptr_t)t->data % 16 != 0) return 0;
    for (int i = 0; i < 4; i++) {
        if (i == contig) { /* the contiguous dim: head_dim, or the keys of FP8's key-major V */
            if (t->shape[i] > 1 && t->stride[i] != 1) return 0;
            continue;
        }
        if (t->shape[i] > 1 && (t->stride[i] <= 0 || (t->stride[i] * es) % 16 != 0 || t->stride[i] * es >= (1LL << 40)))
            return 0;
    }
    return 1;
}

/* A call runs on the sm_90a (wgmma, TMA) family when the context allows it (a 9.0 device), head_dim is a
 * multiple of 32 (TMA tiles are 64- or 128-byte chunks; FP8: of 64, unless FLASHGEN_WGMMA_FP8=0), and every
 * tensor is TMA-ready (FP8's V key-major). Other calls on Hopper run the mma.sync family (arch sm_90). */
static int call_wgmma(const select_target *ctx, const fg_fwd_args *a) {
    /* The kernel numbers its tiles (64-row query blocks at the smallest, times heads, times batch) in an
     * int and steps by the grid: a problem with more than INT_MAX - SMs of them runs the mma.sync
     * family, whose grid is 3-d. */
    const int64_t tiles = (a->q.shape[1] + 63) / 64 * a->q.shape[2] * a->q.shape[0];
    const int fp8 = dtype_is_fp8(a->q.dtype);
    if (fp8 && (!ctx->wgmma_fp8 || a->q.shape[3] % 64 != 0)) return 0;
    return ctx->wgmma && a->q.shape[3] % 32 == 0 && a->q.shape[3] <= 256 &&
           tiles <= (int64_t)INT32_MAX - ctx->sm_count && tensor_tma_ok(&a->q, 3) && tensor_tma_ok(&a->k, 3) &&
           tensor_tma_ok(&a->v, fp8 ? 1 : 3) && tensor_tma_ok(&a->o, 3);
}

int select_call_wgmma(const fg_context *ctx, const fg_fwd_args *a) {
    select_target t;
    select_target_of(ctx, &t);
    return call_wgmma(&t, a);
}

int select_bwd_tma_ready(const fg_bwd_args *a) {
    return tensor_tma_ok(&a->q, 3) && tensor_tma_ok(&a->k, 3) && tensor_tma_ok(&a->v, 3) && tensor_tma_ok(&a->dout, 3);
}

/* The forward variant's family and problem fields for target t: the arch (on Hopper sm_90a, the wgmma family,
 * for calls it takes, else sm_90, the mma.sync family), dtype, output dtype, head_dim and mask; no tiles. */
static void fwd_base(const select_target *t, const fg_fwd_args *a, fg_spec *s) {
    memset(s, 0, sizeof *s);
    s->kind = FG_KIND_FWD;
    s->arch = t->arch;
    s->arch_accel = call_wgmma(t, a); /* the wgmma family is the sm_90a target */
    s->dtype = a->q.dtype;
    s->out_dtype = select_out_dtype(a);
    s->head_dim = (int)a->q.shape[3];
    s->causal = a->causal;
}

/* The tile policy's tiles for s on t, the reason in why (tuned_why: the tuning database's note when it had
 * no winner, else NULL), checked runnable (on ctx when there is one). */
static fg_status fwd_policy_tiles(fg_context *ctx, const select_target *t, fg_spec *s, char *why, size_t nwhy,
                                  const char *tuned_why, fg_error *err) {
    const fg_tile_rule *r = tile_policy_lookup(t->policy, s);
    fg_status st = spec_fill_tiles(s, t->policy, err);
    if (st != FG_OK) return st;
    if (why && r)
        snprintf(why, nwhy, "tile policy rule for sm_%d..sm_%d, head_dim %d..%d%s%s%s%s%s", r->arch_min, r->arch_max,
                 r->head_dim_min, r->head_dim_max, r->causal < 0 ? "" : (r->causal ? ", causal" : ", not causal"),
                 r->dtype < 0 ? "" : ", ", r->dtype < 0 ? "" : dtype_name((fg_dtype)r->dtype),
                 tuned_why ? "; the tuning database has no winner: " : "", tuned_why ? tuned_why : "");
    return runnable(ctx, t, s, err);
}

fg_status select_fwd_spec_for(const select_target *t, const fg_fwd_args *a, fg_spec *s, char *why, size_t nwhy,
                              fg_error *err) {
    fwd_base(t, a, s);
    return fwd_policy_tiles(NULL, t, s, why, nwhy, NULL, err);
}

/* The forward variant: fwd_base's fields for the context's device; tiles from the tuning database's winner
 * for the nearest bucket when there is one, else from the tile policy. */
fg_status select_fwd_spec(fg_context *ctx, const fg_fwd_args *a, fg_spec *s, char *why, size_t nwhy, fg_error *err) {
    select_target tg;
    select_target_of(ctx, &tg);
    fwd_base(&tg, a, s);
    char tuned_why[256] = "";
    if (ctx->tuned) {
        fg_tune_class c = select_problem_class(FG_KIND_FWD, &a->q, &a->k, a->causal);
        fg_spec t;
        fg_error terr;
        if (tunedb_best_for(&ctx->tunedb, &c, spec_is_wgmma(s), &t, NULL, tuned_why, sizeof tuned_why) == FG_OK) {
            /* The database keys FP8 classes by the input dtype only: the winner's tiles serve either output. */
            t.out_dtype = s->out_dtype;
            /* the winner's compile target must be the call's, 'a' suffix included */
            if (t.arch == s->arch && t.arch_accel == s->arch_accel && select_check_runnable(ctx, &t, &terr) == FG_OK) {
                *s = t;
                if (why) snprintf(why, nwhy, "%s", tuned_why);
                return FG_OK;
            }
        }
    }
    return fwd_policy_tiles(ctx, &tg, s, why, nwhy, ctx->tuned ? tuned_why : NULL, err);
}

/* The tma=1 form of the mma.sync backward variant s into *t, when target tg gives any backward TMA loads (0:
 * none, *t untouched). */
static int bwd_tma_candidate(const select_target *tg, const fg_spec *s, fg_spec *t) {
    if (s->kind != FG_KIND_BWD || !tg->bwd_tma) return 0;
    *t = *s;
    t->tma = 1;
    return 1;
}

/* runtime.h: whether the mma.sync backward variant s takes TMA loads on this context. validate.c's bwd_tma
 * rule says which tiles take them (sm_90+, not sm_90a, head_dim a multiple of 64, block_m a multiple of 64,
 * two stages); the device, whether its 1 KiB of alignment slack still fits. */
int rt_bwd_tma(const fg_context *ctx, const fg_spec *s) {
    select_target tg;
    select_target_of(ctx, &tg);
    fg_spec t;
    fg_error quiet;
    return bwd_tma_candidate(&tg, s, &t) && check_rules(&tg, &t, &quiet) == FG_OK;
}

/* The backward variant's family and problem fields for target t: kind bwd, the arch (the mma.sync family:
 * sm_90, not sm_90a, on Hopper, unless the sm_90a kernel takes the call), dtype, head_dim, V's head dim (from v's
 * shape, as the forward's serving call takes it), mask and mode. */
static void bwd_base(const select_target *t, const fg_bwd_args *a, fg_spec *s) {
    memset(s, 0, sizeof *s);
    s->kind = FG_KIND_BWD;
    s->arch = t->arch;
    s->dtype = s->out_dtype = a->q.dtype;
    s->head_dim = (int)a->q.shape[3];
    s->head_dim_v = a->v.shape[3] != a->q.shape[3] ? (int)a->v.shape[3] : 0;
    s->causal = a->causal;
    s->deterministic = a->deterministic;
    /* The sm_90a backward (backward_wgmma.cuh) where it applies (head_dim 64 or 128, V of the same, not
     * deterministic, Q, K, V and dO TMA-ready), unless FLASHGEN_WGMMA_BWD=0: wgmma and TMA loads make it the faster
     * kernel on Hopper, ahead of FlashAttention-2's backward where the mma.sync kernel is behind it. */
    s->arch_accel = t->wgmma_bwd && (s->head_dim == 64 || s->head_dim == 128) && !s->head_dim_v && !s->deterministic &&
                    select_bwd_tma_ready(a);
}

/* The backward's choice after its tiles (s's tiles from the database or the policy still to be filled):
 * the policy's tiles where s has none, the sm_90a kernel's query block, the TMA loads, the runnable check
 * (on ctx when there is one; ctx also applies strict mode's preference for a variant it holds). */
static fg_status bwd_finish(fg_context *ctx, const select_target *tg, const fg_bwd_args *a, fg_spec *s, fg_error *err) {
    fg_status st = spec_fill_tiles(s, tg->policy, err);
    if (st != FG_OK) return st;
    /* The sm_90a kernel's 80-query blocks (dQ^T) at head_dim 128 without a mask beat its 64-query blocks,
     * but a length they divide badly pays for the padding rows of its last block (512 queries take 560 rows
     * of work, and there 64-query blocks win). So 64 where 80-query blocks would cover over 4% more rows
     * than 64-query ones. */
    if (spec_bwd_sm90_dq_t(s)) {
        const int64_t sq = a->q.shape[1], r80 = (sq + 79) / 80 * 80, r64 = (sq + 63) / 64 * 64;
        if (r80 * 100 > r64 * 104) s->block_m = 64;
    }
    /* The mma.sync kernel's TMA loads (tma=1; FLASHGEN_BWD_TMA=0 turns them off) where its tiles take them and
     * their 1 KiB of alignment slack still fits the device (else the cp.async variant runs): they take the
     * address arithmetic out of the kernel's loop. */
    fg_spec t;
    fg_error quiet;
    if (select_bwd_tma_ready(a) && bwd_tma_candidate(tg, s, &t) && runnable(ctx, tg, &t, &quiet) == FG_OK) {
        s->tma = 1;
        /* Strict mode compiles nothing: a cache or bundle holding only the cp.async variant (one from an
         * older flashgen, or from a config without tma = true) still serves the call.
         * Loaded variants are checked first, so once one serves, later calls skip the deep lookups. */
        if (!ctx || !ctx->opt.strict || kernels_origin_of(ctx, s, 0) == KERNELS_FROM_MEMORY) return FG_OK;
        fg_spec plain = *s;
        plain.tma = 0;
        if (kernels_origin_of(ctx, &plain, 0) == KERNELS_FROM_MEMORY ||
            (kernels_origin_of(ctx, s, 1) == KERNELS_FROM_JIT && kernels_origin_of(ctx, &plain, 1) != KERNELS_FROM_JIT)) {
            *s = plain;
            return select_check_runnable(ctx, s, err);
        }
        return FG_OK;
    }
    st = runnable(ctx, tg, s, err);
    const size_t limit = arch_smem_limit(s->arch);
    if (st == FG_ERR_UNSUPPORTED && s->head_dim > 128 && !s->head_dim_v && (spec_smem_bytes(s) > tg->smem_optin ||
                                                          (limit != 0 && spec_smem_bytes(s) > limit))) {
        /* the policy's tile for this head_dim does not fit this GPU's shared memory */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        char gpu[300];
        if (tg->device_name) snprintf(gpu, sizeof gpu, "%s (sm_%d)", tg->device_name, tg->arch);
        else snprintf(gpu, sizeof gpu, "sm_%d", tg->arch);
        return fg_fail(err, st,
                       "head_dim %d has no backward kernel that fits the shared memory of %s: above 128 "
                       "the backward takes head_dim up to 192 on GPUs with 99 KiB of shared memory a block, up to "
                       "256 on an A100 and on an H100 and newer (%s)",
                       s->head_dim, gpu, why);
    }
    return st;
}

fg_status select_bwd_spec_for(const select_target *t, const fg_bwd_args *a, fg_spec *s, fg_error *err) {
    bwd_base(t, a, s);
    return bwd_finish(NULL, t, a, s, err);
}

/* The backward variant for a call: bwd_base's fields for the context's device; tiles from the tuning
 * database (*tuned set) or the tile policy; then bwd_finish. */
fg_status select_bwd_spec(fg_context *ctx, const fg_bwd_args *a, fg_spec *s, int *tuned, fg_error *err) {
    if (tuned) *tuned = 0;
    select_target tg;
    select_target_of(ctx, &tg);
    bwd_base(&tg, a, s);
    /* The mma.sync kernel's tiles: the tuning database's winner for the nearest bucket (`flashgen tune` of a
     * kind = "bwd" space), outside the deterministic mode, when it is runnable here; else the tile policy. The
     * loads by TMA are chosen below either way, as the tuner chose them for its candidates (rt_bwd_tma). */
    if (ctx->tuned && !spec_is_wgmma_bwd(s) && !s->deterministic && !s->head_dim_v) { /* buckets: V of Q's head dim */
        const fg_tune_class c = select_problem_class(FG_KIND_BWD, &a->q, &a->k, a->causal);
        fg_spec t;
        fg_error terr;
        if (tunedb_best_for(&ctx->tunedb, &c, 0, &t, NULL, NULL, 0) == FG_OK && t.kind == FG_KIND_BWD &&
            t.arch == s->arch && !t.arch_accel) { /* the mma.sync target: no 'a' suffix */
            t.tma = 0, t.deterministic = 0;
            if (select_check_runnable(ctx, &t, &terr) == FG_OK) {
                s->block_m = t.block_m, s->block_n = t.block_n, s->warps = t.warps, s->stages = t.stages;
                if (tuned) *tuned = 1;
            }
        }
    }
    return bwd_finish(ctx, &tg, a, s, err);
}
