/* fgbench_jit.c: `fgbench jit`: what a user waits for: a cold NVRTC compile, a disk-cache load (split into
 * its steps with the runtime's internal functions), and the host time of one fg_attention_fwd call against
 * a raw cuLaunchKernel, each against the JIT targets of the benchmark protocol. */
#include <errno.h>
#include <ftw.h>
#include <nvrtc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "autotune/timing.h"
#include "generator/emit.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "templates/common/fg_params.h"
#include "tools/fgbench.h"

/* nftw callback of remove_tree: removes one entry, warning when it cannot. */
static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) != 0)
        say(bench_mode, "warning: could not remove %s: %s", path, strerror(errno));
    return 0;
}

/* Removes dir and everything below it (symbolic links are removed, not followed). */
static void remove_tree(const char *dir) {
    if (dir[0] && nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        say(bench_mode, "warning: could not remove %s: %s", dir, strerror(errno));
}

/* "PASS (0.62x the target)" or "MISS (1.45x the target)". */
static const char *verdict(double measured, double target, char *buf, size_t n) {
    snprintf(buf, n, "%s (%.2fx the target)", measured <= target ? "PASS" : "MISS", measured / target);
    return buf;
}

/* Results of the host-overhead measurement. */
typedef struct call_stats {
    double median_us, mean_us, p99_us; /* per call, host time until the call returns */
} call_stats;

/* One call to time: returns 0, or a failure status after recording the sentence in err. */
typedef int (*call_fn)(void *user, fg_error *err);

/* Times CALLS calls of fn(user), each alone on the host clock, after CALL_WARMUP untimed ones, in batches
 * of CALL_BATCH with a stream synchronization between batches (not timed), so the launch queue never fills
 * and no timed call waits on the GPU. Fills *out; returns fn's failure or a driver failure with err set. */
static fg_status time_calls(const fg_cuda_api *cu, CUstream stream, call_fn fn, void *user, call_stats *out,
                            fg_error *err) {
    double *t = malloc(CALLS * sizeof *t);
    if (!t) return fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for %d timings", CALLS);
    for (int i = 0; i < CALL_WARMUP; i++)
        if (fn(user, err) != 0) goto fail;
    CK(cu->cuStreamSynchronize(stream));
    double sum = 0;
    for (int i = 0; i < CALLS;) {
        for (int k = 0; k < CALL_BATCH && i < CALLS; k++, i++) {
            double t0 = now_seconds();
            int rc = fn(user, err);
            t[i] = (now_seconds() - t0) * 1e6;
            if (rc != 0) goto fail;
            sum += t[i];
        }
        CK(cu->cuStreamSynchronize(stream));
    }
    out->mean_us = sum / CALLS;
    out->median_us = sort_median(t, CALLS);
    out->p99_us = sorted_quantile(t, CALLS, 0.99);
    free(t);
    return FG_OK;
fail:
    free(t);
    return err->status;
}

/* One fg_attention_fwd call of the overhead loop. */
typedef struct fwd_call {
    fg_context *ctx;       /* warm context */
    const fg_fwd_args *a;  /* the tiny problem */
    CUstream stream;       /* where it runs */
} fwd_call;

/* call_fn for fwd_call: one fg_attention_fwd. */
static int call_fwd(void *user, fg_error *err) {
    fwd_call *c = user;
    fg_status st = fg_attention_fwd(c->ctx, c->a, c->stream);
    if (st != FG_OK) return fg_fail(err, st, "fg_attention_fwd: %s", fg_last_error(c->ctx));
    return 0;
}

/* One raw cuLaunchKernel of the empty kernel. */
typedef struct raw_call {
    const fg_cuda_api *cu; /* driver */
    CUfunction fn;         /* the empty kernel */
    CUstream stream;       /* where it runs */
    fg_fwd_params p;       /* a parameter block of the forward kernel's size (zeros) */
} raw_call;

/* call_fn for raw_call: one cuLaunchKernel of the empty kernel, 1 block of 128 threads. */
static int call_raw(void *user, fg_error *err) {
    raw_call *c = user;
    void *params[] = {&c->p};
    CUresult rc = c->cu->cuLaunchKernel(c->fn, 1, 1, 1, 128, 1, 1, 0, c->stream, params, NULL);
    if (rc != CUDA_SUCCESS) return cuda_api_fail(err, rc, "cuLaunchKernel(empty kernel)", __FILE__, __LINE__);
    return 0;
}

/* Compiles with NVRTC, for the device's arch, an empty kernel taking a parameter block as large as the
 * forward kernel's, and times raw cuLaunchKernel calls of it the way the forward calls are timed: the floor
 * under any launch. Returns FG_ERR_UNSUPPORTED with the reason when NVRTC cannot target the device. */
static fg_status time_raw_launch(const bench_device *dev, CUstream stream, call_stats *out, fg_error *err) {
    const fg_cuda_api *cu = dev->cu;
    char src[512], arch[64];
    snprintf(src, sizeof src,
             "struct alignas(8) fgbench_params { unsigned char bytes[%zu]; };\n"
             "extern \"C\" __global__ void fgbench_empty(const __grid_constant__ fgbench_params p) {}\n",
             sizeof(fg_fwd_params));
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", dev->cc_major, dev->cc_minor);
    const char *opts[] = {arch};
    nvrtcProgram prog_ = NULL;
    char *cubin = NULL;
    CUmodule mod = NULL;
    fg_status st = FG_OK;
    nvrtcResult nr;
    size_t size = 0;
#define NVR(call)                                                                                   \
    do {                                                                                            \
        if ((nr = (call)) != NVRTC_SUCCESS) {                                                       \
            st = fg_fail(err, FG_ERR_UNSUPPORTED, "%s failed: %s", #call, nvrtcGetErrorString(nr)); \
            goto done;                                                                              \
        }                                                                                           \
    } while (0)
    NVR(nvrtcCreateProgram(&prog_, src, "fgbench_empty.cu", 0, NULL, NULL));
    NVR(nvrtcCompileProgram(prog_, 1, opts));
    NVR(nvrtcGetCUBINSize(prog_, &size));
    cubin = malloc(size ? size : 1);
    if (!cubin) {
        st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for a %zu-byte cubin", size);
        goto done;
    }
    NVR(nvrtcGetCUBIN(prog_, cubin));
#undef NVR
    raw_call rc;
    memset(&rc, 0, sizeof rc);
    rc.cu = cu;
    rc.stream = stream;
    CUresult r = cu->cuModuleLoadData(&mod, cubin);
    if (r == CUDA_SUCCESS) r = cu->cuModuleGetFunction(&rc.fn, mod, "fgbench_empty");
    if (r != CUDA_SUCCESS) {
        st = cuda_api_fail(err, r, "cuModuleLoadData/cuModuleGetFunction(empty kernel)", __FILE__, __LINE__);
        goto done;
    }
    st = time_calls(cu, stream, call_raw, &rc, out, err);
done:
    if (mod) RELEASE(cu->cuModuleUnload(mod));
    if (prog_ && (nr = nvrtcDestroyProgram(&prog_)) != NVRTC_SUCCESS)
        say(bench_mode, "warning: nvrtcDestroyProgram failed: %s", nvrtcGetErrorString(nr));
    free(cubin);
    return st;
}

/* Part (c): host time per fg_attention_fwd call with the kernel loaded (warm in-memory cache), on the tiny
 * problem; checks afterwards that the calls computed the right output (so no call can look fast by
 * doing nothing). Also times raw launches for comparison (raw_ok 0 and a note when impossible). */
static fg_status host_overhead(const bench_device *dev, const jit_opts *o, const char *cache_dir, call_stats *fwd,
                               call_stats *raw, int *raw_ok, char *raw_note, size_t nnote, fg_error *err) {
    const fg_cuda_api *cu = dev->cu;
    const int64_t S = TINY_SEQLEN, D = o->head_dim;
    const size_t n = (size_t)(S * D), bytes = n * 2;
    fg_context *ctx = NULL;
    CUstream stream = NULL;
    CUdeviceptr q = 0, k = 0, v = 0, out = 0;
    uint16_t *hq = malloc(bytes), *hk = malloc(bytes), *hv = malloc(bytes), *ho = malloc(bytes);
    fg_status st;
    if (!hq || !hk || !hv || !ho) {
        fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for the overhead problem");
        goto fail;
    }
    fg_fwd_args h = bench_args(o->dtype, 1, S, 1, D, o->causal, hq, hk, hv, ho, NULL);
    if (ref_fill_normal(&h.q, INPUT_SEEDS, err) != FG_OK || ref_fill_normal(&h.k, INPUT_SEEDS + 1, err) != FG_OK ||
        ref_fill_normal(&h.v, INPUT_SEEDS + 2, err) != FG_OK)
        goto fail;
    CK(cu->cuMemAlloc(&q, bytes));
    CK(cu->cuMemAlloc(&k, bytes));
    CK(cu->cuMemAlloc(&v, bytes));
    CK(cu->cuMemAlloc(&out, bytes));
    CK(cu->cuMemcpyHtoD(q, hq, bytes));
    CK(cu->cuMemcpyHtoD(k, hk, bytes));
    CK(cu->cuMemcpyHtoD(v, hv, bytes));
    CK(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    if (bench_context(dev, cache_dir, &ctx, err) != FG_OK) goto fail;
    fg_fwd_args a = bench_args(o->dtype, 1, S, 1, D, o->causal, (void *)(uintptr_t)q, (void *)(uintptr_t)k,
                                 (void *)(uintptr_t)v, (void *)(uintptr_t)out, NULL);
    if ((st = fg_prepare(ctx, &a)) != FG_OK) {
        fg_fail(err, st, "fg_prepare: %s", fg_last_error(ctx));
        goto fail;
    }
    char name[FG_SPEC_NAME_MAX];
    fg_spec spec;
    const char *origin;
    if (describe_variant(ctx, &a, name, &spec, &origin, err) != FG_OK) goto fail;
    if (strcmp(origin, "memory") != 0) {
        fg_fail(err, FG_ERR_INTERNAL, "after fg_prepare, fg_explain says %s would come from %s, not memory", name, origin);
        goto fail;
    }
    /* Poison the output: the check at the end sees only what the timed calls wrote. */
    CK(cu->cuMemsetD8(out, 0xFF, bytes));
    CK(cu->cuCtxSynchronize());
    fwd_call fc = {ctx, &a, stream};
    if (time_calls(cu, stream, call_fwd, &fc, fwd, err) != FG_OK) goto fail;
    CK(cu->cuMemcpyDtoH(ho, out, bytes)); /* time_calls ended with a stream synchronization */
    ref_problem p = {.q = h.q, .k = h.k, .v = h.v, .softmax_scale = 0.f, .causal = o->causal};
    ref_report rep;
    if (ref_check_fwd(&p, &h.o, NULL, &rep, err) != FG_OK) goto fail;
    if (!rep.pass) {
        char line[512];
        fg_fail(err, FG_ERR_INTERNAL, "after the timed calls the output is wrong: %s",
                ref_report_format(&rep, line, sizeof line));
        goto fail;
    }
    fg_error rerr;
    fg_error_clear(&rerr);
    st = time_raw_launch(dev, stream, raw, &rerr);
    *raw_ok = st == FG_OK;
    if (st == FG_ERR_CUDA) {
        *err = rerr;
        goto fail;
    }
    if (st != FG_OK) snprintf(raw_note, nnote, "%s", rerr.msg);
    st = FG_OK;
    goto cleanup;
fail:
    st = err->status;
cleanup:
    fg_context_destroy(ctx);
    if (stream) RELEASE(cu->cuStreamDestroy(stream));
    if (q) RELEASE(cu->cuMemFree(q));
    if (k) RELEASE(cu->cuMemFree(k));
    if (v) RELEASE(cu->cuMemFree(v));
    if (out) RELEASE(cu->cuMemFree(out));
    free(hq);
    free(hk);
    free(hv);
    free(ho);
    return st;
}

/* The pieces of a disk-cache load, in ms. */
typedef struct load_split {
    double emit_ms, key_ms, read_ms, load_ms; /* medians over DISK_REPS */
    size_t source_bytes, cubin_bytes;         /* sizes involved */
} load_split;

/* Repeats, DISK_REPS times, the steps fg_prepare takes on a disk-cache hit, with the runtime's internal
 * functions on cache_dir (populated with spec's entry): emit the source, compute the key (options +
 * SHA-256), read and verify the entry (cache_get), load the module (cuModuleLoadData, cuModuleGetFunction,
 * cuFuncSetAttribute), and fills *out with each step's median. The key comes from compile_cache_key, the
 * runtime's own; a miss is an error. */
static fg_status split_disk_load(const bench_device *dev, const fg_spec *spec, const char *cache_dir, load_split *out,
                                 fg_error *err) {
    const fg_cuda_api *cu = dev->cu;
    double t[4][DISK_REPS];
    char *src = NULL;
    uint8_t *cubin = NULL;
    CUmodule mod = NULL;
    fg_disk_cache dc;
    if (cache_open(&dc, cache_dir, err) != FG_OK) return err->status;
    for (int i = 0; i < DISK_REPS; i++) {
        size_t len = 0, size = 0;
        double t0 = now_seconds();
        if (emit_source(spec, &src, &len, err) != FG_OK) goto fail;
        double t1 = now_seconds();
        uint8_t key[32];
        compile_cache_key(spec, 0, src, len, key);
        double t2 = now_seconds();
        fg_error miss;
        fg_error_clear(&miss);
        fg_status st = cache_get(&dc, key, &cubin, &size, &miss);
        if (st != FG_OK) {
            fg_fail(err, st, "the split could not find the entry fg_prepare loaded: %s", miss.msg);
            goto fail;
        }
        double t3 = now_seconds();
        CUfunction fn;
        CK(cu->cuModuleLoadData(&mod, cubin));
        CK(cu->cuModuleGetFunction(&fn, mod, FG_KERNEL_NAME));
        CK(cu->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)spec_smem_bytes(spec)));
        double t4 = now_seconds();
        CK(cu->cuModuleUnload(mod));
        mod = NULL;
        t[0][i] = (t1 - t0) * 1e3, t[1][i] = (t2 - t1) * 1e3, t[2][i] = (t3 - t2) * 1e3, t[3][i] = (t4 - t3) * 1e3;
        out->source_bytes = len;
        out->cubin_bytes = size;
        free(src);
        free(cubin);
        src = NULL;
        cubin = NULL;
    }
    out->emit_ms = sort_median(t[0], DISK_REPS);
    out->key_ms = sort_median(t[1], DISK_REPS);
    out->read_ms = sort_median(t[2], DISK_REPS);
    out->load_ms = sort_median(t[3], DISK_REPS);
    return FG_OK;
fail:
    if (mod) RELEASE(cu->cuModuleUnload(mod));
    free(src);
    free(cubin);
    return err->status;
}

/* Times fg_prepare on a fresh context over cache_dir; *origin_ok is 0 when fg_explain, asked first, did
 * not name `want` as the code's origin (the measurement would not be what it claims). */
static fg_status timed_prepare(const bench_device *dev, const char *cache_dir, const fg_fwd_args *a, const char *want,
                               double *ms, char *name, fg_spec *spec, fg_error *err) {
    fg_context *ctx = NULL;
    if (bench_context(dev, cache_dir, &ctx, err) != FG_OK) return err->status;
    const char *origin;
    fg_status st = describe_variant(ctx, a, name, spec, &origin, err);
    if (st == FG_OK && strcmp(origin, want) != 0)
        st = fg_fail(err, FG_ERR_INTERNAL, "in %s, fg_explain says %s would come from %s; this measurement needs %s",
                     cache_dir, name, origin, want);
    if (st == FG_OK) {
        double t0 = now_seconds();
        st = fg_prepare(ctx, a);
        *ms = (now_seconds() - t0) * 1e3;
        if (st != FG_OK) fg_fail(err, st, "fg_prepare: %s", fg_last_error(ctx));
    }
    fg_context_destroy(ctx);
    return st;
}

/* run_jit: see fgbench.h. */
int run_jit(const bench_device *dev, const jit_opts *o) {
    fg_error e;
    fg_error_clear(&e);
    fg_error *err = &e;
    int status = EXIT_FAIL;
    char root[4096] = "", dir[4200], populated[4200] = "";
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/fgbench-XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        fg_fail(err, FG_ERR_IO, "cannot create a temporary directory %s: %s", root, strerror(errno));
        root[0] = '\0';
        goto fail;
    }
    print_device(dev);
    fg_fwd_args a = bench_args(o->dtype, 1, TINY_SEQLEN, 1, o->head_dim, o->causal, NULL, NULL, NULL, NULL, NULL);
    char name[FG_SPEC_NAME_MAX];
    fg_spec spec;

    /* (a) cold compiles: a fresh context and an empty cache directory each time. */
    double cold[COLD_REPS] = {0}, cold_sorted[COLD_REPS] = {0};
    for (int i = 0; i < COLD_REPS; i++) {
        snprintf(dir, sizeof dir, "%s/cold-%d", root, i);
        if (timed_prepare(dev, dir, &a, "JIT", &cold[i], name, &spec, err) != FG_OK) goto fail;
        if (i == 0) printf("%s: variant %s\n\n(a) cold compile (fg_prepare, fresh context, empty cache directory)\n", bench_prog, name);
        printf("    run %d: %.0f ms%s\n", i + 1, cold[i], i == 0 ? " (includes NVRTC's first use in this process)" : "");
        fflush(stdout);
        cold_sorted[i] = cold[i];
    }
    snprintf(populated, sizeof populated, "%s", dir);
    double cold_ms = sort_median(cold_sorted, COLD_REPS);
    printf("    median %.0f ms\n", cold_ms);
    /* compile_spec alone, and the cache write of its cubin alone (cache_put: the entry written to a temporary
     * file, fsync, rename, directory fsync) into a fresh directory: the two largest pieces of a cold prepare. */
    double pure[COLD_REPS], nvrtc_s[COLD_REPS], put[COLD_REPS];
    int regs = -1, spill = -1;
    for (int i = 0; i < COLD_REPS; i++) {
        fg_compile_result cr;
        double t0 = now_seconds();
        fg_status st = compile_spec(&spec, 0, &cr, err);
        pure[i] = (now_seconds() - t0) * 1e3;
        nvrtc_s[i] = cr.seconds * 1e3;
        regs = cr.registers;
        spill = cr.spill_stores;
        if (st == FG_OK) {
            char pdir[4200];
            snprintf(pdir, sizeof pdir, "%s/put-%d", root, i);
            fg_disk_cache pc;
            uint8_t key[32] = {(uint8_t)i};
            t0 = now_seconds();
            st = cache_open(&pc, pdir, err);
            if (st == FG_OK) st = cache_put(&pc, key, name, cr.cubin, cr.cubin_size, err);
            put[i] = (now_seconds() - t0) * 1e3;
        }
        compile_result_free(&cr);
        if (st != FG_OK) goto fail;
    }
    double pure_ms = sort_median(pure, COLD_REPS), nvrtc_ms = sort_median(nvrtc_s, COLD_REPS);
    double put_ms = sort_median(put, COLD_REPS);
    printf("    compile_spec alone (emit + NVRTC): median %.0f ms, of which NVRTC %.0f ms (%d registers, %d bytes "
           "spilled); fg_prepare minus compile_spec: %+.0f ms (cache key, cache write with fsync, module load), of "
           "which the cache write alone (cache_open + cache_put into a fresh directory) %.1f ms\n",
           pure_ms, nvrtc_ms, regs, spill, cold_ms - pure_ms, put_ms);

    /* (b) disk-cache hits: a fresh context on the populated directory each time. */
    double disk[DISK_REPS] = {0};
    for (int i = 0; i < DISK_REPS; i++)
        if (timed_prepare(dev, populated, &a, "disk cache", &disk[i], name, &spec, err) != FG_OK) goto fail;
    double disk_ms = sort_median(disk, DISK_REPS);
    printf("\n(b) disk-cache load (fg_prepare, fresh context, populated cache; context creation not timed)\n"
           "    median %.3f ms over %d (min %.3f, max %.3f)\n", disk_ms, DISK_REPS, disk[0], disk[DISK_REPS - 1]);
    load_split sp;
    memset(&sp, 0, sizeof sp);
    if (split_disk_load(dev, &spec, populated, &sp, err) != FG_OK) goto fail;
    printf("    pieces (medians of %d, internal APIs): emit_source %.3f ms (%zu bytes of source), cache_key %.3f ms,\n"
           "    cache_get (read + verify) %.3f ms (%zu-byte cubin), cuModuleLoadData + GetFunction + SetAttribute %.3f ms;"
           "\n    sum %.3f ms (fg_prepare also checks the arguments, chooses the variant and takes the context's lock)\n",
           DISK_REPS, sp.emit_ms, sp.source_bytes, sp.key_ms, sp.read_ms, sp.cubin_bytes, sp.load_ms,
           sp.emit_ms + sp.key_ms + sp.read_ms + sp.load_ms);

    /* (c) host overhead per call. */
    call_stats fwd, raw;
    memset(&fwd, 0, sizeof fwd);
    memset(&raw, 0, sizeof raw);
    int raw_ok = 0;
    char raw_note[1024] = "";
    if (host_overhead(dev, o, populated, &fwd, &raw, &raw_ok, raw_note, sizeof raw_note, err) != FG_OK) goto fail;
    printf("\n(c) host time per fg_attention_fwd call (b=1, s=%d, h=1, kernel loaded; %d calls in batches of %d)\n"
           "    median %.2f us, mean %.2f us, p99 %.2f us; the output of the calls checked against the CPU reference\n",
           TINY_SEQLEN, CALLS, CALL_BATCH, fwd.median_us, fwd.mean_us, fwd.p99_us);
    if (raw_ok)
        printf("    raw cuLaunchKernel of an empty kernel with a %zu-byte parameter block: median %.2f us, mean %.2f "
               "us, p99 %.2f us; flashgen adds %.2f us per call\n",
               sizeof(fg_fwd_params), raw.median_us, raw.mean_us, raw.p99_us, fwd.median_us - raw.median_us);
    else
        printf("    raw cuLaunchKernel: not measured (%s)\n", raw_note);

    char v1[64], v2[64], v3[64];
    printf("\n%-44s %12s %12s  %s\n", "JIT targets", "target", "measured", "verdict");
    printf("%-44s %9.0f ms %9.0f ms  %s\n", "cold compile of one variant (fg_prepare)", TARGET_COLD_MS, cold_ms,
           verdict(cold_ms, TARGET_COLD_MS, v1, sizeof v1));
    printf("%-44s %9.2f ms %9.3f ms  %s\n", "disk-cache hit (fg_prepare)", TARGET_DISK_MS, disk_ms,
           verdict(disk_ms, TARGET_DISK_MS, v2, sizeof v2));
    printf("%-44s %9.2f us %9.2f us  %s\n", "host overhead per fg_attention_fwd call", TARGET_CALL_US, fwd.median_us,
           verdict(fwd.median_us, TARGET_CALL_US, v3, sizeof v3));
    status = EXIT_OK;
    goto cleanup;
fail:
    say(bench_mode, "%s", err->msg);
cleanup:
    if (root[0]) remove_tree(root);
    return status;
}

