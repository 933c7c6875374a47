/* convert.c: exact conversions between float and fp16, bf16, e4m3 and e5m2 (round to nearest even, NaN
 * kept, Inf and subnormals exact; FP8 saturating on request), and the decode tables the reference's hot
 * loops read. Contracts in reference.h and ref_internal.h. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include "reference/ref_internal.h"

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

/* The decode tables of the hot loops (ref_internal.h). */
float ref_f16_table[65536];                                /* ref_f16_to_float of every pattern */
float ref_e4m3_table[256];                                 /* ref_e4m3_to_float of every pattern */
float ref_e5m2_table[256];                                 /* ref_e5m2_to_float of every pattern */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;     /* fills them once per process */

/* pthread_once body: decodes every fp16 and fp8 pattern into the tables. */
static void tables_fill(void) {
    for (uint32_t u = 0; u < 65536u; u++)
        ref_f16_table[u] = ref_f16_to_float((uint16_t)u);
    for (uint32_t u = 0; u < 256u; u++) {
        ref_e4m3_table[u] = ref_e4m3_to_float((uint8_t)u);
        ref_e5m2_table[u] = ref_e5m2_to_float((uint8_t)u);
    }
}

/* Contract in ref_internal.h. */
int ref_tables_fill(void) {
    return pthread_once(&tables_once, tables_fill);
}
