/* mods.c: the public side of custom score and mask mods (flashgen.h: fg_mod_create and friends, fg_mask_map_size);
 * a call's checks of a mod and its aux arrays are serving_args.c's (rt_check_mod). A public fg_mod is the traced
 * tree itself (generator/mod.h), registered under its id when created so that the emitter can find it by the id a
 * variant's name carries. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "generator/mod.h"
#include "runtime/dispatch.h"

_Static_assert(FG_MOD_AUX_MAX == MOD_MAX_AUX, "the public aux count is the tree's");

/* A created mod: the tree first (so an fg_mod * is its tree), then its id. */
typedef struct mod_handle {
    fg_mod tree;
    char id[MOD_ID_LEN + 1];
} mod_handle;

fg_status fg_mod_create(const char *text, size_t len, const char *name, fg_mod **mod) {
    fg_error err;
    fg_error_clear(&err);
    if (mod) *mod = NULL;
    if (!mod || !text)
        return rt_set_error_without_context(
            (fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_mod_create: %s is NULL", mod ? "text" : "mod"), &err));
    mod_handle *h = fg_calloc(1, sizeof *h);
    if (!h) return rt_set_error_without_context((fg_fail(&err, FG_ERR_NO_MEMORY, "out of memory for a mod"), &err));
    fg_status st = mod_trace(name && name[0] ? name : "mod", text, len, &h->tree, &err);
    if (st == FG_OK) st = mod_register(&h->tree, h->id, &err);
    if (st != FG_OK) {
        free(h);
        return rt_set_error_without_context(&err);
    }
    *mod = &h->tree;
    return FG_OK;
}

void fg_mod_destroy(fg_mod *mod) { free(mod); } /* the tree is the handle's first member */

const char *fg_mod_id(const fg_mod *mod) { return mod ? ((const mod_handle *)mod)->id : ""; }

int fg_mod_aux_count(const fg_mod *mod) { return mod ? mod->n_aux : 0; }

fg_status fg_mod_aux_info(const fg_mod *mod, int i, const char **name, fg_dtype *dtype, int *rank) {
    fg_error err;
    if (!mod || i < 0 || i >= mod->n_aux)
        return rt_set_error_without_context((fg_fail(&err, FG_ERR_INVALID_ARGUMENT,
                                                     "fg_mod_aux_info: %s", !mod ? "mod is NULL"
                                                                                  : "i is not one of the mod's aux arrays"),
                                             &err));
    if (name) *name = mod->aux[i].name;
    if (dtype) *dtype = mod->aux[i].is_int ? FG_DTYPE_I32 : FG_DTYPE_F32;
    if (rank) *rank = mod->aux[i].rank;
    return FG_OK;
}

int fg_mod_aux_trainable(const fg_mod *mod, int i) {
    return !mod || i < 0 || i >= mod->n_aux ? -1 : mod->aux[i].trainable;
}

fg_status fg_mask_map_size(const fg_mod *mod, int batch, int heads_q, int max_seqlen_q, int max_seqlen_k, size_t *bytes) {
    fg_error err;
    if (!bytes || batch < 0 || heads_q < 0 || max_seqlen_q < 0 || max_seqlen_k < 0) {
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_mask_map_size: %s", !bytes ? "bytes is NULL"
                : "batch, heads_q, max_seqlen_q and max_seqlen_k must be >= 0");
        return rt_set_error_without_context(&err);
    }
    *bytes = rt_mask_map_bytes(mod, batch, heads_q, max_seqlen_q, max_seqlen_k);
    if (*bytes == SIZE_MAX) {
        *bytes = 0;
        fg_fail(&err, FG_ERR_INVALID_ARGUMENT, "fg_mask_map_size: the block map of %d sequences x %d heads of %d x %d "
                "does not fit in size_t", batch, heads_q, max_seqlen_q, max_seqlen_k);
        return rt_set_error_without_context(&err);
    }
    return FG_OK;
}
