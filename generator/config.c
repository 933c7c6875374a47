/* config.c: bundle configs (configs/NAME.lua) -> a validated, duplicate-free list of fg_spec (see config.h).
 *
 * The chunk runs in the sandbox (lua_sandbox.c) with two host functions, variants{} and tile_policy{}.
 * They only read and check their table argument and append to a C-side builder (config_build.h); nothing is
 * filled or validated until the chunk has finished (config_finish.c), so a tile_policy{} placed after the
 * variants{} it affects still applies. A mod file a variant names is only numbered while the chunk runs and
 * traced afterwards, by C: no sandbox runs inside another, and the config's Lua never reads a file.
 * Host functions read tables with raw access only: a config's metatables never run inside them. Every value
 * is checked for type where it is read, and the error names the call, the field and the expected type, at
 * the line of the call. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "generator/config_build.h"
#include "core/lua_sandbox.h"
#include "core/alloc.h"

#define CFG_MAX_VARIANTS 65536   /* most variants a config may list (before duplicates are dropped) */

/* How a field's values are read and what a type error says is expected. */
typedef enum cfg_type {
    CFG_INT,   /* a positive integer */
    CFG_BOOL,  /* true/false, or 0/1 */
    CFG_KIND,  /* a kernel family name: "fwd" */
    CFG_ARCH,  /* "sm_80", "sm_90a": arch * 2 + accel */
    CFG_DTYPE, /* "fp16", "bf16", ...: an fg_dtype */
    CFG_MOD    /* a mod file's path: the number cfg_mod_file_add gives it */
} cfg_type;

static const char *const cfg_variant_fields[] = {"kind",    "arch",    "dtype", "head_dim", "causal",
                                                 "block_m", "block_n", "warps", "stages",   "out",
                                                 "deterministic", "tma", "varlen", "window", "sinks",
                                                 "softcap", "alibi", "head_dim_v", "v_in_k", "mod", "kv", NULL};
static const char *const cfg_policy_fields[] = {"arch",    "head_dim", "causal", "dtype", "block_m",
                                                "block_n", "warps",    "stages", NULL};

/* The phrase a type error uses for what a field accepts. */
static const char *cfg_expected(cfg_type type, int list_ok, int range) {
    switch (type) {
    case CFG_INT:
        return range ? "an integer or a {lo, hi} pair of integers"
                     : list_ok ? "an integer or a list of integers" : "an integer";
    case CFG_BOOL:
        return list_ok ? "a boolean (or 0/1) or a list of booleans" : "a boolean (or 0/1)";
    case CFG_KIND:
    case CFG_ARCH:
    case CFG_DTYPE:
        return range ? "a string or a {lo, hi} pair of strings"
                     : list_ok ? "a string or a list of strings" : "a string";
    case CFG_MOD:
        return "a mod file's path (a string) or a list of paths";
    }
    return "a value";
}

/* The line of the Lua code calling the running host function (0 if unknown). */
static int cfg_call_line(lua_State *L) {
    lua_Debug ar;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "l", &ar) && ar.currentline > 0)
        return ar.currentline;
    return 0;
}

/* Reads the scalar at idx as a value of `type` into *out, or raises an error naming fn, field and
 * the expected phrase. `pos` (1-based) is the list position, 0 for a scalar. */
static void cfg_read_scalar(lua_State *L, int idx, const char *fn, const char *field, cfg_type type,
                            const char *expected, int pos, int *out) {
    char got[64], at[32] = "";
    if (pos > 0)
        snprintf(at, sizeof at, " (list item %d)", pos);
    int t = lua_type(L, idx);
    switch (type) {
    case CFG_INT: {
        int isint = 0;
        lua_Integer v = t == LUA_TNUMBER ? lua_tointegerx(L, idx, &isint) : 0;
        if (!isint)
            lua_sandbox_raise(L, fn, "field '%s' must be %s, got %s%s", field, expected, lua_sandbox_describe(L, idx, got, sizeof got), at);
        if (v < 1 || v > INT_MAX)
            lua_sandbox_raise(L, fn, "field '%s' must be a positive integer, got %lld%s", field, (long long)v, at);
        *out = (int)v;
        return;
    }
    case CFG_BOOL:
        if (t == LUA_TBOOLEAN) {
            *out = lua_toboolean(L, idx);
            return;
        }
        if (t == LUA_TNUMBER && lua_isinteger(L, idx) && (lua_tointeger(L, idx) == 0 || lua_tointeger(L, idx) == 1)) {
            *out = (int)lua_tointeger(L, idx);
            return;
        }
        lua_sandbox_raise(L, fn, "field '%s' must be %s, got %s%s", field, expected, lua_sandbox_describe(L, idx, got, sizeof got), at);
        return;
    case CFG_KIND:
    case CFG_ARCH:
    case CFG_DTYPE: {
        if (t != LUA_TSTRING) /* numbers are not accepted as names, though Lua could convert them */
            lua_sandbox_raise(L, fn, "field '%s' must be %s, got %s%s", field, expected, lua_sandbox_describe(L, idx, got, sizeof got), at);
        const char *s = lua_tostring(L, idx);
        fg_error e;
        fg_error_clear(&e);
        if (type == CFG_KIND) {
            if (strcmp(s, "fwd") == 0) *out = FG_KIND_FWD;
            else if (strcmp(s, "bwd") == 0) *out = FG_KIND_BWD;
            else if (strcmp(s, "serve") == 0) *out = FG_KIND_SERVE;
            else if (strcmp(s, "merge") == 0) *out = FG_KIND_MERGE;
            else lua_sandbox_raise(L, fn, "field 'kind' must name a kernel family (\"fwd\", \"bwd\", \"serve\", "
                                   "\"merge\"), got \"%.60s\"%s", s, at);
        } else if (type == CFG_ARCH) {
            int arch = 0, accel = 0;
            if (spec_arch_parse(s, &arch, &accel, &e) != FG_OK)
                lua_sandbox_raise(L, fn, "field 'arch'%s: %s", at, e.msg);
            *out = arch * 2 + accel;
        } else {
            fg_dtype d;
            if (dtype_parse(s, &d, &e) != FG_OK)
                lua_sandbox_raise(L, fn, "field '%s'%s: %s", field, at, e.msg);
            *out = (int)d;
        }
        return;
    }
    case CFG_MOD: {
        if (t != LUA_TSTRING)
            lua_sandbox_raise(L, fn, "field '%s' must be %s, got %s%s", field, expected, lua_sandbox_describe(L, idx, got, sizeof got), at);
        size_t len;
        const char *path = lua_tolstring(L, idx, &len);
        char why[256];
        /* the builder is upvalue 1 of every host function (cfg_setup) */
        *out = cfg_mod_file_add(lua_touserdata(L, lua_upvalueindex(1)), path, len, cfg_call_line(L), why, sizeof why);
        if (*out == 0)
            lua_sandbox_raise(L, fn, "field '%s'%s: %s", field, at, why);
        return;
    }
    }
}

/* Reads field `field` of the table at index tab into out: absent -> n = 0; a scalar -> one value; a
 * list (only when list_ok) -> its values. A list must be a non-empty Lua array (keys 1..n, nothing else)
 * of at most max values. Raises errors naming fn, field and the expected type. */
static void cfg_read_field(lua_State *L, int tab, const char *fn, const char *field, cfg_type type, int list_ok,
                           int range, int max, cfg_list *out) {
    const char *expected = cfg_expected(type, list_ok, range);
    char got[64];
    out->n = 0;
    lua_pushstring(L, field);
    lua_rawget(L, tab);
    int val = lua_gettop(L);
    if (lua_isnil(L, val)) {
        lua_pop(L, 1);
        return;
    }
    if (lua_type(L, val) != LUA_TTABLE) {
        cfg_read_scalar(L, val, fn, field, type, expected, 0, &out->v[0]);
        out->n = 1;
        lua_pop(L, 1);
        return;
    }
    if (!list_ok)
        lua_sandbox_raise(L, fn, "field '%s' must be %s, got %s", field, expected, lua_sandbox_describe(L, val, got, sizeof got));
    lua_Integer n = (lua_Integer)lua_sandbox_list_length(L, val, fn, field, expected);
    if (range && n != 2)
        lua_sandbox_raise(L, fn, "field '%s' must be %s, got a list of %lld", field, expected, (long long)n);
    if (n > max)
        lua_sandbox_raise(L, fn, "field '%s' lists %lld values; at most %d are allowed", field, (long long)n, max);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, val, i);
        if (lua_type(L, -1) == LUA_TTABLE)
            lua_sandbox_raise(L, fn, "field '%s' must be %s, got a nested table (list item %lld)", field, expected,
                      (long long)i);
        cfg_read_scalar(L, -1, fn, field, type, expected, (int)i, &out->v[i - 1]);
        lua_pop(L, 1);
    }
    out->n = (int)n;
    lua_pop(L, 1);
}

/* Checks that the only argument is a table whose keys are all among `fields`; returns its index. */
static int cfg_check_args(lua_State *L, const char *fn, const char *const *fields) {
    lua_sandbox_check_table(L, 1, fn, NULL, fields);
    return 1;
}

/* Room in b for `total` more variants (at most CFG_MAX_VARIANTS in all), or a Lua error. */
static void cfg_reserve(lua_State *L, const char *fn, cfg_build *b, long long total) {
    if (total > CFG_MAX_VARIANTS - b->count)
        lua_sandbox_raise(L, fn, "this call lists %lld variants after %d earlier ones; a config may list at most %d",
                  total, b->count, CFG_MAX_VARIANTS);
    if (b->count + total > b->cap) {
        long long want = b->cap ? b->cap : 64;
        while (want < b->count + total)
            want *= 2;
        cfg_item *items = fg_realloc(b->items, (size_t)want * sizeof *items);
        if (items == NULL)
            lua_sandbox_raise(L, fn, "out of host memory for %lld variants", (long long)(b->count + total));
        b->items = items;
        b->cap = (int)want;
    }
}

/* variants { ... }: appends the cartesian product of the listed values to the builder (upvalue 1).
 * kind, dtype and head_dim are required, and arch unless an arch override is set; causal defaults to
 * false and tile fields to unset; out (the output dtype of fp8 variants) defaults to bf16 and is ignored
 * by 16-bit variants, which write O in their own dtype; deterministic and tma (kind "bwd" only: the
 * mma.sync kernel's TMA loads, which dispatch takes on sm_90 at head_dim 64 to 256 in 64s) default to false. The
 * product varies the last field fastest, in the order kind, arch, dtype, head_dim, causal, block_m,
 * block_n, warps, stages, out, deterministic, tma, varlen (kind "fwd" on sm_90a, fp16/bf16: the sm_90a forward's
 * variable-length variants, default false), window, sinks, softcap, alibi (the model variants: kind "serve", and
 * "fwd" and "bwd" with varlen; default false), head_dim_v (V's and O's head dim where it differs from head_dim: kind
 * "serve", "fwd" with varlen on sm_90a, "bwd" on the mma.sync family; default head_dim's), v_in_k (kind "serve": V a
 * prefix view of K, the absorbed-MLA cache; default false), mod (a custom mod's file, relative to the config's
 * directory: only numbered here, traced after the chunk; the mod_kind rule says which kinds take one; default none),
 * kv (kind "serve": K and V in FP8, "e4m3" or "e5m2", dequantized in the kernel; default Q's dtype). */
static int cfg_variants(lua_State *L) {
    static const char fn[] = "variants";
    cfg_build *b = lua_touserdata(L, lua_upvalueindex(1));
    enum { NF = 21, F_MODS = 13, F_DV = 17, F_V_IN_K = 18, F_MOD_FILE = 19, F_KV = 20 }; /* F_MODS..F_MODS + 3: the model
                                                                                          variants */
    cfg_list f[NF]; /* in the order of cfg_variant_fields */
    static const cfg_type types[NF] = {CFG_KIND, CFG_ARCH, CFG_DTYPE, CFG_INT,  CFG_BOOL, CFG_INT,
                                       CFG_INT,  CFG_INT,  CFG_INT,   CFG_DTYPE, CFG_BOOL, CFG_BOOL,
                                       CFG_BOOL, CFG_BOOL, CFG_BOOL,  CFG_BOOL, CFG_BOOL, CFG_INT,
                                       CFG_BOOL, CFG_MOD,  CFG_DTYPE};
    int tab = cfg_check_args(L, fn, cfg_variant_fields);
    for (int i = 0; i < NF; i++)
        cfg_read_field(L, tab, fn, cfg_variant_fields[i], types[i], 1, 0, CFG_LIST_MAX, &f[i]);
    if (f[0].n == 0)
        lua_sandbox_raise(L, fn, "field 'kind' is required (kind = \"fwd\")");
    if (b->arch_override.n > 0)
        f[1] = b->arch_override;
    else if (f[1].n == 0)
        lua_sandbox_raise(L, fn, "field 'arch' is required (for example arch = {\"sm_80\", \"sm_90a\"})");
    int merges = 0;
    for (int i = 0; i < f[0].n; i++) merges += f[0].v[i] == FG_KIND_MERGE;
    if (merges > 0) { /* the merge kernel: one an arch, named by kind and arch alone */
        if (merges < f[0].n)
            lua_sandbox_raise(L, fn, "kind \"merge\" is listed in a variants call of its own (it takes only arch)");
        for (int i = 2; i < NF; i++)
            if (f[i].n > 0)
                lua_sandbox_raise(L, fn, "field '%s' is not a field of kind \"merge\", which takes only arch",
                                  cfg_variant_fields[i]);
        cfg_reserve(L, fn, b, f[1].n);
        const int line = cfg_call_line(L);
        for (int a = 0; a < f[1].n; a++) {
            cfg_item *it = &b->items[b->count++];
            memset(it, 0, sizeof *it);
            it->spec.kind = FG_KIND_MERGE;
            it->spec.arch = f[1].v[a] / 2;
            it->spec.arch_accel = b->arch_override.n > 0 ? 0 : f[1].v[a] % 2; /* as serve below */
            it->line = line;
            it->index = b->count - 1;
        }
        return 0;
    }
    if (f[2].n == 0)
        lua_sandbox_raise(L, fn, "field 'dtype' is required (for example dtype = {\"fp16\", \"bf16\"})");
    if (f[3].n == 0)
        lua_sandbox_raise(L, fn, "field 'head_dim' is required (for example head_dim = {64, 128})");
    for (int j = 10; j <= 11; j++)
        if (f[j].n > 0)
            for (int i = 0; i < f[0].n; i++)
                if (f[0].v[i] != FG_KIND_BWD)
                    lua_sandbox_raise(L, fn, "field '%s' is for kind = \"bwd\" only", cfg_variant_fields[j]);
    if (f[12].n > 0)
        for (int i = 0; i < f[0].n; i++)
            if (f[0].v[i] != FG_KIND_FWD && f[0].v[i] != FG_KIND_BWD)
                lua_sandbox_raise(L, fn, "field 'varlen' is for kind = \"fwd\" and \"bwd\" only");
    for (int j = F_MODS; j < F_DV; j++)
        if (f[j].n > 0)
            for (int i = 0; i < f[0].n; i++)
                if (f[0].v[i] == FG_KIND_MERGE)
                    lua_sandbox_raise(L, fn, "field '%s' is for kind = \"serve\", \"fwd\" and \"bwd\" only",
                                      cfg_variant_fields[j]);
    for (int i = 0; i < f[0].n; i++) {
        if (f[F_V_IN_K].n > 0 && f[0].v[i] != FG_KIND_SERVE)
            lua_sandbox_raise(L, fn, "field 'v_in_k' is for kind = \"serve\" only");
        if (f[F_KV].n > 0 && f[0].v[i] != FG_KIND_SERVE)
            lua_sandbox_raise(L, fn, "field 'kv' is for kind = \"serve\" only");
    }
    for (int i = 0; i < f[F_KV].n; i++)
        if (!dtype_is_fp8((fg_dtype)f[F_KV].v[i]))
            lua_sandbox_raise(L, fn, "field 'kv' must be \"e4m3\" or \"e5m2\" (K and V in FP8; absent: of dtype), got "
                              "\"%s\"", dtype_name((fg_dtype)f[F_KV].v[i]));
    for (int i = 4; i < NF; i++)
        if (f[i].n == 0) { /* causal false; tiles unset (0), filled from the policy after the chunk; out: -1;
                              deterministic, tma and the rest false; head_dim_v 0 (head_dim's); mod 0 (none) */
            f[i].n = 1;
            f[i].v[0] = i == 9 ? -1 : 0;
        }
    long long total = 1;
    for (int i = 0; i < NF; i++) /* up to 128^10 > 2^63: saturate (such a call is refused just below) */
        if (__builtin_mul_overflow(total, (long long)f[i].n, &total))
            total = LLONG_MAX;
    cfg_reserve(L, fn, b, total);
    int line = cfg_call_line(L);
    for (long long k = 0; k < total; k++) {
        int idx[NF];
        long long r = k;
        for (int i = NF - 1; i >= 0; i--) { /* mixed radix, last field fastest */
            idx[i] = (int)(r % f[i].n);
            r /= f[i].n;
        }
        cfg_item *it = &b->items[b->count++];
        memset(it, 0, sizeof *it);
        it->spec.kind = (fg_kind)f[0].v[idx[0]];
        it->spec.arch = f[1].v[idx[1]] / 2;
        it->spec.arch_accel = f[1].v[idx[1]] % 2;
        /* Under an arch override the serving kernels, mma.sync on every target, take an 'a' target's plain
         * one (sm_90a -> sm_90); listed for such an arch itself they are refused. */
        if (b->arch_override.n > 0 && it->spec.kind == FG_KIND_SERVE) it->spec.arch_accel = 0;
        it->spec.dtype = (fg_dtype)f[2].v[idx[2]];
        it->spec.head_dim = f[3].v[idx[3]];
        /* V's own head dim (0, or head_dim's: the same); validation says which kinds and targets take it. Under an
         * arch override a backward variant with it, the mma.sync family's, takes an 'a' target's plain one (as
         * serving variants do); listed for such an arch itself it is refused. */
        it->spec.head_dim_v = f[F_DV].v[idx[F_DV]] != it->spec.head_dim ? f[F_DV].v[idx[F_DV]] : 0;
        if (b->arch_override.n > 0 && it->spec.kind == FG_KIND_BWD && it->spec.head_dim_v) it->spec.arch_accel = 0;
        it->spec.causal = f[4].v[idx[4]];
        it->spec.block_m = f[5].v[idx[5]];
        it->spec.block_n = f[6].v[idx[6]];
        it->spec.warps = f[7].v[idx[7]];
        it->spec.stages = f[8].v[idx[8]];
        it->spec.deterministic = it->spec.kind == FG_KIND_BWD ? f[10].v[idx[10]] : 0;
        /* Under an arch override (flashgen bundle --arch) a TMA-load variant retargeted before sm_90 or to
         * an 'a' target (sm_90a is the wgmma family, which loads by TMA anyway) becomes the plain one; listed
         * for such an arch itself it is refused. */
        it->spec.tma = it->spec.kind == FG_KIND_BWD &&
                               !(b->arch_override.n > 0 && (it->spec.arch < 90 || it->spec.arch_accel))
                           ? f[11].v[idx[11]] : 0;
        /* the forward's varlen variants are the wgmma family's: under an arch override to a plain target they
         * are dropped to the dense one (listed for such an arch itself they are refused) */
        it->spec.varlen = (it->spec.kind == FG_KIND_BWD ||
                           (it->spec.kind == FG_KIND_FWD && !(b->arch_override.n > 0 && !it->spec.arch_accel)))
                              ? f[12].v[idx[12]] : 0;
        /* under an arch override the model variants go where their family does not: the forward's (sm_90a, with
         * varlen) to a plain target, the backward's (mma.sync) to an 'a' one */
        const int mods = !(b->arch_override.n > 0 && ((it->spec.kind == FG_KIND_FWD && !it->spec.arch_accel) ||
                                                      (it->spec.kind == FG_KIND_BWD && it->spec.arch_accel)));
        it->spec.window = mods && f[F_MODS].v[idx[F_MODS]];
        it->spec.sinks = mods && f[F_MODS + 1].v[idx[F_MODS + 1]];
        it->spec.softcap = mods && f[F_MODS + 2].v[idx[F_MODS + 2]];
        it->spec.alibi = mods && f[F_MODS + 3].v[idx[F_MODS + 3]];
        it->spec.v_in_k = f[F_V_IN_K].v[idx[F_V_IN_K]];
        it->spec.kv_fp8 = f[F_KV].v[idx[F_KV]];
        it->mod = f[F_MOD_FILE].v[idx[F_MOD_FILE]]; /* its id is set once the file is traced (cfg_finish) */
        if (!dtype_is_fp8(it->spec.dtype)) /* 16-bit variants write O in their dtype */
            it->spec.out_dtype = it->spec.dtype;
        else
            it->spec.out_dtype = f[9].v[idx[9]] < 0 ? FG_DTYPE_BF16 : (fg_dtype)f[9].v[idx[9]];
        it->line = line;
        it->index = b->count - 1;
    }
    return 0;
}

/* tile_policy { ... }: appends one rule to the builder's policy (upvalue 1), overriding earlier rules
 * where they overlap. arch and head_dim are a value or an inclusive {lo, hi} range (absent: any);
 * a rule that names sm_90a applies to the wgmma family (sm_90a) only, any other rule to the mma.sync
 * family (whose Hopper target is sm_90). causal and dtype absent: any.
 * block_m, block_n, warps and stages are all required: the rule must give a complete tile. */
static int cfg_tile_policy(lua_State *L) {
    static const char fn[] = "tile_policy";
    cfg_build *b = lua_touserdata(L, lua_upvalueindex(1));
    int tab = cfg_check_args(L, fn, cfg_policy_fields);
    cfg_list arch, hd, causal, dtype, tiles[4];
    cfg_read_field(L, tab, fn, "arch", CFG_ARCH, 1, 1, 2, &arch);
    cfg_read_field(L, tab, fn, "head_dim", CFG_INT, 1, 1, 2, &hd);
    cfg_read_field(L, tab, fn, "causal", CFG_BOOL, 0, 0, 1, &causal);
    cfg_read_field(L, tab, fn, "dtype", CFG_DTYPE, 0, 0, 1, &dtype);
    for (int i = 0; i < 4; i++) {
        const char *name = cfg_policy_fields[4 + i];
        cfg_read_field(L, tab, fn, name, CFG_INT, 0, 0, 1, &tiles[i]);
        if (tiles[i].n == 0)
            lua_sandbox_raise(L, fn, "field '%s' is required: a rule gives block_m, block_n, warps and stages", name);
    }
    fg_tile_rule rule;
    memset(&rule, 0, sizeof rule);
    rule.arch_min = arch.n ? arch.v[0] / 2 : 0;
    rule.arch_max = arch.n ? arch.v[arch.n - 1] / 2 : INT_MAX;
    rule.head_dim_min = hd.n ? hd.v[0] : 0;
    rule.head_dim_max = hd.n ? hd.v[hd.n - 1] : INT_MAX;
    if (rule.arch_min > rule.arch_max)
        lua_sandbox_raise(L, fn, "field 'arch' range {sm_%d, sm_%d} is reversed: give {lo, hi}", rule.arch_min,
                  rule.arch_max);
    if (rule.head_dim_min > rule.head_dim_max)
        lua_sandbox_raise(L, fn, "field 'head_dim' range {%d, %d} is reversed: give {lo, hi}", rule.head_dim_min,
                  rule.head_dim_max);
    /* A rule naming sm_90a applies to the wgmma family (which only sm_90a has); any other to the mma.sync
     * family, whose Hopper target is sm_90. */
    rule.family = FG_FAMILY_MMA;
    for (int i = 0; i < arch.n; i++)
        if (arch.v[i] == 90 * 2 + 1) rule.family = FG_FAMILY_WGMMA;
    rule.causal = causal.n ? causal.v[0] : -1;
    rule.dtype = dtype.n ? dtype.v[0] : -1;
    rule.block_m = tiles[0].v[0];
    rule.block_n = tiles[1].v[0];
    rule.warps = tiles[2].v[0];
    rule.stages = tiles[3].v[0];
    fg_error e;
    fg_error_clear(&e);
    if (tile_policy_add(&b->policy, &rule, &e) != FG_OK)
        lua_sandbox_raise(L, fn, "%s", e.msg);
    return 0;
}

/* Sandbox setup callback: installs variants and tile_policy as globals bound to the builder. Runs in
 * protected mode, so allocation errors surface as Lua errors. */
static int cfg_setup(lua_State *L, void *user) {
    lua_sandbox_bind(L, "variants", cfg_variants, user);
    lua_sandbox_bind(L, "tile_policy", cfg_tile_policy, user);
    return 0;
}

/* Parses the comma-separated arch override ("sm_80, sm_90a") into out. */
static fg_status cfg_parse_override(const char *text, cfg_list *out, fg_error *err) {
    out->n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        const char *last = end;
        while (last > p && (last[-1] == ' ' || last[-1] == '\t'))
            last--;
        char name[32];
        size_t n = (size_t)(last - p);
        if (n == 0)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT,
                           "arch override '%s' has an empty entry: give names like sm_80,sm_90a", text);
        if (n >= sizeof name)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "arch override '%s': '%.*s' is not an arch name", text,
                           (int)n, p);
        if (out->n == CFG_LIST_MAX)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "arch override '%.40s...' lists more than %d archs", text,
                           CFG_LIST_MAX);
        memcpy(name, p, n);
        name[n] = '\0';
        int arch = 0, accel = 0;
        fg_error e;
        fg_error_clear(&e);
        if (spec_arch_parse(name, &arch, &accel, &e) != FG_OK)
            return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "arch override: %s", e.msg);
        out->v[out->n++] = arch * 2 + accel;
        if (*end == '\0')
            return FG_OK;
        p = end + 1;
    }
}

/* The shared body of config_load_file and config_load_string (path != NULL: read the file). */
static fg_status cfg_load(const char *path, const char *chunkname, const char *text, size_t len,
                          const char *arch_override, config_skip_fn skip, void *skip_user, fg_config *out,
                          fg_error *err) {
    if (out == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "config: the output pointer must not be NULL");
    memset(out, 0, sizeof *out);
    if (path == NULL && (chunkname == NULL || (text == NULL && len > 0)))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "config: chunkname and text must not be NULL");
    cfg_build *b = fg_calloc(1, sizeof *b); /* on the heap: the override list is large for a stack frame */
    if (b == NULL)
        return fg_fail(err, FG_ERR_NO_MEMORY, "config: out of memory");
    b->skip = skip;
    b->skip_user = skip_user;
    fg_status st = FG_OK;
    if (arch_override != NULL)
        st = cfg_parse_override(arch_override, &b->arch_override, err);
    if (st == FG_OK)
        st = tile_policy_init_default(&b->policy, err);
    if (st == FG_OK)
        st = path ? lua_sandbox_run_file(path, cfg_setup, NULL, b, err)
                  : lua_sandbox_run(chunkname, text, len, cfg_setup, NULL, b, err);
    const char *name = path ? path : chunkname;
    if (st == FG_OK && b->count == 0)
        st = fg_fail(err, FG_ERR_CONFIG, "%s: the config lists no variants (call variants { ... } at least once)",
                     name);
    if (st == FG_OK)
        st = cfg_finish(name, b, out, err);
    tile_policy_free(&b->policy); /* emptied by cfg_finish on success */
    cfg_mod_files_free(b);
    free(b->items);
    free(b);
    return st;
}

fg_status config_load_file(const char *path, const char *arch_override, fg_config *out, fg_error *err) {
    if (path == NULL) {
        if (out)
            memset(out, 0, sizeof *out);
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "config_load_file: path must not be NULL");
    }
    return cfg_load(path, NULL, NULL, 0, arch_override, NULL, NULL, out, err);
}

fg_status config_load_file_skipping(const char *path, const char *arch_override, config_skip_fn skip, void *user,
                                    fg_config *out, fg_error *err) {
    if (path == NULL) {
        if (out)
            memset(out, 0, sizeof *out);
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "config_load_file_skipping: path must not be NULL");
    }
    return cfg_load(path, NULL, NULL, 0, arch_override, skip, user, out, err);
}

fg_status config_load_string(const char *chunkname, const char *text, size_t len, const char *arch_override,
                             fg_config *out, fg_error *err) {
    return cfg_load(NULL, chunkname, text, len, arch_override, NULL, NULL, out, err);
}

void config_free(fg_config *cfg) {
    if (cfg == NULL)
        return;
    free(cfg->variants);
    tile_policy_free(&cfg->policy);
    memset(cfg, 0, sizeof *cfg);
}
