/* cuda_api.h: the CUDA driver API, loaded at run time with dlopen("libcuda.so.1").
 * flashgen links no driver library, so the CLI, the tests and host applications start on machines
 * without a GPU (CI) and report FG_ERR_NO_DEVICE instead of failing to load. Types come from the
 * toolkit's cuda.h (compile time only). Every call goes through FG_CU(), which records the call's text,
 * file and line in the fg_error when it fails. */
#ifndef FG_CUDA_API_H
#define FG_CUDA_API_H

#include <cuda.h>
#include "core/error.h"

typedef struct fg_cuda_api {
    CUresult (*cuInit)(unsigned int);
    CUresult (*cuDriverGetVersion)(int *);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxPushCurrent)(CUcontext);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxPopCurrent)(CUcontext *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*cuFuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, CUstream, void **, void **);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
    CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    /* graphs: the test suites capture calls (the library itself only asks cuStreamIsCapturing) */
    CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuGraphDestroy)(CUgraph);
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*cuStreamGetId)(CUstream, unsigned long long *); /* CUDA 12.0+; NULL before */
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **); /* CUDA 12.0+; NULL before */
    CUresult (*cuStreamCreate)(CUstream *, unsigned int);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*cuGetErrorName)(CUresult, const char **);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    /* Optional (NULL when the driver lacks it, before CUDA 12): TMA tensor maps for the sm_90a family. */
    CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                       const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                       CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                       CUtensorMapFloatOOBfill);
} fg_cuda_api;

/* Loads libcuda once per process (thread-safe) and calls cuInit(0). Returns the table, or NULL with
 * FG_ERR_NO_DEVICE and a sentence (no driver library, or cuInit failed, e.g. no GPU). */
const fg_cuda_api *cuda_api_get(fg_error *err);

/* Turns a failed driver call into FG_ERR_CUDA with "what failed (ERROR_NAME: description) at file:line". */
fg_status cuda_api_fail(fg_error *err, CUresult rc, const char *call, const char *file, int line);

/* Evaluates a driver call through the table `cu`; on failure records it in `err` and returns FG_ERR_CUDA
 * from the enclosing function. */
#define FG_CU(err, expr)                                                                   \
    do {                                                                                   \
        CUresult fg_cu_rc_ = (expr);                                                       \
        if (fg_cu_rc_ != CUDA_SUCCESS)                                                     \
            return cuda_api_fail((err), fg_cu_rc_, #expr, __FILE__, __LINE__);             \
    } while (0)

#endif
