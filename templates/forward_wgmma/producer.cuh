// forward_wgmma/producer.cuh: the producer warpgroup: one thread issues the TMA loads of every tile's Q,
// K and V (and, with the dynamic schedule, hands the tile indices to the consumers); with FP8 its three
// other warps put each V^T stage's keys in the order the consumers' P registers have.
#ifndef FG_FORWARD_WGMMA_PRODUCER_CUH
#define FG_FORWARD_WGMMA_PRODUCER_CUH

#include "common/types.cuh"
#include "common/fg_params.h"
#include "common/tma.cuh"
#include "forward_wgmma/layout.cuh"
#include "forward_wgmma/scheduler.cuh"

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

// Warps 1..3 reorder each V^T stage's keys (fg_vt_reorder_unit) once TMA has filled it, K/V step after
// K/V step, until the producer ends them: after its last load it writes the number of steps to vt_stop
// and completes that step's phase of bar_v with a plain arrival (after the consumers released the
// stage's previous use, so the phase cannot run ahead of the reordering warps). It writes only once every
// warp has arrived on bar_vr for the last real step, so no read of vt_stop meets the write; the next read
// follows the arrival (mbarrier release and acquire). A warp's read is its lane 0's, the lane that arrives,
// so that the order is the one thread's program order (and compute-sanitizer's racecheck sees it).
__device__ __forceinline__ void fg_vt_reorder_run(const fg_fwd_smem &sm, int tid, int lane) {
    for (int step = 0;; step++) {
        const int s = step % FG_STAGES;
        fg_mbar_wait(sm.bar_v(s), (u32)((step / FG_STAGES) & 1));
        int stop = 0; // read by lane 0, the lane that arrives on bar_vr after it, for the warp
        if (lane == 0) asm volatile("ld.shared.b32 %0, [%1];" : "=r"(stop) : "r"(sm.vt_stop()) : "memory");
        if (__shfl_sync(0xffffffffu, stop, 0) == step) break;
        // head_dim rows of FG_VT_ROW_BYTES keys a chunk (FG_PV_SUM's ones rows after them need no reordering)
        constexpr u32 UPC = FG_HEAD_DIM * FG_VT_ROW_BYTES / 16; // 16-byte units of a chunk's V^T
        const u32 sv = sm.s_v + s * FG_V_STAGE_BYTES;
#pragma unroll
        for (int c = 0; c < FG_BLOCK_N / FG_VT_ROW_BYTES; c++)
            for (u32 u = tid - 32; u < UPC; u += 32 * FG_VT_WARPS) fg_vt_reorder_unit(sv + c * FG_VT_CHUNK + 16u * u);
        fg_fence_proxy_async(); // the generic-proxy stores, before the consumers' wgmma reads them
        __syncwarp();
        if (lane == 0) fg_mbar_arrive(sm.bar_vr(s));
    }
}
#endif

// The TMA thread's loop over the CTA's tiles. It counts K/V steps (kv: which stage and phase) and Q loads
// (qn) over all its tiles, as the consumers do; tiles without keys load no Q.
__device__ __forceinline__ void fg_producer_run(const fg_fwd_params &p, const fg_tma_params &tm, const fg_fwd_smem &sm,
                                                int m_blocks, bool dyn) {
    // One K or V tile of key block j into its stage, once the consumers have released the stage's
    // previous use.
    // (V: FG_V_COL_CHUNKS chunks, which differ from K's only in head_dim_v variants)
    auto load_kv_tile = [&](u32 dst, const void *map, u32 full, u32 empty, int use, int j, const fg_tile &t, auto is_v) {
        constexpr int CHUNKS = decltype(is_v)::value ? FG_V_COL_CHUNKS : FG_COL_CHUNKS;
        if (use > 0) fg_mbar_wait(empty, (use - 1) & 1);
        fg_mbar_expect_tx(full, CHUNKS * FG_KV_CHUNK);
#pragma unroll
        for (int c = 0; c < CHUNKS; c++)
            fg_tma_load(dst + c * FG_KV_CHUNK, map, c * FG_CHUNK_COLS, fg_k_row0(t) + j * FG_BLOCK_N, t.kv_head,
                        fg_k_batch(p, t), full);
    };
    // Step `it` of tile t, the producer's K/V step `step` overall: K (if k), then V (if v).
#if FG_USER_MASK_MAP
    fg_tile t;              // the current tile, and the walk over its blocks (holes the block map hides skipped)
    fg_block_walk walk(t);
#endif
    auto load_kv_parts = [&](const fg_tile &t, int it, int step, bool k, bool v) {
#if FG_USER_MASK_MAP
        const int j = walk.block, s = step % FG_STAGES, use = step / FG_STAGES; // (the walk at step it: the loop's)
#else
        const int j = fg_tile_block(t, it), s = step % FG_STAGES, use = step / FG_STAGES;
#endif
        if (k) load_kv_tile(sm.s_k + s * FG_KV_BYTES, &tm.k, sm.bar_k(s), sm.bar_k_empty(s), use, j, t, fg_bool<false>{});
        if (!v) return;
#if FG_FP8
        // V^T: boxes of FG_VT_ROW_BYTES keys (the contiguous dim) by head_dim rows, one a chunk
        if (use > 0) fg_mbar_wait(sm.bar_v_empty(s), (use - 1) & 1);
        fg_mbar_expect_tx(sm.bar_v(s), FG_KV_BYTES);
#pragma unroll
        for (int c = 0; c < FG_BLOCK_N / FG_VT_ROW_BYTES; c++)
            fg_tma_load(sm.s_v + s * FG_V_STAGE_BYTES + c * FG_VT_CHUNK, &tm.v, j * FG_BLOCK_N + c * FG_VT_ROW_BYTES, 0, t.kv_head,
                        t.batch, sm.bar_v(s));
#else
        load_kv_tile(sm.s_v + s * FG_V_STAGE_BYTES, &tm.v, sm.bar_v(s), sm.bar_v_empty(s), use, j, t, fg_bool<true>{});
#endif
    };
    auto load_kv = [&](const fg_tile &t, int it, int step) { load_kv_parts(t, it, step, true, true); };
    // (declared in the order, by FG_Q_STAGES, that keeps the PTX's register numbering and so the SASS as before)
#if FG_Q_STAGES == 1
    int qn = 0, kv = 0;
#else
    int kv = 0, qn = 0;
#endif
    // Hands tile `index` to the consumers (dynamic schedule), once they have read the slot's last one.
    // The count of tiles published lives in shared memory: the producer's 24 registers are full.
    if (dyn) asm volatile("st.shared.b32 [%0], %1;" ::"r"(sm.ring_slot() + 8u), "r"(0) : "memory");
    auto publish = [&](int index) {
        int pn;
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(pn) : "r"(sm.ring_slot() + 8u) : "memory");
        const int b = pn & 1;
        if (pn >= 2) fg_mbar_wait(sm.bar_t_empty(b), (u32)(((pn >> 1) - 1) & 1));
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(sm.ring_slot() + 4u * b), "r"(index) : "memory");
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(sm.ring_slot() + 8u), "r"(pn + 1) : "memory");
        fg_mbar_arrive(sm.bar_t_full(b)); // (release: the index is visible to whoever waits on it)
    };
    // FP8: gridDim.x read where used (an asm the compiler cannot hoist), since holding it across the loop
    // spilled it in 24 registers once the V^T reordering warps' stop (kv, live to the end) came in
    // (d 128 128 x 192 and d 64 192 x 64 with 4 stages, causal: 4 bytes).
    auto grid_x = [&]() {
        if (!FG_FP8) return (int)gridDim.x;
        int g;
        asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(g));
        return g;
    };
    auto next = [&](int index) { return dyn ? atomicAdd(p.tile_counter, 1) + grid_x() : index + grid_x(); };
    int index = blockIdx.x;
    for (; index < fg_tile_count(p, m_blocks); index = next(index)) {
        if (dyn) publish(index);
#if FG_USER_MASK_MAP
        t = fg_tile_at(p, index, m_blocks);
        walk = fg_block_walk(t);
        walk.at(p.mod_aux, t, 0);
#else
        const fg_tile t = fg_tile_at(p, index, m_blocks);
#endif
        if (t.n_blocks == 0) continue;
        // Loads in the order the previous tiles free their buffers: K of the first block (its stage
        // freed by an S FG_STAGES steps back, with two stages and a previous tile of two blocks or more
        // the S of that tile's last block but one), Q (two Q buffers: freed a tile earlier;
        // FG_Q_EARLY: by the previous tile's last S), V of the first block (by the P V FG_STAGES steps
        // back), then the rest: with Q after the first FG_STAGES blocks, a second Q buffer's load
        // would wait for the previous tile's last P V (16-bit d 64 and 128, 512 keys: +9-14% Q first).
        load_kv_parts(t, 0, kv, true, false);
        const int qb = qn % FG_Q_STAGES, quse = qn / FG_Q_STAGES;
        if (quse > 0) fg_mbar_wait(sm.bar_q_empty(qb), (quse - 1) & 1);
        qn++;
        fg_mbar_expect_tx(sm.bar_q(qb), FG_Q_BYTES);
#pragma unroll
        for (int w = 0; w < FG_CONSUMER_WGS; w++)
#pragma unroll
            for (int c = 0; c < FG_COL_CHUNKS; c++)
                fg_tma_load(sm.s_q + qb * FG_Q_BYTES + c * FG_Q_CHUNK + w * 64 * FG_CHUNK_ROW_BYTES, &tm.q, c * FG_CHUNK_COLS,
                            fg_q_row0(t) + 64 * w, t.head, fg_q_batch(p, t), sm.bar_q(qb));
        load_kv_parts(t, 0, kv, false, true);
        for (int it = 1; it < t.n_blocks; it++) {
#if FG_USER_MASK_MAP
            walk.at(p.mod_aux, t, it);
#endif
            load_kv(t, it, kv + it);
        }
        kv += t.n_blocks;
    }
    if (dyn) {
        publish(index); // past the last tile: the consumers stop
        // This CTA takes no more tiles; the last one to get here puts the counter back for the next
        // launch on the stream (every CTA's last atomicAdd on it came before its arrival here).
        __threadfence();
        if (atomicAdd(p.tile_counter + 1, 1) == (int)gridDim.x - 1) {
            __threadfence(); // (the others' counter updates, observed through counter[1], come first)
            p.tile_counter[0] = 0;
            p.tile_counter[1] = 0;
        }
    }
#if FG_FP8
    {
        const int s = kv % FG_STAGES, use = kv / FG_STAGES;
        if (use > 0) fg_mbar_wait(sm.bar_v_empty(s), (use - 1) & 1);
        // the reordering warps are past their reads of vt_stop at every real step (its stage is not used again)
        if (kv > 0) fg_mbar_wait(sm.bar_vr((kv - 1) % FG_STAGES), (u32)(((kv - 1) / FG_STAGES) & 1));
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(sm.vt_stop()), "r"(kv) : "memory");
        fg_mbar_arrive(sm.bar_v(s)); // (release: the count is visible to the warps this wakes)
    }
#endif
}

#endif // FG_FORWARD_WGMMA_PRODUCER_CUH
