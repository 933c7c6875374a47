/* compile.c: emitted source -> cubin through NVRTC. Needs no GPU: the target is the spec's arch.
 * NVRTC gets the embedded templates as headers by name (emit_header_*), so no file system or include path
 * is involved. The options and the headers' digest are part of the disk-cache key (compile_options is the
 * one place the options are written). */
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "generator/emit.h"
#include "runtime/cache.h"
#include "core/knobs.h"
#include "runtime/compile.h"
#include "core/alloc.h"

/* FLASHGEN_LINEINFO=1 adds -lineinfo (source lines in compute-sanitizer and Nsight reports). It is off by
 * default: it changes no instruction but makes a cubin about 4x larger (head_dim 128: 209 KB against
 * 48 KB), and a disk-cache hit reads and SHA-256-verifies the whole cubin, so it would cost a load most
 * of the 2 ms it may take. Read once per process, because the options key the disk cache. */
static int lineinfo_on;
static pthread_once_t lineinfo_once = PTHREAD_ONCE_INIT;
static void read_lineinfo(void) {
    lineinfo_on = knob_is_one(FG_KNOB_LINEINFO);
}

int compile_options(const fg_spec *spec, int flags, const char **opts, char buf[64]) {
    int n = 0;
    const int as_ptx = (flags & FG_COMPILE_AS_PTX) != 0;
    snprintf(buf, 64, "--gpu-architecture=%s_%d%s", as_ptx ? "compute" : "sm", spec->arch, spec->arch_accel ? "a" : "");
    opts[n++] = buf;
    opts[n++] = "--std=c++17";
    opts[n++] = "--device-as-default-execution-space"; /* the templates' lambdas are device code */
    if (!as_ptx) opts[n++] = "--ptxas-options=-v"; /* the resource report lands in the log, for checks and dumps */
    if (flags & FG_COMPILE_QUICK) opts[n++] = "--Ofast-compile=max"; /* NVRTC 13 refuses -Ofast-compile=max */
    pthread_once(&lineinfo_once, read_lineinfo);
    if (lineinfo_on) opts[n++] = "-lineinfo";
    return n;
}

/* The headers' digest, computed once (hashing every template costs more than the rest of a key). */
static char headers_digest[65];
static pthread_once_t headers_digest_once = PTHREAD_ONCE_INIT;
static void read_headers_digest(void) { emit_headers_digest(headers_digest); }

void compile_cache_key(const fg_spec *spec, int flags, const char *src, size_t len, uint8_t key[32]) {
    const char *opts[FG_NVRTC_MAX_OPTS + 1];
    char archbuf[64], arch[16];
    int nopts = compile_options(spec, flags, opts, archbuf);
    if (flags & FG_COMPILE_AFTER_QUICK) opts[nopts++] = "(after --Ofast-compile=max in the same process)";
    spec_arch_format(spec->arch, spec->arch_accel, arch, sizeof arch);
    pthread_once(&headers_digest_once, read_headers_digest);
    fg_cache_key_inputs in = {src, len, compile_nvrtc_version(), opts, nopts, arch, FG_VERSION_STRING, headers_digest};
    cache_key(&in, key);
}

void compile_result_key(const fg_spec *spec, int flags, const char *src, size_t len, const fg_compile_result *r,
                        uint8_t key[32]) {
    compile_cache_key(spec, flags | (r->after_quick ? FG_COMPILE_AFTER_QUICK : 0), src, len, key);
}

/* Set when the process's first quick compile starts, never cleared: NVRTC's state stays changed (compile.h). */
static int quick_started;

int compile_after_quick(void) { return __atomic_load_n(&quick_started, __ATOMIC_ACQUIRE); }

static char nvrtc_version_text[32] = "unknown";
static pthread_once_t nvrtc_version_once = PTHREAD_ONCE_INIT;

static void read_nvrtc_version(void) {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
        snprintf(nvrtc_version_text, sizeof nvrtc_version_text, "%d.%d", major, minor);
}

/* Filled once, thread-safely: the text keys the disk cache, so a torn read would be a wrong key. */
const char *compile_nvrtc_version(void) {
    pthread_once(&nvrtc_version_once, read_nvrtc_version);
    return nvrtc_version_text;
}

/* The largest integer that precedes `suffix` in the ptxas report (e.g. " registers" in "Used 172
 * registers"), over every kernel of the module (the backward has three: the worst one is what matters
 * for spills and registers); -1 when there is none. */
static int report_number(const char *log, const char *suffix) {
    int best = -1;
    for (const char *hit = strstr(log, suffix); hit; hit = strstr(hit + 1, suffix)) {
        const char *q = hit;
        while (q > log && q[-1] == ' ') q--;
        const char *end = q;
        while (q > log && q[-1] >= '0' && q[-1] <= '9') q--;
        if (q != end && atoi(q) > best) best = atoi(q);
    }
    return best;
}

void compile_result_free(fg_compile_result *r) {
    if (!r) return;
    free(r->cubin);
    free(r->log);
    free(r->ptx);
    memset(r, 0, sizeof *r);
}

#define FG_MAX_HEADERS 64 /* templates NVRTC may be given */

#define NV(call)                                                                                  \
    do {                                                                                          \
        nvrtcResult rc_ = (call);                                                                 \
        if (rc_ != NVRTC_SUCCESS) {                                                               \
            st = fg_fail(err, rc_ == NVRTC_ERROR_OUT_OF_MEMORY ? FG_ERR_NO_MEMORY : FG_ERR_COMPILE, \
                         "%s failed: %s (%s)", #call, nvrtcGetErrorString(rc_), name);          \
            goto done;                                                                            \
        }                                                                                         \
    } while (0)

fg_status compile_source(const fg_spec *spec, const char *src, size_t len, int flags, fg_compile_result *out,
                         fg_error *err) {
    memset(out, 0, sizeof *out);
    out->registers = out->spill_stores = out->spill_loads = out->stack_frame = out->smem_static = -1;
    char name[FG_SPEC_NAME_MAX];
    if (spec_format(spec, name, sizeof name) < 0) return fg_fail(err, FG_ERR_INTERNAL, "unformattable spec");
    const char *opts[FG_NVRTC_MAX_OPTS];
    char archbuf[64];
    int nopts = compile_options(spec, flags, opts, archbuf);
    fg_status st = FG_OK;
    nvrtcProgram prog = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    (void)len; /* NVRTC reads the NUL-terminated text */
    const char *names[FG_MAX_HEADERS], *texts[FG_MAX_HEADERS];
    const int nheaders = emit_header_count();
    if (nheaders > FG_MAX_HEADERS) return fg_fail(err, FG_ERR_INTERNAL, "%d templates, room for %d", nheaders, FG_MAX_HEADERS);
    for (int i = 0; i < nheaders; i++) {
        names[i] = emit_header_name(i);
        texts[i] = emit_header_text(i);
    }
    NV(nvrtcCreateProgram(&prog, src, "flashgen_kernel.cu", nheaders, texts, names));
    if (flags & FG_COMPILE_QUICK) __atomic_store_n(&quick_started, 1, __ATOMIC_RELEASE);
    nvrtcResult crc = nvrtcCompileProgram(prog, nopts, opts);
    /* read after the compile: one that overlapped a quick compile on another thread may have seen its state */
    out->after_quick = compile_after_quick();
    size_t log_size = 0;
    NV(nvrtcGetProgramLogSize(prog, &log_size));
    out->log = fg_malloc(log_size + 1);
    if (!out->log) { st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory reading the NVRTC log"); goto done; }
    NV(nvrtcGetProgramLog(prog, out->log));
    out->log[log_size] = '\0';
    if (crc != NVRTC_SUCCESS) {
        out->option_refused = crc == NVRTC_ERROR_INVALID_OPTION;
        st = fg_fail(err, FG_ERR_COMPILE, "NVRTC could not compile %s (%s); this is a flashgen bug, please report it "
                     "with the log: %.600s", name, nvrtcGetErrorString(crc), out->log);
        goto done;
    }
    /* The code: the cubin, or with FG_COMPILE_AS_PTX the PTX (its size counts the terminating NUL, which
     * the driver needs) */
    const int as_ptx = (flags & FG_COMPILE_AS_PTX) != 0;
    nvrtcResult (*const code_size)(nvrtcProgram, size_t *) = as_ptx ? nvrtcGetPTXSize : nvrtcGetCUBINSize;
    nvrtcResult (*const code)(nvrtcProgram, char *) = as_ptx ? nvrtcGetPTX : nvrtcGetCUBIN;
    NV(code_size(prog, &out->cubin_size));
    out->cubin = fg_malloc(out->cubin_size ? out->cubin_size : 1);
    if (!out->cubin) {
        st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for %zu bytes of %s", out->cubin_size, as_ptx ? "PTX" : "cubin");
        goto done;
    }
    NV(code(prog, (char *)out->cubin));
    if (flags & FG_COMPILE_KEEP_PTX) {
        size_t ptx_size = 0;
        NV(nvrtcGetPTXSize(prog, &ptx_size));
        out->ptx = fg_malloc(ptx_size + 1);
        if (!out->ptx) { st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for PTX"); goto done; }
        NV(nvrtcGetPTX(prog, out->ptx));
        out->ptx[ptx_size] = '\0';
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    out->registers = report_number(out->log, " registers");
    out->stack_frame = report_number(out->log, " bytes stack frame");
    out->spill_stores = report_number(out->log, " bytes spill stores");
    out->spill_loads = report_number(out->log, " bytes spill loads");
    out->smem_static = report_number(out->log, " bytes smem");
done:
    if (prog) nvrtcDestroyProgram(&prog);
    if (st != FG_OK) {
        char *log = out->log;
        const int refused = out->option_refused;
        out->log = NULL;
        compile_result_free(out);
        out->log = log; /* keep the log for dumps */
        out->option_refused = refused;
        out->after_quick = compile_after_quick();
    }
    return st;
}

fg_status compile_spec(const fg_spec *spec, int flags, fg_compile_result *out, fg_error *err) {
    char *src = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    fg_status st = emit_source(spec, &src, &len, err);
    if (st != FG_OK) return st;
    st = compile_source(spec, src, len, flags, out, err);
    free(src);
    return st;
}
