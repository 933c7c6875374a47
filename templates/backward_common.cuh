// backward_common.cuh: what every backward kernel shares (the mma.sync family's three and the sm_90a
// family's pre/post kernels and main kernel): the tile constants, the fp32 dQ accumulator's layout
// (fg_dq_index), the workspace rows, the bulk reduce-add of a staged dQ, and the pieces of both main
// kernels (masking, P, the query-block stream).
#ifndef FG_BACKWARD_COMMON_CUH
#define FG_BACKWARD_COMMON_CUH

// V's head dim (head_dim_v), which O, dO and dV share: FG_HEAD_DIM unless the variant gives V one of its own (the
// mma.sync kernel's; DeepSeek's 192/128). Q, K, dQ and dK have FG_HEAD_DIM. Its padded width follows the
// emitter's spec_bwd_dim_padded, as FG_HEAD_DIM_PADDED's does.
#ifndef FG_HEAD_DIM_V
#define FG_HEAD_DIM_V FG_HEAD_DIM
#define FG_HEAD_DIM_V_PADDED FG_HEAD_DIM_PADDED
#endif

#include "common/fg_params.h"
#include "common/score_mods.cuh"
#include "common/types.cuh"
#include "common/mma.cuh"
#include "common/cp_async.cuh"
#include "common/tma.cuh"
#include "common/bwd_order.h"
#include "common/bwd_tiles.h"

constexpr int FG_THREADS = FG_WARPS * 32;
// The mma.sync kernels compute on FG_HEAD_DIM_PADDED columns (the emitter's: head_dim rounded up to 16, above
// 128 to 32; spec_bwd_head_dim_padded), which every tile, fragment and the dQ accumulator's rows take;
// FG_HEAD_DIM bounds the tensors only. The loaders zero-fill the columns past it (fg_tile_loader's col_ok), so
// every product is exact and the padding columns of dQ, dK and dV come out 0; no store writes them, and GQA's
// dK/dV accumulator has rows of FG_HEAD_DIM. (The sm_90a kernel and the tma=1 variants take head dims that need
// no padding.)
constexpr int FG_DT = FG_HEAD_DIM_PADDED / 8; // n8 tiles of head_dim columns
// The dQ product's warp tiles: 16 query rows x a slice of head_dim, or with 8 keys a warp at head_dim a multiple
// of 64, 32 rows (two m16 tiles) x a slice half as wide (FlashAttention-2's layout there): the same dQ registers,
// fewer ldmatrix of K per MMA.
constexpr int FG_DQ_M16_TILES = fg_bwd_qm(FG_BLOCK_M, FG_BLOCK_N, FG_WARPS, FG_HEAD_DIM_PADDED); // (bwd_tiles.h)
constexpr int FG_DQ_GROUPS = FG_BLOCK_M / (16 * FG_DQ_M16_TILES); // query groups of the dQ product, 16 x FG_DQ_M16_TILES rows each
constexpr int FG_DQ_SLICES = FG_WARPS / FG_DQ_GROUPS;      // warps sharing a query group, each a slice of head_dim
constexpr int FG_DQ_N8_TILES = FG_DT / FG_DQ_SLICES;    // n8 tiles of dQ per warp
constexpr int FG_DS_ROW_CHUNKS = FG_BLOCK_M / 8;     // 16-byte chunks of a P^T or dS^T row (queries)
constexpr int FG_V_CHUNKS = FG_HEAD_DIM_V_PADDED / 8; // 16-byte chunks of a V or dO tile row (FG_CHUNKS: Q's, K's)
constexpr bool FG_SAME_V = FG_HEAD_DIM_V == FG_HEAD_DIM && FG_HEAD_DIM_V_PADDED == FG_HEAD_DIM_PADDED; // V of Q's dim
constexpr u32 FG_K_BYTES = FG_BLOCK_N * FG_HEAD_DIM_PADDED * 2;
constexpr u32 FG_V_BYTES = FG_BLOCK_N * FG_HEAD_DIM_V_PADDED * 2;
constexpr u32 FG_Q_BLOCK_BYTES = FG_BLOCK_M * FG_HEAD_DIM_PADDED * 2;
constexpr u32 FG_DO_BLOCK_BYTES = FG_BLOCK_M * FG_HEAD_DIM_V_PADDED * 2;
constexpr u32 FG_DS_BYTES = FG_BLOCK_N * FG_BLOCK_M * 2;
constexpr u32 FG_ROW_BYTES = FG_BLOCK_M * 4; // the LSE (or D) of one query block, fp32
// sm_90 and newer (FG_DQ_STAGED, set by the emitter from spec_bwd_dq_staged, which also sizes the shared
// memory) stage a query block's dQ in shared memory and add it into the accumulator with bulk reduce-adds
// (cp.reduce.async.bulk, done by the TMA unit), one per warp (mma.sync) or warpgroup (backward_wgmma.cuh) a
// block. Element-wise atomics from the fragments made L2 the bottleneck (ncu on the H200: L2 81% busy, SM
// pipes 24%): every warp instruction touched 8 half-used sectors. A bulk reduce-add per row, the next
// version, left the adds issued from a loop over the lanes (the instruction takes uniform registers):
// 13-21% of the sm_90a kernel's stall samples (ncu, d 128 and d 64, 4k), so the staged
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
constexpr int FG_DQ_GROUP_ROWS = FG_BW_DQ_T ? FG_BLOCK_M : 64, FG_DQ_GROUP_COLS = FG_BW_DQ_N;
#else
constexpr int FG_DQ_GROUP_ROWS = 16 * FG_DQ_M16_TILES, FG_DQ_GROUP_COLS = FG_DQ_N8_TILES * 8; // a warp: its 16 or 32 rows x its slice of head_dim
#endif
// The host's spec_bwd_rows_block: 80 with dQ^T, else 64. The rows of a post-kernel CTA (whole groups) and
// of a Q or dO TMA box (fg_bwd_tma_block).
constexpr int FG_BW_ROWS = FG_BW_DQ_T ? FG_BLOCK_M : 64;
static_assert(FG_BW_ROWS % FG_DQ_GROUP_ROWS == 0 && FG_HEAD_DIM_PADDED % FG_DQ_GROUP_COLS == 0 && FG_DQ_GROUP_COLS % 8 == 0, "dQ accumulator groups");
// Where element (row, col) of a (batch, head)'s dQ accumulator lives, in floats from that head's row 0 (rows of
// FG_HEAD_DIM_PADDED floats).
// Before sm_90 without FG_DQ_STAGED (scalar atomics): row-major. Else: groups of FG_DQ_GROUP_ROWS rows, each FG_DQ_GROUP_ROWS x head_dim
// floats; a group's column slices of FG_DQ_GROUP_COLS one after another; inside a slice its 16-row tiles, and in
// a tile its n8 column steps i, each 32 lanes x 4 floats: lane (row % 8) * 4 + (col % 8) / 2 holds
// (row, col), (row, col + 1), (row + 8, col), (row + 8, col + 1) at col even, row % 16 < 8 (the m16n8
// accumulator fragment, which is also wgmma's for each 16 rows of a warpgroup's 64). With dQ^T (FG_BW_DQ_T:
// wgmma's m64 n80 accumulator of a warpgroup's 64 columns x the block's 80 rows) the roles swap: inside a
// slice its 16-column tiles (the warps), in a tile its n8 row steps, each 32 lanes x 4 floats: lane (col % 8)
// * 4 + (row % 8) / 2 holds (row, col), (row + 1, col), (row, col + 8), (row + 1, col + 8) at row even, col %
// 16 < 8.
__device__ __forceinline__ i64 fg_dq_index(i64 row, int col) {
#if FG_BW_DQ_T
    const int r = (int)(row % FG_DQ_GROUP_ROWS), sl = col / FG_DQ_GROUP_COLS, c = col % FG_DQ_GROUP_COLS;
    return (row - r) * FG_HEAD_DIM_PADDED + sl * (FG_DQ_GROUP_ROWS * FG_DQ_GROUP_COLS) + ((c / 16) * (FG_DQ_GROUP_ROWS / 8) + r / 8) * 128 +
           ((c % 8) * 4 + (r % 8) / 2) * 4 + ((c / 8) % 2) * 2 + r % 2;
#elif FG_DQ_FRAG
    const int r = (int)(row % FG_DQ_GROUP_ROWS), sl = col / FG_DQ_GROUP_COLS, c = col % FG_DQ_GROUP_COLS;
    return (row - r) * FG_HEAD_DIM_PADDED + sl * (FG_DQ_GROUP_ROWS * FG_DQ_GROUP_COLS) + ((r / 16) * (FG_DQ_GROUP_COLS / 8) + c / 8) * 128 +
           ((r % 8) * 4 + (c % 8) / 2) * 4 + ((r / 8) % 2) * 2 + c % 2;
#else
    return row * FG_HEAD_DIM_PADDED + col;
#endif
}
static_assert(FG_BLOCK_N == 16 * FG_WARPS || FG_BLOCK_N == 8 * FG_WARPS, "16 or 8 keys per warp");
static_assert(FG_WGMMA_BWD || (FG_WARPS % FG_DQ_GROUPS == 0 && FG_DT % (2 * FG_DQ_SLICES) == 0), "the dQ product's warp split");

constexpr float FG_LOG2E = 1.4426950408889634f;

// Workspace rows a (batch, head): a multiple of 128 (every block_m but 80 divides 128); on sm_90 at head_dim
// 128 without a causal mask, where the sm_90a kernel's 80-query blocks (FG_BW_DQ_T) may run, the multiple of
// 128 at or past the next multiple of 80. The same rule as the host's bwd_rows_padded (runtime/backward.c), which
// sizes the workspace for every variant of a call (read from the parameters instead, the sm_90a kernel at
// head_dim 128 spilled 56 bytes). The pre kernel's grid covers the rows the main kernel reads, in blocks of 64.
__device__ __forceinline__ i64 fg_bwd_rows_padded(int sq) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ / 10 == 90
    if (FG_HEAD_DIM == 128 && !FG_CAUSAL) sq = (sq + 79) / 80 * 80;
#endif
    return ((i64)sq + 127) / 128 * 128;
}

#ifndef FG_VARLEN
#define FG_VARLEN 0
#endif
#if FG_VARLEN
// Variable-length sequences: the parameters of sequence b as a batch of one (p.batch 1, its lengths, its
// tensors' rows from its first; the kernels then run with batch 0), for every kernel of the backward. The
// workspace holds each sequence's rows at its own offset: the region of sequence b (heads_q x its padded
// rows, fg_bwd_rows_padded, for the dQ accumulator, lse2, D and the semaphores) starts at heads_q x W(b)
// rows, W(b) = (q_start + FG_BWD_SEQ_PAD b) rounded down to a multiple of 128, which the next sequence's W
// never undercuts (a sequence of n queries pads to fewer than n + 207 rows), and its GQA dK/dV accumulators at
// heads_q x k_start rows of FG_HEAD_DIM + FG_HEAD_DIM_V floats. The host sizes the workspace for heads_q x
// (total_q + FG_BWD_SEQ_PAD batch) rows (runtime/backward_varlen.c), which every clamped offset stays within.
__device__ __forceinline__ fg_bwd_params fg_bwd_seq_params(const fg_bwd_params &p, int b) {
    fg_bwd_params s = p;
    int qs, ks;
    fg_seq_span(p.cu_seqlens_q, b, p.total_q, qs, s.seqlen_q);
    fg_seq_span(p.cu_seqlens_k, b, p.total_k, ks, s.seqlen_k);
    s.batch = 1;
    s.q_row0 = qs, s.k_row0 = ks;
    s.q = (const u16 *)p.q + (i64)qs * p.q_stride[1];
    s.o = (const u16 *)p.o + (i64)qs * p.o_stride[1];
    s.dout = (const u16 *)p.dout + (i64)qs * p.do_stride[1];
    s.dq = (u16 *)p.dq + (i64)qs * p.dq_stride[1];
    s.lse = p.lse + (i64)qs * p.lse_stride[2];
    s.k = (const u16 *)p.k + (i64)ks * p.k_stride[1];
    s.v = (const u16 *)p.v + (i64)ks * p.v_stride[1];
    s.dk = (u16 *)p.dk + (i64)ks * p.dk_stride[1];
    s.dv = (u16 *)p.dv + (i64)ks * p.dv_stride[1];
    const i64 rows = (i64)p.heads_q * (((i64)qs + FG_BWD_SEQ_PAD * (i64)b) / 128 * 128);
    s.dq_accum = p.dq_accum + rows * FG_HEAD_DIM_PADDED;
    s.lse2 = p.lse2 + rows;
    s.dsum = p.dsum + rows;
    if (p.dq_sem) s.dq_sem = p.dq_sem + rows / 16;
    if (p.dkv_accum) s.dkv_accum = p.dkv_accum + (i64)p.heads_q * ks * (FG_HEAD_DIM + FG_HEAD_DIM_V);
    return s;
}
// A kernel's parameters: its sequence's (fg_bwd_seq_params) with FG_VARLEN, else the launch's own.
#define FG_BWD_PARAMS(launch) const fg_bwd_params p = fg_bwd_seq_params(launch, (int)blockIdx.z)
#define FG_BWD_BATCH 0
#else
#define FG_BWD_PARAMS(launch) const fg_bwd_params &p = launch
#define FG_BWD_BATCH ((int)blockIdx.z)
#endif
// The rows of the dQ accumulator the main kernel adds into and the pre kernel prepares (runtime/backward.c
// bwd_rows_read): whole 80-query blocks with dQ^T, else whole 128-row groups.
__device__ __forceinline__ int fg_bwd_rows_read(int sq) {
    const int bm = FG_BW_DQ_T ? FG_BLOCK_M : 128;
    return (sq + bm - 1) / bm * bm;
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
// kernel causal, 0.67-0.72x not.)
// (FG_VARLEN: the grid has the longest sequence's key blocks, so a sequence's last block comes after blocks
// that are past its keys and exit at once.)
__device__ __forceinline__ int fg_bwd_key_block() {
    return FG_DETERMINISTIC && FG_CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
}
// Key block j's rank at query block m (bwd_order.h); n_m: the query blocks of the rotated stream (M above).
__device__ __forceinline__ int fg_bwd_turn_rank(const fg_bwd_params &p, int j, int m, int n_m, int sq, int sk) {
    // the key blocks of the (batch, head): the grid's, or with FG_VARLEN the sequence's (the grid has the longest's)
    const int nb = FG_VARLEN ? (sk + FG_BLOCK_N - 1) / FG_BLOCK_N : (int)gridDim.x;
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


// ---- pieces of the main kernels (this file's and backward_wgmma.cuh's) ----
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
// (the host's choice, runtime/backward.c: a power of two dividing the heads, as many as keep their Q, dO and dQ
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

// ---- the model variants (varlen=1 backward variants with window, sinks, softcap, alibi; score_mods.cuh) ----
// A CTA's constants of them: the transforms of its query head, and the window. Without model variants it
// holds nothing the kernel reads; the kernel compiles it in only under FG_MODS.
// A custom mod (FG_USER_MODS) takes the CTA's query head, the softmax scale and the launch's aux arrays (the
// __grid_constant__ parameter's, where p is a varlen call's copy of it); its sequence is blockIdx.z.
struct fg_bwd_variant {
    fg_score_mods m;
    int left, right, top_left;
    int head;
    float scale; // the forward's softmax scale: a mod's logit is the forward's to the bit
    const fg_mod_aux *aux;
};
__device__ __forceinline__ fg_bwd_variant fg_bwd_variant_make(const fg_bwd_params &p, const fg_mod_aux *aux, int head) {
    fg_bwd_variant v;
    if constexpr (FG_SCORE_MODS) v.m = fg_mods_make(p.softcap, p.alibi_slopes, head, p.softmax_scale);
    v.left = FG_WINDOW ? p.window_left : -1, v.right = FG_WINDOW ? p.window_right : -1;
    v.top_left = FG_WINDOW ? p.causal_top_left : 0;
    if constexpr (FG_USER_MODS) v.head = head, v.aux = aux, v.scale = p.softmax_scale;
    return v;
}

// The query blocks [m_first, m_last) with a row that sees a key of the block at n0: with a window, those
// between the first row whose keys reach n0 and the first whose keys start past the block (a row's keys,
// fg_row_keys, move right with the row).
__device__ __forceinline__ void fg_bwd_query_blocks(int n0, int sq, int sk, int &m_first, int &m_last,
                                                    const fg_bwd_variant &v) {
    fg_bwd_query_blocks(n0, sq, sk, m_first, m_last);
    if constexpr (FG_WINDOW) {
        const int off = sk - sq; // row i's diagonal is i + off
        int lo = 0, hi = sq;     // rows [lo, hi)
        if (FG_CAUSAL) lo = max(lo, v.top_left ? n0 : n0 - off);
        if (v.right >= 0) lo = max(lo, n0 - off - v.right);
        if (v.left >= 0) hi = min(hi, n0 + FG_BLOCK_N + v.left - off);
        m_first = min(lo, sq) / FG_BLOCK_M;
        m_last = hi > lo ? (hi + FG_BLOCK_M - 1) / FG_BLOCK_M : m_first;
    }
}

// Whether block (n0, m0) needs the mask: with a window, unless every row of it sees every key (its first
// row's keys reach past the block's last, its last row's start at or before the block's first).
__device__ __forceinline__ bool fg_bwd_needs_mask(int n0, int m0, int sk, int sq, const fg_bwd_variant &v) {
    if constexpr (!FG_WINDOW) return fg_bwd_needs_mask(n0, m0, sk, sq);
    const int last = min(m0 + FG_BLOCK_M, sq) - 1;
    return n0 + FG_BLOCK_N > fg_row_keys(m0, sq, sk, v.left, v.right, v.top_left).hi ||
           n0 < fg_row_keys(max(last, m0), sq, sk, v.left, v.right, v.top_left).lo;
}

// The keys queries qrow0 and qrow0 + 1 see (fg_row_keys), for fg_bwd_p_ds's masked instance: computed once for
// all the key rows of a fragment column (per element, the window's d 64 tile spilled 12 bytes).
struct fg_bwd_spans {
    fg_key_span k[2];
};
__device__ __forceinline__ fg_bwd_spans fg_bwd_spans_of(int qrow0, int sk, int sq, const fg_bwd_variant &v) {
    fg_bwd_spans r;
    r.k[0] = fg_row_keys(qrow0, sq, sk, v.left, v.right, v.top_left);
    r.k[1] = fg_row_keys(qrow0 + 1, sq, sk, v.left, v.right, v.top_left);
    return r;
}

// The queries that see a key (fg_row_keys turned around, for a kernel whose threads hold key rows for the
// whole run: the sm_90a kernel). Query r sees key j < sk when j <= r + c (causal: c = sk - sq, top-left 0),
// j <= r + sk - sq + right and j >= r + sk - sq - left (the window's sides, -1 unbounded): r in [j - a, j + b],
// with a and b the same for every key of the CTA (so warp-uniform), each side at most 2^30 (unbounded).
struct fg_key_rel {
    int a, b;
};
__device__ __forceinline__ fg_key_rel fg_key_rel_make(int sq, int sk, const fg_bwd_variant &v) {
    const int off = sk - sq, far = 1 << 30;
    fg_key_rel r{far, far};
    if (FG_CAUSAL) r.a = FG_WINDOW && v.top_left ? 0 : off;
    if (FG_WINDOW && v.right >= 0) r.a = min(r.a, off + v.right);
    if (FG_WINDOW && v.left >= 0) r.b = v.left - off;
    return r;
}
// The query rows that see every key of the block at n0 ([its last key - a, its first key + b]: both ends grow
// with the key), none when the block reaches past sk; a query block inside them needs no mask (rows past sq none
// either: their lse2 is +inf).
struct fg_query_span {
    int lo, hi;
};
__device__ __forceinline__ fg_query_span fg_block_full_queries(int n0, int sk, const fg_key_rel &r) {
    if (n0 + FG_BLOCK_N > sk) return fg_query_span{1, 0};
    return fg_query_span{n0 + FG_BLOCK_N - 1 - r.a, n0 + r.b};
}
// The query blocks [m_first, m_last) with a row that sees a key of the block at n0 (keys below sk): rows
// [n0 - a, last key + b].
__device__ __forceinline__ void fg_bwd_query_blocks(int n0, int sq, int sk, int &m_first, int &m_last,
                                                    const fg_key_rel &r) {
    const int lo = max(0, n0 - r.a), hi = min(sq, min(n0 + FG_BLOCK_N, sk) + r.b); // rows [lo, hi)
    m_first = min(lo, sq) / FG_BLOCK_M;
    m_last = hi > lo ? (hi + FG_BLOCK_M - 1) / FG_BLOCK_M : m_first;
}
__device__ __forceinline__ bool fg_bwd_needs_mask(int m0, int sq, const fg_query_span &full) {
    return m0 < full.lo || min(m0 + FG_BLOCK_M, sq) - 1 > full.hi;
}
// The key-row form of the mask: key `key` (< sk) is hidden from query qrow.
struct fg_key_mask {
    fg_key_rel r;
    int sk;
};
__device__ __forceinline__ bool fg_masked(const fg_key_mask &m, int key, int qrow, int e) {
    const int d = qrow - key;
    return key >= m.sk || d < -m.r.a || d > m.r.b;
}
// The query-pair form (fg_bwd_spans): key `key` outside the e-th query's span.
__device__ __forceinline__ bool fg_masked(const fg_bwd_spans &sp, int key, int qrow, int e) {
    return key >= sp.k[e].hi || key < sp.k[e].lo;
}
// P^T alone with the model variants other than the softcap (the sm_90a kernel's split path, which forms dS^T after
// dP^T arrives and so has no place for the softcap's derivative): ALiBi's bias, then the mask (MASK).
template <bool MASK>
__device__ __forceinline__ float fg_bwd_p(float s, float lse2, int key, int qrow, int sk, int sq, float scale_log2,
                                          const fg_bwd_variant &v, const fg_key_mask &km) {
    if constexpr (FG_ALIBI) s = fmaf(-v.m.slope, fabsf((float)(qrow + sk - sq - key)), s);
    const bool masked = MASK && fg_masked(km, key, qrow, 0);
    return masked ? 0.f : fg_exp2(fmaf(s, scale_log2, -lse2));
}

// The sm_90a kernel settles a mask that reads aux arrays a block at a time from the call's block map
// (fg_bwd_block_verdict): it skips the query blocks the map hides and runs the instance without a mask (MASK false
// in fg_bwd_p_ds, which then evaluates no custom mask either) on those it keeps whole.
constexpr bool FG_BWD_MASK_BY_BLOCK = FG_USER_MASK && FG_USER_MASK_MAP && FG_WGMMA_BWD;

// fg_bwd_p_ds with the model variants: S transformed as the forward did (softcap, ALiBi) before P, the keys
// outside the rows' spans (sp, MASK) masked, and dS taking the softcap's derivative,
// d(cap tanh(scale s / cap)) / d(scale s) = 1 - tanh^2.
// The mask comes from the two queries' key spans (fg_bwd_spans) or from the key row's (fg_key_mask).
template <bool MASK, class SPANS>
__device__ __forceinline__ void fg_bwd_p_ds(float (&s)[4], float (&dp)[4], int h, float2 lse2, float2 dsum, int key,
                                            int qrow0, int sk, int sq, float scale_log2, const fg_bwd_variant &v,
                                            const SPANS &sp) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int qrow = qrow0 + e;
        float x = s[2 * h + e], grad = 1.f;
        if constexpr (FG_SOFTCAP) {
            const float t = fg_tanh(x * v.m.cap_in);
            x = v.m.cap_out * t;
            grad = fmaf(-t, t, 1.f);
        }
        if constexpr (FG_ALIBI) x = fmaf(-v.m.slope, fabsf((float)(qrow + sk - sq - key)), x);
#if FG_USER_MODS
        // A custom mod on the logit (the forward's scale s), P from the logit, score_mod's derivative in dS. Its q and kv
        // are held inside the sequence: a padding row past sq (P 0 by its lse2 of +inf) or a key past sk (masked) must
        // not read past the mod's arrays, whose NaN would survive P = 0 in dV and dS.
        // (positions as floats too, for the mod's fg.float of them: q - kv, kv and 0; generator/mod_emit.c)
        x *= v.scale;
        const int mq = min(qrow, sq - 1) + sk - sq, mk = min(key, sk - 1);
        const float fqr = (float)(mq - mk), fk0 = (float)mk;
#if FG_USER_AUX_GRAD
        const float logit = x; // what score_mod takes, for the derivatives in its trainable arrays
#endif
#if FG_USER_SCORE
        float dmod;
        x = fg_user_score_grad(x, (int)blockIdx.z, v.head, mq, mk, fqr, fk0, 0.f, *v.aux, dmod);
        grad *= dmod;
#endif
#if FG_USER_MASK
        if (MASK || !FG_BWD_MASK_BY_BLOCK) {
            const float keep = fg_user_mask((int)blockIdx.z, v.head, mq, mk, fqr, fk0, 0.f, *v.aux); // 0, -inf (hidden) or NaN (bad)
            x = keep == 0.f ? x : keep; // a hidden key stays hidden whatever its score
        }
#endif
        constexpr float p_scale = 1.4426950408889634f; // the logit's exponent base 2
#else
        const float p_scale = scale_log2;
#endif
        bool masked = false;
        if constexpr (MASK) masked = fg_masked(sp, key, qrow, e);
        const float pv = masked ? 0.f : fg_exp2(fmaf(x, p_scale, -(e ? lse2.y : lse2.x)));
        s[2 * h + e] = pv;
        // (P = 0, masked or hidden: dS = 0, also where the mod's derivative is NaN or infinite there)
        const float dx = pv * (dp[2 * h + e] - (e ? dsum.y : dsum.x)); // dL / d(the score P takes)
#if FG_USER_AUX_GRAD
        if (pv != 0.f) fg_user_aux_grad(dx, logit, (int)blockIdx.z, v.head, mq, mk, fqr, fk0, 0.f, *v.aux);
#endif
        dp[2 * h + e] = FG_USER_MODS && pv == 0.f ? 0.f : dx * grad;
    }
}

#if FG_USER_MASK
// The custom mask's verdict (fg_mask_verdict_rows) on query block m against the key block at n0.
__device__ __forceinline__ int fg_bwd_block_verdict(const fg_mod_aux &aux, int head, int m, int n0, int sq, int sk) {
    return fg_mask_verdict_rows(aux, (int)blockIdx.z, head, m * FG_BLOCK_M, min(m * FG_BLOCK_M + FG_BLOCK_M, sq) - 1, n0,
                                min(n0 + FG_BLOCK_N, sk) - 1, sq, sk);
}

// Drops from [m_first, m_last) the query blocks at either end that a custom mask hides from every key of the block at
// n0 (fg_mask_verdict_rows): their P and dS are 0. Not in the
// deterministic mode, whose dQ turns (bwd_order.h) count every key block a query block's causal span holds.
__device__ __forceinline__ void fg_bwd_mask_trim(const fg_mod_aux &aux, int head, int n0, int sq, int sk, int &m_first,
                                                 int &m_last) {
    if constexpr (FG_DETERMINISTIC) return;
    if (n0 >= sk) return;
    if (fg_map_trim(aux, aux.span_cols, aux.map_cols, (int)blockIdx.z, head, n0 / FG_MAP_BLOCK,
                    (min(n0 + FG_BLOCK_N, sk) - 1) / FG_MAP_BLOCK, FG_BLOCK_M, m_first, m_last))
        return; // the block map's span of the key block's rows (a mask that reads aux arrays)
    fg_trim_hidden(m_first, m_last, [&](int a, int z) {
        return fg_mask_verdict_rows(aux, (int)blockIdx.z, head, a * FG_BLOCK_M, min(z * FG_BLOCK_M + FG_BLOCK_M, sq) - 1, n0,
                                    min(n0 + FG_BLOCK_N, sk) - 1, sq, sk) == FG_IV_HIDDEN;
    });
}
#endif

// K and V of the key block at n0 into their tiles (joining the caller's next cp.async group).
__device__ __forceinline__ void fg_bwd_load_kv(const fg_bwd_params &p, u32 s_k, u32 s_v, int batch, int kv_head, int n0,
                                               int sk, int tid) {
    fg_tile_loader<FG_BLOCK_N, FG_THREADS> k_loader;
    k_loader.init((const fg_in_t *)p.k + batch * p.k_stride[0] + (i64)n0 * p.k_stride[1] + kv_head * p.k_stride[2],
                  p.k_stride[1], tid);
    k_loader.load(s_k, sk - n0, p.k_stride[1]);
    fg_tile_loader<FG_BLOCK_N, FG_THREADS, FG_HEAD_DIM_V, FG_HEAD_DIM_V_PADDED> v_loader;
    v_loader.init((const fg_in_t *)p.v + batch * p.v_stride[0] + (i64)n0 * p.v_stride[1] + kv_head * p.v_stride[2],
                  p.v_stride[1], tid);
    v_loader.load(s_v, sk - n0, p.v_stride[1]);
}

// The query blocks a CTA streams, from m_first on: Q, dO, lse2 and D of block m into stage st (the two
// fp32 rows, FG_BLOCK_M * 4 bytes each, by the first threads, 16 bytes each: the workspace rows are
// padded, so always in bounds). THREADS: the threads that load (tid below it).
template <int THREADS = FG_THREADS>
struct fg_bwd_qstream {
    fg_tile_loader<FG_BLOCK_M, THREADS> q;
    fg_tile_loader<FG_BLOCK_M, THREADS, FG_HEAD_DIM_V, FG_HEAD_DIM_V_PADDED> dout;
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
        q.load(s_q + st * FG_Q_BLOCK_BYTES, sq - m * FG_BLOCK_M, p.q_stride[1]);
        dout.load(s_do + st * FG_DO_BLOCK_BYTES, sq - m * FG_BLOCK_M, p.do_stride[1]);
        constexpr int CH = FG_ROW_BYTES / 16;
        if (tid < 2 * CH) {
            const int which = tid / CH, c = tid % CH;
            const float *src = (which ? p.dsum : p.lse2) + bh * sq_pad + (i64)m * FG_BLOCK_M + c * 4;
            fg_cp_async16((which ? s_d : s_lse) + st * FG_ROW_BYTES + c * 16, src, true);
        }
    }
};

// The TMA loads of the backward main kernels (backward_wgmma.cuh; the tma=1 variants here), issued by one thread
// into the same swizzled tiles the cp.async loaders fill (slabs of 64 columns, FG_BLOCK_N * 128 or
// FG_BLOCK_M * 128 bytes apart; rows past the tensor read as zeros), each arming `bar` with its bytes.
// K and V of the key block at n0 (FG_VARLEN: rows of the packed tensors, p.k_row0 added by the caller):
__device__ __forceinline__ void fg_bwd_tma_kv(const fg_tma_params &tm, u32 s_k, u32 s_v, int n0, int kv_head, int batch,
                                              u32 bar) {
    fg_mbar_expect_tx(bar, FG_K_BYTES + FG_V_BYTES);
#pragma unroll
    for (int c = 0; c < (FG_HEAD_DIM > FG_HEAD_DIM_V ? FG_HEAD_DIM : FG_HEAD_DIM_V) / 64; c++) {
        if (c < FG_HEAD_DIM / 64) fg_tma_load(s_k + c * FG_BLOCK_N * 128, tm.k, c * 64, n0, kv_head, batch, bar);
        if (c < FG_HEAD_DIM_V / 64) fg_tma_load(s_v + c * FG_BLOCK_N * 128, tm.v, c * 64, n0, kv_head, batch, bar);
    }
}
// Query block m into stage st: Q and dO (boxes of 64 columns x FG_BW_ROWS rows: 64, or the whole 80-query
// block with dQ^T, as launch_bwd encodes the maps), and the LSE and D rows (1-d bulk
// copies; the workspace pads them to whole blocks). row0: the (batch, head)'s first workspace row. FG_VARLEN: the
// sequence's rows of the packed Q and dO, from p.q_row0; rows past the sequence are the next one's, whose lse2
// (+inf in this sequence's padding) makes their P 0.
static_assert(!(FG_BWD_TMA || FG_WGMMA_BWD) || FG_BLOCK_M % FG_BW_ROWS == 0, "whole boxes");
__device__ __forceinline__ void fg_bwd_tma_block(const fg_tma_params &tm, const fg_bwd_params &p, u32 s_q, u32 s_do,
                                                 u32 s_lse, u32 s_d, int m, int st, int head, int batch, i64 row0,
                                                 u32 bar) {
    fg_mbar_expect_tx(bar, FG_Q_BLOCK_BYTES + FG_DO_BLOCK_BYTES + 2 * FG_ROW_BYTES);
#pragma unroll
    for (int r = 0; r < FG_BLOCK_M; r += FG_BW_ROWS)
#pragma unroll
        for (int c = 0; c < (FG_HEAD_DIM > FG_HEAD_DIM_V ? FG_HEAD_DIM : FG_HEAD_DIM_V) / 64; c++) {
            const u32 off = c * FG_BLOCK_M * 128 + r * 128;
            const int row = m * FG_BLOCK_M + r + (FG_VARLEN ? p.q_row0 : 0);
            if (c < FG_HEAD_DIM / 64) fg_tma_load(s_q + st * FG_Q_BLOCK_BYTES + off, tm.q, c * 64, row, head, batch, bar);
            if (c < FG_HEAD_DIM_V / 64) fg_tma_load(s_do + st * FG_DO_BLOCK_BYTES + off, tm.o, c * 64, row, head, batch, bar);
        }
    const i64 row = row0 + (i64)m * FG_BLOCK_M;
    fg_bulk_load(s_lse + st * FG_ROW_BYTES, p.lse2 + row, FG_ROW_BYTES, bar);
    fg_bulk_load(s_d + st * FG_ROW_BYTES, p.dsum + row, FG_ROW_BYTES, bar);
}

// The GQA accumulator of dK and dV (the workspace's fp32 rows per query head): dK's plane, batch x heads_q x sk rows
// of FG_HEAD_DIM floats, then dV's, rows of FG_HEAD_DIM_V. Its dV plane (fg_bwd_params of a batch, or of one
// sequence: fg_bwd_seq_params).
__device__ __forceinline__ float *fg_bwd_dv_accum(const fg_bwd_params &p, int sk) {
    return p.dkv_accum + (i64)p.batch * p.heads_q * sk * FG_HEAD_DIM;
}

// dK = scale * sum dS^T Q of key `key` at columns kcol and kcol + 1 (with k_on), and dV at vcol and vcol + 1 (with
// v_on; the callers' unrolled loops make both constants): even columns, none stored past FG_HEAD_DIM or
// FG_HEAD_DIM_V (multiples of 8); 16-bit outputs (one KV head per query head), or fp32 per query head (GQA: the post
// kernel sums a KV head's query heads in order). With V of Q's head dim the callers pass one column for both and
// both flags set, and it takes the form with one check and one address (the general one changed ptxas's schedule
// of those kernels: d 256, sm_90, 1 KiB more code).
__device__ __forceinline__ void fg_bwd_store_dkdv(const fg_bwd_params &p, int batch, int kv_head, i64 bh, int sk, int key,
                                                  bool k_on, int kcol, float k0, float k1, bool v_on, int vcol, float v0,
                                                  float v1) {
    if constexpr (FG_SAME_V) {
        if (FG_HEAD_DIM != FG_HEAD_DIM_PADDED && kcol >= FG_HEAD_DIM) return; // a padding column
        k0 *= p.softmax_scale;
        k1 *= p.softmax_scale;
        if (p.dkv_accum == 0) {
            u16 *dkp = (u16 *)p.dk + batch * p.dk_stride[0] + (i64)key * p.dk_stride[1] + kv_head * p.dk_stride[2] + kcol;
            u16 *dvp = (u16 *)p.dv + batch * p.dv_stride[0] + (i64)key * p.dv_stride[1] + kv_head * p.dv_stride[2] + kcol;
            *(u32 *)dkp = fg_pack2(k0, k1);
            *(u32 *)dvp = fg_pack2(v0, v1);
        } else {
            float *base = p.dkv_accum + ((bh * sk + key) * FG_HEAD_DIM + kcol);
            *(float2 *)base = make_float2(k0, k1);
            *(float2 *)(base + (i64)p.batch * p.heads_q * sk * FG_HEAD_DIM) = make_float2(v0, v1);
        }
    } else {
        const bool kst = k_on && (FG_HEAD_DIM == FG_HEAD_DIM_PADDED || kcol < FG_HEAD_DIM); // not a padding column
        const bool vst = v_on && (FG_HEAD_DIM_V == FG_HEAD_DIM_V_PADDED || vcol < FG_HEAD_DIM_V);
        k0 *= p.softmax_scale;
        k1 *= p.softmax_scale;
        if (p.dkv_accum == 0) {
            u16 *dkp = (u16 *)p.dk + batch * p.dk_stride[0] + (i64)key * p.dk_stride[1] + kv_head * p.dk_stride[2] + kcol;
            u16 *dvp = (u16 *)p.dv + batch * p.dv_stride[0] + (i64)key * p.dv_stride[1] + kv_head * p.dv_stride[2] + vcol;
            if (kst) *(u32 *)dkp = fg_pack2(k0, k1);
            if (vst) *(u32 *)dvp = fg_pack2(v0, v1);
        } else {
            if (kst) *(float2 *)(p.dkv_accum + ((bh * sk + key) * FG_HEAD_DIM + kcol)) = make_float2(k0, k1);
            if (vst) *(float2 *)(fg_bwd_dv_accum(p, sk) + ((bh * sk + key) * FG_HEAD_DIM_V + vcol)) = make_float2(v0, v1);
        }
    }
}

// Rows of a gradient staged in shared memory (16-bit, the fg_tile_offset layout of rows of TCH chunks: rows t0..
// of a tile of RT rows at `tile`, a generic pointer) out to its tensor (dst, the first key's row, rows `stride`
// elements apart) as whole 16-byte units, consecutive threads (thread of nthreads) along a row: keys key0 ..
// key0 + ROWS - 1, those below sk, the CH units below the tensor's head dim.
template <int ROWS, int CH, int TCH, int RT>
__device__ __forceinline__ void fg_bwd_rows_out(u16 *dst, i64 stride, int sk, int key0, const unsigned char *tile,
                                                int t0, int thread, int nthreads) {
#pragma unroll
    for (int u = thread; u < ROWS * CH; u += nthreads) {
        const int r = u / CH, c = u % CH;
        if (key0 + r >= sk) continue;
        *(uint4 *)(dst + (i64)r * stride + 8 * c) = *(const uint4 *)(tile + fg_tile_offset<TCH>(t0 + r, c, RT));
    }
}

// dK and dV rows staged in shared memory (16-bit, fg_tile_offset layouts of the padded head dims' columns: dK rows
// rk0.. of a tile of RK rows at dk_tile, dV rows rv0.. of a tile of RV rows at dv_tile; generic pointers) out to
// the outputs as whole 16-byte units, consecutive threads (thread of nthreads) along a row: keys key0 .. key0 +
// ROWS - 1, those below sk, columns below FG_HEAD_DIM (dV's: FG_HEAD_DIM_V). Both main kernels end with it for MHA
// (4-byte stores from the fragments, 8 rows a warp instruction, were 3.3-3.6% slower overall and 5-11% at 512).
// One pass for both where their rows are as wide, else one each (fg_bwd_rows_out).
template <int ROWS, int RK, int RV>
__device__ __forceinline__ void fg_bwd_dkdv_out(const fg_bwd_params &p, int batch, int kv_head, int sk, int key0,
                                                const unsigned char *dk_tile, int rk0, const unsigned char *dv_tile,
                                                int rv0, int thread, int nthreads) {
    constexpr int CH = FG_HEAD_DIM / 8, TCH = FG_HEAD_DIM_PADDED / 8; // 16-byte units of an output, a tile row
    if constexpr (!FG_SAME_V) {
        const i64 k0 = (i64)key0;
        fg_bwd_rows_out<ROWS, CH, TCH, RK>((u16 *)p.dk + batch * p.dk_stride[0] + k0 * p.dk_stride[1] + kv_head * p.dk_stride[2],
                                           p.dk_stride[1], sk, key0, dk_tile, rk0, thread, nthreads);
        fg_bwd_rows_out<ROWS, FG_HEAD_DIM_V / 8, FG_V_CHUNKS, RV>(
            (u16 *)p.dv + batch * p.dv_stride[0] + k0 * p.dv_stride[1] + kv_head * p.dv_stride[2], p.dv_stride[1], sk, key0,
            dv_tile, rv0, thread, nthreads);
        return;
    }
#pragma unroll
    for (int u = thread; u < ROWS * CH; u += nthreads) {
        const int r = u / CH, c = u % CH, key = key0 + r;
        if (key >= sk) continue;
        const uint4 xk = *(const uint4 *)(dk_tile + fg_tile_offset<TCH>(rk0 + r, c, RK));
        const uint4 xv = *(const uint4 *)(dv_tile + fg_tile_offset<TCH>(rv0 + r, c, RV));
        *(uint4 *)((u16 *)p.dk + batch * p.dk_stride[0] + (i64)key * p.dk_stride[1] + kv_head * p.dk_stride[2] + 8 * c) = xk;
        *(uint4 *)((u16 *)p.dv + batch * p.dv_stride[0] + (i64)key * p.dv_stride[1] + kv_head * p.dv_stride[2] + 8 * c) = xv;
    }
}

#endif // FG_BACKWARD_COMMON_CUH
