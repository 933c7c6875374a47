/* lua_sandbox_host.c: helpers for the host functions a config calls (variants{}, tile_policy{}, space{},
 * result{}): reading and checking their table arguments and raising errors that name the function and the
 * field. Declared in lua_sandbox.h beside the run itself (lua_sandbox.c), which these never touch: they
 * use only Lua's public API on the state a host function is given. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "core/lua_sandbox.h"

int lua_sandbox_raise(lua_State *L, const char *fn, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return luaL_error(L, "%s: %s", fn, msg); /* luaL_error prefixes the calling line's position */
}

const char *lua_sandbox_describe(lua_State *L, int idx, char *buf, size_t n) {
    if (lua_type(L, idx) == LUA_TNUMBER) {
        if (lua_isinteger(L, idx))
            snprintf(buf, n, "%lld", (long long)lua_tointeger(L, idx));
        else
            snprintf(buf, n, "%.17g", (double)lua_tonumber(L, idx));
        return buf;
    }
    return luaL_typename(L, idx);
}

void lua_sandbox_bind(lua_State *L, const char *name, int (*f)(lua_State *), void *user) {
    lua_pushlightuserdata(L, user);
    lua_pushcclosure(L, f, 1);
    lua_setglobal(L, name);
}

void lua_sandbox_check_table(lua_State *L, int idx, const char *fn, const char *what, const char *const *fields) {
    char got[64];
    if (what == NULL) { /* the call's argument */
        if (lua_gettop(L) != 1 || lua_type(L, 1) != LUA_TTABLE)
            lua_sandbox_raise(L, fn, "expects one table argument, as in %s { ... }, got %s%s", fn,
                             lua_gettop(L) == 0 ? "no value" : lua_sandbox_describe(L, 1, got, sizeof got),
                             lua_gettop(L) > 1 ? " and more arguments" : "");
        idx = 1;
    } else if (lua_type(L, idx) != LUA_TTABLE) {
        lua_sandbox_raise(L, fn, "field '%s' must be a table, got %s", what, lua_sandbox_describe(L, idx, got, sizeof got));
    }
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            lua_sandbox_raise(L, fn, "field names%s%s must be strings (as in head_dim = 128), got a %s key",
                              what ? " in " : "", what ? what : "", luaL_typename(L, -1));
        size_t len;
        const char *key = lua_tolstring(L, -1, &len);
        int known = 0;
        for (int i = 0; fields[i] && !known; i++)
            known = strlen(fields[i]) == len && memcmp(fields[i], key, len) == 0;
        if (!known) {
            char list[300] = "";
            for (int i = 0; fields[i]; i++) {
                strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
                strncat(list, fields[i], sizeof list - strlen(list) - 1);
            }
            lua_sandbox_raise(L, fn, "unknown field '%.60s'%s%s (known fields: %s)", key, what ? " in " : "",
                              what ? what : "", list);
        }
    }
}

long long lua_sandbox_list_length(lua_State *L, int idx, const char *fn, const char *field, const char *expected) {
    idx = lua_absindex(L, idx);
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx), keys = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        keys++;
    }
    if (keys == 0) lua_sandbox_raise(L, fn, "field '%s' is an empty list: give at least one value", field);
    if (keys != n)
        lua_sandbox_raise(L, fn, "field '%s' must be %s, got a table that is not a list (keys other than 1..n)", field,
                          expected);
    return (long long)n;
}
