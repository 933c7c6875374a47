/* test_gpu_soak.c: concurrency soak on the GPU. Several host threads share one flashgen context, each on its
 * own stream, for a bounded time (FLASHGEN_SOAK_SECONDS, default 20): in turn forwards of seven head dims (40 to
 * 256), both masks and both 16-bit dtypes (and e4m3 on GPUs with FP8), backwards (five head-dim pairs, 192/128 among them, the deterministic
 * mode every other time) and decode steps of the serving call (split or not), so that some variants compile
 * while other threads launch, every output, LSE and gradient checked against the CPU references. Then several `flashgen run` processes share one fresh
 * disk cache, compiling the same new variants at once. Calls made and failures (which must be 0) are
 * logged. Skipped, saying why, without a GPU. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/dtype.h"
#include "reference/reference.h"
#include "tests/gpu_harness.h"

TestSuite(soak, .timeout = 600);

/* One thread's share: its stream, its tallies and the first failure it saw. */
typedef struct soak_worker {
    const fg_cuda_api *cu;
    CUcontext pctx;
    fg_context *ctx;
    int index;
    int fp8; /* the GPU runs FP8 (sm_89 and newer, not sm_87): some forwards are e4m3 */
    double seconds;
    long calls, failures;
    char first_failure[512];
} soak_worker;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Device and host copies of one contiguous [b, s, h, d] tensor. */
typedef struct soak_buf {
    fg_tensor dev, host;
    CUdeviceptr ptr;
    size_t bytes;
} soak_buf;

/* A view of `shape` with strides `stride` (contiguous when NULL) over `span` elements (the view's own count when
 * 0); the host copy's elements outside the view hold NaN bytes (all ones). */
static int buf_make_view(const fg_cuda_api *cu, soak_buf *b, fg_dtype dt, int ndim, const int64_t *shape,
                         const int64_t *stride, size_t span) {
    memset(b, 0, sizeof *b);
    b->dev.dtype = dt;
    b->dev.ndim = ndim;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) b->dev.shape[i] = shape[i], n *= (size_t)shape[i];
    if (stride) for (int i = 0; i < ndim; i++) b->dev.stride[i] = stride[i];
    else make_strides(ndim, shape, 0, b->dev.stride);
    b->bytes = (span ? span : n) * (size_t)dtype_size(dt);
    if (cu->cuMemAlloc(&b->ptr, b->bytes ? b->bytes : 256) != CUDA_SUCCESS) return -1;
    b->host = b->dev;
    b->host.data = malloc(b->bytes ? b->bytes : 1);
    b->dev.data = (void *)(uintptr_t)b->ptr;
    if (b->host.data) memset(b->host.data, 0xFF, b->bytes);
    return b->host.data ? 0 : -1;
}

static int buf_make(const fg_cuda_api *cu, soak_buf *b, fg_dtype dt, int ndim, const int64_t *shape) {
    return buf_make_view(cu, b, dt, ndim, shape, NULL, 0);
}

static void buf_free(const fg_cuda_api *cu, soak_buf *b) {
    if (b->ptr) cu->cuMemFree(b->ptr);
    free(b->host.data);
    memset(b, 0, sizeof *b);
}

/* Waits until this thread's uploads have landed. cuMemcpyHtoD from pageable memory may return once the bytes are
 * staged, before the copy reaches the device, and the copy runs in the legacy default stream, which the
 * workers' non-blocking streams do not wait for: without this a kernel can read an input mid-copy. */
static int uploads_done(soak_worker *w) { return w->cu->cuStreamSynchronize(NULL) == CUDA_SUCCESS ? 0 : -1; }

/* Judges O and the LSE of problem p against the CPU reference: 0 when they pass, else -1 with why saying what
 * (`what`, the case) failed. */
static int fwd_judged(const ref_problem *p, const soak_buf *o, const soak_buf *lse, const char *what, char *why,
                      size_t n) {
    ref_report r;
    fg_error e;
    if (ref_check_fwd(p, &o->host, &lse->host, &r, &e) != FG_OK) {
        snprintf(why, n, "%s: reference: %.400s", what, e.msg);
        return -1;
    }
    if (!r.pass) {
        char line[400];
        snprintf(why, n, "%s: %s", what, ref_report_format(&r, line, sizeof line));
        return -1;
    }
    return 0;
}

/* One checked forward on the worker's stream: the case is chosen from the call count; a fifth of the calls of a
 * worker on a GPU with FP8 (w->fp8) in e4m3 (V key-major, as FP8 takes it; O in bf16). 0 when it passed. */
static int soak_forward(soak_worker *w, CUstream stream, long k, char *why, size_t n) {
    static const int dims[] = {64, 128, 40, 96, 56, 256, 88}, fp8_dims[] = {64, 128, 96, 256};
    const int fp8 = w->fp8 && (k / 4) % 5 == 1; /* from a worker's 5th call on: a short soak reaches it */
    const int d = fp8 ? fp8_dims[(k / 4 + w->index) % 4] : dims[(k + w->index) % (int)(sizeof dims / sizeof dims[0])];
    const int causal = (int)(k % 2);
    const fg_dtype dt = fp8 ? FG_DTYPE_E4M3 : (k / 2) % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16;
    const fg_dtype odt = fp8 ? FG_DTYPE_BF16 : dt;
    const int64_t sq = 100 + 37 * (k % 5), sk = 150 + 53 * (k % 3), skp = (sk + 15) / 16 * 16;
    const int64_t qs[4] = {1, sq, 4, d}, ks[4] = {1, sk, 2, d}, ls[3] = {1, 4, sq};
    const int64_t vt[4] = {2 * d * skp, 1, d * skp, skp}; /* FP8's V: [b, hkv, d, skp] seen as [b, sk, hkv, d] */
    soak_buf q, kk, v, o, lse;
    memset(&v, 0, sizeof v);
    int rc = -1;
    if (buf_make(w->cu, &q, dt, 4, qs) || buf_make(w->cu, &kk, dt, 4, ks) ||
        (fp8 ? buf_make_view(w->cu, &v, dt, 4, ks, vt, (size_t)(2 * d * skp)) : buf_make(w->cu, &v, dt, 4, ks)) ||
        buf_make(w->cu, &o, odt, 4, qs) || buf_make(w->cu, &lse, FG_DTYPE_F32, 3, ls)) {
        snprintf(why, n, "out of memory for head_dim %d", d);
        goto done;
    }
    fg_error e;
    if (ref_fill_normal(&q.host, 11 + (uint64_t)k, &e) != FG_OK || ref_fill_normal(&kk.host, 12 + (uint64_t)k, &e) != FG_OK ||
        ref_fill_normal(&v.host, 13 + (uint64_t)k, &e) != FG_OK) {
        snprintf(why, n, "fill: %.400s", e.msg);
        goto done;
    }
    soak_buf *in[3] = {&q, &kk, &v};
    for (int i = 0; i < 3; i++)
        if (w->cu->cuMemcpyHtoD(in[i]->ptr, in[i]->host.data, in[i]->bytes) != CUDA_SUCCESS) goto done;
    if (uploads_done(w)) goto done;
    fg_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = q.dev, a.k = kk.dev, a.v = v.dev, a.o = o.dev, a.lse = lse.dev, a.causal = causal;
    fg_spec chosen; /* the variant dispatch takes, for what the reference must model (FP8's rounded sum) */
    fg_error_clear(&e);
    if (rt_fwd_spec(w->ctx, &a, &chosen, &e) != FG_OK) {
        snprintf(why, n, "head_dim %d %s: %.400s", d, fp8 ? "e4m3" : "", e.msg);
        goto done;
    }
    if (fg_attention_fwd(w->ctx, &a, stream) != FG_OK) {
        snprintf(why, n, "head_dim %d: %s", d, fg_last_error(w->ctx));
        goto done;
    }
    if (w->cu->cuStreamSynchronize(stream) != CUDA_SUCCESS ||
        w->cu->cuMemcpyDtoH(o.host.data, o.ptr, o.bytes) != CUDA_SUCCESS ||
        w->cu->cuMemcpyDtoH(lse.host.data, lse.ptr, lse.bytes) != CUDA_SUCCESS) {
        snprintf(why, n, "head_dim %d: a driver call failed after the launch", d);
        goto done;
    }
    ref_problem p;
    memset(&p, 0, sizeof p);
    p.q = q.host, p.k = kk.host, p.v = v.host, p.causal = causal;
    p.out_dtype = odt, p.fp8_sum_rounded = spec_fp8_sum_rounded(&chosen);
    char what[128];
    snprintf(what, sizeof what, "%s head_dim %d causal %d sq %lld sk %lld", fp8 ? "e4m3" : dtype_name(dt), d, causal,
             (long long)sq, (long long)sk);
    if (fwd_judged(&p, &o, &lse, what, why, n)) goto done;
    rc = 0;
done:
    buf_free(w->cu, &q), buf_free(w->cu, &kk), buf_free(w->cu, &v), buf_free(w->cu, &o), buf_free(w->cu, &lse);
    return rc;
}

/* Uploads fresh N(0, 1) values into b (host and device). 0 when it worked. */
static int buf_fill(soak_worker *w, soak_buf *b, uint64_t seed, char *why, size_t n) {
    fg_error e;
    if (ref_fill_normal(&b->host, seed, &e) != FG_OK) {
        snprintf(why, n, "fill: %.400s", e.msg);
        return -1;
    }
    return w->cu->cuMemcpyHtoD(b->ptr, b->host.data, b->bytes) == CUDA_SUCCESS ? 0 : -1;
}

static int buf_download(soak_worker *w, soak_buf *b) {
    return w->cu->cuMemcpyDtoH(b->host.data, b->ptr, b->bytes) == CUDA_SUCCESS ? 0 : -1;
}

/* One checked backward: a forward (its O and LSE), then fg_attention_bwd with its workspace, the gradients
 * judged against the CPU references; V of Q's head dim or of its own (192/128). 0 when it passed. */
static int soak_backward(soak_worker *w, CUstream stream, long k, char *why, size_t n) {
    static const int dims[][2] = {{64, 64}, {128, 128}, {72, 72}, {192, 128}, {96, 96}};
    const int pick = (int)((k / 4 + w->index) % (long)(sizeof dims / sizeof dims[0]));
    const int d = dims[pick][0], dv = dims[pick][1], causal = (int)((k / 4) % 2);
    const fg_dtype dt = (k / 8) % 2 ? FG_DTYPE_F16 : FG_DTYPE_BF16;
    const int64_t sq = 90 + 29 * (k % 3), sk = 120 + 41 * (k % 4);
    const int64_t qs[4] = {1, sq, 4, d}, ks[4] = {1, sk, 2, d}, vs[4] = {1, sk, 2, dv}, os[4] = {1, sq, 4, dv},
                  ls[3] = {1, 4, sq};
    soak_buf q, kk, v, o, lse, dout, dq, dk, dvv;
    memset(&q, 0, sizeof q), memset(&kk, 0, sizeof kk), memset(&v, 0, sizeof v), memset(&o, 0, sizeof o);
    memset(&lse, 0, sizeof lse), memset(&dout, 0, sizeof dout), memset(&dq, 0, sizeof dq), memset(&dk, 0, sizeof dk);
    memset(&dvv, 0, sizeof dvv);
    CUdeviceptr ws = 0;
    int rc = -1;
    if (buf_make(w->cu, &q, dt, 4, qs) || buf_make(w->cu, &kk, dt, 4, ks) || buf_make(w->cu, &v, dt, 4, vs) ||
        buf_make(w->cu, &o, dt, 4, os) || buf_make(w->cu, &lse, FG_DTYPE_F32, 3, ls) ||
        buf_make(w->cu, &dout, dt, 4, os) || buf_make(w->cu, &dq, dt, 4, qs) || buf_make(w->cu, &dk, dt, 4, ks) ||
        buf_make(w->cu, &dvv, dt, 4, vs)) {
        snprintf(why, n, "out of memory for the backward at %d/%d", d, dv);
        goto done;
    }
    if (buf_fill(w, &q, 21 + (uint64_t)k, why, n) || buf_fill(w, &kk, 22 + (uint64_t)k, why, n) ||
        buf_fill(w, &v, 23 + (uint64_t)k, why, n) || buf_fill(w, &dout, 24 + (uint64_t)k, why, n) || uploads_done(w))
        goto done;
    /* O and the LSE from the serving call on the dense tensors (it takes V of its own head dim) */
    fg_varlen_args f;
    fg_varlen_args_init(&f);
    f.q = q.dev, f.k = kk.dev, f.v = v.dev, f.o = o.dev, f.lse = lse.dev, f.causal = causal, f.num_splits = 1;
    if (fg_attention_fwd_varlen(w->ctx, &f, stream) != FG_OK) {
        snprintf(why, n, "backward's forward at %d/%d: %s", d, dv, fg_last_error(w->ctx));
        goto done;
    }
    fg_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = q.dev, a.k = kk.dev, a.v = v.dev, a.o = o.dev, a.dout = dout.dev, a.lse = lse.dev;
    a.dq = dq.dev, a.dk = dk.dev, a.dv = dvv.dev, a.causal = causal, a.deterministic = (int)((k / 16) % 2);
    size_t bytes = 0;
    if (fg_attention_bwd_workspace_size(w->ctx, &a, &bytes) != FG_OK || w->cu->cuMemAlloc(&ws, bytes ? bytes : 256) != CUDA_SUCCESS) {
        snprintf(why, n, "backward workspace at %d/%d: %s", d, dv, fg_last_error(w->ctx));
        goto done;
    }
    a.workspace = (void *)(uintptr_t)ws, a.workspace_size = bytes;
    if (fg_attention_bwd(w->ctx, &a, stream) != FG_OK) {
        snprintf(why, n, "backward at %d/%d: %s", d, dv, fg_last_error(w->ctx));
        goto done;
    }
    if (w->cu->cuStreamSynchronize(stream) != CUDA_SUCCESS || buf_download(w, &o) || buf_download(w, &lse) ||
        buf_download(w, &dq) || buf_download(w, &dk) || buf_download(w, &dvv)) {
        snprintf(why, n, "backward at %d/%d: a driver call failed after the launch", d, dv);
        goto done;
    }
    ref_problem fp; /* the forward first: the backward's check takes its O and LSE as given */
    memset(&fp, 0, sizeof fp);
    fp.q = q.host, fp.k = kk.host, fp.v = v.host, fp.causal = causal;
    char what[128];
    snprintf(what, sizeof what, "backward's forward %d/%d causal %d", d, dv, causal);
    if (fwd_judged(&fp, &o, &lse, what, why, n)) goto done;
    fg_error e;
    ref_bwd_problem p;
    memset(&p, 0, sizeof p);
    p.fwd.q = q.host, p.fwd.k = kk.host, p.fwd.v = v.host, p.fwd.causal = causal;
    p.o = o.host, p.d_o = dout.host, p.lse = lse.host;
    ref_bwd_report r;
    if (ref_check_bwd(&p, &dq.host, &dk.host, &dvv.host, &r, &e) != FG_OK) {
        snprintf(why, n, "backward reference: %.400s", e.msg);
        goto done;
    }
    if (!r.pass) {
        char line[400];
        snprintf(why, n, "backward %d/%d causal %d deterministic %d: %s", d, dv, causal, a.deterministic,
                 ref_bwd_report_format(&r, line, sizeof line));
        goto done;
    }
    rc = 0;
done:
    if (ws) w->cu->cuMemFree(ws);
    soak_buf *all[9] = {&q, &kk, &v, &o, &lse, &dout, &dq, &dk, &dvv};
    for (int i = 0; i < 9; i++) buf_free(w->cu, all[i]);
    return rc;
}

/* One checked decode step on a dense cache (fg_attention_fwd_varlen): three sequences of 700, 1 and 333 keys
 * in a 700-key cache (seqused_k), one query token each, 8 query heads on 2 KV heads, keys split as the call
 * chooses or into 3; each sequence's O and LSE judged against the reference on its own keys. 0 when it passed. */
static int soak_decode(soak_worker *w, CUstream stream, long k, char *why, size_t n) {
    static const int dims[] = {128, 64, 256};
    const int d = dims[(k / 4 + w->index) % 3];
    const int32_t lens[3] = {700, 1, 333};
    const int64_t qs[4] = {3, 1, 8, d}, ks[4] = {3, 700, 2, d}, ls[3] = {3, 8, 1};
    soak_buf q, kk, v, o, lse;
    memset(&q, 0, sizeof q), memset(&kk, 0, sizeof kk), memset(&v, 0, sizeof v), memset(&o, 0, sizeof o);
    memset(&lse, 0, sizeof lse);
    CUdeviceptr used = 0, ws = 0;
    int rc = -1;
    if (buf_make(w->cu, &q, FG_DTYPE_BF16, 4, qs) || buf_make(w->cu, &kk, FG_DTYPE_BF16, 4, ks) ||
        buf_make(w->cu, &v, FG_DTYPE_BF16, 4, ks) || buf_make(w->cu, &o, FG_DTYPE_BF16, 4, qs) ||
        buf_make(w->cu, &lse, FG_DTYPE_F32, 3, ls) || w->cu->cuMemAlloc(&used, sizeof lens) != CUDA_SUCCESS ||
        w->cu->cuMemcpyHtoD(used, lens, sizeof lens) != CUDA_SUCCESS) {
        snprintf(why, n, "out of memory for a decode at head_dim %d", d);
        goto done;
    }
    if (buf_fill(w, &q, 31 + (uint64_t)k, why, n) || buf_fill(w, &kk, 32 + (uint64_t)k, why, n) ||
        buf_fill(w, &v, 33 + (uint64_t)k, why, n) || uploads_done(w))
        goto done;
    fg_varlen_args a;
    fg_varlen_args_init(&a);
    a.q = q.dev, a.k = kk.dev, a.v = v.dev, a.o = o.dev, a.lse = lse.dev;
    a.seqused_k = (const int32_t *)(uintptr_t)used, a.num_splits = k % 8 < 4 ? 0 : 3;
    size_t bytes = 0;
    if (fg_attention_fwd_varlen_workspace_size(w->ctx, &a, &bytes) != FG_OK ||
        w->cu->cuMemAlloc(&ws, bytes ? bytes : 256) != CUDA_SUCCESS) {
        snprintf(why, n, "decode workspace at head_dim %d: %s", d, fg_last_error(w->ctx));
        goto done;
    }
    a.workspace = (void *)(uintptr_t)ws, a.workspace_size = bytes;
    if (fg_attention_fwd_varlen(w->ctx, &a, stream) != FG_OK) {
        snprintf(why, n, "decode at head_dim %d: %s", d, fg_last_error(w->ctx));
        goto done;
    }
    if (w->cu->cuStreamSynchronize(stream) != CUDA_SUCCESS || buf_download(w, &o) || buf_download(w, &lse)) {
        snprintf(why, n, "decode at head_dim %d: a driver call failed after the launch", d);
        goto done;
    }
    for (int b = 0; b < 3; b++) { /* sequence b alone: its query, its first lens[b] keys, its O and LSE rows */
        ref_problem p;
        memset(&p, 0, sizeof p);
        p.q = q.host, p.k = kk.host, p.v = v.host;
        fg_tensor oo = o.host, ll = lse.host;
        fg_tensor *t[5] = {&p.q, &p.k, &p.v, &oo, &ll};
        for (int i = 0; i < 5; i++) {
            t[i]->data = (char *)t[i]->data + (size_t)b * (size_t)t[i]->stride[0] * (i == 4 ? 4 : 2);
            t[i]->shape[0] = 1;
        }
        p.k.shape[1] = p.v.shape[1] = lens[b];
        ref_report r;
        fg_error e;
        if (ref_check_fwd(&p, &oo, &ll, &r, &e) != FG_OK) {
            snprintf(why, n, "decode reference: %.400s", e.msg);
            goto done;
        }
        if (!r.pass) {
            char line[400];
            snprintf(why, n, "decode head_dim %d sequence %d (%d keys, num_splits %d): %s", d, b, lens[b], a.num_splits,
                     ref_report_format(&r, line, sizeof line));
            goto done;
        }
    }
    rc = 0;
done:
    if (ws) w->cu->cuMemFree(ws);
    if (used) w->cu->cuMemFree(used);
    buf_free(w->cu, &q), buf_free(w->cu, &kk), buf_free(w->cu, &v), buf_free(w->cu, &o), buf_free(w->cu, &lse);
    return rc;
}

static void *soak_thread(void *arg) {
    soak_worker *w = arg;
    CUstream stream = NULL;
    if (w->cu->cuCtxPushCurrent(w->pctx) != CUDA_SUCCESS || w->cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        w->failures++;
        snprintf(w->first_failure, sizeof w->first_failure, "thread %d: no stream", w->index);
        return NULL;
    }
    const double end = now_seconds() + w->seconds;
    for (long k = 0; now_seconds() < end; k++) {
        char why[512] = "";
        w->calls++;
        /* forwards, a backward and a decode step in turn: variants of each kind compile while others run */
        const int kind = (int)((k + w->index) % 4);
        const int failed = kind == 2 ? soak_backward(w, stream, k, why, sizeof why)
                         : kind == 3 ? soak_decode(w, stream, k, why, sizeof why)
                                     : soak_forward(w, stream, k, why, sizeof why);
        if (failed != 0 && w->failures++ == 0)
            snprintf(w->first_failure, sizeof w->first_failure, "thread %d call %ld: %s", w->index, k, why);
    }
    w->cu->cuStreamDestroy(stream);
    CUcontext popped;
    w->cu->cuCtxPopCurrent(&popped);
    return NULL;
}

static double soak_seconds(void) {
    const char *s = getenv("FLASHGEN_SOAK_SECONDS");
    const double v = s ? atof(s) : 20.0;
    return v > 0 ? v : 20.0;
}

Test(soak, threads_share_one_context) {
    gpu_env env;
    gpu_open(&env);
    enum { THREADS = 4 };
    soak_worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].cu = env.cu, w[i].pctx = env.pctx, w[i].ctx = env.ctx, w[i].index = i, w[i].seconds = soak_seconds();
        w[i].fp8 = gpu_cc(&env) >= 89 && gpu_cc(&env) != 87;
        cr_assert_eq(pthread_create(&t[i], NULL, soak_thread, &w[i]), 0);
    }
    long calls = 0, failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        calls += w[i].calls, failures += w[i].failures;
    }
    cr_log_info("soak: %d threads, one context, %.0f s: %ld calls checked, %ld failures", THREADS, soak_seconds(), calls,
                failures);
    for (int i = 0; i < THREADS; i++) cr_assert_eq(w[i].failures, 0, "%s", w[i].first_failure);
    cr_assert_gt(calls, THREADS, "the soak made almost no calls");
    gpu_close(&env);
}

/* Several processes on one fresh disk cache compile and run the same new variants at once (`flashgen run`, which
 * checks every element against the CPU reference; separate programs, since a process that has initialized CUDA
 * cannot fork children that use it): every run is right, and every entry left in the cache verifies. */
Test(soak, processes_share_one_disk_cache) {
    gpu_env env;
    gpu_open(&env); /* skips without a GPU */
    char dir[64];
    cr_assert_eq(make_temp_dir(dir, sizeof dir), 0);
    enum { PROCS = 6 };
    static const char *const dims[3] = {"72", "104", "40"};
    pid_t kids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0) {
            setenv("FLASHGEN_CACHE_DIR", dir, 1);
            execl("build/flashgen", "flashgen", "run", "--batch", "1", "--seqlen-q", "300", "--seqlen-k", "257", "--heads",
                  "4", "--heads-kv", "2", "--head-dim", dims[i % 3], "--causal", "--iters", "1", (char *)NULL);
            _exit(127);
        }
    }
    int bad = 0;
    for (int i = 0; i < PROCS; i++) {
        int status = 0;
        waitpid(kids[i], &status, 0);
        bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    char cmd[160];
    snprintf(cmd, sizeof cmd, "build/flashgen cache verify --dir %s >/dev/null", dir);
    const int verify = system(cmd);
    cr_log_info("soak: %d processes compiling 3 new variants into one disk cache at once: %d failed; cache verify %s",
                PROCS, bad, verify == 0 ? "clean" : "FAILED");
    cr_assert_eq(bad, 0, "%d of %d `flashgen run` processes failed", bad, PROCS);
    cr_assert_eq(verify, 0, "the shared cache has entries that do not verify");
    remove_tree(dir);
    gpu_close(&env);
}
