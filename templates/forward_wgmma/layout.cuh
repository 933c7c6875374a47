// forward_wgmma/layout.cuh: the constants of the sm_90a forward that every role reads: warpgroups and
// registers per role, the n8 groups of S and O, shared-memory sizes, the Q buffers and FP8's two-level
// accumulation of O, named barriers.
#ifndef FG_FORWARD_WGMMA_LAYOUT_CUH
#define FG_FORWARD_WGMMA_LAYOUT_CUH

#include "common/types.cuh"
#include "common/wgmma.cuh"
#include "common/score_mods.cuh"

constexpr int FG_CONSUMER_WGS = FG_BLOCK_M / 64;          // consumer warpgroups
constexpr int FG_THREADS = (FG_CONSUMER_WGS + 1) * 128;
constexpr int FG_NT = FG_BLOCK_N / 8;            // n8 column groups of S
// V's and O's head dim (head_dim_v variants: varlen=1, 16-bit, both multiples of 64), else head_dim.
#ifndef FG_HEAD_DIM_V
#define FG_HEAD_DIM_V FG_HEAD_DIM
#endif
static_assert(FG_HEAD_DIM_V == FG_HEAD_DIM || (!FG_FP8 && FG_VARLEN && FG_HEAD_DIM % 64 == 0 && FG_HEAD_DIM_V % 64 == 0),
              "V of its own head dim: 16-bit varlen variants, both head dims multiples of 64");
constexpr int FG_DT = FG_HEAD_DIM_V / 8;         // n8 column groups of O
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
constexpr u32 FG_V_BYTES = FG_BLOCK_N * FG_HEAD_DIM_V * FG_ELEM_BYTES; // a 16-bit V tile (V's head dim)
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
// Variable-length sequences (FG_VARLEN, from the emitter: 16-bit only): a tile's rows past its sequence's end
// belong to the next sequence, so O goes from the registers with each row tested (FG_O_DIRECT) rather than
// by a TMA store, which would clip only at the tensor's end.
#ifndef FG_VARLEN
#define FG_VARLEN 0
#endif
static_assert(!(FG_VARLEN && FG_FP8), "variable-length sequences on the sm_90a forward are 16-bit only");
static_assert(FG_VARLEN || !FG_MODS, "the model variants come with FG_VARLEN");
static_assert(FG_O_DIRECT == (FG_FP8 || FG_Q_EARLY || FG_VARLEN), "FG_O_DIRECT (emit.c, spec_wgmma_o_direct) as the kernel needs");
// Registers per thread after rebalancing: the producer keeps 24, the consumers share the rest
// (65536 per SM at one CTA per SM, in multiples of 8, at most 240). With one consumer warpgroup nobody needs
// what the producer would give up, and FP8's V^T reordering warps spilled in 24 (d 64 64 x 64, 4 stages,
// causal: 4 bytes), so they keep 40 there.
// FG_VARLEN's producer holds its tile's sequence rows as well and spilled in 24 (d 128 causal: 4 bytes): it keeps
// 32, and with two consumer warpgroups they take 232 instead of 240. The sum must stay within what the launch
// gave the CTA (65536 / threads, rounded down to 8, a thread): setmaxnreg.inc waits for registers the CTA
// does not have forever (two warpgroups at 240 and a producer at 32 hung).
// A custom mask's producer trims its tiles' key blocks by the mask (scheduler.cuh: fg_mask_trim): 40, where 32
// spilled 12 bytes (a document mask's block map at d 64 and 128); 128 x 40 + 2 x 128 x 232 is the launch's 168 a
// thread exactly.
constexpr int FG_PRODUCER_REGS = (FG_FP8 && FG_BLOCK_M == 64) || (FG_USER_MASK && FG_CONSUMER_WGS <= 2) ? 40 : FG_VARLEN ? 32 : 24;
// Named barriers (0 is __syncthreads): per consumer warpgroup, its epilogue's and its pingpong turn's.
// FG_VARLEN: all consumer warps, once the end block's key rows past the sequence are zeroed (consumer.cuh).
constexpr int FG_BAR_EPILOGUE = 1, FG_BAR_SCHED = 4, FG_BAR_VZERO = 7;
constexpr int FG_CONSUMER_REGS = FG_CONSUMER_WGS == 1 ? 240 : (FG_CONSUMER_WGS == 2 ? (FG_VARLEN ? 232 : 240) : 160);
static_assert(128 * FG_PRODUCER_REGS + FG_CONSUMER_WGS * 128 * FG_CONSUMER_REGS <= 65536 / FG_THREADS / 8 * 8 * FG_THREADS,
              "the warpgroups' registers after setmaxnreg fit what the launch gave the CTA");

// The shared-memory map, from the 1024-byte aligned base of the dynamic shared memory: FG_Q_STAGES Q
// buffers, FG_STAGES K and V stages, O's fp32 level (FG_O_FLUSH_SMEM), then the mbarriers and the tile ring.
constexpr u32 FG_V_STAGE_BYTES = FG_FP8 ? FG_BLOCK_N / FG_VT_ROW_BYTES * FG_VT_CHUNK : FG_V_BYTES; // a V stage
constexpr int FG_V_COL_CHUNKS = FG_HEAD_DIM_V / FG_CHUNK_COLS; // column chunks of a 16-bit V tile
constexpr int FG_VT_WARPS = 3; // FP8: warps 1..3 of the producer warpgroup reorder V^T
struct fg_fwd_smem {
    u32 s_q;    // FG_Q_STAGES Q buffers
    u32 s_k;    // FG_STAGES K stages
    u32 s_v;    // FG_STAGES V stages (FP8: V^T, FG_V_STAGE_BYTES each)
    u32 s_oacc; // FG_O_FLUSH_SMEM: O's fp32 level
    u32 bars;   // the mbarriers, 8 bytes each: Q full and empty, then K, V, K empty, V empty per stage
    static constexpr int QB = 2 * FG_Q_STAGES; // the K/V barriers follow Q's
    __device__ __forceinline__ u32 bar_q(int b) const { return bars + 8u * b; }
    __device__ __forceinline__ u32 bar_q_empty(int b) const { return bars + 8u * (FG_Q_STAGES + b); }
    __device__ __forceinline__ u32 bar_k(int s) const { return bars + 8u * (QB + s); }
    __device__ __forceinline__ u32 bar_v(int s) const { return bars + 8u * (QB + FG_STAGES + s); }
    __device__ __forceinline__ u32 bar_k_empty(int s) const { return bars + 8u * (QB + 2 * FG_STAGES + s); }
    __device__ __forceinline__ u32 bar_v_empty(int s) const { return bars + 8u * (QB + 3 * FG_STAGES + s); }
    // The dynamic schedule (p.tile_counter; runtime/forward.c): the producer takes each tile after the first from
    // a global counter (atomicAdd) and hands its index to the consumers through a ring of two slots, each
    // with a "full" mbarrier (the producer's arrival) and an "empty" one (one arrival per consumer warp,
    // once it has read the slot). An index past the last tile ends both roles.
    // compute-sanitizer racecheck reports the slot's store and load as a hazard although the mbarrier
    // arrive (release) / try_wait (acquire) pair orders them: it flags the same protocol in a minimal
    // kernel whose every hand-off is checked, and reports nothing else here; synccheck is clean.
    __device__ __forceinline__ u32 ring() const { return bars + 8u * (QB + 4 * FG_STAGES); }
    __device__ __forceinline__ u32 bar_t_full(int b) const { return ring() + 8u * b; }
    __device__ __forceinline__ u32 bar_t_empty(int b) const { return ring() + 16u + 8u * b; }
    __device__ __forceinline__ u32 ring_slot() const { return ring() + 32u; } // 2 ints, then the producer's count of published tiles
    // FP8: the V^T reordering (fg_vt_reorder_unit) between TMA and the consumers: per stage a "reordered"
    // mbarrier (one arrival per reordering warp), and the step at which the reordering warps stop (-1
    // until the producer knows it).
    __device__ __forceinline__ u32 vt_stop() const { return ring_slot() + 12u; }
    __device__ __forceinline__ u32 bar_vr(int s) const { return ring() + 48u + 8u * s; }
};
// The map at base (1024-byte aligned: the host asks for 1 KiB of slack).
__device__ __forceinline__ fg_fwd_smem fg_fwd_smem_at(u32 base) {
    fg_fwd_smem sm;
    sm.s_q = base;
    sm.s_k = sm.s_q + FG_Q_STAGES * FG_Q_BYTES;
    sm.s_v = sm.s_k + FG_STAGES * FG_KV_BYTES;
    sm.s_oacc = sm.s_v + FG_STAGES * FG_V_STAGE_BYTES;
    sm.bars = sm.s_oacc + FG_OACC_BYTES;
    return sm;
}

#endif // FG_FORWARD_WGMMA_LAYOUT_CUH
