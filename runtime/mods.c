/* mods.c: the public side of custom score and mask mods (flashgen.h: fg_mod_create and friends) and a call's
 * checks of a mod and its aux arrays (the serving forward's and the packed backward's). A public fg_mod is the traced tree itself (generator/mod.h),
 * registered under its id when created so that the emitter can find it by the id a variant's name carries. */
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

fg_status rt_check_mod(const fg_mod *m, const fg_tensor *aux, int need_data, fg_error *err) {
    const int n = m ? m->n_aux : 0;
    for (int i = 0; i < FG_MOD_AUX_MAX; i++) {
        const fg_tensor *t = &aux[i];
        if (i >= n) {
            if (t->data || t->ndim)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux[%d] is set, but %s; leave it unset", i,
                               m ? "the mod declares fewer aux arrays" : "the call has no mod");
            continue;
        }
        const mod_aux *x = &m->aux[i];
        const fg_dtype want = x->is_int ? FG_DTYPE_I32 : FG_DTYPE_F32;
        if (t->dtype != want || t->ndim != x->rank)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux[%d] (%s) must be %s of rank %d, as the mod declares it "
                           "(got %s of rank %d)", i, x->name, x->is_int ? "i32" : "f32", x->rank,
                           dtype_name(t->dtype), t->ndim);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 1 || t->shape[d] > INT32_MAX)
                return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux[%d] (%s) has extent %lld in dim %d; each must be "
                               "1 to %d", i, x->name, (long long)t->shape[d], d, INT32_MAX);
        const int64_t inner = t->ndim == 2 ? t->shape[1] : 1;
        if (t->stride[t->ndim - 1] != 1 || (t->ndim == 2 && t->stride[0] != inner))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux[%d] (%s) must be contiguous (row-major)", i, x->name);
        if (need_data && (!t->data || (uintptr_t)t->data % 4 != 0))
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_aux[%d] (%s) must be a 4-byte aligned device pointer "
                           "(got %p)", i, x->name, t->data);
    }
    return FG_OK;
}

void rt_mod_aux(const fg_mod *m, const fg_tensor *aux, fg_mod_aux *out) {
    memset(out, 0, sizeof *out);
    const int n = m ? m->n_aux : 0;
    for (int i = 0; i < n; i++) {
        out->ptr[i] = aux[i].data;
        out->extent[i][0] = (int)aux[i].shape[0];
        out->extent[i][1] = aux[i].ndim == 2 ? (int)aux[i].shape[1] : 1;
    }
}
