/* config_build.h: what the two halves of the config loader share; not a header for other modules. config.c
 * runs the chunk, whose host functions (variants{}, tile_policy{}) only read and check their arguments into a
 * cfg_build; config_finish.c then works on the whole of it: traces the mod files the config names, fills
 * tiles, validates, and drops duplicates (config.h says what a config is). */
#ifndef FG_CONFIG_BUILD_H
#define FG_CONFIG_BUILD_H

#include "generator/config.h"
#include "generator/mod.h"

#define CFG_LIST_MAX 128      /* most values one field may list: far beyond any real bundle */
#define CFG_MOD_FILES_MAX 64  /* most distinct mod files one config may name */
#define CFG_MOD_PATH_MAX 512  /* most bytes of a mod file's path as the config writes it */

/* One field's values, as listed (a scalar is a list of one). arch values are arch * 2 + accel; mod values are
 * the number cfg_mod_file_add gave the path. */
typedef struct cfg_list {
    int n;                 /* number of values; 0 when the field is absent */
    int v[CFG_LIST_MAX];   /* the values */
} cfg_list;

/* A variant as listed, with where it was listed (for messages after the chunk has run). */
typedef struct cfg_item {
    fg_spec spec; /* tiles may still be 0 (unset); mod "" until its file is traced */
    int mod;      /* the mod file it names: 1 + its index in cfg_build.mod_files; 0 for none */
    int line;     /* line of the variants{} call that listed it */
    int index;    /* position in listing order (keeps the first of equal variants when sorting) */
} cfg_item;

/* A mod file the config names, traced once however many variants name it. */
typedef struct cfg_mod_file {
    char *path;                /* as the config wrote it: relative to the config's directory (owned) */
    int line;                  /* line of the first variants{} call that named it */
    char id[MOD_ID_LEN + 1];   /* its mod's id once traced and registered, "" before */
} cfg_mod_file;

/* What the host functions build while the chunk runs. */
typedef struct cfg_build {
    cfg_item *items;         /* variants in the order listed, duplicates included */
    int count;               /* items in use */
    int cap;                 /* items allocated */
    fg_tile_policy policy;   /* the defaults, then each tile_policy{} rule in call order */
    cfg_list arch_override;  /* replaces every variants{} arch list when n > 0 */
    config_skip_fn skip;     /* when set, told of each variant the validator refuses as unsupported, which
                                is then dropped instead of failing the load */
    void *skip_user;         /* skip's argument */
    cfg_mod_file mod_files[CFG_MOD_FILES_MAX]; /* the distinct mod files named, in the order first named */
    int mod_count;           /* mod_files in use */
} cfg_build;

/* ---- config_finish.c ---- */

/* The number (1-based) of the mod file `path` (len bytes, as the config wrote it) in b, adding it (first named
 * at `line`) when new; or 0 with the sentence in why (n bytes) when path breaks the path rules (config.h) or b
 * already holds CFG_MOD_FILES_MAX files or the host's memory ran out. Reads no file: the chunk is still running. */
int cfg_mod_file_add(cfg_build *b, const char *path, size_t len, int line, char *why, size_t n);

/* The work after the chunk ran: traces and registers each of b's mod files (relative to the directory of
 * chunkname) and sets the mod of each variant naming it, fills tiles from b's policy, validates every variant
 * (b->skip told of and dropping the unsupported ones where set) and moves the unique ones, in first-listed
 * order, into out, which takes b's policy. FG_ERR_CONFIG "chunkname:line: ..." naming the variants{} call (for a
 * mod file: its own file:line follows), FG_ERR_UNSUPPORTED when skipping drops every variant, FG_ERR_NO_MEMORY. */
fg_status cfg_finish(const char *chunkname, cfg_build *b, fg_config *out, fg_error *err);

/* Frees b's mod file paths (the rest of b is the caller's). */
void cfg_mod_files_free(cfg_build *b);

#endif
