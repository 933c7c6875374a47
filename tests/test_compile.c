/* test_compile.c: every shipped variant compiles through NVRTC with no spills (needs no GPU).
 * configs/default.lua is compiled in full for every arch it lists; beyond it, every head dim flashgen
 * accepts (multiples of 8 up to 256) is compiled with the default tiles for sm_90 (the mma.sync family
 * on Hopper), a spread of them for sm_80 and for sm_86 (the 99 KiB parts' tiles), and every head dim
 * the wgmma family accepts (multiples of 32 up to 256) for sm_90a, so no supported variant can spill or
 * fail to compile unnoticed.
 * Compiles run on all cores (NVRTC is thread-safe across programs). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/compile.h"
#include "generator/config.h"
#include "generator/emit.h"

typedef struct job {
    fg_spec *specs;       /* the variants */
    int count;            /* how many */
    int next;             /* next to take */
    pthread_mutex_t lock; /* guards next and the failure text */
    char failures[8192];  /* what went wrong, for the assertion message */
    int nfail;            /* how many failed */
    double seconds;       /* total compile seconds */
    int max_regs;         /* largest register count seen */
    int max_spill;        /* spill (and stack) bytes tolerated: 0 except for documented backward tiles */
} job;

static void *worker(void *arg) {
    job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        int i = j->next++;
        pthread_mutex_unlock(&j->lock);
        if (i >= j->count) return NULL;
        fg_compile_result r;
        fg_error e;
        fg_error_clear(&e);
        char name[FG_SPEC_NAME_MAX];
        spec_format(&j->specs[i], name, sizeof name);
        fg_status st = compile_spec(&j->specs[i], 0, &r, &e);
        pthread_mutex_lock(&j->lock);
        size_t used = strlen(j->failures);
        if (st != FG_OK) {
            j->nfail++;
            snprintf(j->failures + used, sizeof j->failures - used, "%s: %.200s\n", name, e.msg);
        } else {
            j->seconds += r.seconds;
            if (r.registers > j->max_regs) j->max_regs = r.registers;
            if (r.spill_stores > j->max_spill || r.spill_loads > j->max_spill || r.stack_frame > 2 * j->max_spill ||
                r.registers < 0 || r.cubin_size == 0) {
                j->nfail++;
                snprintf(j->failures + used, sizeof j->failures - used,
                         "%s: %d registers, %d/%d bytes spilled, %d bytes stack\n", name, r.registers,
                         r.spill_stores, r.spill_loads, r.stack_frame);
            }
        }
        pthread_mutex_unlock(&j->lock);
        compile_result_free(&r);
    }
}

static void compile_all_tolerating(fg_spec *specs, int count, const char *what, int max_spill) {
    job j;
    memset(&j, 0, sizeof j);
    j.max_spill = max_spill;
    j.specs = specs;
    j.count = count;
    pthread_mutex_init(&j.lock, NULL);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = ncpu < 1 ? 1 : (ncpu > 32 ? 32 : (int)ncpu);
    pthread_t th[32];
    for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, worker, &j);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    fprintf(stderr, "test_compile: %s: %d variants, %.1f compile-seconds, max %d registers, %d failures\n", what, count,
            j.seconds, j.max_regs, j.nfail);
    cr_assert_eq(j.nfail, 0, "%s:\n%s", what, j.failures);
}

static void compile_all(fg_spec *specs, int count, const char *what) { compile_all_tolerating(specs, count, what, 0); }

Test(compile, default_config_every_variant_every_arch, .timeout = 900) {
    fg_config cfg;
    fg_error e;
    cr_assert_eq(config_load_file("configs/default.lua", NULL, &cfg, &e), FG_OK, "%s", e.msg);
    cr_assert_gt(cfg.count, 0);
    int has80 = 0, has90 = 0, has90a = 0;
    for (int i = 0; i < cfg.count; i++) {
        has80 |= cfg.variants[i].arch == 80;
        has90 |= cfg.variants[i].arch == 90 && !cfg.variants[i].arch_accel;
        has90a |= spec_is_wgmma(&cfg.variants[i]);
    }
    cr_assert(has80 && has90 && has90a, "configs/default.lua must list sm_80, sm_90 and sm_90a");
    compile_all(cfg.variants, cfg.count, "configs/default.lua");
    config_free(&cfg);
}

Test(compile, every_head_dim_with_default_tiles, .timeout = 900) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    fg_spec specs[256];
    int n = 0, n90a = 0;
    const int archs[][2] = {{90, 0}, {80, 0}, {86, 0}, {90, 1}};
    for (int a = 0; a < 4; a++)
        for (int d = 8; d <= 256; d += 8) {
            if ((a == 1 || a == 2) && d % 24 != 8 && d != 256) continue; /* a spread of head dims on Ampere */
            if (a == 3 && d % 32 != 0) continue; /* sm_90a: the head dims of the wgmma family */
            fg_spec s = {.kind = FG_KIND_FWD, .arch = archs[a][0], .arch_accel = archs[a][1],
                         .dtype = (d / 8) % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, .head_dim = d, .causal = (d / 16) % 2};
            if (a == 3) { /* d / 8 and d / 16 are even for every multiple of 32: alternate on d / 32 instead */
                s.dtype = (d / 32) % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16;
                s.causal = (d / 64) % 2;
            }
            cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK, "%s", e.msg);
            n90a += spec_is_wgmma(&s);
            specs[n++] = s;
        }
    cr_assert_eq(n90a, 8, "sm_90a: head_dim 32, 64, ..., 256");
    compile_all(specs, n, "head dims 8..256");
    tile_policy_free(&p);
}

Test(compile, options_and_version) {
    fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 64};
    const char *opts[FG_NVRTC_MAX_OPTS];
    char buf[64];
    int n = compile_options(&s, 0, opts, buf);
    cr_assert_gt(n, 0);
    cr_assert_str_eq(opts[0], "--gpu-architecture=sm_90a");
    s.arch_accel = 0; /* the mma.sync family on Hopper is built for sm_90 */
    n = compile_options(&s, 0, opts, buf);
    cr_assert_gt(n, 0);
    cr_assert_str_eq(opts[0], "--gpu-architecture=sm_90");
    const char *v = compile_nvrtc_version();
    cr_assert(strchr(v, '.') && strcmp(v, "unknown") != 0, "NVRTC version '%s'", v);
}

/* FG_COMPILE_AS_PTX (a context emulating sm_80 on a newer GPU): compute_80 PTX, NUL-terminated, for the
 * driver to compile at load; another disk-cache key than the cubin's; the sm_80 source's own branches. */
Test(compile, as_ptx_for_an_emulated_arch) {
    fg_spec s = {.kind = FG_KIND_BWD, .arch = 80, .dtype = FG_DTYPE_F16, .head_dim = 64, .block_m = 64, .block_n = 64,
                 .warps = 4, .stages = 2};
    fg_error err;
    cr_assert_eq(spec_validate(&s, &err), FG_OK, "%s", err.msg);
    const char *opts[FG_NVRTC_MAX_OPTS];
    char buf[64];
    int n = compile_options(&s, FG_COMPILE_AS_PTX, opts, buf);
    cr_assert_str_eq(opts[0], "--gpu-architecture=compute_80");
    for (int i = 0; i < n; i++) cr_assert(strstr(opts[i], "ptxas") == NULL, "no ptxas runs for PTX: %s", opts[i]);
    fg_compile_result r;
    char *src = NULL;
    size_t len = 0;
    cr_assert_eq(emit_source(&s, &src, &len, &err), FG_OK, "%s", err.msg);
    fg_status st = compile_source(&s, src, len, FG_COMPILE_AS_PTX, &r, &err);
    cr_assert_eq(st, FG_OK, "%s", err.msg);
    cr_assert_gt(r.cubin_size, 1000);
    cr_assert_eq(r.cubin[r.cubin_size - 1], 0, "the PTX ends with its NUL");
    cr_assert(strstr((const char *)r.cubin, ".target sm_80") != NULL, "PTX for sm_80");
    cr_assert(strstr((const char *)r.cubin, "mma.sync.aligned") != NULL, "the mma.sync family's instructions");
    cr_assert_eq(r.registers, -1, "no ptxas report");
    uint8_t k_ptx[32], k_bin[32];
    compile_cache_key(&s, FG_COMPILE_AS_PTX, src, len, k_ptx);
    compile_cache_key(&s, 0, src, len, k_bin);
    cr_assert(memcmp(k_ptx, k_bin, 32) != 0, "PTX and cubin must not share a disk-cache entry");
    compile_cache_key(&s, FG_COMPILE_KEEP_PTX, src, len, k_ptx);
    cr_assert(memcmp(k_ptx, k_bin, 32) == 0, "keeping the PTX changes no code");
    compile_result_free(&r);
    free(src);
}

/* FG_COMPILE_QUICK (the JIT's first tier, runtime/tiers.h): NVRTC 13 takes --Ofast-compile=max and compiles the
 * same variant into a cubin of its own, under another disk-cache key than the full compile's (the runtime stores
 * only full compiles, so a quick key never names an entry). A compile after it in the same process says so
 * (after_quick: NVRTC 13.0's optimizer keeps state from the quick compile) and is stored under a key of its own.
 * The plain sm_90a forward at head_dim 64, its compile times in the log. */
Test(compile, quick_compile_for_the_first_tier, .timeout = 300) {
    fg_spec s;
    fg_error err;
    cr_assert_eq(spec_parse("kind=fwd,arch=sm_90a,dtype=bf16,head_dim=64", &s, &err), FG_OK, "%s", err.msg);
    fg_tile_policy p;
    cr_assert_eq(tile_policy_init_default(&p, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(spec_fill_tiles(&s, &p, &err), FG_OK, "%s", err.msg);
    tile_policy_free(&p);
    const char *opts[FG_NVRTC_MAX_OPTS];
    char buf[64];
    int quick = 0;
    int n = compile_options(&s, FG_COMPILE_QUICK, opts, buf);
    for (int i = 0; i < n; i++) quick += strcmp(opts[i], "--Ofast-compile=max") == 0;
    cr_assert_eq(quick, 1, "the quick compile's options hold --Ofast-compile=max once");
    n = compile_options(&s, FG_COMPILE_AFTER_QUICK, opts, buf);
    for (int i = 0; i < n; i++) cr_assert(strstr(opts[i], "Ofast") == NULL, "not a quick compile: %s", opts[i]);
    char *src = NULL;
    size_t len = 0;
    cr_assert_eq(emit_source(&s, &src, &len, &err), FG_OK, "%s", err.msg);
    uint8_t k_quick[32], k_full[32], k_after[32], k_result[32];
    compile_cache_key(&s, FG_COMPILE_QUICK, src, len, k_quick);
    compile_cache_key(&s, 0, src, len, k_full);
    compile_cache_key(&s, FG_COMPILE_AFTER_QUICK, src, len, k_after);
    cr_assert(memcmp(k_quick, k_full, 32) != 0, "the quick and the full compile must not share a disk-cache key");
    cr_assert(memcmp(k_after, k_full, 32) != 0, "a compile after a quick one keys an entry of its own");
    fg_compile_result fresh, q, after;
    cr_assert_eq(compile_after_quick(), 0, "each test runs in a process of its own");
    cr_assert_eq(compile_source(&s, src, len, 0, &fresh, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(fresh.after_quick, 0);
    compile_result_key(&s, 0, src, len, &fresh, k_result);
    cr_assert(memcmp(k_result, k_full, 32) == 0);
    cr_assert_eq(compile_source(&s, src, len, FG_COMPILE_QUICK, &q, &err), FG_OK, "NVRTC %s: %s",
                 compile_nvrtc_version(), err.msg);
    cr_assert_eq(q.option_refused, 0);
    cr_assert_gt(q.cubin_size, 1000);
    cr_assert(q.registers > 0, "the quick compile has a ptxas report too: %s", q.log);
    cr_assert(q.cubin_size != fresh.cubin_size || memcmp(q.cubin, fresh.cubin, q.cubin_size) != 0,
              "the quick cubin is not the full one");
    cr_assert_eq(compile_after_quick(), 1);
    cr_assert_eq(compile_source(&s, src, len, 0, &after, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(after.after_quick, 1, "a compile after a quick one says so");
    compile_result_key(&s, 0, src, len, &after, k_result);
    cr_assert(memcmp(k_result, k_after, 32) == 0, "and is stored under the key of its own");
    cr_log_info("sm_90a forward d 64: full %.2f s (%d registers, %d bytes spilled), quick %.2f s (%d, %d), full after "
                "the quick one %.2f s (%d, %d; %s the first's code)", fresh.seconds, fresh.registers, fresh.spill_stores,
                q.seconds, q.registers, q.spill_stores, after.seconds, after.registers, after.spill_stores,
                after.cubin_size == fresh.cubin_size && memcmp(after.cubin, fresh.cubin, after.cubin_size) == 0
                    ? "the same as" : "not");
    compile_result_free(&fresh);
    compile_result_free(&q);
    compile_result_free(&after);
    free(src);
}

/* The backward at every head dim it computes on (multiples of 16 up to 128, of 32 up to 256) with the policy's
 * tiles, on sm_80 and sm_90 (sm_80's shared memory ends at d 192), both masks and both modes spread over
 * them: the three kernels compile; d <= 48 and 80 spill nothing; the wide tiles of d 64 (deterministic
 * only), 96 and 128 and d 112's spill some bytes in some variants (up to 72 on NVRTC 13.0:
 * generator/tile_policy.c; faster than every tile that does not), so up to 160 are tolerated
 * there; above 128 up to 256 (the deterministic d 160 variant on sm_90: 40 bytes stored, 220 loaded). The default bundle ships the d 64 ones without the
 * deterministic mode, which spill nothing (compile::default_config_every_variant_every_arch). */
Test(compile, backward_every_head_dim, .timeout = 900) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    fg_spec clean[32], spilling[32], wide[32];
    int nc = 0, ns = 0, nw = 0;
    for (int arch = 80; arch <= 90; arch += 10)
        for (int d = 16; d <= (arch == 80 ? 192 : 256); d += d < 128 ? 16 : 32) {
            fg_spec s = {.kind = FG_KIND_BWD, .arch = arch, .dtype = (d / 16) % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16,
                         .head_dim = d, .causal = (d / 32) % 2, .deterministic = arch == 90};
            s.out_dtype = s.dtype;
            cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK, "%s", e.msg);
            cr_assert_eq(spec_validate(&s, &e), FG_OK, "d %d: %s", d, e.msg);
            if (d > 128) wide[nw++] = s;
            else if (d == 64 || d >= 96) spilling[ns++] = s;
            else clean[nc++] = s;
        }
    compile_all(clean, nc, "backward, head dims 16..48 and 80");
    compile_all_tolerating(spilling, ns, "backward, head dims 64, 96, 112, 128", 160);
    compile_all_tolerating(wide, nw, "backward, head dims 160 to 256", 256);
    tile_policy_free(&p);
}

/* The backward at head dims it pads (8 to 16, 40 to 48, 72 to 80, 88 to 96, 104 to 112, 136 to 160, 200 to 224,
 * 248 to 256) with the policy's tiles (those of the padded head dim), on sm_80 and sm_90, masks, dtypes and modes
 * spread over them: the three kernels compile, spill-free at 8-72 and 136, as their padded head dims; at 88,
 * 104, 200 and 248 within the budget of the wide tiles (NVRTC 13.0: up to 24 bytes of spill stores at 88 and
 * 104, 60 at 200 and 248; d 104 and d 200 spill 8 bytes in some variants whose padded head dims spill none). */
Test(compile, backward_padded_head_dims, .timeout = 900) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    static const int dims[] = {8, 40, 72, 136, 88, 104, 200, 248}; /* clean ones first */
    fg_spec specs[16];
    int n = 0;
    for (int arch = 80; arch <= 90; arch += 10)
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
            const int d = dims[i];
            fg_spec s = {.kind = FG_KIND_BWD, .arch = arch, .dtype = i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16,
                         .head_dim = d, .causal = (int)(i / 2) % 2, .deterministic = (arch == 90) == (i % 3 == 0)};
            s.out_dtype = s.dtype;
            cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK, "%s", e.msg);
            cr_assert_eq(spec_validate(&s, &e), FG_OK, "d %d: %s", d, e.msg);
            specs[n++] = s;
        }
    fg_spec clean[8], spilling[8];
    int nc = 0, ns = 0;
    for (int i = 0; i < n; i++) {
        if (specs[i].head_dim <= 72 || specs[i].head_dim == 136) clean[nc++] = specs[i];
        else spilling[ns++] = specs[i];
    }
    compile_all(clean, nc, "backward, padded head dims 8, 40, 72, 136");
    compile_all_tolerating(spilling, ns, "backward, padded head dims 88, 104, 200, 248", 256);
    tile_policy_free(&p);
}

/* The forward tiles whose two m16 tiles a warp fill the accumulator budget (d 128: 128 x 48 on 4 warps,
 * 256 x 48 on 8; a tile the tuner picks at d 128 non-causal), where the loaders
 * recompute their offsets (FG_LOADER_RECOMPUTE): spill-free on sm_80 and sm_90, both masks and dtypes. */
Test(compile, tight_forward_tiles_spill_free, .timeout = 900) {
    fg_spec specs[16];
    int n = 0;
    for (int arch = 80; arch <= 90; arch += 10)
        for (int bm = 128; bm <= 256; bm += 128)
            for (int i = 0; i < 4; i++) {
                fg_spec s = {.kind = FG_KIND_FWD, .arch = arch, .dtype = i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16,
                             .head_dim = 128, .block_m = bm, .block_n = 48, .warps = bm / 32, .stages = 2,
                             .causal = i / 2};
                s.out_dtype = s.dtype;
                fg_error e;
                cr_assert_eq(spec_validate(&s, &e), FG_OK, "%s", e.msg);
                specs[n++] = s;
            }
    compile_all(specs, n, "d 128 forward, 128 x 48 / 256 x 48");
}

/* s (a 16-bit spec: its output dtype set) with the default tile policy's tiles, checked valid. */
static fg_spec policy_tiles(fg_spec s) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    s.out_dtype = s.dtype;
    cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK, "%s", e.msg);
    cr_assert_eq(spec_validate(&s, &e), FG_OK, "d %d: %s", s.head_dim, e.msg);
    tile_policy_free(&p);
    return s;
}

/* The Hopper backward variants at head_dim d0 and d0 + 64, both dtypes and masks, with the policy's tiles:
 * the sm_90a kernel (arch_accel) or the mma.sync kernel's tma=1 variants (tma). */
static int hopper_bwd_specs(fg_spec specs[8], int arch_accel, int tma, int d0) {
    int n = 0;
    for (int d = d0; d <= d0 + 64; d += 64)
        for (int i = 0; i < 4; i++)
            specs[n++] = policy_tiles((fg_spec){.kind = FG_KIND_BWD, .arch = 90, .arch_accel = arch_accel,
                                                .dtype = i % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16, .head_dim = d,
                                                .causal = i / 2, .tma = tma});
    return n;
}

/* The backward with V of a head dim of its own (head_dim_v) with the policy's tiles: DeepSeek's 192/128 beyond the
 * default bundle's (the deterministic mode, the 99 KiB parts' one-stage tile, fp16 dense), V narrower and wider at
 * 128/64 and 64/128 (with TMA loads too), padded pairs (72/40; 40/128, which takes Q's 32 x 32 tile), and the widest
 * gaps (256/32, 96/256, both padded to 32s). GQA is a launch choice (the fp32 dK/dV path is in every variant). They
 * compile and spill nothing (NVRTC 13.0: 206-255 registers). */
Test(compile, backward_head_dim_v, .timeout = 900) {
    static const struct { int arch, d, dv, causal, det, tma, varlen; fg_dtype dt; } v[] = {
        {90, 192, 128, 1, 1, 0, 0, FG_DTYPE_BF16}, {86, 192, 128, 0, 0, 0, 1, FG_DTYPE_BF16},
        {80, 192, 128, 1, 0, 0, 0, FG_DTYPE_F16},  {90, 128, 64, 0, 0, 0, 0, FG_DTYPE_BF16},
        {80, 128, 64, 1, 0, 0, 1, FG_DTYPE_F16},   {90, 128, 64, 1, 0, 1, 1, FG_DTYPE_BF16},
        {86, 128, 64, 1, 0, 0, 1, FG_DTYPE_BF16},  {90, 64, 128, 1, 0, 1, 1, FG_DTYPE_F16},
        {80, 64, 128, 0, 0, 0, 1, FG_DTYPE_BF16},  {80, 72, 40, 0, 0, 0, 1, FG_DTYPE_BF16},
        {90, 40, 128, 0, 1, 0, 0, FG_DTYPE_BF16},  {90, 256, 32, 1, 0, 0, 1, FG_DTYPE_BF16},
        {90, 96, 256, 0, 0, 0, 1, FG_DTYPE_F16},
    };
    fg_spec specs[sizeof v / sizeof v[0]];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        specs[i] = policy_tiles((fg_spec){.kind = FG_KIND_BWD, .arch = v[i].arch, .dtype = v[i].dt, .head_dim = v[i].d,
                                          .head_dim_v = v[i].dv, .causal = v[i].causal, .deterministic = v[i].det,
                                          .tma = v[i].tma, .varlen = v[i].varlen});
    compile_all(specs, (int)(sizeof v / sizeof v[0]), "backward, head_dim_v of its own");
}

/* The mma.sync backward's tma=1 variants (loads by TMA) for sm_90: they compile; ptxas spills none on
 * NVRTC 13.0 (the dK/dV epilogue goes through shared memory), where the cp.async variants spill up to 56
 * at d 128: the 16-byte slack is for other compilers. */
Test(compile, mma_backward_tma, .timeout = 900) {
    fg_spec specs[8];
    const int n = hopper_bwd_specs(specs, 0, 1, 64);
    compile_all_tolerating(specs, n, "mma.sync backward tma=1, head_dim 64 and 128", 16);
}

/* ... and at head_dim 192 and 256 (dQ by vector reductions, no staging): on NVRTC 13.0 ptxas spills 20
 * bytes at d 256 without a mask (still faster than the cp.async loads), nothing at d 192 or causal; the
 * slack of 32 bytes holds that and catches a regression past it. */
Test(compile, mma_backward_tma_above_128, .timeout = 900) {
    fg_spec specs[8];
    const int n = hopper_bwd_specs(specs, 0, 1, 192);
    compile_all_tolerating(specs, n, "mma.sync backward tma=1, head_dim 192 and 256", 32);
}

/* The sm_90a backward (backward_wgmma.cuh, wgmma): it compiles and spills nothing (246-255 registers on NVRTC
 * 13.0, its Q, K, V and dO loaded by TMA), the policy's tiles (80-query blocks at
 * head_dim 128 without a causal mask, dQ^T: 247 registers) and the 64-query ones there too. */
Test(compile, wgmma_backward, .timeout = 900) {
    fg_spec specs[10];
    int n = hopper_bwd_specs(specs, 1, 0, 64);
    for (int i = 0; i < n; i++)
        cr_assert_eq(specs[i].block_m, specs[i].head_dim == 64 ? 128 : specs[i].causal ? 64 : 80, "%d", specs[i].block_m);
    for (int i = 0, m = n; i < m; i++)
        if (specs[i].block_m == 80) {
            specs[n] = specs[i];
            specs[n++].block_m = 64;
        }
    cr_assert_eq(n, 10);
    compile_all(specs, n, "sm_90a backward, head_dim 64 and 128");
}

/* The backward of packed sequences (varlen=1) on the sm_90a kernel at head_dim 64 and 128: it compiles and
 * spills nothing. */
Test(compile, wgmma_backward_varlen, .timeout = 900) {
    fg_spec specs[8];
    const int n = hopper_bwd_specs(specs, 1, 0, 64);
    for (int i = 0; i < n; i++) specs[i].varlen = 1;
    compile_all(specs, n, "sm_90a backward varlen=1, head_dim 64 and 128");
}

/* The serving kernel's tma=1 variants (K and V by TMA) for sm_90: decode and prefill tiles at head_dim 64, 128
 * and 256 compile and spill nothing. */
Test(compile, serving_tma, .timeout = 900) {
    fg_spec specs[9];
    int n = 0;
    static const int dims[] = {64, 128, 256}, rows[] = {16, 32, 64};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            specs[n++] = policy_tiles((fg_spec){.kind = FG_KIND_SERVE, .arch = 90, .dtype = FG_DTYPE_BF16,
                                                .head_dim = dims[i], .block_m = rows[j], .causal = j == 2, .tma = 1});
    compile_all(specs, n, "serving tma=1, head_dim 64, 128 and 256");
}

/* The serving kernel's sinks=1 and window=1 variants (attention sinks in split 0's state; a sliding window's
 * block range and edges): decode and prefill tiles at head_dim 64, 128 and 256, one of them with TMA loads, one
 * with both keys, compile and spill nothing. */
Test(compile, serving_sinks_and_window, .timeout = 900) {
    fg_spec specs[9];
    int n = 0;
    static const int dims[] = {64, 128, 256}, rows[] = {16, 32, 64};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            specs[n++] = policy_tiles((fg_spec){.kind = FG_KIND_SERVE, .arch = j == 0 ? 80 : 90, .dtype = FG_DTYPE_F16,
                                                .head_dim = dims[i], .block_m = rows[j], .causal = j == 1,
                                                .tma = i == 1 && j == 1, .sinks = j != 2 || i == 0,
                                                .window = j == 2 || (i == 2 && j == 0)});
    compile_all(specs, n, "serving sinks=1 and window=1, head_dim 64, 128 and 256");
}

/* The serving kernel's FP8 KV variants (kv=e4m3|e5m2: K and V staged in FP8 and dequantized into 16-bit tiles) at
 * head_dim 64, 128 and 256 on the decode tiles (16 and 32 rows) and the prefill tile, both FP8 formats beside both
 * 16-bit query dtypes, on sm_90 and on sm_80 and sm_89 (whose shared memory gives other stages and tiles), and with
 * the model variants: they compile and spill nothing. (Paged or not is a run-time choice of the same kernel.) */
Test(compile, serving_kv_fp8, .timeout = 900) {
    fg_spec specs[64];
    int n = 0;
    static const int dims[] = {64, 128, 256}, rows[] = {16, 32, 64}, archs[] = {90, 80, 89};
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                for (int f = 0; f < (a == 0 ? 2 : 1); f++) /* sm_90: both query dtypes; the tiles alternate formats */
                    specs[n++] = policy_tiles((fg_spec){.kind = FG_KIND_SERVE, .arch = archs[a],
                                                        .dtype = (f + a + i) % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16,
                                                        .head_dim = dims[i], .block_m = rows[j], .causal = (i + j) % 2,
                                                        .kv_fp8 = (f / 2 + j) % 2 ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3});
    for (int i = 0; i < 3; i++) /* gpt-oss (sinks, a window), Gemma 2 (softcap), ALiBi */
        specs[n++] = policy_tiles((fg_spec){.kind = FG_KIND_SERVE, .arch = 90, .dtype = FG_DTYPE_BF16,
                                            .head_dim = dims[i], .block_m = rows[i], .causal = 1, .sinks = i == 0,
                                            .window = i < 2, .softcap = i == 2, .alibi = i == 1,
                                            .kv_fp8 = FG_DTYPE_E4M3});
    compile_all(specs, n, "serving kv=e4m3|e5m2, head_dim 64, 128 and 256");
}

/* The sm_90a family's FP8 kernels (QGMMA, P exchanged in the quad, V^T by TMA) at every head dim they
 * take, e4m3 and e5m2, both masks, with the policy's tiles: they compile and spill nothing. */
Test(compile, wgmma_fp8_every_head_dim, .timeout = 900) {
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    fg_spec specs[16];
    int n = 0;
    for (int d = 64; d <= 256; d += 64)
        for (int dt = 0; dt < 2; dt++) {
            fg_spec s = {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = dt ? FG_DTYPE_E5M2 : FG_DTYPE_E4M3,
                         .head_dim = d, .causal = (d / 64 + dt) % 2, .out_dtype = dt ? FG_DTYPE_F16 : FG_DTYPE_BF16};
            cr_assert_eq(spec_fill_tiles(&s, &p, &e), FG_OK, "%s", e.msg);
            cr_assert(spec_is_wgmma(&s));
            specs[n++] = s;
        }
    compile_all(specs, n, "sm_90a FP8, head dims 64..256");
    tile_policy_free(&p);
}

/* One variant of each family (and the FP8 wgmma forward, whose prelude differs most). */
static int family_specs(fg_spec *s) {
    fg_spec f[6] = {
        {.kind = FG_KIND_FWD, .arch = 80, .dtype = FG_DTYPE_F16, .head_dim = 64, .block_m = 128, .block_n = 64,
         .warps = 4, .stages = 3},
        {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 128, .block_m = 128,
         .block_n = 128, .warps = 12, .stages = 2, .causal = 1},
        {.kind = FG_KIND_FWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_E4M3, .head_dim = 128},
        {.kind = FG_KIND_BWD, .arch = 80, .dtype = FG_DTYPE_F16, .head_dim = 64, .block_m = 64, .block_n = 64,
         .warps = 4, .stages = 2},
        {.kind = FG_KIND_BWD, .arch = 90, .arch_accel = 1, .dtype = FG_DTYPE_BF16, .head_dim = 64},
        /* the serving kernel with FP8 K and V (its FG_KV_FP8 code in serving_kv.cuh too) */
        {.kind = FG_KIND_SERVE, .arch = 90, .dtype = FG_DTYPE_BF16, .head_dim = 128, .block_m = 16, .kv_fp8 = FG_DTYPE_E4M3},
    };
    fg_tile_policy p;
    fg_error e;
    cr_assert_eq(tile_policy_init_default(&p, &e), FG_OK);
    for (int i = 0; i < 6; i++) {
        s[i] = f[i];
        if (!s[i].out_dtype) s[i].out_dtype = s[i].dtype == FG_DTYPE_E4M3 ? FG_DTYPE_BF16 : s[i].dtype;
        if (!s[i].block_n) cr_assert_eq(spec_fill_tiles(&s[i], &p, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(spec_validate(&s[i], &e), FG_OK, "family %d: %s", i, e.msg);
    }
    tile_policy_free(&p);
    return 6;
}

/* `flashgen gen` and FLASHGEN_DUMP show the flattened source: it must be the program NVRTC compiles from
 * the prelude and its headers, so the two give the same PTX byte for byte. */
Test(compile, flattened_source_is_what_nvrtc_compiles, .timeout = 600) {
    fg_spec s[6];
    const int n = family_specs(s);
    for (int i = 0; i < n; i++) {
        char *pre = NULL, *flat = NULL;
        size_t len = 0, flen = 0;
        fg_error e;
        cr_assert_eq(emit_source(&s[i], &pre, &len, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(emit_flatten(pre, &flat, &flen, &e), FG_OK, "%s", e.msg);
        cr_assert_null(strstr(flat, "#include"), "family %d: an include left after flattening", i);
        fg_compile_result a, b;
        cr_assert_eq(compile_source(&s[i], pre, len, FG_COMPILE_AS_PTX, &a, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(compile_source(&s[i], flat, flen, FG_COMPILE_AS_PTX, &b, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(a.cubin_size, b.cubin_size, "family %d: PTX sizes differ", i);
        cr_assert_eq(memcmp(a.cubin, b.cubin, a.cubin_size), 0, "family %d: the flattened source compiles to other PTX", i);
        compile_result_free(&a);
        compile_result_free(&b);
        free(pre);
        free(flat);
    }
}

/* Each template a family uses compiles on its own against that family's prelude (its one #include
 * replaced by the template's): every header includes what it uses. */
Test(compile, every_template_compiles_alone, .timeout = 900) {
    fg_spec s[6];
    const int n = family_specs(s);
    const char marker[] = "// ---- templates/";
    for (int i = 0; i < n; i++) {
        char *pre = NULL, *flat = NULL;
        fg_error e;
        cr_assert_eq(emit_source(&s[i], &pre, NULL, &e), FG_OK, "%s", e.msg);
        cr_assert_eq(emit_flatten(pre, &flat, NULL, &e), FG_OK, "%s", e.msg);
        char *inc = strstr(pre, "#include \"");
        cr_assert_not_null(inc);
        *inc = '\0';
        int tested = 0;
        for (const char *m = strstr(flat, marker); m; m = strstr(m + 1, marker)) {
            const char *name = m + sizeof marker - 1, *end = strstr(name, " ----");
            if (!end || end - name > 200) continue;
            char src[65536];
            int w = snprintf(src, sizeof src, "%s#include \"%.*s\"\n", pre, (int)(end - name), name);
            cr_assert(w > 0 && w < (int)sizeof src);
            fg_compile_result r;
            cr_assert_eq(compile_source(&s[i], src, (size_t)w, FG_COMPILE_AS_PTX, &r, &e), FG_OK,
                         "family %d: templates/%.*s alone: %s", i, (int)(end - name), name, e.msg);
            compile_result_free(&r);
            tested++;
        }
        cr_assert_geq(tested, 5, "family %d: %d templates", i, tested);
        free(pre);
        free(flat);
    }
}
