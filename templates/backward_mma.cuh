// backward_mma.cuh: the FlashAttention-2 backward pass on the mma.sync path (sm_80 and newer), 16-bit.
//
// Three kernels, launched in order on the caller's stream (pre and post: backward_pre_post.cuh):
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
// V, O, dO and dV may have a head dim of their own (FG_HEAD_DIM_V: the spec's head_dim_v, DeepSeek's 192/128): their
// tiles and loaders have its width, dP^T = V dO^T and D run over it, and phase 2's warps own a part of dV's
// columns as of dK's (the same number of parts of each); S^T, dK and dQ keep Q's and K's head dim.
// Working on S^T (keys as rows) gives P^T and dS^T the row layout the dV and dK products take as A
// operands; they cross to phases 2 and 3 through shared memory because those phases split the warps
// differently (FlashAttention-2's layout): each warp then reads fewer operand bytes per MMA than a warp
// owning 16 keys for every product did (the first version: 0.48-0.55x FlashAttention-2 on the H200,
// against 0.78-0.94x now).

#ifndef FG_BACKWARD_MMA_CUH
#define FG_BACKWARD_MMA_CUH

#include "backward_common.cuh"
#include "backward_pre_post.cuh"

// ---- main ----
// Phase 1 (S^T, dP^T, P^T, dS^T): warps in FG_P1_KEY_GROUPS key groups of 32 keys x FG_P1_QUERY_PARTS query parts of FG_P1_PART_ROWS
// (halves with 16 keys a warp, quarters with 8).
// Phase 2 (dV, dK): warps in FG_P2_KEY_GROUPS key groups of FG_P2_GROUP_KEYS keys x FG_P2_DIM_PARTS head-dim parts: dK's
// of FG_P2_PART_DIM columns, dV's of FG_P2_PART_DIM_V (V's head dim, FG_HEAD_DIM_V, may differ from Q's and K's).
// Phase 3 (dQ): warps in FG_DQ_GROUPS query groups of 16 x FG_DQ_M16_TILES rows x FG_DQ_SLICES head_dim slices.
// P^T and dS^T cross from phase 1 to phases 2 and 3 through shared memory ([keys][queries], 16-bit).
constexpr int FG_P1_KEY_GROUPS = FG_BLOCK_N / 32;
constexpr int FG_P1_QUERY_PARTS = FG_WARPS / FG_P1_KEY_GROUPS;
constexpr int FG_P1_PART_ROWS = FG_BLOCK_M / FG_P1_QUERY_PARTS;
constexpr int FG_P1_PART_N8 = FG_P1_PART_ROWS / 8;
// Eight keys a warp (above head_dim 128) at multiples of 64: 32 keys x a quarter of head_dim, as
// FlashAttention-2's dK/dV layout there, rather than 16 keys x a half: the same dK, dV registers, a third
// fewer ldmatrix per MMA (each warp re-reads fewer dO and Q columns).
constexpr int FG_P2_DIM_PARTS = fg_bwd_p2_parts(FG_BLOCK_N, FG_WARPS, FG_HEAD_DIM_PADDED, FG_HEAD_DIM_V_PADDED); // (bwd_tiles.h)
constexpr int FG_P2_KEY_GROUPS = FG_WARPS / FG_P2_DIM_PARTS;
constexpr int FG_P2_GROUP_KEYS = FG_BLOCK_N / FG_P2_KEY_GROUPS;
constexpr int FG_P2_PART_DIM = FG_HEAD_DIM_PADDED / FG_P2_DIM_PARTS;     // dK's columns a warp
constexpr int FG_P2_PART_N8 = FG_P2_PART_DIM / 8;
constexpr int FG_P2_PART_DIM_V = FG_HEAD_DIM_V_PADDED / FG_P2_DIM_PARTS; // dV's
constexpr int FG_P2_PART_N8_V = FG_P2_PART_DIM_V / 8;
constexpr int FG_P2_N8_MAX = FG_P2_PART_N8 > FG_P2_PART_N8_V ? FG_P2_PART_N8 : FG_P2_PART_N8_V;
static_assert((FG_P1_KEY_GROUPS >= 1 && FG_P1_KEY_GROUPS * FG_P1_QUERY_PARTS == FG_WARPS), "phase 1: warp groups own 32 keys");
static_assert(FG_P1_PART_ROWS % 16 == 0, "phase 1: each query part is a multiple of 16 rows");
static_assert((FG_P2_GROUP_KEYS % 16 == 0 && FG_P2_PART_DIM % 16 == 0 && FG_P2_PART_DIM_V % 16 == 0), "phase 2 warp tiles");

// The cp.async kernels' loads of block m + 1 between phase 1's S^T and dP^T passes (FG_BWD_LOAD_LATE) rather
// than right after the loop's barrier: above head_dim 128, where the loop's top ran about 140 instructions
// of load addressing per warp with no MMA in flight. H200 (bf16 d 256):
// 1.008x, causal +1-2%, without a mask equal; also computing and storing P^T between the passes, as
// FlashAttention-2 does, gained nothing more (0.999x). Measured only there (bf16 d 256, two stages on an
// H200); it applies to d 160-224 and fp16 too, untimed. Not at d 64/128 (their Hopper kernels load by TMA),
// which keep the old order; one-stage tiles (the A100's d 256) load behind phase 3 either way.

constexpr bool FG_BWD_LOAD_LATE = FG_HEAD_DIM > 128;
// Phase 2 of one query block for head-dim part WD (a template so that every ldmatrix address keeps its
// compile-time part): dV += P^T dO and dK += dS^T Q, A operands from the P^T and dS^T tiles, B operands
// by ldmatrix.trans from the dO tile (at do_off; V's head dim) and the Q tile (at qv_off; rows = queries). Where
// dV's part is narrower or wider than dK's, the steps past the narrower one's columns run the other product alone.
template <int WD>
__device__ __forceinline__ void fg_bwd_phase2(float (&dv)[FG_P2_GROUP_KEYS / 16][FG_P2_PART_N8_V][4],
                                              float (&dk)[FG_P2_GROUP_KEYS / 16][FG_P2_PART_N8][4], u32 s_p, u32 s_ds,
                                              u32 sq_st, u32 sdo_st, int krow0, const fg_frag_offsets_t<FG_DS_ROW_CHUNKS> &pt_off,
                                              const fg_frag_offsets &qv_off, const fg_frag_offsets_t<FG_V_CHUNKS> &do_off) {
#pragma unroll
    for (int kk = 0; kk < FG_BLOCK_M / 16; kk++) {
        u32 pa[FG_P2_GROUP_KEYS / 16][4], da[FG_P2_GROUP_KEYS / 16][4];
#pragma unroll
        for (int a = 0; a < FG_P2_GROUP_KEYS / 16; a++) {
            fg_ldmatrix_x4(pa[a], fg_frag_addr<FG_BLOCK_N>(s_p, pt_off, krow0 + a * 16, kk));
            fg_ldmatrix_x4(da[a], fg_frag_addr<FG_BLOCK_N>(s_ds, pt_off, krow0 + a * 16, kk));
        }
#pragma unroll
        for (int d2 = 0; d2 < FG_P2_N8_MAX / 2; d2++) {
            const bool v_on = d2 < FG_P2_PART_N8_V / 2, k_on = d2 < FG_P2_PART_N8 / 2;
            u32 ob[4], qb[4];
            if (v_on)
                fg_ldmatrix_x4_trans(ob, fg_frag_addr<FG_BLOCK_M>(sdo_st, do_off, kk * 16, WD * (FG_P2_PART_N8_V / 2) + d2));
            if (k_on)
                fg_ldmatrix_x4_trans(qb, fg_frag_addr<FG_BLOCK_M>(sq_st, qv_off, kk * 16, WD * (FG_P2_PART_N8 / 2) + d2));
#pragma unroll
            for (int a = 0; a < FG_P2_GROUP_KEYS / 16; a++) {
                if (v_on) {
                    fg_mma_16816(dv[a][2 * d2], pa[a], ob[0], ob[1]);
                    fg_mma_16816(dv[a][2 * d2 + 1], pa[a], ob[2], ob[3]);
                }
                if (k_on) {
                    fg_mma_16816(dk[a][2 * d2], da[a], qb[0], qb[1]);
                    fg_mma_16816(dk[a][2 * d2 + 1], da[a], qb[2], qb[3]);
                }
            }
        }
    }
}

static_assert(!FG_BWD_TMA || (FG_DQ_FRAG && FG_HEAD_DIM % 64 == 0 && FG_HEAD_DIM_V % 64 == 0 && FG_BLOCK_M % 64 == 0 &&
                              FG_STAGES == 2),
              "tma=1: 64-column, 64-row boxes, two stages; sm_90+ (dQ staged, or by vector reductions above d 128)");
static_assert(FG_STAGES == 1 || FG_STAGES == 2, "one or two stages of query blocks");
extern "C" __global__ void __launch_bounds__(FG_THREADS, 1)
#if FG_BWD_TMA
fg_bwd_main_kernel(const __grid_constant__ fg_bwd_params launch, const __grid_constant__ fg_tma_params tm) {
#else
fg_bwd_main_kernel(const __grid_constant__ fg_bwd_params launch) {
#endif
    FG_BWD_PARAMS(launch);
    extern __shared__ __align__(128) unsigned char fg_smem[];
    fg_pdl_launch_dependents(); // the post kernel may launch once this grid's last CTAs run; it waits for them
    // (Key blocks in grid order, head by head: fg_bwd_cta_tile's grouped order spilled 4-8 bytes at d 64
    // causal here, so the host keeps it to the sm_90a kernel.)
    const int n_block = fg_bwd_key_block(), head = blockIdx.y, batch = FG_BWD_BATCH;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int kv_head = head / (p.heads_q / p.heads_kv);
    const int sq = p.seqlen_q, sk = p.seqlen_k;
    const int n0 = n_block * FG_BLOCK_N;
    if (FG_VARLEN && n0 >= sk) return; // past the sequence's keys (the grid has the longest sequence's)
    const i64 sq_pad = fg_bwd_rows_padded(sq);
    const i64 bh = (i64)batch * p.heads_q + head;
    const int m_blocks = (int)(sq_pad / FG_BLOCK_M);

    // The model variants' constants (fg_bwd_variant) and the overloads that take them, only where compiled in:
    // passing even an unused one moved ptxas's allocation (d 64 tma=1 varlen: 4 bytes of spills).
#if FG_BWD_MODS
    const fg_bwd_variant v = fg_bwd_variant_make(p, &launch.mod_aux, head);
#define FG_BWD_V , v
#define FG_BWD_VS , v, spans
#else
#define FG_BWD_V
#define FG_BWD_VS
#endif
    int m_first, m_last;
    fg_bwd_query_blocks(n0, sq, sk, m_first, m_last FG_BWD_V);
#if FG_USER_MASK
    fg_bwd_mask_trim(launch.mod_aux, head, n0, sq, sk, m_first, m_last);
#endif
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
    const u32 s_v = s_k + FG_K_BYTES;
    const u32 s_q = s_v + FG_V_BYTES;                       // FG_STAGES stages
    const u32 s_do = s_q + FG_STAGES * FG_Q_BLOCK_BYTES;    // FG_STAGES stages
    const u32 s_p = s_do + FG_STAGES * FG_DO_BLOCK_BYTES;   // P^T, [keys][queries]
    const u32 s_ds = s_p + FG_DS_BYTES;               // dS^T, [keys][queries]
    const u32 s_lse = s_ds + FG_DS_BYTES;             // FG_STAGES stages of FG_BLOCK_M floats
    const u32 s_d = s_lse + FG_STAGES * FG_ROW_BYTES; // FG_STAGES stages
    const u32 s_dq = s_d + FG_STAGES * FG_ROW_BYTES;  // sm_90+: FG_BLOCK_M x head_dim floats (fg_dq_index)

#if FG_BWD_TMA
    // tma=1 (sm_90+): thread 0 loads K and V once and each query block (Q and dO by tensor map, boxes of 64
    // columns x 64 rows or FG_BLOCK_N keys, rows past the tensor zeros; the LSE and D rows by 1-d bulk
    // copies, whole blocks in the padded workspace), completing on mbarriers, into the same swizzled tiles
    // the cp.async loaders fill. No loader state in registers, no copies issued by the other 255 threads.
    const u32 s_bar = s_dq + (FG_DQ_STAGED ? FG_BLOCK_M * FG_HEAD_DIM_PADDED * 4 : 0); // full[2], K/V
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
    if (tid == 0) fg_bwd_tma_kv(tm, s_k, s_v, FG_VARLEN ? n0 + p.k_row0 : n0, kv_head, batch, bar_kv);
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

    float dk[FG_P2_GROUP_KEYS / 16][FG_P2_PART_N8][4], dv[FG_P2_GROUP_KEYS / 16][FG_P2_PART_N8_V][4];
#pragma unroll
    for (int a = 0; a < FG_P2_GROUP_KEYS / 16; a++)
#pragma unroll
        for (int i = 0; i < FG_P2_N8_MAX; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (i < FG_P2_PART_N8) dk[a][i][e] = 0.f;
                if (i < FG_P2_PART_N8_V) dv[a][i][e] = 0.f;
            }

    // ldmatrix lanes: rows of an A operand (16 rows, two chunk columns) at qv_off (K, V tiles) or pt_off
    // (the P^T, dS^T tiles); B operands whose rows are the N dimension (Q, dO rows = queries) at k_off;
    // transposed B operands whose rows are the reduction dimension (dO, Q for dV, dK) at qv_off. The V and dO
    // tiles' (rows of FG_V_CHUNKS chunks, swizzled by their own slab width) at qv_off_v, k_off_v: the same
    // offsets where V has Q's head dim.
    const fg_frag_offsets qv_off = fg_frag_offsets_make(lane % 16, lane / 16);
    const fg_frag_offsets k_off = fg_frag_offsets_make(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
    const auto &qv_off_v = fg_frag_offsets_like<FG_V_CHUNKS>(qv_off, lane % 16, lane / 16);
    const auto &k_off_v = fg_frag_offsets_like<FG_V_CHUNKS>(k_off, lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
    const fg_frag_offsets_t<FG_DS_ROW_CHUNKS> pt_off = fg_frag_offsets_make<FG_DS_ROW_CHUNKS>(lane % 16, lane / 16);
    const int p1_k0 = (warp % FG_P1_KEY_GROUPS) * 32, p1_q0 = (warp / FG_P1_KEY_GROUPS) * FG_P1_PART_ROWS; // phase 1 tile
    const int p2_k0 = (warp % FG_P2_KEY_GROUPS) * FG_P2_GROUP_KEYS, p2_wd = warp / FG_P2_KEY_GROUPS;       // phase 2 tile
    const int qg = warp % FG_DQ_GROUPS, dslice = warp / FG_DQ_GROUPS;                                 // phase 3 tile

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
        fg_mbar_wait(bar_full(st), fg_ring_at<2>((u32)it).full_parity());
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
        const u32 sq_st = s_q + st * FG_Q_BLOCK_BYTES, sdo_st = s_do + st * FG_DO_BLOCK_BYTES;
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
        if (FG_HEAD_DIM_PADDED <= 64) asm volatile("" : "+r"(ln));
#endif
        const int gl = ln / 4, tl = ln % 4;

        // Phase 1: S^T = K Q^T and dP^T = V dO^T (keys x queries) on this warp's 32 keys x FG_P1_PART_ROWS queries.
        // (Two query sub-tiles one after the other, to halve the S^T and dP^T registers, measured 7-8%
        // slower at head_dim 128 on the H200: K and V are read twice.)
        {
            const int q0 = p1_q0;
            float s[2][FG_P1_PART_N8][4], dp[2][FG_P1_PART_N8][4];
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int i = 0; i < FG_P1_PART_N8; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[a][i][e] = dp[a][i][e] = 0.f;
            // Two passes (S^T over head_dim, then dP^T over head_dim_v) rather than one: half the fragments in
            // flight. (Each pass as a call of one function, the same operations, made ptxas spill 16 bytes at d 256.)
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
                for (int kk = 0; kk < (pass ? FG_HEAD_DIM_V_PADDED : FG_HEAD_DIM_PADDED) / 16; kk++) {
                    u32 xa[2][4];
#pragma unroll
                    for (int a = 0; a < 2; a++)
                        fg_ldmatrix_x4(xa[a], pass ? fg_frag_addr<FG_BLOCK_N>(tv, qv_off_v, p1_k0 + a * 16, kk)
                                                   : fg_frag_addr<FG_BLOCK_N>(tk, qv_off, p1_k0 + a * 16, kk));
#pragma unroll
                    for (int n2 = 0; n2 < FG_P1_PART_N8 / 2; n2++) {
                        u32 yb[4];
                        fg_ldmatrix_x4(yb, pass ? fg_frag_addr<FG_BLOCK_M>(sdo_st, k_off_v, q0 + n2 * 16, kk)
                                                : fg_frag_addr<FG_BLOCK_M>(sq_st, k_off, q0 + n2 * 16, kk));
#pragma unroll
                        for (int a = 0; a < 2; a++) {
                            float (&c)[FG_P1_PART_N8][4] = pass ? dp[a] : s[a];
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
                for (int nt = 0; nt < FG_P1_PART_N8; nt++) {
                    const int col = q0 + 8 * nt + 2 * tl;
                    const float2 l2 = *(const float2 *)(lse2 + col), dd = *(const float2 *)(dsum + col);
#if FG_BWD_MODS
                    fg_bwd_spans spans;
                    if constexpr (decltype(mask)::value) spans = fg_bwd_spans_of(m0 + col, sk, sq, v);
#endif
#pragma unroll
                    for (int a = 0; a < 2; a++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int krow = p1_k0 + a * 16 + gl + 8 * h;
                            fg_bwd_p_ds<decltype(mask)::value>(s[a][nt], dp[a][nt], h, l2, dd, n0 + krow, m0 + col, sk, sq,
                                                               p.scale_log2 FG_BWD_VS);
                            const u32 off = fg_tile_offset<FG_DS_ROW_CHUNKS>(krow, q0 / 8 + nt, FG_BLOCK_N) + 4 * tl;
                            asm volatile("st.shared.b32 [%0], %1;" ::"r"(tp + off),
                                         "r"(fg_pack2(s[a][nt][2 * h], s[a][nt][2 * h + 1])));
                            asm volatile("st.shared.b32 [%0], %1;" ::"r"(tds + off),
                                         "r"(fg_pack2(dp[a][nt][2 * h], dp[a][nt][2 * h + 1])));
                        }
                }
            };
            if (fg_bwd_needs_mask(n0, m0, sk, sq FG_BWD_V))
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
        if (FG_P2_DIM_PARTS == 4) {
            switch (p2_wd) {
            case 0: fg_bwd_phase2<0>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off, qv_off_v); break;
            case 1: fg_bwd_phase2<1 % FG_P2_DIM_PARTS>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off, qv_off_v); break;
            case 2: fg_bwd_phase2<2 % FG_P2_DIM_PARTS>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off, qv_off_v); break;
            default: fg_bwd_phase2<3 % FG_P2_DIM_PARTS>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off, qv_off_v); break;
            }
        } else if (FG_P2_DIM_PARTS == 1 || p2_wd == 0) {
            fg_bwd_phase2<0>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off, qv_off_v);
        } else {
            fg_bwd_phase2<FG_P2_DIM_PARTS - 1>(dv, dk, tp, tds, sq_st, sdo_st, p2_k0, pt_off, qv_off, qv_off_v);
        }
#if !FG_BWD_TMA
        if (FG_STAGES == 1) {
            __syncthreads(); // every warp is done with block m's Q, dO, LSE and D rows
            if (more) load_block(m_next, 0);
            fg_cp_async_commit();
        }
#endif

        // Phase 3: dQ (queries x head_dim) += dS K: this warp's 16 x FG_DQ_M16_TILES query rows (group qg) and head_dim
        // slice. A = dS by ldmatrix.trans from the [keys][queries] tile, per 16-row tile r: lanes 0-7 keys 0-7
        // of query chunk 2r, 8-15 chunk 2r + 1, 16-23 keys 8-15 chunk 2r, 24-31 keys 8-15 chunk 2r + 1, which
        // land as the A fragment's (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15). B = K by
        // ldmatrix.trans.
        float dq[FG_DQ_M16_TILES][FG_DQ_N8_TILES][4];
#pragma unroll
        for (int mt = 0; mt < FG_DQ_M16_TILES; mt++)
#pragma unroll
            for (int i = 0; i < FG_DQ_N8_TILES; i++) dq[mt][i][0] = dq[mt][i][1] = dq[mt][i][2] = dq[mt][i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < FG_BLOCK_N / 16; kk++) {
            u32 a[FG_DQ_M16_TILES][4];
#pragma unroll
            for (int mt = 0; mt < FG_DQ_M16_TILES; mt++)
                fg_ldmatrix_x4_trans(a[mt], tds + fg_tile_offset<FG_DS_ROW_CHUNKS>(kk * 16 + ln % 8 + 8 * (ln / 16),
                                                                         2 * (qg * FG_DQ_M16_TILES + mt) + (ln / 8) % 2, FG_BLOCK_N));
#pragma unroll
            for (int d2 = 0; d2 < FG_DQ_N8_TILES / 2; d2++) {
                // K's rows kk * 16 + lane % 16 at chunk 2 (slice's first chunk pair + d2) + lane / 16: the
                // address in full, since the slice (warp-dependent) would index qv_off at run time.
                u32 kb[4];
                fg_ldmatrix_x4_trans(kb, tk + fg_tile_offset(kk * 16 + ln % 16,
                                                              2 * (dslice * (FG_DQ_N8_TILES / 2) + d2) + ln / 16, FG_BLOCK_N));
#pragma unroll
                for (int mt = 0; mt < FG_DQ_M16_TILES; mt++) {
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
        // This warp's FG_DQ_GROUP_ROWS rows x FG_DQ_N8_TILES * 8 columns: one contiguous run of the accumulator (fg_dq_index),
        // staged at the same offset from the block's start. Outside the deterministic mode lane 0 adds it
        // with one bulk reduce-add, after its add of the previous block has read the staging: no
        // block-wide barrier. In the deterministic mode key blocks add in order (see above), every warp's
        // add complete before the semaphore moves on, so the staging is free again.
        const u32 run = (u32)((qg * FG_DQ_GROUP_ROWS) * FG_HEAD_DIM_PADDED + dslice * FG_DQ_GROUP_ROWS * FG_DQ_GROUP_COLS); // floats from the block's row 0
        float4 *sdq = (float4 *)(smem + (s_dq - s_k)) + run / 4;
        if (!FG_DETERMINISTIC) {
            if (lane == 0) fg_bulk_wait_read();
            __syncwarp();
        }
#pragma unroll
        for (int mt = 0; mt < FG_DQ_M16_TILES; mt++)
#pragma unroll
            for (int i = 0; i < FG_DQ_N8_TILES; i++)
                sdq[(mt * FG_DQ_N8_TILES + i) * 32 + lane] = make_float4(dq[mt][i][0], dq[mt][i][1], dq[mt][i][2], dq[mt][i][3]);
        fg_fence_proxy_async(); // the bulk copies read these stores
        __syncwarp();
        const float *dst = p.dq_accum + (bh * sq_pad + m0) * FG_HEAD_DIM_PADDED + run;
        if (!FG_DETERMINISTIC) {
            if (lane == 0) fg_bulk_add_f32<FG_DQ_GROUP_ROWS * FG_DQ_GROUP_COLS * 4>(dst, s_dq + run * 4);
        } else { // handed on in the next block (or after the last), once complete
            fg_bwd_wait_turn(p.dq_sem + bh * m_blocks + m, fg_bwd_turn_rank(p, n_block, m, n_m, sq, sk), tid);
            if (lane == 0) fg_bulk_add_f32<FG_DQ_GROUP_ROWS * FG_DQ_GROUP_COLS * 4>(dst, s_dq + run * 4);
            m_added = m;
        }
#else
        // Added from the fragments. FG_DQ_VEC: this warp's run of the accumulator (as staged above), lane l's
        // floats of m16 tile mt, n8 step i at ((mt * FG_DQ_N8_TILES + i) * 32 + l) * 4, one 16-byte reduction each;
        // else scalar atomics into the row-major accumulator.
        if (FG_DETERMINISTIC) fg_bwd_wait_turn(p.dq_sem + bh * m_blocks + m, fg_bwd_turn_rank(p, n_block, m, n_m, sq, sk), tid);
#if FG_DQ_VEC
        float *acc = p.dq_accum + (bh * sq_pad + m0) * FG_HEAD_DIM_PADDED + (qg * FG_DQ_GROUP_ROWS) * FG_HEAD_DIM_PADDED +
                     dslice * FG_DQ_GROUP_ROWS * FG_DQ_GROUP_COLS + lane * 4;
#pragma unroll
        for (int mt = 0; mt < FG_DQ_M16_TILES; mt++)
#pragma unroll
            for (int i = 0; i < FG_DQ_N8_TILES; i++)
                asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(acc + (mt * FG_DQ_N8_TILES + i) * 128),
                             "f"(dq[mt][i][0]), "f"(dq[mt][i][1]), "f"(dq[mt][i][2]), "f"(dq[mt][i][3]) : "memory");
#else
        float *acc = p.dq_accum + (bh * sq_pad + m0 + qg * FG_DQ_GROUP_ROWS + g) * FG_HEAD_DIM_PADDED + dslice * FG_DQ_N8_TILES * 8 + 2 * t;
#pragma unroll
        for (int mt = 0; mt < FG_DQ_M16_TILES; mt++)
#pragma unroll
            for (int i = 0; i < FG_DQ_N8_TILES; i++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    atomicAdd(acc + (mt * 16 + (e / 2) * 8) * FG_HEAD_DIM_PADDED + i * 8 + (e % 2), dq[mt][i][e]);
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
        constexpr int CH = FG_HEAD_DIM_PADDED / 8; // 16-byte units of a tile row (the V tile's: FG_V_CHUNKS)
        __syncthreads();
#pragma unroll
        for (int a = 0; a < FG_P2_GROUP_KEYS / 16; a++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < FG_P2_N8_MAX; i++) {
                    const int row = p2_k0 + a * 16 + g + 8 * h, col = p2_wd * FG_P2_PART_DIM + 8 * i + 2 * t;
                    const u32 off = fg_tile_offset<CH>(row, col / 8, FG_BLOCK_N) + 4 * t;
                    const u32 off_v = FG_SAME_V ? off // the V tile's place of dV column p2_wd * FG_P2_PART_DIM_V + 8 i + 2 t
                                                : fg_tile_offset<FG_V_CHUNKS>(row, p2_wd * (FG_P2_PART_DIM_V / 8) + i, FG_BLOCK_N) + 4 * t;
                    if (i < FG_P2_PART_N8)
                        *(u32 *)(smem + off) =
                            fg_pack2(dk[a][i][2 * h] * p.softmax_scale, dk[a][i][2 * h + 1] * p.softmax_scale);
                    if (i < FG_P2_PART_N8_V) *(u32 *)(smem + (s_v - s_k) + off_v) = fg_pack2(dv[a][i][2 * h], dv[a][i][2 * h + 1]);
                }
        __syncthreads();
        fg_bwd_dkdv_out<FG_BLOCK_N, FG_BLOCK_N, FG_BLOCK_N>(p, batch, kv_head, sk, n0, smem, 0, smem + (s_v - s_k), 0, tid,
                                                            FG_THREADS);
        return;
    }
    // GQA: fp32 per query head (fg_bwd_store_dkdv).
#pragma unroll
    for (int a = 0; a < FG_P2_GROUP_KEYS / 16; a++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int key = n0 + p2_k0 + a * 16 + g + 8 * h;
            if (key >= sk) continue;
#pragma unroll
            for (int i = 0; i < FG_P2_N8_MAX; i++) {
                const bool k_on = i < FG_P2_PART_N8, v_on = i < FG_P2_PART_N8_V;
                fg_bwd_store_dkdv(p, batch, kv_head, bh, sk, key, k_on, p2_wd * FG_P2_PART_DIM + 8 * i + 2 * t,
                                  k_on ? dk[a][i][2 * h] : 0.f, k_on ? dk[a][i][2 * h + 1] : 0.f, v_on,
                                  p2_wd * FG_P2_PART_DIM_V + 8 * i + 2 * t, v_on ? dv[a][i][2 * h] : 0.f,
                                  v_on ? dv[a][i][2 * h + 1] : 0.f);
            }
        }
}

#endif // FG_BACKWARD_MMA_CUH
