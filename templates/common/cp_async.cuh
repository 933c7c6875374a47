// cp_async.cuh: asynchronous global -> shared copies (sm_80 cp.async), and the swizzled tile layout they
// fill.
//
// Tile layout. A tile is `rows` rows of FG_CHUNKS 16-byte chunks (8 elements each). Rows are split into
// slabs of FG_SLAB_CHUNKS chunks (8, 4 or 2: the largest that divides the row), stored slab after slab, and inside
// a slab the chunk index is XOR-ed with the row, so that the 8 row addresses of one ldmatrix (8
// consecutive rows, same logical chunk) fall in 8 different 16-byte bank groups:
//   SW = 8: a slab row is 128 bytes, physical chunk = c ^ (row % 8);
//   SW = 4: two rows share 128 bytes,    physical chunk = c ^ ((row / 2) % 4);
//   SW = 2: four rows share 128 bytes,   physical chunk = c ^ ((row / 4) % 2).
// No padding is needed, so every head dim that is a multiple of 16 uses its exact size.
#ifndef FG_COMMON_CP_ASYNC_CUH
#define FG_COMMON_CP_ASYNC_CUH

#include "common/types.cuh"

// Tiles of 16-bit elements hold 8 per chunk; FP8 tiles 16 (FG_ELEM_BYTES is the input element's bytes).
constexpr int FG_CHUNK_ELEMS = 16 / FG_ELEM_BYTES;                  // elements per 16-byte chunk of Q, K (and V)
constexpr int FG_CHUNKS = FG_HEAD_DIM_PADDED / FG_CHUNK_ELEMS; // chunks per row of a Q or K tile

// The slab width of a tile whose rows are CH chunks: the largest of 8, 4, 2 that divides CH.
template <int CH>
struct fg_sw {
    static constexpr int value = CH % 8 == 0 ? 8 : (CH % 4 == 0 ? 4 : 2);
};
constexpr int FG_SLAB_CHUNKS = fg_sw<FG_CHUNKS>::value;

// Byte offset of (row, 16-byte chunk) inside a tile of `rows` rows of CH chunks.
template <int CH = FG_CHUNKS>
__device__ __forceinline__ u32 fg_tile_offset(int row, int chunk, int rows) {
    constexpr int SW = fg_sw<CH>::value;
    const int slab = chunk / SW;
    const int c = chunk % SW;
    const int pc = c ^ ((row / (8 / SW)) & (SW - 1));
    return (u32)(((slab * rows + row) * SW + pc) * 16);
}

// 16 bytes global -> shared, of which the first n (0..16) are read and the rest zero-filled.
__device__ __forceinline__ void fg_cp_async16_n(u32 dst, const void *src, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n));
}

// 16 bytes global -> shared, bypassing L1; when !valid nothing is read and the 16 bytes are zero-filled.
__device__ __forceinline__ void fg_cp_async16(u32 dst, const void *src, bool valid) {
    fg_cp_async16_n(dst, src, valid ? 16 : 0);
}

__device__ __forceinline__ void fg_cp_async_commit() { asm volatile("cp.async.commit_group;"); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void fg_cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// The lane-dependent part of an ldmatrix address. ldmatrix reads rows row0 + lane_row (row0 a multiple
// of 8, lane_row in 0..15) at chunk 2*kk + lane_chunk (lane_chunk 0 or 1). Because the swizzle depends
// on the row only through row % 8, the address splits into a per-thread part that depends on kk only
// through kk % (FG_SLAB_CHUNKS / 2), computed once here, plus compile-time constants (fg_frag_addr). Hoisting
// every address of the unrolled loops instead would cost a register each and spill.
template <int CH = FG_CHUNKS>
struct fg_frag_offsets_t {
    static constexpr int SW = fg_sw<CH>::value;
    u32 off[SW / 2]; // byte offsets for kk % (SW / 2) = 0, 1, ...
};
typedef fg_frag_offsets_t<FG_CHUNKS> fg_frag_offsets;

template <int CH = FG_CHUNKS>
__device__ __forceinline__ fg_frag_offsets_t<CH> fg_frag_offsets_make(int lane_row, int lane_chunk) {
    constexpr int SW = fg_sw<CH>::value;
    fg_frag_offsets_t<CH> f;
#pragma unroll
    for (int ph = 0; ph < SW / 2; ph++) {
        const int c = ph * 2 + lane_chunk;
        f.off[ph] = (u32)((lane_row * SW + (c ^ ((lane_row / (8 / SW)) & (SW - 1)))) * 16);
    }
    return f;
}

// fg_frag_offsets_make<CH>(lane_row, lane_chunk) given f, the offsets of the same lanes in a tile of CF-chunk rows:
// f itself (a reference) where the rows are as wide, so that a kernel with tiles of one width keeps one set of
// registers and its code (a copy of f, the same values, still changed ptxas's schedule).
template <int CH, int CF>
__device__ __forceinline__ decltype(auto) fg_frag_offsets_like(const fg_frag_offsets_t<CF> &f, int lane_row, int lane_chunk) {
    if constexpr (CH == CF) return (f);
    else return fg_frag_offsets_make<CH>(lane_row, lane_chunk);
}

// Address of the fragment at rows row0 + lane_row (row0 a compile-time multiple of 8 after unrolling)
// and chunk pair kk, in a tile of ROWS rows (of CH chunks) at `base`.
template <int ROWS, int CH>
__device__ __forceinline__ u32 fg_frag_addr(u32 base, const fg_frag_offsets_t<CH> &f, int row0, int kk) {
    constexpr int SW = fg_sw<CH>::value;
    const int slab = (kk * 2) / SW;
    return base + (u32)((slab * ROWS + row0) * SW * 16) + f.off[kk % (SW / 2)];
}

// One thread's share of streaming ROWS x head_dim tiles of a [rows, head_dim] tensor (rows
// `row_stride` elements apart) into swizzled shared tiles, tile after tile. Rows at or past rows_valid,
// and columns past head_dim, are zero-filled (cp.async with source size 0 reads nothing), so tails never
// read out of bounds and padded columns contribute nothing.
// A thread keeps one chunk column (fg_fixed_step): its shared offset is fixed up to a compile-time XOR and
// its global pointer only advances, so a tile costs one compare and one copy per 16 bytes. (Before,
// the thread counts and chunk counts this did not fit, 4 warps at head_dim 256 and chunk
// counts that do not divide the threads, took a general per-chunk loop with a division per copy: 64 x 64
// on 4 warps at d 256 executed 2.4x the instructions of 128 x 64 on 8 warps, and d 96 / d 192 forwards
// ran 25-29% slower than they do now.)
#ifndef FG_LOADER_RECOMPUTE
#define FG_LOADER_RECOMPUTE 0
#endif

// Rows a thread steps by when it keeps one chunk column of CH-chunk rows: the largest power of two not
// above THREADS / CH (all of it when CH divides the threads, which are a power of two). A power of two
// that is a multiple of 8 repeats the swizzle, and one below 8 leaves a thread's first row (below RPS) and
// the step's rows in separate bits, so the swizzle of row row0 + i * RPS is that of row0 XOR-ed with a
// term of i alone. Only the first RPS * CH threads (LOADERS) copy when CH does not divide the threads
// (head_dim 96: 12 chunks, 128 threads: 8 rows a step, 96 loaders); the others commit empty groups.
template <int CH, int THREADS>
struct fg_fixed_step {
    static constexpr int pow2_floor(int x) { return x >= 2 ? 2 * pow2_floor(x / 2) : x; }
    static constexpr int RPS = pow2_floor(THREADS / CH);
    static constexpr int LOADERS = RPS * CH;
    static_assert(RPS > 0, "a row has more 16-byte chunks than the block has threads");
};

// The byte offset of row row0 + i * RPS, chunk c, in a tile of CH-chunk rows, from dst0, that of (row0, c)
// (fg_fixed_step's case): the swizzled chunk is XOR-ed with the step's part of the row, the row advanced.
template <int CH, int RPS>
__device__ __forceinline__ u32 fg_fixed_step_offset(u32 dst0, int i) {
    constexpr int SW = fg_sw<CH>::value;
    const int t = ((i * RPS) / (8 / SW)) & (SW - 1);
    return (dst0 ^ (u32)(t * 16)) + (u32)(i * RPS * SW * 16);
}

// DIM, DIM_PADDED: the tensor's columns and the tile's (a V or dO tile of a head dim of its own; Q's and K's by
// default).
template <int ROWS, int THREADS, int DIM = FG_HEAD_DIM, int DIM_PADDED = FG_HEAD_DIM_PADDED>
struct fg_tile_loader {
    static constexpr int CH = DIM_PADDED / FG_CHUNK_ELEMS;               // 16-byte chunks of a tile row
    static constexpr int RPS = fg_fixed_step<CH, THREADS>::RPS;         // rows a step
    static constexpr int LOADERS = fg_fixed_step<CH, THREADS>::LOADERS; // threads that copy
    // FG_LOADER_RECOMPUTE (the emitter's choice per variant, generator/emit.c): the thread's place in a
    // tile is recomputed from its index at each tile (fg_tid_now) rather than kept, three registers
    // fewer across the key loop. On NVRTC 13.0 (sm_90) that took the forward tiles whose two m16 tiles a
    // warp fill the accumulator budget (d 128 128 x 48 and 256 x 48) from 12-28 bytes of spills to none
    // and the backward at d 256 from 40 to 24 (causal; without a mask too, keeping the places
    // spills less), but made tiles running key sub-blocks and some others spill more (d 256 128 x 80 8 warps:
    // 0 -> 56), so it is where it helps only. The kernels launch 1-d blocks
    // and pass threadIdx.x as `thread`.
    const fg_in_t *src; // this thread's element in the next tile
    u32 dst;            // kept: this thread's byte offset inside a tile
    int row;            // kept: this thread's first row inside a tile
    bool col_ok;        // kept: this thread's column lies inside head_dim
    int tid;            // the thread's index in the block

    __device__ __forceinline__ void init(const fg_in_t *base, i64 row_stride, int thread) {
        tid = thread;
        const int c = thread % CH;
        row = thread / CH;
        col_ok = DIM == DIM_PADDED || c * FG_CHUNK_ELEMS < DIM; // padded heads only
        dst = fg_tile_offset<CH>(row, c, ROWS);
        src = base + (i64)row * row_stride + c * FG_CHUNK_ELEMS;
    }

    // Copies the next tile, of which the first rows_valid rows exist, into the tile at `tile`. The row
    // stride is passed again rather than kept: read from the kernel's parameters it costs no register.
    __device__ __forceinline__ void load(u32 tile, int rows_valid, i64 stride) {
        int row = this->row;
        bool col_ok = this->col_ok;
        u32 dst = this->dst;
        if constexpr (FG_LOADER_RECOMPUTE) {
            const int thread = fg_tid_now(), c = thread % CH;
            row = thread / CH;
            col_ok = DIM == DIM_PADDED || c * FG_CHUNK_ELEMS < DIM;
            dst = fg_tile_offset<CH>(row, c, ROWS);
        }
        const fg_in_t *p = src;
        const i64 step = RPS * stride;
        if (LOADERS == THREADS || (FG_LOADER_RECOMPUTE ? fg_tid_now() : tid) < LOADERS) {
#pragma unroll
            for (int i = 0; i < (ROWS + RPS - 1) / RPS; i++, p += step) {
                const int r = row + i * RPS;
                if (ROWS % RPS == 0 || r < ROWS)
                    fg_cp_async16(tile + fg_fixed_step_offset<CH, RPS>(dst, i), p, r < rows_valid && col_ok);
            }
        }
        src += ROWS * stride;
    }
};

// FP8 only: one thread's share of streaming V^T tiles. The caller gives V key-major (V^T rows of keys,
// consecutive head-dim rows `row_stride` elements apart, 16-byte aligned), so a tile is FG_HEAD_DIM_PADDED
// rows (head dims) of COLS keys, COLS / 16 chunks per row, swizzled like any tile of that many chunks.
// The PV product's B operand then comes from it by plain ldmatrix, as K's does for QK^T. Keys at or past
// the end are zero-filled byte by byte (cp.async reads only the valid prefix of a chunk), so whatever the
// padding of the caller's rows holds, even NaN, never meets a probability. As in fg_tile_loader, a thread
// keeps one chunk column and one pointer (fg_fixed_step).
template <int COLS, int THREADS>
struct fg_vt_loader {
    // Every row of the tile is a head dim of V: a padded head dim would read past V (validate.c's
    // fp8_head_dim keeps FP8 head dims multiples of 32). COLS makes the check wait for an instantiation.
    static_assert(COLS < 0 || FG_HEAD_DIM == FG_HEAD_DIM_PADDED, "FP8 head_dim must need no padding");
    static constexpr int CH = COLS / 16;
    static constexpr int RPS = fg_fixed_step<CH, THREADS>::RPS;         // rows a step
    static constexpr int LOADERS = fg_fixed_step<CH, THREADS>::LOADERS; // threads that copy
    const fg_in_t *src; // this thread's first byte of the next tile
    u32 dst;            // this thread's byte offset inside a tile
    int col;            // this thread's chunk column
    int row;            // this thread's first row inside a tile
    int tid;            // the thread's index in the block

    __device__ __forceinline__ void init(const fg_in_t *base, i64 row_stride, int thread) {
        tid = thread;
        col = thread % CH;
        row = thread / CH;
        dst = fg_tile_offset<CH>(row, col, FG_HEAD_DIM_PADDED);
        src = base + (i64)row * row_stride + col * 16;
    }

    // Copies the next tile, of which the first keys_valid keys exist, into the tile at `tile`.
    __device__ __forceinline__ void load(u32 tile, int keys_valid, i64 row_stride) {
        int n = keys_valid - col * 16;
        n = n < 0 ? 0 : (n > 16 ? 16 : n);
        const fg_in_t *p = src;
        const i64 step = RPS * row_stride;
        if (LOADERS == THREADS || tid < LOADERS) {
#pragma unroll
            for (int i = 0; i < (FG_HEAD_DIM_PADDED + RPS - 1) / RPS; i++, p += step)
                if (FG_HEAD_DIM_PADDED % RPS == 0 || row + i * RPS < FG_HEAD_DIM_PADDED)
                    fg_cp_async16_n(tile + fg_fixed_step_offset<CH, RPS>(dst, i), p, n);
        }
        src += COLS;
    }
};

#endif // FG_COMMON_CP_ASYNC_CUH
