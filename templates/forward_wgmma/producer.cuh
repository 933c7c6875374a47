// forward_wgmma/producer.cuh: the producer warpgroup's helpers: FP8's V^T key reordering, run by its
// three warps that issue no TMA load.
#ifndef FG_FORWARD_WGMMA_PRODUCER_CUH
#define FG_FORWARD_WGMMA_PRODUCER_CUH

#include "common/types.cuh"
#include "forward_wgmma/layout.cuh"

#if FG_FP8
// The V^T side of that order, on one 16-byte unit (16 keys of one head_dim row) in place: key pairs
// p0..p7 become p0 p4 p1 p5 p2 p6 p3 p7 (A position pair 2t + u takes key pair 4u + t). The swizzle moves
// whole units, so it does not matter here.
__device__ __forceinline__ void fg_vt_reorder_unit(u32 addr) {
    u32 w0, w1, w2, w3;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(w0), "=r"(w1), "=r"(w2), "=r"(w3) : "r"(addr) : "memory");
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(__byte_perm(w0, w2, 0x5410)),
                 "r"(__byte_perm(w0, w2, 0x7632)), "r"(__byte_perm(w1, w3, 0x5410)), "r"(__byte_perm(w1, w3, 0x7632))
                 : "memory");
}
#endif

#endif // FG_FORWARD_WGMMA_PRODUCER_CUH
