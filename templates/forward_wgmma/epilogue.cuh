// forward_wgmma/epilogue.cuh: the epilogue's helpers: the quad transpose that lets a thread store 16
// contiguous bytes of O straight from the registers.
#ifndef FG_FORWARD_WGMMA_EPILOGUE_CUH
#define FG_FORWARD_WGMMA_EPILOGUE_CUH

#include "common/types.cuh"

// A 4 x 4 transpose of u32s across a quad (two butterfly steps): thread t4 gives its u[k] to thread k and
// ends with u[j] = thread j's u[t4]. Every lane of the warp takes part.
__device__ __forceinline__ void fg_quad_transpose(u32 (&u)[4], int t4) {
#pragma unroll
    for (int s = 1; s <= 2; s *= 2)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (k & s) continue;
            const bool up = (t4 & s) != 0; // keeps u[k | s], sends u[k]; else keeps u[k], sends u[k | s]
            const u32 r = __shfl_xor_sync(0xffffffffu, up ? u[k] : u[k | s], s);
            if (up)
                u[k] = r;
            else
                u[k | s] = r;
        }
}


#endif // FG_FORWARD_WGMMA_EPILOGUE_CUH
