/* reference.c: the CPU reference of the attention forward and backward passes (see reference.h; the
 * backward pass is the last section).
 * Everything is computed in double from inputs upcast exactly; work is split over (batch, head, block of
 * query rows) units so that one head with millions of rows still uses every core. Each worker upcasts
 * the K/V head its unit reads once (as float, which holds fp16/bf16 exactly) and reuses it while
 * consecutive units share that head. All memory is allocated before the threads start, so workers
 * cannot fail. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "reference/reference.h"

/* ------------------------------------------------------------------------------------------------ */
/* Conversions                                                                                       */
/* ------------------------------------------------------------------------------------------------ */

/* The bits of f, and the float with bits u, without aliasing tricks. */
static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* See float_bits. */
static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Contract in reference.h. */
float ref_f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    if (exp == 0x1F) /* Inf, or NaN with its payload kept in the top mantissa bits */
        return bits_float(sign | 0x7F800000u | (man << 13));
    if (exp == 0) { /* zero or subnormal: man * 2^-24 is exact in float */
        float mag = (float)man * 0x1p-24f;
        return sign ? -mag : mag;
    }
    return bits_float(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

/* Contract in reference.h. */
uint16_t ref_float_to_f16(float f) {
    uint32_t u = float_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) /* NaN: keep the payload's top bits, force the quiet bit so it stays a NaN */
        return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) /* >= 65520, the midpoint between 65504 and 2^16, rounds (to even) to Inf */
        return (uint16_t)(sign | 0x7C00u);
    if (a >= 0x38800000u) { /* normal in fp16 (>= 2^-14): drop 13 bits, rebias, round half to even */
        uint32_t h = (a >> 13) - ((127u - 15u) << 10);
        uint32_t rest = a & 0x1FFFu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h++; /* a carry out of the mantissa correctly bumps the exponent */
        return (uint16_t)(sign | h);
    }
    /* Subnormal or zero in fp16: the result is round(|f| * 2^24) as an integer mantissa. */
    uint32_t e = a >> 23;
    if (e < 102) /* |f| < 2^-25 (half the smallest subnormal): rounds to zero, ties impossible here */
        return sign;
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u; /* |f| = m * 2^(e-150) */
    uint32_t shift = 126u - e;                  /* |f| * 2^24 = m >> shift, shift in [14, 24] */
    uint32_t h = m >> shift;
    uint32_t rest = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (h & 1u)))
        h++; /* may reach 0x400, which is the smallest normal: still the right encoding */
    return (uint16_t)(sign | h);
}

/* Contract in reference.h. */
float ref_bf16_to_float(uint16_t h) {
    return bits_float((uint32_t)h << 16);
}

/* Contract in reference.h. */
uint16_t ref_float_to_bf16(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: truncation could clear the payload, so force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Round half to even on the low 16 bits; overflow carries into the exponent and reaches Inf exactly
     * when it should (the largest finite bf16's upper midpoint and above). */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Contract in reference.h. */
float ref_e4m3_to_float(uint8_t b) {
    int e = (b >> 3) & 0xF, m = b & 7;
    float mag;
    if (e == 15 && m == 7)
        return (b & 0x80) ? -NAN : NAN;
    if (e == 0) /* subnormal: m * 2^-9 */
        mag = ldexpf((float)m, -9);
    else /* (1 + m/8) * 2^(e - 7) */
        mag = ldexpf((float)(8 + m), e - 10);
    return (b & 0x80) ? -mag : mag;
}

/* Contract in reference.h. */
float ref_e5m2_to_float(uint8_t b) {
    int e = (b >> 2) & 0x1F, m = b & 3;
    float mag;
    if (e == 31)
        mag = m == 0 ? INFINITY : NAN;
    else if (e == 0) /* subnormal: m * 2^-16 */
        mag = ldexpf((float)m, -16);
    else /* (1 + m/4) * 2^(e - 15) */
        mag = ldexpf((float)(4 + m), e - 17);
    return (b & 0x80) ? -mag : mag;
}

/* Rounds a (finite, > 0) to a format with `mbits` mantissa bits and exponent bias `bias`, to nearest with
 * ties to even, and returns the code's magnitude bits, exponent field << mbits | mantissa. Past the
 * format's top binade the exponent field simply keeps growing: the caller decides what overflow means. */
static uint32_t fp8_round(float a, int mbits, int bias) {
    int e2;
    frexpf(a, &e2);                  /* a = f * 2^e2 with f in [0.5, 1): a's binade is 2^(e2 - 1) */
    int ue = e2 - 1, emin = 1 - bias;
    if (ue < emin)
        ue = emin;                   /* subnormal range: the quantum stays 2^(emin - mbits) */
    double q = ldexp((double)a, mbits - ue); /* a over the quantum: exact (24 bits in a double) */
    double fl = floor(q), frac = q - fl;
    uint32_t r = (uint32_t)fl;
    if (frac > 0.5 || (frac == 0.5 && (r & 1u)))
        r++;
    if (r == 0)
        return 0;
    if (r >= (2u << mbits)) {        /* rounded up into the next binade: mantissa 0, exponent + 1 */
        r >>= 1;
        ue++;
    }
    if (r < (1u << mbits))           /* still subnormal: exponent field 0 */
        return r;
    return ((uint32_t)(ue + bias) << mbits) | (r - (1u << mbits));
}

/* Encodes f in an FP8 format with mbits mantissa bits and exponent bias `bias`, rounding to nearest
 * even; a magnitude past the largest finite code max_code (or an infinity) becomes max_code when
 * saturating, else overflow_code (NaN for e4m3, Inf for e5m2); NaN becomes S.1111111. */
static uint8_t fp8_encode(float f, int saturate, int mbits, int bias, uint32_t max_code, uint32_t overflow_code) {
    uint8_t sign = signbit(f) ? 0x80 : 0;
    if (isnan(f))
        return sign | 0x7F;
    float a = fabsf(f);
    if (a == 0.0f)
        return sign;
    uint32_t code = isinf(a) ? max_code + 1 : fp8_round(a, mbits, bias);
    if (code > max_code)
        return sign | (uint8_t)(saturate ? max_code : overflow_code);
    return sign | (uint8_t)code;
}

/* Contract in reference.h. Past 448 (S.1111.110) e4m3 has no Inf, and S.1111.111 is NaN. */
uint8_t ref_float_to_e4m3(float f, int saturate) { return fp8_encode(f, saturate, 3, 7, 0x7Eu, 0x7Fu); }

/* Contract in reference.h. Past 57344 (S.11110.11): Inf (S.11111.00), or the largest finite value. */
uint8_t ref_float_to_e5m2(float f, int saturate) { return fp8_encode(f, saturate, 2, 15, 0x7Bu, 0x7Cu); }

/* Contract in reference.h. */
float ref_to_float(fg_dtype dtype, uint16_t bits) {
    if (dtype == FG_DTYPE_F16)
        return ref_f16_to_float(bits);
    if (dtype == FG_DTYPE_BF16)
        return ref_bf16_to_float(bits);
    if (dtype == FG_DTYPE_E4M3)
        return ref_e4m3_to_float((uint8_t)bits);
    if (dtype == FG_DTYPE_E5M2)
        return ref_e5m2_to_float((uint8_t)bits);
    return NAN;
}

/* Contract in reference.h. */
uint16_t ref_from_float(fg_dtype dtype, float f) {
    if (dtype == FG_DTYPE_F16)
        return ref_float_to_f16(f);
    if (dtype == FG_DTYPE_BF16)
        return ref_float_to_bf16(f);
    if (dtype == FG_DTYPE_E4M3)
        return ref_float_to_e4m3(f, 0);
    if (dtype == FG_DTYPE_E5M2)
        return ref_float_to_e5m2(f, 0);
    return 0;
}

/* 1 for the FP8 dtypes. */
static int is_fp8(fg_dtype dtype) {
    return dtype == FG_DTYPE_E4M3 || dtype == FG_DTYPE_E5M2;
}

/* fp16 and fp8 -> float by table in the hot loops (the branchy decode dominated the reference's profile). */
static float f16_table[65536];                       /* ref_f16_to_float of every pattern */
static float e4m3_table[256];                        /* ref_e4m3_to_float of every pattern */
static float e5m2_table[256];                        /* ref_e5m2_to_float of every pattern */
static pthread_once_t f16_table_once = PTHREAD_ONCE_INIT; /* fills them once per process */

/* pthread_once body: decodes every fp16 and fp8 pattern into the tables. */
static void f16_table_fill(void) {
    for (uint32_t u = 0; u < 65536u; u++)
        f16_table[u] = ref_f16_to_float((uint16_t)u);
    for (uint32_t u = 0; u < 256u; u++) {
        e4m3_table[u] = ref_e4m3_to_float((uint8_t)u);
        e5m2_table[u] = ref_e5m2_to_float((uint8_t)u);
    }
}

/* ref_to_float for F16/BF16 once f16_table is filled (job_init makes sure of it). */
static inline float fast_to_float(fg_dtype dtype, uint16_t bits) {
    return dtype == FG_DTYPE_F16 ? f16_table[bits] : ref_bf16_to_float(bits);
}

/* Rounds x to dtype (F16 or BF16; through float, as the kernel rounds its fp32 values) and back. */
static double round_to(fg_dtype dtype, double x) {
    return fast_to_float(dtype, ref_from_float(dtype, (float)x));
}

/* Rounds x to e4m3 through float, saturating (the FP8 kernel's P), and back; tables filled. */
static double round_to_e4m3(double x) {
    return e4m3_table[ref_float_to_e4m3((float)x, 1)];
}

/* Element [i0, i1, i2, i3] of a host view of dtype dt (F16, BF16, E4M3, E5M2) as a float; tables filled. */
static inline float elem_float(fg_dtype dt, const fg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int64_t off = i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3];
    if (dt == FG_DTYPE_E4M3)
        return e4m3_table[((const uint8_t *)t->data)[off]];
    if (dt == FG_DTYPE_E5M2)
        return e5m2_table[((const uint8_t *)t->data)[off]];
    return fast_to_float(dt, ((const uint16_t *)t->data)[off]);
}

/* The descale factor of (batch b, KV head h) in a host view t (data NULL: 1; [1]: its one value). */
static double descale_at(const fg_tensor *t, int64_t b, int64_t h) {
    if (!t->data)
        return 1.0;
    const float *d = t->data;
    return t->ndim == 2 ? (double)d[b * t->stride[0] + h * t->stride[1]] : (double)d[0];
}

/* ------------------------------------------------------------------------------------------------ */
/* Threads                                                                                           */
/* ------------------------------------------------------------------------------------------------ */

typedef void (*unit_fn)(void *job, int tid, int64_t unit);

typedef struct pool {
    void *job;             /* passed to fn */
    unit_fn fn;            /* processes one unit */
    int64_t units;         /* units 0 .. units-1 */
    _Atomic int64_t next;  /* next unit to hand out: dynamic scheduling evens out causal rows */
} pool;

typedef struct worker {
    pool *pl;       /* shared queue */
    int tid;        /* index of this worker's scratch */
    pthread_t th;   /* its thread (unused for tid 0, the caller) */
    int started;    /* 1 when th was created */
} worker;

/* A thread's body: takes units from the shared counter until none is left. */
static void *worker_main(void *arg) {
    worker *w = arg;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&w->pl->next, 1, memory_order_relaxed);
        if (u >= w->pl->units)
            break;
        w->pl->fn(w->pl->job, w->tid, u);
    }
    return NULL;
}

/* How many threads to use for `units` units: every online core, at most one per unit. */
static int thread_count(int64_t units) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 512)
        n = 512;
    if (units < n)
        n = units < 1 ? 1 : (long)units;
    return (int)n;
}

/* Runs fn over all units on up to nthreads threads (the caller is one of them, with tid 0). A thread that
 * cannot be created is simply not used: the others drain the queue. Returns after every unit is done. */
static void run_parallel(void *job, unit_fn fn, int64_t units, int nthreads) {
    pool pl = {job, fn, units, 0};
    worker stack_workers[64];
    worker *w = stack_workers;
    if (nthreads > 64) {
        w = calloc((size_t)nthreads, sizeof *w);
        if (!w) {
            w = stack_workers;
            nthreads = 64;
        }
    }
    for (int i = 0; i < nthreads; i++) {
        w[i].pl = &pl;
        w[i].tid = i;
        w[i].started = 0;
    }
    for (int i = 1; i < nthreads; i++)
        w[i].started = pthread_create(&w[i].th, NULL, worker_main, &w[i]) == 0;
    worker_main(&w[0]);
    for (int i = 1; i < nthreads; i++)
        if (w[i].started)
            pthread_join(w[i].th, NULL);
    if (w != stack_workers)
        free(w);
}

/* ------------------------------------------------------------------------------------------------ */
/* Argument checks                                                                                   */
/* ------------------------------------------------------------------------------------------------ */

/* The number of elements in t's view (0 when any size is 0). */
static int64_t elements(const fg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* Checks that t is a host view of `ndim` dims with non-negative sizes and data unless empty. */
static fg_status check_view(const fg_tensor *t, const char *name, int ndim, fg_error *err) {
    if (t->ndim != ndim)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.ndim is %d, expected %d", name, t->ndim,
                       ndim);
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] < 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.shape[%d] is %lld, sizes must be >= 0",
                           name, i, (long long)t->shape[i]);
    if (!t->data && elements(t) > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.data is NULL", name);
    return FG_OK;
}

/* Checks that p describes a consistent problem (dims, sizes, dtypes, GQA divisibility); names the
 * offending field in err. */
static fg_status check_problem(const ref_problem *p, fg_error *err) {
    if (!p)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the problem is NULL");
    fg_status st;
    if ((st = check_view(&p->q, "q", 4, err)) || (st = check_view(&p->k, "k", 4, err)) ||
        (st = check_view(&p->v, "v", 4, err)))
        return st;
    if (p->q.dtype != FG_DTYPE_F16 && p->q.dtype != FG_DTYPE_BF16 && !is_fp8(p->q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: q.dtype must be F16, BF16, E4M3 or E5M2");
    if (p->k.dtype != p->q.dtype || p->v.dtype != p->q.dtype)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: k and v must have q's dtype");
    if (is_fp8(p->q.dtype) && p->out_dtype != FG_DTYPE_F16 && p->out_dtype != FG_DTYPE_BF16)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out_dtype must be F16 or BF16 for fp8 inputs");
    const fg_tensor *ds[3] = {&p->q_descale, &p->k_descale, &p->v_descale};
    static const char *const dnames[3] = {"q_descale", "k_descale", "v_descale"};
    for (int i = 0; i < 3; i++) {
        const fg_tensor *t = ds[i];
        if (!t->data)
            continue;
        if (!is_fp8(p->q.dtype))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s is for fp8 inputs only", dnames[i]);
        int ok_shape = (t->ndim == 1 && t->shape[0] == 1) ||
                       (t->ndim == 2 && t->shape[0] == p->q.shape[0] && t->shape[1] == p->k.shape[2]);
        if (t->dtype != FG_DTYPE_F32 || !ok_shape)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "reference: %s must be F32 of shape [1] or [batch, heads_kv] = [%lld, %lld]", dnames[i],
                           (long long)p->q.shape[0], (long long)p->k.shape[2]);
    }
    for (int i = 0; i < 4; i++)
        if (p->k.shape[i] != p->v.shape[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: k.shape[%d] (%lld) != v.shape[%d] (%lld)",
                           i, (long long)p->k.shape[i], i, (long long)p->v.shape[i]);
    if (p->k.shape[0] != p->q.shape[0])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: k's batch (%lld) != q's batch (%lld)",
                       (long long)p->k.shape[0], (long long)p->q.shape[0]);
    if (p->k.shape[3] != p->q.shape[3])
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: k's head_dim (%lld) != q's head_dim (%lld)",
                       (long long)p->k.shape[3], (long long)p->q.shape[3]);
    if (p->q.shape[3] < 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: head_dim must be >= 1");
    if (p->q.shape[2] < 1 || p->k.shape[2] < 1 || p->q.shape[2] % p->k.shape[2] != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "reference: k's heads (%lld) must be >= 1 and divide q's heads (%lld)",
                       (long long)p->k.shape[2], (long long)p->q.shape[2]);
    return FG_OK;
}

/* ------------------------------------------------------------------------------------------------ */
/* The forward pass, one query row at a time                                                          */
/* ------------------------------------------------------------------------------------------------ */

/* What a check found so far in one output tensor (O, or a gradient); "lin" = row-major logical index. */
typedef struct grad_findings {
    double max_err;        /* max |out - ref32| */
    int64_t worst_lin;     /* its element, -1 when none */
    double worst_out;      /* the output there */
    double worst_ref;      /* ref32 there */
    double max_lowp;       /* max |ref_lowp - ref32| */
    int64_t nonfinite;     /* NaN/Inf outputs */
    int64_t first_nf_lin;  /* first of them, -1 when none */
} grad_findings;

/* Folds one element into f: out is the kernel's value, r32 and rlow the references, lin its index. */
static void grad_fold(grad_findings *f, double out, double r32, double rlow, int64_t lin) {
    double lowp = fabs(rlow - r32);
    if (lowp > f->max_lowp)
        f->max_lowp = lowp;
    if (!isfinite(out)) {
        if (f->nonfinite++ == 0 || lin < f->first_nf_lin)
            f->first_nf_lin = lin;
        return;
    }
    double e = fabs(out - r32);
    if (f->worst_lin < 0 || e > f->max_err || (e == f->max_err && lin < f->worst_lin)) {
        f->max_err = e;
        f->worst_lin = lin;
        f->worst_out = out;
        f->worst_ref = r32;
    }
}

/* Merges findings g (one thread's) into the report fields: the largest lowp gap, the worst element
 * (ties to the lowest index, so a report does not depend on timing), the non-finite count and first. */
static void findings_merge(const grad_findings *g, double *max_lowp, double *max_err, double *worst_out,
                           double *worst_ref, int64_t *worst, int64_t *nonfinite, int64_t *first_nf) {
    if (g->max_lowp > *max_lowp)
        *max_lowp = g->max_lowp;
    if (g->worst_lin >= 0 &&
        (*worst < 0 || g->max_err > *max_err || (g->max_err == *max_err && g->worst_lin < *worst))) {
        *worst = g->worst_lin;
        *max_err = g->max_err;
        *worst_out = g->worst_out;
        *worst_ref = g->worst_ref;
    }
    *nonfinite += g->nonfinite;
    if (g->first_nf_lin >= 0 && (*first_nf < 0 || g->first_nf_lin < *first_nf))
        *first_nf = g->first_nf_lin;
}

/* Per-thread scratch. */
typedef struct scratch {
    float *kf;          /* the cached K head, [sk][d] */
    float *vf;          /* the cached V head, transposed [d][sk]: P.V becomes d dot products */
    int64_t kv_b;       /* batch of the cached head, -1 when none */
    int64_t kv_h;       /* KV head of the cached head */
    double *s;          /* scores, then unrounded P, of one row [sk] */
    double *pl;         /* P rounded to the input dtype [sk] */
    double *q;          /* the query row [d] */
    double *o32;        /* ref32 output row [d] */
    double *olow;       /* ref_lowp output row [d] */
    double lse_slack;   /* FP8: the LSE rule's allowance for FP8 tensor-core accumulation, this row */
    grad_findings f;        /* ref_check_fwd's running findings on O, merged after the threads end */
    double lse_max;         /* max |lse - ref| over finite references */
    int64_t lse_worst_lin;  /* its row, -1 when none */
    int64_t lse_bad;        /* rows breaking the LSE rule */
    int64_t lse_bad_lin;    /* first of them, -1 when none */
    double lse_bad_val;     /* its value */
    double lse_bad_ref;     /* its reference */
} scratch;

typedef struct fwd_job {
    const ref_problem *p;    /* inputs */
    fg_dtype dt;             /* input dtype */
    fg_dtype odt;            /* output dtype (dt, or p->out_dtype for FP8) */
    int fp8;                 /* the inputs are E4M3 or E5M2 */
    int fp8_sum_rounded;     /* p->fp8_sum_rounded, for FP8 problems */
    int64_t b, sq, sk;       /* batch, query and key lengths */
    int64_t hq, hkv, d;      /* heads and head dim */
    int64_t group;           /* hq / hkv */
    double scale;            /* softmax scale actually used */
    int64_t rows_per_unit;   /* query rows per work unit */
    int64_t units_per_head;  /* ceil(sq / rows_per_unit) */
    scratch *scr;            /* one per thread */
    /* ref_attention_fwd */
    ref_mode mode;           /* which output to store */
    double *o;               /* [b, sq, hq, d] */
    double *lse;             /* [b, hq, sq] or NULL */
    /* ref_check_fwd */
    const fg_tensor *out;    /* kernel output (host) */
    const fg_tensor *lse_out;/* kernel LSE (host) or NULL */
    /* ref_rmse_fwd */
    double *unit_sse;        /* per unit: sum of (out - ref32)^2 over its finite outputs, NaN if any is not */
} fwd_job;

/* Makes the K and V of (batch bi, KV head kh) the cached ones in s. */
static void load_kv(const fwd_job *j, scratch *s, int64_t bi, int64_t kh) {
    if (s->kv_b == bi && s->kv_h == kh)
        return;
    for (int64_t t = 0; t < j->sk; t++)
        for (int64_t x = 0; x < j->d; x++) {
            s->kf[t * j->d + x] = elem_float(j->dt, &j->p->k, bi, t, kh, x);
            s->vf[x * j->sk + t] = elem_float(j->dt, &j->p->v, bi, t, kh, x);
        }
    s->kv_b = bi;
    s->kv_h = kh;
}

/* Computes query row i of (batch bi, head h): s->o32 and s->olow receive both references' O, and the
 * LSE is returned (-inf, with O = 0, when the row sees no key). The KV head must already be loaded. FP8
 * rows work on the raw fp8 values and apply the descale factors as the kernel does: c = scale * qd * kd
 * on the scores, vd on P.V (reference.h). */
static double forward_row(const fwd_job *j, scratch *s, int64_t bi, int64_t i, int64_t h) {
    const int64_t d = j->d;
    int64_t n = j->sk;
    if (j->p->causal) {
        int64_t last = i + j->sk - j->sq; /* the last visible key, bottom-right aligned */
        n = last + 1 < 0 ? 0 : (last + 1 > j->sk ? j->sk : last + 1);
    }
    if (n == 0) {
        for (int64_t x = 0; x < d; x++)
            s->o32[x] = s->olow[x] = 0.0;
        return -INFINITY;
    }
    double *restrict q = s->q, *restrict sc = s->s, *restrict pl = s->pl;
    for (int64_t x = 0; x < d; x++)
        q[x] = elem_float(j->dt, &j->p->q, bi, i, h, x);
    const int64_t kh = h / j->group;
    const double c = j->scale * descale_at(&j->p->q_descale, bi, kh) * descale_at(&j->p->k_descale, bi, kh);
    const double vd = descale_at(&j->p->v_descale, bi, kh);

    /* Scores. Four accumulation chains hide the add latency; the products are exact in double and the
     * sums' rounding (~1e-16 relative) is far below anything the checks resolve. */
    double m = -INFINITY, mag = 0;
    for (int64_t t = 0; t < n; t++) {
        const float *restrict kr = s->kf + t * d;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int64_t x = 0;
        for (; x + 4 <= d; x += 4) {
            a0 += q[x] * kr[x];
            a1 += q[x + 1] * kr[x + 1];
            a2 += q[x + 2] * kr[x + 2];
            a3 += q[x + 3] * kr[x + 3];
        }
        for (; x < d; x++)
            a0 += q[x] * kr[x];
        sc[t] = ((a0 + a1) + (a2 + a3)) * c;
        if (sc[t] > m)
            m = sc[t];
        if (j->fp8) {
            double a = 0;
            for (x = 0; x < d; x++)
                a += fabs(q[x] * kr[x]);
            if (a * fabs(c) > mag)
                mag = a * fabs(c);
        }
    }
    /* FP8 tensor cores do not accumulate in full fp32: on Hopper (wgmma, and mma e4m3 on Ada and Hopper
     * per SageAttention2) products are aligned to the largest exponent and the sum kept to about 13
     * mantissa bits, truncated, once per k32 instruction (DeepSeek-V3 report, section 3.5.2; SageAttention2
     * calls it an FP22 accumulator). flashgen's sm_90a FP8 kernel showed LSE errors of 0.9-1.9e-3 on the
     * H200 from exactly this. A score is then off by up to about
     * 2^-13 * (d/32 + 1) * sum|q.k| * scale, and the LSE by as much as its largest score. The allowance is
     * twice that; a wrong scale, base or row maximum is still off by orders of magnitude more. */
    s->lse_slack = j->fp8 ? ldexp((double)(d / 32 + 1) * mag, -12) : 0.0;

    /* P, its rounded copy, and l from the unrounded P. FP8 scales P by 2^8 (exactly, so the lowp row sum
     * is 2^8 l) before rounding it to e4m3, using (0, 256] of the format's range; with fp8_sum_rounded the
     * lowp O is divided by the sum of the rounded P instead (the LSE keeps l either way). */
    double l = 0, l_rounded = 0;
    for (int64_t t = 0; t < n; t++) {
        sc[t] = exp(sc[t] - m);
        pl[t] = j->fp8 ? round_to_e4m3(ldexp(sc[t], 8)) : round_to(j->dt, sc[t]);
        l += sc[t];
        l_rounded += pl[t];
    }
    const double l_low = j->fp8_sum_rounded ? l_rounded : j->fp8 ? ldexp(l, 8) : l;

    /* O = P.V / l for both references, one output column at a time over the transposed V. */
    for (int64_t x = 0; x < d; x++) {
        const float *restrict vc = s->vf + x * j->sk;
        double e0 = 0, e1 = 0, r0 = 0, r1 = 0;
        int64_t t = 0;
        for (; t + 2 <= n; t += 2) {
            e0 += sc[t] * vc[t];
            e1 += sc[t + 1] * vc[t + 1];
            r0 += pl[t] * vc[t];
            r1 += pl[t + 1] * vc[t + 1];
        }
        if (t < n) {
            e0 += sc[t] * vc[t];
            r0 += pl[t] * vc[t];
        }
        s->o32[x] = (e0 + e1) / l * vd;
        s->olow[x] = round_to(j->odt, (r0 + r1) * vd / l_low);
    }
    return m + log(l);
}

/* Maps a unit to (batch, head, first row, end row). Units run batch-major, then head, then row block, so
 * consecutive units mostly share a KV head. */
static void unit_rows(const fwd_job *j, int64_t unit, int64_t *bi, int64_t *h, int64_t *r0, int64_t *r1) {
    int64_t blk = unit % j->units_per_head;
    int64_t bh = unit / j->units_per_head;
    *h = bh % j->hq;
    *bi = bh / j->hq;
    *r0 = blk * j->rows_per_unit;
    *r1 = *r0 + j->rows_per_unit < j->sq ? *r0 + j->rows_per_unit : j->sq;
}

/* ref_attention_fwd's unit: computes its rows and stores the requested reference. */
static void fwd_unit(void *arg, int tid, int64_t unit) {
    const fwd_job *j = arg;
    scratch *s = &j->scr[tid];
    int64_t bi, h, r0, r1;
    unit_rows(j, unit, &bi, &h, &r0, &r1);
    load_kv(j, s, bi, h / j->group);
    for (int64_t i = r0; i < r1; i++) {
        double lse = forward_row(j, s, bi, i, h);
        double *dst = j->o + ((bi * j->sq + i) * j->hq + h) * j->d;
        memcpy(dst, j->mode == REF_LOWP ? s->olow : s->o32, (size_t)j->d * sizeof *dst);
        if (j->lse)
            j->lse[(bi * j->hq + h) * j->sq + i] = lse;
    }
}

/* ref_check_fwd's unit: computes its rows and folds the comparison with the kernel's output into the
 * thread's running findings. */
static void check_unit(void *arg, int tid, int64_t unit) {
    const fwd_job *j = arg;
    scratch *s = &j->scr[tid];
    int64_t bi, h, r0, r1;
    unit_rows(j, unit, &bi, &h, &r0, &r1);
    load_kv(j, s, bi, h / j->group);
    for (int64_t i = r0; i < r1; i++) {
        double ref_lse = forward_row(j, s, bi, i, h);
        int64_t lin0 = ((bi * j->sq + i) * j->hq + h) * j->d;
        for (int64_t x = 0; x < j->d; x++)
            grad_fold(&s->f, elem_float(j->odt, j->out, bi, i, h, x), s->o32[x], s->olow[x], lin0 + x);
        if (!j->lse_out)
            continue;
        const fg_tensor *L = j->lse_out;
        double got = ((const float *)L->data)[bi * L->stride[0] + h * L->stride[1] + i * L->stride[2]];
        int64_t lin = (bi * j->hq + h) * j->sq + i;
        int bad;
        if (isinf(ref_lse)) {
            bad = !(isinf(got) && got < 0);
        } else {
            bad = !isfinite(got);
            if (!bad) {
                double e = fabs(got - ref_lse);
                bad = e > REF_LSE_ATOL + REF_LSE_RTOL * fabs(ref_lse) + s->lse_slack;
                if (s->lse_worst_lin < 0 || e > s->lse_max || (e == s->lse_max && lin < s->lse_worst_lin)) {
                    s->lse_max = e;
                    s->lse_worst_lin = lin;
                }
            }
        }
        if (bad && (s->lse_bad++ == 0 || lin < s->lse_bad_lin)) {
            s->lse_bad_lin = lin;
            s->lse_bad_val = got;
            s->lse_bad_ref = ref_lse;
        }
    }
}

/* Fills j's geometry from p, allocates one scratch per thread; *nthreads receives the thread count. */
static fg_status job_init(fwd_job *j, const ref_problem *p, int *nthreads, fg_error *err) {
    memset(j, 0, sizeof *j);
    if (pthread_once(&f16_table_once, f16_table_fill) != 0)
        return fg_fail(err, FG_ERR_INTERNAL, "reference: pthread_once failed");
    j->p = p;
    j->dt = p->q.dtype;
    j->fp8 = is_fp8(j->dt);
    j->fp8_sum_rounded = j->fp8 && p->fp8_sum_rounded;
    j->odt = j->fp8 ? p->out_dtype : j->dt;
    j->b = p->q.shape[0];
    j->sq = p->q.shape[1];
    j->hq = p->q.shape[2];
    j->d = p->q.shape[3];
    j->sk = p->k.shape[1];
    j->hkv = p->k.shape[2];
    j->group = j->hq / j->hkv;
    j->scale = p->softmax_scale != 0.0f ? (double)p->softmax_scale : 1.0 / sqrt((double)j->d);
    /* Row blocks small enough to balance causal rows across threads, large enough to amortize the
     * per-unit bookkeeping. */
    j->rows_per_unit = 64;
    j->units_per_head = j->sq > 0 ? (j->sq + j->rows_per_unit - 1) / j->rows_per_unit : 0;
    int64_t units = j->b * j->hq * j->units_per_head;
    int n = thread_count(units);
    j->scr = calloc((size_t)n, sizeof *j->scr);
    if (!j->scr)
        return fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %d thread states", n);
    size_t kv = (size_t)(j->sk * j->d > 0 ? j->sk * j->d : 1);
    size_t sk = (size_t)(j->sk > 0 ? j->sk : 1);
    for (int i = 0; i < n; i++) {
        scratch *s = &j->scr[i];
        s->kf = malloc(kv * sizeof *s->kf);
        s->vf = malloc(kv * sizeof *s->vf);
        s->s = malloc(sk * sizeof *s->s);
        s->pl = malloc(sk * sizeof *s->pl);
        s->q = malloc((size_t)j->d * 3 * sizeof *s->q);
        if (!s->kf || !s->vf || !s->s || !s->pl || !s->q) {
            *nthreads = i + 1;
            return fg_fail(err, FG_ERR_NO_MEMORY,
                           "reference: out of memory for the K/V cache of sk=%lld, d=%lld per thread",
                           (long long)j->sk, (long long)j->d);
        }
        s->o32 = s->q + j->d;
        s->olow = s->q + 2 * j->d;
        s->kv_b = -1;
        s->kv_h = -1;
        s->f.worst_lin = s->f.first_nf_lin = s->lse_worst_lin = s->lse_bad_lin = -1;
    }
    *nthreads = n;
    return FG_OK;
}

/* Frees the scratch of the first nthreads threads and the scratch array (which may be NULL). */
static void job_free(fwd_job *j, int nthreads) {
    if (!j->scr)
        return;
    for (int i = 0; i < nthreads; i++) {
        free(j->scr[i].kf);
        free(j->scr[i].vf);
        free(j->scr[i].s);
        free(j->scr[i].pl);
        free(j->scr[i].q);
    }
    free(j->scr);
    j->scr = NULL;
}

/* Contract in reference.h. */
fg_status ref_attention_fwd(const ref_problem *p, ref_mode mode, double *o, double *lse, fg_error *err) {
    fg_status st = check_problem(p, err);
    if (st)
        return st;
    if (!o && elements(&p->q) > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the output array o is NULL");
    fwd_job j;
    int n = 0;
    st = job_init(&j, p, &n, err);
    if (st == FG_OK) {
        j.mode = mode;
        j.o = o;
        j.lse = lse;
        run_parallel(&j, fwd_unit, j.b * j.hq * j.units_per_head, n);
    }
    job_free(&j, n);
    return st;
}

/* Writes the row-major logical index lin of a tensor with the given sizes as per-dim indices. */
static void unflatten(int64_t lin, const int64_t *shape, int ndim, int64_t *idx) {
    for (int i = ndim - 1; i >= 0; i--) {
        if (lin < 0) {
            idx[i] = -1;
            continue;
        }
        idx[i] = shape[i] > 0 ? lin % shape[i] : 0;
        lin = shape[i] > 0 ? lin / shape[i] : 0;
    }
}

/* Contract in reference.h. */
fg_status ref_check_fwd(const ref_problem *p, const fg_tensor *out, const fg_tensor *lse, ref_report *r,
                        fg_error *err) {
    fg_status st = check_problem(p, err);
    if (st)
        return st;
    if (!out || !r)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out and the report must not be NULL");
    if ((st = check_view(out, "out", 4, err)))
        return st;
    if (out->dtype != (is_fp8(p->q.dtype) ? p->out_dtype : p->q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out.dtype differs from O's dtype (%s)",
                       is_fp8(p->q.dtype) ? "p->out_dtype for fp8 inputs" : "q.dtype");
    for (int i = 0; i < 4; i++)
        if (out->shape[i] != p->q.shape[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out.shape[%d] (%lld) != q.shape[%d] (%lld)",
                           i, (long long)out->shape[i], i, (long long)p->q.shape[i]);
    if (lse) {
        if ((st = check_view(lse, "lse", 3, err)))
            return st;
        if (lse->dtype != FG_DTYPE_F32)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: lse.dtype must be F32");
        const int64_t want[3] = {p->q.shape[0], p->q.shape[2], p->q.shape[1]};
        for (int i = 0; i < 3; i++)
            if (lse->shape[i] != want[i])
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                               "reference: lse.shape[%d] is %lld, expected %lld ([batch, heads_q, seqlen_q])", i,
                               (long long)lse->shape[i], (long long)want[i]);
    }

    fwd_job j;
    int n = 0;
    st = job_init(&j, p, &n, err);
    if (st) {
        job_free(&j, n);
        return st;
    }
    j.out = out;
    j.lse_out = lse;
    run_parallel(&j, check_unit, j.b * j.hq * j.units_per_head, n);

    /* Merge the threads' findings; ties go to the lowest index so the report does not depend on timing. */
    memset(r, 0, sizeof *r);
    int64_t worst = -1, first_nf = -1, lse_worst = -1, lse_bad = -1;
    for (int i = 0; i < n; i++) {
        const scratch *s = &j.scr[i];
        findings_merge(&s->f, &r->max_lowp_err, &r->max_err, &r->worst_out, &r->worst_ref, &worst, &r->nonfinite,
                       &first_nf);
        if (s->lse_worst_lin >= 0 && (lse_worst < 0 || s->lse_max > r->lse_max_err ||
                                      (s->lse_max == r->lse_max_err && s->lse_worst_lin < lse_worst))) {
            lse_worst = s->lse_worst_lin;
            r->lse_max_err = s->lse_max;
        }
        r->lse_bad += s->lse_bad;
        if (s->lse_bad_lin >= 0 && (lse_bad < 0 || s->lse_bad_lin < lse_bad)) {
            lse_bad = s->lse_bad_lin;
            r->lse_first_bad_val = s->lse_bad_val;
            r->lse_first_bad_ref = s->lse_bad_ref;
        }
    }
    const int64_t lse_shape[3] = {p->q.shape[0], p->q.shape[2], p->q.shape[1]};
    unflatten(worst, p->q.shape, 4, r->worst);
    unflatten(first_nf, p->q.shape, 4, r->first_nonfinite);
    unflatten(lse_worst, lse_shape, 3, r->lse_worst);
    unflatten(lse_bad, lse_shape, 3, r->lse_first_bad);
    r->bound = 2.0 * r->max_lowp_err + 1e-5;
    r->lse_checked = lse != NULL;
    r->pass = r->nonfinite == 0 && r->max_err <= r->bound && r->lse_bad == 0;
    job_free(&j, n);
    return FG_OK;
}

/* ref_rmse_fwd's unit: computes its rows and stores the sum of (out - ref32)^2 over them (NaN when an
 * output is NaN or Inf) in the unit's slot, so the total is summed in unit order whatever the timing. */
static void rmse_unit(void *arg, int tid, int64_t unit) {
    const fwd_job *j = arg;
    scratch *s = &j->scr[tid];
    int64_t bi, h, r0, r1;
    unit_rows(j, unit, &bi, &h, &r0, &r1);
    load_kv(j, s, bi, h / j->group);
    double sse = 0;
    for (int64_t i = r0; i < r1; i++) {
        forward_row(j, s, bi, i, h);
        for (int64_t x = 0; x < j->d; x++) {
            double out = elem_float(j->odt, j->out, bi, i, h, x);
            double e = isfinite(out) ? out - s->o32[x] : NAN;
            sse += e * e;
        }
    }
    j->unit_sse[unit] = sse;
}

/* Contract in reference.h. */
double ref_rmse_fwd(const ref_problem *p, const fg_tensor *out, fg_error *err) {
    fg_status st = check_problem(p, err);
    if (st)
        return -1.0;
    if (!out) {
        fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out must not be NULL");
        return -1.0;
    }
    if (check_view(out, "out", 4, err))
        return -1.0;
    if (out->dtype != (is_fp8(p->q.dtype) ? p->out_dtype : p->q.dtype)) {
        fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out.dtype differs from O's dtype (%s)",
                is_fp8(p->q.dtype) ? "p->out_dtype for fp8 inputs" : "q.dtype");
        return -1.0;
    }
    for (int i = 0; i < 4; i++)
        if (out->shape[i] != p->q.shape[i]) {
            fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: out.shape[%d] (%lld) != q.shape[%d] (%lld)", i,
                    (long long)out->shape[i], i, (long long)p->q.shape[i]);
            return -1.0;
        }
    int64_t count = elements(out);
    if (count == 0)
        return 0.0;
    fwd_job j;
    int n = 0;
    if (job_init(&j, p, &n, err)) {
        job_free(&j, n);
        return -1.0;
    }
    int64_t units = j.b * j.hq * j.units_per_head;
    j.out = out;
    j.unit_sse = malloc((size_t)units * sizeof *j.unit_sse);
    if (!j.unit_sse) {
        job_free(&j, n);
        fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %lld partial sums", (long long)units);
        return -1.0;
    }
    run_parallel(&j, rmse_unit, units, n);
    double sse = 0;
    for (int64_t u = 0; u < units; u++)
        sse += j.unit_sse[u];
    free(j.unit_sse);
    job_free(&j, n);
    return sqrt(sse / (double)count);
}

/* Contract in reference.h. */
char *ref_report_format(const ref_report *r, char *buf, size_t n) {
    if (!buf || n == 0)
        return buf;
    int k = snprintf(buf, n,
                     "%s: max|out-ref32| %.3g at [%lld,%lld,%lld,%lld] (out %.6g, ref %.6g), bound %.3g "
                     "(max|lowp-ref32| %.3g); non-finite %lld",
                     r->pass ? "ok" : "FAIL", r->max_err, (long long)r->worst[0], (long long)r->worst[1],
                     (long long)r->worst[2], (long long)r->worst[3], r->worst_out, r->worst_ref, r->bound,
                     r->max_lowp_err, (long long)r->nonfinite);
    if (r->nonfinite > 0 && k >= 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, " (first at [%lld,%lld,%lld,%lld])",
                      (long long)r->first_nonfinite[0], (long long)r->first_nonfinite[1],
                      (long long)r->first_nonfinite[2], (long long)r->first_nonfinite[3]);
    if (r->lse_checked && k >= 0 && (size_t)k < n) {
        k += snprintf(buf + k, n - (size_t)k, "; lse max err %.3g at [%lld,%lld,%lld], bad rows %lld",
                      r->lse_max_err, (long long)r->lse_worst[0], (long long)r->lse_worst[1],
                      (long long)r->lse_worst[2], (long long)r->lse_bad);
        if (r->lse_bad > 0 && k >= 0 && (size_t)k < n)
            snprintf(buf + k, n - (size_t)k, " (first [%lld,%lld,%lld]: %.9g vs ref %.9g)",
                     (long long)r->lse_first_bad[0], (long long)r->lse_first_bad[1],
                     (long long)r->lse_first_bad[2], r->lse_first_bad_val, r->lse_first_bad_ref);
    }
    return buf;
}

/* ------------------------------------------------------------------------------------------------ */
/* Random fill                                                                                       */
/* ------------------------------------------------------------------------------------------------ */

/* A counter-based generator (the splitmix64 finalizer applied to seed and index): every element's value
 * is a pure function of (seed, index), which is what makes the fill independent of the thread count and
 * of the strides. */
static uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z;
}

/* The pair (z0, z1) of independent N(0, 1) samples number `pair` of stream `key` (Box-Muller). Float
 * math is plenty for values rounded to 16 bits, and twice as fast as double on 2^31-element fills; one
 * 64-bit draw gives both uniforms. Tails stop near 5.9 sigma (u1 >= 2^-25), irrelevant here. */
static void normal_pair(uint64_t key, uint64_t pair, float *z0, float *z1) {
    uint64_t a = mix64(key + pair * 0x9E3779B97F4A7C15ull);
    float u1 = ((float)(a >> 40) + 0.5f) * 0x1p-24f; /* in (0, 1): log never sees 0 */
    float u2 = (float)((a >> 8) & 0xFFFFFFu) * 0x1p-24f;
    float r = sqrtf(-2.0f * logf(u1));
    float sn, cs;
    sincosf(6.2831853071795865f * u2, &sn, &cs);
    *z0 = r * cs;
    *z1 = r * sn;
}

typedef struct fill_job {
    const fg_tensor *t;   /* the view */
    uint64_t key;         /* the seed, mixed */
    int64_t rows;         /* b * s * h */
    int64_t rows_per_unit;/* rows per work unit */
    float mean;           /* added to every sample before rounding */
} fill_job;

/* ref_fill_normal's unit: a block of rows (b, s, h), each d elements in logical order. */
static void fill_unit(void *arg, int tid, int64_t unit) {
    (void)tid; /* every unit writes its own rows: no per-thread state */
    const fill_job *f = arg;
    const fg_tensor *t = f->t;
    const int64_t d = t->shape[3];
    int64_t r0 = unit * f->rows_per_unit;
    int64_t r1 = r0 + f->rows_per_unit < f->rows ? r0 + f->rows_per_unit : f->rows;
    for (int64_t r = r0; r < r1; r++) {
        int64_t h = r % t->shape[2];
        int64_t si = (r / t->shape[2]) % t->shape[1];
        int64_t bi = r / (t->shape[2] * t->shape[1]);
        int64_t off = bi * t->stride[0] + si * t->stride[1] + h * t->stride[2];
        float z[2];
        for (int64_t x = 0; x < d; x++) {
            int64_t lin = r * d + x;
            if (x == 0 || (lin & 1) == 0)
                normal_pair(f->key, (uint64_t)lin >> 1, &z[0], &z[1]), z[0] += f->mean, z[1] += f->mean;
            if (t->dtype == FG_DTYPE_E4M3)
                ((uint8_t *)t->data)[off + x * t->stride[3]] = ref_float_to_e4m3(z[lin & 1], 1);
            else if (t->dtype == FG_DTYPE_E5M2)
                ((uint8_t *)t->data)[off + x * t->stride[3]] = ref_float_to_e5m2(z[lin & 1], 1);
            else
                ((uint16_t *)t->data)[off + x * t->stride[3]] = ref_from_float(t->dtype, z[lin & 1]);
        }
    }
}

/* Contract in reference.h. */
fg_status ref_fill_normal(const fg_tensor *t, uint64_t seed, fg_error *err) { return ref_fill_normal_mean(t, seed, 0.f, err); }

/* Contract in reference.h. */
fg_status ref_fill_normal_mean(const fg_tensor *t, uint64_t seed, float mean, fg_error *err) {
    if (!t)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the tensor to fill is NULL");
    fg_status st = check_view(t, "tensor", 4, err);
    if (st)
        return st;
    if (t->dtype != FG_DTYPE_F16 && t->dtype != FG_DTYPE_BF16 && !is_fp8(t->dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: only F16, BF16, E4M3 and E5M2 tensors can be filled");
    if (!(mean > -16.f && mean < 16.f))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the mean to fill with (%g) must lie in (-16, 16)",
                       (double)mean);
    fill_job f = {t, mix64(seed + 0x9E3779B97F4A7C15ull), t->shape[0] * t->shape[1] * t->shape[2], 0, mean};
    if (f.rows == 0 || t->shape[3] == 0)
        return FG_OK;
    f.rows_per_unit = 1 + 65536 / t->shape[3]; /* about 64K elements per unit */
    int64_t units = (f.rows + f.rows_per_unit - 1) / f.rows_per_unit;
    run_parallel(&f, fill_unit, units, thread_count(units));
    return FG_OK;
}


/* ------------------------------------------------------------------------------------------------ */
/* The backward pass                                                                                 */
/* ------------------------------------------------------------------------------------------------ */
/* Two passes, so that every output element has one writer and a fixed summation order (the result does
 * not depend on the thread count):
 *   pass 1, units of (batch, query head, block of query rows): per row, P and dP over its keys, then D
 *           (stored for pass 2) and dQ;
 *   pass 2, units of (batch, KV head, block of keys): for the query heads of the group in order, over
 *           chunks of query rows in order, P and dP again, then dK and dV of the block's keys.
 * Pass 1 caches the K/V head it reads, pass 2 a chunk of Q/dO rows, upcast to double once. The hot loops
 * work on four rows at a time (eight independent dot products, one store per four products, K and V read
 * once per four query rows) and two elements at a time (packed arithmetic at -O2): b=2, s=1024, h=8,
 * d=128 takes 2-3 s on two cores, half of what one row at a time took. */

#define BWD_ROWS 64 /* query rows per pass-1 unit, keys per pass-2 unit, query rows per pass-2 chunk */

/* ref_check_bwd's running findings for one gradient tensor; "lin" = row-major logical index. */
/* Per-thread scratch of the backward pass. */
typedef struct bwd_scratch {
    double *kd;            /* pass 1: the cached K head [sk][d] */
    double *vd;            /* pass 1: the cached V head [sk][d] */
    int64_t kv_b;          /* batch of the cached K/V head, -1 when none */
    int64_t kv_h;          /* its KV head */
    double *p;             /* pass 1: P of four rows [4][sk] */
    double *dp;            /* pass 1: their dP [4][sk] */
    double *ds;            /* pass 1: their dS, ref32 [4][sk] */
    double *dsl;           /* pass 1: their dS, ref_lowp [4][sk] */
    double *row;           /* pass 1: four q rows, four dO rows, [2][4][d] */
    double *dq32;          /* pass 1: dQ of those rows, ref32 [4][d] */
    double *dqlow;         /* pass 1: dQ of those rows, ref_lowp [4][d] */
    double *blk;           /* pass 2: the K rows then the V rows of the unit's keys, [2][BWD_ROWS][d] */
    double *chunk;         /* pass 2: Q rows then dO rows of a chunk of query rows, [2][BWD_ROWS][d] */
    double *acc;           /* pass 2: dK, dV of ref32, then dK, dV of ref_lowp, [4][BWD_ROWS][d] */
    grad_findings f[3];    /* ref_check_bwd's findings for dq, dk, dv */
} bwd_scratch;

/* One call of ref_attention_bwd or ref_check_bwd: geometry, what to compute and where it goes. */
typedef struct bwd_job {
    const ref_bwd_problem *p; /* inputs */
    fg_dtype dt;              /* input dtype (F16 or BF16) */
    int64_t b, sq, sk;        /* batch, query and key lengths */
    int64_t hq, hkv, d;       /* heads and head dim */
    int64_t group;            /* hq / hkv */
    double scale;             /* softmax scale actually used */
    int want32;               /* compute ref32 */
    int wantlow;              /* compute ref_lowp */
    int64_t q_units;          /* pass 1 units per (batch, query head): ceil(sq / BWD_ROWS) */
    int64_t k_units;          /* pass 2 units per (batch, KV head): ceil(sk / BWD_ROWS) */
    double *d32;              /* ref32's D [b, hq, sq], written by pass 1 (when want32) */
    double *dlow;             /* ref_lowp's D [b, hq, sq], written by pass 1 (when wantlow) */
    bwd_scratch *scr;         /* one per thread */
    int store;                /* 1: ref_attention_bwd stores the reference; 0: ref_check_bwd compares */
    /* ref_attention_bwd: the one reference computed, contiguous (NULL when store is 0, or when empty) */
    double *dq;               /* [b, sq, hq, d] */
    double *dk;               /* [b, sk, hkv, d] */
    double *dv;               /* [b, sk, hkv, d] */
    /* ref_check_bwd: the kernel's gradients (host) */
    const fg_tensor *gq;      /* dQ */
    const fg_tensor *gk;      /* dK */
    const fg_tensor *gv;      /* dV */
} bwd_job;

/* Element [i0, i1, i2, i3] of a host gradient view (F16, BF16 or F32) as a double; tables filled. */
static double grad_at(const fg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int64_t off = i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3];
    if (t->dtype == FG_DTYPE_F32)
        return (double)((const float *)t->data)[off];
    return fast_to_float(t->dtype, ((const uint16_t *)t->data)[off]);
}

/* The LSE of (batch bi, head h, row i) from the problem's F32 view. */
static double lse_at(const fg_tensor *t, int64_t bi, int64_t h, int64_t i) {
    return (double)((const float *)t->data)[bi * t->stride[0] + h * t->stride[1] + i * t->stride[2]];
}


/* s[r] = a_r . u and g[r] = b_r . w for the four consecutive rows a_r = a + r d, b_r = b + r d: sixteen
 * independent chains (each dot product sums its even and its odd elements apart, then adds the two),
 * written two elements at a time so that compilers use packed arithmetic at -O2. The products are exact in
 * double and the sums' rounding (~1e-16 relative) is far below anything the checks resolve. */
static inline void dot4x2(const double *restrict a, const double *restrict b, const double *restrict u,
                          const double *restrict w, int64_t d, double *s, double *g) {
    const double *a1 = a + d, *a2 = a + 2 * d, *a3 = a + 3 * d, *b1 = b + d, *b2 = b + 2 * d, *b3 = b + 3 * d;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0, g0 = 0, g1 = 0, g2 = 0, g3 = 0; /* even elements */
    double t0 = 0, t1 = 0, t2 = 0, t3 = 0, h0 = 0, h1 = 0, h2 = 0, h3 = 0; /* odd elements */
    int64_t x = 0;
    for (; x + 2 <= d; x += 2) {
        s0 += a[x] * u[x];
        t0 += a[x + 1] * u[x + 1];
        s1 += a1[x] * u[x];
        t1 += a1[x + 1] * u[x + 1];
        s2 += a2[x] * u[x];
        t2 += a2[x + 1] * u[x + 1];
        s3 += a3[x] * u[x];
        t3 += a3[x + 1] * u[x + 1];
        g0 += b[x] * w[x];
        h0 += b[x + 1] * w[x + 1];
        g1 += b1[x] * w[x];
        h1 += b1[x + 1] * w[x + 1];
        g2 += b2[x] * w[x];
        h2 += b2[x + 1] * w[x + 1];
        g3 += b3[x] * w[x];
        h3 += b3[x + 1] * w[x + 1];
    }
    if (x < d) {
        s0 += a[x] * u[x];
        s1 += a1[x] * u[x];
        s2 += a2[x] * u[x];
        s3 += a3[x] * u[x];
        g0 += b[x] * w[x];
        g1 += b1[x] * w[x];
        g2 += b2[x] * w[x];
        g3 += b3[x] * w[x];
    }
    s[0] = s0 + t0, s[1] = s1 + t1, s[2] = s2 + t2, s[3] = s3 + t3;
    g[0] = g0 + h0, g[1] = g1 + h1, g[2] = g2 + h2, g[3] = g3 + h3;
}

/* *s = a . u and *g = b . w (one row: the tail of dot4x2), summed exactly as dot4x2 sums each row. */
static inline void dot1x2(const double *restrict a, const double *restrict b, const double *restrict u,
                          const double *restrict w, int64_t d, double *s, double *g) {
    double s0 = 0, t0 = 0, g0 = 0, h0 = 0;
    int64_t x = 0;
    for (; x + 2 <= d; x += 2) {
        s0 += a[x] * u[x];
        t0 += a[x + 1] * u[x + 1];
        g0 += b[x] * w[x];
        h0 += b[x + 1] * w[x + 1];
    }
    if (x < d) {
        s0 += a[x] * u[x];
        g0 += b[x] * w[x];
    }
    *s = s0 + t0;
    *g = g0 + h0;
}

/* y += c[0] a_0 + c[1] a_1 + c[2] a_2 + c[3] a_3 for the four consecutive rows a_r = a + r d (one load
 * and store of y per four products). Written two elements at a time, which compilers turn into packed
 * arithmetic at -O2; the operations and their order per element are the same. */
static inline void axpy4(double *restrict y, const double *restrict a, const double *c, int64_t d) {
    const double *a1 = a + d, *a2 = a + 2 * d, *a3 = a + 3 * d;
    const double c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    int64_t x = 0;
    for (; x + 2 <= d; x += 2) {
        y[x] += ((c0 * a[x] + c1 * a1[x]) + c2 * a2[x]) + c3 * a3[x];
        y[x + 1] += ((c0 * a[x + 1] + c1 * a1[x + 1]) + c2 * a2[x + 1]) + c3 * a3[x + 1];
    }
    if (x < d)
        y[x] += ((c0 * a[x] + c1 * a1[x]) + c2 * a2[x]) + c3 * a3[x];
}

/* y += c a (one row: the tail of axpy4), two elements at a time like axpy4. */
static inline void axpy1(double *restrict y, const double *restrict a, double c, int64_t d) {
    int64_t x = 0;
    for (; x + 2 <= d; x += 2) {
        y[x] += c * a[x];
        y[x + 1] += c * a[x + 1];
    }
    if (x < d)
        y[x] += c * a[x];
}

/* Makes the K and V of (batch bi, KV head kh) the cached ones in s (pass 1), row-major [sk][d]. */
static void bwd_load_kv(const bwd_job *j, bwd_scratch *s, int64_t bi, int64_t kh) {
    if (s->kv_b == bi && s->kv_h == kh)
        return;
    for (int64_t t = 0; t < j->sk; t++)
        for (int64_t x = 0; x < j->d; x++) {
            s->kd[t * j->d + x] = elem_float(j->dt, &j->p->fwd.k, bi, t, kh, x);
            s->vd[t * j->d + x] = elem_float(j->dt, &j->p->fwd.v, bi, t, kh, x);
        }
    s->kv_b = bi;
    s->kv_h = kh;
}

/* The number of keys query row i sees: keys 0 .. n-1 (bottom-right aligned when causal). */
static int64_t visible_keys(const bwd_job *j, int64_t i) {
    if (!j->p->fwd.causal)
        return j->sk;
    int64_t last = i + j->sk - j->sq;
    return last + 1 < 0 ? 0 : (last + 1 > j->sk ? j->sk : last + 1);
}

/* The first query row that sees key `key` (sq when none does). */
static int64_t first_row(const bwd_job *j, int64_t key) {
    int64_t i0 = j->p->fwd.causal ? key - (j->sk - j->sq) : 0;
    return i0 < 0 ? 0 : i0;
}

/* y_r += sum_t c[r cs + t] a_t for the four rows y_r = y + r d and the four consecutive rows a_t = a + t d:
 * axpy4 on each y_r, so that the a_t are read from memory once for the four rows. */
static inline void axpy4x4(double *restrict y, const double *restrict a, const double *c, int64_t cs, int64_t d) {
    for (int r = 0; r < 4; r++)
        axpy4(y + r * d, a, c + r * cs, d);
}

/* Pass 1 for the nr (1..4) consecutive query rows i.. of (batch bi, head h), their K/V head loaded: stores
 * D of each wanted reference and leaves the rows' dQ of ref32 in s->dq32 and of ref_lowp in s->dqlow
 * ([4][d]). Four rows share each pass over K and V. A row that sees no key, or whose LSE is -inf, has
 * P = 0 everywhere and gets dQ = 0 (exp(s - (-inf)) is never formed); masked pairs are never multiplied
 * in, so a NaN in a key reaches only the rows that see it. */
static void bwd_query_rows(const bwd_job *j, bwd_scratch *s, int64_t bi, int64_t h, int64_t i, int nr) {
    const int64_t d = j->d, sk = j->sk;
    const ref_bwd_problem *p = j->p;
    const int64_t row0 = (bi * j->hq + h) * j->sq + i;
    double *q = s->row, *g = s->row + 4 * d, lse[4], dlow[4] = {0, 0, 0, 0};
    int64_t n[4] = {0, 0, 0, 0}, nmin = sk, nmax = 0;
    for (int r = 0; r < 4; r++)
        for (int64_t x = 0; x < d; x++) {
            q[r * d + x] = r < nr ? elem_float(j->dt, &p->fwd.q, bi, i + r, h, x) : 0.0;
            g[r * d + x] = r < nr ? elem_float(j->dt, &p->d_o, bi, i + r, h, x) : 0.0;
            s->dq32[r * d + x] = s->dqlow[r * d + x] = 0.0;
        }
    for (int r = 0; r < nr; r++) {
        if (j->wantlow) { /* the kernel's preprocessing: rowsum(dO * O) of the 16-bit tensors, every row */
            for (int64_t x = 0; x < d; x++)
                dlow[r] += g[r * d + x] * elem_float(j->dt, &p->o, bi, i + r, h, x);
            j->dlow[row0 + r] = dlow[r];
        }
        lse[r] = lse_at(&p->lse, bi, h, i + r);
        n[r] = lse[r] == -INFINITY ? 0 : visible_keys(j, i + r);
        nmin = n[r] < nmin ? n[r] : nmin;
        nmax = n[r] > nmax ? n[r] : nmax;
        if (j->want32 && n[r] == 0)
            j->d32[row0 + r] = 0.0;
    }
    if (nmax == 0)
        return;

    /* P and dP, four rows against one key at a time; P = 0 past a row's last key. */
    double *pr = s->p, *dp = s->dp;
    for (int64_t t = 0; t < nmax; t++) {
        double sc[4], gv[4];
        if (nr == 4)
            dot4x2(q, g, s->kd + t * d, s->vd + t * d, d, sc, gv);
        else
            for (int r = 0; r < nr; r++)
                dot1x2(q + r * d, g + r * d, s->kd + t * d, s->vd + t * d, d, sc + r, gv + r);
        for (int r = 0; r < nr; r++) {
            pr[r * sk + t] = t < n[r] ? exp(sc[r] * j->scale - lse[r]) : 0.0;
            dp[r * sk + t] = gv[r];
        }
    }

    /* dS of each wanted reference, then dQ = scale * dS K: four rows by four keys up to the shortest row,
     * then each row's own remaining keys. */
    for (int ref = 0; ref < 2; ref++) {
        if (!(ref ? j->wantlow : j->want32))
            continue;
        double *ds = ref ? s->dsl : s->ds, *y = ref ? s->dqlow : s->dq32;
        for (int r = 0; r < nr; r++) {
            double dr = dlow[r];
            if (!ref) {
                dr = 0;
                for (int64_t t = 0; t < n[r]; t++)
                    dr += pr[r * sk + t] * dp[r * sk + t];
                if (n[r] > 0)
                    j->d32[row0 + r] = dr;
            }
            for (int64_t t = 0; t < n[r]; t++) {
                double v = pr[r * sk + t] * (dp[r * sk + t] - dr);
                ds[r * sk + t] = ref ? round_to(j->dt, v) : v;
            }
        }
        int64_t t0 = 0;
        if (nr == 4)
            for (; t0 + 4 <= nmin; t0 += 4)
                axpy4x4(y, s->kd + t0 * d, ds + t0, sk, d);
        for (int r = 0; r < nr; r++) {
            int64_t t = t0;
            for (; t + 4 <= n[r]; t += 4)
                axpy4(y + r * d, s->kd + t * d, ds + r * sk + t, d);
            for (; t < n[r]; t++)
                axpy1(y + r * d, s->kd + t * d, ds[r * sk + t], d);
        }
        for (int r = 0; r < nr; r++)
            for (int64_t x = 0; x < d; x++)
                y[r * d + x] = ref ? round_to(j->dt, j->scale * y[r * d + x]) : j->scale * y[r * d + x];
    }
}

/* Pass 1's unit: (batch, query head, block of rows). Stores the computed reference's dQ rows
 * (ref_attention_bwd) or folds both against the kernel's dQ (ref_check_bwd). */
static void bwd_q_unit(void *arg, int tid, int64_t unit) {
    const bwd_job *j = arg;
    bwd_scratch *s = &j->scr[tid];
    const int64_t d = j->d;
    const int64_t blk = unit % j->q_units, bh = unit / j->q_units;
    const int64_t h = bh % j->hq, bi = bh / j->hq;
    const int64_t r0 = blk * BWD_ROWS, r1 = r0 + BWD_ROWS < j->sq ? r0 + BWD_ROWS : j->sq;
    bwd_load_kv(j, s, bi, h / j->group);
    for (int64_t i = r0; i < r1; i += 4) {
        const int nr = i + 4 <= r1 ? 4 : (int)(r1 - i);
        bwd_query_rows(j, s, bi, h, i, nr);
        for (int r = 0; r < nr; r++) {
            const int64_t lin0 = ((bi * j->sq + i + r) * j->hq + h) * d;
            const double *a32 = s->dq32 + r * d, *alow = s->dqlow + r * d;
            if (j->store) {
                memcpy(j->dq + lin0, j->want32 ? a32 : alow, (size_t)d * sizeof *j->dq);
                continue;
            }
            for (int64_t x = 0; x < d; x++)
                grad_fold(&s->f[0], grad_at(j->gq, bi, i + r, h, x), a32[x], alow[x], lin0 + x);
        }
    }
}

/* Pass 2 for query rows i .. i+nr-1 (nr = 4, or 1 in a tail) of the loaded chunk starting at row c0, against
 * key t of the unit's block: P, dP, dS of those rows, added into the key's dK and dV accumulators of
 * each wanted reference. Rows whose LSE is -inf have zeroed Q/dO in the chunk and get P = dS = 0. */
static void bwd_key_rows(const bwd_job *j, bwd_scratch *s, int64_t h, int64_t bi, int64_t c0, int64_t i, int nr,
                         int64_t t) {
    const int64_t d = j->d, r = i - c0, base = (bi * j->hq + h) * j->sq;
    const double *kt = s->blk + t * d, *vt = s->blk + (BWD_ROWS + t) * d;
    const double *qr = s->chunk + r * d, *gr = s->chunk + (BWD_ROWS + r) * d;
    double sc[4], dp[4], pr[4], ds[4], pl[4], dsl[4];
    if (nr == 4)
        dot4x2(qr, gr, kt, vt, d, sc, dp);
    else
        dot1x2(qr, gr, kt, vt, d, sc, dp);
    for (int u = 0; u < nr; u++) {
        const double lse = lse_at(&j->p->lse, bi, h, i + u);
        pr[u] = lse == -INFINITY ? 0.0 : exp(sc[u] * j->scale - lse);
        if (j->want32)
            ds[u] = pr[u] * (dp[u] - j->d32[base + i + u]);
        if (j->wantlow) {
            pl[u] = round_to(j->dt, pr[u]);
            dsl[u] = round_to(j->dt, pr[u] * (dp[u] - j->dlow[base + i + u]));
        }
    }
    double *dk32 = s->acc + t * d, *dv32 = s->acc + (BWD_ROWS + t) * d;
    double *dkl = s->acc + (2 * BWD_ROWS + t) * d, *dvl = s->acc + (3 * BWD_ROWS + t) * d;
    if (nr == 4) {
        if (j->want32) {
            axpy4(dk32, qr, ds, d);
            axpy4(dv32, gr, pr, d);
        }
        if (j->wantlow) {
            axpy4(dkl, qr, dsl, d);
            axpy4(dvl, gr, pl, d);
        }
    } else {
        if (j->want32) {
            axpy1(dk32, qr, ds[0], d);
            axpy1(dv32, gr, pr[0], d);
        }
        if (j->wantlow) {
            axpy1(dkl, qr, dsl[0], d);
            axpy1(dvl, gr, pl[0], d);
        }
    }
}

/* Pass 2's unit: (batch, KV head, block of keys). Sums dK and dV of its keys over the query heads of the
 * group and the rows that see each key, then stores the computed reference (ref_attention_bwd) or folds
 * both against the kernel's dK and dV (ref_check_bwd). */
static void bwd_k_unit(void *arg, int tid, int64_t unit) {
    const bwd_job *j = arg;
    bwd_scratch *s = &j->scr[tid];
    const int64_t d = j->d;
    const int64_t blk = unit % j->k_units, bk = unit / j->k_units;
    const int64_t kh = bk % j->hkv, bi = bk / j->hkv;
    const int64_t j0 = blk * BWD_ROWS, nk = j0 + BWD_ROWS < j->sk ? BWD_ROWS : j->sk - j0;
    for (int64_t t = 0; t < nk; t++)
        for (int64_t x = 0; x < d; x++) {
            s->blk[t * d + x] = elem_float(j->dt, &j->p->fwd.k, bi, j0 + t, kh, x);
            s->blk[(BWD_ROWS + t) * d + x] = elem_float(j->dt, &j->p->fwd.v, bi, j0 + t, kh, x);
        }
    memset(s->acc, 0, (size_t)(4 * BWD_ROWS * d) * sizeof *s->acc);

    for (int64_t h = kh * j->group; h < (kh + 1) * j->group; h++)
        for (int64_t c0 = first_row(j, j0); c0 < j->sq; c0 += BWD_ROWS) {
            const int64_t c1 = c0 + BWD_ROWS < j->sq ? c0 + BWD_ROWS : j->sq;
            for (int64_t i = c0; i < c1; i++) {
                const int keep = lse_at(&j->p->lse, bi, h, i) != -INFINITY;
                double *qr = s->chunk + (i - c0) * d, *gr = s->chunk + (BWD_ROWS + i - c0) * d;
                for (int64_t x = 0; x < d; x++) {
                    qr[x] = keep ? elem_float(j->dt, &j->p->fwd.q, bi, i, h, x) : 0.0;
                    gr[x] = keep ? elem_float(j->dt, &j->p->d_o, bi, i, h, x) : 0.0;
                }
            }
            for (int64_t t = 0; t < nk; t++) { /* key by key, over the chunk's rows that see the key */
                int64_t i = first_row(j, j0 + t) > c0 ? first_row(j, j0 + t) : c0;
                for (; i + 4 <= c1; i += 4)
                    bwd_key_rows(j, s, h, bi, c0, i, 4, t);
                for (; i < c1; i++)
                    bwd_key_rows(j, s, h, bi, c0, i, 1, t);
            }
        }

    for (int64_t t = 0; t < nk; t++) {
        const int64_t lin0 = ((bi * j->sk + j0 + t) * j->hkv + kh) * d;
        for (int64_t x = 0; x < d; x++) {
            const double k32 = j->scale * s->acc[t * d + x], v32 = s->acc[(BWD_ROWS + t) * d + x];
            const double klow = round_to(j->dt, j->scale * s->acc[(2 * BWD_ROWS + t) * d + x]);
            const double vlow = round_to(j->dt, s->acc[(3 * BWD_ROWS + t) * d + x]);
            if (j->store) {
                j->dk[lin0 + x] = j->want32 ? k32 : klow;
                j->dv[lin0 + x] = j->want32 ? v32 : vlow;
            } else {
                grad_fold(&s->f[1], grad_at(j->gk, bi, j0 + t, kh, x), k32, klow, lin0 + x);
                grad_fold(&s->f[2], grad_at(j->gv, bi, j0 + t, kh, x), v32, vlow, lin0 + x);
            }
        }
    }
}

/* Checks that t has `like`'s dims and sizes (like: a validated 4-d view); names both in err. */
static fg_status check_like(const fg_tensor *t, const char *name, const fg_tensor *like, const char *like_name,
                            fg_error *err) {
    fg_status st = check_view(t, name, 4, err);
    if (st)
        return st;
    for (int i = 0; i < 4; i++)
        if (t->shape[i] != like->shape[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.shape[%d] (%lld) != %s.shape[%d] (%lld)",
                           name, i, (long long)t->shape[i], like_name, i, (long long)like->shape[i]);
    return FG_OK;
}

/* Checks that p describes a consistent 16-bit backward problem; names the offending field in err. */
static fg_status check_bwd_problem(const ref_bwd_problem *p, fg_error *err) {
    if (!p)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the backward problem is NULL");
    fg_status st = check_problem(&p->fwd, err);
    if (st)
        return st;
    if (is_fp8(p->fwd.q.dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                       "reference: fwd.q.dtype is FP8; the backward reference takes F16 or BF16 inputs only "
                       "(FP8 backward is not supported)");
    if ((st = check_like(&p->o, "o", &p->fwd.q, "q", err)) || (st = check_like(&p->d_o, "d_o", &p->fwd.q, "q", err)))
        return st;
    if (p->o.dtype != p->fwd.q.dtype || p->d_o.dtype != p->fwd.q.dtype)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: o and d_o must have q's dtype");
    if ((st = check_view(&p->lse, "lse", 3, err)))
        return st;
    if (p->lse.dtype != FG_DTYPE_F32)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: lse.dtype must be F32");
    const int64_t want[3] = {p->fwd.q.shape[0], p->fwd.q.shape[2], p->fwd.q.shape[1]};
    for (int i = 0; i < 3; i++)
        if (p->lse.shape[i] != want[i])
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "reference: lse.shape[%d] is %lld, expected %lld ([batch, heads_q, seqlen_q])", i,
                           (long long)p->lse.shape[i], (long long)want[i]);
    return FG_OK;
}

/* Fills j's geometry from p, allocates one scratch per thread and the D arrays the caller did not give
 * (d32 / dlow already set are kept); *nthreads receives the thread count. Free with bwd_free. */
static fg_status bwd_init(bwd_job *j, const ref_bwd_problem *p, int *nthreads, fg_error *err) {
    if (pthread_once(&f16_table_once, f16_table_fill) != 0)
        return fg_fail(err, FG_ERR_INTERNAL, "reference: pthread_once failed");
    j->p = p;
    j->dt = p->fwd.q.dtype;
    j->b = p->fwd.q.shape[0];
    j->sq = p->fwd.q.shape[1];
    j->hq = p->fwd.q.shape[2];
    j->d = p->fwd.q.shape[3];
    j->sk = p->fwd.k.shape[1];
    j->hkv = p->fwd.k.shape[2];
    j->group = j->hq / j->hkv;
    j->scale = p->fwd.softmax_scale != 0.0f ? (double)p->fwd.softmax_scale : 1.0 / sqrt((double)j->d);
    j->q_units = (j->sq + BWD_ROWS - 1) / BWD_ROWS;
    j->k_units = (j->sk + BWD_ROWS - 1) / BWD_ROWS;
    const int64_t rows = j->b * j->hq * j->sq;
    size_t nrow = (size_t)(rows > 0 ? rows : 1);
    if (j->want32 && !j->d32 && !(j->d32 = malloc(nrow * sizeof *j->d32)))
        return fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %lld row sums", (long long)rows);
    if (j->wantlow && !j->dlow && !(j->dlow = malloc(nrow * sizeof *j->dlow)))
        return fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %lld row sums", (long long)rows);
    int n1 = thread_count(j->b * j->hq * j->q_units), n2 = thread_count(j->b * j->hkv * j->k_units);
    int n = n1 > n2 ? n1 : n2;
    j->scr = calloc((size_t)n, sizeof *j->scr);
    if (!j->scr)
        return fg_fail(err, FG_ERR_NO_MEMORY, "reference: out of memory for %d thread states", n);
    const size_t d = (size_t)j->d, sk = (size_t)(j->sk > 0 ? j->sk : 1);
    for (int i = 0; i < n; i++) {
        bwd_scratch *s = &j->scr[i];
        s->kd = malloc(sk * d * sizeof *s->kd);
        s->vd = malloc(sk * d * sizeof *s->vd);
        s->p = malloc(16 * sk * sizeof *s->p);
        s->row = malloc(16 * d * sizeof *s->row);
        s->blk = malloc(2 * BWD_ROWS * d * sizeof *s->blk);
        s->chunk = malloc(2 * BWD_ROWS * d * sizeof *s->chunk);
        s->acc = malloc(4 * BWD_ROWS * d * sizeof *s->acc);
        *nthreads = i + 1;
        if (!s->kd || !s->vd || !s->p || !s->row || !s->blk || !s->chunk || !s->acc)
            return fg_fail(err, FG_ERR_NO_MEMORY,
                           "reference: out of memory for the K/V cache of sk=%lld, d=%lld per thread", (long long)j->sk,
                           (long long)j->d);
        s->dp = s->p + 4 * sk;
        s->ds = s->p + 8 * sk;
        s->dsl = s->p + 12 * sk;
        s->dq32 = s->row + 8 * d;
        s->dqlow = s->row + 12 * d;
        s->kv_b = s->kv_h = -1;
        for (int g = 0; g < 3; g++)
            s->f[g].worst_lin = s->f[g].first_nf_lin = -1;
    }
    *nthreads = n;
    return FG_OK;
}

/* Frees the scratch of the first nthreads threads, the scratch array and the D arrays that bwd_init
 * allocated (not a caller's: own32 / ownlow say which are ours). */
static void bwd_free(bwd_job *j, int nthreads, int own32, int ownlow) {
    if (j->scr) {
        for (int i = 0; i < nthreads; i++) {
            bwd_scratch *s = &j->scr[i];
            free(s->kd);
            free(s->vd);
            free(s->p);
            free(s->row);
            free(s->blk);
            free(s->chunk);
            free(s->acc);
        }
        free(j->scr);
        j->scr = NULL;
    }
    if (own32)
        free(j->d32);
    if (ownlow)
        free(j->dlow);
}

/* Runs both passes of j on n threads (pass 2 reads the D that pass 1 stores). */
static void bwd_run(bwd_job *j, int n) {
    run_parallel(j, bwd_q_unit, j->b * j->hq * j->q_units, n);
    run_parallel(j, bwd_k_unit, j->b * j->hkv * j->k_units, n);
}

/* Contract in reference.h. */
fg_status ref_attention_bwd(const ref_bwd_problem *p, ref_mode mode, double *dq, double *dk, double *dv,
                            double *delta, fg_error *err) {
    fg_status st = check_bwd_problem(p, err);
    if (st)
        return st;
    if (mode != REF_32 && mode != REF_LOWP)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: mode must be REF_32 or REF_LOWP");
    if (!dq && elements(&p->fwd.q) > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the output array dq is NULL");
    if ((!dk || !dv) && elements(&p->fwd.k) > 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the output arrays dk and dv must not be NULL");
    bwd_job j;
    memset(&j, 0, sizeof j);
    j.want32 = mode == REF_32;
    j.wantlow = mode == REF_LOWP;
    if (j.want32)
        j.d32 = delta;
    else
        j.dlow = delta;
    j.store = 1; /* dq, dk, dv are NULL only for empty tensors, which no unit touches */
    j.dq = dq;
    j.dk = dk;
    j.dv = dv;
    int n = 0;
    st = bwd_init(&j, p, &n, err);
    if (st == FG_OK)
        bwd_run(&j, n);
    bwd_free(&j, n, j.want32 && !delta, j.wantlow && !delta);
    return st;
}

/* Merges the threads' findings f[g] of j into one gradient report; shape: the gradient's sizes. */
static void grad_merge(const bwd_job *j, int n, int g, const int64_t *shape, ref_grad_report *r) {
    memset(r, 0, sizeof *r);
    int64_t worst = -1, first_nf = -1;
    for (int i = 0; i < n; i++) {
        findings_merge(&j->scr[i].f[g], &r->max_lowp_err, &r->max_err, &r->worst_out, &r->worst_ref, &worst,
                       &r->nonfinite, &first_nf);
    }
    unflatten(worst, shape, 4, r->worst);
    unflatten(first_nf, shape, 4, r->first_nonfinite);
    r->bound = REF_BWD_FACTOR * r->max_lowp_err + REF_BWD_ATOL;
    r->pass = r->nonfinite == 0 && r->max_err <= r->bound;
}

/* Contract in reference.h. */
fg_status ref_check_bwd(const ref_bwd_problem *p, const fg_tensor *dq, const fg_tensor *dk, const fg_tensor *dv,
                        ref_bwd_report *r, fg_error *err) {
    fg_status st = check_bwd_problem(p, err);
    if (st)
        return st;
    if (!dq || !dk || !dv || !r)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: dq, dk, dv and the report must not be NULL");
    const fg_tensor *g[3] = {dq, dk, dv};
    static const char *const names[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        const fg_tensor *like = i == 0 ? &p->fwd.q : &p->fwd.k;
        if ((st = check_like(g[i], names[i], like, i == 0 ? "q" : "k", err)))
            return st;
        if (g[i]->dtype != FG_DTYPE_F16 && g[i]->dtype != FG_DTYPE_BF16 && g[i]->dtype != FG_DTYPE_F32)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: %s.dtype must be F16, BF16 or F32", names[i]);
    }
    bwd_job j;
    memset(&j, 0, sizeof j);
    j.want32 = j.wantlow = 1;
    j.gq = dq;
    j.gk = dk;
    j.gv = dv;
    int n = 0;
    st = bwd_init(&j, p, &n, err);
    if (st == FG_OK) {
        bwd_run(&j, n);
        grad_merge(&j, n, 0, p->fwd.q.shape, &r->dq);
        grad_merge(&j, n, 1, p->fwd.k.shape, &r->dk);
        grad_merge(&j, n, 2, p->fwd.k.shape, &r->dv);
        r->pass = r->dq.pass && r->dk.pass && r->dv.pass;
    }
    bwd_free(&j, n, 1, 1);
    return st;
}

/* Contract in reference.h. */
char *ref_bwd_report_format(const ref_bwd_report *r, char *buf, size_t n) {
    if (!buf || n == 0)
        return buf;
    const ref_grad_report *g[3] = {&r->dq, &r->dk, &r->dv};
    static const char *const names[3] = {"dq", "dk", "dv"};
    int k = snprintf(buf, n, "%s", r->pass ? "ok" : "FAIL");
    for (int i = 0; i < 3 && k >= 0 && (size_t)k < n; i++) {
        const ref_grad_report *e = g[i];
        k += snprintf(buf + k, n - (size_t)k,
                      "%s %s %s: max|out-ref32| %.3g at [%lld,%lld,%lld,%lld] (out %.6g, ref %.6g), bound %.3g "
                      "(max|lowp-ref32| %.3g), non-finite %lld",
                      i ? ";" : ":", names[i], e->pass ? "ok" : "FAIL", e->max_err, (long long)e->worst[0],
                      (long long)e->worst[1], (long long)e->worst[2], (long long)e->worst[3], e->worst_out,
                      e->worst_ref, e->bound, e->max_lowp_err, (long long)e->nonfinite);
        if (e->nonfinite > 0 && k >= 0 && (size_t)k < n)
            k += snprintf(buf + k, n - (size_t)k, " (first at [%lld,%lld,%lld,%lld])",
                          (long long)e->first_nonfinite[0], (long long)e->first_nonfinite[1],
                          (long long)e->first_nonfinite[2], (long long)e->first_nonfinite[3]);
    }
    return buf;
}
