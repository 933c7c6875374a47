/* test_mod_trace.c: the mod tracer (generator/mod_trace.c, with its text scan generator/mod_scan.c): the shipped
 * examples traced to the trees expected, node by node (prefix-LM, document, sliding-window and block-sparse
 * masks; ALiBi, softcap, relative-position and T5 biases), hash-consing, int-to-float promotion, aux sorting,
 * dead code left out; then every refusal with the line it names. Every tree traced is also checked against
 * the structural rules of tests/mod_tree_check.h. Needs no GPU. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generator/mod.h"
#include "tests/alloc_walk.h"
#include "tests/mod_tree_check.h"
#include "tests/test_util.h"

/* A regression that lets a runaway mod loop must fail the test, not hang the suite. */
TestSuite(mod_trace, .timeout = 30);

/* ---- helpers ---- */

static const char *const op_names[MOD_OP_COUNT] = {
    "const", "arg", "load", "neg", "add", "sub", "mul", "div", "idiv", "mod", "min", "max", "abs", "exp",
    "log", "tanh", "sqrt", "float", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not", "where", "floor"};

/* Writes the tree's nodes as "s | h | load.f slope[1] | sub.i 3 4 | ...": an argument by its name, a
 * constant as const.T VALUE, a load as load.T NAME[INDICES], others as OP.T OPERANDS (T: i, f or b). */
static const char *render(const fg_mod *m, char *buf, size_t n) {
    static const char *const args[] = {"s", "b", "h", "q", "kv"};
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->n_nodes && used < n; i++) {
        const mod_node *x = &m->nodes[i];
        char t = "ifb"[x->type];
        const char *sep = i ? " | " : "";
        int w;
        if (x->op == MOD_ARG)
            w = snprintf(buf + used, n - used, "%s%s", sep, args[x->arg]);
        else if (x->op == MOD_CONST)
            w = snprintf(buf + used, n - used, "%sconst.%c %.17g", sep, t, x->value);
        else if (x->op == MOD_LOAD && x->b >= 0)
            w = snprintf(buf + used, n - used, "%sload.%c %s[%d,%d]", sep, t, m->aux[x->arg].name, x->a, x->b);
        else if (x->op == MOD_LOAD)
            w = snprintf(buf + used, n - used, "%sload.%c %s[%d]", sep, t, m->aux[x->arg].name, x->a);
        else if (x->c >= 0)
            w = snprintf(buf + used, n - used, "%s%s.%c %d %d %d", sep, op_names[x->op], t, x->a, x->b, x->c);
        else if (x->b >= 0)
            w = snprintf(buf + used, n - used, "%s%s.%c %d %d", sep, op_names[x->op], t, x->a, x->b);
        else
            w = snprintf(buf + used, n - used, "%s%s.%c %d", sep, op_names[x->op], t, x->a);
        used += (size_t)w;
    }
    return buf;
}

/* Traces text as "mod.lua", asserts success and the tree's structural rules. */
static void trace_ok(const char *text, fg_mod *m) {
    fg_error err;
    fg_error_clear(&err);
    fg_status st = mod_trace("mod.lua", text, strlen(text), m, &err);
    cr_assert_eq(st, FG_OK, "trace failed (%d): %s\n%s", st, err.msg, text);
    const char *problem = mod_tree_problem(m);
    cr_assert_null(problem, "the traced tree breaks a rule: %s\n%s", problem ? problem : "", text);
}

/* Traces text, asserts the tree renders as `nodes` with results score and mask (-1: none). */
static void trace_is(const char *text, const char *nodes, int score, int mask) {
    fg_mod m;
    char buf[4096];
    trace_ok(text, &m);
    cr_assert_str_eq(render(&m, buf, sizeof buf), nodes, "for\n%s", text);
    cr_assert_eq(m.score, score, "score is node %d, expected %d", m.score, score);
    cr_assert_eq(m.mask, mask, "mask is node %d, expected %d", m.mask, mask);
}

/* Traces text as "mod.lua", asserts FG_ERR_CONFIG with a message that starts with `where` ("mod.lua:3:") and
 * contains `what`, and an emptied tree. */
static void trace_fails(const char *text, const char *where, const char *what) {
    fg_error err;
    fg_error_clear(&err);
    fg_mod m;
    memset(&m, 0x5a, sizeof m);
    fg_status st = mod_trace("mod.lua", text, strlen(text), &m, &err);
    cr_assert_eq(st, FG_ERR_CONFIG, "status %d, message: %s\n%s", st, err.msg, text);
    cr_assert(strncmp(err.msg, where, strlen(where)) == 0, "message should start with '%s': %s\n%s", where, err.msg,
              text);
    cr_assert(strstr(err.msg, what) != NULL, "message should mention '%s': %s\n%s", what, err.msg, text);
    cr_assert_eq(m.n_nodes, 0);
    cr_assert_eq(m.n_aux, 0);
    cr_assert_eq(m.score, -1);
    cr_assert_eq(m.mask, -1);
}

/* How many nodes of m have op. */
static int count_op(const fg_mod *m, int op) {
    int k = 0;
    for (int i = 0; i < m->n_nodes; i++)
        k += m->nodes[i].op == op;
    return k;
}

/* ---- the shipped examples ---- */

Test(mod_trace, prefix_lm_mask) {
    trace_is("-- prefix-LM: the prefix of each sequence is seen by all its queries, the rest causally\n"
             "aux = { prefix_len = fg.aux(\"i32\", 1) }\n"
             "mask_mod = function(b, h, q, kv)\n"
             "  return fg.or_(fg.le(kv, fg.load(prefix_len, b)), fg.le(kv, q))\n"
             "end\n",
             "kv | b | load.i prefix_len[1] | le.b 0 2 | q | le.b 0 4 | or.b 3 5", -1, 6);
}

Test(mod_trace, document_mask) {
    trace_is("aux = { doc = fg.aux(\"i32\", 1) }\n"
             "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, q), fg.load(doc, kv)) end\n",
             "q | load.i doc[0] | kv | load.i doc[2] | eq.b 1 3", -1, 4);
}

Test(mod_trace, alibi_score) {
    trace_is("aux = { slope = fg.aux(\"f32\", 1) }\n"
             "score_mod = function(s, b, h, q, kv)\n"
             "  return s - fg.load(slope, h) * fg.abs(q - kv)\n"
             "end\n",
             "s | h | load.f slope[1] | q | kv | sub.i 3 4 | abs.i 5 | float.f 6 | mul.f 2 7 | sub.f 0 8", 9, -1);
}

Test(mod_trace, softcap_score) {
    /* The cap written as an integer or a float is the same float constant, one node used twice. */
    const char *tree = "const.f 30 | s | div.f 1 0 | tanh.f 2 | mul.f 0 3";
    trace_is("local cap = 30\nscore_mod = function(s, b, h, q, kv) return cap * fg.tanh(s / cap) end\n", tree, 4, -1);
    trace_is("local cap = 30.0\nscore_mod = function(s, b, h, q, kv) return cap * fg.tanh(s / cap) end\n", tree, 4,
             -1);
}

Test(mod_trace, relative_position_bias_2d) {
    trace_is("aux = { rel = fg.aux(\"f32\", 2) }  -- [heads, 2047]: a bias per head and distance\n"
             "score_mod = function(s, b, h, q, kv) return s + fg.load(rel, h, kv - q + 1023) end\n",
             "s | h | kv | q | sub.i 2 3 | const.i 1023 | add.i 4 5 | load.f rel[1,6] | add.f 0 7", 8, -1);
}

Test(mod_trace, sliding_window_mask) {
    trace_is("mask_mod = function(b, h, q, kv) return fg.and_(fg.le(kv, q), fg.gt(kv, q - 256)) end\n",
             "kv | q | le.b 0 1 | const.i 256 | sub.i 1 3 | gt.b 0 4 | and.b 2 5", -1, 6);
}

Test(mod_trace, block_sparse_mask) {
    trace_is("aux = { blocks = fg.aux(\"i32\", 2) }  -- [q blocks, kv blocks]: 1 where the block is computed\n"
             "mask_mod = function(b, h, q, kv)\n"
             "  return fg.eq(fg.load(blocks, q // 128, kv // 128), 1)\n"
             "end\n",
             "q | const.i 128 | idiv.i 0 1 | kv | idiv.i 3 1 | load.i blocks[2,4] | const.i 1 | eq.b 5 6", -1, 7);
}

/* T5's bucketed bias: 16 buckets a direction, exact below 8, log-spaced up to 128. The log bucket
 * min(8 + floor(lg), 15) is written as 8 plus the count of k in 1..7 with lg >= k (no float-to-int in the
 * vocabulary); head groups share rows (h % 8). */
static const char t5_text[] =
    "aux = { t5 = fg.aux(\"f32\", 2) }  -- [8 head groups, 32 buckets]\n"
    "local N, EXACT, FAR = 16, 8, 128\n"
    "local function bucket(q, kv)\n"
    "  local rel = kv - q\n"
    "  local side = fg.where(fg.gt(rel, 0), N, 0)\n"
    "  local a = fg.abs(rel)\n"
    "  local lg = fg.log(a / EXACT) / math.log(FAR / EXACT) * (N - EXACT)\n"
    "  local far = EXACT\n"
    "  for k = 1, N - EXACT - 1 do far = far + fg.where(fg.ge(lg, k), 1, 0) end\n"
    "  return side + fg.where(fg.lt(a, EXACT), a, fg.min(far, N - 1))\n"
    "end\n"
    "score_mod = function(s, b, h, q, kv) return s + fg.load(t5, h % 8, bucket(q, kv)) end\n";

Test(mod_trace, t5_bucketed_bias) {
    fg_mod m;
    trace_ok(t5_text, &m);
    cr_assert_eq(m.n_aux, 1);
    cr_assert_eq(m.aux[0].rank, 2);
    cr_assert_eq(count_op(&m, MOD_LOG), 1);
    cr_assert_eq(count_op(&m, MOD_GE), 7);
    cr_assert_eq(count_op(&m, MOD_WHERE), 9);
    cr_assert_eq(count_op(&m, MOD_MOD), 1);
    cr_assert_eq(count_op(&m, MOD_MIN), 1);
    cr_assert_eq(count_op(&m, MOD_LOAD), 1);
    const mod_node *root = &m.nodes[m.score];
    cr_assert_eq(root->op, MOD_ADD);
    cr_assert_eq(root->type, MOD_T_FLOAT);
    const mod_node *load = &m.nodes[root->b];
    cr_assert_eq(load->op, MOD_LOAD);
    cr_assert_eq(m.nodes[load->a].op, MOD_MOD);
    cr_assert_eq(m.nodes[load->b].type, MOD_T_INT);
    for (int i = 0; i < m.n_nodes; i++)
        if (m.nodes[i].op == MOD_LOG) { /* log(float(|rel|) / 8.0): the int made float, the 8 a float constant */
            const mod_node *div = &m.nodes[m.nodes[i].a];
            cr_assert_eq(div->op, MOD_DIV);
            cr_assert_eq(m.nodes[div->a].op, MOD_FLOAT);
            cr_assert_eq(m.nodes[div->b].op, MOD_CONST);
            cr_assert_eq(m.nodes[div->b].type, MOD_T_FLOAT);
            cr_assert_eq(m.nodes[div->b].value, 8.0);
        }
    /* 8 appears as an int (EXACT in far's sum and the comparison) and as a float (the divisor and N - EXACT),
     * each once */
    int ints = 0, floats = 0;
    for (int i = 0; i < m.n_nodes; i++)
        if (m.nodes[i].op == MOD_CONST && m.nodes[i].value == 8.0)
            *(m.nodes[i].type == MOD_T_INT ? &ints : &floats) += 1;
    cr_assert_eq(ints, 1);
    cr_assert_eq(floats, 1);
}

Test(mod_trace, score_and_mask_share_nodes) {
    trace_is("aux = { slope = fg.aux(\"f32\", 1) }\n"
             "score_mod = function(s, b, h, q, kv) return s - fg.load(slope, h) * fg.float(q - kv) end\n"
             "mask_mod = function(b, h, q, kv) return fg.ge(q - kv, 0) end\n",
             "s | h | load.f slope[1] | q | kv | sub.i 3 4 | float.f 5 | mul.f 2 6 | sub.f 0 7 | const.i 0 | "
             "ge.b 5 9",
             8, 10);
}

/* ---- the tree's form ---- */

Test(mod_trace, hash_consing_makes_one_node_of_alike_subexpressions) {
    trace_is("score_mod = function(s, b, h, q, kv)\n"
             "  local d1, d2 = q - kv, q - kv\n"
             "  return s + fg.where(fg.lt(d1, 0), -d2, q - kv)\n"
             "end\n",
             "s | q | kv | sub.i 1 2 | const.i 0 | lt.b 3 4 | neg.i 3 | where.i 5 6 3 | float.f 7 | add.f 0 8", 9, -1);
}

Test(mod_trace, an_int_meeting_a_float_is_made_float) {
    trace_is("mask_mod = function(b, h, q, kv) return fg.lt(fg.float(q) * 0.5, kv) end\n",
             "q | float.f 0 | const.f 0.5 | mul.f 1 2 | kv | float.f 4 | lt.b 3 5", -1, 6);
    trace_is("score_mod = function(s, b, h, q, kv) return fg.where(fg.lt(q, kv), q, 0.5) end\n",
             "q | kv | lt.b 0 1 | float.f 0 | const.f 0.5 | where.f 2 3 4", 5, -1);
    trace_is("score_mod = function(s, b, h, q, kv) return fg.exp(q) + fg.max(s, kv) end\n",
             "q | float.f 0 | exp.f 1 | s | kv | float.f 4 | max.f 3 5 | add.f 2 6", 7, -1);
    /* / is float division: two ints are both made float */
    trace_is("score_mod = function(s, b, h, q, kv) return q / kv end\n", "q | float.f 0 | kv | float.f 2 | div.f 1 3",
             4, -1);
    /* fg.floor: a float to an int; an int (or an int constant) is its own floor */
    trace_is("mask_mod = function(b, h, q, kv) return fg.eq(fg.floor(fg.float(q) * 0.5), fg.floor(kv)) end\n",
             "q | float.f 0 | const.f 0.5 | mul.f 1 2 | floor.i 3 | kv | eq.b 4 5", -1, 6);
    /* a Lua integer where a float is needed is a float constant; fg.float of a float is itself */
    trace_is("score_mod = function(s, b, h, q, kv) return fg.float(s + 1) end\n", "s | const.f 1 | add.f 0 1", 2, -1);
    /* score_mod's int result is made float; a constant score is a float constant */
    trace_is("score_mod = function(s, b, h, q, kv) return q * 2 end\n", "q | const.i 2 | mul.i 0 1 | float.f 2", 3,
             -1);
    trace_is("score_mod = function(s, b, h, q, kv) return 0 end\n", "const.f 0", 0, -1);
}

Test(mod_trace, aux_sorted_by_name) {
    fg_mod m;
    char buf[1024];
    trace_ok("aux = { zeta = fg.aux(\"f32\", 1), alpha = fg.aux(\"i32\", 2), Mid = fg.aux(\"f32\", 1),\n"
             "        unused = fg.aux(\"i32\", 1) }\n"
             "score_mod = function(s, b, h, q, kv)\n"
             "  return s + fg.load(zeta, h) + fg.load(Mid, q) + fg.load(alpha, q, kv)\n"
             "end\n",
             &m);
    cr_assert_eq(m.n_aux, 4);
    cr_assert_str_eq(m.aux[0].name, "Mid");
    cr_assert_str_eq(m.aux[1].name, "alpha");
    cr_assert_str_eq(m.aux[2].name, "unused"); /* declared but never loaded: still passed by the call */
    cr_assert_str_eq(m.aux[3].name, "zeta");
    cr_assert_eq(m.aux[1].is_int, 1);
    cr_assert_eq(m.aux[1].rank, 2);
    cr_assert_eq(m.aux[3].is_int, 0);
    cr_assert_str_eq(render(&m, buf, sizeof buf),
                     "s | h | load.f zeta[1] | add.f 0 2 | q | load.f Mid[4] | add.f 3 5 | kv | load.i alpha[4,7] | "
                     "float.f 8 | add.f 6 9");
    cr_assert_eq(m.nodes[2].arg, 3);
    cr_assert_eq(m.nodes[5].arg, 0);
    cr_assert_eq(m.nodes[8].arg, 1);
}

Test(mod_trace, dead_code_and_build_order_leave_the_tree_alone) {
    fg_mod x, y;
    trace_ok("score_mod = function(s, b, h, q, kv)\n"
             "  local unused = fg.exp(s * kv)\n"
             "  local a = q * 3\n"
             "  local c = kv + 1\n"
             "  return s + fg.float(c - a)\n"
             "end\n",
             &x);
    trace_ok("score_mod = function(s, b, h, q, kv) return s + fg.float((kv + 1) - q * 3) end\n", &y);
    char bx[1024], by[1024];
    cr_assert_str_eq(render(&x, bx, sizeof bx), render(&y, by, sizeof by));
    cr_assert_eq(count_op(&x, MOD_EXP), 0);
}

Test(mod_trace, aux_reached_through_the_table_too) {
    trace_is("aux = { doc = fg.aux(\"i32\", 1) }\n"
             "mask_mod = function(b, h, q, kv) return fg.ne(fg.load(aux.doc, q), 0) end\n",
             "q | load.i doc[0] | const.i 0 | ne.b 1 2", -1, 3);
}

Test(mod_trace, text_the_scan_must_not_mistake) {
    /* keywords and operators inside strings, long strings and comments; attributes; shifts; for loops;
     * lines counted across "\r\n" and long brackets */
    trace_is("-- if a < b then ... end\r\n"
             "--[==[ while x ~= y do\r\n and or not ]==]\r\n"
             "local msg = \"if a == b\" .. 'x <= y' .. [[\nrepeat >= ]] .. \"\\\n>\"\r\n"
             "local k <const> = 1 << 4\n"
             "local half <close> = nil\n"
             "local w = 256 >> 1\n"
             "mask_mod = function(b, h, q, kv)\n"
             "  local lo = q\n"
             "  for i = 1, 2 do lo = lo - k end\n"
             "  return fg.ge(kv, lo)\n"
             "end\n",
             "kv | q | const.i 16 | sub.i 1 2 | sub.i 3 2 | ge.b 0 4", -1, 5);
    trace_fails("--[[ a\nb ]] local s = [==[\n]] ]=]\n]==]\nlocal x = 1 >= 2\n", "mod.lua:5:", "'>=' is refused");
    trace_fails("local s = 'a\\z\n\n  b'\nlocal x = 1 == 2\n", "mod.lua:4:", "'==' is refused");
}

Test(mod_trace, file_named_by_its_path) {
    char dir[64], path[128];
    test_scratch_make(dir, sizeof dir, "fg-mod");
    snprintf(path, sizeof path, "%s/softcap.lua", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("score_mod = function(s, b, h, q, kv)\n  return 30 * fg.tanh(s / 30)\nend\n"
          "mask_mod = function(b, h, q, kv) return q < kv end\n", f);
    fclose(f);
    fg_mod m;
    fg_error err;
    fg_error_clear(&err);
    cr_assert_eq(mod_trace_file(path, &m, &err), FG_ERR_CONFIG);
    char want[160];
    snprintf(want, sizeof want, "%s:4: '<' is refused", path);
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
    f = fopen(path, "w");
    fputs("score_mod = function(s, b, h, q, kv)\n  return 30 * fg.tanh(s / 30)\nend\n", f);
    fclose(f);
    cr_assert_eq(mod_trace_file(path, &m, &err), FG_OK, "%s", err.msg);
    cr_assert_eq(m.n_nodes, 5);
    snprintf(path, sizeof path, "%s/missing.lua", dir);
    cr_assert_eq(mod_trace_file(path, &m, &err), FG_ERR_IO);
    cr_assert(strstr(err.msg, "missing.lua") != NULL, "%s", err.msg);
    cr_assert_eq(m.n_nodes, 0);
    test_scratch_remove(dir, "fg-mod");
}

Test(mod_trace, null_arguments) {
    fg_mod m;
    fg_error err;
    cr_assert_eq(mod_trace("x", "", 0, NULL, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(mod_trace(NULL, "", 0, &m, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(mod_trace("x", NULL, 3, &m, &err), FG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(mod_trace_file(NULL, &m, &err), FG_ERR_INVALID_ARGUMENT);
}

/* A long chunk name (past Lua's 60-byte abbreviation) still leads every message in full. */
Test(mod_trace, long_chunk_name_in_full) {
    const char *name = "/a/very/long/directory/name/that/goes/on/and/on/past/sixty/bytes/mods/alibi.lua";
    const char *texts[] = {"score_mod = function(s, b, h, q, kv)\n  return true\nend\n",
                           "score_mod = function(s, b, h, q, kv)\n  return s + 'x'\nend\n",
                           "x = 1\nif x then end\n", "x = 1\n"};
    const char *lines[] = {":1: ", ":2: ", ":2: ", ": "};
    for (int i = 0; i < 4; i++) {
        fg_mod m;
        fg_error err;
        fg_error_clear(&err);
        cr_assert_eq(mod_trace(name, texts[i], strlen(texts[i]), &m, &err), FG_ERR_CONFIG);
        char want[256];
        snprintf(want, sizeof want, "%s%s", name, lines[i]);
        cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "should start with '%s': %s", want, err.msg);
    }
}

/* ---- refusals: the text scan ---- */

Test(mod_trace, control_flow_keywords_refused_with_their_line) {
    static const struct {
        const char *line2; /* the offending line (line 2 of a helper outside the mod functions) */
        const char *what;
        const char *instead;
    } cases[] = {
        {"  if x then return 1 end", "'if' is refused", "fg.where"},
        {"  if x then return 1 elseif x then return 2 end", "'if' is refused", "fg.where"},
        {"  local y = 1; while y do y = nil end", "'while' is refused", "numeric for"},
        {"  repeat x = nil until x", "'repeat' is refused", "numeric for"},
        {"  return x and 1", "'and' is refused", "fg.and_"},
        {"  return x or 1", "'or' is refused", "fg.or_"},
        {"  return not x", "'not' is refused", "fg.not_"},
        {"  return x == 1", "'==' is refused", "fg.eq"},
        {"  return x ~= 1", "'~=' is refused", "fg.ne"},
        {"  return x < 1", "'<' is refused", "fg.lt"},
        {"  return x <= 1", "'<=' is refused", "fg.le"},
        {"  return x > 1", "'>' is refused", "fg.gt"},
        {"  return x >= 1", "'>=' is refused", "fg.ge"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "local function helper(x)\n%s\nend\nmask_mod = function(b, h, q, kv) return fg.lt(kv, q) end\n",
                 cases[i].line2);
        trace_fails(text, "mod.lua:2:", cases[i].what);
        trace_fails(text, "mod.lua:2:", cases[i].instead);
    }
    trace_fails("mask_mod = function(b, h, q, kv)\n  return fg.lt(kv, q)\nend\n\n"
                "x = 1 elseif_ = 2\nlocal t = {}\nif t then end\n", "mod.lua:7:", "'if' is refused");
    trace_fails("score_mod = function(s, b, h, q, kv)\n  local kept = kv <= q\n  return s\nend\n", "mod.lua:2:",
                "fg.le(a, b)");
}

/* ---- refusals: values and types ---- */

Test(mod_trace, lua_comparisons_on_expressions_refused) {
    /* the text has no comparison; table.sort makes Lua compare the expressions */
    trace_fails("score_mod = function(s, b, h, q, kv)\n  table.sort({q, kv})\n  return s\nend\n", "mod.lua:2:",
                "use fg.lt(a, b)");
}

Test(mod_trace, other_lua_operators_on_expressions_refused) {
    static const struct {
        const char *expr;
        const char *what;
    } cases[] = {
        {"s .. 'x'", "an expression is not text"},  {"s ^ 2", "'^' is not in the mod vocabulary"},
        {"q & 1", "bitwise operators"},              {"q | 1", "bitwise operators"},
        {"q ~ 1", "bitwise operators"},              {"~q", "bitwise operators"},
        {"q << 1", "bitwise operators"},             {"#q", "has none"},
        {"q.x", "no fields or methods"},             {"q:abs()", "no fields or methods"},
        {"q()", "cannot be called"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "score_mod = function(s, b, h, q, kv)\n  return %s\nend\n", cases[i].expr);
        trace_fails(text, "mod.lua:2:", cases[i].what);
    }
    trace_fails("score_mod = function(s, b, h, q, kv)\n  q.x = 1\n  return s\nend\n", "mod.lua:2:", "no fields to set");
    trace_fails("score_mod = function(s, b, h, q, kv)\n  do local c <close> = q end\n  return s\nend\n", "mod.lua:2:",
                "to-be-closed");
    trace_fails("score_mod = function(s, b, h, q, kv)\n  setmetatable(q, {})\n  return s\nend\n", "mod.lua:2:",
                "got fg expression");
}

Test(mod_trace, non_values_as_operands_refused) {
    static const struct {
        const char *expr;
        const char *what;
    } cases[] = {
        {"s + 'x'", "the right operand of '+' is a string"},
        {"'1' + s", "the left operand of '+' is a string"},
        {"s * {}", "the right operand of '*' is a table"},
        {"s - print", "the right operand of '-' is a function"},
        {"fg.min(s, nil)", "argument 2 of fg.min is nil"},
        {"fg.max(s, true)", "argument 2 of fg.max is the Lua boolean true"},
        {"fg.where(true, s, 1)", "the Lua boolean true, not an expression"},
        {"fg.abs(s, s)", "fg.abs takes 1 argument, got 2"},
        {"fg.where(fg.lt(q, kv), s)", "fg.where takes 3 arguments, got 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "score_mod = function(s, b, h, q, kv)\n\n  return %s\nend\n", cases[i].expr);
        trace_fails(text, "mod.lua:3:", cases[i].what);
    }
    trace_fails("aux = { doc = fg.aux('i32', 1) }\nscore_mod = function(s, b, h, q, kv)\n  return s + doc\nend\n",
                "mod.lua:3:", "is an aux array, not a value");
    trace_fails("aux = { doc = fg.aux('i32', 1) }\nscore_mod = function(s, b, h, q, kv)\n  return doc * 2\nend\n",
                "mod.lua:3:", "fg.load(array, i [, j])");
}

Test(mod_trace, type_errors_refused) {
    static const struct {
        const char *expr;
        const char *what;
    } cases[] = {
        {"fg.where(fg.and_(s, fg.lt(q, kv)), s, 0)", "argument 1 of fg.and_ is a float, and fg.and_ takes bools"},
        {"fg.where(fg.not_(q), s, 0)", "argument 1 of fg.not_ is an int"},
        {"fg.where(fg.or_(fg.lt(q, kv), 1), s, 0)", "argument 2 of fg.or_ is a number"},
        {"s // 2", "the left operand of '//' is a float"},
        {"q % 2.5", "the right operand of '%' is a float"},
        {"fg.where(q, s, 0)", "its condition (argument 1) is an int"},
        {"fg.where(fg.lt(q, kv), s, fg.lt(q, kv))", "branches are a float and a bool"},
        {"fg.lt(q, kv) + 1", "the left operand of '+' is a bool"},
        {"-fg.lt(q, kv)", "the operand of unary '-' is a bool"},
        {"fg.exp(fg.lt(q, kv))", "argument 1 of fg.exp is a bool"},
        {"fg.float(fg.lt(q, kv))", "argument 1 of fg.float is a bool"},
        {"fg.where(fg.eq(fg.lt(q, kv), fg.lt(kv, q)), s, 0)", "combine bools with fg.and_"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "score_mod = function(s, b, h, q, kv)\n  return %s\nend\n", cases[i].expr);
        trace_fails(text, "mod.lua:2:", cases[i].what);
    }
}

Test(mod_trace, wrong_results_refused) {
    static const struct {
        const char *fn; /* "score_mod" or "mask_mod" */
        const char *body;
        const char *what;
    } cases[] = {
        {"score_mod", "return fg.lt(q, kv)", "score_mod returned a bool"},
        {"score_mod", "return true", "score_mod returned the Lua boolean true: a score is a number"},
        {"score_mod", "return 'x'", "score_mod returned a string"},
        {"score_mod", "return {}", "score_mod returned a table"},
        {"score_mod", "return print", "score_mod returned a function"},
        {"score_mod", "return nil", "score_mod returned a nil"},
        {"score_mod", "local x = s", "score_mod returned nothing"},
        {"score_mod", "return s, s", "score_mod returned 2 values; it returns one"},
        {"score_mod", "return 1e39", "not a finite fp32 value"},
        {"mask_mod", "return true", "mask_mod returned the Lua boolean true: a constant mask is not a mask; use "
                                    "fg.eq"},
        {"mask_mod", "return false", "mask_mod returned the Lua boolean false"},
        {"mask_mod", "return 1", "mask_mod returned the number 1"},
        {"mask_mod", "return q - kv", "mask_mod returned an int expression"},
        {"mask_mod", "return fg.float(q)", "mask_mod returned a float expression"},
        {"mask_mod", "return 'x'", "mask_mod returned a string"},
        {"mask_mod", "return rawequal(q, kv)", "mask_mod returned the Lua boolean false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        int score = cases[i].fn[0] == 's';
        snprintf(text, sizeof text, "\n%s = function(%s)\n  %s\nend\n", cases[i].fn, score ? "s, b, h, q, kv" : "b, h, q, kv",
                 cases[i].body);
        trace_fails(text, "mod.lua:2:", cases[i].what); /* the line the function starts at */
    }
    /* a value of score_mod's reaching mask_mod */
    trace_fails("local kept\nscore_mod = function(s, b, h, q, kv) kept = fg.gt(s, 0) return s end\n"
                "mask_mod = function(b, h, q, kv)\n  return kept\nend\n",
                "mod.lua:3:", "depends on s");
}

Test(mod_trace, loads_refused) {
    static const struct {
        const char *expr;
        const char *what;
    } cases[] = {
        {"fg.load(vec, q, kv)", "'vec' has rank 1, so it takes 1 index; got 2"},
        {"fg.load(mat, q)", "'mat' has rank 2, so it takes 2 indexes; got 1"},
        {"fg.load(vec)", "takes 1 index; got 0"},
        {"fg.load(vec, s)", "index 1 of 'vec' is a float; indices are ints"},
        {"fg.load(vec, 1.0)", "index 1 of 'vec' is a float"},
        {"fg.load(mat, q, fg.float(kv))", "index 2 of 'mat' is a float"},
        {"fg.load(vec, fg.lt(q, kv))", "index 1 of 'vec' is a bool"},
        {"fg.load('vec', q)", "argument 1 is a string (the array's name?)"},
        {"fg.load(nope, q)", "argument 1 is nil"},
        {"fg.load(hidden, q)", "not in the global aux table"},
        {"fg.load(vec, 2^40 // 1)", "index 1 of 'vec' is a float"},
        {"fg.load(vec, 1 << 40)", "does not fit in 32 bits"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "aux = { vec = fg.aux('f32', 1), mat = fg.aux('i32', 2) }\nhidden = fg.aux('f32', 1)\n"
                 "score_mod = function(s, b, h, q, kv)\n  return s + %s\nend\n", cases[i].expr);
        trace_fails(text, "mod.lua:4:", cases[i].what);
    }
    trace_fails("score_mod = function(s, b, h, q, kv) return s end\nlocal early = fg.load(fg.aux('f32', 1), 0)\n",
                "mod.lua:2:", "only inside score_mod and mask_mod");
}

Test(mod_trace, aux_declarations_refused) {
    static const struct {
        const char *decl;
        const char *where;
        const char *what;
    } cases[] = {
        {"aux = { x = fg.aux('f64', 1) }", "mod.lua:1:", "the dtype (argument 1) is \"f32\" or \"i32\", got \"f64\""},
        {"aux = { x = fg.aux(32, 1) }", "mod.lua:1:", "got 32"},
        {"aux = { x = fg.aux('f32', 3) }", "mod.lua:1:", "the rank (argument 2) is the integer 1 or 2, got 3"},
        {"aux = { x = fg.aux('f32', 1.0) }", "mod.lua:1:", "got 1.0"},
        {"aux = { x = fg.aux('f32') }", "mod.lua:1:", "fg.aux takes 2 or 3 arguments"},
        {"aux = 5", "mod.lua: ", "the global aux must be a table"},
        {"aux = { fg.aux('f32', 1) }", "mod.lua:1:", "got a number key"},
        {"aux = { x = 5 }", "mod.lua: ", "aux['x'] must be an array's declaration"},
        {"aux = { ['two words'] = fg.aux('f32', 1) }", "mod.lua:1:", "'two words' is not an identifier"},
        {"aux = { ['9lives'] = fg.aux('f32', 1) }", "mod.lua:1:", "not an identifier"},
        {"aux = { abcdefghijabcdefghijabcdefghij12 = fg.aux('f32', 1) }", "mod.lua:1:", "at most 31 bytes"},
        {"aux = { math = fg.aux('f32', 1) }", "mod.lua:1:", "'math' is already a global"},
        {"aux = { score_mod = fg.aux('f32', 1) }", "mod.lua:1:", "'score_mod' is already a global"},
        {"local d = fg.aux('f32', 1)\naux = { x = d, y = d }", "mod.lua:1:", "named twice"},
        {"aux = { a = fg.aux('f32', 1), b = fg.aux('f32', 1), c = fg.aux('f32', 1), d = fg.aux('f32', 1),\n"
         "e = fg.aux('f32', 1), f = fg.aux('f32', 1), g = fg.aux('f32', 1), h1 = fg.aux('f32', 1),\n"
         "i = fg.aux('f32', 1) }", "mod.lua:", "declares more than 8 arrays"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s\nscore_mod = function(s, b, h, q, kv) return s end\n", cases[i].decl);
        trace_fails(text, cases[i].where, cases[i].what);
    }
    trace_fails("score_mod = function(s, b, h, q, kv)\n  local x = fg.aux('f32', 1)\n  return s\nend\n", "mod.lua:2:",
                "at the chunk's top level");
    /* exactly 8 is fine, and an aux named like a global that already holds it */
    fg_mod m;
    trace_ok("aux = { a = fg.aux('f32', 1), b = fg.aux('f32', 1), c = fg.aux('f32', 1), d = fg.aux('f32', 1),\n"
             "e = fg.aux('f32', 1), f = fg.aux('f32', 1), g = fg.aux('f32', 1), h1 = fg.aux('f32', 1) }\n"
             "doc = fg.aux('i32', 1)\naux.doc = nil\n"
             "score_mod = function(s, b, h, q, kv) return s + fg.load(h1, q) end\n", &m);
    cr_assert_eq(m.n_aux, 8);
    trace_ok("doc = fg.aux('i32', 1)\naux = { doc = doc }\n"
             "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, q), fg.load(doc, kv)) end\n", &m);
}

Test(mod_trace, constants_refused) {
    static const struct {
        const char *expr;
        const char *what;
    } cases[] = {
        {"s * (0/0)", "is -nan, and a mod's constants are finite"},
        {"s + math.huge", "is inf, and a mod's constants are finite"},
        {"s - -math.huge", "is -inf"},
        {"fg.min(s, 1e39)", "outside fp32's range"},
        {"fg.float(q * 4294967296)", "the integer 4294967296 does not fit in 32 bits"},
        {"fg.float(q // 0)", "'//' by the constant 0"},
        {"fg.float(q % (3 - 3))", "'%' by the constant 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "score_mod = function(s, b, h, q, kv)\n  return %s\nend\n", cases[i].expr);
        trace_fails(text, "mod.lua:2:", cases[i].what);
    }
    /* a float 0 divides floats (to inf or NaN at run time, as the semantics say); an int 0 that is not a
     * constant is a value */
    fg_mod m;
    trace_ok("score_mod = function(s, b, h, q, kv) return s / 0 + fg.float(q // (kv * 0)) end\n", &m);
    /* the largest fp32 and the 32-bit ints' ends are constants like any */
    trace_ok("score_mod = function(s, b, h, q, kv) return s * 3.4028234663852886e38 + q * 2147483647 + "
             "q * -2147483648 end\n", &m);
}

Test(mod_trace, too_many_nodes_refused) {
    /* 300 additions of distinct constants: 601 nodes built, more than the tree holds */
    trace_fails("score_mod = function(s, b, h, q, kv)\n  local x = s\n  for i = 1, 300 do x = x + i end\n  return x\nend\n",
                "mod.lua:1:", "score_mod's result needs more than 256 expression nodes");
    /* 1000: more than the trace builds, refused at the line building it */
    trace_fails("score_mod = function(s, b, h, q, kv)\n  local x = s\n  for i = 1, 1000 do\n    x = x * i\n  end\n"
                "  return x\nend\n",
                "mod.lua:4:", "this mod builds more than 1024 expression nodes");
    /* hash-consing keeps a loop over alike nodes small */
    fg_mod m;
    trace_ok("score_mod = function(s, b, h, q, kv)\n  local x = s\n  for i = 1, 100000 do x = s + 1 end\n  return x\nend\n",
             &m);
    cr_assert_eq(m.n_nodes, 3);
    /* 255 nodes is a full tree, accepted */
    trace_ok("score_mod = function(s, b, h, q, kv)\n  local x = s\n  for i = 1, 127 do x = x + i end\n  return x\nend\n",
             &m);
    cr_assert_eq(m.n_nodes, 255);
}

Test(mod_trace, functions_missing_or_not_functions_refused) {
    trace_fails("aux = { doc = fg.aux('i32', 1) }\n", "mod.lua: ", "defines neither score_mod nor mask_mod");
    trace_fails("", "mod.lua: ", "defines neither score_mod nor mask_mod");
    trace_fails("score_mod = 5\n", "mod.lua: ", "score_mod must be a function written in the chunk");
    trace_fails("mask_mod = 'fg.lt(kv, q)'\n", "mod.lua: ", "mask_mod must be a function");
    trace_fails("score_mod = math.abs\n", "mod.lua: ", "got a library function");
    trace_fails("score_mod = fg.abs\n", "mod.lua: ", "got a library function");
}

Test(mod_trace, expressions_only_inside_the_functions) {
    trace_fails("local one = fg.float(1)\nscore_mod = function(s, b, h, q, kv) return s end\n", "mod.lua:1:",
                "fg.float builds an expression, which happens only inside score_mod and mask_mod");
}

Test(mod_trace, lua_errors_carry_their_line) {
    trace_fails("score_mod = function(s, b, h, q, kv)\n  local x = s\n  error('no bias for this head')\nend\n",
                "mod.lua:3:", "no bias for this head");
    trace_fails("score_mod = function(s, b, h, q, kv)\n  return s + undefined_name.x\nend\n", "mod.lua:2:",
                "attempt to index a nil value");
    trace_fails("local x = 1 +\n", "mod.lua:", "unexpected symbol");
    trace_fails("\x1bLua\x54\x00", "mod.lua:1:", "precompiled");
}

Test(mod_trace, symbolic_for_bound_refused_by_lua) {
    trace_fails("score_mod = function(s, b, h, q, kv)\n  local x = s\n  for i = 1, q do x = x + 1 end\n  return x\nend\n",
                "mod.lua:3:", "'for' limit (number expected, got fg expression)");
}

Test(mod_trace, runaway_mod_stopped_by_the_sandbox) {
    trace_fails("score_mod = function(s, b, h, q, kv)\n  ::again::\n  goto again\nend\n", "mod.lua:",
                "instruction budget exceeded");
    trace_fails("score_mod = function(s, b, h, q, kv) return score_mod(s, b, h, q, kv) end\n", "mod.lua:1:",
                "exceeded");
    trace_fails("score_mod = function(s, b, h, q, kv)\n  local t = {}\n  for i = 1, 1e8 do t[i] = i end\nend\n",
                "mod.lua:3:", "memory limit");
}

/* ---- host memory ---- */

static fg_status trace_t5(void *user, fg_error *err) {
    fg_mod *m = user;
    return mod_trace("mod.lua", t5_text, strlen(t5_text), m, err);
}

static void judge_t5(void *user) { cr_assert_null(mod_tree_problem(user)); }

static void refused_t5(void *user) {
    const fg_mod *m = user;
    cr_assert_eq(m->n_nodes, 0);
    cr_assert_eq(m->score, -1);
}

/* Each host allocation of a trace fails in turn: FG_ERR_NO_MEMORY (not a bad mod), the tree left empty. */
Test(mod_trace, host_allocation_failures) {
    fg_mod m;
    const alloc_walk w = {"tracing the T5 mod", &m, NULL, trace_t5, judge_t5, refused_t5, NULL, 1};
    alloc_walk_run(&w);
}

/* fg.aux's third argument: "trainable" on an f32 array (in the canonical text and so the id, which differs from the
 * same mod without it); anything else, or on an i32 array, refused with its line. */
Test(mod_trace, trainable_declarations) {
    fg_mod m, plain;
    trace_ok("aux = { t = fg.aux('f32', 2, 'trainable'), d = fg.aux('i32', 1) }\n"
             "score_mod = function(s, b, h, q, kv) return s + fg.load(t, h, fg.load(d, q)) end\n", &m);
    cr_assert_eq(m.aux[0].trainable, 0); /* d */
    cr_assert_eq(m.aux[1].trainable, 1); /* t */
    trace_ok("aux = { t = fg.aux('f32', 2), d = fg.aux('i32', 1) }\n"
             "score_mod = function(s, b, h, q, kv) return s + fg.load(t, h, fg.load(d, q)) end\n", &plain);
    char text[4096], a[MOD_ID_LEN + 1], b[MOD_ID_LEN + 1];
    cr_assert_gt(mod_canonical(&m, text, sizeof text), 0);
    cr_assert(strstr(text, "aux t f32 2 trainable\n"), "%s", text);
    mod_id(&m, a), mod_id(&plain, b);
    cr_assert_str_neq(a, b);
    trace_fails("aux = { t = fg.aux('i32', 1, 'trainable') }\nmask_mod = function(b, h, q, kv) return fg.eq(fg.load(t, q), 0) end\n",
                "mod.lua:1:", "an i32 array cannot be trainable");
    trace_fails("aux = { t = fg.aux('f32', 1, 'train') }\nscore_mod = function(s, b, h, q, kv) return s end\n",
                "mod.lua:1:", "argument 3 is \"trainable\" or absent, got \"train\"");
    trace_fails("aux = { t = fg.aux('f32', 1, true) }\nscore_mod = function(s, b, h, q, kv) return s end\n",
                "mod.lua:1:", "argument 3 is \"trainable\" or absent");
    trace_fails("aux = { t = fg.aux('f32', 1, 'trainable', 2) }\nscore_mod = function(s, b, h, q, kv) return s end\n",
                "mod.lua:1:", "fg.aux takes 2 or 3 arguments");
}
