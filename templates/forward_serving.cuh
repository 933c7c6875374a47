// forward_serving.cuh: the serving forward on the mma.sync path (sm_80 and newer): variable-length
// batches, paged KV caches, decode with packed GQA, and keys split over CTAs (flash-decoding).
//
// Rows. The query heads of one KV head are packed as the rows of a tile: row r of sequence b and KV head
// kvh is token r / group, query head kvh * group + r % group (group = heads_q / heads_kv). A decode step
// with group 4 fills 4 rows per token instead of one row per CTA, and K and V are read once for the whole
// group. The grid is (row blocks x splits, heads_kv, batch); a CTA whose rows start past its sequence's
// returns at once, so the grid may be sized for the longest sequence.
//
// Warps. FG_BLOCK_M / 16 warps over the rows (one m16 tile each) times FG_WARPS_N over the keys: each
// warp of a column takes FG_KW keys of every block. Prefill tiles have one warp a 16 rows (FG_WARPS_N 1,
// FlashAttention-2's split); a decode tile of 16 rows has all its warps on one row tile, each on a slice
// of the keys, so a CTA computes as it loads. The warps' states (running max, sum, O) meet in shared
// memory at the end and are merged exactly.
//
// Keys. K and V go through FG_STAGES shared-memory buffers by cp.async; each row is found on its own:
// packed or dense keys at k_start(b) + key, paged keys at page block_table[b][key / page_size], slot key %
// page_size, so any page size and any page order work. Rows past the sequence's keys, and pages outside
// [0, num_pages), are zero-filled without a read. The loaders and the sequences' spans are serving_kv.cuh's.
//
// FP8 K and V (FG_KV_FP8, kv=e4m3|e5m2 variants, Q and O 16-bit): the stages hold the FP8 rows, and each block
// first dequantizes its stage into one 16-bit K and V tile (serving_kv.cuh), exactly; the rest is the 16-bit
// kernel's. K's descale joins the CTA's softmax scale (a CTA serves one sequence and KV head), V's multiplies O
// at the end.
//
// TMA (FG_SERVE_TMA, tma=1 variants, sm_90+, head_dim a multiple of 64, keys not paged): one thread loads each
// key block's K and V by tensor maps into the same swizzled tiles (128-byte rows, the 16-byte units XOR-ed
// by row % 8: TMA's 128-byte swizzle, the tiles 1024-byte aligned), completing a full mbarrier a stage,
// instead of every thread issuing cp.async and locating its rows. Rows past the sequence's keys then hold the
// next sequence's keys or a cache's unused slots: S is masked there, and the V rows are zeroed before P V (a
// NaN there would make 0 x NaN).
//
// Wide V (FG_WIDE: head_dim_v above 256, as in absorbed MLA's 512 or head_dim 512). O's columns do not fit one
// warp's registers, so a row tile's warps over the keys split them: each warp computes S on its keys as above,
// the warps exchange their rows' block maxima through shared memory (all take the same running maximum), write P
// to a shared tile, and each multiplies all of the block's P by its own slabs of 64 columns of V. Two more
// barriers a block; the row sums stay partial (each warp's keys) and add up at the end.
//
// V in K (FG_V_IN_K, v_in_k=1 variants): V is the first head_dim_v columns of K's rows (an absorbed-MLA cache,
// where the caller passes V as a prefix view of K). Only K's rows are loaded, and V's fragments are read from
// K's tiles: the tile layout's slabs depend on the row's chunk count only through their width, so V's columns
// sit where a tile of their own would put them.
//
// Splits. With num_splits > 1 the CTA of split s covers a contiguous range of the tile's key blocks and
// writes its normalized O and its LSE in fp32 to o_part / lse_part; merge.cuh combines them. An empty range
// writes O = 0 and LSE = -inf, the identity of the merge.
#ifndef FG_FORWARD_SERVING_CUH
#define FG_FORWARD_SERVING_CUH

#include "common/fg_params.h"
#include "common/types.cuh"
#include "common/mma.cuh"
#include "common/cp_async.cuh"
#include "common/softmax.cuh"
#include "common/tma.cuh"
#include "common/score_mods.cuh"
#include "serving_kv.cuh"

static_assert(!FG_SERVE_TMA || (FG_HEAD_DIM % 64 == 0 && FG_HEAD_DIM_V == FG_HEAD_DIM && !FG_V_IN_K),
              "TMA boxes of 64 columns, 128-byte swizzle; K and V of one width, in tensors of their own");
static_assert(!FG_V_IN_K || FG_HEAD_DIM_V <= FG_HEAD_DIM, "V is a prefix of K's columns");

constexpr int FG_WARPS_M = FG_BLOCK_M / 16;          // warps over the rows
constexpr int FG_WARPS_N = FG_WARPS / FG_WARPS_M;    // warps over the keys of a block
constexpr int FG_KW = FG_BLOCK_N / FG_WARPS_N;       // keys of a block per warp
constexpr int FG_NT = FG_KW / 8;                     // n8 tiles of a warp's S
constexpr bool FG_WIDE = FG_HEAD_DIM_V_PADDED > 256;  // O's columns split over the key warps
constexpr int FG_DW = FG_WIDE ? FG_HEAD_DIM_V_PADDED / FG_WARPS_N : FG_HEAD_DIM_V_PADDED; // O's columns a warp holds
constexpr int FG_DT = FG_DW / 8;                      // n8 tiles of a warp's O
constexpr int FG_VT_CHUNKS = FG_V_IN_K ? FG_CHUNKS : FG_V_CHUNKS; // chunks a row of the tile V is read from
constexpr int FG_P_CHUNKS = FG_BLOCK_N / 8;           // FG_WIDE: chunks of a row of the shared P tile
constexpr int FG_O_COPIES = FG_WIDE ? 1 : FG_WARPS_N; // staged O's at the end (summed: the key warps' parts)
constexpr int FG_KK = FG_HEAD_DIM_PADDED / 16;       // k16 steps of Q K^T
// Q's fragments are kept in registers across the key loop on the decode tile (16 rows, the warps over the
// keys: a warp's scores take 8 registers) up to head_dim 128; elsewhere they would spill, and come from
// shared memory at each block.
constexpr bool FG_Q_IN_REGS = FG_HEAD_DIM_PADDED <= 128 && FG_WARPS_N >= 4;
constexpr u32 FG_Q_BYTES = FG_BLOCK_M * FG_HEAD_DIM_PADDED * 2;
constexpr u32 FG_K_BYTES = FG_BLOCK_N * FG_HEAD_DIM_PADDED * 2;   // a K stage
constexpr u32 FG_V_BYTES = FG_V_IN_K ? 0u : FG_BLOCK_N * FG_HEAD_DIM_V_PADDED * 2; // a V stage
// FP8 K and V (FG_KV_FP8): the stages hold FP8 rows (a byte an element), dequantized into one 16-bit K and V tile
constexpr int FG_KV_TILES = FG_KV_FP8 ? 1 : FG_STAGES;                                // 16-bit K and V tiles
constexpr u32 FG_K_LOAD_BYTES = FG_KV_FP8 ? FG_BLOCK_N * FG_HEAD_DIM_PADDED : FG_K_BYTES;   // a K stage as loaded
constexpr u32 FG_V_LOAD_BYTES = FG_KV_FP8 ? FG_BLOCK_N * FG_HEAD_DIM_V_PADDED : FG_V_BYTES; // a V stage as loaded
constexpr u32 FG_P_BYTES = FG_WIDE ? FG_BLOCK_M * FG_BLOCK_N * 2 : 0u;              // the P tile
constexpr u32 FG_RED_BYTES = FG_WIDE ? FG_WARPS_N * FG_BLOCK_M * 4 : 0u;            // the key warps' row maxima
constexpr int FG_O_ROW = FG_HEAD_DIM_V_PADDED + 8;   // floats between staged O rows (bank spread)
static_assert(FG_WARPS_M * FG_WARPS_N == FG_WARPS && FG_KW % 16 == 0, "warps must tile rows x keys");
static_assert(!FG_WIDE || (FG_DW % 64 == 0 && fg_sw<FG_VT_CHUNKS>::value == 8), "a wide warp's V columns: whole 64-column slabs");

#if FG_USER_MASK
// A custom mask's verdict (fg_user_mask_block) on the packed rows r_lo..r_hi (tokens r / grp of sq, the heads of
// KV head kvh's group) against key blocks j_lo..j_hi of sk keys: queries at token + sk - sq, as the mod sees them. A mask that
// reads aux arrays is mixed throughout: a load may go bad, which makes every node above it bad but a where's
// other branch, so intervals settle none of its blocks (this kernel takes no block map).
__device__ __forceinline__ int fg_serve_verdict(int b, int kvh, int grp, int r_lo, int r_hi, int sq, int sk, int j_lo,
                                                int j_hi) {
    if (FG_USER_MASK_MAP) return FG_IV_MIXED;
    return fg_user_mask_block(b, kvh * grp, kvh * grp + grp - 1, r_lo / grp + sk - sq, r_hi / grp + sk - sq,
                              j_lo * FG_BLOCK_N, min(j_hi * FG_BLOCK_N + FG_BLOCK_N, sk) - 1);
}
#endif

// (sinks=1: one CTA an SM is enough for ptxas's register budget: left to its own it kept d 64's decode tile at
// 96 registers and spilled 4 bytes on sm_80 and sm_86; the wide variants' shared memory holds one CTA an SM
// anyway)
#if FG_SINKS || FG_HEAD_DIM_V_PADDED > 256
#define FG_SERVE_BOUNDS __launch_bounds__(FG_THREADS, 1)
#else
#define FG_SERVE_BOUNDS __launch_bounds__(FG_THREADS)
#endif
extern "C" __global__ void FG_SERVE_BOUNDS
#if FG_SERVE_TMA
fg_attention_fwd_kernel(const __grid_constant__ fg_serve_params p, const __grid_constant__ fg_tma_params tm) {
#else
fg_attention_fwd_kernel(const __grid_constant__ fg_serve_params p) {
#endif
    extern __shared__ __align__(128) unsigned char fg_smem[];
    const int b = blockIdx.z, kvh = blockIdx.y;
    const int split = blockIdx.x % p.num_splits, m_block = blockIdx.x / p.num_splits;
    const fg_seq seq = fg_sequence(p, b);
    const int grp = p.group;
    const int rows = seq.sq * grp, m0 = m_block * FG_BLOCK_M;
    if (m0 >= rows) return; // the grid is sized for the longest sequence
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp % FG_WARPS_M, wn = warp / FG_WARPS_M;
    const int sq = seq.sq, sk = seq.sk;
    // The softmax's scale: FP8 K's descale (FG_KV_FP8) multiplies every score of the CTA's KV head, so it joins the
    // scale, and every use of the scale (softcap, ALiBi, custom mods, sinks, the LSE) sees the descaled scores.
#if FG_KV_FP8
    const float k_descale = fg_kv8_descale(p.k_descale, p.k_descale_stride, b, kvh);
    const float sm_scale = p.softmax_scale * k_descale, sm_scale_log2 = p.scale_log2 * k_descale;
#else
    const float sm_scale = p.softmax_scale, sm_scale_log2 = p.scale_log2;
#endif

    // The tile's key blocks: all, or up to its last row's diagonal (bottom-right aligned per sequence), and
    // with FG_WINDOW from its first row's left edge to its last row's right one (the host makes a side past
    // the keys' capacity -1, unbounded); this split's part of them; and the first block any row needs masked
    // (every block with a window).
    const int first_tok = m0 / grp, last_tok = (min(m0 + FG_BLOCK_M, rows) - 1) / grp;
#if FG_WINDOW
    // (top-left causal calls run here too: fg_row_keys)
    const int n_end = fg_row_keys(last_tok, sq, sk, p.window_left, p.window_right, p.causal_top_left).hi;
    const int k_first = fg_row_keys(first_tok, sq, sk, p.window_left, p.window_right, p.causal_top_left).lo;
    const int n_blocks = n_end > 0 ? (n_end + FG_BLOCK_N - 1) / FG_BLOCK_N : 0;
    const int b_first = min(k_first / FG_BLOCK_N, n_blocks);
    // fixed split sizes count from key 0 (boundaries that depend on the sequence alone); else even parts
    const int per = p.split_blocks > 0 ? p.split_blocks : (n_blocks - b_first + p.num_splits - 1) / p.num_splits;
    const int s0 = p.split_blocks > 0 ? split * per : b_first + split * per;
    const int j_begin0 = min(n_blocks, max(b_first, s0)), j_end0 = min(n_blocks, s0 + per);
    int n_unmasked = 0;
#else
    const int n_end = FG_CAUSAL ? min(sk, last_tok + sk - sq + 1) : sk;
    const int n_blocks = n_end > 0 ? (n_end + FG_BLOCK_N - 1) / FG_BLOCK_N : 0;
    const int per = p.split_blocks > 0 ? p.split_blocks : (n_blocks + p.num_splits - 1) / p.num_splits;
    const int j_begin0 = min(n_blocks, split * per), j_end0 = min(n_blocks, j_begin0 + per);
    int n_unmasked = sk / FG_BLOCK_N;
#endif
    if (FG_CAUSAL) n_unmasked = min(n_unmasked, max(0, first_tok + sk - sq + 1) / FG_BLOCK_N);
#if FG_USER_MASK
    // the blocks at either end that a custom mask hides from every row of the tile are not loaded (a split left
    // without blocks writes what a row without keys does)
    int j_begin = j_begin0, j_end = j_end0;
    {
        const int r_last = min(m0 + FG_BLOCK_M, rows) - 1;
        if (!FG_USER_MASK_MAP)
            fg_trim_hidden(j_begin, j_end, [&](int a, int z) {
                return fg_serve_verdict(b, kvh, grp, m0, r_last, sq, sk, a, z) == FG_IV_HIDDEN;
            });
    }
#else
    const int j_begin = j_begin0, j_end = j_end0;
#endif

    // (TMA: the tiles 1024-byte aligned for its swizzle; the host gives 1 KiB of slack)
    const u32 s_q = FG_SERVE_TMA ? (fg_smem_addr(fg_smem) + 1023u) & ~1023u : fg_smem_addr(fg_smem);
    unsigned char *const smem = fg_smem + (s_q - fg_smem_addr(fg_smem)); // s_q, generic
    const u32 s_k = s_q + FG_Q_BYTES;
    const u32 s_v = s_k + FG_KV_TILES * FG_K_BYTES;
    // where a stage's loads land: the 16-bit tiles, or (FG_KV_FP8) the FP8 stages after them
    const u32 s_k_load = FG_KV_FP8 ? s_v + FG_V_BYTES : s_k;
    const u32 s_v_load = FG_KV_FP8 ? s_k_load + FG_STAGES * FG_K_LOAD_BYTES : s_v;
    const u32 s_p = FG_KV_FP8 ? s_v_load + FG_STAGES * FG_V_LOAD_BYTES : s_v + FG_STAGES * FG_V_BYTES; // FG_WIDE: the
                                                    // block's P, [BLOCK_M][BLOCK_N] swizzled
    const u32 s_red = s_p + FG_P_BYTES;             // FG_WIDE: the key warps' row maxima, [WARPS_N][BLOCK_M]
    const u32 s_bar = s_red + FG_RED_BYTES;         // TMA: a full mbarrier a stage

    // Q: row r is token (m0 + r) / grp, head kvh * grp + (m0 + r) % grp. Its own cp.async group.
    if (j_begin < j_end && tid < FG_THREADS / FG_CHUNKS * FG_CHUNKS) {
        const int c = tid % FG_CHUNKS;
        const bool col_ok = FG_HEAD_DIM == FG_HEAD_DIM_PADDED || c * 8 < FG_HEAD_DIM;
        for (int r = tid / FG_CHUNKS; r < FG_BLOCK_M; r += FG_THREADS / FG_CHUNKS) {
            const int idx = m0 + r, tok = idx / grp, h = kvh * grp + (idx - tok * grp);
            const bool ok = idx < rows && col_ok;
            const fg_in_t *src = (const fg_in_t *)p.q + (i64)b * p.q_stride[0] + (i64)(seq.q0 + (ok ? tok : 0)) * p.q_stride[1] +
                                 (i64)(ok ? h : 0) * p.q_stride[2] + c * 8;
            fg_cp_async16(s_q + fg_tile_offset(r, c, FG_BLOCK_M), src, ok);
        }
    }
    fg_cp_async_commit();

    fg_kv_loader kv;
#if FG_SERVE_TMA
    // K and V of key block jb into stage st, by thread 0: boxes of 64 columns x FG_BLOCK_N keys, from the
    // sequence's first key (packed keys: row k0 of a map with one batch) or batch b's (a dense cache).
    const int k_row0 = p.cu_seqlens_k ? seq.k0 : 0, k_batch = p.cu_seqlens_k ? 0 : b;
    auto tma_kv = [&](int st, int jb) {
        const u32 bar = s_bar + 8u * (u32)st;
        fg_mbar_expect_tx(bar, FG_K_BYTES + FG_V_BYTES);
#pragma unroll
        for (int c = 0; c < FG_HEAD_DIM / 64; c++) {
            fg_tma_load(s_k + st * FG_K_BYTES + c * FG_BLOCK_N * 128, tm.k, c * 64, k_row0 + jb * FG_BLOCK_N, kvh, k_batch, bar);
            fg_tma_load(s_v + st * FG_V_BYTES + c * FG_BLOCK_N * 128, tm.v, c * 64, k_row0 + jb * FG_BLOCK_N, kvh, k_batch, bar);
        }
    };
    if (tid == 0) {
#pragma unroll
        for (int st = 0; st < FG_STAGES; st++) fg_mbar_init(s_bar + 8u * (u32)st, 1);
        fg_fence_mbar_init();
    }
    __syncthreads();
    if (tid == 0) {
#pragma unroll
        for (int st = 0; st < FG_STAGES - 1; st++)
            if (j_begin + st < j_end) tma_kv(st, j_begin + st);
    }
#else
    kv.init(p, b, kvh, seq, tid);
#pragma unroll
    for (int st = 0; st < FG_STAGES - 1; st++) {
        if (j_begin + st < j_end)
            kv.load(p, s_k_load + st * FG_K_LOAD_BYTES, s_v_load + st * FG_V_LOAD_BYTES, (j_begin + st) * FG_BLOCK_N, sk);
        fg_cp_async_commit();
    }
#endif

    float acc[1][FG_DT][4];
    float row_max[1][2], row_sum[1][2];
#pragma unroll
    for (int dt = 0; dt < FG_DT; dt++) acc[0][dt][0] = acc[0][dt][1] = acc[0][dt][2] = acc[0][dt][3] = 0.f;
    row_max[0][0] = row_max[0][1] = FG_NEG_INF;
    row_sum[0][0] = row_sum[0][1] = 0.f;
    const int g = lane / 4, t = lane % 4;
    const fg_frag_offsets qv_off = fg_frag_offsets_make(lane % 16, lane / 16);
    // V's transposed fragments: Q's lane offsets, in rows of the chunks of V's tile (or K's); P's (FG_WIDE) as Q's
    const fg_frag_offsets_t<FG_VT_CHUNKS> v_off = fg_frag_offsets_make<FG_VT_CHUNKS>(lane % 16, lane / 16);
    const fg_frag_offsets_t<FG_P_CHUNKS> p_off = fg_frag_offsets_make<FG_P_CHUNKS>(lane % 16, lane / 16);
    const u32 s_p_warp = s_p + (u32)(wm * 16 * fg_sw<FG_P_CHUNKS>::value * 16);
    const fg_frag_offsets k_off = fg_frag_offsets_make(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
    const u32 s_q_warp = s_q + (u32)(wm * 16 * FG_SLAB_CHUNKS * 16);
    const int key_w = wn * FG_KW; // this warp's first key in a block
    // FG_SOFTCAP, FG_ALIBI: the transforms' constants; a row's slope is its own query head's (rows of one
    // token are the heads of a group), and dist0 its diagonal's distance from this thread's first key of block 0.
    fg_score_mods mods[2];
    float dist0[2];
    if constexpr (FG_SCORE_MODS) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int idx = min(m0 + wm * 16 + g + h * 8, rows - 1), tok = idx / grp;
            mods[h] = fg_mods_make(p.softcap, p.alibi_slopes, kvh * grp + idx - tok * grp, sm_scale);
            dist0[h] = (float)(tok + sk - sq - key_w - 2 * t);
        }
    }

#if FG_USER_SCORE
    const float mod_inv_scale = 1.f / sm_scale; // score_mod's logit back to raw score units
#endif
    u32 qf[FG_Q_IN_REGS ? FG_KK : 1][4];
    if constexpr (FG_SERVE_TMA && !FG_Q_IN_REGS) { // Q (the only cp.async group) in before the first block
        fg_cp_async_wait<0>();
        __syncthreads();
    }
    if constexpr (FG_Q_IN_REGS) {
        if (j_begin < j_end) {
            fg_cp_async_wait<FG_SERVE_TMA ? 0 : FG_STAGES - 1>(); // the Q group
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < FG_KK; kk++) fg_ldmatrix_x4(qf[kk], fg_frag_addr<FG_BLOCK_M>(s_q_warp, qv_off, 0, kk));
        }
    }

    int stage = 0;
    auto block_step = [&](int j, auto masked) {
        const int jn = j + FG_STAGES - 1;
        const int pst = stage == 0 ? FG_STAGES - 1 : stage - 1;
#if FG_SERVE_TMA
        fg_mbar_wait(s_bar + 8u * (u32)stage, (u32)(((j - j_begin) / FG_STAGES) & 1));
        if (decltype(masked)::value && (j + 1) * FG_BLOCK_N > sk) {
            // the key rows past the sequence: zero V's (whole 128-byte rows: the swizzle stays within a row)
            const int valid = sk - j * FG_BLOCK_N, units = (FG_BLOCK_N - valid) * 8;
            for (int u = tid; u < FG_HEAD_DIM / 64 * units; u += FG_THREADS)
                asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(s_v + stage * FG_V_BYTES + (u / units) * FG_BLOCK_N * 128 +
                                                                           valid * 128 + (u % units) * 16),
                             "r"(0u) : "memory");
        }
        __syncthreads(); // every warp is past the block before: its stage (pst) may be reloaded
        if (tid == 0 && jn < j_end) {
            fg_fence_proxy_async(); // the warps' reads and zeroing of that stage, before TMA writes it
            tma_kv(pst, jn);
        }
#else
        fg_cp_async_wait<FG_STAGES - 2>();
        __syncthreads();
        if (jn < j_end) kv.load(p, s_k_load + pst * FG_K_LOAD_BYTES, s_v_load + pst * FG_V_LOAD_BYTES, jn * FG_BLOCK_N, sk);
        fg_cp_async_commit();
#endif
#if FG_KV_FP8 // the stage's FP8 rows into the 16-bit tiles, which the block reads from
        fg_kv8_dequant_block<FG_WARPS_M, FG_KW>(s_k, s_v, s_k_load + stage * FG_K_LOAD_BYTES,
                                                s_v_load + stage * FG_V_LOAD_BYTES, tid);
        const u32 sk_j = s_k, sv_j = s_v;
#else
        const u32 sk_j = s_k + stage * FG_K_BYTES, sv_j = FG_V_IN_K ? sk_j : s_v + stage * FG_V_BYTES;
#endif
        stage = stage == FG_STAGES - 1 ? 0 : stage + 1;

        float s[1][FG_NT][4];
#pragma unroll
        for (int nt = 0; nt < FG_NT; nt++) s[0][nt][0] = s[0][nt][1] = s[0][nt][2] = s[0][nt][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < FG_KK; kk++) {
            u32 af[4];
            if constexpr (FG_Q_IN_REGS) af[0] = qf[kk][0], af[1] = qf[kk][1], af[2] = qf[kk][2], af[3] = qf[kk][3];
            else fg_ldmatrix_x4(af, fg_frag_addr<FG_BLOCK_M>(s_q_warp, qv_off, 0, kk));
#pragma unroll
            for (int n2 = 0; n2 < FG_NT / 2; n2++) {
                u32 kf[4];
                fg_ldmatrix_x4(kf, fg_frag_addr<FG_BLOCK_N>(sk_j, k_off, key_w + n2 * 16, kk));
                fg_mma_16816(s[0][2 * n2], af, kf[0], kf[1]);
                fg_mma_16816(s[0][2 * n2 + 1], af, kf[2], kf[3]);
            }
        }
        if constexpr (FG_SCORE_MODS) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float dist = dist0[h] - (float)(j * FG_BLOCK_N);
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        s[0][nt][2 * h + e] = fg_score_mod(mods[h], s[0][nt][2 * h + e], dist - (float)(8 * nt + e));
            }
        }
#if FG_USER_SCORE || FG_USER_MASK
        // A custom mod (generator/mod.h) on every score of the block, in logit units: score_mod's value, then
        // mask_mod's verdict (a hidden key -inf, a bad one NaN). Its q is the row's position among the keys, tok + sk - sq (bottom-right
        // aligned, as the causal mask). Before the built-in masks below, which overwrite the keys past sk or a
        // row's diagonal (where a mod may read past its arrays and mark the score NaN).
#if FG_USER_MASK
        // the mask's verdict on this warp's 16 rows of the block: a block it keeps whole needs no mask of its own,
        // one it hides whole no evaluation (rows past the sequence are never stored: kept)
        const int w_row = m0 + wm * 16;
        const int verdict = w_row < rows ? fg_serve_verdict(b, kvh, grp, w_row, min(w_row + 15, rows - 1), sq, sk, j, j) : FG_IV_KEPT;
#endif
        // (score_mod on every score, then mask_mod under a branch the warp takes together: a block the verdict keeps
        // whole evaluates nothing, one it hides whole only sets -inf)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int idx = min(m0 + wm * 16 + g + h * 8, rows - 1), tok = idx / grp, head = kvh * grp + idx - tok * grp;
            const int qpos = tok + sk - sq, key0 = j * FG_BLOCK_N + key_w + 2 * t;
            const float fqr = (float)(qpos - key0), fk0 = (float)key0; // (the mod's float positions: generator/mod_emit.c)
#if FG_USER_SCORE
#pragma unroll
            for (int nt = 0; nt < FG_NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    s[0][nt][2 * h + e] = fg_user_score(s[0][nt][2 * h + e], sm_scale, mod_inv_scale, b, head, qpos,
                                                        key0 + 8 * nt + e, fqr, fk0, (float)(8 * nt + e), p.mod_aux);
#endif
#if FG_USER_MASK
            if (verdict == FG_IV_HIDDEN) {
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++) s[0][nt][2 * h] = s[0][nt][2 * h + 1] = FG_NEG_INF;
            } else if (verdict != FG_IV_KEPT) {
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float keep = fg_user_mask(b, head, qpos, key0 + 8 * nt + e, fqr, fk0, (float)(8 * nt + e),
                                                        p.mod_aux); // 0, -inf (hidden) or NaN (bad)
                        float &x = s[0][nt][2 * h + e];
                        x = keep == 0.f ? x : keep; // hidden whatever its score
                    }
            }
#endif
        }
#endif
        if constexpr (decltype(masked)::value) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                // The row's keys relative to this thread's first column of the block: those below first, or from
                // limit on, are masked. Without a window first is a constant below every column, and its test folds
                // away; with one both come from fg_row_keys.
                const int tok = (m0 + wm * 16 + g + h * 8) / grp;
                int limit = (FG_CAUSAL ? min(sk, tok + sk - sq + 1) : sk) - j * FG_BLOCK_N - key_w - 2 * t;
                int first = -FG_BLOCK_N;
                if constexpr (FG_WINDOW) {
                    const fg_key_span keys = fg_row_keys(tok, sq, sk, p.window_left, p.window_right, p.causal_top_left);
                    const int rel = j * FG_BLOCK_N + key_w + 2 * t;
                    limit = keys.hi - rel;
                    first = keys.lo - rel;
                }
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++) {
                    if (8 * nt >= limit || 8 * nt < first) s[0][nt][2 * h] = FG_NEG_INF;
                    if (8 * nt + 1 >= limit || 8 * nt + 1 < first) s[0][nt][2 * h + 1] = FG_NEG_INF;
                }
            }
        }
        if constexpr (FG_WIDE) {
            // the rows' block maxima over the key warps; then P, with the common maximum, into the shared tile
            float *red = (float *)(smem + (s_red - s_q));
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float mx = FG_NEG_INF;
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++) mx = fmaxf(mx, fmaxf(s[0][nt][2 * h], s[0][nt][2 * h + 1]));
                mx = fg_quad_max(mx);
                if (t == 0) red[wn * FG_BLOCK_M + wm * 16 + g + 8 * h] = mx;
            }
            __syncthreads();
            float corr[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float peers = FG_NEG_INF;
#pragma unroll
                for (int w = 0; w < FG_WARPS_N; w++) peers = fmaxf(peers, red[w * FG_BLOCK_M + wm * 16 + g + 8 * h]);
                corr[h] = fg_softmax_row<FG_NT, true, true>(s[0], h, row_max[0][h], row_sum[0][h], sm_scale_log2, 0.f, 0.f, peers);
#pragma unroll
                for (int nt = 0; nt < FG_NT; nt++)
                    asm volatile("st.shared.b32 [%0], %1;" ::"r"(s_p + fg_tile_offset<FG_P_CHUNKS>(wm * 16 + g + 8 * h, (key_w + 8 * nt) / 8,
                                                                                               FG_BLOCK_M) + 4u * (u32)t),
                                 "r"(fg_pack2(s[0][nt][2 * h], s[0][nt][2 * h + 1])) : "memory");
            }
#pragma unroll
            for (int dt = 0; dt < FG_DT; dt++) {
                acc[0][dt][0] *= corr[0], acc[0][dt][1] *= corr[0];
                acc[0][dt][2] *= corr[1], acc[0][dt][3] *= corr[1];
            }
            __syncthreads();
            // all the block's keys, this warp's slabs of V's columns
            const u32 sv_w = sv_j + (u32)(wn * (FG_DW / 64)) * FG_BLOCK_N * 128;
#pragma unroll
            for (int kk = 0; kk < FG_BLOCK_N / 16; kk++) {
                u32 pa[4];
                fg_ldmatrix_x4(pa, fg_frag_addr<FG_BLOCK_M>(s_p_warp, p_off, 0, kk));
#pragma unroll
                for (int d2 = 0; d2 < FG_DT / 2; d2++) {
                    u32 vf[4];
                    fg_ldmatrix_x4_trans(vf, fg_frag_addr<FG_BLOCK_N>(sv_w, v_off, kk * 16, d2));
                    fg_mma_16816(acc[0][2 * d2], pa, vf[0], vf[1]);
                    fg_mma_16816(acc[0][2 * d2 + 1], pa, vf[2], vf[3]);
                }
            }
            return;
        }
        fg_online_softmax<1, FG_NT, FG_DT>(s, row_max, row_sum, acc, sm_scale_log2, 0.f);
        u32 pf[FG_KW / 16][4];
#pragma unroll
        for (int kk = 0; kk < FG_KW / 16; kk++) fg_pack_a(s[0][2 * kk], s[0][2 * kk + 1], pf[kk]);
#pragma unroll
        for (int kk = 0; kk < FG_KW / 16; kk++) {
#pragma unroll
            for (int d2 = 0; d2 < FG_DT / 2; d2++) {
                u32 vf[4];
                fg_ldmatrix_x4_trans(vf, fg_frag_addr<FG_BLOCK_N>(sv_j, v_off, key_w + kk * 16, d2));
                fg_mma_16816(acc[0][2 * d2], pf[kk], vf[0], vf[1]);
                fg_mma_16816(acc[0][2 * d2 + 1], pf[kk], vf[2], vf[3]);
            }
        }
    };
    int j = j_begin;
    for (; j < min(j_end, n_unmasked); j++) block_step(j, fg_bool<false>{});
    for (; j < j_end; j++) block_step(j, fg_bool<true>{});

    // Epilogue: the warps of a row tile merge their states through shared memory (over the K/V buffers,
    // free once every cp.async has landed): per row the warps' max and sum, then each warp's O scaled to
    // the common max and divided by the common sum, then their sum, stored 4 columns a thread.
    fg_cp_async_wait<0>();
    __syncthreads();
    float *stage_o = (float *)(smem + FG_Q_BYTES);                         // [O_COPIES][BLOCK_M][O_ROW]
    // FG_SINKS: one more state a row after the warps', the sink's (split 0 only, so that the merge counts it
    // once): a key without a value whose score is sink / sm_scale (the scale) and whose weight is 1, so that the
    // merge below takes it into the row's max and sum like any warp's, and no O.
    constexpr int ST = FG_WARPS_N + FG_SINKS;                              // states a row
    float *st_max = stage_o + FG_O_COPIES * FG_BLOCK_M * FG_O_ROW;         // [ST][BLOCK_M]
    float *st_sum = st_max + ST * FG_BLOCK_M;                              // [ST][BLOCK_M]
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float l = fg_quad_sum(row_sum[0][h]);
        if (t == 0) {
            const int r = wm * 16 + g + h * 8;
            st_max[wn * FG_BLOCK_M + r] = row_max[0][h];
            st_sum[wn * FG_BLOCK_M + r] = l;
        }
    }
    if (FG_SINKS && tid < FG_BLOCK_M) {
        const int idx = m0 + tid, hq = kvh * grp + idx % grp;
        const bool sink = split == 0 && idx < rows;
        st_max[FG_WARPS_N * FG_BLOCK_M + tid] = sink ? __ldg(p.sinks + hq) / sm_scale : FG_NEG_INF;
        st_sum[FG_WARPS_N * FG_BLOCK_M + tid] = sink ? 1.f : 0.f;
    }
    __syncthreads();
    // The row's common max M and sum L over the warps of its tile (and its sink); a warp's factor
    // exp2((m_w - M) c).
    auto row_stats = [&](int r, float &M, float &L) {
        M = FG_NEG_INF;
#pragma unroll
        for (int w = 0; w < ST; w++) M = fmaxf(M, st_max[w * FG_BLOCK_M + r]);
        L = 0.f;
#pragma unroll
        for (int w = 0; w < ST; w++) {
            const float mw = st_max[w * FG_BLOCK_M + r];
            L += mw == FG_NEG_INF ? 0.f : st_sum[w * FG_BLOCK_M + r] * fg_exp2((mw - M) * sm_scale_log2);
        }
    };
    // V's descale (FG_KV_FP8) multiplies O: the final one and a split's partial alike (the LSE does not see it).
#if FG_KV_FP8
    const float v_descale = fg_kv8_descale(p.v_descale, p.v_descale_stride, b, kvh);
#else
    constexpr float v_descale = 1.f;
#endif
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = wm * 16 + g + h * 8;
        float M, L;
        row_stats(r, M, L);
        const float mw = row_max[0][h];
        const float f = (mw == FG_NEG_INF || !(L > 0.f)) ? 0.f : fg_exp2((mw - M) * sm_scale_log2) / L * v_descale;
        // (FG_WIDE: one O, the warp's columns of it; else one O a key warp, summed below)
        float *dst = stage_o + ((FG_WIDE ? 0 : wn) * FG_BLOCK_M + r) * FG_O_ROW + (FG_WIDE ? wn * FG_DW : 0) + 2 * t;
#pragma unroll
        for (int dt = 0; dt < FG_DT; dt++)
            *(float2 *)(dst + dt * 8) = make_float2(acc[0][dt][2 * h] * f, acc[0][dt][2 * h + 1] * f);
    }
    __syncthreads();
    const bool partial = p.num_splits > 1;
    constexpr int C4 = FG_HEAD_DIM_V_PADDED / 4;
    for (int i = tid; i < FG_BLOCK_M * C4; i += FG_THREADS) {
        const int r = i / C4, c = (i % C4) * 4;
        const int idx = m0 + r;
        if (idx >= rows) continue;
        const int tok = idx / grp, h = kvh * grp + (idx - tok * grp);
        if (c == 0 && (p.lse || partial)) {
            float M, L;
            row_stats(r, M, L);
            const float lse = fg_row_lse(L, M, sm_scale, 0.f);
            if (partial)
                p.lse_part[(i64)split * p.part_tokens * p.heads_q + ((i64)b * (p.cu_seqlens_q ? 0 : p.seqlen_q) + seq.q0 + tok) * p.heads_q + h] = lse;
            else
                p.lse[(i64)b * p.lse_stride[0] + (i64)h * p.lse_stride[1] + (i64)(seq.q0 + tok) * p.lse_stride[2]] = lse;
        }
        if (c >= FG_HEAD_DIM_V) continue;
        float4 o = *(const float4 *)(stage_o + r * FG_O_ROW + c);
#pragma unroll
        for (int w = 1; w < FG_O_COPIES; w++) {
            const float4 x = *(const float4 *)(stage_o + (w * FG_BLOCK_M + r) * FG_O_ROW + c);
            o.x += x.x, o.y += x.y, o.z += x.z, o.w += x.w;
        }
        if (partial) {
            float *dst = p.o_part + ((i64)split * p.part_tokens * p.heads_q +
                                     ((i64)b * (p.cu_seqlens_q ? 0 : p.seqlen_q) + seq.q0 + tok) * p.heads_q + h) * p.head_dim_v + c;
            *(float4 *)dst = o;
        } else {
            u16 *dst = (u16 *)p.o + (i64)b * p.o_stride[0] + (i64)(seq.q0 + tok) * p.o_stride[1] + (i64)h * p.o_stride[2] + c;
            const u32 lo = fg_pack2(o.x, o.y), hi = fg_pack2(o.z, o.w);
            asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(dst), "r"(lo), "r"(hi) : "memory");
        }
    }
}

#endif // FG_FORWARD_SERVING_CUH
