/* mod_trace.c: a mod's Lua text to its tree (mod.h, "mod_trace.c").
 *
 * The steps: mod_scan refuses control flow in the text (mod_scan.c); the chunk runs in the sandbox with the
 * global `fg` library (mod_build.c); after it (mt_finish) the aux table is read, sorted and its arrays made
 * globals, then score_mod and mask_mod are each called once with symbolic arguments, under the sandbox's
 * limits, and the nodes their results reach are copied into the fg_mod.
 *
 * The builder keeps every node the trace makes, dead ones included (a value computed and never used), up to
 * MOD_BUILD_MAX; the tree keeps the nodes the results reach, numbered in post-order from score_mod's result,
 * then mask_mod's, so it depends neither on the order the text built things in nor on dead code. Nothing of
 * the text reaches the tree but the numbers mod_build.c reads and the aux names, checked against
 * [A-Za-z_][A-Za-z0-9_]{0,30}. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>
#include <lua.h>

#include "generator/mod.h"
#include "generator/mod_build.h"
#include "generator/mod_scan.h"
#include "core/alloc.h"
#include "core/files.h"
#include "core/lua_sandbox.h"

#define MT_FILE_MAX (1u << 20) /* the largest mod file read: a mod is a few lines */

/* Raises "chunk:line: message" at `line` of the chunk (line 0, or a chunk name not yet known: "chunk: message";
 * the sandbox writes the full name in either case). For refusals found after the fact (a function's result,
 * the aux table), where no Lua code of the chunk is running to take the position from. Does not return. */
static int mt_raise_at(lua_State *L, const mod_builder *B, int line, const char *fmt, ...) FG_PRINTF(4, 5);
static int mt_raise_at(lua_State *L, const mod_builder *B, int line, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0 && B->short_src[0])
        lua_pushfstring(L, "%s:%d: %s", B->short_src, line, msg);
    else
        lua_pushstring(L, msg); /* the sandbox's handler prefixes the chunk's name */
    return lua_error(L);
}

/* Whether name (len bytes) is an aux name: [A-Za-z_][A-Za-z0-9_]*, shorter than MOD_NAME_MAX. */
static int mt_name_ok(const char *name, size_t len) {
    if (len == 0 || len >= MOD_NAME_MAX || (name[0] >= '0' && name[0] <= '9'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}

/* Pushes the global `name`, read raw from the environment at env (a chunk may give _ENV a metatable). */
static int mt_get_global(lua_State *L, int env, const char *name) {
    lua_pushstring(L, name);
    return lua_rawget(L, env);
}

/* Writes name (len bytes, at most 40 shown) into buf for a message, bytes other than printable ASCII as '?'. */
static const char *mt_shown_name(const char *name, size_t len, char *buf, size_t n) {
    size_t k = 0;
    for (; k < len && k < 40 && k + 1 < n; k++)
        buf[k] = name[k] >= 0x20 && name[k] < 0x7f ? name[k] : '?';
    buf[k] = '\0';
    return buf;
}

/* Reads the global aux table (env at index env): each entry name = fg.aux(...), at most MOD_MAX_AUX, names
 * sorted by strcmp into B->result.aux; each declaration learns its slot and becomes the global of its name. */
static void mt_read_aux(lua_State *L, mod_builder *B, int env) {
    char got[64], shown[48];
    int t = mt_get_global(L, env, "aux");
    int tab = lua_gettop(L);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    if (t != LUA_TTABLE)
        mt_raise_at(L, B, 0, "the global aux must be a table of name = fg.aux(dtype, rank), got %s",
                    mod_build_describe(L, tab, got, sizeof got));
    mod_decl *decls[MOD_MAX_AUX];
    mod_aux *aux = B->result.aux;
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, tab)) {
        mod_decl *d = mod_build_decl(L, -1);
        if (lua_type(L, -2) != LUA_TSTRING)
            mt_raise_at(L, B, d ? d->line : 0, "the aux table's keys are the arrays' names (aux = { doc = "
                        "fg.aux(\"i32\", 1) }), got a %s key", luaL_typename(L, -2));
        size_t len;
        const char *name = lua_tolstring(L, -2, &len);
        if (d == NULL)
            mt_raise_at(L, B, 0, "aux['%s'] must be an array's declaration, fg.aux(dtype, rank), got %s",
                        mt_shown_name(name, len, shown, sizeof shown), mod_build_describe(L, -1, got, sizeof got));
        if (!mt_name_ok(name, len))
            mt_raise_at(L, B, d->line, "the aux name '%s' is not an identifier of at most %d bytes "
                        "([A-Za-z_][A-Za-z0-9_]*)", mt_shown_name(name, len, shown, sizeof shown), MOD_NAME_MAX - 1);
        if (n == MOD_MAX_AUX)
            mt_raise_at(L, B, d->line, "the aux table declares more than %d arrays, the most a mod may pass",
                        MOD_MAX_AUX);
        int k = n++; /* insertion into the names' order */
        while (k > 0 && strcmp(aux[k - 1].name, name) > 0) {
            aux[k] = aux[k - 1];
            decls[k] = decls[k - 1];
            k--;
        }
        memset(&aux[k], 0, sizeof aux[k]);
        memcpy(aux[k].name, name, len);
        aux[k].is_int = d->is_int;
        aux[k].rank = d->rank;
        aux[k].trainable = d->trainable;
        decls[k] = d;
        lua_pop(L, 1);
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (decls[i] == decls[j])
                mt_raise_at(L, B, decls[i]->line, "one fg.aux declaration is named twice in the aux table ('%s' "
                            "and '%s'): declare each array once", aux[j].name, aux[i].name);
    for (int i = 0; i < n; i++) {
        decls[i]->slot = i;
        mt_get_global(L, env, aux[i].name);
        int taken = !lua_isnil(L, -1) && mod_build_decl(L, -1) != decls[i];
        lua_pop(L, 1);
        if (taken)
            mt_raise_at(L, B, decls[i]->line, "the aux name '%s' is already a global of the chunk or the sandbox: "
                        "name the array otherwise", aux[i].name);
        lua_pushstring(L, aux[i].name); /* env[name] = aux[name] */
        lua_pushstring(L, aux[i].name);
        lua_rawget(L, tab);
        lua_rawset(L, env);
    }
    B->result.n_aux = n;
    lua_pop(L, 1);
}

/* Checks the global `name` (score_mod or mask_mod) at the top of the stack: a function of the chunk (1), or
 * nil (0); raises for anything else. */
static int mt_check_fn(lua_State *L, mod_builder *B, const char *name, const char *form) {
    char got[64];
    int t = lua_type(L, -1);
    if (t == LUA_TNIL)
        return 0;
    if (t != LUA_TFUNCTION || lua_iscfunction(L, -1))
        mt_raise_at(L, B, 0, "%s must be a function written in the chunk (%s = function%s ... end), got %s", name,
                    name, form, t == LUA_TFUNCTION ? "a library function" : mod_build_describe(L, -1, got, sizeof got));
    lua_Debug ar;
    lua_pushvalue(L, -1);
    if (lua_getinfo(L, ">S", &ar))
        snprintf(B->short_src, sizeof B->short_src, "%s", ar.short_src);
    return 1;
}

/* Calls the mod function at the top of the stack (popping it) with the symbolic arguments (score_mod: s, b,
 * h, q, kv; mask_mod: b, h, q, kv) and returns its result's node: a float for score_mod (an int made float,
 * a Lua number a constant), a bool for mask_mod. Refusals of the result name the line the function starts
 * at; *line is set to it. */
static int mt_trace_fn(lua_State *L, mod_builder *B, int is_score, int *line) {
    const char *name = is_score ? "score_mod" : "mask_mod";
    lua_Debug ar;
    lua_pushvalue(L, -1);
    *line = lua_getinfo(L, ">S", &ar) ? ar.linedefined : 0;
    int base = lua_gettop(L) - 1;
    if (is_score)
        mod_build_push(L, mod_build_node(L, B, MOD_ARG, MOD_T_FLOAT, -1, -1, -1, MOD_ARG_S, 0.0));
    for (int arg = MOD_ARG_B; arg <= MOD_ARG_KV; arg++)
        mod_build_push(L, mod_build_node(L, B, MOD_ARG, MOD_T_INT, -1, -1, -1, arg, 0.0));
    B->tracing = 1;
    lua_call(L, is_score ? 5 : 4, LUA_MULTRET);
    B->tracing = 0;
    int nres = lua_gettop(L) - base;
    if (nres == 0)
        mt_raise_at(L, B, *line, "%s returned nothing: it returns %s", name,
                    is_score ? "the new score, as in return s + bias" : "a bool, true where the key is kept");
    if (nres > 1)
        mt_raise_at(L, B, *line, "%s returned %d values; it returns one", name, nres);
    int expr = mod_build_expr(L, -1), t = lua_type(L, -1), node;
    if (expr < 0 && t == LUA_TBOOLEAN)
        mt_raise_at(L, B, *line, "%s returned the Lua boolean %s: %s", name, lua_toboolean(L, -1) ? "true" : "false",
                    is_score ? "a score is a number" : "a constant mask is not a mask; use fg.eq, fg.lt, ... (or "
                    "leave mask_mod out)");
    if (expr < 0 && (t != LUA_TNUMBER || !is_score))
        mt_raise_at(L, B, *line, "%s returned %s%s: it returns %s", name, t == LUA_TNUMBER ? "the number " : "a ",
                    t == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1),
                    is_score ? "the new score (a float expression)"
                             : "a bool expression, true where the key is kept (fg.eq, fg.le, fg.and_, ...)");
    if (expr < 0) { /* score_mod returned a Lua number: a constant score, float */
        double v = lua_tonumber(L, -1);
        if (!isfinite(v) || fabs(v) > FLT_MAX)
            mt_raise_at(L, B, *line, "score_mod returned the number %s, not a finite fp32 value",
                        lua_tostring(L, -1));
        node = mod_build_node(L, B, MOD_CONST, MOD_T_FLOAT, -1, -1, -1, -1, v);
    } else if (is_score) {
        int type = B->nodes[expr].type;
        if (type == MOD_T_BOOL)
            mt_raise_at(L, B, *line, "score_mod returned a bool (a comparison or logic): a score is a number; hide "
                        "keys from mask_mod, or choose a score with fg.where(c, a, b)");
        node = type == MOD_T_FLOAT ? expr : mod_build_node(L, B, MOD_FLOAT, MOD_T_FLOAT, expr, -1, -1, -1, 0.0);
    } else {
        node = expr;
        if (B->nodes[node].type != MOD_T_BOOL)
            mt_raise_at(L, B, *line, "mask_mod returned %s expression: a mask is a bool, true where the key is kept "
                        "(fg.eq, fg.le, fg.and_, ...)", mod_build_type_names[B->nodes[node].type]);
        if (B->uses_s[node])
            mt_raise_at(L, B, *line, "mask_mod's result depends on s, the score, which a mask does not see (a "
                        "value built in score_mod reached it through a global or an upvalue)");
    }
    lua_settop(L, base);
    return node;
}

/* Copies node i of the builder, and the nodes it depends on first, into the tree (map: builder index to
 * tree index, -1 until copied). Returns its tree index, or -1 when the tree is full. */
static int mt_copy(const mod_builder *B, int i, int16_t *map, fg_mod *m) {
    if (map[i] >= 0)
        return map[i];
    mod_node n = B->nodes[i];
    int16_t *operand[3] = {&n.a, &n.b, &n.c};
    for (int k = 0; k < 3; k++)
        if (*operand[k] >= 0) {
            int c = mt_copy(B, *operand[k], map, m);
            if (c < 0)
                return -1;
            *operand[k] = (int16_t)c;
        }
    if (m->n_nodes == MOD_MAX_NODES)
        return -1;
    m->nodes[m->n_nodes] = n;
    map[i] = (int16_t)m->n_nodes;
    return m->n_nodes++;
}

/* Setup: the global fg library, bound to the builder. Raises Lua errors (memory). */
static int mt_setup(lua_State *L, void *user) {
    mod_build_install(L, user);
    return 0;
}

/* Finish: the two functions checked, the aux table read, score_mod then mask_mod traced, the tree copied. */
static int mt_finish(lua_State *L, void *user) {
    mod_builder *B = user;
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    int env = lua_gettop(L);
    static const char *const names[2] = {"score_mod", "mask_mod"};
    static const char *const forms[2] = {"(s, b, h, q, kv)", "(b, h, q, kv)"};
    int has[2];
    for (int k = 0; k < 2; k++) {
        mt_get_global(L, env, names[k]);
        has[k] = mt_check_fn(L, B, names[k], forms[k]);
    }
    if (!has[0] && !has[1])
        mt_raise_at(L, B, 0, "the mod defines neither score_mod nor mask_mod (it sets at least one of the two "
                    "globals to a function)");
    mt_read_aux(L, B, env);
    int roots[2] = {-1, -1}, lines[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        if (has[k]) {
            lua_pushvalue(L, env + 1 + k);
            roots[k] = mt_trace_fn(L, B, k == 0, &lines[k]);
        }
    int16_t map[MOD_BUILD_MAX];
    memset(map, 0xff, sizeof map);
    fg_mod *m = &B->result;
    for (int k = 0; k < 2; k++) {
        if (roots[k] < 0)
            continue;
        int i = mt_copy(B, roots[k], map, m);
        if (i < 0)
            mt_raise_at(L, B, lines[k], "%s's result needs more than %d expression nodes (shared subexpressions "
                        "count once): a loop that builds a long chain?", names[k], MOD_MAX_NODES);
        *(k == 0 ? &m->score : &m->mask) = i;
    }
    lua_settop(L, env - 1);
    return 0;
}

/* The empty tree a failed trace leaves. */
static void mt_empty(fg_mod *m) {
    memset(m, 0, sizeof *m);
    m->score = m->mask = -1;
}

fg_status mod_trace(const char *chunkname, const char *text, size_t len, fg_mod *out, fg_error *err) {
    if (out == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_trace: the output pointer must not be NULL");
    mt_empty(out);
    if (chunkname == NULL || (text == NULL && len > 0))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_trace: chunkname and text must not be NULL");
    const char *why;
    int line = len > 0 && text[0] == LUA_SIGNATURE[0] ? 0 : mod_scan(text ? text : "", len, &why);
    if (line > 0) /* a bytecode chunk is left to the sandbox, which refuses it */
        return fg_fail(err, FG_ERR_CONFIG, "%s:%d: %s", chunkname, line, why);
    mod_builder *B = fg_malloc(sizeof *B); /* on the heap: the nodes take tens of KiB */
    if (B == NULL)
        return fg_fail(err, FG_ERR_NO_MEMORY, "%s: out of memory for the mod's trace", chunkname);
    mod_build_init(B);
    fg_status st = lua_sandbox_run(chunkname, text, len, mt_setup, mt_finish, B, err);
    if (st == FG_OK)
        *out = B->result;
    free(B);
    return st;
}

fg_status mod_trace_file(const char *path, fg_mod *out, fg_error *err) {
    if (out == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_trace_file: the output pointer must not be NULL");
    mt_empty(out);
    if (path == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "mod_trace_file: path must not be NULL");
    uint8_t *buf;
    size_t len;
    fg_status st = fg_read_file_max(path, MT_FILE_MAX, &buf, &len, err);
    if (st != FG_OK) {
        struct stat fst;
        if (stat(path, &fst) == 0 && S_ISREG(fst.st_mode) && (uint64_t)fst.st_size > MT_FILE_MAX)
            return fg_fail(err, FG_ERR_CONFIG, "%s: a mod file is at most %u MiB", path, MT_FILE_MAX >> 20);
        return st;
    }
    st = mod_trace(path, (const char *)buf, len, out, err);
    free(buf);
    return st;
}
