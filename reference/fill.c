/* fill.c: deterministic N(0, 1) fills of host views (ref_fill_normal, ref_fill_normal_mean): every
 * element's value is a pure function of (seed, logical index), so a fill does not depend on the thread
 * count or the strides. Contracts in reference.h. */
#include <math.h>
#include <stdint.h>
#include "reference/ref_internal.h"

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
    fg_status st = ref_check_view(t, "tensor", 4, err);
    if (st)
        return st;
    if (t->dtype != FG_DTYPE_F16 && t->dtype != FG_DTYPE_BF16 && !ref_is_fp8(t->dtype))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: only F16, BF16, E4M3 and E5M2 tensors can be filled");
    if (!(mean > -16.f && mean < 16.f))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "reference: the mean to fill with (%g) must lie in (-16, 16)",
                       (double)mean);
    fill_job f = {t, mix64(seed + 0x9E3779B97F4A7C15ull), t->shape[0] * t->shape[1] * t->shape[2], 0, mean};
    if (f.rows == 0 || t->shape[3] == 0)
        return FG_OK;
    f.rows_per_unit = 1 + 65536 / t->shape[3]; /* about 64K elements per unit */
    int64_t units = (f.rows + f.rows_per_unit - 1) / f.rows_per_unit;
    ref_run_parallel(&f, fill_unit, units, ref_thread_count(units));
    return FG_OK;
}


