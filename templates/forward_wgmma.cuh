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
//   source also lets a warpgroup's softmax overlap its own P V; the SASS does not: see the P V wait below.)
//   At the end of a tile O /= l is staged in the warpgroup's Q rows and written by a TMA store (16-bit with
//   two Q buffers), or goes from the registers to global memory (FG_O_DIRECT: FP8, and every tile with one
//   Q buffer); the LSE goes straight to global memory. (FP8 at
//   head_dim 64/128: l comes from the P.V wgmma itself, FG_PV_SUM; the P.V accumulator goes into fp32
//   registers every FG_O_FLUSH steps, since FP8 wgmma accumulates with about 14 bits; O goes out from
//   registers.)
// TMA zero-fills rows past the end of Q, K and V, so padded keys give S = 0 (then masked) and P.V adds 0.
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
// The roles live in forward_wgmma/: layout.cuh (constants, the shared-memory map fg_fwd_smem), scheduler.cuh
// (tiles), producer.cuh (fg_producer_run, fg_vt_reorder_run), consumer.cuh (main-loop steps), epilogue.cuh.
// The consumer main loop and epilogue stay here as lambdas over this function's locals: moved into functions
// (over a state struct, or taking the locals by reference) they compile to different code, because the S and
// P registers carried from tile to tile and O's accumulator registers are allocated differently.
extern "C" __global__ void __launch_bounds__(FG_THREADS, 1)
fg_attention_fwd_kernel(const __grid_constant__ fg_fwd_params p, const __grid_constant__ fg_tma_params tm) {
    extern __shared__ __align__(1024) unsigned char fg_smem[];
    const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;
    const int sq = p.seqlen_q, sk = p.seqlen_k;
    const int m_blocks = (sq + FG_BLOCK_M - 1) / FG_BLOCK_M;
    auto n_tiles = [&]() { return fg_tile_count(p, m_blocks); };
    const fg_fwd_smem sm = fg_fwd_smem_at((fg_smem_addr(fg_smem) + 1023u) & ~1023u);
    const u32 s_q = sm.s_q, s_k = sm.s_k, s_v = sm.s_v, s_oacc = sm.s_oacc;
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
            const u32 addr = s_v + (sc / CH) * FG_V_STAGE_BYTES + (sc % CH) * FG_VT_CHUNK + FG_HEAD_DIM * FG_VT_ROW_BYTES + (u % UNITS) * 16;
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
    u32 s_q_wg = s_q + cw * 64 * FG_CHUNK_ROW_BYTES; // this warpgroup's rows of the current tile's Q buffer

    auto stage_of = [&](int i) { return fg_ring_at<FG_STAGES>(i).stage; };
    auto parity_of = [&](int i) { return fg_ring_at<FG_STAGES>(i).full_parity(); };
    // Issues S = Q K^T of K/V step i (one commit group).
    auto issue_qk = [&](int i, float (&sacc)[1][FG_NT][4]) {
        const u32 sk_s = s_k + stage_of(i) * FG_KV_BYTES;
        fg_mbar_wait(bar_k(stage_of(i)), parity_of(i));
        fg_fence_regs(sacc[0]);
        fg_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < FG_HEAD_DIM * FG_ELEM_BYTES / 32; kk++) {
            // k step kk (16 elements, FP8 32: 32 bytes either way): column chunk kk / (FG_CHUNK_ROW_BYTES / 32), 32 bytes
            // per step inside it (the descriptor's start moves inside the swizzle atom; the hardware applies
            // the XOR to the full address).
            const u32 c = kk / (FG_CHUNK_ROW_BYTES / 32), off = (kk % (FG_CHUNK_ROW_BYTES / 32)) * 32;
            fg_wgmma_qk(sacc[0], fg_desc_kmajor(s_q_wg + c * FG_Q_CHUNK + off),
                        fg_desc_kmajor(sk_s + c * FG_KV_CHUNK + off), kk > 0 ? 1u : 0u);
        }
        fg_wgmma_commit();
    };
    float acc[1][FG_DT_WITH_SUM][4];
    float oacc[FG_O_FLUSH ? FG_DT_WITH_SUM : 1][4]; // FP8: the fp32 level of O's accumulation (FG_O_FLUSH)
    constexpr u32 FG_OACC_STRIDE = FG_CONSUMER_WGS * 128 * 16; // FG_O_FLUSH_SMEM: bytes between a thread's units
    const u32 oacc_at = s_oacc + (u32)(tid - 128) * 16u; // ... and its first unit
    auto level_ld = [&](int dt, float (&x)[4]) { // unit dt of this thread's level
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3]) : "r"(oacc_at + dt * FG_OACC_STRIDE) : "memory");
    };
    auto level_st = [&](int dt, const float (&x)[4]) {
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(oacc_at + dt * FG_OACC_STRIDE), "f"(x[0]),
                     "f"(x[1]), "f"(x[2]), "f"(x[3]) : "memory");
    };
    // k steps of the P.V product: 16 keys (FP8: 32), each four registers of P.
    constexpr int FG_PV_KSTEPS = FG_FP8 ? FG_BLOCK_N / 32 : FG_BLOCK_N / 16;
    // Issues O += P V of K/V step i (one commit group). 16-bit: V read MN-major, 16 keys (two 8-key
    // groups, 16 FG_CHUNK_ROW_BYTES-byte rows) per step; FP8: V^T read K-major, 32 key bytes per step.
    // scale_d 0: the accumulator restarts from 0 (FG_O_FLUSH).
    auto issue_pv = [&](int i, const u32 (&pf)[FG_PV_KSTEPS][4], u32 scale_d) {
        const u32 sv_s = s_v + stage_of(i) * FG_V_STAGE_BYTES;
        fg_mbar_wait(FG_FP8 ? bar_vr(stage_of(i)) : bar_v(stage_of(i)), parity_of(i)); // FP8: once reordered
        fg_fence_regs(acc[0]);
        fg_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < FG_PV_KSTEPS; kk++)
            fg_wgmma_pv(acc[0], pf[kk],
                        FG_FP8 ? fg_desc_kmajor<FG_VT_ROW_BYTES>(sv_s + (kk * 32 / FG_VT_ROW_BYTES) * FG_VT_CHUNK + kk * 32 % FG_VT_ROW_BYTES)
                               : fg_desc_mnmajor(sv_s + kk * 16 * FG_CHUNK_ROW_BYTES, FG_KV_CHUNK),
                        kk > 0 ? 1u : scale_d);
        fg_wgmma_commit();
    };
    // P in the A-operand layout: 16-bit, packed straight from the S accumulator (the layouts agree); FP8,
    // converted and packed in V^T's reordered key order (fg_p_to_fp8).
    auto pack_p = [&](const float (&sacc)[1][FG_NT][4], u32 (&pf)[FG_PV_KSTEPS][4]) {
#pragma unroll
        for (int kk = 0; kk < FG_PV_KSTEPS; kk++) {
#if FG_FP8
            fg_p_to_fp8(sacc, kk, pf[kk]);
#else
            fg_pack_a(sacc[0][2 * kk], sacc[0][2 * kk + 1], pf[kk]);
#endif
        }
    };
    // Releases a tile to the producer (one arrival per consumer warp). K and V are released separately:
    // with the overlap below, K of step i is done a step before V of step i.
    // (lane read again, fg_lane_now, where holding it spilled: with O's fp32 level in shared memory here, with
    // three consumer warpgroups in take below)
    auto lane_is_0 = [&](bool reread) { return (reread ? fg_lane_now() : lane) == 0; };
    auto release = [&](u32 bar) {
        if (lane_is_0(FG_O_FLUSH_SMEM)) fg_mbar_arrive(bar);
    };
    // Pingpong (FlashAttention-3): the consumer warpgroups take turns issuing their GEMMs, so that one's
    // softmax runs while another's GEMMs occupy the tensor cores. Warpgroup cw waits at named barrier
    // FG_BAR_SCHED + cw until the previous one (cyclically) has issued, and passes the turn on after
    // issuing. Every warpgroup of a CTA runs the same steps, so the turns never deadlock; the last pass
    // is left unconsumed when the CTA exits.
    // (With O's fp32 level in shared memory, cw is read again from %tid.x at each turn: kept live, ptxas
    // spilled it at d 64 with three consumer warpgroups.)
    auto turn_cw = [&]() { return FG_O_FLUSH_SMEM ? (int)((u32)fg_tid_now() / 128u) - 1 : cw; };
    auto turn_wait = [&]() {
        if (FG_CONSUMER_WGS > 1) fg_named_sync(FG_BAR_SCHED + turn_cw(), 256);
    };
    auto turn_pass = [&]() {
        if (FG_CONSUMER_WGS > 1) fg_named_arrive(FG_BAR_SCHED + (turn_cw() + 1) % FG_CONSUMER_WGS, 256);
    };
    if (FG_CONSUMER_WGS > 1 && cw == FG_CONSUMER_WGS - 1) fg_named_arrive(FG_BAR_SCHED, 256); // warpgroup 0 goes first

    int kv = 0, qn = 0, cn = 0;
    // The next tile's index from the producer (dynamic schedule); each warp releases the slot once read.
    auto take = [&]() {
        const int b = cn & 1;
        fg_mbar_wait(bar_t_full(b), (u32)((cn >> 1) & 1));
        int index;
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(index) : "r"(ring_slot + 4u * b) : "memory");
        __syncwarp();
        if (lane_is_0(FG_O_FLUSH_SMEM && FG_CONSUMER_WGS == 3)) fg_mbar_arrive(bar_t_empty(b));
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
        const int n_blocks = tl.n_blocks;
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
            if (FG_O_FLUSH_SMEM) level_st(dt, {0.f, 0.f, 0.f, 0.f});
        }
        // FG_O_FLUSH_SMEM: the rescale the shared-memory level owes since its last flush (a row's corr factors)
        float osc[2] = {1.f, 1.f};

        // Masks S of step i of this tile where needed (the causal diagonal, the end of the keys).
        auto mask = [&](int i, float (&sacc)[1][FG_NT][4]) {
            if (i >= tl.n_masked) return;
            const int j = n_blocks - 1 - i;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = row0 + 8 * h;
                const int limit = (FG_CAUSAL ? min(sk, row + sk - sq + 1) : sk) - j * FG_BLOCK_N - 2 * t4;
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++) {
                    if (8 * nt >= limit) sacc[0][nt][2 * h] = FG_NEG_INF;
                    if (8 * nt + 1 >= limit) sacc[0][nt][2 * h + 1] = FG_NEG_INF;
                }
            }
        };

        // Intra-warpgroup overlap (FlashAttention-3), as written: while the tensor cores run P V of step i - 1,
        // this warpgroup does the softmax of step i, whose S was issued just before. O is rescaled only once
        // that P V has completed. (ptxas moves the wait for that P V up to the start of the softmax: below.)
        u32 pf[FG_PV_KSTEPS][4];
        if (n_blocks > 0) {
            const auto rq = fg_ring_at<FG_Q_STAGES>(qn);
            const int qb = rq.stage;
            s_q_wg = s_q + qb * FG_Q_BYTES + cw * 64 * FG_CHUNK_ROW_BYTES;
            fg_mbar_wait(bar_q(qb), rq.full_parity());
            qn++;
            float sacc[1][FG_NT][4];
            turn_wait();
            issue_qk(kv, sacc);
            turn_pass();
            fg_wgmma_wait<0>();
            fg_fence_regs(sacc[0]);
            release(bar_k_empty(stage_of(kv)));
            mask(0, sacc);
            float corr[2];
            fg_softmax_stats<FP32_SUM>(sacc, row_max, row_sum, corr, sc_log2);
            pack_p(sacc, pf);
        }
        for (int it = 1; it < n_blocks; it++) {
            float sacc[1][FG_NT][4];
            turn_wait();
            issue_qk(kv + it, sacc);
            issue_pv(kv + it - 1, pf, FG_FLUSH && (it - 1) % FG_FLUSH_PERIOD == 0 ? 0u : 1u);
            turn_pass();
            fg_wgmma_wait<1>(); // S of step it is in; P V of step it - 1 may still run
            fg_fence_regs(sacc[0]);
            release(bar_k_empty(stage_of(kv + it)));
            mask(it, sacc);
            float corr[2];
            fg_softmax_stats<FP32_SUM>(sacc, row_max, row_sum, corr, sc_log2);
            // The PTX waits for P V of step it - 1 here, after the softmax, but ptxas puts the WARPGROUP.DEPBAR
            // before the softmax's first instruction (it sees no dependency between them), so each warpgroup
            // runs its softmax after its own P V and the overlap is the pingpong's alone. Forcing the written
            // order (a branch on the softmax's result before the wait) is slower (bf16 0.985x, e4m3 0.979x).
            fg_wgmma_wait<0>();
            fg_fence_regs(acc[0]);
            release(bar_v_empty(stage_of(kv + it - 1)));
            // Above head_dim 128 and for FP8, rescale O only in warps where some row's maximum grew (past
            // FG_STALE): after the first blocks it rarely moves (FlashAttention-4 skips the multiply the same
            // way), and a multiply by exactly 1 changes no bit, so skipping it is exact. At d 64 and 128 the
            // branch splits the step and costs more than the multiply, so they rescale unconditionally.
            // FP8 two-level accumulation (every FG_O_FLUSH steps): the P.V accumulator (O and the row sums) is
            // added into fp32 registers, oacc, and the next P.V starts it again from 0 (scale-d 0).
            // Hopper's FP8 wgmma adds into its accumulator keeping only about 14 bits (DeepSeek-V3's report;
            // vLLM's FlashAttention fork flushes likewise), so an accumulator carried over every key block
            // loses the low bits of each block's contribution where the terms do not cancel: at 32k keys the
            // row sums came out 40% low, and so would O for a V whose columns do not average to 0. Where a
            // row maximum grew both are rescaled before the sum (written as (oacc + acc) * corr, ptxas
            // spilled 40 bytes at d 128).
            if ((FG_HEAD_DIM <= 128 && !FG_FP8) || __any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
                for (int dt = 0; dt < FG_DT_WITH_SUM; dt++) {
                    acc[0][dt][0] *= corr[0];
                    acc[0][dt][1] *= corr[0];
                    acc[0][dt][2] *= corr[1];
                    acc[0][dt][3] *= corr[1];
                    if (FG_O_FLUSH) {
                        oacc[dt][0] *= corr[0];
                        oacc[dt][1] *= corr[0];
                        oacc[dt][2] *= corr[1];
                        oacc[dt][3] *= corr[1];
                    }
                }
            }
            if (FG_O_FLUSH && it % FG_FLUSH_PERIOD == 0) {
#pragma unroll
                for (int dt = 0; dt < FG_DT_WITH_SUM; dt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) oacc[dt][e] += acc[0][dt][e];
            }
#if FG_O_FLUSH_SMEM
            // The shared-memory level takes the factors as they come and applies them at its flush: level =
            // level * osc + acc (acc is rescaled above, as without the level).
            osc[0] *= corr[0];
            osc[1] *= corr[1];
            if (it % FG_FLUSH_PERIOD == 0) {
#pragma unroll
                for (int dt = 0; dt < FG_DT_WITH_SUM; dt++) {
                    float x[4];
                    level_ld(dt, x);
#pragma unroll
                    for (int e = 0; e < 4; e++) x[e] = fmaf(x[e], osc[e / 2], acc[0][dt][e]);
                    level_st(dt, x);
                }
                osc[0] = osc[1] = 1.f;
            }
#endif
            pack_p(sacc, pf);
        }
        if (n_blocks > 0) {
            // FG_Q_EARLY: the tile's last S has been read (waited for above), so Q goes back (here rather than
            // in the loop's last step: a branch in the loop costs d 64/128 2-5% at long sequences)
            if (FG_Q_EARLY) release(bar_q_empty(fg_ring_at<FG_Q_STAGES>(qn - 1).stage));
            turn_wait();
            issue_pv(kv + n_blocks - 1, pf, FG_FLUSH && (n_blocks - 1) % FG_FLUSH_PERIOD == 0 ? 0u : 1u);
            turn_pass();
            fg_wgmma_wait<0>();
            fg_fence_regs(acc[0]);
            release(bar_v_empty(stage_of(kv + n_blocks - 1)));
        }
        kv += n_blocks;

        // Epilogue. A tile without keys (causal, sq > sk) has no Q in shared memory, which may already hold
        // the next tile's: its O is zeros and its LSE -inf, straight to global memory.
        if (n_blocks == 0) {
            u16 *o = (u16 *)p.o + tl.batch * p.o_stride[0] + tl.head * p.o_stride[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = row0 + 8 * h;
                if (row >= sq) continue;
#pragma unroll
                for (int dt = 0; dt < FG_DT; dt++)
                    asm volatile("st.global.b32 [%0], %1;" ::"l"(o + (i64)row * p.o_stride[1] + 8 * dt + 2 * t4),
                                 "r"(0u) : "memory");
                if (p.lse != 0 && t4 == 0)
                    p.lse[tl.batch * p.lse_stride[0] + tl.head * p.lse_stride[1] + (i64)row * p.lse_stride[2]] =
                        FG_NEG_INF;
            }
            continue;
        }
#if FG_O_DIRECT
        // FP8: O (16-bit, twice Q's bytes) does not fit Q's buffer: it goes from the registers to global
        // memory (a thread writes 16 contiguous bytes of a row), and the Q buffer goes back to the producer
        // once every warp of the warpgroup is past its last wgmma. FG_Q_EARLY: O likewise, the Q buffer
        // has gone back already (the barrier kept all the same: without it the compiler moved the
        // epilogue's work into the loop and spilled 8 bytes at head_dim 256).
        fg_named_sync(FG_BAR_EPILOGUE + cw, 128);
        if (!FG_Q_EARLY && tid % 128 == 0) fg_mbar_arrive(bar_q_empty(fg_ring_at<FG_Q_STAGES>(qn - 1).stage));
#if FG_O_FLUSH_SMEM
        // O = the shared-memory level (with the factors it still owes) + the accumulator's last steps
#pragma unroll
        for (int dt = 0; dt < FG_DT_WITH_SUM; dt++) {
            float x[4];
            level_ld(dt, x);
#pragma unroll
            for (int e = 0; e < 4; e++) acc[0][dt][e] = fmaf(x[e], osc[e / 2], acc[0][dt][e]);
        }
#endif
        {
            u16 *o = (u16 *)p.o + tl.batch * p.o_stride[0] + tl.head * p.o_stride[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
#pragma unroll
                for (int dt = 0; dt < FG_DT_WITH_SUM; dt++) // the last steps' P.V into the fp32 part (FG_O_FLUSH)
                    if (FG_O_FLUSH) acc[0][dt][2 * h] += oacc[dt][2 * h], acc[0][dt][2 * h + 1] += oacc[dt][2 * h + 1];
                // O's l: with FG_PV_SUM the sum of the e4m3 P that weighted V (every column of the group holds it)
                const float l = FG_PV_SUM ? acc[0][FG_DT][2 * h] : fg_quad_sum(row_sum[0][h]);
                const float inv = l > 0.f ? o_factor / l : 0.f;
                const float l_lse = FG_PV_SUM && FP32_SUM ? fg_quad_sum(row_sum[0][h]) : l; // the LSE's
                const int row = row0 + 8 * h;
                // 16 bytes a thread: of every four n8 groups 4q..4q+3 the quad's threads swap their pairs
                // (fg_quad_transpose) so that thread t4 stores group 4q + t4's eight columns (st.global.b32 of
                // each pair is slower than the TMA store from shared memory: d 128 0.969x)
#pragma unroll
                for (int q = 0; q < FG_DT / 4; q++) {
                    u32 u[4];
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        u[k] = fg_pack2(acc[0][4 * q + k][2 * h] * inv, acc[0][4 * q + k][2 * h + 1] * inv);
                    fg_quad_transpose(u, t4);
                    if (row < sq)
                        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(o + (i64)row * p.o_stride[1] +
                                                                                      8 * (4 * q + t4)),
                                     "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3]) : "memory");
                }
                if (row >= sq) continue;
                if (p.lse != 0 && t4 == 0)
                    p.lse[tl.batch * p.lse_stride[0] + tl.head * p.lse_stride[1] + (i64)row * p.lse_stride[2]] =
                        fg_row_lse(l_lse, row_max[0][h], sc_ln, FG_P_SHIFT);
            }
        }
        continue;
#endif
        // (Unreachable with FG_O_DIRECT, but left outside an #else: the causal one-Q-buffer kernels' SASS
        // changes without it.)
        // Otherwise O /= l is staged in the warpgroup's Q rows (every warp is past its last wgmma, which
        // read them) and written by a TMA store, which clips rows past seqlen_q; once the store has read
        // shared memory the Q buffer goes back to the producer (the next tile's first K/V blocks, and
        // with two Q buffers its Q, are already loading).
        fg_named_sync(FG_BAR_EPILOGUE + cw, 128);
        // Row r = 16 warp + g + 8 h of the warpgroup, column 8 dt + 2 t4: in the swizzled layout (wgmma.cuh)
        // its 16-byte unit is XOR-ed with xr = g (128-byte rows) or (g / 2) % 4 (64-byte rows), the same
        // for both h. The per-thread parts go through asm so the compiler computes them here rather than
        // hoisting every address out of the tile loop (which spilled them).
        u32 row_base, xr16;
        asm volatile("mov.b32 %0, %1;" : "=r"(row_base) : "r"(s_q_wg + (16 * warp + g) * FG_CHUNK_ROW_BYTES + 4 * t4));
        asm volatile("mov.b32 %0, %1;" : "=r"(xr16) : "r"((FG_CHUNK_ROW_BYTES == 128 ? g : (g / 2) % 4) * 16));
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float l = fg_quad_sum(row_sum[0][h]);
            const float inv = l > 0.f ? o_factor / l : 0.f; // a row with nothing to attend gives O = 0
#pragma unroll
            for (int dt = 0; dt < FG_DT; dt++) {
                const u32 c = (8 * dt) / FG_CHUNK_COLS, col = (8 * dt) % FG_CHUNK_COLS;
                const u32 addr = row_base + c * FG_Q_CHUNK + h * 8 * FG_CHUNK_ROW_BYTES + ((col * 2) ^ xr16);
                const u32 packed = fg_pack2(acc[0][dt][2 * h] * inv, acc[0][dt][2 * h + 1] * inv);
                asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(packed));
            }
            const int row = row0 + 8 * h;
            if (p.lse != 0 && t4 == 0 && row < sq) {
                const float lse = fg_row_lse(l, row_max[0][h], sc_ln, 0.f);
                p.lse[tl.batch * p.lse_stride[0] + tl.head * p.lse_stride[1] + (i64)row * p.lse_stride[2]] = lse;
            }
        }
        fg_fence_proxy_async();
        fg_named_sync(FG_BAR_EPILOGUE + cw, 128);
        if (tid % 128 == 0) {
#pragma unroll
            for (int c = 0; c < FG_COL_CHUNKS; c++)
                fg_tma_store(&tm.o, s_q_wg + c * FG_Q_CHUNK, c * FG_CHUNK_COLS, tl.m0 + 64 * cw, tl.head, tl.batch);
            fg_tma_store_commit_and_drain();
            fg_mbar_arrive(bar_q_empty(fg_ring_at<FG_Q_STAGES>(qn - 1).stage));
        }
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
