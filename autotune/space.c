/* space.c: tuning spaces (configs/tune_*.lua) -> problems with their candidate specs (see space.h).
 *
 * The chunk runs in the config sandbox with one host function, space{}. Each call reads and checks its
 * table (raw access only, so a space's metatables never run inside it), expands the two cartesian
 * products and appends the problems to a C-side builder at once: a problem joins the builder before
 * anything that can raise a Lua error touches it, so a failed load frees everything. Candidates are
 * validated as they are made, with the caller's arch, because what is refused differs between GPUs
 * (shared memory, accelerated targets). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "core/lua_sandbox.h"
#include "autotune/space.h"
#include "core/alloc.h"

#define SP_LIST_MAX 128 /* most values one field may list */

/* One field's values as listed (a scalar is a list of one), repeated values dropped. */
typedef struct sp_list {
    int n;                  /* number of values; 0 when the field is absent */
    long long v[SP_LIST_MAX]; /* the values: integers, booleans as 0/1, kinds and dtypes as enum values */
} sp_list;

/* How a field's values are read. */
typedef enum sp_type {
    SP_INT,   /* a positive integer */
    SP_BOOL,  /* true/false, or 0/1 */
    SP_KIND,  /* a kernel family name: "fwd" */
    SP_DTYPE, /* "fp16", "bf16", ...: an fg_dtype */
    SP_FAMILY /* "mma" or "wgmma": FG_FAMILY_MMA or FG_FAMILY_WGMMA */
} sp_type;

/* What space{} builds while the chunk runs. */
typedef struct sp_build {
    int arch;                  /* the target's compute capability times ten */
    int accel;                 /* 1 for the 'a' target */
    fg_tune_problem *problems; /* in the order listed */
    int count;                 /* problems in use */
    int cap;                   /* problems allocated */
    int total;                 /* candidates over all problems */
    int refused;               /* refused candidates over all problems */
} sp_build;

/* The fields of space{}, in the order of sp_space's reading (class fields, then candidate fields). */
enum { F_KIND, F_DTYPE, F_HEAD_DIM, F_CAUSAL, F_GQA, F_SEQLEN_Q, F_SEQLEN_K, F_BATCH_HEADS,
       F_BLOCK_M, F_BLOCK_N, F_WARPS, F_STAGES, F_SPLITS, F_TMA, F_FAMILY, F_COUNT };
static const char *const sp_fields[F_COUNT + 1] = {"kind",     "dtype",    "head_dim",    "causal",  "gqa",
                                                   "seqlen_q", "seqlen_k", "batch_heads", "block_m", "block_n",
                                                   "warps",    "stages",   "splits",      "tma",     "family", NULL};
static const sp_type sp_types[F_COUNT] = {SP_KIND, SP_DTYPE, SP_INT, SP_BOOL, SP_INT, SP_INT, SP_INT, SP_INT,
                                          SP_INT,  SP_INT,   SP_INT, SP_INT,  SP_INT, SP_BOOL, SP_FAMILY};

/* Reads the scalar at idx as a value of `type`; `pos` is the list position (0 for a scalar). */
static long long sp_scalar(lua_State *L, int idx, const char *fn, const char *field, sp_type type, int pos) {
    fg_error e;
    fg_error_clear(&e);
    switch (type) {
    case SP_INT:
        return tunedb_lua_int(L, idx, fn, field, pos, 1, INT_MAX);
    case SP_BOOL:
        return tunedb_lua_bool(L, idx, fn, field, pos);
    case SP_KIND: {
        const char *s = tunedb_lua_string(L, idx, fn, field, pos, 64);
        if (strcmp(s, "fwd") == 0) return FG_KIND_FWD;
        if (strcmp(s, "bwd") == 0) return FG_KIND_BWD;
        if (strcmp(s, "serve") == 0) return FG_KIND_SERVE;
        lua_sandbox_raise(L, fn, "field 'kind' must name a kernel family (\"fwd\", \"bwd\" or \"serve\"), got \"%s\"", s);
        return 0;
    }
    case SP_FAMILY: {
        const char *s = tunedb_lua_string(L, idx, fn, field, pos, 64);
        if (strcmp(s, "mma") == 0) return FG_FAMILY_MMA;
        if (strcmp(s, "wgmma") == 0) return FG_FAMILY_WGMMA;
        lua_sandbox_raise(L, fn, "field 'family' must be \"mma\" (the mma.sync kernels) or \"wgmma\" (sm_90a), got \"%s\"", s);
        return 0;
    }
    case SP_DTYPE: {
        fg_dtype d = FG_DTYPE_F16;
        if (dtype_parse(tunedb_lua_string(L, idx, fn, field, pos, 64), &d, &e) != FG_OK)
            lua_sandbox_raise(L, fn, "field 'dtype': %s", e.msg);
        return d;
    }
    }
    return 0;
}

/* Reads field `field` of the argument table into out: absent -> n = 0; a scalar -> one value; a list
 * (a non-empty Lua array, keys 1..n only, at most SP_LIST_MAX values) -> its values, repeats dropped. */
static void sp_read(lua_State *L, const char *fn, const char *field, sp_type type, sp_list *out) {
    out->n = 0;
    lua_pushstring(L, field);
    lua_rawget(L, 1);
    int val = lua_gettop(L);
    if (lua_isnil(L, val)) {
        lua_pop(L, 1);
        return;
    }
    if (lua_type(L, val) != LUA_TTABLE) {
        out->v[out->n++] = sp_scalar(L, val, fn, field, type, 0);
        lua_pop(L, 1);
        return;
    }
    lua_Integer n = (lua_Integer)lua_sandbox_list_length(L, val, fn, field, "a value or a list of values");
    if (n > SP_LIST_MAX)
        lua_sandbox_raise(L, fn, "field '%s' lists %lld values; at most %d are allowed", field, (long long)n,
                         SP_LIST_MAX);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, val, i);
        if (lua_type(L, -1) == LUA_TTABLE)
            lua_sandbox_raise(L, fn, "field '%s' must be a value or a list of values, got a nested table (list item %lld)",
                             field, (long long)i);
        long long v = sp_scalar(L, -1, fn, field, type, (int)i);
        int repeat = 0;
        for (int k = 0; k < out->n && !repeat; k++)
            repeat = out->v[k] == v;
        if (!repeat)
            out->v[out->n++] = v;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* The line of the Lua code calling the running host function (0 if unknown). */
static int sp_call_line(lua_State *L) {
    lua_Debug ar;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "l", &ar) && ar.currentline > 0)
        return ar.currentline;
    return 0;
}

/* Fills p's candidates: the product of the tile lists (and for kind "serve" the split counts), each validated
 * for the builder's arch. */
static void sp_fill_candidates(sp_build *b, fg_tune_problem *p, const sp_list *f) {
    for (int i = 0; i < f[F_BLOCK_M].n; i++)
        for (int j = 0; j < f[F_BLOCK_N].n; j++)
            for (int k = 0; k < f[F_WARPS].n; k++)
                for (int s = 0; s < f[F_STAGES].n; s++)
                for (int x = 0; x < f[F_SPLITS].n; x++)
                for (int y = 0; y < f[F_TMA].n; y++) {
                    fg_tune_candidate *c = &p->cands[p->ncands++];
                    memset(c, 0, sizeof *c);
                    c->spec.kind = p->cls.kind;
                    c->spec.arch = b->arch;
                    /* The wgmma family is the sm_90a target's; the mma.sync family on Hopper is sm_90. */
                    c->spec.arch_accel = f[F_FAMILY].v[0] == FG_FAMILY_WGMMA ? 1 : (b->arch == 90 ? 0 : b->accel);
                    /* The backward and the serving kernels are the mma.sync family on every arch ('a' targets
                     * included: bwd_arch, serve_tiles). */
                    if (p->cls.kind == FG_KIND_BWD || p->cls.kind == FG_KIND_SERVE) c->spec.arch_accel = 0;
                    c->spec.dtype = p->cls.dtype;
                    /* FP8 classes are timed with bf16 output, the spec's default (a call with fp16 O takes
                     * the same tiles: the output type changes only the epilogue's conversion). */
                    c->spec.out_dtype = dtype_is_fp8(p->cls.dtype) ? FG_DTYPE_BF16 : p->cls.dtype;
                    c->spec.head_dim = p->cls.head_dim;
                    c->spec.causal = p->cls.causal;
                    c->spec.block_m = (int)f[F_BLOCK_M].v[i];
                    c->spec.block_n = (int)f[F_BLOCK_N].v[j];
                    c->spec.warps = (int)f[F_WARPS].v[k];
                    c->spec.stages = (int)f[F_STAGES].v[s];
                    c->spec.splits = (int)f[F_SPLITS].v[x];
                    c->spec.tma = (int)f[F_TMA].v[y];
                    fg_error e;
                    fg_error_clear(&e);
                    c->status = spec_validate(&c->spec, &e);
                    if (c->status != FG_OK) {
                        snprintf(c->why, sizeof c->why, "%.*s", (int)sizeof c->why - 1, e.msg); /* a rule sentence fits */
                        p->nrefused++;
                    }
                }
    b->total += p->ncands;
    b->refused += p->nrefused;
}

/* space { ... }: appends the product of problems, each with the product of candidates (see space.h). */
static int sp_space(lua_State *L) {
    static const char fn[] = "space";
    sp_build *b = lua_touserdata(L, lua_upvalueindex(1));
    luaL_checkstack(L, 16, "space");
    lua_sandbox_check_table(L, 1, fn, NULL, sp_fields);
    sp_list *f = lua_newuserdatauv(L, F_COUNT * sizeof *f, 0); /* ~12 KiB: on the Lua heap, not the C stack */
    for (int i = 0; i < F_COUNT; i++)
        sp_read(L, fn, sp_fields[i], sp_types[i], &f[i]);
    static const int required[] = {F_DTYPE, F_HEAD_DIM, F_SEQLEN_Q, F_BATCH_HEADS, F_BLOCK_M, F_BLOCK_N, F_WARPS, F_STAGES};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (f[required[i]].n == 0)
            lua_sandbox_raise(L, fn, "field '%s' is required", sp_fields[required[i]]);
    if (f[F_KIND].n == 0)
        f[F_KIND].v[f[F_KIND].n++] = FG_KIND_FWD;
    if (f[F_FAMILY].n == 0)
        f[F_FAMILY].v[f[F_FAMILY].n++] = FG_FAMILY_MMA;
    if (f[F_FAMILY].n > 1)
        lua_sandbox_raise(L, fn, "field 'family' takes one value (\"mma\" or \"wgmma\"): their tiles differ, so "
                                 "list each family in its own space{}");
    for (int i = 0; i < f[F_KIND].n; i++) {
        if (f[F_KIND].v[i] != FG_KIND_BWD) continue;
        /* The sm_90a backward has one tile (bwd_wgmma), chosen by the runtime where it applies: nothing to tune. */
        if (f[F_FAMILY].v[0] == FG_FAMILY_WGMMA)
            lua_sandbox_raise(L, fn, "kind \"bwd\" takes family \"mma\" only: the sm_90a (wgmma) backward has a "
                                    "single tile; the mma.sync backward's tiles are what a backward space times");
        for (int j = 0; j < f[F_DTYPE].n; j++)
            if (f[F_DTYPE].v[j] != FG_DTYPE_F16 && f[F_DTYPE].v[j] != FG_DTYPE_BF16)
                lua_sandbox_raise(L, fn, "kind \"bwd\" takes dtype \"fp16\" or \"bf16\" (the backward is 16-bit), got "
                                        "\"%s\"", dtype_name((fg_dtype)f[F_DTYPE].v[j]));
    }
    for (int i = 0; i < f[F_KIND].n; i++) {
        if (f[F_KIND].v[i] != FG_KIND_SERVE) continue;
        if (f[F_FAMILY].v[0] == FG_FAMILY_WGMMA)
            lua_sandbox_raise(L, fn, "kind \"serve\" takes family \"mma\" only: the serving kernels are the mma.sync family");
        if (f[F_SPLITS].n == 0)
            lua_sandbox_raise(L, fn, "kind \"serve\" needs field 'splits' (the key splits to time, for example {1, 2, 4, 8})");
    }
    if (f[F_SPLITS].n > 0)
        for (int i = 0; i < f[F_KIND].n; i++)
            if (f[F_KIND].v[i] != FG_KIND_SERVE)
                lua_sandbox_raise(L, fn, "field 'splits' is for kind \"serve\" only");
    if (f[F_SPLITS].n == 0)
        f[F_SPLITS].v[f[F_SPLITS].n++] = 0;
    if (f[F_TMA].n > 0)
        for (int i = 0; i < f[F_KIND].n; i++)
            if (f[F_KIND].v[i] != FG_KIND_SERVE)
                lua_sandbox_raise(L, fn, "field 'tma' is for kind \"serve\" only (the backward's TMA loads are the "
                                        "runtime's choice)");
    if (f[F_TMA].n == 0)
        f[F_TMA].v[f[F_TMA].n++] = 0;
    if (f[F_CAUSAL].n == 0)
        f[F_CAUSAL].v[f[F_CAUSAL].n++] = 0;
    if (f[F_GQA].n == 0)
        f[F_GQA].v[f[F_GQA].n++] = 1;
    int paired = f[F_SEQLEN_K].n == 0; /* seqlen_k absent: each seqlen_q with itself */
    long long pairs = paired ? f[F_SEQLEN_Q].n : (long long)f[F_SEQLEN_Q].n * f[F_SEQLEN_K].n;
    long long nprob = pairs, ncand = 1; /* each factor is at most 128: no overflow below */
    for (int i = F_KIND; i <= F_BATCH_HEADS; i++)
        if (i != F_SEQLEN_Q && i != F_SEQLEN_K)
            nprob *= f[i].n;
    for (int i = F_BLOCK_M; i <= F_TMA; i++)
        ncand *= f[i].n;
    if (nprob > FG_SPACE_MAX_PROBLEMS - b->count)
        lua_sandbox_raise(L, fn, "this call lists %lld problems after %d earlier ones; a space may list at most %d",
                         nprob, b->count, FG_SPACE_MAX_PROBLEMS);
    if (nprob * ncand > FG_SPACE_MAX_CANDIDATES - b->total)
        lua_sandbox_raise(L, fn, "this call lists %lld problems x %lld candidates after %d earlier candidates; a space "
                                "may list at most %d", nprob, ncand, b->total, FG_SPACE_MAX_CANDIDATES);
    if (b->count + nprob > b->cap) {
        long long want = b->cap ? b->cap : 16;
        while (want < b->count + nprob)
            want *= 2;
        fg_tune_problem *grown = fg_realloc(b->problems, (size_t)want * sizeof *grown);
        if (grown == NULL)
            lua_sandbox_raise(L, fn, "out of host memory for %lld problems", b->count + nprob);
        b->problems = grown;
        b->cap = (int)want;
    }
    int line = sp_call_line(L);
    /* Mixed radix over kind, dtype, head_dim, causal, gqa, (seqlen_q, seqlen_k), batch_heads; last fastest. */
    int radix[7] = {f[F_KIND].n, f[F_DTYPE].n, f[F_HEAD_DIM].n, f[F_CAUSAL].n, f[F_GQA].n, (int)pairs, f[F_BATCH_HEADS].n};
    for (long long k = 0; k < nprob; k++) {
        int idx[7];
        long long r = k;
        for (int i = 6; i >= 0; i--) {
            idx[i] = (int)(r % radix[i]);
            r /= radix[i];
        }
        fg_tune_problem p;
        memset(&p, 0, sizeof p);
        p.cls.kind = (fg_kind)f[F_KIND].v[idx[0]];
        p.cls.dtype = (fg_dtype)f[F_DTYPE].v[idx[1]];
        p.cls.head_dim = (int)f[F_HEAD_DIM].v[idx[2]];
        p.cls.causal = (int)f[F_CAUSAL].v[idx[3]];
        p.cls.gqa = (int)f[F_GQA].v[idx[4]];
        p.seqlen_q = (int)f[F_SEQLEN_Q].v[paired ? idx[5] : idx[5] / f[F_SEQLEN_K].n];
        p.seqlen_k = paired ? p.seqlen_q : (int)f[F_SEQLEN_K].v[idx[5] % f[F_SEQLEN_K].n];
        p.batch_heads = (int)f[F_BATCH_HEADS].v[idx[6]];
        p.cls.seqlen_q = tunedb_bucket(p.seqlen_q);
        p.cls.seqlen_k = tunedb_bucket(p.seqlen_k);
        p.cls.batch_heads = tunedb_bucket(p.batch_heads);
        p.line = line;
        if (p.batch_heads % p.cls.gqa != 0)
            lua_sandbox_raise(L, fn, "batch_heads %d is not a multiple of gqa %d: heads_q must be a whole number of "
                                    "K/V heads", p.batch_heads, p.cls.gqa);
        for (int i = 0; i < b->count; i++) {
            const fg_tune_class *o = &b->problems[i].cls;
            if (o->kind == p.cls.kind && o->dtype == p.cls.dtype && o->head_dim == p.cls.head_dim &&
                o->causal == p.cls.causal && o->gqa == p.cls.gqa && o->seqlen_q == p.cls.seqlen_q &&
                o->seqlen_k == p.cls.seqlen_k && o->batch_heads == p.cls.batch_heads)
                lua_sandbox_raise(L, fn, "the problem %s%s head_dim %d%s gqa %d sq %d sk %d bh %d falls in the same "
                                        "class (buckets sq %lld sk %lld bh %lld) as one listed at line %d: list "
                                        "each bucket once",
                                 p.cls.kind == FG_KIND_BWD ? "bwd " : p.cls.kind == FG_KIND_SERVE ? "serve " : "", dtype_name(p.cls.dtype), p.cls.head_dim, p.cls.causal ? " causal" : "", p.cls.gqa,
                                 p.seqlen_q, p.seqlen_k, p.batch_heads, (long long)p.cls.seqlen_q,
                                 (long long)p.cls.seqlen_k, (long long)p.cls.batch_heads, b->problems[i].line);
        }
        p.cands = fg_calloc((size_t)ncand, sizeof *p.cands);
        if (p.cands == NULL)
            lua_sandbox_raise(L, fn, "out of host memory for %lld candidates", ncand);
        b->problems[b->count++] = p; /* owned by the builder from here: nothing below raises */
        sp_fill_candidates(b, &b->problems[b->count - 1], f);
    }
    return 0;
}

/* Sandbox setup callback: installs space as a global bound to the builder. */
static int sp_setup(lua_State *L, void *user) {
    lua_sandbox_bind(L, "space", sp_space, user);
    return 0;
}

/* Frees a builder's problems (each problem's candidates too). */
static void sp_free_problems(fg_tune_problem *problems, int count) {
    for (int i = 0; i < count; i++)
        free(problems[i].cands);
    free(problems);
}

/* The shared body of space_load and space_load_string (path != NULL: read the file). */
static fg_status sp_load(const char *path, const char *chunkname, const char *text, size_t len, int arch,
                         int arch_accel, fg_tune_space *out, fg_error *err) {
    if (out == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "space: the output pointer must not be NULL");
    memset(out, 0, sizeof *out);
    if (path == NULL && (chunkname == NULL || (text == NULL && len > 0)))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "space: chunkname and text must not be NULL");
    /* A spec every known target accepts, so a refusal can only be the arch's: better said once here than
     * as the reason on every candidate. */
    fg_spec probe = {.kind = FG_KIND_FWD, .arch = arch, .arch_accel = arch_accel != 0, .dtype = FG_DTYPE_F16,
                     .head_dim = 64, .block_m = 64, .block_n = 64, .warps = 4, .stages = 2, .causal = 0};
    if (spec_is_wgmma(&probe)) probe.warps = 8; /* that family's tile: a producer and one consumer warpgroup */
    fg_error e;
    fg_error_clear(&e);
    if (spec_validate(&probe, &e) != FG_OK)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "tuning space for sm_%d%s: %s", arch, arch_accel ? "a" : "", e.msg);
    sp_build b;
    memset(&b, 0, sizeof b);
    b.arch = arch;
    b.accel = arch_accel != 0;
    fg_status st = path ? lua_sandbox_run_file(path, sp_setup, NULL, &b, err)
                        : lua_sandbox_run(chunkname, text, len, sp_setup, NULL, &b, err);
    if (st == FG_OK && b.count == 0)
        st = fg_fail(err, FG_ERR_CONFIG, "%s: the tuning space lists no problems (call space { ... } at least once)",
                     path ? path : chunkname);
    if (st != FG_OK) {
        sp_free_problems(b.problems, b.count);
        return st;
    }
    out->problems = b.problems;
    out->count = b.count;
    out->total = b.total;
    out->refused = b.refused;
    return FG_OK;
}

fg_status space_load(const char *path, int arch, int arch_accel, fg_tune_space *out, fg_error *err) {
    if (path == NULL) {
        if (out)
            memset(out, 0, sizeof *out);
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "space_load: path must not be NULL");
    }
    return sp_load(path, NULL, NULL, 0, arch, arch_accel, out, err);
}

fg_status space_load_string(const char *chunkname, const char *text, size_t len, int arch, int arch_accel,
                            fg_tune_space *out, fg_error *err) {
    return sp_load(NULL, chunkname, text, len, arch, arch_accel, out, err);
}

void space_free(fg_tune_space *sp) {
    if (sp == NULL)
        return;
    sp_free_problems(sp->problems, sp->count);
    memset(sp, 0, sizeof *sp);
}
