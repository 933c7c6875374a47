// tma.cuh: mbarriers and the TMA unit (cp.async.bulk: tensor-map tiles, 1-d bulk copies), written against
// PTX; sm_90 and newer. Used by the sm_90a families and by the mma.sync backward's tma=1 variants (the
// functions are inline, so a target that calls none of them never sees their instructions).
#ifndef FG_COMMON_TMA_CUH
#define FG_COMMON_TMA_CUH

#include "common/types.cuh"

// ---- mbarriers ----
__device__ __forceinline__ void fg_mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
// Arrives once and adds `bytes` to the transaction count the current phase waits for.
__device__ __forceinline__ void fg_mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void fg_mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void fg_mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

// ---- mbarrier rings ----
// A ring of STAGES buffers, each guarded by a "full" mbarrier (the data is in) and an "empty" one (its readers
// are done). Step n, counted from 0 over the ring's whole life, uses buffer n % STAGES for the (n / STAGES)-th
// time: the full barrier's phase to wait for has parity use & 1, and the empty barrier's phase that freed the
// buffer's previous use has parity (use - 1) & 1 (only for use > 0). Stage and phase are both derived from the
// step count, so they advance together and every role that counts the same steps agrees on them. I is the
// count's type: unsigned where the ring has two stages and the count is known non-negative (stage and use are
// then a mask and a shift).
// (The sm_90a forward's producer and its tile-index ring keep the same arithmetic written out: with the
// position passed around as one value ptxas gets another instruction order there, in 24 registers.)
template <int STAGES, typename I = int>
struct fg_ring_pos {
    I stage; // the buffer: step % STAGES
    I use;   // how many times the buffer was used before: step / STAGES
    __device__ __forceinline__ u32 full_parity() const { return (u32)(use & 1); }
    __device__ __forceinline__ u32 empty_parity() const { return (u32)((use - 1) & 1); }
};
template <int STAGES, typename I>
__device__ __forceinline__ fg_ring_pos<STAGES, I> fg_ring_at(I step) {
    return {(I)(step % STAGES), (I)(step / STAGES)};
}

// ---- TMA ----
// A box of the 4-d tensor map at generic address tmap (a __grid_constant__ parameter), coordinates
// innermost first, into shared memory at dst; completes `bytes` of bar's transaction count.
__device__ __forceinline__ void fg_tma_load(u32 dst, const void *tmap, int c0, int c1, int c2, int c3, u32 bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
                 "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}
// `bytes` (a multiple of 16) from global src to shared dst, both 16-byte aligned, by the TMA unit (a 1-d
// bulk copy); completes `bytes` of bar's transaction count.
__device__ __forceinline__ void fg_bulk_load(u32 dst, const void *src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
// Shared memory at src -> a box of the tensor map; rows outside the tensor are not written.
__device__ __forceinline__ void fg_tma_store(const void *tmap, u32 src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(tmap),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
// Waits until this thread's bulk async-groups have read their shared-memory sources (fg_bulk_wait_read:
// the sources may be reused) or have completed (fg_bulk_wait_all: their global writes are done).
__device__ __forceinline__ void fg_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void fg_bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void fg_tma_store_commit_and_drain() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    fg_bulk_wait_read();
}
// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA, wgmma) reads.
__device__ __forceinline__ void fg_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void fg_fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void fg_prefetch_tmap(const void *tmap) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(tmap) : "memory");
}

#endif // FG_COMMON_TMA_CUH
