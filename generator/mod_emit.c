/* mod_emit.c: a custom mod's tree as CUDA (mod.h's mod_emit). Each function gets the nodes its result depends
 * on, one const local each (v<i>), and for the nodes that can go bad (an out-of-range load or an int division
 * by zero below them) a bool x<i> that follows mod.c's rule: a node is bad when an operand is, a where only
 * through its chosen branch. Ints wrap (unsigned arithmetic), floats are fp32; exp and log are the special-function
 * unit's (their libm forms' slow paths cost registers the kernels' tiles do not have). The aux arrays arrive as
 * struct fg_mod_aux (templates/common/fg_params.h): pointers and extents, in the mod's aux order. Nothing of the
 * user's text appears in the output: the tree holds operators, numbers and indices, and aux names go only into
 * a comment after mod_check has held them to [A-Za-z_][A-Za-z0-9_]*. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "generator/mod.h"
#include "templates/common/mod_interval.h"

typedef struct emit_buf {
    char *p;
    size_t n, len;
    int overflow;
} emit_buf;

static void put(emit_buf *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(emit_buf *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(e->p + e->len, e->len < e->n ? e->n - e->len : 0, fmt, ap);
    va_end(ap);
    if (w < 0) e->overflow = 1;
    else e->len += (size_t)w;
    if (e->len >= e->n) e->overflow = 1;
}

/* The nodes roots[0 .. n) depend on (need), and which of the nodes up to the last root can go bad (bad). */
static void mark_all(const fg_mod *m, const int *roots, int n, unsigned char *need, unsigned char *bad) {
    memset(need, 0, MOD_MAX_NODES);
    memset(bad, 0, MOD_MAX_NODES);
    int root = -1;
    for (int k = 0; k < n; k++)
        if (roots[k] >= 0) need[roots[k]] = 1, root = roots[k] > root ? roots[k] : root;
    for (int i = root; i >= 0; i--) {
        if (!need[i]) continue;
        const mod_node *x = &m->nodes[i];
        if (x->a >= 0) need[x->a] = 1;
        if (x->b >= 0) need[x->b] = 1;
        if (x->c >= 0) need[x->c] = 1;
    }
    for (int i = 0; i <= root; i++) {
        const mod_node *x = &m->nodes[i];
        bad[i] = x->op == MOD_LOAD || x->op == MOD_FLOOR ||
                 ((x->op == MOD_IDIV || x->op == MOD_MOD) && !(m->nodes[x->b].op == MOD_CONST)) ||
                 (x->a >= 0 && bad[x->a]) || (x->b >= 0 && bad[x->b]) || (x->c >= 0 && bad[x->c]);
    }
}
static void mark(const fg_mod *m, int root, int root2, unsigned char *need, unsigned char *bad) {
    const int roots[2] = {root, root2};
    mark_all(m, roots, 2, need, bad);
}

/* Position arithmetic in fp32. Node i (an int) has an exact float shadow f<i> (sh->exact[i]) when it is q, kv, an int
 * constant, or + - * (unary -) abs min max of such nodes, and its value stays within 2^24 in magnitude for every q
 * in (-2^23, 2^23) and kv in [0, 2^23) (calls that take a mod have fewer than 2^23 queries and keys a sequence:
 * rt_check_mod), so that fp32 computes it exactly, as the ints would. fg.float of such a node is its shadow, built
 * on the FMA pipe, in place of an int-to-float conversion at every score: sm_90 converts 16 a clock an SM, as many
 * as the softmax's exp2 takes, so one conversion a score halved the forward's rate.
 * The kernels pass the positions as fqr = q - k0, fk0 = k0 and fc = kv - k0 (k0 the first key of the thread's
 * columns in the block: fc a constant once the kernel's loops unroll, fqr one value a row). A node linear in q and
 * kv, a q + b kv + c with |a|, |b| <= 1 and |c| <= 2^22, is a (fqr) + b (fc) + c + (a + b) fk0 in that order: q - kv
 * is fqr - fc, one add of a constant a score, with no register a column. The partial sums stay exact: |fqr| < 2^23
 * (q - k0 lies within (-sq, sk)) and fc < 256. */
typedef struct shadow_info {
    unsigned char exact[MOD_MAX_NODES];
    unsigned char linear[MOD_MAX_NODES];  /* exact and linear: lin[i] = {a, b, c} */
    double lin[MOD_MAX_NODES][3];
} shadow_info;

static void shadows(const fg_mod *m, int root, shadow_info *sh) {
    const double lim = 16777216.0;
    fg_iv r[MOD_MAX_NODES]; /* each int node's range (templates/common/mod_interval.h), over the positions above */
    unsigned char *exact = sh->exact;
    for (int i = 0; i <= root; i++) {
        const mod_node *n = &m->nodes[i];
        const int a = n->a, b = n->b;
        exact[i] = sh->linear[i] = 0;
        if (n->type != MOD_T_INT) continue;
        const int ok = (a < 0 || exact[a]) && (b < 0 || exact[b]); /* operands exact */
        const int lin2 = a >= 0 && b >= 0 && ok && sh->linear[a] && sh->linear[b];
        double *f = sh->lin[i];
        int linear = 0;
        f[0] = f[1] = f[2] = 0;
        r[i] = fg_iv_any(0);
        switch ((mod_op)n->op) {
        case MOD_CONST: r[i] = fg_iv_const(n->value), f[2] = n->value, exact[i] = linear = 1; break;
        case MOD_ARG:
            if (!(exact[i] = linear = n->arg == MOD_ARG_Q || n->arg == MOD_ARG_KV)) break;
            r[i] = fg_iv_range(n->arg == MOD_ARG_KV ? 0 : -(lim / 2 - 1), lim / 2 - 1);
            f[n->arg == MOD_ARG_Q ? 0 : 1] = 1;
            break;
        case MOD_NEG:
            if (!(exact[i] = ok)) break;
            r[i] = fg_iv_neg(r[a], 0), linear = sh->linear[a];
            for (int k = 0; k < 3; k++) f[k] = -sh->lin[a][k];
            break;
        case MOD_ABS: if ((exact[i] = ok)) r[i] = fg_iv_abs(r[a], 0); break;
        case MOD_ADD:
        case MOD_SUB:
            if (!(exact[i] = ok)) break;
            r[i] = n->op == MOD_ADD ? fg_iv_add(r[a], r[b], 0) : fg_iv_sub(r[a], r[b], 0), linear = lin2;
            for (int k = 0; k < 3; k++) f[k] = sh->lin[a][k] + (n->op == MOD_ADD ? 1 : -1) * sh->lin[b][k];
            break;
        case MOD_MIN: if ((exact[i] = ok)) r[i] = fg_iv_min(r[a], r[b]); break;
        case MOD_MAX: if ((exact[i] = ok)) r[i] = fg_iv_max(r[a], r[b]); break;
        case MOD_MUL: {
            if (!(exact[i] = ok)) break;
            r[i] = fg_iv_mul(r[a], r[b], 0);
            const int ka = m->nodes[a].op == MOD_CONST, kb = m->nodes[b].op == MOD_CONST; /* linear times a constant */
            if (lin2 && (ka || kb)) {
                const double k = m->nodes[ka ? a : b].value, *g = sh->lin[ka ? b : a];
                for (int x = 0; x < 3; x++) f[x] = k * g[x];
                linear = 1;
            }
            break;
        }
        default: break;
        }
        exact[i] = exact[i] && r[i].lo >= -lim && r[i].hi <= lim;
        sh->linear[i] = exact[i] && linear && fabs(f[0]) <= 1 && fabs(f[1]) <= 1 && fabs(f[2]) <= lim / 4;
    }
}

/* Node i's float shadow (sh->exact[i]). */
static void shadow(emit_buf *e, const fg_mod *m, int i, const shadow_info *sh) {
    const mod_node *n = &m->nodes[i];
    const int a = n->a, b = n->b;
    if (sh->linear[i]) { /* a fqr + b fc + c + (a + b) fk0 */
        const double *f = sh->lin[i];
        static const char *const name[2] = {"fqr", "fc"};
        int first = 1;
        for (int k = 0; k < 2; k++, first = first && f[k - 1] == 0)
            if (f[k] != 0) put(e, "%s%s", first ? (f[k] < 0 ? "-" : "") : (f[k] < 0 ? " - " : " + "), name[k]);
        if (first) put(e, "%d.f", (int)f[2]);
        else if (f[2] != 0) put(e, " %c %d.f", f[2] < 0 ? '-' : '+', (int)fabs(f[2]));
        const int k0 = (int)(f[0] + f[1]);
        if (k0) put(e, " %c %sfk0", k0 > 0 ? '+' : '-', k0 == 2 || k0 == -2 ? "2.f * " : "");
        return;
    }
    switch ((mod_op)n->op) {
    case MOD_NEG: put(e, "-f%d", a); return;
    case MOD_ABS: put(e, "fabsf(f%d)", a); return;
    case MOD_ADD: put(e, "f%d + f%d", a, b); return;
    case MOD_SUB: put(e, "f%d - f%d", a, b); return;
    case MOD_MUL: put(e, "f%d * f%d", a, b); return;
    case MOD_MIN: put(e, "fminf(f%d, f%d)", a, b); return;
    case MOD_MAX: put(e, "fmaxf(f%d, f%d)", a, b); return;
    default: e->overflow = 1; return; /* shadows() marks no other node: constants and arguments are linear */
    }
}

/* The bad float nodes whose NaN value already says so (carry): float loads (NaN when bad), and + - * / unary -,
 * exp, log, tanh and sqrt of operands that are good or carry (NaN in, NaN out). A score_mod whose result carries
 * needs no select at every score; min, max, where and the comparisons drop a NaN, so their bad marks stay. */
static void carries(const fg_mod *m, int root, const unsigned char *bad, unsigned char *carry) {
    for (int i = 0; i <= root; i++) {
        const mod_node *n = &m->nodes[i];
        carry[i] = 0;
        if (!bad[i] || n->type != MOD_T_FLOAT) continue;
        switch ((mod_op)n->op) {
        case MOD_LOAD: carry[i] = 1; break;
        case MOD_ADD: case MOD_SUB: case MOD_MUL: case MOD_DIV: case MOD_NEG:
        case MOD_EXP: case MOD_LOG: case MOD_TANH: case MOD_SQRT:
            carry[i] = 1;
            for (int k = 0, o[3] = {n->a, n->b, n->c}; k < 3; k++)
                if (o[k] >= 0 && bad[o[k]] && !carry[o[k]]) carry[i] = 0;
            break;
        default: break;
        }
    }
}

static const char *ctype(int t) { return t == MOD_T_FLOAT ? "float" : t == MOD_T_INT ? "int" : "bool"; }

/* Node i's value expression (exact: the nodes with a float shadow, for fg.float). */
static void value(emit_buf *e, const fg_mod *m, int i, const unsigned char *exact) {
    const mod_node *n = &m->nodes[i];
    const int a = n->a, b = n->b, c = n->c, f = n->type == MOD_T_FLOAT;
    static const char *const cmp[] = {"==", "!=", "<", "<=", ">", ">="};
    switch ((mod_op)n->op) {
    case MOD_CONST:
        if (f) put(e, "(float)%a", n->value);
        else put(e, "(int)%lldll", (long long)n->value);
        return;
    case MOD_ARG: put(e, "%s", (const char *[]){"s", "b", "h", "q", "kv"}[n->arg]); return;
    case MOD_LOAD: /* a float load that goes bad is NaN, which arithmetic carries (carries()); an int load 0 */
        put(e, "%c%d ? %s : __ldg((const %s *)aux.ptr[%d] + ", f ? 'x' : 'o', i, f ? "__int_as_float(0x7fffffff)" : "0",
            f ? "float" : "int", n->arg);
        if (b >= 0) put(e, "(long long)v%d * aux.extent[%d][1] + v%d)", a, n->arg, b);
        else put(e, "v%d)", a);
        return;
    case MOD_NEG: f ? put(e, "-v%d", a) : put(e, "(int)(0u - (unsigned)v%d)", a); return;
    case MOD_ADD: f ? put(e, "v%d + v%d", a, b) : put(e, "(int)((unsigned)v%d + (unsigned)v%d)", a, b); return;
    case MOD_SUB: f ? put(e, "v%d - v%d", a, b) : put(e, "(int)((unsigned)v%d - (unsigned)v%d)", a, b); return;
    case MOD_MUL: f ? put(e, "v%d * v%d", a, b) : put(e, "(int)((unsigned)v%d * (unsigned)v%d)", a, b); return;
    case MOD_DIV: /* by a constant: times its reciprocal (within an ulp of the quotient; fp32's division is a dozen
                   * instructions and a MUFU operation at every score) */
        if (m->nodes[b].op == MOD_CONST && m->nodes[b].value != 0) put(e, "v%d * (float)%a", a, 1.0 / m->nodes[b].value);
        else put(e, "v%d / v%d", a, b);
        return;
    case MOD_IDIV: put(e, "fg_mod_floordiv(v%d, v%d)", a, b); return;
    case MOD_MOD: put(e, "fg_mod_floormod(v%d, v%d)", a, b); return;
    case MOD_MIN: f ? put(e, "fminf(v%d, v%d)", a, b) : put(e, "min(v%d, v%d)", a, b); return;
    case MOD_MAX: f ? put(e, "fmaxf(v%d, v%d)", a, b) : put(e, "max(v%d, v%d)", a, b); return;
    case MOD_ABS: f ? put(e, "fabsf(v%d)", a) : put(e, "v%d < 0 ? (int)(0u - (unsigned)v%d) : v%d", a, a, a); return;
    case MOD_EXP: put(e, "__expf(v%d)", a); return; /* ex2.approx: 2 ulp and a rounding of x log2(e), no slow path */
    case MOD_LOG: put(e, "__logf(v%d)", a); return; /* lg2.approx: about 2^-21 relative */
    case MOD_TANH: put(e, "fg_tanh(v%d)", a); return; /* common/fast_math.cuh: 3e-7 absolute, one exp2 */
    case MOD_SQRT: put(e, "sqrtf(v%d)", a); return;
    case MOD_FLOAT: exact[a] ? put(e, "f%d", a) : put(e, "(float)v%d", a); return;
    case MOD_FLOOR: put(e, "o%d ? 0 : (int)floorf(v%d)", i, a); return;
    case MOD_EQ: case MOD_NE: case MOD_LT: case MOD_LE: case MOD_GT: case MOD_GE:
        put(e, "v%d %s v%d", a, cmp[n->op - MOD_EQ], b);
        return;
    case MOD_AND: put(e, "v%d && v%d", a, b); return;
    case MOD_OR: put(e, "v%d || v%d", a, b); return;
    case MOD_NOT: put(e, "!v%d", a); return;
    case MOD_WHERE: put(e, "v%d ? v%d : v%d", a, b, c); return;
    case MOD_OP_COUNT: break;
    }
    e->overflow = 1; /* mod_check refuses unknown operators before this */
}

/* Node i's bad mark (only for nodes that can go bad). */
static void badness(emit_buf *e, const fg_mod *m, int i, const unsigned char *bad) {
    const mod_node *n = &m->nodes[i];
    const char *sep = "";
    if (n->op == MOD_WHERE) {
        if (bad[n->a]) put(e, "x%d || ", n->a);
        put(e, "(v%d ? %s%d : %s%d)", n->a, bad[n->b] ? "x" : "false && v", n->b, bad[n->c] ? "x" : "false && v", n->c);
        return;
    }
    const int opnd[3] = {n->a, n->b, n->c};
    for (int k = 0; k < 3; k++)
        if (opnd[k] >= 0 && bad[opnd[k]]) put(e, "%sx%d", sep, opnd[k]), sep = " || ";
    if (n->op == MOD_LOAD || n->op == MOD_FLOOR) put(e, "%so%d", sep, i), sep = " || ";
    if ((n->op == MOD_IDIV || n->op == MOD_MOD) && m->nodes[n->b].op != MOD_CONST) put(e, "%sv%d == 0", sep, n->b), sep = " || ";
    if (!*sep) put(e, "false");
}

/* The nodes up to `last` that need marks, one const local each (v<i>, with its bad mark x<i> and its float shadow f<i>
 * where used), in order; carry receives which bad nodes carry their NaN (carries()). raw: see body(). */
static void nodes(emit_buf *e, const fg_mod *m, int last, const unsigned char *need, const unsigned char *bad, int raw,
                  unsigned char *carry) {
    unsigned char cast[MOD_MAX_NODES] = {0};
    shadow_info sh;
    shadows(m, last, &sh);
    const unsigned char *exact = sh.exact;
    carries(m, last, bad, carry);
    for (int i = last; i >= 0; i--) { /* the shadows fg.float takes, and those they are built of */
        const mod_node *n = &m->nodes[i];
        if (need[i] && n->op == MOD_FLOAT && exact[n->a]) cast[n->a] = 1;
        if (cast[i] && !sh.linear[i])
            for (int k = 0, o[3] = {n->a, n->b, n->c}; k < 3; k++)
                if (o[k] >= 0) cast[o[k]] = 1;
    }
    for (int i = 0; i <= last; i++) {
        if (!need[i]) continue;
        const mod_node *n = &m->nodes[i];
        const int float_load = n->op == MOD_LOAD && n->type == MOD_T_FLOAT;
        if (n->op == MOD_LOAD) { /* its indices' range check, before the load it guards */
            put(e, "    const bool o%d = (unsigned)v%d >= (unsigned)aux.extent[%d][0]", i, n->a, n->arg);
            if (n->b >= 0) put(e, " || (unsigned)v%d >= (unsigned)aux.extent[%d][1]", n->b, n->arg);
            put(e, "; // %s\n", m->aux[n->arg].name);
        }
        if (n->op == MOD_FLOOR) /* its range check: a NaN fails both comparisons */
            put(e, "    const bool o%d = !(floorf(v%d) >= -2147483648.f && floorf(v%d) < 2147483648.f);\n", i, n->a, n->a);
        for (int pass = 0; pass < 2; pass++) { /* the value then its bad mark; a float load's mark first (its NaN) */
            if (pass == float_load) {
                put(e, "    const %s v%d = ", ctype(n->type), i);
                if (n->op == MOD_ARG && n->arg == MOD_ARG_S && raw) put(e, "s * scale");
                else value(e, m, i, exact);
                put(e, ";\n");
            } else if (bad[i]) {
                put(e, "    const bool x%d = ", i);
                badness(e, m, i, bad);
                put(e, ";\n");
            }
        }
        if (cast[i]) {
            put(e, "    const float f%d = ", i);
            shadow(e, m, i, &sh);
            put(e, ";\n");
        }
    }
}

/* The body of one function: its nodes, then `return`. raw (the forward's score_mod): s arrives in raw score units
 * with scale and inv_scale, the mod's logit is s * scale and the result goes back by inv_scale; a result s + t
 * (or s - t, t - s) goes back as one FMA of t, the logit never formed. */
static void body(emit_buf *e, const fg_mod *m, int root, int is_mask, int grad, int raw) {
    unsigned char need[MOD_MAX_NODES], bad[MOD_MAX_NODES], carry[MOD_MAX_NODES];
    mark(m, root, grad, need, bad);
    nodes(e, m, grad > root ? grad : root, need, bad, raw, carry);
    const char *nan = "__int_as_float(0x7fffffff)", *ninf = "-__int_as_float(0x7f800000)";
    if (grad >= 0 && bad[grad] && !carry[grad]) put(e, "    d = x%d ? %s : v%d;\n", grad, nan, grad);
    else if (grad >= 0) put(e, "    d = v%d;\n", grad);
    if (is_mask) {
        if (bad[root]) put(e, "    return x%d ? %s : (v%d ? 0.f : %s);\n", root, nan, root, ninf);
        else put(e, "    return v%d ? 0.f : %s;\n", root, ninf);
        return;
    }
    put(e, "    return ");
    if (bad[root] && !carry[root]) put(e, "x%d ? %s : ", root, nan);
    const mod_node *r = &m->nodes[root];
    const int s_a = r->a >= 0 && m->nodes[r->a].op == MOD_ARG && m->nodes[r->a].arg == MOD_ARG_S;
    const int s_b = r->b >= 0 && m->nodes[r->b].op == MOD_ARG && m->nodes[r->b].arg == MOD_ARG_S;
    if (!raw) put(e, "v%d;\n", root);
    else if (r->op == MOD_ADD && (s_a || s_b)) put(e, "fmaf(v%d, inv_scale, s);\n", s_a ? r->b : r->a);
    else if (r->op == MOD_SUB && s_a) put(e, "fmaf(-v%d, inv_scale, s);\n", r->b);
    else if (r->op == MOD_SUB && s_b) put(e, "fmaf(v%d, inv_scale, -s);\n", r->a);
    else put(e, "v%d * inv_scale;\n", root);
}

/* Node i over a block (templates/common/mod_interval.h), for fg_user_mask_block. */
static void interval(emit_buf *e, const fg_mod *m, int i) {
    const mod_node *n = &m->nodes[i];
    const int a = n->a, b = n->b, c = n->c, f = n->type == MOD_T_FLOAT;
    static const char *const unary[MOD_OP_COUNT] = {[MOD_EXP] = "exp", [MOD_LOG] = "log", [MOD_TANH] = "tanh",
                                                    [MOD_SQRT] = "sqrt", [MOD_FLOAT] = "to_float", [MOD_FLOOR] = "floor",
                                                    [MOD_NOT] = "not"};
    static const char *const binary[MOD_OP_COUNT] = {[MOD_DIV] = "div", [MOD_IDIV] = "idiv", [MOD_MOD] = "mod",
                                                     [MOD_MIN] = "min", [MOD_MAX] = "max", [MOD_AND] = "and",
                                                     [MOD_OR] = "or"};
    static const char *const typed[MOD_OP_COUNT] = {[MOD_NEG] = "neg", [MOD_ADD] = "add", [MOD_SUB] = "sub",
                                                    [MOD_MUL] = "mul", [MOD_ABS] = "abs"};
    switch ((mod_op)n->op) {
    case MOD_CONST: put(e, "fg_iv_const(%a)", n->value); return;
    case MOD_ARG:
        if (n->arg == MOD_ARG_B) put(e, "fg_iv_const(b)");
        else if (n->arg == MOD_ARG_S) put(e, "fg_iv_any(1)");
        else put(e, "fg_iv_range(%s_lo, %s_hi)", n->arg == MOD_ARG_H ? "h" : n->arg == MOD_ARG_Q ? "q" : "kv",
                 n->arg == MOD_ARG_H ? "h" : n->arg == MOD_ARG_Q ? "q" : "kv");
        return;
    case MOD_LOAD: put(e, "fg_iv_load(%d)", f); return;
    case MOD_EQ: case MOD_NE: case MOD_LT: case MOD_LE: case MOD_GT: case MOD_GE:
        put(e, "fg_iv_cmp(%d, v%d, v%d, %d)", n->op - MOD_EQ, a, b, m->nodes[a].type == MOD_T_FLOAT);
        return;
    case MOD_WHERE: put(e, "fg_iv_where(v%d, v%d, v%d)", a, b, c); return;
    default: break;
    }
    if (n->op < MOD_OP_COUNT && typed[n->op] && b >= 0) put(e, "fg_iv_%s(v%d, v%d, %d)", typed[n->op], a, b, f);
    else if (n->op < MOD_OP_COUNT && typed[n->op]) put(e, "fg_iv_%s(v%d, %d)", typed[n->op], a, f);
    else if (n->op < MOD_OP_COUNT && binary[n->op]) put(e, "fg_iv_%s(v%d, v%d)", binary[n->op], a, b);
    else if (n->op < MOD_OP_COUNT && unary[n->op]) put(e, "fg_iv_%s(v%d)", unary[n->op], a);
    else e->overflow = 1; /* mod_check refuses unknown operators before this */
}

int mod_emit(const fg_mod *m, char *buf, size_t n) {
    emit_buf e = {buf, n, 0, 0};
    if (n) buf[0] = '\0';
    char id[MOD_ID_LEN + 1];
    mod_id(m, id);
    put(&e, "// the custom mod %s (generator/mod.h): score %s, mask %s; aux:", id, m->score >= 0 ? "yes" : "no",
        m->mask >= 0 ? "yes" : "no");
    for (int i = 0; i < m->n_aux; i++) put(&e, " %d %s (%s, rank %d)", i, m->aux[i].name, m->aux[i].is_int ? "i32" : "f32", m->aux[i].rank);
    put(&e, "\n#define FG_USER_SCORE %d\n#define FG_USER_MASK %d\n#define FG_USER_MASK_MAP %d\n", m->score >= 0,
        m->mask >= 0, mod_mask_reads_aux(m));
    put(&e, "%s", "__device__ __forceinline__ int fg_mod_floordiv(int a, int b) { // b == 0: the caller marks the node bad\n"
            "    if (b == 0) return 0;\n"
            "    if (b == -1) return (int)(0u - (unsigned)a);\n"
            "    const int q = a / b;\n"
            "    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
            "}\n"
            "__device__ __forceinline__ int fg_mod_floormod(int a, int b) { // the divisor's sign\n"
            "    if (b == 0 || b == -1) return 0;\n"
            "    const int r = a % b;\n"
            "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
            "}\n");
    if (m->score >= 0) {
        put(&e, "__device__ __forceinline__ float fg_user_score(float s, float scale, float inv_scale, int b, int h, int q, int kv,\n"
                "                                             float fqr, float fk0, float fc, const fg_mod_aux &aux) {\n");
        body(&e, m, m->score, 0, -1, 1);
        put(&e, "}\n");
    }
    if (m->mask >= 0) {
        put(&e, "__device__ __forceinline__ float fg_user_mask(int b, int h, int q, int kv, float fqr, float fk0, float fc,\n"
                "                                            const fg_mod_aux &aux) {\n");
        body(&e, m, m->mask, 1, -1, 0);
        put(&e, "}\n");
        /* the mask over a block of positions: FG_IV_HIDDEN, FG_IV_KEPT or FG_IV_MIXED (mod_mask_block's verdict) */
        put(&e, "__device__ __forceinline__ int fg_user_mask_block(int b, int h_lo, int h_hi, int q_lo, int q_hi, int kv_lo,\n"
                "                                                  int kv_hi) {\n");
        unsigned char need[MOD_MAX_NODES], bad[MOD_MAX_NODES];
        mark(m, m->mask, -1, need, bad);
        for (int i = 0; i <= m->mask; i++) {
            if (!need[i]) continue;
            put(&e, "    const fg_iv v%d = ", i);
            interval(&e, m, i);
            put(&e, ";\n");
        }
        put(&e, "    return fg_iv_verdict(v%d);\n}\n", m->mask);
    }
    return e.overflow ? -1 : (int)e.len;
}

int mod_emit_grad(const fg_mod *m, int grad, char *buf, size_t n) {
    emit_buf e = {buf, n, 0, 0};
    if (n) buf[0] = '\0';
    if (m->score < 0 || grad < 0 || grad >= m->n_nodes) return -1;
    put(&e, "__device__ __forceinline__ float fg_user_score_grad(float s, int b, int h, int q, int kv, float fqr,\n"
            "                                                    float fk0, float fc, const fg_mod_aux &aux, float &d) {\n");
    body(&e, m, m->score, 0, grad, 0);
    put(&e, "}\n");
    return e.overflow ? -1 : (int)e.len;
}

int mod_emit_aux_grad(const fg_mod *m, const mod_grad_site *sites, int n_sites, char *buf, size_t n) {
    emit_buf e = {buf, n, 0, 0};
    if (n) buf[0] = '\0';
    if (n_sites < 0 || n_sites > MOD_MAX_GRAD_SITES) return -1;
    put(&e, "#define FG_USER_AUX_GRAD %d\n", n_sites > 0);
    if (n_sites == 0) return e.overflow ? -1 : (int)e.len;
    int roots[3 * MOD_MAX_GRAD_SITES], last = -1;
    for (int k = 0; k < n_sites; k++) {
        const mod_node *l = &m->nodes[sites[k].load];
        if (sites[k].load < 0 || sites[k].load >= m->n_nodes || l->op != MOD_LOAD || sites[k].partial < 0 ||
            sites[k].partial >= m->n_nodes)
            return -1;
        roots[3 * k] = sites[k].partial, roots[3 * k + 1] = l->a, roots[3 * k + 2] = l->b;
        for (int r = 0; r < 3; r++) last = roots[3 * k + r] > last ? roots[3 * k + r] : last;
    }
    unsigned char need[MOD_MAX_NODES], bad[MOD_MAX_NODES], carry[MOD_MAX_NODES];
    mark_all(m, roots, 3 * n_sites, need, bad);
    /* (g = dL/d(score_mod's result), s the logit score_mod took; no gradient is wanted where aux.grad is null) */
    put(&e, "__device__ __forceinline__ void fg_user_aux_grad(float g, float s, int b, int h, int q, int kv, float fqr,\n"
            "                                                 float fk0, float fc, const fg_mod_aux &aux) {\n");
    nodes(&e, m, last, need, bad, 0, carry);
    for (int k = 0; k < n_sites; k++) {
        const mod_node *l = &m->nodes[sites[k].load];
        const int p = sites[k].partial, t = l->arg;
        /* an index out of range, or bad, adds nothing: that score is NaN, and so are the outputs it reaches */
        put(&e, "    if (aux.grad[%d] && (unsigned)v%d < (unsigned)aux.extent[%d][0]", t, l->a, t);
        if (l->b >= 0) put(&e, " && (unsigned)v%d < (unsigned)aux.extent[%d][1]", l->b, t);
        if (bad[l->a]) put(&e, " && !x%d", l->a);
        if (l->b >= 0 && bad[l->b]) put(&e, " && !x%d", l->b);
        if (bad[p] && !carry[p]) put(&e, " && !x%d", p);
        put(&e, ") // %s\n        atomicAdd(aux.grad[%d] + ", m->aux[t].name, t);
        if (l->b >= 0) put(&e, "(long long)v%d * aux.extent[%d][1] + v%d", l->a, t, l->b);
        else put(&e, "v%d", l->a);
        if (m->nodes[p].op == MOD_CONST && m->nodes[p].value == 1.0) put(&e, ", g);\n");
        else put(&e, ", g * v%d);\n", p);
    }
    put(&e, "}\n");
    return e.overflow ? -1 : (int)e.len;
}
