/* lua_sandbox.c: runs untrusted Lua 5.4 config text in a fresh, capped state (see lua_sandbox.h); the
 * helpers host functions use to read their arguments are in lua_sandbox_host.c.
 *
 * The walls, and why each exists:
 *   - memory: every byte goes through sb_alloc, which refuses growth past FG_LUA_MEM_LIMIT, so
 *     string.rep('x', 2^30) or a table-filling loop ends in an error instead of exhausting the host;
 *   - time: a count hook charges the instruction budget (FG_LUA_INSN_LIMIT) and checks a wall-clock
 *     backstop (SB_TIME_LIMIT_MS), needed because one instruction can be expensive (concatenating two
 *     32 MiB strings). Once either runs out, or the memory cap was hit, the hook fires on every
 *     instruction and every call, so a script's own pcall cannot swallow the error and carry on;
 *   - C loops the hook cannot see: a few library functions loop in C for as long as their arguments say
 *     (string.rep('', 2^50), table.move over 2^50 slots, table.insert on a table whose __len lies,
 *     backtracking patterns such as ('.-'):rep(10)). Those are wrapped (sb_guard) with checks that bound
 *     their work before the original runs. Finalizers (__gc) run with hooks disabled, so setmetatable
 *     refuses metatables that carry one; and a message handler called for an error the hook raised
 *     also runs with hooks disabled, so xpcall's handler is skipped once the run is stopped;
 *   - code: chunks load in text mode only (bytecode can crash the VM), and the environment that replaces
 *     the global table holds only the functions listed in the header: nothing reaches files, processes,
 *     the loader, the debug library or string.dump;
 *   - messages: every error leaves as "file:line: message". Lua adds positions to most errors itself;
 *     the message handler adds one where it did not (error(x, 0), non-string errors, host functions), and
 *     memory errors, which Lua raises without calling any handler, take the line the hooks last saw:
 *     exact when the allocation happened inside a library call (string.rep), otherwise a line that ran
 *     within the last SB_HOOK_STEP instructions. (The allocator cannot look itself: it runs in the middle
 *     of stack reallocations. A line hook would be exact but makes the interpreter about 3x slower.)
 * The state is always closed, so a failed run frees everything it allocated. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "core/lua_sandbox.h"
#include "core/alloc.h"
#include "core/files.h"

#define SB_HOOK_STEP 100             /* instructions between count-hook calls: bounds how stale the line is */
#define SB_TIME_LIMIT_MS 2000        /* wall-clock backstop; the instruction budget normally ends first */
#define SB_FILE_MAX (16u << 20)      /* largest config file read: configs are small; this bounds the read */
#define SB_MEM_LIMIT_MIB (FG_LUA_MEM_LIMIT >> 20)
#define SB_PATTERN_STEPS 1e8         /* most backtracking steps a pattern call may be able to take */
#define SB_MOVE_MAX (1 << 22)        /* most slots one table.move may touch (a 64 MiB heap holds fewer) */

#ifdef CLOCK_MONOTONIC_COARSE
#define SB_CLOCK CLOCK_MONOTONIC_COARSE /* a few ms of resolution, read without a system call */
#else
#define SB_CLOCK CLOCK_MONOTONIC
#endif

/* Why a run was stopped from outside the script's control; the first reason recorded wins. */
typedef enum sb_stop {
    SB_RUNNING = 0, /* nothing tripped */
    SB_MEMORY,      /* the allocator refused growth past the cap */
    SB_HOST_MEMORY, /* the host's allocator (fg_realloc) returned NULL: out of memory, not the config's fault */
    SB_BUDGET,      /* FG_LUA_INSN_LIMIT instructions ran */
    SB_TIME         /* SB_TIME_LIMIT_MS of wall-clock time passed */
} sb_stop;

/* Everything one run needs; reached from Lua callbacks through the allocator's userdata pointer. */
typedef struct sb_run {
    const char *chunkname;      /* the name every message starts with (usually the file path) */
    char short_src[LUA_IDSIZE]; /* how Lua abbreviates chunkname in the positions it writes */
    const char *text;           /* the chunk (not owned) */
    size_t len;                 /* its length in bytes */
    size_t load_pos;            /* bytes of text handed to the parser so far (sb_read_line) */
    int parsing;                /* 1 while lua_load runs: line is then the line being parsed */
    fg_lua_setup_fn setup;      /* installs the host functions; may be NULL */
    fg_lua_setup_fn finish;     /* reads results after the chunk ran; may be NULL */
    void *user;                 /* passed to setup and finish */
    size_t used;                /* bytes the state holds now, as seen by sb_alloc */
    long insns;                 /* instructions charged so far (in steps of SB_HOOK_STEP) */
    struct timespec deadline;   /* SB_CLOCK time at which the run is stopped */
    int line;                   /* the chunk line the hooks saw last: where a memory error is blamed */
    sb_stop stop;               /* why the run is being stopped, or SB_RUNNING */
    int stop_line;              /* the value of line when stop was set (0: unknown) */
    int tripwire;               /* 1 once the hook has been switched to fire on every instruction */
} sb_run;

/* The base functions a config may use; everything else in the base library stays out. */
static const char *const sb_base_names[] = {
    "assert", "error", "ipairs", "next", "pairs", "pcall", "select", "tonumber", "tostring", "type",
    "xpcall", "rawequal", "rawget", "rawlen", "rawset", "setmetatable", "getmetatable", NULL};

/* Records the first reason to stop the run. Safe anywhere, the allocator included: it touches only run. */
static void sb_set_stop(sb_run *run, sb_stop why) {
    if (run->stop == SB_RUNNING) {
        run->stop = why;
        run->stop_line = run->line;
    }
}

/* Lua's allocator hook, capped. ptr == NULL means a new block (osize is then a type tag, not a size).
 * Growth past FG_LUA_MEM_LIMIT is refused (Lua then raises LUA_ERRMEM after an emergency collection);
 * shrinking and freeing always succeed. Touches nothing inside the lua_State: the allocator runs in the
 * middle of stack reallocations, where the call-info chain cannot be read safely. */
static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    sb_run *run = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        run->used -= old;
        return NULL;
    }
    if (nsize > old && nsize - old > FG_LUA_MEM_LIMIT - run->used) {
        sb_set_stop(run, SB_MEMORY);
        return NULL;
    }
    void *p = fg_realloc(ptr, nsize);
    if (p == NULL) {
        /* The host itself is out of memory: Lua raises a memory error, as for the cap, but the run reports
         * FG_ERR_NO_MEMORY (sb_report), so a caller does not take the text for a bad config. */
        sb_set_stop(run, SB_HOST_MEMORY);
        return NULL;
    }
    run->used = run->used - old + nsize;
    return p;
}

/* The run a callback belongs to: the allocator's userdata, so no registry lookup (or allocation). */
static sb_run *sb_get_run(lua_State *L) {
    void *ud = NULL;
    lua_getallocf(L, &ud);
    return ud;
}

/* Debug hook: count events charge the budget and check the clock; call events note the calling line
 * (so a memory error inside string.rep names the line that called it). Once the run must stop it raises
 * an error at every event; switching the count to 1 makes that every instruction. Raising from a hook
 * is allowed in Lua 5.4; the message carries its own position. */
static void sb_hook(lua_State *L, lua_Debug *ar) {
    sb_run *run = sb_get_run(L);
    if (ar->event == LUA_HOOKCOUNT) {
        if (lua_getinfo(L, "l", ar) && ar->currentline > 0)
            run->line = ar->currentline;
        if (run->stop == SB_RUNNING) {
            struct timespec now;
            run->insns += SB_HOOK_STEP;
            if (run->insns >= FG_LUA_INSN_LIMIT)
                sb_set_stop(run, SB_BUDGET);
            else if (clock_gettime(SB_CLOCK, &now) == 0 &&
                     (now.tv_sec > run->deadline.tv_sec ||
                      (now.tv_sec == run->deadline.tv_sec && now.tv_nsec >= run->deadline.tv_nsec)))
                sb_set_stop(run, SB_TIME);
        }
    } else {
        lua_Debug caller;
        if (lua_getstack(L, 1, &caller) && lua_getinfo(L, "l", &caller) && caller.currentline > 0)
            run->line = caller.currentline;
    }
    if (run->stop == SB_RUNNING)
        return;
    if (!run->tripwire) {
        run->tripwire = 1;
        lua_sethook(L, sb_hook, LUA_MASKCOUNT | LUA_MASKCALL, 1);
    }
    /* lua_pushfstring, not luaL_error: luaL_error would prepend a second, caller's position. */
    if (run->stop == SB_MEMORY)
        lua_pushfstring(L, "%s:%d: memory limit (%d MiB) exceeded", run->short_src, run->line,
                        (int)SB_MEM_LIMIT_MIB);
    else if (run->stop == SB_HOST_MEMORY)
        lua_pushfstring(L, "%s:%d: out of host memory", run->short_src, run->line);
    else if (run->stop == SB_BUDGET)
        lua_pushfstring(L, "%s:%d: instruction budget exceeded (%d Lua instructions)", run->short_src,
                        run->line, (int)FG_LUA_INSN_LIMIT);
    else
        lua_pushfstring(L, "%s:%d: time limit (%d ms) exceeded", run->short_src, run->line,
                        (int)SB_TIME_LIMIT_MS);
    lua_error(L);
}

/* Message handler for the whole run: returns the error as a string that starts with a position.
 * Messages Lua already positioned (they start with short_src and ':') pass unchanged; others get the
 * line of the innermost running chunk code, or while parsing the line being parsed (the parser's
 * nesting limit, "C stack overflow", comes without a position), or just the chunk name when no chunk
 * code is running. */
static int sb_msgh(lua_State *L) {
    sb_run *run = sb_get_run(L);
    const char *msg = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
    size_t sl = strlen(run->short_src);
    if (msg && strncmp(msg, run->short_src, sl) == 0 && msg[sl] == ':')
        return 1;
    if (msg == NULL)
        msg = lua_pushfstring(L, "error object is a %s value", luaL_typename(L, 1));
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        if (lua_getinfo(L, "l", &ar) && ar.currentline > 0) {
            lua_pushfstring(L, "%s:%d: %s", run->short_src, ar.currentline, msg);
            return 1;
        }
    }
    if (run->parsing && run->line > 0)
        lua_pushfstring(L, "%s:%d: %s", run->short_src, run->line, msg);
    else
        lua_pushfstring(L, "%s: %s", run->short_src, msg);
    return 1;
}

/* print(...): the config's debugging aid. Writes "file:line: a<TAB>b" to stderr, where a person running
 * the CLI sees it; the library prints nothing else. */
static int sb_print(lua_State *L) {
    int n = lua_gettop(L);
    luaL_Buffer b;
    luaL_where(L, 1);
    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        if (i > 1)
            luaL_addchar(&b, '\t');
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    fprintf(stderr, "%s%s\n", lua_tostring(L, -2), lua_tostring(L, -1));
    return 0;
}

/* What sb_guard checks before calling the original library function. */
typedef enum sb_guard_kind {
    SB_GUARD_REP,     /* string.rep: an empty result for a huge count is made here, not by looping */
    SB_GUARD_FIND,    /* string.find: the pattern cost, unless the plain flag is set */
    SB_GUARD_PATTERN, /* string.match, gmatch, gsub: the pattern cost */
    SB_GUARD_TABLE,   /* table.concat, insert, remove, sort, unpack: a plain table, so no __len/__index */
    SB_GUARD_MOVE,    /* table.move: plain tables and at most SB_MOVE_MAX slots */
    SB_GUARD_SETMETA, /* setmetatable: no __gc, since finalizers run with debug hooks off */
    SB_GUARD_XPCALL   /* xpcall: the message handler is skipped once the run is stopped */
} sb_guard_kind;

typedef struct sb_guard_entry {
    const char *lib;    /* module name */
    const char *name;   /* function name */
    sb_guard_kind kind; /* the check */
} sb_guard_entry;

static const sb_guard_entry sb_guards[] = {
    {LUA_STRLIBNAME, "rep", SB_GUARD_REP},         {LUA_STRLIBNAME, "find", SB_GUARD_FIND},
    {LUA_STRLIBNAME, "match", SB_GUARD_PATTERN},   {LUA_STRLIBNAME, "gmatch", SB_GUARD_PATTERN},
    {LUA_STRLIBNAME, "gsub", SB_GUARD_PATTERN},    {LUA_TABLIBNAME, "concat", SB_GUARD_TABLE},
    {LUA_TABLIBNAME, "insert", SB_GUARD_TABLE},    {LUA_TABLIBNAME, "remove", SB_GUARD_TABLE},
    {LUA_TABLIBNAME, "sort", SB_GUARD_TABLE},      {LUA_TABLIBNAME, "unpack", SB_GUARD_TABLE},
    {LUA_TABLIBNAME, "move", SB_GUARD_MOVE},       {LUA_GNAME, "setmetatable", SB_GUARD_SETMETA},
    {LUA_GNAME, "xpcall", SB_GUARD_XPCALL},        {NULL, NULL, SB_GUARD_REP}};

/* An upper bound on the matching steps of pattern p over an n-byte subject. Every repetition item
 * (*, +, -, ?), back-reference (%1..%9) and balance item (%bxy, which scans to the subject's end) can try up
 * to n+1 lengths at each of the others', and an unanchored search repeats that at n+1 starting points:
 * (n+1)^(q+1), times the pattern's items (each start compares the single-character items one by one: a
 * literal run of m characters costs n*m over the subject). Characters inside sets and after '%' are
 * skipped as items; what remains is over-counted, never under-counted, so the bound stays a bound. */
static double sb_pattern_cost(const char *p, size_t pl, size_t n) {
    int q = 0;
    double items = 1.0;
    for (size_t i = 0; i < pl; i++, items += 1.0) {
        if (p[i] == '%') {
            if (i + 1 < pl && ((p[i + 1] >= '1' && p[i + 1] <= '9') || p[i + 1] == 'b'))
                q++;
            if (i + 1 < pl && p[i + 1] == 'b') i += 2; /* %bxy: the two delimiters */
            i++;
        } else if (p[i] == '[') {
            size_t j = i + 1;
            if (j < pl && p[j] == '^')
                j++;
            if (j < pl && p[j] == ']') /* a ']' first in a set is a literal */
                j++;
            while (j < pl && p[j] != ']')
                j += p[j] == '%' ? 2 : 1;
            i = j;
        } else if (i > 0 && (p[i] == '*' || p[i] == '+' || p[i] == '-' || p[i] == '?')) {
            q++;
        }
    }
    double cost = items;
    for (int k = 0; k <= q && cost <= SB_PATTERN_STEPS; k++)
        cost *= (double)n + 1.0;
    return cost;
}

/* A plain find (no pattern) compares the needle at each start: at most (n+1) x (its length + 1) steps. */
static double sb_plain_cost(size_t needle, size_t n) { return ((double)n + 1.0) * ((double)needle + 1.0); }

/* Raises an argument error unless argument arg is a table without a metatable (lua_geti on such a
 * table is one lookup, and its length is its real border, so the library loops stay bounded). */
static void sb_check_plain_table(lua_State *L, int arg) {
    luaL_checktype(L, arg, LUA_TTABLE);
    if (lua_getmetatable(L, arg))
        luaL_argerror(L, arg, "a table without a metatable expected (the config sandbox refuses others)");
}

/* The message handler xpcall really gets (upvalue 1: the script's handler). An error raised by the
 * hook reaches the message handler before Lua unwinds out of the hook, while hooks are still disabled,
 * so a looping handler would run unchecked: once the run is stopped the script's handler is skipped and
 * the error object passes through unchanged. */
static int sb_xpcall_handler(lua_State *L) {
    if (sb_get_run(L)->stop != SB_RUNNING) {
        lua_settop(L, 1);
        return 1;
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

/* The wrapper around a guarded library function (upvalue 1: the original; upvalue 2: its
 * sb_guard_kind). Checks the arguments, then calls the original with them and returns its results.
 * Argument errors raised here name the function as the script called it. */
static int sb_guard(lua_State *L) {
    sb_guard_kind kind = (sb_guard_kind)lua_tointeger(L, lua_upvalueindex(2));
    switch (kind) {
    case SB_GUARD_REP: {
        size_t l, lsep;
        luaL_checklstring(L, 1, &l);
        lua_Integer count = luaL_checkinteger(L, 2);
        luaL_optlstring(L, 3, "", &lsep);
        if (l + lsep == 0 || count <= 0) { /* the original would loop count times copying nothing */
            lua_pushliteral(L, "");
            return 1;
        }
        break;
    }
    case SB_GUARD_FIND:
    case SB_GUARD_PATTERN: {
        size_t n, pl;
        luaL_checklstring(L, 1, &n);
        const char *pat = luaL_checklstring(L, 2, &pl);
        int plain = kind == SB_GUARD_FIND && lua_toboolean(L, 4);
        if (plain && sb_plain_cost(pl, n) > SB_PATTERN_STEPS)
            return luaL_error(L, "a plain find of a %d-byte string in a %d-byte subject could take too long for the "
                                 "config sandbox (use a shorter subject or needle)",
                              (int)(pl > 0x7fffffff ? 0x7fffffff : pl), (int)(n > 0x7fffffff ? 0x7fffffff : n));
        if (!plain && sb_pattern_cost(pat, pl, n) > SB_PATTERN_STEPS) {
            char shown[84]; /* the pattern as the message shows it: at most 80 bytes */
            snprintf(shown, sizeof shown, "%.80s", pat);
            return luaL_error(L, "pattern '%s' could backtrack too long over a %d-byte subject for the config "
                                 "sandbox (use fewer repetition or %%b items, a shorter subject or a plain find)",
                              shown, (int)(n > 0x7fffffff ? 0x7fffffff : n));
        }
        break;
    }
    case SB_GUARD_TABLE:
        sb_check_plain_table(L, 1);
        break;
    case SB_GUARD_MOVE: {
        sb_check_plain_table(L, 1);
        lua_Integer f = luaL_checkinteger(L, 2);
        lua_Integer e = luaL_checkinteger(L, 3);
        luaL_checkinteger(L, 4);
        if (!lua_isnoneornil(L, 5))
            sb_check_plain_table(L, 5);
        if (e >= f && (lua_Unsigned)e - (lua_Unsigned)f >= (lua_Unsigned)SB_MOVE_MAX)
            return luaL_error(L, "table.move of more than %d elements is refused in a config", SB_MOVE_MAX);
        break;
    }
    case SB_GUARD_SETMETA:
        /* Lua runs finalizers with hooks disabled, so a looping __gc would escape every limit. Only
         * a metatable holding __gc when setmetatable runs marks the object for finalization; adding
         * __gc to the metatable later has no effect, so checking here is enough. */
        if (lua_type(L, 2) == LUA_TTABLE) {
            lua_pushliteral(L, "__gc");
            if (lua_rawget(L, 2) != LUA_TNIL)
                return luaL_error(L, "__gc metamethods (finalizers) are not allowed in a config");
            lua_pop(L, 1);
        }
        break;
    case SB_GUARD_XPCALL:
        luaL_checktype(L, 2, LUA_TFUNCTION);
        lua_pushvalue(L, 2);
        lua_pushcclosure(L, sb_xpcall_handler, 1);
        lua_replace(L, 2);
        break;
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* Sets, in the table at index `to`, every guarded function of library `lib` to sb_guard wrapped around
 * the original read from the table at index `from`. Raises Lua errors (memory). */
static void sb_wrap_guards(lua_State *L, const char *lib, int from, int to) {
    for (const sb_guard_entry *g = sb_guards; g->lib; g++) {
        if (strcmp(g->lib, lib) != 0)
            continue;
        lua_getfield(L, from, g->name);
        lua_pushinteger(L, g->kind);
        lua_pushcclosure(L, sb_guard, 2);
        lua_setfield(L, to, g->name);
    }
}

/* Opens library `name` and leaves on the stack the table the sandbox exposes: a copy of the module
 * without `dump`, with the guarded functions wrapped. The original stays in the registry's
 * loaded-modules table, unreachable from scripts, so Lua's own argument errors still name
 * "string.rep" and the like. Raises Lua errors (memory). */
static void sb_push_lib(lua_State *L, const char *name, lua_CFunction open) {
    luaL_requiref(L, name, open, 0);
    int orig = lua_gettop(L);
    lua_newtable(L);
    int copy = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, orig)) {
        /* string.dump would hand out bytecode, the one thing text mode keeps out. */
        if (lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), "dump") == 0) {
            lua_pop(L, 1);
            continue;
        }
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, copy);
    }
    sb_wrap_guards(L, name, orig, copy);
    lua_remove(L, orig);
}

/* Builds the environment table and makes it the global table, so that both the chunk's _ENV and
 * lua_setglobal in the setup callback use it. The original base-library table stays only in the
 * registry's loaded-modules table, which no sandboxed code can reach. Raises Lua errors (memory). */
static void sb_open_env(lua_State *L) {
    luaL_requiref(L, LUA_GNAME, luaopen_base, 0); /* the base library's own global table */
    int base = lua_gettop(L);
    lua_newtable(L);
    int env = lua_gettop(L);
    for (int i = 0; sb_base_names[i]; i++) {
        lua_getfield(L, base, sb_base_names[i]);
        lua_setfield(L, env, sb_base_names[i]);
    }
    sb_wrap_guards(L, LUA_GNAME, base, env);
    lua_pushcfunction(L, sb_print);
    lua_setfield(L, env, "print");
    lua_getfield(L, base, "_VERSION");
    lua_setfield(L, env, "_VERSION");

    sb_push_lib(L, LUA_STRLIBNAME, luaopen_string);
    /* Strings index their metatable's __index for methods (s:rep(n)): point it at the guarded copy. */
    lua_pushliteral(L, "");
    if (lua_getmetatable(L, -1)) {
        lua_pushvalue(L, -3);
        lua_setfield(L, -2, "__index");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_setfield(L, env, LUA_STRLIBNAME);
    sb_push_lib(L, LUA_TABLIBNAME, luaopen_table);
    lua_setfield(L, env, LUA_TABLIBNAME);
    sb_push_lib(L, LUA_MATHLIBNAME, luaopen_math);
    lua_setfield(L, env, LUA_MATHLIBNAME);
    sb_push_lib(L, LUA_UTF8LIBNAME, luaopen_utf8);
    lua_setfield(L, env, LUA_UTF8LIBNAME);

    lua_pushvalue(L, env);
    lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    lua_settop(L, base - 1);
}

/* lua_Reader over the chunk text that hands the parser one line at a time and records that line in
 * run->line. The parser raises a few errors without a position (nesting deeper than its C-stack limit,
 * positioned by sb_msgh, and memory errors, which take run->line through sb_set_stop); the last line
 * handed out is the line the parser was reading. Never fails; returns NULL at the end of the text. */
static const char *sb_read_line(lua_State *L, void *ud, size_t *size) {
    sb_run *run = ud;
    (void)L;
    if (run->load_pos >= run->len) {
        *size = 0;
        return NULL;
    }
    const char *start = run->text + run->load_pos;
    const char *nl = memchr(start, '\n', run->len - run->load_pos);
    *size = nl ? (size_t)(nl - start) + 1 : run->len - run->load_pos;
    run->load_pos += *size;
    run->line++;
    return start;
}

/* The protected body of a run (argument 1: the sb_run). Errors raised anywhere in it reach sb_msgh. */
static int sb_main(lua_State *L) {
    sb_run *run = lua_touserdata(L, 1);
    sb_open_env(L);
    if (clock_gettime(SB_CLOCK, &run->deadline) != 0) {
        lua_pushfstring(L, "%s: cannot read the clock for the time limit", run->short_src);
        return lua_error(L);
    }
    run->deadline.tv_sec += SB_TIME_LIMIT_MS / 1000;
    run->deadline.tv_nsec += (long)(SB_TIME_LIMIT_MS % 1000) * 1000000L;
    if (run->deadline.tv_nsec >= 1000000000L) {
        run->deadline.tv_sec++;
        run->deadline.tv_nsec -= 1000000000L;
    }
    lua_sethook(L, sb_hook, LUA_MASKCOUNT | LUA_MASKCALL, SB_HOOK_STEP);
    if (run->setup && run->setup(L, run->user) != 0) {
        lua_pushfstring(L, "%s: the config's host functions could not be installed", run->short_src);
        return lua_error(L);
    }
    if (run->len > 0 && run->text[0] == LUA_SIGNATURE[0]) {
        lua_pushfstring(L, "%s:1: precompiled (bytecode) chunks are refused; a config must be Lua source text",
                        run->short_src);
        return lua_error(L);
    }
    const char *name = lua_pushfstring(L, "=%s", run->chunkname);
    run->line = 0; /* sb_read_line counts the lines it hands out */
    run->parsing = 1;
    int st = lua_load(L, sb_read_line, run, name, "t");
    run->parsing = 0;
    if (st != LUA_OK)
        return lua_error(L); /* "file:line: ...", from the parser or from sb_msgh */
    run->line = 0; /* from here on, the hooks say which line runs */
    lua_Debug ar;
    lua_pushvalue(L, -1);
    if (lua_getinfo(L, ">S", &ar)) /* Lua's exact abbreviation of the name, for sb_msgh's prefix test */
        snprintf(run->short_src, sizeof run->short_src, "%s", ar.short_src);
    lua_call(L, 0, 0);
    if (run->finish && run->finish(L, run->user) != 0) {
        lua_pushfstring(L, "%s: the config's results could not be read", run->short_src);
        return lua_error(L);
    }
    return 0;
}

/* Fills err with the final "file:line: message" for a failed run of status st, message msg (may be NULL).
 * A stop (memory, budget, time) is named from what the allocator and hook recorded, since the message
 * that reached the top may be a secondary one. Lua's abbreviated chunk name becomes the full one. */
static fg_status sb_report(const sb_run *run, int st, const char *msg, fg_error *err) {
    char where[1024];
    if (run->stop_line > 0)
        snprintf(where, sizeof where, "%s:%d", run->chunkname, run->stop_line);
    else
        snprintf(where, sizeof where, "%s", run->chunkname);
    if (run->stop == SB_HOST_MEMORY)
        return fg_fail(err, FG_ERR_NO_MEMORY, "%s: out of memory (the host could not allocate for the Lua state)",
                       where);
    if (run->stop == SB_MEMORY || st == LUA_ERRMEM)
        return fg_fail(err, FG_ERR_CONFIG, "%s: memory limit (%d MiB) exceeded", where, (int)SB_MEM_LIMIT_MIB);
    if (run->stop == SB_BUDGET)
        return fg_fail(err, FG_ERR_CONFIG, "%s: instruction budget exceeded (%ld Lua instructions)", where,
                       (long)FG_LUA_INSN_LIMIT);
    if (run->stop == SB_TIME)
        return fg_fail(err, FG_ERR_CONFIG, "%s: time limit (%d ms) exceeded", where, (int)SB_TIME_LIMIT_MS);
    if (msg == NULL)
        return fg_fail(err, FG_ERR_CONFIG, "%s: %s", run->chunkname,
                       st == LUA_ERRERR ? "error while handling an error" : "unknown error");
    size_t sl = strlen(run->short_src);
    if (strncmp(msg, run->short_src, sl) == 0 && msg[sl] == ':')
        return fg_fail(err, FG_ERR_CONFIG, "%s%s", run->chunkname, msg + sl);
    return fg_fail(err, FG_ERR_CONFIG, "%s: %s", run->chunkname, msg);
}

fg_status lua_sandbox_run(const char *chunkname, const char *text, size_t len, fg_lua_setup_fn setup,
                          fg_lua_setup_fn finish, void *user, fg_error *err) {
    if (chunkname == NULL || (text == NULL && len > 0))
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lua_sandbox_run: chunkname and text must not be NULL");
    sb_run run;
    memset(&run, 0, sizeof run);
    run.chunkname = chunkname;
    snprintf(run.short_src, sizeof run.short_src, "%s", chunkname); /* Lua's "=name" rule: first 59 bytes */
    run.text = text ? text : "";
    run.len = len;
    run.setup = setup;
    run.finish = finish;
    run.user = user;

    lua_State *L = lua_newstate(sb_alloc, &run);
    if (L == NULL)
        return fg_fail(err, FG_ERR_NO_MEMORY, "%s: out of memory creating the Lua state", chunkname);
    /* Nothing below allocates outside the protected call: light C functions and light userdata are
     * plain values, and the fresh stack has room for three. */
    lua_pushcfunction(L, sb_msgh);
    lua_pushcfunction(L, sb_main);
    lua_pushlightuserdata(L, &run);
    int st = lua_pcall(L, 1, 0, 1);
    fg_status result = FG_OK;
    if (st != LUA_OK) {
        const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        result = sb_report(&run, st, msg, err);
    } else if (run.stop != SB_RUNNING) {
        /* A stop recorded after the last hook event (an allocation in the final instructions or in finish,
         * which Lua retried after a collection) had no hook left to raise it: the run is stopped all the same,
         * so the outcome does not depend on whether one more instruction ran. */
        result = sb_report(&run, LUA_ERRRUN, NULL, err);
    }
    lua_close(L);
    return result;
}

fg_status lua_sandbox_run_file(const char *path, fg_lua_setup_fn setup, fg_lua_setup_fn finish, void *user,
                               fg_error *err) {
    if (path == NULL)
        return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "lua_sandbox_run_file: path must not be NULL");
    /* fg_read_file_max opens without blocking and reads regular files only: a FIFO would block the caller
     * until a writer came, a device like /dev/urandom would never end. */
    uint8_t *buf;
    size_t len;
    fg_status st = fg_read_file_max(path, SB_FILE_MAX, &buf, &len, err);
    if (st != FG_OK) {
        struct stat fst;
        if (stat(path, &fst) == 0 && S_ISREG(fst.st_mode) && (uint64_t)fst.st_size > SB_FILE_MAX)
            return fg_fail(err, FG_ERR_CONFIG, "%s: config file is larger than %u MiB", path, SB_FILE_MAX >> 20);
        return st;
    }
    st = lua_sandbox_run(path, (const char *)buf, len, setup, finish, user, err);
    free(buf);
    return st;
}
