/* launch.c: kernel launches. One call launches a list of kernels, in order, on the caller's stream with
 * one parameter block, in the device's primary context, each either plainly or early (programmatic
 * dependent launch). No launch here allocates or synchronizes. */
#include <string.h>
#include "runtime/dispatch.h"

/* Launches items in order on stream with the same parameters, in the device's primary context: switched
 * to only when the caller's thread has another current. Items with an empty grid are skipped. An early
 * item goes through cuLaunchKernelEx with programmatic stream serialization: it launches once every CTA
 * of the kernel before it has run griddepcontrol.launch_dependents (or ended), while that kernel's last
 * CTAs still run, instead of after the whole grid has drained. The caller sets early only where
 * ctx->pdl holds. */
fg_status launch_items(fg_context *ctx, const launch_item *items, int n, void *stream, void **params, fg_error *err) {
    const fg_cuda_api *cu = ctx->cu;
    CUcontext current = NULL, popped;
    CUresult rc = cu->cuCtxGetCurrent(&current);
    const int push = rc != CUDA_SUCCESS || current != ctx->cuctx;
    rc = push ? cu->cuCtxPushCurrent(ctx->cuctx) : CUDA_SUCCESS;
    const launch_item *failed = NULL; /* the last item launched: the one that failed, if one did (none: the push) */
    for (int i = 0; i < n && rc == CUDA_SUCCESS; i++) {
        const launch_item *l = &items[i];
        if (l->grid[0] == 0 || l->grid[1] == 0 || l->grid[2] == 0) continue;
        failed = l;
        if (l->early) {
            CUlaunchAttribute attr;
            memset(&attr, 0, sizeof attr);
            attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            CUlaunchConfig cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.gridDimX = l->grid[0], cfg.gridDimY = l->grid[1], cfg.gridDimZ = l->grid[2];
            cfg.blockDimX = l->threads, cfg.blockDimY = cfg.blockDimZ = 1;
            cfg.sharedMemBytes = l->smem;
            cfg.hStream = (CUstream)stream;
            cfg.attrs = &attr;
            cfg.numAttrs = 1;
            rc = cu->cuLaunchKernelEx(&cfg, l->fn, params, NULL);
        } else {
            rc = cu->cuLaunchKernel(l->fn, l->grid[0], l->grid[1], l->grid[2], l->threads, 1, 1, l->smem,
                                    (CUstream)stream, params, NULL);
        }
    }
    if (push) cu->cuCtxPopCurrent(&popped);
    if (rc == CUDA_SUCCESS) return FG_OK;
    char what[96] = "cuCtxPushCurrent";
    if (failed)
        snprintf(what, sizeof what, "%s(%s)", failed->early ? "cuLaunchKernelEx" : "cuLaunchKernel", failed->kernel);
    return cuda_api_fail(err, rc, what, __FILE__, __LINE__);
}
