/* config.h: bundle configs in Lua (configs/NAME.lua), loaded through the sandbox.
 *
 * A config calls, any number of times:
 *   variants { kind = "fwd", arch = {"sm_80", "sm_90a"}, dtype = {"fp16", "bf16"},
 *              head_dim = {64, 128}, causal = {false, true},
 *              block_m = 128, block_n = 64, warps = 4, stages = 2,     -- tile fields optional
 *              out = "bf16",                                          -- fp8 output dtype, optional
 *              mod = "mods/alibi.lua" }                               -- kind "serve": a custom mod, optional
 *     every field is a scalar or a list; the call adds the cartesian product of the lists (the last
 *     field varies fastest). kind, arch (unless overridden), dtype and head_dim are required; causal
 *     (booleans, or 0/1) defaults to false; unset tile fields come from the tile policy; out (fp16 or
 *     bf16) is the output dtype of fp8 (e4m3, e5m2) variants, bf16 when absent, ignored by 16-bit ones;
 *     mod names a custom mod's file (generator/mod.h) relative to the config's directory (a config from
 *     memory: its chunk name's), with no '..' component and not absolute, so a config reaches only the files
 *     that ship with it. The chunk never reads the file: after it runs, each distinct file is traced once
 *     (mod_trace_file: a regular file) and registered (mod_register), and its variants name its id (mod=ID).
 *     A file that cannot be read or traced is a config error at the line naming it, followed by the mod's own
 *     file:line; the validation rule mod_kind refuses a mod on a kind other than serve.
 *   tile_policy { arch = "sm_80" | {"sm_80", "sm_89"} (range), head_dim = 128 | {96, 128} (range),
 *                 causal = true|false|nil, dtype = "bf16"|nil,
 *                 block_m = .., block_n = .., warps = .., stages = .. }  -- overrides the defaults
 *     absent match fields match anything; an arch's 'a' suffix is ignored; all four tiles are required.
 * After the chunk runs, unset tile fields are filled from the (overridden) tile policy, every variant is
 * validated (errors name the variant and the rule) and duplicates are dropped. Field type errors, unknown
 * fields and missing required fields name the field and the expected type with file:line. A config may
 * list at most 65536 variants and must list at least one. */
#ifndef FG_CONFIG_H
#define FG_CONFIG_H

#include "generator/spec.h"
#include "generator/tile_policy.h"

typedef struct fg_config {
    fg_spec *variants;     /* validated, tiles filled, unique, in the order first listed */
    int count;             /* number of variants */
    fg_tile_policy policy; /* the default policy plus the config's overrides */
} fg_config;

/* Loads and validates a config file. arch_override (may be NULL): a comma-separated arch list that
 * replaces every variants{} arch field (`flashgen bundle --arch`). On success *out owns its arrays (free
 * with config_free). On failure *out is left empty (count 0, NULL arrays) and the status is FG_ERR_CONFIG
 * for anything wrong in the config (message "file:line: ..."; a mod file it names that cannot be read or
 * traced included), FG_ERR_IO for an unreadable config file,
 * FG_ERR_INVALID_ARGUMENT for a bad arch_override, FG_ERR_NO_MEMORY for host memory. */
fg_status config_load_file(const char *path, const char *arch_override, fg_config *out, fg_error *err);
/* Told of a variant the load drops: its canonical name and the validation rule's sentence. */
typedef void (*config_skip_fn)(void *user, const char *name, const char *why);
/* config_load_file, except that a variant the validator refuses as unsupported (FG_ERR_UNSUPPORTED: the
 * arch cannot build it, e.g. e4m3 on sm_80) is passed to skip and dropped rather than failing the load
 * (`flashgen bundle --arch` and `list --arch`). A config left with no variant fails with FG_ERR_UNSUPPORTED. */
fg_status config_load_file_skipping(const char *path, const char *arch_override, config_skip_fn skip, void *user,
                                    fg_config *out, fg_error *err);
/* Same, from memory: text (len bytes) is named chunkname in messages. */
fg_status config_load_string(const char *chunkname, const char *text, size_t len, const char *arch_override,
                             fg_config *out, fg_error *err);
/* Frees what a successful load gave and empties cfg; harmless on an empty (or failed) config. */
void config_free(fg_config *cfg);

#endif
