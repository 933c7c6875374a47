// forward_wgmma.cuh: the FlashAttention-3 style forward kernel for Hopper (sm_90a): TMA, mbarriers, wgmma,
// warp specialization, intra-warpgroup overlap, pingpong, persistent CTAs.
//
// Grid: one CTA per SM at most (persistent), taking tiles (FG_BLOCK_M query rows of one head) from a
// counter (or in a fixed stride; runtime/forward.c's rt_launch_grid). A CTA has FG_CONSUMER_WGS + 1 warpgroups:
//   warpgroup 0, the producer: gives its registers away (setmaxnreg) and one thread issues TMA loads:
//     per tile K and V of each key block into a ring of FG_STAGES stages that runs on across tiles, and
//     Q into one of FG_Q_STAGES buffers (in the order the buffers come free, below); every
//     buffer has a "full" mbarrier the
//     copy engine completes and an "empty" one the consumer warps arrive at; with FP8 its other three
//     warps put each V^T stage's keys in the order the consumers' P registers have (fg_p_to_fp8);
//   warpgroups 1..FG_CONSUMER_WGS, the consumers: take the registers, and each computes 64 query rows:
//     S = Q K^T       wgmma m64 n{BLOCK_N} k16, both operands in shared memory (K-major)
//     mask            only on the key blocks crossing the causal diagonal or the end of the keys, which
//                     come first (blocks are visited last to first)
//     P = softmax     online, fp32, log2 domain; O rescaled when a row's maximum grows
//     O += P V        wgmma m64 n{HEAD_DIM} k16, P from registers (S's accumulator layout is the A
//                     operand's), V in shared memory read MN-major (no transpose)
//   with S of block j issued together with P V of block j - 1, and the consumer warpgroups taking turns to
//   issue (pingpong), so that one's softmax runs while the other's products occupy the tensor cores. (The
//   source also lets a warpgroup's softmax overlap its own P V; the SASS does not: see the P V wait in
//   fg_consumer_mainloop.)
//   At the end of a tile O /= l is staged in the warpgroup's Q rows and written by a TMA store (16-bit with
//   two Q buffers), or goes from the registers to global memory (FG_O_DIRECT: FP8, and every tile with one
//   Q buffer); the LSE goes straight to global memory. (FP8 at
//   head_dim 64/128: l comes from the P.V wgmma itself, FG_PV_SUM; the P.V accumulator goes into fp32
//   registers every FG_O_FLUSH steps, since FP8 wgmma accumulates with about 14 bits; O goes out from
//   registers.)
// TMA zero-fills rows past the end of Q, K and V, so padded keys give S = 0 (then masked) and P.V adds 0.
// Variable-length sequences (FG_VARLEN, 16-bit): a tile is a query block of one sequence (fg_tile_at reads
// its rows from cu_seqlens_q/k and seqused_k); packed tensors are mapped as one batch of all their rows, so a
// tile's loads run on past its sequence into the next one's rows: those queries' O is never stored (O goes
// from the registers, row by row), those keys are masked, and the V rows under them are zeroed before P V.
#ifndef FG_FORWARD_WGMMA_CUH
#define FG_FORWARD_WGMMA_CUH

#include "common/fg_params.h"
#include "common/types.cuh"
#include "common/softmax.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"

#include "forward_wgmma/layout.cuh"
#include "forward_wgmma/consumer.cuh"
#include "forward_wgmma/epilogue.cuh"
#include "forward_wgmma/producer.cuh"
#include "forward_wgmma/scheduler.cuh"

// Tiles blockIdx.x, then blockIdx.x + gridDim.x, ... or, with p.tile_counter, whichever tile the
// counter hands out next (in fg_tile_at's longest-first order): with gridDim.x = the number of SMs
// (persistent) the producer loads the next tile's K and V while the consumers finish the current one;
// with one CTA per tile the hardware's block scheduler balances tiles of unequal cost. The host chooses
// (runtime/forward.c, rt_launch_grid).
// This kernel sets up the shared memory and its barriers and wires the roles, which live in forward_wgmma/:
//   layout.cuh     constants and the shared-memory map (fg_fwd_smem)
//   scheduler.cuh  the tiles (fg_tile_at, fg_tile_count), walked in the same order by every role
//   producer.cuh   the producer warpgroup (fg_producer_run; FP8, the V^T reorder warps: fg_vt_reorder_run)
//   consumer.cuh   a consumer warpgroup's main loop over one tile's key blocks (fg_consumer_mainloop)
//   epilogue.cuh   its epilogue: O and the LSE of the tile to global memory (fg_epilogue)
// The consumers' tile loop stays here: it takes the next tile (from the producer, dynamic schedule), folds
// FP8's descales into the scales, and clears O and the row statistics before the main loop.
// A tile's sequence lengths in the consumers' loop: its own with FG_VARLEN, else the call's (the same tokens as
// before varlen existed, so that those kernels compile to the same code).
#if FG_VARLEN
#define FG_TILE_SQ tl.sq
#define FG_TILE_SK tl.sk
#else
#define FG_TILE_SQ sq
#define FG_TILE_SK sk
#endif
extern "C" __global__ void __launch_bounds__(FG_THREADS, 1)
fg_attention_fwd_kernel(const __grid_constant__ fg_fwd_params p, const __grid_constant__ fg_tma_params tm) {
    extern __shared__ __align__(1024) unsigned char fg_smem[];
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;
    const int sq = p.seqlen_q, sk = p.seqlen_k; // FG_VARLEN: the grid's bound; a tile's own are tl.sq, tl.sk
    const int m_blocks = (sq + FG_BLOCK_M - 1) / FG_BLOCK_M;
    auto n_tiles = [&]() { return fg_tile_count(p, m_blocks); };
    const fg_fwd_smem sm = fg_fwd_smem_at((fg_smem_addr(fg_smem) + 1023u) & ~1023u);
    auto bar_q = [&](int b) { return sm.bar_q(b); };
    auto bar_q_empty = [&](int b) { return sm.bar_q_empty(b); };
    auto bar_k = [&](int s) { return sm.bar_k(s); };
    auto bar_v = [&](int s) { return sm.bar_v(s); };
    auto bar_k_empty = [&](int s) { return sm.bar_k_empty(s); };
    auto bar_v_empty = [&](int s) { return sm.bar_v_empty(s); };
    const bool dyn = p.tile_counter != 0;
    auto bar_t_full = [&](int b) { return sm.bar_t_full(b); };
    auto bar_t_empty = [&](int b) { return sm.bar_t_empty(b); };
    const u32 ring_slot = sm.ring_slot();
    const u32 vt_stop = sm.vt_stop();
    auto bar_vr = [&](int s) { return sm.bar_vr(s); };

    if (tid == 0) {
#pragma unroll
        for (int b = 0; b < FG_Q_STAGES; b++) {
            fg_mbar_init(bar_q(b), 1);
            // one arrival per consumer warpgroup once its O store has read it (FP8: once it is past its last
            // wgmma; FG_Q_EARLY: one per consumer warp, once its last S wgmma has completed)
            fg_mbar_init(bar_q_empty(b), FG_Q_EARLY ? FG_CONSUMER_WGS * 4 : FG_CONSUMER_WGS);
        }
#pragma unroll
        for (int s = 0; s < FG_STAGES; s++) {
            fg_mbar_init(bar_k(s), 1);
            fg_mbar_init(bar_v(s), 1);
            fg_mbar_init(bar_k_empty(s), FG_CONSUMER_WGS * 4);
            fg_mbar_init(bar_v_empty(s), FG_CONSUMER_WGS * 4);
        }
        for (int b = 0; b < 2; b++) {
            fg_mbar_init(bar_t_full(b), 1);
            fg_mbar_init(bar_t_empty(b), FG_CONSUMER_WGS * 4);
        }
#if FG_FP8
#pragma unroll
        for (int s = 0; s < FG_STAGES; s++) fg_mbar_init(bar_vr(s), FG_VT_WARPS);
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(vt_stop), "r"(-1) : "memory");
#endif
        fg_fence_mbar_init();
    }
    if (FG_PV_SUM) {
        // The ones rows under each V^T chunk of every stage (FG_PV_SUM), 1.0 in V's type; TMA never writes
        // them (its boxes are head_dim rows), and wgmma reads them through the async proxy.
        constexpr int CH = FG_BLOCK_N / FG_VT_ROW_BYTES, UNITS = FG_PV_SUM * FG_VT_ROW_BYTES / 16; // 16-byte units a chunk
        const u32 one = FG_FP8_E5M2 ? 0x3C3C3C3Cu : 0x38383838u;
        for (int u = tid; u < FG_STAGES * CH * UNITS; u += FG_THREADS) {
            const int sc = u / UNITS; // stage * CH + chunk
            const u32 addr = sm.s_v + (sc / CH) * FG_V_STAGE_BYTES + (sc % CH) * FG_VT_CHUNK + FG_HEAD_DIM * FG_VT_ROW_BYTES + (u % UNITS) * 16;
            asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(one) : "memory");
        }
        fg_fence_proxy_async();
    }
    __syncthreads();

    // Both roles count K/V steps (kv: which stage and phase) and Q loads (qn) over all their tiles; tiles
    // without keys load no Q.
    if (wg == 0) {
        // ---- producer ----
        fg_setmaxnreg_dec<FG_PRODUCER_REGS>();
#if FG_FP8
        if (tid >= 32) {
            fg_vt_reorder_run(sm, tid, lane);
            return;
        }
#endif
        if (tid == 0) fg_producer_run(p, tm, sm, m_blocks, dyn);
        return;
    }

    // ---- consumers ----
    fg_setmaxnreg_inc<FG_CONSUMER_REGS>();
    const int cw = wg - 1;             // consumer warpgroup: rows 64 cw .. 64 cw + 63 of the block
    const int warp = (tid / 32) % 4;   // warp inside the warpgroup: rows 16 warp .. + 15 of those
    const int g = lane / 4, t4 = lane % 4;
    u32 s_q_wg = sm.s_q + cw * 64 * FG_CHUNK_ROW_BYTES; // this warpgroup's rows of the current tile's Q buffer

    float acc[1][FG_DT_WITH_SUM][4];
    float oacc[FG_O_FLUSH ? FG_DT_WITH_SUM : 1][4]; // FP8: the fp32 level of O's accumulation (FG_O_FLUSH)
    const u32 oacc_at = sm.s_oacc + (u32)(tid - 128) * 16u; // FG_O_FLUSH_SMEM: this thread's first unit of O's level
    // The pingpong's turns (fg_consumer_mainloop): warpgroup 0 goes first.
    if (FG_CONSUMER_WGS > 1 && cw == FG_CONSUMER_WGS - 1) fg_named_arrive(FG_BAR_SCHED, 256);

    int kv = 0, qn = 0, cn = 0;
    // The next tile's index from the producer (dynamic schedule); each warp releases the slot once read.
    auto take = [&]() {
        const int b = cn & 1;
        fg_mbar_wait(bar_t_full(b), (u32)((cn >> 1) & 1));
        int index;
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(index) : "r"(ring_slot + 4u * b) : "memory");
        __syncwarp();
        // (lane read again, fg_lane_now, where holding it spilled: three consumer warpgroups with O's fp32
        // level in shared memory)
        if ((FG_O_FLUSH_SMEM && FG_CONSUMER_WGS == 3 ? fg_lane_now() : lane) == 0) fg_mbar_arrive(bar_t_empty(b));
        cn++;
        return index;
    };
    // The tile loop, compiled twice where FG_PV_SUM gives O's row sums: with the fp32 row sums as well when
    // the caller asked for the LSE (P's sum before rounding to e4m3, as FlashAttention-3 and cuDNN give it;
    // the sum of the rounded P is up to ~2% off in the log), without them otherwise. O is the same either way.
    // (16-bit and FG_PV_SUM 0: one plain block, so that those kernels compile exactly as before.)
#if FG_PV_SUM
    auto consume = [&](auto fp32_sum) {
    constexpr bool FP32_SUM = decltype(fp32_sum)::value;
#else
    {
    constexpr bool FP32_SUM = true;
#endif
    for (int index = dyn ? take() : (int)blockIdx.x; index < n_tiles(); index = dyn ? take() : index + (int)gridDim.x) {
        const fg_tile tl = fg_tile_at(p, index, m_blocks);
        // The softmax scale (log2 domain and natural) and O's factor: FP8 descales (per tensor or per
        // (batch, KV head)) fold in, as in forward_mma.cuh.
        float sc_log2 = p.scale_log2, sc_ln = p.softmax_scale, o_factor = 1.f;
#if FG_FP8
        {
            float qk = 1.f;
            if (p.q_descale) qk *= p.q_descale[tl.batch * p.q_descale_stride[0] + tl.kv_head * p.q_descale_stride[1]];
            if (p.k_descale) qk *= p.k_descale[tl.batch * p.k_descale_stride[0] + tl.kv_head * p.k_descale_stride[1]];
            if (p.v_descale) o_factor = p.v_descale[tl.batch * p.v_descale_stride[0] + tl.kv_head * p.v_descale_stride[1]];
            sc_log2 *= qk;
            sc_ln *= qk;
        }
#endif
        const int row0 = tl.m0 + 64 * cw + 16 * warp + g; // this thread's rows: row0 and row0 + 8
        float row_max[1][2] = {{FG_NEG_INF, FG_NEG_INF}}, row_sum[1][2] = {{0.f, 0.f}};
#pragma unroll
        for (int dt = 0; dt < FG_DT_WITH_SUM; dt++) {
            acc[0][dt][0] = acc[0][dt][1] = acc[0][dt][2] = acc[0][dt][3] = 0.f;
            if (FG_O_FLUSH) oacc[dt][0] = oacc[dt][1] = oacc[dt][2] = oacc[dt][3] = 0.f;
            if (FG_O_FLUSH_SMEM) fg_level_st(oacc_at, dt, {0.f, 0.f, 0.f, 0.f});
        }
        // FG_O_FLUSH_SMEM: the rescale the shared-memory level owes since its last flush (a row's corr factors)
        float osc[2] = {1.f, 1.f};
        fg_consumer_mainloop<FP32_SUM>(p, sm, tl, FG_TILE_SQ, FG_TILE_SK, cw, lane, t4, row0, sc_log2, oacc_at, kv, qn, s_q_wg, acc, oacc,
                                       row_max, row_sum, osc);
        fg_epilogue<FP32_SUM>(p, tm, sm, tl, FG_TILE_SQ, tid, cw, warp, g, t4, row0, sc_ln, o_factor, qn, s_q_wg, oacc_at, acc,
                              oacc, row_max, row_sum, osc);
    }
#if FG_PV_SUM
    };
    if (p.lse == 0)
        consume(fg_bool<false>{});
    else
        consume(fg_bool<true>{});
#else
    }
#endif
}

#endif // FG_FORWARD_WGMMA_CUH
