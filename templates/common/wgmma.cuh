// wgmma.cuh: the Hopper (sm_90a) primitives of the wgmma families, written against PTX: the tile layout,
// wgmma shared-memory descriptors and fences, setmaxnreg and named barriers (mbarriers and TMA: tma.cuh).
//
// Tile layout in shared memory. TMA writes a tile of `rows` rows as FG_COL_CHUNKS column chunks of FG_CHUNK_COLS
// elements (64 elements = 128 bytes when the head dim is a multiple of 64, else 32 elements = 64 bytes),
// chunk after chunk: byte (row, col) of chunk c sits at c * rows * FG_CHUNK_ROW_BYTES + row * FG_CHUNK_ROW_BYTES + col * 2, with the
// 16-byte unit inside each row XOR-ed by the row (CUTLASS's Swizzle<3,4,3> for 128-byte rows,
// Swizzle<2,4,3> for 64-byte rows). Those are the canonical layouts wgmma reads through a descriptor:
// K-major for Q and K (the reduction dim, head_dim, is contiguous) and MN-major for V (P.V reduces over
// keys, and V's rows are keys), so V needs no transpose. The swizzle acts on address bits, so every tile
// starts on a 1024-byte boundary.
#ifndef FG_COMMON_WGMMA_CUH
#define FG_COMMON_WGMMA_CUH

#include "common/types.cuh"

typedef unsigned long long u64;

constexpr int FG_CHUNK_ROW_BYTES = FG_SWIZZLE_BYTES;             // bytes per row of a chunk: 128 or 64
constexpr int FG_CHUNK_COLS = FG_CHUNK_ROW_BYTES / FG_ELEM_BYTES;       // elements per row of a chunk (64 or 32; FP8: 128 or 64)
constexpr int FG_COL_CHUNKS = FG_HEAD_DIM / FG_CHUNK_COLS;   // chunks per tile row
// The descriptors' swizzle field (bits 62-63) of rows of rb bytes: 1 = 128 B, 2 = 64 B, 3 = 32 B.
__host__ __device__ constexpr u64 fg_sw_mode(int rb) { return rb == 128 ? 1 : rb == 64 ? 2 : 3; }
constexpr u64 FG_SW_MODE = fg_sw_mode(FG_CHUNK_ROW_BYTES);

// FP8: the V^T tile is head_dim rows of FG_BLOCK_N key bytes, read K-major by the P.V wgmma (FP8 wgmma
// takes only K-major operands; the caller gives V key-major), stored as FG_BLOCK_N / FG_VT_ROW_BYTES chunks of
// FG_VT_ROW_BYTES keys (FG_FP8_VT_ROW_BYTES from the emitter: 128, 64 or 32, the largest dividing block_n), chunk after chunk,
// each row one swizzled unit, so that block_n need not be one swizzle width (FlashAttention-3's d 128 FP8
// tile is 128 x 224).
#if FG_FP8
constexpr int FG_VT_ROW_BYTES = FG_FP8_VT_ROW_BYTES;
#else
constexpr int FG_VT_ROW_BYTES = FG_CHUNK_ROW_BYTES;
#endif
// FP8: each V^T chunk has 8 more rows after its head_dim ones, all 1.0 (written once at the start), so that
// the P.V wgmma's 8 extra columns of O accumulate the row sums of P (no add an element in the softmax).
// FG_PV_SUM (8 or 0) comes from the emitter (spec_fp8_pv_sum: head_dim 64 and 128).
#if !FG_FP8
#define FG_PV_SUM 0
#endif
constexpr u32 FG_VT_CHUNK = (FG_HEAD_DIM + FG_PV_SUM) * FG_VT_ROW_BYTES; // bytes of one V^T chunk

// Physical byte offset of logical byte offset o inside a tile (tiles are 1024-byte aligned).
__device__ __forceinline__ u32 fg_swizzle(u32 o) {
    return o ^ (((o >> 7) & (FG_CHUNK_ROW_BYTES == 128 ? 7u : 3u)) << 4);
}

// Four 8x8 16-bit matrices to shared memory (stmatrix .x4): lane l gives the address of row l % 8 of
// matrix l / 8; register j holds, in lane (g, t) = (l / 4, l % 4), row g, columns 2t and 2t + 1 of matrix j
// (the m16n8 accumulator fragment's layout, packed).
// TRANS (stmatrix .trans): each matrix stored transposed, the row lane l addresses getting column l % 8 of
// matrix l / 8 (rows g of every lane (g, t), their column 2t or 2t + 1).
template <bool TRANS = false>
__device__ __forceinline__ void fg_stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
    if constexpr (TRANS)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0),
                     "r"(r1), "r"(r2), "r"(r3)
                     : "memory");
    else
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
                     "r"(r2), "r"(r3)
                     : "memory");
}

// ---- warpgroups ----
template <int R>
__device__ __forceinline__ void fg_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R)); }
template <int R>
__device__ __forceinline__ void fg_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R)); }
// Barrier `id` (1..15; 0 is __syncthreads) among `count` threads.
__device__ __forceinline__ void fg_named_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Arrives at barrier `id` without waiting (counts toward `count`).
__device__ __forceinline__ void fg_named_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// ---- wgmma ----
__device__ __forceinline__ void fg_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void fg_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fg_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// Keeps the compiler from moving reads or writes of an accumulator across a wgmma issue or wait.
template <int A, int B>
__device__ __forceinline__ void fg_fence_regs(float (&r)[A][B]) {
#pragma unroll
    for (int i = 0; i < A; i++)
#pragma unroll
        for (int j = 0; j < B; j++) asm volatile("" : "+f"(r[i][j])::"memory");
}

// Descriptor of a K-major operand whose rows are RB-byte chunks (128, 64 or 32, swizzled to match), 8-row
// groups 8 * RB apart; the leading byte offset is unused for swizzled K-major layouts and set to 1.
template <int RB = FG_CHUNK_ROW_BYTES>
__device__ __forceinline__ u64 fg_desc_kmajor(u32 addr) {
    return ((u64)(addr & 0x3FFFF) >> 4) | (1ull << 16) | ((u64)(8 * RB / 16) << 32) | (fg_sw_mode(RB) << 62);
}
// Descriptor of an MN-major operand (V: N = head_dim contiguous in FG_CHUNK_COLS-column chunks `chunk_bytes`
// apart, K = keys, 8-key groups 8 * FG_CHUNK_ROW_BYTES apart).
__device__ __forceinline__ u64 fg_desc_mnmajor(u32 addr, u32 chunk_bytes) {
    return ((u64)(addr & 0x3FFFF) >> 4) | ((u64)(chunk_bytes >> 4) << 16) | ((u64)(8 * FG_CHUNK_ROW_BYTES / 16) << 32) |
           (FG_SW_MODE << 62);
}

#endif // FG_COMMON_WGMMA_CUH
