// forward_wgmma/epilogue.cuh: the consumers' epilogue: O /= l and the LSE of a tile to global memory,
// through a TMA store from the warpgroup's Q rows or straight from the registers (with the quad transpose
// that lets a thread store 16 contiguous bytes of O).
#ifndef FG_FORWARD_WGMMA_EPILOGUE_CUH
#define FG_FORWARD_WGMMA_EPILOGUE_CUH

#include "common/fg_params.h"
#include "common/types.cuh"
#include "common/softmax.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "forward_wgmma/layout.cuh"
#include "forward_wgmma/consumer.cuh"
#include "forward_wgmma/scheduler.cuh"

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

// Row `row`'s place in the LSE (and, FG_O_ROWS, row 0 of the tile's sequence in O, head tl.head): the batch's rows, or with FG_VARLEN and
// packed queries rows q_start on (batch strides 0).
#if FG_VARLEN
#define FG_O_ROWS (u16 *)p.o + tl.batch * p.o_stride[0] + tl.head * p.o_stride[2] + (i64)tl.q_start * p.o_stride[1]
#else
#define FG_O_ROWS (u16 *)p.o + tl.batch * p.o_stride[0] + tl.head * p.o_stride[2]
#endif
__device__ __forceinline__ i64 fg_lse_at(const fg_fwd_params &p, const fg_tile &tl, int row) {
#if FG_VARLEN
    return tl.batch * p.lse_stride[0] + tl.head * p.lse_stride[1] + (i64)(tl.q_start + row) * p.lse_stride[2];
#else
    return tl.batch * p.lse_stride[0] + tl.head * p.lse_stride[1] + (i64)row * p.lse_stride[2];
#endif
}

// The epilogue of one tile, after fg_consumer_mainloop: this warpgroup's 64 rows of O, divided by l, and
// their LSE go to global memory (rows past sq are dropped). Takes what the main loop left: O unnormalized
// in acc (plus oacc with FG_O_FLUSH, plus the level at oacc_at times osc with FG_O_FLUSH_SMEM), the row
// maxima and sums, s_q_wg at this warpgroup's rows of the tile's Q buffer (Q load qn - 1 of the ring).
// Leaves that Q buffer released to the producer (once the TMA store has read it, when O goes through it)
// and acc clobbered. sc_ln: the softmax scale (natural log, for the LSE); o_factor: O's factor (FP8's V
// descale); row0: this thread's first row (the second is row0 + 8).
template <bool FP32_SUM>
__device__ __forceinline__ void fg_epilogue(const fg_fwd_params &p, const fg_tma_params &tm, const fg_fwd_smem &sm,
                                            const fg_tile &tl, int sq, int tid, int cw, int warp, int g, int t4,
                                            int row0, float sc_ln, float o_factor, int qn, u32 s_q_wg, u32 oacc_at,
                                            float (&acc)[1][FG_DT_WITH_SUM][4],
                                            const float (&oacc)[FG_O_FLUSH ? FG_DT_WITH_SUM : 1][4],
                                            const float (&row_max)[1][2], const float (&row_sum)[1][2],
                                            const float (&osc)[2]) {
    // A tile without keys (causal, sq > sk) has no Q in shared memory, which may already hold
    // the next tile's: its O is zeros and its LSE -inf, straight to global memory.
    if (tl.n_blocks == 0) {
        u16 *o = FG_O_ROWS;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = row0 + 8 * h;
            if (row >= sq) continue;
#pragma unroll
            for (int dt = 0; dt < FG_DT; dt++)
                asm volatile("st.global.b32 [%0], %1;" ::"l"(o + (i64)row * p.o_stride[1] + 8 * dt + 2 * t4),
                             "r"(0u) : "memory");
            // (with sinks the row's LSE is its sink's logit: fg_sink_fold)
            if (p.lse != 0 && t4 == 0) p.lse[fg_lse_at(p, tl, row)] = FG_SINKS ? __ldg(p.sinks + tl.head) : FG_NEG_INF;
        }
        return;
    }
#if FG_O_DIRECT
    // FP8: O (16-bit, twice Q's bytes) does not fit Q's buffer: it goes from the registers to global
    // memory (a thread writes 16 contiguous bytes of a row), and the Q buffer goes back to the producer
    // once every warp of the warpgroup is past its last wgmma. FG_Q_EARLY: O likewise, the Q buffer
    // has gone back already (the barrier kept all the same: without it the compiler moved the
    // epilogue's work into the loop and spilled 8 bytes at head_dim 256).
    fg_named_sync(FG_BAR_EPILOGUE + cw, 128);
    if (!FG_Q_EARLY && tid % 128 == 0) fg_mbar_arrive(sm.bar_q_empty(fg_ring_at<FG_Q_STAGES>(qn - 1).stage));
#if FG_O_FLUSH_SMEM
    // O = the shared-memory level (with the factors it still owes) + the accumulator's last steps
#pragma unroll
    for (int dt = 0; dt < FG_DT_WITH_SUM; dt++) {
        float x[4];
        fg_level_ld(oacc_at, dt, x);
#pragma unroll
        for (int e = 0; e < 4; e++) acc[0][dt][e] = fmaf(x[e], osc[e / 2], acc[0][dt][e]);
    }
#endif
    {
        u16 *o = FG_O_ROWS;
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int dt = 0; dt < FG_DT_WITH_SUM; dt++) // the last steps' P.V into the fp32 part (FG_O_FLUSH)
                if (FG_O_FLUSH) acc[0][dt][2 * h] += oacc[dt][2 * h], acc[0][dt][2 * h + 1] += oacc[dt][2 * h + 1];
            // O's l: with FG_PV_SUM the sum of the e4m3 P that weighted V (every column of the group holds it)
            const float l = FG_PV_SUM ? acc[0][FG_DT][2 * h] : fg_quad_sum(row_sum[0][h]);
            float inv = l > 0.f ? o_factor / l : 0.f;
            const float l_lse = FG_PV_SUM && FP32_SUM ? fg_quad_sum(row_sum[0][h]) : l; // the LSE's
            float sink_lse = 0.f; // FG_SINKS (16-bit, o_factor 1): the sink joins the row's sum
            if constexpr (FG_SINKS) fg_sink_fold(l, row_max[0][h], p.scale_log2, __ldg(p.sinks + tl.head), inv, sink_lse);
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
                p.lse[fg_lse_at(p, tl, row)] = FG_SINKS ? sink_lse : fg_row_lse(l_lse, row_max[0][h], sc_ln, FG_P_SHIFT);
        }
    }
#else
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
        fg_mbar_arrive(sm.bar_q_empty(fg_ring_at<FG_Q_STAGES>(qn - 1).stage));
    }
#endif
}

#endif // FG_FORWARD_WGMMA_EPILOGUE_CUH
