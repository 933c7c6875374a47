/* timing.c: the GPU timing loop and the clock every measurement of flashgen uses (see timing.h). */
#include <stdlib.h>
#include <time.h>
#include "autotune/timing.h"
#include "core/alloc.h"

double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Compares floats for qsort. */
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* time_launches: see timing.h. */
fg_status time_launches(const fg_cuda_api *cu, CUstream stream, int warmup, int iters, launch_fn launch,
                        void *user, launch_times *t, fg_error *err) {
    t->median = t->min = t->max = 0;
    CUevent *ev = fg_calloc((size_t)iters + 1, sizeof *ev);
    float *ms = fg_malloc((size_t)iters * sizeof *ms);
    int nev = 0;
    fg_status st = FG_OK;
    CUresult rc = CUDA_SUCCESS;
    const char *call = "";
    if (!ev || !ms) {
        st = fg_fail(err, FG_ERR_NO_MEMORY, "out of memory for %d timing events", iters);
        goto done;
    }
    for (; nev <= iters; nev++)
        if ((rc = cu->cuEventCreate(&ev[nev], CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
            call = "cuEventCreate";
            goto cuda_failed;
        }
    for (int i = 0; i < warmup; i++)
        if ((st = launch(user, i, err)) != FG_OK) goto done;
    if ((rc = cu->cuEventRecord(ev[0], stream)) != CUDA_SUCCESS) {
        call = "cuEventRecord";
        goto cuda_failed;
    }
    for (int i = 0; i < iters; i++) {
        if ((st = launch(user, warmup + i, err)) != FG_OK) goto done;
        if ((rc = cu->cuEventRecord(ev[i + 1], stream)) != CUDA_SUCCESS) {
            call = "cuEventRecord";
            goto cuda_failed;
        }
    }
    if ((rc = cu->cuEventSynchronize(ev[iters])) != CUDA_SUCCESS) {
        call = "cuEventSynchronize (waiting for the timed launches)";
        goto cuda_failed;
    }
    for (int i = 0; i < iters; i++)
        if ((rc = cu->cuEventElapsedTime(&ms[i], ev[i], ev[i + 1])) != CUDA_SUCCESS) {
            call = "cuEventElapsedTime";
            goto cuda_failed;
        }
    qsort(ms, (size_t)iters, sizeof *ms, cmp_float);
    t->median = iters % 2 ? ms[iters / 2] : 0.5 * ((double)ms[iters / 2 - 1] + (double)ms[iters / 2]);
    t->min = ms[0];
    t->max = ms[iters - 1];
    goto done;
cuda_failed:
    st = cuda_api_fail(err, rc, call, __FILE__, __LINE__);
done:
    for (int i = 0; i < nev; i++) cu->cuEventDestroy(ev[i]);
    free(ev);
    free(ms);
    return st;
}

