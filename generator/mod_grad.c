/* mod_grad.c: score_mod's derivative in s (mod.h's mod_grad), for the backward: dS takes d score / d s on top
 * of the softmax's own derivative, as the softcap's derivative joins it (backward_common.cuh). The derivative
 * is built node by node in order, each float node's next to it, sharing nodes the tree already has:
 *   s' = 1; a constant's, an argument's, a load's, and every int's and bool's 0 (ints do not depend on s:
 *   fg.floor is flat between its steps and fg.float takes an int);
 *   (a + b)' = a' + b', (a - b)' = a' - b', (-a)' = -a', (a b)' = a' b + a b', (a / b)' = (a' - (a / b) b') / b;
 *   exp(a)' = exp(a) a', log(a)' = a' / a, tanh(a)' = (1 - tanh(a)^2) a', sqrt(a)' = a' / (2 sqrt(a));
 *   min, max, abs and where: the derivative of the side they pick (at a tie min and max pick a, abs +).
 * Terms with a zero factor are left out, so a score_mod that adds a bias has the derivative 1 and no node more.
 * mod_aux_grad builds the same way the derivatives in the values of trainable loads, each load taken as the input
 * (its derivative 1, s's 0). */
#include <string.h>

#include "generator/mod.h"

typedef struct grad_builder {
    fg_mod *m;  /* the tree, nodes appended */
    int full;   /* set when a node did not fit */
} grad_builder;

/* The node (op, type, a, b, c, arg, value): an existing equal one, or a new one appended. */
static int node(grad_builder *g, int op, int type, int a, int b, int c, double value) {
    fg_mod *m = g->m;
    for (int i = 0; i < m->n_nodes; i++) {
        const mod_node *n = &m->nodes[i];
        if (n->op == op && n->type == type && n->a == a && n->b == b && n->c == c && n->arg == -1 &&
            memcmp(&n->value, &value, sizeof value) == 0)
            return i;
    }
    if (m->n_nodes == MOD_MAX_NODES) {
        g->full = 1;
        return 0;
    }
    mod_node *n = &m->nodes[m->n_nodes];
    n->op = (uint8_t)op, n->type = (uint8_t)type, n->a = (int16_t)a, n->b = (int16_t)b, n->c = (int16_t)c;
    n->arg = -1, n->value = value;
    return m->n_nodes++;
}

/* -1 stands for a derivative that is 0 (no node). */
static int cst(grad_builder *g, double v) { return node(g, MOD_CONST, MOD_T_FLOAT, -1, -1, -1, v); }
static int op2(grad_builder *g, int op, int a, int b) { return node(g, op, MOD_T_FLOAT, a, b, -1, 0.0); }
static int add(grad_builder *g, int a, int b) { return a < 0 ? b : b < 0 ? a : op2(g, MOD_ADD, a, b); }
static int one(const grad_builder *g, int a) { return g->m->nodes[a].op == MOD_CONST && g->m->nodes[a].value == 1.0; }
static int mul(grad_builder *g, int a, int b) {
    return a < 0 || b < 0 ? -1 : one(g, a) ? b : one(g, b) ? a : op2(g, MOD_MUL, a, b);
}
static int neg(grad_builder *g, int a) { return a < 0 ? -1 : node(g, MOD_NEG, MOD_T_FLOAT, a, -1, -1, 0.0); }
static int sub(grad_builder *g, int a, int b) { return b < 0 ? a : a < 0 ? neg(g, b) : op2(g, MOD_SUB, a, b); }
/* where(c, x, y) of two derivatives (-1: 0) */
static int pick(grad_builder *g, int c, int x, int y) {
    if (x < 0 && y < 0) return -1;
    const int zero = cst(g, 0.0);
    return node(g, MOD_WHERE, MOD_T_FLOAT, c, x < 0 ? zero : x, y < 0 ? zero : y, 0.0);
}

/* The derivative of every float node up to `upto` in the seed (-1: the argument s; else a node, as if it were an
 * input), into d (-1 for 0), nodes appended to g's tree; m is the tree before any of them. */
static void derive(grad_builder *g, const fg_mod *m, int seed, int upto, int *d) {
    for (int i = 0; i <= upto && !g->full; i++) {
        const mod_node *n = &m->nodes[i];
        const int a = n->a, b = n->b, c = n->c;
        const int da = a >= 0 ? d[a] : -1, db = b >= 0 ? d[b] : -1, dc = c >= 0 ? d[c] : -1;
        d[i] = -1;
        if (n->type != MOD_T_FLOAT) continue; /* ints and bools: 0 */
        if (i == seed) {
            d[i] = cst(g, 1.0);
            continue;
        }
        switch ((mod_op)n->op) {
        case MOD_ARG: d[i] = n->arg == MOD_ARG_S && seed < 0 ? cst(g, 1.0) : -1; break;
        case MOD_ADD: d[i] = add(g, da, db); break;
        case MOD_SUB: d[i] = sub(g, da, db); break;
        case MOD_NEG: d[i] = neg(g, da); break;
        case MOD_MUL: d[i] = add(g, mul(g, da, b), mul(g, a, db)); break;
        case MOD_DIV: /* (a' - (a / b) b') / b, with the quotient node i itself */
            d[i] = sub(g, da, mul(g, i, db));
            if (d[i] >= 0) d[i] = op2(g, MOD_DIV, d[i], b);
            break;
        case MOD_EXP: d[i] = mul(g, i, da); break;
        case MOD_LOG: d[i] = da < 0 ? -1 : op2(g, MOD_DIV, da, a); break;
        case MOD_TANH: d[i] = da < 0 ? -1 : mul(g, sub(g, cst(g, 1.0), op2(g, MOD_MUL, i, i)), da); break;
        case MOD_SQRT: d[i] = da < 0 ? -1 : op2(g, MOD_DIV, da, op2(g, MOD_MUL, cst(g, 2.0), i)); break;
        case MOD_MIN:
        case MOD_MAX: {
            if (da < 0 && db < 0) break;
            const int first = node(g, n->op == MOD_MIN ? MOD_LE : MOD_GE, MOD_T_BOOL, a, b, -1, 0.0);
            d[i] = pick(g, first, da, db);
            break;
        }
        case MOD_ABS:
            if (da >= 0) d[i] = pick(g, node(g, MOD_GE, MOD_T_BOOL, a, cst(g, 0.0), -1, 0.0), da, neg(g, da));
            break;
        case MOD_WHERE: d[i] = pick(g, a, db, dc); break;
        default: break; /* constants, other loads, fg.float: 0 */
        }
    }
}

fg_status mod_grad(const fg_mod *m, fg_mod *out, int *grad, fg_error *err) {
    fg_status st = mod_check(m, err);
    if (st != FG_OK) return st;
    *out = *m;
    *grad = -1;
    if (m->score < 0) return fg_fail(err, FG_ERR_INVALID_ARGUMENT, "the mod has no score_mod to differentiate");
    grad_builder g = {out, 0};
    int d[MOD_MAX_NODES]; /* d[i]: the derivative's node of original node i, -1 for 0 */
    derive(&g, m, -1, m->score, d);
    if (!g.full) *grad = d[m->score] >= 0 ? d[m->score] : cst(&g, 0.0);
    if (g.full)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "score_mod's derivative needs more than %d nodes together with the mod "
                       "itself: simplify score_mod", MOD_MAX_NODES);
    return mod_check(out, err);
}

fg_status mod_aux_grad(const fg_mod *m, fg_mod *out, mod_grad_site *sites, int *n_sites, fg_error *err) {
    fg_status st = mod_check(m, err);
    if (st != FG_OK) return st;
    *out = *m;
    *n_sites = 0;
    if (m->score < 0) return FG_OK;
    /* the loads score_mod's result depends on */
    unsigned char need[MOD_MAX_NODES] = {0};
    need[m->score] = 1;
    for (int i = m->score; i >= 0; i--)
        if (need[i])
            for (int k = 0, o[3] = {m->nodes[i].a, m->nodes[i].b, m->nodes[i].c}; k < 3; k++)
                if (o[k] >= 0) need[o[k]] = 1;
    grad_builder g = {out, 0};
    int d[MOD_MAX_NODES];
    for (int i = 0; i <= m->score; i++) {
        const mod_node *n = &m->nodes[i];
        if (!need[i] || n->op != MOD_LOAD || !m->aux[n->arg].trainable) continue;
        if (*n_sites == MOD_MAX_GRAD_SITES)
            return fg_fail(err, FG_ERR_UNSUPPORTED, "score_mod reads trainable aux arrays at more than %d places (the "
                           "backward adds into the gradient once a place and score): read each at fewer indices",
                           MOD_MAX_GRAD_SITES);
        derive(&g, m, i, m->score, d);
        if (g.full) break;
        sites[*n_sites].load = i;
        sites[(*n_sites)++].partial = d[m->score] >= 0 ? d[m->score] : cst(&g, 0.0);
    }
    if (g.full)
        return fg_fail(err, FG_ERR_UNSUPPORTED, "the derivatives of score_mod in its trainable aux arrays need more than "
                       "%d nodes together with the mod itself: simplify score_mod", MOD_MAX_NODES);
    return mod_check(out, err);
}
