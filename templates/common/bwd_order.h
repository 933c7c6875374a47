/* bwd_order.h: the order in which the backward's key blocks reach the query blocks and, in the
 * deterministic mode, add into their dQ (backward_mma.cuh: fg_bwd_query_blocks, fg_bwd_turn_rank). Plain C
 * with ints only: the backward kernels include it, and tests/test_call_args.c compiles it on
 * the host to check the orders (every query block's ranks a permutation, each key block's predecessor
 * one that reached the block earlier) and to simulate their waits under in-order dispatch. */
#ifndef FG_BWD_ORDER_H
#define FG_BWD_ORDER_H

#ifdef __CUDACC__
#define FG_ORDER_FN __device__ __forceinline__
#define FG_ORDER_MIN(a, b) min(a, b)
#define FG_ORDER_MAX(a, b) max(a, b)
#else
#define FG_ORDER_FN static inline
#define FG_ORDER_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FG_ORDER_MAX(a, b) ((a) > (b) ? (a) : (b))
#endif

/* The first query block (block_m rows) that sees a key of the key block starting at key n0: 0, or when
 * causal the first with a row at or past that key's diagonal (query i sees keys j <= i + sk - sq). Every
 * key block sees the last query block. */
FG_ORDER_FN int fg_bwd_first_query_block(int n0, int sq, int sk, int block_m, int causal) {
    return causal ? FG_ORDER_MAX(0, n0 - (sk - sq)) / block_m : 0;
}

/* Causal: the rank at query block m of key block j (of nb, block_n keys each) among those that see m,
 * which are the key blocks 0 .. top with top * block_n - (sk - sq) < (m + 1) * block_m: descending, the
 * order in which they reach m (a key block starts at its diagonal, so those above it come first). Only
 * for a key block that sees m (then x > j * block_n >= 0). */
FG_ORDER_FN int fg_bwd_rank_causal(int j, int m, int nb, int block_m, int block_n, int sq, int sk) {
    const int x = (m + 1) * block_m + sk - sq;
    return FG_ORDER_MIN(nb - 1, (x - 1) / block_n) - j;
}

/* Not causal, rotated streams: key block j (of nb) streams the n_m query blocks from j mod n_m on,
 * wrapping, so j = q n_m + r reaches m at step (m - r) mod n_m. The rank at m orders the key blocks by
 * that step, ties (j and j + n_m) ascending: before j come the key blocks whose residue lies in the
 * cyclic range (r, m] (each residue held by nb / n_m key blocks, one more below nb % n_m), then the q of
 * its own residue below it. */
FG_ORDER_FN int fg_bwd_rank_rotated(int j, int m, int nb, int n_m) {
    const int q = j / n_m, r = j % n_m, cq = nb / n_m, cr = nb % n_m;
    const int a = m >= r ? m - r : m - r + n_m;
    return a * cq + FG_ORDER_MIN(m + 1, cr) - FG_ORDER_MIN(r + 1, cr) + (r > m ? cr : 0) + q;
}

#endif
