/* fuzz_mod.c: libFuzzer target for the mod tracer (generator/mod_trace.c with mod_build.c and mod_scan.c, through
 * the sandbox in core/lua_sandbox.c), built by tests/fuzz/run.sh and seeded with the examples of docs/mods.md.
 *
 * The input is a mod's text, as a file would hold it. Whatever it says, mod_trace must return (the sandbox's
 * instruction, time and memory limits end every run), leak nothing (LeakSanitizer checks each run) and keep
 * its contract:
 *   - a failure is FG_ERR_CONFIG, leaves the tree empty (no node, no aux, score and mask -1), and its message
 *     starts with "fuzz.lua:LINE:", or with "fuzz.lua: " for the refusals about the chunk as a whole (no mod
 *     function, a global of the wrong kind, the aux table's shape);
 *   - a success keeps every rule of tests/mod_tree_check.h (types, operand order, constants, aux names and
 *     order, no two nodes alike, nothing dead).
 * (Tracing the same text twice is not checked to give the same tree: a mod may build in pairs() order, which
 * Lua's per-state string hash seed changes from run to run.)
 * A broken rule aborts with the reason on stderr, which libFuzzer records as a finding. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generator/mod.h"
#include "tests/mod_tree_check.h"

#define FUZZ_CHUNK "fuzz.lua" /* the chunk name every message must start with */

/* Reports a broken rule with the message involved and stops the fuzzer (a finding). */
static void fuzz_mod_fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_mod: %s\n  detail: %s\n", what, detail);
    abort();
}

/* True when msg starts with "fuzz.lua:" and a line number and ':', or with "fuzz.lua: ". */
static int fuzz_mod_has_position(const char *msg) {
    size_t n = strlen(FUZZ_CHUNK);
    if (strncmp(msg, FUZZ_CHUNK, n) != 0 || msg[n] != ':')
        return 0;
    const char *p = msg + n + 1;
    if (*p == ' ')
        return 1;
    if (!isdigit((unsigned char)*p))
        return 0;
    while (isdigit((unsigned char)*p))
        p++;
    return *p == ':';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fg_mod m;
    fg_error err;
    fg_error_clear(&err);
    fg_status st = mod_trace(FUZZ_CHUNK, (const char *)data, size, &m, &err);
    if (st == FG_OK) {
        const char *problem = mod_tree_problem(&m);
        if (problem != NULL)
            fuzz_mod_fail("a traced tree breaks a rule", problem);
        return 0;
    }
    if (st != FG_ERR_CONFIG)
        fuzz_mod_fail("a failed trace is not FG_ERR_CONFIG", err.msg);
    if (m.n_nodes != 0 || m.n_aux != 0 || m.score != -1 || m.mask != -1)
        fuzz_mod_fail("a failed trace left something in the tree", err.msg);
    if (!fuzz_mod_has_position(err.msg))
        fuzz_mod_fail("an error message does not start with \"fuzz.lua:LINE:\" or \"fuzz.lua: \"", err.msg);
    return 0;
}
