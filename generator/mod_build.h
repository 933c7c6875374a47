/* mod_build.h: a mod's symbolic values and the `fg` library that builds its nodes from them (mod_build.c), for
 * the tracer (mod_trace.c), which runs the chunk, calls score_mod and mask_mod and copies the tree out. */
#ifndef FG_MOD_BUILD_H
#define FG_MOD_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "generator/mod.h"

#define MOD_BUILD_MAX (4 * MOD_MAX_NODES)  /* nodes one trace may build, dead ones included */
#define MOD_BUILD_HASH (2 * MOD_BUILD_MAX) /* the hash-consing table: open addressing, at most half full */

/* An aux array's declaration, as fg.aux returns it (a full userdata's contents). */
typedef struct mod_decl {
    uint8_t is_int;    /* 1: i32, 0: f32 */
    uint8_t rank;      /* 1 or 2 */
    uint8_t trainable; /* 1: declared "trainable" (f32 only) */
    int slot;          /* its index in the sorted aux list, once the aux table names it; -1 before */
    int line;          /* the line of its fg.aux call (0: unknown) */
} mod_decl;

/* What one trace builds; the fg functions reach it through their first upvalue. */
typedef struct mod_builder {
    mod_node nodes[MOD_BUILD_MAX]; /* every node built, operands before their users, no two alike */
    uint8_t uses_s[MOD_BUILD_MAX]; /* 1 where the node depends on s (a mask must not) */
    int n;                         /* nodes in use */
    int16_t hash[MOD_BUILD_HASH];  /* node indices by their hash, -1 where empty */
    int tracing;                   /* 1 while score_mod or mask_mod runs: expressions are built only then,
                                      arrays declared only before */
    char short_src[LUA_IDSIZE];    /* the chunk's name as Lua writes it in positions ("" until known) */
    fg_mod result;                 /* the tree; its aux list is filled before the tracing, as fg.load reads
                                      the arrays' names from it */
} mod_builder;

/* "an int", "a float", "a bool", by mod_type: for sentences. */
extern const char *const mod_build_type_names[3];

/* Empties B: no node, an empty tree (score and mask -1), not tracing. */
void mod_build_init(mod_builder *B);
/* Installs the global fg library bound to B, and the metatables of symbolic values and aux declarations.
 * Raises Lua errors (memory). */
void mod_build_install(lua_State *L, mod_builder *B);
/* The node (op, type, a, b, c, arg, value): the one already built if an alike node was (the value compared
 * bit for bit), else a new one. Raises a Lua error at the calling line when B is full. */
int mod_build_node(lua_State *L, mod_builder *B, int op, int type, int a, int b, int c, int arg, double value);
/* Pushes a symbolic value of node `node`. */
void mod_build_push(lua_State *L, int node);
/* The node of the symbolic value at idx, or -1 if the value is not one. */
int mod_build_expr(lua_State *L, int idx);
/* The aux declaration at idx, or NULL if the value is not one. */
mod_decl *mod_build_decl(lua_State *L, int idx);
/* lua_sandbox_describe (the number itself, else its type), a float that prints like an integer shown as a
 * float ("1.0", not "1"). */
const char *mod_build_describe(lua_State *L, int idx, char *buf, size_t n);

#endif
