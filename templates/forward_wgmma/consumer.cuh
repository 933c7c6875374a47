// forward_wgmma/consumer.cuh: the consumer warpgroups' main loop over a tile's key blocks
// (fg_consumer_mainloop) and its steps: the online softmax of one S block, for FP8 P packed as the P.V
// wgmma's A operand, and O's fp32 level in shared memory (FG_O_FLUSH_SMEM).
#ifndef FG_FORWARD_WGMMA_CONSUMER_CUH
#define FG_FORWARD_WGMMA_CONSUMER_CUH

#include "common/types.cuh"
#include "common/softmax.cuh"
#include "common/wgmma.cuh"
#include "forward_wgmma/layout.cuh"
#include "forward_wgmma/scheduler.cuh"

// The online-softmax step of one S block for this thread's two rows (g and g + 8 of its warp's 16):
// running maximum and sum updated, S replaced by P, and in corr the factor O must be multiplied by. Unlike
// fg_online_softmax it leaves O alone: here the previous block's P V may still be accumulating into it.
// SUM: keep the fp32 row sums (FP8 with FG_PV_SUM: only for the LSE).
// The lazy rescale's allowance (fg_softmax_row's stale, log2 units of P) at 16-bit head_dim above 128, where
// O's rescale is a branch: 1, so P <= 2. FlashAttention-4's 8 (P <= 256) is faster but breaks the error
// bound on rows whose weight sits on a few keys (they lose the exact P = 1 of their largest), and 1 keeps the error within the exact maximum's.
// 0 elsewhere: the 16-bit d <= 128 kernels multiply O every step without a test, and FP8, whose
// P = 2^(8 + stale) must stay below e4m3's 448, is slower with any allowance.
constexpr float FG_STALE = !FG_FP8 && FG_HEAD_DIM > 128 ? 1.f : 0.f;
template <bool SUM>
__device__ __forceinline__ void fg_softmax_stats(float (&s)[1][FG_NT][4], float (&row_max)[1][2],
                                                 float (&row_sum)[1][2], float (&corr)[2], float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; h++)
        corr[h] = fg_softmax_row<FG_NT, SUM>(s[0], h, row_max[0][h], row_sum[0][h], scale_log2, FG_P_SHIFT, FG_STALE);
}

// FG_O_FLUSH_SMEM: O's fp32 level in shared memory, unit dt (four floats) of a thread's; the thread's first
// unit is at oacc_at, the next ones FG_OACC_STRIDE bytes apart.
constexpr u32 FG_OACC_STRIDE = FG_CONSUMER_WGS * 128 * 16;
__device__ __forceinline__ void fg_level_ld(u32 oacc_at, int dt, float (&x)[4]) {
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3]) : "r"(oacc_at + dt * FG_OACC_STRIDE) : "memory");
}
__device__ __forceinline__ void fg_level_st(u32 oacc_at, int dt, const float (&x)[4]) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(oacc_at + dt * FG_OACC_STRIDE), "f"(x[0]),
                 "f"(x[1]), "f"(x[2]), "f"(x[3]) : "memory");
}

#if FG_FP8
// P as the A operand of the FP8 P.V wgmma (m64 k32): a thread holds, per row, A positions 4t..4t+3 (a[0],
// a[1] for rows g, g + 8) and 16 + 4t..19 + 4t (a[2], a[3]) of a 32-key chunk, while the S accumulator gave
// it keys 8j + 2t and 8j + 2t + 1 of the chunk's n8 groups j = 0..3. Instead of moving P between the quad's
// lanes (two to four shuffles and byte permutes per register), the thread packs its own
// pairs, X_0 | X_1 << 16 and X_2 | X_3 << 16, and the V^T tile's keys are put in the same order in shared
// memory once per stage (fg_vt_reorder_unit): A position 4t + {0,1,2,3} of each 16 holds key 2t, 2t + 1,
// 8 + 2t, 9 + 2t. P.V sums over keys, so any order shared by both operands gives the same product.
// (FlashAttention-3 folds a reordering into the V transpose it does in shared memory; here V^T comes
// transposed by TMA, so the producer warpgroup's idle warps reorder it.)
__device__ __forceinline__ void fg_p_to_fp8(const float (&s)[1][FG_NT][4], int kc, u32 (&a)[4]) {
#pragma unroll
    for (int h = 0; h < 2; h++)
        asm("{ .reg .b16 x0, x1, x2, x3;\n"
            "cvt.rn.satfinite.e4m3x2.f32 x0, %3, %2;\n cvt.rn.satfinite.e4m3x2.f32 x1, %5, %4;\n"
            "cvt.rn.satfinite.e4m3x2.f32 x2, %7, %6;\n cvt.rn.satfinite.e4m3x2.f32 x3, %9, %8;\n"
            "mov.b32 %0, {x0, x1};\n mov.b32 %1, {x2, x3}; }"
            : "=r"(a[h]), "=r"(a[2 + h])
            : "f"(s[0][4 * kc][2 * h]), "f"(s[0][4 * kc][2 * h + 1]), "f"(s[0][4 * kc + 1][2 * h]),
              "f"(s[0][4 * kc + 1][2 * h + 1]), "f"(s[0][4 * kc + 2][2 * h]), "f"(s[0][4 * kc + 2][2 * h + 1]),
              "f"(s[0][4 * kc + 3][2 * h]), "f"(s[0][4 * kc + 3][2 * h + 1]));
}
#endif

// k steps of the P.V product: 16 keys (FP8: 32), each four registers of P.
constexpr int FG_PV_KSTEPS = FG_FP8 ? FG_BLOCK_N / 32 : FG_BLOCK_N / 16;

// The consumer main loop of one tile: this warpgroup's 64 rows of tile tl against its tl.n_blocks key
// blocks, K/V steps kv .. kv + tl.n_blocks - 1 of the ring (visited last to first, the masked ones first).
// Takes the tile's Q buffer (Q load qn of the ring) and points s_q_wg at this warpgroup's rows of it; takes
// acc (and with FG_O_FLUSH oacc, with FG_O_FLUSH_SMEM the level at oacc_at) zeroed, row_max -inf, row_sum 0
// and osc 1. Leaves O unnormalized in acc (plus oacc, plus the level times osc), the row maxima and sums,
// every K and V stage it used released to the producer (and with FG_Q_EARLY the Q buffer), kv and qn
// advanced past the tile; the epilogue (fg_epilogue) follows. A tile without key blocks changes nothing.
// row0: this thread's first row (the second is row0 + 8); sc_log2: the softmax scale, log2 domain; p: the
// call's parameters (the model variants' window, softcap and slopes).
template <bool FP32_SUM>
__device__ __forceinline__ void fg_consumer_mainloop(const fg_fwd_params &p, const fg_fwd_smem &sm, const fg_tile &tl,
                                                     int sq, int sk, int cw,
                                                     int lane, int t4, int row0, float sc_log2, u32 oacc_at, int &kv,
                                                     int &qn, u32 &s_q_wg, float (&acc)[1][FG_DT_WITH_SUM][4],
                                                     float (&oacc)[FG_O_FLUSH ? FG_DT_WITH_SUM : 1][4],
                                                     float (&row_max)[1][2], float (&row_sum)[1][2], float (&osc)[2]) {
    const int n_blocks = tl.n_blocks;
    auto stage_of = [&](int i) { return fg_ring_at<FG_STAGES>(i).stage; };
    auto parity_of = [&](int i) { return fg_ring_at<FG_STAGES>(i).full_parity(); };
    // Issues S = Q K^T of K/V step i (one commit group).
    auto issue_qk = [&](int i, float (&sacc)[1][FG_NT][4]) {
        const u32 sk_s = sm.s_k + stage_of(i) * FG_KV_BYTES;
        fg_mbar_wait(sm.bar_k(stage_of(i)), parity_of(i));
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
    // Issues O += P V of K/V step i (one commit group). 16-bit: V read MN-major, 16 keys (two 8-key
    // groups, 16 FG_CHUNK_ROW_BYTES-byte rows) per step; FP8: V^T read K-major, 32 key bytes per step.
    // scale_d 0: the accumulator restarts from 0 (FG_O_FLUSH).
    auto issue_pv = [&](int i, const u32 (&pf)[FG_PV_KSTEPS][4], u32 scale_d) {
        const u32 sv_s = sm.s_v + stage_of(i) * FG_V_STAGE_BYTES;
        fg_mbar_wait(FG_FP8 ? sm.bar_vr(stage_of(i)) : sm.bar_v(stage_of(i)), parity_of(i)); // FP8: once reordered
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
    // Releases a buffer to the producer (one arrival per consumer warp). K and V are released separately:
    // with the overlap below, K of step i is done a step before V of step i. (lane read again, fg_lane_now,
    // where holding it spilled: with O's fp32 level in shared memory.)
    auto release = [&](u32 bar) {
        if ((FG_O_FLUSH_SMEM ? fg_lane_now() : lane) == 0) fg_mbar_arrive(bar);
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
    // The model variants' transforms of every score (FG_SOFTCAP, FG_ALIBI: this tile's head's constants), then
    // the mask of S of step i where needed (the causal diagonal, the end of the keys, a window's edges;
    // fg_row_keys).
    fg_score_mods mods;
    if constexpr (FG_SCORE_MODS) mods = fg_mods_make(p.softcap, p.alibi_slopes, tl.head, p.softmax_scale);
#if FG_USER_SCORE
    const float mod_inv_scale = 1.f / p.softmax_scale; // score_mod's logit back to raw score units
#endif
    // (without a window, the tile's blocks counted from n_blocks as ever: reading them through fg_tile_block
    // moved ptxas's allocation and spilled the FP8 d 128 causal tile 12 bytes)
#if FG_USER_MASK_MAP
    fg_block_walk walk(tl); // (holes the block map hides skipped: the walk steps once a step, before its mask)
    auto block_of = [&](int) { return walk.block; };
#elif FG_BLOCK_SPAN
    auto block_of = [&](int i) { return fg_tile_block(tl, i); };
#else
    auto block_of = [&](int i) { return n_blocks - 1 - i; };
#endif
    auto mask = [&](int i, float (&sacc)[1][FG_NT][4]) {
        if constexpr (FG_SCORE_MODS) {
            // A score's distance from its row's diagonal: row g + 8 h, column 8 nt + e of this thread's is
            // dist[nt - h + 1][e] (row g + 8 sees the diagonal 8 keys on), one subtraction a distinct distance.
            const int j = block_of(i);
            const float base = (float)(row0 + sk - sq - j * FG_BLOCK_N - 2 * t4);
            float dist[FG_NT + 1][2];
#pragma unroll
            for (int k = 0; k <= FG_NT; k++)
#pragma unroll
                for (int e = 0; e < 2; e++) dist[k][e] = base - (float)(8 * (k - 1) + e);
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        sacc[0][nt][2 * h + e] = fg_score_mod(mods, sacc[0][nt][2 * h + e], dist[nt - h + 1][e]);
        }
#if FG_USER_MODS
        {
            // A custom mod (generator/mod.h) on every score, in logit units, before the masks below (which overwrite
            // the keys past sk or a row's diagonal, where a mod may read past its arrays). Its q is the row's
            // position among the keys, row + sk - sq (bottom-right aligned, as the causal mask).
            const int j = block_of(i);
#if FG_USER_MASK
            // the mask's verdict on this warp's 16 rows of the block: a block it keeps whole needs no mask of its
            // own, one it hides whole no evaluation (rows past the sequence are never stored: kept)
            const int w_row = row0 - lane / 4;
            const int verdict = w_row < sq ? fg_mask_verdict(p.mod_aux, tl.batch, tl.head, w_row, w_row + 15, sq, sk, j, j) : FG_IV_KEPT;
#endif
            // (positions also as floats, relative to the thread's first key k0, for the mod's fg.float of them:
            // q - k0 a row, k0 a block, kv - k0 a constant a column; generator/mod_emit.c)
            const int key0 = j * FG_BLOCK_N + 2 * t4;
            const float fk0 = (float)key0;
            // score_mod on every score, then mask_mod under a branch the warp takes together: a block the verdict
            // keeps whole evaluates nothing, one it hides whole only sets -inf (a per-score select of the three
            // had the mask's loads issued at every score of every block)
#if FG_USER_SCORE
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int qpos = row0 + 8 * h + sk - sq;
                const float fqr = (float)(qpos - key0);
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        sacc[0][nt][2 * h + e] = fg_user_score(sacc[0][nt][2 * h + e], p.softmax_scale, mod_inv_scale,
                                                               tl.batch, tl.head, qpos, key0 + 8 * nt + e, fqr, fk0,
                                                               (float)(8 * nt + e), p.mod_aux);
            }
#endif
#if FG_USER_MASK
            if (verdict == FG_IV_HIDDEN) {
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++)
#pragma unroll
                    for (int x = 0; x < 4; x++) sacc[0][nt][x] = FG_NEG_INF;
            } else if (verdict != FG_IV_KEPT) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int qpos = row0 + 8 * h + sk - sq;
                    const float fqr = (float)(qpos - key0);
#pragma unroll
                    for (int nt = 0; nt < FG_NT; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const float keep = fg_user_mask(tl.batch, tl.head, qpos, key0 + 8 * nt + e, fqr, fk0,
                                                            (float)(8 * nt + e), p.mod_aux); // 0, -inf or NaN (bad)
                            float &x = sacc[0][nt][2 * h + e];
                            x = keep == 0.f ? x : keep; // a hidden key -inf whatever its score, a bad one NaN
                        }
                }
            }
#endif
        }
#endif
#if FG_BLOCK_SPAN
        if (!fg_block_masked(tl, i, block_of(i))) return;
#else
        if (i >= tl.n_masked) return;
#endif
        const int j = block_of(i);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = row0 + 8 * h;
#if FG_WINDOW
            const fg_key_span keys = fg_row_keys(row, sq, sk, p.window_left, p.window_right, p.causal_top_left);
            const int limit = keys.hi - j * FG_BLOCK_N - 2 * t4, first = keys.lo - j * FG_BLOCK_N - 2 * t4;
#else
            const int limit = (FG_CAUSAL ? min(sk, row + sk - sq + 1) : sk) - j * FG_BLOCK_N - 2 * t4;
            const int first = 0;
#endif
#pragma unroll
            for (int nt = 0; nt < FG_NT; nt++) {
                if (8 * nt >= limit || (FG_WINDOW && 8 * nt < first)) sacc[0][nt][2 * h] = FG_NEG_INF;
                if (8 * nt + 1 >= limit || (FG_WINDOW && 8 * nt + 1 < first)) sacc[0][nt][2 * h + 1] = FG_NEG_INF;
            }
        }
    };

    // Intra-warpgroup overlap (FlashAttention-3), as written: while the tensor cores run P V of step i - 1,
    // this warpgroup does the softmax of step i, whose S was issued just before. O is rescaled only once
    // that P V has completed. (ptxas moves the wait for that P V up to the start of the softmax: below.)
    u32 pf[FG_PV_KSTEPS][4]; // P of the last step whose softmax is done, for its P V
    if (n_blocks > 0) {
        const auto rq = fg_ring_at<FG_Q_STAGES>(qn);
        const int qb = rq.stage;
        s_q_wg = sm.s_q + qb * FG_Q_BYTES + cw * 64 * FG_CHUNK_ROW_BYTES;
        fg_mbar_wait(sm.bar_q(qb), rq.full_parity());
        qn++;
        float sacc[1][FG_NT][4];
        turn_wait();
        issue_qk(kv, sacc);
        turn_pass();
        fg_wgmma_wait<0>();
        fg_fence_regs(sacc[0]);
        release(sm.bar_k_empty(stage_of(kv)));
#if FG_USER_MASK_MAP
        walk.at(p.mod_aux, tl, 0);
#endif
        mask(0, sacc);
        float corr[2];
        fg_softmax_stats<FP32_SUM>(sacc, row_max, row_sum, corr, sc_log2);
        pack_p(sacc, pf);
#if FG_VARLEN
        // The end block's key rows past the sequence hold whatever follows it (the next sequence, a cache's
        // unused slots): S is masked there, but P = 0 times a NaN or infinity in V is NaN, so the consumers
        // zero those rows of the V stage before any P V reads it, each thread a share, then all consumer
        // warps meet (the condition is the tile's, the same in every warpgroup). Whole rows: the swizzle
        // moves 16-byte units only within a row.
        const int valid = sk - block_of(0) * FG_BLOCK_N;
        if (valid < FG_BLOCK_N) {
            const u32 sv = sm.s_v + stage_of(kv) * FG_V_STAGE_BYTES;
            fg_mbar_wait(sm.bar_v(stage_of(kv)), parity_of(kv));
            const int units = (FG_BLOCK_N - valid) * (FG_CHUNK_ROW_BYTES / 16); // per column chunk
            for (int u = (int)threadIdx.x - 128; u < FG_V_COL_CHUNKS * units; u += FG_CONSUMER_WGS * 128)
                asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(sv + (u / units) * FG_KV_CHUNK +
                                                                              valid * FG_CHUNK_ROW_BYTES + (u % units) * 16),
                             "r"(0u) : "memory");
            fg_fence_proxy_async();
            fg_named_sync(FG_BAR_VZERO, FG_CONSUMER_WGS * 128);
        }
#endif
    }
    for (int it = 1; it < n_blocks; it++) {
        float sacc[1][FG_NT][4];
        turn_wait();
        issue_qk(kv + it, sacc);
        issue_pv(kv + it - 1, pf, FG_FLUSH && (it - 1) % FG_FLUSH_PERIOD == 0 ? 0u : 1u);
        turn_pass();
        fg_wgmma_wait<1>(); // S of step it is in; P V of step it - 1 may still run
        fg_fence_regs(sacc[0]);
        release(sm.bar_k_empty(stage_of(kv + it)));
#if FG_USER_MASK_MAP
        walk.at(p.mod_aux, tl, it);
#endif
        mask(it, sacc);
        float corr[2];
        fg_softmax_stats<FP32_SUM>(sacc, row_max, row_sum, corr, sc_log2);
        // The PTX waits for P V of step it - 1 here, after the softmax, but ptxas puts the WARPGROUP.DEPBAR
        // before the softmax's first instruction (it sees no dependency between them), so each warpgroup
        // runs its softmax after its own P V and the overlap is the pingpong's alone. Forcing the written
        // order (a branch on the softmax's result before the wait) is slower (bf16 0.985x, e4m3 0.979x).
        fg_wgmma_wait<0>();
        fg_fence_regs(acc[0]);
        release(sm.bar_v_empty(stage_of(kv + it - 1)));
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
                fg_level_ld(oacc_at, dt, x);
#pragma unroll
                for (int e = 0; e < 4; e++) x[e] = fmaf(x[e], osc[e / 2], acc[0][dt][e]);
                fg_level_st(oacc_at, dt, x);
            }
            osc[0] = osc[1] = 1.f;
        }
#endif
        pack_p(sacc, pf);
    }
    if (n_blocks > 0) {
        // FG_Q_EARLY: the tile's last S has been read (waited for above), so Q goes back (here rather than
        // in the loop's last step: a branch in the loop costs d 64/128 2-5% at long sequences)
        if (FG_Q_EARLY) release(sm.bar_q_empty(fg_ring_at<FG_Q_STAGES>(qn - 1).stage));
        turn_wait();
        issue_pv(kv + n_blocks - 1, pf, FG_FLUSH && (n_blocks - 1) % FG_FLUSH_PERIOD == 0 ? 0u : 1u);
        turn_pass();
        fg_wgmma_wait<0>();
        fg_fence_regs(acc[0]);
        release(sm.bar_v_empty(stage_of(kv + n_blocks - 1)));
    }
    kv += n_blocks;
}

#endif // FG_FORWARD_WGMMA_CONSUMER_CUH
