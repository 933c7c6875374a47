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
 *     order, no two nodes alike, nothing dead), and the tree's consumers take it (fuzz_mod_consumers: check,
 *     canonical text, evaluation, emission, the derivative, a block's class against its positions).
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

/* The tree's consumers on a traced tree: mod_check holds; the canonical text fits and names the id; evaluation at a
 * few points (aux arrays of a few elements, so that loads go both in and out of range) is a number, NaN or a mask's
 * 1, 0 or -1; the emitted code fits; score_mod's derivative builds (or is refused for size with a sentence) and its
 * code fits; a block's class agrees with every position's mask (sound). */
static void fuzz_mod_consumers(const fg_mod *m) {
    fg_error err;
    if (mod_check(m, &err) != FG_OK)
        fuzz_mod_fail("mod_check refuses a traced tree", err.msg);
    static char text[MOD_MAX_NODES * 96 + MOD_MAX_AUX * 48 + 64];
    if (mod_canonical(m, text, sizeof text) <= 0)
        fuzz_mod_fail("a traced tree's canonical text does not fit", "");
    static const float f[4] = {0.5f, -1.f, 2.f, 3.f};
    static const int32_t k[4] = {0, 1, -2, 3};
    mod_inputs in;
    memset(&in, 0, sizeof in);
    for (int i = 0; i < m->n_aux; i++) {
        in.aux[i] = m->aux[i].is_int ? (const void *)k : (const void *)f;
        in.extent[i][0] = 2, in.extent[i][1] = m->aux[i].rank == 2 ? 2 : 1;
    }
    for (int p = 0; p < 6; p++) {
        in.s = p * 0.75 - 2.0, in.b = p % 2, in.h = p % 3, in.q = p * 3 - 2, in.kv = 7 - p * 2;
        const int r = mod_eval_mask(m, &in);
        if (r < -1 || r > 1)
            fuzz_mod_fail("mod_eval_mask gives a value other than 1, 0 or -1", "");
        (void)mod_eval_score(m, &in);
    }
    static char code[2 * MOD_EMIT_MAX];
    const int n = mod_emit(m, code, MOD_EMIT_MAX);
    if (n < 0)
        fuzz_mod_fail("a traced tree's code does not fit MOD_EMIT_MAX", "");
    if (m->score >= 0) {
        static fg_mod g;
        int grad = -1;
        const fg_status gs = mod_grad(m, &g, &grad, &err);
        if (gs == FG_OK && mod_emit_grad(&g, grad, code + n, sizeof code - (size_t)n) < 0)
            fuzz_mod_fail("a derivative's code does not fit", "");
        if (gs != FG_OK && (gs != FG_ERR_UNSUPPORTED || !err.msg[0]))
            fuzz_mod_fail("mod_grad fails otherwise than for size", err.msg);
    }
    const mod_block blk = {1, 2, 3, -3, 4, 0, 6};
    const int cls = mod_mask_block(m, &blk);
    if (cls != MOD_BLOCK_MIXED)
        for (int h = blk.h_lo; h <= blk.h_hi; h++)
            for (int q = blk.q_lo; q <= blk.q_hi; q++)
                for (int kv = blk.kv_lo; kv <= blk.kv_hi; kv++) {
                    in.b = blk.b, in.h = h, in.q = q, in.kv = kv;
                    if (mod_eval_mask(m, &in) != (cls == MOD_BLOCK_KEPT))
                        fuzz_mod_fail("mod_mask_block's class disagrees with a position's mask", text);
                }
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
        fuzz_mod_consumers(&m);
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
