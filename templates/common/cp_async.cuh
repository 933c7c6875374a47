// cp_async.cuh: asynchronous global -> shared copies (sm_80 cp.async), and the swizzled tile layout they
// fill.
//
// Tile layout. A tile is `rows` rows of FG_CHUNKS 16-byte chunks (8 elements each). Rows are split into
// slabs of FG_SW chunks (8, 4 or 2: the largest that divides the row), stored slab after slab, and inside
// a slab the chunk index is XOR-ed with the row, so that the 8 row addresses of one ldmatrix (8
// consecutive rows, same logical chunk) fall in 8 different 16-byte bank groups:
//   SW = 8: a slab row is 128 bytes, physical chunk = c ^ (row % 8);
//   SW = 4: two rows share 128 bytes,    physical chunk = c ^ ((row / 2) % 4);
//   SW = 2: four rows share 128 bytes,   physical chunk = c ^ ((row / 4) % 2).
// No padding is needed, so every head dim that is a multiple of 16 uses its exact size.

constexpr int FG_CHUNKS = FG_HEAD_DIM_PADDED / 8;
constexpr int FG_SW = FG_CHUNKS % 8 == 0 ? 8 : (FG_CHUNKS % 4 == 0 ? 4 : 2);

// Byte offset of (row, 16-byte chunk) inside a tile of `rows` rows.
__device__ __forceinline__ u32 fg_tile_offset(int row, int chunk, int rows) {
    const int slab = chunk / FG_SW;
    const int c = chunk % FG_SW;
    const int pc = c ^ ((row / (8 / FG_SW)) & (FG_SW - 1));
    return (u32)(((slab * rows + row) * FG_SW + pc) * 16);
}

// 16 bytes global -> shared, bypassing L1; when !valid nothing is read and the 16 bytes are zero-filled.
__device__ __forceinline__ void fg_cp_async16(u32 dst, const void *src, bool valid) {
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n));
}

__device__ __forceinline__ void fg_cp_async_commit() { asm volatile("cp.async.commit_group;"); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void fg_cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// The lane-dependent part of an ldmatrix address. ldmatrix reads rows row0 + lane_row (row0 a multiple
// of 8, lane_row in 0..15) at chunk 2*kk + lane_chunk (lane_chunk 0 or 1). Because the swizzle depends
// on the row only through row % 8, the address splits into a per-thread part that depends on kk only
// through kk % (FG_SW / 2), computed once here, plus compile-time constants (fg_frag_addr). Hoisting
// every address of the unrolled loops instead would cost a register each and spill.
struct fg_frag_offsets {
    u32 off[FG_SW / 2]; // byte offsets for kk % (FG_SW / 2) = 0, 1, ...
};

__device__ __forceinline__ fg_frag_offsets fg_frag_offsets_make(int lane_row, int lane_chunk) {
    fg_frag_offsets f;
#pragma unroll
    for (int ph = 0; ph < FG_SW / 2; ph++) {
        const int c = ph * 2 + lane_chunk;
        f.off[ph] = (u32)((lane_row * FG_SW + (c ^ ((lane_row / (8 / FG_SW)) & (FG_SW - 1)))) * 16);
    }
    return f;
}

// Address of the fragment at rows row0 + lane_row (row0 a compile-time multiple of 8 after unrolling)
// and chunk pair kk, in a tile of ROWS rows at `base`.
template <int ROWS>
__device__ __forceinline__ u32 fg_frag_addr(u32 base, const fg_frag_offsets &f, int row0, int kk) {
    const int slab = (kk * 2) / FG_SW;
    return base + (u32)((slab * ROWS + row0) * FG_SW * 16) + f.off[kk % (FG_SW / 2)];
}

// Copies a ROWS x head_dim tile whose first row is at `src` (rows `row_stride` elements apart) into the
// swizzled tile at `dst`. Rows at or past rows_valid, and columns past head_dim, are zero-filled, so
// tails never read out of bounds and padded columns contribute nothing.
template <int ROWS, int THREADS>
__device__ __forceinline__ void fg_load_tile(u32 dst, const u16 *src, i64 row_stride, int rows_valid, int tid) {
    if constexpr (THREADS % FG_CHUNKS == 0) {
        // Each thread keeps one chunk column and walks down the rows: one pointer, bumped each step.
        constexpr int ROWS_PER_STEP = THREADS / FG_CHUNKS;
        const int c = tid % FG_CHUNKS;
        int r = tid / FG_CHUNKS;
        const u16 *ptr = src + (i64)r * row_stride + c * 8;
        const i64 step = (i64)ROWS_PER_STEP * row_stride;
        // When a step is a multiple of 8 rows the swizzle repeats, so the shared address only moves by a
        // constant: one register instead of one per step.
        const u32 dst0 = dst + fg_tile_offset(r, c, ROWS);
        const bool col_ok = c * 8 < FG_HEAD_DIM;
#pragma unroll
        for (int i = 0; i < (ROWS + ROWS_PER_STEP - 1) / ROWS_PER_STEP; i++, r += ROWS_PER_STEP, ptr += step) {
            if (ROWS % ROWS_PER_STEP == 0 || r < ROWS) {
                const bool ok = r < rows_valid && col_ok;
                const u32 d = ROWS_PER_STEP % 8 == 0 ? dst0 + (u32)(i * ROWS_PER_STEP * FG_SW * 16)
                                                     : dst + fg_tile_offset(r, c, ROWS);
                fg_cp_async16(d, ok ? ptr : src, ok);
            }
        }
    } else {
#pragma unroll 1
        for (int i = tid; i < ROWS * FG_CHUNKS; i += THREADS) {
            const int r = i / FG_CHUNKS, c = i % FG_CHUNKS;
            const bool ok = r < rows_valid && c * 8 < FG_HEAD_DIM;
            const u16 *p = ok ? src + (i64)r * row_stride + c * 8 : src;
            fg_cp_async16(dst + fg_tile_offset(r, c, ROWS), p, ok);
        }
    }
}
