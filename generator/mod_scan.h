/* mod_scan.h: the text check mod_trace runs on a mod's Lua chunk before any of it runs (mod_scan.c). */
#ifndef FG_MOD_SCAN_H
#define FG_MOD_SCAN_H

#include <stddef.h>

/* Scans the Lua chunk text (len bytes) for the constructs a traced mod cannot mean: the keywords if, elseif,
 * while, repeat, and, or, not and the operators ==, ~=, <, <=, >, >= (outside strings and comments; the
 * attributes <const> and <close> after a local's name are not comparisons). Returns 0 when there is none;
 * otherwise the line of the first (counted as Lua counts lines) with *why set to a static sentence that
 * names it and says what to write instead. Reads nothing past len; any bytes, valid Lua or not, are scanned
 * without failing. */
int mod_scan(const char *text, size_t len, const char **why);

#endif
