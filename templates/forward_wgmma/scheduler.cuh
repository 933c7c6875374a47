// forward_wgmma/scheduler.cuh: the tile scheduler of the sm_90a forward: which tile (query block, head,
// batch, key blocks) an index names, in the order the producer and the consumers both walk.
#ifndef FG_FORWARD_WGMMA_SCHEDULER_CUH
#define FG_FORWARD_WGMMA_SCHEDULER_CUH

#include "common/fg_params.h"
#include "common/softmax.cuh"
#include "common/score_mods.cuh"
#include "forward_wgmma/layout.cuh"

// One tile: query block m_block of (head, batch), with the key blocks it needs (n_blocks, visited last to
// first) of which the first n_blocks - n_unmasked need the mask. Producer and consumers derive the same
// tiles, in the same order, from the tile index alone.
// FG_VARLEN: also the sequence's queries (sq) and keys (sk), and where its first query and key lie in the
// tensors' row dimension (q_start, k_start: the packed offsets, or 0 in a batch's own rows).
// FG_WINDOW: the key blocks start at b_first (not 0), and the last lo_masked visited (the window's left edge)
// need the mask too. FG_USER_MASK: the same, for the blocks a custom mask hides at either end (fg_mask_trim).
// FG_USER_MASK_MAP with the call's block map: the tile's blocks are those of [b_first, b_hi) the map does not hide
// from every row of the tile, n_blocks of them (holes inside skipped: a block-sparse layout costs its kept blocks),
// walked by fg_block_walk; the built-in mask applies to the top n_masked and bottom lo_masked of [b_first, b_hi).
#define FG_BLOCK_SPAN (FG_WINDOW || FG_USER_MASK)
struct fg_tile {
    int m0, head, batch, kv_head, n_blocks, n_masked;
#if FG_VARLEN
    int sq, sk, q_start, k_start;
#endif
#if FG_BLOCK_SPAN
    int b_first, lo_masked;
#endif
#if FG_USER_MASK_MAP
    int b_hi; // one past the top block; n_blocks < b_hi - b_first where the map hides blocks inside
#endif
};

// The key block of step i of tile t (blocks are visited last to first).
__device__ __forceinline__ int fg_tile_block(const fg_tile &t, int i) {
#if FG_BLOCK_SPAN
    return t.b_first + t.n_blocks - 1 - i;
#else
    return t.n_blocks - 1 - i;
#endif
}

// Whether step i of tile t needs the mask: the blocks crossing the diagonal or the end of the keys (visited
// first), and with a window those crossing its left edge (visited last).
__device__ __forceinline__ bool fg_step_masked(const fg_tile &t, int i) {
#if FG_BLOCK_SPAN
    return i < t.n_masked || i >= t.n_blocks - t.lo_masked;
#else
    return i < t.n_masked;
#endif
}

// Whether block j, step i, of tile t needs the built-in mask (fg_step_masked, by the block where holes are skipped).
__device__ __forceinline__ bool fg_block_masked(const fg_tile &t, int i, int j) {
#if FG_USER_MASK_MAP
    return j >= t.b_hi - t.n_masked || j < t.b_first + t.lo_masked;
#else
    return fg_step_masked(t, i);
#endif
}

#if FG_USER_MASK
// A custom mask's verdict (fg_mask_verdict_rows) on query rows r_lo..r_hi of a sequence of sq queries and sk keys
// against key blocks j_lo..j_hi.
__device__ __forceinline__ int fg_mask_verdict(const fg_mod_aux &aux, int batch, int head, int r_lo, int r_hi, int sq,
                                               int sk, int j_lo, int j_hi) {
    return fg_mask_verdict_rows(aux, batch, head, r_lo, min(r_hi, sq - 1), j_lo * FG_BLOCK_N,
                                min(j_hi * FG_BLOCK_N + FG_BLOCK_N, sk) - 1, sq, sk);
}

#if FG_USER_MASK_MAP
// Whether the block map hides key block j from every row of tile t (of a sequence of sq queries): every map entry
// its rows and keys cover says hidden. False without a map.
__device__ __forceinline__ bool fg_map_hides(const fg_mod_aux &aux, const fg_tile &t, int sq, int j) {
    if (!aux.map) return false;
    const unsigned char *m = aux.map + ((long long)t.batch * aux.map_heads + (aux.map_heads > 1 ? t.head : 0)) *
                                           aux.map_rows * aux.map_cols;
    const int c_hi = min((j * FG_BLOCK_N + FG_BLOCK_N - 1) / FG_MAP_BLOCK, aux.map_cols - 1);
#pragma unroll 1
    for (int rb = t.m0 / FG_MAP_BLOCK; rb <= (min(t.m0 + FG_BLOCK_M, sq) - 1) / FG_MAP_BLOCK; rb++)
#pragma unroll 1
        for (int cb = j * FG_BLOCK_N / FG_MAP_BLOCK; cb <= c_hi; cb++)
            if (__ldg(m + rb * aux.map_cols + cb) != FG_IV_HIDDEN) return false;
    return true;
}

// The walk over a tile's blocks, top to bottom, skipping those the map hides: at(i) moves it to step i's block (block),
// for i that never decreases between calls (the producer and the consumers step it once a step).
struct fg_block_walk {
    int step, block;
    __device__ __forceinline__ fg_block_walk(const fg_tile &t) : step(-1), block(t.b_hi) {}
    __device__ __forceinline__ int at(const fg_mod_aux &aux, const fg_tile &t, int i) {
        for (; step < i; step++) {
            block--;
            while (block > t.b_first && fg_map_hides(aux, t, t.sq, block)) block--;
        }
        return block;
    }
};
#endif

// Drops from tile t's key blocks those at either end that the custom mask hides from every row of the tile (no
// row needs them: a tile left without blocks writes O = 0 and LSE = -inf, as a row without keys), keeping which
// of the rest need the built-in mask. Producer and consumers trim alike: the verdict is a function of the tile.
__device__ __forceinline__ void fg_mask_trim(const fg_mod_aux &aux, fg_tile &t, int sq, int sk) {
    if (t.n_blocks == 0) return;
    int lo = t.b_first, hi = t.b_first + t.n_blocks; // [lo, hi)
    // the block map's span of the tile's row blocks, else the interval verdicts on spans that halve
    if (!fg_map_trim(aux, aux.span_rows, aux.map_rows, t.batch, t.head, t.m0 / FG_MAP_BLOCK,
                     (min(t.m0 + FG_BLOCK_M, sq) - 1) / FG_MAP_BLOCK, FG_BLOCK_N, lo, hi))
        fg_trim_hidden(lo, hi, [&](int a, int b) {
            return fg_mask_verdict(aux, t.batch, t.head, t.m0, t.m0 + FG_BLOCK_M - 1, sq, sk, a, b) == FG_IV_HIDDEN;
        });
    // the blocks no built-in mask touches, [u_lo, u_hi), within what is left
    const int u_lo0 = t.b_first + t.lo_masked, u_hi0 = t.b_first + t.n_blocks - t.n_masked;
    const int u_lo = min(max(u_lo0, lo), hi), u_hi = max(u_lo, min(u_hi0, hi));
    t.b_first = lo;
    t.n_blocks = hi - lo;
    t.lo_masked = u_lo - lo;
    t.n_masked = hi - u_hi;
#if FG_USER_MASK_MAP
    t.b_hi = hi;
    if (aux.map)
#pragma unroll 1
        for (int j = lo + 1; j < hi - 1; j++) t.n_blocks -= fg_map_hides(aux, t, sq, j); // (the ends are kept: trimmed)
#endif
}
#endif

#if FG_VARLEN
// Sequence b's rows (fg_fwd_params' varlen fields, fg_seq_span), seqused_k clamped to the keys it has.
__device__ __forceinline__ void fg_varlen_bounds(const fg_fwd_params &p, fg_tile &t) {
    t.q_start = 0, t.sq = p.seqlen_q, t.k_start = 0, t.sk = p.seqlen_k;
    if (p.cu_seqlens_q) fg_seq_span(p.cu_seqlens_q, t.batch, p.total_q, t.q_start, t.sq);
    if (p.cu_seqlens_k) fg_seq_span(p.cu_seqlens_k, t.batch, p.total_k, t.k_start, t.sk);
    if (p.seqused_k) t.sk = min(max(__ldg(p.seqused_k + t.batch), 0), t.sk);
}
#endif

// The TMA coordinates of a tile's rows: the row of its first query and key in the tensor map, and the map's
// batch coordinate (packed tensors are mapped as one batch of total rows).
__device__ __forceinline__ int fg_q_row0(const fg_tile &t) {
#if FG_VARLEN
    return t.q_start + t.m0;
#else
    return t.m0;
#endif
}
__device__ __forceinline__ int fg_k_row0(const fg_tile &t) {
#if FG_VARLEN
    return t.k_start;
#else
    return 0;
#endif
}
__device__ __forceinline__ int fg_q_batch(const fg_fwd_params &p, const fg_tile &t) {
#if FG_VARLEN
    if (p.cu_seqlens_q) return 0;
#endif
    return t.batch;
}
__device__ __forceinline__ int fg_k_batch(const fg_fwd_params &p, const fg_tile &t) {
#if FG_VARLEN
    if (p.cu_seqlens_k) return 0;
#endif
    return t.batch;
}
__device__ __forceinline__ fg_tile fg_tile_at(const fg_fwd_params &p, int index, int m_blocks) {
    fg_tile t;
    // The heaviest causal blocks first (fg_tile_order); non-causal tiles head by head, sharing K/V in L2.
    int m_block, hb;
    fg_tile_order(index, m_blocks, p.heads_q * p.batch, p.causal_group, m_block, hb);
    t.head = hb % p.heads_q;
    t.batch = hb / p.heads_q;
    t.kv_head = t.head / (p.heads_q / p.heads_kv);
    t.m0 = m_block * FG_BLOCK_M;
    int n_unmasked;
#if FG_WINDOW
    // (model variants come with FG_VARLEN: validate.c) the blocks of the window's span of the tile's rows
    fg_varlen_bounds(p, t);
    const fg_block_span span = fg_tile_blocks(t.m0, min(t.m0 + FG_BLOCK_M, t.sq) - 1, t.sq, t.sk, p.window_left,
                                              p.window_right, p.causal_top_left);
    t.b_first = span.first;
    t.n_blocks = t.m0 < t.sq ? span.count : 0;
    t.lo_masked = min(span.lo_masked, t.n_blocks);
    n_unmasked = max(0, t.n_blocks - span.hi_masked - t.lo_masked);
    t.n_masked = t.n_blocks - t.lo_masked - n_unmasked;
#if FG_USER_MASK
    fg_mask_trim(p.mod_aux, t, t.sq, t.sk);
#endif
    return t;
#elif FG_VARLEN
    // query blocks past the sequence's end (the grid covers the longest) have nothing to do
    fg_varlen_bounds(p, t);
    fg_key_blocks(t.m0, t.sq, t.sk, t.n_blocks, n_unmasked);
    if (t.m0 >= t.sq) t.n_blocks = n_unmasked = 0;
#if FG_USER_MASK
    t.b_first = t.lo_masked = 0;
    t.n_masked = t.n_blocks - n_unmasked;
    fg_mask_trim(p.mod_aux, t, t.sq, t.sk);
    return t;
#endif
#else
    fg_key_blocks(t.m0, p.seqlen_q, p.seqlen_k, t.n_blocks, n_unmasked);
#endif
    t.n_masked = t.n_blocks - n_unmasked;
    return t;
}

// The tile count, recomputed at each use from the parameters (an asm the compiler cannot see through):
// kept in a register across both roles it was spilled (d 64, 3 consumer warpgroups at 160 registers).
__device__ __forceinline__ int fg_tile_count(const fg_fwd_params &p, int m_blocks) {
    int mb;
    asm volatile("mov.b32 %0, %1;" : "=r"(mb) : "r"(m_blocks));
    return mb * p.heads_q * p.batch;
}

#endif // FG_FORWARD_WGMMA_SCHEDULER_CUH
