/* lua_sandbox.h: running untrusted Lua 5.4 config text safely.
 *
 * Each run uses a fresh lua_State with: an allocator capped at FG_LUA_MEM_LIMIT bytes, an instruction
 * budget (count hook) of FG_LUA_INSN_LIMIT, text chunks only (mode "t": bytecode is refused), and an
 * environment holding only the safe base functions (assert, error, ipairs, next, pairs, pcall, select,
 * tonumber, tostring, type, xpcall, rawequal, rawget, rawlen, rawset, setmetatable, getmetatable,
 * print -> log) and the string, table, math and utf8 libraries (string.rep guarded by the memory cap):
 * no io, os, package, debug, load, loadfile, dofile, require, collectgarbage.
 * Every error comes back as "file:line: message". */
#ifndef FG_LUA_SANDBOX_H
#define FG_LUA_SANDBOX_H

#include <stddef.h>
#include "fgerr.h"

struct lua_State;

#define FG_LUA_MEM_LIMIT (64u << 20)
#define FG_LUA_INSN_LIMIT 20000000L

/* Called after the environment is built and before the chunk runs, to install the host functions of a
 * config kind (variants{}, tile_policy{}, ...) as globals. Return nonzero to abort. */
typedef int (*fg_lua_setup_fn)(struct lua_State *L, void *user);

/* Runs the chunk `text` (named `chunkname` in messages, e.g. the file path) in a fresh sandbox.
 * setup installs host functions; after a successful run, finish (optional) may read globals.
 * Errors (syntax, runtime, memory cap, instruction budget, bytecode) return FG_ERR_CONFIG. */
fg_status lua_sandbox_run(const char *chunkname, const char *text, size_t len, fg_lua_setup_fn setup,
                          fg_lua_setup_fn finish, void *user, fg_error *err);

/* Same, reading the file first (FG_ERR_IO naming the path when it cannot be read). */
fg_status lua_sandbox_run_file(const char *path, fg_lua_setup_fn setup, fg_lua_setup_fn finish,
                               void *user, fg_error *err);

#endif
