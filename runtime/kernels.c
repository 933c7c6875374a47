/* kernels.c: kernel lookup. A variant's loaded kernel comes from the context's memory cache, else a loaded
 * bundle, else the disk cache, else an NVRTC compile (which then fills the disk cache; with tiers on, a quick
 * compile whose full one follows in the background: tiers.h); the first two are looked up by the variant's
 * canonical name, so a hit emits no source. Also the load of a cubin into the context and FLASHGEN_DUMP's copy
 * of each compile. Everything here runs under ctx->lock, except kernels_load_module and kernels_dump_compile,
 * which read only what a context never changes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/sha256.h"
#include "generator/emit.h"
#include "runtime/compile.h"
#include "runtime/dispatch.h"
#include "core/alloc.h"

fg_kernel *kernels_find(fg_context *ctx, const char *name) {
    for (int i = 0; i < ctx->nkernels; i++)
        if (strcmp(ctx->kernels[i].name, name) == 0) return &ctx->kernels[i];
    return NULL;
}

int kernels_loaded_spec(const fg_context *ctx, const fg_spec *s) {
    /* Bytes, not spec_equal: a spec that differs in any field, even one its name omits, is checked anew. */
    for (int i = 0; i < ctx->nkernels; i++)
        if (memcmp(&ctx->kernels[i].spec, s, sizeof *s) == 0) return 1;
    return 0;
}

fg_status kernels_load_module(fg_context *ctx, const fg_spec *s, const uint8_t *cubin, fg_kernel *k, int *ctas_per_sm,
                              fg_error *err) {
    const fg_cuda_api *cu = ctx->cu;
    FG_CU(err, cu->cuCtxPushCurrent(ctx->cuctx));
    CUcontext popped;
    k->module = NULL;
    CUresult rc = cu->cuModuleLoadData(&k->module, cubin);
    if (rc == CUDA_SUCCESS)
        rc = cu->cuModuleGetFunction(&k->fn, k->module, s->kind == FG_KIND_BWD     ? FG_BWD_MAIN_NAME
                                                        : s->kind == FG_KIND_MERGE ? FG_MERGE_NAME
                                                                                   : FG_KERNEL_NAME);
    if (rc == CUDA_SUCCESS && s->kind == FG_KIND_BWD) rc = cu->cuModuleGetFunction(&k->fn_pre, k->module, FG_BWD_PRE_NAME);
    if (rc == CUDA_SUCCESS && s->kind == FG_KIND_BWD) rc = cu->cuModuleGetFunction(&k->fn_post, k->module, FG_BWD_POST_NAME);
    if (rc == CUDA_SUCCESS && spec_mask_map(s)) rc = cu->cuModuleGetFunction(&k->fn_map, k->module, "fg_mask_map_kernel");
    size_t smem = spec_smem_bytes(s);
    if (rc == CUDA_SUCCESS && smem > 0)
        rc = cu->cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
    /* The driver's default split of L1 and shared memory stays: preferring all of L1 as shared memory
     * (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) does not speed up even the one-stage head_dim 256
     * tiles. How many CTAs fit an SM goes to the info log, a diagnostic: a failed query leaves 0 ("unknown")
     * rather than failing the load. */
    *ctas_per_sm = 0;
    if (rc == CUDA_SUCCESS &&
        cu->cuOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, k->fn, spec_threads(s), smem) != CUDA_SUCCESS)
        *ctas_per_sm = 0;
    if (rc != CUDA_SUCCESS) {
        if (k->module) cu->cuModuleUnload(k->module);
        k->module = NULL;
        cu->cuCtxPopCurrent(&popped);
        return cuda_api_fail(err, rc,
                             ctx->emulated ? "loading a variant's PTX under FLASHGEN_EMULATE_ARCH (the driver compiles it; "
                                             "a driver older than NVRTC's PTX cannot: cuModuleLoadData/GetFunction/"
                                             "FuncSetAttribute)"
                                           : "loading the cubin of a variant (cuModuleLoadData/GetFunction/FuncSetAttribute)",
                             __FILE__, __LINE__);
    }
    cu->cuCtxPopCurrent(&popped);
    return FG_OK;
}

fg_status kernels_load(fg_context *ctx, const fg_spec *s, const char *name, const uint8_t *cubin, const char *source,
                       fg_kernel **out, fg_error *err) {
    if (ctx->nkernels == ctx->capkernels) {
        int cap = ctx->capkernels ? ctx->capkernels * 2 : 16;
        fg_kernel *n = fg_realloc(ctx->kernels, (size_t)cap * sizeof *n);
        if (!n) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory growing the kernel cache");
        ctx->kernels = n;
        ctx->capkernels = cap;
    }
    fg_kernel k;
    memset(&k, 0, sizeof k);
    snprintf(k.name, sizeof k.name, "%s", name);
    k.spec = *s;
    k.source = source;
    int ctas_per_sm;
    fg_status st = kernels_load_module(ctx, s, cubin, &k, &ctas_per_sm, err);
    if (st != FG_OK) return st;
    rt_log(ctx, FG_LOG_INFO, "loaded %s (%s): %d threads, %zu bytes of shared memory, %d CTA%s an SM%s", name, source,
           spec_threads(s), spec_smem_bytes(s), ctas_per_sm, ctas_per_sm == 1 ? "" : "s", ctas_per_sm ? "" : " (unknown)");
    ctx->kernels[ctx->nkernels] = k;
    *out = &ctx->kernels[ctx->nkernels++];
    return FG_OK;
}

void kernels_dump_compile(fg_context *ctx, const fg_spec *s, int cflags, const char *src, size_t len,
                          const struct fg_compile_result *r) {
    uint8_t key[32];
    char hex[65];
    compile_result_key(s, cflags, src, len, r, key);
    sha256_hex(key, hex);
    mkdir(ctx->dump_dir, 0700);
    char *flat = NULL;
    fg_error fe;
    if (emit_flatten(src, &flat, NULL, &fe) != FG_OK) rt_log(ctx, FG_LOG_WARN, "FLASHGEN_DUMP: %s", fe.msg);
    const char *exts[3] = {"cu", "ptx", "log"};
    const char *texts[3] = {flat, r->ptx, r->log};
    for (int i = 0; i < 3; i++) {
        if (!texts[i]) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s.%s", ctx->dump_dir, hex, exts[i]);
        fg_error e;
        if (fg_write_file_atomic(path, texts[i], strlen(texts[i]), &e) != FG_OK)
            rt_log(ctx, FG_LOG_WARN, "FLASHGEN_DUMP: %s", e.msg);
    }
    free(flat);
    rt_log(ctx, FG_LOG_INFO, "FLASHGEN_DUMP: wrote %s/%s.{cu,ptx,log}", ctx->dump_dir, hex);
}

void kernels_store(fg_context *ctx, const fg_spec *s, int cflags, const char *src, size_t len, const char *name,
                   const struct fg_compile_result *r) {
    if (!ctx->disk_ok) return;
    uint8_t key[32];
    compile_result_key(s, cflags, src, len, r, key);
    fg_error werr;
    if (cache_put(&ctx->disk, key, name, r->cubin, r->cubin_size, &werr) != FG_OK)
        rt_log(ctx, FG_LOG_WARN, "could not store %s in the disk cache: %s", name, werr.msg);
}

/* Looks variant s (named name; emitted source src, compiled with cflags) up in the disk cache: the entry of a
 * compile in a fresh process, then the entry of one made after a quick compile (compile_after_quick), except for
 * an ahead-of-time lookup while this process can still compile fresh. FG_OK with the payload in *cubin
 * (malloc'd); FG_ERR_NOT_FOUND on a miss (logged at debug); FG_ERR_NO_MEMORY with a sentence in err: out of
 * memory is no miss, since the compile it would start needs far more, and a call that silently recompiles what
 * the cache holds costs seconds where it should fail at once. */
static fg_status disk_lookup(fg_context *ctx, const fg_spec *s, const char *name, int cflags, const char *src,
                             size_t len, kernels_mode mode, uint8_t **cubin, size_t *size, fg_error *err) {
    const int keys = mode == KERNELS_AHEAD && !compile_after_quick() ? 1 : 2;
    for (int i = 0; i < keys; i++) {
        uint8_t key[32];
        compile_cache_key(s, cflags | (i ? FG_COMPILE_AFTER_QUICK : 0), src, len, key);
        fg_error miss;
        const fg_status got = cache_get(&ctx->disk, key, cubin, size, &miss);
        if (got == FG_OK) return FG_OK;
        if (got == FG_ERR_NO_MEMORY) return fg_fail(err, got, "looking up %s in the disk cache: %s", name, miss.msg);
        rt_log(ctx, FG_LOG_DEBUG, "disk cache miss for %s%s: %s", name, i ? " (compiled after a quick compile)" : "",
               miss.msg);
    }
    return FG_ERR_NOT_FOUND;
}

fg_status kernels_get(fg_context *ctx, const fg_spec *s, kernels_mode mode, kernels_origin *from, fg_kernel **out,
                      fg_error *err) {
    char name[FG_SPEC_NAME_MAX];
    if (spec_format(s, name, sizeof name) < 0) return fg_fail(err, FG_ERR_INTERNAL, "unformattable spec");
    /* memory cache, by name */
    fg_kernel *k = kernels_find(ctx, name);
    if (k) {
        *from = KERNELS_FROM_MEMORY;
        if (out) *out = k;
        return FG_OK;
    }
    /* bundles, by name, newest first (not under FLASHGEN_EMULATE_ARCH: their cubins are the emulated arch's
     * machine code, which this GPU cannot load). A bundle is this flashgen's build of the same templates
     * (bundle_parse checks the generator version), so its cubin is the variant's code. */
    for (int i = ctx->emulated ? -1 : ctx->nbundles - 1; i >= 0; i--) {
        const fg_bundle_entry *e = bundle_find(&ctx->bundles[i], name);
        if (e) {
            *from = KERNELS_FROM_BUNDLE;
            return mode == KERNELS_DRY ? FG_OK : kernels_load(ctx, s, name, e->data, "bundle", out, err);
        }
    }
    /* the disk cache, keyed by the source and the compile flags */
    fg_status st;
    char *src = NULL;
    size_t len = 0;
    if ((st = emit_source(s, &src, &len, err)) != FG_OK) return st;
    const int cflags = ctx->emulated ? FG_COMPILE_AS_PTX : 0;
    if (ctx->disk_ok) {
        uint8_t *cubin = NULL;
        size_t size = 0;
        const fg_status got = disk_lookup(ctx, s, name, cflags, src, len, mode, &cubin, &size, err);
        if (got == FG_OK) {
            *from = KERNELS_FROM_DISK;
            st = mode == KERNELS_DRY ? FG_OK : kernels_load(ctx, s, name, cubin, "disk cache", out, err);
            free(cubin);
        }
        if (got != FG_ERR_NOT_FOUND) {
            free(src);
            return got == FG_OK ? st : got;
        }
    }
    /* NVRTC */
    *from = KERNELS_FROM_JIT;
    if (mode == KERNELS_DRY) {
        free(src);
        return FG_OK;
    }
    if (ctx->opt.strict) {
        free(src);
        return fg_fail(err, FG_ERR_NOT_FOUND,
                       "strict mode: variant %s is in no cache and no loaded bundle (add it to a bundle, or call "
                       "fg_prepare without strict mode)", name);
    }
    if (mode == KERNELS_CALL && tiers_apply(ctx)) {
        rt_log(ctx, FG_LOG_INFO, "compiling %s with NVRTC, quick (the optimized build follows in the background) ...",
               name);
        if (tiers_compile_quick(ctx, s, name, src, len, out, &st, err)) return st;
    }
    rt_log(ctx, FG_LOG_INFO, "compiling %s with NVRTC ...", name);
    fg_compile_result r;
    st = compile_source(s, src, len, cflags | (ctx->dump ? FG_COMPILE_KEEP_PTX : 0), &r, err);
    if (ctx->dump) kernels_dump_compile(ctx, s, cflags, src, len, &r);
    if (st != FG_OK) {
        free(src);
        compile_result_free(&r);
        return st;
    }
    if (ctx->emulated)
        rt_log(ctx, FG_LOG_INFO, "compiled %s in %.2f s (to PTX: the driver compiles it for sm_%d at load)", name,
               r.seconds, ctx->device_arch);
    else
        rt_log(ctx, FG_LOG_INFO, "compiled %s in %.2f s (%d registers, %d bytes spilled)", name, r.seconds,
               r.registers, r.spill_stores);
    kernels_store(ctx, s, cflags, src, len, name, &r);
    free(src);
    st = kernels_load(ctx, s, name, r.cubin, "JIT", out, err);
    compile_result_free(&r);
    return st;
}

kernels_origin kernels_origin_of(fg_context *ctx, const fg_spec *s, int deep) {
    char name[FG_SPEC_NAME_MAX];
    kernels_origin from = KERNELS_FROM_JIT;
    fg_error quiet;
    pthread_mutex_lock(&ctx->lock);
    if (!deep)
        from = spec_format(s, name, sizeof name) >= 0 && kernels_find(ctx, name) ? KERNELS_FROM_MEMORY : KERNELS_FROM_JIT;
    else if (kernels_get(ctx, s, KERNELS_DRY, &from, NULL, &quiet) != FG_OK)
        from = KERNELS_FROM_JIT;
    pthread_mutex_unlock(&ctx->lock);
    return from;
}

fg_status kernels_function(fg_context *ctx, const fg_spec *s, CUfunction *fn, fg_error *err) {
    return kernels_functions(ctx, s, fn, NULL, err);
}

fg_status kernels_functions(fg_context *ctx, const fg_spec *s, CUfunction *fn, CUfunction *fn_map, fg_error *err) {
    *fn = NULL;
    if (fn_map) *fn_map = NULL;
    fg_status st = select_check_runnable(ctx, s, err);
    if (st != FG_OK) return st;
    pthread_mutex_lock(&ctx->lock);
    fg_kernel *k = NULL;
    kernels_origin from;
    st = kernels_get(ctx, s, KERNELS_CALL, &from, &k, err);
    if (st == FG_OK) *fn = k->fn;
    if (st == FG_OK && fn_map) *fn_map = k->fn_map;
    pthread_mutex_unlock(&ctx->lock);
    return st;
}
