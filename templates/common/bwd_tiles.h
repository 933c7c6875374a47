/* bwd_tiles.h: the mma.sync backward's warp tilings that depend on the tile (backward_mma.cuh's FG_DQ_M16_TILES and
 * FG_P2_DIM_PARTS), in plain C: the backward kernels include it, and generator/validate.c includes
 * it, so that its tile rules and register estimate read the same layout the kernel compiles. */
#ifndef FG_BWD_TILES_H
#define FG_BWD_TILES_H

#ifdef __CUDACC__
#define FG_TILES_FN __host__ __device__ constexpr
#else
#define FG_TILES_FN static inline
#endif

/* Eight keys a warp (block_n = 8 x warps, above head_dim 128) at head_dim a multiple of 64: FlashAttention-2's
 * layouts there, the same registers with fewer ldmatrix per MMA. */
FG_TILES_FN int fg_bwd_eight_keys_64(int block_n, int warps, int head_dim) {
    return block_n == 8 * warps && head_dim % 64 == 0;
}

/* m16 tiles of a dQ warp tile (phase 3): 2 (32 query rows x a slice half as wide) with eight keys a warp at
 * multiples of 64 when block_m allows, else 1 (16 rows). */
FG_TILES_FN int fg_bwd_qm(int block_m, int block_n, int warps, int head_dim) {
    return fg_bwd_eight_keys_64(block_n, warps, head_dim) && block_m % 32 == 0 ? 2 : 1;
}

/* Head-dim parts of the dV/dK warp tiles (phase 2), the same count for dK's head_dim and dV's head_dim_v (both
 * padded; a warp owns one part of each): quarters with eight keys a warp where both are multiples of 64 (32 keys a
 * warp tile), halves where both are multiples of 32, else all of them (16 keys a warp tile). */
FG_TILES_FN int fg_bwd_p2_parts(int block_n, int warps, int head_dim, int head_dim_v) {
    return fg_bwd_eight_keys_64(block_n, warps, head_dim) && head_dim_v % 64 == 0 && warps % 4 == 0 ? 4
           : head_dim % 32 == 0 && head_dim_v % 32 == 0                                              ? 2
                                                                                                      : 1;
}

#endif
