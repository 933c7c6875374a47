// mma.cuh: the warp-level tensor-core pieces of the mma.sync path (sm_80 and newer):
// ldmatrix from shared memory and mma.m16n8k16 with fp32 accumulation.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4, t = lane % 4:
//   A (16x16, row-major): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B (16x8, "col"):      b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8.., n g)
//   C (16x8, fp32):       c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
// So the C fragments of two adjacent n8 tiles, packed to 16 bits, are exactly an A fragment: this is how
// P = softmax(S) feeds the P.V product straight from registers.
#ifndef FG_COMMON_MMA_CUH
#define FG_COMMON_MMA_CUH

#include "common/types.cuh"

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, which lands in r[i].
__device__ __forceinline__ void fg_ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// Same, each matrix transposed on the way (for V, whose rows are the reduction dimension of P.V).
__device__ __forceinline__ void fg_ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// c += a * b on a 16x8x16 tile, fp16 or bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void fg_mma_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if FG_OUT_IS_BF16
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b on a 16x8x32 tile of FP8 values (sm_89 and newer), fp32 accumulators. A and B are e4m3 or
// e5m2 (AT, BT: 1 for e5m2). The fragments are those of m16n8k16 with every 16-bit element read as two
// bytes: A (16x32): a[0] = (g, 4t..4t+3), a[1] = (g+8, 4t..), a[2] = (g, 16+4t..), a[3] = (g+8, 16+4t..);
// B (32x8): b[0] = (k 4t..4t+3, n g), b[1] = (k 16+4t.., n g); C as for m16n8k16. So ldmatrix (b16) loads
// them from tiles whose rows are 32 bytes of the reduction dimension, exactly as for 16-bit elements.
template <int AT, int BT>
__device__ __forceinline__ void fg_mma_16832_fp8(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    static_assert(!(AT == 1 && BT == 0), "e5m2 x e4m3 is not used and has no branch below");
#if FG_FP8
    if constexpr (AT == 0 && BT == 0)
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else if constexpr (AT == 0 && BT == 1)
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// The S = Q K^T step of one k chunk (16 elements of 16 bits, or 32 of 8 bits): the path's own MMA.
__device__ __forceinline__ void fg_mma_qk(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if FG_FP8
    fg_mma_16832_fp8<FG_FP8_E5M2, FG_FP8_E5M2>(c, a, b0, b1);
#else
    fg_mma_16816(c, a, b0, b1);
#endif
}

#endif // FG_COMMON_MMA_CUH
