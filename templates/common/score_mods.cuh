// score_mods.cuh: the model variants of a forward's scores, shared by the serving kernel and the sm_90a forward:
// a sliding window (FG_WINDOW), a logit softcap (FG_SOFTCAP), ALiBi biases (FG_ALIBI) and attention sinks
// (FG_SINKS). Each is a compile-time key of its own (the spec's window, softcap, alibi, sinks), so a variant
// without them compiles to the code it had before they existed.
//
// Scores stay in raw units (s = q.k) up to the softmax, which multiplies by scale * log2(e). The logit the
// softmax sees is scale * s, then with a softcap cap * tanh(scale * s / cap), then with ALiBi minus
// slope_h * |d - j| (d = i + sk - sq, query i's bottom-right aligned diagonal; j the key). In raw units:
//   s' = (cap / scale) * tanh(s * (scale / cap)) - (slope_h / scale) * |d - j|
// so the softmax, the LSE and the row maximum are unchanged. Sinks are a logit per query head that joins each
// row's denominator and weights no value: folded into a finished row's sum (fg_sink_fold).
#ifndef FG_COMMON_SCORE_MODS_CUH
#define FG_COMMON_SCORE_MODS_CUH

#include "common/types.cuh"
#include "common/fast_math.cuh"

#ifndef FG_WINDOW
#define FG_WINDOW 0
#endif
#ifndef FG_SINKS
#define FG_SINKS 0
#endif
#ifndef FG_SOFTCAP
#define FG_SOFTCAP 0
#endif
#ifndef FG_ALIBI
#define FG_ALIBI 0
#endif

#ifndef FG_USER_SCORE // a custom mod's functions (generator/mod_emit.c defines these to 1 where it emits them)
#define FG_USER_SCORE 0
#endif
#ifndef FG_USER_MASK
#define FG_USER_MASK 0
#endif
#ifndef FG_USER_AUX_GRAD // the backward adds into trainable aux arrays' gradients (fg_user_aux_grad)
#define FG_USER_AUX_GRAD 0
#endif
constexpr bool FG_SCORE_MODS = FG_SOFTCAP || FG_ALIBI; // a transform on every score, not only masked blocks
#define FG_MODS (FG_WINDOW || FG_SINKS || FG_SOFTCAP || FG_ALIBI) // any model variant (for #if)
#define FG_USER_MODS (FG_USER_SCORE || FG_USER_MASK)                // a custom mod (generator/mod.h)
#define FG_BWD_MODS (FG_MODS || FG_USER_MODS) // the backward's transforms and masks of S (backward_common.cuh)
#ifndef FG_USER_MASK_MAP // the mask reads aux arrays: calls may pass its block map (fg_mod_aux.map)
#define FG_USER_MASK_MAP 0
#endif

#if FG_USER_MASK
// Shrinks the blocks [lo, hi) by the runs at either end that hidden(a, b) finds hidden whole (blocks a..b, inclusive),
// testing spans that halve from the whole: a few tests where one a block took up to hi - lo (a mask's verdict on a
// span is sound for each of its blocks; on a long span it may settle less, and the halving goes on from there).
template <class F>
__device__ __forceinline__ void fg_trim_hidden(int &lo, int &hi, F hidden) {
    for (int step = hi - lo; step > 0 && lo < hi;) {
        const int s = min(step, hi - lo);
        if (hidden(hi - s, hi - 1)) hi -= s;
        else step >>= 1;
    }
    for (int step = hi - lo; step > 0 && lo < hi;) {
        const int s = min(step, hi - lo);
        if (hidden(lo, lo + s - 1)) lo += s;
        else step >>= 1;
    }
}

// Narrows the blocks [lo, hi) of `width` positions a block to the span the block map gives for the map's lines
// line_lo..line_hi (row blocks with spans = aux.span_rows, or key blocks with aux.span_cols, of which a sequence has
// `lines`; of sequence b and query head h): their first to their last block not hidden, in FG_MAP_BLOCK units. True
// for a mask that reads aux arrays, whose blocks the map alone settles (without one it trims nothing); false for
// the caller to trim by intervals.
__device__ __forceinline__ bool fg_map_trim(const fg_mod_aux &aux, const int *spans, int lines, int b, int h, int line_lo,
                                            int line_hi, int width, int &lo, int &hi) {
#if FG_USER_MASK_MAP
    if (!aux.map) return true;
    const int2 *f = (const int2 *)spans + ((long long)b * aux.map_heads + (aux.map_heads > 1 ? h : 0)) * lines;
    int a = 0x7fffffff, z = 0x7fffffff; // the first block, and INT_MAX - 1 - the last
#pragma unroll 1
    for (int l = line_lo; l <= line_hi; l++) {
        const int2 s = __ldg(f + l);
        a = min(a, s.x), z = min(z, s.y);
    }
    z = min(0x7ffffffe - z, 1 << 24); // (a map that settles nothing says INT_MAX - 1: held where the products fit)
    if (z < 0) { // hidden from every line
        hi = lo;
        return true;
    }
    lo = max(lo, a * FG_MAP_BLOCK / width);
    hi = max(lo, min(hi, (z * FG_MAP_BLOCK + FG_MAP_BLOCK + width - 1) / width));
    return true;
#else
    return false;
#endif
}

// A custom mask's verdict (FG_IV_HIDDEN, FG_IV_KEPT, FG_IV_MIXED) on query rows r_lo..r_hi (within the sequence's
// sq) of sequence b and query head h against keys k_lo..k_hi (within its sk): by intervals (fg_user_mask_block,
// queries at row + sk - sq as the mod sees them), or for a mask that reads aux arrays from the call's block map
// (the entries covering the rows and keys agree, or mixed; mixed without a map: intervals settle little of such
// a mask, and their fp64 code in the producer's 32 registers spilled).
__device__ __forceinline__ int fg_mask_verdict_rows(const fg_mod_aux &aux, int b, int h, int r_lo, int r_hi, int k_lo,
                                                    int k_hi, int sq, int sk) {
#if FG_USER_MASK_MAP
    if (!aux.map) return FG_IV_MIXED;
    const unsigned char *m = aux.map + ((long long)b * aux.map_heads + (aux.map_heads > 1 ? h : 0)) * aux.map_rows * aux.map_cols;
    int seen = 0;
#pragma unroll 1
    for (int rb = r_lo / FG_MAP_BLOCK; rb <= r_hi / FG_MAP_BLOCK; rb++)
#pragma unroll 1
        for (int cb = k_lo / FG_MAP_BLOCK; cb <= k_hi / FG_MAP_BLOCK; cb++) seen |= 1 << (__ldg(m + rb * aux.map_cols + cb) & 3); // (3: not a verdict, mixed)
    return seen == 1 << FG_IV_HIDDEN ? FG_IV_HIDDEN : seen == 1 << FG_IV_KEPT ? FG_IV_KEPT : FG_IV_MIXED;
#else
    return fg_user_mask_block(b, h, h, r_lo + sk - sq, r_hi + sk - sq, k_lo, k_hi);
#endif
}
#endif

// The per-call constants of the transforms, in raw score units (the host passes softcap and the slopes in
// logit units; fg_mods_make divides by the scale).
struct fg_score_mods {
    float cap_in;   // FG_SOFTCAP: scale / cap
    float cap_out;  // FG_SOFTCAP: cap / scale
    float cap_exp;  // FG_SOFTCAP: -2 log2(e) scale / cap, the exponent of e^(-2 |s| scale / cap) a unit of |s|
    float slope;    // FG_ALIBI: slope_h / scale (>= 0 gives a bias that falls with distance)
};

__device__ __forceinline__ fg_score_mods fg_mods_make(float softcap, const float *alibi_slopes, int head, float scale) {
    fg_score_mods m;
    m.cap_in = FG_SOFTCAP ? scale / softcap : 0.f;
    m.cap_out = FG_SOFTCAP ? softcap / scale : 0.f;
    m.cap_exp = FG_SOFTCAP ? -2.8853900817779268f * (scale / softcap) : 0.f;
    m.slope = FG_ALIBI ? __ldg(alibi_slopes + head) / scale : 0.f;
    return m;
}

// One raw score s of a row whose diagonal is `dist` keys right of this key (d - j, as a float: exact below 2^24).
__device__ __forceinline__ float fg_score_mod(const fg_score_mods &m, float s, float dist) {
    // (cap_out tanh(cap_in s) = cap_out (2 r - 1), r = 1 / (1 + e^(-2 cap_in |s|)), the sign put back: one FMA)
    if constexpr (FG_SOFTCAP) s = copysignf(fmaf(2.f * m.cap_out, fg_rcp_1p_exp2(fabsf(s) * m.cap_exp), -m.cap_out), s);
    if constexpr (FG_ALIBI) s = fmaf(-m.slope, fabsf(dist), s);
    return s;
}

// The keys row r of a sequence (sq queries, sk keys) sees: [key_lo, key_hi). Causal: up to its diagonal
// d = r + sk - sq, or with top_left (FG_WINDOW variants only: the host sends top-left causal calls to them) up to
// key r; FG_WINDOW: from d - left to d + right (a side of -1 unbounded; the window stays around d).
struct fg_key_span {
    int lo, hi;
};
__device__ __forceinline__ fg_key_span fg_row_keys(int r, int sq, int sk, int left, int right, int top_left) {
    const int d = r + sk - sq;
    fg_key_span s{0, FG_CAUSAL ? min(sk, (FG_WINDOW && top_left ? r : d) + 1) : sk};
    if (FG_WINDOW && right >= 0) s.hi = min(s.hi, d + right + 1);
    if (FG_WINDOW && left >= 0) s.lo = max(0, d - left);
    return s;
}

// The key blocks of a tile of query rows [r_first, r_last] (FG_BLOCK_N keys a block): blocks first ..
// first + count - 1 hold every key a row sees; of them the first `lo_masked` and the last `hi_masked` need the
// mask (a row sees only part of them), the others none. Without a window lo_masked is 0 and first 0.
struct fg_block_span {
    int first, count, lo_masked, hi_masked;
};
__device__ __forceinline__ fg_block_span fg_tile_blocks(int r_first, int r_last, int sq, int sk, int left, int right,
                                                      int top_left) {
    const fg_key_span a = fg_row_keys(r_first, sq, sk, left, right, top_left);
    const fg_key_span z = fg_row_keys(r_last, sq, sk, left, right, top_left);
    fg_block_span b;
    const int end = z.hi > a.lo ? (z.hi + FG_BLOCK_N - 1) / FG_BLOCK_N : 0; // one past the last block
    b.first = min(a.lo / FG_BLOCK_N, end);
    b.count = end - b.first;
    // blocks wholly seen by every row: from the last row's left edge to the first row's right edge
    const int u_lo = min(max(b.first, (z.lo + FG_BLOCK_N - 1) / FG_BLOCK_N), end);
    const int u_hi = max(u_lo, min(end, max(0, a.hi) / FG_BLOCK_N));
    b.lo_masked = u_lo - b.first;
    b.hi_masked = end - u_hi;
    return b;
}

// A finished row with sinks: from its running max m (raw units), its sum l (of exp2(c s - c m), c =
// scale_log2) and the sink's logit, the factor its unnormalized O takes (in place of 1 / l) and its LSE. The
// sink joins as one more key of weight e^sink without a value: with M = max(c m, sink log2 e),
// l' = l 2^(c m - M) + 2^(sink log2 e - M), O = O_acc 2^(c m - M) / l', LSE = M ln 2 + ln l'. A row that saw
// no key (l = 0) gives O = 0 and LSE = sink; a sink of -inf changes nothing.
__device__ __forceinline__ void fg_sink_fold(float l, float m, float scale_log2, float sink, float &o_scale, float &lse) {
    if (l != l) { // a NaN input reached the row: it stays in O and the LSE
        o_scale = lse = l;
        return;
    }
    const float sm = sink * 1.4426950408889634f;
    const float mm = l > 0.f && m != FG_NEG_INF ? m * scale_log2 : FG_NEG_INF;
    const float M = fmaxf(mm, sm);
    if (M == FG_NEG_INF) { // no key and no sink
        o_scale = 0.f;
        lse = FG_NEG_INF;
        return;
    }
    const float keep = mm == FG_NEG_INF ? 0.f : fg_exp2(mm - M);
    const float total = l * keep + fg_exp2(sm - M);
    o_scale = keep / total;
    lse = (M + fg_log2(total)) * 0.69314718055994531f;
}

#endif // FG_COMMON_SCORE_MODS_CUH
