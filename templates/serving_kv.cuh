// serving_kv.cuh: where the serving forward (forward_serving.cuh) finds its rows and how its K and V reach shared
// memory: a sequence's spans, the cp.async loaders of each key block's K and V rows (packed, dense or paged), and,
// for FP8 K and V (FG_KV_FP8, kv=e4m3|e5m2 variants), their dequantization into the 16-bit tiles the kernel
// computes on.
//
// FP8 K and V. The loaders copy a key block's FP8 rows (head_dim bytes each) into staging stages, one per pipeline
// stage, in the swizzled layout of tiles of 16-byte chunks; once a stage has landed, the CTA dequantizes it into one
// 16-bit K tile and one 16-bit V tile (Q's dtype, the layout the 16-bit loaders fill), and the compute that follows
// is the 16-bit kernel's. Rows past a sequence's keys are zero-filled FP8 bytes, which dequantize to 0. A decode tile
// (one row tile, every warp on its own keys) has each warp dequantize its own keys, which only it reads: a
// __syncwarp orders them; other tiles take one more barrier a block.
#ifndef FG_SERVING_KV_CUH
#define FG_SERVING_KV_CUH

#include "common/fg_params.h"
#include "common/types.cuh"
#include "common/cp_async.cuh"
#include "common/kv_fp8.h"

#ifndef FG_SERVE_TMA
#define FG_SERVE_TMA 0
#endif
// V's head dim (head_dim_v: O is that wide), head_dim's unless the variant names its own.
#ifndef FG_HEAD_DIM_V
#define FG_HEAD_DIM_V FG_HEAD_DIM
#define FG_HEAD_DIM_V_PADDED FG_HEAD_DIM_PADDED
#endif
#ifndef FG_V_IN_K
#define FG_V_IN_K 0
#endif
#ifndef FG_KV_FP8
#define FG_KV_FP8 0
#endif
static_assert(!FG_KV_FP8 || (!FG_SERVE_TMA && !FG_V_IN_K && FG_HEAD_DIM % 32 == 0 && FG_HEAD_DIM_V % 32 == 0 &&
                             FG_HEAD_DIM_V <= 256 && !FG_FP8),
              "FP8 K and V: cp.async loads, V of its own, rows of whole pairs of 16-byte chunks, 16-bit Q");

constexpr int FG_THREADS = FG_WARPS * 32;
constexpr int FG_V_CHUNKS = FG_HEAD_DIM_V_PADDED / 8; // 16-byte chunks of a 16-bit V row

// K and V elements as they are stored, and the 16-byte chunks of their rows as loaded: FP8 bytes (16 a chunk) or
// 16-bit elements of Q's dtype (8).
#if FG_KV_FP8
typedef u8 fg_kv_t;
#else
typedef fg_in_t fg_kv_t;
#endif
constexpr int FG_KV_CHUNK_ELEMS = 16 / (int)sizeof(fg_kv_t);
constexpr int FG_K_LOAD_CHUNKS = FG_HEAD_DIM_PADDED / FG_KV_CHUNK_ELEMS;
constexpr int FG_V_LOAD_CHUNKS = FG_HEAD_DIM_V_PADDED / FG_KV_CHUNK_ELEMS;

// The rows of sequence b: its first query token and length, its first key token (packed keys; 0 for
// dense or paged ones) and the keys it uses, clamped to the tensors described.
struct fg_seq {
    int q0, sq, k0, sk;
};

__device__ __forceinline__ int fg_clampi(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

__device__ __forceinline__ fg_seq fg_sequence(const fg_serve_params &p, int b) {
    fg_seq s;
    s.q0 = 0;
    s.sq = p.seqlen_q;
    if (p.cu_seqlens_q) {
        s.q0 = fg_clampi(p.cu_seqlens_q[b], 0, p.total_q);
        s.sq = min(fg_clampi(p.cu_seqlens_q[b + 1], s.q0, p.total_q) - s.q0, p.seqlen_q); // the grid's bound
    }
    s.k0 = 0;
    int cap = p.seqlen_k;
    if (p.block_table) {
        cap = p.max_pages * p.page_size;
    } else if (p.cu_seqlens_k) {
        s.k0 = fg_clampi(p.cu_seqlens_k[b], 0, p.total_k);
        cap = fg_clampi(p.cu_seqlens_k[b + 1], s.k0, p.total_k) - s.k0;
    }
    s.sk = p.seqused_k ? fg_clampi(p.seqused_k[b], 0, cap) : cap;
    return s;
}

// One thread's share of loading the K and/or V tiles (WHICH: 1 K, 2 V, 3 both, when they are of one width) of
// a key block, rows of CH chunks (of FG_KV_CHUNK_ELEMS elements: FP8 rows go to the staging, in the layout of a
// tile of CH-chunk rows): a fixed chunk column, rows RPS apart. Each row is located on its own (paged or not),
// once for K and V.
template <int CH, int WHICH>
struct fg_kv_loader_t {
    static constexpr int RPS = fg_fixed_step<CH, FG_THREADS>::RPS;
    static constexpr int LOADERS = fg_fixed_step<CH, FG_THREADS>::LOADERS;
    static constexpr int ROWS_PER_THREAD = (FG_BLOCK_N + RPS - 1) / RPS;
    static constexpr int DIM = WHICH == 2 ? FG_HEAD_DIM_V : FG_HEAD_DIM; // the columns the tensor has
    static constexpr int EPC = FG_KV_CHUNK_ELEMS;
    const fg_kv_t *k, *v; // this thread's column of the KV head (paged) or of the sequence's key 0
    const int *table;     // the sequence's row of the block table, or 0
    u32 dst;
    int row;
    bool active;          // a copying thread
    bool col_ok;          // its column lies inside the head dim: a padding column's chunks are zero-filled, never
                          // left as they were (the Q K^T product runs over the padding, and 0 times stale NaN is NaN)

    __device__ __forceinline__ void init(const fg_serve_params &p, int b, int kvh, const fg_seq &s, int tid) {
        const int c = tid % CH;
        row = tid / CH;
        active = LOADERS == FG_THREADS || tid < LOADERS;
        col_ok = DIM == CH * EPC || c * EPC < DIM;
        dst = fg_tile_offset<CH>(row, c, FG_BLOCK_N);
        table = p.block_table ? p.block_table + (i64)b * p.block_table_stride : 0;
        k = (const fg_kv_t *)p.k + (i64)kvh * p.k_stride[2] + c * EPC;
        v = (const fg_kv_t *)p.v + (i64)kvh * p.v_stride[2] + c * EPC;
        if (!table) { // the sequence's key 0 (packed keys have batch stride 0)
            k += (i64)b * p.k_stride[0] + (i64)s.k0 * p.k_stride[1];
            v += (i64)b * p.v_stride[0] + (i64)s.k0 * p.v_stride[1];
        }
    }

    // Loads keys key0 .. key0 + FG_BLOCK_N - 1 (those below sk) into the K and V tiles at sk_tile, sv_tile.
    __device__ __forceinline__ void load(const fg_serve_params &p, u32 sk_tile, u32 sv_tile, int key0, int sk) {
        if (!active) return;
        if (table) {
            const int first = key0 + row;
            int slot = first / p.page_size, off = first - slot * p.page_size;
#pragma unroll
            for (int i = 0; i < ROWS_PER_THREAD; i++) {
                const int r = row + i * RPS;
                if (FG_BLOCK_N % RPS == 0 || r < FG_BLOCK_N) {
                    bool ok = key0 + r < sk;
                    const int page = ok ? __ldg(table + slot) : 0;
                    ok = ok && col_ok && (unsigned)page < (unsigned)p.num_pages;
                    const u32 o = fg_fixed_step_offset<CH, RPS>(dst, i);
                    if (WHICH & 1) fg_cp_async16(sk_tile + o, k + (page * p.k_stride[0] + off * p.k_stride[1]), ok);
                    if (WHICH & 2) fg_cp_async16(sv_tile + o, v + (page * p.v_stride[0] + off * p.v_stride[1]), ok);
                }
                off += RPS; // the next row of this thread, RPS keys on
                while (off >= p.page_size) off -= p.page_size, slot++;
            }
        } else {
            const fg_kv_t *kp = k + (i64)(key0 + row) * p.k_stride[1];
            const fg_kv_t *vp = v + (i64)(key0 + row) * p.v_stride[1];
#pragma unroll
            for (int i = 0; i < ROWS_PER_THREAD; i++) {
                const int r = row + i * RPS;
                if (FG_BLOCK_N % RPS == 0 || r < FG_BLOCK_N) {
                    const u32 o = fg_fixed_step_offset<CH, RPS>(dst, i);
                    if (WHICH & 1) fg_cp_async16(sk_tile + o, kp, col_ok && key0 + r < sk);
                    if (WHICH & 2) fg_cp_async16(sv_tile + o, vp, col_ok && key0 + r < sk);
                }
                if (WHICH & 1) kp += RPS * p.k_stride[1];
                if (WHICH & 2) vp += RPS * p.v_stride[1];
            }
        }
    }
};

// K and V of a key block: one loader for both when they are of one width, else one each; K's alone when V is
// read from K's tiles.
struct fg_kv_loader {
    static constexpr bool SAME = !FG_V_IN_K && FG_V_LOAD_CHUNKS == FG_K_LOAD_CHUNKS && FG_HEAD_DIM_V == FG_HEAD_DIM;
    static constexpr bool V_OWN = !FG_V_IN_K && !SAME; // V's rows by a loader of their own
    fg_kv_loader_t<FG_K_LOAD_CHUNKS, SAME ? 3 : 1> kl;
    fg_kv_loader_t<FG_V_LOAD_CHUNKS, 2> vl;
    __device__ __forceinline__ void init(const fg_serve_params &p, int b, int kvh, const fg_seq &s, int tid) {
        kl.init(p, b, kvh, s, tid);
        if (V_OWN) vl.init(p, b, kvh, s, tid);
    }
    __device__ __forceinline__ void load(const fg_serve_params &p, u32 sk_tile, u32 sv_tile, int key0, int sk) {
        kl.load(p, sk_tile, sv_tile, key0, sk);
        if (V_OWN) vl.load(p, sk_tile, sv_tile, key0, sk);
    }
};

#if FG_KV_FP8
// Four FP8 values of K or V (byte 0 first) -> two registers of two 16-bit values of Q's dtype, exactly (kv_fp8.h):
// lo holds bytes 0 and 1 (byte 0 in its low half), hi bytes 2 and 3.
__device__ __forceinline__ void fg_kv8_dequant4(u32 q, u32 &lo, u32 &hi) {
    constexpr bool E5M2 = FG_KV_FP8 == 2, BF16 = FG_OUT_IS_BF16;
    constexpr u32 SHIFT = FG_KV8_SHIFT(E5M2, BF16), MASK = FG_KV8_MASK(E5M2, BF16) * 0x10001u;
    constexpr u32 SCALE = FG_KV8_SCALE_BITS(E5M2, BF16) * 0x10001u;
    u32 w[2] = {__byte_perm(q, 0u, 0x1404), __byte_perm(q, 0u, 0x3424)}; // each byte the high byte of a lane
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (SHIFT) w[i] = (w[i] & 0x80008000u) | ((w[i] >> SHIFT) & MASK);
        if (BF16) // (fma: bf16x2 mul needs sm_90; + -0 keeps every product, signed zeros included)
            asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(w[i]) : "r"(w[i]), "r"(SCALE), "r"(0x80008000u));
        else if (!E5M2)
            asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(w[i]) : "r"(w[i]), "r"(SCALE));
    }
    lo = w[0], hi = w[1];
}

// Dequantizes units u0, u0 + STEP, ... below UNITS of a staged block: FP8 rows of CH8 16-byte chunks at src (the
// layout fg_tile_offset<CH8> gives) into the 16-bit tile at dst (rows of 2 CH8 chunks, its chunks 2c and 2c + 1
// from FP8 chunk c), rows from row0 on. 8 consecutive units take one chunk column of 8 consecutive rows, so that the
// 8 threads of a quarter warp meet 8 different bank groups in both tiles (their swizzles spread 8 consecutive rows).
// One unit at a time: unrolled, ptxas hoists the units' loads ahead, and at head_dim 256 the kernel then needs 255
// registers and spills (sm_80's 32-row tile) where it needs 243 this way.
template <int CH8, int UNITS, int STEP>
__device__ __forceinline__ void fg_kv8_dequant_rows(u32 dst, u32 src, int row0, int u0) {
#pragma unroll 1
    for (int i = 0; i < (UNITS + STEP - 1) / STEP; i++) {
        const int u = u0 + i * STEP;
        if (UNITS % STEP == 0 || u < UNITS) {
            const int c = (u / 8) % CH8, r = row0 + u % 8 + 8 * (u / 8 / CH8);
            u32 x[4], y[8];
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                         : "r"(src + fg_tile_offset<CH8>(r, c, FG_BLOCK_N)));
#pragma unroll
            for (int k = 0; k < 4; k++) fg_kv8_dequant4(x[k], y[2 * k], y[2 * k + 1]);
#pragma unroll
            for (int h = 0; h < 2; h++)
                asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst + fg_tile_offset<2 * CH8>(r, 2 * c + h, FG_BLOCK_N)),
                             "r"(y[4 * h]), "r"(y[4 * h + 1]), "r"(y[4 * h + 2]), "r"(y[4 * h + 3])
                             : "memory");
        }
    }
}

// A staged key block (FP8 K at k8, V at v8) into the 16-bit K and V tiles (k16, v16), which are then ready to read:
// with one warp over the rows (WARPS_M 1: the decode tiles) each warp its own KW keys, those it reads (a __syncwarp
// after); else every thread a share of all keys, then a barrier. The stage must have landed and be visible (the
// wait and barrier before the block).
template <int WARPS_M, int KW>
__device__ __forceinline__ void fg_kv8_dequant_block(u32 k16, u32 v16, u32 k8, u32 v8, int tid) {
    constexpr int CHK = FG_HEAD_DIM_PADDED / 16, CHV = FG_HEAD_DIM_V_PADDED / 16;
    if constexpr (WARPS_M == 1) {
        const int lane = tid % 32, key_w = tid / 32 * KW;
        fg_kv8_dequant_rows<CHK, KW * CHK, 32>(k16, k8, key_w, lane);
        fg_kv8_dequant_rows<CHV, KW * CHV, 32>(v16, v8, key_w, lane);
        __syncwarp();
    } else {
        fg_kv8_dequant_rows<CHK, FG_BLOCK_N * CHK, FG_THREADS>(k16, k8, 0, tid);
        fg_kv8_dequant_rows<CHV, FG_BLOCK_N * CHV, FG_THREADS>(v16, v8, 0, tid);
        __syncthreads();
    }
}

// The descale factor of (sequence b, KV head h): ptr[b * stride[0] + h * stride[1]] (strides 0: one for the tensor),
// 1 without one.
__device__ __forceinline__ float fg_kv8_descale(const float *ptr, const long long (&stride)[2], int b, int h) {
    return ptr ? __ldg(ptr + (i64)b * stride[0] + (i64)h * stride[1]) : 1.f;
}
#endif

#endif // FG_SERVING_KV_CUH
