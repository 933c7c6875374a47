/* tile_policy.h: the default tiles of each variant (tile_policy.c), as data a Lua config or the tuning
 * database can override: rules matched last-first on arch, head_dim, mask, dtype, family and kind. */
#ifndef FG_TILE_POLICY_H
#define FG_TILE_POLICY_H

#include "core/error.h"

struct fg_spec; /* generator/spec.h */

typedef struct fg_tile_rule {
    int arch_min, arch_max;         /* inclusive range of spec.arch this rule covers */
    int head_dim_min, head_dim_max; /* inclusive range of head_dim */
    int causal;                     /* 0 or 1, or -1 for either */
    int dtype;                      /* an fg_dtype, or -1 for any */
    int block_m, block_n, warps, stages; /* the tiles it gives */
    int family;                     /* which kernel family it applies to: FG_FAMILY_ANY (0, so positional
                                       initializers may leave it out), FG_FAMILY_MMA or FG_FAMILY_WGMMA */
    int kind;                       /* the fg_kind it applies to (0, the forward, when left out) */
} fg_tile_rule;

/* The kernel families: the mma.sync family (every target, sm_90 included) and the wgmma family (sm_90a:
 * spec_is_wgmma, spec_is_wgmma_bwd). */
enum { FG_FAMILY_ANY = 0, FG_FAMILY_MMA = 1, FG_FAMILY_WGMMA = 2 };

typedef struct fg_tile_policy {
    fg_tile_rule *rules; /* later rules take precedence over earlier ones */
    int count;           /* rules in use */
    int cap;             /* allocated */
} fg_tile_policy;

/* The most rules a policy holds, the built-in ones included: a config's tile_policy{} calls past it are an error
 * (a million rules matched against 32,768 variants ran for minutes, outside the config's memory bound). */
#define FG_TILE_POLICY_MAX_RULES 4096

/* Fills policy with flashgen's built-in rules (caller frees with tile_policy_free). */
fg_status tile_policy_init_default(fg_tile_policy *policy, fg_error *err);
/* Appends a rule that overrides earlier ones where they overlap; FG_ERR_INVALID_ARGUMENT past
 * FG_TILE_POLICY_MAX_RULES. */
fg_status tile_policy_add(fg_tile_policy *policy, const fg_tile_rule *rule, fg_error *err);
/* Makes dst an independent copy of src (caller frees dst with tile_policy_free). */
fg_status tile_policy_copy(fg_tile_policy *dst, const fg_tile_policy *src, fg_error *err);
/* Frees the rules and empties policy; harmless on an empty one. */
void tile_policy_free(fg_tile_policy *policy);
/* The rule that applies to spec (last match wins), or NULL. */
const fg_tile_rule *tile_policy_lookup(const fg_tile_policy *policy, const struct fg_spec *spec);
/* Sets every unset (0) tile field of spec from the policy; fields already set are kept. A spec with no tile field set
 * that spec_mod_tiles covers takes its tiles instead of the policy's. */
fg_status spec_fill_tiles(struct fg_spec *spec, const fg_tile_policy *policy, fg_error *err);
/* The tiles of an sm_90a forward with a custom mod at head dims up to 128 (Q's and V's): sets them and returns 1, or
 * returns 0 for any other spec. The run-time prefill takes them over the policy's and the tuning database's. */
int spec_mod_tiles(struct fg_spec *spec);

#endif
