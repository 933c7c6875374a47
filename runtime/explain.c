/* explain.c: fg_explain and fg_explain_bwd. What a call would run, in sentences: the variant, its kernel
 * family, threads, shared memory and grid, the reason for its tiles, where its code would come from, the
 * device, the disk cache and the tuning database. Nothing here compiles, loads or launches. */
#include <stdio.h>
#include <string.h>
#include "runtime/call_args.h"
#include "runtime/dispatch.h"

/* fg_explain's note on the arch under FLASHGEN_EMULATE_ARCH ("", or ", emulated on sm_90: code from PTX"). */
static const char *emulated_note(const fg_context *ctx, char buf[64]) {
    if (!ctx->emulated) return "";
    snprintf(buf, 64, ", emulated on sm_%d: code from PTX", ctx->device_arch);
    return buf;
}

/* Where an explained variant's code would come from, in words: quick, a loaded kernel is the quick tier's build;
 * tiered, a JIT compile would take the quick tier (tiers.h). */
static const char *origin_text(const fg_context *ctx, kernels_origin from, int quick, int tiered) {
    static const char *const origins[] = {
        "already loaded (memory cache)", "disk cache", "a loaded bundle",
        "not compiled yet: the first call compiles it with NVRTC"};
    if (from == KERNELS_FROM_JIT && ctx->opt.strict) return "in no cache or bundle: strict mode makes the call fail";
    if (from == KERNELS_FROM_MEMORY && quick)
        return "already loaded (memory cache), its quick build (compiled for speed of compilation): the optimized "
               "build replaces it when its background compile ends (fg_wait_compiles waits for it)";
    if (from == KERNELS_FROM_JIT && tiered)
        return "not compiled yet: the first call compiles it quick with NVRTC and runs that build while the "
               "optimized one compiles in the background";
    return origins[from];
}

/* The explain functions' argument check (fn names the caller): FG_OK, or the error set on ctx. */
static fg_status explain_args(fg_context *ctx, const char *fn, const void *args, char *buf, size_t n) {
    if (args && buf && n > 0) {
        buf[0] = '\0';
        return FG_OK;
    }
    fg_error err;
    fg_error_clear(&err);
    fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "%s: %s is NULL or empty", fn, !args ? "args" : "buf");
    return rt_set_error(ctx, &err);
}

/* The spec's name and where its code would come from, without compiling or loading anything. */
static fg_status explain_lookup(fg_context *ctx, const fg_spec *s, char name[FG_SPEC_NAME_MAX], const char **where,
                                fg_error *err) {
    pthread_mutex_lock(&ctx->lock);
    kernels_origin from;
    fg_kernel *k = NULL;
    const fg_status st = kernels_get(ctx, s, KERNELS_DRY, &from, &k, err);
    const int quick = st == FG_OK && from == KERNELS_FROM_MEMORY && k->quick;
    const int tiered = tiers_apply(ctx);
    pthread_mutex_unlock(&ctx->lock);
    if (st != FG_OK) return st;
    spec_format(s, name, FG_SPEC_NAME_MAX);
    *where = origin_text(ctx, from, quick, tiered);
    return FG_OK;
}

/* FG_OK when snprintf's len fit the caller's n bytes, else the error naming fn and the bytes it needs. */
static fg_status explain_fits(fg_context *ctx, const char *fn, size_t n, int len) {
    if (len >= 0 && (size_t)len < n) return FG_OK;
    fg_error err;
    fg_error_clear(&err);
    fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "%s: buf holds %zu bytes; the explanation needs %d", fn, n, len < 0 ? 0 : len + 1);
    return rt_set_error(ctx, &err);
}

fg_status fg_explain(fg_context *ctx, const fg_fwd_args *a, char *buf, size_t n) {
    if (!ctx) return rt_no_context("fg_explain");
    if (explain_args(ctx, "fg_explain", a, buf, n) != FG_OK) return FG_ERR_INVALID_ARGUMENT;
    fg_error err;
    fg_error_clear(&err);
    fg_spec s;
    char why[600] = "tiles given";
    if (rt_check_fwd_args(a, 0, &err) != FG_OK || select_fwd_spec(ctx, a, &s, why, sizeof why, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    char name[FG_SPEC_NAME_MAX];
    const char *where;
    if (explain_lookup(ctx, &s, name, &where, &err) != FG_OK) return rt_set_error(ctx, &err);
    unsigned grid[3];
    const int group = rt_causal_group(ctx, &s, a);
    const int mode = rt_launch_grid(ctx, &s, a, group, grid);
    char path[128] = "FlashAttention-2 mma.sync path (sm_80+)";
    if (spec_is_wgmma(&s))
        snprintf(path, sizeof path, "FlashAttention-3 style sm_90a path (TMA, %s, %d consumer warpgroups)",
                 dtype_is_fp8(s.dtype) ? "FP8 wgmma" : "wgmma", s.block_m / 64);
    else if (dtype_is_fp8(s.dtype))
        snprintf(path, sizeof path, "FP8 mma.sync m16n8k32 path (sm_89+)");
    if (dtype_is_fp8(s.dtype)) {
        const size_t used = strlen(path);
        snprintf(path + used, sizeof path - used, ", %s inputs, out=%s", dtype_name(s.dtype),
                 dtype_name(s.out_dtype));
    }
    char order[96] = "";
    if (s.causal)
        snprintf(order, sizeof order, ", causal order: longest first across %d (head, batch) pairs", group);
    char emu[64];
    int len = snprintf(buf, n,
             "variant %s\n  kernel: forward, %s, %d threads, %zu bytes shared memory, "
             "grid (%u, %u, %u)%s%s\n"
             "  tiles: %s\n  code: %s\n  device: %s (sm_%d%s, %d SMs)\n  disk cache: %s\n  tuning database: %s",
             name, path, spec_threads(&s), spec_smem_bytes(&s),
             grid[0], grid[1], grid[2],
             !spec_is_wgmma(&s)          ? ""
             : mode == FG_GRID_STRIDE    ? " (persistent: tiles in a stride)"
             : mode == FG_GRID_DYNAMIC   ? " (persistent: tiles from the stream's counter, causal ones longest first; one CTA per tile under graph capture, on the per-thread default stream or past " FG_STR(FG_TILE_CTRS) " streams)"
                                         : " (one CTA per tile)",
             order,
             why, where, ctx->device_name, ctx->arch, emulated_note(ctx, emu), ctx->sm_count,
             ctx->disk_ok ? ctx->disk.dir : ctx->disk_problem, ctx->tunedb_note);
    return explain_fits(ctx, "fg_explain", n, len);
}

fg_status fg_explain_bwd(fg_context *ctx, const fg_bwd_args *a, char *buf, size_t n) {
    if (!ctx) return rt_no_context("fg_explain_bwd");
    if (explain_args(ctx, "fg_explain_bwd", a, buf, n) != FG_OK) return FG_ERR_INVALID_ARGUMENT;
    fg_error err;
    fg_error_clear(&err);
    fg_spec s;
    int tuned;
    if (rt_check_bwd_args(a, 0, 0, &err) != FG_OK || select_bwd_spec(ctx, a, &s, &tuned, &err) != FG_OK)
        return rt_set_error(ctx, &err);
    char name[FG_SPEC_NAME_MAX];
    const char *where;
    if (explain_lookup(ctx, &s, name, &where, &err) != FG_OK) return rt_set_error(ctx, &err);
    backward_layout L;
    if (backward_workspace_layout(ctx, a, &L, &err) != FG_OK) return rt_set_error(ctx, &err);
    const int group = rt_bwd_causal_group(ctx, &s, a);
    const char *path = spec_is_wgmma_bwd(&s) ? "sm_90a path (wgmma, two warpgroups of 64 keys)"
                       : s.tma             ? "mma.sync path (sm_80+), loads by TMA"
                                           : "mma.sync path (sm_80+)";
    char emu[64], pad[96] = "";
    if (spec_head_dim_padded(&s) != s.head_dim) /* the mma.sync kernels compute on a padded head dim */
        snprintf(pad, sizeof pad, ", on head_dim %d (columns past %d zero, never stored)", spec_head_dim_padded(&s),
                 s.head_dim);
    int len = snprintf(buf, n,
                       "variant %s\n  kernel: backward main kernel, %s%s, %d threads, %zu bytes shared memory, "
                       "grid (%lld, %lld, %lld)%s%s\n"
                       "  tiles: %s\n"
                       "  workspace: %zu bytes\n  code: %s\n  device: %s (sm_%d%s, %d SMs)\n  disk cache: %s",
                       name, path, pad, spec_threads(&s), spec_smem_bytes(&s), backward_key_blocks(&s, a->k.shape[1]) * group,
                       (long long)a->q.shape[2] / group, (long long)a->q.shape[0],
                       group > 1 ? ", causal key blocks of heads in groups (longest first across a group)" : "",
                       s.deterministic ? ", deterministic (dQ added in a fixed order)" : "",
                       tuned ? "the tuning database's winner for the nearest bucket"
                       : spec_is_wgmma_bwd(&s) ? (s.head_dim == 128 && !s.causal
                                                      ? "the sm_90a backward's tile (80 or 64 queries, whichever "
                                                        "covers seqlen_q with fewer padding rows, 80 within 4%)"
                                                      : "the sm_90a backward's one tile")
                                               : "the tile policy", L.total, where,
                       ctx->device_name, ctx->arch, emulated_note(ctx, emu), ctx->sm_count,
                       ctx->disk_ok ? ctx->disk.dir : ctx->disk_problem);
    return explain_fits(ctx, "fg_explain_bwd", n, len);
}
