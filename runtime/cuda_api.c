/* cuda_api.c: loads the CUDA driver (libcuda.so.1) at run time and fills the fg_cuda_api table.
 * flashgen links no driver library so that it loads on machines without a GPU; the first caller of
 * cuda_api_get() pays for dlopen, the dlsym of every entry point and cuInit(0), once per process.
 * The outcome (table or failure sentence) is kept for the life of the process. Once cuInit has been
 * called the driver stays loaded, even when cuInit failed: drivers do not support being unloaded then. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "runtime/cuda_api.h"

/* cuda.h renames the legacy-stream entry points to their "_ptds"/"_ptsz" forms under this macro, which
 * would rename the table's fields and the symbols we must look up; flashgen passes every stream explicitly. */
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "cuda_api.c must be compiled without CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

static pthread_once_t api_once = PTHREAD_ONCE_INIT; /* guards the one load attempt */
static fg_cuda_api api_table;                        /* the entry points, valid when api_status is FG_OK */
static fg_status api_status = FG_ERR_INTERNAL;       /* outcome of the load attempt */
static char api_msg[sizeof(((fg_error *)0)->msg)];  /* the failure sentence when api_status is not FG_OK */
static _Atomic(const fg_cuda_api *) api_ready;       /* &api_table once loaded; read by cuda_api_fail */

/* Records the load failure (a printf-formatted sentence) for every later caller. */
static void load_failed(fg_status status, const char *fmt, ...) FG_PRINTF(2, 3);
static void load_failed(fg_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(api_msg, sizeof api_msg, fmt, ap);
    va_end(ap);
    api_status = status;
}

/* Looks up `name` in the driver and stores it into *slot (a function-pointer field of api_table).
 * Returns 0, or -1 when the symbol is absent. memcpy moves the object pointer into the function pointer
 * the way POSIX dlsym intends, without the cast ISO C leaves undefined. */
static int load_symbol(void *lib, const char *name, void *slot, size_t slot_size) {
    dlerror();
    void *sym = dlsym(lib, name);
    if (!sym)
        return -1;
    memcpy(slot, &sym, slot_size);
    return 0;
}

/* The pthread_once body: open the library, resolve every entry point, call cuInit(0). Sets api_status
 * and api_msg; publishes api_ready on success. */
static void load_driver(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        char first[512];
        const char *e = dlerror();
        snprintf(first, sizeof first, "%s", e ? e : "unknown dlopen error");
        lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            load_failed(FG_ERR_NO_DEVICE, "no CUDA driver: libcuda.so.1 could not be loaded (%s)", first);
            return;
        }
    }

    /* The symbol names are the driver's versioned exports (cuda.h #defines the plain names to them, which
     * also renames the table's fields: `api_table.cuMemAlloc` is `api_table.cuMemAlloc_v2` here and in
     * every user, so the two always agree). */
    static const struct {
        const char *name;     /* exported symbol */
        const char *fallback; /* older export with the same signature, or NULL */
        size_t offset;        /* field in fg_cuda_api */
        size_t size;          /* size of that field */
    } syms[] = {
#define FG_SYM(field, name, fallback) {name, fallback, offsetof(fg_cuda_api, field), sizeof(api_table.field)}
        FG_SYM(cuInit, "cuInit", NULL),
        FG_SYM(cuDriverGetVersion, "cuDriverGetVersion", NULL),
        FG_SYM(cuDeviceGetCount, "cuDeviceGetCount", NULL),
        FG_SYM(cuDeviceGet, "cuDeviceGet", NULL),
        FG_SYM(cuDeviceGetName, "cuDeviceGetName", NULL),
        FG_SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL),
        FG_SYM(cuDeviceTotalMem, "cuDeviceTotalMem_v2", NULL),
        FG_SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
        FG_SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", NULL),
        FG_SYM(cuCtxPushCurrent, "cuCtxPushCurrent_v2", NULL),
        FG_SYM(cuCtxGetCurrent, "cuCtxGetCurrent", NULL),
        FG_SYM(cuCtxPopCurrent, "cuCtxPopCurrent_v2", NULL),
        FG_SYM(cuCtxSynchronize, "cuCtxSynchronize", NULL),
        FG_SYM(cuModuleLoadData, "cuModuleLoadData", NULL),
        FG_SYM(cuModuleUnload, "cuModuleUnload", NULL),
        FG_SYM(cuModuleGetFunction, "cuModuleGetFunction", NULL),
        FG_SYM(cuFuncSetAttribute, "cuFuncSetAttribute", NULL),
        FG_SYM(cuFuncGetAttribute, "cuFuncGetAttribute", NULL),
        FG_SYM(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor", NULL),
        FG_SYM(cuLaunchKernel, "cuLaunchKernel", NULL),
        FG_SYM(cuMemAlloc, "cuMemAlloc_v2", NULL),
        FG_SYM(cuMemFree, "cuMemFree_v2", NULL),
        FG_SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2", NULL),
        FG_SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2", NULL),
        FG_SYM(cuMemsetD8, "cuMemsetD8_v2", NULL),
        FG_SYM(cuMemsetD32Async, "cuMemsetD32Async", NULL),
        FG_SYM(cuMemcpyDtoD, "cuMemcpyDtoD_v2", NULL),
        FG_SYM(cuStreamBeginCapture, "cuStreamBeginCapture_v2", NULL),
        FG_SYM(cuStreamEndCapture, "cuStreamEndCapture", NULL),
        FG_SYM(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", NULL),
        FG_SYM(cuGraphLaunch, "cuGraphLaunch", NULL),
        FG_SYM(cuGraphExecDestroy, "cuGraphExecDestroy", NULL),
        FG_SYM(cuGraphDestroy, "cuGraphDestroy", NULL),
        FG_SYM(cuStreamIsCapturing, "cuStreamIsCapturing", NULL),
        FG_SYM(cuStreamCreate, "cuStreamCreate", NULL),
        FG_SYM(cuStreamDestroy, "cuStreamDestroy_v2", NULL),
        FG_SYM(cuStreamSynchronize, "cuStreamSynchronize", NULL),
        FG_SYM(cuEventCreate, "cuEventCreate", NULL),
        FG_SYM(cuEventDestroy, "cuEventDestroy_v2", NULL),
        FG_SYM(cuEventRecord, "cuEventRecord", NULL),
        FG_SYM(cuEventSynchronize, "cuEventSynchronize", NULL),
        /* CUDA 12.8 added the _v2 export (cuda.h 13 maps the name to it); drivers before 12.8 have only
         * the original, which has the same signature and the same meaning for timing events. */
        FG_SYM(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
        FG_SYM(cuGetErrorName, "cuGetErrorName", NULL),
        FG_SYM(cuGetErrorString, "cuGetErrorString", NULL),
#undef FG_SYM
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        char *slot = (char *)&api_table + syms[i].offset;
        if (load_symbol(lib, syms[i].name, slot, syms[i].size) == 0)
            continue;
        if (syms[i].fallback && load_symbol(lib, syms[i].fallback, slot, syms[i].size) == 0)
            continue;
        load_failed(FG_ERR_NO_DEVICE, "the CUDA driver is too old: libcuda lacks the entry point %s (update the NVIDIA driver)",
                    syms[i].name);
        dlclose(lib);
        return;
    }

    if (load_symbol(lib, "cuTensorMapEncodeTiled", &api_table.cuTensorMapEncodeTiled,
                    sizeof api_table.cuTensorMapEncodeTiled) != 0)
        api_table.cuTensorMapEncodeTiled = NULL; /* no sm_90a family: Hopper runs the mma.sync one */
    if (load_symbol(lib, "cuStreamGetId", &api_table.cuStreamGetId, sizeof api_table.cuStreamGetId) != 0)
        api_table.cuStreamGetId = NULL; /* tile counters are keyed by the stream handle alone */
    if (load_symbol(lib, "cuLaunchKernelEx", &api_table.cuLaunchKernelEx, sizeof api_table.cuLaunchKernelEx) != 0)
        api_table.cuLaunchKernelEx = NULL; /* the backward's kernels launch one after another (backward.c) */

    CUresult rc = api_table.cuInit(0);
    if (rc != CUDA_SUCCESS) {
        const char *name = NULL, *desc = NULL;
        char code[48];
        if (api_table.cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name) {
            snprintf(code, sizeof code, "CUresult %d", (int)rc);
            name = code;
        }
        if (api_table.cuGetErrorString(rc, &desc) != CUDA_SUCCESS || !desc)
            desc = "no description available";
        load_failed(FG_ERR_NO_DEVICE, "the CUDA driver is loaded but cuInit(0) failed: %s (%s)", name, desc);
        /* The library stays loaded: some drivers do not survive dlclose after a cuInit call. */
        return;
    }
    api_status = FG_OK;
    atomic_store_explicit(&api_ready, &api_table, memory_order_release);
}

const fg_cuda_api *cuda_api_get(fg_error *err) {
    if (pthread_once(&api_once, load_driver) != 0) {
        fg_fail(err, FG_ERR_INTERNAL, "pthread_once failed while loading the CUDA driver");
        return NULL;
    }
    if (api_status != FG_OK) {
        fg_fail(err, api_status, "%s", api_msg);
        return NULL;
    }
    return &api_table;
}

fg_status cuda_api_fail(fg_error *err, CUresult rc, const char *call, const char *file, int line) {
    const fg_cuda_api *cu = atomic_load_explicit(&api_ready, memory_order_acquire);
    const char *name = NULL, *desc = NULL;
    char code[48];
    if (cu) {
        if (cu->cuGetErrorName(rc, &name) != CUDA_SUCCESS)
            name = NULL; /* an rc the driver does not know: print its number */
        if (cu->cuGetErrorString(rc, &desc) != CUDA_SUCCESS)
            desc = NULL;
    }
    if (!name) {
        snprintf(code, sizeof code, "CUresult %d", (int)rc);
        name = code;
    }
    if (!desc)
        desc = "no description available";
    return fg_fail(err, FG_ERR_CUDA, "%s failed: %s (%s) at %s:%d", call ? call : "a CUDA driver call",
                   name, desc, file ? file : "?", line);
}
