/* reference.c: the CPU reference of the attention forward pass (see reference.h).
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
#include "reference.h"

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
    /* ref_check_fwd's running findings, merged after the threads end; "lin" = row-major logical index */
    double max_err;         /* max |out - ref32| */
    int64_t worst_lin;      /* its element, -1 when none */
    double worst_out;       /* the output there */
    double worst_ref;       /* ref32 there */
    double max_lowp;        /* max |ref_lowp - ref32| */
    int64_t nonfinite;      /* NaN/Inf outputs */
    int64_t first_nf_lin;   /* first of them, -1 when none */
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
    double m = -INFINITY;
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
    }

    /* P, its rounded copy, and l from the unrounded P. FP8 scales P by 2^8 (exactly, so the lowp row sum
     * is 2^8 l) before rounding it to e4m3, using (0, 256] of the format's range. */
    double l = 0;
    for (int64_t t = 0; t < n; t++) {
        sc[t] = exp(sc[t] - m);
        pl[t] = j->fp8 ? round_to_e4m3(ldexp(sc[t], 8)) : round_to(j->dt, sc[t]);
        l += sc[t];
    }
    const double l_low = j->fp8 ? ldexp(l, 8) : l;

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
        for (int64_t x = 0; x < j->d; x++) {
            double out = elem_float(j->odt, j->out, bi, i, h, x);
            double lowp = fabs(s->olow[x] - s->o32[x]);
            if (lowp > s->max_lowp)
                s->max_lowp = lowp;
            if (!isfinite(out)) {
                if (s->nonfinite++ == 0 || lin0 + x < s->first_nf_lin)
                    s->first_nf_lin = lin0 + x;
                continue;
            }
            double e = fabs(out - s->o32[x]);
            if (s->worst_lin < 0 || e > s->max_err || (e == s->max_err && lin0 + x < s->worst_lin)) {
                s->max_err = e;
                s->worst_lin = lin0 + x;
                s->worst_out = out;
                s->worst_ref = s->o32[x];
            }
        }
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
                bad = e > REF_LSE_ATOL + REF_LSE_RTOL * fabs(ref_lse);
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
        s->worst_lin = s->first_nf_lin = s->lse_worst_lin = s->lse_bad_lin = -1;
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
        if (s->max_lowp > r->max_lowp_err)
            r->max_lowp_err = s->max_lowp;
        if (s->worst_lin >= 0 &&
            (worst < 0 || s->max_err > r->max_err || (s->max_err == r->max_err && s->worst_lin < worst))) {
            worst = s->worst_lin;
            r->max_err = s->max_err;
            r->worst_out = s->worst_out;
            r->worst_ref = s->worst_ref;
        }
        r->nonfinite += s->nonfinite;
        if (s->first_nf_lin >= 0 && (first_nf < 0 || s->first_nf_lin < first_nf))
            first_nf = s->first_nf_lin;
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
                normal_pair(f->key, (uint64_t)lin >> 1, &z[0], &z[1]);
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
fg_status ref_fill_normal(const fg_tensor *t, uint64_t seed, fg_error *err) {
    if (!t)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the tensor to fill is NULL");
    fg_status st = check_view(t, "tensor", 4, err);
    if (st)
        return st;
    if (t->dtype != FG_DTYPE_F16 && t->dtype != FG_DTYPE_BF16 && !is_fp8(t->dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: only F16, BF16, E4M3 and E5M2 tensors can be filled");
    fill_job f = {t, mix64(seed + 0x9E3779B97F4A7C15ull), t->shape[0] * t->shape[1] * t->shape[2], 0};
    if (f.rows == 0 || t->shape[3] == 0)
        return FG_OK;
    f.rows_per_unit = 1 + 65536 / t->shape[3]; /* about 64K elements per unit */
    int64_t units = (f.rows + f.rows_per_unit - 1) / f.rows_per_unit;
    run_parallel(&f, fill_unit, units, thread_count(units));
    return FG_OK;
}
