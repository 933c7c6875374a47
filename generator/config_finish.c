/* config_finish.c: the config loader's work once the chunk has run (config_build.h): the mod files the
 * variants name traced and registered, tiles filled, every variant validated, duplicates dropped. Also the
 * rules for the path of a mod file, checked where the chunk names one (cfg_mod_file_add).
 *
 * A config's text is untrusted, like every chunk the sandbox runs, and the sandbox gives it no file; the mod
 * files it names are the one way its words choose a file this process reads. So a path is relative and never
 * climbs ('..'): the files a config can name are those in its own directory and below it, which ship with it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "generator/config_build.h"
#include "generator/validate.h"

/* Whether path (NUL-terminated) has a ".." component. */
static int cfg_path_climbs(const char *path) {
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') return 1;
        p += n;
        while (*p == '/') p++;
    }
    return 0;
}

int cfg_mod_file_add(cfg_build *b, const char *path, size_t len, int line, char *why, size_t n) {
    if (len == 0) {
        snprintf(why, n, "the path is empty: name a mod file relative to the config's directory");
        return 0;
    }
    if (strlen(path) != len) {
        snprintf(why, n, "the path holds a NUL byte");
        return 0;
    }
    if (len > CFG_MOD_PATH_MAX) {
        snprintf(why, n, "the path is %zu bytes long; a mod file's path is at most %d", len, CFG_MOD_PATH_MAX);
        return 0;
    }
    if (path[0] == '/') {
        snprintf(why, n, "'%.120s' is an absolute path: a config names its mod files relative to its own directory, "
                 "so that the two move together", path);
        return 0;
    }
    if (cfg_path_climbs(path)) {
        snprintf(why, n, "'%.120s' has a '..' component: a config's mod files lie in its directory or below it, "
                 "named without '..'", path);
        return 0;
    }
    for (int i = 0; i < b->mod_count; i++)
        if (strcmp(b->mod_files[i].path, path) == 0) return i + 1;
    if (b->mod_count == CFG_MOD_FILES_MAX) {
        snprintf(why, n, "'%.120s' would be mod file %d of this config; a config names at most %d", path,
                 CFG_MOD_FILES_MAX + 1, CFG_MOD_FILES_MAX);
        return 0;
    }
    char *copy = fg_malloc(len + 1);
    if (copy == NULL) {
        snprintf(why, n, "out of host memory for the path of a mod file");
        return 0;
    }
    memcpy(copy, path, len + 1);
    cfg_mod_file *f = &b->mod_files[b->mod_count++];
    f->path = copy;
    f->line = line;
    f->id[0] = '\0';
    return b->mod_count;
}

void cfg_mod_files_free(cfg_build *b) {
    for (int i = 0; i < b->mod_count; i++)
        free(b->mod_files[i].path);
    b->mod_count = 0;
}

/* Traces and registers each of b's mod files, found from the directory of chunkname (its text up to the last
 * '/'; the current directory when it has none), then gives each variant that names one its id. A file that
 * cannot be read or traced fails the load as the config's error, at the line that first named it. */
static fg_status cfg_trace_mods(const char *chunkname, cfg_build *b, fg_error *err) {
    if (b->mod_count == 0)
        return FG_OK;
    const char *slash = strrchr(chunkname, '/');
    const size_t dir = slash ? (size_t)(slash - chunkname) + 1 : 0;
    fg_mod *tree = fg_malloc(sizeof *tree); /* on the heap: a tree is several KiB */
    char *full = fg_malloc(dir + CFG_MOD_PATH_MAX + 1);
    fg_status st = FG_OK;
    if (tree == NULL || full == NULL)
        st = fg_fail(err, FG_ERR_NO_MEMORY, "%s: out of memory tracing its mod files", chunkname);
    for (int i = 0; i < b->mod_count && st == FG_OK; i++) {
        cfg_mod_file *f = &b->mod_files[i];
        memcpy(full, chunkname, dir);
        memcpy(full + dir, f->path, strlen(f->path) + 1);
        fg_error e;
        fg_error_clear(&e);
        st = mod_trace_file(full, tree, &e);
        if (st == FG_OK)
            st = mod_register(tree, f->id, &e);
        if (st != FG_OK) /* an unreadable or refused file is the config's error; the host's limits stay theirs */
            st = fg_fail(err, st == FG_ERR_NO_MEMORY || st == FG_ERR_UNSUPPORTED ? st : FG_ERR_CONFIG,
                         "%s:%d: variants: field 'mod': %s", chunkname, f->line, e.msg);
    }
    free(tree);
    free(full);
    if (st != FG_OK)
        return st;
    for (int i = 0; i < b->count; i++)
        if (b->items[i].mod)
            memcpy(b->items[i].spec.mod, b->mod_files[b->items[i].mod - 1].id, MOD_ID_LEN + 1);
    return FG_OK;
}

/* qsort order over items: by every spec field, then by listing index, so equal specs sit together
 * with the first listed one first. Must agree with spec_equal (causal compared as a truth value, the
 * output dtype only for fp8 variants: spec_out_dtype; the mod's id as text). */
static int cfg_cmp(const void *pa, const void *pb) {
    const cfg_item *x = pa, *y = pb;
    const fg_spec *a = &x->spec, *b = &y->spec;
    int ka[21] = {(int)a->kind, a->arch, a->arch_accel, (int)a->dtype, a->head_dim, a->block_m, a->block_n,
                  a->warps, a->stages, a->causal != 0, (int)spec_out_dtype(a), a->deterministic != 0, a->tma != 0,
                  a->varlen != 0, a->window != 0, a->sinks != 0, a->softcap != 0, a->alibi != 0, spec_head_dim_v(a),
                  a->v_in_k != 0, a->kv_fp8};
    int kb[21] = {(int)b->kind, b->arch, b->arch_accel, (int)b->dtype, b->head_dim, b->block_m, b->block_n,
                  b->warps, b->stages, b->causal != 0, (int)spec_out_dtype(b), b->deterministic != 0, b->tma != 0,
                  b->varlen != 0, b->window != 0, b->sinks != 0, b->softcap != 0, b->alibi != 0, spec_head_dim_v(b),
                  b->v_in_k != 0, b->kv_fp8};
    for (int i = 0; i < 21; i++)
        if (ka[i] != kb[i])
            return ka[i] < kb[i] ? -1 : 1;
    const int mod = strcmp(a->mod, b->mod); /* "" where a variant has none */
    if (mod != 0)
        return mod;
    return (x->index > y->index) - (x->index < y->index);
}

/* Fills tiles and validates every item; on the first failure fills err naming the chunk, the line of
 * its variants{} call, the variant's canonical text and the rule. With b->skip set, a variant refused as
 * unsupported (FG_ERR_UNSUPPORTED: the arch cannot build it) is reported to b->skip and dropped; if that
 * drops every variant the load fails (FG_ERR_UNSUPPORTED), as a config that builds nothing is an error. */
static fg_status cfg_check_items(const char *chunkname, cfg_build *b, fg_error *err) {
    int kept = 0;
    for (int i = 0; i < b->count; i++) {
        fg_spec *s = &b->items[i].spec;
        char name[FG_SPEC_NAME_MAX];
        fg_error e;
        fg_error_clear(&e);
        fg_status st;
        if (spec_fill_tiles(s, &b->policy, &e) != FG_OK) {
            /* No tile rule covers it. The rules checked before the tile fields (arch, dtype, head_dim)
             * say FG_ERR_UNSUPPORTED and usually name the real problem: prefer their sentence. */
            fg_error v;
            fg_error_clear(&v);
            st = spec_validate(s, &v);
            if (st == FG_ERR_UNSUPPORTED)
                e = v;
        } else if ((st = spec_validate(s, &e)) == FG_OK) {
            b->items[kept] = b->items[i];
            b->items[kept].index = kept;
            kept++;
            continue;
        }
        if (spec_format(s, name, sizeof name) < 0)
            snprintf(name, sizeof name, "(unprintable)");
        if (b->skip && st == FG_ERR_UNSUPPORTED) {
            b->skip(b->skip_user, name, e.msg);
            continue;
        }
        return fg_fail(err, FG_ERR_CONFIG, "%s:%d: variant %s: %s", chunkname, b->items[i].line, name, e.msg);
    }
    if (kept == 0 && b->count > 0)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "%s: every one of its %d variants is unsupported on the arch%s given",
                       chunkname, b->count, b->arch_override.n > 1 ? "s" : "");
    b->count = kept;
    return FG_OK;
}

/* Moves the unique validated variants of b, in first-listed order, into out (which takes b's policy). */
static fg_status cfg_collect(const char *chunkname, cfg_build *b, fg_config *out, fg_error *err) {
    cfg_item *sorted = fg_malloc((size_t)b->count * sizeof *sorted);
    unsigned char *dup = fg_calloc((size_t)b->count, 1);
    fg_spec *specs = fg_malloc((size_t)b->count * sizeof *specs);
    if (sorted == NULL || dup == NULL || specs == NULL) {
        free(sorted);
        free(dup);
        free(specs);
        return fg_fail(err, FG_ERR_NO_MEMORY, "%s: out of memory collecting %d variants", chunkname, b->count);
    }
    memcpy(sorted, b->items, (size_t)b->count * sizeof *sorted);
    qsort(sorted, (size_t)b->count, sizeof *sorted, cfg_cmp);
    for (int i = 1; i < b->count; i++)
        if (spec_equal(&sorted[i].spec, &sorted[i - 1].spec))
            dup[sorted[i].index] = 1;
    int n = 0;
    for (int i = 0; i < b->count; i++)
        if (!dup[i])
            specs[n++] = b->items[i].spec;
    free(sorted);
    free(dup);
    out->variants = specs;
    out->count = n;
    out->policy = b->policy;
    memset(&b->policy, 0, sizeof b->policy);
    return FG_OK;
}


fg_status cfg_finish(const char *chunkname, cfg_build *b, fg_config *out, fg_error *err) {
    fg_status st = cfg_trace_mods(chunkname, b, err);
    if (st == FG_OK)
        st = cfg_check_items(chunkname, b, err);
    if (st == FG_OK)
        st = cfg_collect(chunkname, b, out, err);
    return st;
}
