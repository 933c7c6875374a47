/* mask_map.c: a custom mask's block map. A mask that reads aux arrays (document ids, a block-sparse layout) has
 * blocks intervals cannot settle; per call, fg_mask_map_kernel (templates/mod_classify.cuh, in the variant's own
 * module) writes the verdict of every 64 x 64 block of each sequence into the call's workspace, and the attention
 * kernel skips the blocks it hides and evaluates no mask in those it keeps whole. */
#include <string.h>
#include "generator/mod.h"
#include "runtime/dispatch.h"

static int map_heads(const fg_mod *m, int heads) { return mod_mask_reads_head(m) ? heads : 1; }

size_t rt_mask_map_bytes(const fg_mod *m, int batch, int heads, long long rows, long long keys) {
    if (!m || !mod_mask_reads_aux(m) || batch <= 0 || rows <= 0 || keys <= 0) return 0;
    const size_t n = (size_t)batch * (size_t)map_heads(m, heads) * (size_t)((rows + FG_MAP_BLOCK - 1) / FG_MAP_BLOCK) *
                     (size_t)((keys + FG_MAP_BLOCK - 1) / FG_MAP_BLOCK);
    return (n + 255) / 256 * 256;
}

fg_status rt_mask_map_fill(fg_context *ctx, const fg_mod *m, CUfunction fn_map, void *mem, int batch, int heads,
                           long long rows, long long keys, const int *cu_q, const int *cu_k, const int *used_k,
                           int total_q, int total_k, fg_mod_aux *aux, void *stream, fg_error *err) {
    if (!fn_map || !mem || rt_mask_map_bytes(m, batch, heads, rows, keys) == 0) return FG_OK;
    fg_mask_map_params p;
    memset(&p, 0, sizeof p);
    aux->map = (const unsigned char *)mem;
    aux->map_heads = map_heads(m, heads);
    aux->map_rows = (int)((rows + FG_MAP_BLOCK - 1) / FG_MAP_BLOCK);
    aux->map_cols = (int)((keys + FG_MAP_BLOCK - 1) / FG_MAP_BLOCK);
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
