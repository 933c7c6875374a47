/* lua_sandbox.h: running untrusted Lua 5.4 config text safely.
 *
 * Each run uses a fresh lua_State with: an allocator capped at FG_LUA_MEM_LIMIT bytes, an instruction
 * budget (count hook) of FG_LUA_INSN_LIMIT plus a 2 s wall-clock backstop (for instructions that are
 * expensive, like concatenating huge strings), text chunks only (mode "t": bytecode is refused), and an
 * environment holding only the safe base functions (assert, error, ipairs, next, pairs, pcall, select,
 * tonumber, tostring, type, xpcall, rawequal, rawget, rawlen, rawset, setmetatable, getmetatable,
 * print -> stderr as "file:line: ...") and the string (without dump), table, math and utf8 libraries:
 * no io, os, package, debug, coroutine, load, loadfile, dofile, require, collectgarbage.
 * Library functions that could loop in C, out of the hook's sight, are guarded: string.rep of an empty
 * string, backtracking-heavy patterns (find/match/gmatch/gsub), table functions on tables with
 * metatables, table.move over huge ranges, setmetatable with __gc (finalizers run unhooked) and xpcall
 * handlers (skipped once a limit is hit, since they would run unhooked too).
 * Once a limit is hit, the error cannot be caught by the script's own pcall.
 * Every error comes back as "file:line: message" (for memory-cap errors the line is the last one the
 * hooks saw: exact for library calls such as string.rep, otherwise within a few instructions). */
#ifndef FG_LUA_SANDBOX_H
#define FG_LUA_SANDBOX_H

#include <stddef.h>
#include "core/error.h"

struct lua_State;

#define FG_LUA_MEM_LIMIT (64u << 20) /* bytes the Lua state may hold */
#define FG_LUA_INSN_LIMIT 20000000L /* Lua VM instructions per run: ~0.2 s; a config needs thousands */

/* Called after the environment is built and before the chunk runs, to install the host functions of a
 * config kind (variants{}, tile_policy{}, ...) as globals (lua_setglobal writes into the sandbox's
 * environment). Runs in protected mode under the same limits: it may raise Lua errors, which become the
 * run's error. Return nonzero to abort the run with a generic message. The same type serves `finish`. */
typedef int (*fg_lua_setup_fn)(struct lua_State *L, void *user);

/* Runs the chunk `text` (len bytes, named `chunkname` in messages, e.g. the file path) in a fresh
 * sandbox. setup (optional) installs host functions; after a successful chunk, finish (optional) may read
 * globals. user is passed to both. Nothing outlives the call: the state is closed on every path.
 * Errors (syntax, runtime, memory cap, instruction budget, time limit, bytecode) return FG_ERR_CONFIG
 * with "chunkname:line: message" in err; FG_ERR_NO_MEMORY if the state cannot be created or the host's
 * allocator fails during the run (the host's trouble, not the chunk's: a caller must not treat it as a bad
 * file). */
fg_status lua_sandbox_run(const char *chunkname, const char *text, size_t len, fg_lua_setup_fn setup,
                          fg_lua_setup_fn finish, void *user, fg_error *err);

/* Same, reading the file first (the path is the chunk name). FG_ERR_IO naming the path when it cannot be
 * read; FG_ERR_CONFIG for a file over 16 MiB. */
fg_status lua_sandbox_run_file(const char *path, fg_lua_setup_fn setup, fg_lua_setup_fn finish,
                               void *user, fg_error *err);

/* ---- helpers for the host functions configs call (variants{}, tile_policy{}, space{}, result{}) ---- */

/* Raises a Lua error "<fn>: <message>" with the full printf (luaL_error knows only a few conversions);
 * Lua prefixes the calling line's "file:line:". Does not return. */
int lua_sandbox_raise(struct lua_State *L, const char *fn, const char *fmt, ...) FG_PRINTF(3, 4);

/* A short description of the value at idx for "got ..." messages: the number itself, else its type. */
const char *lua_sandbox_describe(struct lua_State *L, int idx, char *buf, size_t n);

/* Installs global `name` as the C function f with `user` as its one upvalue (lua_upvalueindex(1)). */
void lua_sandbox_bind(struct lua_State *L, const char *name, int (*f)(struct lua_State *), void *user);

/* Checks that the value at idx is a table whose keys are all strings among `fields` (NULL-terminated);
 * `what` names the table in messages ("gpu"). what == NULL checks the host function's own argument
 * instead (idx ignored): exactly one argument, a table. Call it before pushing anything. Raises otherwise. */
void lua_sandbox_check_table(struct lua_State *L, int idx, const char *fn, const char *what,
                            const char *const *fields);

/* The length of the list at idx, a table whose keys are exactly 1..n: raises "field 'F' is an empty
 * list" for {} and "field 'F' must be EXPECTED, got a table that is not a list (keys other than 1..n)"
 * otherwise. */
long long lua_sandbox_list_length(struct lua_State *L, int idx, const char *fn, const char *field,
                                  const char *expected);

#endif
