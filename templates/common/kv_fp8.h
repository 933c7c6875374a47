/* kv_fp8.h: the bit-level dequantization of FP8 K and V (e4m3, e5m2) into 16-bit values of Q's dtype (fp16, bf16),
 * as plain C constants that the serving kernel (serving_kv.cuh) and the host share, so that CI checks every FP8
 * code against the CPU reference's decoder without a GPU (tests/test_reference_numbers.c).
 *
 * An FP8 byte b placed in the high byte of a 16-bit lane (b << 8) already holds the 16-bit format's sign bit. Its
 * 7 bits of exponent and mantissa, moved right by FG_KV8_SHIFT, land in the 16-bit format's exponent and mantissa
 * fields, where they read a value 2^FG_KV8_BIAS_GAP too small (the exponent field now counts from the 16-bit
 * format's bias): one multiply by that power of two (FG_KV8_SCALE_BITS, a 16-bit pattern) gives the exact value,
 * subnormals included (an FP8 subnormal lands on a 16-bit subnormal with the same significand, which the multiply
 * scales exactly). e5m2 into fp16 needs neither: e5m2 is fp16's high byte. Every finite FP8 value is exact in fp16
 * and bf16. NaN and e5m2's infinities do not survive the shift (except e5m2 into fp16): K and V must be finite.
 * The integer work (byte permutes, a shift, a mask) and one 16-bit multiply per pair of values run on the integer
 * and FMA pipes, where conversion instructions (cvt from e4m3x2, then f16 -> f32 -> bf16 for bf16) have a
 * fraction of their throughput, and need nothing newer than sm_80. */
#ifndef FG_COMMON_KV_FP8_H
#define FG_COMMON_KV_FP8_H

/* The bits the FP8 code moves right within its 16-bit lane (e5m2: 1 = e5m2, 0 = e4m3; bf16: 1 = bf16, 0 = fp16). */
#define FG_KV8_SHIFT(e5m2, bf16) ((bf16) ? ((e5m2) ? 3 : 4) : ((e5m2) ? 0 : 1))
/* Those 7 bits within the 16-bit lane after the shift (the sign bit is kept where it is). */
#define FG_KV8_MASK(e5m2, bf16) (0x7f00u >> FG_KV8_SHIFT(e5m2, bf16))
/* The difference of the exponent biases, 16-bit format's minus FP8's: 8 (e4m3 -> fp16), 0 (e5m2 -> fp16), 120
 * (e4m3 -> bf16), 112 (e5m2 -> bf16). */
#define FG_KV8_BIAS_GAP(e5m2, bf16) (((bf16) ? 127 : 15) - ((e5m2) ? 15 : 7))
/* 2^FG_KV8_BIAS_GAP as a 16-bit pattern of the target format (its exponent field bias + gap, mantissa 0). */
#define FG_KV8_SCALE_BITS(e5m2, bf16) \
    ((unsigned)(((bf16) ? 127 : 15) + FG_KV8_BIAS_GAP(e5m2, bf16)) << ((bf16) ? 7 : 10))

#endif
