// bwd_sm80.cuh: the FlashAttention-2 backward pass on the mma.sync path (sm_80 and newer), 16-bit.
//
// Three kernels, launched in order on the caller's stream:
//   fg_bwd_pre_kernel   per query row: D = rowsum(dO * O) and the LSE in the log2 domain (lse * log2 e;
//                       +inf for the padding rows past seqlen_q, so their P is 0) into the workspace;
//                       the fp32 dQ accumulator zeroed; the deterministic mode's semaphores zeroed.
//   fg_bwd_main_kernel  grid (key blocks, query heads, batch). A CTA owns FG_BLOCK_N keys (16 per warp,
//                       or 8 above head_dim 128, where dK and dV of 16 would not fit) of one query head, keeps K and V of its block in shared memory and dK, dV in
//                       registers, and streams the query blocks that see its keys (FG_BLOCK_M rows,
//                       double-buffered with cp.async or TMA: Q, dO, LSE, D; single-buffered where two
//                       stages do not fit, FG_STAGES 1). Per query block, with
//                       mma.m16n8k16 from swizzled shared memory (ldmatrix), in three phases:
//                         1. S^T  = K Q^T, dP^T = V dO^T   (keys x queries; warp tiles of 32 keys x a half
//                            P^T  = exp2(c S^T - lse2)      or quarter of the queries; masked: 0)
//                            dS^T = P^T (dP^T - D)         both to shared memory, 16-bit
//                         2. dV  += P^T dO, dK += dS^T Q    (warp tiles of 32 keys x half of head_dim, or a
//                                                           quarter with 8 keys a warp at multiples of 64, or 16
//                                                           keys x all of it when head_dim is an odd multiple of 16)
//                         3. dQ   = dS K                    (16-row query groups x head_dim slices; 32-row
//                                                           groups with 8 keys a warp at multiples of 64)
//                       dQ is added into the fp32 accumulator: on sm_90 and newer staged in shared memory
//                       and added by the TMA unit, one bulk reduce-add a warp (cp.reduce.async.bulk; the
//                       accumulator in fragment order, fg_dq_index), or above head_dim 128, where the
//                       staging does not fit, by 16-byte reductions from the fragments into that order;
//                       on earlier targets by fp32 atomics from the fragments. In the deterministic mode
//                       the key blocks add one after another in a fixed order (causal descending; otherwise
//                       rotated streams, or ascending), through a semaphore per query block (fg_bwd_turn_rank). dK (times the softmax scale) and dV go to the outputs through the K and
//                       V tiles (MHA; fg_bwd_dkdv_out) or, when query heads share a KV head (GQA), from the
//                       fragments to an fp32 buffer per query head.
//   fg_bwd_post_kernel  dQ = accumulator * scale in the output dtype; with GQA, dK and dV = the sum over
//                       the query heads of a KV head, in head order (so GQA needs no atomics).
// Working on S^T (keys as rows) gives P^T and dS^T the row layout the dV and dK products take as A
// operands; they cross to phases 2 and 3 through shared memory because those phases split the warps
// differently (FlashAttention-2's layout): each warp then reads fewer operand bytes per MMA than a warp
// owning 16 keys for every product did (the first version: 0.48-0.55x FlashAttention-2 on the H200,
// against 0.78-0.94x now; bench/results/2026-11-29-h200-session4/bwd-steps/).

constexpr int FG_THREADS = FG_WARPS * 32;
constexpr int FG_DT = FG_HEAD_DIM / 8;       // n8 tiles of head_dim columns
// The dQ product's warp tiles: 16 query rows x a slice of head_dim, or with 8 keys a warp at head_dim a multiple
// of 64, 32 rows (two m16 tiles) x a slice half as wide (FlashAttention-2's layout there): the same dQ registers,
// fewer ldmatrix of K per MMA.
constexpr int FG_QM = fg_bwd_qm(FG_BLOCK_M, FG_BLOCK_N, FG_WARPS, FG_HEAD_DIM); // (bwd_tiles.h)
constexpr int FG_QG = FG_BLOCK_M / (16 * FG_QM); // query groups of the dQ product, 16 x FG_QM rows each
constexpr int FG_DSPLIT = FG_WARPS / FG_QG;      // warps sharing a query group, each a slice of head_dim
constexpr int FG_DQT = FG_DT / FG_DSPLIT;    // n8 tiles of dQ per warp
constexpr int FG_DS_CH = FG_BLOCK_M / 8;     // 16-byte chunks of a P^T or dS^T row (queries)
constexpr u32 FG_KV_BYTES = FG_BLOCK_N * FG_HEAD_DIM * 2;
constexpr u32 FG_QB_BYTES = FG_BLOCK_M * FG_HEAD_DIM * 2;
constexpr u32 FG_DS_BYTES = FG_BLOCK_N * FG_BLOCK_M * 2;
constexpr u32 FG_ROW_BYTES = FG_BLOCK_M * 4; // the LSE (or D) of one query block, fp32
// sm_90 and newer (FG_DQ_STAGED, set by the emitter from spec_bwd_dq_staged, which also sizes the shared
// memory) stage a query block's dQ in shared memory and add it into the accumulator with bulk reduce-adds
// (cp.reduce.async.bulk, done by the TMA unit), one per warp (mma.sync) or warpgroup (bwd_sm90.cuh) a
// block. Element-wise atomics from the fragments made L2 the bottleneck (ncu on the H200: L2 81% busy, SM
// pipes 24%): every warp instruction touched 8 half-used sectors. A bulk reduce-add per row, the next
// version, left the adds issued from a loop over the lanes (the instruction takes uniform registers):
// 13-21% of the sm_90a kernel's stall samples (ncu, d 128 and d 64, 4k; session 9), so the staged
// accumulator is kept in the MMA fragments' order (fg_dq_index) and each warp's or warpgroup's part of a
// block is one contiguous run of floats, in shared memory and in global memory alike, written by 16-byte
// stores free of bank conflicts; the post kernel reads it back through the same map.
// Where the staging does not fit (sm_90+ tiles above head_dim 128: 64 KiB more at d 256) the warps add their
// fragments straight from registers, in the same fragment order, each lane's four floats of an n8 step with
// one 16-byte reduction (red.global.add.v4.f32, sm_90+): a warp instruction covers 512 contiguous bytes
// (16 whole sectors) where scalar atomics on a row-major accumulator touched 8 half-used ones. (ncu, H200,
// d 256 4k, the scalar version: L2 75% busy, 7.5 of 18.6 cycles between a warp's instructions stalled on
// the LSU queue; FlashAttention-2's kernel ran 1.8x faster.)
#if FG_DQ_STAGED
#define FG_DQ_VEC 0
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FG_DQ_VEC 1
#else
#define FG_DQ_VEC 0
#endif
// The accumulator in fragment order (fg_dq_index) with either; row-major with scalar atomics (before sm_90).
#define FG_DQ_FRAG (FG_DQ_STAGED || FG_DQ_VEC)
#if FG_WGMMA_BWD
// a warpgroup: 64 rows x its columns; with dQ^T (FG_BW_DQ_T) the block's FG_BLOCK_M (80) rows x its columns
constexpr int FG_DQ_G = FG_BW_DQ_T ? FG_BLOCK_M : 64, FG_DQ_W = FG_BW_DQ_N;
#else
constexpr int FG_DQ_G = 16 * FG_QM, FG_DQ_W = FG_DQT * 8; // a warp: its 16 or 32 rows x its slice of head_dim
#endif
// The host's spec_bwd_rows_block: 80 with dQ^T, else 64. The rows of a post-kernel CTA (whole groups) and
// of a Q or dO TMA box (fg_bwd_tma_block).
constexpr int FG_BW_ROWS = FG_BW_DQ_T ? FG_BLOCK_M : 64;
static_assert(FG_BW_ROWS % FG_DQ_G == 0 && FG_HEAD_DIM % FG_DQ_W == 0 && FG_DQ_W % 8 == 0, "dQ accumulator groups");
// Where element (row, col) of a (batch, head)'s dQ accumulator lives, in floats from that head's row 0.
// Before sm_90 without FG_DQ_STAGED (scalar atomics): row-major. Else: groups of FG_DQ_G rows, each FG_DQ_G x head_dim
// floats; a group's column slices of FG_DQ_W one after another; inside a slice its 16-row tiles, and in
// a tile its n8 column steps i, each 32 lanes x 4 floats: lane (row % 8) * 4 + (col % 8) / 2 holds
// (row, col), (row, col + 1), (row + 8, col), (row + 8, col + 1) at col even, row % 16 < 8 (the m16n8
// accumulator fragment, which is also wgmma's for each 16 rows of a warpgroup's 64). With dQ^T (FG_BW_DQ_T:
// wgmma's m64 n80 accumulator of a warpgroup's 64 columns x the block's 80 rows) the roles swap: inside a
// slice its 16-column tiles (the warps), in a tile its n8 row steps, each 32 lanes x 4 floats: lane (col % 8)
// * 4 + (row % 8) / 2 holds (row, col), (row + 1, col), (row, col + 8), (row + 1, col + 8) at row even, col %
// 16 < 8.
__device__ __forceinline__ i64 fg_dq_index(i64 row, int col) {
#if FG_BW_DQ_T
    const int r = (int)(row % FG_DQ_G), sl = col / FG_DQ_W, c = col % FG_DQ_W;
    return (row - r) * FG_HEAD_DIM + sl * (FG_DQ_G * FG_DQ_W) + ((c / 16) * (FG_DQ_G / 8) + r / 8) * 128 +
           ((c % 8) * 4 + (r % 8) / 2) * 4 + ((c / 8) % 2) * 2 + r % 2;
#elif FG_DQ_FRAG
    const int r = (int)(row % FG_DQ_G), sl = col / FG_DQ_W, c = col % FG_DQ_W;
    return (row - r) * FG_HEAD_DIM + sl * (FG_DQ_G * FG_DQ_W) + ((r / 16) * (FG_DQ_W / 8) + c / 8) * 128 +
           ((r % 8) * 4 + (c % 8) / 2) * 4 + ((r / 8) % 2) * 2 + c % 2;
#else
    return row * FG_HEAD_DIM + col;
#endif
}
static_assert(FG_BLOCK_N == 16 * FG_WARPS || FG_BLOCK_N == 8 * FG_WARPS, "16 or 8 keys per warp");
static_assert(FG_WGMMA_BWD || (FG_WARPS % FG_QG == 0 && FG_DT % (2 * FG_DSPLIT) == 0), "the dQ product's warp split");

constexpr float FG_LOG2E = 1.4426950408889634f;

// Workspace rows a (batch, head): a multiple of 128 (every block_m but 80 divides 128); on sm_90 at head_dim
// 128 without a causal mask, where the sm_90a kernel's 80-query blocks (FG_BW_DQ_T) may run, the multiple of
// 128 at or past the next multiple of 80. The same rule as the host's bwd_rows_padded (dispatch.c), which
// sizes the workspace for every variant of a call (read from the parameters instead, the sm_90a kernel at
// head_dim 128 spilled 56 bytes). The pre kernel's grid covers the rows the main kernel reads, in blocks of 64.
__device__ __forceinline__ i64 fg_bwd_rows_padded(int sq) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ / 10 == 90
    if (FG_HEAD_DIM == 128 && !FG_CAUSAL) sq = (sq + 79) / 80 * 80;
#endif
    return ((i64)sq + 127) / 128 * 128;
}

#if FG_DQ_STAGED
// dst[0 .. BYTES / 4) += the fp32 values at shared address src, by the TMA unit (one bulk reduce-add,
// committed as its own bulk group); BYTES a multiple of 16, both addresses 16-byte aligned.
template <int BYTES>
__device__ __forceinline__ void fg_bulk_add_f32(const float *dst, u32 src) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst), "r"(src),
                 "n"(BYTES) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
#endif

// The deterministic mode's order. The key blocks add their dQ into query block m one after another, the
// semaphore of (batch, head, m) counting those done; the key block with rank r at m adds once it reads r,
// and hands the turn on (the semaphore to r + 1) only in the middle of its next query block, once its adds
// have long completed, instead of stalling on their completion (fg_bwd_pass_turn). The order at m is the
// order in which the key blocks reach m, so that nobody waits on a key block behind it:
//  - Causal: descending key blocks (a key block streams the query blocks from its diagonal on, so those
//    above it reached m first), and the grid's x runs the key blocks backwards (fg_bwd_key_block), so that
//    every key block waits only on CTAs dispatched before it. Ascending, key block j waited at every m on
//    key block 0, j blocks behind it, and each CTA took as long as block 0's whole stream.
//  - Not causal, p.dq_rotate (a head's key blocks can all be resident at once, launch_bwd): key block j streams
//    the M query blocks from j mod M on, wrapping, and at m the key blocks come in the order they arrive,
//    ties (j and j + M) ascending. Else ascending key blocks, every one starting at query block 0 (key
//    block j may fall up to j half-blocks behind block 0; at 16k it measured 0.77-0.82x the
//    non-deterministic kernel, no worse than the rotated order there).
// (H200, the ascending order with the hand-on right after the adds: 0.38-0.55x the non-deterministic
// kernel causal, 0.67-0.72x not; bench/results/2026-11-30-h200-session12/.)
__device__ __forceinline__ int fg_bwd_key_block() {
    return FG_DETERMINISTIC && FG_CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
}
// Key block j's rank at query block m (bwd_order.h); n_m: the query blocks of the rotated stream (M above).
__device__ __forceinline__ int fg_bwd_turn_rank(const fg_bwd_params &p, int j, int m, int n_m, int sq, int sk) {
    const int nb = (int)gridDim.x;
    if (FG_CAUSAL) return fg_bwd_rank_causal(j, m, nb, FG_BLOCK_M, FG_BLOCK_N, sq, sk);
    if (!p.dq_rotate) return j;
    return fg_bwd_rank_rotated(j, m, nb, n_m);
}

// The deterministic mode's turn: thread 0 spins (gently: the L2 line is shared) until the semaphore of
// this query block says the rank key blocks before this one have added their dQ, then the block goes on.
__device__ __forceinline__ void fg_bwd_wait_turn(int *sem, int rank, int tid) {
    if (tid == 0) {
        while (*(volatile int *)sem != rank) __nanosleep(64);
        __threadfence();
    }
    __syncthreads();
}

// The deterministic mode's hand-on, after a block barrier that every thread reached once its adds were
// complete and fenced (the bulk ones waited for by their issuing lane): the semaphore moves on to rank + 1.
__device__ __forceinline__ void fg_bwd_pass_turn(int *sem, int rank, int tid) {
    if (tid == 0) atomicExch(sem, rank + 1);
}

// Before that barrier: this thread's adds complete and visible to the next key block's.
__device__ __forceinline__ void fg_bwd_settle_adds(int lane) {
#if FG_DQ_STAGED
    if (lane == 0) {
        fg_bulk_wait_all();
        asm volatile("fence.proxy.async.global;" ::: "memory");
        __threadfence();
    }
#else
    __threadfence();
#endif
}

// ---- pre: D, lse2, zeroed accumulators ----
extern "C" __global__ void __launch_bounds__(256)
fg_bwd_pre_kernel(const __grid_constant__ fg_bwd_params p) {
    fg_pdl_launch_dependents(); // the main kernel may launch (its K/V loads overlap this grid's end)
    const int head = blockIdx.y, batch = blockIdx.z, tid = threadIdx.x;
    const i64 sq_pad = fg_bwd_rows_padded(p.seqlen_q);
    const i64 bh = (i64)batch * p.heads_q + head;
    // 4 threads per row, 64 rows per block.
    const int r = blockIdx.x * 64 + tid / 4, part = tid % 4;
    float d = 0.f;
    if (r < p.seqlen_q) {
        const u16 *o = (const u16 *)p.o + batch * p.o_stride[0] + (i64)r * p.o_stride[1] + head * p.o_stride[2];
        const u16 *dout = (const u16 *)p.dout + batch * p.do_stride[0] + (i64)r * p.do_stride[1] + head * p.do_stride[2];
        for (int c = part * 8; c < FG_HEAD_DIM; c += 32) {
            uint4 a = *(const uint4 *)(o + c), b = *(const uint4 *)(dout + c);
            const u32 av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 x = fg_unpack2(av[k]), y = fg_unpack2(bv[k]);
                d = fmaf(x.x, y.x, fmaf(x.y, y.y, d));
            }
        }
    }
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    d += __shfl_xor_sync(0xffffffffu, d, 2);
    if (part == 0) { // the grid covers the rows the main kernel reads (sq_pad, or with dQ^T to its last block)
        // +inf makes P = 0: padding rows, and rows whose LSE is -inf (they saw no key; were such an LSE
        // given for a row that does see keys, exp2(s - (-inf)) would make P infinite). A NaN stays NaN.
        float lse2 = __int_as_float(0x7f800000);
        if (r < p.seqlen_q) {
            const float lse = p.lse[batch * p.lse_stride[0] + head * p.lse_stride[1] + (i64)r * p.lse_stride[2]];
            if (lse != FG_NEG_INF) lse2 = lse * FG_LOG2E;
        }
        p.lse2[bh * sq_pad + r] = lse2;
        p.dsum[bh * sq_pad + r] = d;
    }
    // Zero this block's part of the dQ accumulator's groups (FG_DQ_G rows, one contiguous run each) that hold
    // rows below seqlen_q, 16 bytes per store: the post kernel converts no other rows (the rest are added
    // into, never read for output). So the padding costs few stores: at 512 queries with 80-query blocks, 560
    // rows zeroed instead of 576 (+7% pre-kernel time with all zeroed; H200, session 17).
    const int zend = ((p.seqlen_q + FG_DQ_G - 1) / FG_DQ_G * FG_DQ_G - (int)blockIdx.x * 64) * (FG_HEAD_DIM / 4);
    float4 *acc = (float4 *)(p.dq_accum + (bh * sq_pad + (i64)blockIdx.x * 64) * FG_HEAD_DIM);
#pragma unroll
    for (int i = tid; i < 64 * FG_HEAD_DIM / 4; i += 256)
        if (i < zend) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (p.dq_sem != 0 && blockIdx.x == 0) {
        const int m_blocks = (int)(sq_pad / FG_BLOCK_M);
        for (int i = tid; i < m_blocks; i += 256) p.dq_sem[bh * m_blocks + i] = 0;
    }
}

// ---- main ----
// Phase 1 (S^T, dP^T, P^T, dS^T): warps in FG_P1_WK key groups of 32 keys x FG_P1_QS query parts of FG_P1_QW
// (halves with 16 keys a warp, quarters with 8).
// Phase 2 (dV, dK): warps in FG_P2_WK key groups of FG_P2_KW keys x FG_P2_PD head_dim parts of FG_P2_DW.
// Phase 3 (dQ): warps in FG_QG query groups of 16 x FG_QM rows x FG_DSPLIT head_dim slices.
// P^T and dS^T cross from phase 1 to phases 2 and 3 through shared memory ([keys][queries], 16-bit).
constexpr int FG_P1_WK = FG_BLOCK_N / 32;
constexpr int FG_P1_QS = FG_WARPS / FG_P1_WK;
constexpr int FG_P1_QW = FG_BLOCK_M / FG_P1_QS;
constexpr int FG_P1_QT = FG_P1_QW / 8;
// Eight keys a warp (above head_dim 128) at multiples of 64: 32 keys x a quarter of head_dim, as
// FlashAttention-2's dK/dV layout there, rather than 16 keys x a half: the same dK, dV registers, a third
// fewer ldmatrix per MMA (each warp re-reads fewer dO and Q columns).
constexpr int FG_P2_PD = fg_bwd_p2_parts(FG_BLOCK_N, FG_WARPS, FG_HEAD_DIM); // (bwd_tiles.h)
constexpr int FG_P2_WK = FG_WARPS / FG_P2_PD;
constexpr int FG_P2_KW = FG_BLOCK_N / FG_P2_WK;
constexpr int FG_P2_DW = FG_HEAD_DIM / FG_P2_PD;
constexpr int FG_P2_DT = FG_P2_DW / 8;
static_assert(FG_WGMMA_BWD || (FG_P1_WK >= 1 && FG_P1_WK * FG_P1_QS == FG_WARPS), "phase 1: warp groups own 32 keys");
static_assert(FG_WGMMA_BWD || FG_P1_QW % 16 == 0, "phase 1: each query part is a multiple of 16 rows");
static_assert(FG_WGMMA_BWD || (FG_P2_KW % 16 == 0 && FG_P2_DW % 16 == 0), "phase 2 warp tiles");

// The cp.async kernels' loads of block m + 1 between phase 1's S^T and dP^T passes (FG_BWD_LOAD_LATE) rather
// than right after the loop's barrier: above head_dim 128, where the loop's top ran about 140 instructions
// of load addressing per warp with no MMA in flight. H200 (session 20 call 3, bf16 d 256, two alternations):
// 1.008x, causal +1-2%, without a mask equal; also computing and storing P^T between the passes, as
// FlashAttention-2 does, gained nothing more (0.999x). Measured only there (bf16 d 256, two stages on an
// H200); it applies to d 160-224 and fp16 too, untimed. Not at d 64/128 (their Hopper kernels load by TMA),
// which keep the old order; one-stage tiles (the A100's d 256) load behind phase 3 either way.

constexpr bool FG_BWD_LOAD_LATE = FG_HEAD_DIM > 128;
// Phase 2 of one query block for head_dim part WD (a template so that every ldmatrix address keeps its
// compile-time part): dV += P^T dO and dK += dS^T Q, A operands from the P^T and dS^T tiles, B operands
// by ldmatrix.trans from the dO and Q tiles (rows = queries).
template <int WD>
__device__ __forceinline__ void fg_bwd_phase2(float (&dv)[FG_P2_KW / 16][FG_P2_DT][4],
                                              float (&dk)[FG_P2_KW / 16][FG_P2_DT][4], u32 s_p, u32 s_ds,
                                              u32 sq_st, u32 sdo_st, int krow0, const fg_frag_offsets_t<FG_DS_CH> &pt_off,
                                              const fg_frag_offsets &qv_off) {
#pragma unroll
    for (int kk = 0; kk < FG_BLOCK_M / 16; kk++) {
        u32 pa[FG_P2_KW / 16][4], da[FG_P2_KW / 16][4];
#pragma unroll
        for (int a = 0; a < FG_P2_KW / 16; a++) {
            fg_ldmatrix_x4(pa[a], fg_frag_addr<FG_BLOCK_N>(s_p, pt_off, krow0 + a * 16, kk));
            fg_ldmatrix_x4(da[a], fg_frag_addr<FG_BLOCK_N>(s_ds, pt_off, krow0 + a * 16, kk));
        }
#pragma unroll
        for (int d2 = 0; d2 < FG_P2_DT / 2; d2++) {
            u32 ob[4], qb[4];
            fg_ldmatrix_x4_trans(ob, fg_frag_addr<FG_BLOCK_M>(sdo_st, qv_off, kk * 16, WD * (FG_P2_DT / 2) + d2));
            fg_ldmatrix_x4_trans(qb, fg_frag_addr<FG_BLOCK_M>(sq_st, qv_off, kk * 16, WD * (FG_P2_DT / 2) + d2));
#pragma unroll
            for (int a = 0; a < FG_P2_KW / 16; a++) {
                fg_mma_16816(dv[a][2 * d2], pa[a], ob[0], ob[1]);
                fg_mma_16816(dv[a][2 * d2 + 1], pa[a], ob[2], ob[3]);
                fg_mma_16816(dk[a][2 * d2], da[a], qb[0], qb[1]);
                fg_mma_16816(dk[a][2 * d2 + 1], da[a], qb[2], qb[3]);
            }
        }
    }
}

// ---- pieces of the main kernels (this file's and bwd_sm90.cuh's) ----
// Whether the key block at n0 and the query block at m0 need the mask: keys past sk, or, causal, a key past
// the diagonal of the block's first query (query i sees keys j <= i + sk - sq). Queries past sq need none:
// their lse2 is +inf, so P is 0.
__device__ __forceinline__ bool fg_bwd_needs_mask(int n0, int m0, int sk, int sq) {
    return n0 + FG_BLOCK_N > sk || (FG_CAUSAL && n0 + FG_BLOCK_N - 1 > m0 + sk - sq);
}

// P = exp2(c S - lse2) of key `key` and query `qrow`; MASK: the block needs fg_bwd_needs_mask's mask
// (masked entries 0); the unmasked instance computes no key or query index at all.
template <bool MASK>
__device__ __forceinline__ float fg_bwd_p(float s, float lse2, int key, int qrow, int sk, int sq, float scale_log2) {
    const bool masked = MASK && (key >= sk || (FG_CAUSAL && key > qrow + sk - sq));
    return masked ? 0.f : fg_exp2(fmaf(s, scale_log2, -lse2));
}

// P^T and dS^T = P^T (dP^T - D), in place, for the two accumulators 2h, 2h + 1 of an S^T/dP^T fragment:
// key `key`, queries qrow0 and qrow0 + 1, whose lse2 and D the caller read once for all the fragments of
// those two queries.
template <bool MASK>
__device__ __forceinline__ void fg_bwd_p_ds(float (&s)[4], float (&dp)[4], int h, float2 lse2, float2 dsum, int key,
                                            int qrow0, int sk, int sq, float scale_log2) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const float pv = fg_bwd_p<MASK>(s[2 * h + e], e ? lse2.y : lse2.x, key, qrow0 + e, sk, sq, scale_log2);
        s[2 * h + e] = pv;
        dp[2 * h + e] = pv * (dp[2 * h + e] - (e ? dsum.y : dsum.x));
    }
}

// The sm_90a kernel's key block and query head. A causal key block's work falls with its index (block 0
// sees every query block), so the longest should start first: the hardware starts CTAs in grid order, x
// fastest, and a plain (key blocks, heads, batch) grid starts one head's key blocks longest first, then
// the next head's, leaving the last head's long blocks to start late. With p.causal_group_log2 = log2 G > 0
// (the host's choice, dispatch.c: a power of two dividing the heads, as many as keep their Q, dO and dQ
// accumulator within a third of L2) the grid is (key blocks * G, heads / G, batch) and G heads' key
// blocks 0 start first, then their key blocks 1, and so on (FlashAttention-3's backward LPT order).
// Shifts and masks of the block indices; the mma.sync kernel keeps its plain grid (this spilled 4-8
// bytes there at d 64 causal).
__device__ __forceinline__ void fg_bwd_cta_tile(int group_log2, int &n_block, int &head) {
    if (FG_CAUSAL && group_log2 > 0) {
        n_block = (int)(blockIdx.x >> group_log2);
        head = (int)((blockIdx.y << group_log2) | (blockIdx.x & ((1u << group_log2) - 1u)));
    } else {
        n_block = (int)blockIdx.x;
        head = (int)blockIdx.y;
    }
}

// The query blocks [m_first, m_last) that see a key of the key block at n0: all, or when causal those with
// a row at or past the first key's diagonal (query i sees keys j <= i + sk - sq).
__device__ __forceinline__ void fg_bwd_query_blocks(int n0, int sq, int sk, int &m_first, int &m_last) {
    m_first = fg_bwd_first_query_block(n0, sq, sk, FG_BLOCK_M, FG_CAUSAL);
    m_last = (sq + FG_BLOCK_M - 1) / FG_BLOCK_M; // exclusive
}

// K and V of the key block at n0 into their tiles (joining the caller's next cp.async group).
__device__ __forceinline__ void fg_bwd_load_kv(const fg_bwd_params &p, u32 s_k, u32 s_v, int batch, int kv_head, int n0,
                                               int sk, int tid) {
    fg_tile_loader<FG_BLOCK_N, FG_THREADS> kv_loader;
    kv_loader.init((const fg_in_t *)p.k + batch * p.k_stride[0] + (i64)n0 * p.k_stride[1] + kv_head * p.k_stride[2],
                   p.k_stride[1], tid);
    kv_loader.load(s_k, sk - n0, p.k_stride[1]);
    kv_loader.init((const fg_in_t *)p.v + batch * p.v_stride[0] + (i64)n0 * p.v_stride[1] + kv_head * p.v_stride[2],
                   p.v_stride[1], tid);
    kv_loader.load(s_v, sk - n0, p.v_stride[1]);
}

// The query blocks a CTA streams, from m_first on: Q, dO, lse2 and D of block m into stage st (the two
// fp32 rows, FG_BLOCK_M * 4 bytes each, by the first threads, 16 bytes each: the workspace rows are
// padded, so always in bounds). THREADS: the threads that load (tid below it).
template <int THREADS = FG_THREADS>
struct fg_bwd_qstream {
    fg_tile_loader<FG_BLOCK_M, THREADS> q, dout;
    __device__ __forceinline__ void init(const fg_bwd_params &p, int batch, int head, int m_first, int tid) {
        q.init((const fg_in_t *)p.q + batch * p.q_stride[0] + head * p.q_stride[2] + (i64)m_first * FG_BLOCK_M * p.q_stride[1],
               p.q_stride[1], tid);
        dout.init((const fg_in_t *)p.dout + batch * p.do_stride[0] + head * p.do_stride[2] +
                      (i64)m_first * FG_BLOCK_M * p.do_stride[1],
                  p.do_stride[1], tid);
    }
    // Back by n query blocks (the deterministic mode's rotated stream, wrapping to its first block).
    __device__ __forceinline__ void rewind(const fg_bwd_params &p, int n) {
        q.src -= (i64)n * FG_BLOCK_M * p.q_stride[1];
        dout.src -= (i64)n * FG_BLOCK_M * p.do_stride[1];
    }
    __device__ __forceinline__ void load(const fg_bwd_params &p, u32 s_q, u32 s_do, u32 s_lse, u32 s_d, int m, int st,
                                         int sq, i64 bh, i64 sq_pad, int tid) {
        q.load(s_q + st * FG_QB_BYTES, sq - m * FG_BLOCK_M, p.q_stride[1]);
        dout.load(s_do + st * FG_QB_BYTES, sq - m * FG_BLOCK_M, p.do_stride[1]);
        constexpr int CH = FG_ROW_BYTES / 16;
        if (tid < 2 * CH) {
            const int which = tid / CH, c = tid % CH;
            const float *src = (which ? p.dsum : p.lse2) + bh * sq_pad + (i64)m * FG_BLOCK_M + c * 4;
            fg_cp_async16((which ? s_d : s_lse) + st * FG_ROW_BYTES + c * 16, src, true);
        }
    }
};

// The TMA loads of the backward main kernels (bwd_sm90.cuh; the tma=1 variants here), issued by one thread
// into the same swizzled tiles the cp.async loaders fill (slabs of 64 columns, FG_BLOCK_N * 128 or
// FG_BLOCK_M * 128 bytes apart; rows past the tensor read as zeros), each arming `bar` with its bytes.
// K and V of the key block at n0:
__device__ __forceinline__ void fg_bwd_tma_kv(const fg_tma_params &tm, u32 s_k, u32 s_v, int n0, int kv_head, int batch,
                                              u32 bar) {
    fg_mbar_expect_tx(bar, 2 * FG_KV_BYTES);
#pragma unroll
    for (int c = 0; c < FG_HEAD_DIM / 64; c++) {
        fg_tma_load(s_k + c * FG_BLOCK_N * 128, tm.k, c * 64, n0, kv_head, batch, bar);
        fg_tma_load(s_v + c * FG_BLOCK_N * 128, tm.v, c * 64, n0, kv_head, batch, bar);
    }
}
// Query block m into stage st: Q and dO (boxes of 64 columns x FG_BW_ROWS rows: 64, or the whole 80-query
// block with dQ^T, as launch_bwd encodes the maps), and the LSE and D rows (1-d bulk
// copies; the workspace pads them to whole blocks). row0: the (batch, head)'s first workspace row.
static_assert(!(FG_BWD_TMA || FG_WGMMA_BWD) || FG_BLOCK_M % FG_BW_ROWS == 0, "whole boxes");
__device__ __forceinline__ void fg_bwd_tma_block(const fg_tma_params &tm, const fg_bwd_params &p, u32 s_q, u32 s_do,
                                                 u32 s_lse, u32 s_d, int m, int st, int head, int batch, i64 row0,
                                                 u32 bar) {
    fg_mbar_expect_tx(bar, 2 * FG_QB_BYTES + 2 * FG_ROW_BYTES);
#pragma unroll
    for (int r = 0; r < FG_BLOCK_M; r += FG_BW_ROWS)
#pragma unroll
        for (int c = 0; c < FG_HEAD_DIM / 64; c++) {
            const u32 off = st * FG_QB_BYTES + c * FG_BLOCK_M * 128 + r * 128;
            fg_tma_load(s_q + off, tm.q, c * 64, m * FG_BLOCK_M + r, head, batch, bar);
            fg_tma_load(s_do + off, tm.o, c * 64, m * FG_BLOCK_M + r, head, batch, bar);
        }
    const i64 row = row0 + (i64)m * FG_BLOCK_M;
    fg_bulk_load(s_lse + st * FG_ROW_BYTES, p.lse2 + row, FG_ROW_BYTES, bar);
    fg_bulk_load(s_d + st * FG_ROW_BYTES, p.dsum + row, FG_ROW_BYTES, bar);
}

// dK = scale * sum dS^T Q and dV of key `key`, columns col and col + 1: 16-bit outputs (one KV head per
// query head), or fp32 per query head (GQA: the post kernel sums a KV head's query heads in order).
__device__ __forceinline__ void fg_bwd_store_dkdv(const fg_bwd_params &p, int batch, int kv_head, i64 bh, int sk, int key,
                                                  int col, float k0, float k1, float v0, float v1) {
    k0 *= p.softmax_scale;
    k1 *= p.softmax_scale;
    if (p.dkv_accum == 0) {
        u16 *dkp = (u16 *)p.dk + batch * p.dk_stride[0] + (i64)key * p.dk_stride[1] + kv_head * p.dk_stride[2] + col;
        u16 *dvp = (u16 *)p.dv + batch * p.dv_stride[0] + (i64)key * p.dv_stride[1] + kv_head * p.dv_stride[2] + col;
        *(u32 *)dkp = fg_pack2(k0, k1);
        *(u32 *)dvp = fg_pack2(v0, v1);
    } else {
        float *base = p.dkv_accum + ((bh * sk + key) * FG_HEAD_DIM + col);
        *(float2 *)base = make_float2(k0, k1);
        *(float2 *)(base + (i64)p.batch * p.heads_q * sk * FG_HEAD_DIM) = make_float2(v0, v1);
    }
}

// dK and dV rows staged in shared memory (16-bit, fg_tile_offset layouts: dK rows rk0.. of a tile of RK
// rows at dk_tile, dV rows rv0.. of a tile of RV rows at dv_tile; generic pointers) out to the outputs as
// whole 16-byte units, consecutive threads (thread of nthreads) along a row: keys key0 .. key0 + ROWS - 1,
// those below sk. Both main kernels end with it for MHA (4-byte stores from the fragments, 8 rows a warp
// instruction, were 3.3-3.6% slower overall and 5-11% at 512; bench/results/2026-11-29-h200-session10/).
template <int ROWS, int RK, int RV>
__device__ __forceinline__ void fg_bwd_dkdv_out(const fg_bwd_params &p, int batch, int kv_head, int sk, int key0,
                                                const unsigned char *dk_tile, int rk0, const unsigned char *dv_tile,
                                                int rv0, int thread, int nthreads) {
    constexpr int CH = FG_HEAD_DIM / 8; // 16-byte units of a row
#pragma unroll
    for (int u = thread; u < ROWS * CH; u += nthreads) {
        const int r = u / CH, c = u % CH, key = key0 + r;
        if (key >= sk) continue;
        const uint4 xk = *(const uint4 *)(dk_tile + fg_tile_offset<CH>(rk0 + r, c, RK));
        const uint4 xv = *(const uint4 *)(dv_tile + fg_tile_offset<CH>(rv0 + r, c, RV));
        *(uint4 *)((u16 *)p.dk + batch * p.dk_stride[0] + (i64)key * p.dk_stride[1] + kv_head * p.dk_stride[2] + 8 * c) = xk;
        *(uint4 *)((u16 *)p.dv + batch * p.dv_stride[0] + (i64)key * p.dv_stride[1] + kv_head * p.dv_stride[2] + 8 * c) = xv;
    }
}

#if !FG_WGMMA_BWD // the sm_90a backward's main kernel is bwd_sm90.cuh's
static_assert(!FG_BWD_TMA || (FG_DQ_FRAG && FG_HEAD_DIM % 64 == 0 && FG_BLOCK_M % 64 == 0 && FG_STAGES == 2),
              "tma=1: 64-column, 64-row boxes, two stages; sm_90+ (dQ staged, or by vector reductions above d 128)");
static_assert(FG_STAGES == 1 || FG_STAGES == 2, "one or two stages of query blocks");
extern "C" __global__ void __launch_bounds__(FG_THREADS, 1)
#if FG_BWD_TMA
fg_bwd_main_kernel(const __grid_constant__ fg_bwd_params p, const __grid_constant__ fg_tma_params tm) {
#else
fg_bwd_main_kernel(const __grid_constant__ fg_bwd_params p) {
#endif
    extern __shared__ __align__(128) unsigned char fg_smem[];
    fg_pdl_launch_dependents(); // the post kernel may launch once this grid's last CTAs run; it waits for them
    // (Key blocks in grid order, head by head: fg_bwd_cta_tile's grouped order spilled 4-8 bytes at d 64
    // causal here, so the host keeps it to the sm_90a kernel.)
    const int n_block = fg_bwd_key_block(), head = blockIdx.y, batch = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int kv_head = head / (p.heads_q / p.heads_kv);
    const int sq = p.seqlen_q, sk = p.seqlen_k;
    const int n0 = n_block * FG_BLOCK_N;
    const i64 sq_pad = fg_bwd_rows_padded(sq);
    const i64 bh = (i64)batch * p.heads_q + head;
    const int m_blocks = (int)(sq_pad / FG_BLOCK_M);

    int m_first, m_last;
    fg_bwd_query_blocks(n0, sq, sk, m_first, m_last);
    // The query blocks in stream order: m_first .. m_last - 1, or in the deterministic mode's rotated order
    // (fg_bwd_turn_rank) from m_first + n_block mod n_m on, wrapping.
    // (Outside that mode the loop runs on m itself: counting steps instead made ptxas spill at d 64 causal.)
    const int n_m = m_last - m_first;
    const int m_rot = FG_DETERMINISTIC && !FG_CAUSAL && p.dq_rotate && n_m > 0 ? n_block % n_m : 0;
    auto m_at = [&](int it) {
        return FG_DETERMINISTIC ? m_first + (it + m_rot < n_m ? it + m_rot : it + m_rot - n_m) : m_first + it;
    };

#if FG_BWD_TMA
    const u32 s_k = (fg_smem_addr(fg_smem) + 1023u) & ~1023u; // TMA's swizzle acts on address bits: 1 KiB slack
#else
    const u32 s_k = fg_smem_addr(fg_smem);
#endif
    unsigned char *const smem = fg_smem + (s_k - fg_smem_addr(fg_smem)); // s_k, generic
    const u32 s_v = s_k + FG_KV_BYTES;
    const u32 s_q = s_v + FG_KV_BYTES;               // FG_STAGES stages
    const u32 s_do = s_q + FG_STAGES * FG_QB_BYTES;   // FG_STAGES stages
    const u32 s_p = s_do + FG_STAGES * FG_QB_BYTES;   // P^T, [keys][queries]
    const u32 s_ds = s_p + FG_DS_BYTES;               // dS^T, [keys][queries]
    const u32 s_lse = s_ds + FG_DS_BYTES;             // FG_STAGES stages of FG_BLOCK_M floats
    const u32 s_d = s_lse + FG_STAGES * FG_ROW_BYTES; // FG_STAGES stages
    const u32 s_dq = s_d + FG_STAGES * FG_ROW_BYTES;  // sm_90+: FG_BLOCK_M x head_dim floats (fg_dq_index)

#if FG_BWD_TMA
    // tma=1 (sm_90+): thread 0 loads K and V once and each query block (Q and dO by tensor map, boxes of 64
    // columns x 64 rows or FG_BLOCK_N keys, rows past the tensor zeros; the LSE and D rows by 1-d bulk
    // copies, whole blocks in the padded workspace), completing on mbarriers, into the same swizzled tiles
    // the cp.async loaders fill. No loader state in registers, no copies issued by the other 255 threads.
    const u32 s_bar = s_dq + (FG_DQ_STAGED ? FG_BLOCK_M * FG_HEAD_DIM * 4 : 0); // full[2], K/V
    auto bar_full = [&](int st) { return s_bar + 8u * (u32)st; };
    const u32 bar_kv = s_bar + 16u;
    if (tid == 0) {
        fg_mbar_init(bar_full(0), 1);
        fg_mbar_init(bar_full(1), 1);
        fg_mbar_init(bar_kv, 1);
        fg_fence_mbar_init();
    }
    __syncthreads();
    auto load_block = [&](int m, int st) {
        fg_bwd_tma_block(tm, p, s_q, s_do, s_lse, s_d, m, st, head, batch, bh * sq_pad, bar_full(st));
    };
    if (tid == 0) fg_bwd_tma_kv(tm, s_k, s_v, n0, kv_head, batch, bar_kv);
    fg_pdl_wait(); // the pre kernel's LSE, D, zeroed dQ accumulator (and semaphores) are in
    if (tid == 0 && m_first < m_last) load_block(m_at(0), 0);
    fg_mbar_wait(bar_kv, 0);
#else
    fg_bwd_load_kv(p, s_k, s_v, batch, kv_head, n0, sk, tid);
    fg_pdl_wait(); // the pre kernel's LSE, D, zeroed dQ accumulator (and semaphores) are in
    fg_bwd_qstream<> qs;
    qs.init(p, batch, head, m_at(0), tid);
    auto load_block = [&](int m, int st) {
        if (m_rot != 0 && m == m_first) qs.rewind(p, n_m); // the rotated stream wraps
        qs.load(p, s_q, s_do, s_lse, s_d, m, st, sq, bh, sq_pad, tid);
    };
    if (m_first < m_last) load_block(m_at(0), 0);
    fg_cp_async_commit();
#endif

    float dk[FG_P2_KW / 16][FG_P2_DT][4], dv[FG_P2_KW / 16][FG_P2_DT][4];
#pragma unroll
    for (int a = 0; a < FG_P2_KW / 16; a++)
#pragma unroll
        for (int i = 0; i < FG_P2_DT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[a][i][e] = dv[a][i][e] = 0.f;

    // ldmatrix lanes: rows of an A operand (16 rows, two chunk columns) at qv_off (K, V tiles) or pt_off
    // (the P^T, dS^T tiles); B operands whose rows are the N dimension (Q, dO rows = queries) at k_off;
    // transposed B operands whose rows are the reduction dimension (dO, Q for dV, dK) at qv_off.
    const fg_frag_offsets qv_off = fg_frag_offsets_make(lane % 16, lane / 16);
    const fg_frag_offsets k_off = fg_frag_offsets_make(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
    const fg_frag_offsets_t<FG_DS_CH> pt_off = fg_frag_offsets_make<FG_DS_CH>(lane % 16, lane / 16);
    const int p1_k0 = (warp % FG_P1_WK) * 32, p1_q0 = (warp / FG_P1_WK) * FG_P1_QW; // phase 1 tile
    const int p2_k0 = (warp % FG_P2_WK) * FG_P2_KW, p2_wd = warp / FG_P2_WK;       // phase 2 tile
    const int qg = warp % FG_QG, dslice = warp / FG_QG;                                 // phase 3 tile

    // Two stages: block m + 1 loads while block m is worked on. One stage (where two do not fit: head_dim
    // 256 on an A100, 160 on 99 KiB parts; FlashAttention-2's single-buffered tiles there): block m + 1
    // loads once phase 2 is done with block m's Q and dO, behind phase 3.
    int st = 0;
    int m_added = -1; // the deterministic mode: the query block whose turn this CTA has yet to hand on
#if FG_DETERMINISTIC
    for (int it = 0; it < n_m; it++, st ^= FG_STAGES - 1) {
        const int m = m_at(it);
        const bool more = it + 1 < n_m;
        const int m_next = more ? m_at(it + 1) : 0;
#else
    for (int m = m_first; m < m_last; m++, st ^= FG_STAGES - 1) {
        const int it = m - m_first;
        const bool more = m + 1 < m_last;
        const int m_next = m + 1;
#endif
#if FG_BWD_TMA
        fg_mbar_wait(bar_full(st), (u32)((it >> 1) & 1));
        __syncthreads(); // block m is in; everyone is done with stage st ^ 1 and with P^T, dS^T
        if (tid == 0 && more) load_block(m_next, st ^ 1);
#else
        fg_cp_async_wait<0>();
        __syncthreads(); // block m is in; everyone is done with P^T, dS^T and (two stages) with stage st ^ 1
        if (FG_STAGES == 2 && !FG_BWD_LOAD_LATE) {
            if (more) load_block(m_next, st ^ 1);
            fg_cp_async_commit();
        }
#endif
        const u32 sq_st = s_q + st * FG_QB_BYTES, sdo_st = s_do + st * FG_QB_BYTES;
        const float *lse2 = (const float *)(smem + (s_lse - s_k) + st * FG_ROW_BYTES);
        const float *dsum = (const float *)(smem + (s_d - s_k) + st * FG_ROW_BYTES);
        const int m0 = m * FG_BLOCK_M;
        // Tile bases passed through an empty asm each step: the addresses derived from them can no longer
        // be hoisted out of the loop, where ptxas kept dozens of them in registers and spilled.
        u32 tk = s_k, tv = s_v, tp = s_p, tds = s_ds;
        asm volatile("" : "+r"(tk), "+r"(tv), "+r"(tp), "+r"(tds));
        // On sm_90 at head_dim <= 64 likewise the lane, from which the per-lane offsets of phases 1 and 3
        // come: it took the d 64 tile from 76 bytes of spills to none and ran 14% faster causal, 2% slower
        // not (H200); at d 128 it ran 2-4% slower, and on sm_80 ptxas spilled more with it.
        int ln = lane;
#if __CUDA_ARCH__ >= 900
        if (FG_HEAD_DIM <= 64) asm volatile("" : "+r"(ln));
#endif
        const int gl = ln / 4, tl = ln % 4;

        // Phase 1: S^T = K Q^T and dP^T = V dO^T (keys x queries) on this warp's 32 keys x FG_P1_QW queries.
        // (Two query sub-tiles one after the other, to halve the S^T and dP^T registers, measured 7-8%
        // slower at head_dim 128 on the H200: K and V are read twice.)
        {
            const int q0 = p1_q0;
            float s[2][FG_P1_QT][4], dp[2][FG_P1_QT][4];
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int i = 0; i < FG_P1_QT; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[a][i][e] = dp[a][i][e] = 0.f;
            // Two passes over head_dim (S^T, then dP^T) rather than one: half the fragments in flight.
#pragma unroll
            for (int pass = 0; pass < 2; pass++) {
#if !FG_BWD_TMA
                // FG_BWD_LOAD_LATE: block m + 1's copies issue here, behind pass 0's MMAs, rather than at the
                // loop's top, where their address work ran with no MMA in flight to hide it.
                if (FG_STAGES == 2 && FG_BWD_LOAD_LATE && pass == 1) {
                    if (more) load_block(m_next, st ^ 1);
                    fg_cp_async_commit();
                }
#endif
#pragma unroll
                for (int kk = 0; kk < FG_HEAD_DIM / 16; kk++) {
                    u32 xa[2][4];
#pragma unroll
                    for (int a = 0; a < 2; a++)
                        fg_ldmatrix_x4(xa[a], fg_frag_addr<FG_BLOCK_N>(pass ? tv : tk, qv_off, p1_k0 + a * 16, kk));
#pragma unroll
                    for (int n2 = 0; n2 < FG_P1_QT / 2; n2++) {
                        u32 yb[4];
                        fg_ldmatrix_x4(yb, fg_frag_addr<FG_BLOCK_M>(pass ? sdo_st : sq_st, k_off, q0 + n2 * 16, kk));
#pragma unroll
                        for (int a = 0; a < 2; a++) {
                            float (&c)[FG_P1_QT][4] = pass ? dp[a] : s[a];
                            fg_mma_16816(c[2 * n2], xa[a], yb[0], yb[1]);
                            fg_mma_16816(c[2 * n2 + 1], xa[a], yb[2], yb[3]);
                        }
                    }
                }
            }
            // P^T (masked entries 0: keys past sk, and when causal keys past a query's diagonal; queries
            // past sq have lse2 = +inf) and dS^T = P^T (dP^T - D), both to shared memory (16-bit,
            // swizzled like the other tiles). A block that needs no mask runs an instance without it, and
            // each pair of queries' lse2 and D is read once (the compiler had reloaded them for every key
            // row, and computed the mask everywhere: 30% of the instructions at d 64, ncu on the H200).
            auto p_ds = [&](auto mask) {
#pragma unroll
                for (int nt = 0; nt < FG_P1_QT; nt++) {
                    const int col = q0 + 8 * nt + 2 * tl;
                    const float2 l2 = *(const float2 *)(lse2 + col), dd = *(const float2 *)(dsum + col);
#pragma unroll
                    for (int a = 0; a < 2; a++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int krow = p1_k0 + a * 16 + gl + 8 * h;
                            fg_bwd_p_ds<decltype(mask)::value>(s[a][nt], dp[a][nt], h, l2, dd, n0 + krow, m0 + col, sk, sq,
                                                               p.scale_log2);
                            const u32 off = fg_tile_offset<FG_DS_CH>(krow, q0 / 8 + nt, FG_BLOCK_N) + 4 * tl;
                            asm volatile("st.shared.b32 [%0], %1;" ::"r"(tp + off),
                                         "r"(fg_pack2(s[a][nt][2 * h], s[a][nt][2 * h + 1])));
                            asm volatile("st.shared.b32 [%0], %1;" ::"r"(tds + off),
                                         "r"(fg_pack2(dp[a][nt][2 * h], dp[a][nt][2 * h + 1])));
                        }
                }
            };
            if (fg_bwd_needs_mask(n0, m0, sk, sq))
                p_ds(fg_bool<true>{});
            else
                p_ds(fg_bool<false>{});
        }
        if (FG_DETERMINISTIC && m_added >= 0) fg_bwd_settle_adds(lane);
        __syncthreads();
        if (FG_DETERMINISTIC && m_added >= 0) {
            fg_bwd_pass_turn(p.dq_sem + bh * m_blocks + m_added, fg_bwd_turn_rank(p, n_block, m_added, n_m, sq, sk), tid);
            m_added = -1;
        }

        // Phase 2: dV += P^T dO, dK += dS^T Q.
        // (One instance per head_dim part: a switch over four cases at one or two parts inlined the phase twice
        // over, and at d 64 causal on sm_90 ptxas then spilled 12 bytes.)
        if (FG_P2_PD == 4) {
            switch (p2_wd) {
            case 0: fg_bwd_phase2<0>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off); break;
            case 1: fg_bwd_phase2<1 % FG_P2_PD>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off); break;
            case 2: fg_bwd_phase2<2 % FG_P2_PD>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off); break;
            default: fg_bwd_phase2<3 % FG_P2_PD>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off); break;
            }
        } else if (FG_P2_PD == 1 || p2_wd == 0) {
            fg_bwd_phase2<0>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off);
        } else {
            fg_bwd_phase2<FG_P2_PD - 1>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off);
        }
#if !FG_BWD_TMA
        if (FG_STAGES == 1) {
            __syncthreads(); // every warp is done with block m's Q, dO, LSE and D rows
            if (more) load_block(m_next, 0);
            fg_cp_async_commit();
        }
#endif

        // Phase 3: dQ (queries x head_dim) += dS K: this warp's 16 x FG_QM query rows (group qg) and head_dim
        // slice. A = dS by ldmatrix.trans from the [keys][queries] tile, per 16-row tile r: lanes 0-7 keys 0-7
        // of query chunk 2r, 8-15 chunk 2r + 1, 16-23 keys 8-15 chunk 2r, 24-31 keys 8-15 chunk 2r + 1, which
        // land as the A fragment's (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15). B = K by
        // ldmatrix.trans.
        float dq[FG_QM][FG_DQT][4];
#pragma unroll
        for (int mt = 0; mt < FG_QM; mt++)
#pragma unroll
            for (int i = 0; i < FG_DQT; i++) dq[mt][i][0] = dq[mt][i][1] = dq[mt][i][2] = dq[mt][i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < FG_BLOCK_N / 16; kk++) {
            u32 a[FG_QM][4];
#pragma unroll
            for (int mt = 0; mt < FG_QM; mt++)
                fg_ldmatrix_x4_trans(a[mt], tds + fg_tile_offset<FG_DS_CH>(kk * 16 + ln % 8 + 8 * (ln / 16),
                                                                         2 * (qg * FG_QM + mt) + (ln / 8) % 2, FG_BLOCK_N));
#pragma unroll
            for (int d2 = 0; d2 < FG_DQT / 2; d2++) {
                // K's rows kk * 16 + lane % 16 at chunk 2 (slice's first chunk pair + d2) + lane / 16: the
                // address in full, since the slice (warp-dependent) would index qv_off at run time.
                u32 kb[4];
                fg_ldmatrix_x4_trans(kb, tk + fg_tile_offset(kk * 16 + ln % 16,
                                                              2 * (dslice * (FG_DQT / 2) + d2) + ln / 16, FG_BLOCK_N));
#pragma unroll
                for (int mt = 0; mt < FG_QM; mt++) {
                    fg_mma_16816(dq[mt][2 * d2], a[mt], kb[0], kb[1]);
                    fg_mma_16816(dq[mt][2 * d2 + 1], a[mt], kb[2], kb[3]);
                }
            }
        }
        // Add into the fp32 accumulator (rows padded to the workspace's, so every row exists). In the
        // deterministic mode in the key blocks' order at m (fg_bwd_turn_rank). Forward progress relies on
        // in-order block dispatch, as FlashAttention-3's deterministic backward does (the CUDA model does not
        // promise it): causal and ascending, the CTAs this one waits for have a lower grid x in the same head
        // and batch; rotated, they may have a higher one, and launch_bwd takes that order only where a head's
        // key blocks number at most half the SMs.
#if FG_DQ_STAGED
        // This warp's FG_DQ_G rows x FG_DQT * 8 columns: one contiguous run of the accumulator (fg_dq_index),
        // staged at the same offset from the block's start. Outside the deterministic mode lane 0 adds it
        // with one bulk reduce-add, after its add of the previous block has read the staging: no
        // block-wide barrier. In the deterministic mode key blocks add in order (see above), every warp's
        // add complete before the semaphore moves on, so the staging is free again.
        const u32 run = (u32)((qg * FG_DQ_G) * FG_HEAD_DIM + dslice * FG_DQ_G * FG_DQ_W); // floats from the block's row 0
        float4 *sdq = (float4 *)(smem + (s_dq - s_k)) + run / 4;
        if (!FG_DETERMINISTIC) {
            if (lane == 0) fg_bulk_wait_read();
            __syncwarp();
        }
#pragma unroll
        for (int mt = 0; mt < FG_QM; mt++)
#pragma unroll
            for (int i = 0; i < FG_DQT; i++)
                sdq[(mt * FG_DQT + i) * 32 + lane] = make_float4(dq[mt][i][0], dq[mt][i][1], dq[mt][i][2], dq[mt][i][3]);
        fg_fence_proxy_async(); // the bulk copies read these stores
        __syncwarp();
        const float *dst = p.dq_accum + (bh * sq_pad + m0) * FG_HEAD_DIM + run;
        if (!FG_DETERMINISTIC) {
            if (lane == 0) fg_bulk_add_f32<FG_DQ_G * FG_DQ_W * 4>(dst, s_dq + run * 4);
        } else { // handed on in the next block (or after the last), once complete
            fg_bwd_wait_turn(p.dq_sem + bh * m_blocks + m, fg_bwd_turn_rank(p, n_block, m, n_m, sq, sk), tid);
            if (lane == 0) fg_bulk_add_f32<FG_DQ_G * FG_DQ_W * 4>(dst, s_dq + run * 4);
            m_added = m;
        }
#else
        // Added from the fragments. FG_DQ_VEC: this warp's run of the accumulator (as staged above), lane l's
        // floats of m16 tile mt, n8 step i at ((mt * FG_DQT + i) * 32 + l) * 4, one 16-byte reduction each;
        // else scalar atomics into the row-major accumulator.
        if (FG_DETERMINISTIC) fg_bwd_wait_turn(p.dq_sem + bh * m_blocks + m, fg_bwd_turn_rank(p, n_block, m, n_m, sq, sk), tid);
#if FG_DQ_VEC
        float *acc = p.dq_accum + (bh * sq_pad + m0) * FG_HEAD_DIM + (qg * FG_DQ_G) * FG_HEAD_DIM +
                     dslice * FG_DQ_G * FG_DQ_W + lane * 4;
#pragma unroll
        for (int mt = 0; mt < FG_QM; mt++)
#pragma unroll
            for (int i = 0; i < FG_DQT; i++)
                asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(acc + (mt * FG_DQT + i) * 128),
                             "f"(dq[mt][i][0]), "f"(dq[mt][i][1]), "f"(dq[mt][i][2]), "f"(dq[mt][i][3]) : "memory");
#else
        float *acc = p.dq_accum + (bh * sq_pad + m0 + qg * FG_DQ_G + g) * FG_HEAD_DIM + dslice * FG_DQT * 8 + 2 * t;
#pragma unroll
        for (int mt = 0; mt < FG_QM; mt++)
#pragma unroll
            for (int i = 0; i < FG_DQT; i++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    atomicAdd(acc + (mt * 16 + (e / 2) * 8) * FG_HEAD_DIM + i * 8 + (e % 2), dq[mt][i][e]);
#endif
        if (FG_DETERMINISTIC) m_added = m; // handed on in the next block (or after the last)
#endif
    }
    if (FG_DETERMINISTIC && m_added >= 0) {
        fg_bwd_settle_adds(lane);
        __syncthreads();
        fg_bwd_pass_turn(p.dq_sem + bh * m_blocks + m_added, fg_bwd_turn_rank(p, n_block, m_added, n_m, sq, sk), tid);
    }
#if FG_DQ_STAGED
    if (!FG_DETERMINISTIC && lane == 0) fg_bulk_wait_all(); // smem stays till read
#endif
#if !FG_BWD_TMA
    fg_cp_async_wait<0>();
#endif

    if (p.dkv_accum == 0) {
        // dK (times the softmax scale) and dV in the output dtype, staged in the K and V tiles (free once
        // every warp is past its last products), then out by fg_bwd_dkdv_out (H200, bf16: 1.033x at d 64
        // and 128, 1.012x at d 256). GQA writes fp32 per query head below.
        constexpr int CH = FG_HEAD_DIM / 8; // 16-byte units of a row
        __syncthreads();
#pragma unroll
        for (int a = 0; a < FG_P2_KW / 16; a++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < FG_P2_DT; i++) {
                    const int row = p2_k0 + a * 16 + g + 8 * h, col = p2_wd * FG_P2_DW + 8 * i + 2 * t;
                    const u32 off = fg_tile_offset<CH>(row, col / 8, FG_BLOCK_N) + 4 * t;
                    *(u32 *)(smem + off) =
                        fg_pack2(dk[a][i][2 * h] * p.softmax_scale, dk[a][i][2 * h + 1] * p.softmax_scale);
                    *(u32 *)(smem + (s_v - s_k) + off) = fg_pack2(dv[a][i][2 * h], dv[a][i][2 * h + 1]);
                }
        __syncthreads();
        fg_bwd_dkdv_out<FG_BLOCK_N, FG_BLOCK_N, FG_BLOCK_N>(p, batch, kv_head, sk, n0, smem, 0, smem + (s_v - s_k), 0, tid,
                                                            FG_THREADS);
        return;
    }
    // GQA: fp32 per query head (fg_bwd_store_dkdv).
#pragma unroll
    for (int a = 0; a < FG_P2_KW / 16; a++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int key = n0 + p2_k0 + a * 16 + g + 8 * h;
            if (key >= sk) continue;
#pragma unroll
            for (int i = 0; i < FG_P2_DT; i++)
                fg_bwd_store_dkdv(p, batch, kv_head, bh, sk, key, p2_wd * FG_P2_DW + 8 * i + 2 * t, dk[a][i][2 * h],
                                  dk[a][i][2 * h + 1], dv[a][i][2 * h], dv[a][i][2 * h + 1]);
        }
}

#endif // !FG_WGMMA_BWD

// ---- post: dQ in the output dtype; GQA: dK, dV summed over query heads ----
// The 16-byte unit of the dQ accumulator at float offset 4 u of a block of FG_BW_ROWS rows (fg_dq_index's
// inverse): its first value is (row, col) of the block; in fragment order it holds (row, col), (row, col + 1),
// (row + 8, col), (row + 8, col + 1), with dQ^T (row, col), (row + 1, col), (row, col + 8), (row + 1, col + 8);
// row-major four columns of one row.
__device__ __forceinline__ void fg_dq_unit(u32 u, u32 &row, u32 &col) {
#if FG_BW_DQ_T
    constexpr u32 G = FG_DQ_G, W = FG_DQ_W;
    const u32 o = (4 * u) % (G * FG_HEAD_DIM), lane = u % 32, step = (o % (G * W)) / 128;
    row = (4 * u) / (G * FG_HEAD_DIM) * G + step % (G / 8) * 8 + (lane % 4) * 2;
    col = o / (G * W) * W + step / (G / 8) * 16 + lane / 4;
#elif FG_DQ_FRAG
    constexpr u32 G = FG_DQ_G, W = FG_DQ_W; // unsigned: the divisions by powers of two are shifts
    const u32 o = (4 * u) % (G * FG_HEAD_DIM), lane = u % 32, step = (o % (G * W)) / 128;
    row = (4 * u) / (G * FG_HEAD_DIM) * G + step / (W / 8) * 16 + lane / 4;
    col = o / (G * W) * W + step % (W / 8) * 8 + (lane % 4) * 2;
#else
    row = (4 * u) / FG_HEAD_DIM;
    col = (4 * u) % FG_HEAD_DIM;
#endif
}
// A CTA converts FG_BW_ROWS (64, or 80 with dQ^T) rows of dQ. In every accumulator layout they are one
// contiguous run of FG_BW_ROWS x head_dim floats (fg_dq_index keeps its groups of FG_DQ_G rows, which
// divides FG_BW_ROWS, whole), so the CTA reads the run once with 16-byte loads, every 32-byte sector by
// one warp instruction, puts each unit's values (scaled, in the output dtype) into a row-major tile in
// shared memory, and writes the rows out in 16-byte runs. The tile's rows are FG_POST_PITCH bytes apart, 4
// banks apart modulo 32: a warp's 32 units of one n8 step (8 rows x 4 column pairs, and 8 rows lower) land
// on 32 banks (dQ^T: pairs of lanes trade values so that each stores whole 4-byte pairs of one row, again on 32
// banks). (The kernel before
// gathered each thread's 8 columns of a row as float2s through fg_dq_index, half of every unit, the other
// half by another warp: 73 us against cuDNN's 58 us for its conversion at head_dim 128, 16384 tokens,
// bf16, H200, session 10's profile.)
constexpr int FG_POST_PITCH = FG_HEAD_DIM * 2 + 16;
extern "C" __global__ void __launch_bounds__(256)
fg_bwd_post_kernel(const __grid_constant__ fg_bwd_params p) {
    __shared__ __align__(16) unsigned char tile[FG_BW_ROWS * FG_POST_PITCH];
    fg_pdl_wait(); // the main kernel's dQ (and with GQA dK, dV) is complete
    const int head = blockIdx.y, batch = blockIdx.z, tid = threadIdx.x, r0 = blockIdx.x * FG_BW_ROWS;
    constexpr int CH = FG_HEAD_DIM / 8; // 8 elements (16 output bytes) per thread step
    if (r0 < p.seqlen_q) { // the same for the whole CTA
        const float4 *a = (const float4 *)(p.dq_accum + (((i64)batch * p.heads_q + head) * fg_bwd_rows_padded(p.seqlen_q) + r0) * FG_HEAD_DIM);
        const float s = p.softmax_scale;
        constexpr int STEPS = FG_BW_ROWS * FG_HEAD_DIM / 1024; // 256 units a step
        static_assert(FG_BW_ROWS * FG_HEAD_DIM % 1024 == 0, "whole steps");
        float4 xs[STEPS];
        // every load in flight before the stores; none of a unit whose rows are all past seqlen_q (in the last
        // CTA of a (batch, head): at 512 queries and 80-row CTAs, 48 of its 80 rows)
        const int rows = p.seqlen_q - r0;
#pragma unroll
        for (int k = 0; k < STEPS; k++) {
            u32 row, col;
            fg_dq_unit(tid + 256 * k, row, col);
            xs[k] = (int)row < rows ? a[tid + 256 * k] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < STEPS; k++) {
            const float4 x = xs[k];
            u32 row, col;
            fg_dq_unit(tid + 256 * k, row, col);
            unsigned char *const t = tile + row * FG_POST_PITCH + col * 2;
#if FG_BW_DQ_T
            // Lanes l and l ^ 4 hold columns col and col ^ 1 of the same rows: the even column's lane takes row
            // `row` of both, the odd one's row + 1, so each stores two 4-byte pairs (32 banks a warp).
            const bool odd = (tid / 4) % 2;
            const float y0 = __shfl_xor_sync(0xffffffffu, odd ? x.x : x.y, 4);
            const float y1 = __shfl_xor_sync(0xffffffffu, odd ? x.z : x.w, 4);
            unsigned char *const tp = odd ? t + FG_POST_PITCH - 2 : t;
            *(u32 *)tp = odd ? fg_pack2(y0 * s, x.y * s) : fg_pack2(x.x * s, y0 * s);
            *(u32 *)(tp + 16) = odd ? fg_pack2(y1 * s, x.w * s) : fg_pack2(x.z * s, y1 * s);
#elif FG_DQ_FRAG
            *(u32 *)t = fg_pack2(x.x * s, x.y * s);
            *(u32 *)(t + 8 * FG_POST_PITCH) = fg_pack2(x.z * s, x.w * s);
#else
            *(uint2 *)t = make_uint2(fg_pack2(x.x * s, x.y * s), fg_pack2(x.z * s, x.w * s));
#endif
        }
        __syncthreads();
        for (int i = tid; i < FG_BW_ROWS * CH; i += 256) {
            const int r = i / CH, c = (i % CH) * 8;
            if (r0 + r < p.seqlen_q) {
                u16 *dq = (u16 *)p.dq + batch * p.dq_stride[0] + (i64)(r0 + r) * p.dq_stride[1] + head * p.dq_stride[2] + c;
                *(uint4 *)dq = *(const uint4 *)(tile + r * FG_POST_PITCH + c * 2);
            }
        }
    }
    for (int i = tid; i < FG_BW_ROWS * CH; i += 256) {
        const int r = r0 + i / CH, c = (i % CH) * 8;
        if (p.dkv_accum != 0 && head < p.heads_kv && r < p.seqlen_k) {
            const int group = p.heads_q / p.heads_kv;
            const i64 plane = (i64)p.batch * p.heads_q * p.seqlen_k * FG_HEAD_DIM;
#pragma unroll
            for (int which = 0; which < 2; which++) {
                float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
                for (int hq = head * group; hq < (head + 1) * group; hq++) {
                    const float *a = p.dkv_accum + which * plane +
                                     (((i64)batch * p.heads_q + hq) * p.seqlen_k + r) * FG_HEAD_DIM + c;
#pragma unroll
                    for (int k = 0; k < 8; k++) sum[k] += a[k];
                }
                u32 out[4];
#pragma unroll
                for (int k = 0; k < 4; k++) out[k] = fg_pack2(sum[2 * k], sum[2 * k + 1]);
                u16 *dst = which == 0 ? (u16 *)p.dk + batch * p.dk_stride[0] + (i64)r * p.dk_stride[1] + head * p.dk_stride[2] + c
                                      : (u16 *)p.dv + batch * p.dv_stride[0] + (i64)r * p.dv_stride[1] + head * p.dv_stride[2] + c;
                *(uint4 *)dst = make_uint4(out[0], out[1], out[2], out[3]);
            }
        }
    }
}
