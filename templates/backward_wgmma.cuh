// backward_wgmma.cuh: the backward pass's main kernel on Hopper (arch sm_90a), with wgmma. The pre and post
// kernels (backward_pre_post.cuh), the workspace and the grid are the mma.sync backward's
// (backward_common.cuh); this kernel replaces backward_mma.cuh's mma.sync products by warpgroup MMAs.
//
// The runtime takes it on Hopper unless FLASHGEN_WGMMA_BWD=0 (runtime/select.c, select_bwd_spec); it passes the
// backward GPU tests (bwd::shapes_sm90a) clean under racecheck, memcheck and synccheck. At head_dim 128
// without a mask it runs FlashAttention-3's 80-query blocks (FG_BW_DQ_T, below), which stream more keys per
// CTA than the 64-query ones. This kernel and the post kernel launch early (fg_pdl_wait, backward_mma.cuh).
// What limits it at short lengths: CTAs streaming only 7 or 8 query blocks each, and many waves where
// cuDNN's backward is persistent (a persistent variant of the 64-query kernel gained nothing). In the
// 64-query loop most cycles issue nothing; the top stalls are the proxy fence before dQ's bulk add, the
// wait for the dS^T buffer the other warpgroup's dQ frees and the first S^T wgmma.
//
// A CTA: 128 keys of one query head (two warpgroups of 64 keys), head_dim 64 or 128, K and V in shared
// memory for the whole run, dK and dV in registers (wgmma accumulators); it streams the query blocks that
// see its keys, FG_BLOCK_M rows each (128 at head_dim 64, 64 or 80 at 128), double-buffered by TMA (Q, dO, LSE,
// D; one thread of warpgroup 1 issues them), into the same swizzled tiles as the mma.sync kernel, which are wgmma's
// 128-byte-swizzled canonical layouts (cp_async.cuh: slabs of 64 columns, 16-byte units XOR-ed by row % 8;
// wgmma.cuh). Per query block, each warpgroup on its 64 keys (M = FG_BLOCK_M):
//   1. S^T = K Q^T and dP^T = V dO^T       m64 nM (queries) k16 x d/16, both operands K-major in smem
//      P^T = exp2(c S^T - lse2) (masked: 0), dS^T = P^T (dP^T - D), in the accumulators' registers;
//      dS^T also to its tile in shared memory, by stmatrix (faster than st.shared.b32
//      per pair)
//   2. dV += P^T dO, dK += dS^T Q          m64 nd k16 x M/16, A = P^T, dS^T from registers (the accumulator
//                                          layout packed, as the forward's P), B = dO, Q MN-major in smem
//   3. dQ_part = dS K                      over all 128 keys, from both warpgroups' dS^T: d 128 m64 (queries)
//                                          n64 (its half of the columns) k16 x 8; d 64 m64 (its half of the
//                                          queries) n64 k16 x 8. A = dS from the dS^T tile ([keys][queries],
//                                          MN-major), B = K MN-major; with 80-query blocks dQ^T = K^T dS^T,
//                                          m64 (its half of the columns) n80 (queries) k16 x 8, A = K
//                                          MN-major, B = dS from the dS tile ([queries][keys], K-major)
//   dQ_part is staged in shared memory and added into the fp32 accumulator by the TMA unit, one bulk
//   reduce-add a warpgroup (the accumulator is kept in fragment order, fg_dq_index).
// The GEMMs go out in FlashAttention-3's order, dV, dQ, then dK as three groups: once dV and dQ are done
// (wait<1>) dQ is staged while dK still runs (faster than issuing dV + dK before dQ and staging with the
// tensor cores idle), and added by the TMA unit a block later, before the next S^T and
// dP^T. At head_dim 128 without a causal mask on 64-query blocks the dQ is the previous
// block's (FG_BW_DQ_LAG; with 80-query blocks it spilled 712 bytes, and S^T, dP^T split 40: neither is taken
// there, 247 registers).
// dK and dV leave through shared memory as whole 16-byte units (MHA; GQA writes fp32 per query head):
// 1.036x over 4-byte stores from the fragments (bf16 table; +11% at 512, -1% at d 128 4k-16k).
// The deterministic mode stays on the mma.sync kernel (the validator refuses it here). The model variants
// (varlen=1 with window, softcap, alibi, sinks) transform and mask S^T as the mma.sync kernel does
// (fg_bwd_p_ds, backward_common.cuh); sinks change only the LSE and the pre kernel's dsink.
#ifndef FG_BACKWARD_WGMMA_CUH
#define FG_BACKWARD_WGMMA_CUH

#include "backward_common.cuh"
#include "common/wgmma.cuh"
#include "backward_pre_post.cuh"

constexpr int FG_BW_QUERY_N8 = FG_BLOCK_M / 8;    // n8 tiles of S^T, dP^T (queries)
constexpr int FG_BW_DIM_N8 = FG_HEAD_DIM / 8;   // n8 tiles of dK, dV, dQ (head_dim)
constexpr u32 FG_BW_K_CHUNK_BYTES = FG_BLOCK_N * 128; // bytes of one 64-column chunk of the K and V tiles
constexpr u32 FG_BW_Q_CHUNK_BYTES = FG_BLOCK_M * 128; // of the Q and dO tiles
constexpr u32 FG_BW_DS_BYTES = FG_BLOCK_N * FG_BLOCK_M * 2; // dS^T, [keys][queries]: 128-byte rows
// dQ from both warpgroups' dS^T (double-buffered, two mbarriers a buffer), so a CTA adds each dQ element
// into the accumulator once, not once a warpgroup. By columns (FG_BW_DQ_N, the emitter's choice,
// generator/spec.c, half of head_dim at 128): each warpgroup computes its half of dQ's columns over all
// 128 keys (m64 n64 k16 x 8), 32 dQ registers a thread. By query rows (128-query blocks at head_dim 64,
// FlashAttention-3's tile there): each warpgroup computes all columns of its 64 of the block's queries over
// all 128 keys. (The earlier head_dim 64 kernel, 64-query blocks with each warpgroup adding dS K over its
// own keys, so twice per element: 0.877x of this one.)
// With dQ^T (FG_BW_DQ_T, the emitter's choice for 80-query blocks at head_dim 128 without a causal mask:
// FlashAttention-3's tile there): dQ^T = K^T dS^T, each warpgroup its half of head_dim (m64) for the block's
// 80 queries (n80) over all 128 keys, since m64 wgmma cannot take 80 query rows; the dS tile is then kept
// as dS, [queries][keys] (a warpgroup's 64 keys one 64-column slab of it, written by stmatrix .trans), the
// K-major B operand, with K's tile read MN-major as A.
constexpr bool FG_BW_DQ_COLS = FG_BW_DQ_N < FG_HEAD_DIM;
constexpr bool FG_BW_DQ_ROWS = FG_BLOCK_M == 128;
constexpr int FG_BW_DQ_NT = FG_BW_DQ_T ? FG_BLOCK_M / 8 : FG_BW_DQ_N / 8; // a thread's n8 tiles of dQ (dQ^T)
// dQ one block late (see issue_dq) at head_dim 128 without a causal mask: 1.02-1.06x on the H200 (bf16,
// with the split below; causal 512-2k lost 1-3.5% to the unoverlapped last dQ, so not there).
constexpr bool FG_BW_DQ_LAG = FG_HEAD_DIM == 128 && !FG_CAUSAL && !FG_BW_DQ_T;
constexpr bool FG_BW_KD_BASE = FG_BW_DQ_LAG || FG_BW_DQ_T; // the K/V descriptors from one base (see kd0)
// S^T and dP^T as two wgmma groups, P^T computed while dP^T runs: at head_dim 64 1.5-3% faster than one
// group. At 128 one group where there is no lag: the split cost 1-4% there,
// and 1.5% won with the lag.
// The softcap and a custom mod take the one-group path, where fg_bwd_p_ds applies their derivatives to dS^T; a
// window takes it too (as measured: window 4k/32k d 128 0.91x FlashAttention-4 on the H100).
constexpr bool FG_BW_SPLIT_SDP = (FG_HEAD_DIM == 64 || FG_BW_DQ_LAG) && !FG_SOFTCAP && !FG_WINDOW && !FG_USER_MODS;
constexpr u32 FG_BW_DQ_BYTES = FG_DQ_GROUP_ROWS * FG_BW_DQ_N * 4; // one warpgroup's dQ staging, 64 (80) rows (fg_dq_index order)
static_assert(FG_BLOCK_N == 128 && FG_WARPS == 8 &&
                  (FG_BW_DQ_T ? FG_BLOCK_M == 80 && FG_HEAD_DIM == 128 && !FG_CAUSAL
                              : FG_BLOCK_M == (FG_HEAD_DIM == 64 ? 128 : 64)),
              "two warpgroups of 64 keys, 128 queries at head_dim 64, 64 (or 80, not causal) at 128");
static_assert(FG_BW_DQ_COLS != FG_BW_DQ_ROWS, "dQ split one way");
static_assert(64 * FG_HEAD_DIM * 2 <= FG_BW_DQ_BYTES, "a warpgroup's dK (16-bit) fits its dQ staging");
static_assert(FG_HEAD_DIM % 64 == 0 && FG_HEAD_DIM <= 128, "128-byte swizzled chunks of 64 columns");
static_assert(FG_HEAD_DIM_V == FG_HEAD_DIM, "one head dim: the warpgroup tiles of dK and dV are the same (validate.c head_dim_v)");

// Two n8 tiles a, b of a thread's m64 accumulator rows (times `scale`, 16-bit) to shared memory by one
// stmatrix: matrices a rows g, a rows g + 8, b rows g, b rows g + 8; `addr` is this lane's row address.
// TRANS: each matrix transposed (stmatrix .trans; `addr` then a row of the transposed matrix).
template <bool TRANS = false>
__device__ __forceinline__ void fg_bw_stmatrix(u32 addr, const float (&a)[4], const float (&b)[4], float scale) {
    fg_stmatrix_x4<TRANS>(addr, fg_pack2(a[0] * scale, a[1] * scale), fg_pack2(a[2] * scale, a[3] * scale),
                   fg_pack2(b[0] * scale, b[1] * scale), fg_pack2(b[2] * scale, b[3] * scale));
}

extern "C" __global__ void __launch_bounds__(256, 1)
fg_bwd_main_kernel(const __grid_constant__ fg_bwd_params launch, const __grid_constant__ fg_tma_params tm) {
    FG_BWD_PARAMS(launch);
    extern __shared__ __align__(1024) unsigned char fg_smem[];
    fg_pdl_launch_dependents(); // the post kernel may launch once this grid's last CTAs run; it waits for them
    int n_block, head;
    fg_bwd_cta_tile(p.causal_group_log2, n_block, head);
    const int batch = FG_BWD_BATCH;
    const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, wq = wtid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int kv_head = head / (p.heads_q / p.heads_kv);
    const int sq = p.seqlen_q, sk = p.seqlen_k;
    const int n0 = n_block * FG_BLOCK_N;
    if (FG_VARLEN && n0 >= sk) return; // past the sequence's keys (the grid has the longest sequence's)
    const i64 sq_pad = fg_bwd_rows_padded(sq);
    const i64 bh = (i64)batch * p.heads_q + head;

    // The model variants' constants and the overloads that take them (backward_common.cuh), where compiled in.
#if FG_BWD_MODS
    const fg_bwd_variant v = fg_bwd_variant_make(p, &launch.mod_aux, head);
    // The mask in the key rows' form, CTA-wide constants: fewer live registers than the query pairs' spans of
    // fg_bwd_spans_of (the d 64 causal window variant spills 24 bytes with either), and the query rows that need
    // none.
    const fg_key_mask km{fg_key_rel_make(sq, sk, v), sk};
    const fg_query_span full = fg_block_full_queries(n0, sk, km.r);
#define FG_BWD_V , km.r
#define FG_BWD_VS , v, km
#define FG_BWD_NEEDS_MASK fg_bwd_needs_mask(m0, sq, full)
#else
#define FG_BWD_V
#define FG_BWD_VS
#define FG_BWD_NEEDS_MASK fg_bwd_needs_mask(n0, m0, sk, sq)
#endif
    int m_first, m_last;
    fg_bwd_query_blocks(n0, sq, sk, m_first, m_last FG_BWD_V);
#if FG_USER_MASK
    fg_bwd_mask_trim(launch.mod_aux, head, n0, sq, sk, m_first, m_last);
#endif
    // The walk over the query blocks: m_first .. m_last - 1, or with FG_BWD_MASK_BY_BLOCK those of them the block map
    // does not hide (their verdicts: verdict(m)). Producer and consumers walk alike.
    constexpr bool WALK = FG_BWD_MASK_BY_BLOCK;
    auto verdict = [&](int m) -> int {
#if FG_USER_MASK
        if constexpr (WALK) return fg_bwd_block_verdict(launch.mod_aux, head, m, n0, sq, sk);
#endif
        return 2; // (FG_IV_MIXED: the custom mask, if any, evaluated everywhere)
    };
    auto walk = [&](int m, int &vm) { // the first block from m on that is not hidden (m_last if none), its verdict
        vm = 2;
        if constexpr (WALK)
#pragma unroll 1
            for (; m < m_last; m++)
                if ((vm = verdict(m)) != 0) break; // (0: FG_IV_HIDDEN)
        return m;
    };
    int st = 0; // the stage of the block at hand
    int v_m, m = walk(m_first, v_m); // the block at hand, its verdict

    // Tiles on 1024-byte boundaries (the swizzle acts on address bits); the host asks for 1 KiB of slack.
    const u32 s_k = (fg_smem_addr(fg_smem) + 1023u) & ~1023u;
    const u32 s_v = s_k + FG_K_BYTES;
    const u32 s_q = s_v + FG_V_BYTES;      // 2 stages
    const u32 s_do = s_q + 2 * FG_Q_BLOCK_BYTES; // 2 stages
    const u32 s_ds = s_do + 2 * FG_Q_BLOCK_BYTES;
    const u32 s_dq = s_ds + 2 * FG_BW_DS_BYTES; // 2 warpgroups' staging
    const u32 s_lse = s_dq + 2 * FG_BW_DQ_BYTES;
    const u32 s_d = s_lse + 2 * FG_ROW_BYTES;
    const u32 s_bar = s_d + 2 * FG_ROW_BYTES; // mbarriers: full[2], empty[2], dS full[2], dS empty[2], K/V
    unsigned char *const base = fg_smem + (s_k - fg_smem_addr(fg_smem));
    auto bar_full = [&](int st) { return s_bar + 8u * (u32)st; };
    auto bar_empty = [&](int st) { return s_bar + 16u + 8u * (u32)st; };
    auto bar_ds_full = [&](int b) { return s_bar + 32u + 8u * (u32)b; };
    auto bar_ds_empty = [&](int b) { return s_bar + 48u + 8u * (u32)b; };
    const u32 bar_kv = s_bar + 64u;

    // K and V come once, by TMA (tensor maps tm.k, tm.v: boxes of 64 columns x 128 keys; keys past sk read
    // as zeros). The query blocks stream through two stages, loaded by one thread of warpgroup 1 (TMA for
    // Q and dO, tm.q and tm.o: boxes of 64 columns x 64 rows, or 80 with dQ^T, rows past sq zeros; 1-d bulk copies for the
    // LSE and D rows, which the workspace pads to whole blocks), completing on the stage's "full" mbarrier,
    // once warpgroup 0 has released the stage (its "empty" mbarrier, one arrival per thread). So the
    // warpgroups wait on each other only through data: warpgroup 0 can run up to a block ahead of
    // warpgroup 1 (and fall up to one behind). (Before, warpgroup 1's 128 threads loaded them with
    // cp.async: FG_BLOCK_M * head_dim / 512 copies and their addresses a thread a block.)
    if (tid == 0) {
        fg_mbar_init(bar_full(0), 1);
        fg_mbar_init(bar_full(1), 1);
        fg_mbar_init(bar_empty(0), 128);
        fg_mbar_init(bar_empty(1), 128);
        for (int b = 0; b < 2; b++) {
            fg_mbar_init(bar_ds_full(b), 256);
            fg_mbar_init(bar_ds_empty(b), 256);
        }
        fg_mbar_init(bar_kv, 1);
        fg_fence_mbar_init();
    }
    __syncthreads();
    if (tid == 0) fg_bwd_tma_kv(tm, s_k, s_v, FG_VARLEN ? n0 + p.k_row0 : n0, kv_head, batch, bar_kv);
    fg_pdl_wait(); // the pre kernel's LSE, D and zeroed dQ accumulator are in (backward_mma.cuh)
    auto load_block = [&](int m, int st) {
        fg_bwd_tma_block(tm, p, s_q, s_do, s_lse, s_d, m, st, head, batch, bh * sq_pad, bar_full(st));
    };
    const bool producer = wg == 1 && wtid == 0;
    if (producer && m < m_last) load_block(m, 0);
    fg_mbar_wait(bar_kv, 0); // K and V are in
    // Decoupled so, the warpgroups drift out of step and one's softmax and dQ staging overlap the other's
    // products. Against both warpgroups in step behind __syncthreads, d 128 +8-16%, d 64 +0-5% (geomean +8.2%);
    // enforcing FA3-style pingpong turns on top (named barriers, two turns a block) gave back most of it
    // (+3.4% geomean), so the warpgroups are left to find their own phase. Also tried: S^T and dP^T in two
    // commit groups, P^T computed while dP^T runs and dV issued before dS^T is computed: 4.7% slower
    // (geomean, bf16 and fp16), the extra waits costing more than the overlap gave (FG_BW_SPLIT_SDP, the
    // split kept, issues dV after dS^T).

    float dk[FG_BW_DIM_N8][4], dv[FG_BW_DIM_N8][4];
#pragma unroll
    for (int i = 0; i < FG_BW_DIM_N8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[i][e] = dv[i][e] = 0.f;

    const u32 kw = s_k + wg * 64 * 128, vw = s_v + wg * 64 * 128; // this warpgroup's 64 key rows
    const u32 dqw = s_dq + wg * FG_BW_DQ_BYTES;
    const int krow0 = wg * 64 + wq * 16 + g; // this thread's key rows in the block: krow0, krow0 + 8
    // The K and V operands' descriptors (low words) for the S^T and dP^T k steps, computed once and kept
    // opaque to ptxas, which would otherwise recompute them in the loop when the code after it changes; with
    // the lag (FG_BW_KD_BASE) from one base made opaque once a block, ptxas adding each step's offset in the
    // loop (16 integer adds a block) instead of holding 16 descriptors in registers: that made the split
    // spill-free at d 128 (with the descriptors in registers it spilled 124-176 bytes), but cost d 64 causal
    // 5% and gains nothing without the lag (H200).
    const u64 desc_hi = fg_desc_kmajor(0) & ~0xFFFFFFFFull;
    const u32 kd0 = (u32)fg_desc_kmajor(kw);
    u32 kdesc[FG_BW_KD_BASE ? 1 : FG_HEAD_DIM / 16], vdesc[FG_BW_KD_BASE ? 1 : FG_HEAD_DIM / 16];
#pragma unroll
    for (int kk = 0; kk < (FG_BW_KD_BASE ? 0 : FG_HEAD_DIM / 16); kk++) {
        const u32 c = kk / 4, off = (kk % 4) * 32;
        kdesc[kk] = (u32)fg_desc_kmajor(kw + c * FG_BW_K_CHUNK_BYTES + off);
        vdesc[kk] = (u32)fg_desc_kmajor(vw + c * FG_BW_K_CHUNK_BYTES + off);
        asm volatile("" : "+r"(kdesc[kk]), "+r"(vdesc[kk]));
    }
    // dQ (FG_BW_DQ_N columns of 64 query rows) of the block whose dS^T is in buffer bq (its use uq), once
    // both warpgroups' dS^T is in: by columns, dS (queries x all 128 keys) K (all keys x its half of
    // head_dim, one 64-column chunk of the K tile); by rows, dS (its 64 queries: one 64-column slab of the
    // dS^T tile x all 128 keys) K (all keys x head_dim). At head_dim 128 one block late (FG_BW_DQ_LAG:
    // issued with the next block's dV and dK), so that a warpgroup waits for the other's dS^T of the block
    // before, not of the block both are on, and the two no longer meet once a block (that wait took 16% of
    // the stall samples at d 128 8k: ncu). At 64 (128-query blocks) ptxas spills 120-396 bytes
    // with it.
    float dq[FG_BW_DQ_NT][4];
    auto issue_dq = [&](int bq, int uq) { // dS^T's buffer and that buffer's use
        fg_mbar_wait(bar_ds_full(bq), (u32)(uq & 1));
        fg_wgmma_fence(); // (ptxas would insert it: the wait's registers are reused by dQ's accumulators)
        const u32 ds_q = s_ds + (u32)bq * FG_BW_DS_BYTES;
        if constexpr (FG_BW_DQ_T) { // dQ^T: A = K^T (this warpgroup's 64-column chunk, MN-major), B = dS (K-major)
#pragma unroll
            for (int kk = 0; kk < FG_BLOCK_N / 16; kk++)
                fg_wgmma_dq(dq, fg_desc_mnmajor(s_k + wg * FG_BW_K_CHUNK_BYTES + kk * 16 * 128, FG_BW_K_CHUNK_BYTES),
                            fg_desc_kmajor(ds_q + (kk / 4) * FG_BW_Q_CHUNK_BYTES + (kk % 4) * 32), kk > 0 ? 1u : 0u);
            fg_wgmma_commit();
            return;
        }
        const u32 dq_a = ds_q + (FG_BW_DQ_ROWS ? wg * FG_BLOCK_N * 128 : 0), dq_b = s_k + (FG_BW_DQ_COLS ? wg * FG_BW_K_CHUNK_BYTES : 0);
#pragma unroll
        for (int kk = 0; kk < FG_BLOCK_N / 16; kk++)
            fg_wgmma_dq(dq, fg_desc_mnmajor(dq_a + kk * 16 * 128, FG_BW_DS_BYTES),
                        fg_desc_mnmajor(dq_b + kk * 16 * 128, FG_BW_K_CHUNK_BYTES), kk > 0 ? 1u : 0u);
        fg_wgmma_commit();
    };
    // Stages dQ_part in the accumulator's fragment order (fg_dq_index: float4 i of thread wtid at (wq *
    // FG_BW_DQ_N / 8 + i) * 32 + lane, bank-conflict free), once the warpgroup's previous bulk add has read
    // the staging; add_dq adds it with one bulk reduce-add from thread 0 of the warpgroup. (A reduce-add
    // per row, issued by a loop over the lanes, took 13-21% of the stall samples (ncu). One a
    // warp, each warp's 16 rows, with no warpgroup barrier before the add or after the staging's read,
    // where ncu had put 9.2% of the stall samples: 0.947x.)
    auto stage_dq = [&]() {
        if (wtid == 0) fg_bulk_wait_read();
        fg_named_sync(1 + wg, 128);
        float4 *sdq = (float4 *)(base + (dqw - s_k)) + wq * FG_BW_DQ_NT * 32 + lane;
#pragma unroll
        for (int i = 0; i < FG_BW_DQ_NT; i++) sdq[i * 32] = make_float4(dq[i][0], dq[i][1], dq[i][2], dq[i][3]);
    };
    auto add_dq = [&](i64 m0q) { // the block's first query row
        fg_fence_proxy_async(); // the staging's stores (made a block before), before the bulk copy reads them
        fg_named_sync(1 + wg, 128);
        if (wtid == 0) {
            const float *dst = p.dq_accum + (bh * sq_pad + m0q) * FG_HEAD_DIM + (FG_BW_DQ_COLS ? wg * FG_DQ_GROUP_ROWS * FG_BW_DQ_N : 0) +
                               (FG_BW_DQ_ROWS ? wg * 64 * FG_HEAD_DIM : 0);
            fg_bulk_add_f32<FG_BW_DQ_BYTES>(dst, dqw);
        }
    };
    // The walk's step (blocks done) and the blocks of its last two steps (-1 before the first): the counts of m itself
    // without the walk, where the blocks follow each other.
    int walked = 0, m_1 = -1, m_2 = -1;
    while (m < m_last) {
        const int it = WALK ? walked : m - m_first, prev = WALK ? m_1 : m - 1, prev2 = WALK ? m_2 : m - 2;
        int v_next = 2;
        const int m_next = WALK ? walk(m + 1, v_next) : m + 1;
        if (producer && m_next < m_last) {
            // stage st ^ 1 held the previous block: once warpgroup 0 is done with it, the next one goes there
            if (it > 0) fg_mbar_wait(bar_empty(st ^ 1), fg_ring_at<2>((u32)(it - 1)).full_parity());
            load_block(m_next, st ^ 1);
        }
        fg_mbar_wait(bar_full(st), fg_ring_at<2>((u32)it).full_parity()); // block m is in
        // dS^T's buffer (b, its use u): free once both warpgroups' dQ of the block two steps back has read it. (b is st
        // when dQ goes by columns; kept apart, as measured: folding it changes the d 128 register allocation.)
        const int b = it & 1, u = it >> 1;
        const u32 s_ds_b = s_ds + (u32)b * FG_BW_DS_BYTES;
        if (u > 0) fg_mbar_wait(bar_ds_empty(b), (u32)((u - 1) & 1));
        const u32 sq_st = s_q + st * FG_Q_BLOCK_BYTES, sdo_st = s_do + st * FG_Q_BLOCK_BYTES;
        const float *lse2 = (const float *)(base + (s_lse - s_k) + st * FG_ROW_BYTES);
        const float *dsum = (const float *)(base + (s_d - s_k) + st * FG_ROW_BYTES);
        const int m0 = m * FG_BLOCK_M;

        // 1. S^T and dP^T on this warpgroup's 64 keys x the block's queries; P^T (masked entries 0: keys
        // past sk, keys past a query's diagonal when causal; queries past sq have lse2 = +inf) and dS^T =
        // P^T (dP^T - D), in place; dS^T also to its tile (16-bit). As in backward_mma.cuh: an unmasked instance
        // for blocks that need no mask, lse2 and D read once a pair.
        float s[FG_BW_QUERY_N8][4], dp[FG_BW_QUERY_N8][4];
        u32 kd = kd0;
        if (FG_BW_KD_BASE) asm volatile("" : "+r"(kd));
        auto kv_desc = [&](int kk, u32 v_off) -> u32 { // K's (v_off 0) or V's (FG_K_BYTES) descriptor of step kk
            const u32 c = kk / 4, off = (kk % 4) * 32;
            if constexpr (FG_BW_KD_BASE) return kd + (v_off + c * FG_BW_K_CHUNK_BYTES + off) / 16;
            else return v_off ? vdesc[kk] : kdesc[kk];
        };
        auto issue_s = [&](int kk) {
            const u32 c = kk / 4, off = (kk % 4) * 32; // chunk of 64 columns, 32 bytes a k step inside it
            fg_wgmma_st(s, desc_hi | kv_desc(kk, 0), fg_desc_kmajor(sq_st + c * FG_BW_Q_CHUNK_BYTES + off), kk > 0 ? 1u : 0u);
        };
        auto issue_dp = [&](int kk) {
            const u32 c = kk / 4, off = (kk % 4) * 32;
            fg_wgmma_st(dp, desc_hi | kv_desc(kk, FG_K_BYTES), fg_desc_kmajor(sdo_st + c * FG_BW_Q_CHUNK_BYTES + off), kk > 0 ? 1u : 0u);
        };
        // dS^T of n8 tiles nt - 1 and nt (nt odd) to its tile, 16-bit, with one stmatrix: matrix j = 2 (tile
        // - nt + 1) + h holds keys krow0 - g + 8 h + 0..7 x that tile's 8 queries, whose row addresses (one
        // 16-byte unit of the swizzled tile each) lanes 8 j .. 8 j + 7 give.
        const u32 ds_lane = (u32)(krow0 - g + lane % 8 + 8 * ((lane / 8) % 2)); // this lane's key row
        // dQ^T: dS, transposed by stmatrix .trans, matrix j's row lane % 8 the query 8 (nt - 1 + j / 2) + lane %
        // 8, its 16-byte unit keys krow0 - g + 8 (j % 2) + 0..7 (unit wg * 8 + 2 wq + j % 2 of a 128-key row).
        auto store_ds = [&](int nt) {
            if constexpr (FG_BW_DQ_T)
                fg_bw_stmatrix<true>(s_ds_b + fg_tile_offset<FG_BLOCK_N / 8>(8 * (nt - 1 + lane / 16) + lane % 8,
                                                                             wg * 8 + 2 * wq + (lane / 8) % 2, FG_BLOCK_M),
                                     dp[nt - 1], dp[nt], 1.f);
            else
                fg_bw_stmatrix(s_ds_b + fg_tile_offset<FG_DS_ROW_CHUNKS>((int)ds_lane, nt - 1 + lane / 16, FG_BLOCK_N), dp[nt - 1],
                               dp[nt], 1.f);
        };
        // The bulk add of the dQ staged in the previous block, a block after its staging, its stores landed
        // by now: where it followed the staging, the proxy fence before it took 13% of the stall samples
        // (ncu, d 128 8k); a block later 1.030x.
        const int m_add = FG_BW_DQ_LAG ? prev2 : prev;
        if (m_add >= m_first) add_dq((i64)m_add * FG_BLOCK_M);
        fg_wgmma_fence();
        if constexpr (FG_BW_SPLIT_SDP) {
            // Two wgmma groups: P^T is computed while dP^T still runs.
#pragma unroll
            for (int kk = 0; kk < FG_HEAD_DIM / 16; kk++) issue_s(kk);
            fg_wgmma_commit();
#pragma unroll
            for (int kk = 0; kk < FG_HEAD_DIM / 16; kk++) issue_dp(kk);
            fg_wgmma_commit();
            fg_wgmma_wait<1>(); // S^T is in; dP^T runs on
            fg_fence_regs(s);
            auto p_t = [&](auto mask) {
#pragma unroll
                for (int nt = 0; nt < FG_BW_QUERY_N8; nt++) {
                    const int col = 8 * nt + 2 * t;
                    const float2 l2 = *(const float2 *)(lse2 + col);
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int e = 0; e < 2; e++)
                            s[nt][2 * h + e] = fg_bwd_p<decltype(mask)::value>(s[nt][2 * h + e], e ? l2.y : l2.x,
                                                                               n0 + krow0 + 8 * h, m0 + col + e, sk, sq,
                                                                               p.scale_log2 FG_BWD_VS);
                }
            };
            if (FG_BWD_NEEDS_MASK)
                p_t(fg_bool<true>{});
            else
                p_t(fg_bool<false>{});
            fg_wgmma_wait<0>(); // dP^T
            fg_fence_regs(dp);
#pragma unroll
            for (int nt = 0; nt < FG_BW_QUERY_N8; nt++) {
                const float2 dd = *(const float2 *)(dsum + 8 * nt + 2 * t);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    dp[nt][2 * h] = s[nt][2 * h] * (dp[nt][2 * h] - dd.x);
                    dp[nt][2 * h + 1] = s[nt][2 * h + 1] * (dp[nt][2 * h + 1] - dd.y);
                }
                if (nt % 2) store_ds(nt);
            }
        } else {
            // One group; P^T and dS^T after both.
#pragma unroll
            for (int kk = 0; kk < FG_HEAD_DIM / 16; kk++) {
                issue_s(kk);
                issue_dp(kk);
            }
            fg_wgmma_commit();
            fg_wgmma_wait<0>();
            fg_fence_regs(s);
            fg_fence_regs(dp);
            auto p_ds = [&](auto mask) {
#pragma unroll
                for (int nt = 0; nt < FG_BW_QUERY_N8; nt++) {
                    const int col = 8 * nt + 2 * t;
                    const float2 l2 = *(const float2 *)(lse2 + col), dd = *(const float2 *)(dsum + col);
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        fg_bwd_p_ds<decltype(mask)::value>(s[nt], dp[nt], h, l2, dd, n0 + krow0 + 8 * h, m0 + col, sk, sq,
                                                           p.scale_log2 FG_BWD_VS);
                    if (nt % 2) store_ds(nt);
                }
            };
            if (FG_BWD_NEEDS_MASK || (WALK && v_m != 1)) // (1: FG_IV_KEPT, the block map keeps the block whole)
                p_ds(fg_bool<true>{});
            else
                p_ds(fg_bool<false>{});
        }
        u32 pa[FG_BLOCK_M / 16][4], da[FG_BLOCK_M / 16][4];
#pragma unroll
        for (int kk = 0; kk < FG_BLOCK_M / 16; kk++) {
            fg_pack_a(s[2 * kk], s[2 * kk + 1], pa[kk]);
            fg_pack_a(dp[2 * kk], dp[2 * kk + 1], da[kk]);
        }
        fg_fence_proxy_async();        // the dS^T stores, before wgmma reads them
        fg_mbar_arrive(bar_ds_full(b)); // this thread's dS^T entries are in

        // 2. dV += P^T dO, 3. this warpgroup's part of the previous block's dQ, 4. dK += dS^T Q, each its
        // own wgmma group (k = queries, 16 a step: 16 rows of the dO and Q tiles). Waiting for all but the
        // last leaves dK on the tensor cores while dQ is staged (FlashAttention-3's order); it is added a
        // block later.
        fg_fence_regs(dv);
        fg_fence_regs(dk);
        fg_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < FG_BLOCK_M / 16; kk++)
            fg_wgmma_rs(dv, pa[kk], fg_desc_mnmajor(sdo_st + kk * 16 * 128, FG_BW_Q_CHUNK_BYTES), 1u);
        fg_wgmma_commit();
        const bool due = !FG_BW_DQ_LAG || it > 0; // the dQ of this block, or lagged of the previous one
        const int bq = FG_BW_DQ_LAG ? (it - 1) & 1 : b, uq = FG_BW_DQ_LAG ? (it - 1) >> 1 : u;
        if (due) issue_dq(bq, uq);
#pragma unroll
        for (int kk = 0; kk < FG_BLOCK_M / 16; kk++)
            fg_wgmma_rs(dk, da[kk], fg_desc_mnmajor(sq_st + kk * 16 * 128, FG_BW_Q_CHUNK_BYTES), 1u);
        fg_wgmma_commit();
        fg_wgmma_wait<1>(); // dV (and dQ) are done; dK runs on
        fg_fence_regs(dv);
        if (due) {
            fg_fence_regs(dq);
            fg_mbar_arrive(bar_ds_empty(bq)); // this thread's dQ is done with dS^T buffer bq
            stage_dq();
        } else {
            // (stage_dq's barrier, for racecheck: the producer, thread 0 of warpgroup 1, refills this stage's
            // LSE and D rows a block later, and without it only the wgmma groups, which no warp of the
            // warpgroup can pass before all have issued them, order the other warps' reads before that)
            fg_named_sync(1 + wg, 128);
        }
        fg_wgmma_wait<0>(); // dK
        fg_fence_regs(dk);
        if (wg == 0) fg_mbar_arrive(bar_empty(st)); // done with stage st (its Q, dO, LSE and D)
        st ^= 1, walked++, m_2 = m_1, m_1 = m, m = m_next, v_m = v_next;
    }
    // the add still pending, and with the lag the last block's dQ (the walk's last blocks: m_1, m_2)
    const int steps = WALK ? walked : m_last - m_first, last = WALK ? m_1 : m_last - 1, last2 = WALK ? m_2 : m_last - 2;
    const int m_add = FG_BW_DQ_LAG ? last2 : last;
    if (m_add >= m_first) add_dq((i64)m_add * FG_BLOCK_M);
    // (The last block's dS^T buffer gets no ds_empty arrivals: nothing waits for it in a CTA that takes one
    // tile. A persistent kernel would need them.)
    if (FG_BW_DQ_LAG && steps > 0) {
        issue_dq((steps - 1) & 1, (steps - 1) >> 1);
        fg_wgmma_wait<0>();
        fg_fence_regs(dq);
        stage_dq();
        add_dq((i64)last * FG_BLOCK_M);
    }
    // The bulk adds have read their staging once wait_group.read returns; the CTA may then exit (its async
    // operations complete before the grid does, as for any store).
    if (wtid == 0) fg_bulk_wait_read();

    if (p.dkv_accum == 0) {
        // dK (times the softmax scale) and dV in the output dtype, staged by stmatrix in this warpgroup's own
        // shared memory, dV in its 64 rows of the V tile (only its own dP^T read them), dK in its dQ staging
        // (its last bulk add has read it), then out by fg_bwd_dkdv_out (backward_mma.cuh).
        const u32 dk_st = dqw, dv_st = s_v; // dV: rows wg * 64 .. of the V tile's layout
        const u32 st_row = (u32)(wq * 16 + lane % 8 + 8 * ((lane / 8) % 2)); // this lane's row of 64
        fg_named_sync(1 + wg, 128); // every thread of the warpgroup past its last wgmma and the wait above
#pragma unroll
        for (int i = 0; i < FG_BW_DIM_N8; i += 2) {
            const int ch = i + lane / 16;
            fg_bw_stmatrix(dk_st + fg_tile_offset<FG_HEAD_DIM / 8>((int)st_row, ch, 64), dk[i], dk[i + 1], p.softmax_scale);
            fg_bw_stmatrix(dv_st + fg_tile_offset<FG_HEAD_DIM / 8>(wg * 64 + (int)st_row, ch, FG_BLOCK_N), dv[i], dv[i + 1],
                           1.f);
        }
        fg_named_sync(1 + wg, 128);
        fg_bwd_dkdv_out<64, 64, FG_BLOCK_N>(p, batch, kv_head, sk, n0 + wg * 64, base + (dk_st - s_k), 0, base + (dv_st - s_k),
                                            wg * 64, wtid, 128);
        return;
    }
    // GQA: fp32 per query head (fg_bwd_store_dkdv): rows krow0 (+ 8), columns 8 i + 2 t.
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int key = n0 + krow0 + 8 * h;
        if (key >= sk) continue;
#pragma unroll
        for (int i = 0; i < FG_BW_DIM_N8; i++)
            fg_bwd_store_dkdv(p, batch, kv_head, bh, sk, key, true, 8 * i + 2 * t, dk[i][2 * h], dk[i][2 * h + 1], true,
                              8 * i + 2 * t, dv[i][2 * h], dv[i][2 * h + 1]);
    }
}

#endif // FG_BACKWARD_WGMMA_CUH
