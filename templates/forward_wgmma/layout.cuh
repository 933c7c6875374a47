// forward_wgmma/layout.cuh: the constants of the sm_90a forward that every role reads: warpgroups and
// registers per role, the n8 groups of S and O, shared-memory sizes, the Q buffers and FP8's two-level
// accumulation of O, named barriers.
#ifndef FG_FORWARD_WGMMA_LAYOUT_CUH
#define FG_FORWARD_WGMMA_LAYOUT_CUH

#include "common/types.cuh"
#include "common/wgmma.cuh"

constexpr int FG_CONSUMER_WGS = FG_BLOCK_M / 64;          // consumer warpgroups
constexpr int FG_THREADS = (FG_CONSUMER_WGS + 1) * 128;
constexpr int FG_NT = FG_BLOCK_N / 8;            // n8 column groups of S
constexpr int FG_DT = FG_HEAD_DIM / 8;           // n8 column groups of O
constexpr int FG_DT_WITH_SUM = FG_DT + FG_PV_SUM / 8;    // ... and FP8's row-sum group after them (FG_PV_SUM)
static_assert(FG_DT % 4 == 0, "head_dim a multiple of 32: O leaves in 16-byte units of four n8 groups");
// FP8's two-level accumulation: the period of the flush of the P.V accumulator into fp32, O's fp32 level in
// registers (FG_O_FLUSH, head_dim <= 128) or in shared memory (FG_O_FLUSH_SMEM: above, and with three
// consumer warpgroups); 0 for none.
constexpr int FG_FLUSH = FG_O_FLUSH > 0 ? FG_O_FLUSH : FG_O_FLUSH_SMEM;
constexpr int FG_FLUSH_PERIOD = FG_FLUSH > 0 ? FG_FLUSH : 1; // its period, 1 where there is none
// O's fp32 level in shared memory: per consumer thread FG_DT_WITH_SUM 16-byte units (its four accumulator registers
// of each n8 group), unit u of consumer thread c at (u * consumer threads + c) * 16: thread-private, and a
// warp's 16-byte accesses fall on consecutive addresses (no bank conflicts).
constexpr u32 FG_OACC_BYTES = FG_O_FLUSH_SMEM ? FG_DT_WITH_SUM * (FG_BLOCK_M / 64) * 128 * 16 : 0; // row sums too
constexpr u32 FG_Q_BYTES = FG_BLOCK_M * FG_HEAD_DIM * FG_ELEM_BYTES;
constexpr u32 FG_KV_BYTES = FG_BLOCK_N * FG_HEAD_DIM * FG_ELEM_BYTES; // a K tile, or V (FP8: V^T, d x block_n)
constexpr float FG_P_SHIFT = FG_FP8 ? 8.f : 0.f; // FP8: P = 2^8 exp2(...) fills e4m3's range (as forward_mma.cuh)
constexpr u32 FG_Q_CHUNK = FG_BLOCK_M * FG_CHUNK_ROW_BYTES;   // bytes of one column chunk of the Q tile
// Q buffers (FG_Q_STAGES, from the emitter: 2 where shared memory allows): with two, the next tile's Q
// loads while this tile runs; with one (FG_Q_EARLY: the 16-bit and FP8 tiles at head_dim 192 and 256, and
// the widest 16-bit ones at 128) it goes back once every consumer warp's last S wgmma of the tile has read
// it, so the next Q loads during this tile's last softmax and P V, and O goes from the registers to global
// memory in 16-byte units (FG_O_DIRECT, as FP8's O) instead of being staged in the Q rows. (d 256, 512 keys:
// +5-7% over staging O in Q's buffer.)
constexpr u32 FG_KV_CHUNK = FG_BLOCK_N * FG_CHUNK_ROW_BYTES;  // ... of a K or V tile
#define FG_Q_EARLY (FG_Q_STAGES == 1)
static_assert(FG_O_DIRECT == (FG_FP8 || FG_Q_EARLY), "FG_O_DIRECT (emit.c, spec_wgmma_o_direct) as the kernel needs");
// Registers per thread after rebalancing: the producer keeps 24, the consumers share the rest
// (65536 per SM at one CTA per SM, in multiples of 8, at most 240). With one consumer warpgroup nobody needs
// what the producer would give up, and FP8's V^T reordering warps spilled in 24 (d 64 64 x 64, 4 stages,
// causal: 4 bytes), so they keep 40 there.
constexpr int FG_PRODUCER_REGS = FG_FP8 && FG_BLOCK_M == 64 ? 40 : 24;
// Named barriers (0 is __syncthreads): per consumer warpgroup, its epilogue's and its pingpong turn's.
constexpr int FG_BAR_EPILOGUE = 1, FG_BAR_SCHED = 4;
constexpr int FG_CONSUMER_REGS = FG_CONSUMER_WGS == 1 ? 240 : (FG_CONSUMER_WGS == 2 ? 240 : 160);


#endif // FG_FORWARD_WGMMA_LAYOUT_CUH
