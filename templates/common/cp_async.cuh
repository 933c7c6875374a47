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

// One thread's share of streaming ROWS x head_dim tiles of a [rows, head_dim] tensor (rows
// `row_stride` elements apart) into swizzled shared tiles, tile after tile. Rows at or past rows_valid,
// and columns past head_dim, are zero-filled (cp.async with source size 0 reads nothing), so tails never
// read out of bounds and padded columns contribute nothing.
// When the threads split a row into whole chunk columns (THREADS % FG_CHUNKS == 0) and each step covers
// a multiple of 8 rows, a thread keeps one column: its shared offset is fixed (the swizzle repeats every
// 8 rows) and its global pointer only advances, so a tile costs one compare and one copy per 16 bytes.
// Otherwise (head dims whose chunk count does not divide the thread count) each copy recomputes its
// coordinates.
template <int ROWS, int THREADS>
struct fg_tile_loader {
    static constexpr bool FIXED = THREADS % FG_CHUNKS == 0 && (THREADS / FG_CHUNKS) % 8 == 0;
    static constexpr int RPS = FIXED ? THREADS / FG_CHUNKS : 1; // rows per step when FIXED
    const u16 *src;  // FIXED: this thread's element in the next tile; else the next tile's first row
    u32 dst;         // FIXED: this thread's byte offset inside a tile
    int row;         // FIXED: this thread's first row inside a tile
    bool col_ok;     // FIXED: this thread's column lies inside head_dim
    int tid;         // the thread's index in the block

    __device__ __forceinline__ void init(const u16 *base, i64 row_stride, int thread) {
        tid = thread;
        if constexpr (FIXED) {
            const int c = thread % FG_CHUNKS;
            row = thread / FG_CHUNKS;
            col_ok = FG_HEAD_DIM == FG_HEAD_DIM_PADDED || c * 8 < FG_HEAD_DIM; // padded heads only
            dst = fg_tile_offset(row, c, ROWS);
            src = base + (i64)row * row_stride + c * 8;
        } else {
            src = base;
        }
    }

    // Copies the next tile, of which the first rows_valid rows exist, into the tile at `tile`. The row
    // stride is passed again rather than kept: read from the kernel's parameters it costs no register.
    __device__ __forceinline__ void load(u32 tile, int rows_valid, i64 stride) {
        if constexpr (FIXED) {
            const u16 *p = src;
            const i64 step = RPS * stride;
#pragma unroll
            for (int i = 0; i < (ROWS + RPS - 1) / RPS; i++, p += step) {
                const int r = row + i * RPS;
                if (ROWS % RPS == 0 || r < ROWS)
                    fg_cp_async16(tile + dst + (u32)(i * RPS * FG_SW * 16), p, r < rows_valid && col_ok);
            }
        } else {
#pragma unroll 1
            for (int i = tid; i < ROWS * FG_CHUNKS; i += THREADS) {
                const int r = i / FG_CHUNKS, c = i % FG_CHUNKS;
                const bool ok = r < rows_valid && c * 8 < FG_HEAD_DIM;
                fg_cp_async16(tile + fg_tile_offset(r, c, ROWS), ok ? src + (i64)r * stride + c * 8 : src, ok);
            }
        }
        src += ROWS * stride;
    }
};
