// types.cuh: scalar types and conversions for the generated kernels, written against PTX so the source
// needs no toolkit header (cuda_fp16.h / cuda_bf16.h) at JIT time.
// The prelude defines FG_OUT_IS_BF16 to 1 when the output O is bf16 (for fp16/bf16 variants the output
// and input types are one), FG_FP8 to 1 for e4m3/e5m2 inputs (FG_FP8_E5M2 to 1 for e5m2), and
// FG_ELEM_BYTES to the input element's bytes.
#ifndef FG_COMMON_TYPES_CUH
#define FG_COMMON_TYPES_CUH

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef long long i64;

#if FG_FP8
typedef u8 fg_in_t; // Q, K, V elements as stored
#else
typedef u16 fg_in_t;
#endif

// Two floats -> one register of two 16-bit values (lo in the low half), rounded to nearest even.
__device__ __forceinline__ u32 fg_pack2(float lo, float hi) {
    u32 r;
#if FG_OUT_IS_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

// One register of two 16-bit values (lo in the low half) -> two floats (exact).
__device__ __forceinline__ float2 fg_unpack2(u32 r) {
    float2 f;
#if FG_OUT_IS_BF16
    f.x = __uint_as_float(r << 16);
    f.y = __uint_as_float(r & 0xffff0000u);
#else
    asm("{ .reg .f16 lo, hi; mov.b32 {lo, hi}, %2; cvt.f32.f16 %0, lo; cvt.f32.f16 %1, hi; }"
        : "=f"(f.x), "=f"(f.y) : "r"(r));
#endif
    return f;
}

// The C fragments (fp32, m16n8) of two adjacent n8 tiles, packed to 16 bits, as one A fragment (m16k16)
// of the next product: registers (g, 2t..), (g+8, 2t..), (g, 8+2t..), (g+8, 8+2t..), the layout mma.sync
// and wgmma share. This is how P (and dS) feed the following GEMM straight from registers.
__device__ __forceinline__ void fg_pack_a(const float (&c0)[4], const float (&c1)[4], u32 (&a)[4]) {
    a[0] = fg_pack2(c0[0], c0[1]);
    a[1] = fg_pack2(c0[2], c0[3]);
    a[2] = fg_pack2(c1[0], c1[1]);
    a[3] = fg_pack2(c1[2], c1[3]);
}

// Four floats -> one register of four e4m3 values (a in the low byte), rounded to nearest even and
// saturated to +-448 (the probabilities of the FP8 path live in (0, 256]).
__device__ __forceinline__ u32 fg_pack4_e4m3(float a, float b, float c, float d) {
    u32 lo, hi;
    asm("{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, %2, %1; cvt.u32.u16 %0, t; }" : "=r"(lo) : "f"(a), "f"(b));
    asm("{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, %2, %1; cvt.u32.u16 %0, t; }" : "=r"(hi) : "f"(c), "f"(d));
    return lo | (hi << 16);
}

// 2^x on the special-function unit (MUFU.EX2); exp2(-inf) = +0, which masking relies on.
__device__ __forceinline__ float fg_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// Programmatic dependent launch (sm_90 and newer; launch_items in runtime/launch.c): a kernel launched
// early may run beside the end of the kernel before it on the stream. fg_pdl_wait blocks until that kernel
// has finished and its writes are visible; a thread must pass it before touching anything that kernel
// writes or reads. fg_pdl_launch_dependents lets the next kernel launch once every CTA of this one has
// run it. Both do nothing when the launch did not ask for it, and are left out below sm_90.
__device__ __forceinline__ void fg_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void fg_pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float fg_log2(float x) {
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

#define FG_NEG_INF (-__int_as_float(0x7f800000))

// Generic address of dynamic shared memory -> the 32-bit shared-window address ldmatrix/cp.async take.
// Sequence b's rows in a packed tensor of `total` rows from its offsets cu[b], cu[b + 1] (device memory, read
// through the read-only cache): clamped into [0, total] and never decreasing, so a bad entry moves the rows,
// never outside the tensor.
__device__ __forceinline__ void fg_seq_span(const int *cu, int b, int total, int &start, int &len) {
    const int s = min(max(__ldg(cu + b), 0), total), e = min(max(__ldg(cu + b + 1), s), total);
    start = s;
    len = e - s;
}

__device__ __forceinline__ u32 fg_smem_addr(const void *p) {
    return (u32)__cvta_generic_to_shared(p);
}

// The thread's index and lane, read where they are used: an asm volatile is neither hoisted nor kept, so
// what derives from them is recomputed (a few integer instructions) rather than held in registers across a
// loop, where ptxas would otherwise spill them.
__device__ __forceinline__ int fg_tid_now() {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}
__device__ __forceinline__ int fg_lane_now() {
    int l;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}

// A compile-time bool as a type, so one generic lambda gives a masked and an unmasked instance of a step.
template <bool B>
struct fg_bool {
    static constexpr bool value = B;
};

#endif // FG_COMMON_TYPES_CUH
