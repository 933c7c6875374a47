/* timing.h: the one loop that times GPU launches (`flashgen run`, the tune sweep, `fgbench speed`) and
 * the monotonic clock. Launches go through a callback, so the loop knows nothing of what it times. */
#ifndef FG_TIMING_H
#define FG_TIMING_H

#include "runtime/cuda_api.h"
#include "core/error.h"

/* Launches the i-th launch of a timing (i counts warm-up launches too); fills err on failure. */
typedef fg_status (*launch_fn)(void *user, int i, fg_error *err);

/* What time_launches measured, in milliseconds per launch. */
typedef struct launch_times {
    double median;  /* the median interval */
    double min;     /* the fastest */
    double max;     /* the slowest */
} launch_times;

/* Seconds on the monotonic clock. */
double now_seconds(void);

/* Calls launch `warmup` times, then `iters` times (iters >= 1) with a CUDA event recorded on `stream`
 * before the first and after each one: each interval is one launch, and their median is robust to the odd
 * slow launch (clock ramp, another process). Waits for the last event; creates and destroys its events.
 * The median, min and max go into *t. Returns launch's failure, FG_ERR_CUDA naming the event call, or
 * FG_ERR_NO_MEMORY; the stream may still hold work after a failure. */
fg_status time_launches(const fg_cuda_api *cu, CUstream stream, int warmup, int iters, launch_fn launch, void *user,
                        launch_times *t, fg_error *err);

#endif
