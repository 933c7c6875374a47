/* mask_map.c: a custom mask's block map. A mask that reads aux arrays (document ids, a block-sparse layout) has
 * blocks intervals cannot settle; per call, fg_mask_map_kernel (templates/mod_classify.cuh, in the variant's own
 * module) writes the verdict of every 64 x 64 block of each sequence into the call's workspace, with each row
 * block's and key block's span of blocks not hidden, and the attention kernels trim their tiles to the spans,
 * skip the blocks the map hides and evaluate no mask in those it keeps whole. */
#include <stdint.h>
#include <string.h>
#include "generator/mod.h"
#include "runtime/dispatch.h"

static int map_heads(const fg_mod *m, int heads) { return mod_mask_reads_head(m) ? heads : 1; }

/* The map's layout in the workspace: its bytes, then the spans (fg_params.h), each 256-byte aligned. */
typedef struct map_layout {
    size_t n_rows, n_cols; /* row blocks and key blocks of every sequence (and head) */
    size_t bytes, spans;   /* the map's bytes; the spans' offset: the rows' [n_rows][2], then the keys' [n_cols][2] */
    size_t total;
} map_layout;

/* The layout of mod m's map for the call's shapes into *L: 1, or 0 when the call has none (the mask reads no aux
 * array), or -1 when its bytes do not fit in size_t (rt_check_mod refuses such a call). */
static int layout(const fg_mod *m, int batch, int heads, long long rows, long long keys, map_layout *L) {
    memset(L, 0, sizeof *L);
    if (!m || !mod_mask_reads_aux(m) || batch <= 0 || rows <= 0 || keys <= 0) return 0;
    const size_t seqs = (size_t)batch * (size_t)map_heads(m, heads); /* both below 2^31: no overflow */
    const size_t row_blocks = (size_t)((rows + FG_MAP_BLOCK - 1) / FG_MAP_BLOCK);
    const size_t col_blocks = (size_t)((keys + FG_MAP_BLOCK - 1) / FG_MAP_BLOCK);
    size_t span_bytes;
    if (__builtin_mul_overflow(seqs, row_blocks, &L->n_rows) || __builtin_mul_overflow(seqs, col_blocks, &L->n_cols) ||
        __builtin_mul_overflow(row_blocks, L->n_cols, &L->bytes) || __builtin_add_overflow(L->bytes, 255, &L->spans) ||
        __builtin_add_overflow(L->n_rows, L->n_cols, &span_bytes) ||
        __builtin_mul_overflow(span_bytes, 2 * sizeof(int), &span_bytes) ||
        __builtin_add_overflow(span_bytes, 255, &span_bytes))
        return -1;
    L->spans = L->spans / 256 * 256;
    if (__builtin_add_overflow(L->spans, span_bytes / 256 * 256, &L->total)) return -1;
    return 1;
}

size_t rt_mask_map_bytes(const fg_mod *m, int batch, int heads, long long rows, long long keys) {
    map_layout L;
    const int has = layout(m, batch, heads, rows, keys, &L);
    return has < 0 ? SIZE_MAX : has ? L.total : 0;
}

/* aux pointed at the map at mem laid out as L */
static void bind(const fg_mod *m, void *mem, int heads, long long rows, long long keys, const map_layout *L,
                 fg_mod_aux *aux) {
    aux->map = (const unsigned char *)mem;
    int *const spans = (int *)((char *)mem + L->spans);
    aux->span_rows = spans;
    aux->span_cols = spans + 2 * L->n_rows;
    aux->map_heads = map_heads(m, heads);
    aux->map_rows = (int)((rows + FG_MAP_BLOCK - 1) / FG_MAP_BLOCK);
    aux->map_cols = (int)((keys + FG_MAP_BLOCK - 1) / FG_MAP_BLOCK);
}

void rt_mask_map_bind(const fg_mod *m, void *mem, int batch, int heads, long long rows, long long keys,
                      fg_mod_aux *aux) {
    map_layout L;
    if (mem && layout(m, batch, heads, rows, keys, &L) > 0) bind(m, mem, heads, rows, keys, &L, aux);
}

fg_status rt_mask_map_settle_nothing(fg_context *ctx, const fg_mod *m, void *mem, int batch, int heads,
                                     long long rows, long long keys, void *stream, fg_error *err) {
    map_layout L;
    if (!mem || layout(m, batch, heads, rows, keys, &L) <= 0) return FG_OK;
    /* the map's bytes FG_IV_MIXED (2; up to the spans' 256-byte boundary), the spans' ints 0: first block 0, and
       INT_MAX - 1 - last = 0, a last block past any (fg_map_trim bounds it) */
    FG_CU(err, ctx->cu->cuMemsetD32Async((CUdeviceptr)(uintptr_t)mem, 0x02020202u, L.spans / 4, (CUstream)stream));
    FG_CU(err, ctx->cu->cuMemsetD32Async((CUdeviceptr)(uintptr_t)mem + L.spans, 0u, 2 * (L.n_rows + L.n_cols),
                                         (CUstream)stream));
    return FG_OK;
}

fg_status rt_check_mask_map(const void *map, size_t size, int ready, size_t need, fg_error *err) {
    if (ready != 0 && ready != 1)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mask_map_ready is %d; it must be 0 (the call fills mask_map) or 1 "
                       "(an earlier call of the same mod, aux arrays and lengths filled it)", ready);
    if (!map) {
        if (ready || size)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mask_map is NULL but mask_map_%s is set; give the buffer "
                           "(fg_mask_map_size bytes) or leave both unset", ready ? "ready" : "size");
        return FG_OK;
    }
    if (need == 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mask_map is set, but the call has no mask that reads aux arrays "
                       "(the only masks with a block map); leave it NULL");
    if ((uintptr_t)map % 256 != 0)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mask_map (%p) is not 256-byte aligned", map);
    if (size < need)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mask_map_size is %zu bytes; the block map of this call needs %zu "
                       "(fg_mask_map_size)", size, need);
    return FG_OK;
}

fg_status rt_mask_map_fill(fg_context *ctx, const fg_mod *m, CUfunction fn_map, void *mem, int batch, int heads,
                           long long rows, long long keys, const int *cu_q, const int *cu_k, const int *used_k,
                           int total_q, int total_k, fg_mod_aux *aux, void *stream, fg_error *err) {
    map_layout L;
    if (!fn_map || !mem || layout(m, batch, heads, rows, keys, &L) <= 0) return FG_OK;
    fg_mask_map_params p;
    memset(&p, 0, sizeof p);
    bind(m, mem, heads, rows, keys, &L, aux);
    int *const spans = (int *)aux->span_rows;
    /* the spans start empty, every int INT_MAX (the map kernel narrows them by atomicMin) */
    FG_CU(err, ctx->cu->cuMemsetD32Async((CUdeviceptr)(uintptr_t)spans, 0x7fffffffu, 2 * (L.n_rows + L.n_cols),
                                         (CUstream)stream));
    p.aux = *aux;
    p.cu_seqlens_q = cu_q, p.cu_seqlens_k = cu_k, p.seqused_k = used_k;
    p.seqlen_q = (int)rows, p.seqlen_k = (int)keys;
    p.total_q = total_q, p.total_k = total_k;
    launch_item item;
    memset(&item, 0, sizeof item);
    item.fn = fn_map;
    item.grid[0] = (unsigned)((aux->map_cols + 3) / 4), item.grid[1] = (unsigned)aux->map_rows;
    item.grid[2] = (unsigned)(batch * aux->map_heads);
    item.threads = 128;
    item.kernel = "fg_mask_map_kernel";
    void *params[] = {&p};
    return launch_items(ctx, &item, 1, stream, params, err);
}
