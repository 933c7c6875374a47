/* mod_build.c: a mod's symbolic values and the `fg` library that builds its nodes (mod_build.h).
 *
 * A symbolic value is a full userdata holding one node's index in the trace's builder. The fg functions and
 * the value's arithmetic metamethods are C functions that check their operands' types, insert the
 * int-to-float promotions (an int meeting a float becomes a float), hash-cons the node they make and raise
 * at the line of the call when something is refused; Lua's other operators on a value (comparisons, .., ^,
 * bitwise, indexing, calls) raise with the sentence saying what to write instead.
 *
 * Nodes are built here, in C, rather than by a Lua prelude: each node is checked once, where it is made,
 * with its line; and Lua code cannot reach inside a full userdata (no rawget or pairs, no setmetatable, and
 * __metatable hides the metatable), so a mod can neither forge a node nor change one. The text reaches the
 * nodes only as numbers, read with lua_tointeger and lua_tonumber and range-checked: an int constant is a
 * 32-bit integer, a float constant finite and within fp32's range. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "generator/mod_build.h"
#include "core/lua_sandbox.h"

#define MB_EXPR_META "flashgen.mod.expr" /* registry names of the two userdata metatables */
#define MB_AUX_META "flashgen.mod.aux"

/* A symbolic value: the userdata's contents. */
typedef struct mb_expr {
    int node; /* its node in the builder */
} mb_expr;

/* How an operation types its operands and result. */
typedef enum mb_rule {
    MB_ARITH,   /* numbers, an int meeting a float made float; the result of their type (+ - * min max) */
    MB_FDIV,    /* numbers made float; a float (/) */
    MB_INTDIV,  /* ints, the divisor not the constant 0; an int (// %) */
    MB_SAME,    /* a number; its type (unary -, abs) */
    MB_FLOATFN, /* a number made float; a float (exp log tanh sqrt) */
    MB_TOFLOAT, /* an int made float; a float stays itself (fg.float) */
    MB_TOINT,   /* a float rounded down to an int; an int stays itself (fg.floor) */
    MB_CMP,     /* numbers, made one type; a bool */
    MB_LOGIC,   /* bools; a bool */
    MB_WHERE    /* a bool, then two numbers (made one type) or two bools; their type */
} mb_rule;

/* An operation a mod can write: an operator (through a metamethod) or an fg function. */
typedef struct mb_spec {
    const char *name; /* the metamethod ("__add") or the fg function's field ("eq") */
    const char *shown; /* how messages name it: "'+'", "fg.eq" */
    uint8_t op;       /* mod_op */
    uint8_t rule;     /* mb_rule */
    uint8_t nargs;    /* operands */
    uint8_t is_meta;  /* 1: a metamethod */
} mb_spec;

static const mb_spec mb_specs[] = {
    {"__add", "'+'", MOD_ADD, MB_ARITH, 2, 1},        {"__sub", "'-'", MOD_SUB, MB_ARITH, 2, 1},
    {"__mul", "'*'", MOD_MUL, MB_ARITH, 2, 1},        {"__div", "'/'", MOD_DIV, MB_FDIV, 2, 1},
    {"__idiv", "'//'", MOD_IDIV, MB_INTDIV, 2, 1},    {"__mod", "'%'", MOD_MOD, MB_INTDIV, 2, 1},
    {"__unm", "unary '-'", MOD_NEG, MB_SAME, 1, 1},   {"eq", "fg.eq", MOD_EQ, MB_CMP, 2, 0},
    {"ne", "fg.ne", MOD_NE, MB_CMP, 2, 0},            {"lt", "fg.lt", MOD_LT, MB_CMP, 2, 0},
    {"le", "fg.le", MOD_LE, MB_CMP, 2, 0},            {"gt", "fg.gt", MOD_GT, MB_CMP, 2, 0},
    {"ge", "fg.ge", MOD_GE, MB_CMP, 2, 0},            {"and_", "fg.and_", MOD_AND, MB_LOGIC, 2, 0},
    {"or_", "fg.or_", MOD_OR, MB_LOGIC, 2, 0},        {"not_", "fg.not_", MOD_NOT, MB_LOGIC, 1, 0},
    {"where", "fg.where", MOD_WHERE, MB_WHERE, 3, 0}, {"min", "fg.min", MOD_MIN, MB_ARITH, 2, 0},
    {"max", "fg.max", MOD_MAX, MB_ARITH, 2, 0},       {"abs", "fg.abs", MOD_ABS, MB_SAME, 1, 0},
    {"exp", "fg.exp", MOD_EXP, MB_FLOATFN, 1, 0},     {"log", "fg.log", MOD_LOG, MB_FLOATFN, 1, 0},
    {"tanh", "fg.tanh", MOD_TANH, MB_FLOATFN, 1, 0},  {"sqrt", "fg.sqrt", MOD_SQRT, MB_FLOATFN, 1, 0},
    {"float", "fg.float", MOD_FLOAT, MB_TOFLOAT, 1, 0}, {"floor", "fg.floor", MOD_FLOOR, MB_TOINT, 1, 0}};
#define MB_NSPECS ((int)(sizeof mb_specs / sizeof mb_specs[0]))

/* The metamethods of a symbolic value that only refuse, each with the sentence saying what to write. */
static const char *const mb_refusals[][2] = {
    {"__lt", "Lua's < and > give a plain boolean, not an expression: use fg.lt(a, b) or fg.gt(a, b)"},
    {"__le", "Lua's <= and >= give a plain boolean, not an expression: use fg.le(a, b) or fg.ge(a, b)"},
    {"__eq", "Lua's == and ~= compare objects, not values, on expressions: use fg.eq(a, b) or fg.ne(a, b)"},
    {"__concat", "'..' joins strings, and an expression is not text"},
    {"__call", "an expression is not a function and cannot be called"},
    {"__index", "an expression has no fields or methods: write fg.abs(x), not x:abs()"},
    {"__newindex", "an expression has no fields to set"},
    {"__len", "'#' takes the length of strings and tables, and an expression has none"},
    {"__close", "an expression cannot be a to-be-closed variable"},
    {"__pow", "'^' is not in the mod vocabulary: multiply (x * x), or write fg.exp(y * fg.log(x))"},
    {"__band", "bitwise operators are not in the mod vocabulary: use //, % and fg.where"},
    {"__bor", "bitwise operators are not in the mod vocabulary: use //, % and fg.where"},
    {"__bxor", "bitwise operators are not in the mod vocabulary: use //, % and fg.where"},
    {"__shl", "bitwise operators are not in the mod vocabulary: multiply or divide by a power of two"},
    {"__shr", "bitwise operators are not in the mod vocabulary: multiply or divide by a power of two"},
    {"__bnot", "bitwise operators are not in the mod vocabulary: use //, % and fg.where"}};
#define MB_NREFUSALS ((int)(sizeof mb_refusals / sizeof mb_refusals[0]))

/* The metamethods of an aux declaration, all refusing: reading an element is fg.load's. */
static const char *const mb_aux_refused[] = {"__index", "__newindex", "__call", "__len", "__close", "__add",
                                             "__sub", "__mul", "__div", "__idiv", "__mod", "__unm", "__pow",
                                             "__concat", "__lt", "__le", "__eq", NULL};

const char *const mod_build_type_names[3] = {"an int", "a float", "a bool"};

/* Raises "file:line: message" at the line of the Lua code calling the running C function, with the full
 * printf (luaL_error knows only a few conversions). Does not return. */
static int mb_error(lua_State *L, const char *fmt, ...) FG_PRINTF(2, 3);
static int mb_error(lua_State *L, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return luaL_error(L, "%s", msg);
}

const char *mod_build_describe(lua_State *L, int idx, char *buf, size_t n) {
    const char *d = lua_sandbox_describe(L, idx, buf, n);
    if (d == buf && !lua_isinteger(L, idx) && strspn(buf, "-0123456789") == strlen(buf))
        strncat(buf, ".0", n - strlen(buf) - 1);
    return d;
}

/* ---- building nodes ---- */

/* FNV-1a over the node's fields, the value by its bits. */
static uint32_t mb_hash(const mod_node *n) {
    uint64_t bits;
    memcpy(&bits, &n->value, sizeof bits);
    uint64_t h = 1469598103934665603ull;
    const uint64_t parts[] = {n->op, n->type, (uint16_t)n->a, (uint16_t)n->b, (uint16_t)n->c, (uint16_t)n->arg,
                              bits};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        h = (h ^ parts[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* Whether two nodes are alike: the same fields, the value compared bit for bit (0.0 and -0.0 differ). */
static int mb_same(const mod_node *x, const mod_node *y) {
    return x->op == y->op && x->type == y->type && x->a == y->a && x->b == y->b && x->c == y->c &&
           x->arg == y->arg && memcmp(&x->value, &y->value, sizeof x->value) == 0;
}

int mod_build_node(lua_State *L, mod_builder *B, int op, int type, int a, int b, int c, int arg, double value) {
    mod_node n;
    memset(&n, 0, sizeof n);
    n.op = (uint8_t)op;
    n.type = (uint8_t)type;
    n.a = (int16_t)a;
    n.b = (int16_t)b;
    n.c = (int16_t)c;
    n.arg = (int16_t)arg;
    n.value = value;
    uint32_t h = mb_hash(&n) % MOD_BUILD_HASH;
    while (B->hash[h] >= 0) {
        if (mb_same(&B->nodes[B->hash[h]], &n))
            return B->hash[h];
        h = (h + 1) % MOD_BUILD_HASH;
    }
    if (B->n == MOD_BUILD_MAX)
        return mb_error(L, "this mod builds more than %d expression nodes (its tree may hold %d): a loop that "
                           "builds a long chain?", MOD_BUILD_MAX, MOD_MAX_NODES);
    int i = B->n++;
    B->nodes[i] = n;
    B->uses_s[i] = (op == MOD_ARG && arg == MOD_ARG_S) || (a >= 0 && B->uses_s[a]) || (b >= 0 && B->uses_s[b]) ||
                   (c >= 0 && B->uses_s[c]);
    B->hash[h] = (int16_t)i;
    return i;
}

void mod_build_push(lua_State *L, int i) {
    mb_expr *e = lua_newuserdatauv(L, sizeof *e, 0);
    e->node = i;
    luaL_setmetatable(L, MB_EXPR_META);
}

/* An operand as read: a node, or a Lua number not yet made a constant (its type comes from its partner). */
typedef struct mb_val {
    int node;         /* the node, or -1 for a number */
    int type;         /* mod_type: a number's is int for a Lua integer, else float */
    lua_Integer ival; /* a Lua integer's value */
    double fval;      /* a Lua float's value (finite, in fp32's range) */
} mb_val;

/* Writes how messages name operand i (from 1) of spec sp: "the right operand of '+'", "argument 2 of fg.eq". */
static const char *mb_operand_name(const mb_spec *sp, int i, char *buf, size_t n) {
    if (sp->is_meta && sp->nargs == 2)
        snprintf(buf, n, "the %s operand of %s", i == 1 ? "left" : "right", sp->shown);
    else if (sp->is_meta)
        snprintf(buf, n, "the operand of %s", sp->shown);
    else
        snprintf(buf, n, "argument %d of %s", i, sp->shown);
    return buf;
}

/* Reads operand idx (stack index) of sp as a node or a number; raises for anything else, saying what it is. */
static mb_val mb_read(lua_State *L, const mb_spec *sp, int idx) {
    mb_val v = {-1, MOD_T_INT, 0, 0.0};
    char who[64], got[64];
    mb_operand_name(sp, idx, who, sizeof who);
    const mb_expr *e = luaL_testudata(L, idx, MB_EXPR_META);
    if (e != NULL) {
        v.node = e->node;
        return v; /* the caller reads the type from the node */
    }
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            v.ival = lua_tointeger(L, idx);
            return v;
        }
        v.type = MOD_T_FLOAT;
        v.fval = lua_tonumber(L, idx);
        if (!isfinite(v.fval))
            mb_error(L, "%s is %s, and a mod's constants are finite numbers", who,
                     mod_build_describe(L, idx, got, sizeof got));
        if (fabs(v.fval) > FLT_MAX)
            mb_error(L, "%s is %s, outside fp32's range (the kernels compute in fp32)", who,
                     mod_build_describe(L, idx, got, sizeof got));
        return v;
    case LUA_TBOOLEAN:
        mb_error(L, "%s is the Lua boolean %s, not an expression: Lua's own and, or, not and comparisons "
                    "give plain booleans; build conditions with fg.eq, fg.lt, fg.and_ ...", who,
                 lua_toboolean(L, idx) ? "true" : "false");
        break;
    case LUA_TNIL:
        mb_error(L, "%s is nil (a name that is not defined, or an argument left out)", who);
        break;
    default:
        if (luaL_testudata(L, idx, MB_AUX_META))
            mb_error(L, "%s is an aux array, not a value: read an element with fg.load(array, i)", who);
        mb_error(L, "%s is a %s, not an expression or a number", who, luaL_typename(L, idx));
    }
    return v;
}

/* The type of an operand as read. */
static int mb_type(const mod_builder *B, const mb_val *v) { return v->node >= 0 ? B->nodes[v->node].type : v->type; }

/* Operand v as a node of `type` (int or float, v's own type or float for an int): an int node gets a
 * MOD_FLOAT above it, a Lua number becomes a constant of that type (a Lua integer where a float is needed
 * is the float of the same value, exactly what converting it would give). Raises for an int constant
 * outside 32 bits. */
static int mb_as(lua_State *L, mod_builder *B, const mb_spec *sp, const mb_val *v, int type) {
    if (v->node >= 0 && B->nodes[v->node].type == type)
        return v->node;
    if (v->node >= 0)
        return mod_build_node(L, B, MOD_FLOAT, MOD_T_FLOAT, v->node, -1, -1, -1, 0.0);
    if (v->type == MOD_T_FLOAT)
        return mod_build_node(L, B, MOD_CONST, MOD_T_FLOAT, -1, -1, -1, -1, v->fval);
    if (type == MOD_T_FLOAT)
        return mod_build_node(L, B, MOD_CONST, MOD_T_FLOAT, -1, -1, -1, -1, (double)v->ival);
    if (v->ival < INT32_MIN || v->ival > INT32_MAX)
        mb_error(L, "%s: the integer %lld does not fit in 32 bits (a mod's int arithmetic is 32-bit)", sp->shown,
                 (long long)v->ival);
    return mod_build_node(L, B, MOD_CONST, MOD_T_INT, -1, -1, -1, -1, (double)v->ival);
}

/* Raises unless operand i (from 1) of sp, v, is a number (an int or a float). */
static void mb_need_number(lua_State *L, const mod_builder *B, const mb_spec *sp, int i, const mb_val *v) {
    char who[64];
    if (mb_type(B, v) == MOD_T_BOOL)
        mb_error(L, "%s is a bool (a comparison or logic), and %s takes ints and floats; %s",
                 mb_operand_name(sp, i, who, sizeof who), sp->shown,
                 sp->rule == MB_CMP ? "combine bools with fg.and_, fg.or_ and fg.not_"
                                    : "turn a bool into a number with fg.where(c, 1, 0)");
}

/* The type two numbers meet at: float if either is a float, else int. */
static int mb_meet(const mod_builder *B, const mb_val *x, const mb_val *y) {
    return mb_type(B, x) == MOD_T_FLOAT || mb_type(B, y) == MOD_T_FLOAT ? MOD_T_FLOAT : MOD_T_INT;
}

/* The C function behind every operator and fg function but fg.load and fg.aux (upvalue 1: the trace;
 * upvalue 2: the index of its mb_spec). Checks the operands by the spec's rule and pushes the node. */
static int mb_build(lua_State *L) {
    mod_builder *B = lua_touserdata(L, lua_upvalueindex(1));
    const mb_spec *sp = &mb_specs[lua_tointeger(L, lua_upvalueindex(2))];
    char who[64];
    if (!sp->is_meta && lua_gettop(L) != sp->nargs)
        return mb_error(L, "%s takes %d argument%s, got %d", sp->shown, sp->nargs, sp->nargs > 1 ? "s" : "",
                        lua_gettop(L));
    if (!B->tracing)
        return mb_error(L, "%s builds an expression, which happens only inside score_mod and mask_mod (the "
                           "chunk's top level has no s, q or kv to build on)", sp->shown);
    mb_val v[3];
    for (int i = 0; i < sp->nargs; i++)
        v[i] = mb_read(L, sp, i + 1);
    int op = sp->op, type = MOD_T_INT, a = -1, b = -1, c = -1;
    switch ((mb_rule)sp->rule) {
    case MB_ARITH:
    case MB_FDIV:
    case MB_CMP:
        mb_need_number(L, B, sp, 1, &v[0]);
        mb_need_number(L, B, sp, 2, &v[1]);
        type = sp->rule == MB_FDIV ? MOD_T_FLOAT : mb_meet(B, &v[0], &v[1]);
        a = mb_as(L, B, sp, &v[0], type);
        b = mb_as(L, B, sp, &v[1], type);
        if (sp->rule == MB_CMP)
            type = MOD_T_BOOL;
        break;
    case MB_INTDIV:
        for (int i = 0; i < 2; i++)
            if (mb_type(B, &v[i]) != MOD_T_INT)
                return mb_error(L, "%s is %s, and %s is int floor division (or its modulo), on ints only; "
                                   "divide floats with /", mb_operand_name(sp, i + 1, who, sizeof who),
                                mod_build_type_names[mb_type(B, &v[i])], sp->shown);
        a = mb_as(L, B, sp, &v[0], MOD_T_INT);
        b = mb_as(L, B, sp, &v[1], MOD_T_INT);
        if (B->nodes[b].op == MOD_CONST && B->nodes[b].value == 0.0)
            return mb_error(L, "%s by the constant 0: an int division by zero has no value", sp->shown);
        break;
    case MB_SAME:
    case MB_FLOATFN:
        mb_need_number(L, B, sp, 1, &v[0]);
        type = sp->rule == MB_FLOATFN ? MOD_T_FLOAT : mb_type(B, &v[0]);
        a = mb_as(L, B, sp, &v[0], type);
        break;
    case MB_TOFLOAT:
        mb_need_number(L, B, sp, 1, &v[0]);
        a = mb_as(L, B, sp, &v[0], MOD_T_FLOAT); /* the MOD_FLOAT node itself, a float node or a constant */
        mod_build_push(L, a);
        return 1;
    case MB_TOINT:
        mb_need_number(L, B, sp, 1, &v[0]);
        if (mb_type(B, &v[0]) == MOD_T_INT) { /* an int (or an int constant) is its own floor */
            mod_build_push(L, mb_as(L, B, sp, &v[0], MOD_T_INT));
            return 1;
        }
        type = MOD_T_INT;
        a = mb_as(L, B, sp, &v[0], MOD_T_FLOAT);
        break;
    case MB_LOGIC:
        for (int i = 0; i < sp->nargs; i++)
            if (mb_type(B, &v[i]) != MOD_T_BOOL || v[i].node < 0)
                return mb_error(L, "%s is %s, and %s takes bools (comparisons such as fg.lt(q, kv))",
                                mb_operand_name(sp, i + 1, who, sizeof who),
                                v[i].node < 0 ? "a number" : mod_build_type_names[mb_type(B, &v[i])], sp->shown);
        type = MOD_T_BOOL;
        a = v[0].node;
        b = sp->nargs > 1 ? v[1].node : -1;
        break;
    case MB_WHERE: {
        if (v[0].node < 0 || mb_type(B, &v[0]) != MOD_T_BOOL)
            return mb_error(L, "fg.where: its condition (argument 1) is %s; it must be a bool, as from "
                               "fg.lt(q, kv)", v[0].node < 0 ? "a number" : mod_build_type_names[mb_type(B, &v[0])]);
        int tb = mb_type(B, &v[1]), tc = mb_type(B, &v[2]);
        if ((tb == MOD_T_BOOL) != (tc == MOD_T_BOOL))
            return mb_error(L, "fg.where: its branches are %s and %s; they must both be numbers or both bools",
                            mod_build_type_names[tb], mod_build_type_names[tc]);
        type = tb == MOD_T_BOOL ? MOD_T_BOOL : mb_meet(B, &v[1], &v[2]);
        a = v[0].node;
        b = type == MOD_T_BOOL ? v[1].node : mb_as(L, B, sp, &v[1], type);
        c = type == MOD_T_BOOL ? v[2].node : mb_as(L, B, sp, &v[2], type);
        break;
    }
    }
    mod_build_push(L, mod_build_node(L, B, op, type, a, b, c, -1, 0.0));
    return 1;
}

/* A metamethod that refuses (upvalue 1: the index of its sentence in mb_refusals; upvalue 2: NULL for a
 * symbolic value's, else the sentence itself for an aux declaration's). */
static int mb_refuse(lua_State *L) {
    const char *own = lua_tostring(L, lua_upvalueindex(2));
    if (own != NULL)
        return mb_error(L, "%s", own);
    return mb_error(L, "%s", mb_refusals[lua_tointeger(L, lua_upvalueindex(1))][1]);
}

/* __tostring of a symbolic value: its type, for print() while debugging a mod. */
static int mb_expr_tostring(lua_State *L) {
    const mod_builder *B = lua_touserdata(L, lua_upvalueindex(1));
    const mb_expr *e = luaL_checkudata(L, 1, MB_EXPR_META);
    static const char *const short_names[] = {"int", "float", "bool"};
    lua_pushfstring(L, "fg expression (%s)", short_names[B->nodes[e->node].type]);
    return 1;
}

/* fg.aux(dtype, rank [, "trainable"]): an aux array's declaration, for the global aux table. At the chunk's top
 * level only; "trainable" (f32 only) lets the backward return the loss's gradient in the array. */
static int mb_aux(lua_State *L) {
    mod_builder *B = lua_touserdata(L, lua_upvalueindex(1));
    char got[64];
    const int nargs = lua_gettop(L);
    if (nargs != 2 && nargs != 3)
        return mb_error(L, "fg.aux takes 2 or 3 arguments (dtype, rank [, \"trainable\"]), as in fg.aux(\"f32\", 1); "
                           "got %d", nargs);
    if (B->tracing)
        return mb_error(L, "fg.aux declares an array in the aux table at the chunk's top level, not inside "
                           "score_mod or mask_mod");
    const char *dtype = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
    if (dtype == NULL || (strcmp(dtype, "f32") != 0 && strcmp(dtype, "i32") != 0))
        return mb_error(L, "fg.aux: the dtype (argument 1) is \"f32\" or \"i32\", got %s%.40s%s",
                        dtype ? "\"" : "", dtype ? dtype : mod_build_describe(L, 1, got, sizeof got),
                        dtype ? "\"" : "");
    if (!lua_isinteger(L, 2) || (lua_tointeger(L, 2) != 1 && lua_tointeger(L, 2) != 2))
        return mb_error(L, "fg.aux: the rank (argument 2) is the integer 1 or 2, got %s",
                        mod_build_describe(L, 2, got, sizeof got));
    const char *flag = nargs == 3 && lua_type(L, 3) == LUA_TSTRING ? lua_tostring(L, 3) : NULL;
    if (nargs == 3 && (flag == NULL || strcmp(flag, "trainable") != 0))
        return mb_error(L, "fg.aux: argument 3 is \"trainable\" or absent, got %s%.40s%s", flag ? "\"" : "",
                        flag ? flag : mod_build_describe(L, 3, got, sizeof got), flag ? "\"" : "");
    if (flag && dtype[0] == 'i')
        return mb_error(L, "fg.aux: an i32 array cannot be trainable (its values are indices and flags, with no "
                           "gradient); declare a trainable array f32");
    mod_decl *d = lua_newuserdatauv(L, sizeof *d, 0);
    d->is_int = dtype[0] == 'i';
    d->rank = (uint8_t)lua_tointeger(L, 2);
    d->trainable = flag != NULL;
    d->slot = -1;
    d->line = 0;
    lua_Debug ar;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
        d->line = ar.currentline;
        snprintf(B->short_src, sizeof B->short_src, "%s", ar.short_src);
    }
    luaL_setmetatable(L, MB_AUX_META);
    return 1;
}

/* fg.load(array, i [, j]): an element of an aux array the aux table names, one int index per rank. */
static int mb_load(lua_State *L) {
    mod_builder *B = lua_touserdata(L, lua_upvalueindex(1));
    static const mb_spec sp = {"load", "fg.load", MOD_LOAD, MB_SAME, 3, 0};
    char got[64];
    if (!B->tracing)
        return mb_error(L, "fg.load builds an expression, which happens only inside score_mod and mask_mod");
    const mod_decl *d = luaL_testudata(L, 1, MB_AUX_META);
    if (d == NULL)
        return mb_error(L, "fg.load: argument 1 is %s; it is the array's declaration itself, as in fg.load(doc, q) "
                           "with aux = { doc = fg.aux(\"i32\", 1) }",
                        lua_type(L, 1) == LUA_TSTRING ? "a string (the array's name?)"
                                                      : mod_build_describe(L, 1, got, sizeof got));
    if (d->slot < 0)
        return mb_error(L, "fg.load: this array is not in the global aux table (aux = { name = fg.aux(dtype, "
                           "rank) }), so the call would not pass it");
    const char *name = B->result.aux[d->slot].name;
    if (lua_gettop(L) - 1 != d->rank)
        return mb_error(L, "fg.load: '%s' has rank %d, so it takes %d index%s; got %d", name, d->rank, d->rank,
                        d->rank > 1 ? "es" : "", lua_gettop(L) - 1);
    int idx[2] = {-1, -1};
    for (int i = 0; i < d->rank; i++) {
        mb_val v = mb_read(L, &sp, i + 2);
        if (mb_type(B, &v) != MOD_T_INT)
            return mb_error(L, "fg.load: index %d of '%s' is %s; indices are ints", i + 1, name,
                            mod_build_type_names[mb_type(B, &v)]);
        idx[i] = mb_as(L, B, &sp, &v, MOD_T_INT);
    }
    int type = d->is_int ? MOD_T_INT : MOD_T_FLOAT;
    mod_build_push(L, mod_build_node(L, B, MOD_LOAD, type, idx[0], idx[1], -1, d->slot, 0.0));
    return 1;
}

/* ---- installing the library ---- */

/* Pushes a C closure of f with upvalues (the trace, an integer). */
static void mb_push_fn(lua_State *L, mod_builder *B, lua_CFunction f, lua_Integer k) {
    lua_pushlightuserdata(L, B);
    lua_pushinteger(L, k);
    lua_pushcclosure(L, f, 2);
}

void mod_build_install(lua_State *L, mod_builder *B) {
    luaL_newmetatable(L, MB_EXPR_META);
    for (int i = 0; i < MB_NSPECS; i++)
        if (mb_specs[i].is_meta) {
            mb_push_fn(L, B, mb_build, i);
            lua_setfield(L, -2, mb_specs[i].name);
        }
    for (int i = 0; i < MB_NREFUSALS; i++) {
        lua_pushinteger(L, i);
        lua_pushnil(L);
        lua_pushcclosure(L, mb_refuse, 2);
        lua_setfield(L, -2, mb_refusals[i][0]);
    }
    lua_pushlightuserdata(L, B);
    lua_pushcclosure(L, mb_expr_tostring, 1);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "locked"); /* getmetatable answers this; setmetatable refuses */
    lua_setfield(L, -2, "__metatable");
    lua_pushliteral(L, "fg expression"); /* how Lua's own messages name the type ("got fg expression") */
    lua_setfield(L, -2, "__name");
    lua_pop(L, 1);

    luaL_newmetatable(L, MB_AUX_META);
    for (int i = 0; mb_aux_refused[i]; i++) {
        lua_pushinteger(L, 0);
        lua_pushliteral(L, "an aux array is not a value: read an element with fg.load(array, i [, j])");
        lua_pushcclosure(L, mb_refuse, 2);
        lua_setfield(L, -2, mb_aux_refused[i]);
    }
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_pushliteral(L, "fg aux array");
    lua_setfield(L, -2, "__name");
    lua_pop(L, 1);

    lua_newtable(L);
    for (int i = 0; i < MB_NSPECS; i++)
        if (!mb_specs[i].is_meta) {
            mb_push_fn(L, B, mb_build, i);
            lua_setfield(L, -2, mb_specs[i].name);
        }
    mb_push_fn(L, B, mb_load, 0);
    lua_setfield(L, -2, "load");
    mb_push_fn(L, B, mb_aux, 0);
    lua_setfield(L, -2, "aux");
    lua_setglobal(L, "fg");
}

void mod_build_init(mod_builder *B) {
    memset(B, 0, sizeof *B);
    memset(B->hash, 0xff, sizeof B->hash);
    B->result.score = B->result.mask = -1;
}

int mod_build_expr(lua_State *L, int idx) {
    const mb_expr *e = luaL_testudata(L, idx, MB_EXPR_META);
    return e ? e->node : -1;
}

mod_decl *mod_build_decl(lua_State *L, int idx) { return luaL_testudata(L, idx, MB_AUX_META); }
