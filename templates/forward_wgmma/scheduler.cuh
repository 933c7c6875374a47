// forward_wgmma/scheduler.cuh: the tile scheduler of the sm_90a forward: which tile (query block, head,
// batch, key blocks) an index names, in the order the producer and the consumers both walk.
#ifndef FG_FORWARD_WGMMA_SCHEDULER_CUH
#define FG_FORWARD_WGMMA_SCHEDULER_CUH

#include "common/fg_params.h"
#include "common/softmax.cuh"
#include "forward_wgmma/layout.cuh"

// One tile: query block m_block of (head, batch), with the key blocks it needs (n_blocks, visited last to
// first) of which the first n_blocks - n_unmasked need the mask. Producer and consumers derive the same
// tiles, in the same order, from the tile index alone.
struct fg_tile {
    int m0, head, batch, kv_head, n_blocks, n_masked;
};
__device__ __forceinline__ fg_tile fg_tile_at(const fg_fwd_params &p, int index, int m_blocks) {
    fg_tile t;
    // The heaviest causal blocks first (fg_tile_order); non-causal tiles head by head, sharing K/V in L2.
    int m_block, hb;
    fg_tile_order(index, m_blocks, p.heads_q * p.batch, p.causal_group, m_block, hb);
    t.head = hb % p.heads_q;
    t.batch = hb / p.heads_q;
    t.kv_head = t.head / (p.heads_q / p.heads_kv);
    t.m0 = m_block * FG_BLOCK_M;
    int n_unmasked;
    fg_key_blocks(t.m0, p.seqlen_q, p.seqlen_k, t.n_blocks, n_unmasked);
    t.n_masked = t.n_blocks - n_unmasked;
    return t;
}

// The tile count, recomputed at each use from the parameters (an asm the compiler cannot see through):
// kept in a register across both roles it was spilled (d 64, 3 consumer warpgroups at 160 registers).
__device__ __forceinline__ int fg_tile_count(const fg_fwd_params &p, int m_blocks) {
    int mb;
    asm volatile("mov.b32 %0, %1;" : "=r"(mb) : "r"(m_blocks));
    return mb * p.heads_q * p.batch;
}

#endif // FG_FORWARD_WGMMA_SCHEDULER_CUH
